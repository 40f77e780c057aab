"""The graph model behind every DAG view: a laid-out ``networkx.DiGraph`` of a UOp graph.

:func:`layout` turns a UOp graph into one node per shown UOp, with everything a view needs:
the op, its family and colour (the spec's colours; a RANGE takes its AxisType's colour), a
label (op and arg summary, folded operands, dtype and shape), the details shown on click
(sources, min_max, device, axis...) and a position.  What a node says and looks like is
:mod:`uopviz.widgets.graph_labels`'s (re-exported here); which UOps become nodes, the layout and
the diff are this module's.  Constants and constant shape STACKs are
folded into the labels of their users (``RESHAPE(·, (4, 4))``) instead of being drawn as nodes.
FUNCTION and CALL bodies can be collapsed into their FUNCTION/CALL node.

Positions come from graphviz ``dot`` (read from its JSON output) when the program is installed,
else from :mod:`uopviz.widgets.layered`, a pure-Python layered layout.  Positions are in points
with y growing upwards (graphviz's convention); sources sit above their users, the root at the
bottom.

:func:`graph_diff` compares two laid-out graphs (added, removed and changed nodes): the rewrite
player highlights a step's changes with it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import warnings
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from uopviz.core.errors import UopvizError
from uopviz.core.ops import Ops
from uopviz.core.uop import UOp, toposort
from uopviz.widgets import layered
from uopviz.widgets.graph_labels import (
    ATTRIBUTE_CACHE_SIZE,
    BOX_SHAPE,
    CHAR_WIDTH,
    DETAIL_CHARS,
    INFIX,
    LABEL_ARG_CHARS,
    LINE_HEIGHT,
    OPERAND_NAMES,
    RANGE_EXTRA_WIDTH,
    RANGE_SHAPE,
    SHAPE_LINE_CHARS,
    SLOT_NAMES,
    arg_summary,
    body_size,
    function_title,
    is_foldable,
    node_attributes,
    node_color,
    node_details,
    node_key,
    node_shape,
    operand_line,
    short_inline_text,
    type_summary,
)

#: Above this many nodes ``engine="auto"`` skips ``dot`` (its crossing minimisation grows fast)
#: and uses the layered layout, which stays well under a second.
DOT_NODE_LIMIT = 1200
#: ``engine="auto"`` also skips ``dot`` when a node has more sources than this.
DOT_FAN_IN_LIMIT = 48
#: Seconds ``dot`` may run when asked for by name, and under ``engine="auto"`` (then the layered
#: layout takes over).
DOT_TIMEOUT_S = 20.0
DOT_AUTO_TIMEOUT_S = 4.0


class LayoutError(UopvizError, RuntimeError):
    """A layout engine was asked for by name and cannot run (``dot`` missing or failing)."""


# ---------------------------------------------------------------------------------------------
# which UOps become nodes


def _collapsed_set(root: UOp, order: list[UOp], collapse: bool | Iterable[Any] | None) -> set[UOp]:
    """The FUNCTION/CALL UOps whose bodies are hidden. ``collapse``: True (all), or node keys /
    UOps naming some of them."""
    functions = [u for u in order if u.op in (Ops.FUNCTION, Ops.CALL)]
    if not collapse:
        return set()
    if collapse is True:
        return set(functions)
    wanted = list(collapse)
    keys = {w for w in wanted if isinstance(w, str)}
    uops = {w for w in wanted if isinstance(w, UOp)}
    return {f for f in functions if node_key(f) in keys or f in uops}


def _visible(root: UOp, collapsed: set[UOp], fold_constants: bool) -> list[UOp]:
    """The UOps drawn as nodes, sources before users: everything reachable from ``root`` except
    folded constants and what only a collapsed body reaches."""

    def drawn_sources(node: UOp) -> list[UOp]:
        sources = node.src[1:] if node in collapsed else node.src
        return [s for s in sources if not (fold_constants and is_foldable(s))]

    return toposort([root], drawn_sources)


# ---------------------------------------------------------------------------------------------
# FUNCTION/CALL bodies, one by one

#: Views of a graph's bodies: every body open, every body collapsed, or one body open (with the
#: bodies around it) and the others collapsed (``"only:" + its node key``).
ALL_BODIES, NO_BODIES, ONLY_PREFIX = "all", "none", "only:"


def function_nodes(uop: UOp) -> list[UOp]:
    """The FUNCTION and CALL nodes of ``uop``'s graph (those with a body), sources first."""
    return [u for u in uop.toposort() if u.op in (Ops.FUNCTION, Ops.CALL) and u.src]


