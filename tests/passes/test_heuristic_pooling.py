"""The heuristic's row tile of a pooling (heuristic._slides_a_window): no output axis reuses a load,
but the window slides along the output rows, so each row becomes vectors, one window per lane (a
stride-2 row read as two loads and a shuffle); a row sum, whose loads step a row per output, keeps
its unrolled reduction.  Values against numpy on random inputs of several shapes."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_targets import target_params

import uopviz as uv
from uopviz.backends.target import using_target

RNG = np.random.default_rng(27)
CPU_BACKENDS = [b for b in ("c", "llvm") if b in uv.backends.available()]


def _windows(x: np.ndarray, size: int, stride: int, padding: int, fill: float) -> np.ndarray:
    padded = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)), constant_values=fill)
    view = np.lib.stride_tricks.sliding_window_view(padded, (size, size), axis=(2, 3))
    return view[:, :, ::stride, ::stride]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("target", target_params("x86-64-v4", "x86-64-v3", "x86-64-v2"))
@pytest.mark.parametrize(
    "shape,size,stride,padding",
    # one case in the emulated CPUs' runs (qemu takes ~10 s a case); all of them in `make test`
    [((1, 8, 64, 64), 2, 2, 0),
     *(pytest.param(*case, marks=pytest.mark.slow)
       for case in [((2, 5, 28, 28), 3, 1, 1), ((1, 3, 33, 33), 3, 2, 0), ((1, 4, 14, 14), 3, 1, 1)])],
)  # fmt: skip
def test_a_poolings_rows_become_vectors_with_numpys_values(backend, target, shape, size, stride, padding):
    x = RNG.standard_normal(shape).astype(np.float32)
    with using_target(target):
        pooled = uv.Tensor(x).max_pool2d(size, stride, padding)
        averaged = uv.Tensor(x).avg_pool2d(size, stride, padding)
        program = uv.compile([pooled, averaged], backend=backend, opts="heuristic")
        got_max, got_mean = program.run()
    np.testing.assert_array_equal(got_max, _windows(x, size, stride, padding, -np.inf).max(axis=(-2, -1)))
    expected = _windows(x.astype(np.float64), size, stride, padding, 0.0).mean(axis=(-2, -1))
    np.testing.assert_allclose(got_mean, expected, rtol=1e-5, atol=1e-6)
    reducing = [k for k in program.kernels if any(t is uv.AxisType.REDUCE for _, t in k.axes)]
    assert reducing and all(any(t is uv.AxisType.UPCAST for _, t in k.axes) for k in reducing), \
        [k.name for k in reducing]  # fmt: skip


@pytest.mark.parametrize("target", target_params("x86-64-v4", "x86-64-v3"))
def test_a_row_sum_keeps_its_unrolled_reduction(target):
    x = RNG.standard_normal((64, 48)).astype(np.float32)
    with using_target(target):
        program = uv.compile([uv.Tensor(x).sum(1)], backend="c", opts="heuristic")
    (kernel,) = program.kernels
    assert not any(t is uv.AxisType.UPCAST for _, t in kernel.axes), kernel.name
    np.testing.assert_allclose(program.run()[0], x.astype(np.float64).sum(1), rtol=1e-5, atol=1e-5)


#: (register lanes, row width) -> the row tile's lanes (heuristic._padded_row): a row of 14 as one
#: 16-lane vector on AVX-512 and two 8-lane ones on AVX2, 7 of 8 lanes on SSE (not 2-lane chunks),
#: 28 as 14 of 16 lanes on AVX2 (not 4-lane chunks); 56 on AVX-512 keeps its exact 8-lane chunks
PADDED_ROW = {(16, 14): 16, (16, 7): 8, (16, 28): 32, (16, 56): 8,
              (8, 14): 16, (8, 7): 8, (8, 28): 16, (8, 56): 8,
              (4, 14): 8, (4, 7): 8, (4, 28): 4, (4, 56): 8}


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("target", target_params("x86-64-v4", "x86-64-v3", "x86-64-v2"))
@pytest.mark.parametrize("channels,width", [(6, 14), (5, 7), *(pytest.param(3, w, marks=pytest.mark.slow)
                                                                for w in (28, 56))])
def test_a_row_short_of_a_register_is_padded_to_one_with_numpys_values(backend, target, channels, width):
    # a 3x3 stride-1 max pool over an input already padded (NNEF's form: Inception-v1's pools of
    # 14x14 and 7x7): the row's lanes padded up to a whole register (heuristic._padded_row), the
    # padded lanes' loads and stores gated off; NaN and -inf inputs keep max's semantics
    x = RNG.standard_normal((1, channels, width + 2, width + 2)).astype(np.float32)
    x[0, 0, 3, 4], x[0, -1, -1, -1], x[0, 1, 0, 0] = np.nan, -np.inf, np.inf
    with using_target(target) as profile:
        program = uv.compile([uv.Tensor(x).max_pool2d(3, 1)], backend=backend, opts="heuristic")
        (got,) = program.run()
    np.testing.assert_array_equal(got, _windows(x, 3, 1, 0, -np.inf).max(axis=(-2, -1)))
    (kernel,) = [k for k in program.kernels if any(t is uv.AxisType.REDUCE for _, t in k.axes)]
    upcasts = [size for size, kind in kernel.axes if kind is uv.AxisType.UPCAST]
    assert upcasts == [PADDED_ROW[profile.vector_bytes // 4, width]], kernel.name


@pytest.mark.parametrize("target", target_params("x86-64-v4"))
def test_a_stride_two_row_within_a_register_is_padded_to_it(target):
    # 14 columns as one register of 16 lanes: the two lanes past the row clamped to its end, read
    # apart from the shuffled run of every other element (no longer 14 lanes in 2-lane chunks)
    x = RNG.standard_normal((1, 4, 29, 29)).astype(np.float32)
    with using_target(target):
        program = uv.compile([uv.Tensor(x).max_pool2d(3, 2)], backend="c", opts="heuristic")
        (got,) = program.run()
    np.testing.assert_array_equal(got, _windows(x, 3, 2, 0, -np.inf).max(axis=(-2, -1)))
    (kernel,) = program.kernels
    assert [size for size, kind in kernel.axes if kind is uv.AxisType.UPCAST] == [16], kernel.name


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("target", target_params("x86-64-v4"))
@pytest.mark.parametrize("dtype", [np.float64, np.float16, np.int32, np.int8, np.uint8])
def test_padded_rows_of_every_dtype_give_numpys_values(backend, target, dtype):
    # rows of 14 and 7, padded to 16 and 8 lanes for every element size (a register holds 8 to 64)
    x = RNG.integers(-100, 100, (1, 3, 16, 16)).astype(dtype) if np.dtype(dtype).kind in "iu" \
        else RNG.standard_normal((1, 3, 16, 16)).astype(dtype)
    y = x[:, :, :9, :9]
    pooled = [uv.Tensor(x).max_pool2d(3, 1), uv.Tensor(np.ascontiguousarray(y)).max_pool2d(3, 1)]
    with using_target(target):
        program = uv.compile(pooled, backend=backend, opts="heuristic")
        results = program.run()
    for got, source in zip(results, (x, y)):
        np.testing.assert_array_equal(got, _windows(source, 3, 1, 0, 0).max(axis=(-2, -1)))
    upcasts = sorted(size for k in program.kernels for size, kind in k.axes if kind is uv.AxisType.UPCAST)
    assert upcasts == [8, 16], [k.name for k in program.kernels]  # 7 and 14 lanes, padded


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize(
    "target,width,lanes",
    [pytest.param(*target.values, width, lanes, marks=target.marks)
     for level, cases in (("x86-64-v3", [(111, 8), (55, 16), (27, 16), (29, 16), (15, 8), (57, None)]),
                          ("x86-64-v2", [(15, 8), (27, 8), (9, None)]))
     for target in target_params(level) for width, lanes in cases],
)  # fmt: skip
def test_a_strided_row_no_register_divides_is_padded_to_whole_registers(backend, target, width, lanes):
    # 3x3 stride-2 max pools: SqueezeNet's 111 -> 55 columns (56 as 7 tiles of 8 lanes), 55 -> 27 (32
    # as 2 of 16) and 27 -> 13 (16), not 11, 9 or 13 lanes; Inception-v1's 29 -> 14 (16) and 15 -> 7
    # (8), not 14 lanes in 2-lane chunks or 7 scalars; 57 -> 28 keeps 7 tiles of 4 (32 would pad
    # the last of 4 tiles of 8 by half).  On SSE (4 lanes) 7 columns become 8, 13 two tiles of 8,
    # and 4 columns (9 wide) are a register already
    x = RNG.standard_normal((1, 16, width, width)).astype(np.float32)
    x[0, 3, :, -1] = np.nan  # the row's last column: a clamped lane reads it, max passes NaN on
    with using_target(target):
        program = uv.compile([uv.Tensor(x).max_pool2d(3, 2, 0)], backend=backend, opts="heuristic")
        got = program.run()[0]
    np.testing.assert_array_equal(got, _windows(x, 3, 2, 0, -np.inf).max(axis=(-2, -1)))
    (kernel,) = [k for k in program.kernels if any(t is uv.AxisType.REDUCE for _, t in k.axes)]
    upcasts = [size for size, kind in kernel.axes if kind is uv.AxisType.UPCAST]
    padded = any(op.op is uv.OptOp.PADTO for op in kernel.opts)
    if lanes is None:
        assert not padded and upcasts and ((width - 3) // 2 + 1) % upcasts[0] == 0, kernel.name
    else:
        assert upcasts == [lanes] and padded, kernel.name


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("target", target_params("x86-64-v4"))
@pytest.mark.parametrize("size,stride,width,lanes", [(3, 2, 15, 8), (3, 2, 13, 8), (2, 2, 14, 7)])
def test_a_short_strided_row_takes_a_narrower_vector_of_a_wide_register(
    backend, target, size, stride, width, lanes
):
    # AVX-512: 7 or 6 columns of a 3x3 stride-2 pool (Inception-v1's 832 channels, MobileNet-v2's
    # stride-2 depthwise conv, AlexNet's last pool) as one 8-lane vector, not 7 scalars; a 2x2 one
    # (windows that do not overlap: DenseNet-121's transitions) keeps its 7 lanes
    x = RNG.standard_normal((1, 8, width, width)).astype(np.float32)
    with using_target(target):
        program = uv.compile([uv.Tensor(x).max_pool2d(size, stride, 0)], backend=backend, opts="heuristic")
        got = program.run()[0]
    np.testing.assert_array_equal(got, _windows(x, size, stride, 0, -np.inf).max(axis=(-2, -1)))
    (kernel,) = [k for k in program.kernels if any(t is uv.AxisType.REDUCE for _, t in k.axes)]
    assert [s for s, kind in kernel.axes if kind is uv.AxisType.UPCAST][:1] == [lanes], kernel.name
