"""Helpers of the Tensor front end on shapes, axes, dtypes, Python scalars and data buffers.

They work on plain values and on tensors through their methods, so that
:mod:`uopviz.core.tensor` (the :class:`~uopviz.core.tensor.Tensor` class) and the modules it
uses share them without an import cycle.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from uopviz.core.buffers import buffer_data, initial_data, storage_array
from uopviz.core.dtype import DType, dtypes
from uopviz.core.ops import Ops
from uopviz.core.uop import UOp, UOpError, UOpTypeError

DEFAULT_DEVICE = "CPU"
Shape = tuple[int, ...]
Scalar = bool | int | float

#: The operand of these helpers: a :class:`~uopviz.core.tensor.Tensor`, used only through its
#: methods and attributes.  The class is not imported: ``core.tensor`` imports this module, and the
#: layer contract forbids import cycles.
TensorLike = Any


# ---------------------------------------------------------------------------------------------
# small helpers on shapes, axes and dtypes


def shape_args(args: Sequence[Any]) -> tuple[Any, ...]:
    """``f(2, 3)`` and ``f((2, 3))`` both give ``(2, 3)``."""
    if len(args) == 1 and isinstance(args[0], list | tuple):
        return tuple(args[0])
    return tuple(args)


def broadcast_shape(*shapes: Shape) -> Shape:
    """numpy's broadcasting: right-align, each axis equal or 1.  Raises UOpError naming the shapes."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[int] = []
    for position in range(rank):
        sizes = {s[position - rank + len(s)] for s in shapes if position - rank + len(s) >= 0}
        other_than_one = sizes - {1}
        if len(other_than_one) > 1:
            raise UOpError(f"shapes {', '.join(map(str, shapes))} do not broadcast (axis {position} "
                             f"has sizes {sorted(sizes)})")
        out.append(other_than_one.pop() if other_than_one else 1)
    return tuple(out)


def normalize_axis(axis: int, ndim: int, what: str = "axis") -> int:
    """``axis`` of a rank-``ndim`` tensor counted from 0 (negative axes count from the end); an axis
    that is not an int, or out of range, raises naming ``what``."""
    if not isinstance(axis, int | np.integer) or isinstance(axis, bool):
        raise UOpTypeError(f"{what} must be an int, got {axis!r}")
    if not -ndim <= axis < ndim:
        raise UOpError(f"{what} {axis} is out of range for a tensor of rank {ndim}")
    return int(axis) % ndim if ndim else 0


def to_dtype(dtype: DType | str | Any) -> DType:
    """A DType from a DType, its name (``"float32"``) or a numpy dtype."""
    if isinstance(dtype, DType):
        return dtype
    if isinstance(dtype, str):
        return dtypes.from_name(dtype)
    return dtypes.from_numpy(dtype)


def sum_dtype(dtype: DType) -> DType:
    """The dtype of a sum or product of ``dtype`` (numpy's, but int32 not int64): small integers and
    bool widen, floats keep their type (a half type's sum is that half type, accumulated in float32:
    :func:`accumulator_dtype`)."""
    if dtype.is_bool or (dtype.kind.value == "signed" and dtype.itemsize < 4):
        return dtypes.int32
    if dtype.is_unsigned and dtype.itemsize < 4:
        return dtypes.uint32
    return dtype


#: the floats narrower than float32 (uopviz has no fp8 types)
HALF_FLOATS = frozenset({dtypes.float16, dtypes.bfloat16})


def accumulator_dtype(result: DType) -> DType:
    """The dtype a sum or product whose result is ``result`` accumulates in: float32 for the half
    floats, rounded once to ``result`` at the end (as numpy, torch and tinygrad do: a float16 running
    sum drops every term under half its ulp, so 4096 ones summed to 2048), else ``result`` itself."""
    return dtypes.float32 if result.scalar in HALF_FLOATS else result


def in_accumulator(x: TensorLike) -> TensorLike:
    """``x`` in the type its products are summed in: float32 for the half floats (a product of two
    half values is exact in float32, so a sum of products rounds once), else ``x`` itself."""
    return x.cast(accumulator_dtype(x.dtype))


def float_dtype(dtype: DType) -> DType:
    """The dtype a floating-point function of ``dtype`` computes in."""
    return dtype if dtype.is_float else dtypes.default_float


def _kind_rank(dtype: DType) -> int:
    return 0 if dtype.is_bool else 2 if dtype.is_float else 1


def weak_scalar_dtype(tensor_dtype: DType, value: Scalar) -> DType:
    """A Python scalar takes the tensor's dtype when it is of the same or a lower kind."""
    value_dtype = dtypes.from_python(value)
    if _kind_rank(value_dtype) <= _kind_rank(tensor_dtype):
        return tensor_dtype
    return value_dtype


def check_scalar_fits(value: Scalar, dtype: DType) -> None:
    """Raise UOpError when the Python integer ``value`` does not fit in the integer ``dtype``."""
    if dtype.is_int and not isinstance(value, bool) and isinstance(value, int) \
            and not dtype.min <= value <= dtype.max:
        raise UOpError(f"the Python integer {value} does not fit in {dtype.name} "
                         f"[{dtype.min}, {dtype.max}]")


