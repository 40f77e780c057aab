"""Convolutions reading a zero-padded copy of their input (uopviz.nnef.kernel_passes.padding): the same
results as numpy for paddings, strides, dilations and groups, and the conv kernel left without bounds
tests."""

from __future__ import annotations

import numpy as np
import pytest
from conv_reference import conv_graph
from conv_reference import conv_reference as _reference

import uopviz as uv
from uopviz.core.ops import Ops
from uopviz.nnef.composition.composer import compose
from uopviz.nnef.program.compile import compile_graph
from uopviz.nnef.program.runtime import program_inputs

RNG = np.random.default_rng(31)
BACKENDS = [name for name in ("python", "c", "llvm", "opencl") if name in uv.backends.available()]


CASES = [
    # (channels in, out, size (h, w), kernel, stride, dilation, padding (top, left, bottom, right), groups)
    (3, 4, (7, 7), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
    (2, 4, (9, 8), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1),
    (4, 4, (8, 8), (3, 3), (1, 1), (2, 2), (2, 2, 2, 2), 2),
    (4, 8, (6, 5), (5, 3), (1, 2), (1, 1), (2, 0, 1, 1), 4),
    (1, 2, (10, 10), (7, 7), (2, 2), (1, 1), (3, 3, 3, 3), 1),
    (6, 6, (5, 6), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 6),  # depthwise
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES, ids=lambda case: "-".join(map(str, case)).replace(" ", ""))
def test_padded_conv_equals_numpy(case, backend):
    cin, cout, size, kernel, stride, dilation, padding, groups = case
    g = conv_graph(*case)
    x = RNG.standard_normal((1, cin, *size)).astype(np.float32)
    w = RNG.standard_normal((cout, cin // groups, *kernel)).astype(np.float32)
    b = RNG.standard_normal(cout).astype(np.float32)
    program = compile_graph(g, backend)
    given = {"x": x, "w": w, "b": b}
    out = dict(zip(program.nnef_outputs, program.run(program_inputs(g, program, given))))
    expected = _reference(x, w, b, stride, dilation, padding, groups)
    np.testing.assert_allclose(out["y"].reshape(expected.shape), expected, rtol=1e-4, atol=1e-4)
    names = [kernel.name for kernel in program.nnef_kernels]
    assert names[0].startswith("pad_") and len(names) == 2
    conv = program.nnef_kernels[1]
    # the sum reads the padded copy without gates: no gated load, no select left in it
    assert not any(u.op is Ops.LOAD and len(u.src) == 3 for u in conv.ast.toposort())
    assert not any(u.op is Ops.WHERE for u in conv.ast.toposort())
    assert any(name.startswith("x#pad") for name in conv.buffers)


def test_unpadded_conv_gets_no_pad_kernel():
    g = conv_graph(2, 2, (5, 5), (3, 3), (1, 1), (1, 1), (0, 0, 0, 0), 1)
    program = compile_graph(g, BACKENDS[-1])
    assert [kernel.name for kernel in program.nnef_kernels] == ["y"]


def test_two_convs_of_one_input_share_the_padded_copy():
    g = compose(
        """import nn; import math;
graph Two {
    @input { x: real[1, 2, 6, 6]; }
    @output { y: real; }
    @variable { w1: real[2, 2, 3, 3]; w2: real[2, 2, 3, 3]; }
    @compose {
        a = nn.conv{padding=1}(x, w1);
        c = nn.conv{padding=1}(x, w2);
        y = math.add(a, c);
    }
}"""
    )
    x = RNG.standard_normal((1, 2, 6, 6)).astype(np.float32)
    w1, w2 = (RNG.standard_normal((2, 2, 3, 3)).astype(np.float32) for _ in range(2))
    program = compile_graph(g, BACKENDS[-1])
    given = {"x": x, "w1": w1, "w2": w2}
    out = dict(zip(program.nnef_outputs, program.run(program_inputs(g, program, given))))
    zero = np.zeros(2, np.float32)
    expected = sum(_reference(x, w, zero, (1, 1), (1, 1), (1, 1, 1, 1), 1) for w in (w1, w2))
    np.testing.assert_allclose(out["y"].reshape(expected.shape), expected, rtol=1e-4, atol=1e-4)
    assert sum(kernel.name.startswith("pad_") for kernel in program.nnef_kernels) == 1


@pytest.mark.skipif(
    "c" not in uv.backends.available(), reason="the heuristic's CPU register tiles need the C backend"
)
@pytest.mark.parametrize("width", [14, 7])
def test_heuristic_tiles_odd_width_convs_with_power_of_two_vectors(width):
    # no power of two divides 14 or 7: the tile takes 7 columns, and the channels' lanes go inside
    g = conv_graph(32, 32, (width, width), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1)
    x = RNG.standard_normal((1, 32, width, width)).astype(np.float32)
    w = RNG.standard_normal((32, 32, 3, 3)).astype(np.float32)
    b = RNG.standard_normal(32).astype(np.float32)
    program = compile_graph(g, "c", opts="heuristic")
    given = {"x": x, "w": w, "b": b}
    out = dict(zip(program.nnef_outputs, program.run(program_inputs(g, program, given))))
    expected = _reference(x, w, b, (1, 1), (1, 1), (1, 1, 1, 1), 1)
    np.testing.assert_allclose(out["y"].reshape(expected.shape), expected, rtol=1e-4, atol=1e-4)
    conv = program.kernels[-1]
    upcasts = [size for size, kind in conv.axes if kind is uv.AxisType.UPCAST]
    assert len(upcasts) == 2 and upcasts[0] == 7
    assert upcasts[1] > 1 and upcasts[1] & (upcasts[1] - 1) == 0




@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("size", "stride", "padding"), [(3, 2, (1, 1, 1, 1)), (2, 1, (0, 0, 1, 1)), (3, 1, (2, 1, 0, 2))]
)
def test_max_pool_reads_a_copy_padded_with_minus_infinity(size, stride, padding, backend):
    top, left, bottom, right = padding
    g = compose(
        f"""import nn;
graph Pool {{
    @input {{ x: real[1, 3, 7, 6]; }}
    @output {{ y: real; }}
    @compose {{
        y = nn.max_pool{{size=[{size}, {size}], stride=[{stride}, {stride}],
                         padding=[{top}, {left}, {bottom}, {right}]}}(x);
    }}
}}"""
    )
    x = RNG.standard_normal((1, 3, 7, 6)).astype(np.float32) - 5  # all negative: a 0 padding would show
    program = compile_graph(g, backend)
    out = program.run(dict(enumerate([x])))[0]
    xp = np.pad(x, [(0, 0), (0, 0), (top, bottom), (left, right)], constant_values=-np.inf)
    rows = (xp.shape[2] - size) // stride + 1
    columns = (xp.shape[3] - size) // stride + 1
    windows = np.lib.stride_tricks.sliding_window_view(xp, (size, size), axis=(2, 3))
    expected = windows[:, :, ::stride, ::stride].max(axis=(4, 5))[:, :, :rows, :columns]
    np.testing.assert_array_equal(out.reshape(expected.shape), expected)
    names = [kernel.name for kernel in program.nnef_kernels]
    assert names == ["pad_x", "y"] and program.nnef_kernels[0].buffers[0].endswith("#-inf")
    assert not any(u.op is Ops.LOAD and len(u.src) == 3 for u in program.nnef_kernels[1].ast.toposort())


IN_PLACE_CASES = [
    # (channels, size (h, w), kernel, stride, padding (top, left, bottom, right), then: "conv" | "pool")
    (4, (9, 8), (3, 3), (2, 2), (0, 0, 1, 1), "conv"),  # MobileNet-v2's stride-2 depthwise
    (3, (6, 7), (3, 3), (1, 1), (1, 1, 1, 1), "conv"),
    (2, (5, 5), (5, 3), (1, 2), (2, 0, 1, 1), "conv"),
    (3, (7, 6), (3, 3), (2, 2), (1, 1, 1, 1), "pool"),  # ResNet's stem max pool: -inf border
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", IN_PLACE_CASES, ids=lambda case: "-".join(map(str, case)).replace(" ", ""))
def test_a_tensor_read_only_through_its_padding_is_written_in_place(case, backend):
    # a 1x1 conv + relu feeding a padded depthwise conv (or max pool) only: the producer writes the
    # interior of the padded buffer and border kernels fill the rest; no copy, same values
    channels, (h, w), kernel, stride, padding, then = case
    top, left, bottom, right = padding
    if then == "conv":
        second = (f"nn.conv{{stride=[{stride[0]}, {stride[1]}], padding=[{top}, {left}, {bottom}, {right}], "
                  f"groups={channels}}}(r, w2, b2)")
    else:
        second = (f"nn.max_pool{{size=[{kernel[0]}, {kernel[1]}], stride=[{stride[0]}, {stride[1]}], "
                  f"padding=[{top}, {left}, {bottom}, {right}]}}(r)")
    g = compose(
        f"""import nn;
graph InPlace {{
    @input {{ x: real[1, {channels}, {h}, {w}]; }}
    @output {{ y: real; }}
    @variable {{ w1: real[{channels}, {channels}, 1, 1]; b1: real[{channels}];
                w2: real[{channels}, 1, {kernel[0]}, {kernel[1]}]; b2: real[{channels}]; }}
    @compose {{ c = nn.conv(x, w1, b1); r = nn.relu(c); y = {second}; }}
}}"""
    )
    given = {
        "x": RNG.standard_normal((1, channels, h, w)).astype(np.float32),
        "w1": RNG.standard_normal((channels, channels, 1, 1)).astype(np.float32),
        "b1": RNG.standard_normal(channels).astype(np.float32),
        "w2": RNG.standard_normal((channels, 1, *kernel)).astype(np.float32),
        "b2": RNG.standard_normal(channels).astype(np.float32),
    }
    r = np.maximum(_reference(given["x"], given["w1"], given["b1"], (1, 1), (1, 1), (0, 0, 0, 0), 1), 0)
    r = r.astype(np.float32)
    if then == "conv":
        expected = _reference(r, given["w2"], given["b2"], stride, (1, 1), padding, channels)
    else:
        rp = np.pad(r, [(0, 0), (0, 0), (top, bottom), (left, right)], constant_values=-np.inf)
        windows = np.lib.stride_tricks.sliding_window_view(rp, kernel, axis=(2, 3))
        expected = windows[:, :, :: stride[0], :: stride[1]].max(axis=(4, 5))
    program = compile_graph(g, backend)
    out = dict(zip(program.nnef_outputs, program.run(program_inputs(g, program, given))))["y"]
    np.testing.assert_allclose(out.reshape(expected.shape), expected, rtol=1e-4, atol=1e-4)
    kernels = program.nnef_kernels
    names = [kernel.name for kernel in kernels]
    assert not any(name.startswith("pad_") for name in names), names
    borders = [kernel for kernel in kernels if kernel.name.startswith("border_")]
    writers = [kernel for kernel in kernels if kernel.buffers[0].startswith("r#pad")]
    producer = next(kernel for kernel in writers if kernel not in borders)
    assert borders and all(kernel.buffers == [producer.buffers[0]] for kernel in borders)
    # one border kernel per padded axis whose two sides are equally deep, else one per padded side
    # (the padding each side needs, as the buffer's name gives it: r#pad<low>-<high>_... per axis)
    pads = producer.buffers[0].split("#pad")[1].split("#")[0].split("_")
    sides = [tuple(int(depth) for depth in pad.split("-")) for pad in pads]
    border_count = sum(1 if low == high else (low > 0) + (high > 0) for low, high in sides if low or high)
    assert len(borders) == border_count, [kernel.note for kernel in borders]
    # the borders come first, then the producer, then its reader; the tensor itself is never stored
    assert names.index(producer.name) > max(names.index(kernel.name) for kernel in borders)
    assert not any(kernel.buffers[0] == "r" for kernel in kernels)
    if then == "pool":
        assert producer.buffers[0].endswith("#-inf")


def test_a_tensor_read_besides_its_padding_keeps_the_copy():
    # r is read by the padded conv and by the residual add: it is stored, and copied for the conv
    g = compose(
        """import nn; import math;
graph Residual {
    @input { x: real[1, 2, 5, 5]; }
    @output { y: real; }
    @variable { w1: real[2, 2, 1, 1]; b1: real[2]; w2: real[2, 2, 3, 3]; b2: real[2]; }
    @compose {
        c = nn.conv(x, w1, b1); r = nn.relu(c); d = nn.conv{padding=1}(r, w2, b2); y = math.add(d, r);
    }
}"""
    )
    program = compile_graph(g, BACKENDS[-1])
    names = [kernel.name for kernel in program.nnef_kernels]
    assert "pad_r" in names and not any(name.startswith("border_") for name in names)
