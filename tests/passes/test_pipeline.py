"""The lowering pipeline end to end: programs built with the Tensor front end (and directly from
UOps) are compiled on every available backend and compared with numpy on random inputs.

Each entry of ``PROGRAMS`` builds its outputs from random data and returns numpy's answer; the
test compiles them with ``uv.compile`` (no opts, so the kernels are exactly what Rangeify made)
and runs them.  ``test_optops.py`` runs programs under opts; ``test_pipeline_trace.py`` checks the
trace.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

import uopviz as uv
from uopviz import Ops, Tensor, UOp, dtypes
from uopviz.backends import available, get
from uopviz.core import tensor as tensor_module

BACKENDS = available()
Program = Callable[[np.random.Generator], tuple[list, list[np.ndarray]]]
PROGRAMS: dict[str, Program] = {}


def program(name: str, tolerance: float = 1e-5) -> Callable[[Program], Program]:
    """Register a program: ``build(rng) -> (outputs, expected)``."""
    def register(build: Program) -> Program:
        build.tolerance = tolerance  # type: ignore[attr-defined]
        PROGRAMS[name] = build
        return build
    return register


def floats(rng: np.random.Generator, *shape: int, low: float = -3.0, high: float = 3.0) -> np.ndarray:
    return rng.uniform(low, high, shape).astype(np.float32)


def ints(rng: np.random.Generator, *shape: int, low: int = -50, high: int = 50, dtype=np.int32) -> np.ndarray:
    return rng.integers(low, high, shape).astype(dtype)


def nonzero_ints(rng: np.random.Generator, *shape: int) -> np.ndarray:
    values = rng.integers(1, 9, shape).astype(np.int32)
    return values * np.where(rng.random(shape) < 0.5, -1, 1).astype(np.int32)


# ---------------------------------------------------------------------------------------------
# movement ops and chains of them


for shape, new in (((4, 6), (3, 8)), ((2, 3, 4), (6, 4)), ((24,), (2, 3, 2, 2)), ((5, 1, 3), (15,))):
    @program(f"reshape {shape}->{new}")
    def _reshape(rng, shape=shape, new=new):
        x = floats(rng, *shape)
        return [Tensor(x).reshape(*new)], [x.reshape(new)]

for order in ((1, 0), (2, 0, 1), (1, 2, 0), (0, 2, 1)):
    @program(f"permute {order}")
    def _permute(rng, order=order):
        x = floats(rng, *(2, 3, 4)[:len(order)])
        return [Tensor(x).permute(*order)], [x.transpose(order)]


@program("expand")
def _expand(rng):
    x = floats(rng, 1, 5)
    return [Tensor(x).expand(4, 5)], [np.broadcast_to(x, (4, 5))]


@program("expand middle axis")
def _expand_middle(rng):
    x = floats(rng, 3, 1, 4)
    return [Tensor(x).expand(3, 5, 4) * 1.0], [np.broadcast_to(x, (3, 5, 4))]


for padding in (((1, 2), (0, 3)), ((0, 0), (2, 2)), ((3, 0), (0, 0))):
    @program(f"pad {padding}")
    def _pad(rng, padding=padding):
        x = floats(rng, 4, 5)
        return [Tensor(x).pad(padding)], [np.pad(x, padding)]


@program("pad 3d then exp (masked value, not only a masked load)")
def _pad_exp(rng):
    x = floats(rng, 2, 3, 4)
    return [Tensor(x).pad(((1, 0), (0, 2), (1, 1))).exp2()], [np.exp2(np.pad(x, ((1, 0), (0, 2), (1, 1))))]


@program("shrink")
def _shrink(rng):
    x = floats(rng, 6, 7)
    return [Tensor(x).shrink(((1, 5), (2, 7)))], [x[1:5, 2:7]]


for axes in ((0,), (1,), (0, 1)):
    @program(f"flip {axes}")
    def _flip(rng, axes=axes):
        x = floats(rng, 4, 5)
        return [Tensor(x).flip(axes)], [np.flip(x, axes)]


@program("movement chain: pad permute shrink reshape flip")
def _chain(rng):
    x = floats(rng, 3, 4)
    t = Tensor(x).pad(((1, 1), (2, 0))).permute(1, 0).shrink(((1, 6), (0, 4))).reshape(4, 5).flip(0)
    n = np.pad(x, ((1, 1), (2, 0))).T[1:6, 0:4].reshape(4, 5)[::-1]
    return [t], [n]


@program("strided slicing and negative step")
def _slicing(rng):
    x = floats(rng, 7, 9)
    return [Tensor(x)[1::2, ::-3]], [x[1::2, ::-3]]


@program("cat and stack")
def _cat_stack(rng):
    a, b = floats(rng, 2, 3), floats(rng, 4, 3)
    joined = tensor_module.cat(Tensor(a), Tensor(b), axis=0)
    stacked = tensor_module.stack(Tensor(a), Tensor(a * 2), axis=1)
    return [joined, stacked], [np.concatenate([a, b], 0), np.stack([a, a * 2], 1)]


@program("repeat")
def _repeat(rng):
    x = floats(rng, 2, 3)
    return [Tensor(x).repeat(2, 3)], [np.tile(x, (2, 3))]


@program("uop-level movement: RESHAPE PERMUTE PAD SHRINK FLIP EXPAND on a BUFFER")
def _uop_movement(rng):
    data = floats(rng, 12)
    buffer = UOp.buffer(12, dtypes.float32)
    tensor_module.buffer_data.register(buffer, data)
    u = buffer.reshape((3, 4)).permute((1, 0)).pad((1, 0), (6, 3)).shrink((1, 0), (4, 3)).flip((False, True))
    u = u.reshape((4, 1, 3)).expand((4, 2, 3))
    n = np.pad(data.reshape(3, 4).T, ((1, 1), (0, 0)))[1:5, ::-1].reshape(4, 1, 3)
    return [u], [np.broadcast_to(n, (4, 2, 3))]


# ---------------------------------------------------------------------------------------------
# broadcasting and elementwise ops


@program("broadcast (4,1)+(1,5)")
def _broadcast_2d(rng):
    a, b = floats(rng, 4, 1), floats(rng, 1, 5)
    return [Tensor(a) + Tensor(b)], [a + b]


@program("broadcast (3,)*(2,3) and a python scalar")
def _broadcast_rank(rng):
    a, b = floats(rng, 3), floats(rng, 2, 3)
    return [Tensor(a) * Tensor(b) - 1.5], [a * b - np.float32(1.5)]


@program("implicit broadcasting of UOp operands")
def _implicit_broadcast(rng):
    a, b = floats(rng, 4, 6), floats(rng, 6)
    ua, ub = UOp.buffer(24, dtypes.float32), UOp.buffer(6, dtypes.float32)
    tensor_module.buffer_data.register(ua, a.reshape(-1))
    tensor_module.buffer_data.register(ub, b)
    return [ua.reshape((4, 6)) * ub + ub], [a * b + b]


FLOAT_UNARY = {
    "neg": (lambda t: -t, lambda x: -x, None),
    "exp": (lambda t: t.exp(), np.exp, None),
    "exp2": (lambda t: t.exp2(), np.exp2, None),
    "log": (lambda t: t.log(), np.log, "positive"),
    "log2": (lambda t: t.log2(), np.log2, "positive"),
    "sin": (lambda t: t.sin(), np.sin, None),
    "cos": (lambda t: t.cos(), np.cos, None),
    "sqrt": (lambda t: t.sqrt(), np.sqrt, "positive"),
    "reciprocal": (lambda t: t.reciprocal(), lambda x: 1 / x, "positive"),
    "trunc": (lambda t: t.trunc(), np.trunc, None),
    "relu": (lambda t: t.relu(), lambda x: np.maximum(x, 0), None),
    "sigmoid": (lambda t: t.sigmoid(), lambda x: 1 / (1 + np.exp(-x)), None),
    "tanh": (lambda t: t.tanh(), np.tanh, None),
    "abs": (lambda t: t.abs(), np.abs, None),
}
for op_name, (ours, theirs, domain) in FLOAT_UNARY.items():
    @program(f"float {op_name}", tolerance=2e-5)
    def _unary(rng, ours=ours, theirs=theirs, domain=domain):
        x = floats(rng, 5, 7, low=0.1 if domain == "positive" else -3.0)
        return [ours(Tensor(x))], [theirs(x.astype(np.float64)).astype(np.float32)]


FLOAT_BINARY = {
    "add": (lambda a, b: a + b, np.add), "sub": (lambda a, b: a - b, np.subtract),
    "mul": (lambda a, b: a * b, np.multiply), "div": (lambda a, b: a / b, np.divide),
    "maximum": (lambda a, b: a.maximum(b), np.maximum), "minimum": (lambda a, b: a.minimum(b), np.minimum),
    "pow": (lambda a, b: a.abs().pow(b), lambda a, b: np.power(np.abs(a), b)),
}
for op_name, (ours, theirs) in FLOAT_BINARY.items():
    @program(f"float {op_name}", tolerance=1e-4)
    def _binary(rng, ours=ours, theirs=theirs):
        a, b = floats(rng, 6, 5), floats(rng, 6, 5)
        b = np.where(np.abs(b) < 0.1, np.float32(0.5), b)
        return [ours(Tensor(a), Tensor(b))], [theirs(a, b).astype(np.float32)]


COMPARISONS = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal, "==": np.equal,
               "!=": np.not_equal}
for symbol, theirs in COMPARISONS.items():
    @program(f"compare {symbol}")
    def _compare(rng, symbol=symbol, theirs=theirs):
        a, b = ints(rng, 4, 5, low=-3, high=3), ints(rng, 4, 5, low=-3, high=3)
        ours = {"<": Tensor.__lt__, "<=": Tensor.__le__, ">": Tensor.__gt__, ">=": Tensor.__ge__,
                "==": Tensor.__eq__, "!=": Tensor.__ne__}[symbol]
        return [ours(Tensor(a), Tensor(b))], [theirs(a, b)]


INTEGER_BINARY = {
    "floordiv": (lambda a, b: a // b, np.floor_divide), "mod": (lambda a, b: a % b, np.remainder),
    "xor": (lambda a, b: a ^ b, np.bitwise_xor), "or": (lambda a, b: a | b, np.bitwise_or),
    "and": (lambda a, b: a & b, np.bitwise_and), "add": (lambda a, b: a + b, np.add),
    "mul": (lambda a, b: a * b, np.multiply), "sub": (lambda a, b: a - b, np.subtract),
}
for op_name, (ours, theirs) in INTEGER_BINARY.items():
    for dtype in (np.int32, np.int8):
        @program(f"int {op_name} {np.dtype(dtype).name} (negatives, wraparound)")
        def _integer(rng, ours=ours, theirs=theirs, dtype=dtype):
            a = ints(rng, 6, 7, low=-120, high=120, dtype=dtype)
            b = nonzero_ints(rng, 6, 7).astype(dtype)
            with np.errstate(over="ignore"):
                return [ours(Tensor(a), Tensor(b))], [theirs(a, b).astype(dtype)]


@program("int32 overflow wraps around")
def _overflow(rng):
    a = np.array([2**31 - 1, -2**31, 123456789, -7], np.int32)
    with np.errstate(over="ignore"):
        return [Tensor(a) * 3 + 5], [(a * np.int32(3) + np.int32(5)).astype(np.int32)]


@program("uint8 arithmetic wraps around")
def _uint8(rng):
    a, b = ints(rng, 10, low=0, high=255, dtype=np.uint8), ints(rng, 10, low=0, high=255, dtype=np.uint8)
    with np.errstate(over="ignore"):
        return [Tensor(a) + Tensor(b), Tensor(a) * Tensor(b)], [a + b, a * b]


@program("shifts")
def _shifts(rng):
    a = ints(rng, 5, 6, low=-1000, high=1000)
    return [(Tensor(a) << 3) >> 2, Tensor(a) >> 1], [(a << 3) >> 2, a >> 1]


@program("bool logic and where")
def _bool(rng):
    a, b = rng.random((4, 5)) < 0.5, rng.random((4, 5)) < 0.5
    x = floats(rng, 4, 5)
    ta, tb = Tensor(a), Tensor(b)
    return [ta & tb, ta | tb, ta ^ tb, ~ta, (ta & ~tb).where(Tensor(x), -1.0)], \
        [a & b, a | b, a ^ b, ~a, np.where(a & ~b, x, np.float32(-1.0))]


@program("where with broadcasting")
def _where(rng):
    x, y = floats(rng, 3, 4), floats(rng, 4)
    return [(Tensor(x) > 0).where(Tensor(x), Tensor(y))], [np.where(x > 0, x, y)]


CASTS = ((np.float32, np.int32), (np.int32, np.float32), (np.float32, np.float16), (np.int32, np.int8),
         (np.uint8, np.float32), (np.float32, np.bool_), (np.bool_, np.float32))
for source, target in CASTS:
    @program(f"cast {np.dtype(source).name} -> {np.dtype(target).name}")
    def _cast(rng, source=source, target=target):
        floating = np.dtype(source).kind == "f"
        x = rng.uniform(-100, 100, (5, 6)) if floating else rng.integers(-100, 200, (5, 6))
        x = (x > 0) if source is np.bool_ else x.astype(source)
        with np.errstate(invalid="ignore", over="ignore"):
            expected = x.astype(target)
        return [Tensor(x).cast(dtypes.from_numpy(np.dtype(target)))], [expected]


@program("bitcast float32 <-> int32")
def _bitcast(rng):
    x = floats(rng, 4, 5)
    i = ints(rng, 3, low=0, high=2**20)
    outputs = [Tensor(x).bitcast(dtypes.int32), Tensor(i).bitcast(dtypes.float32)]
    return outputs, [x.view(np.int32), i.view(np.float32)]


# ---------------------------------------------------------------------------------------------
# reductions


for op_name in ("sum", "max", "min", "prod"):
    for axis in (0, 1, 2, (0, 2), None):
        @program(f"{op_name} axis={axis}", tolerance=1e-4)
        def _reduce(rng, op_name=op_name, axis=axis):
            x = floats(rng, 3, 4, 5, low=0.5, high=1.5) if op_name == "prod" else floats(rng, 3, 4, 5)
            return [getattr(Tensor(x), op_name)(axis=axis)], [getattr(np, op_name)(x, axis=axis)]


@program("sum keepdim and integer sum")
def _sum_keepdim(rng):
    x, i = floats(rng, 4, 6), ints(rng, 4, 6)
    outputs = [Tensor(x).sum(1, keepdim=True), Tensor(i).sum(0)]
    return outputs, [x.sum(1, keepdims=True), i.sum(0).astype(np.int32)]


@program("any / all")
def _any_all(rng):
    x = rng.random((4, 6)) < 0.3
    return [Tensor(x).any(1), Tensor(x).all(0)], [x.any(1), x.all(0)]


@program("mean var std", tolerance=1e-4)
def _moments(rng):
    x = floats(rng, 5, 8)
    t = Tensor(x)
    return [t.mean(1), t.var(0), t.std()], [x.mean(1), x.var(0), np.float32(x.std())]


@program("argmax argmin")
def _argmax(rng):
    x = floats(rng, 6, 7)
    outputs = [Tensor(x).argmax(1), Tensor(x).argmin(0)]
    return outputs, [x.argmax(1).astype(np.int32), x.argmin(0).astype(np.int32)]


@program("two reductions of one kernel sharing their loop")
def _shared_loop(rng):
    x = floats(rng, 4, 9)
    t = Tensor(x)
    return [t.sum(1) + t.max(1)], [x.sum(1) + x.max(1)]


@program("reduce of a reduce (two kernels)")
def _reduce_of_reduce(rng):
    x = floats(rng, 3, 4, 5)
    return [Tensor(x).sum(2).max(1)], [x.sum(2).max(1)]


# ---------------------------------------------------------------------------------------------
# compositions


for m, k, n in ((5, 7, 3), (1, 9, 1), (17, 13, 11), (8, 8, 8)):
    @program(f"matmul {m}x{k} @ {k}x{n}", tolerance=1e-4)
    def _matmul(rng, m=m, k=k, n=n):
        a, b = floats(rng, m, k), floats(rng, k, n)
        return [Tensor(a) @ Tensor(b)], [a @ b]


@program("batched matmul", tolerance=1e-4)
def _batched_matmul(rng):
    a, b = floats(rng, 2, 3, 4), floats(rng, 2, 4, 5)
    return [Tensor(a) @ Tensor(b)], [a @ b]


def _conv_reference(x, w, stride=1, padding=0):
    x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    n, c, h, width = x.shape
    o, _, kh, kw = w.shape
    out_h, out_w = (h - kh) // stride + 1, (width - kw) // stride + 1
    out = np.zeros((n, o, out_h, out_w), np.float64)
    for i in range(out_h):
        for j in range(out_w):
            window = x[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
            out[:, :, i, j] = np.einsum("nchw,ochw->no", window, w)
    return out.astype(np.float32)


for stride, padding in ((1, 1), (2, 0)):
    @program(f"conv2d stride={stride} padding={padding}", tolerance=1e-4)
    def _conv(rng, stride=stride, padding=padding):
        x, w = floats(rng, 2, 3, 7, 7), floats(rng, 4, 3, 3, 3)
        return [Tensor(x).conv2d(Tensor(w), stride=stride, padding=padding)], \
            [_conv_reference(x, w, stride, padding)]


@program("max_pool2d and avg_pool2d")
def _pools(rng):
    x = floats(rng, 1, 2, 6, 6)
    return [Tensor(x).max_pool2d(2), Tensor(x).avg_pool2d(3)], \
        [x.reshape(1, 2, 3, 2, 3, 2).max((3, 5)), x.reshape(1, 2, 2, 3, 2, 3).mean((3, 5))]


@program("softmax and log_softmax", tolerance=1e-5)
def _softmax(rng):
    x = floats(rng, 4, 9)
    e = np.exp(x - x.max(1, keepdims=True))
    return [Tensor(x).softmax(), Tensor(x).log_softmax()], [e / e.sum(1, keepdims=True),
                                                             np.log(e / e.sum(1, keepdims=True))]


@program("layernorm", tolerance=1e-4)
def _layernorm(rng):
    x = floats(rng, 3, 10)
    mean = x.mean(1, keepdims=True)
    return [Tensor(x).layernorm()], [(x - mean) / np.sqrt(((x - mean) ** 2).mean(1, keepdims=True) + 1e-5)]


@program("cumsum 1d and along an axis", tolerance=1e-4)
def _cumsum(rng):
    x, y = floats(rng, 9), floats(rng, 3, 5)
    return [Tensor(x).cumsum(), Tensor(y).cumsum(1)], [np.cumsum(x), np.cumsum(y, 1)]


@program("arange")
def _arange(rng):
    return [Tensor.arange(12), Tensor.arange(3, 20, 4), Tensor.arange(0.5, 3.0, 0.5)], \
        [np.arange(12), np.arange(3, 20, 4), np.arange(0.5, 3.0, 0.5, dtype=np.float32)]


@program("gather")
def _gather(rng):
    x = floats(rng, 8)
    idx = rng.integers(0, 8, 11).astype(np.int32)
    return [Tensor(x).gather(Tensor(idx))], [x[idx]]


@program("index to one element (shape ())")
def _index_to_an_element(rng):
    # an INDEX by scalars that removes every axis: one element, alone, in arithmetic and chained
    x = floats(rng, 2, 3, 4)
    i, j, k = (int(v) for v in rng.integers(0, (2, 3, 4)))
    at = lambda value: UOp.const(dtypes.index, value)  # noqa: E731
    table = Tensor(x).uop
    element = table.index(at(i), at(j), at(k))
    row = table.index(at(i), at(j))
    line = Tensor(x[i, j]).uop
    outputs = [element, element + 1.0, row.index(at(k)), line.index(at(3 - k)) * element]
    return [Tensor._wrap(u) for u in outputs], [
        x[i, j, k], x[i, j, k] + np.float32(1.0), x[i, j, k], x[i, j, 3 - k] * x[i, j, k]
    ]


@program("scatter_add")
def _scatter_add(rng):
    x, v = floats(rng, 6), floats(rng, 9)
    idx = rng.integers(0, 6, 9).astype(np.int32)
    want = x.copy()
    np.add.at(want, idx, v)
    return [Tensor(x).scatter_add(Tensor(idx), Tensor(v))], [want]


@program("contiguous makes a kernel boundary")
def _contiguous(rng):
    x = floats(rng, 4, 4)
    return [(Tensor(x) * 2).contiguous().permute(1, 0) + 1], [(x * 2).T + 1]


@program("several outputs share one program")
def _multiple_outputs(rng):
    x = floats(rng, 3, 5)
    t = Tensor(x)
    return [t.sum(1), t * 2, t.sum(1)], [x.sum(1), x * 2, x.sum(1)]


@program("a program input is an output")
def _identity(rng):
    x = floats(rng, 2, 3)
    return [Tensor(x)], [x]


@program("@function, called twice", tolerance=1e-5)
def _function(rng):
    @uv.function
    def f(a, b):
        return (a * b).sum(1) + a.max(1)

    x, y, z = floats(rng, 3, 4), floats(rng, 3, 4), floats(rng, 3, 4)
    outputs = [f(Tensor(x), Tensor(y)), f(Tensor(z), Tensor(x))]
    return outputs, [(x * y).sum(1) + x.max(1), (z * x).sum(1) + z.max(1)]


@program("@function returning a tuple")
def _function_tuple(rng):
    @uv.function
    def g(a):
        return a + 1, a * 2

    x = floats(rng, 5)
    first, second = g(Tensor(x))
    return [first, second], [x + 1, x * 2]


# ---------------------------------------------------------------------------------------------
# multi-device collectives


DEVICES = ("CPU:0", "CPU:1", "CPU:2", "CPU:3")
COLLECTIVES = {
    "broadcast": (lambda t: tensor_module.broadcast(t, DEVICES), lambda x: x, False),
    "scatter": (lambda t: tensor_module.scatter(t, DEVICES), lambda x: x, False),
    "gather": (lambda t: tensor_module.gather(t), lambda x: x, True),
    "reduce": (lambda t: tensor_module.reduce(t), lambda x: x.reshape(4, -1).sum(0), True),
    "allgather": (lambda t: tensor_module.allgather(t), lambda x: x, True),
    "reduce_scatter": (lambda t: tensor_module.reduce_scatter(t), lambda x: x.reshape(4, -1).sum(0), True),
    "allreduce": (lambda t: tensor_module.allreduce(t), lambda x: x.reshape(4, -1).sum(0), True),
}
for collective, (ours, theirs, sharded) in COLLECTIVES.items():
    @program(f"collective {collective}", tolerance=1e-5)
    def _collective(rng, ours=ours, theirs=theirs, sharded=sharded):
        x = floats(rng, 32)
        t = Tensor(x).shard(DEVICES) if sharded else Tensor(x)
        return [ours(t)], [theirs(x)]


@program("elementwise on a sharded tensor")
def _sharded(rng):
    x = floats(rng, 8, 3)
    return [Tensor(x).shard(DEVICES, axis=0) * 3 - 1], [x * 3 - 1]


# ---------------------------------------------------------------------------------------------
# random numbers


@program("rand: uniform moments and range")
def _rand(rng):
    t = Tensor.rand(256, seed=int(rng.integers(0, 2**31)))
    return [t.min(), t.max(), t.mean(), (t * t).mean()], None  # type: ignore[return-value]


def _check_rand(results: list[np.ndarray]) -> None:
    low, high, mean, square = (float(r) for r in results)
    assert 0.0 <= low and high < 1.0
    assert abs(mean - 0.5) < 4 * math.sqrt(1 / 12 / 256)
    assert abs(square - 1 / 3) < 0.05


# ---------------------------------------------------------------------------------------------
# the tests


def test_there_are_at_least_eighty_programs() -> None:
    assert len(PROGRAMS) >= 80, len(PROGRAMS)


def skip_unsupported_dtypes(outputs: list, backend: str) -> None:
    """Skip (saying why) when the program computes with a dtype this backend's device lacks."""
    target = get(backend)
    roots = [getattr(o, "uop", o) for o in outputs]
    for u in UOp(Ops.SINK, tuple(roots)).toposort():
        if u.dtype.kind.value != "void" and not target.supports_dtype(u.dtype):
            pytest.skip(f"the {backend} device has no {u.dtype.scalar.name} (Backend.supports_dtype)")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_program_matches_numpy(name: str, backend: str) -> None:
    for seed in (0, 1):
        rng = np.random.default_rng(seed)
        outputs, expected = PROGRAMS[name](rng)
        skip_unsupported_dtypes(outputs, backend)
        results = uv.compile(outputs, backend=backend).run()
        if expected is None:
            _check_rand(results)
            continue
        assert len(results) == len(expected)
        for got, want in zip(results, expected):
            want = np.asarray(want)
            assert got.shape == want.shape, (got.shape, want.shape)
            if want.dtype.kind in "biu":
                np.testing.assert_array_equal(got, want)
            else:
                tolerance = PROGRAMS[name].tolerance  # type: ignore[attr-defined]
                np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tolerance,
                                           atol=tolerance * 10)


