"""The C backend: every hand-made linear program against numpy, integer semantics, rendering details."""

from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest
from cpu_targets import target_params

from uopviz.backends import get
from uopviz.backends.base import CompileError, KernelMeta, RenderError
from uopviz.backends.c import find_c_compiler, openmp_works
from uopviz.core.dtype import dtypes
from uopviz.core.ops import Ops
from uopviz.core.uop import UOp

from . import linear_programs as lp

pytestmark = pytest.mark.skipif(find_c_compiler() is None, reason="no C compiler (gcc/clang) on this machine")


@pytest.mark.parametrize("case", lp.correctness_cases(), ids=repr)
def test_linear_program_matches_numpy(case: lp.LinearCase) -> None:
    for seed in (0, 1):
        lp.assert_case_matches("c", case, seed)


@pytest.mark.parametrize("case", lp.integer_cases(), ids=repr)
def test_integer_semantics(case: lp.LinearCase) -> None:
    lp.assert_case_matches("c", case)


# ---------------------------------------------------------------------------------------------
# what the source looks like


def test_source_declares_restrict_pointers_and_const_inputs() -> None:
    source = get("c").render(lp.elementwise(8).linear)
    assert (
        "void E_8(float* restrict data0, const float* restrict data1, const float* restrict data2)" in source
    )
    assert KernelMeta.from_source(source).params[0].written
    assert not KernelMeta.from_source(source).params[1].written


def test_thread_range_becomes_an_openmp_loop_and_registers_are_private() -> None:
    source = get("c").render(lp.thread_range(2, 8).linear)
    lines = source.splitlines()
    pragma = next(i for i, line in enumerate(lines) if "#pragma omp parallel for" in line)
    assert "// THREAD" in lines[pragma + 1]
    # a scalar accumulator indexed by constants only is a plain variable (kept in a register)
    declaration = next(i for i, line in enumerate(lines) if line.strip() == "float acc0_0;")
    assert declaration > pragma + 1, "a REG accumulator must be declared inside the parallel loop"
    assert "acc0[" not in source


def test_vector_lanes_use_gcc_vectors_and_contiguous_memcpy() -> None:
    source = get("c").render(lp.vector_lanes(4).linear)
    assert "typedef float float32x4 __attribute__((vector_size(16)));" in source
    assert "load_float32x4(data1 + alu0)" in source
    assert "indexx4" not in source, "contiguous addresses need no index vector"


def test_gather_reads_each_lane() -> None:
    source = get("c").render(lp.vector_gather(8, 16).linear)
    assert "load_float32x4" not in source
    assert "((float32x4){data1[" in source


@pytest.mark.skipif(
    find_c_compiler() is None or openmp_works(find_c_compiler()) is not None,
    reason="OpenMP does not work with this compiler; THREAD loops run sequentially",
)
def test_thread_range_runs_on_several_threads() -> None:
    b = lp.Builder()
    out = b.param(0, 64, dtypes.int32)
    t = b.loop(64, lp.AxisType.THREAD)
    thread = b.emit(UOp(Ops.CUSTOM, (), ("omp_get_thread_num()", dtypes.int32)))
    b.end(t, b.store(out, t, thread))
    backend = get("c")
    kernel = backend.compile(backend.render(b.linear("thread_ids")), "thread_ids")
    ids = np.full(64, -1, np.int32)
    kernel(ids)
    assert (ids >= 0).all()
    import os

    if len(os.sched_getaffinity(0)) > 1 and os.environ.get("OMP_NUM_THREADS", "2") != "1":
        assert len(set(ids.tolist())) > 1, f"every iteration ran on thread {ids[0]}"


# ---------------------------------------------------------------------------------------------
# errors


def test_end_that_closes_the_wrong_loop_is_reported() -> None:
    b = lp.Builder()
    out = b.param(0, 4)
    outer = b.loop(2)
    inner = b.loop(2)
    b.store(out, outer * lp.idx(2) + inner, lp.const(dtypes.float32, 1.0))
    b.end(outer)
    b.end(inner)
    with pytest.raises(RenderError, match="END closes range .* innermost open block is RANGE"):
        get("c").render(b.linear("bad_nesting"))


