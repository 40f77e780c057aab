"""UOp graphs as text: ``%N = OP src... [arg] : dtype shape``, one line per UOp, constants inline.

What ``str(uop)``, :class:`~uopviz.core.uop.UOpError`'s messages and the widgets print.  It reads a
UOp through :class:`~uopviz.core.uop_types.UOpNode` and does not import :mod:`uopviz.core.uop`.
"""

from __future__ import annotations

from collections.abc import Mapping

from uopviz.core.dtype import DType, dtypes
from uopviz.core.ops import Ops
from uopviz.core.uop_types import UOpNode


def short_arg(u: UOpNode) -> str:
    """``u``'s arg as one line prints it: ``1.5:float32`` for a CONST, ``r3:LOOP`` for a RANGE, a
    dtype's name, ``<n bytes>`` for data, else its repr cut to 60 characters."""
    arg = u.arg
    # (a malformed CONST or RANGE arg is printed as it is: this also writes UOpError's message)
    well_formed = isinstance(arg, tuple) and len(arg) == 2 and hasattr(arg[1], "name")
    if u.op is Ops.CONST and well_formed:
        return f"{arg[0]!r}:{arg[1].name}"
    if u.op is Ops.RANGE and well_formed:
        return f"r{arg[0]}:{arg[1].name}"
    if isinstance(arg, DType):
        return arg.name
    if isinstance(arg, tuple) and arg and isinstance(arg[0], Ops):
        return f"({arg[0].name}, {arg[1]})"
    if isinstance(arg, bytes | bytearray):
        return f"<{len(arg)} bytes>"
    text = repr(arg)
    return text if len(text) <= 60 else text[:57] + "..."


def inline_text(u: UOpNode) -> str | None:
    """How a constant-like UOp is written inline where it is used (None: it gets its own line)."""
    if u.op is Ops.CONST:
        return repr(u.arg[0])
    if u.op is Ops.STACK and u.dtype is dtypes.index and all(s.op is Ops.CONST for s in u.src):
        return "(" + ", ".join(str(s.arg[0]) for s in u.src) + ("," if len(u.src) == 1 else "") + ")"
    return None


def format_graph(root: UOpNode) -> str:
    """The graph as text: each UOp once, named ``%N``, referred to by name; constants written inline.

    Each line: ``%N = OP src... [arg] : dtype shape``.
    """
    return "\n".join(graph_lines(root)[0])


def graph_lines(
    root: UOpNode, names: Mapping[UOpNode, str] | None = None, first_new: int = 0, tags: bool = False
) -> tuple[list[str], dict[UOpNode, str]]:
    """:func:`format_graph`'s lines, and the name each UOp got.  ``names`` fixes the names of some
    UOps (a graph's names before a rewrite, say); the others are numbered ``%first_new``, ``%first_new
    + 1``, ...  ``tags``: a node's tag is written after its type."""
    given = names or {}
    lines: list[str] = []
    named: dict[UOpNode, str] = {}
    fresh = first_new
    for u in root.toposort():
        if inline_text(u) is not None and u is not root:
            named[u] = inline_text(u)
            continue
        name = given.get(u)
        if name is None:
            name, fresh = f"%{fresh}", fresh + 1
        named[u] = name
        parts = [f"{name} = {u.op.name}"]
        if u.src:
            parts.append(", ".join(named[s] for s in u.src))
        if u.arg is not None and not (u.op is Ops.STACK and isinstance(u.arg, DType)):
            parts.append(f"[{short_arg(u)}]")
        type_text = u.dtype.name + (f" {u.shape}" if u.shape else "")
        tag_text = f"  tag={u.tag!r}" if tags and u.tag is not None else ""
        lines.append(" ".join(parts) + f"  : {type_text}{tag_text}")
    return lines, named


def linear_lines(linear: UOpNode) -> list[str]:
    """A LINEAR program as a listing, one line per instruction: ``index: OP dtype (sources) [arg]``.
    Sources are written by their instruction index (``%3``), or inline when they are constants
    outside the program (what the LINEAR's instructions refer to without listing)."""
    index_of = {u: i for i, u in enumerate(linear.src)}
    width = len(str(max(len(linear.src) - 1, 0)))
    lines = []
    for i, u in enumerate(linear.src):
        operands = [f"%{index_of[s]}" if s in index_of else (inline_text(s) or f"{s.op.name}")
                    for s in u.src]
        parts = [f"{i:>{width}}: {u.op.name}", u.dtype.name]
        if operands:
            parts.append("(" + ", ".join(operands) + ")")
        if u.arg is not None and not isinstance(u.arg, DType):
            parts.append(f"[{short_arg(u)}]")
        lines.append(" ".join(parts))
    return lines

