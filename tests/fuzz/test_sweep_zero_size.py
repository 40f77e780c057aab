"""Zero-size sweep (issue 21 item 5): random shapes with some 0 extents through chains of every
movement op (reshape, permute, expand, pad, shrink, flip, cat, stack, getitem, repeat), then a
reduction (sum of an empty axis 0, prod 1, max/min of nothing an error as numpy's), an elementwise
op or nothing; matmul with a 0 inner or outer extent; conv and pools with a zero batch.  Each
program runs on every available CPU backend (opts None or "heuristic") against numpy: the same
shape and values, or the same refusal (numpy's ValueError, ours ValueError or UOpError) and never
another exception (once a TypeError or KeyError from a kernel whose reads folded away).

Budgets: the default profile runs 80 programs (about 15 s); the slow profile
(``HYPOTHESIS_PROFILE=slow``) runs hundreds.  Outcomes are counted per target (``fuzzing.OUTCOMES``).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import uopviz as uv
from uopviz.backends import available

from .fuzzing import budget, record

CPU_BACKENDS = [name for name in ("python", "c", "llvm", "opencl") if name in available()]
EXTENTS = [0, 0, 1, 2, 3, 5]
MOVEMENTS = ["reshape", "permute", "expand", "pad", "shrink", "flip", "cat", "stack", "getitem", "repeat"]
FINALS = ["none", "sum", "prod", "max", "min", "mean", "argmax", "elementwise"]
REFUSALS = (ValueError, uv.UOpError)


@st.composite
def zero_size_shapes(draw: st.DrawFn, max_rank: int = 3) -> tuple[int, ...]:
    """A shape of rank 1..max_rank with at least one 0 extent."""
    shape = [draw(st.sampled_from(EXTENTS)) for _ in range(draw(st.integers(1, max_rank)))]
    if 0 not in shape:
        shape[draw(st.integers(0, len(shape) - 1))] = 0
    return tuple(shape)


def values(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-2, 2, shape).astype(np.float32)


@st.composite
def movement(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[str, object, object]:
    """One movement op applicable to ``shape``: (text, on a Tensor, on a numpy array)."""
    rank = len(shape)
    kind = draw(st.sampled_from(MOVEMENTS))
    if kind == "reshape":
        choices = [tuple(reversed(shape)), (-1,), (*shape, 1), (1, *shape)]
        if rank >= 2:
            choices.append((shape[0] * shape[1], *shape[2:]))
        target = draw(st.sampled_from(choices))
        return f"reshape{target}", lambda t: t.reshape(*target), lambda a: a.reshape(target)
    if kind == "permute":
        order = tuple(draw(st.permutations(range(rank))))
        return f"permute{order}", lambda t: t.permute(*order), lambda a: a.transpose(order)
    if kind == "expand":
        count = draw(st.sampled_from([0, 2]))
        grown = (*shape, count)
        return (f"expand{grown}", lambda t: t.reshape(*shape, 1).expand(*grown),
                lambda a: np.broadcast_to(a.reshape(*shape, 1), grown))
    if kind == "pad":
        pads = [(draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape]
        return f"pad{pads}", lambda t: t.pad(pads), lambda a: np.pad(a, pads)
    if kind == "shrink":
        bounds = []
        for size in shape:
            start = draw(st.integers(0, size))
            bounds.append((start, draw(st.integers(start, size))))
        cut = tuple(slice(start, end) for start, end in bounds)
        return f"shrink{bounds}", lambda t: t.shrink(bounds), lambda a: a[cut]
    if kind == "flip":
        axis = draw(st.integers(0, rank - 1))
        return f"flip({axis})", lambda t: t.flip(axis), lambda a: np.flip(a, axis)
    if kind == "cat":
        axis = draw(st.integers(0, rank - 1))
        other_shape = tuple(draw(st.sampled_from([0, 1, 2])) if i == axis else size
                            for i, size in enumerate(shape))
        other = values(other_shape, draw(st.integers(0, 2**16)))
        first = draw(st.booleans())
        def joined(t: uv.Tensor) -> uv.Tensor:
            return uv.Tensor.cat(*((t, uv.Tensor(other)) if first else (uv.Tensor(other), t)), axis=axis)

        return (f"cat(axis={axis}, other={list(other_shape)}, first={first})", joined,
                lambda a: np.concatenate((a, other) if first else (other, a), axis))
    if kind == "stack":
        axis = draw(st.integers(0, rank))
        return (f"stack(axis={axis})", lambda t: uv.Tensor.stack(t, t * 2, axis=axis),
                lambda a: np.stack([a, a * 2], axis))
    if kind == "getitem":
        key = []
        for size in shape:
            entry = draw(st.sampled_from(["all", "slice", "index"] if size else ["all", "slice"]))
            if entry == "index":
                key.append(draw(st.integers(-size, size - 1)))
            elif entry == "slice":
                start, stop = draw(st.integers(-3, 3)), draw(st.integers(-3, 3))
                key.append(slice(start, stop, draw(st.sampled_from([1, 2]))))
            else:
                key.append(slice(None))
        index = tuple(key)
        return f"getitem{index}", lambda t: t[index], lambda a: a[index]
    repeats = tuple(draw(st.integers(0, 2)) for _ in shape)
    return f"repeat{repeats}", lambda t: t.repeat(*repeats), lambda a: np.tile(a, repeats)


@st.composite
def final(draw: st.DrawFn, rank: int) -> tuple[str, object, object]:
    """A reduction, an elementwise op or nothing after the movements."""
    kind = draw(st.sampled_from(FINALS))
    if kind == "none":
        return "", lambda t: t, lambda a: a
    if kind == "elementwise":
        return ".elementwise", lambda t: (t * 2 + 1).exp() - t.abs(), lambda a: np.exp(a * 2 + 1) - np.abs(a)
    if kind == "argmax":
        axis = draw(st.sampled_from([None, *range(rank)]))
        keep = draw(st.booleans())
        return (f".argmax({axis}, keepdim={keep})", lambda t: t.argmax(axis, keepdim=keep),
                lambda a: np.argmax(a, axis, keepdims=keep))
    pairs = [(i, j) for i in range(rank) for j in range(i + 1, rank)]
    axes = draw(st.sampled_from([None, *range(rank), *pairs]))
    keep = draw(st.booleans())
    return (f".{kind}({axes}, keepdim={keep})", lambda t: getattr(t, kind)(axes, keepdim=keep),
            lambda a: getattr(np, kind)(a, axis=axes, keepdims=keep))


@st.composite
def programs(draw: st.DrawFn) -> tuple[str, np.ndarray, object, object]:
    """(text, input, build(Tensor), numpy(array)) of a chain of movements and a final op."""
    shape = draw(zero_size_shapes())
    data = values(shape, draw(st.integers(0, 2**16)))
    text = f"x{list(shape)}"
    ours, theirs = [], []
    current = data
    for _ in range(draw(st.integers(1, 3))):
        step, on_tensor, on_array = draw(movement(current.shape))
        try:
            current = on_array(current)
        except (ValueError, IndexError):
            continue  # numpy has no answer for this step (a reshape of -1 it cannot infer): skip it
        text += f".{step}"
        ours.append(on_tensor)
        theirs.append(on_array)
    step, on_tensor, on_array = draw(final(current.ndim))
    ours.append(on_tensor)
    theirs.append(on_array)

    def build(tensor: uv.Tensor) -> uv.Tensor:
        for op in ours:
            tensor = op(tensor)
        return tensor

    def reference(array: np.ndarray) -> np.ndarray:
        for op in theirs:
            array = op(array)
        return np.asarray(array)

    return text + step, data, build, reference


def numpy_answer(reference, data: np.ndarray) -> np.ndarray | type[Exception]:
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            return reference(data)
    except ValueError as error:  # max/min/argmax of nothing
        return type(error)


def check_everywhere(target: str, text: str, build, expected, opts) -> None:
    """``build()`` on every CPU backend against numpy's ``expected`` (an array or a refusal)."""
    for backend in CPU_BACKENDS:
        outcome: BaseException | None = None
        try:
            if isinstance(expected, type):
                with pytest.raises(REFUSALS):
                    uv.compile([build()], backend=backend, opts=opts).run()
                continue
            got = uv.compile([build()], backend=backend, opts=opts).run()[0]
            where = f"{text} on {backend} (opts {opts})"
            assert got.shape == expected.shape, f"{where}: shape {got.shape}, numpy {expected.shape}"
            np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), rtol=2e-5,
                                       atol=1e-5, equal_nan=True, err_msg=where)
        except BaseException as error:
            outcome = error
            raise
        finally:
            record(target, outcome)


