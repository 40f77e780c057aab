"""Built-in kernels for operators whose ``@lower`` formula is quadratic: ``math.cumsum``.

The stdlib's cumsum ``@lower`` (used above :data:`~uopviz.nnef.composition.support.DECOMPOSE_EXTENT_LIMIT`
or over an extent decided at run time) sums, at each of the ``n`` items, the items up to it: a
REDUCE of extent ``n`` at every point, ``n²`` additions (42 s for 100,000 items on C).  The spec's
composition adds the items one after another in a loop, ``sum = add(sum, item)``, and the results
must be the same bit for bit, so a parallel scan (which adds in another order) will not do.
:func:`lower_cumsum` writes that loop as one kernel: one thread per independent row (the axes
before and after the summed one are output loops), and along the axis a *sequential* REDUCE range
``k`` that no REDUCE op reduces, whose iteration ``k`` stores ``out[k] = out[k - 1] + x[k]``
(exclusive: ``out[k - 1] + x[k - 1]``; reverse: from the end).  That is ``n`` additions in the
spec's order.  Such a range keeps its order through the pipeline: Optimize does not split it into
lanes or swap it (:func:`uopviz.passes.optops.axes.sequential_axes`) and the Python backend runs it
as a Python loop.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from uopviz.core.ops import AxisType, Ops
from uopviz.core.uop import UOp
from uopviz.nnef.lowering.kernel_builder import KernelBuilder, LoweredKernel
from uopviz.nnef.lowering.kernel_math import INDEX, all_of, as_index, flat_offset, uop_constant
from uopviz.nnef.model.nodes import Operation, TensorInfo
from uopviz.passes.rangeify import finish_kernel

if TYPE_CHECKING:
    from uopviz.nnef.model.graph import ComposedGraph

__all__ = ["BUILT_IN_LOWERINGS", "lower_cumsum"]


def lower_cumsum(graph: ComposedGraph, op: Operation) -> list[LoweredKernel]:
    """``math.cumsum`` as one sequential scan kernel: ``n`` additions per row, in the order of the
    spec's loop (see the module docstring)."""
    source: TensorInfo = op.symbols["input"]
    output: TensorInfo = op.symbols["output"]
    axis = int(op.attribs["axis"])
    axis += source.rank if axis < 0 else 0
    exclusive, reverse = bool(op.attribs["exclusive"]), bool(op.attribs["reverse"])
    upper = output.upper_shape
    outer, length, inner = math.prod(upper[:axis]), upper[axis], math.prod(upper[axis + 1 :])
    if outer * length * inner == 0:
        return []  # nothing to sum
    builder = KernelBuilder(output, graph)
    extent = builder.extent(source.shape[axis])  # an int, or the counted extent read in the kernel
    row = UOp.range(outer, AxisType.LOOP, 0) if outer > 1 else 0
    column = UOp.range(inner, AxisType.LOOP, 1) if inner > 1 else 0
    step = UOp.range(length, AxisType.REDUCE, 2) if length > 1 else uop_constant(INDEX, 0)
    valid: Any = True if isinstance(extent, int) else step < as_index(extent)
    last = as_index(extent) - 1
    position = last - step if reverse else step
    previous = position + 1 if reverse else position - 1
    after_first = step > 0 if length > 1 else False

    def at(index: UOp) -> UOp:
        return flat_offset([row, index, column], (outer, length, inner))

    running = builder.load(output, at(previous), all_of([after_first, valid]))
    if exclusive:
        value = running + builder.load(source, at(previous), all_of([after_first, valid]))
    else:
        value = running + builder.load(source, at(position), valid)
    address = UOp(Ops.INDEX, (builder.param(output), at(position)))
    store = UOp(Ops.STORE, (address, value) if valid is True else (address, value, valid))
    note = "sequential scan" + (", exclusive" if exclusive else "") + (", reverse" if reverse else "")
    kernel, names = finish_kernel(UOp(Ops.SINK, (store,)), builder.names, keep=(0,))
    return [LoweredKernel(op.label, kernel, names, op, note=note)]


#: Operations with a body that get a built-in kernel instead of their ``@lower`` formula's.
BUILT_IN_LOWERINGS: dict[str, Callable[[ComposedGraph, Operation], list[LoweredKernel]]] = {
    "math.cumsum": lower_cumsum,
}
