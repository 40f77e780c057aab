"""Generic type arguments, attributes and inputs of an invocation (§2.5, §2.6.2).

The :class:`ArgumentBinder` is a part of the :class:`~uopviz.nnef.composition.composer.Composer`:
it makes an invocation's :class:`Instance` from its arguments, with the shapes bound by the
:class:`~uopviz.nnef.composition.shapes.ShapeBinder` and the constant tensors of literal defaults
added to the :class:`~uopviz.nnef.composition.builder.GraphBuilder` it is given. See
:mod:`uopviz.nnef.composition.composer` for the order of composition.
"""

from __future__ import annotations

import difflib
from typing import Any

from uopviz.nnef.composition.builder import GraphBuilder
from uopviz.nnef.composition.shapes import ShapeBinder
from uopviz.nnef.composition.support import (
    ABSTRACT_TYPES,
    CONCRETE_TYPES,
    MISSING,
    DefinitionInfo,
    Describe,
    Instance,
    describe_type,
    element_type,
    is_scalar_argument,
    pack_shapes,
    shape_of,
)
from uopviz.nnef.errors import NNEFError
from uopviz.nnef.evaluation.values import (
    DynamicExtent,
    RuntimeScalar,
    Unknown,
    format_value,
    pack_length,
    type_name_of,
)
from uopviz.nnef.graph import (
    TensorInfo,
)
from uopviz.nnef.syntax import ast
from uopviz.nnef.syntax.ast import identifiers
from uopviz.nnef.syntax.printer import print_expression


