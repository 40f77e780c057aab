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
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from uopviz.core.dtype import DType
from uopviz.core.ops import Ops
from uopviz.core.uop import UOp, toposort


class RewriteError(RuntimeError):
    """A rewrite that cannot finish: a rule loop, or a rule that returned something not a UOp."""


# ---------------------------------------------------------------------------------------------
# patterns


def _caller_location(depth: int = 2) -> str:
    frame = sys._getframe(depth)
    return f"{_short_path(frame.f_code.co_filename)}:{frame.f_lineno}"


def _short_path(path: str) -> str:
    """Paths inside the package are written from the package root (``uopviz/core/symbolic.py``)."""
    marker = os.sep + "uopviz" + os.sep
    index = path.rfind(marker)
    return path[index + 1 :] if index >= 0 else path


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
        lambda_location = f"{_short_path(code.co_filename)}:{code.co_firstlineno}"
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


@dataclass(eq=False)
class RewriteStep:
    """One applied rule: which, where it is written, what it matched and what replaced it."""

    pass_name: str
    rule: str
    location: str
    before: UOp
    after: UOp
    index: int
    _owner: PassTrace = field(repr=False)

    @property
    def graph(self) -> UOp:
        """The whole graph (the pass's root) right after this step."""
        return self._owner.graph_after(self)


@dataclass(eq=False)
class PassTrace:
    """The record of one pass (or of a stage grouping several passes): its input, output, steps,
    nested passes and duration."""

    name: str
    input: UOp | None = None
    output: UOp | None = None
    steps: list[RewriteStep] = field(default_factory=list)
    passes: list[PassTrace] = field(default_factory=list)
    duration_s: float = 0.0
    _own_steps: list[RewriteStep] = field(default_factory=list, repr=False)
    _graph_memo: dict[int, UOp] = field(default_factory=dict, repr=False)
    _explicit_graphs: dict[int, UOp] = field(default_factory=dict, repr=False)

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

    def graph_after(self, step: RewriteStep) -> UOp:
        """Replay the substitutions up to ``step`` on the pass's input (memoised)."""
        owner = self._owner_of(step)
        return owner._replay(step)

    def _owner_of(self, step: RewriteStep) -> PassTrace:
        for candidate in self.walk():
            if any(s is step for s in candidate._own_steps):
                return candidate
        return self

    def _replay(self, step: RewriteStep) -> UOp:
        position = next(i for i, s in enumerate(self._own_steps) if s is step)
        if position in self._explicit_graphs:
            return self._explicit_graphs[position]
        if position in self._graph_memo:
            return self._graph_memo[position]
        if self.input is None:
            return step.after
        substitution: dict[UOp, UOp] = {}
        for earlier in self._own_steps[: position + 1]:
            substitution[earlier.before] = earlier.after
        # start from the latest replayed graph before this step (it already holds every earlier
        # substitution): stepping through a pass then costs one substitution per step, not one per
        # link of the whole chain of rewrites so far
        start = next(
            (self._graph_memo[p] for p in range(position - 1, -1, -1) if p in self._graph_memo), self.input
        )
        graph = substitute_closure(start, substitution)
        self._graph_memo[position] = graph
        return graph


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
    def _begin(self, name: str, root: UOp | None) -> PassTrace:
        record = PassTrace(name, input=root)
        (self._open[-1].passes if self._open else self.passes).append(record)
        self._open.append(record)
        return record

    def _end(self, record: PassTrace, output: UOp | None) -> None:
        record.output = output
        popped = self._open.pop()
        assert popped is record, "passes must close in the order they opened"

    def _record(
        self, rule_name: str, location: str, before: UOp, after: UOp, graph: UOp | None = None
    ) -> RewriteStep:
        innermost = self._open[-1]
        step = RewriteStep(
            innermost.name, rule_name, location, before, after, len(innermost._own_steps), innermost
        )
        if graph is not None:
            innermost._explicit_graphs[len(innermost._own_steps)] = graph
        innermost._own_steps.append(step)
        for record in self._open:
            record.steps.append(step)
        return step


_active_traces: list[Trace] = []


@contextmanager
def tracing() -> Iterator[Trace]:
    """Record every rewrite step made inside the block into the yielded :class:`Trace`."""
    trace = Trace()
    _active_traces.append(trace)
    try:
        yield trace
    finally:
        _active_traces.remove(trace)


def is_tracing() -> bool:
    """True inside a ``tracing()`` block."""
    return bool(_active_traces)


@contextmanager
def traced_pass(name: str, root: UOp | None = None) -> Iterator[PassRecorder]:
    """Group the rewrites made inside the block as one named pass (a pipeline stage, say).

    The yielded recorder's ``output`` must be set to the pass's result; passes that transform
    without rules call ``recorder.step(...)`` to record what they did.
    """
    recorder = PassRecorder(name, root)
    started = time.perf_counter()
    records = [trace._begin(name, root) for trace in _active_traces]
    try:
        yield recorder
    finally:
        for trace, record in zip(_active_traces, records, strict=False):
            record.duration_s = time.perf_counter() - started
            trace._end(record, recorder.output)


class PassRecorder:
    """Handle of an open pass: set ``output``; record hand-made steps with :meth:`step`."""

    def __init__(self, name: str, root: UOp | None):
        self.name = name
        self.output: UOp | None = root

    def step(
        self, rule: str, before: UOp, after: UOp, graph: UOp | None = None, location: str | None = None
    ) -> None:
        """Record one transformation made without a pattern rule (``location``: where it is coded,
        defaulting to the caller's line)."""
        if not _active_traces:
            return
        where = location or _caller_location()
        for trace in _active_traces:
            trace._record(rule, where, before, after, graph)


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
    with traced_pass(pass_name, root) as recorder:
        result = _Rewriter(matcher, ctx, bool(_active_traces), max_steps, pass_name).run(root, bottom_up)
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
            for trace in _active_traces:
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
    for u in toposort([root]):
        if u in mapping:
            new[u] = mapping[u]
            continue
        src = tuple(new[s] for s in u.src)
        new[u] = u if all(a is b for a, b in zip(src, u.src, strict=True)) else UOp(u.op, src, u.arg, u.tag)
    return new[root]


def substitute_closure(root: UOp, mapping: dict[UOp, UOp]) -> UOp:
    """Apply ``mapping`` until no key is left in the graph: what a sequence of rewrite steps did."""
    current = root
    for _ in range(len(mapping) + 1):
        present = set(current.toposort())
        if not any(key in present for key in mapping):
            return current
        current = substitute(current, mapping)
    return current
