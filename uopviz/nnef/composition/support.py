"""The composer's records and free helpers: definition facts (cached), the state of one invocation and
of one block, the limits of composition, and small functions on values and shapes.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from uopviz.core.limits import MemoryLimitError, check_allocation
from uopviz.nnef.composition.stdlib import STDLIB_DIR, ModuleSet
from uopviz.nnef.errors import NNEFError
from uopviz.nnef.evaluation.expressions import Evaluator
from uopviz.nnef.evaluation.scalar_ops import widest_extent
from uopviz.nnef.evaluation.values import DynamicExtent, RuntimeScalar, format_value
from uopviz.nnef.graph import (
    Graph,
    LoopOperation,
    TensorInfo,
)
from uopviz.nnef.syntax import ast
from uopviz.nnef.syntax.ast import identifiers

CONCRETE_TYPES = ("int", "real", "bool", "str")
ABSTRACT_TYPES = {
    "type": ("int", "real", "bool", "str"),
    "arith": ("int", "real", "bool"),
    "num": ("int", "real"),
}
MISSING = object()
RESULT_DEFINITION = ast.Definition("<result>")  # scope for checking declared result types
RUNTIME_SCALAR_DEFINITION = ast.Definition("scalar")  # the operation of a value computed at run time
_STDLIB_PREFIX = str(STDLIB_DIR)

VariableLoader = Callable[[str, TensorInfo], "np.ndarray | None"]


# ------------------------------------------------------------------------------------------------
# static analysis of definitions (cached)


def _type_identifiers(spec: ast.TypeSpec) -> set[str]:
    names: set[str] = set(identifiers(spec.rank))
    if spec.pack is not None:
        names |= identifiers(spec.pack.count)
    if spec.shape is not None:
        for extent in spec.shape.extents:
            names |= identifiers(extent.value) | identifiers(extent.bound)
            if extent.pack is not None:
                names |= identifiers(extent.pack.count)
    return names


class DefinitionInfo:
    """What the composer needs to know about one operator definition, computed once."""

    _cache: dict[int, DefinitionInfo] = {}

    def __init__(self, definition: ast.Definition, module_name: str) -> None:
        self.definition = definition
        self.module_name = module_name
        self.qualified = f"{module_name}.{definition.name}" if module_name else definition.name
        self.attrib_names = frozenset(param.name for param in definition.attribs)
        self.using_names = frozenset(
            name for using in definition.usings for name in target_names(using.target)
        )
        self.input_symbols: set[str] = set()
        for param in definition.inputs:
            self.input_symbols |= _type_identifiers(param.type)
        self.input_symbols -= self.attrib_names | self.using_names
        declared: set[str] = set(self.attrib_names) | self.using_names | self.input_symbols
        for param in (
            *definition.attribs,
            *definition.inputs,
            *definition.outputs,
            *definition.constants,
            *definition.variables,
        ):
            declared.add(param.name)
            declared |= _type_identifiers(param.type)
        self.declared = frozenset(declared)
        generics = {param.name for param in definition.dtypes}
        self.constant_default = {
            param.name: param.default is not None
            and not identifiers(param.default)
            and not any(
                isinstance(node, ast.Cast) and node.type_name in generics for node in ast.walk(param.default)
            )
            for param in definition.attribs
        }  # a default like T(0) waits until the generic T is bound
        # An operator with both a @compose and a @lower block (chapter 3 lets a compiler decompose an
        # operator or not) is decomposed, unless an input has an extent decided at run time: a
        # composition may need that extent at compile time (cumsum unstacks its axis into a pack),
        # the @lower formula reads it from the counters.
        self.is_leaf = not definition.components
        self.lowers_runtime_extents = bool(definition.lowerings and definition.components)
        # §2.9: an assertion is checked right before the first @using entry after the last one it
        # depends on (-1: before any); a static schedule of the interleaving.
        last_using = {
            name: index
            for index, using in enumerate(definition.usings)
            for name in target_names(using.target)
        }
        self.assert_schedule = sorted(
            (
                max(
                    (last_using[name] for name in identifiers(assertion.condition) if name in last_using),
                    default=-1,
                ),
                index,
            )
            for index, assertion in enumerate(definition.asserts)
        )
        self.dtype_params = {param.name: param for param in definition.dtypes}

    @classmethod
    def of(cls, definition: ast.Definition, module_name: str) -> DefinitionInfo:
        """The (cached) info of ``definition`` from module ``module_name``."""
        info = cls._cache.get(id(definition))
        if info is None or info.definition is not definition:
            info = cls(definition, module_name)
            cls._cache[id(definition)] = info
        return info


def target_names(target: ast.Expr) -> list[str]:
    """The names a ``using`` or result target binds (identifiers, in lists, expansions and zips)."""
    if isinstance(target, ast.Identifier):
        return [target.name]
    if isinstance(target, ast.List):
        return [name for item in target.items for name in target_names(item)]
    if isinstance(target, ast.Expand):
        return target_names(target.value)
    if isinstance(target, ast.Zip):
        return [name for item in target.items for name in target_names(item)]
    return []


def in_stdlib(file: str | None) -> bool:
    """Whether ``file`` is one of the standard modules."""
    return bool(file) and file.startswith(_STDLIB_PREFIX)


def describe_type(spec: ast.TypeSpec) -> str:
    """``spec`` as SkriptND writes it, for messages."""
    from uopviz.nnef.syntax.printer import type_spec_text

    return type_spec_text(spec)


class Describe:
    """'op: attribute 'x' (type)' for messages, built only when a message is built."""

    __slots__ = ("instance", "kind", "param")

    def __init__(self, instance: Instance, param: ast.Param, kind: str = "attribute") -> None:
        self.instance = instance
        self.param = param
        self.kind = kind

    def __str__(self) -> str:
        return f"{self.instance.name}: {self.kind} '{self.param.name}' ({describe_type(self.param.type)})"

    __format__ = lambda self, spec: str(self)  # noqa: E731 - f-strings use __format__


# ------------------------------------------------------------------------------------------------
# the state of one invocation


@dataclass
class Instance:
    """The symbols of one operator invocation while it is being instantiated."""

    info: DefinitionInfo
    position: ast.Position
    label: str
    symbols: dict[str, Any] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    attribs: dict[str, Any] = field(default_factory=dict)
    inputs: dict[str, Any] = field(default_factory=dict)
    done_usings: set[int] = field(default_factory=set)
    done_asserts: set[int] = field(default_factory=set)

    def evaluator(self, symbols: Mapping[str, Any] | None = None) -> Evaluator:
        """An evaluator over this invocation's symbols (or an overlay of them)."""
        if symbols is None:
            cached = self.__dict__.get("_evaluator")
            if cached is None:
                cached = self.__dict__["_evaluator"] = Evaluator(self.symbols, self.info.declared, self.types)
            return cached
        return Evaluator(symbols, self.info.declared, self.types)

    @property
    def name(self) -> str:
        """The qualified operator name."""
        return self.info.qualified

    def declaration(self, name: str) -> bool:
        """Whether an unbound ``name`` in an input shape declares a new shape symbol."""
        return (
            name not in self.symbols
            and name not in self.info.using_names
            and name not in self.info.attrib_names
        )


