"""The whole NNEF 1.0 standard fragment list, borders, multi-axis arg-reductions, every
multilinear_upsample method, graph files with fragments of their own and the quantisation file
(graph.quant), each run on every CPU backend against numpy references written here from the 1.0
definitions (the stdlib text of the ``nnef`` package: ``nnef/cpp/include/nnef/comp/stdlib_source.h``).

Conventions uopviz fixes where the 1.0 text is silent (uopviz/nnef/nnef1/loader.py, nnef1.sknd say why):
argmax_pool's index is the flat (row-major) position inside the window; ROI rows are
``[start.., end..]`` along the spatial axes, as SkriptND's ROI pools read them.
"""

from __future__ import annotations

import itertools
import math

import nnef
import numpy as np
import pytest
from test_image_intrinsics import roi_pool_reference

import uopviz as uv
from uopviz.nnef import NNEFError
from uopviz.nnef.nnef1.loader import SUPPORTED, loads_nnef1

CPU_BACKENDS = [name for name in ("python", "c", "llvm", "opencl") if name in uv.backends.available()]
RNG = np.random.default_rng(1012)
NUMPY_MODES = {"reflect": "reflect", "replicate": "edge", "reflect-even": "symmetric"}


def real(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def run(text: str, inputs: dict, backend: str, variables: dict | None = None) -> dict:
    return loads_nnef1(text, variables).run(inputs, backend=backend)


def check(out: dict, expected: dict, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    for name, value in expected.items():
        assert out[name].shape == value.shape, (name, out[name].shape, value.shape)
        np.testing.assert_allclose(out[name], value, rtol=rtol, atol=atol, err_msg=name)


# ------------------------------------------------------------------------------------------------
# numpy references


def same_padding(shape, size, stride, dilation):
    pairs = []
    for extent, k, s, d in zip(shape, size, stride, dilation, strict=True):
        total = max((-(-extent // s) - 1) * s + (k - 1) * d + 1 - extent, 0)
        pairs.append((total // 2, total - total // 2))
    return pairs


def padded(x, pairs, border, value=0.0):
    if border in NUMPY_MODES:
        return np.pad(x, pairs, mode=NUMPY_MODES[border])
    return np.pad(x, pairs, constant_values=value)


def windows(x, size, stride, dilation):
    """The elements of every window of an (already padded) array: shape out + [volume]."""
    out = [(e - (k - 1) * d - 1) // s + 1 for e, k, s, d in zip(x.shape, size, stride, dilation, strict=True)]
    parts = []
    for offset in itertools.product(*(range(k) for k in size)):
        index = tuple(
            slice(o * d, o * d + (n - 1) * s + 1, s)
            for o, d, n, s in zip(offset, dilation, out, stride, strict=True)
        )
        parts.append(x[index])
    return np.stack(parts, -1)


def conv(x, w, bias=0.0, pairs=None, stride=None, groups=1, border="constant"):
    """NNEF 1.0 conv (NCHW..., filter [O, C/groups, k...]); groups 0 is plane-wise."""
    d = x.ndim - 2
    stride = stride or [1] * d
    groups = x.shape[1] if groups == 0 else groups
    pairs = pairs or same_padding(x.shape[2:], w.shape[2:], stride, [1] * d)
    xp = padded(x, [(0, 0), (0, 0)] + list(pairs), border)
    per_group_in, per_group_out = x.shape[1] // groups, w.shape[0] // groups
    outs = []
    for g in range(groups):
        xs = xp[:, g * per_group_in : (g + 1) * per_group_in]
        ws = w[g * per_group_out : (g + 1) * per_group_out]
        win = windows(xs, [xs.shape[0], xs.shape[1], *ws.shape[2:]], [1, 1, *stride], [1] * (d + 2))
        win = win.reshape(*win.shape[2:-1], xs.shape[0], xs.shape[1], *ws.shape[2:])
        outs.append(np.einsum("...nc" + "xyz"[:d] + ",oc" + "xyz"[:d] + "->no...", win, ws))
    return np.concatenate(outs, 1) + np.asarray(bias).reshape(1, -1, *[1] * d)


def deconv(x, w, stride, groups=1):
    """NNEF 1.0 deconv without padding (filter [C_in, C_out/groups, k...])."""
    groups = x.shape[1] if groups == 0 else groups
    per_in, per_out = x.shape[1] // groups, w.shape[1]
    size = [(e - 1) * s + k for e, s, k in zip(x.shape[2:], stride, w.shape[2:], strict=True)]
    out = np.zeros((x.shape[0], per_out * groups, *size), np.float64)
    for position in itertools.product(*(range(e) for e in x.shape[2:])):
        where = tuple(slice(p * s, p * s + k) for p, s, k in zip(position, stride, w.shape[2:], strict=True))
        for g in range(groups):
            value = x[(slice(None), slice(g * per_in, (g + 1) * per_in), *position)]
            contribution = np.einsum("nc,co...->no...", value, w[g * per_in : (g + 1) * per_in])
            out[(slice(None), slice(g * per_out, (g + 1) * per_out), *where)] += contribution
    return out


def pool(x, kind, size, stride, pairs, border):
    fill = {"max": -np.inf, "sum": 0.0, "avg": 0.0}[kind] if border == "ignore" else 0.0
    win = windows(padded(x, pairs, border, fill), size, stride, [1] * x.ndim)
    if kind == "max":
        return win.max(-1)
    total = win.sum(-1)
    if kind == "sum":
        return total
    if border == "ignore":
        ones = windows(np.pad(np.ones_like(x), pairs), size, stride, [1] * x.ndim)
        return total / ones.sum(-1)
    return total / math.prod(size)


def upsample_axis(x, axis, factor, method, border):
    n = x.shape[axis]
    o = np.arange(n * factor, dtype=np.float64)
    if method == "symmetric":
        c = (o + 0.5) / factor - 0.5
    elif method == "asymmetric":
        c = o / factor
    else:
        c = o * (n - 1) / (n * factor - 1)
    low = np.floor(c).astype(int)
    weight = c - low

    def take(index):
        inside = (index >= 0) & (index < n)
        if border == "replicate":
            index = np.clip(index, 0, n - 1)
        elif border == "reflect":
            index = np.where(index < 0, -index, np.where(index >= n, 2 * n - 2 - index, index))
        elif border == "reflect-even":
            index = np.where(index < 0, -index - 1, np.where(index >= n, 2 * n - 1 - index, index))
        values = np.take(x, np.clip(index, 0, n - 1), axis=axis)
        if border == "constant":
            shape = [1] * x.ndim
            shape[axis] = len(index)
            values = values * inside.reshape(shape)
        return values

    shape = [1] * x.ndim
    shape[axis] = len(o)
    weight = weight.reshape(shape)
    return take(low) * (1 - weight) + take(low + 1) * weight


def roi_resample(x, rois, index, output_size, method):
    n, c = len(rois), x.shape[1]
    out = np.zeros((n, c, *output_size))
    d = len(output_size)
    for r in range(n):
        start, end = rois[r, :d].astype(np.float64), rois[r, d:].astype(np.float64)
        for z in itertools.product(*(range(o) for o in output_size)):
            z = np.array(z, np.float64)
            extent = end - start
            size = np.array(output_size, np.float64)
            if method == "symmetric":
                point = start + (z + 0.5) * extent / size - 0.5
            elif method == "asymmetric":
                point = start + z * extent / size
            else:
                point = start + z * extent / np.maximum(size - 1, 1)
            low = np.floor(point).astype(int)
            total = np.zeros(c)
            for corner in itertools.product((0, 1), repeat=d):
                tap = low + np.array(corner)
                weight = np.prod(1 - np.abs(tap - point))
                if all(0 <= t < e for t, e in zip(tap, x.shape[2:], strict=True)):
                    total += weight * x[(index[r], slice(None), *tap)]
            out[(r, slice(None), *z.astype(int))] = total
    return out


# ------------------------------------------------------------------------------------------------
# coverage of the standard


def test_every_standard_fragment_the_parser_knows_is_translated():
    parseable = set()
    for name in nnef.StandardOperations:  # the shape table also lists two the parser refuses
        try:
            nnef.parse_string(
                f"version 1.0;\ngraph G( x ) -> ( y ) {{ x = external(shape = [1]); y = {name}(x); }}"
            )
        except nnef.Error as error:
            if "undefined operation" in str(error):
                continue
        parseable.add(name)
    assert parseable - SUPPORTED == set()
    assert {"max_unpool", "avg_unpool"}.isdisjoint(parseable)


# ------------------------------------------------------------------------------------------------
# borders


BORDERS = """
version 1.0;

graph Borders( x ) -> ( c_reflect, c_replicate, c_even, c_ignore, m_reflect, m_ignore, a_replicate,
                        a_ignore, b_even, b_ignore_avg, p_replicate, p_even )
{
    x = external<scalar>(shape = [2, 2, 6, 5]);
    w = variable<scalar>(shape = [3, 2, 3, 3], label = 'w');
    c_reflect = conv(x, w, 0.0, border = 'reflect');
    c_replicate = conv(x, w, 0.0, border = 'replicate', stride = [2, 2]);
    c_even = conv(x, w, 0.0, border = 'reflect-even', padding = [(2, 1), (1, 2)]);
    c_ignore = conv(x, w, 0.0, border = 'ignore');
    m_reflect = max_pool(x, size = [1, 1, 3, 3], stride = [1, 1, 2, 2], border = 'reflect');
    m_ignore = max_pool(x, size = [1, 1, 3, 2], padding = [(0,0), (0,0), (1,1), (1,0)], border = 'ignore');
    a_replicate = avg_pool(x, size = [1, 1, 3, 3], border = 'replicate');
    a_ignore = avg_pool(x, size = [1, 2, 3, 3], stride = [1, 1, 2, 1], border = 'ignore');
    b_even = box(x, size = [1, 1, 2, 3], border = 'reflect-even');
    b_ignore_avg = box(x, size = [1, 1, 3, 3], border = 'ignore', normalize = true);
    p_replicate = pad(x, padding = [(0,0), (1,0), (2,3), (0,1)], border = 'replicate');
    p_even = pad(x, padding = [(0,0), (0,0), (2,3), (3,1)], border = 'reflect-even');
}
"""


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_borders_of_convolution_pooling_and_pad(backend):
    x, w = real(2, 2, 6, 5), real(3, 2, 3, 3)
    out = run(BORDERS, {"x": x}, backend, {"w": w})
    full = lambda size, stride: same_padding(x.shape, size, stride, [1] * 4)  # noqa: E731
    check(
        out,
        {
            "c_reflect": conv(x, w, border="reflect"),
            "c_replicate": conv(x, w, stride=[2, 2], border="replicate"),
            "c_even": conv(x, w, pairs=[(2, 1), (1, 2)], border="reflect-even"),
            "c_ignore": conv(x, w),
            "m_reflect": pool(
                x, "max", [1, 1, 3, 3], [1, 1, 2, 2], full([1, 1, 3, 3], [1, 1, 2, 2]), "reflect"
            ),
            "m_ignore": pool(x, "max", [1, 1, 3, 2], [1] * 4, [(0, 0), (0, 0), (1, 1), (1, 0)], "ignore"),
            "a_replicate": pool(x, "avg", [1, 1, 3, 3], [1] * 4, full([1, 1, 3, 3], [1] * 4), "replicate"),
            "a_ignore": pool(
                x, "avg", [1, 2, 3, 3], [1, 1, 2, 1], full([1, 2, 3, 3], [1, 1, 2, 1]), "ignore"
            ),
            "b_even": pool(x, "sum", [1, 1, 2, 3], [1] * 4, full([1, 1, 2, 3], [1] * 4), "reflect-even"),
            "b_ignore_avg": pool(x, "avg", [1, 1, 3, 3], [1] * 4, full([1, 1, 3, 3], [1] * 4), "ignore"),
            "p_replicate": np.pad(x, [(0, 0), (1, 0), (2, 3), (0, 1)], mode="edge"),
            "p_even": np.pad(x, [(0, 0), (0, 0), (2, 3), (3, 1)], mode="symmetric"),
        },
    )


def test_a_border_outside_the_standard_is_a_clear_error():
    text = BORDERS.replace("border = 'reflect');\n    c_replicate", "border = 'wrap');\n    c_replicate")
    with pytest.raises(NNEFError, match=r"operation \d+ 'conv': border 'wrap' is not supported"):
        loads_nnef1(text, {"w": real(3, 2, 3, 3)})


# ------------------------------------------------------------------------------------------------
# windows with indices: argmax_pool, sample, max_pool_with_index, desample, debox


WINDOWS = """
version 1.0;

graph Windows( x ) -> ( index, picked, value, where, back, spread, spread_same )
{
    x = external<scalar>(shape = [2, 3, 7, 6]);
    index = argmax_pool(x, size = [1, 1, 3, 2], stride = [1, 1, 2, 2],
                        padding = [(0,0), (0,0), (1,1), (0,1)], border = 'ignore');
    picked = sample(x, index, size = [1, 1, 3, 2], stride = [1, 1, 2, 2],
                    padding = [(0,0), (0,0), (1,1), (0,1)], border = 'ignore');
    value, where = max_pool_with_index(x, size = [1, 2, 2, 2], stride = [1, 1, 2, 2], border = 'constant');
    back = desample(value, where, size = [1, 2, 2, 2], stride = [1, 1, 2, 2], output_shape = [2, 3, 7, 6]);
    spread = debox(value, size = [1, 1, 3, 3], stride = [1, 1, 2, 2],
                   padding = [(0,0), (0,0), (1,1), (1,1)], normalize = true);
    spread_same = debox(x, size = [1, 1, 2, 2], stride = [1, 1, 2, 2]);
}
"""


def flat_window_argmax(x, size, stride, pairs, fill):
    win = windows(np.pad(x, pairs, constant_values=fill), size, stride, [1] * x.ndim)
    return win.argmax(-1), win.max(-1)


def scatter_windows(values, index, size, stride, before, output_shape, scale=None):
    out = np.zeros(output_shape, np.float64)
    strides = [math.prod(size[axis + 1 :]) for axis in range(len(size))]
    for position in itertools.product(*(range(e) for e in values.shape)):
        offsets = (
            [[(index[position] // s) % k for s, k in zip(strides, size, strict=True)]]
            if scale is None
            else list(itertools.product(*(range(k) for k in size)))
        )
        for offset in offsets:
            target = [p * st + o - b for p, st, o, b in zip(position, stride, offset, before, strict=True)]
            if all(0 <= t < e for t, e in zip(target, output_shape, strict=True)):
                out[tuple(target)] += values[position] * (1.0 if scale is None else scale)
    return out


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_argmax_pool_sample_desample_and_debox(backend):
    x = real(2, 3, 7, 6)
    out = run(WINDOWS, {"x": x}, backend)
    pairs = [(0, 0), (0, 0), (1, 1), (0, 1)]
    index, maximum = flat_window_argmax(x, [1, 1, 3, 2], [1, 1, 2, 2], pairs, -np.inf)
    where, value = flat_window_argmax(
        x, [1, 2, 2, 2], [1, 1, 2, 2], same_padding(x.shape, [1, 2, 2, 2], [1, 1, 2, 2], [1] * 4), 0.0
    )
    check(
        out,
        {
            "index": index.astype(np.int32),
            "picked": maximum,
            "value": value,
            "where": where.astype(np.int32),
            "back": scatter_windows(value, where, [1, 2, 2, 2], [1, 1, 2, 2], [0, 0, 0, 0], x.shape),
            "spread": scatter_windows(
                value, None, [1, 1, 3, 3], [1, 1, 2, 2], [0, 0, 1, 1], [2, 3, 7, 5], 1 / 9
            ),
            "spread_same": scatter_windows(x, None, [1, 1, 2, 2], [1, 1, 2, 2], [0] * 4, [2, 3, 14, 12], 1.0),
        },
    )


# ------------------------------------------------------------------------------------------------
# convolutions written as two, normalisations, quantisation, copies, updates


COMPOUNDS = """
version 1.0;

graph Compounds( x, y ) -> ( separable, transposed, soft, l1, local_mean, local_variance, local_contrast,
                            linear, min_max, zero_point, logarithmic, first, second, flat_argmax,
                            flat_argmin )
{
    x = external<scalar>(shape = [2, 4, 6, 5]);
    y = external<scalar>(shape = [2, 4, 3, 3]);
    plane = variable<scalar>(shape = [4, 1, 3, 3], label = 'plane');
    point = variable<scalar>(shape = [6, 4, 1, 1], label = 'point');
    bias = variable<scalar>(shape = [1, 6], label = 'bias');
    dplane = variable<scalar>(shape = [3, 1, 2, 2], label = 'dplane');
    dpoint = variable<scalar>(shape = [4, 3, 1, 1], label = 'dpoint');
    zp = constant<integer>(shape = [1], value = [3]);
    separable = separable_conv(x, plane, point, bias, border = 'replicate', stride = [2, 1]);
    transposed = separable_deconv(y, dplane, dpoint, 0.0, stride = [2, 2], padding = [(0,0), (0,0)]);
    soft = softabs(x, epsilon = 0.01);
    l1 = l1_normalization(x, axes = [1], bias = 0.5, epsilon = 0.1);
    local_mean = local_mean_normalization(x, size = [1, 1, 3, 3]);
    local_variance = local_variance_normalization(x, size = [1, 2, 3, 1], bias = 0.1, epsilon = 0.5);
    local_contrast = local_contrast_normalization(x, size = [1, 1, 3, 3], bias = 0.1, epsilon = 0.01);
    linear = linear_quantize(x, -1.0, 1.0, bits = 4);
    min_max = min_max_linear_quantize(x, -1.5, 1.0, bits = 3, signed = true, symmetric = true);
    zero_point = zero_point_linear_quantize(x, zp, 0.05, bits = 5, signed = true, symmetric = false);
    logarithmic = logarithmic_quantize(x, 2.0, bits = 3);
    [first, second] = copy_n(x, times = 2);
    flat_argmax = argmax_reduce(x, axes = [1, 3]);
    flat_argmin = argmin_reduce(x, axes = [0, 2, 3]);
}
"""


def box_mean(x, size):
    return pool(
        x, "avg", size, [1] * x.ndim, same_padding(x.shape, size, [1] * x.ndim, [1] * x.ndim), "constant"
    )


def flat_arg(x, axes, kind):
    kept = [axis for axis in range(x.ndim) if axis not in axes]
    moved = x.transpose(kept + axes).reshape(*[x.shape[a] for a in kept], -1)
    found = moved.argmax(-1) if kind == "max" else moved.argmin(-1)
    return found.reshape([1 if a in axes else x.shape[a] for a in range(x.ndim)]).astype(np.int32)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_compound_fragments_follow_their_definitions(backend):
    x, y = real(2, 4, 6, 5), real(2, 4, 3, 3)
    weights = {
        "plane": real(4, 1, 3, 3),
        "point": real(6, 4, 1, 1),
        "bias": real(1, 6),
        "dplane": real(3, 1, 2, 2),
        "dpoint": real(4, 3, 1, 1),
    }
    out = run(COMPOUNDS, {"x": x, "y": y}, backend, weights)
    filtered = conv(x, weights["plane"], stride=[2, 1], groups=0, border="replicate")
    separable = conv(filtered, weights["point"], weights["bias"], pairs=[(0, 0), (0, 0)])
    transposed = deconv(deconv(y, weights["dpoint"], [1, 1]), weights["dplane"], [2, 2], groups=0)
    centered = x - box_mean(x, [1, 1, 3, 3])
    contrast = centered / np.maximum(np.sqrt(box_mean(centered**2, [1, 1, 3, 3])) + 0.1, 0.01)
    variance = x / np.maximum(np.sqrt(box_mean(x**2, [1, 2, 3, 1])) + 0.1, 0.5)
    levels = 15.0
    linear = np.round((np.clip(x, -1, 1) + 1) / 2 * levels) / levels * 2 - 1
    min_max = np.round((np.clip(x, -1.5, 1.0) + 1.5) / 2.5 * 6.0) / 6.0 * 2.5 - 1.5
    zero_point = (np.clip(np.round(x / np.float32(0.05)) + 3, -16, 15) - 3) * np.float32(0.05)
    top = np.ceil(np.log2(2.0))
    logarithmic = np.sign(x) * 2.0 ** np.round(np.clip(np.log2(np.abs(x)), top - 7, top))
    check(
        out,
        {
            "separable": separable,
            "transposed": transposed,
            "soft": np.sqrt(x**2 + 0.01),
            "l1": x / np.maximum(np.abs(x).sum(1, keepdims=True) + 0.5, 0.1),
            "local_mean": centered,
            "local_variance": variance,
            "local_contrast": contrast,
            "linear": linear,
            "min_max": min_max,
            "zero_point": zero_point,
            "logarithmic": logarithmic,
            "first": x,
            "second": x,
            "flat_argmax": flat_arg(x, [1, 3], "max"),
            "flat_argmin": flat_arg(x, [0, 2, 3], "min"),
        },
        atol=1e-4,
    )


UPDATE = """
version 1.0;

graph Accumulate( x ) -> ( total )
{
    x = external<scalar>(shape = [2, 3]);
    state = variable<scalar>(shape = [2, 3], label = 'state');
    sum = add(state, x);
    total = update(state, sum);
}
"""


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_update_assigns_the_variable(backend):
    state, x1, x2 = real(2, 3), real(2, 3), real(2, 3)
    graph = loads_nnef1(UPDATE, {"state": state})
    np.testing.assert_allclose(
        graph.run({"x": x1}, backend=backend, update=True)["total"], state + x1, rtol=1e-6
    )
    np.testing.assert_allclose(graph.run({"x": x2}, backend=backend)["total"], state + x1 + x2, rtol=1e-6)
    np.testing.assert_allclose(graph.tensors["state"].data, state + x1, rtol=1e-6)


# ------------------------------------------------------------------------------------------------
# multilinear_upsample


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_every_multilinear_upsample_method_and_border(backend):
    cases = [
        (method, border)
        for method in ("symmetric", "asymmetric")
        for border in ("constant", "replicate", "reflect", "reflect-even")
    ] + [("aligned", "replicate")]
    outputs = ", ".join(f"u{k}" for k in range(len(cases)))
    lines = "\n".join(
        f"    u{k} = multilinear_upsample(x, factor = [{2 + k % 2}, 2], method = '{m}', border = '{b}');"
        for k, (m, b) in enumerate(cases)
    )
    text = (
        f"version 1.0;\ngraph Up( x ) -> ( {outputs} )\n{{\n"
        f"    x = external<scalar>(shape = [1, 2, 4, 5]);\n{lines}\n}}\n"
    )
    x = real(1, 2, 4, 5)
    out = run(text, {"x": x}, backend)
    expected = {}
    for k, (method, border) in enumerate(cases):
        value = upsample_axis(x, 2, 2 + k % 2, method, border)
        expected[f"u{k}"] = upsample_axis(value, 3, 2, method, border)
    check(out, expected)


# ------------------------------------------------------------------------------------------------
# regions of interest


ROIS = """
version 1.0;

graph Regions( x, rois, item ) -> ( maximum, average, symmetric, asymmetric, aligned, average_aligned,
                                    maximum_aligned )
{
    x = external<scalar>(shape = [2, 3, 7, 6]);
    rois = external<scalar>(shape = [3, 4]);
    item = external<integer>(shape = [3]);
    maximum = max_roi_pool(x, rois, item, output_size = [2, 3]);
    average = avg_roi_pool(x, rois, item, output_size = [3, 2]);
    symmetric = roi_resample(x, rois, item, output_size = [3, 4]);
    asymmetric = roi_resample(x, rois, item, output_size = [2, 3], method = 'asymmetric');
    aligned = roi_resample(x, rois, item, output_size = [3, 2], method = 'aligned');
    average_aligned = avg_roi_align(x, rois, item, output_size = [2, 2], sampling_rate = [2, 1]);
    maximum_aligned = max_roi_align(x, rois, item, output_size = [2, 1], sampling_rate = [1, 2],
                                    resize_method = 'asymmetric');
}
"""


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_roi_operations(backend):
    x = real(2, 3, 7, 6)
    rois = np.array([[0.0, 0.0, 4.0, 3.0], [1.2, 2.0, 6.0, 5.4], [0.5, -1.0, 3.0, 2.0]], np.float32)
    item = np.array([0, 1, 1], np.int32)
    out = run(ROIS, {"x": x, "rois": rois, "item": item}, backend)
    fine = roi_resample(x, rois, item, [4, 2], "symmetric")
    coarse = roi_resample(x, rois, item, [2, 2], "asymmetric")
    check(
        out,
        {
            "maximum": roi_pool_reference(x, rois, item, [2, 3], "max"),
            "average": roi_pool_reference(x, rois, item, [3, 2], "avg"),
            "symmetric": roi_resample(x, rois, item, [3, 4], "symmetric"),
            "asymmetric": roi_resample(x, rois, item, [2, 3], "asymmetric"),
            "aligned": roi_resample(x, rois, item, [3, 2], "aligned"),
            "average_aligned": fine.reshape(3, 3, 2, 2, 2, 1).mean((3, 5)),
            "maximum_aligned": coarse.reshape(3, 3, 2, 1, 1, 2).max((3, 5)),
        },
    )


# ------------------------------------------------------------------------------------------------
# graph files with fragments of their own


CUSTOM = """
version 1.0;
extension KHR_enable_fragment_definitions, KHR_enable_operator_expressions;

fragment shifted_relu( x: tensor<scalar>, shift: scalar = 0.5 ) -> ( y: tensor<scalar> )
{
    y = relu(x - shift) * 2.0;
}

fragment pair( x: tensor<scalar>, w: tensor<scalar> ) -> ( a: tensor<scalar>, b: tensor<scalar> )
{
    a = shifted_relu(x, shift = -0.25);
    b = (-x) * w + (x if true else w);
}

graph Custom( x ) -> ( y, first, second, expression )
{
    x = external<scalar>(shape = [2, 3, 4]);
    w = variable<scalar>(shape = [2, 3, 4], label = 'w');
    y = shifted_relu(x);
    first, second = pair(x, w);
    expression = x * x + 1.0;
}
"""


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_fragments_defined_in_the_graph_file_and_operator_expressions(backend):
    x, w = real(2, 3, 4), real(2, 3, 4)
    out = run(CUSTOM, {"x": x}, backend, {"w": w})
    check(
        out,
        {
            "y": np.maximum(x - 0.5, 0) * 2,
            "first": np.maximum(x + 0.25, 0) * 2,
            "second": -x * w + x,
            "expression": x * x + 1,
        },
    )


def test_a_fragment_without_a_body_is_a_clear_error():
    text = (
        "version 1.0;\nextension KHR_enable_fragment_definitions;\n"
        "fragment mystery( x: tensor<scalar> ) -> ( y: tensor<scalar> );\n"
        "graph G( x ) -> ( y ) { x = external<scalar>(shape = [2]); y = mystery(x); }\n"
    )
    with pytest.raises(NNEFError, match="fragment.*mystery have no body"):
        loads_nnef1(text)


# ------------------------------------------------------------------------------------------------
# the quantisation file


QUANT = """
"x": linear_quantize(min = -1.0, max = 1.0, bits = 8);
"y": zero_point_linear_quantize(zero_point = 3, scale = 0.5, bits = 8, signed = true, symmetric = false);
"z": logarithmic_quantize(max = 4.0, bits = 3);
"""


def test_the_quantization_file_is_kept(tmp_path):
    text = "version 1.0;\ngraph G( x ) -> ( z ) { x = external(shape = [2]); y = neg(x); z = exp(y); }"
    folder = tmp_path / "quantized"
    folder.mkdir()
    (folder / "graph.nnef").write_text(text)
    (folder / "graph.quant").write_text(QUANT)
    for graph in (uv.nnef.load(folder), loads_nnef1(text, quantization=QUANT)):
        # the two SkriptND's quant module has are @quantize entries of the translated text
        assert "x: quant.min_max_linear_quantize{" in graph.source
        assert graph.tensors["x"].quantization == {
            "op": "quant.min_max_linear_quantize",
            "attribs": {"bits": 8, "max": 1.0, "min": -1.0, "signed": False, "symmetric": False},
            "types": (),
        }
        assert graph.tensors["y"].quantization["attribs"] == {
            "bits": 8, "scale": 0.5, "signed": True, "symmetric": False, "zero_point": 3,
        }  # fmt: skip
        assert graph.tensors["z"].quantization == {
            "op": "logarithmic_quantize", "attribs": {"bits": 3, "max": 4.0}, "types": (),
        }  # fmt: skip
        x = real(2)
        np.testing.assert_allclose(graph.run({"x": x})["z"], np.exp(-x), rtol=1e-6)  # annotations only
