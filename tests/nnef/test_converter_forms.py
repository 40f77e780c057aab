"""NNEF 1.0 as converters write it (Khronos' nnef-tools from ONNX): one ``variable`` per tensor with
its own ``.dat``, ``conv`` without a bias argument and with explicit stride / dilation / groups,
``batch_normalization`` as its own operation, ``add_n`` residual sums, ``max_pool`` with
``border = 'ignore'``, ``linear``, ``reshape``, a ReLU6's bound as a scalar variable, a bias given
as a scalar variable, parameters computed from variables (``abs(v)``, ``add(s, 1.0)``).

Each converter-spelled network runs like numpy and compiles to as many kernels as the same network
spelled as the zoo writes it (``benchmarks/zoo.py``: literals, ``[1, C]`` parameters, ``add``);
where the two spellings mean the same values, to the same generated sources
(:mod:`uopviz.nnef.model.canonical`).  The 1.0 forms rewritten before translation
(:mod:`uopviz.nnef.nnef1.canonical`: a zero ``pad`` before a conv, a Dropout's ``copy``, a pooling
over the whole image) compile to the sources of the plain form.  The ``nnef_tools`` tests convert
ONNX models (the zoo's ResNet-50 and MobileNet-v2, small ONNX graphs) with nnef-tools itself, run
in the Python UOPVIZ_NNEF_TOOLS_PYTHON names, and are skipped, with the reason, where it is not
installed."""

from __future__ import annotations

import linecache
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

import uopviz as uv
from uopviz.nnef import NNEFError, read_tensor, write_tensor

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import zoo  # noqa: E402

C = 8  # channels
HEAD = """version 1.0;

graph G( external1 ) -> ( softmax1 )
{{
    external1 = external<scalar>(shape = [{batch}, 4, {size}, {size}]);
{variables}
"""

# the converter's spelling: conv without bias, parameters as expressions of variables, relu6's bound
# a scalar variable, a scalar bias, add_n, max_pool border 'ignore', reshape and linear
CONVERTER = """
    conv1 = conv(external1, variable1, stride = [1, 1], dilation = [1, 1], padding = [(1, 1), (1, 1)], groups = 1);
    abs1 = abs(variable3);
    add1 = add(variable5, 1.0);
    batch_normalization1 = batch_normalization(conv1, variable2, abs1, variable4, add1, epsilon = 1e-05);
    clamp1 = clamp(batch_normalization1, 0.0, variable12);
    max_pool1 = max_pool(clamp1, size = [1, 1, 3, 3], stride = [1, 1, 2, 2], dilation = [1, 1, 1, 1], padding = [(0, 0), (0, 0), (1, 1), (1, 1)], border = 'ignore');
    conv2 = conv(max_pool1, variable6, {bias2}, stride = [1, 1], dilation = [1, 1], padding = [(1, 1), (1, 1)], groups = 1);
    batch_normalization2 = batch_normalization(conv2, variable7, variable8, variable9, variable10, epsilon = 1e-05);
    add_n1 = add_n([batch_normalization2, max_pool1]);
    relu1 = relu(add_n1);
    mean_reduce1 = mean_reduce(relu1, axes = [2, 3]);
    reshape1 = reshape(mean_reduce1, shape = [0, -1]);
    linear1 = linear(reshape1, variable11, variable14);
    softmax1 = softmax(linear1, axes = [1]);
}}
"""  # noqa: E501 - one converter line per operation, as the converter writes them

