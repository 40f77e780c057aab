"""Scalar math on UOps for the kernels of NNEF operations.

The element types of SkriptND (:func:`uop_dtype`), constants and type promotion of mixed operands,
the math functions the UOp dialect has no op for (``exp`` and ``log`` through EXP2/LOG2, ``erf``,
``atan``, the hyperbolic functions, ...), :class:`KernelScalarOps` (the scalar operations of the
expression evaluator on UOps), flat row-major offsets of an index tuple, the accumulations of the
lowering operators (``+= *= &= |= <?= >?=``: identity, combination and REDUCE), and the gating of
the loads of a value (a built kernel is tidied by Rangeify's
:func:`~uopviz.passes.rangeify.finish_kernel`). Nothing here knows about graphs or operations.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from uopviz.core.dtype import DType, dtypes
from uopviz.core.ops import Ops
from uopviz.core.uop import UOp
from uopviz.nnef.errors import NNEFError
from uopviz.nnef.evaluation.scalar_ops import PythonScalarOps
from uopviz.nnef.evaluation.values import BoundedIndex, DynamicExtent, RuntimeScalar, type_name_of
from uopviz.nnef.syntax import ast

INDEX = dtypes.index
UOP_TYPES = {"real": dtypes.float32, "int": dtypes.int32, "bool": dtypes.bool}
_LOG2E = 1.4426950408889634
_LN2 = 0.6931471805599453


def uop_dtype(type_name: str) -> DType:
    """The UOp dtype of a SkriptND element type."""
    try:
        return UOP_TYPES[type_name]
    except KeyError:
        raise NNEFError(f"tensors of type '{type_name}' cannot be computed by kernels") from None


# ------------------------------------------------------------------------------------------------
# scalar UOp helpers


def uop_constant(dtype: DType, value: Any) -> UOp:
    """A CONST of ``dtype`` holding ``value``."""
    return UOp.const(dtype, value)


def _rank_of(dtype: DType) -> int:
    if dtype.is_bool:
        return 0
    if dtype is INDEX:
        return 2
    if dtype.is_float:
        return 3
    return 1


def promote(a: UOp, b: UOp) -> tuple[UOp, UOp]:
    """Both operands in one dtype: bool < int32 < index < float32."""
    if a.dtype == b.dtype:
        return a, b
    target = a.dtype if _rank_of(a.dtype) >= _rank_of(b.dtype) else b.dtype
    return a.cast(target), b.cast(target)


def lift(value: Any, like: UOp) -> tuple[UOp, UOp]:
    """A Python value as a CONST next to the UOp ``like`` (``like`` cast to float for a real)."""
    if isinstance(value, bool):
        if like.dtype.is_bool:
            return uop_constant(dtypes.bool, value), like
        return uop_constant(like.dtype, int(value)), like
    if isinstance(value, float) and not like.dtype.is_float:
        return uop_constant(dtypes.float32, value), like.cast(dtypes.float32)
    if isinstance(value, int | float):
        if like.dtype.is_bool:
            return uop_constant(dtypes.int32, int(value)), like.cast(dtypes.int32)
        return uop_constant(like.dtype, value), like
    raise NNEFError(f"a {type_name_of(value)} value cannot take part in a kernel computation")


def operands(a: Any, b: Any) -> tuple[UOp, UOp]:
    """Two operands of a binary operation as UOps of one dtype (a Python value takes the other's type)."""
    if isinstance(a, UOp) and isinstance(b, UOp):
        return promote(a, b)
    if isinstance(a, UOp):
        constant, a = lift(b, a)
        return a, constant
    constant, b = lift(a, b)
    return constant, b


def as_uop(value: Any, dtype: DType | None = None) -> UOp:
    """A value (UOp or Python scalar) as a UOp, cast to ``dtype`` when given."""
    if isinstance(value, UOp):
        return value if dtype is None else value.cast(dtype)
    if dtype is None:
        dtype = {bool: dtypes.bool, int: dtypes.int32, float: dtypes.float32}[type(value)]
    return uop_constant(dtype, value)


def as_index(value: Any) -> UOp:
    """``value`` (a UOp or a Python int) as an index UOp."""
    return value.cast(INDEX) if isinstance(value, UOp) else uop_constant(INDEX, int(value))


def select(condition: Any, a: Any, b: Any) -> Any:
    """``condition ? a : b``: a WHERE of the promoted operands, or ``a`` / ``b`` for a Python bool."""
    if isinstance(condition, bool):
        return a if condition else b
    x, y = operands(a, b) if (isinstance(a, UOp) or isinstance(b, UOp)) else (as_uop(a), as_uop(b))
    if not isinstance(a, UOp) and not isinstance(b, UOp):
        x, y = promote(x, y)
    return UOp(Ops.WHERE, (condition, x, y))


def all_of(conditions: Sequence[Any]) -> Any:
    """The conjunction of UOp / Python bools (True when empty, Python bools folded)."""
    out: Any = True
    for condition in conditions:
        if condition is True:
            continue
        if condition is False:
            return False
        out = condition if out is True else UOp(Ops.AND, (out, condition))
    return out


def logical_not(condition: Any) -> Any:
    """The negation of a UOp or Python bool."""
    return (not condition) if isinstance(condition, bool) else UOp(Ops.NOT, (condition,))


def as_float(x: UOp) -> UOp:
    """``x`` as a float32 UOp (kept when already float)."""
    return x if x.dtype.is_float else x.cast(dtypes.float32)


def exp(x: UOp) -> UOp:
    """``e ** x`` through EXP2 (the UOp dialect has no natural exponential)."""
    return UOp(Ops.EXP2, (x * _LOG2E,))


def log(x: UOp) -> UOp:
    """The natural logarithm through LOG2."""
    return UOp(Ops.LOG2, (x,)) * _LN2


def trunc(x: UOp) -> UOp:
    """``x`` rounded towards zero."""
    return UOp(Ops.TRUNC, (x,))


def floor(x: UOp) -> UOp:
    """``x`` rounded down."""
    t = trunc(x)
    return UOp(Ops.WHERE, (x < t, t - 1.0, t))


def ceil(x: UOp) -> UOp:
    """``x`` rounded up."""
    t = trunc(x)
    return UOp(Ops.WHERE, (x > t, t + 1.0, t))


def absolute(x: UOp) -> UOp:
    """``|x|``."""
    return UOp(Ops.WHERE, (x < uop_constant(x.dtype, 0), -x, x))


def sign(x: UOp) -> UOp:
    """-1, 0 or 1 by the sign of ``x``."""
    zero, one = uop_constant(x.dtype, 0), uop_constant(x.dtype, 1)
    return UOp(Ops.WHERE, (x > zero, one, UOp(Ops.WHERE, (x < zero, -one, zero))))


def atan(x: UOp) -> UOp:
    """atan by range reduction to |u| <= tan(pi/8) and its odd Taylor series (error < 1e-7)."""
    ax = absolute(x)
    invert = ax > 1.0
    t = UOp(Ops.WHERE, (invert, ax.recip(), ax))
    shifted = t > 0.41421356237309503
    u = UOp(Ops.WHERE, (shifted, (t - 1.0) / (t + 1.0), t))
    u2 = u * u
    series = uop_constant(dtypes.float32, 1.0 / 19.0) * (-1.0)
    for k in range(8, -1, -1):  # 1 - u2/3 + u2^2/5 - ... (Horner)
        series = series * u2 + ((-1.0) ** k) / (2 * k + 1)
    p = u * series
    r = UOp(Ops.WHERE, (shifted, p + math.pi / 4, p))
    r = UOp(Ops.WHERE, (invert, (math.pi / 2) - r, r))
    return UOp(Ops.WHERE, (x < 0.0, -r, r))


def erf(x: UOp) -> UOp:
    """erf by Abramowitz & Stegun 7.1.26 (absolute error < 1.5e-7)."""
    ax = absolute(x)
    t = (ax * 0.3275911 + 1.0).recip()
    poly = ((((t * 1.061405429 - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t
    y = 1.0 - poly * exp(-(ax * ax))
    return UOp(Ops.WHERE, (x < 0.0, -y, y))


def sinh(x: UOp) -> UOp:
    """The hyperbolic sine through ``exp``."""
    return (exp(x) - exp(-x)) * 0.5


def cosh(x: UOp) -> UOp:
    """The hyperbolic cosine through ``exp``."""
    return (exp(x) + exp(-x)) * 0.5


def tanh(x: UOp) -> UOp:
    """The hyperbolic tangent through ``exp``."""
    return 1.0 - 2.0 / (exp(x * 2.0) + 1.0)


def asin(x: UOp) -> UOp:
    """The arcsine through ``atan(x / sqrt(1 - x^2))``."""
    return atan(x / UOp(Ops.SQRT, (1.0 - x * x,)))


FLOAT_BUILTINS: dict[str, Callable[[UOp], UOp]] = {
    "sqrt": lambda x: UOp(Ops.SQRT, (x,)),
    "exp": exp,
    "log": log,
    "sin": lambda x: UOp(Ops.SIN, (x,)),
    "cos": lambda x: UOp(Ops.COS, (x,)),
    "tan": lambda x: UOp(Ops.TAN, (x,)),
    "asin": asin,
    "acos": lambda x: (math.pi / 2) - asin(x),
    "atan": atan,
    "sinh": sinh,
    "cosh": cosh,
    "tanh": tanh,
    "asinh": lambda x: sign(x) * log(absolute(x) + UOp(Ops.SQRT, (x * x + 1.0,))),
    "acosh": lambda x: log(x + UOp(Ops.SQRT, (x * x - 1.0,))),
    "atanh": lambda x: log((1.0 + x) / (1.0 - x)) * 0.5,
    "round": lambda x: trunc(
        x + UOp(Ops.WHERE, (x < 0.0, uop_constant(x.dtype, -0.5), uop_constant(x.dtype, 0.5)))
    ),
    "floor": floor,
    "ceil": ceil,
    "frac": lambda x: x - floor(x),
    "erf": erf,
}

UOP_BINARY: dict[str, Callable[[UOp, UOp], UOp]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "<?": lambda a, b: UOp(Ops.WHERE, (b < a, b, a)),
    ">?": lambda a, b: UOp(Ops.MAX, (a, b)),
    "&&": lambda a, b: UOp(Ops.AND, (a, b)),
    "||": lambda a, b: UOp(Ops.OR, (a, b)),
    "^": lambda a, b: UOp(Ops.XOR, (a, b)),
    "=>": lambda a, b: UOp(Ops.OR, (UOp(Ops.NOT, (a,)), b)),
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "==": lambda a, b: a.eq(b),
    "!=": lambda a, b: a.ne(b),
}


_COMPARISON_OPS = frozenset({"<", "<=", ">", ">=", "==", "!="})


class KernelScalarOps(PythonScalarOps):
    """Scalar operations on UOps (and UOps mixed with Python values) inside a lowering.

    A run-time extent (:class:`DynamicExtent`) that meets a UOp, or is compared, becomes the UOp
    ``runtime(extent)`` gives (its value read from the counters at run time); alone it stays symbolic.
    A run-time scalar (:class:`RuntimeScalar`, such as ``real(s)`` of an extent the data decides)
    becomes its UOp wherever it is used.
    """

    def __init__(self, runtime: Callable[[Any], Any] | None = None) -> None:
        self.runtime = runtime

    def _runtime(self, value: Any) -> Any:
        if isinstance(value, DynamicExtent | RuntimeScalar) and self.runtime is not None:
            return self.runtime(value)
        return value

    def binary(self, op: str, a: Any, b: Any, position: ast.Position) -> Any:
        dynamic = isinstance(a, DynamicExtent) or isinstance(b, DynamicExtent)
        scalar = isinstance(a, RuntimeScalar) or isinstance(b, RuntimeScalar)
        if scalar or (dynamic and (isinstance(a, UOp) or isinstance(b, UOp) or op in _COMPARISON_OPS)):
            a, b = self._runtime(a), self._runtime(b)
        if not isinstance(a, UOp) and not isinstance(b, UOp):
            return super().binary(op, a, b, position)
        if op == "**":
            return self._power(a, b)
        x, y = operands(a, b)
        if op == "/":
            return x / y if x.dtype.is_float else UOp(Ops.IDIV, (x, y))
        if op == "\\":
            if x.dtype.is_float:
                return ceil(x / y)
            return -UOp(Ops.IDIV, (-x, y))
        if op == "%":
            return x - y * floor(x / y) if x.dtype.is_float else UOp(Ops.MOD, (x, y))
        function = UOP_BINARY.get(op)
        if function is None:
            raise NNEFError.at(position, f"operator '{op}' is not available in a lowering")
        return function(x, y)

    def _power(self, a: Any, b: Any) -> UOp:
        if isinstance(b, int) and not isinstance(b, bool) and 0 <= b <= 8 and isinstance(a, UOp):
            out: UOp = uop_constant(a.dtype, 1)
            for _ in range(b):
                out = out * a
            return out
        x, y = operands(a, b)
        if not x.dtype.is_float:
            return UOp(Ops.POW, (as_float(x), as_float(y))).cast(x.dtype)
        return UOp(Ops.POW, (x, y))

    def unary(self, op: str, a: Any, position: ast.Position) -> Any:
        if isinstance(a, RuntimeScalar):
            a = self._runtime(a)
        if not isinstance(a, UOp):
            return super().unary(op, a, position)
        if op == "!":
            return UOp(Ops.NOT, (a,))
        return -a if op == "-" else a

    def select(self, condition: Any, then: Any, otherwise: Any, position: ast.Position) -> Any:
        if isinstance(condition, RuntimeScalar):
            condition = self._runtime(condition)
        if not isinstance(condition, UOp):
            return super().select(condition, then, otherwise, position)
        then, otherwise = self._runtime(then), self._runtime(otherwise)
        if not condition.dtype.is_bool:
            condition = condition.ne(uop_constant(condition.dtype, 0))
        if isinstance(then, BoundedIndex) or isinstance(otherwise, BoundedIndex):
            raise NNEFError.at(position, "a guarded index |i| cannot be chosen by a run-time condition")
        return select(condition, then, otherwise)

    def builtin(self, func: str, a: Any, position: ast.Position) -> Any:
        a = self._runtime(a)
        if not isinstance(a, UOp):
            return super().builtin(func, a, position)
        if func == "abs":
            return absolute(a)
        if func == "sign":
            return sign(a)
        return FLOAT_BUILTINS[func](as_float(a))

    def cast(self, type_name: str, a: Any, position: ast.Position) -> Any:
        if (isinstance(a, DynamicExtent) and type_name != "int") or isinstance(a, RuntimeScalar):
            a = self._runtime(a)
        if not isinstance(a, UOp):
            return super().cast(type_name, a, position)
        if type_name == "bool":
            return a if a.dtype.is_bool else a.ne(uop_constant(a.dtype, 0))
        return a.cast(uop_dtype(type_name))

    def truth(self, value: Any, position: ast.Position) -> bool | None:
        if isinstance(value, UOp):
            return None
        return super().truth(value, position)


KERNEL_OPS = KernelScalarOps()  # without run-time extents (intrinsics, helpers)


def row_major_strides(shape: Sequence[int]) -> list[int]:
    """The element strides of a row-major tensor of ``shape``."""
    strides = [1] * len(shape)
    for axis in range(len(shape) - 2, -1, -1):
        strides[axis] = strides[axis + 1] * shape[axis + 1]
    return strides


def flat_offset(indices: Sequence[Any], shape: Sequence[int]) -> UOp:
    """The row-major flat offset of ``indices`` (index UOps or Python ints) in ``shape``.

    Not :func:`uopviz.passes.indexing.flat_index`: that one drops the index of every size-1 axis
    (exact for in-range indices), which changes the kernels' ASTs and with them the kernels a
    compiled loop condition ends up with (one fewer, which tests/nnef/test_loops.py and
    test_loop_extents.py pin: found by swapping it in); it also takes no Python ints."""
    total: UOp = uop_constant(INDEX, 0)
    for index, stride in zip(indices, row_major_strides(shape), strict=True):
        if isinstance(index, int):
            if index:
                total = total + index * stride
            continue
        term = index if stride == 1 else index * stride
        total = term if total.op is Ops.CONST and total.arg[0] == 0 else total + term
    return total


COMPARISONS = frozenset({Ops.CMP_GT, Ops.CMP_GE, Ops.CMP_LT, Ops.CMP_LE})


def gate_loads(value: UOp, gate: Any) -> UOp:
    """Every LOAD in ``value`` also gated by ``gate`` (an inverted index may point outside)."""
    if gate is True:
        return value
    mapping = {}
    for u in value.toposort():
        if u.op is Ops.LOAD:
            if len(u.src) == 1:
                mapping[u] = UOp(Ops.LOAD, (u.src[0], uop_constant(u.dtype, 0), gate))
            else:
                mapping[u] = UOp(Ops.LOAD, (u.src[0], u.src[1], UOp(Ops.AND, (u.src[2], gate))))
    return substitute_in(value, mapping)


def gate_value(value: Any, gate: Any) -> Any:
    """``value`` (a UOp, a Python value or a pack of them) with its loads gated by ``gate``; the loads
    the gate itself makes (counters) stay as they are."""
    if isinstance(value, list):
        return [gate_value(item, gate) for item in value]
    if not isinstance(value, UOp) or gate is True:
        return value
    own = {u for u in gate.toposort() if u.op is Ops.LOAD}
    mapping = {}
    for u in value.toposort():
        if u.op is Ops.LOAD and u not in own:
            alternative, condition = (
                (u.src[1], UOp(Ops.AND, (u.src[2], gate)))
                if len(u.src) == 3
                else (
                    uop_constant(u.dtype, 0),
                    gate,
                )
            )
            mapping[u] = UOp(Ops.LOAD, (u.src[0], alternative, condition))
    return substitute_in(value, mapping) if mapping else value


def strip_casts(u: Any) -> Any:
    """``u`` without the CASTs wrapped around it."""
    while isinstance(u, UOp) and u.op is Ops.CAST:
        u = u.src[0]
    return u


def python_value(value: Any, dtype: DType) -> Any:
    """``value`` as the Python type of ``dtype`` (bool, float or int)."""
    if dtype.is_bool:
        return bool(value)
    if dtype.is_float:
        return float(value)
    return int(value)


def substitute_in(value: Any, mapping: dict[UOp, UOp]) -> Any:
    """``value`` with ``mapping`` substituted when it is a UOp (other values pass through)."""
    from uopviz.core.rewrite import substitute

    if not isinstance(value, UOp) or not mapping:
        return value
    return substitute(value, mapping)


def accumulation_identity(op: str, dtype: DType) -> UOp:
    """The identity of the accumulation of ``op`` (``+=``: 0, ``*=``: 1, ``>?=``: the lowest value...)."""
    if op == "+=":
        return uop_constant(dtype, 0)
    if op == "*=":
        return uop_constant(dtype, 1)
    if op == "&=":
        return uop_constant(dtype, True)
    if op == "|=":
        return uop_constant(dtype, False)
    if op == ">?=":
        return uop_constant(dtype, dtype.min)
    if op == "<?=":
        return uop_constant(dtype, dtype.max)
    raise NNEFError(f"'{op}' has no identity")


def accumulate(op: str, a: UOp, b: UOp) -> UOp:
    """``a`` and ``b`` combined by the accumulation of ``op``."""
    a, b = promote(a, b)
    if op == "+=":
        return a + b
    if op == "*=":
        return a * b
    if op == "&=":
        return UOp(Ops.AND, (a, b))
    if op == "|=":
        return UOp(Ops.OR, (a, b))
    if op == ">?=":
        return UOp(Ops.MAX, (a, b))
    if op == "<?=":
        return UOp(Ops.WHERE, (b < a, b, a))
    raise NNEFError(f"'{op}' is not an accumulation")


def reduce_over(op: str, value: UOp, ranges: Sequence[UOp]) -> UOp:
    """REDUCE over ``ranges`` with the accumulation of ``op`` (MIN as a negated MAX, bools as ints)."""
    ranges = list(ranges)
    if not ranges:
        return value
    if any(r.src[0].op is Ops.CONST and r.src[0].arg[0] == 0 for r in ranges):
        # over nothing: the identity, not a REDUCE whose value an empty range's folded index made
        # independent of the loop (an accumulator would read it once, past the end of the tensor)
        return accumulation_identity(op, value.dtype)
    if op == "+=":
        return UOp(Ops.REDUCE, (value, *ranges), (Ops.ADD, ()))
    if op == "*=":
        return UOp(Ops.REDUCE, (value, *ranges), (Ops.MUL, ()))
    if op == ">?=":
        return UOp(Ops.REDUCE, (value, *ranges), (Ops.MAX, ()))
    if op == "<?=":
        return -UOp(Ops.REDUCE, (-value, *ranges), (Ops.MAX, ()))
    if op == "|=":
        as_int = value.cast(dtypes.int32)
        return UOp(Ops.REDUCE, (as_int, *ranges), (Ops.MAX, ())).ne(uop_constant(dtypes.int32, 0))
    if op == "&=":
        missing = UOp(Ops.NOT, (value,)).cast(dtypes.int32)
        return UOp(Ops.REDUCE, (missing, *ranges), (Ops.MAX, ())).eq(uop_constant(dtypes.int32, 0))
    raise NNEFError(f"'{op}' is not an accumulation")


def clamp_index(index: UOp, extent: int | UOp) -> UOp:
    """``index`` clamped to ``[0, extent - 1]`` (the replicate border)."""
    last = uop_constant(INDEX, extent - 1) if isinstance(extent, int) else extent - 1
    return select(index < 0, uop_constant(INDEX, 0), select(index >= extent, last, index))


def reflect_index(index: UOp, extent: int | UOp) -> UOp:
    """``index`` mirrored about the border elements 0 and ``extent - 1`` as often as it takes:
    repeated reflections are periodic with period ``2 * (extent - 1)``, so ``|index|`` is folded
    into one period and its second half mirrored (an extent of 1 maps everything to 0). The spec's
    ``|i <> -i : 2 * (s - 1) - i|`` is one reflection and leaves far indices outside."""
    size = as_index(extent)
    span = size * 2 - 2
    folded = UOp(Ops.MOD, (absolute(index), UOp(Ops.MAX, (span, uop_constant(INDEX, 1)))))
    return select(folded < size, folded, span - folded)


def round_half_away(x: UOp) -> UOp:
    """``x`` rounded to the nearest integer, halves away from zero."""
    return trunc(x + select(x < 0.0, uop_constant(dtypes.float32, -0.5), uop_constant(dtypes.float32, 0.5)))