class ArgumentBinder:
    """Binding an invocation's arguments: generic types, attributes (defaults, packs, types) and
    inputs."""

    def __init__(self, shapes: ShapeBinder, builder: GraphBuilder) -> None:
        self.shapes = shapes
        self.builder = builder

    def instantiate(
        self,
        info: DefinitionInfo,
        attribs: dict[str, tuple[Any, ast.Node]],
        type_args: tuple[str, ...],
        args: list[tuple[Any, ast.Node | None]],
        position: ast.Position,
        label: str,
    ) -> Instance:
        """The invocation of ``info``'s operator under ``label`` with its arguments bound: generics,
        attributes, inputs and their shapes, @using symbols, checked assertions (§2.5–2.9)."""
        instance = Instance(info, position, label)
        self._generic_arguments(instance, type_args)
        deferred, uniform = self._attributes(instance, attribs)
        self._inputs(instance, args)
        check_generics(instance)
        self._finish_attributes(instance, deferred, uniform)
        self.shapes.usings_and_asserts(instance)
        return instance

    def bind_attributes(self, instance: Instance, given: dict[str, tuple[Any, ast.Node]]) -> None:
        """Bind the attributes ``given`` (value, node) and the defaults of the rest (a graph's)."""
        deferred, uniform = self._attributes(instance, given)
        self._finish_attributes(instance, deferred, uniform)

    # -- generics ------------------------------------------------------------------------------------

    def _generic_arguments(self, instance: Instance, type_args: tuple[str, ...]) -> None:
        params = instance.info.definition.dtypes
        if len(type_args) > len(params):
            raise NNEFError.at(
                instance.position,
                f"{instance.name} takes {len(params)} generic type(s), got {len(type_args)}",
            )
        for param, concrete in zip(params, type_args, strict=False):
            _bind_type(instance, param.name, concrete, instance.position, "explicitly")

    # -- attributes ------------------------------------------------------------------------------------

    def _attributes(self, instance: Instance, given: dict[str, tuple[Any, ast.Node]]) -> tuple[list, dict]:
        info = instance.info
        definition = info.definition
        for name, (_, node) in given.items():
            if name not in info.attrib_names:
                close = difflib.get_close_matches(name, list(info.attrib_names), n=3)
                hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
                known = ", ".join(param.name for param in definition.attribs) or "none"
                raise NNEFError.at(
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
                    raise NNEFError.at(
                        instance.position,
                        f"{instance.name}: attribute '{param.name}' "
                        f"({describe_type(param.type)}) must be given",
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
        instance: Instance,
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
        self, instance: Instance, param: ast.Param, value: Any, position: ast.Position
    ) -> Any:
        spec = param.type
        what = Describe(instance, param)
        if value is None:
            if not spec.optional:
                raise NNEFError.at(position, f"{what} must not be null")
            return None
        if isinstance(value, list) and spec.pack is None:
            raise NNEFError.at(
                position, f"{what} takes a single value, got the pack {format_value(value, True)}"
            )
        if isinstance(value, list):
            return [self._check_item(instance, spec, item, position, what) for item in value]
        return self._check_item(instance, spec, value, position, what)

    def _check_item(
        self, instance: Instance, spec: ast.TypeSpec, item: Any, position: ast.Position, what: Describe
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
                if actual not in CONCRETE_TYPES:
                    raise NNEFError.at(position, f"{what} got {actual} {format_value(item, True)}")
                _bind_type(instance, expected, actual, position, "from the value of an attribute")
                return item
            expected = bound
        if expected in ABSTRACT_TYPES:
            if actual not in ABSTRACT_TYPES[expected]:
                raise NNEFError.at(position, f"{what} got {actual} {format_value(item, True)}")
            return item
        if actual == expected:
            return item
        if expected == "real" and actual == "int" and not isinstance(item, DynamicExtent):
            return float(item)
        raise NNEFError.at(position, f"{what} expects {expected}, got {actual} {format_value(item, True)}")

    def _finish_attributes(
        self, instance: Instance, deferred: list[ast.Param], uniform: dict[str, Any]
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
                value = instance.symbols.get(name, MISSING)
                if not isinstance(value, list):
                    if value is None:
                        lengths_done.add(name)
                    continue
                count = param.type.pack.count
                if (
                    count is None
                    or isinstance(count, ast.Placeholder)
                    or self.shapes.bind_or_check(
                        instance, count, len(value), param.pos, f"the length of '{name}'"
                    )
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
                    raise NNEFError.at(
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
                    raise NNEFError.at(
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
            raise NNEFError.at(
                instance.position,
                f"{instance.name}: cannot tell the length of the packed "
                f"attribute '{name}' given the single value "
                f"{format_value(uniform[name], True)}; give a list",
            )
        if deferred:
            param = deferred[0]
            missing = _unknown_in(instance, param.default)
            raise NNEFError.at(
                instance.position,
                f"{instance.name}: the default of attribute '{param.name}' "
                f"('{print_expression(param.default)}') refers to "
                f"'{missing}', which is not known",
            )

    # -- inputs ----------------------------------------------------------------------------------------

    def _inputs(self, instance: Instance, args: list[tuple[Any, ast.Node | None]]) -> None:
        definition = instance.info.definition
        params = definition.inputs
        if len(args) > len(params):
            raise NNEFError.at(
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
                    raise NNEFError.at(
                        position,
                        f"{instance.name}: input '{param.name}' ({describe_type(param.type)}) must be given",
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
            if not progress and not self.shapes.advance_usings(instance):
                param, value, position = pending[0]
                raise NNEFError.at(
                    position,
                    f"{instance.name}: cannot bind the shape of input '{param.name}' "
                    f"({describe_type(param.type)}) unambiguously",
                )
        for name in instance.info.input_symbols:
            instance.symbols.setdefault(name, None)  # symbols of omitted optional inputs are null
        for param in definition.inputs:
            value = instance.inputs.get(param.name)
            items = value if isinstance(value, list) else [value]
            if param.type.name in instance.info.dtype_params and param.type.name not in instance.types:
                literal = next((item for item in items if is_scalar_argument(item)), None)
                if literal is not None:
                    _bind_type(
                        instance,
                        param.type.name,
                        type_name_of(literal),
                        instance.position,
                        "from the value of a literal argument",
                    )
        for param in defaults:
            self._default_input(instance, param)

    def _check_input_type(
        self, instance: Instance, param: ast.Param, value: Any, position: ast.Position
    ) -> None:
        spec = param.type
        what = Describe(instance, param, "input")
        items = value if isinstance(value, list) else [value]
        if spec.pack is not None and not isinstance(value, list):
            raise NNEFError.at(position, f"{what} takes a pack of tensors, got a single value")
        if spec.pack is None and isinstance(value, list):
            raise NNEFError.at(position, f"{what} takes one tensor, got a pack of {len(value)}")
        for item in items:
            if isinstance(item, TensorInfo):
                actual, source = item.dtype, f"from tensor '{item.name}'"
            elif isinstance(item, bool | int | float | str | DynamicExtent | RuntimeScalar):
                continue  # literals adopt the declared type (checked when made constants)
            else:
                raise NNEFError.at(position, f"{what} got {type_name_of(item)}")
            if spec.name in instance.info.dtype_params:
                _bind_type(instance, spec.name, actual, position, source)
            elif spec.name in ABSTRACT_TYPES:
                if actual not in ABSTRACT_TYPES[spec.name]:
                    raise NNEFError.at(position, f"{what} got a {actual} tensor")
            elif actual != spec.name:
                raise NNEFError.at(
                    position, f"{what} expects a {spec.name} tensor, got {actual} tensor '{item.name}'"
                )

    def _bind_input(self, instance: Instance, param: ast.Param, value: Any, position: ast.Position) -> bool:
        spec = param.type
        what = f"input '{param.name}'"
        if spec.pack is not None:
            count = spec.pack.count
            if count is not None and not isinstance(count, ast.Placeholder):
                if not self.shapes.bind_or_check(
                    instance, count, pack_length(value), position, f"the number of {what} tensors"
                ):
                    return False
            distinct: dict[str, list] = {}
            # an item-wise extent (concat's '..z') keeps each item's own; others bind the widest
            itemwise = any(extent.distinct for extent in spec.shape.extents)
            for shape in [shape_of(item) for item in value] if itemwise else pack_shapes(value):
                if not self.shapes.bind_dims(instance, spec, shape, position, what, distinct, value):
                    return False
            for name, values in distinct.items():
                if name in instance.symbols and instance.symbols[name] is not None:
                    if instance.symbols[name] != values:
                        raise NNEFError.at(
                            position,
                            f"{instance.name}: {what}: extents '{name}' are "
                            f"{format_value(values)}, expected {format_value(instance.symbols[name])}",
                        )
                else:
                    instance.symbols[name] = values
        elif not self.shapes.bind_dims(instance, spec, shape_of(value), position, what, None, value):
            return False
        instance.symbols[param.name] = value
        instance.inputs[param.name] = value
        return True

    def _default_input(self, instance: Instance, param: ast.Param) -> None:
        element = element_type(instance, param.type) or "real"
        value = instance.evaluator()(param.default)
        shape = (
            self.shapes.evaluate_shape(instance, param.type, param.name, 0)
            if param.type.shape is not None
            else []
        )
        name = f"{instance.label}.{param.name}" if instance.label else param.name
        tensor = self.builder.constant_tensor(value, element, tuple(shape), name, param.pos)
        instance.symbols[param.name] = tensor
        instance.inputs[param.name] = tensor


# ------------------------------------------------------------------------------------------------
# checks and computations that need no composer state (module functions, not methods)


def _bind_type(instance: Instance, name: str, concrete: str, position: ast.Position, source: str) -> None:
    param = instance.info.dtype_params.get(name)
    if param is None:
        return
    allowed = ABSTRACT_TYPES.get(param.base, (param.base,))
    if concrete not in allowed:
        raise NNEFError.at(
            position,
            f"{instance.name}: generic type {name}: {param.base} cannot be {concrete} (given {source})",
        )
    bound = instance.types.get(name)
    if bound is not None and bound != concrete:
        if {bound, concrete} == {"int", "real"} and source.startswith("from the value"):
            return  # a scalar literal adapts to the type deduced from tensors
        raise NNEFError.at(
            position,
            f"{instance.name}: generic type {name} is {bound} but would also be {concrete} ({source})",
        )
    instance.types[name] = concrete


def check_generics(instance: Instance) -> None:
    """Every generic type of ``instance``'s operator deduced, or its default taken (an error names
    one that is neither)."""
    for param in instance.info.definition.dtypes:
        if param.name not in instance.types:
            if param.default is None:
                raise NNEFError.at(
                    instance.position,
                    f"{instance.name}: cannot deduce the generic type "
                    f"{param.name}; give it as {instance.name}<type>(...)",
                )
            instance.types[param.name] = param.default


def _unknown_in(instance: Instance, node: ast.Node) -> str:
    for name in sorted(identifiers(node)):
        if name not in instance.symbols:
            return name
    return "?"
