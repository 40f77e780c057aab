"""The rewrite player's Render frames carry line provenance: each line of a source names its node in
the frame's graph, the step that created that node (a frame of the player, where the node is
drawn) and the Tensor method it descends from (uopviz/widgets/player.py, provenance_json)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import uopviz as uv
from uopviz.engine.provenance import kernel_provenance, lineage_of, source_provenance
from uopviz.widgets.player import PlayerState, provenance_json

RNG = np.random.default_rng(11)


@pytest.fixture(scope="module")
def program():
    x = uv.Tensor(RNG.random((1, 3, 8, 8), dtype=np.float32))
    w = uv.Tensor(RNG.random((4, 3, 3, 3), dtype=np.float32))
    y = x.conv2d(w).relu().reshape(1, -1).softmax(axis=1)
    return uv.compile(y, backend="c", opts="heuristic", build=False)


@pytest.fixture(scope="module")
def render_frame(program):
    state = PlayerState(program.trace, backend="c")
    state.select("Render")
    state.move_to(state.current.step_count)
    return state, state.frame()


def test_render_frames_map_every_instruction_line_to_a_drawn_node(program, render_frame):
    _, frame = render_frame
    shown = frame.to_json()
    assert len(shown["sources"]) == len(program.items)
    assert {source.text for source in frame.sources} == {item.source for item in program.items}
    for source, kernel in zip(shown["sources"], frame.sources, strict=True):
        provenance = source["provenance"]
        expected = source_provenance(lineage_of(program.trace), kernel.linear, kernel.text, "c")
        assert [entry[0] for entry in provenance["lines"]] == [entry.line for entry in expected.lines]
        assert all(entry[1] in frame.graph for entry in provenance["lines"])  # every node is drawn
        for line, key, made, came in provenance["lines"]:
            reference = expected.line(line)
            assert frame.graph.nodes[key]["uop"] is reference.uop
            assert provenance["creators"][made]["text"] == reference.creator.describe()
            assert provenance["origins"][came] == reference.origin.describe()
        distinct = {json.dumps(creator, sort_keys=True) for creator in provenance["creators"]}
        assert len(provenance["creators"]) == len(distinct)


def test_a_lines_creating_step_is_a_frame_that_draws_its_node(program, render_frame):
    _, frame = render_frame
    provenance = frame.to_json()["sources"][0]["provenance"]
    steps = [(entry, provenance["creators"][entry[2]]) for entry in provenance["lines"]
             if provenance["creators"][entry[2]]["step"] > 0]
    assert steps
    checked = 0
    for (line, key, _, _), creator in steps[:: max(1, len(steps) // 4)]:
        state = PlayerState(program.trace, backend="c", hide_unchanged=False)
        state.select(creator["pass_index"], creator["step"])
        jumped = state.frame()
        assert key in jumped.graph, f"line {line}: the node is not in the frame of the step that created it"
        assert creator["text"].startswith(f"rule {jumped.rule!r}")
        checked += 1
    assert checked >= 2


def test_provenance_json_is_compact_and_says_why_it_is_empty(program):
    provenance = kernel_provenance(program, 0)
    shown = provenance_json(provenance)
    assert len(shown["creators"]) < len(shown["lines"]) and len(shown["origins"]) <= 6
    assert set(shown) == {"lines", "creators", "origins", "note"} and shown["note"] == ""
    assert all(len(entry) == 4 for entry in shown["lines"])


def test_frames_without_sources_carry_no_provenance(program):
    state = PlayerState(program.trace, backend="c")
    state.select("Rangeify")
    assert state.frame().to_json()["sources"] == []


def test_the_front_end_links_lines_and_nodes():
    from uopviz.widgets.views import script

    text = script()
    # one copy of the line links, shared by the player and the tuner's sources
    for piece in ("function linkSourceLines", "jump to the step that created it", "function markSourceLines",
                  "uv-line-mapped", "pendingSelect", "sources: renderSources"):
        assert piece in text
    assert text.count("function linkSourceLines") == 1 and text.count("function showLineOrigin") == 1


def test_reports_embed_the_render_frames_provenance():
    from uopviz.report import build_report
    from uopviz.widgets.embed import embedded_states

    x = uv.Tensor(RNG.random((16, 32), dtype=np.float32))
    w = uv.Tensor(RNG.random((32, 8), dtype=np.float32))
    page = build_report([("y", (x @ w).relu())], "provenance", opts=None, time_kernels=False)
    states = [state for state in embedded_states(page) if isinstance(state, dict)]
    players = [state for state in states if state.get("kind") == "player"]
    frames = [frame for player in players for frame in player["frame_table"].values()]
    sources = [source for frame in frames for source in frame.get("sources", [])]
    assert sources and all(source["provenance"]["lines"] for source in sources)
    origins = {origin for source in sources for origin in source["provenance"]["origins"]}
    assert any(origin.startswith(("Tensor.matmul", "Tensor.relu")) for origin in origins), origins
