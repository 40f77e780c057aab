"""The kernel tuner view: pick a kernel, apply OptOps with controls, undo/redo, see the axis
string coloured by AxisType, the kernel's graph, its source on every backend side by side
(highlighted), timings as a bokeh chart, BEAM search with a progress bar, and export the opts as
Python or JSON, save and load the tuning session, open any BEAM candidate, and compare the kernel
with the heuristic's, BEAM's or an undo point side by side ("Compare with…").  An invalid opt shows
its message and changes nothing.

Everything shown is asked of :class:`uopviz.widgets.tuner.TunerState` (and through it, of the
kernel); this module only arranges ipywidgets.
"""

from __future__ import annotations

import html
import threading
from typing import Any

import ipywidgets as widgets
import traitlets

from uopviz.backends.timing import format_seconds
from uopviz.core.ops import AxisType
from uopviz.core.uop import UOp
from uopviz.widgets.backends_view import backend_names, bokeh_widget, timing_figure, timing_rows
from uopviz.widgets.highlight import highlight
from uopviz.widgets.schedule_diff import tuner_schedule_diff
from uopviz.widgets.tuner import OPT_CONTROLS, OPT_NAMES, TIMING_BUDGET_S, TimingEntry, TunerState, make_opt

# a grid, not a flexbox: long source lines must scroll inside their pane, never widen it; panes that do
# not fit side by side wrap to the next row (a pane cut off at the right edge hides its backend), in
# rows of equal length (four panes make two rows of two, never three and one)
SOURCES_STYLE = ("display:grid;gap:8px;grid-template-columns:"
                 "repeat(auto-fit,minmax(min(100%,max(340px,calc(100% / {per_row} - 8px))),1fr))")
PANE_STYLE = "min-width:0;border:1px solid #d0d7de;border-radius:6px;overflow:hidden"
HEAD_STYLE = (
    "background:#f6f8fa;padding:3px 8px;font-weight:600;border-bottom:1px solid #d0d7de;font-size:12px"
)
CODE_STYLE = "max-height:440px;overflow:auto;font-size:11.5px;line-height:1.35;padding:0 8px"


def axes_html(state: TunerState) -> str:
    """The kernel's axes as coloured chips (``g64 L128 R512 u4``), each titled with its index and
    AxisType."""
    return chips_html(state.axes)


def chips_html(axes: list[Any]) -> str:
    """Axes (``AxisView``) as coloured chips, each titled with its index and AxisType."""
    chips = []
    for axis in axes:
        text_color = "#111" if axis.axis_type in (AxisType.UPCAST, AxisType.THREAD, AxisType.WARP) else "#fff"
        chips.append(
            f'<span class="uv-axis" title="axis {axis.index}: {axis.axis_type.name}" '
            f'style="background:{axis.color};color:{text_color};display:inline-block;padding:1px 7px;'
            f'margin:1px 2px;border-radius:4px;font-weight:600;font-family:monospace">'
            f'<sub style="opacity:.7">{axis.index}</sub>{html.escape(axis.text)}</span>'
        )
    return "".join(chips) or '<span style="color:#57606a">(no axes)</span>'


def sources_html(state: TunerState, backends: list[str], precise: bool = False) -> str:
    """The current kernel's source on each backend, side by side, highlighted (``precise``: with
    pygments, slower)."""
    panes = []
    for name in backends:
        entry = state.source(name)
        if entry.error:
            body = f'<pre style="color:#82071e;white-space:pre-wrap">{html.escape(entry.error)}</pre>'
        else:
            body = highlight(entry.source, name, precise=precise)
        model = gpu_model_html(state) if name == "cuda" and not entry.error else ""
        lines = entry.source.count("\n") + 1 if entry.source else 0
        panes.append(
            f'<div class="uv-source" data-backend="{html.escape(name)}" style="{PANE_STYLE}">'
            f'<div class="uv-source-head" style="{HEAD_STYLE}">'
            f'{html.escape(name)} <span style="color:#57606a;font-weight:400">{lines} lines</span></div>'
            f'<div style="{CODE_STYLE}">{body}</div>{model}</div>'
        )
    per_row = len(panes) if len(panes) <= 3 else (2 if len(panes) == 4 else 3)
    style = SOURCES_STYLE.format(per_row=max(1, per_row))
    return f'<div class="uv-sources" style="{style}">{"".join(panes)}</div>'


