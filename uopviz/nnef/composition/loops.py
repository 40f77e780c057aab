"""Loops of a composition: unrolled loops and loops run on the host as a node with sub-graphs (§2.10).

The :class:`LoopBuilder` is a part of the :class:`~uopviz.nnef.composition.composer.Composer`: it
composes a loop's body through the composer that owns it (a :class:`ComposesValues`: a body holds
any statement), adds the tensors and operations it makes to the
:class:`~uopviz.nnef.composition.builder.GraphBuilder` it is given, and evaluates declared shapes
with the :class:`~uopviz.nnef.composition.shapes.ShapeBinder`. See
:mod:`uopviz.nnef.composition.composer` for the order of composition.
"""

from __future__ import annotations

import math
from collections import ChainMap
from collections.abc import Callable
from typing import Any

from uopviz.nnef.composition.builder import GraphBuilder
from uopviz.nnef.composition.shapes import ShapeBinder
from uopviz.nnef.composition.stdlib import ModuleSet
from uopviz.nnef.composition.support import (
    CONCRETE_TYPES,
    MAX_UNROLLED_ITERATIONS,
    RESULT_DEFINITION,
    ComposesValues,
    DefinitionInfo,
    Frame,
    Instance,
    evaluable,
    import_extents,
    imported_keys,
    names_of,
)
from uopviz.nnef.errors import NNEFError
from uopviz.nnef.evaluation.values import DynamicExtent, RunTimePack, format_value
from uopviz.nnef.graph import (
    Graph,
    LoopOperation,
    TensorInfo,
    numpy_dtype_of,
)
from uopviz.nnef.syntax import ast


