"""Lowering of composed NNEF operations to UOp kernels.

Every ``@lower`` contraction (§2.12) of a leaf operation becomes a kernel AST in the form of
``docs/design/kernel-ir.md`` (``SINK(STORE(INDEX(PARAM_out, idx), value[, gate]), ...)``):

- each index symbol ``i < n`` is a RANGE (a pack bound gives a pack of RANGEs); symbols that
  select an item of a tensor pack (``xs[k]``), that other bounds depend on, or that an
  ``unroll..(k -> n)`` names are unrolled at compile time;
- the left side is solved for the output space: a plain index becomes an output (LOOP) range; an
  affine mixed-radix sum (``(i * strides) + ..`` of flatten) becomes one range split back by
  ``//`` and ``%``; any other affine index (``stride * i + j - offset`` of deconv or
  linear_upsample) is inverted — the output position is the loop and the eliminated index is
  recovered with a divisibility and bounds gate; a data-dependent index (scatter) is matched
  against the output position; symbols left out of the left side are REDUCE ranges;
- loads sit at the flat row-major offsets of the access; ``|i|`` guards gate the load *and* drop
  the whole term (the identity of the accumulation takes its place), ``|i <> a : b|`` remaps an
  out-of-range index (the reflect/replicate forms of pad and grid_sample);
- the initialising ``=`` and the accumulating ``+= *= &= |= <?= >?=`` form one REDUCE with the
  initial value folded in when the initialiser maps onto the same points, else an initialising
  kernel and an accumulating one that reads it back;
- ``:=`` updates: argmin/argmax-like conditions that compare the candidate with the current value
  become max-then-first-index reductions; unrolled ones become a chain of selects; others keep
  the last write (a MAX reduction over the iteration order);
- ``with`` locals are shared subexpressions (hash-consing does the sharing), packs and packed
  assignments ``x[:,]`` are unrolled into one store per item;
- a data-dependent output extent (``idx[:,k] = i, i < s | cond``, §2.12) is counted: a positions
  kernel (exclusive prefix count of the condition), a count kernel and a scattering kernel.

Run-time (data-dependent) extents. Tensors are stored at their upper bounds, row-major over the
upper-bound shape, and every kernel is compiled once. What changes at run time is how far each
kernel goes: the spec asks for shape inference interleaved with execution (§3 "Dynamic tensor
shapes"), and the extent expressions are the scalar expressions the composer keeps symbolically
(:class:`~uopviz.nnef.evaluation.values.DynamicExtent` keys). In a kernel such an extent is a UOp: the
counters of the extents its key is built of (``graph.counts``: int32 buffers written by the
counting kernels) loaded and combined by the key's arithmetic (:func:`runtime_extent`). A range
whose bound is a data-dependent extent runs to the upper bound, gated by ``range < extent``: the
gate joins the term's gates, so an accumulation skips the term (its identity takes its place), a
plain ``=`` does not store, an arg-extreme ignores the point, and the term's loads are gated too
(an index computed from the actual extent, such as a reflected one, may point outside there).
Guards ``|i|`` and remaps ``|i <> a : b|`` test the actual extent, and extents inside values (``s -
1 - i``) read it. Elements past the actual extent are never read, so their contents do not matter.
The alternative, recompiling everything after a counted operation for the count it found, would
give static kernels but one compilation per distinct count; the gated kernels give exact results
for any count with one compilation, and stay the same kernels for the tuner. The runner trims
graph outputs to their actual extents, evaluated from the same counters on the host. Built-in
kernels (intrinsics) run over upper bounds: a data-dependent extent may only pass through them to
an output; one they would read across is refused, except by the kernels that read the extents
themselves (cubic resize and grid sampling). Input extents (``real[~|10]``) are different: ``run``
recomposes the graph for the given shapes, so they are static by the time kernels run.

Intrinsics (operations with no body) get the kernels of :mod:`uopviz.nnef.lowering.intrinsics`; operations
whose formula does quadratic work in the spec's order (cumsum) those of :mod:`uopviz.nnef.lowering.scan`.
"""