def gpu_model_html(state: TunerState) -> str:
    """The GPU model's account of the current kernel (shown under its CUDA source): the table the
    data layer made, or why there is none."""
    account = state.gpu_account()
    if isinstance(account, str):
        style = "color:#82071e;padding:4px 8px"
        return f'<div class="uv-gpu-model" style="{style}">GPU model: {html.escape(account)}</div>'
    return account.html()


def schedule_diff_html(diff: Any) -> str:
    """A :class:`uopviz.widgets.schedule_diff.ScheduleDiff` side by side: each kernel's opts and axis
    chips, then per backend the timings (when taken) and the unified diff of the sources."""

    def column(name: str, opts: tuple[Any, ...], axes: list[Any]) -> str:
        listed = ", ".join(_short(o) for o in opts) or "none"
        return (f'<div style="{PANE_STYLE};padding:4px 8px">'
                f'<div style="font-weight:600">{html.escape(name)}</div>'
                f'<div class="uv-diff-axes">{chips_html(axes)}</div>'
                f'<div style="font-size:12px">opts: <code>{html.escape(listed)}</code></div></div>')

    def seconds(entry: TimingEntry | None) -> str:
        if entry is None:
            return "not timed"
        return html.escape(entry.error) if entry.error else format_seconds(entry.median_s)

    parts = [f'<div class="uv-schedule-diff"><div style="display:grid;grid-template-columns:1fr 1fr;gap:8px">'
             f"{column('a: ' + diff.name_a, diff.opts_a, diff.axes_a)}"
             f"{column('b: ' + diff.name_b, diff.opts_b, diff.axes_b)}</div>"]
    shared = f"{diff.common_opts} leading opts shared" if not diff.same_opts else "the same opts"
    parts.append(f'<div style="font-size:12px;color:#57606a">{shared}</div>')
    for backend, sources in diff.sources.items():
        a_time, b_time = diff.timings.get(backend, (None, None))
        errors = " ".join(html.escape(e.error) for e in (sources.a, sources.b) if e.error)
        body = errors or diff_lines_html(sources.diff) or "(the same source)"
        parts.append(
            f'<div class="uv-diff-source" style="{PANE_STYLE};margin-top:6px"><div style="{HEAD_STYLE}">'
            f"{html.escape(backend)}: a {seconds(a_time)}, b {seconds(b_time)} (median)</div>"
            f'<pre style="{CODE_STYLE}">{body}</pre></div>'
        )
    return "".join(parts) + "</div>"


#: the colours of a unified diff's lines, by their first character (added, removed, hunk header)
DIFF_LINE_STYLES = {"+": "background:#dafbe1;color:#116329", "-": "background:#ffebe9;color:#82071e",
                    "@": "color:#8250df"}


def diff_lines_html(diff: str) -> str:
    """A unified diff as HTML lines coloured as added, removed or hunk header (file headers plain)."""
    lines = []
    for line in diff.splitlines():
        style = "" if line.startswith(("+++", "---")) else DIFF_LINE_STYLES.get(line[:1], "")
        lines.append(f'<span style="display:block;{style}">{html.escape(line) or " "}</span>')
    return "".join(lines)


def message_html(state: TunerState) -> str:
    """The last action's message, red for an invalid opt."""
    if not state.message:
        return ""
    colors = ("#ffebe9", "#82071e", "#ff8182") if state.error else ("#dafbe1", "#116329", "#4ac26b")
    return (
        f'<div class="uv-message {"uv-error" if state.error else "uv-ok"}" style="background:{colors[0]};'
        f'color:{colors[1]};border:1px solid {colors[2]};padding:3px 8px;border-radius:4px;font-size:12px">'
        f"{html.escape(state.message)}</div>"
    )


