"""Why did a rule not fire?  Every rule of a matcher tried on one UOp, and where each stopped.

:func:`explain` takes a :class:`~uopviz.core.rewrite.PatternMatcher` and a UOp and returns an
:class:`Explanation`: for each rule whose pattern is written for this UOp's op (or for any op), a
:class:`RuleOutcome` saying what happened when the rule was tried, in the matcher's order:

``stopped``
    the pattern did not match; :attr:`RuleOutcome.stops` says where: the path into the UOp
    (``src[1].op``: the op of its second source), what the pattern wanted there and what the UOp
    had.  A pattern of alternatives (``UPat.any``) gives one stop per alternative (``any[1].op``);
    sources in any order (a list ``src``) give the stop of the ordering that matched furthest.
``declined``
    the pattern matched and the rule's function returned None (or the UOp itself: no change);
``rewrote``
    the function returned a replacement (its op and dtype in :attr:`RuleOutcome.message`);
``raised``
    the function, or a predicate of the pattern, raised (the message);
``needs context``
    the pattern matched but the function takes ``ctx``, which was not given: a pass's context (the
    kernel being built, a table filled as it goes) is not kept, so the function is not called.

Rules after the first one that rewrites (or raises) are marked with its name
(:attr:`RuleOutcome.earlier`): :meth:`PatternMatcher.rewrite` applies the first rule that rewrites,
so an earlier rule fires first, and an error stops the whole rewrite.
Rules written for other ops are only counted (:attr:`Explanation.other_rules`).

Pure: nothing is mutated and nothing is recorded (rule functions run under
:func:`~uopviz.core.rewrite.untraced`); the only code run is the patterns' predicates and the
functions of rules that take no context, as :func:`~uopviz.core.rewrite.graph_rewrite` runs them.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from uopviz.core.ops import Ops
from uopviz.core.rewrite import PatternMatcher, Rule, UPat, arg_matches, location_of, untraced
from uopviz.core.uop import UOp

#: What trying a rule on a UOp came to (see the module's docstring).
RuleStatus = Literal["stopped", "declined", "rewrote", "raised", "needs context"]
#: Longest text of an arg or a message an outcome keeps (a rule's arg can be a whole shape tracker).
TEXT_LIMIT = 120
#: How many of the other ops a summary names (the ops with the most rules first).
OTHER_OPS_SHOWN = 6


@dataclass(frozen=True)
class Stop:
    """Where a pattern stopped matching: ``path`` into the UOp (``op``, ``src[1].dtype``,
    ``src[0].any[1].op`` for the second alternative of a ``UPat.any`` at the first source), what the
    pattern ``wanted`` there and what the UOp ``had``."""

    path: str
    wanted: str
    had: str

    def describe(self) -> str:
        """One line: ``src[1].op: wanted CONST, had ADD``."""
        return f"{self.path}: wanted {self.wanted}, had {self.had}"

    def to_json(self) -> dict[str, str]:
        """The stop as the player shows it."""
        return {"path": self.path, "wanted": self.wanted, "had": self.had}


@dataclass(frozen=True)
class RuleOutcome:
    """One rule tried on the UOp: its position in the matcher (``index``), its name and ``file:line``
    as the trace writes them, the ``status``, where its pattern stopped (``stops``, for ``stopped``),
    a ``message`` (the error of ``raised``, the replacement of ``rewrote``), ``earlier``: the name
    of an earlier rule that decides this UOp first, rewriting it or (``earlier_raised``) raising, which
    stops the rewrite ('' when none does), and ``maybe_earlier``: an earlier rule that matched but
    needs the pass's context, so might fire first ('' when none)."""

    index: int
    rule: str
    location: str
    status: RuleStatus
    stops: tuple[Stop, ...] = ()
    message: str = ""
    earlier: str = ""
    earlier_raised: bool = False
    maybe_earlier: str = ""

    @property
    def fires(self) -> bool:
        """True for the rule a rewrite of this UOp applies: it rewrites and no earlier rule does."""
        return self.status == "rewrote" and not self.earlier

    def describe(self) -> str:
        """One line saying what happened, as a reader asks it ("why not?"): the rule, its location and
        :meth:`detail`."""
        return f"{self.rule} ({self.location}): {self.detail()}"

    def detail(self) -> str:
        """What happened to the rule, in words (what the player shows under its name)."""
        if self.status == "stopped":
            text = "pattern stopped at " + "; or ".join(stop.describe() for stop in self.stops)
        elif self.status == "declined":
            text = f"matched, but its function {self.message} (declined)"
        elif self.status == "rewrote":
            text = f"matched and rewrote it to {self.message}"
        elif self.status == "raised":
            text = f"raised {self.message}"
        else:
            text = "matched, but its function needs the pass's context to decide"
        if self.earlier:
            text += f"; an earlier rule {'raises' if self.earlier_raised else 'fires'} first ({self.earlier})"
        elif self.maybe_earlier and self.status != "stopped":
            text += f"; an earlier rule may fire first ({self.maybe_earlier}, which needs the context)"
        return text

    def to_json(self) -> dict[str, Any]:
        """The outcome as the player shows it."""
        return {
            "index": self.index,
            "rule": self.rule,
            "location": self.location,
            "status": self.status,
            "stops": [stop.to_json() for stop in self.stops],
            "message": self.message,
            "earlier": self.earlier,
            "earlier_raised": self.earlier_raised,
            "maybe_earlier": self.maybe_earlier,
            "fires": self.fires,
            "detail": self.detail(),
        }


