"""Whole graphs of a trace at every step: hand-recorded steps, nested passes put back in their
stage's graph, helper passes inside a rule, node-by-node rebuilds (frontier_graph), untraced()."""

from __future__ import annotations

import pytest

from uopviz import Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite, traced_pass, tracing
from uopviz.core.rewrite import frontier_graph, substitute, untraced

idx = dtypes.index
double_add = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("x"))), lambda x: x * 2, "x+x")])


def lanes(count: int) -> UOp:
    return UOp(Ops.VECTORIZE, tuple(UOp.const(idx, i) for i in range(count)))


@pytest.mark.parametrize("size", [2, 5])
def test_a_hand_step_whose_after_holds_its_before_is_replayed_once(size):
    r = UOp.range(size)
    body = UOp(Ops.SINK, (r + r,))
    wrapped = UOp(Ops.SINK, (body, r))  # like PROGRAM(LINEAR, SOURCE): the result holds the input
    with tracing() as trace:
        with traced_pass("wrap", body) as record:
            record.step("wrap it", body, wrapped)
            record.output = wrapped
    step = trace.passes[0].steps[0]
    assert step.graph is wrapped
    assert trace.passes[0].graph_before(step) is body


@pytest.mark.parametrize("sizes", [(3, 4), (7, 2)])
def test_a_stage_shows_its_nested_passes_in_its_whole_graph(sizes):
    a, b = UOp.range(sizes[0]), UOp.range(sizes[1])
    left, right = (a + a) + (a + a), b + b
    root = UOp(Ops.SINK, (left, right))
    with tracing() as trace:
        with traced_pass("Stage", root) as stage:
            new_left = graph_rewrite(left, double_add, name="left part")
            graph = substitute(root, {left: new_left})
            new_right = graph_rewrite(right, double_add, name="right part")
            stage.output = substitute(graph, {right: new_right})
    stage_trace = trace.passes[0]
    steps = stage_trace.steps
    assert [s.pass_name for s in steps] == ["left part", "left part", "right part"]
    # each step's own pass shows its part; the stage shows the whole graph with that part in place
    assert steps[0].graph is (a * 2) + (a * 2)
    assert stage_trace.graph_after(steps[0]) is UOp(Ops.SINK, ((a * 2) + (a * 2), right))
    assert stage_trace.graph_before(steps[0]) is root
    assert stage_trace.graph_after(steps[1]) is UOp(Ops.SINK, ((a * 2) * 2, right))
    assert stage_trace.graph_before(steps[2]) is UOp(Ops.SINK, ((a * 2) * 2, right))
    assert stage_trace.graph_after(steps[2]) is stage_trace.output is UOp(Ops.SINK, ((a * 2) * 2, b * 2))


def test_passes_run_inside_a_rule_help_build_its_step():
    r = UOp.range(4)

    def fold_through_helper(x: UOp) -> UOp:
        # the rule rewrites a fresh expression of its own with rules of its own
        return graph_rewrite((x + x) + (x + x), double_add, name="helper")

    outer = PatternMatcher([(UPat(Ops.NEG, src=(UPat.var("x"),)), fold_through_helper, "neg via helper")])
    root = UOp(Ops.SINK, (-r, r + 1))
    with tracing() as trace:
        out = graph_rewrite(root, outer, name="outer")
    record = trace.passes[0]
    assert out is UOp(Ops.SINK, ((r * 2) * 2, r + 1))
    assert [s.rule for s in record.steps] == ["x+x", "x+x", "neg via helper"]
    helper_steps, own = record.steps[:2], record.steps[2]
    assert record.graph_after(own) is out
    assert record.graph_before(own) is root  # the helper's work did not change the outer graph
    # a helper's steps show the helper's own graph (its input is not part of the outer graph)
    assert record.graph_after(helper_steps[0]) is (r * 2) + (r * 2)
    assert record.graph_after(helper_steps[1]) is (r * 2) * 2


def vectorize_by_hand(root: UOp, lane_range: UOp, count: int) -> tuple[list[UOp], dict[UOp, UOp]]:
    """A node-by-node rebuild that turns ``lane_range`` into a vector (users become vectors)."""
    order = root.toposort()
    new: dict[UOp, UOp] = {}
    for u in order:
        if u is lane_range:
            new[u] = lanes(count)
            continue
        sources = [new[s] for s in u.src]
        wide = any(s.dtype.count > 1 for s in sources)
        if wide and u.op not in (Ops.SINK, Ops.STORE):
            sources = [s if s.dtype.count > 1 else UOp(Ops.VECTORIZE, (s,) * count) for s in sources]
        new[u] = u.replace(src=tuple(sources))
    return order, new


