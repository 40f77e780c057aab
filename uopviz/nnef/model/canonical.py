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
- ``fold parameter layout``: a ``reshape``, ``unsqueeze`` or ``tile`` of a parameter computed once;
- ``affine chain as scale and shift``: a chain of additions, subtractions, multiplications and
  divisions of a tensor by per-channel parameters (a batch normalisation, however it is spelled:
  ``batch_normalization``, or its ``sub``/``div``/``mul``/``add``) becomes ``x * s + t``, ``s`` and
  ``t`` computed once (in float64) from the parameters, read through the ``squeeze`` views of NNEF
  1.0 ``[1, C]`` variables: one multiply-add per element where there were four operations and a
  division.

``squeeze`` itself is not folded: it is the view through which every NNEF 1.0 ``[1, C]`` parameter
becomes the ``[C]`` the standard library wants, and the kernels read a variable through it in place
(a conv's bias).  The other operators that files spell in
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


# -- per-channel affine chains ---------------------------------------------------------------------

#: how each step of an affine chain changes ``(scale, shift)`` of the running value
#: ``x * scale + shift`` when it combines it with a parameter ``p`` (``x`` on the left)
_AFFINE_STEPS: dict[str, Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]] = {
    "math.add": lambda scale, shift, p: (scale, shift + p),
    "math.sub": lambda scale, shift, p: (scale, shift - p),
    "math.mul": lambda scale, shift, p: (scale * p, shift * p),
    "math.div": lambda scale, shift, p: (scale / p, shift / p),
}  # fmt: skip

#: how a parameter expression's operations are computed (the folds of :data:`RULES`, and the
#: ``squeeze`` through which an NNEF 1.0 ``[1, C]`` parameter is read as ``[C]``)
_COMPUTED = {
    **{operator: rule.fold for rule in RULES for operator in rule.operators},
    "layout.squeeze": _layout,
}


def _parameter_value(
    graph: ComposedGraph, name: str, memo: dict[str, tuple[np.ndarray, tuple[str, ...]] | None]
) -> tuple[np.ndarray, tuple[str, ...]] | None:
    """The value of tensor ``name`` when it is computed from parameters alone (a variable, a
    ``squeeze`` of one, ``sqrt(add(variance, epsilon))``), with the variables it is computed from;
    None otherwise."""
    if name in memo:
        return memo[name]
    memo[name] = None  # (a cycle cannot arise in a graph in execution order; this ends any walk)
    tensor = _parameter(graph, name)
    if tensor is not None:
        memo[name] = (tensor.data, (name,) if tensor.kind == "variable" else ())
        return memo[name]
    tensor = graph.tensors.get(name)
    op = tensor.producer if tensor is not None else None
    compute = _COMPUTED.get(op.type) if op is not None else None
    if compute is None or tensor.kind != "intermediate" or not tensor.is_static:
        return None
    if len(op.output_names()) != 1:
        return None
    inputs = [_parameter_value(graph, input_name, memo) for input_name in op.input_names()]
    if not inputs or None in inputs:
        return None
    with np.errstate(all="ignore"):
        value = compute(op, [np.asarray(data, np.float64) for data, _ in inputs], tensor)
    if value is None or tuple(np.shape(value)) != tuple(tensor.shape):
        return None
    variables = tuple(dict.fromkeys(source for _, names in inputs for source in names))
    memo[name] = (np.asarray(value, np.float64), variables)
    return memo[name]


def _readers_of(graph: ComposedGraph) -> dict[str, list[Operation]]:
    """The operations that read each tensor."""
    readers: dict[str, list[Operation]] = {}
    for op in graph.operations:
        for name in dict.fromkeys(op.input_names()):
            readers.setdefault(name, []).append(op)
    return readers


