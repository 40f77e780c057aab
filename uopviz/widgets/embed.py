"""Standalone HTML pages: the views with their state embedded, for files opened with no server.

:class:`StaticPage` collects tabs of content (DAG views, rewrite players with every frame
precomputed, HTML, bokeh figures) and writes one HTML file with everything inline: the front
end's JS and CSS, bokeh's core JS when a figure is present (inline, not from a CDN), and the views'
state as JSON.  Nothing is fetched when the file is opened.
"""

from __future__ import annotations

import base64
import gzip
import html
import json
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from uopviz.core.progress import Report
from uopviz.core.rewrite import Trace
from uopviz.core.uop import UOp
from uopviz.widgets.graph import (
    ALL_BODIES,
    NO_BODIES,
    ONLY_PREFIX,
    collapse_for_view,
    function_bodies,
    layout,
)
from uopviz.widgets.player import PlayerState
from uopviz.widgets.serialize import graph_json, legend, marks_json, split_static

#: Frames embedded per pass at most (each holds a laid-out graph); later steps are left out and
#: the page says so.
MAX_FRAMES_PER_PASS = 60
#: Frames whose graphs are laid out together (batched ``dot`` processes; the layouts are held in
#: memory until the batch's frames are made).
FRAMES_PER_LAYOUT_BATCH = 160
#: Bodies of a DAG that get an embedded layout of their own (open, the others collapsed).
MAX_BODY_VIEWS = 40
#: A DAG whose every-body-open layout has more nodes than this opens with its bodies collapsed.
AUTO_COLLAPSE_NODES = 160


#: A view's state larger than this (bytes of JSON) is embedded gzip-compressed (base64): a player's
#: frames repeat node names, positions and rules, and compress about eight-fold.  The page inflates
#: it with the browser's DecompressionStream (no library, nothing fetched).
COMPRESS_ABOVE = 32 * 1024
JSON_TYPE = "application/json"
GZIP_TYPE = "application/gzip+base64"
#: The id of the element holding bokeh's JS and the figures' scripts, compressed: bokeh's core alone
#: is 1.3 MB of JS (0.45 MB packed); the page runs the scripts in order once it has inflated them.
SCRIPTS_ID = "uv-scripts"


def _json_script(element_id: str, data: Any, compress: bool | None = None) -> str:
    """``data`` as a JSON ``<script>`` element, gzip-compressed (base64) when ``compress`` or, by
    default, when larger than :data:`COMPRESS_ABOVE`."""
    text = json.dumps(data, separators=(",", ":"), default=str)
    if compress or (compress is None and len(text) > COMPRESS_ABOVE):
        packed = base64.b64encode(gzip.compress(text.encode(), compresslevel=6, mtime=0)).decode()
        return f'<script type="{GZIP_TYPE}" id="{element_id}">{packed}</script>'
    escaped = text.replace("</", "<\\/")  # no "</script>" inside the element
    return f'<script type="{JSON_TYPE}" id="{element_id}">{escaped}</script>'


def _script_text(tags: str) -> str:
    """The JS inside ``<script>`` elements (bokeh's resources and figure scripts), joined."""
    return "\n".join(re.findall(r"<script[^>]*>(.*?)</script>", tags, re.S))


def embedded_state(script_type: str, text: str) -> Any:
    """The state a ``<script>`` of a page holds (``script_type`` is its ``type``): the reverse of
    how :class:`StaticPage` embeds it, for tools and tests that read a report back."""
    if script_type == GZIP_TYPE:
        return json.loads(gzip.decompress(base64.b64decode(text)))
    if script_type == JSON_TYPE:
        return json.loads(text)
    raise ValueError(f"not an embedded view state: a script of type {script_type!r}")


def embedded_states(page: str) -> list[Any]:
    """Every state a page's ``<script>`` elements hold (views, large HTML blocks, the scripts), in
    page order: what :func:`embedded_state` reads from each."""
    pattern = rf'<script type="({re.escape(JSON_TYPE)}|{re.escape(GZIP_TYPE)})" id="[^"]*">(.*?)</script>'
    # a JSON state's "<\/" (written so that no "</script>" ends the element early) is JSON's "/"
    return [embedded_state(kind, text) for kind, text in re.findall(pattern, page, re.S)]


