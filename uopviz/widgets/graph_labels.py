"""What a node of a DAG view says and looks like: its colour and shape (the spec's colours; a RANGE
takes its AxisType's colour), its label (op and arg summary, folded operands, dtype and shape), the
details shown on click (sources, min_max, device, axis...) and its size.

:func:`node_attributes` gathers them for one UOp (cached); :mod:`uopviz.widgets.graph` lays the nodes
out and re-exports every public name here.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from uopviz.core.dtype import DType
from uopviz.core.ops import AxisType, GroupOp, Ops
from uopviz.core.uop import BufferArg, ParamArg, UOp
from uopviz.core.uop_printing import inline_text
from uopviz.core.uop_types import format_device

#: Size estimate of the label font (monospace, 11px): points per character and per line.
CHAR_WIDTH = 6.7
LINE_HEIGHT = 14.0
#: Characters kept from a long arg in labels (the side panel shows more).
LABEL_ARG_CHARS = 34
DETAIL_CHARS = 600


# ---------------------------------------------------------------------------------------------
# colours and text of one UOp


def _axis_type(u: UOp) -> AxisType | None:
    """The AxisType of a RANGE (None for other ops)."""
    if u.op is Ops.RANGE and isinstance(u.arg, tuple) and len(u.arg) == 2 and isinstance(u.arg[1], AxisType):
        return u.arg[1]
    return None


def node_color(u: UOp) -> str:
    """The colour of ``u``'s node: its AxisType's colour for a RANGE, else its op family's."""
    axis_type = _axis_type(u)
    return axis_type.color if axis_type is not None else u.op.family.color


#: Node shapes: a RANGE is drawn as a pill (its AxisType colours coincide with op families' colours:
#: an UPCAST range is Elementwise yellow, a REDUCE range Reduce red), every other node as a box.
BOX_SHAPE, RANGE_SHAPE = "box", "range"
#: Points a range pill is wider than a box with the same label.
RANGE_EXTRA_WIDTH = 12.0


def node_shape(u: UOp) -> str:
    """The shape of ``u``'s node: :data:`RANGE_SHAPE` for a RANGE, :data:`BOX_SHAPE` otherwise."""
    return RANGE_SHAPE if u.op is Ops.RANGE else BOX_SHAPE


def node_key(u: UOp) -> str:
    """A key naming ``u`` while it lives (UOps are hash-consed, so equal UOps share it)."""
    return f"u{id(u):x}"


def arg_summary(u: UOp, limit: int = LABEL_ARG_CHARS) -> str:
    """A short readable form of ``u.arg`` for labels ('' when the op has no arg worth showing)."""
    arg = u.arg
    if arg is None:
        return ""
    if u.op is Ops.CONST:
        text = repr(arg[0])
    elif u.op is Ops.RANGE and isinstance(arg, tuple) and len(arg) == 2:
        text = f"r{arg[0]} {arg[1].name if isinstance(arg[1], AxisType) else arg[1]}"
    elif isinstance(arg, BufferArg):
        text = f"buf{arg.number} [{arg.size}]"
        if arg.device is not None:
            text += f" {format_device(arg.device)}"
        if arg.addrspace.name != "GLOBAL":
            text += f" {arg.addrspace.name}"
    elif isinstance(arg, ParamArg):
        text = f"param{arg.slot}" + (f" {format_device(arg.device)}" if arg.device is not None else "")
    elif isinstance(arg, DType):
        if u.op in (Ops.STACK, Ops.CAST, Ops.BITCAST):  # the type line shows it
            return ""
        text = arg.name
    elif u.op is Ops.SOURCE and isinstance(arg, str):
        text = f"{arg.count(chr(10)) + 1} lines"
    elif u.op is Ops.SLICE and isinstance(arg, tuple) and len(arg) == 2:
        text = f"{arg[0]} elements"
    elif u.op is Ops.REDUCE and isinstance(arg, tuple) and len(arg) == 2 and isinstance(arg[0], Ops):
        text = arg[0].name + (f" axes={arg[1]}" if arg[1] else "")
    elif u.op is Ops.GEP and isinstance(arg, tuple):
        text = f"lane {arg[0]}" if len(arg) == 1 else "lanes " + repr(arg)
    elif isinstance(arg, Ops):
        text = arg.name
    elif isinstance(arg, bytes | bytearray):
        text = f"<{len(arg)} bytes>"
    elif isinstance(arg, str):
        text = arg.splitlines()[0] if arg else "''"
    else:
        text = repr(arg)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def type_summary(u: UOp) -> str:
    """``float32 (4, 4)``: the dtype, and the shape when the value is not a scalar."""
    return u.dtype.name + (f" {u.shape}" if u.shape else "")