@budget(default=60, slow=1000)
@given(programs(), st.sampled_from([None, "heuristic"]))
def test_zero_size_movements_and_reductions_match_numpy_on_every_cpu_backend(program, opts):
    text, data, build, reference = program
    expected = numpy_answer(reference, data)
    check_everywhere("zero-size movements", text, lambda: build(uv.Tensor(data)), expected, opts)


@st.composite
def contractions(draw: st.DrawFn) -> tuple[str, object, np.ndarray]:
    """matmul with a 0 inner or outer extent, or conv2d / max_pool2d / avg_pool2d with a zero batch."""
    kind = draw(st.sampled_from(["matmul", "conv2d", "max_pool2d", "avg_pool2d"]))
    seed = draw(st.integers(0, 2**16))
    if kind == "matmul":
        m, k, n = (draw(st.sampled_from([0, 1, 3])) for _ in range(3))
        batch = tuple(draw(st.lists(st.sampled_from([0, 2]), max_size=1)))
        if 0 not in (m, k, n, *batch):
            m = 0
        a, b = values((*batch, m, k), seed), values((k, n), seed + 1)
        return (f"matmul({list(a.shape)}, {list(b.shape)})", lambda: uv.Tensor(a) @ uv.Tensor(b),
                np.matmul(a, b))
    channels, size = draw(st.integers(1, 2)), draw(st.integers(3, 5))
    image = values((0, channels, size, size), seed)
    if kind == "conv2d":
        weight = values((2, channels, 3, 3), seed + 1)
        return (f"conv2d({list(image.shape)}, {list(weight.shape)})",
                lambda: uv.Tensor(image).conv2d(uv.Tensor(weight)),
                np.zeros((0, 2, size - 2, size - 2), np.float32))
    window = draw(st.integers(1, 3))
    out = (size - window) // window + 1
    return (f"{kind}({list(image.shape)}, {window})", lambda: getattr(uv.Tensor(image), kind)(window),
            np.zeros((0, channels, out, out), np.float32))


@budget(default=20, slow=300)
@given(contractions(), st.sampled_from([None, "heuristic"]))
def test_contractions_with_zero_extents_match_numpy_on_every_cpu_backend(case, opts):
    text, build, expected = case
    check_everywhere("zero-size contractions", text, build, expected, opts)
