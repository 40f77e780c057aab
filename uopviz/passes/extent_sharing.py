"""Kernels that differ only in an extent share one compiled kernel, the extents read at run time.

A network compiles many kernels that are the same code for other sizes: DenseNet-121's 488 kernels
are 272 distinct LINEAR programs but 63 forms, most differing only in a channel count (a
reduction's length, a buffer's stride, the channel offset a concatenation writes at).  Render asks
:func:`share_extents` for the groups of LINEAR programs equal up to such integer constants; each
group becomes one LINEAR program whose differing constants are read from one more PARAM, an int64
array of *generators* that each launch binds (:class:`ExtentBoundKernel`).  Every differing
constant is an affine function ``a * generator + b`` of one generator (a channel offset and the
offsets of its lanes share one; a length and the stride it makes share one), so a kernel reads a
few numbers and the compiler folds the rest into its address arithmetic.

A constant may become a run-time value only where that costs no speed (:data:`VARIABLE_USES`): a
loop bound, a term of an address sum or product, a comparison.  A divisor, a shift, a lane of a
vector, a THREAD range's length (the parallel split) and anything in a scalar innermost loop (which
the C compiler unrolls and vectorises itself when it knows its length and strides) stays in the
code, so kernels differing there stay apart.  Measured on DenseNet-121, each kernel alone, shared
against its own: the same time on C and LLVM.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from uopviz.backends.base import CompiledKernel, Launch
from uopviz.backends.linear_program import open_scopes
from uopviz.core.dtype import dtypes
from uopviz.core.ops import AxisType, Ops
from uopviz.core.uop import UOp

#: the ops that may read an extent at run time at no cost (an index constant used by anything
#: else, e.g. IDIV/MOD, a shift, a VECTORIZE lane, keeps its value in the kernel's form)
VARIABLE_USES = frozenset(
    {
        Ops.RANGE,
        Ops.ADD,
        Ops.SUB,
        Ops.MUL,
        Ops.MULACC,
        Ops.CMP_LT,
        Ops.CMP_NE,
        Ops.CMP_GT,
        Ops.CMP_GE,
        Ops.CMP_LE,
        Ops.CMP_EQ,
    }
)
#: the dtype of the generators' array (the renderers' ``index`` is 64-bit)
GENERATOR_DTYPE = dtypes.int64


@dataclass(frozen=True)
class SharedExtents:
    """One member of a group: the group's LINEAR program and this member's generator values."""

    linear: UOp
    values: tuple[int, ...]
    members: int  # how many distinct LINEAR programs share ``linear``


def share_extents(linears: Sequence[UOp], minimum_group: int = 2) -> dict[UOp, SharedExtents]:
    """The LINEAR programs of ``linears`` that share a kernel with others (groups of at least
    ``minimum_group``), each mapped to the group's program and its own generator values."""
    groups: dict[tuple, list[UOp]] = defaultdict(list)
    for linear in dict.fromkeys(linears):
        groups[_form(linear)].append(linear)
    shared: dict[UOp, SharedExtents] = {}
    for members in groups.values():
        if len(members) >= minimum_group:
            shared.update(_share_group(members))
    return shared


# ---------------------------------------------------------------------------------------------
# the form of a LINEAR program: its instructions with the variable constants' values left out


def _variable_constants(linear: UOp) -> set[int]:
    """Positions in ``linear.src`` of the index constants that may vary: every use in VARIABLE_USES,
    never the length of a THREAD range, never in a scalar innermost loop (its own bound, or its
    body's addresses: with them known the compiler unrolls and vectorises that loop itself)."""
    instructions = linear.src
    position = {instruction: index for index, instruction in enumerate(instructions)}
    candidates = {
        index for index, u in enumerate(instructions) if u.op is Ops.CONST and u.dtype == dtypes.index
    }
    scopes = open_scopes(instructions)
    compiler_loops = _scalar_innermost_loops(instructions, scopes)
    for index, user in enumerate(instructions):
        loops = [opener for opener in (*scopes[index], index) if instructions[opener].op is Ops.RANGE]
        in_compiler_loop = bool(loops) and loops[-1] in compiler_loops
        threads = user.op is Ops.RANGE and user.arg[1] is AxisType.THREAD
        if user.op in VARIABLE_USES and not threads and not in_compiler_loop:
            continue
        for operand in user.src:
            candidates.discard(position.get(operand))
    return candidates


def _scalar_innermost_loops(instructions: tuple[UOp, ...], scopes: list[tuple[int, ...]]) -> set[int]:
    """The positions of the RANGEs with no RANGE inside and no vector value in their body: loops the
    C compiler vectorises and unrolls itself when it knows their bounds and strides (``scopes``:
    each instruction's, :func:`_scopes`)."""
    ranges = {index for index, u in enumerate(instructions) if u.op is Ops.RANGE}
    outer = {opener for index in ranges for opener in scopes[index] if opener in ranges}
    vectorised = set()
    for index, u in enumerate(instructions):
        loops = [opener for opener in scopes[index] if opener in ranges]
        if u.dtype.count > 1 and loops:
            vectorised.add(loops[-1])
    return ranges - outer - vectorised


