"""Rangeify's "split large reductions" (backends with workgroups): a reduction of many terms to few
values becomes two, so a GPU runs thousands of threads instead of one (issue 23: the 64M sum ran on
one CUDA thread).  The rule alone (graph in, graph out), then values on OpenCL against numpy."""

from __future__ import annotations

import math

import numpy as np
import pytest

import uopviz as uv
from uopviz import Ops, UOp, dtypes
from uopviz.backends import available
from uopviz.core.rewrite import graph_rewrite
from uopviz.passes.rangeify import SPLIT_REDUCE_FIRST_STAGE, SPLIT_REDUCE_MIN_TERMS, split_reduce_rules


def reduce_of(shape: tuple[int, ...], axes: tuple[int, ...], op: Ops = Ops.ADD) -> UOp:
    return UOp.buffer(math.prod(shape), dtypes.float32).reshape(shape).reduce(op, axes)


def test_a_large_reduction_to_one_value_becomes_two():
    before = reduce_of((1 << 22,), (0,))
    after = graph_rewrite(before, split_reduce_rules, name="split large reductions")
    assert after.op is Ops.RESHAPE and after.shape == (1,)
    second, first = after.src[0], after.src[0].src[0]
    assert second.op is Ops.REDUCE and second.arg == (Ops.ADD, (1,))
    assert first.op is Ops.REDUCE and first.arg == (Ops.ADD, (0,)) and first.shape == (1, 4096)
    assert first.src[0].op is Ops.RESHAPE and first.src[0].shape == (1024, 4096)  # partials inner


@pytest.mark.parametrize("shape, axes", [((3, 1 << 16), (1,)), ((64, 1 << 16), (0, 1)), ((1 << 16, 2), (0,))])
def test_other_reduced_axes_go_to_the_first_stage(shape, axes):
    after = graph_rewrite(reduce_of(shape, axes, Ops.MAX), split_reduce_rules, name="split")
    first = after.src[0].src[0]
    assert first.op is Ops.REDUCE and first.arg[0] is Ops.MAX
    assert math.prod(first.shape) >= SPLIT_REDUCE_FIRST_STAGE and after.shape == reduce_of(shape, axes).shape


@pytest.mark.parametrize("shape, axes", [
    ((SPLIT_REDUCE_MIN_TERMS // 2,), (0,)),  # too few terms
    ((4096, 1 << 16), (1,)),  # many values already: a thread each
    ((65537,), (0,)),  # no split of a prime extent
    ((256, 512), (0, 1)),  # only the longest reduced axis is split, and 512 has too few terms per partial
])
def test_what_is_left_alone(shape, axes):
    before = reduce_of(shape, axes)
    assert graph_rewrite(before, split_reduce_rules, name="split") is before


def test_cuda_sum_of_64m_runs_on_thousands_of_threads_and_c_is_unchanged():
    x = uv.Tensor.empty(1 << 26)
    first, second = uv.compile(x.sum(), backend="cuda", opts="heuristic", build=False).kernels
    threads = math.prod(size for size, kind in first.axes if kind in (uv.AxisType.GLOBAL, uv.AxisType.LOCAL))
    assert threads >= 4096 and second.axes[0][0] * math.prod(s for s, _ in second.axes[1:]) == 4096
    (single,) = uv.compile(x.sum(), backend="c", opts="heuristic", build=False).kernels
    assert single.name.startswith("r_R")


@pytest.mark.skipif("opencl" not in available(), reason="needs a backend with workgroups (pyopencl + pocl)")
@pytest.mark.parametrize("shape, axis, op", [
    ((1 << 20,), None, "sum"), ((3, 1 << 17), 1, "max"), ((1 << 16, 4), 0, "sum"),
    ((1 << 17, 3), 0, "min"), ((1 << 18,), None, "prod"), ((2, 1 << 16), (0, 1), "mean"),
])
def test_split_reductions_give_numpys_values_on_opencl(shape, axis, op):
    rng = np.random.default_rng(len(shape) + shape[-1])
    data = rng.standard_normal(shape).astype(np.float32)
    if op == "prod":  # powers of two: every partial product is exact, in any order
        data = rng.choice(np.array([0.5, 1.0, 2.0], np.float32), shape, p=[0.001, 0.998, 0.001])
    tensor = uv.Tensor(data)
    result = getattr(tensor, op)(axis=axis)
    program = uv.compile(result, backend="opencl", opts="heuristic")
    assert len(program.kernels) >= 2
    (out,) = program.run()
    expected = getattr(data.astype(np.float64), op)(axis=axis)
    np.testing.assert_allclose(out, expected, rtol=2e-5, atol=1e-3)
