"""The stores of one ``@lower`` statement: its evaluated terms assigned or accumulated into the
output space (a part of an operation's lowering, :mod:`uopviz.nnef.lowering.operation_lowering`).

A plain ``=`` stores each term's value (the last write wins where several iterations hit a point);
the accumulations ``+= *= &= |= <?= >?=`` reduce the terms over the REDUCE ranges, starting from
the initial value (folded in, or read back from the output an initialising kernel wrote:
:data:`LOAD_BACK`); ``:=`` updates become arg-extreme reductions, a chain of selects when
unrolled, or the last write in iteration order.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from uopviz.core.dtype import DType, dtypes
from uopviz.core.ops import AxisType, Ops
from uopviz.core.uop import UOp
from uopviz.nnef.errors import NNEFError
from uopviz.nnef.evaluation.values import BoundedIndex
from uopviz.nnef.lowering.kernel_builder import KernelBuilder
from uopviz.nnef.lowering.kernel_math import (
    COMPARISONS,
    INDEX,
    accumulate,
    accumulation_identity,
    all_of,
    as_float,
    as_uop,
    flat_offset,
    gate_loads,
    python_value,
    reduce_over,
    select,
    strip_casts,
    substitute_in,
    uop_constant,
    uop_dtype,
)
from uopviz.nnef.lowering.output_space import (
    Evaluated,
    OutputSpace,
    Term,
    range_bound,
)
from uopviz.nnef.model.nodes import Operation
from uopviz.nnef.syntax import ast
from uopviz.passes.indexing import unflatten

LOAD_BACK = object()  # the initial value is read back from the output (written by an init kernel)


def operation_error(op: Operation, node: ast.Node, message: str) -> NNEFError:
    """An error at a statement of ``op``'s lowering, naming the operation."""
    where = f" (in {op.type} '{op.label}', invoked at {op.position})"
    return NNEFError.at(node.pos, message + where)


