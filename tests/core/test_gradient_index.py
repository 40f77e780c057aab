"""Gradients through INDEX (gather by index tensors), SLICE and REPLICATED, checked against numpy."""

import numpy as np
import pytest

import uopviz as uv
from uopviz import UOp, dtypes
from uopviz.core.tensor import Tensor


def _grad(loss: Tensor, target: Tensor) -> np.ndarray:
    return uv.gradient(loss, [target])[0].numpy()


@pytest.mark.parametrize("rows,cols,count,seed", [(5, 3, 4, 0), (7, 1, 9, 1), (4, 6, 2, 2)])
def test_index_by_a_vector_scatters_back(rows, cols, count, seed):
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((rows, cols)).astype(np.float32)
    picks = rng.integers(0, rows, count).astype(np.int32)
    weights = rng.standard_normal((count, cols)).astype(np.float32)
    t, w = Tensor(table), Tensor(weights)
    picked = Tensor._wrap(t.uop.index(Tensor(picks).uop))
    assert picked.shape == (count, cols)
    np.testing.assert_allclose(picked.numpy(), table[picks], rtol=1e-6)
    expected = np.zeros_like(table)
    np.add.at(expected, picks, weights)
    np.testing.assert_allclose(_grad((picked * w).sum(), t), expected, rtol=1e-5, atol=1e-6)


def test_index_by_a_scalar_and_a_vector():
    rng = np.random.default_rng(3)
    table = rng.standard_normal((3, 5, 2)).astype(np.float32)
    columns = np.array([4, 0, 4], dtype=np.int32)
    weights = rng.standard_normal((3, 2)).astype(np.float32)
    t = Tensor(table)
    picked = Tensor._wrap(t.uop.index(UOp.const(dtypes.int32, 1), Tensor(columns).uop))
    assert picked.shape == (3, 2)
    expected = np.zeros_like(table)
    np.add.at(expected, (1, columns), weights)
    np.testing.assert_allclose(_grad((picked * Tensor(weights)).sum(), t), expected, rtol=1e-5, atol=1e-6)


def test_replicated_shares_the_gradient():
    data = np.arange(8, dtype=np.float32).reshape(2, 4)
    t = Tensor(data)
    kept = Tensor._wrap(t.uop.replicated((0,)))
    weights = np.array([[1.0, 2.0, 3.0, 4.0]], dtype=np.float32)
    grad = _grad((kept * Tensor(weights)).sum(), t)
    np.testing.assert_allclose(grad, np.broadcast_to(weights / 2, (2, 4)))


def test_slice_pads_the_gradient_into_place():
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = Tensor(data)
    window = Tensor._wrap(UOp(uv.Ops.SLICE, (t.uop, UOp.const(dtypes.index, 5)), (4, dtypes.float32)))
    np.testing.assert_allclose(window.numpy(), data.reshape(-1)[5:9])
    weights = np.array([1.0, -2.0, 3.0, 0.5], dtype=np.float32)
    expected = np.zeros(12, dtype=np.float32)
    expected[5:9] = weights
    np.testing.assert_allclose(_grad((window * Tensor(weights)).sum(), t), expected.reshape(3, 4))
