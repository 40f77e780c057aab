"""Graph surgery by substitution: replace some UOps of a graph and rebuild their users.

What a pass that transforms node by node uses (:func:`substitute`), what the trace replays a
recorded step with (:func:`substitute_closure`), and the graph of a walk stopped part way
(:func:`frontier_graph`).  :mod:`uopviz.core.rewrite` re-exports all three.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from uopviz.core.ops import Ops
from uopviz.core.uop import UOp, toposort


def substitute(root: UOp, mapping: dict[UOp, UOp]) -> UOp:
    """Replace each key of ``mapping`` found in ``root``'s graph by its value (once, not recursively
    into the values), rebuilding the users."""
    if not mapping:
        return root
    new: dict[UOp, UOp] = {}
    # a key is replaced whole: what is only below it is never rebuilt, so the walk stops there (a
    # stage putting new kernel bodies into the program graph walks the program, not every kernel)
    for u in toposort([root], lambda node: () if node in mapping else node.src):
        if u in mapping:
            new[u] = mapping[u]
            continue
        src = tuple(new[s] for s in u.src)
        new[u] = u if all(a is b for a, b in zip(src, u.src, strict=True)) else UOp(u.op, src, u.arg, u.tag)
    return new[root]


def frontier_graph(root: UOp, order: Sequence[UOp], new: Mapping[UOp, UOp], done: int) -> UOp:
    """The whole graph part way through a pass that rebuilds ``root`` node by node: ``order`` is the
    order it visits the nodes in (sources first), ``new`` each visited node's rebuilt form, and the
    first ``done`` nodes of ``order`` are rebuilt.

    A rebuilt node of unchanged dtype and shape replaces its original everywhere.  One whose dtype or
    shape changed (a RANGE that became a vector of lanes) cannot feed the nodes not rebuilt yet: they
    keep reading its original form, and the rebuilt node, still waiting for them, hangs from the root
    SINK, so the graph shows everything built so far next to what is still to do.  With every node
    done, this is the rebuilt root.
    """
    if done >= len(order):
        return new.get(root, root)
    rebuilt_ones = set(order[:done])
    needed = {s for u in order[done:] for s in u.src}
    shown: dict[UOp, UOp] = {}
    waiting: list[UOp] = []
    for u in toposort([root]):
        if u in rebuilt_ones:
            rebuilt = new.get(u, u)
            if rebuilt.dtype == u.dtype and rebuilt.shape == u.shape:
                shown[u] = rebuilt
                continue
            if u in needed:
                waiting.append(rebuilt)
        src = tuple(shown[s] for s in u.src)
        shown[u] = u if all(a is b for a, b in zip(src, u.src, strict=True)) else UOp(u.op, src, u.arg, u.tag)
    top = shown[root]
    if not waiting:
        return top
    reached = set(toposort([top, *(s for w in waiting for s in w.src)]))
    hanging = tuple(dict.fromkeys(w for w in waiting if w not in reached))
    if top.op is Ops.SINK:
        return UOp(Ops.SINK, (*top.src, *hanging), top.arg, top.tag)
    return UOp(Ops.SINK, (top, *hanging))


def substitute_closure(root: UOp, mapping: dict[UOp, UOp]) -> UOp:
    """Apply ``mapping`` until no key is left in the graph: what a sequence of rewrite steps did."""
    current = root
    for _ in range(len(mapping) + 1):
        present = set(current.toposort())
        if not any(key in present for key in mapping):
            return current
        current = substitute(current, mapping)
    return current


__all__ = ["frontier_graph", "substitute", "substitute_closure"]
