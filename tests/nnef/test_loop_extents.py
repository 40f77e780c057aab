"""Loops decided at run time (§3 "Condition based looping") meet extents decided at run time, and
the loop nodes' kernels meet opts and the tuner.

- A body or condition that captures, carries or scans tensors whose extent the data decides reads
  the actual extents from counters of its own, which the runner fills on every iteration; a body
  that compresses what it carries hands the next iteration the extent it counted.
- The scan outputs of a ``while`` loop with no ``for`` clause or count are a pack whose length the
  left side declares (``ys..(6)``: §2.10 asks every packed result to denote its length), an upper
  bound checked at run time (§2.6.1); without it composing fails and says so.
- Per-kernel opts number kernels as ``program.kernels`` lists them, loop bodies included, and the
  kernel tuner opens a body's kernels.

Results are compared with the same loops written with numpy, on random data of several patterns
and sizes, on the python and (where there is one) C backends.
"""

from __future__ import annotations

import numpy as np
import pytest
from counted_graphs import counted_graph

import uopviz as uv
from uopviz.nnef import NNEFError
from uopviz.nnef.graph import LoopOperation
from uopviz.passes.optops.opts import Opt, OptOp

BACKENDS = [name for name in ("python", "c") if name in uv.backends.available()]
RNG = np.random.default_rng(17)


def graph_of(inputs: str, outputs: str, body: str):
    return counted_graph(inputs, outputs, body, imports=("math", "layout"), file="loops.sknd")


def vectors(n: int) -> list[np.ndarray]:
    """Random values with about half positive, all positive, none positive."""
    return [
        RNG.uniform(-3.0, 6.0, n).astype(np.float32),
        RNG.uniform(0.5, 9.0, n).astype(np.float32),
        -RNG.uniform(0.5, 2.0, n).astype(np.float32),
    ]


# ------------------------------------------------------------------------------------------------
# captured and carried run-time extents


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [4, 11])
def test_a_body_reads_a_captured_tensor_at_its_counted_extent(backend, n):
    g = graph_of(
        f"v: real[{n}]; x0: real[3]; r: int[];",
        "z: real; w: real;",
        "c = compress(v); "
        "z = with x = x0 do..(r) { s = math.sum_reduce(c); m = math.mean_reduce(c); "
        "  a = math.add(x, s); b = math.sub(a, m); yield b; }; "
        "w = with y = x0 while { t = math.max_reduce(y); g = math.lt(t, 50.0); yield g; } "
        "  do { p = math.prod_reduce(c); q = math.abs(p); e = math.add(q, 2.0); h = math.mul(y, e); "
        "  yield h; };",
    )
    (loop, other) = [op for op in g.operations if isinstance(op, LoopOperation)]
    assert "c" in loop.captures and list(loop.body.extent_inputs.values()) == [g.tensors["c"].shape[0]]
    x0 = RNG.uniform(0.5, 2.0, 3).astype(np.float32)
    for v in vectors(n):
        c = v[v > 0].astype(np.float64)
        for repeats in (0, 3):
            out = g.run({"v": v, "x0": x0, "r": np.array(repeats, np.int32)}, backend=backend)
            step = c.sum() - (c.mean() if c.size else np.nan)
            np.testing.assert_allclose(out["z"], x0 + repeats * step if repeats else x0, rtol=1e-5)
        y, factor = x0.astype(np.float64), abs(np.prod(c)) + 2.0  # the product of nothing is 1
        while y.max() < 50.0:
            y = y * factor
        np.testing.assert_allclose(out["w"], y, rtol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [5, 12])
