"""The anywidget views: the DAG canvas (:class:`GraphView`) and the rewrite player
(:class:`RewritePlayer`).

Both draw with ``static/uopviz.js`` (bundled, nothing from a CDN) and keep their state in
traitlets; every compiler fact they show was computed by the data layer
(:mod:`uopviz.widgets.graph`, :mod:`uopviz.widgets.player`).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from functools import cache
from pathlib import Path
from typing import Any

import anywidget
import networkx as nx
import traitlets

from uopviz.core.rewrite import Trace
from uopviz.core.uop import UOp
from uopviz.widgets.graph import (
    ALL_BODIES,
    ONLY_PREFIX,
    GraphDiff,
    collapse_for_view,
    function_bodies,
    layout,
    view_of_collapsed,
)
from uopviz.widgets.player import PlayerState
from uopviz.widgets.serialize import graph_json, legend, marks_json

STATIC = Path(__file__).resolve().parent / "static"
#: Frames (JSON) a player keeps, so going back to a step sends it again without recomputing.
FRAME_CACHE_SIZE = 128


@cache
def script() -> str:
    """The front end's JavaScript (shared by widgets and reports)."""
    return (STATIC / "uopviz.js").read_text()


@cache
def stylesheet() -> str:
    """The front end's CSS."""
    return (STATIC / "uopviz.css").read_text()


@cache
def widget_module() -> str:
    """The ES module an anywidget loads: the script plus its ``render`` export."""
    return script() + "\nexport default { render: UOPVIZ.render };\n"


#: What a UOp graph's side panel says before a node is clicked.
UOP_PANEL_PROMPT = "Click a node to see its op, dtype, shape, arg, sources, min_max, device and axis."


def graph_to_json(value: dict[str, Any], widget: Any = None) -> memoryview:
    """A graph trait as one JSON buffer: ipywidgets walks a nested state item by item looking for
    binary parts (a fifth of the time a 2,000-operation graph took to show); the canvas parses the
    buffer back."""
    return memoryview(json.dumps(value, separators=(",", ":")).encode())


class GraphView(anywidget.AnyWidget):
    """An interactive DAG of a UOp graph: zoom (wheel), pan (drag), hover details, click a node
    for the side panel, FUNCTION/CALL bodies collapsible, a legend of families and AxisTypes.

    ``GraphView(uop)``; ``view.show(uop, diff=..., focus=...)`` replaces the graph (keeping the
    zoom); ``view.graph_model`` is the laid-out ``networkx.DiGraph``.  A graph with FUNCTION/CALL
    bodies lists them (``bodies``) and opens them one by one: ``body_view`` is ``"all"``, ``"none"``
    or ``"only:<node key>"`` (that body and those around it open, the others collapsed), set from
    the view's selector or from Python (``view.open_body(key)``).
    """

    _esm = traitlets.Unicode(widget_module()).tag(sync=True)
    _css = traitlets.Unicode(stylesheet()).tag(sync=True)
    kind = traitlets.Unicode("dag").tag(sync=True)
    graph = traitlets.Dict().tag(sync=True, to_json=graph_to_json)
    marks = traitlets.Dict().tag(sync=True)
    legend = traitlets.Dict().tag(sync=True)
    selected = traitlets.Unicode("").tag(sync=True)
    collapsed = traitlets.List(traitlets.Unicode()).tag(sync=True)
    height = traitlets.Int(520).tag(sync=True)
    can_toggle = traitlets.Bool(True).tag(sync=True)
    bodies = traitlets.List().tag(sync=True)
    body_view = traitlets.Unicode(ALL_BODIES).tag(sync=True)
    #: what the side panel says before a node is clicked
    empty_text = traitlets.Unicode(UOP_PANEL_PROMPT).tag(sync=True)

    def __init__(
        self,
        uop: UOp | None = None,
        *,
        height: int = 520,
        engine: str = "auto",
        collapse: bool | list[str] | None = None,
        **kwargs: Any,
    ):
        super().__init__(height=height, legend=legend(), **kwargs)
        self.engine = engine
        self.uop: UOp | None = None
        self.graph_model: nx.DiGraph | None = None
        if uop is not None:
            self.show(uop, collapse=collapse)

    def show(
        self,
        uop: UOp,
        *,
        diff: GraphDiff | None = None,
        focus: str | None = None,
        collapse: bool | list[str] | None = None,
        graph: nx.DiGraph | None = None,
    ) -> None:
        """Draw ``uop`` (or an already laid-out ``graph`` of it), highlighting ``diff``'s added and
        changed nodes and ``focus``."""
        if not isinstance(uop, UOp):
            raise TypeError(f"GraphView shows a UOp, got {type(uop).__name__}")
        if uop is not self.uop:
            self._bodies = function_bodies(uop)
        self.uop = uop
        if graph is None:
            wanted = collapse if collapse is not None else list(self.collapsed)
            graph = layout(uop, engine=self.engine, collapse=wanted)
        self.graph_model = graph
        collapsed_now = [k for k, d in graph.nodes(data=True) if d.get("collapsed")]
        with self.hold_sync():
            self.graph = graph_json(graph)
            self.marks = marks_json(diff, focus, graph)
            self._relayout_enabled = False
            if self.bodies != self._bodies:
                self.bodies = self._bodies
            if collapsed_now != list(self.collapsed):
                self.collapsed = collapsed_now
            view = ALL_BODIES
            if self._bodies:
                view = view_of_collapsed(uop, collapsed_now, prefer=self.body_view)
            if view != self.body_view:
                self.body_view = view
            self._relayout_enabled = True

    def open_body(self, key: str | None) -> None:
        """Open only the body of the FUNCTION/CALL node ``key`` (and the bodies around it); None
        opens every body."""
        self.body_view = ALL_BODIES if key is None else ONLY_PREFIX + key

    _relayout_enabled = True
    _bodies: list[dict[str, Any]] = []

    @traitlets.observe("collapsed")
    def _on_collapsed(self, change: dict[str, Any]) -> None:
        if self._relayout_enabled and self.uop is not None:
            self.show(self.uop, collapse=list(change["new"]))

    @traitlets.observe("body_view")
    def _on_body_view(self, change: dict[str, Any]) -> None:
        if self._relayout_enabled and self.uop is not None and change["new"] != "custom":
            self.show(self.uop, collapse=collapse_for_view(self.uop, change["new"]))

    @property
    def node_count(self) -> int:
        """How many nodes are drawn."""
        return len(self.graph.get("nodes", []))


