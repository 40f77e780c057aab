"""The heuristic's CPU register tile of a convolution whose output rows are narrower than a
register, or of any stride-1 convolution on a target of 16 vector registers (AVX2, SSE): the
columns are broadcast to the channels' vectors, so the tile is columns × channels with the
accumulators filling half the target's vector registers (AVX-512: 7 columns × 32 channels in 14 of
32 zmm; AVX2: 4 × 16 in 8 of 16 ymm), and the values are numpy's."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_targets import target_params

import uopviz as uv
from uopviz.backends import get
from uopviz.backends.aligned import CACHE_LINE
from uopviz.backends.base import TargetsCPU
from uopviz.backends.target import resolve_target, using_target
from uopviz.passes.optops.heuristic import (
    FIVE_ROWS,
    NARROW_OUTPUTS_MAX_TERMS_32_REGISTERS,
    PAIRED_OUTPUT_ROWS,
    PART_REGISTER_CHANNELS_MAX_PADDING,
    REGISTER_TILE_SPARE_REGISTERS,
    SHORT_REDUCTION_MAX_TERMS,
    SHORT_REDUCTION_MAX_TERMS_32_REGISTERS,
    WINDOW_ROWS_L1_SHARE,
    _broadcast_columns,
    _load_steps,
    _pads_past_a_narrow_divisor,
    _pads_to_broadcast_columns,
)
from uopviz.passes.optops.staging import HOISTED_MIN_ROWS

RNG = np.random.default_rng(25)
CPU_BACKENDS = [b for b in ("c", "llvm") if b in uv.backends.available()]


def _conv_reference(x: np.ndarray, w: np.ndarray, stride: int, groups: int) -> np.ndarray:
    """The convolution (padding 1 already in ``x``) in float64 by numpy."""
    k = w.shape[-1]
    windows = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), (k, k), axis=(2, 3))
    windows = windows[:, :, ::stride, ::stride]
    n, c, h, wd = windows.shape[:4]
    grouped = windows.reshape(n, groups, c // groups, h, wd, k, k)
    filters = w.astype(np.float64).reshape(groups, w.shape[0] // groups, c // groups, k, k)
    out = np.einsum("ngchwij,gocij->ngohw", grouped, filters)
    return out.reshape(n, w.shape[0], h, wd)


@pytest.mark.parametrize(
    "size,lanes,accumulators,columns",
    [
        (28, 16, 16, 7),  # AVX-512: 7 columns, two registers of channels each
        (56, 16, 16, 8),
        (14, 16, 16, 7),
        (7, 16, 16, 7),
        (28, 8, 8, 4),  # AVX2: within 8 accumulators, 4 columns of two ymm
        (14, 8, 8, 7),  # no divisor within: the smallest under a register, one ymm of channels
        (14, 4, 8, None),  # SSE: no divisor between 2 and a register's 4 lanes
        (11, 16, 16, 11),  # a prime under a register's lanes: the whole row, one register of channels
        (17, 16, 16, None),  # a prime wider than the register's lanes
    ],
)
def test_broadcast_columns_leave_two_channel_registers_per_column(size, lanes, accumulators, columns):
    assert _broadcast_columns(size, lanes, accumulators) == columns


@pytest.mark.parametrize(
    "size,columns,terms,channels,padded",
    [
        (55, 5, 144, 64, True),  # 5 columns take one ymm of channels each; 56 as 4 x 16
        (3025, 5, 64, 16, True),  # a 1x1 conv's 55x55 positions from 64 channels
        (3025, 5, 16, 64, False),  # ... but not from 16: the gated stores weigh more
        (27, 3, 288, 128, True),  # 3 columns fill 6 of 8 accumulators; 28 as 4 x 16
        (729, 3, 32, 128, False),  # a short reduction keeps them
        (169, None, 256, 64, True),  # a 1x1 conv's 13x13 positions, a long reduction: 172 as 4 x 16
        (169, None, 64, 256, False),  # a short one keeps a register of positions
        (169, None, 512, 1000, False),  # 1000 channels: 4 columns x 8 channels would fill 4
        (49, 7, 512, 2048, False),  # 7 columns of one register fill 7 of 8
        (111, 3, 147, 64, True),  # 0.9 % padding (a stride-2 row is kept exact by the caller)
        (56, 4, 576, 64, False),  # a divisor fills them
        (14, 7, 576, 64, False),  # 16 would pad 14 %
        (13, None, 576, 64, False),  # 23 %: the row of a prime is padded by _padded_columns instead
        (55, 5, 144, None, False),  # no second axis known (a grouped conv's)
    ],
)
def test_a_row_is_padded_to_broadcast_columns_that_fill_the_accumulators(
    size, columns, terms, channels, padded
):
    # AVX2: 8 lanes, 8 accumulators
    assert _pads_to_broadcast_columns(size, columns, 8, 8, terms, channels) == padded
    # SSE: 4 columns are a whole register of 4 lanes, not broadcast
    assert not _pads_to_broadcast_columns(size, columns, 4, 8, terms, channels)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("target", target_params("x86-64-v3", "x86-64-v2"))
@pytest.mark.parametrize("width,stride", [(55, 1), (27, 1), (27, 2)])
def test_a_conv_row_of_55_or_27_is_padded_to_4_columns_on_avx2(backend, target, width, stride):
    # SqueezeNet-1.1's 3x3 convs at 55x55 and 27x27 (AlexNet's 5x5 at 27x27): 4 columns x 16
    # channels over the row padded to 56 or 28 (its last columns' loads and stores gated off), not
    # 5 columns x 8 channels or 3 x 16; a stride-2 row keeps its exact divisor, and SSE (4 columns
    # would be a whole register) its own tile
    x = RNG.standard_normal((1, 16, width + 2, width + 2)).astype(np.float32)
    w = RNG.standard_normal((32, 16, 3, 3)).astype(np.float32)
    with using_target(target) as profile:
        out = uv.Tensor(x).conv2d(uv.Tensor(w), stride=stride)
        program = uv.compile([out], backend=backend, opts="heuristic")
        result = program.run()[0]
    np.testing.assert_allclose(result, _conv_reference(x, w, stride, 1), rtol=1e-4, atol=1e-4)
    (kernel,) = [k for k in program.kernels if any(t is uv.AxisType.REDUCE for _, t in k.axes)]
    out_width = (width - 1) // stride + 1
    padded = profile.vector_bytes == 32 and stride == 1
    globals_ = [size for size, kind in kernel.axes if kind is uv.AxisType.GLOBAL]
    if padded:
        assert _upcasts(kernel) == [4, 16] and -(-out_width // 4) in globals_, kernel.name
    else:
        assert all(out_width % size == 0 for size in _upcasts(kernel) if size < 8), kernel.name


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("target", target_params("x86-64-v4"))
@pytest.mark.parametrize("width,padded", [(55, True), (27, False)])
def test_a_conv_row_of_55_is_padded_to_8_columns_on_avx512(backend, target, width, padded):
    # SqueezeNet-1.1's 3x3 convs at 55x55 on AVX-512's 32 registers: 8 columns x 32 channels (16
    # accumulators) over the row padded to 56, not 5 columns x 32 channels; a row of 27 keeps its
    # divisor (32 would pad it by 18 %, more than BROADCAST_ROW_MAX_PADDING)
    x = RNG.standard_normal((1, 16, width + 2, width + 2)).astype(np.float32)
    w = RNG.standard_normal((64, 16, 3, 3)).astype(np.float32)
    with using_target(target):
        program = uv.compile([uv.Tensor(x).conv2d(uv.Tensor(w))], backend=backend, opts="heuristic")
        result = program.run()[0]
    np.testing.assert_allclose(result, _conv_reference(x, w, 1, 1), rtol=1e-4, atol=1e-4)
    (kernel,) = [k for k in program.kernels if any(t is uv.AxisType.REDUCE for _, t in k.axes)]
    globals_ = [size for size, kind in kernel.axes if kind is uv.AxisType.GLOBAL]
    assert (_upcasts(kernel) == [8, 32] and -(-width // 8) in globals_) == padded, kernel.name
    assert all(width % size == 0 for size in _upcasts(kernel) if size < 16) != padded, kernel.name


ONE_BY_ONE = """
version 1.0;

