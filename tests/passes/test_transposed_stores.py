"""A register tile stored transposed: a convolution's CPU tile holds positions × channels (each vector
the channels of one position) while its output's rows are positions.  Instruction Selection splits
such a STORE by address runs (`_address_runs`: one run of positions per channel) where the backend
transposes stores (C, LLVM), and the renderer makes the runs' vectors by a transpose of the tile in
registers (`transpose_plan`: two-vector shuffles), not lane by lane.  Values are numpy's on every
target and backend."""

from __future__ import annotations

import re

import numpy as np
import pytest
from cpu_targets import target_params

import uopviz as uv
from uopviz.backends.linear_program import transpose_plan, underlying_buffer
from uopviz.backends.target import resolve_target, using_target
from uopviz.core.ops import AxisType, Ops
from uopviz.core.uop import UOp
from uopviz.passes.indexing import iadd, iconst
from uopviz.passes.isel import TRANSPOSED_STORE_MIN_LANES, _address_runs, padded_column_width

RNG = np.random.default_rng(31)
BACKENDS = [b for b in ("c", "llvm", "python") if b in uv.backends.available()]


def _index(addresses) -> UOp:
    """A vector index of one loop variable plus a constant per lane."""
    base = UOp(Ops.RANGE, (iconst(64),), (0, AxisType.LOOP))
    return UOp(Ops.VECTORIZE, tuple(iadd(base, a) for a in addresses))


def _lane_order(count: int, width: int) -> list[tuple[int, ...]]:
    return [tuple(range(start, start + width)) for start in range(0, count, width)]


def test_a_tile_of_positions_by_channels_is_stored_as_rows_of_positions() -> None:
    # 8 positions (stride 1) x 16 channels (stride 100), channels innermost in lane order
    index = _index([channel * 100 + position for position in range(8) for channel in range(16)])
    runs = _address_runs(index, _lane_order(128, 16), frozenset({2, 4, 8, 16}))
    assert runs == [tuple(position * 16 + channel for position in range(8)) for channel in range(16)]


def test_runs_longer_than_a_register_come_in_register_chunks() -> None:
    # AVX2: 16 positions x 8 channels in chunks of 8 (one position each): two runs of 8 per channel
    index = _index([channel * 100 + position for position in range(16) for channel in range(8)])
    runs = _address_runs(index, _lane_order(128, 8), frozenset({4, 8}))
    assert [len(run) for run in runs] == [8] * 16
    first, second = (tuple(position * 8 for position in range(start, start + 8)) for start in (0, 8))
    assert runs[:2] == [first, second]


def test_a_run_across_lanes_of_different_offsets_is_not_a_column() -> None:
    # 16 positions x 4 channels in chunks of 8 (two positions each): a channel's positions sit at
    # two offsets of the chunks, which no transpose of the chunks puts in one vector
    index = _index([channel * 100 + position for position in range(16) for channel in range(4)])
    assert _address_runs(index, _lane_order(64, 8), frozenset({4, 8})) is None


def test_seven_positions_are_a_padded_column_where_a_register_holds_eight() -> None:
    # 7 positions x 16 channels: one run of 7 per channel, stored from an 8-row transpose
    index = _index([channel * 100 + position for position in range(7) for channel in range(16)])
    runs = _address_runs(index, _lane_order(112, 16), frozenset({2, 4, 8, 16}))
    assert runs == [tuple(position * 16 + channel for position in range(7)) for channel in range(16)]
    assert padded_column_width(7, frozenset({2, 4, 8, 16})) == 8
    # SSE (4 floats a register): no register of 8, the elements are stored one by one
    assert _address_runs(index, _lane_order(112, 4), frozenset({2, 4})) is None
    assert padded_column_width(7, frozenset({2, 4})) is None
    # widths a register holds, powers of two and runs under the minimum are no padded column
    assert [padded_column_width(lanes, frozenset({4, 8, 16})) for lanes in (3, 4, 5, 6, 8, 12)] == [
        None, None, 8, 8, None, 16]


