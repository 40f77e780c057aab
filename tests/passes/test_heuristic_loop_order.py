"""The heuristic's loop order for a reduction over strided rows (heuristic._order_for_staging): a
long one (gemm's K of 512) puts the N tiles outside the M tiles so a copied strip of B serves
every tile of A; a short one whose operands fit in half a core's L2 (a 1x1 convolution of 64
channels, as a matmul of the weights by the image, on a core of 2 MiB) keeps M outside, each output
row written in long runs and nothing staged; the same one on a core of 512 KiB is staged, unless
the staged order would write more than STAGED_MAX_ROWS rows at once (M of 512).  Values
against numpy on random inputs, on C and LLVM, AVX-512 and AVX2."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from cpu_targets import target_params

import uopviz as uv
from uopviz.backends.base import TargetsCPU
from uopviz.backends.target import cpu_target, using_target
from uopviz.passes.optops import heuristic
from uopviz.passes.optops.heuristic import (
    ROW_ORDER_MAX_TERMS,
    STACKED_ROWS,
    STAGE_MIN_REDUCTION,
    STAGED_MAX_ROWS,
    in_order_max_operand_bytes,
)
from uopviz.passes.optops.opts import OptOp
from uopviz.passes.optops.staging import (
    HOISTED_MIN_REUSE,
    HOISTED_MIN_ROWS,
    STAGE_EVERY_OTHER_MIN_ROWS,
    STAGE_LONG_MIN_ROWS,
    STAGE_LONG_MIN_STRIDE_BYTES,
)

RNG = np.random.default_rng(26)
CPU_BACKENDS = [b for b in ("c", "llvm") if b in uv.backends.available()]


MiB, KiB = 1 << 20, 1 << 10


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("target", target_params("x86-64-v4", "x86-64-v3"))
@pytest.mark.parametrize(
    "m,k,n,l2,in_order",
    # three cases in the emulated CPUs' runs (qemu takes ~10 s a case); all of them in `make test`
    [(128, 64, 1024, 2 * MiB, True), (256, 1024, 512, 2 * MiB, False), (256, 64, 3136, 512 * KiB, False),
     *(pytest.param(*case, marks=pytest.mark.slow) for case in
       [(256, 64, 3136, 2 * MiB, True), (512, 128, 784, 2 * MiB, True), (256, 512, 3136, 2 * MiB, False),
        (64, 64, 512, 512 * KiB, True), (128, 64, 1024, 512 * KiB, False),
        (512, 128, 784, 512 * KiB, True)])],
)  # fmt: skip
def test_a_short_reduction_keeps_its_output_loops_in_order(
    monkeypatch, backend, target, m, k, n, l2, in_order
):
    monkeypatch.setattr(TargetsCPU, "l2_bytes", property(lambda self: l2))
    # the order staging picks, not the cores' split (test_heuristic_threads): a matmul of 4 FLOPs a
    # byte would have its cores split the columns, whose SWAP moves them outermost
    monkeypatch.setattr(heuristic, "MEMORY_BOUND_FLOPS_PER_BYTE", 0)
    monkeypatch.setattr(heuristic, "COMPUTE_BOUND_LEAST_READ_MAX_SHARE", 0)
    fits = 4 * k * (m + n) <= in_order_max_operand_bytes(uv.backends.get(backend))
    assert (k < STAGE_MIN_REDUCTION and (fits or m > STAGED_MAX_ROWS)) == in_order
    a = RNG.standard_normal((m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    with using_target(target):
        program = uv.compile([uv.Tensor(a) @ uv.Tensor(b)], backend=backend, opts="heuristic")
        (result,) = program.run()
    np.testing.assert_allclose(result, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-3)
    (kernel,) = program.kernels
    swapped = any(opt.op is OptOp.SWAP for opt in kernel.opts)
    assert swapped != in_order, kernel.opts
    if in_order:
        assert "acc0[" not in kernel.source("c")  # nothing staged: the rows are read where they are


def test_the_target_profile_reads_a_cores_l2_cache():
    """The L2 size the loop order reads is the host's, in every target profile, and shown to people."""
    target = cpu_target()
    assert 64 * KiB <= target.l2_bytes <= 64 * MiB
    assert f"{target.l2_bytes >> 10} KiB L2" in target.describe()
    assert target.to_json()["l2_bytes"] == target.l2_bytes
    with using_target("x86-64-v2"):
        assert uv.backends.get("c").l2_bytes == target.l2_bytes