class LoopBuilder:
    """Composing loops: unrolled when the count is known at compose time, else one
    :class:`~uopviz.nnef.graph.LoopOperation` with sub-graphs."""

    def __init__(
        self, builder: GraphBuilder, shapes: ShapeBinder, modules: ModuleSet, composer: ComposesValues
    ) -> None:
        self.builder = builder
        self.shapes = shapes
        self.modules = modules  # the sub-graphs of loop nodes know the model's modules, as the graph
        self.composer = composer

    def loop(self, loop: ast.Loop, frame: Frame, names: list[str | None], declared: list[int | None]) -> list:
        """The values of a loop statement: its carried values, then its scan outputs (packs)."""
        if loop.condition is not None:
            if loop.unroll:
                raise NNEFError.at(
                    loop.pos,
                    "a loop with a condition cannot be unrolled: its trip count is decided at run time",
                )
            return self._host_loop(loop, frame, names, declared)
        evaluator = frame.evaluator()
        scans = []
        for scan in loop.scans:
            pack = evaluator(scan.pack)
            if not isinstance(pack, list):
                raise NNEFError.at(scan.pos, f"the scanned value of '{scan.name}' must be a pack of tensors")
            scans.append((scan.name, pack))
        lengths = {len(pack) for _, pack in scans}
        if len(lengths) > 1:
            raise NNEFError.at(loop.pos, f"scanned packs have different lengths {sorted(lengths)}")
        count = evaluator(loop.count) if loop.count is not None else None
        dynamic = None
        if isinstance(count, TensorInfo):  # a run-time count: unrolled to the packs' length, masked
            if count.dtype != "int" or math.prod(count.upper_shape) != 1:
                raise NNEFError.at(loop.count.pos, f"a loop count must be a single int, got '{count.name}'")
            if not scans:  # nothing bounds it at compile time: a loop node, run on the host
                if loop.unroll:
                    raise NNEFError.at(
                        loop.count.pos,
                        f"the loop count '{count.name}' is decided at run time; 'unroll' needs a "
                        f"compile-time count",
                    )
                return self._host_loop(loop, frame, names, declared)
            dynamic, count = count, None
        if count is None:
            if not scans:
                raise NNEFError.at(loop.pos, "a loop needs a 'for' clause or an iteration count")
            count = lengths.pop()
        if scans and count > len(scans[0][1]):
            raise NNEFError.at(
                loop.pos, f"the loop count {count} exceeds the scanned packs' length {len(scans[0][1])}"
            )
        if isinstance(count, int) and count > MAX_UNROLLED_ITERATIONS:
            raise NNEFError.at(
                loop.pos,
                f"a loop of {count} iterations known at compile time is unrolled, one copy of its body each; "
                f"at most {MAX_UNROLLED_ITERATIONS} (give the count as an int tensor to run it as a loop)",
            )
        carries = []
        for carry in loop.carries:
            initial = evaluator(carry.initial)
            if not isinstance(initial, TensorInfo):
                initial = self._carry_constant(carry, initial, frame)
            carries.append(initial)
        base = next((name for name in names if name), "loop")
        scan_outputs: list[list] = []
        for step in range(count):
            local: dict[str, Any] = {
                carry.name: value for carry, value in zip(loop.carries, carries, strict=True)
            }
            local.update({name: pack[step] for name, pack in scans})
            if loop.index is not None:
                local[loop.index] = self.builder.constant_tensor(
                    step, "int", (), f"{frame.scope}{base}.{step}.{loop.index}", loop.pos
                )
            body_frame = Frame(
                frame.module_name,
                ChainMap(local, frame.symbols),
                frame.types,
                f"{frame.scope}{base}.{step}.",
                frame.declared,
                frame.scopes,
            )
            outputs = self.composer.compose_callable(loop.body, body_frame, [None] * 8, loop.body.pos)
            if len(outputs) < len(carries):
                raise NNEFError.at(
                    loop.body.pos,
                    f"the loop body yields {len(outputs)} values but {len(carries)} are carried",
                )
            updated = outputs[: len(carries)]
            if dynamic is not None:  # past the run-time count the carried values stay as they were
                scope = f"{frame.scope}{base}.{step}."
                step_tensor = self.builder.constant_tensor(step, "int", (), f"{scope}step", loop.pos)
                running = self.composer.call(
                    "math.lt", [step_tensor, dynamic], frame, scope, f"{scope}running", loop.pos
                )
                updated = [
                    self.composer.select(running, new, old, frame, f"{scope}carry{index}", loop.pos)
                    for index, (new, old) in enumerate(zip(updated, carries, strict=True))
                ]
            carries = updated
            for index, value in enumerate(outputs[len(carries) :]):
                if len(scan_outputs) <= index:
                    scan_outputs.append([])
                scan_outputs[index].append(value)
        if dynamic is not None and scan_outputs:
            length = self._trip_count(dynamic, len(scans[0][1]), frame, f"{frame.scope}{base}.", loop.pos)
            scan_outputs = [RunTimePack(pack, length) for pack in scan_outputs]
        return [*carries, *scan_outputs]

    def _trip_count(
        self, count: TensorInfo, bound: int, frame: Frame, scope: str, position: ast.Position
    ) -> DynamicExtent:
        """The run-time length of the scan outputs of a loop unrolled to ``bound`` steps whose count
        is the tensor ``count``: the count clamped to [0, bound], computed by the graph into a tensor
        that is the extent's counter (kernels read it and stop there; the runner cuts outputs)."""
        trips = self.composer.call("math.clamp", [count, 0, bound], frame, scope, "trips", position)
        self.builder.trip_counters[trips.name] = trips.name
        return DynamicExtent(trips.name, bound)

    # -- loops run on the host: a node with sub-graphs ----------------------------------------------------

    def _host_loop(
        self, loop: ast.Loop, frame: Frame, names: list[str | None], declared_lengths: list[int | None]
    ) -> list:
        """A loop whose trip count is decided at run time: one :class:`LoopOperation` whose body and
        condition are composed as graphs of their own (their inputs: carried values, scan items,
        the iteration index).

        Its scan outputs are packs, whose lengths are known at compile time: the number of scanned
        items or a compile-time count bounds them, else the length the left side declares for them
        (``ys..(8)``, as §2.10 asks of every packed result) is their upper bound, checked at run
        time (§2.6.1: upper bounds prescribe run-time checks)."""
        evaluator = frame.evaluator()
        base = next((name for name in names if name), "loop")
        label = self.builder.unique_label(frame.scope + base)
        carried = []
        for carry in loop.carries:
            initial = evaluator(carry.initial)
            if not isinstance(initial, TensorInfo):
                initial = self._carry_constant(carry, initial, frame)
            carried.append(_loop_tensor(initial, f"the carried value '{carry.name}'", carry.pos))
        scans = []
        for scan in loop.scans:
            pack = evaluator(scan.pack)
            if not isinstance(pack, list) or not pack or not all(isinstance(t, TensorInfo) for t in pack):
                raise NNEFError.at(scan.pos, f"the scanned value of '{scan.name}' must be a pack of tensors")
            first = _loop_tensor(pack[0], f"the scanned pack '{scan.name}'", scan.pos)
            if any(t.dtype != first.dtype or t.shape != first.shape for t in pack):
                raise NNEFError.at(
                    scan.pos,
                    f"the tensors scanned by '{scan.name}' must share one type and shape in a "
                    f"loop decided at run time",
                )
            scans.append((scan.name, pack))
        scan_lengths = {len(pack) for _, pack in scans}
        if len(scan_lengths) > 1:
            raise NNEFError.at(loop.pos, f"scanned packs have different lengths {sorted(scan_lengths)}")
        count = evaluator(loop.count) if loop.count is not None else None
        if isinstance(count, TensorInfo):
            if count.dtype != "int" or math.prod(count.upper_shape) != 1 or not count.is_static:
                raise NNEFError.at(
                    loop.count.pos, f"a loop count must be a single int, got the tensor '{count.name}'"
                )
        elif count is not None and (isinstance(count, bool) or not isinstance(count, int)):
            raise NNEFError.at(loop.count.pos, f"a loop count must be an int, got {format_value(count)}")
        bound = min([*scan_lengths, *([count] if isinstance(count, int) else [])], default=None)
        body, outputs, condition, formals, owned, varying = self._loop_graphs(
            loop, label, frame, carried, scans
        )
        scan_outputs = outputs[len(carried) :]
        declared = {
            length
            for length in declared_lengths[len(carried) : len(carried) + len(scan_outputs)]
            if length is not None
        }
        if len(declared) > 1:
            raise NNEFError.at(
                loop.pos,
                f"the scan outputs of a loop have one length (one item per iteration); the left side "
                f"declares {sorted(declared)}",
            )
        scan_limit = None
        if scan_outputs and bound is None:
            if not declared:
                raise NNEFError.at(
                    loop.pos,
                    "a loop that stops on a condition yields scan outputs only with a bound on its "
                    "iterations, which gives the length of their packs: declare that length on the left "
                    "side (ys..(8), its upper bound, checked at run time), or add a 'for' clause or a "
                    "compile-time count",
                )
            bound = scan_limit = declared.pop()
        for value in scan_outputs:
            _loop_tensor(value, "a scan output", loop.body.pos)
        captures = list(dict.fromkeys([*body.captures, *(condition.captures if condition else [])]))
        counted: dict[Any, str] = {}  # run-time extents of the results, counted by the run of the loop
        extent_outputs: dict[str, tuple] = {}  # counter -> where the runner finds its value

        def result_shape(shape: tuple, name: str, local: Callable[[int, Any], bool], where: tuple) -> tuple:
            out = []
            for axis, extent in enumerate(shape):
                if isinstance(extent, DynamicExtent) and local(axis, extent):
                    key, counter = f"{name}#{axis}", f"{name}#extent{axis}"
                    counted[key] = counter
                    extent_outputs[counter] = (*where, axis)
                    extent = DynamicExtent(key, extent.bound)
                out.append(extent)
            return tuple(out)

        imported = imported_keys(
            [*body.extent_inputs.values(), *(condition.extent_inputs.values() if condition else [])]
        )
        results: list = []
        for i, (carry, (_, _, shape)) in enumerate(zip(carried, formals, strict=False)):
            name = f"{label}.carry{i}"
            shape = result_shape(shape, name, lambda axis, _, i=i: (i, axis) in varying, ("carry", i))
            results.append(
                self.builder.new_tensor(
                    self.builder.unique_name(name), carry.dtype, shape, "intermediate", loop.pos
                )
            )
        for index, value in enumerate(scan_outputs):
            items = []
            for item in range(bound):
                name = f"{label}.scan{index}[{item}]"
                shape = result_shape(
                    value.shape, name, lambda _, e: not evaluable(e.key, imported), ("scan", index, item)
                )
                items.append(
                    self.builder.new_tensor(
                        self.builder.unique_name(name), value.dtype, shape, "intermediate", loop.pos
                    )
                )
            results.append(items)
        kind = "repeat" if condition is None else "while" if loop.pretest else "do_while"
        op = LoopOperation(
            type=f"control.{kind}",
            attribs={
                "pretest": loop.pretest,
                "count": count.name if isinstance(count, TensorInfo) else count,
                "bound": bound,
                "body": f"{len(body.operations)} operations",
                **({"condition": f"{len(condition.operations)} operations"} if condition else {}),
            },
            inputs=(
                [t.name for t in carried],
                [[t.name for t in pack] for _, pack in scans],
                count.name if isinstance(count, TensorInfo) else None,
                captures,
            ),
            outputs=tuple(names_of(value) for value in results),
            label=label,
            definition=ast.Definition(f"{kind} loop", pos=loop.pos),
            position=loop.pos,
            scopes=frame.scopes,
            body=body,
            condition=condition,
            pretest=loop.pretest,
            count=count.name if isinstance(count, TensorInfo) else count,
            carried=tuple(t.name for t in carried),
            scans=tuple(tuple(t.name for t in pack) for _, pack in scans),
            captures=tuple(captures),
            scan_length=bound if scan_outputs else None,
            scan_limit=scan_limit,
            counted=counted,
            extent_outputs=extent_outputs,
            statement=ast.Component(
                tuple(ast.Result(name, pos=loop.pos) for name in names if name is not None)
                or (ast.Result(base, pos=loop.pos),),
                loop,
                pos=loop.pos,
            ),
        )
        for value in results:
            for tensor in value if isinstance(value, list) else [value]:
                tensor.producer = op
        self.builder.operations.append(op)
        self.builder.subgraph_tensors |= owned
        return results

    def _loop_graphs(
        self, loop: ast.Loop, label: str, frame: Frame, carried: list[TensorInfo], scans: list
    ) -> tuple:
        """The body and condition of a loop node, composed with the carried values, scan items and
        iteration index as inputs (``formals``).

        A carried value keeps its type and rank; an extent may change from one iteration to the
        next only within the initial value's extent (or bound): the body may compress what it
        carries. Such an extent is *varying*: the body is composed again with a run-time extent of
        its own there (``loop.x#0``), whose actual value the runner passes on every iteration.
        Returns (body, its outputs, condition, formals, owned tensor names, varying (carry, axis)).
        """
        snapshot = self.builder.snapshot()
        varying: dict[tuple[int, int], int] = {}
        for attempt in range(2):
            formals = []
            for i, (carry, initial) in enumerate(zip(loop.carries, carried, strict=True)):
                shape = tuple(
                    DynamicExtent(f"{label}.{carry.name}#{axis}", varying[(i, axis)])
                    if (i, axis) in varying
                    else extent
                    for axis, extent in enumerate(initial.shape)
                )
                formals.append((carry.name, initial.dtype, shape))
            formals += [(name, pack[0].dtype, pack[0].shape) for name, pack in scans]
            if loop.index is not None:
                formals.append((loop.index, "int", ()))
            owned: set[str] = set()
            body, outputs = self._subgraph(f"{label}.body", loop.body, frame, formals, owned)
            if len(outputs) < len(carried):
                raise NNEFError.at(
                    loop.body.pos,
                    f"the loop body yields {len(outputs)} values but {len(carried)} are carried",
                )
            found = _varying_extents(loop, formals, outputs)
            if not set(found) - set(varying):
                break
            if attempt == 1:  # cannot happen: a varying extent stays varying
                raise NNEFError.at(loop.body.pos, "the extents of the carried values do not settle")
            varying = found
            self.builder.roll_back(snapshot)  # compose again, with the varying extents
        condition = None
        if loop.condition is not None:
            condition, (test, *_) = self._subgraph(
                f"{label}.condition", loop.condition, frame, formals, owned, minimum=1
            )
            if test.dtype != "bool" or not test.is_static or math.prod(test.shape) != 1:
                raise NNEFError.at(
                    loop.condition.pos,
                    f"a loop condition must be a single bool, got the {test.dtype} tensor '{test.name}' "
                    f"of shape {format_value(list(test.shape))}",
                )
            condition.outputs = condition.outputs[:1]
        fresh = {
            extent.key: ("carry", i, axis)
            for i, (_, _, shape) in enumerate(formals[: len(carried)])
            for axis, extent in enumerate(shape)
            if (i, axis) in varying
        }
        for graph in (body, condition):
            if graph is not None:
                import_extents(graph, fresh)
        return body, outputs, condition, formals, owned, varying

    def _subgraph(
        self,
        name: str,
        value: ast.Callable,
        frame: Frame,
        formals: list[tuple[str, str, tuple]],
        owned: set[str],
        minimum: int = 0,
    ) -> tuple[Graph, list[TensorInfo]]:
        """``value`` composed as a graph of its own: its inputs are new tensors for ``formals``
        (name, type, shape); tensors of the enclosing graph it reads become its ``captures``."""
        tensors = self.builder.tensors
        before = set(tensors)
        with self.builder.apart() as (operations, composites):
            local: dict[str, Any] = {}
            inputs = []
            for formal, dtype, shape in formals:
                tensor = self.builder.new_tensor(
                    self.builder.unique_name(f"{name}.{formal}"), dtype, shape, "input", value.pos
                )
                local[formal] = tensor
                inputs.append(tensor.name)
            inner = Frame(
                frame.module_name,
                ChainMap(local, frame.symbols),
                frame.types,
                f"{name}.",
                frame.declared,
                (*frame.scopes, name),
            )
            values = self.composer.compose_callable(value, inner, [None] * 8, value.pos)
        if len(values) < minimum:
            raise NNEFError.at(value.pos, "the loop condition yields no value")
        outputs = []
        for item in values:
            if not isinstance(item, TensorInfo):
                raise NNEFError.at(
                    value.pos,
                    f"a loop body or condition must yield tensors, got {format_value(names_of(item))}",
                )
            outputs.append(item)
        created = [n for n in tensors if n not in before and n not in self.builder.subgraph_tensors]
        own = {n: tensors[n] for n in created}
        read = [n for op in operations for n in op.input_names()] + [t.name for t in outputs]
        captures = [n for n in dict.fromkeys(read) if n not in own]
        for captured in captures:
            _loop_tensor(tensors[captured], f"the tensor '{captured}' read inside the loop", value.pos)
        owned |= set(own)
        graph = Graph(
            name=name,
            inputs=inputs,
            outputs=[t.name for t in outputs],
            tensors={**own, **{n: tensors[n] for n in captures}},
            operations=operations,
            composites=composites,
            modules=dict(self.modules.modules),
            captures=captures,
        )
        return graph, outputs

    def _carry_constant(self, carry: ast.Carry, value: Any, frame: Frame) -> TensorInfo:
        if carry.type is None or carry.type.shape is None:
            return self.composer.as_tensor_value(value, frame, carry.name, carry.pos)
        instance = Instance(
            DefinitionInfo.of(RESULT_DEFINITION, frame.module_name),
            carry.pos,
            frame.scope,
            symbols=dict(frame.symbols),
            types=dict(frame.types),
        )
        shape = self.shapes.evaluate_shape(instance, carry.type, carry.name, 0, bind_dynamic=False)
        element = (
            carry.type.name if carry.type.name in CONCRETE_TYPES else frame.types.get(carry.type.name, "real")
        )
        return self.builder.constant_tensor(
            value, element, tuple(shape), f"{frame.scope}{carry.name}", carry.pos
        )


