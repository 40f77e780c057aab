"""Canonical SkriptND text from the syntax tree of :mod:`uopviz.nnef.syntax.ast`.

:func:`print_module` writes a whole module, :func:`print_expression` one expression. The output
re-parses to an equal tree (positions aside): ``parse_module(print_module(m)) == m`` for every
``m`` produced by :func:`uopviz.nnef.syntax.parser.parse_module`. Parentheses are inserted exactly
where the precedence rules of the parser need them; blocks come out in the processing order of
§2.2; strings use double quotes; pack expansions after a number get a space (``1 ..(3)``) so
that other tools do not read ``1.`` as a real.
"""

from __future__ import annotations

from uopviz.nnef.syntax import ast
from uopviz.nnef.syntax.parser import BINARY_PRECEDENCE

__all__ = ["print_component", "print_definition", "print_expression", "print_module"]

_INDENT = "    "
_TYPE_KEYWORDS = frozenset({"int", "real", "bool", "str"})
_LOWEST = 0  # select, coalesce, substitution: parenthesised inside any operator
_UNARY = 8
_ATOM = 9  # literals, names, postfix forms, delimited forms
_STRING_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r", "{": "\\{", "}": "\\}"}


def print_module(module: ast.Module) -> str:
    """The canonical text of a whole module."""
    lines: list[str] = []
    if module.version is not None:
        lines.append(f"version {module.version[0]}.{module.version[1]};")
    if module.extensions:
        lines.append(f"extension {', '.join(module.extensions)};")
    lines.extend(f"import {item.module};" for item in module.imports)
    chunks = ["\n".join(lines)] if lines else []
    chunks.extend(print_definition(definition) for definition in module.definitions)
    return "\n\n".join(chunks) + "\n"


def print_definition(definition: ast.Definition) -> str:
    """The text of one operator or graph definition."""
    head = ("public " if definition.public else "") + f"{definition.kind} {definition.name} {{"
    blocks = [
        ("dtype", definition.dtypes, _type_param),
        ("attrib", definition.attribs, _param),
        ("input", definition.inputs, _param),
        ("using", definition.usings, _using),
        ("constant", definition.constants, _param),
        ("variable", definition.variables, _param),
        ("output", definition.outputs, _param),
        ("assert", definition.asserts, _assertion),
        ("lower", definition.lowerings, _lowering),
        ("compose", definition.components, lambda item: _component(item, 2)),
        ("update", definition.updates, lambda item: _component(item, 2)),
        ("quantize", definition.quantizations, _quantization),
    ]
    lines = [head]
    for name, entries, render in blocks:
        if entries:
            lines.append(f"{_INDENT}@{name} {{")
            lines.extend(f"{_INDENT * 2}{render(entry)}" for entry in entries)
            lines.append(f"{_INDENT}}}")
    lines.append("}")
    return "\n".join(lines)


# -- declarations --------------------------------------------------------------------------------


def _type_param(param: ast.TypeParam) -> str:
    """``T: num = real;``"""
    default = f" = {param.default}" if param.default else ""
    return f"{param.name}: {param.base}{default};"


def type_spec_text(spec: ast.TypeSpec) -> str:
    """``[dynamic] [optional] name[^(r)][shape][pack]``."""
    text = f"{spec.qualifier} " if spec.qualifier else ""
    text += "optional " if spec.optional else ""
    text += spec.name
    if spec.rank is not None:
        text += f"^({print_expression(spec.rank)})"
    if spec.shape is not None:
        text += "[" + ", ".join(_extent(extent) for extent in spec.shape.extents) + "]"
    if spec.pack is not None:
        text += _pack(spec.pack, text)
    return text


def _pack(pack: ast.PackSpec, before: str) -> str:
    """``..`` / ``..(count)`` / ``..(static count|bound)``; a space after a digit."""
    spacing = " " if before and (before[-1].isdigit() or before[-1] == ".") else ""
    if pack.count is None and pack.bound is None and pack.qualifier is None:
        return spacing + ".."
    inner = f"{pack.qualifier} " if pack.qualifier else ""
    inner += print_expression(pack.count) if pack.count is not None else "~"
    if pack.bound is not None:
        inner += f" | {print_expression(pack.bound)}"
    return f"{spacing}..({inner})"


