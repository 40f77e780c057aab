"""Weights laid out for output-channel vectors: a convolution's (or a matmul's) filter read with its
output channels in a vector's lanes, copied once into a blocked layout in which those lanes are
contiguous.

The CPU heuristic vectorises a convolution over its output channels (the input value, which does not
depend on them, is broadcast; the filter row is the vector).  In the filter's own layout
``[O, I, KH, KW]`` (row-major) the lanes ``o .. o + L`` of one filter vector lie ``I * KH * KW``
elements apart: the C compiler gathers each vector with ``L`` scalar loads (16 on AVX-512) for every
multiply-add of a register tile row.  The blocked copy ``[O / L, I, KH, KW, L]`` puts them next to
each other, so each becomes one vector load (ResNet-50's 1x1 convolutions are then gemms with a
contiguous B).

:func:`block_weight_reads` rewrites, in the kernels of one program, every read of a variable or
constant tensor that

- lies inside an ADD reduction and is not gated (the filter of a padded convolution is read whole);
- indexes the tensor's first axis by exactly one output (non-reduction) range that spans it, and the
  other axes by anything that does not involve that range (checked on the linear form of the flat
  index: the range's coefficient is the first axis' stride and nothing else varies with it);
- has a first axis that ``L`` divides, ``L`` being the lanes of one of the CPU target's vector
  registers for the tensor's element type (16 float32 on x86-64-v4, 8 on v3, 4 on v2), else the
  widest power of two from ``L / 2`` down to 4 that divides it (the heuristic vectorises a
  1000-way classifier's outputs by 8)

into a read of ``name#blocked<L>`` at ``(o // L) * (R * L) + rest * L + o % L`` (``R`` the product of
the other extents, ``rest`` their row-major offset).  Once the heuristic splits ``o`` into vector lanes
of ``L`` (or of a divisor of ``L``) the ``//`` and ``%`` fold away and the lanes are consecutive.

The copy is made on the host, not by a kernel: a graph's weights are the same for every run, and a
copy per run would cost more than it saves (ResNet-50's 25 M weights).  :class:`WeightLayout` names
it; ``graph.layouts`` keeps the graph's layouts and :func:`layout_array` makes (and caches) the copy
from the tensor's data, or from the array a run gives for the variable by name.  New weights take a
new data array (``graph.tensors[name].data = array``): the copy follows the array, not changes made
inside it.  Only CPU backends generating code for the CPU target's vector registers (C, LLVM) get
the blocked layout.

Activations stay in NCHW: blocking them the same way (ONNX Runtime's NCHWc) was measured and did
not pay (``docs/design/cpu-conv-layout.md``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from uopviz.backends.aligned import aligned
from uopviz.core.affine import build_range_sum
from uopviz.core.dtype import dtypes
from uopviz.core.ops import AxisType, Ops
from uopviz.core.rewrite import substitute
from uopviz.core.uop import UOp
from uopviz.nnef.kernel_passes.padding import index_linear_form, index_span
from uopviz.nnef.lowering.kernel_builder import LoweredKernel
from uopviz.nnef.lowering.kernel_math import uop_dtype
from uopviz.passes.rangeify import finish_kernel

if TYPE_CHECKING:
    from uopviz.nnef.model.graph import ComposedGraph

__all__ = ["WeightLayout", "block_weight_reads", "layout_array", "vector_lanes"]

#: tensor kinds whose values are the same for every run (the ones worth a copy made once)
_FIXED_KINDS = frozenset({"variable", "constant"})


@dataclass(frozen=True)
class WeightLayout:
    """A copy of tensor ``source`` (``shape``, row-major) with its first axis split into blocks of
    ``lanes``, the lanes innermost: ``[shape[0] / lanes, *shape[1:], lanes]``."""

    source: str
    shape: tuple[int, ...]
    lanes: int

    @property
    def name(self) -> str:
        """The buffer name kernels read the copy by."""
        return f"{self.source}#blocked{self.lanes}"

    def apply(self, array: np.ndarray) -> np.ndarray:
        """The blocked copy of ``array`` (the source tensor's values), flat."""
        first, rest = self.shape[0], math.prod(self.shape[1:])
        blocks = np.asarray(array).reshape(first // self.lanes, self.lanes, rest)
        return np.ascontiguousarray(blocks.transpose(0, 2, 1)).reshape(-1)


def vector_lanes(backend: Any, itemsize: int) -> int | None:
    """Lanes of one of ``backend``'s vector registers for items of ``itemsize`` bytes, or None when
    the backend gets no blocked layouts: only the backends that generate code for the CPU target's
    registers (C, LLVM) do; the Python backend's vectors are lists, GPUs vectorise differently."""
    from uopviz.backends.base import TargetsCPU

    if not isinstance(backend, TargetsCPU) or not backend.runs_on_cpu or not backend.vector_widths:
        return None
    lanes = backend.register_bytes // itemsize
    return lanes if lanes > 1 else None


def _block(lanes: int | None, channels: int) -> int | None:
    """The block for ``channels`` output channels: a register's ``lanes``, else the widest smaller
    power of two (at least 4) that divides them, which the heuristic's vectors then take (a 1000-way
    classifier in blocks of 8 on AVX-512); None when none does."""
    while lanes is not None and lanes >= 4:
        if channels % lanes == 0:
            return lanes
        lanes //= 2
    return None


def _blocked_index(flat: UOp, lanes: int, shape: tuple[int, ...]) -> tuple[UOp, UOp] | None:
    """``(o, index)``: the output range ``o`` on the first axis of a flat ``flat`` into ``shape``
    and the index of the same element in the blocked layout; None when the read does not qualify."""
    found = index_linear_form(flat)
    if found is None:
        return None
    terms, constant = found
    rest_extent = math.prod(shape[1:])
    candidates = [
        r
        for r, coefficient in terms.items()
        if r.op is Ops.RANGE
        and r.arg[1] is not AxisType.REDUCE
        and coefficient == rest_extent
        and r.src[0].op is Ops.CONST
        and r.src[0].arg[0] == shape[0]
    ]
    if len(candidates) != 1:
        return None
    channel = candidates[0]
    others = {term: coefficient for term, coefficient in terms.items() if term is not channel}
    # the rest of the index must not vary with the channel and must stay inside one row of it
    if any(u is channel for term in others for u in term.toposort()):
        return None
    span = index_span(others, constant)
    if span is None or span[0] < 0 or span[1] >= rest_extent:
        return None
    rest = build_range_sum(others, constant)
    block = channel // lanes
    lane = channel % lanes
    index = block * (rest_extent * lanes) + rest * lanes + lane
    return channel, index


def _blocked_kernel(
    kernel: LoweredKernel, graph: ComposedGraph, lanes_of: Any
) -> tuple[LoweredKernel, list[WeightLayout]]:
    """``kernel`` reading the blocked copies of its filters, and their layouts."""
    written = kernel.buffers[0]
    mapping: dict[UOp, UOp] = {}
    layouts: list[WeightLayout] = []
    buffers = list(kernel.buffers)
    for reduce in (u for u in kernel.ast.toposort() if u.op is Ops.REDUCE and u.arg[0] is Ops.ADD):
        for load in reduce.src[0].toposort():
            if load.op is not Ops.LOAD or len(load.src) != 1 or load in mapping:
                continue
            address = load.src[0]
            param, flat = address.src
            if param.op is not Ops.PARAM or not 0 < param.arg.slot < len(buffers):
                continue
            name = buffers[param.arg.slot]
            tensor = graph.tensors.get(name)
            if name == written or tensor is None or tensor.kind not in _FIXED_KINDS or not tensor.is_static:
                continue
            if uop_dtype(tensor.dtype) is not load.dtype or load.dtype is dtypes.bool:
                continue
            shape = tuple(int(extent) for extent in tensor.upper_shape)
            lanes = _block(lanes_of(load.dtype.itemsize), shape[0])
            if lanes is None or len(shape) < 2 or math.prod(shape) != param.shape[0]:
                continue
            found = _blocked_index(flat, lanes, shape)
            if found is None:
                continue
            layout = WeightLayout(name, shape, lanes)
            if layout.name not in buffers:
                buffers.append(layout.name)
            arg = param.arg
            blocked = UOp.param(buffers.index(layout.name), param.shape, arg.dtype, arg.device, arg.addrspace)
            mapping[load] = UOp(Ops.LOAD, (UOp(Ops.INDEX, (blocked, found[1])),))
            layouts.append(layout)
    if not mapping:
        return kernel, []
    ast, kept = finish_kernel(substitute(kernel.ast, mapping), buffers, keep=(0,))  # 0: the output
    note = ", ".join(f"{layout.source} read blocked by {layout.lanes}" for layout in layouts)
    return replace(kernel, ast=ast, buffers=kept,
                   note=f"{kernel.note}; {note}" if kernel.note else note), layouts


def block_weight_reads(
    kernels: list[LoweredKernel], graph: ComposedGraph, backend: Any
) -> list[LoweredKernel]:
    """The kernels of one program with their filter reads turned into reads of blocked copies (see
    the module's docstring); the copies' layouts are recorded in ``graph.layouts``.  Kernels of
    backends without vector registers come back unchanged."""
    from uopviz.passes.render import backend_named

    target = backend_named(backend)
    if vector_lanes(target, 4) is None:
        return kernels
    out = []
    for kernel in kernels:
        blocked, layouts = _blocked_kernel(kernel, graph, lambda itemsize: vector_lanes(target, itemsize))
        for layout in layouts:
            graph.layouts.setdefault(layout.name, layout)
        out.append(blocked)
    return out


def layout_array(graph: ComposedGraph, layout: WeightLayout, source: np.ndarray) -> np.ndarray:
    """The blocked copy of ``source``, the values of ``layout.source``: made once per source array
    (the graph's own data, kept while the tensor keeps that array), and again for another one (an
    array a run gives for the variable by name)."""
    tensor = graph.tensors[layout.source]
    if source is not tensor.data:
        return aligned(layout.apply(source))
    cache = graph.__dict__.setdefault("_layout_copies", {})
    found = cache.get(layout.name)
    if found is not None and found[0] is source:
        return found[1]
    copy = aligned(layout.apply(source))
    cache[layout.name] = (source, copy)
    return copy
