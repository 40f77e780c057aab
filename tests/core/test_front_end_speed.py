"""What the front end's speed-ups must leave as it was: the collector's state, a structural matcher's
results and trace, toposort's order and UOp.const's hash-consing (core.collector, core.rewrite,
core.uop)."""

import gc

import pytest

from uopviz import Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite, tracing
from uopviz.core.collector import collector_paused
from uopviz.core.uop import toposort
from uopviz.passes.indexing import index_simplifier

idx = dtypes.index


def test_collector_paused_restores_its_state_nested_and_on_error():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner block leaves the outer one's pause in place
    assert gc.isenabled()
    with pytest.raises(ValueError), collector_paused():
        raise ValueError("inside")
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # off before, off after
    finally:
        gc.enable()



class _Node:
    """A tracked object that can sit in a reference cycle."""

    def __init__(self) -> None:
        self.other: object = None


def test_collector_paused_moves_what_the_block_made_into_the_oldest_generation_and_still_frees_cycles():
    import weakref

    gc.collect()
    with collector_paused():
        made = [_Node() for _ in range(50)]
        first, second = _Node(), _Node()
        first.other, second.other = second, first  # a cycle that only the collector frees
        cycle = weakref.ref(first)
        del first, second
    assert gc.get_count()[0] < 50  # the 52 new objects are no longer counted in the youngest generation
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert all(id(node) in oldest for node in made)
    assert cycle() is not None  # nothing walked them on the way out
    gc.collect()
    assert cycle() is None  # the oldest generation's collection frees the cycle made in the block


def test_collector_paused_leaves_objects_frozen_by_someone_else_frozen():
    gc.collect()
    kept = [_Node() for _ in range(10)]
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with collector_paused():
            made = _Node()
        assert gc.get_freeze_count() == frozen  # not unfrozen on the way out
        assert id(made) not in {id(o) for o in gc.get_objects(generation=2)}  # nor promoted
    finally:
        gc.unfreeze()
    assert kept


def _counting_matcher(structural: bool) -> tuple[PatternMatcher, list[UOp]]:
    tried: list[UOp] = []

    def zero_plus(x: UOp, z: UOp) -> UOp | None:
        tried.append(x)
        return x if z.const_value == 0 else None

    rules = [(UPat(Ops.ADD, src=(UPat.var("x"), UPat.cvar("z"))), zero_plus, "x + 0 -> x")]
    return PatternMatcher(rules, name="zero", structural=structural), tried


def test_structural_matcher_tries_a_fixed_point_once_and_gives_the_same_graph_and_steps():
    a = UOp.range(7, number=901)
    graph = (a + 3) * 2 + (a + 0)
    outcomes = {}
    for structural in (False, True):
        matcher, tried = _counting_matcher(structural)
        with tracing() as trace:
            first = graph_rewrite(graph, matcher)
            second = graph_rewrite(graph, matcher)
        steps = [(s.rule, s.before, s.after) for p in trace.passes for s in p.steps]
        outcomes[structural] = (first, second, steps, len(tried))
    plain, noted = outcomes[False], outcomes[True]
    assert noted[0] is plain[0] and noted[1] is plain[1]
    assert plain[0] is (a + 3) * 2 + a
    assert [rule for rule, _, _ in plain[2]] == ["x + 0 -> x"] * 2
    assert [(rule, id(before), id(after)) for rule, before, after in noted[2]] == [
        (rule, id(before), id(after)) for rule, before, after in plain[2]]
    # a + 3 declines the rule: the plain matcher asks the rule again on the second rewrite, the
    # structural one remembers; a + 0 fires both times (a firing is never skipped)
    assert plain[3] == 4 and noted[3] == 3


def test_structural_matcher_with_a_context_tries_every_time():
    matcher, tried = _counting_matcher(True)
    a = UOp.range(5, number=902)
    graph_rewrite(a + 4, matcher, ctx={"any": 1})
    graph_rewrite(a + 4, matcher, ctx={"any": 1})
    assert len(tried) == 2
    assert (matcher + matcher).structural and not (matcher + _counting_matcher(False)[0]).structural


def test_index_simplifier_gives_the_same_result_when_run_again():
    r = UOp.range(16, number=903)
    expression = (r * 4 + 8 - r * 4) + (r // 4) * 4 + r % 4
    once = graph_rewrite(expression, index_simplifier)
    assert once is r + 8
    assert graph_rewrite(expression, index_simplifier) is once
    assert graph_rewrite(once, index_simplifier) is once


def test_toposort_is_depth_first_post_order_in_source_order():
    a, b = UOp.range(3, number=904), UOp.range(4, number=905)
    shared = a + b
    root = UOp(Ops.SINK, ((shared * 2), shared, b))
    names = {a: "a", b: "b", shared: "a+b", shared * 2: "(a+b)*2", root: "sink"}
    order = [names.get(u, u.op.name) for u in toposort([root])]
    # a RANGE's bound (a CONST) comes before it; src[0]'s whole graph before src[1]'s
    assert order == ["CONST", "a", "CONST", "b", "a+b", "CONST", "(a+b)*2", "sink"]
    assert [names.get(u, u.op.name) for u in toposort([root], lambda u: u.src[:1])] == [
        "CONST", "a", "a+b", "(a+b)*2", "sink"]
    first_b = {id(u) for u in toposort([b])}
    expected = [*toposort([b]), *(u for u in toposort([root]) if id(u) not in first_b)]
    assert [id(u) for u in toposort([b, root, a])] == [id(u) for u in expected]


def test_const_finds_the_living_constant_and_keeps_signed_zeros_apart():
    assert UOp.const(idx, 5) is UOp(Ops.CONST, (), (5, idx))
    assert UOp.const(idx, 5.0) is UOp.const(idx, 5)
    assert UOp.const(dtypes.float32, 0.0) is not UOp.const(dtypes.float32, -0.0)
    assert UOp.const(dtypes.float32, -0.0) is UOp(Ops.CONST, (), (-0.0, dtypes.float32))
    assert UOp.const(dtypes.bool, 1) is UOp.const(dtypes.bool, True)
