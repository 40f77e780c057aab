"""Expand: UPCAST and UNROLL ranges become vector lanes.

Each UPCAST/UNROLL range of size ``n`` becomes the index vector ``VECTORIZE(0, 1, ..., n-1)``.
Every UOp that depends on such ranges becomes a vector whose lanes run over them, row-major in
lane order (its *lane axes*: UNROLL axes first, then UPCAST axes, each in kernel order).
Operands with fewer lane axes are broadcast: a scalar is repeated
(``VECTORIZE(x, x, ...)``), a vector is rearranged with ``GEP``.  A REDUCE over UNROLL ranges
combines their lanes (a horizontal reduction of GEPs) and keeps looping over its other ranges;
with few lanes in all (reduction and output lanes, ``VECTOR_ACCUMULATOR_LANES``), they accumulate
in one vector across those loops and are combined once after them.
A REDUCE of a tensor-core multiply (``WMMA`` made by the TC opt) gathers the A, B and C tiles
from the lanes in the tensor core's layouts.

The rules are a table, :data:`expansion_rules` (``expand range``, ``expand memory``, ``expand
reduce``, ...); the walk tries them on every node, sources first, and each node a rule changes is a
recorded step named after the rule, at the line the rule is written on.  Backends without vectors
get them split again in Instruction Selection.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from itertools import product

from uopviz.core.affine import affine_coefficients
from uopviz.core.ops import AxisType, Ops
from uopviz.core.rewrite import (
    PatternMatcher,
    RewriteError,
    Rule,
    UPat,
    frontier_graph,
    graph_rewrite,
    substitute,
    traced_pass,
    untraced,
)
from uopviz.core.uop import UOp
from uopviz.passes.indexing import iadd, iconst, index_simplifier, simplify_indices
from uopviz.passes.optops.axes import LANE_TYPES, kernel_order, range_size
from uopviz.passes.schedule import Lowering, once_per_body

Axes = tuple[UOp, ...]  # lane axes: the lane ranges of a value, in kernel order


#: a REDUCE over UNROLL lanes with at most this many lanes in all accumulates them in a vector
#: across its loops (two AVX-512 registers of float32); more, and the horizontal combine stays in
#: the loop so that a register tile keeps one accumulator per output
VECTOR_ACCUMULATOR_LANES = 32


@dataclass
class ExpandContext:
    """Original UOp → expanded UOp, and the lane axes of every expanded UOp."""

    new: dict[UOp, UOp] = field(default_factory=dict)
    axes: dict[UOp, Axes] = field(default_factory=dict)  # keyed by the original UOp
    substituted: bool = False  # some lane was made by substitution: the kernel needs simplifying

    def lanes_of(self, original: UOp) -> Axes:
        return self.axes.get(original, ())


def lane_order(ranges: Sequence[UOp]) -> list[UOp]:
    """Lane axes in lane order: UNROLL axes outermost, then UPCAST axes, each group in kernel order.
    A reduction then combines contiguous runs of lanes (one run per unrolled coordinate) and each
    run is laid out like the output, so a CPU backend's vector chunks are whole rows of the tile:
    contiguous loads and stores, one broadcast operand, no lane shuffles."""
    return sorted(kernel_order(list(ranges)), key=lambda r: r.arg[1] is not AxisType.UNROLL)


def _union(*groups: Axes) -> Axes:
    return tuple(lane_order(list(dict.fromkeys(r for g in groups for r in g))))


def _count(axes: Axes) -> int:
    return math.prod(range_size(r) for r in axes)


def lane_map(source: Axes, target: Axes) -> list[int]:
    """For each lane of ``target`` (row-major over its axes), the lane of ``source`` holding the value
    at the same coordinates (``source`` axes must be a subset of ``target`` axes)."""
    sizes = [range_size(r) for r in target]
    out = []
    for coordinates in product(*(range(s) for s in sizes)):
        where = dict(zip(target, coordinates))
        lane = 0
        for r in source:
            lane = lane * range_size(r) + where[r]
        out.append(lane)
    return out


def broadcast(value: UOp, source: Axes, target: Axes) -> UOp:
    """``value`` (lanes over ``source``) as lanes over ``target``."""
    if len(source) == len(target) and all(a is b for a, b in zip(source, target)):
        return value
    count = _count(target)
    if not source:
        return UOp(Ops.VECTORIZE, (value,) * count) if count > 1 else value
    lanes = lane_map(source, target)
    if lanes == list(range(_count(source))):
        return value
    if value.op is Ops.VECTORIZE:
        return UOp(Ops.VECTORIZE, tuple(value.src[i] for i in lanes)) if count > 1 else value.src[lanes[0]]
    return UOp(Ops.GEP, (value,), tuple(lanes))


def _rebuild(u: UOp, sources: Sequence[UOp], count: int) -> UOp:
    arg = u.arg
    if u.op in (Ops.CAST, Ops.BITCAST) and count > 1:
        arg = arg.scalar.vec(count)
    return UOp(u.op, tuple(sources), arg)


def expand_range(ctx: ExpandContext, u: UOp) -> tuple[UOp, Axes]:
    """An UPCAST or UNROLL range is the vector of its values ``(0, 1, ..., n-1)``."""
    if u.arg[1] not in LANE_TYPES:
        return u, ()
    return UOp(Ops.VECTORIZE, tuple(iconst(i) for i in range(range_size(u)))), (u,)


def per_lane(original: UOp, axes: Axes, target: Axes, ctx: ExpandContext | None = None) -> UOp:
    """The scalar ``original`` evaluated at every lane of ``target``: each lane range replaced by its
    coordinate.  Addresses and gates are built this way (``base + 0, base + 1, ...``, not vector
    index arithmetic), so a renderer sees which lanes are contiguous.  An address affine in the lane
    ranges is ``base + constant`` per lane (one substitution, not one per lane)."""
    lane_ranges = tuple(r for r in target if any(r is a for a in axes))
    coefficients = affine_coefficients(original, lane_ranges) if lane_ranges else None
    base = None
    if coefficients is not None:
        with untraced():  # a helper simplification: the step that uses the address shows it
            base = graph_rewrite(substitute(original, {r: iconst(0) for r in lane_ranges}), index_simplifier,
                                 name="lane base")
    lanes = []
    for coordinates in product(*(range(range_size(r)) for r in target)):
        where = dict(zip(target, coordinates))
        if not lane_ranges:
            lanes.append(original)
        elif coefficients is not None:
            lanes.append(iadd(base, sum(coefficient * where[r] for r, coefficient in coefficients.items())))
        else:
            lanes.append(substitute(original, {r: iconst(where[r]) for r in lane_ranges}))
            if ctx is not None:
                ctx.substituted = True
    return UOp(Ops.VECTORIZE, tuple(lanes)) if len(lanes) > 1 else lanes[0]


def expand_index(ctx: ExpandContext, u: UOp) -> tuple[UOp, Axes]:
    """INDEX(buffer, i): one scalar address per lane of ``i``; the buffer stays a pointer."""
    axes = ctx.lanes_of(u.src[1])
    index = per_lane(u.src[1], axes, axes, ctx) if axes else ctx.new[u.src[1]]
    return UOp(Ops.INDEX, (ctx.new[u.src[0]], index)), axes


def _is_address_math(u: UOp) -> bool:
    return not any(s.op in (Ops.LOAD, Ops.REDUCE) for s in u.toposort())


def expand_memory(ctx: ExpandContext, u: UOp) -> tuple[UOp, Axes]:
    """LOAD/STORE: address, value, alt and gate brought to the same lanes (a vector access); the
    address and an index-computed gate lane by lane."""
    target = _union(*(ctx.lanes_of(s) for s in u.src))
    address = u.src[0]
    index = address.src[1]
    lanes = ctx.lanes_of(index)
    new_index = per_lane(index, lanes, target, ctx) if lanes or len(target) else ctx.new[index]
    rest = []
    for position, s in enumerate(u.src[1:], start=1):
        gate = position == len(u.src) - 1 and len(u.src) == 3
        if gate and _is_address_math(s):
            rest.append(per_lane(s, ctx.lanes_of(s), target, ctx) if target else ctx.new[s])
        else:
            rest.append(broadcast(ctx.new[s], ctx.lanes_of(s), target))
    new_address = UOp(Ops.INDEX, (ctx.new[address.src[0]], new_index))
    return UOp(u.op, (new_address, *rest), u.arg), (target if u.op is Ops.LOAD else ())


def expand_elementwise(ctx: ExpandContext, u: UOp) -> tuple[UOp, Axes]:
    """An ALU op (or CAST/BITCAST) of operands with different lanes: broadcast them to all lanes."""
    target = _union(*(ctx.lanes_of(s) for s in u.src))
    sources = [broadcast(ctx.new[s], ctx.lanes_of(s), target) for s in u.src]
    return _rebuild(u, sources, _count(target)), target


def _combine(op: Ops, parts: Sequence[UOp]) -> UOp:
    """A balanced tree of ``op`` over ``parts`` (short dependency chains)."""
    parts = list(parts)
    while len(parts) > 1:
        parts = [UOp(op, (parts[i], parts[i + 1])) if i + 1 < len(parts) else parts[i]
                 for i in range(0, len(parts), 2)]
    return parts[0]


def expand_reduce(ctx: ExpandContext, u: UOp) -> tuple[UOp, Axes]:
    """REDUCE over UNROLL ranges: combine those lanes; keep looping over the other ranges."""
    op = u.arg[0]
    value = u.src[0]
    unrolled = tuple(r for r in u.src[1:] if r.arg[1] in LANE_TYPES)
    loops = tuple(ctx.new[r] for r in u.src[1:] if r.arg[1] not in LANE_TYPES)
    source_axes = ctx.lanes_of(value)
    every = _union(source_axes, unrolled)
    kept = tuple(r for r in every if not any(r is x for x in unrolled))
    full = broadcast(ctx.new[value], source_axes, every)
    if unrolled and loops and full.dtype.count <= VECTOR_ACCUMULATOR_LANES:
        # few lanes (a row's max or sum unrolled by a register's width; a matrix-vector product's
        # 8 outputs by 4 steps): they accumulate lane by lane across the loop and are combined
        # once after it, not by a horizontal tree in every iteration (softmax's max: 15 scalar
        # maxes per 16 elements). A register tile's many lanes keep one accumulator per output.
        accumulated = UOp(Ops.REDUCE, (full, *loops), u.arg)
        return _combine_lanes(op, accumulated, unrolled, kept, every), kept
    combined = _combine_lanes(op, full, unrolled, kept, every) if unrolled else full
    if not loops:
        return combined, kept
    return UOp(Ops.REDUCE, (combined, *loops), u.arg), kept


def _combine_lanes(op: Ops, vector: UOp, unrolled: Axes, kept: Axes, every: Axes) -> UOp:
    """``vector`` (lanes over ``every``) reduced with ``op`` over its ``unrolled`` lane axes: one
    part per combination of their coordinates, each part the ``kept`` lanes, combined as a tree."""
    parts = []
    for coordinates in product(*(range(range_size(r)) for r in unrolled)):
        fixed = dict(zip(unrolled, coordinates))
        lanes = []
        for kept_coordinates in product(*(range(range_size(r)) for r in kept)):
            where = {**fixed, **dict(zip(kept, kept_coordinates))}
            lane = 0
            for r in every:
                lane = lane * range_size(r) + where[r]
            lanes.append(lane)
        parts.append(_gep(vector, lanes))
    return _combine(op, parts)


def _gep(vector: UOp, lanes: list[int]) -> UOp:
    if vector.dtype.count == 1:
        return vector if len(lanes) == 1 else UOp(Ops.VECTORIZE, (vector,) * len(lanes))
    if vector.op is Ops.VECTORIZE:
        if len(lanes) == 1:
            return vector.src[lanes[0]]
        return UOp(Ops.VECTORIZE, tuple(vector.src[i] for i in lanes))
    if lanes == list(range(vector.dtype.count)):
        return vector
    return UOp(Ops.GEP, (vector,), tuple(lanes))


def expand_tensor_core(ctx: ExpandContext, u: UOp) -> tuple[UOp, Axes]:
    """REDUCE(WMMA(a, b, 0)) after TC: ``a``'s lanes over A's element range are its fragment (element
    order), ``b``'s over B's, and the WMMA's result has one lane per element of C.  Lanes of other
    axes (opts applied after TC) make one WMMA per combination: an UPCAST's combinations are output
    lanes, an UNROLL of the reduction (a reduce axis split after TC) is summed over, its WMMAs'
    results combined with the REDUCE's op."""
    wmma = u.src[0]
    config, element_a, element_b, element_c, _ = wmma.arg
    a, b = wmma.src[0], wmma.src[1]
    loops = tuple(ctx.new[r] for r in u.src[1:] if r.arg[1] not in LANE_TYPES)
    lanes_a, lanes_b = ctx.lanes_of(a), ctx.lanes_of(b)
    others = tuple(r for r in _union(lanes_a, lanes_b) if not any(r is x for x in (element_a, element_b)))
    full_a = broadcast(ctx.new[a], lanes_a, _union((element_a,), others))
    full_b = broadcast(ctx.new[b], lanes_b, _union((element_b,), others))
    zero = UOp(Ops.VECTORIZE, (UOp.const(config.dtype_out, 0),) * config.elements("c"))
    results: dict[tuple[int, ...], UOp] = {}
    for coordinates in product(*(range(range_size(r)) for r in others)):
        fixed = dict(zip(others, coordinates))
        tiles = [_gep(full, _lanes_where(_union((element,), others), fixed, element))
                 for full, element in ((full_a, element_a), (full_b, element_b))]
        results[coordinates] = UOp(Ops.WMMA, (*tiles, zero), config)
    reduced = tuple(r for r in others if any(r is x for x in u.src[1:]))
    kept = tuple(r for r in others if not any(r is x for x in reduced))
    tiles_c: dict[tuple[int, ...], UOp] = {}  # C's tile per kept coordinate, summed over the reduced ones
    for kept_coordinates in product(*(range(range_size(r)) for r in kept)):
        where_kept = dict(zip(kept, kept_coordinates))
        parts = [results[tuple({**where_kept, **dict(zip(reduced, summed))}[r] for r in others)]
                 for summed in product(*(range(range_size(r)) for r in reduced))]
        tiles_c[kept_coordinates] = _combine(u.arg[0], parts)
    out_axes = _union((element_c,), kept)
    if not kept:
        value = tiles_c[()]
    else:
        lanes = []
        for coordinates in product(*(range(range_size(r)) for r in out_axes)):
            where = dict(zip(out_axes, coordinates))
            tile = tiles_c[tuple(where[r] for r in kept)]
            lanes.append(UOp(Ops.GEP, (tile,), (where[element_c],)))
        value = UOp(Ops.VECTORIZE, tuple(lanes))
    if not loops:
        return value, out_axes
    return UOp(Ops.REDUCE, (value, *loops), u.arg), out_axes


