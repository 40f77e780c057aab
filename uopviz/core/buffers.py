"""The initial contents of BUFFERs made from data, and how a buffer of each dtype stores values.

The front end (``Tensor(array)``) registers data here; the engine reads it when it runs a program.
Both sit above this module, so neither imports the other for it.
"""

from __future__ import annotations

import weakref

import numpy as np

from uopviz.core.dtype import DType, dtypes
from uopviz.core.ops import Ops
from uopviz.core.uop import UOp


class BufferData:
    """The registry of the initial contents of BUFFERs made from data: ``BUFFER UOp → numpy array``.

    Entries are keyed by the buffer's unique number (``BufferArg.number``), so a re-tagged copy of
    a buffer finds the same data, and an entry is dropped when its BUFFER UOp is freed (a
    ``weakref.finalize`` on the UOp): the registry never keeps a graph alive.  Arrays are flat,
    read-only, of the buffer's full size (``n*size`` on an ``n``-tuple device, device-major) and of
    the dtype's numpy type (``bfloat16`` is stored as its ``uint16`` bit patterns).
    """

    def __init__(self) -> None:
        self._arrays: dict[int, np.ndarray] = {}

    def __getitem__(self, buffer: UOp) -> np.ndarray:
        found = self.get(buffer)
        if found is None:
            raise KeyError(f"no initial data for {buffer!r}")
        return found

    def __contains__(self, buffer: UOp) -> bool:
        return self.get(buffer) is not None

    def __len__(self) -> int:
        return len(self._arrays)

    def get(self, buffer: UOp, default: np.ndarray | None = None) -> np.ndarray | None:
        """The initial contents of ``buffer``, or ``default`` when it has none (an ``empty`` one)."""
        if not isinstance(buffer, UOp) or buffer.op is not Ops.BUFFER:
            raise TypeError(f"buffer_data is keyed by BUFFER UOps, got {buffer!r}")
        return self._arrays.get(buffer.arg.number, default)

    def register(self, buffer: UOp, array: np.ndarray) -> None:
        """Record ``array`` (flat, of the buffer's full size) as the initial contents of ``buffer``."""
        if buffer.op is not Ops.BUFFER:
            raise TypeError(f"only a BUFFER holds data, got {buffer.op.name}")
        expected = buffer.shape[0]
        if array.size != expected:
            raise ValueError(f"{buffer!r} holds {expected} elements, the data has {array.size}")
        stored = np.ascontiguousarray(array.reshape(-1))
        stored.flags.writeable = False
        number = buffer.arg.number
        self._arrays[number] = stored
        weakref.finalize(buffer, self._arrays.pop, number, None)


buffer_data = BufferData()


def initial_data(buffer: UOp) -> np.ndarray | None:
    """The initial contents of a BUFFER made from data (flat, read-only), or None (``empty``).

    This is how the engine fills input buffers when it runs a program.
    """
    return buffer_data.get(buffer)


def storage_array(array: np.ndarray, dtype: DType) -> np.ndarray:
    """``array`` converted to how a buffer of ``dtype`` stores it (bfloat16: its uint16 bit patterns,
    rounded to nearest even)."""
    if dtype is dtypes.bfloat16:
        bits = np.ascontiguousarray(array, dtype=np.float32).view(np.uint32)
        rounding = ((bits >> 16) & 1) + np.uint32(0x7FFF)  # round to nearest even
        return ((bits + rounding) >> 16).astype(np.uint16)
    if dtype.numpy_name is None:
        raise TypeError(f"a buffer of {dtype.name} cannot hold data")
    return np.asarray(array).astype(dtype.numpy_name)


__all__ = ["BufferData", "buffer_data", "initial_data", "storage_array"]
