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
time. A value computed from run-time extents (a :class:`~uopviz.nnef.evaluation.values.RuntimeScalar`,
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

The :class:`Composer` owns its parts, one module per concern, each an object given what it works
with when the composer makes it (none imports this module): the
:class:`~uopviz.nnef.composition.builder.GraphBuilder` (``builder.py``: the tensors, operations and
composites of the graph being built; it adds, names and renames tensors), the
:class:`~uopviz.nnef.composition.shapes.ShapeBinder` (``shapes.py``: extents, ``@using`` and
asserts, declared outputs), the :class:`~uopviz.nnef.composition.binding.ArgumentBinder`
(``binding.py``: generics, attributes, inputs), the :class:`~uopviz.nnef.composition.leaves.LeafBuilder`
(``leaves.py``: leaf operations and constants), the :class:`~uopviz.nnef.composition.loops.LoopBuilder`
(``loops.py``: unrolled and host loops) and :class:`~uopviz.nnef.composition.graph_io.GraphIO`
(``graph_io.py``: the graph's inputs, outputs and declarations). The loops and the graph level
compose the statements inside them through the composer, which they know only as a
:class:`~uopviz.nnef.composition.support.ComposesValues`; ``support.py`` holds the records the parts
share (:class:`DefinitionInfo`, the state of an invocation and of a block), operator resolution and
the limits of composition. This module keeps invocation, composite expansion, blocks and branches.
"""

from __future__ import annotations

import math
from collections import ChainMap
from collections.abc import Mapping
from typing import Any

from uopviz.nnef.composition.binding import ArgumentBinder
from uopviz.nnef.composition.builder import GraphBuilder
from uopviz.nnef.composition.graph_io import GraphIO
from uopviz.nnef.composition.leaves import LeafBuilder
from uopviz.nnef.composition.loops import LoopBuilder
from uopviz.nnef.composition.results import bind_frame_count, check_output, declared_length
from uopviz.nnef.composition.shapes import ShapeBinder
from uopviz.nnef.composition.stdlib import ModuleSet
from uopviz.nnef.composition.support import (
    CONCRETE_TYPES,
    RESULT_DEFINITION,
    DefinitionInfo,
    Frame,
    Instance,
    VariableLoader,
    first_name,
    in_stdlib,
    names_of,
    operator_name,
    prefers_lowering,
    resolve_operator,
    shapes_match,
)
from uopviz.nnef.errors import NNEFError
from uopviz.nnef.evaluation.values import (
    BOUNDED_PACK_LENGTHS,
    INPUT_EXTENT_KEYS,
    DynamicExtent,
    RuntimeScalar,
    Unknown,
    format_value,
    type_name_of,
)
from uopviz.nnef.graph import (
    Composite,
    Graph,
    TensorInfo,
)
from uopviz.nnef.syntax import ast
from uopviz.nnef.syntax.ast import identifiers

__all__ = ["Composer", "DefinitionInfo", "compose", "identifiers"]


# ------------------------------------------------------------------------------------------------
# the composer


class Composer:
    """Composes graphs of one model (a :class:`ModuleSet`).

    ``variable_loader(name, info)`` returns the data of a variable (or None when there is none);
    the loader of a model folder reads ``<name>.dat`` files with it. The composer keeps
    invocation, composite expansion, blocks and branches; it owns the parts that do the rest, each
    given what it works with: the graph being built (:attr:`builder`), shapes (:attr:`shapes`),
    arguments (:attr:`arguments`), leaf operations (:attr:`leaves`), loops (:attr:`loops`) and the
    graph's own inputs, outputs and declarations (:attr:`graph_io`). The loops and the graph level
    compose the statements inside them through the composer (it is their
    :class:`~uopviz.nnef.composition.support.ComposesValues`).
    """

    def __init__(
        self, modules: ModuleSet, variable_loader: VariableLoader | None = None, progress: Any = None
    ) -> None:
        self.modules = modules
        # progress(done, total, stage) after each statement of the graph's @compose block
        self.progress = progress
        self.builder = GraphBuilder()
        self.shapes = ShapeBinder()
        self.arguments = ArgumentBinder(self.shapes, self.builder)
        self.leaves = LeafBuilder(self.builder, self.shapes, variable_loader)
        self.loops = LoopBuilder(self.builder, self.shapes, modules, self)
        self.graph_io = GraphIO(self.builder, self.arguments, self.shapes, self.leaves, modules, self)
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
            message = (
                f"'{unknown.name}' has no value where it is used (it is not bound at this point of "
                "the composition)"
            )
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
        instance = Instance(info, definition.pos, "")
        self.graph_io.graph_attributes(instance, dict(attribs or {}))
        inputs = self.graph_io.graph_inputs(instance, dict(input_shapes or {}))
        keys = frozenset(
            extent.key
            for name in inputs
            for extent in self.builder.tensors[name].shape
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
        instance: Instance,
        inputs: list[str],
    ) -> Graph:
        self.shapes.usings_and_asserts(instance)
        frame = Frame(module_name, instance.symbols, instance.types, "", info.declared)
        self.graph_io.declare_locals(definition, frame, instance)
        for done, component in enumerate(definition.components, 1):
            self._component(component, frame)
            if self.progress is not None:
                self.progress(done, len(definition.components), None)
        outputs = self.graph_io.graph_outputs(instance, frame)
        self.graph_io.updates(definition, frame)
        self.graph_io.quantizations(definition, frame)
        builder = self.builder
        return Graph(
            name=definition.name,
            inputs=inputs,
            outputs=outputs,
            tensors=builder.graph_tensors(),
            operations=builder.operations,
            attribs=dict(instance.attribs),
            composites=builder.composites,
            updates=builder.updates,
            definition=definition,
            modules=dict(self.modules.modules),
            packs=builder.packs,
            counts=builder.graph_counts(),
        )

    # ==============================================================================================
    # composition

    def _component(self, component: ast.Component, frame: Frame) -> None:
        serial = self.builder.next_serial()
        names = [first_name(group) for group in component.results]
        lengths = [declared_length(group, frame) for group in component.results]
        values = self.compose_callable(component.value, frame, names, component.pos, lengths)
        self._assign(component.results, values, frame, serial, component.pos)

    def compose_callable(
        self,
        value: ast.Callable,
        frame: Frame,
        names: list[str | None],
        position: ast.Position,
        lengths: list[int | None] | None = None,
    ) -> list:
        """The values of the right-hand side ``value`` (an invocation, block, branch, loop or
        expression) composed in ``frame``; ``names`` are the results it is assigned to, ``lengths``
        the lengths their left side declares for packed ones."""
        if isinstance(value, ast.Invocation):
            return self._invoke(value, frame, names)
        if isinstance(value, ast.Block):
            return self._block(value, frame, names)
        if isinstance(value, ast.If):
            return self._branch(value, frame, names)
        if isinstance(value, ast.Loop):
            return self.loops.loop(value, frame, names, lengths or [])
        result = frame.evaluator()(value)
        return [self.as_tensor_value(result, frame, names[0] if names else None, value.pos)]

    def as_tensor_value(self, value: Any, frame: Frame, name: str | None, position: ast.Position) -> Any:
        """A compose-level value as tensors: literals become constant tensors of rank 0."""
        if isinstance(value, list):
            return [
                self.as_tensor_value(item, frame, f"{name}[{index}]" if name else None, position)
                for index, item in enumerate(value)
            ]
        if isinstance(value, DynamicExtent | RuntimeScalar):
            base = frame.scope + (name or "value")
            return self.leaves.runtime_scalar_tensor(value, type_name_of(value), base, position, frame)
        if isinstance(value, bool | int | float):
            base = frame.scope + (name or "constant")
            return self.builder.constant_tensor(value, type_name_of(value), (), base, position)
        return value

    def _assign(
        self, results: tuple, values: list, frame: Frame, serial: int, position: ast.Position
    ) -> None:
        if len(values) < len(results):
            raise NNEFError.at(
                position, f"{len(results)} results are assigned but only {len(values)} value(s) are produced"
            )
        for group, value in zip(results, values, strict=False):
            if isinstance(group, ast.Result):
                self._assign_result(group, value, frame, serial)
            elif isinstance(group, ast.ResultList):
                self._assign_list(group, value, frame, serial)
            else:
                self._assign_tuple(group, value, frame, serial)

    def _assign_result(self, result: ast.Result, value: Any, frame: Frame, serial: int) -> None:
        if result.name is None:
            return
        own = frame.symbols.maps[0] if isinstance(frame.symbols, ChainMap) else frame.symbols
        if isinstance(own.get(result.name), TensorInfo | list):
            raise NNEFError.at(
                result.pos, f"'{result.name}' is already defined; every result needs a new name"
            )
        if result.pack is not None:
            if not isinstance(value, list):
                raise NNEFError.at(result.pos, f"'{result.name}..' expects a pack of tensors, got one value")
            count = result.pack.count
            if count is not None and not isinstance(count, ast.Placeholder):
                bind_frame_count(frame, count, len(value), result)
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

    def _assign_list(self, group: ast.ResultList, value: Any, frame: Frame, serial: int) -> None:
        if not isinstance(value, list):
            raise NNEFError.at(group.pos, "a bracketed result list needs a pack of tensors")
        packed = [
            i for i, item in enumerate(group.items) if isinstance(item, ast.Result) and item.pack is not None
        ]
        fixed = len(group.items) - len(packed)
        if len(packed) > 1 or (not packed and fixed != len(value)) or len(value) < fixed:
            raise NNEFError.at(
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

    def _assign_tuple(self, group: ast.ResultTuple, value: Any, frame: Frame, serial: int) -> None:
        if not isinstance(value, list) or len(value) % len(group.items):
            raise NNEFError.at(
                group.pos, "a (a, b).. result needs a pack whose length is a multiple of its items"
            )
        for offset, item in enumerate(group.items):
            self._assign_result(
                ast.Result(item.name, item.type, ast.PackSpec(), pos=item.pos),
                value[offset :: len(group.items)],
                frame,
                serial,
            )

    def _check_result_type(self, result: ast.Result, value: Any, frame: Frame) -> None:
        spec = result.type
        instance = Instance(
            DefinitionInfo.of(RESULT_DEFINITION, frame.module_name),
            result.pos,
            frame.scope,
            symbols=dict(frame.symbols),
            types=dict(frame.types),
        )
        items = value if isinstance(value, list) else [value]
        for item in items:
            if not isinstance(item, TensorInfo):
                continue
            if spec.name in CONCRETE_TYPES and item.dtype != spec.name:
                raise NNEFError.at(
                    result.pos, f"'{result.name}' is declared {spec.name} but is a {item.dtype} tensor"
                )
            if spec.shape is not None:
                expected = self.shapes.evaluate_shape(
                    instance, spec, result.name or "", 0, bind_dynamic=False
                )
                if not shapes_match(expected, item.shape):
                    raise NNEFError.at(
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
            if value.name != name and name not in self.builder.tensors:
                self.builder.rename(value, name, position)

    # -- invocations --------------------------------------------------------------------------------------

    def _invoke(self, invocation: ast.Invocation, frame: Frame, names: list[str | None]) -> list:
        info = resolve_operator(self.modules, invocation.name, frame.module_name, invocation.pos)
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
            instance = self.arguments.instantiate(
                info, attribs, invocation.types, args, invocation.pos, frame.scope + label
            )
            if info.is_leaf or (info.lowers_runtime_extents and prefers_lowering(instance)):
                return self.leaves.leaf(instance, frame, names, invocation.pos)
            self._expanding.append(info)
            try:
                return self._expand(instance, frame, invocation)
            finally:
                self._expanding.pop()
        except NNEFError as error:
            if in_stdlib(error.file) and not in_stdlib(invocation.pos.file):
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
        names = [operator_name(item) for item in cycle]
        through = f" through {', '.join(repr(name) for name in names[1:-1])}" if len(cycle) > 2 else ""
        raise NNEFError.at(
            position,
            f"operator '{names[0]}' invokes itself{through} (a cycle: {' -> '.join(names)}); "
            f"recursion is not allowed",
        )

    # -- composite expansion --------------------------------------------------------------------------------

    def _expand(self, instance: Instance, frame: Frame, invocation: ast.Invocation) -> list:
        self.leaves.input_tensors(instance, frame)
        definition = instance.info.definition
        declared = self.shapes.declared_outputs(instance)
        propagate = (
            len(definition.components) == 1
            and not definition.constants
            and not definition.variables
            and isinstance(definition.components[0].value, ast.Invocation | ast.If)
        )
        label = instance.label
        scope = f"{label}." if label else ""
        inner = Frame(
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
            tuple(names_of(instance.inputs.get(p.name)) for p in definition.inputs),
            (),
            definition,
            invocation.pos,
            frame.scopes,
        )
        self.builder.composites.append(composite)
        serial = self.builder.next_serial()
        self.leaves.operator_locals(instance)
        if propagate:
            component = definition.components[0]
            value = component.value
            if isinstance(value, ast.Invocation) and value.label is None:
                value = ast.Invocation(
                    value.name, value.args, value.attribs, value.types, None, pos=value.pos
                )
            names = [first_name(group) for group in component.results]
            inner_frame = Frame(
                inner.module_name, inner.symbols, inner.types, frame.scope, inner.declared, inner.scopes
            )
            values = self._propagated(value, inner_frame, names, label, component.pos)
            self._assign(
                component.results,
                values,
                Frame(inner.module_name, inner.symbols, inner.types, scope, inner.declared, inner.scopes),
                serial,
                component.pos,
            )
        else:
            for component in definition.components:
                self._component(component, inner)
        results = []
        for param in definition.outputs:
            if param.name not in instance.symbols or instance.symbols[param.name] is None:
                raise NNEFError.at(
                    param.pos, f"{instance.name}: output '{param.name}' is not assigned by its @compose"
                )
            value = instance.symbols[param.name]
            check_output(instance, param, value, declared[param.name], invocation.pos)
            results.append(value)
        composite.outputs = tuple(names_of(value) for value in results)
        self.graph_io.updates(definition, inner)
        self.graph_io.quantizations(definition, inner)
        return results

    def _propagated(
        self, value: ast.Callable, frame: Frame, names: list[str | None], label: str, position: ast.Position
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
            outer = Frame(
                frame.module_name,
                frame.symbols,
                frame.types,
                f"{parent}." if parent else "",
                frame.declared,
                frame.scopes,
            )
            return self._invoke(labelled, outer, [None] * len(names))
        return self.compose_callable(
            value,
            Frame(
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

    # -- blocks, branches, loops ----------------------------------------------------------------------------

    def _block(self, block: ast.Block, frame: Frame, names: list[str | None]) -> list:
        scope = frame.scope + f"{block.label}." if block.label else frame.scope
        inner = Frame(
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
                raise NNEFError.at(node.pos, "a block must not yield a null value")
            values.append(
                self.as_tensor_value(value, inner, names[index] if index < len(names) else None, node.pos)
            )
        return values

    def _condition(self, value: ast.Callable, frame: Frame) -> bool | TensorInfo:
        """A branch condition: a compile-time bool, or a bool tensor decided at run time."""
        if isinstance(value, ast.Invocation | ast.Block | ast.Loop | ast.If):
            (condition,) = self.compose_callable(value, frame, [None], value.pos)[:1]
        else:
            condition = frame.evaluator()(value)
        if isinstance(condition, TensorInfo):
            if condition.kind == "constant" and condition.data is not None and condition.data.size == 1:
                return bool(condition.data.reshape(()))
            if condition.dtype != "bool" or math.prod(condition.upper_shape) != 1:
                raise NNEFError.at(
                    value.pos,
                    f"a branch condition must be a single bool, got the "
                    f"{condition.dtype} tensor '{condition.name}' of shape "
                    f"{format_value(list(condition.shape))}",
                )
            return condition
        if not isinstance(condition, bool):
            raise NNEFError.at(value.pos, f"a branch condition must be a bool, got {format_value(condition)}")
        return condition

    def _branch(self, branch: ast.If, frame: Frame, names: list[str | None]) -> list:
        """Compile-time conditions pick a branch; a tensor condition computes both and selects."""
        for index, (condition, then) in enumerate(branch.branches):
            decided = self._condition(condition, frame)
            if decided is True:
                return self.compose_callable(then, frame, names, then.pos)
            if decided is False:
                continue
            taken = self.compose_callable(then, frame, names, then.pos)
            rest = (
                ast.If(branch.branches[index + 1 :], branch.otherwise, pos=branch.pos)
                if index + 1 < len(branch.branches)
                else branch.otherwise
            )
            other = self.compose_callable(rest, frame, [None] * len(names), rest.pos)
            base = next((name for name in names if name), "branch")
            return [
                self.select(decided, a, b, frame, f"{base}.select{position}", branch.pos)
                for position, (a, b) in enumerate(zip(taken, other, strict=False))
            ]
        return self.compose_callable(branch.otherwise, frame, names, branch.otherwise.pos)

    def select(
        self, condition: TensorInfo, a: Any, b: Any, frame: Frame, name: str, position: ast.Position
    ) -> Any:
        """``condition ? a : b`` of tensors (packs item by item), as a math.select operation."""
        if isinstance(a, list) or isinstance(b, list):
            if not (isinstance(a, list) and isinstance(b, list) and len(a) == len(b)):
                raise NNEFError.at(position, "the branches of a run-time condition yield different packs")
            return [
                self.select(condition, x, y, frame, f"{name}[{i}]", position)
                for i, (x, y) in enumerate(zip(a, b, strict=True))
            ]
        if a is b:
            return a
        return self.call(
            "math.select", [condition, a, b], frame, frame.scope, self.builder.unique_name(name), position
        )

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
        """Invoke a standard ``math`` operator on values (tensors, literals) from the composer itself."""
        names = [f"__arg{index}__" for index in range(len(args))]
        invocation = ast.Invocation(
            operator, tuple(ast.Identifier(n, pos=position) for n in names), attribs, pos=position
        )
        local = Frame(
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


def compose(
    text_or_module: str | ast.Module,
    graph_name: str | None = None,
    attribs: Mapping[str, Any] | None = None,
    file: str = "<string>",
) -> Graph:
    """Compose the first (or the named) graph of SkriptND text that imports only standard modules."""
    from uopviz.nnef.syntax.parser import parse_module

    module = parse_module(text_or_module, file) if isinstance(text_or_module, str) else text_or_module
    modules = ModuleSet(None)
    modules.add("main", module)
    return Composer(modules).compose("main", graph_name, attribs)
