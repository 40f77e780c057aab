"""The model zoo (benchmarks/zoo.py) in small variants: every architecture written as an NNEF 1.0
folder and as a SkriptND folder with seeded random .dat weights, loaded, compiled (with kernel
fusion) and run, against the zoo's numpy reference on two random inputs; ONNX Runtime is the
benchmark's peer, not needed here.  The full-size networks run in ``make bench`` (bench_zoo.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import uopviz as uv
from uopviz.backends.nvrtc import find_nvrtc, nvrtc_compile
from uopviz.nnef.lowering.operation_lowering import kernel_count
from uopviz.nnef.program.compile import compile_graph
from uopviz.nnef.program.runtime import program_inputs

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import zoo  # noqa: E402

# input size 32 (AlexNet's strides need 67) and an eighth of the channels; DenseNet-121 keeps its
# 58 dense layers (about 420 kernels to compile cold), so it runs with the slow tests
SMALL = {
    "alexnet": {"size": 67, "width": 0.125},
    "vgg16": {"size": 32, "width": 0.125},
    "resnet18": {"size": 32, "width": 0.125},
    "resnet50": {"size": 32, "width": 0.125},
    "inception_v1": {"size": 32, "width": 0.125},
    "mobilenet_v2": {"size": 32, "width": 0.25},
    "squeezenet": {"size": 32, "width": 0.25},
    "lstm": {"steps": 4, "features": 8, "hidden": 8},
    "densenet121": {"size": 32, "width": 0.125},
}
SLOW = {"densenet121"}
WRITERS = {"nnef1": zoo.write_nnef1, "skriptnd": zoo.write_skriptnd}
CASES = [
    pytest.param(model, form, marks=[pytest.mark.slow] if model in SLOW else [], id=f"{model}-{form}")
    for model in SMALL
    for form in WRITERS
]


@pytest.fixture(scope="module")
def networks():
    return {}


def _network(networks: dict, model: str) -> zoo.Network:
    if model not in networks:
        networks[model] = zoo.BUILDERS[model](**SMALL[model])
    return networks[model]


def _check(net: zoo.Network, graph: uv.nnef.Graph, backend: str) -> None:
    for seed in (1, 5):
        x = net.input_data(seed)
        out = graph.run({net.input_name: x}, backend=backend)[net.output]
        expected = zoo.reference(net, x)
        assert out.shape == expected.shape
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5 * float(np.abs(expected).max()))


@pytest.mark.skipif("c" not in uv.backends.available(), reason="no C compiler on this machine")
@pytest.mark.parametrize(("model", "form"), CASES)
def test_zoo_model_runs_like_numpy_on_c(networks, tmp_path, model, form):
    net = _network(networks, model)
    folder = WRITERS[form](net, tmp_path / model)
    graph = uv.nnef.load(folder)
    assert graph.inputs == [net.input_name] and graph.outputs == [net.output]
    assert all(graph.tensors[name].data is not None for name in graph.variables)
    _check(net, graph, "c")


@pytest.mark.skipif("llvm" not in uv.backends.available(), reason="llvmlite is not installed")
@pytest.mark.parametrize("model", ["resnet18", "mobilenet_v2", "lstm"])
def test_zoo_model_runs_like_numpy_on_llvm(networks, tmp_path, model):
    net = _network(networks, model)
    graph = uv.nnef.load(zoo.write_nnef1(net, tmp_path / model))
    _check(net, graph, "llvm")


def test_the_zoo_writes_what_the_reference_computes(networks, tmp_path):
    # the files hold the weights the reference uses, in the layouts each format wants
    net = _network(networks, "resnet18")
    nnef1 = zoo.write_nnef1(net, tmp_path / "nnef1")
    skriptnd = zoo.write_skriptnd(net, tmp_path / "skriptnd")
    name = next(n for n in net.weights if n.startswith("mean"))
    assert uv.nnef.read_tensor(nnef1 / f"{name}.dat").shape == (1, *net.weights[name].shape)
    np.testing.assert_array_equal(uv.nnef.read_tensor(skriptnd / f"{name}.dat"), net.weights[name])
    assert "batch_normalization(" in (nnef1 / "graph.nnef").read_text()
    assert "nn.batch_norm{" in (skriptnd / "main.sknd").read_text()
    # calibrated: the softmax is neither flat nor one-hot
    probabilities = zoo.reference(net, net.input_data())
    assert 2.0 / net.shapes[net.output][1] < probabilities.max() < 0.99


def test_fusion_folds_batch_norm_chains_and_keeps_results(networks, tmp_path):
    net = _network(networks, "resnet18")
    graph = uv.nnef.load(zoo.write_nnef1(net, tmp_path / "resnet18"))
    fused = compile_graph(graph, "c")
    unfused = compile_graph(graph, "c", fuse=False)
    assert len(unfused.kernels) == kernel_count(graph)
    # conv + the batch norm (a scale and shift once canonical) + relu: one kernel (the padded
    # buffers' border kernels aside: they replace copies, uopviz.nnef.kernel_passes.padding)
    computing = [kernel for kernel in fused.nnef_kernels if not kernel.name.startswith("border_")]
    assert len(computing) * 3 < len(unfused.kernels) * 2
    assert len(fused.kernels) == len(fused.nnef_kernels)
    # the batch norms are a scale and a shift computed at load, folded into the convolutions
    folded = [kernel for kernel in fused.nnef_kernels if kernel.fused]
    assert any(
        {"nn.conv", "math.mul", "math.add", "nn.relu"} <= {op.type for op in (*k.fused, k.operation)}
        for k in folded
    )
    normalising = {op.type for k in fused.nnef_kernels for op in (*k.fused, k.operation)
                   if op.label.startswith("batch_norm")}  # fmt: skip
    assert normalising == {"math.mul", "math.add"}, normalising
    x = net.input_data()

    def output(program):
        given = program_inputs(graph, program, {net.input_name: x})
        return dict(zip(program.nnef_outputs, program.run(given)))[net.output]

    np.testing.assert_allclose(output(fused), output(unfused), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("model", [pytest.param(m, marks=[pytest.mark.slow] if m in SLOW else [])
                                   for m in SMALL])
def test_every_zoo_model_renders_for_cuda_with_heuristic_opts(networks, tmp_path, model):
    """The GPU heuristic on every zoo network, without a GPU (``build=False``): ResNet's kernels
    split their last two GLOBAL axes into LOCAL ones, and the second split once looked for a range
    the first had renumbered away (ValueError in the heuristic)."""
    net = _network(networks, model)
    graph = uv.nnef.load(zoo.write_skriptnd(net, tmp_path / model))
    program = graph.compile(backend="cuda", opts="heuristic", build=False, progress=False)
    sources = [item.source for item in program.items]
    assert sources and all("__global__" in source for source in sources)
    assert any(kernel.opts for kernel in program.kernels)
    assert any("LOCAL" in repr(kernel.opts) for kernel in program.kernels)


@pytest.mark.skipif(find_nvrtc() is None, reason="no NVRTC library (the nvidia-cuda-nvrtc wheel is a "
                                                 "dev dependency; the toolkit's libnvrtc serves too)")
def test_the_gpu_heuristics_resnet_kernels_compile_for_an_h100(networks, tmp_path):
    """Each distinct CUDA kernel of the small ResNet-18 with heuristic opts compiles (NVRTC, sm_90)."""
    graph = uv.nnef.load(zoo.write_skriptnd(_network(networks, "resnet18"), tmp_path / "resnet18"))
    program = graph.compile(backend="cuda", opts="heuristic", build=False, progress=False)
    sources = {item.source: item.kernel.name for item in program.items}
    for source, name in sources.items():
        assert name.encode() in nvrtc_compile(source, "sm_90", "cubin", name)
