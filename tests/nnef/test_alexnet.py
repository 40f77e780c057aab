"""The AlexNet of §2.1 of the NNEF 2.0 draft: as printed, its conv7 takes relu6 instead of flat1,
which must be reported as a located shape error; the corrected graph composes with the shapes
computed by hand here, loads from a model folder with .dat weights and runs like a numpy AlexNet."""

from __future__ import annotations

import numpy as np
import pytest

import uopviz as uv
from uopviz.nnef import NNEFError, load, write_tensor
from uopviz.nnef.composition.composer import compose

# ------------------------------------------------------------------------------------------------
# AlexNet (§2.1), as printed, from the example file the package ships (the benchmark and notebook 04
# read it too)

ALEXNET_FILE = uv.nnef.examples.path("alexnet")
ALEXNET = ALEXNET_FILE.read_text()
ALEXNET_FIXED = uv.nnef.examples.text("alexnet", fixed=True)


def _out(size: int, kernel: int, stride: int = 1, padding: int = 0) -> int:
    return (size + 2 * padding - kernel) // stride + 1


def test_alexnet_as_printed_reports_the_conv7_shape_error():
    with pytest.raises(NNEFError) as info:
        load(ALEXNET_FILE)
    error = info.value
    # line 53 of the file: "        conv7 = nn.linear(relu6, kernel7, bias7);", relu6 from column 27
    assert (error.file, error.line, error.column) == (str(ALEXNET_FILE), 53, 27)
    assert ALEXNET.splitlines()[52].index("relu6") == 26
    assert "shape mismatch: nn.linear input 'input' is declared real[b, c]" in error.message
    assert (
        "'relu6' has shape [1, 4096, 1, 1]" in error.message and "rank 4 where 2 is declared" in error.message
    )


def test_alexnet_fixed_composes_with_hand_computed_shapes():
    g = compose(ALEXNET_FIXED, file="alexnet.sknd")
    s1 = _out(224, 11, 4)  # 54
    p1 = _out(s1, 3, 2)  # 26
    s2 = _out(p1, 5, 1, 2)  # 26
    p2 = _out(s2, 3, 2)  # 12
    s3 = _out(p2, 3, 1, 1)  # 12
    p3 = _out(s3, 3, 2)  # 5
    s6 = _out(p3, 5)  # 1
    expected = {
        "conv1": (1, 64, s1, s1),
        "pool1": (1, 64, p1, p1),
        "conv2": (1, 192, s2, s2),
        "pool2": (1, 192, p2, p2),
        "conv3": (1, 384, s3, s3),
        "conv4": (1, 384, s3, s3),
        "conv5": (1, 256, s3, s3),
        "pool3": (1, 256, p3, p3),
        "conv6": (1, 4096, s6, s6),
        "flat1": (1, 4096 * s6 * s6),
        "conv7": (1, 4096),
        "conv8": (1, 1000),
        "output": (1, 1000),
    }
    assert (s1, p1, s2, p2, p3, s6) == (54, 26, 26, 12, 5, 1)
    for name, shape in expected.items():
        assert g.tensors[name].shape == shape, name
    assert g.inputs == ["input"] and g.outputs == ["output"]
    assert len(g.variables) == 16
    assert [op.type for op in g.operations].count("nn.conv") == 6
    assert g.operations[-1].scopes == ("output",)  # the softmax was expanded under its label
    batch4 = compose(ALEXNET_FIXED, attribs={"batch": 4, "classes": 10})
    assert batch4.tensors["output"].shape == (4, 10) and batch4.tensors["kernel8"].shape == (10, 4096)


def test_networkx_view_has_operations_tensors_and_shapes():
    g = compose(ALEXNET_FIXED)
    nx_graph = g.to_networkx()
    operations = [n for n, data in nx_graph.nodes(data=True) if data["kind"] == "operation"]
    assert len(operations) == len(g.operations)
    edge = next(data for _, _, data in nx_graph.edges(data=True) if data["tensor"] == "pool1")
    assert edge["shape"] == (1, 64, 26, 26)
    categories = {data["category"] for _, data in nx_graph.nodes(data=True) if data["kind"] == "operation"}
    assert categories == {"neural network", "layout", "math"}
    assert "operator conv {" in g.operations[0].definition_text()


