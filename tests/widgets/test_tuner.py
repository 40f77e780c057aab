"""The kernel tuner: its data model (uopviz.widgets.tuner) over real kernels from uv.compile, and
the ipywidgets view driven from Python (no browser)."""

from __future__ import annotations

import html
import json

import numpy as np
import pytest

import uopviz as uv
from uopviz import AxisType
from uopviz.passes.optops.opts import Opt, OptError, OptOp
from uopviz.widgets.tuner import (
    OPT_CONTROLS,
    OPT_NAMES,
    TimingEntry,
    TunerState,
    make_opt,
    opt_to_python,
    timing_entry,
)
from uopviz.widgets.tuner_view import KernelTuner, axes_html, beam_backend_for


def matmul_kernel(m: int, k: int, n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    a = uv.Tensor(rng.random((m, k), dtype=np.float32))
    b = uv.Tensor(rng.random((k, n), dtype=np.float32))
    (kernel,) = uv.compile(a @ b, backend="c").kernels
    return kernel


SHAPES = [(8, 16, 4), (16, 12, 8), (32, 64, 16)]


@pytest.mark.parametrize("shape", SHAPES)
def test_apply_follows_the_kernel_and_an_invalid_opt_changes_nothing(shape):
    kernel = matmul_kernel(*shape)
    state = TunerState(kernel)
    assert state.axis_string == " ".join(f"{t.letter}{s}" for s, t in kernel.axes)
    split = make_opt("SPLIT", 0, factor=4, target="UPCAST")
    assert split == Opt(OptOp.SPLIT, 0, (4, AxisType.UPCAST, False))
    assert state.apply(split) and not state.error
    expected = kernel.apply(split)
    assert state.kernel.ast is expected.ast and state.opts == (split,)
    assert [(a.size, a.axis_type) for a in state.axes] == list(expected.axes)
    before = state.kernel
    bad = make_opt("SPLIT", 0, factor=7, target="UPCAST")
    with pytest.raises(OptError) as raised:
        before.apply(bad)
    assert not state.apply(bad)
    assert state.kernel is before and state.error
    assert str(raised.value) in state.message and "not valid" in state.message


def test_undo_redo_and_reset():
    state = TunerState(matmul_kernel(16, 16, 16))
    base = state.kernel
    first, second = make_opt("SPLIT", 0, factor=4), make_opt("SPLIT", 1, factor=2)
    assert not state.can_undo and not state.undo()
    state.apply(first)
    after_first = state.kernel
    state.apply(second)
    assert state.opts == (first, second)
    assert state.undo() and state.kernel is after_first and state.can_redo
    assert state.redo() and state.opts == (first, second) and not state.can_redo
    assert not state.redo() and state.message == "nothing to redo"
    state.undo()
    third = make_opt("SPLIT", 1, factor=4)
    state.apply(third)  # a new opt after an undo drops the redo tail
    assert state.opts == (first, third) and not state.can_redo
    state.reset()
    assert state.kernel is base and state.opts == () and state.can_redo


@pytest.mark.parametrize("opts", [
    [("SPLIT", 0, {"factor": 4, "target": "UPCAST"})],
    [("SPLIT", 1, {"factor": 2, "target": "UPCAST"}), ("PADTO", 0, {"multiple": 5})],
    [("SPLIT", 0, {"factor": 2, "target": "THREAD", "top": True}), ("NOLOCALS", None, {})],
])
def test_exports_rebuild_the_same_kernel(opts):
    kernel = matmul_kernel(16, 16, 8)
    state = TunerState(kernel)
    for name, axis, values in opts:
        assert state.apply(make_opt(name, axis, **values)), state.message
    from_json = TunerState.opts_from_json(state.export_json())
    assert tuple(from_json) == state.opts
    exported = json.loads(state.export_json())
    assert (exported["kernel"], exported["tuned"]) == (kernel.name, state.kernel.name)
    assert exported["backend"] == "c"
    namespace: dict = {}
    exec(state.export_python(), namespace)  # the exported Python defines the opts and tuned(kernel)
    assert namespace["tuned"](kernel).ast is state.kernel.ast
    assert f"the opts of kernel {kernel.name} (tuned: {state.kernel.name})" in state.export_python()
    for opt in state.opts:
        assert eval(opt_to_python(opt), {"Opt": Opt, "OptOp": OptOp, "AxisType": AxisType}) == opt


def test_make_opt_covers_every_optop_and_rejects_unknown_ones():
    assert make_opt("PADTO", 2, multiple=8) == Opt(OptOp.PADTO, 2, 8)
    assert make_opt("swap", 0, other_axis=2) == Opt(OptOp.SWAP, 0, 2)
    assert make_opt("NOLOCALS") == Opt(OptOp.NOLOCALS, None, None)
    assert make_opt("TC", 0, tc_select=-1, tc_opt=1, tc_mode=0) == Opt(OptOp.TC, 0, (-1, 1, 0))
    with pytest.raises(ValueError, match="unknown opt 'FUSE'"):
        make_opt("FUSE", 0)
    with pytest.raises(ValueError, match="unknown OptOp 'FUSE'"):
        TunerState.opts_from_json('{"opts": [["FUSE", 0, null]]}')
    with pytest.raises(TypeError, match="needs a Kernel"):
        TunerState(object())


def test_the_tuner_offers_every_optop_from_the_enum_with_its_controls():
    # the names come from OptOp itself (a hand copy would miss a new OptOp), in the enum's order
    assert OPT_NAMES == tuple(op.name for op in OptOp)
    assert OPT_NAMES[:5] == ("SPLIT", "PADTO", "SWAP", "NOLOCALS", "TC")  # the spec's five, in its order
    # every OptOp has its controls, and they are make_opt's parameters: an Opt of that OptOp comes out
    assert set(OPT_CONTROLS) == set(OPT_NAMES)
    values = {"axis": 1, "factor": 2, "target": "UPCAST", "top": False, "multiple": 4, "other_axis": 0,
              "tc_select": -1, "tc_opt": 0, "tc_mode": 1}  # fmt: skip
    for name, controls in OPT_CONTROLS.items():
        opt = make_opt(name, **{control: values[control] for control in controls})
        assert opt.op is OptOp[name]
        assert opt.axis == (None if name == "NOLOCALS" else 1)


def test_sources_come_from_the_kernel_per_backend_and_failures_stay_in_their_pane():
    state = TunerState(matmul_kernel(8, 8, 8))
    state.apply(make_opt("SPLIT", 0, factor=2))
    entry = state.source("c")
    assert entry.source == state.kernel.source("c") and not entry.error
    assert state.source("c") is entry  # cached for this kernel
    missing = state.source("no-such-backend")
    assert missing.source == "" and "no-such-backend" in missing.error
    state.undo()
    assert state.source("c").source == state.kernel.source("c") != entry.source


def test_timing_rates_come_from_the_kernels_counts():
    state = TunerState(matmul_kernel(16, 32, 8))
    entry = state.timing("c")
    assert not entry.error and entry.median_s > 0 and entry.runs > 0
    assert entry.flops == state.kernel.flops and entry.bytes == state.kernel.bytes
    assert entry.gflops == pytest.approx(state.kernel.flops / entry.median_s / 1e9)
    assert entry.gbps == pytest.approx(state.kernel.bytes / entry.median_s / 1e9)
    assert entry.intensity == pytest.approx(state.kernel.flops / state.kernel.bytes)
    assert state.cached_timing("c") is entry

    class Bare:  # a Timing without counts, for a kernel without counts: rates stay unknown
        median_s, min_s, runs = 0.5, 0.4, 3

    bare = timing_entry(object(), "x", Bare())
    assert bare.gflops is None and bare.gbps is None and bare.intensity is None and bare.runs == 3


def test_axis_chips_use_the_axis_type_colours():
    state = TunerState(matmul_kernel(16, 16, 16))
    state.apply(make_opt("SPLIT", 0, factor=4, target="UPCAST"))
    chips = axes_html(state)
    for axis in state.axes:
        assert axis.color == axis.axis_type.color and f"background:{axis.color}" in chips
        assert axis.text in chips


def test_the_view_applies_undoes_and_reports_invalid_opts():
    tuner = KernelTuner([matmul_kernel(16, 16, 8), matmul_kernel(8, 8, 8, seed=1)], backends=["c", "python"])
    sources = tuner.sources.value
    assert "c" in sources and "python" in sources
    tuner.op.value, tuner.axis.value, tuner.factor.value, tuner.target.value = "SPLIT", 0, 4, "UPCAST"
    assert tuner.apply()
    assert tuner.sources.value != sources and "uv-ok" in tuner.message.value
    assert tuner.graph.uop is tuner.state.kernel.ast
    applied = tuner.sources.value
    tuner.factor.value = 3
    assert not tuner.apply()
    assert tuner.sources.value == applied and "uv-error" in tuner.message.value
    tuner.undo_button.click()
    assert tuner.sources.value == sources and not tuner.redo_button.disabled
    tuner.redo_button.click()
    assert tuner.sources.value == applied
    tuner.export_json_button.click()
    assert json.loads(tuner.export_text.value)["opts"][0][0] == "SPLIT"
    tuner.op.value = "PADTO"
    assert tuner.factor.layout.display == "none" and tuner.multiple.layout.display == ""
    tuner.kernel_select.value = 1
    assert tuner.state.opts == () and tuner.state.kernel is tuner.kernels[1]
    with pytest.raises(ValueError, match="at least one kernel"):
        KernelTuner([])


@pytest.mark.parametrize("backend", ["c", "python", "llvm"])
def test_both_highlighters_keep_the_source_text(backend):
    import html as html_module
    import re as re_module

    from uopviz.widgets.highlight import highlight

    source = matmul_kernel(8, 8, 4).source(backend)
    for precise in (False, True):
        fragment = highlight(source, backend, precise=precise)
        text = html_module.unescape(re_module.sub(r"<[^>]+>", "", fragment))
        assert text.strip() == source.strip()
        assert "white-space:pre" in fragment and "<span" in fragment


@pytest.mark.slow
def test_beam_button_replaces_the_kernel_undoably_and_fills_the_progress_bar(tmp_path, monkeypatch):
    # a BEAM cache of its own: timings kept in ~/.cache by earlier runs choose another winner, on
    # which the Apply button may rightly be off (nothing applies to the chosen axis)
    monkeypatch.setenv("UOPVIZ_CACHE", str(tmp_path / "cache"))
    kernel = matmul_kernel(32, 32, 32)
    tuner = KernelTuner([kernel], backends=["c"])
    tuner.beam_width.value, tuner.beam_budget.value = 2, 8
    tuner.beam(wait=True)
    result = tuner.beam_result
    assert result is not None and tuner.state.kernel is result.kernel
    assert tuner.beam_progress.value == tuner.beam_progress.max > 0
    assert result.best.name in tuner.beam_table.value and "BEAM (c)" in tuner.state.message
    assert "★ " + result.best.name in tuner.beam_table.value and "re-timed" in tuner.beam_table.value
    assert not tuner.beam_button.disabled
    # Apply is on exactly when some value of the chosen op applies to the chosen axis of the winner
    # (which winner depends on the timings: a fully tiled one may leave the axis nothing to split)
    choices = tuner.state.choices(tuner.op.value, tuner.axis.value)
    offered = choices.splits or choices.multiples or choices.partners or choices.applies
    assert tuner.apply_button.disabled == (not offered)
    # the chart shows the winner's re-timed median, the figure the summary and the table's top row show
    assert tuner.state.cached_timing("c").median_s == result.winner_s and tuner.timings.children
    assert tuner.candidate_select.options[0][0].endswith("★") and not tuner.open_candidate_button.disabled
    tuner.candidate_select.value = 1
    tuner.open_candidate_button.click()
    assert tuner.state.kernel.name == result.ranked()[1].name
    assert "opened BEAM candidate 1" in tuner.state.message
    assert tuner.state.undo() and tuner.state.kernel is result.kernel
    assert tuner.state.undo() and tuner.state.kernel is kernel


def test_tensor_core_opt_from_the_controls():
    kernel = matmul_kernel(16, 16, 16)
    tuner = KernelTuner([kernel], backends=["c"], show_graph=False)
    tuner.op.value = "TC"
    assert tuner.axis.description == "reduce #" and [v for _, v in tuner.axis.options] == [0]
    assert tuner.apply(), tuner.state.message
    expected = kernel.apply(Opt(OptOp.TC, 0, (-1, 0, 1)))
    assert tuner.state.kernel.ast is expected.ast
    assert {a.axis_type for a in tuner.state.axes} >= {AxisType.UPCAST, AxisType.UNROLL}


def test_beam_times_on_the_kernels_own_backend_by_default():
    # the Python interpreter's timings say nothing about compiled code: never the default when the
    # kernel was compiled for another backend, whatever order the backends are shown in
    c_kernel = matmul_kernel(8, 8, 8)
    ones = uv.Tensor(np.ones((8, 8), np.float32))
    (python_kernel,) = uv.compile(ones @ ones, backend="python").kernels
    assert KernelTuner([c_kernel], backends=["python", "c"], show_graph=False).beam_backend.value == "c"
    tuner = KernelTuner([python_kernel], backends=["python", "c"], show_graph=False)
    assert tuner.beam_backend.value == "python"
    assert beam_backend_for(python_kernel, ["opencl", "c"]) == "opencl"
    assert beam_backend_for(c_kernel, ["python"]) == "python"


def test_the_kernel_list_names_each_kernel_as_it_is_now():
    x = uv.Tensor(np.ones((32, 64), np.float32))
    program = uv.compile([x @ uv.Tensor(np.ones((64, 16), np.float32)), (x * 2).sum(1)], backend="c")
    tuner = KernelTuner(program.kernels, backends=["c"], show_graph=False)
    tuner.kernel_select.value = 1
    assert tuner.apply(Opt(OptOp.SPLIT, 0, (4, AxisType.UPCAST, False))), tuner.state.message
    labels = dict((value, label) for label, value in tuner.kernel_select.options)
    assert labels[1] == f"1: {tuner.state.kernel.name} (was {program.kernels[1].name})"
    assert labels[0] == f"0: {program.kernels[0].name}"
    assert tuner.kernel_select.value == 1 and tuner.state.kernel.opts  # still on the tuned kernel


def heuristic_matmul_512():
    """The kernel a user hand-tuned when "Time on all backends" hung: the C heuristic's 512 matmul
    (THREAD, UPCAST 4 x 32), far too slow for the Python interpreter."""
    rng = np.random.default_rng(5)
    a, b = (uv.Tensor(rng.random((512, 512), dtype=np.float32)) for _ in range(2))
    return uv.compile(a @ b, backend="c", opts="heuristic", build=False).kernels[0]


def test_time_on_all_backends_keeps_to_its_budget_and_refuses_what_a_backend_cannot_run():
    import time

    backends = [b for b in ("c", "opencl", "python") if b in uv.backends.available()]
    tuner = KernelTuner([heuristic_matmul_512()], backends=backends, show_graph=False)
    tuner.timing_budget_s = 2.0
    started = time.monotonic()
    tuner.time_all(wait=True)
    elapsed = time.monotonic() - started
    entries = {b: tuner.state.cached_timing(b) for b in backends}
    assert entries["c"].median_s > 0 and not entries["c"].error
    assert entries["c"].min_s <= entries["c"].median_s <= entries["c"].max_s
    assert "stopped at its 2 s budget" in entries["python"].error
    if "opencl" in entries:  # the C heuristic's THREAD axis: refused before the worker, no SIGSEGV
        assert entries["opencl"].error.startswith("OptError") and "THREAD" in entries["opencl"].error
    # builds are not in the budget: the C compile (cached after the first run) and the worker start
    assert elapsed < 2.0 * len(backends) + 30
    assert tuner.time_button.description == "Time on all backends" and tuner._timing_thread is None
    rows = {r["backend"]: r for r in timing_rows_of(tuner)}
    assert "spread" in rows["c"] and rows["python"]["error"].startswith("stopped")


def timing_rows_of(tuner):
    from uopviz.widgets.backends_view import timing_rows

    return timing_rows([tuner.state.cached_timing(b) for b in tuner.backends])


def test_the_time_button_becomes_stop_and_stops_the_timing():
    import time

    tuner = KernelTuner([heuristic_matmul_512()], backends=["python", "c"], show_graph=False)
    tuner.timing_budget_s = 120.0
    tuner.time_button.click()
    assert tuner.time_button.description == "Stop"
    time.sleep(1.5)  # the interpreter is running the 512 matmul in the worker
    started = time.monotonic()
    tuner.time_button.click()
    while tuner._timing_thread is not None and time.monotonic() - started < 20:
        time.sleep(0.05)
    assert tuner._timing_thread is None and time.monotonic() - started < 5
    assert tuner.time_button.description == "Time on all backends"
    assert [tuner.state.cached_timing(b) for b in ("python", "c")] == [None, None]  # stopped: not cached
    (listed,) = tuner.timings.children  # nothing was timed: the list says so, no empty chart over it
    assert listed.value.count("stopped") == 2


# -- sessions, BEAM's candidates, schedule diffs (issue #24) ----------------------------------------


@pytest.mark.parametrize("shape", [(8, 16, 4), (16, 32, 8)])
def test_a_session_saved_and_loaded_rebuilds_the_kernel_and_its_timings(tmp_path, shape):
    from uopviz.engine.search import kernel_key

    kernel = matmul_kernel(*shape, seed=shape[0])
    state = TunerState(kernel)
    opts = [make_opt("SPLIT", 0, factor=4), make_opt("SPLIT", 2, factor=2, target="UNROLL")]
    assert state.apply_all(opts)
    entry = state.timing("c")
    path = tmp_path / "session.json"
    state.save_session(path)
    data = json.loads(path.read_text())
    assert data["kernel"] == {"name": kernel.name, "key": kernel_key(kernel), "backend": "c"}
    assert data["target"] == uv.cpu_target().name and data["device"] == entry.device
    assert [t["timing"]["median_s"] for t in data["timings"]] == [entry.median_s]
    assert [p["pass"] for p in data["trace"]] == [f"apply {opt}" for opt in opts]
    fresh = TunerState(matmul_kernel(*shape, seed=shape[0]))
    replayed = fresh.load_session(path)
    assert replayed.ast is state.kernel.ast and fresh.opts == state.opts == tuple(opts)
    assert fresh.can_undo and fresh.timing_history[0]["timing"] == data["timings"][0]["timing"]
    assert fresh.load_session(data).ast is state.kernel.ast  # the dict works as the file does


def test_a_session_of_another_kernel_is_a_clear_error(tmp_path):
    from uopviz.widgets.tuner import TunerSessionError

    state = TunerState(matmul_kernel(8, 16, 4))
    state.apply(make_opt("SPLIT", 0, factor=4))
    data = state.session()
    other = TunerState(matmul_kernel(16, 16, 4))
    expected = "saved for another kernel: name 'r_g8_g4_R16' there"
    with pytest.raises(TunerSessionError, match=expected) as raised:
        other.load_session(data)
    assert isinstance(raised.value, uv.UopvizError) and other.kernel is other.base
    with pytest.raises(TunerSessionError, match="not a tuner session"):
        other.load_session({"format": "something else"})
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(TunerSessionError, match="cannot be read"):
        other.load_session(tmp_path / "broken.json")


@pytest.mark.slow
def test_beam_candidates_open_in_the_tuner_and_the_winner_has_one_time_everywhere(tmp_path):
    from uopviz.engine.records import TuningRecords
    from uopviz.engine.search import BeamCache
    from uopviz.widgets.beam_runner import candidate_rows, candidates_html, run_beam

    kernel = matmul_kernel(16, 32, 8, seed=3)
    state = TunerState(kernel)
    best, summary, result = run_beam(kernel, "c", width=2, budget_s=8, cache=BeamCache(tmp_path / "b.sqlite"))
    state.take_beam(result, summary)
    rows = candidate_rows(result)
    top = rows[0]
    assert top["winner"] and top["name"] == result.best.name and state.kernel is best
    # the one figure: summary, the table's top row and the chart's timing all show the re-timed median
    assert top["figure"] == result.winner_figure == "re-timed median"
    assert top["time_s"] == result.winner_s == result.best.retimed.median_s
    assert state.cached_timing("c").median_s == result.winner_s
    assert f"{uv.backends.timing.format_seconds(result.winner_s)} (re-timed median)" in summary
    # the winner is the fastest re-timed run of the verified finalists; the starting kernel was re-timed too
    finalists = [row for row in rows if row["best_run_s"] is not None]
    assert top["best_run_s"] == min(row["best_run_s"] for row in finalists)
    assert all(row["check"] == "outputs match the untuned kernel's" for row in finalists)
    assert result.baseline.retimed is not None and "won: the fastest re-timed run" in result.reason()
    assert "the runner-up" in result.reason() and html.escape(result.reason()) in candidates_html(result)
    scroll_box = '<div class="uv-beam-box" style="max-height:360px;overflow:auto">'
    assert candidates_html(result).startswith(scroll_box)
    # any candidate opens in the tuner, computes the same as the untuned kernel, and can be undone
    a, b = (np.random.default_rng(1).random(s, dtype=np.float32) for s in ((16, 32), (32, 8)))
    last_ok = max(row["index"] for row in rows if row["ok"])
    for index in (1, last_ok):
        opened = state.open_candidate(index)
        assert opened.name == rows[index]["name"] and state.kernel is opened
        assert ", ".join(map(repr, opened.opts)) == rows[index]["opts"].replace("—", "")
        records = TuningRecords()
        records.add(kernel, opened.opts, backend="c")
        program = uv.compile(uv.Tensor(a) @ uv.Tensor(b), backend="c", opts=records)
        assert program.kernels[0].opts == opened.opts  # the candidate's schedule is what ran
        np.testing.assert_allclose(program.run()[0], a @ b, rtol=1e-4)
        assert state.undo() and state.kernel is best
    with pytest.raises(IndexError, match="out of range"):
        state.open_candidate(len(rows))
    assert state.session()["beam"]["winner_s"] == result.winner_s


@pytest.mark.parametrize("shape", [(8, 16, 4), (32, 64, 16)])
def test_schedule_diff_of_two_opt_lists_on_a_matmul(shape):
    from uopviz.widgets.schedule_diff import schedule_diff

    kernel = matmul_kernel(*shape)
    first = kernel.apply(make_opt("SPLIT", 0, factor=4))
    second = kernel.apply(make_opt("SPLIT", 1, factor=2))
    second = second.apply(make_opt("SPLIT", 2, factor=4, target="UNROLL"))
    diff = schedule_diff(first, second, ["c", "python"])
    assert diff.opts_a == first.opts and diff.opts_b == second.opts and not diff.same_opts
    assert diff.common_opts == 0
    assert [(a.size, a.axis_type) for a in diff.axes_a] == list(first.axes)
    assert [(a.size, a.axis_type) for a in diff.axes_b] == list(second.axes)
    for backend in ("c", "python"):
        sources = diff.sources[backend]
        assert sources.a.source == first.source(backend) and sources.b.source == second.source(backend)
        assert not sources.same and sources.diff.startswith(f"--- a ({backend})")
        lines = sources.diff.splitlines()
        removed = [line[1:] for line in lines if line.startswith("-") and line[1:2] != "-"]
        assert removed and all(line in sources.a.source for line in removed)
    assert schedule_diff(first, first, ["c"]).sources["c"].same
    assert schedule_diff(first, first, ["c"]).sources["c"].diff == ""


def test_the_tuner_compares_with_the_heuristic_and_history_and_saves_sessions(tmp_path):
    kernel = matmul_kernel(16, 16, 16)
    tuner = KernelTuner([kernel], backends=["c"], show_graph=False)
    tuner.apply(make_opt("SPLIT", 0, factor=4))
    labels = [label for label, _ in tuner.compare_select.options]
    assert labels[0].startswith("the heuristic's") and any(label.startswith("history 0") for label in labels)
    tuner.compare(labels.index(next(label for label in labels if label.startswith("history 0"))))
    view = tuner.compare_view.value
    assert "uv-schedule-diff" in view and "--- a (c)" in view and kernel.name in view
    tuner.session_path.value = str(tmp_path / "s.json")
    tuner.save_session_button.click()
    assert "saved the session" in tuner.state.message and not tuner.state.error
    assert tuner.compare_view.value == view  # saving changes no kernel: the comparison stays
    tuner.apply(make_opt("SPLIT", 1, factor=2))
    assert tuner.compare_view.value == ""  # it compared the kernel before: no stale "a: the current kernel"
    tuner.undo_button.click()
    other = KernelTuner([matmul_kernel(8, 16, 16)], backends=["c"], show_graph=False)
    other.session_path.value = str(tmp_path / "s.json")
    other.load_session_button.click()
    assert other.state.error and "TunerSessionError" in other.state.message
    assert "another kernel" in other.state.message
    again = KernelTuner([matmul_kernel(16, 16, 16)], backends=["c"], show_graph=False)
    again.session_path.value = str(tmp_path / "s.json")
    again.load_session_button.click()
    assert again.state.kernel.ast is tuner.state.kernel.ast and not again.state.error


def _refuses(kernel, opt) -> bool:
    try:
        kernel.apply(opt)
    except OptError:
        return False
    return True


@pytest.mark.parametrize("backend", [b for b in ("c", "opencl") if b in uv.backends.available()])
@pytest.mark.parametrize("opts", [None, "heuristic"])
def test_the_choices_offered_are_exactly_the_opts_that_apply(backend, opts):
    """Every (target, factor, part) offered for SPLIT applies and every one not offered is refused by
    the kernel; PADTO's multiples and SWAP's partners likewise."""
    from uopviz.widgets.tuner import PAD_MULTIPLES

    rng = np.random.default_rng(2)
    a = uv.Tensor(rng.random((64, 48), dtype=np.float32))
    b = uv.Tensor(rng.random((48, 32), dtype=np.float32))
    kernel = uv.compile(a @ b, backend=backend, opts=opts, build=False).kernels[0]
    state = TunerState(kernel)
    for axis, (size, _) in enumerate(kernel.axes):
        choices = state.choices("SPLIT", axis)
        for target in AxisType:
            for factor in range(2, size + 1):
                for top in (False, True):
                    choice = choices.split(target)
                    offered = choice is not None and factor in choice.factors and top in choice.tops
                    opt = Opt(OptOp.SPLIT, axis, (factor, target, top))
                    assert offered == _refuses(kernel, opt), (opt, choices)
        padto = state.choices("PADTO", axis)
        assert padto.multiples == tuple(m for m in PAD_MULTIPLES
                                        if _refuses(kernel, Opt(OptOp.PADTO, axis, m)))
        swap = state.choices("SWAP", axis)
        assert swap.partners == tuple(o for o in range(len(kernel.axes))
                                      if o != axis and _refuses(kernel, Opt(OptOp.SWAP, axis, o)))
        assert state.choices("SPLIT", axis) is choices  # cached for this kernel
    assert state.choices("NOLOCALS", None).applies == _refuses(kernel, Opt(OptOp.NOLOCALS, None, None))


def test_the_target_dropdown_offers_only_what_applies_to_the_chosen_axis():
    """On the C matmul a GLOBAL axis offers THREAD (outer part, fixed) and UPCAST, the REDUCE axis
    UNROLL alone; a THREAD axis offers nothing, says why and turns Apply off."""
    tuner = KernelTuner([matmul_kernel(64, 48, 32)], backends=["c"], show_graph=False)
    tuner.op.value, tuner.axis.value = "SPLIT", 0
    assert list(tuner.target.options) == ["THREAD", "UPCAST"] and tuner.target.value == "UPCAST"
    assert "factors that apply: 2, 4, 8, 16, 32" in tuner.choice_hint.value and tuner.top.disabled
    tuner.target.value = "THREAD"
    assert tuner.top.value is True and "2, 4, 8, 16, 32, 64" in tuner.choice_hint.value
    assert tuner.apply()  # THREAD 2 from axis 0
    assert [a.axis_type for a in tuner.state.axes][0] is AxisType.THREAD
    tuner.axis.value = 0
    assert list(tuner.target.options) == ["(none)"] and tuner.apply_button.disabled
    assert "no SPLIT applies to axis 0: axis 0 is THREAD, and SPLIT makes new axes from " \
        "GLOBAL/GROUP_REDUCE/LOCAL/LOOP/REDUCE axes only" in html.unescape(tuner.choice_hint.value)
    reduce_axis = next(a.index for a in tuner.state.axes if a.axis_type is AxisType.REDUCE)
    tuner.axis.value = reduce_axis
    assert list(tuner.target.options) == ["UNROLL"] and not tuner.apply_button.disabled
    tuner.op.value = "PADTO"
    assert tuner.choice_hint.value.count("multiples that apply") == 1
    tuner.op.value, tuner.axis.value = "SWAP", 1
    assert [value for _, value in tuner.other_axis.options] == list(tuner.state.choices("SWAP", 1).partners)


def test_a_schedule_diff_colours_added_and_removed_lines():
    from uopviz.widgets.tuner_view import diff_lines_html

    lines = diff_lines_html("--- a (c)\n+++ b (c)\n@@ -1 +1 @@\n-old <x>\n+new\n same").split("</span>")
    assert "#ffebe9" in lines[3] and "old &lt;x&gt;" in lines[3] and "#dafbe1" in lines[4]
    assert "#8250df" in lines[2] and "#ffebe9" not in lines[0] and "#dafbe1" not in lines[1]
    assert lines[5].endswith("> same")


def test_the_timing_chart_names_each_device_on_a_line_of_its_own():
    from bokeh.models import Legend, Title

    from uopviz.widgets.backends_view import roofline_width, timing_figure

    devices = (("c", "CPU:Xeon [native] x86-64-v4[avx]"),
               ("opencl", "OpenCL:pthread-skylake [native] v4[avx]"))
    entries = [TimingEntry(backend, 1e-3, 1e-3, 10, 2.0, 1.0, 2e6, 1e6, device=device)
               for backend, device in devices]
    chart = timing_figure(entries, roofs=(100.0, 50.0))
    notes = [item.text for item in chart.children[0].below if isinstance(item, Title)]
    assert notes == ["measured on CPU:Xeon [native]", "and OpenCL:pthread-skylake [native]"]
    assert chart.styles["flex-wrap"] == "wrap"  # the roofline goes under the bars where both do not fit
    # the roofline is as wide as its one-line legend (the roof named, a dot per backend), else cut
    (legend,) = [item for item in chart.children[1].below if isinstance(item, Legend)]
    label = legend.items[0].label["value"]
    assert chart.children[1].width == roofline_width(label, ["c", "opencl"]) > 5.5 * len(label) + 2 * 34
    failed = timing_figure([*entries, TimingEntry("python", error="stopped")], roofs=(100.0, 50.0))
    assert [item.text for item in failed.children[0].below if isinstance(item, Title)][-1] == "failed: python"


def test_source_lines_map_to_the_drawn_graph_and_follow_an_opt():
    a = uv.Tensor(np.random.default_rng(3).random((8, 16), dtype=np.float32))
    b = uv.Tensor(np.random.default_rng(4).random((16, 4), dtype=np.float32))
    program = uv.compile((a @ b).relu(), backend="c")
    state = TunerState(program.kernels[0], program_trace=program.trace)
    from uopviz.widgets.graph import node_key

    def check(backend):
        found = state.provenance(backend)
        json.dumps(found)  # the front end's data
        drawn = {node_key(node): node for node in state.kernel.ast.toposort()}
        source = state.source(backend).source.split("\n")
        assert found["lines"] and not found["note"]
        for line, key, made, came in found["lines"]:
            assert 1 <= line <= len(source) and source[line - 1].strip()
            creator = found["creators"][made]
            assert key in drawn or creator["pass"], f"line {line} maps to no drawn node and no pass"
            if key is not None:
                assert found["ops"][key] == drawn[key].op.name
            assert came >= 0 and found["origins"][came].startswith(("Tensor.matmul", "Tensor.relu"))
        assert sum(key in drawn for _, key, _, _ in found["lines"]) == len(found["lines"])
        return found

    before = check("c")
    check("python")
    assert any("Tensor.relu" in origin for origin in before["origins"])
    assert any("lower_reduce" in c["text"] and "isel.py:" in c["text"] for c in before["creators"])
    assert state.apply(make_opt("SPLIT", 0, factor=4, target="UPCAST"))
    after = check("c")
    assert len(after["lines"]) > len(before["lines"])  # the upcast lanes: more lines, mapped again
    split = [c for c in after["creators"] if c["pass"].startswith("apply Opt(SPLIT")]
    assert split, "the opt that built the split ranges is named"
    assert state.undo() and state.provenance("c") == before
    # without the program's trace: the origins recorded on the base kernel's nodes, for every line
    bare = TunerState(program.kernels[0]).provenance("c")
    assert [line[:3] for line in bare["lines"]] == [line[:3] for line in before["lines"]]
    assert all(came >= 0 for *_, came in bare["lines"])
    # which call is named is not checked here: UOps are hash-consed, and another program of this process
    # (an earlier test's, in the same worker) may have recorded its own call on a node this kernel
    # shares; without the program's trace the latest recorded call is named (with it, check() above:
    # only this program's calls)


def test_the_tuner_view_links_source_lines_and_graph_nodes():
    a = uv.Tensor(np.random.default_rng(5).random((8, 16), dtype=np.float32))
    b = uv.Tensor(np.random.default_rng(6).random((16, 4), dtype=np.float32))
    program = uv.compile((a @ b).relu(), backend="c")
    tuner = KernelTuner(program.kernels, backends=["c", "python"], trace=program.trace)
    assert set(tuner.sources.provenance) == {"c", "python"}
    assert tuner.sources.provenance["c"] == tuner.state.provenance("c")
    assert 'data-backend="c"' in tuner.sources.value and 'data-backend="python"' in tuner.sources.value
    drawn = set(tuner.graph.graph_model.nodes)
    keys = {key for _, key, _, _ in tuner.sources.provenance["c"]["lines"]}
    assert keys and keys <= drawn  # every clickable line selects a node the graph draws
    key = sorted(keys)[0]
    tuner.sources.selected = key  # a line clicked
    assert tuner.graph.selected == key
    tuner.graph.selected = ""  # a node clicked away in the graph
    assert tuner.sources.selected == ""
    tuner.apply(make_opt("SPLIT", 0, factor=4, target="UPCAST"))
    assert tuner.sources.provenance["c"] == tuner.state.provenance("c") and tuner.state.opts
    tuned_keys = {key for _, key, _, _ in tuner.sources.provenance["c"]["lines"]}
    assert tuned_keys <= set(tuner.graph.graph_model.nodes) and tuned_keys != keys
