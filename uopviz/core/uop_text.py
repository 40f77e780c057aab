"""UOp graphs as text that reads back: :func:`print_graph` writes a graph, :func:`parse_graph` builds it
again, the same hash-consed UOps (``parse_graph(print_graph(g)) is g``).

It is the form of :func:`~uopviz.core.uop_printing.format_graph` (what the widgets, the trace and
error messages show), made exact: every arg written whole as an expression that reads back, and a
constant inlined only where its text says its dtype.  A pass's tests are written in it, as xDSL's
FileCheck and TVM's Before/Expected tests are: a graph before, the pass, the graph expected after
(``tests/passes/test_stage_*.py``)::

    %0 = STACK 4 [dtypes.index]  : index (1,)
    %1 = PARAM %0 [ParamArg(slot=0, dtype=dtypes.float16)]  : float16 (4,)
    %2 = RANGE 4 [(0, AxisType.GLOBAL)]  : index
    %3 = INDEX %1, %2  : float16
    %4 = STORE %3, 1.5:float16  : void

One line per UOp, sources before their users, the last line the root: ``%N = OP sources [arg] :
type``, then ``tag=EXPR`` where a UOp has a tag.  Sources are names (``%N``) or constants written
inline: an ``int`` is an ``index`` constant, a ``float`` a ``float32`` one, ``True``/``False`` a
``bool`` one; any other dtype is written after a colon (``3:int32``, ``0.5:float16``, ``nan:float64``).
The type after the colon is the UOp's derived dtype (and shape, for reading); the parser checks it.

Args are Python-like expressions read by a small evaluator (never ``eval``): literals, tuples,
lists, ``dtypes.NAME`` with ``.vec(n)`` and ``.ptr(size, AddrSpace.X)``, members of the dialect's
enums (``Ops.ADD``, ``AxisType.REDUCE``, ``AddrSpace.LOCAL``) and calls of the arg dataclasses
registered with :func:`register_arg_type` (core's :class:`BufferArg` and :class:`ParamArg`; a
backend's ``TensorCore`` registers itself).  Anything else is a :class:`UOpTextError` naming the
line and what it could not read.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import io
import math
import re
import tokenize
from typing import Any

from uopviz.core.dtype import AddrSpace, DType, DTypeKind, PtrDType, dtypes
from uopviz.core.errors import UopvizError
from uopviz.core.ops import AxisType, OpFamily, Ops
from uopviz.core.uop import UOp, reserve_buffer_number, toposort
from uopviz.core.uop_types import BufferArg, ParamArg


class UOpTextError(UopvizError, ValueError):
    """Text that :func:`parse_graph` cannot read (the message names the line and why), or an arg
    :func:`print_graph` cannot write."""


#: the dataclasses an arg may be built of, by the name the text calls them by
ARG_TYPES: dict[str, type] = {}
#: the enums whose members an arg may name (``Ops.ADD``)
ENUMS: dict[str, type[enum.Enum]] = {
    cls.__name__: cls for cls in (Ops, AxisType, AddrSpace, OpFamily, DTypeKind)
}


def register_arg_type(cls: type) -> type:
    """Let args hold instances of the dataclass ``cls`` (written ``Name(field=value, ...)``); returns
    ``cls``, so it can decorate the class.  Layers above core register their own (``TensorCore``)."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__name__} is not a dataclass: its args could not be written by field")
    ARG_TYPES[cls.__name__] = cls
    return cls


register_arg_type(BufferArg)
register_arg_type(ParamArg)

_DEFAULT_CONST_TYPES = {int: dtypes.index, float: dtypes.float32, bool: dtypes.bool}


# -- writing ------------------------------------------------------------------------------------


def _number_text(value: int | float) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if value != value else ("inf" if value > 0 else "-inf")
    return repr(value)


def dtype_text(dtype: DType) -> str:
    """A dtype as an expression that reads back: ``dtypes.float32``, ``dtypes.float32.vec(4)``,
    ``dtypes.float32.ptr(16, AddrSpace.LOCAL)``."""
    if isinstance(dtype, PtrDType):
        return f"{dtype_text(dtype.base)}.ptr({dtype.size}, AddrSpace.{dtype.addrspace.name})"
    if dtype.count > 1:
        return f"{dtype_text(dtype.scalar)}.vec({dtype.count})"
    return f"dtypes.{dtype.name}"