# the same network as the zoo writes it: the parameters' values in the files, literals, add
ZOO = """
    conv1 = conv(external1, variable1, 0.0, padding = [(1, 1), (1, 1)], stride = [1, 1], groups = 1);
    batch_normalization1 = batch_normalization(conv1, variable2, variable3, variable4, variable5, epsilon = 1e-05);
    clamp1 = clamp(batch_normalization1, 0.0, 6.0);
    max_pool1 = max_pool(clamp1, size = [1, 1, 3, 3], stride = [1, 1, 2, 2], padding = [(0, 0), (0, 0), (1, 1), (1, 1)], border = 'ignore');
    conv2 = conv(max_pool1, variable6, {bias2}, padding = [(1, 1), (1, 1)], stride = [1, 1], groups = 1);
    batch_normalization2 = batch_normalization(conv2, variable7, variable8, variable9, variable10, epsilon = 1e-05);
    add_n1 = add(batch_normalization2, max_pool1);
    relu1 = relu(add_n1);
    mean_reduce1 = mean_reduce(relu1, axes = [2, 3]);
    reshape1 = reshape(mean_reduce1, shape = [0, -1]);
    linear1 = linear(reshape1, variable11, variable14);
    softmax1 = softmax(linear1, axes = [1]);
}}
"""  # noqa: E501


