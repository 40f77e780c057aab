"""NNEF 1.0 spellings rewritten before translation: one meaning, one form of the 1.0 graph.

Converters (Khronos' ``nnef-tools`` from ONNX) write some operations of a network in forms that
mean what a plainer form means, and that, translated as written, cost kernels of their own:

- ``pad into convolution``: a ``pad`` with ``border = 'constant'`` and ``value = 0.0`` of the
  spatial axes before a ``conv`` without padding (ONNX models exported from TensorFlow keep their
  ``Pad`` nodes) is a padded copy written by a kernel with masked loads; as the convolution's
  padding it is written in place by :mod:`uopviz.nnef.kernel_passes.padding`.  A zero ``pad``
  read only by convolutions (as their input, padding given) becomes their padding.
- ``copy read in place``: a ``copy`` (a converted ``Dropout`` or ``Identity``) is a kernel that
  copies; its readers read its input (a copy that is a graph output stays).
- ``whole-extent pooling as a reduction``: a pooling whose window is its input's extent along
  each axis it pools, without padding or dilation (SqueezeNet's, Inception's and DenseNet's last
  ``AveragePool``) is the ``mean_reduce`` (``max_reduce`` for ``max_pool``, ``sum_reduce`` for
  ``box``) over those axes.
- ``add_n as additions``: ``add_n`` of three or more tensors (an ONNX ``Sum``) is the additions in
  order, which fuse into the producers' stores as a file's ``add`` chain does.
- ``reduction of unit axes``: a reduction over axes of extent 1 only (the converter's
  ``mean_reduce`` of that 1 x 1 result, before the ``reshape``) gives its input back; its readers
  read that.

The rules rewrite the parsed 1.0 graph (the ``nnef`` package's operations, their ``attribs`` and
``inputs`` edited in place) before :func:`~uopviz.nnef.nnef1.loader.translate`, where the 1.0
meaning is still plain, pass after pass until none applies.  The forms the rules of the composed
graph bring together (scalar and computed parameters, :mod:`uopviz.nnef.model.canonical`) are not
repeated here.  Each rewrite is a :class:`~uopviz.nnef.model.canonical.CanonicalStep` in
``graph.canonical``, which ``g.compile`` records in the trace (pass ``Canonicalize``) beside those
of the composed graph.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from uopviz.nnef.model.canonical import CanonicalStep

__all__ = ["SPELLING_RULES", "SpellingRule", "rewrite_spellings"]


@dataclass(frozen=True)
class SpellingRule:
    """A named rewrite of one 1.0 operator: ``rewrite(graph, op, readers)`` gives a description of
    what it did and the operations that stand in the place of ``op`` (none: it goes; the rewrite
    may have edited the operations that read its output), or None where the rule does not apply
    (the graph untouched)."""

    name: str
    operators: frozenset[str]
    rewrite: Callable[[Any, Any, dict[str, list[Any]]], tuple[str, list[Any]] | None]


def _output(op: Any) -> str:
    """The one output tensor of a 1.0 operation."""
    (output,) = op.outputs.values()
    return output


def _read_instead(graph: Any, op: Any, source: str, readers: dict[str, list[Any]]) -> bool:
    """Let every operation that reads ``op``'s output read ``source`` instead (``op`` computes
    the same values): False, the graph untouched, where the output is one of the graph's."""
    output = _output(op)
    if output in graph.outputs:
        return False
    for reader in readers.get(output, []):
        for key, value in reader.inputs.items():
            if isinstance(value, list | tuple):
                reader.inputs[key] = type(value)(source if item == output else item for item in value)
            elif value == output:
                reader.inputs[key] = source
    return True


def _zero_padding(op: Any) -> list[tuple[int, int]] | None:
    """The spatial ``(before, after)`` pairs of a ``pad`` with zeros that leaves the batch and
    channel axes alone, or None."""
    padding = [tuple(int(side) for side in pair) for pair in op.attribs.get("padding", [])]
    if op.attribs.get("border", "constant") != "constant" or float(op.attribs.get("value", 0.0)) != 0.0:
        return None
    if len(padding) < 3 or any(padding[0]) or any(padding[1]) or min(min(pair) for pair in padding) < 0:
        return None
    return padding[2:]


