"""Widget benchmarks: layout + first render of a ~2,000-UOp graph, changing a rewrite-player step,
and applying an opt in the tuner (new source and graph; timing runs excluded).

Targets (issue 5): layout + first render ≤ 2 s; a step change ≤ 200 ms; an opt → new source and
graph ≤ 100 ms.  "First render" has two parts: the Python side (layout, JSON, the widget) timed
here always, and the browser drawing the SVG, timed in headless chromium when Playwright and a
chromium are installed (the page reports its own render time).
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from run import measure, row

import uopviz as uv
from uopviz import AxisType, Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite


def kernel_like_graph(target: int = 2000) -> UOp:
    """A graph shaped like a lowered kernel: index arithmetic over ranges, loads, ALU chains and
    stores, grown until it has about ``target`` UOps."""
    ranges = [UOp.range(64, AxisType.LOOP), UOp.range(32, AxisType.LOOP), UOp.range(16, AxisType.REDUCE)]
    buffers = [UOp.buffer(1 << 16, dtypes.float32) for _ in range(6)]
    stores = []
    step = 0
    while True:
        r0, r1, r2 = ranges
        index = (r0 * 512 + r1 * 16 + r2 + step) % (1 << 16)
        value = buffers[step % 6].index(index)
        for k in range(6):
            other = buffers[(step + k + 1) % 6].index((index + k * 7) % (1 << 16))
            value = (value * other + float(k)).maximum(value) if k % 2 else (value + other).recip()
        stores.append(UOp(Ops.STORE, (buffers[(step + 3) % 6].index(index), value)))
        step += 1
        root = UOp(Ops.SINK, tuple(stores))
        if len(root.toposort()) >= target:
            return root


def trace_with_steps(terms: int = 120) -> uv.Trace:
    """A rewrite trace of ``terms`` steps over a graph of a few hundred UOps (x*1 → x, x+0 → x)."""
    rules = PatternMatcher(
        [
            (UPat(Ops.MUL, src=(UPat.var("x"), UPat.const(None, 1))), lambda x: x, "x*1 -> x"),
            (UPat(Ops.ADD, src=(UPat.var("x"), UPat.const(None, 0))), lambda x: x, "x+0 -> x"),
        ]
    )
    x = UOp.buffer(256, dtypes.float32).reshape((16, 16))
    value = x
    for i in range(terms):
        value = (value * 1.0 + float(i % 5 + 1)) if i % 2 else (value + 0.0) * float(i % 3 + 2)
    with uv.tracing() as trace:
        graph_rewrite(value, rules, name="simplify")
    return trace


def browser_render_ms(uop: UOp) -> float | None:
    """Milliseconds headless chromium takes to draw ``uop``'s DAG (None without chromium/Playwright)."""
    from uopviz.widgets.embed import StaticPage

    page = StaticPage("bench")
    page.add_dag("Graph", "bench", uop, height=700)
    return page_render_ms(page)


