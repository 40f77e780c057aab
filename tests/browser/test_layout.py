"""The graph canvas's layout in a real browser (standalone pages, no server): the tool row is a bar
above the drawing (it covered nodes in the player), "fit" fills the view readably for a 2,000-node
graph (it was a strip using a fifth of the height), and an operator graph's empty side panel speaks
of operations, not UOps.  Screenshots go to tests/artifacts/."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import uopviz as uv
from uopviz.core.dtype import dtypes
from uopviz.core.ops import Ops
from uopviz.core.uop import UOp
from uopviz.widgets.embed import StaticPage
from uopviz.widgets.nnef_graph import OPERATOR_PANEL_PROMPT

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_tour import run_all_cells, wait_until  # noqa: E402  (the tour test's notebook helpers)

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]


def wide_graph(chains: int = 500) -> UOp:
    """``chains`` short chains of ops summed by a tree of ADDs: 2,000 drawn nodes, wide and shallow
    (the strip of the issue)."""
    x = UOp.param(0, (), dtypes.float32)
    values = [(x * float(i + 2) + 1.0) * 0.5 for i in range(chains)]
    while len(values) > 1:
        pairs = [values[i:i + 2] for i in range(0, len(values), 2)]
        values = [pair[0] + pair[1] if len(pair) == 2 else pair[0] for pair in pairs]
    return UOp(Ops.SINK, (values[0],))


def open_page(page, path, html: str) -> None:
    path.write_text(html)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready='1']")
    page.wait_for_timeout(400)  # the canvas places its view on the next animation frame
    assert not errors, errors


def box(locator) -> dict[str, float]:
    return locator.bounding_box()


def test_fit_fills_the_view_for_a_2000_node_graph_and_the_tools_sit_above_it(browser_page, artifacts_dir):
    graph = wide_graph()
    assert len(graph.toposort()) >= 2000
    page_html = StaticPage("wide")
    page_html.add_dag("Graph", "2,000 nodes", graph, height=700)
    page = browser_page
    open_page(page, artifacts_dir / "wide.html", page_html.render())
    view = page.locator(".uv-dag-widget").first
    viewport, tools = view.locator(".uv-viewport"), view.locator(".uv-tools")
    nodes = view.locator(".uv-nodes")
    assert view.locator(".uv-node").count() >= 2000
    # the tools are a bar of their own above the drawing, not over it
    assert box(tools)["y"] + box(tools)["height"] <= box(viewport)["y"] + 0.5
    assert viewport.locator(".uv-tools").count() == 0
    drawn, area = box(nodes), box(viewport)
    shown_height = min(drawn["y"] + drawn["height"], area["y"] + area["height"]) - max(drawn["y"], area["y"])
    view.screenshot(path=str(artifacts_dir / "wide_fit.png"))
    # fit fills the view's height (the whole graph at once was a thin strip) at a readable zoom,
    # says that part is shown, and "whole" still shows everything
    assert shown_height >= 0.6 * area["height"], (shown_height, area["height"])
    assert view.locator(".uv-dag").get_attribute("data-fit") == "partial"
    assert "part shown" in view.locator(".uv-info").inner_text()
    assert view.locator(".uv-svg.uv-lod").count() == 0  # labels are drawn
    view.locator(".uv-whole").click()
    page.wait_for_timeout(200)
    whole = box(nodes)
    assert whole["width"] <= area["width"] + 1 and whole["height"] < 0.4 * area["height"]
    view.screenshot(path=str(artifacts_dir / "wide_whole.png"))
    # shift+wheel scrolls along the graph
    view.locator(".uv-fit").click()
    page.wait_for_timeout(200)
    before = box(nodes)["x"]
    page.mouse.move(area["x"] + area["width"] / 2, area["y"] + area["height"] / 2)
    page.keyboard.down("Shift")
    page.mouse.wheel(0, 600)
    page.keyboard.up("Shift")
    page.wait_for_timeout(200)
    assert box(nodes)["x"] < before - 100


def test_a_small_graph_is_fitted_whole(browser_page, artifacts_dir):
    x = uv.Tensor([[1.0, 2.0], [3.0, 4.0]])
    page_html = StaticPage("small")
    page_html.add_dag("Graph", "small", (x.exp() + 1).uop)
    page = browser_page
    open_page(page, artifacts_dir / "small.html", page_html.render())
    view = page.locator(".uv-dag-widget").first
    assert view.locator(".uv-dag").get_attribute("data-fit") == "whole"
    assert view.locator(".uv-node[data-op='EXP']").count() == 1  # the op the user wrote
    drawn, area = box(view.locator(".uv-nodes")), box(view.locator(".uv-viewport"))
    assert area["x"] <= drawn["x"] and drawn["x"] + drawn["width"] <= area["x"] + area["width"] + 1
    assert area["y"] <= drawn["y"] and drawn["y"] + drawn["height"] <= area["y"] + area["height"] + 1
    view.screenshot(path=str(artifacts_dir / "small_fit.png"))


def test_the_players_tools_cover_no_node(browser_page, artifacts_dir):
    program = uv.compile([(uv.Tensor([1.0, 2.0, 3.0]).exp() * 2).sum()], "python")
    page_html = StaticPage("player")
    page_html.add_player("Pipeline", "player", program.trace)
    page = browser_page
    open_page(page, artifacts_dir / "player.html", page_html.render())
    player = page.locator(".uv-player").first
    player.click(position={"x": 5, "y": 5})
    page.keyboard.press("End")
    page.wait_for_timeout(400)
    tools = box(player.locator(".uv-tools"))
    tools_bottom = tools["y"] + tools["height"]
    tops = player.locator(".uv-node").evaluate_all("nodes => nodes.map(n => n.getBoundingClientRect().top)")
    assert tops and min(tops) >= tools_bottom - 0.5
    player.screenshot(path=str(artifacts_dir / "player_tools_above.png"))


def test_an_operator_graphs_empty_side_panel_speaks_of_operations(browser_page, artifacts_dir, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "main.sknd").write_text("""import math;

