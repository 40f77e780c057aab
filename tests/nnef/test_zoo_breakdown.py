"""The zoo benchmark's batch forms (``zoo.batched``) and its time by kind (``zoo_breakdown``): a
batched model computes each image as the batch-1 model does; every kernel of ours and every node of
ONNX Runtime's profile is counted under one kind."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import uopviz as uv

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_zoo  # noqa: E402
import zoo  # noqa: E402
import zoo_breakdown  # noqa: E402

BACKEND = "c" if "c" in uv.backends.available() else "python"


@pytest.fixture(scope="module")
def mobilenet(tmp_path_factory):
    """A small MobileNet-v2 (depthwise and 1x1 convolutions, padded buffers) compiled, with its input."""
    net = zoo.mobilenet_v2(size=32, width=0.25)
    graph = uv.nnef.load(zoo.write_nnef1(net, tmp_path_factory.mktemp("mobilenet")))
    program = graph.compile(BACKEND, opts="heuristic")
    return net, graph, program, {net.input_name: net.input_data()}


def test_a_batched_model_computes_each_image_as_the_batch_one_model(tmp_path):
    net = zoo.resnet18(size=32, width=0.25)
    batched = zoo.batched(net, 3)
    x = batched.input_data()
    assert x.shape == (3, 3, 32, 32) and batched.shapes[batched.output][0] == 3
    expected = zoo.reference(batched, x)
    for image in range(3):
        np.testing.assert_allclose(
            expected[image : image + 1], zoo.reference(net, x[image : image + 1]), rtol=1e-6
        )
    graph = uv.nnef.load(zoo.write_nnef1(batched, tmp_path))
    out = graph.run({batched.input_name: x}, backend=BACKEND)[batched.output]
    assert float(np.abs(out - expected).max() / np.abs(expected).max()) <= 1e-5


def test_the_lstm_is_not_batched_along_its_time_axis():
    with pytest.raises(ValueError, match="lstm\\(batch=...\\)"):
        zoo.batched(zoo.lstm(), 8)


def test_every_kernel_has_a_kind_convolutions_with_their_tails_and_padding_as_copies(mobilenet):
    net, graph, program, _ = mobilenet
    kinds = [
        zoo_breakdown.our_kind(lowered, kernel)
        for lowered, kernel in zip(program.nnef_kernels, program.kernels)
    ]
    convolutions = sum(op.type == "nn.conv" for op in graph.operations)
    assert kinds.count("conv") == convolutions  # one reducing kernel each, batch norm and clamp fused in
    # the padding pass's own kernels: the padded input copy, the zero borders (a convolution that
    # writes a padded buffer's interior reduces, and is a convolution)
    padding = [kind for kind, lowered, kernel in zip(kinds, program.nnef_kernels, program.kernels)
               if "#pad" in lowered.buffers[0] and not kernel.has_reduce]  # fmt: skip
    assert padding and set(padding) == {"copies"}
    assert set(kinds) <= set(zoo_breakdown.KINDS) and "linear" in kinds and "pooling" in kinds


def test_our_time_by_kind_sums_each_kernel_alone(mobilenet):
    _, graph, program, inputs = mobilenet
    totals = zoo_breakdown.ours_by_kind(graph, program, inputs, repeat=2)
    assert list(totals) == list(zoo_breakdown.KINDS)
    assert totals["conv"] > 0 and totals["copies"] > 0 and all(seconds >= 0 for seconds in totals.values())


def test_onnx_runtimes_time_by_kind_comes_from_its_profile(mobilenet):
    pytest.importorskip("onnxruntime", reason="ONNX Runtime's profile needs the onnxruntime package")
    import zoo_onnx

    net, _, _, inputs = mobilenet
    totals = zoo_breakdown.ort_by_kind(
        zoo_onnx.onnx_model(net).SerializeToString(), inputs, threads=1, repeat=2
    )
    assert list(totals) == list(zoo_breakdown.KINDS)
    assert totals["conv"] > 0 and totals["linear"] > 0 and totals["pooling"] > 0
    assert (
        zoo_breakdown.ort_kind("ReorderInput") == "copies" and zoo_breakdown.ort_kind("Relu") == "elementwise"
    )
    line = zoo_breakdown.format_breakdown({"conv": 0.002, "copies": 0.0}, {"conv": 0.001, "copies": 0.0})
    assert line == "conv 2.0 ms (onnxruntime 1.0)"


def test_batch_eight_rows_are_for_the_batched_models(monkeypatch):
    monkeypatch.delenv("UOPVIZ_ZOO_BATCH", raising=False)
    monkeypatch.delenv("UOPVIZ_ZOO_BATCHED", raising=False)
    assert bench_zoo._batches(["alexnet", "resnet50", "mobilenet_v2"]) == [
        ("alexnet", 1), ("resnet50", 1), ("mobilenet_v2", 1), ("resnet50", 8), ("mobilenet_v2", 8)
    ]  # fmt: skip
    monkeypatch.setenv("UOPVIZ_ZOO_BATCH", "8")
    monkeypatch.setenv("UOPVIZ_ZOO_BATCHED", "alexnet")
    assert bench_zoo._batches(["alexnet", "resnet50"]) == [("alexnet", 8)]


def test_convolutions_pair_in_order_only_where_both_have_as_many():
    ours = [("r_a", "conv", 0.004), ("E_pad", "copies", 0.001), ("r_b", "conv", 0.002),
            ("r_fc", "linear", 1e-4)]
    theirs = [("conv1", "conv", 0.001), ("relu1", "elementwise", 1e-5), ("conv2", "conv", 0.003)]
    pairs = zoo_breakdown.paired_convolutions(ours, theirs)
    assert pairs == [("r_a", "conv1", 0.004, 0.001), ("r_b", "conv2", 0.002, 0.003)]
    worst = zoo_breakdown.format_worst_pairs(pairs, count=1)
    assert worst == "conv 0 r_a 4.000 ms (onnxruntime's node 1.000)"
    assert zoo_breakdown.paired_convolutions(ours, theirs[:2]) == []  # a fused convolution on one side
    assert zoo_breakdown.format_worst_pairs([]) == ""
    assert zoo_breakdown.by_kind(ours) == {"conv": 0.006, "pooling": 0.0, "linear": 1e-4, "elementwise": 0.0,
                                           "copies": 0.001}  # fmt: skip


def test_a_small_mobilenets_convolutions_pair_with_onnx_runtimes_nodes(mobilenet):
    """Each of our conv kernels (depthwise and 1x1, batch norm and clamp fused) against the node
    ONNX Runtime runs for the same convolution: as many of each, in the graph's order."""
    pytest.importorskip("onnxruntime", reason="ONNX Runtime's profile needs the onnxruntime package")
    import zoo_onnx

    net, graph, program, inputs = mobilenet
    kernels = zoo_breakdown.our_kernels(graph, program, inputs, repeat=2)
    assert [name for name, _, _ in kernels] == [kernel.name for kernel in program.kernels]
    nodes = zoo_breakdown.ort_nodes(zoo_onnx.onnx_model(net).SerializeToString(), inputs, threads=1, repeat=2)
    pairs = zoo_breakdown.paired_convolutions(kernels, nodes)
    assert len(pairs) == sum(op.type == "nn.conv" for op in graph.operations)
    assert all(ours > 0 and theirs > 0 for _, _, ours, theirs in pairs)
    assert zoo_breakdown.by_kind(kernels)["conv"] == pytest.approx(sum(pair[2] for pair in pairs))
