"""The rewrite player's data model (uopviz.widgets.player) over real core traces. No browser."""

from __future__ import annotations

import pytest

import uopviz as uv
from uopviz import Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite, traced_pass
from uopviz.widgets.graph import layout, node_key
from uopviz.widgets.player import PlayerState, source_line, text_diff

RULES = PatternMatcher(
    [
        (UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("x"))), lambda x: x * 2, "x+x -> x*2"),
        (UPat(Ops.MUL, src=(UPat.var("x"), UPat.const(None, 1))), lambda x: x, "x*1 -> x"),
    ]
)
NOTHING = PatternMatcher([(UPat(Ops.SIN), lambda: None, "never fires")])


def program(rows: int, cols: int) -> UOp:
    x = UOp.buffer(rows * cols, dtypes.float32).reshape((rows, cols))
    return ((x + x) * 1.0 + (x * 1.0 + x * 1.0)).recip()


def traced(*shapes: tuple[int, int]) -> tuple[uv.Trace, list[UOp]]:
    outputs = []
    with uv.tracing() as trace:
        for rows, cols in shapes:
            root = program(rows, cols)
            with traced_pass("Stage", root) as stage:
                middle = graph_rewrite(root, RULES, name="simplify")
                stage.output = graph_rewrite(middle, NOTHING, name="idle")
            outputs.append(stage.output)
    return trace, outputs


@pytest.mark.parametrize("shape", [(2, 3), (4, 4), (1, 7)])
def test_passes_are_listed_with_step_counts_and_unchanged_ones_hide(shape):
    trace, _ = traced(shape)
    state = PlayerState(trace)
    names = [(e.name, e.depth, e.step_count, e.changed) for e in state.entries]
    assert names == [("Stage", 0, 4, True), ("simplify", 1, 4, True), ("idle", 1, 0, False)]
    assert [e.name for e in state.visible_entries] == ["Stage", "simplify"]
    state.hide_unchanged = False
    assert [e.name for e in state.visible_entries] == ["Stage", "simplify", "idle"]
    assert state.current.name == "Stage" and state.step == 1


def test_every_step_shows_the_graph_after_it_with_rule_location_and_diff():
    trace, (output,) = traced((4, 4))
    state = PlayerState(trace)
    state.select("simplify", 0)
    first = state.frame()
    assert first.step == 0 and first.diff is None and first.rule == ""
    assert first.uop is trace.find("simplify").input
    steps = trace.find("simplify").steps
    for k, step in enumerate(steps, start=1):
        state.step = k
        frame = state.frame()
        assert frame.uop is step.graph
        assert set(frame.graph.nodes) == set(layout(step.graph).nodes)
        assert frame.rule == step.rule and frame.location == step.location
        assert frame.location.endswith(f"test_player.py:{frame.location.rsplit(':', 1)[1]}")
        assert frame.rule in frame.code  # the rule's own source line, read from its file:line
        assert not frame.diff.empty
        assert frame.diff_lines and all(line[0] in "+- @" for line in frame.diff_lines)
        assert any(line.startswith("+") or line.startswith("-") for line in frame.diff_lines)
        # highlighted nodes exist in the shown graph; the focus is the replacement node
        assert frame.diff.added | set(frame.diff.changed) <= set(frame.graph.nodes)
        if frame.focus is not None:
            assert frame.focus == node_key(step.after)
    assert state.frame().uop is output


def test_stage_steps_replay_the_nested_pass_graphs():
    trace, _ = traced((3, 5))
    state = PlayerState(trace)
    state.select("Stage")
    for k in range(1, state.current.step_count + 1):
        state.step = k
        assert state.uop_at() is trace.find("simplify").steps[k - 1].graph


def test_stepping_is_clamped_and_navigates():
    trace, _ = traced((2, 2))
    state = PlayerState(trace)
    state.step = 99
    assert state.step == 4
    state.next()
    assert state.step == 4
    state.step = -5
    assert state.step == 0
    state.previous()
    assert state.step == 0
    state.next()
    assert state.step == 1
    state.pass_index = 2  # 'idle': no steps, so the step clamps to its input
    assert state.step == 0 and state.frame().rule == ""
    state.pass_index = 99
    assert state.pass_index == 2


def test_two_traced_programs_make_two_top_level_passes():
    trace, outputs = traced((2, 2), (3, 3))
    state = PlayerState(trace, hide_unchanged=False)
    assert [e.name for e in state.entries if e.depth == 0] == ["Stage", "Stage"]
    state.select(3, 4)
    assert state.uop_at() is outputs[1]


def test_errors_name_the_problem():
    with pytest.raises(TypeError, match="needs a uopviz Trace"):
        PlayerState([1, 2])
    with uv.tracing() as empty:
        pass
    state = PlayerState(empty)
    with pytest.raises(ValueError, match="recorded no passes"):
        state.frame()
    trace, _ = traced((2, 2))
    with pytest.raises(KeyError, match="no pass named 'Render'"):
        PlayerState(trace).select("Render")


def test_text_diff_and_source_line():
    assert text_diff("a\nb\nc", "a\nB\nc") == ["@@ -1,3 +1,3 @@", " a", "-b", "+B", " c"]
    assert text_diff("same", "same") == []
    assert source_line("uopviz/widgets/player.py:1").startswith('"""The rewrite player')
    assert source_line("no/such/file.py:3") == ""
    assert source_line("garbage") == ""


def test_frames_serialise_for_the_front_end():
    trace, _ = traced((4, 4))
    state = PlayerState(trace)
    state.step = 2
    data = state.frame().to_json()
    assert data["step"] == 2 and data["step_count"] == 4 and data["pass_name"] == "Stage"
    keys = {n["k"] for n in data["graph"]["nodes"]}
    assert set(data["marks"]["added"]) | set(data["marks"]["changed"]) <= keys
    for s, t, _slot in data["graph"]["edges"]:
        assert 0 <= s < len(keys) and 0 <= t < len(keys)


def test_steps_whose_whole_graph_cannot_be_rebuilt_are_shown_locally():
    import numpy as np

    from uopviz import UOpError

    rng = np.random.default_rng(0)
    a, b = (uv.Tensor(rng.random((16, 16), dtype=np.float32)) for _ in range(2))
    program = uv.compile(a @ b, backend="c", opts="heuristic")
    state = PlayerState(program.trace)
    state.select("Expand")
    local = whole = 0
    for k in range(1, min(state.current.step_count, 40) + 1):
        state.step = k
        record = state.step_record()
        frame = state.frame()
        try:
            graph = record.graph
        except UOpError:
            graph = None
        if graph is None or "cannot be rebuilt" in frame.note:
            assert frame.uop is record.after and "cannot be rebuilt" in frame.note
            assert set(frame.graph.nodes) == set(layout(record.after).nodes)
            local += 1
        else:
            assert frame.uop is graph and frame.note == ""
            whole += 1
    assert local + whole == min(state.current.step_count, 40) > 0