def _safe_text(compute: Any) -> str:
    """The text of a derived property; a property that cannot be derived says why (the panel must
    still open on a node of a half-built graph)."""
    try:
        value = compute()
    except Exception as error:  # noqa: BLE001 - shown to the user, not swallowed
        return f"unavailable: {type(error).__name__}: {error}"
    text = repr(value) if not isinstance(value, str) else value
    return text if len(text) <= DETAIL_CHARS else text[: DETAIL_CHARS - 1] + "…"


def _arg_text(u: UOp) -> str:
    """A node's arg as the side panel shows it: a SOURCE's text whole, as written (not a cut, escaped
    ``repr``); other args as their ``repr``, cut at :data:`DETAIL_CHARS`."""
    if u.op is Ops.SOURCE and isinstance(u.arg, str):
        return u.arg
    return _safe_text(lambda: "—" if u.arg is None else repr(u.arg))


def node_details(u: UOp, source_names: list[str], values: list[str] | None = None) -> dict[str, str]:
    """What the side panel shows for ``u``: op, family, dtype, shape, arg, sources (those drawn as
    nodes, ``OP key``), values (sources written inline instead of drawn: folded constants, a
    collapsed body), min_max, device and axis, each as text."""
    details = {
        "op": u.op.name,
        "family": u.op.family.title,
        "dtype": u.dtype.name,
        "shape": repr(u.shape),
        "arg": _arg_text(u),
        "sources": ", ".join(source_names) if source_names else "—",
        **({"values": ", ".join(values)} if values else {}),
        "min_max": _safe_text(lambda: u.min_max),
        "device": _safe_text(lambda: format_device(u.device)),
        "axis": _safe_text(lambda: u.axis),
    }
    axis_type = _axis_type(u)
    if axis_type is not None:
        details["axis_type"] = f"{axis_type.name} ({axis_type.letter})"
    if u.tag is not None:
        details["tag"] = _safe_text(lambda: u.tag)
    return details


def is_foldable(u: UOp) -> bool:
    """True for UOps written inline in their users' labels: CONSTs and constant shape STACKs."""
    return inline_text(u) is not None


def body_size(function: UOp) -> int:
    """UOps in the body of a FUNCTION or CALL (what collapsing it hides)."""
    return len(function.src[0].toposort()) if function.src else 0


#: How binary ALU ops are written in labels when an operand is a constant (``x * 16``).
INFIX = {
    Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*", Ops.DIV: "/", Ops.IDIV: "//", Ops.MOD: "%",
    Ops.CMP_LT: "<", Ops.CMP_GT: ">", Ops.CMP_LE: "<=", Ops.CMP_GE: ">=", Ops.CMP_EQ: "==",
    Ops.CMP_NE: "!=", Ops.AND: "&", Ops.OR: "|", Ops.XOR: "^", Ops.SHL: "<<", Ops.SHR: ">>",
}
#: What each source slot of some ops is, for the label of a folded constant there (``value 0.0``).
SLOT_NAMES = {
    Ops.INDEX: ("buffer", "index"),
    Ops.STORE: ("address", "value", "gate"),
    Ops.LOAD: ("address", "alt", "gate"),
    Ops.SLICE: ("tensor", "offset"),
    Ops.REDUCE: ("value",),
}
#: Names given to the operands drawn as nodes (edges), in slot order.
OPERAND_NAMES = "xyzw"
#: Ops whose folded sources say nothing the title or type line does not (a PARAM's shape).
_NO_OPERAND_LINE = frozenset({Ops.PARAM, Ops.LINEAR, Ops.FUNCTION, Ops.CALL})


