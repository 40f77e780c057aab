"""The anywidget views and the explorer without a browser: traitlet state, Python-side reactions to
front-end events (collapse, step moves), the bundled front end being offline."""

from __future__ import annotations

import re

import ipywidgets
import pytest

import uopviz as uv
from uopviz import Ops, UOp, dtypes
from uopviz.widgets import explorer
from uopviz.widgets.graph import layout, node_key
from uopviz.widgets.views import GraphView, RewritePlayer, script, stylesheet, widget_module

from .test_graph import function_graph, random_graph
from .test_player import traced


def test_front_end_is_bundled_and_fetches_nothing():
    for text in (script(), stylesheet()):
        assert not re.search(r"https?://", text.replace("http://www.w3.org/2000/svg", ""))
        assert "import(" not in text and "@import" not in text
    assert widget_module().rstrip().endswith("export default { render: UOPVIZ.render };")


@pytest.mark.parametrize("seed,size", [(0, 3), (1, 30), (2, 120)])
def test_graph_view_sends_the_laid_out_graph(seed, size):
    root = random_graph(seed, size)
    view = GraphView(root)
    model = layout(root)
    assert view.node_count == model.number_of_nodes()
    assert {n["k"] for n in view.graph["nodes"]} == set(model.nodes)
    assert view.graph["root"] == node_key(root)
    assert {f["name"] for f in view.legend["families"]} >= {"Movement", "Elementwise", "Reduce"}
    assert len(view.legend["axis_types"]) == len(uv.AxisType)
    assert view.graph_model.number_of_nodes() == model.number_of_nodes()


def test_graph_view_collapses_a_body_when_the_front_end_asks():
    root, function = function_graph()
    view = GraphView(root)
    expanded = view.node_count
    view.collapsed = [node_key(function)]  # what a click on the node's toggle sends
    assert view.node_count < expanded
    assert not any(n["op"] == "PARAM" for n in view.graph["nodes"])
    (function_node,) = [n for n in view.graph["nodes"] if n["op"] == "FUNCTION"]
    assert function_node["col"] == 2
    view.collapsed = []
    assert view.node_count == expanded


@pytest.mark.parametrize("size", [4, 9])
def test_graph_view_opens_bodies_one_by_one(size):
    a, b = UOp.buffer(size, dtypes.float32), UOp.buffer(size, dtypes.float32)
    p0 = UOp(Ops.PARAM, (UOp(Ops.STACK, (UOp.const(dtypes.index, size),), dtypes.index),),
             uv.core.uop.ParamArg(0, dtypes.float32))
    inner = UOp(Ops.FUNCTION, (UOp(Ops.TUPLE, (p0 * 2.0,)), a))
    outer = UOp(Ops.FUNCTION, (UOp(Ops.TUPLE, (UOp(Ops.GET_TUPLE, (inner,), 0) + p0,)), b))
    other = UOp(Ops.FUNCTION, (UOp(Ops.TUPLE, (p0.recip(),)), a))
    root = UOp(Ops.SINK, (UOp(Ops.GET_TUPLE, (outer,), 0), UOp(Ops.GET_TUPLE, (other,), 0)))
    view = GraphView(root)
    titles = {b["key"]: b["title"] for b in view.bodies}
    assert sorted(titles.values()) == [f"FUNCTION {i} of 1 input" for i in range(3)]
    parents = {b["key"]: b["parent"] for b in view.bodies}
    assert parents[node_key(inner)] == node_key(outer) and parents[node_key(other)] is None
    everything = view.node_count
    assert view.body_view == "all" and view.collapsed == []
    view.open_body(node_key(inner))  # the selector sends body_view = "only:<key>"
    assert view.body_view == "only:" + node_key(inner)
    assert view.collapsed == [node_key(other)]  # inner and the body around it stay open
    shown = {n["k"]: n for n in view.graph["nodes"]}
    assert shown[node_key(inner)]["col"] == 1 and shown[node_key(outer)]["col"] == 1
    assert shown[node_key(other)]["col"] == 2 and view.node_count < everything
    view.body_view = "none"
    assert {n["k"] for n in view.graph["nodes"] if n["col"] == 2} == {node_key(outer), node_key(other)}
    view.collapsed = [node_key(outer)]  # a toggle: the view says which body view that is, if any
    assert view.body_view == "only:" + node_key(other)
    view.collapsed = [node_key(inner)]
    assert view.body_view == "custom"
    view.open_body(None)
    assert view.node_count == everything and view.collapsed == []
    with pytest.raises(ValueError, match="no FUNCTION/CALL node"):
        view.body_view = "only:nothing"


