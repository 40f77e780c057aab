"""CUDA index arithmetic in 32-bit ``int`` where every buffer holds fewer than 2^31 elements and every
index value's bounds fit in int32, else in ``long long``.  Rendering needs no GPU (``build=False``
allocates nothing, so buffers of 3 * 2^30 elements cost no memory)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import uopviz as uv
from uopviz import Tensor
from uopviz.backends.base import KernelMeta
from uopviz.backends.cfamily import indices_fit_int32
from uopviz.backends.nvrtc import find_nvrtc, nvrtc_compile

needs_nvrtc = pytest.mark.skipif(find_nvrtc() is None,
                                 reason="no NVRTC library (the nvidia-cuda-nvrtc wheel)")

#: a declaration of an index variable: a grid or thread index, a loop counter or an address
INDEX_DECLARATION = re.compile(r"(?<!unsigned )\b(int|long long) (gidx|lidx|ridx|alu)\d+ = ")


def _index_types(source: str) -> set[str]:
    return {found.group(1) for found in INDEX_DECLARATION.finditer(source)}


def _sources(out: Tensor, opts: object = "heuristic") -> uv.Program:
    return uv.compile(out, backend="cuda", opts=opts, build=False)


@needs_nvrtc
@pytest.mark.parametrize("make", [
    lambda: Tensor.empty(64, 64) @ Tensor.empty(64, 64),
    lambda: Tensor.empty(1000, 33).max(axis=1),
    lambda: Tensor.empty(1, 3, 16, 16).conv2d(Tensor.empty(8, 3, 3, 3), padding=1),
    lambda: Tensor.empty(200, 100, dtype=np.float16) @ Tensor.empty(100, 300, dtype=np.float16),
])
@pytest.mark.parametrize("opts", [None, "heuristic"])
def test_small_buffers_index_in_int(make, opts) -> None:
    program = _sources(make(), opts)
    for item, source in zip(program.items, program.sources, strict=True):
        assert indices_fit_int32(item.body.src[0])
        assert _index_types(source) == {"int"}, source
        assert nvrtc_compile(source, "sm_90")


@pytest.mark.parametrize("make", [
    lambda: Tensor.empty(3 * 2**30) + 1,  # the addresses pass 2^31
    lambda: Tensor.empty(2**16, 2**16).sum(1),  # the row offsets (row * 65536) pass 2^31
    lambda: Tensor.empty(3 * 2**30)[:4096] + 1,  # small addresses into a buffer of 3 * 2^30
])
def test_a_buffer_of_more_than_2_to_the_31_elements_keeps_64_bit_indices(make) -> None:
    program = _sources(make())
    sources = [s for s in program.sources
               if any(p.size > 2**31 - 1 for p in KernelMeta.from_source(s, "cuda").params)]
    assert sources
    for source in sources:
        assert _index_types(source) == {"long long"}, source


@needs_nvrtc
def test_a_64_bit_index_kernel_compiles() -> None:
    (source,) = _sources(Tensor.empty(3 * 2**30) + 1).sources
    assert nvrtc_compile(source, "sm_90")