def test_kernel_boundaries_of_softmax() -> None:
    """softmax: the max and the sum are expanded back over the row, so each is its own kernel."""
    program_ = uv.compile(Tensor(np.zeros((4, 8), np.float32)).softmax())
    assert [k.name for k in program_.kernels] == ["r_g4_R8", "r_g4_R8", "E_g4_g8"]


def test_matmul_is_one_kernel_with_one_reduction() -> None:
    program_ = uv.compile(Tensor(np.zeros((5, 7), np.float32)) @ Tensor(np.zeros((7, 3), np.float32)))
    assert len(program_.kernels) == 1
    global_, reduce = uv.AxisType.GLOBAL, uv.AxisType.REDUCE
    assert program_.kernels[0].axes == ((5, global_), (3, global_), (7, reduce))


def test_pad_becomes_a_gated_load() -> None:
    program_ = uv.compile(Tensor(np.ones((3, 3), np.float32)).pad(((1, 1), (1, 1))))
    ast = program_.kernels[0].ast
    loads = [u for u in ast.toposort() if u.op is Ops.LOAD]
    assert len(loads) == 1 and len(loads[0].src) == 3, "PAD reads through one gated load with alt 0"
    assert loads[0].src[1].op is Ops.CONST and loads[0].src[1].arg[0] == 0.0
    assert not any(u.op is Ops.WHERE and u.dtype is dtypes.index for u in ast.toposort()), \
        "the gate replaces the index clamps"


