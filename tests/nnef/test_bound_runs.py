"""Graph runs on CPU backends reuse arrays bound once (uopviz.nnef.program.runtime._BoundGraph): each run's
inputs reach the kernels, outputs are the caller's own copies, and a variable given by name or new
data for a tensor are honoured."""

from __future__ import annotations

import numpy as np
import pytest

import uopviz as uv
from uopviz.nnef.composition.composer import compose
from uopviz.passes.schedule import storage_of

BACKENDS = [name for name in ("c", "llvm") if name in uv.backends.available()]
RNG = np.random.default_rng(5)

GRAPH = """import nn;
graph Net {
    @input { x: real[1, 4, 5, 5]; }
    @output { y: real; }
    @variable { w: real[16, 4, 3, 3]; b: real[16]; }
    @compose {
        c = nn.conv{padding=[1, 1, 1, 1]}(x, w, b);
        y = nn.relu(c);
    }
}"""


def _expected(x, w, b):
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (1, 1), (1, 1)])
    out = np.zeros((1, 16, 5, 5))
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,oc->nohw", xp[:, :, i : i + 5, j : j + 5], w[:, :, i, j])
    return np.maximum(out + b.reshape(1, -1, 1, 1), 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_bound_runs_follow_each_input_and_each_weight(backend):
    g = compose(GRAPH)
    w = RNG.standard_normal((16, 4, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(16).astype(np.float32)
    g.tensors["w"].data, g.tensors["b"].data = w, b
    outputs = []
    for _ in range(3):
        x = RNG.standard_normal((1, 4, 5, 5)).astype(np.float32)
        y = g.run({"x": x}, backend=backend, opts="heuristic")["y"]
        np.testing.assert_allclose(y, _expected(x, w, b), rtol=1e-4, atol=1e-4)
        outputs.append((x, y))
    assert any(g.__dict__.get("_bound_graphs", {}).values())  # the runs went through a bound form
    for x, y in outputs:  # each run's output is its own array, not a view the next run overwrites
        np.testing.assert_allclose(y, _expected(x, w, b), rtol=1e-4, atol=1e-4)
    x = outputs[0][0]
    other = RNG.standard_normal(w.shape).astype(np.float32)
    y = g.run({"x": x, "w": other}, backend=backend, opts="heuristic")["y"]  # this run's weights
    np.testing.assert_allclose(y, _expected(x, other, b), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(g.run({"x": x}, backend=backend, opts="heuristic")["y"], outputs[0][1])
    g.tensors["b"].data = bias = b + 1  # a tensor's new data: bound again
    y = g.run({"x": x}, backend=backend, opts="heuristic")["y"]
    np.testing.assert_allclose(y, _expected(x, w, bias), rtol=1e-4, atol=1e-4)
    assert any(name in g.layouts for name in g.compile(backend, opts="heuristic").nnef_inputs)
    g.tensors["w"].data = filters = w * 2  # new data for a filter read through its blocked copy
    y = g.run({"x": x}, backend=backend, opts="heuristic")["y"]
    np.testing.assert_allclose(y, _expected(x, filters, bias), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32], ids=lambda d: np.dtype(d).name)
def test_an_input_off_a_cache_line_or_of_another_dtype_goes_straight_into_the_bound_array(backend, dtype):
    # the bound path copies what is given into its own aligned array (no aligned copy first): an
    # input one element past a cache line, strided, or of another dtype gives the same values
    g = compose(GRAPH)
    w = RNG.standard_normal((16, 4, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(16).astype(np.float32)
    g.tensors["w"].data, g.tensors["b"].data = w, b
    for run in range(3):
        values = (RNG.standard_normal(1 * 4 * 5 * 5) * 4).astype(dtype)
        backing = np.zeros(values.size * 2 + 1, dtype)
        x = backing[1:values.size + 1] if run != 1 else backing[1::2][:values.size]
        x[...] = values
        x = x.reshape(1, 4, 5, 5)
        assert x.ctypes.data % 64 != 0
        y = g.run({"x": x}, backend=backend, opts="heuristic")["y"]
        np.testing.assert_allclose(y, _expected(values.reshape(1, 4, 5, 5).astype(np.float32), w, b),
                                   rtol=1e-4, atol=1e-4)
    assert any(g.__dict__.get("_bound_graphs", {}).values())


def test_a_wrongly_shaped_input_is_refused_on_the_bound_path():
    if "c" not in BACKENDS:
        pytest.skip("the C backend (a C compiler) is not available here")
    g = compose(GRAPH)
    g.tensors["w"].data = np.ones((16, 4, 3, 3), np.float32)
    g.tensors["b"].data = np.ones(16, np.float32)
    g.run({"x": np.ones((1, 4, 5, 5), np.float32)}, backend="c")
    with pytest.raises(uv.nnef.NNEFError, match="shape"):
        g.run({"x": np.ones((1, 4, 5, 4), np.float32)}, backend="c")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_bound_graph_runs_its_kernels_in_one_native_call(backend, monkeypatch):
    # the kernels of a bound run are called by the native driver (one ctypes call per run, not one
    # per kernel), with the same values as the launches called one by one
    from uopviz.backends import loop_driver

    g = compose(GRAPH)
    w = RNG.standard_normal((16, 4, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(16).astype(np.float32)
    g.tensors["w"].data, g.tensors["b"].data = w, b
    x = RNG.standard_normal((1, 4, 5, 5)).astype(np.float32)
    native = g.run({"x": x}, backend=backend, opts="heuristic")["y"]
    bound = [form for pool in g.__dict__["_bound_graphs"].values() for form in pool]
    assert bound and all(form.native is not None for form in bound)
    np.testing.assert_allclose(native, _expected(x, w, b), rtol=1e-4, atol=1e-4)
    monkeypatch.setattr(loop_driver, "loop_driver", lambda: None)  # no driver: launches one by one
    g.__dict__.pop("_bound_graphs")
    one_by_one = g.run({"x": x}, backend=backend, opts="heuristic")["y"]
    np.testing.assert_array_equal(one_by_one, native)


PADDED_GRAPH = """import nn;
graph Borders {
    @input { x: real[1, 4, 6, 7]; }
    @output { y: real; }
    @variable { w1: real[4, 4, 1, 1]; b1: real[4]; w2: real[2, 4, 1, 1]; b2: real[2];
                w3: real[8, 2, 1, 1]; b3: real[8]; }
    @compose {
        a = nn.conv(x, w1, b1);
        r = nn.relu(a);
        p = nn.max_pool{size=[3, 3], stride=[1, 1], padding=[1, 1, 1, 1]}(r);
        c = nn.conv(p, w2, b2);
        y = nn.conv(c, w3, b3);
    }
}"""


def _padded_expected(given):
    def conv1x1(a, w, b):
        return np.einsum("nchw,oc->nohw", a.astype(np.float64), w[:, :, 0, 0]) + b.reshape(1, -1, 1, 1)

    r = np.maximum(conv1x1(given["x"], given["w1"], given["b1"]), 0)
    padded = np.pad(r, [(0, 0), (0, 0), (1, 1), (1, 1)], constant_values=-np.inf)
    p = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3)).max(axis=(4, 5))
    return conv1x1(conv1x1(p, given["w2"], given["b2"]), given["w3"], given["b3"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_padded_buffers_border_holds_its_value_on_every_bound_run(backend):
    # r is read only through its -inf padding: its producer writes the padded buffer's interior and
    # border kernels fill the rest.  The memory plan lets c take the padded buffer's bytes once the
    # pool has read it, so each run of the bound form must write the border again
    g = compose(PADDED_GRAPH)
    shapes = {"w1": (4, 4, 1, 1), "b1": (4,), "w2": (2, 4, 1, 1), "b2": (2,), "w3": (8, 2, 1, 1), "b3": (8,)}
    for name, shape in shapes.items():
        g.tensors[name].data = RNG.standard_normal(shape).astype(np.float32)
    weights = {name: g.tensors[name].data for name in shapes}
    program = g.compile(backend, opts="heuristic")
    borders = [i for i, kernel in enumerate(program.nnef_kernels) if kernel.name.startswith("border_")]
    padded = {storage_of(program.items[i].arguments[0]) for i in borders}
    c = storage_of(program.items[[k.name for k in program.nnef_kernels].index("c")].arguments[0])
    placements = program.memory_plan.placements
    (buffer,) = padded  # c's bytes overlap the padded buffer's: the border does not survive a run
    assert placements[c].offset < placements[buffer].offset + placements[buffer].nbytes
    for _ in range(3):  # -inf borders: a value of c there would change the maxima
        x = -np.abs(RNG.standard_normal((1, 4, 6, 7))).astype(np.float32) - 1
        y = g.run({"x": x}, backend=backend, opts="heuristic")["y"]
        np.testing.assert_allclose(y, _padded_expected({"x": x, **weights}), rtol=1e-4, atol=1e-4)
    assert any(g.__dict__.get("_bound_graphs", {}).values())  # the runs went through a bound form
