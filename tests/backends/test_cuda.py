"""The CUDA backend: rendering everywhere, ``nvcc -ptx`` where nvcc exists, running where a GPU is."""

from __future__ import annotations

import re

import numpy as np
import pytest

import uopviz as uv
from uopviz.backends import get
from uopviz.backends.base import KernelMeta, RenderError
from uopviz.backends.cuda import MMA_M16N8K16_F16_F32, compile_to_ptx, find_nvcc, run_nvcc
from uopviz.backends.nvrtc import find_nvrtc, nvrtc_compile
from uopviz.core.dtype import dtypes
from uopviz.core.ops import Ops
from uopviz.core.uop import UOp

from . import linear_programs as lp

needs_nvcc = pytest.mark.skipif(
    find_nvcc() is None,
    reason="nvcc not found (CUDA toolkit not installed); the "
    "CUDA source is still rendered and checked for errors",
)

needs_nvrtc = pytest.mark.skipif(
    find_nvrtc() is None,
    reason="no NVRTC library (the CUDA toolkit's libnvrtc or the nvidia-cuda-nvrtc wheel, a dev "
    "dependency); the CUDA source is still rendered and checked with nvcc where it exists",
)

RENDERABLE = (
    lp.correctness_cases()
    + lp.integer_cases()
    + lp.gpu_cases()
    + [lp.warp_wmma_gemm(1, MMA_M16N8K16_F16_F32), lp.warp_wmma_gemm(4, MMA_M16N8K16_F16_F32)]
)


@pytest.mark.parametrize("case", RENDERABLE, ids=repr)
def test_every_program_renders(case: lp.LinearCase) -> None:
    source = get("cuda").render(case.linear)
    meta = KernelMeta.from_source(source)
    assert f'extern "C" __global__ void {meta.name}(' in source
    assert len(meta.params) == len(case.make_arrays(np.random.default_rng(0)))


def _evaluate(expression: UOp, lane: int) -> int:
    """An index expression of SPECIAL lidx0 evaluated for one lane (floor division like the dialect)."""
    if expression.op is Ops.CONST:
        return int(expression.arg[0])
    if expression.op is Ops.SPECIAL:
        return lane
    a, b = (_evaluate(s, lane) for s in expression.src)
    operations = {
        Ops.ADD: int.__add__,
        Ops.MUL: int.__mul__,
        Ops.IDIV: int.__floordiv__,
        Ops.MOD: int.__mod__,
    }
    return operations[expression.op](a, b)


@pytest.mark.parametrize("operand", ["a", "b", "c"])
def test_fragment_index_expressions_follow_the_ptx_layout(operand: str) -> None:
    config = MMA_M16N8K16_F16_F32
    lane = UOp(Ops.SPECIAL, (lp.idx(32),), "lidx0")
    for element in range(config.elements(operand)):
        row, col = lp.layout_expression(config, operand, lane, element)
        for t in range(32):
            assert (_evaluate(row, t), _evaluate(col, t)) == config.coordinate(operand, t, element)


def test_mma_layouts_cover_each_tile_once_per_warp() -> None:
    config = MMA_M16N8K16_F16_F32
    assert config.threads == 32 and config.elements("a") == 8 and config.elements("b") == 4
    assert config.elements("c") == 4
    # spot checks from the PTX ISA's figures: lane 5 holds A rows 1 and 9, columns 2,3 and 10,11
    assert [config.coordinate("a", 5, e) for e in range(8)] == [
        (1, 2),
        (1, 3),
        (9, 2),
        (9, 3),
        (1, 10),
        (1, 11),
        (9, 10),
        (9, 11),
    ]
    assert [config.coordinate("b", 5, e) for e in range(4)] == [(2, 1), (3, 1), (10, 1), (11, 1)]
    assert [config.coordinate("c", 5, e) for e in range(4)] == [(1, 2), (1, 3), (9, 2), (9, 3)]


