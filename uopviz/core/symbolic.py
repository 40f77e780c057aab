"""The simplifier: rewrite rules over scalar (shape ``()``) UOps that every later pass relies on.

``simplify(u)`` runs :data:`symbolic` to a fixed point.  The rules come in named groups, each a
:class:`PatternMatcher` of its own (their names show in the rewrite trace):

- :data:`constant_folding` — an op whose operands are all constants becomes a constant, computed
  by :func:`uopviz.core.alu.exec_alu` with the dtype's exact semantics; an integer or bool op
  whose value range collapses to one value becomes that constant; EXP and LOG of a constant are
  written out as Instruction Selection writes them (:mod:`uopviz.core.exp_log`), then folded.
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
- :data:`reduce_collapse` — a kernel's ``REDUCE(ADD)`` that counts the points of a range where
  bounds on it hold (the spec's ``arange``, a windowed prefix sum of a constant) becomes the count
  in closed form (:mod:`uopviz.core.symbolic_reduce`).

Integer rewrites are exact under the dtype's wraparound: sums, products and differences are
exact modulo 2**bits, so they are rearranged freely; division, modulo, comparisons and max are
only rewritten when the ranges prove the arithmetic inside them does not wrap.  Float rewrites
are only the exact ones (``x*1``, ``x-0``, ``x + -0.0``, ``--x``, ``where``/``max`` identities).

``bounds(u)`` refines the spec's ``min_max`` table (which gives MOD, IDIV, AND, SHR, SUB and NEG
the whole dtype range) and is what the range-based rules use.

This module holds constant folding, the algebraic identities, the canonical form and the simplifier
that joins every group; the range-based groups on index arithmetic and comparisons live in
:mod:`uopviz.core.symbolic_index`, ``bounds`` in :mod:`uopviz.core.symbolic_bounds` and the integer
sums as terms (``order_key``, ``build_sum``) in :mod:`uopviz.core.symbolic_terms`; the public names
of all three are re-exported here.
"""

from __future__ import annotations

import math
from typing import Any

from uopviz.core.alu import ALUError, bitcast_value, exec_alu
from uopviz.core.dtype import DType, DTypeKind, dtypes
from uopviz.core.exp_log import DECOMPOSE_NATURAL
from uopviz.core.ops import GroupOp, Ops
from uopviz.core.rewrite import PatternMatcher, UPat, graph_rewrite
from uopviz.core.symbolic_bounds import bounds, constant_value, is_scalar_bool, is_scalar_int, wrapped_const
from uopviz.core.symbolic_index import comparison_folding, index_arithmetic
from uopviz.core.symbolic_reduce import reduce_collapse
from uopviz.core.symbolic_terms import (
    build_sum,
    fits_in,
    is_single_term,
    linear_terms,
    order_key,
    recombine_divmod,
)
from uopviz.core.uop import UOp

__all__ = [
    "algebraic_identities",
    "bounds",
    "canonical_form",
    "comparison_folding",
    "constant_folding",
    "index_arithmetic",
    "order_key",
    "reduce_collapse",
    "simplify",
    "symbolic",
]

# ---------------------------------------------------------------------------------------------
# constant folding


def _fold_constants(x: UOp) -> UOp | None:
    try:
        value = exec_alu(x.op, x.dtype, [s.arg[0] for s in x.src])
    except ALUError:
        return None
    return UOp.const(x.dtype, value)


def _fold_natural(x: UOp) -> UOp:
    """EXP / LOG of a constant: written out as the UOps Instruction Selection gives it (which fold in
    turn; float16 and bfloat16 in float32), so that the constant is the value the kernel would have
    computed, to the bit."""
    value = x.src[0]
    if value.dtype in (dtypes.float32, dtypes.float64):
        return DECOMPOSE_NATURAL[x.op](value)
    return DECOMPOSE_NATURAL[x.op](value.cast(dtypes.float32)).cast(value.dtype)


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
        (UPat((Ops.EXP, Ops.LOG), src=(UPat(Ops.CONST),), name="x"),
         _fold_natural, "fold EXP/LOG of a constant through its decomposition"),
        (UPat(GroupOp.ELEMENTWISE, src=UPat(Ops.CONST), name="x"),
         _fold_constants, "fold constant operands (exec_alu)"),
        (UPat(Ops.BITCAST, src=(UPat.cvar("c"),), name="x"), _fold_bitcast, "fold BITCAST of a constant"),
        (UPat(GroupOp.ELEMENTWISE, name="x"), _fold_by_range, "fold an op whose range is one value"),
    ],
    name="constant folding",
)


