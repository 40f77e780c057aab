"""The trace of rewrites: every rule :func:`~uopviz.core.rewrite.graph_rewrite` applies and every
step a pass records by hand, grouped into named passes, each step with the ``file:line`` where it is
written and (computed on demand) the whole graph right after it.

``with tracing() as trace:`` opens a :class:`Trace` for the block (in this thread); a pass is
``with traced_pass(name, root) as recorder:``.  Tracing off costs one list test per applied rule;
nothing is recorded.  The rules themselves (:class:`~uopviz.core.rewrite.UPat`,
:class:`~uopviz.core.rewrite.PatternMatcher`) and the rewrite engine are in
:mod:`uopviz.core.rewrite`, which re-exports everything here; this module names a matcher through the
:class:`RuleSet` protocol and does not import it.
"""

from __future__ import annotations

import inspect
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from uopviz.core.substitution import substitute, substitute_closure
from uopviz.core.uop import UOp

# ---------------------------------------------------------------------------------------------
# where code is written, as the trace writes it


def call_site(depth: int = 2) -> str:
    """``file:line`` of the call to the function that calls this one (``depth`` frames up): where a
    pattern is built, where a step recorded by hand is coded."""
    frame = sys._getframe(depth)
    return f"{short_path(frame.f_code.co_filename)}:{frame.f_lineno}"


def short_path(path: str) -> str:
    """Paths inside the package are written from the package root (``uopviz/core/symbolic.py``)."""
    marker = os.sep + "uopviz" + os.sep
    index = path.rfind(marker)
    return path[index + 1 :] if index >= 0 else path


def location_of(function: Any) -> str:
    """``file:line`` of a function's definition (its ``def`` line), as the trace writes locations."""
    code = inspect.unwrap(function).__code__
    return f"{short_path(code.co_filename)}:{code.co_firstlineno}"


# ---------------------------------------------------------------------------------------------
# the trace


class NamedRule(Protocol):
    """A rule as the trace names it: its name and the ``file:line`` it is written at."""

    name: str
    location: str


class RuleSet(Protocol):
    """The rules a pass rewrote with, as the trace keeps them (a
    :class:`~uopviz.core.rewrite.PatternMatcher` is one)."""

    name: str | None
    rules: Sequence[NamedRule]


#: A whole graph recorded with a step: the graph itself, or a function that builds it when asked
#: (a pass that transforms node by node then describes every intermediate graph without paying
#: for building them while it runs).
GraphFrame = UOp | Callable[[], UOp]


@dataclass(eq=False)
class RewriteStep:
    """One applied rule: which, where it is written, what it matched and what replaced it."""

    pass_name: str
    rule: str
    location: str
    before: UOp
    after: UOp
    index: int
    _replay: _PassReplay = field(repr=False)

    @property
    def graph(self) -> UOp:
        """The whole graph (the pass's root) right after this step."""
        return self._replay.graph_after(self)


@dataclass(eq=False, frozen=True)
class _StepRecord:
    """What replaying needs of one of a pass's own steps (a step object itself would point back)."""

    before: UOp
    after: UOp
    index: int


