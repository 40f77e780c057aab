"""The heuristic's depthwise conv tile (heuristic._unrolled_filter_rows): a tile of one register of
columns unrolls the filter's rows as well as each row's taps, so that the nine weights depend on
the channel alone and load once per channel; a tile of two registers of columns, and a pool (no
filter), keep the rows' loop.  Values against numpy on random inputs of several shapes."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_targets import target_params

import uopviz as uv
from uopviz.backends.target import using_target
from uopviz.core.ops import AxisType, Ops
from uopviz.passes.optops.heuristic import PAIRED_OUTPUT_ROWS

RNG = np.random.default_rng(31)
CPU_BACKENDS = [b for b in ("c", "llvm") if b in uv.backends.available()]


def _depthwise_reference(x: np.ndarray, w: np.ndarray, stride: int) -> np.ndarray:
    """The depthwise convolution (no padding) in float64 by numpy."""
    k = w.shape[-1]
    windows = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), (k, k), axis=(2, 3))
    windows = windows[:, :, ::stride, ::stride]
    return np.einsum("nchwij,cij->nchw", windows, w[:, 0].astype(np.float64))


def _filter_loops(kernel) -> list:
    """The loops left in the kernel's LINEAR program over the filter's rows (REDUCE ranges of more
    than one trip)."""
    return [r for r in kernel.ast.toposort() if r.op is Ops.RANGE and r.arg[1] is AxisType.REDUCE
            and not (r.src[0].op is Ops.CONST and r.src[0].arg[0] == 1)]  # fmt: skip


def _depthwise_kernel(backend: str, target: str, channels: int, size: int, stride: int):
    """The kernel of a 3x3 depthwise conv compiled for ``target`` (after checking its values on
    random inputs against numpy) and the target's float32 lanes."""
    x = RNG.standard_normal((1, channels, size, size)).astype(np.float32)
    w = RNG.standard_normal((channels, 1, 3, 3)).astype(np.float32)
    with using_target(target) as profile:
        program = uv.compile([uv.Tensor(x).conv2d(uv.Tensor(w), stride=stride, groups=channels)],
                             backend=backend, opts="heuristic")
        result = program.run()[0]
    np.testing.assert_allclose(result, _depthwise_reference(x, w, stride), rtol=1e-4, atol=1e-4)
    windowed = (AxisType.REDUCE, AxisType.UNROLL)
    (kernel,) = [k for k in program.kernels if any(t in windowed for _, t in k.axes)]
    return kernel, profile.vector_bytes // 4


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("target", target_params("x86-64-v3", "x86-64-v2"))
@pytest.mark.parametrize(
    "channels,size,stride",
    [(16, 58, 1), (24, 57, 2), (32, 30, 2), (8, 9, 1), (12, 16, 1)],
)
def test_a_depthwise_tile_of_one_register_unrolls_its_filter_rows(backend, target, channels, size, stride):
    kernel, lanes = _depthwise_kernel(backend, target, channels, size, stride)
    upcasts = [n for n, t in kernel.axes if t is AxisType.UPCAST]
    unrolled = [n for n, t in kernel.axes if t is AxisType.UNROLL]
    if len(upcasts) == 1 and upcasts[0] <= lanes:
        assert sorted(unrolled) == [3, 3] and not _filter_loops(kernel), kernel.name
    else:  # two registers of columns: 18 products beside nine weights would spill
        assert unrolled == [3] and len(_filter_loops(kernel)) == 1, kernel.name


@pytest.mark.parametrize("target", target_params("x86-64-v3"))
def test_a_max_pool_keeps_its_rows_loop(target):
    # the pool's loads are its input, which varies over the columns: nothing to hoist
    x = RNG.standard_normal((1, 16, 57, 57)).astype(np.float32)
    with using_target(target):
        program = uv.compile([uv.Tensor(x).max_pool2d(3, 2, 0)], backend="c", opts="heuristic")
        result = program.run()[0]
    view = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3))[:, :, ::2, ::2]
    np.testing.assert_array_equal(result, view.max(axis=(-2, -1)))
    (kernel,) = program.kernels
    assert len(_filter_loops(kernel)) == 1, kernel.name


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("target", target_params("x86-64-v4"))
@pytest.mark.parametrize(
    "channels,size,stride,paired",
    [(96, 16, 1, True), (40, 12, 1, True), (32, 9, 1, False), (24, 113, 2, False)],
)
def test_a_depthwise_tile_of_a_whole_row_takes_two_output_rows(
    backend, target, channels, size, stride, paired
):
    # heuristic._paired_output_rows: where the columns' register holds a whole output row (14 and 10
    # columns of 16 lanes), each tile computes two rows, which share input rows; an odd count of rows
    # (7) keeps one, and rows of several column tiles (56 columns of 8) keep one (1.8x slower paired)
    kernel, _ = _depthwise_kernel(backend, target, channels, size, stride)
    upcasts = [n for n, t in kernel.axes if t is AxisType.UPCAST]
    assert (PAIRED_OUTPUT_ROWS in upcasts[:-1]) == paired, kernel.name
    if paired:
        assert sorted(n for n, t in kernel.axes if t is AxisType.UNROLL) == [3, 3], kernel.name