def _conv(x, w, b, stride, padding):
    """NCHW convolution by sliding windows (numpy only)."""
    xp = np.pad(x, [(0, 0), (0, 0), (padding, padding), (padding, padding)])
    k = w.shape[2]
    windows = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))[:, :, ::stride, ::stride]
    return np.einsum("nchwij,ocij->nohw", windows, w, optimize=True) + b.reshape(1, -1, 1, 1)


def _max_pool(x):
    windows = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3))[:, :, ::2, ::2]
    return windows.max(axis=(4, 5))


def alexnet_reference(x, v):
    relu = lambda a: np.maximum(a, 0)  # noqa: E731
    h = _max_pool(relu(_conv(x, v["kernel1"], v["bias1"], 4, 0)))
    h = _max_pool(relu(_conv(h, v["kernel2"], v["bias2"], 1, 2)))
    h = relu(_conv(h, v["kernel3"], v["bias3"], 1, 1))
    h = relu(_conv(h, v["kernel4"], v["bias4"], 1, 1))
    h = _max_pool(relu(_conv(h, v["kernel5"], v["bias5"], 1, 1)))
    h = relu(_conv(h, v["kernel6"], v["bias6"], 1, 0)).reshape(x.shape[0], -1)
    h = relu(h @ v["kernel7"].T + v["bias7"])
    logits = h @ v["kernel8"].T + v["bias8"]
    e = np.exp(logits - logits.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


@pytest.fixture(scope="module")
def alexnet_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("alexnet")
    (root / "main.sknd").write_text(ALEXNET_FIXED)
    graph = compose(ALEXNET_FIXED)
    rng = np.random.default_rng(2024)
    weights = {}
    for name in graph.variables:
        shape = graph.tensors[name].shape
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        weights[name] = (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        write_tensor(root / f"{name}.dat", weights[name])
    return root, weights


def _run_and_compare(folder, weights, backend):
    graph = load(folder)
    assert all(graph.tensors[name].data is not None for name in graph.variables)
    x = np.random.default_rng(5).standard_normal((1, 3, 224, 224)).astype(np.float32)
    out = graph.run({"input": x}, backend=backend)["output"]
    expected = alexnet_reference(x, weights)
    assert out.shape == (1, 1000)
    np.testing.assert_allclose(out, expected, rtol=2e-3, atol=1e-6)
    assert abs(float(out.sum()) - 1.0) < 1e-4


@pytest.mark.skipif("c" not in uv.backends.available(), reason="no C compiler on this machine")
def test_alexnet_runs_on_the_c_backend_like_numpy(alexnet_folder):
    _run_and_compare(*alexnet_folder, "c")


@pytest.mark.slow
def test_alexnet_runs_on_the_python_backend_like_numpy(alexnet_folder):
    _run_and_compare(*alexnet_folder, "python")


def test_alexnet_kernels_are_tunable_pipeline_kernels():
    graph = compose(ALEXNET_FIXED)
    conv1 = graph.operations[0]
    (kernel,) = graph.kernels(conv1)
    assert isinstance(kernel, uv.Kernel)
    sizes = [size for size, _ in kernel.axes]
    assert sorted(sizes) == sorted([64, 54, 54, 3, 11, 11])  # n, oh, ow (b = 1 drops); c, kh, kw reduced
    reduce_axes = [size for size, axis_type in kernel.axes if axis_type.is_reduce]
    assert sorted(reduce_axes) == [3, 11, 11]
    upcast = kernel.apply(uv.Opt(uv.OptOp.SPLIT, axis=len(sizes) - 4, arg=(2, uv.AxisType.UPCAST, False)))
    assert (2, uv.AxisType.UPCAST) in upcast.axes
    volume = lambda axes: int(np.prod([size for size, _ in axes]))  # noqa: E731
    assert volume(upcast.axes) == volume(kernel.axes)
