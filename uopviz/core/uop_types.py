"""The vocabulary a UOp is written in: ``Shape``, ``Device``, :class:`UOpError` and the args of the
source ops (:class:`BufferArg`, :class:`ParamArg`).

They live below :mod:`uopviz.core.uop` so that the modules deriving and printing a UOp's
properties (:mod:`uopviz.core.uop_properties`, :mod:`uopviz.core.uop_printing`) can name them
without importing the UOp class; :mod:`uopviz.core.uop` re-exports every one.
"""

from __future__ import annotations

from dataclasses import dataclass

from uopviz.core.dtype import AddrSpace, DType
from uopviz.core.errors import UopvizError

Shape = tuple[int, ...]
Device = str | tuple[str, ...] | None


class UOpError(UopvizError, ValueError):
    """A malformed UOp: the message names the op, its sources' shapes/dtypes and the problem."""


class UOpTypeError(UOpError, TypeError):
    """A value of a type a UOp or a Tensor cannot take (``Tensor(object())``, a numpy dtype with no
    uopviz dtype): a :class:`UOpError` that is also a ``TypeError``."""


# ---------------------------------------------------------------------------------------------
# args of the source ops


@dataclass(frozen=True)
class BufferArg:
    """Arg of a Buffer: a unique number (two buffers of equal size are still two), size, dtype,
    device and address space."""

    number: int
    size: int
    dtype: DType
    device: Device
    addrspace: AddrSpace = AddrSpace.GLOBAL

    def __repr__(self) -> str:
        return f"buf{self.number}<{self.dtype.name}[{self.size}], {format_device(self.device)}>"


@dataclass(frozen=True)
class ParamArg:
    """Arg of a Param: the slot it is substituted from, dtype, and optional device/address space."""

    slot: int
    dtype: DType
    device: Device = None
    addrspace: AddrSpace | None = None

    def __repr__(self) -> str:
        return f"param{self.slot}<{self.dtype.name}>"



def format_device(device: Device) -> str:
    """``CPU`` or ``(CPU:0,CPU:1)``: a device as the printer writes it."""
    if isinstance(device, tuple):
        return "(" + ",".join(device) + ")"
    return str(device)
