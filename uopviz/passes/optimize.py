"""Optimize: choose each kernel's OptOps — given ones, the hand-coded heuristics, or BEAM search —
and the tensor-core opt.

``optimize_kernel(kernel, opts)`` is what the pipeline's Optimize stage runs for every kernel.
``opts`` is None (nothing), ``"heuristic"``, ``"beam"``, or a sequence of :class:`Opt`; compile's
``opts`` may also give one such choice per kernel, a dict by kernel index or name, or tuning records.

BEAM search and tuning records live in :mod:`uopviz.passes.beam` and :mod:`uopviz.passes.records`.
The heuristics follow the backend's abilities:

* **tensor cores** are not used by default on CPU backends (their tiles are emulated there);
* **GPU** (workgroups): the innermost GLOBAL axes get LOCAL parts of 16, 8 or 4;
* **CPU** (threads): the outermost GLOBAL axis is split into THREAD chunks (one per core of the
  CPU target, ``Backend.thread_count``);
* **upcasts**: an output axis that some input does not vary over (so a loaded value is reused across
  its lanes: matmul's M and N) is upcast, which blocks the reduction in registers.  On CPUs the
  tile follows the CPU target's SIMD registers (``Backend.register_bytes``, ``vector_registers``,
  from ``uopviz.backends.target``, never the host's by accident): the
  innermost such axis two registers wide, the next by as many rows as keep the accumulators in
  half the registers and the tile at 128 lanes (float32: M4×N32 on x86-64-v4, M4×N16 on v3, M4×N8
  on v2); on GPUs the innermost
  by the widest vector (16, 8 or 4), the next by 4.  An elementwise kernel has its innermost
  axis upcast by one register's lanes on CPUs (16 float32 on x86-64-v4, 8 on v3), by 8 (or 4)
  on GPUs;
* **unrolls**: the innermost reduction is unrolled fully when it is small, else by 4 or 2 when the
  register tile is narrow (under two registers), keeping the kernel at 128 lanes at most.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from uopviz.core.affine import affine_coefficients
from uopviz.core.dtype import AddrSpace
from uopviz.core.entry_points import entry_point
from uopviz.core.ops import AxisType, Ops
from uopviz.core.rewrite import PatternMatcher, UPat, graph_rewrite, substitute
from uopviz.core.uop import UOp
from uopviz.passes.indexing import flat_index
from uopviz.passes.kernel import (
    LANE_TYPES,
    REDUCE_TYPES,
    Kernel,
    Opt,
    OptError,
    OptOp,
    apply_tensor_core,
    depends_on,
    kernel_order,
    position_of,
    range_size,
    ranges_of,
    renumber,
    substitute_ranges,
)
from uopviz.passes.schedule import Lowering


@dataclass
class _LocalContext:
    threads: tuple[UOp, ...]  # the kernel's LOCAL ranges: each thread of a workgroup has one slot
    lanes: tuple[UOp, ...]  # UPCAST ranges: each lane has one slot
    count: int = 0


def group_reduce_through_local(ctx: _LocalContext, reduce: UOp) -> UOp | None:
    """A reduction over GROUP_REDUCE ranges: every thread of the group reduces its share, writes it
    to a LOCAL buffer (one slot per thread and lane), waits at a BARRIER, and then reduces the
    group's slots."""
    groups = [r for r in reduce.src[1:] if r.arg[1] is AxisType.GROUP_REDUCE]
    if not groups:
        return None
    rest = [r for r in reduce.src[1:] if r.arg[1] is not AxisType.GROUP_REDUCE]
    value = reduce.src[0]
    partial = UOp(Ops.REDUCE, (value, *rest), reduce.arg) if rest else value
    used = {u for u in partial.toposort() if u.op is Ops.RANGE}
    slots = [r for r in (*ctx.threads, *ctx.lanes) if r in used] + groups
    sizes = [range_size(r) for r in slots]
    temp = UOp.buffer(math.prod(sizes), value.dtype.scalar, None, AddrSpace.LOCAL, number=1000 + ctx.count)
    ctx.count += 1
    store = UOp(Ops.STORE, (UOp(Ops.INDEX, (temp, flat_index(slots, sizes))), partial))
    barrier = UOp(Ops.BARRIER, (store,))
    again = {r: UOp.range(r.src[0], AxisType.REDUCE, 40_000 + ctx.count * 8 + i)
             for i, r in enumerate(groups)}
    read_slots = [again.get(r, r) for r in slots]
    read = UOp(Ops.LOAD, (UOp(Ops.INDEX, (UOp(Ops.AFTER, (temp, barrier)), flat_index(read_slots, sizes))),))
    return UOp(Ops.REDUCE, (read, *again.values()), reduce.arg)


