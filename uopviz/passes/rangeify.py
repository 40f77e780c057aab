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
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from uopviz.core.dtype import AddrSpace, dtypes
from uopviz.core.errors import UopvizError
from uopviz.core.ops import AxisType, GroupOp, Ops
from uopviz.core.rewrite import PatternMatcher, UPat, graph_rewrite, substitute
from uopviz.core.uop import UOp, UOpError
from uopviz.passes.indexing import (
    at_least,
    bounds,
    conjunction,
    flat_index,
    iadd,
    iconst,
    imul,
    is_const,
    lower_than,
    simplify_indices,
    unflatten,
)
from uopviz.passes.optops.axes import reduce_identity
from uopviz.passes.optops.kernel import Kernel
from uopviz.passes.schedule import Lowering, ScheduleItem

REALIZE = "realize"  # tag of the values that get their own buffer


class RangeifyError(UopvizError, ValueError):
    """A graph Rangeify cannot turn into kernels: names the op and why."""


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


def shard_axis_of(value: UOp) -> int | None:
    """The axis a value on an n-tuple device is sharded on (None: replicated, or one device)."""
    if not isinstance(value.device, tuple):
        return None
    try:
        return value.axis
    except UOpError as error:
        raise RangeifyError(f"cannot tell how {value.op.name}{value.shape} is sharded: {error}") from error


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
# 3. kernelize: index pushdown


@dataclass
class Shard:
    """Which launch of a kernel on an n-tuple device this is: device ``index`` of ``count``.
    ``whole``: the kernel is a COPY, so it reads its sources where they are (across devices)."""

    index: int
    count: int
    whole: bool


@dataclass
class KernelContext:
    """State of building one kernel: its PARAMs (program value → kernel PARAM) and its ranges."""

    params: dict[UOp, UOp] = field(default_factory=dict)
    reduce_ranges: dict[tuple, UOp] = field(default_factory=dict)
    next_range: int = 0
    shard: Shard | None = None

    def local(self, value: UOp) -> bool:
        """True when this launch sees only its own device's part of ``value`` (a per-device launch of
        a kernel that is not a COPY, reading a buffer on the n-tuple device)."""
        return self.shard is not None and not self.shard.whole and isinstance(value.device, tuple)

    def param_for(self, value: UOp, local: bool | None = None) -> UOp:
        """The kernel PARAM bound to program-level buffer ``value`` (slots in order of first use)."""
        found = self.params.get(value)
        if found is None:
            base = _storage_of(value)
            dtype = base.arg.dtype if base.op in (Ops.BUFFER, Ops.PARAM) else value.dtype
            size = value.shape[0]
            if self.local(value) if local is None else local:
                size //= self.shard.count  # this device's part
            found = UOp.param(len(self.params), (size,), dtype, value.device, AddrSpace.GLOBAL)
            self.params[value] = found
        return found

    def new_range(self, size: int, axis_type: AxisType) -> UOp:
        """A fresh range of this kernel (numbers give the kernel order)."""
        number = self.next_range
        self.next_range += 1
        return UOp.range(size, axis_type, number)


def _storage_of(value: UOp) -> UOp:
    while value.op is Ops.AFTER:
        value = value.src[0]
    return value


def _is_pushdown(idx: UOp) -> bool:
    """An INDEX whose indices are scalar ``index`` values, one per axis: a value at a point."""
    source = idx.src[0]
    indices = idx.src[1:]
    if len(indices) != len(source.shape):
        return False
    return all(i.shape == () and i.dtype is dtypes.index for i in indices)


def _indexed(value: UOp, indices: Sequence[UOp]) -> UOp:
    """``value`` at ``indices`` (a CONST is the same everywhere)."""
    if value.op is Ops.CONST:
        return value
    return UOp(Ops.INDEX, (value, *indices))


def _broadcast_indices(source_shape: tuple[int, ...], out_shape: tuple[int, ...],
                       indices: Sequence[UOp]) -> list[UOp]:
    """The indices of an operand broadcast (right-aligned) to ``out_shape``: size-1 axes read 0."""
    rank = len(source_shape)
    tail = list(indices[len(indices) - rank:]) if rank else []
    return [iconst(0) if size == 1 else index for size, index in zip(source_shape, tail)]


