"""The natural exponential and logarithm, ``EXP`` and ``LOG``, written as UOps of the dialect's ops.

``Tensor.exp()`` and ``Tensor.log()`` build one ``EXP`` / ``LOG`` node, so the graph a student reads
keeps the op they wrote through Callify, Rangeify, Optimize and Expand; Instruction Selection
replaces it by the UOps built here (its rules "decompose exp" and "decompose log",
:mod:`uopviz.passes.isel`), and the simplifier folds an ``EXP`` / ``LOG`` of a constant through the
same UOps (:mod:`uopviz.core.symbolic`), so a constant gets exactly the value the kernel would
compute.

``exp`` corrects ``exp2(x·log2 e)`` for the rounding of its argument: ``exp2(t)·(1 + d·ln 2)``
with ``t = x·log2 e`` rounded and ``d`` its rounding error, recovered exactly by splitting ``x``
and ``log2 e`` into halves (a bare ``exp2(x·log2 e)`` carries the product's rounding into the
exponent: 62 ulp near the float32 overflow).  ``log`` is ``log2(x)·ln 2``.  Both work on float32
and float64 scalars or vectors (float16 and bfloat16 are computed in float32 by their callers).
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import cache

from uopviz.core.dtype import DType, dtypes
from uopviz.core.ops import Ops
from uopviz.core.symbolic_terms import order_key
from uopviz.core.uop import UOp

LOG2_E = math.log2(math.e)
LN_2 = math.log(2.0)

# log2(e) = 1/ln 2 to 52 digits (a double's math.log2(math.e) is off by 2**-53: 85 ulp in exp(-685))
LOG2_E_EXACT = Fraction("1.442695040888963407359924681001892137426645954152985934")


def with_lanes(dtype: DType, x) -> DType:
    """``dtype`` with as many lanes as ``x`` has (a Tensor or a scalar UOp: ``dtype`` itself)."""
    count = x.dtype.count
    return dtype if count == 1 else dtype.vec(count)


def _masked(x, mask_float32: int, mask_float64: int):
    """``x`` (a float32 / float64 Tensor or UOp) with its bits ANDed with the mask of its type."""
    wide = x.dtype.scalar is dtypes.float64
    bits, float_type = (dtypes.int64, dtypes.float64) if wide else (dtypes.int32, dtypes.float32)
    masked = x.bitcast(with_lanes(bits, x)) & (mask_float64 if wide else mask_float32)
    return masked.bitcast(with_lanes(float_type, x))


def upper_half(x):
    """``x`` (a float32 / float64 Tensor or UOp) with the lower half of its mantissa bits cleared,
    by masking (so that no fused multiply-add can spoil the exact products of halves)."""
    return _masked(x, -(1 << 12), -(1 << 27))


def magnitude(x):
    """``|x|`` by clearing the sign bit: one AND on every backend, where ``abs``'s ``max(x, -x)``
    with NaN kept is a compare, an or and a blend of bits in C (GCC: 5 instructions of exp's 48
    per vector, LLVM's 39)."""
    return _masked(x, (1 << 31) - 1, (1 << 63) - 1)


def _log2_e_halves(wide: bool) -> tuple[float, float]:
    """log2 e as a float of half the mantissa's bits plus the rest (the sum: log2 e to ~2**-80)."""
    bits = 27 if wide else 12  # the low bits cleared: halves of 26 / 12 significant bits
    scale = Fraction(2) ** (math.floor(math.log2(LOG2_E)) - (52 if wide else 23) + bits)
    high = math.floor(LOG2_E_EXACT / scale) * scale
    return float(high), float(LOG2_E_EXACT - high)


def _ordered(op: Ops, a: UOp, b: UOp) -> UOp:
    """``op(a, b)`` of a commutative op with its operands in the simplifier's canonical order
    (a constant on the right, else by ``order_key``), the order the kernel's other ops are in when
    Instruction Selection writes EXP out: the code generated for it then follows the same order."""
    if a.op is Ops.CONST and b.op is not Ops.CONST:
        return UOp(op, (b, a))
    if b.op is not Ops.CONST and a is not b and order_key(b) < order_key(a):
        return UOp(op, (b, a))
    return UOp(op, (a, b))


def decompose_exp(x: UOp) -> UOp:
    """``EXP(x)`` as ``EXP2(t)·(1 + d·ln 2)`` (see the module docstring); ``x`` float32 or float64."""
    wide = x.dtype.scalar is dtypes.float64
    log2_e_high, log2_e_low = _log2_e_halves(wide)
    t = x * LOG2_E
    x_high = upper_half(x)
    x_low = x - x_high
    # t's rounding error: the products of halves are exact, x_high·log2_e_high - t by Sterbenz
    error = _ordered(Ops.ADD, x_high * log2_e_high - t, x_high * log2_e_low)
    error = _ordered(Ops.ADD, _ordered(Ops.ADD, error, x_low * log2_e_high), x_low * log2_e_low)
    # beyond, exp is 0 or inf (t may be inf)
    error = (magnitude(x) < (1500 if wide else 200)).where(error, 0)
    # (a t rounded up to the overflow threshold has an exact value past the largest float too)
    return _ordered(Ops.MUL, UOp(Ops.EXP2, (t,)), _ordered(Ops.ADD, error * LN_2, error._operand(1)))


def decompose_log(x: UOp) -> UOp:
    """``LOG(x)`` as ``LOG2(x)·ln 2``; ``x`` float32 or float64."""
    return UOp(Ops.LOG2, (x,)) * LN_2


#: EXP and LOG → the function that writes them in the dialect's other ops
DECOMPOSE_NATURAL = {Ops.EXP: decompose_exp, Ops.LOG: decompose_log}


@cache
def expanded_ops(op: Ops, dtype: DType) -> tuple[UOp, ...]:
    """The UOps (constants left out) an ``op`` (EXP or LOG) of a ``dtype`` value becomes, in
    topological order: what the heuristic and the FLOP count charge for one such node."""
    placeholder = UOp.param(0, (), dtype.scalar)
    value = placeholder if dtype.count == 1 else UOp(Ops.VECTORIZE, (placeholder,) * dtype.count)
    inside = set(value.toposort())
    expanded = DECOMPOSE_NATURAL[op](value)
    return tuple(u for u in expanded.toposort() if u not in inside and u.op not in (Ops.CONST, Ops.VECTORIZE))


__all__ = ["DECOMPOSE_NATURAL", "LN_2", "LOG2_E", "LOG2_E_EXACT", "decompose_exp", "decompose_log",
           "expanded_ops", "magnitude", "upper_half", "with_lanes"]