def function_parents(functions: list[UOp]) -> dict[UOp, UOp | None]:
    """Each function's innermost enclosing function (the smallest body that holds it), or None."""
    bodies = {f: set(f.src[0].toposort()) for f in functions}
    parents: dict[UOp, UOp | None] = {}
    for f in functions:
        enclosing = [g for g in functions if g is not f and f in bodies[g]]
        parents[f] = min(enclosing, key=lambda g: len(bodies[g]), default=None)
    return parents


def function_bodies(uop: UOp) -> list[dict[str, Any]]:
    """The bodies a view can open one by one: for each FUNCTION/CALL node its ``key``, a ``title``
    (``CALL r_g16_g8_R32``), the body's ``size`` in ops and the ``parent`` key (the function whose
    body holds it, or None)."""
    functions = function_nodes(uop)
    parents = function_parents(functions)
    titles = {}
    numbers = {Ops.FUNCTION: 0, Ops.CALL: 0}  # CALLs numbered as the program's kernels are
    for f in functions:
        titles[f] = " ".join(part for part in (f"{f.op.name} {numbers[f.op]}", function_title(f)) if part)
        numbers[f.op] += 1
    out: list[dict[str, Any]] = []

    def add(parent: UOp | None) -> None:  # each body right before the bodies it holds
        for f in functions:
            if parents[f] is parent:
                out.append({"key": node_key(f), "title": titles[f], "size": body_size(f),
                            "parent": node_key(parent) if parent is not None else None})
                add(f)

    add(None)
    return out


def collapse_for_view(uop: UOp, view: str) -> list[UOp]:
    """The FUNCTION/CALL nodes to collapse for a body ``view`` (:data:`ALL_BODIES`, :data:`NO_BODIES`,
    or ``"only:<key>"``: that body and the bodies holding it open, every other one collapsed)."""
    functions = function_nodes(uop)
    if view == ALL_BODIES:
        return []
    if view == NO_BODIES:
        return functions
    if not view.startswith(ONLY_PREFIX):
        raise ValueError(f"a body view is {ALL_BODIES!r}, {NO_BODIES!r} or 'only:<node key>', got {view!r}")
    wanted = view[len(ONLY_PREFIX):]
    keep = next((f for f in functions if node_key(f) == wanted), None)
    if keep is None:
        raise ValueError(f"no FUNCTION/CALL node {wanted!r} in this graph")
    parents = function_parents(functions)
    open_ones: set[UOp] = set()
    while keep is not None:
        open_ones.add(keep)
        keep = parents[keep]
    return [f for f in functions if f not in open_ones]


def view_of_collapsed(uop: UOp, collapsed_keys: Iterable[str], prefer: str | None = None) -> str:
    """The body view that shows the graph as collapsing ``collapsed_keys`` does (a function inside a
    collapsed body is hidden either way; ``prefer`` wins among views that show the same: opening the
    only kernel of a program opens every body), or ``"custom"`` when none does."""
    functions = function_nodes(uop)
    parents = function_parents(functions)

    def outermost(closed: set[UOp]) -> set[UOp]:
        out = set()
        for f in closed:
            parent = parents[f]
            while parent is not None and parent not in closed:
                parent = parents[parent]
            if parent is None:
                out.add(f)
        return out

    wanted = set(collapsed_keys)
    shown = outermost({f for f in functions if node_key(f) in wanted})
    views = [ALL_BODIES, NO_BODIES] + [ONLY_PREFIX + node_key(f) for f in functions]
    if prefer in views:
        views.insert(0, prefer)
    for view in views:
        if outermost(set(collapse_for_view(uop, view))) == shown:
            return view
    return "custom"


# ---------------------------------------------------------------------------------------------
# layout


