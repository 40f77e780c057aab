"""Graph composition (NNEF 2.0 chapter 3, §2.5–2.15): from a parsed main module to a :class:`Graph`.

For every invocation in a ``@compose`` block, in order:

1. the operator is resolved (qualified names through the module's imports, unqualified ones in
   the module itself);
2. attributes are evaluated in the caller; values the invocation omits take their defaults when
   those are constant, *deferred* defaults (expressions of other symbols) wait (§2.5);
3. input shapes are bound in the binding order of §2.6.2 — an input is bound when at most one of
   its packed extents has an unknown length; affine extents (``4 * n``, ``s..(d + 2)``) are solved
   for their one unknown symbol; known extents are checked;
4. pack lengths of packed attributes are deduced or checked, deferred defaults evaluated and
   single values given for packs made uniform (§2.6.2 steps 3–4);
5. ``@using`` symbols are evaluated in order, each preceded by every assertion that can already
   be evaluated (§2.9); the remaining assertions follow; a failed one raises its formatted
   message and printed values;
6. output shapes are evaluated; a composite operator (``@compose``, no ``@lower``) is then
   expanded recursively under the invocation's label and its results checked against the
   declared outputs; other operators become leaf :class:`~uopviz.nnef.graph.Operation` objects.

An operator with both a ``@compose`` and a ``@lower`` block is decomposed, unless an input has an
extent decided at run time (chapter 3 lets a compiler lower an operator instead of decomposing it):
the stdlib's cumsum unstacks its axis in the spec's composition, which needs the extent at compile
time. A value computed from run-time extents (a :class:`~uopviz.nnef.expressions.RuntimeScalar`,
mean_reduce's ``real(s[axes] * ..)``) passed where a tensor is expected becomes a rank-0 tensor that
a ``runtime.scalar`` operation computes at run time (§3.1); constants shaped by run-time extents
are allocated at the upper bounds.

Branches on compile-time conditions keep one branch; on a bool tensor both are composed and their
results selected (``math.select``). Loops with compile-time counts are unrolled; a run-time count
(a tensor) unrolls to the scanned packs' length with the carried values masked past the count.
Loops whose trip count only the run can tell (a ``while`` condition, ``do ... while``, or a count
held in a tensor with no scanned pack to bound it) become one
:class:`~uopviz.nnef.graph.LoopOperation`: its body and condition are composed as graphs of their
own (inputs: the carried values, the scan items, the iteration index; tensors of the enclosing
graph they read are their ``captures``), and ``g.run`` executes the loop on the host. What they
carry, scan and capture may have run-time extents (a carried extent may even vary between
iterations, within its bound); the scan outputs of a loop bounded by nothing else take the length
their left side declares (``ys..(8)``, §2.10), checked at run time. Generics are
deduced from the inputs and attributes; null values propagate (§2.4.1). Every problem is an
:class:`NNEFError` located at the invocation in the model's file (for errors found inside standard
operators, the message names the operator and where in the library the check is).
"""

from __future__ import annotations

import difflib
import itertools
import math
from collections import ChainMap
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from uopviz.core.limits import MemoryLimitError, check_allocation
from uopviz.nnef import ast
from uopviz.nnef.ast import identifiers
from uopviz.nnef.errors import NNEFError
from uopviz.nnef.expressions import (
    BOUNDED_PACK_LENGTHS,
    INPUT_EXTENT_KEYS,
    UNDECIDED,
    DynamicExtent,
    Evaluator,
    RuntimeScalar,
    Unknown,
    format_value,
    type_name_of,
)
from uopviz.nnef.graph import (
    Composite,
    Graph,
    LoopOperation,
    Operation,
    RuntimeScalarOperation,
    TensorInfo,
    numpy_dtype_of,
)
from uopviz.nnef.printer import print_expression
from uopviz.nnef.stdlib_loader import STDLIB_DIR, ModuleSet

__all__ = ["Composer", "DefinitionInfo", "compose", "identifiers"]

_CONCRETE_TYPES = ("int", "real", "bool", "str")
_ABSTRACT_TYPES = {
    "type": ("int", "real", "bool", "str"),
    "arith": ("int", "real", "bool"),
    "num": ("int", "real"),
}
_MISSING = object()
_RESULT_DEFINITION = ast.Definition("<result>")  # scope for checking declared result types
_RUNTIME_SCALAR_DEFINITION = ast.Definition("scalar")  # the operation of a value computed at run time
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
            name for using in definition.usings for name in _target_names(using.target)
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
            for name in _target_names(using.target)
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


def _target_names(target: ast.Expr) -> list[str]:
    if isinstance(target, ast.Identifier):
        return [target.name]
    if isinstance(target, ast.List):
        return [name for item in target.items for name in _target_names(item)]
    if isinstance(target, ast.Expand):
        return _target_names(target.value)
    if isinstance(target, ast.Zip):
        return [name for item in target.items for name in _target_names(item)]
    return []


def _in_stdlib(file: str | None) -> bool:
    return bool(file) and file.startswith(_STDLIB_PREFIX)


def _describe_type(spec: ast.TypeSpec) -> str:
    from uopviz.nnef.printer import type_spec_text

    return type_spec_text(spec)


class _Describe:
    """'op: attribute 'x' (type)' for messages, built only when a message is built."""

    __slots__ = ("instance", "kind", "param")

    def __init__(self, instance: _Instance, param: ast.Param, kind: str = "attribute") -> None:
        self.instance = instance
        self.param = param
        self.kind = kind

    def __str__(self) -> str:
        return f"{self.instance.name}: {self.kind} '{self.param.name}' ({_describe_type(self.param.type)})"

    __format__ = lambda self, spec: str(self)  # noqa: E731 - f-strings use __format__


# ------------------------------------------------------------------------------------------------
# the state of one invocation


@dataclass
class _Instance:
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
class _Frame:
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
# the composer


