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
# zeroing before the RANGE, the loop body, its END, the final load, the output's address and store
# (the address, used only after the loop, is placed after it)
EXPECTED = """
%0 = STACK 1 [dtypes.index]  : index (1,)
%1 = PARAM %0 [ParamArg(slot=0, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (1,)
%2 = BUFFER [BufferArg(number=0, size=1, dtype=dtypes.float32, device=None, addrspace=AddrSpace.REG)]  : float32 (1,)
%3 = AFTER %2  : float32 (1,)
%4 = INDEX %3, 0  : float32
%5 = STORE %4, 0.0  : void
%6 = STACK 3 [dtypes.index]  : index (1,)
%7 = PARAM %6 [ParamArg(slot=1, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (3,)
%8 = RANGE 3 [(0, AxisType.REDUCE)]  : index
%9 = AFTER %2, %5, %8  : float32 (1,)
%10 = INDEX %9, 0  : float32
%11 = LOAD %10  : float32
%12 = INDEX %7, %8  : float32
%13 = LOAD %12  : float32
%14 = ADD %11, %13  : float32
%15 = STORE %10, %14  : void
%16 = END %15, %8  : void
%17 = AFTER %2, %16  : float32 (1,)
%18 = INDEX %17, 0  : float32
%19 = LOAD %18  : float32
%20 = INDEX %1, 0  : float32
%21 = STORE %20, %19  : void
%22 = LINEAR %1, 0, %2, %3, %4, 0.0, %5, 3, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21 ['r_R3']  : void
"""


def test_linearize_lists_every_instruction_once_in_program_order() -> None:
    linear = check_stage(BEFORE, lambda ast: linearize_kernel(ast, "r_R3"), EXPECTED)
    assert linear.op is Ops.LINEAR and linear.arg == "r_R3"
    position = {u.op: i for i, u in reversed(list(enumerate(linear.src)))}  # each op's first place
    assert position[Ops.RANGE] < position[Ops.LOAD] < position[Ops.END]  # the loop opens, then closes
    assert len(set(linear.src)) == len(linear.src)


# an epilogue y[0] = x2[0] * sum(x1) + y[0] whose graph order puts the loads of the scale x2[0] and of
# y[0] before the reduction loop
EPILOGUE_BEFORE = """
%0 = STACK 1 [dtypes.index]  : index (1,)
%1 = PARAM %0 [ParamArg(slot=0, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (1,)
%2 = INDEX %1, 0  : float32
%3 = BUFFER [BufferArg(number=0, size=1, dtype=dtypes.float32, device=None, addrspace=AddrSpace.REG)]  : float32 (1,)
%4 = AFTER %3  : float32 (1,)
%5 = INDEX %4, 0  : float32
%6 = STORE %5, 0.0  : void
%7 = PARAM %0 [ParamArg(slot=2, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (1,)
%8 = INDEX %7, 0  : float32
%9 = LOAD %8  : float32
%10 = LOAD %2  : float32
%11 = RANGE 3 [(0, AxisType.REDUCE)]  : index
%12 = AFTER %3, %6, %11  : float32 (1,)
%13 = INDEX %12, 0  : float32
%14 = LOAD %13  : float32
%15 = STACK 3 [dtypes.index]  : index (1,)
%16 = PARAM %15 [ParamArg(slot=1, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (3,)
%17 = INDEX %16, %11  : float32
%18 = LOAD %17  : float32
%19 = ADD %14, %18  : float32
%20 = STORE %13, %19  : void
%21 = END %20, %11  : void
%22 = AFTER %3, %21  : float32 (1,)
%23 = INDEX %22, 0  : float32
%24 = LOAD %23  : float32
%25 = MUL %9, %24  : float32
%26 = ADD %10, %25  : float32
%27 = STORE %2, %26  : void
%28 = SINK %27  : void
"""

# the scale's load goes after the loop, just before its use: a value held across a loop takes a
# register the loop needs.  The load of y[0], which the kernel stores to, keeps its place before it.
EPILOGUE_EXPECTED = """
%0 = STACK 1 [dtypes.index]  : index (1,)
%1 = PARAM %0 [ParamArg(slot=0, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (1,)
%2 = INDEX %1, 0  : float32
%3 = LOAD %2  : float32
%4 = PARAM %0 [ParamArg(slot=2, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (1,)
%5 = BUFFER [BufferArg(number=0, size=1, dtype=dtypes.float32, device=None, addrspace=AddrSpace.REG)]  : float32 (1,)
%6 = AFTER %5  : float32 (1,)
%7 = INDEX %6, 0  : float32
%8 = STORE %7, 0.0  : void
%9 = STACK 3 [dtypes.index]  : index (1,)
%10 = PARAM %9 [ParamArg(slot=1, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (3,)
%11 = RANGE 3 [(0, AxisType.REDUCE)]  : index
%12 = AFTER %5, %8, %11  : float32 (1,)
%13 = INDEX %12, 0  : float32
%14 = LOAD %13  : float32
%15 = INDEX %10, %11  : float32
%16 = LOAD %15  : float32
%17 = ADD %14, %16  : float32
%18 = STORE %13, %17  : void
%19 = END %18, %11  : void
%20 = AFTER %5, %19  : float32 (1,)
%21 = INDEX %20, 0  : float32
%22 = LOAD %21  : float32
%23 = INDEX %4, 0  : float32
%24 = LOAD %23  : float32
%25 = MUL %24, %22  : float32
%26 = ADD %3, %25  : float32
%27 = STORE %2, %26  : void
%28 = LINEAR %1, 0, %2, %3, %4, %5, %6, %7, 0.0, %8, 3, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27 ['r_R3']  : void
"""


def test_linearize_places_loads_used_after_a_loop_after_it() -> None:
    linear = check_stage(EPILOGUE_BEFORE, lambda ast: linearize_kernel(ast, "r_R3"), EPILOGUE_EXPECTED)
    place = {u: i for i, u in enumerate(linear.src)}
    end = next(u for u in linear.src if u.op is Ops.END)
    loads = [u for u in linear.src if u.op is Ops.LOAD and u.src[0].src[0].op is Ops.PARAM]
    slots = {load.src[0].src[0].arg.slot: place[load] for load in loads}
    assert slots[0] < place[end] < slots[2]
