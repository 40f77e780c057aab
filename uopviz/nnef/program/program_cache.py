"""A whole-program disk cache for NNEF graphs: a warm ``g.compile()`` skips the front end as well.

The persistent cache of :mod:`uopviz.backends.cache` spares the C compiler and LLVM; the Python
front end (lowering, the kernel passes, Optimize ... Render) still took seconds per model
(DenseNet-121: ~11 CPU-s).  This cache keeps what running a compiled graph needs, keyed by what
determines it:

- the graph's content (:func:`graph_fingerprint`): its tensors' names, kinds, dtypes and shapes,
  its operations (type, label, attributes, bound types, tensors, the text of their definitions),
  the load-time rewrites, and the *values* of constants (the lowering reads them: a constant whose
  items are all equal becomes a literal) but not of variables (kernels read those from buffers);
  where the graph was read from (a temporary folder) is left out;
- the backend, the CPU target (:attr:`CPUTarget.key`), ``opts``, ``build`` and every ``UOPVIZ_``
  environment variable but the cache's own folder;
- uopviz itself: a hash of its sources (``*.py``, ``*.sknd``), so any change to the compiler misses.

The value (:class:`CachedState`, pickled to ``$UOPVIZ_CACHE/nnef-programs/<key>.pickle``, written
to a temporary file and renamed into place) holds the Program's kernels (ASTs, opts, LINEAR
bodies, sources), the buffers bound to them, the memory plan, the NNEF input/output names and the
blocked weight layouts the program reads; each compiled kernel is stored as its source and name and
loaded again through the backend (a hit of the compiled-object cache).  An entry that cannot be
read (corrupt, written by another format, naming a class that moved) is ignored and rewritten.

On a hit, ``g.compile()`` returns a :class:`CachedProgram`: it runs as the program it was stored
from.  Its lowering trace (``program.trace``, for the player) and the lowered NNEF kernels
(``program.nnef_kernels``) are made on first use, by lowering the graph again under tracing.

Graphs with loop nodes (a :class:`~uopviz.nnef.program.compile.GraphProgram`) or with extents
decided at run time (their lowering registers counters on the graph) are not cached, nor is a
compile inside an open trace (the caller records it).
``UOPVIZ_PROGRAM_CACHE=0`` turns the cache off.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from uopviz.backends.cache import cache_dir, package_digest, plain_data, replace_atomically
from uopviz.core.rewrite_trace import is_tracing
from uopviz.core.uop_pickle import dumps_sharing_uops, loads_sharing_uops
from uopviz.engine.program import Program
from uopviz.passes import parallel
from uopviz.passes.extent_sharing import ExtentBoundKernel
from uopviz.passes.render import backend_named, compile_source
from uopviz.passes.schedule import ScheduleItem

if TYPE_CHECKING:
    from uopviz.nnef.model.graph import ComposedGraph

__all__ = [
    "CachedProgram",
    "CachedState",
    "graph_fingerprint",
    "load_program",
    "program_key",
    "store_program",
]

#: the folder of the cache below ``cache_dir()``
NAMESPACE = "nnef-programs"
#: bumped when :class:`CachedState` changes shape (older entries then fail to load and are rebuilt)
FORMAT = 4
#: the environment variable that turns the cache off (``0``)
SWITCH = "UOPVIZ_PROGRAM_CACHE"
#: environment variables that do not change what compiles (where the caches live)
_NEUTRAL_VARIABLES = frozenset({"UOPVIZ_CACHE", SWITCH, parallel.SWITCH})  # no effect on the program


def enabled() -> bool:
    """Whether the whole-program cache is in use (``UOPVIZ_PROGRAM_CACHE`` is not ``0``)."""
    return os.environ.get(SWITCH, "1").strip() not in ("0", "false", "no", "off")


def _tensor_description(info: Any, baked: set[str]) -> str:
    """One tensor's part of the fingerprint: its values too when the lowering may read them."""
    text = f"{info.name}|{info.kind}|{info.dtype}|{info.shape!r}|{info.quantization!r}"
    data = info.data
    if data is not None and (info.kind == "constant" or info.name in baked):
        array = np.ascontiguousarray(data)
        text += f"|{array.dtype.str}{array.shape}|{hashlib.sha256(array.tobytes()).hexdigest()}"
    elif data is not None:
        text += f"|{np.asarray(data).dtype.str}{np.shape(data)}"
    return text