@dataclass(frozen=True)
class Explanation:
    """Every rule of a matcher that could apply to one UOp (``op``), tried in order (``outcomes``);
    ``other_rules`` rules of the matcher are written for other ops: ``other_ops`` (op names, the ops
    with the most rules first; a summary names the first few)."""

    matcher: str
    op: str
    outcomes: tuple[RuleOutcome, ...]
    other_rules: int = 0
    other_ops: tuple[str, ...] = field(default=())

    @property
    def fired(self) -> RuleOutcome | None:
        """The rule that rewrites this UOp (the first that rewrites, unless one before it raises), or
        None."""
        return next((outcome for outcome in self.outcomes if outcome.fires), None)

    def summary(self) -> str:
        """One line: how many rules were tried, which fires, how many are for other ops."""
        counts = Counter(outcome.status for outcome in self.outcomes)
        tried = ", ".join(f"{count} {status}" for status, count in counts.items())
        fired = self.fired
        raised = next((o for o in self.outcomes if o.status == "raised" and not o.earlier), None)
        count = len(self.outcomes)
        head = (
            f"{_count(count, 'rule')} of {self.matcher} {'applies' if count == 1 else 'apply'} to {self.op}"
        )
        text = f"{head} ({tried})" if tried else head
        if fired:
            text += f"; {fired.rule} fires"
        else:
            text += f"; {raised.rule} raises (the rewrite stops there)" if raised else "; none fires"
        if self.other_rules:
            ops = ", ".join(self.other_ops[:OTHER_OPS_SHOWN]) + (
                ", ..." if len(self.other_ops) > OTHER_OPS_SHOWN else ""
            )
            are = "is" if self.other_rules == 1 else "are"
            text += f"; {_count(self.other_rules, 'more rule')} {are} for other ops ({ops})"
        return text

    def describe(self) -> str:
        """The summary and one line per rule tried."""
        return "\n".join([self.summary(), *("  " + outcome.describe() for outcome in self.outcomes)])

    def to_json(self) -> dict[str, Any]:
        """The explanation as the player shows it."""
        return {
            "matcher": self.matcher,
            "op": self.op,
            "summary": self.summary(),
            "outcomes": [outcome.to_json() for outcome in self.outcomes],
            "other_rules": self.other_rules,
            "other_ops": list(self.other_ops),
        }


def explain(matcher: PatternMatcher, uop: UOp, ctx: Any = None) -> Explanation:
    """Try every rule of ``matcher`` on ``uop`` and say what each did (see the module's docstring).

    ``ctx``: the context the rules' functions get, as :func:`graph_rewrite`'s ``ctx``; None means
    none is known, and a rule whose function takes one is then reported as ``needs context``.
    """
    if not isinstance(matcher, PatternMatcher):
        raise TypeError(f"explain needs a PatternMatcher, got {type(matcher).__name__}")
    if not isinstance(uop, UOp):
        raise TypeError(f"explain explains a UOp, got {type(uop).__name__}")
    outcomes: list[RuleOutcome] = []
    others: Counter[str] = Counter()
    other_rules = 0
    first_decided, first_unknown = None, ""  # the first rule that rewrites or raises; one needing ctx
    for index, rule in enumerate(matcher.rules):
        ops = pattern_ops(rule.pattern)
        if ops is not None and uop.op not in ops:
            other_rules += 1
            others.update(op.name for op in ops)
            continue
        outcome = replace(_try(index, rule, uop, ctx), maybe_earlier=first_unknown)
        if outcome.status != "stopped" and first_decided is not None:
            outcome = replace(
                outcome, earlier=first_decided.rule, earlier_raised=first_decided.status == "raised"
            )
        elif outcome.status in ("rewrote", "raised"):
            first_decided = outcome
        elif outcome.status == "needs context" and not first_unknown:
            first_unknown = rule.name
        outcomes.append(outcome)
    ranked = sorted(others.items(), key=lambda item: (-item[1], item[0]))  # most rules first, then by name
    other_ops = tuple(name for name, _ in ranked)
    return Explanation(matcher.name or "the matcher", uop.op.name, tuple(outcomes), other_rules, other_ops)


