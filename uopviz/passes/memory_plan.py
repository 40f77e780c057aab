"""Register/Memory Plan: reuse storage whose lifetimes do not overlap.

**Between kernels** (GLOBAL): every intermediate buffer lives from the kernel that writes it to the
last kernel that reads it.  Buffers of one device are placed in one arena (a byte BUFFER) by
first fit; a buffer whose lifetime does not overlap another's may take its bytes.  In the graph
each planned buffer becomes ``SLICE(arena, byte offset)`` (the spec's zero-copy view), and the
:class:`MemoryPlan` reports the bytes saved.  Program inputs and outputs are never shared: the
caller owns them.

**Inside kernels** (REG): accumulators whose live ranges in the LINEAR program do not overlap
share one register buffer (same dtype, large enough).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from uopviz.backends.aligned import CACHE_LINE
from uopviz.core.dtype import AddrSpace, dtypes
from uopviz.core.ops import Ops
from uopviz.core.rewrite import PatternMatcher, UPat, graph_rewrite
from uopviz.core.uop import UOp
from uopviz.passes.schedule import Lowering, storage_of

# bytes: every planned buffer starts on a cache line (an AVX-512 load of one touches one line)
ALIGNMENT = CACHE_LINE


@dataclass(frozen=True)
class Placement:
    """Where a planned buffer lives: ``offset`` bytes into the arena of its device."""

    buffer: UOp
    arena: UOp
    offset: int
    nbytes: int
    first: int  # index of the kernel that writes it first
    last: int  # index of the kernel that reads it last


@dataclass
class MemoryPlan:
    """The placements of every intermediate buffer, and what sharing saved."""

    placements: dict[UOp, Placement] = field(default_factory=dict)
    arenas: dict[object, UOp] = field(default_factory=dict)  # device -> arena BUFFER (uint8)
    register_bytes_saved: int = 0

    @property
    def bytes_needed(self) -> int:
        """Bytes of the intermediate buffers if each had its own memory."""
        return sum(p.nbytes for p in self.placements.values())

    @property
    def bytes_planned(self) -> int:
        """Bytes of the arenas that hold them."""
        return sum(a.arg.size for a in self.arenas.values())

    @property
    def bytes_saved(self) -> int:
        """Bytes saved by sharing (intermediates only; registers in ``register_bytes_saved``)."""
        return self.bytes_needed - self.bytes_planned

    def report(self) -> str:
        """A human-readable summary of the plan."""
        lines = [f"intermediate buffers: {len(self.placements)}, {self.bytes_needed} bytes unshared, "
                 f"{self.bytes_planned} bytes planned, {self.bytes_saved} bytes saved",
                 f"registers: {self.register_bytes_saved} bytes saved by sharing accumulators"]
        for p in sorted(self.placements.values(), key=lambda p: (str(p.arena.arg.device), p.offset)):
            span = f"bytes {p.offset}..{p.offset + p.nbytes}"
            lines.append(f"  {p.buffer.arg!r}: kernels {p.first}..{p.last}, {span}")
        return "\n".join(lines)


def _nbytes(buffer: UOp) -> int:
    return buffer.shape[0] * buffer.arg.dtype.itemsize


def plan_memory(buffers_by_kernel: list[tuple[UOp, list[UOp]]], outputs: set[UOp]) -> MemoryPlan:
    """First-fit placement of the intermediate buffers.

    ``buffers_by_kernel``: for every kernel in run order, the buffer it writes and the buffers it
    reads (BUFFER UOps).  ``outputs``: buffers returned to the caller (never shared).
    """
    first: dict[UOp, int] = {}
    last: dict[UOp, int] = {}
    for index, (written, read) in enumerate(buffers_by_kernel):
        for buffer in (written, *read):
            first.setdefault(buffer, index)
            last[buffer] = index
    plan = MemoryPlan()
    placed: dict[object, list[Placement]] = {}
    arena_size: dict[object, int] = {}
    for buffer in sorted(first, key=lambda b: (first[b], -_nbytes(b))):
        if buffer in outputs or buffer.op is not Ops.BUFFER:
            continue
        device = buffer.arg.device
        nbytes = _nbytes(buffer)
        overlapping = [p for p in placed.get(device, [])
                       if not (p.last < first[buffer] or last[buffer] < p.first)]
        alive = sorted(overlapping, key=lambda p: p.offset)
        offset = 0
        for p in alive:
            if offset + nbytes <= p.offset:
                break
            offset = max(offset, _align(p.offset + p.nbytes))
        placement = Placement(buffer, buffer, offset, nbytes, first[buffer], last[buffer])
        placed.setdefault(device, []).append(placement)
        arena_size[device] = max(arena_size.get(device, 0), offset + nbytes)
    for device, size in arena_size.items():
        plan.arenas[device] = UOp.buffer(max(size, 1), dtypes.uint8, device)
    for device, placements in placed.items():
        for p in placements:
            arena = plan.arenas[device]
            plan.placements[p.buffer] = Placement(p.buffer, arena, p.offset, p.nbytes, p.first, p.last)
    return plan


def _align(offset: int) -> int:
    return -(-offset // ALIGNMENT) * ALIGNMENT


def buffer_in_arena(placement: Placement) -> UOp:
    """The planned buffer as the spec's zero-copy view: ``SLICE(arena, offset)`` of its dtype."""
    buffer = placement.buffer
    offset = UOp.const(dtypes.index, placement.offset)
    return UOp(Ops.SLICE, (placement.arena, offset), (buffer.shape[0], buffer.arg.dtype))


