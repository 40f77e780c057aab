"""Gated vector loads (zero padding) on the C-family backends.

A contiguous vector LOAD whose gate is a vector of per-lane bools (the lanes past an edge of a
padded input are off) is rendered as one whole-vector load and a select where the vector lies
inside the buffer, and lane by lane where it crosses an end of the buffer.  These tests check the
values on both paths (hand-made programs whose vectors cross both buffer ends, and padded
convolutions, PADs and SHRINKs through the pipeline, against numpy) and that the rendered source
of a padded convolution reads its input with whole-vector loads.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import uopviz as uv
from uopviz.backends import get
from uopviz.backends.base import numpy_dtype
from uopviz.core.dtype import DType, dtypes

from . import linear_programs as lp

BACKENDS = ("c", "opencl")


def _available(name: str):
    if name == "opencl":
        pytest.importorskip("pyopencl", reason="the opencl backend needs pyopencl (pip install pyopencl)")
    backend = get(name)
    if not backend.available():
        pytest.skip(f"{name} is not available here: {backend.unavailable_reason()}")
    return backend


def gated_vector_load(n: int, width: int, shift: int, dtype: DType = dtypes.float32) -> lp.LinearCase:
    """``out[j] = a[j - shift]`` where ``0 <= j - shift < n``, else -1, read ``width`` lanes at a
    time: each vector of ``out`` reads one contiguous vector of ``a`` with a gate per lane.  The
    first vectors start before ``a`` and the last ones end past it (the lane-by-lane path); the
    ones between lie inside it (the whole-vector path)."""
    vectors = (n + 2 * shift) // width + 2  # enough vectors to run past the end of ``a``
    b = lp.Builder()
    out, a = b.param(0, vectors * width, dtype), b.param(1, n, dtype)
    i = b.loop(vectors)
    base = b.emit(i * lp.idx(width))
    sources = [b.emit(base + lp.idx(k - shift)) for k in range(width)]
    gates = [b.emit((s >= lp.idx(0)) & (s < lp.idx(n))) for s in sources]
    minus_one = lp.const(dtype, -1)
    value = b.load(a, lp.lanes(*sources), lp.lanes(*(minus_one,) * width), lp.lanes(*gates))
    b.end(i, b.store(out, lp.lanes(*(base + lp.idx(k) for k in range(width))), value))

    def make(rng):
        storage = numpy_dtype(dtype)
        return [np.zeros(vectors * width, storage), lp.random_array(rng, n, dtype, -100, 100)]

    def expected(x):
        want = np.full(vectors * width, -1, x[1].dtype)
        want[shift : shift + n] = x[1]
        return {0: want}

    name = f"gated_vector_load_{dtype.name}_{n}_w{width}_s{shift}"
    return lp.LinearCase(name, b.linear(f"E_gvl_{n}_{width}_{shift}"), make, expected, exact=True)


HAND_MADE = [
    gated_vector_load(n, width, shift, dtype)
    for n, width, shift, dtype in (
        (16, 16, 1, dtypes.float32),  # the buffer holds exactly one vector: no start is inside
        (17, 16, 1, dtypes.float32),
        (64, 16, 3, dtypes.float32),
        (5, 8, 2, dtypes.float32),  # a buffer shorter than a vector: every read is lane by lane
        (37, 4, 1, dtypes.float64),
        (50, 8, 5, dtypes.int32),
        (40, 16, 7, dtypes.int8),
        (33, 8, 2, dtypes.int16),
        (29, 4, 3, dtypes.float16),
    )
]


@pytest.mark.parametrize("backend_name", BACKENDS)
@pytest.mark.parametrize("case", HAND_MADE, ids=repr)
def test_gated_vector_load_matches_numpy_across_both_buffer_ends(backend_name: str, case) -> None:
    backend = _available(backend_name)
    if not backend.supports_dtype(case.linear.src[0].arg.dtype):
        pytest.skip(f"{backend_name} has no {case.linear.src[0].arg.dtype.name} on this device")
    for seed in (0, 1):
        lp.assert_case_matches(backend_name, case, seed)


def test_whole_vector_path_is_taken_only_inside_the_buffer() -> None:
    """The hand-made case renders the whole-vector load behind a test of its start against the
    buffer's last full vector (64 elements, 16 lanes: starts 0..48)."""
    source = get("c").render(gated_vector_load(64, 16, 3).linear)
    assert re.search(r"\(0 <= (.+?) && \1 <= 48\) \?", source), source


def _numpy_conv2d(x: np.ndarray, w: np.ndarray, padding: int) -> np.ndarray:
    kh, kw = w.shape[2:]
    padded = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (kh, kw), (2, 3))
    return np.einsum("nchwij,ocij->nohw", windows.astype(np.float64), w.astype(np.float64))


def _run(backend_name: str, build, *arrays: np.ndarray) -> np.ndarray:
    program = uv.compile(build(*(uv.Tensor(a) for a in arrays)), backend=backend_name, opts="heuristic")
    return program.run()[0]


