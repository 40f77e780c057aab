"""Programs: compiling Tensors (``uv.compile``) or kernel ASTs through the pipeline, and running them.

:func:`compile` and :func:`compile_kernels` hand a :class:`Program` to the pipeline's stage table
(``uopviz.passes.pipeline.lower``); a Program is the :class:`~uopviz.passes.schedule.Lowering` the
stages fill in, plus what running it needs: buffers allocated (within the memory limit), input
data bound (given, or registered with ``uopviz.core.buffers``), views read back, bfloat16 unpacked,
kernels launched in this process or in the isolated kernel worker.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np

# through the module, not its names: tests (and users) replace these functions on the module
from uopviz.backends import worker as worker_module
from uopviz.backends.base import numpy_dtype
from uopviz.core.buffers import initial_data, storage_array
from uopviz.core.dtype import DType, dtypes
from uopviz.core.limits import check_allocation
from uopviz.core.ops import Ops
from uopviz.core.rewrite import Trace, tracing
from uopviz.core.uop import UOp
from uopviz.passes.extent_sharing import ExtentBoundKernel
from uopviz.passes.optops.kernel import Kernel
from uopviz.passes.pipeline import lower
from uopviz.passes.render import backend_named
from uopviz.passes.schedule import VIEW_OPS, Lowering, PipelineError, ScheduleItem, storage_of


def compile(outputs: Any, backend: str = "python", opts: Any = None,  # noqa: A001 - the spec's uv.compile
            build: bool = True) -> Program:
    """Lower Tensors (or value UOps) to a runnable :class:`Program` on ``backend``.

    ``opts``: None (no optimizations), ``"heuristic"``, ``"beam"``, a sequence of ``Opt`` for every
    kernel, one such sequence per kernel, a dict from kernel index or name to its opts, or tuning
    records (``uopviz.engine.records``).  ``build=False`` renders the sources without compiling
    them (the program cannot run).  The lowering is always traced: ``program.trace`` has one pass
    per stage.
    """
    values = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    roots = [_as_uop(o, i) for i, o in enumerate(values)]
    if not roots:
        raise ValueError("compile needs at least one Tensor or UOp")
    if build:  # say so before lowering anything (sources can still be rendered: build=False)
        backend_named(backend).require()
    program = Program(roots, backend, build=build, opts=opts)
    with tracing() as trace:
        lower(program)
    program.trace = trace
    return program


def compile_kernels(kernels: Sequence[tuple[str, UOp, Sequence[UOp]]], inputs: Sequence[UOp],
                    outputs: Sequence[UOp], backend: str = "python", opts: Any = None, build: bool = True,
                    front_end: Callable[[Program], None] | None = None,
                    share_extents: bool = False, traced: bool = True) -> Program:
    """Compile kernel ASTs made by a front end other than Tensors (already in the form Rangeify
    gives, ``docs/design/kernel-ir.md``) through Optimize ... Render: a runnable :class:`Program`.

    ``kernels``: ``(name, ast, buffers)`` in run order; ``buffers`` are BUFFER UOps bound to the
    kernel's PARAM slots (slot 0 is the one it writes; it may read it too).  ``inputs``: the BUFFERs
    the caller supplies (``Program.run`` takes them by position in this order); ``outputs``: the
    BUFFERs whose final contents ``run`` returns, flat.  ``front_end(program)``, when given, runs
    inside the trace before Optimize, so the front end can record its own passes there.  ``opts`` as
    for :func:`compile`.  ``share_extents``: kernels that differ only in an extent share one
    compiled kernel on the CPU backends (:mod:`uopviz.passes.extent_sharing`).  ``traced=False``
    records no trace (the caller gives the program a ``retrace``); a big program's kernels then
    lower on every core (:mod:`uopviz.passes.parallel`).
    """
    params = {buffer: UOp.param(slot, buffer.shape, buffer.arg.dtype, buffer.arg.device)
              for slot, buffer in enumerate(inputs)}
    current: dict[UOp, UOp] = dict(params)  # buffer -> its value after the kernels so far
    items = []
    for index, (name, ast, buffers) in enumerate(kernels):
        arguments = [_current_value(current, buffer) for buffer in buffers]
        written = storage_of(buffers[0])
        current[written] = UOp(Ops.AFTER, (written, UOp(Ops.CALL, (ast, *arguments))))
        items.append(ScheduleItem(index, ast, arguments, Kernel(ast, backend, name_hint=name)))
    unwritten = [buffer for buffer in outputs if buffer not in current]
    if unwritten:
        raise ValueError(f"compile_kernels: no kernel writes the output buffer(s) {unwritten}")
    if build:
        backend_named(backend).require()
    with tracing() if traced else nullcontext() as trace:
        program = Program(list(outputs), backend, build=build, opts=opts, share_extents=share_extents)
        program.graph = UOp(Ops.FUNCTION, (UOp(Ops.TUPLE, tuple(current[b] for b in outputs)), *inputs))
        program.inputs = list(inputs)
        program.items = items
        if front_end is not None:
            front_end(program)
        lower(program, first="Optimize")
    if traced:
        program.trace = trace
    return program


def _current_value(current: dict[UOp, UOp], buffer: UOp) -> UOp:
    """``buffer``'s value after the kernels so far (``current``: buffer -> value); a view of a
    buffer (a SHRINK: the elements from an offset on) is that view of the buffer's value."""
    if buffer.op is Ops.SHRINK:
        return buffer.replace(src=(current.get(buffer.src[0], buffer.src[0]), *buffer.src[1:]))
    return current.get(buffer, buffer)