graph pointwise( x ) -> ( y )
{{
    x = external<scalar>(shape = [1, {channels}, {width}, {width}]);
    w = variable<scalar>(shape = [{outputs}, {channels}, 1, 1], label = 'w');
    y = conv(x, w);
}}
"""


def _one_by_one_kernel(backend: str, target, width: int, channels: int, outputs: int):
    """The conv kernel of an NNEF 1x1 conv graph (``ONE_BY_ONE``) compiled for ``target``, after
    checking its values on random inputs against numpy."""
    from uopviz.nnef.nnef1.loader import loads_nnef1

    x = RNG.standard_normal((1, channels, width, width)).astype(np.float32)
    w = RNG.standard_normal((outputs, channels, 1, 1)).astype(np.float32)
    text = ONE_BY_ONE.format(channels=channels, width=width, outputs=outputs)
    graph = loads_nnef1(text, variables={"w": w})
    with using_target(target):
        program = graph.compile(backend, opts="heuristic", progress=False)
        result = graph.run({"x": x}, backend=backend, opts="heuristic")["y"]
    np.testing.assert_allclose(result, _conv_reference(x, w, 1, 1), rtol=1e-4, atol=1e-4)
    (kernel,) = [k for k in program.kernels if any(t is uv.AxisType.REDUCE for _, t in k.axes)]
    return kernel


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("target", target_params("x86-64-v3"))
@pytest.mark.parametrize(
    "width,channels,padded", [(55, 64, True), (55, 16, False), (13, 256, True), (13, 48, False)]
)
def test_a_1x1_conv_of_odd_positions_is_padded_to_4_columns_on_avx2(backend, target, width, channels, padded):
    # SqueezeNet-1.1's 1x1 convs: 55x55 = 3025 positions from 64 channels (5 columns x 8 channels
    # before) and 13x13 from 256 as 4 columns x 16 channels over 3028 and 172 positions; from 48
    # channels at 13x13 it keeps its tile (a short reduction: the padded tile's gated stores weigh
    # more), from 16 at 55x55 its positions go into registers (the next test)
    kernel = _one_by_one_kernel(backend, target, width, channels, 32)
    positions = width * width
    globals_ = {size for size, kind in kernel.axes if kind is uv.AxisType.GLOBAL}
    threads = {size for size, kind in kernel.axes if kind is uv.AxisType.THREAD}
    # 4-column tiles over the padded positions: an axis of them, or one the cores split (757 -> 758)
    tiles = -(-positions // 4)
    split = {size * cores for size in globals_ for cores in threads}
    column_tiles = tiles in globals_ or bool({tiles, tiles + 1} & split)
    assert (_upcasts(kernel) == [4, 16] and column_tiles) == padded, kernel.name


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("target", target_params("x86-64-v4", "x86-64-v3", "x86-64-v2"))
@pytest.mark.parametrize(
    "width,channels,outputs,tiled,tiled_on_avx512",
    [(55, 16, 64, True, True), (27, 32, 128, True, True), (27, 16, 40, True, True),
     (55, 64, 64, False, True), (27, 48, 64, False, True), (55, 96, 64, False, False)],
)
def test_a_1x1_conv_of_a_short_reduction_takes_its_positions_as_two_registers(
    backend, target, width, channels, outputs, tiled, tiled_on_avx512
):
    # SqueezeNet-1.1's 1x1 expand convs from 16 channels at 55x55 and 32 at 27x27: their positions
    # (3025, 729) padded to two registers of lanes, on AVX2 (3040, 736) by 4 channel rows (5 where 5
    # divides the channels), on AVX-512 (3040, 736 as 32 lanes) by 8, not 5 or 3 broadcast columns by
    # 8 to 32 channels stored lane by lane; on AVX2 not from 48 or 64 channels (broadcast columns, the
    # test above), on AVX-512 from up to 64 (SHORT_REDUCTION_MAX_TERMS_32_REGISTERS); not on SSE's 4
    # lanes
    kernel = _one_by_one_kernel(backend, target, width, channels, outputs)
    vector_bytes = resolve_target(target).vector_bytes
    width_lanes = 2 * vector_bytes // 4
    padded = -(-(width * width) // width_lanes) * width_lanes
    globals_ = [size for size, kind in kernel.axes if kind in (uv.AxisType.GLOBAL, uv.AxisType.THREAD)]
    rows = (5 if outputs % 5 == 0 else 4) if vector_bytes == 32 else 8
    expected = (tiled_on_avx512 if vector_bytes == 64 else tiled) and vector_bytes >= 32
    # the tiles of positions are a global axis, or two threads' halves of it (40 channels / 8 rows)
    tiles = padded // width_lanes
    tile = sorted(_upcasts(kernel)) == sorted([width_lanes, rows]) and (
        tiles in globals_ or -(-tiles // 2) in globals_)
    assert tile == expected, kernel.name


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("target", target_params("x86-64-v4", "x86-64-v3"))
@pytest.mark.parametrize(
    "width,channels,outputs,tiled_on_avx512",
    [(55, 64, 16, True), (55, 128, 16, True), (55, 256, 16, True), (55, 128, 32, False),
     (27, 256, 32, False)],
)
def test_a_squeeze_conv_takes_its_positions_as_two_registers_on_avx512_only(
    backend, target, width, channels, outputs, tiled_on_avx512
):
    # SqueezeNet-1.1's squeeze convs (64 and 128 terms to 16 channels, more terms than
    # SHORT_REDUCTION_MAX_TERMS): on AVX-512's 32 registers 8 channel rows x 32 positions, up to
    # NARROW_OUTPUTS_MAX_TERMS_32_REGISTERS terms for outputs of one register; to 32 channels beyond
    # SHORT_REDUCTION_MAX_TERMS_32_REGISTERS they keep broadcast columns (8 x 32 channels, whole
    # registers); on AVX2 broadcast columns (padded positions measured 1.0-1.56x slower there)
    kernel = _one_by_one_kernel(backend, target, width, channels, outputs)
    profile = resolve_target(target)
    width_lanes = 2 * profile.vector_bytes // 4
    tiles = -(-(width * width) // width_lanes)  # the padded positions' tiles, a global axis (or halves)
    globals_ = [size for size, kind in kernel.axes if kind in (uv.AxisType.GLOBAL, uv.AxisType.THREAD)]
    tile = sorted(_upcasts(kernel)) == sorted([width_lanes, 8]) and (
        tiles in globals_ or -(-tiles // 2) in globals_)
    assert tile == (tiled_on_avx512 and profile.vector_registers >= 32), kernel.name
    assert SHORT_REDUCTION_MAX_TERMS < channels <= NARROW_OUTPUTS_MAX_TERMS_32_REGISTERS
    assert (channels <= SHORT_REDUCTION_MAX_TERMS_32_REGISTERS or outputs <= 16) == tiled_on_avx512


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("target", target_params("x86-64-v4"))
@pytest.mark.parametrize("width,channels,outputs,padded", [(13, 512, 1000, True), (13, 128, 40, True),
                                                           (13, 512, 64, False), (7, 256, 1000, False)])
def test_channels_of_no_whole_register_take_the_positions_as_lanes_on_avx512(
    backend, target, width, channels, outputs, padded
):
    # SqueezeNet-1.1's classifier (1000 channels: no whole zmm divides them) takes 8 channel rows x
    # 32 positions, its 169 positions padded to 192 (_positions_for_part_register_channels), not 13
    # broadcast columns x 8 channels; 64 channels (whole registers) keep their broadcast columns, a
    # 7x7 plane (49 -> 64) pads too much (PART_REGISTER_CHANNELS_MAX_PADDING).  AVX2's 16 registers
    # tile such planes as positions already (16 positions x 5 channels, section 19 of
    # docs/design/cpu-conv-layout.md)
    kernel = _one_by_one_kernel(backend, target, width, channels, outputs)
    profile = resolve_target(target)
    width_lanes = 2 * profile.vector_bytes // 4
    positions = width * width
    tiles = -(-positions // width_lanes)
    globals_ = [size for size, kind in kernel.axes if kind in (uv.AxisType.GLOBAL, uv.AxisType.THREAD)]
    tile = width_lanes in _upcasts(kernel) and (tiles in globals_ or -(-tiles // 2) in globals_)
    assert tile == padded, kernel.name
    if tile:
        assert tiles * width_lanes - positions <= positions * PART_REGISTER_CHANNELS_MAX_PADDING


def _upcasts(kernel) -> list[int]:
    return [size for size, kind in kernel.axes if kind is uv.AxisType.UPCAST]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("target", target_params("x86-64-v4", "x86-64-v3", "x86-64-v2"))
@pytest.mark.parametrize(
    "channels,width,stride,groups",
    [(64, 28, 1, 1), (64, 14, 1, 1), (64, 7, 1, 1), (64, 56, 1, 1), (64, 28, 2, 1), (128, 14, 1, 2),
     (32, 112, 1, 1)],
)
def test_a_conv_tile_fills_half_the_registers_and_gives_numpys_values(
    backend, target, channels, width, stride, groups
):
    x = RNG.standard_normal((1, channels, width + 2, width + 2)).astype(np.float32)
    w = RNG.standard_normal((channels, channels // groups, 3, 3)).astype(np.float32)
    with using_target(target):
        out = uv.Tensor(x).conv2d(uv.Tensor(w), stride=stride, groups=groups)
        program = uv.compile([out], backend=backend, opts="heuristic")
        result = program.run()[0]
    np.testing.assert_allclose(result, _conv_reference(x, w, stride, groups), rtol=1e-4, atol=1e-4)
    profile = resolve_target(target)
    lanes, half = profile.vector_bytes // 4, profile.vector_registers // 2
    (kernel,) = [k for k in program.kernels if any(t is uv.AxisType.REDUCE for _, t in k.axes)]
    tile = _upcasts(kernel)
    out_width = (width - 1) // stride + 1
    columns = _broadcast_columns(out_width, lanes, half)
    broadcast = profile.vector_registers <= 16 and stride == 1  # 16 registers: any sliding window
    if columns is None or (out_width % lanes == 0 and not broadcast):
        return  # rows of whole registers (gemm-like) or SSE's tile: not this rule's
    # the columns broadcast to the channels' vectors; the accumulators fill at most half the
    # registers, and at least half of that (no 4 columns x 32 channels on AVX-512)
    assert tile[0] == columns, kernel.name
    globals_ = [size for size, kind in kernel.axes if kind is uv.AxisType.GLOBAL]
    # the columns' axis, not the channels' (a row as wide as the tile has no loop left)
    assert out_width == columns or out_width // columns in globals_, kernel.name
    accumulators = tile[0] * tile[1] // lanes
    with using_target(target):  # a tile the renderer writes as an assembly block: all but 2 registers
        planned = get(backend).writes_register_tiles and tile[0] < lanes
    most = profile.vector_registers - REGISTER_TILE_SPARE_REGISTERS if planned else half
    assert half // 2 < accumulators <= most, kernel.name
    if profile.vector_registers <= 16:  # the filter row stays a loop: a multiply-add per product
        assert all(kind is not uv.AxisType.UNROLL for _, kind in kernel.axes), kernel.name


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("target", target_params("x86-64-v4", "x86-64-v3"))
@pytest.mark.parametrize("channels,groups,tiled", [(128, 2, True), (64, 64, False), (32, 8, False)])
def test_only_groups_of_whole_registers_get_a_channel_block(backend, target, channels, groups, tiled):
    # 64 channels per group: blocks of a register's lanes within a group reuse the input; a
    # depthwise conv (1 per group) or 4 per group has no such block and keeps its row tile (its
    # rows and columns reuse only the weights, not a load each)
    x = RNG.standard_normal((1, channels, 16, 16)).astype(np.float32)
    w = RNG.standard_normal((channels, channels // groups, 3, 3)).astype(np.float32)
    with using_target(target):
        out = uv.Tensor(x).conv2d(uv.Tensor(w), groups=groups)
        program = uv.compile([out], backend=backend, opts="heuristic")
        result = program.run()[0]
    np.testing.assert_allclose(result, _conv_reference(x, w, 1, groups), rtol=1e-4, atol=1e-4)
    # the conv's kernel: its reduction a loop, or unrolled whole (a depthwise 3x3 window of a row of
    # one register, heuristic._unrolled_filter_rows)
    reducing = (uv.AxisType.REDUCE, uv.AxisType.UNROLL)
    (kernel,) = [k for k in program.kernels if any(t in reducing for _, t in k.axes)]
    # (a depthwise tile of a whole row takes two output rows: heuristic._paired_output_rows)
    channel_block = [size for size in _upcasts(kernel) if size != PAIRED_OUTPUT_ROWS]
    assert (len(channel_block) == 2) == tiled, kernel.name


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("target", target_params("x86-64-v4"))
@pytest.mark.parametrize("out_channels,tile", [(32, [8, 32]), (64, [8, 32])])
def test_a_conv_with_as_few_channels_as_the_tile_takes_them_all(backend, target, out_channels, tile):
    # DenseNet-121's growth convolutions: 128 -> 32 channels at 56x56; the channel axis goes whole
    # into the tile (8 columns × 32 channels, 16 of 32 zmm) instead of 8 × 16 with a loop of 2
    x = RNG.standard_normal((1, 64, 58, 58)).astype(np.float32)
    w = RNG.standard_normal((out_channels, 64, 3, 3)).astype(np.float32)
    with using_target(target):
        program = uv.compile([uv.Tensor(x).conv2d(uv.Tensor(w))], backend=backend, opts="heuristic")
        result = program.run()[0]
    np.testing.assert_allclose(result, _conv_reference(x, w, 1, 1), rtol=1e-4, atol=1e-4)
    (kernel,) = [k for k in program.kernels if any(t is uv.AxisType.REDUCE for _, t in k.axes)]
    assert _upcasts(kernel) == tile, kernel.name


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("target", target_params("x86-64-v3"))
def test_a_strided_conv_broadcasts_its_columns_and_a_matmul_keeps_whole_registers_on_avx2(backend, target):
    # ResNet's first conv (7x7, stride 2, 112 columns) slides its window too: 4 columns broadcast
    # to the channels' vectors; a matmul (its N steps a whole row along K) keeps whole ymm of N
    x = RNG.standard_normal((1, 3, 229, 229)).astype(np.float32)
    w = RNG.standard_normal((32, 3, 7, 7)).astype(np.float32)
    a = RNG.standard_normal((64, 96)).astype(np.float32)
    b = RNG.standard_normal((96, 128)).astype(np.float32)
    with using_target(target) as profile:
        lanes = profile.vector_bytes // 4
        conv = uv.compile([uv.Tensor(x).conv2d(uv.Tensor(w), stride=2)], backend=backend, opts="heuristic")
        matmul = uv.compile([uv.Tensor(a) @ uv.Tensor(b)], backend=backend, opts="heuristic")
        np.testing.assert_allclose(conv.run()[0], _conv_reference(x, w, 2, 1), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(matmul.run()[0], a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
    (conv_kernel,) = [k for k in conv.kernels if any(t is uv.AxisType.REDUCE for _, t in k.axes)]
    (matmul_kernel,) = [k for k in matmul.kernels if any(t is uv.AxisType.REDUCE for _, t in k.axes)]
    columns = _broadcast_columns(112, lanes, profile.vector_registers // 2)
    assert _upcasts(conv_kernel)[0] == columns, conv_kernel.name
    assert 112 // columns in [size for size, kind in conv_kernel.axes if kind is uv.AxisType.GLOBAL]
    assert _upcasts(matmul_kernel)[-1] % lanes == 0, matmul_kernel.name


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("target", target_params("x86-64-v3", "x86-64-v2"))
@pytest.mark.parametrize("out_width", [25, 35])
def test_a_strided_stem_of_five_columns_takes_two_channel_registers_a_column(backend, target, out_width):
    # AlexNet's 11x11 stride-4 stem (3 -> 64 channels, 55 columns): a strided row keeps its exact
    # divisor, 5 columns, and each takes two registers of channels (10 accumulators) on C, whose
    # renderer writes the tile as an assembly block, and on LLVM, which keeps it its own code (5 x 8
    # there before: 1.19 against 0.76 ms in the model)
    width = (out_width - 1) * 4 + 11
    x = RNG.standard_normal((1, 3, width, width)).astype(np.float32)
    w = RNG.standard_normal((64, 3, 11, 11)).astype(np.float32)
    with using_target(target) as profile:
        program = uv.compile([uv.Tensor(x).conv2d(uv.Tensor(w), stride=4)], backend=backend, opts="heuristic")
        result = program.run()[0]
    np.testing.assert_allclose(result, _conv_reference(x, w, 4, 1), rtol=1e-4, atol=1e-4)
    (kernel,) = [k for k in program.kernels if any(t is uv.AxisType.REDUCE for _, t in k.axes)]
    lanes = profile.vector_bytes // 4
    if lanes == 8:  # SSE: 5 columns are wider than a register, not this rule's (values checked)
        assert _upcasts(kernel) == [5, 2 * lanes], kernel.name


SQUEEZE_CLASSIFIER = """
version 1.0;

