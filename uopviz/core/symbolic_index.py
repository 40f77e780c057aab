"""The simplifier's range-based rules on index arithmetic: floor division and modulo by positive
constants (:data:`index_arithmetic`) and comparisons decided by value ranges or moved across
constants (:data:`comparison_folding`).  :mod:`uopviz.core.symbolic` joins them with the other
rule groups into the simplifier.
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple

from uopviz.core.dtype import DType, dtypes
from uopviz.core.ops import Ops
from uopviz.core.rewrite import PatternMatcher, UPat
from uopviz.core.symbolic_bounds import bounds, constant_value, is_scalar_int, wrapped_const
from uopviz.core.symbolic_terms import build_sum, exact_terms, fits_in, linear_terms, sum_interval
from uopviz.core.uop import UOp

__all__ = ["comparison_folding", "index_arithmetic"]

_X = UPat.var("x")
_C = UPat.cvar("c")


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
        interval = sum_interval(remainder_terms, constant_remainder)
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
    interval = sum_interval(coefficients, constant)
    return interval is not None and fits_in(dtype, *interval)


def _positive_divisor(d: UOp) -> int | None:
    value = d.arg[0]
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 1 else None


def _drop_small_remainder(
    dtype: DType, coefficients: dict[UOp, int], constant: int, divisor: int
) -> UOp | None:
    """``(g*S + R) // (g*q) → S // q`` when ``0 <= R < g`` (R never carries into S): a grouped
    conv's input channel ``(o*32 + lane) // 64`` is ``o // 2`` for the 32 lanes of a register tile.
    ``g`` is the divisor's common factor with some coefficient, below the divisor (at the divisor
    itself :func:`_split_by_divisor` folds)."""
    for g in sorted({math.gcd(divisor, c) for c in coefficients.values()} - {1, divisor}, reverse=True):
        large = {b: c // g for b, c in coefficients.items() if c % g == 0}
        small = {b: c for b, c in coefficients.items() if c % g != 0}
        interval = sum_interval(small, constant)
        if not large or interval is None or interval[0] < 0 or interval[1] >= g:
            continue
        if not _sum_fits(dtype, large, 0):
            continue
        return UOp(Ops.IDIV, (build_sum(dtype, large, 0), wrapped_const(dtype, divisor // g)))
    return None


def _fold_idiv(x: UOp, n: UOp, d: UOp) -> UOp | None:
    """Floor division of an integer sum by a constant ``d > 1``."""
    divisor = _positive_divisor(d)
    if divisor is None or not is_scalar_int(x):
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
        if fits_in(dtype, product, product):
            return UOp(Ops.IDIV, (n.src[0], wrapped_const(dtype, product)))
    if (
        n.op is Ops.MOD
        and n.src[1].op is Ops.CONST
        and isinstance(n.src[1].arg[0], int)
        and n.src[1].arg[0] > 0
        and n.src[1].arg[0] % divisor == 0
    ):
        # (y % (a*b)) // a → (y // a) % b
        return UOp(Ops.MOD, (UOp(Ops.IDIV, (n.src[0], d)), wrapped_const(dtype, n.src[1].arg[0] // divisor)))
    exact = exact_terms(n)
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
            inner = exact_terms(base.src[0])
            if inner is not None and fits_in(dtype, a * divisor, a * divisor):
                inner_coefficients, inner_constant = inner
                interval = sum_interval(inner_coefficients, inner_constant + constant * a)
                if interval is not None and fits_in(dtype, *interval):
                    numerator = build_sum(dtype, inner_coefficients, inner_constant + constant * a)
                    return UOp(Ops.IDIV, (numerator, wrapped_const(dtype, a * divisor)))
    split = _split_by_divisor(coefficients, constant, divisor)
    if split is not None:
        # the remainder part lies in one block m: n // d == quotient + m
        return build_sum(dtype, split.quotient, split.quotient_constant + split.block)
    dropped = _drop_small_remainder(dtype, coefficients, constant, divisor)
    if dropped is not None:
        return dropped
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
        return UOp(Ops.IDIV, (reduced, wrapped_const(dtype, divisor // common)))
    return None


def _fold_mod(x: UOp, n: UOp, d: UOp) -> UOp | None:
    """Modulo of an integer sum by a constant ``d > 1``."""
    divisor = _positive_divisor(d)
    if divisor is None or not is_scalar_int(x):
        return None
    dtype = x.dtype
    block = _block_of(bounds(n), divisor)
    if block is not None:
        # every value of n lies in [m*d, m*d + d - 1]: n % d == n - m*d (in [0, d), so no wrap)
        if block == 0:
            return n
        coefficients, constant = linear_terms(n)
        return build_sum(dtype, coefficients, constant - block * divisor)
    if (
        n.op is Ops.MOD
        and n.src[1].op is Ops.CONST
        and isinstance(n.src[1].arg[0], int)
        and n.src[1].arg[0] > 0
        and n.src[1].arg[0] % divisor == 0
    ):
        return UOp(Ops.MOD, (n.src[0], d))  # (y % (k*d)) % d → y % d
    exact = exact_terms(n)
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
    if sum_interval(reduced, constant) is None:
        return None
    split = _split_by_divisor(reduced, constant, divisor)
    if split is not None:
        # n ≡ R (mod d) and R lies in one block m: n % d == R - m*d
        return build_sum(dtype, split.remainder, split.remainder_constant - split.block * divisor)
    interval = sum_interval(reduced, constant)
    if not fits_in(dtype, *interval):
        return None
    new_numerator = build_sum(dtype, reduced, constant)
    if new_numerator is not n:
        return UOp(Ops.MOD, (new_numerator, d))
    common = math.gcd(divisor, *reduced.values())
    if common > 1 and reduced:
        # (g*S + k) % (g*d') → g*((S + k//g) % d') + k%g
        inner = {b: c // common for b, c in reduced.items()}
        inner_split = _split_by_divisor(inner, constant // common, divisor // common)
        if inner_split is not None:  # the inner modulo folds away
            folded = {b: c * common for b, c in inner_split.remainder.items()}
            return build_sum(
                dtype,
                folded,
                (inner_split.remainder_constant - inner_split.block * (divisor // common)) * common
                + constant % common,
            )
        # else the inner modulo stays, the small constant comes out of it: the lanes of a vector,
        # ``(8*c + lane) % 16`` for lanes 0..7, become one base ``8*(c % 2)`` plus the lane, a
        # contiguous load instead of a gather (a conv's weights blocked by 16 read 8 channels at a
        # time: AlexNet's 13-wide convs on C, 2x LLVM's time with the gather)
        quotient_terms = build_sum(dtype, inner, constant // common)
        rest = UOp(Ops.MOD, (quotient_terms, wrapped_const(dtype, divisor // common)))
        return build_sum(dtype, {rest: common}, constant % common)
    return None


def _reduce_coefficient(c: int, divisor: int) -> int:
    if -divisor < c < divisor:
        return c
    r = c % divisor
    return r - divisor if divisor - r < r else r


def _mod_below_divisor(x: UOp, y: UOp) -> UOp | None:
    """``x % y → x`` when ``0 <= x < y`` for every value (a non-constant divisor)."""
    if not is_scalar_int(x):
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
    if not is_scalar_int(n) or x.shape != ():
        return None
    dtype = n.dtype
    if (
        n.op is Ops.IDIV
        and n.src[1].op is Ops.CONST
        and isinstance(n.src[1].arg[0], int)
        and n.src[1].arg[0] > 0
    ):
        # y // d < c ⟺ y < c*d (floor division, d > 0)
        limit = constant_value(c) * n.src[1].arg[0]
        if fits_in(dtype, limit, limit):
            return UOp(Ops.CMP_LT, (n.src[0], wrapped_const(dtype, limit)))
    exact = exact_terms(n)
    if exact is None or not exact[0]:
        return None
    coefficients, constant = exact
    limit = constant_value(c) - constant  # sum(terms) < limit
    if len(coefficients) == 1:
        ((base, coefficient),) = coefficients.items()
        if coefficient > 0:
            bound = _ceil_div(limit, coefficient)
            if (coefficient != 1 or constant != 0) and fits_in(dtype, bound, bound):
                return UOp(Ops.CMP_LT, (base, wrapped_const(dtype, bound)))
        elif coefficient < 0:
            # -a*b < limit ⟺ b > -limit/a ⟺ floor(limit / coefficient) < b
            bound = limit // coefficient
            if fits_in(dtype, bound, bound):
                return UOp(Ops.CMP_LT, (wrapped_const(dtype, bound), base))
        return None
    common = math.gcd(*coefficients.values())
    if common > 1:
        bound = _ceil_div(limit, common)
        if fits_in(dtype, bound, bound) and _sum_fits(
            dtype, {b: v // common for b, v in coefficients.items()}, 0
        ):
            return UOp(
                Ops.CMP_LT,
                (
                    build_sum(dtype, {b: v // common for b, v in coefficients.items()}, 0),
                    wrapped_const(dtype, bound),
                ),
            )
    if constant != 0 and fits_in(dtype, limit, limit) and _sum_fits(dtype, coefficients, 0):
        return UOp(Ops.CMP_LT, (build_sum(dtype, coefficients, 0), wrapped_const(dtype, limit)))
    large = {b: v for b, v in coefficients.items() if abs(v) > 1}
    if large and len(large) < len(coefficients):
        factor = math.gcd(*large.values())
        small = {b: v for b, v in coefficients.items() if abs(v) <= 1}
        interval = sum_interval(small, 0)
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
                    wrapped_const(dtype, limit // factor),
                ),
            )
    return None


def _fold_constant_less_than(x: UOp, c: UOp, n: UOp) -> UOp | None:
    """``c < y*a + k → (c-k) // a < y`` for ``a > 0``."""
    if not is_scalar_int(n) or x.shape != ():
        return None
    exact = exact_terms(n)
    if exact is None or len(exact[0]) != 1:
        return None
    ((base, coefficient),) = exact[0].items()
    if coefficient <= 0 or (coefficient == 1 and exact[1] == 0):
        return None
    bound = (constant_value(c) - exact[1]) // coefficient
    return UOp(Ops.CMP_LT, (wrapped_const(n.dtype, bound), base)) if fits_in(n.dtype, bound, bound) else None


def _fold_equality_with_constant(x: UOp, n: UOp, c: UOp) -> UOp | None:
    """``y*a + k != c → y != (c-k)/a`` (or True when ``a`` does not divide ``c-k``); same for ==."""
    if not is_scalar_int(n) or x.shape != ():
        return None
    exact = exact_terms(n)
    if exact is None or len(exact[0]) != 1:
        return None
    ((base, coefficient),) = exact[0].items()
    if coefficient == 1 and exact[1] == 0:
        return None
    difference = constant_value(c) - exact[1]
    if difference % coefficient:
        return UOp.const(dtypes.bool, x.op is Ops.CMP_NE)
    target = difference // coefficient
    return UOp(x.op, (base, wrapped_const(n.dtype, target))) if fits_in(n.dtype, target, target) else None


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
