"""Filters read from copies blocked by the vector lanes (uopviz.nnef.kernel_passes.weight_layout): the
copy's values, the kernels that read it, and convolutions that still compute what numpy does
(strides, paddings, dilations, groups, depthwise; the AVX-512, AVX2 and SSE targets' lanes), with
the weights given by name or held by the graph."""

from __future__ import annotations

import numpy as np
import pytest
from conv_reference import conv_graph
from conv_reference import conv_reference as _reference
from cpu_targets import target_params

import uopviz as uv
from uopviz.backends.target import using_target
from uopviz.nnef.kernel_passes.weight_layout import WeightLayout
from uopviz.nnef.program.compile import compile_graph

RNG = np.random.default_rng(47)
VECTOR_BACKENDS = [name for name in ("c", "llvm") if name in uv.backends.available()]
# the lesser x86-64 levels (their lanes: 8 float32 on v3, 4 on v2), where this host runs their code
LEVELS = target_params("x86-64-v3", "x86-64-v2")


CASES = [
    # (channels in, out, size (h, w), kernel, stride, dilation, padding (top, left, bottom, right), groups)
    (8, 32, (7, 7), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
    (5, 16, (9, 8), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1),
    (32, 64, (6, 6), (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1),  # a gemm
    (16, 32, (8, 8), (3, 3), (1, 1), (2, 2), (2, 2, 2, 2), 4),  # grouped, dilated
    (8, 16, (6, 5), (5, 3), (1, 2), (1, 1), (2, 0, 1, 1), 2),
    (32, 32, (5, 6), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 32),  # depthwise
    (3, 12, (10, 10), (7, 7), (2, 2), (1, 1), (3, 3, 3, 3), 1),  # 12 channels: blocks of 4
    (6, 10, (5, 5), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),  # 10 channels: no block
]


def _case_id(case) -> str:
    return "-".join(map(str, case)).replace(" ", "")


def _data(case):
    cin, cout, size, kernel, _, _, _, groups = case
    x = RNG.standard_normal((1, cin, *size)).astype(np.float32)
    w = RNG.standard_normal((cout, cin // groups, *kernel)).astype(np.float32)
    b = RNG.standard_normal(cout).astype(np.float32)
    return x, w, b


LAYOUTS = [
    (shape, lanes)
    for shape in [(16, 3, 3, 3), (32, 1, 3, 3), (8, 5), (48, 2, 1, 1)]
    for lanes in (4, 8, 16)
    if shape[0] % lanes == 0  # the only layouts made: the lanes divide the output channels
]


@pytest.mark.parametrize(("shape", "lanes"), LAYOUTS)
def test_the_blocked_copy_puts_each_vector_of_output_channels_together(shape, lanes):
    array = RNG.standard_normal(shape).astype(np.float32)
    blocked = WeightLayout("w", shape, lanes).apply(array).reshape(shape[0] // lanes, *shape[1:], lanes)
    rest = int(np.prod(shape[1:]))
    for o in range(shape[0]):
        for position in range(rest):
            index = np.unravel_index(position, shape[1:])
            assert blocked[(o // lanes, *index, o % lanes)] == array[(o, *index)]


def _blocked_reads(program) -> list[str]:
    return [name for kernel in program.nnef_kernels for name in kernel.buffers if "#blocked" in name]


def _check(case, backend, lanes):
    cin, cout, size, kernel, stride, dilation, padding, groups = case
    x, w, b = _data(case)
    g = conv_graph(*case)
    out = g.run({"x": x, "w": w, "b": b}, backend=backend, opts="heuristic")["y"]
    expected = _reference(x, w, b, stride, dilation, padding, groups)
    np.testing.assert_allclose(out.reshape(expected.shape), expected, rtol=1e-4, atol=1e-4)
    reads = _blocked_reads(g.compile(backend, opts="heuristic"))
    # a register's lanes, else the widest power of two (at least 4) below them that divides cout
    widths = [width for width in (lanes, lanes // 2, lanes // 4) if width >= 4 and cout % width == 0]
    block = widths[0] if widths else None
    assert reads == ([f"w#blocked{block}"] if block else [])


@pytest.mark.parametrize("backend", VECTOR_BACKENDS)
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_convolutions_reading_blocked_filters_equal_numpy(case, backend):
    lanes = uv.backends.get(backend).register_bytes // 4
    _check(case, backend, lanes)


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("case", CASES[:1] + CASES[3:], ids=_case_id)
def test_the_lanes_follow_the_cpu_target(case, level):
    if "c" not in VECTOR_BACKENDS:
        pytest.skip("the C backend (a C compiler) is not available here")
    with using_target(level) as target:
        _check(case, "c", target.vector_bytes // 4)


def test_other_backends_read_the_filter_as_it_is():
    case = CASES[0]
    program = compile_graph(conv_graph(*case), "python")
    assert _blocked_reads(program) == []


@pytest.mark.parametrize("backend", VECTOR_BACKENDS)
def test_the_copy_follows_the_weights_of_each_run(backend):
    case = CASES[2]
    _, _, _, _, stride, dilation, padding, groups = case
    x, w, b = _data(case)
    g = conv_graph(*case)
    g.tensors["w"].data, g.tensors["b"].data = w, b

    def expect(out, weights):
        expected = _reference(x, weights, b, stride, dilation, padding, groups)
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)

    first = g.run({"x": x}, backend=backend, opts="heuristic")["y"]
    expect(first, w)
    given = RNG.standard_normal(w.shape).astype(np.float32)  # given by name: this run only
    expect(g.run({"x": x, "w": given}, backend=backend, opts="heuristic")["y"], given)
    np.testing.assert_array_equal(g.run({"x": x}, backend=backend, opts="heuristic")["y"], first)
    g.tensors["w"].data = replaced = -w  # new data for the variable: a new copy
    expect(g.run({"x": x}, backend=backend, opts="heuristic")["y"], replaced)
