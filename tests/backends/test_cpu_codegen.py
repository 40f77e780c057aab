"""CPU code generation quality: vector chunks, register accumulators, whole-vector forms, prefetch,
and the register-tile heuristic — each checked on the source it produces and on the values it
computes (against numpy and the Python interpreter on random inputs of several shapes)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from cpu_targets import target_params

import uopviz as uv
from uopviz.backends import get
from uopviz.backends.target import using_target
from uopviz.core.ops import AxisType, Ops
from uopviz.passes.optops.heuristic import hand_coded_optimizations
from uopviz.passes.optops.opts import Opt, OptOp

needs_c = pytest.mark.skipif(not get("c").available(), reason="no C compiler on this machine")
needs_llvm = pytest.mark.skipif(not get("llvm").available(), reason="llvmlite is not installed")


def _tile(n_lanes: int, m_lanes: int) -> list[Opt]:
    """UPCAST N (axis 1) by ``n_lanes``, then M (axis 0) by ``m_lanes``."""
    return [
        Opt(OptOp.SPLIT, 1, (n_lanes, AxisType.UPCAST, False)),
        Opt(OptOp.SPLIT, 0, (m_lanes, AxisType.UPCAST, False)),
    ]


def _unroll(factor: int) -> Opt:
    return Opt(OptOp.SPLIT, 2, (factor, AxisType.UNROLL, False))


def _c_register_lanes(widest: int) -> int:
    """float32 lanes of the C backend's vectors: its widest vector width, at most one register of the
    CPU target (Instruction Selection splits wider ones for GCC)."""
    return min(widest, get("c").vector_bytes // 4)


def _gemm_program(m: int, k: int, n: int, backend: str, opts, seed: int = 0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    return a, b, uv.compile([uv.Tensor(a) @ uv.Tensor(b)], backend=backend, opts=opts)


# ---------------------------------------------------------------------------------------------
# vector chunks (Instruction Selection) and lane order (Expand)


@pytest.mark.parametrize("backend", ["c", "llvm", "opencl"])
def test_a_64_lane_tile_becomes_16_lane_vector_ops(backend: str) -> None:
    # at most 16 lanes, and at most one register of the CPU target where the backend asks for that (C)
    if not get(backend).available():
        pytest.skip(f"{backend} backend unavailable here: {get(backend).unavailable_reason()}")
    _, _, program = _gemm_program(64, 32, 64, backend, _tile(16, 4))
    linear = program.kernels[0].lower(backend).linear
    widths = {u.dtype.count for u in linear.src if u.op in (Ops.MULACC, Ops.ADD, Ops.MUL, Ops.LOAD)}
    register_lanes = get(backend).vector_bytes // 4 or 16
    widest = min(16, register_lanes)
    assert max(widths) <= widest and widest in widths, (widths, widest)
    assert not any(u.op in (Ops.ADD, Ops.MUL, Ops.MULACC) and u.dtype.count == 64 for u in linear.src)


@pytest.mark.parametrize("shape", [(16, 24, 32), (32, 7, 48), (8, 64, 16)])
@pytest.mark.parametrize("backend", ["python", "c", "llvm"])
def test_chunked_register_tiles_compute_matmul(backend: str, shape: tuple[int, int, int]) -> None:
    if not get(backend).available():
        pytest.skip(f"{backend} backend unavailable here: {get(backend).unavailable_reason()}")
    m, k, n = shape
    for opts in (_tile(16, 8), _tile(8, 4) + [_unroll(k if k <= 8 else 2)]):
        a, b, program = _gemm_program(m, k, n, backend, opts, seed=m + k + n)
        np.testing.assert_allclose(program.run()[0], a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("backend", ["c", "llvm", "opencl"])
@pytest.mark.parametrize("tile", [(64, 1), (1, 6), (32, 6), (1, 3)])
def test_lane_counts_no_backend_has_are_split_into_ones_it_has(backend: str, tile: tuple[int, int]) -> None:
    # OpenCL has vectors of 2, 3, 4, 8 and 16 lanes only: 64 and 6 lanes are chunks of 16 and 2
    if not get(backend).available():
        pytest.skip(f"{backend} backend unavailable here: {get(backend).unavailable_reason()}")
    n_lanes, m_lanes = tile
    opts = [o for o in _tile(n_lanes, m_lanes) if o.arg[0] > 1]
    a, b, program = _gemm_program(48, 24, 64, backend, opts, seed=n_lanes * m_lanes)
    np.testing.assert_allclose(program.run()[0], a @ b, rtol=1e-4, atol=1e-4)


@needs_c
def test_unrolled_reduction_combines_contiguous_lanes_without_shuffles() -> None:
    # lanes run UNROLL-first: each unrolled k is a run of whole output rows, so the C source multiplies
    # whole 16-lane rows of B by broadcasts of A and never builds a vector lane by lane from B
    _, _, program = _gemm_program(32, 32, 32, "c", _tile(16, 4) + [_unroll(2)])
    source = program.kernels[0].source("c")
    assert f"load_float32x{_c_register_lanes(16)}(data2" in source
    assert "data2[" not in source


# ---------------------------------------------------------------------------------------------
# accumulators kept in variables


@needs_c
def test_vector_accumulators_are_variables_not_arrays() -> None:
    a, b, program = _gemm_program(32, 40, 64, "c", _tile(32, 8))
    source = program.kernels[0].source("c")
    assert f"float32x{_c_register_lanes(16)} acc0_0, acc0_1," in source and "acc0[" not in source
    np.testing.assert_allclose(program.run()[0], a @ b, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------------------------
# whole-vector comparisons, selects, shifts, casts and truncation (C)

_SPECIAL = np.array(
    [np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.5, -2.5, 3e9, -3e9, 8388609.0, -1e20], dtype=np.float32
)


def _floats(size: int, seed: int) -> np.ndarray:
    values = (np.random.default_rng(seed).standard_normal(size) * 50).astype(np.float32)
    values[: len(_SPECIAL)] = _SPECIAL
    return values


@needs_c
@pytest.mark.parametrize("size", [64, 256, 1024])
def test_vector_forms_match_the_python_interpreter(size: int) -> None:
    x = _floats(size, size)
    y = np.random.default_rng(size + 1).standard_normal(size).astype(np.float32) * 50
    shifts = np.random.default_rng(size + 2).integers(-3, 40, size).astype(np.int32)
    ints = np.random.default_rng(size + 3).integers(-(2**31), 2**31 - 1, size).astype(np.int32)

    in_range = np.where(np.isfinite(x) & (np.abs(x) < 2e9), x, 7.0).astype(np.float32)

    def outputs() -> list[uv.Tensor]:
        tx, ty, ts, ti = uv.Tensor(x), uv.Tensor(y), uv.Tensor(shifts), uv.Tensor(ints)
        return [
            (tx < ty).where(tx, ty),  # comparison mask feeding a select
            (tx != tx).where(ty, tx * 2),  # nan test
            uv.Tensor(in_range).cast(uv.dtypes.int32),
            ti << ts,
            ti >> ts,  # counts outside [0, 32)
            tx.trunc(),
            (tx * 2 + 1).exp(),
        ]

    upcast = [Opt(OptOp.SPLIT, 0, (16, AxisType.UPCAST, False))]
    reference = [np.asarray(r) for r in uv.compile(outputs(), backend="python").run()]
    got = [np.asarray(r) for r in uv.compile(outputs(), backend="c", opts=upcast).run()]
    for expected, value in zip(reference[:-1], got[:-1]):
        np.testing.assert_array_equal(value, expected)
    # exp: the C compiler fuses multiply-adds (one rounding), the interpreter rounds twice
    np.testing.assert_allclose(got[-1], reference[-1], rtol=3e-7, atol=3e-45)  # atol: denormal ulps
    # nan, inf and out-of-range floats convert as the scalar C helper (and x86, and numpy there) do:
    # to the integer minimum (the Python interpreter wraps instead; numpy leaves them undefined)
    lanes = uv.compile([uv.Tensor(x).cast(uv.dtypes.int32)], backend="c", opts=upcast).run()[0]
    scalar = uv.compile([uv.Tensor(x).cast(uv.dtypes.int32)], backend="c").run()[0]
    np.testing.assert_array_equal(lanes, scalar)


@needs_c
def test_exp_renders_without_lane_by_lane_code() -> None:
    x = _floats(4096, 0)
    upcast = [Opt(OptOp.SPLIT, 0, (16, AxisType.UPCAST, False))]
    program = uv.compile([(uv.Tensor(x) * 2 + 1).exp()], backend="c", opts=upcast)
    source = program.kernels[0].source("c")
    assert "[0] <" not in source and "__builtin_truncf(" not in source and "float32_to_int32(" not in source
    expected = uv.compile([(uv.Tensor(x) * 2 + 1).exp()], backend="python").run()[0]
    np.testing.assert_allclose(program.run()[0], expected, rtol=3e-7, atol=3e-45)  # atol: denormal ulps


# ---------------------------------------------------------------------------------------------
# prefetch of column strips


@needs_c
def test_c_prefetches_loads_that_jump_a_page_per_iteration() -> None:
    _, _, program = _gemm_program(64, 1024, 1024, "c", _tile(32, 8))
    source = program.kernels[0].source("c")
    # one per vector of the 32-lane row of B: two on AVX-512, four on AVX2 (the target's registers)
    assert source.count("__builtin_prefetch(data2") == 32 // _c_register_lanes(16)
    assert "__builtin_prefetch(data1" not in source  # A is read along its rows
    elementwise = uv.compile([uv.Tensor(np.ones(4096, np.float32)) + 1], backend="c", opts="heuristic")
    assert "__builtin_prefetch" not in elementwise.kernels[0].source("c")


@needs_llvm
def test_llvm_prefetches_loads_that_jump_a_page_per_iteration() -> None:
    a, b, program = _gemm_program(32, 1024, 512, "llvm", _tile(32, 8))
    assert program.kernels[0].source("llvm").count("call void @llvm.prefetch.p0(") == 2
    np.testing.assert_allclose(program.run()[0], a @ b, rtol=1e-3, atol=1e-3)


PREFETCH_CALL = {"c": "__builtin_prefetch(", "llvm": "call void @llvm.prefetch.p0("}


@pytest.mark.parametrize(
    "backend", [pytest.param("c", marks=needs_c), pytest.param("llvm", marks=needs_llvm)]
)
@pytest.mark.parametrize(
    ("channels", "size", "prefetched"), [(256, 7, True), (832, 7, True), (256, 14, False)]
)
def test_broadcast_inputs_stepping_a_line_per_iteration_are_prefetched(backend, channels, size, prefetched):
    """A 1x1 convolution's register tile broadcasts a row of the input from each channel in turn:
    at 7x7 each channel's row is 196 bytes after the last, a new cache line every iteration, and
    the row is prefetched PREFETCH_ITERATIONS channels ahead, once for the row's 7 loads
    (linear_program.line_prefetch_stride); at 14x14 (784 bytes) the hardware follows the stream
    and nothing is prefetched.  Values against numpy in float64."""
    rng = np.random.default_rng(channels + size)
    x = rng.standard_normal((1, channels, size, size)).astype(np.float32)
    w = rng.standard_normal((64, channels, 1, 1)).astype(np.float32)
    program = uv.compile([uv.Tensor(x).conv2d(uv.Tensor(w))], backend=backend, opts="heuristic")
    (kernel,) = program.kernels
    assert kernel.source(backend).count(PREFETCH_CALL[backend]) == int(prefetched), kernel.name
    expected = np.einsum("oc,nchw->nohw", w[:, :, 0, 0].astype(np.float64), x.astype(np.float64))
    np.testing.assert_allclose(program.run()[0], expected, rtol=1e-4, atol=1e-3 * np.sqrt(channels))


PREFETCH_DISTANCE = {
    "c": re.compile(r"__builtin_prefetch\(data1 \+ [^;]* \+ (\d+)\);"),
    "llvm": re.compile(r"getelementptr float, ptr %\w+, i64 (\d+)\n\s*call void @llvm\.prefetch\.p0\("),
}


@pytest.mark.parametrize(
    "backend", [pytest.param("c", marks=needs_c), pytest.param("llvm", marks=needs_llvm)]
)
@pytest.mark.parametrize("target", target_params("x86-64-v3"))  # AVX2's tiles, where measured
@pytest.mark.parametrize(
    ("channels", "outputs", "size", "distance"),
    # a loop of 32 or 16 channels' rows: 256 bytes along them; of 512: 8 channels ahead
    [(32, 16, 56, 64), (16, 96, 112, 64), (24, 144, 56, 64), (512, 64, 56, 8 * 56 * 56)],
)
def test_a_short_loop_of_rows_far_apart_prefetches_along_the_rows(
    backend, target, channels, outputs, size, distance
):
    """A 1x1 convolution with few input channels reads, for each tile of positions, one row of each
    channel (a plane apart): PREFETCH_ITERATIONS channels ahead would miss the first rows of every
    tile, so the rows are prefetched PREFETCH_ALONG_ROW_BYTES along themselves (the next tiles'
    positions, linear_program.vector_prefetch_distance); a long reduction keeps prefetching its
    channels ahead.  Values against numpy in float64."""
    rng = np.random.default_rng(channels + size)
    x = rng.standard_normal((1, channels, size, size)).astype(np.float32)
    w = rng.standard_normal((outputs, channels, 1, 1)).astype(np.float32)
    with using_target(target):
        program = uv.compile([uv.Tensor(x).conv2d(uv.Tensor(w))], backend=backend, opts="heuristic")
        (kernel,) = program.kernels
        distances = {int(found) for found in PREFETCH_DISTANCE[backend].findall(kernel.source(backend))}
        if backend == "c" or distance == 64:  # LLVM reads that tile's inputs one by one (no vector load)
            assert distances == {distance}, kernel.name
        result = program.run()[0]
    expected = np.einsum("oc,nchw->nohw", w[:, :, 0, 0].astype(np.float64), x.astype(np.float64))
    np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-4 * np.sqrt(channels))


# ---------------------------------------------------------------------------------------------
# the register-tile heuristic follows the host's registers


@pytest.mark.parametrize(
    ("register_bytes", "registers", "expected"),
    # AVX-512: M8×N32, 16 of 32 zmm (HEURISTIC_TILE_LANES); AVX2 and SSE: 8 of 16 registers
    [(64, 32, (32, 8)), (32, 16, (16, 4)), (16, 16, (8, 4))],
)
def test_cpu_register_tile_follows_the_registers(monkeypatch, register_bytes, registers, expected) -> None:
    backend = get("python")
    monkeypatch.setattr(type(backend), "register_bytes", register_bytes, raising=False)
    monkeypatch.setattr(type(backend), "vector_registers", registers, raising=False)
    _, _, program = _gemm_program(256, 256, 256, "python", None)
    kernel = hand_coded_optimizations(program.kernels[0])
    upcasts = sorted((size for size, axis_type in kernel.axes if axis_type is AxisType.UPCAST), reverse=True)
    assert tuple(upcasts) == expected, kernel.name
    assert not any(axis_type is AxisType.UNROLL for _, axis_type in kernel.axes)


@pytest.mark.parametrize("backend", ["python", "c", "llvm", "opencl"])
@pytest.mark.parametrize("lanes", [3, 6, 2])
def test_two_accumulators_split_into_chunks_keep_their_order(backend: str, lanes: int) -> None:
    # 3 and 6 lanes are split into scalar / 2-lane stores: the GROUP of an accumulator's initial
    # stores must still come before the loop that updates it (found by the hypothesis opts test)
    if not get(backend).available():
        pytest.skip(f"{backend} backend unavailable here: {get(backend).unavailable_reason()}")
    x = np.random.default_rng(lanes).standard_normal((6, 12)).astype(np.float32)
    upcast = [Opt(OptOp.SPLIT, 0, (lanes, AxisType.UPCAST, False))]
    program = uv.compile(
        [(uv.Tensor(x) * uv.Tensor(x)).sum(1) + uv.Tensor(x).max(1)], backend=backend, opts=upcast
    )
    np.testing.assert_allclose(program.run()[0], (x * x).sum(1) + x.max(1), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# column strips staged into contiguous buffers


def _swapped(n_lanes: int, m_lanes: int) -> list[Opt]:
    return [*_tile(n_lanes, m_lanes), Opt(OptOp.SWAP, 0, 1)]


@pytest.mark.parametrize("backend", ["c", "llvm"])
@pytest.mark.parametrize("shape", [(64, 1024, 512), (48, 300, 256), (40, 77, 1024)])
def test_strips_of_far_apart_rows_are_staged_and_compute_matmul(backend: str, shape) -> None:
    if not get(backend).available():
        pytest.skip(f"{backend} backend unavailable here: {get(backend).unavailable_reason()}")
    m, k, n = shape
    a, b, program = _gemm_program(m, k, n, backend, _swapped(32, 8), seed=k)
    linear = program.kernels[0].lower(backend).linear
    ranges = [u for u in linear.src if u.op is Ops.RANGE]
    assert sum(r.arg[1] is AxisType.REDUCE for r in ranges) == 2, "a copy loop and the reduction"
    np.testing.assert_allclose(program.run()[0], a @ b, rtol=1e-4, atol=1e-4)


@needs_c
def test_staged_kernels_run_on_the_python_interpreter() -> None:
    # a kernel shaped for C lowers on every backend; the interpreter runs the copy loop in Python
    # (its register is one buffer for every iteration), not as a numpy axis
    m, k, n = 16, 300, 256
    a, b, program = _gemm_program(m, k, n, "c", _swapped(32, 8), seed=3)
    interpreted = program.kernels[0].lower("python").compiled
    arrays = [np.zeros(m * n, np.float32), a.reshape(-1), b.reshape(-1)]
    interpreted(*arrays)
    np.testing.assert_allclose(arrays[0].reshape(m, n), a @ b, rtol=1e-4, atol=1e-4)


@needs_c
@pytest.mark.parametrize(
    ("shape", "opts", "why"),
    [
        ((64, 256, 1024), _tile(32, 8), "M tiles outside N tiles: each strip is used once"),
        ((64, 256, 128), _swapped(32, 8), "rows 512 bytes apart: the cache keeps them"),
    ],
)
def test_strips_without_reuse_or_stride_are_not_staged(shape, opts, why) -> None:
    _, _, program = _gemm_program(*shape, "c", opts)
    linear = program.kernels[0].lower("c").linear
    assert sum(u.op is Ops.RANGE and u.arg[1] is AxisType.REDUCE for u in linear.src) == 1, why


@needs_c
def test_heuristic_orders_gemm_loops_so_strips_are_staged() -> None:
    _, _, program = _gemm_program(256, 256, 1024, "c", "heuristic")
    kernel = program.kernels[0]
    assert any(o.op is OptOp.SWAP for o in kernel.opts), kernel.opts
    names = [step.rule for stage in program.trace.passes for step in stage.steps]
    assert "stage_strided_load" in names


def test_opencl_on_a_cpu_device_gets_register_tiles_and_a_gpu_gets_workgroups() -> None:
    opencl = get("opencl")
    if not opencl.available():
        pytest.skip(f"opencl backend unavailable here: {opencl.unavailable_reason()}")
    _, _, program = _gemm_program(256, 128, 256, "opencl", "heuristic")
    kernel = program.kernels[0]
    kinds = {axis_type for _, axis_type in kernel.axes}
    if opencl.runs_on_cpu:  # pocl: no workgroup tile, a register tile two of the target's registers wide
        lanes = 2 * opencl.register_bytes // 4
        assert AxisType.LOCAL not in kinds and (lanes, AxisType.UPCAST) in kernel.axes, kernel.name
    else:
        assert AxisType.LOCAL in kinds, kernel.name
    a, b, program = _gemm_program(64, 48, 96, "opencl", "heuristic")
    np.testing.assert_allclose(program.run()[0], a @ b, rtol=1e-4, atol=1e-4)
    # the CUDA renderer's heuristic keeps workgroup tiles (rendered here without a GPU)
    cuda_kernel = uv.compile(
        [uv.Tensor(a) @ uv.Tensor(b)], backend="cuda", opts="heuristic", build=False
    ).kernels[0]
    assert any(axis_type is AxisType.LOCAL for _, axis_type in cuda_kernel.axes), cuda_kernel.name


def _convolution(channels_in: int, channels_out: int, size: int, window: int, seed: int):
    """A convolution graph (padding keeps the size), its weights and input, and numpy's output."""
    from uopviz.nnef.nnef1.loader import loads_nnef1

    rng = np.random.default_rng(seed)
    pad = window // 2
    text = f"""version 1.0;
graph G( x ) -> ( y )
{{
    x = external<scalar>(shape = [1, {channels_in}, {size}, {size}]);
    w = variable<scalar>(shape = [{channels_out}, {channels_in}, {window}, {window}], label = 'w');
    y = conv(x, w, 0.0, padding = [({pad}, {pad}), ({pad}, {pad})]);
}}
"""
    w = rng.standard_normal((channels_out, channels_in, window, window)).astype(np.float32)
    x = rng.standard_normal((1, channels_in, size, size)).astype(np.float32)
    padded = np.pad(x[0].astype(np.float64), ((0, 0), (pad, pad), (pad, pad)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (window, window), axis=(1, 2))
    expected = np.einsum("chwij,ocij->ohw", windows, w.astype(np.float64))[None]
    return loads_nnef1(text, {"w": w}), x, expected


def _compiler_code_only(monkeypatch) -> None:
    """The C backend writing every register tile as GCC's code, with the tiles of half the
    registers that such code keeps (no assembly blocks: uopviz.backends.register_tile)."""
    from uopviz.backends.c import CBackend, CRenderer

    monkeypatch.setattr(CRenderer, "register_tile_lanes", lambda self: None)
    monkeypatch.setattr(CBackend, "writes_register_tiles", False)


def _compiled_convolution(
    target: str, channels_in: int, channels_out: int, size: int, window: int, seed: int
):
    """:func:`_convolution` compiled for C under ``target`` with the heuristic and run: the program,
    its one conv kernel's item, the output and numpy's."""
    graph, x, expected = _convolution(channels_in, channels_out, size, window, seed=seed)
    with using_target(target):
        program = graph.compile("c", opts="heuristic", progress=False)
        out = graph.run({"x": x}, backend="c", opts="heuristic")["y"]
    (conv,) = [item for item in program.items if item.kernel.name.startswith("r_")]
    return program, conv, out, expected


@needs_c
@pytest.mark.parametrize("target", target_params("x86-64-v3"))
@pytest.mark.parametrize(
    "channels_in, channels_out, size, window, gcse_off",
    [(32, 64, 14, 3, True), (16, 32, 14, 5, True), (32, 64, 7, 3, True), (64, 64, 14, 1, False)],
)
def test_window_tiles_of_seven_positions_compile_without_gccs_global_cse(
    monkeypatch, target, channels_in, channels_out, size, window, gcse_off
) -> None:
    # a 3x3 or 5x5 convolution's 7-position register tile on AVX2 (7 accumulators, 7 broadcasts and
    # a weight vector of 16 registers): GCC's global CSE keeps the inputs that consecutive window
    # steps share live across the unrolled steps and spills an accumulator, so the source turns
    # that pass off; a 1x1 convolution's tile keeps it.  GCC's code for the tile, as kernels that
    # the renderer writes no assembly block for have it (tests/backends/test_register_tile.py)
    from uopviz.backends.c import NO_GCSE_PRAGMA

    _compiler_code_only(monkeypatch)

    program, conv, out, expected = _compiled_convolution(
        target, channels_in, channels_out, size, window, seed=window + size
    )
    assert ("_u7_u8" in conv.kernel.name) == gcse_off, conv.kernel.name
    assert (NO_GCSE_PRAGMA in conv.source) == gcse_off, conv.kernel.name
    assert all(NO_GCSE_PRAGMA not in item.source for item in program.items if item is not conv)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


@needs_c
@pytest.mark.parametrize("target", target_params("x86-64-v3", "x86-64-v2"))
@pytest.mark.parametrize(
    "channels_in, channels_out, size, window, unrolled",
    [(64, 64, 14, 1, True), (96, 32, 7, 1, True), (16, 64, 14, 1, False), (32, 64, 14, 3, False)],
)
def test_a_one_by_one_convolutions_register_tile_compiles_with_gccs_loop_unrolling(
    monkeypatch, target, channels_in, channels_out, size, window, unrolled
) -> None:
    # the tile's reduction over the input channels (24 or more, each trip broadcasting the inputs of
    # 4 or 7 positions against one or two weight vectors) runs unrolled, as LLVM unrolls it; fewer
    # channels, a 3x3 convolution (whose innermost loop is its window's row) and SSE's tiles of
    # 4-lane vectors (x86-64-v2) keep GCC's default.  GCC's code for the tile (an assembly block's
    # loop is not unrolled: tests/backends/test_register_tile.py)
    from uopviz.backends.c import UNROLL_LOOPS_PRAGMA

    _compiler_code_only(monkeypatch)

    program, conv, out, expected = _compiled_convolution(
        target, channels_in, channels_out, size, window, seed=channels_in + size
    )
    assert re.search(r"_u\d+_u\d+$", conv.kernel.name), conv.kernel.name  # a register tile
    assert (UNROLL_LOOPS_PRAGMA in conv.source) == (unrolled and target == "x86-64-v3"), conv.kernel.name
    assert all(UNROLL_LOOPS_PRAGMA not in item.source for item in program.items if item is not conv)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


@needs_c
@pytest.mark.parametrize("target", target_params("x86-64-v3"))
def test_kernels_reading_their_trip_counts_at_run_time_are_not_unrolled(monkeypatch, target) -> None:
    # a dense block's 1x1 convolutions differ only in their channel count and share one compiled
    # kernel that reads it at run time: GCC's unrolled loop of unknown trips ran 1.5-1.9x slower
    from uopviz.backends.c import UNROLL_LOOPS_PRAGMA, CBackend
    from uopviz.nnef.nnef1.loader import loads_nnef1
    from uopviz.passes.extent_sharing import ExtentBoundKernel

    rng = np.random.default_rng(7)
    layers, first, growth, size = 3, 64, 32, 14
    weights = {f"w{k}": rng.standard_normal((growth, first + k * growth, 1, 1)).astype(np.float32)
               for k in range(layers)}  # fmt: skip
    body = "".join(
        f"    w{k} = variable<scalar>(shape = [{growth}, {first + k * growth}, 1, 1], label = 'w{k}');\n"
        f"    c{k} = conv(relu(x{k}), w{k}, 0.0);\n    x{k + 1} = concat([x{k}, c{k}], axis = 1);\n"
        for k in range(layers)
    )
    text = (f"version 1.0;\ngraph Dense( x0 ) -> ( x{layers} )\n{{\n"
            f"    x0 = external<scalar>(shape = [1, {first}, {size}, {size}]);\n{body}}}\n")
    graph = loads_nnef1(text, weights)
    with using_target(target):
        program = graph.compile("c", opts="heuristic", progress=False)
        x = rng.standard_normal((1, first, size, size)).astype(np.float32)
        out = graph.run({"x0": x}, backend="c", opts="heuristic")[f"x{layers}"]
    shared = [item for item in program.items
              if isinstance(item.compiled, ExtentBoundKernel) and item.kernel.name.startswith("r_")]
    assert len(shared) == layers
    assert all(UNROLL_LOOPS_PRAGMA not in item.source for item in shared)
    # each layer compiled alone, with its own constants, is unrolled
    monkeypatch.setattr(CBackend, "shares_extents", False)
    with using_target(target):
        alone = graph.compile("c", opts="heuristic", progress=False, build=False)
    convolutions = [item for item in alone.items if item.kernel.name.startswith("r_")]
    assert len(convolutions) == layers
    assert all(UNROLL_LOOPS_PRAGMA in item.source for item in convolutions)
    expected = x.astype(np.float64)
    for k in range(layers):
        w = weights[f"w{k}"][:, :, 0, 0].astype(np.float64)
        expected = np.concatenate([expected, np.einsum("oc,nchw->nohw", w, np.maximum(expected, 0))], axis=1)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


@needs_c
@pytest.mark.parametrize("size, channels", [(28, 16), (13, 3), (30, 8)])
def test_a_padded_copy_compiles_with_gccs_loop_if_conversion(size, channels) -> None:
    # a max pool's -inf padded copy of its input reads under a gate, with no reduction: GCC
    # vectorises it only with loop if-conversion, which the C backend's flags turn off for the
    # reductions that GCC 12.2 miscompiled with it; the pool itself keeps it off
    from uopviz.backends.c import IF_CONVERSION_PRAGMA
    from uopviz.nnef.nnef1.loader import loads_nnef1

    text = f"""version 1.0;
graph G( x ) -> ( y )
{{
    x = external<scalar>(shape = [1, {channels}, {size}, {size}]);
    y = max_pool(x, size = [1, 1, 3, 3], stride = [1, 1, 2, 2], padding = [(0, 0), (0, 0), (1, 1), (1, 1)],
                 border = 'ignore');
}}
"""
    graph = loads_nnef1(text, {})
    program = graph.compile("c", opts="heuristic", progress=False)
    copies = [item for item in program.items if item.kernel.name.startswith("E_")]
    pools = [item for item in program.items if item.kernel.name.startswith("r_")]
    assert copies and pools
    assert all(IF_CONVERSION_PRAGMA in item.source for item in copies)
    assert all(IF_CONVERSION_PRAGMA not in item.source for item in pools)
    x = np.random.default_rng(size).standard_normal((1, channels, size, size)).astype(np.float32)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))[:, :, ::2, ::2]
    expected = windows.max(axis=(4, 5))
    out = graph.run({"x": x}, backend="c", opts="heuristic")["y"]
    np.testing.assert_array_equal(out, expected)


