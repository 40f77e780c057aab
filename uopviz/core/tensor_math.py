"""Accurate sigmoid and tanh of the Tensor front end, written with tensor operations.

The float32 sigmoid and tanh keep the exponential and their sums as pairs of floats (high + low)
and divide them about once-rounded.  :meth:`Tensor.sigmoid <uopviz.core.tensor.Tensor.sigmoid>`
and ``tanh`` call these; ``exp`` and ``log`` are single ops (EXP, LOG) of the graph, written out
by Instruction Selection (:mod:`uopviz.core.exp_log`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

from uopviz.core.dtype import dtypes
from uopviz.core.exp_log import LOG2_E, LOG2_E_EXACT
from uopviz.core.exp_log import upper_half as _upper_half
from uopviz.core.tensor_helpers import TensorLike

# ln 2 in three parts: the first two of 16 bits, so their products with |n| <= 160 are exact in float32
_LN2_EXACT = 1 / LOG2_E_EXACT
_LN2_16, _LN2_32 = (Fraction(math.floor(_LN2_EXACT * 2**bits), 2**bits) for bits in (16, 32))
_LN2_PARTS = (float(_LN2_16), float(_LN2_32 - _LN2_16), float(_LN2_EXACT - _LN2_32))
# (e**r - 1 - r) / r² = Σ r**k / (k+2)!, |r| <= 0.35: 8 terms leave 2e-10 of it
_EXP_TAIL = tuple(1 / math.factorial(k + 2) for k in range(8))


def _two_sum(a: TensorLike, b: TensorLike | float) -> tuple[TensorLike, TensorLike]:
    """``a + b`` as the rounded sum and its exact error (Knuth's two-sum; any magnitudes).  The
    operands must not be rounded products: a multiply-add fusion would add the exact ones."""
    total = a + b
    b_virtual = total - a
    return total, (a - (total - b_virtual)) + (b - b_virtual)


def _exp_pair_float32(v: TensorLike) -> tuple[TensorLike, TensorLike]:
    """``e**v`` for float32 ``v <= 0`` as ``high + low`` to about 2**-28 relative (``exp`` alone is
    good to 2 ulp, which the divisions of sigmoid and tanh then double).

    ``v = n·ln 2 + r`` with ``r`` kept as a pair (``n·ln2`` in parts whose products with ``n`` are
    exact), ``e**r = 1 + r + r²·T(r)`` with the leading ``1 + r`` kept as a pair, times ``2**n``
    built from the exponent bits in two exact steps (so denormal results are rounded once)."""
    v = v.maximum(-110.0)  # e**-110 is 0 in float32 (and n stays in the steps' range); nan stays nan
    magic = 1.5 * 2.0**23
    n = (v * LOG2_E + magic) - magic  # round to an integer without a float → int conversion
    reduced = v - n * _LN2_PARTS[0]  # exact (Sterbenz; n·part exact)
    r_high, r_low = _two_sum(reduced, -n * _LN2_PARTS[1])  # n·part exact: a fused form is the same
    r_low = r_low - n * _LN2_PARTS[2]
    tail = r_low * (1 + r_high) + r_high * r_high * _polynomial(r_high, _EXP_TAIL)
    leading = 1 + r_high  # |r| < 1: fast two-sum
    rest = (r_high - (leading - 1)) + tail
    high = leading + rest  # normalized (|low| below half an ulp of high), as _divide_pair needs
    low = rest - (high - leading)
    # 2**n as 2**(n + 64) (a normal float for n >= -190) times 2**-64: the pair scales exactly, the
    # last step rounds once where the result is a denormal
    whole = (n == n).where(n, 0.0)  # a nan v: the pair is nan anyway; keep the integer steps defined
    scale = ((whole.cast(dtypes.int32) + (127 + 64)) * (1 << 23)).bitcast(dtypes.float32)
    return high * scale * 2.0**-64, low * scale * 2.0**-64


def _polynomial(x: TensorLike, coefficients: Sequence[float]) -> TensorLike:
    """``c0 + x·(c1 + x·(c2 + ...))`` by Horner's rule."""
    result = x * coefficients[-1] + coefficients[-2]
    for c in reversed(coefficients[:-2]):
        result = result * x + c
    return result


def _divide_pair(
    numerator: tuple[TensorLike, TensorLike], denominator: tuple[TensorLike, TensorLike]
) -> TensorLike:
    """``(a + a_low) / (b + b_low)`` rounded about once (float32; ``0 < b``, both pairs normalized:
    each low part below about an ulp of its high part).

    A quotient ``q`` of 12 bits (masked, so its products with the 12-bit halves of ``b`` are exact
    and no multiply-add fusion changes them), the exact residual ``a - q·b`` plus the low parts,
    and ``q + residual / b``."""
    a, a_low = numerator
    b, b_low = denominator
    inverse = b.reciprocal()
    quotient = _upper_half(a * inverse)
    b_high = _upper_half(b)
    residual = ((a - quotient * b_high) - quotient * (b - b_high)) + (a_low - quotient * b_low)
    return quotient + residual * inverse


def _with_slope(value: TensorLike, x: TensorLike, slope: TensorLike) -> TensorLike:
    """``value``, differentiated as ``slope·dx``: the pair arithmetic of the float32 sigmoid and tanh
    splits values by masking bits, which carry no gradient.  ``value - (linear - linear)`` with the
    first ``linear`` detached: the difference is exactly 0 (-0 stays -0) for finite ``x``, an
    infinite ``x`` is replaced by 0 in ``linear`` (where the slope is 0, and inf·0 is nan)."""
    linear = (x * 0 == 0).where(x, 0.0) * slope.detach()
    return value.detach() - (linear.detach() - linear)


def accurate_sigmoid(x: TensorLike) -> TensorLike:
    """``1 / (1 + exp(-x))`` for ``x >= 0``, ``exp(x) / (1 + exp(x))`` below: the exponential never
    overflows, so very negative ``x`` give the tiny (denormal) result rather than 0.  float32:
    the exponential and ``1 + exp`` as pairs of floats and one correctly rounded-ish division
    (each rounding of the plain form costs up to 2 ulp once the quotient's mantissa is smaller
    than the exponential's: 3.8 ulp)."""
    if x.dtype is dtypes.float32:
        small, small_low = _exp_pair_float32(-x.abs())
        sum_high = 1 + small  # small <= 1: fast two-sum
        sum_low = (small - (sum_high - 1)) + small_low
        negative = x < 0
        numerator = (negative.where(small, 1.0), negative.where(small_low, 0.0))
        value = _divide_pair(numerator, (sum_high, sum_low))
        return _with_slope(value, x, value * (1 - value))
    small = (-x.abs()).exp()
    share = (1 + small).reciprocal()
    return (x >= 0).where(share, small * share)


# tanh(x)/x as a polynomial of x² on [0, 0.55²] (Chebyshev fits in 40-digit mpmath, relative error
# 9e-10 / 5e-19, lowest degree first): float32, float64
_TANH_SMALL = {
    "float32": (0.999999999054801905542447, -0.3333331079774894818849908, 0.133324565364331372973326,
                -0.05384231924681724054554289, 0.02103821480627656268466029, -0.006233633487954958622381385),
    "float64": (0.9999999999999999994489066, -0.3333333333333328084326555, 0.1333333333332504441716509,
                -0.05396825396311857846798985, 0.02186948837144286405154073, -0.00886323240466766816142771,
                0.003592090310256479220136964, -0.001455533008820424509152715, 0.0005884078649141197677456099,
                -0.0002332960570410419828881481, 0.00008320274178943323378806441,
                -0.00001942899318366304308336065),
}


def accurate_tanh(x: TensorLike) -> TensorLike:
    """See :meth:`Tensor.tanh`."""
    square = x * x
    coefficients = _TANH_SMALL["float64" if x.dtype is dtypes.float64 else "float32"]
    series = coefficients[-1] * square + coefficients[-2]
    for c in reversed(coefficients[:-2]):
        series = series * square + c
    if x.dtype is dtypes.float32:
        # (1 - u) / (1 + u) with u = e**(-2|x|) <= 1/3 as a pair: the result is in [0.5, 1), where
        # 2·sigmoid(2x) - 1 doubles sigmoid's roundings (3.0 ulp)
        u, u_low = _exp_pair_float32(-2 * x.abs())
        difference = 1 - u
        difference_low = ((1 - difference) - u) - u_low
        total = 1 + u
        total_low = (u - (total - 1)) + u_low
        large = _divide_pair((difference, difference_low), (total, total_low))
        large = (x < 0).where(-large, large)
        value = (x.abs() < 0.55).where(x * series, large)
        return _with_slope(value, x, 1 - value * value)
    large = 2 * (2 * x).sigmoid() - 1
    return (x.abs() < 0.55).where(x * series, large)