def dag_state(
    uop: UOp, *, height: int = 560, engine: str = "auto", view: str | None = None,
    max_body_views: int = MAX_BODY_VIEWS,
) -> dict[str, Any]:
    """The embedded state of a DAG view.  A graph with FUNCTION or CALL bodies gets one layout per
    body view (every body open, every body collapsed, and each body open on its own with the others
    collapsed, for at most ``max_body_views`` bodies): the page switches between them with its body
    selector and the nodes' +/− toggles.  ``view``: the one shown first (default: every body open,
    or every body collapsed when the whole graph is large)."""
    bodies = function_bodies(uop)
    state: dict[str, Any] = {
        "kind": "dag",
        "legend": legend(),
        "height": height,
        "collapsed": [],
        "marks": marks_json(),
        "selected": "",
        "bodies": bodies,
    }
    if not bodies:
        state["graph"] = graph_json(layout(uop, engine=engine))
        state["can_toggle"] = False
        return state
    node_table: dict[str, dict[str, Any]] = {}
    views = [ALL_BODIES, NO_BODIES] + [ONLY_PREFIX + b["key"] for b in bodies[:max_body_views]]
    variants = {}
    for name in views:
        graph = layout(uop, engine=engine, collapse=collapse_for_view(uop, name))
        variants[name] = split_static(graph_json(graph), node_table)
    if view is None:
        view = NO_BODIES if len(variants[ALL_BODIES]["nodes"]) > AUTO_COLLAPSE_NODES else ALL_BODIES
    if view not in variants:
        raise ValueError(f"body view {view!r} is not embedded; embedded: {sorted(variants)}")
    state.update(can_toggle=True, variants=variants, node_table=node_table, body_view=view,
                 graph=variants[view], body_views_left_out=max(0, len(bodies) - max_body_views))
    return state