def test_lanes_with_their_constant_fused_into_a_mulacc_group_with_the_plain_product() -> None:
    # a tile of rows clamped to the output (row * 7 + ...): lane 0 is row * 7, the others MULACC(row,
    # 7, constant); they are one base plus constants, as ADDs of the product would be
    row = UOp(Ops.RANGE, (iconst(8),), (0, AxisType.LOOP))
    product = row * iconst(7)
    lanes = [channel * 49 + position for position in range(7) for channel in range(16)]
    index = UOp(Ops.VECTORIZE, tuple(
        product if lane == 0 else UOp(Ops.MULACC, (row, iconst(7), iconst(lane))) for lane in lanes))
    runs = _address_runs(index, _lane_order(112, 16), frozenset({2, 4, 8, 16}))
    assert runs == [tuple(position * 16 + channel for position in range(7)) for channel in range(16)]


@pytest.mark.parametrize("addresses, why", [
    (list(range(32)), "lane order is contiguous already"),
    ([c * 100 + p for p in range(2) for c in range(16)], "runs of 2 positions are narrower than the minimum"),
    ([c * 100 + p // 2 for p in range(8) for c in range(4)], "two lanes store one element"),
])
def test_stores_that_gain_nothing_keep_lane_order(addresses, why) -> None:
    index = _index(addresses)
    assert _address_runs(index, _lane_order(len(addresses), 16), frozenset({4, 8, 16})) is None, why
    assert TRANSPOSED_STORE_MIN_LANES == 4


@pytest.mark.parametrize("count, width", [(4, 4), (4, 8), (8, 8), (8, 16), (16, 16), (4, 16)])
def test_the_transpose_plan_puts_each_column_in_order_in_one_vector(count: int, width: int) -> None:
    rows = RNG.standard_normal((count, width))
    steps, columns = transpose_plan(count, width)
    vectors = list(rows)
    for first, second, picks in steps:
        vectors.append(np.concatenate([vectors[first], vectors[second]])[picks])
    for column in range(width):
        number, lane = columns[column]
        np.testing.assert_array_equal(vectors[number][lane:lane + count], rows[:, column])
    # log2(count) rounds of count shuffles, each of whole vectors
    assert len(steps) == count * (count.bit_length() - 1)
    assert all(len(picks) == width for _, _, picks in steps)


def _conv(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """numpy's convolution (no padding, stride 1) in float64."""
    k = w.shape[-1]
    windows = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), (k, k), axis=(2, 3))
    return np.einsum("nchwij,ocij->nohw", windows, w.astype(np.float64))


def _stores(program) -> list[UOp]:
    """The kernel's stores to its output (not to its accumulators)."""
    linear = program.items[-1].body.src[0]
    return [u for u in linear.src if u.op is Ops.STORE and underlying_buffer(u.src[0].src[0]).op is Ops.PARAM]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("target", target_params("x86-64-v4", "x86-64-v3", "x86-64-v2"))
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("in_channels, out_channels, size, kernel_size", [
    (24, 144, 56, 1),  # MobileNet-v2's expansion: 8 positions x 16 channels on AVX-512
    (64, 64, 28, 1),
    (16, 32, 14, 3),
    (8, 48, 9, 3),  # 7 positions: a padded column, behind the channel tile's gate
    (32, 64, 7, 1),  # 7 positions x 32 channels
])
def test_conv_tiles_store_rows_and_give_numpys_values(backend, target, dtype, in_channels, out_channels,
                                                      size, kernel_size) -> None:
    x = RNG.standard_normal((1, in_channels, size, size)).astype(dtype)
    w = RNG.standard_normal((out_channels, in_channels, kernel_size, kernel_size)).astype(dtype)
    with using_target(target):
        program = uv.compile([uv.Tensor(x).conv2d(uv.Tensor(w)).relu()], backend=backend, opts="heuristic")
        result = program.run()[0]
    tolerance = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(result, np.maximum(_conv(x, w), 0), rtol=tolerance, atol=tolerance)
    if resolve_target(target).vector_bytes // np.dtype(dtype).itemsize < TRANSPOSED_STORE_MIN_LANES:
        return  # SSE's 2 doubles a register: no run of 4 fits a vector
    if backend == "python":
        return  # the interpreter stores lane by lane, as Instruction Selection left it
    upcasts = [size for size, kind in program.kernels[-1].axes if kind is AxisType.UPCAST]
    positions, channels = upcasts[0], upcasts[-1]
    lanes = min(channels, resolve_target(target).vector_bytes // np.dtype(dtype).itemsize)
    if positions < TRANSPOSED_STORE_MIN_LANES or (1 << (positions - 1).bit_length()) > lanes:
        return  # no register of channels holds the positions (padded): elements one by one
    # every store to the output is a vector of 4 positions or more (before: elements one by one); 7
    # positions are a padded column (8 rows transposed, 7 lanes stored)
    stores = _stores(program)
    widths = [s.src[1].dtype.count for s in stores]
    assert widths and min(widths) >= TRANSPOSED_STORE_MIN_LANES, program.kernels[-1].name


@pytest.mark.parametrize("backend", [b for b in ("c", "llvm") if b in BACKENDS])
@pytest.mark.parametrize("target", target_params("x86-64-v4"))
def test_the_expansion_conv_renders_one_transpose_per_tile(backend, target) -> None:
    # 8 positions x 16 channels: 3 rounds of 8 shuffles, then 16 row stores of 8, no element stores
    x = RNG.standard_normal((1, 24, 56, 56)).astype(np.float32)
    w = RNG.standard_normal((144, 24, 1, 1)).astype(np.float32)
    with using_target(target):
        out = uv.Tensor(x).conv2d(uv.Tensor(w))
        program = uv.compile([out], backend=backend, opts="heuristic", build=False)
    (kernel,) = program.kernels
    upcasts = [size for size, kind in kernel.axes if kind is AxisType.UPCAST]
    assert upcasts == [8, 16], kernel.name
    source = program.items[-1].source
    if backend == "c":
        assert len(re.findall(r"float32x16 transposed\d+;", source)) == 24
        assert source.count("store_float32x8(data0") == 16
        assert "data0[" not in source
    else:
        assert len(re.findall(r"%transposed\d+ = shufflevector <16 x float>", source)) == 24
        assert source.count("store <8 x float>") == 16
        assert "store float " not in source


def _checked_conv(backend: str, target: str, input_shape: tuple, filter_shape: tuple):
    """The compiled program of a float32 conv (no padding, stride 1) on random arrays of these
    shapes, its values checked against numpy's."""
    x = RNG.standard_normal(input_shape).astype(np.float32)
    w = RNG.standard_normal(filter_shape).astype(np.float32)
    with using_target(target):
        program = uv.compile([uv.Tensor(x).conv2d(uv.Tensor(w))], backend=backend, opts="heuristic")
        result = program.run()[0]
    np.testing.assert_allclose(result, _conv(x, w), rtol=1e-4, atol=1e-4)
    return program


@pytest.mark.parametrize("backend", [b for b in ("c", "llvm") if b in BACKENDS])
@pytest.mark.parametrize("target", target_params("x86-64-v4"))
def test_a_seven_position_tile_renders_one_padded_transpose(backend, target) -> None:
    # 7 positions x 32 channels (a 1x1 conv at 7x7): per 16 channels one transpose of 8 rows (the
    # 7th repeated) in 3 rounds of 8 shuffles, then a column store of 7 lanes per channel; no element stores
    program = _checked_conv(backend, target, (1, 32, 7, 7), (64, 32, 1, 1))
    (kernel,) = program.kernels
    assert [size for size, kind in kernel.axes if kind is AxisType.UPCAST] == [7, 32], kernel.name
    source = program.items[-1].source
    if backend == "c":
        assert len(re.findall(r"float32x16 transposed\d+;", source)) == 2 * 24
        assert source.count("store_float32x7_first7(data0") == 32
        assert "data0[" not in source
    else:
        assert len(re.findall(r"%transposed\d+ = shufflevector <16 x float>", source)) == 2 * 24
        assert source.count("store <7 x float>") == 32
        assert "store float " not in source


@pytest.mark.parametrize("backend", [b for b in ("c", "llvm") if b in BACKENDS])
@pytest.mark.parametrize("target", target_params("x86-64-v4", "x86-64-v3"))
def test_a_tile_of_rows_padded_past_the_output_stores_columns_behind_one_test(backend, target) -> None:
    # 3x3 conv to 7x7 on two cores: 7 rows padded to 8, each tile's row gated by row < 7 in every
    # lane; its columns are stored behind that one test, with no lane-by-lane fallback
    source = _checked_conv(backend, target, (1, 128, 9, 9), (32, 128, 3, 3)).items[-1].source
    if backend == "c":
        assert "store_float32x7_first7(data0" in source and "data0[" not in source
        assert "} else {" not in source
    else:
        assert "store <7 x float>" in source and "store float " not in source


@pytest.mark.parametrize("backend", [b for b in ("c", "llvm") if b in BACKENDS])
@pytest.mark.parametrize("target", target_params("x86-64-v4", "x86-64-v3"))
@pytest.mark.parametrize("dtype", [np.float16, np.int32, np.int8, np.uint8, np.int64],
                         ids=lambda d: np.dtype(d).name)
def test_every_dtype_gives_numpys_values(backend, target, dtype) -> None:
    # tiles of 8 or 16 positions by channels, transposed where a register holds a power of two of
    # positions (int32 on AVX-512, float16 on AVX2's LLVM), stored element by element elsewhere
    if np.issubdtype(dtype, np.integer):
        x = RNG.integers(0, 3, (1, 24, 16, 16)).astype(dtype)
        w = RNG.integers(0, 2, (144, 24, 1, 1)).astype(dtype)
    else:
        x = RNG.standard_normal((1, 24, 16, 16)).astype(dtype)
        w = RNG.standard_normal((144, 24, 1, 1)).astype(dtype)
    with using_target(target):
        result = uv.compile([uv.Tensor(x).conv2d(uv.Tensor(w))], backend=backend, opts="heuristic").run()[0]
    expected = _conv(x, w)
    if np.issubdtype(dtype, np.integer):
        np.testing.assert_array_equal(result, expected.astype(np.int64).astype(dtype))
    else:
        np.testing.assert_allclose(result.astype(np.float64), expected, rtol=2e-2, atol=0.1)


@pytest.mark.parametrize("target", target_params("x86-64-v4"))  # (8 x 16 tiles; AVX2 takes another)
def test_the_transpose_for_gcc_before_12_gives_the_same_values(target) -> None:
    # GCC 11 has no __builtin_shufflevector: the #else branch shuffles with __builtin_shuffle (a
    # lane-by-lane literal there made the tile slower than its element stores); forced here
    x = RNG.standard_normal((1, 24, 56, 56)).astype(np.float32)
    w = RNG.standard_normal((144, 24, 1, 1)).astype(np.float32)
    backend = uv.backends.get("c")
    with using_target(target):
        program = uv.compile([uv.Tensor(x).conv2d(uv.Tensor(w))], backend="c", opts="heuristic", build=False)
        (item,) = program.items
        modern = "#if defined(__clang__) || __GNUC__ >= 12"
        assert modern in item.source and "__builtin_shuffle(" in item.source
        name = str(item.body.src[0].arg)
        item.compiled = backend.compile(item.source.replace(modern, "#if 0"), name)
        program.build = True
        result = program.run()[0]
    np.testing.assert_allclose(result, _conv(x, w), rtol=1e-4, atol=1e-4)
