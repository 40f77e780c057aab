"""Leaf operations of a composition: input, literal and run-time scalar tensors, variables and constants.

The :class:`LeafBuilder` is a part of the :class:`~uopviz.nnef.composition.composer.Composer`: it
adds the tensors and operations it makes to the
:class:`~uopviz.nnef.composition.builder.GraphBuilder` it is given, with the declared shapes
evaluated by the :class:`~uopviz.nnef.composition.shapes.ShapeBinder`, and reads the data of
variables through the model's loader. See :mod:`uopviz.nnef.composition.composer` for the order of
composition.
"""

from __future__ import annotations

import math
from collections import ChainMap
from typing import Any

import numpy as np

from uopviz.nnef.composition.builder import GraphBuilder
from uopviz.nnef.composition.shapes import ShapeBinder
from uopviz.nnef.composition.support import (
    MAX_FORMULA_ELEMENTS,
    RUNTIME_SCALAR_DEFINITION,
    Frame,
    Instance,
    VariableLoader,
    check_constant_size,
    element_type,
    filled_array,
    is_scalar_argument,
    names_of,
    runtime_expression,
)
from uopviz.nnef.errors import NNEFError
from uopviz.nnef.evaluation.values import DynamicExtent, RuntimeScalar, format_value, type_name_of
from uopviz.nnef.graph import (
    Operation,
    RuntimeScalarOperation,
    TensorInfo,
    numpy_dtype_of,
)
from uopviz.nnef.syntax import ast