def page_render_ms(page: Any) -> float | None:
    """Milliseconds headless chromium takes to draw the first DAG of a report page (a
    ``StaticPage``), median of three loads; None without chromium or Playwright."""
    chromium = (
        os.environ.get("UOPVIZ_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if chromium is None:
        return None
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "bench.html"
        path.write_text(page.render())
        args = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ]
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


def bench_first_render() -> list[dict[str, Any]]:
    from uopviz.widgets.views import GraphView

    root = kernel_like_graph()
    count = len(root.toposort())
    python_s = measure(lambda: GraphView(root), repeat=3, number=1)
    view = GraphView(root)
    rows = [
        row(
            f"layout + widget state, {count} UOps ({view.node_count} nodes)",
            python_s,
            notes=f"Python side: layout ({view.graph['engine']}), JSON, GraphView; target total ≤ 2 s",
        )
    ]
    render_ms = browser_render_ms(root)
    if render_ms is not None:
        rows.append(
            row(
                f"layout + first render, {count} UOps",
                python_s + render_ms / 1e3,
                notes=f"Python {python_s * 1e3:.0f} ms + chromium SVG render {render_ms:.0f} ms; "
                "target ≤ 2 s",
            )
        )
    return rows


def bench_step_change() -> list[dict[str, Any]]:
    from uopviz.widgets.views import RewritePlayer

    trace = trace_with_steps()
    player = RewritePlayer(trace)
    count = player.frame["step_count"]
    nodes = len(player.frame["graph"]["nodes"])
    samples = []
    for step in range(2, count + 1):  # every step is new to the player: nothing is cached yet
        started = time.perf_counter()
        player.position = [player.position[0], step]
        samples.append(time.perf_counter() - started)
    back = measure(
        lambda: setattr(player, "position", [player.position[0], 1 + player.position[1] % count]),
        repeat=3,
        number=20,
    )
    return [
        row(
            f"player step change, fresh step (~{nodes} nodes)",
            statistics.median(samples),
            notes=f"median of {len(samples)} steps: replay, layout, diff, text diff, JSON; target ≤ 200 ms",
        ),
        row(f"player step change, revisited step (~{nodes} nodes)", back, notes="frames cached"),
    ]


def bench_expand_steps() -> list[dict[str, Any]]:
    """Stepping through the Expand stage of a tuned gemm: every step is the whole program, rebuilt
    from the lanes Expand made so far (the frontier graph) and put in its CALL."""
    try:
        import uopviz.passes.pipeline  # noqa: F401
    except ImportError as error:
        print(f"bench_widgets: no Expand case ({error})", file=sys.stderr)
        return []
    import numpy as np

    from uopviz.widgets.views import RewritePlayer

    rng = np.random.default_rng(0)
    a, b = (uv.Tensor(rng.random((128, 128), dtype=np.float32)) for _ in range(2))
    program = uv.compile(a @ b, backend="c", opts="heuristic", build=False)
    player = RewritePlayer(program.trace, pass_name="Expand")
    count = player.frame["step_count"]
    samples, nodes = [], []
    for step in range(2, count + 1):
        started = time.perf_counter()
        player.position = [player.position[0], step]
        samples.append(time.perf_counter() - started)
        nodes.append(len(player.frame["graph"]["nodes"]))
    return [
        row(
            f"player step change, Expand stage of a gemm ({min(nodes)}–{max(nodes)} nodes)",
            statistics.median(samples),
            notes=f"median of {len(samples)} fresh steps (max {max(samples) * 1e3:.0f} ms): whole-program "
            "graph from Expand's recorded frontier, layout, diff, JSON; target ≤ 200 ms",
        )
    ]


def bench_apply_opt() -> list[dict[str, Any]]:
    try:
        import uopviz.passes.pipeline  # noqa: F401
    except ImportError as error:  # the pipeline is not installed: nothing to tune
        print(f"bench_widgets: no tuner case ({error})", file=sys.stderr)
        return []
    import numpy as np

    from uopviz.widgets.tuner_view import KernelTuner

    rng = np.random.default_rng(0)
    a, b = (uv.Tensor(rng.random((256, 256), dtype=np.float32)) for _ in range(2))
    program = uv.compile(a @ b, backend="c", opts=None)
    kernel = program.kernels[0]
    tuner = KernelTuner([kernel], backends=["c", "python"])
    opts = [
        uv.Opt(uv.OptOp.SPLIT, axis=0, arg=(4, AxisType.UPCAST, False)),
        uv.Opt(uv.OptOp.SPLIT, axis=1, arg=(4, AxisType.UPCAST, False)),
    ]
    samples = []
    for _ in range(5):
        for opt in opts:
            started = time.perf_counter()
            applied = tuner.apply(opt)
            samples.append(time.perf_counter() - started)
            assert applied, tuner.state.message
        tuner.state.reset()
        tuner.refresh()
    return [
        row(
            "tuner: apply opt → new source (c, python) + graph",
            statistics.median(samples),
            notes="gemm 256 kernel; timing runs excluded; target ≤ 100 ms",
        )
    ]


def run() -> list[dict[str, Any]]:
    """All widget benchmarks."""
    return bench_first_render() + bench_step_change() + bench_expand_steps() + bench_apply_opt()
