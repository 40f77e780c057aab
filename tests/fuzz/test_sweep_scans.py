"""Scans and arg-reductions at 2**20 elements (issue 21, "right answers at any size"): ``cumsum``,
``arange``, ``argmax`` and ``argmin`` on the compiled CPU backends, against numpy; and the NNEF
``math.cumsum`` (a sequential scan kernel: its ``@lower`` formula summed every prefix anew, 42 s for
100,000 items on C), which must equal numpy's float32 cumsum bit for bit (both add in order).

Before the blocked prefix sum and the reduce collapse rule these were quadratic (``arange(160000)``
one ``r_g160000_R160000`` kernel; a 2**20 cumsum did not finish in 290 s).  Each case has a generous
time budget (pytest-timeout): this is a sweep for right answers at size, not a benchmark; the
default profile runs the 1-D cases, ``HYPOTHESIS_PROFILE=slow`` adds 2-D layouts and int32 data.
"""

from __future__ import annotations

import numpy as np
import pytest

import uopviz as uv
from uopviz.backends import available
from uopviz.nnef import loads

from .fuzzing import OUTCOMES, SLOW, record

BACKENDS = [name for name in ("c", "llvm") if name in available()]
N = 1 << 20
SHAPES = [(N,)] + ([(1 << 10, 1 << 10), (3, N // 4)] if SLOW else [])


def _run(t: uv.Tensor, backend: str) -> np.ndarray:
    return uv.compile(t, backend=backend).run()[0]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_cumsum_at_size(backend, shape):
    rng = np.random.default_rng(len(shape))
    floats = rng.standard_normal(shape).astype(np.float32)
    for axis in (None, -1, 0):
        want = np.cumsum(floats.astype(np.float64), axis)
        scale = np.sqrt(np.cumsum(np.ones_like(floats, dtype=np.float64), axis))  # a random walk's spread
        got = _run(uv.Tensor(floats).cumsum(axis), backend)
        assert got.shape == want.shape
        assert np.all(np.abs(got - want) <= 1e-4 * scale + 1e-3), f"cumsum axis {axis} on {backend}"
    if SLOW:
        ints = rng.integers(-1000, 1000, size=shape).astype(np.int32)
        np.testing.assert_array_equal(_run(uv.Tensor(ints).cumsum(-1), backend), np.cumsum(ints, -1))
    record(f"scan {backend}", None)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_argmax_argmin_at_size(backend, shape):
    rng = np.random.default_rng(7)
    values = rng.standard_normal(shape).astype(np.float32)
    for axis in (None, -1, 0):
        for name in ("argmax", "argmin"):
            got = _run(getattr(uv.Tensor(values), name)(axis), backend)
            want = getattr(np, name)(values, axis) if axis is not None else getattr(np, name)(values)
            np.testing.assert_array_equal(got, want, err_msg=f"{name} axis {axis} on {backend}")
    record(f"arg-reduction {backend}", None)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("backend", BACKENDS)
def test_arange_at_size(backend):
    for args in [(N,), (160000,), (-N // 2, N // 2, 3)]:
        np.testing.assert_array_equal(_run(uv.Tensor.arange(*args), backend), np.arange(*args))
    OUTCOMES[f"arange {backend}"]["accepted"] += 1


@pytest.mark.timeout(240)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_nnef_cumsum_at_size(backend, shape):
    dims = ", ".join(map(str, shape))
    axis = len(shape) - 1
    graph = loads(
        f"import math; graph G {{ @input {{ x: real[{dims}]; }} "
        f"@output {{ y: real[{dims}]; r: real[{dims}]; }} "
        f"@compose {{ y = math.cumsum{{axis={axis}}}(x); r = math.cumsum{{axis=0, reverse=true}}(x); }} }}"
    )
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    out = graph.run({"x": x}, backend=backend)
    np.testing.assert_array_equal(out["y"], np.cumsum(x, axis))  # numpy's float32 cumsum adds in order
    np.testing.assert_array_equal(out["r"], np.flip(np.cumsum(np.flip(x, 0), 0), 0))
    record(f"nnef scan {backend}", None)
