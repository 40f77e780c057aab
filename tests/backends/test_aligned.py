"""Buffers on a cache line (uopviz.backends.aligned): what a run allocates, what a program's memory
plan places, and what the NNEF runtime hands the kernels (weights read from .dat files, inputs)."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

from uopviz.backends.aligned import CACHE_LINE, aligned, aligned_zeros, is_aligned
from uopviz.backends.worker import allocate_buffers
from uopviz.nnef.nnef1.loader import loads_nnef1
from uopviz.passes.memory_plan import ALIGNMENT


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.float64, np.uint8])
@pytest.mark.parametrize("count", [0, 1, 3, 17, 4097, 1 << 20])
def test_aligned_zeros_start_on_a_cache_line(dtype, count):
    array = aligned_zeros(count, dtype)
    assert array.shape == (count,) and array.dtype == np.dtype(dtype) and not array.any()
    assert array.size == 0 or array.ctypes.data % CACHE_LINE == 0


def test_aligned_keeps_an_aligned_array_and_copies_a_misaligned_one():
    base = aligned_zeros(1000, np.float32)
    base[:] = np.random.default_rng(1).standard_normal(1000)
    assert aligned(base) is base
    shifted = base[4:]  # 16 bytes in: off the line
    assert not is_aligned(shifted)
    copy = aligned(shifted.reshape(12, 83))
    assert is_aligned(copy) and copy.shape == (12, 83)
    np.testing.assert_array_equal(copy.reshape(-1), shifted)
    strided = base[::2]
    np.testing.assert_array_equal(aligned(strided), strided)
    assert aligned(strided).flags.c_contiguous


def test_a_runs_buffers_and_an_arenas_placements_start_on_a_cache_line():
    assert ALIGNMENT % CACHE_LINE == 0
    arrays = allocate_buffers([("zeros", 1000, np.dtype(np.float32)), ("zeros", 333, np.dtype(np.uint8)),
                               ("view", 1, 128, 64, np.dtype(np.float32))])  # fmt: skip
    assert all(is_aligned(a) for a in arrays)


def test_the_nnef_runtime_hands_the_kernels_aligned_weights_and_inputs():
    text = """version 1.0;
graph G( input ) -> ( output )
{
    input = external<scalar>(shape = [3, 37]);
    w = variable<scalar>(shape = [3, 37], label = 'w');
    output = add(input, w);
}
"""
    raw = np.zeros(3 * 37 + 4, np.float32)
    w = raw[1:][: 3 * 37].reshape(3, 37)  # 4 bytes in: as a .dat file's array may start
    w[...] = np.random.default_rng(2).standard_normal((3, 37))
    graph = loads_nnef1(text, {"w": w.copy()})
    graph.tensors["w"].data = w
    x = np.random.default_rng(3).standard_normal(3 * 37 + 1).astype(np.float32)[1:].reshape(3, 37)
    assert not is_aligned(x) and not is_aligned(w)
    np.testing.assert_allclose(graph.run({"input": x}, backend="c")["output"], x + w, rtol=1e-6)
    assert is_aligned(graph.tensors["w"].data)  # aligned once and kept
    kept = graph.tensors["w"].data
    graph.run({"input": x}, backend="c")
    assert graph.tensors["w"].data is kept
    assert ctypes.c_void_p(kept.ctypes.data).value % CACHE_LINE == 0
