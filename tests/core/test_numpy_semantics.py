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
    Row("exp", lambda t: t.exp(), np.exp, ulps=80),  # docs/accuracy.md: exp2(x·log2 e)
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
    Row(
        "tanh",
        lambda t: t.tanh(),
        np.tanh,
        make=(finite,),
        ulps=1e7,
        differs="2·sigmoid(2x) - 1: absolute, not relative, accuracy near 0 (docs/accuracy.md)",
    ),
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
TABLE = UNARY_FLOAT + BINARY + REDUCTIONS + MOVEMENT


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
        got[rest], expected[rest], rtol=tolerance, atol=1e-37, err_msg=f"{row.name} {shape}"
    )


def _cases(backends: list[str]) -> list:
    return [pytest.param(row, backend, id=f"{row.name}-{backend}") for row in TABLE for backend in backends]


def _run(row: Row, backend: str) -> None:
    for shape in SHAPES:
        if row.shapes(shape):
            check(row, shape, backend)


@pytest.mark.parametrize(("row", "backend"), _cases(["python"]))
def test_matches_numpy_on_the_python_backend(row: Row, backend: str) -> None:
    _run(row, backend)


@pytest.mark.slow
@pytest.mark.parametrize(("row", "backend"), _cases([b for b in CPU_BACKENDS if b != "python"]))
def test_matches_numpy_on_compiled_backends(row: Row, backend: str) -> None:
    _run(row, backend)


def test_every_public_method_has_a_row_or_a_reason() -> None:
    # the table covers the public API: each public method appears in a row's name or in the
    # reasons below (methods that are not numerical: graph building, running, devices, autograd)
    covered = " ".join(row.name for row in TABLE)
    not_numerical = {
        "numpy",
        "item",
        "tolist",
        "realized_data",
        "full",
        "zeros",
        "ones",
        "full_like",
        "zeros_like",
        "ones_like",
        "empty",
        "arange",
        "eye",
        "manual_seed",
        "rand",
        "randn",
        "contiguous",
        "contiguous_backward",
        "detach",
        "copy",
        "to",
        "replicated",
        "shard",
        "backward",
        "bitcast",
        "broadcast_to",
        "shrink",
        "shrink_to",
        "unflatten",
        "split",
        "chunk",
        "tile",
        "clamp",
        "dot",
        "layernorm",
        "log_softmax",
        "conv2d",
        "avg_pool2d",
        "max_pool2d",
        "gelu",
        "floordiv",
        "mod",
        "collectives",
    }
    public = {
        name for name in dir(uv.Tensor) if not name.startswith("_") and callable(getattr(uv.Tensor, name))
    }
    missing = sorted(name for name in public - not_numerical if name not in covered)
    assert not missing, f"public Tensor methods without a row: {missing}"