class Composer:
    """Composes graphs of one model (a :class:`ModuleSet`).

    ``variable_loader(name, info)`` returns the data of a variable (or None when there is none);
    the loader of a model folder reads ``<name>.dat`` files with it.
    """

    def __init__(
        self, modules: ModuleSet, variable_loader: VariableLoader | None = None, progress: Any = None
    ) -> None:
        self.modules = modules
        self.variable_loader = variable_loader
        # progress(done, total, stage) after each statement of the graph's @compose block
        self.progress = progress
        self.tensors: dict[str, TensorInfo] = {}
        self.operations: list[Operation] = []
        self.composites: list[Composite] = []
        self.updates: dict[str, str] = {}
        self.packs: dict[str, list[str]] = {}  # graph input / output packs: name -> item tensor names
        self._serial = itertools.count()
        self._subgraph_tensors: set[str] = set()  # tensors owned by the sub-graphs of loop nodes
        # The composite operators being expanded, outermost first: invoking one of them again is
        # recursion, which §2.10 leaves out (an invocation names an already defined operator).
        self._expanding: list[DefinitionInfo] = []

    # -- entry point ---------------------------------------------------------------------------------

    def compose(
        self,
        module_name: str = "main",
        graph_name: str | None = None,
        attribs: Mapping[str, Any] | None = None,
        input_shapes: Mapping[str, tuple[int, ...]] | None = None,
    ) -> Graph:
        """Compose the graph ``graph_name`` (default: the first graph) of module ``module_name``."""
        try:
            return self._compose_graph(module_name, graph_name, attribs, input_shapes)
        except Unknown as unknown:  # a name declared but never bound where a value was needed
            message = (f"'{unknown.name}' has no value where it is used (it is not bound at this point of "
                       "the composition)")
            raise NNEFError.at(unknown.position, message) from None

    def _compose_graph(
        self,
        module_name: str,
        graph_name: str | None,
        attribs: Mapping[str, Any] | None,
        input_shapes: Mapping[str, tuple[int, ...]] | None,
    ) -> Graph:
        module = self.modules.get(module_name)
        graphs = module.graphs
        if not graphs:
            # Located at the start of the text: an empty file has no better place to point at.
            raise NNEFError(f"module '{module_name}' ({module.file}) defines no graph", module.file, 1, 1)
        if graph_name is None:
            definition = graphs[0]
        else:
            matches = [graph for graph in graphs if graph.name == graph_name]
            if not matches:
                raise NNEFError(
                    f"module '{module_name}' has no graph '{graph_name}'; its graphs: "
                    f"{', '.join(graph.name for graph in graphs)}"
                )
            definition = matches[0]
        info = DefinitionInfo.of(definition, module_name)
        instance = _Instance(info, definition.pos, "")
        self._graph_attributes(instance, dict(attribs or {}))
        inputs = self._graph_inputs(instance, dict(input_shapes or {}))
        keys = frozenset(
            extent.key
            for name in inputs
            for extent in self.tensors[name].shape
            if isinstance(extent, DynamicExtent)
        )
        bounded: set[str] = set()
        tokens = INPUT_EXTENT_KEYS.set(keys), BOUNDED_PACK_LENGTHS.set(bounded)
        try:
            graph = self._compose_definition(definition, module_name, info, instance, inputs)
        finally:
            INPUT_EXTENT_KEYS.reset(tokens[0])
            BOUNDED_PACK_LENGTHS.reset(tokens[1])
        graph.pack_lengths_at_bounds = sorted(bounded)
        return graph

    def _compose_definition(
        self,
        definition: ast.Definition,
        module_name: str,
        info: DefinitionInfo,
        instance: _Instance,
        inputs: list[str],
    ) -> Graph:
        self._usings_and_asserts(instance)
        frame = _Frame(module_name, instance.symbols, instance.types, "", info.declared)
        self._declare_locals(definition, frame, instance)
        for done, component in enumerate(definition.components, 1):
            self._component(component, frame)
            if self.progress is not None:
                self.progress(done, len(definition.components), None)
        outputs = self._graph_outputs(instance, frame)
        self._updates(definition, frame)
        self._quantizations(definition, frame)
        return Graph(
            name=definition.name,
            inputs=inputs,
            outputs=outputs,
            tensors={n: t for n, t in self.tensors.items() if n not in self._subgraph_tensors},
            operations=self.operations,
            attribs=dict(instance.attribs),
            composites=self.composites,
            updates=self.updates,
            definition=definition,
            modules=dict(self.modules.modules),
            packs=self.packs,
        )

    # -- errors -------------------------------------------------------------------------------------

    @staticmethod
    def _error(position: ast.Position, message: str) -> NNEFError:
        return NNEFError.at(position, message)

    # -- tensors ------------------------------------------------------------------------------------

    def _new_tensor(
        self,
        name: str,
        dtype: str,
        shape: list | tuple,
        kind: str,
        position: ast.Position,
        data: np.ndarray | None = None,
    ) -> TensorInfo:
        if name in self.tensors:
            raise self._error(
                position, f"tensor name '{name}' is already used (defined at {self.tensors[name].position})"
            )
        for extent in shape:
            if isinstance(extent, int) and not isinstance(extent, bool) and not 0 <= extent < MAX_EXTENT:
                raise self._error(
                    position,
                    f"tensor '{name}' would have the {'negative' if extent < 0 else 'too large'} extent "
                    f"{extent} in its shape {format_value(list(shape))}"
                    + ("" if extent < 0 else f" (extents are below 2**{MAX_EXTENT.bit_length() - 1})"),
                )
        tensor = TensorInfo(
            name, dtype, tuple(shape), kind, data, position=position, serial=next(self._serial)
        )
        self.tensors[name] = tensor
        return tensor

    def _unique_name(self, base: str) -> str:
        if base not in self.tensors:
            return base
        for number in itertools.count(1):
            candidate = f"{base}#{number}"
            if candidate not in self.tensors:
                return candidate
        raise AssertionError("unreachable")

    def _rename(self, tensor: TensorInfo, name: str, position: ast.Position) -> None:
        if tensor.name == name:
            return
        if name in self.tensors:
            raise self._error(
                position, f"tensor name '{name}' is already used (defined at {self.tensors[name].position})"
            )
        del self.tensors[tensor.name]
        old = tensor.name
        tensor.name = name
        self.tensors[name] = tensor
        producer = tensor.producer
        if producer is not None:
            producer.outputs = _replace_name(producer.outputs, old, name)
        for op in reversed(self.operations):
            if op is producer:
                break
            if old in op.input_names():
                op.inputs = _replace_name(op.inputs, old, name)
        for composite in self.composites:
            composite.inputs = _replace_name(composite.inputs, old, name)
            composite.outputs = _replace_name(composite.outputs, old, name)
        for op in self.operations:
            if isinstance(op, LoopOperation):
                _rename_captured(op, old, name)

    def _constant_tensor(
        self, value: Any, dtype: str, shape: tuple, name: str, position: ast.Position
    ) -> TensorInfo:
        array = (
            _filled(shape, value, numpy_dtype_of(dtype), name, position)
            if not isinstance(value, np.ndarray)
            else value.astype(numpy_dtype_of(dtype))
        )
        return self._new_tensor(self._unique_name(name), dtype, shape, "constant", position, array)

    # -- operator resolution ------------------------------------------------------------------------

    def _resolve(self, name: str, module_name: str, position: ast.Position) -> DefinitionInfo:
        module = self.modules.get(module_name)
        target_module, _, operator = name.rpartition(".")
        if not target_module:
            target_module = module_name
        elif target_module != module_name and target_module not in {item.module for item in module.imports}:
            raise self._error(
                position,
                f"unknown operator '{name}': module '{target_module}' is not imported "
                f"by {module_name} (add 'import {target_module};')",
            )
        target = self.modules.get(target_module, position)
        for definition in target.definitions:
            if definition.name == operator:
                return DefinitionInfo.of(definition, target_module)
        names = [definition.name for definition in target.definitions]
        close = difflib.get_close_matches(operator, names, n=3)
        hint = f"; did you mean {', '.join(repr(f'{target_module}.{c}') for c in close)}?" if close else ""
        raise self._error(
            position,
            f"unknown operator '{name}': module '{target_module}' has no operator '{operator}'{hint}",
        )

    # ==============================================================================================
    # instantiation: attributes, inputs, using, asserts, outputs

    def _instantiate(
        self,
        info: DefinitionInfo,
        attribs: dict[str, tuple[Any, ast.Node]],
        type_args: tuple[str, ...],
        args: list[tuple[Any, ast.Node | None]],
        position: ast.Position,
        label: str,
    ) -> _Instance:
        instance = _Instance(info, position, label)
        self._generic_arguments(instance, type_args)
        deferred, uniform = self._attributes(instance, attribs)
        self._inputs(instance, args)
        self._check_generics(instance)
        self._finish_attributes(instance, deferred, uniform)
        self._usings_and_asserts(instance)
        return instance

    # -- generics ------------------------------------------------------------------------------------

    def _generic_arguments(self, instance: _Instance, type_args: tuple[str, ...]) -> None:
        params = instance.info.definition.dtypes
        if len(type_args) > len(params):
            raise self._error(
                instance.position,
                f"{instance.name} takes {len(params)} generic type(s), got {len(type_args)}",
            )
        for param, concrete in zip(params, type_args, strict=False):
            self._bind_type(instance, param.name, concrete, instance.position, "explicitly")

    def _bind_type(
        self, instance: _Instance, name: str, concrete: str, position: ast.Position, source: str
    ) -> None:
        param = instance.info.dtype_params.get(name)
        if param is None:
            return
        allowed = _ABSTRACT_TYPES.get(param.base, (param.base,))
        if concrete not in allowed:
            raise self._error(
                position,
                f"{instance.name}: generic type {name}: {param.base} cannot be {concrete} (given {source})",
            )
        bound = instance.types.get(name)
        if bound is not None and bound != concrete:
            if {bound, concrete} == {"int", "real"} and source.startswith("from the value"):
                return  # a scalar literal adapts to the type deduced from tensors
            raise self._error(
                position,
                f"{instance.name}: generic type {name} is {bound} but would also be {concrete} ({source})",
            )
        instance.types[name] = concrete

    def _check_generics(self, instance: _Instance) -> None:
        for param in instance.info.definition.dtypes:
            if param.name not in instance.types:
                if param.default is None:
                    raise self._error(
                        instance.position,
                        f"{instance.name}: cannot deduce the generic type "
                        f"{param.name}; give it as {instance.name}<type>(...)",
                    )
                instance.types[param.name] = param.default

    def _element_type(self, instance: _Instance, spec: ast.TypeSpec) -> str | None:
        if spec.name in _CONCRETE_TYPES:
            return spec.name
        if spec.name in instance.info.dtype_params:
            return instance.types.get(spec.name)
        if spec.name in _ABSTRACT_TYPES:
            return None
        raise self._error(spec.pos, f"unknown type '{spec.name}'")

    # -- attributes ------------------------------------------------------------------------------------

    def _attributes(self, instance: _Instance, given: dict[str, tuple[Any, ast.Node]]) -> tuple[list, dict]:
        info = instance.info
        definition = info.definition
        for name, (_, node) in given.items():
            if name not in info.attrib_names:
                close = difflib.get_close_matches(name, list(info.attrib_names), n=3)
                hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
                known = ", ".join(param.name for param in definition.attribs) or "none"
                raise self._error(
                    node.pos, f"{instance.name} has no attribute '{name}'{hint} (its attributes: {known})"
                )
        deferred: list[ast.Param] = []
        uniform: dict[str, Any] = {}
        evaluator = instance.evaluator()
        for param in definition.attribs:
            if param.name in given:
                value, node = given[param.name]
                position = node.pos
            elif param.default is None:
                if not param.type.optional:
                    raise self._error(
                        instance.position,
                        f"{instance.name}: attribute '{param.name}' "
                        f"({_describe_type(param.type)}) must be given",
                    )
                value, position = None, param.pos
            elif info.constant_default[param.name]:
                value, position = evaluator(param.default), param.default.pos
            else:
                deferred.append(param)
                continue
            self._set_attribute(instance, param, value, position, uniform)
        return deferred, uniform

    def _set_attribute(
        self,
        instance: _Instance,
        param: ast.Param,
        value: Any,
        position: ast.Position,
        uniform: dict[str, Any],
    ) -> None:
        value = self._check_attribute(instance, param, value, position)
        instance.attribs[param.name] = value
        if param.type.pack is not None and value is not None and not isinstance(value, list):
            uniform[param.name] = value  # expanded once the pack length is known
        else:
            instance.symbols[param.name] = value

    def _check_attribute(
        self, instance: _Instance, param: ast.Param, value: Any, position: ast.Position
    ) -> Any:
        spec = param.type
        what = _Describe(instance, param)
        if value is None:
            if not spec.optional:
                raise self._error(position, f"{what} must not be null")
            return None
        if isinstance(value, list) and spec.pack is None:
            raise self._error(
                position, f"{what} takes a single value, got the pack {format_value(value, True)}"
            )
        if isinstance(value, list):
            return [self._check_item(instance, spec, item, position, what) for item in value]
        return self._check_item(instance, spec, value, position, what)

    def _check_item(
        self, instance: _Instance, spec: ast.TypeSpec, item: Any, position: ast.Position, what: _Describe
    ) -> Any:
        expected = spec.name
        if (
            type(item) is int
            and expected == "int"
            or type(item) is float
            and expected == "real"
            or type(item) is str
            and expected == "str"
            or type(item) is bool
            and expected == "bool"
        ):
            return item  # the common case, without building names
        actual = type_name_of(item)
        if expected in instance.info.dtype_params:
            bound = instance.types.get(expected)
            if bound is None:
                if actual not in _CONCRETE_TYPES:
                    raise self._error(position, f"{what} got {actual} {format_value(item, True)}")
                self._bind_type(instance, expected, actual, position, "from the value of an attribute")
                return item
            expected = bound
        if expected in _ABSTRACT_TYPES:
            if actual not in _ABSTRACT_TYPES[expected]:
                raise self._error(position, f"{what} got {actual} {format_value(item, True)}")
            return item
        if actual == expected:
            return item
        if expected == "real" and actual == "int" and not isinstance(item, DynamicExtent):
            return float(item)
        raise self._error(position, f"{what} expects {expected}, got {actual} {format_value(item, True)}")

    def _finish_attributes(
        self, instance: _Instance, deferred: list[ast.Param], uniform: dict[str, Any]
    ) -> None:
        """Pack lengths of packed attributes, deferred defaults, uniform values (§2.6.2, 3–4)."""
        definition = instance.info.definition
        params = {param.name: param for param in definition.attribs}
        lengths_done: set[str] = set()
        while True:
            progress = False
            for param in definition.attribs:
                name = param.name
                if name in lengths_done or param.type.pack is None:
                    continue
                value = instance.symbols.get(name, _MISSING)
                if not isinstance(value, list):
                    if value is None:
                        lengths_done.add(name)
                    continue
                count = param.type.pack.count
                if (
                    count is None
                    or isinstance(count, ast.Placeholder)
                    or self._bind_or_check(instance, count, len(value), param.pos, f"the length of '{name}'")
                ):
                    lengths_done.add(name)
                    progress = True
            for param in list(deferred):
                try:
                    value = instance.evaluator()(param.default)
                except Unknown:
                    continue
                deferred.remove(param)
                progress = True
                if value is None and not param.type.optional:
                    raise self._error(
                        instance.position,
                        f"{instance.name}: attribute '{param.name}' must be "
                        f"given: its default '{print_expression(param.default)}' "
                        f"is null for this invocation",
                    )
                self._set_attribute(instance, param, value, param.default.pos, uniform)
            for name, value in list(uniform.items()):
                count_node = params[name].type.pack.count
                if count_node is None or isinstance(count_node, ast.Placeholder):
                    continue
                try:
                    count = instance.evaluator()(count_node)
                except Unknown:
                    continue
                if isinstance(count, bool):
                    count = int(count)
                if not isinstance(count, int):
                    raise self._error(
                        count_node.pos,
                        f"{instance.name}: the length of '{name}' must be an int, got {format_value(count)}",
                    )
                instance.symbols[name] = [value] * count
                instance.attribs[name] = instance.symbols[name]
                del uniform[name]
                lengths_done.add(name)
                progress = True
            if not progress:
                break
        if uniform:
            name = next(iter(uniform))
            raise self._error(
                instance.position,
                f"{instance.name}: cannot tell the length of the packed "
                f"attribute '{name}' given the single value "
                f"{format_value(uniform[name], True)}; give a list",
            )
        if deferred:
            param = deferred[0]
            missing = self._unknown_in(instance, param.default)
            raise self._error(
                instance.position,
                f"{instance.name}: the default of attribute '{param.name}' "
                f"('{print_expression(param.default)}') refers to "
                f"'{missing}', which is not known",
            )

    def _unknown_in(self, instance: _Instance, node: ast.Node) -> str:
        for name in sorted(identifiers(node)):
            if name not in instance.symbols:
                return name
        return "?"

    # -- inputs ----------------------------------------------------------------------------------------

    def _inputs(self, instance: _Instance, args: list[tuple[Any, ast.Node | None]]) -> None:
        definition = instance.info.definition
        params = definition.inputs
        if len(args) > len(params):
            raise self._error(
                instance.position, f"{instance.name} takes {len(params)} input(s), got {len(args)}"
            )
        pending: list[tuple[ast.Param, Any, ast.Position]] = []
        defaults: list[ast.Param] = []
        for index, param in enumerate(params):
            value, node = args[index] if index < len(args) else (None, None)
            position = node.pos if node is not None else instance.position
            if value is None:
                if param.default is not None:
                    defaults.append(param)
                    continue
                if not param.type.optional:
                    raise self._error(
                        position,
                        f"{instance.name}: input '{param.name}' ({_describe_type(param.type)}) must be given",
                    )
                instance.symbols[param.name] = None
                instance.inputs[param.name] = None
                continue
            self._check_input_type(instance, param, value, position)
            pending.append((param, value, position))
        pending.sort(key=lambda entry: entry[0].type.optional)  # optional inputs bind last
        while pending:
            progress = False
            for entry in list(pending):
                if self._bind_input(instance, *entry):
                    pending.remove(entry)
                    progress = True
            if not progress and not self._advance_usings(instance):
                param, value, position = pending[0]
                raise self._error(
                    position,
                    f"{instance.name}: cannot bind the shape of input '{param.name}' "
                    f"({_describe_type(param.type)}) unambiguously",
                )
        for name in instance.info.input_symbols:
            instance.symbols.setdefault(name, None)  # symbols of omitted optional inputs are null
        for param in definition.inputs:
            value = instance.inputs.get(param.name)
            items = value if isinstance(value, list) else [value]
            if param.type.name in instance.info.dtype_params and param.type.name not in instance.types:
                literal = next((item for item in items if _is_scalar_argument(item)), None)
                if literal is not None:
                    self._bind_type(
                        instance,
                        param.type.name,
                        type_name_of(literal),
                        instance.position,
                        "from the value of a literal argument",
                    )
        for param in defaults:
            self._default_input(instance, param)

    def _check_input_type(
        self, instance: _Instance, param: ast.Param, value: Any, position: ast.Position
    ) -> None:
        spec = param.type
        what = _Describe(instance, param, "input")
        items = value if isinstance(value, list) else [value]
        if spec.pack is not None and not isinstance(value, list):
            raise self._error(position, f"{what} takes a pack of tensors, got a single value")
        if spec.pack is None and isinstance(value, list):
            raise self._error(position, f"{what} takes one tensor, got a pack of {len(value)}")
        for item in items:
            if isinstance(item, TensorInfo):
                actual, source = item.dtype, f"from tensor '{item.name}'"
            elif isinstance(item, bool | int | float | str | DynamicExtent | RuntimeScalar):
                continue  # literals adopt the declared type (checked when made constants)
            else:
                raise self._error(position, f"{what} got {type_name_of(item)}")
            if spec.name in instance.info.dtype_params:
                self._bind_type(instance, spec.name, actual, position, source)
            elif spec.name in _ABSTRACT_TYPES:
                if actual not in _ABSTRACT_TYPES[spec.name]:
                    raise self._error(position, f"{what} got a {actual} tensor")
            elif actual != spec.name:
                raise self._error(
                    position, f"{what} expects a {spec.name} tensor, got {actual} tensor '{item.name}'"
                )

    def _bind_input(self, instance: _Instance, param: ast.Param, value: Any, position: ast.Position) -> bool:
        spec = param.type
        what = f"input '{param.name}'"
        if spec.pack is not None:
            count = spec.pack.count
            if count is not None and not isinstance(count, ast.Placeholder):
                if not self._bind_or_check(
                    instance, count, len(value), position, f"the number of {what} tensors"
                ):
                    return False
            distinct: dict[str, list] = {}
            for item in value:
                if not self._bind_dims(instance, spec, _shape_of(item), position, what, distinct, value):
                    return False
            for name, values in distinct.items():
                if name in instance.symbols and instance.symbols[name] is not None:
                    if instance.symbols[name] != values:
                        raise self._error(
                            position,
                            f"{instance.name}: {what}: extents '{name}' are "
                            f"{format_value(values)}, expected {format_value(instance.symbols[name])}",
                        )
                else:
                    instance.symbols[name] = values
        elif not self._bind_dims(instance, spec, _shape_of(value), position, what, None, value):
            return False
        instance.symbols[param.name] = value
        instance.inputs[param.name] = value
        return True

    def _default_input(self, instance: _Instance, param: ast.Param) -> None:
        element = self._element_type(instance, param.type) or "real"
        value = instance.evaluator()(param.default)
        shape = (
            self._evaluate_shape(instance, param.type, param.name, 0) if param.type.shape is not None else []
        )
        name = f"{instance.label}.{param.name}" if instance.label else param.name
        tensor = self._constant_tensor(value, element, tuple(shape), name, param.pos)
        instance.symbols[param.name] = tensor
        instance.inputs[param.name] = tensor

    # -- binding shapes ------------------------------------------------------------------------------

    def _bind_dims(
        self,
        instance: _Instance,
        spec: ast.TypeSpec,
        dims: list,
        position: ast.Position,
        what: str,
        distinct: dict[str, list] | None,
        value: Any,
    ) -> bool:
        """Bind/check ``dims`` against a declared shape; False when it cannot be bound yet."""
        if spec.rank is not None and not self._bind_or_check(
            instance, spec.rank, len(dims), position, f"the rank of {what}"
        ):
            return False
        if spec.shape is None:
            return True
        evaluator = instance.evaluator()
        plan: list[tuple[ast.Extent, int | None, bool]] = []
        unknown = -1
        for extent in spec.shape.extents:
            length, count_is_bool = self._extent_length(instance, extent, evaluator)
            if length is False:
                return False
            if length is None:
                if unknown >= 0:
                    return False  # two packs of unknown length: wait for other inputs
                unknown = len(plan)
            plan.append((extent, length, count_is_bool))
        known = sum(length for _, length, _ in plan if length is not None)
        if unknown < 0 and known != len(dims) or known > len(dims):
            raise self._shape_error(
                instance,
                spec,
                dims,
                position,
                what,
                value,
                f"rank {len(dims)} where {known}{'+' if unknown >= 0 else ''} is declared",
            )
        offset = 0
        for index, (extent, length, count_is_bool) in enumerate(plan):
            if index == unknown:
                length = len(dims) - known
                count = extent.pack.count if extent.pack is not None else None
                if count is not None and not isinstance(count, ast.Placeholder):
                    self._solve(instance, count, length, position, f"the length of a pack in {what}")
            part = dims[offset : offset + length]
            offset += length
            self._bind_extent(
                instance, spec, extent, part, count_is_bool, dims, position, what, distinct, evaluator, value
            )
        return True

    def _extent_length(
        self, instance: _Instance, extent: ast.Extent, evaluator: Evaluator
    ) -> tuple[Any, bool]:
        """(length, count is bool): length None = unknown but solvable, False = not yet bindable."""
        if extent.pack is None or extent.distinct:
            if (
                extent.distinct
                or isinstance(extent.value, ast.Placeholder)
                or self._declares(instance, extent.value)
            ):
                return 1, False
            try:
                value = evaluator(extent.value)
            except Unknown:
                return False, False
            if isinstance(value, list):
                raise self._error(extent.pos, "a pack used as a shape extent needs '..' after it")
            return (0 if value is None else 1), False
        count = extent.pack.count
        if count is None or isinstance(count, ast.Placeholder):
            if isinstance(extent.value, ast.Identifier) and isinstance(
                instance.symbols.get(extent.value.name), list
            ):
                return len(instance.symbols[extent.value.name]), False
            if isinstance(extent.value, ast.Identifier) and instance.declaration(extent.value.name):
                return None, False
            try:
                value = evaluator(extent.value)
            except Unknown:
                return False, False
            return (len(value) if isinstance(value, list) else None), False
        try:
            length = evaluator(count)
        except Unknown:
            return (None, False) if self._declares(instance, count) else (False, False)
        if length is None:
            return 0, False
        if isinstance(length, bool):
            return int(length), True
        if not isinstance(length, int) or length < 0:
            raise self._error(
                count.pos, f"a pack length must be a non-negative int, got {format_value(length)}"
            )
        return length, False

    def _declares(self, instance: _Instance, node: ast.Node) -> bool:
        """Whether ``node`` is an affine expression of exactly one new shape symbol."""
        new = [name for name in identifiers(node) if instance.declaration(name)]
        if len(new) != 1:
            return False
        others = identifiers(node) - {new[0]}
        return all(name in instance.symbols for name in others)

    def _bind_extent(
        self,
        instance: _Instance,
        spec: ast.TypeSpec,
        extent: ast.Extent,
        part: list,
        count_is_bool: bool,
        dims: list,
        position: ast.Position,
        what: str,
        distinct: dict[str, list] | None,
        evaluator: Evaluator,
        value: Any,
    ) -> None:
        node = extent.value
        if isinstance(node, ast.Placeholder):
            return
        if extent.distinct:
            if not isinstance(node, ast.Identifier) or distinct is None:
                raise self._error(extent.pos, "a distinct extent '..x' must be a name in a tensor pack")
            distinct.setdefault(node.name, []).append(part[0])
            return
        if extent.pack is not None and not count_is_bool:
            if isinstance(node, ast.Identifier) and instance.declaration(node.name):
                instance.symbols[node.name] = list(part)
                return
            expected = evaluator(node)
            expected_items = expected if isinstance(expected, list) else [expected] * len(part)
            if expected is None:
                expected_items = []
            if len(expected_items) != len(part) or any(
                not _extent_matches(e, d) for e, d in zip(expected_items, part, strict=False)
            ):
                raise self._shape_error(
                    instance,
                    spec,
                    dims,
                    position,
                    what,
                    value,
                    f"extents {format_value(part)} where '{print_expression(node)}' = "
                    f"{format_value(expected)}",
                )
            return
        if not part:
            return
        actual = part[0]
        if self._declares(instance, node):
            self._solve(instance, node, actual, position, what)
            return
        expected = evaluator(node)
        if not _extent_matches(expected, actual):
            raise self._shape_error(
                instance,
                spec,
                dims,
                position,
                what,
                value,
                f"extent {format_value(actual)} where '{print_expression(node)}' = {format_value(expected)}",
            )

    def _shape_error(
        self,
        instance: _Instance,
        spec: ast.TypeSpec,
        dims: list,
        position: ast.Position,
        what: str,
        value: Any,
        detail: str,
    ) -> NNEFError:
        argument = f"the argument '{value.name}'" if isinstance(value, TensorInfo) else "the argument"
        if isinstance(value, list):
            argument = "an item of the argument"
        return self._error(
            position,
            f"shape mismatch: {instance.name} {what} is declared "
            f"{_describe_type(spec)} but {argument} has shape "
            f"{format_value(list(dims))}: {detail}",
        )

    def _bind_or_check(
        self, instance: _Instance, node: ast.Expr, value: Any, position: ast.Position, what: str
    ) -> bool:
        """Bind ``node`` (a new symbol or an affine expression of one) to ``value``, or check it."""
        if self._declares(instance, node):
            self._solve(instance, node, value, position, what)
            return True
        try:
            expected = instance.evaluator()(node)
        except Unknown:
            return False
        if isinstance(expected, bool):
            expected = int(expected)
        if expected is not None and not _extent_matches(expected, value):
            raise self._error(
                position,
                f"{instance.name}: {what} is {format_value(value)} but "
                f"'{print_expression(node)}' = {format_value(expected)}",
            )
        return True

    def _solve(
        self, instance: _Instance, node: ast.Expr, value: Any, position: ast.Position, what: str
    ) -> None:
        """Solve the affine ``node`` (one unknown symbol) for ``node == value`` and bind the symbol."""
        if isinstance(node, ast.Identifier):
            instance.symbols[node.name] = value
            return
        (name,) = [n for n in identifiers(node) if instance.declaration(n)]
        if isinstance(value, DynamicExtent):
            raise self._error(
                position,
                f"{instance.name}: {what}: cannot solve '{print_expression(node)}' for a run-time extent",
            )

        def at(x: int) -> Any:
            return instance.evaluator(ChainMap({name: x}, instance.symbols))(node)

        try:
            f0, f1, f2 = at(0), at(1), at(2)
        except NNEFError:
            f0 = f1 = f2 = None
        if (
            not all(isinstance(f, int) and not isinstance(f, bool) for f in (f0, f1, f2))
            or f2 - f1 != f1 - f0
            or f1 == f0
        ):
            raise self._error(
                node.pos,
                f"'{print_expression(node)}' is not an affine expression of '{name}'; it cannot declare it",
            )
        slope = f1 - f0
        solution, remainder = divmod(value - f0, slope)
        if remainder or at(solution) != value:
            raise self._error(
                position,
                f"{instance.name}: {what} is {value}, which '{print_expression(node)}' "
                f"cannot equal for an integer '{name}'",
            )
        instance.symbols[name] = solution

    # -- using and asserts ------------------------------------------------------------------------------

    def _advance_usings(self, instance: _Instance) -> bool:
        """Evaluate every @using entry that can be evaluated now (asserts first, §2.9)."""
        progress = False
        for index, using in enumerate(instance.info.definition.usings):
            if index in instance.done_usings:
                continue
            self._check_asserts(instance, final=False)
            try:
                value = instance.evaluator()(using.value)
            except Unknown:
                continue
            self._assign_using(instance, using, value)
            instance.done_usings.add(index)
            progress = True
        return progress

    def _usings_and_asserts(self, instance: _Instance) -> None:
        usings = instance.info.definition.usings
        schedule = instance.info.assert_schedule
        position = 0
        for index, using in enumerate(usings):
            while position < len(schedule) and schedule[position][0] < index:
                self._check_assert(instance, schedule[position][1], final=False)
                position += 1
            if index in instance.done_usings:
                continue
            try:
                value = instance.evaluator()(using.value)
            except Unknown as unknown:
                raise self._error(
                    using.pos,
                    f"{instance.name}: '{unknown.name}' is used before it is known "
                    f"(in @using '{print_expression(using.value)}')",
                ) from None
            self._assign_using(instance, using, value)
            instance.done_usings.add(index)
        self._check_asserts(instance, final=True)

    def _assign_using(self, instance: _Instance, using: ast.Using, value: Any) -> None:
        target = using.target
        if isinstance(target, ast.Identifier):
            if using.count is not None:
                self._check_using_count(instance, using, value)
            instance.symbols[target.name] = value
            return
        if value is None:
            for name in _target_names(target):
                instance.symbols[name] = None
            return
        if not isinstance(value, list):
            raise self._error(
                using.pos, f"{instance.name}: cannot destructure the non-pack {format_value(value)}"
            )
        self._destructure(instance, target, value, using.pos)

    def _check_using_count(self, instance: _Instance, using: ast.Using, value: Any) -> None:
        length = instance.evaluator()(using.count)
        actual = len(value) if isinstance(value, list) else None
        if value is not None and actual != length:
            raise self._error(
                using.pos,
                f"{instance.name}: '{print_expression(using.target)}' has length "
                f"{actual}, but its hint says {format_value(length)}",
            )

    def _destructure(
        self, instance: _Instance, target: ast.List, value: list, position: ast.Position
    ) -> None:
        items = target.items
        expanded = [i for i, item in enumerate(items) if isinstance(item, ast.Expand)]
        if len(items) == 1 and expanded and isinstance(items[0].value, ast.Zip):
            names = [item.name for item in items[0].value.items]
            if len(value) % len(names):
                raise self._error(
                    position, f"cannot unzip a pack of length {len(value)} into {len(names)} packs"
                )
            for offset, name in enumerate(names):
                instance.symbols[name] = value[offset :: len(names)]
            return
        if len(expanded) > 1:
            raise self._error(position, "at most one item of a destructuring list may be a pack")
        fixed = len(items) - len(expanded)
        if (not expanded and len(value) != fixed) or len(value) < fixed:
            raise self._error(
                position, f"cannot destructure a pack of length {len(value)} into {len(items)} items"
            )
        rest = len(value) - fixed
        offset = 0
        for item in items:
            if isinstance(item, ast.Expand):
                instance.symbols[item.value.name] = value[offset : offset + rest]
                offset += rest
            else:
                instance.symbols[item.name] = value[offset]
                offset += 1

    def _check_asserts(self, instance: _Instance, final: bool) -> None:
        for index in range(len(instance.info.definition.asserts)):
            self._check_assert(instance, index, final)

    def _check_assert(self, instance: _Instance, index: int, final: bool) -> None:
        if index in instance.done_asserts:
            return
        assertion = instance.info.definition.asserts[index]
        symbols = instance.symbols
        if not final and not all(name in symbols for name in identifiers(assertion.condition)):
            return  # refers to a symbol not known yet (cheaper than trying)
        try:
            value = instance.evaluator()(assertion.condition)
        except Unknown as unknown:
            if final:
                raise self._error(
                    assertion.pos,
                    f"{instance.name}: assertion refers to '{unknown.name}', which is never defined",
                ) from None
            return
        instance.done_asserts.add(index)
        items = value if isinstance(value, list) else [value]
        for item in items:
            if item is None or item is UNDECIDED or isinstance(item, RuntimeScalar):
                continue  # decided by run-time extents: not checked at compile time
            if not isinstance(item, bool):
                raise self._error(
                    assertion.pos, f"{instance.name}: an assertion must be a bool, got {format_value(item)}"
                )
            if not item:
                raise self._assertion_error(instance, assertion)

    def _assertion_error(self, instance: _Instance, assertion: ast.Assert) -> NNEFError:
        evaluator = instance.evaluator()
        if assertion.message is None:
            message = f"assertion '{print_expression(assertion.condition)}' failed"
        else:
            try:
                message = evaluator(assertion.message)
            except (Unknown, NNEFError):
                message = print_expression(assertion.message)
        printed = []
        for item in assertion.prints:
            label = item.label or print_expression(item.value)
            try:
                printed.append(f"{label} = {format_value(evaluator(item.value), True)}")
            except (Unknown, NNEFError):
                printed.append(f"{label} = ?")
        detail = f" ({', '.join(printed)})" if printed else ""
        where = f" [assertion at {assertion.pos}]" if _in_stdlib(assertion.pos.file) else ""
        return self._error(instance.position, f"{instance.name}: {message}{detail}{where}")

    # -- output declarations -----------------------------------------------------------------------------

    def _evaluate_shape(
        self, instance: _Instance, spec: ast.TypeSpec, name: str, item: int, bind_dynamic: bool = True
    ) -> list:
        """The shape of a declared output / constant / variable (item ``item`` of a pack)."""
        evaluator = instance.evaluator()
        shape: list = []
        for position, extent in enumerate(spec.shape.extents):
            node = extent.value
            bound = None if extent.bound is None else evaluator(extent.bound)
            if isinstance(bound, DynamicExtent):  # bounded by a run-time extent: by that one's bound
                bound = bound.bound
            if isinstance(node, ast.Placeholder):
                dynamic = DynamicExtent((instance.label or instance.name, name, position), bound)
                shape.extend([dynamic] * self._extent_count(instance, extent, evaluator))
                continue
            if (
                extent.bound is not None
                and isinstance(node, ast.Identifier)
                and node.name not in instance.symbols
            ):
                dynamic = DynamicExtent(
                    f"{instance.label}.{node.name}" if instance.label else node.name, bound
                )
                if bind_dynamic:
                    instance.symbols[node.name] = dynamic
                shape.append(dynamic)
                continue
            value = evaluator(node)
            if extent.distinct:
                if not isinstance(value, list) or item >= len(value):
                    raise self._error(
                        extent.pos,
                        f"the distinct extent '..{print_expression(node)}' needs a pack "
                        f"with an item per tensor",
                    )
                shape.append(value[item])
            elif extent.pack is not None:
                if value is None:
                    continue
                if isinstance(value, list):
                    count = extent.pack.count
                    if count is not None and not isinstance(count, ast.Placeholder):
                        length = evaluator.repeat_count(count)
                        if (
                            length is not None
                            and length != len(value)
                            and not isinstance(evaluator(count), bool)
                        ):
                            raise self._error(
                                extent.pos,
                                f"'{print_expression(node)}' has {len(value)} items, "
                                f"its declared length is {length}",
                            )
                    shape.extend(value)
                else:
                    shape.extend([value] * self._extent_count(instance, extent, evaluator))
            else:
                if value is None:
                    continue
                if isinstance(value, list):
                    raise self._error(
                        extent.pos, f"'{print_expression(node)}' is a pack; expand it with '..'"
                    )
                shape.append(value)
        for index, extent in enumerate(shape):
            if isinstance(extent, RuntimeScalar) and extent.type == "int":  # computed from run-time extents
                converted = extent.as_extent()
                if converted is None:
                    raise self._error(
                        spec.pos,
                        f"{instance.name}: the extent {extent!r} of '{name}' is computed at run time and "
                        f"has no upper bound that follows from its extents' bounds",
                    )
                shape[index] = extent = converted
            if isinstance(extent, bool) or not isinstance(extent, int | DynamicExtent):
                raise self._error(
                    spec.pos,
                    f"{instance.name}: the shape of '{name}' evaluates to "
                    f"{format_value(shape)}, which is not a list of ints",
                )
        return shape

    def _extent_count(self, instance: _Instance, extent: ast.Extent, evaluator: Evaluator) -> int:
        if extent.pack is None:
            return 1
        if extent.pack.count is None or isinstance(extent.pack.count, ast.Placeholder):
            raise self._error(extent.pos, "a repeated extent needs a length: x..(n)")
        return evaluator.repeat_count(extent.pack.count) or 0

    def _declared_outputs(self, instance: _Instance) -> dict[str, tuple[str, Any]]:
        """Each declared output: (element type, shape or list of shapes for a pack)."""
        out: dict[str, tuple[str, Any]] = {}
        for param in instance.info.definition.outputs:
            element = self._element_type(instance, param.type)
            if element is None:
                raise self._error(
                    param.pos,
                    f"{instance.name}: output '{param.name}' has the abstract type '{param.type.name}'",
                )
            out[param.name] = (element, self._declared_shapes(instance, param))
        return out

    def _declared_shapes(self, instance: _Instance, param: ast.Param) -> Any:
        spec = param.type
        if spec.pack is None:
            return None if spec.shape is None else self._evaluate_shape(instance, spec, param.name, 0)
        count_node = spec.pack.count
        if count_node is None or isinstance(count_node, ast.Placeholder):
            return None
        count = instance.evaluator().repeat_count(count_node)
        if spec.shape is None:
            return [None] * (count or 0)
        return [self._evaluate_shape(instance, spec, param.name, item) for item in range(count or 0)]

    # ==============================================================================================
    # composition

    def _component(self, component: ast.Component, frame: _Frame) -> None:
        serial = next(self._serial)
        names = [_first_name(group) for group in component.results]
        lengths = [self._declared_length(group, frame) for group in component.results]
        values = self._callable(component.value, frame, names, component.pos, lengths)
        self._assign(component.results, values, frame, serial, component.pos)

    def _declared_length(
        self, group: ast.Result | ast.ResultList | ast.ResultTuple, frame: _Frame
    ) -> int | None:
        """The length a packed result declares on the left side (``ys..(8)``, §2.10: packed results
        denote their length), when it is known before the value is composed."""
        if not isinstance(group, ast.Result) or group.pack is None:
            return None
        count = group.pack.count
        if count is None or isinstance(count, ast.Placeholder):
            return None
        if isinstance(count, ast.Identifier) and count.name not in frame.symbols:
            return None  # a new symbol: it takes the length the value has
        try:
            value = frame.evaluator()(count)
        except Unknown:
            return None
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def _callable(
        self,
        value: ast.Callable,
        frame: _Frame,
        names: list[str | None],
        position: ast.Position,
        lengths: list[int | None] | None = None,
    ) -> list:
        if isinstance(value, ast.Invocation):
            return self._invoke(value, frame, names)
        if isinstance(value, ast.Block):
            return self._block(value, frame, names)
        if isinstance(value, ast.If):
            return self._branch(value, frame, names)
        if isinstance(value, ast.Loop):
            return self._loop(value, frame, names, lengths or [])
        result = frame.evaluator()(value)
        return [self._as_tensor_value(result, frame, names[0] if names else None, value.pos)]

    def _as_tensor_value(self, value: Any, frame: _Frame, name: str | None, position: ast.Position) -> Any:
        """A compose-level value as tensors: literals become constant tensors of rank 0."""
        if isinstance(value, list):
            return [
                self._as_tensor_value(item, frame, f"{name}[{index}]" if name else None, position)
                for index, item in enumerate(value)
            ]
        if isinstance(value, DynamicExtent | RuntimeScalar):
            base = frame.scope + (name or "value")
            return self._runtime_scalar_tensor(value, type_name_of(value), base, position, frame)
        if isinstance(value, bool | int | float):
            base = frame.scope + (name or "constant")
            return self._constant_tensor(value, type_name_of(value), (), base, position)
        return value

    def _assign(
        self, results: tuple, values: list, frame: _Frame, serial: int, position: ast.Position
    ) -> None:
        if len(values) < len(results):
            raise self._error(
                position, f"{len(results)} results are assigned but only {len(values)} value(s) are produced"
            )
        for group, value in zip(results, values, strict=False):
            if isinstance(group, ast.Result):
                self._assign_result(group, value, frame, serial)
            elif isinstance(group, ast.ResultList):
                self._assign_list(group, value, frame, serial)
            else:
                self._assign_tuple(group, value, frame, serial)

    def _assign_result(self, result: ast.Result, value: Any, frame: _Frame, serial: int) -> None:
        if result.name is None:
            return
        own = frame.symbols.maps[0] if isinstance(frame.symbols, ChainMap) else frame.symbols
        if isinstance(own.get(result.name), TensorInfo | list):
            raise self._error(
                result.pos, f"'{result.name}' is already defined; every result needs a new name"
            )
        if result.pack is not None:
            if not isinstance(value, list):
                raise self._error(result.pos, f"'{result.name}..' expects a pack of tensors, got one value")
            count = result.pack.count
            if count is not None and not isinstance(count, ast.Placeholder):
                self._bind_frame_count(frame, count, len(value), result)
            for index, item in enumerate(value):
                self._name_tensor(item, f"{frame.scope}{result.name}[{index}]", serial, result.pos)
        elif isinstance(value, list):  # a pack result without '..': lenient, as the spec's own cumsum
            for index, item in enumerate(value):
                self._name_tensor(item, f"{frame.scope}{result.name}[{index}]", serial, result.pos)
        else:
            self._name_tensor(value, frame.scope + result.name, serial, result.pos)
        if result.type is not None:
            self._check_result_type(result, value, frame)
        frame.symbols[result.name] = value

    def _assign_list(self, group: ast.ResultList, value: Any, frame: _Frame, serial: int) -> None:
        if not isinstance(value, list):
            raise self._error(group.pos, "a bracketed result list needs a pack of tensors")
        packed = [
            i for i, item in enumerate(group.items) if isinstance(item, ast.Result) and item.pack is not None
        ]
        fixed = len(group.items) - len(packed)
        if len(packed) > 1 or (not packed and fixed != len(value)) or len(value) < fixed:
            raise self._error(
                group.pos, f"cannot destructure {len(value)} tensors into {len(group.items)} results"
            )
        offset, rest = 0, len(value) - fixed
        for item in group.items:
            if isinstance(item, ast.Result) and item.pack is not None:
                self._assign_result(item, value[offset : offset + rest], frame, serial)
                offset += rest
            elif isinstance(item, ast.Result):
                self._assign_result(item, value[offset], frame, serial)
                offset += 1
            else:
                self._assign_tuple(item, value[offset], frame, serial)
                offset += 1

    def _assign_tuple(self, group: ast.ResultTuple, value: Any, frame: _Frame, serial: int) -> None:
        if not isinstance(value, list) or len(value) % len(group.items):
            raise self._error(
                group.pos, "a (a, b).. result needs a pack whose length is a multiple of its items"
            )
        for offset, item in enumerate(group.items):
            self._assign_result(
                ast.Result(item.name, item.type, ast.PackSpec(), pos=item.pos),
                value[offset :: len(group.items)],
                frame,
                serial,
            )

    def _bind_frame_count(self, frame: _Frame, count: ast.Expr, length: int, result: ast.Result) -> None:
        if isinstance(count, ast.Identifier) and count.name not in frame.symbols:
            frame.symbols[count.name] = length
            return
        try:
            expected = frame.evaluator()(count)
        except Unknown:
            if isinstance(count, ast.Identifier):
                frame.symbols[count.name] = length
                return
            raise
        if expected != length:
            raise self._error(
                result.pos,
                f"'{result.name}' receives {length} tensors, but its length is declared "
                f"{format_value(expected)}",
            )

    def _check_result_type(self, result: ast.Result, value: Any, frame: _Frame) -> None:
        spec = result.type
        instance = _Instance(
            DefinitionInfo.of(_RESULT_DEFINITION, frame.module_name),
            result.pos,
            frame.scope,
            symbols=dict(frame.symbols),
            types=dict(frame.types),
        )
        items = value if isinstance(value, list) else [value]
        for item in items:
            if not isinstance(item, TensorInfo):
                continue
            if spec.name in _CONCRETE_TYPES and item.dtype != spec.name:
                raise self._error(
                    result.pos, f"'{result.name}' is declared {spec.name} but is a {item.dtype} tensor"
                )
            if spec.shape is not None:
                expected = self._evaluate_shape(instance, spec, result.name or "", 0, bind_dynamic=False)
                if not _shapes_match(expected, item.shape):
                    raise self._error(
                        result.pos,
                        f"'{result.name}' is declared with shape {format_value(expected)} "
                        f"but has shape {format_value(list(item.shape))}",
                    )

    def _name_tensor(self, value: Any, name: str, serial: int, position: ast.Position) -> None:
        """Give a tensor created by the right-hand side (after ``serial``) its result name."""
        if (
            isinstance(value, TensorInfo)
            and value.serial > serial
            and value.kind in ("intermediate", "constant")
        ):
            if value.name != name and name not in self.tensors:
                self._rename(value, name, position)

    # -- invocations --------------------------------------------------------------------------------------

    def _invoke(self, invocation: ast.Invocation, frame: _Frame, names: list[str | None]) -> list:
        info = self._resolve(invocation.name, frame.module_name, invocation.pos)
        evaluator = frame.evaluator()
        attribs = {name: (evaluator(node), node) for name, node in invocation.attribs}
        args = [
            (None if isinstance(node, ast.Placeholder) else evaluator(node), node) for node in invocation.args
        ]
        label = invocation.label or (names[0] if len(names) == 1 and names[0] else None)
        if label is None:
            label = next((name for name in names if name), None) or f"_{invocation.name.replace('.', '_')}"
        self._check_recursion(info, invocation.pos)
        try:
            instance = self._instantiate(
                info, attribs, invocation.types, args, invocation.pos, frame.scope + label
            )
            if info.is_leaf or (info.lowers_runtime_extents and _prefers_lowering(instance)):
                return self._leaf(instance, frame, names, invocation.pos)
            self._expanding.append(info)
            try:
                return self._expand(instance, frame, invocation)
            finally:
                self._expanding.pop()
        except NNEFError as error:
            if _in_stdlib(error.file) and not _in_stdlib(invocation.pos.file):
                raise NNEFError.at(
                    invocation.pos,
                    f"in {info.qualified}: {error.message} [{error.file}:{error.line}:{error.column}]",
                ) from error
            raise

    def _check_recursion(self, info: DefinitionInfo, position: ast.Position) -> None:
        """NNEFError at ``position`` when ``info``'s operator is already being expanded (a cycle)."""
        starts = [index for index, outer in enumerate(self._expanding) if outer is info]
        if not starts:
            return
        cycle = [*self._expanding[starts[0] :], info]
        names = [_operator_name(item) for item in cycle]
        through = f" through {', '.join(repr(name) for name in names[1:-1])}" if len(cycle) > 2 else ""
        raise self._error(
            position,
            f"operator '{names[0]}' invokes itself{through} (a cycle: {' -> '.join(names)}); "
            f"recursion is not allowed",
        )

    def _input_tensors(self, instance: _Instance, frame: _Frame) -> None:
        """Turn literal arguments into constant tensors of the declared (or deduced) type."""
        for param in instance.info.definition.inputs:
            value = instance.inputs.get(param.name)
            if value is None:
                continue
            if isinstance(value, list):
                converted = [
                    self._literal_tensor(instance, param, item, index, frame)
                    for index, item in enumerate(value)
                ]
            else:
                converted = self._literal_tensor(instance, param, value, None, frame)
            instance.inputs[param.name] = converted
            instance.symbols[param.name] = converted

    def _literal_tensor(
        self, instance: _Instance, param: ast.Param, value: Any, index: int | None, frame: _Frame
    ) -> Any:
        if not _is_scalar_argument(value):
            return value
        element = self._element_type(instance, param.type) or type_name_of(value)
        if element == "real" and type_name_of(value) == "int":
            value = (
                float(value)
                if isinstance(value, int)
                else RuntimeScalar(("real", _expression(value)), "real")
            )
        if type_name_of(value) != element:
            raise self._error(
                instance.position,
                f"{instance.name}: input '{param.name}' expects {element}, got "
                f"{type_name_of(value)} {format_value(value, True)}",
            )
        suffix = f"[{index}]" if index is not None else ""
        name = f"{instance.label}.{param.name}{suffix}"
        if isinstance(value, DynamicExtent | RuntimeScalar):
            return self._runtime_scalar_tensor(value, element, name, instance.position, frame)
        return self._constant_tensor(value, element, (), name, instance.position)

    def _runtime_scalar_tensor(
        self,
        value: DynamicExtent | RuntimeScalar,
        element: str,
        name: str,
        position: ast.Position,
        frame: _Frame,
    ) -> TensorInfo:
        """A rank-0 tensor holding a value computed at run time from run-time extents (§3.1: the
        shape expressions after a data-dependent operation are computed during execution): an
        operation of its own whose kernel reads the counters."""
        tensor = self._new_tensor(self._unique_name(name), element, (), "intermediate", position)
        op = RuntimeScalarOperation(
            type="runtime.scalar",
            attribs={"value": value},
            inputs=(),
            outputs=(tensor.name,),
            label=tensor.name,
            definition=_RUNTIME_SCALAR_DEFINITION,
            dtypes={"T": element},
            position=position,
            scopes=frame.scopes,
        )
        tensor.producer = op
        self.operations.append(op)
        return tensor

    def _leaf(
        self, instance: _Instance, frame: _Frame, names: list[str | None], position: ast.Position
    ) -> list:
        self._input_tensors(instance, frame)
        declared = self._declared_outputs(instance)
        constants = self._operator_locals(instance)
        results = []
        for index, param in enumerate(instance.info.definition.outputs):
            element, shape = declared[param.name]
            name = names[index] if index < len(names) and names[index] else None
            base = frame.scope + name if name else f"{instance.label}.{param.name}"
            if param.type.pack is not None:
                if shape is None:
                    raise self._error(
                        param.pos,
                        f"{instance.name}: the length of the output pack '{param.name}' is not declared",
                    )
                value = [
                    self._new_tensor(
                        self._unique_name(f"{base}[{item}]"),
                        element,
                        tuple(item_shape),
                        "intermediate",
                        position,
                    )
                    for item, item_shape in enumerate(shape)
                ]
            else:
                if shape is None:
                    raise self._error(
                        param.pos, f"{instance.name}: output '{param.name}' has no declared shape"
                    )
                value = self._new_tensor(
                    self._unique_name(base), element, tuple(shape), "intermediate", position
                )
            instance.symbols[param.name] = value
            results.append(value)
        op = Operation(
            type=instance.name,
            attribs=dict(instance.attribs),
            inputs=tuple(
                _names_of(instance.inputs.get(param.name)) for param in instance.info.definition.inputs
            ),
            outputs=tuple(_names_of(value) for value in results),
            label=instance.label,
            definition=instance.info.definition,
            dtypes=dict(instance.types),
            position=position,
            scopes=frame.scopes,
            constants={name: tensor.name for name, tensor in constants.items()},
            symbols=instance.symbols,
        )
        for value in results:
            for tensor in value if isinstance(value, list) else [value]:
                tensor.producer = op
        self.operations.append(op)
        return results

    def _operator_locals(self, instance: _Instance) -> dict[str, TensorInfo]:
        """Constants and variables declared by an operator, as tensors under its label."""
        created: dict[str, TensorInfo] = {}
        definition = instance.info.definition
        for param in (*definition.constants, *definition.variables):
            kind = "constant" if param in definition.constants else "variable"
            tensor = self._local_tensor(instance, param, kind, f"{instance.label}.{param.name}")
            instance.symbols[param.name] = tensor
            created[param.name] = tensor
        return created

    def _local_tensor(self, instance: _Instance, param: ast.Param, kind: str, name: str) -> TensorInfo:
        element = self._element_type(instance, param.type)
        if element is None:
            raise self._error(param.pos, f"{kind} '{param.name}' needs a concrete type")
        shape = (
            tuple(self._evaluate_shape(instance, param.type, param.name, 0))
            if param.type.shape is not None
            else ()
        )
        if kind == "constant":
            data = self._constant_data(instance, param, element, shape)
            return self._new_tensor(name, element, shape, kind, param.pos, data)
        tensor = self._new_tensor(name, element, shape, kind, param.pos)
        if self.variable_loader is not None:
            data = self.variable_loader(name, tensor)
            if data is not None:
                tensor.data = self._check_variable_data(tensor, data)
        return tensor

    def _check_variable_data(self, tensor: TensorInfo, data: np.ndarray) -> np.ndarray:
        if tuple(data.shape) != tuple(tensor.shape):
            raise NNEFError(
                f"variable '{tensor.name}': its data has shape {list(data.shape)} but the graph declares "
                f"{format_value(list(tensor.shape))}",
                tensor.position.file,
                tensor.position.line,
                tensor.position.column,
            )
        kind = data.dtype.kind
        expected = {"real": "f", "int": "iu", "bool": "b"}[tensor.dtype]
        if kind not in expected and not (tensor.dtype == "real" and kind in "iu"):
            raise NNEFError(
                f"variable '{tensor.name}': its data is {data.dtype} but the graph declares {tensor.dtype}",
                tensor.position.file,
                tensor.position.line,
                tensor.position.column,
            )
        return data.astype(tensor.numpy_dtype, copy=False)

    def _constant_data(self, instance: _Instance, param: ast.Param, element: str, shape: tuple) -> np.ndarray:
        if param.default is None:
            raise self._error(param.pos, f"constant '{param.name}' needs a value")
        dtype = numpy_dtype_of(element)
        if not all(isinstance(extent, int) for extent in shape):
            return self._constant_at_upper_bounds(instance, param, dtype, shape)
        if not param.bounds:
            value = instance.evaluator()(param.default)
            if isinstance(value, list):
                if len(value) != int(np.prod(shape, dtype=np.int64)):
                    raise self._error(
                        param.pos,
                        f"constant '{param.name}' of shape {list(shape)} needs "
                        f"{int(np.prod(shape))} values, got {len(value)}",
                    )
                try:
                    return np.array(value, dtype=dtype).reshape(shape)
                except (OverflowError, ValueError, TypeError) as error:
                    raise self._error(param.pos, f"constant '{param.name}': its values cannot be {dtype} "
                                                 f"values ({error})") from None  # fmt: skip
            if value is None:
                raise self._error(param.pos, f"the value of constant '{param.name}' is null")
            return _filled(shape, value, dtype, param.name, param.pos)
        return self._constant_per_element(instance, param, dtype, shape)

    def _constant_at_upper_bounds(
        self, instance: _Instance, param: ast.Param, dtype: np.dtype, shape: tuple
    ) -> np.ndarray:
        """A constant whose shape has extents decided at run time: its data is allocated at the upper
        bounds (kernels never read past the actual extents); each value must be known at compile
        time (a uniform value, or a formula of the indices)."""
        if any(isinstance(extent, DynamicExtent) and extent.bound is None for extent in shape):
            raise self._error(
                param.pos, f"constant '{param.name}' has a run-time extent without an upper bound"
            )
        upper = tuple(extent if isinstance(extent, int) else int(extent.bound) for extent in shape)
        if param.bounds:
            data = self._constant_per_element(instance, param, dtype, shape, upper)
        else:
            value = instance.evaluator()(param.default)
            if isinstance(value, list):
                raise self._error(
                    param.pos,
                    f"constant '{param.name}' has the run-time shape {format_value(list(shape))}; a list of "
                    f"values cannot fill it (give a uniform value or a formula of the indices)",
                )
            data = self._constant_value(param, value, dtype, upper)
        return data

    def _constant_value(self, param: ast.Param, value: Any, dtype: np.dtype, shape: tuple) -> np.ndarray:
        if value is None:
            raise self._error(param.pos, f"the value of constant '{param.name}' is null")
        if isinstance(value, DynamicExtent | RuntimeScalar):
            raise self._error(
                param.pos,
                f"the value of constant '{param.name}' depends on the run-time value {value!r}; a constant "
                f"is known at compile time (compute it with an operation instead)",
            )
        return _filled(shape, value, dtype, param.name, param.pos)

    def _constant_per_element(
        self, instance: _Instance, param: ast.Param, dtype: np.dtype, shape: tuple, upper: tuple | None = None
    ) -> np.ndarray:
        evaluator = instance.evaluator()
        bounds = [(bound.name, evaluator(bound.bound)) for bound in param.bounds]
        axes: list[tuple[str, int | None, int]] = []  # (symbol, item in its pack or None, extent)
        for name, bound in bounds:
            if isinstance(bound, list):
                axes.extend((name, item, extent) for item, extent in enumerate(bound))
            else:
                axes.append((name, None, bound))
        extents = tuple(extent for _, _, extent in axes)
        if extents != tuple(shape):
            raise self._error(
                param.pos,
                f"the index bounds {list(extents)} of constant '{param.name}' do not match "
                f"its shape {list(shape)}",
            )
        upper = tuple(shape) if upper is None else upper
        _check_constant_size(upper, dtype, param.name, param.pos)
        if math.prod(upper) > MAX_FORMULA_ELEMENTS:
            raise self._error(
                param.pos,
                f"constant '{param.name}' of shape {list(upper)} is computed element by element at compose "
                f"time; at most {MAX_FORMULA_ELEMENTS} elements (compute a larger one with operations)",
            )
        data = np.empty(upper, dtype=dtype)
        for point in np.ndindex(*upper) if upper else [()]:
            local: dict[str, Any] = {}
            for (name, item, _), value in zip(axes, point, strict=True):
                if item is None:
                    local[name] = value
                else:
                    local.setdefault(name, []).append(value)
            value = instance.evaluator(ChainMap(local, instance.symbols))(param.default)
            if isinstance(value, DynamicExtent | RuntimeScalar):
                self._constant_value(param, value, dtype, ())  # raises: not a compile-time value
            data[point] = value
        return data

    # -- composite expansion --------------------------------------------------------------------------------

    def _expand(self, instance: _Instance, frame: _Frame, invocation: ast.Invocation) -> list:
        self._input_tensors(instance, frame)
        definition = instance.info.definition
        declared = self._declared_outputs(instance)
        propagate = (
            len(definition.components) == 1
            and not definition.constants
            and not definition.variables
            and isinstance(definition.components[0].value, ast.Invocation | ast.If)
        )
        label = instance.label
        scope = f"{label}." if label else ""
        inner = _Frame(
            instance.info.module_name,
            instance.symbols,
            instance.types,
            scope,
            instance.info.declared,
            (*frame.scopes, label),
        )
        composite = Composite(
            instance.name,
            label,
            dict(instance.attribs),
            tuple(_names_of(instance.inputs.get(p.name)) for p in definition.inputs),
            (),
            definition,
            invocation.pos,
            frame.scopes,
        )
        self.composites.append(composite)
        serial = next(self._serial)
        self._operator_locals(instance)
        if propagate:
            component = definition.components[0]
            value = component.value
            if isinstance(value, ast.Invocation) and value.label is None:
                value = ast.Invocation(
                    value.name, value.args, value.attribs, value.types, None, pos=value.pos
                )
            names = [_first_name(group) for group in component.results]
            inner_frame = _Frame(
                inner.module_name, inner.symbols, inner.types, frame.scope, inner.declared, inner.scopes
            )
            values = self._propagated(value, inner_frame, names, label, component.pos)
            self._assign(
                component.results,
                values,
                _Frame(inner.module_name, inner.symbols, inner.types, scope, inner.declared, inner.scopes),
                serial,
                component.pos,
            )
        else:
            for component in definition.components:
                self._component(component, inner)
        results = []
        for param in definition.outputs:
            if param.name not in instance.symbols or instance.symbols[param.name] is None:
                raise self._error(
                    param.pos, f"{instance.name}: output '{param.name}' is not assigned by its @compose"
                )
            value = instance.symbols[param.name]
            self._check_output(instance, param, value, declared[param.name], invocation.pos)
            results.append(value)
        composite.outputs = tuple(_names_of(value) for value in results)
        self._updates(definition, inner)
        self._quantizations(definition, inner)
        return results

    def _propagated(
        self, value: ast.Callable, frame: _Frame, names: list[str | None], label: str, position: ast.Position
    ) -> list:
        """The single component of a composite, invoked under the composite's own label (§2.10)."""
        if isinstance(value, ast.Invocation):
            labelled = ast.Invocation(
                value.name,
                value.args,
                value.attribs,
                value.types,
                label.rpartition(".")[2] if label else None,
                pos=value.pos,
            )
            parent = label.rpartition(".")[0]
            outer = _Frame(
                frame.module_name,
                frame.symbols,
                frame.types,
                f"{parent}." if parent else "",
                frame.declared,
                frame.scopes,
            )
            return self._invoke(labelled, outer, [None] * len(names))
        return self._callable(
            value,
            _Frame(
                frame.module_name,
                frame.symbols,
                frame.types,
                f"{label}." if label else "",
                frame.declared,
                frame.scopes,
            ),
            names,
            position,
        )

    def _check_output(
        self,
        instance: _Instance,
        param: ast.Param,
        value: Any,
        declared: tuple[str, Any],
        position: ast.Position,
    ) -> None:
        element, shapes = declared
        items = value if isinstance(value, list) else [value]
        expected_shapes = (
            shapes if isinstance(shapes, list) and param.type.pack is not None else [shapes] * len(items)
        )
        if param.type.pack is not None and isinstance(shapes, list) and len(shapes) != len(items):
            raise self._error(
                position,
                f"{instance.name}: output '{param.name}' should be {len(shapes)} tensors, "
                f"its @compose produced {len(items)}",
            )
        for item, shape in zip(items, expected_shapes, strict=False):
            if not isinstance(item, TensorInfo):
                raise self._error(position, f"{instance.name}: output '{param.name}' is not a tensor")
            if item.dtype != element:
                raise self._error(
                    position,
                    f"{instance.name}: output '{param.name}' is declared {element} but its "
                    f"@compose produced a {item.dtype} tensor",
                )
            if shape is not None and not _shapes_match(shape, item.shape):
                raise self._error(
                    position,
                    f"{instance.name}: output '{param.name}' is declared with shape "
                    f"{format_value(shape)} but its @compose produced "
                    f"{format_value(list(item.shape))}",
                )

    # -- blocks, branches, loops ----------------------------------------------------------------------------

    def _block(self, block: ast.Block, frame: _Frame, names: list[str | None]) -> list:
        scope = frame.scope + f"{block.label}." if block.label else frame.scope
        inner = _Frame(
            frame.module_name,
            ChainMap({}, frame.symbols),
            frame.types,
            scope,
            frame.declared,
            (*frame.scopes, block.label) if block.label else frame.scopes,
        )
        for component in block.components:
            self._component(component, inner)
        evaluator = inner.evaluator()
        values = []
        for index, node in enumerate(block.yields):
            value = evaluator(node)
            if value is None:
                raise self._error(node.pos, "a block must not yield a null value")
            values.append(
                self._as_tensor_value(value, inner, names[index] if index < len(names) else None, node.pos)
            )
        return values

    def _condition(self, value: ast.Callable, frame: _Frame) -> bool | TensorInfo:
        """A branch condition: a compile-time bool, or a bool tensor decided at run time."""
        if isinstance(value, ast.Invocation | ast.Block | ast.Loop | ast.If):
            (condition,) = self._callable(value, frame, [None], value.pos)[:1]
        else:
            condition = frame.evaluator()(value)
        if isinstance(condition, TensorInfo):
            if condition.kind == "constant" and condition.data is not None and condition.data.size == 1:
                return bool(condition.data.reshape(()))
            if condition.dtype != "bool" or math.prod(condition.upper_shape) != 1:
                raise self._error(
                    value.pos,
                    f"a branch condition must be a single bool, got the "
                    f"{condition.dtype} tensor '{condition.name}' of shape "
                    f"{format_value(list(condition.shape))}",
                )
            return condition
        if not isinstance(condition, bool):
            raise self._error(value.pos, f"a branch condition must be a bool, got {format_value(condition)}")
        return condition

    def _branch(self, branch: ast.If, frame: _Frame, names: list[str | None]) -> list:
        """Compile-time conditions pick a branch; a tensor condition computes both and selects."""
        for index, (condition, then) in enumerate(branch.branches):
            decided = self._condition(condition, frame)
            if decided is True:
                return self._callable(then, frame, names, then.pos)
            if decided is False:
                continue
            taken = self._callable(then, frame, names, then.pos)
            rest = (
                ast.If(branch.branches[index + 1 :], branch.otherwise, pos=branch.pos)
                if index + 1 < len(branch.branches)
                else branch.otherwise
            )
            other = self._callable(rest, frame, [None] * len(names), rest.pos)
            base = next((name for name in names if name), "branch")
            return [
                self._select(decided, a, b, frame, f"{base}.select{position}", branch.pos)
                for position, (a, b) in enumerate(zip(taken, other, strict=False))
            ]
        return self._callable(branch.otherwise, frame, names, branch.otherwise.pos)

    def _select(
        self, condition: TensorInfo, a: Any, b: Any, frame: _Frame, name: str, position: ast.Position
    ) -> Any:
        """``condition ? a : b`` of tensors (packs item by item), as a math.select operation."""
        if isinstance(a, list) or isinstance(b, list):
            if not (isinstance(a, list) and isinstance(b, list) and len(a) == len(b)):
                raise self._error(position, "the branches of a run-time condition yield different packs")
            return [
                self._select(condition, x, y, frame, f"{name}[{i}]", position)
                for i, (x, y) in enumerate(zip(a, b, strict=True))
            ]
        if a is b:
            return a
        return self._call(
            "math.select", [condition, a, b], frame, frame.scope, self._unique_name(name), position
        )

    def _loop(
        self, loop: ast.Loop, frame: _Frame, names: list[str | None], declared: list[int | None]
    ) -> list:
        if loop.condition is not None:
            if loop.unroll:
                raise self._error(
                    loop.pos,
                    "a loop with a condition cannot be unrolled: its trip count is decided at run time",
                )
            return self._host_loop(loop, frame, names, declared)
        evaluator = frame.evaluator()
        scans = []
        for scan in loop.scans:
            pack = evaluator(scan.pack)
            if not isinstance(pack, list):
                raise self._error(scan.pos, f"the scanned value of '{scan.name}' must be a pack of tensors")
            scans.append((scan.name, pack))
        lengths = {len(pack) for _, pack in scans}
        if len(lengths) > 1:
            raise self._error(loop.pos, f"scanned packs have different lengths {sorted(lengths)}")
        count = evaluator(loop.count) if loop.count is not None else None
        dynamic = None
        if isinstance(count, TensorInfo):  # a run-time count: unrolled to the packs' length, masked
            if count.dtype != "int" or math.prod(count.upper_shape) != 1:
                raise self._error(loop.count.pos, f"a loop count must be a single int, got '{count.name}'")
            if not scans:  # nothing bounds it at compile time: a loop node, run on the host
                if loop.unroll:
                    raise self._error(
                        loop.count.pos,
                        f"the loop count '{count.name}' is decided at run time; 'unroll' needs a "
                        f"compile-time count",
                    )
                return self._host_loop(loop, frame, names, declared)
            dynamic, count = count, None
        if count is None:
            if not scans:
                raise self._error(loop.pos, "a loop needs a 'for' clause or an iteration count")
            count = lengths.pop()
        if scans and count > len(scans[0][1]):
            raise self._error(
                loop.pos, f"the loop count {count} exceeds the scanned packs' length {len(scans[0][1])}"
            )
        if isinstance(count, int) and count > MAX_UNROLLED_ITERATIONS:
            raise self._error(
                loop.pos,
                f"a loop of {count} iterations known at compile time is unrolled, one copy of its body each; "
                f"at most {MAX_UNROLLED_ITERATIONS} (give the count as an int tensor to run it as a loop)",
            )
        carries = []
        for carry in loop.carries:
            initial = evaluator(carry.initial)
            if not isinstance(initial, TensorInfo):
                initial = self._carry_constant(carry, initial, frame)
            carries.append(initial)
        base = next((name for name in names if name), "loop")
        scan_outputs: list[list] = []
        for step in range(count):
            local: dict[str, Any] = {
                carry.name: value for carry, value in zip(loop.carries, carries, strict=True)
            }
            local.update({name: pack[step] for name, pack in scans})
            if loop.index is not None:
                local[loop.index] = self._constant_tensor(
                    step, "int", (), f"{frame.scope}{base}.{step}.{loop.index}", loop.pos
                )
            body_frame = _Frame(
                frame.module_name,
                ChainMap(local, frame.symbols),
                frame.types,
                f"{frame.scope}{base}.{step}.",
                frame.declared,
                frame.scopes,
            )
            outputs = self._callable(loop.body, body_frame, [None] * 8, loop.body.pos)
            if len(outputs) < len(carries):
                raise self._error(
                    loop.body.pos,
                    f"the loop body yields {len(outputs)} values but {len(carries)} are carried",
                )
            updated = outputs[: len(carries)]
            if dynamic is not None:  # past the run-time count the carried values stay as they were
                scope = f"{frame.scope}{base}.{step}."
                step_tensor = self._constant_tensor(step, "int", (), f"{scope}step", loop.pos)
                running = self._call(
                    "math.lt", [step_tensor, dynamic], frame, scope, f"{scope}running", loop.pos
                )
                updated = [
                    self._select(running, new, old, frame, f"{scope}carry{index}", loop.pos)
                    for index, (new, old) in enumerate(zip(updated, carries, strict=True))
                ]
            carries = updated
            for index, value in enumerate(outputs[len(carries) :]):
                if len(scan_outputs) <= index:
                    scan_outputs.append([])
                scan_outputs[index].append(value)
        return [*carries, *scan_outputs]

    # -- loops run on the host: a node with sub-graphs ----------------------------------------------------

    def _host_loop(
        self, loop: ast.Loop, frame: _Frame, names: list[str | None], declared_lengths: list[int | None]
    ) -> list:
        """A loop whose trip count is decided at run time: one :class:`LoopOperation` whose body and
        condition are composed as graphs of their own (their inputs: carried values, scan items,
        the iteration index).

        Its scan outputs are packs, whose lengths are known at compile time: the number of scanned
        items or a compile-time count bounds them, else the length the left side declares for them
        (``ys..(8)``, as §2.10 asks of every packed result) is their upper bound, checked at run
        time (§2.6.1: upper bounds prescribe run-time checks)."""
        evaluator = frame.evaluator()
        base = next((name for name in names if name), "loop")
        label = self._unique_label(frame.scope + base)
        carried = []
        for carry in loop.carries:
            initial = evaluator(carry.initial)
            if not isinstance(initial, TensorInfo):
                initial = self._carry_constant(carry, initial, frame)
            carried.append(self._loop_tensor(initial, f"the carried value '{carry.name}'", carry.pos))
        scans = []
        for scan in loop.scans:
            pack = evaluator(scan.pack)
            if not isinstance(pack, list) or not pack or not all(isinstance(t, TensorInfo) for t in pack):
                raise self._error(scan.pos, f"the scanned value of '{scan.name}' must be a pack of tensors")
            first = self._loop_tensor(pack[0], f"the scanned pack '{scan.name}'", scan.pos)
            if any(t.dtype != first.dtype or t.shape != first.shape for t in pack):
                raise self._error(
                    scan.pos,
                    f"the tensors scanned by '{scan.name}' must share one type and shape in a "
                    f"loop decided at run time",
                )
            scans.append((scan.name, pack))
        scan_lengths = {len(pack) for _, pack in scans}
        if len(scan_lengths) > 1:
            raise self._error(loop.pos, f"scanned packs have different lengths {sorted(scan_lengths)}")
        count = evaluator(loop.count) if loop.count is not None else None
        if isinstance(count, TensorInfo):
            if count.dtype != "int" or math.prod(count.upper_shape) != 1 or not count.is_static:
                raise self._error(
                    loop.count.pos, f"a loop count must be a single int, got the tensor '{count.name}'"
                )
        elif count is not None and (isinstance(count, bool) or not isinstance(count, int)):
            raise self._error(loop.count.pos, f"a loop count must be an int, got {format_value(count)}")
        bound = min([*scan_lengths, *([count] if isinstance(count, int) else [])], default=None)
        body, outputs, condition, formals, owned, varying = self._loop_graphs(
            loop, label, frame, carried, scans
        )
        scan_outputs = outputs[len(carried) :]
        declared = {
            length
            for length in declared_lengths[len(carried) : len(carried) + len(scan_outputs)]
            if length is not None
        }
        if len(declared) > 1:
            raise self._error(
                loop.pos,
                f"the scan outputs of a loop have one length (one item per iteration); the left side "
                f"declares {sorted(declared)}",
            )
        scan_limit = None
        if scan_outputs and bound is None:
            if not declared:
                raise self._error(
                    loop.pos,
                    "a loop that stops on a condition yields scan outputs only with a bound on its "
                    "iterations, which gives the length of their packs: declare that length on the left "
                    "side (ys..(8), its upper bound, checked at run time), or add a 'for' clause or a "
                    "compile-time count",
                )
            bound = scan_limit = declared.pop()
        for value in scan_outputs:
            self._loop_tensor(value, "a scan output", loop.body.pos)
        captures = list(dict.fromkeys([*body.captures, *(condition.captures if condition else [])]))
        counted: dict[Any, str] = {}  # run-time extents of the results, counted by the run of the loop
        extent_outputs: dict[str, tuple] = {}  # counter -> where the runner finds its value

        def result_shape(shape: tuple, name: str, local: Callable[[int, Any], bool], where: tuple) -> tuple:
            out = []
            for axis, extent in enumerate(shape):
                if isinstance(extent, DynamicExtent) and local(axis, extent):
                    key, counter = f"{name}#{axis}", f"{name}#extent{axis}"
                    counted[key] = counter
                    extent_outputs[counter] = (*where, axis)
                    extent = DynamicExtent(key, extent.bound)
                out.append(extent)
            return tuple(out)

        imported = _imported_keys(
            [*body.extent_inputs.values(), *(condition.extent_inputs.values() if condition else [])]
        )
        results: list = []
        for i, (carry, (_, _, shape)) in enumerate(zip(carried, formals, strict=False)):
            name = f"{label}.carry{i}"
            shape = result_shape(shape, name, lambda axis, _, i=i: (i, axis) in varying, ("carry", i))
            results.append(
                self._new_tensor(self._unique_name(name), carry.dtype, shape, "intermediate", loop.pos)
            )
        for index, value in enumerate(scan_outputs):
            items = []
            for item in range(bound):
                name = f"{label}.scan{index}[{item}]"
                shape = result_shape(
                    value.shape, name, lambda _, e: not _evaluable(e.key, imported), ("scan", index, item)
                )
                items.append(
                    self._new_tensor(self._unique_name(name), value.dtype, shape, "intermediate", loop.pos)
                )
            results.append(items)
        kind = "repeat" if condition is None else "while" if loop.pretest else "do_while"
        op = LoopOperation(
            type=f"control.{kind}",
            attribs={
                "pretest": loop.pretest,
                "count": count.name if isinstance(count, TensorInfo) else count,
                "bound": bound,
                "body": f"{len(body.operations)} operations",
                **({"condition": f"{len(condition.operations)} operations"} if condition else {}),
            },
            inputs=(
                [t.name for t in carried],
                [[t.name for t in pack] for _, pack in scans],
                count.name if isinstance(count, TensorInfo) else None,
                captures,
            ),
            outputs=tuple(_names_of(value) for value in results),
            label=label,
            definition=ast.Definition(f"{kind} loop", pos=loop.pos),
            position=loop.pos,
            scopes=frame.scopes,
            body=body,
            condition=condition,
            pretest=loop.pretest,
            count=count.name if isinstance(count, TensorInfo) else count,
            carried=tuple(t.name for t in carried),
            scans=tuple(tuple(t.name for t in pack) for _, pack in scans),
            captures=tuple(captures),
            scan_length=bound if scan_outputs else None,
            scan_limit=scan_limit,
            counted=counted,
            extent_outputs=extent_outputs,
            statement=ast.Component(
                tuple(ast.Result(name, pos=loop.pos) for name in names if name is not None)
                or (ast.Result(base, pos=loop.pos),),
                loop,
                pos=loop.pos,
            ),
        )
        for value in results:
            for tensor in value if isinstance(value, list) else [value]:
                tensor.producer = op
        self.operations.append(op)
        self._subgraph_tensors |= owned
        return results

    def _loop_graphs(
        self, loop: ast.Loop, label: str, frame: _Frame, carried: list[TensorInfo], scans: list
    ) -> tuple:
        """The body and condition of a loop node, composed with the carried values, scan items and
        iteration index as inputs (``formals``).

        A carried value keeps its type and rank; an extent may change from one iteration to the
        next only within the initial value's extent (or bound): the body may compress what it
        carries. Such an extent is *varying*: the body is composed again with a run-time extent of
        its own there (``loop.x#0``), whose actual value the runner passes on every iteration.
        Returns (body, its outputs, condition, formals, owned tensor names, varying (carry, axis)).
        """
        snapshot = set(self.tensors), set(self._subgraph_tensors)
        varying: dict[tuple[int, int], int] = {}
        for attempt in range(2):
            formals = []
            for i, (carry, initial) in enumerate(zip(loop.carries, carried, strict=True)):
                shape = tuple(
                    DynamicExtent(f"{label}.{carry.name}#{axis}", varying[(i, axis)])
                    if (i, axis) in varying
                    else extent
                    for axis, extent in enumerate(initial.shape)
                )
                formals.append((carry.name, initial.dtype, shape))
            formals += [(name, pack[0].dtype, pack[0].shape) for name, pack in scans]
            if loop.index is not None:
                formals.append((loop.index, "int", ()))
            owned: set[str] = set()
            body, outputs = self._subgraph(f"{label}.body", loop.body, frame, formals, owned)
            if len(outputs) < len(carried):
                raise self._error(
                    loop.body.pos,
                    f"the loop body yields {len(outputs)} values but {len(carried)} are carried",
                )
            found = self._varying_extents(loop, formals, outputs)
            if not set(found) - set(varying):
                break
            if attempt == 1:  # cannot happen: a varying extent stays varying
                raise self._error(loop.body.pos, "the extents of the carried values do not settle")
            varying = found
            for name in set(self.tensors) - snapshot[0]:  # compose again, with the varying extents
                del self.tensors[name]
            self._subgraph_tensors = set(snapshot[1])
        condition = None
        if loop.condition is not None:
            condition, (test, *_) = self._subgraph(
                f"{label}.condition", loop.condition, frame, formals, owned, minimum=1
            )
            if test.dtype != "bool" or not test.is_static or math.prod(test.shape) != 1:
                raise self._error(
                    loop.condition.pos,
                    f"a loop condition must be a single bool, got the {test.dtype} tensor '{test.name}' "
                    f"of shape {format_value(list(test.shape))}",
                )
            condition.outputs = condition.outputs[:1]
        fresh = {
            extent.key: ("carry", i, axis)
            for i, (_, _, shape) in enumerate(formals[: len(carried)])
            for axis, extent in enumerate(shape)
            if (i, axis) in varying
        }
        for graph in (body, condition):
            if graph is not None:
                _import_extents(graph, fresh)
        return body, outputs, condition, formals, owned, varying

    def _varying_extents(
        self, loop: ast.Loop, formals: list, outputs: list[TensorInfo]
    ) -> dict[tuple[int, int], int]:
        """The (carry, axis) whose extent the body changes to one decided at run time, with the
        bound the carried value keeps there; any other change of type or shape is an error."""
        found: dict[tuple[int, int], int] = {}
        for i, (carry, (_, dtype, shape), updated) in enumerate(
            zip(loop.carries, formals, outputs, strict=False)
        ):
            problem = updated.dtype != dtype or len(updated.shape) != len(shape)
            for axis, (before, after) in enumerate(zip(shape, updated.shape, strict=False)):
                if problem or before == after:
                    continue
                limit = before if isinstance(before, int) else before.bound
                reach = after.bound if isinstance(after, DynamicExtent) else None
                if limit is None or reach is None or reach > limit:
                    problem = True  # only an extent decided at run time may vary, within the bound
                else:
                    found[(i, axis)] = limit
            if problem:
                raise self._error(
                    loop.body.pos,
                    f"the loop body updates '{carry.name}' ({dtype}{format_value(list(shape))}) with a "
                    f"{updated.dtype}{format_value(list(updated.shape))} tensor; a carried value keeps its "
                    f"type and shape (an extent may change from one iteration to the next only within the "
                    f"initial value's extent or upper bound)",
                )
        return found

    def _unique_label(self, base: str) -> str:
        labels = {op.label for op in self.operations}
        if base not in labels and base not in self.tensors:
            return base
        return next(
            f"{base}#{n}"
            for n in itertools.count(1)
            if f"{base}#{n}" not in labels and f"{base}#{n}" not in self.tensors
        )

    def _loop_tensor(self, value: Any, what: str, position: ast.Position) -> TensorInfo:
        """``value`` as a tensor a loop decided at run time can carry: numeric type, and an upper
        bound for every extent decided at run time (the runner passes their actual values)."""
        if not isinstance(value, TensorInfo):
            raise self._error(position, f"{what} must be a tensor, got {format_value(value)}")
        for extent in value.shape:
            if isinstance(extent, DynamicExtent) and extent.bound is None:
                raise self._error(
                    position,
                    f"{what} ('{value.name}', shape {format_value(list(value.shape))}) has a run-time extent "
                    f"without an upper bound; a loop decided at run time needs one for its buffers",
                )
        numpy_dtype_of(value.dtype)
        return value

    def _subgraph(
        self,
        name: str,
        value: ast.Callable,
        frame: _Frame,
        formals: list[tuple[str, str, tuple]],
        owned: set[str],
        minimum: int = 0,
    ) -> tuple[Graph, list[TensorInfo]]:
        """``value`` composed as a graph of its own: its inputs are new tensors for ``formals``
        (name, type, shape); tensors of the enclosing graph it reads become its ``captures``."""
        saved = self.operations, self.composites
        self.operations, self.composites = [], []
        before = set(self.tensors)
        local: dict[str, Any] = {}
        inputs = []
        for formal, dtype, shape in formals:
            tensor = self._new_tensor(self._unique_name(f"{name}.{formal}"), dtype, shape, "input", value.pos)
            local[formal] = tensor
            inputs.append(tensor.name)
        inner = _Frame(
            frame.module_name,
            ChainMap(local, frame.symbols),
            frame.types,
            f"{name}.",
            frame.declared,
            (*frame.scopes, name),
        )
        try:
            values = self._callable(value, inner, [None] * 8, value.pos)
        finally:
            operations, composites = self.operations, self.composites
            self.operations, self.composites = saved
        if len(values) < minimum:
            raise self._error(value.pos, "the loop condition yields no value")
        outputs = []
        for item in values:
            if not isinstance(item, TensorInfo):
                raise self._error(
                    value.pos,
                    f"a loop body or condition must yield tensors, got {format_value(_names_of(item))}",
                )
            outputs.append(item)
        created = [n for n in self.tensors if n not in before and n not in self._subgraph_tensors]
        own = {n: self.tensors[n] for n in created}
        read = [n for op in operations for n in op.input_names()] + [t.name for t in outputs]
        captures = [n for n in dict.fromkeys(read) if n not in own]
        for captured in captures:
            self._loop_tensor(
                self.tensors[captured], f"the tensor '{captured}' read inside the loop", value.pos
            )
        owned |= set(own)
        graph = Graph(
            name=name,
            inputs=inputs,
            outputs=[t.name for t in outputs],
            tensors={**own, **{n: self.tensors[n] for n in captures}},
            operations=operations,
            composites=composites,
            modules=dict(self.modules.modules),
            captures=captures,
        )
        return graph, outputs

    def _carry_constant(self, carry: ast.Carry, value: Any, frame: _Frame) -> TensorInfo:
        if carry.type is None or carry.type.shape is None:
            return self._as_tensor_value(value, frame, carry.name, carry.pos)
        instance = _Instance(
            DefinitionInfo.of(_RESULT_DEFINITION, frame.module_name),
            carry.pos,
            frame.scope,
            symbols=dict(frame.symbols),
            types=dict(frame.types),
        )
        shape = self._evaluate_shape(instance, carry.type, carry.name, 0, bind_dynamic=False)
        element = (
            carry.type.name
            if carry.type.name in _CONCRETE_TYPES
            else frame.types.get(carry.type.name, "real")
        )
        return self._constant_tensor(value, element, tuple(shape), f"{frame.scope}{carry.name}", carry.pos)

    # -- graph level ----------------------------------------------------------------------------------------

    def _graph_attributes(self, instance: _Instance, given: dict[str, Any]) -> None:
        definition = instance.info.definition
        unknown = set(given) - instance.info.attrib_names
        if unknown:
            raise NNEFError(
                f"graph {definition.name} has no attribute(s) {sorted(unknown)}; its attributes: "
                f"{', '.join(param.name for param in definition.attribs) or 'none'}"
            )
        wrapped = {name: (value, definition) for name, value in given.items()}
        deferred, uniform = self._attributes(instance, wrapped)
        self._finish_attributes(instance, deferred, uniform)

    def _graph_inputs(self, instance: _Instance, shapes: dict[str, tuple[int, ...]]) -> list[str]:
        definition = instance.info.definition
        unknown = set(shapes) - {param.name for param in definition.inputs}
        if unknown:
            raise NNEFError(f"graph {definition.name} has no input(s) {sorted(unknown)}")
        names = []
        for param in definition.inputs:
            element = self._element_type(instance, param.type)
            if element is None:
                raise self._error(param.pos, f"graph input '{param.name}' needs a concrete type")
            if param.type.shape is None:
                raise self._error(param.pos, f"graph input '{param.name}' needs a shape")
            if param.type.pack is not None:
                names.extend(self._graph_input_pack(instance, param, element, shapes.get(param.name)))
                continue
            if param.name in shapes:
                shape = self._given_input_shape(instance, param, list(shapes[param.name]))
            else:
                shape = self._input_shape(instance, param)
            tensor = self._new_tensor(param.name, element, tuple(shape), "input", param.pos)
            instance.symbols[param.name] = tensor
            names.append(param.name)
        return names

    def _graph_input_pack(self, instance: _Instance, param: ast.Param, element: str, given: Any) -> list[str]:
        """The item tensors ``name[k]`` of a pack graph input (``xs: real[2]..(n|5)``).

        Its length is the declared one, or for a length given by a symbol with a bound, the number
        of items given (``given``: one shape per item; the bound when none are): like an input
        extent, it is fixed by the time kernels run, ``run`` recomposing the graph for it.
        """
        spec = param.type.pack
        count_node, bound_node = spec.count, spec.bound
        evaluator = instance.evaluator()
        bound = None if bound_node is None else evaluator(bound_node)
        symbol = None
        if count_node is None or isinstance(count_node, ast.Placeholder):
            count = None
        elif isinstance(count_node, ast.Identifier) and count_node.name not in instance.symbols:
            symbol, count = count_node.name, None
        else:
            count = evaluator.repeat_count(count_node)
        if count is None:
            if given is not None:
                count = len(given)
            elif bound is not None:
                count = bound
            else:
                raise self._error(
                    param.pos,
                    f"graph input pack '{param.name}': a length decided at run time needs an upper "
                    f"bound (..(n|5) or ..(~|5))",
                )
        if given is not None and len(given) != count:
            raise NNEFError(f"graph input pack '{param.name}' has {count} items, {len(given)} were given")
        if bound is not None and count > bound:
            raise NNEFError(
                f"graph input pack '{param.name}': {count} items exceed the declared bound {bound}"
            )
        if symbol is not None:
            instance.symbols[symbol] = count
        items, names = [], []
        for item in range(count):
            name = f"{param.name}[{item}]"
            if given is not None:
                shape = self._given_input_shape(instance, param, list(given[item]))
            else:
                shape = self._input_shape(instance, param)
            items.append(self._new_tensor(name, element, tuple(shape), "input", param.pos))
            names.append(name)
        instance.symbols[param.name] = items
        self.packs[param.name] = names
        return names

    def _given_input_shape(self, instance: _Instance, param: ast.Param, dims: list[int]) -> list[int]:
        upper = self._input_shape(instance, param, probe=True)
        if len(upper) != len(dims):
            raise NNEFError(
                f"graph input '{param.name}' has rank {len(upper)}, the given shape {dims} has rank "
                f"{len(dims)}"
            )
        for declared, actual in zip(upper, dims, strict=True):
            bound = declared.bound if isinstance(declared, DynamicExtent) else declared
            if bound is not None and (
                actual > bound if isinstance(declared, DynamicExtent) else actual != bound
            ):
                raise NNEFError(
                    f"graph input '{param.name}': the given shape {dims} does not fit the declared "
                    f"{format_value(upper)}"
                )
        if not self._bind_dims(instance, param.type, dims, param.pos, f"input '{param.name}'", None, None):
            raise self._error(param.pos, f"cannot bind the shape of graph input '{param.name}'")
        return dims

    def _input_shape(self, instance: _Instance, param: ast.Param, probe: bool = False) -> list:
        evaluator = instance.evaluator()
        shape: list = []
        for position, extent in enumerate(param.type.shape.extents):
            bound = None if extent.bound is None else evaluator(extent.bound)
            node = extent.value
            count = 1 if extent.pack is None else self._extent_count(instance, extent, evaluator)
            if isinstance(node, ast.Placeholder):
                if bound is None:
                    raise self._error(
                        extent.pos,
                        f"graph input '{param.name}': an omitted extent needs an upper bound (~|n)",
                    )
                shape.extend(DynamicExtent((param.name, position, item), bound) for item in range(count))
                continue
            if isinstance(node, ast.Identifier) and node.name not in instance.symbols:
                if bound is None:
                    raise self._error(
                        extent.pos,
                        f"graph input '{param.name}': the extent '{node.name}' is not "
                        f"known; give it an upper bound ({node.name}|n)",
                    )
                values = [
                    DynamicExtent(node.name if count == 1 else (node.name, item), bound)
                    for item in range(count)
                ]
                if not probe:
                    instance.symbols[node.name] = values[0] if extent.pack is None else values
                shape.extend(values)
                continue
            value = evaluator(node)
            if isinstance(value, list):
                shape.extend(value)
            elif value is not None:
                shape.extend([value] * count)
        return shape

    def _graph_outputs(self, instance: _Instance, frame: _Frame) -> list[str]:
        names = []
        for param in instance.info.definition.outputs:
            value = frame.symbols.get(param.name)
            if value is None:
                raise self._error(param.pos, f"graph output '{param.name}' is not assigned in @compose")
            if isinstance(value, list):
                names.extend(self._graph_output_pack(instance, param, value, frame))
                continue
            if not isinstance(value, TensorInfo):
                raise self._error(param.pos, f"graph output '{param.name}' is not a tensor")
            if param.type.shape is not None and all(
                not isinstance(e.value, ast.Placeholder) for e in param.type.shape.extents
            ):
                expected = self._evaluate_shape(instance, param.type, param.name, 0, bind_dynamic=False)
                if not _shapes_match(expected, value.shape):
                    raise self._error(
                        param.pos,
                        f"graph output '{param.name}' is declared with shape "
                        f"{format_value(expected)} but the graph computes "
                        f"{format_value(list(value.shape))}",
                    )
            element = self._element_type(instance, param.type)
            if element is not None and element != value.dtype:
                raise self._error(
                    param.pos,
                    f"graph output '{param.name}' is declared {element} but is a {value.dtype} tensor",
                )
            if value.name != param.name or value.kind != "intermediate":
                value = self._identity(value, param.name, frame, param.pos)
            value.kind = "output"
            names.append(param.name)
        return names

    def _graph_output_pack(
        self, instance: _Instance, param: ast.Param, items: list, frame: _Frame
    ) -> list[str]:
        """The item tensors ``name[k]`` of a pack graph output (``ys: real[]..(3)``)."""
        spec = param.type.pack
        if spec is None:
            raise self._error(param.pos, f"graph output '{param.name}' is declared a tensor but is a pack")
        count_node = spec.count
        if count_node is not None and not isinstance(count_node, ast.Placeholder):
            declared = instance.evaluator()(count_node)
            if isinstance(declared, int) and declared != len(items):
                raise self._error(
                    param.pos,
                    f"graph output pack '{param.name}' is declared with {declared} items, the graph "
                    f"computes {len(items)}",
                )
        element = self._element_type(instance, param.type)
        names = []
        for index, value in enumerate(items):
            if not isinstance(value, TensorInfo):
                raise self._error(
                    param.pos, f"item {index} of graph output pack '{param.name}' is not a tensor"
                )
            if element is not None and element != value.dtype:
                raise self._error(
                    param.pos,
                    f"graph output pack '{param.name}' is declared {element} but item {index} is a "
                    f"{value.dtype} tensor",
                )
            name = f"{param.name}[{index}]"
            if value.name != name or value.kind != "intermediate":
                value = self._identity(value, name, frame, param.pos)
            value.kind = "output"
            names.append(name)
        self.packs[param.name] = names
        return names

    def _identity(self, tensor: TensorInfo, name: str, frame: _Frame, position: ast.Position) -> TensorInfo:
        """An explicit copy (``math.iden``) so that a graph output has a tensor of its own name."""
        if name in self.tensors:
            self._rename(self.tensors[name], self._unique_name(f"{name}.source"), position)
        return self._call("math.iden", [tensor], frame, "", name, position)

    def _call(
        self,
        operator: str,
        args: list[Any],
        frame: _Frame,
        scope: str,
        name: str,
        position: ast.Position,
        attribs: tuple = (),
    ) -> Any:
        """Invoke a standard ``math`` operator on values (tensors, literals) from the composer itself."""
        names = [f"__arg{index}__" for index in range(len(args))]
        invocation = ast.Invocation(
            operator, tuple(ast.Identifier(n, pos=position) for n in names), attribs, pos=position
        )
        local = _Frame(
            "__uopviz__",
            ChainMap(dict(zip(names, args, strict=True)), frame.symbols),
            frame.types,
            scope,
            frame.declared,
            frame.scopes,
        )
        if "__uopviz__" not in self.modules.modules:
            self.modules.add("__uopviz__", ast.Module("<uopviz>", imports=(ast.Import("math"),)))
        (value,) = self._invoke(invocation, local, [name])
        return value

    def _declare_locals(self, definition: ast.Definition, frame: _Frame, instance: _Instance) -> None:
        for param in (*definition.constants, *definition.variables):
            kind = "constant" if param in definition.constants else "variable"
            tensor = self._local_tensor(instance, param, kind, param.name)
            frame.symbols[param.name] = tensor

    def _updates(self, definition: ast.Definition, frame: _Frame) -> None:
        if not definition.updates:
            return
        variables = {param.name for param in definition.variables}
        update_frame = _Frame(
            frame.module_name,
            ChainMap({}, frame.symbols),
            frame.types,
            frame.scope,
            frame.declared,
            frame.scopes,
        )
        for component in definition.updates:
            serial = next(self._serial)
            names = [_first_name(group) for group in component.results]
            renamed = [f"{name}.updated" if name in variables else name for name in names]
            values = self._callable(component.value, update_frame, renamed, component.pos)
            for name, value in zip(names, values, strict=False):
                if name is None:
                    continue
                if name in variables:
                    variable = frame.symbols[name]
                    target = f"{variable.name}.updated"
                    if isinstance(value, TensorInfo) and value.serial > serial and value.name != target:
                        self._rename(value, self._unique_name(target), component.pos)
                    self.updates[variable.name] = value.name
                else:
                    update_frame.symbols[name] = value

    def _quantizations(self, definition: ast.Definition, frame: _Frame) -> None:
        for entry in definition.quantizations:
            name = frame.scope + entry.tensor
            tensor = self.tensors.get(name) or self.tensors.get(entry.tensor)
            if tensor is None:
                raise self._error(entry.pos, f"@quantize names the unknown tensor '{entry.tensor}'")
            info = self._resolve(entry.invocation.name, frame.module_name, entry.invocation.pos)
            evaluator = frame.evaluator()
            attribs = {name: evaluator(node) for name, node in entry.invocation.attribs}
            tensor.quantization = {"op": info.qualified, "attribs": attribs, "types": entry.invocation.types}


