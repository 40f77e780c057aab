"""The LLVM backend: every hand-made linear program against numpy and against the C backend."""

from __future__ import annotations

import re

import numpy as np
import pytest

from uopviz.backends import get
from uopviz.backends.base import CompileError, RenderError
from uopviz.core.dtype import dtypes
from uopviz.core.ops import Ops
from uopviz.core.uop import UOp

from . import linear_programs as lp

llvmlite = pytest.importorskip("llvmlite", reason="the llvm backend needs llvmlite (pip install llvmlite)")


@pytest.mark.parametrize("case", lp.correctness_cases(), ids=repr)
def test_linear_program_matches_numpy(case: lp.LinearCase) -> None:
    for seed in (0, 1):
        lp.assert_case_matches("llvm", case, seed)


@pytest.mark.parametrize("case", lp.integer_cases(), ids=repr)
def test_integer_semantics(case: lp.LinearCase) -> None:
    lp.assert_case_matches("llvm", case)


@pytest.mark.parametrize(
    "case",
    [lp.reduction(16, 256), lp.vector_gather(8, 16), lp.gemm(16, 32, 16, upcast=8), lp.wmma_gemm(2, 3, 4)],
    ids=repr,
)
def test_agrees_with_the_c_backend(case: lp.LinearCase) -> None:
    from uopviz.backends.c import find_c_compiler

    if find_c_compiler() is None:
        pytest.skip("no C compiler to compare with")
    ours, _ = lp.run_case("llvm", case, seed=5)
    theirs, _ = lp.run_case("c", case, seed=5)
    for slot in case.expected(case.make_arrays(np.random.default_rng(5))):
        np.testing.assert_allclose(ours[slot], theirs[slot], rtol=1e-5, atol=1e-5)


def test_ir_is_valid_llvm_and_uses_vector_types() -> None:
    import llvmlite.binding as llvm

    source = get("llvm").render(lp.vector_lanes(8).linear)
    llvm.parse_assembly(source).verify()
    assert "load <4 x float>" in source and "store <4 x float>" in source
    gather = get("llvm").render(lp.vector_gather(8, 16).linear)
    assert "load float, ptr" in gather and "@llvm.masked.gather" not in gather  # lane by lane, ungated


def test_gated_gather_uses_masked_gather() -> None:
    b = lp.Builder()
    out, a = b.param(0, 16), b.param(1, 16)
    i = b.loop(4)
    strided = b.emit(lp.lanes(*(i + lp.idx(4 * k) for k in range(4))))
    inside = b.emit(strided < lp.lanes(*(lp.idx(10),) * 4))
    zero = lp.lanes(*(lp.const(dtypes.float32, -1.0),) * 4)
    value = b.load(a, strided, zero, inside)
    b.end(i, b.store(out, lp.lanes(*(i * lp.idx(4) + lp.idx(k) for k in range(4))), value))
    source = get("llvm").render(b.linear("gated_gather"))
    assert "@llvm.masked.gather.v4f32.v4p0" in source
    kernel = get("llvm").compile(source, "gated_gather")
    data = np.arange(16, dtype=np.float32)
    result = np.zeros(16, np.float32)
    kernel(result, data)
    want = np.array([x if x < 10 else -1 for x in data.reshape(4, 4).T.reshape(-1)], np.float32)
    np.testing.assert_array_equal(result, want)


def test_fast_math_is_only_contract() -> None:
    source = get("llvm").render(lp.float_specials().linear) + get("llvm").render(lp.gemm(8, 8, 8).linear)
    for flag in ("fast", "nnan", "ninf", "nsz", "arcp", "reassoc", "afn"):
        assert f" {flag} " not in source
    assert "fadd contract" in source


def test_thread_range_runs_on_gomp_threads_when_possible() -> None:
    from uopviz.backends.llvm import libgomp_reason

    backend = get("llvm")
    source = backend.render(lp.gemm(16, 32, 16, upcast=8).linear)
    if libgomp_reason() is not None:
        assert "GOMP_parallel" not in source and not backend.has_threads
        return
    assert "call void @GOMP_parallel" in source and "%thread_start" in source
    b = lp.Builder()
    out = b.param(0, 64, dtypes.int32)
    t = b.loop(64, lp.AxisType.THREAD)
    thread = b.emit(UOp(Ops.CUSTOM, (), ("call i32 @omp_get_thread_num()", dtypes.int32)))
    b.end(t, b.store(out, t, thread))
    linear = b.linear("llvm_thread_ids")
    kernel = backend.compile(backend.render(linear), "llvm_thread_ids")
    ids = np.full(64, -1, np.int32)
    kernel(ids)
    assert (ids >= 0).all()
    import os

    if len(os.sched_getaffinity(0)) > 1 and os.environ.get("OMP_NUM_THREADS", "2") != "1":
        assert len(set(ids.tolist())) > 1, "every iteration ran on one thread"


