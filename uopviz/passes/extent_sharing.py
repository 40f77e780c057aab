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

A scalar innermost loop that only stages values into a kernel-local array (a conv's input rows
copied to a register BUFFER before the tile reads them) is not such a loop: it runs once per
reduction step outside the tile and the compiler has nothing to vectorise in it (its stores are a
few scattered lanes), so its bound may vary too, and the local array's size with it: the group's
array is as large as its largest member's: DenseNet-121's 151 LINEAR programs are 54 forms
without it, 47 with it (41 where the lanes of an index vector that are constants themselves vary
too, below).  Forms are written over the uses of constants, not their instructions: a
member whose channel count equals another constant of its program (one CONST for both) has an
instruction fewer, and still shares where every use of that CONST may vary.  A constant that has
one use that may not vary stays whole in the code: measured on MobileNet-v2, letting its other
uses vary (per-lane address offsets of a padded buffer read at run time) made two shared kernels
1.5x and 2.7x their own time.  The lanes of a contiguous vector address need care
(:func:`_contiguous_lanes`): the second 8-channel vector of a 16-channel weight tile sits
``channels * 8`` elements after the first, and with each lane's offset read at run time C loaded it
lane by lane (VGG-16's 3x3 convolutions 1.7-1.9x their own time).  So a lane's varying constant is
rebuilt as ``(value + a * generator) + b``: the eight lanes share the sum and differ by the
constants ``b``, and the vector is loaded at once.  A lane that is a constant alone (DenseNet-121's
1x1 convs at 28x28 and 56x56: the 32-channel tile's second weight vector at ``channels * 16 + 0 ..
15``) becomes ``a * generator + b`` the same way; measured each kernel alone in the model (C and LLVM,
Sapphire Rapids), shared against its own: 0.97-1.05x, the changed kernels' sum 1.01x (C) and 1.00x
(LLVM), and 7 fewer of the largest sources to compile.  LLVM's vector of those 16 channels is one
16-lane index of two such runs; its second run rebuilt so too, it stays a register tile block
(DenseNet-121 on LLVM: its shared 1x1 convs at 14x14 and 7x7 0.65-0.75x their time as LLVM's own
code, whose 14 accumulators partly lived on the stack; the model 46.9 -> 43.1 ms).  Measured each
kernel alone, warm, in the model, shared against its own source (C, 2-core AMD EPYC): VGG-16's 3x3
convolutions and DenseNet-121's 1x1 ones the same time (0.97-1.03x); DenseNet-121 compiles 39
sources, VGG-16 33.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from uopviz.backends.base import CompiledKernel, Launch
from uopviz.backends.linear_program import open_scopes
from uopviz.core.affine import contiguous_start
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
    return ExtentSharing(linears, minimum_group).everything()


class ExtentSharing:
    """:func:`share_extents` over ``linears``, worked out outline by outline when asked for
    (:meth:`get`): programs of different :func:`_outline` never share, so the Render stage renders
    and starts building the first kernels while the groups of the later ones are still unknown
    (DenseNet-121's C compiler started 0.4 s after Render did when every group came first)."""

    def __init__(self, linears: Sequence[UOp], minimum_group: int = 2) -> None:
        self.minimum_group = minimum_group
        self.outlines: dict[tuple, list[UOp]] = defaultdict(list)
        self.outline_of: dict[UOp, tuple] = {}
        for linear in dict.fromkeys(linears):
            outline = self.outline_of[linear] = _outline(linear)
            self.outlines[outline].append(linear)
        self.worked_out: set[tuple] = set()
        self.shared: dict[UOp, SharedExtents] = {}

    def get(self, linear: UOp) -> SharedExtents | None:
        """``linear``'s group program and generator values, or None where it shares with none."""
        outline = self.outline_of.get(linear)
        if outline is None:
            return None
        if outline not in self.worked_out:
            self.worked_out.add(outline)
            members = self.outlines[outline]
            if len(members) >= self.minimum_group:
                self.shared.update(_share_by_form(members, self.minimum_group))
        return self.shared.get(linear)

    def everything(self) -> dict[UOp, SharedExtents]:
        """Every program that shares, each with its group's program and its generator values."""
        for members in self.outlines.values():
            self.get(members[0])
        return self.shared


def _outline(linear: UOp) -> tuple:
    """What two LINEAR programs of one form (:func:`_form`) certainly have in common, cheap to
    tell: each instruction's op, dtype, arg and operand count, in order, leaving out the index
    constants (and all but the op of PARAMs and BUFFERs, whose sizes may differ)."""
    return tuple((u.op,) if u.op in (Ops.PARAM, Ops.BUFFER) else (u.op, u.dtype, u.arg, len(u.src))
                 for u in linear.src if not _is_index_constant(u))


def _share_by_form(linears: Sequence[UOp], minimum_group: int) -> dict[UOp, SharedExtents]:
    """:func:`share_extents` of distinct ``linears``: grouped by :func:`_form`."""
    groups: dict[tuple, list[UOp]] = defaultdict(list)
    sites = {linear: _variable_sites(linear) for linear in linears}
    for linear, variable in sites.items():
        groups[_form(linear, variable)].append(linear)
    shared: dict[UOp, SharedExtents] = {}
    for members in groups.values():
        if len(members) >= minimum_group:
            shared.update(_share_group(members, [sites[member] for member in members]))
    return shared


# ---------------------------------------------------------------------------------------------
# the form of a LINEAR program: its instructions with the variable constants' values left out


def _variable_sites(linear: UOp) -> set[tuple[int, int]]:
    """The uses of index constants whose value may vary, as ``(instruction, operand slot)``
    positions in ``linear.src``: every use by an op of VARIABLE_USES, but never the length of a
    THREAD range and never inside a scalar innermost loop (its own bound, or its body's addresses:
    with them known the compiler unrolls and vectorises that loop itself), and none of a constant
    that has such a use (the same value in the code: measured, a shared kernel whose strides were
    partly read at run time ran up to 2.7x its own).  Sites, not instructions, because one CONST
    may be a channel count and a stride that happen to be equal in one member."""
    instructions = linear.src
    scopes = open_scopes(instructions)
    compiler_loops = _scalar_innermost_loops(instructions, scopes)
    # constants with a use that may not vary: none of their uses varies
    lanes = _contiguous_lanes(instructions)
    fixed: set[UOp] = lanes.fixed
    sites = set(lanes.constant)  # lanes that are constants: each a multiple of a generator plus its own
    for index, user in enumerate(instructions):
        constants = [slot for slot, operand in enumerate(user.src) if _is_index_constant(operand)]
        if not constants:
            continue
        loops = [opener for opener in (*scopes[index], index) if instructions[opener].op is Ops.RANGE]
        variable = (
            user.op in VARIABLE_USES
            and not (user.op is Ops.RANGE and user.arg[1] is AxisType.THREAD)
            and not (loops and loops[-1] in compiler_loops)
        )
        for slot in constants:
            if (index, slot) in lanes.constant:
                continue
            if variable:
                sites.add((index, slot))
            else:
                fixed.add(user.src[slot])
    return {(index, slot) for index, slot in sites if instructions[index].src[slot] not in fixed}


@dataclass
class _ContiguousLanes:
    """The lanes of a LINEAR program's contiguous vector indices (:func:`_contiguous_lanes`)."""

    added: set[tuple[int, int]] = field(default_factory=set)  # a lane's constant added to a value
    constant: set[tuple[int, int]] = field(default_factory=set)  # a lane that is a constant
    fixed: set[UOp] = field(default_factory=set)  # constants deeper inside lanes: never varied


def _contiguous_lanes(instructions: tuple[UOp, ...]) -> _ContiguousLanes:
    """The lanes of vector indices whose lanes are consecutive, or runs of consecutive lanes
    (:func:`_contiguous_runs`; a renderer loads or stores such a vector, or each run, at once
    because it reads ``base + 0 .. base + 7`` from the constants).  ``added``: each lane's own
    added constant, as ``(instruction, operand slot)``, where the lane is an ADD of it to a value
    (or a MULACC with it as the addend); varying, it is rebuilt as the value plus the generator's
    multiple, plus the constant's own offset (:func:`_lane_rebuilt`), so the lanes still differ by
    constants.  ``constant``: each lane that is an index constant itself, as ``(vector, lane)``
    (the 16 channels ``c .. c + 15`` a 1x1 conv's second weight vector starts at, ``c`` the input
    channel count: DenseNet-121's 28x28 and 56x56 ones); varying, lane ``k`` is ``a * generator +
    b_k``, one value plus a constant per lane, so the vector stays one load.  ``fixed``: the
    constants deeper inside lanes, which stay in the code (read at run time they made VGG-16's
    shared 256- and 512-channel 3x3 convolutions load their second weight vector lane by lane on
    C: 1.7-1.9x either's own time)."""
    position = {u: index for index, u in enumerate(instructions)}
    lanes = _ContiguousLanes()
    sites, fixed = lanes.added, lanes.fixed
    for u in instructions:
        if u.op is not Ops.VECTORIZE or u.dtype.scalar != dtypes.index or not _contiguous_runs(u):
            continue
        pending = []
        for number, lane in enumerate(u.src):
            if _is_index_constant(lane):
                lanes.constant.add((position[u], number))
                continue
            slot = _lane_constant_slot(lane)
            if slot is None:
                pending.append(lane)
            else:
                sites.add((position[lane], slot))
                pending += [operand for other, operand in enumerate(lane.src) if other != slot]
        while pending:
            term = pending.pop()
            if _is_index_constant(term):
                fixed.add(term)
            elif term.op is Ops.ADD:
                pending.extend(term.src)
            elif term.op is Ops.MULACC:  # a * b + c: only its addend offsets the lane
                pending.append(term.src[2])
    return lanes


def _contiguous_runs(vector: UOp) -> bool:
    """Whether the lanes of an index VECTORIZE are contiguous, or runs of contiguous lanes of one
    power-of-two length (4 or more): LLVM's 16 float32 weights on AVX2 are two 8-channel blocks of
    the blocked layout, a whole plane of channels apart, each part loaded at once.  Their second
    part's lanes rebuilt as one value plus constants stay one load (DenseNet-121's shared 1x1 convs
    at 14x14 and 7x7 then are register tile blocks on LLVM, :mod:`uopviz.backends.register_tile`)."""
    count = len(vector.src)
    run = count
    while run >= 4:
        if count % run == 0 and all(
            contiguous_start(UOp(Ops.VECTORIZE, vector.src[start : start + run])) is not None
            for start in range(0, count, run)
        ):
            return True
        run //= 2
    return False


def _lane_constant_slot(lane: UOp) -> int | None:
    """The operand slot of the constant a lane adds to a value that is not a constant: ``x + 3``,
    ``3 + x``, ``a * b + 3``; None for any other lane."""
    if lane.op is Ops.ADD:
        constants = [slot for slot, operand in enumerate(lane.src) if _is_index_constant(operand)]
        return constants[0] if len(constants) == 1 else None
    if (
        lane.op is Ops.MULACC
        and _is_index_constant(lane.src[2])
        and not any(_is_index_constant(operand) for operand in lane.src[:2])
    ):
        return 2
    return None


def _is_index_constant(u: UOp) -> bool:
    # identity first: nearly every index CONST holds dtypes.index itself (== compares five fields)
    return u.op is Ops.CONST and (u.dtype is dtypes.index or u.dtype == dtypes.index)


def _scalar_innermost_loops(instructions: tuple[UOp, ...], scopes: list[tuple[int, ...]]) -> set[int]:
    """The positions of the RANGEs with no RANGE inside and no vector value in their body that
    compute (store something other than a staging copy, :func:`_stages`): loops the C compiler
    vectorises and unrolls itself when it knows their bounds and strides (``scopes``: each
    instruction's, :func:`open_scopes`)."""
    ranges = {index for index, u in enumerate(instructions) if u.op is Ops.RANGE}
    outer = {opener for index in ranges for opener in scopes[index] if opener in ranges}
    vectorised = set()
    computing = set()  # loops with a STORE that is not a copy into a kernel-local array
    for index, u in enumerate(instructions):
        loops = [opener for opener in scopes[index] if opener in ranges]
        if u.dtype.count > 1 and loops:
            vectorised.add(loops[-1])
        if u.op is Ops.STORE and loops and not _stages(u):
            computing.add(loops[-1])
    return (ranges - outer - vectorised) & computing


def _stages(store: UOp) -> bool:
    """Whether ``store`` copies a loaded value into a kernel-local BUFFER (a staging copy; an
    accumulator's update stores a computed value)."""
    target = store.src[0]
    while target.op not in (Ops.PARAM, Ops.BUFFER) and target.src:
        target = target.src[0]
    return target.op is Ops.BUFFER and store.src[1].op is Ops.LOAD


def _form(linear: UOp, variable: set[tuple[int, int]]) -> tuple:
    """What two LINEAR programs must share to share a kernel: every instruction's op, dtype, arg
    and operands (by position among the instructions that are not index constants), an index
    constant's value where its use may not vary (``variable``: the uses that may,
    :func:`_variable_sites`), and nothing of the sizes of PARAMs and kernel-local BUFFERs except
    those of PARAMs read by gated vectors (:func:`_gated_params`)."""
    position: dict[UOp, int] = {}
    form: list[tuple] = []
    gated = _gated_params(linear.src)
    for index, u in enumerate(linear.src):
        if _is_index_constant(u):
            continue  # described where it is used
        position[u] = len(form)
        if u.op is Ops.PARAM:
            form.append((u.op, u.arg, u.shape if u in gated else None))
        elif u.op is Ops.BUFFER:  # as large as the group's largest (_shared_linear)
            form.append((u.op, u.dtype, replace(u.arg, size=0)))
        else:
            form.append((u.op, u.dtype, u.arg, tuple(
                _operand_form(operand, (index, slot) in variable, position)
                for slot, operand in enumerate(u.src))))
    return tuple(form)


def _gated_params(instructions: tuple[UOp, ...]) -> set[UOp]:
    """The PARAMs read by a gated vector LOAD.  Their sizes belong to a program's form: a renderer loads a
    gated vector whole where it lies inside the buffer, testing its start against the PARAM's size,
    and a group's PARAM is as large as its smallest member's, so a larger member read its vectors
    past that size lane by lane (SqueezeNet-1.1's shared 1x1 convs over a padded input: the
    128-channel one 1.32x its own time on C)."""
    gated = set()
    for u in instructions:
        if u.op is Ops.LOAD and len(u.src) == 3 and u.dtype.count > 1:
            buffer = u.src[0]
            while buffer.op not in (Ops.PARAM, Ops.BUFFER) and buffer.src:
                buffer = buffer.src[0]
            if buffer.op is Ops.PARAM:
                gated.add(buffer)
    return gated


def _operand_form(operand: UOp, variable: bool, position: dict[UOp, int]) -> Any:
    if _is_index_constant(operand):
        return "variable" if variable else ("constant", operand.arg)
    # an operand that is no instruction (a shape) by identity: never compared as a UOp (== builds one)
    return position.get(operand, ("outside", id(operand)))


def _site_values(linear: UOp, variable: set[tuple[int, int]]) -> dict[tuple[int, int], int]:
    """The value of the index constant at each variable use site of ``linear`` (``variable``:
    :func:`_variable_sites`), keyed by the site's ``(ordinal, slot)``: its user's position among
    the instructions that are not index constants (the same in every member of a group) and the
    operand slot."""
    ordinal = _ordinals(linear.src)
    return {(ordinal[index], slot): int(linear.src[index].src[slot].arg[0]) for index, slot in variable}


def _ordinals(instructions: tuple[UOp, ...]) -> dict[int, int]:
    """Each instruction's position among those that are not index constants."""
    kept = [index for index, u in enumerate(instructions) if not _is_index_constant(u)]
    return {index: ordinal for ordinal, index in enumerate(kept)}


# ---------------------------------------------------------------------------------------------
# a group: generators, the shared program, each member's values


@dataclass
class _Generators:
    """The generators of a group (each a column of values, one per member) and each varying use
    site's ``(generator, a, b)``: its value is ``a * generator + b`` in every member."""

    columns: list[tuple[int, ...]] = field(default_factory=list)
    affine: dict[tuple[int, int], tuple[int, int, int]] = field(default_factory=dict)

    def add(self, site: tuple[int, int], values: tuple[int, ...]) -> None:
        """Express the constant at use ``site`` by an existing generator, or make it one."""
        for generator, column in enumerate(self.columns):
            fit = _affine_fit(column, values)
            if fit is not None:
                self.affine[site] = (generator, *fit)
                return
        self.columns.append(values)
        self.affine[site] = (len(self.columns) - 1, 1, 0)


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


def _share_group(members: list[UOp], sites: list[set[tuple[int, int]]]) -> dict[UOp, SharedExtents]:
    values = [_site_values(member, variable) for member, variable in zip(members, sites)]
    columns = {site: tuple(member_values[site] for member_values in values) for site in values[0]}
    varying = [site for site, column in columns.items() if len(set(column)) > 1]
    generators = _Generators()
    # the smallest first: a channel count generates the strides that are multiples of it
    for site in sorted(varying, key=lambda site: (abs(columns[site][0]), site)):
        generators.add(site, columns[site])
    shared = _shared_linear(members, generators)
    return {
        member: SharedExtents(shared, tuple(column[m] for column in generators.columns), len(members))
        for m, member in enumerate(members)
    }


def _shared_linear(members: list[UOp], generators: _Generators) -> UOp:
    """The group's LINEAR program: the first member's, with each varying use of a constant computed
    from the generators, every PARAM as large as its smallest member's (a launch checks its arrays
    hold at least that much) and every kernel-local BUFFER as large as its largest member's.  The
    generators and their multiples ``a * generator`` are read once, before the first loop; a
    value's ``+ b`` comes just before its first use, in the innermost scope around all its uses
    (where the compiler folds it into the address it is part of, instead of holding one register
    per value through the loops)."""
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
    computed: dict[UOp, list[UOp]] = {}  # a value a * generator + b -> the instructions adding b
    sites: dict[tuple[int, int], UOp] = {}  # a varying use site -> the instruction computing it
    lanes: dict[tuple[int, int], tuple[UOp, int]] = {}  # a lane's site -> (a * generator, b)
    lane_sites = _nested_lane_sites(first, generators)
    for site, (generator, a, b) in generators.affine.items():
        if (generator, a) not in scaled:
            factor = UOp.const(dtypes.index, a)
            scaled[generator, a] = UOp(Ops.MUL, (scaled[generator, 1], factor))
            reads += [factor, scaled[generator, a]]
        sites[site] = scaled[generator, a]
        if site in lane_sites:
            lanes[site] = (scaled[generator, a], b)
        elif b != 0:
            offset = UOp.const(dtypes.index, b)
            value = UOp(Ops.ADD, (scaled[generator, a], offset))
            computed[value] = [offset, value]
            sites[site] = value
    resized = {param: _resized_param(param, members) for param in params}
    # the k-th BUFFER of each member is the same array (the members' forms are equal)
    buffers = [[u for u in member.src if u.op is Ops.BUFFER] for member in members]
    for k, u in enumerate(buffers[0]):
        largest = max(member_buffers[k].arg.size for member_buffers in buffers)
        resized[u] = u.replace(arg=replace(u.arg, size=largest)) if largest != u.arg.size else u
    instructions = _rebuilt(first.src, sites, computed, resized, reads, lanes)
    return UOp(Ops.LINEAR, instructions, f"{first.arg}_shared")


def _nested_lane_sites(first: UOp, generators: _Generators) -> set[tuple[int, int]]:
    """The varying lane sites (:func:`_contiguous_lanes`, as ``(ordinal, slot)``) that may be
    rebuilt as ``(value + a * generator) + b`` (:func:`_rebuilt`): the lanes that add the same
    multiple to the same value share that sum, computed just before the first of them, so every
    other must sit in that one's scope or deeper."""
    instructions = first.src
    ordinal = _ordinals(instructions)
    scopes = open_scopes(instructions)
    sharing: dict[tuple, list[tuple[int, int]]] = defaultdict(list)  # the sum -> its lanes' sites
    for index, slot in sorted(_contiguous_lanes(instructions).added):
        site = (ordinal[index], slot)
        if site in generators.affine:
            generator, a, _ = generators.affine[site]
            lane = instructions[index]
            others = tuple(id(operand) for other, operand in enumerate(lane.src) if other != slot)
            sharing[lane.op, slot, others, generator, a].append((index, slot))
    nested = set()
    for members in sharing.values():
        first_scope = scopes[members[0][0]]
        if all(scopes[index][: len(first_scope)] == first_scope for index, _ in members):
            nested.update((ordinal[index], slot) for index, slot in members)
    return nested


def _resized_param(param: UOp, members: list[UOp]) -> UOp:
    """``param`` holding as many elements as the smallest of the members' PARAMs in its slot."""
    smallest = min(_param_size(member, param.arg.slot) for member in members)
    arg = param.arg
    return UOp.param(arg.slot, (smallest,), arg.dtype, arg.device, arg.addrspace)


def _param_size(linear: UOp, slot: int) -> int:
    param = next(u for u in linear.src if u.op is Ops.PARAM and u.arg.slot == slot)
    return int(np.prod(param.shape)) if param.shape else 1


def _placements(instructions: tuple[UOp, ...], uses: dict[UOp, list[int]]) -> dict[int, list[UOp]]:
    """Where each computed value's instructions go (``uses``: the value -> the positions of the
    instructions that use it): before the first use when that use is in the innermost scope around
    all the uses, else before the opener (RANGE or IF) of the first use's scope that is one deeper
    than that common scope."""
    scopes = open_scopes(instructions)
    placements: dict[int, list[UOp]] = defaultdict(list)
    for value, indexes in uses.items():
        common = _common_prefix([scopes[index] for index in indexes])
        first_use = indexes[0]
        at = first_use if len(scopes[first_use]) == len(common) else scopes[first_use][len(common)]
        placements[at].append(value)
    return placements


def _common_prefix(paths: list[tuple[int, ...]]) -> tuple[int, ...]:
    shortest = min(paths, key=len)
    for depth in range(len(shortest)):
        if any(path[depth] != shortest[depth] for path in paths):
            return shortest[:depth]
    return shortest


def _rebuilt(
    instructions: tuple[UOp, ...],
    sites: dict[tuple[int, int], UOp],
    computed: dict[UOp, list[UOp]],
    resized: dict[UOp, UOp],
    reads: list[UOp],
    lanes: dict[tuple[int, int], tuple[UOp, int]],
) -> tuple[UOp, ...]:
    """The instructions with the constant at each varying use site (``(ordinal, slot)``,
    :func:`_site_values`) replaced by its ``sites`` instruction (the ``computed`` ones placed by
    :func:`_placements`), each PARAM or BUFFER by its ``resized`` one, and the index constants no
    instruction uses any more left out; ``reads`` go before the first instruction that is not a
    PARAM, a BUFFER or a CONST (the kernel's declarations).  A lane of a contiguous vector index
    whose site is in ``lanes`` (``(a * generator, b)``) becomes the lane's value with ``a *
    generator`` in place of the constant, plus ``b``: the lanes of one vector share the first
    part and differ by constants, as in each member."""
    ordinal = _ordinals(instructions)
    replaced: dict[int, dict[int, UOp]] = defaultdict(dict)  # position -> operand slot -> value
    uses: dict[UOp, list[int]] = defaultdict(list)
    for index, at in ordinal.items():
        for slot in range(len(instructions[index].src)):
            value = sites.get((at, slot))
            if value is not None:
                replaced[index][slot] = value
                if value in computed and index not in uses[value]:
                    uses[value].append(index)
    placements = _placements(instructions, uses)
    new: dict[UOp, UOp] = dict(resized)
    out: list[UOp] = []
    emitted: set[UOp] = set()

    def emit(*values: UOp) -> None:
        for value in values:
            if value not in emitted:
                emitted.add(value)
                out.append(value)

    for index, u in enumerate(instructions):
        if reads and u.op not in (Ops.PARAM, Ops.BUFFER, Ops.CONST):
            emit(*reads)
            reads = []
        for value in placements.get(index, []):
            emit(*computed[value])
        given = replaced.get(index, {})
        operands = tuple(given.get(slot, new.get(operand, operand)) for slot, operand in enumerate(u.src))
        at = ordinal.get(index)
        lane_slot = next((slot for slot in given if (at, slot) in lanes), None)
        if lane_slot is not None:
            *parts, rebuilt = _lane_rebuilt(u, operands, lane_slot, *lanes[at, lane_slot])
            emit(*parts)
        elif u in resized:
            rebuilt = resized[u]
        elif any(new_operand is not operand for new_operand, operand in zip(operands, u.src)):
            rebuilt = u.replace(src=operands)
        else:
            rebuilt = u
        new[u] = rebuilt
        emit(rebuilt)
    emit(*reads)
    used = {operand for u in out for operand in u.src}
    return tuple(u for u in out if not _is_index_constant(u) or u in used)


def _lane_rebuilt(lane: UOp, operands: tuple[UOp, ...], slot: int, scaled: UOp, offset: int) -> list[UOp]:
    """The instructions of a contiguous vector's lane whose constant (at ``slot``) is ``scaled +
    offset`` in the shared program: the lane with ``scaled`` in the constant's place (the same
    instruction for every lane of the vector), then, unless ``offset`` is 0, its constant and the
    sum (the last instruction is the lane's value)."""
    value = lane.replace(src=(*operands[:slot], scaled, *operands[slot + 1 :]))
    if offset == 0:
        return [value]
    constant = UOp.const(dtypes.index, offset)
    return [value, constant, UOp(Ops.ADD, (value, constant))]


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
    "ExtentSharing",
    "share_extents",
]
