"""The SkriptND graph text being written for one NNEF 1.0 graph (:class:`Translation`): SkriptND
names of the 1.0 tensors, arguments and literals, fresh temporaries, and the ``@compose`` lines,
each tagged with the 1.0 operation it comes from.  The per-operation translators that fill it are in
:mod:`uopviz.nnef.nnef1.operations` and :mod:`uopviz.nnef.nnef1.compound`."""

from __future__ import annotations

import math
from typing import Any

from uopviz.nnef.errors import NNEFError
from uopviz.nnef.syntax.lexer import KEYWORDS

#: The SkriptND type of each NNEF 1.0 scalar type.
SKRIPTND_TYPES = {"scalar": "real", "integer": "int", "logical": "bool"}


def import_nnef() -> Any:
    """The ``nnef`` package (the Khronos NNEF 1.0 parser), or an NNEFError saying to install it."""
    try:
        import nnef
    except ImportError as error:  # pragma: no cover - the package is a dependency
        raise NNEFError("reading NNEF 1.0 needs the 'nnef' package (pip install nnef)") from error
    return nnef


def nnef_shapes() -> Any:
    """The ``nnef`` package's shape functions (``nnef.shapes``)."""
    return import_nnef().shapes


def literal(value: Any) -> str:
    """A Python value (from the nnef parser) as SkriptND text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value) if value >= 0 else f"({value})"
    if isinstance(value, float):
        if math.isinf(value):
            return "inf" if value > 0 else "(-inf)"
        text = repr(float(value))
        return text if value >= 0 else f"({text})"
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(literal(item) for item in value) + "]"
    raise NNEFError(f"cannot express the NNEF 1.0 value {value!r} in SkriptND")


class Translation:
    """The SkriptND graph being written for one NNEF 1.0 graph."""

    def __init__(self, graph: Any) -> None:
        self.graph = graph
        self.lines: list[str] = []
        self.inputs: list[str] = []
        self.variables: list[str] = []
        self.constants: list[str] = []
        self.labels: dict[str, str] = {}
        self.names: dict[str, str] = {}  # 1.0 tensor name -> SkriptND identifier
        self._temporaries = 0
        self.uses_helpers = False  # the text imports the helper module nnef1 (nnef1.sknd)
        self.updates: list[str] = []
        self.index = 0
        self.op_name = ""

    # -- names and values -------------------------------------------------------------------------

    def name(self, tensor: str) -> str:
        """A SkriptND identifier for a 1.0 tensor name (keywords get a trailing underscore)."""
        found = self.names.get(tensor)
        if found is None:
            found = f"{tensor}_" if tensor in KEYWORDS else str(tensor)
            self.names[tensor] = found
        return found

    def arg(self, value: Any) -> str:
        """An argument: a tensor name, a literal, or a list of them."""
        if isinstance(value, list):
            return "[" + ", ".join(self.arg(item) for item in value) + "]"
        if self.is_tensor(value):
            return self.name(value)
        return literal(value)

    def operand(self, value: Any) -> str:
        """Like :meth:`arg`, but a string that is no 1.0 tensor is already a SkriptND name."""
        if isinstance(value, str) and not self.is_tensor(value):
            return value
        return self.arg(value)

    def is_tensor(self, value: Any) -> bool:
        """Whether ``value`` names a tensor of the 1.0 graph (else it is a literal)."""
        return type(value).__name__ == "Identifier" or (
            isinstance(value, str) and value in self.graph.tensors and not isinstance(value, bool)
        )

    def shape(self, value: Any) -> list[int]:
        """The shape of a tensor argument (a literal is rank 0)."""
        if self.is_tensor(value):
            shape = self.graph.tensors[value].shape
            if shape is None:
                raise NNEFError(f"the shape of NNEF 1.0 tensor '{value}' is unknown")
            return list(shape)
        return []

    def temporary(self) -> str:
        """A fresh name for an intermediate tensor of a multi-line translation."""
        self._temporaries += 1
        return f"__t{self._temporaries}"

    def emit(self, results: str, invocation: str) -> None:
        """One @compose line, tagged with the 1.0 operation it comes from."""
        self.lines.append(
            f"        {results} = {invocation};  # NNEF 1.0 operation {self.index}: {self.op_name}"
        )

    def emit_helper(self, results: str, invocation: str) -> None:
        """:meth:`emit` for an operator of the helper module ``nnef1`` (the text imports it)."""
        self.uses_helpers = True
        self.emit(results, invocation)

    def result_name(self, op: Any, key: str | None = None) -> str:
        """The 1.0 name of an operation's (first, or ``key``) result."""
        outputs = op.outputs
        return outputs[key] if key is not None else next(iter(outputs.values()))

    def result(self, op: Any, key: str | None = None) -> str:
        outputs = op.outputs
        value = outputs[key] if key is not None else next(iter(outputs.values()))
        if isinstance(value, list):
            return "[" + ", ".join(self.name(item) for item in value) + "]"
        return self.name(value)
