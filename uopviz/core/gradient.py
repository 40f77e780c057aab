"""Reverse-mode differentiation of UOp graphs.

``gradient(out, wrt)`` walks ``out``'s graph once in reverse topological order (an iterative
toposort, never recursion) and applies one named rule per differentiable op.  The rules are
data: :data:`gradient_rules` is a :class:`PatternMatcher` whose rules receive the forward node
(``node``) and the gradient flowing into it (``ctx``, a :class:`Tensor`) and return one gradient
per source (``None`` where none flows).  They are written with Tensor methods, so gradient graphs
use the same explicit broadcasting and the same decompositions as forward graphs.

Choices worth knowing:

* ``MAX`` (elementwise) splits the gradient evenly at ties (half to each operand), as tinygrad
  does, so ``relu'(0) = 0.5`` and ``|x|'(0) = 0``.  ``REDUCE MAX`` shares the gradient evenly
  among all the elements equal to the maximum.
* ``REDUCE MUL`` uses ``grad * prod / x``: undefined where an element is 0.
* ``POW``'s exponent gradient ``out * ln(a)`` is taken as 0 where ``a == 0``.
* ``DETACH`` stops gradients; ``CONTIGUOUS`` passes them; ``CONTIGUOUS_BACKWARD`` (identity in
  the forward pass) wraps the gradient flowing through it in ``CONTIGUOUS``, forcing it to be
  materialised in the backward pass.
* Comparisons, integer/bit ops, ``TRUNC``, ``BITCAST`` and casts from non-float types pass no
  gradient; only floating-point values carry gradients.
* ``@function`` calls are differentiated through their bodies: the graph's ``FUNCTION`` /
  ``GET_TUPLE`` nodes are first resolved by substituting each ``PARAM`` with its argument.
* A float op on the path to a target without a rule raises :class:`GradientError`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from uopviz.core.dtype import dtypes
from uopviz.core.errors import UopvizError
from uopviz.core.inline import resolve_functions
from uopviz.core.ops import Ops
from uopviz.core.rewrite import PatternMatcher, Rule, UPat
from uopviz.core.tensor import Tensor
from uopviz.core.uop import UOp, toposort

LN_2 = math.log(2.0)


class GradientError(UopvizError, ValueError):
    """A graph that cannot be differentiated: the message names the op and why."""


def _t(uop: UOp) -> Tensor:
    return Tensor._wrap(uop)


def _unbroadcast(grad: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Sum a gradient of a broadcast result back to an operand's ``shape`` (raw UOp graphs may rely on
    the elementwise ops' implicit broadcasting; Tensor graphs never do)."""
    if grad.shape == shape:
        return grad
    extra = grad.ndim - len(shape)
    summed = grad.sum(tuple(range(extra)), dtype=grad.dtype) if extra else grad
    axes = tuple(i for i, (g, s) in enumerate(zip(summed.shape, shape)) if s == 1 and g != 1)
    return summed.sum(axes, keepdim=True, dtype=grad.dtype).reshape(shape) if axes else summed.reshape(shape)


def _binary(ctx: Tensor, node: UOp, grad_a: Tensor | None, grad_b: Tensor | None) -> tuple:
    a, b = node.src
    return (None if grad_a is None else _unbroadcast(grad_a, a.shape),
            None if grad_b is None else _unbroadcast(grad_b, b.shape))


def _max_gradient(ctx: Tensor, node: UOp) -> tuple:
    a, b = _t(node.src[0]), _t(node.src[1])
    half = ctx * 0.5
    tie = a == b
    at_tie = tie.where(half, 0.0)
    return _binary(ctx, node, (a > b).where(ctx, at_tie), (b > a).where(ctx, at_tie))


def _where_gradient(ctx: Tensor, node: UOp) -> tuple:
    condition = _t(node.src[0])
    shape_b, shape_c = node.src[1].shape, node.src[2].shape
    return (None, _unbroadcast(condition.where(ctx, 0.0), shape_b),
            _unbroadcast(condition.where(0.0, ctx), shape_c))


def _pow_gradient(ctx: Tensor, node: UOp) -> tuple:
    a, b, out = _t(node.src[0]), _t(node.src[1]), _t(node)
    grad_a = ctx * b * a.pow(b - 1)
    grad_b = (a == 0).where(0.0, ctx * out * a.log())
    return _binary(ctx, node, grad_a, grad_b)


def _cast_gradient(ctx: Tensor, node: UOp) -> tuple:
    source = node.src[0]
    return (ctx.cast(source.dtype) if source.dtype.is_float else None,)


def _expand_gradient(ctx: Tensor, node: UOp) -> tuple:
    source = node.src[0]
    axes = tuple(i for i, (old, new) in enumerate(zip(source.shape, node.shape)) if old != new)
    return (ctx.sum(axes, keepdim=True, dtype=ctx.dtype) if axes else ctx, None)


