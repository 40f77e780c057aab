"""Loops whose trip count is decided at run time (§3 "Condition based looping", grammar §2.16):
``while ... do``, ``do ... while``, counts held in tensors, iteration indices, scan outputs and
nested loops. Each stays one loop node of the graph whose body and condition are graphs of their
own; ``g.run`` executes them on the host. Results are checked against the same loops written with
numpy, on random inputs of several shapes, on the python and (where there is one) C backends.
"""

from __future__ import annotations

import numpy as np
import pytest

import uopviz as uv
from uopviz.nnef import NNEFError
from uopviz.nnef.composition.composer import compose
from uopviz.nnef.graph import Graph, LoopOperation

BACKENDS = [name for name in ("python", "c") if name in uv.backends.available()]
IMPORTS = "import math; import linalg; import layout; import nn;\n"
RNG = np.random.default_rng(7)


def graph_of(inputs: str, outputs: str, body: str, constants: str = "") -> Graph:
    text = (
        f"{IMPORTS}graph G {{ @input {{ {inputs} }} @output {{ {outputs} }} {constants} "
        f"@compose {{ {body} }} }}"
    )
    return compose(text, file="loops.sknd")


def dims(shape: tuple[int, ...]) -> str:
    return ", ".join(map(str, shape))


HALVE = (
    "z, n = with x = x0, k = 0 while {{ m = math.max_reduce(x); c = math.ge(m, 1.0); yield c; }} "
    "{keyword} {{ h = math.mul(x, scale); k1 = math.add(k, 1); yield h, k1; }};"
)


def halve_reference(x: np.ndarray, scale: np.ndarray, limit: int | None = None, at_least_once=False):
    x, k = x.copy(), 0
    while (limit is None or k < limit) and ((at_least_once and k == 0) or x.max() >= 1.0):
        x, k = (x * scale).astype(np.float32), k + 1
    return x, k


def starts(shape: tuple[int, ...], largest: float) -> np.ndarray:
    x = RNG.uniform(-4.0, largest, shape).astype(np.float32)
    x.reshape(-1)[0] = largest  # the maximum is known: the trip count is log2(largest) + 1
    return x


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(3,), (2, 5), (4, 1, 3)])
def test_while_halves_a_tensor_until_its_maximum_is_below_one(backend, shape):
    g = graph_of(
        f"x0: real[{dims(shape)}]; scale: real[{dims(shape)}];",
        "z: real; n: int;",
        HALVE.format(keyword="do"),
    )
    (loop,) = g.operations
    assert isinstance(loop, LoopOperation) and loop.type == "control.while"
    assert loop.captures == ("scale",) and loop.body.captures == ["scale"]
    for largest in (0.5, 1.0, 37.0, 1000.0):
        x0 = starts(shape, largest)
        scale = np.full(shape, 0.5, np.float32)
        out = g.run({"x0": x0, "scale": scale}, backend=backend)
        expected, trips = halve_reference(x0, scale)
        np.testing.assert_array_equal(out["z"], expected)
        assert int(out["n"]) == trips == (0 if largest < 1 else int(np.log2(largest)) + 1)


@pytest.mark.parametrize("shape", [(4,), (3, 2)])
def test_do_while_runs_its_body_at_least_once(shape):
    body = (
        "z, n = with x = x0, k = 0 do { h = math.mul(x, scale); k1 = math.add(k, 1); yield h, k1; } "
        "while { m = math.max_reduce(x); c = math.ge(m, 1.0); yield c; };"
    )
    g = graph_of(f"x0: real[{dims(shape)}]; scale: real[{dims(shape)}];", "z: real; n: int;", body)
    assert g.operations[0].type == "control.do_while" and not g.operations[0].pretest
    scale = RNG.uniform(0.3, 0.7, shape).astype(np.float32)
    for largest in (0.25, 9.0):  # below one from the start: the body still runs once
        x0 = starts(shape, largest)
        out = g.run({"x0": x0, "scale": scale})
        expected, trips = halve_reference(x0, scale, at_least_once=True)
        np.testing.assert_allclose(out["z"], expected, rtol=1e-6)
        assert int(out["n"]) == trips >= 1


@pytest.mark.parametrize("limit", [0, 1, 3])
def test_an_iteration_count_bounds_a_while_loop(limit):
    shape = (2, 3)
    static = graph_of(
        f"x0: real[{dims(shape)}]; scale: real[{dims(shape)}];",
        "z: real; n: int;",
        HALVE.format(keyword=f"do..({limit})"),
    )
    counted = graph_of(
        f"x0: real[{dims(shape)}]; scale: real[{dims(shape)}]; limit: int[];",
        "z: real; n: int;",
        HALVE.format(keyword="do..(limit)"),
    )
    assert counted.operations[0].count == "limit" and static.operations[0].count == limit
    scale = np.full(shape, 0.5, np.float32)
    for largest in (3.0, 100.0):
        x0 = starts(shape, largest)
        expected, trips = halve_reference(x0, scale, limit)
        for g, extra in ((static, {}), (counted, {"limit": np.array(limit, np.int32)})):
            out = g.run({"x0": x0, "scale": scale, **extra})
            np.testing.assert_array_equal(out["z"], expected)
            assert int(out["n"]) == trips <= limit


