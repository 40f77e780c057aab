"""Facts about a LINEAR program that every renderer reads, whatever language it writes: which uops
are live, the buffer an INDEX addresses through AFTERs, and when a strided vector load is
prefetched.  The walk that renders a program is :mod:`uopviz.backends.linear_walk`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from uopviz.core.affine import contiguous_start, linear_coefficient
from uopviz.core.dtype import AddrSpace
from uopviz.core.ops import AxisType, Ops
from uopviz.core.uop import UOp


def underlying_buffer(u: UOp) -> UOp:
    """A PARAM/BUFFER seen through AFTER passthroughs."""
    while u.op is Ops.AFTER:
        u = u.src[0]
    return u


#: the most trips of a window's loop (a 7x7 filter's row); a loop of 1 is a 1x1 filter's
WINDOW_MAX_TRIPS = 7

PREFETCH_MIN_STRIDE_BYTES = 1024
PREFETCH_ITERATIONS = 8  # measured on gemm 1024: 4 → 50.8, 8 → 52.4, 16 → 51.2, 32 → 46.1 GFLOP/s
#: a contiguous vector load in a loop of at most this many trips that jumps a row each trip, where
#: the loop around it walks along those rows (a 1x1 conv's input strip staged or read per tile of
#: positions: 32 channels' rows of 16 positions, 50 KB apart), is prefetched this many bytes along
#: its row instead: the rows of the tiles ahead, every one of them, where
#: :data:`PREFETCH_ITERATIONS` rows ahead of a loop of 32 missed the first 8 rows of each tile and
#: fetched 8 that no tile reads (:func:`vector_prefetch_distance`).  Each changed kernel rendered
#: both ways in one process on the model's arrays (AMD EPYC, AVX2, 2 cores, min of 11-21), C / LLVM:
#: MobileNet-v2 at batch 8, its 32 -> 16 conv at 112x112 1.87 -> 1.62 / 1.98 -> 1.51 ms, 16 -> 96
#: 4.14 -> 3.76 / 3.98 -> 3.07, 24 -> 144 at 56x56 2.05 -> 2.06 / 1.90 -> 1.50, 144 -> 24 2.26 ->
#: 2.11 / 2.13 -> 1.94 (its 96 -> 24 1.30 -> 1.46 on LLVM); at batch 1 0.78-1.01x on C, its 16 -> 96
#: 0.51 -> 0.37 ms on LLVM; ResNet-50's 64-channel 1x1 convs at 56x56 0.92-1.06x (two runs),
#: Inception-v1's one changed kernel 0.95x; no kernel of DenseNet-121 or SqueezeNet changes
PREFETCH_SHORT_LOOP_MAX_TRIPS = 64
PREFETCH_ALONG_ROW_BYTES = 256
#: a scalar load in a reduction loop that steps to a new cache line each iteration, but by less
#: than this, is prefetched too (:func:`line_prefetch_stride`): a register tile's broadcast inputs
#: over a 7x7 image, one channel's row of 7 read 196 bytes after the last.  Each changed kernel
#: against its source without, in one process on the model's arrays (C, AMD EPYC, AVX2, 2 cores):
#: 1x1 convolutions at 7x7 of MobileNet-v2 0.89-0.96x, ResNet-50 0.89-0.97x, Inception-v1
#: 0.83-1.00x.  Wider strides lost: ResNet-50's 14x14 rows (784 bytes) 1.12-1.34x, the hardware's
#: prefetcher follows them
PREFETCH_LINE_MAX_STRIDE_BYTES = 256
#: the cache line: a scalar stream stepping less than this stays in one line for several iterations
CACHE_LINE_BYTES = 64

_SIDE_EFFECTS = frozenset(
    {
        Ops.STORE,
        Ops.RANGE,
        Ops.END,
        Ops.IF,
        Ops.ENDIF,
        Ops.BARRIER,
        Ops.CUSTOM,
        Ops.ATOMIC_ADD,
        Ops.PARAM,
        Ops.SPECIAL,
    }
)


def live_uops(program: Sequence[UOp], gather_by_lanes: bool = True) -> set[UOp]:
    """The uops whose values reach a side effect.  A contiguous vector INDEX needs only its base lane,
    not the index vector, so the lane arithmetic of vector addresses is not rendered; with
    ``gather_by_lanes`` a gathering INDEX of a VECTORIZE needs only the lanes, not the vector."""
    live: set[UOp] = set()
    for u in reversed(program):
        if u.op not in _SIDE_EFFECTS and u not in live:
            continue
        live.add(u)
        sources: Sequence[UOp] = u.src
        if u.op is Ops.INDEX and len(u.src) == 2 and u.src[1].dtype.count > 1:
            found = contiguous_start(u.src[1])
            if found is not None:
                sources = (u.src[0],) if found[0] is None else (u.src[0], found[0])
            elif gather_by_lanes and u.src[1].op is Ops.VECTORIZE:
                sources = (u.src[0], *u.src[1].src)
        live.update(sources)
    return live


#: the instructions that open and close a scope of a LINEAR program (kernel-ir.md)
SCOPE_OPENERS, SCOPE_CLOSERS = frozenset({Ops.RANGE, Ops.IF}), frozenset({Ops.END, Ops.ENDIF})


def open_scopes(instructions: Sequence[UOp]) -> list[tuple[int, ...]]:
    """Each instruction's scope: the positions of the RANGEs and IFs open around it, outermost
    first (an END or ENDIF is outside the scope it closes, a RANGE or IF outside its own)."""
    open_now: list[int] = []
    scopes = []
    for index, u in enumerate(instructions):
        if u.op in SCOPE_CLOSERS:
            open_now.pop()
        scopes.append(tuple(open_now))
        if u.op in SCOPE_OPENERS:
            open_now.append(index)
    return scopes


#: the largest register buffer parked across a later loop (:func:`parked_accumulators`), in vector
#: registers of the target: sixteen, what an accumulator tile can hold (AVX2's 7 x 8 tiles take 7,
#: AVX-512's 7 x 32 take 14); a larger buffer is a kernel-local array
PARKED_MAX_REGISTERS = 16


@dataclass(frozen=True)
class Parking:
    """A register buffer whose final values wait across a later loop (:func:`parked_accumulators`):
    copied to a slot of memory after the END at ``after``, and read from there by the INDEXes at
    ``readers``."""

    after: int
    readers: frozenset[int]


def parked_accumulators(instructions: Sequence[UOp], vector_bytes: int = 32) -> dict[UOp, Parking]:
    """The register BUFFERs of a LINEAR program whose last value is read only after another whole
    loop ran: a residual's convolution fused into another's sums its own channels in a second loop
    after the first one's, and the first's accumulators are read after both.  Kept in registers, the
    two tiles' accumulators (7 x 8 and 7 x 8 on AVX2) and the second loop's broadcasts outnumber the
    registers; LLVM's register allocator then chose, for the generic x86-64-v3 CPU, to spill the
    second loop's accumulators inside it (a load and a store around each of their multiply-adds:
    ResNet-50's fused kernels 2.0-2.2x their time for znver4, which spills the first's once, after
    their loop).  Parked, the first tile leaves the registers after its loop, whatever the target.
    AVX-512's 32 registers hold both tiles (7 x 32 channels: 14 + 14) but not their broadcasts too:
    parked, ResNet-50's three such kernels run 0.90 -> 0.78 ms each (LLVM, znver4, 2 cores, both
    forms compiled in one process and run in turn, min of 15; the model 21.1 -> 20.8 ms).

    A buffer is parked after the END of the outermost loop around its last STORE that holds none of
    its later reads, where another loop runs between that END and its last read, and none of those
    reads is inside a loop (a sum's maximum read in every trip of the next loop stays in a register);
    buffers of more than :data:`PARKED_MAX_REGISTERS` registers of ``vector_bytes`` are kernel-local
    arrays, not accumulators."""
    scopes = open_scopes(instructions)
    position = {u: index for index, u in enumerate(instructions)}
    end_of: dict[int, int] = {}  # a RANGE's position -> its END's
    stores: dict[UOp, list[int]] = {}  # buffer -> positions of its STOREs
    reads: dict[UOp, list[int]] = {}  # buffer -> positions of the INDEXes its LOADs read through
    for index, u in enumerate(instructions):
        closed = [s for s in u.src if s.op is Ops.RANGE] if u.op is Ops.END else []
        if closed and closed[-1] in position:  # (an END without its RANGE is the renderer's error)
            end_of[position[closed[-1]]] = index
        address = underlying_buffer(u.src[0]) if u.op in (Ops.LOAD, Ops.STORE) else None
        if address is None or address.op is not Ops.INDEX or address not in position:
            continue
        buffer = underlying_buffer(address.src[0])
        if buffer.op is Ops.BUFFER and buffer.arg.addrspace is AddrSpace.REG:
            if u.op is Ops.STORE:
                stores.setdefault(buffer, []).append(index)
            else:
                reads.setdefault(buffer, []).append(position[address])
    parked: dict[UOp, Parking] = {}
    for buffer, written in stores.items():
        if buffer.arg.size * buffer.arg.dtype.itemsize > PARKED_MAX_REGISTERS * vector_bytes:
            continue
        last = max(written)
        later = [index for index in reads.get(buffer, ()) if index > last]
        after = None
        for opener in reversed(scopes[last]):  # innermost first
            end = end_of.get(opener)
            if end is None or not later or any(index < end for index in later):
                break
            after = end
        if after is None or any(scopes[index] != scopes[after] for index in later):
            continue
        last_read = max(later)
        if any(after < opener and end < last_read for opener, end in end_of.items()):
            parked[buffer] = Parking(after, frozenset(later))
    return parked


def power_of_two(count: int) -> bool:
    """Whether ``count`` is 2, 4, 8, ...: a lane count shuffles and halvings work on."""
    return count >= 2 and count & (count - 1) == 0


def matrix_column(u: UOp) -> tuple[tuple[UOp, ...], int] | None:
    """``(rows, column)`` when VECTORIZE ``u`` is lane ``column`` of each of n vectors ``rows`` of one
    type (n from 4 to their width, a power of two): a column of the matrix those vectors are the
    rows of, as a register tile's store gets it (Instruction Selection's address runs: the n
    positions of one channel from the n vectors of channels).  n need not be a power of two: 7
    rows are transposed as 8 (:func:`padded_rows`), the column's first 7 lanes taken.  None for any
    other VECTORIZE."""
    if u.op is not Ops.VECTORIZE or u.dtype.scalar.is_bool:
        return None
    if not all(s.op is Ops.GEP and len(s.arg) == 1 and s.src[0].op is not Ops.VECTORIZE for s in u.src):
        return None
    rows = tuple(s.src[0] for s in u.src)
    count, width = len(rows), rows[0].dtype.count
    if not (4 <= count <= width and power_of_two(width)):
        return None
    if any(row.dtype != rows[0].dtype for row in rows) or len({s.arg[0] for s in u.src}) != 1:
        return None
    return rows, u.src[0].arg[0]


def next_power_of_two(count: int) -> int:
    """The smallest power of two of at least ``count`` (``count`` >= 1)."""
    return 1 << (count - 1).bit_length()


def padded_rows(rows: tuple[UOp, ...]) -> tuple[UOp, ...]:
    """A register tile's ``rows`` padded to a power of two by repeating the last (a padded
    column's transpose, :func:`matrix_column`): the lanes the repeats give are never stored."""
    return rows + (rows[-1],) * (next_power_of_two(len(rows)) - len(rows))


