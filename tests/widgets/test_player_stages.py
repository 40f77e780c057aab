"""Every stage of the rewrite player readable (issue 24.2), no browser: Render frames carry each
kernel's source text, Linearize frames a listing of the LINEAR program, sub-passes name their
kernel and count their rules, and the side panel lists only drawn sources."""

from __future__ import annotations

import html
import re

import numpy as np
import pytest

import uopviz as uv
from uopviz import Ops
from uopviz.widgets.graph import is_foldable, node_key, short_inline_text
from uopviz.widgets.player import PlayerState


def _conv_relu(channels: int, size: int, backend: str, seed: int) -> uv.Program:
    rng = np.random.default_rng(seed)
    x = uv.Tensor(rng.random((1, channels, size, size), dtype=np.float32))
    w = uv.Tensor(rng.random((3, channels, 3, 3), dtype=np.float32))
    return uv.compile(x.conv2d(w).relu(), backend=backend)


@pytest.fixture(scope="module")
def programs() -> list[uv.Program]:
    """A small conv+relu on C in two sizes, and one on the python backend."""
    return [_conv_relu(2, 6, "c", 0), _conv_relu(3, 5, "c", 1), _conv_relu(2, 5, "python", 2)]


def _last_frame(state: PlayerState, name: str):
    state.select(name)
    state.step = state.current.step_count
    return state.frame()


def test_render_frames_carry_each_kernels_source(programs):
    for program in programs:
        state = PlayerState(program.trace, backend=program.backend)
        frame = _last_frame(state, "Render")
        rendered = {str(item.body.src[0].arg): item.source for item in program.items}
        assert [source.kernel for source in frame.sources] == list(rendered)
        for source in frame.sources:
            assert source.backend == program.backend
            assert source.text == rendered[source.kernel]  # whole, not truncated or escaped
            assert _shown_text(source.html).strip() == source.text.strip()  # every character kept
            if program.backend == "c":
                assert f"void {source.kernel}(" in source.text  # the kernel's function, named after it
        # the per-kernel render pass shows its kernel's source too
        for entry in state.entries:
            if entry.name.startswith("render "):
                state.select(entry.index)
                state.step = 1
                assert [s.kernel for s in state.frame().sources] == [entry.name.removeprefix("render ")]
        assert frame.to_json()["sources"][0]["html"] == frame.sources[0].html
        # the side panel of the SOURCE node shows the whole text, not a cut repr
        details = [data["details"] for _, data in frame.graph.nodes(data=True) if data["op"] == "SOURCE"]
        assert details and {d["arg"] for d in details} == {s.text for s in frame.sources}


def _shown_text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def test_render_source_language_is_told_from_the_text_without_a_backend(programs):
    for program in programs:
        frame = _last_frame(PlayerState(program.trace), "Render")
        assert {source.backend for source in frame.sources} == {program.backend}


def test_linearize_frames_carry_one_listing_line_per_instruction(programs):
    for program in programs:
        state = PlayerState(program.trace)
        frame = _last_frame(state, "Linearize")
        linears = [u for u in frame.uop.toposort() if u.op is Ops.LINEAR]
        assert linears and [listing.kernel for listing in frame.listings] == [str(u.arg) for u in linears]
        for listing, linear in zip(frame.listings, linears, strict=True):
            assert len(listing.lines) == len(linear.src)
            position = {id(u): i for i, u in enumerate(linear.src)}
            for index, (line, instruction) in enumerate(zip(listing.lines, linear.src, strict=True)):
                number, _, text = line.partition(": ")
                assert int(number) == index and text.split()[0] == instruction.op.name
                for source in instruction.src:
                    if id(source) in position:
                        assert f"%{position[id(source)]}" in text
        # before Linearize there is no listing; once rendered the kernel shows as its source
        assert PlayerState(program.trace).frame().listings == []
        assert _last_frame(state, "Render").listings == []


@pytest.fixture(scope="module")
def softmax() -> uv.Program:
    """Three kernels (a max, a sum, the elementwise rest): their passes repeat per kernel."""
    rng = np.random.default_rng(3)
    return uv.compile((uv.Tensor(rng.random((4, 16), dtype=np.float32)).softmax(-1) + 1).relu(), backend="c")


KERNEL_BUILDERS = ("output address", "index pushdown", "gate loads", "simplify indices", "accumulators",
                   "instruction selection", "stage strided loads")


