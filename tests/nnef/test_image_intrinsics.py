"""The image operators the spec leaves without a body (§4.5.3 ROI pools, §4.5.4 cubic grid
sampling) and the FLOOR case of ``nearest_resize`` that the spec's formula gets wrong.

The numpy references are written here, element by element, from the definitions the stdlib
comments give (``uopviz/nnef/stdlib/image.sknd``): ROI rows ``[start.., end..]`` with inclusive
corners rounded half away from zero and Fast R-CNN bins; cubic sampling as the spec's
``_linear_grid_sample`` with 4 Keys taps per axis (REFLECT for any distance: tests/nnef/test_reflect.py
samples far outside). Inputs are random, of several shapes and ranks;
every case runs on every CPU backend this machine has (python, c, llvm, opencl).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from image_references import keys

import uopviz as uv
from uopviz.nnef.composition.composer import compose

BACKENDS = [name for name in ("python", "c", "llvm", "opencl") if name in uv.backends.available()]
RNG = np.random.default_rng(2024)


def run(body: str, inputs: dict, outputs: str, backend: str) -> dict:
    kinds = {"f": "real", "i": "int"}
    decls = " ".join(
        f"{name}: {kinds[a.dtype.kind]}[{', '.join(map(str, a.shape))}];" for name, a in inputs.items()
    )
    text = f"import image;\ngraph G {{ @input {{ {decls} }} @output {{ {outputs} }} @compose {{ {body} }} }}"
    return compose(text, file="image.sknd").run(inputs, backend=backend)


# ------------------------------------------------------------------------------------------------
# ROI pools


def round_half_away(v: float) -> int:
    return int(math.floor(v + 0.5)) if v >= 0 else -int(math.floor(-v + 0.5))


def roi_pool_reference(x, rois, index, output_size, kind):
    spatial = x.shape[2:]
    d = len(spatial)
    out = np.zeros((rois.shape[0], x.shape[1], *output_size), np.float64)
    for r in range(rois.shape[0]):
        if not 0 <= index[r] < x.shape[0]:
            continue
        starts = [round_half_away(float(rois[r, a])) for a in range(d)]
        ends = [round_half_away(float(rois[r, d + a])) for a in range(d)]
        for p in itertools.product(*(range(o) for o in output_size)):
            window = []
            for a in range(d):
                e = max(ends[a] - starts[a] + 1, 1)
                low = max(starts[a] + (p[a] * e) // output_size[a], 0)
                high = min(starts[a] - ((-(p[a] + 1) * e) // output_size[a]), spatial[a])  # ceil
                window.append(slice(low, max(high, low)))  # a bin before the input is empty
            values = x[index[r]][(slice(None), *window)].reshape(x.shape[1], -1)
            if values.shape[1] == 0:
                continue
            out[(r, slice(None), *p)] = values.max(1) if kind == "max" else values.mean(1)
    return out


def random_rois(count: int, spatial: tuple[int, ...]) -> np.ndarray:
    """Regions inside, across and outside the input, some given with end < start."""
    d = len(spatial)
    starts = np.stack([RNG.uniform(-2, s + 1, count) for s in spatial], 1)
    sizes = np.stack([RNG.uniform(-1.5, s, count) for s in spatial], 1)
    return np.concatenate([starts, starts + sizes], 1).astype(np.float32).reshape(count, 2 * d)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize(
    ("shape", "output_size"),
    [((2, 3, 8, 9), (2, 3)), ((1, 2, 11), (4,)), ((3, 1, 6, 5), (3, 3)), ((1, 2, 4, 5, 3), (2, 2, 1))],
)
def test_roi_pools_match_their_definition(backend, kind, shape, output_size):
    # avg on C found a GCC 12.2 -O3 miscompile (nested sums of gated terms): the C backend passes
    # -fno-tree-loop-if-convert to GCC since (uopviz.backends.c.GCC_WORKAROUND_FLAG)
    x = RNG.standard_normal(shape).astype(np.float32)
    count = 5
    rois = random_rois(count, shape[2:])
    index = RNG.integers(0, shape[0], count).astype(np.int32)
    index[-1] = shape[0]  # an index outside the batch: zeros
    sizes = ", ".join(map(str, output_size))
    out = run(
        f"y = image.{kind}_roi_pool{{output_size=[{sizes}]}}(x, rois, index);",
        {"x": x, "rois": rois, "index": index},
        "y: real;",
        backend,
    )["y"]
    expected = roi_pool_reference(x, rois, index, output_size, kind)
    assert out.shape == (count, shape[1], *output_size)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    assert not out[-1].any()


def test_roi_pool_bins_of_a_whole_image_are_its_pooling_windows():
    x = RNG.standard_normal((1, 2, 6, 6)).astype(np.float32)
    rois = np.array([[0, 0, 5, 5]], np.float32)  # the whole image in 2x3 bins of 3x2 elements
    out = run(
        "m = image.max_roi_pool{output_size=[2, 3]}(x, rois, index); "
        "a = image.avg_roi_pool{output_size=[2, 3]}(x, rois, index);",
        {"x": x, "rois": rois, "index": np.zeros(1, np.int32)},
        "m: real; a: real;",
        "python",
    )
    blocks = x.reshape(1, 2, 2, 3, 3, 2)
    np.testing.assert_allclose(out["m"], blocks.max((3, 5)), rtol=1e-6)
    np.testing.assert_allclose(out["a"], blocks.mean((3, 5)), rtol=1e-5)


# ------------------------------------------------------------------------------------------------
# cubic grid sampling


def cubic_grid_sample_reference(x, grid, padding, aligned):
    x, grid = x.astype(np.float64), grid.astype(np.float64)
    spatial = x.shape[2:]
    d = len(spatial)
    points = grid.shape[1:-1]
    out = np.zeros((x.shape[0], x.shape[1], *points))
    for b in range(x.shape[0]):
        for point in itertools.product(*(range(z) for z in points)):
            coordinates = []
            for a, s in enumerate(spatial):
                g = (grid[(b, *point, d - 1 - a)] + 1.0) * 0.5  # the last component is the first axis
                coordinates.append(g * (s - 1) if aligned else g * s - 0.5)
            total = np.zeros(x.shape[1])
            for taps in itertools.product(range(4), repeat=d):
                weight, where, inside = 1.0, [], True
                for c, s, tap in zip(coordinates, spatial, taps, strict=True):
                    i = math.floor(c) - 1 + tap
                    weight *= keys(c - i)
                    if padding == "ZEROS":
                        inside = inside and 0 <= i < s
                    elif padding == "REFLECT":  # mirrored about 0 and s - 1 as often as it takes
                        while s > 1 and not 0 <= i < s:
                            i = -i if i < 0 else 2 * (s - 1) - i
                    where.append(min(max(i, 0), s - 1))
                if inside:
                    total += weight * x[(b, slice(None), *where)]
            out[(b, slice(None), *point)] = total
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("padding", ["ZEROS", "REPLICATE", "REFLECT"])
@pytest.mark.parametrize("aligned", [False, True])
@pytest.mark.parametrize(
    ("shape", "points"), [((2, 3, 5, 6), (3, 4)), ((1, 2, 7), (5,)), ((1, 1, 4, 3, 5), (2, 2, 3))]
)
def test_cubic_grid_sample_matches_its_definition(backend, padding, aligned, shape, points):
    d = len(shape) - 2
    x = RNG.standard_normal(shape).astype(np.float32)
    grid = RNG.uniform(-1.25, 1.25, (shape[0], *points, d)).astype(np.float32)
    flag = "true" if aligned else "false"
    out = run(
        f"y = image.grid_sample{{mode='CUBIC', padding='{padding}', aligned={flag}}}(x, grid);",
        {"x": x, "grid": grid},
        "y: real;",
        backend,
    )["y"]
    np.testing.assert_allclose(out, cubic_grid_sample_reference(x, grid, padding, aligned), atol=2e-5)


def test_cubic_grid_sample_reproduces_a_linear_ramp_inside():
    ramp = np.tile(np.arange(6, dtype=np.float32) * 0.5, (1, 1, 4, 1))  # varies along x only
    grid = np.stack(np.meshgrid(np.linspace(-0.4, 0.4, 5), np.linspace(-0.5, 0.5, 3)), -1)[None]
    out = run(
        "y = image.grid_sample{mode='CUBIC', padding='REPLICATE', aligned=true}(x, grid);",
        {"x": ramp, "grid": grid.astype(np.float32)},
        "y: real;",
        "python",
    )["y"]
    x_pixels = (np.linspace(-0.4, 0.4, 5) + 1) * 0.5 * 5
    np.testing.assert_allclose(out[0, 0], np.tile(x_pixels * 0.5, (3, 1)), atol=1e-5)


# ------------------------------------------------------------------------------------------------
# nearest_resize with FLOOR rounding (the spec's formula indexes element -1 here)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("size", "target"), [(2, 4), (3, 7), (5, 5), (6, 4)])
def test_nearest_resize_floor_stays_inside_when_upsampling(backend, size, target):
    x = RNG.standard_normal((1, size)).astype(np.float32)
    out = run(
        f"y = image.nearest_resize{{axes=[1], size=[{target}], rounding_method='FLOOR'}}(x);",
        {"x": x},
        "y: real;",
        backend,
    )["y"]
    scale = np.float32(size / target)
    position = np.arange(target, dtype=np.float32) * scale + (np.float32(0.5) * scale - np.float32(0.5))
    source = np.clip(np.floor(position).astype(int), 0, size - 1)
    if size < target:
        assert np.floor(position[0]) == -1  # what the spec's formula would read
    np.testing.assert_array_equal(out, x[:, source])