class KernelTuner(widgets.VBox):
    """Tune the kernels of a program by hand (or with BEAM) and watch sources, graph and timings.

    ``KernelTuner(kernels, backends=None, trace=None)``: ``backends`` defaults to every available
    backend; ``trace`` is the trace of the program the kernels came from (``program.trace``), where
    a source line's Tensor method or NNEF operation is read.  A source line clicked selects its node
    in the graph and says what created it; a node selected in the graph lights its lines.
    ``tuner.state`` is the current kernel's :class:`TunerState`; ``tuner.apply(opt)`` does what the
    Apply button does.
    """

    def __init__(self, kernels: list[Any], backends: list[str] | None = None, show_graph: bool = True,
                 trace: Any = None):
        if not kernels:
            raise ValueError("KernelTuner needs at least one kernel")
        self.kernels = list(kernels)
        self.trace = trace
        self.backends = backend_names(backends)
        self.states: dict[int, TunerState] = {}
        # buttons as wide as their labels, never shrunk to "Un…" by a narrow row (the rows wrap instead)
        layout_auto = widgets.Layout(width="auto", flex="0 0 auto")
        self.kernel_select = widgets.Dropdown(
            options=[(f"{i}: {getattr(k, 'name', 'kernel')}", i) for i, k in enumerate(self.kernels)],
            description="kernel",
            layout=widgets.Layout(width="auto", min_width="420px"),  # a tuned name with "(was ...)" in full
        )
        self.axes = widgets.HTML()
        self.opts_text = widgets.HTML()
        self.message = widgets.HTML()
        self.op = widgets.ToggleButtons(
            options=list(OPT_NAMES), value="SPLIT", style={"button_width": "96px"}
        )
        self.axis = widgets.Dropdown(description="axis", layout=widgets.Layout(width="190px"))
        self.factor = widgets.BoundedIntText(
            value=4, min=1, max=1 << 20, description="factor", layout=widgets.Layout(width="150px")
        )
        # offered: only the AxisTypes a SPLIT of the chosen axis can make (TunerState.choices)
        self.target = widgets.Dropdown(
            options=[a.name for a in AxisType],
            value="UPCAST",
            description="target",
            layout=widgets.Layout(width="210px"),
        )
        #: what applies to the chosen op and axis (factors, multiples), or why nothing does
        self.choice_hint = widgets.HTML(layout=widgets.Layout(width="auto"))
        self.top = widgets.Checkbox(
            value=False, description="top", indent=False, layout=widgets.Layout(width="60px")
        )
        self.multiple = widgets.BoundedIntText(
            value=4, min=1, max=1 << 20, description="multiple", layout=widgets.Layout(width="160px")
        )
        self.other_axis = widgets.Dropdown(description="with", layout=widgets.Layout(width="150px"))
        self.tc_select = widgets.IntText(value=-1, description="tc", layout=widgets.Layout(width="120px"))
        self.tc_opt = widgets.IntText(value=0, description="opt", layout=widgets.Layout(width="120px"))
        self.tc_mode = widgets.IntText(value=1, description="mode", layout=widgets.Layout(width="120px"))
        self.apply_button = widgets.Button(description="Apply", button_style="primary", icon="check")
        self.undo_button = widgets.Button(description="Undo", icon="undo", layout=layout_auto)
        self.redo_button = widgets.Button(description="Redo", icon="repeat", layout=layout_auto)
        self.reset_button = widgets.Button(description="Reset", icon="times", layout=layout_auto)
        self.beam_button = widgets.Button(description="BEAM search", icon="search", layout=layout_auto)
        compact = {"description_width": "initial"}  # a short label beside its field, not in an 80 px column
        self.beam_width = widgets.BoundedIntText(
            value=4, min=1, max=64, description="width", layout=widgets.Layout(width="110px"), style=compact
        )
        self.beam_progress = widgets.IntProgress(value=0, min=0, max=1, layout=widgets.Layout(width="200px"))
        self.beam_budget = widgets.BoundedIntText(
            value=30, min=1, max=3600, description="budget s", layout=widgets.Layout(width="130px"),
            style=compact,
        )
        self.beam_backend = widgets.Dropdown(
            options=self.backends,
            value=beam_backend_for(self.kernels[0], self.backends),
            description="on",
            layout=widgets.Layout(width="120px"),
            style=compact,
        )
        self.beam_status = widgets.HTML()
        self.beam_table = widgets.HTML()
        self.beam_result: Any = None
        self.candidate_select = widgets.Dropdown(description="candidate",
                                                 layout=widgets.Layout(width="360px"))
        self.open_candidate_button = widgets.Button(description="Open candidate", icon="folder-open",
                                                    layout=layout_auto, disabled=True)
        self.compare_select = widgets.Dropdown(description="compare",
                                               layout=widgets.Layout(width="auto", min_width="380px"))
        self.compare_button = widgets.Button(description="Compare with…", icon="columns", layout=layout_auto)
        self.compare_view = widgets.HTML()
        self.session_path = widgets.Text(value="tuner-session.json", description="session",
                                         layout=widgets.Layout(width="320px"))
        self.save_session_button = widgets.Button(description="Save session", icon="save",
                                                  layout=layout_auto)
        self.load_session_button = widgets.Button(description="Load session", icon="upload",
                                                  layout=layout_auto)
        self.time_button = widgets.Button(
            description="Time on all backends", icon="clock", layout=layout_auto
        )
        self.export_python_button = widgets.Button(
            description="Export Python", icon="code", layout=layout_auto
        )
        self.export_json_button = widgets.Button(
            description="Export JSON", icon="clipboard", layout=layout_auto
        )
        self.export_text = widgets.Textarea(
            layout=widgets.Layout(width="100%", height="120px", display="none")
        )
        from uopviz.widgets.views import SourcePanes

        self.sources = SourcePanes()
        self.timings = widgets.VBox()
        self._timing_thread: threading.Thread | None = None
        self._stop_requested = False
        #: seconds each backend's timing may take ("Time on all backends")
        self.timing_budget_s = TIMING_BUDGET_S
        self.graph = None
        if show_graph:
            from uopviz.widgets.views import GraphView

            self.graph = GraphView(height=560)  # a kernel is tall: room to read its labels
            # a source line clicked selects its node; a node clicked lights its source lines
            traitlets.link((self.sources, "selected"), (self.graph, "selected"))
        self._relabelling = False
        self.parameter_controls = (
            self.axis,
            self.factor,
            self.target,
            self.top,
            self.multiple,
            self.other_axis,
            self.tc_select,
            self.tc_opt,
            self.tc_mode,
        )
        self._offering = False
        self._wire()
        wrap = widgets.Layout(flex_flow="row wrap", align_items="center")
        controls = widgets.HBox([*self.parameter_controls, self.choice_hint], layout=wrap)
        actions = widgets.HBox(
            [
                self.apply_button,
                self.undo_button,
                self.redo_button,
                self.reset_button,
                self.beam_button,
                self.beam_backend,
                self.beam_width,
                self.beam_budget,
                self.beam_progress,
                self.beam_status,
            ],
            layout=wrap,
        )
        exports = widgets.HBox([self.time_button, self.export_python_button, self.export_json_button,
                                self.session_path, self.save_session_button, self.load_session_button],
                               layout=wrap)
        candidates = widgets.HBox([self.candidate_select, self.open_candidate_button], layout=wrap)
        compare = widgets.HBox([self.compare_select, self.compare_button], layout=wrap)
        children = [
            widgets.HBox([self.kernel_select, self.axes], layout=wrap),
            self.opts_text,
            self.op,
            controls,
            actions,
            self.message,
            self.beam_table,
            candidates,
            compare,
            self.compare_view,
            self.sources,
        ]
        if self.graph is not None:
            children.append(self.graph)
        children += [exports, self.export_text, self.timings]
        super().__init__(children)
        self.add_class("uv-tuner")
        self._show_controls()
        self.refresh()

    # -- state ---------------------------------------------------------------------------------
    @property
    def state(self) -> TunerState:
        """The tuner state of the chosen kernel (one per kernel, kept while the widget lives)."""
        index = self.kernel_select.value
        if index not in self.states:
            self.states[index] = TunerState(self.kernels[index], program_trace=self.trace)
        return self.states[index]

    def _wire(self) -> None:
        self.kernel_select.observe(lambda _: None if self._relabelling else self.refresh(), names="value")
        self.op.observe(lambda _: self._show_controls(), names="value")
        self.axis.observe(lambda _: self._offer_choices(), names="value")
        self.target.observe(lambda _: self._offer_target(), names="value")
        self.apply_button.on_click(lambda _: self.apply())
        self.undo_button.on_click(lambda _: self._after(self.state.undo()))
        self.redo_button.on_click(lambda _: self._after(self.state.redo()))
        self.reset_button.on_click(lambda _: self._after(self.state.reset()))
        self.time_button.on_click(lambda _: self.time_all())
        self.export_python_button.on_click(lambda _: self._export(self.state.export_python()))
        self.export_json_button.on_click(lambda _: self._export(self.state.export_json()))
        self.beam_button.on_click(lambda _: self.beam())
        self.open_candidate_button.on_click(lambda _: self.open_candidate())
        self.compare_button.on_click(lambda _: self.compare())
        self.save_session_button.on_click(lambda _: self.save_session())
        self.load_session_button.on_click(lambda _: self.load_session())

    def _show_controls(self) -> None:
        visible = tuple(getattr(self, name) for name in OPT_CONTROLS[self.op.value])
        for control in self.parameter_controls:
            control.layout.display = "" if any(control is v for v in visible) else "none"
        self.axis.description = "reduce #" if self.op.value == "TC" else "axis"
        if self.op.value == "TC":
            reduce_count = sum(1 for a in self.state.axes if a.axis_type.is_reduce)
            previous = self.axis.value
            self.axis.options = [(str(i), i) for i in range(max(1, reduce_count))]
            self.axis.value = previous if isinstance(previous, int) and previous < max(1, reduce_count) else 0
        else:
            self._axis_options()
        self._offer_choices()

    def _offer_choices(self) -> None:
        """Offer only what applies to the chosen op and axis (the data layer tries each value): SPLIT's
        targets, SWAP's partner axes; the hint lists the factors or multiples that apply, or says why
        nothing does, and Apply is off then."""
        if self._offering or self.axis.value is None:
            return
        op = self.op.value
        choices = self.state.choices(op, None if op == "NOLOCALS" else self.axis.value)
        self._offering = True  # the target's new options must not redraw the hint half-way
        try:
            if op == "SPLIT":
                targets = [t.name for t in choices.targets] or ["(none)"]
                previous = self.target.value
                self.target.options = targets
                self.target.value = previous if previous in targets else (
                    "UPCAST" if "UPCAST" in targets else targets[0])
            if op == "SWAP" and choices.partners:
                previous = self.other_axis.value
                self.other_axis.options = [(label, value) for label, value in self.axis.options
                                           if value in choices.partners]
                self.other_axis.value = previous if previous in choices.partners else choices.partners[0]
        finally:
            self._offering = False
        offered = choices.splits or choices.multiples or choices.partners or choices.applies
        nothing = op != "TC" and not offered
        self.apply_button.disabled = nothing
        if nothing:
            where = "" if op == "NOLOCALS" else f" to axis {self.axis.value}"
            self.choice_hint.value = _hint(f"no {op} applies{where}: {choices.none_reason}", error=True)
        elif op == "SPLIT":
            self._offer_target()
        elif op == "PADTO":
            self.choice_hint.value = _hint("multiples that apply: " + ", ".join(map(str, choices.multiples)))
        else:
            self.choice_hint.value = ""

    def _offer_target(self) -> None:
        """The factors that apply for the chosen SPLIT target, and its part of the axis (fixed by the
        spec for every target but GROUP_REDUCE)."""
        if self._offering or self.op.value != "SPLIT" or self.axis.value is None:
            return
        choice = self.state.choices("SPLIT", self.axis.value).split(self.target.value)
        if choice is None:
            return
        if len(choice.tops) == 1:
            self.top.value = choice.tops[0]
        self.top.disabled = len(choice.tops) == 1
        part = "outer or inner" if len(choice.tops) > 1 else ("outer" if choice.tops[0] else "inner")
        factors = ", ".join(map(str, choice.factors))
        taken = f"{choice.target.name} takes the {part} part"
        self.choice_hint.value = _hint(f"factors that apply: {factors} ({taken})")

    def _axis_options(self) -> None:
        options = [(f"{a.index}: {a.text}", a.index) for a in self.state.axes] or [("(none)", 0)]
        values = [value for _, value in options]
        second = values[min(1, len(values) - 1)]
        for dropdown, fallback in ((self.axis, values[0]), (self.other_axis, second)):
            previous = dropdown.value
            dropdown.options = options
            # new options may leave the dropdown without a value: keep the old one if it still exists
            dropdown.value = previous if previous in values else fallback

    def current_opt(self) -> Any:
        """The opt the controls describe."""
        values = {name: getattr(self, name).value for name in OPT_CONTROLS[self.op.value]}
        return make_opt(self.op.value, **values)

    def apply(self, opt: Any = None) -> bool:
        """Apply ``opt`` (default: the one the controls describe); refresh on success, show the
        message either way."""
        applied = self.state.apply(opt if opt is not None else self.current_opt())
        self._after(applied)
        return applied

    def _after(self, changed: Any) -> None:
        if changed is False:
            self.message.value = message_html(self.state)  # the kernel did not change: nothing else to redraw
            self._buttons()
            return
        self.refresh()

    def _buttons(self) -> None:
        self.undo_button.disabled = not self.state.can_undo
        self.redo_button.disabled = not self.state.can_redo

    def refresh(self) -> None:
        """Redraw everything from the current kernel."""
        state = self.state
        if self.__dict__.get("_compared") is not state.kernel:  # a comparison of another kernel: stale
            self.compare_view.value = ""
        self.axes.value = f'<div class="uv-axes" style="padding-top:4px">{axes_html(state)}</div>'
        opts = ", ".join(_short(o) for o in state.opts) or "none yet"
        self.opts_text.value = (
            f'<div style="font-size:12px;color:#57606a">opts: <code>{html.escape(opts)}</code></div>'
        )
        self.message.value = message_html(state)
        self._name_kernels()
        self._show_controls()
        self._buttons()
        with self.sources.hold_sync():
            self.sources.value = sources_html(state, self.backends)
            self.sources.provenance = {name: state.provenance(name) for name in self.backends}
        if self.graph is not None and isinstance(getattr(state.kernel, "ast", None), UOp):
            self.graph.show(state.kernel.ast)
        # the timings taken of this kernel (BEAM's re-timing of its winner included), as they were taken
        cached = [entry for entry in (state.cached_timing(b) for b in self.backends) if entry is not None]
        if cached:
            self._show_timings(cached)
        else:
            self.timings.children = []
        self.compare_select.options = [(label, position) for position, (label, _) in
                                       enumerate(self._comparison_points())]
        self._show_beam(state.beam_result)

    def _show_beam(self, result: Any) -> None:
        """The chosen kernel's last BEAM result: its candidate table and the candidates to open."""
        from uopviz.widgets.beam_runner import candidate_rows, candidates_html

        if result is self.__dict__.get("_shown_beam"):
            return
        self.__dict__["_shown_beam"] = result
        self.beam_table.value = candidates_html(result) if result is not None else ""
        rows = candidate_rows(result) if result is not None else []
        self.candidate_select.options = [
            (f"{row['index']}: {row['name']}" + (" ★" if row["winner"] else ""), row["index"]) for row in rows
        ]
        self.open_candidate_button.disabled = not rows

    def _name_kernels(self) -> None:
        """The kernel list names each kernel as it is now (its name changes with its opts)."""
        labels = []
        for index, kernel in enumerate(self.kernels):
            state = self.states.get(index)
            name = getattr(state.kernel if state is not None else kernel, "name", "kernel")
            original = getattr(kernel, "name", "kernel")
            labels.append((f"{index}: {name}" + (f" (was {original})" if name != original else ""), index))
        if labels != list(self.kernel_select.options):
            # new options reset the selection: keep it, without redrawing for the interim value
            chosen, self._relabelling = self.kernel_select.value, True
            try:
                self.kernel_select.options = labels
                self.kernel_select.value = chosen
            finally:
                self._relabelling = False

    def _comparison_points(self) -> list[tuple[str, Any]]:
        points = self.__dict__.get("_points")
        if points is None or points[0] is not self.state or points[1] != self.state.kernel:
            points = (self.state, self.state.kernel, self.state.comparison_points())
            self.__dict__["_points"] = points
        return points[2]

    def compare(self, position: int | None = None) -> None:
        """Show the current kernel against comparison point ``position`` (default: the one chosen):
        the heuristic's kernel, BEAM's result, or a point of the undo history."""
        points = self._comparison_points()
        position = self.compare_select.value if position is None else position
        if position is None or not points:
            return
        label, other = points[position]
        diff = tuner_schedule_diff(self.state, other, self.backends)
        self.compare_view.value = (f'<div style="font-size:12px">a: the current kernel; '
                                   f"b: {html.escape(label)}</div>{schedule_diff_html(diff)}")
        self.__dict__["_compared"] = self.state.kernel

    def open_candidate(self, index: int | None = None) -> None:
        """Open BEAM candidate ``index`` (default: the one chosen) as the current kernel, undoably."""
        index = self.candidate_select.value if index is None else index
        if index is None:
            return
        try:
            self.state.open_candidate(index)
        except Exception as error:  # noqa: BLE001 - a candidate that cannot be rebuilt is reported
            self.state.message, self.state.error = f"{type(error).__name__}: {error}", True
            self._after(False)
            return
        self.refresh()

    def save_session(self, path: str | None = None) -> None:
        """Save the tuning session to ``path`` (default: the path field)."""
        try:
            self.state.save_session(path or self.session_path.value)
        except Exception as error:  # noqa: BLE001 - an unwritable path is reported in the panel
            self.state.message, self.state.error = f"{type(error).__name__}: {error}", True
        self._after(False)

    def load_session(self, path: str | None = None) -> None:
        """Load a tuning session from ``path`` (default: the path field) onto the chosen kernel."""
        try:
            self.state.load_session(path or self.session_path.value)
        except Exception as error:  # noqa: BLE001 - a session for another kernel is reported by name
            self.state.message, self.state.error = f"{type(error).__name__}: {error}", True
            self._after(False)
            return
        self.refresh()

    def _export(self, text: str) -> None:
        self.export_text.value = text
        self.export_text.layout.display = ""

    # -- timings and BEAM --------------------------------------------------------------------------
    def time_all(self, wait: bool = False) -> None:
        """Time the current kernel on every backend, one after the other in a thread (each within
        the tuner's budget), with progress; while it runs the button is Stop.  ``wait`` runs it here."""
        if self._timing_thread is not None:  # the button reads Stop now: stop the timing in progress
            self.stop_timing()
            return
        state, backends = self.state, list(self.backends)
        self._stop_requested = False
        self._set_time_button(running=True)
        self.timings.children = [widgets.HTML(self._progress_html(backends, 0))]

        def work() -> None:
            entries = []
            try:
                for done, backend in enumerate(backends):
                    self.timings.children = [widgets.HTML(self._progress_html(backends, done))]
                    if self._stop_requested:
                        entries.append(TimingEntry(backend, error="stopped"))
                        continue
                    entries.append(state.timing(backend, refresh=True, budget_s=self.timing_budget_s))
                self._show_timings(entries)
            finally:
                self._timing_thread = None
                self._set_time_button(running=False)

        if wait:
            self._timing_thread = threading.current_thread()
            work()
        else:
            self._timing_thread = threading.Thread(target=work, daemon=True)
            self._timing_thread.start()

    def stop_timing(self) -> None:
        """Stop the timing in progress: the backend being timed is stopped (its worker process is
        killed) and the ones after it are not timed."""
        from uopviz.backends.worker import default_worker

        self._stop_requested = True
        default_worker().cancel()

    def _set_time_button(self, running: bool) -> None:
        button = self.time_button
        button.description, button.icon = ("Stop", "stop") if running else ("Time on all backends", "clock")
        button.button_style = "warning" if running else ""

    def _progress_html(self, backends: list[str], done: int) -> str:
        now = f"timing {html.escape(backends[done])} " if done < len(backends) else ""
        return (f'<div style="font-size:12px;color:#57606a">{now}({done}/{len(backends)} done; at most '
                f"{self.timing_budget_s:g} s each; the button stops it)</div>")

    def _show_timings(self, entries: list[Any]) -> None:
        rows = timing_rows(entries)
        table = "".join(
            f"<li><b>{html.escape(r['backend'])}</b>: "
            + ", ".join(f"{k} {html.escape(v)}" for k, v in r.items() if k != "backend")
            + "</li>"
            for r in rows
        )
        listed = widgets.HTML(f'<ul style="font-size:12px">{table}</ul>')
        if not any(entry.median_s for entry in entries):  # all stopped or failed: no empty chart
            self.timings.children = [listed]
            return
        self.timings.children = [bokeh_widget(timing_figure(entries, getattr(self.state.kernel, "name", ""))),
                                 listed]

    def beam(self, wait: bool = False) -> None:
        """Run BEAM search on the current kernel in a thread, with the progress bar; the best kernel
        found becomes the current one (undoably)."""
        from uopviz.widgets.beam_runner import run_beam

        state, backend = self.state, self.beam_backend.value or "python"
        # one kernel change at a time: the search thread and a click must not build UOps together
        busy = (
            self.beam_button,
            self.apply_button,
            self.undo_button,
            self.redo_button,
            self.reset_button,
            self.kernel_select,
        )
        for control in busy:
            control.disabled = True
        self.beam_progress.value, self.beam_progress.max = 0, 1
        self.beam_status.value = "searching…"

        def progress(done: int, total: int) -> None:
            self.beam_progress.max = max(1, total)
            self.beam_progress.value = min(done, total)

        def work() -> None:
            try:
                best, summary, result = run_beam(
                    state.kernel, backend, width=self.beam_width.value,
                    budget_s=float(self.beam_budget.value), progress=progress,
                )
                state.take_beam(result, summary)
                self.beam_status.value = ""
                self.beam_result = result
                self.refresh()
            except Exception as error:  # noqa: BLE001 - the search failing is reported in the panel
                state.message, state.error = f"BEAM failed: {type(error).__name__}: {error}", True
                self.message.value = message_html(state)
                self.beam_status.value = ""
            finally:
                for control in busy:
                    control.disabled = False
                self._buttons()
                self._offer_choices()  # Apply stays off where nothing applies

        if wait:
            work()
        else:
            threading.Thread(target=work, daemon=True).start()


def beam_backend_for(kernel: Any, backends: list[str]) -> str | None:
    """Where BEAM times candidates by default: the kernel's own backend when shown, else the first
    compiled one (the Python interpreter's timings say nothing about compiled code)."""
    own = getattr(kernel, "backend", None)
    if own in backends:
        return own
    compiled = [b for b in backends if b != "python"]
    return (compiled or backends or [None])[0]


def _hint(text: str, error: bool = False) -> str:
    """A short line beside the opt's controls (red when nothing applies)."""
    color = "#82071e" if error else "#57606a"
    return f'<span class="uv-choice-hint" style="font-size:12px;color:{color}">{html.escape(text)}</span>'


def _short(opt: Any) -> str:
    arg = opt.arg
    if isinstance(arg, tuple):
        arg = "(" + ", ".join(a.name if isinstance(a, AxisType) else repr(a) for a in arg) + ")"
    return f"{opt.op.name}({opt.axis}, {arg})"
