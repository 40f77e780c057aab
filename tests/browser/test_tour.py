"""The tour notebook in a real browser: JupyterLab (isolated, token auth) driven by Playwright on
Debian's chromium.  Runs every cell, then checks that the DAG is drawn, that moving the player's
slider changes the graph, that applying an opt changes the source (and an invalid one changes
nothing), and that a standalone report opens from a file.  Screenshots go to tests/artifacts/.
"""

from __future__ import annotations

import re
import textwrap
import time
from pathlib import Path

import pytest

# Running a notebook may take RUN_TIMEOUT_S on a loaded 2-core machine, and a test runs up to two
# notebooks: the global 300 s pytest timeout would cut it short of its own deadlines.
pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(1200)]

TOUR = "notebooks/00_tour.ipynb"
RUN_TIMEOUT_S = 420


def run_all_cells(page, lab, notebook: str, artifacts: Path) -> None:
    """Open ``notebook``, run every cell from the Run menu, wait until each code cell has a number."""
    page.goto(lab.url(notebook))
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=90_000)
    page.locator("#jp-main-statusbar", has_text="Idle").wait_for(timeout=90_000)  # the kernel is up
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
    code_cells = page.locator(".jp-CodeCell")
    total = code_cells.count()
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while time.monotonic() < deadline:
        prompts = page.locator(".jp-CodeCell .jp-InputArea-prompt").all_inner_texts()
        if len(prompts) == total and all(re.fullmatch(r"\[\d+\]:", p.strip()) for p in prompts):
            return
        page.wait_for_timeout(1000)
    page.screenshot(path=str(artifacts / "timeout.png"), full_page=True)
    pytest.fail(f"the cells of {notebook} did not all finish in {RUN_TIMEOUT_S}s: prompts {prompts}")


def output_of(page, text_in_cell: str):
    """The output area of the code cell whose source contains ``text_in_cell``."""
    cell = page.locator(".jp-CodeCell", has=page.locator(".jp-InputArea", has_text=text_in_cell)).first
    return cell.locator(".jp-OutputArea")