def _form(linear: UOp) -> tuple:
    """What two LINEAR programs must share to share a kernel: every instruction's op, dtype, arg
    and operands (by position), except the values of variable constants and the sizes of PARAMs."""
    position = {instruction: index for index, instruction in enumerate(linear.src)}
    variable = _variable_constants(linear)
    form: list[tuple] = []
    for index, u in enumerate(linear.src):
        if u.op is Ops.PARAM:
            form.append((u.op, u.arg))
            continue
        arg: Any = "variable" if index in variable else u.arg
        # an operand that is no instruction (a shape) by identity: never compared as a UOp (== builds one)
        operands = tuple(position.get(operand, ("outside", id(operand))) for operand in u.src)
        form.append((u.op, u.dtype, arg, operands))
    return (tuple(form), frozenset(variable))


# ---------------------------------------------------------------------------------------------
# a group: generators, the shared program, each member's values


@dataclass
class _Generators:
    """The generators of a group (each a column of values, one per member) and each varying
    constant's ``(generator, a, b)``: its value is ``a * generator + b`` in every member."""

    columns: list[tuple[int, ...]] = field(default_factory=list)
    affine: dict[int, tuple[int, int, int]] = field(default_factory=dict)

    def add(self, position: int, values: tuple[int, ...]) -> None:
        """Express the constant at ``position`` by an existing generator, or make it one."""
        for generator, column in enumerate(self.columns):
            fit = _affine_fit(column, values)
            if fit is not None:
                self.affine[position] = (generator, *fit)
                return
        self.columns.append(values)
        self.affine[position] = (len(self.columns) - 1, 1, 0)


def _affine_fit(column: tuple[int, ...], values: tuple[int, ...]) -> tuple[int, int] | None:
    """Integers ``(a, b)`` with ``values[m] == a * column[m] + b`` for every member, or None."""
    other = next((m for m in range(1, len(column)) if column[m] != column[0]), None)
    if other is None:
        return None
    rise, run = values[other] - values[0], column[other] - column[0]
    if rise % run:
        return None
    a = rise // run
    b = values[0] - a * column[0]
    return (a, b) if all(v == a * c + b for v, c in zip(values, column)) else None


def _share_group(members: list[UOp]) -> dict[UOp, SharedExtents]:
    first = members[0]
    columns = {position: tuple(member.src[position].arg[0] for member in members)
               for position in _variable_constants(first)}  # fmt: skip
    varying = [position for position, values in columns.items() if len(set(values)) > 1]
    generators = _Generators()
    # the smallest first: a channel count generates the strides that are multiples of it
    for position in sorted(varying, key=lambda position: (abs(columns[position][0]), position)):
        generators.add(position, columns[position])
    shared = _shared_linear(members, generators)
    return {
        member: SharedExtents(shared, tuple(column[m] for column in generators.columns), len(members))
        for m, member in enumerate(members)
    }


def _shared_linear(members: list[UOp], generators: _Generators) -> UOp:
    """The group's LINEAR program: the first member's, with each varying constant computed from the
    generators, every PARAM as large as its smallest member's (a launch checks its arrays hold at
    least that much).  The generators and their multiples ``a * generator`` are read once, before
    the first loop; a constant's ``+ b`` comes just before its first use, in the innermost scope
    around all its uses (where the compiler folds it into the address it is part of, instead of
    holding one register per constant through the loops)."""
    first = members[0]
    params = [u for u in first.src if u.op is Ops.PARAM]
    slot = max(param.arg.slot for param in params) + 1
    generator_param = UOp.param(slot, (len(generators.columns),), GENERATOR_DTYPE)
    reads: list[UOp] = [generator_param]
    scaled: dict[tuple[int, int], UOp] = {}  # (generator, a) -> a * generator, read before the loops
    for index in range(len(generators.columns)):
        position = UOp.const(dtypes.index, index)
        address = UOp(Ops.INDEX, (generator_param, position))
        load = UOp(Ops.LOAD, (address,))
        scaled[index, 1] = UOp(Ops.CAST, (load,), dtypes.index)
        reads += [position, address, load, scaled[index, 1]]
    computed: dict[UOp, list[UOp]] = {}  # a varying constant -> the instructions adding its b
    values: dict[UOp, UOp] = {}  # a varying constant -> the instruction computing it
    for position, (generator, a, b) in generators.affine.items():
        if (generator, a) not in scaled:
            factor = UOp.const(dtypes.index, a)
            scaled[generator, a] = UOp(Ops.MUL, (scaled[generator, 1], factor))
            reads += [factor, scaled[generator, a]]
        constant = first.src[position]
        values[constant] = scaled[generator, a]
        if b != 0:
            offset = UOp.const(dtypes.index, b)
            computed[constant] = [offset, UOp(Ops.ADD, (scaled[generator, a], offset))]
            values[constant] = computed[constant][-1]
    resized = {param: _resized_param(param, members) for param in params}
    instructions = _rebuilt(first.src, values, computed, resized, reads)
    return UOp(Ops.LINEAR, instructions, f"{first.arg}_shared")