def _weights(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def normal(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(np.float32)

    def around(*shape: int, low: float = -0.1, high: float = 0.1) -> np.ndarray:
        return rng.uniform(low, high, shape).astype(np.float32)

    return {
        "variable1": normal(C, 4, 3, 3), "variable2": around(1, C),
        "variable3": around(1, C, low=-1.5, high=-0.5),  # negative: the converter's file takes abs()
        "variable4": around(1, C), "variable5": around(1, C, low=-0.5, high=0.5),
        "variable6": normal(C, C, 3, 3),
        "variable7": around(1, C), "variable8": around(1, C, low=0.5, high=1.5), "variable9": around(1, C),
        "variable10": around(1, C, low=0.5, high=1.5), "variable11": normal(5, C),
        "variable12": np.array(6.0, np.float32), "variable13": np.array(0.25, np.float32),
        "variable14": around(1, 5),
    }  # fmt: skip


def _zoo_weights(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The values the converter's expressions compute, as the zoo's files hold them."""
    zoo_weights = {name: value for name, value in weights.items() if name not in ("variable12", "variable13")}
    zoo_weights["variable3"] = np.abs(weights["variable3"])
    zoo_weights["variable5"] = weights["variable5"] + np.float32(1.0)
    return zoo_weights


def _folder(root: Path, body: str, weights: dict[str, np.ndarray], size: int, batch: int, bias2: str) -> Path:
    declared = "\n".join(
        f"    {name} = variable<scalar>(shape = {list(value.shape)}, label = '{name}');"
        for name, value in weights.items()
    )
    root.mkdir(parents=True)
    head = HEAD.format(batch=batch, size=size, variables=declared)
    (root / "graph.nnef").write_text(head + body.format(bias2=bias2))
    for name, value in weights.items():
        write_tensor(root / f"{name}.dat", value)  # one .dat per tensor, as the converter writes them
    return root


def _rendered(folder: Path):
    """The C program of a folder, rendered (not compiled)."""
    return uv.nnef.load(folder).compile(backend="c", opts="heuristic", build=False)


def _reference(x: np.ndarray, w: dict[str, np.ndarray]) -> np.ndarray:
    """The network in float64 numpy, from the converter's variables."""
    w = {name: value.astype(np.float64) for name, value in w.items()}
    channel = lambda value: value.reshape(1, -1, 1, 1)  # noqa: E731

    def batch_norm(y, mean, variance, offset, scale):
        return (y - channel(mean)) / np.sqrt(channel(variance) + 1e-5) * channel(scale) + channel(offset)

    y = zoo._np_conv(x.astype(np.float64), w["variable1"], 1, 1, 1)
    y = batch_norm(y, w["variable2"], np.abs(w["variable3"]), w["variable4"], w["variable5"] + 1.0)
    pooled = zoo._np_pool(np.clip(y, 0.0, w["variable12"]), "max_pool", 3, 2, 1)
    y = zoo._np_conv(pooled, w["variable6"], 1, 1, 1) + w["variable13"]
    y = batch_norm(y, w["variable7"], w["variable8"], w["variable9"], w["variable10"])
    features = np.maximum(y + pooled, 0.0).mean(axis=(2, 3))
    return zoo._np_softmax(features @ w["variable11"].T + w["variable14"])


@pytest.mark.parametrize(("size", "batch", "seed"), [(12, 1, 0), (9, 2, 3)])
def test_the_converters_spelling_runs_like_numpy(tmp_path, size, batch, seed):
    weights = _weights(seed)
    graph = uv.nnef.load(_folder(tmp_path / "converted", CONVERTER, weights, size, batch, "variable13"))
    backend = "c" if "c" in uv.backends.available() else "python"
    for input_seed in (1, 2):
        x = np.random.default_rng(input_seed).standard_normal((batch, 4, size, size)).astype(np.float32)
        out = graph.run({"external1": x}, backend=backend)["softmax1"]
        np.testing.assert_allclose(out, _reference(x, weights), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(("size", "batch"), [(12, 1), (9, 2)])
def test_the_converters_spelling_compiles_to_the_zoos_kernels(tmp_path, size, batch):
    """The parameter expressions and the scalar bound fold at load: the same kernels, the same
    sources as the zoo's spelling of the same values (both with the literal bias 0.25 of conv2)."""
    weights = _weights(1)
    converted = _folder(tmp_path / "converted", CONVERTER, weights, size, batch, "0.25")
    ours = _folder(tmp_path / "zoo", ZOO, _zoo_weights(weights), size, batch, "0.25")
    programs = [_rendered(folder) for folder in (converted, ours)]
    assert [k.name for k in programs[0].kernels] == [k.name for k in programs[1].kernels]
    assert programs[0].sources == programs[1].sources


def test_a_scalar_bias_variable_costs_no_kernel_of_its_own(tmp_path):
    """A bias given as a scalar variable (reshaped and tiled to the channels) folds at load: as many
    kernels as a [1, C] bias variable."""
    weights = _weights(2)
    zoo_weights = {**_zoo_weights(weights), "variable13": np.full((1, C), 0.25, np.float32)}
    converted = _folder(tmp_path / "converted", CONVERTER, weights, 12, 1, "variable13")
    ours = _folder(tmp_path / "zoo", ZOO, zoo_weights, 12, 1, "variable13")
    assert len(_rendered(converted).kernels) == len(_rendered(ours).kernels)


def test_the_rewrites_are_named_in_the_trace_and_the_zoos_spelling_has_none(tmp_path):
    weights = _weights(4)
    graph = uv.nnef.load(_folder(tmp_path / "converted", CONVERTER, weights, 9, 1, "variable13"))
    rules = {step.rule for step in graph.canonical}
    assert rules == {"scalar parameter", "fold parameter arithmetic", "fold parameter layout",
                     "affine chain as scale and shift"}  # fmt: skip
    assert {"abs1", "add1", "variable12", "variable13"} <= {step.label for step in graph.canonical}
    program = graph.compile(backend="c", opts="heuristic", build=False)
    (canonical,) = [p for p in program.trace.passes if p.name == "Canonicalize"]
    assert [step.rule.split(":")[0] for step in canonical.steps] == [step.rule for step in graph.canonical]
    # each step at its rule's code in uopviz/nnef/model/canonical.py, not at the line recording it
    code = {"scalar parameter": "def _scalar_parameters(", "fold parameter arithmetic": "def _elementwise(",
            "fold parameter layout": "def _layout(", "affine chain as scale and shift": "def _affine_chains("}
    for step in canonical.steps:
        path, _, line = step.location.rpartition(":")
        assert path == "uopviz/nnef/model/canonical.py", step.location
        written = linecache.getline(str(Path(__file__).resolve().parents[2] / path), int(line))
        assert written.startswith(code[step.rule.split(":")[0]]), (step.rule, written)
    # the zoo's spelling needs no rewrite of a spelling: only its batch norms become a scale and shift
    plain = uv.nnef.load(_folder(tmp_path / "zoo", ZOO, _zoo_weights(weights), 9, 1, "0.25"))
    assert {step.rule for step in plain.canonical} == {"affine chain as scale and shift"}


def test_a_folded_variable_given_at_run_time_is_refused(tmp_path):
    weights = _weights(5)
    graph = uv.nnef.load(_folder(tmp_path / "converted", CONVERTER, weights, 9, 1, "variable13"))
    x = np.zeros((1, 4, 9, 9), np.float32)
    with pytest.raises(NNEFError, match=r"variable3.*abs1.*cannot be given at run time"):
        graph.run({"external1": x, "variable3": weights["variable3"]}, backend="python")


def _converter() -> tuple:
    """bench_zoo (convert_onnx), onnx and zoo_onnx where Khronos' converter runs here (a subprocess;
    UOPVIZ_NNEF_TOOLS_PYTHON names its Python); else the test is skipped with the reason."""
    pytest.importorskip("onnx", reason="the ONNX form of the zoo needs the onnx package")
    pytest.importorskip("onnxruntime", reason="benchmarks/zoo_onnx.py imports onnxruntime")
    import bench_zoo
    import onnx
    import zoo_onnx

    missing = bench_zoo.converter_missing()
    if missing is not None:
        pytest.skip(missing)
    return bench_zoo, onnx, zoo_onnx


def _relative_error(out: np.ndarray, expected: np.ndarray) -> float:
    """The largest error relative to the largest expected value (as bench_zoo reports it)."""
    return float(np.abs(out - expected).max() / np.abs(expected).max())


@pytest.mark.parametrize("model", ["mobilenet_v2", "resnet50", "inception_v1"])
def test_nnef_tools_conversion_of_a_zoo_model_compiles_to_the_zoos_sources(model):
    """Khronos' converter on the zoo's ONNX MobileNet-v2, ResNet-50 and Inception-v1 (conv without
    bias and batch_normalization, relu6's bound a scalar variable, add residuals, max_pool border
    'ignore', concat, reshape and linear): the same kernels and sources as the zoo's own NNEF 1.0
    folder, values within 1e-5 of the float64 reference relative to the largest."""
    bench_zoo, onnx, zoo_onnx = _converter()
    net = zoo.BUILDERS[model](size=32, width=0.25)
    with tempfile.TemporaryDirectory(prefix="uopviz-converted-") as root:
        onnx.save(zoo_onnx.onnx_model(net), f"{root}/model.onnx")
        converted = uv.nnef.load(bench_zoo.convert_onnx(Path(root) / "model.onnx", Path(root) / "model.nnef"))
        ours = uv.nnef.load(zoo.write_nnef1(net, Path(root) / "zoo"))
        programs = [g.compile(backend="c", opts="heuristic", build=False) for g in (converted, ours)]
        assert [k.name for k in programs[0].kernels] == [k.name for k in programs[1].kernels]
        assert programs[0].sources == programs[1].sources
        x = net.input_data()
        if "c" in uv.backends.available():
            out = converted.run({converted.inputs[0]: x}, backend="c")[converted.outputs[0]]
            assert _relative_error(out, zoo.reference(net, x)) <= 1e-5


def _converted_onnx(root: Path, name: str, nodes: list, weights: dict, shape: list[int]) -> Path:
    """The ONNX graph of ``nodes`` (input ``x`` [1, 4, 10, 10], output ``y`` of ``shape``, the
    ``weights`` as initializers) converted by nnef-tools into the folder ``root / name``."""
    bench_zoo, onnx, _ = _converter()
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(value, key) for key, value in weights.items()],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, root / f"{name}.onnx")
    return bench_zoo.convert_onnx(root / f"{name}.onnx", root / name)


def _onnx_weights(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"w": (rng.standard_normal((C, 4, 3, 3)) / 6).astype(np.float32),
            "b": rng.uniform(-0.1, 0.1, C).astype(np.float32)}  # fmt: skip


def test_nnef_tools_conversion_of_an_onnx_pad_before_a_conv_is_the_convs_padding(tmp_path):
    """An ONNX ``Pad`` before a ``Conv`` without pads (TensorFlow's exports), converted: nnef-tools
    writes a ``pad`` and a conv, which compile to the sources of the conv with the pads itself."""
    _converter()
    from onnx.helper import make_node as node

    weights = {**_onnx_weights(9), "pads": np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64)}
    pad, relu = node("Pad", ["x", "pads"], ["p"]), node("Relu", ["c"], ["y"])
    spelled = [pad, node("Conv", ["p", "w", "b"], ["c"], kernel_shape=[3, 3]), relu]
    padded = _converted_onnx(tmp_path, "padded", spelled, weights, [1, C, 11, 11])
    conv = node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 2, 2, 1])
    plain = _converted_onnx(tmp_path, "plain", [conv, relu], weights, [1, C, 11, 11])
    assert "pad(" in (padded / "graph.nnef").read_text()
    graph = uv.nnef.load(padded)
    assert [step.rule for step in graph.canonical] == ["pad into convolution"]
    programs = [_rendered(folder) for folder in (padded, plain)]
    assert programs[0].sources == programs[1].sources
    x = np.random.default_rng(2).standard_normal((1, 4, 10, 10)).astype(np.float32)
    out = graph.run({graph.inputs[0]: x}, backend="c" if "c" in uv.backends.available() else "python")
    w, b = weights["w"].astype(np.float64), weights["b"].astype(np.float64).reshape(1, -1, 1, 1)
    expected = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (1, 2), (2, 1)])
    expected = np.maximum(zoo._np_conv(expected, w, 1, 0, 1) + b, 0.0)
    assert _relative_error(out[graph.outputs[0]], expected) <= 1e-5