def _extent(extent: ast.Extent) -> str:
    """One shape item."""
    text = f"{extent.qualifier} " if extent.qualifier else ""
    text += ".." if extent.distinct else ""
    text += _expr(extent.value, 1)
    if extent.bound is not None:
        text += f" | {_expr(extent.bound, 1)}"
    if extent.pack is not None:
        text += _pack(extent.pack, text)
    return text


def _param(param: ast.Param) -> str:
    """``name: type [= default[, i < n]*];``"""
    text = f"{param.name}: {type_spec_text(param.type)}"
    if param.default is not None:
        text += f" = {print_expression(param.default)}"
        text += "".join(f", {_bound(bound)}" for bound in param.bounds)
    return text + ";"


def _bound(bound: ast.LoopBound) -> str:
    """``i < n``"""
    return f"{bound.name} < {print_expression(bound.bound)}"


def _using(using: ast.Using) -> str:
    """``target[..(n)] = value;``"""
    target = print_expression(using.target)
    if using.count is not None:
        target += f"..({print_expression(using.count)})"
    return f"{target} = {print_expression(using.value)};"


def _assertion(assertion: ast.Assert) -> str:
    """``condition[: message[, prints]];``"""
    text = print_expression(assertion.condition)
    if assertion.message is not None:
        text = _before_colon(assertion.condition)
        text += f": {print_expression(assertion.message)}"
        for item in assertion.prints:
            label = f"{_string(item.label)}: " if item.label is not None else ""
            text += f", {label}{print_expression(item.value)}"
    return text + ";"


def _lowering(lowering: ast.Lowering) -> str:
    """One @lower statement on one line."""
    text = ""
    if lowering.unroll_count is not None:
        index = f"{lowering.unroll_index} -> " if lowering.unroll_index else ""
        text += f"unroll..({index}{print_expression(lowering.unroll_count)}) "
    if lowering.locals:
        local_defs = (f"{item.name} = {_before_colon(item.value)}" for item in lowering.locals)
        text += "with " + ", ".join(local_defs)
        text += ": "
    text += f"{print_expression(lowering.target)} {lowering.op} {print_expression(lowering.value)}"
    # The loop bounds and the condition go on a continuation line, as in the specification.
    tail = ", ".join(_bound(bound) for bound in lowering.bounds)
    if lowering.condition is not None:
        tail += f" | {print_expression(lowering.condition)}"
    if tail:
        text += ("," if lowering.bounds else "") + "\n" + _INDENT * 3 + tail.lstrip()
    return text + ";"


def _quantization(quantization: ast.Quantization) -> str:
    """``tensor: op<types>{attribs};``"""
    invocation = quantization.invocation
    return f"{quantization.tensor}: {invocation.name}{_generics(invocation)}{_attribs(invocation)};"


# -- composition ---------------------------------------------------------------------------------


def print_component(component: ast.Component) -> str:
    """The canonical text of one @compose statement (``results = value;``)."""
    return _component(component, 0)


def _component(component: ast.Component, depth: int) -> str:
    """``results = value;``"""
    results = ", ".join(_result_group(group) for group in component.results)
    return f"{results} = {_component_value(component.value, depth)};"


def _result_group(group: ast.Result | ast.ResultList | ast.ResultTuple) -> str:
    """A result, a bracketed result list or a parenthesised tuple."""
    if isinstance(group, ast.ResultList):
        return "[" + ", ".join(_result_group(item) for item in group.items) + "]"
    if isinstance(group, ast.ResultTuple):
        text = "(" + ", ".join(_result(item) for item in group.items) + ")"
        return text + (_pack(group.pack, text) if group.pack is not None else "")
    return _result(group)


def _result(result: ast.Result) -> str:
    """``~`` or ``name[: type][..(n)]``."""
    text = "~" if result.name is None else result.name
    if result.type is not None:
        text += f": {type_spec_text(result.type)}"
    if result.pack is not None:
        text += _pack(result.pack, text)
    return text


def _component_value(value: ast.Callable, depth: int) -> str:
    """The right-hand side of a component."""
    if isinstance(value, ast.If):
        return _branch(value, depth)
    if isinstance(value, ast.Loop):
        return _loop(value, depth)
    return _callable(value, depth)


