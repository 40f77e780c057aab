"""Running a compiled NNEF graph on the host: binding data, trimming run-time extents, loops.

Loops decided at run time (:class:`~uopviz.nnef.graph.LoopOperation`) have no kernels of their own:
their body and condition are graphs compiled separately, and the runner executes the loop on the
host (test the condition, run the body, carry the values; scan outputs stacked in iteration order).
On CPU backends the first iteration binds the body and the condition to their arrays, and where the
loop carries values of fixed shape and has no scans, the remaining iterations run in the native
loop driver (:mod:`uopviz.backends.loop_driver`), not through Python: an iteration costs its kernels.
What they read with run-time extents, they read through counters of their own that the runner
fills on every iteration (``Graph.extent_inputs``); the extents of the carried values are read back
after each iteration (a body may compress what it carries), and the results' extents that only the
run knows are written to counters of the enclosing graph (``LoopOperation.extent_outputs``).
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from uopviz.backends.aligned import aligned
from uopviz.nnef.errors import NNEFError
from uopviz.nnef.evaluation.scalar_ops import PythonScalarOps
from uopviz.nnef.evaluation.values import DynamicExtent
from uopviz.nnef.lowering.kernel_builder import NOT_A_LEAF, evaluate_tree
from uopviz.nnef.model.graph import LoopOperation
from uopviz.nnef.program.compile import GraphProgram

if TYPE_CHECKING:
    from uopviz.nnef.model.graph import ComposedGraph


def _input_array(graph: ComposedGraph, name: str, given: Mapping[str, Any]) -> np.ndarray:
    tensor = graph.tensors[name] if name in graph.tensors else None
    # a filter's blocked copy (uopviz.nnef.kernel_passes.weight_layout)
    if tensor is None and name in graph.layouts:
        from uopviz.nnef.kernel_passes.weight_layout import layout_array

        layout = graph.layouts[name]
        return layout_array(graph, layout, _input_array(graph, layout.source, given))
    if tensor is None:
        if name in graph.extent_inputs:  # a counter a loop's runner fills
            if name not in given:
                raise NNEFError(
                    f"the sub-graph {graph.name} reads the run-time extent '{name}' "
                    f"({graph.extent_inputs[name]!r}), which the loop that runs it passes; give it by name"
                )
            return np.asarray(given[name], np.int32).reshape(1)
        raise NNEFError(f"the program reads '{name}', which the graph does not define")
    if name in given:
        return _stored(aligned(_given_array(tensor, name, given[name])))
    if tensor.data is not None:
        # on a cache line once, kept (a .dat file's array starts anywhere): the kernels' vector
        # loads of a misaligned weight touch two lines each (uopviz.backends.aligned)
        tensor.data = aligned(tensor.data)
        return _stored(tensor.data)
    if 0 in tuple(tensor.upper_shape):  # no kernel writes a zero-size tensor: it holds no values to miss
        return _stored(np.zeros(0, tensor.numpy_dtype))
    kind = "input" if tensor.kind == "input" else tensor.kind
    hint = " (no .dat file was found for it; give it by name in the inputs)" if kind == "variable" else ""
    raise NNEFError.at(tensor.position, f"{kind} '{name}' has no data{hint}")


def _given_array(tensor: Any, name: str, value: Any) -> np.ndarray:
    """The array given for tensor ``name`` as its dtype, of its shape (a clear error else)."""
    array = np.asarray(value)
    expected = tensor.upper_shape
    if tuple(array.shape) != tuple(expected):
        raise NNEFError(f"'{name}' must have shape {list(expected)}, the array given has shape "
                        f"{list(array.shape)}")
    try:
        return array.astype(tensor.numpy_dtype, copy=False)
    except (TypeError, ValueError, OverflowError) as error:
        raise NNEFError(f"'{name}' is {tensor.numpy_dtype} data; the array given ({array.dtype}) cannot "
                        f"become that: {error}") from None  # fmt: skip


def _stored(array: np.ndarray) -> np.ndarray:
    """``array`` as the kernels' buffer of its tensor holds it: a zero-size tensor's buffer has one
    element that no kernel reads (kernel buffers are never empty), the others are the array itself."""
    return array if array.size else np.zeros(1, array.dtype)


def _shaped(array: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    """A tensor's buffer read back as ``shape``: a zero-size tensor drops its buffer's one element."""
    array = np.asarray(array)
    return array.reshape(-1)[:0].reshape(shape) if 0 in tuple(shape) else array.reshape(shape)


def program_inputs(graph: ComposedGraph, program: Any, given: Mapping[str, Any]) -> dict[int, np.ndarray]:
    """The arrays a Program compiled from ``graph``'s kernels reads (``program.nnef_inputs``), by
    input position: the arrays ``given`` by tensor name, else the tensors' data; a filter's blocked
    copy (:mod:`uopviz.nnef.kernel_passes.weight_layout`) made from its tensor's."""
    return {position: _input_array(graph, name, given) for position, name in enumerate(program.nnef_inputs)}