def _permute_gradient(ctx: Tensor, node: UOp) -> tuple:
    inverse = [0] * len(node.arg)
    for position, axis in enumerate(node.arg):
        inverse[axis] = position
    return (ctx.permute(inverse),)


def _pad_gradient(ctx: Tensor, node: UOp) -> tuple:
    offsets, _ = node.marg
    return (_t(ctx.uop.shrink(offsets, node.src[0].shape)), None, None)


def _shrink_gradient(ctx: Tensor, node: UOp) -> tuple:
    offsets, _ = node.marg
    return (_t(ctx.uop.pad(offsets, node.src[0].shape)), None, None)


def _flip_gradient(ctx: Tensor, node: UOp) -> tuple:
    return (_t(ctx.uop.flip(node.arg)),)


def _stack_gradient(ctx: Tensor, node: UOp) -> tuple:
    rest = [None] * (ctx.ndim - 1)
    return tuple(ctx.shrink([(i, i + 1), *rest]).reshape(s.shape) for i, s in enumerate(node.src))


def _reduce_gradient(ctx: Tensor, node: UOp) -> tuple:
    op, axes = node.arg
    if len(node.src) != 1:
        raise GradientError("gradients are taken on tensor-level REDUCEs (one source), not kernel-level ones")
    source = _t(node.src[0])
    if op is Ops.ADD:
        return (ctx.expand(source.shape),)
    if op is Ops.MAX:
        winners = (source == _t(node).expand(source.shape)).cast(source.dtype)
        share = ctx / winners.sum(axes, keepdim=True, dtype=source.dtype)
        return (winners * share.expand(source.shape),)
    # MUL: d(prod)/dx_i = prod / x_i
    return ((ctx * _t(node)).expand(source.shape) / source,)


def _index_gradient(ctx: Tensor, node: UOp) -> tuple:
    """INDEX reads ``T[i0, i1, ..., rest]``: its gradient scatters ``g`` back to the rows it read, as the
    spec's scatter_add does: a one-hot mask of the flattened row number, multiplied and summed."""
    source, indices = node.src[0], node.src[1:]
    indexed = source.shape[:len(indices)]
    rest = source.shape[len(indices):]
    rows, rest_size = math.prod(indexed), math.prod(rest)
    index_dims = [i.shape for i in indices]  # each () or (k,)
    rank = sum(len(d) for d in index_dims)
    flat: Tensor | None = None
    strides = [math.prod(indexed[j + 1:]) for j in range(len(indices))]
    position = 0
    for index, dims, row_stride in zip(indices, index_dims, strides, strict=True):
        shape = [1] * rank
        if dims:
            shape[position] = dims[0]
            position += 1
        term = _t(index).cast(dtypes.int32).reshape(*shape) * row_stride if rank else \
            _t(index).cast(dtypes.int32) * row_stride
        flat = term if flat is None else flat + term
    count = math.prod(d[0] for d in index_dims if d)
    row_numbers = Tensor.arange(rows).cast(dtypes.int32).reshape(rows, 1)
    one_hot = (row_numbers == flat.reshape(1, count)).cast(ctx.dtype)
    spread = (one_hot.reshape(rows, count, 1) * ctx.reshape(1, count, rest_size)).sum(1, dtype=ctx.dtype)
    return (spread.reshape(*source.shape), *(None for _ in indices))


def _slice_gradient(ctx: Tensor, node: UOp) -> tuple:
    """SLICE views ``size`` elements from ``offset``: the gradient lands there in a zero-filled flat copy.
    A SLICE that reinterprets the dtype carries no gradient, like BITCAST."""
    source, offset = node.src
    if node.dtype != source.dtype:
        return (None, None)
    if offset.op is not Ops.CONST:
        raise GradientError("the gradient of a SLICE needs a constant offset")
    start = offset.const_value
    padded = _t(ctx.uop.pad((start,), (source.size,)))
    return (padded.reshape(*source.shape), None)


def _replicated_gradient(ctx: Tensor, node: UOp) -> tuple:
    """REPLICATED keeps one value for identical replicas; we read it as their mean, so each replica
    receives an equal share of the gradient (any choice gives the same forward value)."""
    source = node.src[0]
    copies = math.prod(source.shape[a] for a in node.arg)
    return (ctx.expand(*source.shape) / copies,)


def _copy_gradient(ctx: Tensor, node: UOp) -> tuple:
    device = node.src[0].device
    return (ctx if device is None else ctx.copy(device),)


def _rule(op: Ops, function: Any, name: str) -> tuple:
    return (UPat(op, name="node"), function, name)


