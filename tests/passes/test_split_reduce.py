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
    assert first.op is Ops.REDUCE and first.arg == (Ops.ADD, (0,)) and first.shape == (1, 131072)
    assert first.src[0].op is Ops.RESHAPE and first.src[0].shape == (32, 131072)  # partials inner


@pytest.mark.parametrize("shape, axes", [((3, 1 << 18), (1,)), ((64, 1 << 16), (0, 1)), ((1 << 18, 2), (0,))])
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


def test_cuda_sum_of_64m_runs_on_131072_threads_then_one_block_and_c_is_unchanged():
    x = uv.Tensor.empty(1 << 26)
    first, second = uv.compile(x.sum(), backend="cuda", opts="heuristic", build=False).kernels
    threads = math.prod(size for size, kind in first.axes if kind in (uv.AxisType.GLOBAL, uv.AxisType.LOCAL))
    assert threads == 131072 and math.prod(size for size, _ in second.axes) == 131072
    assert uv.AxisType.GROUP_REDUCE in {kind for _, kind in second.axes}  # one block of threads
    (single,) = uv.compile(x.sum(), backend="c", opts="heuristic", build=False).kernels
    assert single.name.startswith("r_R")


@pytest.mark.skipif("opencl" not in available(), reason="needs a backend with workgroups (pyopencl + pocl)")
@pytest.mark.parametrize("shape, axis, op", [
    ((1 << 20,), None, "sum"), ((3, 1 << 18), 1, "max"), ((1 << 18, 4), 0, "sum"),
    ((1 << 18, 3), 0, "min"), ((1 << 18,), None, "prod"), ((2, 1 << 17), (0, 1), "mean"),
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


def _softmax(a: np.ndarray) -> np.ndarray:
    shifted = np.exp(a - a.max(1, keepdims=True))
    return shifted / shifted.sum(1, keepdims=True)


def _gpu_cases():
    rng = np.random.default_rng(23)
    x = rng.standard_normal((256, 1024)).astype(np.float32)
    flat = rng.standard_normal(1 << 20).astype(np.float32)
    return [
        ("sum 2^20", lambda t: t.sum(), flat, lambda a: a.astype(np.float64).sum()),
        ("softmax rows", lambda t: t.softmax(1), x, _softmax),
        ("column sums", lambda t: t.sum(0), x, lambda a: a.astype(np.float64).sum(0)),
        ("row max", lambda t: t.max(1), x, lambda a: a.max(1)),
        ("argmax rows", lambda t: t.argmax(1), x, lambda a: a.argmax(1)),
    ]


@pytest.mark.skipif("opencl" not in available(), reason="runs the CUDA heuristic's opts on OpenCL (pocl)")
@pytest.mark.parametrize("case", _gpu_cases(), ids=lambda case: case[0])
def test_the_gpu_heuristics_kernels_compute_numpys_values(case):
    """The CUDA heuristic's choices (split reductions, GROUP_REDUCE through local memory, 256-thread
    workgroups) applied by hand to the same kernels on OpenCL, whose pocl device runs workgroups and
    local memory on the CPU: the code shape the GPU runs gives numpy's values without a GPU."""
    name, build, data, reference = case
    gpu = uv.compile(build(uv.Tensor(data)), backend="cuda", opts="heuristic", build=False)
    assert any(kernel.opts for kernel in gpu.kernels)
    chosen = {index: list(kernel.opts) for index, kernel in enumerate(gpu.kernels)}
    program = uv.compile(build(uv.Tensor(data)), backend="opencl", opts=chosen)
    assert [k.opts for k in program.kernels] == [k.opts for k in gpu.kernels]
    (out,) = program.run()
    np.testing.assert_allclose(out, reference(data), rtol=2e-5, atol=1e-3, err_msg=name)


def test_gpu_workgroups_have_at_most_256_threads_and_group_reduce_rows():
    x = uv.Tensor.empty(1024, 1024)
    (row_max,) = uv.compile(x.max(1), backend="cuda", opts="heuristic", build=False).kernels
    axes = dict((kind, size) for size, kind in row_max.axes)
    # 64 threads share each 1024-term row (GROUP_REDUCE_SLOT_READS_PER_TERM), 4 rows a workgroup
    assert (axes[uv.AxisType.GROUP_REDUCE], axes[uv.AxisType.LOCAL]) == (64, 4)
    for program in (x.softmax(1), (x * 2 + 1).exp(), x @ x, x.sum(0), (uv.Tensor.empty(1 << 24) + 1)):
        for kernel in uv.compile(program, backend="cuda", opts="heuristic", build=False).kernels:
            threads = math.prod(size for size, kind in kernel.axes
                                if kind in (uv.AxisType.LOCAL, uv.AxisType.GROUP_REDUCE))
            assert 16 <= threads <= 256, kernel.name