class SourcePanes(anywidget.AnyWidget):
    """Generated sources side by side (the kernel tuner's), their lines linked to a graph.

    ``value`` is the panes' HTML (each pane a ``.uv-source`` with ``data-backend``); ``provenance``
    maps a backend to what each of its lines came from (``TunerState.provenance``); a line clicked
    sets ``selected`` to its node's key and shows what created it, and ``selected`` set from
    Python (a node chosen in the graph) lights that node's lines."""

    _esm = traitlets.Unicode(widget_module()).tag(sync=True)
    _css = traitlets.Unicode(stylesheet()).tag(sync=True)
    kind = traitlets.Unicode("sources").tag(sync=True)
    value = traitlets.Unicode("").tag(sync=True)
    provenance = traitlets.Dict().tag(sync=True)
    selected = traitlets.Unicode("").tag(sync=True)


class RewritePlayer(anywidget.AnyWidget):
    """Step through a rewrite trace: the pass list with step counts (unchanged passes hidden on
    request), a slider, buttons and arrow keys (←/→ steps, ↑/↓ passes, Home/End), and for each
    step the graph after it with changed nodes highlighted, the rule's name and ``file:line``,
    and a diff of the printed graph.

    ``RewritePlayer(trace, backend="c")`` (``backend`` names the language its Render frames' sources
    are highlighted in; left out, it is told from each source); ``player.state`` is the
    :class:`PlayerState`; ``player.goto(pass, step)`` moves from Python.
    """

    _esm = traitlets.Unicode(widget_module()).tag(sync=True)
    _css = traitlets.Unicode(stylesheet()).tag(sync=True)
    kind = traitlets.Unicode("player").tag(sync=True)
    passes = traitlets.List().tag(sync=True)
    position = traitlets.List([0, 0]).tag(sync=True)
    hide_unchanged = traitlets.Bool(True).tag(sync=True)
    frame = traitlets.Dict().tag(sync=True)
    legend = traitlets.Dict().tag(sync=True)
    height = traitlets.Int(480).tag(sync=True)

    def __init__(
        self,
        trace: Trace,
        *,
        hide_unchanged: bool = True,
        height: int = 480,
        engine: str = "auto",
        pass_name: str | None = None,
        backend: str | None = None,
        **kwargs: Any,
    ):
        self.state = PlayerState(trace, hide_unchanged=hide_unchanged, engine=engine, backend=backend)
        self._frames: OrderedDict[tuple[int, int], dict[str, Any]] = OrderedDict()
        if not self.state.entries:
            raise ValueError("this trace recorded no passes: run graph_rewrite inside `with uv.tracing()`")
        if pass_name is not None:
            self.state.select(pass_name)
        super().__init__(
            height=height,
            legend=legend(),
            hide_unchanged=hide_unchanged,
            passes=[_pass_json(e) for e in self.state.entries],
            **kwargs,
        )
        self.on_msg(self._on_message)
        self._sync_frame()

    def goto(self, pass_index: int | str, step: int | None = None) -> None:
        """Show ``step`` of a pass (an index into ``passes`` or a name)."""
        self.state.select(pass_index, step)
        self._sync_frame()

    def _sync_frame(self) -> None:
        key = (self.state.pass_index, self.state.step)
        frame = self._frames.get(key)
        if frame is None:
            frame = self.state.frame().to_json()
            self._frames[key] = frame
            while len(self._frames) > FRAME_CACHE_SIZE:
                self._frames.popitem(last=False)
        else:
            self._frames.move_to_end(key)
        with self.hold_sync():
            self._syncing = True
            self.position = list(key)
            self._syncing = False
            self.frame = frame

    _syncing = False

    @traitlets.observe("position")
    def _on_position(self, change: dict[str, Any]) -> None:
        if self._syncing:
            return
        pass_index, step = change["new"]
        if pass_index != self.state.pass_index:
            self.state.pass_index = pass_index
            self.state.step = 0
        self.state.move_to(step)  # passes over steps that changed nothing while they are hidden
        self._sync_frame()

    def _on_message(self, widget: Any, content: dict[str, Any], buffers: list[Any]) -> None:
        """Answer the front end's "why" question (a node selected in a frame) with
        :meth:`PlayerState.why_not`; a question about a frame no longer shown is answered so."""
        if not isinstance(content, dict) or content.get("kind") != "why":
            return
        self.send(self.why_answer(str(content.get("key", "")), content.get("position")))

    def why_answer(self, key: str, position: Any) -> dict[str, Any]:
        """The "Why didn't a rule fire?" answer for node ``key`` of the frame at ``position``
        (``[pass, step]``, the frame the question was asked about), as the front end reads it."""
        answer: dict[str, Any] = {"kind": "why", "key": key, "position": position}
        if list(position or ()) != [self.state.pass_index, self.state.step]:
            return {**answer, "error": "the player has moved to another step since; select the node again"}
        try:
            return {**answer, **self.state.why_not(key).to_json()}
        except KeyError as error:
            return {**answer, "error": str(error.args[0])}

    @traitlets.observe("hide_unchanged")
    def _on_hide(self, change: dict[str, Any]) -> None:
        self.state.hide_unchanged = bool(change["new"])


