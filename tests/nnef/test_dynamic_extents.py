"""Data-dependent extents (§2.12 "Data dependent output shapes", §3 dynamic shapes): after an
operation whose output extent is counted at run time (``layout.nonzero``, a compress-like
operator written here), later operations reduce over, broadcast against and reindex that extent.
Every kernel reads the counter and stops at the actual extent, so the results equal numpy's on
the selected data — for several data patterns, including none selected — on the python and C
backends.
"""

from __future__ import annotations

import numpy as np
import pytest
from counted_graphs import counted_graph

import uopviz as uv
from uopviz import Ops
from uopviz.nnef import NNEFError

BACKENDS = [name for name in ("python", "c") if name in uv.backends.available()]
RNG = np.random.default_rng(11)


def graph_of(inputs: str, outputs: str, body: str):
    imports = ("math", "layout", "linalg", "nn", "algo")
    return counted_graph(inputs, outputs, body, imports=imports, file="dynamic.sknd")


def patterns(shape: tuple[int, ...]) -> list[np.ndarray]:
    """Random data with about half, all and none of its elements nonzero."""
    some = RNG.standard_normal(shape).astype(np.float32) * (RNG.random(shape) < 0.5)
    return [some, RNG.uniform(0.5, 2.0, shape).astype(np.float32), np.zeros(shape, np.float32)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 2), (6,)])
def test_nonzero_then_elementwise_then_reductions(backend, shape):
    rank = len(shape)
    g = graph_of(
        f"x: real[{', '.join(map(str, shape))}];",
        "y: int; z: int; s: int; p: int; m: real;",
        "y = layout.nonzero(x); z = math.add(y, 1); s = math.sum_reduce{axes=[1]}(z); "
        "p = math.prod_reduce{axes=[1]}(z); "
        "r = layout.cast<real>(z); m = linalg.matmul{transB=true}(r, r);",
    )
    assert g.tensors["s"].shape == (rank, 1)
    for x in patterns(shape):
        out = g.run({"x": x}, backend=backend)
        index = np.stack(np.nonzero(x)).astype(np.int32).reshape(rank, -1)
        np.testing.assert_array_equal(out["y"], index)
        np.testing.assert_array_equal(out["z"], index + 1)
        # the padding past the count would add (and multiply in) ones, and add to the matmul
        np.testing.assert_array_equal(out["s"], (index + 1).sum(1, keepdims=True))
        np.testing.assert_array_equal(out["p"], (index + 1).prod(1, keepdims=True))
        r = (index + 1).astype(np.float32)
        np.testing.assert_allclose(out["m"], r @ r.T, rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [1, 7, 16])