def pattern_ops(pattern: UPat) -> frozenset[Ops] | None:
    """The ops a pattern can match at its root (those of every alternative of a ``UPat.any``), or
    None when it matches any op."""
    if pattern.alternatives is None:
        return pattern.ops
    found: set[Ops] = set()
    for alternative in pattern.alternatives:
        ops = pattern_ops(alternative)
        if ops is None:
            return None
        found |= ops
    return frozenset(found)


def _try(index: int, rule: Rule, uop: UOp, ctx: Any) -> RuleOutcome:
    """One rule tried on ``uop``: its pattern walked, then (if it matched) its function called."""
    outcome = RuleOutcome(index, rule.name, rule.location, "stopped")
    try:
        walked = _walk(rule.pattern, uop, {}, "")
    except Exception as error:  # a predicate that raised: so would graph_rewrite
        return replace(outcome, status="raised", message=_error_text(error))
    if isinstance(walked, _Stopped):
        return replace(outcome, stops=walked.stops)
    if rule.wants_ctx and ctx is None:
        return replace(outcome, status="needs context")
    arguments = {**walked, "ctx": ctx} if rule.wants_ctx else walked
    try:
        with untraced():  # a rule that rewrites a piece with rules of its own records nothing here
            result = rule.function(**arguments)
    except Exception as error:
        return replace(outcome, status="raised", message=_error_text(error))
    if result is None or result is uop:
        said = "returned None" if result is None else "returned the UOp itself"
        return replace(outcome, status="declined", message=said)
    if not isinstance(result, UOp):
        message = f"RewriteError: returned {type(result).__name__}, not a UOp"
        return replace(outcome, status="raised", message=message)
    return replace(outcome, status="rewrote", message=_uop_text(result))


# ---------------------------------------------------------------------------------------------
# walking a pattern: uopviz.core.rewrite._match, step for step, saying where it stops


@dataclass(frozen=True)
class _Stopped:
    """A failed match: its stops, and how many pattern nodes matched before it (to pick, among the
    orderings of sources in any order, the one that went furthest)."""

    stops: tuple[Stop, ...]
    progress: int


def _walk(pattern: UPat, uop: UOp, bindings: dict[str, UOp], path: str) -> dict[str, UOp] | _Stopped:
    """The bindings if ``uop`` matches ``pattern`` (as ``_match`` gives them), else where it stopped;
    ``path`` is where ``uop`` sits in the UOp the rule was tried on."""
    if pattern.alternatives is not None:
        return _walk_alternatives(pattern.alternatives, uop, bindings, path)
    stop = _own_stop(pattern, uop, bindings, path)
    if stop is not None:
        return _Stopped((stop,), 0)
    src = pattern.src
    if isinstance(src, UPat):
        walked: dict[str, UOp] | _Stopped = bindings
        for i, s in enumerate(uop.src):
            walked = _walk(src, s, walked, _join(path, f"src[{i}]"))
            if isinstance(walked, _Stopped):
                return _Stopped(walked.stops, walked.progress + 1 + i)
        bindings = walked
    elif isinstance(src, tuple):
        walked = _walk_in_order(pattern, src, uop, bindings, path)
        if isinstance(walked, _Stopped):
            return walked
        bindings = walked
    elif src is not None:
        walked = _walk_any_order(src, uop, bindings, path)
        if isinstance(walked, _Stopped):
            return walked
        bindings = walked
    if pattern.name is not None:
        bindings[pattern.name] = uop
    return bindings


def _walk_alternatives(
    alternatives: tuple[UPat, ...], uop: UOp, bindings: dict[str, UOp], path: str
) -> dict[str, UOp] | _Stopped:
    """The first alternative that matches; else every alternative's stops."""
    stops: list[Stop] = []
    progress = 0
    for i, alternative in enumerate(alternatives):
        walked = _walk(alternative, uop, dict(bindings), _join(path, f"any[{i}]"))
        if not isinstance(walked, _Stopped):
            return walked
        stops.extend(walked.stops)
        progress = max(progress, walked.progress)
    return _Stopped(tuple(stops), progress)