def layout(
    uop: UOp,
    *,
    fold_constants: bool = True,
    collapse: bool | Iterable[Any] | None = None,
    engine: str = "auto",
) -> nx.DiGraph:
    """Lay out ``uop``'s graph: a ``networkx.DiGraph`` with one node per shown UOp.

    Node attributes: ``op`` (name), ``family`` (the OpFamily's title), ``color`` (``#RRGGBB``, the
    spec's colour), ``label`` (lines of text), ``pos`` ((x, y) in points, y up), ``width`` and
    ``height`` (points), ``shape`` (``"range"`` for a RANGE, drawn as a pill, else ``"box"``),
    ``uop`` (the UOp), ``details`` (the side panel's text) and, for
    FUNCTION/CALL nodes, ``collapsible``/``collapsed``/``body_size``.  Edges go source → user with
    the source ``slot`` (the first one) and ``slots`` (all: ``x + x`` is one edge with two).
    ``graph.graph`` holds ``root`` (its key), ``engine`` (the one used), ``clusters`` (bounding
    boxes of expanded bodies) and ``size`` ((width, height)).

    ``fold_constants`` writes CONSTs and shape STACKs into their users' labels; ``collapse``
    (True or keys/UOps of FUNCTION/CALL nodes) hides those bodies; ``engine`` is ``"dot"``,
    ``"layered"`` or ``"auto"`` (dot when installed and the graph is not huge).
    """
    if not isinstance(uop, UOp):
        raise TypeError(f"layout() takes a UOp, got {type(uop).__name__}")
    if engine not in ("auto", "dot", "layered"):
        raise ValueError(f"layout engine must be 'auto', 'dot' or 'layered', got {engine!r}")
    graph = build_graph(uop, fold_constants=fold_constants, collapse=collapse)
    place(graph, engine)
    return graph


def layout_many(
    uops: Iterable[UOp], *, fold_constants: bool = True, engine: str = "auto"
) -> list[nx.DiGraph]:
    """:func:`layout` of each of ``uops`` (the same graphs), faster for many: the graphs ``dot``
    lays out go to a few ``dot`` processes, each reading a batch of graphs, run side by side (a
    report's player lays out hundreds of frames; one process each spent most of its time starting)."""
    if engine not in ("auto", "dot", "layered"):
        raise ValueError(f"layout engine must be 'auto', 'dot' or 'layered', got {engine!r}")
    graphs = [build_graph(uop, fold_constants=fold_constants) for uop in uops]
    for_dot = [graph for graph in graphs if _uses_dot(graph, engine)]
    for graph, positions in zip(for_dot, dot_positions_batched(for_dot), strict=True):
        if positions is not None:  # else place() runs dot on it alone (and falls back as usual)
            graph.graph["dot_positions"] = positions
    for graph in graphs:
        place(graph, engine)
    return graphs


def build_graph(
    uop: UOp, *, fold_constants: bool = True, collapse: bool | Iterable[Any] | None = None
) -> nx.DiGraph:
    """The graph of :func:`layout` without positions (every attribute but ``pos``)."""
    collapsed = _collapsed_set(uop, uop.toposort(), collapse) if collapse else set()
    shown = _visible(uop, collapsed, fold_constants)
    shown_set = set(shown)
    keys = {u: node_key(u) for u in shown}
    graph = nx.DiGraph(root=node_key(uop), engine=None, clusters=[], size=(0.0, 0.0))
    # nodes, then edges, each in the order of ``shown`` (sources first): one call each, not one per
    # node and edge (a report builds hundreds of these graphs)
    graph.add_nodes_from((keys[u], node_attributes(u, fold_constants, u in collapsed)) for u in shown)
    edges: dict[tuple[str, str], dict[str, Any]] = {}
    for u in shown:
        is_collapsed = u in collapsed
        for slot, s in enumerate(u.src):
            if s in shown_set and not (is_collapsed and slot == 0):
                edge = edges.get((keys[s], keys[u]))
                if edge is None:
                    edges[keys[s], keys[u]] = {"slot": slot, "slots": (slot,)}
                else:  # x + x: one edge carrying both slots (a DiGraph holds one edge per pair)
                    edge["slots"] += (slot,)
    graph.add_edges_from((source, user, data) for (source, user), data in edges.items())
    expanded = [f for f in shown if f.op in (Ops.FUNCTION, Ops.CALL) and f not in collapsed and f.src]
    graph.graph["bodies"] = {
        node_key(f): [node_key(b) for b in f.src[0].toposort() if b in shown_set] for f in expanded
    }
    return graph