def test_value_used_after_its_loop_ended_is_reported() -> None:
    b = lp.Builder()
    out, a = b.param(0, 4), b.param(1, 4)
    i = b.loop(4)
    value = b.load(a, i)
    b.end(i)
    b.store(out, lp.idx(0), value)
    with pytest.raises(RenderError, match="defined inside a loop or IF that is already closed"):
        get("c").render(b.linear("escaping_value"))


def test_missing_end_is_reported() -> None:
    b = lp.Builder()
    out = b.param(0, 4)
    i = b.loop(4)
    b.store(out, i, lp.const(dtypes.float32, 0.0))
    with pytest.raises(RenderError, match="ends with an open range"):
        get("c").render(b.linear("open_loop"))


def test_special_is_refused_on_a_cpu_backend() -> None:
    b = lp.Builder()
    out = b.param(0, 4)
    g = b.emit(UOp(Ops.SPECIAL, (lp.idx(4),), "gidx0"))
    b.store(out, g, lp.const(dtypes.float32, 0.0))
    with pytest.raises(RenderError, match="SPECIAL 'gidx0' needs a GPU backend"):
        get("c").render(b.linear("gpu_only"))


def test_param_slots_must_be_dense() -> None:
    b = lp.Builder()
    out = b.param(1, 4)
    b.store(out, lp.idx(0), lp.const(dtypes.float32, 0.0))
    with pytest.raises(RenderError, match=r"PARAM slots \[1\]"):
        get("c").render(b.linear("gap"))


def test_compile_error_quotes_the_compiler() -> None:
    b = lp.Builder()
    out = b.param(0, 4)
    b.emit(UOp(Ops.CUSTOM, (out,), ("{0}[0] = undefined_name_here", dtypes.void)))
    backend = get("c")
    with pytest.raises(CompileError, match="undefined_name_here") as info:
        backend.compile(backend.render(b.linear("broken")), "broken")
    assert "broken" in str(info.value)


def test_wrong_arguments_are_reported() -> None:
    case = lp.elementwise(8)
    backend = get("c")
    kernel = backend.compile(backend.render(case.linear), case.linear.arg)
    good = case.make_arrays(np.random.default_rng(0))
    with pytest.raises(TypeError, match="takes 3 arrays"):
        kernel(*good[:2])
    with pytest.raises(TypeError, match="argument 1 must have dtype float32, got float64"):
        kernel(good[0], good[1].astype(np.float64), good[2])
    with pytest.raises(ValueError, match="argument 2 needs 8 elements, got 4"):
        kernel(good[0], good[1], good[2][:4])


# ---------------------------------------------------------------------------------------------
# the disk cache


def test_compiled_library_is_cached_on_disk(tmp_path, monkeypatch) -> None:
    from uopviz.backends.c import CBackend

    monkeypatch.setenv("UOPVIZ_CACHE", str(tmp_path))
    case = lp.elementwise(16)
    first = CBackend()
    source = first.render(case.linear)
    kernel = first.compile(source, case.linear.arg)
    assert kernel.extra["cached"] is False
    assert kernel.library_path.startswith(str(tmp_path))
    again = CBackend().compile(source, case.linear.arg)  # a fresh backend: only the disk remembers
    assert again.extra["cached"] is True and again.library_path == kernel.library_path
    changed = CBackend().compile(source.replace("2.0f", "3.0f"), case.linear.arg)
    assert changed.extra["cached"] is False and changed.library_path != kernel.library_path
    arrays = case.make_arrays(np.random.default_rng(3))
    changed(*arrays)
    np.testing.assert_allclose(arrays[0], arrays[1] * 3 + arrays[2], rtol=1e-6)
    assert isinstance(ctypes.CDLL(kernel.library_path), ctypes.CDLL)


# ---------------------------------------------------------------------------------------------
# what every backend of this family declares


@pytest.mark.parametrize("name", ["c", "llvm", "opencl", "cuda"])
def test_backend_declarations(name: str) -> None:
    from uopviz.backends.base import TensorCore

    try:
        backend = get(name)
    except Exception as error:  # noqa: BLE001 - a missing optional package
        pytest.skip(f"{name} cannot be made here: {error}")
    assert backend.name == name
    assert {Ops.ADD, Ops.MUL, Ops.CMP_LT, Ops.WHERE, Ops.IDIV, Ops.MOD} <= backend.supported_ops
    assert all(w >= 2 and w & (w - 1) == 0 for w in backend.vector_widths)
    assert isinstance(backend.has_local, bool) and isinstance(backend.has_threads, bool)
    assert len(backend.tensor_cores) >= 1 and all(isinstance(tc, TensorCore) for tc in backend.tensor_cores)
    assert backend.available() == (backend.unavailable_reason() is None)
    if name == "cuda":
        assert backend.tensor_cores[0].threads == 32 and backend.vector_widths == ()
    else:
        assert all(tc.threads == 1 for tc in backend.tensor_cores), (
            "CPU-style backends emulate one-thread tiles"
        )


