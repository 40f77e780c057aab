"""Reports and the explorer for compiled tensors (uv.compile): every tab is built from the program,
and the report's embedded state matches what the compiler produced."""

from __future__ import annotations

import json
import re
import textwrap

import numpy as np
import pytest

import uopviz as uv
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
    text = out.read_text()
    page = parse(out)
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
    assert len(dags) == 2  # the tensor graph and the kernel's AST
    assert {n["op"] for n in dags[1]["graph"]["nodes"]} >= {"RANGE", "LOAD", "STORE", "REDUCE"}


def test_explore_a_tensor_a_program_and_a_kernel():
    rng = np.random.default_rng(3)
    x = uv.Tensor(rng.random((8, 4), dtype=np.float32))
    y = (x * 2.0).sum(axis=1)
    tab = uv.explore(y)
    assert tab.titles == ("Graph", "Pipeline", "Kernels", "Backends")
    graph, player, tuner, _ = tab.children
    assert isinstance(graph, GraphView) and graph.node_count == layout(y.uop).number_of_nodes()
    assert isinstance(player, RewritePlayer)
    assert [p["name"] for p in player.passes if p["depth"] == 0] == STAGES
    assert isinstance(tuner, KernelTuner) and len(tuner.kernels) == len(uv.compile(y).kernels)
    program = uv.compile(y, backend="c")
    assert uv.explore(program).titles == ("Graph", "Pipeline", "Kernels", "Backends")
    kernel_tab = uv.explore(program.kernels[0])
    assert kernel_tab.titles == ("Graph", "Kernels", "Backends")
    assert kernel_tab.children[0].uop is program.kernels[0].ast
    both = uv.explore([y, x + 1.0])
    assert both.explorer_name == "list of Tensors" and both.children[0].graph["nodes"]
    assert json.dumps(both.children[0].graph)  # plain JSON for the front end