def _execute(
    graph: ComposedGraph, given: Mapping[str, Any], backend: str, opts: Any
) -> dict[str, np.ndarray]:
    """Run the compiled steps of ``graph``: every buffer they produce, by name (flat arrays); on a
    C or LLVM backend, a graph of fixed extents runs on arrays bound once (:class:`_BoundGraph`)."""
    compiled = graph.compile(backend=backend, opts=opts)
    bound = _BoundGraph.take(graph, compiled, given, backend, opts)
    if bound is not None:
        try:
            return bound.run(given)
        finally:
            bound.give_back()
    values: dict[str, np.ndarray] = {}

    def fetch(name: str) -> np.ndarray:
        found = values.get(name)
        return found if found is not None else _input_array(graph, name, given)

    def extent_of(extent: Any) -> int:
        return extent if isinstance(extent, int) else _host_extent(extent, graph, ChainMap(values, given))

    for kind, step in compiled.nnef_steps:
        if kind == "kernels":
            results = step.run({position: fetch(name) for position, name in enumerate(step.nnef_inputs)})
            values.update(zip(step.nnef_outputs, results, strict=True))
        else:
            values.update(
                _run_loop(step, graph, fetch, extent_of, backend, compiled.nnef_loop_opts[id(step)])
            )
    return values


def _relayout(
    array: np.ndarray, source: Sequence[int], target: Sequence[int], actual: Sequence[int]
) -> np.ndarray:
    """A tensor stored row-major over the upper shape ``source``, stored over ``target`` instead
    (the elements inside the actual extents kept, the rest zero)."""
    array = np.asarray(array).reshape(tuple(source))
    if tuple(source) == tuple(target):
        return array
    out = np.zeros(tuple(target), array.dtype)
    window = tuple(slice(0, extent) for extent in actual)
    out[window] = array[window]
    return out


