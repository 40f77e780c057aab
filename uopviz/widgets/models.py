"""Model graphs (NNEF) in the explorer and in reports, recognised by what they have: ``inputs``,
``outputs``, ``tensors`` (name → info with ``dtype``, ``shape``, ``kind``), ``operations`` (each with
``type``, ``inputs``, ``outputs``, ``attribs``) and ``compile(backend, opts)`` giving a Program.

The widgets import nothing of ``uopviz.nnef``; any object of that shape is shown the same way.
"""

from __future__ import annotations

import html
from typing import Any

#: Attribute values longer than this are cut in the operations table.
ATTRIB_CHARS = 60


def is_model_graph(x: Any) -> bool:
    """True for a model graph (an NNEF ``Graph`` or anything shaped like one)."""
    return all(hasattr(x, name) for name in ("inputs", "outputs", "tensors", "operations", "compile")) \
        and isinstance(getattr(x, "tensors", None), dict)


def _names(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, list | tuple):
        return ", ".join(_names(v) for v in value)
    return str(value)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= ATTRIB_CHARS else text[: ATTRIB_CHARS - 1] + "…"


def _attributes(operation: Any) -> str:
    return ", ".join(f"{key}={_short(value)}" for key, value in (operation.attribs or {}).items())


def model_html(graph: Any) -> str:
    """The model as HTML: its inputs and outputs, a table of operations (type, inputs → outputs,
    attributes) and one of tensors (kind, dtype, shape)."""
    cell = 'style="border:1px solid #d0d7de;padding:2px 8px;text-align:left;vertical-align:top"'
    head = 'style="border:1px solid #d0d7de;padding:2px 8px;background:#f6f8fa;text-align:left"'
    table = 'style="border-collapse:collapse;font-size:12px;margin:4px 0 12px"'
    operations = "".join(
        f"<tr><td {cell}>{i}</td><td {cell}><b>{html.escape(str(op.type))}</b></td>"
        f"<td {cell}><code>{html.escape(_names(op.inputs))}</code></td>"
        f"<td {cell}><code>{html.escape(_names(op.outputs))}</code></td>"
        f"<td {cell}><code>{html.escape(_attributes(op))}</code></td></tr>"
        for i, op in enumerate(graph.operations))
    tensors = "".join(
        f"<tr><td {cell}><code>{html.escape(name)}</code></td>"
        f"<td {cell}>{html.escape(str(getattr(info, 'kind', '')))}</td>"
        f"<td {cell}>{html.escape(str(getattr(info, 'dtype', '')))}</td>"
        f"<td {cell}>{html.escape(str(tuple(getattr(info, 'shape', ()))))}</td></tr>"
        for name, info in graph.tensors.items())
    title = html.escape(str(getattr(graph, "name", "model")))
    return (
        f"<div><b>graph {title}</b>: inputs <code>{html.escape(_names(list(graph.inputs)))}</code>, outputs "
        f"<code>{html.escape(_names(list(graph.outputs)))}</code>, {len(graph.operations)} operations, "
        f"{len(graph.tensors)} tensors</div>"
        f"<table {table}><thead><tr><th {head}>#</th><th {head}>operation</th><th {head}>inputs</th>"
        f"<th {head}>outputs</th><th {head}>attributes</th></tr></thead><tbody>{operations}</tbody></table>"
        f"<table {table}><thead><tr><th {head}>tensor</th><th {head}>kind</th><th {head}>dtype</th>"
        f"<th {head}>shape</th></tr></thead><tbody>{tensors}</tbody></table>")
