"""The lowering pipeline: the spec's eight stages, from a Tensor graph to running kernels.

:func:`lower` lists the stages in order; each is one traced pass named as the spec's table names
it, so ``Program.trace`` shows every rule that fired, stage by stage.  :func:`compile` is the
public entry point (``uv.compile``); :class:`Program` runs the result.

Between stages the whole program is one UOp graph: ``FUNCTION(TUPLE(outputs...), inputs...)``,
where after Rangeify each output reads ``AFTER(buffer, CALL(kernel, buffer, arguments...))`` and
each later stage replaces the kernels in the CALLs (optimized AST, expanded AST, selected
instructions, LINEAR, ``PROGRAM(LINEAR, SOURCE)``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from uopviz.backends.base import Backend, CompiledKernel, KernelMeta, KernelParam, numpy_dtype
from uopviz.core.buffers import initial_data, storage_array
from uopviz.core.dtype import DType, dtypes
from uopviz.core.limits import check_allocation
from uopviz.core.ops import GroupOp, Ops
from uopviz.core.rewrite import Trace, graph_rewrite, substitute, traced_pass, tracing
from uopviz.core.uop import UOp
from uopviz.passes import isel
from uopviz.passes.callify import callify, tensor_graph
from uopviz.passes.expand import expand_kernel
from uopviz.passes.kernel import Kernel, _location_of
from uopviz.passes.linearize import linearize, lower_reductions, to_special
from uopviz.passes.memory_plan import (
    MemoryPlan,
    apply_memory_plan,
    apply_register_plan,
    plan_memory,
    plan_registers,
)
from uopviz.passes.optimize import finish_optimize, optimize_kernel, opts_for
from uopviz.passes.rangeify import rangeify
from uopviz.passes.render import backend_named, compile_source, program_uop, render_source

STAGES = ("Callify", "Rangeify", "Optimize", "Expand", "Instruction Selection", "Linearize",
          "Register/Memory Plan", "Render")


class PipelineError(RuntimeError):
    """A stage could not lower the program; names the stage and the kernel."""


# ---------------------------------------------------------------------------------------------
# the pipeline


def lower(outputs: Sequence[UOp], backend: str, opts: Any = None, build: bool = True) -> Program:
    """Run the eight stages of the spec's Lowering Pipeline on ``outputs`` (``build=False``: Render
    stops at the source text, nothing is compiled)."""
    program = Program(list(outputs), backend, build=build)
    run_stage(program, "Callify", callify_stage, root=tensor_graph(program.outputs))
    run_stage(program, "Rangeify", rangeify_stage)
    run_stage(program, "Optimize", lambda p: optimize_stage(p, opts))
    run_stage(program, "Expand", expand_stage)
    run_stage(program, "Instruction Selection", instruction_selection_stage)
    run_stage(program, "Linearize", linearize_stage)
    run_stage(program, "Register/Memory Plan", memory_plan_stage)
    run_stage(program, "Render", render_stage)
    return program


def compile(outputs: Any, backend: str = "python", opts: Any = None,  # noqa: A001 - the spec's uv.compile
            build: bool = True) -> Program:
    """Lower Tensors (or value UOps) to a runnable :class:`Program` on ``backend``.

    ``opts``: None (no optimizations), ``"heuristic"``, ``"beam"``, a sequence of ``Opt`` for every
    kernel, one such sequence per kernel, a dict from kernel index or name to its opts, or tuning
    records (``uopviz.passes.records``).  ``build=False`` renders the sources without compiling
    them (the program cannot run).  The lowering is always traced: ``program.trace`` has one pass
    per stage.
    """
    values = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    roots = [_as_uop(o, i) for i, o in enumerate(values)]
    if not roots:
        raise ValueError("compile needs at least one Tensor or UOp")
    if build:  # say so before lowering anything (sources can still be rendered: build=False)
        backend_named(backend).require()
    with tracing() as trace:
        program = lower(roots, backend, opts, build)
    program.trace = trace
    return program


def compile_kernels(kernels: Sequence[tuple[str, UOp, Sequence[UOp]]], inputs: Sequence[UOp],
                    outputs: Sequence[UOp], backend: str = "python", opts: Any = None, build: bool = True,
                    front_end: Callable[[Program], None] | None = None) -> Program:
    """Compile kernel ASTs made by a front end other than Tensors (already in the form Rangeify
    gives, ``docs/design/kernel-ir.md``) through Optimize ... Render: a runnable :class:`Program`.

    ``kernels``: ``(name, ast, buffers)`` in run order; ``buffers`` are BUFFER UOps bound to the
    kernel's PARAM slots (slot 0 is the one it writes; it may read it too).  ``inputs``: the BUFFERs
    the caller supplies (``Program.run`` takes them by position in this order); ``outputs``: the
    BUFFERs whose final contents ``run`` returns, flat.  ``front_end(program)``, when given, runs
    inside the trace before Optimize, so the front end can record its own passes there.  ``opts`` as
    for :func:`compile`.
    """
    params = {buffer: UOp.param(slot, buffer.shape, buffer.arg.dtype, buffer.arg.device)
              for slot, buffer in enumerate(inputs)}
    current: dict[UOp, UOp] = dict(params)  # buffer -> its value after the kernels so far
    items = []
    for index, (name, ast, buffers) in enumerate(kernels):
        arguments = [current.get(buffer, buffer) for buffer in buffers]
        written = buffers[0]
        current[written] = UOp(Ops.AFTER, (written, UOp(Ops.CALL, (ast, *arguments))))
        items.append(ScheduleItem(index, ast, arguments, Kernel(ast, backend, name_hint=name)))
    unwritten = [buffer for buffer in outputs if buffer not in current]
    if unwritten:
        raise ValueError(f"compile_kernels: no kernel writes the output buffer(s) {unwritten}")
    if build:
        backend_named(backend).require()
    with tracing() as trace:
        program = Program(list(outputs), backend, build=build)
        program.graph = UOp(Ops.FUNCTION, (UOp(Ops.TUPLE, tuple(current[b] for b in outputs)), *inputs))
        program.inputs = list(inputs)
        program.items = items
        if front_end is not None:
            front_end(program)
        run_stage(program, "Optimize", lambda p: optimize_stage(p, opts))
        run_stage(program, "Expand", expand_stage)
        run_stage(program, "Instruction Selection", instruction_selection_stage)
        run_stage(program, "Linearize", linearize_stage)
        run_stage(program, "Register/Memory Plan", memory_plan_stage)
        run_stage(program, "Render", render_stage)
    program.trace = trace
    return program


def _as_uop(value: Any, position: int) -> UOp:
    if isinstance(value, UOp):
        return value
    uop = getattr(value, "uop", None)
    if isinstance(uop, UOp):
        return uop
    raise TypeError(f"compile: output {position} is a {type(value).__name__}; pass Tensors or UOps")


def run_stage(program: Program, name: str, stage: Callable[[Program], None], root: UOp | None = None) -> None:
    """Run one stage as a traced pass over the whole program graph (``root``: the stage's input when
    the program has no graph yet, Callify's Tensor graph)."""
    with traced_pass(name, program.graph if root is None else root) as record:
        try:
            stage(program)
        except (PipelineError, ValueError):
            raise  # errors about the program itself (CallifyError, OptError, ...) say what is wrong
        except Exception as error:
            raise PipelineError(f"{name}: {type(error).__name__}: {error}") from error
        record.output = program.graph


# ---------------------------------------------------------------------------------------------
# the stages


def callify_stage(program: Program) -> None:
    """The graph becomes one stateless FUNCTION of its inputs."""
    program.graph = callify(program.outputs)
    program.inputs = list(program.graph.src[1:])


def rangeify_stage(program: Program) -> None:
    """Kernel boundaries, and every kernel down to shape-() values over RANGEs."""
    result = rangeify(program.graph)
    program.graph = result.function
    calls = [u for u in program.graph.toposort() if u.op is Ops.CALL]
    program.items = [ScheduleItem(index, call.src[0], list(call.src[1:]),
                                  Kernel(call.src[0], program.backend, name_hint=f"k{index}"), shard=call.arg)
                     for index, call in enumerate(calls)]


def optimize_stage(program: Program, opts: Any) -> None:
    """Each kernel in its backend's initial state, with its opts (each a recorded step).  Identical
    kernels with the same opts (a network's repeated blocks) are optimized once."""
    bodies = {}
    done: dict[tuple[UOp, str], tuple[Kernel, UOp]] = {}
    for item in program.items:
        chosen = opts_for(opts, item.index, item.kernel)
        key = (item.kernel.ast, repr(chosen))
        if key not in done:
            kernel = optimize_kernel(item.kernel, chosen)
            done[key] = (kernel, finish_optimize(kernel))
        kernel, bodies[item] = done[key]
        item.kernel = kernel if kernel.name_hint == item.kernel.name_hint else \
            Kernel(kernel.ast, kernel.backend, kernel.opts, item.kernel.name_hint)
    program.replace_bodies(bodies)


def _once_per_body(program: Program, transform: Callable[[ScheduleItem], UOp]) -> dict[ScheduleItem, UOp]:
    """``transform(item)`` for every item; an item whose body and kernel name are an earlier item's
    gets that item's result (identical kernels are lowered once)."""
    done: dict[tuple[UOp, str], UOp] = {}
    bodies = {}
    for item in program.items:
        key = (item.body, item.kernel.name)
        if key not in done:
            done[key] = transform(item)
        bodies[item] = done[key]
    return bodies


def expand_stage(program: Program) -> None:
    """UPCAST and UNROLL ranges become vector lanes."""
    program.replace_bodies(_once_per_body(program, lambda item: expand_kernel(item.body, item.kernel.name)))


def instruction_selection_stage(program: Program) -> None:
    """Accumulators for reductions, then the target's instruction rules."""
    backend = backend_named(program.backend)
    program.replace_bodies(_once_per_body(
        program, lambda item: select_instructions(item.body, backend, item.kernel.name)))


def linearize_stage(program: Program) -> None:
    """Every kernel as a LINEAR program."""
    backend = backend_named(program.backend)
    bodies = _once_per_body(program, lambda item: linearize_kernel(item.body, backend, item.kernel.name))
    for item, linear in bodies.items():
        record_step(linearize, item.body, linear, f"linearize {item.kernel.name}")
    program.replace_bodies(bodies)


def memory_plan_stage(program: Program) -> None:
    """Registers inside kernels, then GLOBAL buffers between kernels."""
    saved = 0
    plans: dict[UOp, Any] = {}
    bodies = {}
    for item in program.items:
        if item.body not in plans:
            plan = plan_registers(item.body)
            plans[item.body] = (plan, apply_register_plan(item.body, plan))
        plan, bodies[item] = plans[item.body]
        saved += plan.bytes_saved
    program.replace_bodies(bodies)
    outputs = {_storage(v) for v in program.output_values()}
    usage = [(_storage(item.arguments[0]), [_storage(a) for a in item.arguments[1:]])
             for item in program.items]
    plan = plan_memory(usage, outputs)
    plan.register_bytes_saved = saved
    program.memory_plan = plan
    if plan.placements:
        program.graph = apply_memory_plan(program.graph, plan)


def render_stage(program: Program) -> None:
    """Every LINEAR program rendered and compiled by the backend (identical kernels once; in
    parallel where the backend's builds are processes of their own)."""
    bodies = {}
    rendered_sources: dict[UOp, str] = {}
    for item in program.items:
        linear = item.body
        source = rendered_sources.get(linear)
        if source is None:
            source = rendered_sources[linear] = render_source(linear, program.backend)
        item.source = source
        rendered = program_uop(linear, source)
        record_step(render_source, linear, rendered, f"render {linear.arg}")
        bodies[item] = rendered
    if program.build:
        compiled = compile_sources({(item.source, str(item.body.arg)) for item in program.items},
                                   program.backend)
        for item in program.items:
            item.compiled = compiled[item.source, str(item.body.arg)]
    program.replace_bodies(bodies)


def compile_sources(sources: Iterable[tuple[str, str]], backend_name: str) -> dict[tuple[str, str], Any]:
    """Each ``(source, name)`` compiled once: in a thread per core when the backend's builds run as
    processes of their own (``Backend.parallel_compile``), else one after the other."""
    backend = backend_named(backend_name)
    pending = list(dict.fromkeys(sources))
    workers = min(len(pending), os.cpu_count() or 1) if backend.parallel_compile else 1
    if workers <= 1:
        return {(source, name): compile_source(source, name, backend) for source, name in pending}
    with ThreadPoolExecutor(workers, thread_name_prefix="uopviz-compile") as pool:
        futures = {key: pool.submit(compile_source, key[0], key[1], backend) for key in pending}
        return {key: future.result() for key, future in futures.items()}


def record_step(rule: Callable, before: UOp, after: UOp, pass_name: str) -> None:
    """Record a transformation made by a function (not a pattern rule) as one step of its own pass."""
    with traced_pass(pass_name, before) as record:
        record.step(rule.__name__, before, after, location=_location_of(rule))
        record.output = after


# ---------------------------------------------------------------------------------------------
# per-kernel lowering (shared by the stages and by Kernel.source / Kernel.time)


def select_instructions(ast: UOp, backend: Backend, name: str = "kernel") -> UOp:
    """Instruction Selection for one kernel: REDUCE → REG accumulators, then the target's rules
    (``uopviz.passes.isel``: decompositions of what the backend lacks, devectorization)."""
    ast = lower_reductions(ast)
    matcher = isel.instruction_selection_matcher(
        backend.supported_ops, backend.vector_widths, backend.supports_dtype(dtypes.float64),
        backend.scalar_dtypes, backend.vector_bytes,
    )
    ast = graph_rewrite(ast, matcher, name="instruction selection")
    if not backend.vector_widths:
        ast = isel.devectorize(ast)
    missing = sorted({u.op.name for u in ast.toposort() if u.op in GroupOp.ELEMENTWISE
                      and u.op not in backend.supported_ops and u.op is not Ops.CAST})
    if missing:
        raise PipelineError(f"kernel {name}: the {backend.name} backend has no {', '.join(missing)} and no "
                            f"instruction-selection rule decomposed them")
    return ast


def linearize_kernel(ast: UOp, backend: Backend, name: str) -> UOp:
    """The LINEAR program of one kernel (GPU backends: GLOBAL/LOCAL ranges become SPECIALs)."""
    if backend.has_local:
        ast = to_special(ast)
    return linearize(ast, name)


@dataclass
class LoweredKernel:
    """One kernel after every stage: its LINEAR program and source; compiled on first use of
    :attr:`compiled` (viewing source never compiles, so CUDA source renders on any machine)."""

    name: str
    backend: str
    linear: UOp
    source: str
    _compiled: CompiledKernel | None = field(default=None, repr=False)

    @property
    def compiled(self) -> CompiledKernel:
        """The compiled kernel (compiled now if it was not; backends cache by source and target)."""
        if self._compiled is None:
            self._compiled = compile_source(self.source, self.name, self.backend)
        return self._compiled

    @property
    def params(self) -> tuple[KernelParam, ...]:
        """The kernel's arguments, in slot order, read from the rendered source."""
        return KernelMeta.from_source(self.source, self.backend).params

    def random_arguments(self, seed: int = 0) -> list[np.ndarray]:
        """Random arrays for every PARAM slot (the written ones zero), for timing; within the memory
        limit (``uopviz.backends.timing.random_arguments``)."""
        from uopviz.backends.timing import random_arguments

        return random_arguments(self.params, seed)


def lower_kernel(kernel: Kernel, backend_name: str) -> LoweredKernel:
    """A Kernel through Expand, Instruction Selection, Linearize, Register Plan and Render."""
    backend = backend_named(backend_name)
    ast = expand_kernel(finish_optimize(kernel), kernel.name)
    ast = select_instructions(ast, backend, kernel.name)
    linear = linearize_kernel(ast, backend, kernel.name)
    linear = apply_register_plan(linear, plan_registers(linear))
    return LoweredKernel(kernel.name, backend.name, linear, render_source(linear, backend))


# ---------------------------------------------------------------------------------------------
# the program


@dataclass(eq=False)
class ScheduleItem:
    """One kernel launch: the kernel, its current body in the program graph, and the program-level
    values bound to its PARAM slots (slot 0 is the buffer it writes)."""

    index: int
    body: UOp
    arguments: list[UOp]
    kernel: Kernel
    source: str = ""
    compiled: CompiledKernel | None = None
    shard: tuple[int, int, bool] | None = None  # (device index, device count, reads whole buffers)

    @property
    def device(self) -> Any:
        """The device this launch runs on (one of an n-tuple device for a per-device launch)."""
        device = _storage(self.arguments[0]).arg.device
        return device[self.shard[0]] if self.shard is not None else device


# the views a program-level value sees its buffer through (``rangeify.view_of``): the first elements
# of a bigger buffer, and a value on an n-tuple device as a RESHAPE/PERMUTE of its device-major buffer
_VIEW_OPS = (Ops.RESHAPE, Ops.SHRINK, Ops.PERMUTE)


def _storage(value: UOp) -> UOp:
    """The BUFFER (or input PARAM) behind a program-level value: through AFTER and views."""
    while value.op is Ops.AFTER or value.op in _VIEW_OPS:
        value = value.src[0]
    return value


def _read_view(value: UOp, storage: np.ndarray) -> np.ndarray:
    """The elements of ``value``, views over a buffer whose flat contents are ``storage``, in logical
    (row-major) order: each view applied to the array as numpy does it."""
    views: list[UOp] = []
    while value.op is Ops.AFTER or value.op in _VIEW_OPS:
        if value.op is not Ops.AFTER:
            views.append(value)
        value = value.src[0]
    array = storage
    for view in reversed(views):
        if view.op is Ops.RESHAPE:
            array = array.reshape(view.shape)
        elif view.op is Ops.PERMUTE:
            array = array.transpose(view.arg)
        else:
            offsets, sizes = view.marg
            array = array[tuple(slice(o, o + s) for o, s in zip(offsets, sizes))]
    return array


@dataclass(eq=False)
class Program:
    """A compiled program: its kernels in run order, the trace of its lowering and its memory plan.

    ``run()`` executes it and returns one numpy array per output.
    """

    outputs: list[UOp]
    backend: str
    graph: UOp | None = None
    inputs: list[UOp] = field(default_factory=list)
    items: list[ScheduleItem] = field(default_factory=list)
    memory_plan: MemoryPlan | None = None
    trace: Trace | None = None
    build: bool = True

    def __repr__(self) -> str:
        return f"<Program {len(self.items)} kernels on {self.backend}: {[k.name for k in self.kernels]}>"

    # -- what it is ---------------------------------------------------------------------------
    @property
    def kernels(self) -> list[Kernel]:
        """The kernels, in run order (with the opts the Optimize stage applied)."""
        return [item.kernel for item in self.items]

    @property
    def sources(self) -> list[str]:
        """The rendered source of every kernel."""
        return [item.source for item in self.items]

    @property
    def buffers(self) -> list[UOp]:
        """Every buffer of the program: inputs, then the buffers its kernels write."""
        written = [_storage(item.arguments[0]) for item in self.items]
        return [*self.inputs, *dict.fromkeys(written)]

    def memory_report(self) -> str:
        """The Register/Memory Plan's report (bytes saved by sharing)."""
        return self.memory_plan.report() if self.memory_plan is not None else "no memory plan"

    def output_values(self) -> list[UOp]:
        """The program-level value of every output (a view of the buffer holding it)."""
        body = self.graph.src[0] if self.graph is not None and self.graph.op is Ops.FUNCTION else None
        if body is None:
            raise RuntimeError("the program has not been lowered")
        return list(body.src)

    def replace_body(self, item: ScheduleItem, new_body: UOp) -> None:
        """Put ``new_body`` in place of ``item``'s kernel body in the program graph."""
        self.replace_bodies({item: new_body})

    def replace_bodies(self, bodies: Mapping[ScheduleItem, UOp]) -> None:
        """Put each new body in place of its item's kernel body, in one walk of the program graph (a
        stage replaces every kernel's body: one walk per kernel made a 250-kernel graph's stages
        quadratic).  Items sharing one body (identical kernels) get the first item's new body."""
        mapping: dict[UOp, UOp] = {}
        for item, new_body in bodies.items():
            if new_body is not item.body:
                mapping.setdefault(item.body, new_body)
        if mapping:
            self.graph = substitute(self.graph, mapping)
        for item, new_body in bodies.items():
            item.body = new_body

    # -- running --------------------------------------------------------------------------------
    def run(self, inputs: Mapping[Any, Any] | None = None, isolated: bool = False) -> list[np.ndarray]:
        """Run every kernel in order; one numpy array per output.

        ``inputs`` maps input BUFFER UOps (or their Tensors, or input positions) to data; inputs not
        given use the data registered for them (``uopviz.core.buffers.initial_data``).
        ``isolated``: run each kernel in the kernel worker process (``uopviz.backends.worker``), so a
        kernel that crashes or hangs raises KernelCrashed / KernelTimeout here instead of taking the
        calling process (a notebook's kernel) down; slower (the data travels both ways).
        """
        self._require_built()
        if isolated:
            return self._run_isolated(inputs or {})
        arrays = self._allocate(inputs or {})
        for item in self.items:
            item.compiled(*[self._array_of(arrays, a, item, slot) for slot, a in enumerate(item.arguments)])
        pairs = zip(self.output_values(), self.outputs)
        return [self._output(arrays, value, original) for value, original in pairs]

    def _run_isolated(self, given: Mapping[Any, Any]) -> list[np.ndarray]:
        """``run(isolated=True)``: the buffers are allocated in the kernel worker, each kernel runs
        there on them, and only the outputs come back."""
        from uopviz.backends.worker import default_worker

        keys, specs = self._buffer_specs(given)
        index = {key: position for position, key in enumerate(keys)}
        sizes = [_spec_size(spec) for spec in specs]
        worker = default_worker()
        session = worker.allocate(specs)
        try:
            for item in self.items:
                arguments = [self._argument_of(index, sizes, a, item, slot)
                             for slot, a in enumerate(item.arguments)]
                compiled = item.compiled
                worker.run_bound(compiled.backend, compiled.source, compiled.name, session, arguments)
            wanted = list(dict.fromkeys(self._key_of(_storage(value)) for value in self.output_values()))
            fetched = worker.fetch(session, [index[key] for key in wanted])
        except BaseException:
            worker.release(session)
            raise
        arrays = dict(zip(wanted, fetched))
        pairs = zip(self.output_values(), self.outputs)
        return [self._output(arrays, value, original) for value, original in pairs]

    def _require_built(self) -> None:
        if not self.build or any(item.compiled is None for item in self.items):
            raise RuntimeError("the program was rendered without compiling (build=False): compile it to run")

    def bind(self, inputs: Mapping[Any, Any] | None = None) -> BoundProgram:
        """The program with its buffers allocated and every kernel bound to them, to time the kernels
        alone: ``run()`` launches them (no allocation, no copies).  Each kernel's data is bound here,
        so on device backends (OpenCL, CUDA) values do not flow between kernels: compute with
        :meth:`run`, time with this."""
        self._require_built()
        arrays = self._allocate(inputs or {})
        launches = []
        for item in self.items:
            args = [self._array_of(arrays, a, item, slot) for slot, a in enumerate(item.arguments)]
            launches.append(item.compiled.prepare(*args))
        return BoundProgram(self, arrays, launches)

    def _allocate(self, given: Mapping[Any, Any]) -> dict[UOp, np.ndarray]:
        from uopviz.backends.worker import allocate_buffers

        keys, specs = self._buffer_specs(given)
        return dict(zip(keys, allocate_buffers(specs)))

    def _buffer_specs(self, given: Mapping[Any, Any]) -> tuple[list[Any], list[tuple]]:
        """Every array the run needs, as keys (input UOps, BUFFERs, ``("arena", device)``) and specs for
        ``uopviz.backends.worker.allocate_buffers``; the new bytes are checked against the memory
        limit here, before anything is allocated."""
        keys: list[Any] = []
        specs: list[tuple] = []
        seen: dict[Any, None] = {}  # a dict, not `in keys`: == on UOps builds CMP_EQ UOps
        by_key: dict[Any, Any] = {}
        for key, value in given.items():
            key_uop = getattr(key, "uop", key)
            if isinstance(key_uop, UOp):
                while key_uop.op is Ops.RESHAPE:
                    key_uop = key_uop.src[0]
            by_key[key_uop] = value
        for position, data_uop in enumerate(self.inputs):
            value = by_key.get(data_uop, by_key.get(position))
            seen[data_uop] = None
            keys.append(data_uop)
            specs.append(("data", _input_array(data_uop, value, position)))
        plan = self.memory_plan
        arena_index = {}
        for device, arena in (plan.arenas.items() if plan else ()):
            arena_index[device] = len(keys)
            keys.append(("arena", device))
            specs.append(("zeros", arena.arg.size, np.dtype(np.uint8)))
        written = [_storage(item.arguments[0]) for item in self.items]
        for buffer in [*written, *(_storage(v) for v in self.output_values())]:
            if buffer in seen or buffer.op is not Ops.BUFFER:
                continue
            seen[buffer] = None
            placement = plan.placements.get(buffer) if plan else None
            storage = numpy_dtype(buffer.arg.dtype)
            keys.append(buffer)
            if placement is not None:
                arena = arena_index[placement.arena.arg.device]
                specs.append(("view", arena, placement.offset, placement.nbytes, storage))
            else:
                specs.append(("zeros", buffer.shape[0], storage))
        new_bytes = sum(spec[1] * np.dtype(spec[2]).itemsize for spec in specs if spec[0] == "zeros")
        check_allocation(new_bytes, f"the buffers of a program of {len(self.items)} kernels")
        return keys, specs

    def _key_of(self, storage: UOp) -> UOp:
        """The array key of a storage UOp: an input PARAM is its input's data UOp."""
        return self.inputs[storage.arg.slot] if storage.op is Ops.PARAM else storage

    def _argument_of(
        self, index: dict[Any, int], sizes: list[int], value: UOp, item: ScheduleItem, slot: int
    ) -> tuple:
        """``_array_of`` as ``(buffer index, start, stop)`` for arrays that live in the kernel worker."""
        storage = _storage(value)
        position = index[self._key_of(storage)]
        if item.shard is not None:
            device, count, whole = item.shard
            if isinstance(storage.device, tuple) and (slot == 0 or not whole):
                part = sizes[position] // count
                return (position, device * part, (device + 1) * part)
        return (position, 0, None)

    def _array_of(self, arrays: dict[UOp, np.ndarray], value: UOp, item: ScheduleItem | None = None,
                  slot: int = 0) -> np.ndarray:
        storage = _storage(value)
        array = arrays[self._key_of(storage)]
        if item is not None and item.shard is not None:
            index, count, whole = item.shard
            if isinstance(storage.device, tuple) and (slot == 0 or not whole):
                part = array.size // count  # a launch on one device gets that device's part
                return array[index * part:(index + 1) * part]
        return array

    def _output(self, arrays: dict[UOp, np.ndarray], value: UOp, original: UOp) -> np.ndarray:
        storage = _storage(value)
        if storage.op is not Ops.PARAM and storage not in arrays:
            raise PipelineError(f"output {original.op.name}{original.shape} is not a view of a buffer: its "
                                f"value is seen through {storage.op.name}")
        data = arrays[self.inputs[storage.arg.slot]] if storage.op is Ops.PARAM else arrays[storage]
        if value.op in _VIEW_OPS:  # device-major storage of an n-tuple device reads back in logical order
            data = _read_view(value, data)
        else:
            data = data[:math.prod(original.shape)]
        out = np.array(data, copy=True)
        if original.dtype.scalar is dtypes.bfloat16:
            out = (out.astype(np.uint32) << np.uint32(16)).view(np.float32)
        return out.reshape(original.shape)


def _spec_size(spec: tuple) -> int:
    """The element count of the array a buffer spec describes."""
    kind = spec[0]
    if kind == "data":
        return spec[1].size
    if kind == "zeros":
        return spec[1]
    return spec[3] // np.dtype(spec[4]).itemsize


@dataclass(eq=False)
class BoundProgram:
    """A program bound to its arrays (see :meth:`Program.bind`)."""

    program: Program
    arrays: dict[UOp, np.ndarray]
    launches: list[Any]

    def run(self) -> float:
        """Run every kernel once, in order; the seconds the kernels took."""
        return sum(launch.run() for launch in self.launches)

    def outputs(self) -> list[np.ndarray]:
        """One numpy array per output (copies; device backends copy their results back first)."""
        for launch in self.launches:
            launch.read_back()
        pairs = zip(self.program.output_values(), self.program.outputs)
        return [self.program._output(self.arrays, value, original) for value, original in pairs]


def _input_array(data_uop: UOp, value: Any, position: int) -> np.ndarray:
    """The flat storage array of input ``position`` from the given value or its registered data."""
    dtype: DType = data_uop.arg.dtype if data_uop.op is Ops.BUFFER else dtypes.uint8
    storage = numpy_dtype(dtype)
    size = data_uop.shape[0]
    if value is None:
        if data_uop.op is Ops.BINARY:
            return np.frombuffer(bytes(data_uop.arg), np.uint8)
        registered = initial_data(data_uop)
        if registered is None:  # an ``empty`` buffer: its contents are undefined, zeros will do
            return np.zeros(size, storage)
        return registered
    array = np.asarray(value)
    if dtype.scalar is dtypes.bfloat16 and array.dtype != np.uint16:
        array = storage_array(array, dtype)
    array = np.ascontiguousarray(array.reshape(-1)).astype(storage, copy=False)
    if array.size != size:
        raise ValueError(f"input {position} ({data_uop.arg!r}) holds {size} elements; the data given has "
                         f"{array.size}")
    return array


__all__ = ["STAGES", "BoundProgram", "LoweredKernel", "PipelineError", "Program", "ScheduleItem", "compile",
           "compile_kernels", "compile_sources", "lower", "lower_kernel", "select_instructions"]