class _BoundSubgraph:
    """A loop's body or condition compiled once and bound to its arrays: each iteration copies the
    values it is given into the program's input arrays and launches the kernels (no allocation, no
    argument checks, no look-ups).  For CPU backends, whose arrays are the kernels' memory, and
    sub-graphs of fixed extents that compile to one program.  A finished loop gives its bound forms
    back to the sub-graph (:meth:`take`, :meth:`give_back`) for its next run."""

    def __init__(self, graph: ComposedGraph, program: Any, given: Mapping[str, Any], key: tuple) -> None:
        self.graph = graph
        self.program = program
        self.key = key
        initial = {
            position: np.array(_input_array(graph, name, given), copy=True)
            for position, name in enumerate(program.nnef_inputs)
        }
        self.arrays = program._allocate(initial)
        self.inputs = {
            name: self.arrays[program.inputs[position]] for position, name in enumerate(program.nnef_inputs)
        }
        self.launches, self.native = _prepared_launches(program, self.arrays)
        values = program.output_values()
        self.outputs = [
            (values[index], program.outputs[index], graph.tensors[name].upper_shape)
            for index, name in ((program.nnef_outputs.index(name), name) for name in graph.outputs)
        ]
        self.extents = [list(graph.tensors[name].shape) for name in graph.outputs]
        #: native drivers of loops whose body this is, by id of the loop: (the bound condition it
        #: was made with, the driver or None): see _native_loop
        self.native_loops: dict[int, tuple[Any, _NativeLoop | None]] = {}

    @classmethod
    def take(
        cls, graph: ComposedGraph, given: Mapping[str, Any], backend: str, opts: Any
    ) -> _BoundSubgraph | None:
        """A bound form of ``graph`` a finished loop gave back, else a new one (a loop nested in its
        own body, or running in another thread, gets arrays of its own); None where binding does
        not apply (the per-iteration path runs)."""
        pools = graph.__dict__.setdefault("_bound", {})
        key = (backend, repr(opts))
        if key in pools and pools[key] is None:
            return None
        try:
            return pools.setdefault(key, []).pop()
        except IndexError:
            bound = cls._bind(graph, given, backend, opts, key)
            if bound is None:
                pools[key] = None
            return bound

    @classmethod
    def _bind(
        cls, graph: ComposedGraph, given: Mapping[str, Any], backend: str, opts: Any, key: tuple
    ) -> Any:
        from uopviz.passes.render import backend_named

        if not backend_named(backend).runs_on_cpu or graph.extent_inputs or graph.counts:
            return None
        if not all(graph.tensors[name].is_static for name in (*graph.inputs, *graph.outputs)):
            return None
        program = graph.compile(backend=backend, opts=opts)
        if isinstance(program, GraphProgram) or len(program.nnef_steps) != 1:
            return None
        if not all(name in program.nnef_outputs for name in graph.outputs):
            return None  # an output passed through from an input: no kernel writes it
        return cls(graph, program, given, key)

    def output_storage(self, index: int) -> np.ndarray | None:
        """The flat array whose first elements are output ``index`` as the graph stores it, or None
        when reading it takes more than a slice (a view, bfloat16 unpacking)."""
        from uopviz.core.dtype import dtypes
        from uopviz.core.ops import Ops
        from uopviz.passes.schedule import VIEW_OPS, storage_of

        value, original, shape = self.outputs[index]
        storage = storage_of(value)
        if value.op in VIEW_OPS or original.dtype.scalar is dtypes.bfloat16:
            return None
        if storage.op is Ops.PARAM:
            return self.arrays[self.program.inputs[storage.arg.slot]]
        return self.arrays.get(storage)

    def give_back(self) -> None:
        """Make this bound form available to the sub-graph's next loop."""
        pool = self.graph.__dict__.get("_bound", {}).get(self.key)
        if pool is not None:
            pool.append(self)

    def run(self, given: Mapping[str, Any]) -> list[np.ndarray]:
        """The sub-graph's outputs for ``given`` (names -> arrays), in the order of its outputs."""
        for name, array in given.items():
            target = self.inputs.get(name)
            if target is not None:
                np.copyto(target, _stored(np.asarray(array).reshape(-1)), casting="unsafe")
        _launch_all(self.launches, self.native)
        read = self.program._output
        return [_shaped(read(self.arrays, value, original), shape) for value, original, shape in self.outputs]