def test_source_uses_cuda_features() -> None:
    source = get("cuda").render(lp.group_reduce(5, 8, 100).linear)
    assert "__shared__ float temp0[8];" in source and "__syncthreads();" in source
    assert "blockIdx.x" in source and "threadIdx.x" in source and "__restrict__" in source
    wmma = get("cuda").render(lp.warp_wmma_gemm(2, MMA_M16N8K16_F16_F32).linear)
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in wmma
    assert KernelMeta.from_source(wmma).local_size == (32, 1, 1)


def test_wrong_fragment_sizes_are_refused() -> None:
    b = lp.Builder()
    out = b.param(0, 4)
    halves = lp.lanes(*(lp.const(dtypes.float16, 1.0),) * 4)
    floats = lp.lanes(*(lp.const(dtypes.float32, 0.0),) * 4)
    result = b.emit(UOp(Ops.WMMA, (b.emit(halves), b.emit(halves), b.emit(floats)), MMA_M16N8K16_F16_F32))
    b.store(out, lp.idx(0), b.emit(UOp(Ops.GEP, (result,), (0,))))
    with pytest.raises(RenderError, match="takes half8, half4 and float4 fragments"):
        get("cuda").render(b.linear("bad_fragments"))


def _batch(sources: list[str]) -> str:
    """Several rendered kernels in one translation unit (each in its own namespace), to run nvcc once."""
    parts = ["#include <cuda_fp16.h>"]
    for number, source in enumerate(sources):
        body = "\n".join(line for line in source.splitlines() if not line.startswith("#include"))
        parts.append(f"namespace kernel{number} {{\n{body}\n}}")
    return "\n".join(parts)


NVCC_CASES = [
    lp.elementwise(64),
    lp.reduction(3, 17),
    lp.max_reduction_after(9, 64),
    lp.gated_load(50),
    lp.thread_range(2, 8),
    lp.vector_lanes(5),
    lp.vector_gather(8, 16),
    lp.if_block(31),
    lp.gated_store(5),
    lp.wmma_gemm(2, 3, 4),
    lp.gemm(5, 12, 7, upcast=4),
    lp.half_arithmetic(33),
    lp.bfloat16_roundtrip(40),
    lp.float_specials(dtypes.float32),
    lp.float_specials(dtypes.float64),
    *lp.gpu_cases(),
    lp.warp_wmma_gemm(4, MMA_M16N8K16_F16_F32),
]
NVCC_CASES += [
    c
    for c in lp.integer_cases()
    if c.name.startswith(("int_idiv", "int_mod", "shifts", "cast_float32", "int_vec"))
]


@needs_nvcc
def test_sources_compile_to_ptx_with_nvcc() -> None:
    sources = [get("cuda").render(case.linear) for case in NVCC_CASES]
    ptx = run_nvcc(_batch(sources), "ptx", "sm_80").decode()
    for case in NVCC_CASES:
        assert re.search(rf"\.entry {re.escape(case.linear.arg)}\(", ptx), f"{case.name} missing from the PTX"
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx


@needs_nvcc
def test_compile_to_ptx_reports_errors() -> None:
    from uopviz.backends.base import CompileError

    b = lp.Builder()
    out = b.param(0, 4)
    b.emit(UOp(Ops.CUSTOM, (out,), ("{0}[0] = undefined_cuda_name;", dtypes.void)))
    with pytest.raises(CompileError, match="undefined_cuda_name"):
        compile_to_ptx(get("cuda").render(b.linear("broken_cuda")))


@needs_nvrtc
@pytest.mark.parametrize("case", RENDERABLE, ids=repr)
def test_every_program_compiles_to_a_cubin_with_nvrtc(case: lp.LinearCase) -> None:
    """Every rendered program is valid CUDA C++: NVRTC compiles it, in this process and without a GPU,
    to H100/H200 machine code (sm_90) with its kernel function in it."""
    source = get("cuda").render(case.linear)
    cubin = nvrtc_compile(source, "sm_90", "cubin", case.linear.arg)
    assert cubin[:4] == b"\x7fELF" and case.linear.arg.encode() in cubin


