"""Why a rule did not fire (uopviz.core.rewrite_explain): every rule of a matcher tried on one UOp,
where each pattern stopped, and what each matched rule's function did; checked on hand-built
matchers and against a real pipeline stage's matcher on a real kernel."""

from __future__ import annotations

import sys

import pytest
from mulacc_program import mulacc_program

import uopviz as uv
from uopviz import Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite, tracing
from uopviz.core.rewrite import location_of
from uopviz.core.rewrite_explain import Explanation, Stop, explain, pattern_ops

idx = dtypes.index


def _here() -> str:
    """``file:line`` of the caller's line, as the trace writes a rule's location."""
    frame = sys._getframe(1)
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


def _by_rule(explanation: Explanation) -> dict:
    return {outcome.rule: outcome for outcome in explanation.outcomes}


def test_stops_at_the_op_of_a_source():
    r = UOp.range(4)
    matcher = PatternMatcher(
        [(UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar("c"))), lambda x, c: x, "x + const")]
    )
    outcome = explain(matcher, r + r).outcomes[0]
    assert outcome.status == "stopped"
    assert outcome.stops == (Stop("src[1].op", "CONST", "RANGE"),)
    assert outcome.describe().endswith("pattern stopped at src[1].op: wanted CONST, had RANGE")


def test_stops_at_the_root_op_of_a_generic_rule_and_at_a_nested_source():
    r = UOp.range(4)
    matcher = PatternMatcher(
        [
            (
                UPat(name="x", src=(UPat(Ops.MUL, src=(UPat.var("a"), UPat(Ops.RANGE))), UPat.var("b"))),
                lambda x, a, b: None,
            ),
        ]
    )
    outcome = explain(matcher, r * 2 + r).outcomes[0]  # MUL(RANGE, CONST): its second source is a CONST
    assert outcome.stops == (Stop("src[0].src[1].op", "RANGE", "CONST"),)


def test_stops_at_the_dtype_and_at_the_arg():
    r = UOp.range(4)
    matcher = PatternMatcher(
        [
            (UPat(Ops.ADD, dtype=dtypes.float32), lambda: None, "float add"),
            (UPat(Ops.ADD, src=(UPat.var("x"), UPat(Ops.CONST, arg=(2, idx)))), lambda x: x, "x + 2"),
        ]
    )
    outcomes = _by_rule(explain(matcher, r + 1))
    assert outcomes["float add"].stops == (Stop("dtype", "dtypes.float32", "dtypes.index"),)
    assert outcomes["x + 2"].stops == (Stop("src[1].arg", repr((2, idx)), repr((1, idx))),)


def test_stops_at_the_number_of_sources_and_at_a_name_bound_twice_and_at_a_predicate():
    r, s = UOp.range(4), UOp.range(5)
    positive = lambda u: u.const_value > 0  # noqa: E731 (a predicate as rules write them)
    matcher = PatternMatcher(
        [
            (UPat(Ops.ADD, src=(UPat.var("x"),)), lambda x: x, "one source"),
            (UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("x"))), lambda x: x * 2, "x + x"),
            (
                UPat(Ops.ADD, src=(UPat.var("x"), UPat(Ops.CONST, predicate=positive))),
                lambda x: x,
                "x + positive",
            ),
        ]
    )
    outcomes = _by_rule(explain(matcher, r + s))
    assert outcomes["one source"].stops == (Stop("src", "1 source", "2"),)
    assert outcomes["x + x"].stops == (
        Stop("src[1]", "the same UOp as 'x' (RANGE, bound earlier)", "another RANGE"),
    )
    negative = _by_rule(explain(matcher, r + (-3)))["x + positive"]
    assert negative.stops == (
        Stop("src[1].predicate", f"<lambda> ({location_of(positive)}) to hold", "False"),
    )