graph classifier( x ) -> ( y )
{{
    x = external<scalar>(shape = [1, {channels}, 13, 13]);
    w = variable<scalar>(shape = [{classes}, {channels}, 1, 1], label = 'w');
    y = conv(x, w);
}}
"""


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("target", target_params("x86-64-v3"))
@pytest.mark.parametrize("channels,classes,rows", [(64, 40, 5), (64, 64, 4), (512, 1000, 5), (48, 96, 4)])
def test_a_1x1_conv_at_13x13_pads_its_positions_past_the_accumulators(
    backend, target, channels, classes, rows
):
    # SqueezeNet's classifier: a 1x1 conv whose 169 positions are one loop; its only divisor
    # within two registers, 13, takes 13 accumulators: within AVX-512's 16 (kept, checked on the
    # rendered kernel), beyond AVX2's 8, where the positions are padded to 176 and tiled by two
    # registers' 16 lanes instead (176 too), with 5 rows of channels beside them where 5 divides
    # the channels (ten accumulators: no filter tap's row beside them; FIVE_ROWS), else 4 (half the
    # registers).  AVX-512's 32 registers keep their own rows where whole registers divide the
    # channels; else (40, 1000) the positions are padded to 192 and tiled by two registers' 32 lanes
    # (_positions_for_part_register_channels)
    from uopviz.nnef.nnef1.loader import loads_nnef1

    x = RNG.standard_normal((1, channels, 13, 13)).astype(np.float32)
    w = RNG.standard_normal((classes, channels, 1, 1)).astype(np.float32)
    graph = loads_nnef1(SQUEEZE_CLASSIFIER.format(channels=channels, classes=classes), variables={"w": w})
    with using_target(target):
        program = graph.compile(backend, opts="heuristic", progress=False)
        result = graph.run({"x": x}, backend=backend, opts="heuristic")["y"]
    np.testing.assert_allclose(result, _conv_reference(x, w, 1, 1), rtol=1e-4, atol=1e-4 * np.sqrt(channels))
    with using_target("x86-64-v4"):
        wide = graph.compile(backend, opts="heuristic", progress=False, build=False)
    for compiled, positions in ((program, 16), (wide, 13 if classes % 16 == 0 else 32)):
        (kernel,) = [k for k in compiled.kernels if any(t is uv.AxisType.REDUCE for _, t in k.axes)]
        upcasts = _upcasts(kernel)
        assert positions in upcasts and (positions == 13) == (13 in upcasts), kernel.name
        if positions != 13:
            assert sorted(upcasts) == sorted([rows if positions == 16 else 8, positions]), kernel.name
        else:
            assert FIVE_ROWS not in upcasts, kernel.name


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("target", target_params("x86-64-v3"))
@pytest.mark.parametrize(
    "width,channels,outputs,copied",
    [(13, 512, 1000, True), (11, 512, 1000, True), (13, 256, 500, True),  # rows across two lines
     (12, 512, 1000, False),  # rows 576 bytes apart: each 16-position row on one line
     (13, 128, 1000, False)],  # fewer than HOISTED_MIN_ROWS terms: a short strip
)  # fmt: skip
def test_a_1x1_conv_reading_rows_across_two_cache_lines_copies_its_plane_first(
    backend, target, width, channels, outputs, copied
):
    # SqueezeNet-1.1's classifier on AVX2 reads 16 positions (64 bytes) of each of its 512 input
    # channels a step, rows 676 bytes apart: every row spans two cache lines, and each of its groups
    # of 5 output channels reads them all again; the plane is copied once, before the parallel
    # region, its padded tile's last lanes as zeros, and read a line a step
    # (staging.HOISTED_LINE_MAX_POSITIONS); values against numpy in the helper
    kernel = _one_by_one_kernel(backend, target, width, channels, outputs)
    assert sorted(_upcasts(kernel)) == [5, 16], kernel.name
    source = kernel.source("c")
    hoisted = "acc0[" in source and source.index("acc0[") < source.index("#pragma omp parallel")
    assert hoisted == copied, kernel.name
    assert copied == (width * width * 4 % CACHE_LINE != 0 and channels >= HOISTED_MIN_ROWS)


BOTTLENECK_1X1 = """
version 1.0;

