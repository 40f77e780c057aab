"""CPU: strips of far-apart rows reused by inner output loops, copied into contiguous buffers.

On CPU backends without workgroups (C, LLVM) the Optimize stage stages such strips after the opts
(:func:`stage_strided_loads`); the heuristic orders the loops so that a strip gets staged
(``heuristic.py``).  A strip reused by an output loop around its own (a 7x7 plane of a 1x1 conv,
read once per channel group) is copied whole before that loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from uopviz.backends.aligned import CACHE_LINE
from uopviz.core.affine import affine_coefficients
from uopviz.core.dtype import AddrSpace
from uopviz.core.ops import AxisType, Ops
from uopviz.core.rewrite import PatternMatcher, UPat, graph_rewrite, substitute
from uopviz.core.uop import UOp
from uopviz.passes.indexing import flat_index
from uopviz.passes.optops.axes import LANE_TYPES, kernel_order, range_size, ranges_of

_OUTPUT_TYPES = frozenset({AxisType.GLOBAL, AxisType.THREAD, AxisType.LOOP})
STAGE_MIN_STRIDE_BYTES = 1024  # a strip whose rows are this far apart: each row on its own page(s)
#: a long strip (:data:`STAGE_LONG_MIN_ROWS` rows or more) is staged from rows this far apart when
#: each row holds :data:`STAGE_LONG_MIN_ROW_BYTES` or more: a 1x1 convolution at 14x14 (rows 784
#: bytes apart, one cache line each) reading 7 positions of each of 512-1024 channels.  AMD EPYC,
#: AVX2, 2 cores, each kernel's sources before and after compiled in one process and run in turn
#: on the model's arrays (min of 15): ResNet-50's four 1024 -> 256 and its 1024 -> 512 C 0.67-0.78x
#: (9.76 -> 7.09 ms), LLVM 7.47 -> 6.49 ms; Inception-v1's 512/528 -> N C 0.74-1.00x (1.70 -> 1.38
#: ms), LLVM 1.43 -> 1.30.  Not shorter strips or rows: ResNet-50's 256 -> 1024 (4 positions of
#: 256 channels) 1.32x, Inception-v1's 4-position tiles of 512/528 channels 0.86-1.18x, its 7x7
#: convolutions (rows 196 bytes apart, lines shared) 1.29-1.32x.
STAGE_LONG_MIN_STRIDE_BYTES = 512
STAGE_LONG_MIN_ROWS = 512
STAGE_LONG_MIN_ROW_BYTES = 24
STAGE_MAX_BYTES = 512 * 1024  # a staged strip stays in L2, and on a thread's stack
#: the element steps along a strip's row that staging copies: contiguous rows, and every other
#: element (a stride-2 1x1 convolution, ResNet-50's projections, whose rows of 7 positions span 13
#: elements).  The copy makes them contiguous; in place, each channel tile re-read their cache
#: lines from L2 or L3.  AMD EPYC, AVX2, 2 cores, in the model, C / LLVM: the 14x14 projection
#: fused with its expand conv 3.6-3.9 -> 2.6-2.8 / 3.5 -> 2.5 ms, the 28x28 one 2.2-2.4 -> 2.1-2.2
#: (docs/design/cpu-conv-layout.md, section 11)
STAGED_ROW_STEPS = (1, 2)
#: a strip of every other element is staged from this many rows: fewer rows' lines (one or two
#: each) stay in L1 in place.  ResNet-18's projections of 64 and 128 channels, fused with a 3x3
#: conv, ran 1.00-1.10x their unstaged time (LLVM 1.60 -> 1.75 ms at 28x28)
STAGE_EVERY_OTHER_MIN_ROWS = 256


@dataclass
class _StageContext:
    """The kernel's output loops in kernel order, and the strips staged so far."""

    outputs: tuple[UOp, ...]
    fills: set[UOp]
    count: int = 0
    hoist: bool = True  # strips reused by an output loop around theirs too (_hoisted_outputs)


