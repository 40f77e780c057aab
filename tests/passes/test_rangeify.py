"""Rangeify alone, from text: the FUNCTION Callify makes in, kernels over RANGEs out (tests/stage_text.py)."""

from __future__ import annotations

import numpy as np
from stage_text import check_stage

import uopviz as uv
from uopviz.core.dtype import AddrSpace, dtypes
from uopviz.core.ops import AxisType, Ops
from uopviz.core.uop import ParamArg, UOp, shape_uop
from uopviz.passes.rangeify import drop_unread_params, rangeify

# (x * 2).sum(axis=1) of a 2x3 input, as Callify leaves it: movement ops, a REDUCE over a shape
BEFORE = """
%0 = STACK 6 [dtypes.index]  : index (1,)
%1 = PARAM %0 [ParamArg(slot=0, dtype=dtypes.float32, device='CPU', addrspace=None)]  : float32 (6,)
%2 = STACK 2, 3 [dtypes.index]  : index (2,)
%3 = RESHAPE %1, %2  : float32 (2, 3)
%4 = STACK 1, 1 [dtypes.index]  : index (2,)
%5 = RESHAPE 2.0, %4  : float32 (1, 1)
%6 = EXPAND %5, %2  : float32 (2, 3)
%7 = MUL %3, %6  : float32 (2, 3)
%8 = REDUCE %7 [(Ops.ADD, (1,))]  : float32 (2, 1)
%9 = STACK 2 [dtypes.index]  : index (1,)
%10 = RESHAPE %8, %9  : float32 (2,)
%11 = TUPLE %10  : void
%12 = BUFFER [BufferArg(number=0, size=6, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (6,)
%13 = FUNCTION %11, %12  : void
"""

# one kernel: the output PARAM indexed by a LOOP range, the input read through a REDUCE range
# (address 3*i + j), the constant folded into the loop body; the kernel CALLed on a new buffer
EXPECTED = """
%0 = BUFFER [BufferArg(number=0, size=2, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (2,)
%1 = STACK 2 [dtypes.index]  : index (1,)
%2 = PARAM %1 [ParamArg(slot=0, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (2,)
%3 = RANGE 2 [(0, AxisType.LOOP)]  : index
%4 = INDEX %2, %3  : float32
%5 = STACK 6 [dtypes.index]  : index (1,)
%6 = PARAM %5 [ParamArg(slot=1, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (6,)
%7 = MUL %3, 3  : index
%8 = RANGE 3 [(1, AxisType.REDUCE)]  : index
%9 = ADD %7, %8  : index
%10 = INDEX %6, %9  : float32
%11 = LOAD %10  : float32
%12 = MUL %11, 2.0  : float32
%13 = REDUCE %12, %8 [(Ops.ADD, ())]  : float32
%14 = STORE %4, %13  : void
%15 = SINK %14  : void
%16 = PARAM %5 [ParamArg(slot=0, dtype=dtypes.float32, device='CPU', addrspace=None)]  : float32 (6,)
%17 = CALL %15, %0, %16  : void
%18 = AFTER %0, %17  : float32 (2,)
%19 = TUPLE %18  : void
%20 = BUFFER [BufferArg(number=1, size=6, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (6,)
%21 = FUNCTION %19, %20  : void
"""


def test_rangeify_makes_one_kernel_over_a_loop_and_a_reduce_range() -> None:
    program = check_stage(BEFORE, lambda function: rangeify(function).function, EXPECTED, renumber=True)
    (call,) = [u for u in program.toposort() if u.op is Ops.CALL]
    assert [r.arg[1].name for r in call.src[0].toposort() if r.op is Ops.RANGE] == ["LOOP", "REDUCE"]


def test_the_kernel_rangeify_made_computes_the_sum() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = uv.compile((uv.Tensor(x) * 2).sum(axis=1), backend="python").run()[0]
    np.testing.assert_array_equal(got, (x * 2).sum(axis=1))


def test_drop_unread_params_keeps_the_slots_read_and_the_slots_kept_renumbered() -> None:
    """Rangeify's last kernel step, which NNEF's lowering and kernel passes share: values are bound
    to the slots by position (tensor names in NNEF), slot 0 kept there; placeholders stay."""
    params = [UOp.param(slot, (4,), dtypes.float32, "CPU", AddrSpace.GLOBAL) for slot in range(4)]
    r = UOp.range(4, AxisType.LOOP, 0)
    placeholder = UOp(Ops.PARAM, (shape_uop(()),), ParamArg(-1, dtypes.float32, None, None))
    value = UOp(Ops.LOAD, (UOp(Ops.INDEX, (params[3], r)),)) + placeholder
    kernel = UOp(Ops.SINK, (UOp(Ops.STORE, (UOp(Ops.INDEX, (params[1], r)), value)),))

    def slots(root: UOp) -> list[tuple[str, int]]:
        return [
            ("store" if u is root.src[0].src[0].src[0] else "read", u.arg.slot)
            for u in root.toposort()
            if u.op is Ops.PARAM
        ]

    root, kept = drop_unread_params(kernel, ["out", "a", "b", "c"])
    assert kept == ["a", "c"] and sorted(slots(root)) == [("read", -1), ("read", 1), ("store", 0)]
    root, kept = drop_unread_params(kernel, ["out", "a", "b", "c"], keep=(0,))
    assert kept == ["out", "a", "c"] and sorted(slots(root)) == [("read", -1), ("read", 2), ("store", 1)]
    assert drop_unread_params(root, kept, keep=(0,))[0] is root  # nothing more to drop or renumber