#: Characters of a movement op's ``from → to`` line before its shapes are written without spaces.
SHAPE_LINE_CHARS = 40


def short_inline_text(u: UOp) -> str:
    """A folded constant as a label writes it: long floats to 6 significant digits (the side panel
    has the exact value)."""
    if u.op is Ops.CONST and isinstance(u.arg[0], float):
        text = repr(u.arg[0])
        return text if len(text) <= 8 else f"{u.arg[0]:.6g}"
    return inline_text(u) or u.op.name


def _shape_text(shape: tuple[int, ...], compact: bool = False) -> str:
    separator = "," if compact else ", "
    return "(" + separator.join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def _movement_line(u: UOp, texts: list[str]) -> str:
    """``(16, 32) → (16, 32, 1)``; PAD and SHRINK add a line saying where the kept part sits
    (``at (1, 0)`` in the padded value, ``from (1, 0)`` of the shrunk one)."""
    for compact in (False, True):
        line = f"{_shape_text(u.src[0].shape, compact)} → {_shape_text(u.shape, compact)}"
        if len(line) <= SHAPE_LINE_CHARS:
            break
    if u.op in (Ops.PAD, Ops.SHRINK):
        offsets = texts[1] if len(texts[1]) <= SHAPE_LINE_CHARS - 5 else texts[1].replace(", ", ",")
        line += f"\n{'at' if u.op is Ops.PAD else 'from'} {offsets}"
    return line


def operand_line(u: UOp, folded: list[str | None]) -> str:
    """The label's second line: the operands written inline (constants, shapes), read as the op reads
    them: ``x * 16``, ``max(x, 0.0)``, ``(16, 32) → (16, 32, 1)`` for a RESHAPE, ``size 16`` for a
    RANGE, ``value 0.0`` for a STORE.  Operands drawn as nodes are ``x``, ``y``... in slot order.
    '' when no operand is folded (nothing to add to the edges)."""
    if not any(text is not None for text in folded) or u.op in _NO_OPERAND_LINE:
        return ""
    names = iter(OPERAND_NAMES)
    texts = [text if text is not None else next(names, "·") for text in folded]
    op = u.op
    if (op in (Ops.RESHAPE, Ops.EXPAND) and len(u.src) == 2) or (
        op in (Ops.PAD, Ops.SHRINK) and len(u.src) == 3
    ):
        # a folded constant moved (ReLU's zero reshaped to (1, 1)) has no edge: its value leads
        value = f"{folded[0]}: " if folded[0] is not None else ""
        return value + _movement_line(u, texts)
    if op is Ops.RANGE and folded[0] is not None:
        return f"size {folded[0]}"
    if op in INFIX and len(texts) == 2:
        return f"{texts[0]} {INFIX[op]} {texts[1]}"
    if op is Ops.MULACC and len(texts) == 3:
        return f"{texts[0]} * {texts[1]} + {texts[2]}"
    if op is Ops.VECTORIZE and len(set(texts)) == 1:
        return f"{texts[0]} (all {len(texts)} lanes)"
    if op in SLOT_NAMES:
        slots = SLOT_NAMES[op]
        return ", ".join(f"{slots[i] if i < len(slots) else 'source'} {text}"
                         for i, text in enumerate(folded) if text is not None)
    if op in GroupOp.ELEMENTWISE:
        return f"{op.name.lower()}({', '.join(texts)})"
    return "(" + ", ".join(texts) + ")"


def _type_line(u: UOp) -> str:
    """The label's last line: dtype and shape; a CAST/BITCAST also says what it converts from."""
    if u.op in (Ops.CAST, Ops.BITCAST) and u.src:
        return f"{u.src[0].dtype.name} → {type_summary(u)}"
    return type_summary(u)


