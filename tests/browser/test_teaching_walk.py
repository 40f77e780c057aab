"""A teaching walk in a real browser (issue 24): a student's conv2d + relu + softmax program in
JupyterLab, followed through the eight stages in the rewrite player; at Render the source is shown,
a line of it is clicked and its UOp is selected in the graph with the rewrite step that created it
and the Tensor method it descends from; the step is jumped to, and a node selected at Render lights
up its source lines.  Screenshots go to tests/artifacts/; the walk's wall time to walk_time.txt."""

from __future__ import annotations

import json
import re
import time

import pytest
from test_tour import output_of, run_all_cells, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(1200)]

STAGES = ("Callify", "Rangeify", "Optimize", "Expand", "Instruction Selection", "Linearize",
          "Register/Memory Plan", "Render")

PROGRAM = """\
import numpy as np
import uopviz as uv

rng = np.random.default_rng(0)
x = uv.Tensor(rng.random((1, 3, 8, 8), dtype=np.float32))
w = uv.Tensor(rng.random((4, 3, 3, 3), dtype=np.float32))
y = x.conv2d(w).relu().reshape(1, -1).softmax(axis=1)
program = uv.compile(y, backend="c", opts="heuristic")
print([kernel.name for kernel in program.kernels])"""

PLAYER = """\
player = uv.widgets.RewritePlayer(program.trace, pass_name="Callify", backend="c", height=560)
player"""


def notebook(*cells: str) -> str:
    """An nbformat 4 notebook of code cells, unexecuted."""
    return json.dumps({
        "cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                   "source": cell} for cell in cells],
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
        "nbformat": 4, "nbformat_minor": 5,
    })


def show_stage(page, player, stage: str) -> None:
    """Choose ``stage`` in the pass list and go to its last step."""
    player.locator(".uv-pass .uv-pass-name", has_text=stage).first.click()
    wait_until(lambda: player.locator(".uv-pass.uv-active .uv-pass-name").inner_text().strip() == stage,
               page, f"stage {stage} to be shown")
    player.click(position={"x": 5, "y": 5})
    page.keyboard.press("End")
    # the slider follows the position at once; the frame (graph and sources) is drawn when it
    # arrives, and drawFrame writes its step into data-step: wait for both
    at_last_step = ("el => { const s = el.querySelector('input.uv-slider');"
                    " return s && s.value === s.max && el.dataset.step === s.max; }")
    page.wait_for_function(at_last_step, arg=player.element_handle(), timeout=60_000)


def test_a_teaching_walk_links_source_lines_to_their_uops_and_steps(isolated_lab, browser_page,
                                                                   artifacts_dir):
    page = browser_page
    page.set_viewport_size({"width": 1500, "height": 2600})  # the player and its four sources in sight
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    (isolated_lab.root / "notebooks" / "teaching_walk.ipynb").write_text(notebook(PROGRAM, PLAYER))
    run_all_cells(page, isolated_lab, "notebooks/teaching_walk.ipynb", artifacts_dir)
    assert not page.locator(".jp-RenderedText", has_text="Traceback").count()
    started = time.monotonic()

    player = output_of(page, "player = uv.widgets.RewritePlayer").locator(".uv-player")
    player.wait_for(timeout=60_000)
    player.scroll_into_view_if_needed()
    for number, stage in enumerate(STAGES, start=1):
        show_stage(page, player, stage)
        assert player.locator(".uv-node").count() > 0, stage
        slug = stage.lower().replace(" ", "_").replace("/", "_")
        player.screenshot(path=str(artifacts_dir / f"{number:02d}_{slug}.png"))

    # Render: the sources, their lines clickable
    sources = player.locator(".uv-textbox .uv-source")
    assert sources.count() == 4 and "void " in sources.first.inner_text()
    mapped = player.locator(".uv-textbox .uv-line-mapped")
    assert mapped.count() > 100
    # exp's log2(e), which Instruction Selection's 'decompose exp' writes into softmax's kernels
    line = player.locator(".uv-textbox .uv-line-mapped", has_text="1.4426950408889634f").first
    key = line.get_attribute("data-key")
    line.scroll_into_view_if_needed()
    line.click()
    wait_until(lambda: player.locator(f".uv-node.uv-selected[data-key='{key}']").count() == 1, page,
               "the line's UOp to be selected", artifacts=artifacts_dir)
    origin = player.locator(".uv-origin:not([hidden])").first
    text = origin.inner_text()
    # the creating step is exact, and the rebuilt kernel's arithmetic descends from the method the
    # user called (docs/design/architecture.md, Provenance)
    assert "created by rule 'decompose exp'" in text, text
    assert re.search(r"descends from Tensor\.softmax at ", text), text
    assert "line " in text and "uv-line-selected" in line.get_attribute("class")
    rule = text.split("created by", 1)[1].split("'")[1]  # rule 'name' (file:line), step k of pass 'p'
    assert player.locator("table.uv-details").count() == 1  # the node's side panel
    player.screenshot(path=str(artifacts_dir / "09_render_line_clicked.png"))

    # jump to the step that created it: that step is shown, its rule named, the node selected there
    origin.locator("button.uv-jump").click()
    wait_until(lambda: player.locator(".uv-pass.uv-active .uv-pass-name").inner_text().strip() != "Render",
               page, "the creating step's pass", artifacts=artifacts_dir)
    wait_until(lambda: player.locator(".uv-rule-name").first.inner_text().strip() == rule, page,
               f"rule {rule!r} to be shown", artifacts=artifacts_dir)
    wait_until(lambda: player.locator(f".uv-node.uv-selected[data-key='{key}']").count() == 1, page,
               "the UOp to be selected in the creating step", artifacts=artifacts_dir)
    assert player.locator(".uv-location").first.inner_text().strip()  # file:line of the rule
    player.screenshot(path=str(artifacts_dir / "10_creating_step.png"))

    # the reverse: a node selected at Render lights up the lines written for it
    show_stage(page, player, "Render")
    store = player.locator(".uv-textbox .uv-line-mapped", has_text="data0[").first
    store_key = store.get_attribute("data-key")
    player.locator(f".uv-node[data-key='{store_key}']").dispatch_event("click")  # (may lie outside the view)
    wait_until(lambda: player.locator(f".uv-line-selected[data-key='{store_key}']").count() >= 1, page,
               "the node's source lines to light up", artifacts=artifacts_dir)
    player.screenshot(path=str(artifacts_dir / "11_node_selected_lines_lit.png"))
    walk_s = time.monotonic() - started
    (artifacts_dir / "walk_time.txt").write_text(f"teaching walk (after the notebook ran): {walk_s:.1f} s\n")
    print(f"teaching walk: {walk_s:.1f} s")
    assert not errors, errors
