"""Pattern rewriting of UOp graphs, with a recorded trace of every step.

Rules are data: a :class:`PatternMatcher` holds ``(UPat, function)`` pairs (optionally with a
readable name as a third element).  :func:`graph_rewrite` applies them to a whole graph until
nothing matches.  Inside ``with tracing() as trace:`` every applied rule is recorded as a
:class:`RewriteStep` with the rule's name, the ``file:line`` where the rule is written, the
UOp before and after, and (computed on demand) the whole graph right after the step.

Tracing off costs one list test per applied rule; nothing is recorded.  This module holds the
patterns, the rules and the rewrite engine; the trace (:func:`tracing`, :func:`traced_pass`,
:class:`Trace` ...) is :mod:`uopviz.core.rewrite_trace`'s, re-exported here.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from uopviz.core.dtype import DType
from uopviz.core.errors import UopvizError
from uopviz.core.ops import Ops
from uopviz.core.rewrite_trace import (
    GraphFrame,
    PassRecorder,
    PassTrace,
    RewriteStep,
    Trace,
    call_site,
    is_tracing,
    location_of,
    record_rule_step,
    short_path,
    traced_pass,
    tracing,
    untraced,
)
from uopviz.core.substitution import frontier_graph, substitute, substitute_closure
from uopviz.core.uop import UOp


class RewriteError(UopvizError, RuntimeError):
    """A rewrite that cannot finish: a rule loop, or a rule that returned something not a UOp."""


# ---------------------------------------------------------------------------------------------
# patterns



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
        self.location = call_site()
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
    if arg is not None and not arg_matches(uop.arg, arg):
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


def arg_matches(actual: Any, wanted: Any) -> bool:
    """True when a UOp's arg ``actual`` is the arg ``wanted`` by a pattern: the same object, or equal
    (an arg that cannot be compared with it does not match)."""
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


#: numbers the structural matchers: each notes the UOps none of its rules applies to under a key of its own
_structural_matchers = itertools.count()


class PatternMatcher:
    """An ordered list of rules with dispatch by op.  The first rule whose pattern matches and
    whose function returns a UOp wins.

    ``structural``: every rule decides from the matched UOp's graph alone (no ``ctx``, no outside
    state), so that no rule applies to a UOp is a fact of the UOp: :func:`graph_rewrite` notes it on
    the UOp (without ``ctx``) and does not try the rules on it again.  The index simplifier runs over
    every kernel many times (once per opt applied, per lane address), nearly all of it already
    simplified."""

    def __init__(self, rules: Sequence[tuple | Rule], name: str | None = None, structural: bool = False):
        self.rules: list[Rule] = [_make_rule(r) for r in rules]
        self.name = name
        self.structural = structural
        self.fixed_point_key = f"_no_rule_of_matcher_{next(_structural_matchers)}" if structural else None
        self._by_op: dict[Ops, list[Rule]] = {}
        for op in Ops:
            self._by_op[op] = [r for r in self.rules if r.pattern.ops is None or op in r.pattern.ops]

    def __add__(self, other: PatternMatcher) -> PatternMatcher:
        return PatternMatcher(self.rules + other.rules, name=self.name or other.name,
                              structural=self.structural and other.structural)

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


#: how many times in a row root rules may rewrite a graph's root before it is a rule loop
ROOT_REWRITE_LIMIT = 100


def rewrite_root(root: UOp, matcher: PatternMatcher, ctx: Any = None, name: str | None = None) -> UOp:
    """``root`` rewritten by ``matcher`` at the root alone, until no rule applies, as a traced pass
    ``name``: for rules that see a whole graph (a kernel's SINK becomes its LINEAR, a LINEAR its
    PROGRAM, a program's outputs its FUNCTION), each firing a step named after its rule and the line
    it is written on, as :func:`graph_rewrite`'s do.  The root alone, not a walk: such a rule's
    result may hold what it matched (``PROGRAM(LINEAR, SOURCE)``), which a walk would rewrite again,
    and its step is replayed as one replacement of the whole graph."""
    pass_name = name or matcher.name or "rewrite root"
    with traced_pass(pass_name, root, matcher) as record:
        current = root
        for _ in range(ROOT_REWRITE_LIMIT):
            found = matcher.rewrite(current, ctx)
            if found is None:
                break
            after, rule = found
            record.step(rule.name, current, after, location=rule.location)
            current = after
        else:
            raise RewriteError(f"pass {pass_name!r}: rules rewrote the {current.op.name} at the root "
                               f"{ROOT_REWRITE_LIMIT} times over; last rule {rule.name!r} ({rule.location})")
        record.output = current
    return current


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
        # where no rule applying to a UOp is noted on it (a structural matcher, no ctx)
        self.fixed_point_key = matcher.fixed_point_key if ctx is None else None
        self.chain: dict[UOp, str] = {}  # nodes waiting for their replacement's result -> rule name

    def _apply(self, uop: UOp) -> UOp | None:
        fixed_point_key = self.fixed_point_key
        if fixed_point_key is not None and fixed_point_key in uop.__dict__:
            return None
        found = self.matcher.rewrite(uop, self.ctx)
        if found is None:
            if fixed_point_key is not None:
                uop.__dict__[fixed_point_key] = True
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
            record_rule_step(rule.name, rule.location, uop, result)
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


__all__ = [
    "ROOT_REWRITE_LIMIT", "GraphFrame", "PassRecorder", "PassTrace", "PatternMatcher", "RewriteError",
    "RewriteStep", "Rule", "Trace", "UPat", "arg_matches", "frontier_graph", "graph_rewrite", "is_tracing",
    "location_of", "rewrite_root", "short_path", "substitute", "substitute_closure", "traced_pass",
    "tracing", "untraced",
]
