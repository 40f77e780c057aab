"""Inlining ``@function`` calls: FUNCTION scopes and :func:`resolve_functions`.

A ``FUNCTION(TUPLE(body...), arguments...)`` is its own scope (its PARAMs are its own arguments').
:func:`resolve_functions` undoes the abstraction: a traced rewrite whose named rules substitute each
``PARAM k`` of a FUNCTION's body with argument ``k`` wherever ``GET_TUPLE`` reads an element.
Thanks to hash-consing the result *is* the graph the Python function would have built directly.

This is IR-level code on UOps: the front end (``@function``, gradients) and Callify both use it.
"""

from __future__ import annotations

from uopviz.core.ops import Ops
from uopviz.core.rewrite import PatternMatcher, UPat, graph_rewrite
from uopviz.core.uop import UOp, UOpError, toposort

# ---------------------------------------------------------------------------------------------
# scoped substitution: a FUNCTION's body is its own scope (its PARAMs are its own arguments')


def substitute_in_scope(root: UOp, mapping: dict[UOp, UOp]) -> UOp:
    """Replace the keys of ``mapping`` in ``root``'s graph, without entering the bodies of nested
    FUNCTIONs (their PARAMs belong to them; hash-consing may make them the very same UOps)."""
    if not mapping:
        return root
    done: dict[UOp, UOp] = {}
    stack: list[tuple[UOp, bool]] = [(root, False)]
    while stack:
        node, ready = stack.pop()
        if node in done:
            continue
        if node in mapping:
            done[node] = mapping[node]
            continue
        scoped = node.src[1:] if node.op is Ops.FUNCTION else node.src
        if not ready:
            stack.append((node, True))
            stack.extend((s, False) for s in scoped if s not in done)
            continue
        new_src = (node.src[:1] if node.op is Ops.FUNCTION else ()) + tuple(done[s] for s in scoped)
        changed = any(a is not b for a, b in zip(new_src, node.src))
        done[node] = UOp(node.op, new_src, node.arg, node.tag) if changed else node
    return done[root]


def nodes_in_scope(root: UOp) -> list[UOp]:
    """The UOps of ``root``'s graph outside nested FUNCTION bodies, sources first."""
    return toposort([root], lambda node: node.src[1:] if node.op is Ops.FUNCTION else node.src)



# ---------------------------------------------------------------------------------------------
# inlining


def _params_to_arguments(function_uop: UOp, element: UOp) -> dict[UOp, UOp]:
    arguments = function_uop.src[1:]
    mapping: dict[UOp, UOp] = {}
    for node in nodes_in_scope(element):
        if node.op is not Ops.PARAM:
            continue
        slot = node.arg.slot
        if not 0 <= slot < len(arguments):
            raise UOpError(f"FUNCTION body refers to PARAM {slot}, but the FUNCTION has "
                           f"{len(arguments)} arguments")
        argument = arguments[slot]
        if argument.shape != node.shape or argument.dtype != node.dtype:
            raise UOpError(f"FUNCTION argument {slot} is {argument.dtype.name}{argument.shape}, its PARAM "
                           f"expects {node.dtype.name}{node.shape}")
        mapping[node] = argument
    return mapping


def _inline_function_output(get: UOp, function_uop: UOp) -> UOp:
    element = function_uop.src[0].src[get.arg]
    return substitute_in_scope(element, _params_to_arguments(function_uop, element))


resolve_rules = PatternMatcher([
    (UPat(Ops.GET_TUPLE, src=(UPat(Ops.FUNCTION, name="function_uop"),), name="get"),
     _inline_function_output, "inline a FUNCTION's element: PARAM k -> argument k"),
    (UPat(Ops.GET_TUPLE, src=(UPat(Ops.TUPLE, name="values"),), name="get"),
     lambda get, values: values.src[get.arg], "GET_TUPLE of a TUPLE -> the element"),
], name="resolve functions")


def resolve_functions(uop: UOp) -> UOp:
    """Substitute every FUNCTION call read by GET_TUPLE with its body (PARAM k → argument k).

    Bottom-up, so functions called inside function bodies are inlined first.  Recorded as the pass
    ``"resolve functions"`` when tracing; the pipeline's Callify stage calls it.
    """
    if not any(u.op in (Ops.FUNCTION, Ops.GET_TUPLE) for u in toposort([uop])):
        return uop
    return graph_rewrite(uop, resolve_rules, name="resolve functions")


__all__ = ["nodes_in_scope", "resolve_functions", "resolve_rules", "substitute_in_scope"]
