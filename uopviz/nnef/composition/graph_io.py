"""The graph level of a composition: graph attributes, inputs and outputs, locals, @update and @quantize.

The :class:`GraphIO` is a part of the :class:`~uopviz.nnef.composition.composer.Composer`: it binds
the graph's attributes with the :class:`~uopviz.nnef.composition.binding.ArgumentBinder`, its input
shapes with the :class:`~uopviz.nnef.composition.shapes.ShapeBinder`, makes its locals with the
:class:`~uopviz.nnef.composition.leaves.LeafBuilder`, adds its tensors to the
:class:`~uopviz.nnef.composition.builder.GraphBuilder`, and composes @update statements and the
copies of graph outputs through the composer that owns it (a :class:`ComposesValues`). See
:mod:`uopviz.nnef.composition.composer` for the order of composition.
"""

from __future__ import annotations

from collections import ChainMap
from typing import Any

from uopviz.nnef.composition.binding import ArgumentBinder
from uopviz.nnef.composition.builder import GraphBuilder
from uopviz.nnef.composition.leaves import LeafBuilder
from uopviz.nnef.composition.shapes import ShapeBinder, extent_count
from uopviz.nnef.composition.stdlib import ModuleSet
from uopviz.nnef.composition.support import (
    ComposesValues,
    Frame,
    Instance,
    element_type,
    first_name,
    resolve_operator,
    shapes_match,
)
from uopviz.nnef.errors import NNEFError
from uopviz.nnef.evaluation.values import DynamicExtent, format_value
from uopviz.nnef.graph import (
    TensorInfo,
)
from uopviz.nnef.syntax import ast


