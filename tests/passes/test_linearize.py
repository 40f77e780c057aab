"""Linearize alone, from text: a kernel graph becomes one LINEAR instruction list (tests/stage_text.py)."""

from __future__ import annotations

from stage_text import check_stage

from uopviz.core.ops import Ops
from uopviz.passes.linearize import linearize_kernel

# the accumulator kernel Instruction Selection makes of y[0] = sum of x[0..2]
BEFORE = """
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

# the same nodes, now also the sources of one LINEAR in program order: the constants it uses, the
# zeroing before the RANGE, the loop body, its END, the final load and store
EXPECTED = """
%0 = STACK 1 [dtypes.index]  : index (1,)
%1 = PARAM %0 [ParamArg(slot=0, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (1,)
%2 = INDEX %1, 0  : float32
%3 = BUFFER [BufferArg(number=0, size=1, dtype=dtypes.float32, device=None, addrspace=AddrSpace.REG)]  : float32 (1,)
%4 = AFTER %3  : float32 (1,)
%5 = INDEX %4, 0  : float32
%6 = STORE %5, 0.0  : void
%7 = STACK 3 [dtypes.index]  : index (1,)
%8 = PARAM %7 [ParamArg(slot=1, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (3,)
%9 = RANGE 3 [(0, AxisType.REDUCE)]  : index
%10 = AFTER %3, %6, %9  : float32 (1,)
%11 = INDEX %10, 0  : float32
%12 = LOAD %11  : float32
%13 = INDEX %8, %9  : float32
%14 = LOAD %13  : float32
%15 = ADD %12, %14  : float32
%16 = STORE %11, %15  : void
%17 = END %16, %9  : void
%18 = AFTER %3, %17  : float32 (1,)
%19 = INDEX %18, 0  : float32
%20 = LOAD %19  : float32
%21 = STORE %2, %20  : void
%22 = LINEAR %1, 0, %2, %3, %4, %5, 0.0, %6, 3, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21 ['r_R3']  : void
"""


def test_linearize_lists_every_instruction_once_in_program_order() -> None:
    linear = check_stage(BEFORE, lambda ast: linearize_kernel(ast, "r_R3"), EXPECTED)
    assert linear.op is Ops.LINEAR and linear.arg == "r_R3"
    position = {u.op: i for i, u in reversed(list(enumerate(linear.src)))}  # each op's first place
    assert position[Ops.RANGE] < position[Ops.LOAD] < position[Ops.END]  # the loop opens, then closes
    assert len(set(linear.src)) == len(linear.src)