def dot_available() -> bool:
    """True when graphviz's ``dot`` program is on PATH."""
    return shutil.which("dot") is not None


def linear_root(graph: nx.DiGraph) -> str | None:
    """The key of the root when it is a LINEAR program (laid out as a listing), else None."""
    root = graph.graph.get("root")
    return root if root in graph and graph.nodes[root]["op"] == "LINEAR" else None


def linear_positions(graph: nx.DiGraph, root: str) -> dict[str, tuple[float, float]]:
    """A LINEAR program as a listing: its instructions top to bottom in program order, indented one
    step per open RANGE, the LINEAR node last.  Other nodes (none, usually) go to a column on the left."""
    order = [source for source, _, _ in sorted(graph.in_edges(root, data="slot"), key=lambda edge: edge[2])]
    listed = set(order)
    positions: dict[str, tuple[float, float]] = {}
    y, depth, indent = 0.0, 0, 28.0
    for key in order + [root]:
        data = graph.nodes[key]
        if data["op"] == "END":
            depth = max(0, depth - 1)
        positions[key] = (depth * indent + data["width"] / 2, y - data["height"] / 2)
        y -= data["height"] + 8.0
        if data["op"] == "RANGE":
            depth += 1
    others = [k for k in graph.nodes if k not in listed and k != root]
    y = 0.0
    for key in others:
        data = graph.nodes[key]
        positions[key] = (-data["width"] / 2 - 40.0, y - data["height"] / 2)
        y -= data["height"] + 8.0
    return positions


def _uses_dot(graph: nx.DiGraph, engine: str) -> bool:
    """True when :func:`place` lays ``graph`` out with ``dot`` (not a LINEAR under "auto")."""
    if engine == "dot":
        return True
    if engine != "auto" or not dot_available() or linear_root(graph) is not None:
        return False
    # dot's crossing minimisation grows fast with size and with wide fans (a LINEAR over hundreds of
    # instructions): those go to the layered layout, which stays well under a second
    small = graph.number_of_nodes() <= DOT_NODE_LIMIT
    narrow = max((degree for _, degree in graph.in_degree()), default=0) <= DOT_FAN_IN_LIMIT
    return small and narrow


def place(graph: nx.DiGraph, engine: str = "auto") -> str:
    """Give every node of ``graph`` a ``pos``; return the engine used ("dot", "layered", or "linear"
    for a LINEAR program under ``engine="auto"``).  Positions ``dot`` already gave
    (``graph.graph["dot_positions"]``, from :func:`layout_many`) are used as they are."""
    root = linear_root(graph)
    if root is not None and engine == "auto":
        for key, pos in linear_positions(graph, root).items():
            graph.nodes[key]["pos"] = pos
        graph.graph.update(engine="linear", clusters=[], size=_extent(graph))
        return "linear"
    use_dot = _uses_dot(graph, engine)
    positions: dict[str, tuple[float, float]] | None = graph.graph.pop("dot_positions", None)
    used = "dot" if positions is not None else "layered"
    if use_dot and positions is None:
        try:
            positions = dot_positions(graph, DOT_TIMEOUT_S if engine == "dot" else DOT_AUTO_TIMEOUT_S)
            used = "dot"
        except LayoutError as error:
            if engine == "dot":
                raise
            warnings.warn(f"graphviz dot failed ({error}); using the layered layout")
    if positions is None:
        positions = layered.layered_positions(graph)
    for key, pos in positions.items():
        graph.nodes[key]["pos"] = pos
    graph.graph["engine"] = used
    graph.graph["clusters"] = _clusters(graph)
    graph.graph["size"] = _extent(graph)
    return used