CONVOLUTIONS = [
    ((1, 16, 64, 64), (32, 16, 3, 3), 1),  # the pipeline benchmark's case
    ((1, 3, 5, 7), (4, 3, 3, 3), 1),
    ((2, 4, 17, 33), (8, 4, 3, 3), 1),
    ((1, 2, 9, 20), (3, 2, 5, 5), 2),
    ((1, 5, 1, 16), (2, 5, 1, 3), 1),
]


@pytest.mark.parametrize("backend_name", BACKENDS)
@pytest.mark.parametrize("shapes", CONVOLUTIONS, ids=lambda s: f"{s[0]}*{s[1]}p{s[2]}")
def test_padded_conv2d_matches_numpy(backend_name: str, shapes) -> None:
    _available(backend_name)
    x_shape, w_shape, padding = shapes
    rng = np.random.default_rng(sum(x_shape) + sum(w_shape))
    x = rng.standard_normal(x_shape, np.float32)
    w = rng.standard_normal(w_shape, np.float32)
    got = _run(backend_name, lambda a, b: a.conv2d(b, padding=padding), x, w)
    np.testing.assert_allclose(got, _numpy_conv2d(x, w, padding), rtol=1e-4, atol=1e-4)


PADS = [
    ("pad", (5, 37), lambda t: t.pad(((2, 3), (1, 17))) * 2 + 1,
     lambda a: np.pad(a, ((2, 3), (1, 17))) * 2 + 1),
    ("pad value", (3, 64), lambda t: t.pad(((1, 1), (16, 3)), value=-1.5) + 1,
     lambda a: np.pad(a, ((1, 1), (16, 3)), constant_values=-1.5) + 1),
    ("shrink then pad", (7, 45), lambda t: t.shrink(((1, 6), (3, 40))).pad(((2, 2), (5, 6))) - 3,
     lambda a: np.pad(a[1:6, 3:40], ((2, 2), (5, 6))) - 3),
    ("pad then shrink", (4, 33), lambda t: t.pad(((1, 2), (9, 9))).shrink(((0, 6), (4, 47))) * 3,
     lambda a: np.pad(a, ((1, 2), (9, 9)))[0:6, 4:47] * 3),
    ("padded sum", (6, 50), lambda t: t.pad(((0, 0), (7, 7))).sum(0),
     lambda a: np.pad(a, ((0, 0), (7, 7))).sum(0)),
]


@pytest.mark.parametrize("backend_name", BACKENDS)
@pytest.mark.parametrize("case", PADS, ids=lambda c: c[0])
def test_pad_and_shrink_match_numpy(backend_name: str, case) -> None:
    _available(backend_name)
    _, shape, build, reference = case
    x = np.random.default_rng(len(shape) + shape[1]).standard_normal(shape, np.float32)
    np.testing.assert_allclose(_run(backend_name, build, x), reference(x), rtol=1e-5, atol=1e-5)


# the lane-by-lane read of one lane behind its own gate: ``(g.s3 ? data1[...] :`` / ``(g[3] ? data1[``
_LANE_READ = re.compile(r"\(\w+(?:\.s[0-9a-f]|\[\d+\]) \? data\d+\[")


def _padded_conv_source(backend_name: str) -> str:
    x = uv.Tensor(np.zeros((1, 16, 64, 64), np.float32))
    w = uv.Tensor(np.zeros((32, 16, 3, 3), np.float32))
    program = uv.compile(x.conv2d(w, padding=1), backend=backend_name, opts="heuristic", build=False)
    (source,) = program.sources
    return source


def _assert_whole_vector_loads(source: str, whole_load: re.Pattern) -> None:
    """Every gated vector read of the input is a whole-vector load behind an in-bounds test, with
    the lane-by-lane reads only in the other arm of that test."""
    gated = [line for line in source.splitlines() if _LANE_READ.search(line)]
    assert gated, f"the padded conv has no gated vector loads any more:\n{source}"
    for line in gated:
        match = re.search(r"= \(\(0 <= (.+?) && \1 <= \d+\) \? (.*?) : \(", line)
        assert match, f"a gated vector load is read lane by lane only:\n{line}"
        assert whole_load.search(match.group(2)), f"no whole-vector load in the fast arm:\n{line}"
        assert not _LANE_READ.search(match.group(2)), f"lane reads in the fast arm:\n{line}"


def test_padded_conv_reads_whole_vectors_on_opencl() -> None:
    _available("opencl")
    source = _padded_conv_source("opencl")
    _assert_whole_vector_loads(
        source, re.compile(r"^select\(\w+, vload(\d+)\(0, data1 \+ .*\(-convert_int\1\(")
    )


def test_padded_conv_reads_whole_vectors_on_c() -> None:
    _available("c")
    source = _padded_conv_source("c")
    _assert_whole_vector_loads(
        source, re.compile(r"load_float32x(\d+)\(data1 \+ .*-__builtin_convertvector\(\w+, int32x\1\)")
    )
