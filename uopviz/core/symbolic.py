"""The simplifier: rewrite rules over scalar (shape ``()``) UOps that every later pass relies on.

``simplify(u)`` runs :data:`symbolic` to a fixed point.  The rules come in named groups, each a
:class:`PatternMatcher` of its own (their names show in the rewrite trace):

- :data:`constant_folding` — an op whose operands are all constants becomes a constant, computed
  by :func:`uopviz.core.alu.exec_alu` with the dtype's exact semantics; an integer or bool op
  whose value range collapses to one value becomes that constant.
- :data:`algebraic_identities` — ``x+0``, ``x*1``, ``x*0`` (integers: floats have nan and inf),
  ``x//1``, ``x%1``, ``x-x``, double negation, ``where`` with a constant condition or equal
  branches, ``max(x,x)``, ``x<x``, ``x!=x`` (integers), bool and bit identities, casts.
- :data:`canonical_form` — constants on the right of commutative ops, operands of commutative
  ops in a fixed order, and every integer sum (ADD/SUB/NEG chains, constant multiples) rebuilt as
  a sorted sum of terms with like terms combined and the constant last: ``(x+c1)+c2 → x+(c1+c2)``,
  ``x*c1 + x*c2 → x*(c1+c2)``, ``x+x → x*2``, ``x - x → 0`` all follow from it.
- :data:`index_arithmetic` — floor division and modulo by positive constants decided by value
  ranges (``bounds``): ``(x*c + y)//c → x + y//c``, ``x % n → x`` when ``0 ≤ x < n``,
  ``(x*c + y) % c → y % c``, nested div/mod, gcd factoring, ``(x%c) + (x//c)*c → x``.
- :data:`comparison_folding` — comparisons decided by ranges, constants moved across ``<``,
  ``x*c < d → x < ceil(d/c)``, ``x//d < c → x < c*d``, ``where`` with a decided condition.

Integer rewrites are exact under the dtype's wraparound: sums, products and differences are
exact modulo 2**bits, so they are rearranged freely; division, modulo, comparisons and max are
only rewritten when the ranges prove the arithmetic inside them does not wrap.  Float rewrites
are only the exact ones (``x*1``, ``x-0``, ``x + -0.0``, ``--x``, ``where``/``max`` identities).

``bounds(u)`` refines the spec's ``min_max`` table (which gives MOD, IDIV, AND, SHR, SUB and NEG
the whole dtype range) and is what the range-based rules use.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

from uopviz.core.alu import ALUError, bitcast_value, exec_alu, wrap_integer
from uopviz.core.dtype import DType, DTypeKind, dtypes
from uopviz.core.ops import GroupOp, Ops
from uopviz.core.rewrite import PatternMatcher, UPat, graph_rewrite
from uopviz.core.uop import UOp, derived_attribute

__all__ = [
    "algebraic_identities",
    "bounds",
    "canonical_form",
    "comparison_folding",
    "constant_folding",
    "index_arithmetic",
    "order_key",
    "simplify",
    "symbolic",
]

_INTEGER_KINDS = (DTypeKind.SIGNED, DTypeKind.UNSIGNED, DTypeKind.INDEX)
_ALU = GroupOp.ELEMENTWISE


def _is_int(u: UOp) -> bool:
    dtype = u.dtype
    return dtype.count == 1 and dtype.kind in _INTEGER_KINDS


def _is_bool(u: UOp) -> bool:
    return u.dtype.count == 1 and u.dtype.kind is DTypeKind.BOOL


def _const(dtype: DType, value: Any) -> UOp:
    """A scalar CONST of ``dtype`` holding ``value`` wrapped into the dtype's range."""
    if dtype.kind in _INTEGER_KINDS:
        value = wrap_integer(int(value), dtype)
    return UOp.const(dtype, value)


def _dtype_limits(dtype: DType) -> tuple[int, int]:
    scalar = dtype.scalar
    return scalar.min, scalar.max


# ---------------------------------------------------------------------------------------------
# value ranges


def bounds(u: UOp) -> tuple[Any, Any]:
    """``(lo, hi)``: every value ``u`` can take lies in ``[lo, hi]`` (integer values after wrapping).

    Tighter than the spec's ``min_max`` for MOD, IDIV, AND, OR, XOR, SHR, SHL, SUB, NEG, NOT, the
    decomposed comparisons and CAST, and it reuses these refined ranges through ADD, MUL, MAX and
    WHERE.  Floats and non-ALU ops use ``u.min_max``.  Cached on the UOp.
    """
    cached = u.__dict__.get("_bounds")
    if cached is not None:
        return cached
    return derived_attribute(u, "_bounds", _derive_bounds)


def _fit(dtype: DType, low: int, high: int) -> tuple[int, int]:
    """Bounds of a wrapped integer result: the whole dtype range when the math interval overflows."""
    dmin, dmax = _dtype_limits(dtype)
    if low < dmin or high > dmax:
        return dmin, dmax
    return low, high


def _source_bounds(u: UOp) -> list[tuple[Any, Any]]:
    return [s.__dict__["_bounds"] for s in u.src]


def _derive_bounds(u: UOp) -> tuple[Any, Any]:
    op, dtype = u.op, u.dtype
    if op is Ops.CONST:
        value = u.arg[0]
        return value, value
    if dtype.count != 1:
        return u.min_max
    if op in (Ops.RANGE, Ops.SPECIAL):
        high = u.src[0].__dict__["_bounds"][1]
        return 0, max(0, high - 1) if isinstance(high, int) else u.min_max[1]
    rule = (
        _BOUNDS_INT.get(op)
        if dtype.kind in _INTEGER_KINDS
        else _BOUNDS_BOOL.get(op)
        if dtype.kind is DTypeKind.BOOL
        else None
    )
    if rule is None:
        return u.min_max
    return rule(u, _source_bounds(u))


def _bounds_add(u: UOp, b: list) -> tuple[int, int]:
    (a, big_a), (c, big_c) = b
    return _fit(u.dtype, a + c, big_a + big_c)


def _bounds_sub(u: UOp, b: list) -> tuple[int, int]:
    (a, big_a), (c, big_c) = b
    return _fit(u.dtype, a - big_c, big_a - c)


def _bounds_neg(u: UOp, b: list) -> tuple[int, int]:
    a, big_a = b[0]
    return _fit(u.dtype, -big_a, -a)


def _bounds_mul(u: UOp, b: list) -> tuple[int, int]:
    (a, big_a), (c, big_c) = b
    products = (a * c, a * big_c, big_a * c, big_a * big_c)
    return _fit(u.dtype, min(products), max(products))


def _bounds_mulacc(u: UOp, b: list) -> tuple[int, int]:
    (a, big_a), (c, big_c), (e, big_e) = b
    products = (a * c, a * big_c, big_a * c, big_a * big_c)
    return _fit(u.dtype, min(products) + e, max(products) + big_e)


def _bounds_max(u: UOp, b: list) -> tuple[int, int]:
    (a, big_a), (c, big_c) = b
    return max(a, c), max(big_a, big_c)


