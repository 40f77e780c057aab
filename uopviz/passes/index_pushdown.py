"""Rangeify's index pushdown: how the ``INDEX`` a kernel reads its value at moves down to the buffers.

The kernelize pass of :mod:`uopviz.passes.rangeify` writes each kernel as
``STORE(INDEX(PARAM0, flat), INDEX(X, r0, r1, ...))``; the rules of :data:`index_pushdown` move that
``INDEX`` down through ``X``: movement ops become index arithmetic (PERMUTE reorders, SHRINK offsets,
FLIP mirrors, EXPAND pins size-1 axes to 0, RESHAPE divides and takes modulos, PAD guards with a
validity mask), elementwise ops broadcast, a REDUCE opens REDUCE ranges, and reaching a buffer makes
a ``LOAD`` (of this device's part, for a value on an n-tuple device).  :data:`gate_rules` then turn
PAD's guards into gated loads (``LOAD(addr, 0, valid)``).  :class:`RangeifyError` is the stage's
error, raised here and there; :mod:`uopviz.passes.rangeify` re-exports it.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from uopviz.core.dtype import AddrSpace, DType, dtypes
from uopviz.core.errors import UopvizError
from uopviz.core.ops import AxisType, GroupOp, Ops
from uopviz.core.rewrite import PatternMatcher, UPat
from uopviz.core.uop import UOp, UOpError
from uopviz.core.uop_types import Device
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
    unflatten,
)
from uopviz.passes.optops.axes import reduce_identity


class RangeifyError(UopvizError, ValueError):
    """A graph Rangeify cannot turn into kernels: names the op and why."""



def shard_axis_of(value: UOp) -> int | None:
    """The axis a value on an n-tuple device is sharded on (None: replicated, or one device)."""
    if not isinstance(value.device, tuple):
        return None
    try:
        return value.axis
    except UOpError as error:
        raise RangeifyError(f"cannot tell how {value.op.name}{value.shape} is sharded: {error}") from error


# ---------------------------------------------------------------------------------------------
# index pushdown


@dataclass
class Shard:
    """Which launch of a kernel on an n-tuple device this is: device ``index`` of ``count``.
    ``whole``: the kernel is a COPY, so it reads its sources where they are (across devices)."""

    index: int
    count: int
    whole: bool


@dataclass
class KernelContext:
    """State of building one kernel: its PARAMs (program value → kernel PARAM) and its ranges.
    NNEF's :class:`~uopviz.nnef.lowering.kernel_builder.KernelBuilder` keeps its PARAM slots in one
    too (tensor name → kernel PARAM)."""

    params: dict[Hashable, UOp] = field(default_factory=dict)
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
        if found is not None:
            return found
        base = _storage_of(value)
        dtype = base.arg.dtype if base.op in (Ops.BUFFER, Ops.PARAM) else value.dtype
        size = value.shape[0]
        if self.local(value) if local is None else local:
            size //= self.shard.count  # this device's part
        return self.bind_param(value, size, dtype, value.device)

    def bind_param(self, key: Hashable, size: int, dtype: DType, device: Device) -> UOp:
        """The kernel PARAM bound to ``key`` (a program-level value, or the name of an NNEF tensor),
        a flat global buffer of ``size`` elements made at its first use: slots in order of first use."""
        found = self.params.get(key)
        if found is None:
            found = UOp.param(len(self.params), (size,), dtype, device, AddrSpace.GLOBAL)
            self.params[key] = found
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


def indexed(value: UOp, indices: Sequence[UOp]) -> UOp:
    """``value`` at ``indices`` (a CONST is the same everywhere): an INDEX the pushdown moves down."""
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
    sources = tuple(indexed(s, _broadcast_indices(s.shape, x.shape, indices)) for s in x.src)
    return UOp(x.op, sources, x.arg)


def index_through_bitcast(idx: UOp, x: UOp) -> UOp | None:
    """BITCAST keeps the shape: reinterpret the element at the same point."""
    if not _is_pushdown(idx):
        return None
    return UOp(Ops.BITCAST, (indexed(x.src[0], idx.src[1:]),), x.arg)


def index_through_marker(idx: UOp, x: UOp) -> UOp | None:
    """Markers (and a COPY or LOAD seen from the kernel that performs it) are the identity on data.
    A LOAD this pass made (of an address in a kernel PARAM) is already the value at the point: a
    user's INDEX naming one element (shape ``()``) becomes such a LOAD before the kernel's own
    INDEX of its result reaches it."""
    if not _is_pushdown(idx):
        return None
    if x.op is Ops.LOAD and _is_kernel_address(x.src[0]):
        return x
    return indexed(x.src[0], idx.src[1:])


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
    return indexed(x.src[0], source_indices)


def index_through_flip(idx: UOp, x: UOp) -> UOp | None:
    """FLIP: a flipped axis reads ``size - 1 - i``."""
    if not _is_pushdown(idx):
        return None
    indices = [iadd(imul(i, -1), size - 1) if flag else i
               for i, flag, size in zip(idx.src[1:], x.arg, x.shape)]
    return indexed(x.src[0], indices)


def index_through_expand(idx: UOp, x: UOp) -> UOp | None:
    """EXPAND: a broadcast size-1 axis always reads index 0."""
    if not _is_pushdown(idx):
        return None
    indices = [iconst(0) if size == 1 else i for i, size in zip(idx.src[1:], x.src[0].shape)]
    return indexed(x.src[0], indices)


def index_through_shrink(idx: UOp, x: UOp) -> UOp | None:
    """SHRINK: the kept window starts at the offsets."""
    if not _is_pushdown(idx):
        return None
    offsets, _ = x.marg
    return indexed(x.src[0], [iadd(i, o) for i, o in zip(idx.src[1:], offsets)])


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
    inner = indexed(source, source_indices)
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
    return indexed(x.src[0], reshape_indices(x.shape, x.src[0].shape, idx.src[1:]))


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
    return indexed(source, indices)


def index_through_stack(idx: UOp, x: UOp) -> UOp | None:
    """STACK: the leading index picks which stacked value to read."""
    if not _is_pushdown(idx):
        return None
    first, rest = idx.src[1], idx.src[2:]
    if is_const(first):
        return indexed(x.src[first.arg[0]], rest)
    out = indexed(x.src[-1], rest)
    for k in range(len(x.src) - 2, -1, -1):
        out = UOp(Ops.WHERE, (UOp(Ops.CMP_NE, (first, iconst(k))), out, indexed(x.src[k], rest)))
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
    value = indexed(flat_source, [position])
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
            value = indexed(index_tensor, [outer.pop(0)])
        values.append(value.cast(dtypes.index) if value.dtype is not dtypes.index else value)
    conditions, clamped = [], []
    for value, size in zip(values, table.shape):
        inside = conjunction([at_least(value, 0), lower_than(value, size)])
        conditions.append(inside)
        clamped.append(value if inside is None else UOp(Ops.WHERE, (inside, value, iconst(0))))
    inner = indexed(table, clamped + outer)
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
    value = indexed(source, indices)
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
