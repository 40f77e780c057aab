"""The composed NNEF graph (chapter 3 of the NNEF 2.0 draft): tensors and operations.

:class:`ComposedGraph` holds what composition made: named tensors, the leaf operations in execution
order and the composites they came from, the packs and the counters of run-time extents; it
answers questions about them (producers, consumers, a networkx view). :class:`LoopOperation` is a
loop decided at run time, whose body and condition are graphs of their own.

The modules that lower (:mod:`uopviz.nnef.lowering`), rewrite (:mod:`uopviz.nnef.kernel_passes`),
compile and run (:mod:`uopviz.nnef.program`) a graph take a ``ComposedGraph``;
:class:`uopviz.nnef.graph.Graph`, above them, is the ``ComposedGraph`` whose methods call them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from uopviz.nnef.errors import NNEFError
from uopviz.nnef.model.nodes import Composite, Operation, TensorInfo
from uopviz.nnef.syntax import ast

__all__ = ["ComposedGraph", "LoopOperation"]


@dataclass(eq=False)
class ComposedGraph(ABC):
    """A composed graph: named tensors and leaf operations in execution order.

    What lowers, compiles and runs it is above this layer: :class:`uopviz.nnef.graph.Graph`, the
    graph :func:`uopviz.nnef.load` gives, provides :meth:`lower`, :meth:`kernels`, :meth:`compile`
    and :meth:`run`; the modules that do that work take a ``ComposedGraph`` and call them.
    """

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

    # -- lowering, compiling, running (uopviz.nnef.graph.Graph) ----------------------------------------

    @abstractmethod
    def lower(self, operation: Operation | int | None = None) -> list:
        """The kernels of one operation (or of the whole graph): ``LoweredKernel`` objects, each
        operation lowered once."""

    @abstractmethod
    def kernels(self, operation: Operation | int, backend: str = "python") -> list:
        """The compiled pipeline kernels (``uopviz.Kernel``) of one operation."""

    @abstractmethod
    def compile(
        self, backend: str = "python", opts: Any = None, progress: Any = None, build: bool = True
    ) -> Any:
        """Lower every operation and compile the kernels with the pipeline: a Program (a
        ``GraphProgram`` of several when the graph has loop nodes), once per backend and opts."""

    @abstractmethod
    def run(
        self,
        inputs: Mapping[str, Any] | None = None,
        backend: str = "python",
        opts: Any = None,
        update: bool = False,
    ) -> dict[str, np.ndarray]:
        """Execute the graph: ``inputs`` maps input (and, optionally, variable) names to arrays; the
        outputs by name."""

    def input_packs(self) -> list[str]:
        """The names of the graph inputs that are packs."""
        inputs = set(self.inputs)
        return [name for name, items in self.packs.items() if items and items[0] in inputs]

    def output_packs(self) -> list[str]:
        """The names of the graph outputs that are packs."""
        outputs = set(self.outputs)
        return [name for name, items in self.packs.items() if not items or items[0] in outputs]

    def _for_packs(self, given: Mapping[str, Any]) -> ComposedGraph:
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

    def recomposed(self, shapes: Mapping[str, Any]) -> ComposedGraph:
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


@dataclass(eq=False)
class LoopOperation(Operation):
    """A loop whose trip count is decided at run time, kept as one node of the graph.

    ``type`` is ``control.while`` (tested before each iteration), ``control.do_while`` (tested after
    each iteration: the body runs at least once) or ``control.repeat`` (no condition: a count held
    in a tensor). ``body`` and ``condition`` are graphs of their own; both take the same inputs, in
    this order: the carried values, the items of the scanned packs, the iteration index (when the
    loop names one). Tensors of the enclosing graph that they read are listed in ``captures`` (they
    keep their names). The body returns the updated carried values, then the scan outputs; the
    condition returns one bool.

    ``inputs`` are (initial carried values, scanned packs, the count tensor or None, captures);
    ``outputs`` the final carried values, then one pack of ``scan_length`` tensors per scan output
    (items past the last iteration are zero). ``count`` is a static iteration bound, the name of an
    ``int`` tensor holding it, or None; scanned packs bound the iterations by their length too.
    ``scan_limit`` is set when nothing else bounds the scan outputs: the length the left side
    declares for them (``ys..(8)``), an upper bound that the run checks (one iteration more is an
    error).

    Carried values, scan items and captures may have extents decided at run time. The body and
    condition read them from counters of their own (:attr:`ComposedGraph.extent_inputs`), which the
    runner fills on every iteration. A carried extent the body changes (it may compress what it
    carries) and the extents of scan outputs that only the body knows are extents of the results
    that the run counts: ``counted`` maps their keys to counter buffers, ``extent_outputs`` each
    counter to ``("carry", index, axis)`` or ``("scan", output, item, axis)``.
    """

    body: ComposedGraph | None = field(default=None, repr=False)
    condition: ComposedGraph | None = field(default=None, repr=False)
    pretest: bool = True
    count: int | str | None = None
    carried: tuple[str, ...] = ()
    scans: tuple[tuple[str, ...], ...] = ()
    captures: tuple[str, ...] = ()
    scan_length: int | None = None
    scan_limit: int | None = None
    counted: dict = field(default_factory=dict)
    extent_outputs: dict = field(default_factory=dict)
    statement: ast.Component | None = field(default=None, repr=False)

    @property
    def is_intrinsic(self) -> bool:
        """A loop is no intrinsic: its kernels are those of its body and condition."""
        return False

    @property
    def subgraphs(self) -> dict[str, ComposedGraph]:
        """The body and (when there is one) the condition, by role."""
        out = {"body": self.body}
        if self.condition is not None:
            out["condition"] = self.condition
        return out

    def definition_text(self) -> str:
        """The loop statement as written (canonical form)."""
        from uopviz.nnef.syntax.printer import print_component

        return print_component(self.statement) if self.statement is not None else self.type
