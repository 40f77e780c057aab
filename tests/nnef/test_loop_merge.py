"""Nested output loops that every address walks as one run are merged (uopviz.nnef.kernel_passes.loop_merge):
the same values as numpy, fewer and longer loops, and no merge where a position is used otherwise."""

from __future__ import annotations

import numpy as np
import pytest
from conv_reference import conv_reference

import uopviz as uv
from uopviz.core.ops import AxisType, Ops
from uopviz.nnef.composition.composer import compose
from uopviz.nnef.program.compile import compile_graph
from uopviz.nnef.program.runtime import program_inputs

RNG = np.random.default_rng(41)
BACKENDS = [name for name in ("python", "c", "llvm", "opencl") if name in uv.backends.available()]


def _loops(kernel) -> list[int]:
    return sorted(int(u.src[0].arg[0]) for u in kernel.ast.toposort() if u.op is Ops.RANGE
                  and u.arg[1] is AxisType.LOOP)


def _run(g, backend, given):
    program = compile_graph(g, backend)
    return program, dict(zip(program.nnef_outputs, program.run(program_inputs(g, program, given))))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(1, 6, 14, 14), (2, 3, 7, 5), (1, 4, 1, 9)])
def test_a_batch_norm_walks_each_channel_as_one_loop(backend, shape):
    n, c, h, w = shape
    g = compose(f"""import nn;
graph B {{
    @input {{ x: real[{n}, {c}, {h}, {w}]; }}
    @output {{ y: real; }}
    @variable {{ m: real[{c}]; v: real[{c}]; s: real[{c}]; o: real[{c}]; }}
    @compose {{ b = nn.batch_norm{{epsilon=1e-5}}(x, m, v, o, s); y = nn.relu(b); }}
}}""")
    normal = lambda *size: RNG.standard_normal(size).astype(np.float32)  # noqa: E731
    given = {"x": normal(*shape), "m": normal(c), "v": RNG.random(c).astype(np.float32) + 0.5, "s": normal(c),
             "o": normal(c)}
    program, out = _run(g, backend, given)
    per = lambda a: a.reshape(1, c, 1, 1)  # noqa: E731
    expected = np.maximum((given["x"] - per(given["m"])) / np.sqrt(per(given["v"]) + 1e-5) * per(given["s"])
                          + per(given["o"]), 0)
    np.testing.assert_allclose(out["y"].reshape(shape), expected, rtol=1e-5, atol=1e-6)
    (kernel,) = program.nnef_kernels
    # the per-channel parameters keep the channel loop apart; the rows and columns are one loop
    assert _loops(kernel) == sorted(([n] if n > 1 else []) + [c, h * w]), _loops(kernel)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_1x1_conv_merges_its_pixels_and_a_padded_conv_keeps_its_rows(backend):
    g = compose("""import nn;
graph C {
    @input { x: real[1, 4, 6, 10]; }
    @output { y: real; z: real; }
    @variable { w: real[8, 4, 1, 1]; b: real[8]; v: real[3, 4, 3, 3]; a: real[3]; }
    @compose { y = nn.conv(x, w, b); z = nn.conv{padding=[1, 1, 1, 1]}(x, v, a); }
}""")
    normal = lambda *size: RNG.standard_normal(size).astype(np.float32)  # noqa: E731
    given = {"x": normal(1, 4, 6, 10), "w": normal(8, 4, 1, 1), "b": normal(8), "v": normal(3, 4, 3, 3),
             "a": normal(3)}
    program, out = _run(g, backend, given)
    y = conv_reference(given["x"], given["w"], given["b"], (1, 1), (1, 1), (0, 0, 0, 0), 1)
    z = conv_reference(given["x"], given["v"], given["a"], (1, 1), (1, 1), (1, 1, 1, 1), 1)
    np.testing.assert_allclose(out["y"].reshape(y.shape), y, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out["z"].reshape(z.shape), z, rtol=1e-4, atol=1e-4)
    kernels = {kernel.buffers[0]: kernel for kernel in program.nnef_kernels}
    assert _loops(kernels["y"]) == [8, 60]  # the pixels one loop; the bias keeps the channels apart
    # the padded input's rows are 12 wide, the output's 10: its rows and columns stay two loops
    assert _loops(kernels["z"]) == [3, 6, 10]
