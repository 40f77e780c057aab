"""The composed NNEF graph (chapter 3 of the NNEF 2.0 draft): tensors and operations.

:class:`Graph` is what :func:`uopviz.nnef.load` returns. Its operations are the *leaf*
invocations of the composition: operators with a ``@lower`` formula and intrinsics (operators
without a body); composite operators (``@compose``) are expanded, and each leaf remembers the
chain of composites it came from (:attr:`Operation.scopes`), so a viewer can group them.

Tensors are named as written in the graph; tensors created inside an invocation are qualified by
the invocation's label (``conv1.filter``, ``output.max``). Packs of tensors are named
``name[0]``, ``name[1]``, ...; a graph input or output that is a pack (``xs: real[2]..(n|5)``) is
its items in ``inputs`` / ``outputs`` and the pack in :attr:`Graph.packs`, and ``g.run`` takes
and gives it as a list of arrays, composing the graph again for the number of items given (as for
an input's run-time extents).

Loops whose trip count is decided at run time (``while`` / ``do ... while`` and loops counted by
a tensor, §3 "Condition based looping") stay one :class:`LoopOperation` each: their condition
and body are graphs of their own (:attr:`LoopOperation.condition`, :attr:`LoopOperation.body`),
compiled to programs and run by ``g.run`` on the host, once per iteration. A value computed at run
time from extents the data decides, passed where a tensor is expected, is a
:class:`RuntimeScalarOperation` (``runtime.scalar``).

``g.compile(backend=...)`` lowers every operation to UOp kernels (:mod:`uopviz.nnef.lowering`)
and compiles them with the ordinary pipeline; ``g.run(inputs)`` executes them.

What composition made (tensors, operations, packs) and the questions about it live in
:class:`~uopviz.nnef.model.graph.ComposedGraph`, below the modules that lower, compile and run a
graph; :class:`Graph` is the ``ComposedGraph`` whose methods call them, so those modules never
import this one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from uopviz.core.progress import progress_reporter
from uopviz.nnef.errors import NNEFError
from uopviz.nnef.lowering.operation_lowering import lower_operation, operation_kernels
from uopviz.nnef.model.graph import ComposedGraph, LoopOperation
from uopviz.nnef.model.nodes import (
    CATEGORIES,
    Composite,
    Operation,
    RuntimeScalarOperation,
    TensorInfo,
    numpy_dtype_of,
)
from uopviz.nnef.program.compile import compile_graph
from uopviz.nnef.program.runtime import run_graph

__all__ = [
    "CATEGORIES", "Composite", "Graph", "LoopOperation", "Operation", "RuntimeScalarOperation", "TensorInfo",
    "numpy_dtype_of",
]  # fmt: skip


class Graph(ComposedGraph):
    """A composed graph that lowers, compiles and runs: what :func:`uopviz.nnef.load` returns.

    Its tensors, operations and packs are :class:`~uopviz.nnef.model.graph.ComposedGraph`'s; the
    kernels of an operation are lowered once and a program compiled once per backend and opts.
    """

    def lower(self, operation: Operation | int | None = None):
        """The kernels of one operation (or of the whole graph): :class:`LoweredKernel` objects."""
        ops = self.operations if operation is None else [self._operation(operation)]
        kernels = []
        for op in ops:
            key = id(op)
            if key not in self._lowered:
                self._lowered[key] = lower_operation(self, op)
            kernels.extend(self._lowered[key])
        return kernels

    def kernels(self, operation: Operation | int, backend: str = "python"):
        """The compiled pipeline kernels (``uopviz.Kernel``) of one operation."""
        return operation_kernels(self, self._operation(operation), backend)

    def compile(self, backend: str = "python", opts: Any = None, progress: Any = None, build: bool = True,
                *, trace: bool = False):
        """Lower every operation and compile the kernels with the pipeline: a Program (a
        :class:`~uopviz.nnef.program.compile.GraphProgram` of several when the graph has loop nodes).
        ``build=False`` renders the sources without compiling them (CUDA without a GPU).

        A big graph lowers its kernels on every core, untraced, and ``program.trace`` is made when
        first read (:mod:`uopviz.passes.parallel`); ``trace=True`` records it while compiling, in
        one process (what the explorer does: it shows the trace at once).

        ``progress``: None for a bar over the operations lowered, then the kernels compiling, when
        that takes more than a second (:mod:`uopviz.core.progress`); False for none; or a callable
        ``progress(done, total, operation)`` (``operation`` None once all are lowered)."""
        if self.pack_lengths_at_bounds:
            raise NNEFError(
                f"graph {self.name}: pack lengths follow the run-time input extents "
                f"{', '.join(self.pack_lengths_at_bounds)}, taken at their bounds in this composition; "
                "compile the graph composed for given shapes (g.recomposed({name: shape, ...})), which "
                "g.run(inputs) does by itself"
            )
        key = (backend, repr(opts), build)
        if key in self._programs:
            return self._programs[key]
        if callable(progress):
            self._programs[key] = compile_graph(self, backend, opts, progress, build=build, trace=trace)
            return self._programs[key]
        with progress_reporter(progress, len(self.operations), f"lowering {self.name}") as report:

            def lowered(done: int, total: int, operation: Any) -> None:
                if report is not None:
                    report(done, total, f"compiling {self.name}" if operation is None else None)

            self._programs[key] = compile_graph(self, backend, opts, lowered, build=build, trace=trace)
        return self._programs[key]

    def run(
        self,
        inputs: Mapping[str, Any] | None = None,
        backend: str = "python",
        opts: Any = None,
        update: bool = False,
    ) -> dict[str, np.ndarray]:
        """Execute the graph: ``inputs`` maps input (and, optionally, variable) names to arrays.

        Returns the graph outputs by name as numpy arrays (at their actual extents when those are
        decided by the data). Loop nodes run on the host: their condition and body programs once
        per iteration. With ``update`` the variables that ``@update`` blocks assign get their new
        values (a training step of batch_norm layers). A pack input is given as a list of arrays
        (its length within the declared bound), and a pack output comes back as one.
        """
        given = dict(inputs or {})
        if not self.packs:
            return run_graph(self, given, backend=backend, opts=opts, update=update)
        graph = self._for_packs(given)
        for name in graph.input_packs():
            if name in given:
                given.update(zip(graph.packs[name], given.pop(name), strict=True))
        outputs = run_graph(graph, given, backend=backend, opts=opts, update=update)
        for name in graph.output_packs():
            outputs[name] = [outputs.pop(item) for item in graph.packs[name]]
        return outputs

