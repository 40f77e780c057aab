"""NNEF 1.0 folders (graph.nnef + .dat weights written here) loaded through the ``nnef`` package's
parser onto the SkriptND graph model, run, and compared with numpy; shapes are compared with the
``nnef`` package's own shape inference."""

from __future__ import annotations

from pathlib import Path

import nnef
import numpy as np
import pytest

from uopviz.backends import available
from uopviz.nnef import NNEFError, load, write_tensor
from uopviz.nnef.nnef1.loader import SUPPORTED, loads_nnef1

RNG = np.random.default_rng(11)


def real(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def write_folder(root: Path, text: str, weights: dict[str, np.ndarray]) -> Path:
    root.mkdir(parents=True)
    (root / "graph.nnef").write_text(text)
    for label, array in weights.items():
        path = root / f"{label}.dat"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_tensor(path, array)
    return root


def shapes_by_nnef(text: str) -> dict[str, list[int]]:
    graph = nnef.parse_string(text)
    nnef.infer_shapes(graph)
    return {name: list(tensor.shape) for name, tensor in graph.tensors.items()}


def conv2d(x, w, stride, before, after):
    xp = np.pad(x, [(0, 0), (0, 0), (before[0], after[0]), (before[1], after[1])])
    kh, kw = w.shape[2:]
    oh = (xp.shape[2] - kh) // stride + 1
    ow = (xp.shape[3] - kw) // stride + 1
    out = np.zeros((x.shape[0], w.shape[0], oh, ow), np.float64)
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, :, i * stride : i * stride + kh, j * stride : j * stride + kw]
            out[:, :, i, j] = np.einsum("nchw,ochw->no", patch, w)
    return out


CNN = """
version 1.0;

graph Small( input ) -> ( probabilities, features )
{
    input = external<scalar>(shape = [2, 3, 9, 9]);
    kernel = variable<scalar>(shape = [8, 3, 3, 3], label = 'conv1/kernel');
    bias = variable<scalar>(shape = [1, 8], label = 'conv1/bias');
    mean = variable<scalar>(shape = [1, 8], label = 'bn/mean');
    variance = variable<scalar>(shape = [1, 8], label = 'bn/variance');
    weights = variable<scalar>(shape = [5, 72], label = 'fc/weights');
    fc_bias = variable<scalar>(shape = [1, 5], label = 'fc/bias');
    conv = conv(input, kernel, bias, stride = [2, 2]);
    norm = batch_normalization(conv, mean, variance, 0.0, 1.0, epsilon = 0.001);
    act = leaky_relu(norm, alpha = 0.2);
    pool = max_pool(act, size = [1, 1, 3, 3], stride = [1, 1, 2, 2], border = 'ignore');
    flat = reshape(pool, shape = [0, -1]);
    [left, right] = split(flat, axis = 1, ratios = [1, 1]);
    features = concat([right, left], axis = 1);
    logits = linear(features, weights, fc_bias);
    probabilities = softmax(logits, axes = [1]);
}
"""


def test_a_small_cnn_folder_runs_like_numpy(tmp_path):
    weights = {
        "conv1/kernel": real(8, 3, 3, 3),
        "conv1/bias": real(1, 8),
        "bn/mean": real(1, 8),
        "bn/variance": (RNG.random((1, 8)) + 0.5).astype(np.float32),
        "fc/weights": real(5, 72),
        "fc/bias": real(1, 5),
    }
    folder = write_folder(tmp_path / "small", CNN, weights)
    graph = load(folder)
    expected_shapes = shapes_by_nnef(CNN)
    for name in ("conv", "pool", "flat", "features", "logits", "probabilities"):
        assert list(graph.tensors[name].shape) == expected_shapes[name], name
    x = real(2, 3, 9, 9)
    out = graph.run({"input": x})
    # 'same' padding of NNEF 1.0: output ceil(9 / 2) = 5, total padding 2
    conv = conv2d(x, weights["conv1/kernel"], 2, (1, 1), (1, 1)) + weights["conv1/bias"].reshape(1, 8, 1, 1)
    norm = (conv - weights["bn/mean"].reshape(1, 8, 1, 1)) / np.sqrt(
        weights["bn/variance"].reshape(1, 8, 1, 1) + 1e-3
    )
    act = np.where(norm < 0, 0.2 * norm, norm)
    padded = np.pad(act, [(0, 0), (0, 0), (1, 1), (1, 1)], constant_values=-np.inf)  # ceil(5 / 2) = 3
    pool = np.stack(
        [
            np.stack([padded[:, :, 2 * i : 2 * i + 3, 2 * j : 2 * j + 3].max((2, 3)) for j in range(3)], -1)
            for i in range(3)
        ],
        -2,
    )
    flat = pool.reshape(2, -1)
    features = np.concatenate([flat[:, 36:], flat[:, :36]], 1)
    logits = features @ weights["fc/weights"].T + weights["fc/bias"]
    e = np.exp(logits - logits.max(1, keepdims=True))
    np.testing.assert_allclose(out["features"], features, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out["probabilities"], e / e.sum(1, keepdims=True), rtol=1e-4, atol=1e-5)


