"""Pattern matching, graph_rewrite and the recorded trace."""

import linecache
import os

import pytest

import uopviz as uv
from uopviz import Ops, PatternMatcher, RewriteError, UOp, UPat, dtypes, graph_rewrite, traced_pass, tracing

idx = dtypes.index
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

double_add = PatternMatcher(
    [
        (UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("x"))), lambda x: x * 2),
    ]
)

fold_constants = PatternMatcher(
    [
        (
            UPat(Ops.ADD, src=(UPat.cvar("a"), UPat.cvar("b"))),
            lambda a, b: UOp.const(a.dtype, a.const_value + b.const_value),
            "fold constant add",
        ),
        (UPat(Ops.MUL, src=[UPat.var("x"), UPat.const(None, 1)]), lambda x: x, "x*1 -> x"),
    ]
)


def test_same_name_twice_must_bind_the_same_uop():
    r1, r2 = UOp.range(4), UOp.range(5)
    pattern = UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("x")))
    assert pattern.match(r1 + r1) == {"x": r1}
    assert pattern.match(r1 + r2) is None


def test_list_sources_match_any_order():
    r = UOp.range(4)
    pattern = UPat(Ops.MUL, src=[UPat.var("x"), UPat.cvar("c")])
    assert pattern.match(r * 3)["x"] is r
    assert pattern.match(3 * r)["x"] is r


def test_op_dtype_and_arg_filters():
    r = UOp.range(4)
    assert UPat(Ops.RANGE).match(r) is not None
    assert UPat(Ops.ADD).match(r) is None
    assert UPat(dtype=dtypes.float32).match(r) is None
    assert UPat(Ops.CONST, arg=(3, idx)).match(UOp.const(idx, 3)) is not None
    assert UPat.any(UPat(Ops.ADD), UPat(Ops.RANGE)).match(r) is not None


def test_repeated_pattern_and_any_length():
    a, b, c = UOp.range(2), UOp.range(3), UOp.range(4)
    sink = UOp(Ops.SINK, (a, b, c))
    assert UPat(Ops.SINK, src=UPat(Ops.RANGE)).match(sink) is not None
    assert UPat(Ops.SINK, src=(UPat(Ops.RANGE, name="first"),), allow_any_len=True).match(sink)["first"] is a
    assert UPat(Ops.SINK, src=(UPat(Ops.RANGE),)).match(sink) is None


def test_bottom_up_rewrite_reaches_fixed_point():
    x = UOp.const(idx, 1) + UOp.const(idx, 2)
    y = (x + UOp.const(idx, 3)) * 1
    assert graph_rewrite(y, fold_constants) is UOp.const(idx, 6)


def test_trace_records_steps_with_rule_location_and_graph():
    r = UOp.range(4)
    root = (r + r) + (r + r)
    with tracing() as trace:
        out = graph_rewrite(root, double_add, name="my pass")
    assert out is (r * 2) * 2
    assert trace.passes[-1].name == "my pass"
    steps = trace.passes[-1].steps
    assert len(steps) == 2
    first = steps[0]
    assert first.rule == "ADD(x, x)"
    assert first.before is r + r and first.after is r * 2
    assert first.graph is (r * 2) + (r * 2)
    assert steps[1].graph is out
    path, line = first.location.rsplit(":", 1)
    source_line = linecache.getline(os.path.join(ROOT, path) if not os.path.isabs(path) else path, int(line))
    assert "UPat(Ops.ADD" in source_line and "x * 2" in source_line


def test_named_rule_location_points_at_its_own_line():
    with tracing() as trace:
        graph_rewrite(UOp.const(idx, 1) + UOp.const(idx, 2), fold_constants, name="fold")
    step = trace.passes[-1].steps[0]
    assert step.rule == "fold constant add"
    path, line = step.location.rsplit(":", 1)
    assert "fold constant add" in linecache.getline(
        os.path.join(ROOT, path), int(line)
    ) or "UPat(Ops.ADD" in linecache.getline(os.path.join(ROOT, path), int(line))