# ------------------------------------------------------------------------------------------------
# helpers


def _operator_name(info: DefinitionInfo) -> str:
    """An operator's name as the main module writes it: unqualified there, qualified elsewhere."""
    return info.definition.name if info.module_name == "main" else info.qualified


def _rename_captured(op: LoopOperation, old: str, new: str) -> None:
    """A tensor of the enclosing graph renamed: the loop's sub-graphs read it by its new name."""
    if old not in op.captures:
        return
    op.captures = tuple(_replace_name(list(op.captures), old, new))
    for graph in op.subgraphs.values():
        if old not in graph.captures:
            continue
        graph.captures = _replace_name(graph.captures, old, new)
        graph.tensors = {new if n == old else n: t for n, t in graph.tensors.items()}
        graph.outputs = _replace_name(graph.outputs, old, new)
        for inner in graph.operations:
            inner.inputs = _replace_name(inner.inputs, old, new)
            if isinstance(inner, LoopOperation):
                _rename_captured(inner, old, new)


def _first_name(group: ast.Result | ast.ResultList | ast.ResultTuple) -> str | None:
    if isinstance(group, ast.Result):
        return group.name
    return next((name for item in group.items if (name := _first_name(item))), None)


def _names_of(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, list):
        return [_names_of(item) for item in value]
    if isinstance(value, TensorInfo):
        return value.name
    return format_value(value)


