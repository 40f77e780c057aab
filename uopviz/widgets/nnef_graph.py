"""The operator graph of a model (NNEF): one node per operation, tensors on the edges.

:func:`operator_graph` turns a model graph (``uv.nnef.load(...)``: anything with ``inputs``,
``outputs``, ``tensors`` and ``operations``) into a laid-out ``networkx.DiGraph``, the model as
Netron draws it: a top-to-bottom DAG whose nodes are the operations (``nn.conv``, ``math.add``),
coloured by the module that defines the operator, with the graph's inputs, variables and constants
as source nodes and its outputs as sink nodes.  Each edge is a tensor, labelled with its element
type and shape.  The side panel's text of an operation (:func:`operation_details`) lists its
attributes, its input and output tensors with their shapes and the SkriptND text of its operator
(:func:`definition_source`: the definition as written in the standard library's ``.sknd`` or in
the model's own module).

Positions come from the same layout as every UOp graph (:func:`uopviz.widgets.graph.place`:
graphviz ``dot``, else the pure-Python layered layout).  :func:`operator_graph_json` is the JSON
the DAG canvas of ``static/uopviz.js`` draws, :func:`module_legend` the colour key.

Like :mod:`uopviz.widgets.models`, this module knows models by what they have; of
:mod:`uopviz.nnef` it reads only the source texts its parser kept (to quote definitions).
"""

from __future__ import annotations

from typing import Any

import networkx as nx

from uopviz.core.collector import collector_paused
from uopviz.widgets.graph import CHAR_WIDTH, LINE_HEIGHT, place
from uopviz.widgets.serialize import placed_node_json

__all__ = [
    "MODULE_COLORS", "OPERATOR_PANEL_PROMPT", "TENSOR_COLORS", "definition_source", "module_color",
    "module_legend", "operation_details", "operator_graph", "operator_graph_json", "shape_text",
    "written_tensors",
]  # fmt: skip

#: Colours of the standard modules' operators (the model's own modules take :data:`USER_COLORS`).
MODULE_COLORS = {
    "nn": "#1565C0", "layout": "#2E7D32", "math": "#00838F", "linalg": "#AD1457", "image": "#EF6C00",
    "quant": "#6D4C41", "algo": "#6A1B9A", "misc": "#546E7A", "rand": "#9E9D24", "layer": "#283593",
    "control": "#C62828", "runtime": "#F9A825",
}  # fmt: skip
#: What each standard module is about (the legend's tooltips).
MODULE_TITLES = {
    "nn": "neural network", "layout": "layout", "math": "math", "linalg": "linear algebra",
    "image": "image", "quant": "quantization", "algo": "algorithm", "misc": "misc", "rand": "random",
    "layer": "layer", "control": "control flow", "runtime": "run-time shape",
}  # fmt: skip
#: Colours given to the model's own modules, in order of their names.
USER_COLORS = ("#8E24AA", "#D81B60", "#00897B", "#F4511E", "#5E35B1", "#7CB342", "#3949AB", "#FB8C00")
#: Colours of the tensor nodes: the graph's inputs, variables, constants and outputs.
TENSOR_COLORS = {"input": "#CFD8DC", "variable": "#ECEFF1", "constant": "#F5F5F5", "output": "#CFD8DC"}
#: Kinds of the source nodes (tensors nobody in the graph computes).
TENSOR_SOURCES = ("input", "variable", "constant")
#: The module name shown for operators defined without one (in the model's main text).
NO_MODULE = "(model)"
#: Characters kept from an attribute value in the side panel.
ATTRIBUTE_CHARS = 200
#: Lines kept from an operator's source text.
DEFINITION_LINES = 400


# ---------------------------------------------------------------------------------------------
# text of tensors, operators and their definitions


#: What an operator graph's side panel says before a node is clicked (not the UOp prompt: a model's
#: nodes are operations and tensors, with attributes and definitions, not ops with dtypes and args).
OPERATOR_PANEL_PROMPT = ("Click an operation to see its operator, attributes, input and output tensors and "
                         "SkriptND definition, or a tensor to see its type and shape.")