@dataclass
class Frame:
    """A composition context: the symbols visible in a @compose block and where tensors go."""

    module_name: str
    symbols: Any  # dict or ChainMap
    types: dict[str, str]
    scope: str  # prefix of tensor names created here ('' or 'label.')
    declared: frozenset[str]
    scopes: tuple[str, ...] = ()

    def evaluator(self) -> Evaluator:
        """An evaluator over the frame's symbols."""
        return Evaluator(self.symbols, self.declared, self.types)


# ------------------------------------------------------------------------------------------------
# what the composer's parts ask of the composer


class ComposesValues(Protocol):
    """The composition of values, as the parts that compose inside a statement (a loop's body, a
    graph's @update, a graph output's copy) ask it of the
    :class:`~uopviz.nnef.composition.composer.Composer` that owns them."""

    def compose_callable(
        self,
        value: ast.Callable,
        frame: Frame,
        names: list[str | None],
        position: ast.Position,
        lengths: list[int | None] | None = None,
    ) -> list:
        """The values of the right-hand side ``value`` (an invocation, block, branch, loop or
        expression) composed in ``frame``; ``names`` are the results it is assigned to."""

    def call(
        self,
        operator: str,
        args: list[Any],
        frame: Frame,
        scope: str,
        name: str,
        position: ast.Position,
        attribs: tuple = (),
    ) -> Any:
        """The result, named ``name``, of the standard operator ``operator`` invoked on ``args``."""

    def select(
        self, condition: TensorInfo, a: Any, b: Any, frame: Frame, name: str, position: ast.Position
    ) -> Any:
        """``condition ? a : b`` of tensors (packs item by item)."""

    def as_tensor_value(self, value: Any, frame: Frame, name: str | None, position: ast.Position) -> Any:
        """``value`` as tensors: literals and run-time scalars become rank-0 tensors."""


