"""A tuning walk in a real browser (issue 24): a 512×512 matmul in ``uv.explore``'s tuner, driven by
Playwright on Debian's chromium in an isolated JupyterLab.  Opts applied by hand (the target dropdown
offers only what applies), "Time on all backends" within its budget, Stop while a timing runs, BEAM
search, the hand-tuned schedule against BEAM's result, a BEAM candidate opened, the session saved
and loaded back.  Every control must be readable at the explorer's width (no button cut to "Un…").
Screenshots of each step go to tests/artifacts/; the walk's wall times to ``walk_times.json`` there.
"""

from __future__ import annotations

import json
import re
import time

import nbformat
import pytest
from test_tour import run_all_cells, wait_until

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(1200)]

NOTEBOOK = "tuning_walk.ipynb"
SESSION = "walk-session.json"
#: the tuner's budget per backend in "Time on all backends" (uopviz.widgets.tuner.TIMING_BUDGET_S)
BUDGET_S = 5.0
#: what a timing may add to its budget per backend: the kernel's build and the worker's start
BUILD_ALLOWANCE_S = 10.0
# a cold cache of its own (compiled kernels, BEAM's measurements): the walk's times are a first visit's
SETUP = f"""\
import os
os.environ["UOPVIZ_CACHE"] = os.path.abspath("uopviz-cache")

import numpy as np
import uopviz as uv

rng = np.random.default_rng(0)
a, b = (uv.Tensor(rng.random((512, 512), dtype=np.float32)) for _ in range(2))
explorer = uv.explore(a @ b, backend="c")
tuner = explorer.views["Kernels"]
assert tuner.timing_budget_s == {BUDGET_S}
tuner.beam_width.value, tuner.beam_budget.value = 2, 20
tuner.session_path.value = "{SESSION}"
explorer"""


def control(tuner, label: str):
    """The input (or select) of the tuner's control labelled ``label``, the whole label ("on", BEAM's
    backend, is not "session")."""
    labelled = tuner.page.locator("label", has_text=re.compile(f"^{re.escape(label)}$"))
    return tuner.locator(".widget-inline-hbox", has=labelled).locator("select, input").first


def button(tuner, text: str):
    """The tuner's button whose label is ``text``."""
    return tuner.locator("button.jupyter-button", has_text=re.compile(f"^\\s*{re.escape(text)}\\s*$")).first


def options(select) -> list[str]:
    """The labels of a select's options, with plain spaces (ipywidgets writes no-break spaces)."""
    labels = select.locator("option").evaluate_all("options => options.map(o => o.textContent)")
    return [label.replace("\xa0", " ") for label in labels]


def choose(select, label_start: str) -> None:
    """Pick the option of ``select`` whose label starts with ``label_start``."""
    found = [index for index, label in enumerate(options(select)) if label.startswith(label_start)]
    assert found, f"no option starting with {label_start!r} in {options(select)}"
    select.select_option(index=found[0])


def cut_buttons(tuner) -> list[str]:
    """Labels of visible buttons whose text does not fit them (shown with an ellipsis)."""
    return tuner.locator("button").evaluate_all(
        "buttons => buttons.filter(b => b.offsetParent !== null && b.scrollWidth > b.clientWidth + 1)"
        ".map(b => b.innerText)")


def message(tuner) -> str:
    return tuner.locator(".uv-message").inner_text()


def open_tuner(page, lab, name: str, setup: str, artifacts, height: int):
    """Write notebook ``name`` of one cell, ``setup`` (ending with an explorer), run it in ``lab`` at
    a laptop's width and ``height`` and open the explorer's Kernels tab: the tuner's locator and the
    list the page's errors go to."""
    page.set_viewport_size({"width": 1280, "height": height})
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    kernelspec = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(setup)],
                                        metadata={"kernelspec": kernelspec})
    nbformat.write(notebook, str(lab.root / name))
    run_all_cells(page, lab, name, artifacts)
    assert not page.locator(".jp-RenderedText", has_text="Traceback").count()
    explorer = page.locator(".uv-explorer").first
    explorer.locator(".lm-TabBar-tab", has_text="Kernels").click()
    return explorer.locator(".uv-tuner"), errors


