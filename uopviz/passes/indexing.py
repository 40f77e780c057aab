"""Index arithmetic shared by the stages: building tidy index expressions over RANGEs.

Rangeify turns movement ops into index arithmetic, Optimize splits ranges, Expand builds lane
indices; all of them build ``index``-typed expressions here.  The builders fold constants and
drop identities eagerly (``x + 0``, ``x * 1``, ``x // 1``), and use value bounds to drop divisions
and modulos that cannot change anything, so the kernel ASTs stay readable before any simplifier
runs.  :data:`index_simplifier` is the rule set that tidies what the builders could not see
locally; once ``uopviz.core.symbolic`` lands its matcher is used instead (see
:func:`simplify_indices`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from uopviz.core.dtype import dtypes
from uopviz.core.ops import Ops
from uopviz.core.rewrite import PatternMatcher, UPat, graph_rewrite
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


def affine_coefficients(expression: UOp, ranges: Sequence[UOp]) -> dict[UOp, int] | None:
    """``{range: coefficient}`` when ``expression`` is ``base + sum(coefficient * range)`` in the given
    ranges (only ADD, and MUL by constants, above them); None otherwise."""
    out: dict[UOp, int] = {}
    if expression.dtype is dtypes.index and _collect_affine(expression, 1, ranges, out):
        return out
    return None


def _collect_affine(u: UOp, scale: int, ranges: Sequence[UOp], out: dict[UOp, int]) -> bool:
    """Add ``scale`` times ``u``'s coefficients to ``out``; False when ``u`` is not affine in ``ranges``.
    (A module function, not a closure that calls itself: such a closure is a reference cycle.)"""
    if any(u is r for r in ranges):
        out[u] = out.get(u, 0) + scale
        return True
    if not any(any(s is r for r in ranges) for s in u.toposort()):
        return True  # part of the base
    if u.op is Ops.ADD:
        return _collect_affine(u.src[0], scale, ranges, out) and _collect_affine(u.src[1], scale, ranges, out)
    if u.op is Ops.MUL and u.src[1].op is Ops.CONST:
        return _collect_affine(u.src[0], scale * int(u.src[1].arg[0]), ranges, out)
    if u.op is Ops.MUL and u.src[0].op is Ops.CONST:
        return _collect_affine(u.src[1], scale * int(u.src[0].arg[0]), ranges, out)
    return False


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
# the temporary index simplifier (replaced by uopviz.core.symbolic once it exists)


def _index_only(*nodes: UOp) -> bool:
    return all(n.dtype is INDEX for n in nodes)


def _fold_binary(x: UOp, a: UOp, b: UOp) -> UOp | None:
    if not _index_only(a, b):
        return None
    va, vb = a.arg[0], b.arg[0]
    if x.op is Ops.ADD:
        return iconst(va + vb)
    if x.op is Ops.MUL:
        return iconst(va * vb)
    if x.op is Ops.IDIV and vb != 0:
        return iconst(va // vb)
    if x.op is Ops.MOD and vb != 0:
        return iconst(va % vb)
    if x.op is Ops.MAX:
        return iconst(max(va, vb))
    if x.op is Ops.CMP_LT:
        return UOp.const(dtypes.bool, va < vb)
    if x.op is Ops.CMP_NE:
        return UOp.const(dtypes.bool, va != vb)
    return None


def _decide_comparison(x: UOp, a: UOp, b: UOp) -> UOp | None:
    """An index comparison whose outcome the bounds already decide becomes a bool constant."""
    if not _index_only(a, b):
        return None
    (la, ha), (lb, hb) = bounds(a), bounds(b)
    if x.op is Ops.CMP_LT:
        if ha < lb:
            return UOp.const(dtypes.bool, True)
        if la >= hb:
            return UOp.const(dtypes.bool, False)
    if x.op is Ops.CMP_NE and (ha < lb or hb < la):
        return UOp.const(dtypes.bool, True)
    return None


def _divide_sum(x: UOp, divisor: int) -> UOp | None:
    """``(a*c + b) // c -> a + b // c`` when ``a*c`` is a multiple of ``c`` and ``b >= 0``."""
    terms = _sum_terms(x)
    multiples = [t for t in terms if _multiple_of(t, divisor)]
    if not multiples:
        return None
    rest = [t for t in terms if not _multiple_of(t, divisor)]
    rest_sum = _sum(rest)
    if bounds(rest_sum)[0] < 0:
        return None
    quotient = _sum([_divide_exact(t, divisor) for t in multiples])
    return iadd(quotient, idiv(rest_sum, divisor))


def _mod_sum(x: UOp, divisor: int) -> UOp | None:
    """``(a*c + b) % c -> b % c``: multiples of the divisor drop out."""
    terms = _sum_terms(x)
    rest = [t for t in terms if not _multiple_of(t, divisor)]
    if len(rest) == len(terms):
        return None
    return imod(_sum(rest), divisor)


def _sum_terms(u: UOp) -> list[UOp]:
    if u.op is Ops.ADD:
        return _sum_terms(u.src[0]) + _sum_terms(u.src[1])
    return [u]


