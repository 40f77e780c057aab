"""Every public Tensor method against its numpy counterpart, table-driven, over edge shapes (0-size
axes, size 1, 0-d) and edge values (±0, ±inf, nan, huge, tiny, negative) on every CPU backend.

Each row of :data:`TABLE` names a method, how uopviz calls it, how numpy computes the same, and
which inputs it takes.  numpy's answer is the reference: the result must have numpy's shape, a
dtype numpy would give (or the one uopviz documents), and numpy's values (nan where numpy has
nan, the same infinities, floats within a few ulp).  Where numpy raises, uopviz must raise too.
Where uopviz differs from numpy on purpose the method's docstring says so; those rows say how
(``differs``), and the test checks what the docstring promises instead.

The python backend runs every row in the fast suite; the compiled backends run the same table as
``slow`` tests (one compile per row and shape).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest

import uopviz as uv
from uopviz.backends import available

CPU_BACKENDS = [b for b in ("python", "c", "llvm", "opencl") if b in available()]
SHAPES = [(), (1,), (0,), (1, 1), (3, 0), (0, 4), (2, 3), (2, 1, 3)]
EDGE = np.array(
    [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 3.0e38, -3.0e38, 1e-45, 1e-30, 0.5, -2.5, 7.0]
)


def floats(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """float32 values of ``shape``: the edge values first, then random ones."""
    rng = np.random.default_rng(seed)
    size = int(np.prod(shape))
    values = np.concatenate([EDGE, rng.standard_normal(max(size, 1)) * 4])[:size]
    rng.shuffle(values)
    with np.errstate(over="ignore"):
        return values.astype(np.float32).reshape(shape)


def finite(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """float32 values without inf and nan (for methods whose numpy answer is an undefined order)."""
    rng = np.random.default_rng(seed + 7)
    return (rng.standard_normal(shape) * 3).astype(np.float32)


def ints(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed + 3)
    return rng.integers(-20, 20, shape).astype(np.int32)


def bools(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed + 5)
    return rng.integers(0, 2, shape).astype(bool)


@dataclass(frozen=True)
class Row:
    """One method: ``ours(*tensors)`` against ``theirs(*arrays)`` on inputs made by ``make``
    (one array maker per operand), for the shapes ``shapes`` accepts; ``ulps`` is the float
    tolerance (in units of float32's epsilon, relative)."""

    name: str
    ours: Callable
    theirs: Callable
    make: tuple[Callable, ...] = (floats,)
    shapes: Callable[[tuple[int, ...]], bool] = lambda shape: True
    ulps: float = 4.0
    differs: str = ""
    tags: tuple[str, ...] = field(default=())
    cases: tuple[tuple[int, ...], ...] = ()  # shapes of its own, instead of SHAPES (conv, pools)
    values: bool = True  # False: the values are unspecified (empty, as numpy's): shape and dtype only
    atol: float = 1e-37  # absolute tolerance, for sums whose result may cancel to near 0 (windows)


def _nonempty(shape: tuple[int, ...]) -> bool:
    return int(np.prod(shape)) > 0


def _has_axis(shape: tuple[int, ...]) -> bool:
    return len(shape) > 0


def _softmax(a: np.ndarray, axis: int = -1) -> np.ndarray:
    shifted = a - np.max(a, axis=axis, keepdims=True)
    e = np.exp(shifted)
    return e / np.sum(e, axis=axis, keepdims=True)


UNARY_FLOAT = [
    Row("abs", lambda t: t.abs(), np.abs),
    Row("neg", lambda t: -t, np.negative),
    Row("exp", lambda t: t.exp(), np.exp),
    Row("exp2", lambda t: t.exp2(), np.exp2),
    Row("log", lambda t: t.log(), np.log),
    Row("log2", lambda t: t.log2(), np.log2),
    Row("sin", lambda t: t.sin(), np.sin),
    Row("cos", lambda t: t.cos(), np.cos),
    Row("tan", lambda t: t.tan(), np.tan),
    Row("sqrt", lambda t: t.sqrt(), np.sqrt),
    Row("rsqrt", lambda t: t.rsqrt(), lambda a: 1 / np.sqrt(a)),
    Row("reciprocal", lambda t: t.reciprocal(), np.reciprocal),
    Row("square", lambda t: t.square(), np.square),
    Row("relu", lambda t: t.relu(), lambda a: np.maximum(a, 0)),
    Row("sign", lambda t: t.sign(), np.sign, make=(finite,)),
    Row("trunc", lambda t: t.trunc(), np.trunc),
    Row("floor", lambda t: t.floor(), np.floor),
    Row("ceil", lambda t: t.ceil(), np.ceil),
    Row("logical_not", lambda t: t.logical_not(), np.logical_not),
    Row("sigmoid", lambda t: t.sigmoid(), lambda a: 1 / (1 + np.exp(-a.astype(np.float64))), make=(finite,)),
    Row("tanh", lambda t: t.tanh(), np.tanh, make=(floats,)),
]
BINARY = [
    Row("add", lambda a, b: a + b, np.add, make=(floats, floats)),
    Row("sub", lambda a, b: a - b, np.subtract, make=(floats, floats)),
    Row("mul", lambda a, b: a * b, np.multiply, make=(floats, floats)),
    Row("div", lambda a, b: a / b, np.divide, make=(floats, floats)),
    Row("maximum", lambda a, b: a.maximum(b), np.maximum, make=(finite, finite)),
    Row("minimum", lambda a, b: a.minimum(b), np.minimum, make=(finite, finite)),
    Row(
        "mod",
        lambda a, b: a % b,
        np.mod,
        make=(ints, lambda s, seed=0: np.where(ints(s, 1) == 0, 3, ints(s, 1))),
    ),
    Row(
        "floordiv",
        lambda a, b: a // b,
        np.floor_divide,
        make=(ints, lambda s, seed=0: np.where(ints(s, 2) == 0, 5, ints(s, 2))),
    ),
    Row("pow", lambda a, b: a.abs() ** b, lambda a, b: np.abs(a) ** b, make=(finite, finite), ulps=400),
    Row("lt", lambda a, b: a < b, np.less, make=(floats, floats)),
    Row("le", lambda a, b: a <= b, np.less_equal, make=(finite, finite)),
    Row("eq", lambda a, b: a == b, np.equal, make=(finite, finite)),
    Row("ne", lambda a, b: a != b, np.not_equal, make=(floats, floats)),
    Row("and", lambda a, b: a & b, np.bitwise_and, make=(ints, ints)),
    Row("or", lambda a, b: a | b, np.bitwise_or, make=(ints, ints)),
    Row("xor", lambda a, b: a ^ b, np.bitwise_xor, make=(ints, ints)),
    Row("invert", lambda a: ~a, np.invert, make=(ints,)),
    Row("where", lambda c, a, b: c.where(a, b), np.where, make=(bools, floats, floats)),
    Row("clip", lambda a: a.clip(-1, 2), lambda a: np.clip(a, -1, 2), make=(finite,)),
]
REDUCTIONS = [
    Row("sum", lambda t: t.sum(), np.sum),
    Row("sum axis 0", lambda t: t.sum(0), lambda a: np.sum(a, 0), shapes=_has_axis),
    Row(
        "sum axis -1 keepdim",
        lambda t: t.sum(-1, keepdim=True),
        lambda a: np.sum(a, -1, keepdims=True),
        shapes=_has_axis,
    ),
    Row("prod", lambda t: t.prod(), np.prod, make=(finite,)),
    Row("max", lambda t: t.max(), np.max, make=(finite,)),
    Row("max axis 0", lambda t: t.max(0), lambda a: np.max(a, 0), make=(finite,), shapes=_has_axis),
    Row("min", lambda t: t.min(), np.min, make=(finite,)),
    Row("mean", lambda t: t.mean(), np.mean, make=(finite,)),
    Row("mean axis -1", lambda t: t.mean(-1), lambda a: np.mean(a, -1), make=(finite,), shapes=_has_axis),
    Row("var", lambda t: t.var(), np.var, make=(finite,), ulps=64),
    Row("std", lambda t: t.std(), np.std, make=(finite,), ulps=64),
    Row("any", lambda t: t.any(), np.any, make=(bools,)),
    Row("any axis 0", lambda t: t.any(0), lambda a: np.any(a, 0), make=(bools,), shapes=_has_axis),
    Row("all", lambda t: t.all(), np.all, make=(bools,)),
    Row("all axis -1", lambda t: t.all(-1), lambda a: np.all(a, -1), make=(bools,), shapes=_has_axis),
    Row("argmax", lambda t: t.argmax(), np.argmax, make=(finite,)),
    Row("argmin axis 0", lambda t: t.argmin(0), lambda a: np.argmin(a, 0), make=(finite,), shapes=_has_axis),
    Row("cumsum", lambda t: t.cumsum(), np.cumsum, make=(finite,), ulps=64),
    Row("softmax", lambda t: t.softmax(-1), _softmax, make=(finite,), shapes=_has_axis, ulps=64),
]
MOVEMENT = [
    Row("reshape -1", lambda t: t.reshape(-1), lambda a: a.reshape(-1)),
    Row("flatten", lambda t: t.flatten(), lambda a: a.flatten()),
    Row(
        "transpose",
        lambda t: t.transpose(),
        lambda a: np.swapaxes(a, -2, -1),
        shapes=lambda s: len(s) >= 2,
        differs="swaps two axes (default the last two), as torch; numpy's transpose() is .T / permute",
    ),
    Row("T", lambda t: t.T, lambda a: a.T),
    Row("numel", lambda t: uv.Tensor(np.int32(t.numel())), lambda a: np.int32(a.size)),
    Row("permute", lambda t: t.permute(*reversed(range(t.ndim))), lambda a: np.transpose(a)),
    Row("flip", lambda t: t.flip(), lambda a: np.flip(a)),
    Row("unsqueeze 0", lambda t: t.unsqueeze(0), lambda a: np.expand_dims(a, 0)),
    Row("squeeze", lambda t: t.squeeze(), np.squeeze),
    Row(
        "expand",
        lambda t: t.reshape(1, *t.shape).expand(2, *t.shape),
        lambda a: np.broadcast_to(a, (2, *a.shape)),
    ),
    Row("pad 1", lambda t: t.pad(1), lambda a: np.pad(a, 1)),
    Row("repeat", lambda t: t.repeat(*([2] * t.ndim)), lambda a: np.tile(a, [2] * a.ndim)),
    Row("repeat_interleave", lambda t: t.repeat_interleave(2), lambda a: np.repeat(a, 2)),
    Row(
        "cat",
        lambda a, b: a.cat(b),
        lambda a, b: np.concatenate([a, b]),
        make=(floats, floats),
        shapes=_has_axis,
    ),
    Row("stack", lambda a, b: a.stack(b), lambda a, b: np.stack([a, b]), make=(floats, floats)),
    Row("getitem ::-1", lambda t: t[::-1], lambda a: a[::-1], shapes=_has_axis),
    Row("getitem 0", lambda t: t[0], lambda a: a[0], shapes=lambda s: len(s) > 0 and s[0] > 0),
    Row("cast int32", lambda t: t.cast("int32"), lambda a: a.astype(np.int32), make=(finite,)),
    Row(
        "matmul",
        lambda a, b: a @ b.transpose(),
        lambda a, b: a @ b.T,
        make=(finite, finite),
        shapes=lambda s: len(s) == 2,
        ulps=64,
    ),
    Row(
        "gather",
        lambda t: t.gather(uv.Tensor(np.array([-1, 0], np.int32))),
        lambda a: np.take(a, [-1, 0], axis=0),
        shapes=lambda s: len(s) > 0 and s[0] > 0,
    ),
    Row(
        "scatter_add",
        lambda t: t.scatter_add(
            uv.Tensor(np.array([-1, 0, -1], np.int32)), uv.Tensor(np.ones((3, *t.shape[1:]), np.float32))
        ),
        lambda a: _add_at(a, [-1, 0, -1]),
        shapes=lambda s: len(s) > 0 and s[0] > 0,
    ),
]


def _windows(a: np.ndarray, kernel: int, stride: int, padding: int, dilation: int, fill: float) -> np.ndarray:
    """The ``kernel × kernel`` windows of the last two axes of ``a`` (padded with ``fill``):
    ``(..., oH, oW, kernel, kernel)``, written with loops over the output (the reference must not
    share the implementation's tricks).  A window larger than the padded axis is an error."""
    padded = np.pad(a, [(0, 0)] * (a.ndim - 2) + [(padding, padding)] * 2, constant_values=fill)
    span = dilation * (kernel - 1) + 1
    if min(padded.shape[-2:]) < span:  # uopviz (as torch) refuses, its docstrings say; no empty result
        raise ValueError(f"a window of {span} does not fit in {padded.shape[-2:]}")
    out_h = max((padded.shape[-2] - span) // stride + 1, 0)
    out_w = max((padded.shape[-1] - span) // stride + 1, 0)
    out = np.zeros((*a.shape[:-2], out_h, out_w, kernel, kernel), a.dtype)
    for i in range(out_h):
        for j in range(out_w):
            rows = slice(i * stride, i * stride + span, dilation)
            columns = slice(j * stride, j * stride + span, dilation)
            out[..., i, j, :, :] = padded[..., rows, columns]
    return out


def _conv2d(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None, stride: int = 1, padding: int = 0,
            dilation: int = 1, groups: int = 1) -> np.ndarray:
    """Cross-correlation of ``(N, C_in, H, W)`` with ``(C_out, C_in/groups, kH, kW)``, in float64."""
    windows = _windows(x.astype(np.float64), w.shape[-1], stride, padding, dilation, 0.0)  # N C oH oW k k
    n, c_in = x.shape[:2]
    c_out = w.shape[0]
    windows = windows.reshape(n, groups, c_in // groups, *windows.shape[2:])
    weights = w.astype(np.float64).reshape(groups, c_out // groups, c_in // groups, *w.shape[2:])
    out = np.einsum("ngchwij,gocij->ngohw", windows, weights).reshape(n, c_out, *windows.shape[3:5])
    return (out if bias is None else out + bias.reshape(1, -1, 1, 1)).astype(np.float32)


def _avg_pool2d(a: np.ndarray, kernel: int = 2, stride: int | None = None, padding: int = 0) -> np.ndarray:
    return _windows(a.astype(np.float64), kernel, stride or kernel, padding, 1, 0.0).mean(axis=(-2, -1))


def _max_pool2d(a: np.ndarray, kernel: int = 2, stride: int | None = None, padding: int = 0) -> np.ndarray:
    return _windows(a, kernel, stride or kernel, padding, 1, -np.inf).max(axis=(-2, -1), initial=-np.inf)


def _layernorm(a: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    wide = a.astype(np.float64)
    mean = wide.mean(-1, keepdims=True)
    return (wide - mean) / np.sqrt(((wide - mean) ** 2).mean(-1, keepdims=True) + eps)


def _log_softmax(a: np.ndarray) -> np.ndarray:
    wide = a.astype(np.float64)
    shifted = wide - np.max(wide, axis=-1, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=-1, keepdims=True))


def _gelu(a: np.ndarray) -> np.ndarray:
    x = a.astype(np.float64)
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def _split_points(size: int, piece: int) -> list[int]:
    return list(range(piece, size, piece))


def _weight(shape: tuple[int, ...], seed: int = 0, groups: int = 1) -> np.ndarray:
    """A convolution weight for an input of ``shape``: 4 output channels, 2 × 2 kernels."""
    return finite((4, shape[1] // groups, 2, 2), seed)


def _image(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """:func:`floats` without the huge values (whose sums overflow float32 in an order-dependent way):
    ±0, ±inf, nan and denormals among ordinary values."""
    values = floats(shape, seed)
    return np.where(np.abs(values) > 1e30, np.float32(7.0), values)


IMAGES = ((1, 1, 1, 1), (1, 2, 3, 3), (2, 2, 5, 4), (0, 2, 4, 4), (1, 2, 0, 3))
NETWORK = [
    Row(
        "conv2d",
        lambda x, w: x.conv2d(w),
        _conv2d,
        make=(finite, _weight),
        cases=IMAGES,
        ulps=64,
        atol=1e-4,
    ),
    Row(
        "conv2d bias stride padding dilation",
        lambda x, w, b: x.conv2d(w, b, stride=2, padding=1, dilation=2),
        lambda x, w, b: _conv2d(x, w, b, stride=2, padding=1, dilation=2),
        make=(finite, _weight, lambda shape, seed=0: finite((4,), seed)),
        cases=IMAGES,
        ulps=64,
        atol=1e-4,
    ),
    Row(
        "conv2d groups",
        lambda x, w: x.conv2d(w, groups=2),
        lambda x, w: _conv2d(x, w, groups=2),
        make=(finite, lambda shape, seed=0: _weight(shape, seed, groups=2)),
        cases=((1, 2, 3, 3), (2, 4, 5, 4), (0, 2, 4, 4)),
        ulps=64,
        atol=1e-4,
    ),
    Row("conv2d edge values", lambda x, w: x.conv2d(w), _conv2d, make=(_image, _weight), cases=IMAGES[1:3],
        ulps=64, atol=1e-4),
    Row("avg_pool2d", lambda t: t.avg_pool2d(), _avg_pool2d, cases=IMAGES + ((3, 4), (2, 5, 5)), ulps=8,
        atol=1e-5),
    Row(
        "avg_pool2d 3 stride 1 padding 1",
        lambda t: t.avg_pool2d(3, 1, 1),
        lambda a: _avg_pool2d(a, 3, 1, 1),
        make=(finite,),
        cases=IMAGES + ((3, 4),),
        ulps=8,
        atol=1e-5,
    ),
    Row("max_pool2d", lambda t: t.max_pool2d(), _max_pool2d, cases=IMAGES + ((3, 4), (2, 5, 5))),
    Row(
        "max_pool2d 3 stride 1 padding 1",
        lambda t: t.max_pool2d(3, 1, 1),
        lambda a: _max_pool2d(a, 3, 1, 1),
        cases=IMAGES + ((3, 4),),
    ),
    Row("layernorm", lambda t: t.layernorm(), _layernorm, make=(finite,), shapes=_has_axis, ulps=64),
    Row("log_softmax", lambda t: t.log_softmax(), _log_softmax, make=(finite,), shapes=_has_axis, ulps=64),
    Row("gelu", lambda t: t.gelu(), _gelu, ulps=16),
]
MORE_MOVEMENT = [
    Row(
        "split 2 first",
        lambda t: t.split(2)[0],
        lambda a: np.split(a, _split_points(a.shape[0], 2))[0],
        shapes=_has_axis,
    ),
    Row(
        "split 2 last",
        lambda t: t.split(2)[-1],
        lambda a: np.split(a, _split_points(a.shape[0], 2))[-1],
        shapes=_has_axis,
    ),
    Row(
        "split sizes axis -1",
        lambda t: t.split([1, t.shape[-1] - 1], axis=-1)[1],
        lambda a: np.split(a, [1], axis=-1)[1],
        shapes=lambda s: len(s) > 0 and s[-1] > 0,
    ),
    Row(
        "chunk 2 last",
        lambda t: t.chunk(2)[-1],
        lambda a: np.split(a, _split_points(a.shape[0], -(-a.shape[0] // 2)))[-1],
        shapes=lambda s: len(s) > 0 and s[0] > 0,
    ),
    Row(
        "shrink",
        lambda t: t.shrink(tuple((min(1, size), size) for size in t.shape)),
        lambda a: a[tuple(slice(min(1, size), size) for size in a.shape)],
    ),
    Row(
        "shrink_to",
        lambda t: t.shrink_to(*(size // 2 for size in t.shape)),
        lambda a: a[tuple(slice(0, size // 2) for size in a.shape)],
    ),
    Row(
        "unflatten",
        lambda t: t.unflatten(0, (1, -1)),
        lambda a: a.reshape(1, a.shape[0], *a.shape[1:]),  # (-1 stands for the axis' own size)
        shapes=_has_axis,
    ),
    Row(
        "bitcast int32",
        lambda t: t.bitcast("int32"),
        lambda a: a.view(np.int32),
    ),
    Row("broadcast_to", lambda t: t.broadcast_to(2, *t.shape), lambda a: np.broadcast_to(a, (2, *a.shape))),
    Row("tile", lambda t: t.tile(2), lambda a: np.tile(a, 2)),
    Row(
        "dot",
        lambda a, b: a.dot(b),
        np.dot,
        make=(finite, lambda shape, seed=0: finite(tuple(reversed(shape)), seed)),
        ulps=64,
    ),
    Row("clamp", lambda t: t.clamp(-1, 2), lambda a: np.clip(a, -1, 2), make=(finite,)),
    Row("contiguous", lambda t: t.contiguous(), lambda a: a),
    Row("detach", lambda t: t.detach(), lambda a: a),
]
CONSTRUCTORS = [
    Row("arange", lambda t: uv.Tensor.arange(t.numel()), lambda a: np.arange(a.size, dtype=np.int32)),
    Row(
        "arange float step",
        lambda t: uv.Tensor.arange(-1.5, t.numel() / 2, 0.5),
        lambda a: np.arange(-1.5, a.size / 2, 0.5, dtype=np.float32),
    ),
    Row(
        "eye",
        lambda t: uv.Tensor.eye(*(t.shape[-2:] if t.ndim >= 2 else (t.numel(),))),
        lambda a: np.eye(*(a.shape[-2:] if a.ndim >= 2 else (a.size,)), dtype=np.float32),
    ),
    Row("full", lambda t: uv.Tensor.full(t.shape, 2.5), lambda a: np.full(a.shape, 2.5, np.float32)),
    Row("zeros", lambda t: uv.Tensor.zeros(*t.shape), lambda a: np.zeros(a.shape, np.float32)),
    Row("ones", lambda t: uv.Tensor.ones(*t.shape), lambda a: np.ones(a.shape, np.float32)),
    Row("full_like", lambda t: t.full_like(-3.0), lambda a: np.full_like(a, -3.0)),
    Row("zeros_like", lambda t: t.zeros_like(), np.zeros_like),
    Row("ones_like", lambda t: t.ones_like(), np.ones_like),
    Row("empty", lambda t: uv.Tensor.empty(*t.shape), lambda a: np.empty(a.shape, np.float32), values=False),
]
TABLE = UNARY_FLOAT + BINARY + REDUCTIONS + MOVEMENT + NETWORK + MORE_MOVEMENT + CONSTRUCTORS


def _add_at(a: np.ndarray, index: list[int]) -> np.ndarray:
    out = a.copy()
    np.add.at(out, index, 1)
    return out


def _numpy(row: Row, arrays: list[np.ndarray]) -> np.ndarray | type[Exception]:
    """numpy's answer, or the exception class numpy raises."""
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            return np.asarray(row.theirs(*arrays))
    except (ValueError, IndexError) as error:
        return type(error)


def check(row: Row, shape: tuple[int, ...], backend: str) -> None:
    arrays = [make(shape, seed) for seed, make in enumerate(row.make)]
    expected = _numpy(row, arrays)
    tensors = [uv.Tensor(a) for a in arrays]
    if isinstance(expected, type):
        with pytest.raises((ValueError, IndexError, uv.UOpError) if hasattr(uv, "UOpError") else Exception):
            uv.compile([row.ours(*tensors)], backend=backend).run()
        return
    result = row.ours(*tensors)
    assert result.shape == expected.shape, f"{row.name} {shape}: shape {result.shape}, numpy {expected.shape}"
    if not row.values:
        message = f"{row.name}: {result.dtype.name}, numpy {expected.dtype}"
        assert result.dtype.name == expected.dtype.name, message
        return
    got = uv.compile([result], backend=backend).run()[0] if result.numel() else np.zeros(result.shape)
    got = np.asarray(got)
    if expected.dtype.kind in "biu":
        np.testing.assert_array_equal(got.astype(expected.dtype), expected, err_msg=f"{row.name} {shape}")
        return
    expected = expected.astype(np.float64)
    got = got.astype(np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(expected)), (
        f"{row.name} {shape}: nan at {got} vs {expected}"
    )
    same = ~np.isnan(expected)
    infinite = np.isinf(expected) & same
    np.testing.assert_array_equal(
        got[infinite], expected[infinite], err_msg=f"{row.name} {shape}: infinities"
    )
    rest = same & ~infinite
    tolerance = row.ulps * np.finfo(np.float32).eps
    np.testing.assert_allclose(
        got[rest], expected[rest], rtol=tolerance, atol=row.atol, err_msg=f"{row.name} {shape}"
    )


def _cases(backends: list[str]) -> list:
    return [pytest.param(row, backend, id=f"{row.name}-{backend}") for row in TABLE for backend in backends]


def _run(row: Row, backend: str) -> None:
    for shape in row.cases or SHAPES:
        if row.cases or row.shapes(shape):
            check(row, shape, backend)


@pytest.mark.parametrize(("row", "backend"), _cases(["python"]))
def test_matches_numpy_on_the_python_backend(row: Row, backend: str) -> None:
    _run(row, backend)


@pytest.mark.slow
@pytest.mark.parametrize(("row", "backend"), _cases([b for b in CPU_BACKENDS if b != "python"]))
def test_matches_numpy_on_compiled_backends(row: Row, backend: str) -> None:
    _run(row, backend)


#: public Tensor methods without a row, each with the reason: none of them computes values that a
#: numpy function computes (they read results back, draw random numbers, differentiate or move data
#: between devices), and each is tested where its own kind of behaviour is
NOT_NUMERICAL = {
    "numpy": "reads a result back (the rows' comparisons read results the same way)",
    "item": "reads a one-element result back as a Python scalar",
    "tolist": "reads a result back as nested lists",
    "realized_data": "reads a realized buffer back",
    "rand": "random numbers: a counter-based stream (Threefry), not numpy's generator",
    "randn": "random numbers: a counter-based stream (Threefry), not numpy's generator",
    "manual_seed": "seeds the random stream",
    "backward": "autograd (tests/core/test_gradient.py)",
    "contiguous_backward": "autograd: a kernel boundary for the gradient only",
    "copy": "moves data to another device",
    "to": "moves data to another device",
    "replicated": "places data on several devices",
    "shard": "places data on several devices",
    "collectives": "multi-device reductions (tests/core/test_multi_device_views.py)",
}


def test_every_public_method_has_a_row_or_a_reason() -> None:
    # the table covers the public API: a row's name starts with the method it runs (or the
    # operator's name), and the methods that compute nothing numpy computes are listed with a reason
    covered = {row.name.split()[0] for row in TABLE}
    public = {
        name for name in dir(uv.Tensor) if not name.startswith("_") and callable(getattr(uv.Tensor, name))
    }
    missing = sorted(public - covered - NOT_NUMERICAL.keys())
    assert not missing, f"public Tensor methods without a row: {missing}"
    stale = sorted(NOT_NUMERICAL.keys() - public)
    assert not stale, f"exempted names that are no public Tensor method: {stale}"
    assert not NOT_NUMERICAL.keys() & covered, "a method with a row needs no exemption"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gather_and_scatter_add_follow_numpy_take_and_add_at(seed: int) -> None:
    rng = np.random.default_rng(seed)
    rows = int(rng.integers(2, 7))
    table = rng.standard_normal((rows, 3)).astype(np.float32)
    table[0, 0] = np.inf  # an inf elsewhere must not turn other rows into nan (no 0·inf)
    index = rng.integers(-rows, rows, 5)
    np.testing.assert_array_equal(uv.Tensor(table).gather(uv.Tensor(index)).numpy(), np.take(table, index, 0))
    # computed indices (not data: wrapped when the kernel runs)
    computed = uv.Tensor(index + rows) - rows
    np.testing.assert_array_equal(uv.Tensor(table).gather(computed).numpy(), np.take(table, index, 0))
    values = rng.standard_normal((5, 3)).astype(np.float32)
    expected = table.copy()
    np.add.at(expected, index, values)
    got = uv.Tensor(table).scatter_add(uv.Tensor(index), uv.Tensor(values)).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-6)


@pytest.mark.parametrize("bad", [[5], [0, -6], [[1], [7]]])
def test_gather_and_scatter_add_reject_indices_out_of_range_given_as_data(bad: list) -> None:
    table = uv.Tensor(np.arange(5, dtype=np.float32))
    with pytest.raises(IndexError, match="out of range for size 5"):
        table.gather(uv.Tensor(np.array(bad)))
    with pytest.raises(IndexError, match="out of range for size 5"):
        values = uv.Tensor(np.ones(np.array(bad).shape, np.float32))
        table.scatter_add(uv.Tensor(np.array(bad)), values)


def test_any_and_all_over_zero_size_axes_are_false_and_true() -> None:
    empty = uv.Tensor(np.zeros((2, 0, 3), np.float32))
    assert empty.any(1).numpy().tolist() == np.zeros((2, 0, 3)).any(1).tolist()
    assert empty.all(1).numpy().tolist() == np.zeros((2, 0, 3)).all(1).tolist()
    assert empty.any(1, keepdim=True).shape == (2, 1, 3)
    assert not empty.any().item() and empty.all().item()
    assert empty.any(2).shape == (2, 0)


#: programs whose reads of an input fold away entirely (issue 21 item 5): the kernel then takes no
#: array for that input, and an empty buffer that no kernel wrote is never asked for
FOLDED_READS = [
    ("pad of (0, 4)", [(0, 4)], lambda t: t.pad([(1, 0), (0, 0)]), lambda a: np.pad(a, [(1, 0), (0, 0)])),
    ("pad then only padding", [(2, 4)], lambda t: t.pad([(3, 0), (0, 0)])[:2], lambda a: np.zeros((2, 4))),
    ("only padding plus a read", [(2, 4), (2, 4)], lambda t, u: t.pad([(3, 0), (0, 0)])[:2] + u,
     lambda a, b: b),
    ("max_pool2d of batch 0, pad, prod", [(0, 1, 4, 4)],
     lambda t: t.max_pool2d(2).pad([(1, 0), (0, 0), (0, 0), (0, 0)]).prod(axis=0),
     lambda a: np.pad(np.zeros((0, 1, 2, 2)), [(1, 0), (0, 0), (0, 0), (0, 0)]).prod(axis=0)),
    ("pad of (0, 4) with a fill", [(0, 3)], lambda t: t.pad([(2, 1), (1, 0)], value=2.5),
     lambda a: np.pad(a, [(2, 1), (1, 0)], constant_values=2.5)),
    # found by the slow zero-size sweep: the stacked `t * 2` was loaded at element 0 of an empty
    # buffer outside its guard (the interpreter's bounds check; compiled code read past the buffer)
    ("stack of empty values, padded", [(0,)],
     lambda t: uv.Tensor.stack(t, t * 2, axis=0).pad([(0, 0), (1, 1)]),
     lambda a: np.pad(np.stack([a, a * 2], 0), [(0, 0), (1, 1)])),
]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("opts", [None, "heuristic"])
@pytest.mark.parametrize(("name", "shapes", "ours", "theirs"), FOLDED_READS, ids=[c[0] for c in FOLDED_READS])
def test_reads_that_fold_away_give_numpys_values(name, shapes, ours, theirs, backend, opts) -> None:
    arrays = [finite(shape, seed) for seed, shape in enumerate(shapes)]
    got = uv.compile([ours(*(uv.Tensor(a) for a in arrays))], backend=backend, opts=opts).run()[0]
    expected = theirs(*arrays)
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got, expected.astype(np.float32))


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("shape", [(), (5,), (2, 3), (2, 1, 3), (4, 1, 1, 2)])
def test_argmax_of_everything_with_keepdim_has_numpys_ones_shape(shape, backend) -> None:
    values = finite(shape)
    result = uv.Tensor(values).argmax(keepdim=True)
    expected = np.argmax(values, keepdims=True)
    assert result.shape == expected.shape
    got = uv.compile([result], backend=backend).run()[0]
    np.testing.assert_array_equal(got, expected)
    smallest = uv.Tensor(values).argmin(keepdim=True)
    np.testing.assert_array_equal(smallest.numpy(), np.argmin(values, keepdims=True))
