"""NNEF 1.0 spellings rewritten before translation: one meaning, one form of the 1.0 graph.

Converters write a convolution's zero padding in two ways: as the ``padding`` of the ``conv``, or
(ONNX models exported from TensorFlow, whose ``Pad`` nodes ``nnef-tools`` keeps) as a ``pad`` with
``border = 'constant'`` and ``value = 0.0`` before a ``conv`` without padding.  Translated as
written, the second is a padded copy of its own, written by a kernel with masked loads, and the
convolution reads that copy; the first is the convolution's padding, written in place by
:mod:`uopviz.nnef.kernel_passes.padding`.  The rules here rewrite the parsed 1.0 graph (the ``nnef``
package's operations, their ``attribs`` and ``inputs`` edited in place) before
:func:`~uopviz.nnef.nnef1.loader.translate`, where the 1.0 meaning is still plain:

- ``pad into convolution``: a zero ``pad`` of the spatial axes read only by convolutions (as
  their input, padding given) becomes their padding; the ``pad`` goes.

The forms the rules of the composed graph already bring together (scalar and computed parameters,
:mod:`uopviz.nnef.model.canonical`) are not repeated here.  Each rewrite is a
:class:`~uopviz.nnef.model.canonical.CanonicalStep` in ``graph.canonical``, which ``g.compile``
records in the trace (pass ``Canonicalize``) beside those of the composed graph.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from uopviz.nnef.model.canonical import CanonicalStep

__all__ = ["SPELLING_RULES", "SpellingRule", "rewrite_spellings"]


@dataclass(frozen=True)
class SpellingRule:
    """A named rewrite of one 1.0 operator: ``rewrite(graph, op, readers)`` edits the graph's other
    operations and gives a description of what it did, or None where the rule does not apply (the
    graph untouched); the operation itself is then dropped."""

    name: str
    operator: str
    rewrite: Callable[[Any, Any, dict[str, list[Any]]], str | None]


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


def _pad_into_convolution(graph: Any, op: Any, readers: dict[str, list[Any]]) -> str | None:
    """Rule ``pad into convolution`` (see the module's docstring)."""
    padding = _zero_padding(op)
    (padded,) = op.outputs.values()
    convs = readers.get(padded, [])
    if padding is None or not convs or padded in graph.outputs:
        return None
    if not all(_pads_this_convolution(conv, padded, len(padding)) for conv in convs):
        return None
    for conv in convs:
        own = [tuple(pair) for pair in conv.attribs["padding"]]
        conv.attribs["padding"] = [(a + c, b + d) for (a, b), (c, d) in zip(padding, own, strict=True)]
        conv.inputs["input"] = op.inputs["input"]
    names = ", ".join(f"'{next(iter(conv.outputs.values()))}'" for conv in convs)
    return f"pad '{padded}' of zeros {padding} written as the padding of conv {names}"


#: The rules, by the 1.0 operator they rewrite.
SPELLING_RULES: tuple[SpellingRule, ...] = (
    SpellingRule("pad into convolution", "pad", _pad_into_convolution),
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


def rewrite_spellings(graph: Any) -> list[CanonicalStep]:
    """Rewrite the parsed 1.0 ``graph`` in place by :data:`SPELLING_RULES`; the steps taken."""
    by_operator = {rule.operator: rule for rule in SPELLING_RULES}
    steps: list[CanonicalStep] = []
    kept = []
    for op in graph.operations:
        rule = by_operator.get(op.name)
        described = rule.rewrite(graph, op, _readers(graph)) if rule is not None else None
        if described is None:
            kept.append(op)
            continue
        steps.append(CanonicalStep(rule.name, next(iter(op.outputs.values())), described, ()))
    graph.operations[:] = kept
    return steps