def test_the_target_profile_reads_a_cores_l1_data_cache():
    """The L1 size the register tiles read is the host's data cache (not its instruction cache),
    in every target profile, and shown to people."""
    target = cpu_target()
    assert 16 * KiB <= target.l1_bytes <= 256 * KiB < target.l2_bytes
    assert f"{target.l1_bytes >> 10} KiB L1" in target.describe()
    assert target.to_json()["l1_bytes"] == target.l1_bytes
    with using_target("x86-64-v2"):
        assert uv.backends.get("llvm").l1_bytes == target.l1_bytes


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize(
    "cin,cout,size,staged",
    [(1024, 256, 14, True), (528, 160, 14, True),  # long strips of 7-position rows, 784 bytes apart
     (256, 1024, 14, False), (384, 96, 14, False)],  # fewer than STAGE_LONG_MIN_ROWS channels
)  # fmt: skip
def test_a_1x1_convolution_at_14x14_stages_its_long_strips(backend, cin, cout, size, staged):
    """A 1x1 convolution reading rows of 7 positions (28 bytes) from 512 or more channels 784 bytes
    apart copies its strip into a contiguous buffer (staging.STAGE_LONG_MIN_STRIDE_BYTES); shorter
    strips are read in place.  Values against numpy in float64."""
    x = RNG.standard_normal((1, cin, size, size)).astype(np.float32)
    w = RNG.standard_normal((cout, cin, 1, 1)).astype(np.float32)
    assert (cin >= STAGE_LONG_MIN_ROWS and size * size * 4 >= STAGE_LONG_MIN_STRIDE_BYTES) == staged
    program = uv.compile([uv.Tensor(x).conv2d(uv.Tensor(w))], backend=backend, opts="heuristic")
    (result,) = program.run()
    expected = np.einsum("oc,nchw->nohw", w[:, :, 0, 0].astype(np.float64), x.astype(np.float64))
    np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-3 * np.sqrt(cin))
    (kernel,) = program.kernels
    assert ("acc0[" in kernel.source("c")) == staged, kernel.name


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize(
    "cin,cout,kernel_size,hoisted",
    [(2048, 512, 1, True), (512, 2048, 1, True), (960, 320, 1, True),  # ResNet-50's, MobileNet-v2's
     (832, 32, 1, False),  # 2 channel groups a core: too little reuse for the copy
     (128, 512, 1, False),  # fewer than HOISTED_MIN_ROWS terms
     (512, 512, 3, False)],  # a filter window: the copy would repeat each position 9 times
)  # fmt: skip
@pytest.mark.parametrize("target", target_params("x86-64-v3"))  # AVX2's 7 x 8 tiles, where measured
def test_a_1x1_convolution_at_7x7_stages_its_whole_plane_before_the_channel_groups(
    backend, target, cin, cout, kernel_size, hoisted
):
    """A 1x1 convolution at 7x7 whose channel groups run outside its positions reads 7 positions (28
    bytes) of a cache line for each input channel, once per group: the whole plane is copied first,
    before the groups' loop, then read contiguously (staging._hoisted_outputs); not with few
    groups, a short reduction or a filter window.  Values against numpy in float64."""
    x = RNG.standard_normal((1, cin, 7, 7)).astype(np.float32)
    w = RNG.standard_normal((cout, cin, kernel_size, kernel_size)).astype(np.float32)
    with using_target(target):
        program = uv.compile([uv.Tensor(x).conv2d(uv.Tensor(w), padding=kernel_size // 2)], backend=backend,
                             opts="heuristic")
        (result,) = program.run()
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (kernel_size // 2,) * 2, (kernel_size // 2,) * 2))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (kernel_size, kernel_size), axis=(2, 3))
    expected = np.einsum("ocij,nchwij->nohw", w.astype(np.float64), windows)
    np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-3 * np.sqrt(cin * kernel_size**2))
    kernel = program.kernels[-1]
    source = kernel.source("c")
    copied = "acc0[" in source and source.index("acc0[") < source.index("#pragma omp parallel")
    assert copied == hoisted, (kernel.name, kernel.opts)
    assert hoisted == (cin >= HOISTED_MIN_ROWS and cout // 16 >= HOISTED_MIN_REUSE and kernel_size == 1)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("target", target_params("x86-64-v3"))
@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_a_7x7_plane_of_other_dtypes_is_copied_with_its_values(backend, target, dtype):
    """The whole-plane copy for 8- and 2-byte elements (rows of 56 and 14 bytes: the float64 plane's
    rows are too wide to be copied, the float16 one's are)."""
    x = RNG.standard_normal((1, 512, 7, 7)).astype(dtype)
    w = (RNG.standard_normal((320, 512, 1, 1)) / 16).astype(dtype)
    with using_target(target):
        program = uv.compile([uv.Tensor(x).conv2d(uv.Tensor(w))], backend=backend, opts="heuristic")
        (result,) = program.run()
    expected = np.einsum("oc,nchw->nohw", w[:, :, 0, 0].astype(np.float64), x.astype(np.float64))
    tolerance = 1e-9 if dtype == np.float64 else 0.1
    np.testing.assert_allclose(result.astype(np.float64), expected, rtol=tolerance, atol=tolerance)
    source = program.kernels[-1].source("c")
    copied = "acc0[" in source and source.index("acc0[") < source.index("#pragma omp parallel")
    assert copied == (dtype == np.float16), program.kernels[-1].name


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("target", target_params("x86-64-v3"))
def test_an_expand_conv_fused_with_its_strided_projection_at_7x7_hoists_both_strips(backend, target):
    """ResNet-50's last block's first expand conv (512 -> 2048 at 7x7) fused with its stride-2
    projection (1024 -> 2048 from 14x14): the heuristic keeps the channel groups outside the
    positions, where both strips (the 7x7 plane and every other position of the 14x14 one) are
    copied before them.  Values against numpy in float64."""
    x = RNG.standard_normal((1, 512, 7, 7)).astype(np.float32)
    y = RNG.standard_normal((1, 1024, 14, 14)).astype(np.float32)
    w = RNG.standard_normal((2048, 512, 1, 1)).astype(np.float32)
    v = RNG.standard_normal((2048, 1024, 1, 1)).astype(np.float32)
    fused = uv.Tensor(x).conv2d(uv.Tensor(w)) + uv.Tensor(y).conv2d(uv.Tensor(v), stride=2)
    with using_target(target):
        program = uv.compile([fused], backend=backend, opts="heuristic")
        (result,) = program.run()
    expected = np.einsum("oc,nchw->nohw", w[:, :, 0, 0].astype(np.float64), x.astype(np.float64))
    strided = y[:, :, ::2, ::2].astype(np.float64)
    expected += np.einsum("oc,nchw->nohw", v[:, :, 0, 0].astype(np.float64), strided)
    np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-3 * np.sqrt(1536))
    (kernel,) = program.kernels
    source = kernel.source("c")
    parallel = source.index("#pragma omp parallel")
    assert 0 < source.index("acc0[") < parallel and 0 < source.index("acc1[") < parallel, kernel.name


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize(
    "batch,cin,cout,size",
    [(4, 512, 128, 28), (8, 1024, 256, 14), pytest.param(2, 256, 64, 56, marks=pytest.mark.slow)],
)
def test_a_batch_of_images_keeps_its_rows_outside_its_column_strips(
    monkeypatch, backend, batch, cin, cout, size
):
    """A staged 1x1 convolution of a batch moves its channel tiles inside the image's rows and
    column strips without reversing those two (heuristic._swapped_with_next): the loops run batch,
    rows, column strips, channel tiles, as they do for one image, so each output row is finished
    a strip after another.  One SWAP of channels and columns had put the strips outside the rows
    (ResNet-50 at batch 8, C, AVX2: those convolutions 0.89-0.98x with the rows outside).  Two
    cores, as CI has, so the batch is what the threads split; values against numpy in float64."""
    monkeypatch.setattr(TargetsCPU, "thread_count", property(lambda self: 2))
    x = RNG.standard_normal((batch, cin, size, size)).astype(np.float32)
    w = RNG.standard_normal((cout, cin, 1, 1)).astype(np.float32)
    program = uv.compile([uv.Tensor(x).conv2d(uv.Tensor(w))], backend=backend, opts="heuristic")
    (result,) = program.run()
    expected = np.einsum("oc,nchw->nohw", w[:, :, 0, 0].astype(np.float64), x.astype(np.float64))
    np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-3 * np.sqrt(cin))
    (kernel,) = program.kernels
    source = kernel.source("c")
    assert "acc0[" in source, kernel.name  # the strip is staged
    bounds = [int(b) for b in re.findall(r"ridx\d+ < (\d+); ridx\d+\+\+\) \{  // (?:GLOBAL|THREAD)", source)]
    # rows of one register of columns (56 on AVX2) are stacked in pairs (STACKED_ROWS)
    rows = bounds.index(size) if size in bounds else bounds.index(size // STACKED_ROWS)
    assert math.prod(bounds[:rows]) == batch, (kernel.name, bounds)  # the batch, then the rows


EXPAND_THEN_DEPTHWISE = """
version 1.0;

graph block( x ) -> ( y )
{{
    x = external<scalar>(shape = [{batch}, {channels}, 56, 56]);
    w = variable<scalar>(shape = [96, {channels}, 1, 1], label = 'w');
    d = variable<scalar>(shape = [96, 1, 3, 3], label = 'd');
    h = conv(x, w);
    y = conv(h, d, groups = 0, padding = [(1, 1), (1, 1)]);
}}
"""


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("target", target_params("x86-64-v3"))
@pytest.mark.parametrize("batch,channels,row_order", [(8, 16, True), (8, 64, False), (1, 16, False)])
def test_a_batch_s_conv_of_few_channels_keeps_its_channels_inside_the_rows(
    monkeypatch, backend, target, batch, channels, row_order
):
    # MobileNet-v2's expand convs at batch 8 (16 or 24 input channels, written into the padded
    # buffer the depthwise conv reads, so rows and columns stay two loops): the channel tiles go
    # inside the rows but outside the column tiles (each channel's row written whole) instead of
    # innermost (staged); from 32 channels, and at batch 1, the order is the staged one or in order
    from uopviz.nnef.nnef1.loader import loads_nnef1

    monkeypatch.setattr(TargetsCPU, "thread_count", property(lambda self: 2))
    x = RNG.standard_normal((batch, channels, 56, 56)).astype(np.float32)
    w = RNG.standard_normal((96, channels, 1, 1)).astype(np.float32)
    d = RNG.standard_normal((96, 1, 3, 3)).astype(np.float32)
    text = EXPAND_THEN_DEPTHWISE.format(batch=batch, channels=channels)
    graph = loads_nnef1(text, variables={"w": w, "d": d})
    with using_target(target):
        program = graph.compile(backend, opts="heuristic", progress=False)
        result = graph.run({"x": x}, backend=backend, opts="heuristic")["y"]
    h = np.einsum("oc,nchw->nohw", w[:, :, 0, 0].astype(np.float64), x)
    h = np.pad(h, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(h, (3, 3), axis=(2, 3))
    expected = np.einsum("nchwij,cij->nchw", windows, d[:, 0].astype(np.float64))
    np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-3 * np.sqrt(channels))
    (expand,) = [k for k in program.kernels if any(size == channels and kind is uv.AxisType.REDUCE
                                                   for size, kind in k.axes)]
    globals_ = [size for size, kind in expand.axes if kind is uv.AxisType.GLOBAL]
    # from 64 channels two rows are stacked in the register tile (STACKED_ROWS): 28 pairs of rows
    rows = globals_.index(56) if 56 in globals_ else globals_.index(56 // STACKED_ROWS)
    inside_rows = globals_[rows + 1:]  # the channel tiles (96 / 8 = 12) and the column tiles (7)
    assert channels < ROW_ORDER_MAX_TERMS or not row_order
    assert (inside_rows == [12, 7]) == row_order, expand.name


PROJECTION_AND_EXPAND = """
version 1.0;

graph block( x, a ) -> ( y )
{{
    x = external<scalar>(shape = [1, {channels}, {size}, {size}]);
    a = external<scalar>(shape = [1, 256, {half}, {half}]);
    w = variable<scalar>(shape = [{outputs}, 256, 1, 1], label = 'w');
    p = variable<scalar>(shape = [{outputs}, {channels}, 1, 1], label = 'p');
    e = conv(a, w);
    s = conv(x, p, stride = [2, 2]);
    y = relu(add(e, s));
}}
"""


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("target", target_params("x86-64-v3", "x86-64-v4"))
@pytest.mark.parametrize("channels,size", [(512, 28), (1024, 14), (128, 28)])
def test_a_strided_projection_stages_every_other_position(monkeypatch, backend, target, channels, size):
    """ResNet-50's bottleneck end: the expand conv and the stride-2 projection of the block's input,
    summed in one kernel of two reductions.  The projection reads every other position of rows
    far apart (a channel's 28x28 or 14x14 plane): its strip is copied into a contiguous buffer
    (staging.STAGED_ROW_STEPS) and the channel tiles run inside the rows, so each copied strip
    serves every channel tile (C, AVX2, 2 cores, each kernel in the model: 14x14 3.7 -> 2.6 ms).
    At 7x7 the channel tiles run outside the 7 rows, each core's share of them outermost, and both
    strips (the 7x7 plane and every other position of the 14x14 one) are copied whole before them
    (staging._hoisted_outputs; 3.9 -> 2.5 ms), not the rows padded to 8 for the cores.
    A projection of fewer channels (STAGE_EVERY_OTHER_MIN_ROWS, ResNet-18's) is read in place.
    The output channels are ResNet-50's (twice the input's): with 512 at 7x7, AVX-512's tiles of 32
    channels left each core 8 groups, under staging.HOISTED_MIN_REUSE (the model's have 32).
    Values against numpy in float64."""
    from uopviz.nnef.nnef1.loader import loads_nnef1

    monkeypatch.setattr(TargetsCPU, "thread_count", property(lambda self: 2))
    half = size // 2
    x = RNG.standard_normal((1, channels, size, size)).astype(np.float32)
    a = RNG.standard_normal((1, 256, half, half)).astype(np.float32)
    outputs = 2 * channels  # ResNet-50's: its projections double the channels
    w = RNG.standard_normal((outputs, 256, 1, 1)).astype(np.float32)
    p = RNG.standard_normal((outputs, channels, 1, 1)).astype(np.float32)
    text = PROJECTION_AND_EXPAND.format(channels=channels, size=size, half=half, outputs=outputs)
    graph = loads_nnef1(text, variables={"w": w, "p": p})
    with using_target(target):
        program = graph.compile(backend, opts="heuristic", progress=False)
        result = graph.run({"x": x, "a": a}, backend=backend, opts="heuristic")["y"]
    expand = np.einsum("oc,nchw->nohw", w[:, :, 0, 0].astype(np.float64), a)
    projection = np.einsum("oc,nchw->nohw", p[:, :, 0, 0].astype(np.float64), x[:, :, ::2, ::2])
    expected = np.maximum(expand + projection, 0.0)
    np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-3 * np.sqrt(channels + 256))
    (kernel,) = program.kernels  # the two convolutions, the sum and the relu in one kernel
    source = kernel.source("c")
    staged = channels >= STAGE_EVERY_OTHER_MIN_ROWS
    assert ("acc0[" in source) == staged, (kernel.name, kernel.opts)
    loops = re.findall(r"ridx\d+ < (\d+); ridx\d+\+\+\) \{  // (GLOBAL|THREAD)", source)
    assert loops[0] == ("2", "THREAD"), loops  # one parallel region, the cores' shares outermost
    assert not any(opt.op is OptOp.PADTO for opt in kernel.opts), kernel.opts
    extents = [int(extent) for extent, _ in loops]
    # the channel tiles: 8 channels on AVX2, 32 on AVX-512 (the kernel's last UPCAST)
    tiles = outputs // int(re.findall(r"_u(\d+)$", kernel.name)[0])
    if staged and half == 7:  # both strips copied whole before the channel tiles, the 7 rows inside
        parallel = source.index("#pragma omp parallel")
        assert extents[-2:] == [tiles // 2, 7] and source.index("acc1[") < parallel, (kernel.name, loops)
    elif staged:  # the positions outside the channel tiles (all of them, or each core's half)
        assert extents[-1] in (tiles // 2, tiles), (kernel.name, loops)
