"""Turn the data models into the JSON the front end (``static/uopviz.js``) draws.

Plain dicts and lists only: the same JSON goes to a live widget through its traitlets and into a
standalone report.  Nothing here decides compiler facts; it only renames and rounds.
"""

from __future__ import annotations

from typing import Any

import networkx as nx

from uopviz.core.ops import AxisType, OpFamily
from uopviz.widgets.graph import BOX_SHAPE, RANGE_SHAPE, GraphDiff, step_region


def legend() -> dict[str, list[dict[str, str]]]:
    """The legend: every op family and every AxisType with its spec colour (an AxisType's swatch
    has the range nodes' ``shape``: its colour is also some op family's)."""
    return {
        "families": [{"name": f.title, "color": f.color, "title": f"{f.title} ops"} for f in OpFamily],
        "axis_types": [
            {"name": f"{a.name} ({a.letter})", "color": a.color, "title": f"RANGE of AxisType {a.name}",
             "shape": RANGE_SHAPE}
            for a in AxisType
        ],
    }


#: The node attributes that never change for a given UOp (shared between frames in reports).
STATIC_NODE_FIELDS = ("w", "h", "c", "l", "op", "f", "d", "s", "col", "sh")


def placed_node_json(key: str, data: dict[str, Any], family: str) -> dict[str, Any]:
    """The fields every drawn node has, of any graph (UOps, operators): key, position, size,
    colour, label, op, family and side-panel details."""
    x, y = data.get("pos", (0.0, 0.0))
    return {
        "k": key,
        "x": round(x, 1),
        "y": round(y, 1),
        "w": round(data["width"], 1),
        "h": round(data["height"], 1),
        "c": data["color"],
        "l": data["label"],
        "op": data["op"],
        "f": family,
        "d": data["details"],
    }


def node_json(key: str, data: dict[str, Any], index_of: dict[str, int]) -> dict[str, Any]:
    """One node as the front end wants it (short field names: graphs reach thousands of nodes)."""
    u = data["uop"]
    collapsible = 0
    if data.get("collapsible"):
        collapsible = 2 if data.get("collapsed") else 1
    sources = []
    for slot, s in enumerate(u.src):
        if data.get("collapsed") and slot == 0:
            sources.append(None)
            continue
        source_key = f"u{id(s):x}"
        sources.append(source_key if source_key in index_of else None)
    return {
        **placed_node_json(key, data, data["family"]),
        "s": sources,
        "col": collapsible,
        "sh": data.get("shape", BOX_SHAPE),
    }


def graph_json(graph: nx.DiGraph) -> dict[str, Any]:
    """A laid-out graph (:func:`uopviz.widgets.graph.layout`) as JSON for the DAG canvas."""
    keys = list(graph.nodes)
    index_of = {k: i for i, k in enumerate(keys)}
    nodes = [node_json(k, graph.nodes[k], index_of) for k in keys]
    edges = [[index_of[s], index_of[t], slot] for s, t, slot in graph.edges(data="slot")]
    if graph.graph.get("engine") == "linear":
        # a listing shows program order by position: the LINEAR node's own fan of edges is implied
        root = index_of.get(graph.graph.get("root"))
        edges = [edge for edge in edges if edge[1] != root]
    return {
        "nodes": nodes,
        "edges": edges,
        "clusters": graph.graph.get("clusters", []),
        "engine": graph.graph.get("engine"),
        "root": graph.graph.get("root"),
    }


def marks_json(
    diff: GraphDiff | None = None, focus: str | None = None, graph: nx.DiGraph | None = None
) -> dict[str, Any]:
    """Which nodes to highlight: added and changed ones of ``diff``, and a ``focus`` node; with the
    laid-out ``graph``, also the ``region`` a view zooms to when the whole graph is too small to read
    (:func:`uopviz.widgets.graph.step_region`; None without one)."""
    region = step_region(graph, diff, focus) if graph is not None else None
    if diff is None:
        return {"added": [], "changed": [], "focus": focus, "region": region}
    return {"added": sorted(diff.added), "changed": sorted(diff.changed), "focus": focus, "region": region}


def split_static(graph: dict[str, Any], table: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Move each node's static fields into ``table`` (shared by many frames); return the compact
    graph whose nodes keep only key and position.  A collapsed FUNCTION/CALL node keeps its fields
    (the same node drawn open in another frame has another label and sources)."""
    compact_nodes = []
    for node in graph["nodes"]:
        key = node["k"]
        if node.get("col") == 2:
            compact_nodes.append(node)
            continue
        if key not in table:
            table[key] = {field: node[field] for field in STATIC_NODE_FIELDS if field in node}
        compact_nodes.append({"k": key, "x": node["x"], "y": node["y"]})
    return dict(graph, nodes=compact_nodes)
