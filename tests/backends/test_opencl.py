"""The OpenCL backend (pocl's CPU device here): hand-made programs, GPU indices, local memory."""

from __future__ import annotations

import numpy as np
import pytest

import uopviz as uv
from uopviz.backends import get
from uopviz.backends.base import BackendUnavailable, CompileError

from . import linear_programs as lp

pyopencl = pytest.importorskip("pyopencl", reason="the opencl backend needs pyopencl (pip install pyopencl)")


def _backend():
    backend = get("opencl")
    if not backend.available():
        pytest.skip(f"no OpenCL device: {backend.unavailable_reason()}")
    return backend


def _check(case: lp.LinearCase) -> None:
    _backend()
    for seed in (0, 1):
        lp.assert_case_matches("opencl", case, seed)


@pytest.mark.parametrize("case", lp.correctness_cases(), ids=repr)
def test_linear_program_matches_numpy(case: lp.LinearCase) -> None:
    _check(case)


@pytest.mark.parametrize("case", lp.integer_cases(), ids=repr)
def test_integer_semantics(case: lp.LinearCase) -> None:
    _check(case)


@pytest.mark.parametrize("case", lp.gpu_cases(), ids=repr)
def test_gpu_indices_local_memory_and_barriers(case: lp.LinearCase) -> None:
    _check(case)


@pytest.mark.parametrize(
    "case", [lp.reduction(16, 256), lp.vector_gather(8, 16), lp.gemm(16, 32, 16, upcast=8)], ids=repr
)
def test_agrees_with_the_c_backend(case: lp.LinearCase) -> None:
    from uopviz.backends.c import find_c_compiler

    _backend()
    if find_c_compiler() is None:
        pytest.skip("no C compiler to compare with")
    ours, _ = lp.run_case("opencl", case, seed=7)
    theirs, _ = lp.run_case("c", case, seed=7)
    for slot in case.expected(case.make_arrays(np.random.default_rng(7))):
        np.testing.assert_allclose(ours[slot], theirs[slot], rtol=1e-5, atol=1e-5)


def test_source_uses_opencl_features() -> None:
    backend = _backend()
    source = backend.render(lp.group_reduce(5, 8, 100).linear)
    assert (
        "__kernel void r_g5_l8_100(__global float* restrict data0, __global const float* restrict data1)"
        in source
    )
    assert "__local float temp0[8];" in source and "barrier(CLK_LOCAL_MEM_FENCE);" in source
    assert "get_group_id(0)" in source and "get_local_id(0)" in source
    meta = lp.KernelMeta.from_source(source) if hasattr(lp, "KernelMeta") else None
    from uopviz.backends.base import KernelMeta

    meta = KernelMeta.from_source(source)
    assert meta.global_size == (5, 1, 1) and meta.local_size == (8, 1, 1)
    vectors = backend.render(lp.vector_lanes(4).linear)
    assert "vload4(0, data1 + alu0)" in vectors and "float4" in vectors


def test_without_local_ids_the_runtime_picks_the_workgroup() -> None:
    backend = _backend()
    b = lp.Builder()
    out = b.param(0, 64)
    g = b.emit(lp.UOp(lp.Ops.SPECIAL, (lp.idx(64),), "gidx0"))
    b.store(out, g, g.cast(lp.dtypes.float32))
    source = backend.render(b.linear("global_only"))
    assert "get_global_id(0)" in source and "get_group_id" not in source
    kernel = backend.compile(source, "global_only")
    result = np.zeros(64, np.float32)
    kernel(result)
    np.testing.assert_array_equal(result, np.arange(64, dtype=np.float32))


def test_timing_uses_device_events() -> None:
    from uopviz.backends.timing import time_compiled

    backend = _backend()
    case = lp.gpu_elementwise(64, 16)
    kernel = backend.compile(backend.render(case.linear), case.linear.arg)
    arrays = case.make_arrays(np.random.default_rng(0))
    timing = time_compiled(kernel, arrays, warmup=1, repeats=4)
    assert timing.runs == 4 and 0 < timing.min_s < 1
    np.testing.assert_allclose(arrays[0], arrays[1] * 2 + arrays[2], rtol=1e-6)  # read back after timing


def test_build_error_is_a_compile_error() -> None:
    backend = _backend()
    b = lp.Builder()
    out = b.param(0, 4)
    b.emit(lp.UOp(lp.Ops.CUSTOM, (out,), ("{0}[0] = no_such_thing;", lp.dtypes.void)))
    with pytest.raises(CompileError, match="no_such_thing"):
        backend.compile(backend.render(b.linear("broken_cl")), "broken_cl")


def test_unavailable_without_a_platform_says_why(monkeypatch) -> None:
    import uopviz.backends.opencl as opencl

    monkeypatch.setattr(opencl, "_opencl", lambda: "no OpenCL platform (test)")
    backend = opencl.OpenCLBackend()
    assert not backend.available()
    assert backend.unavailable_reason() == "no OpenCL platform (test)"
    with pytest.raises(BackendUnavailable, match="no OpenCL platform"):
        backend.compile("// nothing", "nothing")
    # rendering needs no device: the source can still be shown
    assert "__kernel void" in backend.render(lp.elementwise(4).linear)


def test_vectors_wider_than_opencl_types_become_structs() -> None:
    backend = _backend()
    case = lp.gemm(4, 64, 8, upcast=32)
    source = backend.render(case.linear)
    assert "typedef struct { float v[32]; } float_x32;" in source and ".v[31]" in source
    lp.assert_case_matches("opencl", case)


def test_float16_group_reduce_compiles_and_runs_without_cl_khr_fp16():
    # issue 11: SPLIT to GROUP_REDUCE of a float16 reduction was accepted, then failed to compile on a
    # device without cl_khr_fp16 (pocl): "declaring variable of type '__local half[4]' is not allowed"
    _backend()
    x = np.random.default_rng(3).standard_normal((16, 32)).astype(np.float16)
    split = uv.Opt(uv.OptOp.SPLIT, 1, (4, uv.AxisType.GROUP_REDUCE, False))
    (out,) = uv.compile(uv.Tensor(x).sum(axis=1), backend="opencl", opts=[split]).run()
    np.testing.assert_allclose(out.astype(np.float32), x.astype(np.float32).sum(axis=1), rtol=1e-2, atol=5e-2)


@pytest.mark.parametrize("shape", [(8, 8), (5, 32), (3, 16)])
def test_what_the_compiler_says_stays_with_the_kernel_and_is_not_warned(shape, tmp_path, monkeypatch) -> None:
    # pocl for an SSE-only CPU (x86-64-v2, an emulated Nehalem) says on every build that a float8
    # built-in's ABI changes; pyopencl turned that into a warning per kernel in the user's notebook
    import warnings

    from uopviz.backends.target import host_cpu

    monkeypatch.setenv("UOPVIZ_CACHE", str(tmp_path))  # built from source here, not loaded
    backend = _backend()
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        program = uv.compile([uv.Tensor(x).sum(1)], backend="opencl", opts="heuristic")
        out = program.run()[0]
    np.testing.assert_allclose(out, x.sum(1), rtol=1e-5, atol=1e-5)
    compiled = backend.compile(program.kernels[0].source("opencl"), program.kernels[0].name)
    output = compiled.extra["compiler_output"]
    assert isinstance(output, str)
    wide_load = "vload8" in compiled.source or "vload16" in compiled.source
    if backend.runs_on_cpu and "avx" not in host_cpu().features and wide_load:  # pocl's clang sees the host
        assert "ABI" in output, output