def resolve_operator(
    modules: ModuleSet, name: str, module_name: str, position: ast.Position
) -> DefinitionInfo:
    """The operator ``name`` invoked in module ``module_name``: a qualified name through the module's
    imports, an unqualified one in the module itself."""
    module = modules.get(module_name)
    target_module, _, operator = name.rpartition(".")
    if not target_module:
        target_module = module_name
    elif target_module != module_name and target_module not in {item.module for item in module.imports}:
        raise NNEFError.at(
            position,
            f"unknown operator '{name}': module '{target_module}' is not imported "
            f"by {module_name} (add 'import {target_module};')",
        )
    target = modules.get(target_module, position)
    for definition in target.definitions:
        if definition.name == operator:
            return DefinitionInfo.of(definition, target_module)
    names = [definition.name for definition in target.definitions]
    close = difflib.get_close_matches(operator, names, n=3)
    hint = f"; did you mean {', '.join(repr(f'{target_module}.{c}') for c in close)}?" if close else ""
    raise NNEFError.at(
        position,
        f"unknown operator '{name}': module '{target_module}' has no operator '{operator}'{hint}",
    )


# ------------------------------------------------------------------------------------------------
# helpers


def element_type(instance: Instance, spec: ast.TypeSpec) -> str | None:
    """The element type ``spec`` names for ``instance``: a concrete type, a generic bound by the
    invocation, or None for an abstract one."""
    if spec.name in CONCRETE_TYPES:
        return spec.name
    if spec.name in instance.info.dtype_params:
        return instance.types.get(spec.name)
    if spec.name in ABSTRACT_TYPES:
        return None
    raise NNEFError.at(spec.pos, f"unknown type '{spec.name}'")


def operator_name(info: DefinitionInfo) -> str:
    """An operator's name as the main module writes it: unqualified there, qualified elsewhere."""
    return info.definition.name if info.module_name == "main" else info.qualified


def rename_captured(op: LoopOperation, old: str, new: str) -> None:
    """A tensor of the enclosing graph renamed: the loop's sub-graphs read it by its new name."""
    if old not in op.captures:
        return
    op.captures = tuple(replace_name(list(op.captures), old, new))
    for graph in op.subgraphs.values():
        if old not in graph.captures:
            continue
        graph.captures = replace_name(graph.captures, old, new)
        graph.tensors = {new if n == old else n: t for n, t in graph.tensors.items()}
        graph.outputs = replace_name(graph.outputs, old, new)
        for inner in graph.operations:
            inner.inputs = replace_name(inner.inputs, old, new)
            if isinstance(inner, LoopOperation):
                rename_captured(inner, old, new)


def first_name(group: ast.Result | ast.ResultList | ast.ResultTuple) -> str | None:
    """The first name a result group binds (None where it binds none)."""
    if isinstance(group, ast.Result):
        return group.name
    return next((name for item in group.items if (name := first_name(item))), None)


def names_of(value: Any) -> Any:
    """``value`` with its tensors as their names and other values as text (packs item by item),
    for messages."""
    if value is None:
        return None
    if isinstance(value, list):
        return [names_of(item) for item in value]
    if isinstance(value, TensorInfo):
        return value.name
    return format_value(value)


def replace_name(values: Any, old: str, new: str) -> Any:
    """``values`` (a name, or tuples and lists of them, nested) with ``old`` replaced by ``new``."""
    if isinstance(values, tuple):
        return tuple(replace_name(value, old, new) for value in values)
    if isinstance(values, list):
        return [replace_name(value, old, new) for value in values]
    return new if values == old else values


def shape_of(value: Any) -> list:
    """The shape an argument binds a tensor input with (a literal is a rank-0 tensor)."""
    if isinstance(value, TensorInfo):
        return list(value.shape)
    return []  # a literal argument is a rank-0 tensor


def pack_shapes(pack: list) -> list[list]:
    """The shapes a pack's items bind an operator's input with: where items of one rank have
    different run-time extents on an axis (the results of loops with different run-time counts,
    the per-item LSTMs of ``nn.lstm`` with ``steps``), every item binds their maximum (``>?``), so a
    stack or a sum of them keeps each item's extent; each item's values past its own extent are
    unspecified, as they are past a loop's count."""
    shapes = [shape_of(item) for item in pack]
    if len({len(shape) for shape in shapes}) != 1:
        return shapes
    widened = list(shapes[0])
    for axis, extents in enumerate(zip(*shapes, strict=True)):
        if all(isinstance(extent, DynamicExtent) for extent in extents) and len(set(extents)) > 1:
            widened[axis] = widest_extent(list(dict.fromkeys(extents)))
    return [widened] * len(shapes) if widened != shapes[0] else shapes