def _pads_this_convolution(conv: Any, padded: str, rank: int) -> bool:
    """Whether ``conv`` reads ``padded`` only as its input and gives its padding (an empty padding
    is 'same': computed from the padded extent) over ``rank`` spatial axes, with a border that
    adds nothing for the padded terms."""
    if conv.name != "conv" or conv.inputs.get("input") != padded:
        return False
    if sum(value == padded for value in conv.inputs.values()) != 1:
        return False
    padding = conv.attribs.get("padding") or []
    return len(padding) == rank and conv.attribs.get("border", "constant") in ("constant", "ignore")


def _pad_into_convolution(graph: Any, op: Any, readers: dict[str, list[Any]]) -> tuple[str, list] | None:
    """Rule ``pad into convolution`` (see the module's docstring)."""
    padding = _zero_padding(op)
    padded = _output(op)
    convs = readers.get(padded, [])
    if padding is None or not convs or padded in graph.outputs:
        return None
    if not all(_pads_this_convolution(conv, padded, len(padding)) for conv in convs):
        return None
    for conv in convs:
        own = [tuple(pair) for pair in conv.attribs["padding"]]
        conv.attribs["padding"] = [(a + c, b + d) for (a, b), (c, d) in zip(padding, own, strict=True)]
        conv.inputs["input"] = op.inputs["input"]
    names = ", ".join(f"'{_output(conv)}'" for conv in convs)
    return f"pad '{padded}' of zeros {padding} written as the padding of conv {names}", []


def _copy_read_in_place(graph: Any, op: Any, readers: dict[str, list[Any]]) -> tuple[str, list] | None:
    """Rule ``copy read in place``: the operations that read a ``copy`` (an ONNX ``Dropout`` or
    ``Identity`` converted) read its input."""
    (source,) = op.inputs.values()
    if not isinstance(source, str) or not _read_instead(graph, op, source, readers):
        return None
    return f"copy '{_output(op)}' of '{source}': its readers read '{source}'", []


#: 1.0 reductions that give their input back where every reduced axis has extent 1
_IDENTITY_REDUCTIONS = {"sum_reduce", "mean_reduce", "max_reduce", "min_reduce"}


def _unit_reduction(graph: Any, op: Any, readers: dict[str, list[Any]]) -> tuple[str, list] | None:
    """Rule ``reduction of unit axes``: a reduction over axes of extent 1 only (a global pool after
    a pooling that left 1 x 1) is its input; its readers read that."""
    (source,) = op.inputs.values()
    shape = graph.tensors[source].shape
    axes = [int(axis) for axis in op.attribs.get("axes", [])]
    if not axes or any(axis >= len(shape) or shape[axis] != 1 for axis in axes):
        return None
    if not _read_instead(graph, op, source, readers):
        return None
    return f"{op.name} '{_output(op)}' over axes {axes} of extent 1: its readers read '{source}'", []


def _sum_as_additions(graph: Any, op: Any, readers: dict[str, list[Any]]) -> tuple[str, list] | None:
    """Rule ``add_n as additions``: ``add_n`` of three or more tensors (an ONNX ``Sum``, converted)
    is the additions in order, ``add(add(a, b), c)``, as a file writes the sum of a residual and a
    shortcut and another branch (``add_n`` of two already meets ``add``'s kernels)."""
    (values,) = op.inputs.values()
    output = _output(op)
    if not isinstance(values, list | tuple) or len(values) < 3:
        return None
    tensor = graph.tensors[output]
    additions, total = [], values[0]
    for index, value in enumerate(values[1:], start=1):
        result = output if index == len(values) - 1 else f"{output}_add{index}"
        if result != output:
            if result in graph.tensors:
                return None  # the file has a tensor of that name: leave the sum as written
            graph.tensors[result] = tensor._replace(name=result)
        inputs = type(op.inputs)([("x", total), ("y", value)])
        additions.append(op._replace(name="add", attribs=type(op.attribs)(), inputs=inputs,
                                     outputs=type(op.outputs)([("z", result)])))  # fmt: skip
        total = result
    return f"add_n '{output}' of {len(values)} tensors as {len(additions)} additions in order", additions


