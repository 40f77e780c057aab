"""EXP and LOG: one node from the Tensor graph through Expand, written out by Instruction Selection's
rules "decompose exp" / "decompose log", with the same values on every backend."""

from __future__ import annotations

import numpy as np
import pytest

import uopviz as uv
from uopviz.backends import get
from uopviz.core.dtype import dtypes
from uopviz.core.exp_log import decompose_exp, expanded_ops
from uopviz.core.ops import GroupOp, Ops
from uopviz.core.symbolic import simplify
from uopviz.core.uop import UOp
from uopviz.passes.optops.heuristic import _op_cost

T = uv.Tensor
STAGES_BEFORE = ("Callify", "Rangeify", "Optimize", "Expand")
STAGES_AFTER = ("Instruction Selection", "Linearize", "Register/Memory Plan", "Render")


def _ops_after(program, stage: str) -> set[Ops]:
    record = next(p for p in program.trace.passes if p.name == stage)
    return {u.op for u in record.output.toposort()}


def test_tensor_exp_and_log_are_single_nodes():
    x = T(np.arange(1, 21, dtype=np.float32).reshape(4, 5))
    assert x.exp().uop.op is Ops.EXP and x.log().uop.op is Ops.LOG
    graph = {u.op for u in (x.exp() + x.log()).uop.toposort()}
    assert {Ops.EXP, Ops.LOG} <= graph and not graph & {Ops.EXP2, Ops.LOG2, Ops.BITCAST, Ops.AND}
    # float16 is computed in float32: the casts around one EXP
    half = x.cast(dtypes.float16).exp().uop
    assert half.op is Ops.CAST and half.src[0].op is Ops.EXP and half.src[0].dtype is dtypes.float32


def test_exp_and_log_are_ops_of_the_elementwise_family():
    for op in (Ops.EXP, Ops.LOG):
        assert op.is_elementwise and op in GroupOp.DECOMPOSED and op in GroupOp.UNARY_ALU
        assert op.family.color == Ops.EXP2.family.color
    with pytest.raises(uv.UOpError):
        UOp(Ops.EXP, (UOp.const(dtypes.int32, 1),))  # a float op: an integer operand is an error


@pytest.mark.parametrize("opts", [None, "heuristic"])
def test_exp_and_log_stay_whole_until_instruction_selection(opts):
    x = T.rand(8, 16, seed=2)
    program = uv.compile([(x.exp() * 2 + x.log()).sum(axis=1)], "c", opts=opts, build=False)
    for stage in STAGES_BEFORE:
        found = _ops_after(program, stage)
        assert {Ops.EXP, Ops.LOG} <= found, stage
        assert Ops.EXP2 not in found and Ops.LOG2 not in found, stage
    for stage in STAGES_AFTER:
        assert not {Ops.EXP, Ops.LOG} & _ops_after(program, stage), stage
    isel = next(p for p in program.trace.passes if p.name == "Instruction Selection")
    rules = {step.rule for p in isel.walk() for step in p.steps}
    assert {"decompose exp", "decompose log"} <= rules


def _available(backend: str) -> bool:
    return get(backend).available()


CASES = [
    ((7,), dtypes.float32),
    ((3, 33), dtypes.float32),
    ((2, 4, 9), dtypes.float64),
    ((64,), dtypes.float16),
]