def test_vectors_made_of_other_vectors_lanes_are_copied_as_runs() -> None:
    # float32 sin narrows its quadrant from two int64x8 halves into one int32x16 and takes float32x8
    # halves of a float32x16: rendered as copies of whole runs of lanes (a literal of 16 lane reads
    # compiled to inserts and extracts through the stack), with the same values
    import uopviz as uv

    x = np.random.default_rng(0).standard_normal(1 << 16).astype(np.float32) * 100
    program = uv.compile([(uv.Tensor(x) * 2 + 1).sin()], backend="c", opts="heuristic")
    source = program.kernels[-1].lower("c").source
    assert "__builtin_memcpy((char*)&join" in source
    assert "(float32x8){alu" not in source  # the float32x16's halves are not read lane by lane
    argument = (x * np.float32(2) + np.float32(1)).astype(np.float64)  # (x·2 is exact: one rounding)
    np.testing.assert_allclose(program.run()[0], np.sin(argument), rtol=0, atol=2.5e-7)


def _matmul_source(a: np.ndarray, b: np.ndarray, opts, target: str):
    """The C source of ``a @ b`` with ``opts`` on ``target`` (its values checked) and the target."""
    import uopviz as uv
    from uopviz.backends.target import using_target

    with using_target(target) as profile:
        program = uv.compile(uv.Tensor(a) @ uv.Tensor(b), backend="c", opts=opts)
        source = program.kernels[0].source("c")
        np.testing.assert_allclose(program.run()[0], a @ b, rtol=1e-4, atol=1e-4)
    return source, profile


@pytest.mark.parametrize("target", target_params("native", "x86-64-v3", "x86-64-v2"))
@pytest.mark.parametrize("shape", [(24, 144, 56), (16, 40, 24), (8, 9, 8)])
def test_lanes_of_one_vector_repeated_are_one_shuffle(target, shape):
    # an 8x8 register tile on 16-lane registers: each vector holds two output rows of 8 columns, so
    # A's two values are repeated 8 times each and B's row twice. One __builtin_shufflevector each
    # (copies through the stack stalled the loop: MobileNet-v2's 1x1 convs 12x slower than LLVM)
    import uopviz as uv

    if "c" not in uv.backends.available():
        pytest.skip("no C compiler")
    m, k, n = shape
    rng = np.random.default_rng(sum(shape))
    a, b = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
    opts = [[uv.Opt(uv.OptOp.SPLIT, 1, (8, uv.AxisType.UPCAST, False)),
             uv.Opt(uv.OptOp.SPLIT, 0, (8, uv.AxisType.UPCAST, False))]]
    source, profile = _matmul_source(a, b, opts, target)
    if profile.vector_bytes // 4 > 8:  # registers wider than a row of the tile: rows share vectors
        assert "__builtin_shufflevector" in source


@pytest.mark.parametrize(
    "given,expected",
    [({}, "20000"), ({"GOMP_SPINCOUNT": "7"}, "7"), ({"OMP_WAIT_POLICY": "active"}, None)],
)
def test_libgomp_spins_briefly_unless_the_user_says_otherwise(given, expected):
    # libgomp's default spin (300,000 iterations) lets a THREAD kernel's threads wait out another
    # process's time slice (ResNet-50 on C with a busy core: 207 ms, against 124 ms at 20,000)
    import json
    import os
    import subprocess
    import sys

    environment = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    probe = "import os, json, uopviz.backends.toolchain; print(json.dumps(os.environ.get('GOMP_SPINCOUNT')))"
    out = subprocess.run([sys.executable, "-c", probe], env={**environment, **given}, capture_output=True,
                         text=True, check=True).stdout
    assert json.loads(out) == expected


