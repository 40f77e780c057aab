"""Index arithmetic shared by the stages: building tidy index expressions over RANGEs.

Rangeify turns movement ops into index arithmetic, Optimize splits ranges, Expand builds lane
indices; all of them build ``index``-typed expressions here.  The builders fold constants and
drop identities eagerly (``x + 0``, ``x * 1``, ``x // 1``), and use value bounds to drop divisions
and modulos that cannot change anything, so the kernel ASTs stay readable before any simplifier
runs.  :data:`index_simplifier` (``uopviz.core.symbolic``'s rules and the decided-gate rules here)
tidies what the builders could not see locally (see :func:`simplify_indices`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from uopviz.core.dtype import dtypes
from uopviz.core.ops import Ops
from uopviz.core.rewrite import PatternMatcher, UPat, graph_rewrite
from uopviz.core.symbolic import symbolic
from uopviz.core.uop import UOp

INDEX = dtypes.index


def iconst(value: int) -> UOp:
    """An index constant."""
    return UOp.const(INDEX, int(value))


def is_const(u: UOp, value: int | None = None) -> bool:
    """True for a CONST (of ``value`` when given)."""
    return u.op is Ops.CONST and (value is None or u.arg[0] == value)


def bounds(u: UOp) -> tuple[int, int]:
    """Inclusive bounds of an index expression; sharper than ``min_max`` for IDIV and MOD."""
    cached = u.__dict__.get("_index_bounds")
    if cached is not None:
        return cached
    result = _bounds(u)
    u.__dict__["_index_bounds"] = result
    return result


def _bounds(u: UOp, of: Callable[[UOp], tuple[int, int]] = bounds) -> tuple[int, int]:
    """``u``'s bounds from its sources' bounds as ``of`` gives them (the cached :func:`bounds`, or
    bounds under a condition: :func:`_bounds_given`)."""
    op = u.op
    if op is Ops.IDIV and is_const(u.src[1]) and u.src[1].arg[0] > 0:
        low, high = of(u.src[0])
        divisor = u.src[1].arg[0]
        return low // divisor, high // divisor
    if op is Ops.MOD and is_const(u.src[1]) and u.src[1].arg[0] > 0:
        low, high = of(u.src[0])
        divisor = u.src[1].arg[0]
        if low >= 0 and high < divisor:
            return low, high
        return 0, divisor - 1
    if op is Ops.ADD:
        (a, b), (c, d) = of(u.src[0]), of(u.src[1])
        return a + c, b + d
    if op is Ops.MUL:
        (a, b), (c, d) = of(u.src[0]), of(u.src[1])
        products = (a * c, a * d, b * c, b * d)
        return min(products), max(products)
    if op is Ops.WHERE:
        # the taken branch is bounded under its condition: a PAD's clamp WHERE(0 < i, i - 1, 0)
        # stays in 0.. (a sharded read checks its addresses against the device's part)
        (a, b), (c, d) = _bounds_given(u.src[1], _narrowed(u.src[0])), of(u.src[2])
        if a > b:  # the condition never holds
            return c, d
        return min(a, c), max(b, d)
    if op is Ops.MAX:
        (a, b), (c, d) = of(u.src[0]), of(u.src[1])
        return max(a, c), max(b, d)
    low, high = u.min_max
    if isinstance(low, bool) or isinstance(high, bool):
        return int(low), int(high)
    return int(low) if math.isfinite(low) else -(2**62), int(high) if math.isfinite(high) else 2**62


def _narrowed(condition: UOp) -> dict[UOp, tuple[int, int]]:
    """Bounds that the ``v < k`` and ``k < v`` terms of ``condition`` (an AND tree) put on ``v``."""
    known: dict[UOp, tuple[int, int]] = {}
    for term in conjuncts(condition):
        if term.op is not Ops.CMP_LT:
            continue
        left, right = term.src
        if is_const(right) and left.dtype is INDEX:
            low, high = known.get(left) or bounds(left)
            known[left] = (low, min(high, right.arg[0] - 1))
        elif is_const(left) and right.dtype is INDEX:
            low, high = known.get(right) or bounds(right)
            known[right] = (max(low, left.arg[0] + 1), high)
    return known


def _bounds_given(u: UOp, known: dict[UOp, tuple[int, int]]) -> tuple[int, int]:
    """``bounds(u)`` where the expressions in ``known`` have those bounds (not cached: they hold
    only under a condition)."""
    if not known:
        return bounds(u)
    if u in known:
        return known[u]
    return _bounds(u, lambda source: _bounds_given(source, known))

def iadd(a: UOp, b: UOp | int) -> UOp:
    """``a + b`` with constants folded."""
    b = b if isinstance(b, UOp) else iconst(b)
    if is_const(a) and is_const(b):
        return iconst(a.arg[0] + b.arg[0])
    if is_const(b, 0):
        return a
    if is_const(a, 0):
        return b
    if is_const(b) and a.op is Ops.ADD and is_const(a.src[1]):  # (x + c1) + c2 -> x + (c1 + c2)
        return iadd(a.src[0], a.src[1].arg[0] + b.arg[0])
    if is_const(a):
        return b + a
    return a + b


def imul(a: UOp, factor: int) -> UOp:
    """``a * factor`` with constants folded."""
    if factor == 0:
        return iconst(0)
    if factor == 1:
        return a
    if is_const(a):
        return iconst(a.arg[0] * factor)
    if a.op is Ops.MUL and is_const(a.src[1]):
        return imul(a.src[0], a.src[1].arg[0] * factor)
    return a * iconst(factor)


def idiv(a: UOp, divisor: int) -> UOp:
    """``a // divisor`` (floor division), dropped when bounds show it is 0 or ``a`` itself."""
    if divisor == 1:
        return a
    if is_const(a):
        return iconst(a.arg[0] // divisor)
    low, high = bounds(a)
    if low >= 0 and high < divisor:
        return iconst(0)
    if a.op is Ops.IDIV and is_const(a.src[1]) and low >= 0:  # (x // c1) // c2 -> x // (c1 c2)
        return idiv(a.src[0], a.src[1].arg[0] * divisor)
    return UOp(Ops.IDIV, (a, iconst(divisor)))


def imod(a: UOp, divisor: int) -> UOp:
    """``a % divisor``, dropped when bounds show ``a`` is already in ``[0, divisor)``."""
    if divisor == 1:
        return iconst(0)
    if is_const(a):
        return iconst(a.arg[0] % divisor)
    low, high = bounds(a)
    if low >= 0 and high < divisor:
        return a
    return UOp(Ops.MOD, (a, iconst(divisor)))


def flat_index(indices: Sequence[UOp], shape: Sequence[int]) -> UOp:
    """The row-major flat position of ``indices`` in ``shape``."""
    total = iconst(0)
    stride = 1
    for index, size in reversed(list(zip(indices, shape))):
        if size != 1:
            total = iadd(imul(index, stride), total)
        stride *= size
    return total


def unflatten(flat: UOp, shape: Sequence[int]) -> list[UOp]:
    """The row-major indices of flat position ``flat`` in ``shape`` (outermost needs no modulo)."""
    out: list[UOp] = []
    stride = math.prod(shape)
    for position, size in enumerate(shape):
        stride //= size if size else 1
        if size == 1:
            out.append(iconst(0))
            continue
        index = idiv(flat, stride) if stride else iconst(0)
        out.append(index if position == 0 else imod(index, size))
    return out


def lower_than(index: UOp, limit: int) -> UOp | None:
    """The bool ``index < limit``, or None when bounds show it always holds."""
    low, high = bounds(index)
    if high < limit:
        return None
    return UOp(Ops.CMP_LT, (index, iconst(limit)))


def at_least(index: UOp, limit: int) -> UOp | None:
    """The bool ``index >= limit`` written as ``limit - 1 < index``, or None when it always holds."""
    low, high = bounds(index)
    if low >= limit:
        return None
    return UOp(Ops.CMP_LT, (iconst(limit - 1), index))


def conjunction(conditions: Sequence[UOp | None]) -> UOp | None:
    """``c0 & c1 & ...`` of the conditions that are not None (None when there are none)."""
    present = [c for c in conditions if c is not None]
    if not present:
        return None
    out = present[0]
    for c in present[1:]:
        out = UOp(Ops.AND, (out, c))
    return out


def conjuncts(condition: UOp) -> list[UOp]:
    """The terms of an AND tree."""
    if condition.op is Ops.AND and condition.dtype is dtypes.bool:
        return conjuncts(condition.src[0]) + conjuncts(condition.src[1])
    return [condition]


# ---------------------------------------------------------------------------------------------
# the index simplifier

# What the index builders cannot see locally: gates and WHEREs that bounds decided (the arithmetic
# itself is uopviz.core.symbolic's, one simplifier for every index expression).
gate_rules = PatternMatcher([
    (UPat(Ops.AND, dtype=dtypes.bool, src=[UPat.var("x"), UPat.const(dtypes.bool, True)]), lambda x: x, "and_true"),  # noqa: E501
    (UPat(Ops.AND, dtype=dtypes.bool, src=[UPat.var("x"), UPat.const(dtypes.bool, False, name="f")]), lambda x, f: f, "and_false"),  # noqa: E501
    (UPat(Ops.WHERE, src=(UPat.const(dtypes.bool, True), UPat.var("a"), UPat.var("b"))), lambda a, b: a, "where_true"),  # noqa: E501
    (UPat(Ops.WHERE, src=(UPat.const(dtypes.bool, False), UPat.var("a"), UPat.var("b"))), lambda a, b: b, "where_false"),  # noqa: E501
    (UPat(Ops.LOAD, src=(UPat.var("address"), UPat.var("alt"), UPat.const(dtypes.bool, True))), lambda address, alt: UOp(Ops.LOAD, (address,)), "load_gate_true"),  # noqa: E501
    (UPat(Ops.LOAD, src=(UPat.var("address"), UPat.var("alt"), UPat.const(dtypes.bool, False))), lambda address, alt: alt, "load_gate_false"),  # noqa: E501
    (UPat(Ops.STORE, src=(UPat.var("address"), UPat.var("value"), UPat.const(dtypes.bool, True))), lambda address, value: UOp(Ops.STORE, (address, value)), "store_gate_true"),  # noqa: E501
], name="decided gates")

index_simplifier = PatternMatcher((symbolic + gate_rules).rules, name="simplify indices", structural=True)


def simplify_indices(root: UOp, name: str = "simplify indices") -> UOp:
    """Tidy the index arithmetic of a kernel (``uopviz.core.symbolic``) and the gates and WHEREs its
    bounds decided, in one rewrite."""
    return graph_rewrite(root, index_simplifier, name=name)
