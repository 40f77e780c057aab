"""Kernels lowered once for operations alike: operations with the same signature (operator,
attributes, types, and their tensors' types, shapes and kinds) lower to the same kernel ASTs (a
ResNet's repeated blocks), so :func:`~uopviz.nnef.lowering.operation_lowering.lower_operation`
lowers one and gives the others its kernels renamed (:func:`renamed_kernels`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from uopviz.nnef.lowering.evaluator import uniform_constant
from uopviz.nnef.lowering.kernel_builder import (
    LoweredKernel,
)
from uopviz.nnef.model.nodes import Operation

if TYPE_CHECKING:
    from uopviz.nnef.model.graph import ComposedGraph


__all__ = ["lowering_signature", "renamed_kernels"]


def lowering_signature(graph: ComposedGraph, op: Operation) -> tuple | None:
    """What the kernels of ``op`` depend on besides its tensors' names: its operator, attributes and
    types, and each tensor's type, shape, kind and (for a constant of one repeated value, which the
    kernels read as a literal) value.  Operations with equal signatures lower to the same kernel
    ASTs (a ResNet's repeated blocks), so one is lowered and the others renamed.  None where the
    names or the data matter: intrinsics, run-time extents."""
    if op.is_intrinsic or graph.counts or graph.extent_inputs:
        return None
    names = [*op.input_names(), *op.output_names()]
    tensors: list[Any] = [tuple(names.index(name) for name in names)]  # which tensors are one
    for name in names:
        tensor = graph.tensors.get(name)
        if tensor is None or not tensor.is_static:
            return None
        tensors.append((tensor.dtype, tuple(tensor.shape), tensor.kind, repr(uniform_constant(tensor))))
    structure = repr((_shape_of_names(op.inputs), _shape_of_names(op.outputs), sorted(op.constants)))
    types = repr(sorted(op.dtypes.items()))
    return (op.type, id(op.definition), _exact(op.attribs), types, structure, *tensors)


def _exact(value: Any) -> Any:
    """A hashable form of an attribute value that tells every two values apart (numpy's repr
    elides the middle of a long array)."""
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, dict):
        return tuple((key, _exact(item)) for key, item in value.items())
    if isinstance(value, list | tuple):
        return (type(value).__name__, *(_exact(item) for item in value))
    return repr(value)


def _shape_of_names(values: Any) -> Any:
    """A pack structure with its names left out (None stays None)."""
    if isinstance(values, list | tuple):
        return [_shape_of_names(value) for value in values]
    return None if values is None else ""


def renamed_kernels(
    template: Operation, kernels: list[LoweredKernel], op: Operation
) -> list[LoweredKernel] | None:
    """The kernels lowered for ``template`` as those of ``op`` (same signature): buffers and names
    renamed; None when a kernel uses a buffer that is not one of the operation's tensors."""
    names = dict(
        zip(
            [*template.input_names(), *template.output_names()],
            [*op.input_names(), *op.output_names()],
            strict=True,
        )
    )
    out = []
    for kernel in kernels:
        if kernel.scratch or any(name not in names for name in kernel.buffers):
            return None
        if kernel.name == template.label:
            name = op.label
        elif kernel.name.startswith(template.label + "."):
            name = op.label + kernel.name[len(template.label) :]
        else:
            return None
        buffers = [names[buffer] for buffer in kernel.buffers]
        out.append(LoweredKernel(name, kernel.ast, buffers, op, note=kernel.note))
    return out
