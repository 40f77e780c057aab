"""Padded buffers of one border, alive one after the other, are one buffer whose border is filled
once (uopviz.nnef.kernel_passes.padding): the later ones lose their border kernels, the values stay
numpy's on every run, bound or not, and buffers alive at the same time keep borders of their own."""

from __future__ import annotations

import numpy as np
import pytest

import uopviz as uv
from uopviz.nnef.composition.composer import compose
from uopviz.nnef.program.compile import compile_graph
from uopviz.nnef.program.runtime import program_inputs
from uopviz.passes.schedule import storage_of

RNG = np.random.default_rng(77)
BACKENDS = [name for name in ("python", "c", "llvm", "opencl") if name in uv.backends.available()]

#: three depthwise 3x3 convs (zero padding) and a 3x3 max pool (-inf padding), each reading the
#: output of a 1x1 conv + relu only through its padding: four padded buffers of one shape
CHAIN = """import nn;
graph Chain {
    @input { x: real[1, {C}, {H}, {W}]; }
    @output { y: real; }
    @variable {
        w1: real[{C}, {C}, 1, 1]; b1: real[{C}]; d1: real[{C}, 1, 3, 3]; e1: real[{C}];
        w2: real[{C}, {C}, 1, 1]; b2: real[{C}]; d2: real[{C}, 1, 3, 3]; e2: real[{C}];
        w3: real[{C}, {C}, 1, 1]; b3: real[{C}];
        w4: real[{C}, {C}, 1, 1]; b4: real[{C}]; d4: real[{C}, 1, 3, 3]; e4: real[{C}];
    }
    @compose {
        c1 = nn.conv(x, w1, b1); r1 = nn.relu(c1);
        s1 = nn.conv{padding=[1, 1, 1, 1], groups={C}}(r1, d1, e1);
        c2 = nn.conv(s1, w2, b2); r2 = nn.relu(c2);
        s2 = nn.conv{padding=[1, 1, 1, 1], groups={C}}(r2, d2, e2);
        c3 = nn.conv(s2, w3, b3); r3 = nn.relu(c3);
        s3 = nn.max_pool{size=[3, 3], stride=[1, 1], padding=[1, 1, 1, 1]}(r3);
        c4 = nn.conv(s3, w4, b4); r4 = nn.relu(c4);
        y = nn.conv{padding=[1, 1, 1, 1], groups={C}}(r4, d4, e4);
    }
}"""

#: two 1x1 conv + relu branches, both computed before either depthwise conv reads its padding
BRANCHES = """import nn; import math;
graph Branches {
    @input { x: real[1, {C}, {H}, {W}]; }
    @output { y: real; }
    @variable {
        w1: real[{C}, {C}, 1, 1]; b1: real[{C}]; d1: real[{C}, 1, 3, 3]; e1: real[{C}];
        w2: real[{C}, {C}, 1, 1]; b2: real[{C}]; d2: real[{C}, 1, 3, 3]; e2: real[{C}];
    }
    @compose {
        c1 = nn.conv(x, w1, b1); r1 = nn.relu(c1);
        c2 = nn.conv(x, w2, b2); r2 = nn.relu(c2);
        s1 = nn.conv{padding=[1, 1, 1, 1], groups={C}}(r1, d1, e1);
        s2 = nn.conv{padding=[1, 1, 1, 1], groups={C}}(r2, d2, e2);
        y = math.add(s1, s2);
    }
}"""


def _graph(text: str, channels: int, height: int, width: int):
    sizes = {"{C}": channels, "{H}": height, "{W}": width}
    for token, size in sizes.items():
        text = text.replace(token, str(size))
    return compose(text)


def _weights(graph, channels: int) -> dict[str, np.ndarray]:
    given = {}
    for name, tensor in graph.tensors.items():
        if tensor.kind == "variable":
            given[name] = RNG.standard_normal(tuple(tensor.shape)).astype(np.float32) / np.sqrt(channels)
            tensor.data = given[name]
    return given


def _pointwise(a, w, b):
    return np.einsum("nchw,oc->nohw", a, w[:, :, 0, 0].astype(np.float64)) + b.reshape(1, -1, 1, 1)


def _window(a, fill):
    padded = np.pad(a, [(0, 0), (0, 0), (1, 1), (1, 1)], constant_values=fill)
    return np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))


def _depthwise(a, d, e):
    return np.einsum("nchwij,cij->nchw", _window(a, 0.0), d[:, 0].astype(np.float64)) + e.reshape(1, -1, 1, 1)