def test_nnef_tools_conversion_of_a_squeezenet_tail_is_the_global_pool(tmp_path):
    """SqueezeNet's and Inception's tail in ONNX (``Dropout``, an ``AveragePool`` over the whole
    image, ``Flatten``), converted: nnef-tools writes a copy, an avg_pool and a mean_reduce of its
    1 x 1 result, which compile to the sources of ``GlobalAveragePool`` itself."""
    _converter()
    from onnx.helper import make_node as node

    weights = _onnx_weights(10)
    conv = node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    relu, flatten = node("Relu", ["c"], ["r"]), node("Flatten", ["g"], ["y"], axis=1)
    spelled = [
        conv,
        relu,
        node("Dropout", ["r"], ["d"]),
        node("AveragePool", ["d"], ["g"], kernel_shape=[10, 10]),
    ]
    converted = _converted_onnx(tmp_path, "squeezenet", [*spelled, flatten], weights, [1, C])
    plain = _converted_onnx(tmp_path, "plain", [conv, relu, node("GlobalAveragePool", ["r"], ["g"]), flatten],
                            weights, [1, C])  # fmt: skip
    graph = uv.nnef.load(converted)
    assert {"copy read in place", "whole-extent pooling as a reduction"} <= {s.rule for s in graph.canonical}
    programs = [_rendered(folder) for folder in (converted, plain)]
    assert programs[0].sources == programs[1].sources
    x = np.random.default_rng(6).standard_normal((1, 4, 10, 10)).astype(np.float32)
    out = graph.run({graph.inputs[0]: x}, backend="c" if "c" in uv.backends.available() else "python")
    w, b = weights["w"].astype(np.float64), weights["b"].astype(np.float64).reshape(1, -1, 1, 1)
    expected = np.maximum(zoo._np_conv(x.astype(np.float64), w, 1, 1, 1) + b, 0.0).mean(axis=(2, 3))
    assert _relative_error(out[graph.outputs[0]], expected) <= 1e-5