def _affine_step(
    graph: ComposedGraph, op: Operation, memo: dict
) -> tuple[str, np.ndarray, int | None, tuple] | None:
    """``(x, p, align, variables)`` when ``op`` is ``x <op> p`` of a running tensor ``x`` and a
    parameter ``p`` that is one value or a vector aligned by ``rhs_align``; None otherwise."""
    if op.type not in _AFFINE_STEPS or len(op.inputs) != 2 or op.constants:
        return None
    if op.attribs.get("lhs_align") is not None:
        return None
    x, p = op.inputs
    if not isinstance(x, str) or x not in graph.tensors or graph.tensors[x].dtype != "real":
        return None  # an integer division is not a multiplication by a reciprocal
    found = _parameter_value(graph, p, memo) if isinstance(p, str) else None
    if not isinstance(x, str) or found is None or _parameter_value(graph, x, memo) is not None:
        return None
    value, variables = found
    align = op.attribs.get("rhs_align")
    if value.size == 1:
        return x, value.reshape(()), None, variables
    if value.ndim != 1 or align is None:
        return None
    return x, value, int(align), variables


def _chain_from(graph: ComposedGraph, first: Operation, readers: dict, memo: dict) -> list[Operation]:
    """The longest affine chain that ``first`` starts: each next step reads the step before as its
    ``x``, and is that tensor's only reader (no other operation, no graph output reads it)."""
    chain = [first]
    if graph.tensors[first.output_names()[0]].shape != graph.tensors[first.inputs[0]].shape:
        return []  # the step broadcasts its input to more elements: not a scale and shift of it
    while True:
        (output,) = chain[-1].output_names()
        following = readers.get(output, [])
        if len(following) != 1 or output in _kept_tensors(graph):
            return chain
        step = _affine_step(graph, following[0], memo)
        if step is None or step[0] != output:
            return chain
        if graph.tensors[following[0].output_names()[0]].shape != graph.tensors[first.inputs[0]].shape:
            return chain  # a step that broadcasts the running tensor to more elements ends the chain
        chain.append(following[0])


def _scale_and_shift(graph: ComposedGraph, chain: list[Operation], memo: dict) -> tuple | None:
    """``(scale, shift, align, variables)`` of a chain, every vector parameter of one length and
    alignment (float64, as computed once); None where they differ or none is a vector."""
    scale, shift = np.ones(()), np.zeros(())
    aligns: set[int] = set()
    lengths: set[int] = set()
    variables: list[str] = []
    for op in chain:
        _, value, align, names = _affine_step(graph, op, memo)
        if align is not None:
            aligns.add(align)
            lengths.add(value.size)
        variables.extend(names)
        scale, shift = _AFFINE_STEPS[op.type](scale, shift, value)
    if len(aligns) != 1 or len(lengths) != 1:
        return None
    (length,) = lengths
    scale, shift = np.broadcast_to(scale, (length,)), np.broadcast_to(shift, (length,))
    return scale, shift, aligns.pop(), tuple(dict.fromkeys(variables))


def _affine_chains(graph: ComposedGraph, steps: list[CanonicalStep]) -> None:
    """Rule ``affine chain as scale and shift``: a chain of additions, subtractions,
    multiplications and divisions of a tensor by per-channel parameters (a batch normalisation's
    ``(x - mean) / sqrt(variance + epsilon) * scale + bias``) is one multiply-add per element,
    ``x * s + t``, with ``s`` and ``t`` computed once from the parameters (ONNX Runtime folds the
    same into a convolution's weights).  Four operations and a division per element become one
    fused multiply-add; only chains that lose a division or an operation are rewritten."""
    memo: dict = {}
    readers = _readers_of(graph)
    done: set[int] = set()
    for op in list(graph.operations):
        if id(op) in done or _affine_step(graph, op, memo) is None:
            continue
        chain = _chain_from(graph, op, readers, memo)
        done.update(id(step) for step in chain)
        found = _scale_and_shift(graph, chain, memo) if chain else None
        if found is None:
            continue
        scale, shift, align, variables = found
        units = (("math.mul", np.all(scale == 1.0)), ("math.add", np.all(shift == 0.0)))
        needed = [kind for kind, unit in units if not unit]
        has_division = any(step.type == "math.div" for step in chain)
        if not needed or (len(needed) >= len(chain) and not has_division):
            continue
        (last,) = chain[-1].output_names()
        described = (
            f"{' -> '.join(step.type for step in chain)} of '{chain[0].inputs[0]}' by parameters: "
            f"{' and '.join(needed)} by values computed once"
        )
        _rewrite_chain(graph, chain, needed, scale, shift, align)
        steps.append(CanonicalStep("affine chain as scale and shift", last, described, variables,
                                   location_of(_affine_chains)))  # fmt: skip
    _drop_unread_parameter_operations(graph)


