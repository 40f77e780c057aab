"""Where the nodes of a user's graph came from: a side table from UOp to :class:`Origin`.

The front ends record, as they build a graph, which user-level operation made each node: the
Tensor method a user called (``softmax``, with the user's ``file:line``) or the NNEF operation a
model declares (its label, operator and line in the ``.nnef`` / ``.sknd`` text).  The table holds
its UOps weakly (a graph that is dropped leaves it); a node keeps every origin recorded for it, the
first first: UOps are hash-consed, so a node two programs build alike (a constant, a loop bound) is
both programs', and provenance takes the one whose call's result is in the program it explains.

Provenance (``uopviz.engine.provenance``) follows a generated instruction back through the
lowering's rewrite steps to one of these nodes.  This module imports nothing of the layers above
the IR: the Tensor class and the NNEF loader call :func:`record_origin`.
"""

from __future__ import annotations

import functools
import sys
import threading
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from uopviz.core.uop import UOp

#: The folder of the uopviz package: frames inside it are not the user's code.
PACKAGE_FOLDER = str(Path(__file__).resolve().parent.parent)


@dataclass(frozen=True)
class Origin:
    """A user-level operation that built part of a graph.

    ``kind`` is ``"tensor"`` (a Tensor method: ``name`` is the method, ``location`` the user's
    ``file:line`` that called it, '' when no frame outside uopviz called it) or ``"nnef"`` (an NNEF
    operation, recorded by :func:`record_nnef_operation`: ``name`` its label, ``operator`` its
    qualified operator, ``location`` its ``file:line`` in the model's text)."""

    kind: str
    name: str
    location: str = ""
    operator: str = ""
    #: weak references to what the call returned (the kernel ASTs of an NNEF operation): a node two
    #: programs share (hash-consed: a loop's RANGE, a constant) keeps the first program's origin,
    #: which another program's provenance can tell is not its own (none of these roots is in it)
    roots: tuple[weakref.ref, ...] = field(default=(), compare=False, repr=False)

    def returned(self) -> list[UOp]:
        """The UOps the recorded call returned, those still alive."""
        return [uop for uop in (reference() for reference in self.roots) if uop is not None]

    def describe(self) -> str:
        """The origin in a few words: ``Tensor.softmax at cell.py:4``, ``NNEF conv1 = nn.conv at
        graph.sknd:7``."""
        where = f" at {self.location}" if self.location else ""
        if self.kind == "nnef":
            return f"NNEF {self.name} = {self.operator}{where}"
        return f"{'Tensor(...)' if self.name == 'Tensor' else 'Tensor.' + self.name}{where}"

    def to_json(self) -> dict[str, str]:
        """The origin as the front end shows it."""
        return {"kind": self.kind, "name": self.name, "location": self.location,
                "operator": self.operator, "text": self.describe()}


#: How many origins one node keeps at most (the first and the latest): a node every program shares
#: (a constant 0) would otherwise collect one per call.
MAX_ORIGINS = 16

# id(uop) -> (a weak reference to it, its origins, first recorded first); by id, not by UOp: a UOp's
# == builds a comparison
_origins: dict[int, tuple[weakref.ref, list[Origin]]] = {}


def _forget(key: int, reference: weakref.ref) -> None:
    """Drop a node that is gone (unless its id already holds another node's entry)."""
    entry = _origins.get(key)
    if entry is not None and entry[0] is reference:
        del _origins[key]


def origins_of(uop: UOp) -> list[Origin]:
    """Every origin recorded for ``uop``, the first first: a node two programs share (UOps are
    hash-consed) has one per call that built it."""
    entry = _origins.get(id(uop))
    return list(entry[1]) if entry is not None and entry[0]() is uop else []


def origin_of(uop: UOp) -> Origin | None:
    """The first origin recorded for ``uop``, or None."""
    found = origins_of(uop)
    return found[0] if found else None


def _add(node: UOp, origin: Origin) -> None:
    """Note ``origin`` for ``node`` (once), keeping at most :data:`MAX_ORIGINS`."""
    key = id(node)
    entry = _origins.get(key)
    if entry is None or entry[0]() is not node:
        _origins[key] = (weakref.ref(node, functools.partial(_forget, key)), [origin])
        return
    found = entry[1]
    for known in found:  # by identity (an equal Origin of another call is another origin); a loop,
        if known is origin:  # not any(...): carrying a fused kernel's origins calls this 300,000 times
            return
    if len(found) >= MAX_ORIGINS:  # the oldest but the first goes: the program explained is a recent one
        del found[1]
    found.append(origin)


def record_origin(roots: UOp | Iterable[UOp], origin: Origin, inputs: Iterable[UOp] = (),
                  unless: Callable[[Origin], bool] | None = None) -> None:
    """Give ``origin`` to every node under ``roots`` down to ``inputs`` (what the call was given,
    built before it): the nodes the call built, and the shared ones it reused (a constant); with
    ``unless``, not to a node that has an origin ``unless`` accepts already."""
    stack = [roots] if isinstance(roots, UOp) else list(roots)
    origin = replace(origin, roots=tuple(weakref.ref(root) for root in stack))
    seen = {id(node) for node in inputs}
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if unless is None or not any(unless(known) for known in origins_of(node)):
            _add(node, origin)
        stack.extend(node.src)


