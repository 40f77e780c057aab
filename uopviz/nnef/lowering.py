"""Lowering of composed NNEF operations to UOp kernels, compiling and running them: the entry points.

The work is split by what each part is about; this module gathers their public names:

- :mod:`uopviz.nnef.kernel_math`: scalar math on UOps (element types, promotion, the functions the
  UOp dialect has no op for, accumulations, flat offsets, tidying);
- :mod:`uopviz.nnef.kernel_builder`: :class:`LoweredKernel`, the PARAM slots of a kernel, and the
  run-time extents and values computed from the counters (:func:`runtime_extent`,
  :func:`runtime_value`);
- :mod:`uopviz.nnef.operation_lowering`: the lowering of ``@lower`` contractions to kernel ASTs
  (:func:`lower_operation`, :func:`operation_kernels`, :func:`kernel_count`), with
  :mod:`uopviz.nnef.lowering_evaluator` reading tensors inside a statement and
  :mod:`uopviz.nnef.output_space` solving its left side for the output positions;
- :mod:`uopviz.nnef.intrinsics`: the hand-written kernels of operations with no body;
- :mod:`uopviz.nnef.compile`: :func:`compile_graph` and :class:`GraphProgram`, with
  :mod:`uopviz.nnef.fusion`, :mod:`uopviz.nnef.padding` and :mod:`uopviz.nnef.weight_layout`
  (filters read from copies blocked by the CPU target's vector lanes) rewriting the kernels first;
- :mod:`uopviz.nnef.runtime`: :func:`run_graph`, which binds the data and runs the programs (loop
  nodes on the host), and :func:`program_inputs`, a program's input arrays by tensor name.
"""

from __future__ import annotations

from uopviz.nnef.compile import GraphProgram, compile_graph
from uopviz.nnef.kernel_builder import LoweredKernel, runtime_extent, runtime_value
from uopviz.nnef.kernel_math import uop_dtype
from uopviz.nnef.operation_lowering import kernel_count, lower_operation, operation_kernels
from uopviz.nnef.runtime import program_inputs, run_graph

__all__ = [
    "GraphProgram",
    "LoweredKernel",
    "compile_graph",
    "kernel_count",
    "lower_operation",
    "operation_kernels",
    "program_inputs",
    "run_graph",
    "runtime_extent",
    "runtime_value",
    "uop_dtype",
]