# one named rule per differentiable op; each returns one gradient per source of the node
gradient_rules = PatternMatcher([
    # arithmetic
    _rule(Ops.ADD, lambda ctx, node: _binary(ctx, node, ctx, ctx), "d(a+b) = (g, g)"),
    _rule(Ops.SUB, lambda ctx, node: _binary(ctx, node, ctx, -ctx), "d(a-b) = (g, -g)"),
    _rule(Ops.MUL, lambda ctx, node: _binary(ctx, node, ctx * _t(node.src[1]), ctx * _t(node.src[0])),
          "d(a*b) = (g*b, g*a)"),
    _rule(Ops.DIV, lambda ctx, node: _binary(
        ctx, node, ctx / _t(node.src[1]), -ctx * _t(node.src[0]) / (_t(node.src[1]) * _t(node.src[1]))),
        "d(a/b) = (g/b, -g*a/b^2)"),
    _rule(Ops.NEG, lambda ctx, node: (-ctx,), "d(-a) = -g"),
    _rule(Ops.RECIP, lambda ctx, node: (-ctx * _t(node) * _t(node),), "d(1/a) = -g/a^2"),
    _rule(Ops.MAX, _max_gradient, "d max(a,b): to the larger, split at ties"),
    _rule(Ops.WHERE, _where_gradient, "d where(c,a,b) = (-, where(c,g,0), where(c,0,g))"),
    _rule(Ops.MULACC, lambda ctx, node: (_unbroadcast(ctx * _t(node.src[1]), node.src[0].shape),
                                         _unbroadcast(ctx * _t(node.src[0]), node.src[1].shape),
                                         _unbroadcast(ctx, node.src[2].shape)), "d(a*b+c) = (g*b, g*a, g)"),
    # transcendental
    _rule(Ops.EXP2, lambda ctx, node: (ctx * _t(node) * LN_2,), "d 2^a = g * 2^a * ln2"),
    _rule(Ops.LOG2, lambda ctx, node: (ctx / (_t(node.src[0]) * LN_2),), "d log2(a) = g / (a ln2)"),
    _rule(Ops.EXP, lambda ctx, node: (ctx * _t(node),), "d e^a = g * e^a"),
    _rule(Ops.LOG, lambda ctx, node: (ctx / _t(node.src[0]),), "d ln(a) = g / a"),
    _rule(Ops.SIN, lambda ctx, node: (ctx * _t(node.src[0]).cos(),), "d sin(a) = g * cos(a)"),
    _rule(Ops.COS, lambda ctx, node: (-ctx * _t(node.src[0]).sin(),), "d cos(a) = -g * sin(a)"),
    _rule(Ops.TAN, lambda ctx, node: (ctx * (1 + _t(node) * _t(node)),), "d tan(a) = g * (1 + tan(a)^2)"),
    _rule(Ops.SQRT, lambda ctx, node: (ctx / (_t(node) * 2),), "d sqrt(a) = g / (2 sqrt(a))"),
    _rule(Ops.POW, _pow_gradient, "d a^b = (g*b*a^(b-1), g*a^b*ln(a))"),
    _rule(Ops.CAST, _cast_gradient, "d cast(a) = cast back (floats only)"),
    # movement
    _rule(Ops.RESHAPE, lambda ctx, node: (ctx.reshape(node.src[0].shape), None), "d reshape = reshape back"),
    _rule(Ops.EXPAND, _expand_gradient, "d expand = sum over the expanded axes"),
    _rule(Ops.PERMUTE, _permute_gradient, "d permute = inverse permute"),
    _rule(Ops.PAD, _pad_gradient, "d pad = shrink"),
    _rule(Ops.SHRINK, _shrink_gradient, "d shrink = pad"),
    _rule(Ops.FLIP, _flip_gradient, "d flip = flip"),
    _rule(Ops.STACK, _stack_gradient, "d stack = the slices of g"),
    # reduce
    _rule(Ops.REDUCE, _reduce_gradient, "d reduce: ADD expands, MAX to the maxima, MUL prod/x"),
    # markers and loads
    _rule(Ops.CONTIGUOUS, lambda ctx, node: (ctx,), "d contiguous = g"),
    _rule(Ops.CONTIGUOUS_BACKWARD, lambda ctx, node: (ctx.contiguous(),),
          "d contiguous_backward = contiguous(g)"),
    _rule(Ops.DETACH, lambda ctx, node: (None,), "detach stops the gradient"),
    _rule(Ops.COPY, _copy_gradient, "d copy = copy back"),
    _rule(Ops.INDEX, _index_gradient, "d index = scatter g to the rows read (one-hot, as scatter_add)"),
    _rule(Ops.SLICE, _slice_gradient, "d slice = g padded into place"),
    _rule(Ops.REPLICATED, _replicated_gradient, "d replicated = g shared by the replicas"),
], name="gradient rules")