def index_through_elementwise(idx: UOp, x: UOp) -> UOp | None:
    """An elementwise op at a point is the op of its operands at that point (broadcasting them)."""
    if not _is_pushdown(idx):
        return None
    indices = idx.src[1:]
    sources = tuple(_indexed(s, _broadcast_indices(s.shape, x.shape, indices)) for s in x.src)
    return UOp(x.op, sources, x.arg)


def index_through_bitcast(idx: UOp, x: UOp) -> UOp | None:
    """BITCAST keeps the shape: reinterpret the element at the same point."""
    if not _is_pushdown(idx):
        return None
    return UOp(Ops.BITCAST, (_indexed(x.src[0], idx.src[1:]),), x.arg)


def index_through_marker(idx: UOp, x: UOp) -> UOp | None:
    """Markers (and a COPY or LOAD seen from the kernel that performs it) are the identity on data.
    A LOAD this pass made (of an address in a kernel PARAM) is already the value at the point: a
    user's INDEX naming one element (shape ``()``) becomes such a LOAD before the kernel's own
    INDEX of its result reaches it."""
    if not _is_pushdown(idx):
        return None
    if x.op is Ops.LOAD and _is_kernel_address(x.src[0]):
        return x
    return _indexed(x.src[0], idx.src[1:])


def _is_kernel_address(u: UOp) -> bool:
    """An INDEX into a kernel PARAM (a flat element address), as opposed to a tensor."""
    return u.op is Ops.INDEX and u.src[0].op is Ops.PARAM and u.src[0].arg.addrspace is not None


def index_through_permute(idx: UOp, x: UOp) -> UOp | None:
    """PERMUTE: axis ``j`` of the result is axis ``order[j]`` of the source."""
    if not _is_pushdown(idx):
        return None
    order, indices = x.arg, idx.src[1:]
    source_indices: list[UOp] = [iconst(0)] * len(order)
    for position, axis in enumerate(order):
        source_indices[axis] = indices[position]
    return _indexed(x.src[0], source_indices)


def index_through_flip(idx: UOp, x: UOp) -> UOp | None:
    """FLIP: a flipped axis reads ``size - 1 - i``."""
    if not _is_pushdown(idx):
        return None
    indices = [iadd(imul(i, -1), size - 1) if flag else i
               for i, flag, size in zip(idx.src[1:], x.arg, x.shape)]
    return _indexed(x.src[0], indices)


def index_through_expand(idx: UOp, x: UOp) -> UOp | None:
    """EXPAND: a broadcast size-1 axis always reads index 0."""
    if not _is_pushdown(idx):
        return None
    indices = [iconst(0) if size == 1 else i for i, size in zip(idx.src[1:], x.src[0].shape)]
    return _indexed(x.src[0], indices)


def index_through_shrink(idx: UOp, x: UOp) -> UOp | None:
    """SHRINK: the kept window starts at the offsets."""
    if not _is_pushdown(idx):
        return None
    offsets, _ = x.marg
    return _indexed(x.src[0], [iadd(i, o) for i, o in zip(idx.src[1:], offsets)])


def index_through_pad(idx: UOp, x: UOp) -> UOp | None:
    """PAD: inside the placed window read the source at ``i - offset``, outside it the value is 0.
    The source indices are clamped (so every read stays in bounds) until the gate is folded into
    the load."""
    if not _is_pushdown(idx):
        return None
    offsets, _ = x.marg
    source = x.src[0]
    conditions: list[UOp] = []
    source_indices: list[UOp] = []
    for i, offset, size in zip(idx.src[1:], offsets, source.shape):
        inside = conjunction([at_least(i, offset), lower_than(i, offset + size)])
        shifted = iadd(i, -offset)
        if inside is None:
            source_indices.append(shifted)
            continue
        conditions.append(inside)
        source_indices.append(UOp(Ops.WHERE, (inside, shifted, iconst(0))))
    valid = conjunction(conditions)
    inner = _indexed(source, source_indices)
    if valid is None:
        return inner
    return UOp(Ops.WHERE, (valid, inner, UOp.const(x.dtype, 0)))