@pytest.mark.parametrize("target", target_params("native", "x86-64-v3", "x86-64-v2"))
@pytest.mark.parametrize("shape", [(64, 40), (128, 1000), (12, 16)])
def test_a_vector_widened_or_halved_from_one_vector_is_shuffled_in_registers(target, shape):
    # a matrix-vector product by 8 outputs x 4 steps: the 4 loaded values are broadcast over
    # 8 lanes each (a 4-lane vector widened by doubling, which GCC keeps in registers, not
    # through the stack) and the accumulator's halves are summed after the loop (a shuffle each:
    # copying them kept the accumulator on the stack for the whole loop; the classifier of
    # MobileNet-v2: 376 -> 255 us)
    import uopviz as uv

    if "c" not in uv.backends.available():
        pytest.skip("no C compiler")
    k, n = shape
    rng = np.random.default_rng(k + n)
    a, b = rng.standard_normal((1, k), np.float32), rng.standard_normal((k, n), np.float32)
    opts = [[uv.Opt(uv.OptOp.SPLIT, 0, (8, uv.AxisType.UPCAST, False)),
             uv.Opt(uv.OptOp.SPLIT, 1, (4, uv.AxisType.UNROLL, False))]]
    source, profile = _matmul_source(a, b, opts, target)
    shuffled = source.split("#if defined(__clang__) || __GNUC__ >= 12")[1:]
    assert shuffled or profile.vector_bytes // 4 <= 8, source  # 8-lane registers: no vector is joined
    for branch in shuffled:  # the shuffle branch copies nothing; the #else branch (GCC < 12) does
        assert "__builtin_memcpy" not in branch.split("#else")[0]
    if profile.vector_bytes // 4 >= 16:  # 32 lanes in 16-lane registers: 4 values widened to 16
        assert "wide0 = __builtin_shufflevector(val0, val0, 0, 1, 2, 3, 4, 5, 6, 7);" in source


@pytest.mark.parametrize("target", target_params("native", "x86-64-v3", "x86-64-v2"))
@pytest.mark.parametrize("size", [1 << 16, 3 * 4096])
def test_vectors_of_constants_are_static_so_the_openmp_body_sees_their_lanes(target, size):
    # declared before the THREAD loop, a vector of constants is passed to the outlined OpenMP body
    # through a struct, where GCC no longer folds it: exp's shifts by a constant became variable
    # shifts with masks and a multiply by -1 a vpmulld. Static const vectors stay constants.
    import uopviz as uv
    from uopviz.backends.target import using_target

    if "c" not in uv.backends.available():
        pytest.skip("no C compiler")
    x = np.random.default_rng(size).uniform(-40, 40, size).astype(np.float32)  # exp(2x+1) finite
    with using_target(target):
        program = uv.compile([(uv.Tensor(x) * 2 + 1).exp()], backend="c", opts="heuristic")
        source = program.kernels[0].source("c")
        out = program.run()[0]
    expected = np.exp((x * np.float32(2) + np.float32(1)).astype(np.float64))  # the argument rounded once
    np.testing.assert_allclose(out, expected, rtol=2e-6)
    body = source.split("{", 1)[1]
    assert "static const float32x" in body
    constant = re.compile(r"^\s*float32x\d+ \w+ = \(\(float32x\d+\)\{[-+0-9.ef, ]+\}\);$")
    assert not [line for line in body.splitlines() if constant.match(line)]


@pytest.mark.parametrize("value", [-(2**63), 2**63 - 1, -(2**31), 2**31])
def test_extreme_index_constants_are_written_as_c_constants_that_fit(value: int) -> None:
    """An index constant of -2**63 (a max reduction's identity over index values) was written
    ``-9223372036854775808LL``: the literal 2**63 does not fit a signed 64-bit constant, gcc warns
    and makes it unsigned.  It is written as a sum of constants that fit, and the kernel stores it."""
    b = lp.Builder()
    out = b.param(0, 1, dtypes.int64)
    i = b.loop(1)
    b.end(i, b.store(out, i, UOp(Ops.CAST, (lp.idx(value),), dtypes.int64)))
    case = lp.LinearCase(f"extreme_index_{value}", b.linear("extreme_index"),
                         lambda rng: [np.zeros(1, np.int64)],
                         lambda arrays: {0: np.array([value], np.int64)}, exact=True)
    assert "9223372036854775808" not in get("c").render(case.linear)
    lp.assert_case_matches("c", case)