def test_a_512_matmul_tuned_by_hand_timed_compared_with_beam_and_saved(isolated_lab, browser_page,
                                                                         artifacts_dir):
    page = browser_page
    times: dict[str, float] = {}
    walk_started = time.monotonic()
    # a laptop's width (where "Un…" was seen), and tall: the whole tuner in one screenshot
    tuner, errors = open_tuner(page, isolated_lab, NOTEBOOK, SETUP, artifacts_dir, height=3000)
    tuner.wait_for(timeout=30_000)
    times["open"] = time.monotonic() - walk_started

    def shot(name: str) -> None:
        tuner.screenshot(path=str(artifacts_dir / f"{name}.png"))

    # -- every control readable at the explorer's width ----------------------------------------------
    assert cut_buttons(tuner) == [], "buttons cut short"
    shot("01_tuner_in_explorer")

    # -- opts applied by hand: the target dropdown offers only what the axis can become --------------
    step_started = time.monotonic()
    axis, target, factor = (control(tuner, label) for label in ("axis", "target", "factor"))
    choose(axis, "0:")
    wait_until(lambda: options(target) == ["THREAD", "UPCAST"], page,
               "the targets of a GLOBAL axis on c", artifacts=artifacts_dir)
    target.select_option("UPCAST")
    factor.fill("4")
    factor.press("Enter")
    button(tuner, "Apply").click()
    wait_until(lambda: "u4" in tuner.locator(".uv-axes").inner_text(), page, "the UPCAST axis",
               artifacts=artifacts_dir)
    # the message re-renders after the axes (seen missing for an instant on a loaded CI host)
    wait_until(lambda: tuner.locator(".uv-message.uv-ok").count() == 1, page, "the Apply message",
               artifacts=artifacts_dir)
    choose(axis, next(label for label in options(axis) if ": R" in label))
    wait_until(lambda: options(target) == ["UNROLL"], page,
               "the REDUCE axis offering UNROLL alone", artifacts=artifacts_dir)
    assert "factors that apply: 2, 4, 8" in tuner.locator(".uv-choice-hint").inner_text()
    button(tuner, "Apply").click()
    wait_until(lambda: "r4" in tuner.locator(".uv-axes").inner_text(), page, "the UNROLL axis",
               artifacts=artifacts_dir)
    hand_tuned = tuner.locator(".uv-axes").inner_text()
    times["apply two opts"] = time.monotonic() - step_started
    assert cut_buttons(tuner) == [], "buttons cut short"
    shot("02_opts_applied_by_hand")

    # -- "Time on all backends" keeps to its budget ---------------------------------------------------
    time_button = button(tuner, "Time on all backends")
    backends = len(tuner.locator(".uv-source-head").all_inner_texts())
    step_started = time.monotonic()
    time_button.click()
    button(tuner, "Stop").wait_for(timeout=10_000)
    shot("03_timing_in_progress")
    time_button.wait_for(timeout=int((BUDGET_S + BUILD_ALLOWANCE_S) * backends * 1000))
    times["time on all backends"] = elapsed = time.monotonic() - step_started
    assert elapsed < (BUDGET_S + BUILD_ALLOWANCE_S) * backends, elapsed
    tuner.locator(".uv-bokeh[data-drawn='1']").wait_for(timeout=30_000)
    results = tuner.locator("ul li").all_inner_texts()
    # the interpreter runs this kernel's reduction vectorised (about 1.2 s a run here): it is timed
    # within its budget, or stopped at it on a slower or busier machine; never left running
    assert any(r.startswith("python") and ("stopped at its 5 s budget" in r or "median" in r)
               for r in results), results
    assert any(r.startswith("c") and "median" in r for r in results), results
    chart = tuner.locator(".uv-bokeh")
    page.wait_for_timeout(500)  # bokeh lays the row out after embedding it
    widths = chart.evaluate("el => [el.scrollWidth, el.clientWidth]")
    assert widths[0] <= widths[1] + 1, f"the charts run past the tuner's width: {widths}"
    chart.scroll_into_view_if_needed()
    shot("04_timed_on_all_backends")

    # -- Stop while a timing runs: the interpreter's timing (first) is stopped, the rest not run ------
    time_button.click()
    stop = button(tuner, "Stop")
    stop.wait_for(timeout=10_000)
    page.wait_for_timeout(1000)  # inside the Python interpreter's timing, which would take its 5 s
    step_started = time.monotonic()
    stop.click()
    time_button.wait_for(timeout=int(BUDGET_S * 1000))
    times["stop"] = time.monotonic() - step_started
    assert times["stop"] < BUDGET_S - 1, times["stop"]
    results = tuner.locator("ul li").all_inner_texts()
    assert len(results) == backends and all("stopped" in r for r in results), results
    shot("05_timing_stopped")

    # -- BEAM search, then the hand-tuned schedule against BEAM's result -----------------------------
    step_started = time.monotonic()
    button(tuner, "BEAM search").click()
    tuner.locator(".uv-beam-candidates").wait_for(timeout=180_000)
    times["beam search"] = time.monotonic() - step_started
    wait_until(lambda: "BEAM (c)" in message(tuner), page, "BEAM's summary", artifacts=artifacts_dir)
    beam_axes = tuner.locator(".uv-axes").inner_text()
    tuner.locator(".uv-beam-candidates").scroll_into_view_if_needed()
    shot("06_beam_result")
    button(tuner, "Undo").click()  # back to the opts applied by hand
    wait_until(lambda: tuner.locator(".uv-axes").inner_text() == hand_tuned, page, "the hand-tuned kernel",
               artifacts=artifacts_dir)
    compare = control(tuner, "compare")
    # the list is redrawn last after the undo: BEAM's winner is then a point of the history after this one
    wait_until(lambda: any(label.startswith("history 3") for label in options(compare)), page,
               "the comparison points after the undo", artifacts=artifacts_dir)
    choose(compare, "BEAM's result")
    button(tuner, "Compare with…").click()
    diff = tuner.locator(".uv-schedule-diff")
    wait_until(lambda: diff.count() == 1, page, "the schedule diff", timeout_s=60, artifacts=artifacts_dir)
    assert "b: BEAM's result" in tuner.locator(".uv-schedule-diff").locator("xpath=..").inner_text()
    columns = diff.locator(".uv-diff-axes").all_inner_texts()
    assert columns[0] == hand_tuned and columns[1] == beam_axes, columns
    assert diff.locator(".uv-diff-source").count() == backends
    assert "@@" in diff.locator(".uv-diff-source").first.inner_text()  # the sources differ, as a diff
    diff.scroll_into_view_if_needed()
    diff.screenshot(path=str(artifacts_dir / "07_schedule_diff_against_beam.png"))

    # -- a BEAM candidate opened in the tuner --------------------------------------------------------
    choose(control(tuner, "candidate"), "1:")
    button(tuner, "Open candidate").click()
    wait_until(lambda: "opened BEAM candidate 1" in message(tuner), page, "candidate 1 to open",
               artifacts=artifacts_dir)
    candidate_axes = tuner.locator(".uv-axes").inner_text()
    candidate_name = message(tuner).rsplit(": ", 1)[1].strip()
    assert candidate_axes not in (hand_tuned, beam_axes)
    assert tuner.locator(".uv-schedule-diff").count() == 0  # it compared another kernel: cleared
    tuner.locator(".uv-axes").scroll_into_view_if_needed()
    shot("08_beam_candidate_opened")

    # -- the session saved, the tuner reset, the session loaded back and replayed ----------------------
    button(tuner, "Save session").click()
    wait_until(lambda: "saved the session" in message(tuner), page, "the session to be saved",
               artifacts=artifacts_dir)
    saved = json.loads((isolated_lab.root / SESSION).read_text())
    assert saved["tuned"]["name"] == candidate_name and saved["beam"]["backend"] == "c"
    assert {record["timing"]["backend"] for record in saved["timings"]} >= {"python", "c"}
    button(tuner, "Reset").click()
    wait_until(lambda: tuner.locator(".uv-axes").inner_text() != candidate_axes, page, "the reset",
               artifacts=artifacts_dir)
    button(tuner, "Load session").click()
    wait_until(lambda: "loaded session" in message(tuner), page, "the session to load",
               artifacts=artifacts_dir)
    assert tuner.locator(".uv-axes").inner_text() == candidate_axes
    assert candidate_name in options(control(tuner, "kernel"))[0]
    tuner.locator(".uv-axes").scroll_into_view_if_needed()
    shot("09_session_loaded")
    times["walk"] = time.monotonic() - walk_started
    (artifacts_dir / "walk_times.json").write_text(json.dumps(times, indent=1))
    assert not errors, errors



