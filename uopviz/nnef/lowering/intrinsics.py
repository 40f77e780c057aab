"""Hand-written kernels of the NNEF intrinsics (operations with no ``@lower`` body).

They are top_k (rank by comparison counting), nonmax_suppress (greedy suppression decided in rank
order by one kernel with a sequential loop, then counted rows), the random generators
(Threefry-2x32), cubic_resize and cubic grid sampling (Keys' cubic convolution, 4 taps per axis),
and the ROI pools (each output bin reduces over the input window the ROI maps to, a window whose
extent is data-dependent: the kernel reduces over the whole input extent gated by the bin's bounds).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from uopviz.core.dtype import DType, dtypes
from uopviz.core.ops import AxisType, Ops
from uopviz.core.uop import UOp
from uopviz.nnef.lowering.kernel_builder import KernelBuilder, LoweredKernel, runtime_value
from uopviz.nnef.lowering.kernel_math import (
    INDEX,
    absolute,
    all_of,
    as_float,
    as_uop,
    clamp_index,
    flat_offset,
    floor,
    log,
    logical_not,
    python_value,
    reduce_over,
    reflect_index,
    round_half_away,
    select,
    uop_constant,
    uop_dtype,
)
from uopviz.nnef.model.nodes import Operation, TensorInfo
from uopviz.passes.indexing import simplify_indices
from uopviz.passes.rangeify import finish_kernel

if TYPE_CHECKING:
    from uopviz.nnef.model.graph import ComposedGraph

# ------------------------------------------------------------------------------------------------
# intrinsics


def _intrinsic_top_k(graph: ComposedGraph, op: Operation) -> list[LoweredKernel]:
    """top_k: each candidate's rank is the number of candidates that beat it (ties: lower index
    first); candidates ranked below k are scattered to their rank. Always sorted."""
    symbols = op.symbols
    data: TensorInfo = symbols["input"]
    k = op.attribs["k"]
    largest = op.attribs["largest"]
    outer, m, inner = symbols["s"], symbols["m"], symbols["t"]
    kept = min(k, m)
    kernels = []
    for output_name in ("values", "indices"):
        output = symbols[output_name]
        builder = KernelBuilder(output, graph)
        outer_ranges = [UOp.range(e, AxisType.LOOP, n) for n, e in enumerate(outer)]
        candidate = UOp.range(m, AxisType.LOOP, len(outer))
        inner_ranges = [UOp.range(e, AxisType.LOOP, len(outer) + 1 + n) for n, e in enumerate(inner)]
        other = UOp.range(m, AxisType.REDUCE, len(outer) + 1 + len(inner))
        shape = data.upper_shape

        mine = builder.load(data, flat_offset([*outer_ranges, candidate, *inner_ranges], shape))
        theirs = builder.load(data, flat_offset([*outer_ranges, other, *inner_ranges], shape))
        beats = theirs > mine if largest else theirs < mine
        ties = UOp(Ops.AND, (theirs.eq(mine), other < candidate))
        rank = reduce_over(
            "+=", select(UOp(Ops.OR, (beats, ties)), uop_constant(INDEX, 1), uop_constant(INDEX, 0)), [other]
        )
        value = mine if output_name == "values" else candidate.cast(dtypes.int32)
        address = UOp(
            Ops.INDEX,
            (builder.param(output), flat_offset([*outer_ranges, rank, *inner_ranges], output.upper_shape)),
        )
        store = UOp(Ops.STORE, (address, value, rank < kept))
        kernels.append(
            LoweredKernel(
                f"{op.label}.{output_name}",
                simplify_indices(UOp(Ops.SINK, (store,))),
                list(builder.names),
                op,
                note="rank by counting",
            )
        )
    return kernels


def _seed(op: Operation) -> int:
    return int.from_bytes(hashlib.sha256(op.label.encode()).digest()[:4], "little")


def _random_bits(position: UOp, op: Operation, stream: int = 0) -> UOp:
    """32 uniformly random bits per position (Threefry-2x32 keyed by the operation's label)."""
    counter = position.cast(dtypes.uint64) + uop_constant(dtypes.uint64, stream << 32)
    key = uop_constant(dtypes.uint64, _seed(op))
    bits = UOp(Ops.THREEFRY, (counter, key))
    return UOp(Ops.AND, (bits, uop_constant(dtypes.uint64, 0xFFFFFFFF))).cast(dtypes.uint32)


def _uniform01(position: UOp, op: Operation, stream: int = 0) -> UOp:
    """A float in [0, 1) from the top 24 random bits."""
    bits = UOp(Ops.SHR, (_random_bits(position, op, stream), uop_constant(dtypes.uint32, 8)))
    return bits.cast(dtypes.float32) * (1.0 / (1 << 24))


def _intrinsic_random(graph: ComposedGraph, op: Operation) -> list[LoweredKernel]:
    output: TensorInfo = op.symbols["output"]
    builder = KernelBuilder(output, graph)
    size = max(math.prod(output.upper_shape), 1)
    position = UOp.range(size, AxisType.LOOP, 0)
    attribs = op.attribs
    if op.name == "uniform":
        low, high = attribs["min"], attribs["max"]
        value: UOp = _uniform01(position, op) * float(high - low) + float(low)
        if output.dtype == "int":
            value = floor(value).cast(dtypes.int32)
    elif op.name == "normal":
        u1 = 1.0 - _uniform01(position, op, 0)  # (0, 1]: the log stays finite
        u2 = _uniform01(position, op, 1)
        radius = UOp(Ops.SQRT, (log(u1) * -2.0,))
        value = radius * UOp(Ops.SIN, (u2 * (2 * math.pi) + math.pi / 2,)) * float(attribs["std"]) + float(
            attribs["mean"]
        )
    else:
        value = _uniform01(position, op) < float(attribs["prob"])
    store = UOp(
        Ops.STORE, (UOp(Ops.INDEX, (builder.param(output), position)), value.cast(uop_dtype(output.dtype)))
    )
    return [
        LoweredKernel(
            op.label, simplify_indices(UOp(Ops.SINK, (store,))), list(builder.names), op, note="Threefry-2x32"
        )
    ]


def _keys_weight(distance: UOp, a: float) -> UOp:
    """Keys' cubic convolution weight of a tap at ``distance`` (>= 0) from the sample point."""
    near = ((distance * (a + 2.0) - (a + 3.0)) * distance * distance) + 1.0
    far = ((distance * a - 5.0 * a) * distance + 8.0 * a) * distance - 4.0 * a
    return select(distance <= 1.0, near, select(distance < 2.0, far, uop_constant(dtypes.float32, 0.0)))


def _intrinsic_cubic_resize(graph: ComposedGraph, op: Operation) -> list[LoweredKernel]:
    """Cubic (Keys) resampling along ``axes``: 4 taps per axis, replicated border (input extents
    decided at run time are read from their counters)."""
    symbols = op.symbols
    data: TensorInfo = symbols["input"]
    output: TensorInfo = symbols["output"]
    shape = data.upper_shape
    axes = [a + len(shape) if a < 0 else a for a in op.attribs["axes"]]
    sizes = op.attribs["size"]
    transform = op.attribs["coordinate_transform"]
    a = float(op.attribs["coeff_a"])
    builder = KernelBuilder(output, graph)
    out_ranges = [UOp.range(e, AxisType.LOOP, n) for n, e in enumerate(output.upper_shape)]
    taps = [UOp.range(4, AxisType.REDUCE, len(out_ranges) + n) for n in range(len(axes))]
    weight: UOp | None = None
    positions: list[UOp] = list(out_ranges)
    for axis, size, tap in zip(axes, sizes, taps, strict=True):
        extent = builder.extent(data.shape[axis])  # an int, or the counted extent
        length = float(extent) if isinstance(extent, int) else as_float(extent)
        size = builder.extent(size)  # rescale's size of a counted extent is computed at run time
        count = float(size) if isinstance(size, int) else as_float(size)
        if transform == "ALIGNED":
            stretch = (length - 1.0) / (count - 1.0) if isinstance(size, UOp) or size > 1 else 0.0
            scale = (
                stretch
                if isinstance(size, int)
                else select(size <= 1, uop_constant(dtypes.float32, 0.0), stretch)
            )
            offset = 0.0
        else:
            scale = length / count
            offset = 0.5 * scale - 0.5 if transform == "SYMMETRIC" else 0.0
        x = out_ranges[axis].cast(dtypes.float32) * scale + offset
        base = floor(x)
        tap_f = tap.cast(dtypes.float32) - 1.0
        w = _keys_weight(absolute(x - (base + tap_f)), a)
        weight = w if weight is None else weight * w
        positions[axis] = clamp_index((base + tap_f).cast(dtypes.int32).cast(INDEX), extent)
    value = reduce_over("+=", builder.load(data, flat_offset(positions, shape)) * weight, taps)
    store = UOp(
        Ops.STORE,
        (UOp(Ops.INDEX, (builder.param(output), flat_offset(out_ranges, output.upper_shape))), value),
    )
    return [
        LoweredKernel(
            op.label,
            simplify_indices(UOp(Ops.SINK, (store,))),
            list(builder.names),
            op,
            note="cubic (Keys) taps",
        )
    ]


GRID_SAMPLE_CUBIC_A = -0.75  # Keys' coefficient of bicubic grid sampling (the common choice)


def _intrinsic_cubic_grid_sample(graph: ComposedGraph, op: Operation) -> list[LoweredKernel]:
    """Cubic grid sampling, written as the spec writes ``_linear_grid_sample`` with 4 taps per axis
    instead of 2: the grid's last dimension holds the coordinates in reversed axis order (x first),
    mapped from [-1, 1] to pixels (``aligned``: the corner pixels' centres); taps ``floor(x) - 1 ..
    floor(x) + 2`` weighted by Keys' kernel (a = -0.75). Taps outside the input are zero (``ZEROS``),
    the nearest border pixel (``REPLICATE``) or mirrored about the border pixels as often as it takes
    (``REFLECT``, period ``2 * (s - 1)``, as the stdlib's ``_linear_grid_sample`` writes it). Input
    extents decided at run time are read from their counters."""
    symbols = op.symbols
    data: TensorInfo = symbols["input"]
    grid: TensorInfo = symbols["grid"]
    output: TensorInfo = symbols["output"]
    padding, aligned = op.attribs["padding"], op.attribs["aligned"]
    shape = data.upper_shape
    d = len(shape) - 2
    builder = KernelBuilder(output, graph)
    out_ranges = [UOp.range(e, AxisType.LOOP, n) for n, e in enumerate(output.upper_shape)]
    batch, channel, points = out_ranges[0], out_ranges[1], out_ranges[2:]
    taps = [UOp.range(4, AxisType.REDUCE, len(out_ranges) + n) for n in range(d)]
    weight: Any = True
    gates: list[Any] = []
    positions: list[UOp] = []
    for axis, tap in enumerate(taps):
        extent = builder.extent(data.shape[2 + axis])  # an int, or the counted extent
        size = float(extent) if isinstance(extent, int) else as_float(extent)
        coordinate = builder.load(grid, flat_offset([batch, *points, d - 1 - axis], grid.upper_shape))
        g = (coordinate + 1.0) * 0.5
        x = g * (size - 1.0) if aligned else g * size - 0.5
        tap_f = floor(x) + (tap.cast(dtypes.float32) - 1.0)
        w = _keys_weight(absolute(x - tap_f), GRID_SAMPLE_CUBIC_A)
        weight = w if weight is True else weight * w
        index = tap_f.cast(dtypes.int32).cast(INDEX)
        if padding == "ZEROS":
            gates.append(UOp(Ops.AND, (index >= 0, index < extent)))
            positions.append(index)
            continue
        if padding == "REFLECT":
            index = reflect_index(index, extent)
        positions.append(clamp_index(index, extent))
    sample = builder.load(data, flat_offset([batch, channel, *positions], shape), all_of(gates))
    value = reduce_over("+=", sample * weight, taps)
    store = UOp(
        Ops.STORE,
        (UOp(Ops.INDEX, (builder.param(output), flat_offset(out_ranges, output.upper_shape))), value),
    )
    return [
        LoweredKernel(
            op.label,
            simplify_indices(UOp(Ops.SINK, (store,))),
            list(builder.names),
            op,
            note="Keys cubic taps",
        )
    ]


def _intrinsic_runtime_scalar(graph: ComposedGraph, op: Operation) -> list[LoweredKernel]:
    """A rank-0 tensor computed from the counters of run-time extents (a ``RuntimeScalarOperation``)."""
    output = graph.tensors[op.outputs[0]]
    builder = KernelBuilder(output, graph)
    dtype = uop_dtype(output.dtype)
    value = runtime_value(graph, op.attribs["value"], builder._counter)
    stored = (
        as_uop(value, dtype) if isinstance(value, UOp) else uop_constant(dtype, python_value(value, dtype))
    )
    store = UOp(Ops.STORE, (UOp(Ops.INDEX, (builder.param(output), uop_constant(INDEX, 0))), stored))
    return [
        LoweredKernel(
            op.label,
            simplify_indices(UOp(Ops.SINK, (store,))),
            list(builder.names),
            op,
            note=repr(op.attribs["value"]),
        )
    ]


def _intrinsic_roi_pool(graph: ComposedGraph, op: Operation) -> list[LoweredKernel]:
    """Max / average pooling of regions of interest (the spec declares the operators only).

    Row ``r`` of ``rois`` is ``[start_0, .., start_{d-1}, end_0, .., end_{d-1}]`` in input element
    coordinates along the spatial axes (in their order), both corners inclusive after rounding
    half away from zero; ``index[r]`` is the batch item it is cut from. A region of extent
    ``e = max(end - start + 1, 1)`` is split into ``o = output_size`` bins of ``e / o`` elements: bin
    ``p`` covers ``[start + floor(p * e / o), start + ceil((p + 1) * e / o))`` (exact integer
    arithmetic), clipped to the input. ``max_roi_pool`` takes each bin's maximum, ``avg_roi_pool``
    its mean; an empty bin (or an index outside the batch) gives 0. A bin's extent depends on the
    data, so the kernel reduces over the whole spatial extent, gated by the bin's bounds.
    """
    symbols = op.symbols
    data: TensorInfo = symbols["input"]
    rois: TensorInfo = symbols["rois"]
    index: TensorInfo = symbols["index"]
    output: TensorInfo = symbols["output"]
    sizes = list(op.attribs["output_size"])
    shape = data.upper_shape
    spatial = list(shape[2:])
    d = len(spatial)
    builder = KernelBuilder(output, graph)
    out_ranges = [UOp.range(e, AxisType.LOOP, n) for n, e in enumerate(output.upper_shape)]
    roi, channel, bins = out_ranges[0], out_ranges[1], out_ranges[2:]
    window = [UOp.range(e, AxisType.REDUCE, len(out_ranges) + n) for n, e in enumerate(spatial)]
    item = builder.load(index, roi).cast(INDEX)
    inside = [UOp(Ops.AND, (item >= 0, item < shape[0]))]
    count: UOp = uop_constant(INDEX, 1)
    for axis, (extent, size, p, t) in enumerate(zip(spatial, sizes, bins, window, strict=True)):
        start = round_half_away(builder.load(rois, flat_offset([roi, axis], rois.upper_shape))).cast(
            dtypes.int32
        )
        end = round_half_away(builder.load(rois, flat_offset([roi, d + axis], rois.upper_shape))).cast(
            dtypes.int32
        )
        length = UOp(Ops.MAX, (end - start + 1, uop_constant(dtypes.int32, 1))).cast(INDEX)
        first = start.cast(INDEX)  # bin bounds in integers: floor(p e / o) and ceil((p + 1) e / o)
        low = first + UOp(Ops.IDIV, (p * length, uop_constant(INDEX, size)))
        high = first + UOp(Ops.IDIV, ((p + 1) * length + (size - 1), uop_constant(INDEX, size)))
        low = UOp(Ops.MAX, (low, uop_constant(INDEX, 0)))
        high = select(high > extent, uop_constant(INDEX, extent), high)
        inside.append(UOp(Ops.AND, (t >= low, t < high)))
        count = count * UOp(Ops.MAX, (high - low, uop_constant(INDEX, 0)))
    gate = all_of(inside)
    sample = builder.load(data, flat_offset([item, channel, *window], shape), gate)
    empty = UOp(Ops.OR, (count <= 0, logical_not(all_of(inside[:1]))))
    zero = uop_constant(dtypes.float32, 0.0)
    if op.name == "max_roi_pool":
        value = select(
            empty,
            zero,
            reduce_over(">?=", select(gate, sample, uop_constant(dtypes.float32, -math.inf)), window),
        )
    else:
        total = reduce_over("+=", select(gate, sample, zero), window)
        value = select(
            empty, zero, total / UOp(Ops.MAX, (count, uop_constant(INDEX, 1))).cast(dtypes.float32)
        )
    store = UOp(
        Ops.STORE,
        (UOp(Ops.INDEX, (builder.param(output), flat_offset(out_ranges, output.upper_shape))), value),
    )
    return [
        LoweredKernel(
            op.label, simplify_indices(UOp(Ops.SINK, (store,))), list(builder.names), op, note="bins gated"
        )
    ]


def _kernel(
    op: Operation,
    name: str,
    output: TensorInfo | str,
    stores: Callable[[KernelBuilder], list[UOp]],
    graph: ComposedGraph,
    scratch: dict[str, tuple[DType, int]],
    note: str = "",
) -> LoweredKernel:
    """A hand-written kernel: ``stores(builder)`` builds its STOREs (``output``: a tensor or scratch)."""
    if isinstance(output, str):
        dtype, size = scratch[output]
        target = TensorInfo(
            output, {dtypes.int32: "int", dtypes.float32: "real", dtypes.bool: "bool"}[dtype], (size,)
        )
    else:
        target = output
    builder = KernelBuilder(target, graph)
    kernel, names = finish_kernel(UOp(Ops.SINK, tuple(stores(builder))), builder.names, keep=(0,))
    used = {name: spec for name, spec in scratch.items() if name in names}
    return LoweredKernel(name, kernel, names, op, used, note)


def _box_corners(builder: KernelBuilder, boxes: TensorInfo, batch: UOp, box: UOp, center: bool) -> list[UOp]:
    """(y1, x1, y2, x2) of a box, ordered (NNEF/ONNX allow either corner first)."""
    values = [
        builder.load(boxes, flat_offset([batch, box, uop_constant(INDEX, k)], boxes.upper_shape))
        for k in range(4)
    ]
    if center:
        x, y, w, h = values
        return [y - h * 0.5, x - w * 0.5, y + h * 0.5, x + w * 0.5]
    a, b, c, d = values
    lo = lambda p, q: UOp(Ops.WHERE, (p < q, p, q))  # noqa: E731
    return [lo(a, c), lo(b, d), UOp(Ops.MAX, (a, c)), UOp(Ops.MAX, (b, d))]


def _iou(first: list[UOp], second: list[UOp]) -> UOp:
    zero = uop_constant(dtypes.float32, 0.0)
    lo = lambda p, q: UOp(Ops.WHERE, (p < q, p, q))  # noqa: E731
    height = UOp(Ops.MAX, (lo(first[2], second[2]) - UOp(Ops.MAX, (first[0], second[0])), zero))
    width = UOp(Ops.MAX, (lo(first[3], second[3]) - UOp(Ops.MAX, (first[1], second[1])), zero))
    inter = height * width
    area = lambda c: (c[2] - c[0]) * (c[3] - c[1])  # noqa: E731
    union = area(first) + area(second) - inter
    return UOp(
        Ops.WHERE,
        (union > 0.0, inter / UOp(Ops.WHERE, (union > 0.0, union, uop_constant(dtypes.float32, 1.0))), zero),
    )


def _intrinsic_nms(graph: ComposedGraph, op: Operation) -> list[LoweredKernel]:
    """Non-maximum suppression, greedy in descending score order per batch item and class.

    Boxes are ranked by score (ties: the lower index first) and listed in rank order; a box's
    status is undecided (0), kept (1) or removed (2; also a box at or under the score threshold).
    One kernel then decides the boxes of each group in rank order, a sequential range (see
    :func:`uopviz.passes.optops.axes.sequential_axes`): the box of rank ``k`` is removed when a box
    of a lower rank that was kept overlaps it (IoU > threshold), else kept: ``n`` steps of ``n``
    comparisons, ``O(n²)`` work. (It took ``n`` rounds of ``O(n²)`` before, deciding at least the
    best undecided box each.) Kept boxes, at most ``max_outputs_per_class`` per class, are then
    counted and scattered as (batch, class, box) rows in batch, class, score order.
    """
    symbols = op.symbols
    boxes: TensorInfo = symbols["boxes"]
    scores: TensorInfo = symbols["scores"]
    output: TensorInfo = symbols["indices"]
    batches, classes, n = symbols["b"], symbols["c"], symbols["n"]
    limit = int(op.attribs["max_outputs_per_class"])
    threshold = float(op.attribs["iou_threshold"])
    minimum = op.attribs["score_threshold"]
    center = op.attribs["box_format"] == "CENTER"
    groups = batches * classes
    label = op.label
    rank, total, counts = f"{label}#rank", f"{label}#count", f"{label}#per_class"
    order, status = f"{label}#order", f"{label}#status"
    scratch = {
        rank: (dtypes.int32, groups * n),
        order: (dtypes.int32, groups * n),
        status: (dtypes.int32, groups * n),
        counts: (dtypes.int32, groups),
        total: (dtypes.int32, 1),
    }
    one, zero = uop_constant(dtypes.int32, 1), uop_constant(dtypes.int32, 0)
    kernels = []

    def ranges() -> tuple[UOp, UOp, UOp, UOp]:
        group = UOp.range(groups, AxisType.LOOP, 0)
        box = UOp.range(n, AxisType.LOOP, 1)
        return (
            group,
            box,
            UOp(Ops.IDIV, (group, uop_constant(INDEX, classes))),
            UOp(Ops.MOD, (group, uop_constant(INDEX, classes))),
        )

    def score(builder: KernelBuilder, batch: UOp, cls: UOp, box: UOp) -> UOp:
        return builder.load(scores, flat_offset([batch, cls, box], scores.upper_shape))

    def rank_stores(builder: KernelBuilder) -> list[UOp]:
        group, box, batch, cls = ranges()
        other = UOp.range(n, AxisType.REDUCE, 2)
        mine, theirs = score(builder, batch, cls, box), score(builder, batch, cls, other)
        ahead = UOp(Ops.OR, (theirs > mine, UOp(Ops.AND, (theirs.eq(mine), other < box))))
        value = reduce_over("+=", select(ahead, one, zero), [other])
        return [
            UOp(
                Ops.STORE,
                (UOp(Ops.INDEX, (builder.param(rank, dtypes.int32, groups * n), group * n + box)), value),
            )
        ]

    def init_stores(builder: KernelBuilder) -> list[UOp]:
        group, box, batch, cls = ranges()
        valid = score(builder, batch, cls, box) > float(minimum) if minimum is not None else True
        value = select(valid, zero, uop_constant(dtypes.int32, 2))
        address = UOp(Ops.INDEX, (builder.param(status, dtypes.int32, groups * n), group * n + box))
        return [UOp(Ops.STORE, (address, as_uop(value, dtypes.int32)))]

    def order_stores(builder: KernelBuilder) -> list[UOp]:
        group, box, _, _ = ranges()
        my_rank = builder.load(rank, group * n + box, True, dtypes.int32, groups * n).cast(INDEX)
        address = UOp(Ops.INDEX, (builder.param(order, dtypes.int32, groups * n), group * n + my_rank))
        return [UOp(Ops.STORE, (address, box.cast(dtypes.int32)))]

    def decide_stores(builder: KernelBuilder) -> list[UOp]:
        # step k decides the box of rank k: every box of a lower rank is decided by then (a
        # sequential range: the steps run in order, each reading the statuses the earlier stored)
        group = UOp.range(groups, AxisType.LOOP, 0)
        step = UOp.range(n, AxisType.REDUCE, 1) if n > 1 else uop_constant(INDEX, 0)
        other = UOp.range(n, AxisType.REDUCE, 2)
        batch = UOp(Ops.IDIV, (group, uop_constant(INDEX, classes)))
        box = builder.load(order, group * n + step, True, dtypes.int32, groups * n).cast(INDEX)
        current = builder.load(status, group * n + box, True, dtypes.int32, groups * n)
        their_state = builder.load(status, group * n + other, True, dtypes.int32, groups * n)
        their_rank = builder.load(rank, group * n + other, True, dtypes.int32, groups * n)
        overlap = (
            _iou(
                _box_corners(builder, boxes, batch, box, center),
                _box_corners(builder, boxes, batch, other, center),
            )
            > threshold
        )
        kept_before = UOp(Ops.AND, (their_rank < step.cast(dtypes.int32), their_state.eq(one)))
        suppressed = reduce_over(">?=", select(UOp(Ops.AND, (kept_before, overlap)), one, zero), [other])
        decided = select(suppressed.eq(one), uop_constant(dtypes.int32, 2), one)
        value = select(current.eq(zero), decided, current)
        address = UOp(Ops.INDEX, (builder.param(status, dtypes.int32, groups * n), group * n + box))
        return [UOp(Ops.STORE, (address, value))]

    kernels.append(_kernel(op, f"{label}.rank", rank, rank_stores, graph, scratch, "rank by score"))
    kernels.append(_kernel(op, f"{label}.order", order, order_stores, graph, scratch, "boxes by rank"))
    kernels.append(_kernel(op, f"{label}.status", status, init_stores, graph, scratch, "score threshold"))
    kernels.append(_kernel(op, f"{label}.decide", status, decide_stores, graph, scratch, "greedy, by rank"))
    final = status

    def kept(builder: KernelBuilder, group: UOp, box: UOp) -> UOp:
        return builder.load(final, group * n + box, True, dtypes.int32, groups * n).eq(one)

    def count_stores(builder: KernelBuilder) -> list[UOp]:
        group = UOp.range(groups, AxisType.LOOP, 0)
        box = UOp.range(n, AxisType.REDUCE, 1)
        value = reduce_over("+=", select(kept(builder, group, box), one, zero), [box])
        capped = select(value < limit, value, uop_constant(dtypes.int32, limit))
        return [
            UOp(Ops.STORE, (UOp(Ops.INDEX, (builder.param(counts, dtypes.int32, groups), group)), capped))
        ]

    def total_stores(builder: KernelBuilder) -> list[UOp]:
        group = UOp.range(groups, AxisType.REDUCE, 0)
        value = reduce_over("+=", builder.load(counts, group, True, dtypes.int32, groups), [group])
        return [
            UOp(
                Ops.STORE,
                (UOp(Ops.INDEX, (builder.param(total, dtypes.int32, 1), uop_constant(INDEX, 0))), value),
            )
        ]

    def clear_stores(builder: KernelBuilder) -> list[UOp]:
        position = UOp.range(max(math.prod(output.upper_shape), 1), AxisType.LOOP, 0)
        return [UOp(Ops.STORE, (UOp(Ops.INDEX, (builder.param(output), position)), zero))]

    def scatter_stores(builder: KernelBuilder) -> list[UOp]:
        group, box, batch, cls = ranges()
        other = UOp.range(n, AxisType.REDUCE, 2)
        before = UOp.range(groups, AxisType.REDUCE, 3)
        my_rank = builder.load(rank, group * n + box, True, dtypes.int32, groups * n)
        their_rank = builder.load(rank, group * n + other, True, dtypes.int32, groups * n)
        order = reduce_over(
            "+=",
            select(UOp(Ops.AND, (kept(builder, group, other), their_rank < my_rank)), one, zero),
            [other],
        )
        base = reduce_over(
            "+=",
            select(before < group, builder.load(counts, before, True, dtypes.int32, groups), zero),
            [before],
        )
        gate = UOp(Ops.AND, (kept(builder, group, box), order < limit))
        row = (base + order).cast(INDEX)
        values = [batch.cast(dtypes.int32), cls.cast(dtypes.int32), box.cast(dtypes.int32)]
        return [
            UOp(Ops.STORE, (UOp(Ops.INDEX, (builder.param(output), row * 3 + column)), value, gate))
            for column, value in enumerate(values)
        ]

    kernels.append(_kernel(op, f"{label}.per_class", counts, count_stores, graph, scratch, "kept per class"))
    kernels.append(_kernel(op, f"{label}.count", total, total_stores, graph, scratch, "output count"))
    kernels.append(_kernel(op, f"{label}.clear", output, clear_stores, graph, scratch))
    kernels.append(_kernel(op, f"{label}.scatter", output, scatter_stores, graph, scratch, "rows in order"))
    graph.counts[output.shape[0].key] = total
    return kernels


INTRINSICS: dict[str, Callable[[ComposedGraph, Operation], list[LoweredKernel]]] = {
    "algo.top_k": _intrinsic_top_k,
    "rand.uniform": _intrinsic_random,
    "rand.normal": _intrinsic_random,
    "rand.bernoulli": _intrinsic_random,
    "image.cubic_resize": _intrinsic_cubic_resize,
    "image._cubic_grid_sample": _intrinsic_cubic_grid_sample,
    "image.max_roi_pool": _intrinsic_roi_pool,
    "image.avg_roi_pool": _intrinsic_roi_pool,
    "algo.nonmax_suppress": _intrinsic_nms,
    "runtime.scalar": _intrinsic_runtime_scalar,
}