# -- padding either way: a zero ``pad`` before a conv (uopviz.nnef.nnef1.canonical) ----------------

PADDED = """version 1.0;

graph G( external1 ) -> ( {output} )
{{
    external1 = external<scalar>(shape = [1, 4, 10, 10]);
    variable1 = variable<scalar>(shape = [{channels}, 4, 3, 3], label = 'variable1');
    variable2 = variable<scalar>(shape = [1, {channels}], label = 'variable2');
{body}
}}
"""


def _padded_folder(root: Path, body: str, output: str = "relu1") -> Path:
    rng = np.random.default_rng(7)
    root.mkdir(parents=True)
    (root / "graph.nnef").write_text(PADDED.format(output=output, channels=C, body=body))
    write_tensor(root / "variable1.dat", (rng.standard_normal((C, 4, 3, 3)) / 6).astype(np.float32))
    write_tensor(root / "variable2.dat", rng.uniform(-0.1, 0.1, (1, C)).astype(np.float32))
    return root


def _conv_line(source: str, padding: str) -> str:
    return (f"    conv1 = conv({source}, variable1, variable2, stride = [1, 1], dilation = [1, 1], "
            f"padding = {padding}, groups = 1);\n    relu1 = relu(conv1);")  # fmt: skip


def _padded_reference(
    x: np.ndarray, folder: Path, pad: list[tuple[int, int]], value: float = 0.0
) -> np.ndarray:
    """relu(conv(x padded by ``pad`` with ``value``, no further padding)) in float64 numpy."""
    w = read_tensor(folder / "variable1.dat").astype(np.float64)
    b = read_tensor(folder / "variable2.dat").astype(np.float64).reshape(1, -1, 1, 1)
    padded = np.pad(x.astype(np.float64), [(0, 0), (0, 0), *pad], constant_values=value)
    return np.maximum(zoo._np_conv(padded, w, 1, 0, 1) + b, 0.0)


