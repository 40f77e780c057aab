"""NNEF model graphs in the explorer and in reports: an Operations tab listing operations and tensors,
and the compiled program's tabs (checked against what the graph and uv.nnef compile)."""

from __future__ import annotations

import numpy as np
import pytest

import uopviz as uv
from uopviz.report import ReportError, load_source, write_report
from uopviz.widgets.models import is_model_graph, model_html

from .test_report import parse

MODEL = """
graph Net {{
  @input {{ x: real[{rows}, {cols}]; }}
  @output {{ y: real[{rows}, {cols}]; }}
  @compose {{ y = nn.relu(x); }}
}}
"""


@pytest.mark.parametrize("rows,cols", [(2, 3), (4, 8)])
def test_explore_a_model_graph(rows, cols):
    graph = uv.nnef.loads("import nn;\n" + MODEL.format(rows=rows, cols=cols))
    assert is_model_graph(graph) and not is_model_graph(graph.operations)
    tab = uv.explore(graph)
    assert tab.explorer_name == "model graph"
    assert tab.titles[0] == "Model" and tab.titles[-1] == "Operations"
    assert {"Graph", "Pipeline", "Kernels"} <= set(tab.titles)
    text = tab.children[-1].value
    assert "nn.relu" in text and f"({rows}, {cols})" in text and "<td" in text
    assert text == model_html(graph)
    kernels = tab.children[tab.titles.index("Kernels")].kernels
    assert [k.name for k in kernels] == [k.name for k in graph.compile(backend="c").kernels]


def test_report_of_an_nnef_file(tmp_path):
    model = tmp_path / "net.sknd"
    model.write_text("import nn;\n" + MODEL.format(rows=4, cols=4))
    ((name, graph),) = load_source(model)
    assert name == "net.sknd" and graph.operations[0].type == "nn.relu"
    out = write_report(model, tmp_path / "net.html", opts=None, time_kernels=False)
    text = out.read_text()
    assert '<button class="rp-tab" data-tab="t0">Model</button>' in text and "nn.relu" in text
    # the operator graph, the tensor graph and the program after Rangeify, and the pipeline
    assert sorted(s["kind"] for s in parse(out).states) == ["dag", "dag", "dag", "player"]
    broken = tmp_path / "broken.sknd"
    broken.write_text("graph {")
    with pytest.raises(ReportError, match="not a readable NNEF model"):
        load_source(broken)


def test_a_big_graph_of_kernel_bodies_opens_with_them_closed():
    # AlexNet's UOp graph has 25 kernel bodies (474 nodes open): the Graph tab opens them closed,
    # to be opened one by one, as reports do; a small program's graph opens whole
    from uopviz.nnef import examples

    model = uv.nnef.loads(examples.text("alexnet", fixed=True))
    tab = uv.explore(model, backend="python")
    view = tab.children[tab.titles.index("Graph")].view
    assert view.collapsed and len(view.graph["nodes"]) < 40
    small = uv.explore(uv.compile(uv.Tensor(np.ones((4, 4), np.float32)).sum(1), backend="python"))
    small_view = small.children[small.titles.index("Graph")].view
    assert not small_view.collapsed
