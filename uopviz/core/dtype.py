"""Data types of the UOp dialect: scalars, vectors and pointers.

A ``DType`` is an immutable value.  Scalar types carry their numeric range (``min``/``max``)
because the derived ``min_max`` property of every UOp falls back to the dtype range.  Vector
types (``float32.vec(4)``) appear after the Expand stage turns UPCAST ranges into lanes;
pointer types (``float32.ptr(size, AddrSpace.GLOBAL)``) appear in kernels, where a Buffer is
an address in one of three address spaces.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any

import numpy as np


class AddrSpace(enum.Enum):
    """Where a buffer lives: device memory, workgroup-shared memory, or registers."""

    GLOBAL = "GLOBAL"
    LOCAL = "LOCAL"
    REG = "REG"


class DTypeKind(enum.Enum):
    """The family of a scalar type; decides arithmetic semantics (wraparound, floor division)."""

    BOOL = "bool"
    SIGNED = "signed"
    UNSIGNED = "unsigned"
    FLOAT = "float"
    INDEX = "index"  # the type of loop counters and addresses: an unbounded signed integer
    VOID = "void"


@dataclass(frozen=True, eq=True)
class DType:
    """A scalar or vector data type.

    ``count`` is the number of vector lanes (1 for scalars); ``scalar`` gives the lane type.
    ``numpy_name`` names the numpy dtype used by the interpreter and by data transfer.
    """

    name: str
    itemsize: int
    kind: DTypeKind
    numpy_name: str | None
    count: int = 1

    def __repr__(self) -> str:
        return f"dtypes.{self.name}"

    def __hash__(self) -> int:
        # dtypes are hashed on every UOp construction: cache the hash of the name (unique per type)
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash((self.name, self.itemsize))
            object.__setattr__(self, "_hash", cached)
        return cached

    def __reduce_ex__(self, protocol: Any) -> Any:
        # a scalar type of ``dtypes`` comes back as that very object, not an equal copy: passes
        # compare dtypes with ``is``, and the caches' hash-consed UOps rebuilt from a pickle are the
        # very UOps a later lowering in the process gets back
        if getattr(dtypes, self.name, None) is self:
            return _named_dtype, (self.name,)
        return object.__reduce_ex__(self, protocol)

    def __getstate__(self) -> dict:
        # the cached hash must not travel to another process: str hashes differ between processes
        state = dict(self.__dict__)
        state.pop("_hash", None)
        return state

    @property
    def scalar(self) -> DType:
        """The lane type of a vector (the type itself for a scalar)."""
        return _SCALARS[self.name.split(".vec")[0]] if self.count > 1 else self

    def vec(self, count: int) -> DType:
        """A vector of ``count`` lanes of this scalar type."""
        if self.count != 1:
            raise ValueError(f"cannot make a vector of the vector type {self.name}")
        if count == 1:
            return self
        return DType(f"{self.name}.vec{count}", self.itemsize * count, self.kind, self.numpy_name, count)

    def ptr(self, size: int = -1, addrspace: AddrSpace = AddrSpace.GLOBAL) -> PtrDType:
        """A pointer to ``size`` elements of this type in ``addrspace``."""
        return PtrDType(f"{self.name}*", 8, self.kind, self.numpy_name, 1, self, addrspace, size)

    @property
    def is_float(self) -> bool:
        """True for float16, bfloat16, float32, float64 (and their vectors)."""
        return self.kind is DTypeKind.FLOAT

    @property
    def is_int(self) -> bool:
        """True for signed, unsigned and index integers."""
        return self.kind in (DTypeKind.SIGNED, DTypeKind.UNSIGNED, DTypeKind.INDEX)

    @property
    def is_unsigned(self) -> bool:
        """True for uint8 … uint64."""
        return self.kind is DTypeKind.UNSIGNED

    @property
    def is_bool(self) -> bool:
        """True for bool."""
        return self.kind is DTypeKind.BOOL

    @property
    def bits(self) -> int:
        """Width of one lane in bits."""
        return self.scalar.itemsize * 8

    @property
    def min(self) -> int | float | bool:
        """The smallest value of the type (``-inf`` for floats, a huge negative for index)."""
        kind = self.kind
        if kind is DTypeKind.BOOL:
            return False
        if kind is DTypeKind.FLOAT:
            return -math.inf
        if kind is DTypeKind.UNSIGNED:
            return 0
        if kind is DTypeKind.INDEX:
            return -(2**63)
        if kind is DTypeKind.SIGNED:
            return -(2 ** (self.bits - 1))
        raise ValueError(f"{self.name} has no range")

    @property
    def max(self) -> int | float | bool:
        """The largest value of the type (``inf`` for floats)."""
        kind = self.kind
        if kind is DTypeKind.BOOL:
            return True
        if kind is DTypeKind.FLOAT:
            return math.inf
        if kind is DTypeKind.UNSIGNED:
            return 2**self.bits - 1
        if kind is DTypeKind.INDEX:
            return 2**63 - 1
        if kind is DTypeKind.SIGNED:
            return 2 ** (self.bits - 1) - 1
        raise ValueError(f"{self.name} has no range")


@dataclass(frozen=True, eq=True)
class PtrDType(DType):
    """A pointer: what a Buffer is inside a kernel."""

    base: DType | None = None
    addrspace: AddrSpace = AddrSpace.GLOBAL
    size: int = -1

    def __repr__(self) -> str:
        return f"{self.base!r}.ptr({self.size}, {self.addrspace.name})"

    def __hash__(self) -> int:
        return hash((self.name, self.addrspace, self.size))


def _scalar(name: str, itemsize: int, kind: DTypeKind, numpy_name: str | None) -> DType:
    return DType(name, itemsize, kind, numpy_name)


_SCALARS: dict[str, DType] = {}


class dtypes:  # noqa: N801 - lower-case namespace, as users write ``uv.dtypes.float32``
    """Namespace of every scalar type and helpers to convert to and from Python and numpy."""

    bool = _scalar("bool", 1, DTypeKind.BOOL, "bool")
    int8 = _scalar("int8", 1, DTypeKind.SIGNED, "int8")
    int16 = _scalar("int16", 2, DTypeKind.SIGNED, "int16")
    int32 = _scalar("int32", 4, DTypeKind.SIGNED, "int32")
    int64 = _scalar("int64", 8, DTypeKind.SIGNED, "int64")
    uint8 = _scalar("uint8", 1, DTypeKind.UNSIGNED, "uint8")
    uint16 = _scalar("uint16", 2, DTypeKind.UNSIGNED, "uint16")
    uint32 = _scalar("uint32", 4, DTypeKind.UNSIGNED, "uint32")
    uint64 = _scalar("uint64", 8, DTypeKind.UNSIGNED, "uint64")
    float16 = _scalar("float16", 2, DTypeKind.FLOAT, "float16")
    bfloat16 = _scalar("bfloat16", 2, DTypeKind.FLOAT, None)  # numpy has none: stored as uint16 bits
    float32 = _scalar("float32", 4, DTypeKind.FLOAT, "float32")
    float64 = _scalar("float64", 8, DTypeKind.FLOAT, "float64")
    index = _scalar("index", 8, DTypeKind.INDEX, "int64")
    void = _scalar("void", 0, DTypeKind.VOID, None)

    half = float16
    float = float32
    double = float64
    int = int32
    default_float = float32
    default_int = int32

    @staticmethod
    def all() -> tuple[DType, ...]:
        """Every scalar type with a value range (not void)."""
        return tuple(dt for dt in _SCALARS.values() if dt.kind is not DTypeKind.VOID)

    @staticmethod
    def from_name(name: str) -> DType:
        """The scalar type called ``name`` (``"float32"``)."""
        try:
            return _SCALARS[name]
        except KeyError:
            raise ValueError(f"unknown dtype {name!r}; known: {', '.join(_SCALARS)}") from None

    @staticmethod
    def from_numpy(numpy_dtype: Any) -> DType:
        """The DType matching a numpy dtype."""
        import numpy as np

        name = np.dtype(numpy_dtype).name
        if name not in _SCALARS or name == "index":
            raise ValueError(f"numpy dtype {name} has no uopviz equivalent")
        return _SCALARS[name]

    @staticmethod
    def from_python(value: Any) -> DType:
        """The default type of a Python scalar: bool, int32 or float32."""
        if isinstance(value, bool):
            return dtypes.bool
        if isinstance(value, int):
            return dtypes.default_int
        if isinstance(value, float):
            return dtypes.default_float
        raise TypeError(f"no dtype for Python value {value!r} of type {type(value).__name__}")

    @staticmethod
    def promote(a: DType, b: DType) -> DType:
        """The common type of a binary operation, as numpy would pick it for the tensor front end."""
        if a == b:
            return a
        order = [dtypes.bool, dtypes.uint8, dtypes.int8, dtypes.uint16, dtypes.int16, dtypes.uint32,
                 dtypes.int32, dtypes.uint64, dtypes.int64, dtypes.float16, dtypes.bfloat16, dtypes.float32,
                 dtypes.float64]
        if a not in order or b not in order:
            raise ValueError(f"cannot promote {a.name} with {b.name}")
        if a.is_float or b.is_float:
            floats = [dt for dt in (a, b) if dt.is_float]
            return max(floats, key=order.index)
        return max((a, b), key=order.index)


for _name, _value in list(vars(dtypes).items()):
    if isinstance(_value, DType) and _value.name == _name:
        _SCALARS[_name] = _value


def as_python_value(dtype: DType, value: Any) -> Any:
    """Normalise a Python number to the value ``dtype`` holds (``int`` for integers, ``float``...)."""
    if dtype.is_bool:
        return bool(value)
    if dtype.is_int:
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"cannot represent {value} as {dtype.name}")
        return int(value)
    if dtype.is_float:
        return _held_by_half_type(dtype, float(value))
    return value


def _held_by_half_type(dtype: DType, value: float) -> float:
    """``value`` rounded to float16 / bfloat16 (nearest-even) for those dtypes: a CONST holds what its
    dtype can hold, so every backend and the simplifier start from the same number (float32 and
    float64 constants are rounded by the renderers' literals, exactly)."""
    scalar = dtype.scalar
    if scalar is dtypes.float16:
        with np.errstate(over="ignore"):
            return float(np.float16(value))
    if scalar is not dtypes.bfloat16 or not math.isfinite(value):
        return value
    with np.errstate(over="ignore"):  # beyond float32's range: inf, as bfloat16 has float32's range
        return float(round_to_bfloat16(np.float32(value))[()])


def round_to_bfloat16(values: Any) -> np.ndarray:
    """Round float32 values to the nearest bfloat16 (ties to even), kept as float32; NaN stays NaN."""
    values = np.asarray(values, dtype=np.float32)
    bits = values.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16).astype(np.uint32)
    return np.where(np.isnan(values), values, rounded.view(np.float32))


def _named_dtype(name: str) -> DType:
    """The scalar type ``dtypes.<name>`` (how a pickled one comes back: :meth:`DType.__reduce_ex__`)."""
    return getattr(dtypes, name)