def test_a_carried_tensor_keeps_its_counted_extent(backend, n):
    g = graph_of(
        f"v: real[{n}];",
        "z: real; trips: int; total: real;",
        "c = compress(v); z, trips = with x = c, k = 0 "
        "while { m = math.max_reduce(x); g = math.ge(m, 1.0); yield g; } "
        "do { h = math.mul(x, 0.5); k1 = math.add(k, 1); yield h, k1; }; total = math.sum_reduce(z);",
    )
    (loop,) = [op for op in g.operations if isinstance(op, LoopOperation)]
    assert g.tensors["z"].shape == g.tensors["c"].shape and not loop.extent_outputs  # the same extent
    for v in vectors(n)[:2]:
        x, trips = v[v > 0].copy(), 0
        while x.max() >= 1.0:
            x, trips = (x * 0.5).astype(np.float32), trips + 1
        out = g.run({"v": v}, backend=backend)
        np.testing.assert_array_equal(out["z"], x)
        assert int(out["trips"]) == trips
        np.testing.assert_allclose(out["total"], [x.sum()], rtol=1e-6)


def shrink_reference(v: np.ndarray, limit: float) -> tuple[np.ndarray, list[np.ndarray]]:
    x, steps = v.copy(), []
    while x.sum() > limit:
        x = (x - np.float32(1.0)).astype(np.float32)
        x = x[x > 0]
        steps.append(x)
    return x, steps


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [6, 10])
def test_a_body_that_compresses_what_it_carries_passes_the_new_extent_on(backend, n):
    # x starts static (v) and the body shrinks it: its extent varies from one iteration to the next
    g = graph_of(
        f"v: real[{n}]; limit: real[];",
        "z: real; trips: int; size: int; all: real;",
        "z, trips, steps..(12) = with x = v, k = 0 "
        "while { s = math.sum_reduce(x); g = math.gt(s, limit); yield g; } "
        "do { y = math.sub(x, 1.0); w = compress(y); k1 = math.add(k, 1); yield w, k1, w; }; "
        "pos = math.gt(z, 0.0); ones = layout.cast<int>(pos); size = math.sum_reduce(ones); "
        "all = layout.concat{axis=0}(steps);",
    )
    (loop,) = [op for op in g.operations if isinstance(op, LoopOperation)]
    formal = loop.body.tensors[loop.body.inputs[0]]
    assert formal.shape[0].key == "z.x#0" and formal.shape[0].bound == n  # a run-time extent of its own
    assert loop.body.extent_inputs == {"z.body#extent0": ("carry", 0, 0)}
    assert {where[0] for where in loop.extent_outputs.values()} == {"carry", "scan"}
    assert loop.scan_limit == 12 and len(loop.outputs[2]) == 12
    for v in vectors(n)[:2]:
        for limit in (0.5, 4.0, 1000.0):
            x, steps = shrink_reference(v, limit)
            out = g.run({"v": v, "limit": np.array(limit, np.float32)}, backend=backend)
            np.testing.assert_array_equal(out["z"], x)
            assert int(out["trips"]) == len(steps)
            assert out["size"].tolist() == [int((x > 0).sum())]  # read at z's run-time extent
            np.testing.assert_array_equal(out["all"], np.concatenate([np.zeros(0, np.float32), *steps]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_nested_loops_pass_run_time_extents_inward_and_out(backend):
    g = graph_of(
        "v: real[9]; r: int[];",
        "z: real;",
        "c = compress(v); z = with x = c do..(r) { "
        "  y = with t = x while { s = math.sum_reduce(t); g = math.gt(s, 6.0); yield g; } "
        "      do { u = math.sub(t, 1.0); w = compress(u); yield w; }; "
        "  q = math.add(y, 2.0); yield q; };",
    )
    for v in vectors(9)[:2]:
        for repeats in (0, 1, 3):
            x = v[v > 0]
            for _ in range(repeats):
                x, _ = shrink_reference(x, 6.0)
                x = (x + np.float32(2.0)).astype(np.float32)
            out = g.run({"v": v, "r": np.array(repeats, np.int32)}, backend=backend)
            np.testing.assert_array_equal(out["z"], x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scanning_a_pack_of_counted_tensors(backend):
    g = graph_of(
        "v: real[8]; limit: real[];",
        "z: real;",
        "c = compress(v); d = math.mul(c, 2.0); e = math.sub(c, 1.0); "
        "z = with acc = c for item : [c, d, e] "
        "while { s = math.sum_reduce(acc); g = math.lt(s, limit); yield g; } "
        "do math.add(acc, item);",
    )
    for v in vectors(8)[:2]:
        c = v[v > 0]
        for limit in (-1.0, 3.0 * c.sum() + 1e-3, 1e9):
            acc = c.copy()
            for item in (c, 2 * c, c - 1):
                if not acc.sum() < limit:
                    break
                acc = (acc + item.astype(np.float32)).astype(np.float32)
            out = g.run({"v": v, "limit": np.array(limit, np.float32)}, backend=backend)
            np.testing.assert_allclose(out["z"], acc, rtol=1e-6)


def test_a_carried_value_may_only_vary_within_its_bound():
    with pytest.raises(NNEFError, match="keeps its type and shape") as caught:
        graph_of(
            "v: real[4]; u: real[6];",
            "z: real;",
            "c = compress(u); z = with x = v while { s = math.sum_reduce(x); g = math.gt(s, 1.0); yield g; } "
            "do { y = math.add(x, 0.0); w = layout.concat{axis=0}([y, c]); yield w; };",
        )
    assert caught.value.line == 7


# ------------------------------------------------------------------------------------------------
# scan outputs of a while loop: their length is declared on the left side


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(3,), (2, 2)])
def test_scan_outputs_of_a_while_loop_take_the_declared_length(backend, shape):
    dims = ", ".join(map(str, shape))
    g = graph_of(
        f"x0: real[{dims}];",
        "z: real; ys: real;",
        "z, parts..(6) = with x = x0 "
        "while { m = math.max_reduce{squeeze=true}(x); g = math.ge(m, 1.0); yield g; } "
        "do { h = math.mul(x, 0.5); yield h, h; }; ys = layout.stack{axis=0}(parts);",
    )
    (loop,) = [op for op in g.operations if isinstance(op, LoopOperation)]
    assert loop.scan_limit == 6 and loop.attribs["bound"] == 6
    for largest in (0.5, 3.0, 40.0):
        x0 = RNG.uniform(-1.0, largest, shape).astype(np.float32)
        x0.reshape(-1)[0] = largest
        x, stacked = x0.copy(), np.zeros((6, *shape), np.float32)
        step = 0
        while x.max() >= 1.0:
            x = x * np.float32(0.5)
            stacked[step], step = x, step + 1
        out = g.run({"x0": x0}, backend=backend)
        np.testing.assert_array_equal(out["z"], x)
        np.testing.assert_array_equal(out["ys"], stacked)  # items past the last iteration are zero
    with pytest.raises(
        NNEFError, match="goes on to iteration 7, but the left side declares 6 items"
    ) as caught:
        g.run({"x0": np.full(shape, 1000.0, np.float32)}, backend=backend)
    assert (caught.value.file, caught.value.line) == ("loops.sknd", 7)


def test_a_count_tensor_and_a_declared_length_bound_the_scan_together():
    g = graph_of(
        "x0: real[2]; r: int[];",
        "ys: real;",
        "~, parts..(3) = with x = x0 do..(r) { h = math.add(x, 1.0); yield h, h; }; "
        "ys = layout.stack{axis=0}(parts);",
    )
    x0 = np.array([0.5, -1.0], np.float32)
    out = g.run({"x0": x0, "r": np.array(2, np.int32)})
    np.testing.assert_array_equal(out["ys"], np.stack([x0 + 1, x0 + 2, np.zeros(2, np.float32)]))
    with pytest.raises(NNEFError, match="declares 3 items"):
        g.run({"x0": x0, "r": np.array(4, np.int32)})


@pytest.mark.parametrize(
    ("results", "message"),
    [
        ("z, parts..", "declare that length on the left side"),
        ("z, parts..(2), more..(3)", "the left side declares \\[2, 3\\]"),
    ],
)
def test_scan_outputs_without_one_declared_length_are_reported(results, message):
    yields = "h, h, h" if "more" in results else "h, h"
    with pytest.raises(NNEFError, match=message) as caught:
        graph_of(
            "x0: real[3];",
            "z: real;",
            f"{results} = with x = x0 while {{ m = math.max_reduce(x); g = math.ge(m, 1.0); yield g; }} "
            f"do {{ h = math.mul(x, 0.5); yield {yields}; }};",
        )
    assert caught.value.file == "loops.sknd" and caught.value.line == 7


def test_a_declared_length_must_match_a_for_clause():
    with pytest.raises(NNEFError, match="receives 2 tensors, but its length is declared 5"):
        graph_of(
            "a: real[3]; b: real[3];",
            "z: real;",
            "z, parts..(5) = with x = a for item : [a, b] "
            "while { m = math.max_reduce(x); g = math.ge(m, 1.0); "
            "yield g; } do { h = math.add(x, item); yield h, h; };",
        )


# ------------------------------------------------------------------------------------------------
# opts and the tuner reach the kernels of loop bodies

UPCAST = Opt(OptOp.SPLIT, 0, (4, uv.AxisType.UPCAST, False))


def halving_graph():
    return graph_of(
        "x0: real[8]; r: int[];",
        "out: real;",
        "a = math.mul(x0, 3.0); "
        "z = with x = a while { m = math.max_reduce(x); c = math.ge(m, 1.0); yield c; } "
        "do { h = with y = x do..(r) math.mul(y, 0.5); yield h; }; out = math.add(z, 1.0);",
    )


def halving_reference(x0: np.ndarray) -> np.ndarray:
    x = x0 * np.float32(3.0)
    while x.max() >= 1.0:
        x = x * np.float32(0.5)
    return x + np.float32(1.0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_per_kernel_opts_reach_the_kernels_of_loop_bodies(backend):
    g = halving_graph()
    names = [k.name_hint for k in g.compile(backend).kernels]
    assert names == [
        "a",
        "z.body.h.body._math_mul",
        "z.condition.m",
        "z.condition.c",
        "out",
    ]  # nested body too
    x0 = RNG.uniform(-2.0, 9.0, 8).astype(np.float32)
    for opts in ({1: [UPCAST]}, {"z.body.h.body._math_mul": [UPCAST]}, [[], [UPCAST], [], [], [UPCAST]]):
        program = g.compile(backend, opts=opts)
        applied = [k.opts for k in program.kernels]
        assert applied[1] == (UPCAST,) and applied[0] == applied[2] == applied[3] == ()
        assert applied[4] == ((UPCAST,) if isinstance(opts, list) else ())
        out = g.run({"x0": x0, "r": np.array(1, np.int32)}, backend, opts=opts)["out"]
        np.testing.assert_allclose(out, halving_reference(x0), rtol=1e-6)
    with pytest.raises(NNEFError, match="opts has entries for 2 kernels; graph G compiles to 5"):
        g.compile(backend, opts=[[], []])


def test_the_tuner_opens_the_kernels_of_a_loop_body():
    from uopviz.widgets.tuner import TunerState

    g = halving_graph()
    loop = next(op for op in g.operations if isinstance(op, LoopOperation))
    kernels = g.kernels(loop)
    assert [k.name_hint for k in kernels] == ["z.body.h.body._math_mul", "z.condition.m", "z.condition.c"]
    state = TunerState(kernels[0])
    assert state.apply(UPCAST) and state.opts == (UPCAST,)
    tab = uv.explore(g, backend="python")
    tuner = tab.children[tab.titles.index("Kernels")]
    assert [k.name_hint for k in tuner.kernels][1] == "z.body.h.body._math_mul"
