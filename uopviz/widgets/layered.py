"""A pure-Python layered (Sugiyama-style) layout, used when graphviz ``dot`` is missing or the
graph is too big for it.

1. Layering by longest path to the root: each node sits one layer above its highest user, so a
   value is drawn right above where it is used (leaves do not all float to the top).
2. Ordering within layers by barycentres: alternate sweeps up and down, each node placed at the
   mean order of its neighbours in the layer just swept; the order with fewest crossings between
   adjacent layers wins.
3. Coordinates: nodes are packed left to right in order, then pulled towards the mean x of their
   neighbours while keeping the order and a minimum gap (a few relaxation rounds).

Works on the graphs of :func:`uopviz.widgets.graph.build_graph`: nodes with ``width`` and
``height`` in points, edges source → user.  Positions: (x, y) in points, y up, root at the bottom.
"""

from __future__ import annotations

from collections import defaultdict

import networkx as nx

NODE_GAP = 18.0
LAYER_GAP = 30.0
SWEEPS = 6
RELAX_ROUNDS = 4


def assign_layers(graph: nx.DiGraph) -> dict[str, int]:
    """Layer of each node: 0 for nodes nobody uses (the root), else 1 + the highest user's layer."""
    layer: dict[str, int] = {}
    # reverse topological order visits users before their sources
    for key in reversed(list(nx.topological_sort(graph))):
        users = graph.successors(key)
        layer[key] = max((layer[u] + 1 for u in users), default=0)
    return layer


def _crossings(upper: list[str], lower: list[str], graph: nx.DiGraph) -> int:
    """Edge crossings between two adjacent layers (edges from ``upper`` to ``lower``)."""
    position = {k: i for i, k in enumerate(lower)}
    ends = []
    for i, key in enumerate(upper):
        for user in graph.successors(key):
            if user in position:
                ends.append((i, position[user]))
    ends.sort()
    # count inversions of the lower endpoints (merge sort would be O(E log E); E per layer is small)
    crossings = 0
    seen: list[int] = []
    for _, lower_position in ends:
        crossings += sum(1 for p in seen if p > lower_position)
        seen.append(lower_position)
    return crossings


def _total_crossings(layers: list[list[str]], graph: nx.DiGraph) -> int:
    # layers[i] is above layers[i-1]: edges go from layer i (sources) down to lower layers; edges
    # between two layers cross only when both hold two nodes or more (a long chain has many
    # one-node layers: skipping them keeps the count linear in the graph)
    return sum(
        _crossings(layers[i], layers[i - 1], graph)
        for i in range(1, len(layers))
        if len(layers[i]) > 1 and len(layers[i - 1]) > 1
    )


def order_layers(graph: nx.DiGraph, layer: dict[str, int], sweeps: int = SWEEPS) -> list[list[str]]:
    """Nodes of each layer in left-to-right order, crossings reduced by barycentre sweeps."""
    count = max(layer.values(), default=-1) + 1
    layers: list[list[str]] = [[] for _ in range(count)]
    # initial order: depth-first from the root, sources in slot order, so operands start left to right
    seen: set[str] = set()
    roots = [k for k in graph.nodes if graph.out_degree(k) == 0]
    stack = list(reversed(roots))
    while stack:
        key = stack.pop()
        if key in seen:
            continue
        seen.add(key)
        layers[layer[key]].append(key)
        sources = sorted(graph.in_edges(key, data="slot"), key=lambda edge: edge[2] or 0)
        stack.extend(source for source, _, _ in reversed(sources) if source not in seen)
    best = [list(nodes) for nodes in layers]
    best_crossings = _total_crossings(best, graph) if len(graph) <= 4000 else None
    for sweep in range(sweeps):
        if best_crossings == 0:  # nothing left to improve (a chain of blocks, as most models are)
            break
        going_up = sweep % 2 == 0  # from the root layer towards the leaves, then back
        indices = range(1, count) if going_up else range(count - 2, -1, -1)
        for i in indices:
            if len(layers[i]) < 2:  # nothing to order
                continue
            neighbour_layer = layers[i - 1] if going_up else layers[i + 1]
            position = {k: p for p, k in enumerate(neighbour_layer)}
            current = {k: p for p, k in enumerate(layers[i])}
            keys = {k: (_barycentre(graph, k, going_up, position, current[k]), current[k]) for k in layers[i]}
            layers[i].sort(key=keys.__getitem__)
        if best_crossings is not None:
            crossings = _total_crossings(layers, graph)
            if crossings < best_crossings:
                best, best_crossings = [list(nodes) for nodes in layers], crossings
    return best if best_crossings is not None else layers


def _barycentre(graph: nx.DiGraph, key: str, users: bool, position: dict[str, int], fallback: float) -> float:
    """Mean order of ``key``'s users (or sources) in the layer just swept; ``fallback`` if none."""
    neighbours = graph.successors(key) if users else graph.predecessors(key)
    places = [position[n] for n in neighbours if n in position]
    return sum(places) / len(places) if places else fallback


def _pack(nodes: list[str], desired: dict[str, float], width: dict[str, float]) -> dict[str, float]:
    """x of each node: as near its desired x as the order and the minimum gaps allow."""
    x: dict[str, float] = {}
    # left to right: never closer than the gap to the left neighbour
    previous_right = None
    for key in nodes:
        left_limit = None if previous_right is None else previous_right + NODE_GAP + width[key] / 2
        x[key] = desired[key] if left_limit is None else max(desired[key], left_limit)
        previous_right = x[key] + width[key] / 2
    # right to left: undo the drift to the right where there is room
    next_left = None
    for key in reversed(nodes):
        if next_left is not None:
            right_limit = next_left - NODE_GAP - width[key] / 2
            x[key] = min(x[key], right_limit)
        next_left = x[key] - width[key] / 2
    return x


def layered_positions(graph: nx.DiGraph) -> dict[str, tuple[float, float]]:
    """Positions (x, y) in points, y up, for every node of ``graph``."""
    if graph.number_of_nodes() == 0:
        return {}
    layer = assign_layers(graph)
    layers = order_layers(graph, layer)
    width = {k: float(graph.nodes[k].get("width", 60.0)) for k in graph.nodes}
    height = {k: float(graph.nodes[k].get("height", 30.0)) for k in graph.nodes}
    # y: layer 0 (the root) at the bottom, each layer as tall as its tallest node
    y: dict[int, float] = {}
    top = 0.0
    for i, nodes in enumerate(layers):
        tallest = max((height[k] for k in nodes), default=0.0)
        y[i] = top + tallest / 2
        top += tallest + LAYER_GAP
    # x: pack, then relax towards neighbours' mean, alternating direction
    x: dict[str, float] = {}
    for nodes in layers:
        cursor = 0.0
        for key in nodes:
            x[key] = cursor + width[key] / 2
            cursor += width[key] + NODE_GAP
    neighbours: dict[str, list[str]] = defaultdict(list)
    for source, user in graph.edges:
        neighbours[source].append(user)
        neighbours[user].append(source)
    for _ in range(RELAX_ROUNDS):
        for nodes in layers:
            desired = {}
            for key in nodes:
                near = neighbours[key]
                desired[key] = sum(x[n] for n in near) / len(near) if near else x[key]
            x.update(_pack(nodes, desired, width))
    left = min(x[k] - width[k] / 2 for k in x)
    return {k: (x[k] - left, y[layer[k]]) for k in graph.nodes}