graph bottleneck( x ) -> ( y )
{{
    x = external<scalar>(shape = [{batch}, {channels}, {size}, {size}]);
    w1 = variable<scalar>(shape = [{middle}, {channels}, 1, 1], label = 'w1');
    w2 = variable<scalar>(shape = [{middle}, {middle}, 3, 3], label = 'w2');
    r = relu(conv(x, w1));
    y = conv(r, w2, padding = [(1, 1), (1, 1)]);
}}
"""


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("target", target_params("x86-64-v3", "x86-64-v2"))
@pytest.mark.parametrize(
    "batch,channels,middle,size,stacked",
    [(1, 64, 64, 56, True), (1, 256, 32, 40, True), (2, 96, 48, 24, True), (1, 24, 48, 56, False)],
)
def test_a_1x1_conv_writing_a_padded_buffer_stacks_two_rows_of_one_register(
    backend, target, batch, channels, middle, size, stacked
):
    # a ResNet bottleneck's 1x1 conv writes the interior of the 3x3 conv's padded input, rows 56
    # wide that 16 columns do not divide: one register of 8 columns, which took 8 channel rows (9
    # loads for 8 multiply-adds); on AVX2 it stacks two output rows instead (STACKED_ROWS), 2 x 8
    # positions by 4 channels, each broadcast weight used twice. Not over 24 input channels (the
    # tile's stores outweigh its multiply-adds), nor on SSE, whose 56 columns are two registers
    from uopviz.nnef.nnef1.loader import loads_nnef1

    x = RNG.standard_normal((batch, channels, size, size)).astype(np.float32)
    w1 = RNG.standard_normal((middle, channels, 1, 1)).astype(np.float32)
    w2 = RNG.standard_normal((middle, middle, 3, 3)).astype(np.float32)
    text = BOTTLENECK_1X1.format(batch=batch, channels=channels, middle=middle, size=size)
    graph = loads_nnef1(text, variables={"w1": w1, "w2": w2})
    with using_target(target):
        program = graph.compile(backend, opts="heuristic", progress=False)
        result = graph.run({"x": x}, backend=backend, opts="heuristic")["y"]
    r = np.maximum(_conv_reference(x, w1, 1, 1), 0)
    expected = _conv_reference(np.pad(r, ((0, 0), (0, 0), (1, 1), (1, 1))), w2, 1, 1)
    np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())
    (first,) = [k for k in program.kernels if any(t is uv.AxisType.REDUCE for _, t in k.axes)][:1]
    upcasts = _upcasts(first)
    lanes = resolve_target(target).vector_bytes // 4
    if stacked and lanes == 8:
        assert sorted(upcasts) == [2, 4, 8], first.name
    else:
        assert 2 not in upcasts, first.name


@pytest.mark.parametrize(
    "size,lanes,accumulators,columns",
    [(27, 16, 16, 9), (33, 16, 16, 11), (55, 16, 16, 5), (28, 16, 16, 7), (56, 16, 16, 8), (111, 16, 16, 3),
     (27, 8, 8, 3), (55, 8, 8, 5)],
)
def test_broadcast_columns_fill_the_accumulators_with_one_register_a_column_where_two_fill_few(
    size, lanes, accumulators, columns
):
    # 27 columns on AVX-512: 3 columns x 32 channels fill 6 of 16 accumulators; 9 x 16 fill 9
    # (SqueezeNet's and AlexNet's 27x27 convs 0.75-0.77x their time); AVX2's 8 lanes keep 3
    assert _broadcast_columns(size, lanes, accumulators) == columns


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("target", target_params("x86-64-v4"))
def test_a_27_column_conv_takes_9_columns_by_16_channels_on_avx512(backend, target):
    x = RNG.standard_normal((1, 32, 29, 29)).astype(np.float32)
    w = RNG.standard_normal((128, 32, 3, 3)).astype(np.float32)
    with using_target(target):
        out = uv.Tensor(x).conv2d(uv.Tensor(w))
        program = uv.compile([out], backend=backend, opts="heuristic")
        result = program.run()[0]
    np.testing.assert_allclose(result, _conv_reference(x, w, 1, 1), rtol=1e-4, atol=1e-4)
    (kernel,) = [k for k in program.kernels if any(t is uv.AxisType.REDUCE for _, t in k.axes)]
    assert sorted(_upcasts(kernel)) == [9, 16], kernel.name


def _lanes_hold_columns(kernel) -> bool:
    """Whether the tile's lanes (its last UPCAST axis) are output columns: the store steps one
    element along them (the channels' lanes step a whole plane)."""
    lanes_axis = [r for r in kernel.ranges if r.arg[1] is uv.AxisType.UPCAST][-1]
    stores = [u for u in kernel.ast.toposort() if u.op is uv.Ops.STORE]
    return _load_steps(kernel, lanes_axis, stores) == [1]


KiB = 1 << 10


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("target", target_params("x86-64-v4"))
@pytest.mark.parametrize(
    "channels,width,l1_bytes",
    # VGG-16's 64 channels at 112 columns and a 32-channel row of 64 read 24-48 KiB of window rows a
    # tile: over half a 32 KiB L1, within half of 1 MiB; a stem's 3 channels read 4 KiB
    [(64, 112, 32 * KiB), (32, 64, 32 * KiB), (64, 112, 1024 * KiB), (3, 112, 32 * KiB)],
)
def test_a_conv_whose_window_rows_overflow_half_the_l1_broadcasts_its_columns_on_avx512(
    monkeypatch, backend, target, channels, width, l1_bytes
):
    monkeypatch.setattr(TargetsCPU, "l1_bytes", property(lambda self: l1_bytes))
    x = RNG.standard_normal((1, channels, width + 2, width + 2)).astype(np.float32)
    w = RNG.standard_normal((32, channels, 3, 3)).astype(np.float32)
    with using_target(target) as profile:
        program = uv.compile([uv.Tensor(x).conv2d(uv.Tensor(w))], backend=backend, opts="heuristic")
        np.testing.assert_allclose(program.run()[0], _conv_reference(x, w, 1, 1), rtol=1e-4, atol=1e-4)
    lanes = profile.vector_bytes // 4
    # a tile of two registers of columns reads, per channel and filter row, a row segment of its
    # columns and the filter's two more, and a line for the misalignment
    row_bytes = (-(-(2 * lanes + 2) * 4 // CACHE_LINE) + 1) * CACHE_LINE
    overflows = channels * 3 * row_bytes > l1_bytes * WINDOW_ROWS_L1_SHARE
    assert overflows == (channels > 3 and l1_bytes < 1024 * KiB)
    (kernel,) = [k for k in program.kernels if any(t is uv.AxisType.REDUCE for _, t in k.axes)]
    assert _lanes_hold_columns(kernel) != overflows, kernel.name
    if overflows:  # the columns broadcast to two registers of channels each
        columns = _broadcast_columns(width, lanes, profile.vector_registers // 2)
        assert _upcasts(kernel) == [columns, 2 * lanes], kernel.name


@pytest.mark.parametrize(
    "size,lanes,accumulators,padded",
    [
        (111, 16, 16, True),  # AVX-512: 3 columns x 2 registers fill 6 of 16; 112 pads 1 column
        (111, 8, 8, False),  # AVX2: 6 of 8 filled
        (27, 16, 16, False),  # 9 columns of 27 fill 9 or more (and 32 would pad 5 columns)
        (51, 16, 16, False),  # 3 x 17: 64 pads 13 columns, past a sixteenth of the row
        (141, 16, 16, True),  # 3 x 47: 6 of 16; 144 pads 3 columns
        (57, 16, 16, False),  # 3 x 19: 64 pads 7 columns, past a sixteenth of the row
        (95, 16, 16, False),  # 5 x 19: 5 columns x 2 registers fill 10 of 16
        (55, 16, 16, False),  # 5 x 11: a divisor of 11 columns fills the accumulators itself
    ],
)
def test_a_row_of_a_narrow_divisor_is_padded_to_a_register_of_columns(size, lanes, accumulators, padded):
    divisor = _broadcast_columns(size, lanes, accumulators)
    assert divisor is not None
    assert _pads_past_a_narrow_divisor(size, divisor, lanes, accumulators) == padded


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("target", target_params("x86-64-v4", "x86-64-v3"))
def test_a_strided_stem_of_111_columns_takes_16_columns_by_16_channels_on_avx512(backend, target):
    # SqueezeNet-1.1's stem: 3 -> 64 channels, 3x3, stride 2, 224 -> 111 columns (3 x 37)
    x = RNG.standard_normal((1, 3, 224, 224)).astype(np.float32)
    w = RNG.standard_normal((64, 3, 3, 3)).astype(np.float32)
    with using_target(target) as profile:
        program = uv.compile([uv.Tensor(x).conv2d(uv.Tensor(w), stride=2)], backend=backend, opts="heuristic")
        np.testing.assert_allclose(program.run()[0], _conv_reference(x, w, 2, 1), rtol=1e-4, atol=1e-4)
    lanes = profile.vector_bytes // 4
    (kernel,) = [k for k in program.kernels if any(t is uv.AxisType.REDUCE for _, t in k.axes)]
    if profile.vector_registers > 16:  # the row padded to 112: a register of columns, 16 channels
        assert _lanes_hold_columns(kernel) and _upcasts(kernel) == [lanes, lanes], kernel.name
        assert any(opt.op is uv.OptOp.PADTO and opt.arg == 112 for opt in kernel.opts), kernel.opts
    else:  # AVX2: 3 columns broadcast to two registers of channels each
        assert _upcasts(kernel)[0] == 3, kernel.name
