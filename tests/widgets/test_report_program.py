"""Reports and the explorer for compiled tensors (uv.compile): every tab is built from the program,
and the report's embedded state matches what the compiler produced."""

from __future__ import annotations

import json
import re
import textwrap
import urllib.parse

import numpy as np
import pytest

import uopviz as uv
from uopviz.passes.optops.kernel import Kernel
from uopviz.widgets.graph import layout
from uopviz.widgets.tuner_view import KernelTuner
from uopviz.widgets.views import GraphView, RewritePlayer

from .test_report import parse

STAGES = ["Callify", "Rangeify", "Optimize", "Expand", "Instruction Selection", "Linearize",
          "Register/Memory Plan", "Render"]

SOURCE = textwrap.dedent("""
    import numpy as np
    import uopviz as uv

    def main():
        rng = np.random.default_rng({seed})
        x = uv.Tensor(rng.random(({m}, {k}), dtype=np.float32))
        w = uv.Tensor(rng.random(({k}, {n}), dtype=np.float32))
        return (x @ w).relu()
""")


@pytest.mark.parametrize("m,k,n", [(4, 8, 2), (16, 8, 12)])
def test_report_of_tensors_has_graph_pipeline_kernels_and_backends(tmp_path, m, k, n):
    from uopviz.report import write_report

    source = tmp_path / "model.py"
    source.write_text(SOURCE.format(seed=m, m=m, k=k, n=n))
    out = write_report(source, tmp_path / "r.html", opts=None, backends=["c", "python"], time_kernels=True)
    page = parse(out)
    text = out.read_text() + json.dumps(page.states)  # with the states, some embedded compressed
    tabs = re.findall(r'<button class="rp-tab" data-tab="t\d+">([^<]+)</button>', text)
    assert tabs == ["Graph", "Pipeline", "Kernels", "Backends"]
    player = next(s for s in page.states if s["kind"] == "player")
    top_level = [p["name"] for p in player["passes"] if p["depth"] == 0]
    assert top_level == STAGES
    zeros = uv.Tensor(np.zeros((m, k), np.float32)) @ uv.Tensor(np.zeros((k, n), np.float32))
    program = uv.compile(zeros.relu(), backend="c")
    (kernel,) = program.kernels
    assert kernel.name in text and f"{kernel.name}(" in text  # the C source names its function
    assert "Bokeh" in text and "roofline" in text
    assert "<table" in text and "vector widths" in text
    dags = [s for s in page.states if s["kind"] == "dag"]
    assert len(dags) == 3  # the tensor graph, the program after Rangeify, and the kernel's AST
    assert {n["op"] for n in dags[2]["graph"]["nodes"]} >= {"RANGE", "LOAD", "STORE", "REDUCE"}
    (call,) = [u for u in program.trace.find("Rangeify").output.toposort() if u.op is uv.Ops.CALL]
    titles = [b["title"] for b in dags[1]["bodies"]]
    assert titles == ["FUNCTION 0 of 2 inputs", f"CALL 0 {Kernel(call.src[0]).name}"]


@pytest.mark.parametrize("m,k,n,opts", [(4, 8, 2, None), (16, 32, 12, "heuristic")])
def test_report_embeds_each_kernels_tuning_session_which_loads_back(tmp_path, m, k, n, opts):
    from uopviz.report import write_report
    from uopviz.widgets.tuner import TunerState

    source = tmp_path / "model.py"
    source.write_text(SOURCE.format(seed=m, m=m, k=k, n=n))
    out = write_report(source, tmp_path / "r.html", opts=opts, backends=["c"], time_kernels=True)
    page = parse(out)
    text = out.read_text() + json.dumps(page.states)
    pattern = r'download="([^"]+)\.session\.json" href="data:application/json;charset=utf-8,([^"]+)"'
    links = re.findall(pattern, text)
    rng = np.random.default_rng(m)
    x, w = rng.random((m, k), dtype=np.float32), rng.random((k, n), dtype=np.float32)
    program = uv.compile((uv.Tensor(x) @ uv.Tensor(w)).relu(), backend="c", opts=opts)
    assert [name for name, _ in links] == [kernel.name for kernel in program.kernels]
    for (name, quoted), kernel in zip(links, program.kernels, strict=True):
        session = json.loads(urllib.parse.unquote(quoted))
        assert session["kernel"]["name"] == name and session["target"] and session["device"]
        (timing,) = session["timings"]  # the report timed the kernel once on C
        assert timing["timing"]["backend"] == "c"
        tuner = TunerState(kernel)
        tuner.load_session(session)
        assert tuner.kernel.opts == kernel.opts and len(tuner.timing_history) == 1


