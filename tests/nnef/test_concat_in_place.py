"""Concatenations grown in place (uopviz.nnef.kernel_passes.concat_in_place): a DenseNet-style chain
of concatenations gives numpy's values with no copy kernel and one buffer per chain; copies that
cannot go (batch 2, the last axis, a kept piece, an overlapping writer) stay and give the same values."""

from __future__ import annotations

import numpy as np
import pytest
from conv_reference import conv_reference

import uopviz as uv
from uopviz.core.ops import AxisType, Ops
from uopviz.core.rewrite import location_of
from uopviz.core.uop import UOp
from uopviz.nnef.composition.composer import compose
from uopviz.nnef.kernel_passes.concat_in_place import concatenate_in_place, prefix_copy
from uopviz.nnef.kernel_passes.pipeline import concat_in_place
from uopviz.nnef.lowering.kernel_builder import LoweredKernel
from uopviz.nnef.program.compile import compile_graph
from uopviz.nnef.program.runtime import program_inputs

RNG = np.random.default_rng(47)
BACKENDS = [name for name in ("python", "c", "llvm", "opencl") if name in uv.backends.available()]


def _dense_block(batch: int, channels: int, growth: int, layers: int, size: tuple[int, int]):
    """A DenseNet block: each layer a 3x3 conv of relu(everything so far), concatenated on."""
    h, w = size
    variables = "; ".join(f"w{i}: real[{growth}, {channels + i * growth}, 3, 3]" for i in range(layers))
    lines = []
    previous = "x"
    for i in range(layers):
        lines.append(f"r{i} = nn.relu({previous}); n{i} = nn.conv{{padding=1}}(r{i}, w{i});")
        lines.append(f"c{i} = layout.concat{{axis=1}}([{previous}, n{i}]);")
        previous = f"c{i}"
    source = f"""import nn; import layout;
graph Dense {{
    @input {{ x: real[{batch}, {channels}, {h}, {w}]; }}
    @output {{ y: real; }}
    @variable {{ {variables}; }}
    @compose {{
        {" ".join(lines)}
        y = nn.relu({previous});
    }}
}}"""
    return compose(source)


def _dense_reference(x: np.ndarray, weights: list[np.ndarray]) -> np.ndarray:
    current = x.astype(np.float64)
    zero = np.zeros(weights[0].shape[0])
    for w in weights:
        relu = np.maximum(current, 0)
        new = conv_reference(relu, w.astype(np.float64), zero, (1, 1), (1, 1), (1, 1, 1, 1), 1)
        current = np.concatenate([current, new], axis=1)
    return np.maximum(current, 0)


def _run(graph, backend, given):
    program = compile_graph(graph, backend)
    out = dict(zip(program.nnef_outputs, program.run(program_inputs(graph, program, given))))
    return program, out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "batch, channels, growth, layers, size",
    [(1, 4, 2, 3, (5, 6)), (1, 3, 4, 4, (7, 7)), (1, 8, 8, 2, (4, 9)), (2, 4, 2, 3, (5, 5))],
    ids=["b1-3layers", "b1-4layers", "b1-wide", "b2"],
)
def test_a_dense_block_equals_numpy(backend, batch, channels, growth, layers, size):
    graph = _dense_block(batch, channels, growth, layers, size)
    x = RNG.standard_normal((batch, channels, *size)).astype(np.float32)
    weights = [RNG.standard_normal((growth, channels + i * growth, 3, 3)).astype(np.float32)
               for i in range(layers)]
    given = {"x": x, **{f"w{i}": w for i, w in enumerate(weights)}}
    program, out = _run(graph, backend, given)
    expected = _dense_reference(x, weights)
    np.testing.assert_allclose(out["y"].reshape(expected.shape), expected, rtol=2e-4, atol=2e-4)
    copies = [kernel for kernel in program.nnef_kernels if prefix_copy(kernel) is not None]
    written = {kernel.buffers[0] for kernel in program.nnef_kernels}
    if batch == 1:
        # every concatenation's front is the chain's last buffer: one copy (of the graph's input, whose
        # data is the caller's), no buffer per concatenation
        assert [kernel.buffers for kernel in copies] == [[f"c{layers - 1}", "x"]]
        assert not any(f"c{i}" in written for i in range(layers - 1))
        assert f"c{layers - 1}" in written
    else:  # batch 2: the first piece is no prefix of the concatenation (one per image): copied
        assert copies == []
        assert all(f"c{i}[0]" in [kernel.name for kernel in program.nnef_kernels] for i in range(layers))
        assert all(f"c{i}" in written for i in range(layers))