def share_memory(ctx: MemoryPlan, buffer: UOp) -> UOp | None:
    """An intermediate BUFFER takes its planned place in the arena of its device."""
    placement = ctx.placements.get(buffer)
    return None if placement is None else buffer_in_arena(placement)


memory_rules = PatternMatcher([
    (UPat(Ops.BUFFER, name="buffer"), share_memory, "share memory"),
], name="plan global memory")


def apply_memory_plan(program: UOp, plan: MemoryPlan) -> UOp:
    """The program graph with every planned buffer replaced by its arena slice."""
    return graph_rewrite(program, memory_rules, ctx=plan, name="plan global memory")


# ---------------------------------------------------------------------------------------------
# registers inside a kernel


def _register(u: UOp) -> UOp | None:
    while u.op is Ops.AFTER:
        u = u.src[0]
    return u if u.op is Ops.BUFFER and u.arg.addrspace is AddrSpace.REG else None


@dataclass
class RegisterPlan:
    """Which REG buffer each accumulator uses after sharing, and the bytes that saved."""

    mapping: dict[UOp, UOp] = field(default_factory=dict)
    bytes_saved: int = 0


def plan_registers(linear: UOp) -> RegisterPlan:
    """Accumulators used in disjoint stretches of the program share a REG buffer (first fit)."""
    program = linear.src
    first: dict[UOp, int] = {}
    last: dict[UOp, int] = {}
    depth_at: list[int] = []
    depth = 0
    for position, u in enumerate(program):
        if u.op in (Ops.RANGE, Ops.IF):
            depth += 1
        elif u.op in (Ops.END, Ops.ENDIF):
            depth -= 1
        depth_at.append(depth)
        for s in u.src:  # uses (the BUFFER's own place, at the top, is not one)
            register = _register(s)
            if register is not None:
                first.setdefault(register, position)
                last[register] = position
    plan = RegisterPlan()
    pool: list[tuple[UOp, int]] = []  # (register kept, position of its last use)
    for register in sorted(first, key=lambda r: first[r]):
        for i, (kept, free_at) in enumerate(pool):
            same_kind = kept.arg.dtype == register.arg.dtype and kept.arg.size >= register.arg.size
            # only in the same loop nest level: a register declared in a loop is private to it
            if same_kind and free_at < first[register] and depth_at[free_at] == depth_at[first[register]]:
                plan.mapping[register] = kept
                plan.bytes_saved += register.arg.size * register.arg.dtype.itemsize
                pool[i] = (kept, last[register])
                break
        else:
            pool.append((register, last[register]))
    return plan


def share_register(ctx: RegisterPlan, register: UOp) -> UOp | None:
    """An accumulator whose lifetime ended before this one starts lends it its register."""
    return ctx.mapping.get(register)


def declare_registers_once(linear: UOp) -> UOp | None:
    """A register shared by several accumulators is declared once, where the first of them was."""
    program, declared = [], set()
    for u in linear.src:
        if u.op is Ops.BUFFER:
            if u in declared:
                continue
            declared.add(u)
        program.append(u)
    return UOp(Ops.LINEAR, tuple(program), linear.arg) if len(program) < len(linear.src) else None


#: the register plan's rules: each accumulator takes its planned register, then the LINEAR program
#: (rewritten after its sources) keeps one declaration of each
register_rules = PatternMatcher([
    (UPat(Ops.BUFFER, name="register"), share_register, "share register"),
    (UPat(Ops.LINEAR, name="linear"), declare_registers_once, "declare each register once"),
], name="plan registers")


def apply_register_plan(linear: UOp, plan: RegisterPlan) -> UOp:
    """The LINEAR program with shared registers (its order unchanged)."""
    if not plan.mapping:
        return linear
    return graph_rewrite(linear, register_rules, ctx=plan, name="plan registers")

def memory_plan_stage(lowering: Lowering) -> None:
    """Register/Memory Plan: registers inside kernels, then GLOBAL buffers between kernels (a lone
    kernel, with no program around it, gets its register plan only)."""
    saved = 0
    plans: dict[UOp, Any] = {}
    bodies = {}
    for item in lowering.items:
        if item.body not in plans:
            plan = plan_registers(item.body)
            plans[item.body] = (plan, apply_register_plan(item.body, plan))
        plan, bodies[item] = plans[item.body]
        saved += plan.bytes_saved
    lowering.replace_bodies(bodies)
    if lowering.graph is None:
        return
    outputs = {storage_of(v) for v in lowering.output_values()}
    usage = [(storage_of(item.arguments[0]), [storage_of(a) for a in item.arguments[1:]])
             for item in lowering.items]
    memory = plan_memory(usage, outputs)
    memory.register_bytes_saved = saved
    lowering.memory_plan = memory
    if memory.placements:
        lowering.graph = apply_memory_plan(lowering.graph, memory)


__all__ = ["MemoryPlan", "Placement", "RegisterPlan", "apply_memory_plan", "apply_register_plan",
           "plan_memory", "plan_registers"]
