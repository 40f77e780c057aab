"""Rule ``affine chain as scale and shift`` (uopviz.nnef.model.canonical): a batch normalisation's
``(x - mean) / sqrt(variance + epsilon) * scale + offset`` over per-channel parameters becomes
``x * s + t`` with ``s`` and ``t`` computed once when an NNEF 1.0 model loads — the graph before and
after, and the values against numpy on random inputs of several shapes."""

from __future__ import annotations

import numpy as np
import pytest

import uopviz as uv
from uopviz.nnef.nnef1.loader import loads_nnef1

RULE = "affine chain as scale and shift"
RNG = np.random.default_rng(15)
CPU_BACKENDS = [b for b in ("c", "llvm", "python") if b in uv.backends.available()]


def _batch_norm_text(shape: tuple[int, ...], with_scale: bool = True, with_offset: bool = True) -> str:
    c = shape[1]
    offset = "off" if with_offset else "0.0"
    scale = "sc" if with_scale else "1.0"
    return f"""version 1.0;
graph G( input ) -> ( output )
{{
    input = external<scalar>(shape = {list(shape)});
    mean = variable<scalar>(shape = [1, {c}], label = 'mean');
    var = variable<scalar>(shape = [1, {c}], label = 'var');
    off = variable<scalar>(shape = [1, {c}], label = 'off');
    sc = variable<scalar>(shape = [1, {c}], label = 'sc');
    b = batch_normalization(input, mean, var, {offset}, {scale}, epsilon = 1e-3);
    output = relu(b);
}}
"""


def _parameters(c: int) -> dict[str, np.ndarray]:
    return {
        "mean": RNG.standard_normal((1, c)).astype(np.float32),
        "var": (RNG.random((1, c)) + 0.25).astype(np.float32),
        "off": RNG.standard_normal((1, c)).astype(np.float32),
        "sc": RNG.standard_normal((1, c)).astype(np.float32),
    }


def _reference(x: np.ndarray, p: dict[str, np.ndarray], with_scale=True, with_offset=True) -> np.ndarray:
    shape = (1, -1) + (1,) * (x.ndim - 2)
    mean, var, off, sc = (p[k].astype(np.float64).reshape(shape) for k in ("mean", "var", "off", "sc"))
    y = (x.astype(np.float64) - mean) / np.sqrt(var + 1e-3)
    y = y * sc if with_scale else y
    y = y + off if with_offset else y
    return np.maximum(y, 0.0)


@pytest.mark.parametrize("shape", [(1, 16, 10, 10), (2, 5, 7), (3, 33, 4, 6)])
@pytest.mark.parametrize("with_scale,with_offset", [(True, True), (False, True), (True, False)])
def test_a_batch_norm_becomes_one_scale_and_shift_with_numpys_values(shape, with_scale, with_offset):
    parameters = _parameters(shape[1])
    graph = loads_nnef1(_batch_norm_text(shape, with_scale, with_offset), parameters)
    # before: squeeze x4, sub, add, sqrt, div, mul, add, relu; after: the multiply-add and the relu
    assert [op.type for op in graph.operations] == ["math.mul", "math.add", "nn.relu"]
    (step,) = [s for s in graph.canonical if s.rule == RULE]
    assert step.label == "b" and "math.sub -> math.div" in step.description
    assert set(step.sources) <= {"mean", "var", "off", "sc"}
    for tensor in graph.tensors.values():  # every intermediate left has the operation that writes it
        if tensor.kind == "intermediate":
            assert tensor.producer is not None and tensor.name in tensor.producer.output_names(), tensor
    scale = graph.tensors[graph.operations[0].inputs[1]]
    assert scale.kind == "constant" and scale.shape == (shape[1],)
    x = RNG.standard_normal(shape).astype(np.float32)
    expected = _reference(x, parameters, with_scale, with_offset)
    for backend in CPU_BACKENDS:
        out = graph.run({"input": x}, backend=backend)["output"]
        np.testing.assert_allclose(out, expected, rtol=2e-6, atol=2e-6)


def test_a_chain_read_in_the_middle_or_without_a_division_stays():
    c = 4
    text = f"""version 1.0;
graph G( input ) -> ( centered, output )
{{
    input = external<scalar>(shape = [1, {c}, 3, 3]);
    mean = variable<scalar>(shape = [1, {c}], label = 'mean');
    sc = variable<scalar>(shape = [1, {c}], label = 'sc');
    centered = sub(input, mean);
    output = mul(centered, sc);
}}
"""
    # 'centered' is a graph output: the chain cannot lose it; a lone add or mul is already one op
    graph = loads_nnef1(text, {"mean": np.ones((1, c), np.float32), "sc": np.ones((1, c), np.float32)})
    assert not [s for s in graph.canonical if s.rule == RULE]
    assert {"math.sub", "math.mul"} <= {op.type for op in graph.operations}


def test_a_folded_statistic_given_at_run_time_is_refused():
    shape = (1, 6, 4, 4)
    graph = loads_nnef1(_batch_norm_text(shape), _parameters(6))
    x = RNG.standard_normal(shape).astype(np.float32)
    with pytest.raises(uv.nnef.NNEFError, match="mean"):
        graph.run({"input": x, "mean": np.zeros((1, 6), np.float32)}, backend="c")