def _rewrite_chain(
    graph: ComposedGraph,
    chain: list[Operation],
    needed: list[str],
    scale: np.ndarray,
    shift: np.ndarray,
    align: int,
) -> None:
    """The chain's first operations become ``needed`` (a multiplication by ``scale``, an addition of
    ``shift``, in that order) writing the chain's last output; the other operations and the tensors
    between them go."""
    (last,) = chain[-1].output_names()
    running = chain[0].inputs[0]
    between = {name for step in chain for name in step.output_names()} - {last}
    math_module = graph.modules["math"]
    # the operator's bound symbols (shapes, ranks, alignments) are those of a step by a vector: every
    # binary math operator declares the same ones, and every tensor of the chain has the input's shape
    template = next(step for step in chain if step.attribs.get("rhs_align") == align).symbols
    for index, kind in enumerate(needed):
        op = chain[index]
        value = scale if kind == "math.mul" else shift
        constant = _new_tensor_name(graph, f"{last}.{'scale' if kind == 'math.mul' else 'shift'}")
        graph.tensors[constant] = TensorInfo(
            constant, "real", (value.size,), kind="constant", data=np.ascontiguousarray(value, np.float32)
        )
        output = last if index == len(needed) - 1 else op.output_names()[0]
        op.type, op.definition = kind, math_module.definition(kind.partition(".")[2])
        op.label = chain[-1].label if output == last else chain[0].label
        op.inputs, op.outputs = (running, constant), (output,)
        op.attribs = {**op.attribs, "lhs_align": None, "rhs_align": align}
        tensors = {"x": graph.tensors[running], "y": graph.tensors[constant], "z": graph.tensors[output]}
        op.symbols = {**template, **tensors}
        graph.tensors[output].producer = op
        running = output
    gone = chain[len(needed):]
    for name in between - {name for step in chain[: len(needed)] for name in step.output_names()}:
        del graph.tensors[name]
    gone_ids = {id(op) for op in gone}
    graph.operations = [op for op in graph.operations if id(op) not in gone_ids]


def _kept_tensors(graph: ComposedGraph) -> set[str]:
    """Tensors read from outside the operations: the graph's outputs, the variables an ``update``
    assigns and the values it assigns them."""
    return {*graph.outputs, *graph.updates, *graph.updates.values()}


def _new_tensor_name(graph: ComposedGraph, wanted: str) -> str:
    name, count = wanted, 1
    while name in graph.tensors:
        count += 1
        name = f"{wanted}{count}"
    return name


def _drop_unread_parameter_operations(graph: ComposedGraph) -> None:
    """Operations computing parameters (:data:`_COMPUTED`) that nothing reads any more (the
    ``squeeze`` and ``sqrt`` of a batch normalisation's parameters after its chain was rewritten)
    go, with their tensors."""
    kept = _kept_tensors(graph)
    while True:
        readers = _readers_of(graph)
        unread = [op for op in graph.operations if op.type in _COMPUTED and all(
            name not in readers and name not in kept and graph.tensors[name].kind == "intermediate"
            for name in op.output_names())]  # fmt: skip
        if not unread:
            return
        unread_ids = {id(op) for op in unread}
        graph.operations = [op for op in graph.operations if id(op) not in unread_ids]
        for op in unread:
            for name in op.output_names():
                del graph.tensors[name]


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
    _affine_chains(graph, steps)
    graph.canonical = [*graph.canonical, *steps]
    return steps


def folded_sources(graph: ComposedGraph) -> dict[str, str]:
    """The variables the canonical rewrites folded, each with the tensor it was folded into."""
    return {source: step.label for step in graph.canonical for source in step.sources}
