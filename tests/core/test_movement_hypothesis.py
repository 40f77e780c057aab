"""Random chains of movement ops on a Tensor and on numpy side by side: shapes always agree with
numpy applied to ``np.empty`` of the same shape, and values (data ``arange``, through the test
evaluator) agree with numpy applied to the same data."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from test_tensor import evaluate

from uopviz.core.tensor import Tensor


def _reshape(draw, shape):
    total = math.prod(shape)
    if total == 0:
        return (lambda t: t.reshape(-1), lambda a: a.reshape(-1))
    # split the element count into a random chain of factors
    new_shape, rest = [], total
    while rest > 1 and len(new_shape) < 4:
        divisors = [d for d in range(2, rest + 1) if rest % d == 0]
        factor = draw(st.sampled_from(divisors))
        new_shape.append(factor)
        rest //= factor
    if rest > 1:
        new_shape.append(rest)
    new_shape += [1] * draw(st.integers(0, 1))
    draw_order = draw(st.permutations(new_shape)) if new_shape else []
    target = tuple(draw_order)
    if target and draw(st.booleans()):
        position = draw(st.integers(0, len(target) - 1))
        with_unknown = tuple(-1 if i == position else s for i, s in enumerate(target))
        return (lambda t: t.reshape(with_unknown), lambda a: a.reshape(with_unknown))
    return (lambda t: t.reshape(target), lambda a: a.reshape(target))


def _permute(draw, shape):
    order = tuple(draw(st.permutations(range(len(shape)))))
    return (lambda t: t.permute(order), lambda a: a.transpose(order))


def _expand(draw, shape):
    lead = draw(st.integers(0, 2 if len(shape) < 4 else 0))
    target = tuple(draw(st.integers(1, 3)) for _ in range(lead)) + \
        tuple(draw(st.integers(1, 3)) if s == 1 else s for s in shape)
    return (lambda t: t.expand(target), lambda a: np.broadcast_to(a, target))


def _pad(draw, shape):
    pads = [(draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in shape]
    return (lambda t: t.pad(pads), lambda a: np.pad(a, pads) if pads else a)


def _shrink(draw, shape):
    bounds = []
    for size in shape:
        start = draw(st.integers(0, size))
        bounds.append((start, draw(st.integers(start, size))))
    return (lambda t: t.shrink(bounds), lambda a: a[tuple(slice(lo, hi) for lo, hi in bounds)])


def _flip(draw, shape):
    if not shape:
        return (lambda t: t.flip(), lambda a: np.flip(a))
    axes = tuple(sorted(set(draw(st.lists(st.integers(0, len(shape) - 1), max_size=len(shape))))))
    return (lambda t: t.flip(axes), lambda a: np.flip(a, axes) if axes else a)


def _index_entry(draw, size):
    if size and draw(st.booleans()):
        return draw(st.integers(-size, size - 1))
    bound = st.one_of(st.none(), st.integers(-size - 2, size + 2))
    step = draw(st.one_of(st.none(), st.integers(-3, 3).filter(lambda s: s != 0)))
    return slice(draw(bound), draw(bound), step)


def _getitem(draw, shape):
    count = draw(st.integers(0, len(shape)))
    ellipsis_first = draw(st.booleans())
    indexed = shape[len(shape) - count:] if ellipsis_first else shape[:count]  # the axes the entries hit
    entries = []
    for size in indexed:
        entries += [None] * draw(st.integers(0, 1))  # a new axis consumes no axis of the tensor
        entries.append(_index_entry(draw, size))
    entries += [None] * draw(st.integers(0, 1))
    if ellipsis_first:
        entries.insert(0, Ellipsis)
    elif draw(st.booleans()):
        entries.append(Ellipsis)
    index = tuple(entries)
    return (lambda t: t[index], lambda a: a[index])


def _transpose(draw, shape):
    if len(shape) < 2:
        return (lambda t: t.T, lambda a: a.T)
    a, b = draw(st.integers(0, len(shape) - 1)), draw(st.integers(0, len(shape) - 1))
    return (lambda t: t.transpose(a, b), lambda x: np.swapaxes(x, a, b))


def _squeeze_unsqueeze(draw, shape):
    if 1 in shape and draw(st.booleans()):
        return (lambda t: t.squeeze(), lambda a: np.squeeze(a))
    axis = draw(st.integers(-len(shape) - 1, len(shape)))
    return (lambda t: t.unsqueeze(axis), lambda a: np.expand_dims(a, axis))


def _repeat(draw, shape):
    repeats = tuple(draw(st.integers(1, 2)) for _ in range(len(shape) + draw(st.integers(0, 1))))
    return (lambda t: t.repeat(repeats), lambda a: np.tile(a, repeats))


def _flatten(draw, shape):
    if not shape:
        return (lambda t: t.flatten(), lambda a: a.reshape(1))
    start = draw(st.integers(0, len(shape) - 1))
    end = draw(st.integers(start, len(shape) - 1))
    merged = shape[:start] + (math.prod(shape[start:end + 1]),) + shape[end + 1:]
    return (lambda t: t.flatten(start, end), lambda a: a.reshape(merged))


MOVES = {"reshape": _reshape, "permute": _permute, "expand": _expand, "pad": _pad, "shrink": _shrink,
         "flip": _flip, "getitem": _getitem, "transpose": _transpose, "squeeze": _squeeze_unsqueeze,
         "repeat": _repeat, "flatten": _flatten}


@settings(max_examples=200)
@given(st.data())
def test_random_movement_chains_agree_with_numpy(data):
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=0, max_size=4), label="shape"))
    names = data.draw(st.lists(st.sampled_from(sorted(MOVES)), min_size=1, max_size=6), label="moves")
    array = np.arange(math.prod(shape), dtype=np.int32).reshape(shape)
    tensor = Tensor(array)
    empty = np.empty(shape, np.int32)
    for name in names:
        if array.size > 4000:
            break
        ours, reference = MOVES[name](data.draw, array.shape)
        tensor, array, empty = ours(tensor), reference(array), reference(empty)
        assert tensor.shape == empty.shape == array.shape, f"after {name}: {tensor.shape} vs {empty.shape}"
    np.testing.assert_array_equal(evaluate(tensor), array)