# ------------------------------------------------------------------------------------------------
# checks and computations that need no composer state (module functions, not methods)


def _varying_extents(loop: ast.Loop, formals: list, outputs: list[TensorInfo]) -> dict[tuple[int, int], int]:
    """The (carry, axis) whose extent the body changes to one decided at run time, with the
    bound the carried value keeps there; any other change of type or shape is an error."""
    found: dict[tuple[int, int], int] = {}
    for i, (carry, (_, dtype, shape), updated) in enumerate(
        zip(loop.carries, formals, outputs, strict=False)
    ):
        problem = updated.dtype != dtype or len(updated.shape) != len(shape)
        for axis, (before, after) in enumerate(zip(shape, updated.shape, strict=False)):
            if problem or before == after:
                continue
            limit = before if isinstance(before, int) else before.bound
            reach = after.bound if isinstance(after, DynamicExtent) else None
            if limit is None or reach is None or reach > limit:
                problem = True  # only an extent decided at run time may vary, within the bound
            else:
                found[(i, axis)] = limit
        if problem:
            raise NNEFError.at(
                loop.body.pos,
                f"the loop body updates '{carry.name}' ({dtype}{format_value(list(shape))}) with a "
                f"{updated.dtype}{format_value(list(updated.shape))} tensor; a carried value keeps its "
                f"type and shape (an extent may change from one iteration to the next only within the "
                f"initial value's extent or upper bound)",
            )
    return found


def _loop_tensor(value: Any, what: str, position: ast.Position) -> TensorInfo:
    """``value`` as a tensor a loop decided at run time can carry: numeric type, and an upper
    bound for every extent decided at run time (the runner passes their actual values)."""
    if not isinstance(value, TensorInfo):
        raise NNEFError.at(position, f"{what} must be a tensor, got {format_value(value)}")
    for extent in value.shape:
        if isinstance(extent, DynamicExtent) and extent.bound is None:
            raise NNEFError.at(
                position,
                f"{what} ('{value.name}', shape {format_value(list(value.shape))}) has a run-time extent "
                f"without an upper bound; a loop decided at run time needs one for its buffers",
            )
    numpy_dtype_of(value.dtype)
    return value
