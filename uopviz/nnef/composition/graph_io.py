"""The graph level of a composition: graph attributes, inputs and outputs, locals, @update and @quantize.

A mixin of :class:`~uopviz.nnef.composition.composer.Composer`: its methods use the composer's state and call
one another through ``self``; see :mod:`uopviz.nnef.composition.composer` for the order of composition.
"""

from __future__ import annotations

from collections import ChainMap
from typing import Any

from uopviz.nnef.composition.binding import element_type
from uopviz.nnef.composition.shapes import extent_count
from uopviz.nnef.composition.support import (
    Frame,
    Instance,
    first_name,
    shapes_match,
)
from uopviz.nnef.errors import NNEFError
from uopviz.nnef.evaluation.values import DynamicExtent, format_value
from uopviz.nnef.graph import (
    TensorInfo,
)
from uopviz.nnef.syntax import ast


class GraphLevel:
    """The graph's own declarations: attributes, input and output tensors (packs included),
    locals, updates, quantizations."""


    # -- graph level ----------------------------------------------------------------------------------------

    def _graph_attributes(self, instance: Instance, given: dict[str, Any]) -> None:
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

    def _graph_inputs(self, instance: Instance, shapes: dict[str, tuple[int, ...]]) -> list[str]:
        definition = instance.info.definition
        unknown = set(shapes) - {param.name for param in definition.inputs}
        if unknown:
            raise NNEFError(f"graph {definition.name} has no input(s) {sorted(unknown)}")
        names = []
        for param in definition.inputs:
            element = element_type(instance, param.type)
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
        if not self._bind_dims(instance, param.type, dims, param.pos, f"input '{param.name}'", None, None):
            raise self._error(param.pos, f"cannot bind the shape of graph input '{param.name}'")
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
                    raise self._error(
                        extent.pos,
                        f"graph input '{param.name}': an omitted extent needs an upper bound (~|n)",
                    )
                # named after the input and the axis (a string: a tuple key reads as an expression)
                shape.extend(
                    DynamicExtent(f"{param.name}.shape[{position + item}]", bound)
                    for item in range(count)
                )
                continue
            if isinstance(node, ast.Identifier) and node.name not in instance.symbols:
                if bound is None:
                    raise self._error(
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

    def _graph_outputs(self, instance: Instance, frame: Frame) -> list[str]:
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
                if not shapes_match(expected, value.shape):
                    raise self._error(
                        param.pos,
                        f"graph output '{param.name}' is declared with shape "
                        f"{format_value(expected)} but the graph computes "
                        f"{format_value(list(value.shape))}",
                    )
            element = element_type(instance, param.type)
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
        self, instance: Instance, param: ast.Param, items: list, frame: Frame
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
        element = element_type(instance, param.type)
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

    def _identity(self, tensor: TensorInfo, name: str, frame: Frame, position: ast.Position) -> TensorInfo:
        """An explicit copy (``math.iden``) so that a graph output has a tensor of its own name."""
        if name in self.tensors:
            self._rename(self.tensors[name], self._unique_name(f"{name}.source"), position)
        return self._call("math.iden", [tensor], frame, "", name, position)

    def _call(
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

    def _declare_locals(self, definition: ast.Definition, frame: Frame, instance: Instance) -> None:
        for param in (*definition.constants, *definition.variables):
            kind = "constant" if param in definition.constants else "variable"
            tensor = self._local_tensor(instance, param, kind, param.name)
            frame.symbols[param.name] = tensor

    def _updates(self, definition: ast.Definition, frame: Frame) -> None:
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
            serial = next(self._serial)
            names = [first_name(group) for group in component.results]
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

    def _quantizations(self, definition: ast.Definition, frame: Frame) -> None:
        for entry in definition.quantizations:
            name = frame.scope + entry.tensor
            tensor = self.tensors.get(name) or self.tensors.get(entry.tensor)
            if tensor is None:
                raise self._error(entry.pos, f"@quantize names the unknown tensor '{entry.tensor}'")
            info = self._resolve(entry.invocation.name, frame.module_name, entry.invocation.pos)
            evaluator = frame.evaluator()
            attribs = {name: evaluator(node) for name, node in entry.invocation.attribs}
            tensor.quantization = {"op": info.qualified, "attribs": attribs, "types": entry.invocation.types}