@pytest.mark.parametrize(
    ("pad", "own", "total"),
    [([(1, 1), (1, 1)], [(0, 0), (0, 0)], [(1, 1), (1, 1)]),  # TensorFlow's exports: Pad, then Conv
     ([(0, 1), (2, 0)], [(1, 1), (0, 1)], [(1, 2), (2, 1)])],  # both, unequal sides: the sums
)  # fmt: skip
def test_a_zero_pad_before_a_conv_is_the_convs_padding(tmp_path, pad, own, total):
    """``pad`` (zeros) then ``conv``: the conv's padding, the same kernels and sources as the conv
    padded itself, and a step ``pad into convolution`` in the trace."""
    spelled = (f"    pad1 = pad(external1, padding = [(0, 0), (0, 0), {pad[0]}, {pad[1]}], "
               f"border = 'constant', value = 0.0);\n" + _conv_line("pad1", str(own)))  # fmt: skip
    converted = _padded_folder(tmp_path / "converted", spelled)
    ours = _padded_folder(tmp_path / "zoo", _conv_line("external1", str(total)))
    graph = uv.nnef.load(converted)
    assert [(step.rule, step.label) for step in graph.canonical] == [("pad into convolution", "pad1")]
    programs = [_rendered(folder) for folder in (converted, ours)]
    assert [k.name for k in programs[0].kernels] == [k.name for k in programs[1].kernels]
    assert programs[0].sources == programs[1].sources
    (canonical,) = [p for p in programs[0].trace.passes if p.name == "Canonicalize"]
    assert [step.rule.split(":")[0] for step in canonical.steps] == ["pad into convolution"]
    x = np.random.default_rng(3).standard_normal((1, 4, 10, 10)).astype(np.float32)
    out = graph.run({"external1": x}, backend="c" if "c" in uv.backends.available() else "python")["relu1"]
    total_pad = [(a + c, b + d) for (a, b), (c, d) in zip(pad, own, strict=True)]
    np.testing.assert_allclose(out, _padded_reference(x, converted, total_pad), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("pad_line", "extra", "value"),
    [("value = 1.0, border = 'constant'", "", 1.0),  # not zeros: a padded copy
     ("border = 'constant'", "\n    relu2 = relu(pad1);", 0.0)],  # read by another operation too
)  # fmt: skip
def test_a_pad_that_is_not_a_convs_padding_stays(tmp_path, pad_line, extra, value):
    body = (f"    pad1 = pad(external1, padding = [(0, 0), (0, 0), (1, 1), (1, 1)], {pad_line});\n"
            + _conv_line("pad1", "[(0, 0), (0, 0)]") + extra)  # fmt: skip
    folder = _padded_folder(tmp_path / "model", body)
    graph = uv.nnef.load(folder)
    assert graph.canonical == []
    assert "layout.pad" in {op.type for op in graph.operations}
    x = np.random.default_rng(4).standard_normal((1, 4, 10, 10)).astype(np.float32)
    out = graph.run({"external1": x}, backend="python")["relu1"]
    np.testing.assert_allclose(
        out, _padded_reference(x, folder, [(1, 1), (1, 1)], value), rtol=1e-5, atol=1e-6
    )


