"""Reduce collapse: a kernel's ``REDUCE(ADD)`` that only counts the points of a range where a
comparison holds becomes that count in closed form (:data:`reduce_collapse`).

The spec writes ``arange(n)`` as ``prefix_sum(ones(n)) - 1``, and prefix_sum as windows of a padded
input summed: at point ``i`` the kernel sums, over a REDUCE range ``r`` of extent ``n``, a constant
gated by ``c < i + r`` (the window's pad).  That sum is the number of ``r`` in ``[0, n)`` past
``c - i``, ``n - clamp(c - i + 1, 0, n)``, so the loop of ``n`` iterations (``n²`` work for the
whole tensor) folds to a few index operations, and the trace shows where it went.

A value that does not depend on ``r`` at all sums to ``x * n``.  Otherwise the rule reads
``REDUCE(WHERE(gate, x, 0), r, ...)`` (or ``REDUCE(CAST(gate))``) where ``x`` does
not depend on ``r`` and ``gate`` is a conjunction of terms that either do not depend on ``r`` or
bound it, ``a < b`` with ``b - a`` an index sum in which ``r`` appears once with coefficient
``±1``.  The bounds give ``lo <= r < hi``; the sum is ``x * max(0, min(hi, n) - max(lo, 0))``
under the terms that do not depend on ``r``.  Anything else (``r`` scaled, inside a division or
a load, a multiplication or maximum reduce) is left as it is.
"""

from __future__ import annotations

from uopviz.core.dtype import DType, dtypes
from uopviz.core.ops import Ops
from uopviz.core.rewrite import PatternMatcher, UPat
from uopviz.core.symbolic_terms import build_sum, linear_terms
from uopviz.core.uop import UOp

__all__ = ["reduce_collapse"]


def _depends_on(u: UOp, loop: UOp) -> bool:
    return any(node is loop for node in u.toposort())  # by identity: == builds a CMP_EQ


def _conjunction_terms(condition: UOp) -> list[UOp]:
    """The terms of a bool AND tree (a single condition is its own term)."""
    terms: list[UOp] = []
    stack = [condition]
    while stack:
        node = stack.pop()
        if node.op is Ops.AND and node.dtype is dtypes.bool:
            stack.extend(reversed(node.src))
        else:
            terms.append(node)
    return terms


def _bound_of(term: UOp, loop: UOp) -> tuple[str, UOp] | None:
    """``("low", lo)`` for a term meaning ``lo <= loop``, ``("high", hi)`` for ``loop < hi``; None
    when the term is not a comparison of an index sum with ``loop`` in it once, coefficient ±1."""
    if term.op is not Ops.CMP_LT or term.src[0].dtype is not dtypes.index:
        return None
    left, right = (linear_terms(side) for side in term.src)
    coefficients = dict(right[0])
    for base, coefficient in left[0].items():  # right - left > 0
        coefficients[base] = coefficients.get(base, 0) - coefficient
    constant = right[1] - left[1]
    slope = coefficients.pop(loop, 0)
    if slope not in (1, -1) or any(_depends_on(base, loop) for base in coefficients):
        return None
    if slope == 1:  # loop + rest > 0  ⟺  loop >= 1 - rest
        return "low", build_sum(dtypes.index, {b: -c for b, c in coefficients.items()}, 1 - constant)
    return "high", build_sum(dtypes.index, coefficients, constant)  # rest - loop > 0  ⟺  loop < rest


def _minimum(a: UOp, b: UOp) -> UOp:
    return UOp(Ops.NEG, (UOp(Ops.MAX, (UOp(Ops.NEG, (a,)), UOp(Ops.NEG, (b,)))),))


def _count(gate: UOp, loop: UOp, extent: int) -> tuple[UOp, list[UOp]] | None:
    """The number of points of ``loop`` where the gate's bounds hold, and the gate's terms that do
    not depend on ``loop``; None when a term depends on it in another way."""
    low = UOp.const(dtypes.index, 0)
    high = UOp.const(dtypes.index, extent)
    rest: list[UOp] = []
    for term in _conjunction_terms(gate):
        if not _depends_on(term, loop):
            rest.append(term)
            continue
        bound = _bound_of(term, loop)
        if bound is None:
            return None
        kind, value = bound
        low, high = (UOp(Ops.MAX, (low, value)), high) if kind == "low" else (low, _minimum(high, value))
    return UOp(Ops.MAX, (UOp(Ops.SUB, (high, low)), UOp.const(dtypes.index, 0))), rest


def _extent(loop: UOp) -> int | None:
    """The constant extent of a RANGE, or None (a symbolic extent)."""
    bound = loop.src[0]
    if bound.op is Ops.CONST and isinstance(bound.arg[0], int):
        return bound.arg[0]
    return None


def _gated(value: UOp, dtype: DType) -> tuple[UOp | None, UOp]:
    """``value`` as ``(gate, taken)``: ``WHERE(gate, taken, 0)`` or ``CAST(gate)``; otherwise
    ``(None, value)`` (summed at every point)."""
    if value.op is Ops.WHERE and value.src[2].op is Ops.CONST and value.src[2].arg[0] == 0:
        return value.src[0], value.src[1]
    if value.op is Ops.CAST and value.src[0].dtype is dtypes.bool:
        return value.src[0], UOp.const(dtype, 1)
    return None, value


def _collapse_counting_reduce(reduce: UOp) -> UOp | None:
    """``REDUCE(ADD)`` of a value gated by bounds on one of its ranges (or not depending on it at
    all): the value times the count."""
    (op, *_), value, loops = reduce.arg, reduce.src[0], reduce.src[1:]
    if op is not Ops.ADD or reduce.dtype.is_bool or reduce.dtype.count != 1:
        return None
    gate, taken = _gated(value, reduce.dtype)
    for loop in loops:
        extent = _extent(loop) if loop.op is Ops.RANGE else None
        if extent is None or _depends_on(taken, loop):
            continue
        if not _depends_on(value, loop):
            # the summed value, gate and all, is the same at every point: it times the extent, the
            # gate kept as it is (read by later rules, e.g. NNEF's padded copies, as written)
            total = value if extent == 1 else UOp(Ops.MUL, (value, UOp.const(reduce.dtype, extent)))
            others = tuple(u for u in loops if u is not loop)
            return UOp(Ops.REDUCE, (total, *others), reduce.arg) if others else total
        if gate is None:
            count, rest = UOp.const(dtypes.index, extent), []
        else:
            counted = _count(gate, loop, extent)
            if counted is None:
                continue
            count, rest = counted
        total = UOp(Ops.CAST, (count,), reduce.dtype)
        if not (taken.op is Ops.CONST and taken.arg[0] == 1):
            total = UOp(Ops.MUL, (taken, total))
        for term in reversed(rest):
            total = UOp(Ops.WHERE, (term, total, UOp.const(reduce.dtype, 0)))
        others = tuple(u for u in loops if u is not loop)
        if not others:
            return total
        # the count is the same at every point of the other ranges: they multiply it
        return UOp(Ops.REDUCE, (total, *others), reduce.arg)
    return None


#: Reduce collapse, the rule group joined into :data:`uopviz.core.symbolic.symbolic`.
reduce_collapse = PatternMatcher(
    [
        (
            UPat(Ops.REDUCE, name="reduce"),
            _collapse_counting_reduce,
            "reduce collapse: a gated count over a range is its closed form",
        ),
    ],
    name="reduce collapse",
)