def test_report_builds_the_timed_kernels_during_the_player_and_times_none_beside_a_build(
    tmp_path, monkeypatch
):
    """Issue #24: the kernels are compiled in the worker (every backend's, C's side by side) while the
    player's frames are made; the timings wait for the builds and time what was built."""
    import time

    from uopviz.backends.worker import Worker
    from uopviz.report import write_report
    from uopviz.widgets import embed
    from uopviz.widgets.tuner import TunerState

    events: list[tuple[str, float, float]] = []
    built: set[tuple[str, str, str]] = set()
    compiled: list[tuple[str, str, str]] = []

    def recorded(kind, function, note=lambda *a, **k: None):
        def run(*args, **kwargs):
            started = time.monotonic()
            note(*args, **kwargs)
            result = function(*args, **kwargs)
            events.append((kind, started, time.monotonic()))
            return result
        return run

    def note_many(worker, backend, sources, **_):
        built.update((backend, source, name) for source, name in sources)

    def note_one(worker, backend, source, name, **_):
        compiled.append((backend, source, name))

    monkeypatch.setattr(Worker, "compile_many", recorded("build", Worker.compile_many, note_many))
    monkeypatch.setattr(Worker, "compile", recorded("compile", Worker.compile, note_one))
    monkeypatch.setattr(TunerState, "timing", recorded("timing", TunerState.timing))
    monkeypatch.setattr(embed, "player_state", recorded("player", embed.player_state))
    source = tmp_path / "model.py"
    source.write_text(SOURCE.format(seed=2, m=4, k=8, n=2))
    write_report(source, tmp_path / "r.html", opts=None, backends=["c", "python"], time_kernels=True)
    builds = [e for e in events if e[0] == "build"]
    (player,) = [e for e in events if e[0] == "player"]
    timings = [e for e in events if e[0] == "timing"]
    assert {backend for backend, _, _ in built} == {"c", "python"} and len(timings) == 2
    assert min(start for _, start, _ in builds) < player[2]  # started before the player's frames ended
    assert max(end for _, _, end in builds) <= min(start for _, start, _ in timings)
    assert compiled and set(compiled) <= built  # each timing's build was one already made


SOFTMAX_OF_FUNCTIONS = textwrap.dedent("""
    import numpy as np
    import uopviz as uv

    @uv.function
    def scale(a):
        return a * 2

    @uv.function
    def shift(a, b):
        return a + b

    def main():
        x = uv.Tensor(np.random.default_rng({seed}).standard_normal(({rows}, {cols})).astype(np.float32))
        return shift(scale(x), x).softmax()
""")


def _hydrated(state: dict, graph: dict) -> list[dict]:
    table = state.get("node_table", {})
    return [dict(table.get(n["k"], {}), **n) for n in graph["nodes"]]


@pytest.mark.parametrize("rows,cols", [(4, 8), (3, 16)])
def test_report_opens_function_and_call_bodies_one_by_one(tmp_path, rows, cols):
    from uopviz.report import write_report

    source = tmp_path / "functions.py"
    source.write_text(SOFTMAX_OF_FUNCTIONS.format(seed=rows, rows=rows, cols=cols))
    out = write_report(source, tmp_path / "r.html", opts=None, backends=["python"], time_kernels=False)
    tensor_dag, program_dag = [s for s in parse(out).states if s["kind"] == "dag"][:2]
    namespace: dict = {}
    exec(SOFTMAX_OF_FUNCTIONS.format(seed=rows, rows=rows, cols=cols), namespace)
    program = uv.compile(namespace["main"](), backend="python", build=False)
    assert [b["title"] for b in tensor_dag["bodies"]] == ["FUNCTION 0 of 1 input", "FUNCTION 1 of 2 inputs"]
    calls = [u for u in program.trace.find("Rangeify").output.toposort() if u.op is uv.Ops.CALL]
    assert len(calls) == len(program.kernels) == 3
    titles = [b["title"] for b in program_dag["bodies"]]
    expected = [f"CALL {i} {Kernel(c.src[0]).name}" for i, c in enumerate(calls)]
    assert titles == ["FUNCTION 0 of 1 input"] + expected  # a body first, then the bodies it holds
    assert [b["parent"] for b in program_dag["bodies"]] == [None] + [program_dag["bodies"][0]["key"]] * 3
    for state in (tensor_dag, program_dag):
        bodies = state["bodies"]
        variants = state["variants"]
        assert set(variants) == {"all", "none"} | {"only:" + b["key"] for b in bodies}
        everything = {n["k"]: n for n in _hydrated(state, variants["all"])}
        assert all(everything[b["key"]]["col"] == 1 for b in bodies)  # every body open
        closed = {n["k"]: n for n in _hydrated(state, variants["none"])}
        outermost = [b for b in bodies if b["parent"] is None]
        assert all(closed[b["key"]]["col"] == 2 for b in outermost) and len(closed) < len(everything)
        for body in bodies:
            shown = {n["k"]: n for n in _hydrated(state, variants["only:" + body["key"]])}
            assert shown[body["key"]]["col"] == 1, body["title"]  # this body open...
            around = {body["parent"]} if body["parent"] else set()
            for other in bodies:  # ...the others collapsed (or hidden inside a collapsed one)
                if other["key"] != body["key"] and other["key"] not in around and other["key"] in shown:
                    assert shown[other["key"]]["col"] == 2, (body["title"], other["title"])
            assert "ops hidden" not in shown[body["key"]]["l"]
            assert len(closed) < len(shown) <= len(everything)