def transpose_plan(
    count: int, width: int
) -> tuple[list[tuple[int, int, list[int]]], dict[int, tuple[int, int]]]:
    """How ``count`` vectors of ``width`` lanes (numbered 0 .. count-1) are transposed by two-vector
    shuffles: the steps, each ``(first, second, picks)`` making the next-numbered vector whose lane
    i is lane ``picks[i]`` of ``first`` and ``second`` (numbered on after ``first``'s lanes), and
    column -> ``(vector, first lane)`` of the result.  Each round pairs two vectors that hold the
    same columns, the second's rows after the first's, and splits those columns in halves; after
    log2(count) rounds each vector holds ``width / count`` whole columns, rows in order."""
    # each vector: its number and, per lane, (row, column)
    current = [(row, [(row, column) for column in range(width)]) for row in range(count)]
    steps: list[tuple[int, int, list[int]]] = []
    while len({row for row, _ in current[0][1]}) < count:
        paired = []
        for (first, first_lanes), (second, second_lanes) in zip(current[0::2], current[1::2]):
            columns = list(dict.fromkeys(column for _, column in first_lanes))
            half = len(columns) // 2
            for part in (columns[:half], columns[half:]):
                picks, placed = [], []
                for column in part:
                    for offset, held in ((0, first_lanes), (width, second_lanes)):
                        for lane, (row, held_column) in enumerate(held):
                            if held_column == column:
                                picks.append(offset + lane)
                                placed.append((row, column))
                steps.append((first, second, picks))
                paired.append((count + len(steps) - 1, placed))
        # the next round pairs vectors holding the same columns: those of one half, in row order
        current = sorted(paired, key=lambda vector: (vector[1][0][1], vector[1][0][0]))
    columns = {column: (number, lane) for number, held in current
               for lane, (row, column) in enumerate(held) if row == 0}
    return steps, columns