def _dot_text(graph: nx.DiGraph) -> tuple[str, list[str]]:
    """The DOT description of ``graph`` (nodes numbered; fixed sizes, no labels to measure)."""
    keys = list(graph.nodes)
    number = {k: i for i, k in enumerate(keys)}
    lines = [
        "digraph G {",
        "graph [rankdir=TB, nodesep=0.22, ranksep=0.38, splines=false, ordering=in, "
        "nslimit=4, mclimit=0.6, searchsize=40];",
        'node [shape=box, fixedsize=true, label=""];',
    ]
    for key in keys:
        data = graph.nodes[key]
        lines.append(f"n{number[key]} [width={data['width'] / 72:.3f}, height={data['height'] / 72:.3f}];")
    lines += _dot_clusters(graph, number)
    # sources in slot order so dot's 'ordering=in' keeps operands left to right
    for key in keys:
        incoming = sorted(graph.in_edges(key, data="slot"), key=lambda edge: edge[2])
        for source, _, _ in incoming:
            lines.append(f"n{number[source]} -> n{number[key]};")
    lines.append("}")
    return "\n".join(lines), keys


def _dot_clusters_of(graph: nx.DiGraph) -> bool:
    """True when ``graph`` has an open FUNCTION/CALL body (drawn by ``dot`` as a cluster)."""
    return any(members for members in graph.graph.get("bodies", {}).values())


def _dot_clusters(graph: nx.DiGraph, number: dict[str, int]) -> list[str]:
    """Each open FUNCTION/CALL body as a dot cluster (nested as the bodies nest), so ``dot`` keeps the
    nodes outside a body (the function's arguments) out of its box.  A node goes in the innermost
    body holding it."""
    bodies = {key: set(members) for key, members in graph.graph.get("bodies", {}).items() if members}
    if not bodies:
        return []
    # the innermost body of each node, and of each body (the smallest other body holding its node)
    innermost: dict[str, str] = {}
    for key, members in sorted(bodies.items(), key=lambda item: -len(item[1])):
        for member in members:
            innermost[member] = key  # smaller bodies come later and win
    parent = {key: innermost.get(key) for key in bodies}
    children: dict[str | None, list[str]] = {}
    for key in bodies:
        children.setdefault(parent[key], []).append(key)
    direct: dict[str, list[str]] = {}
    for member, key in innermost.items():
        direct.setdefault(key, []).append(member)
    lines: list[str] = []

    def emit(key: str, depth: int) -> None:
        if depth > 32:  # bodies nest far less deep; a cycle would be a bug elsewhere
            return
        lines.append(f"subgraph cluster_n{number[key]} {{ margin=14;")
        lines.extend(f"n{number[m]};" for m in direct.get(key, []) if m in number and m not in bodies)
        lines.extend(f"n{number[m]};" for m in direct.get(key, []) if m in number and m in bodies)
        for child in children.get(key, []):
            emit(child, depth + 1)
        lines.append("}")

    for top in children.get(None, []):
        emit(top, 0)
    return lines


