"""The operator graph of NNEF models (``uv.explore(g)``'s first tab): layout + first render.

Cases: AlexNet of §2.1 (24 operations, 42 nodes) and the 300-operation ResNet-style graph of
``bench_nnef.resnet_text`` (543 nodes).  "Layout + widget state" is the Python side
(:func:`uopviz.widgets.nnef_graph.operator_graph`: details, definition texts, graphviz ``dot`` or
the layered layout; the JSON; the :class:`OperatorGraphView`); "first render" adds the time headless
chromium takes to draw the SVG (the page reports it), when Playwright and a chromium are installed.
Target (issue 5's for UOp graphs): layout + first render ≤ 2 s.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench_nnef import resnet_text
from run import measure, row

import uopviz as uv


def _models() -> list[tuple[str, Any]]:
    return [
        ("AlexNet", uv.nnef.loads(uv.nnef.examples.text("alexnet", fixed=True))),
        ("ResNet-style", uv.nnef.loads(resnet_text())),
    ]


def browser_render_ms(state: dict[str, Any]) -> float | None:
    """Milliseconds headless chromium takes to draw an embedded DAG state (None without
    chromium/Playwright)."""
    chromium = (
        os.environ.get("UOPVIZ_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if chromium is None:
        return None
    from uopviz.widgets.views import script, stylesheet

    text = json.dumps(state).replace("</", "<\\/")
    page_html = (
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><style>{stylesheet()}</style></head><body>'
        f'<div id="mount"></div><script>{script()}\n'
        f'UOPVIZ.mountStatic(document.getElementById("mount"), {text});</script></body></html>'
    )
    args = ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"]
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "operators.html"
        path.write_text(page_html)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=args)
            try:
                tab = browser.new_page(viewport={"width": 1400, "height": 900})
                samples = []
                for _ in range(3):
                    tab.goto(path.as_uri())
                    tab.wait_for_selector(".uv-dag[data-render-ms]")
                    samples.append(float(tab.get_attribute(".uv-dag", "data-render-ms")))
                return statistics.median(samples)
            finally:
                browser.close()


def run() -> list[dict[str, Any]]:
    from uopviz.widgets.model_view import OperatorGraphView

    rows = []
    for name, model in _models():
        python_s = measure(lambda model=model: OperatorGraphView(model), repeat=3, number=1)
        view = OperatorGraphView(model)
        nodes = f"{len(model.operations)} operations, {view.node_count} nodes"
        rows.append(row(f"operator graph {name}: layout + widget state ({nodes})", python_s,
                        notes=f"Python: operator_graph ({view.graph['engine']}), JSON, OperatorGraphView"))
        state = {"kind": "dag", "graph": view.graph, "legend": view.legend, "height": 620, "collapsed": [],
                 "marks": {"added": [], "changed": [], "focus": None}, "selected": "", "bodies": [],
                 "can_toggle": False}
        render_ms = browser_render_ms(state)
        if render_ms is not None:
            rows.append(row(f"operator graph {name}: layout + first render", python_s + render_ms / 1e3,
                            notes=f"Python {python_s * 1e3:.0f} ms + chromium SVG render {render_ms:.0f} ms; "
                            "target ≤ 2 s"))
    return rows