def named_function_rule(x):
    return x * 2


def test_named_function_rule_uses_pattern_line():
    pm = PatternMatcher(
        [
            (UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("x"))), named_function_rule),  # the rule's line
        ]
    )
    r = UOp.range(3)
    with tracing() as trace:
        graph_rewrite(r + r, pm)
    step = trace.steps[0]
    assert step.rule == "named_function_rule"
    path, line = step.location.rsplit(":", 1)
    assert "the rule's line" in linecache.getline(os.path.join(ROOT, path), int(line))


def test_passes_nest_in_stages():
    r = UOp.range(4)
    with tracing() as trace:
        with traced_pass("Stage", r + r) as stage:
            mid = graph_rewrite(r + r, double_add, name="inner one")
            stage.output = graph_rewrite(mid + mid, double_add, name="inner two")
    assert [p.name for p in trace.passes] == ["Stage"]
    stage_trace = trace.passes[0]
    assert [p.name for p in stage_trace.passes] == ["inner one", "inner two"]
    assert len(stage_trace.steps) == 2
    assert stage_trace.steps[1].pass_name == "inner two"
    assert stage_trace.output is (r * 2) * 2


def test_hand_recorded_steps():
    r = UOp.range(4)
    with tracing() as trace:
        with traced_pass("Linearize", r) as rec:
            rec.step("put in order", r, r + 1, graph=r + 1)
            rec.output = r + 1
    step = trace.passes[0].steps[0]
    assert step.rule == "put in order" and step.graph is r + 1
    assert step.location.endswith(str(test_hand_recorded_steps.__code__.co_firstlineno + 4))


def test_no_trace_outside_tracing():
    r = UOp.range(4)
    with tracing() as trace:
        pass
    graph_rewrite(r + r, double_add)
    assert trace.passes == []


def test_rewrite_loop_is_a_clear_error():
    flip = PatternMatcher(
        [
            (
                UPat(Ops.ADD, src=(UPat.var("a"), UPat.var("b"))),
                lambda a, b: UOp(Ops.MUL, (a, b)),
                "add to mul",
            ),
            (
                UPat(Ops.MUL, src=(UPat.var("a"), UPat.var("b"))),
                lambda a, b: UOp(Ops.ADD, (a, b)),
                "mul to add",
            ),
        ]
    )
    with pytest.raises(RewriteError, match="rewrite loop"):
        graph_rewrite(UOp.range(3) + UOp.range(4), flip)


def test_rule_returning_non_uop_is_an_error():
    bad = PatternMatcher([(UPat(Ops.RANGE), lambda: 5)])
    with pytest.raises(RewriteError, match="returned int"):
        graph_rewrite(UOp.range(3), bad)


def test_top_down_sees_original_sources():
    seen = []

    def record(x):
        seen.append(x.op)

    pm = PatternMatcher([(UPat(Ops.MUL, name="x"), record)])
    r = UOp.range(3)
    graph_rewrite((r * 2) * 3, pm, bottom_up=False)
    assert seen[0] is Ops.MUL


def test_ctx_is_passed_to_rules_that_ask():
    pm = PatternMatcher([(UPat(Ops.RANGE, name="r"), lambda ctx, r: ctx.append(r) or None)])
    found = []
    graph_rewrite(UOp.range(3) + UOp.range(4), pm, ctx=found)
    assert len(found) == 2


def test_large_graph_rewrite():
    x = UOp.const(idx, 0)
    for _ in range(20_000):
        x = x + UOp.const(idx, 1) * 1
    out = graph_rewrite(x, fold_constants)
    assert out is UOp.const(idx, 20_000)
    assert uv.toposort([out]) == [out]


