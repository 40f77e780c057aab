"""Reflection for any index (the spec's formulas reflect once).

The spec remaps REFLECT with ``|i <> -i : 2 * (s - 1) - i|`` (pad, nearest and linear grid sampling)
and SYMMETRIC with ``|i <> -i - 1 : 2 * (s - 1) - i + 1|`` (pad): one reflection, which still
indexes outside the input further out. Both formulas mirror about fixed points (the border elements
0 and s - 1 for REFLECT, whatever ``aligned`` chose for the coordinate mapping; the borders -1/2 and
s - 1/2 for SYMMETRIC), so repeating them is periodic: period 2 * (s - 1) for REFLECT, 2 * s for
SYMMETRIC. The stdlib folds the index into one period. The references here reflect step by step,
as often as it takes, and are compared on pads wider than the input and grid coordinates far
outside it, for the nearest, linear and cubic samplers, on the python and C backends.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from image_references import keys

import uopviz as uv
from uopviz.nnef.composition.composer import compose

BACKENDS = [name for name in ("python", "c") if name in uv.backends.available()]
RNG = np.random.default_rng(5)


def reflect_step_by_step(i: int, s: int) -> int:
    """Mirror about 0 and s - 1 until inside (the spec's one reflection, repeated)."""
    if s == 1:
        return 0
    while not 0 <= i < s:
        i = -i if i < 0 else 2 * (s - 1) - i
    return i


def round_half_away(x: float) -> int:
    return int(math.floor(x + 0.5)) if x >= 0 else -int(math.floor(-x + 0.5))


def grid_sample_reference(x, grid, mode, padding, aligned):
    """The spec's grid sampling, point by point: the grid's last dimension holds the coordinates in
    reversed axis order, mapped from [-1, 1] to pixels; nearest rounds half away from zero, linear
    takes floor(x) and floor(x) + 1, cubic floor(x) - 1 .. floor(x) + 2 with Keys' weights."""
    x, grid = x.astype(np.float64), grid.astype(np.float64)
    spatial = x.shape[2:]
    d = len(spatial)
    out = np.zeros((x.shape[0], x.shape[1], *grid.shape[1:-1]))
    taps = {"NEAREST": [0], "LINEAR": [0, 1], "CUBIC": [-1, 0, 1, 2]}[mode]
    for b in range(x.shape[0]):
        for point in itertools.product(*(range(z) for z in grid.shape[1:-1])):
            coordinates = []
            for a, s in enumerate(spatial):
                g = (grid[(b, *point, d - 1 - a)] + 1.0) * 0.5
                coordinates.append(g * (s - 1) if aligned else g * s - 0.5)
            total = np.zeros(x.shape[1])
            for chosen in itertools.product(taps, repeat=d):
                weight, where, inside = 1.0, [], True
                for c, s, tap in zip(coordinates, spatial, chosen, strict=True):
                    if mode == "NEAREST":
                        i = round_half_away(c)
                    else:
                        i = math.floor(c) + tap
                        weight *= 1.0 - abs(i - c) if mode == "LINEAR" else keys(c - i)
                    if padding == "ZEROS":
                        inside = inside and 0 <= i < s
                    elif padding == "REFLECT":
                        i = reflect_step_by_step(i, s)
                    where.append(min(max(i, 0), s - 1))
                if inside:
                    total += weight * x[(b, slice(None), *where)]
            out[(b, slice(None), *point)] = total
    return out


def test_the_step_by_step_reference_reflects_as_numpy_pads():
    for s in range(1, 6):
        row = np.arange(s)
        padded = np.pad(row, 13, "reflect")
        assert [row[reflect_step_by_step(i, s)] for i in range(-13, s + 13)] == padded.tolist()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_pad_reflects_and_mirrors_any_distance(backend, n):
    x = RNG.standard_normal((3, n)).astype(np.float32)
    pads = (2 * n + 5, 3 * n + 2)  # wider than the input: several reflections
    methods = {"REFLECT": "reflect", "SYMMETRIC": "symmetric", "REPLICATE": "edge"}
    body = " ".join(
        f"{name.lower()} = layout.pad{{axes=[1], padding=[{pads[0]}, {pads[1]}], method='{name}'}}(x);"
        for name in methods
    )
    text = (
        f"import layout; graph G {{ @input {{ x: real[3, {n}]; }} "
        f"@output {{ reflect: real; symmetric: real; replicate: real; }} @compose {{ {body} }} }}"
    )
    out = compose(text, file="pad.sknd").run({"x": x}, backend=backend)
    for name, mode in methods.items():
        np.testing.assert_array_equal(out[name.lower()], np.pad(x, [(0, 0), pads], mode), err_msg=name)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["NEAREST", "LINEAR", "CUBIC"])