class _PassReplay:
    """Rebuilds one pass's whole graph after any of its steps, nested passes' steps included.

    Steps point here for :attr:`RewriteStep.graph`; nothing here points back at a step object (own
    steps are kept as :class:`_StepRecord`, nested passes as their :class:`PassTrace`, which point
    only further down).  So a finished trace holds no reference cycle, and a dropped Program frees
    its graphs, and the input arrays they hold, at once rather than at the next cyclic collection.

    The pass's own steps are replayed on its input: a rule's step substitutes what it matched, a
    step recorded by hand replaces its ``before`` once or gives its whole graph explicitly.  A
    nested pass's graph is put back where that pass's input sits in this pass's graph.
    """

    def __init__(self, root: UOp | None):
        self.input = root
        # own steps and nested passes, in the order they happened
        self.events: list[_StepRecord | PassTrace] = []
        self.own_positions: list[int] = []  # own step index -> its position in ``events``
        self.explicit_graphs: dict[int, GraphFrame] = {}
        # own steps recorded by hand (PassRecorder.step), replayed as one substitution: their
        # ``after`` may hold their ``before`` (a PROGRAM wrapping its LINEAR), which a closure would
        # wrap again
        self.hand_steps: set[int] = set()
        self._nested_index: dict[int, int] = {}  # id of a nested pass's step -> event position
        self._graph_memo: dict[int, UOp | None] = {}
        self._contains: dict[int, bool] = {}
        self._embedded: dict[tuple[int, int], tuple[UOp, UOp]] = {}
        self._memo_size = 0

    # -- recording --------------------------------------------------------------------------------
    def add_pass(self, nested: PassTrace) -> None:
        self.events.append(nested)

    def add_step(self, before: UOp, after: UOp, graph: GraphFrame | None, by_hand: bool) -> int:
        """Record an own step; returns its index among the pass's own steps."""
        index = len(self.own_positions)
        if graph is not None:
            self.explicit_graphs[index] = graph
        if by_hand:
            self.hand_steps.add(index)
        self.own_positions.append(len(self.events))
        self.events.append(_StepRecord(before, after, index))
        return index

    # -- frames -----------------------------------------------------------------------------------
    def graph_after(self, step: RewriteStep) -> UOp:
        return self.frame(step, before=False)[0]

    def frame(self, step: RewriteStep, before: bool) -> tuple[UOp | None, bool]:
        """The graph around ``step`` and whether it is this pass's graph.  A nested pass's graph is
        put in this pass's graph when the nested pass is part of this pass's work (this pass records
        no steps of its own: a stage and its passes).  A nested pass that helped build one of this
        pass's own steps (a rule rewriting with rules of its own) works on a graph of its own, which
        is then shown as it is, here and above."""
        event = self._event_of(step)
        entry = self.events[event]
        if isinstance(entry, PassTrace):
            inner, in_frame = entry._replay.frame(step, before)
            if inner is None or not in_frame or self.own_positions:
                return inner, False
            return self._embed(event, self._state_after(event - 1), inner), True
        if before:
            return self._state_after(event - 1), True
        graph = self._state_after(event)
        return (step.after, True) if graph is None else (graph, True)

    def shown_pass(self, step: RewriteStep) -> PassTrace | None:
        """The nested pass whose own graph :meth:`frame` shows around ``step`` (None: this pass's
        graph), without building any graph: it follows the same choices as :meth:`frame`."""
        entry = self.events[self._event_of(step)]
        if not isinstance(entry, PassTrace):
            return None
        deeper = entry._replay.shown_pass(step)
        if deeper is not None:
            return deeper
        return entry if self.own_positions else None

    def _event_of(self, step: RewriteStep) -> int:
        if step._replay is self:
            return self.own_positions[step.index]
        position = self._nested_index.get(id(step))
        if position is None:  # (re)built once recording went on
            self._nested_index = {
                id(s): p
                for p, entry in enumerate(self.events)
                if isinstance(entry, PassTrace)
                for s in entry.steps
            }
            position = self._nested_index.get(id(step))
        if position is None:
            raise KeyError(f"step {step.rule!r} of pass {step.pass_name!r} is not a step of this pass")
        return position

    def _embed(self, event: int, around: UOp | None, inner: UOp) -> UOp:
        """``inner`` (a graph of the nested pass at ``event``) put in this pass's graph ``around``
        where that pass's input sits; ``inner`` itself when the input is not part of ``around``
        (the nested pass rebuilt the whole graph)."""
        child = self.events[event]
        assert isinstance(child, PassTrace)
        if around is None or child.input is None or child.input is around:
            return inner
        contains = self._contains.get(event)
        if contains is None:
            contains = self._contains[event] = child.input in set(around.toposort())
        if not contains:
            return inner
        cached = self._embedded.get((event, id(inner)))
        if cached is not None and cached[0] is inner:
            return cached[1]
        graph = substitute(around, {child.input: inner})
        self._embedded[(event, id(inner))] = (inner, graph)
        return graph

    def _state_after(self, event: int) -> UOp | None:
        """This pass's graph after its first ``event + 1`` events (the input for -1)."""
        if event < 0:
            return self.input
        if self._memo_size != len(self.events):  # recorded more since
            self._graph_memo.clear()
            self._embedded.clear()
            self._contains.clear()
            self._memo_size = len(self.events)
        if event in self._graph_memo:
            return self._graph_memo[event]
        start = next((p for p in range(event - 1, -1, -1) if p in self._graph_memo), -1)
        graph = self._graph_memo[start] if start >= 0 else self.input
        # consecutive rule steps replay as one substitution closure, as the rewriter made them: a
        # rule's ``after`` holding an earlier match is rebuilt with that match's replacement
        run: dict[UOp, UOp] = {}
        first = start
        while first >= 0 and self._is_rule_step(first):
            first -= 1
        for p in range(first + 1, start + 1):
            run[self.events[p].before] = self.events[p].after
        for position in range(start + 1, event + 1):
            entry = self.events[position]
            if graph is not None and self._is_rule_step(position):
                run[entry.before] = entry.after
                if position == event or not self._is_rule_step(position + 1):
                    graph = substitute_closure(graph, run)
                continue
            run = {}
            if isinstance(entry, PassTrace):
                # a nested pass is part of this pass's work when this pass records no steps of its
                # own (a stage and its passes); otherwise it helped build one of those steps (a
                # rule that rewrites with rules of its own), which then shows its result
                if entry.output is not None and not self.own_positions:
                    graph = self._embed(position, graph, entry.output)
            elif entry.index in self.explicit_graphs:
                graph = self._explicit_graph(entry.index)
            else:
                graph = entry.after if graph is None else substitute(graph, {entry.before: entry.after})
        self._graph_memo[event] = graph
        return graph

    def _is_rule_step(self, event: int) -> bool:
        if event >= len(self.events):
            return False
        entry = self.events[event]
        return (
            isinstance(entry, _StepRecord)
            and entry.index not in self.hand_steps
            and entry.index not in self.explicit_graphs
        )

    def _explicit_graph(self, own: int) -> UOp:
        frame = self.explicit_graphs[own]
        if not isinstance(frame, UOp):
            frame = self.explicit_graphs[own] = frame()
        return frame