LINKED_NOTEBOOK = "tuner_source_links.ipynb"
LINKED_SETUP = """\
import numpy as np
import uopviz as uv

rng = np.random.default_rng(0)
a, b = uv.Tensor(rng.random((8, 16), dtype=np.float32)), uv.Tensor(rng.random((16, 4), dtype=np.float32))
explorer = uv.explore((a @ b).relu(), backend="c")
explorer"""


def test_a_tuner_source_line_clicked_selects_its_node_and_names_what_created_it(isolated_lab, browser_page,
                                                                               artifacts_dir):
    page = browser_page
    tuner, errors = open_tuner(page, isolated_lab, LINKED_NOTEBOOK, LINKED_SETUP, artifacts_dir, height=2400)
    tuner.wait_for(timeout=30_000)
    c_pane = tuner.locator('.uv-tuner-sources .uv-source[data-backend="c"]')
    # the C line that accumulates the product (``float alu3 = (val0 * val1 + val2);``): written for
    # the MULACC instruction selection made of the kernel's multiply and reduce
    line = c_pane.locator(".uv-line-mapped", has_text=re.compile(r"val0 \* val1 \+")).first
    line.wait_for(timeout=30_000)
    key = line.get_attribute("data-key")
    assert key, "the line names no node of the tuner's graph"
    line.click()
    origin = tuner.locator(".uv-tuner-sources .uv-origin")
    wait_until(lambda: origin.is_visible() and "descends from" in origin.inner_text(), page,
               "the line's origin", artifacts=artifacts_dir)
    text = origin.inner_text()
    assert "line" in text and "REDUCE" in text, text  # the graph's node it descends from
    assert "created by rule 'ADD(MUL(a, b), c) → MULACC(a, b, c)' (uopviz/passes/isel.py:" in text, text
    assert "descends from Tensor.matmul" in text, text
    assert "jump to the step" not in text  # the tuner has no player to jump in
    # the graph selected the node (through Python) and the line is lit
    graph_node = tuner.locator(f'.uv-dag-widget .uv-node.uv-selected[data-key="{key}"]')
    wait_until(lambda: graph_node.count() == 1, page, "the node selected in the tuner's graph",
               artifacts=artifacts_dir)
    assert c_pane.locator(f'.uv-line-selected[data-key="{key}"]').count() >= 1
    assert tuner.locator(".uv-panel-head").first.inner_text().strip()  # the graph's side panel shows it
    tuner.screenshot(path=str(artifacts_dir / "10_tuner_source_line_clicked.png"))
    assert not errors, errors
