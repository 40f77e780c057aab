"""The CPU target profile: every CPU backend generates, compiles and runs the code of each x86-64 level
this host can run (and renders and compiles, without running, the levels it cannot); half-precision
types are right to the bit on every backend and target; caches never mix targets."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from bit_patterns import BIT_TYPES, BITCAST_PAIRS, assert_same_bits, bit_pattern_source, bit_pattern_tensor
from cpu_targets import EMULATED_CPU, not_runnable_levels, runnable_levels

import uopviz as uv
from uopviz.backends import BackendUnavailable, get
from uopviz.backends.target import (
    LEVELS,
    TARGET_ENVIRONMENT_VARIABLE,
    cpu_target,
    host_cpu,
    resolve_target,
    set_target,
    using_target,
)
from uopviz.core.ops import AxisType

CPU_BACKENDS = ("c", "llvm", "opencl")


def _require(backend: str) -> None:
    if not get(backend).available():
        pytest.skip(f"{backend} backend unavailable here: {get(backend).unavailable_reason()}")


# ---------------------------------------------------------------------------------------------
# the profile


def test_levels_add_features_and_registers() -> None:
    v2, v3, v4 = (resolve_target(level) for level in LEVELS)
    assert v2.features < v3.features < v4.features
    assert (v2.vector_bytes, v3.vector_bytes, v4.vector_bytes) == (16, 32, 64)
    assert (v2.vector_registers, v3.vector_registers, v4.vector_registers) == (16, 16, 32)
    assert not v2.has_fma and v3.has_fma and v4.has_fma
    assert not v2.native_float16 and v3.native_float16
    assert len({v2.key, v3.key, v4.key}) == 3


def test_keys_name_features_never_the_word_native() -> None:
    native = resolve_target("native")
    assert "native" not in native.key and native.key.startswith(str(native.level or ""))
    for level in LEVELS:
        assert resolve_target(level).key.startswith(level + "[")
        assert resolve_target(level).key != native.key  # native also records the host's tuning


def test_the_host_runs_its_own_level_and_the_native_target() -> None:
    native = resolve_target("native")
    assert native.runs_here and native.why_not_here() is None
    if host_cpu().level is not None:
        assert resolve_target(host_cpu().level).runs_here
        assert native.vector_bytes == resolve_target(host_cpu().level).vector_bytes


def test_choice_order_parameter_then_environment_then_native(monkeypatch) -> None:
    monkeypatch.setenv(TARGET_ENVIRONMENT_VARIABLE, "x86-64-v2")
    set_target(None)
    assert cpu_target().name == "x86-64-v2"
    with using_target("x86-64-v3") as chosen:
        assert chosen.name == cpu_target().name == "x86-64-v3"
    assert cpu_target().name == "x86-64-v2"
    monkeypatch.delenv(TARGET_ENVIRONMENT_VARIABLE)
    assert cpu_target().name == "native"


def test_an_unknown_target_is_a_clear_error_and_changes_nothing() -> None:
    before = cpu_target()
    with pytest.raises(ValueError, match="unknown CPU target 'avx9'.*x86-64-v3"):
        set_target("avx9")
    assert cpu_target() == before


def test_the_describe_line_names_registers_and_cores() -> None:
    text = resolve_target("x86-64-v3").describe()
    assert "16 × 256-bit" in text and "FMA yes" in text and f"{host_cpu().cores} cores" in text


# ---------------------------------------------------------------------------------------------
# the backends read it


@pytest.mark.parametrize("level", LEVELS)
def test_the_heuristic_tiles_for_the_targets_registers(level: str) -> None:
    _require("c")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 96)).astype(np.float32), rng.standard_normal((96, 128)).astype(np.float32)
    with using_target(level) as target:
        program = uv.compile([uv.Tensor(a) @ uv.Tensor(b)], backend="c", opts="heuristic", build=False)
        kernel = program.kernels[0]
        lanes = 2 * target.vector_bytes // 4  # two registers of float32 lanes
        assert (lanes, AxisType.UPCAST) in kernel.axes, (level, kernel.name)
        assert get("c").register_bytes == target.vector_bytes


@pytest.mark.parametrize("level", LEVELS)
def test_the_compilers_are_told_the_target(level: str) -> None:
    _require("c")
    _require("llvm")
    from uopviz.backends.llvm import llvm_cpu_and_features

    with using_target(level) as target:
        assert f"-march={level}" in get("c").flags()
        cpu, features = llvm_cpu_and_features(target)
        assert cpu == level and "+sse4.2" in features.split(",")
        assert ("+avx512f" in features.split(",")) == (level == "x86-64-v4")
        assert target.key in get("c").device and target.key in get("llvm").device


def _elementwise_program(backend: str):
    x = np.linspace(-2, 2, 37, dtype=np.float32)
    return x, uv.compile([(uv.Tensor(x) * 3 + 1).exp2()], backend=backend, opts="heuristic")


@pytest.mark.parametrize("backend", ["c", "llvm"])
def test_compiled_code_is_cached_per_target(backend: str) -> None:
    _require(backend)
    sources = {}
    for level in runnable_levels():
        with using_target(level):
            x, program = _elementwise_program(backend)
            kernel = program.kernels[0]
            compiled = get(backend).compile(kernel.source(backend), kernel.name)
            sources[level] = compiled
            np.testing.assert_allclose(program.run()[0], np.exp2(x * 3 + 1), rtol=1e-5)
    assert len({id(c) for c in sources.values()}) == len(sources)
    if backend == "c":
        assert len({c.library_path for c in sources.values()}) == len(sources)


@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize("level", not_runnable_levels() or ["none"])
def test_a_level_the_host_lacks_compiles_but_refuses_to_run(backend: str, level: str) -> None:
    if level == "none":
        pytest.skip("this host runs every x86-64 level (nothing it lacks to refuse)")
    _require(backend)
    with using_target(level):
        x, program = _elementwise_program(backend)
        kernel = program.kernels[0]
        compiled = get(backend).compile(kernel.source(backend), kernel.name)  # builds for the level
        with pytest.raises(BackendUnavailable, match=f"target {level} needs"):
            compiled(np.empty(37, np.float32), x)


# ---------------------------------------------------------------------------------------------
# half-precision types to the bit, on every backend and runnable target

_EDGES = np.array(
    [0.0, -0.0, 1.0, -1.0, 1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-11, 1 + 3 * 2**-11, 65504.0, 65519.0, 65520.0,
     2.0**-24, 2.0**-25, 3 * 2.0**-25, 2.0**-14, 1e-8, 1e-40, 3.0e38, np.inf, -np.inf, np.nan, -np.nan,
     0.1, 1 / 3, 1e4, -7.5e-3],
    dtype=np.float32,
)


def _inputs(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.concatenate([_EDGES, (rng.standard_normal(101) * 100).astype(np.float32)])


def _same_bits(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    assert actual.shape == expected.shape, what
    nan = np.isnan(expected)
    assert np.array_equal(np.isnan(actual), nan), what
    wanted = expected[~nan].astype(np.float32)
    mismatch = np.flatnonzero(actual[~nan].view(np.uint32) != wanted.view(np.uint32))
    assert mismatch.size == 0, f"{what}: {actual[~nan][mismatch][:5]} != {expected[~nan][mismatch][:5]}"


HALF_TYPES = {
    "float16": (uv.dtypes.float16, np.float16),
    "bfloat16": (uv.dtypes.bfloat16, ml_dtypes.bfloat16),
}


@pytest.mark.parametrize("opts", [None, "heuristic"])
@pytest.mark.parametrize("half", list(HALF_TYPES))
@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("level", ["native", *runnable_levels()])
def test_half_types_match_a_bit_level_reference(level: str, backend: str, half: str, opts) -> None:
    _require(backend)
    if backend == "opencl" and level != "native":
        pytest.skip("pocl fixes its CPU target when its device is made (device_target): .ci/run "
                    "runs this file again under UOPVIZ_TARGET=x86-64-v3 and x86-64-v2")
    dtype, reference_type = HALF_TYPES[half]
    x = _inputs(len(level) + len(backend))
    wide = x.astype(np.float64) * 1.0000001  # float64 → half rounds once, not through float32
    with np.errstate(over="ignore"):
        y = x.astype(reference_type)
    with using_target(level):
        held = uv.Tensor(x).cast(dtype)
        outputs = [
            held.cast(uv.dtypes.float32),
            (held * held).cast(uv.dtypes.float32),
            (held + 0.3).cast(uv.dtypes.float32),
            (-held).cast(uv.dtypes.float32),
            uv.Tensor(wide).cast(dtype).cast(uv.dtypes.float32),
            held.cast(uv.dtypes.float64),
        ]
        results = uv.compile(outputs, backend=backend, opts=opts).run()
    point3 = np.array(0.3, dtype=np.float32).astype(reference_type)
    with np.errstate(over="ignore", invalid="ignore"):
        expected = [y, y * y, y + point3, -y, wide.astype(reference_type), y]
    names = ["cast", "square", "add", "negate", "float64 cast", "to float64"]
    for name, actual, wanted in zip(names, results, expected):
        actual = np.asarray(actual)
        if name == "to float64":
            assert np.array_equal(actual, wanted.astype(np.float64), equal_nan=True), name
            continue
        where = f"{half} {name} on {backend}/{level}"
        _same_bits(actual.astype(np.float32), wanted.astype(np.float32), where)


# ---------------------------------------------------------------------------------------------
# rendering apart from compiling


def test_viewing_source_never_compiles(monkeypatch) -> None:
    x = np.arange(64, dtype=np.float32).reshape(8, 8)
    kernel = uv.compile([uv.Tensor(x).sum(axis=1)], backend="c", opts="heuristic", build=False).kernels[0]

    def refuse(self, source, name):
        raise AssertionError(f"{self.name} compiled {name} to show its source")

    for name in ("c", "llvm", "opencl", "cuda"):
        monkeypatch.setattr(type(get(name)), "compile", refuse)
    for name in ("c", "llvm", "opencl", "cuda"):  # CUDA and OpenCL source on any machine
        assert kernel.name in kernel.source(name)
    lowered = kernel.lower("cuda")
    assert [p.slot for p in lowered.params] == [0, 1]
    with pytest.raises(AssertionError, match="cuda compiled"):
        lowered.compiled  # noqa: B018 - compiling happens on first use, here


# ---------------------------------------------------------------------------------------------
# bitcast: the bits reinterpreted, between every pair of types of one size, on every backend

@pytest.mark.parametrize("opts", [None, "heuristic"])
@pytest.mark.parametrize("shape", [(7,), (3, 5), (33, 64)])
@pytest.mark.parametrize("backend", ["python", *CPU_BACKENDS])
def test_bitcast_reinterprets_the_bits_between_every_pair_of_one_size(backend: str, shape, opts) -> None:
    _require(backend)
    if EMULATED_CPU and backend == "opencl" and shape == (33, 64):
        pytest.skip(f"on qemu's emulated {EMULATED_CPU}: pocl's compiler, itself emulated, takes over "
                    "300 s for this shape's kernels (the smaller shapes run here; all run natively "
                    "under x86-64-v3 and -v2)")
    rng = np.random.default_rng(len(shape) * 31 + shape[-1])
    sources = {name: bit_pattern_source(name, shape, rng) for name in BIT_TYPES}
    outputs = [bit_pattern_tensor(sources[s], s).bitcast(t) for s, t in BITCAST_PAIRS]
    results = uv.compile(outputs, backend=backend, opts=opts).run()
    for (s, t), got in zip(BITCAST_PAIRS, results):
        assert_same_bits(got, sources[s], s, t, f"{s} -> {t} on {backend} opts={opts}")