def test_declined_rewrote_raised_needs_context_and_the_rule_that_fires_first():
    r = UOp.range(4)
    matcher = PatternMatcher(
        [
            (UPat(Ops.ADD, name="a"), lambda a: None, "declines"),
            (UPat(Ops.ADD, name="a"), lambda a: a, "returns itself"),
            (UPat(Ops.ADD, name="a"), lambda a: a.src[0], "first source"),
            (UPat(Ops.ADD, name="a"), lambda a: 1 // 0, "divides by zero"),
            (UPat(Ops.ADD, name="a"), lambda a: "text", "returns text"),
            (UPat(Ops.ADD, name="a"), lambda a, ctx: ctx[a], "from the context"),
            (UPat(Ops.ADD, name="a"), lambda a: a.src[1], "second source"),
            (UPat(Ops.ADD, dtype=dtypes.float32), lambda: None, "float add"),
        ],
        name="hand-built",
    )
    explanation = explain(matcher, r + 1)
    outcomes = _by_rule(explanation)
    assert [o.status for o in explanation.outcomes] == [
        "declined",
        "declined",
        "rewrote",
        "raised",
        "raised",
        "needs context",
        "rewrote",
        "stopped",
    ]
    assert outcomes["divides by zero"].message == "ZeroDivisionError: integer division or modulo by zero"
    assert outcomes["returns text"].message == "RewriteError: returned str, not a UOp"
    assert outcomes["declines"].detail() == "matched, but its function returned None (declined)"
    assert (
        outcomes["returns itself"].detail() == "matched, but its function returned the UOp itself (declined)"
    )
    assert outcomes["first source"].message == f"RANGE dtypes.index {r.arg!r}"
    assert outcomes["first source"].fires and explanation.fired is outcomes["first source"]
    # what graph_rewrite applies is what the explanation says fires
    assert matcher.rewrite(r + 1, None)[1].name == "first source"
    for later in ("divides by zero", "returns text", "from the context", "second source"):
        assert outcomes[later].earlier == "first source" and not outcomes[later].fires
        assert outcomes[later].describe().endswith("an earlier rule fires first (first source)")
    assert outcomes["float add"].earlier == ""  # a rule that does not match is not shadowed
    assert explanation.summary() == (
        "8 rules of hand-built apply to ADD (2 declined, 2 rewrote, 2 raised, "
        "1 needs context, 1 stopped); first source fires"
    )


def test_a_rule_that_raises_first_stops_the_rewrite():
    r = UOp.range(4)
    matcher = PatternMatcher(
        [
            (UPat(Ops.ADD, name="a"), lambda a: 1 // 0, "divides by zero"),
            (UPat(Ops.ADD, name="a"), lambda a: a.src[0], "first source"),
        ],
        name="raising",
    )
    explanation = explain(matcher, r + 1)
    later = explanation.outcomes[1]
    assert later.status == "rewrote" and later.earlier == "divides by zero" and later.earlier_raised
    assert explanation.fired is None and not later.fires
    assert later.describe().endswith("an earlier rule raises first (divides by zero)")
    assert explanation.summary().endswith("; divides by zero raises (the rewrite stops there)")
    with pytest.raises(ZeroDivisionError):  # as graph_rewrite does
        matcher.rewrite(r + 1, None)


def test_a_rule_needing_a_context_runs_when_one_is_given():
    r = UOp.range(4)
    matcher = PatternMatcher([(UPat(Ops.ADD, name="a"), lambda a, ctx: ctx.get(a), "looked up")])
    assert explain(matcher, r + 1).outcomes[0].status == "needs context"
    assert explain(matcher, r + 1, ctx={}).outcomes[0].status == "declined"
    given = explain(matcher, r + 1, ctx={r + 1: r}).outcomes[0]
    assert given.status == "rewrote" and given.fires


def test_a_rule_after_one_needing_a_context_may_be_preceded():
    r = UOp.range(4)
    matcher = PatternMatcher(
        [
            (UPat(Ops.ADD, name="a"), lambda a, ctx: None, "needs ctx"),
            (UPat(Ops.ADD, name="a"), lambda a: a.src[0], "first source"),
        ]
    )
    outcome = explain(matcher, r + 1).outcomes[1]
    assert outcome.maybe_earlier == "needs ctx" and outcome.fires
    assert outcome.describe().endswith("an earlier rule may fire first (needs ctx, which needs the context)")


def test_any_alternatives_give_a_stop_each_and_match_when_one_does():
    r = UOp.range(4)
    matcher = PatternMatcher(
        [
            (
                UPat.any(
                    UPat(Ops.MUL, src=(UPat.var("x"), UPat.cvar("c"))),
                    UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("x"))),
                ),
                lambda x, c=None: x,
                "x*c or x+x",
            ),
        ]
    )
    stopped = explain(matcher, r + 1).outcomes[0]
    assert stopped.stops == (
        Stop("any[0].op", "MUL", "ADD"),
        Stop("any[1].src[1]", "the same UOp as 'x' (RANGE, bound earlier)", "another CONST"),
    )
    assert explain(matcher, r + r).outcomes[0].status == "rewrote"
    assert explain(matcher, r * 3).outcomes[0].status == "rewrote"
    assert pattern_ops(matcher.rules[0].pattern) == frozenset({Ops.MUL, Ops.ADD})
    # an alternation is for its alternatives' ops: on a SUB it is one of the rules for other ops
    other = explain(matcher, r - 1)
    assert other.outcomes == () and other.other_rules == 1 and other.other_ops == ("ADD", "MUL")
    assert (
        other.summary()
        == "0 rules of the matcher apply to SUB; none fires; 1 more rule is for other ops (ADD, MUL)"
    )


