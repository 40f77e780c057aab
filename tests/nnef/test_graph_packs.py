"""Packs as SkriptND graph inputs and outputs (§2.4: ``xs: real[2, 3]..(s|5)``, ``values:
real[]..(3)``), loops over a pack input (parallel and folding ``for``, ``do`` and ``unroll``), and
pack lengths that follow a run-time input extent (``layout.unstack`` along it,
``layout.split{count=n / 2}``), within the declared bound: ``run`` takes a pack as a list of
arrays, recomposes the graph for the number of items given (as it does for input extents) and
returns a pack output as a list. Every case runs on every CPU backend against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import uopviz as uv
from uopviz.nnef import NNEFError, loads

CPU_BACKENDS = [name for name in ("python", "c", "llvm", "opencl") if name in uv.backends.available()]
RNG = np.random.default_rng(412)

LOOPS = """
import layout, math;

graph Packs {
    @input {
        xs: real[2, 3]..(s|5);
        y: real[2, 3];
    }
    @output {
        total: real[2, 3];
        doubled: real[2, 3]..(s);
        unrolled: real[2, 3]..;
        folded: real[2, 3];
        folded_unrolled: real[2, 3];
        first: real[]..(3);
    }
    @compose {
        total = math.sum_n(xs);
        doubled.. = for x : xs do { d = math.add(x, x); yield d; };
        unrolled.. = for x : xs unroll { d = math.mul(x, y); yield d; };
        folded = with acc: real[2, 3] = y for x : xs do {
            h = math.mul(acc, 0.5); n = math.add(h, x); yield n;
        };
        folded_unrolled = with acc: real[2, 3] = y for x : xs unroll {
            m = math.max(acc, x); yield m;
        };
        flat = layout.reshape{shape=[6]}(y);
        items.. = layout.unstack{axis=0}(flat);
        first = items[:3];
    }
}
"""


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_pack_inputs_outputs_and_loops_over_them(backend):
    graph = loads(LOOPS)
    assert graph.input_packs() == ["xs"] and set(graph.output_packs()) == {"doubled", "unrolled", "first"}
    assert graph.packs["xs"] == [f"xs[{k}]" for k in range(5)]  # composed at the bound
    for count in (1, 3, 5):
        xs = [RNG.standard_normal((2, 3)).astype(np.float32) for _ in range(count)]
        y = RNG.standard_normal((2, 3)).astype(np.float32)
        out = graph.run({"xs": xs, "y": y}, backend=backend)
        halved, biggest = y, y
        for x in xs:
            halved, biggest = halved * 0.5 + x, np.maximum(biggest, x)
        np.testing.assert_allclose(out["total"], np.sum(xs, 0), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(out["folded"], halved, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(out["folded_unrolled"], biggest)
        assert len(out["doubled"]) == len(out["unrolled"]) == count and len(out["first"]) == 3
        for doubled, multiplied, x in zip(out["doubled"], out["unrolled"], xs, strict=True):
            np.testing.assert_allclose(doubled, 2 * x)
            np.testing.assert_allclose(multiplied, x * y, rtol=1e-6)
        np.testing.assert_allclose(np.stack(out["first"]), y.reshape(6)[:3])


RUNTIME_LENGTHS = """
import layout, math;

graph Lengths {
    @input {
        x: real[~|6, 3];
        y: real[n|8, 2];
    }
    @output {
        rows: real[3]..;
        halves: real[2, 2]..;
        sums: real[3];
    }
    @compose {
        rows.. = layout.unstack{axis=0}(x);
        halves.. = layout.split{axis=0, count=n / 2}(y);
        sums = math.sum_n(rows);
    }
}
"""


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_pack_lengths_follow_input_extents(backend):
    graph = loads(RUNTIME_LENGTHS)
    assert len(graph.packs["rows"]) == 6 and len(graph.packs["halves"]) == 4  # at the bounds
    for rows, pairs in ((4, 2), (6, 4), (1, 1)):
        x = RNG.standard_normal((rows, 3)).astype(np.float32)
        y = RNG.standard_normal((2 * pairs, 2)).astype(np.float32)
        out = graph.run({"x": x, "y": y}, backend=backend)
        assert len(out["rows"]) == rows and len(out["halves"]) == pairs
        for item, expected in zip(out["rows"], x, strict=True):
            np.testing.assert_allclose(item, expected)
        for item, expected in zip(out["halves"], np.split(y, pairs), strict=True):
            np.testing.assert_allclose(item, expected)
        np.testing.assert_allclose(out["sums"], x.sum(0), rtol=1e-5, atol=1e-6)


DECLARED_LENGTHS = """
import layout, math;