def _divisor_parts(low: int, high: int) -> list[int]:
    """The extreme nonzero divisors of ``[low, high]``: floor division is monotone between them."""
    parts = []
    if low < 0:
        parts += [low, min(high, -1)]
    if high > 0:
        parts += [max(low, 1), high]
    return parts


def _bounds_idiv(u: UOp, b: list) -> tuple[int, int]:
    (a, big_a), (c, big_c) = b
    values = [x // y for x in (a, big_a) for y in _divisor_parts(c, big_c)]
    if c <= 0 <= big_c:
        values.append(0)  # division by zero gives 0
    return _fit(u.dtype, min(values), max(values))


def _bounds_mod(u: UOp, b: list) -> tuple[int, int]:
    (a, big_a), (c, big_c) = b
    if c == big_c:  # a constant divisor: exact when the dividend stays in one block
        if c == 0:
            return 0, 0
        if a // c == big_a // c:
            low, high = a % c, big_a % c
            return (low, high) if c > 0 else (low, high)
        return (0, c - 1) if c > 0 else (c + 1, 0)
    low, high = 0, 0
    if big_c > 0:  # positive divisors give [0, divisor-1]; a non-negative dividend stays below itself
        high = max(high, min(big_c - 1, big_a) if a >= 0 else big_c - 1)
    if c < 0:
        low = min(low, max(c + 1, a) if big_a <= 0 else c + 1)
    return low, high


def _bounds_and(u: UOp, b: list) -> tuple[int, int]:
    (a, big_a), (c, big_c) = b
    if a >= 0 and c >= 0:
        return 0, min(big_a, big_c)
    if a >= 0:
        return 0, big_a
    if c >= 0:
        return 0, big_c
    return _dtype_limits(u.dtype)


def _bounds_or_xor(u: UOp, b: list) -> tuple[int, int]:
    (a, big_a), (c, big_c) = b
    if a >= 0 and c >= 0:
        top = (1 << max(big_a, big_c).bit_length()) - 1
        return (max(a, c) if u.op is Ops.OR else 0), top
    return _dtype_limits(u.dtype)


def _bounds_shr(u: UOp, b: list) -> tuple[int, int]:
    (a, big_a), (c, big_c) = b
    bits = u.dtype.itemsize * 8
    if 0 <= c and big_c < bits:
        return min(a >> c, a >> big_c), max(big_a >> c, big_a >> big_c)
    return _dtype_limits(u.dtype)


def _bounds_shl(u: UOp, b: list) -> tuple[int, int]:
    (a, big_a), (c, big_c) = b
    bits = u.dtype.itemsize * 8
    if 0 <= c and big_c < bits:
        values = [x << y for x in (a, big_a) for y in (c, big_c)]
        return _fit(u.dtype, min(values), max(values))
    return _dtype_limits(u.dtype)


def _bounds_not_int(u: UOp, b: list) -> tuple[int, int]:
    a, big_a = b[0]
    return _fit(u.dtype, -big_a - 1, -a - 1)


def _bounds_where(u: UOp, b: list) -> tuple[Any, Any]:
    (c, big_c), (x, big_x), (y, big_y) = b
    if c and big_c:
        return x, big_x
    if not c and not big_c:
        return y, big_y
    return min(x, y), max(big_x, big_y)


def _bounds_cast(u: UOp, b: list) -> tuple[Any, Any]:
    low, high = b[0]
    source, target = u.src[0].dtype, u.dtype
    if target.kind is DTypeKind.BOOL:
        if isinstance(low, float) and (math.isnan(low) or math.isnan(high)):
            return False, True
        return (not (low <= 0 <= high)), (not (low == high == 0))
    if source.is_float:
        if not (math.isfinite(low) and math.isfinite(high)):
            return _dtype_limits(target)
        low, high = math.trunc(low), math.trunc(high)
    return _fit(target, int(low), int(high))


def _bounds_trunc(u: UOp, b: list) -> tuple[int, int]:
    return b[0]


def _compare_bounds(u: UOp, b: list) -> tuple[bool, bool]:
    if u.src[0].dtype.is_float:  # float ranges do not exclude nan: decide nothing
        return False, True
    (a, big_a), (c, big_c) = b
    op = u.op
    if op is Ops.CMP_GT:
        (a, big_a), (c, big_c), op = (c, big_c), (a, big_a), Ops.CMP_LT
    elif op is Ops.CMP_LE:
        (a, big_a), (c, big_c), op = (c, big_c), (a, big_a), Ops.CMP_GE
    if op is Ops.CMP_LT:
        return (True, True) if big_a < c else (False, False) if a >= big_c else (False, True)
    if op is Ops.CMP_GE:
        return (True, True) if a >= big_c else (False, False) if big_a < c else (False, True)
    if op in (Ops.CMP_NE, Ops.CMP_EQ):
        different = big_a < c or big_c < a
        same = a == big_a == c == big_c
        if op is Ops.CMP_NE:
            return (True, True) if different else (False, False) if same else (False, True)
        return (False, False) if different else (True, True) if same else (False, True)
    return False, True


def _bounds_bool_binary(u: UOp, b: list) -> tuple[bool, bool]:
    (a, big_a), (c, big_c) = b
    op = u.op
    if op in (Ops.AND, Ops.MUL):
        return bool(a and c), bool(big_a and big_c)
    if op in (Ops.OR, Ops.ADD, Ops.MAX):
        return bool(a or c), bool(big_a or big_c)
    if a == big_a and c == big_c:  # XOR of two known values
        return (a != c,) * 2
    return False, True


def _bounds_bool_not(u: UOp, b: list) -> tuple[bool, bool]:
    a, big_a = b[0]
    return (not big_a), (not a)


_BOUNDS_INT: dict[Ops, Callable[[UOp, list], tuple[Any, Any]]] = {
    Ops.ADD: _bounds_add,
    Ops.SUB: _bounds_sub,
    Ops.NEG: _bounds_neg,
    Ops.MUL: _bounds_mul,
    Ops.MULACC: _bounds_mulacc,
    Ops.MAX: _bounds_max,
    Ops.IDIV: _bounds_idiv,
    Ops.MOD: _bounds_mod,
    Ops.AND: _bounds_and,
    Ops.OR: _bounds_or_xor,
    Ops.XOR: _bounds_or_xor,
    Ops.SHR: _bounds_shr,
    Ops.SHL: _bounds_shl,
    Ops.NOT: _bounds_not_int,
    Ops.WHERE: _bounds_where,
    Ops.CAST: _bounds_cast,
    Ops.TRUNC: _bounds_trunc,
}
_BOUNDS_BOOL: dict[Ops, Callable[[UOp, list], tuple[Any, Any]]] = {
    **{op: _compare_bounds for op in GroupOp.COMPARISON},
    Ops.AND: _bounds_bool_binary,
    Ops.OR: _bounds_bool_binary,
    Ops.XOR: _bounds_bool_binary,
    Ops.ADD: _bounds_bool_binary,
    Ops.MUL: _bounds_bool_binary,
    Ops.MAX: _bounds_bool_binary,
    Ops.NOT: _bounds_bool_not,
    Ops.WHERE: _bounds_where,
    Ops.CAST: _bounds_cast,
}


# ---------------------------------------------------------------------------------------------
# a canonical order of UOps (deterministic across runs: structural, never by id)


def order_key(u: UOp) -> tuple:
    """A structural sort key: ranges by number, then by op, arg and sources.  Cached on the UOp."""
    cached = u.__dict__.get("_order_key")
    if cached is not None:
        return cached
    return derived_attribute(u, "_order_key", _derive_order_key)


def _derive_order_key(u: UOp) -> tuple:
    arg = u.arg
    if u.op is Ops.CONST:
        value = arg[0]
        arg_key: tuple = (1, value) if isinstance(value, int) else (2, repr(value))
    elif u.op is Ops.RANGE:
        arg_key = (0, arg[0])
    else:
        arg_key = (3, "" if arg is None else repr(arg))
    return (int(u.op), arg_key, u.dtype.name, tuple(s.__dict__["_order_key"] for s in u.src))


# ---------------------------------------------------------------------------------------------
# integer sums as terms


def _signed_coefficient(value: int, dtype: DType) -> int:
    """The representative of a coefficient modulo 2**bits closest to zero (sums are exact mod 2**bits)."""
    bits = dtype.itemsize * 8
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def _terms(u: UOp) -> tuple[dict[UOp, int], int]:
    """``u`` as ``sum(coefficient * base) + constant``: walks ADD, SUB, NEG and MUL by a constant.

    Bases are the non-sum UOps met (keys in left-to-right order).  A constant multiple of a sum of
    several terms stays one base (distributing it would grow the graph).
    """
    coefficients: dict[UOp, int] = {}
    constant = 0
    stack: list[tuple[UOp, int]] = [(u, 1)]
    while stack:
        node, coefficient = stack.pop()
        op = node.op
        if op is Ops.ADD:
            stack.append((node.src[1], coefficient))
            stack.append((node.src[0], coefficient))
        elif op is Ops.SUB:
            stack.append((node.src[1], -coefficient))
            stack.append((node.src[0], coefficient))
        elif op is Ops.NEG:
            stack.append((node.src[0], -coefficient))
        elif op is Ops.CONST:
            constant += coefficient * node.arg[0]
        elif op is Ops.MUL and node.src[1].op is Ops.CONST:
            inner = node.src[0]
            factor = coefficient * node.src[1].arg[0]
            if inner.op in (Ops.ADD, Ops.SUB, Ops.NEG, Ops.MUL) and _is_single_term(inner):
                stack.append((inner, factor))
            else:
                coefficients[inner] = coefficients.get(inner, 0) + factor
        else:
            coefficients[node] = coefficients.get(node, 0) + coefficient
    return coefficients, constant


def _is_single_term(u: UOp) -> bool:
    """True when the sum ``u`` holds at most one non-constant term (so scaling it distributes
    without growing the graph)."""
    return len(_terms(u)[0]) <= 1


def _recombine_divmod(coefficients: dict[UOp, int]) -> int | None:
    """Replace ``m*(y%d) + m*d*(y//d)`` by ``m*y`` in place (``y = d*(y//d) + y%d`` for floor
    division, any sign); returns the constant the expansion of ``y`` adds, None when nothing changed."""
    added: int | None = None
    for base in list(coefficients):
        if base.op is not Ops.MOD or base not in coefficients or base.src[1].op is not Ops.CONST:
            continue
        y, divisor = base.src[0], base.src[1].arg[0]
        if divisor == 0:
            continue
        quotient = UOp(Ops.IDIV, (y, base.src[1]))
        m = coefficients[base]
        if coefficients.get(quotient) == m * divisor:
            del coefficients[base], coefficients[quotient]
            inner, constant = _terms(y)
            for b, c in inner.items():
                coefficients[b] = coefficients.get(b, 0) + c * m
            added = (added or 0) + constant * m
    return added


def _term_uop(dtype: DType, base: UOp, coefficient: int) -> UOp:
    return base if coefficient == 1 else UOp(Ops.MUL, (base, _const(dtype, coefficient)))


def build_sum(dtype: DType, coefficients: dict[UOp, int], constant: int) -> UOp:
    """The canonical UOp of ``sum(coefficient * base) + constant`` (integers).

    Terms are sorted by :func:`order_key` of their base; positive terms are added, negative ones
    subtracted; the constant comes last as ``+ c`` (or first as ``c - t`` when every term is
    negative, which is one node smaller than ``-t + c``).
    """
    terms = sorted(
        ((b, _signed_coefficient(c, dtype)) for b, c in coefficients.items()),
        key=lambda item: order_key(item[0]),
    )
    terms = [(b, c) for b, c in terms if c != 0]
    constant = _signed_coefficient(constant, dtype)
    positive = [(b, c) for b, c in terms if c > 0]
    negative = [(b, -c) for b, c in terms if c < 0]
    if not terms:
        return _const(dtype, constant)
    if positive:
        total = _term_uop(dtype, *positive[0])
        for base, c in positive[1:]:
            total = UOp(Ops.ADD, (total, _term_uop(dtype, base, c)))
    elif constant != 0:
        total = UOp(Ops.SUB, (_const(dtype, constant), _term_uop(dtype, *negative[0])))
        constant, negative = 0, negative[1:]
        for base, c in negative:
            total = UOp(Ops.SUB, (total, _term_uop(dtype, base, c)))
        return total
    else:
        # lead with a term that already needs a MUL (times a negative constant), else negate one
        lead = next((i for i, (_, c) in enumerate(negative) if c != 1), 0)
        base, c = negative.pop(lead)
        total = UOp(Ops.NEG, (base,)) if c == 1 else UOp(Ops.MUL, (base, _const(dtype, -c)))
    for base, c in negative:
        total = UOp(Ops.SUB, (total, _term_uop(dtype, base, c)))
    if constant != 0:
        total = UOp(Ops.ADD, (total, _const(dtype, constant)))
    return total


def _sum_interval(coefficients: dict[UOp, int], constant: int) -> tuple[int, int] | None:
    """The exact integer interval of ``sum(coefficient * base) + constant``, or None (a float bound)."""
    low = high = constant
    for base, c in coefficients.items():
        lo, hi = bounds(base)
        if not (isinstance(lo, int) and isinstance(hi, int)):
            return None
        if c >= 0:
            low, high = low + c * lo, high + c * hi
        else:
            low, high = low + c * hi, high + c * lo
    return low, high


def _exact_terms(u: UOp) -> tuple[dict[UOp, int], int] | None:
    """``u``'s terms with signed coefficients, when the sum provably does not wrap (else None):
    then ``u``'s value equals the integer sum, and division and comparisons may reason on it."""
    coefficients, constant = _terms(u)
    dtype = u.dtype
    coefficients = {b: _signed_coefficient(c, dtype) for b, c in coefficients.items()}
    coefficients = {b: c for b, c in coefficients.items() if c != 0}
    constant = _signed_coefficient(constant, dtype)
    interval = _sum_interval(coefficients, constant)
    if interval is None:
        return None
    dmin, dmax = _dtype_limits(dtype)
    if interval[0] < dmin or interval[1] > dmax:
        return None
    return coefficients, constant


def _fits(dtype: DType, low: int, high: int) -> bool:
    dmin, dmax = _dtype_limits(dtype)
    return dmin <= low and high <= dmax


# ---------------------------------------------------------------------------------------------
# constant folding


def _fold_constants(x: UOp) -> UOp | None:
    try:
        value = exec_alu(x.op, x.dtype, [s.arg[0] for s in x.src])
    except ALUError:
        return None
    return UOp.const(x.dtype, value)


def _fold_bitcast(x: UOp, c: UOp) -> UOp | None:
    if x.dtype.count != 1 or c.dtype.count != 1:
        return None
    try:
        return UOp.const(x.dtype, bitcast_value(c.arg[0], c.dtype, x.dtype))
    except (ALUError, KeyError):
        return None


def _fold_by_range(x: UOp) -> UOp | None:
    """An integer or bool op whose range is a single value is that constant."""
    if x.dtype.count != 1 or x.shape != () or x.dtype.kind not in _RANGE_FOLD_KINDS:
        return None
    low, high = bounds(x)
    if low == high and low is not None:
        return UOp.const(x.dtype, low)
    return None


_RANGE_FOLD_KINDS = (DTypeKind.SIGNED, DTypeKind.UNSIGNED, DTypeKind.INDEX, DTypeKind.BOOL)

constant_folding = PatternMatcher(
    [
        (UPat(_ALU, src=UPat(Ops.CONST), name="x"), _fold_constants, "fold constant operands (exec_alu)"),
        (UPat(Ops.BITCAST, src=(UPat.cvar("c"),), name="x"), _fold_bitcast, "fold BITCAST of a constant"),
        (UPat(_ALU, name="x"), _fold_by_range, "fold an op whose range is one value"),
    ],
    name="constant folding",
)


# ---------------------------------------------------------------------------------------------
# algebraic identities


def _value(c: UOp) -> Any:
    return c.arg[0]


def _is_negative_zero(value: Any) -> bool:
    return isinstance(value, float) and value == 0.0 and math.copysign(1.0, value) < 0


def _zero_like(x: UOp) -> UOp | None:
    return UOp.const(x.dtype, 0) if x.shape == () and x.dtype.count == 1 else None


def _add_zero(x: UOp, c: UOp) -> UOp | None:
    value = _value(c)
    if value != 0:
        return None
    # for floats only -0.0 is an identity of addition: (-0.0) + (+0.0) is +0.0
    return x if not x.dtype.is_float or _is_negative_zero(value) else None


def _sub_zero(x: UOp, c: UOp) -> UOp | None:
    value = _value(c)
    if value != 0:
        return None
    return x if not x.dtype.is_float or not _is_negative_zero(value) else None


def _int_or_bool(x: UOp) -> bool:
    return x.dtype.count == 1 and x.dtype.kind is not DTypeKind.FLOAT


def _all_ones(dtype: DType) -> int:
    return dtype.max if dtype.is_unsigned else -1


def _and_mask(x: UOp, c: UOp) -> UOp | None:
    """``x & (2**k - 1)`` is ``x`` when ``0 <= x < 2**k``; ``x & all-ones`` is ``x``."""
    mask = _value(c)
    if not _is_int(x):
        return None
    if mask == _all_ones(x.dtype):
        return x
    low, high = bounds(x)
    if mask >= 0 and (mask + 1) & mask == 0 and 0 <= low and high <= mask:
        return x
    return None


def _max_by_range(x: UOp, y: UOp) -> UOp | None:
    if not _is_int(x):
        return None
    (a, big_a), (b, big_b) = bounds(x), bounds(y)
    if a >= big_b:
        return x
    if big_a <= b:
        return y
    return None


def _idiv_self(x: UOp) -> UOp | None:
    low, high = bounds(x)
    return UOp.const(x.dtype, 1) if _is_int(x) and (low > 0 or high < 0) else None


def _cast_of_cast(x: UOp, inner: UOp, outer: UOp) -> UOp | None:
    """``CAST(CAST(x, a), b) → CAST(x, b)`` when ``a`` holds every value of the integer/bool ``x``."""
    middle = inner.dtype
    if x.dtype.count != 1 or x.dtype.is_float or not (middle.is_int or middle.is_bool):
        return None
    low, high = bounds(x)
    if middle.is_bool:
        if not x.dtype.is_bool:
            return None
    elif not _fits(middle, int(low), int(high)):
        return None
    return x if outer.dtype == x.dtype else UOp(Ops.CAST, (x,), outer.dtype)


def _bitcast_of_bitcast(x: UOp, outer: UOp) -> UOp:
    return x if outer.dtype == x.dtype else UOp(Ops.BITCAST, (x,), outer.dtype)


def _bool_not(x: UOp) -> UOp:
    return UOp(Ops.CMP_NE, (x, UOp.const(dtypes.bool, True)))


def _same_shape(a: UOp, b: UOp) -> bool:
    return a.shape == b.shape


_TRUE = UPat.const(dtypes.bool, True)
_FALSE = UPat.const(dtypes.bool, False)
_X = UPat.var("x")
_C = UPat.cvar("c")
_BOOL_X = UPat.var("x", dtype=dtypes.bool)

algebraic_identities = PatternMatcher(
    [
        # -- additive and multiplicative identities --------------------------------------------------
        (UPat(Ops.ADD, src=(_X, _C)), _add_zero, "x + 0 → x"),
        (UPat(Ops.SUB, src=(_X, _C)), _sub_zero, "x - 0 → x"),
        (
            UPat(Ops.MUL, src=(_X, UPat.const(None, 1))),
            lambda x: x if not x.dtype.is_bool else None,
            "x * 1 → x",
        ),
        (
            UPat(Ops.MUL, src=(_X, UPat.const(None, 0)), name="m"),
            lambda x, m: _zero_like(m) if _int_or_bool(x) else None,
            "x * 0 → 0 (integers)",
        ),
        (UPat(Ops.DIV, src=(_X, UPat.const(None, 1.0))), lambda x: x, "x / 1 → x"),
        (
            UPat(Ops.SUB, src=(_X, _X), name="s"),
            lambda x, s: _zero_like(s) if _is_int(x) else None,
            "x - x → 0 (integers)",
        ),
        (UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(_X,)),)), lambda x: x, "-(-x) → x"),
        (UPat(Ops.NOT, src=(UPat(Ops.NOT, src=(_X,)),)), lambda x: x, "not not x → x"),
        # -- division and modulo by ±1 and by itself --------------------------------------------------
        (UPat(Ops.IDIV, src=(_X, UPat.const(None, 1))), lambda x: x, "x // 1 → x"),
        (UPat(Ops.IDIV, src=(_X, UPat.const(None, -1))), lambda x: UOp(Ops.NEG, (x,)), "x // -1 → -x"),
        (
            UPat(Ops.MOD, src=(_X, UPat.cvar("c")), name="m"),
            lambda x, c, m: _zero_like(m) if _value(c) in (1, -1) else None,
            "x % ±1 → 0",
        ),
        (UPat(Ops.IDIV, src=(_X, _X)), _idiv_self, "x // x → 1 (x never 0)"),
        (UPat(Ops.MOD, src=(_X, _X), name="m"), lambda x, m: _zero_like(m), "x % x → 0"),
        # -- max, self comparisons ---------------------------------------------------------------------
        (UPat(Ops.MAX, src=(_X, _X)), lambda x: x, "max(x, x) → x"),
        (UPat(Ops.MAX, src=(_X, UPat.var("y"))), _max_by_range, "max(x, y) → x or y (ranges)"),
        (
            UPat(Ops.CMP_LT, src=(_X, _X), name="c"),
            lambda x, c: UOp.const(dtypes.bool, False) if c.shape == () else None,
            "x < x → False",
        ),
        (
            UPat(Ops.CMP_GT, src=(_X, _X), name="c"),
            lambda x, c: UOp.const(dtypes.bool, False) if c.shape == () else None,
            "x > x → False",
        ),
        (
            UPat((Ops.CMP_NE, Ops.CMP_EQ, Ops.CMP_LE, Ops.CMP_GE), src=(_X, _X), name="c"),
            lambda x, c: (
                UOp.const(dtypes.bool, c.op is not Ops.CMP_NE) if _int_or_bool(x) and c.shape == () else None
            ),
            "x != x → False, x == x → True (integers)",
        ),
        # -- where ---------------------------------------------------------------------------------------
        (
            UPat(Ops.WHERE, src=(UPat.cvar("c"), UPat.var("a"), UPat.var("b")), name="w"),
            lambda c, a, b, w: (a if _value(c) else b) if _same_shape(w, a if _value(c) else b) else None,
            "where(constant, a, b) → a or b",
        ),
        (
            UPat(Ops.WHERE, src=(UPat.var("c"), _X, _X), name="w"),
            lambda c, x, w: x if _same_shape(w, x) else None,
            "where(c, x, x) → x",
        ),
        (UPat(Ops.WHERE, src=(UPat.var("c"), _TRUE, _FALSE)), lambda c: c, "where(c, True, False) → c"),
        (UPat(Ops.WHERE, src=(UPat.var("c"), _FALSE, _TRUE)), _bool_not, "where(c, False, True) → c != True"),
        (
            UPat(Ops.WHERE, src=(UPat(Ops.CMP_NE, src=(UPat.var("c"), _TRUE)), UPat.var("a"), UPat.var("b"))),
            lambda c, a, b: UOp(Ops.WHERE, (c, b, a)) if _is_bool(c) else None,
            "where(c != True, a, b) → where(c, b, a)",
        ),
        (
            UPat(Ops.WHERE, src=(UPat(Ops.NOT, src=(UPat.var("c"),)), UPat.var("a"), UPat.var("b"))),
            lambda c, a, b: UOp(Ops.WHERE, (c, b, a)),
            "where(not c, a, b) → where(c, b, a)",
        ),
        (
            UPat(
                Ops.WHERE,
                src=(
                    UPat.var("c"),
                    UPat(Ops.WHERE, src=(UPat.var("c"), UPat.var("a"), UPat())),
                    UPat.var("b"),
                ),
            ),
            lambda c, a, b: UOp(Ops.WHERE, (c, a, b)),
            "where(c, where(c, a, _), b) → where(c, a, b)",
        ),
        (
            UPat(
                Ops.WHERE,
                src=(
                    UPat.var("c"),
                    UPat.var("a"),
                    UPat(Ops.WHERE, src=(UPat.var("c"), UPat(), UPat.var("b"))),
                ),
            ),
            lambda c, a, b: UOp(Ops.WHERE, (c, a, b)),
            "where(c, a, where(c, _, b)) → where(c, a, b)",
        ),
        # -- bool ---------------------------------------------------------------------------------------
        (UPat(Ops.AND, src=(_BOOL_X, _TRUE)), lambda x: x, "x & True → x"),
        (
            UPat(Ops.AND, src=(_BOOL_X, _FALSE), name="c"),
            lambda x, c: c.src[1] if x.shape == () else None,
            "x & False → False",
        ),
        (
            UPat(Ops.OR, src=(_BOOL_X, _TRUE), name="c"),
            lambda x, c: c.src[1] if x.shape == () else None,
            "x | True → True",
        ),
        (UPat(Ops.OR, src=(_BOOL_X, _FALSE)), lambda x: x, "x | False → x"),
        (UPat(Ops.XOR, src=(_BOOL_X, _FALSE)), lambda x: x, "x ^ False → x"),
        (UPat(Ops.XOR, src=(_BOOL_X, _TRUE)), _bool_not, "x ^ True → x != True"),
        (UPat(Ops.CMP_NE, src=(_BOOL_X, _FALSE)), lambda x: x, "x != False → x"),
        (UPat(Ops.CMP_EQ, src=(_BOOL_X, _TRUE)), lambda x: x, "x == True → x"),
        (UPat(Ops.CMP_EQ, src=(_BOOL_X, _FALSE)), _bool_not, "x == False → x != True"),
        (UPat(Ops.NOT, src=(_BOOL_X,)), _bool_not, "not x → x != True (bool)"),
        (
            UPat(Ops.CMP_NE, src=(UPat(Ops.CMP_NE, src=(_BOOL_X, _TRUE)), _TRUE)),
            lambda x: x,
            "(x != True) != True → x",
        ),
        (UPat((Ops.AND, Ops.OR), src=(_X, _X)), lambda x: x, "x & x → x, x | x → x"),
        (
            UPat(Ops.XOR, src=(_X, _X), name="c"),
            lambda x, c: _zero_like(c) if _int_or_bool(x) else None,
            "x ^ x → 0",
        ),
        (
            UPat(Ops.AND, src=[_BOOL_X, UPat(Ops.CMP_NE, src=(_BOOL_X, _TRUE))]),
            lambda x: UOp.const(dtypes.bool, False) if x.shape == () else None,
            "x & not x → False",
        ),
        (
            UPat(Ops.OR, src=[_BOOL_X, UPat(Ops.CMP_NE, src=(_BOOL_X, _TRUE))]),
            lambda x: UOp.const(dtypes.bool, True) if x.shape == () else None,
            "x | not x → True",
        ),
        (UPat(Ops.ADD, src=(_BOOL_X, UPat.var("y"))), lambda x, y: UOp(Ops.OR, (x, y)), "bool x + y → x | y"),
        (
            UPat(Ops.MAX, src=(_BOOL_X, UPat.var("y"))),
            lambda x, y: UOp(Ops.OR, (x, y)),
            "bool max(x, y) → x | y",
        ),
        (
            UPat(Ops.MUL, src=(_BOOL_X, UPat.var("y"))),
            lambda x, y: UOp(Ops.AND, (x, y)),
            "bool x * y → x & y",
        ),
        # -- integer bits ------------------------------------------------------------------------------
        (
            UPat(Ops.AND, src=(_X, UPat.const(None, 0)), name="c"),
            lambda x, c: _zero_like(c) if _is_int(x) else None,
            "x & 0 → 0",
        ),
        (
            UPat((Ops.OR, Ops.XOR), src=(_X, UPat.const(None, 0))),
            lambda x: x if _is_int(x) else None,
            "x | 0 → x, x ^ 0 → x",
        ),
        (UPat(Ops.AND, src=(_X, _C)), _and_mask, "x & mask → x (x within the mask)"),
        (
            UPat(Ops.OR, src=(_X, _C)),
            lambda x, c: c if _is_int(x) and _value(c) == _all_ones(x.dtype) and x.shape == () else None,
            "x | all-ones → all-ones",
        ),
        (UPat((Ops.SHL, Ops.SHR), src=(_X, UPat.const(None, 0))), lambda x: x, "x << 0 → x, x >> 0 → x"),
        (
            UPat(Ops.NOT, src=(UPat(Ops.XOR, src=(_X, UPat.cvar("c"))),)),
            lambda x, c: UOp(Ops.XOR, (x, _const(x.dtype, ~_value(c)))) if _is_int(x) else None,
            "~(x ^ c) → x ^ ~c",
        ),
        # -- casts ---------------------------------------------------------------------------------------
        (
            UPat((Ops.CAST, Ops.BITCAST), name="outer"),
            lambda outer: outer.src[0] if outer.src[0].dtype == outer.dtype else None,
            "cast to its own dtype → x",
        ),
        (
            UPat(Ops.CAST, src=(UPat(Ops.CAST, src=(_X,), name="inner"),), name="outer"),
            _cast_of_cast,
            "cast(cast(x, a), b) → cast(x, b) (a holds x)",
        ),
        (
            UPat(Ops.BITCAST, src=(UPat(Ops.BITCAST, src=(_X,)),), name="outer"),
            _bitcast_of_bitcast,
            "bitcast(bitcast(x)) → bitcast(x)",
        ),
    ],
    name="algebraic identities",
)


