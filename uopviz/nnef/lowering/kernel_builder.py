"""The building blocks of a kernel of an NNEF operation.

:class:`LoweredKernel` (a kernel AST and the tensors bound to its PARAM slots),
:class:`KernelBuilder` (the PARAM slots of one kernel and the gates active while its values are
built), and the run-time extents and values computed inside kernels from the counters.

Run-time (data-dependent) extents. Tensors are stored at their upper bounds, row-major over the
upper-bound shape, and every kernel is compiled once. What changes at run time is how far each
kernel goes: the spec asks for shape inference interleaved with execution (§3 "Dynamic tensor
shapes"), and the extent expressions are the scalar expressions the composer keeps symbolically
(:class:`~uopviz.nnef.evaluation.values.DynamicExtent` keys). In a kernel such an extent is a UOp: the
counters of the extents its key is built of (``graph.counts``: int32 buffers written by the
counting kernels) loaded and combined by the key's arithmetic (:func:`runtime_extent`). A range
whose bound is a data-dependent extent runs to the upper bound, gated by ``range < extent``: the
gate joins the term's gates, so an accumulation skips the term (its identity takes its place), a
plain ``=`` does not store, an arg-extreme ignores the point, and the term's loads are gated too
(an index computed from the actual extent, such as a reflected one, may point outside there).
See :mod:`uopviz.nnef.lowering.operation_lowering` for how ranges are gated by them.

Values computed from such extents (:class:`~uopviz.nnef.evaluation.values.RuntimeScalar`: mean_reduce's
``real(s[axes] * ..)``, a resize's scale) become UOps over the same counters wherever a kernel
uses them (:func:`runtime_value`); passed as a tensor they are ``runtime.scalar`` operations, one
kernel storing the value. An int one used as an extent (rescale's ``int(round(real(s) * f))``) is
a run-time extent whose key is its expression, its bound from the extents' bounds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from uopviz.core.dtype import DType, dtypes
from uopviz.core.ops import Ops
from uopviz.core.origins import record_nnef_operation
from uopviz.core.uop import ParamArg, UOp, shape_uop
from uopviz.nnef.errors import NNEFError
from uopviz.nnef.evaluation.scalar_ops import PythonScalarOps
from uopviz.nnef.evaluation.values import DynamicExtent, RuntimeScalar
from uopviz.nnef.lowering.kernel_math import (
    INDEX,
    KERNEL_OPS,
    UOP_TYPES,
    all_of,
    as_index,
    substitute_in,
    uop_constant,
    uop_dtype,
)
from uopviz.nnef.model.nodes import Operation, TensorInfo
from uopviz.nnef.syntax import ast
from uopviz.passes.index_pushdown import KernelContext

if TYPE_CHECKING:
    from uopviz.nnef.model.graph import ComposedGraph


@dataclass(eq=False)
class LoweredKernel:
    """One kernel of an operation: its AST and the tensors bound to its PARAM slots.

    ``buffers[0]`` is the tensor the kernel writes (it may read it too); ``scratch`` declares
    buffers that exist only for the kernels (name -> (dtype, element count)); ``fused`` lists the
    operations whose kernels :mod:`uopviz.nnef.kernel_passes.fusion` folded into this one (in run order).
    """

    name: str
    ast: UOp
    buffers: list[str]
    operation: Operation = field(repr=False)
    scratch: dict[str, tuple[DType, int]] = field(default_factory=dict)
    note: str = ""
    fused: tuple[Operation, ...] = ()


def record_kernel_origins(kernels: list[LoweredKernel], gaps_only: bool = False) -> list[LoweredKernel]:
    """``kernels``, the nodes of each recorded as built by its operation (provenance names the NNEF
    operation a generated line descends from).  ``gaps_only``: only nodes no operation of the model
    claims yet (fused, padded, merged kernels: an inlined producer's nodes stay the producer's)."""
    for kernel in kernels:
        op = kernel.operation
        record_nnef_operation([kernel.ast], op.label, op.type, op.position.file, op.position.line, gaps_only)
    return kernels


# ------------------------------------------------------------------------------------------------
# reading tensors inside a kernel


@dataclass(frozen=True)
class PackChoice:
    """A tensor of a pack picked by a run-time index (``xs[y[i..]]``)."""

    tensors: tuple
    selector: UOp


class AllItems:
    """The ``:`` index of a packed access: every position of a dimension."""

    def __repr__(self) -> str:
        return ":"


ALL_ITEMS = AllItems()


class KernelBuilder:
    """The PARAM slots of one kernel and the gates active while its values are built."""

    def __init__(self, output: TensorInfo, graph: ComposedGraph) -> None:
        self.graph = graph
        self.output = output
        self.slots = KernelContext()  # the PARAM slots, as Rangeify keeps a kernel's (keyed by name)
        self.term_gates: list[Any] = []
        self.gate_stack: list[UOp] = []
        self.current: dict[int, UOp] = {}  # position of a `:` item -> placeholder of the output value
        self.param(output)

    def param(self, tensor: TensorInfo | str, dtype: DType | None = None, size: int | None = None) -> UOp:
        """The PARAM bound to ``tensor`` (slots in order of first use; slot 0 is the output)."""
        name = tensor if isinstance(tensor, str) else tensor.name
        found = self.params.get(name)
        if found is not None:
            return found
        if not isinstance(tensor, str):
            dtype = uop_dtype(tensor.dtype)
            size = max(math.prod(tensor.upper_shape), 1)
        return self.slots.bind_param(name, size, dtype, "CPU")

    @property
    def params(self) -> dict[str, UOp]:
        """The PARAM of each tensor name the kernel reads or writes, in slot order."""
        return self.slots.params

    @property
    def names(self) -> list[str]:
        """The tensor names bound to the PARAM slots, in slot order (slot 0: the output)."""
        return list(self.slots.params)

    def load(
        self,
        tensor: TensorInfo | str,
        flat: UOp,
        gate: Any = True,
        dtype: DType | None = None,
        size: int | None = None,
    ) -> UOp:
        """``LOAD(INDEX(param, flat))``, gated by ``gate`` and every enclosing run-time condition."""
        param = self.param(tensor, dtype, size)
        gate = all_of([*self.gate_stack, gate])
        address = UOp(Ops.INDEX, (param, flat))
        if gate is True:
            return UOp(Ops.LOAD, (address,))
        if gate is False:
            return uop_constant(param.arg.dtype, 0)
        return UOp(Ops.LOAD, (address, uop_constant(address.dtype, 0), gate))

    def extent(self, extent: Any) -> Any:
        """The value of an extent inside the kernel: an int, or for a data-dependent extent an index
        UOp read from the counters of the kernels that decide it (see :func:`runtime_extent`); a
        run-time scalar computed from such extents (:func:`runtime_value`)."""
        if isinstance(extent, RuntimeScalar):
            return runtime_value(self.graph, extent, self._counter)
        if not isinstance(extent, DynamicExtent):
            return extent
        found = runtime_extent(self.graph, extent, self._counter)
        return found if found is not None else int(extent.bound)

    def _counter(self, name: str) -> UOp:
        # read without the gates of run-time conditions: an extent is the same everywhere
        return UOp(Ops.LOAD, (UOp(Ops.INDEX, (self.param(name, dtypes.int32, 1), uop_constant(INDEX, 0))),))

    def placeholder(self, item: int, dtype: DType) -> UOp:
        """A stand-in for the current value of the output (item ``item`` of a packed dim)."""
        found = self.current.get(item)
        if found is None:
            found = UOp(Ops.PARAM, (shape_uop(()),), ParamArg(-1 - item, dtype, None, None))
            self.current[item] = found
        return found


def _counter_of(graph: ComposedGraph, key: Any) -> str | None:
    """The counter buffer of the data-dependent extent ``key``: operations are lowered in order
    until the one that counts it has registered it (None when no operation counts it)."""
    found = graph.counts.get(key)
    if found is not None:
        return found
    busy = graph.__dict__.setdefault("_lowering_now", set())
    for op in graph.operations:
        if id(op) in busy:
            break  # up to the operation being lowered: nothing after it decides its inputs' extents
        if id(op) not in graph._lowered:
            graph.lower(op)
        found = graph.counts.get(key)
        if found is not None:
            return found
    return None


NOT_A_LEAF = object()  # "not a leaf" marker of evaluate_tree


def evaluate_tree(node: Any, leaf: Callable[[Any], Any], ops: PythonScalarOps) -> Any:
    """The value of a run-time extent's key or a run-time scalar's expression: ``leaf(node)`` gives
    the value of a counted leaf (None: unknown; ``NOT_A_LEAF``: not a leaf); inner nodes are
    ``(op, a, b)``, ``(cast or function, a)`` and ``("?", condition, a, b)``, computed by ``ops``."""
    found = leaf(node)
    if found is not NOT_A_LEAF:
        return found
    if isinstance(node, tuple) and node and isinstance(node[0], str):
        items = [evaluate_tree(item, leaf, ops) for item in node[1:]]
        if any(item is None for item in items):
            return None
        if len(node) == 4:
            condition, then, otherwise = items
            if isinstance(condition, bool):
                return then if condition else otherwise
            return ops.select(condition, then, otherwise, ast.NOWHERE)
        if len(node) == 3:
            return ops.binary(node[0], items[0], items[1], ast.NOWHERE)
        if node[0] in UOP_TYPES:
            return ops.cast(node[0], items[0], ast.NOWHERE)
        return ops.builtin(node[0], items[0], ast.NOWHERE)
    if isinstance(node, int | float):
        return node
    return None


def runtime_extent(graph: ComposedGraph, extent: DynamicExtent, counter: Callable[[str], UOp]) -> UOp | None:
    """A data-dependent extent as an index UOp: its key's counters (``counter(name)`` reads one)
    combined by the key's arithmetic; None when part of it is counted by no kernel (an input
    extent, computed at its upper bound until the graph is recomposed for the given shapes)."""

    def leaf(key: Any) -> Any:
        name = _counter_of(graph, key)
        if name is not None:
            return counter(name).cast(INDEX)
        return None if isinstance(key, str) else NOT_A_LEAF

    found = evaluate_tree(extent.key, leaf, KERNEL_OPS)
    return as_index(found) if found is not None else None


def runtime_value(graph: ComposedGraph, value: Any, counter: Callable[[str], UOp]) -> Any:
    """A run-time extent or a :class:`RuntimeScalar` as a kernel value: its expression over the
    counters (an extent no kernel counts, an input extent before the graph is recomposed for the
    given shapes, takes its upper bound, as the ranges do)."""
    if isinstance(value, RuntimeScalar):
        return evaluate_tree(
            value.expression,
            lambda node: (
                runtime_value(graph, node, counter) if isinstance(node, DynamicExtent) else NOT_A_LEAF
            ),
            KERNEL_OPS,
        )
    if isinstance(value, DynamicExtent):
        found = runtime_extent(graph, value, counter)
        if found is not None:
            return found
        if value.bound is None:
            raise NNEFError(f"the run-time extent {value!r} has no upper bound and no kernel counts it")
        return int(value.bound)
    return value


def rebind_params(value: UOp, source: KernelBuilder, target: KernelBuilder) -> UOp:
    """``value`` built with ``source``'s PARAM slots, re-expressed with ``target``'s."""
    mapping = {}
    for name, param in source.params.items():
        if any(u is param for u in value.toposort()):
            found = target.params.get(name)
            if found is None:
                found = target.param(name, param.arg.dtype, param.shape[0])
            if found is not param:
                mapping[param] = found
    return substitute_in(value, mapping)