def test_a_vector_store_whose_constant_gate_keeps_its_first_lanes_copies_those_lanes() -> None:
    """A row padded to a whole register stores its real lanes as one copy of their bytes, not one
    conditional store per lane; the lanes past the row write nothing (the cases' values)."""
    source = get("c").render(lp.prefix_gated_store(3, 14, 16).linear)
    assert "store_float32x16_first14(" in source and "__builtin_memcpy(p, &v, 56)" in source
    assert not re.search(r"if \(.*\) data0\[", source)


@pytest.mark.parametrize("target", target_params("x86-64-v4", "x86-64-v3"))
@pytest.mark.parametrize("rows,width", [(5, 14), (3, 9), (1, 15)])
def test_a_vector_load_whose_constant_gate_keeps_its_first_lanes_is_one_masked_load_on_avx512(
    target, rows, width
) -> None:
    """A row padded to a whole register reads its real lanes with AVX-512's masked load: no test of
    the buffer's end (the last row's padded lanes lie past it) and no read per lane behind it; the
    lanes off take the gate's other value.  Without AVX-512 the whole-vector read behind that test
    stays."""
    from uopviz.backends.target import using_target

    case = lp.prefix_gated_load(rows, width, 16)
    with using_target(target) as profile:
        source = get("c").render(case.linear)
        lp.assert_case_matches("c", case)
    body = source.split("{", 1)[1]
    masked = "avx512f" in profile.features
    assert ("__builtin_ia32_loadups512_mask(" in source) == masked, source
    assert (f"(unsigned short){(1 << width) - 1:#x}" in source) == masked
    if masked:
        assert "<= " not in body  # no test of the buffer's end


def test_the_compiler_probes_are_kept_in_the_persistent_cache(tmp_path, monkeypatch):
    """The compiler's version and its OpenMP probe run once per compiler (path, size, stamp), not
    once per process; a damaged entry is probed again."""
    import subprocess

    from uopviz.backends import toolchain

    monkeypatch.setenv("UOPVIZ_CACHE", str(tmp_path))
    compiler = find_c_compiler()
    runs = []
    run = subprocess.run

    def counted(command, *arguments, **keywords):
        runs.append(command[1] if len(command) > 1 else command[0])
        return run(command, *arguments, **keywords)

    monkeypatch.setattr(toolchain.subprocess, "run", counted)
    first = toolchain._probed(compiler)
    assert len(runs) == 2  # --version and the OpenMP probe's build
    assert first == {"version": toolchain._version(compiler), "openmp": toolchain._openmp_probe(compiler)}
    runs.clear()
    again = toolchain._probed(compiler)
    assert again == first and runs == [], "the second process asked the compiler again"
    (entry,) = (tmp_path / "toolchain").glob("*.json")
    entry.write_text("{not json")
    assert toolchain._probed(compiler) == first and len(runs) == 2
    assert toolchain._probed(compiler) == first and len(runs) == 2, "the damaged entry was not written again"


# ---------------------------------------------------------------------------------------------
# sources built together (CBackend.compile_together; SourceBuilds, the Render stage's and the worker's)


def _check_values(case: lp.LinearCase, kernel, seed: int) -> None:
    arrays = case.make_arrays(np.random.default_rng(seed))
    kernel(*arrays)
    for slot, expected in case.expected(arrays).items():
        np.testing.assert_allclose(arrays[slot], expected, rtol=case.rtol, atol=case.atol)


def test_sources_built_together_share_one_library_cached_under_each_key(tmp_path, monkeypatch) -> None:
    import os

    from uopviz.backends.c import CBackend

    monkeypatch.setenv("UOPVIZ_CACHE", str(tmp_path))
    cases = [lp.elementwise(16), lp.reduction(4, 32), lp.elementwise(40), lp.reduction(3, 7)]
    backend = CBackend()
    builds = [(backend.render(case.linear), case.linear.arg) for case in cases]
    kernels = backend.compile_together([*builds, builds[0]])  # one source twice: built once
    assert len(kernels) == 5 and kernels[4] is kernels[0]
    assert {kernel.extra["built_with"] for kernel in kernels} == {3}
    assert not any(kernel.extra["cached"] for kernel in kernels)
    assert len({kernel.library_path for kernel in kernels}) == 4  # one entry per source ...
    assert len({os.stat(kernel.library_path).st_ino for kernel in kernels}) == 1  # ... one library
    for seed, (case, kernel) in enumerate(zip(cases, kernels)):
        _check_values(case, kernel, seed)
    fresh = CBackend()  # only the disk remembers: each source is found under its own key
    again = [fresh.compile(source, name) for source, name in builds]
    assert all(kernel.extra["cached"] and "built_with" not in kernel.extra for kernel in again)
    for seed, (case, kernel) in enumerate(zip(cases, again)):
        _check_values(case, kernel, seed + 10)
    assert not [p for p in (tmp_path / "c").iterdir() if p.name.startswith(".")]  # no scratch left