# ---------------------------------------------------------------------------------------------
# algebraic identities


def _is_negative_zero(value: Any) -> bool:
    return isinstance(value, float) and value == 0.0 and math.copysign(1.0, value) < 0


def _zero_like(x: UOp) -> UOp | None:
    return UOp.const(x.dtype, 0) if x.shape == () and x.dtype.count == 1 else None


def _add_zero(x: UOp, c: UOp) -> UOp | None:
    value = constant_value(c)
    if value != 0:
        return None
    # for floats only -0.0 is an identity of addition: (-0.0) + (+0.0) is +0.0
    return x if not x.dtype.is_float or _is_negative_zero(value) else None


def _sub_zero(x: UOp, c: UOp) -> UOp | None:
    value = constant_value(c)
    if value != 0:
        return None
    return x if not x.dtype.is_float or not _is_negative_zero(value) else None


def _int_or_bool(x: UOp) -> bool:
    return x.dtype.count == 1 and x.dtype.kind is not DTypeKind.FLOAT


def _all_ones(dtype: DType) -> int:
    return dtype.max if dtype.is_unsigned else -1


def _and_mask(x: UOp, c: UOp) -> UOp | None:
    """``x & (2**k - 1)`` is ``x`` when ``0 <= x < 2**k``; ``x & all-ones`` is ``x``."""
    mask = constant_value(c)
    if not is_scalar_int(x):
        return None
    if mask == _all_ones(x.dtype):
        return x
    low, high = bounds(x)
    if mask >= 0 and (mask + 1) & mask == 0 and 0 <= low and high <= mask:
        return x
    return None


def _max_by_range(x: UOp, y: UOp) -> UOp | None:
    if not is_scalar_int(x):
        return None
    (a, big_a), (b, big_b) = bounds(x), bounds(y)
    if a >= big_b:
        return x
    if big_a <= b:
        return y
    return None


def _idiv_self(x: UOp) -> UOp | None:
    low, high = bounds(x)
    return UOp.const(x.dtype, 1) if is_scalar_int(x) and (low > 0 or high < 0) else None


