"""Canonical forms of a composed NNEF graph: one meaning reaches one form, whichever way a file
spells it.

Files written by converters (Khronos' ``nnef-tools`` from ONNX, TensorFlow, Caffe) spell the same
network differently from a hand-written one: a ReLU6's bound as a scalar ``variable`` rather than the
literal 6.0, a bias or a normalisation parameter computed from a variable (``abs(v)``,
``add(v, 1.0)``), a scalar bias broadcast to the channels by ``reshape`` and ``tile``.  Lowered as
written, each such expression is recomputed for every element of the activation that reads it (or
becomes a kernel of its own).  :func:`canonicalize` rewrites the graph once, after composition and
before anything is lowered, so these forms reach the fused, blocked, in-place kernels of the plain
form:

- ``scalar parameter``: a variable of one element, read as the literal it holds (as a constant of
  one repeated value is);
- ``fold parameter arithmetic``: an elementwise ``math`` operation of parameters (variables and
  constants whose data the file holds) computed once, its result a constant;
- ``fold parameter layout``: a ``reshape``, ``unsqueeze`` or ``tile`` of a parameter computed once.

``squeeze`` is not folded: it is the view through which every NNEF 1.0 ``[1, C]`` parameter becomes
the ``[C]`` the standard library wants; the kernels read the variable through it in place, and the
batch-norm chain after it is computed inside the fused convolution (folding it would change the
code of every 1.0 file, not canonicalise a spelling).  The other operators that files spell in
several ways (``add_n`` of two, ``linear`` as a matmul and an add, a convolution without a bias
followed by ``batch_normalization``, ``max_pool`` with ``border = 'ignore'``) already reach the same
kernels through :mod:`uopviz.nnef.kernel_passes.fusion` and :mod:`uopviz.nnef.kernel_passes.padding`;
a zero ``pad`` before a convolution, a ``copy``, a pooling over the whole image, a reduction of
unit axes and an ``add_n`` of three or more are rewritten in the NNEF 1.0 graph before it is translated
(:mod:`uopviz.nnef.nnef1.canonical`), their steps first in ``graph.canonical``.

The rules are data (:data:`RULES`); each rewrite is a :class:`CanonicalStep` in
``graph.canonical``, which ``g.compile`` records in the trace (pass ``Canonicalize``).  Variables a
rule folded cannot be given at run time any more (``g.run`` says so): their values are in the
constants computed from them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from uopviz.core.rewrite import location_of
from uopviz.nnef.model.nodes import Operation, TensorInfo

if TYPE_CHECKING:
    from uopviz.nnef.model.graph import ComposedGraph

__all__ = ["RULES", "CanonicalRule", "CanonicalStep", "canonicalize", "folded_sources"]


@dataclass(frozen=True)
class CanonicalStep:
    """One rewrite: the rule's name, the operation (or tensor) it rewrote, what became of it, the
    variables whose values it took (they are no longer read at run time) and where the rule's code
    is written (``file:line``, as the trace of ``g.compile`` names it)."""

    rule: str
    label: str
    description: str
    sources: tuple[str, ...]
    location: str = ""


@dataclass(frozen=True)
class CanonicalRule:
    """A named rewrite of one operation: ``fold`` gives the output's value computed from its inputs'
    data, or None where the rule does not apply."""

    name: str
    operators: frozenset[str]
    fold: Callable[[Operation, list[np.ndarray], TensorInfo], np.ndarray | None]


# -- the operators computed once --------------------------------------------------------------------

_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "math.iden": lambda x: x, "math.neg": np.negative, "math.rcp": np.reciprocal, "math.sqr": np.square,
    "math.sqrt": np.sqrt, "math.rsqr": lambda x: np.reciprocal(np.square(x)),
    "math.rsqrt": lambda x: np.reciprocal(np.sqrt(x)), "math.exp": np.exp, "math.log": np.log,
    "math.abs": np.abs, "math.sign": np.sign, "math.floor": np.floor, "math.ceil": np.ceil,
}  # fmt: skip
_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "math.add": np.add, "math.sub": np.subtract, "math.mul": np.multiply, "math.div": np.divide,
    "math.pow": np.power, "math.min": np.minimum, "math.max": np.maximum,
}  # fmt: skip


def _elementwise(op: Operation, values: list[np.ndarray], output: TensorInfo) -> np.ndarray | None:
    """An elementwise operation of real parameters, each of the output's size or a single value (so
    the operands' alignment cannot matter: every element of one is read in order, or the one)."""
    size = math.prod(output.shape)
    if output.dtype != "real" or any(value.dtype.kind != "f" for value in values):
        return None
    if any(value.size not in (1, size) for value in values):
        return None
    operands = [value.reshape(()) if value.size == 1 and size != 1 else value.reshape(output.shape)
                for value in values]  # fmt: skip
    with np.errstate(all="ignore"):  # a division by zero gives inf, as the kernel would
        if op.type in _UNARY and len(operands) == 1:
            result = _UNARY[op.type](operands[0])
        elif op.type in _BINARY and len(operands) == 2:
            result = _BINARY[op.type](operands[0], operands[1])
        elif op.type == "math.clamp" and len(operands) == 3:
            result = np.minimum(np.maximum(operands[0], operands[1]), operands[2])
        else:
            return None
    return np.broadcast_to(result, output.shape)


