"""The vocabulary a UOp is written in: ``Shape``, ``Device``, :class:`UOpError` and the args of the
source ops (:class:`BufferArg`, :class:`ParamArg`).

They live below :mod:`uopviz.core.uop` so that the modules deriving and printing a UOp's
properties (:mod:`uopviz.core.uop_properties`, :mod:`uopviz.core.uop_printing`) can name them
without importing the UOp class; :mod:`uopviz.core.uop` re-exports every one.  Those modules read a
UOp through :class:`UOpNode`, the fields and walks they use, so the UOp class is made of parts that
never import it back.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from uopviz.core.dtype import AddrSpace, DType
from uopviz.core.errors import UopvizError
from uopviz.core.ops import Ops

Shape = tuple[int, ...]
Device = str | tuple[str, ...] | None


class UOpError(UopvizError, ValueError):
    """A malformed UOp: the message names the op, its sources' shapes/dtypes and the problem."""


class UOpTypeError(UOpError, TypeError):
    """A value of a type a UOp or a Tensor cannot take (``Tensor(object())``, a numpy dtype with no
    uopviz dtype): a :class:`UOpError` that is also a ``TypeError``."""


class UOpNode(Protocol):
    """A UOp as the rules deriving its properties and the printer read it: its fields, its sources'
    derived values and a walk of its graph (:class:`~uopviz.core.uop.UOp` is the one class that
    is one).  Derived values a rule reads of a source on first use are in the source's ``__dict__``
    (``_device``, ``_min_max``, ``_axis``), set by :func:`~uopviz.core.uop.derived_attribute`."""

    op: Ops
    src: tuple[UOpNode, ...]
    arg: Any
    tag: Any
    dtype: DType
    shape: Shape
    __dict__: dict[str, Any]

    def toposort(self) -> Iterable[UOpNode]:
        """The graph under this node, each node after its sources."""


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