def _cast_of_cast(x: UOp, inner: UOp, outer: UOp) -> UOp | None:
    """``CAST(CAST(x, a), b) → CAST(x, b)`` when ``a`` holds every value of the integer/bool ``x``."""
    middle = inner.dtype
    if x.dtype.count != 1 or x.dtype.is_float or not (middle.is_int or middle.is_bool):
        return None
    low, high = bounds(x)
    if middle.is_bool:
        if not x.dtype.is_bool:
            return None
    elif not fits_in(middle, int(low), int(high)):
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
            lambda x, s: _zero_like(s) if is_scalar_int(x) else None,
            "x - x → 0 (integers)",
        ),
        (UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(_X,)),)), lambda x: x, "-(-x) → x"),
        (UPat(Ops.NOT, src=(UPat(Ops.NOT, src=(_X,)),)), lambda x: x, "not not x → x"),
        # -- division and modulo by ±1 and by itself --------------------------------------------------
        (UPat(Ops.IDIV, src=(_X, UPat.const(None, 1))), lambda x: x, "x // 1 → x"),
        (UPat(Ops.IDIV, src=(_X, UPat.const(None, -1))), lambda x: UOp(Ops.NEG, (x,)), "x // -1 → -x"),
        (
            UPat(Ops.MOD, src=(_X, UPat.cvar("c")), name="m"),
            lambda x, c, m: _zero_like(m) if constant_value(c) in (1, -1) else None,
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
            lambda c, a, b, w: (
                (a if constant_value(c) else b) if _same_shape(w, a if constant_value(c) else b) else None
            ),
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
            lambda c, a, b: UOp(Ops.WHERE, (c, b, a)) if is_scalar_bool(c) else None,
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
            lambda x, c: _zero_like(c) if is_scalar_int(x) else None,
            "x & 0 → 0",
        ),
        (
            UPat((Ops.OR, Ops.XOR), src=(_X, UPat.const(None, 0))),
            lambda x: x if is_scalar_int(x) else None,
            "x | 0 → x, x ^ 0 → x",
        ),
        (UPat(Ops.AND, src=(_X, _C)), _and_mask, "x & mask → x (x within the mask)"),
        (
            UPat(Ops.OR, src=(_X, _C)),
            lambda x, c: (
                c if is_scalar_int(x) and constant_value(c) == _all_ones(x.dtype) and x.shape == () else None
            ),
            "x | all-ones → all-ones",
        ),
        (UPat((Ops.SHL, Ops.SHR), src=(_X, UPat.const(None, 0))), lambda x: x, "x << 0 → x, x >> 0 → x"),
        (
            UPat(Ops.NOT, src=(UPat(Ops.XOR, src=(_X, UPat.cvar("c"))),)),
            lambda x, c: (
                UOp(Ops.XOR, (x, wrapped_const(x.dtype, ~constant_value(c)))) if is_scalar_int(x) else None
            ),
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
    if a.op is Ops.CONST or b.op is Ops.CONST or a is b or (x.op is Ops.ADD and is_scalar_int(x)):
        return None  # integer sums have their own order (the canonical sum)
    return UOp(x.op, (b, a), x.arg) if order_key(b) < order_key(a) else None


def _canonical_sum(x: UOp) -> UOp | None:
    """Flatten an integer ADD/SUB/NEG chain into terms, combine like terms (``x*c1 + x*c2``,
    ``x + x``, ``x - x``), recombine ``(y%d)*m + (y//d)*d*m → y*m`` and rebuild it sorted with the
    constant last."""
    if not is_scalar_int(x) or x.__dict__.get("_canonical_sum"):
        return None
    coefficients, constant = linear_terms(x)
    constant += recombine_divmod(coefficients) or 0
    result = build_sum(x.dtype, coefficients, constant)
    if result is x:
        # noted on the UOp (a pure function of its structure): each simplification of a kernel walks
        # the same sums again (once per opt applied, per lane address), and most are canonical already
        x.__dict__["_canonical_sum"] = True
        return None
    return result


def _scale_single_term(x: UOp, s: UOp, c: UOp) -> UOp | None:
    """``(y*c1 + k) * c2 → y*(c1*c2) + k*c2`` and ``(-y) * c → y * -c``: a constant multiple of one
    term folds into its coefficient."""
    if not is_scalar_int(x) or s.op not in (Ops.ADD, Ops.SUB, Ops.NEG, Ops.MUL) or not is_single_term(s):
        return None
    coefficients, constant = linear_terms(s)
    factor = constant_value(c)
    return build_sum(x.dtype, {b: v * factor for b, v in coefficients.items()}, constant * factor)


def _constant_out_of_product(x: UOp, c: UOp, y: UOp) -> UOp | None:
    """``(x*c)*y → (x*y)*c`` (integers): constants gather at the top of a product."""
    if not is_scalar_int(x) or y.op is Ops.CONST:
        return None
    return UOp(Ops.MUL, (UOp(Ops.MUL, (x, y)), c))


def _reassociate(x: UOp, c1: UOp, c2: UOp, outer: UOp) -> UOp | None:
    """``(x op c1) op c2 → x op (c1 op c2)`` for MAX, AND, OR, XOR on integers and bools."""
    if x.dtype.count != 1 or x.dtype.is_float:
        return None
    try:
        value = exec_alu(outer.op, outer.dtype, (constant_value(c1), constant_value(c2)))
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
# the simplifier


symbolic = PatternMatcher(
    constant_folding.rules
    + algebraic_identities.rules
    + canonical_form.rules
    + index_arithmetic.rules
    + comparison_folding.rules
    + reduce_collapse.rules,
    name="symbolic",
)


def simplify(uop: UOp) -> UOp:
    """``uop`` rewritten by :data:`symbolic` until no rule applies (shape-``()`` graphs)."""
    return graph_rewrite(uop, symbolic, name="symbolic")
