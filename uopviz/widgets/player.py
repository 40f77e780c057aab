"""The rewrite player's data model: which pass, which step, and what that step looks like.

:class:`PlayerState` walks a :class:`uopviz.core.Trace` (a ``with uv.tracing()`` block or a
``Program.trace``).  Passes are listed depth first (a pipeline stage, then its passes) with their
step counts; passes that changed nothing can be hidden.  For the chosen step,
:meth:`PlayerState.frame` gives the graph right after it (``step.graph``) laid out, the nodes it
added or changed (a :func:`graph_diff` against the graph before it), the rule's name, its
``file:line`` and source line, and a unified diff of the printed graph (``str(uop)``).  Step 0 of
a pass is its input.  Laid-out graphs are cached by UOp, so going back and forth is cheap.

No widget code here: :class:`uopviz.widgets.views.RewritePlayer` draws these frames.
"""

from __future__ import annotations

import difflib
import linecache
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx

from uopviz.core.rewrite import PassTrace, RewriteStep, Trace
from uopviz.core.uop import UOp, UOpError
from uopviz.widgets.graph import GraphDiff, graph_diff, layout, node_key

PACKAGE_PARENT = Path(__file__).resolve().parent.parent.parent
#: How many laid-out graphs a player keeps (a step's graph and its predecessor's per frame).
LAYOUT_CACHE_SIZE = 64
#: Lines of the printed graphs beyond which the text diff is cut (it stays readable and fast).
DIFF_LINE_LIMIT = 400


@dataclass(frozen=True)
class PassEntry:
    """One row of the pass list: the pass, its depth in the tree, its position and step count."""

    index: int
    depth: int
    record: PassTrace

    @property
    def name(self) -> str:
        """The pass's name as recorded."""
        return self.record.name

    @property
    def step_count(self) -> int:
        """Steps recorded in this pass, nested passes included."""
        return len(self.record.steps)

    @property
    def changed(self) -> bool:
        """True when the pass rewrote anything."""
        return self.record.changed


def source_line(location: str) -> str:
    """The line of code at ``location`` (``path:line``; package paths relative to the checkout),
    stripped; '' when the file cannot be read."""
    path, _, line = location.rpartition(":")
    if not path or not line.isdigit():
        return ""
    candidates = [Path(path)] if Path(path).is_absolute() else [PACKAGE_PARENT / path, Path.cwd() / path]
    for candidate in candidates:
        text = linecache.getline(str(candidate), int(line))
        if text:
            return text.strip()
    return ""


def text_diff(before: str, after: str, context: int = 2) -> list[str]:
    """The unified diff of two printed graphs, as lines (headers dropped)."""
    a, b = before.splitlines()[:DIFF_LINE_LIMIT], after.splitlines()[:DIFF_LINE_LIMIT]
    lines = list(difflib.unified_diff(a, b, lineterm="", n=context))
    return [line for line in lines if not line.startswith(("---", "+++"))]