class LeafBuilder:
    """Making leaf operations: the tensors of graph inputs, literals, run-time scalars, variables
    and constants.

    ``variable_loader(name, info)`` returns the data of a variable (or None when there is none).
    """

    def __init__(
        self, builder: GraphBuilder, shapes: ShapeBinder, variable_loader: VariableLoader | None = None
    ) -> None:
        self.builder = builder
        self.shapes = shapes
        self.variable_loader = variable_loader

    def input_tensors(self, instance: Instance, frame: Frame) -> None:
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
        self, instance: Instance, param: ast.Param, value: Any, index: int | None, frame: Frame
    ) -> Any:
        if not is_scalar_argument(value):
            return value
        element = element_type(instance, param.type) or type_name_of(value)
        if element == "real" and type_name_of(value) == "int":
            value = (
                float(value)
                if isinstance(value, int)
                else RuntimeScalar(("real", runtime_expression(value)), "real")
            )
        if type_name_of(value) != element:
            raise NNEFError.at(
                instance.position,
                f"{instance.name}: input '{param.name}' expects {element}, got "
                f"{type_name_of(value)} {format_value(value, True)}",
            )
        suffix = f"[{index}]" if index is not None else ""
        name = f"{instance.label}.{param.name}{suffix}"
        if isinstance(value, DynamicExtent | RuntimeScalar):
            return self.runtime_scalar_tensor(value, element, name, instance.position, frame)
        return self.builder.constant_tensor(value, element, (), name, instance.position)

    def runtime_scalar_tensor(
        self,
        value: DynamicExtent | RuntimeScalar,
        element: str,
        name: str,
        position: ast.Position,
        frame: Frame,
    ) -> TensorInfo:
        """A rank-0 tensor holding a value computed at run time from run-time extents (§3.1: the
        shape expressions after a data-dependent operation are computed during execution): an
        operation of its own whose kernel reads the counters."""
        tensor = self.builder.new_tensor(
            self.builder.unique_name(name), element, (), "intermediate", position
        )
        op = RuntimeScalarOperation(
            type="runtime.scalar",
            attribs={"value": value},
            inputs=(),
            outputs=(tensor.name,),
            label=tensor.name,
            definition=RUNTIME_SCALAR_DEFINITION,
            dtypes={"T": element},
            position=position,
            scopes=frame.scopes,
        )
        tensor.producer = op
        self.builder.operations.append(op)
        return tensor

    def leaf(self, instance: Instance, frame: Frame, names: list[str | None], position: ast.Position) -> list:
        """The outputs of a leaf invocation: new tensors of the declared shapes, produced by one
        :class:`Operation` added to the graph."""
        self.input_tensors(instance, frame)
        declared = self.shapes.declared_outputs(instance)
        constants = self.operator_locals(instance)
        results = []
        for index, param in enumerate(instance.info.definition.outputs):
            element, shape = declared[param.name]
            name = names[index] if index < len(names) and names[index] else None
            base = frame.scope + name if name else f"{instance.label}.{param.name}"
            if param.type.pack is not None:
                if shape is None:
                    raise NNEFError.at(
                        param.pos,
                        f"{instance.name}: the length of the output pack '{param.name}' is not declared",
                    )
                value = [
                    self.builder.new_tensor(
                        self.builder.unique_name(f"{base}[{item}]"),
                        element,
                        tuple(item_shape),
                        "intermediate",
                        position,
                    )
                    for item, item_shape in enumerate(shape)
                ]
            else:
                if shape is None:
                    raise NNEFError.at(
                        param.pos, f"{instance.name}: output '{param.name}' has no declared shape"
                    )
                value = self.builder.new_tensor(
                    self.builder.unique_name(base), element, tuple(shape), "intermediate", position
                )
            instance.symbols[param.name] = value
            results.append(value)
        op = Operation(
            type=instance.name,
            attribs=dict(instance.attribs),
            inputs=tuple(
                names_of(instance.inputs.get(param.name)) for param in instance.info.definition.inputs
            ),
            outputs=tuple(names_of(value) for value in results),
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
        self.builder.operations.append(op)
        return results

    def operator_locals(self, instance: Instance) -> dict[str, TensorInfo]:
        """Constants and variables declared by an operator, as tensors under its label."""
        created: dict[str, TensorInfo] = {}
        definition = instance.info.definition
        for param in (*definition.constants, *definition.variables):
            kind = "constant" if param in definition.constants else "variable"
            tensor = self.local_tensor(instance, param, kind, f"{instance.label}.{param.name}")
            instance.symbols[param.name] = tensor
            created[param.name] = tensor
        return created

    def local_tensor(self, instance: Instance, param: ast.Param, kind: str, name: str) -> TensorInfo:
        """The tensor ``name`` of a declared constant (its data evaluated) or variable (its data
        loaded, when the loader has it)."""
        element = element_type(instance, param.type)
        if element is None:
            raise NNEFError.at(param.pos, f"{kind} '{param.name}' needs a concrete type")
        shape = (
            tuple(self.shapes.evaluate_shape(instance, param.type, param.name, 0))
            if param.type.shape is not None
            else ()
        )
        if kind == "constant":
            data = self._constant_data(instance, param, element, shape)
            return self.builder.new_tensor(name, element, shape, kind, param.pos, data)
        tensor = self.builder.new_tensor(name, element, shape, kind, param.pos)
        if self.variable_loader is not None:
            data = self.variable_loader(name, tensor)
            if data is not None:
                tensor.data = _check_variable_data(tensor, data)
        return tensor

    def _constant_data(self, instance: Instance, param: ast.Param, element: str, shape: tuple) -> np.ndarray:
        if param.default is None:
            raise NNEFError.at(param.pos, f"constant '{param.name}' needs a value")
        dtype = numpy_dtype_of(element)
        if not all(isinstance(extent, int) for extent in shape):
            return self._constant_at_upper_bounds(instance, param, dtype, shape)
        if not param.bounds:
            value = instance.evaluator()(param.default)
            if isinstance(value, list):
                if len(value) != int(np.prod(shape, dtype=np.int64)):
                    raise NNEFError.at(
                        param.pos,
                        f"constant '{param.name}' of shape {list(shape)} needs "
                        f"{int(np.prod(shape))} values, got {len(value)}",
                    )
                try:
                    return np.array(value, dtype=dtype).reshape(shape)
                except (OverflowError, ValueError, TypeError) as error:
                    raise NNEFError.at(param.pos, f"constant '{param.name}': its values cannot be {dtype} "
                                                 f"values ({error})") from None  # fmt: skip
            if value is None:
                raise NNEFError.at(param.pos, f"the value of constant '{param.name}' is null")
            return filled_array(shape, value, dtype, param.name, param.pos)
        return self._constant_per_element(instance, param, dtype, shape)

    def _constant_at_upper_bounds(
        self, instance: Instance, param: ast.Param, dtype: np.dtype, shape: tuple
    ) -> np.ndarray:
        """A constant whose shape has extents decided at run time: its data is allocated at the upper
        bounds (kernels never read past the actual extents); each value must be known at compile
        time (a uniform value, or a formula of the indices)."""
        if any(isinstance(extent, DynamicExtent) and extent.bound is None for extent in shape):
            raise NNEFError.at(
                param.pos, f"constant '{param.name}' has a run-time extent without an upper bound"
            )
        upper = tuple(extent if isinstance(extent, int) else int(extent.bound) for extent in shape)
        if param.bounds:
            data = self._constant_per_element(instance, param, dtype, shape, upper)
        else:
            value = instance.evaluator()(param.default)
            if isinstance(value, list):
                raise NNEFError.at(
                    param.pos,
                    f"constant '{param.name}' has the run-time shape {format_value(list(shape))}; a list of "
                    f"values cannot fill it (give a uniform value or a formula of the indices)",
                )
            data = _constant_value(param, value, dtype, upper)
        return data

    def _constant_per_element(
        self, instance: Instance, param: ast.Param, dtype: np.dtype, shape: tuple, upper: tuple | None = None
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
            raise NNEFError.at(
                param.pos,
                f"the index bounds {list(extents)} of constant '{param.name}' do not match "
                f"its shape {list(shape)}",
            )
        upper = tuple(shape) if upper is None else upper
        check_constant_size(upper, dtype, param.name, param.pos)
        if math.prod(upper) > MAX_FORMULA_ELEMENTS:
            raise NNEFError.at(
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
                _constant_value(param, value, dtype, ())  # raises: not a compile-time value
            data[point] = value
        return data


# ------------------------------------------------------------------------------------------------
# checks and computations that need no composer state (module functions, not methods)


def _check_variable_data(tensor: TensorInfo, data: np.ndarray) -> np.ndarray:
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


def _constant_value(param: ast.Param, value: Any, dtype: np.dtype, shape: tuple) -> np.ndarray:
    if value is None:
        raise NNEFError.at(param.pos, f"the value of constant '{param.name}' is null")
    if isinstance(value, DynamicExtent | RuntimeScalar):
        raise NNEFError.at(
            param.pos,
            f"the value of constant '{param.name}' depends on the run-time value {value!r}; a constant "
            f"is known at compile time (compute it with an operation instead)",
        )
    return filled_array(shape, value, dtype, param.name, param.pos)