def test_stores_outside_the_thread_range_keep_it_sequential() -> None:
    b = lp.Builder()
    out = b.param(0, 5)
    t = b.loop(4, lp.AxisType.THREAD)
    b.end(t, b.store(out, t, lp.const(dtypes.float32, 1.0)))
    b.store(out, lp.idx(4), lp.const(dtypes.float32, 2.0))
    source = get("llvm").render(b.linear("mixed"))
    assert "GOMP_parallel" not in source
    kernel = get("llvm").compile(source, "mixed")
    result = np.zeros(5, np.float32)
    kernel(result)
    assert result.tolist() == [1, 1, 1, 1, 2]


def test_invalid_ir_is_a_compile_error() -> None:
    b = lp.Builder()
    out = b.param(0, 4)
    b.emit(UOp(Ops.CUSTOM, (out,), ("store float 1.0, ptr %nowhere", dtypes.void)))
    backend = get("llvm")
    with pytest.raises(CompileError, match="nowhere"):
        backend.compile(backend.render(b.linear("bad_ir")), "bad_ir")


def test_special_is_refused() -> None:
    b = lp.Builder()
    out = b.param(0, 4)
    g = b.emit(UOp(Ops.SPECIAL, (lp.idx(4),), "gidx0"))
    b.store(out, g, lp.const(dtypes.float32, 0.0))
    with pytest.raises(RenderError, match="SPECIAL 'gidx0' needs a GPU backend"):
        get("llvm").render(b.linear("gpu_only"))


def test_machine_code_is_cached_on_disk(tmp_path, monkeypatch) -> None:
    from uopviz.backends.llvm import LLVMBackend

    monkeypatch.setenv("UOPVIZ_CACHE", str(tmp_path))
    case = lp.elementwise(32)
    source = LLVMBackend().render(case.linear)
    first = LLVMBackend().compile(source, case.linear.arg)
    assert first.extra["cached"] is False and list((tmp_path / "llvm").glob("*.o"))
    second = LLVMBackend().compile(source, case.linear.arg)
    assert second.extra["cached"] is True
    arrays = case.make_arrays(np.random.default_rng(0))
    second(*arrays)
    np.testing.assert_allclose(arrays[0], arrays[1] * 2 + arrays[2], rtol=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_signed_and_unsigned_shifts_and_divisions_in_one_kernel(seed: int) -> None:
    # int64 and uint64 share the LLVM type i64, but SHR is ashr / lshr and IDIV, MOD floor / unsigned:
    # each needs its own helper (they once shared one, so whichever came first decided both)
    import uopviz as uv

    rng = np.random.default_rng(seed)
    signed = rng.integers(-(2**62), 2**62, 16, dtype=np.int64)
    unsigned = rng.integers(2**63, 2**64 - 1, 16, dtype=np.uint64, endpoint=True)
    amounts = rng.integers(1, 62, 16)
    divisors = rng.integers(2, 1000, 16)
    s, u = uv.Tensor(signed), uv.Tensor(unsigned)
    a, au = uv.Tensor(amounts.astype(np.int64)), uv.Tensor(amounts.astype(np.uint64))
    d, du = uv.Tensor(divisors.astype(np.int64)), uv.Tensor(divisors.astype(np.uint64))
    mixed = [((s >> a) + (s // d) + (s % d)).bitcast("uint64"), (u >> au) + (u // du) + (u % du)]
    program = uv.compile([uv.Tensor.stack(mixed)], backend="llvm")  # one kernel holds them all
    assert len(program.kernels) == 1
    ud = divisors.astype(np.uint64)
    first = ((signed >> amounts) + signed // divisors + signed % divisors).view(np.uint64)
    expected = np.stack([first, (unsigned >> amounts.astype(np.uint64)) + unsigned // ud + unsigned % ud])
    np.testing.assert_array_equal(program.run()[0], expected)


@pytest.mark.parametrize(("size", "pad", "value"),
                         [(14, 1, float("-inf")), (6, 1, 0.0), (20, 2, 0.5), (30, 1, -1.0)])
def test_a_gate_of_repeated_lanes_is_splats_not_lane_inserts(size: int, pad: int, value: float) -> None:
    # a padded copy's lane gates repeat the row's condition (the edges' in the first and last
    # lanes): built lane by lane, x86 made each mask one lane at a time in mask registers
    import uopviz as uv
    from uopviz import Tensor

    x = np.random.default_rng(size).standard_normal((1, 3, size, size)).astype(np.float32)
    widths = ((0, 0), (0, 0), (pad, pad), (pad, pad))
    program = uv.compile(Tensor(x).pad(widths, value=value), backend="llvm", opts="heuristic")
    source = "\n".join(program.sources)
    assert re.search(r"and <\d+ x i1>", source)  # a splat's lanes picked by a constant
    assert not re.search(r"insertelement <\d+ x i1> %", source)  # no lane inserted into a partial mask
    np.testing.assert_array_equal(program.run()[0], np.pad(x, widths, constant_values=value))
