"""Fusing long elementwise chains (uopviz.nnef.kernel_passes.fusion): the work grows linearly with the chain's
length (a chain of n kernels fused one into the next walked and renumbered the whole chain at each step:
O(n²); a 3,000-operation chain did not finish in 75 s), and the fused kernels compute what numpy does.
The 3,000-operation chains run in tests/fuzz/test_sweep_nnef_chains.py."""

from __future__ import annotations

import numpy as np
import pytest
from elementwise_chains import chain_nnef1, chain_reference, chain_skriptnd, random_chain

import uopviz as uv
import uopviz.core.substitution as substitution
import uopviz.core.uop as uop
import uopviz.nnef.kernel_passes.fusion as fusion
from uopviz.nnef import loads
from uopviz.nnef.nnef1.loader import loads_nnef1

BACKENDS = [name for name in ("python", "c") if name in uv.backends.available()]


def _nodes_walked_fusing(length: int, monkeypatch) -> int:
    """UOps visited by every graph walk (toposorts, substitutions) while fusing a chain of ``length``."""
    ops = random_chain(length, np.random.default_rng(length))
    graph = loads(chain_skriptnd(ops, (2, 3)), progress=False)
    kernels = [kernel for op in graph.operations for kernel in graph.lower(op)]
    walked = 0
    original = uop.toposort

    def counted(*args, **kwargs):
        nonlocal walked
        order = original(*args, **kwargs)
        walked += len(order)
        return order

    with monkeypatch.context() as patch:
        for module in (uop, substitution, fusion):
            patch.setattr(module, "toposort", counted, raising=False)
        fused = fusion.fuse_kernels(kernels, {"y"})
    assert len(fused) == 1 and len(fused[0].fused) == length - 1  # one kernel: the whole chain
    return walked


def test_fusing_a_chain_walks_a_number_of_nodes_linear_in_its_length(monkeypatch):
    # O(n²) before: each step walked the whole chain fused so far (ratio ~4 for twice the length)
    short, long = _nodes_walked_fusing(200, monkeypatch), _nodes_walked_fusing(400, monkeypatch)
    assert long < 2.3 * short, (short, long)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("form", ["skriptnd", "nnef1"])
@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4)])
def test_fused_random_chains_compute_what_numpy_does(backend, form, shape):
    rng = np.random.default_rng(sum(shape) + len(form))
    ops = random_chain(60, rng)
    text = chain_skriptnd(ops, shape) if form == "skriptnd" else chain_nnef1(ops, shape)
    graph = loads(text, progress=False) if form == "skriptnd" else loads_nnef1(text, progress=False)
    x = rng.standard_normal(shape).astype(np.float32) * 3
    y = graph.run({"x0": x}, backend=backend)["y"]
    np.testing.assert_allclose(y.reshape(shape), chain_reference(ops, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("first", ["neg", "relu", "abs", "tanh"])
def test_abs_after_an_inlined_operation_reads_no_tensor_left_unwritten(backend, first):
    # abs lowers to x < 0 ? -x : x, its loads of x gated by a load of x: the gate kept reading the
    # producer's tensor after fusion dropped it ("intermediate 'x1' has no data")
    x = np.array([[-1.5, 2.0, -3.0], [0.5, 0.0, -0.25]], np.float32)
    graph = loads(chain_skriptnd([first, "abs"], x.shape), progress=False)
    program = graph.compile(backend, progress=False)
    assert program.nnef_inputs == ["x0"]
    y = graph.run({"x0": x}, backend=backend)["y"]
    np.testing.assert_allclose(y.reshape(x.shape), chain_reference([first, "abs"], x), rtol=1e-6)
