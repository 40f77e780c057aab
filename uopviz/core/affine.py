"""Affine index analysis: which index expressions are ``base + sum(coefficient * variable)``, and which
index vectors address consecutive elements.

One module for the questions every stage below the Tensor front end asks of an address:

* :func:`affine_coefficients` / :func:`linear_coefficient`: the coefficient of each loop variable
  (RANGE) in a scalar index, the rest being a base free of them.  Expand uses it to build a lane's
  address as ``base + constant``; the heuristic of Optimize to see which axis strides memory; the
  C-family and LLVM renderers to find the stride of a load per loop iteration (prefetching).
* :func:`range_sum` / :func:`build_range_sum`: an index made of loop variables and constants only
  as ``(coefficients, constant)`` and back, the form a front end solves index equations in (NNEF's
  left-hand sides: which ranges an output index uses, with what stride and offset).
* :func:`affine_lanes` / :func:`contiguous_start` / :func:`constant_chunk_width`: the lanes of an
  index *vector* (after Expand) as ``base + constant``, so a renderer emits one contiguous vector
  load or store where the lanes are consecutive.

The coefficients look through ADD, MUL by a constant and MULACC by a constant (the fused form
Instruction Selection makes); anything else that contains a variable makes the expression
non-affine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from uopviz.core.dtype import dtypes
from uopviz.core.ops import Ops
from uopviz.core.uop import UOp

Coefficients = dict[UOp, int]  # loop variable -> its coefficient

# ---------------------------------------------------------------------------------------------
# coefficients of loop variables in a scalar index


def affine_coefficients(expression: UOp, ranges: tuple[UOp, ...]) -> dict[UOp, int] | None:
    """``{range: coefficient}`` when ``expression`` (an index) is ``base + sum(coefficient * range)``
    in the given ranges (only ADD, and MUL or MULACC by constants, above them); None otherwise."""
    if expression.dtype is not dtypes.index:
        return None
    return _coefficients(expression, ranges, {})


def linear_coefficient(expression: UOp, variable: UOp) -> int | None:
    """``c`` when ``expression`` is ``c * variable`` plus terms free of it (ADDs, MULs by constants
    and MULACCs by constants above it), else None."""
    found = _coefficients(expression, (variable,), {})
    return None if found is None else found.get(variable, 0)


def _coefficients(u: UOp, ranges: Sequence[UOp], memo: dict[UOp, Coefficients | None]) -> Coefficients | None:
    """The coefficients of ``ranges`` in ``u`` (in the order the ranges are first met, left operand
    first), memoised per shared subexpression.  (A module function, not a closure that calls
    itself: such a closure is a reference cycle.)"""
    if any(u is r for r in ranges):
        return {u: 1}
    if u in memo:
        return memo[u]
    found: Coefficients | None
    if not any(any(s is r for r in ranges) for s in u.toposort()):
        found = {}  # part of the base
    elif u.op is Ops.ADD:
        found = _sum(_coefficients(u.src[0], ranges, memo), _coefficients(u.src[1], ranges, memo))
    elif u.op is Ops.MUL and u.src[1].op is Ops.CONST:
        found = _scaled(_coefficients(u.src[0], ranges, memo), int(u.src[1].arg[0]))
    elif u.op is Ops.MUL and u.src[0].op is Ops.CONST:
        found = _scaled(_coefficients(u.src[1], ranges, memo), int(u.src[0].arg[0]))
    elif u.op is Ops.MULACC and u.src[1].op is Ops.CONST:  # a * c + b, fused by isel
        found = _sum(
            _scaled(_coefficients(u.src[0], ranges, memo), int(u.src[1].arg[0])),
            _coefficients(u.src[2], ranges, memo),
        )
    else:
        found = None
    memo[u] = found
    return found


def _sum(left: Coefficients | None, right: Coefficients | None) -> Coefficients | None:
    if left is None or right is None:
        return None
    out = dict(left)
    for variable, coefficient in right.items():
        out[variable] = out.get(variable, 0) + coefficient
    return out


def _scaled(inner: Coefficients | None, factor: int) -> Coefficients | None:
    return None if inner is None else {variable: c * factor for variable, c in inner.items()}


# ---------------------------------------------------------------------------------------------
# an index of ranges and constants only


def range_sum(u: UOp, leaf: Callable[[UOp], bool] | None = None) -> tuple[Coefficients, int] | None:
    """``u`` as ``sum(coefficient * term) + constant``, when it is built of terms and integer
    constants only (through ADD, SUB, NEG, MUL with one side constant, and casts from integers);
    None otherwise.  Terms whose coefficients cancel are dropped.

    A term is a RANGE, and with ``leaf`` any other expression ``leaf`` accepts that is not such a
    sum itself (a grouped convolution's ``n // m``, a product of two variables): NNEF's padding
    bounds those by their min_max."""
    op = u.op
    if op is Ops.CONST:
        value = u.arg[0]
        return ({}, int(value)) if isinstance(value, int | bool) else None
    if op is Ops.RANGE:
        return {u: 1}, 0
    if op is Ops.CAST and (u.src[0].dtype.is_int or u.src[0].dtype is dtypes.index):
        return range_sum(u.src[0], leaf)
    if op in (Ops.ADD, Ops.SUB):
        left, right = range_sum(u.src[0], leaf), range_sum(u.src[1], leaf)
        if left is None or right is None:
            return None
        sign = 1 if op is Ops.ADD else -1
        terms = dict(left[0])
        for r, c in right[0].items():
            terms[r] = terms.get(r, 0) + sign * c
        return {r: c for r, c in terms.items() if c}, left[1] + sign * right[1]
    found: tuple[Coefficients, int] | None = None
    if op is Ops.NEG:
        inner = range_sum(u.src[0], leaf)
        found = None if inner is None else ({r: -c for r, c in inner[0].items()}, -inner[1])
    elif op is Ops.MUL:
        left, right = range_sum(u.src[0], leaf), range_sum(u.src[1], leaf)
        if left is not None and right is not None:
            if not left[0]:
                left, right = right, left
            if not right[0]:  # a product by a constant; of two variables it is a term, or nothing
                factor = right[1]
                found = {r: c * factor for r, c in left[0].items() if c * factor}, left[1] * factor
    if found is None and leaf is not None and leaf(u):
        return {u: 1}, 0
    return found


def build_range_sum(terms: Coefficients, constant: int) -> UOp:
    """``sum(coefficient * range) + constant`` as an index UOp (the inverse of :func:`range_sum`)."""
    total: UOp = UOp.const(dtypes.index, constant)
    for r, coefficient in terms.items():
        term = r if coefficient == 1 else r * coefficient
        total = term if total.op is Ops.CONST and total.arg[0] == 0 else total + term
    return total


# ---------------------------------------------------------------------------------------------
# lanes of an index vector


def constant_term(u: UOp) -> tuple[UOp | None, int]:
    """``u`` as ``rest + constant`` through its top-level ADDs of integer constants (``rest`` None
    when ``u`` is a constant; ``(u, 0)`` when it adds none)."""
    if u.op is Ops.CONST:
        return None, int(u.arg[0])
    if u.op is Ops.ADD:
        for constant, rest in ((u.src[1], u.src[0]), (u.src[0], u.src[1])):
            if constant.op is Ops.CONST:
                inner, value = constant_term(rest)
                return inner, value + int(constant.arg[0])
    return u, 0


def _split_constant(lane: UOp) -> tuple[Any, int]:
    """A lane as (structural key of its non-constant part, constant): ``x*4 + 1`` (an ADD or a fused
    MULACC) and ``x*4`` share the key of ``x*4``."""
    rest, constant = constant_term(lane)
    if rest is None:
        return None, constant
    if rest.op is Ops.MULACC and rest.src[2].op is Ops.CONST:
        return ("mul", *sorted((rest.src[0], rest.src[1]), key=id)), constant + int(rest.src[2].arg[0])
    if rest.op is Ops.MUL:
        return ("mul", *sorted((rest.src[0], rest.src[1]), key=id)), constant
    return ("uop", rest), constant


def constant_difference(first: UOp, second: UOp) -> int | None:
    """``second - first`` where the two index expressions differ only by an added constant (``x*7``,
    ``x*7 + 3`` fused into a MULACC, ``x*7 + 5``), else None."""
    first_key, first_constant = _split_constant(first)
    second_key, second_constant = _split_constant(second)
    same = first_key is None and second_key is None or _same_key(first_key, second_key)
    return second_constant - first_constant if same else None


def _same_key(first: Any, second: Any) -> bool:
    """Keys of ``_split_constant`` compared by identity (``==`` on UOps builds a CMP_EQ)."""
    return (
        first is not None
        and second is not None
        and len(first) == len(second)
        and all(a is b for a, b in zip(first, second))
    )


def affine_lanes(u: UOp) -> list[tuple[UOp | None, int]] | None:
    """Each lane of an index vector as ``(base, constant)`` with lane = base + constant (base None:
    a constant lane), or None when some lane is not of that form."""
    if u.op is Ops.VECTORIZE:
        split = [_split_constant(lane) for lane in u.src]
        key, first = split[0]
        if (
            key is not None
            and all(_same_key(k, key) for k, _ in split)
            and all(c == first + i for i, (_, c) in enumerate(split))
        ):
            base, start = u.src[0], 0  # lane i = lane 0 + i; lane 0 without its added constants
            while base.op is Ops.ADD and any(s.op is Ops.CONST for s in base.src):
                constant = base.src[1] if base.src[1].op is Ops.CONST else base.src[0]
                start += int(constant.arg[0])
                base = base.src[0] if constant is base.src[1] else base.src[1]
            return [(base, start + i) for i in range(len(u.src))]
        out: list[tuple[UOp | None, int]] = []
        for lane in u.src:
            if lane.op is Ops.CONST:
                out.append((None, int(lane.arg[0])))
            elif lane.op is Ops.ADD and lane.src[1].op is Ops.CONST:
                out.append((lane.src[0], int(lane.src[1].arg[0])))
            elif lane.op is Ops.ADD and lane.src[0].op is Ops.CONST:
                out.append((lane.src[1], int(lane.src[0].arg[0])))
            else:
                out.append((lane, 0))
        return out
    if u.op is Ops.GEP:
        inner = affine_lanes(u.src[0])
        return None if inner is None else [inner[i] for i in u.arg]
    if u.op is Ops.ADD:
        left, right = affine_lanes(u.src[0]), affine_lanes(u.src[1])
        if left is None or right is None:
            return None
        combined: list[tuple[UOp | None, int]] = []
        for (base_l, const_l), (base_r, const_r) in zip(left, right):
            if base_l is not None and base_r is not None:
                return None
            combined.append((base_l if base_l is not None else base_r, const_l + const_r))
        return combined
    return None


def contiguous_start(index: UOp) -> tuple[UOp | None, int] | None:
    """``(base, start)`` when the lanes of a vector index are ``base + start + lane`` (base None: constant
    lanes ``start + lane``), else None."""
    lanes = affine_lanes(index)
    if lanes is None:
        return None
    base, start = lanes[0]
    if all(b is base for b, _ in lanes) and all(c == start + i for i, (_, c) in enumerate(lanes)):
        return base, start
    return None


def lane_keys(index: UOp) -> list[tuple[tuple[int, ...], int]] | None:
    """Each lane of a vector index as ``(key, constant)``: lanes of one key differ only by their
    constants (``x*7 + 833`` fused into a MULACC and ``x*7`` share one), the key made of the ids of
    the non-constant part's operands (for grouping lanes, never for rendering); None where a lane is
    a constant or not a base plus a constant."""
    if index.op is Ops.VECTORIZE:
        split = [_split_constant(lane) for lane in index.src]
        if any(key is None for key, _ in split):
            return None
        return [(tuple(id(part) for part in key), constant) for key, constant in split]
    lanes = affine_lanes(index)
    if lanes is None or any(base is None for base, _ in lanes):
        return None
    return [((id(base),), constant) for base, constant in lanes]


def constant_chunk_width(index: UOp) -> int | None:
    """The lane count of a constant index at a multiple of it (``4`` or ``VECTORIZE(8..15)``), else None."""
    if index.dtype.count == 1:
        return 1 if index.op is Ops.CONST else None
    found = contiguous_start(index)
    if found is None or found[0] is not None or found[1] % index.dtype.count:
        return None
    return index.dtype.count


def every_other_lane(load: UOp) -> tuple[UOp, int, int] | None:
    """``(base, first, lanes)`` when the first ``lanes`` lanes of a vector LOAD's address are
    ``base + first + 2 * lane`` (a stride-2 convolution's or pool's input row) for 4, 8 or 16 lanes,
    ``lanes`` the whole vector or at least enough that two vectors inside the elements they span
    cover them (a padded row's last tile, whose last lanes are clamped to the row's end); else
    None."""
    index = load.src[0].src[1] if len(load.src[0].src) > 1 else None
    count = load.dtype.count
    if index is None or count not in (4, 8, 16):
        return None
    lanes = affine_lanes(index)
    if lanes is None or lanes[0][0] is None:
        return None
    base, first = lanes[0]
    prefix = 0
    while prefix < count and lanes[prefix][0] is base and lanes[prefix][1] == first + 2 * prefix:
        prefix += 1
    return (base, first, prefix) if 2 * (prefix - 1) + 1 >= count else None


def every_other_lane_loads(count: int, lanes: int) -> tuple[int, int]:
    """Where the two ``count``-lane loads of :func:`every_other_lane`'s ``lanes`` start, after its
    ``first`` element: at it, and where the second ends on the last element the lanes read."""
    return 0, 2 * (lanes - 1) - (count - 1)


def even_lane_picks(count: int, lanes: int | None = None) -> list[int]:
    """The shuffle of two ``count``-lane vectors, loaded where :func:`every_other_lane_loads` says,
    that gives elements ``first + 2 * lane`` for the first ``lanes`` lanes (all by default): lanes
    0, 2, .. of the first vector, then those of the second; lanes past ``lanes`` pick lane 0 (the
    caller fills them)."""
    lanes = count if lanes is None else lanes
    second = every_other_lane_loads(count, lanes)[1]
    return [(2 * i if 2 * i < count else count + 2 * i - second) if i < lanes else 0 for i in range(count)]


__all__ = [
    "affine_coefficients",
    "even_lane_picks",
    "every_other_lane",
    "every_other_lane_loads",
    "affine_lanes",
    "build_range_sum",
    "constant_chunk_width",
    "constant_term",
    "contiguous_start",
    "lane_keys",
    "linear_coefficient",
    "range_sum",
]
