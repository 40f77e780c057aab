"""Pattern rewriting of UOp graphs, with a recorded trace of every step.

Rules are data: a :class:`PatternMatcher` holds ``(UPat, function)`` pairs (optionally with a
readable name as a third element).  :func:`graph_rewrite` applies them to a whole graph until
nothing matches.  Inside ``with tracing() as trace:`` every applied rule is recorded as a
:class:`RewriteStep` with the rule's name, the ``file:line`` where the rule is written, the
UOp before and after, and (computed on demand) the whole graph right after the step.

Tracing off costs one list test per applied rule; nothing is recorded.
"""

from __future__ import annotations

import inspect
import itertools
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from uopviz.core.dtype import DType
from uopviz.core.errors import UopvizError
from uopviz.core.ops import Ops
from uopviz.core.uop import UOp, toposort


class RewriteError(UopvizError, RuntimeError):
    """A rewrite that cannot finish: a rule loop, or a rule that returned something not a UOp."""


# ---------------------------------------------------------------------------------------------
# patterns


def _caller_location(depth: int = 2) -> str:
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


class UPat:
    """A pattern over UOps.

    ``op``: an op or a collection of ops (None: any).  ``dtype``: a dtype or collection.
    ``src``: None (any sources), a tuple (in order), a list (any order: tries each permutation,
    for commutative ops), or one UPat (every source matches it).  ``arg``: the arg must equal it.
    ``name``: bind the matched UOp to this name; a name used twice must bind the same UOp.
    ``predicate``: an extra test on the UOp.  ``allow_any_len``: a tuple ``src`` matches a prefix.
    """

    __slots__ = (
        "ops",
        "dtypes",
        "src",
        "arg",
        "name",
        "predicate",
        "allow_any_len",
        "location",
        "required_source_ops",
        "alternatives",
    )

    def __init__(
        self,
        op: Ops | Iterable[Ops] | None = None,
        dtype: DType | Iterable[DType] | None = None,
        src: tuple[UPat, ...] | list[UPat] | UPat | None = None,
        arg: Any = None,
        name: str | None = None,
        predicate: Callable[[UOp], bool] | None = None,
        allow_any_len: bool = False,
    ):
        self.ops = None if op is None else frozenset((op,) if isinstance(op, Ops) else op)
        self.dtypes = None if dtype is None else frozenset((dtype,) if isinstance(dtype, DType) else dtype)
        self.src = src
        self.arg = arg
        self.name = name
        self.predicate = predicate
        self.allow_any_len = allow_any_len
        self.alternatives: tuple[UPat, ...] | None = None
        self.location = _caller_location()
        # early reject: ops that must appear among the sources for this pattern to have a chance
        required: set[Ops] = set()
        if isinstance(src, tuple | list):
            for s in src:
                if s.ops is not None and len(s.ops) == 1:
                    required |= s.ops
        self.required_source_ops = frozenset(required)

    def __repr__(self) -> str:
        return self.describe()

    def describe(self) -> str:
        """A compact readable form such as ``ADD(x, CONST)``, used for rules without a name."""
        if self.alternatives is not None:
            return " | ".join(a.describe() for a in self.alternatives)
        head = "|".join(sorted(o.name for o in self.ops)) if self.ops else (self.name or "_")
        if self.ops and self.name:
            head = f"{self.name}:{head}"
        if isinstance(self.src, tuple | list):
            inner = ", ".join(s.describe() for s in self.src)
            return f"{head}({inner}{', ...' if self.allow_any_len else ''})"
        if isinstance(self.src, UPat):
            return f"{head}({self.src.describe()}*)"
        return head

    # -- convenience constructors ---------------------------------------------------------------
    @staticmethod
    def var(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat:
        """Any UOp, bound to ``name``."""
        return UPat(dtype=dtype, name=name)

    @staticmethod
    def cvar(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat:
        """Any CONST, bound to ``name``."""
        return UPat(Ops.CONST, dtype=dtype, name=name)

    @staticmethod
    def const(dtype: DType | Iterable[DType] | None, value: Any, name: str | None = None) -> UPat:
        """A CONST of the given value (compared with ``==``; 1 matches 1.0 and True)."""
        return UPat(Ops.CONST, dtype=dtype, name=name, predicate=lambda u: u.arg[0] == value)

    @staticmethod
    def any(*patterns: UPat) -> UPat:
        """Matches when any of ``patterns`` matches (an alternation)."""
        alternation = UPat()
        alternation.alternatives = patterns
        alternation.location = patterns[0].location if patterns else alternation.location
        return alternation

    # -- matching -------------------------------------------------------------------------------
    def match(self, uop: UOp, bindings: dict[str, UOp] | None = None) -> dict[str, UOp] | None:
        """The bindings if ``uop`` matches (extending ``bindings``), else None."""
        return _match(self, uop, dict(bindings) if bindings else {})


def _match(pattern: UPat, uop: UOp, bindings: dict[str, UOp]) -> dict[str, UOp] | None:
    if pattern.alternatives is not None:
        for alternative in pattern.alternatives:
            found = _match(alternative, uop, dict(bindings))
            if found is not None:
                return found
        return None
    if pattern.ops is not None and uop.op not in pattern.ops:
        return None
    if (
        pattern.dtypes is not None
        and uop.dtype not in pattern.dtypes
        and uop.dtype.scalar not in pattern.dtypes
    ):
        return None
    arg = pattern.arg
    if arg is not None and not _arg_equal(uop.arg, arg):
        return None
    if pattern.name is not None:
        bound = bindings.get(pattern.name)
        if bound is not None and bound is not uop:
            return None
    if pattern.predicate is not None and not pattern.predicate(uop):
        return None
    src = pattern.src
    if src is not None:
        if isinstance(src, UPat):
            for s in uop.src:
                bindings = _match(src, s, bindings)
                if bindings is None:
                    return None
        elif isinstance(src, tuple):
            if len(uop.src) < len(src) or (len(uop.src) != len(src) and not pattern.allow_any_len):
                return None
            for sub, s in zip(src, uop.src, strict=False):
                bindings = _match(sub, s, bindings)
                if bindings is None:
                    return None
        else:  # a list: any order
            if len(uop.src) != len(src):
                return None
            for order in itertools.permutations(uop.src):
                trial: dict[str, UOp] | None = dict(bindings)
                for sub, s in zip(src, order, strict=True):
                    trial = _match(sub, s, trial)
                    if trial is None:
                        break
                if trial is not None:
                    bindings = trial
                    break
            else:
                return None
    if pattern.name is not None:
        bindings[pattern.name] = uop
    return bindings


def _arg_equal(actual: Any, wanted: Any) -> bool:
    if actual is wanted:
        return True
    try:
        return bool(actual == wanted)
    except TypeError:
        return False


# ---------------------------------------------------------------------------------------------
# rules and matchers


@dataclass(frozen=True)
class Rule:
    """One named rewrite rule: when ``pattern`` matches, ``function(**bindings)`` gives the
    replacement (or None to decline)."""

    pattern: UPat
    function: Callable[..., UOp | None]
    name: str
    location: str
    wants_ctx: bool

    def apply(self, uop: UOp, ctx: Any) -> UOp | None:
        """The replacement of ``uop`` by this rule, or None when the pattern or the function declines."""
        bindings = _match(self.pattern, uop, {})
        if bindings is None:
            return None
        if self.wants_ctx:
            bindings["ctx"] = ctx
        return self.function(**bindings)


def _function_location(function: Callable, pattern: UPat) -> str:
    """Where a rule is written: the line its pattern is built on (a rule's first line, also when the
    rule spans several lines).  A pattern built in another file (a shared pattern reused here) says
    nothing about this rule, so then the lambda's own line is used."""
    code = getattr(function, "__code__", None)
    if code is not None and function.__name__ == "<lambda>":
        lambda_location = f"{short_path(code.co_filename)}:{code.co_firstlineno}"
        if pattern.location.rsplit(":", 1)[0] != lambda_location.rsplit(":", 1)[0]:
            return lambda_location
    return pattern.location


def _make_rule(entry: tuple) -> Rule:
    if isinstance(entry, Rule):
        return entry
    if len(entry) == 3:
        pattern, function, name = entry
    else:
        pattern, function = entry
        name = None
    if name is None:
        function_name = getattr(function, "__name__", "<lambda>")
        name = function_name if function_name != "<lambda>" else pattern.describe()
    try:
        wants_ctx = "ctx" in inspect.signature(function).parameters
    except (TypeError, ValueError):
        wants_ctx = False
    return Rule(pattern, function, name, _function_location(function, pattern), wants_ctx)


class PatternMatcher:
    """An ordered list of rules with dispatch by op.  The first rule whose pattern matches and
    whose function returns a UOp wins."""

    def __init__(self, rules: Sequence[tuple | Rule], name: str | None = None):
        self.rules: list[Rule] = [_make_rule(r) for r in rules]
        self.name = name
        self._by_op: dict[Ops, list[Rule]] = {}
        generic = [r for r in self.rules if r.pattern.ops is None]
        for op in Ops:
            self._by_op[op] = [r for r in self.rules if r.pattern.ops is None or op in r.pattern.ops]
        self._generic = generic

    def __add__(self, other: PatternMatcher) -> PatternMatcher:
        return PatternMatcher(self.rules + other.rules, name=self.name or other.name)

    def __len__(self) -> int:
        return len(self.rules)

    def rules_for(self, op: Ops) -> list[Rule]:
        """The rules whose pattern can match a UOp of ``op``, in order: what a pass with a walk of
        its own tries on each node (Expand, whose rules give a value and its lanes, not a UOp)."""
        return self._by_op[op]

    def rewrite(self, uop: UOp, ctx: Any = None) -> tuple[UOp, Rule] | None:
        """The first rule that rewrites ``uop``, with its result; None when no rule applies."""
        source_ops = None
        for rule in self._by_op[uop.op]:
            required = rule.pattern.required_source_ops
            if required:
                if source_ops is None:
                    source_ops = {s.op for s in uop.src}
                if not required <= source_ops:
                    continue
            result = rule.apply(uop, ctx)
            if result is not None and result is not uop:
                if not isinstance(result, UOp):
                    raise RewriteError(
                        f"rule {rule.name!r} ({rule.location}) returned {type(result).__name__}, not a UOp"
                    )
                return result, rule
        return None


# ---------------------------------------------------------------------------------------------
# the trace

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
    matcher: PatternMatcher | None = field(default=None, repr=False)
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

    def matchers(self) -> list[PatternMatcher]:
        """The rule sets this pass and its nested passes rewrote with (a stage's: those of every
        :func:`graph_rewrite` inside it), in the order first used, each once: a matcher built again
        for every kernel counts once when its rules (names and locations) are the same."""
        found: dict[tuple[tuple[str, str], ...], PatternMatcher] = {}
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
    def _begin(self, name: str, root: UOp | None, matcher: PatternMatcher | None = None) -> PassTrace:
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
    name: str, root: UOp | None = None, matcher: PatternMatcher | None = None
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
        where = location or _caller_location()
        for trace in _thread_traces.traces:
            trace._record(rule, where, before, after, graph, by_hand=True)


# ---------------------------------------------------------------------------------------------
# the rewrite engine


def graph_rewrite(
    root: UOp,
    matcher: PatternMatcher,
    ctx: Any = None,
    name: str | None = None,
    bottom_up: bool = True,
    max_steps: int = 1_000_000,
) -> UOp:
    """Rewrite ``root``'s graph with ``matcher`` until no rule applies anywhere.

    Bottom-up (default): a node is rewritten after its sources reached their fixed point.
    Top-down: a node is rewritten before its sources are visited (rules see the original
    sources), then again after.  A rule loop (a UOp rewriting back into one still being
    rewritten) raises :class:`RewriteError` naming the rules involved.
    """
    pass_name = name or matcher.name or "graph_rewrite"
    with traced_pass(pass_name, root, matcher) as recorder:
        result = _Rewriter(matcher, ctx, is_tracing(), max_steps, pass_name).run(root, bottom_up)
        recorder.output = result
    return result


class _Rewriter:
    def __init__(self, matcher: PatternMatcher, ctx: Any, trace: bool, max_steps: int, pass_name: str):
        self.matcher, self.ctx, self.trace, self.max_steps, self.pass_name = (
            matcher,
            ctx,
            trace,
            max_steps,
            pass_name,
        )
        self.done: dict[UOp, UOp] = {}
        self.steps = 0
        self.chain: dict[UOp, str] = {}  # nodes waiting for their replacement's result -> rule name

    def _apply(self, uop: UOp) -> UOp | None:
        found = self.matcher.rewrite(uop, self.ctx)
        if found is None:
            return None
        result, rule = found
        self.steps += 1
        if self.steps > self.max_steps:
            raise RewriteError(
                f"pass {self.pass_name!r} made more than {self.max_steps} rewrites; last rule "
                f"{rule.name!r} ({rule.location})"
            )
        if result in self.chain:
            raise RewriteError(
                f"rewrite loop in pass {self.pass_name!r}: rule {rule.name!r} ({rule.location}) turned "
                f"{uop.op.name} back into a {result.op.name} that is itself being rewritten "
                f"(by rule {self.chain[result]!r})"
            )
        if self.trace:
            for trace in _thread_traces.traces:
                trace._record(rule.name, rule.location, uop, result)
        return result

    def run(self, root: UOp, bottom_up: bool) -> UOp:
        done, chain, apply = self.done, self.chain, self._apply
        # frames: (node, stage, replacement); stage 0 = visit, 1 = rebuild + rewrite, 2 = adopt result
        stack: list[tuple[UOp, int, UOp | None]] = [(root, 0, None)]
        push, pop = stack.append, stack.pop
        while stack:
            node, stage, replacement = pop()
            if stage == 2:
                done[node] = done[replacement]
                chain.pop(node, None)
                continue
            if node in done:
                continue
            if stage == 0:
                if not bottom_up:
                    result = apply(node)
                    if result is not None:
                        chain[node] = "top-down"
                        push((node, 2, result))
                        push((result, 0, None))
                        continue
                push((node, 1, None))
                for s in reversed(node.src):
                    if s not in done:
                        push((s, 0, None))
                continue
            rebuilt = node
            source = node.src
            for s in source:
                if done[s] is not s:
                    rebuilt = UOp(node.op, tuple([done[t] for t in source]), node.arg, node.tag)
                    break
            if rebuilt is not node and rebuilt in done:
                done[node] = done[rebuilt]
                continue
            result = apply(rebuilt)
            if result is None:
                done[node] = rebuilt
                done[rebuilt] = rebuilt
                continue
            chain[node] = "bottom-up"
            chain[rebuilt] = "bottom-up"
            push((node, 2, result))
            if rebuilt is not node:
                push((rebuilt, 2, result))
            push((result, 0, None))
        return done[root]


def substitute(root: UOp, mapping: dict[UOp, UOp]) -> UOp:
    """Replace each key of ``mapping`` found in ``root``'s graph by its value (once, not recursively
    into the values), rebuilding the users."""
    if not mapping:
        return root
    new: dict[UOp, UOp] = {}
    # a key is replaced whole: what is only below it is never rebuilt, so the walk stops there (a
    # stage putting new kernel bodies into the program graph walks the program, not every kernel)
    for u in toposort([root], lambda node: () if node in mapping else node.src):
        if u in mapping:
            new[u] = mapping[u]
            continue
        src = tuple(new[s] for s in u.src)
        new[u] = u if all(a is b for a, b in zip(src, u.src, strict=True)) else UOp(u.op, src, u.arg, u.tag)
    return new[root]


def frontier_graph(root: UOp, order: Sequence[UOp], new: Mapping[UOp, UOp], done: int) -> UOp:
    """The whole graph part way through a pass that rebuilds ``root`` node by node: ``order`` is the
    order it visits the nodes in (sources first), ``new`` each visited node's rebuilt form, and the
    first ``done`` nodes of ``order`` are rebuilt.

    A rebuilt node of unchanged dtype and shape replaces its original everywhere.  One whose dtype or
    shape changed (a RANGE that became a vector of lanes) cannot feed the nodes not rebuilt yet: they
    keep reading its original form, and the rebuilt node, still waiting for them, hangs from the root
    SINK, so the graph shows everything built so far next to what is still to do.  With every node
    done, this is the rebuilt root.
    """
    if done >= len(order):
        return new.get(root, root)
    rebuilt_ones = set(order[:done])
    needed = {s for u in order[done:] for s in u.src}
    shown: dict[UOp, UOp] = {}
    waiting: list[UOp] = []
    for u in toposort([root]):
        if u in rebuilt_ones:
            rebuilt = new.get(u, u)
            if rebuilt.dtype == u.dtype and rebuilt.shape == u.shape:
                shown[u] = rebuilt
                continue
            if u in needed:
                waiting.append(rebuilt)
        src = tuple(shown[s] for s in u.src)
        shown[u] = u if all(a is b for a, b in zip(src, u.src, strict=True)) else UOp(u.op, src, u.arg, u.tag)
    top = shown[root]
    if not waiting:
        return top
    reached = set(toposort([top, *(s for w in waiting for s in w.src)]))
    hanging = tuple(dict.fromkeys(w for w in waiting if w not in reached))
    if top.op is Ops.SINK:
        return UOp(Ops.SINK, (*top.src, *hanging), top.arg, top.tag)
    return UOp(Ops.SINK, (top, *hanging))


def substitute_closure(root: UOp, mapping: dict[UOp, UOp]) -> UOp:
    """Apply ``mapping`` until no key is left in the graph: what a sequence of rewrite steps did."""
    current = root
    for _ in range(len(mapping) + 1):
        present = set(current.toposort())
        if not any(key in present for key in mapping):
            return current
        current = substitute(current, mapping)
    return current
