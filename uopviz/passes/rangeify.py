"""Rangeify: decide the kernel split of the function, and break every kernel down to shape ().

Three passes, all rules:

1. **find kernel boundaries** (top-down): tag the tensor-level UOps that must be stored in a
   buffer: the outputs, ``CONTIGUOUS``, reductions whose value is expanded or consumed by a later
   reduction (computing them inside the consumer would repeat the whole reduction per element),
   and device changes (``COPY``/``LOAD``) with their sources.
2. **bufferize**: every tagged value ``X`` becomes ``AFTER(B, STORE(B.view, X))`` for a fresh
   BUFFER ``B`` — the spec's "Assign is Store followed by After" — viewed in ``X``'s shape.
3. **kernelize**: every tensor-level ``STORE(B.view, X)`` becomes ``CALL(kernel, B, inputs...)``.
   The kernel is ``SINK(STORE(INDEX(PARAM0, flat), INDEX(X, r0, r1, ...)))`` over fresh LOOP
   ranges, and the *index pushdown* rules move the ``INDEX`` down through ``X``: movement ops
   become index arithmetic (PERMUTE reorders, SHRINK offsets, FLIP mirrors, EXPAND pins size-1
   axes to 0, RESHAPE divides and takes modulos, PAD guards with a validity mask), elementwise ops
   broadcast, a REDUCE opens REDUCE ranges, and reaching a buffer makes a ``LOAD``.  PAD guards then
   become gated loads (``LOAD(addr, 0, valid)``).

The result is the kernel AST of ``docs/design/kernel-ir.md``.  A value on an n-tuple device gets
one kernel per device (each computing its device's shard, or its copy of a replicated value, from
that device's part of every buffer); reading another device's part is an error that asks for a
COPY.  Everything runs inside the "Rangeify" stage of the pipeline, so the trace shows every rule.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from uopviz.core.ops import AxisType, GroupOp, Ops
from uopviz.core.rewrite import PatternMatcher, UPat, graph_rewrite, substitute
from uopviz.core.uop import UOp, UOpError
from uopviz.passes.index_pushdown import (
    KernelContext,
    RangeifyError,
    Shard,
    gate_rules,
    index_pushdown,
    indexed,
    local_position,
    shard_axis_of,
)
from uopviz.passes.indexing import iadd, iconst, simplify_indices
from uopviz.passes.optops.kernel import Kernel
from uopviz.passes.schedule import Lowering, ScheduleItem

T = TypeVar("T")

REALIZE = "realize"  # tag of the values that get their own buffer


# ---------------------------------------------------------------------------------------------
# 0. large reductions to few values in two stages (backends with workgroups: GPUs)

#: a reduction of at least this many terms to at most SPLIT_REDUCE_MAX_OUTPUTS values is split
SPLIT_REDUCE_MIN_TERMS = 1 << 18
SPLIT_REDUCE_MAX_OUTPUTS = 1024
#: how many partial results the first stage makes per output, the first that divides the axis with
#: 16 terms or more each: 131072 give each of an H100's 132 multiprocessors 4 blocks of 256 threads.
#: The partials are the inner part of the axis, so neighbouring threads read neighbouring elements
SPLIT_REDUCE_PARTIALS = (131072, 65536, 32768, 16384, 8192, 4096, 2048)
#: the first stage has at least this many values, so the second never qualifies to split again
SPLIT_REDUCE_FIRST_STAGE = 2 * SPLIT_REDUCE_MAX_OUTPUTS


def split_reduce(x: UOp) -> UOp | None:
    """``REDUCE(x, axes)`` of many terms to few values, in two reductions: the longest reduced axis
    ``n`` is viewed as ``(n/k, k)``; the first reduction keeps ``k`` partial results per value (one
    kernel over k threads: a GPU is busy), the second reduces them (a reduction of a reduction is a
    kernel boundary; the GPU heuristic gives it one workgroup's threads, GROUP_REDUCE).  A
    single-thread 64M sum becomes 131072 threads of 512 terms each, then one block of 131072 terms."""
    op, axes = x.arg
    source = x.src[0]
    outputs = math.prod(x.shape)
    if not axes or outputs > SPLIT_REDUCE_MAX_OUTPUTS or math.prod(source.shape[a] for a in axes) < \
            SPLIT_REDUCE_MIN_TERMS:
        return None
    axis = max(axes, key=lambda a: source.shape[a])
    extent = source.shape[axis]
    fits = [k for k in SPLIT_REDUCE_PARTIALS if extent % k == 0 and extent // k >= 16]
    partials = next((k for k in fits if k * outputs >= SPLIT_REDUCE_FIRST_STAGE), None)
    if partials is None:
        return None
    shape = source.shape
    viewed = source.reshape((*shape[:axis], extent // partials, partials, *shape[axis + 1:]))
    first_axes = sorted(a + (a > axis) for a in axes)  # the outer part of `axis` stays at `axis`
    first = viewed.reduce(op, first_axes)
    return first.reduce(op, (axis + 1,)).reshape(x.shape)


split_reduce_rules = PatternMatcher([
    (UPat(Ops.REDUCE, name="x", predicate=lambda u: u.shape is not None), split_reduce, "split_reduce"),
], name="split large reductions")


# ---------------------------------------------------------------------------------------------
# 1. kernel boundaries


@dataclass
class BoundaryContext:
    """Why each tensor-level UOp must be realized (by identity in the graph before tagging)."""

    reasons: dict[UOp, str] = field(default_factory=dict)


_VIEW_OPS = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.SHRINK, Ops.FLIP, Ops.PAD, Ops.REPLICATED, Ops.DETACH,
                       Ops.CONTIGUOUS_BACKWARD})
_STORAGE_LEAVES = frozenset({Ops.PARAM, Ops.BUFFER, Ops.AFTER, Ops.CONST, Ops.BINARY})


def find_boundaries(outputs: Sequence[UOp]) -> dict[UOp, str]:
    """Which values become buffers, and why: ``{uop: reason}`` (the reason names the rule)."""
    reasons: dict[UOp, str] = {}
    for out in outputs:
        reasons.setdefault(out, "realize_output")
    for u in toposort_all(outputs):
        if u.op is Ops.CONTIGUOUS:
            reasons.setdefault(u, "realize_contiguous")
        elif u.op in (Ops.COPY, Ops.LOAD):
            reasons.setdefault(u, "realize_copy")
            if not _is_stored(u.src[0]):
                reasons.setdefault(u.src[0], "realize_copy_source")
    # reductions that would be recomputed: walk from each kernel root, remembering whether the
    # path from the root expands (EXPAND, implicit broadcast) or reduces again
    pending = list(dict.fromkeys(reasons))
    while pending:
        root = pending.pop()
        visited: set[tuple[int, bool]] = set()  # (id, flag): tuples of UOps would compare with ==
        stack = _walk_sources(root, False, "")
        while stack:
            node, repeated, why = stack.pop()
            if (id(node), repeated) in visited or node in reasons:
                continue
            visited.add((id(node), repeated))
            if node.op is Ops.REDUCE and repeated:
                reasons[node] = why
                pending.append(node)
                continue
            stack.extend(_walk_sources(node, repeated, why))
    return reasons


def _is_stored(u: UOp) -> bool:
    """True for values already in memory (inputs, buffers, realized values) seen through views."""
    while u.op in _VIEW_OPS or u.op is Ops.EXPAND:
        u = u.src[0]
    return u.op in (Ops.PARAM, Ops.BUFFER, Ops.AFTER, Ops.BINARY, Ops.CONST)


def _walk_sources(node: UOp, repeated: bool, why: str) -> list[tuple[UOp, bool, str]]:
    """The sources of ``node`` whose values a kernel computing ``node`` reads, and whether each
    is read more often than it has elements (expanded or reduced again)."""
    if node.op in _STORAGE_LEAVES:
        return []
    if node.op is Ops.REDUCE:
        return [(node.src[0], True, "realize_reduce_of_reduce")]
    if node.op is Ops.EXPAND:
        expands = math.prod(node.shape) > math.prod(node.src[0].shape)
        reason = why if repeated or not expands else "realize_expanded_reduce"
        return [(node.src[0], repeated or expands, reason)]
    if node.op in GroupOp.ELEMENTWISE and len(node.src) > 1:
        out = []
        for s in node.src:
            broadcast = math.prod(s.shape) < math.prod(node.shape)
            reason = why if repeated or not broadcast else "realize_expanded_reduce"
            out.append((s, repeated or broadcast, reason))
        return out
    if node.op in GroupOp.SHAPED_MOVEMENT:
        return [(node.src[0], repeated, why)]
    if node.op is Ops.INDEX:  # a gather reads its indices once per element, the table many times
        return [(node.src[0], True, "realize_expanded_reduce")] + [(s, repeated, why) for s in node.src[1:]]
    return [(s, repeated, why) for s in node.src]


def toposort_all(roots: Sequence[UOp]) -> list[UOp]:
    """Every UOp reachable from ``roots``, sources first."""
    from uopviz.core.uop import toposort

    return toposort(list(roots))


def _tag_for_realize(ctx: BoundaryContext, x: UOp) -> UOp | None:
    reason = ctx.reasons.get(x)
    return None if reason is None or x.tag is not None else x.replace(tag=(REALIZE, reason))


def realize_output(ctx: BoundaryContext, x: UOp) -> UOp | None:
    """A program output is stored in its own buffer."""
    return _tag_for_realize(ctx, x) if ctx.reasons.get(x) == "realize_output" else None


def realize_contiguous(ctx: BoundaryContext, x: UOp) -> UOp | None:
    """CONTIGUOUS forces a buffer: its value is computed once, by its own kernel."""
    return _tag_for_realize(ctx, x) if ctx.reasons.get(x) == "realize_contiguous" else None


def realize_expanded_reduce(ctx: BoundaryContext, x: UOp) -> UOp | None:
    """A reduction whose value is expanded (or broadcast) is stored: recomputing it per element of
    the expansion would repeat the whole reduction."""
    return _tag_for_realize(ctx, x) if ctx.reasons.get(x) == "realize_expanded_reduce" else None


def realize_reduce_of_reduce(ctx: BoundaryContext, x: UOp) -> UOp | None:
    """A reduction consumed by a later reduction is stored (one reduction level per kernel)."""
    return _tag_for_realize(ctx, x) if ctx.reasons.get(x) == "realize_reduce_of_reduce" else None


def realize_copy(ctx: BoundaryContext, x: UOp) -> UOp | None:
    """A device change (COPY, or a LOAD to another device) is a kernel of its own."""
    return _tag_for_realize(ctx, x) if ctx.reasons.get(x) == "realize_copy" else None


def realize_copy_source(ctx: BoundaryContext, x: UOp) -> UOp | None:
    """What is copied to another device is computed on its own device first."""
    return _tag_for_realize(ctx, x) if ctx.reasons.get(x) == "realize_copy_source" else None


boundary_rules = PatternMatcher([
    (UPat(name="x", predicate=lambda u: u.tag is None), realize_output, "realize_output"),
    (UPat(Ops.CONTIGUOUS, name="x"), realize_contiguous, "realize_contiguous"),
    (UPat(Ops.REDUCE, name="x"), realize_expanded_reduce, "realize_expanded_reduce"),
    (UPat(Ops.REDUCE, name="x"), realize_reduce_of_reduce, "realize_reduce_of_reduce"),
    (UPat((Ops.COPY, Ops.LOAD), name="x"), realize_copy, "realize_copy"),
    (UPat(name="x", predicate=lambda u: u.tag is None), realize_copy_source, "realize_copy_source"),
], name="find kernel boundaries")


# ---------------------------------------------------------------------------------------------
# 2. bufferize


@dataclass
class BufferizeContext:
    """The buffers made so far, in the order their kernels run."""

    buffers: list[UOp] = field(default_factory=list)


def _buffer_for(x: UOp) -> tuple[UOp, int]:
    """A fresh BUFFER that holds ``x`` and its element count.  On an n-tuple device each device holds
    its shard of a sharded value, or a whole copy of a replicated one."""
    count = math.prod(x.shape)
    device = x.device if x.device is not None else "CPU"
    if isinstance(device, tuple):
        sharded = shard_axis_of(x) is not None
        per_device = count // len(device) if sharded else count
        return UOp.buffer(per_device, x.dtype, device), count
    return UOp.buffer(count, x.dtype, device), count


def view_of(buffer: UOp, shape: tuple[int, ...], count: int, shard_axis: int | None = None) -> UOp:
    """``buffer`` seen as a value of ``shape``: its first ``count`` elements; or, for a value sharded
    on ``shard_axis`` over an n-tuple device, device ``d``'s slice in the ``d``-th part of the buffer
    (device-major, the layout of ``Tensor.shard``)."""
    value = buffer
    devices = buffer.arg.device if buffer.op is Ops.BUFFER else buffer.src[0].arg.device
    if shard_axis is not None and isinstance(devices, tuple):
        count_devices = len(devices)
        shard = list(shape)
        shard[shard_axis] //= count_devices
        value = value.reshape((count_devices, *shard))
        order = [*range(1, shard_axis + 1), 0, *range(shard_axis + 1, len(shape) + 1)]
        if order != list(range(len(order))):
            value = value.permute(order)
        return value.reshape(shape) if value.shape != shape else value
    if buffer.shape[0] != count:
        value = value.shrink((0,), (count,))
    return value if value.shape == shape else value.reshape(shape)


def bufferize(ctx: BufferizeContext, x: UOp) -> UOp:
    """A value tagged for realization becomes ``AFTER(B, STORE(B.view, X)).view``."""
    value = x.replace(tag=None)
    if value.op is Ops.CONTIGUOUS:  # the marker did its job: it made this boundary
        value = value.src[0]
    buffer, count = _buffer_for(value)
    ctx.buffers.append(buffer)
    axis = shard_axis_of(value)
    store = UOp(Ops.STORE, (view_of(buffer, value.shape, count, axis), value))
    return view_of(UOp(Ops.AFTER, (buffer, store)), value.shape, count, axis)


bufferize_rules = PatternMatcher([
    (UPat(name="x", predicate=lambda u: isinstance(u.tag, tuple) and u.tag[0] == REALIZE), bufferize, "bufferize"),  # noqa: E501
], name="bufferize")


# ---------------------------------------------------------------------------------------------
# 3. kernelize (the index pushdown is index_pushdown.py's)


@dataclass
class KernelizeContext:
    """The kernels made so far (CALLs in the order they must run)."""

    calls: list[UOp] = field(default_factory=list)


def build_kernel(target: UOp, value: UOp, shard: Shard | None = None) -> tuple[UOp, list[UOp]]:
    """The kernel AST storing ``value`` into the buffer viewed by ``target``, and the program-level
    values bound to its PARAM slots.  With ``shard``: the launch on one device of an n-tuple device,
    computing that device's shard (or its whole copy of a replicated value)."""
    buffer = _view_base(target)
    ctx = KernelContext(shard=shard)
    ctx.param_for(buffer, local=shard is not None)
    shape = value.shape
    axis = shard_axis_of(value) if shard is not None else None
    indices: list[UOp] = []
    for position, size in enumerate(shape):
        extent = size // shard.count if position == axis else size
        index = ctx.new_range(extent, AxisType.LOOP) if extent != 1 else iconst(0)
        indices.append(iadd(index, shard.index * extent) if position == axis else index)
    # the address: the store target's view at these indices (the pushdown finds the position)
    located = graph_rewrite(indexed(target, indices), index_pushdown, ctx=KernelContext(),
                            name="output address")
    position = located.src[0].src[1]
    if shard is not None:
        position = local_position(shard, position, buffer.shape[0] // shard.count, buffer)
    address = UOp(Ops.INDEX, (ctx.params[buffer], position))
    root = UOp(Ops.SINK, (UOp(Ops.STORE, (address, indexed(value, indices))),))
    root = graph_rewrite(root, index_pushdown, ctx=ctx, name="index pushdown")
    root = graph_rewrite(root, gate_rules, name="gate loads")
    return finish_kernel(root, list(ctx.params))  # the keys in slot order


def finish_kernel(root: UOp, bound: Sequence[T], keep: Collection[int] = ()) -> tuple[UOp, list[T]]:
    """A built kernel tidied and its slots compacted: the index arithmetic simplified and the gates
    its bounds decided dropped (:func:`~uopviz.passes.indexing.simplify_indices`), then the PARAM
    slots nothing reads any more dropped (:func:`drop_unread_params`).  The last step of every
    kernel Rangeify builds, and of every kernel NNEF's lowering and kernel passes build."""
    return drop_unread_params(simplify_indices(root), bound, keep)


def drop_unread_params(root: UOp, bound: Sequence[T], keep: Collection[int] = ()) -> tuple[UOp, list[T]]:
    """The kernel with only the PARAM slots its body still reaches (and the slots in ``keep``),
    renumbered 0..n-1 in slot order, and what is bound to them: ``bound[slot]`` is bound to slot
    ``slot`` (a program-level value here; a tensor's name in NNEF's lowering and kernel passes,
    which keep slot 0, the output).  A read can fold away entirely (a PAD of a zero-size value, a
    SHRINK of only padding): its buffer is then neither an argument nor needed, so an empty buffer
    that no kernel wrote is never asked for.  PARAMs of other slots (NNEF's negative placeholders)
    stay as they are."""
    params = [u for u in root.toposort() if u.op is Ops.PARAM and 0 <= u.arg.slot < len(bound)]
    reached = {param.arg.slot for param in params}
    kept = [slot for slot in range(len(bound)) if slot in reached or slot in keep]
    new_slot = {old: new for new, old in enumerate(kept)}
    renumbered = {param: UOp(Ops.PARAM, param.src, replace(param.arg, slot=new_slot[param.arg.slot]),
                             param.tag) for param in params if new_slot[param.arg.slot] != param.arg.slot}
    return substitute(root, renumbered), [bound[slot] for slot in kept]


def _view_base(target: UOp) -> UOp:
    while target.op in (Ops.RESHAPE, Ops.SHRINK, Ops.PERMUTE):
        target = target.src[0]
    if target.op is not Ops.BUFFER:
        raise RangeifyError(f"a tensor-level STORE writes a BUFFER (seen through views), got "
                            f"{target.op.name}")
    return target


def kernelize(ctx: KernelizeContext, target: UOp, value: UOp) -> UOp:
    """A tensor-level ``STORE(B.view, X)`` becomes ``CALL(kernel, B, inputs...)``; on an n-tuple device
    one CALL per device (arg ``(index, count, whole)``), grouped."""
    devices = _view_base(target).arg.device
    if math.prod(value.shape) == 0:
        return UOp(Ops.GROUP, ())  # nothing to compute: the (empty) buffer needs no kernel
    if not isinstance(devices, tuple):
        kernel, arguments = build_kernel(target, value)
        call = UOp(Ops.CALL, (kernel, *arguments))
        ctx.calls.append(call)
        return call
    whole = value.op in (Ops.COPY, Ops.LOAD)
    calls = []
    for index in range(len(devices)):
        kernel, arguments = build_kernel(target, value, Shard(index, len(devices), whole))
        calls.append(UOp(Ops.CALL, (kernel, *arguments), (index, len(devices), whole)))
    ctx.calls.extend(calls)
    return UOp(Ops.GROUP, tuple(calls))


kernelize_rules = PatternMatcher([
    (UPat(Ops.STORE, src=(UPat(name="target", predicate=lambda u: u.op is not Ops.INDEX), UPat.var("value"))), kernelize, "kernelize"),  # noqa: E501
], name="kernelize")


# ---------------------------------------------------------------------------------------------
# the stage


@dataclass
class RangeifyResult:
    """The function with every kernel as a CALL, and the buffers the program allocates."""

    function: UOp
    buffers: list[UOp]


def rangeify(function: UOp, split_reductions: bool = False) -> RangeifyResult:
    """Split the FUNCTION from Callify into kernels (see the module docstring); with
    ``split_reductions`` (backends with workgroups), large reductions to few values first become two
    (:func:`split_reduce`)."""
    body = function.src[0]
    if split_reductions:
        body = graph_rewrite(body, split_reduce_rules, name="split large reductions")
    reasons = find_boundaries(body.src)
    try:
        tagged = graph_rewrite(body, boundary_rules, ctx=BoundaryContext(reasons), bottom_up=False,
                               name="find kernel boundaries")
        buffer_ctx = BufferizeContext()
        bufferized = graph_rewrite(tagged, bufferize_rules, ctx=buffer_ctx, name="bufferize")
        kernels = graph_rewrite(bufferized, kernelize_rules, ctx=KernelizeContext(), name="kernelize")
    except UOpError as error:
        raise RangeifyError(f"Rangeify could not build the kernels: {error}") from error
    return RangeifyResult(UOp(Ops.FUNCTION, (kernels, *function.src[1:]), function.arg), buffer_ctx.buffers)

def rangeify_stage(lowering: Lowering) -> None:
    """Rangeify: kernel boundaries, and every kernel down to shape-() values over RANGEs."""
    from uopviz.backends import get  # the backend's abilities only; it may be unavailable here

    lowering.graph = rangeify(lowering.graph, split_reductions=get(lowering.backend).has_local).function
    calls = [u for u in lowering.graph.toposort() if u.op is Ops.CALL]
    lowering.items = [
        ScheduleItem(index, call.src[0], list(call.src[1:]),
                     Kernel(call.src[0], lowering.backend, name_hint=f"k{index}"), shard=call.arg)
        for index, call in enumerate(calls)
    ]