# ---------------------------------------------------------------------------------------------
# canonical form: operand order, integer sums and products


def _constant_to_the_right(x: UOp) -> UOp | None:
    a, b = x.src
    if a.op is Ops.CONST and b.op is not Ops.CONST:
        return UOp(x.op, (b, a), x.arg)
    return None


def _order_operands(x: UOp) -> UOp | None:
    a, b = x.src
    if a.op is Ops.CONST or b.op is Ops.CONST or a is b or (x.op is Ops.ADD and _is_int(x)):
        return None  # integer sums have their own order (the canonical sum)
    return UOp(x.op, (b, a), x.arg) if order_key(b) < order_key(a) else None


def _canonical_sum(x: UOp) -> UOp | None:
    """Flatten an integer ADD/SUB/NEG chain into terms, combine like terms (``x*c1 + x*c2``,
    ``x + x``, ``x - x``), recombine ``(y%d)*m + (y//d)*d*m → y*m`` and rebuild it sorted with the
    constant last."""
    if not _is_int(x):
        return None
    coefficients, constant = _terms(x)
    constant += _recombine_divmod(coefficients) or 0
    result = build_sum(x.dtype, coefficients, constant)
    return None if result is x else result


def _scale_single_term(x: UOp, s: UOp, c: UOp) -> UOp | None:
    """``(y*c1 + k) * c2 → y*(c1*c2) + k*c2`` and ``(-y) * c → y * -c``: a constant multiple of one
    term folds into its coefficient."""
    if not _is_int(x) or s.op not in (Ops.ADD, Ops.SUB, Ops.NEG, Ops.MUL) or not _is_single_term(s):
        return None
    coefficients, constant = _terms(s)
    factor = _value(c)
    return build_sum(x.dtype, {b: v * factor for b, v in coefficients.items()}, constant * factor)


