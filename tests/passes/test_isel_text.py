"""Instruction Selection alone, from text: a REDUCE becomes a register accumulator (tests/stage_text.py)."""

from __future__ import annotations

from stage_text import check_stage

from uopviz.backends import get
from uopviz.core.ops import Ops
from uopviz.passes.isel import select_instructions

# y[0] = sum of x[0..2]
BEFORE = """
%0 = STACK 1 [dtypes.index]  : index (1,)
%1 = PARAM %0 [ParamArg(slot=0, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (1,)
%2 = INDEX %1, 0  : float32
%3 = STACK 3 [dtypes.index]  : index (1,)
%4 = PARAM %3 [ParamArg(slot=1, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (3,)
%5 = RANGE 3 [(0, AxisType.REDUCE)]  : index
%6 = INDEX %4, %5  : float32
%7 = LOAD %6  : float32
%8 = REDUCE %7, %5 [(Ops.ADD, ())]  : float32
%9 = STORE %2, %8  : void
%10 = SINK %9  : void
"""

# the REDUCE is a REG buffer of one float32: zeroed (STORE 0.0), then loaded, added to and stored
# in the loop (AFTER orders each access after the last write and the RANGE), ENDed, then read
# once more for the output's STORE
EXPECTED = """
%0 = STACK 1 [dtypes.index]  : index (1,)
%1 = PARAM %0 [ParamArg(slot=0, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (1,)
%2 = INDEX %1, 0  : float32
%3 = BUFFER [BufferArg(number=0, size=1, dtype=dtypes.float32, device=None, addrspace=AddrSpace.REG)]  : float32 (1,)
%4 = AFTER %3  : float32 (1,)
%5 = INDEX %4, 0  : float32
%6 = STORE %5, 0.0  : void
%7 = RANGE 3 [(0, AxisType.REDUCE)]  : index
%8 = AFTER %3, %6, %7  : float32 (1,)
%9 = INDEX %8, 0  : float32
%10 = LOAD %9  : float32
%11 = STACK 3 [dtypes.index]  : index (1,)
%12 = PARAM %11 [ParamArg(slot=1, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (3,)
%13 = INDEX %12, %7  : float32
%14 = LOAD %13  : float32
%15 = ADD %10, %14  : float32
%16 = STORE %9, %15  : void
%17 = END %16, %7  : void
%18 = AFTER %3, %17  : float32 (1,)
%19 = INDEX %18, 0  : float32
%20 = LOAD %19  : float32
%21 = STORE %2, %20  : void
%22 = SINK %21  : void
"""


def test_a_sum_becomes_a_register_accumulator() -> None:
    kernel = check_stage(BEFORE, lambda ast: select_instructions(ast, get("c"), "r_R3"), EXPECTED)
    assert not any(u.op is Ops.REDUCE for u in kernel.toposort())