def shape_text(shape: Any) -> str:
    """``[1, 64, 54, 54]`` (``[]`` for a scalar); run-time extents as their ``str``."""
    return "[" + ", ".join(str(extent) for extent in tuple(shape)) + "]"


def tensor_text(info: Any) -> str:
    """``real[1, 64, 54, 54]``: a tensor's element type and shape."""
    return f"{getattr(info, 'dtype', '')}{shape_text(getattr(info, 'shape', ()))}"


def _named_tensor_text(graph: Any, name: str, texts: dict[str, str] | None) -> str:
    """:func:`tensor_text` of the tensor ``name``, kept in ``texts`` (a 2,000-operation graph names
    each tensor three or four times)."""
    if texts is None:
        return tensor_text(graph.tensors.get(name))
    text = texts.get(name)
    if text is None:
        text = texts[name] = tensor_text(graph.tensors.get(name))
    return text


def module_of(operation: Any) -> str:
    """The module that defines ``operation``'s operator (``nn`` for ``nn.conv``)."""
    return str(operation.type).rpartition(".")[0] or NO_MODULE


def module_color(module: str, user_modules: list[str] | tuple[str, ...] = ()) -> str:
    """The colour of the operators of ``module``: the standard module's, else the model's own
    modules take :data:`USER_COLORS` in the order of ``user_modules``."""
    if module in MODULE_COLORS:
        return MODULE_COLORS[module]
    index = list(user_modules).index(module) if module in user_modules else len(user_modules)
    return USER_COLORS[index % len(USER_COLORS)]


def _flatten(values: Any) -> list[str | None]:
    if isinstance(values, list | tuple):
        return [name for value in values for name in _flatten(value)]
    return [values]


def _parameter_names(params: Any, count: int) -> list[str]:
    """The declared name of each flattened argument (a pack's items named ``name[i]``)."""
    names = [getattr(param, "name", f"#{i}") for i, param in enumerate(params or ())]
    return [names[i] if i < len(names) else f"#{i}" for i in range(count)]


def _argument_lines(graph: Any, values: Any, params: Any, texts: dict[str, str] | None = None) -> str:
    """One line per argument: ``filter = kernel1  real[64, 3, 11, 11]``; packs item by item."""
    lines = []
    names = _parameter_names(params, len(tuple(values)))
    for name, value in zip(names, tuple(values), strict=True):
        items = value if isinstance(value, list | tuple) else [value]
        for index, item in enumerate(items):
            shown = f"{name}[{index}]" if isinstance(value, list | tuple) else name
            if item is None:
                lines.append(f"{shown} = (omitted)")
                continue
            kind = getattr(graph.tensors.get(item), "kind", "")
            kind = f"  ({kind})" if kind in TENSOR_SOURCES else ""
            lines.append(f"{shown} = {item}  {_named_tensor_text(graph, item, texts)}{kind}")
    return "\n".join(lines) if lines else "—"


def _short(value: Any, limit: int = ATTRIBUTE_CHARS) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def definition_source(operation: Any) -> str:
    """The SkriptND text of ``operation``'s operator as written: the ``operator ... { ... }`` block
    of the standard library's ``.sknd`` file or of the model's module, with the comment lines right
    above it.  The parser keeps each definition's start (``definition.pos``) and every text it read
    (``uopviz.nnef.errors.source_line``); the block ends where its braces close.  When that text is
    not at hand, the operator's canonical form (``operation.definition_text()``)."""
    from uopviz.nnef.errors import source_line  # the texts the SkriptND parser has read

    definition = getattr(operation, "definition", None)
    position = getattr(definition, "pos", None)
    lines = _block_at(source_line, position) if position is not None else []
    if lines:
        return "\n".join(lines)
    text = getattr(operation, "definition_text", None)
    return text() if callable(text) else str(operation.type)


