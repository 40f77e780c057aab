"""What makes big NNEF graphs compile fast, checked for correctness: operations of equal signature
lowered once (their kernels renamed), kernel fusion (uopviz.nnef.kernel_passes.fusion), and the pipeline's
identical kernels compiled once."""

from __future__ import annotations

import numpy as np
import pytest

import uopviz as uv
from uopviz.nnef.composition.composer import compose
from uopviz.nnef.program.compile import compile_graph
from uopviz.nnef.program.runtime import program_inputs

RNG = np.random.default_rng(12)
BACKENDS = [name for name in ("python", "c") if name in uv.backends.available()]

TWIN_CONVS = """import nn; import math;
graph Twins {
    @input { x: real[1, 4, 6, 6]; }
    @output { y: real; z: real; }
    @variable { w1: real[4, 4, 3, 3]; w2: real[4, 4, 3, 3]; b1: real[4]; b2: real[4]; }
    @compose {
        c1 = nn.conv{padding=1}(x, w1, b1);
        r1 = nn.relu(c1);
        c2 = nn.conv{padding=1}(r1, w2, b2);
        r2 = nn.relu(c2);
        y = math.add(r2, r1);
        z = math.add(r1, r1);
    }
}
"""


def _conv(x, w, b):
    xp = np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)])
    windows = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
    return np.einsum("nchwij,ocij->nohw", windows, w) + b.reshape(1, -1, 1, 1)


def _data():
    return {
        "x": RNG.standard_normal((1, 4, 6, 6)).astype(np.float32),
        **{f"w{k}": RNG.standard_normal((4, 4, 3, 3)).astype(np.float32) for k in (1, 2)},
        **{f"b{k}": RNG.standard_normal(4).astype(np.float32) for k in (1, 2)},
    }


def _reference(v):
    r1 = np.maximum(_conv(v["x"], v["w1"], v["b1"]), 0)
    r2 = np.maximum(_conv(r1, v["w2"], v["b2"]), 0)
    return r2 + r1, r1 + r1


def test_operations_of_equal_signature_share_their_kernel_asts():
    g = compose(TWIN_CONVS)
    conv1, conv2 = (op for op in g.operations if op.type == "nn.conv")
    (k1,), (k2,) = g.lower(conv1), g.lower(conv2)
    assert k1.ast is k2.ast  # lowered once
    assert k1.buffers == ["c1", "x", "w1", "b1"] and k2.buffers == ["c2", "r1", "w2", "b2"]
    assert (k1.name, k2.name) == ("c1", "c2") and k2.operation is conv2
    # add(r2, r1) and add(r1, r1) differ in which inputs are one tensor: lowered separately
    add_y, add_z = (op for op in g.operations if op.type == "math.add")
    assert g.lower(add_y)[0].buffers == ["y", "r2", "r1"] and g.lower(add_z)[0].buffers == ["z", "r1"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("fuse", [True, False])
def test_fused_and_unfused_graphs_compute_what_numpy_does(backend, fuse):
    g = compose(TWIN_CONVS)
    v = _data()
    program = compile_graph(g, backend, fuse=fuse)
    outputs = dict(zip(program.nnef_outputs, program.run(program_inputs(g, program, v))))
    y, z = _reference(v)
    np.testing.assert_allclose(outputs["y"].reshape(y.shape), y, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(outputs["z"].reshape(z.shape), z, rtol=1e-4, atol=1e-4)
    kernels = len(program.kernels)
    # fused: conv1+relu (read by three kernels, so stored), conv2+relu+add, add, and the zero-padded
    # copies of x and r1 the convolutions read without bounds tests (uopviz.nnef.kernel_passes.padding);
    # unfused: six kernels
    assert kernels == (5 if fuse else 6)
    if fuse:
        assert sum(kernel.name.startswith("pad_") for kernel in program.nnef_kernels) == 2


def test_a_tensor_the_graph_outputs_is_stored_even_when_it_could_be_fused():
    text = TWIN_CONVS.replace("@output { y: real; z: real; }", "@output { y: real; z: real; c2: real; }")
    g = compose(text)
    program = compile_graph(g, "python")
    assert "c2" in program.nnef_outputs
    v = _data()
    outputs = dict(zip(program.nnef_outputs, program.run(program_inputs(g, program, v))))
    r1 = np.maximum(_conv(v["x"], v["w1"], v["b1"]), 0)
    np.testing.assert_allclose(
        outputs["c2"].reshape(1, 4, 6, 6), _conv(r1, v["w2"], v["b2"]), rtol=1e-4, atol=1e-4
    )
