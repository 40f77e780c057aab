"""What the rewrite player's frames say about a compile's trace (uopviz.widgets.player), no browser:
Callify starts from the Tensor graph, a frame says when it shows a nested pass's own graph, the
printed diff keeps the names of unchanged nodes, and steps that changed nothing say so and are
passed over while hidden."""

from __future__ import annotations

import numpy as np
import pytest

import uopviz as uv
from uopviz import Ops, UOp, dtypes
from uopviz.passes.optops.opts import Opt, OptOp
from uopviz.widgets.embed import embedded_frame, player_state
from uopviz.widgets.player import PlayerState, aligned_text_diff, printed_graph, text_diff
from uopviz.widgets.views import RewritePlayer


def _matmul_bias_relu(m: int, k: int, n: int, backend: str, opts=None, seed: int = 0) -> uv.Program:
    rng = np.random.default_rng(seed)
    x = uv.Tensor(rng.random((m, k), dtype=np.float32))
    w = uv.Tensor(rng.random((k, n), dtype=np.float32))
    b = uv.Tensor(rng.random(n, dtype=np.float32))
    return uv.compile((x @ w + b).relu(), backend=backend, opts=opts)


@pytest.fixture(scope="module")
def tours() -> list[uv.Program]:
    """The tour's program (on C, whose instruction selection fuses ADD(MUL) into MULACC) in two sizes."""
    return [_matmul_bias_relu(32, 64, 16, "c"), _matmul_bias_relu(8, 12, 4, "c", seed=1)]


@pytest.fixture(scope="module")
def lanes() -> uv.Program:
    """A matmul whose Expand stage has steps that change nothing (a range expanded into lanes that
    already exist, the last ``keep`` of the SINK)."""
    rng = np.random.default_rng(5)
    a = uv.Tensor(rng.standard_normal((8, 16)).astype(np.float32))
    b = uv.Tensor(rng.standard_normal((16, 8)).astype(np.float32))
    return uv.compile(a @ b, backend="python", opts=[Opt(OptOp.SPLIT, 1, (4, uv.AxisType.UPCAST, False)),
                                                     Opt(OptOp.SPLIT, 2, (4, uv.AxisType.UNROLL, False))])


def test_callify_input_frame_is_the_tensor_graph(tours):
    for program in tours:
        state = PlayerState(program.trace)
        state.select("Callify", 0)
        first = state.frame()
        ops = {u.op for u in first.uop.toposort()}
        # was the finished FUNCTION with its PARAMs (Callify's input was not recorded)
        assert first.uop.op is Ops.TUPLE and Ops.FUNCTION not in ops and Ops.PARAM not in ops
        sizes = []
        for step in range(1, state.current.step_count + 1):
            state.step = step
            frame = state.frame()
            assert frame.scope == "" and not frame.diff.empty
            sizes.append(frame.graph.number_of_nodes())
        assert state.frame().uop is program.trace.find("Callify").output
        assert sizes[-1] > first.graph.number_of_nodes()  # the FUNCTION comes last, not first


def test_a_frame_says_when_it_shows_a_nested_pass_graph(tours):
    for program in tours:
        state = PlayerState(program.trace)
        state.select("Rangeify")
        stage = state.current.record
        whole_steps = []
        for step in range(1, state.current.step_count + 1):
            state.step = step
            frame = state.frame()
            shown = stage.shown_pass(stage.steps[step - 1])
            if shown is stage:
                assert frame.scope == "" and frame.uop.op is Ops.FUNCTION
                whole_steps.append(step)
            else:
                # a kernel body or address under construction: no FUNCTION, and the line says so
                assert Ops.FUNCTION not in {u.op for u in frame.uop.toposort()}
                kernel = next(e.kernel for e in state.entries if e.record is shown)
                assert kernel in [k.name for k in program.kernels]
                assert frame.scope.startswith(f"this step rewrote kernel {kernel} while Rangeify was")
                assert f"(pass '{shown.name} {kernel}')" in frame.scope and "a piece" not in frame.scope
                assert "the graph shows that kernel as built so far, not the whole program" in frame.scope
                back = min(s for s in range(step + 1, state.current.step_count + 1)
                           if stage.shown_pass(stage.steps[s - 1]) is stage)
                assert f"the whole program shows again at step {back}" in frame.scope
                assert frame.to_json()["scope"] == frame.scope
        assert whole_steps and len(whole_steps) < state.current.step_count
        shown_names = {stage.shown_pass(s).name for s in stage.steps}
        assert shown_names >= {"Rangeify", "output address", "index pushdown"}
        # the nested pass itself shows its own graph: nothing to say
        state.select("index pushdown")
        assert state.frame().scope == ""


