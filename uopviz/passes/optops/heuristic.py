"""The hand-coded heuristics: the opts for a kernel chosen from its backend's abilities.

:func:`hand_coded_optimizations` is what ``opts="heuristic"`` applies (and where BEAM search starts
from besides the kernel itself):

* **tensor cores** are not used by default on CPU backends (their tiles are emulated there); on GPUs
  a sum of products whose operands a tensor core takes (float16 into float32 on CUDA) gets TC
  first, its axes padded to the tile where they are not multiples of it (unless that more than
  doubles the work), then more tiles per warp while the grid keeps :data:`TENSOR_CORE_MIN_WARPS`
  warps, then workgroups;
* **GPU reductions** (GROUP_REDUCE): a reduction that streams its rows (softmax, layernorm, a
  row's max, sum or argmax: the largest load varies over every output and steps along the
  reduction) has each row shared by G threads that read neighbouring elements and combine through
  shared memory, whatever the number of rows: G the largest power of two with G² at most
  4 × the row (:data:`GROUP_REDUCE_SLOT_READS_PER_TERM`), the row padded to a multiple of G where
  none divides it; such kernels get no register tile over the rows.  Other reductions to few
  values read along their axis take up to 256 threads;
* **GPU** (workgroups): the innermost GLOBAL axes get LOCAL parts of 16, 8 or 4; a kernel whose
  output axes reuse loads (gemm, conv) gets its threads first (up to 32 along the innermost axis,
  256 in all) and then a register tile of lanes a workgroup apart (:func:`_gpu_register_tile`);
* **CPU** (threads): the outermost GLOBAL axis is split into THREAD chunks (one per core of the
  CPU target, ``Backend.thread_count``); where the cores do not divide it and padding it would add
  too many iterations (7 rows of a staged 7x7 conv), an axis inside it that they divide is split
  and its THREAD part moved outermost (:func:`_thread_outermost`);
* **upcasts**: an output axis that some input does not vary over (so a loaded value is reused across
  its lanes: matmul's M and N) is upcast, which blocks the reduction in registers.  On CPUs the
  tile follows the CPU target's SIMD registers (``Backend.register_bytes``, ``vector_registers``,
  from ``uopviz.backends.target``, never the host's by accident): the
  innermost such axis two registers wide, the next by as many rows as keep the accumulators in
  half the registers and the tile at 256 lanes (float32: M8×N32 on x86-64-v4, M4×N16 on v3, M4×N8
  on v2; on 16 registers a 1x1 conv's two registers of positions take 5 rows where 5 divides the
  channels: :data:`FIVE_ROWS`); output columns narrower than a register (a conv's 7, 14 or 28:
  each column's input broadcast to the channels' vectors) fill half the registers instead (7
  columns × 32 channels, 14 of 32 zmm; 4 × 16 on v3, 7 × 16 where the backend writes the tile's
  step as an assembly block, :data:`REGISTER_TILE_SPARE_REGISTERS`; on v3 a row of 55 or 27 columns, or a 1x1
  conv's 3025 positions, padded to 4-column tiles where its divisors fill the accumulators less:
  :func:`_pads_to_broadcast_columns`; a row of prime width padded to 4-column tiles, or to
  5 × 16 where that pads less: 13 to 15, :data:`PADDED_COLUMNS_WIDE`; a 1x1 conv of 32 input
  channels or fewer takes its positions as two registers instead, 3025 padded to 3040:
  :data:`SHORT_REDUCTION_MAX_TERMS`; a 1x1 conv's one register
  of columns, 56 wide on v3, stacks two output rows: :data:`STACKED_ROWS`), and a grouped conv's
  channels are tiled in blocks within a group;
  an axis that no power of two divides takes its largest divisor within two registers and the
  accumulators, else is padded to a register's lanes (a 1x1 conv's 13x13 = 169 positions: 13 on
  AVX-512, 176 = 11 × 16 on AVX2: two registers where that pads no more than one);
  on GPUs 4x4 lanes (strided: a warp's loads of each lane are neighbours) and the
  reduction unrolled by 4, as long as 132 workgroups remain.  A CPU kernel whose outputs reuse no
  load but read along a row (a depthwise conv, a pooling) gets its row as lanes; a row short of a
  register (14 or 7 columns on x86-64-v4) has its lanes padded up to one, the padded lanes' loads
  and stores gated off (:func:`_padded_row`), and a strided row of odd width over two registers (a
  3x3 stride-2 max pool to 55 or 27 columns) is padded up to whole registers.  An elementwise
  kernel has its innermost axis upcast by one register's lanes on CPUs (16 float32 on x86-64-v4, 8
  on v3), by 8 (or 4) on GPUs;
* **unrolls**: the innermost reduction is unrolled fully when it is small, else (on CPUs, with no
  register tile) by one register's lanes, or by 4 or 2 when the
  register tile is narrow (under two registers), keeping the kernel at 128 lanes at most.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from uopviz.backends.aligned import CACHE_LINE
from uopviz.backends.base import Backend, chunk_sizes
from uopviz.core.affine import linear_coefficient
from uopviz.core.dtype import dtypes
from uopviz.core.exp_log import expanded_ops
from uopviz.core.ops import AxisType, GroupOp, Ops
from uopviz.core.uop import UOp
from uopviz.passes.optops.axes import REDUCE_TYPES, depends_on, position_of, range_size
from uopviz.passes.optops.kernel import Kernel
from uopviz.passes.optops.opts import Opt, OptError, OptOp
from uopviz.passes.optops.staging import stage_strided_loads


def _try(kernel: Kernel, opt: Opt) -> Kernel:
    try:
        applied = kernel.apply(opt)
    except OptError:
        return kernel
    return applied if _within_source_budget(kernel, applied) else kernel


def _axis_of(kernel: Kernel, r: UOp) -> int:
    return position_of(kernel.ranges, r)


def _first_that_applies(kernel: Kernel, opts: Sequence[Opt]) -> Kernel:
    """The kernel with the first of ``opts`` that applies (the kernel itself when none does)."""
    for opt in opts:
        try:
            applied = kernel.apply(opt)
        except OptError:
            continue
        if _within_source_budget(kernel, applied):
            return applied
    return kernel


def _splits(
    kernel: Kernel, r: UOp, factors: Sequence[int], target: AxisType, whole: bool = False
) -> list[Opt]:
    """SPLITs of range ``r`` by each factor that divides it (and leaves more than one iteration, unless
    it is the whole axis of a reduction unrolled fully, or ``whole`` lets any axis go whole)."""
    size = range_size(r)
    return [Opt(OptOp.SPLIT, _axis_of(kernel, r), (f, target, False)) for f in factors
            if f > 1 and size % f == 0 and (size > f or whole or target is AxisType.UNROLL)]


def _row_splits(kernel: Kernel, r: UOp, factors: Sequence[int]) -> list[Opt]:
    """The register tile's second axis ``r`` upcast by each of ``factors`` that divides it, its
    whole extent included when that is two registers or more: DenseNet-121's 3x3 convolutions to
    32 channels at 56x56 take all 32 as 8 columns × 32 channels (16 accumulators) instead of 8 × 16
    (2 cores, each alone: 1.7 -> ~0.75 ms, ONNX Runtime 0.72)."""
    whole = range_size(r) >= 2 * _register_lanes(kernel)
    return _splits(kernel, r, factors, AxisType.UPCAST, whole)


def _lanes(kernel: Kernel) -> int:
    return math.prod(size for size, t in kernel.axes if t in (AxisType.UPCAST, AxisType.UNROLL))


def _register_lanes(kernel: Kernel) -> int:
    """Lanes of one of the backend's vector registers for the kernel's widest loaded element."""
    loads = [u for u in kernel.ast.toposort() if u.op is Ops.LOAD]
    itemsize = max((u.dtype.scalar.itemsize for u in loads), default=4)
    return max(1, kernel.backend_object.register_bytes // itemsize)


#: lanes of the heuristic's CPU register tile at most: 256 lets a tile of whole registers fill half
#: of AVX-512's (M8×N32 in 16 zmm; AVX2 keeps M4×N16 in 8 of its 16 ymm).  M8×N32 runs about 10 %
#: faster than M4×N32 on gemm 512 (1.07× vs 0.96× OpenBLAS on one core); a 3x3 convolution whose
#: rows are whole registers gains most (VGG-16, 2 cores, each kernel alone: 64 channels at 224x224
#: 20.0 -> 13.8 ms as 8 channels × 32 columns instead of 4 × 32, 128 at 112x112 21.5 -> 13.5 ms as
#: 16 × 16 instead of 8 × 16; ONNX Runtime 11.6 and 11.2).  The sources grow little: DenseNet-121's
#: 56 compiled kernels 0.83 -> 0.86 MB, cold compile within noise
HEURISTIC_TILE_LANES = 256


#: what one lane of an op costs in the generated source, in simple operations: THREEFRY expands to
#: its twenty rounds of add, rotate and xor (about 100 lines of C each lane, the rand() a fused
#: matmul recomputes); a bfloat16 cast is emulated with integer ops where a backend lacks the type;
#: EXP and LOG cost the ops Instruction Selection writes them as
_OP_COST = {Ops.THREEFRY: 100}
_COUNTED_OPS = GroupOp.ELEMENTWISE | {Ops.LOAD, Ops.STORE, Ops.CAST, Ops.BITCAST, Ops.REDUCE}


def _op_cost(u: UOp) -> int:
    if u.op not in _COUNTED_OPS:
        return 0
    if u.op in (Ops.EXP, Ops.LOG):  # one node until Instruction Selection writes out its UOps
        return sum(_op_cost(v) for v in expanded_ops(u.op, u.dtype))
    if u.op is Ops.CAST and dtypes.bfloat16 in (u.dtype.scalar, u.src[0].dtype.scalar):
        return 6  # emulated: bits, round to nearest even, NaN select (float_to_bf16)
    return _OP_COST.get(u.op, 1)


#: lane operations (:func:`source_estimate`) the heuristic's UPCASTs and UNROLLs may make a kernel
#: hold: twice a float32 gemm's M4×N32 tile (~4,500), so ordinary tiles are not cut; a 31×8
#: argmin fully unrolled over its upcast rows (~29,000: 248 lanes of ~120 ops) had pocl compile
#: for ~80 s.  BEAM may go past it
HEURISTIC_SOURCE_LANE_OPS = 4800

#: reduction steps from which a reduction with two registers of output lanes is unrolled too: each
#: output's float sum is one chain of additions as long as the loop, and its rounding error grows
#: with the chain.  VGG-16's first linear layer (25088 terms, 16 outputs a step) summed in one
#: chain put the network's softmax 1.1e-5 from float64 on LLVM (AVX2 host, 3.2e-6 on C: the same
#: chains, other roundings); unrolled by 4 the layer's outputs went 4.0e-6 -> 2.0e-6 and the
#: softmax 2.9e-6 (LLVM) / 7.3e-6 (C), the layer as fast (memory-bound: 15-19 ms either way)
LONG_REDUCTION = 4096


def _within_source_budget(before: Kernel, after: Kernel) -> bool:
    """Whether ``after`` adds no lanes to ``before`` or stays within
    :data:`HEURISTIC_SOURCE_LANE_OPS`."""
    return _lanes(after) <= _lanes(before) or source_estimate(after) <= HEURISTIC_SOURCE_LANE_OPS


def source_estimate(kernel: Kernel) -> int:
    """Lane operations the kernel's source will hold: each op's cost (:data:`_OP_COST`) times the
    lanes of the UPCAST and UNROLL axes it depends on (a matmul's load of A is not replicated over
    N's lanes).  What the C-family compilers' time grows with: pocl took ~80 s over the 110 KB of a
    fully unrolled 31×8 argmin."""
    lanes: dict[UOp, int] = {}
    ranges: dict[UOp, frozenset[UOp]] = {}
    total = 0
    for u in kernel.ast.toposort():
        found = frozenset().union(*(ranges[s] for s in u.src))
        if u.op is Ops.RANGE and u.arg[1] in (AxisType.UPCAST, AxisType.UNROLL):
            found |= {u}
        ranges[u] = found
        cost = _op_cost(u)
        if cost:
            if found not in lanes:
                lanes[found] = math.prod(range_size(r) for r in found)
            total += cost * lanes[found]
    return total


#: the most padding a strided row within two registers takes (a fraction of the padded row)
STRIDED_ROW_MAX_PADDING = 1 / 4


def _strided_row_width(size: int, lanes: int) -> int | None:
    """The tile (one or two registers' ``lanes``, the one that pads least, the wider on a tie) a
    strided row of ``size`` is padded to, or None where its exact tile stays: a row no register
    divides that is odd and wider than a register, or within two registers and padded by at most
    :data:`STRIDED_ROW_MAX_PADDING` (14 or 13 to 16, 7 or 6 to 8 on AVX2); not 28 on AVX2 (7 x 4:
    padded to 4 x 8, its last vector's lanes half clamped, Inception-v1's 192-channel pool 0.119 ->
    0.121 ms).  Each padded register reads its every other element as two loads and a shuffle, the
    lanes clamped to the row's end one by one (CFamilyRenderState.render_every_other_lane), where
    the odd row's divisors were odd lane counts (a 3x3 stride-2 max pool to 55, 27 or 13 columns:
    11, 9 or 13 lanes, scalars in GCC's code).

    Odd rows wider than two registers, SqueezeNet-1.1's max pools each alone on C (AVX2, 2 cores):
    64 channels to 55x55 0.36-0.40 -> 0.22 ms (56 as 7 x 8), 128 to 27x27 0.38 -> 0.11 ms (32 as 2 x
    16); AlexNet's first, 64 to 27x27, 0.154 -> 0.062 ms (x86-64-v2's code: 0.175 -> 0.068 ms, 28 as
    7 x 4).  Odd rows within two registers, in the models, both rules compiled in one process and
    run in turn (min of 15-21), C / LLVM: 13 columns as 16 lanes, SqueezeNet-1.1's last pool (256
    channels) 0.074 -> 0.046 / 0.034 -> 0.030 ms, AlexNet's second (192) 0.070 -> 0.045 / 0.026 ->
    0.024; x86-64-v2's 7 columns as 8, MobileNet-v2's stride-2 depthwise conv of 576 channels 0.093
    -> 0.047 / 0.034 -> 0.028 ms, Inception-v1's 832-channel pool 0.108 -> 0.049 / 0.062 -> 0.041 ms.
    Even rows within two registers, the same way: Inception-v1's 3x3 stride-2 max pools
    of 480 channels to 14 columns 0.156 -> 0.084 / 0.148 -> 0.077 ms and of 832 to 7 0.104 -> 0.045 /
    0.066 -> 0.041; MobileNet-v2's stride-2 depthwise convs to 14 and 7 columns 0.043 -> 0.035 and
    0.052 -> 0.030 on C, within the noise on LLVM (0.107 -> 0.129, 0.159 -> 0.109, 0.036 -> 0.034 ms
    in three runs); VGG-16's 2x2 max pools to 14 and 7 0.94x and 0.84x / 0.93x and 0.91x; the one
    loss, DenseNet-121's 2x2 average pools (transitions to 14 and 7 columns), 0.016 -> 0.019 and
    0.021 -> 0.024 / 0.022 -> 0.027 and 0.015 -> 0.021 ms; AlexNet's last pool (6 to 8) alike."""
    if size % lanes == 0:
        return None
    width = min((lanes * 2, lanes), key=lambda w: -(-size // w) * w)
    padded = -(-size // width) * width
    if size % 2 and size > lanes:
        return width
    if size < 2 * lanes and padded - size <= padded * STRIDED_ROW_MAX_PADDING:
        return width
    return None


def _row_tile(kernel: Kernel, first: UOp, lanes: int) -> Kernel:
    """``first`` upcast alone (no second axis reuses a load: a depthwise conv, a pooling) by the
    divisor of at most two registers' lanes that fills the vectors best, lanes per vector op of the
    backend's widths (:func:`~uopviz.backends.base.chunk_sizes`): a whole row of 14 (seven 2-lane
    ops) rather than 7 scalar columns (576 channels 14x14 on C: 220 -> 48 us), 16 of 112.  Where
    lanes padded up to a register width fill the registers better still (:func:`_padded_row`), the
    upcast lanes are padded (PADTO on the lanes gates off their loads and stores)."""
    size = range_size(first)
    widths = kernel.backend_object.vector_widths or (1,)
    # padded lanes are gated loads: whole-vector loads where each load steps one element along the
    # row; a stride-2 row keeps its exact tile unless _strided_row_width pads it (padded with each
    # lane read on its own, before the shuffle of render_every_other_lane, Inception-v1's 3x3
    # stride-2 max pools alone, two cores: 192 channels to 28x28 0.105 -> 0.219 ms, 64 to 56x56
    # 0.141 -> 0.338)
    contiguous = _steps_by_one(kernel, first)
    width = _strided_row_width(size, lanes) if not contiguous else None
    if width is None and not contiguous and _windows_overlap(kernel, first):
        # a register's narrower vectors: 7 or 6 columns as 8 lanes of AVX-512's 16, not 7 scalars.
        # Each kernel in the model, in sequence (Sapphire Rapids, 2 cores), C / LLVM: MobileNet-v2's
        # stride-2 depthwise conv of 576 channels to 7 columns 0.043 -> 0.029 / 0.021 -> 0.014 ms,
        # Inception-v1's 832-channel max pool to 7 0.068 -> 0.048 / 0.135 -> 0.025, AlexNet's last
        # pool (6 columns) 0.022 -> 0.018 / 0.021 -> 0.011.  Windows that do not overlap keep their
        # exact row: DenseNet-121's 2x2 average pools to 7, 0.021 -> 0.026 ms on LLVM as 8 lanes
        narrower = sorted((w for w in widths if 2 < w < lanes), reverse=True)
        width = next((w for w in (_strided_row_width(size, n) for n in narrower) if w is not None), None)
    if width is not None:  # whatever its divisors (13 on SSE has none)
        padded_tile = _padded_columns(kernel, first, width)
        if padded_tile is not kernel:
            return padded_tile
    divisors = [f for f in range(2, min(2 * lanes, size) + 1) if size % f == 0]
    if not divisors:
        return kernel
    best = max(divisors, key=lambda f: (f / len(chunk_sizes(f, widths)), f))
    itemsize = kernel.backend_object.register_bytes // lanes
    padded = _padded_row(divisors, best, lanes, widths, itemsize) if contiguous else None
    axis = _axis_of(kernel, first)
    exact = Opt(OptOp.SPLIT, axis, (best, AxisType.UPCAST, False))
    if padded is None:
        return _try(kernel, exact)
    tiled = _try(kernel, Opt(OptOp.SPLIT, axis, (padded[0], AxisType.UPCAST, False)))
    if tiled is kernel:
        return kernel
    # a SPLIT's UPCAST lanes go last; where the padding does not apply, the exact row
    padded_tile = _try(tiled, Opt(OptOp.PADTO, len(tiled.ranges) - 1, padded[1]))
    return padded_tile if padded_tile is not tiled else _try(kernel, exact)


def _windows_overlap(kernel: Kernel, row: UOp) -> bool:
    """Whether the windows along a strided ``row`` overlap: a window's taps along it (the reduce
    axis its loads step one element along) outnumber the row's stride (a 3x3 stride-2 pool, not a
    2x2 one)."""
    loads = [u for u in kernel.ast.toposort() if u.op is Ops.LOAD]
    stride = max((step for step in _load_steps(kernel, row, loads) if step), default=1)
    taps = [range_size(r) for r in kernel.ranges
            if r.arg[1] in REDUCE_TYPES and _read_along(kernel, r, loads)]
    return max(taps, default=1) > stride


#: how many times more real lanes per register op a padded row must give than the exact one (28 on
#: AVX2: 7 of 8 a register op, not 4; 14 on SSE: 3.5 of 4, not 2)
ROW_PADDING_MIN_GAIN = 1.75
#: an exact row tile whose chunks are this many bytes or more is not padded: on the AVX-512 Xeons
#: measured, 256-bit ops issue on three ports and 512-bit ones on two, so 8-lane chunks are not the
#: half-empty registers they look (a row of 56: 8 exact lanes, or 28 padded to 32; MobileNet-v2's
#: depthwise conv of 144 channels at 56x56, Kernel.time on random inputs: 92 -> 115 us padded)
ROW_PADDING_MAX_CHUNK_BYTES = 32


def _padded_row(
    divisors: list[int], best: int, lanes: int, widths: Sequence[int], itemsize: int
) -> tuple[int, int] | None:
    """``(lanes, padded)``: a row tile of ``lanes`` (a divisor of the row) padded up to a multiple
    of a register width, where that gives :data:`ROW_PADDING_MIN_GAIN` times the real lanes per
    register op of the exact tile ``best`` and that tile's chunks are narrower than
    :data:`ROW_PADDING_MAX_CHUNK_BYTES`; None otherwise (the least padding of the best).  A row
    of 14 on AVX-512 as one 16-lane vector of which 14 are stored instead of seven 2-lane chunks:
    each kernel alone in the model, two cores, Inception-v1's 3x3 max pools of 512 channels at
    14x14 0.142 -> 0.035 ms (ONNX Runtime 0.029), of 832 at 7x7 0.066 -> 0.030; MobileNet-v2's
    depthwise convs of 576 channels at 14x14 0.078 -> 0.035 ms, 960 at 7x7 0.068 -> 0.028.
    ``Kernel.time`` on random inputs, two threads: on AVX2 a row of 28 as 14 lanes padded to 16
    (the 256-channel max pool 168 -> 98 us), on SSE a row of 14 as 7 lanes padded to 8 (the
    512-channel max pool 95 -> 69 us, the 384-channel depthwise conv 68 -> 38 us)."""
    fitting = [w for w in widths if w <= lanes]
    if not fitting:
        return None

    def per_op(real: int, padded: int) -> float:
        return real / len(chunk_sizes(padded, fitting))

    if max(chunk_sizes(best, fitting)) * itemsize >= ROW_PADDING_MAX_CHUNK_BYTES:
        return None
    exact = per_op(best, best)
    options = [(per_op(f, p), f, p) for f in divisors
               for w in fitting if w > 1 for p in [-(-f // w) * w] if p != f and p <= 2 * lanes]
    if not options:
        return None
    gain, real, padded = max(options, key=lambda option: (option[0], option[1], -option[2]))
    return (real, padded) if gain >= ROW_PADDING_MIN_GAIN * exact else None


def _broadcast_columns(size: int, lanes: int, accumulators: int) -> int | None:
    """Output columns of a register tile narrower than a register (a conv's 28-wide rows on
    AVX-512: each column's input is broadcast to the channels' vectors): the largest divisor of
    ``size`` above 2 that leaves two channel registers per column within ``accumulators`` (7 of
    28, 8 of 56, 7 of 14 and 7 on AVX-512: 7 columns × 32 channels in 14 registers, each weight
    vector loaded for 7 multiply-adds), else the smallest divisor under a register's lanes (7 of
    14 on AVX2: 7 × 8); None where no divisor lies between 2 and ``lanes``.  Where the divisor
    within fills less than half the accumulators and a larger one fills them with one channel
    register a column, that one (27 columns on AVX-512: 9 × 16 channels, not 3 × 32).  In the
    models, both ways in one process (AMD EPYC with full-width AVX-512, 2 cores, min of 15), C /
    LLVM: AlexNet's 5x5 conv at 27x27 1.334 -> 1.017 / 1.274 -> 0.954 ms (the model 8.64 -> 8.35 /
    8.64 -> 8.41), SqueezeNet-1.1's 3x3 convs at 27x27 0.172 -> 0.131 / 0.154 -> 0.118 (batch 8
    0.75-0.77x); no other kernel of the zoo changes (AVX2's 8 lanes leave no such divisor)."""
    divisors = [c for c in range(3, min(size, lanes - 1) + 1) if size % c == 0]
    within = [c for c in divisors if c <= accumulators // 2]
    # a divisor tile that fills less than half the accumulators with two channel registers a
    # column (27 = 3 x 9 on AVX-512: 3 columns, 6 of 16) gives way to the largest divisor that
    # fills them with one register a column (9 x 16 channels)
    one_register = [c for c in divisors if accumulators // 2 < c <= accumulators]
    if within and 4 * max(within) < accumulators and one_register:
        return max(one_register)
    return max(within) if within else min(divisors, default=None)


#: the most a row of broadcast columns is padded (a fraction of its width) to reach tiles of two
#: channel registers per column (:func:`_pads_to_broadcast_columns`)
BROADCAST_ROW_MAX_PADDING = 1 / 16
#: reduction terms from which a row is padded to broadcast columns (below, the padded tile's gated
#: one-lane stores weigh more than its multiply-adds): where its divisor tile takes one channel
#: register per column (5 columns), and where it takes two already (3 columns) or a register of
#: positions (a row of no divisor)
PADDED_BROADCAST_MIN_TERMS = 32
PADDED_BROADCAST_MIN_TERMS_FILLED = 128


def _pads_to_broadcast_columns(
    size: int, columns: int | None, lanes: int, accumulators: int, terms: int, channels: int | None
) -> bool:
    """Whether a row of ``size`` broadcast columns, whose divisor tile is ``columns``, is padded up
    to tiles of ``accumulators // 2`` columns by two channel registers (``channels`` divisible by two
    registers' ``lanes``): where no divisor fills three quarters of the accumulators (5 columns of
    one register, 3 of two, or no divisor), those columns are narrower than a register (on SSE 4
    columns are a whole register: 1.4-1.8x slower padded), the reduction has ``terms`` enough
    (:data:`PADDED_BROADCAST_MIN_TERMS`) and the padding is at most
    :data:`BROADCAST_ROW_MAX_PADDING` of the row.  The caller pads only rows whose loads step one
    element along them (a stride-2 row of 111 padded to 112: 0.51 -> 0.56 ms).  AVX2 (AMD EPYC, 2
    cores), every changed kernel of the zoo compiled both ways in one process and run in turn on
    the model's arrays, min of 14, C / LLVM: SqueezeNet-1.1's 12 changed convs 2.82 -> 2.18 / 2.66
    -> 2.24 ms (its 3x3 ones at 55x55 as 4 columns x 16 channels of 56 instead of 5 x 8, 0.58 ->
    0.39-0.44 / 0.53 -> 0.43 ms; its 1x1 ones at 55x55 as 4 x 16 of 3028 positions from 64 or 128
    channels, at 27x27 of 732 and at 13x13 of 172 from 128 or more, 0.05-0.18 -> 0.04-0.12 ms
    each); AlexNet's 5x5 conv at 27x27 3.50 -> 2.87 / 3.48 -> 2.90 ms.  Left alone, measured: rows
    of 14 and 7 (16 and 8 would pad 14 %), 49 positions (7 columns of one register; ResNet-50's 1x1
    convs 5 % slower, Inception-v1's 4-7 % faster), 13x13 1x1 convs from 48 or 64 channels (a
    register of positions: 0.035 -> 0.050 ms padded), SqueezeNet's classifier (1000 channels: 4
    columns x 8 channels, 2.0 -> 2.4 ms on LLVM).  AVX-512 (32 registers: 8 columns x 32 channels),
    the same way (min of 15), C / LLVM: SqueezeNet-1.1's 3x3 convs at 55x55 0.280 -> 0.276 / 0.278
    -> 0.259 ms, its 1x1 convs at 13x13 from 128 and 256 channels 0.044 -> 0.043 and 0.081 -> 0.072
    / 0.043 -> 0.039 and 0.076 -> 0.065; the model 4.67 -> 4.61 / 4.41 -> 4.39 ms (min); no other
    kernel of the zoo changes."""
    width = accumulators // 2
    if columns == width or size % width == 0 or not 2 <= width < lanes:
        return False
    if columns is not None and columns * (2 if columns < width else 1) > accumulators * 3 // 4:
        return False  # 7 columns of one register each: ResNet-50's 7x7 1x1 convs 5 % slower padded
    filled = columns is None or columns < width
    if terms < (PADDED_BROADCAST_MIN_TERMS_FILLED if filled else PADDED_BROADCAST_MIN_TERMS):
        return False
    if channels is None or channels % (2 * lanes):
        return False  # 4 columns x 8 channels fill half the accumulators (a classifier's 1000)
    padded = -(-size // width) * width
    return padded - size <= size * BROADCAST_ROW_MAX_PADDING


#: reduction terms up to which a 1x1 conv's positions that no register divides are padded to two
#: registers of lanes (:func:`_short_positions_tile`).  SqueezeNet-1.1's expand convs from 16
#: channels at 55x55 and from 32 at 27x27 (the only kernels of the zoo that change), both ways in
#: one process on the model's arrays (AMD EPYC, AVX2, 2 cores, min of 21, three runs), C: 0.093-0.127
#: -> 0.066-0.111 ms and 0.074-0.094 -> 0.059-0.101 (0.58-1.07x), LLVM 0.080-0.111 -> 0.075-0.099 and
#: 0.076-0.118 -> 0.054-0.068; the model C 6.20 -> 5.97 ms (min), LLVM 6.00 -> 5.91.  Measured and
#: left out: positions outside the channel groups (C 0.75x on the 27x27 one but 1.06x on the 55x55,
#: LLVM the other way round), rows padded by more than a sixteenth (MobileNet-v2's 32 -> 192 convs,
#: a row of 28 as 32: C 1.06x, LLVM 1.37x slower) and SSE (8 positions x 4 channels: LLVM 1.4-1.6x
#: slower, C 0.74-1.0x)
SHORT_REDUCTION_MAX_TERMS = 32
#: the same bound on 32 vector registers (AVX-512: 8 channel rows x 32 positions), and on them the
#: bound for outputs of one register of channels or fewer (whose broadcast tile is 5 columns x 8
#: channels, half a register).  Each 1x1 conv alone, both ways in one process (AMD EPYC with
#: full-width AVX-512, 2 cores, min of 40), positions tile / broadcast columns, C and LLVM: 64 -> 64
#: channels at 55x55 0.82 / 0.72, 48 -> 64 at 27x27 0.66 / 0.77, 64 -> 128 and 64 -> 256 at 27x27
#: 0.67-0.70, 128 -> 16 at 55x55 0.41 / 0.38; but 96 -> 64 and 128 -> 64 at 55x55 1.04 / 0.92 and
#: 1.16 / 1.19, 128 and 256 -> 32 at 55x55 1.00-1.10, 256 -> 64 at 27x27 1.03 / 1.08 (a broadcast
#: tile of 8 columns x 32 channels is already whole registers).  In SqueezeNet-1.1 (its squeeze convs
#: 64 and 128 -> 16 at 55x55), both ways on the model's arrays (min of 15), C 0.096-0.142 ->
#: 0.034-0.056 ms and 0.053-0.074 -> 0.021-0.030, LLVM 0.088-0.099 -> 0.030-0.031 and 0.047-0.056 ->
#: 0.021; the model C 2.81 -> 2.67 ms, LLVM 2.75 -> 2.72 (min); at batch 8 the two C 1.31 -> 0.45 ms,
#: LLVM 1.66 -> 0.40; no other kernel of the zoo changes.  Under x86-64-v3 on the same host they ran
#: 1.0-1.56x slower padded: AVX2 keeps :data:`SHORT_REDUCTION_MAX_TERMS` whatever the outputs
SHORT_REDUCTION_MAX_TERMS_32_REGISTERS = 64
NARROW_OUTPUTS_MAX_TERMS_32_REGISTERS = 256


def _positions_padding(kernel: Kernel, positions: UOp, slides: bool, lanes: int) -> float | None:
    """How much a 1x1 conv's positions grow (a fraction of them) padded to two registers of
    ``lanes``, or None where they cannot take the lanes: a window slides over them, registers of
    fewer than 8 lanes (SSE's 4: LLVM 1.4-1.6x slower), a row within two registers already, or a
    load that steps by more than one element along them (padded lanes are gated whole-vector loads)."""
    size, width = range_size(positions), 2 * lanes
    if slides or lanes < 8 or size <= width or not _steps_by_one(kernel, positions):
        return None
    return (-(-size // width) * width - size) / size


def _short_positions_tile(
    kernel: Kernel, positions: UOp, slides: bool, lanes: int, terms: int, channels: int | None
) -> bool:
    """Whether a 1x1 conv's positions (no filter window slides over them), stepping by one element
    and wider than two registers, are padded to two registers of lanes (by at most
    :data:`BROADCAST_ROW_MAX_PADDING`) rather than tiled as broadcast columns: with a reduction of
    :data:`SHORT_REDUCTION_MAX_TERMS` ``terms`` or fewer (on AVX-512's 32 registers
    :data:`SHORT_REDUCTION_MAX_TERMS_32_REGISTERS`, or :data:`NARROW_OUTPUTS_MAX_TERMS_32_REGISTERS`
    for ``channels`` outputs of one register or fewer) a tile of broadcast columns stores each of its few
    sums lane by lane (5 columns x 8 channels: 40 element stores per 16 x 5 multiply-adds), a tile of
    positions stores whole vectors.  On registers of 8 lanes or more: AVX2's 16 (4 or 5
    channel rows) and AVX-512's 32 (8 rows of 32 positions).  AVX-512 (AMD EPYC, 2 cores), the
    model's changed kernels compiled both ways in one process and run in turn (min of 15), C /
    LLVM: the 55x55 ones 0.089-0.099 -> 0.052-0.053 ms / 0.052-0.053 -> 0.044-0.045, the 27x27 ones
    0.057-0.059 -> 0.037 / 0.057-0.062 -> 0.032; SqueezeNet-1.1 4.85 -> 4.71 / 4.73 -> 4.67 ms (min),
    at batch 8 its four 1.69 -> 1.35 ms (C); no other kernel of the zoo changes (batch 1 and 8)."""
    padding = _positions_padding(kernel, positions, slides, lanes)
    if padding is None or padding > BROADCAST_ROW_MAX_PADDING:
        return False  # a row of 28 padded to 32: MobileNet-v2's 32 -> 192 convs 1.06x / 1.37x slower
    if kernel.backend_object.vector_registers < 32:
        return terms <= SHORT_REDUCTION_MAX_TERMS
    if channels is not None and channels <= lanes:
        return terms <= NARROW_OUTPUTS_MAX_TERMS_32_REGISTERS
    return terms <= SHORT_REDUCTION_MAX_TERMS_32_REGISTERS


#: the most a 1x1 conv's positions are padded by to take the lanes where its channels fill no whole
#: register (:func:`_positions_for_part_register_channels`): SqueezeNet-1.1's 13x13 (169 -> 192)
PART_REGISTER_CHANNELS_MAX_PADDING = 1 / 4


def _positions_for_part_register_channels(
    kernel: Kernel, positions: UOp, slides: bool, lanes: int, channels: int | None
) -> bool:
    """Whether a 1x1 conv's positions (no window slides over them, stepping by one element, wider
    than two registers) are padded to two registers of lanes (by at most
    :data:`PART_REGISTER_CHANNELS_MAX_PADDING`) and its channels broadcast in rows, because no whole
    register divides the channels: on 32 registers (AVX-512) a broadcast tile of them takes half a
    register of channels per column (SqueezeNet-1.1's classifier, 512 -> 1000 at 13x13: 13 columns x
    8 channels, a broadcast and a load per multiply-add of 8 lanes).  Padded, it is 8 channel rows x
    32 positions (169 -> 192).  Alone, both ways in one process (AMD EPYC with full-width AVX-512, 2
    cores, min of 40), C: 0.816 -> 0.500 ms (212 -> 346 GFLOP/s of the 169 positions), by hand 48 x 5
    and 64 x 4 the same; the 13x13 1x1 convs whose channels are whole registers (64, 192, 256) keep
    their 13 x 16 tiles (padded 0.74-1.06x their time alone, 1.0-1.45x for 64 x 4)."""
    if kernel.backend_object.vector_registers < 32 or channels is None or channels % lanes == 0:
        return False
    padding = _positions_padding(kernel, positions, slides, lanes)
    return padding is not None and padding <= PART_REGISTER_CHANNELS_MAX_PADDING


def _cpu_register_tile(
    kernel: Kernel, first: UOp, lanes: int, alone: bool, channels: int | None = None,
    second_position: int | None = None,
) -> tuple[Kernel, list[int]]:
    """Upcast ``first`` (the innermost output axis that reuses loads) by two registers' lanes (or one,
    or less), and say how many rows the second axis may add: the accumulators take at most half the
    vector registers (the rest hold the loaded row and broadcasts).  A tile whose rows are whole
    registers (gemm's N) also stays within ``HEURISTIC_TILE_LANES`` lanes (AVX-512 float32: M8×N32
    in 16 registers; AVX2: M4×N16 in 8); one narrower than a register (a conv's columns, broadcast to
    the channels' vectors: :func:`_broadcast_columns`) fills the half (AVX-512, 128 channels
    28x28: 7 columns × 32 channels in 14 registers).  ``alone``: no second axis follows
    (:func:`_row_tile`); ``channels``: the second axis's extent, where the caller knows it, and
    ``second_position`` its position (an axis :func:`_stacked_rows` leaves alone)."""
    backend = kernel.backend_object
    accumulators = backend.vector_registers // 2
    planned = backend.writes_register_tiles and _planned_tile(kernel, second_position)
    factors = [f for f in (2 * lanes, lanes, 8, 4) if f <= max(backend.vector_widths or (1,)) * 2]
    size = range_size(first)
    # on 16 vector registers a conv's columns are broadcast to the channels' vectors even where
    # whole registers of columns would fit: rows of columns by a few channels keep a loaded row per
    # filter tap beside the accumulators and spill them.  AVX2 (AMD EPYC), 2 cores, each conv alone,
    # 4 columns × 16 channels against 16 columns × 4 channels or 8 × 8, GFLOP/s C / LLVM: 256
    # channels at 56x56 87 -> 135 / 77 -> 98, 128 at 56x56 78 -> 101 / 56 -> 112, 128 at 112x112
    # 45-70 -> 96-110 C, 64 at 224x224 44-62 -> 69 / 35-56 -> 74; ResNet-18's 7x7 stride-2 conv
    # (3 -> 64 channels, 112x112) in the model 4.50 -> 2.85 / 2.43 -> 1.79 ms
    slides = _slides_columns(kernel, first)
    broadcast = slides and (backend.vector_registers <= 16 or _window_rows_overflow_l1(kernel, first, lanes))
    wide_columns = False  # a row padded to tiles of PADDED_COLUMNS_WIDE columns
    tiled = _row_tile(kernel, first, lanes) if alone else kernel
    if tiled is kernel and not alone and (broadcast or not any(size % f == 0 for f in factors if f >= lanes)):
        terms = _reduction_terms(kernel)
        if _short_positions_tile(kernel, first, slides, lanes, terms, channels) or \
                _positions_for_part_register_channels(kernel, first, slides, lanes, channels):
            tiled = _padded_columns(kernel, first, 2 * lanes)
        columns = _broadcast_columns(size, lanes, accumulators)
        # padded columns are gated loads: a strided row keeps its exact divisor (see the docstring)
        if tiled is kernel and _steps_by_one(kernel, first) and \
                _pads_to_broadcast_columns(size, columns, lanes, accumulators, terms, channels):
            tiled = _padded_columns(kernel, first, accumulators // 2)
        if tiled is kernel and columns is not None and \
                _pads_past_a_narrow_divisor(size, columns, lanes, accumulators):
            tiled = _padded_columns(kernel, first, lanes)
        if tiled is kernel and columns is not None:
            tiled = _try(kernel, Opt(OptOp.SPLIT, _axis_of(kernel, first), (columns, AxisType.UPCAST, False)))
    if tiled is kernel:
        tiled = _first_that_applies(kernel, _splits(kernel, first, factors, AxisType.UPCAST))
    if tiled is kernel:
        # no power of two divides the axis (a conv's 14 wide rows): the largest other divisor within
        # two registers still reuses the loads (256 channels 14x14: ~5 -> 20-31 GFLOP/s with the
        # lanes reordered by _power_of_two_lanes_inside), as long as it is within the accumulators
        # (each of its positions takes one: 13 of 16 registers spilled); an axis whose divisors all
        # exceed them (SqueezeNet's 13x13 = 169 positions of a 1x1 conv: 13) is padded to a
        # register's lanes instead.  C, AVX2, 2 cores, each alone: SqueezeNet-1.1's 512 -> 1000
        # classifier conv 3.52 -> 2.55 ms (13 positions x 8 channels -> 8 of 176 x 8), its nine 1x1
        # convs at 13x13 4.61 -> 3.53 ms
        divisors = [f for f in range(min(2 * lanes, size - 1), 2, -1) if size % f == 0]
        within = [f for f in divisors if f <= accumulators]
        tiled = _first_that_applies(kernel, _splits(kernel, first, within[:1], AxisType.UPCAST))
        if tiled is kernel and divisors and not within:
            wide = PADDED_ROW_REGISTERS * lanes
            same_padding = -(-size // wide) * wide == -(-size // lanes) * lanes
            tiled = _padded_columns(kernel, first, wide if same_padding else lanes)
        if tiled is kernel and 2 < size <= lanes:
            # a prime width (a conv's 7): the whole axis is the tile (512 channels 7x7: 4-7 -> 20-32
            # GFLOP/s with the lanes reordered below)
            tiled = _try(kernel, Opt(OptOp.SPLIT, _axis_of(kernel, first), (size, AxisType.UPCAST, False)))
        if tiled is kernel and broadcast and not alone and size > lanes:
            padded_width = _prime_row_columns(size, lanes)
            tiled = _padded_columns(kernel, first, padded_width)
            wide_columns = tiled is not kernel and padded_width == PADDED_COLUMNS_WIDE
    kernel = tiled
    if not alone and not slides and backend.vector_registers <= 16 and _lanes(kernel) == lanes >= 8:
        kernel = _stacked_rows(kernel, second_position, lanes)  # AVX2's 8 lanes (measured there, not SSE)
    width = _lanes(kernel)
    if wide_columns or _five_broadcast_columns(width, lanes, backend.vector_registers):
        most = 2 * lanes  # two registers of channels per column: 10 accumulators
    elif width < lanes:
        # a row narrower than a register (a conv's 7 columns): the rows become the vectors' lanes
        # (_power_of_two_lanes_inside), so the accumulators are width * rows / lanes registers.
        # AVX-512, one core, 128 channels 28x28: 4 columns x 32 channels (8 accumulators) 118
        # GFLOP/s, 7 x 32 (14) 146, ONNX Runtime 172; 7 x 64 and 14 x 32 (28) spill: 107-138.
        # Where the renderer plans the tile's registers (a weight vector and the broadcast beside
        # the accumulators: REGISTER_TILE_SPARE_REGISTERS), 7 columns take 16 channels on AVX2
        # (:func:`_planned_tile`)
        registers = backend.vector_registers - REGISTER_TILE_SPARE_REGISTERS if planned else accumulators
        most = registers * lanes // width
    else:
        registers_per_row = max(1, width // lanes)
        most = max(1, min(accumulators // registers_per_row, HEURISTIC_TILE_LANES // width))
    rows = [f for f in (32, 16, 8, 4, 2) if f <= most]
    if not slides and width == 2 * lanes and backend.vector_registers <= 16 and most == 4:
        rows = [FIVE_ROWS, *rows]  # tried first: a channel count that 5 divides takes it
    return kernel, rows


#: the share of a core's L1 data cache that the input rows a tile of two registers of columns reads
#: over its reduction may take (:func:`_window_rows_overflow_l1`): the rest holds the weights
WINDOW_ROWS_L1_SHARE = 0.5


def _window_rows_overflow_l1(kernel: Kernel, columns: UOp, lanes: int) -> bool:
    """Whether a conv's columns, held in the lanes (two registers of them, each weight broadcast),
    would read more input over the tile's reduction than :data:`WINDOW_ROWS_L1_SHARE` of the L1
    data cache: one row segment (two registers of columns, the filter's width beside them, and a
    line for the misalignment) per input channel and filter row.  Such a tile's vector loads come
    from L2 in as many streams as it has rows, one plane apart; with the channels in the lanes
    instead (the columns broadcast: :func:`_broadcast_columns`) a tile reads a few columns of each
    row and the weights as one stream.  VGG-16's 3x3 convs, each changed kernel both ways in one
    process on the model's arrays (AMD EPYC with a 32 KiB L1 and AVX-512, 2 cores, C, median of 10):
    64 channels at 224x224 46.8 -> 18.0 ms (ONNX Runtime's 23), 64 -> 128 and 128 -> 128 at 112x112
    14.4 -> 10.0 and 39.0 -> 21.0 ms.  A stem's 3 input channels (ResNet-50's 7x7, MobileNet-v2's
    3x3) read 4-8 KiB and keep the columns in the lanes: broadcast they were 1.04-1.10x slower."""
    reduced = [r for r in kernel.ranges if r.arg[1] in REDUCE_TYPES]
    for load in (u for u in kernel.ast.toposort() if u.op is Ops.LOAD):
        column_steps = _load_steps(kernel, columns, [load])
        taps = [r for r in reduced if _load_steps(kernel, r, [load]) == [1]]
        if not column_steps or column_steps[0] not in (1, 2) or not taps:
            continue
        rows = math.prod(range_size(r) for r in reduced if r is not taps[0] and depends_on(load.src[0], r))
        elements = 2 * lanes * column_steps[0] + range_size(taps[0]) - 1
        lines = -(-elements * load.dtype.scalar.itemsize // CACHE_LINE) + 1
        if rows * lines * CACHE_LINE > kernel.backend_object.l1_bytes * WINDOW_ROWS_L1_SHARE:
            return True
    return False


#: the fewest accumulators a divisor's tile of columns may fill, as a share of the accumulators (half
#: the vector registers), before a row is padded to a register of columns instead
#: (:func:`_pads_past_a_narrow_divisor`)
NARROW_DIVISOR_MIN_SHARE = 1 / 2


def _pads_past_a_narrow_divisor(size: int, divisor: int, lanes: int, accumulators: int) -> bool:
    """Whether a row whose largest divisor within the accumulators is so small that its tile (each
    column broadcast to at most two registers of channels) fills less than
    :data:`NARROW_DIVISOR_MIN_SHARE` of them is padded to whole registers of columns instead, where
    that pads at most :data:`BROADCAST_ROW_MAX_PADDING` of the row: the columns then fill the lanes
    and the channels take a register each.  SqueezeNet-1.1's stem (3x3, stride 2, 3 -> 64 channels,
    111 columns = 3 x 37) took 3 columns x 32 channels, six accumulators, too few chains for two
    multiply-add pipes of latency 4; padded to 112, 16 columns x 16 channels.  Both tiles compiled
    in one process, run in turn on the same arrays (AMD EPYC, AVX-512, 2 cores, C, median of 60):
    0.440 -> 0.345 ms warm, 1.05 -> 0.73 ms with the L2 flushed before each run; in the model, each
    way on its arrays (median of 30-40), C 0.497 -> 0.379 ms, LLVM 0.427 -> 0.307; no other kernel of
    the zoo changes, nor any on 16 registers (AVX2's 3 columns x 2 registers fill 6 of 8).  Padded
    to broadcast columns instead (8 x 32 channels, :func:`_pads_to_broadcast_columns`), the same row
    ran 0.395 ms warm."""
    if 2 * divisor >= accumulators * NARROW_DIVISOR_MIN_SHARE:
        return False
    padded = -(-size // lanes) * lanes
    return padded - size <= size * BROADCAST_ROW_MAX_PADDING


def _five_broadcast_columns(width: int, lanes: int, vector_registers: int) -> bool:
    """Whether a tile of columns narrower than a register, on 16 vector registers, is
    :data:`PADDED_COLUMNS_WIDE` (5) columns that divide its row (a strided row keeps its exact
    divisor: AlexNet's 11x11 stride-4 stem, 55 columns): it takes two registers of channels per
    column (10 accumulators) as a row padded to 5 columns does, whether or not the renderer writes
    it as an assembly block (:func:`_planned_tile`).  The tile of half the registers, 5 columns x 8
    channels, left a register of channels a column unused.
    AlexNet's stem on LLVM (its own code, no block), both rules compiled in one process and run in
    turn on the model's arrays (AMD EPYC, AVX2, 2 cores, min of 8): 1.19 -> 0.76 ms (5 x 16, as C's
    block tile: 0.75); no other kernel of the zoo changes (its other 5-column tiles are padded rows)."""
    return vector_registers <= 16 and width == PADDED_COLUMNS_WIDE < lanes


#: the most taps of a filter unrolled whole, its rows as well as a row's taps
#: (:func:`_unrolled_filter_rows`): a 3x3 window's nine
UNROLLED_FILTER_TAPS = 9


def _unrolled_filter_rows(kernel: Kernel) -> Kernel:
    """A depthwise conv's filter rows unrolled as well as each row's taps (the innermost reduction,
    unrolled whole already), where at most :data:`UNROLLED_FILTER_TAPS` taps result: a tile of one
    register of columns (one UPCAST axis) whose reduction reads a load that varies over the rows'
    axis but not over the columns (the filter).  Its taps then depend on the channel alone, so each is
    loaded and broadcast once per channel, outside the loops over the rows and columns; a loop over
    the filter rows kept them inside, and GCC loaded and broadcast the nine weights again for every
    tile of 8 columns (18 loads a tile where LLVM, hoisting them itself, had 9).  MobileNet-v2's
    144-channel 3x3 depthwise conv at 56x56 alone on C: 0.215 -> 0.148 ms with the weights hoisted
    by hand.  A pool has no such load (its input varies over the columns) and keeps its rows' loop."""
    upcasts = [r for r in kernel.ranges if r.arg[1] is AxisType.UPCAST]
    unrolled = [r for r in kernel.ranges if r.arg[1] is AxisType.UNROLL]
    reduces = [r for r in kernel.ranges if r.arg[1] is AxisType.REDUCE and range_size(r) > 1]
    if len(upcasts) != 1 or not unrolled or not reduces or range_size(upcasts[0]) > _register_lanes(kernel):
        return kernel  # two registers of columns: 18 products and the nine weights spill
    rows = reduces[-1]
    if math.prod(range_size(r) for r in unrolled) * range_size(rows) > UNROLLED_FILTER_TAPS:
        return kernel
    loads = [u.src[0] for u in kernel.ast.toposort() if u.op is Ops.LOAD]
    if not any(depends_on(index, rows) and not depends_on(index, upcasts[0]) for index in loads):
        return kernel
    return _try(kernel, Opt(OptOp.SPLIT, _axis_of(kernel, rows), (range_size(rows), AxisType.UNROLL, False)))


#: output rows of a depthwise conv's tile once its filter is unrolled (:func:`_paired_output_rows`)
PAIRED_OUTPUT_ROWS = 2


def _paired_output_rows(kernel: Kernel) -> Kernel:
    """A depthwise conv whose filter :func:`_unrolled_filter_rows` unrolled computes
    :data:`PAIRED_OUTPUT_ROWS` output rows per tile (its innermost output axis split into an UPCAST
    beside the columns' register): the two rows' windows share input rows (two of three at stride
    1, one at stride 2), so a row's shifted vectors are loaded once for both, and the nine weights,
    hoisted per channel already, serve twice the multiply-adds.  A tile of one row loaded three
    input vectors and broadcast nothing new per multiply-add: two loads per multiply-add.
    MobileNet-v2's 576-channel conv at 14x14 in the model, one row / two rows by hand (AMD EPYC
    with full-width AVX-512, 2 cores, C): 0.061 -> 0.025 ms (ONNX Runtime's 0.026-0.029).  Only where
    the columns' register holds a whole row: its stride-2 conv from 112x112 (8 of 56 columns a
    tile) ran 1.77x slower with two rows a tile, 1.80x with four."""
    upcasts = [r for r in kernel.ranges if r.arg[1] is AxisType.UPCAST]
    outputs = [r for r in kernel.ranges if r.arg[1] is AxisType.GLOBAL]
    # the channels and the rows: the columns' register holds a whole row (no axis of column tiles)
    if len(upcasts) != 1 or len(outputs) != 2 or range_size(outputs[-1]) % PAIRED_OUTPUT_ROWS:
        return kernel
    if any(r.arg[1] is AxisType.REDUCE and range_size(r) > 1 for r in kernel.ranges):
        return kernel  # a grouped conv's channels of a group still summed in a loop: not measured
    if not _steps_by_one(kernel, upcasts[0]):
        return kernel  # a stride-2 row (two loads and a shuffle a vector): not measured
    rows = outputs[-1]
    loads = [u.src[0] for u in kernel.ast.toposort() if u.op is Ops.LOAD]
    if not any(depends_on(index, rows) and depends_on(index, upcasts[0]) for index in loads):
        return kernel  # the input is read along the rows and the columns both
    split = Opt(OptOp.SPLIT, _axis_of(kernel, rows), (PAIRED_OUTPUT_ROWS, AxisType.UPCAST, False))
    return _try(kernel, split)


#: vector registers a register tile written as an assembly block keeps beside its accumulators
#: (``uopviz.backends.register_tile``): one weight vector and the broadcast
REGISTER_TILE_SPARE_REGISTERS = 2


#: rows of a register tile of two registers of positions without a filter's taps (a 1x1 conv's
#: channels) on 16 vector registers: 5 where 5 divides the channels, not the 4 of half the registers.
#: Ten accumulators, the row's two registers and a broadcast leave two registers to the compiler;
#: no filter tap's row needs one.  SqueezeNet-1.1's 1000-channel classifier (176 positions x 5
#: channels) in the model, the old and new rule compiled in one process (AMD EPYC, AVX2, 2 cores,
#: min of 9): C 1.74-1.93 -> 1.60-1.78 ms, LLVM 1.88-1.93 -> 1.42-1.81.  Not 6 rows (12
#: accumulators): MobileNet-v2's 96- and 144-channel 1x1 convs at 56x56 and 28x28 were 0.94-1.03x on C
#: but 1.03-1.10x on LLVM, SqueezeNet's 192-channel ones 0.88x / 1.13-1.24x
FIVE_ROWS = 5


#: registers of positions a row of no divisor within the accumulators is padded to, where that pads
#: no more than one register would (SqueezeNet-1.1's 13x13 1x1 convs: 169 positions as 11 tiles of
#: 16 rather than 22 of 8, so the channels take 4 rows; and its 1000-channel classifier, whose 125
#: tiles of 8 channels the cores could not share, has 250 of 4 split between them, each core's
#: weights read once instead of the positions split and every weight read by both).  In the model,
#: each changed kernel both ways in one process (AMD EPYC, AVX2, 2 cores, min of 14), C / LLVM: the
#: classifier 1.60 -> 1.42 / 1.56 -> 1.46 ms, the 1x1 convs from 48 and 64 channels 0.028-0.052 ->
#: 0.026-0.046 / 0.035-0.060 -> 0.035-0.058 ms
PADDED_ROW_REGISTERS = 2


#: output rows a register tile of one register of columns stacks (:func:`_stacked_rows`), over a
#: reduction of at least STACKED_ROWS_MIN_TERMS terms
STACKED_ROWS = 2
STACKED_ROWS_MIN_TERMS = 64


def _stacked_rows(kernel: Kernel, second_position: int | None, lanes: int) -> Kernel:
    """A tile of one register of columns with no window (a 1x1 conv writing rows 56 wide into a
    padded buffer, where 16 columns do not divide the row) takes :data:`STACKED_ROWS` output rows:
    two registers of positions, each broadcast weight used for both, so the channels take 4 rows
    (8 accumulators, 6 loads a step) instead of 8 (8 accumulators, 9 loads a step).  The rows are
    the innermost output axis that some load does not vary over (the weights), other than the
    channels (``second_position``) and the columns' own groups (a load steps ``lanes`` along
    them).  Both rules compiled in one process, each changed kernel run in
    turn on the model's arrays (AMD EPYC, AVX2, 2 cores, min of 14), C / LLVM: ResNet-50's four
    1x1 convs at 56x56 0.210 -> 0.187, 0.759 -> 0.701, 0.820 -> 0.733 and 1.434 -> 1.331 ms / within
    0.99-1.03x, the whole model C 63.4 -> 61.4 ms (min); Inception-v1's 0.234 -> 0.203 / 0.232 ->
    0.199 ms; DenseNet-121's first block's six (64-224 input channels) 0.91-0.97x but one 1.03x on C
    (the whole model 49.1 -> 47.9 ms), 0.94-1.04x on LLVM.  Not over fewer than
    :data:`STACKED_ROWS_MIN_TERMS` terms: MobileNet-v2's 24 -> 144 channel expand convs 0.19 -> 0.22
    ms on C (the tile's stores outweigh 24 multiply-adds), 0.96x on LLVM."""
    if _reduction_terms(kernel) < STACKED_ROWS_MIN_TERMS:
        return kernel
    indices = [u.src[0] for u in kernel.ast.toposort() if u.op is Ops.LOAD]
    for position in reversed(range(len(kernel.ranges))):
        r = kernel.ranges[position]
        if position == second_position or r.arg[1] is not AxisType.GLOBAL or range_size(r) % STACKED_ROWS:
            continue
        varied = [depends_on(index, r) for index in indices]
        if all(varied) or not any(varied) or lanes in _load_steps(kernel, r):
            continue  # the rows vary the input but not the weights; not the columns' own groups
        return _try(kernel, Opt(OptOp.SPLIT, position, (STACKED_ROWS, AxisType.UPCAST, False)))
    return kernel


#: the columns of a register tile over a row of prime width (:func:`_padded_columns`)
PADDED_COLUMNS = 4
#: ... or 5 where that pads the row less (13 to 15, not 16), each column by two registers of
#: channels (10 accumulators of 16 vector registers; the weights' two rows and a broadcast beside
#: them), on registers wider than 5 lanes.  In the model, both rules compiled in one process and
#: run in turn on the model's arrays (AMD EPYC, AVX2, 2 cores, min of 20), C / LLVM: SqueezeNet-1.1's
#: 13x13 3x3 convs 0.225 -> 0.198 / 0.228 -> 0.200 ms (48 -> 192 channels) and 0.392 -> 0.341 /
#: 0.397 -> 0.344 (64 -> 256), AlexNet's 1.70 -> 1.48, 3.42 -> 2.92 and 2.33 -> 1.99 ms (both
#: backends alike).  Measured and not taken: 3 columns x 32 channels of 15 (0.570 ms against 0.380),
#: 7 x 16 of 14 (0.606: 14 accumulators spill), 2 x 32 of 14 (0.370); and 5 x 16 on rows that a
#: divisor tiles today (55 unpadded instead of 4 x 16 of 56, ResNet-50's 14 padded to 15 and
#: MobileNet-v2's 49 positions padded to 50 instead of 7 x 8): 1.3-2x slower, so only rows of prime
#: width take it
PADDED_COLUMNS_WIDE = 5


def _prime_row_columns(size: int, lanes: int) -> int:
    """The columns of a register tile over a row of ``size`` that no column count divides:
    :data:`PADDED_COLUMNS_WIDE` where a row padded to its multiple is shorter than one padded to
    :data:`PADDED_COLUMNS`'s (13, 29; registers wider than 5 lanes), else :data:`PADDED_COLUMNS`."""
    wide, narrow = PADDED_COLUMNS_WIDE, PADDED_COLUMNS
    if lanes > wide and -(-size // wide) * wide < -(-size // narrow) * narrow:
        return wide
    return narrow


def _padded_columns(kernel: Kernel, columns: UOp, width: int = PADDED_COLUMNS) -> Kernel:
    """A row of prime width wider than a register (AlexNet's 13x13 convolutions) padded up to a
    multiple of ``width`` (4) and tiled by ``width`` columns (the padded columns' loads and stores
    gated off): with no divisor the row was not tiled and the channels alone were, each weight
    vector loaded for one multiply-add.  A 384 -> 384 channel 3x3 conv at 13x13 alone on C (AVX2, 2
    cores): 33.3 ms untiled, 4 padded columns x 16 channels 14.9, 7 of 14 x 8 22.3, 13 x 8 23.5 ms."""
    size = range_size(columns)
    padded = -(-size // width) * width
    axis = _axis_of(kernel, columns)
    grown = _try(kernel, Opt(OptOp.PADTO, axis, padded))
    if grown is kernel:
        return kernel
    tiled = _try(grown, Opt(OptOp.SPLIT, axis, (width, AxisType.UPCAST, False)))
    return tiled if tiled is not grown else kernel


def _slides_columns(kernel: Kernel, columns: UOp) -> bool:
    """Whether ``columns`` slide over a window that the kernel reduces: some load steps by one or two
    elements along ``columns`` (a stride-1 or stride-2 conv) and by one along a reduced axis (a
    conv's input along its filter's columns), not a whole row along it (a matmul's B)."""
    reduced = [r for r in kernel.ranges if r.arg[1] in REDUCE_TYPES]
    loads = [u for u in kernel.ast.toposort() if u.op is Ops.LOAD]
    return any(column_step in (1, 2) and 1 in _load_steps(kernel, r, [load])
               for load in loads for column_step in _load_steps(kernel, columns, [load]) for r in reduced)


def _lanes_reuse_different_loads(kernel: Kernel) -> bool:
    """Whether each of the kernel's two lane axes reuses a load that the other one does not (a conv:
    the columns the weights, the channels the input), not both the same (a depthwise conv's rows
    and columns reuse only the weights)."""
    indices = [u.src[0] for u in kernel.ast.toposort() if u.op is Ops.LOAD]
    upcasts = [r for r in kernel.ranges if r.arg[1] is AxisType.UPCAST]
    if len(upcasts) != 2:
        return False
    first, second = upcasts
    return all(any(depends_on(i, a) and not depends_on(i, b) for i in indices)
               for a, b in ((first, second), (second, first)))


def _grouped_rows(kernel: Kernel, first: UOp) -> Kernel | None:
    """The register tile of a grouped conv, or None: no output axis reuses the input, whose channel
    is the output channel's group (``o // 64`` with 2 groups of 64), but blocks of whole registers
    within a group do (``(o*32 + lane) // 64`` is ``o // 2``).  ``first`` (the columns) is tiled as
    in :func:`_cpu_register_tile`, then the innermost other output axis whose block of as many rows
    (at least a register's lanes) reuses a load the columns do not (:func:`_lanes_reuse_different_loads`)
    gets them (128 channels 14x14 in 2
    groups on AVX-512: 7 columns x 32 channels instead of a row of 14)."""
    lanes = _register_lanes(kernel)
    outputs = (AxisType.GLOBAL, AxisType.LOOP)
    others = [_axis_of(kernel, r) for r in kernel.ranges if r.arg[1] in outputs and r is not first]
    tiled, rows = _cpu_register_tile(kernel, first, lanes, False)
    if tiled is kernel:
        return None
    for position in reversed(others):
        for factor in [f for f in rows if f >= lanes]:
            block = _splits(tiled, tiled.ranges[position], [factor], AxisType.UPCAST)
            trial = _first_that_applies(tiled, block)
            if trial is not tiled and _lanes_reuse_different_loads(trial):
                return trial
    return None


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


#: terms of a window a pooling kernel reduces at most to get its rows as vectors (7x7)
WINDOW_MAX_TERMS = 64


def _slides_a_window(kernel: Kernel, output: UOp) -> bool:
    """Whether the kernel reduces a small window (at most :data:`WINDOW_MAX_TERMS` terms) that
    slides along ``output``: every load steps one or two elements along it (a pooling's rows, not a
    row sum, whose loads step a whole row per output)."""
    steps = _load_steps(kernel, output)
    return _reduction_terms(kernel) <= WINDOW_MAX_TERMS and bool(steps) and all(s in (1, 2) for s in steps)


def _stages(kernel: Kernel, hoist: bool = True) -> bool:
    """Whether staging copies a strip of the kernel in its present loop order (``hoist``: a strip
    copied before the loop around its own that reuses it counts)."""
    return stage_strided_loads(kernel.ast, kernel.backend_object, hoist) is not kernel.ast


#: a short reduction (fewer terms per output than this) whose operands fit in L2 keeps its output
#: loops in order rather than staging a strip: the staged order (N tiles outside M tiles) writes
#: every output row a tile's width at a time, from as many rows at once as M has (ResNet-50's 1x1
#: convolutions of 64 channels: 256 output and 256 residual rows in flight, 128 bytes of each), and
#: with few terms per output that traffic is the kernel's cost.  One core, each kernel alone inside
#: the model: 64 -> 256 channels at 56x56 1.50 -> 0.87 ms (ONNX Runtime 0.63), 128 -> 512 at 28x28
#: 0.95 -> 0.71 (0.59); two such convolutions fused (1.6 MB of operands) were slower in order:
#: 1.66 -> 2.45 ms, so they keep the staged order
STAGE_MIN_REDUCTION = 256
#: the share of a core's L2 a reduction's operands may take for its output loops to stay in order
#: (half: the rest is left to the outputs).  The AVX-512 host measured above has 2 MiB a core: 1
#: MiB.  An AMD EPYC with 512 KiB (AVX2, 2 cores, each conv alone, C / LLVM): 64 -> 256 channels at
#: 56x56 (864 KB of operands) in order 1.14-1.65 / 1.33-1.72 ms, staged 0.88-0.94 / 0.77-0.88;
#: MobileNet-v2's 16 -> 96 at 112x112 0.51 -> 0.45 / 0.53 -> 0.39, 24 -> 144 at 56x56 0.23 -> 0.20
#: / 0.27 -> 0.19
IN_ORDER_L2_SHARE = 0.5
#: a short reduction stays in order, whatever its operands, when the staged order would write more
#: output rows than this at once (one per channel of a 1x1 conv, each in its own pages, beside as
#: many residual rows): the same EPYC, in the model, 128 -> 512 channels at 28x28 with a residual
#: staged 1.22-1.67 / 1.05-1.18 ms, in order 1.08-1.41 / 1.03-1.11; 64 -> 256 at 56x56 with a
#: residual staged 1.02-1.72 / 1.03-1.11, in order 1.55-1.94 / 1.57-1.83
STAGED_MAX_ROWS = 256


def in_order_max_operand_bytes(backend: Backend) -> int:
    """Bytes a short reduction's operands may take for its output loops to stay in order on
    ``backend``'s target (:data:`IN_ORDER_L2_SHARE` of a core's L2)."""
    return int(backend.l2_bytes * IN_ORDER_L2_SHARE)


def _reduction_terms(kernel: Kernel) -> int:
    """Terms summed per output value: each reduction's ranges multiplied, the reductions added (a
    kernel that fuses a residual's convolution into another's has two)."""
    reductions = [u for u in kernel.ast.toposort() if u.op is Ops.REDUCE]
    return sum(math.prod(range_size(r) for r in u.src[1:] if r.op is Ops.RANGE) for u in reductions)


def _planned_tile(kernel: Kernel, second_position: int | None) -> bool:
    """Whether the renderer will write this conv's register tile as an assembly block (its step:
    broadcast inputs times one row of weights, ``uopviz.backends.register_tile``): one reduction (two,
    a residual's conv fused into another's, keep the first's accumulators through the second's
    loop), of float32 read from float32 memory (float16 inputs summed in float32 are not), and only
    the weights vary over the channels (a grouped conv's input does too: its weights were gathered,
    0.58 -> 0.79 ms as 7 x 16 at 128 channels in 2 groups, 14x14).  LLVM leaves a window's tile of
    at most ten accumulators its own code (``llvm_renderer.OWN_WINDOW_TILE_ACCUMULATORS``): a 5-column
    tile, whose shape is the same either way."""
    uops = kernel.ast.toposort()
    reductions = [u for u in uops if u.op is Ops.REDUCE]
    if second_position is None or len(reductions) != 1 or reductions[0].dtype.scalar is not dtypes.float32:
        return False
    if any(u.dtype.scalar is not dtypes.float32 for u in uops if u.op is Ops.LOAD):
        return False
    channels = kernel.ranges[second_position]
    return sum(depends_on(load.src[0], channels) for load in _reduction_operands(kernel)) == 1


def _reduction_operands(kernel: Kernel) -> dict[UOp, int]:
    """Each load inside the kernel's reductions (its address varies over a reduced axis) and the
    elements it reads over the whole kernel (:func:`_footprint`)."""
    reduces = [r for r in kernel.ranges if r.arg[1] in REDUCE_TYPES]
    return {u: _footprint(kernel, u) for u in kernel.ast.toposort()
            if u.op is Ops.LOAD and any(depends_on(u.src[0], r) for r in reduces)}  # fmt: skip


def _rows_in_flight(kernel: Kernel, largest: UOp) -> int:
    """Output rows the staged order writes at once: the extent of the output axes (lanes included)
    that the reduction's largest operand (the load ``largest``) does not vary over (a 1x1 conv's
    channels)."""
    outputs = [r for r in kernel.ranges if r.arg[1] in (AxisType.GLOBAL, AxisType.LOOP, AxisType.UPCAST)]
    return math.prod(range_size(r) for r in outputs if not depends_on(largest.src[0], r))


def _short_reduction(kernel: Kernel) -> bool:
    """A reduction whose output loops stay in order (:data:`STAGE_MIN_REDUCTION`): few terms, and
    operands that fit in the target's L2 or more rows than the staged order writes well."""
    if _reduction_terms(kernel) >= STAGE_MIN_REDUCTION:
        return False
    operands = _reduction_operands(kernel)
    operand_bytes = sum(elements * load.dtype.scalar.itemsize for load, elements in operands.items())
    if operand_bytes <= in_order_max_operand_bytes(kernel.backend_object):
        return True
    return _rows_in_flight(kernel, max(operands, key=operands.__getitem__)) > STAGED_MAX_ROWS


#: a reduction of fewer terms than this, in a kernel with an output loop outside the one staging
#: would move (a batch of images), takes that loop only inside the rows, outside the columns: each
#: channel's output row is written whole, column tile after column tile, instead of a tile's width
#: of every channel's row at once, and the input row (a few channels of it) stays in L1 for every
#: channel.  MobileNet-v2 at batch 8 (AMD EPYC, AVX2, 2 cores, each changed kernel both ways in one
#: process on the model's arrays, min of 14), C / LLVM: its 16 -> 96 channel conv at 112x112 3.92 ->
#: 3.27 / 4.89 -> 3.98 ms (another run 4.73 -> 3.55 / 3.54 -> 3.47), its 24 -> 144 ones at 56x56
#: 1.89-2.20 -> 1.50-1.60 / 1.86-2.47 -> 1.54-2.02.
#: From 32 channels it is mixed (MobileNet-v2's 32 -> 192 at 28x28 0.78-0.88 -> 0.63-0.65 on C,
#: 0.87-0.93 -> 0.89-1.06 on LLVM; ResNet-50's 64 -> 256 at 56x56 2.39 -> 2.22 / 1.91 -> 2.04) and
#: from 128 slower (DenseNet-121's 1x1 convs at 56x56 from 128-224 channels 1.06-1.20x on C); at
#: batch 1 (the rows split among the cores) MobileNet-v2's 16 -> 96 conv moved within the noise and
#: DenseNet-121's 1x1 convs were 1.05-1.10x slower, so batch 1 keeps the staged order
ROW_ORDER_MAX_TERMS = 32


def _order_for_staging(kernel: Kernel) -> Kernel:
    """The loop order in which a strided strip gets staged (:func:`stage_strided_load`): an output
    loop the strip does not depend on moved inside the ones it does (gemm: N tiles outside M
    tiles, so each copied strip of B serves every tile of A); not for a short reduction
    (:data:`STAGE_MIN_REDUCTION`), and only inside the rows for a batch's very short one
    (:data:`ROW_ORDER_MAX_TERMS`)."""
    if _stages(kernel) or _short_reduction(kernel):
        return kernel
    count = len(_globals(kernel))
    for position in range(count):
        moved = kernel  # the axis at `position` moved inside one neighbour at a time
        for step in range(position, count - 1):
            before, moved = moved, _swapped_with_next(moved, step)
            if moved is None:
                break
            if _stages(moved, hoist=False):  # moved for a strip staged inside its reuse only
                # a batch's 1x1 conv of very few input channels stops one step short: inside the
                # rows, outside the columns (see ROW_ORDER_MAX_TERMS)
                batched = position > 0 and step > position
                return before if batched and _reduction_terms(kernel) < ROW_ORDER_MAX_TERMS else moved
    return kernel


def _swapped_with_next(kernel: Kernel, step: int) -> Kernel | None:
    """The kernel with its GLOBAL axes at ``step`` and ``step + 1`` (among the GLOBAL axes) swapped;
    None where the SWAP does not apply.  An axis moves inside by such steps, the axes it passes
    keeping their order: one SWAP of it with a farther axis would reverse the loops between as
    well, and a batch of images tiled by columns and staged by channels kept its column strips
    outside its rows (each output row written a strip at a time from 28 rows at once).  Each
    changed kernel against the one SWAP's, in one process on the model's arrays (C, AMD EPYC,
    AVX2, 2 cores): ResNet-50 at batch 8, its 1x1 convolutions at 56x56 and 28x28 0.89-0.94x, at
    14x14 0.98-1.00x (218 -> 206 ms); at batch 1, where the threads now split the rows instead of
    two column strips, the 1x1 convolutions at 14x14 of ResNet-50 0.87-0.98x, DenseNet-121
    0.84-0.95x, Inception-v1 0.88-1.01x (LLVM 0.95-1.03x)."""
    axes = _globals(kernel)
    swapped = _try(kernel, Opt(OptOp.SWAP, _axis_of(kernel, axes[step]), _axis_of(kernel, axes[step + 1])))
    return None if swapped is kernel else swapped


#: kernels of fewer iterations (all axes, lanes included) run on one core: waking the others costs
#: more than they save (x*2+1 on C, 2 cores, in cache: 4K floats 1.67 us threaded vs 0.99 on one
#: core, 16K 2.45 vs 2.56).  Not higher: a kernel storing to lines out of cache gains from a second
#: core well below 16K (MobileNet-v2's border columns, 10K strided stores: 61 us on one core, 37 on
#: two; its borders in all 0.73 -> 0.52 ms)
MIN_THREADED_ITERATIONS = 4096


#: the share of padded iterations an outer axis may get to be split among the cores (63 -> 64);
#: more (7 -> 8) and the next axis that the cores divide is split instead, its THREAD part moved
#: outermost (:func:`_thread_outermost`)
THREADED_PADDING_MAX_WASTE = 1 / 16


def _padding_waste(size: int, threads: int) -> float:
    """The share of iterations added by padding ``size`` to a multiple of ``threads``."""
    return (-(-size // threads) * threads - size) / size


def _globals(kernel: Kernel) -> list[UOp]:
    return [r for r in kernel.ranges if r.arg[1] is AxisType.GLOBAL]


def _padded_for_threads(kernel: Kernel, candidates: list[UOp], threads: int) -> tuple[Kernel, UOp | None]:
    """The kernel with the candidate axis that wastes least padded to a multiple of ``threads``, and
    that axis; ``(kernel, None)`` when none can be."""
    waste = lambda r: _padding_waste(range_size(r), threads)  # noqa: E731
    least = min((r for r in candidates if range_size(r) >= threads), key=waste, default=None)
    if least is None:
        return kernel, None
    position = _axis_of(kernel, least)
    padded = _try(kernel, Opt(OptOp.PADTO, position, threads))
    return (kernel, None) if padded is kernel else (padded, padded.ranges[position])  # (position kept)


def _threaded(kernel: Kernel, threads: int) -> Kernel:
    """The outermost axis every core gets an equal share of split into THREAD chunks.

    A 28-wide conv tiled by 4 leaves an outer 7 that two cores do not divide: the next axis that
    they divide is moved outermost (one parallel region per launch, not one per iteration of the
    7).  Where no axis divides, the one that wastes least is padded to a multiple of the cores
    (MobileNet-v2's classifier, 125 vectors of outputs: 126, one masked, on two cores instead of
    125 on one)."""
    globals_ = [r for r in kernel.ranges if r.arg[1] is AxisType.GLOBAL]
    iterations = math.prod(range_size(r) for r in kernel.ranges)
    if threads < 2 or not globals_ or iterations < MIN_THREADED_ITERATIONS:
        return kernel
    even = next((r for r in globals_ if range_size(r) % threads == 0 and range_size(r) > 1), None)
    in_place = False
    if even is not None:
        kernel, even, in_place = _axis_reading_least(kernel, even, threads)
    if even is None:
        kernel, even = _padded_for_threads(kernel, globals_, threads)
    if even is not None and even is not _globals(kernel)[0] and not in_place:
        # moved outermost: one parallel region per launch, not one per outer iteration
        outer = _globals(kernel)[0]
        swapped = _try(kernel, Opt(OptOp.SWAP, _axis_of(kernel, outer), _axis_of(kernel, even)))
        # keeps a strip staged inside its reuse
        if swapped is not kernel and (not _stages(kernel, hoist=False) or _stages(swapped, hoist=False)):
            kernel, even = swapped, _globals(swapped)[0]
        elif _padding_waste(range_size(outer), threads) <= THREADED_PADDING_MAX_WASTE:
            kernel, even = _padded_for_threads(kernel, [outer], threads)
        # else `even` is split where it is and its THREAD part moved outermost (below)
    if even is None:
        even = _globals(kernel)[0]  # split by the most cores that divide it
    size = range_size(even)
    count = next((c for c in range(min(threads, size), 1, -1) if size % c == 0), None)
    if count is None:
        return kernel
    split = _try(kernel, Opt(OptOp.SPLIT, _axis_of(kernel, even), (count, AxisType.THREAD, True)))
    return _thread_outermost(split)


def _elements_read(kernel: Kernel, load: UOp) -> int:
    """Elements ``load`` reads over the whole kernel: its footprint (:func:`_footprint`), at most its
    buffer's size (a window's taps read each element several times)."""
    buffer = load.src[0].src[0]
    size = buffer.shape[0] if buffer.op is Ops.PARAM and buffer.shape else None
    return min(_footprint(kernel, load), size) if size else _footprint(kernel, load)


def _bytes_each_core_reads(read: dict[UOp, int], r: UOp, threads: int) -> float:
    """The bytes each core reads of ``read`` (each load's bytes over the whole kernel) when
    ``threads`` cores split ``r``: a load whose address varies along ``r`` in shares, the others
    whole on every core."""
    return sum(size / (threads if depends_on(load.src[0], r) else 1) for load, size in read.items())


#: a kernel doing fewer FLOPs than this per byte each core reads waits on memory: its cores split
#: the axis that leaves each the fewest bytes to read (:func:`_axis_reading_least`)
MEMORY_BOUND_FLOPS_PER_BYTE = 20
#: ... where that reads at most this share of the bytes the first axis the cores divide would
LEAST_READ_MAX_SHARE = 0.75
#: a kernel that computes enough per byte still has its cores split the axis each reads least of
#: where that reads at most this share (and the cores divide it without padding) ...
COMPUTE_BOUND_LEAST_READ_MAX_SHARE = 0.95
#: ... and it sums at least this many terms per output (a short one mostly writes its output,
#: which a depthwise conv after it reads with its cores on the channels)
COMPUTE_BOUND_MIN_REDUCTION_TERMS = 64


def _axis_reading_least(kernel: Kernel, even: UOp, threads: int) -> tuple[Kernel, UOp, bool]:
    """The kernel, the output axis its cores split and whether to split it where it is: ``even``
    (the first the cores divide) unless another axis leaves each core fewer bytes to read.

    A kernel that waits on memory takes an axis that reads far fewer bytes (padded to a multiple of
    the cores where that wastes little), moved outermost.  SqueezeNet's squeeze convs (1x1, 128
    channels to 16 at 55x55) split their 16 output channels: each core read the whole 1.5 MB
    input, 128 rows at a 12 KB stride, in the model partly from the other core's cache: 0.214 ms
    against ONNX Runtime's 0.061.  Split over positions, each core reads half the input: 0.069 ms.
    Measured each model in one process against ONNX Runtime (Sapphire Rapids, 2 cores, median of
    three children): SqueezeNet-1.1 C 1.41 -> 1.31, LLVM 1.27 -> 1.23; MobileNet-v2 (its 1x1
    projections at 28x28 to 7x7, 0.62-0.76x each) C 1.42 -> 1.38, LLVM 1.32 -> 1.27.

    A kernel that computes enough per byte takes an axis that reads somewhat fewer bytes
    (:data:`COMPUTE_BOUND_LEAST_READ_MAX_SHARE`), split where it is, the rest of its loop order
    kept: what a core reads is what comes from L3 or the other core's cache in a model, and the
    order keeps each output row a stream.  ResNet-50 (C, each kernel in the model's sequence):
    its 3x3 convs at 56x56 and the 7x7 stem split their rows instead of their channel tiles (each
    core reads half the plane, the whole filter) 2.16 -> 2.04 and 0.92 -> 0.85 ms, the 1024 -> 256
    and 1024 -> 512 convs at 14x14 their channel tiles instead of their rows (each core reads half
    the filter) 2.47 -> 2.21 and 1.09 -> 0.87 ms; all its kernels 34.61 -> 33.15 ms, the model
    1.19-1.21 -> 1.15-1.18x ONNX Runtime (the least ratio of each of five alternating children).
    The same axis moved outermost instead put the position tiles outside the channel tiles, so
    that each tile wrote a piece of every output row: the 64 -> 256 conv with its residual sum at
    56x56 ran 0.86 -> 1.15 ms.  Positions padded for the cores (128 -> 512 channels at 28x28, 49
    tiles to 50) ran 1.12 -> 1.21 ms, so this rule does not pad.  MobileNet-v2's expand convs (16 ->
    96 channels at 112x112, 32 -> 192 at 28x28: 16 and 32 terms a sum) split over positions made
    them and the depthwise convs after them, whose cores split the channels, slower: 0.34 -> 0.43
    and 0.25 -> 0.28 ms a pair, so this rule takes sums of
    :data:`COMPUTE_BOUND_MIN_REDUCTION_TERMS` terms or more."""
    read = {load: _elements_read(kernel, load) * load.dtype.scalar.itemsize
            for load in kernel.ast.toposort() if load.op is Ops.LOAD and load.src[0].op is Ops.INDEX}
    costs = {r: _bytes_each_core_reads(read, r, threads)
             for r in _globals(kernel) if range_size(r) >= threads}
    least = min(costs, key=costs.__getitem__)
    if kernel.flops / threads >= MEMORY_BOUND_FLOPS_PER_BYTE * costs[even]:
        in_place = (range_size(least) % threads == 0
                    and costs[least] <= COMPUTE_BOUND_LEAST_READ_MAX_SHARE * costs[even]
                    and _reduction_terms(kernel) >= COMPUTE_BOUND_MIN_REDUCTION_TERMS)
        return (kernel, least, True) if in_place else (kernel, even, False)
    if costs[least] > LEAST_READ_MAX_SHARE * costs[even]:
        return kernel, even, False
    if range_size(least) % threads == 0:
        return kernel, least, False
    if _padding_waste(range_size(least), threads) > THREADED_PADDING_MAX_WASTE:
        return kernel, even, False
    padded, axis = _padded_for_threads(kernel, [least], threads)
    return (padded, axis, False) if axis is not None else (kernel, even, False)


def _thread_outermost(kernel: Kernel) -> Kernel:
    """The kernel with its THREAD axis moved outside the output axes before it, one neighbour at a
    time (the axes it passes keep their order): each core then runs every iteration of those axes
    over its share of the split one.  ResNet-50's 7x7 projection, staged, 7 rows outside 128
    channel tiles: the cores share the channel tiles instead of 7 rows padded to 8 (which ran 4.39
    ms against 3.36 unstaged).  Against the unstaged order, C, in one process on the model's arrays:
    3.10-3.22 -> 2.52-2.82 ms; LLVM, the kernel alone: 3.23 -> 2.44 ms.  A THREAD loop left inside
    the rows ran as fast on C (2.43-2.51 ms) but on one core on LLVM, which runs only a THREAD
    range at the top of a kernel in parallel."""
    while True:
        outputs = [r for r in kernel.ranges if r.arg[1] in (AxisType.GLOBAL, AxisType.THREAD)]
        position = next((i for i, r in enumerate(outputs) if r.arg[1] is AxisType.THREAD), 0)
        if position == 0:
            return kernel
        before = outputs[position - 1]
        swapped = _try(kernel, Opt(OptOp.SWAP, _axis_of(kernel, before), _axis_of(kernel, outputs[position])))
        if swapped is kernel:
            return kernel
        kernel = swapped


#: threads of a workgroup (a CUDA block) the GPU heuristic aims at: 8 warps, enough to hide memory
#: latency with several blocks per multiprocessor; a 2-D grid gets at most 16 threads on each axis
WORKGROUP_THREADS = 256
_LOCAL_SIZES = (256, 128, 64, 32, 16, 8, 4)


#: a GPU kernel with fewer output values than this shares its reduction among a workgroup's threads
#: even when it does not stream its input (a small matmul with a long K: one thread per value would
#: leave the GPU idle)
GROUP_REDUCE_BELOW_OUTPUTS = 2048

#: a streamed row of n terms is shared by the largest power of two G of threads with G² <= this × n
#: (at least 16, at most a workgroup).  Every thread of the group reads all G slots of its row back
#: from shared memory (G² reads) while the row itself is n reads, so the slots' cost grows
#: quadratically; the GPU model on an H200 finds this balance best: softmax 4096² per reduction
#: 14.0 µs at G=32..128, 34 µs at 256 (530 µs with one thread per row, uncoalesced); 1024² 1.8 µs at
#: 64, 2.2 at 128, 3.6 at 32, 8.2 at 256; 64x4096 3.6 µs at 128, 4.4 at 256; 16384x128 1.8 µs at
#: 16, 2.3 at 32 (16.6 with a thread per row); 2048² 3.6 µs at 64, 4.6 at 128
GROUP_REDUCE_SLOT_READS_PER_TERM = 4

#: a streamed row whose length no group size divides is padded (masked terms) up to a multiple of
#: the group when that adds at most this fraction of terms (1000 -> 1024 for 32 threads: 2.4 %)
GROUP_REDUCE_MAX_PADDING = 0.125


def _load_steps(kernel: Kernel, r: UOp, loads: Sequence[UOp] | None = None) -> list[int | None]:
    """How many elements each load's address (of ``loads``, default all) steps along ``r`` (None
    where the address is not linear in it)."""
    loads = loads if loads is not None else [u for u in kernel.ast.toposort() if u.op is Ops.LOAD]
    return [linear_coefficient(load.src[0].src[1], r) for load in loads
            if load.src[0].op is Ops.INDEX and len(load.src[0].src) > 1]


def _steps_by_one(kernel: Kernel, r: UOp) -> bool:
    """Whether every load steps at most one element along ``r``: lanes of ``r`` padded and gated
    are whole-vector loads (a strided row's are not)."""
    return all(step in (0, 1) for step in _load_steps(kernel, r))


def _read_along(kernel: Kernel, r: UOp, loads: Sequence[UOp] | None = None) -> bool:
    """True when some load (of ``loads``, default all) has an address that steps by one element
    along ``r``: threads that split ``r`` among them read neighbouring elements (a warp's loads
    coalesce)."""
    return 1 in _load_steps(kernel, r, loads)


def _footprint(kernel: Kernel, load: UOp) -> int:
    """Elements a load reads over the whole kernel: the product of the ranges its address uses."""
    return math.prod(range_size(r) for r in kernel.ranges if depends_on(load.src[0], r))


def _streams_rows(kernel: Kernel, r: UOp) -> bool:
    """True when the reduction over ``r`` streams its input: the largest load along ``r`` varies over
    every output axis (each element read once: a row's max, sum, softmax, argmax) and steps by one
    element along ``r``.  No register tile can reuse that load, so the threads of a workgroup share
    each row instead.  A matmul's operands are each reused along N or M (register tiles)."""
    loads = [u for u in kernel.ast.toposort() if u.op is Ops.LOAD and depends_on(u.src[0], r)]
    if not loads:
        return False
    largest = max(loads, key=lambda load: _footprint(kernel, load))
    return all(depends_on(largest.src[0], o) for o in _globals(kernel)) and _read_along(kernel, r, [largest])


def _row_group_sizes(extent: int) -> list[int]:
    """Threads to share a streamed row of ``extent`` terms, best first
    (:data:`GROUP_REDUCE_SLOT_READS_PER_TERM`)."""
    return [size for size in _LOCAL_SIZES
            if 16 <= size and size * size <= GROUP_REDUCE_SLOT_READS_PER_TERM * extent and extent >= 2 * size]


def _padded_rows(kernel: Kernel, r: UOp, sizes: Sequence[int]) -> Kernel:
    """The kernel with ``r`` padded to a multiple of the first of ``sizes`` when none divides it and
    the padding adds at most :data:`GROUP_REDUCE_MAX_PADDING` of the terms."""
    extent = range_size(r)
    if not sizes or any(extent % size == 0 for size in sizes):
        return kernel
    padded = -(-extent // sizes[0]) * sizes[0]
    if padded > extent * (1 + GROUP_REDUCE_MAX_PADDING):
        return kernel
    return _try(kernel, Opt(OptOp.PADTO, _axis_of(kernel, r), sizes[0]))


def _group_reduce(kernel: Kernel) -> Kernel:
    """A reduction on a GPU whose terms a workgroup's threads share: the innermost REDUCE axis split
    so that each thread takes every G-th term (neighbouring threads read neighbouring elements) and
    the G partial values combine through local memory.

    * a reduction that streams its rows (:func:`_streams_rows`: softmax, layernorm, a row's max or
      argmax), whatever the number of rows: G threads per row (:func:`_row_group_sizes`), the row
      padded to a multiple of G where needed; the rows then fill the workgroup (LOCAL).  One thread
      per row read each row with a stride of its length (softmax 4096²: 1.21 ms on an H200, 111
      GB/s; torch 66 µs);
    * any other reduction to few values (:data:`GROUP_REDUCE_BELOW_OUTPUTS`) read along its axis:
      the largest group up to :data:`WORKGROUP_THREADS` (a 4096-term second stage of a split sum);
      one thread per value would leave the GPU idle."""
    outputs = math.prod(range_size(r) for r in _globals(kernel))
    reduces = [r for r in kernel.ranges if r.arg[1] is AxisType.REDUCE]
    if not reduces:
        return kernel
    r, unchanged = reduces[-1], kernel
    sizes = _row_group_sizes(range_size(r)) if _streams_rows(kernel, r) else []
    if sizes:
        position = _axis_of(kernel, r)
        kernel = _padded_rows(kernel, r, sizes)
        r = kernel.ranges[position]  # (PADTO keeps the axis where it was)
    elif outputs < GROUP_REDUCE_BELOW_OUTPUTS and _read_along(kernel, r):
        sizes = [size for size in _LOCAL_SIZES if size >= 16 and range_size(r) >= 2 * size]
    else:  # a column sum: threads on the outputs read neighbours instead
        return kernel
    extent = range_size(r)
    splits = [Opt(OptOp.SPLIT, _axis_of(kernel, r), (size, AxisType.GROUP_REDUCE, False))
              for size in sizes if extent % size == 0]
    grouped = _first_that_applies(kernel, splits)
    return unchanged if grouped is kernel else grouped  # a padded row no group took: not padded


def _shares_streamed_rows(kernel: Kernel) -> bool:
    """True when a workgroup's threads share streamed rows (GROUP_REDUCE of a streaming reduction):
    no output axis reuses the streamed load, so the outputs get no register tile (argmax 1024²'s
    rows upcast by 4 for a 4 KiB counter left a quarter of the threads: 7.2 µs against 1.8 in the
    GPU model)."""
    groups = [r for r in kernel.ranges if r.arg[1] is AxisType.GROUP_REDUCE]
    return bool(groups) and _streams_rows(kernel, groups[-1])


def _workgroup_threads(kernel: Kernel) -> int:
    """Threads a workgroup already has: its LOCAL axes, and those a GROUP_REDUCE or a tensor core's
    warp gave it."""
    return math.prod(range_size(r) for r in kernel.ranges
                     if r.arg[1] in (AxisType.GROUP_REDUCE, AxisType.LOCAL, AxisType.WARP))


def _workgroup(kernel: Kernel) -> Kernel:
    """The last two GLOBAL axes split into LOCAL ones, innermost first (its threads are a warp's
    neighbouring lanes), up to :data:`WORKGROUP_THREADS` threads together.  Each axis is found again
    after a split, which renumbers the ranges (the split axis keeps its GLOBAL part where it was)."""
    threads = _workgroup_threads(kernel)
    for from_last in (1, 2):
        globals_ = [r for r in kernel.ranges if r.arg[1] is AxisType.GLOBAL]
        if len(globals_) < from_last:
            break
        r = globals_[-from_last]
        most = WORKGROUP_THREADS // threads
        most = most if len(globals_) == 1 else min(16, most)  # 16 x 16 on a 2-D grid
        for size in (s for s in _LOCAL_SIZES if s <= most):
            if range_size(r) % size == 0 and range_size(r) > size:
                split = Opt(OptOp.SPLIT, _axis_of(kernel, r), (size, AxisType.LOCAL, False))
                before = kernel
                kernel = _try(kernel, split)
                threads *= size if kernel is not before else 1
                break
    return kernel


#: threads along the innermost output axis of a GPU register-tiled kernel (a warp's lanes read
#: neighbouring elements: coalesced), and the workgroup's threads in all
GPU_TILE_THREADS_X = 32
GPU_TILE_THREADS = 256
#: outputs per thread from which a GPU register tile's reduction is unrolled by
#: :data:`GPU_TILE_UNROLL`: every loaded value of A is reused by the tile's N lanes, every value of
#: B by its M lanes.  Measured on an H200 (2026-11-28), gemm 2048 float32 (torch 0.369 ms): 1x4
#: contiguous (the old heuristic) 2.82 ms; 32x8 threads, 4x4 strided 1.09 ms, unrolled by 4 0.86
#: ms (55 registers); 8x4 0.93 ms but 1.21 unrolled by 4 (70 registers); 16x16 threads 4x8 by 4
#: 0.87 ms; 8x8 by 4 0.93 ms (128 registers).  conv2d 8x64x56x56 (torch 88 us): 1.81 ms -> 0.115 ms
#: with 28 columns x 8 rows of threads, 7 rows x 4 channels each (x 8 channels: 0.104 ms)
GPU_TILE_MIN_OUTPUTS = 8
GPU_TILE_UNROLL = 4
#: workgroups a GPU register tile leaves at least (one per SM of an H100 or H200): a thread's
#: lanes are not given where they would leave SMs idle (a 256 gemm keeps 16 blocks of 256 threads)
GPU_TILE_MIN_BLOCKS = 132


#: elements a load's address may step along an axis for threads split along it to share lines: a
#: strided conv's 2 (a warp's 32 lanes read 2 lines of float32, not 32)
GPU_TILE_MAX_STEP = 4


def _steps_along(kernel: Kernel, r: UOp) -> bool:
    """True when some load's address steps by 1 to :data:`GPU_TILE_MAX_STEP` elements along ``r``
    (threads split along ``r`` read few lines per warp)."""
    return any(step is not None and 1 <= abs(step) <= GPU_TILE_MAX_STEP for step in _load_steps(kernel, r))


def _largest_divisor(size: int, most: int) -> int:
    return max((d for d in range(1, min(size, most) + 1) if size % d == 0), default=1)


def _gpu_tile_threads(kernel: Kernel) -> Kernel:
    """The workgroup of a register-tiled GPU kernel: the innermost output axis split into up to
    :data:`GPU_TILE_THREADS_X` LOCAL threads (a warp reads a row: coalesced; the whole axis when it
    is smaller, a conv's 28 columns), the next one into as many as keep :data:`GPU_TILE_THREADS`.
    LOCAL before UPCAST: each thread's lanes are a workgroup-width apart (strided), so a warp's
    loads of each lane are neighbours.  Threads a GROUP_REDUCE already gave the workgroup count
    against it."""
    threads = _workgroup_threads(kernel)
    outside = len(kernel.ranges)  # the next axis is outside the one split before (a whole axis goes)
    for most in (GPU_TILE_THREADS_X, 16):
        globals_ = [r for r in _globals(kernel) if _axis_of(kernel, r) < outside]
        if not globals_:
            break
        r = globals_[-1]
        outside = _axis_of(kernel, r)
        size = _largest_divisor(range_size(r), min(most, GPU_TILE_THREADS // threads))
        if size > 1:
            split = Opt(OptOp.SPLIT, _axis_of(kernel, r), (size, AxisType.LOCAL, False))
            tiled = _try(kernel, split)
            threads *= size if tiled is not kernel else 1
            kernel = tiled
    return kernel


def _gpu_register_tile(kernel: Kernel, candidates: list[UOp], reusing: dict[UOp, frozenset[int]],
                       second: UOp | None) -> Kernel:
    """A GPU kernel whose output axes reuse loads (gemm, conv): LOCAL threads first
    (:func:`_gpu_tile_threads`), then each thread upcast over two axes that reuse different loads:
    one reusing what the innermost one reuses (gemm's N, a conv's rows) by 4 or 2 (or a divisor up
    to 8: a conv's 7 rows), the other (gemm's M, a conv's output channels) by 4 or 2."""
    first_loads = reusing[candidates[0]]
    positions = {r: _axis_of(kernel, r) for r in candidates}
    tiled = _gpu_tile_threads(kernel)
    # the axes again by position: a SPLIT to LOCAL keeps the GLOBAL part where the axis was
    remaining = {r: tiled.ranges[p] for r, p in positions.items()
                 if tiled.ranges[p].arg[1] is AxisType.GLOBAL}

    def factor(r: UOp, preferred: Sequence[int], most: int) -> int:
        size = range_size(remaining[r])
        return next((f for f in preferred if size % f == 0 and size >= f),
                    _largest_divisor(size, most) if size <= most else 1)

    same = [r for r in candidates if reusing[r] == first_loads and r in remaining]
    chosen = max(same, key=lambda r: factor(r, (4, 2), 8), default=None)
    for r, preferred, most in ((chosen, (4, 2), 8), (second, (4, 2), 8)):
        if r is None or r not in remaining:
            continue
        lanes = factor(r, preferred, most)
        blocks = math.prod(range_size(g) for g in _globals(tiled))
        if lanes < 2 or blocks // lanes < GPU_TILE_MIN_BLOCKS:
            continue
        tiled = _try(tiled, Opt(OptOp.SPLIT, _axis_of(tiled, remaining[r]), (lanes, AxisType.UPCAST, False)))
    return tiled


#: padded work over real work a tensor-core kernel may do (TC's tc_opt 2 pads M, N and K to the
#: tile): 200x300x100 in float16 does 1.15x the work on m16n8k16 tiles, still ~15x the float32
#: units' rate on an H100; a K of 3 padded to 16 (5.3x) is left to the float32 path
TENSOR_CORE_MAX_PADDING = 2.0

#: warps (one per tile of a TC kernel's grid) the heuristic keeps when it gives each warp more
#: tiles: about half of an H100's 132 SMs x 64 resident warps.  The GPU model (H100) for f16 gemm
#: 4096: 1 tile per warp 2.57 ms, 4 along N 1.03 ms, 4x4 0.65 ms; a 256 gemm (512 warps) is
#: fastest with one (5 us vs 9 us for 4 along N)
TENSOR_CORE_MIN_WARPS = 4096


def _work(kernel: Kernel) -> int:
    """Iterations of the output and reduce loops (a TC kernel's tile axes count as the tile)."""
    loops = math.prod(range_size(r) for r in kernel.ranges
                      if r.arg[1] in (AxisType.GLOBAL, AxisType.LOOP, AxisType.REDUCE))
    configs = {u.arg[0] for u in kernel.ast.toposort() if u.op is Ops.WMMA}
    return loops * math.prod(math.prod(config.dims) for config in configs)


def _tensor_cores(kernel: Kernel) -> Kernel:
    """TC on the first reduce axis it applies to, the operands' casts allowed (tc_opt 1: a float16
    matmul sums float32 products of its float16 inputs); where no axis is a multiple of the tile,
    padded to it (tc_opt 2) unless that does more than :data:`TENSOR_CORE_MAX_PADDING` times the
    work.  The kernel itself when no tensor core takes it (float32 on CUDA: none is declared)."""
    if not kernel.backend_object.tensor_cores:
        return kernel
    reduces = sum(1 for _, t in kernel.axes if t in REDUCE_TYPES)
    exact = _first_that_applies(kernel, [Opt(OptOp.TC, i, (-1, 1, 1)) for i in range(reduces)])
    if exact is not kernel:
        return exact
    padded = _first_that_applies(kernel, [Opt(OptOp.TC, i, (-1, 2, 1)) for i in range(reduces)])
    return padded if _work(padded) <= TENSOR_CORE_MAX_PADDING * _work(kernel) else kernel


def _tensor_core_tiles(kernel: Kernel) -> Kernel:
    """More tensor-core tiles per warp: the N tiles (which reuse A's fragments) upcast by 4 or 2,
    then the M tiles (which reuse B's), while the grid keeps :data:`TENSOR_CORE_MIN_WARPS` warps."""
    loads = [u for u in kernel.ast.toposort() if u.op is Ops.LOAD]
    globals_ = [r for r in reversed(_globals(kernel))
                if any(not depends_on(load.src[0], r) for load in loads)]
    for position in [_axis_of(kernel, r) for r in globals_[:2]]:
        warps = math.prod(range_size(r) for r in _globals(kernel))
        factors = [f for f in (4, 2) if warps // f >= TENSOR_CORE_MIN_WARPS]
        splits = _splits(kernel, kernel.ranges[position], factors, AxisType.UPCAST)
        kernel = _first_that_applies(kernel, splits)
    return kernel


def hand_coded_optimizations(kernel: Kernel) -> Kernel:
    """The heuristic opts for ``kernel``'s backend (see the module docstring)."""
    backend = kernel.backend_object
    gpu = not backend.runs_on_cpu  # workgroup tiles; else register tiles (an OpenCL CPU device too)
    if gpu and backend.has_local:
        tensor_cored = _tensor_cores(kernel)
        if tensor_cored is not kernel:  # TC is the first opt; its K fragments are unrolled already
            return _workgroup(_tensor_core_tiles(tensor_cored))
    loads = [u for u in kernel.ast.toposort() if u.op is Ops.LOAD]
    if gpu and backend.has_local:
        kernel = _group_reduce(kernel)
    has_reduce = any(t in REDUCE_TYPES for _, t in kernel.axes)
    widest = max(backend.vector_widths or (1,))
    # lanes a kernel may have: CPU compilers split wide vectors well; GPU renderers need native widths
    budget = max(widest, 4) if gpu else 256
    outputs = [r for r in kernel.ranges if r.arg[1] in (AxisType.GLOBAL, AxisType.LOOP)]
    if has_reduce:
        # register blocking: an output axis a load does not vary over reuses that load across its
        # lanes.  The innermost such axis gets lanes, and a second one that reuses another load
        # (matmul: N reuses A, M reuses B; conv: width reuses the weights, channels the input)
        reusing = {r: frozenset(i for i, load in enumerate(loads) if not depends_on(load.src[0], r))
                   for r in reversed(outputs)}
        candidates = [r for r, which in reusing.items() if which]
        if candidates and not (gpu and _shares_streamed_rows(kernel)):
            first = candidates[0]
            second = next((r for r in candidates[1:] if reusing[r] - reusing[first]), None)
            if gpu and _steps_along(kernel, _globals(kernel)[-1]):
                kernel = _gpu_register_tile(kernel, candidates, reusing, second)
            elif gpu:
                # no load steps along the innermost output (A @ B.T reads both along the
                # reduction): neighbouring threads cannot coalesce; 4 lanes of it reuse the loads
                kernel = _first_that_applies(kernel, _splits(kernel, first, (4,), AxisType.UPCAST))
            else:
                # an opt renumbers the ranges: find the second axis again by its position, which a
                # SPLIT to UPCAST keeps (the new lanes go last)
                second_axis = None if second is None else _axis_of(kernel, second)
                grouped = None if second is not None else _grouped_rows(kernel, first)
                if grouped is not None:
                    kernel = _power_of_two_lanes_inside(grouped)
                else:
                    channels = None if second is None else range_size(second)
                    register_lanes = _register_lanes(kernel)
                    kernel, rows = _cpu_register_tile(
                        kernel, first, register_lanes, second is None, channels, second_axis
                    )
                if second_axis is not None:
                    second = kernel.ranges[second_axis]
                    kernel = _first_that_applies(kernel, _row_splits(kernel, second, rows))
                    kernel = _power_of_two_lanes_inside(kernel)
                kernel = _order_for_staging(kernel)
        elif not gpu and outputs and not candidates and _slides_a_window(kernel, outputs[-1]):
            # no output axis reuses a load (a pooling's windows): its rows become vectors all the
            # same, each lane its own window (a stride-2 row read as two loads and a shuffle).
            # VGG-16's 2x2 max pools, 2 cores: 64 channels at 112x112 1.49 -> 0.54 ms (ONNX
            # Runtime 0.37)
            kernel = _row_tile(kernel, outputs[-1], _register_lanes(kernel))
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
        if gpu and lanes >= GPU_TILE_MIN_OUTPUTS:
            # a GPU register tile: unrolled by 4 (H200, gemm 2048 float32 with a 4x4 tile: 1.09 ->
            # 0.86 ms); a small power-of-two reduction fully
            small = [size] if size <= 4 and size & (size - 1) == 0 else []
            unrolls = _splits(kernel, r, [*small, GPU_TILE_UNROLL], AxisType.UNROLL)
            kernel = _first_that_applies(kernel, unrolls)
            break
        fits = size & (size - 1) == 0 or not gpu
        register = _register_lanes(kernel)
        # a register tile on 16 vector registers keeps a filter row's short loop: unrolled, each
        # accumulator took the row's products summed apart (a multiply, two multiply-adds and an
        # add for three terms) instead of a multiply-add each.  AVX2 (AMD EPYC), 2 cores, each conv
        # alone, GFLOP/s C / LLVM: 64 channels at 56x56 61 -> 58-89 / 45-50 -> 99-109, 128 at
        # 28x28 73-85 -> 101-114 / 54 -> 64-74, 512 at 7x7 92-94 -> 100-105 / 62-78 -> 86-90
        # (a depthwise conv's row of columns, one upcast axis, keeps its unrolled taps: MobileNet-v2's
        # 14x14 ones 0.05 -> 0.08 ms kept as a loop)
        upcasts = sum(1 for _, kind in kernel.axes if kind is AxisType.UPCAST)
        few_registers = kernel.backend_object.vector_registers <= 16
        tile_on_few_registers = not gpu and few_registers and upcasts == 2 and lanes >= 2 * register
        whole = size <= 16 and lanes * size <= budget and fits and not tile_on_few_registers
        factors = [size] if whole else []
        if gpu or lanes < 2 * register or (lanes == 2 * register and size >= LONG_REDUCTION):
            # a reduction without a register tile (a row's max or sum) gets a vector's width of
            # independent lanes: the loads and the math before the reduce (softmax's exp) run as
            # whole vectors. By 4 left pocl's exp-sum 2.8x slower than by 32 (OpenCL, 1024x1024).
            # Two registers of outputs (a matrix-vector product on AVX2) over a long reduction
            # are unrolled too, for shorter chains of roundings (LONG_REDUCTION)
            wide = (register, 8) if lanes == 1 and not gpu else ()
            factors += [f for f in (*wide, 4, 2) if lanes * f <= min(budget, 128)]
        kernel = _first_that_applies(kernel, _splits(kernel, r, factors, AxisType.UNROLL))
    if not gpu:
        unrolled = _unrolled_filter_rows(kernel)
        kernel = unrolled if unrolled is kernel else _paired_output_rows(unrolled)
    if backend.has_local and gpu:
        kernel = _workgroup(kernel)
    elif backend.has_threads:
        kernel = _threaded(kernel, max(1, min(backend.thread_count, 16)))  # the CPU target's cores
    return kernel


__all__ = [
    "HEURISTIC_SOURCE_LANE_OPS",
    "HEURISTIC_TILE_LANES",
    "LONG_REDUCTION",
    "TENSOR_CORE_MAX_PADDING",
    "TENSOR_CORE_MIN_WARPS",
    "hand_coded_optimizations",
    "source_estimate",
]