def _callable(value: ast.Callable, depth: int) -> str:
    """An invocation, a block or an expression (parenthesised where it would read as an invocation)."""
    if isinstance(value, ast.Invocation):
        return _invocation(value)
    if isinstance(value, ast.Block):
        return _block(value, depth)
    if isinstance(value, (ast.If, ast.Loop)):
        raise TypeError("a branch or loop can only be the whole right-hand side of a component")
    text = print_expression(value)
    return f"({text})" if _reads_as_invocation(value) else text


def _left_spine(value: ast.Expr) -> list[ast.Expr]:
    """``value`` and its leftmost descendants, outermost first (what the text starts with)."""
    spine = [value]
    while True:
        node = spine[-1]
        if isinstance(node, ast.Binary) and not (node.op == "**" and _precedence(node.left) < _ATOM):
            spine.append(node.left)
        elif isinstance(node, ast.Fold) and _precedence(node.operand) >= BINARY_PRECEDENCE[node.op]:
            spine.append(node.operand)
        elif isinstance(node, ast.Select) and _precedence(node.condition) >= 1:
            spine.append(node.condition)
        elif isinstance(node, ast.Coalesce) and _precedence(node.value) >= 1:
            spine.append(node.value)
        elif isinstance(node, (ast.Index, ast.TensorAccess, ast.Substitute)) and _is_atom(node.base):
            spine.append(node.base)
        else:
            return spine


def _is_atom(node: ast.Expr) -> bool:
    """Whether ``node`` prints without parentheses in any position."""
    return _precedence(node) == _ATOM


def _reads_as_invocation(value: ast.Expr) -> bool:
    """Whether the text of ``value``, as a component's right-hand side, would parse as an invocation.

    That is the case when it starts with ``name(`` (a built-in or a generic cast) or with
    ``name < T > (`` (a comparison chain that looks like generic arguments).
    """
    spine = _left_spine(value)
    leaf = spine[-1]
    if isinstance(leaf, ast.Builtin) or (isinstance(leaf, ast.Cast) and leaf.type_name not in _TYPE_KEYWORDS):
        return True
    parent = spine[-2] if len(spine) > 1 else None
    is_name = isinstance(leaf, (ast.Identifier, ast.Member))
    return is_name and isinstance(parent, ast.Binary) and parent.op == "<"


def _invocation(invocation: ast.Invocation) -> str:
    """``[label: ]name<types>{attribs}(args)``."""
    label = f"{invocation.label}: " if invocation.label else ""
    args = ", ".join(print_expression(arg) for arg in invocation.args)
    return f"{label}{invocation.name}{_generics(invocation)}{_attribs(invocation)}({args})"


def _generics(invocation: ast.Invocation) -> str:
    """``<T, S>`` or nothing."""
    return f"<{', '.join(invocation.types)}>" if invocation.types else ""


def _attribs(invocation: ast.Invocation) -> str:
    """``{a = 1, b = 2}`` or nothing."""
    if not invocation.attribs:
        return ""
    return "{" + ", ".join(f"{name} = {print_expression(value)}" for name, value in invocation.attribs) + "}"


def _block(block: ast.Block, depth: int) -> str:
    """``[label: ]{ components; yield values; }`` over several lines."""
    inner = _INDENT * (depth + 1)
    lines = [("" if block.label is None else f"{block.label}: ") + "{"]
    lines.extend(inner + _component(component, depth + 1) for component in block.components)
    lines.append(inner + "yield " + ", ".join(print_expression(value) for value in block.yields) + ";")
    lines.append(_INDENT * depth + "}")
    return "\n".join(lines)


def _branch(branch: ast.If, depth: int) -> str:
    """``if c then v elif c then v else v``."""
    parts = []
    for index, (condition, then) in enumerate(branch.branches):
        keyword = "if" if index == 0 else "elif"
        parts.append(f"{keyword} {_callable(condition, depth)} then {_callable(then, depth)}")
    parts.append(f"else {_callable(branch.otherwise, depth)}")
    return " ".join(parts)