def test_memory_plan_shares_intermediate_buffers() -> None:
    x = np.arange(64, dtype=np.float32).reshape(8, 8)
    t = Tensor(x)
    for step in range(5):  # a chain of kernels: each intermediate dies after the next kernel reads it
        t = (t * 2 + step).contiguous()
    program_ = uv.compile(t.sum(1))
    plan = program_.memory_plan
    assert len(plan.placements) == 5
    assert plan.bytes_saved == 3 * 64 * 4, program_.memory_report()  # five buffers of 256 bytes in two places
    want = x
    for step in range(5):
        want = want * 2 + step
    np.testing.assert_allclose(program_.run()[0], want.sum(1))


def test_run_takes_inputs_by_buffer() -> None:
    buffer = UOp.buffer(6, dtypes.float32)
    program_ = uv.compile(buffer.reshape((2, 3)).reduce(Ops.ADD, (1,)))
    data = np.arange(6, dtype=np.float32)
    np.testing.assert_array_equal(program_.run({buffer: data})[0], data.reshape(2, 3).sum(1, keepdims=True))
    by_position = program_.run({0: data * 2})[0]
    np.testing.assert_array_equal(by_position, (data * 2).reshape(2, 3).sum(1, keepdims=True))


def test_bad_inputs_are_named() -> None:
    buffer = UOp.buffer(6, dtypes.float32)
    program_ = uv.compile(buffer + 1.0)
    with pytest.raises(ValueError, match="holds 6 elements"):
        program_.run({buffer: np.zeros(5, np.float32)})
    with pytest.raises(TypeError, match="pass Tensors or UOps"):
        uv.compile([3.0])
    with pytest.raises(ValueError, match="free PARAM"):  # Callify's own error, not wrapped
        uv.compile(UOp.param(0, (3,), dtypes.float32) + 1.0)