def import_extents(graph: Graph, fresh: dict[Any, tuple]) -> None:
    """Make a loop's body or condition read the run-time extents of its inputs and captures: each
    one gets a counter buffer of the sub-graph (``graph.counts``), which the runner fills on every
    iteration (``graph.extent_inputs``: the enclosing graph's extent, or where a varying extent of
    a carried value is kept)."""
    sources = [graph.tensors[name] for name in [*graph.inputs, *graph.captures]]
    for tensor in sources:
        for extent in tensor.shape:
            if isinstance(extent, DynamicExtent) and extent.key not in graph.counts:
                counter = f"{graph.name}#extent{len(graph.counts)}"
                graph.counts[extent.key] = counter
                graph.extent_inputs[counter] = fresh.get(extent.key, extent)


def imported_keys(sources: list) -> set:
    """The keys of the run-time extents among ``sources``."""
    return {source.key for source in sources if isinstance(source, DynamicExtent)}


def evaluable(key: Any, imported: set) -> bool:
    """Whether an extent of a loop's sub-graph can be computed outside the loop: built of the
    enclosing graph's extents only."""
    if key in imported or (isinstance(key, int | float) and not isinstance(key, bool)):
        return True
    if isinstance(key, tuple) and len(key) in (2, 3, 4) and isinstance(key[0], str):
        return all(evaluable(item, imported) for item in key[1:])
    return False


def check_constant_size(shape: tuple, dtype: np.dtype, name: str, position: ast.Position) -> None:
    """A constant's data must fit the memory limit; checked before it is allocated."""
    count = math.prod(shape)
    try:
        check_allocation(count * dtype.itemsize, f"constant '{name}' of shape {list(shape)} ({dtype})")
    except MemoryLimitError as error:
        raise NNEFError.at(position, str(error)) from None


def filled_array(shape: tuple, value: Any, dtype: np.dtype, name: str, position: ast.Position) -> np.ndarray:
    """A constant of ``shape`` filled with ``value``: its size checked against the memory limit first,
    and a value its type cannot hold (``2147483648`` as int32) a located error."""
    check_constant_size(shape, dtype, name, position)
    try:
        return np.full(shape, value, dtype=dtype)
    except (OverflowError, ValueError, TypeError) as error:
        raise NNEFError.at(position, f"constant '{name}': {format_value(value)} cannot be a {dtype} "
                                     f"value ({error})") from None  # fmt: skip


#: Extents index with 64-bit integers: a tensor's extent is below 2**62, so sizes and offsets of a
#: few of them cannot overflow.
MAX_EXTENT = 1 << 62

#: The most elements of a constant given by a formula of its indices (``c: real[n] = i * 2, i < n``):
#: each is evaluated at compose time, about 30 µs apiece.
MAX_FORMULA_ELEMENTS = 1 << 18

#: The most iterations of a loop unrolled at compose time (about 2 ms per copy of a small body).
MAX_UNROLLED_ITERATIONS = 4096

#: An operator with both a @compose and a @lower block is lowered when an input extent exceeds this:
#: a composition may unroll an axis (cumsum unstacks it into one operation per item), so composing
#: it would take work and operations in proportion to the extent, not to the graph's size. (Lowered,
#: cumsum is one scan kernel of ``n`` additions per row: :mod:`uopviz.nnef.lowering.scan`.)
DECOMPOSE_EXTENT_LIMIT = 64


def prefers_lowering(instance: Instance) -> bool:
    """Whether an input of the invocation has an extent decided at run time or one over
    :data:`DECOMPOSE_EXTENT_LIMIT`."""
    for value in instance.inputs.values():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, TensorInfo) and (
                not item.is_static or any(extent > DECOMPOSE_EXTENT_LIMIT for extent in item.shape)
            ):
                return True
    return False


def is_scalar_argument(value: Any) -> bool:
    """A value given where a tensor is expected that becomes a rank-0 tensor: a literal, or a value
    computed at run time from run-time extents."""
    return isinstance(value, bool | int | float | DynamicExtent | RuntimeScalar)


def runtime_expression(value: Any) -> Any:
    """The expression tree of a run-time value (see :class:`RuntimeScalar`)."""
    return value.expression if isinstance(value, RuntimeScalar) else value


def extent_matches(expected: Any, actual: Any) -> bool:
    """Whether an actual extent is the expected one (run-time extents are checked when they run)."""
    if isinstance(expected, bool):
        expected = int(expected)
    if isinstance(expected, DynamicExtent) or isinstance(actual, DynamicExtent):
        return True  # checked at run time
    return expected == actual


def shapes_match(expected: list, actual: tuple) -> bool:
    """Whether ``actual`` has ``expected``'s rank and each of its extents (:func:`extent_matches`)."""
    if len(expected) != len(actual):
        return False
    return all(extent_matches(e, a) for e, a in zip(expected, actual, strict=True))