def test_embedded_frames_keep_the_scope_line_of_their_pass(tours):
    state, _ = player_state(tours[1].trace, engine="layered")
    passes = {p["name"]: p["index"] for p in state["passes"]}
    pushdown_index = next(p["index"] for p in state["passes"] if p["name"].startswith("index pushdown "))
    rangeify = [state["frame_table"][key] for key in state["frames"][str(passes["Rangeify"])]]
    pushdown = [state["frame_table"][key] for key in state["frames"][str(pushdown_index)]]
    assert any("(pass 'index pushdown r_" in frame["scope"] for frame in rangeify)
    assert all(frame["scope"] == "" for frame in pushdown)


def test_printed_diff_keeps_the_names_of_unchanged_nodes(tours):
    for program in tours:
        state = PlayerState(program.trace)
        state.select("Instruction Selection", 0)
        fused = 0
        for step in range(1, state.current.step_count + 1):
            state.step = step
            frame = state.frame()
            removed = [line for line in frame.diff_lines if line.startswith("-")]
            added = [line for line in frame.diff_lines if line.startswith("+")]
            # one line per node really changed (renumbering made every later line differ)
            assert len(removed) <= len(frame.diff.removed) + len(frame.diff.changed)
            assert len(added) <= len(frame.diff.added) + len(frame.diff.changed)
            if "MULACC" in frame.rule:
                fused += 1
                # the matched ADD and MUL, the user now reading the MULACC (and a LOAD that the new
                # order prints elsewhere); the plain print differed in 47 and 46 lines here
                assert len(removed) <= len(frame.diff.removed) + 2 and len(added) <= 3, frame.diff_lines
                assert any("MULACC" in line for line in added)
        assert fused >= 2


@pytest.mark.parametrize("before_count", [0, 5, 40])
def test_aligned_text_diff_changes_only_the_fused_lines(before_count):
    a, b, c = (UOp.buffer(8, dtypes.float32).index(UOp.range(8)) for _ in range(3))
    prefix = a
    for i in range(before_count):  # unrelated nodes printed before the rewritten ones
        prefix = prefix * float(i + 2)
    fused_from = UOp(Ops.ADD, (UOp(Ops.MUL, (a, b)), c))
    before = UOp(Ops.SINK, (prefix, (fused_from + 1.0).recip()))
    fused = UOp(Ops.MULACC, (a, b, c))
    after = UOp(Ops.SINK, (prefix, (fused + 1.0).recip()))
    rebuilt_before, rebuilt_after = (fused_from + 1.0), (fused + 1.0)
    pairs = {rebuilt_after: rebuilt_before, rebuilt_after.recip(): rebuilt_before.recip(),
             after: before}
    lines = aligned_text_diff(before, after, pairs)
    changes = [line for line in lines if line[0] in "+-"]
    assert [line[0] for line in changes] == ["-", "-", "-", "+", "+"], lines  # MUL, ADD, user; MULACC, user
    assert any(line.startswith("+") and "MULACC" in line for line in changes)
    # printed alone, a graph prints as format_graph prints it; the plain diff renumbers the lines
    # after the fusion, so more of them differ
    assert printed_graph(before)[0] == str(before).splitlines()
    plain = [line for line in text_diff(str(before), str(after)) if line[0] in "+-"]
    assert len(plain) > len(changes)