def graph_fingerprint(graph: ComposedGraph) -> str:
    """A hex sha256 of everything in ``graph`` that its compiled program depends on (see the
    module's docstring); never the file it was read from."""
    from uopviz.nnef.syntax.printer import print_definition

    digest = hashlib.sha256()

    def add(text: str) -> None:
        data = text.encode()
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)

    add(f"{graph.name}|{graph.inputs!r}|{graph.outputs!r}|{graph.updates!r}|{graph.packs!r}")
    add(f"{sorted(map(repr, graph.counts.items()))!r}|{sorted(map(repr, graph.extent_inputs.items()))!r}")
    add(f"{graph.captures!r}")  # not graph.layouts: compiling fills them in (one per blocked filter)
    baked = {name for step in graph.canonical for name in step.sources}
    for step in graph.canonical:
        add(f"{step.rule}|{step.label}|{step.description}|{step.sources!r}")
    for info in graph.tensors.values():
        add(_tensor_description(info, baked))
    definitions: dict[int, str] = {}
    for op in graph.operations:
        text = definitions.get(id(op.definition))
        if text is None:
            text = definitions[id(op.definition)] = print_definition(op.definition)
        add(f"{type(op).__name__}|{op.type}|{op.label}|{op.attribs!r}|{op.inputs!r}|{op.outputs!r}")
        add(f"{op.dtypes!r}|{op.scopes!r}|{op.constants!r}|{text}")
    return digest.hexdigest()


def program_key(graph: ComposedGraph, backend: str, opts: Any, build: bool) -> str | None:
    """The cache key of ``graph`` compiled on ``backend`` with ``opts``; None when it is not cached
    (the cache is off, a trace is open, the graph has loop nodes or run-time extents, or ``opts``
    is not plain data)."""
    from uopviz.backends.target import cpu_target
    from uopviz.nnef.model.graph import LoopOperation
    from uopviz.passes.optops.opts import Opt

    # inside an open trace the caller records this lowering (a loop node's body and condition
    # compile into the graph's trace): it must run
    if not enabled() or is_tracing() or any(isinstance(op, LoopOperation) for op in graph.operations):
        return None
    # extents decided at run time: the lowering registers their counters on the graph (graph.counts),
    # which the runner reads; such graphs lower every time
    if graph.counts or graph.extent_inputs or not all(info.is_static for info in graph.tensors.values()):
        return None
    if not plain_data(opts, (Opt,)):  # tuning records and other objects are not cached by
        return None
    opts_text = repr(opts)
    environment = sorted(
        (name, value) for name, value in os.environ.items()
        if name.startswith("UOPVIZ_") and name not in _NEUTRAL_VARIABLES
    )  # fmt: skip
    digest = hashlib.sha256()
    for part in (f"format {FORMAT}", package_digest(), graph_fingerprint(graph), backend, opts_text,
                 repr(build), cpu_target().key, repr(environment)):  # fmt: skip
        data = part.encode()
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


@dataclass(frozen=True)
class CompiledReference:
    """A compiled kernel as the cache keeps it: what the backend builds it from (a hit of the
    compiled-object cache) and, for a member of an extent-sharing group, its generators."""

    backend: str
    source: str
    name: str
    generators: tuple[int, ...] | None = None


@dataclass
class CachedState:
    """What running a compiled NNEF graph needs, as pickled: the Program's fields but its trace,
    its items with their compiled kernels as :class:`CompiledReference`, the NNEF names and the
    weight layouts the program reads."""

    format: int
    program: dict[str, Any]
    items: list[tuple[int, Any, list, Any, str, CompiledReference | None, Any]]
    nnef_inputs: list[str]
    nnef_outputs: list[str]
    layouts: dict[str, Any]


def _reference(compiled: Any) -> CompiledReference | None:
    if compiled is None:
        return None
    if isinstance(compiled, ExtentBoundKernel):
        shared = compiled.shared
        return CompiledReference(shared.backend, shared.source, shared.name, tuple(compiled.generators))
    return CompiledReference(compiled.backend, compiled.source, compiled.name)


_PROGRAM_FIELDS = ("outputs", "backend", "graph", "inputs", "memory_plan", "build", "opts", "optimized",
                   "share_extents")  # fmt: skip