@pytest.mark.parametrize("count", [2, 4])
def test_frontier_graph_is_whole_at_every_position_of_a_node_by_node_rebuild(count):
    loop, lane = UOp.range(8), UOp.range(count)
    value = (loop * 3 + lane) * (loop + 1)
    root = UOp(Ops.SINK, (value, loop + 2))
    order, new = vectorize_by_hand(root, lane, count)
    assert new[root].src[0].dtype.count == count
    for done in range(len(order) + 1):
        graph = frontier_graph(root, order, new, done)
        present = set(graph.toposort())
        rebuilt = order[:done]
        # every rebuilt node's new form is in the graph unless all its users are rebuilt and none
        # of them took it (it was replaced for good)
        for u in rebuilt:
            users_left = [v for v in order[done:] if any(s is u for s in v.src)]
            if users_left:
                assert new[u] in present, (done, u.op)
        # nodes not rebuilt yet keep their original form and sources of matching type
        for u in order[done:]:
            if u is not root:
                assert any(p.op is u.op and p.arg == u.arg and p.dtype == u.dtype for p in present)
    assert frontier_graph(root, order, new, 0) is root
    assert frontier_graph(root, order, new, len(order)) is new[root]
    # part way: the vector made from the lane range hangs from the SINK next to the original
    position = next(i for i, u in enumerate(order) if u is lane)
    graph = frontier_graph(root, order, new, position + 1)
    assert any(s is lanes(count) for s in graph.src) and lane in set(graph.toposort())


def test_explicit_graphs_can_be_built_when_shown():
    r = UOp.range(4)
    calls = []

    def build() -> UOp:
        calls.append(1)
        return UOp(Ops.SINK, (r * 2,))

    with tracing() as trace:
        with traced_pass("lazy", UOp(Ops.SINK, (r + r,))) as record:
            record.step("double", r + r, r * 2, graph=build)
            record.output = UOp(Ops.SINK, (r * 2,))
    assert calls == []
    step = trace.passes[0].steps[0]
    assert step.graph is UOp(Ops.SINK, (r * 2,)) and step.graph is trace.passes[0].output
    assert calls == [1]


def test_untraced_records_nothing_and_restores_tracing():
    r = UOp.range(3)
    with tracing() as trace:
        with untraced():
            graph_rewrite(r + r, double_add, name="hidden")
        graph_rewrite(r + r, double_add, name="shown")
    assert [p.name for p in trace.passes] == ["shown"]


def test_a_step_of_another_pass_is_named_in_the_error():
    r = UOp.range(3)
    with tracing() as trace:
        graph_rewrite(r + r, double_add, name="one")
        graph_rewrite((r + 1) + (r + 1), double_add, name="two")
    one, two = trace.passes
    with pytest.raises(KeyError, match="is not a step of pass 'one'"):
        one.graph_after(two.steps[0])


@pytest.mark.parametrize("size", [3, 6])
def test_each_step_says_whose_graph_it_shows(size):
    # a helper pass run inside a rule works on a graph of its own: the frames of its steps are that
    # graph, not the outer pass's, and a viewer must be able to say so without building any graph
    r = UOp.range(size)

    def fold_through_helper(x: UOp) -> UOp:
        return graph_rewrite((x + x) + (x + x), double_add, name="helper")

    outer = PatternMatcher([(UPat(Ops.NEG, src=(UPat.var("x"),)), fold_through_helper, "neg via helper")])
    root = UOp(Ops.SINK, (-r, r + 1))
    with tracing() as trace:
        with traced_pass("Stage", root) as stage:
            stage.output = graph_rewrite(root, outer, name="outer")
    stage_trace, outer_trace, helper = trace.find("Stage"), trace.find("outer"), trace.find("helper")
    helper_steps, own = stage_trace.steps[:2], stage_trace.steps[2]
    for record in (stage_trace, outer_trace):
        assert [record.shown_pass(s) for s in helper_steps] == [helper, helper]
        assert record.shown_pass(own) is record
        assert record.graph_after(helper_steps[0]).op is Ops.ADD  # the helper's graph indeed
        assert record.graph_after(own).op is Ops.SINK
    assert [helper.shown_pass(s) for s in helper_steps] == [helper, helper]
    # a stage whose passes work on its graph shows them in it: its own graph at every step
    a = UOp.range(size)
    with tracing() as trace:
        with traced_pass("Stage", UOp(Ops.SINK, (a + a,))) as stage:
            stage.output = graph_rewrite(UOp(Ops.SINK, (a + a,)), double_add, name="inner")
    stage_trace = trace.find("Stage")
    assert [stage_trace.shown_pass(s) for s in stage_trace.steps] == [stage_trace]
    with pytest.raises(KeyError, match="not a step of pass 'inner'"):
        trace.find("inner").shown_pass(helper_steps[0])
