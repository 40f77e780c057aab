"""The heuristic's reductions without a register tile (a row's max or sum) on CPU backends: the
innermost reduce axis is unrolled by a vector register's lanes of the CPU target, so the loads and
the math before the reduce run as whole vectors (softmax's exp on pocl: 2.8x faster than by 4)."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_targets import target_params

import uopviz as uv
from uopviz.backends.target import using_target
from uopviz.passes.optops.heuristic import LONG_REDUCTION

RNG = np.random.default_rng(11)
CPU_BACKENDS = [b for b in ("c", "llvm", "opencl") if b in uv.backends.available()]


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("target", target_params("native", "x86-64-v3", "x86-64-v2"))
@pytest.mark.parametrize("shape", [(64, 1024), (33, 96), (8, 40)])
def test_row_reductions_unroll_by_the_targets_register_lanes(backend, target, shape):
    x = RNG.standard_normal(shape).astype(np.float32)
    with using_target(target) as profile:
        program = uv.compile(uv.Tensor(x).softmax(), backend=backend, opts="heuristic")
        reductions = [k for k in program.kernels if k.has_reduce]
        assert reductions
        for kernel in reductions:
            lanes = kernel.backend_object.register_bytes // 4  # float32 lanes of one register
            if backend != "opencl":  # pocl's device is made once per process, at the first target
                assert lanes == profile.vector_bytes // 4
            unrolled = [size for size, kind in kernel.axes if kind is uv.AxisType.UNROLL]
            # the widest factor that divides the row: the register's lanes, else 8, 4 or 2
            expected = next((f for f in (lanes, 8, 4, 2) if shape[1] % f == 0 and f < shape[1]), None)
            if shape[1] <= 16:
                continue  # small rows are unrolled whole
            assert unrolled == [expected], (kernel.name, unrolled, expected)
        np.testing.assert_allclose(program.run()[0], _softmax(x), rtol=1e-5, atol=1e-6)


def _accumulator_sizes(kernel, backend: str) -> list[int]:
    """The element counts of the REG accumulators of a kernel's linear program."""
    from uopviz.core.ops import Ops

    return [u.arg.size for u in kernel.linear(backend).toposort() if u.op is Ops.BUFFER]


@pytest.mark.parametrize("backend", ["python", *CPU_BACKENDS])
@pytest.mark.parametrize("reduction", ["sum", "max", "min", "prod"])
@pytest.mark.parametrize("shape,lanes", [((8, 64), 16), ((5, 96), 8), ((3, 40), 4)])
def test_reduction_lanes_accumulate_in_a_vector_and_combine_once(backend, reduction, shape, lanes):
    # a reduction unrolled with no other lanes keeps one accumulator per lane across the loop and
    # combines them after it (not a horizontal tree every iteration); values as numpy's, NaN kept
    x = RNG.uniform(0.9, 1.1, shape).astype(np.float32)
    x[1, 7] = np.nan if reduction in ("max", "min") else x[1, 7]
    opts = [[uv.Opt(uv.OptOp.SPLIT, 1, (lanes, uv.AxisType.UNROLL, False))]]
    program = uv.compile(getattr(uv.Tensor(x), reduction)(1), backend=backend, opts=opts)
    (kernel,) = program.kernels
    assert _accumulator_sizes(kernel, backend) == [lanes]
    expected = getattr(np, reduction)(x.astype(np.float64), axis=1)
    np.testing.assert_allclose(program.run()[0], expected, rtol=1e-5)
    if reduction in ("max", "min"):
        assert np.isnan(program.run()[0][1])


@pytest.mark.parametrize("backend", ["python", *CPU_BACKENDS])
@pytest.mark.parametrize("outputs,steps,expected_lanes", [(8, 4, [32]), (4, 2, [8]), (16, 4, None)])
def test_few_output_and_reduction_lanes_accumulate_together(backend, outputs, steps, expected_lanes):
    # a matrix-vector product with `outputs` lanes of outputs and the reduction unrolled by `steps`:
    # up to 32 lanes in all accumulate lane by lane (one vector) and are combined after the loop;
    # more (a register tile) keep one accumulator per output lane, combined in every iteration
    w = RNG.standard_normal((48, 96)).astype(np.float32)
    x = RNG.standard_normal((96,)).astype(np.float32)
    opts = [[uv.Opt(uv.OptOp.SPLIT, 0, (outputs, uv.AxisType.UPCAST, False)),
             uv.Opt(uv.OptOp.SPLIT, 1, (steps, uv.AxisType.UNROLL, False))]]
    program = uv.compile(uv.Tensor(w) @ uv.Tensor(x), backend=backend, opts=opts)
    (kernel,) = program.kernels
    sizes = _accumulator_sizes(kernel, backend)
    if outputs * steps <= 32:
        assert sizes == expected_lanes
    else:
        assert sum(sizes) == outputs  # one accumulator lane per output
    np.testing.assert_allclose(program.run()[0], w.astype(np.float64) @ x, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("target", target_params("native", "x86-64-v3", "x86-64-v2"))
@pytest.mark.parametrize("k", [LONG_REDUCTION // 2, LONG_REDUCTION, 6 * LONG_REDUCTION + 512])
def test_a_long_matrix_vector_reduction_is_unrolled_into_shorter_chains(backend, target, k):
    # a linear layer's outputs take one or two registers of lanes; from LONG_REDUCTION terms on its
    # reduction is unrolled too (independent partial sums: shorter chains of float roundings)
    w = RNG.standard_normal((64, k)).astype(np.float32)
    x = RNG.standard_normal((k,)).astype(np.float32)
    with using_target(target):
        program = uv.compile(uv.Tensor(w) @ uv.Tensor(x), backend=backend, opts="heuristic")
        (kernel,) = program.kernels
        register = kernel.backend_object.register_bytes // 4
        upcast = np.prod([size for size, kind in kernel.axes if kind is uv.AxisType.UPCAST], dtype=int)
        unrolled = [size for size, kind in kernel.axes if kind is uv.AxisType.UNROLL]
        if upcast == 2 * register:
            assert bool(unrolled) == (k >= LONG_REDUCTION), (kernel.name, k)
        got = program.run()[0]
    expected = w.astype(np.float64) @ x.astype(np.float64)
    scale = np.abs(w).astype(np.float64) @ np.abs(x).astype(np.float64)
    assert np.max(np.abs(got - expected) / scale) < 2e-6