@pytest.mark.parametrize("power", [0, 1, 5])
def test_a_count_held_in_a_tensor_repeats_the_body_matpow(power):
    # the spec's matpow (§3 "Iteration count and iteration index"): B = A^p by repeated matmul
    g = graph_of(
        "A: real[3, 3]; p: int[];",
        "B: real;",
        "B = with X = I do..(p) linalg.matmul(X, A);",
        "@constant { I: real[3, 3] = i == j ? 1.0 : 0.0, i < 3, j < 3; }",
    )
    assert [op.type for op in g.operations] == ["control.repeat"]
    a = RNG.uniform(-1, 1, (3, 3)).astype(np.float32)
    out = g.run({"A": a, "p": np.array(power, np.int32)})
    np.testing.assert_allclose(out["B"], np.linalg.matrix_power(a.astype(np.float64), power), atol=1e-5)


def test_the_iteration_index_counts_from_zero():
    g = graph_of("k: int[];", "total: int;", "total = with s = 0 do..(i -> k) math.add(s, i);")
    for k in (0, 1, 6):
        assert int(g.run({"k": np.array(k, np.int32)})["total"]) == sum(range(k))


@pytest.mark.parametrize("limit", [-1.0, 2.5, 100.0])
def test_scan_outputs_of_a_bounded_while_loop_are_stacked_in_iteration_order(limit):
    n = 3
    xs = [RNG.uniform(0, 2, n).astype(np.float32) for _ in range(4)]
    g = graph_of(
        f"a: real[{n}]; b: real[{n}]; c: real[{n}]; d: real[{n}]; lim: real[];",
        "s: real; ys: real;",
        f"s, parts.. = with acc: real[{n}] = 0.0 for x : [a, b, c, d] "
        "while { t = math.sum_reduce{squeeze=true}(acc); go = math.lt(t, lim); yield go; } "
        "do { a1 = math.add(acc, x); yield a1, a1; }; ys = layout.stack{axis=0}(parts);",
    )
    out = g.run(dict(zip("abcd", xs, strict=True)) | {"lim": np.array(limit, np.float32)})
    acc, stacked = np.zeros(n, np.float32), np.zeros((4, n), np.float32)
    for step, x in enumerate(xs):
        if not acc.sum() < limit:
            break
        acc = acc + x
        stacked[step] = acc  # iterations that did not run leave zeros
    np.testing.assert_allclose(out["s"], acc, rtol=1e-6)
    np.testing.assert_allclose(out["ys"], stacked, rtol=1e-6)