graph Tiny {
    @input { x: real[2, 3]; }
    @output { y: real[2, 3]; }
    @compose { e = math.exp(x); y = math.add(e, x); }
}
""")
    model = uv.nnef.load(folder)
    page_html = StaticPage("model")
    page_html.add_operator_graph("Model", "operators", model)
    page = browser_page
    open_page(page, artifacts_dir / "model.html", page_html.render())
    view = page.locator(".uv-dag-widget").first
    assert view.locator(".uv-panel-empty").inner_text() == OPERATOR_PANEL_PROMPT
    view.screenshot(path=str(artifacts_dir / "operator_graph_empty_panel.png"))
    view.locator(".uv-node").first.click()
    assert view.locator(".uv-panel-empty").count() == 0


SEARCH_NOTEBOOK_CELL = """
import sys
sys.path.insert(0, {benchmarks!r})
import uopviz as uv
from bench_nnef import resnet_text
from uopviz.widgets.model_view import ModelExplorer
explorer = ModelExplorer(uv.nnef.loads(resnet_text(blocks=70), progress=False))
explorer
"""


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_nnef_search_selects_and_reveals_a_match_in_jupyterlab(isolated_lab, browser_page, artifacts_dir):
    import nbformat

    benchmarks = str(Path(__file__).resolve().parents[2] / "benchmarks")
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(SEARCH_NOTEBOOK_CELL.format(
        benchmarks=benchmarks).strip())], metadata={"kernelspec": {
        "display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}})
    nbformat.write(notebook, isolated_lab.root / "notebooks" / "search.ipynb")
    page = browser_page
    page.set_viewport_size({"width": 1500, "height": 1300})
    run_all_cells(page, isolated_lab, "notebooks/search.ipynb", artifacts_dir)
    view = page.locator(".uv-dag-widget").first
    view.wait_for(timeout=60_000)
    assert view.locator(".uv-panel-empty").inner_text() == OPERATOR_PANEL_PROMPT
    box_input = page.locator(".jp-OutputArea input[type='text']").first
    # Enter selects the first match and brings it into view at a readable zoom
    box_input.fill("h12")
    # (as a person does: Enter once the matches are listed; on a loaded machine the kernel answers
    # the typed text late, and an Enter before it found nothing to select)
    matches = page.locator(".jp-OutputArea select").first
    wait_until(lambda: matches.locator("option").count() >= 1, page, "the matches of h12 to be listed")
    box_input.press("Enter")
    wait_until(lambda: view.locator(".uv-node.uv-selected").count() == 1, page, "Enter to select the match",
               artifacts=artifacts_dir)
    assert view.locator(".uv-node.uv-selected").get_attribute("data-key") == "op:60"
    selected, area = box(view.locator(".uv-node.uv-selected")), box(view.locator(".uv-viewport"))
    assert area["x"] <= selected["x"] <= area["x"] + area["width"] - selected["width"]
    assert area["y"] <= selected["y"] <= area["y"] + area["height"] - selected["height"]
    assert selected["height"] >= 0.7 * 40  # readable: at FOCUS_ZOOM or more
    page.screenshot(path=str(artifacts_dir / "search_enter.png"))
    # choosing another match from the list selects it
    box_input.fill("c17")
    wait_until(lambda: matches.locator("option").count() >= 2, page, "the matches to be listed")
    matches.select_option(index=1)
    wait_until(lambda: view.locator(".uv-node.uv-selected").get_attribute("data-key") == "op:83", page,
               "the chosen match to be selected", artifacts=artifacts_dir)
    page.screenshot(path=str(artifacts_dir / "search_chosen.png"))
