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
Convolution by convolution (:func:`paired_convolutions`): our conv kernels and its conv nodes
paired in order, where both have as many, so a row can name the convolutions we lose most on.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "KINDS", "Timed", "by_kind", "format_breakdown", "format_worst_pairs", "ort_by_kind", "ort_kind",
    "ort_nodes", "our_kernels", "our_kind", "ours_by_kind", "paired_convolutions",
]  # fmt: skip

KINDS = ("conv", "pooling", "linear", "elementwise", "copies")
#: a kernel or node timed: its name, its kind and its seconds per inference
Timed = tuple[str, str, float]

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


def our_kernels(graph: Any, program: Any, inputs: Mapping[str, Any], repeat: int = 5) -> list[Timed]:
    """Each kernel of our ``program`` of ``graph`` on ``inputs``, in launch order: its name, its kind
    and its median time alone over ``repeat`` rounds (bound to its arrays; the first round warms
    the caches)."""
    from uopviz.nnef.program.runtime import program_inputs

    timed: list[Timed] = []
    for step in [step for kind, step in program.nnef_steps if kind == "kernels"]:
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
        timed += [(item.kernel.name, kind, statistics.median(seconds))
                  for item, kind, seconds in zip(step.items, kinds, samples, strict=True)]  # fmt: skip
    return timed


def ours_by_kind(graph: Any, program: Any, inputs: Mapping[str, Any], repeat: int = 5) -> dict[str, float]:
    """Seconds per inference of each kind in our ``program`` of ``graph`` on ``inputs``: each
    kernel's median time alone (:func:`our_kernels`), summed by kind."""
    return by_kind(our_kernels(graph, program, inputs, repeat))


def ort_nodes(model: bytes | str, inputs: Mapping[str, Any], threads: int, repeat: int = 5) -> list[Timed]:
    """Each node of ONNX Runtime's CPU session of ``model`` (bytes or a file) with ``threads``
    intra-op threads, in run order: its name, its kind and its seconds per run, from the
    profile's node times over ``repeat`` runs after a warm-up run."""
    import onnxruntime

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
    seconds: dict[str, float] = {}
    kinds: dict[str, str] = {}
    for event in events[per_run:]:
        name = event["name"].removesuffix("_kernel_time")
        seconds[name] = seconds.get(name, 0.0) + event["dur"] * 1e-6 / repeat
        kinds[name] = ort_kind(event["args"].get("op_name", ""))
    return [(name, kinds[name], total) for name, total in seconds.items()]


def ort_by_kind(
    model: bytes | str, inputs: Mapping[str, Any], threads: int, repeat: int = 5
) -> dict[str, float]:
    """Seconds per inference of each kind in ONNX Runtime's CPU session of ``model`` (its node
    times, :func:`ort_nodes`), summed by kind."""
    return by_kind(ort_nodes(model, inputs, threads, repeat))


def by_kind(timed: list[Timed]) -> dict[str, float]:
    """The seconds of ``timed`` (kernels or nodes) summed by kind, every kind listed."""
    totals = dict.fromkeys(KINDS, 0.0)
    for _, kind, seconds in timed:
        totals[kind] += seconds
    return totals


def paired_convolutions(ours: list[Timed], theirs: list[Timed]) -> list[tuple[str, str, float, float]]:
    """Our convolution kernels and ONNX Runtime's convolution nodes paired in order: ``(our kernel,
    its node, our seconds, its seconds)``.  Both run a network's convolutions in the graph's order,
    one kernel or node each with what is fused into it, so the i-th of one is the i-th of the
    other where both have as many; none where they do not (a convolution fused into another's
    kernel on one side: ResNet-50's downsampling branch in its residual sum)."""
    mine = [(name, seconds) for name, kind, seconds in ours if kind == "conv"]
    peer = [(name, seconds) for name, kind, seconds in theirs if kind == "conv"]
    if len(mine) != len(peer):
        return []
    return [(a, b, ta, tb) for (a, ta), (b, tb) in zip(mine, peer)]


def format_worst_pairs(pairs: list[tuple[str, str, float, float]], count: int = 3) -> str:
    """``conv 7 r_t2_... 0.78 ms (onnxruntime's node 0.39)``: the ``count`` pairs we lose most time
    on, worst first; '' without pairs."""
    positions = sorted(range(len(pairs)), key=lambda i: pairs[i][3] - pairs[i][2])[:count]
    return ", ".join(f"conv {i} {pairs[i][0]} {pairs[i][2] * 1e3:.3f} ms (onnxruntime's node "
                     f"{pairs[i][3] * 1e3:.3f})" for i in positions)  # fmt: skip


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
