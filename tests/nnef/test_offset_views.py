"""Writes at an offset through a view (uopviz.nnef.kernel_passes.offset_views): DenseNet's growth
convolutions, each writing its channels further into the block's buffer, become one kernel body
with views of the buffer, and give the zoo's numpy values on every backend and in the isolated
worker; a padded interior keeps its offset in the code; the pass alone, IR in and IR out."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import uopviz as uv
from uopviz.core.ops import AxisType, Ops
from uopviz.core.uop import UOp
from uopviz.nnef.kernel_passes.offset_views import split_view_name, view_name, write_through_views
from uopviz.nnef.lowering.kernel_builder import LoweredKernel
from uopviz.nnef.program.runtime import program_inputs

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import zoo  # noqa: E402

BACKENDS = [name for name in ("python", "c", "llvm", "opencl") if name in uv.backends.available()]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("first, size, layers", [(16, 6, 3), (8, 5, 4), (24, 7, 2)])
def test_growth_convolutions_are_one_body_writing_views(backend, first, size, layers, tmp_path):
    net = zoo.dense_block(first, size, layers, growth=8)
    zoo.write_nnef1(net, str(tmp_path))
    graph = uv.nnef.load(str(tmp_path))
    program = graph.compile(backend, opts="heuristic", progress=False)
    growth = [kernel for kernel in program.nnef_kernels if kernel.name.endswith("[1]")]
    assert len(growth) == layers
    offsets = [split_view_name(kernel.buffers[0]) for kernel in growth]
    block = net.output
    assert offsets == [(block, (first + k * 8) * size * size) for k in range(layers)]
    assert len({kernel.ast for kernel in growth}) == 1  # one body, lowered once
    x = net.input_data()
    expected = zoo.reference(net, x)
    out = graph.run({net.input_name: x}, backend=backend, opts="heuristic")[block]
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5 * float(np.abs(expected).max()))
    if backend in ("c", "llvm"):  # the kernel worker binds the views too
        inputs = program_inputs(graph, program, {net.input_name: x})
        isolated = dict(zip(program.nnef_outputs, program.run(inputs, isolated=True)))
        np.testing.assert_allclose(isolated[block].reshape(expected.shape), out, rtol=1e-6, atol=1e-6)


def test_a_padded_interior_keeps_its_offset_in_the_code(tmp_path):
    # a 3x3 conv's input written one row and one column into its padded buffer (59 elements in, a
    # kernel reaching 7 rows of 9): positioned by its own shape, not made a view
    net = zoo.dense_block(8, 7, 1, growth=8)
    zoo.write_nnef1(net, str(tmp_path))
    program = uv.nnef.load(str(tmp_path)).compile("python", opts="heuristic", progress=False)
    interior = [kernel for kernel in program.nnef_kernels if "#pad" in kernel.buffers[0]]
    assert interior and all(split_view_name(kernel.buffers[0])[1] is None for kernel in interior
                            if not kernel.name.startswith("border_"))  # fmt: skip


# ------------------------------------------------------------------------------------------------
# the pass alone


def _writer(index: UOp, size: int, reads_back: bool = False) -> LoweredKernel:
    target = UOp.param(0, (size,), uv.dtypes.float32)
    source = UOp.param(1, (16,), uv.dtypes.float32)
    r = next(u for u in index.toposort() if u.op is Ops.RANGE)
    value = UOp(Ops.LOAD, (UOp(Ops.INDEX, (source, r)),))
    if reads_back:
        value = value + UOp(Ops.LOAD, (UOp(Ops.INDEX, (target, index)),))
    store = UOp(Ops.STORE, (UOp(Ops.INDEX, (target, index)), value))
    return LoweredKernel("k", UOp(Ops.SINK, (store,)), ["B#pad0", "A"], None)


@pytest.mark.parametrize("reads_back", [False, True])
def test_a_write_past_its_own_reach_goes_through_a_view(reads_back):
    r = UOp.range(16, AxisType.LOOP, 0)
    (moved,) = write_through_views([_writer(r * 2 + 100, 200, reads_back)])
    assert moved.buffers == ["B#pad0@100", "A"]
    params = [u for u in moved.ast.toposort() if u.op is Ops.PARAM and u.arg.slot == 0]
    assert [param.shape for param in params] == [(31,)]  # 2 * 15 + 1 elements reached
    indices = {u.src[1] for u in moved.ast.toposort() if u.op is Ops.INDEX and u.src[0] is params[0]}
    assert len(indices) == 1 and next(iter(indices)).op is Ops.MUL  # r * 2: the offset is the view's


def test_writes_within_their_reach_or_past_the_buffer_stay():
    r = UOp.range(16, AxisType.LOOP, 0)
    assert write_through_views([_writer(r + 10, 200)])[0].buffers[0] == "B#pad0"  # 10 < reach 16
    assert write_through_views([_writer(r + 190, 200)])[0].buffers[0] == "B#pad0"  # ends past 200
    assert write_through_views([_writer(r + 49, 200)])[0].buffers[0] == "B#pad0@49"
    assert write_through_views([_writer(r - 1 + 50, 200)])[0].buffers[0] == "B#pad0"  # r - 1 may be < 0
    assert write_through_views([_writer(r * 3, 200)])[0].buffers[0] == "B#pad0"  # no offset


def test_view_names():
    assert split_view_name(view_name("relu4#pad0-0_1-1", 300)) == ("relu4#pad0-0_1-1", 300)
    assert split_view_name("concat7") == ("concat7", None)
    assert split_view_name("a@b") == ("a@b", None)
