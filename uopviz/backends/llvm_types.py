"""How LLVM IR spells uopviz's dtypes: the value and memory types of each dtype (vectors as
``<N x T>``), the mangled suffixes of overloaded intrinsics, and exact constant literals."""

from __future__ import annotations

import math
import struct
from typing import Any

from uopviz.backends.base import RenderError
from uopviz.core.dtype import DType, dtypes

_SCALAR_TYPES = {
    "bool": "i1",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "i8",
    "uint16": "i16",
    "uint32": "i32",
    "uint64": "i64",
    "float16": "half",
    "bfloat16": "float",
    "float32": "float",
    "float64": "double",
    "index": "i64",
}
_MANGLE = {
    "i1": "i1",
    "i8": "i8",
    "i16": "i16",
    "i32": "i32",
    "i64": "i64",
    "half": "f16",
    "float": "f32",
    "double": "f64",
    "bfloat": "bf16",
    "ptr": "p0",
}


def scalar_type(dtype: DType) -> str:
    """The LLVM type of a value of ``dtype``'s lane type (bfloat16 values are held as float)."""
    try:
        return _SCALAR_TYPES[dtype.scalar.name]
    except KeyError:
        raise RenderError(f"llvm: no type for {dtype.name}") from None


def value_type(dtype: DType) -> str:
    """The LLVM type of a value of ``dtype`` (a vector type for vector dtypes)."""
    scalar = scalar_type(dtype)
    return f"<{dtype.count} x {scalar}>" if dtype.count > 1 else scalar


def memory_scalar_type(dtype: DType) -> str:
    """The LLVM type of one element in memory (bool is a byte, bfloat16 its 16 bits as ``i16``: LLVM
    lowers ``fptrunc`` to ``bfloat`` to a runtime-library call on CPUs without AVX512-BF16, which
    the JIT cannot resolve, so conversions are integer arithmetic)."""
    scalar = dtype.scalar
    if scalar.is_bool:
        return "i8"
    if scalar is dtypes.bfloat16:
        return "i16"
    return scalar_type(scalar)


def memory_type(dtype: DType) -> str:
    """The LLVM type of ``dtype.count`` consecutive elements in memory."""
    element = memory_scalar_type(dtype)
    return f"<{dtype.count} x {element}>" if dtype.count > 1 else element


def mangle(type_text: str) -> str:
    """The suffix of an overloaded intrinsic for a type (``<4 x float>`` → ``v4f32``)."""
    if type_text.startswith("<"):
        count, _, element = type_text[1:-1].partition(" x ")
        return f"v{count}{_MANGLE[element]}"
    return _MANGLE[type_text]


def float_literal(value: float, type_text: str) -> str:
    """An exact LLVM float constant (hex for anything not a small integer)."""
    if type_text == "half":
        return "0xH" + struct.pack(">e", value).hex().upper()
    if type_text == "bfloat":
        bits = struct.unpack(">I", struct.pack(">f", value))[0] >> 16
        return f"0xR{bits:04X}"
    if type_text == "float" and not math.isnan(value) and not math.isinf(value):
        value = struct.unpack("f", struct.pack("f", value))[0]  # what float32 holds, widened exactly
    return "0x" + struct.pack(">d", value).hex().upper()


def scalar_literal(value: Any, dtype: DType) -> str:
    """A scalar constant of ``dtype`` as LLVM writes it."""
    scalar = dtype.scalar
    if scalar.is_bool:
        return "true" if value else "false"
    if scalar.is_float:
        return float_literal(float(value), scalar_type(scalar))
    bits = scalar.bits
    number = int(value) & ((1 << bits) - 1)
    if number >= 1 << (bits - 1):
        number -= 1 << bits  # LLVM integer literals are read as signed
    return str(number)


def splat(text: str, type_text: str) -> str:
    """A constant of ``type_text`` with every lane ``text`` (scalar types: the text itself)."""
    if not type_text.startswith("<"):
        return text
    count, _, element = type_text[1:-1].partition(" x ")
    return "<" + ", ".join(f"{element} {text}" for _ in range(int(count))) + ">"


def with_element(type_text: str, element: str) -> str:
    """``type_text`` with its lane type replaced (scalars: ``element`` itself)."""
    if type_text.startswith("<"):
        count = type_text[1:].split(" x ")[0]
        return f"<{count} x {element}>"
    return element