def arg_text(arg: Any, names: dict[UOp, str] | None = None) -> str:
    """An arg as an expression :func:`parse_graph` reads back to an equal arg; a UOp inside it (a
    WMMA's ranges) is written by its name in ``names``."""
    if isinstance(arg, UOp):
        if names is None or not names.get(arg, "").startswith("%"):
            raise UOpTextError(f"an arg refers to {arg.op.name}, which has no name in this graph")
        return names[arg]
    if arg is None or isinstance(arg, bool | str | bytes):
        return repr(arg)
    if isinstance(arg, int | float) and not isinstance(arg, enum.Enum):
        return _number_text(arg)
    if isinstance(arg, DType):
        return dtype_text(arg)
    if isinstance(arg, enum.Enum) and ENUMS.get(type(arg).__name__) is type(arg):
        return f"{type(arg).__name__}.{arg.name}"
    if isinstance(arg, tuple):
        inner = ", ".join(arg_text(a, names) for a in arg)
        return f"({inner},)" if len(arg) == 1 else f"({inner})"
    if isinstance(arg, list):
        return "[" + ", ".join(arg_text(a, names) for a in arg) + "]"
    if ARG_TYPES.get(type(arg).__name__) is type(arg):
        fields = (f for f in dataclasses.fields(arg) if f.init)
        return f"{type(arg).__name__}(" + ", ".join(
            f"{f.name}={arg_text(getattr(arg, f.name), names)}" for f in fields) + ")"
    raise UOpTextError(
        f"cannot write an arg of type {type(arg).__name__} as text ({arg!r:.80}): "
        "register its dataclass with uopviz.core.uop_text.register_arg_type"
    )


def type_text(u: UOp) -> str:
    """What a line writes after its colon: the dtype (a pointer with its size and address space)
    and the shape where there is one."""
    dtype = u.dtype
    name = dtype_text(dtype).removeprefix("dtypes.") if isinstance(dtype, PtrDType) else dtype.name
    return name + (f" {u.shape}" if u.shape else "")


def _inline_constant(u: UOp) -> str | None:
    """How a constant is written where it is used, or None when it needs a line of its own."""
    if u.op is not Ops.CONST or u.src or u.tag is not None:
        return None
    if not (isinstance(u.arg, tuple) and len(u.arg) == 2 and isinstance(u.arg[1], DType)):
        return None
    value, dtype = u.arg
    if type(value) not in _DEFAULT_CONST_TYPES or dtype.count != 1 or isinstance(dtype, PtrDType):
        return None
    text = _number_text(value)
    return text if _DEFAULT_CONST_TYPES[type(value)] is dtype else f"{text}:{dtype.name}"


def _uops_in(arg: Any) -> list[UOp]:
    if isinstance(arg, UOp):
        return [arg]
    if isinstance(arg, tuple | list):
        return [u for a in arg for u in _uops_in(a)]
    return []


def _order(root: UOp) -> list[UOp]:
    """Sources before users, and a UOp an arg refers to before the UOp whose arg it is."""
    return toposort([root], lambda u: (*u.src, *_uops_in(u.arg)))


def print_graph(root: UOp) -> str:
    """The graph as text that :func:`parse_graph` reads back (see the module docstring)."""
    lines: list[str] = []
    named: dict[UOp, str] = {}
    order = _order(root)
    in_args = {r for u in order for r in _uops_in(u.arg)}
    for u in order:
        inline = _inline_constant(u)
        if inline is not None and u is not root and u not in in_args:
            named[u] = inline
            continue
        named[u] = name = f"%{len(lines)}"
        parts = [f"{name} = {u.op.name}"]
        if u.src:
            parts.append(", ".join(named[s] for s in u.src))
        if u.arg is not None:
            parts.append(f"[{arg_text(u.arg, named)}]")
        tag = f"  tag={arg_text(u.tag, named)}" if u.tag is not None else ""
        lines.append(" ".join(parts) + f"  : {type_text(u)}{tag}")
    return "\n".join(lines)


# -- reading ------------------------------------------------------------------------------------

