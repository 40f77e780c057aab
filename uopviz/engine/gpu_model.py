"""A static account of a CUDA kernel on a named GPU, worked out from its LINEAR program, not from a run.

:func:`gpu_account` reads the kernel's launch (grid and block from the rendered source's
``uopviz-meta`` line), its shared buffers, its loads and stores and its WMMAs, and answers what a
profiler would, without a GPU: how many SMs are busy and what limits occupancy; for each load and
store, how many 32-byte sectors one warp touches (the index expression evaluated for the warp's 32
lanes with :func:`uopviz.core.alu.evaluate`); shared-memory bank conflicts; tensor-core use; FLOPs
and DRAM bytes, the roofline bound and a predicted time.  ``docs/design/gpu-model.md`` gives the
formulas and what the model leaves out.  The GPUs are data (:mod:`uopviz.engine.gpu_specs`).
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from uopviz.backends import get as backend
from uopviz.backends.base import KernelMeta
from uopviz.backends.linear_program import open_scopes, underlying_buffer
from uopviz.core.alu import evaluate
from uopviz.core.dtype import AddrSpace
from uopviz.core.ops import Ops
from uopviz.core.uop import UOp
from uopviz.engine.gpu_specs import GPU, gpu_named
from uopviz.passes.optops.kernel import Kernel

SECTOR_BYTES = 32  # the unit of global-memory traffic between L2, L1 and DRAM
LINE_BYTES = 128  # a cache line: four sectors
SHARED_BANKS = 32
BANK_BYTES = 4
#: the fraction of an SM's threads that hides DRAM and ALU latency in a streaming kernel: the model
#: scales peak rates by resident threads over this many (a rule of thumb, not a datasheet number)
SATURATING_OCCUPANCY = 0.5
#: iterations of an access's innermost loop taken together when judging DRAM efficiency: sectors a
#: warp's next iterations use are still in L1/L2 when they do
NEIGHBOURHOOD_ITERATIONS = 8
#: 128-byte lines (tag lookups) one SM's L1 serves per clock for global accesses: a warp-level
#: access touching n lines takes n clocks however few of their sectors it uses.  Calibrated on an
#: H200 (2026-11-28): with sectors alone the f16 tensor-core gemm 4096 (scalar fragment loads, 8
#: lines per A load) was predicted at 0.646 ms and ran in 3.06 ms (2.57 ms with lines); gemm 2048
#: float32 with a 1x4 tile 2.18 ms -> 2.57 ms, measured 2.82 ms; with 1 and 2x2 tensor-core tiles
#: per warp the measured times (11.6 and 5.9 ms) follow the lines too
L1_LINES_PER_CLOCK = 1
#: what one launch adds to a kernel's time as uopviz measures it (``CUDALaunch.run``: a CUDA event
#: recorded, the kernel launched through ctypes, an event recorded; the idle GPU records the first
#: event before the launch reaches it).  Fitted to an H200's measurements of 2026-11-28 (torch 2.11,
#: benchmarks/measured/gpu-h200-2026-11-28-af82634.json): cumsum 1024² measured 37.3 µs for three
#: kernels whose work the model put at 7.6 µs (4.9x optimistic), argmax 1024² 50.1 µs for 25.6 µs:
#: 8-10 µs per launch, whatever the kernel does.  Without it every small multi-kernel case was
#: predicted several times too fast
LAUNCH_S = 8e-6
_NO_FLOPS = frozenset({Ops.CAST, Ops.WHERE, Ops.CMP_LT, Ops.CMP_NE, Ops.CMP_EQ})
_FLOPS_PER_OP = {Ops.MULACC: 2}  # a fused multiply-add is two FLOPs, as Kernel.flops counts MUL and ADD


@dataclass
class MemoryAccess:
    """One LOAD or STORE of the program, as warp 0 of block 0 makes it (other loop variables at 0)."""

    kind: str  # "load" or "store"
    space: str  # "global" or "shared"
    buffer: str  # data1 (the argument's name in the source) or shared0 (the first shared buffer)
    dtype: str
    position: int  # the uop's place in the LINEAR program
    lanes: int  # lanes of the warp that access memory (a gate or a small block leaves some idle)
    bytes_per_warp: int  # bytes the lanes ask for
    executions: int  # how many times a warp executes it in the whole launch
    sectors: int | None = None  # global: 32-byte sectors one warp-level access touches
    ideal_sectors: int | None = None  # global: the fewest sectors the distinct bytes fit in
    lines: int | None = None  # global: 128-byte lines
    bank_ways: int | None = None  # shared: most distinct 4-byte words in one bank (1: no conflict)
    wavefronts: int | None = None  # shared: the fewest passes the bytes need (the conflict-free ideal)
    efficiency: float | None = None  # bytes asked / bytes moved (global) or ideal / actual passes (shared)
    note: str = ""  # why a number is missing

    @property
    def coalesced(self) -> bool | None:
        """True when a global access touches no more sectors than its distinct bytes need (None when
        unknown or not global)."""
        if self.sectors is None or self.ideal_sectors is None:
            return None
        return self.sectors <= self.ideal_sectors

    @property
    def strided(self) -> bool:
        """True when a global access spreads its bytes over more sectors than they need and moves over
        twice the bytes it asks for."""
        return self.coalesced is False and self.efficiency is not None and self.efficiency < 0.5

    @property
    def l1_bytes(self) -> int:
        """Bytes the SM's L1/shared-memory pipe moves for one warp-level execution: its sectors
        (global) or its passes of 128 bytes (shared)."""
        if self.sectors is not None:
            return self.sectors * SECTOR_BYTES
        if self.bank_ways is not None:
            return self.bank_ways * SHARED_BANKS * BANK_BYTES
        return self.bytes_per_warp

    def l1_clocks(self, bytes_per_clock: int) -> float:
        """Clocks the SM's L1/shared-memory pipe spends on one warp-level execution: its bytes at
        ``bytes_per_clock``, or (global) its lines at :data:`L1_LINES_PER_CLOCK`, whichever is more."""
        clocks = self.l1_bytes / bytes_per_clock
        return max(clocks, self.lines / L1_LINES_PER_CLOCK) if self.lines is not None else clocks

    @property
    def bank_conflicts(self) -> bool:
        """True when a shared access needs more passes than its bytes do."""
        return self.bank_ways is not None and self.wavefronts is not None and self.bank_ways > self.wavefronts


@dataclass
class GPUAccount:
    """What :func:`gpu_account` found: the launch, occupancy, memory accesses, work and time."""

    kernel: str
    gpu: GPU
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes_per_block: int
    blocks_per_sm: int  # resident blocks per SM at most (0: the block cannot launch)
    occupancy_limits: dict[str, int]  # blocks per SM each resource allows
    limited_by: list[str]
    accesses: list[MemoryAccess]
    dram_efficiency: dict[str, float]  # global buffer -> bytes used / bytes moved over a warp's neighbourhood
    flops: int  # the kernel's own count (Kernel.flops), else the executed count
    flops_executed: int  # float ops every launched thread runs (padded threads included)
    tensor_core_flops: int
    tensor_cores: list[str]  # the tensor-core instructions used
    bytes: int  # the buffers' sizes: each read or written once
    dram_bytes: int  # the traffic the access pattern implies
    memory_s: float  # DRAM bytes over DRAM bandwidth
    l1_s: float  # bytes through the SMs' L1/shared-memory pipes over their bandwidth
    compute_s: float
    launch_s: float  # what the launch itself adds (LAUNCH_S), in predicted_s
    parallel_fraction: float
    predicted_s: float | None
    findings: list[str] = field(default_factory=list)

    # -- derived -------------------------------------------------------------------------------
    @property
    def threads_per_block(self) -> int:
        """Threads in one block."""
        return math.prod(self.block)

    @property
    def blocks(self) -> int:
        """Blocks launched."""
        return math.prod(self.grid)

    @property
    def threads(self) -> int:
        """Threads launched."""
        return self.blocks * self.threads_per_block

    @property
    def warps_per_block(self) -> int:
        """Warps per block (a partial warp counts whole: its idle lanes still hold a slot)."""
        return -(-self.threads_per_block // self.gpu.warp_size)

    @property
    def sms_busy(self) -> int:
        """SMs with at least one block."""
        return min(self.blocks, self.gpu.sms)

    @property
    def waves(self) -> int:
        """Rounds of blocks the GPU runs (0 when a block cannot launch)."""
        capacity = self.blocks_per_sm * self.gpu.sms
        return -(-self.blocks // capacity) if capacity else 0

    @property
    def occupancy(self) -> float:
        """Resident warps per SM over the most an SM holds, at the block limit."""
        return self.blocks_per_sm * self.warps_per_block / self.gpu.max_warps_per_sm

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per DRAM byte (with the access pattern's traffic)."""
        return self.flops_executed / self.dram_bytes if self.dram_bytes else math.inf

    @property
    def bound(self) -> str:
        """"memory" (DRAM), "L1" (the sectors and shared-memory passes the SMs move) or "compute":
        whichever time is longest."""
        times = {"memory": self.memory_s, "L1": self.l1_s, "compute": self.compute_s}
        return max(times, key=lambda k: times[k])

    @property
    def uses_tensor_cores(self) -> bool:
        """True when the program has a WMMA."""
        return bool(self.tensor_cores)

    # -- output --------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Everything as JSON-ready values (derived numbers included)."""
        data = asdict(self)
        data["gpu"] = self.gpu.to_dict()
        data["accesses"] = [{**asdict(a), "coalesced": a.coalesced, "bank_conflicts": a.bank_conflicts}
                            for a in self.accesses]
        for name in ("threads_per_block", "blocks", "threads", "warps_per_block", "sms_busy", "waves",
                     "occupancy", "bound", "uses_tensor_cores"):
            data[name] = getattr(self, name)
        intensity = self.arithmetic_intensity
        data["arithmetic_intensity"] = None if math.isinf(intensity) else intensity
        return data

    def summary_rows(self) -> list[tuple[str, str]]:
        """(label, value) rows: launch, occupancy, work, roofline and predicted time."""
        gpu = self.gpu
        limits = ", ".join(f"{k} {v}" for k, v in self.occupancy_limits.items())
        predicted = "does not launch" if self.predicted_s is None else _seconds(self.predicted_s)
        return [
            ("launch", f"grid {_dims(self.grid)} × block {_dims(self.block)}: {self.blocks} blocks, "
                       f"{self.threads} threads"),
            ("SMs busy", f"{self.sms_busy} of {gpu.sms}, {self.waves} wave(s)"),
            ("occupancy", f"{self.occupancy:.0%} ({self.blocks_per_sm} blocks/SM; limited by "
                          f"{', '.join(self.limited_by)}; blocks/SM allowed: {limits}; registers unknown)"),
            ("shared memory", f"{self.shared_bytes_per_block} B/block"),
            ("FLOPs", f"{self.flops:,} (executed {self.flops_executed:,}; tensor cores "
                      f"{self.tensor_core_flops:,})"),
            ("DRAM bytes", f"{self.dram_bytes:,} (buffers {self.bytes:,})"),
            ("roofline", f"{self.bound}-bound: {_round(self.arithmetic_intensity)} FLOP/B; DRAM "
                         f"{_seconds(self.memory_s)}, L1 {_seconds(self.l1_s)}, "
                         f"compute {_seconds(self.compute_s)}"),
            ("predicted", f"{predicted} (at {self.parallel_fraction:.1%} of the GPU's parallelism; "
                          f"the launch {_seconds(self.launch_s)} of it)"),
        ]

    def access_rows(self) -> list[tuple[str, ...]]:
        """One row per access: kind, buffer, dtype, lanes, bytes, sectors or bank ways, efficiency."""
        rows = []
        for a in self.accesses:
            if a.space == "global":
                cost = "?" if a.sectors is None else f"{a.sectors} sectors, {a.lines} lines"
            else:
                cost = "?" if a.bank_ways is None else f"{a.bank_ways}-way banks ({a.wavefronts} ideal)"
            efficiency = "?" if a.efficiency is None else f"{a.efficiency:.0%}"
            rows.append((f"{a.space} {a.kind}", a.buffer, a.dtype, str(a.lanes), str(a.bytes_per_warp), cost,
                         efficiency, f"{a.executions:,}", a.note))
        return rows

    def text(self) -> str:
        """A short plain-text report."""
        lines = [f"GPU model: {self.kernel} on {self.gpu.name}"]
        lines += [f"  {label}: {value}" for label, value in self.summary_rows()]
        lines.append("  accesses (per warp): kind buffer dtype lanes bytes cost efficiency executions")
        lines += ["    " + " ".join(part for part in row if part) for row in self.access_rows()]
        lines += [f"  - {finding}" for finding in self.findings]
        return "\n".join(lines)

    def html(self) -> str:
        """The account as an HTML table, the findings as a list (for the tuner)."""
        cell = "padding:1px 6px;border-bottom:1px solid #eaeef2;text-align:left;vertical-align:top"
        summary = "".join(f'<tr><th style="{cell}">{html.escape(k)}</th>'
                          f'<td style="{cell}">{html.escape(v)}</td></tr>'
                          for k, v in self.summary_rows())
        heads = ("access", "buffer", "dtype", "lanes", "bytes/warp", "cost/warp", "efficiency", "executions",
                 "")
        head = "".join(f'<th style="{cell}">{h}</th>' for h in heads)
        body = "".join("<tr>" + "".join(f'<td style="{cell}">{html.escape(v)}</td>' for v in row) + "</tr>"
                       for row in self.access_rows())
        findings = "".join(f"<li>{html.escape(f)}</li>" for f in self.findings)
        return (f'<div class="uv-gpu-model" style="font-size:11.5px;padding:4px 8px">'
                f"<b>GPU model ({html.escape(self.gpu.name)})</b> "
                f'<span style="color:#57606a">worked out from the program, not measured</span>'
                f'<table style="border-collapse:collapse">{summary}</table>'
                f'<table style="border-collapse:collapse;margin-top:4px"><tr>{head}</tr>{body}</table>'
                f'<ul style="margin:4px 0;padding-left:18px">{findings}</ul></div>')


