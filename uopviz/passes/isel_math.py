"""The math library Instruction Selection lowers to, written in UOps of the primitives every target
has: ``exp2``, ``log2``, ``sin``/``cos``/``tan`` (Cody–Waite and Payne–Hanek reduction), ``sqrt``,
``pow`` (float64 with the exponent to extra precision) and Threefry-2x32-20, with their minimax
coefficients.  :mod:`uopviz.passes.isel` describes each decomposition and holds the rules that use
them (a rule fires only where the target lacks the op).

Accuracy (measured by ``tests/passes/test_isel.py`` against numpy's long double, in ulps of the
result; ``scripts/accuracy.py`` measures every op on every backend into ``docs/accuracy.md``):

=========  ===============================  ===========  ===========
function   inputs (float32 / float64)        float32 max  float64 max
=========  ===============================  ===========  ===========
exp2       [-126, 127] / [-1022, 1023]       1.13         1.15
log2       [1e-38, 1e38] / [1e-300, 1e300]   1.34         1.08
log2       [0.5, 2]                          1.69         1.69
sin        [-1e4, 1e4]                       1.43         1.65
sin/cos    every finite float                1.39         1.53
tan        every finite float                0.5          3.2
sin        floats nearest k·π, |x| <= 1e4    1.43         0.86
sqrt       [1e-38, 1e38] / [1e-300, 1e300]   1.22         1.21
pow        a in [1e-3, 1e3], b in [-8, 8]    0 (in f64)   1.85
=========  ===============================  ===========  ===========

The reduction is exact for every finite argument, 1e20 and 3.4e38 included.  On a target without
float64, float32 sin/cos reach 1.9 ulp and tan 3.7 (two float32 polynomials divided).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

from uopviz.core.dtype import DType, dtypes
from uopviz.core.ops import Ops
from uopviz.core.uop import UOp
from uopviz.passes.isel_primitives import (
    add,
    bit_and,
    bit_or,
    bitcast,
    cast,
    const_like,
    less,
    mul,
    not_equal,
    operand,
    polynomial,
    recip,
    shift_left,
    shift_right,
    sub,
    truncate,
    where,
)

# ---------------------------------------------------------------------------------------------
# float formats and polynomial coefficients


class _Format:
    """What the bit-level decompositions need of a float type."""

    def __init__(self, dtype: DType, integer: DType, mantissa_bits: int, bias: int):
        self.dtype, self.integer, self.mantissa_bits, self.bias = dtype, integer, mantissa_bits, bias
        self.exponent_mask = (1 << (dtype.itemsize * 8 - 1 - mantissa_bits)) - 1
        self.mantissa_mask = (1 << mantissa_bits) - 1
        self.min_normal = 2.0 ** (1 - bias)


_FORMATS = {
    dtypes.float32: _Format(dtypes.float32, dtypes.int32, 23, 127),
    dtypes.float64: _Format(dtypes.float64, dtypes.int64, 52, 1023),
}

# Minimax coefficients (relative error), fitted with an iteratively reweighted least-squares
# exchange in 60-digit arithmetic (mpmath) on the intervals named.  Errors of the fits:
# exp2 2e-9 / 3e-18, log2 7e-10 / 1e-18, sin 3e-11 / 6e-24, cos 2e-12 / 3e-25 (float32 / float64).

# 2**f = 1 + f*P(f) on [-0.5, 0.5]
_EXP2 = {
    dtypes.float32: (
        1.0,
        0.6931472028813067500298997,
        0.2402264790883385115782422,
        0.05550332407991092362905522,
        0.00961843774988184404462112,
        0.001339890084621712966161411,
        0.0001535330659590782715265116,
    ),
    dtypes.float64: (
        1.0,
        0.6931471805599453258437328,
        0.2402265069591013138466778,
        0.05550410866482008025264737,
        0.009618129107594063699738652,
        0.001333355814677517272715181,
        0.0001540353045719005855698454,
        0.0000152527334927550389092422,
        0.0000013215435240456696262955,
        0.0000001017819966258482930768762,
        7.073790897534339305311136e-9,
        4.434766994412991886891405e-10,
    ),
}
# log2(m) = s*R(s*s), s = (m-1)/(m+1) in [-0.1716, 0.1716]
_LOG2 = {
    dtypes.float32: (
        2.885390079761645256310452,
        0.9617988678028180621089011,
        0.5767122430074934865923906,
        0.4317914756856748758607864,
    ),
    dtypes.float64: (
        2.885390081777926811369735,
        0.9617966939259900927266557,
        0.5770780163453078639451625,
        0.4121985858871417169309266,
        0.3205985301397077235991571,
        0.2623346045942250731103878,
        0.2209065056694182391525839,
        0.2137262010635321200001775,
    ),
}
# log((1+s)/(1-s)) = 2s + s*R(s*s): R = ln2 * (the log2 series above) - 2, in exact arithmetic
_LN2 = Fraction(
    "0.69314718055994530941723212145817656807550013436025525412068000949339362196969471560586332699641868754"
)
_LOG_CORRECTION = {
    dtype: tuple(float(Fraction(c) * _LN2 - (2 if k == 0 else 0)) for k, c in enumerate(coefficients))
    for dtype, coefficients in _LOG2.items()
}
_INVERSE_LN2 = float(1 / _LN2)

# sin(r) = r + r**3 * S(r*r), cos(r) = 1 - r*r/2 + r**4 * Q(r*r) on [-π/4, π/4]
_SIN = {
    dtypes.float32: (
        -0.1666666666374720028836568,
        0.008333331832314338524354166,
        -0.0001984006376193635543014002,
        0.000002724694588512385441767546,
    ),
    dtypes.float64: (
        -0.166666666666666666666661,
        0.008333333333333333332170935,
        -0.0001984126984126983735100162,
        0.000002755731922398085746395294,
        -2.50521083822670481082365e-8,
        1.605904274932877785143482e-10,
        -7.646957314384386210811633e-13,
        2.791043767662234136566008e-15,
    ),
}
_COS = {
    dtypes.float32: (
        0.04166666666423030422887543,
        -0.001388888763643281101945587,
        0.00002480058111702094992369717,
        -0.0000002729846283007272389448453,
    ),
    dtypes.float64: (
        0.04166666666666666666666638,
        -0.001388888888888888888830735,
        0.00002480158730158729962675976,
        -0.0000002755731922398337266831878,
        2.087675698627992753735931e-9,
        -1.147074505371629254226382e-11,
        4.779374078839521839883397e-14,
        -1.551710643836556031643307e-16,
    ),
}

# π to 100 digits: the source of the Cody–Waite parts of π/2
_PI = Fraction(
    "3.1415926535897932384626433832795028841971693993751058209749445923078164062862089986280348253421170679"
)


def _split(value: Fraction, bits: int, parts: int) -> tuple[float, ...]:
    """``value`` as a sum of ``parts`` floats of at most ``bits`` significant bits each (each part
    truncated, the next part carries the rest): ``k * part`` is exact while ``k`` has at most
    ``53 - bits`` (float64) or ``24 - bits`` (float32) bits."""
    out = []
    rest = value
    for _ in range(parts):
        exponent = rest.numerator.bit_length() - rest.denominator.bit_length()
        while Fraction(2) ** exponent > rest:
            exponent -= 1
        while Fraction(2) ** (exponent + 1) <= rest:
            exponent += 1
        step = Fraction(2) ** (exponent - bits + 1)
        part = (rest // step) * step
        out.append(float(part))
        rest -= part
    return tuple(out)


# (bits of each part, parts): float32 reduces exactly for |k| < 2**14 (|x| < 25 700), float64 for
# |k| < 2**26 (|x| < 1.05e8); the parts carry 70 and 135 bits of π/2
_HALF_PI_PARTS = {dtypes.float32: _split(_PI / 2, 10, 7), dtypes.float64: _split(_PI / 2, 27, 5)}
_REDUCTION_LIMIT = {dtypes.float32: 2.0**14, dtypes.float64: 2.0**26}


def in_float32(x: UOp, compute: Callable[[UOp], UOp]) -> UOp | None:
    """float16 / bfloat16: compute in float32 and round back; float32/float64: compute directly."""
    scalar = x.dtype.scalar
    if scalar in _FORMATS:
        return compute(x)
    if scalar in (dtypes.float16, dtypes.bfloat16):
        return cast(compute(cast(x, dtypes.float32)), scalar)
    return None


# ---------------------------------------------------------------------------------------------
# transcendental decompositions


def _power_of_two(n: UOp, form: _Format) -> UOp:
    """``2**n`` for an integer ``n`` in the normal exponent range, from exponent bits."""
    return bitcast(shift_left(add(n, form.bias), form.mantissa_bits), form.dtype)


def decompose_exp2(x: UOp) -> UOp:
    """``2**x``: ``x = n + f`` with ``|f| <= 1/2``, ``2**f`` by a polynomial, ``2**n`` from bits.

    ``n`` comes from adding ``1.5 * 2**mantissa_bits``: the sum's low bits are ``round(x)`` as an
    integer, and subtracting the constant again gives it as a float, both exact for the clamped
    range (no TRUNC, no float → int conversion: a third of the instructions of the vector code).
    A nan passes through the clamp, gives some integer bits, and is put back by the last select."""
    form = _FORMATS[x.dtype.scalar]
    low, high = (-151.0, 129.0) if form.dtype is dtypes.float32 else (-1076.0, 1025.0)
    clamped = where(less(x, low), low, where(less(high, x), high, x))
    magic = 1.5 * 2.0**form.mantissa_bits
    shifted = add(clamped, magic)
    n = sub(shifted, magic)
    f = sub(clamped, n)
    p = polynomial(f, _EXP2[form.dtype])
    magic_bits = ((form.mantissa_bits + form.bias) << form.mantissa_bits) | (1 << (form.mantissa_bits - 1))
    k = sub(bitcast(shifted, form.integer), const_like(bitcast(shifted, form.integer), magic_bits))
    half = shift_right(k, 1)  # 2**n as 2**half * 2**(n - half): both halves are normal numbers
    result = mul(mul(p, _power_of_two(half, form)), _power_of_two(sub(k, half), form))
    return where(not_equal(x, x), x, result)


def decompose_log2(x: UOp) -> UOp:
    """``log2 x``: exponent from the bits, the mantissa's logarithm by a polynomial."""
    form = _FORMATS[x.dtype.scalar]
    small = less(x, form.min_normal)  # denormals (and 0, negatives: replaced below) scaled up
    scaled = where(small, mul(x, 2.0**64), x)
    bits = bitcast(scaled, form.integer)
    exponent = sub(bit_and(shift_right(bits, form.mantissa_bits), form.exponent_mask), form.bias)
    exponent = sub(exponent, where(small, const_like(bits, 64), const_like(bits, 0)))
    one_bits = form.bias << form.mantissa_bits
    mantissa = bitcast(bit_or(bit_and(bits, form.mantissa_mask), one_bits), form.dtype)  # in [1, 2)
    above = less(const_like(x, 2.0**0.5), mantissa)  # centre on [√½, √2)
    mantissa = where(above, mul(mantissa, 0.5), mantissa)
    exponent = add(exponent, where(above, const_like(bits, 1), const_like(bits, 0)))
    # log(1+f) = f - (f²/2 - s·(f²/2 + R(s²))) with s = f/(2+f): f is exact and the terms after it
    # are small corrections, so the natural logarithm is within about one ulp before scaling by 1/ln 2
    f = sub(mantissa, 1.0)
    s = mul(f, recip(add(f, 2.0)))
    half_square = mul(mul(f, f), 0.5)
    correction = polynomial(mul(s, s), _LOG_CORRECTION[form.dtype])
    natural = sub(f, sub(half_square, mul(s, add(half_square, correction))))
    result = add(cast(exponent, form.dtype), mul(natural, _INVERSE_LN2))
    result = where(less(x, float("inf")), result, x)  # inf → inf, nan → nan
    result = where(not_equal(x, 0.0), result, float("-inf"))
    return where(less(x, 0.0), float("nan"), result)


