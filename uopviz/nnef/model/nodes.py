"""The nodes of a composed NNEF graph: its tensors (:class:`TensorInfo`) and its operations
(:class:`Operation`, :class:`RuntimeScalarOperation` for a value computed from run-time extents),
and the composites they came from. A loop decided at run time, whose body and condition are graphs
of their own, is :class:`~uopviz.nnef.model.graph.LoopOperation`, beside the graph.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from uopviz.nnef.errors import NNEFError
from uopviz.nnef.syntax import ast

__all__ = [
    "CATEGORIES", "Composite", "Operation", "RuntimeScalarOperation", "TensorInfo", "flatten_names",
    "numpy_dtype_of",
]  # fmt: skip

# SkriptND element type -> numpy type used for tensor data and kernels.
_NUMPY_TYPES = {"real": np.float32, "int": np.int32, "bool": np.bool_}

# Module of an operation -> category shown by viewers (colour key).
CATEGORIES = {
    "layout": "layout", "math": "math", "linalg": "linear algebra", "nn": "neural network",
    "image": "image", "quant": "quantization", "algo": "algorithm", "misc": "misc", "rand": "random",
    "layer": "layer", "control": "control flow", "runtime": "run-time shape",
}  # fmt: skip


def numpy_dtype_of(type_name: str) -> np.dtype:
    """The numpy type that holds tensors of the SkriptND type ``type_name``."""
    try:
        return np.dtype(_NUMPY_TYPES[type_name])
    except KeyError:
        raise NNEFError(f"tensors of type '{type_name}' have no numeric representation") from None


@dataclass(eq=False)
class TensorInfo:
    """A tensor of the graph.

    ``dtype`` is the SkriptND element type (``real``, ``int``, ``bool``); ``shape`` a tuple of
    ints, with :class:`~uopviz.nnef.evaluation.values.DynamicExtent` for extents only known at run
    time. ``kind`` is ``input``, ``output``, ``variable``, ``constant`` or ``intermediate``;
    ``data`` holds the values of constants and of variables read from ``.dat`` files.
    """

    name: str
    dtype: str
    shape: tuple
    kind: str = "intermediate"
    data: np.ndarray | None = None
    quantization: dict | None = None
    position: ast.Position = ast.NOWHERE
    serial: int = 0
    producer: Operation | None = field(default=None, repr=False)

    @property
    def rank(self) -> int:
        """The number of dimensions."""
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        """Whether every extent is known at compile time."""
        return all(isinstance(extent, int) for extent in self.shape)

    @property
    def numpy_dtype(self) -> np.dtype:
        """The numpy type of this tensor's data."""
        return numpy_dtype_of(self.dtype)

    @property
    def upper_shape(self) -> tuple[int, ...]:
        """The shape with each run-time extent replaced by its upper bound (for allocation)."""
        out = []
        for extent in self.shape:
            if isinstance(extent, int):
                out.append(extent)
            elif getattr(extent, "bound", None) is not None:
                out.append(int(extent.bound))
            else:
                raise NNEFError(f"tensor '{self.name}' has a run-time extent without an upper bound")
        return tuple(out)

    def __repr__(self) -> str:
        shape = ", ".join(str(extent) for extent in self.shape)
        return f"TensorInfo({self.name!r}, {self.dtype}[{shape}], {self.kind})"


@dataclass(eq=False)
class Operation:
    """One leaf operation: an invocation of an operator with a ``@lower`` body or an intrinsic.

    ``type`` is the qualified operator name (``nn.conv``); ``inputs`` / ``outputs`` follow the
    operator's declarations: a tensor name, a list of names (a tensor pack) or None (an omitted
    optional input). ``attribs`` are the evaluated attribute values (defaults included),
    ``dtypes`` the bound generic types, ``label`` the qualified invocation label, ``scopes`` the
    labels of the composites it was expanded from (outermost first).
    """

    type: str
    attribs: dict[str, Any]
    inputs: tuple
    outputs: tuple
    label: str
    definition: ast.Definition = field(repr=False)
    dtypes: dict[str, str] = field(default_factory=dict)
    position: ast.Position = field(default=ast.NOWHERE, repr=False)
    scopes: tuple[str, ...] = ()
    constants: dict[str, str] = field(default_factory=dict)
    symbols: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def module(self) -> str:
        """The module that defines the operator (``nn`` for ``nn.conv``)."""
        return self.type.rpartition(".")[0]

    @property
    def name(self) -> str:
        """The operator's name without its module."""
        return self.type.rpartition(".")[2]

    @property
    def category(self) -> str:
        """A coarse category for colouring: the standard module's theme, else the module name."""
        return CATEGORIES.get(self.module, self.module or "user")

    @property
    def is_intrinsic(self) -> bool:
        """Whether the operator has no ``@lower`` formula (its kernels are built in)."""
        return not self.definition.lowerings

    def input_names(self) -> list[str]:
        """Every tensor name read (packs flattened, constants of the operator included)."""
        return [*flatten_names(self.inputs), *self.constants.values()]

    def output_names(self) -> list[str]:
        """Every tensor name written (packs flattened)."""
        return list(flatten_names(self.outputs))

    def definition_text(self) -> str:
        """The SkriptND text of the operator's definition (canonical form)."""
        from uopviz.nnef.syntax.printer import print_definition

        return print_definition(self.definition)


@dataclass(eq=False)
class RuntimeScalarOperation(Operation):
    """A rank-0 tensor computed at run time from data-dependent extents (type ``runtime.scalar``).

    §3.1: after an operation whose output extent the data decides, the shape expressions of later
    operations must be computed during execution. Where such an expression is passed as a tensor
    (mean_reduce divides by ``real(s[axes] * ..)``), the composer makes it this operation:
    ``attribs["value"]`` is the :class:`~uopviz.nnef.evaluation.values.RuntimeScalar` (or
    :class:`~uopviz.nnef.evaluation.values.DynamicExtent`), and its kernel computes it from the counters.
    """

    @property
    def is_intrinsic(self) -> bool:
        """Its kernel is built in (it reads counters, not tensors)."""
        return True

    def definition_text(self) -> str:
        """The value as a symbolic expression of run-time extents."""
        return f"{self.dtypes.get('T', '')} {self.attribs['value']!r}  # computed at run time"


def flatten_names(values: tuple | list) -> list[str]:
    """The tensor names in ``values`` (names, and lists or tuples of them, nested), in order."""
    out: list[str] = []
    for value in values:
        if isinstance(value, list | tuple):
            out.extend(flatten_names(value))
        elif value is not None:
            out.append(value)
    return out


@dataclass(eq=False)
class Composite:
    """An invocation of a composite operator that was expanded into ``operations``."""

    type: str
    label: str
    attribs: dict[str, Any]
    inputs: tuple
    outputs: tuple
    definition: ast.Definition = field(repr=False)
    position: ast.Position = field(default=ast.NOWHERE, repr=False)
    scopes: tuple[str, ...] = ()