def _block_at(source_line: Any, position: Any) -> list[str]:
    """The lines of the ``{ ... }`` block starting at ``position`` (and the comments above it)."""
    file, first = position.file, position.line
    if source_line(file, first) is None:
        return []
    above: list[str] = []
    line_number = first - 1
    while line_number >= 1 and (source_line(file, line_number) or "").lstrip().startswith("#"):
        above.insert(0, source_line(file, line_number))
        line_number -= 1
    lines: list[str] = []
    depth, opened, quote = 0, False, None
    line_number = first
    while len(lines) < DEFINITION_LINES:
        text = source_line(file, line_number)
        if text is None:
            break
        lines.append(text)
        for character in text:
            if quote is not None:
                quote = None if character == quote else quote
            elif character in "'\"":
                quote = character
            elif character == "#":
                break  # a comment runs to the end of the line
            elif character == "{":
                depth, opened = depth + 1, True
            elif character == "}":
                depth -= 1
        quote = None  # strings do not span lines
        if opened and depth <= 0:
            break
        line_number += 1
    return above + lines


def operation_details(
    graph: Any,
    operation: Any,
    index: int,
    sources: dict[int, str] | None = None,
    texts: dict[str, str] | None = None,
) -> dict[str, str]:
    """What the side panel shows for an operation: its type, module, label, output shapes, every
    attribute (``name = value`` lines), the input and output tensors with their shapes (as the
    operator's declarations name them), the composites it was expanded from, where its operator is
    defined and the operator's SkriptND text.  ``sources`` caches the texts by definition (many
    operations share an operator), ``texts`` the tensors' texts by name."""
    definition = getattr(operation, "definition", None)
    outputs = written_tensors(operation)
    attributes = "\n".join(f"{key} = {_short(value)}" for key, value in (operation.attribs or {}).items())
    details = {
        "op": str(operation.type),
        "family": MODULE_TITLES.get(module_of(operation), module_of(operation)),
        "label": str(getattr(operation, "label", "")),
        "index": str(index),
        "shape": ", ".join(_named_tensor_text(graph, name, texts) for name in outputs) or "—",
        "attributes": attributes or "—",
        "inputs": _argument_lines(graph, operation.inputs, getattr(definition, "inputs", ()), texts),
        "outputs": _argument_lines(graph, operation.outputs, getattr(definition, "outputs", ()), texts),
    }
    constants = getattr(operation, "constants", None) or {}
    if constants:
        details["constants"] = "\n".join(
            f"{name} = {tensor}  {_named_tensor_text(graph, tensor, texts)}"
            for name, tensor in constants.items()
        )
    scopes = tuple(getattr(operation, "scopes", ()) or ())
    if scopes:
        details["expanded from"] = " › ".join(scopes)
    position = getattr(definition, "pos", None)
    if position is not None and getattr(position, "line", 0):
        details["defined at"] = f"{position.file}:{position.line}"
    if sources is None:
        details["definition"] = definition_source(operation)
    else:
        if id(definition) not in sources:
            sources[id(definition)] = definition_source(operation)
        details["definition"] = sources[id(definition)]
    return details


# ---------------------------------------------------------------------------------------------
# the graph


def _node_size(lines: list[str]) -> tuple[float, float]:
    return max(len(line) for line in lines) * CHAR_WIDTH + 16.0, len(lines) * LINE_HEIGHT + 8.0


def _tensor_node(kind: str, name: str, info: Any) -> dict[str, Any]:
    lines = [name, tensor_text(info)]
    width, height = _node_size(lines)
    return {
        "kind": kind, "op": kind, "type": kind, "module": None, "tensor": name,
        "color": TENSOR_COLORS[kind], "label": "\n".join(lines), "width": width, "height": height,
        "details": {"op": kind, "family": "tensor", "tensor": name, "dtype": str(getattr(info, "dtype", "")),
                    "shape": shape_text(getattr(info, "shape", ()))},
    }  # fmt: skip