def stage_strided_load(ctx: _StageContext, load: UOp) -> UOp | None:
    """A load of a strip of rows far apart (``B[k, n0:n0+32]`` of a row-major matrix, over the reduce
    loop ``k``) that is reused by an output loop nested inside the loops it depends on: copy the
    strip once into a contiguous per-thread buffer (a REG buffer filled in a loop of its own, closed
    by END) and read it from there.  Rows 4 KiB apart all fall into a few cache sets, so the strip
    cannot stay in cache and every reuse goes to L3; the copy is read sequentially from L2
    (measured on gemm 1024, see benchmarks/bench_backends.py).  A strip whose reuse is an output loop
    around its own output loops is copied with them, before that loop (:func:`_hoisted_outputs`)."""
    if load in ctx.fills or load.src[0].op is not Ops.INDEX or not _stageable_gate(load):
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
    if coefficients is None:
        return None
    row = [r for r in lanes if r.arg[1] is AxisType.UPCAST and coefficients[r] in STAGED_ROW_STEPS]
    if not row:
        return None  # no row of neighbouring elements: nothing to gain from a copy
    row_lanes = math.prod(range_size(r) for r in row)
    row_bytes = row_lanes * itemsize
    rows, row_stride = math.prod(range_size(r) for r in reduces), abs(coefficients[reduces[-1]]) * itemsize
    if any(coefficients[r] != 1 for r in row) and rows < STAGE_EVERY_OTHER_MIN_ROWS:
        return None
    used = [i for i, r in enumerate(ctx.outputs) if any(r is x for x in ranges)]
    inner = ctx.outputs[max(used, default=-1) + 1:]
    hoisted: list[UOp] = []
    if inner:
        if not _far_apart(row_stride, rows, row_bytes):
            return None
    else:
        if ctx.hoist:
            hoisted = _hoisted_outputs(ctx.outputs, used, reduces, row_lanes, row_bytes, row_stride)
        if not hoisted:
            return None  # no loop inside the strip's own loops reuses it, nor one around them
    staged = [*hoisted, *reduces, *[r for r in lanes if r.arg[1] is AxisType.UNROLL],
              *[r for r in lanes if r.arg[1] is AxisType.UPCAST]]
    size = math.prod(range_size(r) for r in staged)
    if size * itemsize > STAGE_MAX_BYTES:
        return None
    fresh = {r: UOp.range(r.src[0], AxisType.REDUCE, 60_000 + ctx.count * 8 + i)
             for i, r in enumerate([*hoisted, *reduces])}
    strip = UOp.buffer(size, load.dtype.scalar, None, AddrSpace.REG, number=1_000 + ctx.count)
    ctx.count += 1

    def position(mapping: dict[UOp, UOp]) -> UOp:
        return flat_index([mapping.get(r, r) for r in staged], [range_size(r) for r in staged])

    fill_load = UOp(Ops.LOAD, (UOp(Ops.INDEX, (buffer, substitute(index, fresh))),
                               *[substitute(source, fresh) for source in load.src[1:]]))
    ctx.fills.add(fill_load)
    filled = UOp(Ops.STORE, (UOp(Ops.INDEX, (strip, position(fresh))), fill_load))
    for r in reversed(list(fresh.values())):
        filled = UOp(Ops.END, (filled, r))
    return UOp(Ops.LOAD, (UOp(Ops.INDEX, (UOp(Ops.AFTER, (strip, filled)), position({}))),))


def _stageable_gate(load: UOp) -> bool:
    """Whether a load is ungated, or gated (``LOAD(address, alternative, gate)``) with a constant
    alternative and a gate of the positions it reads only (a padded tile's last lanes): the copy
    holds the alternative there, and the strip is read without a gate."""
    if len(load.src) == 1:
        return True
    if len(load.src) != 3 or load.src[1].op is not Ops.CONST:
        return False
    read = {u for u in load.src[0].toposort() if u.op is Ops.RANGE}
    return all(u in read for u in load.src[2].toposort() if u.op is Ops.RANGE)