def test_explore_a_tensor_a_program_and_a_kernel():
    rng = np.random.default_rng(3)
    x = uv.Tensor(rng.random((8, 4), dtype=np.float32))
    y = (x * 2.0).sum(axis=1)
    tab = uv.explore(y)
    assert tab.titles == ("Graph", "Pipeline", "Kernels", "Backends")
    choice, player, tuner, _ = tab.children
    graph = choice.view
    assert isinstance(graph, GraphView) and graph.node_count == layout(y.uop).number_of_nodes()
    assert list(choice.graphs) == ["tensor graph", "program: one CALL per kernel"]
    choice.buttons.value = "program: one CALL per kernel"  # each kernel a CALL body, opened one by one
    assert graph.uop is choice.graphs["program: one CALL per kernel"]
    assert [b["title"].split()[:2] for b in graph.bodies][1:] == [
        ["CALL", str(i)] for i in range(len(uv.compile(y).kernels))]
    assert isinstance(player, RewritePlayer)
    assert [p["name"] for p in player.passes if p["depth"] == 0] == STAGES
    assert isinstance(tuner, KernelTuner) and len(tuner.kernels) == len(uv.compile(y).kernels)
    program = uv.compile(y, backend="c")
    assert uv.explore(program).titles == ("Graph", "Pipeline", "Kernels", "Backends")
    kernel_tab = uv.explore(program.kernels[0])
    assert kernel_tab.titles == ("Graph", "Kernels", "Backends")
    assert kernel_tab.children[0].uop is program.kernels[0].ast
    both = uv.explore([y, x + 1.0])
    assert both.explorer_name == "list of Tensors" and both.children[0].view.graph["nodes"]
    assert json.dumps(both.children[0].view.graph)  # plain JSON for the front end


CONV_SOFTMAX = textwrap.dedent("""
    import numpy as np
    import uopviz as uv
    x = uv.Tensor(np.random.default_rng({seed}).standard_normal((1, 3, {size}, {size})).astype(np.float32))
    w = uv.Tensor(np.random.default_rng({seed} + 1).standard_normal((8, 3, 3, 3)).astype(np.float32))
    out = x.conv2d(w).relu().reshape(1, -1).softmax(axis=1)
""")


def test_cli_report_of_a_conv_softmax_is_small_complete_and_says_its_progress(tmp_path, capsys):
    """Issue #24: this report was 18.4 MB (then 4.2 MB) with nothing printed while it was made."""
    from uopviz.cli import main as cli_main
    from uopviz.widgets.embed import embedded_frame

    source, out = tmp_path / "prog.py", tmp_path / "r.html"
    source.write_text(CONV_SOFTMAX.format(seed=3, size=16))
    # compiled for python (uv.compile's default, as with no --backend), shown and timed on C too
    assert cli_main(["report", str(source), "-o", str(out), "--backend", "python", "--backend", "c"]) == 0
    assert out.stat().st_size <= 2_000_000  # bytes of the written file
    err = capsys.readouterr().err.splitlines()
    for stage in ("running", "out: compiling", "out: player frames", "out: timing kernels", "writing"):
        assert any(line.startswith(f"uopviz report: {stage}") for line in err), (stage, err)
    assert any(re.fullmatch(r"uopviz report: out: player frames (\d+)/\1", line) for line in err), err
    page = parse(out)
    text = out.read_text() + json.dumps(page.states)
    # the inputs x and w are shown inside out's report, not as items of their own
    assert re.findall(r"<h2>(\w+): lowering pipeline</h2>", text) == ["out"]
    player = next(s for s in page.states if s["kind"] == "player")
    assert [p["name"] for p in player["passes"] if p["depth"] == 0] == STAGES
    for keys in player["frames"].values():
        assert all(embedded_frame(player, key)["graph"]["nodes"] for key in keys)
    namespace: dict = {}
    exec(source.read_text(), namespace)
    program = uv.compile(namespace["out"], backend="python", opts="heuristic")
    assert len(program.kernels) == 4
    for kernel in program.kernels:
        assert re.search(re.escape(kernel.name) + r"(</span>)?\(", text)  # its C source (highlighted)
        assert f"kernel {kernel.name}</h2>" in text
    scripts = next(s for s in page.states if s["kind"] == "scripts")
    assert "Bokeh" in scripts["scripts"][0] and len(scripts["scripts"]) == 1 + 4  # one figure a kernel
    assert "<table" in text and "vector widths" in text and "python" in text