def function_title(u: UOp) -> str:
    """A short name for a FUNCTION/CALL node: a kernel's name for a CALL of a kernel (a SINK of
    STOREs, or its LINEAR/PROGRAM), else how many inputs the body takes."""
    if not u.src:
        return ""
    body = u.src[0]
    if body.op is Ops.PROGRAM and body.src:
        body = body.src[0]
    if body.op is Ops.LINEAR and isinstance(body.arg, str):
        return body.arg
    if u.op is Ops.CALL and body.op is Ops.SINK:
        from uopviz.passes.optops.kernel import Kernel

        try:
            return Kernel(body).name
        except Exception:  # noqa: BLE001 - a body that is no kernel keeps a plain title
            return ""
    inputs = len(u.src) - 1
    return f"of {inputs} input{'s' if inputs != 1 else ''}" if u.op is Ops.FUNCTION else ""


#: Node attributes by (id, folding, collapsed), with the UOp kept beside them so that a reused id
#: is never mistaken for it.  Consecutive rewrite steps share most UOps: the player draws a new
#: step without recomputing labels and details (min_max, device...) of the unchanged nodes.
_ATTRIBUTE_CACHE: OrderedDict[tuple[int, bool, bool], tuple[UOp, dict[str, Any]]] = OrderedDict()
ATTRIBUTE_CACHE_SIZE = 50_000


def node_attributes(u: UOp, fold_constants: bool = True, collapsed: bool = False) -> dict[str, Any]:
    """Every attribute of ``u``'s node but its position (a fresh dict; the computation is cached)."""
    key = (id(u), fold_constants, collapsed)
    cached = _ATTRIBUTE_CACHE.get(key)
    if cached is not None and cached[0] is u:
        return dict(cached[1])
    attributes = _compute_attributes(u, fold_constants, collapsed)
    _ATTRIBUTE_CACHE[key] = (u, attributes)
    if len(_ATTRIBUTE_CACHE) > ATTRIBUTE_CACHE_SIZE:
        for _ in range(ATTRIBUTE_CACHE_SIZE // 10):
            _ATTRIBUTE_CACHE.popitem(last=False)
    return dict(attributes)


def _compute_attributes(u: UOp, fold_constants: bool, collapsed: bool) -> dict[str, Any]:
    folded: list[str | None] = []  # per source: its inline text, or None when it is drawn as a node
    source_names = []  # the sources drawn as nodes (the side panel links them)
    values = []  # the others, shown by value: nothing to link to
    for slot, s in enumerate(u.src):
        if collapsed and slot == 0:
            folded.append(None)
            values.append(f"{s.op.name} body (collapsed)")
        elif fold_constants and is_foldable(s):
            text = short_inline_text(s)
            folded.append(text)
            values.append(f"{text} ({s.op.name})")
        else:
            folded.append(None)
            source_names.append(f"{s.op.name} {node_key(s)}")
    title = u.op.name
    summary = arg_summary(u)
    if u.op in (Ops.FUNCTION, Ops.CALL):
        summary = function_title(u)
    if summary:
        title += " " + summary
    if collapsed:
        title += f" [{body_size(u)} ops hidden]"
    lines = [title]
    for line in operand_line(u, folded).splitlines():
        lines.append(line if len(line) <= LABEL_ARG_CHARS + 6 else line[: LABEL_ARG_CHARS + 5] + "…")
    lines.append(_type_line(u))
    attributes: dict[str, Any] = {
        "op": u.op.name,
        "family": u.op.family.title,
        "color": node_color(u),
        "label": "\n".join(lines),
        "uop": u,
        "details": node_details(u, source_names, values),
        "width": max(len(line) for line in lines) * CHAR_WIDTH + 16.0,
        "height": len(lines) * LINE_HEIGHT + 8.0,
    }
    axis_type = _axis_type(u)
    if axis_type is not None:
        attributes["axis_type"] = axis_type.name
    attributes["shape"] = node_shape(u)
    if attributes["shape"] == RANGE_SHAPE:
        attributes["width"] += RANGE_EXTRA_WIDTH  # the pill's round ends need room beside the text
    if u.op in (Ops.FUNCTION, Ops.CALL):
        attributes.update(collapsible=True, collapsed=collapsed, body_size=body_size(u))
        attributes["width"] += 20.0  # room for the collapse toggle
    return attributes