#: a strip hoisted out of the loop that reuses it (:func:`_hoisted_outputs`): at least this many
#: terms, rows narrower than this many bytes, planes of at most this many positions, and reused by at
#: least this many iterations of the loop around it
HOISTED_MIN_ROWS = 256
HOISTED_MAX_ROW_BYTES = 32
HOISTED_MAX_POSITIONS = 64
HOISTED_MIN_REUSE = 10
#: rows of a whole cache line or more that straddle two lines (a row stride no multiple of a line)
#: are hoisted from planes of at most this many positions
HOISTED_LINE_MAX_POSITIONS = 256


def _hoisted_outputs(
    outputs: tuple[UOp, ...], used: list[int], reduces: list[UOp], row_lanes: int, row_bytes: int,
    row_stride: int,
) -> list[UOp]:
    """The output loops of a load that an output loop it does not depend on encloses, to be staged
    with the strip before that loop: a 1x1 conv at 7x7 whose channel groups run outside its
    positions reads the same 49 positions of every input channel once per group, 7 of them (28
    bytes) from each cache line a step; staged once, they are read contiguously.  Only a plane of
    :data:`HOISTED_MAX_POSITIONS` positions or fewer in rows narrower than
    :data:`HOISTED_MAX_ROW_BYTES`, over one reduction of :data:`HOISTED_MIN_ROWS` terms or more (no
    filter window), around which :data:`HOISTED_MIN_REUSE` groups or more run; or rows of a whole
    cache line or more that straddle two lines each (``row_stride`` bytes apart, no multiple of a
    line) from a plane of :data:`HOISTED_LINE_MAX_POSITIONS` positions or fewer, as many groups
    around (SqueezeNet-1.1's classifier: 512 channels at 13x13 read 16 positions, 64 bytes across two
    lines, a step, by each of 200 groups of 5 of its 1000 channels); [] otherwise.

    AMD EPYC, AVX2, 2 cores, in the models, both ways compiled in one process and run in turn (min of
    21), C / LLVM: ResNet-50's 2048 -> 512 and 512 -> 2048 convs 1.01-1.04 -> 0.83-0.97 / 1.04-1.08
    -> 0.81-0.84 ms; MobileNet-v2's 320 -> 1280 0.41-0.56 -> 0.35-0.47 / 0.40 -> 0.32, 960 -> 320
    0.32-0.44 -> 0.31-0.43 / 0.31-0.32 -> 0.25-0.27, 960 -> 160 and 576 -> 160 0.9-1.2x (one run of
    four 1.15-1.38x on C); Inception-v1's 832 -> 160-384 0.86-0.92x / 0.82-0.96x.  Measured and not
    taken: 8 groups or fewer (Inception-v1's 832 -> 32-64, 1.05-1.7x), 14x14 planes of 7-position rows
    (Inception-v1's 512 -> N, 1.1-1.2x), rows of 16 positions (MobileNet-v2's 14x14 projections,
    1.2-1.4x: a whole line a step already), filter windows (3x3 and 5x5 convs at 7x7, 1.1-2.4x).
    SqueezeNet-1.1's classifier, rows of 16 positions 676 bytes apart: C 1.30-1.39 -> 1.12-1.16 ms,
    LLVM 1.39 -> 1.16 (batch 8: C 10.2 -> 8.4, LLVM 10.6 -> 8.8); alone, to 500 and 250 channels (50
    and 25 groups a core) C 0.89x / 0.97x, LLVM 0.86x / 0.88x, at 11x11 0.88x / 0.87x; at 12x12 (rows
    576 bytes apart, each on one line) 0.84 / 0.87-0.88 ms either way.
    The heuristic keeps a loop order whose strips are hoisted (``heuristic._order_for_staging``), but
    moves loops only for strips staged inside their reuse: ResNet-50's expand conv fused with its
    stride-2 projection at 7x7 keeps its channel groups outside its positions, both strips hoisted,
    C 3.52 -> 2.50 / 3.40 -> 2.64 ms (no other kernel of the zoo changes).  Under looser
    conditions (windows and 14x14 planes hoisted too) ResNet-50's 3x3 convs at 14x14 took the
    channel-outer order and ran 1.05-1.25x."""
    free = [i for i in range(max(used, default=-1)) if i not in used]
    windowed = sum(range_size(r) > 1 for r in reduces) != 1
    if not free or windowed or math.prod(range_size(r) for r in reduces) < HOISTED_MIN_ROWS:
        return []
    hoisted = [outputs[i] for i in used if i > free[-1]]
    positions = math.prod(range_size(r) for r in hoisted) * row_lanes
    if row_bytes < HOISTED_MAX_ROW_BYTES:
        worth = positions <= HOISTED_MAX_POSITIONS
    else:  # a whole line a step: worth a copy only where each row straddles two lines
        straddles = row_bytes >= CACHE_LINE and row_stride % CACHE_LINE != 0
        worth = straddles and positions <= HOISTED_LINE_MAX_POSITIONS
    return hoisted if worth and range_size(outputs[free[-1]]) >= HOISTED_MIN_REUSE else []


