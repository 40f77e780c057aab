"""Elementwise UOps built alike for scalars and vectors, the vocabulary of Instruction Selection's
decompositions: constants with an operand's lane count (:func:`const_like`), arithmetic,
comparisons, selects, bit operations, casts and polynomials (:func:`polynomial`, Horner's rule).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from uopviz.core.alu import exec_alu, wrap_integer
from uopviz.core.dtype import DType
from uopviz.core.ops import Ops
from uopviz.core.uop import UOp


def const_like(x: UOp, value: Any, dtype: DType | None = None) -> UOp:
    """A constant with ``x``'s lane count, of ``dtype`` (default ``x.dtype``): a CONST, or a
    VECTORIZE of CONSTs for a vector."""
    dtype = dtype or x.dtype
    scalar = dtype.scalar
    if scalar.is_int:
        value = wrap_integer(int(value), scalar)
    elif scalar.is_float:
        value = exec_alu(Ops.CAST, scalar, (float(value),))  # the constant as the dtype holds it
    const = UOp.const(scalar, value)
    return const if x.dtype.count == 1 else UOp(Ops.VECTORIZE, (const,) * x.dtype.count)


def _lanes(dtype: DType, x: UOp) -> DType:
    """``dtype`` with ``x``'s lane count."""
    return dtype.scalar.vec(x.dtype.count) if x.dtype.count > 1 else dtype.scalar


def operand(x: UOp, value: UOp | int | float) -> UOp:
    """``value`` as an operand beside ``x``: a UOp as it is, a Python number a constant of ``x``'s type."""
    return value if isinstance(value, UOp) else const_like(x, value)


def _binary(op: Ops, a: UOp | int | float, b: UOp | int | float) -> UOp:
    """``op(a, b)``; a Python number becomes a constant of the other operand's type."""
    reference = a if isinstance(a, UOp) else b
    return UOp(op, (operand(reference, a), operand(reference, b)))


def add(a: UOp | int | float, b: UOp | int | float) -> UOp:
    """ADD."""
    return _binary(Ops.ADD, a, b)


def mul(a: UOp | int | float, b: UOp | int | float) -> UOp:
    """MUL."""
    return _binary(Ops.MUL, a, b)


def sub(a: UOp, b: UOp | int | float) -> UOp:
    """``a - b`` as ``ADD(a, MUL(b, -1))`` (primitives only)."""
    return add(a, mul(operand(a, b), -1))


def less(a: UOp | int | float, b: UOp | int | float) -> UOp:
    """CMP_LT."""
    return _binary(Ops.CMP_LT, a, b)


def not_equal(a: UOp | int | float, b: UOp | int | float) -> UOp:
    """CMP_NE."""
    return _binary(Ops.CMP_NE, a, b)


def where(condition: UOp, a: UOp | int | float, b: UOp | int | float) -> UOp:
    """WHERE (numbers become constants of the other branch's type)."""
    reference = a if isinstance(a, UOp) else b
    return UOp(Ops.WHERE, (condition, operand(reference, a), operand(reference, b)))


def bit_and(a: UOp, b: UOp | int) -> UOp:
    """AND."""
    return UOp(Ops.AND, (a, operand(a, b)))


def bit_or(a: UOp, b: UOp | int) -> UOp:
    """OR."""
    return UOp(Ops.OR, (a, operand(a, b)))


def shift_left(a: UOp, b: UOp | int) -> UOp:
    """SHL."""
    return UOp(Ops.SHL, (a, operand(a, b)))


def shift_right(a: UOp, b: UOp | int) -> UOp:
    """SHR."""
    return UOp(Ops.SHR, (a, operand(a, b)))


def cast(x: UOp, dtype: DType) -> UOp:
    """CAST to ``dtype`` with ``x``'s lane count."""
    target = _lanes(dtype, x)
    return x if target == x.dtype else UOp(Ops.CAST, (x,), target)


def bitcast(x: UOp, dtype: DType) -> UOp:
    """BITCAST to ``dtype`` with ``x``'s lane count."""
    return UOp(Ops.BITCAST, (x,), _lanes(dtype, x))


def truncate(x: UOp) -> UOp:
    """TRUNC."""
    return UOp(Ops.TRUNC, (x,))


def recip(x: UOp) -> UOp:
    """RECIP."""
    return UOp(Ops.RECIP, (x,))


def polynomial(x: UOp, coefficients: Iterable[float]) -> UOp:
    """``c0 + x*(c1 + x*(c2 + ...))`` by Horner's rule."""
    coefficients = list(coefficients)
    result = const_like(x, coefficients[-1])
    for c in reversed(coefficients[:-1]):
        result = add(mul(result, x), c)
    return result
