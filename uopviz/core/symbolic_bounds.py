"""Value ranges of scalar integer and bool UOps: :func:`bounds`, the simplifier's refinement of the
spec's ``min_max`` (which gives MOD, IDIV, AND, SHR, SUB and NEG the whole dtype range), and the
small predicates and constructors the rule groups of :mod:`uopviz.core.symbolic` share.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from uopviz.core.alu import wrap_integer
from uopviz.core.dtype import DType, DTypeKind
from uopviz.core.ops import GroupOp, Ops
from uopviz.core.uop import UOp, derived_attribute

_INTEGER_KINDS = (DTypeKind.SIGNED, DTypeKind.UNSIGNED, DTypeKind.INDEX)
_ALU = GroupOp.ELEMENTWISE


def is_scalar_int(u: UOp) -> bool:
    """True when ``u`` is one integer or index (not a vector, not a bool)."""
    dtype = u.dtype
    return dtype.count == 1 and dtype.kind in _INTEGER_KINDS


def is_scalar_bool(u: UOp) -> bool:
    """True when ``u`` is one bool (not a vector)."""
    return u.dtype.count == 1 and u.dtype.kind is DTypeKind.BOOL


def wrapped_const(dtype: DType, value: Any) -> UOp:
    """A scalar CONST of ``dtype`` holding ``value`` wrapped into the dtype's range."""
    if dtype.kind in _INTEGER_KINDS:
        value = wrap_integer(int(value), dtype)
    return UOp.const(dtype, value)


def dtype_limits(dtype: DType) -> tuple[int, int]:
    """The least and greatest value of ``dtype``'s scalar type."""
    scalar = dtype.scalar
    return scalar.min, scalar.max


def constant_value(c: UOp) -> Any:
    """The value a CONST holds (the first field of its arg), read without checking its op."""
    return c.arg[0]



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
    dmin, dmax = dtype_limits(dtype)
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
    return dtype_limits(u.dtype)


def _bounds_or_xor(u: UOp, b: list) -> tuple[int, int]:
    (a, big_a), (c, big_c) = b
    if a >= 0 and c >= 0:
        top = (1 << max(big_a, big_c).bit_length()) - 1
        return (max(a, c) if u.op is Ops.OR else 0), top
    return dtype_limits(u.dtype)


def _bounds_shr(u: UOp, b: list) -> tuple[int, int]:
    (a, big_a), (c, big_c) = b
    bits = u.dtype.itemsize * 8
    if 0 <= c and big_c < bits:
        return min(a >> c, a >> big_c), max(big_a >> c, big_a >> big_c)
    return dtype_limits(u.dtype)


def _bounds_shl(u: UOp, b: list) -> tuple[int, int]:
    (a, big_a), (c, big_c) = b
    bits = u.dtype.itemsize * 8
    if 0 <= c and big_c < bits:
        values = [x << y for x in (a, big_a) for y in (c, big_c)]
        return _fit(u.dtype, min(values), max(values))
    return dtype_limits(u.dtype)


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
            return dtype_limits(target)
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