def test_kernels_of_one_name_are_built_in_libraries_of_their_own(tmp_path, monkeypatch) -> None:
    from uopviz.backends.c import CBackend

    monkeypatch.setenv("UOPVIZ_CACHE", str(tmp_path))
    twice, other = lp.elementwise(24), lp.reduction(5, 9)
    backend = CBackend()
    source = backend.render(twice.linear)
    changed = source.replace("2.0f", "3.0f")  # the same function name, another body
    assert changed != source
    builds = [(source, twice.linear.arg), (changed, twice.linear.arg), (backend.render(other.linear), "r")]
    first, second, third = backend.compile_together(builds)
    assert first.library_path != second.library_path
    assert first.extra["built_with"] == 1 and third.extra["built_with"] == 1  # one library of two
    assert "built_with" not in second.extra  # a group of one is an ordinary build
    _check_values(twice, first, 0)
    _check_values(other, third, 1)
    arrays = twice.make_arrays(np.random.default_rng(2))
    second(*arrays)
    np.testing.assert_allclose(arrays[0], arrays[1] * 3 + arrays[2], rtol=1e-6)


def test_a_source_that_does_not_compile_among_others_names_its_own_kernel(tmp_path, monkeypatch) -> None:
    from uopviz.backends.c import CBackend

    monkeypatch.setenv("UOPVIZ_CACHE", str(tmp_path))
    good, bad = lp.elementwise(12), lp.reduction(2, 6)
    backend = CBackend()
    broken = backend.render(bad.linear) + "\nthis is not C;\n"
    with pytest.raises(CompileError, match=r"kernel 'broken_one'") as caught:
        backend.compile_together([(backend.render(good.linear), good.linear.arg), (broken, "broken_one")])
    assert "this is not C" in caught.value.source
    kernel = CBackend().compile(backend.render(good.linear), good.linear.arg)  # only the disk remembers
    assert kernel.extra["cached"] is True  # built alone before the broken one failed
    _check_values(good, kernel, 0)


def test_a_program_s_builds_go_to_the_compiler_a_few_sources_at_a_time(tmp_path, monkeypatch) -> None:
    from uopviz.backends.builds import SourceBuilds
    from uopviz.backends.c import CBackend

    monkeypatch.setenv("UOPVIZ_CACHE", str(tmp_path))
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    backend = CBackend()
    calls: list[int] = []  # how many sources each build took
    together, alone = backend.compile_together, backend.compile_alongside

    def counted_together(builds):
        calls.append(len(builds))
        return together(builds)

    def counted_alone(source, name):
        calls.append(1)
        return alone(source, name)

    monkeypatch.setattr(backend, "compile_together", counted_together)
    monkeypatch.setattr(backend, "compile_alongside", counted_alone)
    cases = [lp.elementwise(n) for n in (3, 5, 7, 9, 11, 13, 15)]
    with SourceBuilds(backend) as builds:
        for case in cases:
            builds.submit(backend.render(case.linear), case.linear.arg)
        compiled = builds.results()
    # four as soon as they were submitted; the last three shared out between the two cores
    assert calls[0] == backend.sources_per_build == 4 and sorted(calls[1:]) == [1, 2]
    for seed, case in enumerate(cases):
        _check_values(case, compiled[backend.render(case.linear), case.linear.arg], seed)