def dot_positions(graph: nx.DiGraph, timeout_s: float = DOT_TIMEOUT_S) -> dict[str, tuple[float, float]]:
    """Node centres computed by ``dot -Tjson0``: key -> (x, y) in points, y up."""
    if not dot_available():
        raise LayoutError("graphviz 'dot' is not installed (apt-get install graphviz)")
    if graph.number_of_nodes() == 0:
        return {}
    text, keys = _dot_text(graph)
    try:
        done = subprocess.run(
            ["dot", "-Tjson0"], input=text, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired as error:
        raise LayoutError(f"dot ran longer than {timeout_s:.0f}s on {len(keys)} nodes") from error
    if done.returncode != 0:
        raise LayoutError(f"dot exited with {done.returncode}: {done.stderr.strip()[:300]}")
    try:
        output = json.loads(done.stdout)
    except ValueError as error:
        raise LayoutError(f"cannot read dot's JSON output: {error}") from error
    return _read_dot_output(graph, keys, output)


#: Graphs per ``dot`` process in :func:`dot_positions_batched` at most (a batch is one process).
DOT_BATCH_GRAPHS = 48


def dot_positions_batched(graphs: list[nx.DiGraph]) -> list[dict[str, tuple[float, float]] | None]:
    """:func:`dot_positions` of each graph (None where ``dot`` failed on its batch: the caller lays
    that graph out on its own), from one ``dot`` process per batch of graphs, a few run side by side
    (``dot`` reads many graphs from one input and writes one JSON document each).  A graph with open
    bodies (dot clusters) is a batch of its own: ``dot`` keeps some state from one graph to the next
    and placed such a graph a few points differently after others."""
    if not graphs or not dot_available():
        return [None] * len(graphs)
    plain = [i for i, graph in enumerate(graphs) if not _dot_clusters_of(graph)]
    batches = [plain[i:i + DOT_BATCH_GRAPHS] for i in range(0, len(plain), DOT_BATCH_GRAPHS)]
    batches += [[i] for i, graph in enumerate(graphs) if _dot_clusters_of(graph)]
    workers = max(1, min(len(batches), os.cpu_count() or 1))
    with ThreadPoolExecutor(workers) as pool:  # each thread waits on its own dot process
        results = pool.map(_dot_batch, [[graphs[i] for i in batch] for batch in batches])
        positions: list[dict[str, tuple[float, float]] | None] = [None] * len(graphs)
        for batch, found in zip(batches, results, strict=True):
            for i, graph_positions in zip(batch, found, strict=True):
                positions[i] = graph_positions
    return positions


def _dot_batch(graphs: list[nx.DiGraph]) -> list[dict[str, tuple[float, float]] | None]:
    """Positions of each graph of a batch from one ``dot`` process (all None when it fails)."""
    texts = [_dot_text(graph) for graph in graphs if graph.number_of_nodes()]
    timeout_s = DOT_AUTO_TIMEOUT_S * max(1, len(texts))
    try:
        done = subprocess.run(["dot", "-Tjson0"], input="\n".join(text for text, _ in texts),
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return [None] * len(graphs)
    decoder, documents, at = json.JSONDecoder(), [], 0
    try:
        while len(documents) < len(texts):
            while at < len(done.stdout) and done.stdout[at].isspace():
                at += 1
            document, at = decoder.raw_decode(done.stdout, at)
            documents.append(document)
    except ValueError:
        return [None] * len(graphs)
    if done.returncode != 0:
        return [None] * len(graphs)
    found = iter(zip(texts, documents, strict=True))
    positions: list[dict[str, tuple[float, float]] | None] = []
    for graph in graphs:
        if not graph.number_of_nodes():
            positions.append({})
            continue
        (_, keys), document = next(found)
        try:
            positions.append(_read_dot_output(graph, keys, document))
        except LayoutError:
            positions.append(None)
    return positions


def _read_dot_output(
    graph: nx.DiGraph, keys: list[str], output: dict[str, Any]
) -> dict[str, tuple[float, float]]:
    """Node centres from ``dot -Tjson0``'s document of ``graph`` (whose nodes ``_dot_text`` numbered
    as ``keys``); the bodies' boxes go to ``graph.graph["dot_boxes"]``."""
    try:
        objects = output["objects"]
        positions: dict[str, tuple[float, float]] = {}
        boxes: dict[str, tuple[float, ...]] = {}
        for obj in objects:
            name = obj.get("name", "")
            if name.startswith("cluster_n") and "bb" in obj:  # a body's box, as dot drew it
                boxes[keys[int(name[len("cluster_n"):])]] = tuple(float(v) for v in obj["bb"].split(","))
                continue
            if not name.startswith("n") or "pos" not in obj:
                continue
            x, y = obj["pos"].split(",")
            positions[keys[int(name[1:])]] = (float(x), float(y))
    except (KeyError, ValueError, IndexError) as error:
        raise LayoutError(f"cannot read dot's JSON output: {error}") from error
    if len(positions) != len(keys):
        raise LayoutError(f"dot placed {len(positions)} of {len(keys)} nodes")
    graph.graph["dot_boxes"] = boxes
    return positions


def _clusters(graph: nx.DiGraph) -> list[dict[str, Any]]:
    """Bounding boxes (with a margin) of every expanded FUNCTION/CALL body.  A body holding other
    open bodies gets a wider margin per level, so nested boxes and their titles never coincide."""
    clusters = []
    bodies = graph.graph.get("bodies", {})
    members_of = {key: set(members) for key, members in bodies.items()}

    def levels(key: str, depth: int = 0) -> int:
        inner = [other for other in bodies if other != key and other in members_of[key]]
        return 0 if not inner or depth > 16 else 1 + max(levels(other, depth + 1) for other in inner)

    title_room = 14.0
    dot_boxes = graph.graph.get("dot_boxes", {}) if graph.graph.get("engine") == "dot" else {}
    for function_key, members in bodies.items():
        if function_key in dot_boxes:  # dot laid the body out as a cluster: its box, room for the title
            x0, y0, x1, y1 = dot_boxes[function_key]
            clusters.append({"key": function_key, "label": _cluster_label(graph.nodes[function_key]),
                             "x0": x0, "y0": y0, "x1": x1, "y1": y1 + title_room})
            continue
        boxes = [_box(graph.nodes[m]) for m in members if "pos" in graph.nodes[m]]
        if not boxes:
            continue
        margin = 10.0 + (title_room + 6.0) * levels(function_key)
        clusters.append(
            {
                "key": function_key,
                "label": _cluster_label(graph.nodes[function_key]),
                "x0": min(b[0] for b in boxes) - margin,
                "y0": min(b[1] for b in boxes) - margin,
                "x1": max(b[2] for b in boxes) + margin,
                "y1": max(b[3] for b in boxes) + margin + title_room,
            }
        )
    return clusters


def _cluster_label(data: dict[str, Any]) -> str:
    title = data["label"].splitlines()[0]  # "CALL r_g16_g8_R32"
    return f"{title} body"


def _box(data: dict[str, Any]) -> tuple[float, float, float, float]:
    x, y = data["pos"]
    half_w, half_h = data["width"] / 2, data["height"] / 2
    return x - half_w, y - half_h, x + half_w, y + half_h


def _extent(graph: nx.DiGraph) -> tuple[float, float]:
    if graph.number_of_nodes() == 0:
        return (0.0, 0.0)
    boxes = [_box(data) for _, data in graph.nodes(data=True)]
    width = max(b[2] for b in boxes) - min(b[0] for b in boxes)
    return (width, max(b[3] for b in boxes) - min(b[1] for b in boxes))


# ---------------------------------------------------------------------------------------------
# diff


@dataclass
class GraphDiff:
    """What changed from graph ``a`` to graph ``b``.

    ``added``: keys of ``b``'s nodes with no counterpart in ``a``; ``removed``: keys of ``a``'s
    nodes with none in ``b``; ``changed``: ``{b_key: a_key}`` for nodes that kept their place (same
    op and arg, reached by the same path from the root) but whose label or sources differ.
    """

    added: set[str] = field(default_factory=set)
    removed: set[str] = field(default_factory=set)
    changed: dict[str, str] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        """True when the graphs show the same nodes."""
        return not (self.added or self.removed or self.changed)

    def summary(self) -> str:
        """``+3 −1 ~2``: counts of added, removed and changed nodes."""
        return f"+{len(self.added)} −{len(self.removed)} ~{len(self.changed)}"


def _same_place(a: dict[str, Any], b: dict[str, Any]) -> bool:
    ua, ub = a["uop"], b["uop"]
    return ua.op is ub.op and len(ua.src) == len(ub.src) and _arg_key(ua) == _arg_key(ub)


def _arg_key(u: UOp) -> str:
    # CONSTs are matched by position whatever their value (a changed constant is a change)
    return "" if u.op is Ops.CONST else repr(u.arg)


def _sources(graph: nx.DiGraph, key: str) -> dict[int, str]:
    return {slot: source for source, _, slot in graph.in_edges(key, data="slot")}


def graph_diff(a: nx.DiGraph, b: nx.DiGraph) -> GraphDiff:
    """Compare two graphs made by :func:`layout` (or :func:`build_graph`).

    Nodes present in both (the same UOp) are unchanged.  The rest are aligned from the roots
    down, source slot by source slot: a node of ``b`` that stands where a node of ``a`` stood
    with the same op and arg is *changed*; whatever cannot be aligned is *added* / *removed*.
    """
    common = set(a.nodes) & set(b.nodes)
    changed: dict[str, str] = {}
    root_a, root_b = a.graph.get("root"), b.graph.get("root")
    pairs = [(root_a, root_b)] if root_a in a and root_b in b else []
    seen: set[tuple[str, str]] = set()
    while pairs:
        key_a, key_b = pairs.pop()
        if (key_a, key_b) in seen or key_a == key_b:
            continue
        seen.add((key_a, key_b))
        data_a, data_b = a.nodes[key_a], b.nodes[key_b]
        if key_b in common or key_a in common or not _same_place(data_a, data_b) or key_b in changed:
            continue
        changed[key_b] = key_a
        sources_a, sources_b = _sources(a, key_a), _sources(b, key_b)
        for slot, source_b in sources_b.items():
            source_a = sources_a.get(slot)
            if source_a is not None:
                pairs.append((source_a, source_b))
    paired_a = set(changed.values())
    return GraphDiff(
        added=set(b.nodes) - common - set(changed), removed=set(a.nodes) - common - paired_a, changed=changed
    )


# ---------------------------------------------------------------------------------------------
# the region a step changed

#: Points of context kept around a step's changed nodes when a view zooms to them.
REGION_MARGIN = 48.0


def step_region(graph: nx.DiGraph, diff: GraphDiff | None, focus: str | None = None,
                margin: float = REGION_MARGIN) -> dict[str, Any] | None:
    """The box a view zooms to when it shows a rewrite step: around what the step put in (the node
    that replaced the match, ``focus``, and the ``added`` nodes), or, when it put in no node of its
    own, around the nodes it rebuilt.  Rebuilt nodes are left out otherwise: they run from the
    rewrite site up to the root, and would stretch the box over the whole graph.

    Returns ``{"x0", "y0", "x1", "y1"}`` in the graph's points (y up, as ``pos``) with ``margin``
    added on every side.  None when the step marks no node
    (step 0, an empty step) or the graph has no positions."""
    if diff is None:
        return None
    keys = set(diff.added) | ({focus} if focus is not None else set())
    if not keys:
        keys = set(diff.changed)
    boxes = [_box(graph.nodes[key]) for key in keys if key in graph and "pos" in graph.nodes[key]]
    if not boxes:
        return None
    return {
        "x0": round(min(b[0] for b in boxes) - margin, 1),
        "y0": round(min(b[1] for b in boxes) - margin, 1),
        "x1": round(max(b[2] for b in boxes) + margin, 1),
        "y1": round(max(b[3] for b in boxes) + margin, 1),
    }


__all__ = [
    "ALL_BODIES",
    "ATTRIBUTE_CACHE_SIZE",
    "BOX_SHAPE",
    "CHAR_WIDTH",
    "DETAIL_CHARS",
    "DOT_AUTO_TIMEOUT_S",
    "DOT_BATCH_GRAPHS",
    "DOT_FAN_IN_LIMIT",
    "DOT_NODE_LIMIT",
    "DOT_TIMEOUT_S",
    "GraphDiff",
    "INFIX",
    "LABEL_ARG_CHARS",
    "LINE_HEIGHT",
    "LayoutError",
    "NO_BODIES",
    "ONLY_PREFIX",
    "OPERAND_NAMES",
    "RANGE_EXTRA_WIDTH",
    "RANGE_SHAPE",
    "REGION_MARGIN",
    "SHAPE_LINE_CHARS",
    "SLOT_NAMES",
    "arg_summary",
    "build_graph",
    "collapse_for_view",
    "dot_available",
    "dot_positions",
    "dot_positions_batched",
    "function_bodies",
    "function_nodes",
    "function_parents",
    "function_title",
    "graph_diff",
    "is_foldable",
    "layout",
    "layout_many",
    "linear_positions",
    "linear_root",
    "node_attributes",
    "node_color",
    "node_details",
    "node_key",
    "node_shape",
    "operand_line",
    "place",
    "short_inline_text",
    "step_region",
    "type_summary",
    "view_of_collapsed",
]