@needs_c
@pytest.mark.parametrize("size, channels", [(7, 32), (7, 5), (5, 48)])
def test_a_relu_left_to_gccs_vectors_compiles_with_loop_if_conversion(size, channels) -> None:
    # DenseNet-121's batch norm + ReLU over 7x7 maps: 49 positions, no lanes of ours; the float
    # MAX's NaN test is a branch GCC vectorises only with loop if-conversion (0.027 -> 0.009 ms)
    from uopviz.backends.c import IF_CONVERSION_PRAGMA
    from uopviz.nnef.nnef1.loader import loads_nnef1

    text = f"""version 1.0;
graph G( x, s, b ) -> ( y )
{{
    x = external<scalar>(shape = [1, {channels}, {size}, {size}]);
    s = external<scalar>(shape = [1, {channels}]);
    b = external<scalar>(shape = [1, {channels}]);
    y = relu(add(mul(x, s), b));
}}
"""
    graph = loads_nnef1(text, {})
    program = graph.compile("c", opts="heuristic", progress=False)
    (item,) = program.items
    assert IF_CONVERSION_PRAGMA in item.source and "max_float32" in item.source
    rng = np.random.default_rng(size * channels)
    x = rng.standard_normal((1, channels, size, size)).astype(np.float32)
    x[0, 0, 0, :3] = [np.nan, -0.0, np.inf]
    scale, bias = (rng.standard_normal((1, channels)).astype(np.float32) for _ in range(2))
    out = graph.run({"x": x, "s": scale, "b": bias}, backend="c", opts="heuristic")["y"]
    expected = np.maximum(x * scale[:, :, None, None] + bias[:, :, None, None], 0)
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-7)  # (a multiply-add: one rounding)
    assert np.isnan(out[0, 0, 0, 0]) and np.isnan(expected[0, 0, 0, 0])  # NaN wins the MAX