local_buffer_rules = PatternMatcher([
    (UPat(Ops.REDUCE, name="reduce"), group_reduce_through_local, "group_reduce_through_local"),
], name="insert local buffers")


def insert_local_buffers(ast: UOp) -> UOp:
    """The Optimize stage's last pass: GROUP_REDUCE reductions through LOCAL buffers, after which the
    GROUP_REDUCE ranges are workgroup threads (LOCAL)."""
    ranges = ranges_of(ast)
    if not any(r.arg[1] is AxisType.GROUP_REDUCE for r in ranges):
        return ast
    ctx = _LocalContext(tuple(r for r in ranges if r.arg[1] is AxisType.LOCAL),
                        tuple(r for r in ranges if r.arg[1] is AxisType.UPCAST))
    ast = graph_rewrite(ast, local_buffer_rules, ctx=ctx, name="insert local buffers")
    threads = {r: UOp.range(r.src[0], AxisType.LOCAL, r.arg[0]) for r in ranges_of(ast)
               if r.arg[1] is AxisType.GROUP_REDUCE}
    return renumber(substitute_ranges(ast, threads), ranges_of(substitute_ranges(ast, threads)))


# ---------------------------------------------------------------------------------------------
# CPU: column strips staged into contiguous buffers

_OUTPUT_TYPES = frozenset({AxisType.GLOBAL, AxisType.THREAD, AxisType.LOOP})
STAGE_MIN_STRIDE_BYTES = 1024  # a strip whose rows are this far apart: each row on its own page(s)
STAGE_MAX_BYTES = 512 * 1024  # a staged strip stays in L2, and on a thread's stack


@dataclass
class _StageContext:
    """The kernel's output loops in kernel order, and the strips staged so far."""

    outputs: tuple[UOp, ...]
    fills: set[UOp]
    count: int = 0


def stage_strided_load(ctx: _StageContext, load: UOp) -> UOp | None:
    """A load of a strip of rows far apart (``B[k, n0:n0+32]`` of a row-major matrix, over the reduce
    loop ``k``) that is reused by an output loop nested inside the loops it depends on: copy the
    strip once into a contiguous per-thread buffer (a REG buffer filled in a loop of its own, closed
    by END) and read it from there.  Rows 4 KiB apart all fall into a few cache sets, so the strip
    cannot stay in cache and every reuse goes to L3; the copy is read sequentially from L2
    (measured on gemm 1024, see benchmarks/bench_backends.py)."""
    if load in ctx.fills or len(load.src) != 1 or load.src[0].op is not Ops.INDEX:
        return None
    buffer, index = load.src[0].src
    if buffer.op is not Ops.PARAM:
        return None
    ranges = [u for u in index.toposort() if u.op is Ops.RANGE]
    reduces = kernel_order([r for r in ranges if r.arg[1] is AxisType.REDUCE])
    lanes = kernel_order([r for r in ranges if r.arg[1] in LANE_TYPES])
    outputs = [r for r in ranges if r.arg[1] in _OUTPUT_TYPES]
    if not reduces or len(reduces) + len(lanes) + len(outputs) != len(ranges):
        return None
    coefficients = affine_coefficients(index, tuple(ranges))
    itemsize = load.dtype.scalar.itemsize
    if coefficients is None or abs(coefficients[reduces[-1]]) * itemsize < STAGE_MIN_STRIDE_BYTES:
        return None
    if not any(r.arg[1] is AxisType.UPCAST and coefficients[r] == 1 for r in lanes):
        return None  # no contiguous row: nothing to gain from a copy
    used = [i for i, r in enumerate(ctx.outputs) if any(r is x for x in ranges)]
    inner = ctx.outputs[max(used, default=-1) + 1:]
    if not inner:
        return None  # no loop inside the strip's own loops reuses it
    staged = [*reduces, *[r for r in lanes if r.arg[1] is AxisType.UNROLL],
              *[r for r in lanes if r.arg[1] is AxisType.UPCAST]]
    size = math.prod(range_size(r) for r in staged)
    if size * itemsize > STAGE_MAX_BYTES:
        return None
    fresh = {r: UOp.range(r.src[0], AxisType.REDUCE, 60_000 + ctx.count * 8 + i)
             for i, r in enumerate(reduces)}
    strip = UOp.buffer(size, load.dtype.scalar, None, AddrSpace.REG, number=1_000 + ctx.count)
    ctx.count += 1

    def position(mapping: dict[UOp, UOp]) -> UOp:
        return flat_index([mapping.get(r, r) for r in staged], [range_size(r) for r in staged])

    fill_load = UOp(Ops.LOAD, (UOp(Ops.INDEX, (buffer, substitute(index, fresh))),))
    ctx.fills.add(fill_load)
    filled = UOp(Ops.STORE, (UOp(Ops.INDEX, (strip, position(fresh))), fill_load))
    for r in reversed(list(fresh.values())):
        filled = UOp(Ops.END, (filled, r))
    return UOp(Ops.LOAD, (UOp(Ops.INDEX, (UOp(Ops.AFTER, (strip, filled)), position({}))),))