def carry_origins(before: UOp, after: UOp) -> None:
    """Give the nodes of ``after``, a rebuilt copy of ``before`` (a substitution that renamed its
    loops, say), the origins of the nodes they stand where: both graphs are walked side by side
    while their nodes have the same op and number of sources."""
    stack, seen = [(before, after)], set()
    while stack:
        old, new = stack.pop()
        if (id(old), id(new)) in seen or old.op is not new.op or len(old.src) != len(new.src):
            continue
        seen.add((id(old), id(new)))
        for origin in origins_of(old):
            _add(new, origin)
        stack.extend(zip(old.src, new.src, strict=True))


def record_nnef_operation(roots: Iterable[UOp], label: str, operator: str, file: str, line: int,
                          gaps_only: bool = False) -> None:
    """The NNEF loader's hook: the kernel ASTs ``roots`` were lowered from the operation ``label``
    (an invocation of ``operator``) written at ``file:line`` of the model's text (line 0: unknown).
    ``gaps_only``: only the nodes that no operation of that file claims yet (a fused kernel: the
    nodes fusing built are its reader's, the producer's it inlined stay the producer's)."""
    location = f"{file}:{line}" if line > 0 else ""

    def same_model(known: Origin) -> bool:
        return known.kind == "nnef" and known.location.rpartition(":")[0] == file

    origin = Origin("nnef", label, location, operator)
    record_origin(list(roots), origin, unless=same_model if gaps_only else None)


# ---------------------------------------------------------------------------------------------
# the Tensor front end: each method call a user makes records its origin

_calls = threading.local()


def caller_location() -> str:
    """``file:line`` of the innermost frame outside the uopviz package ('' when there is none)."""
    frame = sys._getframe(1)
    while frame is not None:
        if not frame.f_code.co_filename.startswith(PACKAGE_FOLDER):
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back
    return ""


def _uops_of(value: Any) -> list[UOp]:
    """The UOps of tensors: a tensor's, or each of a tuple's or list's tensors."""
    items = value if isinstance(value, tuple | list) else (value,)
    return [item.uop for item in items if isinstance(getattr(item, "uop", None), UOp)]


def recording(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` that records the origin ``Tensor.<name>`` for the nodes it builds, when a user
    calls it (the calls it makes inside, ``softmax`` calling ``exp``, are part of it)."""

    @functools.wraps(method)
    def recorded(*args: Any, **kwargs: Any) -> Any:
        depth = getattr(_calls, "depth", 0)
        _calls.depth = depth + 1
        try:
            result = method(*args, **kwargs)
        finally:
            _calls.depth = depth
        if depth == 0:
            built = _uops_of(args[0] if name == "Tensor" and args else result)
            values = () if name == "Tensor" else (*args, *kwargs.values())
            given = [uop for value in values for uop in _uops_of(value)]
            if built:
                record_origin(built, Origin("tensor", name, caller_location()), given)
        return result

    return recorded


#: The operators a user writes on tensors (``a + b``, ``x[1:]``, ``a @ b``): recorded by their names.
OPERATOR_METHODS = frozenset(
    f"__{name}__"
    for name in (
        "init abs neg invert getitem matmul rmatmul pow rpow lt le gt ge eq ne "
        "add radd sub rsub mul rmul truediv rtruediv floordiv rfloordiv mod rmod "
        "and rand or ror xor rxor lshift rlshift rshift rrshift"
    ).split()
)


def record_method_origins(cls: type) -> type:
    """Wrap ``cls``'s public methods (class and static methods too) and its operators with
    :func:`recording`, so that what a user builds by calling them remembers which call did."""
    for name in dir(cls):
        if name.startswith("_") and name not in OPERATOR_METHODS:
            continue
        found = next((vars(base)[name] for base in cls.__mro__ if name in vars(base)), None)
        shown = "Tensor" if name == "__init__" else name.strip("_")
        function = found.__func__ if isinstance(found, classmethod | staticmethod) else found
        if not callable(function) or not getattr(function, "__module__", "").startswith("uopviz."):
            continue
        if any(not key.startswith("__") for key in getattr(function, "__dict__", {})):
            continue  # a namespace of functions (Tensor.collectives), not a method
        wrapper = recording(shown, function)
        if isinstance(found, classmethod | staticmethod):
            wrapper = type(found)(wrapper)
        setattr(cls, name, wrapper)
    return cls


__all__ = ["OPERATOR_METHODS", "Origin", "carry_origins", "caller_location", "origin_of",
           "origins_of", "record_method_origins", "record_nnef_operation", "record_origin", "recording"]