def _state_of(program: Program, graph: ComposedGraph) -> CachedState:
    items = [
        (item.index, item.body, list(item.arguments), item.kernel, item.source, _reference(item.compiled),
         item.shard)
        for item in program.items
    ]  # fmt: skip
    layouts = {name: graph.layouts[name] for name in program.nnef_inputs if name in graph.layouts}
    fields = {name: getattr(program, name) for name in _PROGRAM_FIELDS}
    return CachedState(FORMAT, fields, items, list(program.nnef_inputs), list(program.nnef_outputs), layouts)


def _encode(state: CachedState) -> bytes:
    """The state with its UOps in one table, each once (:func:`dumps_sharing_uops`): a UOp shared by
    many kernels, buffers and the graph is rebuilt once, not once per root."""
    return pickle.dumps((FORMAT, dumps_sharing_uops(state)), protocol=pickle.HIGHEST_PROTOCOL)


def _decode(data: bytes) -> CachedState | None:
    entry_format, payload = pickle.loads(data)
    if entry_format != FORMAT:
        return None
    state = loads_sharing_uops(payload)
    return state if isinstance(state, CachedState) and state.format == FORMAT else None


def _entry_path(key: str) -> Path:
    return cache_dir() / NAMESPACE / f"{key}.pickle"


def store_program(program: Any, graph: ComposedGraph, key: str) -> None:
    """Keep ``program`` (a Program compiled from ``graph``) under ``key``, written atomically; a
    cache folder that cannot be written only costs the next compile its time."""
    if type(program) is not Program or not hasattr(program, "nnef_inputs"):
        return
    path = _entry_path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = _encode(_state_of(program, graph))
        replace_atomically(path, lambda temporary: temporary.write_bytes(data))
    except OSError:
        return


def _read_state(key: str) -> CachedState | None:
    """The entry under ``key``, or None when there is none or it cannot be read back whole."""
    try:
        data = _entry_path(key).read_bytes()
    except OSError:
        return None
    try:
        return _decode(data)
    except Exception:  # noqa: BLE001 - any unreadable entry (truncated, stale classes) is a miss
        return None


def load_program(graph: ComposedGraph, key: str, relower: Callable[[], Any]) -> CachedProgram | None:
    """The program stored under ``key`` for ``graph``, its kernels loaded through the backend; None
    on a miss (or an entry that no longer loads).  ``relower()`` compiles the graph again without
    the cache: the program's trace and lowered NNEF kernels come from it when first read."""
    state = _read_state(key)
    if state is None:
        return None
    fields = state.program
    if fields["build"]:
        backend_named(fields["backend"]).require()
    loaded: dict[tuple[str, str, str], Any] = {}

    def compiled_kernel(reference: CompiledReference | None) -> Any:
        if reference is None:
            return None
        where = (reference.backend, reference.source, reference.name)
        shared = loaded.get(where)
        if shared is None:
            shared = loaded[where] = compile_source(reference.source, reference.name, reference.backend)
        if reference.generators is None:
            return shared
        return ExtentBoundKernel.bind(shared, reference.generators)

    items = [
        ScheduleItem(index, body, arguments, kernel, source, compiled_kernel(reference), shard)
        for index, body, arguments, kernel, source, reference, shard in state.items
    ]  # fmt: skip
    program = CachedProgram(**fields, items=items)
    program.nnef_inputs = state.nnef_inputs
    program.nnef_outputs = state.nnef_outputs
    program.nnef_loop_opts = {}
    program.nnef_steps = [("kernels", program)]
    program._relower = relower
    program.retrace = lambda: program._lowered_again().trace
    for name, layout in state.layouts.items():
        graph.layouts.setdefault(name, layout)
    return program


class CachedProgram(Program):
    """A Program read from the whole-program cache: it runs as the one it was stored from; its
    lowering ``trace`` and ``nnef_kernels`` are made when first read, by lowering the graph again
    under tracing (the player then shows every step, as for a program compiled afresh)."""

    _relower: Callable[[], Any] | None = None
    _relowered: Any = None

    def _lowered_again(self) -> Any:
        if self._relowered is None:
            if self._relower is None:
                raise RuntimeError("a cached program without the graph it was compiled from has no trace")
            self._relowered = self._relower()
        return self._relowered

    @property
    def nnef_kernels(self) -> list:
        """The lowered NNEF kernels after the kernel passes, in run order (made on first use)."""
        return self._lowered_again().nnef_kernels
