"""Backends as the explorer shows them: what each declares, timings as a bokeh chart with GFLOP/s,
GB/s and a roofline, and a panel that times every kernel on every backend on request.

The roofline's roofs are this machine's measured peaks (numpy's matmul for compute, a large copy
for memory bandwidth): practical roofs, not datasheet numbers, and labelled so.
"""

from __future__ import annotations

import functools
import html
import time
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets

from uopviz.backends.timing import format_seconds
from uopviz.widgets.tuner import TimingEntry, TunerState

#: Colours of the timing bars, one per backend in order (a qualitative palette).
# one colour per backend in every chart (a chart of c and llvm and one of python, c and llvm agree)
BACKEND_COLORS = {
    "python": "#6E7781",
    "c": "#1565C0",
    "llvm": "#2E7D32",
    "opencl": "#7B1FA2",
    "cuda": "#E65100",
}
OTHER_BACKEND_COLORS = ("#00838F", "#795548", "#C62828", "#AD1457")


def backend_color(name: str) -> str:
    """The colour that stands for backend ``name`` in every chart."""
    if name in BACKEND_COLORS:
        return BACKEND_COLORS[name]
    return OTHER_BACKEND_COLORS[sum(map(ord, name)) % len(OTHER_BACKEND_COLORS)]


def backend_names(backends: list[str] | None = None) -> list[str]:
    """The backends to show: the given ones, else every backend available on this machine."""
    if backends:
        return list(backends)
    from uopviz import backends as registry

    return registry.available()


def backend_declarations(name: str) -> dict[str, str]:
    """What backend ``name`` declares (abilities, tensor cores), or why it is unavailable."""
    from uopviz import backends as registry

    try:
        backend = registry.get(name)
    except Exception as error:  # noqa: BLE001 - a missing backend is a row saying why
        return {"backend": name, "status": f"unavailable: {error}"}
    reason = backend.unavailable_reason()
    cores = ", ".join(f"{tc.name} {'x'.join(map(str, tc.dims))}" for tc in backend.tensor_cores) or "—"
    return {
        "backend": name,
        "status": "available" if reason is None else f"unavailable: {reason}",
        "vector widths": ", ".join(map(str, backend.vector_widths)) or "— (devectorized)",
        "local memory": "yes" if backend.has_local else "no",
        "threads": "yes" if backend.has_threads else "no",
        "native ALU ops": str(len(backend.supported_ops)),
        "tensor cores": cores,
    }


def _table(rows: list[dict[str, str]]) -> str:
    if not rows:
        return "<p>(none)</p>"
    columns = list(dict.fromkeys(c for row in rows for c in row))
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(row.get(c, '')))}</td>" for c in columns) + "</tr>"
        for row in rows
    )
    return f'<table class="uv-table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def timing_rows(entries: list[TimingEntry]) -> list[dict[str, str]]:
    """Timings as table rows (median, min, max, spread, runs, GFLOP/s, GB/s, or the error); an
    unsteady timing says so beside its spread."""
    rows = []
    for e in entries:
        if e.error:
            rows.append({"backend": e.backend, "median": "—", "error": e.error})
            continue
        spread = "—" if e.spread is None else f"{e.spread:.0%}"
        if e.unsteady:
            spread += " (unsteady: a busy machine? time again)"
        rows.append(
            {
                "backend": e.backend,
                "median": format_seconds(e.median_s),
                "min": format_seconds(e.min_s),
                "max": format_seconds(e.max_s),
                "spread": spread,
                "runs": str(e.runs),
                "GFLOP/s": f"{e.gflops:.2f}" if e.gflops is not None else "—",
                "GB/s": f"{e.gbps:.2f}" if e.gbps is not None else "—",
            }
        )
    return rows


def backends_table_html(kernels: list[Any], names: list[str], time_kernels: bool = False) -> str:
    """The backends' declarations as an HTML table (and, with ``time_kernels``, per-kernel times)."""
    parts = [_table([backend_declarations(n) for n in names])]
    if time_kernels:
        for kernel in kernels:
            state = TunerState(kernel)
            parts.append(
                f"<h4>{html.escape(getattr(kernel, 'name', ''))}</h4>"
                + _table(timing_rows([state.timing(n) for n in names]))
            )
    return "".join(parts)


def _best_seconds(action: Callable[[], Any], budget_s: float = 0.25, most: int = 50) -> float:
    """Fastest of repeated runs of ``action`` after one warm-up, for ``budget_s`` seconds or ``most``
    runs: the best run is the one least disturbed by whatever else shares the machine."""
    action()
    best, spent, runs = float("inf"), 0.0, 0
    while runs < 3 or (spent < budget_s and runs < most):
        started = time.perf_counter()
        action()
        elapsed = time.perf_counter() - started
        best, spent, runs = min(best, elapsed), spent + elapsed, runs + 1
    return best