# -- identities and whole-extent pools: Dropout, SqueezeNet's / Inception's last AveragePool ---------

HEADED = """version 1.0;

graph G( external1 ) -> ( {output} )
{{
    external1 = external<scalar>(shape = [1, 4, 6, 6]);
    variable1 = variable<scalar>(shape = [{channels}, 4, 1, 1], label = 'variable1');
    conv1 = conv(external1, variable1, 0.0, padding = [(0, 0), (0, 0)]);
    relu1 = relu(conv1);
{body}
}}
"""
WHOLE = "size = [1, 1, 6, 6], stride = [1, 1, 1, 1], padding = [(0, 0), (0, 0), (0, 0), (0, 0)]"
HEAD_TAIL = "    reshape1 = reshape(pooled, shape = [0, -1]);\n    softmax1 = softmax(reshape1, axes = [1]);"


def _headed_folder(root: Path, body: str, output: str = "softmax1") -> Path:
    root.mkdir(parents=True)
    (root / "graph.nnef").write_text(HEADED.format(output=output, channels=C, body=body))
    weights = np.random.default_rng(8).standard_normal((C, 4, 1, 1)).astype(np.float32) / 2
    write_tensor(root / "variable1.dat", weights)
    return root


@pytest.mark.parametrize(("pool", "reduction", "reduce"), [("avg_pool", "mean_reduce", np.mean),
                                                           ("max_pool", "max_reduce", np.max)])  # fmt: skip
def test_a_dropouts_copy_and_a_whole_extent_pool_are_the_global_reduction(tmp_path, pool, reduction, reduce):
    """``copy`` (a converted Dropout) is read in place; a pooling whose window is the whole image
    is the reduction, and the global mean of its 1 x 1 result is that result: the same kernels and
    sources as the plain reduction, each rewrite a step of its own."""
    spelled = (f"    copy1 = copy(relu1);\n    pooled1 = {pool}(copy1, {WHOLE}, border = 'ignore');\n"
               f"    pooled = mean_reduce(pooled1, axes = [2, 3]);\n{HEAD_TAIL}")  # fmt: skip
    converted = _headed_folder(tmp_path / "converted", spelled)
    ours = _headed_folder(tmp_path / "zoo", f"    pooled = {reduction}(relu1, axes = [2, 3]);\n{HEAD_TAIL}")
    graph = uv.nnef.load(converted)
    assert [step.rule for step in graph.canonical] == [
        "copy read in place", "whole-extent pooling as a reduction", "reduction of unit axes"
    ]  # fmt: skip
    programs = [_rendered(folder) for folder in (converted, ours)]
    assert [k.name for k in programs[0].kernels] == [k.name for k in programs[1].kernels]
    assert programs[0].sources == programs[1].sources
    x = np.random.default_rng(5).standard_normal((1, 4, 6, 6)).astype(np.float32)
    out = graph.run({"external1": x}, backend="c" if "c" in uv.backends.available() else "python")["softmax1"]
    w = read_tensor(converted / "variable1.dat").astype(np.float64)
    features = reduce(np.maximum(zoo._np_conv(x.astype(np.float64), w, 1, 0, 1), 0.0), axis=(2, 3))
    assert _relative_error(out, zoo._np_softmax(features)) <= 1e-5