def _absolute(x: UOp) -> UOp:
    return where(less(x, 0.0), mul(x, -1.0), x)


def _cody_waite(x: UOp, wide: DType) -> tuple[UOp, UOp]:
    """``x = k·π/2 + r`` for finite ``x`` of ``wide``'s type: ``(r, k mod 4 as int32)``, exact while
    ``|k|`` stays under :data:`_REDUCTION_LIMIT`.

    ``k = round(x·2/π)`` comes from adding ``1.5·2**mantissa_bits`` (as exp2 does: no TRUNC, no
    float → int conversion); the sum's low integer bits are ``k``, its last two the quadrant.  π/2
    is split into parts whose products with ``k`` are exact, so ``r`` is rounded once."""
    form = _FORMATS[wide]
    magic = 1.5 * 2.0**form.mantissa_bits
    shifted = add(mul(x, float(2 / _PI)), magic)
    k = sub(shifted, magic)
    r = x
    for part in _HALF_PI_PARTS[wide]:
        r = sub(r, mul(k, part))
    # (narrowed to int32: its masks then select float32 lanes without widening them)
    quadrant = cast(bit_and(bitcast(shifted, form.integer), 3), dtypes.int32)
    return r, quadrant


def _two_over_pi_words(count: int) -> tuple[int, ...]:
    """``count`` 64-bit words of the binary expansion of 2/π, after one word of zeros: bit ``i`` of
    the sequence (most significant first) has weight ``2**(63 - i)``, so the first bit of 2/π
    (weight 1/2) is bit 64.  Computed exactly from π by Machin's formula in integers."""
    guard = 64
    bits = 64 * count + guard

    def arctan_inverse(n: int) -> int:  # atan(1/n) · 2**bits, truncated term by term
        total, term, k, sign = 0, (1 << bits) // n, 1, 1
        while term:
            total += sign * (term // k)
            term //= n * n
            k += 2
            sign = -sign
        return total

    pi_scaled = 16 * arctan_inverse(5) - 4 * arctan_inverse(239)  # π·2**bits, within ~count units
    # floor(2/π · 2**(64·(count-1))): computed with guard bits, which absorb pi_scaled's error
    two_over_pi = (1 << (64 * (count - 1) + guard + 1 + bits)) // pi_scaled >> guard
    words = [(two_over_pi >> (64 * (count - 2 - i))) & (2**64 - 1) for i in range(count - 1)]
    return (0, *words)


# Payne–Hanek: 2/π to 1216 bits, enough for the float64 exponent range with 190 bits to spare, as
# 64-bit words (float64) and as 32-bit words (float32, whose products then fit 32×32 → 64 bits)
_TWO_OVER_PI = _two_over_pi_words(20)
_TWO_OVER_PI_32 = tuple(half for word in _TWO_OVER_PI for half in (word >> 32, word & 0xFFFFFFFF))
_PAYNE_HANEK_PAD = 64  # the zero bits in front, so that windows of small exponents stay in the table


def _pick_word(index: UOp, offset: int, candidates: range, table: tuple[int, ...], dtype: DType) -> UOp:
    """Word ``index + offset`` of ``table``, for ``index`` in ``candidates``: a chain of selects
    (the dialect has no table lookup in registers)."""

    def word(candidate: int) -> UOp:
        return const_like(index, table[candidate + offset], dtype)

    picked = word(candidates[0])
    for candidate in candidates[1:]:
        picked = where(not_equal(index, candidate), picked, word(candidate))
    return picked


def _window(high: UOp, low: UOp, shift: UOp) -> UOp:
    """The word starting ``shift`` bits into the double word ``high:low`` (shift below the word
    size).  ``low`` is shifted in two steps so that no shift amount reaches the word size
    (undefined in C)."""
    top = high.dtype.scalar.itemsize * 8 - 1
    low_part = shift_right(shift_right(low, 1), sub(const_like(shift, top), shift))
    return bit_or(shift_left(high, shift), low_part)


def _multiply_wide(a: UOp, b: UOp) -> tuple[UOp, UOp]:
    """``a·b`` (uint64, ``a`` under 2**53) as its high and low 64-bit words, from 32-bit halves."""
    low_mask = 0xFFFFFFFF
    a_high, a_low = shift_right(a, 32), bit_and(a, low_mask)
    b_high, b_low = shift_right(b, 32), bit_and(b, low_mask)
    low_low, low_high = mul(a_low, b_low), mul(a_low, b_high)
    high_low, high_high = mul(a_high, b_low), mul(a_high, b_high)
    middle = add(add(shift_right(low_low, 32), bit_and(low_high, low_mask)), bit_and(high_low, low_mask))
    low = bit_or(shift_left(middle, 32), bit_and(low_low, low_mask))
    high = add(
        add(high_high, shift_right(low_high, 32)), add(shift_right(high_low, 32), shift_right(middle, 32))
    )
    return high, low


def _window_words(x: UOp, smallest_exponent: int, word_bits: int, count: int) -> tuple[UOp, list[UOp]]:
    """The integer mantissa ``m`` of ``|x| = m·2**E`` and ``count`` words (of ``word_bits``) of 2/π
    starting at the bit of weight ``2**(1 - E)``, for ``|x| >= 2**smallest_exponent``."""
    form = _FORMATS[x.dtype.scalar]
    unsigned = dtypes.uint32 if word_bits == 32 else dtypes.uint64
    bits = bitcast(_absolute(x), form.integer)
    mantissa = cast(bit_or(bit_and(bits, form.mantissa_mask), 1 << form.mantissa_bits), unsigned)
    exponent = cast(bit_and(shift_right(bits, form.mantissa_bits), form.exponent_mask), dtypes.int32)
    offset = _PAYNE_HANEK_PAD - 2 - form.bias - form.mantissa_bits
    start = add(exponent, offset)  # the bit of weight 2**(1 - E), counted in the padded table
    lowest = max(0, smallest_exponent + form.bias + offset)
    highest = form.exponent_mask - 1 + offset
    start = where(less(start, lowest), lowest, where(less(highest, start), highest, start))  # others: unused
    shift_bits = word_bits.bit_length() - 1
    word = shift_right(start, shift_bits)
    shift = cast(bit_and(start, word_bits - 1), dtypes.uint64)
    candidates = range(lowest >> shift_bits, (highest >> shift_bits) + 1)
    if word_bits == 32:
        # 32-bit words picked (cheaper selects than 64-bit ones), joined in pairs as uint64: one
        # shift by 32 - shift (never 0 or 64) takes a window out of a pair, ready to multiply
        mantissa = cast(mantissa, dtypes.uint64)
        picked = [
            cast(_pick_word(word, offset, candidates, _TWO_OVER_PI_32, dtypes.uint32), dtypes.uint64)
            for offset in range(count + 1)
        ]
        amount = sub(const_like(shift, 32), shift)
        pairs = [bit_or(shift_left(picked[i], 32), picked[i + 1]) for i in range(count)]
        return mantissa, [bit_and(shift_right(pair, amount), 0xFFFFFFFF) for pair in pairs]
    words = [_pick_word(word, offset, candidates, _TWO_OVER_PI, unsigned) for offset in range(count + 1)]
    return mantissa, [_window(words[i], words[i + 1], shift) for i in range(count)]


def _payne_hanek(x: UOp, wide: DType, smallest_exponent: int) -> tuple[UOp, UOp]:
    """``x = k·π/2 + r`` for finite ``|x| >= 2**smallest_exponent``: ``(r in wide, k mod 4 as int32)``.

    ``|x| = m·2**E`` with an integer mantissa ``m``.  Bits of 2/π whose product with ``2**E`` is a
    multiple of 4 add nothing modulo 4, so ``x·2/π mod 4`` needs only a window of 2/π starting at
    the bit of weight ``2**(1 - E)``: with the window as an integer ``W`` of ``n`` bits, ``m·W mod
    2**n`` holds the quadrant in its top two bits and the fraction below.  float32 takes a 96-bit
    window in 32-bit words (products of 24 × 32 bits, which vector units have); float64 a 192-bit
    one in 64-bit words (the nearest float64 to a multiple of π/2 is within 2**-61 of it)."""
    if x.dtype.scalar is dtypes.float32:
        mantissa, windows = _window_words(x, smallest_exponent, 32, 3)
        products = [mul(mantissa, window) for window in windows]
        middle = add(products[1], shift_right(products[2], 32))
        top = cast(add(products[0], shift_right(middle, 32)), dtypes.uint32)  # quadrant + 30 fraction bits
        low, low_unit = cast(middle, dtypes.uint32), 2.0**-32
        point = 30
    else:
        mantissa, (first, second, third) = _window_words(x, smallest_exponent, 64, 3)
        second_high, second_low = _multiply_wide(mantissa, second)
        third_high, _ = _multiply_wide(mantissa, third)
        low = add(second_low, third_high)
        carry = cast(less(low, second_low), dtypes.uint64)
        top = add(add(mul(mantissa, first), second_high), carry)  # m·W mod 2**64: quadrant + 62 bits
        low_unit, point = 2.0**-64, 62
    # round to the nearest quadrant: the fraction becomes a signed number of `point` bits
    quadrant = shift_right(add(top, 1 << (point - 1)), point)
    signed = dtypes.int32 if top.dtype.scalar is dtypes.uint32 else dtypes.int64
    fraction = bitcast(sub(top, shift_left(quadrant, point)), signed)
    r = _fraction_times_half_pi(fraction, low, low_unit, point, wide)
    quadrant = cast(quadrant, dtypes.int32)
    negative = less(x, 0.0)
    r = where(negative, mul(r, -1.0), r)
    quadrant = where(negative, bit_and(mul(quadrant, -1), 3), quadrant)
    return r, quadrant


def _fraction_times_half_pi(fraction: UOp, low: UOp, low_unit: float, point: int, wide: DType) -> UOp:
    """``(fraction + low·low_unit)·2**-point · π/2`` in ``wide``, rounded about once.

    The leading part ``a`` of the fraction and π/2 are split into halves of at most half the
    mantissa's bits (``a`` by masking its bits, so no contraction into a fused multiply-add can
    spoil the split), so the two products that matter are exact; the rest are small corrections."""
    form = _FORMATS[wide]
    scale = Fraction(_PI / 2) * Fraction(2) ** -point  # π/2 in units of the fraction
    leading = cast(fraction, wide)
    if fraction.dtype.scalar.itemsize * 8 <= form.mantissa_bits:  # float32 in float64: ample bits
        constant_high = float(scale)
        constant_low = float(scale - Fraction(constant_high))
        corrections = add(mul(leading, constant_low), mul(mul(cast(low, wide), low_unit), constant_high))
        return add(mul(leading, constant_high), corrections)
    half_bits = (form.mantissa_bits + 1) // 2
    constant_high = _split(scale, form.mantissa_bits + 1 - half_bits, 1)[0]
    constant_low = float(scale - Fraction(constant_high))
    rest = add(cast(sub(fraction, cast(leading, fraction.dtype)), wide), mul(cast(low, wide), low_unit))
    leading_bits = bitcast(leading, form.integer)
    leading_high = bitcast(bit_and(leading_bits, -(1 << (form.mantissa_bits + 1 - half_bits))), wide)
    leading_low = sub(leading, leading_high)
    corrections = add(mul(leading, constant_low), mul(rest, constant_high + constant_low))
    return add(mul(leading_high, constant_high), add(mul(leading_low, constant_high), corrections))


def _reduce(x: UOp, wide: DType) -> tuple[UOp, UOp]:
    """``x = k·π/2 + r`` for finite ``x``: ``(r in wide, k mod 4 as int32)`` — Cody–Waite while it is
    exact, Payne–Hanek beyond (both computed: the select keeps vector code branch-free)."""
    limit = _REDUCTION_LIMIT[wide]
    r_small, quadrant_small = _cody_waite(cast(x, wide), wide)
    smallest_exponent = int(limit).bit_length() - 1
    r_large, quadrant_large = _payne_hanek(x, wide, smallest_exponent)
    small = less(_absolute(x), 2.0**smallest_exponent)
    return where(small, r_small, r_large), where(small, quadrant_small, quadrant_large)


def _sine_and_cosine(r: UOp) -> tuple[UOp, UOp]:
    """``sin r`` and ``cos r`` for ``|r| <= π/4`` by minimax polynomials of ``r``'s type."""
    dtype = r.dtype.scalar
    t = mul(r, r)
    sine = add(r, mul(mul(r, t), polynomial(t, _SIN[dtype])))
    cosine = add(mul(t, add(mul(t, polynomial(t, _COS[dtype])), -0.5)), 1.0)
    return sine, cosine


def decompose_trigonometric(x: UOp, function: Ops = Ops.SIN, reduce_in: DType | None = None) -> UOp:
    """``sin x``, ``cos x`` or ``tan x`` (``function``): ``x = k·π/2 + r`` exactly, then polynomials
    for sin and cos of ``r`` chosen and signed by the quadrant ``k mod 4`` (cos: ``k + 1``); tan
    divides them (``-cos r / sin r`` in odd quadrants, so no pole is approximated).

    ``reduce_in``: a wider float type (float64 for float32) for the reduction; tan then also
    evaluates in it and rounds once.  inf and nan give nan."""
    dtype = x.dtype.scalar
    not_finite = not_equal(mul(x, 0.0), 0.0)  # x*0 is nan exactly for inf and nan
    finite = where(not_finite, 0.0, x)
    wide = reduce_in or dtype
    r, quadrant = _reduce(finite, wide)
    if function is Ops.COS:
        quadrant = add(quadrant, 1)
    evaluate_in = wide if function is Ops.TAN else dtype
    r = cast(r, evaluate_in)
    r = where(less(r, -1.0), -1.0, where(less(1.0, r), 1.0, r))  # (defensive: |r| <= π/4 + rounding)
    sine, cosine = _sine_and_cosine(r)
    odd = not_equal(bit_and(quadrant, 1), 0)
    if function is Ops.TAN:
        value = cast(where(odd, _divide(cosine, mul(sine, -1.0)), _divide(sine, cosine)), dtype)
    else:
        value = where(odd, cosine, sine)
        value = where(not_equal(bit_and(quadrant, 2), 0), mul(value, -1.0), value)
    return where(not_finite, float("nan"), value)


def _divide(a: UOp, b: UOp) -> UOp:
    return UOp(Ops.DIV, (a, b))


def reduced_in_float64(function: Ops) -> Callable[[UOp], UOp]:
    """The decomposition of ``function`` reducing float32 in float64 (targets that have float64)."""

    def decompose(x: UOp) -> UOp:
        return decompose_trigonometric(
            x, function, dtypes.float64 if x.dtype.scalar is dtypes.float32 else None
        )

    return decompose


def reduced_in_own_type(function: Ops) -> Callable[[UOp], UOp]:
    """The decomposition of ``function`` reducing in the argument's own type."""
    return lambda x: decompose_trigonometric(x, function)


def decompose_sqrt(x: UOp) -> UOp:
    """``sqrt x`` as ``EXP2(0.5·LOG2(x))`` then one Newton step; ``±0`` and ``inf`` pass through."""
    estimate = UOp(Ops.EXP2, (mul(UOp(Ops.LOG2, (x,)), 0.5),))
    refined = mul(add(estimate, mul(x, recip(estimate))), 0.5)
    refined = where(less(x, float("inf")), refined, x)
    return where(not_equal(x, 0.0), refined, x)


def decompose_pow(a: UOp, b: UOp) -> UOp:
    """``a**b`` as ``EXP2(LOG2(|a|)·b)`` with the sign of a negative base for integer ``b``."""
    negative = less(a, 0.0)
    magnitude = where(negative, mul(a, -1.0), a)
    return _signed_power(a, b, negative, UOp(Ops.EXP2, (mul(UOp(Ops.LOG2, (magnitude,)), b),)))


def _signed_power(a: UOp, b: UOp, negative: UOp, result: UOp) -> UOp:
    """``|a|**b`` (``result``) signed for a negative base: ``(-1)**b`` for an integer ``b``, nan
    otherwise; ``b = 0`` or ``a = 1`` give 1."""
    integer = UOp(Ops.CMP_NE, (not_equal(truncate(b), b), const_like(b, True, dtypes.bool)))
    half = mul(b, 0.5)
    odd = not_equal(truncate(half), half)
    signed = where(odd, mul(result, -1.0), result)
    result = where(negative, where(integer, signed, float("nan")), result)
    one = UOp(
        Ops.OR,
        (
            UOp(Ops.CMP_NE, (not_equal(b, 0.0), const_like(b, True, dtypes.bool))),
            UOp(Ops.CMP_NE, (not_equal(a, 1.0), const_like(a, True, dtypes.bool))),
        ),
    )
    return where(one, 1.0, result)


# ---------------------------------------------------------------------------------------------
# Threefry 2x32 on uint32 words


_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = 0x1BD11BDA


# ---------------------------------------------------------------------------------------------
# float64 POW with the exponent to extra precision (double-double arithmetic)


def _upper_half(x: UOp) -> UOp:
    """float64 ``x`` with its lower 27 mantissa bits cleared, by masking (so no contraction into a
    fused multiply-add can spoil the exact products of halves)."""
    return bitcast(bit_and(bitcast(x, dtypes.int64), -(1 << 27)), dtypes.float64)


def _rounded_product(a: UOp, b: UOp | float) -> UOp:
    """``a·b`` rounded, as ``MULACC(a, b, 0)``: a bare MUL that is later added to something would be
    fused into a MULACC on targets with a multiply-add, and the sum would then see the exact
    product where an error-free transformation counts on the rounded one."""
    return UOp(Ops.MULACC, (a, operand(a, b), const_like(a, 0.0)))


def _product_error(p: UOp, a_high: UOp, a_low: UOp, b_high: UOp | float, b_low: UOp | float) -> UOp:
    """``a·b - p`` from the halves of ``a`` and ``b``: their products are exact, the first minus ``p``
    by Sterbenz; the last, of two 27-bit halves, is off by 2**-106 at most."""
    error = add(add(sub(mul(a_high, b_high), p), mul(a_high, b_low)), mul(a_low, b_high))
    return add(error, mul(a_low, b_low))


def _two_product(a: UOp, b: UOp) -> tuple[UOp, UOp]:
    """``a·b`` as ``p + e`` with ``p`` the rounded product and ``e`` its error (Dekker's product).
    ``a`` and ``b`` must not be bare MULs (see :func:`_rounded_product`): ``a - a_high`` would
    be fused into a multiply-add of the exact product."""
    a_high, b_high = _upper_half(a), _upper_half(b)
    p = _rounded_product(a, b)
    return p, _product_error(p, a_high, sub(a, a_high), b_high, sub(b, b_high))


def _two_product_by_constant(a: UOp, constant: float) -> tuple[UOp, UOp]:
    """:func:`_two_product` with the constant split here (to 26 bits) rather than in the kernel."""
    unit = Fraction(2) ** (math.frexp(constant)[1] - 26)
    constant_high = float(Fraction(constant) // unit * unit)
    a_high = _upper_half(a)
    p = _rounded_product(a, constant)
    return p, _product_error(p, a_high, sub(a, a_high), constant_high, constant - constant_high)


def _fast_two_sum(a: UOp, b: UOp) -> tuple[UOp, UOp]:
    """``a + b`` as a rounded sum and its exact error, for ``|a| >= |b|`` (or ``a`` zero)."""
    total = add(a, b)
    return total, sub(b, sub(total, a))


def _two_sum(a: UOp, b: UOp) -> tuple[UOp, UOp]:
    """``a + b`` as a rounded sum and its exact error, for any magnitudes (Knuth's two-sum)."""
    total = add(a, b)
    b_virtual = sub(total, a)
    return total, add(sub(a, sub(total, b_virtual)), sub(b, b_virtual))


def _double(value: Fraction) -> tuple[float, float]:
    """``value`` as a float64 pair ``high + low`` (about 106 bits)."""
    high = float(value)
    return high, float(value - Fraction(high))


# log(1 + f) = 2 atanh(s) = 2s + 2s³/3 + s⁵·Σ 2 s^(2k)/(2k+5), |s| <= 0.1716: the tail after s³ is
# below 1.7e-4 of the whole, so float64 suffices for it; 12 terms leave 1e-18 of it.
_ATANH_TAIL = tuple(2.0 / (2 * k + 5) for k in range(12))
_TWO_THIRDS = _double(Fraction(2, 3))
_INVERSE_LN2_PAIR = _double(1 / _LN2)


def _log2_extended(x: UOp) -> tuple[UOp, UOp]:
    """``log2 x`` of a positive finite float64 as ``high + low`` to about 2**-70 relative.

    As :func:`decompose_log2` (exponent from the bits, mantissa centred on ``[√½, √2)``,
    ``s = f/(2+f)``), with ``s``, the ``2s³/3`` term, the scaling by ``1/ln 2`` and the sum with
    the exponent carried in pairs of floats.  Zero, negatives, inf and nan give garbage; the
    caller selects them away."""
    form = _FORMATS[dtypes.float64]
    small = less(x, form.min_normal)
    scaled = where(small, mul(x, 2.0**64), x)
    bits = bitcast(scaled, form.integer)
    exponent = sub(bit_and(shift_right(bits, form.mantissa_bits), form.exponent_mask), form.bias)
    exponent = sub(exponent, where(small, const_like(bits, 64), const_like(bits, 0)))
    one_bits = form.bias << form.mantissa_bits
    mantissa = bitcast(bit_or(bit_and(bits, form.mantissa_mask), one_bits), form.dtype)
    above = less(const_like(x, 2.0**0.5), mantissa)
    mantissa = where(above, mul(mantissa, 0.5), mantissa)
    exponent = add(exponent, where(above, const_like(bits, 1), const_like(bits, 0)))
    f = sub(mantissa, 1.0)  # exact (Sterbenz)
    denominator, denominator_low = _fast_two_sum(const_like(f, 2.0), f)  # 2 + f exactly, as a pair
    inverse = recip(denominator)
    s = _rounded_product(f, inverse)  # (split below: a bare MUL would be fused into s - s_high)
    product, product_error = _two_product(s, denominator)
    # s's rounding error: (f - s·(2+f)) / (2+f), where f - s·denominator is exact (Sterbenz)
    s_low = mul(sub(sub(sub(f, product), product_error), mul(s, denominator_low)), inverse)
    square, square_error = _two_product(s, s)
    cube, cube_error = _two_product(square, s)
    cube_low = add(add(cube_error, mul(square_error, s)), mul(mul(square, s_low), 3.0))
    third, third_error = _two_product_by_constant(cube, _TWO_THIRDS[0])
    third_low = add(add(third_error, mul(cube, _TWO_THIRDS[1])), mul(cube_low, _TWO_THIRDS[0]))
    tail = mul(mul(cube, square), polynomial(square, _ATANH_TAIL))
    twice = mul(s, 2.0)  # exact
    natural, natural_low = _fast_two_sum(twice, third)
    natural_low = add(natural_low, add(add(mul(s_low, 2.0), third_low), tail))
    natural, natural_low = _fast_two_sum(natural, natural_low)
    scaled_log, scaled_error = _two_product_by_constant(natural, _INVERSE_LN2_PAIR[0])
    scaled_low = add(scaled_error, mul(natural, _INVERSE_LN2_PAIR[1]))
    scaled_low = add(scaled_low, mul(natural_low, _INVERSE_LN2_PAIR[0]))
    high, low = _two_sum(cast(exponent, form.dtype), scaled_log)
    return high, add(low, scaled_low)


def decompose_pow_extended(a: UOp, b: UOp) -> UOp:
    """float64 ``a**b`` as ``EXP2(t)·(1 + d·ln 2)``, where ``t + d = b·log2|a|`` to about 2**-70
    relative (:func:`_log2_extended`, Dekker's product): a bare ``EXP2(LOG2(|a|)·b)`` carries
    ``t``'s rounding into the result's exponent (745 ulp at ``1.3e-107 ** 2.86``, where ``t`` is
    near -1016).  Signs and special values as :func:`decompose_pow`."""
    negative = less(a, 0.0)
    magnitude = where(negative, mul(a, -1.0), a)
    log_high, log_low = _log2_extended(magnitude)
    ordinary = UOp(Ops.AND, (less(0.0, magnitude), less(magnitude, float("inf"))))
    log_high = where(ordinary, log_high, UOp(Ops.LOG2, (magnitude,)))  # 0, inf, nan: LOG2's answers
    t, t_error = _two_product(b, log_high)
    t_error = add(t_error, mul(b, log_low))
    # beyond |t| = 1100 the result is 0 or inf (and t_error may be nan, from inf or overflow)
    t_error = where(UOp(Ops.AND, (ordinary, less(_absolute(t), 1100.0))), t_error, 0.0)
    result = mul(UOp(Ops.EXP2, (t,)), add(mul(t_error, float(_LN2)), 1.0))
    return _signed_power(a, b, negative, result)


def pow_in(a: UOp, b: UOp, wide: DType) -> UOp | None:
    """POW of float16, bfloat16 and float32 computed in ``wide`` and rounded once (in float64,
    ``b·log2 a`` keeps its digits: the exponent's rounding made float32 pow 114 ulp off);
    float64 in float64."""
    scalar = a.dtype.scalar
    if scalar is dtypes.float64:
        return decompose_pow_extended(a, b)
    if scalar not in (dtypes.float16, dtypes.bfloat16, dtypes.float32):
        return None
    return cast(decompose_pow(cast(a, wide), cast(b, wide)), scalar)


def decompose_threefry(x: UOp, key: UOp) -> UOp:
    """Threefry-2x32-20 of uint64 counters under uint64 keys, on uint32 ADD/SHL/SHR/OR/XOR."""

    def low(v: UOp) -> UOp:
        return cast(bit_and(v, 0xFFFFFFFF), dtypes.uint32)

    def high(v: UOp) -> UOp:
        return cast(shift_right(v, 32), dtypes.uint32)

    def rotate(v: UOp, amount: int) -> UOp:
        return bit_or(shift_left(v, amount), shift_right(v, 32 - amount))

    k0, k1 = low(key), high(key)
    schedule = (k0, k1, UOp(Ops.XOR, (UOp(Ops.XOR, (k0, k1)), const_like(k0, _PARITY))))
    x0, x1 = add(low(x), schedule[0]), add(high(x), schedule[1])
    for group in range(5):
        for amount in _ROTATIONS[group % 2]:
            x0 = add(x0, x1)
            x1 = UOp(Ops.XOR, (rotate(x1, amount), x0))
        x0 = add(x0, schedule[(group + 1) % 3])
        x1 = add(add(x1, schedule[(group + 2) % 3]), group + 1)
    return bit_or(shift_left(cast(x1, dtypes.uint64), 32), cast(x0, dtypes.uint64))