def wait_until(condition, page, what: str, timeout_s: float = 30.0, artifacts: Path | None = None) -> None:
    """Poll ``condition()`` (locators re-query each time: views re-render their DOM) until true."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            if artifacts is not None:
                page.screenshot(path=str(artifacts / "failure.png"))
            pytest.fail(f"timed out after {timeout_s:.0f}s waiting for {what}")
        page.wait_for_timeout(200)


def wait_for_step(page, player, step: int) -> None:
    """Wait until the player shows ``step`` (its root's data-step)."""
    page.wait_for_function("([el, step]) => el.dataset.step === step",
                           arg=[player.element_handle(), str(step)], timeout=30_000)


def graph_keys(view) -> set[str]:
    return set(view.locator(".uv-node").evaluate_all("nodes => nodes.map(n => n.dataset.key)"))


def test_tour_runs_and_its_views_respond(isolated_lab, browser_page, artifacts_dir):
    page = browser_page
    page.set_viewport_size({"width": 1500, "height": 1900})  # tall: whole widgets fit in one screenshot
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    run_all_cells(page, isolated_lab, TOUR, artifacts_dir)
    assert page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']",
                        has_text="Traceback").count() == 0
    assert not page.locator(".jp-RenderedText", has_text="Traceback").count()

    # -- the DAG: every node of the graph model is drawn ------------------------------------------
    graph = output_of(page, "graph = uv.widgets.GraphView")
    graph.scroll_into_view_if_needed()
    view = graph.locator(".uv-dag-widget")
    view.wait_for()
    nodes, edges = (int(n) for n in re.findall(r"\d+", view.locator(".uv-info").inner_text())[:2])
    assert nodes >= 10 and view.locator(".uv-node").count() == nodes
    assert view.locator(".uv-edge").count() == edges
    assert view.locator(".uv-legend .uv-chip").count() == 10 + 9  # op families + AxisTypes
    first = view.locator(".uv-node").first
    first.click()
    assert view.locator(".uv-details th", has_text="min max").count() == 1
    view.screenshot(path=str(artifacts_dir / "01_dag.png"))

    # -- a program graph: kernels are CALL bodies, opened one by one from the selector ---------------
    bodies = output_of(page, "bodies.open_body").locator(".uv-dag-widget")
    bodies.scroll_into_view_if_needed()
    selector = bodies.locator("select.uv-bodies")
    assert selector.input_value().startswith("only:")  # set from Python: one kernel open
    one_open = bodies.locator(".uv-node").count()
    assert bodies.locator(".uv-node[data-op='CALL'] .uv-toggle").count() >= 1
    bodies.screenshot(path=str(artifacts_dir / "01b_program_one_body.png"))
    selector.select_option("none")  # Python lays the graph out again with every body collapsed
    wait_until(lambda: bodies.locator(".uv-node").count() < one_open, page, "the bodies to collapse",
               artifacts=artifacts_dir)
    selector.select_option("all")
    wait_until(lambda: bodies.locator(".uv-node").count() >= one_open, page, "every body to open",
               artifacts=artifacts_dir)
    bodies.screenshot(path=str(artifacts_dir / "01c_program_all_bodies.png"))

    # -- the explorer: its tabs switch between the views -----------------------------------------------
    explorer = output_of(page, "uv.explore(y)").locator(".uv-explorer")
    explorer.scroll_into_view_if_needed()
    titles = explorer.locator(".lm-TabBar-tabLabel").all_inner_texts()
    assert titles == ["Graph", "Pipeline", "Kernels", "Backends"]
    explorer.locator("button", has_text="program: one CALL per kernel").click()  # the Graph tab's 2nd graph
    program_view = explorer.locator(".uv-dag-widget").first  # (the Kernels tab holds another, hidden)
    selector = program_view.locator("select.uv-bodies")
    selector.wait_for(timeout=20_000)
    options = selector.locator("option").evaluate_all("options => options.map(o => o.value)")
    assert len([o for o in options if o.startswith("only:")]) == 2  # the program's FUNCTION and its CALL
    assert program_view.locator(".uv-node[data-op='CALL']").count() == 1
    explorer.screenshot(path=str(artifacts_dir / "00_explorer_program.png"))
    explorer.locator(".lm-TabBar-tab", has_text="Pipeline").click()
    explorer.locator(".uv-player").wait_for(timeout=20_000)
    assert explorer.locator(".uv-player .uv-node").count() > 0
    explorer.screenshot(path=str(artifacts_dir / "00_explorer_pipeline.png"))

    # -- the player: moving the slider changes the step and the graph -------------------------------
    player = output_of(page, "player = uv.widgets.RewritePlayer").locator(".uv-player")
    player.scroll_into_view_if_needed()
    player.screenshot(path=str(artifacts_dir / "02_player_step1.png"))
    before_step, before_keys = player.get_attribute("data-step"), graph_keys(player)
    slider = player.locator("input.uv-slider")
    maximum = int(slider.get_attribute("max"))
    assert maximum > 3
    slider.fill(str(maximum))
    wait_for_step(page, player, maximum)
    assert player.get_attribute("data-step") == str(maximum) != before_step
    assert graph_keys(player) != before_keys
    assert player.locator(".uv-rule-name").inner_text().strip()
    player.locator(".uv-slider").focus()
    player.screenshot(path=str(artifacts_dir / "03_player_last_step.png"))
    player.click(position={"x": 5, "y": 5})
    page.keyboard.press("Home")
    wait_for_step(page, player, 0)
    page.keyboard.press("ArrowRight")
    wait_for_step(page, player, 1)

    # -- every stage readable: Render shows the kernel's source, Linearize its listing, a pass its rules
    player.locator(".uv-pass", has_text="Render").first.click()
    source = player.locator(".uv-textbox .uv-source")
    source.first.wait_for(timeout=30_000)
    assert "void " in source.first.inner_text() and "{" in source.first.inner_text()
    assert "Source of r_" in player.locator(".uv-textbox").inner_text()
    player.screenshot(path=str(artifacts_dir / "03b_player_render_source.png"))
    player.locator(".uv-pass", has_text="Linearize").first.click()
    listing = player.locator(".uv-textbox .uv-listing")
    listing.first.wait_for(timeout=30_000)
    assert listing.first.inner_text().splitlines()[0].strip().startswith("0: ")
    player.screenshot(path=str(artifacts_dir / "03d_player_linearize_listing.png"))
    player.locator(".uv-pass", has_text="Instruction Selection").first.click()
    rules = player.locator("details.uv-rules")
    rules.locator("summary", has_text="Rules of Instruction Selection:").wait_for(timeout=30_000)
    rules.locator("summary").click()
    first_rule = rules.locator(".uv-rule-count").first.locator("span").first.inner_text()
    rules.locator("input.uv-rule-filter").fill(first_rule)
    rules.locator(".uv-rule-steps a").first.wait_for(timeout=10_000)
    shown_rules = rules.locator(".uv-rule-count > span:first-child").all_inner_texts()
    assert first_rule in shown_rules and all(first_rule in rule for rule in shown_rules)  # only matching rows
    player.screenshot(path=str(artifacts_dir / "03c_player_rules_filtered.png"))
    # the side panel links the drawn sources and lists folded constants as values
    player.locator(".uv-node[data-op='STORE']").first.dispatch_event("click")  # (may lie outside the view)
    panel = player.locator("table.uv-details")
    panel.wait_for(timeout=10_000)
    assert "values" in panel.locator("th").all_inner_texts()
    # below the details, "Why didn't a rule fire?": Python tries the stage's rules on the node (comm)
    why = player.locator(".uv-why")
    why.locator(".uv-why-set summary").nth(1).wait_for(timeout=30_000)
    assert "instruction selection applies to STORE" in why.inner_text()
    assert why.locator(".uv-why-rule .uv-location").first.inner_text().startswith("uopviz/passes/isel.py:")
    player.screenshot(path=str(artifacts_dir / "03e_player_side_panel.png"))

    # -- the tuner: an opt changes the source; an invalid one only says why --------------------------
    tuner = output_of(page, "tuner = uv.widgets.KernelTuner").locator(".uv-tuner")
    tuner.scroll_into_view_if_needed()
    c_source = tuner.locator(".uv-source", has=page.locator(".uv-source-head", has_text="c ")).first
    before_source = c_source.inner_text()
    axes_before = tuner.locator(".uv-axes").inner_text()
    tuner.locator("button", has_text="Apply").click()
    wait_until(lambda: c_source.inner_text() != before_source, page, "the c source to change",
               artifacts=artifacts_dir)
    assert tuner.locator(".uv-message.uv-ok").count() == 1
    assert tuner.locator(".uv-axes").inner_text() != axes_before
    tuner.screenshot(path=str(artifacts_dir / "04_tuner_applied.png"))
    after_source = c_source.inner_text()
    factor_box = tuner.locator(".widget-inline-hbox", has=page.locator("label", has_text="factor"))
    factor = factor_box.locator("input")
    factor.fill("3")
    factor.press("Enter")
    tuner.locator("button", has_text="Apply").click()
    tuner.locator(".uv-message.uv-error").wait_for(timeout=30_000)
    assert "not valid" in tuner.locator(".uv-message.uv-error").inner_text()
    assert c_source.inner_text() == after_source
    tuner.locator(".uv-message").screenshot(path=str(artifacts_dir / "05_tuner_invalid.png"))
    tuner.locator("button", has_text="Time on all backends").click()  # a bokeh chart, drawn offline
    tuner.locator(".uv-bokeh[data-drawn='1']").wait_for(timeout=120_000)
    tuner.locator(".uv-bokeh").scroll_into_view_if_needed()
    page.wait_for_timeout(500)
    assert tuner.locator(".uv-bokeh canvas").count() + tuner.locator(".uv-bokeh .bk-Canvas").count() > 0 or \
        tuner.locator(".uv-bokeh").evaluate("el => el.innerHTML.length") > 100
    tuner.locator(".uv-bokeh").screenshot(path=str(artifacts_dir / "07_tuner_timings.png"))
    page.screenshot(path=str(artifacts_dir / "06_tour.png"))
    assert not errors, errors


