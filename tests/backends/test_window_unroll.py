"""A register tile's window row (a conv's kx over a tile of 7 positions) is unrolled whole on C:
``#pragma GCC unroll <taps>`` before its loop, as LLVM unrolls it.  GCC left AVX-512's 5x5 rows
rolled (a body of 14 multiply-adds a tap).  Values against numpy on random inputs."""

from __future__ import annotations

import re

import numpy as np
import pytest
from cpu_targets import target_params

import uopviz as uv
from uopviz.backends.target import using_target

RNG = np.random.default_rng(43)

pytestmark = pytest.mark.skipif(
    "c" not in uv.backends.available(), reason="no C compiler here: the unroll pragma is the C backend's"
)


def _conv(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    windows = np.lib.stride_tricks.sliding_window_view(x, w.shape[2:], axis=(2, 3))
    return np.einsum("nchwij,ocij->nohw", windows.astype(np.float64), w.astype(np.float64))


@pytest.mark.parametrize("target", target_params("x86-64-v4", "x86-64-v3"))
@pytest.mark.parametrize(
    "taps,in_channels,out_channels,width", [(5, 16, 32, 14), (3, 32, 64, 14), (5, 8, 48, 7)]
)
def test_a_register_tiles_window_row_is_unrolled_whole(target, taps, in_channels, out_channels, width):
    x = RNG.standard_normal((1, in_channels, width + taps - 1, width + taps - 1)).astype(np.float32)
    w = RNG.standard_normal((out_channels, in_channels, taps, taps)).astype(np.float32)
    with using_target(target):
        program = uv.compile([uv.Tensor(x).conv2d(uv.Tensor(w))], backend="c", opts="heuristic")
        np.testing.assert_allclose(program.run()[0], _conv(x, w), rtol=1e-4, atol=1e-3)
        source = program.kernels[-1].source("c")
    # the pragma stands right before a loop of the window's taps, which reads 7 broadcast positions
    loop = rf"#pragma GCC unroll {taps}\n *for \(int64_t (\w+) = 0; \1 < {taps}; \1\+\+\)"
    loops = re.findall(loop, source)
    assert len(loops) == 1, source