def _loop(loop: ast.Loop, depth: int) -> str:
    """The clauses of a loop in their fixed order."""
    parts = []
    if loop.carries:
        parts.append("with " + ", ".join(_carry(carry) for carry in loop.carries))
    if loop.scans:
        scans = (f"{scan.name} : {print_expression(scan.pack)}" for scan in loop.scans)
        parts.append("for " + ", ".join(scans))
    if loop.condition is not None and loop.pretest:
        parts.append(f"while {_callable(loop.condition, depth)}")
    keyword = "unroll" if loop.unroll else "do"
    if loop.index is not None or loop.count is not None:
        parts_of_count = [f"{loop.index} ->"] if loop.index is not None else []
        if loop.count is not None:
            parts_of_count.append(print_expression(loop.count))
        keyword += "..(" + " ".join(parts_of_count) + ")"
    parts.append(f"{keyword} {_callable(loop.body, depth)}")
    if loop.condition is not None and not loop.pretest:
        parts.append(f"while {_callable(loop.condition, depth)}")
    return " ".join(parts)


def _carry(carry: ast.Carry) -> str:
    """``name[: type] = initial``."""
    spec = f": {type_spec_text(carry.type)}" if carry.type is not None else ""
    return f"{carry.name}{spec} = {print_expression(carry.initial)}"


# -- expressions ---------------------------------------------------------------------------------


def print_expression(node: ast.Expr) -> str:
    """The canonical text of an expression."""
    return _expr(node, _LOWEST)


def _precedence(node: ast.Expr) -> int:
    """How tightly ``node`` binds when printed without parentheses."""
    if isinstance(node, (ast.Select, ast.Coalesce, ast.Substitute, ast.Expand, ast.Range)):
        return _LOWEST
    if isinstance(node, (ast.Binary, ast.Fold)):
        return BINARY_PRECEDENCE[node.op]
    if isinstance(node, ast.Unary):
        return _UNARY
    return _ATOM


def _expr(node: ast.Expr, minimum: int) -> str:
    """``node`` as text, in parentheses when it binds less tightly than ``minimum``."""
    text = _render(node)
    return f"({text})" if _precedence(node) < minimum else text


def _render(node: ast.Expr) -> str:
    """The text of ``node`` without surrounding parentheses."""
    renderer = _RENDERERS.get(type(node))
    if renderer is None:
        raise TypeError(f"not a SkriptND expression node: {type(node).__name__}")
    return renderer(node)


def _real(value: float) -> str:
    """A real literal that lexes back to the same float."""
    text = repr(float(value))
    return text if any(char in text for char in ".e") else text + ".0"


def _string(value: str) -> str:
    """A double-quoted string literal with escapes."""
    return '"' + "".join(_STRING_ESCAPES.get(char, char) for char in value) + '"'


def _format(node: ast.Format) -> str:
    """A string with ``{expr}`` placeholders."""
    pieces = []
    for part in node.parts:
        if isinstance(part, str):
            pieces.append(_string(part)[1:-1])
        else:
            pieces.append("{" + print_expression(part) + "}")
    return '"' + "".join(pieces) + '"'


def _binary(node: ast.Binary) -> str:
    """``left op right`` with the operands parenthesised as precedence requires."""
    precedence = BINARY_PRECEDENCE[node.op]
    if node.op == "**":
        # Left-associative and tighter than unary: the base must be an atom or another power;
        # the exponent an atom (signs on it are parenthesised too, to stay unambiguous).
        base = node.left
        left = _render(base) if isinstance(base, ast.Binary) and base.op == "**" else _expr(base, _ATOM)
        return f"{left} ** {_expr(node.right, _ATOM)}"
    return f"{_expr(node.left, precedence)} {node.op} {_expr(node.right, precedence + 1)}"


def _unary(node: ast.Unary) -> str:
    """``op operand``; nested unaries and non-power operators get parentheses."""
    operand = node.operand
    if isinstance(operand, ast.Binary) and operand.op == "**":
        return f"{node.op}{_render(operand)}"
    return f"{node.op}{_expr(operand, _ATOM)}"


def _fold(node: ast.Fold) -> str:
    """``operand op ..`` / ``operand op ...``."""
    dots = "..." if node.cumulative else ".."
    return f"{_expr(node.operand, BINARY_PRECEDENCE[node.op])} {node.op} {dots}"


def _ends_with_open_select(node: ast.Expr) -> bool:
    """Whether the text of ``node`` ends with a select without ':' (which would take a following ':')."""
    while True:
        if isinstance(node, ast.Select):
            if node.otherwise is None:
                return True
            node = node.otherwise
        elif isinstance(node, ast.Coalesce):
            node = node.fallback
        else:
            return False


