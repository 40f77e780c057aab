"""Tensor's named elementwise functions: arithmetic, rounding, transcendentals and activations.

Each is a spec op (``ADD``, ``IDIV``, ``EXP2``, ``SIN`` ...), one of ours kept whole until Instruction
Selection (``EXP``, ``LOG``: :mod:`uopviz.core.exp_log`), or a composition of them, built on the
class's operand handling (promotion and broadcasting: ``_operands``, ``_binary``, ``_unary_float``
in :mod:`uopviz.core.tensor`); the accurate ``sigmoid`` and ``tanh`` are written in
:mod:`uopviz.core.tensor_math`.
"""

from __future__ import annotations

import math
from typing import Any, Self

from uopviz.core.dtype import dtypes
from uopviz.core.ops import Ops
from uopviz.core.tensor_helpers import float_dtype
from uopviz.core.tensor_math import accurate_sigmoid, accurate_tanh
from uopviz.core.uop import UOpError, UOpTypeError


class ElementwiseMixin:
    """The arithmetic, rounding and transcendental methods of :class:`~uopviz.core.tensor.Tensor`
    (a mixin)."""

    # -- elementwise: arithmetic ---------------------------------------------------------------
    def add(self, other: Any, reverse: bool = False) -> Self:
        """``self + other`` (ADD)."""
        return self._binary(Ops.ADD, other, reverse)

    def sub(self, other: Any, reverse: bool = False) -> Self:
        """``self - other`` (SUB)."""
        x, y = self._operands(other, reverse, Ops.SUB)
        if x.dtype.is_bool:
            raise UOpTypeError("subtraction of bool tensors is not defined; use ^ or logical_not")
        return x._elementwise(Ops.SUB, y)

    def mul(self, other: Any, reverse: bool = False) -> Self:
        """``self * other`` (MUL)."""
        return self._binary(Ops.MUL, other, reverse)

    def div(self, other: Any, reverse: bool = False) -> Self:
        """True division ``self / other`` (DIV); integers give ``float32``."""
        return self._binary_float(Ops.DIV, other, reverse)

    def floordiv(self, other: Any, reverse: bool = False) -> Self:
        """Floor division: IDIV for integers (the spec's floor semantics); ``floor(a / b)`` for floats."""
        x, y = self._operands(other, reverse, Ops.IDIV)
        if x.dtype.is_bool:
            x, y = x.cast(dtypes.default_int), y.cast(dtypes.default_int)
        if x.dtype.is_float:
            return (x / y).floor()
        return x._elementwise(Ops.IDIV, y)

    def mod(self, other: Any, reverse: bool = False) -> Self:
        """Modulo with the sign of the divisor: MOD for integers; ``a - b*floor(a/b)`` for floats."""
        x, y = self._operands(other, reverse, Ops.MOD)
        if x.dtype.is_bool:
            x, y = x.cast(dtypes.default_int), y.cast(dtypes.default_int)
        if x.dtype.is_float:
            return x - y * (x / y).floor()
        return x._elementwise(Ops.MOD, y)

    def neg(self) -> Self:
        """``-self`` (NEG)."""
        if self.dtype.is_bool:
            raise UOpTypeError("negation of a bool tensor is not defined; use logical_not")
        return self._elementwise(Ops.NEG)

    def reciprocal(self) -> Self:
        """``1 / self`` (RECIP)."""
        return self._unary_float(Ops.RECIP)

    def square(self) -> Self:
        """``self * self``."""
        return self * self

    def pow(self, exponent: Any, reverse: bool = False) -> Self:
        """``self ** exponent``.

        A Python integer exponent multiplies (square-and-multiply; exact and defined for negative
        bases, a negative exponent takes the reciprocal).  Any other exponent builds the spec's POW
        (``exp2(log2(a) * b)``, so defined for positive bases), in floating point.
        """
        if not reverse and isinstance(exponent, int) and not isinstance(exponent, bool):
            return self._integer_power(exponent)
        return self._binary_float(Ops.POW, exponent, reverse)

    def _integer_power(self, exponent: int) -> Self:
        if exponent < 0:
            if not self.dtype.is_float:
                raise UOpError(f"integer tensors to the negative power {exponent} are not allowed")
            return self._integer_power(-exponent).reciprocal()
        result: Self | None = None
        base = self
        while exponent:
            if exponent & 1:
                result = base if result is None else result * base
            exponent >>= 1
            if exponent:
                base = base * base
        return result if result is not None else self.ones_like()

    def maximum(self, other: Any) -> Self:
        """Elementwise maximum (MAX)."""
        return self._binary(Ops.MAX, other)

    def minimum(self, other: Any) -> Self:
        """Elementwise minimum: ``-max(-a, -b)`` for floats, ``~max(~a, ~b)`` for integers (never
        overflows), AND for bool."""
        x, y = self._operands(other, op=Ops.MAX)
        if x.dtype.is_float:
            return -((-x).maximum(-y))
        if x.dtype.is_bool:
            return x & y
        return ~((~x).maximum(~y))

    def clip(self, min_: Any = None, max_: Any = None) -> Self:
        """``minimum(maximum(self, min_), max_)`` (either bound may be None). As numpy 2 does, on an
        integer tensor a Python int bound beyond the dtype's range on its own side bounds nothing
        (``uint8.clip(-3, 3)`` is ``clip(None, 3)``); one beyond the other side raises UOpError."""
        if min_ is None and max_ is None:
            raise UOpError("clip needs min_ or max_")
        if self.dtype.is_int:
            if _is_python_int(min_) and min_ < self.dtype.min:
                min_ = None
            if _is_python_int(max_) and max_ > self.dtype.max:
                max_ = None
            if min_ is None and max_ is None:
                return self
        out = self if min_ is None else self.maximum(min_)
        return out if max_ is None else out.minimum(max_)

    clamp = clip

    def abs(self) -> Self:
        """``|x|`` as ``max(x, -x)`` (unsigned and bool: unchanged)."""
        if self.dtype.is_unsigned or self.dtype.is_bool:
            return self
        return self.maximum(-self)

    def sign(self) -> Self:
        """-1, 0 or 1 by the sign: ``(x > 0) - (x < 0)`` in the tensor's dtype."""
        if self.dtype.is_bool:
            return self
        positive = (self > 0).cast(self.dtype)
        if self.dtype.is_unsigned:
            return positive
        return positive - (self < 0).cast(self.dtype)

    def trunc(self) -> Self:
        """Round toward zero (TRUNC; integers unchanged)."""
        return self if not self.dtype.is_float else self._elementwise(Ops.TRUNC)

    def floor(self) -> Self:
        """Round down: ``trunc(x) - (x < trunc(x))``."""
        if not self.dtype.is_float:
            return self
        truncated = self.trunc()
        return truncated - (self < truncated).cast(self.dtype)

    def ceil(self) -> Self:
        """Round up: ``trunc(x) + (x > trunc(x))``."""
        if not self.dtype.is_float:
            return self
        truncated = self.trunc()
        return truncated + (self > truncated).cast(self.dtype)

    # -- elementwise: transcendental -------------------------------------------------------------
    def exp2(self) -> Self:
        """``2 ** x`` (EXP2)."""
        return self._unary_float(Ops.EXP2)

    def log2(self) -> Self:
        """``log2(x)`` (LOG2)."""
        return self._unary_float(Ops.LOG2)

    def _in_float32_for_halves(self, compute: Any) -> Self:
        """``compute(x)`` in the tensor's float type; float16 and bfloat16 in float32, rounded once at
        the end, because the roundings of a composition's steps to 8 or 11 bits would dominate its
        error (``x·log2 e`` rounded to bfloat16 made ``exp(88.5)`` overflow)."""
        dtype = float_dtype(self.dtype)
        if dtype in (dtypes.float16, dtypes.bfloat16):
            return compute(self.cast(dtypes.float32)).cast(dtype)
        return compute(self.cast(dtype))

    def exp(self) -> Self:
        """``e ** x`` (EXP, one node until Instruction Selection writes it as ``exp2(t)·(1 + d·ln 2)``
        with ``t = x·log2 e`` rounded and ``d`` its rounding error: :mod:`uopviz.core.exp_log`).
        float16/bfloat16 are computed in float32."""
        return self._in_float32_for_halves(lambda x: x._elementwise(Ops.EXP))

    def log(self) -> Self:
        """Natural log (LOG, one node until Instruction Selection writes it as ``log2(x) * ln(2)``);
        float16/bfloat16 computed in float32."""
        return self._in_float32_for_halves(lambda x: x._elementwise(Ops.LOG))

    def sin(self) -> Self:
        """``sin(x)`` (SIN)."""
        return self._unary_float(Ops.SIN)

    def cos(self) -> Self:
        """``cos(x)`` (COS, one of our two ops beyond the card).

        Not the card's ``sin(pi/2 - x)``: rounding ``pi/2 - x`` loses the result's digits as ``|x|``
        grows (4.8e-4 absolute error near 1e4 in float32); COS shares SIN's exact reduction."""
        return self._unary_float(Ops.COS)

    def tan(self) -> Self:
        """``tan(x)`` (TAN, ours beyond the card): one reduction and one division, accurate near the
        poles, where ``sin(x) / cos(x)`` of two separately rounded results is not."""
        return self._unary_float(Ops.TAN)

    def sqrt(self) -> Self:
        """``sqrt(x)`` (SQRT)."""
        return self._unary_float(Ops.SQRT)

    def rsqrt(self) -> Self:
        """``1 / sqrt(x)`` (RECIP of SQRT)."""
        return self.sqrt().reciprocal()

    def relu(self) -> Self:
        """``max(x, 0)``."""
        return self.maximum(0)

    def sigmoid(self) -> Self:
        """``1 / (1 + exp(-x))``, as ``exp(x) / (1 + exp(x))`` for negative ``x`` (the exponential
        never overflows); float16/bfloat16 computed in float32."""
        return self._in_float32_for_halves(accurate_sigmoid)

    def tanh(self) -> Self:
        """``x·P(x²)`` for ``|x| < 0.55`` (``2·sigmoid(2x) - 1`` cancels there: 2e7 ulp at 4e-8),
        ``2 * sigmoid(2x) - 1`` beyond; float16/bfloat16 computed in float32."""
        return self._in_float32_for_halves(accurate_tanh)

    def gelu(self) -> Self:
        """GELU, tanh approximation: ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``."""
        x = self.cast(float_dtype(self.dtype))
        return 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh())


def _is_python_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