# ops through which no gradient flows (their results are not differentiable in their sources)
_NO_GRADIENT = frozenset({Ops.CMP_LT, Ops.CMP_NE, Ops.CMP_GT, Ops.CMP_GE, Ops.CMP_LE, Ops.CMP_EQ, Ops.NOT,
                          Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR, Ops.IDIV, Ops.MOD, Ops.TRUNC,
                          Ops.BITCAST, Ops.THREEFRY, Ops.CONST, Ops.BUFFER, Ops.PARAM})

_RULES_BY_OP: dict[Ops, list[Rule]] = {}
for _rule_entry in gradient_rules.rules:
    for _op in _rule_entry.pattern.ops or ():
        _RULES_BY_OP.setdefault(_op, []).append(_rule_entry)


def _apply_rule(node: UOp, grad: Tensor) -> tuple:
    for rule in _RULES_BY_OP.get(node.op, ()):
        result = rule.apply(node, grad)
        if result is not None:
            if len(result) != len(node.src):
                raise GradientError(f"gradient rule {rule.name!r} ({rule.location}) gave {len(result)} "
                                    f"gradients for the {len(node.src)} sources of {node.op.name}")
            return result
    raise GradientError(f"no gradient rule for {node.op.name} ({node.dtype.name} {node.shape}), which lies "
                        f"between the output and a target")


def _as_uop(value: Tensor | UOp, what: str) -> UOp:
    if isinstance(value, Tensor):
        return value.uop
    if isinstance(value, UOp):
        return value
    raise TypeError(f"{what} must be a Tensor or a UOp, got {type(value).__name__}")


def gradient(out: Tensor | UOp, wrt: Sequence[Tensor | UOp], grad_out: Tensor | UOp | None = None) -> list:
    """The gradients of ``out`` with respect to each of ``wrt`` (same shapes as them).

    ``grad_out`` is the gradient flowing into ``out`` (default: ones, i.e. the gradient of
    ``out.sum()``).  Each result is a Tensor when its ``wrt`` entry is a Tensor, a UOp when it is a
    UOp; a target ``out`` does not depend on (or only through non-float values) gets zeros.
    """
    root = _as_uop(out, "out")
    targets = [_as_uop(w, "each wrt entry") for w in wrt]
    if any(u.op is Ops.FUNCTION for u in toposort([root])):
        # differentiate through @function bodies: substitute each PARAM with its argument
        root = resolve_functions(root)
        targets = [resolve_functions(t) for t in targets]
    if grad_out is None:
        seed = Tensor.full(root.shape, 1, dtype=root.dtype, device=root.device)
    else:
        seed = grad_out if isinstance(grad_out, Tensor) else Tensor(grad_out)
        if seed.shape != root.shape:
            raise ValueError(f"grad_out has shape {seed.shape}, the output {root.shape}")
        seed = seed.cast(root.dtype)
    grads = _backpropagate(root, seed, targets)
    results: list = []
    for original, target in zip(wrt, targets):
        grad = grads.get(target)
        if grad is None:
            grad = Tensor.full(target.shape, 0, dtype=target.dtype, device=target.device)
        results.append(grad if isinstance(original, Tensor) else grad.uop)
    return results


def _backpropagate(root: UOp, seed: Tensor, targets: list[UOp]) -> dict[UOp, Tensor]:
    """Walk the graph from ``root`` in reverse topological order, accumulating gradients."""
    order = toposort([root])
    target_set = set(targets)
    # a node matters when a target is among its (transitive) sources, through float values
    reaches: dict[UOp, bool] = {}
    for node in order:
        reaches[node] = node in target_set or (
            node.op not in _NO_GRADIENT and node.dtype.is_float and any(reaches[s] for s in node.src))
    grads: dict[UOp, Tensor] = {root: seed}
    for node in reversed(order):
        grad = grads.get(node)
        if grad is None or not reaches[node] or not node.src:
            continue
        if node.op in _NO_GRADIENT:
            continue
        for source, source_grad in zip(node.src, _apply_rule(node, grad)):
            if source_grad is None or not reaches[source]:
                continue
            if source_grad.shape != source.shape:
                raise GradientError(f"the gradient for a source of {node.op.name} has shape "
                                    f"{source_grad.shape}, the source {source.shape}")
            if source_grad.dtype != source.dtype and source.dtype.is_float:
                source_grad = source_grad.cast(source.dtype)
            previous = grads.get(source)
            grads[source] = source_grad if previous is None else previous + source_grad
    return grads


__all__ = ["GradientError", "gradient", "gradient_rules"]