def test_sources_in_any_order_stop_where_the_best_ordering_stopped():
    r, s = UOp.range(4), UOp.range(5)
    matcher = PatternMatcher(
        [
            (
                UPat(Ops.ADD, src=[UPat(Ops.MUL, src=(UPat.var("a"), UPat.cvar("c"))), UPat(Ops.RANGE)]),
                lambda a, c: a,
                "mul + range",
            ),
        ]
    )
    # MUL(RANGE, RANGE) + RANGE: the MUL is source 0, and its second source is not a CONST
    outcome = explain(matcher, r * s + r).outcomes[0]
    assert outcome.stops == (Stop("src[0].src[1].op", "CONST", "RANGE"),)
    # with the MUL second, the path names the UOp's real source
    swapped = UOp(Ops.ADD, (r, r * s))
    assert explain(matcher, swapped).outcomes[0].stops == (Stop("src[1].src[1].op", "CONST", "RANGE"),)
    assert explain(matcher, UOp(Ops.ADD, (r, r * 2))).outcomes[0].status == "rewrote"


def test_rules_for_other_ops_are_counted_not_listed():
    r = UOp.range(4)
    matcher = PatternMatcher(
        [
            (UPat(Ops.MUL), lambda: None),
            (UPat(Ops.MUL), lambda: None),
            (UPat((Ops.SUB, Ops.MAX)), lambda: None),
            (UPat(Ops.ADD, name="a"), lambda a: None, "add"),
        ],
        name="mixed",
    )
    explanation = explain(matcher, r + 1)
    assert [o.rule for o in explanation.outcomes] == ["add"]
    assert explanation.other_rules == 3 and explanation.other_ops == ("MUL", "MAX", "SUB")
    assert explanation.summary().endswith("none fires; 3 more rules are for other ops (MUL, MAX, SUB)")


def test_names_and_locations_are_the_traces():
    r = UOp.range(4)
    line = _here().rsplit(":", 1)[1]
    matcher = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("x"))), lambda x: x * 2)])
    with tracing() as trace:
        graph_rewrite(r + r, matcher, name="double")
    step = trace.passes[0].steps[0]
    outcome = explain(matcher, r + r).outcomes[0]
    assert (outcome.rule, outcome.location) == (step.rule, step.location)
    assert outcome.location.endswith(f"test_rewrite_explain.py:{int(line) + 1}")
    assert trace.passes[0].matcher is matcher and trace.passes[0].matchers() == [matcher]