def _sum(terms: Sequence[UOp]) -> UOp:
    out = iconst(0)
    for t in terms:
        out = iadd(out, t)
    return out


def _multiple_of(u: UOp, divisor: int) -> bool:
    if is_const(u):
        return u.arg[0] % divisor == 0
    if u.op is Ops.MUL and is_const(u.src[1]):
        return u.src[1].arg[0] % divisor == 0
    return False


def _divide_exact(u: UOp, divisor: int) -> UOp:
    if is_const(u):
        return iconst(u.arg[0] // divisor)
    return imul(u.src[0], u.src[1].arg[0] // divisor)


def _simplify_idiv(x: UOp, a: UOp, c: UOp) -> UOp | None:
    if not _index_only(a, c) or c.arg[0] <= 0:
        return None
    divisor = c.arg[0]
    simpler = idiv(a, divisor)
    if simpler is not x:
        return simpler
    return _divide_sum(a, divisor) if a.op is Ops.ADD else None


def _simplify_mod(x: UOp, a: UOp, c: UOp) -> UOp | None:
    if not _index_only(a, c) or c.arg[0] <= 0:
        return None
    divisor = c.arg[0]
    simpler = imod(a, divisor)
    if simpler is not x:
        return simpler
    if a.op is Ops.ADD:
        return _mod_sum(a, divisor)
    if _multiple_of(a, divisor):
        return iconst(0)
    return None


def _simplify_add(x: UOp, a: UOp, b: UOp) -> UOp | None:
    if not _index_only(a, b):
        return None
    simpler = iadd(a, b)
    return simpler if simpler is not x else None


def _simplify_mul(x: UOp, a: UOp, c: UOp) -> UOp | None:
    if not _index_only(a, c):
        return None
    simpler = imul(a, c.arg[0])
    return simpler if simpler is not x else None


index_simplifier = PatternMatcher([
    (UPat((Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMP_LT, Ops.CMP_NE), src=(UPat.cvar("a"), UPat.cvar("b")), name="x"), _fold_binary, "fold_index_constants"),  # noqa: E501
    (UPat((Ops.CMP_LT, Ops.CMP_NE), src=(UPat.var("a"), UPat.var("b")), name="x"), _decide_comparison, "decide_index_comparison"),  # noqa: E501
    (UPat(Ops.IDIV, src=(UPat.var("a"), UPat.cvar("c")), name="x"), _simplify_idiv, "simplify_index_division"),  # noqa: E501
    (UPat(Ops.MOD, src=(UPat.var("a"), UPat.cvar("c")), name="x"), _simplify_mod, "simplify_index_modulo"),
    (UPat(Ops.ADD, src=(UPat.var("a"), UPat.var("b")), name="x"), _simplify_add, "simplify_index_sum"),
    (UPat(Ops.MUL, src=(UPat.var("a"), UPat.cvar("c")), name="x"), _simplify_mul, "simplify_index_product"),
    (UPat(Ops.AND, dtype=dtypes.bool, src=[UPat.var("x"), UPat.const(dtypes.bool, True)]), lambda x: x, "and_true"),  # noqa: E501
    (UPat(Ops.AND, dtype=dtypes.bool, src=[UPat.var("x"), UPat.const(dtypes.bool, False, name="f")]), lambda x, f: f, "and_false"),  # noqa: E501
    (UPat(Ops.WHERE, src=(UPat.const(dtypes.bool, True), UPat.var("a"), UPat.var("b"))), lambda a, b: a, "where_true"),  # noqa: E501
    (UPat(Ops.WHERE, src=(UPat.const(dtypes.bool, False), UPat.var("a"), UPat.var("b"))), lambda a, b: b, "where_false"),  # noqa: E501
    (UPat(Ops.LOAD, src=(UPat.var("address"), UPat.var("alt"), UPat.const(dtypes.bool, True))), lambda address, alt: UOp(Ops.LOAD, (address,)), "load_gate_true"),  # noqa: E501
    (UPat(Ops.LOAD, src=(UPat.var("address"), UPat.var("alt"), UPat.const(dtypes.bool, False))), lambda address, alt: alt, "load_gate_false"),  # noqa: E501
    (UPat(Ops.STORE, src=(UPat.var("address"), UPat.var("value"), UPat.const(dtypes.bool, True))), lambda address, value: UOp(Ops.STORE, (address, value)), "store_gate_true"),  # noqa: E501
], name="simplify indices")


def simplify_indices(root: UOp, name: str = "simplify indices") -> UOp:
    """Tidy the index arithmetic of a kernel: ``uopviz.core.symbolic``'s matcher when it exists,
    followed by the index rules above (which also clean gates and WHEREs decided by bounds)."""
    try:
        from uopviz.core.symbolic import symbolic  # type: ignore[attr-defined]
    except ImportError:
        symbolic = None
    if symbolic is not None:
        root = graph_rewrite(root, symbolic, name="symbolic")
    return graph_rewrite(root, index_simplifier, name=name)
