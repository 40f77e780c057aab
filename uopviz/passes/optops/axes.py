"""A kernel's axes and the OptOps that shape them: SPLIT, PADTO, SWAP and NOLOCALS.

A kernel's axes are its RANGEs in *kernel order* — grouped by AxisType (parallel outputs, workgroup,
loops, reductions, then the lanes), and within a group by range number.  The helpers here find,
order, renumber and substitute ranges (the later stages use them too); each opt is a function
``(kernel, opt) -> new AST`` that raises :class:`OptError` saying which rule of the spec's AxisType
table it breaks.  :class:`~uopviz.passes.optops.kernel.Kernel` dispatches to them by table.

* ``SPLIT(axis, (k, target, top))``: axis of size ``n`` becomes ``(n/k, k)`` — the inner part of
  the ``target`` type — or ``(k, n/k)`` with the outer part of the target type when ``top``.
  Allowed splits (type of the new part ← types it may come from, direction), :data:`SPLIT_RULES`:
  LOCAL ← GLOBAL, LOOP (inner); THREAD ← GLOBAL (outer); GROUP_REDUCE ← REDUCE (either);
  UPCAST ← GLOBAL, LOCAL, LOOP (inner); UNROLL ← REDUCE, GROUP_REDUCE (inner).
* ``PADTO(axis, m)``: pad the axis to the next multiple of ``m``; stores of the padded iterations
  are gated off, and reductions see their identity there; their loads are gated off too, or, on an
  output axis (not lanes), read at the axis' last real iteration (the values are never stored).
  Once the opts are all applied, a clamped load whose lanes are the kernel's vectors is gated
  after all (:func:`settle_pad_clamps`: a whole-vector load, not a gather).
* ``SWAP(i, j)``: exchange two axes of the same group (their loop nesting).
* ``NOLOCALS``: no LOCAL axes from now on.

A REDUCE axis that no REDUCE op reduces is a *sequential* axis (:func:`sequential_axes`): its
iterations carry state through memory (a scan stores ``out[k]`` from ``out[k - 1]``), so it runs in
order, one iteration at a time: it is not split into lanes or groups, nor swapped with another loop.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from uopviz.core.affine import linear_coefficient
from uopviz.core.ops import AxisType, Ops
from uopviz.core.rewrite import PatternMatcher, UPat, graph_rewrite, substitute
from uopviz.core.symbolic_bounds import bounds
from uopviz.core.uop import UOp
from uopviz.passes.indexing import conjuncts, iadd, iconst, imul
from uopviz.passes.optops.opts import Opt, OptError, ShapedKernel

# the kernel order: groups of AxisTypes, then the range number
_GROUP = {AxisType.THREAD: 0, AxisType.GLOBAL: 0, AxisType.LOOP: 0, AxisType.LOCAL: 1, AxisType.WARP: 1,
          AxisType.GROUP_REDUCE: 2, AxisType.REDUCE: 2, AxisType.UPCAST: 3, AxisType.UNROLL: 4}
REDUCE_TYPES = frozenset({AxisType.REDUCE, AxisType.GROUP_REDUCE, AxisType.UNROLL})
LANE_TYPES = frozenset({AxisType.UPCAST, AxisType.UNROLL})
#: UPCAST x UNROLL lanes of one kernel: beyond this the vectors stop being registers.  512: a
#: depthwise conv's tile of two rows of 16 columns with its 3x3 filter unrolled is 288
#: (heuristic._paired_output_rows); at 512 no other kernel of the zoo changes (AVX-512, batch 1)
MAX_LANES = 512
MAX_PAD_GROWTH = 4  # PADTO may at most quadruple an axis: more is wasted work, never a speed-up

# what SPLIT may create, from what, in which direction (None: either)
SPLIT_RULES: dict[AxisType, tuple[frozenset[AxisType], bool | None]] = {
    AxisType.LOCAL: (frozenset({AxisType.GLOBAL, AxisType.LOOP}), False),
    AxisType.THREAD: (frozenset({AxisType.GLOBAL}), True),
    AxisType.GROUP_REDUCE: (frozenset({AxisType.REDUCE}), None),
    AxisType.UPCAST: (frozenset({AxisType.GLOBAL, AxisType.LOCAL, AxisType.LOOP}), False),
    AxisType.UNROLL: (frozenset({AxisType.REDUCE, AxisType.GROUP_REDUCE}), False),
}


def kernel_order(ranges: Sequence[UOp]) -> list[UOp]:
    """RANGEs sorted into kernel order (group of their AxisType, then number)."""
    return sorted(ranges, key=lambda r: (_GROUP[r.arg[1]], r.arg[0]))


def ranges_of(ast: UOp) -> list[UOp]:
    """The distinct RANGEs of a kernel AST, in kernel order."""
    return kernel_order([u for u in ast.toposort() if u.op is Ops.RANGE])


def position_of(items: Sequence[UOp], item: UOp) -> int:
    """The position of ``item`` in ``items`` by identity (``list.index`` would build CMP_EQ UOps)."""
    for position, candidate in enumerate(items):
        if candidate is item:
            return position
    raise ValueError(f"{item!r} is not in the sequence")


def range_size(r: UOp) -> int:
    """The trip count of a RANGE with a constant bound."""
    return int(r.src[0].arg[0])


def substitute_ranges(ast: UOp, mapping: dict[UOp, UOp]) -> UOp:
    """``substitute`` for RANGEs: also renames the ranges a pre-expand WMMA names in its arg
    (``(config, m_range, n_range, k_range)``)."""
    if not mapping:
        return ast
    out = substitute(ast, mapping)
    fixed: dict[UOp, UOp] = {}
    for u in out.toposort():
        if u.op is Ops.WMMA and isinstance(u.arg, tuple) and any(a in mapping for a in u.arg[1:]):
            fixed[u] = UOp(Ops.WMMA, u.src, (u.arg[0], *(mapping.get(a, a) for a in u.arg[1:])))
        elif u.op is Ops.REDUCE and any(s.op is not Ops.RANGE for s in u.src[1:]):
            # a split reduce range is now an expression: the REDUCE loops over the ranges in it
            inside = (r for s in u.src[1:] for r in s.toposort() if r.op is Ops.RANGE)
            loops = kernel_order(list(dict.fromkeys(inside)))
            fixed[u] = UOp(Ops.REDUCE, (u.src[0], *loops), u.arg)
    return substitute(out, fixed) if fixed else out


def renumber(ast: UOp, ordered: Sequence[UOp]) -> UOp:
    """The AST with its ranges renumbered 0.. in the given order (keeps kernel order stable and
    source text deterministic)."""
    mapping = {}
    for number, r in enumerate(ordered):
        if r.arg[0] != number:
            mapping[r] = UOp.range(r.src[0], r.arg[1], number)
    return substitute_ranges(ast, mapping)


# ---------------------------------------------------------------------------------------------
# the OptOps that shape axes

def _axis(kernel: ShapedKernel, opt: Opt, what: str = "axis") -> UOp:
    if not isinstance(opt.axis, int) or not 0 <= opt.axis < len(kernel.ranges):
        raise OptError(f"{opt}: {what} {opt.axis} does not exist; the kernel {kernel.name} has "
                       f"{len(kernel.ranges)} axes {kernel.axes_text()}")
    return kernel.ranges[opt.axis]


def sequential_axes(ast: UOp) -> frozenset[UOp]:
    """The REDUCE ranges of ``ast`` that no REDUCE op reduces: loops whose iterations carry state
    through the buffers they store (a scan), which must run in order.  (A staged strip's range,
    closed by an END of its own, is not one.)"""
    nodes = ast.toposort()
    reduced = {r for u in nodes if u.op in (Ops.REDUCE, Ops.END) for r in u.src[1:]}
    return frozenset(
        u for u in nodes if u.op is Ops.RANGE and u.arg[1] is AxisType.REDUCE and u not in reduced
    )


def _check_in_order(kernel: ShapedKernel, opt: Opt, r: UOp, change: str) -> None:
    if r in sequential_axes(kernel.ast):
        raise OptError(f"{opt}: axis {opt.axis} is a sequential loop (its iterations read what earlier ones "
                       f"stored, as a scan does); {change} would change the order they run in")


def _lanes(kernel: ShapedKernel) -> int:
    """UPCAST x UNROLL lanes of a kernel (a tensor core's fragment axes count once: a fragment is one
    register of the WMMA, not lanes multiplied into every value)."""
    fragments = {r for u in kernel.ast.toposort() if u.op is Ops.WMMA and isinstance(u.arg, tuple)
                 for r in u.arg[1:3]}
    return math.prod(range_size(r) for r in kernel.ranges if r.arg[1] in LANE_TYPES and r not in fragments)


def split_axis(kernel: ShapedKernel, opt: Opt) -> UOp:
    """SPLIT: ``r = outer * k + inner``; the new part gets the target AxisType."""
    r = _axis(kernel, opt)
    if not (isinstance(opt.arg, tuple) and len(opt.arg) == 3):
        raise OptError(f"{opt}: SPLIT's arg is (factor, target AxisType, top)")
    factor, target, top = opt.arg
    size, source_type = range_size(r), r.arg[1]
    if not isinstance(factor, int) or isinstance(factor, bool) or factor < 2:
        raise OptError(f"{opt}: the factor must be an integer of at least 2, got {factor!r}")
    if target not in SPLIT_RULES:
        made_by = "only TC creates WARP axes" if target is AxisType.WARP else \
            f"{getattr(target, 'name', target)} axes are not made by splitting"
        raise OptError(f"{opt}: SPLIT cannot create {getattr(target, 'name', target)} ({made_by}); "
                       f"targets are {', '.join(t.name for t in SPLIT_RULES)}")
    allowed, direction = SPLIT_RULES[target]
    if source_type not in allowed:
        sources = "/".join(sorted(t.name for t in allowed))
        raise OptError(f"{opt}: {target.name} is split from {sources} axes; axis {opt.axis} is "
                       f"{source_type.name} (spec AxisType table, 'Split from')")
    if direction is not None and bool(top) != direction:
        raise OptError(f"{opt}: {target.name} takes the {'outer' if direction else 'inner'} part of the axis "
                       f"(top={direction}); got top={bool(top)} (spec AxisType table, 'Direction')")
    if size % factor:
        raise OptError(f"{opt}: factor {factor} does not divide axis {opt.axis} of size {size}; "
                       f"PADTO it first")
    _check_backend(kernel, opt, target)
    _check_in_order(kernel, opt, r, f"splitting it into {target.name} parts")
    if target in LANE_TYPES and _lanes(kernel) * factor > MAX_LANES:
        raise OptError(f"{opt}: the kernel would have {_lanes(kernel) * factor} UPCAST/UNROLL lanes; "
                       f"at most {MAX_LANES}")
    rest = size // factor
    ordered = list(kernel.ranges)
    position = position_of(ordered, r)
    new = UOp.range(factor, target, 10_000)
    kept = UOp.range(rest, source_type, 10_001) if rest > 1 else None
    outer, inner = (new, kept) if top else (kept, new)
    inner_size = range_size(inner) if inner is not None else 1
    if outer is not None and inner is not None:
        value = iadd(imul(outer, inner_size), inner)
    else:
        value = outer if outer is not None else inner
    ordered[position:position + 1] = [u for u in (outer, inner) if u is not None]
    ast = substitute_ranges(kernel.ast, {r: value})
    return _reorder(ast, ordered)


def _reorder(ast: UOp, ordered: Sequence[UOp]) -> UOp:
    """Renumber so that kernel order within each group follows ``ordered``."""
    present = {u for u in ast.toposort() if u.op is Ops.RANGE}
    return renumber(ast, [r for r in ordered if r in present])


#: what an AxisType needs of a backend: the Backend flag that says it has it, and what it is in words
AXIS_NEEDS: dict[AxisType, tuple[str, str]] = {
    AxisType.LOCAL: ("has_local", "workgroups or local memory"),
    AxisType.GROUP_REDUCE: ("has_local", "workgroups or local memory"),
    AxisType.WARP: ("has_local", "workgroups or local memory"),
    AxisType.THREAD: ("has_threads", "threads"),
}


def missing_ability(backend: Any, axis_type: AxisType) -> str | None:
    """What ``backend`` lacks for axes of ``axis_type`` (None when it has what they need)."""
    need = AXIS_NEEDS.get(axis_type)
    if need is None or getattr(backend, need[0]):
        return None
    return need[1]


def _check_backend(kernel: ShapedKernel, opt: Opt, target: AxisType) -> None:
    backend = kernel.backend_object
    if target is AxisType.LOCAL and kernel.nolocals:
        raise OptError(f"{opt}: NOLOCALS was applied, so no LOCAL axes")
    missing = missing_ability(backend, target)
    if missing is not None:
        raise OptError(f"{opt}: the {backend.name} backend has no {missing} for {target.name} axes")
    if target is AxisType.GROUP_REDUCE and kernel.nolocals:
        raise OptError(f"{opt}: NOLOCALS was applied, so no shared memory for GROUP_REDUCE")


def reduce_identity(op: Ops, dtype: Any) -> UOp:
    """The value a reduction by ``op`` starts from (and gives over nothing): 0 for ADD, 1 for MUL,
    the dtype's lowest value for MAX; a VECTORIZE of it for a vector dtype."""
    scalar = dtype.scalar
    value = 0 if op is Ops.ADD else 1 if op is Ops.MUL else scalar.min
    const = UOp.const(scalar, value)
    return const if dtype.count == 1 else UOp(Ops.VECTORIZE, (const,) * dtype.count)