def player_state(
    trace: Trace,
    *,
    height: int = 480,
    engine: str = "auto",
    max_frames: int = MAX_FRAMES_PER_PASS,
    hide_unchanged: bool = True,
    progress: Report | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """The embedded state of a rewrite player: the frames of every pass that changed something (at
    most ``max_frames`` per pass).  A stage and its nested passes show the same steps, each in its
    own graph (a stage the whole program, a pass its kernel): each (step, graph) frame is stored once
    (``frame_table``) and each pass lists the keys of its frames; nodes are shared through one
    ``node_table``.  A step that a nested pass also shows is drawn once, in that pass's graph: the
    stage's frame for it is a reference (``{"ref": key, "scope": ...}``, see :func:`embedded_frame`)
    except at the stage's first and last steps, which show its whole graph.  ``progress(done, total,
    stage)`` hears of each frame laid out.  Returns the state and notes about what was left out."""
    model = PlayerState(trace, hide_unchanged=hide_unchanged, engine=engine)
    node_table: dict[str, dict[str, Any]] = {}
    frame_table: dict[str, dict[str, Any]] = {}
    frames: dict[str, list[str]] = {}
    notes: list[str] = []
    passes = []
    embedded = []
    for entry in model.entries:
        passes.append({"index": entry.index, "name": entry.name, "depth": entry.depth,
                       "steps": entry.step_count, "changed": entry.changed})
        if hide_unchanged and not entry.changed:
            continue
        shown = min(entry.step_count, max_frames)
        if shown < entry.step_count:
            notes.append(f"{entry.name}: the first {shown} of {entry.step_count} steps are embedded")
            passes[-1]["steps"] = shown
        embedded.append((entry, shown))
    made_in = _deepest_passes(embedded)
    # keys first (the deepest passes first: a stage's steps refer to the frames its nested passes
    # make), then the frames to make, their graphs laid out a batch at a time
    to_make: list[tuple[Any, int, str]] = []
    for entry, shown in sorted(embedded, key=lambda item: -item[0].depth):
        model.pass_index = entry.index
        keys = []
        for step in range(shown + 1):
            record = model.step_record(step)
            model.step = step
            # a stage shows the whole program and its nested pass the kernel: the same step makes one
            # frame per graph it is shown in (and one only when they show the same graph)
            key = f"s{id(record):x}-{id(model.uop_at()):x}" if record is not None else f"in{entry.index}"
            if record is not None and entry.record.shown_pass(record) is not entry.record:
                key += f"-p{entry.index}"  # its line saying whose graph it shows names this pass
            if key not in frame_table and 0 < step < shown and id(record) in made_in:
                inner, inner_step = made_in[id(record)]
                target = frames.get(str(inner.index), [])[inner_step:inner_step + 1]
                if inner is not entry and target and target[0] != key:
                    key = f"r{id(record):x}-p{entry.index}"
                    frame_table[key] = {
                        "ref": target[0],
                        "scope": f"this step was made in a nested pass of {entry.name} (pass "
                                 f"{inner.name!r}); the graph shows that pass's graph, not the whole "
                                 f"program, which shows at steps 0 and {shown}"}
            if key not in frame_table:
                frame_table[key] = {}
                to_make.append((entry, step, key))
            keys.append(key)
        frames[str(entry.index)] = keys
    size = FRAMES_PER_LAYOUT_BATCH
    batches = [to_make[i:i + size] for i in range(0, len(to_make), size)]
    # the next batch's graphs are laid out in another thread (mostly waiting on dot processes) while
    # this one makes the frames of the batch before
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(model.layouts_of, _frame_graphs(model, batches[0])) if batches else None
        for number, batch in enumerate(batches):
            if progress is not None:
                progress(number * size, len(to_make), "player frames")
            laid_out = pending.result()
            if number + 1 < len(batches):
                pending = pool.submit(model.layouts_of, _frame_graphs(model, batches[number + 1]))
            model.preload([], laid_out)
            for entry, step, key in batch:
                model.pass_index, model.step = entry.index, step
                frame = model.frame().to_json()
                frame["graph"] = split_static(frame["graph"], node_table)
                for per_pass in ("pass_index", "pass_name", "step", "step_count"):
                    frame.pop(per_pass)
                frame_table[key] = frame
            model.forget_preloaded()
    for frame in frame_table.values():
        if "ref" in frame:
            frame["empty"] = frame_table[frame["ref"]]["empty"]
    total = len(to_make)
    if progress is not None:
        progress(total, total, "player frames")
    frames = {str(entry.index): frames[str(entry.index)] for entry, _ in embedded}  # in pass order
    first = next((e for e in model.entries if str(e.index) in frames and e.step_count), None)
    position = [first.index, 1] if first else [next(iter(map(int, frames)), 0), 0]
    state = {"kind": "player", "legend": legend(), "height": height, "passes": passes, "frames": frames,
             "frame_table": frame_table, "node_table": node_table, "position": position,
             "hide_unchanged": hide_unchanged}
    return state, notes


def _frame_graphs(model: PlayerState, batch: list[tuple[Any, int, str]]) -> list[UOp]:
    """The graphs the frames of ``batch`` ((pass entry, step, key) triples) draw: each step's graph
    and the one before it."""
    graphs = []
    for entry, step, _ in batch:
        model.pass_index, model.step = entry.index, step
        graphs.append(model.uop_at())
        record = model.step_record()
        before = model.graph_before(record) if record is not None else None
        if before is not None:
            graphs.append(before)
    return graphs


def _deepest_passes(embedded: list[tuple[Any, int]]) -> dict[int, tuple[Any, int]]:
    """For each embedded step (by the id of its RewriteStep): the deepest embedded pass that lists
    it, and the step's number there."""
    made_in: dict[int, tuple[Any, int]] = {}
    for entry, shown in embedded:
        for step, record in enumerate(entry.record.steps[:shown], start=1):
            known = made_in.get(id(record))
            if known is None or known[0].depth < entry.depth:
                made_in[id(record)] = (entry, step)
    return made_in


def embedded_frame(state: dict[str, Any], key: str) -> dict[str, Any]:
    """The frame ``key`` of a player's embedded state with a reference resolved (what the page
    shows): the referenced frame with the reference's own fields (its scope line) on top."""
    frame = state["frame_table"][key]
    if "ref" not in frame:
        return frame
    return {**state["frame_table"][frame["ref"]], **{k: v for k, v in frame.items() if k != "ref"}}


@dataclass
class StaticPage:
    """A standalone HTML page of tabs, each holding blocks (views, HTML, bokeh figures)."""

    title: str
    meta: str = ""
    tabs: dict[str, list[str]] = field(default_factory=dict)
    _scripts: list[str] = field(default_factory=list)
    _bokeh: list[Any] = field(default_factory=list)
    _count: int = 0

    def _block(self, tab: str, heading: str, inner: str, notes: list[str] | None = None) -> None:
        notes_html = "".join(f'<p class="rp-note">{html.escape(n)}</p>' for n in notes or [])
        heading_html = f"<h2>{html.escape(heading)}</h2>" if heading else ""
        self.tabs.setdefault(tab, []).append(f'<div class="rp-block">{heading_html}{notes_html}{inner}</div>')

    def _view(self, tab: str, heading: str, state: dict[str, Any], notes: list[str] | None = None) -> None:
        self._count += 1
        element_id = f"uv-state-{self._count}"
        self._scripts.append(_json_script(element_id, state))
        self._block(tab, heading, f'<div class="uv-mount" data-state="{element_id}"></div>', notes)

    def add_dag(
        self, tab: str, heading: str, uop: UOp, notes: list[str] | None = None, **options: Any
    ) -> None:
        """A DAG view of ``uop`` (FUNCTION/CALL bodies open one by one: see :func:`dag_state`)."""
        state = dag_state(uop, **options)
        left_out = state.get("body_views_left_out", 0)
        if left_out:
            notes = (notes or []) + [f"{left_out} more bodies can be opened all together only (the first "
                                     f"{len(state['bodies']) - left_out} open one by one)"]
        self._view(tab, heading, state, notes)

    def add_operator_graph(
        self, tab: str, heading: str, model: Any, notes: list[str] | None = None, height: int = 620
    ) -> None:
        """The operator graph of an NNEF model (:func:`uopviz.widgets.nnef_graph.operator_graph`),
        drawn, zoomed and clicked like a DAG view."""
        from uopviz.widgets.nnef_graph import (
            OPERATOR_PANEL_PROMPT,
            module_legend,
            operator_graph,
            operator_graph_json,
        )

        graph = operator_graph(model)
        state = {"kind": "dag", "legend": module_legend(graph), "height": height, "collapsed": [],
                 "marks": marks_json(), "selected": "", "bodies": [], "graph": operator_graph_json(graph),
                 "can_toggle": False, "empty_text": OPERATOR_PANEL_PROMPT}
        self._view(tab, heading, state, notes)

    def add_player(
        self, tab: str, heading: str, trace: Trace, notes: list[str] | None = None, **options: Any
    ) -> None:
        """A rewrite player over ``trace`` with its frames embedded (options: see :func:`player_state`)."""
        state, left_out = player_state(trace, **options)
        self._view(tab, heading, state, (notes or []) + left_out)

    def add_html(self, tab: str, heading: str, fragment: str, notes: list[str] | None = None) -> None:
        """A block of ready HTML (escaped by the caller).  A large one (kernel sources, highlighted
        with inline styles) is embedded compressed (``{"kind": "html"}``) and inflated on load."""
        if len(fragment) <= COMPRESS_ABOVE:
            self._block(tab, heading, fragment, notes)
            return
        self._count += 1
        element_id = f"uv-state-{self._count}"
        self._scripts.append(_json_script(element_id, {"kind": "html", "html": fragment}))
        self._block(tab, heading, f'<div class="uv-html" data-html="{element_id}"></div>', notes)

    def add_bokeh(self, tab: str, heading: str, figure: Any, notes: list[str] | None = None) -> None:
        """A bokeh figure (rendered by bokeh's inline JS)."""
        from bokeh.embed import components

        script, div = components(figure)
        self._bokeh.append(_script_text(script))
        self._block(tab, heading, div, notes)

    def render(self) -> str:
        """The whole page as one HTML string."""
        from uopviz.widgets.views import STATIC, script, stylesheet

        page_css = (STATIC / "report.css").read_text()
        boot = (STATIC / "report.js").read_text()
        head_extra = scripts = ""
        if self._bokeh:
            from bokeh.resources import Resources

            # only bokeh's core (plots): the widgets, tables, GL and MathJax bundles would triple the size
            inline = Resources(mode="inline", components=["bokeh"])
            head_extra = inline.render_css()
            # bokeh first, then each figure's script (run by the page once inflated, in this order)
            payload = {"kind": "scripts", "scripts": [_script_text(inline.render_js()), *self._bokeh]}
            scripts = _json_script(SCRIPTS_ID, payload, compress=True)
        tab_buttons = "".join(
            f'<button class="rp-tab" data-tab="t{i}">{html.escape(name)}</button>'
            for i, name in enumerate(self.tabs)
        )
        panels = "".join(
            f'<section class="rp-panel" data-tab="t{i}">{"".join(blocks)}</section>'
            for i, blocks in enumerate(self.tabs.values())
        )
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{html.escape(self.title)}</title>"
            f"<style>{stylesheet()}\n{page_css}</style>{head_extra}</head><body>"
            f'<div class="rp-header"><h1>{html.escape(self.title)}</h1>'
            f'<div class="rp-meta">{html.escape(self.meta)}</div></div>'
            f'<nav class="rp-tabs">{tab_buttons}</nav>{panels}'
            + "".join(self._scripts)
            + scripts
            + f"<script>{script()}\n{boot}</script></body></html>\n"
        )