def test_gradients_match_finite_differences() -> None:
    from uopviz.core.gradient import gradient

    rng = np.random.default_rng(3)
    x0, w0 = floats(rng, 3, 4, low=-1, high=1), floats(rng, 4, 2, low=-1, high=1)

    def loss(x: np.ndarray, w: np.ndarray) -> Tensor:
        weights = Tensor(np.arange(6, dtype=np.float32).reshape(3, 2))
        return ((Tensor(x) @ Tensor(w)).tanh().softmax() * weights).sum()

    xt, wt = Tensor(x0), Tensor(w0)
    out = ((xt @ wt).tanh().softmax() * Tensor(np.arange(6, dtype=np.float32).reshape(3, 2))).sum()
    grad_x, grad_w = gradient(out, [xt, wt])
    got_x, got_w = uv.compile([grad_x, grad_w]).run()
    step = 1e-2
    for target, got, other in ((x0, got_x, w0), (w0, got_w, x0)):
        numeric = np.zeros_like(target, dtype=np.float64)
        for index in np.ndindex(target.shape):
            plus, minus = target.copy(), target.copy()
            plus[index] += step
            minus[index] -= step
            args_plus = (plus, other) if target is x0 else (other, plus)
            args_minus = (minus, other) if target is x0 else (other, minus)
            numeric[index] = (float(loss(*args_plus).numpy()) - float(loss(*args_minus).numpy())) / (2 * step)
        np.testing.assert_allclose(got, numeric, rtol=2e-2, atol=2e-3)