def _operation_node(
    graph: Any, operation: Any, index: int, color: str, sources: dict[int, str], texts: dict[str, str]
) -> dict[str, Any]:
    lines = [str(operation.type)]
    label = str(getattr(operation, "label", "") or "")
    if label:
        lines.append(label)
    scopes = tuple(getattr(operation, "scopes", ()) or ())
    if scopes:
        lines.append(f"in {scopes[-1]}")
    width, height = _node_size(lines)
    return {
        "kind": "operation", "op": str(operation.type), "type": str(operation.type), "index": index,
        "module": module_of(operation), "color": color, "label": "\n".join(lines), "operation": operation,
        "width": width, "height": height,
        "details": operation_details(graph, operation, index, sources, texts),
    }  # fmt: skip


def _add_edge(
    graph: nx.DiGraph, source: str, target: str, slot: int, tensor: str, info: Any, text: str
) -> None:
    """An edge carrying ``tensor`` (``text``: its type and shape); a second tensor between the same
    nodes joins the first edge."""
    if graph.has_edge(source, target):
        edge = graph.edges[source, target]
        edge["tensors"] += (tensor,)
        edge["label"] += "\n" + text
        return
    graph.add_edge(
        source, target, slot=slot, tensor=tensor, tensors=(tensor,), shape=tuple(getattr(info, "shape", ())),
        dtype=str(getattr(info, "dtype", "")), label=text,
    )  # fmt: skip


def _read(operation: Any) -> list[str]:
    """The tensors an operation reads: its inputs (packs flattened) and its operator's constants."""
    names = [name for name in _flatten(operation.inputs) if name is not None]
    return names + list((getattr(operation, "constants", None) or {}).values())


def _source_kind(info: Any) -> str:
    """The node kind of a tensor nobody in the graph computes: input, variable or constant."""
    kind = getattr(info, "kind", "input")
    return kind if kind in TENSOR_SOURCES else "input"


def written_tensors(operation: Any) -> list[str]:
    """The tensors an operation computes (packs flattened)."""
    return [name for name in _flatten(operation.outputs) if name is not None]


def operator_graph(model: Any, *, engine: str = "auto") -> nx.DiGraph:
    """The operator graph of ``model`` (an NNEF graph), laid out top to bottom.

    Nodes: ``op:<i>`` for each of ``model.operations`` (attributes ``kind="operation"``, ``op`` and
    ``type`` the operator's qualified name, ``index``, ``module``, ``color``, ``label``,
    ``operation``, ``details`` (:func:`operation_details`), ``width``, ``height``, ``pos``);
    ``input:<name>``, ``variable:<name>``, ``constant:<name>`` for the tensors nobody computes, and
    ``output:<name>`` for each graph output (``kind`` the tensor's kind, ``tensor`` its name).
    Edges go producer → consumer with ``tensor`` (the first tensor they carry), ``tensors`` (all),
    ``shape``, ``dtype``, ``label`` (``real[1, 64, 54, 54]``) and ``slot`` (the input's position).
    ``graph.graph`` holds ``engine``, ``size``, ``modules`` (module → colour, in order of first use)
    and ``name``.
    """
    if not all(hasattr(model, name) for name in ("inputs", "outputs", "tensors", "operations")):
        raise TypeError(f"operator_graph() takes a model graph (uv.nnef.load), got {type(model).__name__}")
    with collector_paused():  # its many small objects live as long as the graph
        return _operator_graph(model, engine)