@functools.cache
def machine_roofs() -> tuple[float, float]:
    """(peak GFLOP/s, peak GB/s) of this machine as numpy reaches them: a float32 matmul and a
    64 MiB copy, each the fastest of repeated runs (a handful of runs on a loaded 2-core machine put
    the roof below kernels measured a moment later)."""
    import numpy as np

    a = np.random.default_rng(0).random((512, 512), dtype=np.float32)
    gflops = 2 * 512**3 / _best_seconds(lambda: a @ a) / 1e9
    source = np.ones(16 * 1024 * 1024, dtype=np.float32)
    target = np.empty_like(source)
    gbps = 2 * source.nbytes / _best_seconds(lambda: np.copyto(target, source)) / 1e9
    return gflops, gbps


#: height of each timing chart (pixels): room for the bars' labels and the roofline's legend line
CHART_HEIGHT = 320


def timing_figure(
    entries: list[TimingEntry], title: str = "", roofs: tuple[float, float] | None = None
) -> Any:
    """A bokeh layout: bars of GFLOP/s per backend (or of time when the op counts are unknown),
    with median/min/GB/s on hover, beside a roofline (log-log, this machine's roofs, one dot per
    backend)."""
    from bokeh.layouts import row
    from bokeh.models import ColumnDataSource, HoverTool, LabelSet, Span, Title
    from bokeh.plotting import figure

    ok = [e for e in entries if not e.error and e.median_s]
    use_rate = bool(ok) and all(e.gflops is not None for e in ok)
    names = [e.backend for e in ok]
    colors = [backend_color(name) for name in names]
    values = [e.gflops if use_rate else e.median_s * 1e3 for e in ok]
    source = ColumnDataSource(
        {
            "backend": names,
            "value": values,
            "color": colors,
            "median": [format_seconds(e.median_s) for e in ok],
            "min": [format_seconds(e.min_s) for e in ok],
            "gflops": [f"{e.gflops:.2f}" if e.gflops is not None else "—" for e in ok],
            "gbps": [f"{e.gbps:.2f}" if e.gbps is not None else "—" for e in ok],
            "label": [_short_number(v) for v in values],
            "device": [e.device or "—" for e in ok],
        }
    )
    unit = "GFLOP/s" if use_rate else "median time (ms)"
    bars = figure(
        x_range=names or ["(no timing)"],
        height=CHART_HEIGHT,
        width=420,
        title=f"{title} — {unit}".strip(" —"),
        toolbar_location=None,
        tools="",
    )
    bars.vbar(x="backend", top="value", width=0.6, color="color", source=source)
    # the value over each bar: a backend 1000x slower than the others still shows its number
    bars.add_layout(LabelSet(x="backend", y="value", text="label", source=source, text_align="center",
                             y_offset=3, text_font_size="10px", text_color="#1f2328"))
    bars.add_tools(
        HoverTool(
            tooltips=[
                ("backend", "@backend"),
                ("median", "@median"),
                ("min", "@min"),
                ("GFLOP/s", "@gflops"),
                ("GB/s", "@gbps"),
                ("measured on", "@device"),
            ]
        )
    )
    devices = sorted({e.device.split("] ")[0] + "]" if "] " in e.device else e.device
                      for e in ok if e.device})
    # a figure names the CPU and target it was measured on (the hover has the whole key), a line per
    # device: on one line two devices ran past the chart's edge ("pthread-skylake-av")
    for position, device in enumerate(devices):
        bars.add_layout(Title(text=("measured on " if position == 0 else "and ") + device,
                              text_font_size="9px", text_font_style="normal", align="left"), "below")
    bars.y_range.start = 0
    if values:
        bars.y_range.end = max(values) * 1.15  # room for the labels over the bars
    bars.yaxis.axis_label = unit
    failed = [e for e in entries if e.error]
    if failed:  # under the axis, with the footnotes: inside the frame it lay over the first bar
        bars.add_layout(Title(text="failed: " + ", ".join(e.backend for e in failed), text_font_size="9px",
                              text_font_style="normal", text_color="#82071e", align="left"), "below")
    # a log-log roofline has no place for a kernel without arithmetic (a copy: zero FLOP/byte,
    # zero GFLOP/s); such kernels keep their bar and stay off the roofline
    with_intensity = [e for e in ok if (e.intensity or 0) > 0 and (e.gflops or 0) > 0]
    if not with_intensity:
        return bars
    measured_flops, measured_bw = roofs if roofs is not None else machine_roofs()
    intensities = [e.intensity for e in with_intensity]
    rates = [e.gflops for e in with_intensity]
    # the roofs are this machine's, measured once (numpy's matmul and copy on this CPU, cached): a
    # kernel faster than numpy sits above its roof, which says so, rather than moving the roof
    peak_flops, peak_bw = measured_flops, measured_bw
    roof_label = (f"roof: {peak_flops:.0f} GFLOP/s (numpy matmul here), {peak_bw:.0f} GB/s (numpy copy here)"
                  + ("; dots above it beat numpy" if any(r > min(peak_flops, i * peak_bw) for r, i in
                                                          zip(rates, intensities)) else ""))
    low, high = min(intensities + [0.01]) / 4, max(intensities + [peak_flops / peak_bw]) * 8
    # every dot inside the frame (a slow backend sits orders of magnitude under the roof)
    bottom = max(min(rates + [low * peak_bw]) / 3, 1e-9)
    roof = figure(
        height=CHART_HEIGHT,
        width=roofline_width(roof_label, [e.backend for e in with_intensity]),
        x_axis_type="log",
        y_axis_type="log",
        title="roofline (this machine)",
        toolbar_location=None,
        tools="",
        x_range=(low, high),
        y_range=(bottom, max([peak_flops, *rates]) * 3),
    )
    xs = [low * (high / low) ** (i / 60) for i in range(61)]
    roof.line(
        xs,
        [min(peak_flops, x * peak_bw) for x in xs],
        color="#57606a",
        line_width=2,
        legend_label=roof_label,
    )
    roof.add_layout(
        Span(location=peak_flops / peak_bw, dimension="height", line_dash="dotted", line_color="#8c959f")
    )
    dots = ColumnDataSource(
        {
            "x": intensities,
            "y": [e.gflops for e in with_intensity],
            "backend": [e.backend for e in with_intensity],
            "color": [colors[names.index(e.backend)] for e in with_intensity],
        }
    )
    roof.scatter("x", "y", size=11, color="color", source=dots, line_color="black", legend_field="backend")
    roof.add_tools(
        HoverTool(tooltips=[("backend", "@backend"), ("FLOP/byte", "@x{0.000}"), ("GFLOP/s", "@y{0.00}")])
    )
    roof.xaxis.axis_label = "arithmetic intensity (FLOP/byte)"
    roof.yaxis.axis_label = "GFLOP/s"
    roof.legend.label_text_font_size = "9px"
    roof.legend.spacing = 6
    roof.legend.padding = 4
    roof.legend.orientation = "horizontal"  # one line: a row aligns both plots' frames, so a tall
    roof.add_layout(roof.legend[0], "below")  # legend under one squeezed both to a strip
    # where the two do not fit side by side (the tuner inside uv.explore) the roofline goes under the bars
    return row(bars, roof, styles={"flex-wrap": "wrap", "gap": "6px"})