@dataclass(eq=False)
class PassTrace:
    """The record of one pass (or of a stage grouping several passes): its input, output, steps,
    nested passes and duration.

    :meth:`graph_after` gives the pass's whole graph after any of its steps, nested ones included
    (see :class:`_PassReplay` for how it is rebuilt).
    """

    name: str
    input: UOp | None = None
    output: UOp | None = None
    steps: list[RewriteStep] = field(default_factory=list)
    passes: list[PassTrace] = field(default_factory=list)
    duration_s: float = 0.0
    #: The rules a :func:`graph_rewrite` pass applied (None for a stage or a pass recorded by hand):
    #: kept so that the player can ask why a rule did not fire; never serialized (no report embeds it)
    matcher: RuleSet | None = field(default=None, repr=False)
    _replay: _PassReplay = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._replay = _PassReplay(self.input)

    @property
    def changed(self) -> bool:
        """True when the pass rewrote anything."""
        return bool(self.steps) or (
            self.input is not None and self.output is not None and self.input is not self.output
        )

    def walk(self) -> Iterator[PassTrace]:
        """This pass and every nested pass, depth first."""
        yield self
        for child in self.passes:
            yield from child.walk()

    def matchers(self) -> list[RuleSet]:
        """The rule sets this pass and its nested passes rewrote with (a stage's: those of every
        :func:`graph_rewrite` inside it), in the order first used, each once: a matcher built again
        for every kernel counts once when its rules (names and locations) are the same."""
        found: dict[tuple[tuple[str, str], ...], RuleSet] = {}
        for record in self.walk():
            if record.matcher is not None:
                key = tuple((rule.name, rule.location) for rule in record.matcher.rules)
                found.setdefault(key, record.matcher)
        return list(found.values())

    def graph_after(self, step: RewriteStep) -> UOp:
        """The whole graph right after ``step``, a step of this pass or of a nested pass at any depth
        (memoised): this pass's graph, or the graph of the nested pass that helped build one of this
        pass's own steps.  A pass recorded without an input shows the step's ``after``."""
        return self._frame(step, before=False)[0]

    def graph_before(self, step: RewriteStep) -> UOp | None:
        """The whole graph right before ``step``, in the same frame as :meth:`graph_after` (None when
        the pass has no input there)."""
        return self._frame(step, before=True)[0]

    def shown_pass(self, step: RewriteStep) -> PassTrace:
        """The pass whose whole graph :meth:`graph_after` and :meth:`graph_before` show around
        ``step``: this pass, or a nested pass that helped build one of this pass's own steps (a rule
        that rewrites with rules of its own: Rangeify's ``kernelize`` builds each kernel body with
        ``index pushdown``), whose graph is a piece under construction, not this pass's graph."""
        try:
            shown = self._replay.shown_pass(step)
        except KeyError:
            raise KeyError(
                f"step {step.rule!r} of pass {step.pass_name!r} is not a step of pass {self.name!r}"
            ) from None
        return self if shown is None else shown

    def _frame(self, step: RewriteStep, before: bool) -> tuple[UOp | None, bool]:
        try:
            return self._replay.frame(step, before)
        except KeyError:
            raise KeyError(
                f"step {step.rule!r} of pass {step.pass_name!r} is not a step of pass {self.name!r}"
            ) from None