_HEAD = re.compile(r"\s*(%\w+)\s*=\s*([A-Z_][A-Z0-9_]*)\b")
_INLINE = re.compile(r"(-?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|inf|nan)|True|False)(?::(\w+))?$")


class _Reader(ast.NodeVisitor):
    """Evaluates an arg expression: literals and the names the module docstring lists, no more."""

    def __init__(self, where: str, uops: dict[str, UOp]):
        self.where = where
        self.uops = uops  # the graph's UOps so far, by the name an arg refers to them (%N -> _uop_N)

    def fail(self, node: ast.AST, why: str) -> UOpTextError:
        return UOpTextError(f"{self.where}: {why} (at {ast.unparse(node)!r:.80})")

    def generic_visit(self, node: ast.AST) -> Any:
        raise self.fail(node, f"an arg cannot hold a {type(node).__name__} expression")

    def visit_Expression(self, node: ast.Expression) -> Any:
        return self.visit(node.body)

    def visit_Constant(self, node: ast.Constant) -> Any:
        return node.value

    def visit_Tuple(self, node: ast.Tuple) -> Any:
        return tuple(self.visit(e) for e in node.elts)

    def visit_List(self, node: ast.List) -> Any:
        return [self.visit(e) for e in node.elts]

    def visit_UnaryOp(self, node: ast.UnaryOp) -> Any:
        value = self.visit(node.operand)
        if isinstance(node.op, ast.USub) and isinstance(value, int | float) and not isinstance(value, bool):
            return -value
        raise self.fail(node, "only a number can be negated")

    def visit_Name(self, node: ast.Name) -> Any:
        if node.id.startswith(_UOP_REFERENCE):
            name = "%" + node.id.removeprefix(_UOP_REFERENCE)
            if name not in self.uops:
                raise self.fail(node, f"{name} is used before a line defines it")
            return self.uops[name]
        known = {"inf": math.inf, "nan": math.nan, "dtypes": dtypes, **ENUMS, **ARG_TYPES}
        if node.id not in known:
            raise self.fail(node, f"unknown name {node.id!r}")
        return known[node.id]

    def visit_Attribute(self, node: ast.Attribute) -> Any:
        owner = self.visit(node.value)
        if owner is dtypes and isinstance(getattr(dtypes, node.attr, None), DType):
            return getattr(dtypes, node.attr)
        if isinstance(owner, type) and issubclass(owner, enum.Enum) and node.attr in owner.__members__:
            return owner[node.attr]
        if isinstance(owner, DType) and node.attr in ("vec", "ptr"):
            return getattr(owner, node.attr)
        raise self.fail(node, f"unknown attribute {node.attr!r}")

    def visit_Call(self, node: ast.Call) -> Any:
        function = self.visit(node.func)
        allowed = function in ARG_TYPES.values() or getattr(function, "__self__", None) is not None
        if not allowed:
            raise self.fail(node, "only a registered arg type or a dtype's vec/ptr can be called")
        args = [self.visit(a) for a in node.args]
        keywords = {k.arg: self.visit(k.value) for k in node.keywords}
        try:
            return function(*args, **keywords)
        except (TypeError, ValueError) as error:
            raise self.fail(node, str(error)) from error


_UOP_REFERENCE = "_uop_"


def _python_names(text: str) -> str:
    """``%N`` outside string literals written as the Python name ``_uop_N``."""
    try:
        strings = [(t.start[1], t.end[1]) for t in tokenize.generate_tokens(io.StringIO(text).readline)
                   if t.type == tokenize.STRING]
    except (tokenize.TokenError, SyntaxError):
        strings = []
    pieces, at = [], 0
    for start, end in [*strings, (len(text), len(text))]:
        pieces += [re.sub(r"%(\w+)", _UOP_REFERENCE + r"\1", text[at:start]), text[start:end]]
        at = end
    return "".join(pieces)


def read_arg(text: str, where: str = "arg", uops: dict[str, UOp] | None = None) -> Any:
    """The value of an arg expression (see the module docstring); ``uops``: the UOps it may refer to
    by name (``%N``); ``where`` names it in errors."""
    text = text.strip()
    try:
        tree = ast.parse(_python_names(text) if "%" in text else text, mode="eval")
    except SyntaxError as error:
        raise UOpTextError(f"{where}: {text!r:.80} is not an expression ({error.msg})") from None
    return _Reader(where, uops or {}).visit(tree)