def _resized_param(param: UOp, members: list[UOp]) -> UOp:
    """``param`` holding as many elements as the smallest of the members' PARAMs in its slot."""
    smallest = min(_param_size(member, param.arg.slot) for member in members)
    arg = param.arg
    return UOp.param(arg.slot, (smallest,), arg.dtype, arg.device, arg.addrspace)


def _param_size(linear: UOp, slot: int) -> int:
    param = next(u for u in linear.src if u.op is Ops.PARAM and u.arg.slot == slot)
    return int(np.prod(param.shape)) if param.shape else 1


def _placements(instructions: tuple[UOp, ...], computed: dict[UOp, list[UOp]]) -> dict[int, list[UOp]]:
    """Where each constant's instructions go: before the first use when that use is in the innermost
    scope around all the uses, else before the opener (RANGE or IF) of the first use's scope that is
    one deeper than that common scope."""
    scopes = open_scopes(instructions)
    uses: dict[UOp, list[int]] = {constant: [] for constant in computed}
    for index, u in enumerate(instructions):
        for operand in u.src:
            if operand in uses:
                uses[operand].append(index)
    placements: dict[int, list[UOp]] = defaultdict(list)
    for constant, indexes in uses.items():
        if not indexes:
            continue
        common = _common_prefix([scopes[index] for index in indexes])
        first_use = indexes[0]
        at = first_use if len(scopes[first_use]) == len(common) else scopes[first_use][len(common)]
        placements[at] += computed[constant]
    return placements


def _common_prefix(paths: list[tuple[int, ...]]) -> tuple[int, ...]:
    shortest = min(paths, key=len)
    for depth in range(len(shortest)):
        if any(path[depth] != shortest[depth] for path in paths):
            return shortest[:depth]
    return shortest


def _rebuilt(
    instructions: tuple[UOp, ...],
    values: dict[UOp, UOp],
    computed: dict[UOp, list[UOp]],
    resized: dict[UOp, UOp],
    reads: list[UOp],
) -> tuple[UOp, ...]:
    """The instructions with each varying constant replaced by its ``values`` instruction (the
    ``computed`` ones placed by :func:`_placements`) and each PARAM by its ``resized`` one; ``reads``
    go before the first instruction that is not a PARAM or a CONST (the kernel's declarations)."""
    placements = _placements(instructions, computed)
    new: dict[UOp, UOp] = {**values, **resized}
    out: list[UOp] = []
    placed = False
    for index, u in enumerate(instructions):
        if u in values:
            continue
        if not placed and u.op not in (Ops.PARAM, Ops.CONST):
            out += reads
            placed = True
        out += placements.get(index, [])
        if u in resized:
            rebuilt = resized[u]
        elif any(operand in new for operand in u.src):
            rebuilt = u.replace(src=tuple(new.get(operand, operand) for operand in u.src))
        else:
            rebuilt = u
        new[u] = rebuilt
        out.append(rebuilt)
    return tuple(out) if placed else (*out, *reads)


# ---------------------------------------------------------------------------------------------
# running a member


@dataclass(kw_only=True)
class ExtentBoundKernel(CompiledKernel):
    """A member of a group: the group's compiled kernel, launched with this member's generators
    appended to its arrays (``kernel(*arrays)`` takes the member's own PARAM slots)."""

    shared: CompiledKernel
    generators: tuple[int, ...]

    @classmethod
    def bind(cls, shared: CompiledKernel, generators: tuple[int, ...]) -> ExtentBoundKernel:
        """``shared`` launched with ``generators`` as its last argument."""
        return cls(
            shared.backend,
            shared.meta,
            shared.source,
            shared.compile_s,
            shared.extra,
            shared=shared,
            generators=generators,
        )

    def generator_array(self) -> np.ndarray:
        """The generators as the array the kernel's last PARAM reads."""
        return np.array(self.generators, dtype=np.int64)

    def prepare(self, *arrays: np.ndarray) -> Launch:
        return self.shared.prepare(*arrays, self.generator_array())


__all__ = [
    "GENERATOR_DTYPE",
    "VARIABLE_USES",
    "ExtentBoundKernel",
    "SharedExtents",
    "share_extents",
]
