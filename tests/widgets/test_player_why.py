"""The player's "Why didn't a rule fire?" (uopviz.widgets.player.PlayerState.why_not and the
RewritePlayer's comm answer), no browser: for a node selected in a frame of a real program's trace,
the chosen pass's rules tried on it, with the rule that fires being the one the trace recorded."""

from __future__ import annotations

import pytest
from mulacc_program import mulacc_program

import uopviz as uv
from uopviz import Ops
from uopviz.widgets.graph import node_key
from uopviz.widgets.player import PlayerState
from uopviz.widgets.views import RewritePlayer, script

FUSION = "ADD(MUL(a, b), c) → MULACC(a, b, c)"


@pytest.fixture(scope="module")
def program() -> uv.Program:
    """The tour's program on C, whose instruction selection fuses ADD(MUL) into MULACC."""
    return mulacc_program()


def _shown_keys(state: PlayerState, op: Ops) -> list[str]:
    graph = state.laid_out(state.shown_uop())
    return [key for key, data in graph.nodes(data=True) if "uop" in data and data["uop"].op is op]


def test_the_rule_a_step_applied_is_the_one_that_fires_on_its_node(program):
    state = PlayerState(program.trace, engine="layered")
    state.select("instruction selection", 0)  # its input: the node the first step rewrote is drawn
    first = state.current.record.steps[0]
    assert first.rule == FUSION
    why = state.why_not(node_key(first.before))
    assert (why.pass_name, why.op, why.note) == ("instruction selection r_g8_g4_R12", "ADD", "")
    (explanation,) = why.explanations
    assert explanation.matcher == "instruction selection"
    assert explanation.fired.rule == FUSION and explanation.fired.location == first.location
    assert explanation.fired.message.startswith("MULACC")
    # the vector-chunking rule matched too, but the fusion comes first
    later = [o for o in explanation.outcomes if o.status != "stopped" and not o.fires]
    assert later and all(o.earlier == FUSION for o in later)
    assert explanation.other_rules == len(state.current.record.matcher.rules) - len(explanation.outcomes)


def test_a_node_no_rule_rewrites_says_where_each_pattern_stopped(program):
    state = PlayerState(program.trace, engine="layered")
    state.select("instruction selection", 0)
    graph = state.laid_out(state.shown_uop())
    bias_add = next(
        key
        for key in _shown_keys(state, Ops.ADD)
        if {s.op for s in graph.nodes[key]["uop"].src} == {Ops.LOAD}
    )
    (explanation,) = state.why_not(bias_add).explanations
    assert explanation.fired is None
    fusion = next(o for o in explanation.outcomes if o.rule == FUSION)
    assert fusion.status == "stopped" and fusion.stops[0].describe() == "src[0].op: wanted MUL, had LOAD"


def test_a_stage_tries_the_rules_of_every_pass_inside_it(program):
    state = PlayerState(program.trace, engine="layered")
    state.select("Instruction Selection", 0)
    stores = _shown_keys(state, Ops.STORE)
    why = state.why_not(stores[0])
    assert [e.matcher for e in why.explanations] == ["accumulators", "instruction selection"]
    summary = why.to_json()["explanations"][1]["summary"]
    assert summary.startswith("1 rule of instruction selection applies to STORE")


def test_render_tries_its_rule_table(program):
    state = PlayerState(program.trace, engine="layered")
    state.select("Render", 0)
    (explanation,) = state.why_not(_shown_keys(state, Ops.STORE)[0]).explanations
    # its one rule is for a LINEAR: on a STORE nothing is tried, and the rule is counted
    assert (explanation.matcher, explanation.outcomes, explanation.other_ops) == ("render", (), ("LINEAR",))
    with pytest.raises(KeyError, match="no node 'u0' in the graph of 'Render' at step 0"):
        state.why_not("u0")


def test_a_pass_without_rules_says_so():
    import uopviz.nnef as nnef

    text = """import nn; import math;
graph G {
  @input { x: real[4]; }
  @output { y: real; }
  @compose { y = math.exp(x); }
}"""
    # an NNEF graph's Rangeify: its steps are the @lower formulas, recorded as the operations lowered
    trace = nnef.loads(text, progress=False).compile(backend="c", build=False, progress=False).trace
    state = PlayerState(trace, engine="layered")
    state.select("Rangeify", 1)
    why = state.why_not(_shown_keys(state, Ops.STORE)[0])
    assert why.explanations == [] and why.note.startswith("Rangeify rewrites without pattern rules")


def test_linearize_tries_its_rule_table(program):
    state = PlayerState(program.trace, engine="layered")
    state.select("Linearize", 0)
    sink = _shown_keys(state, Ops.SINK)[0]
    (explanation,) = state.why_not(sink).explanations
    assert explanation.matcher == "linearize"
    assert [(o.rule, o.status) for o in explanation.outcomes] == [("kernel becomes LINEAR", "needs context")]


def test_the_widget_answers_the_front_ends_question_through_its_comm(program, monkeypatch):
    player = RewritePlayer(program.trace, engine="layered")
    player.goto("instruction selection", 0)
    key = node_key(player.state.current.record.steps[0].before)
    sent: list[dict] = []
    monkeypatch.setattr(player, "send", sent.append)
    player._on_message(player, {"kind": "why", "key": key, "position": list(player.position)}, [])
    (answer,) = sent
    assert answer["kind"] == "why" and answer["key"] == key and answer["position"] == list(player.position)
    assert answer == {"kind": "why", "position": list(player.position), **player.state.why_not(key).to_json()}
    (outcomes,) = [e["outcomes"] for e in answer["explanations"]]
    assert [o["rule"] for o in outcomes if o["fires"]] == [FUSION]
    (fused,) = [o for o in outcomes if o["fires"]]
    assert fused["detail"] == "matched and rewrote it to MULACC dtypes.index"  # what the panel shows
    # a question about a frame no longer shown, or about no node, gets an error to show
    stale = player.why_answer(key, [0, 0])
    assert stale["error"].startswith("the player has moved to another step")
    assert "no node 'x'" in player.why_answer("x", list(player.position))["error"]
    player._on_message(player, {"kind": "something else"}, [])
    assert len(sent) == 1


def test_a_report_says_the_section_needs_a_live_notebook():
    # the static report runs the same script with no kernel to ask (StaticModel.isStatic)
    assert "Needs a live notebook" in script() and "model.isStatic" in script()
