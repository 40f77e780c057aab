"""The heuristic's CPU threads and row tiles: every core gets work when the outermost output axis is
a count the cores do not divide (the next axis they divide is split, else the axis is padded to a
multiple of the cores, its loads clamped, not gated); tiny kernels stay on one core; a kernel with
no second axis to tile (a depthwise conv) upcasts whole rows of output."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_targets import target_params

import uopviz as uv
from uopviz.backends.target import using_target
from uopviz.core.ops import Ops
from uopviz.passes.optops import heuristic
from uopviz.passes.optops.axes import depends_on
from uopviz.passes.optops.heuristic import MIN_THREADED_ITERATIONS, PAIRED_OUTPUT_ROWS

RNG = np.random.default_rng(23)
CPU_BACKENDS = [b for b in ("c", "llvm") if b in uv.backends.available()]


def _threads(kernel) -> list[int]:
    return [size for size, kind in kernel.axes if kind is uv.AxisType.THREAD]


@pytest.mark.skipif(
    "c" not in uv.backends.available(), reason="the heuristic's CPU threads need the C backend"
)
def test_heuristic_threads_a_kernel_whose_outer_tile_count_the_cores_do_not_divide():
    # 28 rows tiled by 4 leave an outer 7 that two cores do not divide: the next output axis (64
    # columns in two tiles of 32) is split over the cores instead of everything running on one
    a = RNG.standard_normal((28, 64)).astype(np.float32)
    b = RNG.standard_normal((64, 64)).astype(np.float32)
    program = uv.compile(uv.Tensor(a) @ uv.Tensor(b), backend="c", opts="heuristic")
    (kernel,) = program.kernels
    threads = min(kernel.backend_object.thread_count, 16)
    if threads < 2:
        pytest.skip(f"{threads} core on this machine: no THREAD axis to check")
    sizes = [size for size, kind in kernel.axes if kind is uv.AxisType.GLOBAL]
    assert 7 in sizes  # the case this is about: the row tiles' count, which two cores do not divide
    # the THREAD axis comes first: one parallel region per launch, not one per outer iteration
    assert kernel.axes[0][1] is uv.AxisType.THREAD
    np.testing.assert_allclose(program.run()[0], a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("size", [1024, MIN_THREADED_ITERATIONS // 2, 4 * MIN_THREADED_ITERATIONS])
def test_kernels_of_few_iterations_run_on_one_core(backend, size):
    x = RNG.standard_normal(size).astype(np.float32)
    program = uv.compile([uv.Tensor(x) * 2 + 1], backend=backend, opts="heuristic")
    (kernel,) = program.kernels
    cores = kernel.backend_object.thread_count
    expected = [cores] if size >= MIN_THREADED_ITERATIONS and cores > 1 else []
    assert _threads(kernel) == expected
    np.testing.assert_allclose(program.run()[0], x * 2 + 1, rtol=1e-6)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("target", target_params("native", "x86-64-v3", "x86-64-v2"))
@pytest.mark.parametrize("shape", [(125, 1280), (127, 333), (7, 9, 4099)])
def test_an_axis_no_core_count_divides_is_padded_to_share_it(backend, target, shape):
    # a row sum over an odd number of rows: padded to a multiple of the cores, the extra rows'
    # loads read the last real row (no gate inside the loops) and their stores are gated off
    x = RNG.standard_normal(shape).astype(np.float32)
    with using_target(target):
        program = uv.compile([uv.Tensor(x).sum(-1)], backend=backend, opts="heuristic")
        (kernel,) = program.kernels
        cores = kernel.backend_object.thread_count
        np.testing.assert_allclose(program.run()[0], x.sum(-1), rtol=1e-4, atol=1e-4)
    if cores < 2:
        pytest.skip("the CPU target has one core: nothing to share")
    assert _threads(kernel) == [cores]
    nodes = kernel.ast.toposort()  # the kernel with its opts applied
    assert not any(u.op is Ops.LOAD and len(u.src) == 3 for u in nodes)
    assert any(u.op is Ops.STORE and len(u.src) == 3 for u in nodes)


@pytest.mark.parametrize("backend", ["python", *CPU_BACKENDS])
@pytest.mark.parametrize("axis_type", [uv.AxisType.GLOBAL, uv.AxisType.UPCAST])
def test_padto_clamps_output_axes_and_gates_lanes(backend, axis_type):
    x = RNG.standard_normal((7, 12)).astype(np.float32)
    if axis_type is uv.AxisType.GLOBAL:
        opts = [uv.Opt(uv.OptOp.PADTO, 0, 4)]
    else:
        opts = [uv.Opt(uv.OptOp.SPLIT, 0, (7, uv.AxisType.UPCAST, False)), uv.Opt(uv.OptOp.PADTO, 1, 8)]
    program = uv.compile([uv.Tensor(x).exp() + 1], backend=backend, opts=[opts])
    np.testing.assert_allclose(program.run()[0], np.exp(x) + 1, rtol=1e-5)
    kernel = program.kernels[0]
    gated = [u for u in kernel.ast.toposort() if u.op is Ops.LOAD and len(u.src) == 3]
    assert bool(gated) == (axis_type is uv.AxisType.UPCAST)  # a clamped lane would be a gather


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("channels,width", [(48, 14), (16, 28), (32, 7)])
def test_a_depthwise_conv_upcasts_whole_rows(backend, channels, width):
    # no second axis reuses a load (each channel has its own weights and input): the row is the
    # tile, whole when its even vector chunks fill the registers better than a divisor's do
    x = RNG.standard_normal((1, channels, width + 2, width + 2)).astype(np.float32)
    w = RNG.standard_normal((channels, 1, 3, 3)).astype(np.float32)
    with using_target("native") as profile:
        program = uv.compile([uv.Tensor(x).conv2d(uv.Tensor(w), groups=channels)], backend=backend,
                             opts="heuristic")
        out = program.run()[0]
    windows = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3))
    expected = np.einsum("nchwij,cij->nchw", windows, w[:, 0])
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
    upcasts = [size for size, kind in program.kernels[-1].axes if kind is uv.AxisType.UPCAST]
    lanes = profile.vector_bytes // 4
    # the whole row, or (heuristic._padded_row) the row padded to a whole register or two, where
    # that gives twice the real lanes per register op: 14 and 7 on AVX-512 and AVX2, 28 on AVX-512
    padded = 1 << (width - 1).bit_length()
    if lanes == 16 or (lanes == 8 and width < 16):
        # (two output rows a tile where the register holds a whole row: heuristic._paired_output_rows)
        assert upcasts in ([padded], [PAIRED_OUTPUT_ROWS, padded]), program.kernels[-1].name
    elif width in (14, 28) and width <= 2 * lanes:
        assert upcasts == [width], program.kernels[-1].name


def _input_split(kernel, input_elements: int) -> bool:
    """Whether the cores share the conv's input (the load of a buffer of ``input_elements`` varies
    along the THREAD axis) rather than its weights."""
    (thread,) = [r for r in kernel.ranges if r.arg[1] is uv.AxisType.THREAD]
    loads = [u for u in kernel.ast.toposort() if u.op is Ops.LOAD]
    (load,) = [u for u in loads if u.src[0].src[0].shape[0] == input_elements]
    return depends_on(load.src[0], thread)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize(
    "in_channels,out_channels,width,splits_input",
    [(64, 16, 55, True), (16, 64, 55, True), (128, 16, 27, True), (256, 512, 13, False), (96, 320, 7, False)],
)
def test_a_memory_bound_conv_splits_the_axis_that_leaves_each_core_least_to_read(
    backend, in_channels, out_channels, width, splits_input, monkeypatch
):
    # a 1x1 conv to 16 channels over 55x55 positions does 4 FLOPs per byte it reads: split over its
    # output channels each core would read the whole input; split over positions, half of it.  A
    # conv to 512 channels at 13x13 computes enough per byte to keep the first axis the cores divide
    x = RNG.standard_normal((1, in_channels, width, width)).astype(np.float32)
    w = RNG.standard_normal((out_channels, in_channels, 1, 1)).astype(np.float32)
    expected = np.maximum(np.einsum("nchw,oc->nohw", x, w[:, :, 0, 0]), 0)

    def compiled():
        graph = uv.Tensor(x).conv2d(uv.Tensor(w)).relu()
        return uv.compile([graph], backend=backend, opts="heuristic")

    program = compiled()
    np.testing.assert_allclose(program.run()[0], expected, rtol=1e-4, atol=1e-4)
    if program.kernels[-1].backend_object.thread_count < 2:
        pytest.skip("one core: nothing to split")
    assert _input_split(program.kernels[-1], x.size) == splits_input, program.kernels[-1].name


@pytest.mark.skipif(
    "c" not in uv.backends.available(), reason="the heuristic's CPU threads need the C backend"
)
def test_without_the_rule_the_cores_would_split_a_squeeze_convs_16_channels(monkeypatch):
    # on AVX-512 (16 lanes) the 16 channels are two tiles of 8: the first axis the cores divide
    # (build=False: the kernel's structure only, on any host)
    x = RNG.standard_normal((1, 64, 55, 55)).astype(np.float32)
    w = RNG.standard_normal((16, 64, 1, 1)).astype(np.float32)

    def kernel():
        with using_target("x86-64-v4"):
            graph = uv.Tensor(x).conv2d(uv.Tensor(w)).relu()
            return uv.compile([graph], backend="c", opts="heuristic", build=False).kernels[-1]

    if kernel().backend_object.thread_count < 2:
        pytest.skip("one core: nothing to split")
    assert _input_split(kernel(), x.size)
    monkeypatch.setattr(heuristic, "MEMORY_BOUND_FLOPS_PER_BYTE", 0)
    monkeypatch.setattr(heuristic, "COMPUTE_BOUND_LEAST_READ_MAX_SHARE", 0)
    assert not _input_split(kernel(), x.size)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("target", target_params("x86-64-v4", "x86-64-v3"))
@pytest.mark.parametrize(
    "in_channels,out_channels,width,window,splits_input",
    # ResNet-50's shapes: a 3x3 conv over a wide plane shares the plane (each core reads half of it,
    # the whole filter); a 1x1 conv of many channels over a small one shares the filter
    [(64, 64, 56, 3, True), (1024, 256, 14, 1, False), (1024, 512, 14, 1, False)],
)
def test_a_compute_bound_conv_splits_the_axis_each_core_reads_less_of_in_place(
    backend, target, in_channels, out_channels, width, window, splits_input, monkeypatch
):
    # the input given padded: the conv kernel alone, no padded copy before it
    x = RNG.standard_normal((1, in_channels, width + window - 1, width + window - 1)).astype(np.float32)
    w = (RNG.standard_normal((out_channels, in_channels, window, window)) / in_channels).astype(np.float32)
    windows = np.lib.stride_tricks.sliding_window_view(x, (window, window), axis=(2, 3))
    expected = np.maximum(np.einsum("nchwij,ocij->nohw", windows, w), 0)

    def compiled():
        with using_target(target):
            graph = uv.Tensor(x).conv2d(uv.Tensor(w)).relu()
            program = uv.compile([graph], backend=backend, opts="heuristic")
            return program, program.run()[0]

    program, out = compiled()
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
    kernel = program.kernels[-1]
    if kernel.backend_object.thread_count < 2:
        pytest.skip("one core: nothing to split")
    assert kernel.flops / 2 >= heuristic.MEMORY_BOUND_FLOPS_PER_BYTE * x.nbytes  # computes enough per byte
    assert _input_split(kernel, x.size) == splits_input, kernel.name
    # without the rule the cores split the first axis they divide: the output channels' tiles
    monkeypatch.setattr(heuristic, "COMPUTE_BOUND_LEAST_READ_MAX_SHARE", 0)
    program, out = compiled()
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
    assert _input_split(program.kernels[-1], x.size) != splits_input, program.kernels[-1].name


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_compute_bound_conv_with_a_short_sum_keeps_its_cores_on_the_channels(backend, monkeypatch):
    # MobileNet-v2's expand conv (16 -> 96 channels at 112x112) reads less per core split over its
    # positions, but mostly writes its output, which the depthwise conv after it reads with its
    # cores on the channels: a sum of 16 terms keeps the channel split
    x = RNG.standard_normal((1, 16, 112, 112)).astype(np.float32)
    w = (RNG.standard_normal((96, 16, 1, 1)) / 4).astype(np.float32)
    expected = np.maximum(np.einsum("nchw,oc->nohw", x, w[:, :, 0, 0]), 0)

    def kernel():
        with using_target("x86-64-v4"):
            graph = uv.Tensor(x).conv2d(uv.Tensor(w)).relu()
            program = uv.compile([graph], backend=backend, opts="heuristic")
            np.testing.assert_allclose(program.run()[0], expected, rtol=1e-4, atol=1e-4)
            return program.kernels[-1]

    found = kernel()
    if found.backend_object.thread_count < 2:
        pytest.skip("one core: nothing to split")
    assert found.flops / 2 >= heuristic.MEMORY_BOUND_FLOPS_PER_BYTE * x.nbytes
    assert not _input_split(found, x.size), found.name
    monkeypatch.setattr(heuristic, "COMPUTE_BOUND_MIN_REDUCTION_TERMS", 16)
    assert _input_split(kernel(), x.size)