class _BoundGraph:
    """A graph of fixed extents compiled to one program for the C or LLVM backend, bound to its arrays once:
    each run copies the inputs into them and launches the kernels.  ``Program.run`` allocates fresh
    arrays every run, and the kernels then pay the page faults of touching them first (ResNet-50 on
    one core: 0.26 s a run against 0.15 s of kernels bound once).  Variables and constants (and
    their blocked copies) are bound as they are, without a copy: a run that gives one by name, or
    after a tensor's data was replaced, takes the ordinary path or binds again.  Runs in several
    threads at once each take a bound form of their own (:meth:`take`, :meth:`give_back`)."""

    def __init__(self, graph: ComposedGraph, program: Any, given: Mapping[str, Any], key: tuple) -> None:
        self.graph = graph
        self.program = program
        self.key = key
        initial: dict[int, np.ndarray] = {}
        self.fixed: dict[str, np.ndarray] = {}  # variables, constants, blocked copies: bound as they are
        for position, name in enumerate(program.nnef_inputs):
            if name in given:
                initial[position] = np.array(_input_array(graph, name, given), copy=True)
            else:
                initial[position] = self.fixed[name] = _input_array(graph, name, given)
        # the tensors whose data the fixed arrays are (a blocked copy's: its source's), with that
        # data: a run checks these identities, not every array again (MobileNet-v2: graph.run around
        # its kernels 0.146 -> 0.037 ms)
        self.sources = [(tensor, tensor.data) for tensor in self._fixed_tensors(graph, self.fixed)]
        self.arrays = program._allocate(initial)
        self.inputs = {
            name: self.arrays[program.inputs[position]]
            for position, name in enumerate(program.nnef_inputs)
            if name not in self.fixed
        }
        self.launches, self.native = _prepared_launches(program, self.arrays)
        values = program.output_values()
        where = {name: program.nnef_outputs.index(name) for name in graph.outputs}
        self.outputs = [(name, values[where[name]], program.outputs[where[name]]) for name in graph.outputs]

    @classmethod
    def take(
        cls, graph: ComposedGraph, program: Any, given: Mapping[str, Any], backend: str, opts: Any
    ) -> _BoundGraph | None:
        """A bound form of ``graph`` for a run on ``given``, or None where the ordinary path runs: a
        backend off the CPU, a graph with loops, run-time extents or ``@update`` variables, or a
        variable or constant given by name."""
        key = (backend, repr(opts), id(program))
        # what the program and backend decide is worked out once: a run checks its own inputs only
        # (each check on every run cost MobileNet-v2's graph.run ~0.07 ms, its caches cold after the kernels)
        bindable = graph.__dict__.setdefault("_bindable", {})
        if key not in bindable:
            bindable[key] = cls._bindable_inputs(graph, program, backend)
        inputs = bindable[key]
        if inputs is None or any(name not in inputs for name in given):
            return None  # not bindable, or a variable or constant given by name (or a name not read)
        pool = graph.__dict__.setdefault("_bound_graphs", {}).setdefault(key, [])
        while pool:
            bound = pool.pop()
            if bound.current():
                return bound
        return cls(graph, program, given, key)

    @staticmethod
    def _bindable_inputs(graph: ComposedGraph, program: Any, backend: str) -> frozenset[str] | None:
        """The graph inputs a bound form of ``program`` takes by name, or None where none binds: a
        backend off the CPU, loops, run-time extents, ``@update`` variables, an output that no
        kernel writes, a shape not static."""
        from uopviz.backends.base import TargetsCPU
        from uopviz.passes.render import backend_named

        if isinstance(program, GraphProgram) or len(getattr(program, "nnef_steps", ())) != 1:
            return None
        # C and LLVM: the arrays are the kernels' memory (an OpenCL device, even a CPU one, gets
        # copies that bound launches do not pass between kernels)
        if not isinstance(backend_named(backend), TargetsCPU):
            return None
        if graph.updates or graph.extent_inputs or graph.counts:
            return None
        if any(name not in program.nnef_outputs for name in graph.outputs):
            return None  # an output passed through from an input: no kernel writes it
        if not all(graph.tensors[name].is_static for name in (*graph.inputs, *graph.outputs)):
            return None
        # only graph inputs: a variable or constant given by name takes the ordinary path (bound
        # forms hold the graph's own)
        return frozenset(name for name in program.nnef_inputs
                         if name in graph.tensors and graph.tensors[name].kind == "input")

    @staticmethod
    def _fixed_tensors(graph: ComposedGraph, fixed: Mapping[str, np.ndarray]) -> list[Any]:
        """The tensors whose data the arrays ``fixed`` (by name) were made from."""
        names = {name if name in graph.tensors else graph.layouts[name].source: None for name in fixed}
        return [graph.tensors[name] for name in names]

    def current(self) -> bool:
        """Whether the arrays bound for variables and constants are still the graph's: each tensor
        they were made from holds the same data (an array replaced is bound again)."""
        return all(tensor.data is data for tensor, data in self.sources)

    def give_back(self) -> None:
        """Make this bound form available to the graph's next run."""
        self.graph.__dict__.setdefault("_bound_graphs", {}).setdefault(self.key, []).append(self)

    def run(self, given: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The graph's outputs for the inputs ``given`` by name (copies)."""
        for name, target in self.inputs.items():
            # straight into the bound array: an input not on a cache line was copied to one first,
            # fresh pages each run (MobileNet-v2's 600 KB image: graph.run 0.15 ms over its kernels)
            if name in given:
                array = _stored(_given_array(self.graph.tensors[name], name, given[name]))
            else:
                array = _input_array(self.graph, name, given)
            np.copyto(target, array.reshape(-1), casting="unsafe")
        _launch_all(self.launches, self.native)
        read = self.program._output
        return {name: read(self.arrays, value, original) for name, value, original in self.outputs}


def _prepared_launches(program: Any, arrays: dict) -> tuple[list, Any]:
    """The program's kernels bound to ``arrays``, and the same launches as one native call
    (:class:`~uopviz.backends.loop_driver.NativeSequence`) or None where the driver cannot call
    them (no C compiler, too many parameters)."""
    from uopviz.backends.loop_driver import NativeLoop, NativeSequence, loop_driver

    array_of = program._array_of
    launches = [
        item.compiled.prepare(*(array_of(arrays, a, item, slot) for slot, a in enumerate(item.arguments)))
        for item in program.items
    ]
    if not launches or not NativeLoop.can_call(launches) or loop_driver() is None:
        return launches, None
    return launches, NativeSequence(launches)


def _launch_all(launches: list, native: Any) -> None:
    """Run bound launches once, in order: in one native call where there is one."""
    if native is not None:
        native.run()
        return
    for launch in launches:
        launch.run()


def _run_loop(
    op: LoopOperation,
    graph: ComposedGraph,
    fetch: Callable[[str], np.ndarray],
    extent_of: Callable[[Any], int],
    backend: str,
    sub_opts: dict[str, Any],
) -> dict:
    """A loop node on the host: test the condition, run the body, carry the values (§3).

    Run-time extents: the body and condition get the actual extents of what they read in their
    counters (:attr:`Graph.extent_inputs`); after each iteration the extents of the carried values
    are read back from the body's counters, so a body that compresses what it carries hands the
    next iteration the new extent. The results' extents that only the run knows are written to
    their counters (``op.extent_outputs``)."""
    carried_formals = [op.body.tensors[name] for name in op.body.inputs[: len(op.carried)]]
    carried = [
        np.asarray(fetch(name)).reshape(formal.upper_shape)
        for name, formal in zip(op.carried, carried_formals, strict=True)
    ]
    carried_extents = [[extent_of(extent) for extent in graph.tensors[name].shape] for name in op.carried]
    scans = [[fetch(name) for name in pack] for pack in op.scans]
    captured = {name: fetch(name) for name in op.captures}
    outer_extents: dict[str, int] = {}  # counters filled from the enclosing graph (fixed for the loop)
    bounds = [len(pack) for pack in op.scans]
    if isinstance(op.count, int):
        bounds.append(op.count)
    elif isinstance(op.count, str):
        bounds.append(int(np.asarray(fetch(op.count)).reshape(-1)[0]))
    bound = min(bounds, default=None)
    indexed = len(op.body.inputs) > len(op.carried) + len(op.scans)

    def counters(sub: ComposedGraph) -> dict[str, np.ndarray]:
        out = {}
        for counter, source in sub.extent_inputs.items():
            if isinstance(source, tuple):  # ("carry", index, axis): the carried value's current extent
                value = carried_extents[source[1]][source[2]]
            else:
                if counter not in outer_extents:
                    outer_extents[counter] = extent_of(source)
                value = outer_extents[counter]
            out[counter] = np.array([value], np.int32)
        return out

    bound_programs: dict[int, _BoundSubgraph | None] = {}

    def run(sub: ComposedGraph, step: int) -> tuple[list[np.ndarray], list[list[int]]]:
        arguments = [*carried, *(pack[step] for pack in scans)]
        if indexed:
            arguments.append(np.array(step, np.int32))
        fast = bound_programs.get(id(sub))
        if fast is not None:  # the captured values are in its arrays since the first iteration
            return fast.run(dict(zip(sub.inputs, arguments, strict=True))), fast.extents
        given = {name: captured[name] for name in sub.captures}
        given.update(zip(sub.inputs, arguments, strict=True))
        given = {name: np.asarray(a).reshape(sub.tensors[name].upper_shape) for name, a in given.items()}
        given.update(counters(sub))
        opts = sub_opts["body" if sub is op.body else "condition"]
        if id(sub) not in bound_programs:
            fast = bound_programs[id(sub)] = _BoundSubgraph.take(sub, given, backend, opts)
            if fast is not None:
                return fast.run(given), fast.extents
        values = _execute(sub, given, backend, opts)
        known = ChainMap(values, given)
        arrays = [values[name] if name in values else _input_array(sub, name, given) for name in sub.outputs]
        extents = [
            [
                extent if isinstance(extent, int) else _host_extent(extent, sub, known)
                for extent in sub.tensors[name].shape
            ]
            for name in sub.outputs
        ]
        return arrays, extents

    scanned: list[list[tuple[np.ndarray, list[int]]]] = [[] for _ in op.outputs[len(op.carried) :]]
    step = 0
    native: _NativeLoop | bool | None = None
    try:
        while bound is None or step < bound:
            if op.condition is not None and (op.pretest or step > 0):
                (test,), _ = run(op.condition, step)
                if not bool(np.asarray(test).reshape(-1)[0]):
                    break
            if op.scan_limit is not None and step >= op.scan_limit:
                raise NNEFError.at(
                    op.position,
                    f"loop '{op.label}' goes on to iteration {step + 1}, but the left side declares "
                    f"{op.scan_limit} items for its scan outputs (their upper bound); declare more items or "
                    f"bound the loop with a count (do..({op.scan_limit}))",
                )
            updated, extents = run(op.body, step)
            for index, formal in enumerate(carried_formals):
                source = op.body.tensors[op.body.outputs[index]].upper_shape
                carried[index] = _relayout(updated[index], source, formal.upper_shape, extents[index])
                carried_extents[index] = extents[index]
            for outputs, value, extent in zip(
                scanned, updated[len(op.carried) :], extents[len(op.carried) :], strict=True
            ):
                outputs.append((value, extent))
            step += 1
            bound_already = all(id(g) in bound_programs for g in (op.body, op.condition) if g is not None)
            if native is None and bound_already:  # both have run once (a do-while's test after step 1)
                native = _native_loop(op, bound_programs, indexed) or False
            if native:  # the remaining iterations without returning to Python each time
                step = native.run(carried, step, bound)
                break
    finally:
        for bound_program in bound_programs.values():
            if bound_program is not None:
                bound_program.give_back()
    results: dict[str, np.ndarray] = {}
    for name, value, formal in zip(op.outputs[: len(op.carried)], carried, carried_formals, strict=True):
        results[name] = value.reshape(formal.upper_shape)
    produced = op.body.outputs[len(op.carried) :]
    for names, values, source in zip(op.outputs[len(op.carried) :], scanned, produced, strict=True):
        tensor = op.body.tensors[source]
        for item, name in enumerate(names):  # items past the last iteration are zero (and empty)
            results[name] = (
                values[item][0] if item < len(values) else np.zeros(tensor.upper_shape, tensor.numpy_dtype)
            )
    for counter, where in op.extent_outputs.items():
        if where[0] == "carry":
            value = carried_extents[where[1]][where[2]]
        else:
            _, output, item, axis = where
            value = scanned[output][item][1][axis] if item < len(scanned[output]) else 0
        results[counter] = np.array([value], np.int32)
    return results


def _needs_recompose(graph: ComposedGraph, given: dict[str, Any]) -> dict[str, tuple[int, ...]] | None:
    shapes = {}
    for name in graph.inputs:
        tensor = graph.tensors[name]
        if name in given and not tensor.is_static:
            shapes[name] = tuple(np.asarray(given[name]).shape)
    return shapes or None


def _host_extent(extent: Any, graph: ComposedGraph, values: Mapping[str, np.ndarray]) -> int:
    """The value of a run-time extent after a run (from the counters its key is built of)."""

    def leaf(key: Any) -> Any:
        counter = graph.counts.get(key)
        if counter is not None:
            return int(np.asarray(values[counter]).reshape(-1)[0])
        if isinstance(key, str):
            raise NNEFError(f"the run-time extent {extent!r} depends on a value that no kernel counts")
        return NOT_A_LEAF

    return max(0, min(int(evaluate_tree(extent.key, leaf, PythonScalarOps())), int(extent.bound)))


def run_graph(
    graph: ComposedGraph,
    inputs: dict[str, Any],
    backend: str = "python",
    opts: Any = None,
    update: bool = False,
) -> dict[str, np.ndarray]:
    """Run ``graph`` on ``inputs`` (names -> arrays; variables may be given too); outputs by name.

    Outputs with run-time extents come at their actual extents. With ``update``, the variables
    assigned in ``@update`` blocks take their new values.
    """
    unknown = [name for name in inputs if name not in graph.tensors]
    if unknown:
        raise NNEFError(f"unknown input name(s) {unknown}; the graph's inputs are {graph.inputs}")
    others = [name for name in inputs if name not in graph.inputs]  # variables given by name
    if graph.canonical and others:
        from uopviz.nnef.model.canonical import folded_sources

        folded = folded_sources(graph)
        given = [name for name in others if name in folded]
        if given:
            raise NNEFError(
                f"variable(s) {given} were computed into constants when the graph loaded "
                f"({', '.join(f'{name} -> {folded[name]}' for name in given)}, uopviz.nnef.model.canonical); "
                "they cannot be given at run time"
            )
    missing = [name for name in graph.inputs if name not in inputs]
    if missing:
        raise NNEFError(f"missing graph input(s) {missing}")
    shapes = _needs_recompose(graph, inputs)
    if shapes is not None:
        return run_graph(graph.recomposed(shapes), inputs, backend, opts, update)
    values = _execute(graph, inputs, backend, opts)
    outputs = {}
    for name in graph.outputs:
        tensor = graph.tensors[name]
        array = values[name] if name in values else _input_array(graph, name, inputs)
        array = _shaped(array, tensor.upper_shape)
        for axis, extent in enumerate(tensor.shape):
            if isinstance(extent, DynamicExtent):
                array = np.take(array, np.arange(_host_extent(extent, graph, values)), axis=axis)
        outputs[name] = array
    if update:
        for variable, tensor in graph.updates.items():
            info = graph.tensors[variable]
            info.data = np.asarray(values[tensor]).reshape(info.upper_shape).astype(info.numpy_dtype)
    return outputs


class _NativeLoop:
    """A loop whose condition and body are bound CPU programs, run by the native loop driver
    (:mod:`uopviz.backends.loop_driver`): the carried values are copied from the body's outputs
    into the body's and the condition's inputs inside the driver, not through Python."""

    def __init__(self, driver: Any, body: _BoundSubgraph, seeds: Sequence[tuple[np.ndarray, int]],
                 names: Sequence[str], shapes: Sequence[Sequence[int]]):
        self.driver = driver
        self.body = body
        self.seeds = list(seeds)  # (an input array of the body or condition, carried index)
        self.names = list(names)
        self.shapes = [tuple(shape) for shape in shapes]

    def run(self, carried: list[np.ndarray], step: int, bound: int | None) -> int:
        """Seeds the inputs with ``carried``, runs the iterations, and writes the carried values the
        last body produced back into ``carried``. Returns the step reached."""
        for target, index in self.seeds:
            np.copyto(target, carried[index].reshape(-1), casting="unsafe")
        step, _ = self.driver.run(step, bound)
        for index, name in enumerate(self.names):
            carried[index] = self.body.inputs[name].reshape(self.shapes[index]).copy()
        return step


def _native_loop(op: LoopOperation, bound_programs: Mapping[int, Any], indexed: bool) -> _NativeLoop | None:
    """The native form of ``op``'s remaining iterations, or None where it does not apply: scans,
    run-time extents, outputs that are views, a sub-graph not bound, or no C compiler."""
    from uopviz.backends.loop_driver import loop_driver

    if op.scans or len(op.outputs) != len(op.carried) or op.extent_outputs or op.scan_limit is not None:
        return None
    body = bound_programs.get(id(op.body))
    condition = bound_programs.get(id(op.condition)) if op.condition is not None else None
    if body is None or (op.condition is not None and condition is None) or loop_driver() is None:
        return None
    # made once per pair of bound sub-graphs (they return to their pools after each run, arrays and
    # all); the entry holds the condition it was made with, so its arrays outlive the driver's pointers
    found = body.native_loops.get(id(op))
    if found is None or found[0] is not condition:
        found = body.native_loops[id(op)] = (condition, _make_native_loop(op, body, condition, indexed))
    return found[1]


def _make_native_loop(op: LoopOperation, body: _BoundSubgraph, condition: _BoundSubgraph | None,
                      indexed: bool) -> _NativeLoop | None:
    from uopviz.backends.loop_driver import Copy, NativeLoop

    launches = [*body.launches, *(condition.launches if condition is not None else [])]
    if not NativeLoop.can_call(launches):
        return None
    count = len(op.carried)
    names = op.body.inputs[:count]
    copies, seeds = [], []
    for index, name in enumerate(names):
        formal = op.body.tensors[name]
        if tuple(op.body.tensors[op.body.outputs[index]].upper_shape) != tuple(formal.upper_shape):
            return None  # carried across a change of stored shape: relaid out on the host
        source = body.output_storage(index)
        if source is None or name not in body.inputs:
            return None
        for bound, sub in ((body, op.body), (condition, op.condition)):
            if bound is None:
                continue
            target = bound.inputs.get(sub.inputs[index])
            if target is None:
                continue  # the sub-graph does not read this value
            if target.dtype != source.dtype or source.size < target.size:
                return None
            copies.append(Copy(target, source))
            seeds.append((target, index))
    test = None
    if condition is not None:
        test = condition.output_storage(0)
        if test is None or test.dtype.itemsize != 1:
            return None
    step_inputs = []
    if indexed:
        for bound, sub in ((body, op.body), (condition, op.condition)):
            target = None if bound is None else bound.inputs.get(sub.inputs[-1])
            if target is not None:
                if target.dtype != np.int32:
                    return None
                step_inputs.append(target)
    driver = NativeLoop(condition.launches if condition is not None else None, test, body.launches,
                        copies, step_inputs)
    return _NativeLoop(driver, body, seeds, names, [op.body.tensors[name].upper_shape for name in names])