@pytest.mark.parametrize(
    ("window", "channel_step"),
    [("size = [1, 1, 3, 3], stride = [1, 1, 3, 3]", 1),  # part of the image (its mean: the image's)
     ("size = [1, 1, 6, 6], stride = [1, 2, 1, 1]", 2)],  # the whole image, every other channel
)  # fmt: skip
def test_a_copy_given_out_and_a_pool_that_is_no_global_reduction_stay(tmp_path, window, channel_step):
    """A copy that is a graph output, a pooling of 3 x 3 windows of a 6 x 6 image, and one of the
    whole image that strides over the channels are not rewritten."""
    body = (f"    copy1 = copy(relu1);\n    pooled1 = avg_pool(relu1, {window}, "
            "padding = [(0, 0), (0, 0), (0, 0), (0, 0)], border = 'ignore');\n"
            f"    pooled = mean_reduce(pooled1, axes = [2, 3]);\n{HEAD_TAIL}")  # fmt: skip
    graph = uv.nnef.load(_headed_folder(tmp_path / "model", body, output="copy1, softmax1"))
    # (the global mean of the strided pool's 1 x 1 result is that result: rule 'reduction of unit axes')
    assert not {"copy read in place", "whole-extent pooling as a reduction"} & {
        s.rule for s in graph.canonical
    }
    assert {"math.iden", "nn.sum_pool"} <= {op.type for op in graph.operations}  # the copy, the pooling
    x = np.random.default_rng(7).standard_normal((1, 4, 6, 6)).astype(np.float32)
    out = graph.run({"external1": x}, backend="python")["softmax1"]
    w = read_tensor(tmp_path / "model" / "variable1.dat").astype(np.float64)
    relu = np.maximum(zoo._np_conv(x.astype(np.float64), w, 1, 0, 1), 0.0)
    assert _relative_error(out, zoo._np_softmax(relu[:, ::channel_step].mean(axis=(2, 3)))) <= 1e-5


def test_a_sum_of_three_is_the_additions_in_order(tmp_path):
    """``add_n`` of three (an ONNX ``Sum``, converted) compiles to the sources of the two additions
    a file writes for it, each fused into the convolutions' store; values as numpy's."""
    convs = ("    conv1 = conv(external1, variable1, variable2, padding = [(1, 1), (1, 1)]);\n"
             "    conv2 = conv(external1, variable1, 0.0, padding = [(1, 1), (1, 1)]);\n"
             "    relu2 = relu(conv1);\n")  # fmt: skip
    spelled = convs + "    sum1 = add_n([conv1, conv2, relu2]);\n    relu1 = relu(sum1);"
    plain = convs + "    add1 = add(conv1, conv2);\n    sum1 = add(add1, relu2);\n    relu1 = relu(sum1);"
    converted = _padded_folder(tmp_path / "converted", spelled)
    graph = uv.nnef.load(converted)
    assert [step.rule for step in graph.canonical] == ["add_n as additions"]
    programs = [_rendered(folder) for folder in (converted, _padded_folder(tmp_path / "zoo", plain))]
    assert [k.name for k in programs[0].kernels] == [k.name for k in programs[1].kernels]
    assert programs[0].sources == programs[1].sources
    x = np.random.default_rng(11).standard_normal((1, 4, 10, 10)).astype(np.float32)
    out = graph.run({"external1": x}, backend="c" if "c" in uv.backends.available() else "python")["relu1"]
    w = read_tensor(converted / "variable1.dat").astype(np.float64)
    b = read_tensor(converted / "variable2.dat").astype(np.float64).reshape(1, -1, 1, 1)
    conv = zoo._np_conv(x.astype(np.float64), w, 1, 1, 1)
    expected = np.maximum((conv + b) + conv + np.maximum(conv + b, 0.0), 0.0)
    assert _relative_error(out, expected) <= 1e-5