def test_compress_followed_by_reductions_softmax_and_argmax(backend, n):
    g = graph_of(
        f"v: real[{n}];",
        "c: real; e: real; total: real; top: real; sm: real; am: int; w: real;",
        "c = compress(v); e = math.exp(c); total = math.sum_reduce(e); "
        "nc = math.neg(c); top = math.max_reduce(nc); sm = nn.softmax{axes=[0]}(c); "
        "am = math.argmax{axis=0}(e); row = layout.unsqueeze{axes=[0]}(e); w = linalg.matvec(row, c);",
    )
    for v in [*patterns((n,)), -np.abs(RNG.standard_normal(n)).astype(np.float32) - 0.1]:
        selected = v[v > 0]
        out = g.run({"v": v}, backend=backend)
        np.testing.assert_array_equal(out["c"], selected)
        np.testing.assert_allclose(out["e"], np.exp(selected), rtol=1e-5)
        np.testing.assert_allclose(out["total"], [np.exp(selected).sum()], rtol=1e-5)
        np.testing.assert_allclose(out["w"], [np.exp(selected) @ selected], rtol=1e-5, atol=1e-6)
        assert out["sm"].shape == selected.shape
        if selected.size:
            np.testing.assert_allclose(out["top"], [(-selected).max()], rtol=1e-6)
            np.testing.assert_allclose(out["sm"], np.exp(selected) / np.exp(selected).sum(), rtol=1e-5)
            assert int(out["am"][0]) == int(np.argmax(np.exp(selected)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_reindexing_a_run_time_extent_pad_concat_and_flatten(backend):
    g = graph_of(
        "v: real[9];",
        "pr: real; pe: real; cc: real; fl: real; sz: int;",
        "c = compress(v); pr = layout.pad{padding=[2, 1], method='REFLECT'}(c); "
        "pe = layout.pad{padding=[1, 3], method='REPLICATE'}(c); cc = layout.concat{axis=0}([c, c]); "
        "two = layout.stack{axis=0}([c, c]); fl = layout.flatten{axis=0}(two); "
        "positive = math.gt(cc, 0.0); ones = layout.cast<int>(positive); sz = math.sum_reduce(ones);",
    )
    for count in (3, 5, 9):  # reflect needs at least 3
        v = -np.ones(9, np.float32)
        v[RNG.choice(9, count, replace=False)] = RNG.uniform(0.5, 3.0, count).astype(np.float32)
        selected = v[v > 0]
        out = g.run({"v": v}, backend=backend)
        np.testing.assert_array_equal(out["pr"], np.pad(selected, (2, 1), "reflect"))
        np.testing.assert_array_equal(out["pe"], np.pad(selected, (1, 3), "edge"))
        np.testing.assert_array_equal(out["cc"], np.concatenate([selected, selected]))
        np.testing.assert_array_equal(out["fl"], np.concatenate([selected, selected]))  # [2, k] row-major
        assert int(out["sz"][0]) == 2 * count


def test_kernels_read_the_counter_of_the_extent_they_stop_at():
    g = graph_of("v: real[5];", "t: real;", "c = compress(v); t = math.sum_reduce(c);")
    g.lower()
    assert g.counts == {"c.k": "c#count"}
    reduce_kernels = g.lower(g.operations[-1])
    assert reduce_kernels and all("c#count" in kernel.buffers for kernel in reduce_kernels)
    for kernel in reduce_kernels:  # a gate compares the range with the value loaded from c#count
        slot = kernel.buffers.index("c#count")
        compares = [u for u in kernel.ast.toposort() if u.op is Ops.CMP_LT]
        assert any(v.op is Ops.PARAM and v.arg.slot == slot for u in compares for v in u.src[1].toposort()), (
            kernel.name
        )


def test_a_built_in_kernel_refuses_to_read_across_a_run_time_extent():
    g = graph_of("v: real[6];", "t: real; i: int;", "c = compress(v); t, i = algo.top_k{k=2, axis=0}(c);")
    with pytest.raises(NNEFError, match="decided by the data at run time") as caught:
        g.run({"v": np.ones(6, np.float32)})
    assert caught.value.file == "dynamic.sknd"


@pytest.mark.parametrize("backend", BACKENDS)
def test_counting_a_tensor_whose_extent_was_counted(backend):
    # nonzero of a compressed tensor: its bound is itself a run-time extent (bounded by the input's)
    g = graph_of(
        "v: real[9];",
        "w: int; t: int;",
        "c = compress(v); d = math.sub(c, 1.5); e = math.gt(d, 0.0); w = layout.nonzero(e); "
        "t = math.sum_reduce(w);",
    )
    assert g.tensors["w"].upper_shape == (1, 9)
    for v in [*patterns((9,)), np.linspace(-1, 3, 9, dtype=np.float32)]:
        selected = v[v > 0]
        index = np.stack(np.nonzero(selected - 1.5 > 0)).astype(np.int32).reshape(1, -1)
        out = g.run({"v": v}, backend=backend)
        np.testing.assert_array_equal(out["w"], index)
        np.testing.assert_array_equal(out["t"], index.sum(keepdims=True).reshape(1, 1))