def _far_apart(stride_bytes: int, rows: int, row_bytes: int) -> bool:
    """Whether a strip of ``rows`` rows of ``row_bytes`` each, ``stride_bytes`` apart, is worth a copy
    (:data:`STAGE_MIN_STRIDE_BYTES`, :data:`STAGE_LONG_MIN_STRIDE_BYTES`)."""
    return stride_bytes >= STAGE_MIN_STRIDE_BYTES or (
        stride_bytes >= STAGE_LONG_MIN_STRIDE_BYTES and rows >= STAGE_LONG_MIN_ROWS
        and row_bytes >= STAGE_LONG_MIN_ROW_BYTES)


stage_rules = PatternMatcher([
    (UPat(Ops.LOAD, name="load"), stage_strided_load, "stage_strided_load"),
], name="stage strided loads")


def stage_strided_loads(ast: UOp, backend: Any, hoist: bool = True) -> UOp:
    """On CPU backends without workgroups (C, LLVM), strips of far-apart rows reused by inner output
    loops, or (``hoist``) by one around theirs (:func:`_hoisted_outputs`), are copied into contiguous
    buffers first (:func:`stage_strided_load`)."""
    # not on OpenCL CPU devices either: pocl gives a work-item's private array a small stack (a
    # 64 KiB strip crashed it with SIGSEGV)
    if backend.has_local or not backend.runs_on_cpu or not backend.vector_widths:
        return ast
    outputs = tuple(r for r in ranges_of(ast) if r.arg[1] in _OUTPUT_TYPES)
    if not outputs:
        return ast
    context = _StageContext(outputs, set(), hoist=hoist)
    return graph_rewrite(ast, stage_rules, ctx=context, name="stage strided loads")


__all__ = [
    "HOISTED_LINE_MAX_POSITIONS", "HOISTED_MAX_POSITIONS", "HOISTED_MAX_ROW_BYTES", "HOISTED_MIN_REUSE",
    "HOISTED_MIN_ROWS", "STAGED_ROW_STEPS", "STAGE_EVERY_OTHER_MIN_ROWS", "STAGE_LONG_MIN_ROWS",
    "STAGE_LONG_MIN_ROW_BYTES", "STAGE_LONG_MIN_STRIDE_BYTES", "STAGE_MAX_BYTES", "STAGE_MIN_STRIDE_BYTES",
    "stage_rules", "stage_strided_loads",
]  # fmt: skip