#: about how wide (px) a character of the roofline's 9 px legend is, and what each entry adds (its glyph)
LEGEND_CHAR_PX, LEGEND_ENTRY_PX = 5.5, 34


def roofline_width(roof_label: str, backends: list[str]) -> int:
    """The roofline's width: 420 px, or wider where its one-line legend (the roof, then a dot per
    backend) needs it; a legend wider than its figure was cut at both ends."""
    entries = [roof_label, *backends]
    legend = sum(LEGEND_CHAR_PX * len(text) + LEGEND_ENTRY_PX for text in entries)
    return max(420, int(legend) + 20)


def _short_number(value: float) -> str:
    """A bar's label: three significant digits (``0.00412``, ``9.37``, ``1.2e+03``)."""
    return f"{value:.3g}"


def bokeh_widget(figure: Any) -> widgets.Widget:
    """A bokeh figure as an ipywidget that needs nothing loaded beforehand (see :class:`BokehChart`)."""
    from uopviz.widgets.views import BokehChart

    return BokehChart(figure)


def backends_panel(kernels: list[Any], backends: list[str] | None = None) -> widgets.Widget:
    """The Backends tab: every backend's declarations, and a button that times every kernel on
    every backend (a chart and a table per kernel)."""
    names = backend_names(backends)
    declarations = widgets.HTML(backends_table_html(kernels, names))
    button = widgets.Button(
        description="Time every kernel on every backend", icon="clock", layout=widgets.Layout(width="auto")
    )
    progress = widgets.IntProgress(
        value=0,
        min=0,
        max=max(1, len(kernels) * len(names)),
        layout=widgets.Layout(width="220px", visibility="hidden"),
    )
    results = widgets.VBox()

    def run(_: Any) -> None:
        progress.layout.visibility = "visible"
        progress.value = 0
        children: list[widgets.Widget] = []
        for kernel in kernels:
            state = TunerState(kernel)
            entries = []
            for name in names:
                entries.append(state.timing(name))
                progress.value += 1
            children += [
                widgets.HTML(
                    f"<h4>{html.escape(getattr(kernel, 'name', ''))}</h4>" + _table(timing_rows(entries))
                ),
                bokeh_widget(timing_figure(entries, getattr(kernel, "name", ""))),
            ]
        results.children = children
        progress.layout.visibility = "hidden"

    button.on_click(run)
    panel = widgets.VBox([declarations, widgets.HBox([button, progress]), results])
    panel.time_all = run
    return panel
