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
    # the region a view zooms to holds the step's replacement node; the input (step 0) has none
    region, focus = data["marks"]["region"], data["marks"]["focus"]
    node = next(n for n in data["graph"]["nodes"] if n["k"] == focus)
    assert region["x0"] < node["x"] < region["x1"] and region["y0"] < node["y"] < region["y1"]
    state.step = 0
    assert state.frame().to_json()["marks"]["region"] is None
    for s, t, _slot in data["graph"]["edges"]:
        assert 0 <= s < len(keys) and 0 <= t < len(keys)


def _lane_programs() -> dict[str, uv.Program]:
    """Programs whose Expand stage turns ranges into vector lanes (dtype changes mid-pass)."""
    import numpy as np

    from uopviz.passes.optops.opts import Opt, OptOp

    rng = np.random.default_rng(5)
    programs = {}
    for m, k, n in [(8, 16, 8), (12, 8, 16)]:
        a = uv.Tensor(rng.standard_normal((m, k)).astype(np.float32))
        b = uv.Tensor(rng.standard_normal((k, n)).astype(np.float32))
        opts = [Opt(OptOp.SPLIT, 1, (4, uv.AxisType.UPCAST, False)),
                Opt(OptOp.SPLIT, 2, (4, uv.AxisType.UNROLL, False))]
        programs[f"gemm {m}x{k}x{n} upcast+unroll"] = uv.compile(a @ b, backend="python", opts=opts)
    x = uv.Tensor(rng.standard_normal((6, 16)).astype(np.float32))
    programs["elementwise upcast"] = uv.compile((x * 2 + 1).exp2(), backend="python",
                                                opts=[Opt(OptOp.SPLIT, 1, (4, uv.AxisType.UPCAST, False))])
    return programs


@pytest.fixture(scope="module")
def lane_programs() -> dict[str, uv.Program]:
    return _lane_programs()


def test_every_step_of_every_pass_replays_a_whole_graph(lane_programs):
    for name, program in lane_programs.items():
        expand = program.trace.find("Expand")
        assert any(s.rule == "expand range" for s in expand.steps), name
        for record in program.trace.walk():
            for step in record.steps:
                graph = record.graph_after(step)
                assert isinstance(graph, UOp), (name, record.name, step.rule)
            if record.steps:
                assert record.graph_after(record.steps[-1]) is record.output, (name, record.name)
        for stage in program.trace.passes[1:]:  # after Callify a stage's graph is the whole program
            if stage.steps:
                assert stage.graph_after(stage.steps[0]).op is Ops.FUNCTION, (name, stage.name)
        # an Expand step shows the whole kernel with what it built in it (the lanes it made hang
        # from the SINK until their users are expanded)
        kernel_pass = expand.passes[0]
        for step in kernel_pass.steps:
            graph = step.graph
            assert graph.op is Ops.SINK and step.after in set(graph.toposort()), (name, step.rule)


def test_player_shows_every_step_whole_with_its_changes_highlighted(lane_programs):
    for name, program in lane_programs.items():
        state = PlayerState(program.trace, hide_unchanged=False)
        for entry in state.entries:
            state.pass_index = entry.index
            for k in range(1, entry.step_count + 1):
                state.step = k
                frame = state.frame()
                step = entry.record.steps[k - 1]
                assert frame.note == "", (name, entry.name, step.rule, frame.note)
                assert frame.uop is entry.record.graph_after(step)
                assert frame.diff.added | set(frame.diff.changed) <= set(frame.graph.nodes)
                if entry.name.startswith("expand "):
                    assert frame.focus == node_key(step.after)
                    # (a step's result can be a node the graph already has: both UPCAST ranges of
                    # size 4 become the same VECTORIZE(0, 1, 2, 3))
                    before = entry.record.graph_before(step)
                    assert not frame.diff.empty or step.after in set(before.toposort()), (name, step.rule)
            if entry.step_count:
                assert state.uop_at() is entry.record.output, (name, entry.name)


def test_a_step_whose_graph_cannot_be_rebuilt_is_shown_locally_with_a_note():
    lane = UOp.range(4)
    root = UOp(Ops.SINK, ((lane + 1) * 3,))
    lanes = UOp(Ops.VECTORIZE, tuple(UOp.const(dtypes.index, i) for i in range(4)))
    with uv.tracing() as trace:
        with traced_pass("by hand", root) as record:
            # a vector put in place of a scalar its users (ADD, MUL) still take: ill-typed in between
            record.step("range to lanes", lane, lanes)
            record.output = UOp(Ops.SINK, ((lanes + UOp(Ops.VECTORIZE, (UOp.const(dtypes.index, 1),) * 4)),))
    state = PlayerState(trace)
    frame = state.frame()
    assert "cannot be rebuilt" in frame.note and "ADD" in frame.note
    assert frame.uop is lanes and set(frame.graph.nodes) == set(layout(lanes).nodes)