def _operator_graph(model: Any, engine: str) -> nx.DiGraph:
    operations = list(model.operations)
    modules = list(dict.fromkeys(module_of(op) for op in operations))
    user_modules = sorted(m for m in modules if m not in MODULE_COLORS)
    colors = {module: module_color(module, user_modules) for module in modules}
    graph = nx.DiGraph(name=str(getattr(model, "name", "model")), engine=None, clusters=[], size=(0.0, 0.0),
                       modules=colors)
    producer: dict[str, str] = {}
    sources: dict[int, str] = {}  # definition texts, found once per operator
    texts: dict[str, str] = {}  # tensor texts, made once per tensor
    for index, operation in enumerate(operations):
        key = f"op:{index}"
        node = _operation_node(model, operation, index, colors[module_of(operation)], sources, texts)
        graph.add_node(key, **node)
        for name in written_tensors(operation):
            producer[name] = key
    for index, operation in enumerate(operations):
        for slot, name in enumerate(_read(operation)):
            source = producer.get(name)
            info = model.tensors.get(name)
            if source is None:
                kind = _source_kind(info)
                source = f"{kind}:{name}"
                if source not in graph:
                    graph.add_node(source, **_tensor_node(kind, name, info))
                producer[name] = source
            _add_edge(graph, source, f"op:{index}", slot, name, info, _named_tensor_text(model, name, texts))
    for name in model.outputs:
        info = model.tensors.get(name)
        key = f"output:{name}"
        graph.add_node(key, **_tensor_node("output", name, info))
        source = producer.get(name)
        if source is None:  # an output that is an input or variable as it is
            kind = _source_kind(info)
            source = f"{kind}:{name}"
            graph.add_node(source, **_tensor_node(kind, name, info))
        _add_edge(graph, source, key, 0, name, info, _named_tensor_text(model, name, texts))
    place(graph, engine)
    return graph


# ---------------------------------------------------------------------------------------------
# what the front end draws


def module_legend(graph: nx.DiGraph) -> dict[str, list[dict[str, str]]]:
    """The colour key of an operator graph: its modules and the kinds of tensor nodes it has."""
    modules = [
        {"name": module, "color": color,
         "title": f"operators of module {module} ({MODULE_TITLES.get(module, 'the model')})"}
        for module, color in graph.graph.get("modules", {}).items()
    ]
    kinds = {data["kind"] for _, data in graph.nodes(data=True)}
    tensors = [{"name": kind, "color": TENSOR_COLORS[kind], "title": f"graph {kind}s"}
               for kind in TENSOR_COLORS if kind in kinds]
    return {"modules": modules, "tensors": tensors}


def operator_graph_json(graph: nx.DiGraph) -> dict[str, Any]:
    """A laid-out operator graph as the DAG canvas draws it: nodes as ``uopviz.widgets.serialize``
    writes UOp nodes, edges ``[source, target, slot, label]`` (the label empty out of tensor nodes).

    The operators' definition texts are written once, in ``texts``: a node's side-panel
    ``definition`` is ``texts[node["dd"]]`` (the canvas puts it back). Eight hundred convolutions
    repeating nn.conv's text made nine tenths of a 2,000-operation graph's 6 MB."""
    keys = list(graph.nodes)
    index_of = {key: i for i, key in enumerate(keys)}
    texts: dict[str, int] = {}
    nodes = [_placed_operator_node(key, graph.nodes[key], texts) for key in keys]
    # an edge out of an input, variable or constant node goes unlabelled: the node says the shape,
    # and the labels of the weights converging on one operation would overlap
    edges = [[index_of[s], index_of[t], data.get("slot", 0),
              "" if graph.nodes[s]["kind"] in TENSOR_SOURCES else data.get("label", "")]
             for s, t, data in graph.edges(data=True)]
    return {"nodes": nodes, "edges": edges, "clusters": [], "engine": graph.graph.get("engine"), "root": None,
            "texts": list(texts)}


def _placed_operator_node(key: str, data: dict[str, Any], texts: dict[str, int]) -> dict[str, Any]:
    details = data["details"]
    node = {**placed_node_json(key, data, details.get("family", "")), "col": 0}
    definition = details.get("definition")
    if definition is not None:
        node["d"] = {name: value for name, value in details.items() if name != "definition"}
        node["dd"] = texts.setdefault(definition, len(texts))
    return node
