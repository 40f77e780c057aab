"""Loops driven from native code (uopviz.backends.loop_driver): after the first iteration binds the
body and the condition, a loop of CPU programs (C, LLVM) runs its remaining iterations in one C
function — kernels called through their addresses, carried values copied with memmove — instead of
returning to Python each time.  Results must equal numpy's loops and the Python-driven loop's, on
random inputs of several shapes, for while, do-while, counted and indexed loops."""

from __future__ import annotations

import numpy as np
import pytest

import uopviz as uv
import uopviz.backends.loop_driver as loop_driver
import uopviz.nnef.program.runtime as runtime
from uopviz.nnef.composition.composer import compose

BACKENDS = [name for name in ("c", "llvm") if name in uv.backends.available()]
pytestmark = pytest.mark.skipif(
    not BACKENDS or loop_driver.loop_driver() is None,
    reason="the native loop driver needs a C compiler and a CPU backend (c or llvm)",
)
IMPORTS = "import math; import linalg; import layout; import nn;\n"
RNG = np.random.default_rng(23)


def graph_of(inputs: str, outputs: str, body: str, constants: str = ""):
    text = (f"{IMPORTS}graph G {{ @input {{ {inputs} }} @output {{ {outputs} }} {constants} "
            f"@compose {{ {body} }} }}")
    return compose(text, file="native_loops.sknd")


@pytest.fixture
def driven(monkeypatch):
    """Counts the native driver's runs (and the iterations it ran) while a test runs."""
    seen = {"runs": 0, "steps": 0}
    original = loop_driver.NativeLoop.run

    def counting(self, step, stop):
        reached, tested_false = original(self, step, stop)
        seen["runs"] += 1
        seen["steps"] += reached - step
        return reached, tested_false

    monkeypatch.setattr(loop_driver.NativeLoop, "run", counting)
    return seen


def python_driven(monkeypatch, run):
    """``run()`` with the native driver switched off (every iteration through Python)."""
    with monkeypatch.context() as patch:
        patch.setattr(runtime, "_native_loop", lambda *args: None)
        return run()


HALVE = ("z, n = with x = x0, k = 0 {head} {{ h = math.mul(x, scale); k1 = math.add(k, 1); yield h, k1; }} "
         "{tail};")
TEST = "{ m = math.max_reduce(x); c = math.ge(m, 1.0); yield c; }"


def halve_reference(x, scale, limit=None, at_least_once=False):
    x, k = x.copy(), 0
    while (limit is None or k < limit) and ((at_least_once and k == 0) or x.max() >= 1.0):
        x, k = (x * scale).astype(np.float32), k + 1
    return x, k


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 1, 7)])
@pytest.mark.parametrize("form", ["while", "do_while", "counted"])
def test_native_loops_match_numpy_and_the_python_driven_loop(monkeypatch, driven, backend, shape, form):
    dims = ", ".join(map(str, shape))
    head, tail, limit = {"while": (f"while {TEST} do", "", None), "do_while": ("do", f"while {TEST}", None),
                         "counted": (f"while {TEST} do..(limit)", "", 9)}[form]
    extra_input = " limit: int[];" if limit is not None else ""
    g = graph_of(f"x0: real[{dims}]; scale: real[{dims}];{extra_input}", "z: real; n: int;",
                 HALVE.format(head=head, tail=tail))
    for largest in (1.5, 40.0, 3e6):
        x0 = RNG.uniform(-4.0, largest, shape).astype(np.float32)
        x0.reshape(-1)[0] = largest
        scale = RNG.uniform(0.3, 0.7, shape).astype(np.float32)
        given = {"x0": x0, "scale": scale, **({"limit": np.array(limit, np.int32)} if limit else {})}
        before = driven["steps"]
        out = g.run(given, backend=backend)
        expected, trips = halve_reference(x0, scale, limit, at_least_once=form == "do_while")
        np.testing.assert_array_equal(out["z"], expected)
        assert int(out["n"]) == trips
        # the first iteration binds the body (a do-while's condition first runs in the second);
        # the driver runs the others
        python_steps = 2 if form == "do_while" else 1
        if trips > python_steps:
            assert driven["steps"] - before == trips - python_steps
        by_python = python_driven(monkeypatch, lambda given=given: g.run(given, backend=backend))
        np.testing.assert_array_equal(by_python["z"], out["z"])
        assert int(by_python["n"]) == int(out["n"])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("power", [2, 5, 11])
def test_a_native_counted_loop_repeats_a_matmul(driven, backend, power):
    g = graph_of("A: real[4, 4]; p: int[];", "B: real;", "B = with X = I do..(p) linalg.matmul(X, A);",
                 "@constant { I: real[4, 4] = i == j ? 1.0 : 0.0, i < 4, j < 4; }")
    a = RNG.uniform(-1, 1, (4, 4)).astype(np.float32)
    out = g.run({"A": a, "p": np.array(power, np.int32)}, backend=backend)
    np.testing.assert_allclose(out["B"], np.linalg.matrix_power(a.astype(np.float64), power), rtol=1e-4,
                               atol=1e-5)
    assert driven["steps"] == power - 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("count", [2, 7, 40])
def test_the_native_driver_writes_the_iteration_index(driven, backend, count):
    g = graph_of("k: int[];", "total: int;", "total = with s = 0 do..(i -> k) math.add(s, i);")
    assert int(g.run({"k": np.array(count, np.int32)}, backend=backend)["total"]) == sum(range(count))
    assert driven["steps"] == count - 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_driver_returns_to_python_between_chunks(monkeypatch, driven, backend):
    # an unbounded loop returns to Python every CHUNK_STEPS iterations (so Ctrl-C is seen); the
    # result must not depend on where the chunks end
    monkeypatch.setattr(loop_driver, "CHUNK_STEPS", 3)
    shape = (6,)
    g = graph_of("x0: real[6]; scale: real[6];", "z: real; n: int;",
                 HALVE.format(head=f"while {TEST} do", tail=""))
    x0 = np.full(shape, 2.0 ** 20, np.float32)
    scale = np.full(shape, 0.5, np.float32)
    out = g.run({"x0": x0, "scale": scale}, backend=backend)
    assert int(out["n"]) == 21
    np.testing.assert_array_equal(out["z"], halve_reference(x0, scale)[0])
    assert driven["steps"] == 20


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_loop_run_again_reuses_its_driver_with_fresh_state(driven, backend):
    g = graph_of("x0: real[4]; scale: real[4];", "z: real; n: int;",
                 HALVE.format(head=f"while {TEST} do", tail=""))
    scale = np.full((4,), 0.5, np.float32)
    for largest in (100.0, 3.0, 1000.0, 0.5):  # longer, shorter, none: nothing carried over
        x0 = np.array([largest, 1.0, -2.0, 0.25], np.float32)
        out = g.run({"x0": x0, "scale": scale}, backend=backend)
        expected, trips = halve_reference(x0, scale)
        np.testing.assert_array_equal(out["z"], expected)
        assert int(out["n"]) == trips