class GraphIO:
    """The graph's own declarations: attributes, input and output tensors (packs included),
    locals, updates, quantizations."""

    def __init__(
        self,
        builder: GraphBuilder,
        arguments: ArgumentBinder,
        shapes: ShapeBinder,
        leaves: LeafBuilder,
        modules: ModuleSet,
        composer: ComposesValues,
    ) -> None:
        self.builder = builder
        self.arguments = arguments
        self.shapes = shapes
        self.leaves = leaves
        self.modules = modules  # resolves the operators @quantize names
        self.composer = composer

    def graph_attributes(self, instance: Instance, given: dict[str, Any]) -> None:
        """Bind the graph's attributes: the values ``given`` by the caller, the defaults of the rest."""
        definition = instance.info.definition
        unknown = set(given) - instance.info.attrib_names
        if unknown:
            raise NNEFError(
                f"graph {definition.name} has no attribute(s) {sorted(unknown)}; its attributes: "
                f"{', '.join(param.name for param in definition.attribs) or 'none'}"
            )
        wrapped = {name: (value, definition) for name, value in given.items()}
        self.arguments.bind_attributes(instance, wrapped)

    def graph_inputs(self, instance: Instance, shapes: dict[str, tuple[int, ...]]) -> list[str]:
        """The graph's input tensors (pack items one by one), of the shapes given or declared."""
        definition = instance.info.definition
        unknown = set(shapes) - {param.name for param in definition.inputs}
        if unknown:
            raise NNEFError(f"graph {definition.name} has no input(s) {sorted(unknown)}")
        names = []
        for param in definition.inputs:
            element = element_type(instance, param.type)
            if element is None:
                raise NNEFError.at(param.pos, f"graph input '{param.name}' needs a concrete type")
            if param.type.shape is None:
                raise NNEFError.at(param.pos, f"graph input '{param.name}' needs a shape")
            if param.type.pack is not None:
                names.extend(self._graph_input_pack(instance, param, element, shapes.get(param.name)))
                continue
            if param.name in shapes:
                shape = self._given_input_shape(instance, param, list(shapes[param.name]))
            else:
                shape = self._input_shape(instance, param)
            tensor = self.builder.new_tensor(param.name, element, tuple(shape), "input", param.pos)
            instance.symbols[param.name] = tensor
            names.append(param.name)
        return names

    def _graph_input_pack(self, instance: Instance, param: ast.Param, element: str, given: Any) -> list[str]:
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
                raise NNEFError.at(
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
            items.append(self.builder.new_tensor(name, element, tuple(shape), "input", param.pos))
            names.append(name)
        instance.symbols[param.name] = items
        self.builder.packs[param.name] = names
        return names

    def _given_input_shape(self, instance: Instance, param: ast.Param, dims: list[int]) -> list[int]:
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
        if not self.shapes.bind_dims(
            instance, param.type, dims, param.pos, f"input '{param.name}'", None, None
        ):
            raise NNEFError.at(param.pos, f"cannot bind the shape of graph input '{param.name}'")
        return dims

    def _input_shape(self, instance: Instance, param: ast.Param, probe: bool = False) -> list:
        evaluator = instance.evaluator()
        shape: list = []
        for position, extent in enumerate(param.type.shape.extents):
            bound = None if extent.bound is None else evaluator(extent.bound)
            node = extent.value
            count = 1 if extent.pack is None else extent_count(instance, extent, evaluator)
            if isinstance(node, ast.Placeholder):
                if bound is None:
                    raise NNEFError.at(
                        extent.pos,
                        f"graph input '{param.name}': an omitted extent needs an upper bound (~|n)",
                    )
                # named after the input and the axis (a string: a tuple key reads as an expression)
                shape.extend(
                    DynamicExtent(f"{param.name}.shape[{position + item}]", bound) for item in range(count)
                )
                continue
            if isinstance(node, ast.Identifier) and node.name not in instance.symbols:
                if bound is None:
                    raise NNEFError.at(
                        extent.pos,
                        f"graph input '{param.name}': the extent '{node.name}' is not "
                        f"known; give it an upper bound ({node.name}|n)",
                    )
                values = [
                    DynamicExtent(node.name if count == 1 else f"{node.name}[{item}]", bound)
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

    def graph_outputs(self, instance: Instance, frame: Frame) -> list[str]:
        """The graph's output tensors, checked against their declarations and named as declared."""
        names = []
        for param in instance.info.definition.outputs:
            value = frame.symbols.get(param.name)
            if value is None:
                raise NNEFError.at(param.pos, f"graph output '{param.name}' is not assigned in @compose")
            if isinstance(value, list):
                names.extend(self._graph_output_pack(instance, param, value, frame))
                continue
            if not isinstance(value, TensorInfo):
                raise NNEFError.at(param.pos, f"graph output '{param.name}' is not a tensor")
            if param.type.shape is not None and all(
                not isinstance(e.value, ast.Placeholder) for e in param.type.shape.extents
            ):
                expected = self.shapes.evaluate_shape(instance, param.type, param.name, 0, bind_dynamic=False)
                if not shapes_match(expected, value.shape):
                    raise NNEFError.at(
                        param.pos,
                        f"graph output '{param.name}' is declared with shape "
                        f"{format_value(expected)} but the graph computes "
                        f"{format_value(list(value.shape))}",
                    )
            element = element_type(instance, param.type)
            if element is not None and element != value.dtype:
                raise NNEFError.at(
                    param.pos,
                    f"graph output '{param.name}' is declared {element} but is a {value.dtype} tensor",
                )
            if value.name != param.name or value.kind != "intermediate":
                value = self._identity(value, param.name, frame, param.pos)
            value.kind = "output"
            names.append(param.name)
        return names

    def _graph_output_pack(
        self, instance: Instance, param: ast.Param, items: list, frame: Frame
    ) -> list[str]:
        """The item tensors ``name[k]`` of a pack graph output (``ys: real[]..(3)``)."""
        spec = param.type.pack
        if spec is None:
            raise NNEFError.at(param.pos, f"graph output '{param.name}' is declared a tensor but is a pack")
        count_node = spec.count
        if count_node is not None and not isinstance(count_node, ast.Placeholder):
            declared = instance.evaluator()(count_node)
            if isinstance(declared, int) and declared != len(items):
                raise NNEFError.at(
                    param.pos,
                    f"graph output pack '{param.name}' is declared with {declared} items, the graph "
                    f"computes {len(items)}",
                )
        element = element_type(instance, param.type)
        names = []
        for index, value in enumerate(items):
            if not isinstance(value, TensorInfo):
                raise NNEFError.at(
                    param.pos, f"item {index} of graph output pack '{param.name}' is not a tensor"
                )
            if element is not None and element != value.dtype:
                raise NNEFError.at(
                    param.pos,
                    f"graph output pack '{param.name}' is declared {element} but item {index} is a "
                    f"{value.dtype} tensor",
                )
            name = f"{param.name}[{index}]"
            if value.name != name or value.kind != "intermediate":
                value = self._identity(value, name, frame, param.pos)
            value.kind = "output"
            names.append(name)
        self.builder.packs[param.name] = names
        return names

    def _identity(self, tensor: TensorInfo, name: str, frame: Frame, position: ast.Position) -> TensorInfo:
        """An explicit copy (``math.iden``) so that a graph output has a tensor of its own name."""
        if name in self.builder.tensors:
            self.builder.rename(
                self.builder.tensors[name], self.builder.unique_name(f"{name}.source"), position
            )
        return self.composer.call("math.iden", [tensor], frame, "", name, position)

    def declare_locals(self, definition: ast.Definition, frame: Frame, instance: Instance) -> None:
        """The graph's constants and variables, as tensors bound in ``frame``."""
        for param in (*definition.constants, *definition.variables):
            kind = "constant" if param in definition.constants else "variable"
            tensor = self.leaves.local_tensor(instance, param, kind, param.name)
            frame.symbols[param.name] = tensor

    def updates(self, definition: ast.Definition, frame: Frame) -> None:
        """Compose ``definition``'s @update statements and record each variable's new value."""
        if not definition.updates:
            return
        variables = {param.name for param in definition.variables}
        update_frame = Frame(
            frame.module_name,
            ChainMap({}, frame.symbols),
            frame.types,
            frame.scope,
            frame.declared,
            frame.scopes,
        )
        for component in definition.updates:
            serial = self.builder.next_serial()
            names = [first_name(group) for group in component.results]
            renamed = [f"{name}.updated" if name in variables else name for name in names]
            values = self.composer.compose_callable(component.value, update_frame, renamed, component.pos)
            for name, value in zip(names, values, strict=False):
                if name is None:
                    continue
                if name in variables:
                    variable = frame.symbols[name]
                    target = f"{variable.name}.updated"
                    if isinstance(value, TensorInfo) and value.serial > serial and value.name != target:
                        self.builder.rename(value, self.builder.unique_name(target), component.pos)
                    self.builder.updates[variable.name] = value.name
                else:
                    update_frame.symbols[name] = value

    def quantizations(self, definition: ast.Definition, frame: Frame) -> None:
        """Attach ``definition``'s @quantize entries to the tensors they name."""
        for entry in definition.quantizations:
            name = frame.scope + entry.tensor
            tensor = self.builder.tensors.get(name) or self.builder.tensors.get(entry.tensor)
            if tensor is None:
                raise NNEFError.at(entry.pos, f"@quantize names the unknown tensor '{entry.tensor}'")
            info = resolve_operator(
                self.modules, entry.invocation.name, frame.module_name, entry.invocation.pos
            )
            evaluator = frame.evaluator()
            attribs = {name: evaluator(node) for name, node in entry.invocation.attribs}
            tensor.quantization = {"op": info.qualified, "attribs": attribs, "types": entry.invocation.types}