def _lanes_where(axes: Axes, fixed: dict[UOp, int], varying: UOp) -> list[int]:
    """The lanes (row-major over ``axes``) where the ``fixed`` axes have their values, in the order of
    the ``varying`` axis."""
    out = []
    for value in range(range_size(varying)):
        where = {**fixed, varying: value}
        lane = 0
        for r in axes:
            lane = lane * range_size(r) + where[r]
        out.append(lane)
    return out


def keep(ctx: ExpandContext, u: UOp) -> tuple[UOp, Axes]:
    """Sources, constants and the SINK have no lanes of their own."""
    sources = tuple(ctx.new[s] for s in u.src)
    return (u if all(a is b for a, b in zip(sources, u.src)) else UOp(u.op, sources, u.arg, u.tag)), ()


def wait_for_reduce(ctx: ExpandContext, u: UOp) -> tuple[UOp, Axes]:
    """A WMMA is left as it is: its REDUCE expands it (``expand tensor core``)."""
    return u, ()


#: Expand's rules, tried in order on every node of a kernel (sources first); the first whose pattern
#: matches gives the node's expanded form and its lane axes.  Not for :func:`graph_rewrite`: a rule
#: reads the expanded sources of the *original* node from its context and returns (value, lanes),
#: which :func:`expand_kernel`'s walk keeps; each node it changes is a step named after its rule.
expansion_rules = PatternMatcher([
    (UPat(Ops.WMMA, name="u"), wait_for_reduce, "tensor core waits for its REDUCE"),
    (UPat(Ops.RANGE, name="u"), expand_range, "expand range"),
    (UPat(Ops.INDEX, name="u"), expand_index, "expand index"),
    (UPat((Ops.LOAD, Ops.STORE), name="u"), expand_memory, "expand memory"),
    (UPat(Ops.REDUCE, src=(UPat(Ops.WMMA),), allow_any_len=True, name="u"), expand_tensor_core, "expand tensor core"),  # noqa: E501
    (UPat(Ops.REDUCE, name="u"), expand_reduce, "expand reduce"),
    (UPat((Ops.CONST, Ops.PARAM, Ops.BUFFER, Ops.SINK, Ops.STACK), name="u"), keep, "keep: no lanes of its own"),  # noqa: E501
    (UPat(name="u"), expand_elementwise, "expand elementwise"),
], name="expand")