stage_rules = PatternMatcher([
    (UPat(Ops.LOAD, name="load"), stage_strided_load, "stage_strided_load"),
], name="stage strided loads")


def stage_strided_loads(ast: UOp, backend: Any) -> UOp:
    """On CPU backends without workgroups (C, LLVM), strips of far-apart rows reused by inner output
    loops are copied into contiguous buffers first (:func:`stage_strided_load`)."""
    # not on OpenCL CPU devices either: pocl gives a work-item's private array a small stack (a
    # 64 KiB strip crashed it with SIGSEGV)
    if backend.has_local or not backend.runs_on_cpu or not backend.vector_widths:
        return ast
    outputs = tuple(r for r in ranges_of(ast) if r.arg[1] in _OUTPUT_TYPES)
    if not outputs:
        return ast
    return graph_rewrite(ast, stage_rules, ctx=_StageContext(outputs, set()), name="stage strided loads")


def finish_optimize(kernel: Kernel) -> UOp:
    """The kernel's AST with what the Optimize stage adds after the opts: strips staged into
    contiguous buffers (CPU), GROUP_REDUCE reductions through LOCAL buffers (GPU)."""
    return insert_local_buffers(stage_strided_loads(kernel.ast, kernel.backend_object))


# ---------------------------------------------------------------------------------------------
# hand-coded heuristics


def _try(kernel: Kernel, opt: Opt) -> Kernel:
    try:
        return kernel.apply(opt)
    except OptError:
        return kernel


def _axis_of(kernel: Kernel, r: UOp) -> int:
    return position_of(kernel.ranges, r)


def _first_that_applies(kernel: Kernel, opts: Sequence[Opt]) -> Kernel:
    """The kernel with the first of ``opts`` that applies (the kernel itself when none does)."""
    for opt in opts:
        try:
            return kernel.apply(opt)
        except OptError:
            continue
    return kernel


def _splits(kernel: Kernel, r: UOp, factors: Sequence[int], target: AxisType) -> list[Opt]:
    """SPLITs of range ``r`` by each factor that divides it (and leaves more than one iteration, unless
    it is the whole axis of a reduction unrolled fully)."""
    size = range_size(r)
    return [Opt(OptOp.SPLIT, _axis_of(kernel, r), (f, target, False)) for f in factors
            if f > 1 and size % f == 0 and (size > f or target is AxisType.UNROLL)]


def _lanes(kernel: Kernel) -> int:
    return math.prod(size for size, t in kernel.axes if t in (AxisType.UPCAST, AxisType.UNROLL))