def _chain_expected(x, v):
    relu = lambda a: np.maximum(a, 0)  # noqa: E731
    s1 = _depthwise(relu(_pointwise(x.astype(np.float64), v["w1"], v["b1"])), v["d1"], v["e1"])
    s2 = _depthwise(relu(_pointwise(s1, v["w2"], v["b2"])), v["d2"], v["e2"])
    s3 = _window(relu(_pointwise(s2, v["w3"], v["b3"])), -np.inf).max(axis=(4, 5))
    return _depthwise(relu(_pointwise(s3, v["w4"], v["b4"])), v["d4"], v["e4"])


def _padded_inputs(program) -> set[str]:
    """The padded buffers the program's kernels read."""
    return {name for kernel in program.nnef_kernels for name in kernel.buffers[1:] if "#pad" in name}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(8, 6, 7), (16, 9, 5), (3, 4, 4)])
def test_padded_buffers_of_one_border_share_it_and_fill_it_once(shape, backend):
    channels, height, width = shape
    graph = _graph(CHAIN, channels, height, width)
    weights = _weights(graph, channels)
    program = compile_graph(graph, backend)
    borders = [kernel for kernel in program.nnef_kernels if kernel.name.startswith("border_")]
    # the three zero-padded buffers are one (two border kernels: rows, then columns), the -inf
    # padded one of the pool has its own two: 4 border kernels, not 8
    assert sorted(kernel.name for kernel in borders) == sorted(
        ["border_r1_2both", "border_r1_3both", "border_r3_2both", "border_r3_3both"]
    ), [kernel.note for kernel in borders]
    read = _padded_inputs(program)
    assert read == {"r1#pad0-0_0-0_1-1_1-1", "r3#pad0-0_0-0_1-1_1-1#-inf"}, read
    sharing = [kernel for kernel in program.nnef_kernels if "shares the padded buffer" in kernel.note]
    assert {kernel.buffers[0] for kernel in sharing} >= {"r1#pad0-0_0-0_1-1_1-1"}
    for _ in range(3):  # bound runs on C and LLVM: the border must hold from run to run
        x = RNG.standard_normal((1, channels, height, width)).astype(np.float32)
        y = graph.run({"x": x}, backend=backend, opts="heuristic")["y"]
        np.testing.assert_allclose(y, _chain_expected(x, weights), rtol=2e-4, atol=2e-4)
        values = program.run(program_inputs(graph, program, {"x": x, **weights}))
        out = dict(zip(program.nnef_outputs, values))
        np.testing.assert_allclose(out["y"].reshape(y.shape), y, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", [name for name in BACKENDS if name in ("c", "llvm")])
def test_no_other_buffer_takes_the_shared_buffers_bytes_between_its_users(backend):
    graph = _graph(CHAIN, 8, 6, 7)
    _weights(graph, 8)
    program = compile_graph(graph, backend)
    names = [kernel.name for kernel in program.nnef_kernels]
    shared = storage_of(program.items[names.index("border_r1_2both")].arguments[0])
    users = [i for i, kernel in enumerate(program.nnef_kernels) if "r1#pad0-0_0-0_1-1_1-1" in kernel.buffers]
    # its two border kernels, and the producer and reader of each of the three zero-padded tensors
    assert len(users) == 8, [program.nnef_kernels[i].name for i in users]
    placements = program.memory_plan.placements
    mine = placements[shared]
    assert (mine.first, mine.last) == (names.index("border_r1_2both"), users[-1])
    for buffer, other in placements.items():
        if buffer is shared or other.last < mine.first or other.first > mine.last:
            continue  # not alive while the shared buffer is
        assert other.offset + other.nbytes <= mine.offset or other.offset >= mine.offset + mine.nbytes


@pytest.mark.parametrize("backend", BACKENDS)
def test_padded_buffers_alive_at_once_keep_their_own_borders(backend):
    channels, height, width = 4, 5, 6
    graph = _graph(BRANCHES, channels, height, width)
    v = _weights(graph, channels)
    program = compile_graph(graph, backend)
    borders = sorted(kernel.name for kernel in program.nnef_kernels if kernel.name.startswith("border_"))
    assert borders == ["border_r1_2both", "border_r1_3both", "border_r2_2both", "border_r2_3both"]
    assert _padded_inputs(program) == {"r1#pad0-0_0-0_1-1_1-1", "r2#pad0-0_0-0_1-1_1-1"}
    x = RNG.standard_normal((1, channels, height, width)).astype(np.float32)
    relu = lambda a: np.maximum(a, 0)  # noqa: E731
    expected = sum(
        _depthwise(relu(_pointwise(x.astype(np.float64), v[f"w{i}"], v[f"b{i}"])), v[f"d{i}"], v[f"e{i}"])
        for i in (1, 2)
    )
    y = graph.run({"x": x}, backend=backend, opts="heuristic")["y"]
    np.testing.assert_allclose(y, expected, rtol=2e-4, atol=2e-4)
