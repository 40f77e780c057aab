"""Exact semantics of every elementwise op, on Python scalars and on numpy arrays.

This module is the one definition of what an ALU op computes.  The simplifier folds constants
with :func:`exec_alu`, the Python interpreter backend and the NNEF composer reuse it, and
:func:`evaluate` runs a whole scalar (or vector) UOp graph on numpy arrays with the same
semantics, which is what the accuracy measurements and the property tests use.

The semantics (numpy's, as ``docs/design/kernel-ir.md`` fixes them for every backend):

- fixed-width integers (int8 … uint64) wrap around; ``index`` wraps as int64;
- ``IDIV`` is floor division and ``MOD`` its modulo, with the sign of the divisor; a zero
  divisor gives 0 for both (numpy's result, without its warning);
- ``SHR`` of a signed integer is arithmetic; a shift amount outside ``[0, bits)`` gives 0 for
  ``SHL`` and the sign fill (0 or -1) for ``SHR``, as numpy defines it;
- float ops are computed in the dtype's own precision (float32 results are float32 values,
  float16 through numpy's float16, bfloat16 computed in float32 and rounded to nearest-even);
- comparisons give bool; on bool, ``ADD``/``MAX``/``OR`` are logical or, ``MUL``/``AND`` logical and;
- ``CAST`` float → integer truncates toward zero and then wraps to the width (numpy's ``astype``
  for every value numpy defines; nan and ±inf give 0); anything → bool is ``!= 0``;
- ``MULACC`` is ``ADD(MUL(a, b), c)`` with two roundings, as the spec decomposes it;
- ``THREEFRY`` is Threefry-2x32 with 20 rounds (5 groups of 4 add-rotate-xor rounds, a key
  injection after each group) on uint64 operands that pack two uint32 words (low word first).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from uopviz.core.dtype import DType, DTypeKind, dtypes, round_to_bfloat16
from uopviz.core.errors import UopvizError
from uopviz.core.ops import Ops

__all__ = [
    "ALUError",
    "bitcast_value",
    "evaluate",
    "exec_alu",
    "exec_alu_array",
    "numpy_dtype",
    "threefry2x32",
    "wrap_integer",
]


class ALUError(UopvizError, ValueError):
    """An op applied to operands it is not defined for (names the op, the dtype and the problem)."""


# ---------------------------------------------------------------------------------------------
# integers


def wrap_integer(value: int, dtype: DType) -> int:
    """``value`` wrapped into the range of the integer ``dtype`` (two's complement)."""
    bits = dtype.itemsize * 8
    if dtype.kind is DTypeKind.UNSIGNED:
        return value & ((1 << bits) - 1)
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def _floor_div(a: int, b: int) -> int:
    return 0 if b == 0 else a // b


def _floor_mod(a: int, b: int) -> int:
    return 0 if b == 0 else a % b


def _shift_left(a: int, b: int, bits: int) -> int:
    return a << b if 0 <= b < bits else 0


def _shift_right(a: int, b: int, bits: int) -> int:
    if 0 <= b < bits:
        return a >> b
    return -1 if a < 0 else 0


_INTEGER_BINARY: dict[Ops, Callable[[int, int], int]] = {
    Ops.ADD: lambda a, b: a + b,
    Ops.SUB: lambda a, b: a - b,
    Ops.MUL: lambda a, b: a * b,
    Ops.IDIV: _floor_div,
    Ops.MOD: _floor_mod,
    Ops.MAX: max,
    Ops.XOR: lambda a, b: a ^ b,
    Ops.OR: lambda a, b: a | b,
    Ops.AND: lambda a, b: a & b,
}
_COMPARE: dict[Ops, Callable[[Any, Any], bool]] = {
    Ops.CMP_LT: lambda a, b: a < b,
    Ops.CMP_NE: lambda a, b: a != b,
    Ops.CMP_GT: lambda a, b: a > b,
    Ops.CMP_GE: lambda a, b: a >= b,
    Ops.CMP_LE: lambda a, b: a <= b,
    Ops.CMP_EQ: lambda a, b: a == b,
}
_BOOL_BINARY: dict[Ops, Callable[[bool, bool], bool]] = {
    Ops.ADD: lambda a, b: a or b,
    Ops.MAX: lambda a, b: a or b,
    Ops.OR: lambda a, b: a or b,
    Ops.MUL: lambda a, b: a and b,
    Ops.AND: lambda a, b: a and b,
    Ops.XOR: lambda a, b: a != b,
}


# ---------------------------------------------------------------------------------------------
# floats


def numpy_dtype(dtype: DType) -> np.dtype:
    """The numpy dtype that holds values of ``dtype`` (bfloat16 is computed in float32)."""
    scalar = dtype.scalar
    if scalar is dtypes.bfloat16:
        return np.dtype(np.float32)
    if scalar.numpy_name is None:
        raise ALUError(f"{dtype.name} has no numpy representation")
    return np.dtype(scalar.numpy_name)


def _to_float(dtype: DType, value: Any) -> Any:
    """A numpy scalar of ``dtype``'s precision holding ``value`` (bool/int converted exactly-rounded)."""
    npd = numpy_dtype(dtype)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**53:
        # convert big integers directly (as a C cast would), not through a double rounding
        source = np.uint64 if value >= 2**63 else np.int64
        with np.errstate(all="ignore"):
            value = np.array(value, dtype=source).astype(npd)[()]
    with np.errstate(all="ignore"):
        return npd.type(value)


def _float_result(dtype: DType, value: Any) -> float:
    if dtype.scalar is dtypes.bfloat16:
        return float(round_to_bfloat16(np.float32(value))[()])
    return float(numpy_dtype(dtype).type(value))


_FLOAT_UNARY: dict[Ops, Callable[[Any], Any]] = {
    Ops.NEG: np.negative,
    Ops.RECIP: lambda x: np.divide(x.dtype.type(1), x),
    Ops.TRUNC: np.trunc,
    Ops.EXP2: np.exp2,
    Ops.LOG2: np.log2,
    Ops.EXP: np.exp,
    Ops.LOG: np.log,
    Ops.SIN: np.sin,
    Ops.COS: np.cos,
    Ops.TAN: np.tan,
    Ops.SQRT: np.sqrt,
}
#: computed in float64 for the narrower float types and rounded once: numpy's own float32 exp2, exp
#: and sin loops are vectorized approximations whose error depends on the CPU numpy dispatches to
#: (2.5 ulp for exp2 and 3.3 for the exp built on it with AVX-512, 0.5 without), and the evaluator
#: is the dialect's reference semantics, which should not change with the machine
_WIDENED = frozenset({Ops.EXP2, Ops.LOG2, Ops.EXP, Ops.LOG, Ops.SIN, Ops.COS, Ops.TAN, Ops.POW})


def _widened(op: Ops, values: list[Any]) -> list[Any]:
    """``values`` in float64 where ``op`` is one of :data:`_WIDENED` (the caller rounds back)."""
    return [np.asarray(v, dtype=np.float64) for v in values] if op in _WIDENED else values


_FLOAT_BINARY: dict[Ops, Callable[[Any, Any], Any]] = {
    Ops.ADD: np.add,
    Ops.SUB: np.subtract,
    Ops.MUL: np.multiply,
    Ops.DIV: np.divide,
    Ops.MAX: np.maximum,
    Ops.POW: np.power,
    Ops.IDIV: np.floor_divide,
    Ops.MOD: np.remainder,
}


# ---------------------------------------------------------------------------------------------
# casts and bitcasts


def _cast_value(value: Any, dtype: DType) -> Any:
    if dtype.is_bool:
        return bool(value != 0) if not (isinstance(value, float) and math.isnan(value)) else True
    if dtype.is_int:
        if isinstance(value, float):
            if not math.isfinite(value):
                return 0
            value = math.trunc(value)
        return wrap_integer(int(value), dtype)
    if dtype.is_float:
        return _float_result(dtype, _to_float(dtype, value) if not isinstance(value, float) else value)
    raise ALUError(f"CAST to {dtype.name} is not a value conversion")


_STRUCT = {
    "int8": "b",
    "int16": "h",
    "int32": "i",
    "int64": "q",
    "uint8": "B",
    "uint16": "H",
    "uint32": "I",
    "uint64": "Q",
    "float16": "e",
    "float32": "f",
    "float64": "d",
    "bool": "?",
    "index": "q",
}


def bitcast_value(value: Any, from_dtype: DType, to_dtype: DType) -> Any:
    """Reinterpret the bytes of a scalar ``value`` of ``from_dtype`` as ``to_dtype`` (same size)."""
    if from_dtype.itemsize != to_dtype.itemsize:
        raise ALUError(
            f"BITCAST {from_dtype.name} -> {to_dtype.name}: sizes {from_dtype.itemsize} and "
            f"{to_dtype.itemsize} differ"
        )
    if from_dtype is dtypes.bfloat16:
        raw = struct.pack("<H", int(np.float32(value).view(np.uint32)) >> 16)
    else:
        raw = struct.pack("<" + _STRUCT[from_dtype.name], value)
    if to_dtype is dtypes.bfloat16:
        return float(np.uint32(struct.unpack("<H", raw)[0] << 16).view(np.float32))
    out = struct.unpack("<" + _STRUCT[to_dtype.name], raw)[0]
    return float(out) if to_dtype.is_float else out


# ---------------------------------------------------------------------------------------------
# Threefry 2x32


_THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_THREEFRY_PARITY = 0x1BD11BDA
_MASK32 = 0xFFFFFFFF


def threefry2x32(counter: int, key: int) -> int:
    """Threefry-2x32-20 of a uint64 counter under a uint64 key (each two uint32 words, low first)."""
    x = [counter & _MASK32, counter >> 32 & _MASK32]
    k0, k1 = key & _MASK32, key >> 32 & _MASK32
    schedule = (k0, k1, k0 ^ k1 ^ _THREEFRY_PARITY)
    x = [(x[0] + schedule[0]) & _MASK32, (x[1] + schedule[1]) & _MASK32]
    for group in range(5):
        for rotation in _THREEFRY_ROTATIONS[group % 2]:
            x[0] = (x[0] + x[1]) & _MASK32
            x[1] = ((x[1] << rotation) | (x[1] >> (32 - rotation))) & _MASK32
            x[1] ^= x[0]
        x[0] = (x[0] + schedule[(group + 1) % 3]) & _MASK32
        x[1] = (x[1] + schedule[(group + 2) % 3] + group + 1) & _MASK32
    return x[1] << 32 | x[0]


# ---------------------------------------------------------------------------------------------
# the scalar evaluator


def exec_alu(op: Ops, dtype: DType, operands: Sequence[Any]) -> Any:
    """The value of elementwise ``op`` on Python scalar ``operands``; ``dtype`` is the result's dtype.

    Integers come back wrapped into ``dtype``, floats rounded to its precision (as Python floats),
    comparisons as bool.  For CAST the operand is the value to convert to ``dtype``.
    """
    scalar = dtype.scalar
    kind = scalar.kind
    if op in _COMPARE:
        a, b = operands
        return _COMPARE[op](a, b)
    if op is Ops.WHERE:
        return operands[1] if operands[0] else operands[2]
    if op is Ops.CAST:
        return _cast_value(operands[0], scalar)
    if op is Ops.MULACC:
        return exec_alu(Ops.ADD, dtype, (exec_alu(Ops.MUL, dtype, operands[:2]), operands[2]))
    if kind is DTypeKind.BOOL:
        return _exec_bool(op, operands)
    if kind in (DTypeKind.SIGNED, DTypeKind.UNSIGNED, DTypeKind.INDEX):
        return _exec_integer(op, scalar, operands)
    if kind is DTypeKind.FLOAT:
        return _exec_float(op, scalar, operands)
    raise ALUError(f"{op.name} on {dtype.name} has no value")


def _exec_bool(op: Ops, operands: Sequence[Any]) -> bool:
    if op in _BOOL_BINARY:
        return _BOOL_BINARY[op](bool(operands[0]), bool(operands[1]))
    if op is Ops.NOT:
        return not operands[0]
    raise ALUError(f"{op.name} is not defined on bool")


def _exec_integer(op: Ops, dtype: DType, operands: Sequence[Any]) -> int:
    function = _INTEGER_BINARY.get(op)
    if function is not None:
        return wrap_integer(function(operands[0], operands[1]), dtype)
    if op is Ops.SHL:
        return wrap_integer(_shift_left(operands[0], operands[1], dtype.itemsize * 8), dtype)
    if op is Ops.SHR:
        return wrap_integer(_shift_right(operands[0], operands[1], dtype.itemsize * 8), dtype)
    if op is Ops.NEG:
        return wrap_integer(-operands[0], dtype)
    if op is Ops.NOT:
        return wrap_integer(~operands[0], dtype)
    if op is Ops.TRUNC:
        return operands[0]
    if op is Ops.THREEFRY:
        if dtype is not dtypes.uint64:
            raise ALUError(f"THREEFRY works on uint64, got {dtype.name}")
        return threefry2x32(operands[0], operands[1])
    raise ALUError(f"{op.name} is not defined on the integer type {dtype.name}")


def _exec_float(op: Ops, dtype: DType, operands: Sequence[Any]) -> float:
    values = _widened(op, [_to_float(dtype, v) for v in operands])
    with np.errstate(all="ignore"):
        if len(values) == 1 and op in _FLOAT_UNARY:
            return _float_result(dtype, _FLOAT_UNARY[op](values[0]))
        if len(values) == 2 and op in _FLOAT_BINARY:
            return _float_result(dtype, _FLOAT_BINARY[op](values[0], values[1]))
    raise ALUError(f"{op.name} is not defined on the float type {dtype.name}")


# ---------------------------------------------------------------------------------------------
# the array evaluator


def _int_array(values: np.ndarray, dtype: DType) -> np.ndarray:
    return np.asarray(values).astype(numpy_dtype(dtype), copy=False)


def _shift_array(op: Ops, a: np.ndarray, b: np.ndarray, dtype: DType) -> np.ndarray:
    bits = dtype.itemsize * 8
    npd = numpy_dtype(dtype)
    amount = np.asarray(b).astype(np.int64)
    in_range = (amount >= 0) & (amount < bits)
    safe = np.where(in_range, amount, 0).astype(npd)
    if op is Ops.SHL:
        return np.where(in_range, np.left_shift(a, safe), npd.type(0)).astype(npd)
    fill = np.where(a < 0, npd.type(-1) if not dtype.is_unsigned else npd.type(0), npd.type(0))
    return np.where(in_range, np.right_shift(a, safe), fill).astype(npd)


def _cast_array(values: np.ndarray, source: DType, target: DType) -> np.ndarray:
    values = np.asarray(values)
    if target.is_bool:
        return values != 0 if not source.is_float else ((values != 0) | np.isnan(values))
    if target.is_int:
        if source.is_float:
            as_float = values.astype(np.float64)
            finite = np.isfinite(as_float)
            truncated = np.trunc(np.where(finite, as_float, 0.0))
            # wrap modulo 2**64 exactly: the magnitude's fmod by a power of two is exact in IEEE
            # arithmetic; its two 32-bit halves convert exactly; negatives negate in uint64
            magnitude = np.fmod(np.abs(truncated), 2.0**64)
            high = np.floor(magnitude / 2.0**32)
            low = magnitude - high * 2.0**32
            as_uint = high.astype(np.uint64) << np.uint64(32) | low.astype(np.uint64)
            as_uint = np.where(truncated < 0, np.uint64(0) - as_uint, as_uint)
            return as_uint.astype(numpy_dtype(target))
        return values.astype(numpy_dtype(target))
    if target.is_float:
        out = values.astype(numpy_dtype(target))
        return round_to_bfloat16(out) if target is dtypes.bfloat16 else out
    raise ALUError(f"CAST to {target.name} is not a value conversion")


def _float_array_result(values: np.ndarray, dtype: DType) -> np.ndarray:
    out = np.asarray(values).astype(numpy_dtype(dtype), copy=False)
    return round_to_bfloat16(out) if dtype.scalar is dtypes.bfloat16 else out


def _threefry_array(counter: np.ndarray, key: np.ndarray) -> np.ndarray:
    mask = np.uint64(_MASK32)
    counter, key = np.asarray(counter, dtype=np.uint64), np.asarray(key, dtype=np.uint64)
    x0, x1 = (counter & mask).astype(np.uint32), (counter >> np.uint64(32)).astype(np.uint32)
    k0, k1 = (key & mask).astype(np.uint32), (key >> np.uint64(32)).astype(np.uint32)
    schedule = (k0, k1, k0 ^ k1 ^ np.uint32(_THREEFRY_PARITY))
    with np.errstate(over="ignore"):
        x0, x1 = x0 + schedule[0], x1 + schedule[1]
        for group in range(5):
            for rotation in _THREEFRY_ROTATIONS[group % 2]:
                x0 = x0 + x1
                x1 = (x1 << np.uint32(rotation)) | (x1 >> np.uint32(32 - rotation))
                x1 = x1 ^ x0
            x0 = x0 + schedule[(group + 1) % 3]
            x1 = x1 + schedule[(group + 2) % 3] + np.uint32(group + 1)
    return x1.astype(np.uint64) << np.uint64(32) | x0.astype(np.uint64)


def exec_alu_array(
    op: Ops, dtype: DType, operands: Sequence[np.ndarray], operand_dtypes: Sequence[DType] | None = None
) -> np.ndarray:
    """:func:`exec_alu` on numpy arrays (broadcasting); ``dtype`` is the result's dtype.

    ``operand_dtypes`` is needed for CAST (the source type decides float truncation).
    """
    scalar = dtype.scalar
    with np.errstate(all="ignore"):
        if op in _COMPARE:
            return np.asarray(_COMPARE[op](operands[0], operands[1]))
        if op is Ops.WHERE:
            return np.where(operands[0], operands[1], operands[2])
        if op is Ops.CAST:
            source = operand_dtypes[0].scalar if operand_dtypes else dtypes.from_numpy(operands[0].dtype)
            return _cast_array(operands[0], source, scalar)
        if op is Ops.MULACC:
            product = exec_alu_array(Ops.MUL, dtype, operands[:2])
            return exec_alu_array(Ops.ADD, dtype, (product, operands[2]))
        if scalar.is_bool:
            return _bool_array(op, operands)
        if scalar.is_int:
            return _integer_array(op, scalar, operands)
        if scalar.is_float:
            values = _widened(op, [np.asarray(v).astype(numpy_dtype(scalar), copy=False) for v in operands])
            if len(values) == 1 and op in _FLOAT_UNARY:
                return _float_array_result(_FLOAT_UNARY[op](values[0]), scalar)
            if len(values) == 2 and op in _FLOAT_BINARY:
                return _float_array_result(_FLOAT_BINARY[op](values[0], values[1]), scalar)
    raise ALUError(f"{op.name} on {dtype.name} has no value")


_BOOL_ARRAY = {
    Ops.ADD: np.logical_or,
    Ops.MAX: np.logical_or,
    Ops.OR: np.logical_or,
    Ops.MUL: np.logical_and,
    Ops.AND: np.logical_and,
    Ops.XOR: np.logical_xor,
}


def _bool_array(op: Ops, operands: Sequence[np.ndarray]) -> np.ndarray:
    if op in _BOOL_ARRAY:
        return _BOOL_ARRAY[op](operands[0], operands[1])
    if op is Ops.NOT:
        return np.logical_not(operands[0])
    raise ALUError(f"{op.name} is not defined on bool")


_INTEGER_ARRAY = {
    Ops.ADD: np.add,
    Ops.SUB: np.subtract,
    Ops.MUL: np.multiply,
    Ops.MAX: np.maximum,
    Ops.XOR: np.bitwise_xor,
    Ops.OR: np.bitwise_or,
    Ops.AND: np.bitwise_and,
}


def _integer_array(op: Ops, dtype: DType, operands: Sequence[np.ndarray]) -> np.ndarray:
    values = [_int_array(v, dtype) for v in operands]
    npd = numpy_dtype(dtype)
    if op in _INTEGER_ARRAY:
        return _INTEGER_ARRAY[op](values[0], values[1]).astype(npd, copy=False)
    if op in (Ops.IDIV, Ops.MOD):
        a, b = values
        zero = b == 0
        safe = np.where(zero, npd.type(1), b)
        out = np.floor_divide(a, safe) if op is Ops.IDIV else np.remainder(a, safe)
        return np.where(zero, npd.type(0), out).astype(npd, copy=False)
    if op in (Ops.SHL, Ops.SHR):
        return _shift_array(op, values[0], values[1], dtype)
    if op is Ops.NEG:
        return (
            np.negative(values[0]).astype(npd, copy=False)
            if not dtype.is_unsigned
            else (npd.type(0) - values[0]).astype(npd, copy=False)
        )
    if op is Ops.NOT:
        return np.invert(values[0])
    if op is Ops.TRUNC:
        return values[0]
    if op is Ops.THREEFRY:
        return _threefry_array(values[0], values[1])
    raise ALUError(f"{op.name} is not defined on the integer type {dtype.name}")


def evaluate(root: Any, bindings: Mapping[Any, Any]) -> np.ndarray:
    """Evaluate a graph of scalar (or vector) elementwise UOps on numpy arrays.

    ``bindings`` maps each leaf that is not a CONST (RANGE, PARAM, LOAD, …) to an array of its
    values; all arrays broadcast together.  A vector value carries its lanes on a trailing axis.
    CONST, every elementwise op, CAST, BITCAST, VECTORIZE and GEP are evaluated.
    """
    values: dict[Any, np.ndarray] = {}
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:  # post-order walk that stops at bound leaves (a PARAM's shape source is never evaluated)
        node, ready = stack.pop()
        if node in values:
            continue
        if node in bindings:
            value = np.asarray(bindings[node])
            values[node] = (
                value.astype(numpy_dtype(node.dtype), copy=False)
                if node.dtype.scalar.kind is not DTypeKind.VOID
                else value
            )
            continue
        if ready:
            values[node] = _evaluate_node(node, [values[s] for s in node.src])
            continue
        stack.append((node, True))
        stack.extend((s, False) for s in node.src if s not in values)
    return values[root]


def _evaluate_node(u: Any, sources: list[np.ndarray]) -> np.ndarray:
    op = u.op
    if op is Ops.CONST:
        value = u.arg[0]
        return np.asarray(value, dtype=numpy_dtype(u.dtype))
    if op is Ops.VECTORIZE:
        return np.stack(np.broadcast_arrays(*sources), axis=-1)
    if op is Ops.GEP:
        lanes = u.arg
        return sources[0][..., lanes[0]] if len(lanes) == 1 else sources[0][..., list(lanes)]
    if op is Ops.BITCAST:
        source = np.ascontiguousarray(sources[0])
        if u.src[0].dtype.scalar is dtypes.bfloat16 or u.dtype.scalar is dtypes.bfloat16:
            raise ALUError("BITCAST of bfloat16 arrays is not supported by the numpy evaluator")
        return source.view(numpy_dtype(u.dtype))
    if op in (Ops.CAST,):
        return exec_alu_array(op, u.dtype, sources, [u.src[0].dtype])
    if op.is_elementwise:
        return exec_alu_array(op, u.dtype, sources)
    raise ALUError(f"evaluate: {op.name} is not an elementwise op; bind it to values instead")