class PlayerState:
    """Where the player is in a trace, and the frames it shows.

    ``pass_index`` indexes :attr:`entries` (every pass, nested ones included); ``step`` runs from 0
    (the pass's input) to the pass's step count.  Setting either clamps it into range.
    """

    def __init__(
        self, trace: Trace, *, hide_unchanged: bool = True, engine: str = "auto", fold_constants: bool = True
    ):
        if not isinstance(trace, Trace):
            raise TypeError(f"PlayerState needs a uopviz Trace, got {type(trace).__name__}")
        self.trace = trace
        self.hide_unchanged = hide_unchanged
        self.engine = engine
        self.fold_constants = fold_constants
        self.entries: list[PassEntry] = []
        for top in trace.passes:
            self._add(top, 0)
        self._layouts: OrderedDict[int, tuple[UOp, nx.DiGraph]] = OrderedDict()
        self._replay_errors: dict[int, str] = {}
        self._pass_index = self._first_pass()
        self._step = 1 if self.entries and self.current.step_count else 0

    def _add(self, record: PassTrace, depth: int) -> None:
        self.entries.append(PassEntry(len(self.entries), depth, record))
        for child in record.passes:
            self._add(child, depth + 1)

    def _first_pass(self) -> int:
        for entry in self.entries:
            if entry.step_count:
                return entry.index
        return 0

    # -- position ------------------------------------------------------------------------------
    @property
    def visible_entries(self) -> list[PassEntry]:
        """The pass list as shown: every pass, or only those that changed something."""
        return [e for e in self.entries if e.changed or not self.hide_unchanged]

    @property
    def current(self) -> PassEntry:
        """The chosen pass."""
        if not self.entries:
            raise ValueError("the trace recorded no passes: run graph_rewrite inside `with uv.tracing()`")
        return self.entries[self._pass_index]

    @property
    def pass_index(self) -> int:
        """Index of the chosen pass in :attr:`entries`."""
        return self._pass_index

    @pass_index.setter
    def pass_index(self, value: int) -> None:
        if not self.entries:
            raise ValueError("the trace recorded no passes")
        self._pass_index = max(0, min(int(value), len(self.entries) - 1))
        self._step = min(self._step, self.current.step_count)

    @property
    def step(self) -> int:
        """The chosen step: 0 is the pass's input, k the graph after the k-th step."""
        return self._step

    @step.setter
    def step(self, value: int) -> None:
        self._step = max(0, min(int(value), self.current.step_count))

    def select(self, pass_index: int | str, step: int | None = None) -> None:
        """Choose a pass (by index or by name) and a step (default: its first step)."""
        if isinstance(pass_index, str):
            matches = [e.index for e in self.entries if e.name == pass_index]
            if not matches:
                raise KeyError(f"no pass named {pass_index!r}; passes: {[e.name for e in self.entries]}")
            pass_index = matches[0]
        self.pass_index = pass_index
        self.step = (1 if self.current.step_count else 0) if step is None else step

    def next(self) -> None:
        """One step forward (stays at the last step)."""
        self.step = self._step + 1

    def previous(self) -> None:
        """One step back (stays at the input)."""
        self.step = self._step - 1

    # -- graphs ----------------------------------------------------------------------------
    def step_record(self, step: int | None = None) -> RewriteStep | None:
        """The RewriteStep shown at ``step`` (None for step 0, the input)."""
        step = self._step if step is None else step
        return self.current.record.steps[step - 1] if step > 0 else None

    def graph_before(self, step_record: RewriteStep) -> UOp | None:
        """The chosen pass's whole graph just before the step (None when it cannot be rebuilt)."""
        try:
            graph = self.current.record.graph_before(step_record)
        except UOpError as error:
            self._replay_errors[id(step_record)] = str(error)
            return None
        return graph if graph is not None else step_record.before

    def whole_graph(self, step_record: RewriteStep) -> UOp | None:
        """The chosen pass's whole graph right after the step (``PassTrace.graph_after``: a stage
        shows the whole program, a nested pass its own graph), or None when it cannot be built.

        Every pass of the pipeline replays: rule steps by substitution, steps recorded by hand
        once, and Expand's node-by-node steps from the whole graphs it records.  A trace made by
        other code can hold a hand-recorded step whose substitution is ill-typed (it changes a
        value's dtype under users it did not rebuild); building that graph raises
        :class:`UOpError`, and the player then shows the step locally.
        """
        try:
            return self.current.record.graph_after(step_record)
        except UOpError as error:
            self._replay_errors[id(step_record)] = str(error)
            return None

    def uop_at(self, step: int | None = None) -> UOp:
        """The graph shown at ``step``: the pass's input at 0, else the graph after that step."""
        record = self.step_record(step)
        if record is None:
            entry = self.current.record
            if entry.input is not None:
                return entry.input
            if entry.output is not None:
                return entry.output
            raise ValueError(f"pass {entry.name!r} recorded no input graph")
        whole = self.whole_graph(record)
        return whole if whole is not None else record.after

    def laid_out(self, uop: UOp) -> nx.DiGraph:
        """The layout of ``uop`` (cached)."""
        cached = self._layouts.get(id(uop))
        if cached is not None and cached[0] is uop:
            self._layouts.move_to_end(id(uop))
            return cached[1]
        graph = layout(uop, engine=self.engine, fold_constants=self.fold_constants)
        self._layouts[id(uop)] = (uop, graph)
        while len(self._layouts) > LAYOUT_CACHE_SIZE:
            self._layouts.popitem(last=False)
        return graph

    def frame(self) -> Frame:
        """Everything the player shows for the current pass and step."""
        entry = self.current
        record = self.step_record()
        after = self.uop_at()
        graph = self.laid_out(after)
        if record is None:
            return Frame(entry, 0, graph, None, None, "", "", "", [], after)
        before = self.graph_before(record)
        note = ""
        if before is None or id(record) in self._replay_errors:
            # the whole graph around this step cannot be rebuilt: show the step locally
            before, after = record.before, record.after
            graph = self.laid_out(after)
            reason = self._replay_errors.get(id(record), "")
            note = ("the whole graph cannot be rebuilt at this step (a step recorded by hand changes a "
                    "value's dtype under users it did not rebuild), so this shows what matched and what "
                    f"replaced it; replaying gives: {reason}")
        diff = graph_diff(self.laid_out(before), graph)
        focus = node_key(record.after) if node_key(record.after) in graph else None
        lines = text_diff(str(before), str(after))
        return Frame(entry, self._step, graph, diff, focus, record.rule, record.location,
                     source_line(record.location), lines, after, note)


@dataclass
class Frame:
    """One step as shown: the pass, the step number, the laid-out graph after it, its diff with
    the graph before (None at step 0), the node that replaced the match (``focus``), the rule's
    name, location and code line, the printed-graph diff lines, and a ``note`` when the step is
    shown locally (the whole graph could not be rebuilt there)."""

    entry: PassEntry
    step: int
    graph: nx.DiGraph
    diff: GraphDiff | None
    focus: str | None
    rule: str
    location: str
    code: str
    diff_lines: list[str]
    uop: UOp
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        """The frame as the front end's player draws it."""
        from uopviz.widgets.serialize import graph_json, marks_json

        return {
            "pass_index": self.entry.index,
            "pass_name": self.entry.name,
            "step": self.step,
            "step_count": self.entry.step_count,
            "graph": graph_json(self.graph),
            "marks": marks_json(self.diff, self.focus),
            "rule": self.rule,
            "location": self.location,
            "code": self.code,
            "diff": self.diff_lines,
            "summary": self.diff.summary() if self.diff else "",
            "note": self.note,
        }