@needs_nvrtc
def test_nvrtc_gives_the_ptx_and_quotes_its_errors() -> None:
    from uopviz.backends.base import CompileError

    source = get("cuda").render(lp.warp_wmma_gemm(1, MMA_M16N8K16_F16_F32).linear)
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in compile_to_ptx(source, "sm_80")
    b = lp.Builder()
    out = b.param(0, 4)
    b.emit(UOp(Ops.CUSTOM, (out,), ("{0}[0] = undefined_cuda_name;", dtypes.void)))
    with pytest.raises(CompileError, match="undefined_cuda_name") as error:
        nvrtc_compile(get("cuda").render(b.linear("broken_cuda")), "sm_90", "cubin", "broken_cuda")
    assert error.value.kernel_name == "broken_cuda" and "NVRTC, for sm_90" in str(error.value)


def test_unavailable_without_a_gpu_says_why() -> None:
    backend = get("cuda")
    reason = backend.unavailable_reason()
    if reason is None:
        pytest.skip(f"a CUDA GPU is present ({backend.device}); the runtime tests cover it")
    assert not backend.available() and ("GPU" in reason or "driver" in reason or "nvcc" in reason)


# ---------------------------------------------------------------------------------------------
# on a GPU


@pytest.mark.gpu
@pytest.mark.parametrize(
    "case",
    lp.correctness_cases()
    + lp.gpu_cases()
    + [lp.warp_wmma_gemm(1, MMA_M16N8K16_F16_F32), lp.warp_wmma_gemm(8, MMA_M16N8K16_F16_F32)],
    ids=repr,
)
def test_runs_on_the_gpu(case: lp.LinearCase) -> None:
    backend = get("cuda")
    if not backend.available():
        pytest.skip(f"cuda backend unavailable: {backend.unavailable_reason()}")
    lp.assert_case_matches("cuda", case)


@pytest.mark.gpu
@pytest.mark.parametrize("case", lp.integer_cases(), ids=repr)
def test_integer_semantics_on_the_gpu(case: lp.LinearCase) -> None:
    backend = get("cuda")
    if not backend.available():
        pytest.skip(f"cuda backend unavailable: {backend.unavailable_reason()}")
    lp.assert_case_matches("cuda", case)


def _rendered_bitcast(source: str, target: str) -> str:
    x = uv.Tensor(np.zeros(7, np.float32), dtype=source)
    return uv.compile(x.bitcast(target), backend="cuda", build=False).kernels[0].source("cuda")


def test_bitcasts_of_bfloat16_reinterpret_its_16_bits() -> None:
    """bfloat16 is held in a float variable: its bits are the rounded upper half, not the float's
    low bytes (a 2-byte copy of the float gave 0), and 16 bits become a value through the widening."""
    to_int = _rendered_bitcast("bfloat16", "int16")
    assert re.search(r"unsigned short (bits\d+) = float_to_bf16\(val0\);\s+short (bits\d+);\s+"
                     r"memcpy\(&\2, &\1, sizeof\(\2\)\);\s+short cast0 = \2;", to_int), to_int
    for source in ("int16", "float16"):
        from_bits = _rendered_bitcast(source, "bfloat16")
        assert re.search(r"unsigned short (bits\d+);\s+memcpy\(&\1, &val0, sizeof\(\1\)\);\s+"
                         r"float cast0 = bf16_to_float\(\1\);", from_bits), from_bits

def test_bitcasts_of_bool_are_casts() -> None:
    """A bool byte is 0 or 1; a byte read as a bool is True where it is not 0 (no memcpy into a bool)."""
    assert re.search(r"bool cast\d+ = \(val0 != 0\);", _rendered_bitcast("uint8", "bool"))
    assert re.search(r"signed char cast\d+ = \(\(signed char\)val0\);", _rendered_bitcast("bool", "int8"))
