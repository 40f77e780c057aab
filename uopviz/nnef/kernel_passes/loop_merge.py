"""Merging contiguous output loops: two nested loops that every address walks as one run become one.

An NNEF operation lowers to one output loop per dimension of its result: a batch norm over a
1024x14x14 tensor is three loops, the innermost 14 long.  No power of two divides 14, so the
heuristic finds no vector for it (GCC then vectorizes a 14-long loop badly: 2.3x LLVM's time),
though every address the kernel makes is ``... + 196 * c + 14 * y + x``: ``y`` and ``x`` are
one loop of 196, and with ``c`` (the input and output, not the per-channel parameters) not.

:func:`merge_contiguous_loops` merges an outer LOOP range ``r1`` and the next inner one ``r2``
(extent ``W``) into one range of ``extent(r1) * W`` when

- every INDEX whose address uses them is an affine sum in which ``r1``'s coefficient is ``W`` times
  ``r2``'s (``c * (W * r1 + r2)``: the merged range takes their place exactly);
- nothing else uses them: no gate, no comparison, no value computed from a position.

It repeats while a pair merges (a copy's three loops become one), so a 1x1 convolution's output
pixels become one axis of 3136 that the heuristic tiles by whole registers.
"""

from __future__ import annotations

from dataclasses import replace

from uopviz.core.affine import range_sum
from uopviz.core.ops import AxisType, Ops
from uopviz.core.rewrite import substitute
from uopviz.core.uop import UOp
from uopviz.nnef.lowering.kernel_builder import LoweredKernel
from uopviz.nnef.lowering.kernel_math import uop_constant
from uopviz.passes.indexing import simplify_indices

__all__ = ["merge_contiguous_loops"]


def _extent(r: UOp) -> int | None:
    bound = r.src[0]
    return int(bound.arg[0]) if bound.op is Ops.CONST else None


def _address_nodes(nodes: list[UOp]) -> set[UOp]:
    """Every node of the address operands of the kernel's INDEX nodes."""
    inside: set[UOp] = set()
    for u in nodes:
        if u.op is Ops.INDEX and len(u.src) > 1:
            inside.update(u.src[1].toposort())
    return inside


def _mergeable(nodes: list[UOp], inside: set[UOp], outer: UOp, inner: UOp, width: int) -> bool:
    """Whether ``outer`` and ``inner`` appear only in addresses (``inside``: the nodes of the
    addresses), always as ``c * (width * outer + inner)``."""
    pair = {outer, inner}
    depends = {u for u in nodes if u in pair or any(s in pair for s in u.src)}
    for u in nodes:  # (sources come first: a node depends on the pair if a source does)
        if u not in depends and any(s in depends for s in u.src) and u.op is not Ops.INDEX:
            depends.add(u)
    for u in nodes:
        if u.op is Ops.INDEX:
            if len(u.src) > 1 and u.src[1] in depends:
                form = range_sum(u.src[1])
                if form is None or form[0].get(outer, 0) != width * form[0].get(inner, 0):
                    return False
            continue
        if u in inside or u in pair:
            continue
        if any(s in depends and (s in inside or s in pair) for s in u.src):
            return False  # a position used as a value or in a gate
    return True


def _merge_once(ast: UOp) -> UOp | None:
    nodes = ast.toposort()
    loops = sorted(
        (u for u in nodes if u.op is Ops.RANGE and u.arg[1] is AxisType.LOOP and _extent(u) is not None),
        key=lambda r: r.arg[0],
    )
    inside = _address_nodes(nodes)
    for outer, inner in zip(loops, loops[1:]):
        width = _extent(inner)
        if _mergeable(nodes, inside, outer, inner, width):
            merged = UOp.range(_extent(outer) * width, AxisType.LOOP, outer.arg[0])
            return simplify_indices(substitute(ast, {inner: merged, outer: uop_constant(outer.dtype, 0)}))
    return None


def merge_contiguous_loops(kernel: LoweredKernel) -> LoweredKernel:
    """``kernel`` with each pair of nested output loops that its addresses walk as one run merged
    (see the module docstring); the kernel itself when none is."""
    ast = kernel.ast
    while True:
        merged = _merge_once(ast)
        if merged is None:
            break
        ast = merged
    return kernel if ast is kernel.ast else replace(kernel, ast=ast)