class Trace:
    """Everything recorded inside one ``with tracing()`` block: a list of top-level passes."""

    def __init__(self) -> None:
        self.passes: list[PassTrace] = []
        self._open: list[PassTrace] = []

    def __repr__(self) -> str:
        return f"Trace({len(self.passes)} passes, {sum(len(p.steps) for p in self.passes)} steps)"

    def walk(self) -> Iterator[PassTrace]:
        """Every pass, nested ones included, depth first."""
        for p in self.passes:
            yield from p.walk()

    def find(self, name: str) -> PassTrace:
        """The first pass (at any depth) called ``name``."""
        for p in self.walk():
            if p.name == name:
                return p
        raise KeyError(f"no pass named {name!r}; passes: {[p.name for p in self.walk()]}")

    @property
    def steps(self) -> list[RewriteStep]:
        """Every step of every top-level pass, in order."""
        return [s for p in self.passes for s in p.steps]

    # -- recording (used by graph_rewrite and by passes that transform by hand) -----------------
    def _begin(self, name: str, root: UOp | None, matcher: RuleSet | None = None) -> PassTrace:
        record = PassTrace(name, input=root, matcher=matcher)
        if self._open:
            self._open[-1].passes.append(record)
            self._open[-1]._replay.add_pass(record)
        else:
            self.passes.append(record)
        self._open.append(record)
        return record

    def _end(self, record: PassTrace, output: UOp | None) -> None:
        record.output = output
        popped = self._open.pop()
        assert popped is record, "passes must close in the order they opened"

    def _record(
        self,
        rule_name: str,
        location: str,
        before: UOp,
        after: UOp,
        graph: GraphFrame | None = None,
        by_hand: bool = False,
    ) -> RewriteStep:
        innermost = self._open[-1]
        position = innermost._replay.add_step(before, after, graph, by_hand)
        step = RewriteStep(innermost.name, rule_name, location, before, after, position, innermost._replay)
        for record in self._open:
            record.steps.append(step)
        return step


class _ThreadTraces(threading.local):
    """The traces open in this thread: a rewrite records into the traces its own thread opened, so a
    notebook's tracing (the tuner saving a session) and a worker thread's lowering (a timing, a
    BEAM search) never record into each other's passes."""

    def __init__(self) -> None:
        self.traces: list[Trace] = []


_thread_traces = _ThreadTraces()


@contextmanager
def tracing() -> Iterator[Trace]:
    """Record every rewrite step made inside the block (in this thread) into the yielded :class:`Trace`."""
    trace = Trace()
    _thread_traces.traces.append(trace)
    try:
        yield trace
    finally:
        _thread_traces.traces.remove(trace)


def is_tracing() -> bool:
    """True inside a ``tracing()`` block."""
    return bool(_thread_traces.traces)


@contextmanager
def untraced() -> Iterator[None]:
    """Record nothing inside the block, even inside ``tracing()``: for helper rewrites made while
    building one recorded step (what they built shows in that step)."""
    saved = list(_thread_traces.traces)
    _thread_traces.traces.clear()
    try:
        yield
    finally:
        _thread_traces.traces[:] = saved


@contextmanager
def traced_pass(
    name: str, root: UOp | None = None, matcher: RuleSet | None = None
) -> Iterator[PassRecorder]:
    """Group the rewrites made inside the block as one named pass (a pipeline stage, say).

    The yielded recorder's ``output`` must be set to the pass's result; passes that transform
    without rules call ``recorder.step(...)`` to record what they did.  ``matcher``: the rules the
    pass rewrites with (:func:`graph_rewrite` gives its own), kept as :attr:`PassTrace.matcher`.
    """
    recorder = PassRecorder(name, root)
    started = time.perf_counter()
    records = [trace._begin(name, root, matcher) for trace in _thread_traces.traces]
    try:
        yield recorder
    finally:
        for trace, record in zip(_thread_traces.traces, records, strict=False):
            record.duration_s = time.perf_counter() - started
            trace._end(record, recorder.output)


class PassRecorder:
    """Handle of an open pass: set ``output``; record hand-made steps with :meth:`step`."""

    def __init__(self, name: str, root: UOp | None):
        self.name = name
        self.output: UOp | None = root

    def step(
        self,
        rule: str,
        before: UOp,
        after: UOp,
        graph: GraphFrame | None = None,
        location: str | None = None,
    ) -> None:
        """Record one transformation made without a pattern rule (``location``: where it is coded,
        defaulting to the caller's line).

        Replaying the pass replaces ``before`` by ``after`` once in the graph so far.  Where that
        does not give the whole graph after the step (a pass that rebuilds node by node, whose
        rebuilt nodes change dtype before their users are rebuilt), ``graph`` gives it: the graph,
        or a function that builds it when the step is shown.
        """
        if not _thread_traces.traces:
            return
        where = location or call_site()
        for trace in _thread_traces.traces:
            trace._record(rule, where, before, after, graph, by_hand=True)


def record_rule_step(rule: str, location: str, before: UOp, after: UOp) -> None:
    """Record one applied pattern rule (``rule`` at ``location`` rewrote ``before`` into ``after``)
    into every trace open in this thread: :func:`~uopviz.core.rewrite.graph_rewrite`'s steps."""
    for trace in _thread_traces.traces:
        trace._record(rule, location, before, after)


__all__ = [
    "GraphFrame", "NamedRule", "PassRecorder", "PassTrace", "RewriteStep", "RuleSet", "Trace", "call_site",
    "is_tracing", "location_of", "record_rule_step", "short_path", "traced_pass", "tracing", "untraced",
]