def _pass_json(entry: Any) -> dict[str, Any]:
    return {
        "index": entry.index,
        "name": entry.name,
        "depth": entry.depth,
        "steps": entry.step_count,
        "changed": entry.changed,
        "kernel": entry.kernel,
        "rules": [list(pair) for pair in entry.rule_counts],
        "step_rules": entry.step_rules,
    }


@cache
def bokeh_core_js() -> str:
    """BokehJS's core bundle from the installed bokeh package (what charts need to draw)."""
    from bokeh.resources import Resources

    return "\n".join(Resources(mode="inline", components=["bokeh"]).js_raw)


class BokehChart(anywidget.AnyWidget):
    """A bokeh figure in a notebook, offline and self-contained.

    jupyter_bokeh's widget needs BokehJS already on the page (``output_notebook()``, whose output
    must land in a visible cell: not so for charts made in a button callback).  This widget instead
    asks Python for bokeh's core JS the first time a page shows a chart, runs it once, and embeds the
    figure's ``json_item``.  ``chart.show(figure)`` replaces the figure.
    """

    _esm = traitlets.Unicode((STATIC / "bokeh_chart.js").read_text()).tag(sync=True)
    item = traitlets.Unicode("").tag(sync=True)

    def __init__(self, figure: Any, **kwargs: Any):
        super().__init__(**kwargs)
        self.on_msg(self._on_message)
        self.show(figure)

    def show(self, figure: Any) -> None:
        """Draw ``figure`` (any bokeh model a ``json_item`` can hold: a figure, a row of them...)."""
        from bokeh.embed import json_item

        self.figure = figure
        self.item = json.dumps(json_item(figure))

    def _on_message(self, widget: Any, content: dict[str, Any], buffers: list[Any]) -> None:
        if isinstance(content, dict) and content.get("kind") == "bokeh-js":
            self.send({"kind": "bokeh-js", "code": bokeh_core_js()})