def reshape_indices(out_shape: tuple[int, ...], source_shape: tuple[int, ...],
                    indices: Sequence[UOp]) -> list[UOp]:
    """Indices into ``source_shape`` of the element at ``indices`` of its row-major reshape to
    ``out_shape``.  Axes are matched in groups of equal products, so only the axes that really
    merge or split get divisions and modulos."""
    if math.prod(out_shape) == 0:
        return [iconst(0)] * len(source_shape)
    out_axes = [(size, index) for size, index in zip(out_shape, indices) if size != 1]
    source_axes = [axis for axis, size in enumerate(source_shape) if size != 1]
    result: list[UOp] = [iconst(0)] * len(source_shape)
    position = 0
    group_out: list[tuple[int, UOp]] = []
    group_source: list[int] = []
    product_out = product_source = 1
    for axis in source_axes:
        group_source.append(axis)
        product_source *= source_shape[axis]
        while product_out < product_source and position < len(out_axes):
            group_out.append(out_axes[position])
            product_out *= out_axes[position][0]
            position += 1
        if product_out == product_source:
            flat = flat_index([i for _, i in group_out], [s for s, _ in group_out])
            group_indices = unflatten(flat, [source_shape[a] for a in group_source])
            for axis_in_group, index in zip(group_source, group_indices):
                result[axis_in_group] = index
            group_out, group_source, product_out, product_source = [], [], 1, 1
    return result


def index_through_reshape(idx: UOp, x: UOp) -> UOp | None:
    """RESHAPE: row-major reinterpretation, by flat position within each group of merged axes."""
    if not _is_pushdown(idx):
        return None
    return _indexed(x.src[0], reshape_indices(x.shape, x.src[0].shape, idx.src[1:]))


