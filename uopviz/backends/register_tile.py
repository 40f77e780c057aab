"""A register tile's step written as a block of x86 assembly, its registers planned here.

A conv's innermost reduction loop, as the heuristic tiles it for a CPU, is a *register tile step*:
every iteration broadcasts a few scalars (a row of input columns), loads a few vectors (output
channels' weights) and adds each broadcast times each vector into its own accumulator.  GCC
compiles such a step from our vector C, but its value numbering shares a broadcast between a
window's unrolled taps (a 3x3 conv's column ``x + 1`` at tap 0 is column ``x`` at tap 1) and its
scheduler hoists loads: with the accumulators they outgrow the 16 AVX2 registers, and the step
spills and shuffles registers (ResNet-50's 3x3 conv of 256 channels at 14x14, 7 columns x 8
channels: 67% of the multiply-add peak on one core; 7 x 16 spilled worse).  Written here, the same
step reaches 87% as 7 x 16 (docs/design/cpu-conv-layout.md, section 20):

* the accumulators are the statement's in-out operands (the compiler keeps them in registers
  across the loop: nothing else in it holds a vector);
* the vectors are loaded once into registers while registers last (:meth:`RegisterTile.plan`:
  16 - accumulators - 1), the rest read by each multiply-add as its memory operand;
* each broadcast is loaded into one scratch register straight from memory (a load port, not a
  shuffle) and used by the multiply-adds of its vectors at once;
* the block's own registers are clobbers, not operands (GCC allows 30 operands and counts an in-out
  one twice: 14 accumulators and two bases); a step reading through more bases is split into
  statements of whole columns (:meth:`RegisterTile.statements`).

The multiply-adds are the same fused operations in the same order, so the results are
bit-identical to the compiler's code for the same tile.  :func:`find_register_tiles` decides which
loops are such steps from the LINEAR program alone, and leaves to the compiler the tiles it keeps in
registers itself (at most half of them accumulators) and kernels of two tiles.  The C renderer
spells the statements as GCC extended ``asm`` (``CFamilyRenderState.render_register_tile``), the
LLVM renderer as inline ``asm`` calls (``LLVMRenderState.render_register_tile``), there only for
tiles of more accumulators than its own code keeps in registers where the nest reduces over a
window's taps (``llvm_renderer.OWN_WINDOW_TILE_ACCUMULATORS``), the window's rows kept rolled around
the block (``llvm_renderer.loops_around_register_tiles``); LLVM's
vectors of 16 lanes are two registers each, a :class:`Part` apiece.  Only x86-64 targets with FMA
and 32-byte registers get blocks (``x86-64-v3``, ``native`` on such a CPU): AVX-512 has not been
measured on a host of its own.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from uopviz.backends.linear_program import underlying_buffer
from uopviz.backends.target import CPUTarget
from uopviz.core.affine import constant_difference, contiguous_start
from uopviz.core.dtype import dtypes
from uopviz.core.ops import AxisType, Ops
from uopviz.core.uop import UOp

#: the vector registers the statement's register operands may take ("x": xmm/ymm 0-15 on AVX2)
ASM_VECTOR_REGISTERS = 16
#: GCC's limit on an ``asm`` statement's operands
ASM_MAX_OPERANDS = 30
#: the most base addresses (general registers) one step may read through
MAX_BASES = 4


@dataclass(frozen=True, eq=False)
class Part:
    """One register's share of a vector value: the ``lanes`` lanes from ``part * lanes`` on of the
    value ``uop`` computes (a vector of 16 float32 lanes is two ymm registers' parts, 0 and 1)."""

    uop: UOp
    part: int

    # by the uop's identity: a UOp's ``==`` builds a comparison uop
    def __eq__(self, other: object) -> bool:
        return isinstance(other, Part) and self.uop is other.uop and self.part == other.part

    def __hash__(self) -> int:
        return hash((id(self.uop), self.part))


@dataclass(frozen=True)
class TileProduct:
    """One multiply-add of the step on one register: ``accumulator += broadcast * vector``."""

    accumulator: Part  # of the INDEX of the accumulator in the register buffer
    broadcast: UOp  # the scalar LOAD broadcast to every lane
    vector: Part  # of the vector LOAD


@dataclass(frozen=True)
class RegisterTile:
    """A loop whose body is one register tile step (see the module docstring)."""

    products: tuple[TileProduct, ...]
    #: the lanes of one register (8 float32 on AVX2)
    lanes: int
    #: each base address: (buffer, the index it adds to the buffer)
    bases: tuple[tuple[UOp, UOp], ...]
    #: each load's part of the step (a scalar load: part 0): (its base's number, its element offset
    #: from the base)
    addresses: dict[Part, tuple[int, int]]
    #: the uops the statement computes: not rendered one by one
    members: frozenset[UOp]

    @property
    def accumulators(self) -> tuple[Part, ...]:
        """The accumulators (parts of their INDEXes) in the order their first multiply-add comes."""
        return tuple(dict.fromkeys(p.accumulator for p in self.products))

    @property
    def vectors(self) -> tuple[Part, ...]:
        """The vectors (parts of their LOADs), in the order their first multiply-add comes."""
        return tuple(dict.fromkeys(p.vector for p in self.products))

    @property
    def broadcasts(self) -> tuple[UOp, ...]:
        """The broadcast scalar LOADs, in the order their first multiply-add comes."""
        return tuple(dict.fromkeys(p.broadcast for p in self.products))

    def plan(self) -> tuple[Part, ...]:
        """The vectors kept in registers: as many as the registers left by the accumulators and one
        broadcast register hold (the rest are memory operands of their multiply-adds)."""
        free = ASM_VECTOR_REGISTERS - len(self.accumulators) - 1
        return self.vectors[: max(free, 0)]

    def scratch_registers(self) -> tuple[int, ...]:
        """The numbers of the vector registers the block takes for itself (clobbers, not operands:
        GCC's 30 operands hold 14 in-out accumulators and two bases, no more): the broadcast's, then
        each kept vector's, from the last register down."""
        return tuple(range(ASM_VECTOR_REGISTERS - 1, ASM_VECTOR_REGISTERS - 2 - len(self.plan()), -1))

    def statements(
        self, operand: Callable[[int], str], register: Callable[[int], str]
    ) -> list[tuple[tuple[Part, ...], list[str]]]:
        """The step as ``asm`` statements, each ``(its accumulators, its instructions)`` (AT&T
        syntax): the columns (broadcasts) in order, as many to a statement as GCC's
        :data:`ASM_MAX_OPERANDS` allow (an in-out accumulator counts twice: 7 columns of 2 vectors
        and 3 bases are two statements), each loading the kept vectors it reads.  ``operand(n)``
        spells a statement's operand ``n`` (GCC ``%n``, LLVM ``$n``): its accumulators (in-out)
        first, then the bases (pointers); ``register(n)`` spells vector register ``n`` (GCC
        ``%%ymmn``)."""
        statements: list[tuple[tuple[Part, ...], list[str]]] = []
        chunk: list[UOp] = []
        for broadcast in self.broadcasts:
            operands = 2 * len(self._accumulators_of([*chunk, broadcast])) + len(self.bases)
            if chunk and operands > ASM_MAX_OPERANDS:
                statements.append(self._statement(chunk, operand, register))
                chunk = []
            chunk.append(broadcast)
        statements.append(self._statement(chunk, operand, register))
        return statements

    def _accumulators_of(self, broadcasts: Sequence[UOp]) -> tuple[Part, ...]:
        """The accumulators the multiply-adds of ``broadcasts`` add into, in order."""
        columns = {id(b) for b in broadcasts}
        return tuple(dict.fromkeys(p.accumulator for p in self.products if id(p.broadcast) in columns))

    def _statement(
        self, broadcasts: Sequence[UOp], operand: Callable[[int], str], register: Callable[[int], str]
    ) -> tuple[tuple[Part, ...], list[str]]:
        """The statement of ``broadcasts``' multiply-adds: the kept vectors they read loaded, then
        each broadcast loaded and multiplied by its vectors into their accumulators."""
        columns = {id(b) for b in broadcasts}
        products = [p for p in self.products if id(p.broadcast) in columns]
        accumulators = self._accumulators_of(broadcasts)
        number = {a: i for i, a in enumerate(accumulators)}
        broadcast_register, *kept_registers = map(register, self.scratch_registers())
        read = {p.vector for p in products}
        kept = {v: name for v, name in zip(self.plan(), kept_registers) if v in read}
        itemsize = dtypes.float32.itemsize

        def memory(load: Part) -> str:
            base, offset = self.addresses[load]
            return f"{offset * itemsize}({operand(len(accumulators) + base)})"

        lines = [f"vmovups {memory(vector)}, {name}" for vector, name in kept.items()]
        for broadcast in broadcasts:
            lines.append(f"vbroadcastss {memory(Part(broadcast, 0))}, {broadcast_register}")
            for p in products:
                if p.broadcast is broadcast:
                    source = kept.get(p.vector) or memory(p.vector)
                    accumulator = operand(number[p.accumulator])
                    lines.append(f"vfmadd231ps {source}, {broadcast_register}, {accumulator}")
        return accumulators, lines


def register_tiles_supported(target: CPUTarget) -> bool:
    """Whether code for ``target`` may use the blocks: an x86-64 target with FMA and 32-byte
    registers, built on an x86-64 host (the assembly is x86's)."""
    return (
        platform.machine() in ("x86_64", "AMD64")
        and target.level is not None
        and target.has_fma
        and target.vector_bytes == 32
    )


def find_register_tiles(
    program: Sequence[UOp], lanes: int, window_tiles_above: int = 0
) -> dict[UOp, RegisterTile]:
    """The innermost loop of ``program`` whose body is a register tile step on float32 vectors of
    ``lanes`` lanes, by its RANGE, where it is the kernel's only one (else none).  A tile whose loop
    nest reduces over a window's taps as well as channels (not :func:`reduces_over_one_axis`) is one
    only with more than ``window_tiles_above`` accumulator registers (LLVM's own code keeps a 5 x 16
    tile's ten in registers: ``llvm_renderer.OWN_WINDOW_TILE_ACCUMULATORS``)."""
    uses: dict[UOp, list[UOp]] = {}
    for u in program:
        for s in u.src:
            uses.setdefault(s, []).append(u)
    tiles: dict[UOp, RegisterTile] = {}
    nests: dict[UOp, list[UOp]] = {}  # each tile's loop and the loops around it
    opened: list[tuple[UOp, int]] = []
    for position, u in enumerate(program):
        if u.op is Ops.RANGE:
            opened.append((u, position))
        elif u.op is Ops.END and opened:
            nest = [loop for loop, _ in opened]
            loop, start = opened.pop()
            body = program[start + 1 : position]
            if not any(b.op in (Ops.RANGE, Ops.END) for b in body):
                tile = _tile_of(body, uses, lanes)
                if tile is not None:
                    tiles[loop] = tile
                    nests[loop] = nest
    # a kernel of two tiles (a residual's conv fused into another's) keeps the first's accumulators
    # through the second's loop, where the block's own registers would push them to memory: the
    # compiler's code (ResNet-50's 512 -> 1024 pair at 7x7: 2.39 ms, 2.74 as blocks)
    if len(tiles) != 1:
        return {}
    return {loop: tile for loop, tile in tiles.items()
            if reduces_over_one_axis(nests[loop]) or len(tile.accumulators) > window_tiles_above}


def reduces_over_one_axis(loops: Sequence[UOp]) -> bool:
    """Whether at most one of ``loops`` (a loop nest, RANGEs) is a REDUCE loop of more than one trip
    (a 1x1 conv's channels, its window's loops of one trip; a 3x3 conv's taps are two more)."""
    reducing = [loop for loop in loops if loop.arg[1] is AxisType.REDUCE
                and not (loop.src[0].op is Ops.CONST and loop.src[0].arg[0] == 1)]
    return len(reducing) <= 1


def _tile_of(body: Sequence[UOp], uses: dict[UOp, list[UOp]], lanes: int) -> RegisterTile | None:
    """The register tile step ``body`` is, or None when it is anything else.  Its vectors may be
    several registers wide (LLVM's 16 float32 lanes on AVX2): each register is a part of its own."""
    in_body = set(body)
    products: list[TileProduct] = []
    members: set[UOp] = set()
    for u in body:
        if u.op is Ops.MULACC and u.dtype.scalar is dtypes.float32 and u.dtype.count >= lanes:
            found = _products(u, uses, in_body, lanes)
            if found is None:
                return None
            products.extend(found[0])
            members.update(found[1])
    if not products:
        return None
    for u in body:  # everything else must be address arithmetic
        if u not in members and u.op not in (Ops.INDEX, Ops.AFTER) and u.dtype.scalar is not dtypes.index:
            return None
    addressed = _addresses([Part(p.broadcast, 0) for p in products] + [p.vector for p in products], lanes)
    if addressed is None:
        return None
    bases, addresses = addressed
    tile = RegisterTile(tuple(products), lanes, bases, addresses, frozenset(members))
    # the compiler's own code where it keeps the tile in registers (half of them accumulators: a
    # depthwise conv's row, a 7 x 8 tile, measured 1.0-1.1x slower as blocks); a statement takes
    # at least one column (GCC counts an in-out operand twice)
    if len(tile.accumulators) <= ASM_VECTOR_REGISTERS // 2:
        return None
    widest = max(len(tile._accumulators_of([b])) for b in tile.broadcasts)
    if len(tile.accumulators) + 1 > ASM_VECTOR_REGISTERS or 2 * widest + len(bases) > ASM_MAX_OPERANDS:
        return None
    return tile


def _products(
    fma: UOp, uses: dict[UOp, list[UOp]], body: set[UOp], lanes: int
) -> tuple[list[TileProduct], list[UOp]] | None:
    """The multiply-add ``fma`` as products of the step, one per register of ``lanes`` lanes, and
    the uops it alone uses, or None where it is not ``broadcast * vector + accumulator`` stored back
    to its accumulator."""
    width = fma.dtype.count
    first, second, accumulated = fma.src
    broadcast, vector = (first, second) if first.op is Ops.VECTORIZE else (second, first)
    stores = uses.get(fma, [])
    if (
        broadcast.op is not Ops.VECTORIZE
        or any(s is not broadcast.src[0] for s in broadcast.src)
        or width % lanes
        or accumulated.op is not Ops.LOAD
        or len(accumulated.src) != 1
        or len(stores) != 1
        or stores[0].op is not Ops.STORE
        or stores[0].src[0] is not accumulated.src[0]
        or uses.get(accumulated) != [fma]
    ):
        return None
    scalar = broadcast.src[0]
    accumulator = accumulated.src[0]
    # a load may come before the loop (a 1x1 conv's broadcast, read once around its loops of one
    # trip): the block reads it again, the same value, since it writes nothing but accumulators
    if not (
        _plain_load(scalar, count=1)
        and _plain_load(vector, count=width)
        and underlying_buffer(accumulator.src[0]).op is Ops.BUFFER
        and all(u.op is Ops.MULACC for u in uses.get(broadcast, []))
        and all(u.op is Ops.VECTORIZE and u.src[0] is scalar for u in uses.get(scalar, []))
        and all(u.op is Ops.MULACC for u in uses.get(vector, []))
        and fma in body
        and accumulated in body
    ):
        return None
    members = [fma, broadcast, scalar, vector, accumulated, stores[0]]
    parts = range(width // lanes)
    return [TileProduct(Part(accumulator, part), scalar, Part(vector, part)) for part in parts], members


def _plain_load(load: UOp, count: int) -> bool:
    """An ungated float32 LOAD of ``count`` lanes from memory: a kernel parameter
    or a buffer of the kernel's own (a 1x1 conv's input strip staged before the tile's loop)."""
    return (
        load.op is Ops.LOAD
        and len(load.src) == 1
        and load.dtype == dtypes.float32.vec(count)
        and load.src[0].op is Ops.INDEX
        and underlying_buffer(load.src[0].src[0]).op in (Ops.PARAM, Ops.BUFFER)
    )


def _addresses(
    loads: Sequence[Part], lanes: int
) -> tuple[tuple[tuple[UOp, UOp], ...], dict[Part, tuple[int, int]]] | None:
    """The addresses of the loads' parts (a scalar load is its part 0) as bases (buffer, an index the
    program computes) and element offsets from them: parts of one buffer whose indices differ by
    constants share a base (a row of 7 broadcast columns is one pointer).  None where a vector
    part's lanes are not contiguous (a vector's parts may lie apart: LLVM's 16 weights of 8-channel
    blocks) or the step reads through more than :data:`MAX_BASES` bases."""
    bases: list[tuple[UOp, UOp]] = []
    addresses: dict[Part, tuple[int, int]] = {}
    for load in dict.fromkeys(loads):
        index = load.uop.src[0]
        buffer, element = index.src[0], index.src[1]
        if load.uop.dtype.count > 1:
            if element.op is not Ops.VECTORIZE:
                return None
            part_lanes = element.src[load.part * lanes : (load.part + 1) * lanes]
            if contiguous_start(UOp(Ops.VECTORIZE, part_lanes)) is None:
                return None
            element = part_lanes[0]
        found = next(((number, offset) for number, (b, base) in enumerate(bases) if b is buffer
                      for offset in [constant_difference(base, element)] if offset is not None), None)
        if found is None:
            found = (len(bases), 0)
            bases.append((buffer, element))
        addresses[load] = found
    if len(bases) > MAX_BASES:
        return None
    return tuple(bases), addresses