#: the 1.0 reduction each pooling over its input's whole extent computes
_WHOLE_EXTENT_REDUCTIONS = {"avg_pool": "mean_reduce", "max_pool": "max_reduce", "box": "sum_reduce"}


def _whole_extent_pool(graph: Any, op: Any, readers: dict[str, list[Any]]) -> tuple[str, list] | None:
    """Rule ``whole-extent pooling as a reduction``: a pooling whose window is its input's extent
    along every axis it pools, without padding or dilation (SqueezeNet's, Inception's and
    DenseNet's last ``AveragePool``, converted) is the reduction over those axes."""
    (source,) = op.inputs.values()
    shape = list(graph.tensors[source].shape)
    size = [int(extent) for extent in op.attribs["size"]]
    padding = [tuple(pair) for pair in op.attribs.get("padding", [])]
    dilation = [int(step) for step in op.attribs.get("dilation", [])]
    if op.name == "box" and op.attribs.get("normalize"):
        return None  # a normalised box is a mean: not the sum the rule writes
    if len(size) != len(shape) or len(padding) != len(shape) or any(any(pair) for pair in padding):
        return None
    if any(step != 1 for step in dilation):
        return None
    axes = [axis for axis, extent in enumerate(size) if extent != 1]
    if not axes or any(size[axis] != shape[axis] for axis in axes):
        return None
    stride = [int(step) for step in op.attribs.get("stride", [])] or [1] * len(shape)
    if any(stride[axis] != 1 for axis in range(len(shape)) if axis not in axes):
        return None  # a stride along an axis it does not pool subsamples that axis
    reduction = _WHOLE_EXTENT_REDUCTIONS[op.name]
    replaced = op._replace(name=reduction, attribs={"axes": axes}, inputs={"input": source})
    return f"{op.name} '{_output(op)}' over the whole extent {size}: {reduction} over axes {axes}", [replaced]


#: The rules, by the 1.0 operators they rewrite (a pooling rewritten to a reduction meets the
#: reduction's rule on the next pass).
SPELLING_RULES: tuple[SpellingRule, ...] = (
    SpellingRule("pad into convolution", frozenset({"pad"}), _pad_into_convolution),
    SpellingRule("copy read in place", frozenset({"copy"}), _copy_read_in_place),
    SpellingRule(
        "whole-extent pooling as a reduction", frozenset(_WHOLE_EXTENT_REDUCTIONS), _whole_extent_pool
    ),
    SpellingRule("reduction of unit axes", frozenset(_IDENTITY_REDUCTIONS), _unit_reduction),
    SpellingRule("add_n as additions", frozenset({"add_n"}), _sum_as_additions),
)


def _readers(graph: Any) -> dict[str, list[Any]]:
    """The operations that read each tensor (an operation once per tensor)."""
    readers: dict[str, list[Any]] = {}
    for op in graph.operations:
        names: list[str] = []
        for value in op.inputs.values():
            names.extend(value if isinstance(value, list | tuple) else [value])
        for name in dict.fromkeys(name for name in names if isinstance(name, str)):
            readers.setdefault(name, []).append(op)
    return readers


def _rewrite_once(graph: Any, steps: list[CanonicalStep]) -> bool:
    """One pass of the rules over the graph's operations, in order; whether any applied."""
    by_operator = {operator: rule for rule in SPELLING_RULES for operator in rule.operators}
    changed = False
    index = 0
    while index < len(graph.operations):
        op = graph.operations[index]
        rule = by_operator.get(op.name)
        done = rule.rewrite(graph, op, _readers(graph)) if rule is not None else None
        if done is None:
            index += 1
            continue
        described, replacement = done
        graph.operations[index : index + 1] = replacement
        index += len(replacement)
        steps.append(CanonicalStep(rule.name, _output(op), described, ()))
        changed = True
    return changed


def rewrite_spellings(graph: Any) -> list[CanonicalStep]:
    """Rewrite the parsed 1.0 ``graph`` in place by :data:`SPELLING_RULES` until none applies; the
    steps taken."""
    steps: list[CanonicalStep] = []
    while _rewrite_once(graph, steps):
        pass
    return steps