def test_a_trace_records_only_the_rewrites_of_the_thread_that_opened_it():
    """The tuner saves a session (tracing) while a worker thread lowers a kernel: neither trace may
    take the other's passes (they had closed out of order: 'passes must close in the order they opened')."""
    import threading

    twice = UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("x")))
    rules = PatternMatcher([(twice, lambda x: x * 2, "x+x -> x*2")])
    opened, other_done = threading.Event(), threading.Event()
    found: dict[str, list[str]] = {}

    def worker():
        with tracing() as trace:
            opened.set()
            with traced_pass("worker pass"):
                other_done.wait(10)
                three = UOp.const(dtypes.int32, 3)
                graph_rewrite(three + three, rules, name="in worker")
        found["worker"] = [p.name for p in trace.walk()]

    thread = threading.Thread(target=worker)
    thread.start()
    opened.wait(10)
    with tracing() as trace:
        x = UOp.buffer(4, dtypes.float32)
        graph_rewrite(x + x, rules, name="in main")
    other_done.set()
    thread.join(10)
    assert [p.name for p in trace.walk()] == ["in main"]
    assert found["worker"] == ["worker pass", "in worker"]


def test_substitute_replaces_a_key_whole_and_still_finds_what_is_reached_another_way():
    from uopviz.core.rewrite import substitute

    a, b = UOp.const(dtypes.float32, 1.0), UOp.const(dtypes.float32, 2.0)
    inner = UOp(Ops.ADD, (a, b))
    outer = UOp(Ops.MUL, (inner, a))  # a key with another key below it
    root = UOp(Ops.SINK, (outer, UOp(Ops.ADD, (inner, b))))  # ... which is also reached outside it
    new_inner, new_outer = UOp.const(dtypes.float32, 5.0), UOp.const(dtypes.float32, 7.0)
    out = substitute(root, {inner: new_inner, outer: new_outer})
    assert out.src[0] is new_outer  # replaced whole: not rebuilt from the new inner
    assert out.src[1] is UOp(Ops.ADD, (new_inner, b))
    assert substitute(root, {}) is root and substitute(root, {b: b}) is root


# a rule for a whole graph whose result holds what it matched (as Render's PROGRAM holds its LINEAR)
wrap_rules = PatternMatcher([
    (UPat(Ops.SINK, name="sink"), lambda sink: UOp(Ops.TUPLE, (sink,)), "wrap the SINK"),
])


def test_rewrite_root_tries_the_root_alone_and_records_each_firing():
    from uopviz.core.rewrite import rewrite_root

    x = UOp.const(dtypes.float32, 1.0)
    inner = UOp(Ops.SINK, (x,))
    root = UOp(Ops.SINK, (inner,))  # a SINK below the root: not rewritten
    with tracing() as trace:
        out = rewrite_root(root, wrap_rules, name="wrap")
    assert out is UOp(Ops.TUPLE, (root,))  # once: the TUPLE holding the SINK is not matched again
    (record,) = trace.passes
    assert record.name == "wrap" and record.matcher is wrap_rules and record.output is out
    (step,) = record.steps
    assert (step.rule, step.before, step.after, step.graph) == ("wrap the SINK", root, out, out)
    path, _, line = step.location.rpartition(":")
    assert step.location == wrap_rules.rules[0].location
    assert '"wrap the SINK"' in linecache.getline(os.path.join(ROOT, path), int(line))
    assert rewrite_root(out, wrap_rules) is out  # no rule for the new root: unchanged


def test_rewrite_root_rules_that_never_stop_are_a_rule_loop():
    from uopviz.core.rewrite import ROOT_REWRITE_LIMIT, rewrite_root

    retag = PatternMatcher([
        (UPat(Ops.SINK, name="k"), lambda k: UOp(Ops.SINK, k.src, k.arg, (k.tag or 0) + 1), "retag forever"),
    ])
    with pytest.raises(RewriteError, match=f"pass 'retagging': rules rewrote the SINK at the root "
                                           f"{ROOT_REWRITE_LIMIT} times over; last rule 'retag forever'"):
        rewrite_root(UOp(Ops.SINK, ()), retag, name="retagging")