def test_explaining_is_pure_and_records_nothing():
    r = UOp.range(4)
    inner = PatternMatcher([(UPat(Ops.ADD, name="a"), lambda a: a.src[0])])
    matcher = PatternMatcher(
        [(UPat(Ops.MUL, name="m"), lambda m: graph_rewrite(m.src[0] + 1, inner), "nested rewrite")]
    )
    with tracing() as trace:
        outcome = explain(matcher, r * 2).outcomes[0]
    assert outcome.status == "rewrote" and trace.passes == []


def test_bad_arguments_say_what_is_wrong():
    with pytest.raises(TypeError, match="explain needs a PatternMatcher, got list"):
        explain([], UOp.range(4))
    with pytest.raises(TypeError, match="explain explains a UOp, got int"):
        explain(PatternMatcher([]), 3)


@pytest.fixture(scope="module")
def program() -> uv.Program:
    """The tour's program on C, whose instruction selection fuses ADD(MUL) into MULACC."""
    return mulacc_program()


def test_a_pipeline_stage_gives_its_matchers(program):
    stage = program.trace.find("Instruction Selection")
    assert stage.matcher is None
    assert [m.name for m in stage.matchers()] == ["accumulators", "instruction selection"]
    rangeify = program.trace.find("Rangeify").matchers()
    assert len({m.name for m in rangeify}) == len(rangeify)  # a matcher used for every kernel counts once
    assert [m.name for m in program.trace.find("Linearize").matchers()] == ["linearize"]


def test_a_real_stage_matcher_agrees_with_the_rewrite_on_every_node(program):
    selection = program.trace.find("instruction selection")
    matcher = selection.matcher
    fused = 0
    for uop in selection.input.toposort():
        explanation = explain(matcher, uop)
        applied = matcher.rewrite(uop, None)
        fired = explanation.fired
        assert (fired.rule if fired else None) == (applied[1].name if applied else None), uop.op
        if fired is not None:
            fused += 1
            assert fired.rule == "ADD(MUL(a, b), c) → MULACC(a, b, c)" and fired.message.startswith("MULACC")
            assert fired.location == applied[1].location and fired.location.startswith(
                "uopviz/passes/isel.py:"
            )
    assert fused == sum(step.rule == "ADD(MUL(a, b), c) → MULACC(a, b, c)" for step in selection.steps) == 4
    # the bias add, of two loads: the fusion (sources in any order) stopped at its first source
    add = next(
        u for u in selection.input.toposort() if u.op is Ops.ADD and {s.op for s in u.src} == {Ops.LOAD}
    )
    explanation = explain(matcher, add)
    fusion = _by_rule(explanation)["ADD(MUL(a, b), c) → MULACC(a, b, c)"]
    assert explanation.summary() == (
        "2 rules of instruction selection apply to ADD (1 stopped, 1 declined); none fires; 16 more rules "
        "are for other ops (GEP, BITCAST, COS, EXP, EXP2, LOAD, ...)"
    )
    assert fusion.stops == (Stop("src[0].op", "MUL", "LOAD"),)


def test_every_pattern_of_a_compile_stops_exactly_where_matching_fails(program):
    """Walking a pattern to say where it stops matches exactly what ``UPat.match`` matches: every rule
    of every pass of a real compile, tried on every node of that pass's input."""
    tried = 0
    for record in program.trace.walk():
        if record.matcher is None or record.input is None:
            continue
        for uop in record.input.toposort():
            for outcome in explain(record.matcher, uop).outcomes:
                pattern = record.matcher.rules[outcome.index].pattern
                assert (outcome.status == "stopped") == (pattern.match(uop) is None), (outcome.rule, uop.op)
                assert (outcome.status == "stopped") == bool(outcome.stops)
                tried += 1
    assert tried > 200  # rules applicable to the node's op (276 when written)


def test_no_rule_fires_anywhere_on_a_rewrite_passs_output(program):
    """graph_rewrite stops at a fixed point, so on every node of its output each rule stops, declines
    or needs a context: the explanation of a node of a pass's last step names no rule that fires."""
    passes = [record for record in program.trace.walk() if record.matcher is not None]
    assert len(passes) >= 8
    for record in passes:
        for uop in record.output.toposort():
            assert explain(record.matcher, uop).fired is None, (record.name, uop.op)