def _as_uop(value: Any, position: int) -> UOp:
    if isinstance(value, UOp):
        return value
    uop = getattr(value, "uop", None)
    if isinstance(uop, UOp):
        return uop
    raise TypeError(f"compile: output {position} is a {type(value).__name__}; pass Tensors or UOps")



def _read_view(value: UOp, storage: np.ndarray) -> np.ndarray:
    """The elements of ``value``, views over a buffer whose flat contents are ``storage``, in logical
    (row-major) order: each view applied to the array as numpy does it."""
    views: list[UOp] = []
    while value.op is Ops.AFTER or value.op in VIEW_OPS:
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
class Program(Lowering):
    """A compiled program: its kernels in run order, the trace of its lowering and its memory plan.

    ``run()`` executes it and returns one numpy array per output.
    """

    def __repr__(self) -> str:
        return f"<Program {len(self.items)} kernels on {self.backend}: {[k.name for k in self.kernels]}>"

    # -- its trace ------------------------------------------------------------------------------
    #: where the lowering ran untraced (a big NNEF graph lowered on every core, a program read from
    #: the whole-program cache), what makes ``trace`` on first read: the program lowered again
    #: under tracing
    retrace: Callable[[], Trace] | None = None

    @property  # type: ignore[override]
    def trace(self) -> Trace | None:
        """The trace of the lowering: one pass per stage (made on first read where the lowering ran
        untraced, by lowering the program again under tracing)."""
        found = self.__dict__.get("_trace")
        if found is None and self.retrace is not None:
            found = self.__dict__["_trace"] = self.retrace()
        return found

    @trace.setter
    def trace(self, value: Trace | None) -> None:
        self.__dict__["_trace"] = value

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
        keys, specs = self._buffer_specs(given)
        index = {key: position for position, key in enumerate(keys)}
        sizes = [_spec_size(spec) for spec in specs]
        worker = worker_module.default_worker()
        session = worker.allocate(specs)
        try:
            for item in self.items:
                arguments = [self._argument_of(index, sizes, a, item, slot)
                             for slot, a in enumerate(item.arguments)]
                compiled = item.compiled
                extents = compiled.generators if isinstance(compiled, ExtentBoundKernel) else ()
                worker.run_bound(compiled.backend, compiled.source, compiled.name, session, arguments,
                                 extents=extents)
            wanted = list(dict.fromkeys(self._key_of(storage_of(value)) for value in self.output_values()))
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
        keys, specs = self._buffer_specs(given)
        return dict(zip(keys, worker_module.allocate_buffers(specs)))

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
        written = [storage_of(item.arguments[0]) for item in self.items]
        for buffer in [*written, *(storage_of(v) for v in self.output_values())]:
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
        storage = storage_of(value)
        position = index[self._key_of(storage)]
        start = _view_start(value)
        if start:
            return (position, start, None)
        if item.shard is not None:
            device, count, whole = item.shard
            if isinstance(storage.device, tuple) and (slot == 0 or not whole):
                part = sizes[position] // count
                return (position, device * part, (device + 1) * part)
        return (position, 0, None)

    def _array_of(self, arrays: dict[UOp, np.ndarray], value: UOp, item: ScheduleItem | None = None,
                  slot: int = 0) -> np.ndarray:
        storage = storage_of(value)
        array = arrays[self._key_of(storage)]
        start = _view_start(value)
        if start:  # a view of the buffer from an element on: the array from there
            return array[start:]
        if item is not None and item.shard is not None:
            index, count, whole = item.shard
            if isinstance(storage.device, tuple) and (slot == 0 or not whole):
                part = array.size // count  # a launch on one device gets that device's part
                return array[index * part:(index + 1) * part]
        return array

    def _output(self, arrays: dict[UOp, np.ndarray], value: UOp, original: UOp) -> np.ndarray:
        storage = storage_of(value)
        if storage.op is not Ops.PARAM and storage not in arrays:
            raise PipelineError(f"output {original.op.name}{original.shape} is not a view of a buffer: its "
                                f"value is seen through {storage.op.name}")
        data = arrays[self.inputs[storage.arg.slot]] if storage.op is Ops.PARAM else arrays[storage]
        if value.op in VIEW_OPS:  # device-major storage of an n-tuple device reads back in logical order
            data = _read_view(value, data)
        else:
            data = data[:math.prod(original.shape)]
        out = np.array(data, copy=True)
        if original.dtype.scalar is dtypes.bfloat16:
            out = (out.astype(np.uint32) << np.uint32(16)).view(np.float32)
        return out.reshape(original.shape)



def _view_start(value: UOp) -> int:
    """The element a kernel argument's view of its buffer starts at: a one-dimensional SHRINK of a
    buffer (``nnef.kernel_passes.offset_views``) from its offset; 0 for anything else."""
    if value.op is not Ops.SHRINK or len(value.shape) != 1:
        return 0
    source = value.src[0]
    if source.op is Ops.AFTER:
        source = source.src[0]
    if source.op is not Ops.BUFFER:
        return 0
    offsets, _ = value.marg
    return int(offsets[0])


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


def compiled_graph(program: Any) -> UOp | None:
    """The tensor graph ``program`` was compiled from: the input of the first pass of its trace that
    has one (Callify's: a Tensor program's outputs).  None for a program compiled from an NNEF
    graph, whose source is its operator graph (its first input is the run of lowered kernels that
    Callify makes one FUNCTION), and for a program without a traced input."""
    if hasattr(program, "nnef_inputs") or hasattr(program, "nnef_steps"):
        return None
    return next((stage.input for stage in program.trace.passes if stage.input is not None), None)


__all__ = ["BoundProgram", "Program", "compile", "compile_kernels", "compiled_graph"]