@pytest.mark.parametrize("backend", [name for name in ("c", "llvm") if get(name).available()])
@pytest.mark.parametrize("target", target_params("x86-64-v3", "x86-64-v2"))
@pytest.mark.parametrize("size, channels_out", [(13, 64), (11, 64), (17, 64), (29, 32), (13, 24)])
def test_a_conv_over_rows_of_prime_width_pads_them_to_column_tiles(
    backend, target, size, channels_out
) -> None:
    # no divisor of 13 tiles the columns: padded (the padded columns' loads and stores gated off)
    # to tiles of 4 columns x 16 channels (11 -> 12, 17 -> 20), or of 5 x 16 where that pads less
    # on 8-lane registers (13 -> 15, 29 -> 30: 10 accumulators), instead of a tile of channels
    # alone; 24 channels, which two registers do not divide, take one register per column
    graph, x, expected = _convolution(32, channels_out, size, 3, seed=size)
    with using_target(target):
        program = graph.compile(backend, opts="heuristic", progress=False)
        out = graph.run({"x": x}, backend=backend, opts="heuristic")["y"]
    (conv,) = [item for item in program.items if item.kernel.name.startswith("r_")]
    lanes = 8 if target == "x86-64-v3" else 4
    columns = 5 if lanes == 8 and size in (13, 29) else 4
    padded = -(-size // columns) * columns
    channels = 2 * lanes if channels_out % (2 * lanes) == 0 else lanes
    assert Opt(OptOp.PADTO, 2, padded) in conv.kernel.opts, conv.kernel.opts
    assert (columns, AxisType.UPCAST) in conv.kernel.axes, conv.kernel.axes
    assert (channels, AxisType.UPCAST) in conv.kernel.axes, conv.kernel.axes
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
