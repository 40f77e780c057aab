"""The timing chart's data: one colour per backend in every chart, and a roofline whose roofs are this
machine's (numpy's matmul and copy measured here, named in the legend), never the fastest dot."""

from __future__ import annotations

from bokeh.models import GlyphRenderer, Legend

from uopviz.widgets.backends_view import backend_color, timing_figure
from uopviz.widgets.tuner import TimingEntry


def entry(backend: str, gflops: float, intensity: float = 4.0) -> TimingEntry:
    flops = 1e6
    seconds = flops / (gflops * 1e9)
    return TimingEntry(backend, seconds, seconds, 10, gflops, flops / intensity / seconds / 1e9, flops,
                       flops / intensity)


def renderers(figure) -> list[GlyphRenderer]:
    return [r for r in figure.renderers if isinstance(r, GlyphRenderer)]


def test_each_backend_keeps_its_colour_across_charts():
    first = timing_figure([entry("c", 10), entry("llvm", 20)], roofs=(100.0, 50.0))
    second = timing_figure([entry("python", 0.1), entry("llvm", 20), entry("c", 10)], roofs=(100.0, 50.0))
    for chart in (first, second):
        bars = renderers(chart.children[0])[0].data_source.data
        assert [backend_color(b) for b in bars["backend"]] == list(bars["color"])
    assert len({backend_color(b) for b in ("python", "c", "llvm", "opencl", "cuda")}) == 5
    assert backend_color("someday") == backend_color("someday")


def test_the_roof_stays_this_machines_and_a_kernel_above_it_is_named():
    # issue 24: the roof moved to "fastest here" whenever a kernel beat numpy, so it said nothing
    # about the machine; it stays at the measured roofs and the legend says a dot beats numpy
    entries = [entry("c", 150, intensity=20), entry("llvm", 8, intensity=0.05)]
    roofline = timing_figure(entries, roofs=(100.0, 50.0)).children[1]
    line, dots = renderers(roofline)
    assert max(line.data_source.data["y"]) == 100
    assert roofline.y_range.end >= 150  # the dot above the roof is inside the frame
    (legend,) = [item for item in roofline.below if isinstance(item, Legend)]
    label = legend.items[0].label["value"]
    assert label == ("roof: 100 GFLOP/s (numpy matmul here), 50 GB/s (numpy copy here); "
                     "dots above it beat numpy")
    assert "fastest" not in label


def test_a_roof_from_numpy_says_so():
    chart = timing_figure([entry("c", 50, intensity=20)], roofs=(100.0, 50.0))
    (legend,) = [item for item in chart.children[1].below if isinstance(item, Legend)]
    label = legend.items[0].label["value"]
    assert label == "roof: 100 GFLOP/s (numpy matmul here), 50 GB/s (numpy copy here)"
    assert all(child.height >= 300 for child in chart.children)  # charts sized to be read


def test_a_kernel_without_arithmetic_stays_off_the_roofline():
    # issue 11: a zero-intensity kernel (a copy; `((a @ b).relu() + 1).sum(axis=1)` has one) raised
    # ZeroDivisionError in the roofline's bandwidth roof
    copy = TimingEntry("c", 1e-3, 1e-3, 10, gflops=0.0, gbps=1.0, flops=0.0, bytes=1e6)
    chart = timing_figure([copy, entry("llvm", 8, intensity=2.0)], roofs=(100.0, 50.0))
    line, dots = renderers(chart.children[1])
    assert list(dots.data_source.data["backend"]) == ["llvm"]
    only_copy = timing_figure([copy], roofs=(100.0, 50.0))
    assert list(renderers(only_copy)[0].data_source.data["backend"]) == ["c"]  # the bars alone


def test_the_report_of_a_program_with_a_copy_kernel_times_and_draws_it():
    # issue 11: `uopviz report` of a program with a kernel that only copies (zero FLOP/byte) raised
    # ZeroDivisionError in the roofline
    import numpy as np

    import uopviz as uv
    from uopviz.report import build_report
    from uopviz.widgets.embed import embedded_states

    x = uv.Tensor(np.random.default_rng(0).standard_normal((8, 6)).astype(np.float32))
    copy = x.permute(1, 0).contiguous()
    assert [kernel.flops for kernel in uv.compile(copy).kernels] == [0]
    html = build_report([("y", copy), ("z", (x * 2).sum(axis=1))], backends=["python"], time_kernels=True)
    # the figures' scripts are embedded compressed with bokeh's JS
    (scripts,) = [state for state in embedded_states(html) if state["kind"] == "scripts"]
    assert len(scripts["scripts"]) == 1 + 2 and any("roofline" in text for text in scripts["scripts"][1:])
