"""Expand alone, from text: an UPCAST range becomes vector lanes (tests/stage_text.py)."""

from __future__ import annotations

from stage_text import check_stage

from uopviz.core.ops import Ops
from uopviz.passes.expand import expand_kernel

# y = x * 2 over 8 elements, the axis split 2 x UPCAST 4 by Optimize
BEFORE = """
%0 = STACK 8 [dtypes.index]  : index (1,)
%1 = PARAM %0 [ParamArg(slot=0, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (8,)
%2 = RANGE 2 [(0, AxisType.GLOBAL)]  : index
%3 = MUL %2, 4  : index
%4 = RANGE 4 [(1, AxisType.UPCAST)]  : index
%5 = ADD %3, %4  : index
%6 = INDEX %1, %5  : float32
%7 = PARAM %0 [ParamArg(slot=1, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (8,)
%8 = INDEX %7, %5  : float32
%9 = LOAD %8  : float32
%10 = MUL %9, 2.0  : float32
%11 = STORE %6, %10  : void
%12 = SINK %11  : void
"""

# the UPCAST range is gone: its four values are a VECTORIZE of addresses (base + 0..3), the load,
# the multiply (by a vector of the constant) and the store are float32.vec4
EXPECTED = """
%0 = STACK 8 [dtypes.index]  : index (1,)
%1 = PARAM %0 [ParamArg(slot=0, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (8,)
%2 = RANGE 2 [(0, AxisType.GLOBAL)]  : index
%3 = MUL %2, 4  : index
%4 = ADD %3, 1  : index
%5 = ADD %3, 2  : index
%6 = ADD %3, 3  : index
%7 = VECTORIZE %3, %4, %5, %6  : index.vec4
%8 = INDEX %1, %7  : float32.vec4
%9 = PARAM %0 [ParamArg(slot=1, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (8,)
%10 = INDEX %9, %7  : float32.vec4
%11 = LOAD %10  : float32.vec4
%12 = VECTORIZE 2.0, 2.0, 2.0, 2.0  : float32.vec4
%13 = MUL %11, %12  : float32.vec4
%14 = STORE %8, %13  : void
%15 = SINK %14  : void
"""


def test_expand_turns_the_upcast_range_into_four_lanes() -> None:
    kernel = check_stage(BEFORE, lambda ast: expand_kernel(ast, "E_g2_u4"), EXPECTED)
    assert not any(u.op is Ops.RANGE and u.arg[1].name == "UPCAST" for u in kernel.toposort())


def test_a_kernel_without_lane_ranges_is_left_as_it_is() -> None:
    from uopviz.core.uop_text import parse_graph

    after = parse_graph(EXPECTED)
    assert expand_kernel(after, "E_g2_u4") is after
