"""The graph a composition builds: its tensors, operations, composites, updates, packs and trip
counters, and the only code that adds, names or renames a tensor.

The :class:`~uopviz.nnef.composition.composer.Composer` owns one :class:`GraphBuilder` and hands it
to each of its parts (arguments, leaves, loops, graph I/O); a part adds what it makes here, so the
state of a composition sits in one object instead of in the composer's attributes.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from uopviz.nnef.composition.support import MAX_EXTENT, filled_array, rename_captured, replace_name
from uopviz.nnef.errors import NNEFError
from uopviz.nnef.evaluation.values import format_value
from uopviz.nnef.graph import Composite, LoopOperation, Operation, TensorInfo, numpy_dtype_of
from uopviz.nnef.syntax import ast

__all__ = ["GraphBuilder"]


class GraphBuilder:
    """The tensors and operations of the graph being composed (loop sub-graphs included, told
    apart by :attr:`subgraph_tensors`)."""

    def __init__(self) -> None:
        self.tensors: dict[str, TensorInfo] = {}
        self.operations: list[Operation] = []
        self.composites: list[Composite] = []
        self.updates: dict[str, str] = {}
        self.packs: dict[str, list[str]] = {}  # graph input / output packs: name -> item tensor names
        # run-time extents counted by a tensor of the graph (a loop's trip count): key -> tensor name
        self.trip_counters: dict[str, str] = {}
        self.subgraph_tensors: set[str] = set()  # tensors owned by the sub-graphs of loop nodes
        self._serial = itertools.count()

    def next_serial(self) -> int:
        """A number above every tensor's made so far: a tensor made later has a higher ``serial``."""
        return next(self._serial)

    # -- tensors ------------------------------------------------------------------------------------

    def new_tensor(
        self,
        name: str,
        dtype: str,
        shape: list | tuple,
        kind: str,
        position: ast.Position,
        data: np.ndarray | None = None,
    ) -> TensorInfo:
        """A new tensor ``name`` (which must be free) with checked extents."""
        if name in self.tensors:
            raise NNEFError.at(
                position, f"tensor name '{name}' is already used (defined at {self.tensors[name].position})"
            )
        for extent in shape:
            if isinstance(extent, int) and not isinstance(extent, bool) and not 0 <= extent < MAX_EXTENT:
                raise NNEFError.at(
                    position,
                    f"tensor '{name}' would have the {'negative' if extent < 0 else 'too large'} extent "
                    f"{extent} in its shape {format_value(list(shape))}"
                    + ("" if extent < 0 else f" (extents are below 2**{MAX_EXTENT.bit_length() - 1})"),
                )
        tensor = TensorInfo(
            name, dtype, tuple(shape), kind, data, position=position, serial=self.next_serial()
        )
        self.tensors[name] = tensor
        return tensor

    def unique_name(self, base: str) -> str:
        """``base``, or ``base#n`` with the first ``n`` no tensor has."""
        if base not in self.tensors:
            return base
        for number in itertools.count(1):
            candidate = f"{base}#{number}"
            if candidate not in self.tensors:
                return candidate
        raise AssertionError("unreachable")

    def unique_label(self, base: str) -> str:
        """``base``, or ``base#n`` with the first ``n`` no operation label and no tensor has."""
        labels = {op.label for op in self.operations}
        if base not in labels and base not in self.tensors:
            return base
        return next(
            f"{base}#{n}"
            for n in itertools.count(1)
            if f"{base}#{n}" not in labels and f"{base}#{n}" not in self.tensors
        )

    def constant_tensor(
        self, value: Any, dtype: str, shape: tuple, name: str, position: ast.Position
    ) -> TensorInfo:
        """A constant tensor of ``shape`` holding ``value`` (an array, or one value for every element)."""
        array = (
            filled_array(shape, value, numpy_dtype_of(dtype), name, position)
            if not isinstance(value, np.ndarray)
            else value.astype(numpy_dtype_of(dtype))
        )
        return self.new_tensor(self.unique_name(name), dtype, shape, "constant", position, array)

    def rename(self, tensor: TensorInfo, name: str, position: ast.Position) -> None:
        """Give ``tensor`` the free name ``name``, in every operation, composite and loop that names it."""
        if tensor.name == name:
            return
        if name in self.tensors:
            raise NNEFError.at(
                position, f"tensor name '{name}' is already used (defined at {self.tensors[name].position})"
            )
        del self.tensors[tensor.name]
        old = tensor.name
        tensor.name = name
        self.tensors[name] = tensor
        producer = tensor.producer
        if producer is not None:
            producer.outputs = replace_name(producer.outputs, old, name)
        for op in reversed(self.operations):
            if op is producer:
                break
            if old in op.input_names():
                op.inputs = replace_name(op.inputs, old, name)
        for composite in self.composites:
            composite.inputs = replace_name(composite.inputs, old, name)
            composite.outputs = replace_name(composite.outputs, old, name)
        for op in self.operations:
            if isinstance(op, LoopOperation):
                rename_captured(op, old, name)

    # -- sub-graphs of loop nodes ---------------------------------------------------------------------

    @contextmanager
    def apart(self) -> Iterator[tuple[list[Operation], list[Composite]]]:
        """Operations and composites made inside go to lists of their own (a loop's sub-graph),
        yielded, instead of the graph's; tensors still go to :attr:`tensors`."""
        saved = self.operations, self.composites
        self.operations, self.composites = [], []
        try:
            yield self.operations, self.composites
        finally:
            self.operations, self.composites = saved

    def snapshot(self) -> tuple[frozenset[str], frozenset[str]]:
        """The tensor names and sub-graph tensor names now, for :meth:`roll_back`."""
        return frozenset(self.tensors), frozenset(self.subgraph_tensors)

    def roll_back(self, snapshot: tuple[frozenset[str], frozenset[str]]) -> None:
        """Forget the tensors made since ``snapshot`` (a loop body composed again)."""
        for name in set(self.tensors) - snapshot[0]:
            del self.tensors[name]
        self.subgraph_tensors = set(snapshot[1])

    # -- the graph's own --------------------------------------------------------------------------------

    def graph_tensors(self) -> dict[str, TensorInfo]:
        """The tensors of the graph itself (not of its loops' sub-graphs)."""
        return {n: t for n, t in self.tensors.items() if n not in self.subgraph_tensors}

    def graph_counts(self) -> dict[str, str]:
        """The trip counters of the graph itself (not of its loops' sub-graphs)."""
        return {key: name for key, name in self.trip_counters.items() if name not in self.subgraph_tensors}