def depends_on(u: UOp, r: UOp) -> bool:
    """True when ``r`` is in ``u``'s graph (by identity: ``in`` would build CMP_EQ UOps)."""
    return any(s is r for s in u.toposort())


@dataclass
class _PadContext:
    padded: UOp
    valid: UOp
    clamped: UOp | None  # an output axis: the range clamped to its last real iteration


#: axes whose padded iterations only compute values that are not stored: their loads may read the
#: last real iteration's addresses instead of being gated (lanes are not: a clamped lane is a gather)
_CLAMPED_TYPES = frozenset({AxisType.GLOBAL, AxisType.LOOP, AxisType.THREAD, AxisType.LOCAL})
#: the tag of PADTO's clamp ``WHERE(valid, padded, last)`` until :func:`settle_pad_clamps` (only a
#: clamp PADTO made may be gated instead: a replicate border's clamp has the same form, and its
#: values are used)
PAD_CLAMP = "padto clamp"


def pad_clamp_load(ctx: _PadContext, load: UOp) -> UOp | None:
    """A load on an output axis reads at the last real iteration on the padded ones: no gate in
    the loops below the axis (a gated vector load is a per-lane select; a clamped index is one
    select outside them), and the stores of those iterations are gated off."""
    if ctx.clamped is None or not depends_on(load, ctx.padded) or depends_on(load, ctx.clamped):
        return None
    return UOp(Ops.LOAD, tuple(substitute(s, {ctx.padded: ctx.clamped}) for s in load.src), load.arg)