@pytest.mark.parametrize("backend", ["python", "c", "llvm", "opencl"])
@pytest.mark.parametrize(("shape", "dtype"), CASES)
def test_values_match_numpy_on_every_backend(backend, shape, dtype):
    if not _available(backend):
        pytest.skip(f"{backend} is not available here")
    if dtype is dtypes.float64 and backend == "opencl" and not get("opencl").supports_dtype(dtypes.float64):
        pytest.skip("the OpenCL device has no float64")
    rng = np.random.default_rng(len(shape))
    values = rng.uniform(-80, 80, size=shape)
    positive = np.abs(values) + 1e-3
    x = T(values).cast(dtype)
    p = T(positive).cast(dtype)
    exp_out, log_out = uv.compile([x.exp(), p.log()], backend, opts="heuristic").run()
    np_dtype = {dtypes.float32: np.float32, dtypes.float64: np.float64, dtypes.float16: np.float16}[dtype]
    rtol = {dtypes.float32: 1e-6, dtypes.float64: 1e-14, dtypes.float16: 1e-3}[dtype]
    tiny = float(np.finfo(np_dtype).smallest_subnormal)  # results below the normal range: absolute
    with np.errstate(over="ignore"):
        expected_exp = np.exp(values.astype(np_dtype).astype(np.float64)).astype(np_dtype)
        expected_log = np.log(positive.astype(np_dtype).astype(np.float64)).astype(np_dtype)
    np.testing.assert_allclose(exp_out, expected_exp, rtol=rtol, atol=2 * tiny)
    np.testing.assert_allclose(log_out, expected_log, rtol=rtol, atol=rtol)


def test_the_compiled_backends_agree_to_the_bit_and_the_interpreter_to_an_ulp():
    """The compiled backends run the same written-out UOps; the interpreter computes EXP2 and LOG2
    (inside them) exactly rounded, as it did when exp was written out in the Tensor graph."""
    x = T(np.linspace(-100, 100, 257, dtype=np.float32))
    outputs = [x.exp(), (x.abs() + 1).log()]
    reference = uv.compile(outputs, "c", opts="heuristic").run()
    if _available("llvm"):
        for ours, theirs in zip(uv.compile(outputs, "llvm", opts="heuristic").run(), reference):
            np.testing.assert_array_equal(ours, theirs, err_msg="llvm")
    if _available("opencl"):
        # pocl compiles for the host CPU whatever UOPVIZ_TARGET says, and contracts a*b+c into an FMA
        # where the host has one (C for x86-64-v2 has none): equal to the bit only at the same target
        for ours, theirs in zip(uv.compile(outputs, "opencl", opts="heuristic").run(), reference):
            np.testing.assert_array_max_ulp(ours, theirs, maxulp=2)
    for ours, theirs in zip(uv.compile(outputs, "python", opts="heuristic").run(), reference):
        np.testing.assert_array_max_ulp(ours, theirs, maxulp=1)


def test_exp_of_a_constant_folds_to_the_value_the_kernel_computes():
    for value in (0.5, -3.25, 88.5):
        folded = simplify(UOp(Ops.EXP, (UOp.const(dtypes.float32, value),)))
        assert folded.op is Ops.CONST
        (computed,) = uv.compile([T(np.array([value], np.float32)).exp()], "python").run()
        assert np.float32(folded.arg[0]) == computed[0]
        assert abs(float(computed[0]) / np.exp(value) - 1) < 1e-6
    folded_log = simplify(UOp(Ops.LOG, (UOp.const(dtypes.float64, 8.0),)))
    assert folded_log.arg[0] == pytest.approx(np.log(8.0), rel=1e-15)


def test_gradients_of_exp_and_log():
    values = np.array([0.25, 1.0, 2.5], np.float32)
    x = T(values, requires_grad=True)
    (x.exp() + x.log()).sum().backward()
    (grad,) = uv.compile([x.grad], "python").run()
    np.testing.assert_allclose(grad, np.exp(values) + 1 / values, rtol=1e-6)


def test_the_heuristic_charges_exp_for_the_ops_it_becomes():
    x = UOp.param(0, (), dtypes.float32)
    exp = UOp(Ops.EXP, (x,))
    written_out = decompose_exp(x)
    inside = set(x.toposort())
    new = [u for u in written_out.toposort() if u not in inside and u.op is not Ops.CONST]
    assert len(expanded_ops(Ops.EXP, dtypes.float32)) == len(new)
    assert _op_cost(exp) == sum(_op_cost(u) for u in new) > 15