def test_a_tag_only_step_prints_its_tag(tours):
    state = PlayerState(tours[0].trace)
    state.select("find kernel boundaries", 1)
    frame = state.frame()
    assert frame.rule == "realize_output" and frame.diff.changed
    changed = [line for line in frame.diff_lines if line[0] in "+-"]
    # the tag shows (the print was the same: "(no textual change)")
    assert len(changed) == 2 and "tag=('realize', 'realize_output')" in changed[1]


def test_steps_that_change_nothing_say_so_and_are_passed_over_when_hidden(lanes):
    shown = PlayerState(lanes.trace, hide_unchanged=False)
    shown.select("Expand", 0)
    count = shown.current.step_count
    empty = [step for step in range(1, count + 1) if shown.is_empty(step)]
    assert count in empty and len(empty) < count  # Expand's last step, the SINK's ``keep``
    for step in empty:
        shown.step = step
        frame = shown.frame()
        assert frame.empty and frame.diff.empty and not frame.diff_lines
        assert "changed nothing" in frame.explanation and frame.to_json()["empty"] is True
    shown.step = count - 1
    assert not shown.frame().empty and shown.frame().explanation == ""
    shown.next()
    assert shown.step == count  # shown when nothing is hidden

    hidden = PlayerState(lanes.trace, hide_unchanged=True)
    hidden.select("Expand", 0)
    last = max(set(range(count + 1)) - set(empty))
    for step in range(count):
        hidden.step = step
        hidden.next()
        assert not hidden.is_empty() and (hidden.step > step or step == last)
    hidden.move_to(count)  # the last step changed nothing: back to the last one that did
    assert hidden.step == max(s for s in range(count + 1) if s not in empty)
    hidden.previous()
    assert hidden.step not in empty

    player = RewritePlayer(lanes.trace, pass_name="Expand", engine="layered")
    player.position = [player.state.pass_index, count]
    assert player.state.step not in empty and player.frame["step"] == player.state.step
    assert player.position == [player.state.pass_index, player.state.step]


def test_embedded_frames_mark_steps_that_change_nothing(lanes):
    state, _ = player_state(lanes.trace, engine="layered")
    expand = next(p["index"] for p in state["passes"] if p["name"] == "Expand")
    frames = [state["frame_table"][key] for key in state["frames"][str(expand)]]
    assert frames[-1]["empty"] and "changed nothing" in frames[-1]["explanation"]
    assert not frames[1]["empty"]


def test_a_stage_step_made_in_a_nested_pass_refers_to_that_pass_frame(tours):
    """A stage's middle steps are drawn once, in the graph of the nested pass that made them (a
    reference with its own scope line); the stage's first and last steps show its whole graph."""
    for program in tours:
        state, _ = player_state(program.trace, engine="layered")
        passes = {p["index"]: p for p in state["passes"]}
        stages = [p for p in state["passes"] if p["depth"] == 0 and str(p["index"]) in state["frames"]]
        referred = 0
        for stage in stages:
            keys = state["frames"][str(stage["index"])]
            for step, key in enumerate(keys):
                own = state["frame_table"][key]
                frame = embedded_frame(state, key)
                assert frame["graph"]["nodes"] and "ref" not in frame
                if step in (0, len(keys) - 1):
                    assert "ref" not in own, (stage["name"], step)
                    continue
                if "ref" not in own:
                    continue
                referred += 1
                inner = next(p for i, p in passes.items() if own["ref"] in state["frames"].get(str(i), []))
                assert inner["depth"] > 0 and f"(pass {inner['name']!r})" in frame["scope"]
                assert frame["graph"] == state["frame_table"][own["ref"]]["graph"]
                assert frame["empty"] == state["frame_table"][own["ref"]]["empty"]
        assert referred >= 10
        whole = {"FUNCTION", "CALL"}
        for stage in stages:  # the whole program, with its kernels as CALLs, at a stage's last step
            last = embedded_frame(state, state["frames"][str(stage["index"])][-1])
            ops = {state["node_table"].get(n["k"], n).get("op") for n in last["graph"]["nodes"]}
            if stage["name"] not in ("Callify",):
                assert ops & whole, stage["name"]