def _replace_name(values: Any, old: str, new: str) -> Any:
    if isinstance(values, tuple):
        return tuple(_replace_name(value, old, new) for value in values)
    if isinstance(values, list):
        return [_replace_name(value, old, new) for value in values]
    return new if values == old else values


def _shape_of(value: Any) -> list:
    if isinstance(value, TensorInfo):
        return list(value.shape)
    return []  # a literal argument is a rank-0 tensor


def _import_extents(graph: Graph, fresh: dict[Any, tuple]) -> None:
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


def _imported_keys(sources: list) -> set:
    return {source.key for source in sources if isinstance(source, DynamicExtent)}


def _evaluable(key: Any, imported: set) -> bool:
    """Whether an extent of a loop's sub-graph can be computed outside the loop: built of the
    enclosing graph's extents only."""
    if key in imported or (isinstance(key, int | float) and not isinstance(key, bool)):
        return True
    if isinstance(key, tuple) and len(key) in (2, 3, 4) and isinstance(key[0], str):
        return all(_evaluable(item, imported) for item in key[1:])
    return False


def _check_constant_size(shape: tuple, dtype: np.dtype, name: str, position: ast.Position) -> None:
    """A constant's data must fit the memory limit; checked before it is allocated."""
    count = math.prod(shape)
    try:
        check_allocation(count * dtype.itemsize, f"constant '{name}' of shape {list(shape)} ({dtype})")
    except MemoryLimitError as error:
        raise NNEFError.at(position, str(error)) from None