class Stores:
    """The stores of the statements of one operation's lowering (which owns one): ``assign`` for a
    plain ``=``, ``accumulate`` for an accumulation or an update. ``range_numbers`` numbers the
    REDUCE ranges it makes, from the same count as the lowering's own ranges."""

    def __init__(self, op: Operation, range_numbers: Iterator[int]) -> None:
        self.op = op
        self.range_numbers = range_numbers

    def error(self, node: ast.Node, message: str) -> NNEFError:
        """An error at the statement, naming the operation."""
        return operation_error(self.op, node, message)

    def _store(
        self, builder: KernelBuilder, space: OutputSpace, value: Any, gate: Any, item: int | None
    ) -> UOp:
        output = builder.output
        dtype = uop_dtype(output.dtype)
        if isinstance(value, list):
            raise NNEFError(
                f"a pack of {len(value)} values is assigned to a single element of '{output.name}'"
            )
        if value is None:
            raise NNEFError(
                f"a null value is assigned to '{output.name}' (resolve optional values with '??')"
            )
        if isinstance(value, BoundedIndex):
            raise NNEFError(f"a guarded index is assigned to '{output.name}'")
        stored = (
            as_uop(value, dtype)
            if isinstance(value, UOp)
            else uop_constant(dtype, python_value(value, dtype))
        )
        address = UOp(Ops.INDEX, (builder.param(output), space.flat(item)))
        gate = all_of([gate, *space.store_gates])
        if gate is True:
            return UOp(Ops.STORE, (address, stored))
        if gate is False:
            raise NNEFError(f"an assignment to '{output.name}' can never happen")
        return UOp(Ops.STORE, (address, stored, gate))

    def _items(self, value: Any, space: OutputSpace) -> list[tuple[int | None, Any]]:
        if space.pack_axis is None:
            return [(None, value)]
        extent = space.pack_extent()
        values = value if isinstance(value, list) else [value] * extent
        if len(values) != extent:
            raise NNEFError(
                f"a pack of {len(values)} values is assigned to the ':' dimension of extent {extent} "
                f"of '{space.output.name}'"
            )
        return list(enumerate(values))

    def assign(
        self, builder: KernelBuilder, evaluated: Evaluated, space: OutputSpace, init_value: Any
    ) -> list[UOp]:
        """Stores of a plain '=' statement (last write wins if several iterations hit a point)."""
        (term,) = evaluated.terms if len(evaluated.terms) == 1 else (None,)
        if term is None:
            raise self.error(evaluated.statement, "an '=' assignment cannot have unrolled reduction indices")
        gate = all_of([*term.gates, term.condition, *space.term_gates])
        if space.reduce_ranges:
            return self._last_write(builder, evaluated, space, [term], init_value)
        stores = []
        for item, value in self._items(term.value, space):
            stores.append(self._store(builder, space, space.apply(value), space.apply_gate(gate), item))
        return stores

    def accumulate(
        self, builder: KernelBuilder, evaluated: Evaluated, space: OutputSpace, init_value: Any
    ) -> list[UOp]:
        op = evaluated.statement.op
        if op == ":=":
            return self._update(builder, evaluated, space, init_value)
        dtype = uop_dtype(evaluated.output.dtype)
        stores = []
        packs = [self._items(term.value, space) for term in evaluated.terms]
        for position, (item, _) in enumerate(packs[0]):
            total: Any = None
            for term, items in zip(evaluated.terms, packs, strict=True):
                gate = space.apply_gate(all_of([*term.gates, term.condition, *space.term_gates]))
                value = gate_loads(as_uop(space.apply(items[position][1]), dtype), all_of(space.term_gates))
                contribution = (
                    value if gate is True else select(gate, value, accumulation_identity(op, dtype))
                )
                total = contribution if total is None else accumulate(op, total, contribution)
            if space.reduce_ranges:
                total = reduce_over(op, total, space.reduce_ranges)
            initial = self._initial(init_value, builder, space, item, op, dtype)
            if initial is not None:
                total = accumulate(op, as_uop(initial, dtype), total)
            stores.append(self._store(builder, space, total, True, item))
        return stores

    def _initial(
        self,
        init_value: Any,
        builder: KernelBuilder,
        space: OutputSpace,
        item: int | None,
        op: str,
        dtype: DType,
    ) -> Any:
        if init_value is None:
            return None
        if init_value is LOAD_BACK:
            # read where the store may write: a guarded output index out of range (y[|2*i+j|] += ...)
            # skips the read as it skips the write
            return builder.load(builder.output, space.flat(item), all_of(space.store_gates))
        values = init_value if isinstance(init_value, list) else None
        if values is not None:
            return values[item or 0]
        return init_value

    def _update(
        self, builder: KernelBuilder, evaluated: Evaluated, space: OutputSpace, init_value: Any
    ) -> list[UOp]:
        """':=' conditional updates."""
        dtype = uop_dtype(evaluated.output.dtype)
        if evaluated.reads_output:
            if len(evaluated.terms) > 1 and not space.reduce_ranges:
                return self._sequential(builder, evaluated, space, init_value)
            return self._arg_extreme(builder, evaluated, space, init_value)
        if space.reduce_ranges or len(evaluated.terms) > 1:
            return self._last_write(builder, evaluated, space, evaluated.terms, init_value)
        (term,) = evaluated.terms
        gate = space.apply_gate(all_of([*term.gates, term.condition, *space.term_gates]))
        stores = []
        for item, value in self._items(term.value, space):
            value = as_uop(space.apply(value), dtype)
            initial = self._initial(init_value, builder, space, item, ":=", dtype)
            if gate is True:
                stores.append(self._store(builder, space, value, True, item))
            elif initial is None:
                stores.append(self._store(builder, space, value, gate, item))
            else:
                stores.append(self._store(builder, space, select(gate, value, initial), True, item))
        return stores

    def _sequential(
        self, builder: KernelBuilder, evaluated: Evaluated, space: OutputSpace, init_value: Any
    ) -> list[UOp]:
        """Unrolled ':=' updates that read the output: a chain of selects in iteration order."""
        dtype = uop_dtype(evaluated.output.dtype)
        count = space.pack_extent()
        state = [
            as_uop(
                self._initial(init_value, builder, space, item, ":=", dtype) if init_value is not None else 0,
                dtype,
            )
            for item in range(count)
        ]
        placeholders = builder.current
        for term in evaluated.terms:
            mapping = {placeholders[item]: state[item] for item in placeholders}
            gate = space.apply_gate(all_of([*term.gates, term.condition, *space.term_gates]))
            gate = substitute_in(gate, mapping)
            values = term.value if isinstance(term.value, list) else [term.value] * count
            state = [
                select(gate, as_uop(substitute_in(space.apply(v), mapping), dtype), s)
                if gate is not True
                else as_uop(substitute_in(space.apply(v), mapping), dtype)
                for v, s in zip(values, state, strict=True)
            ]
        items = range(count) if space.pack_axis is not None else [None]
        return [self._store(builder, space, state[item or 0], True, item) for item in items]

    def _arg_extreme(
        self, builder: KernelBuilder, evaluated: Evaluated, space: OutputSpace, init_value: Any
    ) -> list[UOp]:
        """``out := r | f(r) > f(out)``: the first (strict) / last (non-strict) index of the extreme."""
        statement = evaluated.statement
        (term,) = evaluated.terms
        condition = term.condition
        values = term.value if isinstance(term.value, list) else [term.value]
        reduce = space.reduce_ranges
        candidates = [strip_casts(space.apply(value)) for value in values]
        placeholders = [builder.current[item] for item in sorted(builder.current)]
        reduce_set = set(reduce)
        if (
            not isinstance(condition, UOp)
            or condition.op not in COMPARISONS
            or len(placeholders) != len(candidates)
            or any(c not in reduce_set for c in candidates)
        ):
            raise self.error(
                statement,
                "this conditional update reads the output in a way uopviz cannot lower "
                "(supported: out := index | f(index) compared with f(out))",
            )
        condition = space.apply(condition)
        left, right = condition.src
        mapping = {
            r: UOp(Ops.CAST, (p,), INDEX) if p.dtype is not INDEX else p
            for r, p in zip(candidates, placeholders, strict=True)
        }
        if substitute_in(left, mapping) is not right:
            left, right = right, left
            flipped = True
        else:
            flipped = False
        if substitute_in(left, mapping) is not right:
            raise self.error(
                statement,
                "this conditional update reads the output in a way uopviz cannot lower "
                "(the two sides of the comparison differ by more than the index)",
            )
        op = condition.op
        greater = (op in (Ops.CMP_GT, Ops.CMP_GE)) != flipped
        strict = op in (Ops.CMP_GT, Ops.CMP_LT)
        key = as_float(left) if not left.dtype.is_float else left
        gate = space.apply_gate(all_of(term.gates))  # skipped terms (guards, run-time extents) take no part
        if gate is not True:
            key = select(gate, key, uop_constant(dtypes.float32, -math.inf if greater else math.inf))
        extreme = reduce_over(">?=" if greater else "<?=", key, reduce)
        chosen_set = set(candidates)
        order = [space.mapping[r] for r in evaluated.ranges if space.mapping[r] in chosen_set]
        shape = [range_bound(r) for r in order]
        flat = flat_offset(order, shape)
        fresh = {r: UOp.range(range_bound(r), AxisType.REDUCE, next(self.range_numbers)) for r in reduce}
        hit = substitute_in(key, fresh).eq(extreme)  # the second pass runs over ranges of its own
        if gate is not True:
            hit = UOp(Ops.AND, (substitute_in(gate, fresh), hit))
        position = substitute_in(flat, fresh)
        if strict:  # the first position that reaches the extreme
            chosen = -reduce_over(">?=", select(hit, -position, -(1 << 62)), list(fresh.values()))
        else:  # the last one
            chosen = reduce_over(">?=", select(hit, position, -1), list(fresh.values()))
        indices = unflatten(chosen, shape)
        by_range = dict(zip(order, indices, strict=True))
        dtype = uop_dtype(evaluated.output.dtype)
        items = [item if space.pack_axis is not None else None for item in range(len(candidates))]
        initial = [
            as_uop(self._initial(init_value, builder, space, item, ":=", dtype), dtype) for item in items
        ]
        # the scan only moves away from its initial value when the extreme beats the value there
        at_initial = substitute_in(right, {p: v for p, v in zip(placeholders, initial, strict=True)})
        at_initial = as_float(at_initial) if not at_initial.dtype.is_float else at_initial
        if greater:
            better = extreme > at_initial if strict else extreme >= at_initial
        else:
            better = extreme < at_initial if strict else extreme <= at_initial
        stores = []
        for item, candidate, start in zip(items, candidates, initial, strict=True):
            value = select(better, by_range[candidate].cast(dtype), start)
            stores.append(self._store(builder, space, value, True, item))
        return stores

    def _last_write(
        self,
        builder: KernelBuilder,
        evaluated: Evaluated,
        space: OutputSpace,
        terms: list[Term],
        init_value: Any,
    ) -> list[UOp]:
        """Several iterations may write a point: the last one in iteration order wins."""
        if len(terms) != 1:
            raise self.error(evaluated.statement, "unrolled indices cannot be combined with scattered writes")
        (term,) = terms
        reduce_set = set(space.reduce_ranges)
        order = [space.mapping[r] for r in evaluated.ranges if space.mapping[r] in reduce_set]
        shape = [range_bound(r) for r in order]
        gate = space.apply_gate(all_of([*term.gates, term.condition, *space.term_gates]))
        flat = flat_offset(order, shape)
        last = reduce_over(">?=", select(gate, flat, -1), order)
        safe = UOp(Ops.MAX, (last, uop_constant(INDEX, 0)))
        back = dict(zip(order, unflatten(safe, shape), strict=True))
        dtype = uop_dtype(evaluated.output.dtype)
        stores = []
        for item, value in self._items(term.value, space):
            written = as_uop(substitute_in(space.apply(value), back), dtype)
            initial = self._initial(init_value, builder, space, item, ":=", dtype)
            if initial is None:
                stores.append(self._store(builder, space, written, last >= 0, item))
            else:
                stores.append(
                    self._store(
                        builder, space, select(last >= 0, written, as_uop(initial, dtype)), True, item
                    )
                )
        return stores