def _constant_out_of_product(x: UOp, c: UOp, y: UOp) -> UOp | None:
    """``(x*c)*y → (x*y)*c`` (integers): constants gather at the top of a product."""
    if not _is_int(x) or y.op is Ops.CONST:
        return None
    return UOp(Ops.MUL, (UOp(Ops.MUL, (x, y)), c))


def _reassociate(x: UOp, c1: UOp, c2: UOp, outer: UOp) -> UOp | None:
    """``(x op c1) op c2 → x op (c1 op c2)`` for MAX, AND, OR, XOR on integers and bools."""
    if x.dtype.count != 1 or x.dtype.is_float:
        return None
    try:
        value = exec_alu(outer.op, outer.dtype, (_value(c1), _value(c2)))
    except ALUError:
        return None
    return UOp(outer.op, (x, UOp.const(outer.dtype, value)))


_COMMUTATIVE = GroupOp.COMMUTATIVE

canonical_form = PatternMatcher(
    [
        (
            UPat(_COMMUTATIVE, src=(UPat(), UPat()), name="x"),
            _constant_to_the_right,
            "constant to the right (commutative)",
        ),
        (
            UPat(_COMMUTATIVE, src=(UPat(), UPat()), name="x"),
            _order_operands,
            "order the operands (commutative)",
        ),
        (UPat((Ops.ADD, Ops.SUB, Ops.NEG), name="x"), _canonical_sum, "canonical sum (combine like terms)"),
        (
            UPat(Ops.MUL, src=(UPat.var("s"), _C), name="x"),
            _scale_single_term,
            "(y*c1 + k)*c2 → y*(c1*c2) + k*c2",
        ),
        (
            UPat(Ops.MUL, src=(UPat(Ops.MUL, src=(_X, _C)), UPat.var("y"))),
            _constant_out_of_product,
            "(x*c)*y → (x*y)*c",
        ),
        (
            UPat(
                (Ops.MAX, Ops.AND, Ops.OR, Ops.XOR), src=(UPat(name="inner"), UPat.cvar("c2")), name="outer"
            ),
            lambda inner, c2, outer: (
                _reassociate(inner.src[0], inner.src[1], c2, outer)
                if inner.op is outer.op and inner.src[1].op is Ops.CONST
                else None
            ),
            "(x op c1) op c2 → x op (c1 op c2)",
        ),
    ],
    name="canonical form",
)