ELEMENTWISE = """
version 1.0;

graph Mixed( x, y, c ) -> ( a, b, d, e, f, g, h, k, m, n, p, q )
{
    x = external<scalar>(shape = [2, 3, 4]);
    y = external<scalar>(shape = [2, 3]);
    c = external<logical>(shape = [2, 3, 4]);
    alpha = constant<scalar>(shape = [1, 3], value = [0.1, 0.2, 0.3]);
    a = add(x, y);
    b = prelu(x, alpha);
    d = select(c, x, 0.5);
    e = clamp(x, -0.5, 0.5);
    f = sum_reduce(x, axes = [1, 2], normalize = true);
    g = slice(x, axes = [1, 2], begin = [1, -3], end = [0, -1]);
    h = pad(y, padding = [(1, 0), (2, 1)], border = 'reflect');
    k = tile(y, repeats = [2, 1]);
    m = transpose(x, axes = [2, 0, 1]);
    n = l2_normalization(x, axes = [2], epsilon = 1e-6);
    p = max_reduce(x, axes = [0]);
    q = argmax_reduce(x, axes = [2]);
}
"""


def test_elementwise_and_layout_operations_follow_nnef1_semantics():
    graph = loads_nnef1(ELEMENTWISE)
    expected_shapes = shapes_by_nnef(ELEMENTWISE)
    for name in "abdefghkmnpq":
        assert list(graph.tensors[name].shape) == expected_shapes[name], name
    x, y, c = real(2, 3, 4), real(2, 3), RNG.integers(0, 2, (2, 3, 4)).astype(bool)
    out = graph.run({"x": x, "y": y, "c": c})
    alpha = np.array([0.1, 0.2, 0.3], np.float32).reshape(1, 3, 1)
    checks = {
        "a": x + y[:, :, None],  # NNEF 1.0 broadcasting aligns to the left
        "b": np.where(x < 0, alpha * x, x),
        "d": np.where(c, x, 0.5),
        "e": np.clip(x, -0.5, 0.5),
        "f": x.mean((1, 2), keepdims=True),
        "g": x[:, 1:, 1:3],
        "h": np.pad(y, [(1, 0), (2, 1)], "reflect"),
        "k": np.tile(y, (2, 1)),
        "m": x.transpose(2, 0, 1),
        "n": x / np.maximum(np.sqrt((x * x).sum(2, keepdims=True)), 1e-6),
        "p": x.max(0, keepdims=True),
        "q": x.argmax(2)[:, :, None].astype(np.int32),
    }
    for name, value in checks.items():
        np.testing.assert_allclose(out[name], value, rtol=1e-5, atol=1e-5, err_msg=name)


POOLS = """
version 1.0;

graph Pools( x ) -> ( avg_constant, avg_ignore, up, down, deconvolved )
{
    x = external<scalar>(shape = [1, 2, 5, 5]);
    filter = variable<scalar>(shape = [2, 3, 2, 2], label = 'filter');
    avg_constant = avg_pool(x, size = [1, 1, 3, 3], stride = [1, 1, 2, 2],
                            padding = [(0,0), (0,0), (1,1), (1,1)],
                            border = 'constant');
    avg_ignore = avg_pool(x, size = [1, 1, 3, 3], stride = [1, 1, 2, 2],
                            padding = [(0,0), (0,0), (1,1), (1,1)],
                          border = 'ignore');
    up = nearest_upsample(x, factor = [2, 3]);
    down = area_downsample(up, factor = [2, 3]);
    deconvolved = deconv(x, filter, 0.0, stride = [2, 2]);
}
"""