def pad_mask_load(ctx: _PadContext, load: UOp) -> UOp | None:
    """A load whose address uses the padded range is gated off on the padded iterations."""
    address = load.src[0]
    if ctx.clamped is not None or not depends_on(address, ctx.padded):
        return None
    if len(load.src) > 1 and any(t is ctx.valid for t in conjuncts(load.src[2])):
        return None
    return _gated_load(load, address, load.src[2] if len(load.src) > 1 else None, ctx.valid)


def _gated_load(load: UOp, address: UOp, gate: UOp | None, valid: UOp) -> UOp:
    """``load`` reading ``address`` under its ``gate`` (None: it had none) and ``valid``: its alt,
    or 0 for a load that had no gate, where either is off."""
    if gate is None:
        return UOp(Ops.LOAD, (address, UOp.const(load.dtype.scalar, 0), valid))
    return UOp(Ops.LOAD, (address, load.src[1], UOp(Ops.AND, (gate, valid))))


def pad_mask_store(ctx: _PadContext, store: UOp) -> UOp | None:
    """A store whose address uses the padded range is gated off on the padded iterations."""
    address, value = store.src[0], store.src[1]
    if not depends_on(address, ctx.padded):
        return None
    if len(store.src) > 2:
        if any(t is ctx.valid for t in conjuncts(store.src[2])):
            return None
        return UOp(Ops.STORE, (address, value, UOp(Ops.AND, (store.src[2], ctx.valid))))
    return UOp(Ops.STORE, (address, value, ctx.valid))