def _before_colon(node: ast.Expr) -> str:
    """An expression followed by ':' (select branch, assertion condition, lowering local)."""
    text = print_expression(node)
    return f"({text})" if _ends_with_open_select(node) else text


def _select(node: ast.Select) -> str:
    """``c ? a : b`` / ``c ? a``."""
    condition = _expr(node.condition, 1)
    if node.otherwise is None:
        return f"{condition} ? {print_expression(node.then)}"
    return f"{condition} ? {_before_colon(node.then)} : {print_expression(node.otherwise)}"


def _base(node: ast.Expr) -> str:
    """The subscripted part of a postfix form."""
    return _expr(node, _ATOM)


def _item(node: ast.Expr) -> str:
    """A list / index item: expansions and ranges print their own syntax."""
    if isinstance(node, ast.Expand):
        value = _item_value(node.value)
        spacing = " " if value[-1].isdigit() or value[-1] == "." else ""
        count = f"({print_expression(node.count)})" if node.count is not None else ""
        return f"{value}{spacing}..{count}"
    if isinstance(node, ast.Range):
        parts = [_expr(part, 1) if part is not None else "" for part in (node.start, node.stop)]
        text = ":".join(parts)
        if node.step is not None:
            text += ":" + _expr(node.step, 1)
        return text
    return _item_value(node)


def _item_value(node: ast.Expr) -> str:
    """An item's value; a select without ':' must not swallow a following range colon."""
    if isinstance(node, (ast.Expand, ast.Range)):
        return f"({_item(node)})"
    return print_expression(node)


def _index(node: ast.Index) -> str:
    """``base[index]``."""
    index = node.index
    text = _item(index) if isinstance(index, ast.Range) else print_expression(index)
    return f"{_base(node.base)}[{text}]"


def _tensor_access(node: ast.TensorAccess) -> str:
    """``base[i, j]``, ``base[i,]`` or ``base[]``."""
    items = [_item(index) for index in node.indices]
    text = ", ".join(items)
    single_is_access = len(items) == 1 and isinstance(node.indices[0], (ast.Expand, ast.Bounded))
    if len(items) == 1 and not single_is_access:
        text += ","
    return f"{_base(node.base)}[{text}]"


def _substitute(node: ast.Substitute) -> str:
    """``base[index] <- value``."""
    return f"{_base(node.base)}[{print_expression(node.index)}] <- {_expr(node.value, 1)}"


def _bounded(node: ast.Bounded) -> str:
    """``|i|`` / ``|i <> a : b|``."""
    text = _expr(node.index, 1)
    if node.lower is not None or node.upper is not None:
        lower = _expr(node.lower, 1) if node.lower is not None else "~"
        upper = _expr(node.upper, 1) if node.upper is not None else "~"
        text += f" <> {lower} : {upper}"
    return f"|{text}|"


_RENDERERS = {
    ast.Identifier: lambda node: node.name,
    ast.Member: lambda node: f"{node.name}.{node.member}",
    ast.IntLiteral: lambda node: str(node.value),
    ast.RealLiteral: lambda node: _real(node.value),
    ast.BoolLiteral: lambda node: "true" if node.value else "false",
    ast.StringLiteral: lambda node: _string(node.value),
    ast.KeywordConstant: lambda node: node.name,
    ast.Format: _format,
    ast.Placeholder: lambda node: "~",
    ast.List: lambda node: "[" + ", ".join(_item(item) for item in node.items) + "]",
    ast.Range: _item,
    ast.Expand: _item,
    ast.Zip: lambda node: "(" + ", ".join(print_expression(item) for item in node.items) + ")",
    ast.Index: _index,
    ast.TensorAccess: _tensor_access,
    ast.Substitute: _substitute,
    ast.Unary: _unary,
    ast.Binary: _binary,
    ast.Select: _select,
    ast.Coalesce: lambda node: f"{_expr(node.value, 1)} ?? {print_expression(node.fallback)}",
    ast.Fold: _fold,
    ast.Cast: lambda node: f"{node.type_name}({'' if node.arg is None else print_expression(node.arg)})",
    ast.Builtin: lambda node: f"{node.func}({print_expression(node.arg)})",
    ast.Bounded: _bounded,
}