def test_sources_built_together_are_copied_where_the_cache_has_no_hard_links(tmp_path, monkeypatch) -> None:
    import os

    from uopviz.backends.c import CBackend

    monkeypatch.setenv("UOPVIZ_CACHE", str(tmp_path))

    def no_links(*args, **kwargs):
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    cases = [lp.elementwise(6), lp.reduction(2, 5)]
    backend = CBackend()
    kernels = backend.compile_together([(backend.render(case.linear), case.linear.arg) for case in cases])
    assert len({os.stat(kernel.library_path).st_ino for kernel in kernels}) == 2  # a copy each
    for seed, (case, kernel) in enumerate(zip(cases, kernels)):
        _check_values(case, kernel, seed)


def _machine_code(library: str, function: str) -> list[list[str]]:
    """The instructions of ``function`` and of the parallel regions OpenMP outlined from it, as
    objdump gives them: addresses, the outlined functions' numbers and alignment padding left out."""
    import subprocess

    listing = subprocess.run(["objdump", "-d", "--no-show-raw-insn", library], capture_output=True,
                             text=True, check=True).stdout
    functions: dict[str, list[str]] = {}
    current = None
    for line in listing.splitlines():
        start = re.match(r"^[0-9a-f]+ <(.+)>:$", line)
        if start:
            current = functions.setdefault(start.group(1), [])
            continue
        if current is None or "\t" not in line:
            continue
        instruction = line.split("\t", 1)[1].strip()
        if instruction.startswith(("nop", "xchg   %ax,%ax", "cs nopw", "data16")):
            continue  # padding to the next function's alignment
        instruction = re.sub(r"[0-9a-f]+ <[^>]*>", "<address>", instruction)
        current.append(re.sub(r"0x[0-9a-f]+\(%rip\)", "<rip>", instruction))
    return [code for name, code in sorted(functions.items())
            if name == function or re.fullmatch(re.escape(function) + r"\._omp_fn\.\d+", name)]


def test_kernels_built_in_one_unit_have_the_machine_code_they_have_built_alone(tmp_path, monkeypatch) -> None:
    import shutil

    from uopviz.backends.c import CBackend, shares_a_unit

    if shutil.which("objdump") is None:
        pytest.skip("objdump (binutils) is not installed: the machine code cannot be compared")
    cases = [case for case in [*lp.correctness_cases(), *lp.integer_cases()] if "wmma" not in case.tags
             and case.tensor_core is None]
    backend = CBackend()
    monkeypatch.setenv("UOPVIZ_CACHE", str(tmp_path / "alone"))
    alone = {}
    for case in cases:  # alone first: a case this compiler cannot build (clang 14's _Float16) is left out
        source = backend.render(case.linear)
        try:
            alone[case.name] = CBackend().compile(source, case.linear.arg)
        except CompileError:
            continue
    cases = [case for case in cases if case.name in alone]
    builds = [(backend.render(case.linear), case.linear.arg) for case in cases]
    assert len(cases) >= 20 and sum(shares_a_unit(source) for source, _ in builds) >= len(builds) // 2
    monkeypatch.setenv("UOPVIZ_CACHE", str(tmp_path / "together"))
    together = backend.compile_together(builds)
    assert any(kernel.extra.get("built_with", 0) > 0 for kernel in together)
    for case, kernel in zip(cases, together):
        expected = _machine_code(alone[case.name].library_path, kernel.name)
        assert expected and _machine_code(kernel.library_path, kernel.name) == expected, case.name
    for seed, (case, kernel) in enumerate(zip(cases, together)):
        _check_values(case, kernel, seed)


def test_what_keeps_a_source_out_of_a_shared_unit() -> None:
    from uopviz.backends.c import CBackend, one_unit, shares_a_unit

    source = CBackend().render(lp.vector_lanes(4).linear)
    assert shares_a_unit(source)
    pragma = source.replace("#endif\n", '#endif\n#pragma GCC optimize ("no-gcse")\n', 1)
    assert pragma != source and not shares_a_unit(pragma)  # it changes the functions after it
    assert not shares_a_unit("typedef struct { float v[3]; } float32x3;\n" + source)
    assert not shares_a_unit("static const float table[2] = {1.0f, 2.0f};\n" + source)
    unit = one_unit([source, source.replace(lp.vector_lanes(4).linear.arg, "other_kernel")])
    helpers = re.findall(r"^static [^(]*?\b(\w+)\(", source, re.M)
    assert helpers and all(f"#define {helper} {helper}_unit1" in unit for helper in helpers)
    assert unit.count("#include <stdint.h>") == 3  # once first, then once per source (a no-op)