from __future__ import annotations

import itertools
import math
from collections import ChainMap
from typing import TYPE_CHECKING, Any

from uopviz.core.dtype import DType, dtypes
from uopviz.core.ops import AxisType, Ops
from uopviz.core.uop import ParamArg, UOp, shape_uop
from uopviz.nnef.errors import NNEFError
from uopviz.nnef.evaluation.expressions import Evaluator
from uopviz.nnef.evaluation.values import BoundedIndex, DynamicExtent, RuntimeScalar, format_value
from uopviz.nnef.lowering.evaluator import LoweringEvaluator, OutputRef
from uopviz.nnef.lowering.intrinsics import INTRINSICS
from uopviz.nnef.lowering.kernel_builder import (
    ALL_ITEMS,
    KernelBuilder,
    LoweredKernel,
    rebind_params,
    record_kernel_origins,
    runtime_extent,
)
from uopviz.nnef.lowering.kernel_math import (
    INDEX,
    all_of,
    as_index,
    as_uop,
    flat_offset,
    gate_value,
    reduce_over,
    select,
    substitute_in,
    uop_constant,
    uop_dtype,
)
from uopviz.nnef.lowering.output_space import (
    Evaluated,
    OutputSpace,
    Term,
    pack_positions,
    range_bound,
    ranges_in,
)
from uopviz.nnef.lowering.reuse import lowering_signature, renamed_kernels
from uopviz.nnef.lowering.scan import BUILT_IN_LOWERINGS
from uopviz.nnef.lowering.stores import LOAD_BACK, Stores, operation_error
from uopviz.nnef.model.graph import LoopOperation
from uopviz.nnef.model.nodes import Operation, TensorInfo
from uopviz.nnef.syntax import ast
from uopviz.nnef.syntax.ast import identifiers
from uopviz.nnef.syntax.printer import print_expression
from uopviz.passes.rangeify import finish_kernel

if TYPE_CHECKING:
    from uopviz.nnef.model.graph import ComposedGraph