def _dims(dims: tuple[int, ...]) -> str:
    return "×".join(str(d) for d in dims)


def _round(value: float) -> str:
    return "∞" if math.isinf(value) else f"{value:.3g}"


def _seconds(value: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-9:.3g} ns"


# ---------------------------------------------------------------------------------------------
# reading the program


def _program_of(subject: Any) -> tuple[UOp, str, Kernel | None]:
    """The LINEAR program, the CUDA source and the Kernel (None for a bare program) of ``subject``."""
    if isinstance(subject, Kernel):
        lowered = subject.lower("cuda")
        return lowered.linear, lowered.source, subject
    if isinstance(subject, UOp) and subject.op is Ops.LINEAR:
        return subject, backend("cuda").render(subject), None
    linear, source = getattr(subject, "linear", None), getattr(subject, "source", None)
    if isinstance(linear, UOp) and isinstance(source, str):  # a LoweredKernel
        return linear, source, None
    raise TypeError(f"gpu_account takes a Kernel, a lowered kernel or a LINEAR UOp, "
                    f"got {type(subject).__name__}")


def _scopes(program: tuple[UOp, ...]) -> list[tuple[list[UOp], list[UOp]]]:
    """For each position, the RANGEs around it (outermost first) and the IF gates around it."""
    return [([program[i] for i in scope if program[i].op is Ops.RANGE],
             [program[i].src[0] for i in scope if program[i].op is Ops.IF]) for scope in open_scopes(program)]