def _bracket_end(text: str, start: int, where: str) -> int:
    """The index just past the ``]`` closing the ``[`` at ``start`` (strings inside are skipped)."""
    depth = 0
    offset = 0
    try:
        for token in tokenize.generate_tokens(io.StringIO(text[start:]).readline):
            if token.type == tokenize.OP and token.string in "([{":
                depth += 1
            elif token.type == tokenize.OP and token.string in ")]}":
                depth -= 1
                if depth == 0:
                    offset = token.end[1]
                    break
    except (tokenize.TokenError, SyntaxError) as error:
        raise UOpTextError(f"{where}: the arg's brackets do not close ({error})") from None
    if depth != 0 or offset == 0:
        raise UOpTextError(f"{where}: the arg's '[' is not closed")
    return start + offset


def _operand(text: str, names: dict[str, UOp], where: str) -> UOp:
    text = text.strip()
    if text.startswith("%"):
        if text not in names:
            raise UOpTextError(f"{where}: {text} is used before a line defines it")
        return names[text]
    match = _INLINE.match(text)
    if match is None:
        raise UOpTextError(f"{where}: {text!r} is neither a name (%N) nor a constant")
    literal, dtype_name = match.groups()
    value = {"True": True, "False": False}.get(literal)
    if value is None:
        value = read_arg(literal, where)
    if dtype_name is None:
        dtype = _DEFAULT_CONST_TYPES[type(value)]
    else:
        dtype = getattr(dtypes, dtype_name, None)
        if not isinstance(dtype, DType):
            raise UOpTextError(f"{where}: {dtype_name!r} is not a dtype")
    return UOp(Ops.CONST, (), (value, dtype))


def _split_sources(text: str) -> list[str]:
    return [part for part in (p.strip() for p in text.split(",")) if part]


def _parse_line(line: str, names: dict[str, UOp], where: str) -> tuple[str, UOp]:
    head = _HEAD.match(line)
    if head is None:
        raise UOpTextError(f"{where}: expected '%N = OP ...', got {line.strip()!r:.80}")
    name, op_name = head.groups()
    if op_name not in Ops.__members__:
        raise UOpTextError(f"{where}: {op_name!r} is not an op of the dialect")
    rest = line[head.end():]
    bracket, colon = rest.find("["), rest.find("  :")
    arg = None
    if bracket != -1 and (colon == -1 or bracket < colon):
        end = _bracket_end(rest, bracket, where)
        arg = read_arg(rest[bracket + 1:end - 1], where, names)
        sources_text, tail = rest[:bracket], rest[end:]
    else:
        sources_text, tail = (rest[:colon], rest[colon:]) if colon != -1 else (rest, "")
    written_type, _, tag_text = tail.strip().removeprefix(":").partition("  tag=")
    tag = read_arg(tag_text, where, names) if tag_text else None
    sources = tuple(_operand(s, names, where) for s in _split_sources(sources_text))
    if isinstance(arg, BufferArg):
        reserve_buffer_number(arg.number)
    try:
        u = UOp(Ops[op_name], sources, arg, tag)
    except UopvizError as error:
        raise UOpTextError(f"{where}: {error}") from error
    if written_type.strip() and written_type.strip() != type_text(u):
        raise UOpTextError(f"{where}: the line says its type is {written_type.strip()!r}, "
                           f"but {op_name} of these sources and arg is {type_text(u)!r}")
    return name, u


def parse_graph(text: str) -> UOp:
    """The graph :func:`print_graph` wrote (the last line's UOp).  Blank lines and ``#`` comments
    are skipped; the type after a line's colon may be left out."""
    names: dict[str, UOp] = {}
    root: UOp | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, root = _parse_line(line, names, f"line {number}")
        if name in names:
            raise UOpTextError(f"line {number}: {name} is defined twice")
        names[name] = root
    if root is None:
        raise UOpTextError("the text holds no UOp line")
    return root


__all__ = [
    "ARG_TYPES",
    "UOpTextError",
    "arg_text",
    "dtype_text",
    "parse_graph",
    "print_graph",
    "read_arg",
    "register_arg_type",
    "type_text",
]