class _OperationLowering:
    """Lowers the @lower statements of one operation."""

    def __init__(self, graph: ComposedGraph, op: Operation) -> None:
        self.graph = graph
        self.op = op
        self.symbols = op.symbols
        self.kernels: list[LoweredKernel] = []
        self._range_numbers = itertools.count(1000)
        self.pack_item: int | None = None
        self.stores = Stores(op, self._range_numbers)

    def error(self, node: ast.Node, message: str) -> NNEFError:
        """An error at the statement, naming the operation."""
        return operation_error(self.op, node, message)

    # -- grouping --------------------------------------------------------------------------------

    def lower(self) -> list[LoweredKernel]:
        groups: dict[str, list[ast.Lowering]] = {}
        for statement in self.op.definition.lowerings:
            groups.setdefault(self._target_name(statement), []).append(statement)
        for name, statements in groups.items():
            init = [s for s in statements if s.op == "="]
            updates = [s for s in statements if s.op != "="]
            if len(init) > 1 or len(updates) > 1:
                raise self.error(
                    statements[-1], f"'{name}' is assigned by more than one '=' or more than one accumulation"
                )
            if updates and updates[0].op == ":=" and not init:
                raise self.error(updates[0], f"':=' updates '{name}', which needs an initialising '=' first")
            self._lower_output(init[0] if init else None, updates[0] if updates else None)
        return self.kernels

    def _target_name(self, statement: ast.Lowering) -> str:
        base = statement.target.base if isinstance(statement.target, ast.TensorAccess) else statement.target
        while isinstance(base, ast.Index):
            base = base.base
        if not isinstance(base, ast.Identifier):
            raise self.error(statement, "the left side of a lowering must be an output tensor access")
        if base.name not in {param.name for param in self.op.definition.outputs}:
            raise self.error(statement, f"'{base.name}' is not an output of {self.op.type}")
        return base.name

    # -- unrolling -------------------------------------------------------------------------------

    def _unrolled(self, statement: ast.Lowering) -> list[str]:
        """Index symbols expanded at compile time: pack selectors, symbols bounds depend on."""
        names = {bound.name for bound in statement.bounds}
        chosen: list[str] = []
        nodes = [
            statement.target,
            statement.value,
            statement.condition,
            *(local.value for local in statement.locals),
        ]
        for root in nodes:
            if root is None:
                continue
            for node in ast.walk(root):
                if (
                    isinstance(node, ast.Index)
                    and isinstance(node.base, ast.Identifier)
                    and isinstance(node.index, ast.Identifier)
                    and node.index.name in names
                ):
                    value = self.symbols.get(node.base.name)
                    if (
                        isinstance(value, list)
                        and value
                        and all(isinstance(item, TensorInfo) for item in value)
                    ):
                        chosen.append(node.index.name)
        for position, bound in enumerate(statement.bounds):
            earlier = {b.name for b in statement.bounds[:position]}
            chosen.extend(identifiers(bound.bound) & earlier)
        return list(dict.fromkeys(chosen))

    def _bindings(
        self, statement: ast.Lowering, names: list[str], local: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """Every combination of values of the unrolled symbols ``names``."""
        if not names:
            return [{}]
        bounds = {bound.name: bound for bound in statement.bounds}
        out: list[dict[str, Any]] = [{}]
        for name in names:
            bound = bounds[name]
            expanded = []
            for binding in out:
                evaluator = Evaluator(ChainMap(binding, local, self.symbols), frozenset(), self.op.dtypes)
                count = evaluator(bound.bound)
                if isinstance(count, DynamicExtent) and count.bound is not None:
                    # a pack with a run-time length (a loop's scan outputs) holds its items up to
                    # the bound: all are written, the result's run-time extent stops its readers
                    count = int(count.bound)
                if isinstance(count, list) or not isinstance(count, int) or isinstance(count, bool):
                    raise self.error(
                        bound, f"the unrolled index '{name}' needs an int bound, got {format_value(count)}"
                    )
                expanded.extend({**binding, name: value} for value in range(count))
            out = expanded
        return out

    # -- evaluation -------------------------------------------------------------------------------

    def _evaluate(
        self,
        statement: ast.Lowering,
        builder: KernelBuilder,
        local: dict[str, Any],
        term_names: list[str],
        output: TensorInfo,
        self_reads: bool,
    ) -> Evaluated:
        """Ranges, left side and the terms (one per binding of ``term_names``) of a statement."""
        ranges: list[UOp] = []
        symbols: dict[str, Any] = dict(local)
        unrolled = set(local) | set(term_names)
        extent_gates: list[Any] = []  # ranges run to the upper bound of a data-dependent extent
        for bound in statement.bounds:
            if bound.name in unrolled:
                continue
            evaluator = LoweringEvaluator(builder, ChainMap(symbols, self.symbols), self.op.dtypes)
            extent = evaluator(bound.bound)
            extents = [self._as_extent(e, bound) for e in (extent if isinstance(extent, list) else [extent])]
            made = [self._new_range(self._extent(e, bound)) for e in extents]
            for r, e in zip(made, extents, strict=True):
                actual = builder.extent(e) if isinstance(e, DynamicExtent) else None
                if isinstance(actual, UOp):
                    extent_gates.append(r < actual)
            ranges.extend(made)
            symbols[bound.name] = made if isinstance(extent, list) else made[0]
        overlay = dict(symbols)
        name = self._target_name(statement)
        if self_reads:
            overlay[name] = OutputRef(output)
        lhs_scope = dict(overlay)
        evaluator = LoweringEvaluator(builder, ChainMap(lhs_scope, self.symbols), self.op.dtypes)
        pending = set(term_names)
        for local_def in statement.locals:  # the left side may use 'with' locals (conv's oi)
            if identifiers(local_def.value) & pending:
                pending.add(local_def.name)
                continue
            lhs_scope[local_def.name] = evaluator(local_def.value)
        lhs = self._lhs(statement, evaluator, output)
        terms = []
        reads_before = len(builder.current)
        for binding in self._bindings(statement, term_names, symbols):
            builder.term_gates = []
            scope: dict[str, Any] = {**overlay, **binding}
            term_evaluator = LoweringEvaluator(builder, ChainMap(scope, self.symbols), self.op.dtypes)
            for local_def in statement.locals:
                scope[local_def.name] = term_evaluator(local_def.value)
            value = term_evaluator(statement.value)
            if isinstance(value, list):  # a run-time extent or scalar assigned as it is (x.shape[i])
                value = [
                    builder.extent(v) if isinstance(v, DynamicExtent | RuntimeScalar) else v for v in value
                ]
            elif isinstance(value, DynamicExtent | RuntimeScalar):
                value = builder.extent(value)
            if self.pack_item is not None and isinstance(value, list):
                value = value[self.pack_item]  # the item of a whole-pack assignment
            condition = True if statement.condition is None else term_evaluator(statement.condition)
            if condition is None:
                raise self.error(statement, "the condition after '|' is null")
            if extent_gates:  # past a run-time extent nothing is read: indices there may point outside
                value = gate_value(value, all_of(extent_gates))
            terms.append(Term(value, [*extent_gates, *builder.term_gates], condition))
        builder.term_gates = []
        return Evaluated(statement, ranges, lhs, output, terms, len(builder.current) > reads_before)

    def _as_extent(self, value: Any, bound: ast.LoopBound) -> Any:
        """A bound computed from run-time extents (``int(round(real(s) * f))``) as a run-time extent."""
        if not isinstance(value, RuntimeScalar) or value.type != "int":
            return value
        converted = value.as_extent()
        if converted is None:
            raise self.error(bound, f"the bound of '{bound.name}' ({value!r}) has no upper bound")
        return converted

    def _extent(self, value: Any, bound: ast.LoopBound) -> int:
        if isinstance(value, DynamicExtent):
            if value.bound is None:
                raise self.error(
                    bound, f"the bound of '{bound.name}' is a run-time extent without an upper bound"
                )
            return int(value.bound)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(
                bound,
                f"the bound of '{bound.name}' must be an int (or a pack of ints), got {format_value(value)}",
            )
        return value

    def _new_range(self, extent: int) -> UOp:
        return UOp.range(extent, AxisType.LOOP, next(self._range_numbers))

    def _lhs(self, statement: ast.Lowering, evaluator: LoweringEvaluator, output: TensorInfo) -> list[Any]:
        target = statement.target
        if isinstance(target, ast.Index) and isinstance(target.base, ast.Identifier):
            indices: tuple = (target.index,)  # y[i] for y[i,], as the spec's own 'linear' reads bias[ni]
        elif isinstance(target, ast.TensorAccess):
            indices = target.indices
        else:
            raise self.error(statement, "the left side of a lowering must be an access of an output tensor")
        items: list[Any] = []
        for index in indices:
            if isinstance(index, ast.Expand):
                value = evaluator(index.value)
                if index.count is not None:
                    count = evaluator.repeat_count(index.count)
                    value = (value if isinstance(value, list) else [value]) * (count or 0)
                if not isinstance(value, list):
                    raise self.error(index, "'..' in the left side expands a pack; this is not a pack")
                items.extend(value)
            elif isinstance(index, ast.Range):
                if index.start is not None or index.stop is not None or index.step is not None:
                    raise self.error(index, "only ':' (the whole dimension) may be a range on the left side")
                items.append(ALL_ITEMS)
            else:
                value = evaluator(index)
                items.append(("positions", value) if isinstance(value, list) else value)
        if len(items) != output.rank:
            raise self.error(
                target, f"'{output.name}' has rank {output.rank} but the left side has {len(items)} indices"
            )
        return items

    def _output_tensor(self, statement: ast.Lowering, local: dict[str, Any]) -> TensorInfo | list[TensorInfo]:
        base = statement.target.base
        evaluator = Evaluator(ChainMap(local, self.symbols), frozenset(), self.op.dtypes)
        tensor = evaluator(base)
        if isinstance(tensor, list) and tensor and all(isinstance(item, TensorInfo) for item in tensor):
            return tensor
        if not isinstance(tensor, TensorInfo):
            raise self.error(statement, "the left side of a lowering must be an output tensor")
        return tensor

    # -- one output ------------------------------------------------------------------------------------

    def _lower_output(self, init: ast.Lowering | None, update: ast.Lowering | None) -> None:
        main = update or init
        unrolled = self._unrolled(main)
        if main.unroll_index is not None:
            unrolled.insert(0, main.unroll_index)
        lhs_names = identifiers(main.target)
        split = [name for name in unrolled if name in lhs_names]
        terms = [name for name in unrolled if name not in lhs_names]
        for binding in self._split_bindings(main, split):
            output = self._output_tensor(main, binding)
            if isinstance(output, list):  # a whole pack assigned at once: one kernel per item (§2.12)
                for item, tensor in enumerate(output):
                    self.pack_item = item
                    self._lower_instance(init, update, binding, terms, tensor)
                self.pack_item = None
            else:
                self._lower_instance(init, update, binding, terms, output)

    def _split_bindings(self, statement: ast.Lowering, names: list[str]) -> list[dict[str, Any]]:
        local: dict[str, Any] = {}
        if statement.unroll_index is not None:
            count = Evaluator(self.symbols, frozenset(), self.op.dtypes)(statement.unroll_count)
            values = [{statement.unroll_index: value} for value in range(count)]
            rest = [name for name in names if name != statement.unroll_index]
            return [{**v, **b} for v in values for b in self._bindings(statement, rest, {**local, **v})]
        return self._bindings(statement, names, local)

    def _lower_instance(
        self,
        init: ast.Lowering | None,
        update: ast.Lowering | None,
        binding: dict[str, Any],
        terms: list[str],
        output: TensorInfo,
    ) -> None:
        main = update or init
        builder = KernelBuilder(output, self.graph)
        counter = self._counter_symbol(main)
        if counter is not None:
            self._lower_counted(main, binding, output, counter)
            return
        evaluated = self._evaluate(main, builder, binding, terms, output, self_reads=main.op == ":=")
        if _writes_nothing(evaluated):
            if update is not None and init is not None:
                self._lower_instance(init, None, binding, [], output)  # the initial values still hold
            return
        space = OutputSpace(self.error, evaluated)
        indices = [*binding.values(), *([self.pack_item] if self.pack_item is not None else [])]
        label = f"{self.op.label}" + (f"[{','.join(str(v) for v in indices)}]" if indices else "")
        if update is None:
            stores = self.stores.assign(builder, evaluated, space, init_value=None)
            self._emit(builder, stores, label, main)
            return
        init_value = None
        if init is not None:
            init_value = self._fused_init(init, binding, output, space, builder) if space.full else None
            if init_value is None:
                init_builder = KernelBuilder(output, self.graph)
                init_evaluated = self._evaluate(init, init_builder, binding, [], output, self_reads=False)
                init_space = OutputSpace(self.error, init_evaluated)
                self._emit(
                    init_builder,
                    self.stores.assign(init_builder, init_evaluated, init_space, None),
                    f"{label}.init",
                    init,
                )
                init_value = LOAD_BACK
        stores = self.stores.accumulate(builder, evaluated, space, init_value)
        self._emit(builder, stores, label, main)

    def _emit(
        self,
        builder: KernelBuilder,
        stores: list[UOp],
        label: str,
        statement: ast.Lowering,
        scratch: dict[str, tuple[DType, int]] | None = None,
    ) -> None:
        ast_uop = UOp(Ops.SINK, tuple(stores))
        leftover = [u for u in ast_uop.toposort() if u.op is Ops.PARAM and u.arg.slot < 0]
        if leftover:
            raise self.error(
                statement, "the statement reads the output it assigns in a way uopviz cannot lower"
            )
        ast_uop, names = finish_kernel(ast_uop, builder.names, keep=(0,))  # 0: the output
        self.kernels.append(
            LoweredKernel(
                label,
                ast_uop,
                names,
                self.op,
                dict(scratch or {}),
                print_expression(statement.value),
            )
        )

    # -- fusing the initialiser ---------------------------------------------------------------------

    def _fused_init(
        self,
        init: ast.Lowering,
        binding: dict[str, Any],
        output: TensorInfo,
        space: OutputSpace,
        target: KernelBuilder,
    ) -> Any:
        """The initial value at the update's points, when the initialiser maps onto them."""
        builder = KernelBuilder(output, self.graph)
        evaluated = self._evaluate(init, builder, binding, [], output, self_reads=False)
        (term,) = evaluated.terms
        if term.gates or term.condition is not True:
            return None
        mapping: dict[UOp, UOp] = {}
        points = space.point_indices()
        for axis, item in enumerate(evaluated.lhs):
            positions = pack_positions(item, output.upper_shape[axis])
            if positions is not None:
                if space.pack_axis != axis or positions != space.pack_positions:
                    return None
                continue
            point = points[axis]
            if isinstance(item, int):
                if not (isinstance(point, int) and point == item) and output.upper_shape[axis] != 1:
                    return None
                continue
            if (
                not isinstance(item, UOp)
                or item.op is not Ops.RANGE
                or item in mapping
                or range_bound(item) != output.upper_shape[axis]
            ):
                return None
            mapping[item] = as_index(point) if not isinstance(point, UOp) else point
        if set(evaluated.ranges) - set(mapping):
            return None
        value = term.value
        if value is None:
            raise self.error(init, "the initial value is null (resolve optional values with '??')")

        def at_point(item: Any) -> Any:
            if not isinstance(item, UOp):
                return item
            return rebind_params(substitute_in(item, mapping), builder, target)

        return [at_point(v) for v in value] if isinstance(value, list) else at_point(value)

    # -- counted (data-dependent) outputs ---------------------------------------------------------------

    def _counter_symbol(self, statement: ast.Lowering) -> str | None:
        """The output extent this statement counts (§2.12): a symbol the output declares afresh
        (``k`` of ``int[d,k|n]``), not one derived from the inputs' run-time extents."""
        label = self.op.label
        for node in ast.walk(statement.target):
            if isinstance(node, ast.Identifier):
                value = self.symbols.get(node.name)
                if isinstance(value, DynamicExtent) and value.key == (
                    f"{label}.{node.name}" if label else node.name
                ):
                    return node.name
        return None

    def _lower_counted(
        self, statement: ast.Lowering, binding: dict[str, Any], output: TensorInfo, counter: str
    ) -> None:
        """``out[..., k] = v, i < s | cond``: k is the running count of the points where cond holds."""
        if statement.op != "=":
            raise self.error(statement, "a counted output dimension needs a plain '=' assignment")
        marker = UOp(Ops.PARAM, (shape_uop(()),), ParamArg(-100, INDEX, None, None))
        local = {**binding, counter: marker}
        builder = KernelBuilder(output, self.graph)
        evaluated = self._evaluate(statement, builder, local, [], output, self_reads=False)
        (term,) = evaluated.terms
        ranges = evaluated.ranges
        shape = [range_bound(r) for r in ranges]
        volume = max(math.prod(shape), 1)
        positions = f"{output.name}#positions"
        count = f"{output.name}#count"
        scratch = {positions: (dtypes.int32, volume), count: (dtypes.int32, 1)}
        condition = all_of([*term.gates, term.condition])
        condition_uop = as_uop(condition, dtypes.bool)
        flat = flat_offset(ranges, shape)
        loops = {r: UOp.range(range_bound(r), AxisType.LOOP, number) for number, r in enumerate(ranges)}
        reduces = {
            r: UOp.range(range_bound(r), AxisType.REDUCE, len(ranges) + number)
            for number, r in enumerate(ranges)
        }
        # kernel 1: exclusive prefix count of the condition, in the order of the loop indices
        position_builder = KernelBuilder(TensorInfo(positions, "int", (volume,)), self.graph)
        before = substitute_in(flat, reduces) < substitute_in(flat, loops)
        counted = rebind_params(substitute_in(condition_uop, reduces), builder, position_builder)
        total = reduce_over(
            "+=",
            select(
                UOp(Ops.AND, (counted, before)), uop_constant(dtypes.int32, 1), uop_constant(dtypes.int32, 0)
            ),
            list(reduces.values()),
        )
        address = UOp(
            Ops.INDEX, (position_builder.param(position_builder.output), substitute_in(flat, loops))
        )
        self._emit(
            position_builder,
            [UOp(Ops.STORE, (address, total))],
            f"{self.op.label}.positions",
            statement,
            {positions: scratch[positions]},
        )
        # kernel 2: the count
        count_builder = KernelBuilder(TensorInfo(count, "int", (1,)), self.graph)
        counted = rebind_params(substitute_in(condition_uop, reduces), builder, count_builder)
        total = reduce_over(
            "+=",
            select(counted, uop_constant(dtypes.int32, 1), uop_constant(dtypes.int32, 0)),
            list(reduces.values()),
        )
        address = UOp(Ops.INDEX, (count_builder.param(count_builder.output), uop_constant(INDEX, 0)))
        self._emit(
            count_builder,
            [UOp(Ops.STORE, (address, total))],
            f"{self.op.label}.count",
            statement,
            {count: scratch[count]},
        )
        # kernel 3: zero the output, kernel 4: scatter the values to their counted slots
        zero_builder = KernelBuilder(output, self.graph)
        size = max(math.prod(output.upper_shape), 1)
        fill = UOp.range(size, AxisType.LOOP, 0)
        zero = UOp(
            Ops.STORE,
            (UOp(Ops.INDEX, (zero_builder.param(output), fill)), uop_constant(uop_dtype(output.dtype), 0)),
        )
        self._emit(zero_builder, [zero], f"{self.op.label}.clear", statement)
        scatter_builder = KernelBuilder(output, self.graph)
        slot = scatter_builder.load(positions, substitute_in(flat, loops), True, dtypes.int32, volume).cast(
            INDEX
        )
        gate = rebind_params(substitute_in(condition_uop, loops), builder, scatter_builder)
        stores = []
        lhs = evaluated.lhs
        packed = [axis for axis, item in enumerate(lhs) if item is ALL_ITEMS]
        values = term.value if isinstance(term.value, list) else [term.value]
        items = range(output.upper_shape[packed[0]]) if packed else [None]
        for item in items:
            indices = []
            for index in lhs:
                if index is ALL_ITEMS:
                    indices.append(item)
                elif isinstance(index, UOp) and index is marker:
                    indices.append(slot)
                elif isinstance(index, int):
                    indices.append(index)
                else:
                    raise self.error(
                        statement, "a counted output supports ':', constant and counter indices only"
                    )
            value = values[item or 0]
            value = rebind_params(
                substitute_in(as_uop(value, uop_dtype(output.dtype)), loops), builder, scatter_builder
            )
            address = UOp(
                Ops.INDEX, (scatter_builder.param(output), flat_offset(indices, output.upper_shape))
            )
            stores.append(UOp(Ops.STORE, (address, value, gate)))
        self._emit(
            scatter_builder, stores, f"{self.op.label}.scatter", statement, {positions: scratch[positions]}
        )
        dynamic = self.symbols[counter]
        self.graph.counts[dynamic.key] = count


def _writes_nothing(evaluated: Evaluated) -> bool:
    """Whether a statement has no iteration point that writes: a range of extent 0 on its left side
    (a zero-size output, a zero-size piece of a concat), or any range of extent 0 in an assignment
    or a conditional update.  An accumulation over an empty REDUCE range still writes its identity
    (:func:`reduce_over`).  An empty range's indices fold to constants, so its kernel would
    otherwise run over the other ranges and write (and read) outside the zero-size tensors."""
    empty = {r for r in evaluated.ranges if range_bound(r) == 0}
    if not empty:
        return False
    if evaluated.statement.op in ("=", ":="):
        return True
    left = set().union(*(ranges_in(item.index if isinstance(item, BoundedIndex) else item)
                         for item in evaluated.lhs))
    return bool(empty & left)


# ------------------------------------------------------------------------------------------------
# entry points


def lower_operation(graph: ComposedGraph, op: Operation) -> list[LoweredKernel]:
    """The kernels of one operation of ``graph`` (none for a loop node: its body and condition are
    graphs of their own)."""
    if isinstance(op, LoopOperation):
        graph.counts.update(op.counted)  # extents of its results that the runner counts
        return []
    signature = lowering_signature(graph, op)
    templates = graph.__dict__.setdefault("_lowering_templates", {})
    if signature is not None and signature in templates:
        reused = renamed_kernels(*templates[signature], op)
        if reused is not None:
            return record_kernel_origins(reused)
    busy = graph.__dict__.setdefault("_lowering_now", set())  # see _counter_of
    busy.add(id(op))
    try:
        kernels = _lower_one(graph, op)
    finally:
        busy.discard(id(op))
    if signature is not None:
        templates[signature] = (op, kernels)
    return record_kernel_origins(kernels)



def _lower_one(graph: ComposedGraph, op: Operation) -> list[LoweredKernel]:
    if op.is_intrinsic:
        handler = INTRINSICS.get(op.type)
        if handler is None:
            raise NNEFError.at(
                op.position,
                f"uopviz has no kernel for the intrinsic operator {op.type} "
                f"(intrinsics with kernels: {', '.join(sorted(INTRINSICS))})",
            )
        _check_intrinsic_extents(graph, op)
        return handler(graph, op)
    built_in = BUILT_IN_LOWERINGS.get(op.type)
    if built_in is not None:  # a formula of quadratic work (cumsum): a kernel in the spec's order
        return built_in(graph, op)
    return _OperationLowering(graph, op).lower()


# built-in kernels that read the actual value of their inputs' run-time extents
_INTRINSICS_READING_EXTENTS = frozenset({"image._cubic_grid_sample", "image.cubic_resize", "runtime.scalar"})


def _check_intrinsic_extents(graph: ComposedGraph, op: Operation) -> None:
    """The built-in kernels run over the upper bounds of their inputs: a data-dependent extent may
    only pass through to an output (rows past the count are never read), not be read across,
    except by the kernels that read the extents themselves."""
    if op.type in _INTRINSICS_READING_EXTENTS:
        return
    passed = {
        e for name in op.output_names() for e in graph.tensors[name].shape if isinstance(e, DynamicExtent)
    }
    for name in op.input_names():
        tensor = graph.tensors.get(name)
        for extent in tensor.shape if tensor is not None else ():
            if (
                isinstance(extent, DynamicExtent)
                and extent not in passed
                and runtime_extent(graph, extent, lambda _: uop_constant(dtypes.int32, 0)) is not None
            ):
                raise NNEFError.at(
                    op.position,
                    f"{op.type} '{op.label}' reads '{name}', whose extent {extent!r} is decided by the data "
                    f"at run time; the built-in kernel of {op.type} needs it fixed (it may only carry "
                    f"through to the output)",
                )


def operation_kernels(graph: ComposedGraph, op: Operation, backend: str = "python") -> list:
    """The kernels of ``op`` as pipeline :class:`~uopviz.passes.optops.kernel.Kernel` objects (tunable); for
    a loop node, those of its body and condition (nested loops included), in program order."""
    from uopviz.passes.optops.kernel import Kernel

    if isinstance(op, LoopOperation):
        return [
            kernel
            for sub in op.subgraphs.values()
            for inner in sub.operations
            for kernel in operation_kernels(sub, inner, backend)
        ]
    return [Kernel(kernel.ast, backend, name_hint=kernel.name) for kernel in graph.lower(op)]


def kernel_count(graph: ComposedGraph) -> int:
    """How many kernels ``g.compile()`` gives, loop bodies and conditions (nested ones too) included:
    the length of ``program.kernels``, whose order is the numbering of per-kernel opts."""
    total = 0
    for op in graph.operations:
        if isinstance(op, LoopOperation):
            total += sum(kernel_count(sub) for sub in op.subgraphs.values())
        else:
            total += len(graph.lower(op))
    return total