def pad_mask_reduce(ctx: _PadContext, reduce: UOp) -> UOp | None:
    """A reduction over the padded range sees its identity on the padded iterations."""
    if not any(s is ctx.padded for s in reduce.src[1:]):
        return None
    value = reduce.src[0]
    if value.op is Ops.WHERE and value.src[0] is ctx.valid:
        return None
    masked = UOp(Ops.WHERE, (ctx.valid, value, reduce_identity(reduce.arg[0], value.dtype)))
    return UOp(Ops.REDUCE, (masked, *reduce.src[1:]), reduce.arg)


pad_rules = PatternMatcher([
    (UPat(Ops.LOAD, name="load"), pad_clamp_load, "pad_clamp_load"),
    (UPat(Ops.LOAD, name="load"), pad_mask_load, "pad_mask_load"),
    (UPat(Ops.STORE, name="store"), pad_mask_store, "pad_mask_store"),
    (UPat(Ops.REDUCE, name="reduce"), pad_mask_reduce, "pad_mask_reduce"),
], name="padto masks")


def pad_axis(kernel: ShapedKernel, opt: Opt) -> UOp:
    """PADTO: the axis runs to the next multiple of ``m``; the extra iterations are masked."""
    r = _axis(kernel, opt)
    multiple = opt.arg
    if not isinstance(multiple, int) or isinstance(multiple, bool) or multiple < 2:
        raise OptError(f"{opt}: PADTO's arg is a multiple of at least 2, got {multiple!r}")
    size, axis_type = range_size(r), r.arg[1]
    if axis_type is AxisType.WARP:
        raise OptError(f"{opt}: WARP axes belong to a tensor core tile and cannot be padded")
    padded_size = -(-size // multiple) * multiple
    if padded_size == size:
        raise OptError(f"{opt}: axis {opt.axis} of size {size} is already a multiple of {multiple}")
    if padded_size > MAX_PAD_GROWTH * size:
        raise OptError(f"{opt}: padding axis {opt.axis} of size {size} to {padded_size} would run more than "
                       f"{MAX_PAD_GROWTH}x its iterations; pad to a multiple of at most "
                       f"{MAX_PAD_GROWTH * size}")  # fmt: skip
    if any(u.op is Ops.WMMA and isinstance(u.arg, tuple) and any(a is r for a in u.arg[1:])
           for u in kernel.ast.toposort()):
        raise OptError(f"{opt}: axis {opt.axis} is a tensor core's tile axis; its size is the tile's")
    if any(u.op is Ops.REDUCE and u.src[0].op is Ops.WMMA and any(s is r for s in u.src[1:])
           for u in kernel.ast.toposort()):
        # a masked WMMA is no longer the REDUCE(WMMA) Expand turns into the tile (TC with
        # tc_opt=2 pads the tensor core's axes itself)
        raise OptError(f"{opt}: axis {opt.axis} is the reduce axis of a tensor core; padding it is not "
                       f"supported (TC with tc_opt=2 pads the axes to the tile)")
    if axis_type in LANE_TYPES and _lanes(kernel) // size * padded_size > MAX_LANES:
        raise OptError(f"{opt}: padding would make more than {MAX_LANES} lanes")
    padded = UOp.range(padded_size, axis_type, r.arg[0])
    ast = substitute_ranges(kernel.ast, {r: padded})
    valid = UOp(Ops.CMP_LT, (padded, iconst(size)))
    clamped = UOp(Ops.WHERE, (valid, padded, iconst(size - 1)), tag=PAD_CLAMP) \
        if axis_type in _CLAMPED_TYPES else None
    return graph_rewrite(ast, pad_rules, ctx=_PadContext(padded, valid, clamped), name="padto masks")


@dataclass
class _SettleContext:
    clamps: tuple[UOp, ...]  # PADTO's clamps on the vector lanes
    lanes: UOp  # the last UPCAST axis: the lanes of the kernel's vectors
    strides: frozenset[int] = frozenset({1})  # the lane strides of loads the backend reads gated whole


def gate_padded_lanes(ctx: _SettleContext, load: UOp) -> UOp | None:
    """A load that reads through PADTO's clamp on the vector lanes (directly: not through an
    address loaded from memory) at consecutive elements of them reads unclamped, gated off on
    the padded lanes (0 there: the values are never stored)."""
    nodes = load.toposort()
    inner_loads = [u for u in nodes if u.op is Ops.LOAD and u is not load]
    for clamp in ctx.clamps:
        if not any(u is clamp for u in nodes) or any(depends_on(inner, clamp) for inner in inner_loads):
            continue
        unclamped = {clamp: clamp.src[1]}
        address = substitute(load.src[0], unclamped)
        index = address.src[1] if address.op is Ops.INDEX and len(address.src) > 1 else None
        stride = linear_coefficient(index, ctx.lanes) if index is not None else None
        if stride not in ctx.strides or (stride != 1 and not _clamped_in_every_tile(clamp, ctx.lanes)):
            continue
        gate = substitute(load.src[2], unclamped) if len(load.src) > 1 else None
        return _gated_load(load, address, gate, clamp.src[0])
    return None


def _clamped_in_every_tile(clamp: UOp, lanes: UOp) -> bool:
    """Whether PADTO's clamp ``WHERE(valid, padded, last)`` on a row padded by two lanes or more
    depends on an axis besides ``lanes`` (the row is several tiles): its lanes then read through a
    clamp in every tile, not only in the last one where the clamped lanes are constants."""
    padded = int(bounds(clamp.src[1])[1]) - int(clamp.src[2].arg[0])
    tiles = any(u.op is Ops.RANGE and u is not lanes for u in clamp.src[1].toposort())
    return tiles and padded >= 2


def untag_pad_clamp(clamp: UOp) -> UOp | None:
    """PADTO's clamp, settled, becomes a WHERE like any other."""
    return clamp.replace(tag=None) if clamp.tag == PAD_CLAMP else None


settle_rules = PatternMatcher([
    (UPat(Ops.LOAD, name="load"), gate_padded_lanes, "gate_padded_lanes"),
], name="settle pad clamps")
untag_rules = PatternMatcher([
    (UPat(Ops.WHERE, name="clamp"), untag_pad_clamp, "untag_pad_clamp"),
], name="untag pad clamps")


def settle_pad_clamps(ast: UOp, backend: Any) -> UOp:
    """The kernel's AST with its opts all applied, PADTO's clamps settled: a load that reads a
    padded axis at its last real iteration, where that axis makes the kernel's vector lanes and the
    load's lanes are consecutive elements, is gated instead (reads 0 on the padded lanes:
    :func:`gate_padded_lanes`), and the clamps lose their :data:`PAD_CLAMP` tag.

    A clamped lane is a read of its own (lanes 13..15 of a 16-lane row read element 12 again), so
    the vector was gathered element by element; gated, it is one whole-vector load and a select
    (the renderers read lane by lane only a vector that crosses the buffer's end).  Measured alone
    on C (2-core AMD EPYC, AVX2): SqueezeNet's classifier, a 1x1 conv over 13x13 positions padded to
    176 = 22 x 8 lanes, 2.67-2.82 -> 2.10-2.16 ms.  Only the lanes of the last UPCAST axis (those
    that form the vectors) are settled so: a load on an outer UPCAST axis has its lanes broadcast
    one by one, read from memory, and a gated vector there went through a register (SqueezeNet's
    13x13 3x3 convs 1.4x slower).  A load of every other element (a stride-2 pool's row) is gated
    too where the backend reads such a gated load whole (``Backend.loads_gated_strided_vectors_whole``:
    two vectors, a shuffle and a select): clamped, a row padded in several tiles (SqueezeNet's first
    max pool, 55 columns as 2 x 32 lanes) had lanes whose clamp depends on the tile, and read them
    one by one in every tile; in the model, one process, C: that pool 0.211 -> 0.147 ms
    (:func:`_clamped_in_every_tile`).  A row of one tile keeps its clamp: its clamped lanes are
    constants, set one by one after the shuffle, which cost less than the select in DenseNet-121's
    2x2 average pools (0.043 ms clamped, 0.053 gated), though more in the 3x3 pools and depthwise
    convs of AlexNet, Inception-v1 and MobileNet-v2 (1.10-1.20x); so does a row padded by one lane
    (SqueezeNet's stem conv, 111 columns as 7 x 16: 0.294 ms clamped, 0.310 gated).  Other strides
    keep their clamps.  Only for a backend that reads a
    gated vector whole (``Backend.loads_gated_vectors_whole``); the others keep every clamp."""
    clamps = [u for u in ast.toposort() if u.op is Ops.WHERE and u.tag == PAD_CLAMP]
    if not clamps:
        return ast
    upcasts = [r for r in ranges_of(ast) if r.arg[1] is AxisType.UPCAST]
    if upcasts and backend.loads_gated_vectors_whole:
        on_lanes = tuple(c for c in clamps if depends_on(c, upcasts[-1]))
        if on_lanes:
            strides = frozenset({1, 2}) if backend.loads_gated_strided_vectors_whole else frozenset({1})
            ast = graph_rewrite(ast, settle_rules, ctx=_SettleContext(on_lanes, upcasts[-1], strides),
                                name="settle pad clamps")
    return graph_rewrite(ast, untag_rules, name="untag pad clamps")


def swap_axes(kernel: ShapedKernel, opt: Opt) -> UOp:
    """SWAP: exchange the loop positions of two axes of the same group."""
    first = _axis(kernel, opt)
    other = opt.arg
    if not isinstance(other, int) or not 0 <= other < len(kernel.ranges):
        raise OptError(f"{opt}: the axis to swap with, {other!r}, does not exist; the kernel has "
                       f"{len(kernel.ranges)} axes")
    second = kernel.ranges[other]
    if first is second:
        raise OptError(f"{opt}: an axis cannot be swapped with itself")
    if _GROUP[first.arg[1]] != _GROUP[second.arg[1]]:
        raise OptError(f"{opt}: axes {opt.axis} ({first.arg[1].name}) and {other} ({second.arg[1].name}) "
                       f"are in different groups of the kernel order; SWAP exchanges loops of one group")
    for axis, r in ((opt.axis, first), (other, second)):
        _check_in_order(kernel, Opt(opt.op, axis, opt.arg), r, "moving it past another loop")
    ordered = list(kernel.ranges)
    i, j = position_of(ordered, first), position_of(ordered, second)
    ordered[i], ordered[j] = ordered[j], ordered[i]
    mapping = {r: UOp.range(r.src[0], r.arg[1], 20_000 + n) for n, r in enumerate(ordered)}
    return substitute_ranges(kernel.ast, mapping)


def no_locals(kernel: ShapedKernel, opt: Opt) -> UOp:
    """NOLOCALS: from now on no LOCAL axes (and none may exist already)."""
    if opt.axis is not None or opt.arg is not None:
        raise OptError(f"{opt}: NOLOCALS takes no axis and no arg")
    if any(t in (AxisType.LOCAL, AxisType.GROUP_REDUCE) for _, t in kernel.axes):
        raise OptError(f"{opt}: the kernel already has LOCAL (or GROUP_REDUCE) axes")
    if kernel.nolocals:
        raise OptError(f"{opt}: NOLOCALS was already applied")
    return kernel.ast


__all__ = ["LANE_TYPES", "MAX_LANES", "MAX_PAD_GROWTH", "REDUCE_TYPES", "SPLIT_RULES", "depends_on",
           "kernel_order", "no_locals", "pad_axis", "position_of", "range_size", "ranges_of",
           "reduce_identity", "renumber", "split_axis", "substitute_ranges", "swap_axes"]
