"""What an optimization is: :class:`OptOp`, :class:`Opt` (checked when it is made), :class:`OptError`,
and the opts as plain JSON data (tuning records, the BEAM cache, the tuner's copy and paste).

Whether an opt fits a kernel is :meth:`uopviz.passes.optops.kernel.Kernel.apply`'s to check; the
functions that apply each OptOp are in ``axes.py`` (SPLIT, PADTO, SWAP, NOLOCALS) and
``tensor_cores.py`` (TC).  They take the kernel they shape as a :class:`ShapedKernel`, the part of
:class:`~uopviz.passes.optops.kernel.Kernel` they read, so that they never import ``kernel.py``, which
imports them to dispatch (the OptOps' modules point one way: opts <- axes <- tensor cores <- Kernel).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from uopviz.core.errors import UopvizError
from uopviz.core.ops import AxisType

if TYPE_CHECKING:
    from uopviz.core.uop import UOp


class OptError(UopvizError, ValueError):
    """An optimization that cannot apply to this kernel; the message says which rule it breaks."""


class ShapedKernel(Protocol):
    """What the functions applying an OptOp read of the kernel they shape (a
    :class:`~uopviz.passes.optops.kernel.Kernel` is one)."""

    ast: UOp
    backend: str
    opts: tuple[Opt, ...]

    @property
    def name(self) -> str:
        """The kernel's name (``r_g16_R8``): error messages name the kernel by it."""

    @property
    def ranges(self) -> list[UOp]:
        """The RANGE UOps in kernel order."""

    @property
    def axes(self) -> tuple[tuple[int, AxisType], ...]:
        """``(size, AxisType)`` of every axis, in kernel order."""

    @property
    def nolocals(self) -> bool:
        """True once NOLOCALS was applied."""

    @property
    def backend_object(self) -> Any:
        """The Backend the kernel is shaped for."""

    def axes_text(self) -> str:
        """The axes as error messages list them: ``[0: GLOBAL 16, 1: REDUCE 8]``."""

    def with_ast(self, ast: UOp) -> ShapedKernel:
        """This kernel's backend, opts and name hint on another AST."""


class OptOp(enum.Enum):
    """The spec's kernel optimizations."""

    SPLIT = "SPLIT"
    PADTO = "PADTO"
    SWAP = "SWAP"
    NOLOCALS = "NOLOCALS"
    TC = "TC"


@dataclass(frozen=True)
class Opt:
    """One optimization ``(op, axis, arg)`` as the spec writes it.

    Its fields are checked when it is made (:class:`OptError` otherwise): ``op`` an :class:`OptOp`,
    ``axis`` an int or None (not a bool), ``arg`` None, an int or a tuple of ints, bools and
    AxisTypes. Integers of other types (numpy's) become ints. Whether it fits a kernel is
    :meth:`Kernel.apply`'s to check.
    """

    op: OptOp
    axis: int | None = None
    arg: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.op, OptOp):
            named = isinstance(self.op, str) and self.op in OptOp.__members__
            named = f"; write OptOp.{self.op}" if named else ""
            raise OptError(f"an Opt's op is an OptOp ({', '.join(OptOp.__members__)}), got "
                           f"{type(self.op).__name__} {self.op!r}{named}")  # fmt: skip
        object.__setattr__(self, "axis", _checked_integer(self, "axis", self.axis))
        arg = self.arg
        if isinstance(arg, tuple):
            arg = tuple(_checked_arg_item(self, item) for item in arg)
        elif arg is not None:
            arg = _checked_integer(self, "arg", arg)
        object.__setattr__(self, "arg", arg)

    def __repr__(self) -> str:
        arg = self.arg
        if isinstance(arg, tuple):
            arg = "(" + ", ".join(a.name if isinstance(a, AxisType) else repr(a) for a in arg) + ")"
        return f"Opt({getattr(self.op, 'name', self.op)}, {self.axis}, {arg})"


def _checked_integer(opt: Opt, field: str, value: Any) -> int | None:
    """``value`` as an int (None stays None); a bool or a non-integer is an OptError."""
    if value is None:
        return None
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        kind = "an int, a tuple or None" if field == "arg" else "an int or None"
        raise OptError(f"Opt({opt.op.name}, ...): its {field} is {kind}, got {type(value).__name__} "
                       f"{_short(value)}")  # fmt: skip
    return int(value)


def _checked_arg_item(opt: Opt, item: Any) -> Any:
    """An item of a tuple arg: an AxisType, a bool (SPLIT's top) or an int."""
    if isinstance(item, AxisType | bool | np.bool_):
        return bool(item) if isinstance(item, np.bool_) else item
    if isinstance(item, int | np.integer):
        return int(item)
    raise OptError(f"Opt({opt.op.name}, ...): an item of its arg is an int, a bool or an AxisType, got "
                   f"{type(item).__name__} {_short(item)}")  # fmt: skip


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# ---------------------------------------------------------------------------------------------
# opts as JSON data


def opts_to_json(opts: Sequence[Opt]) -> list:
    """Opts as plain JSON data: ``[op, axis, arg]`` with AxisTypes by name."""

    def arg_data(arg: Any) -> Any:
        if isinstance(arg, AxisType):
            return {"axis_type": arg.name}
        if isinstance(arg, tuple):
            return [arg_data(a) for a in arg]
        return arg

    return [[o.op.name, o.axis, arg_data(o.arg)] for o in opts]


def opts_from_json(data: Iterable) -> tuple[Opt, ...]:
    """The inverse of :func:`opts_to_json`."""

    def arg_value(arg: Any) -> Any:
        if isinstance(arg, dict) and "axis_type" in arg:
            return AxisType[arg["axis_type"]]
        if isinstance(arg, list):
            return tuple(arg_value(a) for a in arg)
        return arg

    out = []
    for entry in data:
        if not (isinstance(entry, list | tuple) and len(entry) == 3):
            raise ValueError(f"an opt is [op, axis, arg], got {entry!r}")
        op, axis, arg = entry
        if op not in OptOp.__members__:
            raise ValueError(f"unknown OptOp {op!r}; known: {', '.join(OptOp.__members__)}")
        out.append(Opt(OptOp[op], axis, arg_value(arg)))
    return tuple(out)


__all__ = ["Opt", "OptError", "OptOp", "ShapedKernel", "opts_from_json", "opts_to_json"]