def test_uops_notebook_collapses_a_function_body_from_the_browser(isolated_lab, browser_page, artifacts_dir):
    page = browser_page
    page.set_viewport_size({"width": 1500, "height": 1900})
    run_all_cells(page, isolated_lab, "notebooks/01_uops_and_rewrites.ipynb", artifacts_dir)
    view = output_of(page, "def scale_shift").locator(".uv-dag-widget")
    view.scroll_into_view_if_needed()
    expanded = view.locator(".uv-node").count()
    assert view.locator(".uv-cluster").count() == 1 and view.locator(".uv-node[data-op='PARAM']").count() == 2
    view.screenshot(path=str(artifacts_dir / "function_expanded.png"))
    view.locator(".uv-node[data-op='FUNCTION'] .uv-toggle").click()  # Python lays the graph out again
    wait_until(lambda: view.locator(".uv-node").count() < expanded, page, "the body to collapse",
               artifacts=artifacts_dir)
    assert view.locator(".uv-node[data-op='PARAM']").count() == 0 and view.locator(".uv-cluster").count() == 0
    view.screenshot(path=str(artifacts_dir / "function_collapsed.png"))
    view.locator(".uv-node[data-op='FUNCTION'] .uv-toggle").click()
    wait_until(lambda: view.locator(".uv-node").count() == expanded, page, "the body to open again",
               artifacts=artifacts_dir)


REPORT_SOURCE = textwrap.dedent("""
    import numpy as np
    import uopviz as uv

    def main():
        rng = np.random.default_rng(1)
        x = uv.Tensor(rng.random((16, 32), dtype=np.float32))
        w = uv.Tensor(rng.random((32, 8), dtype=np.float32))
        return (x @ w).relu()
""")


