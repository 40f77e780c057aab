"""The output space of a lowering statement: how its left side maps iteration points to outputs.

A plain index on the left becomes an output (LOOP) range; an affine mixed-radix sum (flatten's
``(i * strides) + ..``) one range split back by ``//`` and ``%`` (Rangeify's
:func:`~uopviz.passes.indexing.unflatten`, as for a RESHAPE); any other affine index (deconv's
``stride * i + j - offset``) is inverted, the eliminated index recovered behind a divisibility and
bounds gate; a data-dependent index (scatter) is matched against the output position; symbols the
left side leaves out are REDUCE ranges. :mod:`uopviz.nnef.lowering.operation_lowering` evaluates the
statements (:class:`Evaluated`) and stores through the :class:`OutputSpace` it builds here.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from uopviz.core.affine import build_range_sum, range_sum
from uopviz.core.ops import AxisType, Ops
from uopviz.core.uop import UOp
from uopviz.nnef.errors import NNEFError
from uopviz.nnef.evaluation.values import BoundedIndex, format_value
from uopviz.nnef.lowering.kernel_builder import ALL_ITEMS
from uopviz.nnef.lowering.kernel_math import INDEX, as_index, flat_offset, substitute_in, uop_constant
from uopviz.nnef.model.nodes import TensorInfo
from uopviz.nnef.syntax import ast
from uopviz.passes.indexing import unflatten


def ranges_in(u: Any) -> set[UOp]:
    """The RANGEs ``u`` is built of (none for a Python value)."""
    if not isinstance(u, UOp):
        return set()
    return {node for node in u.toposort() if node.op is Ops.RANGE}


def range_bound(r: UOp) -> int:
    """The extent of a RANGE with a constant bound."""
    return int(r.src[0].arg[0])


# ------------------------------------------------------------------------------------------------
# one statement, evaluated


@dataclass
class Term:
    """The right side of a statement for one binding of its unrolled reduction symbols."""

    value: Any
    gates: list[Any]
    condition: Any


@dataclass
class Evaluated:
    """A statement with its ranges, its left side and its terms."""

    statement: ast.Lowering
    ranges: list[UOp]  # provisional RANGEs, in declaration order
    lhs: list[Any]
    output: TensorInfo
    terms: list[Term]
    reads_output: bool


# ------------------------------------------------------------------------------------------------
# the output space of a statement


class OutputSpace:
    """How a statement's left side maps iteration points to output elements.

    After construction: ``mapping`` sends every provisional range to its final form (an output
    LOOP range, a REDUCE range or an expression of output ranges), ``store_gates`` hold the
    conditions under which a point is written, ``term_gates`` those that drop a term,
    ``reduce_ranges`` the REDUCE ranges, ``full`` whether every output element is written.
    """

    def __init__(self, error: Callable[[ast.Node, str], NNEFError], evaluated: Evaluated) -> None:
        self.error = error  # the statement's error (naming the operation)
        self.output = evaluated.output
        shape = evaluated.output.upper_shape
        self.mapping: dict[UOp, UOp] = {}
        self.store_gates: list[Any] = []
        self.term_gates: list[Any] = []
        self.indices: list[Any] = []
        self.pack_axis: int | None = None
        self.pack_positions: list[int] = []
        self.full = True
        outputs: list[UOp] = []
        lhs = evaluated.lhs
        usage: dict[UOp, int] = {}
        for item in lhs:
            for r in ranges_in(item.index if isinstance(item, BoundedIndex) else item):
                usage[r] = usage.get(r, 0) + 1
        solved: dict[UOp, UOp] = {}
        number = itertools.count()
        for axis, (item, extent) in enumerate(zip(lhs, shape, strict=True)):
            guarded = isinstance(item, BoundedIndex)
            if guarded:
                if item.remaps:
                    raise error(
                        evaluated.statement, "a remapped index |i <> a : b| cannot be on the left side"
                    )
                item = item.index
            positions = pack_positions(item, extent)
            if positions is not None:
                if self.pack_axis is not None:
                    raise error(evaluated.statement, "only one packed dimension is allowed on the left side")
                self.pack_axis = axis
                self.pack_positions = positions
                self.full = self.full and positions == list(range(extent))
                self.indices.append(None)
                continue
            if isinstance(item, int) and not isinstance(item, bool):
                if not 0 <= item < extent:
                    raise error(evaluated.statement, f"index {item} is out of range for the extent {extent}")
                self.indices.append(item)
                self.full = self.full and extent == 1
                continue
            if not isinstance(item, UOp):
                raise error(
                    evaluated.statement, f"an index of the left side must be an int, got {format_value(item)}"
                )
            item = as_index(item)
            affine = range_sum(item) if not any(r in solved for r in ranges_in(item)) else None
            if affine is not None and not affine[0]:
                self.indices.append(affine[1])
                self.full = self.full and extent == 1
                continue
            own = None if affine is None else [r for r in affine[0] if usage.get(r) == 1 and r not in solved]
            exclusive = affine is not None and len(own) == len(affine[0])
            if exclusive and len(own) == 1 and affine[0][own[0]] == 1:
                r = own[0]
                final = UOp.range(range_bound(r), AxisType.LOOP, next(number))
                solved[r] = final
                outputs.append(final)
                index = final + affine[1] if affine[1] else final
                self._bounds_gate(
                    index, extent, range_bound(r) + affine[1] - 1, affine[1], guarded, evaluated
                )
                self.full = self.full and affine[1] == 0 and range_bound(r) == extent
                self.indices.append(index)
                continue
            radix = _mixed_radix(affine) if exclusive else None
            if radix is not None:
                total = radix[-1][1] * range_bound(radix[-1][0])
                final = UOp.range(total, AxisType.LOOP, next(number))
                outermost_first = [r for r, _ in reversed(radix)]
                indices = unflatten(final, [range_bound(r) for r in outermost_first])
                solved.update(zip(outermost_first, indices, strict=True))
                outputs.append(final)
                index = final + affine[1] if affine[1] else final
                self._bounds_gate(index, extent, total + affine[1] - 1, affine[1], guarded, evaluated)
                self.full = self.full and affine[1] == 0 and total == extent
                self.indices.append(index)
                continue
            final = UOp.range(extent, AxisType.LOOP, next(number))
            outputs.append(final)
            self.indices.append(final)
            candidates = list(own or []) if affine is not None else []
            if candidates:
                r = max(candidates, key=range_bound)
                coefficient = affine[0][r]
                rest = build_range_sum({q: c for q, c in affine[0].items() if q is not r}, affine[1])
                numerator = final - rest
                if coefficient == 1:
                    recovered = numerator
                elif coefficient == -1:
                    recovered = -numerator
                else:
                    recovered = UOp(Ops.IDIV, (numerator, uop_constant(INDEX, coefficient)))
                    self.term_gates.append(
                        UOp(Ops.MOD, (numerator, uop_constant(INDEX, abs(coefficient)))).eq(
                            uop_constant(INDEX, 0)
                        )
                    )
                solved[r] = recovered
                self.term_gates.append(UOp(Ops.AND, (recovered >= 0, recovered < range_bound(r))))
            else:
                self.term_gates.append(
                    item.eq(final)
                )  # a data-dependent or shared index must match the point
        self.reduce_ranges: list[UOp] = []
        number_reduce = itertools.count(len(outputs))
        for r in evaluated.ranges:
            if r not in solved:
                final = UOp.range(range_bound(r), AxisType.REDUCE, next(number_reduce))
                solved[r] = final
                self.reduce_ranges.append(final)
        # solved expressions may mention ranges that are themselves replaced (reduce ranges in `rest`)
        self.mapping = _resolve(solved)
        self.term_gates = [self.apply(g) for g in self.term_gates]
        self.indices = [self.apply(i) for i in self.indices]
        self.outputs = outputs
        if self.term_gates and not self.reduce_ranges:
            self.store_gates.extend(self.term_gates)
            self.term_gates = []

    def _bounds_gate(
        self, index: UOp, extent: int, high: int, low: int, guarded: bool, evaluated: Evaluated
    ) -> None:
        if low < 0 or high >= extent:
            if not guarded:
                raise self.error(
                    evaluated.statement,
                    f"an index of the left side runs from {low} to "
                    f"{high}, outside [0, {extent}); guard it with |...|",
                )
            self.store_gates.append(UOp(Ops.AND, (index >= 0, index < extent)))
            self.full = False

    def apply(self, value: Any) -> Any:
        """``value`` with the provisional ranges replaced by their final forms."""
        if isinstance(value, list):
            return [self.apply(v) for v in value]
        return substitute_in(value, self.mapping) if isinstance(value, UOp) else value

    def apply_gate(self, gate: Any) -> Any:
        """A gate (a condition UOp or a Python bool) over the final ranges."""
        return self.apply(gate)

    def point_indices(self) -> list[Any]:
        """The index of each output dimension at the stored point (None for the ':' dimension)."""
        return list(self.indices)

    def pack_extent(self) -> int:
        """How many items a packed left side (``x[:, i]``) stores at each point (1 without one)."""
        return len(self.pack_positions) if self.pack_axis is not None else 1

    def flat(self, item: int | None) -> UOp:
        """The flat offset in the output of the stored point (of item ``item`` of a packed side)."""
        indices = [
            self.pack_positions[item] if axis == self.pack_axis else index
            for axis, index in enumerate(self.indices)
        ]
        return flat_offset(indices, self.output.upper_shape)


def _resolve(solved: dict[UOp, UOp]) -> dict[UOp, UOp]:
    """The mapping with every provisional range inside the values replaced too (to a fixed point)."""
    from uopviz.core.rewrite import substitute_closure

    return {r: substitute_closure(v, solved) for r, v in solved.items()}


def pack_positions(item: Any, extent: int) -> list[int] | None:
    """The positions a packed index of the left side covers (``:`` or a static pack), else None."""
    if item is ALL_ITEMS:
        return list(range(extent))
    if isinstance(item, tuple) and item and item[0] == "positions":
        positions = item[1]
        if not all(isinstance(p, int) and not isinstance(p, bool) and 0 <= p < extent for p in positions):
            raise NNEFError(
                f"a packed index of the left side must hold ints in [0, {extent}), got "
                f"{format_value(positions)}"
            )
        return list(positions)
    return None


def _mixed_radix(affine: tuple[dict[UOp, int], int]) -> list[tuple[UOp, int]] | None:
    """The ranges of an exact mixed-radix sum (coefficients 1, n0, n0*n1, ...), smallest first."""
    terms = sorted(affine[0].items(), key=lambda pair: pair[1])
    expected = 1
    for r, coefficient in terms:
        if coefficient != expected:
            return None
        expected *= range_bound(r)
    return terms if len(terms) > 1 else None