def test_each_shard_runs_on_its_device() -> None:
    x = np.arange(16, dtype=np.float32).reshape(8, 2)
    sharded = Tensor(x).shard(DEVICES)
    program_ = uv.compile(sharded * 2 + 1)
    assert [item.device for item in program_.items] == list(DEVICES)
    for item in program_.items:  # a launch addresses its device's part only (2 rows of 2)
        params = [u for u in item.kernel.ast.toposort() if u.op is Ops.PARAM]
        assert all(p.shape == (4,) for p in params)
    np.testing.assert_array_equal(program_.run()[0], x * 2 + 1)


def test_reading_another_device_needs_a_copy() -> None:
    sharded = Tensor(np.ones((8, 2), np.float32)).shard(DEVICES)
    with pytest.raises(uv.passes.rangeify.RangeifyError, match="COPY it first"):
        uv.compile(sharded.sum(0))
    gathered = sharded.copy("CPU:0")  # a COPY to one device gathers the shards
    np.testing.assert_array_equal(uv.compile(gathered.sum(0)).run()[0], [8.0, 8.0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_zero_size_values(backend: str) -> None:
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    empty, total, rows = uv.compile([Tensor(a)[2:2], Tensor(a)[1:1].sum(), (Tensor(a)[:, 3:3] + 1).sum(1)],
                                    backend=backend).run()
    assert empty.shape == (0, 4)
    assert total == 0  # a sum over nothing is the identity
    np.testing.assert_array_equal(rows, np.zeros(3, np.int32))
    # reductions whose reduced axis is empty: the identity, and no read of the empty input
    rng = np.random.default_rng(5)
    for shape in ((0, 3), (3, 0), (2, 0, 4)):
        x = rng.standard_normal(shape).astype(np.float32)
        outputs = [Tensor(x).sum(-2), Tensor(x).prod(1), Tensor(x).mean(1), (Tensor(x) * 2).sum(),
                   Tensor(x).sum(0)]
        with np.errstate(invalid="ignore"):  # a mean over nothing is 0/0
            mean = x.sum(1) / np.float32(x.shape[1])
        expected = [x.sum(-2), x.prod(1), mean, (x * 2).sum(), x.sum(0)]
        for got, want in zip(uv.compile(outputs, backend=backend).run(), expected, strict=True):
            np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="zero-size axis of \\(3, 0\\)"):
        Tensor(np.zeros((3, 0), np.float32)).max(1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_accumulators_with_disjoint_lifetimes_share_a_register(backend: str) -> None:
    x, y = np.arange(32, dtype=np.float32).reshape(4, 8), np.arange(24, dtype=np.float32).reshape(4, 6)
    program_ = uv.compile(Tensor(x).sum(1) + Tensor(y).max(1), backend=backend)
    linear = program_.items[0].body.src[0]
    registers = [u for u in linear.src if u.op is Ops.BUFFER and u.arg.addrspace is uv.AddrSpace.REG]
    assert len(registers) == 1 and program_.memory_plan.register_bytes_saved == 4
    np.testing.assert_array_equal(program_.run()[0], x.sum(1) + y.max(1))


def test_sources_render_for_a_backend_that_cannot_run_here() -> None:
    """build=False lowers and renders without compiling: CUDA source on a machine without a GPU."""
    try:
        cuda = get("cuda")
    except Exception as error:  # noqa: BLE001 - the module itself may be missing
        pytest.skip(f"no CUDA backend module: {error}")
    x = Tensor(np.ones((64, 32), np.float32))
    program_ = uv.compile((x @ x.T).softmax(), backend="cuda", opts="heuristic", build=False)
    assert all("__global__" in source for source in program_.sources)
    assert any(t is uv.AxisType.LOCAL for k in program_.kernels for _, t in k.axes)
    if not cuda.available():
        with pytest.raises(uv.backends.BackendUnavailable):
            uv.compile(x + 1, backend="cuda")
        with pytest.raises(RuntimeError, match="build=False"):
            program_.run()
