"""The operator graph of NNEF models (``uv.explore(g)``'s first tab): layout + first render.

Cases: AlexNet of §2.1 (24 operations, 42 nodes), the 300-operation ResNet-style graph of
``bench_nnef.resnet_text`` (543 nodes) and a 2,000-operation one (400 blocks, 3,609 nodes: issue 12's
model scale, DenseNet-121's operation count).  "Layout + widget state" is the Python side
(:func:`uopviz.widgets.nnef_graph.operator_graph`: details, definition texts, graphviz ``dot`` or
the layered layout; the JSON; the :class:`OperatorGraphView`); "first render" adds the time headless
chromium takes to draw the SVG (the page reports it), when Playwright and a chromium are installed.
Targets: layout + first render ≤ 2 s (issue 5's, for UOp graphs); ≤ 1 s for the 2,000-operation
graph (issue 12).
"""

from __future__ import annotations

from typing import Any

from bench_nnef import resnet_text
from bench_widgets import page_render_ms
from run import measure, row

import uopviz as uv


def _models() -> list[tuple[str, Any]]:
    return [
        ("AlexNet", uv.nnef.loads(uv.nnef.examples.text("alexnet", fixed=True))),
        ("ResNet-style", uv.nnef.loads(resnet_text())),
        ("ResNet-style 2,000", uv.nnef.loads(resnet_text(blocks=400))),
    ]


def browser_render_ms(model: Any) -> float | None:
    """Milliseconds headless chromium takes to draw ``model``'s operator graph as a report shows it
    (None without chromium/Playwright)."""
    from uopviz.widgets.embed import StaticPage

    page = StaticPage("bench")
    page.add_operator_graph("Model", "bench", model)
    return page_render_ms(page)


def run() -> list[dict[str, Any]]:
    from uopviz.widgets.model_view import OperatorGraphView

    rows = []
    for name, model in _models():
        python_s = measure(lambda model=model: OperatorGraphView(model), repeat=3, number=1)
        view = OperatorGraphView(model)
        nodes = f"{len(model.operations)} operations, {view.node_count} nodes"
        rows.append(row(f"operator graph {name}: layout + widget state ({nodes})", python_s,
                        notes=f"Python: operator_graph ({view.graph['engine']}), JSON, OperatorGraphView"))
        render_ms = browser_render_ms(model)
        if render_ms is not None:
            rows.append(row(f"operator graph {name}: layout + first render", python_s + render_ms / 1e3,
                            notes=f"Python {python_s * 1e3:.0f} ms + chromium SVG render {render_ms:.0f} ms; "
                            f"target ≤ {1 if len(model.operations) >= 2000 else 2} s"))
        if len(model.operations) >= 2000:  # the whole explorer: Model tab, lazy Kernels tab, Operations
            explore_s = measure(lambda model=model: uv.explore(model), repeat=3, number=1)
            rows.append(row(f"uv.explore {name}: widget state", explore_s,
                            notes="Model tab (graph + search), Kernels tab compiling on request, Operations "
                            "table; nothing lowered"))
    return rows
