"""Compiling an NNEF graph: its lowered kernels through the pipeline, split at loop nodes.

:func:`compile_graph` compiles the kernels with the pipeline's public
:func:`~uopviz.engine.program.compile_kernels` (graph inputs, variables and constants are the
program's inputs): one Program for a graph without loops, else one per run of kernels between loop
nodes, gathered in a :class:`GraphProgram`; :func:`~uopviz.nnef.program.runtime.run_graph` binds the data
and runs them in order. Opts chosen per kernel number the kernels as ``program.kernels`` lists them,
loop bodies and conditions included where their loop runs
(:func:`~uopviz.nnef.lowering.operation_lowering.kernel_count`); opts by kernel name reach every kernel with
that name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from uopviz.core.collector import collector_paused
from uopviz.core.dtype import DType, dtypes
from uopviz.core.ops import Ops
from uopviz.core.rewrite import PatternMatcher, UPat, rewrite_root, short_path, traced_pass
from uopviz.core.uop import UOp
from uopviz.nnef.errors import NNEFError
from uopviz.nnef.kernel_passes.offset_views import split_view_name
from uopviz.nnef.kernel_passes.pipeline import KernelPassContext, kernel_sink, run_kernel_passes
from uopviz.nnef.lowering.kernel_builder import LoweredKernel, record_kernel_origins
from uopviz.nnef.lowering.kernel_math import uop_dtype
from uopviz.nnef.lowering.operation_lowering import kernel_count
from uopviz.nnef.model.graph import LoopOperation
from uopviz.nnef.model.nodes import Operation
from uopviz.passes.parallel import process_count

if TYPE_CHECKING:
    from uopviz.nnef.model.graph import ComposedGraph

# ------------------------------------------------------------------------------------------------
# the whole graph: programs for the pipeline, run step by step


def _lower_all(
    graph: ComposedGraph, progress: Callable[[int, int, Operation], None] | None
) -> list[LoweredKernel]:
    kernels: list[LoweredKernel] = []
    total = len(graph.operations)
    for index, op in enumerate(graph.operations):
        if progress is not None:
            progress(index, total, op)
        kernels.extend(graph.lower(op))
    if progress is not None:
        progress(total, total, None)
    return kernels


def _buffer_spec(graph: ComposedGraph, kernels: list[LoweredKernel], name: str) -> tuple[DType, int]:
    if name in graph.extent_inputs or name in graph.counts.values():
        return dtypes.int32, 1  # the counter of a run-time extent
    tensor = graph.tensors.get(name)
    if tensor is None and name in graph.layouts:  # a copy of a tensor in another layout
        tensor = graph.tensors[graph.layouts[name].source]
    if tensor is not None:
        return uop_dtype(tensor.dtype), max(math.prod(tensor.upper_shape), 1)
    for kernel in kernels:
        if name in kernel.scratch:
            return kernel.scratch[name]
    raise NNEFError(f"kernel buffer '{name}' is neither a tensor of the graph nor a scratch buffer")


def _steps(graph: ComposedGraph) -> list[list[Operation] | LoopOperation]:
    """The operations in run order: runs of kernel operations, with the loop nodes between them."""
    steps: list[list[Operation] | LoopOperation] = []
    for op in graph.operations:
        if isinstance(op, LoopOperation):
            steps.append(op)
        elif steps and isinstance(steps[-1], list):
            steps[-1].append(op)
        else:
            steps.append([op])
    return steps


def _step_reads(graph: ComposedGraph, step: list[Operation] | LoopOperation) -> set[str]:
    if isinstance(step, LoopOperation):
        return set(step.input_names())
    return {name for op in step for kernel in graph.lower(op) for name in kernel.buffers}


def _per_kernel_list(opts: Any) -> bool:
    """Whether ``opts`` is a sequence with one entry per kernel (not one list of Opt for all)."""
    from uopviz.passes.optops.opts import Opt

    return isinstance(opts, list | tuple) and bool(opts) and not all(isinstance(item, Opt) for item in opts)


def _segment_opts(opts: Any, offset: int, count: int) -> Any:
    """The opts of kernels ``offset .. offset + count`` of the graph (per-kernel choices re-indexed;
    choices by kernel name, one choice for every kernel and tuning records pass as they are)."""
    if isinstance(opts, dict):
        return {
            (key - offset if isinstance(key, int) else key): value
            for key, value in opts.items()
            if not isinstance(key, int) or offset <= key < offset + count
        }
    if _per_kernel_list(opts):
        return list(opts[offset : offset + count])
    return opts


def _loop_opts(opts: Any, offset: int, loop: LoopOperation) -> tuple[dict[str, Any], int]:
    """The opts a loop's body and condition compile with: per-kernel choices numbered as in
    ``program.kernels`` (the body's kernels after those before the loop, then the condition's), and
    the offset after them."""
    chosen: dict[str, Any] = {}
    for role, sub in loop.subgraphs.items():
        count = kernel_count(sub)
        chosen[role] = _segment_opts(opts, offset, count)
        offset += count
    return chosen, offset


def _compile_segment(
    graph: ComposedGraph,
    lowered: list[LoweredKernel],
    every_kernel: list[LoweredKernel],
    context: KernelPassContext,
    opts: Any,
    first_inputs: Sequence[str] = (),
    build: bool = True,
    kernel_passes: bool = True,
    traced: bool = True,
):
    """One run of lowered kernels, rewritten by the kernel passes (``kernel_passes``), as a
    pipeline Program (``compile_kernels``): its inputs are what it reads and does not write, its
    outputs what it writes and ``context.kept`` names; ``build=False`` renders the sources without
    compiling them (a CUDA program on a machine without a GPU).

    The Program's trace is the run's whole lowering: the front end (Canonicalize, Callify,
    Rangeify, on the kernels as the operations lowered), the kernel passes, then the pipeline's
    stages from Optimize; with ``traced=False`` none is recorded (the caller makes it later)."""
    from uopviz.core.rewrite import tracing
    from uopviz.engine.program import compile_kernels

    storage: dict[str, UOp] = {}
    made: list[LoweredKernel] = []  # kernels the passes made (their scratch buffers)

    def buffer(name: str) -> UOp:
        found = storage.get(name)
        if found is None:
            base, offset = split_view_name(name)
            if offset is not None:  # a view from element ``offset`` on (kernel_passes.offset_views)
                whole = buffer(base)
                found = storage[name] = whole.shrink((offset,), (whole.shape[0] - offset,))
                return found
            dtype, size = _buffer_spec(graph, [*every_kernel, *made], name)
            found = storage[name] = UOp.buffer(size, dtype, "CPU")
        return found

    with tracing() if traced else nullcontext() as trace:
        _record_front_end(graph, lowered, RunFunction(lowered, buffer, context.kept, first_inputs))
        kernels = run_kernel_passes(lowered, context) if kernel_passes else lowered
        made.extend(kernels)
        input_names, output_names = _program_buffers(kernels, context.kept, first_inputs)
        # what fusion, padding and loop merging built is the operation's whose kernel it became
        record_kernel_origins(kernels, gaps_only=True)
        program = compile_kernels(
            [(kernel.name, kernel.ast, [buffer(name) for name in kernel.buffers]) for kernel in kernels],
            [buffer(name) for name in input_names],
            [buffer(name) for name in output_names],
            backend=context.backend,
            opts=opts,
            build=build,
            share_extents=True,
            traced=traced,
        )
    if traced:
        program.trace = trace
    program.nnef_inputs = input_names
    program.nnef_outputs = output_names
    program.nnef_kernels = kernels
    return program


def _program_buffers(
    kernels: list[LoweredKernel], kept: frozenset[str], first_inputs: Sequence[str]
) -> tuple[list[str], list[str]]:
    """The input and output buffer names of a run of kernels: what it reads and does not write
    (``first_inputs`` first), and what it writes that ``kept`` names."""
    # a kernel writing a view of a buffer (kernel_passes.offset_views) writes that buffer
    buffers = [[split_view_name(name)[0] for name in kernel.buffers] for kernel in kernels]
    written = {names[0] for names in buffers}
    read = (name for names in buffers for name in names if name not in written)
    input_names = list(dict.fromkeys([*first_inputs, *read]))
    output_names = [name for name in dict.fromkeys(names[0] for names in buffers) if name in kept]
    return input_names, output_names


def _program_function(
    kernels: list[LoweredKernel],
    buffer: Callable[[str], UOp],
    kept: frozenset[str],
    first_inputs: Sequence[str],
) -> UOp:
    """The run of kernels as the FUNCTION the pipeline's Callify would make of it: each kernel a
    CALL on the values of its buffers so far, the kept buffers it writes as the result (the graph
    the front end's steps show, before the kernel passes rewrite the kernels)."""
    input_names, output_names = _program_buffers(kernels, kept, first_inputs)
    inputs = [buffer(name) for name in input_names]
    current: dict[UOp, UOp] = {
        value: UOp.param(slot, value.shape, value.arg.dtype, value.arg.device)
        for slot, value in enumerate(inputs)
    }
    for kernel in kernels:
        arguments = [buffer(name) for name in kernel.buffers]
        values = [current.get(value, value) for value in arguments]
        current[arguments[0]] = UOp(Ops.AFTER, (arguments[0], UOp(Ops.CALL, (kernel.ast, *values))))
    outputs = tuple(current[buffer(name)] for name in output_names)
    return UOp(Ops.FUNCTION, (UOp(Ops.TUPLE, outputs), *inputs))


@dataclass(frozen=True)
class RunFunction:
    """What makes a run of kernels one FUNCTION (:func:`_program_function`): the kernels, their
    buffers by name, the tensors kept after the run and the inputs it reads first."""

    kernels: list[LoweredKernel]
    buffer: Callable[[str], UOp]
    kept: frozenset[str]
    first_inputs: Sequence[str]

    def function(self) -> UOp:
        """The run as one FUNCTION."""
        return _program_function(self.kernels, self.buffer, self.kept, self.first_inputs)


def kernels_to_function(ctx: RunFunction, kernels: UOp) -> UOp:
    """The run's kernels (the SINK of their ASTs the rule matched) become one FUNCTION: each kernel a
    CALL on its buffers, the kept buffers the result (an NNEF program's Callify).  The buffers'
    names, which the ASTs do not hold, are the context's :class:`LoweredKernel` records'."""
    return ctx.function()


#: an NNEF program's Callify: one rule, tried at the root alone (the SINK of the run's kernels)
run_function_rules = PatternMatcher([
    (UPat(Ops.SINK, name="kernels"), kernels_to_function, "kernels become one FUNCTION"),
], name="Callify")


def _record_front_end(graph: ComposedGraph, kernels: list[LoweredKernel], run: RunFunction) -> None:
    """Record the NNEF front end in the open trace: the rewrites made at load (Canonicalize, each at
    its rule's line), the run's kernels made one FUNCTION (:data:`run_function_rules`, Callify) and
    the ``@lower`` formulas (they stand for Rangeify, each at its line of the NNEF source), one step
    per kernel as its operation lowered."""
    if graph.canonical:  # the rewrites made at load (uopviz.nnef.model.canonical), one step each
        with traced_pass("Canonicalize", None) as record:
            canonical = run.function()  # the same UOp Callify makes next (hash-consed)
            for step in graph.canonical:
                record.step(f"{step.rule}: {step.description}", UOp(Ops.SINK, ()), canonical, canonical,
                            location=step.location)
            record.output = canonical
    function = rewrite_root(kernel_sink(kernels), run_function_rules, ctx=run, name="Callify")
    with traced_pass("Rangeify", function) as record:
        for kernel in kernels:
            op = kernel.operation
            record.step(
                f"@lower {op.type} '{op.label}' -> kernel {kernel.name}",
                UOp(Ops.SINK, ()),
                kernel.ast,
                function,
                location=f"{short_path(op.definition.pos.file)}:{op.definition.pos.line}",
            )
        record.output = function


class GraphProgram:
    """What ``g.compile()`` gives for a graph with loop nodes (or with no kernels at all).

    Its ``steps`` run in order: ``("kernels", Program)`` for each run of kernel operations (a
    pipeline Program of their own), ``("loop", LoopOperation)`` for a loop node, which the runner
    executes on the host with the programs of its body and condition. It reads like a Program for
    viewers: ``kernels``, ``items`` and ``sources`` of every program (loop bodies included, in
    order) and the ``trace`` of their lowering. ``run(inputs)`` runs the graph: inputs and outputs
    by name, as ``g.run``.
    """

    def __init__(
        self,
        graph: ComposedGraph,
        backend: str,
        opts: Any,
        steps: list[tuple[str, Any]],
        trace: Any,
        loop_opts: dict[int, dict[str, Any]] | None = None,
    ) -> None:
        self.graph = graph
        self.backend = backend
        self.opts = opts
        self.nnef_steps = steps
        self.nnef_loop_opts = loop_opts or {}  # id(loop) -> role -> the opts its sub-graph compiles with
        self.trace = trace

    def __repr__(self) -> str:
        loops = sum(1 for kind, _ in self.nnef_steps if kind == "loop")
        return (
            f"<GraphProgram {self.graph.name}: {len(self.items)} kernels, {loops} loop(s) on {self.backend}>"
        )

    def _programs(self) -> list[Any]:
        out = []
        for kind, step in self.nnef_steps:
            if kind == "kernels":
                out.append(step)
            else:
                chosen = self.nnef_loop_opts[id(step)]
                for role, sub in step.subgraphs.items():
                    compiled = sub.compile(self.backend, chosen[role])
                    out.extend(compiled._programs() if isinstance(compiled, GraphProgram) else [compiled])
        return out

    @property
    def items(self) -> list:
        """Every kernel launch of every program, in program order."""
        return [item for program in self._programs() for item in program.items]

    @property
    def kernels(self) -> list:
        """Every kernel (loop bodies and conditions included)."""
        return [kernel for program in self._programs() for kernel in program.kernels]

    @property
    def sources(self) -> list[str]:
        """The rendered source of every kernel."""
        return [source for program in self._programs() for source in program.sources]

    def run(self, inputs: Mapping[str, Any] | None = None) -> dict[str, np.ndarray]:
        """Run the graph on ``inputs`` (names -> arrays): the outputs by name."""
        # through the graph, so that this module does not import the runner (which imports it)
        return self.graph.run(dict(inputs or {}), self.backend, self.opts)


@collector_paused()  # lowering and kernel passes make many long-lived UOps (core.collector)
def compile_graph(
    graph: ComposedGraph,
    backend: str = "python",
    opts: Any = None,
    progress: Callable[[int, int, Operation | None], None] | None = None,
    fuse: bool | None = None,
    build: bool = True,
    cache: bool = True,
    trace: bool = False,
):
    """Lower every operation of ``graph`` and compile its kernels with the pipeline (``build=False``:
    render the sources only, as ``uv.compile`` does).

    A graph without loop nodes becomes one pipeline ``Program``: its inputs are the graph's inputs,
    variables and constants (in that order of first use), its outputs the graph's outputs, the
    counters of data-dependent extents and the tensors ``@update`` assigns;
    ``program.nnef_inputs`` / ``program.nnef_outputs`` name them. A graph with loop nodes becomes a
    :class:`GraphProgram`: one Program per run of kernel operations between them, each loop's body
    and condition compiled as graphs of their own. ``progress(done, total, op)`` is called while
    lowering.

    ``opts`` as for the pipeline's ``compile``; choices per kernel (a dict by index, one entry per
    kernel) number the kernels as ``program.kernels`` lists them: in run order, each loop's body and
    then condition kernels (nested loops included) where the loop runs. Choices by kernel name reach
    the kernels of loop bodies as well.

    ``fuse``: compute each tensor that only feeds later kernels where it is read, when that is cheap
    (:mod:`uopviz.nnef.kernel_passes.fusion`: batch-norm chains and activations into the
    convolution before them), with guarded reads from padded copies
    (:mod:`uopviz.nnef.kernel_passes.padding`) and, on CPU backends, filters read from copies
    blocked by the vector lanes (:mod:`uopviz.nnef.kernel_passes.weight_layout`).
    By default on, except with choices per kernel (a list or a dict by index), which number the
    kernels before fusion.

    ``cache``: keep the program in, and take it from, the whole-program disk cache
    (:mod:`uopviz.nnef.program.program_cache`; graphs without loop nodes): a hit skips the lowering,
    and its trace is made when first read.

    ``trace``: record the program's trace while lowering, in one process.  Without it a big graph
    of one run of kernels lowers them on every core, untraced (:mod:`uopviz.passes.parallel`), and
    its trace is made when first read, by lowering the graph again under tracing.
    """
    from uopviz.nnef.program import program_cache

    if fuse is None:
        fuse = not (_per_kernel_list(opts) or isinstance(opts, dict))
    key = program_cache.program_key(graph, backend, (opts, fuse), build) if cache else None
    if key is not None:

        def relower() -> Any:
            return compile_graph(graph, backend, opts, fuse=fuse, build=build, cache=False, trace=True)

        found = program_cache.load_program(graph, key, relower)
        if found is not None:
            if progress is not None:
                progress(len(graph.operations), len(graph.operations), None)
            return found
    program = _compile_graph(graph, backend, opts, progress, fuse, build, trace)
    if key is not None:
        program_cache.store_program(program, graph, key)
    return program


def _lowers_on_every_core(steps: list, kernels: int, backend: str, opts: Any) -> bool:
    """Whether a graph of these steps and ``kernels`` lowered kernels lowers them on several cores
    (:func:`uopviz.passes.parallel.process_count`, which also says no inside an open trace): one run
    of kernels, no loop nodes."""
    one_run = len(steps) == 1 and not isinstance(steps[0], LoopOperation)
    return one_run and process_count(backend, opts, kernels) > 1


def _compile_graph(
    graph: ComposedGraph,
    backend: str,
    opts: Any,
    progress: Callable[[int, int, Operation | None], None] | None,
    fuse: bool,
    build: bool,
    eager_trace: bool = False,
):
    """:func:`compile_graph` without the whole-program cache.  A graph of kernels only, big enough
    and lowered inside nobody's trace, lowers untraced so that its kernels lower on every core
    (:mod:`uopviz.passes.parallel`); its program's trace is made when first read, by lowering the
    graph again under tracing (rendering only).  ``eager_trace``: record the trace while lowering."""
    from uopviz.core.rewrite import traced_pass, tracing

    kernels = _lower_all(graph, progress)
    if _per_kernel_list(opts) and len(opts) < kernel_count(graph):
        raise NNEFError(
            f"opts has entries for {len(opts)} kernels; graph {graph.name} compiles to {kernel_count(graph)} "
            f"(loop bodies and conditions included, in the order of program.kernels)"
        )
    steps = _steps(graph)
    final = {*graph.outputs, *graph.counts.values(), *graph.updates.values()}
    read_after: list[set[str]] = [set() for _ in steps]
    later: set[str] = set()
    for position in range(len(steps) - 1, -1, -1):
        read_after[position] = set(later)
        later |= _step_reads(graph, steps[position])
    compiled: list[tuple[str, Any]] = []
    loop_opts: dict[int, dict[str, Any]] = {}
    offset = 0
    traced = eager_trace or not _lowers_on_every_core(steps, len(kernels), backend, opts)
    with tracing() if traced else nullcontext() as trace:
        for position, step in enumerate(steps):
            if isinstance(step, LoopOperation):
                loop_opts[id(step)], offset = _loop_opts(opts, offset, step)
                with traced_pass(f"loop {step.label}", None) as record:
                    for role, sub in step.subgraphs.items():
                        sub.compile(backend, loop_opts[id(step)][role], build=build)
                    record.output = None
                compiled.append(("loop", step))
                continue
            segment = [kernel for op in step for kernel in graph.lower(op)]
            if not segment:
                continue
            count = len(segment)
            context = KernelPassContext(graph, frozenset(final | read_after[position]), backend)
            program = _compile_segment(
                graph,
                segment,
                kernels,
                context,
                _segment_opts(opts, offset, count),
                graph.inputs if position == 0 else (),
                build,
                fuse,
                traced,
            )
            offset += count
            compiled.append(("kernels", program))
    if len(compiled) == 1 and compiled[0][0] == "kernels":
        program = compiled[0][1]
        program.nnef_steps = compiled
        program.nnef_loop_opts = {}
        if not traced:  # made when first read: the graph lowered again, traced, rendering only
            program.retrace = lambda: _compile_graph(graph, backend, opts, None, fuse, build=False,
                                                     eager_trace=True).trace
        return program
    return GraphProgram(graph, backend, opts, compiled, trace, loop_opts)