@pytest.mark.parametrize("backend", BACKENDS[:2])
def test_a_kept_piece_and_a_last_axis_concatenation_keep_their_copies(backend):
    graph = compose(
        """import nn; import layout;
graph Kept {
    @input { x: real[1, 3, 4, 5]; }
    @output { a: real; y: real; z: real; }
    @compose {
        a = nn.relu(x);
        b = nn.relu(a);
        y = layout.concat{axis=1}([a, b]);
        c = nn.relu(x);
        z = layout.concat{axis=3}([c, x]);
    }
}"""
    )
    x = RNG.standard_normal((1, 3, 4, 5)).astype(np.float32)
    program, out = _run(graph, backend, {"x": x})
    relu = np.maximum(x, 0)
    np.testing.assert_allclose(out["a"].reshape(x.shape), relu)
    np.testing.assert_allclose(out["y"].reshape(1, 6, 4, 5), np.concatenate([relu, relu], 1))
    np.testing.assert_allclose(out["z"].reshape(1, 3, 4, 10), np.concatenate([relu, x], 3))
    # ``a`` is an output (its own buffer): copied into ``y``; ``c`` goes to the front of each row of
    # ``z``, not of ``z``: its piece kernel stays (fusion computes ``c`` there)
    assert {kernel.buffers[1] for kernel in program.nnef_kernels if prefix_copy(kernel) is not None} == {"a"}
    assert "z[0]" in [kernel.name for kernel in program.nnef_kernels]


def test_the_pass_is_a_traced_step_per_kernel_it_moves():
    graph = _dense_block(1, 4, 2, 2, (3, 3))
    program = compile_graph(graph, "python")
    steps = [step for step in program.trace.steps if step.pass_name == "Concat In Place"]
    names = " ".join(step.rule for step in steps)
    assert "writes c0 in the front of c1" in names and "reads c0 in the front of c1" in names
    assert "writes x" not in names  # the graph's input keeps its buffer: the first piece is copied
    # each step at the def of the pass, the kernels as they are after it
    assert {step.location for step in steps} == {location_of(concat_in_place)}
    assert all(step.after.op is Ops.SINK for step in steps)


# ------------------------------------------------------------------------------------------------
# the pass alone, IR in and IR out


def _copy(index: UOp, count: int, target_size: int, gate: UOp | None = None) -> LoweredKernel:
    target = UOp.param(0, (target_size,), uv.dtypes.float32)
    source = UOp.param(1, (count,), uv.dtypes.float32)
    load = UOp(Ops.LOAD, (UOp(Ops.INDEX, (source, index)),))
    store = UOp(Ops.STORE, (UOp(Ops.INDEX, (target, index)), load, *([gate] if gate is not None else [])))
    return LoweredKernel("copy", UOp(Ops.SINK, (store,)), ["B", "A"], None)


def _writer(name: str, first: int, count: int, size: int) -> LoweredKernel:
    target = UOp.param(0, (size,), uv.dtypes.float32)
    r = UOp.range(count, AxisType.LOOP, 0)
    store = UOp(Ops.STORE, (UOp(Ops.INDEX, (target, r + first)), UOp.const(uv.dtypes.float32, 1.0)))
    return LoweredKernel(name, UOp(Ops.SINK, (store,)), [name.split("@")[0]], None)


def test_prefix_copy_reads_the_copy_and_nothing_else():
    rows, columns = UOp.range(3, AxisType.LOOP, 0), UOp.range(4, AxisType.LOOP, 1)
    dense = rows * 4 + columns
    assert prefix_copy(_copy(dense, 12, 20)) == 12
    assert prefix_copy(_copy(dense + 2, 12, 20)) is None  # at an offset
    assert prefix_copy(_copy(rows * 5 + columns, 12, 20)) is None  # rows of a wider buffer
    assert prefix_copy(_copy(dense, 12, 20, gate=columns < 2)) is None
    assert prefix_copy(_copy(dense, 12, 8)) is None  # a source larger than its target


@pytest.mark.parametrize(
    "writer_first, moved", [(12, True), (11, False)], ids=["beyond-the-prefix", "overlapping"]
)
def test_a_writer_of_the_prefix_keeps_the_copy(writer_first, moved):
    rows, columns = UOp.range(3, AxisType.LOOP, 0), UOp.range(4, AxisType.LOOP, 1)
    back = _writer("B@back", writer_first, 8, 20)
    kernels = [_writer("A", 0, 12, 12), _copy(rows * 4 + columns, 12, 20), back]
    out = concatenate_in_place(kernels, frozenset())
    assert (len(out) == 2) is moved
    if moved:
        assert out[0].buffers == ["B"] and "writes A in the front of B" in out[0].note
    kept = concatenate_in_place(kernels, frozenset({"A"}))
    assert [kernel.buffers for kernel in kept] == [kernel.buffers for kernel in kernels]
