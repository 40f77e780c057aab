"""Inspecting big models (issue 12): the Model tab's search over operations and tensors, an
explorer that lowers only the operation opened and compiles the whole graph on request, operator
graph JSON with each definition text written once, the graph trait sent as one JSON buffer, and
progress reports (or bars) while loading, lowering and compiling.

How fast a 2,000-operation graph opens is measured in benchmarks/bench_operator_graph.py."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

import uopviz as uv
from uopviz.core import progress as progress_module
from uopviz.nnef.nnef1.loader import loads_nnef1
from uopviz.widgets.explorer import EAGER_COMPILE_OPERATIONS, WholeGraphCompiler
from uopviz.widgets.model_view import ModelExplorer
from uopviz.widgets.nnef_graph import operator_graph, operator_graph_json
from uopviz.widgets.views import graph_to_json

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_nnef import resnet_text  # noqa: E402  (the benchmarks' ResNet-style generator)


@pytest.fixture(scope="module")
def resnet():
    """A ResNet-style graph of 5 * 70 + 2 = 352 operations (above the eager-compile limit)."""
    graph = uv.nnef.loads(resnet_text(blocks=70), progress=False)
    assert len(graph.operations) > EAGER_COMPILE_OPERATIONS
    return graph


def test_search_finds_operations_and_tensors_and_reveals_them(resnet):
    explorer = ModelExplorer(resnet)
    found = explorer.search("conv c17")
    assert [key for _, key in found[:2]] == ["op:81", "op:83"]  # c17a, c17b
    assert all("nn.conv" in text and "c17" in text for text, _ in found)
    # a tensor leads to the operation computing it; a variable to its own node; exact names first
    assert explorer.search("s70")[0] == (f"operation {5 * 70 - 1}: math.add s70", f"op:{5 * 70 - 1}")
    assert ("tensor s70 real[1, 16, 8, 8]", f"op:{5 * 70 - 1}") in explorer.search("s70")
    assert explorer.search("w3a") == [("tensor w3a real[16, 16, 3, 3]", "variable:w3a")]
    assert len(explorer.search("relu")) == 50 and explorer.search("RELU h9")[0][1] == "op:45"
    assert explorer.search("") == [] and explorer.search("no-such-thing") == []
    # the box lists the matches; choosing one selects the node (the canvas centres on it)
    explorer.search_box.value = "h12"
    assert explorer.matches.options[0] == ("operation 60: nn.relu h12", "op:60")
    assert explorer.matches.layout.display == ""
    explorer.matches.value = "op:60"
    assert explorer.view.selected == "op:60" and not explorer.open_button.disabled
    assert "nn.relu" in explorer.selection.value
    explorer.search_box.value = "zzz"
    assert explorer.matches.layout.display == "none"
    with pytest.raises(KeyError, match="no node 'op:99999'"):
        explorer.reveal("op:99999")


def test_a_big_model_opens_without_compiling_the_graph(resnet):
    tab = uv.explore(resnet, backend="python")
    assert tab.titles == ("Model", "Kernels", "Operations")
    assert not resnet._programs and not resnet._lowered  # nothing lowered yet
    explorer = tab.children[0]
    tuner = explorer.open_kernels(81)  # one convolution: only that operation is lowered
    assert len(tuner.kernels) == 1 and len(resnet._lowered) == 1
    assert not resnet._programs
    assert isinstance(tab.children[1], WholeGraphCompiler)


def test_the_whole_graph_compiles_on_request_with_progress():
    graph = uv.nnef.loads(resnet_text(blocks=2), progress=False)
    tab = uv.explore(graph, backend="python", compile=False)
    panel = tab.children[tab.titles.index("Kernels")]
    assert isinstance(panel, WholeGraphCompiler) and panel.progress.layout.display == "none"
    program = panel.compile()
    assert panel.progress.value == panel.progress.max == len(graph.operations)
    assert list(panel.tabs) == ["Graph", "Pipeline", "Kernels", "Backends"]
    assert [k.name for k in panel.tabs["Kernels"].kernels] == [k.name for k in program.kernels]
    assert program is graph.compile(backend="python")  # the graph keeps it
    small = uv.explore(uv.nnef.loads(resnet_text(blocks=2), progress=False), backend="python")
    assert small.titles == ("Model", "Graph", "Pipeline", "Kernels", "Backends", "Operations")


def test_operator_graph_json_writes_each_definition_once(resnet):
    graph = operator_graph(resnet)
    data = operator_graph_json(graph)
    texts = data["texts"]
    assert len(texts) == len(set(texts)) == len({op.type for op in resnet.operations})
    for node in data["nodes"]:
        details = graph.nodes[node["k"]]["details"]
        if "definition" in details:
            assert texts[node["dd"]] == details["definition"] and "definition" not in node["d"]
        else:
            assert "dd" not in node and node["d"] == details
    view = ModelExplorer(resnet).view
    assert json.loads(bytes(graph_to_json(view.graph))) == view.graph  # the trait goes as one buffer


def test_progress_reports_while_loading_and_compiling():
    composed, compiled = [], []
    graph = uv.nnef.loads(resnet_text(blocks=2), progress=lambda *report: composed.append(report))
    assert composed == [(done, 12, None) for done in range(1, 13)]  # one per statement
    graph.compile(backend="python", progress=lambda *report: compiled.append(report))
    total = len(graph.operations)  # more than the statements: softmax is composed of several
    assert [report[:2] for report in compiled] == [(done, total) for done in range(total + 1)]
    assert compiled[-1][2] is None and compiled[0][2] is graph.operations[0]
    nnef1 = loads_nnef1(
        "version 1.0;\ngraph G( x ) -> ( y ) { x = external(shape = [2]); y = neg(x); z = exp(y); }",
        progress=lambda *report: composed.append(report),
    )
    assert nnef1.outputs == ["y"] and composed[-2:] == [(1, 2, None), (2, 2, None)]


def test_the_automatic_bar_appears_only_for_work_longer_than_the_delay(capsys, monkeypatch):
    monkeypatch.setattr(progress_module, "DELAY_S", 0.2)
    opened = []
    open_bar = progress_module._LateBar._open

    def counted_open(bar):
        opened.append(bar.description)
        open_bar(bar)

    monkeypatch.setattr(progress_module._LateBar, "_open", counted_open)
    with progress_module.progress_reporter(None, 3, "quick work") as report:
        report(3, 3)
    assert "quick work" not in capsys.readouterr().err
    assert opened == [], "quick work made a bar (and imported tqdm) it never drew"
    with progress_module.progress_reporter(None, 3, "slow work") as report:
        report(1, 3)
        time.sleep(0.5)  # no step ends for longer than the delay: the bar is drawn all the same
        report(3, 3, "last stage")
    drawn = capsys.readouterr().err
    assert opened == ["slow work"] and "slow work" in drawn and "last stage" in drawn and "3/3" in drawn
    with progress_module.progress_reporter(False, 3, "silent") as report:
        assert report is None