def _filled(shape: tuple, value: Any, dtype: np.dtype, name: str, position: ast.Position) -> np.ndarray:
    """A constant of ``shape`` filled with ``value``: its size checked against the memory limit first,
    and a value its type cannot hold (``2147483648`` as int32) a located error."""
    _check_constant_size(shape, dtype, name, position)
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
#: it would take work and operations in proportion to the extent, not to the graph's size.
DECOMPOSE_EXTENT_LIMIT = 64


def _prefers_lowering(instance: _Instance) -> bool:
    """Whether an input of the invocation has an extent decided at run time or one over
    :data:`DECOMPOSE_EXTENT_LIMIT`."""
    for value in instance.inputs.values():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, TensorInfo) and (
                not item.is_static or any(extent > DECOMPOSE_EXTENT_LIMIT for extent in item.shape)
            ):
                return True
    return False


def _is_scalar_argument(value: Any) -> bool:
    """A value given where a tensor is expected that becomes a rank-0 tensor: a literal, or a value
    computed at run time from run-time extents."""
    return isinstance(value, bool | int | float | DynamicExtent | RuntimeScalar)


def _expression(value: Any) -> Any:
    """The expression tree of a run-time value (see :class:`RuntimeScalar`)."""
    return value.expression if isinstance(value, RuntimeScalar) else value


def _extent_matches(expected: Any, actual: Any) -> bool:
    if isinstance(expected, bool):
        expected = int(expected)
    if isinstance(expected, DynamicExtent) or isinstance(actual, DynamicExtent):
        return True  # checked at run time
    return expected == actual


def _shapes_match(expected: list, actual: tuple) -> bool:
    if len(expected) != len(actual):
        return False
    return all(_extent_matches(e, a) for e, a in zip(expected, actual, strict=True))


def compose(
    text_or_module: str | ast.Module,
    graph_name: str | None = None,
    attribs: Mapping[str, Any] | None = None,
    file: str = "<string>",
) -> Graph:
    """Compose the first (or the named) graph of SkriptND text that imports only standard modules."""
    from uopviz.nnef.parser import parse_module

    module = parse_module(text_or_module, file) if isinstance(text_or_module, str) else text_or_module
    modules = ModuleSet(None)
    modules.add("main", module)
    return Composer(modules).compose("main", graph_name, attribs)