def is_scalar(value: Any) -> bool:
    """True for a Python bool, int or float (not a numpy scalar: those carry a dtype of their own)."""
    return isinstance(value, bool | int | float) and not isinstance(value, np.generic)


def as_pair(value: int | Sequence[int], count: int, what: str) -> tuple[int, ...]:
    """``count`` values from one int (repeated) or a sequence of ``count`` (a window's ``what``:
    kernel, stride, dilation per spatial axis)."""
    if isinstance(value, int):
        return (value,) * count
    value = tuple(value)
    if len(value) != count:
        raise UOpError(f"{what} needs {count} values, got {value}")
    return value


# ---------------------------------------------------------------------------------------------
# data buffers and broadcasting


def default_dtype_of(array: np.ndarray, from_list: bool) -> DType:
    """Lists take the default dtypes (bool, int32, float32); numpy arrays keep theirs."""
    if array.dtype.kind == "b":
        return dtypes.bool
    if from_list and array.dtype.kind == "f":
        return dtypes.default_float
    if from_list and array.dtype.kind in "iu":
        return dtypes.default_int
    if array.dtype.name == "bfloat16":  # ml_dtypes' bfloat16 (numpy kind 'V'): its values as float32
        return dtypes.bfloat16
    if array.dtype.kind not in "fiu":
        raise UOpTypeError(f"cannot make a Tensor from numpy data of dtype {array.dtype}")
    return dtypes.from_numpy(array.dtype)


def _known_values(t: TensorLike) -> np.ndarray | None:
    """The values of ``t`` when they are data (a BUFFER made from an array, maybe reshaped, or a
    constant), else None: what can be checked while the graph is built."""
    uop = t.uop
    if uop.op is Ops.RESHAPE:
        uop = uop.src[0]
    if uop.op is Ops.CONST:
        return np.asarray(uop.const_value)
    if uop.op is Ops.BUFFER:
        data = initial_data(uop)
        return None if data is None or data.size != t.numel() else data
    return None


def wrapped_indices(idx: TensorLike, size: int, where: str) -> TensorLike:
    """``idx`` with negative indices counted from the end (``idx + size`` where ``idx < 0``), as numpy;
    indices known now (data) outside ``[-size, size)`` raise IndexError naming the first one."""
    known = _known_values(idx)
    if known is not None and known.size:
        outside = (known < -size) | (known >= size)
        if outside.any():
            position = int(np.flatnonzero(outside.reshape(-1))[0])
            raise IndexError(f"{where}: index {int(known.reshape(-1)[position])} at position {position} is "
                             f"out of range for size {size} (valid: -{size} to {size - 1})")
        if (known >= 0).all():
            return idx
    if idx.dtype.is_unsigned:
        return idx
    return (idx < 0).where(idx + size, idx)


def data_buffer(array: np.ndarray, dtype: DType, device: str) -> UOp:
    """A BUFFER holding ``array`` (registered in :data:`buffer_data`), reshaped to its shape."""
    stored = storage_array(array, dtype)
    buffer = UOp.buffer(int(stored.size), dtype, device)
    buffer_data.register(buffer, stored)
    return buffer.reshape(array.shape) if buffer.shape != array.shape else buffer


def sharded_buffer(array: np.ndarray, dtype: DType, devices: tuple[str, ...], axis: int,
                    stored: bool = False) -> UOp:
    """One BUFFER on the n-tuple device holding the ``n`` slices of ``array`` along ``axis`` one after
    the other, viewed as ``array``'s shape with ``.axis == axis``."""
    count = len(devices)
    shape = array.shape
    if not shape or shape[axis] % count:
        raise UOpError(f"cannot shard shape {shape} on axis {axis} over {count} devices")
    data = array if stored else storage_array(array, dtype)
    slices = np.split(data, count, axis=axis)
    flat = np.concatenate([s.reshape(-1) for s in slices])
    buffer = UOp.buffer(int(flat.size) // count, dtype, devices)
    buffer_data.register(buffer, flat)
    slice_shape = slices[0].shape
    u = buffer.reshape((count, *slice_shape))  # axis 0: the device axis
    order = list(range(1, axis + 1)) + [0] + list(range(axis + 1, len(shape) + 1))
    u = u.permute(order) if order != list(range(len(order))) else u  # device axis next to `axis`
    return u.reshape(shape)


def broadcast_operands(*tensors: TensorLike, op: Ops | None = None) -> list[TensorLike]:
    """Bring every tensor to the common shape with explicit RESHAPE (leading 1s) and EXPAND; ``op``,
    the op the operands are for, is named when they do not broadcast."""
    try:
        shape = broadcast_shape(*(t.shape for t in tensors))
    except UOpError as error:
        raise UOpError(f"{op.name}: {error}" if op is not None else str(error)) from None
    return [t if t.shape == shape else t.expand(shape) for t in tensors]


def check_devices(*tensors: TensorLike) -> None:
    """Raise UOpError when the operands live on different devices (a constant lives on none)."""
    devices = {t.uop.device for t in tensors} - {None}
    if len(devices) > 1:
        raise UOpError(f"operands live on different devices {sorted(map(str, devices))}; copy() one first")