def test_sub_passes_name_the_kernel_they_work_on(programs, softmax):
    for program in [*programs, softmax]:
        state = PlayerState(program.trace)
        names = [kernel.name for kernel in program.kernels]
        builders = [e for e in state.entries if e.record.name in KERNEL_BUILDERS]
        assert builders
        for entry in builders:
            assert entry.kernel in names and entry.name == f"{entry.record.name} {entry.kernel}"
        # each kernel's passes, in the order the stages build the kernels
        for recorded in ("index pushdown", "instruction selection"):
            assert [e.kernel for e in builders if e.record.name == recorded] == [
                e.name.removeprefix("linearize ") for e in state.entries if e.name.startswith("linearize ")]
        # stages and whole-program passes name no kernel; a name that says its kernel stays as it is
        assert all(e.name == e.record.name for e in state.entries if not e.depth)
        assert state.entries[[e.record.name for e in state.entries].index("bufferize")].kernel == ""
        assert all(e.name == e.record.name for e in state.entries if e.record.name.startswith("render "))
        state.select(builders[0].name)  # selectable by the name shown
        assert state.current is builders[0]


def test_expand_and_a_backends_rules_name_their_kernel_once() -> None:
    x = uv.Tensor(np.arange(64 * 64, dtype=np.float32).reshape(64, 64))
    program = uv.compile((x * 2).sum(1), backend="cuda", opts="heuristic", build=False)
    state = PlayerState(program.trace)
    kernel = program.kernels[0].name
    own = [e for e in state.entries if e.record.name == "cuda rules"]
    assert [e.name for e in own] == [f"cuda rules {kernel}"]  # the pass's name, then its kernel's
    expand = [e.name for e in state.entries if e.record.name.startswith("expand ")]
    assert expand == [f"expand {kernel}"]  # the recorded name says the kernel: not said twice


def test_rule_counts_sum_to_the_step_count(programs, softmax):
    for program in [*programs, softmax]:
        for entry in PlayerState(program.trace).entries:
            counts = dict(entry.rule_counts)
            assert sum(counts.values()) == entry.step_count == len(entry.step_rules)
            assert counts == {rule: entry.step_rules.count(rule) for rule in set(entry.step_rules)}
            assert [c for _, c in entry.rule_counts] == sorted(counts.values(), reverse=True)
        isel = PlayerState(program.trace).entries
        stage = next(e for e in isel if e.name == "Instruction Selection")
        assert len(stage.rule_counts) > 1


def test_the_player_widget_lists_kernel_names_and_rule_counts(softmax):
    from uopviz.widgets.views import RewritePlayer

    player = RewritePlayer(softmax.trace)
    entries = player.state.entries
    assert [p["name"] for p in player.passes] == [e.name for e in entries]
    assert any(p["name"].startswith("index pushdown E_") for p in player.passes)
    for listed, entry in zip(player.passes, entries, strict=True):
        assert [tuple(pair) for pair in listed["rules"]] == entry.rule_counts
        assert listed["step_rules"] == entry.step_rules
    player.goto("Instruction Selection", 1)
    assert player.frame["pass_name"] == "Instruction Selection"


def test_the_side_panel_lists_only_drawn_sources(programs, softmax):
    for program in [programs[0], softmax]:
        state = PlayerState(program.trace)
        folded = 0
        for entry in state.entries:
            if not entry.changed:
                continue
            state.select(entry.index)
            for step in sorted({0, 1, entry.step_count // 2, entry.step_count}):
                state.step = step
                graph = state.frame().graph
                for _, data in graph.nodes(data=True):
                    details, u = data["details"], data["uop"]
                    listed = details["sources"]
                    drawn = [name.split(" ") for name in listed.split(", ")] if listed != "—" else []
                    assert all(len(part) == 2 and part[1] in graph for part in drawn), details["sources"]
                    shown = [s for s in u.src if node_key(s) in graph]
                    assert [part[1] for part in drawn] == [node_key(s) for s in shown]
                    values = details.get("values", "")
                    for source in u.src:
                        if node_key(source) not in graph:  # folded into this node: shown as its value
                            assert is_foldable(source)
                            assert f"{short_inline_text(source)} ({source.op.name})" in values
                            folded += 1
        assert folded  # constants and shape STACKs are folded into their users, shown as values


def test_a_kernels_steps_inside_a_stage_say_so_in_plain_words(softmax):
    state = PlayerState(softmax.trace)
    state.select("Rangeify")
    scopes = set()
    for step in range(1, state.current.step_count + 1):
        state.step = step
        scopes.add(state.frame().scope)
    for kernel in {k.name for k in softmax.kernels}:
        opening = f"this step rewrote kernel {kernel} while Rangeify was building it"
        assert any(s.startswith(opening) for s in scopes)
    assert not any("a piece" in s or "nested pass" in s for s in scopes)