def expand_node(ctx: ExpandContext, u: UOp) -> tuple[Rule, UOp, Axes]:
    """The first of :data:`expansion_rules` that matches ``u``, with its expanded form and lanes."""
    for rule in expansion_rules.rules_for(u.op):
        found = rule.apply(u, ctx)
        if found is not None:
            return rule, *found
    raise RewriteError(f"no expansion rule matches {u.op.name}")  # the last rule matches every op


def expand_kernel(ast: UOp, name: str = "kernel") -> UOp:
    """The kernel AST with every UPCAST/UNROLL range turned into vector lanes."""
    if not any(u.op is Ops.RANGE and u.arg[1] in LANE_TYPES for u in ast.toposort()):
        return ast
    ctx = ExpandContext()
    order = ast.toposort()
    with traced_pass(f"expand {name}", ast, expansion_rules) as record:
        for position, u in enumerate(order):
            rule, new, axes = expand_node(ctx, u)
            ctx.new[u] = new
            if axes:
                ctx.axes[u] = axes
            if new is not u:
                # the whole kernel after this step, built when shown: substituting ``new`` for ``u``
                # would feed a vector to users that are not expanded yet
                whole = partial(frontier_graph, ast, order, ctx.new, position + 1)
                record.step(rule.name, u, new, graph=whole, location=rule.location)
        record.output = ctx.new[ast]
    return simplify_indices(ctx.new[ast], name="simplify lane indices") if ctx.substituted else ctx.new[ast]


def expand_stage(lowering: Lowering) -> None:
    """Expand: UPCAST and UNROLL ranges become vector lanes."""
    lowering.replace_bodies(once_per_body(lowering, lambda item: expand_kernel(item.body, item.kernel.name)))


__all__ = ["expand_stage", "expansion_rules", "expand_node", "AxisType", "broadcast", "expand_kernel",
           "lane_map"]
