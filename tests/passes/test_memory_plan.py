"""Register/Memory Plan alone, from text: two accumulators whose lives do not overlap share one
register (tests/stage_text.py)."""

from __future__ import annotations

from stage_text import check_stage

from uopviz.core.ops import Ops
from uopviz.core.uop_text import parse_graph
from uopviz.passes.memory_plan import apply_register_plan, plan_registers

# y[i] = sum(a[i, 0..2]) * sum(b[i, 0..4]): two REG accumulators, the second used after the first
# is read for the last time
BEFORE = """
%0 = STACK 2 [dtypes.index]  : index (1,)
%1 = PARAM %0 [ParamArg(slot=0, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (2,)
%2 = BUFFER [BufferArg(number=0, size=1, dtype=dtypes.float32, device=None, addrspace=AddrSpace.REG)]  : float32 (1,)
%3 = STACK 6 [dtypes.index]  : index (1,)
%4 = PARAM %3 [ParamArg(slot=1, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (6,)
%5 = BUFFER [BufferArg(number=1, size=1, dtype=dtypes.float32, device=None, addrspace=AddrSpace.REG)]  : float32 (1,)
%6 = STACK 10 [dtypes.index]  : index (1,)
%7 = PARAM %6 [ParamArg(slot=2, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (10,)
%8 = RANGE 2 [(0, AxisType.GLOBAL)]  : index
%9 = INDEX %1, %8  : float32
%10 = AFTER %2, %8  : float32 (1,)
%11 = INDEX %10, 0  : float32
%12 = STORE %11, 0.0  : void
%13 = RANGE 3 [(1, AxisType.REDUCE)]  : index
%14 = AFTER %2, %12, %13  : float32 (1,)
%15 = INDEX %14, 0  : float32
%16 = LOAD %15  : float32
%17 = MULACC %8, 3, %13  : index
%18 = INDEX %4, %17  : float32
%19 = LOAD %18  : float32
%20 = ADD %16, %19  : float32
%21 = STORE %15, %20  : void
%22 = END %21, %13  : void
%23 = AFTER %2, %22  : float32 (1,)
%24 = INDEX %23, 0  : float32
%25 = LOAD %24  : float32
%26 = AFTER %5, %8  : float32 (1,)
%27 = INDEX %26, 0  : float32
%28 = STORE %27, 0.0  : void
%29 = RANGE 5 [(2, AxisType.REDUCE)]  : index
%30 = AFTER %5, %28, %29  : float32 (1,)
%31 = INDEX %30, 0  : float32
%32 = LOAD %31  : float32
%33 = MULACC %8, 5, %29  : index
%34 = INDEX %7, %33  : float32
%35 = LOAD %34  : float32
%36 = ADD %32, %35  : float32
%37 = STORE %31, %36  : void
%38 = END %37, %29  : void
%39 = AFTER %5, %38  : float32 (1,)
%40 = INDEX %39, 0  : float32
%41 = LOAD %40  : float32
%42 = MUL %25, %41  : float32
%43 = STORE %9, %42  : void
%44 = END %43, %8  : void
%45 = LINEAR %1, 2, %2, 0, 0.0, 3, %4, %5, 5, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44 ['r_g2_R3_R5']  : void
"""

# one REG buffer left: the second loop's accumulator is the first one's, zeroed again (the same
# zeroing instructions, listed a second time in the LINEAR before the second RANGE)
EXPECTED = """
%0 = STACK 2 [dtypes.index]  : index (1,)
%1 = PARAM %0 [ParamArg(slot=0, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (2,)
%2 = BUFFER [BufferArg(number=0, size=1, dtype=dtypes.float32, device=None, addrspace=AddrSpace.REG)]  : float32 (1,)
%3 = STACK 6 [dtypes.index]  : index (1,)
%4 = PARAM %3 [ParamArg(slot=1, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (6,)
%5 = STACK 10 [dtypes.index]  : index (1,)
%6 = PARAM %5 [ParamArg(slot=2, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (10,)
%7 = RANGE 2 [(0, AxisType.GLOBAL)]  : index
%8 = INDEX %1, %7  : float32
%9 = AFTER %2, %7  : float32 (1,)
%10 = INDEX %9, 0  : float32
%11 = STORE %10, 0.0  : void
%12 = RANGE 3 [(1, AxisType.REDUCE)]  : index
%13 = AFTER %2, %11, %12  : float32 (1,)
%14 = INDEX %13, 0  : float32
%15 = LOAD %14  : float32
%16 = MULACC %7, 3, %12  : index
%17 = INDEX %4, %16  : float32
%18 = LOAD %17  : float32
%19 = ADD %15, %18  : float32
%20 = STORE %14, %19  : void
%21 = END %20, %12  : void
%22 = AFTER %2, %21  : float32 (1,)
%23 = INDEX %22, 0  : float32
%24 = LOAD %23  : float32
%25 = RANGE 5 [(2, AxisType.REDUCE)]  : index
%26 = AFTER %2, %11, %25  : float32 (1,)
%27 = INDEX %26, 0  : float32
%28 = LOAD %27  : float32
%29 = MULACC %7, 5, %25  : index
%30 = INDEX %6, %29  : float32
%31 = LOAD %30  : float32
%32 = ADD %28, %31  : float32
%33 = STORE %27, %32  : void
%34 = END %33, %25  : void
%35 = AFTER %2, %34  : float32 (1,)
%36 = INDEX %35, 0  : float32
%37 = LOAD %36  : float32
%38 = MUL %24, %37  : float32
%39 = STORE %8, %38  : void
%40 = END %39, %7  : void
%41 = LINEAR %1, 2, %2, 0, 0.0, 3, %4, 5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %9, %10, %11, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40 ['r_g2_R3_R5']  : void
"""


def _registers(linear):
    return {u for u in linear.toposort() if u.op is Ops.BUFFER and u.arg.addrspace.name == "REG"}


def test_two_accumulators_that_do_not_overlap_share_one_register() -> None:
    plan = plan_registers(parse_graph(BEFORE))
    assert plan.bytes_saved == 4
    linear = check_stage(BEFORE, lambda linear: apply_register_plan(linear, plan_registers(linear)), EXPECTED)
    assert len(_registers(parse_graph(BEFORE))) == 2 and len(_registers(linear)) == 1