def _walk_in_order(
    pattern: UPat, src: tuple[UPat, ...], uop: UOp, bindings: dict[str, UOp], path: str
) -> dict[str, UOp] | _Stopped:
    """Sources matched in order (a prefix of them with ``allow_any_len``)."""
    count = len(uop.src)
    if count < len(src) or (count != len(src) and not pattern.allow_any_len):
        wanted = f"{'at least ' if pattern.allow_any_len else ''}{_count(len(src), 'source')}"
        return _Stopped((Stop(_join(path, "src"), wanted, f"{count}"),), 1)
    walked: dict[str, UOp] | _Stopped = bindings
    for i, (sub, s) in enumerate(zip(src, uop.src, strict=False)):
        walked = _walk(sub, s, walked, _join(path, f"src[{i}]"))
        if isinstance(walked, _Stopped):
            return _Stopped(walked.stops, walked.progress + 1 + i)
    return walked


def _walk_any_order(
    src: list[UPat], uop: UOp, bindings: dict[str, UOp], path: str
) -> dict[str, UOp] | _Stopped:
    """Sources in any order (a commutative op): the first ordering that matches, else the stops of
    the ordering that matched furthest (paths name the UOp's real sources)."""
    if len(uop.src) != len(src):
        return _Stopped(
            (Stop(_join(path, "src"), f"{_count(len(src), 'source')} (any order)", f"{len(uop.src)}"),), 1
        )
    best: _Stopped | None = None
    for order in itertools.permutations(range(len(uop.src))):
        walked: dict[str, UOp] | _Stopped = dict(bindings)
        for matched, (sub, i) in enumerate(zip(src, order, strict=True)):
            walked = _walk(sub, uop.src[i], walked, _join(path, f"src[{i}]"))
            if isinstance(walked, _Stopped):
                walked = _Stopped(walked.stops, walked.progress + 1 + matched)
                break
        if not isinstance(walked, _Stopped):
            return walked
        if best is None or walked.progress > best.progress:
            best = walked
    assert best is not None  # no sources: the one empty ordering matched above
    return best


def _own_stop(pattern: UPat, uop: UOp, bindings: dict[str, UOp], path: str) -> Stop | None:
    """Where ``uop`` itself fails ``pattern`` (op, dtype, arg, a name bound before, the predicate),
    checked in ``_match``'s order; None when it passes them."""
    if pattern.ops is not None and uop.op not in pattern.ops:
        return Stop(_join(path, "op"), " or ".join(sorted(op.name for op in pattern.ops)), uop.op.name)
    if (
        pattern.dtypes is not None
        and uop.dtype not in pattern.dtypes
        and uop.dtype.scalar not in pattern.dtypes
    ):
        wanted = " or ".join(sorted(str(dtype) for dtype in pattern.dtypes))
        return Stop(_join(path, "dtype"), wanted, str(uop.dtype))
    if pattern.arg is not None and not arg_matches(uop.arg, pattern.arg):
        return Stop(_join(path, "arg"), _short(repr(pattern.arg)), _short(repr(uop.arg)))
    bound = bindings.get(pattern.name) if pattern.name is not None else None
    if bound is not None and bound is not uop:
        wanted = f"the same UOp as {pattern.name!r} ({bound.op.name}, bound earlier)"
        return Stop(path or "(the UOp)", wanted, f"another {uop.op.name}")
    if pattern.predicate is not None and not pattern.predicate(uop):
        return Stop(_join(path, "predicate"), f"{_callable_text(pattern.predicate)} to hold", "False")
    return None


def _count(number: int, noun: str) -> str:
    """``1 rule``, ``3 rules``."""
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _join(path: str, part: str) -> str:
    return f"{path}.{part}" if path else part


def _short(text: str) -> str:
    return text if len(text) <= TEXT_LIMIT else text[: TEXT_LIMIT - 1] + "…"


def _callable_text(function: Callable) -> str:
    """A predicate as a reader finds it: its name (``<lambda>``) and ``file:line``."""
    name = getattr(function, "__name__", type(function).__name__)
    try:
        return f"{name} ({location_of(function)})"
    except AttributeError:  # a callable object without code (a functools.partial, a builtin)
        return name


def _error_text(error: Exception) -> str:
    return _short(f"{type(error).__name__}: {error}")


def _uop_text(uop: UOp) -> str:
    """A replacement in a few words: op, dtype and (short) arg."""
    arg = "" if uop.arg is None else " " + _short(repr(uop.arg))
    return f"{uop.op.name} {uop.dtype}{arg}"


__all__ = ["Explanation", "RuleOutcome", "RuleStatus", "Stop", "explain", "pattern_ops"]
