"""Every standard-library operator, composed with representative attributes, lowered from its
``@lower`` formula (or built-in kernel) and run through the compile pipeline, against numpy.

The references are written here with numpy (window extraction for convolutions and pooling,
explicit scatters for deconvolution, ...), from the definitions of chapter 4 of the spec; inputs
are random, of several shapes. The python backend always runs; the C backend runs a subset
when it is available.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from cpu_targets import skip_when_emulated

import uopviz as uv
from uopviz.nnef.composition.composer import compose

RNG = np.random.default_rng(1234)


def real(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def positive(*shape):
    return (RNG.random(shape) + 0.5).astype(np.float32)


def ints(low, high, *shape):
    return RNG.integers(low, high, shape).astype(np.int32)


def bools(*shape):
    return RNG.integers(0, 2, shape).astype(bool)


_TYPE = {"f": "real", "i": "int", "b": "bool", "u": "int"}


def run(
    body: str,
    inputs: dict,
    outputs: dict[str, str],
    imports: str = "import nn; import layout; import math; "
    "import linalg; import image; import quant; import algo; import misc; import rand;",
    backend: str = "python",
):
    """Compose a graph whose @compose is ``body`` and run it on ``inputs``."""
    decls = " ".join(
        f"{name}: {_TYPE[a.dtype.kind]}[{', '.join(map(str, a.shape))}];" for name, a in inputs.items()
    )
    outs = " ".join(f"{name}: {kind};" for name, kind in outputs.items())
    text = f"{imports}\ngraph G {{ @input {{ {decls} }} @output {{ {outs} }} @compose {{ {body} }} }}"
    graph = compose(text, file="ops.sknd")
    return graph.run(inputs, backend=backend)


def check(actual, expected, rtol=1e-4, atol=1e-5):
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    if expected.dtype.kind in "biu":
        np.testing.assert_array_equal(actual, expected)
    else:
        np.testing.assert_allclose(actual, expected.astype(np.float32), rtol=rtol, atol=atol)


# ------------------------------------------------------------------------------------------------
# references


def _pairs(value, d):
    return [value] * d if isinstance(value, int) else list(value)


def windows(x, axes, size, stride, dilation, before, after, fill):
    """All pooling windows: shape (out..., window volume) with ``fill`` outside the input."""
    pad = [(0, 0)] * x.ndim
    crop = [slice(None)] * x.ndim
    for axis, b, a in zip(axes, before, after):  # a negative padding crops
        pad[axis] = (max(b, 0), max(a, 0))
        crop[axis] = slice(max(-b, 0), x.shape[axis] - max(-a, 0))
    xp = np.pad(x[tuple(crop)], pad, constant_values=fill)
    out_sizes = [
        (xp.shape[a] - (s - 1) * dl - 1) // st + 1 for a, s, st, dl in zip(axes, size, stride, dilation)
    ]
    pieces = []
    for offsets in itertools.product(*[range(s) for s in size]):
        index = [slice(None)] * x.ndim
        for axis, o, st, dl, n in zip(axes, offsets, stride, dilation, out_sizes):
            index[axis] = slice(o * dl, o * dl + st * (n - 1) + 1, st)
        pieces.append(xp[tuple(index)])
    return np.stack(pieces, axis=-1)


def auto_padding(sizes, size, stride, dilation, ceil_mode=False):
    """The spec's default total padding and its UPPER split (before, after)."""
    before, after = [], []
    for s, f, st, dl in zip(sizes, size, stride, dilation):
        fd = (f - 1) * dl + 1
        total = ((-(-s // st) if ceil_mode else s // st) - 1) * st + fd - s
        before.append(total // 2)
        after.append(total - total // 2)
    return before, after


def conv_ref(x, w, b=None, stride=1, dilation=1, padding=None, groups=1):
    """NCX convolution, filter [n, c/groups, x..]."""
    d = x.ndim - 2
    stride, dilation = _pairs(stride, d), _pairs(dilation, d)
    size = list(w.shape[2:])
    if padding is None:
        before, after = auto_padding(x.shape[2:], size, stride, dilation)
    else:
        before, after = list(padding[:d]), list(padding[d:])
    groups = x.shape[1] if groups == 0 else groups
    win = windows(x, list(range(2, 2 + d)), size, stride, dilation, before, after, 0.0)  # [n, c, o.., k]
    n, c = x.shape[:2]
    out_c = w.shape[0]
    win = win.reshape(n, groups, c // groups, *win.shape[2:])
    wf = w.reshape(groups, out_c // groups, c // groups, -1)
    spatial = "".join("xyz"[i] for i in range(d))
    out = np.einsum(f"ngc{spatial}k,gock->ngo{spatial}", win, wf).reshape(n, out_c, *win.shape[3:-1])
    if b is not None:
        out = out + b.reshape(1, -1, *[1] * d)
    return out


def deconv_ref(x, w, b=None, stride=1, dilation=1, groups=1, padding=None):
    """NCX transposed convolution, filter [c, n/groups, x..]; ``padding`` [before.., after..] or
    the spec's default (the total a stride-``stride`` convolution of the output would need)."""
    d = x.ndim - 2
    stride, dilation = _pairs(stride, d), _pairs(dilation, d)
    n, c, *ix = x.shape
    m = c // groups
    fc = w.shape[1]
    fx = w.shape[2:]
    fd = [(f - 1) * dl + 1 for f, dl in zip(fx, dilation)]
    if padding is None:
        paddings = [(i - 1) * st + f - i * st for i, st, f in zip(ix, stride, fd)]
        offset = [p // 2 for p in paddings]
    else:
        paddings = [before + after for before, after in zip(padding[:d], padding[d:])]
        offset = list(padding[:d])
    ox = [(i - 1) * st + f - p for i, st, f, p in zip(ix, stride, fd, paddings)]
    out = np.zeros((n, fc * groups, *ox), np.float64)
    for g, mi, co in itertools.product(range(groups), range(m), range(fc)):
        for i in itertools.product(*[range(s) for s in ix]):
            for j in itertools.product(*[range(f) for f in fx]):
                o = [st * a + dl * bb - off for a, bb, st, dl, off in zip(i, j, stride, dilation, offset)]
                if all(0 <= v < e for v, e in zip(o, ox)):
                    out[(slice(None), g * fc + co, *o)] += (
                        x[(slice(None), g * m + mi, *i)] * w[(g * m + mi, co, *j)]
                    )
    if b is not None:
        out += b.reshape(1, -1, *[1] * d)
    return out


def pool_ref(x, kind, size, stride=1, dilation=1, padding=None, axes=None, ignore_border=True, p=2.0):
    axes = list(range(2, x.ndim)) if axes is None else axes
    k = len(axes)
    size, stride, dilation = _pairs(size, k), _pairs(stride, k), _pairs(dilation, k)
    if padding is None:
        before, after = auto_padding([x.shape[a] for a in axes], size, stride, dilation)
    else:
        before, after = list(padding[:k]), list(padding[k:])
    if kind == "max":
        return windows(x, axes, size, stride, dilation, before, after, -np.inf).max(-1)
    sums = windows(x, axes, size, stride, dilation, before, after, 0.0).sum(-1)
    if kind == "sum":
        return sums
    if kind == "avg":
        if ignore_border:
            ones = windows(np.ones_like(x), axes, size, stride, dilation, before, after, 0.0).sum(-1)
            return sums / ones
        return sums / math.prod(size)
    raise ValueError(kind)


def softmax_ref(x, axes):
    e = np.exp(x - x.max(axis=tuple(axes), keepdims=True))
    return e / e.sum(axis=tuple(axes), keepdims=True)


# ------------------------------------------------------------------------------------------------
# convolutions


@pytest.mark.parametrize(
    "shape, filt, attribs, ref_args",
    [
        ((1, 4, 9, 9), (6, 4, 3, 3), "stride=2, padding=[1, 1, 1, 1]", dict(stride=2, padding=[1, 1, 1, 1])),
        ((2, 4, 8, 7), (6, 2, 3, 2), "groups=2", dict(groups=2)),
        ((1, 3, 9, 9), (3, 1, 3, 3), "groups=0, dilation=2", dict(groups=0, dilation=2)),
        (
            (1, 2, 10, 9),
            (4, 2, 3, 3),
            "stride=[2, 3], dilation=[1, 2], padding=[0, 1, 2, 0]",
            dict(stride=[2, 3], dilation=[1, 2], padding=[0, 1, 2, 0]),
        ),
        ((2, 3, 11), (5, 3, 4), "stride=3", dict(stride=3)),
        ((1, 2, 5, 4, 4), (3, 2, 2, 3, 2), "padding=[1, 0, 1, 0, 1, 1]", dict(padding=[1, 0, 1, 0, 1, 1])),
    ],
)
def test_conv_ncx(shape, filt, attribs, ref_args):
    x, w, b = real(*shape), real(*filt), real(filt[0])
    out = run(f"y = nn.conv{{{attribs}}}(x, w, b);", {"x": x, "w": w, "b": b}, {"y": "real"})
    check(out["y"], conv_ref(x, w, b, **ref_args), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "data_format, filter_format", [("NXC", "NCX"), ("NXC", "NXC"), ("XCN", "XCN"), ("NCX", "CXB")]
)
def test_conv_data_and_filter_formats(data_format, filter_format):
    x_ncx, w_ncx, b = real(2, 4, 6, 5), real(6, 2, 3, 2), real(6)
    to_data = {
        "NCX": lambda a: a,
        "NXC": lambda a: np.moveaxis(a, 1, -1),
        "XCN": lambda a: np.moveaxis(np.moveaxis(a, 0, -1), 0, -2),
    }
    to_filter = {
        "NCX": lambda a: a,
        "NXC": lambda a: np.moveaxis(a, 1, -1),
        "XCN": lambda a: np.moveaxis(np.moveaxis(a, 0, -1), 0, -2),
        "CXB": lambda a: np.moveaxis(a, 0, -1),
    }
    x, w = (
        np.ascontiguousarray(to_data[data_format](x_ncx)),
        np.ascontiguousarray(to_filter[filter_format](w_ncx)),
    )
    out = run(
        f"y = nn.conv{{groups=2, stride=[1, 2], data_format='{data_format}', "
        f"filter_format='{filter_format}'}}"
        f"(x, w, b);",
        {"x": x, "w": w, "b": b},
        {"y": "real"},
    )
    expected = to_data[data_format](conv_ref(x_ncx, w_ncx, b, stride=[1, 2], groups=2))
    check(out["y"], expected, atol=1e-4)


@pytest.mark.parametrize(
    "shape, filt, attribs, ref_args",
    [
        ((1, 4, 5, 5), (4, 3, 3, 3), "stride=2", dict(stride=2)),
        (
            (2, 4, 4, 3),
            (4, 2, 2, 3),
            "groups=2, stride=[1, 2], dilation=[2, 1]",
            dict(groups=2, stride=[1, 2], dilation=[2, 1]),
        ),
        ((1, 2, 6), (2, 3, 4), "stride=3", dict(stride=3)),
        # stride > 1 with explicit padding: output positions a term would write outside the output
        # are skipped, for the accumulator's read as for its write
        ((1, 1, 4), (1, 1, 2), "stride=2, padding=[0, 1]", dict(stride=2, padding=[0, 1])),
        ((1, 2, 4, 3), (2, 3, 3, 3), "stride=2, padding=[1, 0, 1, 1]", dict(stride=2, padding=[1, 0, 1, 1])),
        (
            (2, 4, 3, 4),
            (4, 1, 2, 3),
            "stride=2, padding=[1, 1, 1, 1], groups=2",
            dict(stride=2, padding=[1, 1, 1, 1], groups=2),
        ),
    ],
)
@pytest.mark.parametrize("backend", ["python", "c"])
def test_deconv(shape, filt, attribs, ref_args, backend):
    x, w = real(*shape), real(*filt)
    groups = ref_args.get("groups", 1)
    b = real(filt[1] * groups)
    inputs = {"x": x, "w": w, "b": b}
    out = run(f"y = nn.deconv{{{attribs}}}(x, w, b);", inputs, {"y": "real"}, backend=backend)
    check(out["y"], deconv_ref(x, w, b, **ref_args), atol=1e-4)


def test_linear_and_matmul_family():
    x, w, b = real(3, 5), real(4, 5), real(4)
    check(run("y = nn.linear(x, w, b);", {"x": x, "w": w, "b": b}, {"y": "real"})["y"], x @ w.T + b)
    a, bb, c = real(2, 3, 4), real(5, 4), real(3, 5)
    out = run("y = linalg.matmul{transB=true}(a, bb, c);", {"a": a, "bb": bb, "c": c}, {"y": "real"})
    check(out["y"], a @ bb.T + c)
    a, bb = real(4, 3), real(2, 4, 5)
    check(run("y = linalg.matmul{transA=true}(a, bb);", {"a": a, "bb": bb}, {"y": "real"})["y"], a.T @ bb)
    m, v = real(3, 4), real(3)
    check(run("y = linalg.matvec{transA=true}(m, v);", {"m": m, "v": v}, {"y": "real"})["y"], m.T @ v)
    u, v = real(6), real(6)
    check(run("y = linalg.dot(u, v);", {"u": u, "v": v}, {"y": "real"})["y"], np.dot(u, v))
    u, v = real(3), real(2, 2)
    check(run("y = linalg.outer(u, v);", {"u": u, "v": v}, {"y": "real"})["y"], np.multiply.outer(u, v))


# ------------------------------------------------------------------------------------------------
# pooling


@pytest.mark.parametrize(
    "kind, attribs, ref_args",
    [
        ("max", "size=3, stride=2", dict(size=3, stride=2)),
        (
            "max",
            "size=[2, 3], stride=[2, 1], padding=[0, 1, 1, 1]",
            dict(size=[2, 3], stride=[2, 1], padding=[0, 1, 1, 1]),
        ),
        ("max", "size=2, dilation=2", dict(size=2, dilation=2)),
        ("sum", "size=3, stride=2, padding=[1, 1, 1, 1]", dict(size=3, stride=2, padding=[1, 1, 1, 1])),
        ("avg", "size=3, stride=2, padding=[1, 1, 1, 1]", dict(size=3, stride=2, padding=[1, 1, 1, 1])),
        ("avg", "size=3, ignore_border=false", dict(size=3, ignore_border=False)),
        ("avg", "axes=[1], size=[2], stride=[2]", dict(axes=[1], size=2, stride=2)),
    ],
)
def test_pooling(kind, attribs, ref_args):
    x = real(2, 3, 7, 6)
    out = run(f"y = nn.{kind}_pool{{{attribs}}}(x);", {"x": x}, {"y": "real"})
    check(out["y"], pool_ref(x, kind, **ref_args))


def test_rms_and_lp_pool():
    x = real(1, 2, 6, 6)
    out = run(
        "y = nn.rms_pool{size=2, stride=2}(x); z = nn.lp_pool{size=2, stride=2, p=3.0}(x);",
        {"x": x},
        {"y": "real", "z": "real"},
    )
    check(out["y"], np.sqrt(pool_ref(x * x, "avg", size=2, stride=2)))
    check(out["z"], pool_ref(np.abs(x) ** 3, "sum", size=2, stride=2) ** (1 / 3), rtol=1e-3)


# ------------------------------------------------------------------------------------------------
# activations and element-wise math


def test_activations():
    x = real(4, 5) * 2
    alpha = real(5)
    out = run(
        "a = nn.relu(x); b = nn.relu{alpha=0.1, max=1.5}(x); c = nn.prelu(x, alpha); d = nn.elu(x); "
        "e = nn.selu(x); f = nn.gelu(x); g = nn.gelu{approximate='TANH'}(x); h = nn.silu(x); "
        "i = nn.sigmoid(x); j = nn.softplus(x); k = nn.thresholded_relu{theta=0.5}(x);",
        {"x": x, "alpha": alpha},
        dict.fromkeys("abcdefghijk", "real"),
    )
    erf = np.vectorize(math.erf)
    check(out["a"], np.maximum(x, 0))
    check(out["b"], np.maximum(np.minimum(x, 1.5), 0.1 * x))
    check(out["c"], np.where(x < 0, alpha * x, x))
    check(out["d"], np.where(x < 0, np.exp(x) - 1, x))
    check(out["e"], 1.05070102 * np.where(x < 0, 1.67326319 * (np.exp(x) - 1), x))
    check(out["f"], 0.5 * x * (1 + erf(x / np.sqrt(2))), atol=2e-5)
    check(out["g"], 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))), atol=2e-5)
    check(out["h"], x / (1 + np.exp(-x)))
    check(out["i"], 1 / (1 + np.exp(-x)))
    check(out["j"], np.log(np.exp(x) + 1), atol=2e-5)
    check(out["k"], np.where(x > 0.5, x, 0))


def test_unary_math():
    x = real(3, 4)
    p = positive(3, 4)
    u = (RNG.random((3, 4)) * 1.8 - 0.9).astype(np.float32)
    names = [
        "neg",
        "rcp",
        "sqr",
        "exp",
        "sin",
        "cos",
        "tan",
        "sinh",
        "cosh",
        "tanh",
        "atan",
        "asinh",
        "abs",
        "sign",
        "floor",
        "ceil",
        "round",
    ]
    body = " ".join(f"{n} = math.{n}(x);" for n in names)
    body += (
        " sqrt = math.sqrt(p); rsqrt = math.rsqrt(p); rsqr = math.rsqr(p); log = math.log(p); "
        "log2 = math.log2(p); asin = math.asin(u); acos = math.acos(u); atanh = math.atanh(u); "
        "acosh = math.acosh(q);"
    )
    q = (p + 1).astype(np.float32)
    out = run(
        body,
        {"x": x, "p": p, "u": u, "q": q},
        dict.fromkeys(
            [*names, "sqrt", "rsqrt", "rsqr", "log", "log2", "asin", "acos", "atanh", "acosh"], "real"
        ),
    )
    rounded = np.where(x < 0, -np.floor(-x + 0.5), np.floor(x + 0.5))  # halves away from zero
    expected = {
        "neg": -x,
        "rcp": 1 / x,
        "sqr": x * x,
        "exp": np.exp(x),
        "sin": np.sin(x),
        "cos": np.cos(x),
        "tan": np.tan(x),
        "sinh": np.sinh(x),
        "cosh": np.cosh(x),
        "tanh": np.tanh(x),
        "atan": np.arctan(x),
        "asinh": np.arcsinh(x),
        "abs": np.abs(x),
        "sign": np.sign(x),
        "floor": np.floor(x),
        "ceil": np.ceil(x),
        "round": rounded,
        "sqrt": np.sqrt(p),
        "rsqrt": 1 / np.sqrt(p),
        "rsqr": 1 / (p * p),
        "log": np.log(p),
        "log2": np.log2(p),
        "asin": np.arcsin(u),
        "acos": np.arccos(u),
        "atanh": np.arctanh(u),
        "acosh": np.arccosh(q),
    }
    for name, value in expected.items():
        check(out[name], value, rtol=2e-4, atol=2e-5)


def test_binary_math_with_broadcasting_and_alignment():
    x, y, z = real(2, 3, 4), real(3, 4), real(3)
    a, b = ints(-5, 6, 2, 3), ints(1, 4, 3)
    c, d = bools(2, 3), bools(2, 3)
    out = run(
        "s = math.add(x, y); t = math.sub(y, x); u = math.mul{rhs_align=1}(x, z); v = math.div(x, 2.0); "
        "w = math.min(x, y); m = math.max(x, 0.5); p = math.pow(q, r); k = math.mod(a, b); "
        "l = math.lt(x, y); e = math.eq(a, b); n = math.and(c, d); o = math.or(c, d); xx = math.xor(c, d); "
        "nt = math.not(c); sel = math.select(c, a, b); ia = math.add(a, b);",
        {"x": x, "y": y, "z": z, "a": a, "b": b, "c": c, "d": d, "q": positive(2, 3), "r": real(3)},
        {
            "s": "real",
            "t": "real",
            "u": "real",
            "v": "real",
            "w": "real",
            "m": "real",
            "p": "real",
            "k": "int",
            "l": "bool",
            "e": "bool",
            "n": "bool",
            "o": "bool",
            "xx": "bool",
            "nt": "bool",
            "sel": "int",
            "ia": "int",
        },
    )
    check(out["s"], x + y)
    check(out["t"], y - x)
    check(out["u"], x * z.reshape(1, 3, 1))
    check(out["v"], x / 2)
    check(out["w"], np.minimum(x, y))
    check(out["m"], np.maximum(x, 0.5))
    check(out["k"], np.mod(a, b))
    check(out["l"], x < y)
    check(out["e"], a == b)
    check(out["n"], c & d)
    check(out["o"], c | d)
    check(out["xx"], c ^ d)
    check(out["nt"], ~c)
    check(out["sel"], np.where(c, a, b))
    check(out["ia"], a + b)


def test_variadic_and_misc_elementwise():
    xs = [real(2, 3) for _ in range(3)]
    inputs = {f"x{i}": x for i, x in enumerate(xs)}
    packs = "[x0, x1, x2]"
    out = run(
        f"s = math.sum_n({packs}); p = math.prod_n({packs}); lo = math.min_n({packs}); "
        f"hi = math.max_n({packs}); am = math.argmax_n({packs}); an = math.argmin_n({packs}); "
        f"c = math.clamp(x0, -0.5, 0.5); ax = math.axpby(2.0, x0, x1, x2); ab = math.axpb(x0, x1, x2);",
        inputs,
        {
            "s": "real",
            "p": "real",
            "lo": "real",
            "hi": "real",
            "am": "int",
            "an": "int",
            "c": "real",
            "ax": "real",
            "ab": "real",
        },
    )
    stack = np.stack(xs)
    check(out["s"], stack.sum(0))
    check(out["p"], stack.prod(0))
    check(out["lo"], stack.min(0))
    check(out["hi"], stack.max(0))
    check(out["am"], stack.argmax(0).astype(np.int32))
    check(out["an"], stack.argmin(0).astype(np.int32))
    check(out["c"], np.clip(xs[0], -0.5, 0.5))
    check(out["ax"], 2 * xs[0] + xs[1] * xs[2])
    check(out["ab"], xs[0] * xs[1] + xs[2])
    b1, b2 = bools(2, 2), bools(2, 2)
    out = run(
        "a = math.any_n([b1, b2]); l = math.all_n([b1, b2]);",
        {"b1": b1, "b2": b2},
        {"a": "bool", "l": "bool"},
    )
    check(out["a"], b1 | b2)
    check(out["l"], b1 & b2)


# ------------------------------------------------------------------------------------------------
# reductions


@pytest.mark.parametrize(
    "shape, axes, squeeze",
    [((2, 3, 4), [1], False), ((2, 3, 4), [0, 2], True), ((5, 4), [0, 1], False), ((3, 4), [-1], True)],
)
def test_reductions(shape, axes, squeeze):
    x = real(*shape)
    b = bools(*shape)
    attrs = f"axes={axes}, squeeze={'true' if squeeze else 'false'}"
    out = run(
        f"mn = math.min_reduce{{{attrs}}}(x); mx = math.max_reduce{{{attrs}}}(x); "
        f"s = math.sum_reduce{{{attrs}}}(x); p = math.prod_reduce{{{attrs}}}(x); "
        f"m = math.mean_reduce{{{attrs}}}(x); lp = math.lp_reduce{{{attrs}, p=2.0}}(x); "
        f"an = math.any_reduce{{{attrs}}}(b); al = math.all_reduce{{{attrs}}}(b); "
        f"mean, var = math.moments{{{attrs}}}(x);",
        {"x": x, "b": b},
        {
            "mn": "real",
            "mx": "real",
            "s": "real",
            "p": "real",
            "m": "real",
            "lp": "real",
            "an": "bool",
            "al": "bool",
            "mean": "real",
            "var": "real",
        },
    )
    axis = tuple(a % len(shape) for a in axes)
    keep = not squeeze
    check(out["mn"], x.min(axis, keepdims=keep))
    check(out["mx"], x.max(axis, keepdims=keep))
    check(out["s"], x.sum(axis, keepdims=keep))
    check(out["p"], x.prod(axis, keepdims=keep))
    check(out["m"], x.mean(axis, keepdims=keep))
    check(out["lp"], np.sqrt((x * x).sum(axis, keepdims=keep)))
    check(out["an"], b.any(axis, keepdims=keep))
    check(out["al"], b.all(axis, keepdims=keep))
    check(out["mean"], x.mean(axis, keepdims=keep))
    check(out["var"], x.var(axis, keepdims=keep))


def test_arg_reductions_take_the_first_extreme():
    x = ints(0, 3, 3, 5, 4).astype(np.float32)  # many ties
    out = run(
        "a = math.argmax{axis=1}(x); b = math.argmin{axis=1, squeeze=true}(x); "
        "c = math.argmax_nd{axes=[1, 2]}(x); d = math.argmin_nd{axes=[0, 2], squeeze=true}(x);",
        {"x": x},
        {"a": "int", "b": "int", "c": "int", "d": "int"},
    )
    check(out["a"], x.argmax(1)[:, None, :].astype(np.int32))
    check(out["b"], x.argmin(1).astype(np.int32))
    flat = x.reshape(3, 20).argmax(1)
    check(out["c"], np.stack(np.unravel_index(flat, (5, 4)), -1).reshape(3, 1, 1, 2).astype(np.int32))
    moved = np.moveaxis(x, 1, 0).reshape(5, 12).argmin(1)
    check(out["d"], np.stack(np.unravel_index(moved, (3, 4)), -1).astype(np.int32))


def test_cumsum():
    x = real(3, 4)
    out = run(
        "a = math.cumsum{axis=1}(x); b = math.cumsum{axis=0, exclusive=true}(x); "
        "c = math.cumsum{axis=1, reverse=true}(x);",
        {"x": x},
        {"a": "real", "b": "real", "c": "real"},
    )
    check(out["a"], np.cumsum(x, 1))
    check(out["b"], np.cumsum(x, 0) - x)
    check(out["c"], np.cumsum(x[:, ::-1], 1)[:, ::-1])


SCAN_BACKENDS = [name for name in ("python", "c", "llvm", "opencl") if name in uv.backends.available()]


def _sequential_cumsum(x: np.ndarray, axis: int, exclusive: bool, reverse: bool) -> np.ndarray:
    """The spec's loop: ``sum = add(sum, item)`` in float32, item after item (numpy's cumsum adds in
    this order too); exclusive yields the sum before the item."""
    x = np.moveaxis(np.flip(x, axis) if reverse else x, axis, 0)
    out, total = np.empty_like(x), np.zeros(x.shape[1:], np.float32)
    for position, item in enumerate(x):
        following = total + item
        out[position] = total if exclusive else following
        total = following
    out = np.moveaxis(out, 0, axis)
    return np.flip(out, axis) if reverse else out


@pytest.mark.parametrize("backend", SCAN_BACKENDS)
@pytest.mark.parametrize("shape, axis", [((65,), 0), ((3, 1000), 1), ((300, 2, 3), 0), ((2, 97, 5), -2)])
def test_cumsum_over_long_axes_adds_in_the_order_of_the_spec_loop(backend, shape, axis):
    # issue 21: above 64 items the @lower formula summed every prefix anew (n² additions); the
    # scan kernel adds each item once, in the spec's order, so the sums equal its loop's bit for bit
    x = (RNG.uniform(0.01, 1.0, shape) * 10.0 ** RNG.integers(-4, 5, shape)).astype(np.float32)
    x *= RNG.choice(np.float32([-1, 1]), shape)
    out = run(
        f"a = math.cumsum{{axis={axis}}}(x); b = math.cumsum{{axis={axis}, exclusive=true}}(x); "
        f"c = math.cumsum{{axis={axis}, reverse=true}}(x); "
        f"d = math.cumsum{{axis={axis}, exclusive=true, reverse=true}}(x);",
        {"x": x},
        dict.fromkeys("abcd", "real"),
        backend=backend,
    )
    flags = [(False, False), (True, False), (False, True), (True, True)]  # (exclusive, reverse)
    for name, (exclusive, reverse) in zip("abcd", flags, strict=True):
        np.testing.assert_array_equal(out[name], _sequential_cumsum(x, axis, exclusive, reverse))
    bound = x.shape[axis] * 2.0**-24 * np.cumsum(np.abs(x).astype(np.float64), axis)  # float32 rounding
    assert np.all(np.abs(out["a"] - np.cumsum(x.astype(np.float64), axis)) <= bound)


def test_cumsum_of_a_hundred_thousand_items_is_one_scan_kernel_of_linear_work():
    # issue 21: each of the 100,000 items was a REDUCE over 100,000 (42 s on C)
    from uopviz.core.ops import Ops
    from uopviz.passes.optops.axes import sequential_axes

    n = 100_000
    graph = compose(
        f"import math; graph G {{ @input {{ x: real[2, {n}]; }} @output {{ y: real; }} "
        f"@compose {{ y = math.cumsum{{axis=1}}(x); }} }}",
        file="scan.sknd",
    )
    (kernel,) = graph.lower()
    nodes = kernel.ast.toposort()
    assert not any(u.op is Ops.REDUCE for u in nodes)
    assert math.prod(int(u.src[0].arg[0]) for u in nodes if u.op is Ops.RANGE) == 2 * n  # each item once
    assert [int(r.src[0].arg[0]) for r in sequential_axes(kernel.ast)] == [n]


def test_the_scan_axis_keeps_its_order_through_the_opts():
    from uopviz.core.ops import AxisType
    from uopviz.passes.optops.heuristic import hand_coded_optimizations
    from uopviz.passes.optops.kernel import Kernel
    from uopviz.passes.optops.opts import Opt, OptError, OptOp

    graph = compose(
        "import math; graph G { @input { x: real[4, 1024]; } @output { y: real; } "
        "@compose { y = math.cumsum{axis=1}(x); } }",
        file="scan.sknd",
    )
    kernel = Kernel(graph.lower()[0].ast, "c")
    scan = [axis for axis, (_, kind) in enumerate(kernel.axes) if kind is AxisType.REDUCE]
    assert [kernel.axes[axis][0] for axis in scan] == [1024]
    with pytest.raises(OptError, match="sequential loop"):
        kernel.apply(Opt(OptOp.SPLIT, scan[0], (8, AxisType.UNROLL, False)))
    assert (1024, AxisType.REDUCE) in hand_coded_optimizations(kernel).axes  # the heuristic leaves it whole


# ------------------------------------------------------------------------------------------------
# normalisation


def test_normalisations():
    x, mean, var, bias, scale = real(2, 3, 4, 5), real(3), positive(3), real(3), real(3)
    out = run(
        "bn = nn.batch_norm{epsilon=1e-3}(x, mean, var, bias, scale); "
        "mvn = nn.mean_variance_norm(x, bias, scale); "
        "lrn = nn.local_response_norm{size=[3], alpha=0.5, beta=0.75, bias=2.0}(x); "
        "l1 = nn.l1_norm{axes=[1], epsilon=1e-6}(x); l2 = nn.l2_norm{axes=[1, 2]}(x); "
        "sm = nn.softmax{axes=[1]}(x); sm2 = nn.softmax{axes=[2, 3]}(x);",
        {"x": x, "mean": mean, "var": var, "bias": bias, "scale": scale},
        dict.fromkeys(["bn", "mvn", "lrn", "l1", "l2", "sm", "sm2"], "real"),
    )
    c = (1, 3, 1, 1)
    check(
        out["bn"], (x - mean.reshape(c)) / np.sqrt(var.reshape(c) + 1e-3) * scale.reshape(c) + bias.reshape(c)
    )
    mu, sigma = x.mean((2, 3), keepdims=True), np.sqrt(x.var((2, 3), keepdims=True) + 1e-5)
    check(out["mvn"], (x - mu) / sigma * scale.reshape(c) + bias.reshape(c), atol=1e-4)
    squares = np.pad(x * x, [(0, 0), (1, 1), (0, 0), (0, 0)])
    window = sum(squares[:, i : i + 3] for i in range(3)) / 3
    check(out["lrn"], x / (window * 0.5 + 2.0) ** 0.75)
    check(out["l1"], x / np.maximum(np.abs(x).sum(1, keepdims=True), 1e-6))
    check(out["l2"], x / np.sqrt((x * x).sum((1, 2), keepdims=True)))
    check(out["sm"], softmax_ref(x, [1]))
    check(out["sm2"], softmax_ref(x, [2, 3]))


# ------------------------------------------------------------------------------------------------
# layout


def test_reshaping_family():
    x = real(2, 3, 4)
    out = run(
        "a = layout.reshape{shape=[4, -1]}(x); b = layout.reshape{axis=1, rank=2, shape=[12]}(x); "
        "c = layout.flatten{axis=1}(x); d = layout.unflatten{axis=2, shape=[2, 2]}(x); "
        "e = layout.squeeze{axes=[0]}(s); f = layout.unsqueeze{axes=[0, 3]}(x); "
        "g = layout.transpose{perm=[2, 0, 1]}(x); h = layout.transpose{axis=1, perm=[2, 1]}(x);",
        {"x": x, "s": real(1, 3)},
        dict.fromkeys("abcdefgh", "real"),
    )
    check(out["a"], x.reshape(4, 6))
    check(out["b"], x.reshape(2, 12))
    check(out["c"], x.reshape(2, 12))
    check(out["d"], x.reshape(2, 3, 2, 2))
    check(out["f"], x.reshape(1, 2, 3, 1, 4))
    check(out["g"], x.transpose(2, 0, 1))
    check(out["h"], x.transpose(0, 2, 1))
    assert out["e"].shape == (3,)


def test_joining_and_splitting():
    a, b = real(2, 3), real(2, 5)
    out = run(
        "c = layout.concat{axis=1}([a, b]); [s0, s1] = layout.split{axis=1, sizes=[1, 4]}(b); "
        "[u0, u1, u2] = layout.unstack{axis=1}(a); st = layout.stack{axis=2}([a, a]); "
        "cu = layout.concat{axis=0}([a, a]);",
        {"a": a, "b": b},
        {
            "c": "real",
            "s0": "real",
            "s1": "real",
            "u0": "real",
            "u1": "real",
            "u2": "real",
            "st": "real",
            "cu": "real",
        },
    )
    check(out["c"], np.concatenate([a, b], 1))
    check(out["s0"], b[:, :1])
    check(out["s1"], b[:, 1:])
    check(out["u1"], a[:, 1])
    check(out["st"], np.stack([a, a], 2))
    check(out["cu"], np.concatenate([a, a], 0))


@pytest.mark.parametrize("method", ["CONSTANT", "REFLECT", "REPLICATE", "SYMMETRIC"])
def test_pad(method):
    x = real(4, 5)
    numpy_mode = {"CONSTANT": "constant", "REFLECT": "reflect", "REPLICATE": "edge", "SYMMETRIC": "symmetric"}
    out = run(
        f"y = layout.pad{{padding=[1, 2, 3, 1], method='{method}'}}(x, 0.5);"
        if method == "CONSTANT"
        else f"y = layout.pad{{padding=[1, 2, 3, 1], method='{method}'}}(x);",
        {"x": x},
        {"y": "real"},
    )
    kwargs = {"constant_values": 0.5} if method == "CONSTANT" else {}
    check(out["y"], np.pad(x, [(1, 3), (2, 1)], numpy_mode[method], **kwargs))


def test_tile_broadcast_slice():
    x = real(2, 3)
    out = run(
        "t = layout.tile{repeats=[2, 3]}(x); b = layout.broadcast{axes=[0], shape=[4]}(r); "
        "s = layout.slice{axes=[1], begin=[0], end=[3], stride=[2]}(x); "
        "s2 = layout.slice{axes=[0, 1], begin=[1, 2], end=[0, 0], stride=[-1, -1]}(x);",
        {"x": x, "r": real(1, 3)},
        {"t": "real", "b": "real", "s": "real", "s2": "real"},
    )
    check(out["t"], np.tile(x, (2, 3)))
    assert out["b"].shape == (4, 3)
    check(out["s"], x[:, 0:3:2])
    check(out["s2"], x[1:0:-1, 2:0:-1])


def test_space_depth_shuffles():
    x = real(1, 2, 4, 6)
    out = run(
        "a = layout.space_to_depth{block_size=[2, 2]}(x); b = layout.depth_to_space{block_size=[2, 2]}(a); "
        "c = layout.space_to_batch{block_size=[2, 3]}(x); d = layout.batch_to_space{block_size=[2, 3]}(c); "
        "e = layout.shuffle{axis=1, groups=2}(y);",
        {"x": x, "y": real(1, 6, 2)},
        dict.fromkeys("abcde", "real"),
    )
    check(out["b"], x)  # the two are inverses
    check(out["d"], x)
    blocks = x.reshape(1, 2, 2, 2, 3, 2).transpose(0, 3, 5, 1, 2, 4).reshape(1, 8, 2, 3)
    check(out["a"], blocks)
    assert out["c"].shape == (6, 2, 2, 2)


def test_gather_scatter():
    data = real(3, 5, 2)
    index = ints(0, 5, 2, 2)
    out = run(
        "g = layout.gather{axis=1}(data, index); gn = layout.gather_nd(data, ind);",
        {"data": data, "index": index, "ind": np.array([[0, 1], [2, 4], [1, 1]], np.int32)},
        {"g": "real", "gn": "real"},
    )
    check(out["g"], np.take(data, index, axis=1))
    check(out["gn"], data[[0, 2, 1], [1, 4, 1]])
    base = real(3, 5)
    indices = np.array([[0, 3], [1, 1], [4, 2]], np.int32)  # a repeated index: the last write wins
    updates = real(3, 2)
    out = run(
        "s = layout.scatter{axis=1}(base, indices, updates); sn = layout.scatter_nd(base, nd, up);",
        {
            "base": base,
            "indices": indices,
            "updates": updates,
            "nd": np.array([[0, 1], [2, 3], [0, 1]], np.int32),
            "up": real(3),
        },
        {"s": "real", "sn": "real"},
    )
    expected = base.copy()
    for i in range(3):
        for j in range(2):
            expected[i, indices[i, j]] = updates[i, j]
    check(out["s"], expected)
    assert out["sn"].shape == (3, 5)


def test_nonzero_counts_its_outputs():
    x = np.array([[0, 1.5, 0, 2], [3, 0, 0, 0], [0, 0, 4, 5]], np.float32)
    out = run("y = layout.nonzero(x);", {"x": x}, {"y": "int"})
    check(out["y"], np.stack(np.nonzero(x)).astype(np.int32))
    z = np.zeros((2, 2), np.float32)
    assert run("y = layout.nonzero(x);", {"x": z}, {"y": "int"})["y"].shape == (2, 0)


def test_generators_and_casts():
    out = run(
        "r = layout.range{first=1.0, last=3.0, stride=0.5}(); t = layout.tensor{shape=[2, 2], "
        "value=[1.0, 2.0, 3.0, 4.0]}(); u = layout.uniform{shape=[2, 3]}(v); c = layout.cast<int>(x); "
        "sh = layout.shape(x); ri = layout.range{first=5, last=-1, stride=-2}();",
        {"v": np.array(2.5, np.float32), "x": np.array([[1.7, -1.7, 0.2]], np.float32)},
        {"r": "real", "t": "real", "u": "real", "c": "int", "sh": "int", "ri": "int"},
    )
    check(out["r"], np.arange(1.0, 3.0, 0.5))
    check(out["t"], [[1, 2], [3, 4]])
    check(out["u"], np.full((2, 3), 2.5))
    check(out["c"], np.array([[1, -1, 0]], np.int32))
    check(out["sh"], np.array([1, 3], np.int32))
    check(out["ri"], np.array([5, 3, 1], np.int32))


# ------------------------------------------------------------------------------------------------
# image


def test_up_and_down_sampling():
    x = real(1, 2, 4, 6)
    out = run(
        "a = image.nearest_upsample{axes=[2, 3], factor=[2, 3]}(x); "
        "b = image.nearest_downsample{axes=[2, 3], factor=[2, 3]}(x); "
        "c = image.area_downsample{axes=[2, 3], factor=[2, 2]}(x);",
        {"x": x},
        {"a": "real", "b": "real", "c": "real"},
    )
    check(out["a"], x.repeat(2, 2).repeat(3, 3))
    check(out["b"], x[:, :, ::2, ::3])
    check(out["c"], x.reshape(1, 2, 2, 2, 3, 2).mean((3, 5)))


def _linear_resize_ref(x, axis, size, transform):
    n = x.shape[axis]
    scale = n / size if transform != "ALIGNED" else (0.0 if size <= 1 else (n - 1) / (size - 1))
    offset = 0.5 * scale - 0.5 if transform == "SYMMETRIC" else 0.0
    r = np.arange(size) * scale + offset
    lo = np.floor(r).astype(int)
    w = r - lo
    take = lambda i: np.take(x, np.clip(i, 0, n - 1), axis=axis)  # noqa: E731
    shape = [1] * x.ndim
    shape[axis] = size
    return take(lo) * (1 - w).reshape(shape) + take(lo + 1) * w.reshape(shape)


@pytest.mark.parametrize("transform", ["SYMMETRIC", "ASYMMETRIC", "ALIGNED"])
def test_resize(transform):
    x = real(1, 2, 4, 5)
    out = run(
        f"n = image.resize{{axes=[2, 3], size=[7, 3], coordinate_transform='{transform}'}}(x); "
        f"l = image.resize{{axes=[2, 3], size=[7, 3], mode='LINEAR', "
        f"coordinate_transform='{transform}'}}(x);",
        {"x": x},
        {"n": "real", "l": "real"},
    )
    expected = _linear_resize_ref(_linear_resize_ref(x, 2, 7, transform), 3, 3, transform)
    check(out["l"], expected, atol=1e-5)
    rows = []
    for axis, size in ((2, 7), (3, 3)):
        n = x.shape[axis]
        scale = n / size if transform != "ALIGNED" else (n - 1) / (size - 1)
        offset = 0.5 * scale - 0.5 if transform == "SYMMETRIC" else 0.0
        # ROUND_PREFER_FLOOR (the default), in float32 like the kernel: ties must round the same way
        position = np.arange(size, dtype=np.float32) * np.float32(scale) + np.float32(offset)
        prefer_floor = np.ceil(position - np.float32(0.5))
        rows.append(np.minimum(prefer_floor.astype(int), n - 1))
    check(out["n"], x[:, :, rows[0]][:, :, :, rows[1]])


def test_linear_upsample_matches_its_separable_filter():
    x = real(1, 1, 3, 4)
    out = run("y = image.linear_upsample{axes=[2, 3], factor=[2, 2]}(x);", {"x": x}, {"y": "real"})

    # factor 2, symmetric, replicate border: each output is 3/4 of the nearer and 1/4 of the farther input
    def up(a, axis):
        n = a.shape[axis]
        padded = np.take(a, np.clip(np.arange(-1, n + 1), 0, n - 1), axis=axis)
        lo = np.take(padded, np.arange(0, n), axis=axis)
        mid = np.take(padded, np.arange(1, n + 1), axis=axis)
        hi = np.take(padded, np.arange(2, n + 2), axis=axis)
        even, odd = 0.25 * lo + 0.75 * mid, 0.75 * mid + 0.25 * hi
        return np.stack([even, odd], axis=axis + 1).reshape(*a.shape[:axis], 2 * n, *a.shape[axis + 1 :])

    check(out["y"], up(up(x, 2), 3))


def test_grid_sample():
    x = real(1, 2, 4, 5)
    grid = (RNG.random((1, 3, 3, 2)) * 2.4 - 1.2).astype(np.float32)
    out = run(
        "l = image.grid_sample(x, grid); n = image.grid_sample{mode='NEAREST'}(x, grid); "
        "r = image.grid_sample{mode='NEAREST', padding='REPLICATE'}(x, grid);",
        {"x": x, "grid": grid},
        {"l": "real", "n": "real", "r": "real"},
    )
    h, w = 4, 5
    px = (grid[..., 0] + 1) * 0.5 * w - 0.5
    py = (grid[..., 1] + 1) * 0.5 * h - 0.5

    def at(yy, xx, clamp):
        if clamp:
            yy, xx = np.clip(yy, 0, h - 1), np.clip(xx, 0, w - 1)
        valid = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
        values = x[0][:, np.clip(yy, 0, h - 1), np.clip(xx, 0, w - 1)]
        return np.where(valid, values, 0.0)

    rounded = lambda v: np.where(v < 0, -np.floor(-v + 0.5), np.floor(v + 0.5)).astype(int)  # noqa: E731
    check(out["n"][0], at(rounded(py[0]), rounded(px[0]), False))
    check(out["r"][0], at(rounded(py[0]), rounded(px[0]), True))
    x0, y0 = np.floor(px[0]).astype(int), np.floor(py[0]).astype(int)
    fx, fy = px[0] - x0, py[0] - y0
    bilinear = (
        at(y0, x0, False) * (1 - fx) * (1 - fy)
        + at(y0, x0 + 1, False) * fx * (1 - fy)
        + at(y0 + 1, x0, False) * (1 - fx) * fy
        + at(y0 + 1, x0 + 1, False) * fx * fy
    )
    check(out["l"][0], bilinear, atol=1e-5)


def test_cubic_resize_interpolates_linear_ramps_exactly():
    ramp = np.arange(8, dtype=np.float32).reshape(1, 1, 1, 8) * 0.5
    out = run(
        "y = image.resize{axes=[3], size=[16], mode='CUBIC', coordinate_transform='ALIGNED', "
        "cubic_coeff_a=-0.5}(x); z = image.resize{axes=[3], size=[16], mode='CUBIC'}(x);",
        {"x": ramp},
        {"y": "real", "z": "real"},
    )
    inner = np.linspace(0, 3.5, 16)
    check(out["y"][0, 0, 0, 3:-3], inner[3:-3], atol=1e-4)  # Keys' kernel with a = -1/2 reproduces lines
    position = np.arange(16) * 0.5 + 0.25 - 0.5  # SYMMETRIC, a = -0.75: Keys' weights by hand
    base = np.floor(position).astype(int)
    expected = np.zeros(16)
    for tap in range(-1, 3):
        distance = np.abs(position - (base + tap))
        a = -0.75
        weight = np.where(
            distance <= 1,
            ((a + 2) * distance - (a + 3)) * distance**2 + 1,
            np.where(distance < 2, ((a * distance - 5 * a) * distance + 8 * a) * distance - 4 * a, 0),
        )
        expected += weight * ramp[0, 0, 0, np.clip(base + tap, 0, 7)]
    check(out["z"][0, 0, 0], expected, atol=1e-5)


# ------------------------------------------------------------------------------------------------
# quantization, algorithms, random, misc


def test_quantization_round_trips():
    x = real(2, 3)
    out = run(
        "a = quant.zero_point_linear_quantize{zero_point=3, scale=0.05, bits=8}(x); "
        "b = quant.min_max_linear_quantize{min=-1.0, max=1.0, bits=4, signed=false}(x);",
        {"x": x},
        {"a": "real", "b": "real"},
    )
    half_away = lambda v: np.where(v < 0, -np.floor(-v + 0.5), np.floor(v + 0.5))  # noqa: E731
    q = np.clip(3 + half_away(x / 0.05), -128, 127)
    check(out["a"], (q - 3) * 0.05, atol=1e-5)
    r = 2**4 - 1
    qb = half_away((np.clip(x, -1, 1) + 1) / 2 * r)
    check(out["b"], qb / r * 2 - 1, atol=1e-5)


@pytest.mark.parametrize("largest", [True, False])
def test_top_k(largest):
    x = ints(0, 6, 3, 7).astype(np.float32)
    out = run(
        f"v, i = algo.top_k{{k=3, axis=1, largest={'true' if largest else 'false'}}}(x);",
        {"x": x},
        {"v": "real", "i": "int"},
    )
    order = np.argsort(-x if largest else x, axis=1, kind="stable")[:, :3]
    check(out["i"], order.astype(np.int32))
    check(out["v"], np.take_along_axis(x, order, 1))


def test_random_generators_have_the_right_statistics():
    out = run(
        "u = rand.uniform{shape=[4000], min=-2.0, max=3.0}(); "
        "n = rand.normal{shape=[4000], mean=1.0, std=2.0}(); "
        "b = rand.bernoulli{shape=[4000], prob=0.25}();",
        {},
        {"u": "real", "n": "real", "b": "bool"},
    )
    u, n, b = out["u"], out["n"], out["b"]
    assert u.min() >= -2.0 and u.max() < 3.0 and abs(u.mean() - 0.5) < 0.15
    assert abs(n.mean() - 1.0) < 0.15 and abs(n.std() - 2.0) < 0.15
    assert abs(b.mean() - 0.25) < 0.05
    assert len(np.unique(u)) > 3900  # not a constant or a short cycle


def test_mesh_grid_and_lstm():
    a, b = real(3), real(4)
    out = run("[g0, g1] = misc.mesh_grid([a, b]);", {"a": a, "b": b}, {"g0": "real", "g1": "real"})
    e0, e1 = np.meshgrid(a, b, indexing="ij")
    check(out["g0"], e0)
    check(out["g1"], e1)
    steps, batch, channels, hidden = 3, 2, 3, 4
    x, w, r, bias = (
        real(steps, batch, channels),
        real(4 * hidden, channels),
        real(4 * hidden, hidden),
        real(4 * hidden),
    )
    out = run(
        "y, h, c = nn.lstm(x, w, r, bias);",
        {"x": x, "w": w, "r": r, "bias": bias},
        {"y": "real", "h": "real", "c": "real"},
    )
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    h = np.zeros((batch, hidden), np.float32)
    c = np.zeros((batch, hidden), np.float32)
    ys = []
    for t in range(steps):
        gates = x[t] @ w.T + bias + h @ r.T
        i, f, g, o = np.split(gates, 4, axis=1)
        c = sig(f) * c + sig(i) * np.tanh(g)
        h = sig(o) * np.tanh(c)
        ys.append(h)
    check(out["y"], np.stack(ys), atol=1e-4)
    check(out["h"], h, atol=1e-4)
    check(out["c"], c, atol=1e-4)


# ------------------------------------------------------------------------------------------------
# the C backend, where there is one


@pytest.mark.skipif("c" not in uv.backends.available(), reason="no C compiler on this machine")
def test_c_backend_runs_the_same_kernels():
    x, w, b = real(1, 3, 7, 7), real(4, 3, 3, 3), real(4)
    out = run(
        "y = nn.conv{stride=2, padding=[1, 1, 1, 1]}(x, w, b); p = nn.max_pool{size=3, stride=2}(y); "
        "s = nn.softmax(p); t = math.tanh(x); z = nn.deconv{stride=2}(x, v);",
        {"x": x, "w": w, "b": b, "v": real(3, 2, 3, 3)},
        {"y": "real", "p": "real", "s": "real", "t": "real", "z": "real"},
        backend="c",
    )
    conv = conv_ref(x, w, b, stride=2, padding=[1, 1, 1, 1])
    check(out["y"], conv, atol=1e-4)
    pooled = pool_ref(conv, "max", size=3, stride=2)
    check(out["p"], pooled, atol=1e-4)
    check(out["s"], softmax_ref(pooled, [1]), atol=1e-5)
    check(out["t"], np.tanh(x), atol=1e-5)
    assert out["z"].shape == (1, 2, 14, 14)


def test_layer_batch_norm_updates_its_running_statistics():
    from uopviz.nnef import loads

    x = real(4, 3, 2, 2)
    graph = loads(
        "import layer;\ngraph G { @input { x: real[4, 3, 2, 2]; } @output { y: real; } "
        "@compose { y = bn: layer.batch_norm{momentum=0.25}(x); } }",
        variables={
            "bn.running_mean": np.zeros(3, np.float32),
            "bn.running_variance": np.ones(3, np.float32),
            "bn.bias": np.full(3, 0.5, np.float32),
            "bn.scale": np.full(3, 2.0, np.float32),
        },
    )
    assert graph.updates == {
        "bn.running_mean": "bn.running_mean.updated",
        "bn.running_variance": "bn.running_variance.updated",
    }
    mean, var = x.mean((0, 2, 3)), x.var((0, 2, 3))
    out = graph.run({"x": x}, update=True)
    check(
        out["y"],
        (x - mean.reshape(1, 3, 1, 1)) / np.sqrt(var.reshape(1, 3, 1, 1) + 1e-5) * 2.0 + 0.5,
        atol=1e-4,
    )
    check(graph.tensors["bn.running_mean"].data, 0.25 * mean)
    check(graph.tensors["bn.running_variance"].data, 0.75 + 0.25 * var)
    graph.run({"x": x}, update=True)  # a second step moves them further
    check(graph.tensors["bn.running_mean"].data, 0.75 * 0.25 * mean + 0.25 * mean)


def _nms_reference(boxes, scores, iou_threshold, limit, score_threshold=None):
    rows = []
    for b in range(boxes.shape[0]):
        corners = np.stack(
            [
                np.minimum(boxes[b, :, 0], boxes[b, :, 2]),
                np.minimum(boxes[b, :, 1], boxes[b, :, 3]),
                np.maximum(boxes[b, :, 0], boxes[b, :, 2]),
                np.maximum(boxes[b, :, 1], boxes[b, :, 3]),
            ],
            1,
        )
        area = (corners[:, 2] - corners[:, 0]) * (corners[:, 3] - corners[:, 1])
        for c in range(scores.shape[1]):
            order = sorted(range(boxes.shape[1]), key=lambda i: (-scores[b, c, i], i))
            kept = []
            for i in order:
                if score_threshold is not None and not scores[b, c, i] > score_threshold:
                    continue
                overlaps = False
                for j in kept:
                    h = max(min(corners[i, 2], corners[j, 2]) - max(corners[i, 0], corners[j, 0]), 0)
                    w = max(min(corners[i, 3], corners[j, 3]) - max(corners[i, 1], corners[j, 1]), 0)
                    union = area[i] + area[j] - h * w
                    overlaps = overlaps or (union > 0 and h * w / union > iou_threshold)
                if not overlaps:
                    kept.append(i)
            rows += [[b, c, i] for i in kept[:limit]]
    return np.array(rows, np.int32).reshape(-1, 3)


@pytest.mark.parametrize("iou, limit, minimum", [(0.5, 3, None), (0.3, 10, 0.2), (0.0, 2, None)])
def test_nonmax_suppress(iou, limit, minimum):
    rng = np.random.default_rng(int(iou * 10) + limit)
    corners = rng.random((2, 7, 2)) * 4
    boxes = np.concatenate([corners, corners + rng.random((2, 7, 2)) * 3], -1).astype(np.float32)
    boxes[0, 3] = boxes[0, 3, [2, 3, 0, 1]]  # a box given with its corners swapped
    scores = rng.random((2, 3, 7)).astype(np.float32)
    threshold = "" if minimum is None else f", score_threshold={minimum}"
    out = run(
        f"i = algo.nonmax_suppress{{iou_threshold={iou}, max_outputs_per_class={limit}{threshold}}}(bx, sc);",
        {"bx": boxes, "sc": scores},
        {"i": "int"},
    )
    check(out["i"], _nms_reference(boxes, scores, iou, limit, minimum))


@skip_when_emulated(("haswell",), "every backend, the numpy interpreter included, keeps every box "
                    "(54 rows for 48); the same test passes on this host natively, with numpy held to its "
                    "AVX2 code (NPY_DISABLE_CPU_FEATURES=X86_V4) and on emulated Nehalem, so qemu's "
                    "AVX2/FMA emulation computes it wrong")
@pytest.mark.parametrize("backend", SCAN_BACKENDS)
@pytest.mark.parametrize("n", [1, 9, 40])
def test_nonmax_suppress_with_ties_and_degenerate_boxes(backend, n):
    # issue 21: n rounds of n² work each; now one kernel decides the boxes in rank order
    rng = np.random.default_rng(n)
    corners = rng.integers(0, 6, (2, n, 2)).astype(np.float32)  # integer corners: many equal boxes
    sizes = rng.integers(0, 4, (2, n, 2)).astype(np.float32)  # 0: a box of no area
    boxes = np.concatenate([corners, corners + sizes], -1)
    boxes[:, ::3] = boxes[:, ::3][..., [2, 3, 0, 1]]  # corners given the other way round
    scores = rng.integers(0, 4, (2, 3, n)).astype(np.float32) / 4  # ties, some at the threshold
    for iou, limit, minimum in [(0.5, n, None), (0.0, 3, 0.25), (0.3, 2, None)]:
        threshold = "" if minimum is None else f", score_threshold={minimum}"
        attributes = f"iou_threshold={iou}, max_outputs_per_class={limit}{threshold}"
        out = run(
            f"i = algo.nonmax_suppress{{{attributes}}}(bx, sc);",
            {"bx": boxes, "sc": scores},
            {"i": "int"},
            backend=backend,
        )
        check(out["i"], _nms_reference(boxes, scores, iou, limit, minimum))


def test_nonmax_suppress_kernels_do_not_grow_with_the_box_count():
    from uopviz.core.ops import Ops
    from uopviz.passes.optops.axes import sequential_axes

    def kernels(n):
        return compose(
            f"import algo; graph G {{ @input {{ bx: real[1, {n}, 4]; sc: real[1, 2, {n}]; }} "
            f"@output {{ i: int; }} @compose {{ i = algo.nonmax_suppress{{iou_threshold=0.5}}(bx, sc); }} }}",
            file="nms.sknd",
        ).lower()

    assert len(kernels(8)) == len(kernels(512))  # it had a round kernel per box
    work = sum(  # the product of each kernel's loops (it overcounts loops that do not nest): O(n²)
        math.prod(int(u.src[0].arg[0]) for u in kernel.ast.toposort() if u.op is Ops.RANGE)
        for kernel in kernels(512)
    )
    assert work <= 16 * 512 * 512  # the rounds were 512 kernels of 2 * 512 * 512
    (decide,) = [k for k in kernels(512) if sequential_axes(k.ast)]
    assert [int(r.src[0].arg[0]) for r in sequential_axes(decide.ast)] == [512]


def test_remaining_layout_and_math_values():
    x = real(1, 3, 1, 4)
    a, b = real(2, 3), real(2, 3)
    q, r = positive(2, 3), real(2, 3)
    out = run(
        "sq = layout.squeeze{axes=[0, 2]}(x); br = layout.broadcast{axes=[0, 2], shape=[2, 5]}(x); "
        "pw = math.pow(q, r); gt = math.gt(a, b); le = math.le(a, b); ge = math.ge(a, b); "
        "ne = math.ne(a, b); ax = math.axpy(a, b, 2.0, r); id = math.iden(a); "
        "gs = nn.gelu{approximate='SIGMOID'}(a);",
        {"x": x, "a": a, "b": b, "q": q, "r": r},
        dict.fromkeys(["sq", "br", "pw", "ax", "id", "gs"], "real")
        | dict.fromkeys(["gt", "le", "ge", "ne"], "bool"),
    )
    check(out["sq"], x.reshape(3, 4))
    check(out["br"], np.broadcast_to(x, (2, 3, 5, 4)))
    check(out["pw"], q**r, rtol=1e-4)
    check(out["gt"], a > b)
    check(out["le"], a <= b)
    check(out["ge"], a >= b)
    check(out["ne"], a != b)
    check(out["ax"], a * b + 2.0 * r)
    check(out["id"], a)
    check(out["gs"], a / (1 + np.exp(-1.702 * a)))


def test_space_to_batch_and_shuffle_values():
    s, t = real(1, 2, 4, 6), real(1, 6, 2)
    base, nd, up = real(3, 5), np.array([[0, 1], [2, 3], [0, 4]], np.int32), real(3)
    out = run(
        "sb = layout.space_to_batch{block_size=[2, 2]}(s); sh = layout.shuffle{axis=1, groups=2}(t); "
        "sn = layout.scatter_nd(base, nd, up);",
        {"s": s, "t": t, "base": base, "nd": nd, "up": up},
        {"sb": "real", "sh": "real", "sn": "real"},
    )
    # blocks first: batch index = (block row, block column, batch)
    expected = s.reshape(1, 2, 2, 2, 3, 2).transpose(3, 5, 0, 1, 2, 4).reshape(4, 2, 2, 3)
    check(out["sb"], expected)
    check(out["sh"], t.reshape(1, 2, 3, 2).transpose(0, 2, 1, 3).reshape(1, 6, 2))
    expected = base.copy()
    expected[nd[:, 0], nd[:, 1]] = up
    check(out["sn"], expected)


def test_rescale_and_layers():
    x = real(1, 2, 4, 4)
    out = run("r = image.rescale{axes=[2, 3], factor=[2.0, 0.5]}(x);", {"x": x}, {"r": "real"})
    check(out["r"], x.repeat(2, 2)[:, :, :, ::2])  # nearest, symmetric: each output reads its source pixel
    from uopviz.nnef import loads

    w, b = real(4, 3), real(4)
    graph = loads(
        "import layer;\ngraph G { @input { x: real[2, 3]; } @output { y: real; } "
        "@compose { y = fc: layer.linear{channels=4}(x); } }",
        variables={"fc.filter": w, "fc.bias": b},
    )
    v = real(2, 3)
    check(graph.run({"x": v})["y"], v @ w.T + b)


def test_lstm_with_run_time_step_counts_per_batch_item():
    steps_max, batch, channels, hidden = 4, 3, 2, 3
    x, w, r, bias = (
        real(steps_max, batch, channels),
        real(4 * hidden, channels),
        real(4 * hidden, hidden),
        real(4 * hidden),
    )
    steps = np.array([4, 1, 2], np.int32)
    out = run(
        "y, h, c = nn.lstm(x, w, r, bias, ~, ~, steps);",
        {"x": x, "w": w, "r": r, "bias": bias, "steps": steps},
        {"y": "real", "h": "real", "c": "real"},
    )
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    for item in range(batch):
        h = np.zeros(hidden, np.float32)
        c = np.zeros(hidden, np.float32)
        for t in range(steps[item]):
            i, f, g, o = np.split(x[t, item] @ w.T + bias + h @ r.T, 4)
            c = sig(f) * c + sig(i) * np.tanh(g)
            h = sig(o) * np.tanh(c)
            check(out["y"][t, item], h, atol=1e-4)  # beyond the item's count the outputs are unspecified
        check(out["h"][item], h, atol=1e-4)
        check(out["c"][item], c, atol=1e-4)


def lstm_reference(x, w, r, bias, lengths, h0=None, c0=None):
    """numpy's LSTM over ``x`` [steps, batch, channels] where item b runs ``lengths[b]`` steps
    (clamped to [0, steps]) from ``h0``/``c0`` (zeros when None): the rows of Y up to the longest
    run, and the final h and c."""
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    steps, batch, hidden = x.shape[0], x.shape[1], r.shape[1]
    runs = np.clip(lengths, 0, steps)
    ys = np.zeros((int(runs.max(initial=0)), batch, hidden), np.float32)
    h = np.zeros((batch, hidden), np.float32) if h0 is None else np.array(h0, np.float32)
    c = np.zeros((batch, hidden), np.float32) if c0 is None else np.array(c0, np.float32)
    for item in range(batch):
        for t in range(runs[item]):
            i, f, g, o = np.split(x[t, item] @ w.T + bias + h[item] @ r.T, 4)
            c[item] = sig(f) * c[item] + sig(i) * np.tanh(g)
            h[item] = sig(o) * np.tanh(c[item])
            ys[t, item] = h[item]
    return ys, runs, h, c


#: the backends that run NNEF graphs here: the python interpreter and the compiled ones available
LSTM_BACKENDS = ["python", *(name for name in ("c", "llvm", "opencl") if name in uv.backends.available())]


@pytest.mark.parametrize("backend", LSTM_BACKENDS)
# one shape in the target and emulated-CPU runs (an LSTM case takes ~1 s here, ~15 s under qemu);
# every shape in `make test`
@pytest.mark.parametrize("steps, batch, channels, hidden", [
    (3, 1, 5, 4), *(pytest.param(*shape, marks=pytest.mark.slow) for shape in [(4, 3, 2, 3), (5, 2, 3, 2)])])
def test_lstm_over_a_run_time_length_returns_that_many_rows(backend, steps, batch, channels, hidden):
    # Y: real[~|steps, batch, hidden] has the run-time extent of the longest run (issue 21): with
    # len=[2] of 3 steps it had 3 rows, the third an extra unmasked step
    from uopviz.nnef import loads

    graph = loads(
        "import nn;\ngraph G { @input { x: real[" + f"{steps}, {batch}, {channels}]; w: real[{4 * hidden}, "
        f"{channels}]; r: real[{4 * hidden}, {hidden}]; b: real[{4 * hidden}]; len: int[{batch}]; }}"
        f" @output {{ Y: real[~|{steps}, {batch}, {hidden}]; h: real; c: real; }}"
        " @compose { Y, h, c = nn.lstm(x, w, r, b, ~, ~, len); } }"
    )
    x, w, r = real(steps, batch, channels), real(4 * hidden, channels), real(4 * hidden, hidden)
    bias = real(4 * hidden)
    for lengths in (RNG.integers(0, steps + 1, batch), np.full(batch, steps - 1), np.full(batch, steps + 2),
                    np.zeros(batch)):
        lengths = lengths.astype(np.int32)
        out = graph.run({"x": x, "w": w, "r": r, "b": bias, "len": lengths}, backend=backend)
        ys, runs, h, c = lstm_reference(x, w, r, bias, lengths)
        assert out["Y"].shape == ys.shape, (lengths, out["Y"].shape)
        for item in range(batch):  # past an item's own run the rows are unspecified
            check(out["Y"][: runs[item], item], ys[: runs[item], item], atol=1e-4)
        check(out["h"], h, atol=1e-4)
        check(out["c"], c, atol=1e-4)


@pytest.mark.parametrize("backend", LSTM_BACKENDS)
@pytest.mark.parametrize("steps, batch, channels, hidden", [  # one shape outside `make test`, as above
    (5, 2, 3, 2), *(pytest.param(*shape, marks=pytest.mark.slow) for shape in [(3, 3, 2, 3), (4, 2, 4, 8)])])
def test_lstm_final_state_of_every_per_item_length_combination(backend, steps, batch, channels, hidden):
    # issue 21: cN of the per-item loops (nn._jagged_lstm_loops) was reported wrong on C for lengths
    # such as [5, 2] and [2, 0]; every combination of none, some, all and more than all steps per
    # item, from given h0/c0, against numpy, on every backend that runs graphs here
    from uopviz.nnef import loads

    graph = loads(
        "import nn;\ngraph G { @input { x: real[" + f"{steps}, {batch}, {channels}]; w: real[{4 * hidden}, "
        f"{channels}]; r: real[{4 * hidden}, {hidden}]; b: real[{4 * hidden}]; h0: real[{batch}, {hidden}]; "
        f"c0: real[{batch}, {hidden}]; len: int[{batch}]; }}"
        f" @output {{ Y: real[~|{steps}, {batch}, {hidden}]; h: real; c: real; }}"
        " @compose { Y, h, c = nn.lstm(x, w, r, b, h0, c0, len); } }"
    )
    x, w, r = real(steps, batch, channels), real(4 * hidden, channels), real(4 * hidden, hidden)
    bias, h0, c0 = real(4 * hidden), real(batch, hidden), real(batch, hidden)
    for lengths in itertools.product(sorted({0, 1, steps - 1, steps, steps + 2}), repeat=batch):
        lengths = np.array(lengths, np.int32)
        inputs = {"x": x, "w": w, "r": r, "b": bias, "h0": h0, "c0": c0, "len": lengths}
        out = graph.run(inputs, backend=backend)
        ys, runs, h, c = lstm_reference(x, w, r, bias, lengths, h0, c0)
        assert out["Y"].shape == ys.shape, (lengths, out["Y"].shape)
        for item in range(batch):
            check(out["Y"][: runs[item], item], ys[: runs[item], item], atol=1e-4)
        check(out["h"], h, atol=1e-4)
        check(out["c"], c, atol=1e-4)


@pytest.mark.parametrize(
    "body, inputs",
    [
        ("y = nn.conv{padding=[1, 1, 1, 1]}(x, w, b);", {"x": (1, 3, 8, 8), "w": (4, 3, 3, 3), "b": (4,)}),
        ("y = nn.conv{stride=2, groups=2}(x, w);", {"x": (2, 4, 9, 7), "w": (6, 2, 3, 2)}),
        ("y = nn.deconv{stride=2, padding=[1, 0, 1, 1]}(x, w);", {"x": (1, 2, 4, 3), "w": (2, 3, 3, 3)}),
        ("y = linalg.matmul{transB=true}(a, c);", {"a": (5, 12), "c": (7, 12)}),
        ("y = nn.max_pool{size=3, stride=2, padding=[1, 1, 1, 1]}(x);", {"x": (1, 2, 9, 8)}),
        ("y = nn.softmax{axes=[1]}(x);", {"x": (3, 10)}),
    ],
)
def test_heuristic_opts_keep_stdlib_kernels_right(body, inputs):
    # the kernels @lower writes number their ranges from 1: the heuristic's tiles must find their
    # axes again after each opt renumbers them (a conv failed to compile with opts="heuristic")
    arrays = {name: real(*shape) for name, shape in inputs.items()}
    graph = compose("import nn; import linalg;\ngraph G { @input { "
                    + " ".join(f"{n}: real[{', '.join(map(str, a.shape))}];" for n, a in arrays.items())
                    + f" }} @output {{ y: real; }} @compose {{ {body} }} }}", file="ops.sknd")
    expected = graph.run(arrays, backend="python")["y"]
    tuned = graph.run(arrays, backend="c", opts="heuristic")["y"]
    check(tuned, expected, atol=1e-4)
    assert any(k.opts for k in graph.compile(backend="c", opts="heuristic").kernels)
