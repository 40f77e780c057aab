"""The spec's ``@function`` decorator: graph capture of a Python function on Tensors.

Calling a decorated ``f(x, y)`` does exactly the spec's five steps:

1. **Extract inputs**: walk the arguments (positional, keyword, nested lists/tuples/dicts) and
   collect every Tensor, deduplicated by identity, in order of appearance.
2. **Run the function** lazily on those Tensors (nothing executes; it only builds a graph).
3. **Parameterize**: substitute each input's UOp with ``PARAM(k)`` (``UOp.param`` with the
   input's shape, dtype and device).  Tensors the body uses without receiving them (captured from
   the enclosing scope, or made from data inside the function) are BUFFERs still in the body;
   they become further parameters after the inputs, so the body holds only ``PARAM`` references.
4. **Wrap the body** in a ``TUPLE`` (even for a single return) and build
   ``FUNCTION(TUPLE(body), x, y, ...)``.
5. **Return** ``GET_TUPLE(0)`` of it as a Tensor, or one ``GET_TUPLE`` per element (a tuple of
   Tensors) when the function returns a tuple or list.

Traced bodies are cached per input signature (shapes, dtypes, devices and the non-Tensor
arguments), so a second call with like inputs reuses the body without running Python.  Captured
tensors are those of the first trace.

:func:`resolve_functions` (``uopviz.core.inline``, re-exported here) undoes the abstraction: each
``PARAM k`` of a FUNCTION's body becomes argument ``k`` wherever ``GET_TUPLE`` reads an element.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from uopviz.core.inline import nodes_in_scope, resolve_functions, resolve_rules, substitute_in_scope
from uopviz.core.ops import Ops
from uopviz.core.tensor import Tensor
from uopviz.core.uop import UOp

# ---------------------------------------------------------------------------------------------
# the decorator


def _collect_tensors(value: Any, found: list[Tensor], seen: set[int]) -> None:
    """Every Tensor in ``value`` (nested lists, tuples, dict values), first appearance first."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, Tensor):
            if id(item) not in seen:
                seen.add(id(item))
                found.append(item)
        elif isinstance(item, list | tuple):
            stack.extend(reversed(item))
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))


def _structure(value: Any, slots: dict[int, int]) -> Any:
    """A hashable description of the arguments with each Tensor replaced by its slot."""
    if isinstance(value, Tensor):
        return ("tensor", slots[id(value)])
    if isinstance(value, list | tuple):
        return (type(value).__name__, tuple(_structure(v, slots) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, _structure(v, slots)) for k, v in value.items()))
    return ("value", value)


@dataclass(frozen=True)
class TracedBody:
    """A cached trace: the ``TUPLE`` body over PARAMs, the captured BUFFERs passed after the inputs,
    and whether the Python function returned a tuple."""

    body: UOp
    captured: tuple[UOp, ...]
    returns_tuple: bool


class Function:
    """A Python function on Tensors captured as one FUNCTION node per call (see the module doc)."""

    def __init__(self, python_function: Callable[..., Any]):
        self.python_function = python_function
        self.cache: dict[Any, TracedBody] = {}
        functools.update_wrapper(self, python_function)

    def __repr__(self) -> str:
        return f"<@function {getattr(self.python_function, '__qualname__', self.python_function)}>"

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        # used as a method: bind like a plain function would
        return self if instance is None else functools.partial(self, instance)

    def __call__(self, *args: Any, **kwargs: Any) -> Tensor | tuple[Tensor, ...]:
        inputs: list[Tensor] = []
        _collect_tensors((args, kwargs), inputs, set())  # step 1: inputs, deduplicated by identity
        slots = {id(t): k for k, t in enumerate(inputs)}
        signature = tuple((t.shape, t.dtype, t.device) for t in inputs)
        key: Any = (signature, _structure((args, kwargs), slots))
        try:
            traced = self.cache.get(key)
        except TypeError:  # an unhashable non-Tensor argument: trace every call
            key, traced = None, None
        if traced is None:
            traced = self.trace(inputs, args, kwargs)
            if key is not None:
                self.cache[key] = traced
        arguments = tuple(t.uop for t in inputs) + traced.captured
        call = UOp(Ops.FUNCTION, (traced.body, *arguments))  # step 4
        requires_grad = any(t.requires_grad for t in inputs)
        outputs = []
        for index in range(len(traced.body.src)):  # step 5: one GET_TUPLE per element
            out = Tensor._wrap(UOp(Ops.GET_TUPLE, (call,), index), *inputs)
            out._requires_grad = True if requires_grad else None
            outputs.append(out)
        return tuple(outputs) if traced.returns_tuple else outputs[0]

    def trace(self, inputs: list[Tensor], args: tuple, kwargs: dict) -> TracedBody:
        """Steps 2–4: run the Python function, substitute PARAMs for the inputs, wrap in a TUPLE."""
        result = self.python_function(*args, **kwargs)  # step 2: lazy, builds a graph only
        returns_tuple = isinstance(result, tuple | list)
        results = list(result) if returns_tuple else [result]
        if not results or not all(isinstance(r, Tensor) for r in results):
            kinds = ", ".join(type(r).__name__ for r in results) or "nothing"
            name = self.python_function.__qualname__
            raise TypeError(f"@function {name} must return a Tensor or a tuple of Tensors, got {kinds}")
        mapping: dict[UOp, UOp] = {}
        for slot, tensor in enumerate(inputs):  # step 3: each input UOp becomes PARAM(k)
            mapping.setdefault(tensor.uop, UOp.param(slot, tensor.shape, tensor.dtype, tensor.device))
        body = substitute_in_scope(UOp(Ops.TUPLE, tuple(r.uop for r in results)), mapping)
        # buffers the body still refers to were captured: pass them as further arguments
        captured = tuple(u for u in nodes_in_scope(body) if u.op is Ops.BUFFER)
        if captured:
            extra = {buffer: UOp.param(len(inputs) + i, buffer.shape, buffer.dtype, buffer.device)
                     for i, buffer in enumerate(captured)}
            body = substitute_in_scope(body, extra)
        return TracedBody(body, captured, returns_tuple)


def function(python_function: Callable[..., Any]) -> Function:
    """Decorate a Python function on Tensors: each call becomes ``FUNCTION(TUPLE(body), args...)``
    read back by ``GET_TUPLE`` (the spec's ``@function``)."""
    if not callable(python_function):
        raise TypeError(f"@function decorates a callable, got {type(python_function).__name__}")
    return Function(python_function)


# ---------------------------------------------------------------------------------------------
# resolving: substitute each PARAM k back with argument k


__all__ = ["Function", "TracedBody", "function", "nodes_in_scope", "resolve_functions", "resolve_rules",
           "substitute_in_scope"]