# ---------------------------------------------------------------------------------------------
# index arithmetic: floor division and modulo by positive constants


_MAX_REMAINDER_CHOICES = 16


def _block_of(interval: tuple[int, int], divisor: int) -> int | None:
    """``m`` when every value of ``interval`` lies in ``[m*divisor, m*divisor + divisor - 1]``."""
    low, high = interval
    return low // divisor if low // divisor == high // divisor else None


def _split_by_divisor(coefficients: dict[UOp, int], constant: int, divisor: int) -> _Split | None:
    """Write ``sum(c_i*b_i) + k`` as ``divisor*Q + R`` with remainders ``r_i ≡ c_i (mod divisor)``
    (``c mod d`` or ``c mod d - d``) chosen so that R provably lies in one block ``[m*d, m*d+d-1]``."""
    choices = []
    for c in coefficients.values():
        r = c % divisor
        choices.append((r,) if r == 0 else (r, r - divisor))
    if math.prod(len(c) for c in choices) > _MAX_REMAINDER_CHOICES:
        choices = [(c[0],) for c in choices]
    bases = list(coefficients)
    constant_remainder = constant % divisor
    for remainders in itertools.product(*choices):
        remainder_terms = {b: r for b, r in zip(bases, remainders) if r}
        interval = _sum_interval(remainder_terms, constant_remainder)
        if interval is None:
            return None
        block = _block_of(interval, divisor)
        if block is not None:
            quotient = {b: (coefficients[b] - r) // divisor for b, r in zip(bases, remainders)}
            return _Split(
                {b: q for b, q in quotient.items() if q},
                (constant - constant_remainder) // divisor,
                remainder_terms,
                constant_remainder,
                block,
            )
    return None


class _Split(NamedTuple):
    quotient: dict[UOp, int]
    quotient_constant: int
    remainder: dict[UOp, int]
    remainder_constant: int
    block: int


def _sum_fits(dtype: DType, coefficients: dict[UOp, int], constant: int) -> bool:
    """True when the sum provably stays inside the dtype's range (so building it does not wrap)."""
    interval = _sum_interval(coefficients, constant)
    return interval is not None and _fits(dtype, *interval)


def _positive_divisor(d: UOp) -> int | None:
    value = d.arg[0]
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 1 else None


def _fold_idiv(x: UOp, n: UOp, d: UOp) -> UOp | None:
    """Floor division of an integer sum by a constant ``d > 1``."""
    divisor = _positive_divisor(d)
    if divisor is None or not _is_int(x):
        return None
    dtype = x.dtype
    if (
        n.op is Ops.IDIV
        and n.src[1].op is Ops.CONST
        and isinstance(n.src[1].arg[0], int)
        and n.src[1].arg[0] > 0
    ):
        # (y // a) // b → y // (a*b): floor(floor(y/a)/b) == floor(y/(a*b)) for a, b > 0
        product = n.src[1].arg[0] * divisor
        if _fits(dtype, product, product):
            return UOp(Ops.IDIV, (n.src[0], _const(dtype, product)))
    if (
        n.op is Ops.MOD
        and n.src[1].op is Ops.CONST
        and isinstance(n.src[1].arg[0], int)
        and n.src[1].arg[0] > 0
        and n.src[1].arg[0] % divisor == 0
    ):
        # (y % (a*b)) // a → (y // a) % b
        return UOp(Ops.MOD, (UOp(Ops.IDIV, (n.src[0], d)), _const(dtype, n.src[1].arg[0] // divisor)))
    exact = _exact_terms(n)
    if exact is None:
        return None
    coefficients, constant = exact
    if len(coefficients) == 1 and constant != 0:
        ((base, c),) = coefficients.items()
        if (
            c == 1
            and base.op is Ops.IDIV
            and base.src[1].op is Ops.CONST
            and isinstance(base.src[1].arg[0], int)
            and base.src[1].arg[0] > 0
        ):
            # (y // a + k) // b → (y + k*a) // (a*b)
            a = base.src[1].arg[0]
            inner = _exact_terms(base.src[0])
            if inner is not None and _fits(dtype, a * divisor, a * divisor):
                inner_coefficients, inner_constant = inner
                interval = _sum_interval(inner_coefficients, inner_constant + constant * a)
                if interval is not None and _fits(dtype, *interval):
                    numerator = build_sum(dtype, inner_coefficients, inner_constant + constant * a)
                    return UOp(Ops.IDIV, (numerator, _const(dtype, a * divisor)))
    split = _split_by_divisor(coefficients, constant, divisor)
    if split is not None:
        # the remainder part lies in one block m: n // d == quotient + m
        return build_sum(dtype, split.quotient, split.quotient_constant + split.block)
    divisible = {b: c // divisor for b, c in coefficients.items() if c % divisor == 0}
    if divisible:
        # (x*d*q + rest) // d → x*q + rest // d  (floor division: exact for every sign of rest)
        rest = {b: c for b, c in coefficients.items() if c % divisor != 0}
        if not _sum_fits(dtype, rest, constant):
            return None
        remainder = build_sum(dtype, rest, constant)
        return build_sum(dtype, {**divisible, UOp(Ops.IDIV, (remainder, d)): 1}, 0)
    common = math.gcd(divisor, *coefficients.values())
    if common > 1:
        # (g*S + k) // (g*d') → (S + k//g) // d'
        if not _sum_fits(dtype, {b: c // common for b, c in coefficients.items()}, constant // common):
            return None
        reduced = build_sum(dtype, {b: c // common for b, c in coefficients.items()}, constant // common)
        return UOp(Ops.IDIV, (reduced, _const(dtype, divisor // common)))
    return None


def _fold_mod(x: UOp, n: UOp, d: UOp) -> UOp | None:
    """Modulo of an integer sum by a constant ``d > 1``."""
    divisor = _positive_divisor(d)
    if divisor is None or not _is_int(x):
        return None
    dtype = x.dtype
    block = _block_of(bounds(n), divisor)
    if block is not None:
        # every value of n lies in [m*d, m*d + d - 1]: n % d == n - m*d (in [0, d), so no wrap)
        if block == 0:
            return n
        coefficients, constant = _terms(n)
        return build_sum(dtype, coefficients, constant - block * divisor)
    if (
        n.op is Ops.MOD
        and n.src[1].op is Ops.CONST
        and isinstance(n.src[1].arg[0], int)
        and n.src[1].arg[0] > 0
        and n.src[1].arg[0] % divisor == 0
    ):
        return UOp(Ops.MOD, (n.src[0], d))  # (y % (k*d)) % d → y % d
    exact = _exact_terms(n)
    if exact is None:
        return None
    coefficients, constant = exact
    reduced: dict[UOp, int] = {}
    for base, c in coefficients.items():
        if (
            base.op is Ops.MOD
            and base.src[1].op is Ops.CONST
            and isinstance(base.src[1].arg[0], int)
            and base.src[1].arg[0] > 0
            and (c * base.src[1].arg[0]) % divisor == 0
        ):
            base = base.src[0]  # c*(y % m) ≡ c*y (mod d) when d divides c*m
        reduced[base] = reduced.get(base, 0) + c
    # coefficients only matter modulo d: keep one already in (-d, d), else the one nearest zero
    reduced = {b: _reduce_coefficient(c, divisor) for b, c in reduced.items() if c % divisor}
    constant %= divisor
    if _sum_interval(reduced, constant) is None:
        return None
    split = _split_by_divisor(reduced, constant, divisor)
    if split is not None:
        # n ≡ R (mod d) and R lies in one block m: n % d == R - m*d
        return build_sum(dtype, split.remainder, split.remainder_constant - split.block * divisor)
    interval = _sum_interval(reduced, constant)
    if not _fits(dtype, *interval):
        return None
    new_numerator = build_sum(dtype, reduced, constant)
    if new_numerator is not n:
        return UOp(Ops.MOD, (new_numerator, d))
    common = math.gcd(divisor, *reduced.values())
    if common > 1 and reduced:
        # (g*S + k) % (g*d') → g*((S + k//g) % d') + k%g, taken only when the inner modulo folds
        inner = {b: c // common for b, c in reduced.items()}
        inner_split = _split_by_divisor(inner, constant // common, divisor // common)
        if inner_split is not None:
            folded = {b: c * common for b, c in inner_split.remainder.items()}
            return build_sum(
                dtype,
                folded,
                (inner_split.remainder_constant - inner_split.block * (divisor // common)) * common
                + constant % common,
            )
    return None


def _reduce_coefficient(c: int, divisor: int) -> int:
    if -divisor < c < divisor:
        return c
    r = c % divisor
    return r - divisor if divisor - r < r else r


def _mod_below_divisor(x: UOp, y: UOp) -> UOp | None:
    """``x % y → x`` when ``0 <= x < y`` for every value (a non-constant divisor)."""
    if not _is_int(x):
        return None
    (a, big_a), (b, _) = bounds(x), bounds(y)
    return x if 0 <= a and big_a < b else None


index_arithmetic = PatternMatcher(
    [
        (
            UPat(Ops.IDIV, src=(UPat.var("n"), UPat.cvar("d")), name="x"),
            _fold_idiv,
            "fold floor division by a constant",
        ),
        (
            UPat(Ops.MOD, src=(UPat.var("n"), UPat.cvar("d")), name="x"),
            _fold_mod,
            "fold modulo by a constant",
        ),
        (UPat(Ops.MOD, src=(_X, UPat.var("y"))), _mod_below_divisor, "x % y → x when 0 <= x < y"),
    ],
    name="index arithmetic",
)


# ---------------------------------------------------------------------------------------------
# comparisons


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def _fold_less_than_constant(x: UOp, n: UOp, c: UOp) -> UOp | None:
    """``sum < c`` with the sum's constant moved over, a common factor divided out, and
    ``y*g + u < g*m → y < m`` when ``0 <= u < g``."""
    if not _is_int(n) or x.shape != ():
        return None
    dtype = n.dtype
    if (
        n.op is Ops.IDIV
        and n.src[1].op is Ops.CONST
        and isinstance(n.src[1].arg[0], int)
        and n.src[1].arg[0] > 0
    ):
        # y // d < c ⟺ y < c*d (floor division, d > 0)
        limit = _value(c) * n.src[1].arg[0]
        if _fits(dtype, limit, limit):
            return UOp(Ops.CMP_LT, (n.src[0], _const(dtype, limit)))
    exact = _exact_terms(n)
    if exact is None or not exact[0]:
        return None
    coefficients, constant = exact
    limit = _value(c) - constant  # sum(terms) < limit
    if len(coefficients) == 1:
        ((base, coefficient),) = coefficients.items()
        if coefficient > 0:
            bound = _ceil_div(limit, coefficient)
            if (coefficient != 1 or constant != 0) and _fits(dtype, bound, bound):
                return UOp(Ops.CMP_LT, (base, _const(dtype, bound)))
        elif coefficient < 0:
            # -a*b < limit ⟺ b > -limit/a ⟺ floor(limit / coefficient) < b
            bound = limit // coefficient
            if _fits(dtype, bound, bound):
                return UOp(Ops.CMP_LT, (_const(dtype, bound), base))
        return None
    common = math.gcd(*coefficients.values())
    if common > 1:
        bound = _ceil_div(limit, common)
        if _fits(dtype, bound, bound) and _sum_fits(
            dtype, {b: v // common for b, v in coefficients.items()}, 0
        ):
            return UOp(
                Ops.CMP_LT,
                (
                    build_sum(dtype, {b: v // common for b, v in coefficients.items()}, 0),
                    _const(dtype, bound),
                ),
            )
    if constant != 0 and _fits(dtype, limit, limit) and _sum_fits(dtype, coefficients, 0):
        return UOp(Ops.CMP_LT, (build_sum(dtype, coefficients, 0), _const(dtype, limit)))
    large = {b: v for b, v in coefficients.items() if abs(v) > 1}
    if large and len(large) < len(coefficients):
        factor = math.gcd(*large.values())
        small = {b: v for b, v in coefficients.items() if abs(v) <= 1}
        interval = _sum_interval(small, 0)
        if (
            factor > 1
            and interval is not None
            and 0 <= interval[0]
            and interval[1] < factor
            and limit % factor == 0
            and _sum_fits(dtype, {b: v // factor for b, v in large.items()}, 0)
        ):
            return UOp(
                Ops.CMP_LT,
                (
                    build_sum(dtype, {b: v // factor for b, v in large.items()}, 0),
                    _const(dtype, limit // factor),
                ),
            )
    return None


def _fold_constant_less_than(x: UOp, c: UOp, n: UOp) -> UOp | None:
    """``c < y*a + k → (c-k) // a < y`` for ``a > 0``."""
    if not _is_int(n) or x.shape != ():
        return None
    exact = _exact_terms(n)
    if exact is None or len(exact[0]) != 1:
        return None
    ((base, coefficient),) = exact[0].items()
    if coefficient <= 0 or (coefficient == 1 and exact[1] == 0):
        return None
    bound = (_value(c) - exact[1]) // coefficient
    return UOp(Ops.CMP_LT, (_const(n.dtype, bound), base)) if _fits(n.dtype, bound, bound) else None


def _fold_equality_with_constant(x: UOp, n: UOp, c: UOp) -> UOp | None:
    """``y*a + k != c → y != (c-k)/a`` (or True when ``a`` does not divide ``c-k``); same for ==."""
    if not _is_int(n) or x.shape != ():
        return None
    exact = _exact_terms(n)
    if exact is None or len(exact[0]) != 1:
        return None
    ((base, coefficient),) = exact[0].items()
    if coefficient == 1 and exact[1] == 0:
        return None
    difference = _value(c) - exact[1]
    if difference % coefficient:
        return UOp.const(dtypes.bool, x.op is Ops.CMP_NE)
    target = difference // coefficient
    return UOp(x.op, (base, _const(n.dtype, target))) if _fits(n.dtype, target, target) else None


comparison_folding = PatternMatcher(
    [
        (
            UPat(Ops.CMP_LT, src=(UPat.var("n"), _C), name="x"),
            _fold_less_than_constant,
            "fold sum < constant",
        ),
        (
            UPat(Ops.CMP_LT, src=(_C, UPat.var("n")), name="x"),
            _fold_constant_less_than,
            "fold constant < sum",
        ),
        (
            UPat((Ops.CMP_NE, Ops.CMP_EQ), src=(UPat.var("n"), _C), name="x"),
            _fold_equality_with_constant,
            "fold sum != constant",
        ),
    ],
    name="comparison folding",
)


# ---------------------------------------------------------------------------------------------
# the simplifier


symbolic = PatternMatcher(
    constant_folding.rules
    + algebraic_identities.rules
    + canonical_form.rules
    + index_arithmetic.rules
    + comparison_folding.rules,
    name="symbolic",
)


def simplify(uop: UOp) -> UOp:
    """``uop`` rewritten by :data:`symbolic` until no rule applies (shape-``()`` graphs)."""
    return graph_rewrite(uop, symbolic, name="symbolic")
