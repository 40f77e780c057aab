"""The expression evaluator of a lowering: tensor accesses read through a kernel builder.

Inside a ``@lower`` statement a tensor access ``x[i, j]`` becomes a load at the flat row-major
offset of its indices; ``|i|`` guards gate the load and drop the whole term, ``|i <> a : b|``
remaps an out-of-range index, a pack item picked by a run-time index becomes a chain of selects,
the output read inside its own statement is its current value, and a constant tensor of one
repeated value is read as that literal. :mod:`uopviz.nnef.lowering.operation_lowering` drives it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from uopviz.core.dtype import dtypes
from uopviz.core.ops import Ops
from uopviz.core.uop import UOp
from uopviz.nnef.errors import NNEFError
from uopviz.nnef.evaluation.expressions import Evaluator
from uopviz.nnef.evaluation.values import BoundedIndex, DynamicExtent, format_value, type_name_of
from uopviz.nnef.lowering.kernel_builder import ALL_ITEMS, KernelBuilder, PackChoice
from uopviz.nnef.lowering.kernel_math import (
    KernelScalarOps,
    all_of,
    as_index,
    as_uop,
    flat_offset,
    select,
    uop_constant,
    uop_dtype,
)
from uopviz.nnef.model.nodes import TensorInfo
from uopviz.nnef.syntax import ast


class LoweringEvaluator(Evaluator):
    """The expression evaluator of a lowering: tensor accesses read through a kernel builder."""

    def __init__(self, builder: KernelBuilder, symbols: Any, types: dict[str, str]) -> None:
        super().__init__(symbols, frozenset(), types, KernelScalarOps(builder.extent))
        self.builder = builder

    def tensor_access(self, node: ast.TensorAccess) -> Any:
        base = self(node.base)
        if base is None:
            return None
        items: list[Any] = []
        for index in node.indices:
            if isinstance(index, ast.Expand):
                value = self(index.value)
                if value is None:
                    return None
                if index.count is not None:
                    count = self.repeat_count(index.count)
                    value = (value if isinstance(value, list) else [value]) * (count or 0)
                if not isinstance(value, list):
                    raise NNEFError.at(index.pos, "'..' in a tensor index expands a pack; this is not a pack")
                items.extend(value)
            elif isinstance(index, ast.Range):
                if index.start is None and index.stop is None and index.step is None:
                    items.append(ALL_ITEMS)
                else:
                    items.append(("range", index))
            else:
                value = self(index)
                if value is None:
                    return None
                items.append(("positions", value) if isinstance(value, list) else value)
        return self.read(base, items, node)

    def read(self, base: Any, items: list, node: ast.Node) -> Any:
        """The value of ``base`` at ``items`` (a pack when an index is ``:``)."""
        if isinstance(base, list):
            return [self.read(item, items, node) for item in base]
        if isinstance(base, PackChoice):
            values = [self.read(tensor, items, node) for tensor in base.tensors]
            return _pick(values, base.selector)
        if isinstance(base, OutputRef):
            return self._read_output(base, items, node)
        if not isinstance(base, TensorInfo):
            raise NNEFError.at(
                node.pos, f"only tensors can be accessed with x[...], got {type_name_of(base)}"
            )
        if len(items) != base.rank:
            raise NNEFError.at(
                node.pos, f"'{base.name}' has rank {base.rank} but is accessed with {len(items)} indices"
            )
        resolved = [
            self._range_positions(item, extent) for item, extent in zip(items, base.upper_shape, strict=True)
        ]
        packed = [axis for axis, item in enumerate(resolved) if isinstance(item, list)]
        if len(packed) > 1:
            raise NNEFError.at(node.pos, "only one dimension of an access may be ':'")
        if packed:
            axis = packed[0]
            return [
                self._read_point(base, resolved[:axis] + [position] + resolved[axis + 1 :], node)
                for position in resolved[axis]
            ]
        return self._read_point(base, resolved, node)

    def _range_positions(self, item: Any, extent: int) -> Any:
        if item is ALL_ITEMS:
            return list(range(extent))
        if isinstance(item, tuple) and item and item[0] == "range":
            return self.slice_value(list(range(extent)), item[1])
        if isinstance(item, tuple) and item and item[0] == "positions":
            return list(item[1])  # a pack index (not expanded) reads a pack along this dimension
        return item

    def _read_point(self, tensor: TensorInfo, indices: list, node: ast.Node) -> Any:
        uniform = uniform_constant(tensor)
        if uniform is not None:
            self._guards(tensor, indices, node)  # a guarded read still skips its term
            return uniform
        positions, gate = self._guards(tensor, indices, node)
        if gate is False:
            return uop_constant(uop_dtype(tensor.dtype), 0)
        return self.builder.load(tensor, flat_offset(positions, tensor.upper_shape), gate)

    def _guards(self, tensor: TensorInfo, indices: list, node: ast.Node) -> tuple[list, Any]:
        positions: list[Any] = []
        gates: list[Any] = []
        extent_of = self.builder.extent
        for index, extent, declared in zip(indices, tensor.upper_shape, tensor.shape, strict=True):
            if isinstance(index, DynamicExtent):
                index = as_index(extent_of(index))
            if isinstance(index, BoundedIndex):  # guards and remaps test the actual extent
                index = BoundedIndex(*(extent_of(part) for part in (index.index, index.lower, index.upper)))
                position, gate = _bounded(index, extent_of(declared))
                gates.append(gate)
                positions.append(position)
            elif isinstance(index, int) and not isinstance(index, bool):
                if not 0 <= index < extent:
                    raise NNEFError.at(
                        node.pos,
                        f"index {index} is out of range for extent {extent} of "
                        f"'{tensor.name}'; guard it with |...|",
                    )
                positions.append(index)
            elif isinstance(index, UOp):
                positions.append(as_index(index))
            else:
                raise NNEFError.at(node.pos, f"a tensor index must be an int, got {format_value(index)}")
        gate = all_of(gates)
        if gate is not True:
            self.builder.term_gates.append(gate)
        return positions, gate

    def _read_output(self, ref: OutputRef, items: list, node: ast.Node) -> Any:
        dtype = uop_dtype(ref.tensor.dtype)
        packed = [axis for axis, item in enumerate(items) if item is ALL_ITEMS]
        if packed:
            return [
                self.builder.placeholder(position, dtype)
                for position in range(ref.tensor.upper_shape[packed[0]])
            ]
        return self.builder.placeholder(0, dtype)

    def index_other(self, base: Any, index: Any, node: ast.Index) -> Any:
        if isinstance(base, TensorInfo | OutputRef):  # x[i] for x[i,]: the spec's own linear writes it
            return self.read(base, [index], node)
        return super().index_other(base, index, node)

    def dynamic_item(self, base: list | str, index: Any, node: ast.Index) -> Any:
        if not isinstance(index, UOp) or isinstance(base, str):
            return super().dynamic_item(base, index, node)
        if base and all(isinstance(item, TensorInfo) for item in base):
            return PackChoice(tuple(base), index)
        return _pick(list(base), index)

    def runtime_select(self, condition: Any, node: ast.Select) -> Any:
        if not condition.dtype.is_bool:
            condition = condition.ne(uop_constant(condition.dtype, 0))
        builder = self.builder
        saved = builder.term_gates
        builder.term_gates = []
        builder.gate_stack.append(condition)
        then = self(node.then)
        builder.gate_stack.pop()
        then_gates, builder.term_gates = builder.term_gates, []
        builder.gate_stack.append(UOp(Ops.NOT, (condition,)))
        otherwise = self(node.otherwise)
        builder.gate_stack.pop()
        other_gates = builder.term_gates
        builder.term_gates = saved
        if then_gates or other_gates:
            saved.append(
                select(
                    condition,
                    as_uop(all_of(then_gates), dtypes.bool),
                    as_uop(all_of(other_gates), dtypes.bool),
                )
            )
        if then is None or otherwise is None:
            return None
        if isinstance(then, list) or isinstance(otherwise, list):
            thens = then if isinstance(then, list) else [then] * len(otherwise)
            others = otherwise if isinstance(otherwise, list) else [otherwise] * len(thens)
            return [select(condition, a, b) for a, b in zip(thens, others, strict=True)]
        return select(condition, then, otherwise)


@dataclass(frozen=True)
class OutputRef:
    """The output being assigned, read inside its own statement (the current value)."""

    tensor: TensorInfo


def _pick(values: list, selector: UOp) -> Any:
    """``values[selector]`` for a run-time selector: a chain of WHERE."""
    if not values:
        raise NNEFError("cannot pick an item of an empty pack")
    out = values[-1]
    for position in range(len(values) - 2, -1, -1):
        out = select(selector.eq(uop_constant(selector.dtype, position)), values[position], out)
    return out


def _bounded(index: BoundedIndex, extent: int | UOp) -> tuple[Any, Any]:
    """(position, gate) of a guarded / remapped index against ``extent`` (an int, or an index UOp
    for an extent decided at run time)."""
    value = index.index
    static = isinstance(extent, int)
    if not index.remaps:
        if isinstance(value, int) and static:
            return value, 0 <= value < extent
        position = as_index(value)
        return position, UOp(Ops.AND, (position >= 0, position < extent))
    if static and all(isinstance(v, int) for v in (value, index.lower, index.upper)):
        return (index.lower if value < 0 else index.upper if value >= extent else value), True
    position = as_index(value)
    lower, upper = as_index(index.lower), as_index(index.upper)
    remapped = UOp(Ops.WHERE, (position < 0, lower, UOp(Ops.WHERE, (position >= extent, upper, position))))
    return remapped, True


def uniform_constant(tensor: TensorInfo) -> Any:
    """The single value of a constant tensor whose items are all equal (read as a literal)."""
    if tensor.kind != "constant" or tensor.data is None or tensor.data.size == 0:
        return None
    cached = tensor.__dict__.get("_uniform", MISSING)
    if cached is MISSING:
        flat = tensor.data.reshape(-1)
        cached = flat[0].item() if bool(np.all(flat == flat[0])) else None
        if isinstance(cached, bool) and tensor.dtype != "bool":
            cached = int(cached)
        tensor.__dict__["_uniform"] = cached
    return cached


MISSING = object()
