"""Where a model's inference time goes, by kind of work, for us and for ONNX Runtime.

Kinds: ``conv`` (convolutions, with what is fused into them), ``pooling`` (max / average / global
pools and mean reductions), ``linear`` (fully connected layers, matrix products), ``elementwise``
(activations, batch norms, additions, softmax left on their own) and ``copies`` (layout work:
padded copies, weight layouts, reshapes, concatenations, ONNX Runtime's NCHWc reorders).

Ours (:func:`ours_by_kind`): each kernel of the compiled program timed alone, bound to its arrays
(the median of ``repeat`` rounds), its kind that of the operations it was lowered from (a
convolution with the batch norm and activation fused into it is a convolution); the padding
kernels (a padded input copy, the zero border of a padded buffer) are copies.
ONNX Runtime's (:func:`ort_by_kind`): its own profile (``SessionOptions.enable_profiling``), the
``Node`` events of ``repeat`` runs after a warm-up, averaged per run, by operator type.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["KINDS", "format_breakdown", "ort_by_kind", "ort_kind", "our_kind", "ours_by_kind"]

KINDS = ("conv", "pooling", "linear", "elementwise", "copies")

#: Our operators by kind (the operator's name, module left off); anything else is elementwise.
_OUR_KINDS = {
    "conv": "conv", "deconv": "conv", "separable_conv": "conv",
    "max_pool": "pooling", "avg_pool": "pooling", "box": "pooling", "mean_reduce": "pooling",
    "sum_reduce": "pooling", "max_reduce": "pooling",
    "linear": "linear", "matmul": "linear",
}  # fmt: skip
#: ONNX Runtime's operator types by kind (its fused and NCHWc forms included).
_ORT_KINDS = {
    "Conv": "conv", "FusedConv": "conv", "ConvTranspose": "conv", "QLinearConv": "conv",
    "MaxPool": "pooling", "AveragePool": "pooling", "GlobalAveragePool": "pooling",
    "GlobalMaxPool": "pooling", "ReduceMean": "pooling",
    "Gemm": "linear", "MatMul": "linear", "FusedGemm": "linear", "FusedMatMul": "linear",
    "Reshape": "copies", "Flatten": "copies", "Concat": "copies", "Transpose": "copies",
    "ReorderInput": "copies", "ReorderOutput": "copies", "Squeeze": "copies", "Unsqueeze": "copies",
    "Identity": "copies", "Pad": "copies", "Split": "copies", "Slice": "copies",
}  # fmt: skip


def our_kind(lowered: Any, kernel: Any) -> str:
    """The kind of one of our kernels: ``lowered`` (a LoweredKernel: its operation and those fused
    into it; a convolution with its batch norm and activation is a convolution) and ``kernel`` (the
    compiled kernel: whether it reduces)."""
    operations = (lowered.operation, *lowered.fused)
    kinds = {_OUR_KINDS.get(op.type.rpartition(".")[2], "elementwise") for op in operations}
    kind = next((kind for kind in ("conv", "linear", "pooling") if kind in kinds), "elementwise")
    if kernel.has_reduce:
        return kind
    # the padding pass's kernels write a padded buffer (``<tensor>#pad...``): a padded input copy,
    # or a border of zeros around the interior a producer writes in place
    if kind != "elementwise" or "#pad" in lowered.buffers[0]:
        return "copies"
    return "copies" if all(op.type.startswith("layout.") for op in operations) else kind


def ort_kind(op_type: str) -> str:
    """The kind of an ONNX Runtime node of operator type ``op_type``."""
    return _ORT_KINDS.get(op_type, "elementwise")


def ours_by_kind(graph: Any, program: Any, inputs: Mapping[str, Any], repeat: int = 5) -> dict[str, float]:
    """Seconds per inference of each kind in our ``program`` of ``graph`` on ``inputs``: each
    kernel's median time alone, bound to its arrays, summed by kind."""
    from uopviz.nnef.program.runtime import program_inputs

    totals = dict.fromkeys(KINDS, 0.0)
    steps = [step for kind, step in program.nnef_steps if kind == "kernels"]
    for step in steps:
        bound = step.bind(program_inputs(graph, step, inputs))
        kinds = [
            our_kind(lowered, item.kernel)
            for lowered, item in zip(step.nnef_kernels, step.items, strict=True)
        ]
        samples: list[list[float]] = [[] for _ in bound.launches]
        for round_index in range(repeat + 1):  # the first round warms the caches
            for seconds, launch in zip(samples, bound.launches, strict=True):
                elapsed = launch.run()
                if round_index:
                    seconds.append(elapsed)
        for kind, seconds in zip(kinds, samples, strict=True):
            totals[kind] += statistics.median(seconds)
    return totals


def ort_by_kind(
    model: bytes | str, inputs: Mapping[str, Any], threads: int, repeat: int = 5
) -> dict[str, float]:
    """Seconds per inference of each kind in ONNX Runtime's CPU session of ``model`` (bytes or a
    file) with ``threads`` intra-op threads: its profile's node times over ``repeat`` runs after a
    warm-up run, per run."""
    import onnxruntime

    totals = dict.fromkeys(KINDS, 0.0)
    with tempfile.TemporaryDirectory(prefix="uopviz-ort-profile-") as folder:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(folder, "ort")
        session = onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
        for _ in range(repeat + 1):
            session.run(None, dict(inputs))
        events = _node_events(Path(session.end_profiling()))
    per_run = len(events) // (repeat + 1)  # every run runs the same nodes: the warm-up's come first
    for event in events[per_run:]:
        totals[ort_kind(event["args"].get("op_name", ""))] += event["dur"] * 1e-6 / repeat
    return totals


def _node_events(profile: Path) -> list[dict]:
    """The kernel-time events of one node each in an ONNX Runtime profile file (``*_kernel_time``)."""
    events = json.loads(profile.read_text())
    return [e for e in events if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")]


def format_breakdown(ours: Mapping[str, float], peer: Mapping[str, float]) -> str:
    """``conv 30.1 ms (onnxruntime 25.0), ...``: each kind either spends time on."""
    parts = [
        f"{kind} {ours.get(kind, 0.0) * 1e3:.1f} ms (onnxruntime {peer.get(kind, 0.0) * 1e3:.1f})"
        for kind in KINDS
        if ours.get(kind, 0.0) or peer.get(kind, 0.0)
    ]
    return ", ".join(parts)