def test_pooling_borders_sampling_and_deconvolution():
    weights = {"filter": real(2, 3, 2, 2)}
    graph = loads_nnef1(POOLS, weights)
    expected_shapes = shapes_by_nnef(POOLS)
    for name in ("avg_constant", "avg_ignore", "up", "down", "deconvolved"):
        assert list(graph.tensors[name].shape) == expected_shapes[name], name
    x = real(1, 2, 5, 5)
    out = graph.run({"x": x})
    padded = np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)])
    ones = np.pad(np.ones_like(x), [(0, 0), (0, 0), (1, 1), (1, 1)])
    windows = lambda a: np.stack(
        [
            np.stack(
                [
                    a[:, :, 2 * i : 2 * i + 3, 2 * j : 2 * j + 3].sum((2, 3))  # noqa: E731
                    for j in range(3)
                ],
                -1,
            )
            for i in range(3)
        ],
        -2,
    )
    np.testing.assert_allclose(out["avg_constant"], windows(padded) / 9, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["avg_ignore"], windows(padded) / windows(ones), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["up"], x.repeat(2, 2).repeat(3, 3))
    np.testing.assert_allclose(out["down"], x, rtol=1e-5, atol=1e-6)
    w = weights["filter"]
    expected = np.zeros((1, 3, 10, 10), np.float32)
    for i in range(5):
        for j in range(5):
            expected[0, :, 2 * i : 2 * i + 2, 2 * j : 2 * j + 2] += np.einsum("c,cokl->okl", x[0, :, i, j], w)
    np.testing.assert_allclose(out["deconvolved"], expected, rtol=1e-4, atol=1e-5)


def test_keyword_tensor_names_survive():
    text = (
        "version 1.0;\ngraph G( real ) -> ( int )\n{\n  real = external<scalar>(shape = [3]);\n"
        "  int = neg(real);\n}\n"
    )
    graph = loads_nnef1(text)
    assert graph.inputs == ["real"] and graph.outputs == ["int"]
    x = real(3)
    np.testing.assert_allclose(graph.run({"real": x})["int"], -x)


@pytest.mark.parametrize("backend", [b for b in ("python", "c", "llvm", "opencl") if b in available()])
def test_zero_size_inputs_run_to_empty_outputs_of_their_shape(backend):
    # issue 21 item 5: `shape = [0]` loaded, then Graph.run raised ValueError (a buffer of 1 element)
    text = ("version 1.0; graph G( x, w ) -> ( y, s, z ) { x = external(shape = [0, 3]); "
            "w = external(shape = [3, 2]); y = relu(x); s = sum_reduce(x, axes = [0]); z = matmul(x, w); }")
    graph = loads_nnef1(text)
    x, w = real(0, 3), real(3, 2)
    outputs = graph.run({"x": x, "w": w}, backend=backend)
    assert outputs["y"].shape == (0, 3) and outputs["z"].shape == (0, 2)
    np.testing.assert_array_equal(outputs["s"], x.sum(0, keepdims=True))
    assert outputs["s"].shape == tuple(shapes_by_nnef(text)["s"]) == (1, 3)


def test_nnef1_errors_are_nnef_errors(tmp_path):
    with pytest.raises(NNEFError, match="NNEF 1.0"):
        loads_nnef1("version 1.0;\ngraph G( x ) -> ( y ) { x = external(shape = [2]); y = nosuch(x); }")
    text = (
        "version 1.0;\ngraph G( x ) -> ( y )\n{\n  x = external<scalar>(shape = [1, 2, 4]);\n"
        "  y = multilinear_upsample(x, factor = [2], method = 'cubic');\n}\n"
    )
    with pytest.raises(NNEFError, match="unknown method 'cubic'"):
        loads_nnef1(text)
    assert "conv" in SUPPORTED and "batch_normalization" in SUPPORTED
    folder = write_folder(tmp_path / "broken", CNN, {"conv1/kernel": real(8, 3, 3, 3)})
    graph = load(folder)  # the other variables have no file: they must be given at run time
    with pytest.raises(NNEFError, match="variable 'bias' has no data"):
        graph.run({"input": real(2, 3, 9, 9)})
    write_tensor(folder / "conv1" / "bias.dat", real(8))
    with pytest.raises(
        NNEFError, match=r"variable 'bias' \(label '[^']*'\) is declared with shape \[1, 8\], but its data "
        r"file holds shape \[8\]"
    ) as caught:
        load(folder)
    assert caught.value.file == str((folder / "conv1" / "bias.dat").resolve())
