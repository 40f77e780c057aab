"""Vector loads of every other element (a stride-2 convolution's input row) on C and LLVM: two
contiguous loads over exactly the span and one shuffle of their even lanes, the values numpy's."""

from __future__ import annotations

import re

import numpy as np
import pytest
from cpu_targets import target_params

import uopviz as uv
from uopviz.backends.target import resolve_target, using_target

RNG = np.random.default_rng(17)
BACKENDS = [b for b in ("c", "llvm") if b in uv.backends.available()]


def _depthwise_stride_2(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    windows = np.lib.stride_tricks.sliding_window_view(x, w.shape[2:], axis=(2, 3))[:, :, ::2, ::2]
    return np.einsum("nchwij,cij->nchw", windows.astype(np.float64), w[:, 0])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("target", target_params("native", "x86-64-v3", "x86-64-v2"))
@pytest.mark.parametrize("channels,size", [(8, 33), (4, 17), (2, 64)])
def test_a_stride_2_row_is_read_as_two_loads_and_a_shuffle(backend, target, channels, size):
    # the last row's last vector ends exactly at the buffer's end (size odd): no read past it
    x = RNG.standard_normal((1, channels, size, size)).astype(np.float32)
    w = RNG.standard_normal((channels, 1, 3, 3)).astype(np.float32)
    with using_target(target):
        program = uv.compile([uv.Tensor(x).conv2d(uv.Tensor(w), groups=channels, stride=2)], backend=backend,
                             opts="heuristic")
        out = program.run()[0]
        source = program.kernels[-1].source(backend)
    np.testing.assert_allclose(out, _depthwise_stride_2(x, w), rtol=1e-4, atol=1e-4)
    lanes = [size for size, kind in program.kernels[-1].axes if kind is uv.AxisType.UPCAST]
    if lanes and lanes[-1] in (4, 8, 16):
        assert ("__builtin_shufflevector(low, high, 0, 2" in source) if backend == "c" else \
            ("shufflevector" in source and "i32 0, i32 2" in source)
    if backend == "c" and "float32x8 low" in source:
        if "avx512vl" in resolve_target(target).features:  # one vpermt2ps picks from both loads
            assert "= __builtin_shufflevector(low, high, 0, 2, 4, 6, 9, 11, 13, 15);" in source
            assert "pairs" not in source
        else:  # AVX2: within each 128-bit half, then the pairs
            assert "pairs = __builtin_shufflevector(low, high, 0, 2, 9, 11, 4, 6, 13, 15);" in source
            assert "= __builtin_shufflevector(pairs, pairs, 0, 1, 4, 5, 2, 3, 6, 7);" in source


def _max_pool_3x3_stride_2(x: np.ndarray) -> np.ndarray:
    windows = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3))[:, :, ::2, ::2]
    return windows.max(axis=(-2, -1))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("target", target_params("x86-64-v3", "x86-64-v2"))
@pytest.mark.parametrize("width,picks", [(111, "0, 2, 4, 6, 11, 13, 15, 0"), (29, None), (27, None)])
def test_a_padded_rows_clamped_lanes_are_read_apart_from_its_run_of_every_other_element(
    backend, target, width, picks
):
    # a 3x3 stride-2 max pool to 55 columns, padded to 7 vectors of 8: the last vector's lanes 0-6
    # read every other element (two loads over exactly them and a shuffle), its lane 7 is clamped
    # to the row's last column and read on its own; so are the padded lanes of 14 and 13 columns
    # padded to 16.  The row's last column holds NaN in one channel: the clamped lane passes it on
    x = RNG.standard_normal((1, 4, width, width)).astype(np.float32)
    x[0, 1, :, -1] = np.nan
    with using_target(target):
        program = uv.compile([uv.Tensor(x).max_pool2d(3, 2)], backend=backend, opts="heuristic")
        out = program.run()[0]
        source = program.kernels[-1].source(backend)
    np.testing.assert_array_equal(out, _max_pool_3x3_stride_2(x))
    if picks is not None and target == "x86-64-v3":
        if backend == "c":
            assert f"__builtin_shufflevector(low, high, {picks});" in source
            assert re.search(r"\beven\d+\[7\] = data1\[", source), source
        else:
            llvm_picks = ", ".join(f"i32 {p}" for p in picks.split(", "))
            assert f"<8 x i32> <{llvm_picks}>" in source
            assert re.search(r"insertelement <8 x float> %vec\d+, float %val\d+, i32 7", source), source


@pytest.mark.parametrize("target", target_params("x86-64-v4"))
@pytest.mark.parametrize("width", [15, 13, 29])
def test_a_lane_clamped_to_the_rows_end_takes_that_element_in_the_shuffle(target, width):
    # a 3x3 stride-2 max pool to 7, 6 or 14 columns as 8 or 16 lanes: the lanes past the row
    # read its last element, which the run of every other element holds already; the shuffle
    # repeats that lane instead of inserting the element after it (an insert a lane and a tap)
    if "c" not in uv.backends.available():
        pytest.skip("no C compiler here: the shuffle checked is the C backend's")
    x = RNG.standard_normal((1, 8, width, width)).astype(np.float32)
    x[0, 2, :, -1] = np.nan  # the clamped lanes read the row's last column: max passes NaN on
    with using_target(target):
        program = uv.compile([uv.Tensor(x).max_pool2d(3, 2)], backend="c", opts="heuristic")
        got = program.run()[0]
        source = program.kernels[-1].source("c")
    windows = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3))[:, :, ::2, ::2]
    np.testing.assert_array_equal(got, windows.max(axis=(-2, -1)))
    shuffles = re.findall(r"__builtin_shufflevector\(low, high, ([\d, ]+)\);", source)
    assert shuffles and not re.search(r"even\d+\[\d+\] = ", source), source
    assert any(len(picks.split(", ")) != len(set(picks.split(", "))) for picks in shuffles)  # a lane repeated