def test_the_condition_can_be_a_carried_value_updated_by_the_body():
    # the spec's collapsed form: z, ~ = with x = x0, cond = true while cond do op(x, y)
    g = graph_of(
        "x0: real[5];",
        "z: real;",
        "z, ~ = with x = x0, go = true while go do "
        "{ h = math.mul(x, 0.5); m = math.max_reduce{squeeze=true}(h); c = math.ge(m, 1.0); yield h, c; };",
    )
    assert g.operations[0].condition.operations == []  # the condition only yields a carried value
    x0 = starts((5,), 20.0)
    expected = x0.copy()
    while True:  # the body runs first, then says whether to go on
        expected = expected * 0.5
        if expected.max() < 1.0:
            break
    np.testing.assert_array_equal(g.run({"x0": x0})["z"], expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_nested_loops_run_inner_loops_per_outer_iteration(backend):
    g = graph_of(
        "x0: real[4]; r: int[];",
        "z: real;",
        "z = with x = x0 do..(r) { y = with t = x while { m = math.max_reduce(t); c = math.ge(m, 1.0); "
        "yield c; } do math.mul(t, 0.5); w = math.add(y, 3.0); yield w; };",
    )
    (outer,) = [op for op in g.operations if isinstance(op, LoopOperation)]
    inner = [op for op in outer.body.operations if isinstance(op, LoopOperation)]
    assert len(inner) == 1 and inner[0].carried == (outer.body.inputs[0],)
    assert not any(name.startswith(outer.label + ".") for name in g.tensors)  # the bodies own theirs
    x0 = starts((4,), 50.0)
    for repeats in (0, 2, 4):
        expected = x0.copy()
        for _ in range(repeats):
            while expected.max() >= 1.0:
                expected = expected * 0.5
            expected = expected + 3.0
        out = g.run({"x0": x0, "r": np.array(repeats, np.int32)}, backend=backend)
        np.testing.assert_allclose(out["z"], expected, rtol=1e-6)


def test_the_loop_node_and_its_body_are_inspectable():
    g = graph_of("x0: real[3]; scale: real[3];", "z: real; n: int;", HALVE.format(keyword="do"))
    (loop,) = g.operations
    assert loop.category == "control flow"
    assert "while {" in loop.definition_text() and "do {" in loop.definition_text()
    nodes = g.to_networkx().nodes
    assert nodes["op:0"]["subgraphs"] == {"body": loop.body, "condition": loop.condition}
    assert [op.type for op in loop.body.operations] == ["math.mul", "math.add"]
    assert [op.type for op in loop.condition.operations] == ["math.max_reduce", "math.ge"]
    body_kernels = [k.name for k in loop.body.lower()]
    condition_kernels = [k.name for k in loop.condition.lower()]
    assert body_kernels and g.lower(loop) == []  # the node's kernels are its sub-graphs'
    assert [k.name_hint for k in g.kernels(loop)] == [*body_kernels, *condition_kernels]  # tunable ones
    program = g.compile()
    names = [k.name_hint for k in program.kernels]
    assert names == [*(k.name for k in loop.body.lower()), *(k.name for k in loop.condition.lower())]
    assert [p.name for p in program.trace.passes] == ["loop z"]
    x0 = starts((3,), 6.0)
    assert int(program.run({"x0": x0, "scale": np.full(3, 0.5, np.float32)})["n"]) == 3
    tab = uv.explore(g, backend="python")
    assert "control.while" in tab.children[tab.titles.index("Operations")].value
    operators = tab.children[tab.titles.index("Model")].view.graph_model  # the operator graph
    assert "control.while" in {data.get("op") for _, data in operators.nodes(data=True)}
    assert [k.name for k in tab.children[tab.titles.index("Kernels")].kernels] == [
        k.name for k in program.kernels
    ]
    body_tab = uv.explore(loop.body, backend="python")  # a body is a graph of its own
    assert "math.mul" in body_tab.children[body_tab.titles.index("Operations")].value


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "z = with x = x0 while { m = math.max_reduce(x); c = math.ge(m, 1.0); yield c; } unroll "
            "math.mul(x, 0.5);",
            "cannot be unrolled",
        ),
        (
            "z = with x = x0 while { m = math.max_reduce(x); c = math.ge(m, 1.0); yield c; } do "
            "math.sum_reduce(x);",
            "keeps its type and shape",
        ),
        (
            "z, ys.. = with x = x0 while { m = math.max_reduce(x); c = math.ge(m, 1.0); yield c; } do "
            "{ h = math.mul(x, 0.5); yield h, h; };",
            "only with a bound",
        ),
        ("z = with x = x0 while math.mul(x, 2.0) do math.mul(x, 0.5);", "must be a single bool"),
        ("z = with x = x0 while x do math.mul(x, 0.5);", "must be a single bool"),
    ],
)
def test_malformed_loops_are_reported_where_they_are_written(body, message):
    with pytest.raises(NNEFError, match=message) as caught:
        graph_of("x0: real[3];", "z: real;", body)
    assert caught.value.file == "loops.sknd" and caught.value.line == 2


def test_kernels_before_and_after_a_loop_compile_in_programs_of_their_own_with_their_opts():
    from uopviz.passes.optops.opts import Opt, OptOp

    g = graph_of(
        "x0: real[8];",
        "out: real;",
        "a = math.mul(x0, 3.0); z = with x = a while { m = math.max_reduce(x); c = math.ge(m, 1.0); "
        "yield c; } do math.mul(x, 0.5); out = math.add(z, 1.0);",
    )
    upcast = Opt(OptOp.SPLIT, 0, (4, uv.AxisType.UPCAST, False))
    # kernels are numbered as program.kernels lists them: a, the body's mul, the condition's
    # max_reduce and ge, then kernel 4: the add after the loop
    program = g.compile(opts={4: [upcast]})
    assert [k.name_hint for k in program.kernels] == [
        "a",
        "z.body._math_mul",
        "z.condition.m",
        "z.condition.c",
        "out",
    ]
    kinds = [kind for kind, _ in program.nnef_steps]
    assert kinds == ["kernels", "loop", "kernels"]
    before, after = program.nnef_steps[0][1], program.nnef_steps[2][1]
    assert before.nnef_outputs == ["a"] and after.nnef_inputs == ["z"]
    assert not before.kernels[0].opts and after.kernels[0].opts == (upcast,)
    x0 = RNG.uniform(-2, 9, 8).astype(np.float32)
    expected = x0 * 3
    while expected.max() >= 1.0:
        expected = expected * 0.5
    np.testing.assert_allclose(g.run({"x0": x0}, opts={4: [upcast]})["out"], expected + 1.0, rtol=1e-6)
