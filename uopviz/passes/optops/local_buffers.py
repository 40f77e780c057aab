"""GPU: reductions over GROUP_REDUCE axes through LOCAL buffers (the Optimize stage's last pass).

A SPLIT to GROUP_REDUCE says that the threads of a workgroup share a reduction; here each thread
reduces its share, writes it to a LOCAL buffer, waits at a BARRIER, and the group's slots are
reduced again, after which the GROUP_REDUCE ranges are workgroup threads (LOCAL).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from uopviz.core.dtype import AddrSpace
from uopviz.core.ops import AxisType, Ops
from uopviz.core.rewrite import PatternMatcher, UPat, graph_rewrite
from uopviz.core.uop import UOp
from uopviz.passes.indexing import flat_index
from uopviz.passes.optops.axes import range_size, ranges_of, renumber, substitute_ranges


@dataclass
class _LocalContext:
    threads: tuple[UOp, ...]  # the kernel's LOCAL ranges: each thread of a workgroup has one slot
    lanes: tuple[UOp, ...]  # UPCAST ranges: each lane has one slot
    count: int = 0


def group_reduce_through_local(ctx: _LocalContext, reduce: UOp) -> UOp | None:
    """A reduction over GROUP_REDUCE ranges: every thread of the group reduces its share, writes it
    to a LOCAL buffer (one slot per thread and lane), waits at a BARRIER, and then reduces the
    group's slots."""
    groups = [r for r in reduce.src[1:] if r.arg[1] is AxisType.GROUP_REDUCE]
    if not groups:
        return None
    rest = [r for r in reduce.src[1:] if r.arg[1] is not AxisType.GROUP_REDUCE]
    value = reduce.src[0]
    partial = UOp(Ops.REDUCE, (value, *rest), reduce.arg) if rest else value
    used = {u for u in partial.toposort() if u.op is Ops.RANGE}
    slots = [r for r in (*ctx.threads, *ctx.lanes) if r in used] + groups
    sizes = [range_size(r) for r in slots]
    temp = UOp.buffer(math.prod(sizes), value.dtype.scalar, None, AddrSpace.LOCAL, number=1000 + ctx.count)
    ctx.count += 1
    store = UOp(Ops.STORE, (UOp(Ops.INDEX, (temp, flat_index(slots, sizes))), partial))
    barrier = UOp(Ops.BARRIER, (store,))
    again = {r: UOp.range(r.src[0], AxisType.REDUCE, 40_000 + ctx.count * 8 + i)
             for i, r in enumerate(groups)}
    read_slots = [again.get(r, r) for r in slots]
    read = UOp(Ops.LOAD, (UOp(Ops.INDEX, (UOp(Ops.AFTER, (temp, barrier)), flat_index(read_slots, sizes))),))
    return UOp(Ops.REDUCE, (read, *again.values()), reduce.arg)


local_buffer_rules = PatternMatcher([
    (UPat(Ops.REDUCE, name="reduce"), group_reduce_through_local, "group_reduce_through_local"),
], name="insert local buffers")


def insert_local_buffers(ast: UOp) -> UOp:
    """The Optimize stage's last pass: GROUP_REDUCE reductions through LOCAL buffers, after which the
    GROUP_REDUCE ranges are workgroup threads (LOCAL)."""
    ranges = ranges_of(ast)
    if not any(r.arg[1] is AxisType.GROUP_REDUCE for r in ranges):
        return ast
    ctx = _LocalContext(tuple(r for r in ranges if r.arg[1] is AxisType.LOCAL),
                        tuple(r for r in ranges if r.arg[1] is AxisType.UPCAST))
    ast = graph_rewrite(ast, local_buffer_rules, ctx=ctx, name="insert local buffers")
    threads = {r: UOp.range(r.src[0], AxisType.LOCAL, r.arg[0]) for r in ranges_of(ast)
               if r.arg[1] is AxisType.GROUP_REDUCE}
    return renumber(substitute_ranges(ast, threads), ranges_of(substitute_ranges(ast, threads)))

__all__ = ["insert_local_buffers", "local_buffer_rules"]