def _layout(op: Operation, values: list[np.ndarray], output: TensorInfo) -> np.ndarray | None:
    """A reshape or unsqueeze (the elements in order) or a tile of one parameter."""
    (value,) = values
    if op.type == "layout.tile":
        repeats = [1] * value.ndim
        axes = op.attribs.get("axes") or range(value.ndim)
        for axis, count in zip(axes, op.attribs["repeats"], strict=False):
            repeats[axis] = int(count)
        return np.tile(value, repeats)
    return value.reshape(output.shape)


#: The rules, in the order they are tried on each operation.
RULES: tuple[CanonicalRule, ...] = (
    CanonicalRule(
        "fold parameter arithmetic", frozenset({*_UNARY, *_BINARY, "math.clamp"}), _elementwise
    ),
    CanonicalRule(
        "fold parameter layout", frozenset({"layout.reshape", "layout.unsqueeze", "layout.tile"}), _layout
    ),
)


# -- the pass ---------------------------------------------------------------------------------------


def _parameter(graph: ComposedGraph, name: object) -> TensorInfo | None:
    """The tensor ``name`` when the file holds its value and no ``@update`` assigns it."""
    tensor = graph.tensors.get(name) if isinstance(name, str) else None
    if tensor is None or tensor.kind not in ("variable", "constant") or tensor.data is None:
        return None
    if name in graph.updates or not tensor.is_static:
        return None
    return tensor


def _scalar_parameters(graph: ComposedGraph, steps: list[CanonicalStep]) -> None:
    """Rule ``scalar parameter``: a variable of one element becomes a constant (read as a literal)."""
    for name, tensor in graph.tensors.items():
        if tensor.kind == "variable" and _parameter(graph, name) is not None and tensor.data.size == 1:
            tensor.kind = "constant"
            described = f"variable '{name}' = {tensor.data.reshape(-1)[0]!r} read as a literal"
            steps.append(
                CanonicalStep("scalar parameter", name, described, (name,), location_of(_scalar_parameters))
            )


def _sources(graph: ComposedGraph, names: list[str], steps: list[CanonicalStep]) -> tuple[str, ...]:
    """The variables ``names`` stand for: themselves, or those of the folds that made them."""
    made = {step.label: step.sources for step in steps}
    out: list[str] = []
    for name in names:
        out.extend(made.get(name, (name,) if graph.tensors[name].kind == "variable" else ()))
    return tuple(dict.fromkeys(out))


def canonicalize(graph: ComposedGraph) -> list[CanonicalStep]:
    """Rewrite ``graph`` in place to its canonical form (see the module's docstring); the steps,
    also kept in ``graph.canonical``."""
    steps: list[CanonicalStep] = []
    _scalar_parameters(graph, steps)
    by_operator = {operator: rule for rule in RULES for operator in rule.operators}
    kept: list[Operation] = []
    for op in graph.operations:
        rule = by_operator.get(op.type)
        names = op.input_names() if rule is not None else []
        inputs = [_parameter(graph, name) for name in names]
        outputs = op.output_names()
        if rule is None or not inputs or None in inputs or len(outputs) != 1:
            kept.append(op)
            continue
        output = graph.tensors[outputs[0]]
        value = None
        if output.is_static and output.kind == "intermediate":
            value = rule.fold(op, [tensor.data for tensor in inputs], output)
        if value is None or tuple(value.shape) != tuple(output.shape):
            kept.append(op)
            continue
        output.data = np.ascontiguousarray(value, dtype=output.numpy_dtype)
        output.kind, output.producer = "constant", None
        sources = _sources(graph, names, steps)
        described = f"{op.type} '{op.label}' computed once"
        steps.append(CanonicalStep(rule.name, outputs[0], described, sources, location_of(rule.fold)))
    graph.operations = kept
    graph.canonical = [*graph.canonical, *steps]
    return steps


def folded_sources(graph: ComposedGraph) -> dict[str, str]:
    """The variables the canonical rewrites folded, each with the tensor it was folded into."""
    return {source: step.label for step in graph.canonical for source in step.sources}