def test_graph_view_highlights_a_diff():
    buffer = UOp.buffer(4, dtypes.float32)
    before, after = buffer + 1.0, (buffer * 2.0) + 1.0
    from uopviz.widgets.graph import graph_diff

    diff = graph_diff(layout(before), layout(after))
    view = GraphView(after)
    view.show(after, diff=diff, focus=node_key(after.src[0]))
    assert view.marks["added"] == sorted(diff.added) and view.marks["focus"] == node_key(after.src[0])
    with pytest.raises(TypeError, match="shows a UOp"):
        view.show("not a uop")


def test_player_moves_when_the_front_end_sets_the_position():
    trace, _ = traced((4, 4))
    player = RewritePlayer(trace)
    assert player.frame["step"] == 1 and player.position == [0, 1]
    assert [p["name"] for p in player.passes] == ["Stage", "simplify", "idle"]
    first_graph = player.frame["graph"]
    player.position = [0, 3]  # the slider / arrow keys send this
    assert player.frame["step"] == 3 and player.frame["rule"] == trace.find("Stage").steps[2].rule
    assert player.frame["graph"] != first_graph
    player.position = [2, 5]  # a pass without steps: clamped to its input
    assert player.position == [2, 0] and player.frame["step_count"] == 0
    player.goto("simplify", 4)
    assert player.position == [1, 4]


def test_player_needs_passes():
    with uv.tracing() as empty:
        pass
    with pytest.raises(ValueError, match="recorded no passes"):
        RewritePlayer(empty)


def test_explore_dispatches_on_what_it_is_given():
    root = random_graph(5, 10)
    tab = uv.explore(root)
    assert isinstance(tab, ipywidgets.Tab) and tab.titles == ("Graph",)
    assert isinstance(tab.children[0], GraphView)
    trace, _ = traced((2, 2))
    assert uv.explore(trace).titles == ("Pipeline",)
    with pytest.raises(TypeError, match="cannot show a int.*register_explorer"):
        uv.explore(3)


def test_registered_explorers_take_precedence_and_replace_by_name():
    class Model:
        def __init__(self, uop):
            self.uop = uop

    root = random_graph(6, 4)
    explorer.register_explorer(
        "test model",
        lambda x: isinstance(x, Model),
        lambda m, **_: {"Graph": GraphView(m.uop), "Model": ipywidgets.HTML("model")},
    )
    try:
        tab = uv.explore(Model(root))
        assert tab.titles == ("Model", "Graph") and tab.explorer_name == "test model"  # Model first
        explorer.register_explorer(
            "test model", lambda x: isinstance(x, Model), lambda m, **_: {"Graph": GraphView(m.uop.src[0])}
        )
        assert uv.explore(Model(root)).titles == ("Graph",)
    finally:
        explorer._REGISTRY[:] = [e for e in explorer._REGISTRY if e[0] != "test model"]


def test_sink_of_stores_is_shown():
    buffer = UOp.buffer(8, dtypes.float32)
    out = UOp.buffer(8, dtypes.float32)
    sink = UOp(Ops.SINK, (UOp(Ops.STORE, (out, buffer + 1.0)),))
    view = GraphView(sink)
    assert sorted(n["op"] for n in view.graph["nodes"]) == ["ADD", "BUFFER", "BUFFER", "SINK", "STORE"]