#: the loops a tile of positions walks along its rows in (not a window's taps)
_ROW_WALKING_LOOPS = frozenset({AxisType.GLOBAL, AxisType.LOOP, AxisType.THREAD})


def vector_prefetch_distance(index: UOp, loop: UOp | None, around: UOp | None, itemsize: int) -> int | None:
    """How many elements ahead of a contiguous vector load at ``index`` to prefetch, or None: it
    jumps :data:`PREFETCH_MIN_STRIDE_BYTES` or more per iteration of ``loop`` (the innermost loop
    open where it is rendered; each iteration touches a new page, where hardware prefetchers lose
    the stream: gemm 1024 on one core, 34 -> 52 GFLOP/s), prefetched :data:`PREFETCH_ITERATIONS`
    iterations ahead; but where ``loop`` runs :data:`PREFETCH_SHORT_LOOP_MAX_TRIPS` trips or fewer
    and ``around`` (the loop around it) is an output loop that steps along the rows by less than
    that, :data:`PREFETCH_ALONG_ROW_BYTES` along the row (the rows of the next tiles)."""
    if loop is None:
        return None
    stride = linear_coefficient(index, loop)
    if stride is None or abs(stride) * itemsize < PREFETCH_MIN_STRIDE_BYTES:
        return None
    short = loop.src[0].op is Ops.CONST and int(loop.src[0].arg[0]) <= PREFETCH_SHORT_LOOP_MAX_TRIPS
    if short and around is not None and around.arg[1] in _ROW_WALKING_LOOPS:
        step = linear_coefficient(index, around)
        if step is not None and 0 < step * itemsize < PREFETCH_MIN_STRIDE_BYTES:
            return PREFETCH_ALONG_ROW_BYTES // itemsize
    return PREFETCH_ITERATIONS * stride


def line_prefetch_stride(load: UOp, loop: UOp | None) -> int | None:
    """The elements a scalar LOAD's address steps per iteration of ``loop`` (the innermost loop
    open where it is rendered) when the renderers prefetch it :data:`PREFETCH_ITERATIONS` ahead:
    ``loop`` reduces (a register tile's reduction, not an output loop the tile is stored in), runs
    long enough for the prefetch to land inside it, and the address steps to a new line each
    iteration by less than :data:`PREFETCH_LINE_MAX_STRIDE_BYTES`; else None."""
    index = load.src[0]
    if loop is None or loop.arg[1] is not AxisType.REDUCE or load.dtype.count != 1 or len(index.src) != 2:
        return None
    if underlying_buffer(index.src[0]).op is not Ops.PARAM:
        return None
    if loop.src[0].op is not Ops.CONST or int(loop.src[0].arg[0]) < 2 * PREFETCH_ITERATIONS:
        return None
    stride = linear_coefficient(index.src[1], loop)
    itemsize = load.dtype.itemsize
    if stride is None or not CACHE_LINE_BYTES <= abs(stride) * itemsize < PREFETCH_LINE_MAX_STRIDE_BYTES:
        return None
    return stride
