"""Shape expressions computed at run time (§3.1) and operators over extents the data decides.

After ``layout.nonzero`` (or a compress-like operator written here with a counted output, §2.12),
``math.mean_reduce`` divides by ``real(s[axes] * ..)`` of a counted extent: the composer makes that
divisor a ``runtime.scalar`` operation whose kernel reads the counter. ``math.cumsum`` unstacks its
axis in the spec's composition, which needs the extent at compile time: over a counted extent it
uses its ``@lower`` formula. Operators that declare constants shaped by such an extent (avg_pool's
``ones``) allocate them at the upper bound. Every result is compared with numpy on the selected
data, for several shapes and data patterns (none selected included: the mean of nothing is NaN,
0.0 / 0.0 in IEEE arithmetic, as numpy gives), on the python and C backends.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from counted_graphs import counted_graph
from image_references import keys

import uopviz as uv
from uopviz import Ops
from uopviz.nnef import NNEFError
from uopviz.nnef.graph import RuntimeScalarOperation

BACKENDS = [name for name in ("python", "c") if name in uv.backends.available()]
RNG = np.random.default_rng(31)


def graph_of(inputs: str, outputs: str, body: str, extra: str = ""):
    imports = ("math", "layout", "nn", "image")
    return counted_graph(inputs, outputs, body, imports=imports, file="runtime.sknd", extra=extra)


def vectors(n: int) -> list[np.ndarray]:
    """About half positive, all positive, none positive, one positive."""
    some = RNG.standard_normal(n).astype(np.float32)
    one = -np.abs(RNG.standard_normal(n)).astype(np.float32) - 0.1
    one[RNG.integers(n)] = 1.5
    return [some, RNG.uniform(0.5, 3.0, n).astype(np.float32), -np.ones(n, np.float32), one]


def numpy_mean(a: np.ndarray, axis, keepdims: bool) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy warns about the mean of nothing
        return np.mean(a, axis=axis, keepdims=keepdims)


# ------------------------------------------------------------------------------------------------
# mean_reduce, moments, mean_variance_norm


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [1, 6, 13])
def test_mean_reduce_divides_by_the_counted_extent(backend, n):
    g = graph_of(
        f"v: real[{n}];",
        "m: real; s: real; rows: real; cols: real; both: real;",
        "c = compress(v); m = math.mean_reduce(c); s = math.mean_reduce{squeeze=true}(c); "
        "d = math.mul(c, 3.0); t = layout.stack{axis=0}([c, d]); "
        "rows = math.mean_reduce{axes=[1]}(t); cols = math.mean_reduce{axes=[0], squeeze=true}(t); "
        "both = math.mean_reduce{axes=[0, 1]}(t);",
    )
    scalars = [op for op in g.operations if isinstance(op, RuntimeScalarOperation)]
    assert len(scalars) == 4 and {op.category for op in scalars} == {"run-time shape"}
    assert repr(scalars[0].attribs["value"]) == "~real(c.k)"
    assert repr(scalars[-1].attribs["value"]) == "~real((2 * c.k))"
    for v in vectors(n):
        c = v[v > 0]
        t = np.stack([c, c * 3])
        out = g.run({"v": v}, backend=backend)
        np.testing.assert_allclose(out["m"], numpy_mean(c, None, False).reshape(1), rtol=1e-6)
        np.testing.assert_allclose(out["s"], numpy_mean(c, None, False), rtol=1e-6)
        np.testing.assert_allclose(out["rows"], numpy_mean(t, 1, True), rtol=1e-6)
        np.testing.assert_allclose(out["cols"], numpy_mean(t, 0, False), rtol=1e-6)
        np.testing.assert_allclose(out["both"], numpy_mean(t, (0, 1), True), rtol=1e-6)
        assert np.isnan(out["m"]).all() == (c.size == 0)  # the mean of nothing: NaN, as numpy's


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(3, 4), (2, 2, 3)])
def test_mean_over_the_points_nonzero_counts(backend, shape):
    g = graph_of(
        f"x: real[{', '.join(map(str, shape))}];",
        "m: real; var: real; mean: real;",
        "i = layout.nonzero(x); r = layout.cast<real>(i); m = math.mean_reduce{axes=[1]}(r); "
        "mean, var = math.moments{axes=[1]}(r);",
    )
    for x in (RNG.standard_normal(shape) * (RNG.random(shape) < 0.4), np.zeros(shape)):
        x = x.astype(np.float32)
        index = np.stack(np.nonzero(x)).astype(np.float64).reshape(len(shape), -1)
        out = g.run({"x": x}, backend=backend)
        np.testing.assert_allclose(out["m"], numpy_mean(index, 1, True), rtol=1e-6)
        np.testing.assert_allclose(out["mean"], numpy_mean(index, 1, True), rtol=1e-6)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            np.testing.assert_allclose(out["var"], index.var(1, keepdims=True), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_mean_variance_norm_over_a_counted_spatial_extent(backend):
    g = graph_of(
        "v: real[10];",
        "y: real;",
        "c = compress(v); d = math.sqr(c); t = layout.stack{axis=0}([c, d]); "
        "u = layout.unsqueeze{axes=[0]}(t); "
        "y = nn.mean_variance_norm(u);",
    )
    for v in vectors(10)[:2] + [vectors(10)[3]]:
        c = v[v > 0].astype(np.float64)
        u = np.stack([c, c * c])[None]
        mean = u.mean(2, keepdims=True)
        expected = (u - mean) / np.sqrt(((u - mean) ** 2).mean(2, keepdims=True) + 1e-5)
        out = g.run({"v": v}, backend=backend)["y"]
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------------------------------------
# cumsum


def numpy_cumsum(a: np.ndarray, axis: int, exclusive: bool, reverse: bool) -> np.ndarray:
    """The scan in float64: `cumsum - a` in float32 cancels, and its error is no reference."""
    a = np.flip(a.astype(np.float64), axis) if reverse else a.astype(np.float64)
    out = np.cumsum(a, axis=axis)
    if exclusive:
        out = out - a
    return np.flip(out, axis) if reverse else out


def assert_scan_close(actual: np.ndarray, expected: np.ndarray, terms: np.ndarray) -> None:
    """A float32 running sum is exact to a few ulps of the sum of its terms' magnitudes, not of its
    value (a partial sum near zero has no relative accuracy)."""
    scale = float(np.abs(terms).sum()) if terms.size else 0.0
    np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=4 * np.finfo(np.float32).eps * scale)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [1, 7, 12])
def test_cumsum_runs_over_the_counted_extent(backend, n):
    variants = [(e, r) for e in (False, True) for r in (False, True)]
    body = "c = compress(v); d = math.mul(c, -2.0); t = layout.stack{axis=1}([c, d]); "
    outputs = []
    for index, (exclusive, reverse) in enumerate(variants):
        flags = f"exclusive={'true' if exclusive else 'false'}, reverse={'true' if reverse else 'false'}"
        body += (
            f"a{index} = math.cumsum{{axis=0, {flags}}}(c); "
            f"k{index} = math.cumsum{{axis=-2, {flags}}}(t); s{index} = math.cumsum{{axis=1, {flags}}}(t); "
        )
        outputs += [f"a{index}", f"k{index}", f"s{index}"]
    g = graph_of(f"v: real[{n}];", " ".join(f"{name}: real;" for name in outputs), body)
    assert [op.type for op in g.operations].count("math.cumsum") == 3 * len(variants)  # its @lower form
    for v in vectors(n):
        c = v[v > 0]
        t = np.stack([c, -2 * c], axis=1)
        out = g.run({"v": v}, backend=backend)
        for index, (exclusive, reverse) in enumerate(variants):
            assert_scan_close(out[f"a{index}"], numpy_cumsum(c, 0, exclusive, reverse), c)
            assert_scan_close(out[f"k{index}"], numpy_cumsum(t, 0, exclusive, reverse), t)
            assert_scan_close(out[f"s{index}"], numpy_cumsum(t, 1, exclusive, reverse), t)


def test_cumsum_over_a_counted_extent_adds_in_the_order_of_the_spec_loop():
    # forward: ((x0 + x1) + x2) ...; reverse: ((x[n-1] + x[n-2]) + ...): float sums equal bit for bit
    g = graph_of(
        "v: real[64];",
        "f: real; r: real;",
        "c = compress(v); f = math.cumsum{axis=0}(c); r = math.cumsum{axis=0, reverse=true}(c);",
    )
    v = (RNG.uniform(0.01, 1.0, 64) * 10.0 ** RNG.integers(-4, 5, 64)).astype(np.float32)
    out = g.run({"v": v})
    forward, backward = np.zeros(64, np.float32), np.zeros(64, np.float32)
    total = np.float32(0)
    for i in range(64):
        total = np.float32(total + v[i])
        forward[i] = total
    total = np.float32(0)
    for i in range(63, -1, -1):
        total = np.float32(total + v[i])
        backward[i] = total
    np.testing.assert_array_equal(out["f"], forward)
    np.testing.assert_array_equal(out["r"], backward)


def test_cumsum_of_a_static_extent_keeps_the_spec_composition():
    g = graph_of("x: real[2, 3];", "y: real;", "y = math.cumsum{axis=1, reverse=true}(x);")
    types = [op.type for op in g.operations]
    assert types.count("layout.unstack") == 1 and types.count("math.add") == 3 and "math.cumsum" not in types
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    assert_scan_close(g.run({"x": x})["y"], numpy_cumsum(x, 1, False, True), x)


# ------------------------------------------------------------------------------------------------
# pooling and normalisation with constants shaped by a counted extent


@pytest.mark.parametrize("backend", BACKENDS)
def test_pools_over_a_counted_extent(backend):
    g = graph_of(
        "v: real[11];",
        "a: real; r: real; m: real;",
        "c = compress(v); u = layout.unsqueeze{axes=[0, 1]}(c); "
        "a = nn.avg_pool{axes=[2], size=[3], stride=[2]}(u); r = nn.rms_pool{axes=[2], size=[2]}(u); "
        "m = nn.max_pool{axes=[2], size=[2], padding=[0, 0]}(u);",
    )
    assert g.tensors["a.ones"].shape[2].bound == 11 and g.tensors["a.ones"].data.shape == (1, 1, 11)
    for k in (3, 6, 10, 11):
        v = -np.ones(11, np.float32)
        v[np.sort(RNG.choice(11, k, replace=False))] = RNG.uniform(0.1, 3.0, k)
        c = v[v > 0].astype(np.float64)
        out = g.run({"v": v}, backend=backend)
        # avg_pool, size 3, stride 2: the spec's auto padding ((k / 2 - 1) * 2 + 3 - k, its lower
        # part (p / 2) before the data), border ignored: the mean of the elements inside each window
        total = (k // 2 - 1) * 2 + 3 - k
        padded = np.concatenate([[np.nan] * (total // 2), c, [np.nan] * (total - total // 2)])
        expected = [np.nanmean(padded[2 * p : 2 * p + 3]) for p in range((k + total - 3) // 2 + 1)]
        np.testing.assert_allclose(out["a"].ravel(), expected, rtol=1e-5)
        squares = np.concatenate([c * c, [0.0]])  # size 2, stride 1: one padded element at the end
        counts = np.array([2.0] * (k - 1) + [1.0])  # ignored border: the last window holds one element
        np.testing.assert_allclose(
            out["r"].ravel(), np.sqrt((squares[:-1] + squares[1:]) / counts), rtol=1e-5
        )
        np.testing.assert_allclose(out["m"].ravel(), np.maximum(c[:-1], c[1:]), rtol=1e-6)


# ------------------------------------------------------------------------------------------------
# resizing an axis whose extent is counted: the scale is a run-time value


def resize_reference(x: np.ndarray, size: int, mode: str, transform: str) -> np.ndarray:
    """1-D resizing as the stdlib defines it: position o * scale + offset; linear weights
    1 - |r - i| over floor(r) and floor(r) + 1, cubic Keys weights over floor(r) - 1 .. floor(r) + 2;
    taps outside replicate the border."""
    e = x.size
    if transform == "ALIGNED":
        scale, offset = (0.0 if size <= 1 else (e - 1) / (size - 1)), 0.0
    else:
        scale = e / size
        offset = 0.5 * scale - 0.5 if transform == "SYMMETRIC" else 0.0
    out = np.zeros(size)
    for o in range(size):
        r = o * scale + offset
        base = int(np.floor(r))
        taps = [base, base + 1] if mode == "linear" else [base - 1, base, base + 1, base + 2]
        for i in taps:
            weight = 1.0 - abs(r - i) if mode == "linear" else keys(r - i)
            out[o] += weight * x[min(max(i, 0), e - 1)]
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("transform", ["SYMMETRIC", "ASYMMETRIC", "ALIGNED"])
def test_resizing_a_counted_axis(backend, transform):
    size = 7
    g = graph_of(
        "v: real[9];",
        "c3: real; l1: real;",
        f"c = compress(v); t = layout.stack{{axis=0}}([c, c]); "
        f"c3 = image.cubic_resize{{axes=[1], size=[{size}], coordinate_transform='{transform}'}}(t); "
        f"l1 = image.linear_resize{{axes=[1], size=[{size}], coordinate_transform='{transform}'}}(t);",
    )
    for count in (1, 3, 9):
        v = -np.ones(9, np.float32)
        v[np.sort(RNG.choice(9, count, replace=False))] = RNG.uniform(0.5, 4.0, count)
        c = v[v > 0].astype(np.float64)
        out = g.run({"v": v}, backend=backend)
        for name, mode in (("c3", "cubic"), ("l1", "linear")):
            expected = np.stack([resize_reference(c, size, mode, transform)] * 2)
            np.testing.assert_allclose(out[name], expected, rtol=1e-5, atol=1e-5, err_msg=f"{name} {count}")


def nearest_reference(x: np.ndarray, size: int, transform: str) -> np.ndarray:
    """nearest_resize with its default rounding (ROUND_PREFER_FLOOR: ceil(r - 1/2)), clamped."""
    e = x.size
    if transform == "ALIGNED":
        scale, offset = (0.0 if size <= 1 else (e - 1) / (size - 1)), 0.0
    else:
        scale = e / size
        offset = 0.5 * scale - 0.5 if transform == "SYMMETRIC" else 0.0
    source = [min(max(int(np.ceil(o * scale + offset - 0.5)), 0), e - 1) for o in range(size)]
    return x[source]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode", ["NEAREST", "LINEAR", "CUBIC"])
@pytest.mark.parametrize("transform", ["ASYMMETRIC", "ALIGNED"])
def test_rescaling_a_counted_axis_gives_a_run_time_extent(backend, mode, transform):
    # the size is int(round(real(s) * factor)) of the counted extent: an extent computed at run time,
    # bounded by the same expression at the extent's bound; ALIGNED's 'size <= 1 ? 0.0 : ...' is a
    # choice made at run time
    factors = (0.5, 1.5, 2.0)
    g = graph_of(
        "v: real[8];",
        " ".join(f"r{i}: real;" for i in range(len(factors))),
        "c = compress(v); "
        + " ".join(
            f"r{i} = image.rescale{{axes=[0], factor=[{f}], mode='{mode}', "
            f"coordinate_transform='{transform}'}}(c);"
            for i, f in enumerate(factors)
        ),
    )
    extent = g.tensors["r1"].shape[0]
    assert repr(extent) == "~int(round((real(c.k) * 1.5)))|12"  # the bound: round(8 * 1.5)
    for count in (1, 2, 5, 8):
        v = -np.ones(8, np.float32)
        v[np.sort(RNG.choice(8, count, replace=False))] = RNG.uniform(0.5, 4.0, count)
        c = v[v > 0].astype(np.float64)
        out = g.run({"v": v}, backend=backend)
        for i, factor in enumerate(factors):
            size = int(np.floor(count * factor + 0.5))  # round, halves away from zero
            if mode == "NEAREST":
                expected = nearest_reference(c, size, transform)
            else:
                expected = resize_reference(c, size, mode.lower(), transform)
            np.testing.assert_allclose(
                out[f"r{i}"], expected, rtol=1e-5, atol=1e-5, err_msg=f"{factor} {count}"
            )


# ------------------------------------------------------------------------------------------------
# what cannot follow an extent decided at run time


def test_a_pack_cannot_follow_a_counted_extent():
    with pytest.raises(NNEFError, match="a pack's length cannot follow an extent the data decides"):
        graph_of(
            "v: real[5];",
            "y: real;",
            "c = compress(v); parts..(n) = layout.unstack{axis=0}(c); y = parts[0];",
        )


def test_a_constant_that_needs_a_run_time_value_is_refused():
    extra = """operator scaled {
    @input { x: real[n]; }
    @output { y: real[n]; }
    @constant { w: real[n] = real(n); }
    @compose { y = math.mul(x, w); }
}
"""
    with pytest.raises(NNEFError, match="depends on the run-time value ~real\\(c.k\\)"):
        graph_of("v: real[5];", "y: real;", "c = compress(v); y = scaled(c);", extra)


def test_the_run_time_scalar_kernel_reads_the_counter():
    g = graph_of("v: real[7];", "m: real;", "c = compress(v); m = math.mean_reduce(c);")
    (scalar,) = [op for op in g.operations if op.type == "runtime.scalar"]
    assert scalar.inputs == () and g.tensors[scalar.outputs[0]].shape == ()
    assert "c.k" in scalar.definition_text()
    (kernel,) = g.lower(scalar)
    assert kernel.buffers == [scalar.outputs[0], "c#count"]
    loads = [u for u in kernel.ast.toposort() if u.op is Ops.LOAD]
    assert len(loads) == 1 and loads[0].src[0].src[0].arg.slot == 1
    divide = g.operations[-1]
    assert divide.type == "math.div" and scalar.outputs[0] in divide.input_names()


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_extent_used_as_a_value_is_computed_at_run_time(backend):
    g = graph_of(
        "v: real[9];",
        "k: int; scaled: real; shifted: int;",
        "c = compress(v); k = c.shape[0]; scaled = math.mul(c, c.shape[0]); "
        "i = layout.nonzero(c); shifted = math.add(i, c.shape[0]);",
    )
    assert [op.type for op in g.operations].count("runtime.scalar") == 3
    assert g.tensors["k"].dtype == "int" and g.tensors["k"].shape == ()
    for v in vectors(9):
        c = v[v > 0]
        out = g.run({"v": v}, backend=backend)
        assert int(out["k"]) == c.size
        np.testing.assert_allclose(out["scaled"], c * c.size, rtol=1e-6)
        np.testing.assert_array_equal(out["shifted"], np.arange(c.size).reshape(1, -1) + c.size)