def index_through_replicated(ctx: KernelContext, idx: UOp, x: UOp) -> UOp | None:
    """REPLICATED collapses axes to 1: every device holds the same values there; a launch on one
    device reads its own (on the shard axis), others read the first."""
    if not _is_pushdown(idx):
        return None
    source = x.src[0]
    shard_axis = shard_axis_of(source) if ctx.shard is not None and not ctx.shard.whole else None
    indices = []
    for axis, i in enumerate(idx.src[1:]):
        if axis not in x.arg:
            indices.append(i)
        elif axis == shard_axis:
            indices.append(iconst(ctx.shard.index * (source.shape[axis] // ctx.shard.count)))
        else:
            indices.append(iconst(0))
    return _indexed(source, indices)


def index_through_stack(idx: UOp, x: UOp) -> UOp | None:
    """STACK: the leading index picks which stacked value to read."""
    if not _is_pushdown(idx):
        return None
    first, rest = idx.src[1], idx.src[2:]
    if is_const(first):
        return _indexed(x.src[first.arg[0]], rest)
    out = _indexed(x.src[-1], rest)
    for k in range(len(x.src) - 2, -1, -1):
        out = UOp(Ops.WHERE, (UOp(Ops.CMP_NE, (first, iconst(k))), out, _indexed(x.src[k], rest)))
    return out


def index_through_slice(idx: UOp, x: UOp) -> UOp | None:
    """SLICE: ``size`` elements from flat ``offset`` of the source (reinterpreted when the dtype
    differs but has the same size)."""
    if not _is_pushdown(idx):
        return None
    source, offset = x.src
    _, dtype = x.arg
    if dtype.itemsize != source.dtype.itemsize:
        raise RangeifyError(f"SLICE to {dtype.name} from {source.dtype.name}: only same-size element types "
                            f"can be sliced (the bytes of one element must be one element)")
    start = offset if offset.op is Ops.CONST else UOp(Ops.INDEX, (offset,))
    position = iadd(idx.src[1], start.cast(dtypes.index) if start.dtype is not dtypes.index else start)
    flat_source = source if len(source.shape) == 1 else source.reshape((math.prod(source.shape),))
    value = _indexed(flat_source, [position])
    return value if dtype == source.dtype else UOp(Ops.BITCAST, (value,), dtype)


def index_through_index(idx: UOp, x: UOp) -> UOp | None:
    """A gather (INDEX by tensors): each index tensor is read at the point, and the table at the
    values read.  Values outside the table read 0 (the read is guarded like a PAD)."""
    if not _is_pushdown(idx):
        return None
    table, table_indices = x.src[0], x.src[1:]
    outer = list(idx.src[1:])
    values: list[UOp] = []
    for index_tensor in table_indices:
        if index_tensor.shape == ():
            value = UOp(Ops.INDEX, (index_tensor,)) if index_tensor.op is not Ops.CONST else index_tensor
        else:
            value = _indexed(index_tensor, [outer.pop(0)])
        values.append(value.cast(dtypes.index) if value.dtype is not dtypes.index else value)
    conditions, clamped = [], []
    for value, size in zip(values, table.shape):
        inside = conjunction([at_least(value, 0), lower_than(value, size)])
        conditions.append(inside)
        clamped.append(value if inside is None else UOp(Ops.WHERE, (inside, value, iconst(0))))
    inner = _indexed(table, clamped + outer)
    valid = conjunction(conditions)
    return inner if valid is None else UOp(Ops.WHERE, (valid, inner, UOp.const(x.dtype, 0)))


def index_through_reduce(ctx: KernelContext, idx: UOp, x: UOp) -> UOp | None:
    """A REDUCE at a point opens one REDUCE range per reduced axis and reduces over them.  Reductions
    over the same sizes share their ranges (so they share their loops)."""
    if not _is_pushdown(idx):
        return None
    op, axes = x.arg
    source = x.src[0]
    if any(source.shape[a] == 0 for a in axes):
        # a reduction over nothing is its identity; a loop of no iterations would still read its
        # source once its address no longer depends on the loop (a load hoisted out of it)
        return reduce_identity(op, x.dtype)
    signature = tuple(source.shape[a] for a in axes if source.shape[a] != 1)
    indices = list(idx.src[1:])
    ranges: list[UOp] = []
    position = 0
    for axis in axes:
        size = source.shape[axis]
        if size == 1:
            indices[axis] = iconst(0)
            continue
        key = (signature, position)
        position += 1
        found = ctx.reduce_ranges.get(key)
        if found is None:
            found = ctx.new_range(size, AxisType.REDUCE)
            ctx.reduce_ranges[key] = found
        indices[axis] = found
        ranges.append(found)
    value = _indexed(source, indices)
    return UOp(Ops.REDUCE, (value, *ranges), (op, ())) if ranges else value


def load_buffer(ctx: KernelContext, idx: UOp, x: UOp) -> UOp | None:
    """Reaching a buffer (an input PARAM, a BUFFER or a realized value): load the element.  A launch on
    one device of an n-tuple device addresses that device's part of the buffer."""
    if not _is_pushdown(idx):
        return None
    if x.op is Ops.PARAM and x.arg.addrspace is not None:
        return None  # already a kernel PARAM
    if x.shape is not None and math.prod(x.shape) == 0:
        # nothing to read: the value is only ever used where a guard (PAD, a stacked part) is false,
        # and a load would address element 0 of an empty buffer; the buffer is not an argument
        return UOp.const(x.dtype.scalar, 0)
    param = ctx.param_for(x)
    position = flat_index(idx.src[1:], x.shape)
    if ctx.local(x):
        position = local_position(ctx.shard, position, x.shape[0] // ctx.shard.count, x)
    return UOp(Ops.LOAD, (UOp(Ops.INDEX, (param, position)),))


def local_position(shard: Shard, position: UOp, part: int, value: UOp) -> UOp:
    """``position`` in the device-major buffer as a position in device ``shard.index``'s part: a
    sharded value's part starts at ``index * part``; a replicated value's copy is at the start."""
    low, high = bounds(position)
    start = shard.index * part
    if start <= low and high < start + part:
        return iadd(position, -start)
    if 0 <= low and high < part:
        return position
    raise RangeifyError(f"a kernel running on device {shard.index} of {value.device} reads elements "
                        f"{low}..{high} of a buffer whose part on that device is {start}..{start + part - 1}:"
                        f" the data lives on other devices; COPY it first (e.g. gather, reduce)")


def index_constant(idx: UOp, x: UOp) -> UOp | None:
    """A CONST has the same value at every point."""
    return x if _is_pushdown(idx) else None


_MARKERS = (Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH, Ops.COPY, Ops.LOAD)


_AT = {"allow_any_len": True, "name": "idx"}  # an INDEX of the op named x, bound as idx

index_pushdown = PatternMatcher([
    (UPat(Ops.INDEX, src=(UPat(GroupOp.ELEMENTWISE, name="x"),), **_AT), index_through_elementwise, "index_through_elementwise"),  # noqa: E501
    (UPat(Ops.INDEX, src=(UPat(Ops.BITCAST, name="x"),), **_AT), index_through_bitcast, "index_through_bitcast"),  # noqa: E501
    (UPat(Ops.INDEX, src=(UPat(_MARKERS, name="x"),), **_AT), index_through_marker, "index_through_marker"),
    (UPat(Ops.INDEX, src=(UPat(Ops.PERMUTE, name="x"),), **_AT), index_through_permute, "index_through_permute"),  # noqa: E501
    (UPat(Ops.INDEX, src=(UPat(Ops.FLIP, name="x"),), **_AT), index_through_flip, "index_through_flip"),
    (UPat(Ops.INDEX, src=(UPat(Ops.EXPAND, name="x"),), **_AT), index_through_expand, "index_through_expand"),
    (UPat(Ops.INDEX, src=(UPat(Ops.SHRINK, name="x"),), **_AT), index_through_shrink, "index_through_shrink"),
    (UPat(Ops.INDEX, src=(UPat(Ops.PAD, name="x"),), **_AT), index_through_pad, "index_through_pad"),
    (UPat(Ops.INDEX, src=(UPat(Ops.RESHAPE, name="x"),), **_AT), index_through_reshape, "index_through_reshape"),  # noqa: E501
    (UPat(Ops.INDEX, src=(UPat(Ops.REPLICATED, name="x"),), **_AT), index_through_replicated, "index_through_replicated"),  # noqa: E501
    (UPat(Ops.INDEX, src=(UPat(Ops.STACK, name="x"),), **_AT), index_through_stack, "index_through_stack"),
    (UPat(Ops.INDEX, src=(UPat(Ops.SLICE, name="x"),), **_AT), index_through_slice, "index_through_slice"),
    (UPat(Ops.INDEX, src=(UPat(Ops.INDEX, name="x"),), **_AT), index_through_index, "index_through_index"),
    (UPat(Ops.INDEX, src=(UPat(Ops.REDUCE, name="x"),), **_AT), index_through_reduce, "index_through_reduce"),
    (UPat(Ops.INDEX, src=(UPat((Ops.PARAM, Ops.BUFFER, Ops.AFTER), name="x"),), **_AT), load_buffer, "load_buffer"),  # noqa: E501
    (UPat(Ops.INDEX, src=(UPat(Ops.CONST, name="x"),), **_AT), index_constant, "index_constant"),
], name="index pushdown")


# ---------------------------------------------------------------------------------------------
# gates: a PAD's validity becomes the gate of the loads it guards


def _remove_clamps(index: UOp, gate_terms: list[UOp]) -> UOp:
    """Drop ``WHERE(c, i, 0)`` clamps whose condition ``c`` is a term of the load's gate: under the
    gate they are the identity."""
    terms: set[UOp] = set()
    for term in gate_terms:  # every node of the AND trees: a clamp may test a partial conjunction
        stack = [term]
        while stack:
            node = stack.pop()
            terms.add(node)
            if node.op is Ops.AND and node.dtype is dtypes.bool:
                stack.extend(node.src)
    mapping: dict[UOp, UOp] = {}
    for u in index.toposort():
        src = tuple(mapping.get(s, s) for s in u.src)
        if u.op is Ops.WHERE and u.dtype is dtypes.index and is_const(u.src[2], 0) and u.src[0] in terms:
            mapping[u] = src[1]
        elif any(a is not b for a, b in zip(src, u.src)):
            mapping[u] = UOp(u.op, src, u.arg, u.tag)
    return mapping.get(index, index)


def pad_gate_into_load(valid: UOp, address: UOp, alt: UOp) -> UOp | None:
    """``WHERE(valid, LOAD(addr), c)`` is ``LOAD(addr, c, valid)``: the load is skipped where the
    PAD (or gather) has no element, and its index needs no clamp."""
    if alt.op is not Ops.CONST or address.op is not Ops.INDEX:
        return None
    index = _remove_clamps(address.src[1], [valid])
    if index is address.src[1] and any(u.op is Ops.LOAD for u in valid.toposort()):
        return None  # a data-dependent WHERE of the program, not a guard of this load
    return UOp(Ops.LOAD, (UOp(Ops.INDEX, (address.src[0], index)), alt, valid))


def pad_gate_merge(valid: UOp, address: UOp, alt: UOp, gate: UOp) -> UOp | None:
    """A gated load under another PAD guard takes both conditions as its gate."""
    if alt.op is not Ops.CONST:
        return None
    combined = UOp(Ops.AND, (valid, gate))
    new_address = UOp(Ops.INDEX, (address.src[0], _remove_clamps(address.src[1], [combined])))
    return UOp(Ops.LOAD, (new_address, alt, combined))


gate_rules = PatternMatcher([
    (UPat(Ops.WHERE, src=(UPat.var("valid"), UPat(Ops.LOAD, src=(UPat.var("address"),)), UPat.var("alt"))), pad_gate_into_load, "pad_gate_into_load"),  # noqa: E501
    (UPat(Ops.WHERE, src=(UPat.var("valid"), UPat(Ops.LOAD, src=(UPat.var("address"), UPat.var("alt"), UPat.var("gate"))), UPat.var("alt"))), pad_gate_merge, "pad_gate_merge"),  # noqa: E501
], name="gate loads")


# ---------------------------------------------------------------------------------------------
# kernelize


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
    located = graph_rewrite(_indexed(target, indices), index_pushdown, ctx=KernelContext(),
                            name="output address")
    position = located.src[0].src[1]
    if shard is not None:
        position = local_position(shard, position, buffer.shape[0] // shard.count, buffer)
    address = UOp(Ops.INDEX, (ctx.params[buffer], position))
    root = UOp(Ops.SINK, (UOp(Ops.STORE, (address, _indexed(value, indices))),))
    root = graph_rewrite(root, index_pushdown, ctx=ctx, name="index pushdown")
    root = graph_rewrite(root, gate_rules, name="gate loads")
    root = simplify_indices(root)
    return drop_unread_params(root, ctx.params)


def drop_unread_params(root: UOp, params: dict[UOp, UOp]) -> tuple[UOp, list[UOp]]:
    """The kernel with only the PARAMs its body still reaches, renumbered 0..n-1 in slot order, and the
    program-level values bound to them.  A read can fold away entirely (a PAD of a zero-size value,
    a SHRINK of only padding): its buffer is then neither an argument nor needed, so an empty
    buffer that no kernel wrote is never asked for."""
    reached = {u for u in root.toposort() if u.op is Ops.PARAM}
    ordered = sorted(params.items(), key=lambda kv: kv[1].arg.slot)
    kept = [(value, param) for value, param in ordered if param in reached]
    renumbered = {param: UOp(Ops.PARAM, param.src, replace(param.arg, slot=slot), param.tag)
                  for slot, (_, param) in enumerate(kept) if param.arg.slot != slot}
    return substitute(root, renumbered), [value for value, _ in kept]


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