def _bound(r: UOp) -> int:
    bound = r.src[0]
    return int(bound.arg[0]) if bound.op is Ops.CONST else int(r.vmax) + 1


def _warp_bindings(program: tuple[UOp, ...], grid: tuple[int, ...], block: tuple[int, ...],
                   warp_size: int) -> dict[UOp, np.ndarray]:
    """Values of the SPECIALs for the lanes of warp 0 of the middle block (an edge block's lanes may
    all fall in padding): CUDA numbers a block's threads ``x + y·X + z·X·Y`` and gives each 32
    consecutive numbers to a warp."""
    lanes = np.arange(min(warp_size, math.prod(block)), dtype=np.int64)
    per_axis = (lanes % block[0], (lanes // block[0]) % block[1], lanes // (block[0] * block[1]))
    bindings: dict[UOp, np.ndarray] = {}
    for u in program:
        if u.op is Ops.SPECIAL:
            kind = u.arg.rstrip("0123456789")
            axis = int(u.arg[len(kind):] or 0)
            middle = grid[axis] // 2
            values = {"gidx": np.full_like(lanes, middle), "lidx": per_axis[axis]}
            bindings[u] = values.get(kind, middle * block[axis] + per_axis[axis])  # idx: the global index
    return bindings


def _values(expression: UOp, bindings: dict[UOp, Any], lanes: int) -> np.ndarray | None:
    """``expression`` for each lane (a trailing axis for a vector), other RANGEs at 0; None when it
    depends on loaded data."""
    leaves = {}
    for u in expression.toposort():
        if u.op is Ops.LOAD:
            return None
        if u.op is Ops.RANGE and u not in bindings:
            leaves[u] = np.int64(0)
    value = np.asarray(evaluate(expression, {**bindings, **leaves}))
    shape = (lanes, expression.dtype.count) if expression.dtype.count > 1 else (lanes,)
    return np.broadcast_to(value, shape)


def _active_lanes(gates: list[UOp], bindings: dict[UOp, Any], lanes: int) -> np.ndarray:
    mask = np.ones(lanes, dtype=bool)
    for gate in gates:
        value = _values(gate, bindings, lanes)
        if value is not None:  # a gate on loaded data: every lane counted
            mask &= value.reshape(lanes, -1).all(axis=1)
    return mask


def _touched_bytes(addresses: np.ndarray, itemsize: int) -> np.ndarray:
    """Every byte address the elements at ``addresses`` (element indices) cover."""
    starts = addresses.reshape(-1).astype(np.int64) * itemsize
    return np.unique((starts[:, None] + np.arange(itemsize)).reshape(-1))


@dataclass
class _Access:
    """An access and where it is: what the account needs to evaluate it again."""

    uop: UOp
    position: int
    index: UOp
    buffer: UOp
    gates: list[UOp]
    ranges: list[UOp]


def _accesses(program: tuple[UOp, ...]) -> list[_Access]:
    found = []
    for position, (u, (ranges, gates)) in enumerate(zip(program, _scopes(program))):
        if u.op not in (Ops.LOAD, Ops.STORE) or u.src[0].op is not Ops.INDEX:
            continue
        index = u.src[0]
        buffer = underlying_buffer(index.src[0])
        is_global = buffer.op is Ops.PARAM
        is_shared = buffer.op is Ops.BUFFER and buffer.arg.addrspace is AddrSpace.LOCAL
        if not (is_global or is_shared):
            continue  # registers
        gate = u.src[2] if len(u.src) > 2 else None
        own_gate = [gate] if gate is not None else []
        found.append(_Access(u, position, index, buffer, [*gates, *own_gate], ranges))
    return found


def _buffer_name(buffer: UOp, shared: list[UOp]) -> str:
    if buffer.op is Ops.PARAM:
        return f"data{buffer.arg.slot}"
    return f"shared{next(i for i, b in enumerate(shared) if b is buffer)}"


def _measure(access: _Access, bindings: dict[UOp, Any], lanes: int, warps: int,
             shared: list[UOp]) -> MemoryAccess:
    """One access of the modelled warp: sectors and lines (global) or bank ways (shared)."""
    buffer = access.buffer
    dtype = buffer.arg.dtype
    space = "global" if buffer.op is Ops.PARAM else "shared"
    executions = warps * math.prod(_bound(r) for r in access.ranges)
    record = MemoryAccess(access.uop.op.name.lower(), space, _buffer_name(buffer, shared), dtype.name,
                          access.position, lanes, 0, executions)
    addresses = _values(access.index.src[1], bindings, lanes)
    if addresses is None:
        record.note = "index depends on loaded data (a gather): not modelled"
        record.bytes_per_warp = lanes * dtype.itemsize * access.index.dtype.count
        return record
    active = _active_lanes(access.gates, bindings, lanes)
    addresses = addresses[active]
    record.lanes = int(active.sum())
    record.bytes_per_warp = int(addresses.size * dtype.itemsize)
    if addresses.size == 0:
        record.note = "no lane of the modelled warp passes the gate"
        return record
    touched = _touched_bytes(addresses, dtype.itemsize)
    if space == "global":
        record.sectors = len(np.unique(touched // SECTOR_BYTES))
        record.lines = len(np.unique(touched // LINE_BYTES))
        record.ideal_sectors = -(-touched.size // SECTOR_BYTES)
        # a broadcast (lanes asking for the same bytes) is served once: it wastes nothing
        record.efficiency = min(1.0, record.bytes_per_warp / (record.sectors * SECTOR_BYTES))
    else:
        words = np.unique(touched // BANK_BYTES)
        record.bank_ways = int(np.bincount(words % SHARED_BANKS, minlength=SHARED_BANKS).max())
        record.wavefronts = -(-len(words) // SHARED_BANKS)
        record.efficiency = record.wavefronts / record.bank_ways
    return record


def _dram_efficiency(accesses: list[_Access], bindings: dict[UOp, Any], lanes: int) -> dict[UOp, float]:
    """Per global buffer: bytes used over bytes moved, taking together every access of warp 0 to it
    over the first iterations of each access's innermost loop (they follow each other closely enough
    to share sectors)."""
    touched: dict[UOp, list[np.ndarray]] = {}
    for access in accesses:
        if access.buffer.op is not Ops.PARAM:
            continue
        inner = access.ranges[-1] if access.ranges else None
        steps = range(min(_bound(inner), NEIGHBOURHOOD_ITERATIONS)) if inner is not None else range(1)
        for step in steps:
            here = {**bindings, inner: np.int64(step)} if inner is not None else bindings
            addresses = _values(access.index.src[1], here, lanes)
            if addresses is None:
                break
            active = _active_lanes(access.gates, here, lanes)
            touched.setdefault(access.buffer, []).append(
                _touched_bytes(addresses[active], access.buffer.arg.dtype.itemsize))
    efficiency = {}
    for buffer, parts in touched.items():
        used = np.unique(np.concatenate(parts))
        if used.size:
            efficiency[buffer] = used.size / (len(np.unique(used // SECTOR_BYTES)) * SECTOR_BYTES)
    return efficiency


def _flops_executed(program: tuple[UOp, ...], threads: int) -> tuple[int, int, list[str]]:
    """Float operations every launched thread runs (their loops' iterations counted), of them those
    of tensor cores, and the tensor-core instructions used."""
    total = tensor = 0
    names: list[str] = []
    for u, (ranges, _) in zip(program, _scopes(program)):
        iterations = threads * math.prod(_bound(r) for r in ranges)
        if u.op is Ops.WMMA:
            config = u.arg if hasattr(u.arg, "flops") else u.arg[0]
            work = iterations * config.flops // config.threads
            total, tensor = total + work, tensor + work
            if config.name not in names:
                names.append(config.name)
        elif u.op.is_elementwise and u.op not in _NO_FLOPS and u.dtype.scalar.is_float:
            total += iterations * u.dtype.count * _FLOPS_PER_OP.get(u.op, 1)
    return total, tensor, names


# ---------------------------------------------------------------------------------------------
# the account


def _occupancy(gpu: GPU, threads_per_block: int, shared_bytes: int) -> tuple[int, dict[str, int], list[str]]:
    """Resident blocks per SM, what each resource allows, and the resources that set the limit."""
    warps = -(-threads_per_block // gpu.warp_size)
    if threads_per_block > gpu.max_threads_per_block:
        return 0, {"threads": 0}, [f"threads ({threads_per_block} > {gpu.max_threads_per_block} per block)"]
    if shared_bytes > gpu.static_shared_memory_per_block:
        return 0, {"shared memory": 0}, [f"shared memory ({shared_bytes} B > the "
                                         f"{gpu.static_shared_memory_per_block} B of static shared arrays)"]
    limits = {
        "threads": gpu.max_warps_per_sm // warps,
        "blocks": gpu.max_blocks_per_sm,
        "shared memory": gpu.shared_memory_per_sm // (shared_bytes + gpu.reserved_shared_memory_per_block),
    }
    blocks = min(limits.values())
    return blocks, limits, [name for name, allowed in limits.items() if allowed == blocks]


def gpu_account(subject: Kernel | UOp | Any, gpu: str | GPU = "H100") -> GPUAccount:
    """The static account of ``subject`` (a Kernel, lowered for CUDA here; a lowered kernel; or a
    LINEAR program) on ``gpu`` (a :class:`GPU` or its name): launch, occupancy, per-warp memory
    accesses, tensor-core use, FLOPs, DRAM bytes, roofline bound, predicted time and findings."""
    spec = gpu_named(gpu)
    linear, source, kernel = _program_of(subject)
    program = linear.src
    meta = KernelMeta.from_source(source, "cuda")
    grid, block = tuple(meta.global_size), tuple(meta.local_size)
    threads_per_block, blocks = math.prod(block), math.prod(grid)
    warps = blocks * -(-threads_per_block // spec.warp_size)
    shared = [u for u in program if u.op is Ops.BUFFER and u.arg.addrspace is AddrSpace.LOCAL]
    shared_bytes = sum(u.arg.size * u.arg.dtype.itemsize for u in shared)

    bindings = _warp_bindings(program, grid, block, spec.warp_size)
    lanes = min(spec.warp_size, threads_per_block)
    found = _accesses(program)
    measured = [_measure(a, bindings, lanes, warps, shared) for a in found]
    neighbourhood = _dram_efficiency(found, bindings, lanes)

    params = {u.arg.slot: u for u in program if u.op is Ops.PARAM}
    sizes = {p: (p.shape[0] if p.shape else 1) * p.arg.dtype.itemsize for p in params.values()}
    footprint = sum(sizes.values())
    # the whole footprint in L2: every byte comes from DRAM once; beyond it, the sectors a warp
    # moves but does not use are evicted before any neighbour uses them
    dram_bytes = footprint if footprint <= spec.l2_bytes else \
        sum(round(size / neighbourhood.get(p, 1.0)) for p, size in sizes.items())

    flops_executed, tensor_flops, tensor_names = _flops_executed(program, blocks * threads_per_block)
    blocks_per_sm, limits, limited_by = _occupancy(spec, threads_per_block, shared_bytes)
    memory_s = dram_bytes / spec.dram_bytes_per_s
    l1_s = sum(a.l1_clocks(spec.l1_bytes_per_clock_per_sm) * a.executions for a in measured) / \
        (spec.sms * spec.clock_hz)
    compute_s = tensor_flops / spec.fp16_tensor_flops_per_s + \
        (flops_executed - tensor_flops) / spec.fp32_flops_per_s
    predicted_s, parallel = None, 0.0
    if blocks_per_sm:
        waves = -(-blocks // (blocks_per_sm * spec.sms))
        resident = blocks * threads_per_block / waves
        parallel = min(1.0, resident / (spec.sms * spec.max_threads_per_sm * SATURATING_OCCUPANCY))
        predicted_s = max(memory_s, l1_s, compute_s) / parallel + LAUNCH_S
    account = GPUAccount(
        kernel=str(linear.arg), gpu=spec, grid=grid, block=block, shared_bytes_per_block=shared_bytes,
        blocks_per_sm=blocks_per_sm, occupancy_limits=limits, limited_by=limited_by, accesses=measured,
        dram_efficiency={f"data{p.arg.slot}": e for p, e in neighbourhood.items()},
        flops=kernel.flops if kernel is not None else flops_executed, flops_executed=flops_executed,
        tensor_core_flops=tensor_flops, tensor_cores=tensor_names, bytes=footprint, dram_bytes=dram_bytes,
        memory_s=memory_s, l1_s=l1_s, compute_s=compute_s, launch_s=LAUNCH_S, parallel_fraction=parallel,
        predicted_s=predicted_s,
    )
    account.findings = [text for _, rule in FINDING_RULES for text in rule(account)]
    return account


# ---------------------------------------------------------------------------------------------
# findings: named rules, each giving plain-word sentences about an account


def _launch_findings(a: GPUAccount) -> list[str]:
    if not a.blocks_per_sm:
        return [f"the block cannot launch: {', '.join(a.limited_by)}"]
    out = []
    if a.blocks < a.gpu.sms:
        out.append(f"{a.blocks} block{'s' if a.blocks > 1 else ''}: {a.sms_busy} of {a.gpu.sms} SMs busy, "
                   f"{a.gpu.sms - a.sms_busy} idle")
    if a.threads_per_block < a.gpu.warp_size:
        out.append(f"blocks of {a.threads_per_block} thread{'s' if a.threads_per_block > 1 else ''}: "
                   f"{a.gpu.warp_size - a.threads_per_block} of {a.gpu.warp_size} lanes of each warp idle")
    if a.waves > 1:
        last = a.blocks - (a.waves - 1) * a.blocks_per_sm * a.gpu.sms
        share = last / (a.blocks_per_sm * a.gpu.sms)
        if share < 0.5:
            out.append(f"{a.waves} waves, the last {share:.0%} full")
    return out


def _occupancy_findings(a: GPUAccount) -> list[str]:
    if a.blocks_per_sm and a.occupancy < SATURATING_OCCUPANCY:
        return [f"occupancy {a.occupancy:.0%} at most ({a.blocks_per_sm} blocks of {a.warps_per_block} "
                f"warps per SM), limited by {', '.join(a.limited_by)}"]
    return []


def _global_findings(a: GPUAccount) -> list[str]:
    out = []
    worst: dict[tuple[str, str], MemoryAccess] = {}
    for access in a.accesses:
        if access.strided:
            key = (access.kind, access.buffer)
            if key not in worst or access.efficiency < worst[key].efficiency:
                worst[key] = access
    for (kind, buffer), access in worst.items():
        together = a.dram_efficiency.get(buffer, 0.0)
        text = (f"{kind}s of {buffer} are strided: {access.sectors} sectors per warp for "
                f"{access.bytes_per_warp} bytes, {access.efficiency:.0%} efficient")
        if together >= 0.999:
            text += " per instruction; a warp's neighbouring accesses use the rest of each sector"
        out.append(text)
    out += [f"{a.kind}s of {a.buffer}: {a.note}" for a in a.accesses if a.note]
    return out


def _shared_findings(a: GPUAccount) -> list[str]:
    return [f"shared {x.kind}s of {x.buffer} (uop {x.position}) have {x.bank_ways}-way bank conflicts "
            f"({x.wavefronts} pass{'es' if x.wavefronts > 1 else ''} would do)"
            for x in a.accesses if x.bank_conflicts]


def _compute_findings(a: GPUAccount) -> list[str]:
    out = []
    if a.tensor_cores:
        share = a.tensor_core_flops / a.flops_executed if a.flops_executed else 0.0
        out.append(f"tensor cores ({', '.join(a.tensor_cores)}) do {share:.0%} of the FLOPs")
    ridge = a.gpu.fp16_tensor_flops_per_s if a.tensor_cores else a.gpu.fp32_flops_per_s
    out.append(f"{a.bound}-bound: {_round(a.arithmetic_intensity)} FLOP per DRAM byte, the ridge at "
               f"{ridge / a.gpu.dram_bytes_per_s:.3g}")
    if a.bound == "L1":
        out.append(f"the SMs' load/store pipes are the limit: {_seconds(a.l1_s)} to move the sectors and "
                   f"shared-memory passes, against {_seconds(a.memory_s)} of DRAM traffic")
    if a.parallel_fraction < 1.0 and a.blocks_per_sm:
        out.append(f"too little parallelism: {a.threads:,} threads keep {a.parallel_fraction:.2%} of the "
                   f"GPU's latency-hiding capacity busy, so the time is {1 / a.parallel_fraction:.3g}× the "
                   f"roofline's")
    return out


#: the findings, in the order shown: (name, rule giving sentences about a GPUAccount)
FINDING_RULES: list[tuple[str, Callable[[GPUAccount], list[str]]]] = [
    ("launch shape", _launch_findings),
    ("occupancy", _occupancy_findings),
    ("global-memory coalescing", _global_findings),
    ("shared-memory bank conflicts", _shared_findings),
    ("compute and roofline", _compute_findings),
]