graph Declared {
    @input {
        x: real[s|6, 3];
        y: real[~|5, 2];
    }
    @output {
        rows: real[3]..;
        doubled: real[3]..;
        cols: real[5]..;
        sums: real[3];
    }
    @compose {
        rows..(s) = layout.unstack{axis=0}(x);
        doubled..(2 * s / 2) = for r : rows do { d = math.add(r, r); yield d; };
        yt = layout.transpose{perm=[1, 0]}(y);
        cols.. = layout.unstack{axis=1}(yt);
        sums = math.sum_n(rows);
    }
}
"""


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_a_pack_length_declared_by_an_input_extent_expression(backend):
    # 'rows..(s)' was refused: "'rows' receives 6 tensors, but its length is declared ~s|6" (issue 21)
    graph = loads(DECLARED_LENGTHS)
    # run-time extents print in the inputs' names, never as a tuple read as an expression
    assert [repr(e) for e in graph.tensors["y"].shape] == ["~y.shape[0]|5", "2"]
    assert graph.pack_lengths_at_bounds == ["~((2 * s) / 2)|6", "~s|6", "~y.shape[0]|5"]
    for rows, cols in ((4, 2), (6, 5), (1, 3)):
        x = RNG.standard_normal((rows, 3)).astype(np.float32)
        y = RNG.standard_normal((cols, 2)).astype(np.float32)
        out = graph.run({"x": x, "y": y}, backend=backend)
        assert len(out["rows"]) == len(out["doubled"]) == rows and len(out["cols"]) == cols
        np.testing.assert_allclose(np.stack(out["rows"]), x)
        np.testing.assert_allclose(np.stack(out["doubled"]), 2 * x)
        np.testing.assert_allclose(np.stack(out["cols"]), y)
        np.testing.assert_allclose(out["sums"], x.sum(0), rtol=1e-5, atol=1e-6)


def test_pack_errors_name_the_pack():
    graph = loads(LOOPS)
    y = np.zeros((2, 3), np.float32)
    with pytest.raises(NNEFError, match=r"graph input pack 'xs': 6 items exceed the declared bound 5"):
        graph.run({"xs": [y] * 6, "y": y})
    with pytest.raises(NNEFError, match=r"a length decided at run time needs an upper bound"):
        loads(
            "import math;\ngraph G { @input { xs: real[2]..(s); } @output { y: real[2]; } "
            "@compose { y = math.sum_n(xs); } }"
        )
    with pytest.raises(
        NNEFError, match=r"graph output pack 'ys' is declared with 2 items, the graph computes 3"
    ):
        loads(
            "import layout;\ngraph G { @input { x: real[3, 2]; } @output { ys: real[2]..(2); } "
            "@compose { ys.. = layout.unstack{axis=0}(x); } }"
        )


def test_a_graph_whose_pack_lengths_follow_input_extents_compiles_once_shaped():
    graph = loads(RUNTIME_LENGTHS)
    assert graph.pack_lengths_at_bounds == ["~(n / 2)|4", "~x.shape[0]|6"]
    with pytest.raises(NNEFError, match=r"pack lengths follow the run-time input extents .*g\.recomposed"):
        graph.compile()
    shaped = graph.recomposed({"x": (4, 3), "y": (6, 2)})
    assert not shaped.pack_lengths_at_bounds and len(shaped.packs["rows"]) == 4
    assert len(shaped.compile().kernels) > 0
    tab = uv.explore(graph, backend="python")  # the operator graph, and why there are no kernels
    assert tab.titles == ("Model", "Kernels", "Operations")
    assert "recomposed" in tab.children[1].value
    explorer = tab.children[0]
    explorer.view.selected = "op:0"
    explorer._open_from_button()  # the unstack lowers at the bound: one kernel per item it may have
    assert "6 kernels of rows" in explorer.message.value