@pytest.mark.parametrize(
    ("shape", "points"),
    [((1, 2, 4, 5), (3, 4)), ((2, 1, 6), (7,)), ((1, 1, 1, 3), (2, 3)), ((1, 2, 2, 3, 2), (2, 2, 2))],
)
def test_grid_sample_reflects_coordinates_far_outside(backend, mode, shape, points):
    d = len(shape) - 2
    x = RNG.standard_normal(shape).astype(np.float32)
    grid = RNG.uniform(-7.0, 7.0, (shape[0], *points, d)).astype(np.float32)  # up to 4 widths away
    decls = f"x: real[{', '.join(map(str, shape))}]; grid: real[{', '.join(map(str, grid.shape))}];"
    body = " ".join(
        f"{padding.lower()}{int(aligned)} = image.grid_sample{{mode='{mode}', padding='{padding}', "
        f"aligned={'true' if aligned else 'false'}}}(x, grid);"
        for padding in ("REFLECT", "ZEROS", "REPLICATE")
        for aligned in (False, True)
    )
    outputs = " ".join(f"{p}{a}: real;" for p in ("reflect", "zeros", "replicate") for a in (0, 1))
    text = f"import image; graph G {{ @input {{ {decls} }} @output {{ {outputs} }} @compose {{ {body} }} }}"
    out = compose(text, file="grid.sknd").run({"x": x, "grid": grid}, backend=backend)
    for padding in ("REFLECT", "ZEROS", "REPLICATE"):
        for aligned in (False, True):
            expected = grid_sample_reference(x, grid, mode, padding, aligned)
            np.testing.assert_allclose(
                out[f"{padding.lower()}{int(aligned)}"], expected, atol=3e-5, err_msg=f"{padding} {aligned}"
            )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["LINEAR", "CUBIC"])
def test_grid_sample_reflects_within_a_counted_extent(backend, mode):
    # the input's last axis is counted at run time: the reflection period follows the actual extent
    text = """import image; import layout;
operator compress {
    @input { x: real[n]; }
    @output { y: real[k|n]; }
    @lower { y[k] = x[i,], i < n | x[i,] > 0.0; }
}
graph G { @input { v: real[9]; grid: real[1, 2, 5, 2]; } @output { y: real; }
    @compose { c = compress(v); u = layout.unsqueeze{axes=[0, 1, 2]}(c);
               y = image.grid_sample{mode='MODE', padding='REFLECT'}(u, grid); } }""".replace("MODE", mode)
    g = compose(text, file="grid.sknd")
    grid = RNG.uniform(-5.0, 5.0, (1, 2, 5, 2)).astype(np.float32)
    for count in (1, 2, 4, 9):
        v = -np.ones(9, np.float32)
        v[np.sort(RNG.choice(9, count, replace=False))] = RNG.uniform(0.5, 2.0, count)
        selected = v[v > 0].reshape(1, 1, 1, count)
        out = g.run({"v": v, "grid": grid}, backend=backend)["y"]
        np.testing.assert_allclose(
            out, grid_sample_reference(selected, grid, mode, "REFLECT", False), atol=3e-5
        )