def _register_lanes(kernel: Kernel) -> int:
    """Lanes of one of the backend's vector registers for the kernel's widest loaded element."""
    loads = [u for u in kernel.ast.toposort() if u.op is Ops.LOAD]
    itemsize = max((u.dtype.scalar.itemsize for u in loads), default=4)
    return max(1, kernel.backend_object.register_bytes // itemsize)


#: lanes of the heuristic's CPU register tile at most: an M8×N32 tile (256 lanes) runs about 10 %
#: faster than M4×N32 on AVX-512 (gemm 512: 1.07× vs 0.96× OpenBLAS on one core) but doubles the
#: code generation time; BEAM searches the bigger tiles
HEURISTIC_TILE_LANES = 128


def _cpu_register_tile(kernel: Kernel, first: UOp, lanes: int) -> tuple[Kernel, list[int]]:
    """Upcast ``first`` (the innermost output axis that reuses loads) by two registers' lanes (or one,
    or less), and say how many rows the second axis may add: the accumulators take at most half the
    vector registers (the rest hold the loaded row and broadcasts) and the tile at most
    ``HEURISTIC_TILE_LANES`` lanes (AVX-512 float32: M4×N32 in 8 registers; AVX2: M4×N16)."""
    backend = kernel.backend_object
    factors = [f for f in (2 * lanes, lanes, 8, 4) if f <= max(backend.vector_widths or (1,)) * 2]
    tiled = _first_that_applies(kernel, _splits(kernel, first, factors, AxisType.UPCAST))
    if tiled is kernel:
        # no power of two divides the axis (a conv's 14 wide rows): the largest other divisor within
        # two registers still reuses the loads (256 channels 14x14: ~5 -> 20-31 GFLOP/s with the
        # lanes reordered by _power_of_two_lanes_inside)
        size = range_size(first)
        divisors = [f for f in range(min(2 * lanes, size - 1), 2, -1) if size % f == 0]
        tiled = _first_that_applies(kernel, _splits(kernel, first, divisors[:1], AxisType.UPCAST))
        if tiled is kernel and 2 < size <= lanes:
            # a prime width (a conv's 7): the whole axis is the tile (512 channels 7x7: 4-7 -> 20-32
            # GFLOP/s with the lanes reordered below)
            tiled = _try(kernel, Opt(OptOp.SPLIT, _axis_of(kernel, first), (size, AxisType.UPCAST, False)))
    kernel = tiled
    width = _lanes(kernel)
    registers_per_row = max(1, width // lanes)
    by_registers = backend.vector_registers // 2 // registers_per_row
    if width < lanes:
        # a row narrower than a register (a 28-wide conv's 4 columns): the rows become the vectors'
        # lanes (_power_of_two_lanes_inside), so the accumulators are width * rows / lanes registers
        # (AVX-512, 128 channels 28x28: 16 channels x 4 columns, 4 accumulators, 57 GFLOP/s on one
        # core; 32 x 4, 8 accumulators: see the bench in the commit)
        by_registers = backend.vector_registers // 2 * lanes // width
    most = max(1, min(by_registers, HEURISTIC_TILE_LANES // width))
    rows = [f for f in (32, 16, 8, 4, 2) if f <= most]
    return kernel, rows


def _power_of_two_lanes_inside(kernel: Kernel) -> Kernel:
    """The register tile's lanes ordered so that whole vectors run along one axis: a tile of 7 (or 4)
    output columns by 16 output channels (a 14-, 7- or 28-wide conv) makes each 16-lane vector the
    16 channels of one column (one broadcast input, one weight row) instead of a mix of columns and
    shuffles between every multiply-add.  The axis inside is the one a register's lanes divide, else
    a power of two."""
    upcasts = [r for r in kernel.ranges if r.arg[1] is AxisType.UPCAST]
    if len(upcasts) != 2:
        return kernel
    outer, inner = upcasts
    inner_size, outer_size = range_size(inner), range_size(outer)
    lanes = _register_lanes(kernel)
    # whole registers along the outer axis but not the inner one (16 channels by 4 columns of a
    # 28-wide conv on AVX-512): each vector would hold 4 channels of 4 columns, built by shuffles
    # from a weight vector and an input row for every multiply-add (1.5 GFLOP/s, 2 cores)
    partial_registers = inner_size % lanes != 0 and outer_size % lanes == 0
    power_of_two_outside = inner_size & (inner_size - 1) != 0 and outer_size & (outer_size - 1) == 0
    if not (partial_registers or power_of_two_outside):
        return kernel
    return _try(kernel, Opt(OptOp.SWAP, _axis_of(kernel, outer), _axis_of(kernel, inner)))


def _stages(kernel: Kernel) -> bool:
    return stage_strided_loads(kernel.ast, kernel.backend_object) is not kernel.ast


def _order_for_staging(kernel: Kernel) -> Kernel:
    """The loop order in which a strided strip gets staged (:func:`stage_strided_load`): an output
    loop the strip does not depend on moved inside the ones it does (gemm: N tiles outside M
    tiles, so each copied strip of B serves every tile of A)."""
    if _stages(kernel):
        return kernel
    outputs = [r for r in kernel.ranges if r.arg[1] is AxisType.GLOBAL]
    for i, outer in enumerate(outputs):
        for inner in outputs[i + 1:]:
            swapped = _try(kernel, Opt(OptOp.SWAP, _axis_of(kernel, outer), _axis_of(kernel, inner)))
            if swapped is not kernel and _stages(swapped):
                return swapped
    return kernel


def hand_coded_optimizations(kernel: Kernel) -> Kernel:
    """The heuristic opts for ``kernel``'s backend (see the module docstring)."""
    backend = kernel.backend_object
    gpu = not backend.runs_on_cpu  # workgroup tiles; else register tiles (an OpenCL CPU device too)
    loads = [u for u in kernel.ast.toposort() if u.op is Ops.LOAD]
    has_reduce = any(t in REDUCE_TYPES for _, t in kernel.axes)
    widest = max(backend.vector_widths or (1,))
    # lanes a kernel may have: CPU compilers split wide vectors well; GPU renderers need native widths
    budget = max(widest, 4) if gpu else 256
    outputs = [r for r in kernel.ranges if r.arg[1] in (AxisType.GLOBAL, AxisType.LOOP)]
    if has_reduce:
        # register blocking: an output axis a load does not vary over reuses that load across its
        # lanes.  The innermost such axis gets a vector's width; the next one 4, if it reuses another
        # load (matmul: N reuses A, M reuses B; conv: width reuses the weights, channels the input)
        reusing = {r: frozenset(i for i, load in enumerate(loads) if not depends_on(load.src[0], r))
                   for r in reversed(outputs)}
        candidates = [r for r, which in reusing.items() if which]
        if candidates:
            first = candidates[0]
            second = next((r for r in candidates[1:] if reusing[r] - reusing[first]), None)
            # an opt renumbers the ranges: find the second axis again by its position, which a
            # SPLIT to UPCAST keeps (the new lanes go last)
            second_axis = None if second is None else _axis_of(kernel, second)
            if gpu:
                factors = [f for f in (16, 8, 4) if f <= max(widest, 4)]
                kernel = _first_that_applies(kernel, _splits(kernel, first, factors, AxisType.UPCAST))
                rows = [f for f in (4, 2) if _lanes(kernel) * f <= budget]
            else:
                kernel, rows = _cpu_register_tile(kernel, first, _register_lanes(kernel))
            if second_axis is not None:
                second = kernel.ranges[second_axis]
                kernel = _first_that_applies(kernel, _splits(kernel, second, rows, AxisType.UPCAST))
                if not gpu:
                    kernel = _power_of_two_lanes_inside(kernel)
            if not gpu:
                kernel = _order_for_staging(kernel)
    elif outputs:
        width = 8 if gpu else _register_lanes(kernel)
        factors = [f for f in (width, 8, 4) if f <= max(widest, 4)]
        kernel = _first_that_applies(kernel, _splits(kernel, outputs[-1], factors, AxisType.UPCAST))
    # unroll the innermost reduction: fully when small, else by a factor that keeps the lanes few
    # (GPU vectors have power-of-two widths only).  A CPU register tile of several vectors already
    # has independent multiply-adds enough: unrolling it too was measured slower (gemm 512: 47 vs
    # 101 GFLOP/s on one AVX-512 core for an M8×N32 tile)
    for r in [r for r in kernel.ranges if r.arg[1] is AxisType.REDUCE][-1:]:
        size, lanes = range_size(r), _lanes(kernel)
        fits = size & (size - 1) == 0 or not gpu
        factors = [size] if size <= 16 and lanes * size <= budget and fits else []
        if gpu or lanes < 2 * _register_lanes(kernel):
            factors += [f for f in (4, 2) if lanes * f <= min(budget, 128)]
        kernel = _first_that_applies(kernel, _splits(kernel, r, factors, AxisType.UNROLL))
    if backend.has_local and gpu:
        for r in reversed([r for r in kernel.ranges if r.arg[1] is AxisType.GLOBAL][-2:]):
            for size in (16, 8, 4):
                if range_size(r) % size == 0 and range_size(r) > size:
                    split = Opt(OptOp.SPLIT, _axis_of(kernel, r), (size, AxisType.LOCAL, False))
                    kernel = _try(kernel, split)
                    break
    elif backend.has_threads:
        globals_ = [r for r in kernel.ranges if r.arg[1] is AxisType.GLOBAL]
        threads = max(1, min(backend.thread_count, 16))  # the CPU target's cores
        # the outermost axis every core gets an equal share of (a 28-wide conv tiled by 4 leaves an
        # outer 7 that two cores do not divide: the next axis is split instead of the 7 running on
        # one core), else the outermost axis split by the most cores that divide it
        even = next((r for r in globals_ if range_size(r) % threads == 0 and range_size(r) > 1), None)
        if even is not None and threads > 1 and even is not globals_[0]:
            # moved outermost first: one parallel region per launch, not one per iteration of the 7
            position = _axis_of(kernel, even)
            swapped = _try(kernel, Opt(OptOp.SWAP, _axis_of(kernel, globals_[0]), position))
            if swapped is not kernel and (not _stages(kernel) or _stages(swapped)):  # keeps a staged strip
                kernel = swapped
                globals_ = [r for r in kernel.ranges if r.arg[1] is AxisType.GLOBAL]
                even = globals_[0]
        for outer in ([even] if even is not None and threads > 1 else globals_[:1]):
            size = range_size(outer)
            count = next((c for c in range(min(threads, size), 1, -1) if size % c == 0), None)
            if count is not None:
                split = Opt(OptOp.SPLIT, _axis_of(kernel, outer), (count, AxisType.THREAD, True))
                kernel = _try(kernel, split)
    return kernel


# ---------------------------------------------------------------------------------------------
# the stage's choice for one kernel


def optimize_kernel(kernel: Kernel, opts: Any) -> Kernel:
    """``kernel`` in its backend's initial state (parallel outputs GLOBAL) with ``opts`` applied:
    None, ``"heuristic"``, ``"beam"`` (``uopviz.passes.beam``) or a sequence of Opt."""
    kernel = kernel.with_parallel_outputs()
    if opts is None:
        return kernel
    if opts == "heuristic":
        return hand_coded_optimizations(kernel)
    if opts == "beam":  # search runs kernels: the engine's, reached through its entry point
        return kernel.apply_all(list(entry_point("search")(kernel).opts))
    if isinstance(opts, str):
        raise ValueError(f"opts must be None, 'heuristic', 'beam' or a sequence of Opt, got {opts!r}")
    return kernel.apply_all(list(opts))


def _is_opt_sequence(value: Any) -> bool:
    if not isinstance(value, Sequence) or isinstance(value, str):
        return False
    return all(isinstance(o, Opt) for o in value)


def opts_for(opts: Any, index: int, kernel: Kernel) -> Any:
    """The opts of kernel ``index`` from compile's ``opts`` argument: one choice for every kernel,
    a sequence with one entry per kernel, or a mapping by kernel index or name."""
    if opts is None or isinstance(opts, str) or _is_opt_sequence(opts):
        return opts
    if hasattr(opts, "opts_for_kernel"):  # tuning records: matched by kernel key, then by name
        found = opts.opts_for_kernel(kernel.with_parallel_outputs())
        return list(found) if found is not None else None
    if isinstance(opts, dict):
        for key in (index, kernel.name, kernel.name_hint):
            if key in opts:
                return opts[key]
        return None
    if isinstance(opts, Sequence):
        if index >= len(opts):
            raise ValueError(f"opts has entries for {len(opts)} kernels; the program has more "
                             f"(kernel {index})")
        return opts[index]
    raise ValueError(f"opts must be None, 'heuristic', 'beam', a sequence of Opt, one entry per kernel, "
                     f"or a dict; got {type(opts).__name__}")

def optimize_stage(lowering: Lowering) -> None:
    """Optimize: each kernel in its backend's initial state with its opts (each a recorded step),
    then the opts' finishing touches (local buffers, staged loads).  Identical kernels with the same
    opts (a network's repeated blocks) are optimized once.  Kernels that come optimized already
    (``Kernel.lower``) are only finished."""
    bodies = {}
    done: dict[tuple[UOp, str], tuple[Kernel, UOp]] = {}
    for item in lowering.items:
        if lowering.optimized:
            bodies[item] = finish_optimize(item.kernel)
            continue
        chosen = opts_for(lowering.opts, item.index, item.kernel)
        key = (item.kernel.ast, repr(chosen))
        if key not in done:
            kernel = optimize_kernel(item.kernel, chosen)
            done[key] = (kernel, finish_optimize(kernel))
        kernel, bodies[item] = done[key]
        item.kernel = kernel if kernel.name_hint == item.kernel.name_hint else \
            Kernel(kernel.ast, kernel.backend, kernel.opts, item.kernel.name_hint)
    lowering.replace_bodies(bodies)


__all__ = ["optimize_stage", "LANE_TYPES", "apply_tensor_core", "finish_optimize", "hand_coded_optimizations",
           "insert_local_buffers", "optimize_kernel", "opts_for", "stage_strided_loads"]
