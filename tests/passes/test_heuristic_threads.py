"""The heuristic's THREAD split on CPU backends: every core gets work when the outermost output
axis is a count the cores do not divide."""

from __future__ import annotations

import numpy as np
import pytest

import uopviz as uv

RNG = np.random.default_rng(5)


@pytest.mark.skipif(
    "c" not in uv.backends.available(), reason="the heuristic's CPU threads need the C backend"
)
def test_heuristic_threads_a_kernel_whose_outer_tile_count_the_cores_do_not_divide():
    # 28 rows tiled by 4 leave an outer 7 that two cores do not divide: the next output axis (64
    # columns in two tiles of 32) is split over the cores instead of everything running on one
    a = RNG.standard_normal((28, 64)).astype(np.float32)
    b = RNG.standard_normal((64, 64)).astype(np.float32)
    program = uv.compile(uv.Tensor(a) @ uv.Tensor(b), backend="c", opts="heuristic")
    (kernel,) = program.kernels
    threads = min(kernel.backend_object.thread_count, 16)
    if threads < 2:
        pytest.skip(f"{threads} core on this machine: no THREAD axis to check")
    sizes = [size for size, kind in kernel.axes if kind is uv.AxisType.GLOBAL]
    assert 7 in sizes  # the case this is about: the row tiles' count, which two cores do not divide
    # the THREAD axis comes first: one parallel region per launch, not one per outer iteration
    assert kernel.axes[0][1] is uv.AxisType.THREAD
    np.testing.assert_allclose(program.run()[0], a @ b, rtol=1e-4, atol=1e-4)