def test_report_opens_from_a_file_without_a_server(browser_page, artifacts_dir, tmp_path):
    from uopviz.report import write_report

    source = tmp_path / "model.py"
    source.write_text(REPORT_SOURCE)
    report = write_report(source, artifacts_dir / "report.html", opts=None, time_kernels=True)
    page = browser_page
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(report.as_uri())
    page.wait_for_selector("body[data-ready='1']")
    graph = page.locator(".rp-panel.rp-active .uv-dag-widget").first
    graph.wait_for()
    assert graph.locator(".uv-node").count() >= 8
    page.screenshot(path=str(artifacts_dir / "report_graph.png"), full_page=True)

    # the program after Rangeify: the FUNCTION and the kernel's CALL open one by one (embedded layouts)
    program = page.locator(".rp-panel.rp-active .uv-dag-widget").nth(1)
    program.scroll_into_view_if_needed()
    selector = program.locator("select.uv-bodies")
    views = selector.locator("option").evaluate_all("options => options.map(o => o.value)")
    assert views[:2] == ["all", "none"] and len([v for v in views if v.startswith("only:")]) == 2
    everything = program.locator(".uv-node").count()
    selector.select_option("none")
    wait_until(lambda: program.locator(".uv-node").count() < everything, page, "every body to collapse")
    assert program.locator(".uv-node[data-op='FUNCTION']").count() == 1
    program.locator(".uv-node[data-op='FUNCTION'] .uv-toggle").click()  # opens the FUNCTION body alone
    wait_until(lambda: program.locator(".uv-node[data-op='CALL']").count() == 1, page, "the FUNCTION to open")
    assert selector.input_value() == views[2] and program.locator(".uv-node[data-op='RANGE']").count() == 0
    program.screenshot(path=str(artifacts_dir / "report_program_function_open.png"))
    program.locator(".uv-node[data-op='CALL'] .uv-toggle").click()  # and then the kernel inside it
    wait_until(lambda: program.locator(".uv-node[data-op='RANGE']").count() > 0, page, "the CALL to open")
    assert program.locator(".uv-node").count() == everything and program.locator(".uv-cluster").count() == 2
    program.screenshot(path=str(artifacts_dir / "report_program_kernel_open.png"))

    page.locator(".rp-tab", has_text="Pipeline").click()
    player = page.locator(".rp-panel.rp-active .uv-player").first
    player.wait_for()
    step, keys = player.get_attribute("data-step"), graph_keys(player)
    player.click(position={"x": 5, "y": 5})
    page.keyboard.press("End")
    page.wait_for_function("([el, s]) => el.dataset.step !== s", arg=[player.element_handle(), step])
    assert graph_keys(player) != keys
    page.screenshot(path=str(artifacts_dir / "report_player.png"), full_page=True)
    # every step of a stage shows the whole program (no step is shown locally with a note)
    for stage in ("Rangeify", "Render"):
        player.locator(".uv-pass", has_text=stage).first.click()
        player.click(position={"x": 5, "y": 5})
        page.keyboard.press("End")
        page.wait_for_timeout(300)
        assert player.locator(".uv-note").count() == 0
        assert player.locator(".uv-node[data-op='FUNCTION']").count() == 1, stage
    # its middle steps made in a nested pass are drawn once, in that pass's graph, and say so (the
    # report embeds them as references: the whole program at every step made it 4x larger)
    player.locator(".uv-pass", has_text="Rangeify").first.click()
    player.click(position={"x": 5, "y": 5})
    page.keyboard.press("Home")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    wait_until(lambda: player.locator(".uv-scope").count() == 1, page, "a step in a nested pass's graph")
    assert "nested pass" in player.locator(".uv-scope").inner_text()
    assert player.locator(".uv-node").count() >= 2
    page.screenshot(path=str(artifacts_dir / "report_player_nested_step.png"), full_page=True)
    # "Why didn't a rule fire?" needs Python: the report says so instead of asking
    player.locator(".uv-node").first.dispatch_event("click")
    assert "Needs a live notebook" in player.locator(".uv-why").inner_text()
    page.locator(".rp-tab", has_text="Kernels").click()
    kernels = page.locator(".rp-panel.rp-active")
    assert kernels.locator(".uv-source").count() >= 2 and kernels.locator(".bk-Figure, .bk-Row, .bk-root, "
                                                                             "[data-root-id]").count() >= 1
    page.wait_for_timeout(500)
    page.screenshot(path=str(artifacts_dir / "report_kernels.png"), full_page=True)
    assert all(url.startswith("file://") or url.startswith("data:") for url in requests), requests
    assert not errors, errors
