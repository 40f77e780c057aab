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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from uopviz.nnef.errors import NNEFError
from uopviz.nnef.model.nodes import (
    CATEGORIES,
    Composite,
    LoopOperation,
    Operation,
    RuntimeScalarOperation,
    TensorInfo,
    numpy_dtype_of,
)
from uopviz.nnef.syntax import ast

__all__ = [
    "CATEGORIES", "Composite", "Graph", "LoopOperation", "Operation", "RuntimeScalarOperation", "TensorInfo",
    "numpy_dtype_of",
]  # fmt: skip


@dataclass(eq=False)
class Graph:
    """A composed graph: named tensors and leaf operations in execution order."""

    name: str
    inputs: list[str]
    outputs: list[str]
    tensors: dict[str, TensorInfo]
    operations: list[Operation]
    attribs: dict[str, Any] = field(default_factory=dict)
    composites: list[Composite] = field(default_factory=list)
    updates: dict[str, str] = field(default_factory=dict)
    definition: ast.Definition | None = field(default=None, repr=False)
    modules: dict[str, ast.Module] = field(default_factory=dict, repr=False)
    source: Any = field(default=None, repr=False)
    recompose: Any = field(default=None, repr=False)  # input shapes -> Graph (for run-time extents)
    counts: dict = field(default_factory=dict, repr=False)  # run-time extent key -> its counter buffer
    captures: list[str] = field(
        default_factory=list
    )  # a loop's body / condition: tensors it reads from outside
    # a loop's body / condition: counter buffer -> what the runner fills it with on each iteration (the
    # enclosing graph's run-time extent, or ("carry", index, axis): a carried value's current extent)
    extent_inputs: dict = field(default_factory=dict, repr=False)
    # graph input and output packs: name -> the item tensors (``xs[0]``, ``xs[1]``, ..) that
    # ``inputs`` / ``outputs`` list; ``run`` takes and gives such a pack as a list of arrays
    packs: dict[str, list[str]] = field(default_factory=dict)
    # run-time input extents that pack lengths follow, taken at their bounds in this composition
    # (``run`` composes again for the shapes given; this graph itself does not compile)
    pack_lengths_at_bounds: list[str] = field(default_factory=list)
    # copies of variables and constants in the layouts kernels read them in (buffer name ->
    # uopviz.nnef.kernel_passes.weight_layout.WeightLayout), recorded when the kernels compile
    layouts: dict = field(default_factory=dict, repr=False)
    # the rewrites to the canonical form made after composition (uopviz.nnef.model.canonical.CanonicalStep)
    canonical: list = field(default_factory=list, repr=False)
    _programs: dict = field(default_factory=dict, repr=False)
    _lowered: dict = field(default_factory=dict, repr=False)

    # -- inspection --------------------------------------------------------------------------------

    @property
    def variables(self) -> list[str]:
        """The names of the variable tensors (model weights)."""
        return [name for name, info in self.tensors.items() if info.kind == "variable"]

    @property
    def constants(self) -> list[str]:
        """The names of the constant tensors."""
        return [name for name, info in self.tensors.items() if info.kind == "constant"]

    def producer(self, tensor: str) -> Operation | None:
        """The operation that writes ``tensor`` (None for inputs, variables and constants)."""
        return self.tensors[tensor].producer

    def consumers(self, tensor: str) -> list[Operation]:
        """The operations that read ``tensor``."""
        return [op for op in self.operations if tensor in op.input_names()]

    def to_networkx(self):
        """The operator graph as a ``networkx.MultiDiGraph``.

        Nodes: one per operation (key ``op:<index>``, attributes ``kind='operation'``, ``type``,
        ``label``, ``module``, ``category``, ``attribs``, ``scopes``; a loop node also has
        ``subgraphs``, its body and condition graphs) and one per graph input, variable and
        constant (``kind`` = the tensor kind). Edges go from a producer to each consumer with
        ``tensor``, ``shape`` and ``dtype``; graph outputs get a node (``kind='output'``) too.
        """
        import networkx as nx

        graph = nx.MultiDiGraph(name=self.name)
        source_of: dict[str, str] = {}
        for name, info in self.tensors.items():
            if info.kind in ("input", "variable", "constant") and info.producer is None:
                node = f"tensor:{name}"
                graph.add_node(
                    node, kind=info.kind, label=name, tensor=name, shape=info.shape, dtype=info.dtype
                )
                source_of[name] = node
        for index, op in enumerate(self.operations):
            node = f"op:{index}"
            graph.add_node(
                node,
                kind="operation",
                type=op.type,
                label=op.label,
                module=op.module,
                category=op.category,
                attribs=op.attribs,
                scopes=op.scopes,
                index=index,
                **({"subgraphs": op.subgraphs} if isinstance(op, LoopOperation) else {}),
            )
            for name in op.output_names():
                source_of[name] = node
        for index, op in enumerate(self.operations):
            for name in op.input_names():
                if name in source_of:
                    info = self.tensors[name]
                    graph.add_edge(
                        source_of[name], f"op:{index}", tensor=name, shape=info.shape, dtype=info.dtype
                    )
        for name in self.outputs:
            node = f"output:{name}"
            graph.add_node(node, kind="output", label=name, tensor=name)
            if name in source_of:
                info = self.tensors[name]
                graph.add_edge(source_of[name], node, tensor=name, shape=info.shape, dtype=info.dtype)
        return graph

    def summary(self) -> str:
        """A text table of the operations with their output shapes."""
        lines = [f"graph {self.name}: {len(self.operations)} operations, {len(self.tensors)} tensors"]
        for op in self.operations:
            outs = ", ".join(
                f"{name}: {self.tensors[name].dtype}{list(self.tensors[name].shape)}"
                for name in op.output_names()
            )
            lines.append(f"  {op.label:<28} {op.type:<24} -> {outs}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (
            f"Graph({self.name!r}, inputs={self.inputs}, outputs={self.outputs}, "
            f"{len(self.operations)} operations, {len(self.tensors)} tensors)"
        )

    # -- lowering, compiling, running ---------------------------------------------------------------

    def lower(self, operation: Operation | int | None = None):
        """The kernels of one operation (or of the whole graph): :class:`LoweredKernel` objects."""
        from uopviz.nnef.lowering.operation_lowering import lower_operation

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
        from uopviz.nnef.lowering.operation_lowering import operation_kernels

        return operation_kernels(self, self._operation(operation), backend)

    def compile(self, backend: str = "python", opts: Any = None, progress: Any = None, build: bool = True):
        """Lower every operation and compile the kernels with the pipeline: a Program (a
        :class:`~uopviz.nnef.program.compile.GraphProgram` of several when the graph has loop nodes).
        ``build=False`` renders the sources without compiling them (CUDA without a GPU).

        ``progress``: None for a bar over the operations lowered, then the kernels compiling, when
        that takes more than a second (:mod:`uopviz.core.progress`); False for none; or a callable
        ``progress(done, total, operation)`` (``operation`` None once all are lowered)."""
        from uopviz.core.progress import progress_reporter
        from uopviz.nnef.program.compile import compile_graph

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
            self._programs[key] = compile_graph(self, backend, opts, progress, build=build)
            return self._programs[key]
        with progress_reporter(progress, len(self.operations), f"lowering {self.name}") as report:

            def lowered(done: int, total: int, operation: Any) -> None:
                if report is not None:
                    report(done, total, f"compiling {self.name}" if operation is None else None)

            self._programs[key] = compile_graph(self, backend, opts, lowered, build=build)
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
        from uopviz.nnef.program.runtime import run_graph

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

    def input_packs(self) -> list[str]:
        """The names of the graph inputs that are packs."""
        inputs = set(self.inputs)
        return [name for name, items in self.packs.items() if items and items[0] in inputs]

    def output_packs(self) -> list[str]:
        """The names of the graph outputs that are packs."""
        outputs = set(self.outputs)
        return [name for name, items in self.packs.items() if not items or items[0] in outputs]

    def _for_packs(self, given: Mapping[str, Any]) -> Graph:
        """This graph, or the one recomposed for the number of items (and their shapes) of the
        packs in ``given`` and the shapes of its inputs with run-time extents: like an input
        extent, a pack length is fixed before kernels run (the graph's packs are its, not this
        one's, when they follow an input extent)."""
        shapes: dict[str, Any] = {}
        for name in self.input_packs():
            if name not in given:
                continue
            items = self.packs[name]
            arrays = list(given[name])
            if len(arrays) != len(items) or not all(self.tensors[item].is_static for item in items):
                shapes[name] = tuple(tuple(np.shape(array)) for array in arrays)
        packed = {item for name in self.input_packs() for item in self.packs[name]}
        for name in self.inputs:
            if name in given and name not in packed and not self.tensors[name].is_static:
                shapes[name] = tuple(np.shape(given[name]))
        return self.recomposed(shapes) if shapes else self

    def recomposed(self, shapes: Mapping[str, Any]) -> Graph:
        """This graph composed again for the given input shapes (a pack input: one shape per item),
        once per distinct set: run-time input extents and pack lengths become plain numbers."""
        if self.recompose is None:
            raise NNEFError(
                "this graph has run-time input extents or pack lengths; it must come from "
                "uopviz.nnef.load/loads to be recomposed for the given inputs"
            )
        key = repr(sorted(shapes.items()))
        cache = self.__dict__.setdefault("_shaped", {})
        if key not in cache:
            cache[key] = self.recompose(shapes)
        return cache[key]

    def _operation(self, operation: Operation | int) -> Operation:
        return self.operations[operation] if isinstance(operation, int) else operation
