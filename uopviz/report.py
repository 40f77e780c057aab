"""Standalone interactive HTML reports: ``uopviz report SOURCE -o out.html``.

SOURCE is a Python file that builds what to show (a ``main()`` returning it, or module-level
values), or an NNEF model (a ``.sknd`` file, an NNEF 1.0 ``graph.nnef``, a model folder or a
``.tgz`` of one).  Tensors (one, or a list) are compiled with ``uv.compile`` and reported whole (tabs
Graph, Pipeline, Kernels, Backends); UOps get a Graph tab, traces a Pipeline tab, programs and
kernels what they have.  Other kinds of sources plug in through :func:`register_loader`.

The page is one file with everything inline (the views' JS and CSS, bokeh's JS, the state as
JSON); it opens from disk with no server and no network.
"""

from __future__ import annotations

import datetime
import html
import json
import runpy
import sys
import time
import urllib.parse
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from uopviz.core.errors import UopvizError
from uopviz.core.progress import Report
from uopviz.core.rewrite import Trace
from uopviz.core.uop import UOp
from uopviz.engine.program import compiled_graph


class ReportError(UopvizError, RuntimeError):
    """A report cannot be made: the source is missing, fails to run, or builds nothing to show."""


Loader = Callable[[Path], list[tuple[str, Any]]]
_LOADERS: list[tuple[Callable[[Path], bool], Loader]] = []


def register_loader(accepts: Callable[[Path], bool], load: Loader) -> None:
    """Let ``uopviz report`` read another kind of SOURCE: ``load(path)`` returns ``(name, object)``
    pairs to report for every path where ``accepts(path)`` is true (newest registration first)."""
    _LOADERS.append((accepts, load))


def _is_tensor(x: Any) -> bool:
    return type(x).__name__ == "Tensor" and isinstance(getattr(x, "uop", None), UOp)


def _is_program(x: Any) -> bool:
    return hasattr(x, "kernels") and isinstance(getattr(x, "trace", None), Trace)


def _is_kernel(x: Any) -> bool:
    return all(hasattr(x, n) for n in ("axes", "opts", "apply", "source")) and not _is_program(x)


def _reportable(x: Any) -> bool:
    from uopviz.widgets.models import is_model_graph

    if isinstance(x, list | tuple):
        return bool(x) and all(_is_tensor(v) for v in x)
    return _is_tensor(x) or isinstance(x, UOp | Trace) or _is_program(x) or _is_kernel(x) or is_model_graph(x)


#: Seconds each kernel may be timed for on each backend in a report (its runs stop at half of it):
#: a report times every kernel on every backend, and a few runs give the chart its bars.
REPORT_TIMING_BUDGET_S = 1.0


def _inputs_of_others(items: list[tuple[str, Any]]) -> set[int]:
    """Ids of the tensors among ``items`` that another tensor item is computed from: module-level
    inputs (``x = uv.Tensor(array)``) are shown inside the result that uses them, not on their own."""
    from uopviz.core.uop import toposort

    tensors = [v for _, v in items if _is_tensor(v)]
    inputs: set[int] = set()
    for value in tensors:
        below = {id(u) for u in toposort([value.uop])} - {id(value.uop)}
        inputs.update(id(other) for other in tensors if other is not value and id(other.uop) in below)
    return inputs


#: Suffixes of files ``uopviz report`` reads as NNEF models (folders too: main.sknd or graph.nnef).
NNEF_SUFFIXES = (".sknd", ".nnef", ".tgz", ".tar.gz")


def is_nnef_path(path: Path) -> bool:
    """True for an NNEF model: a SkriptND file, an NNEF 1.0 graph, an archive, or a model folder."""
    if path.is_dir():
        return (path / "main.sknd").is_file() or (path / "graph.nnef").is_file()
    return path.name.endswith(NNEF_SUFFIXES)


def load_nnef_source(path: Path) -> list[tuple[str, Any]]:
    """An NNEF model as the one item of a report (read with ``uv.nnef.load``)."""
    from uopviz import nnef

    try:
        return [(path.name, nnef.load(path))]
    except nnef.NNEFError as error:
        raise ReportError(f"{path}: not a readable NNEF model: {error}") from error


def load_python_source(path: Path) -> list[tuple[str, Any]]:
    """Run a Python file and collect what it builds: ``main()``'s result if it defines ``main``,
    else its module-level Tensors, Programs, Kernels, UOps and Traces (by name)."""
    directory = str(path.parent.resolve())
    sys.path.insert(0, directory)
    try:
        namespace = runpy.run_path(str(path), run_name="__uopviz_report__")
        if callable(namespace.get("main")):
            result = namespace["main"]()
            if isinstance(result, dict):
                items = list(result.items())
            elif _reportable(result):
                items = [("main()", result)]
            elif isinstance(result, list | tuple):
                items = [(f"main()[{i}]", v) for i, v in enumerate(result)]
            else:
                items = [("main()", result)]
        else:
            items = [
                (name, value)
                for name, value in namespace.items()
                if not name.startswith("_") and _reportable(value)
            ]
            inputs = _inputs_of_others(items)
            items = [(name, value) for name, value in items if id(value) not in inputs]
    except ReportError:
        raise
    except Exception as error:
        raise ReportError(f"{path}: running it failed: {type(error).__name__}: {error}") from error
    finally:
        if directory in sys.path:
            sys.path.remove(directory)
    shown = [(name, value) for name, value in items if _reportable(value)]
    if not shown:
        found = ", ".join(f"{n}: {type(v).__name__}" for n, v in items) or "nothing"
        raise ReportError(
            f"{path}: builds no Tensor, Program, Kernel, UOp or Trace to report (found {found}); "
            "define main() returning tensors, or module-level tensors"
        )
    return shown


def load_source(source: str | Path) -> list[tuple[str, Any]]:
    """The ``(name, object)`` pairs a SOURCE path stands for."""
    path = Path(source)
    if not path.exists():
        raise ReportError(f"{path}: no such file or directory")
    for accepts, load in reversed(_LOADERS):
        if accepts(path):
            return load(path)
    if path.suffix == ".py":
        return load_python_source(path)
    if is_nnef_path(path):
        return load_nnef_source(path)
    raise ReportError(
        f"{path}: not a source uopviz can report (a .py file that builds tensors"
        + (", or a model a registered loader reads" if _LOADERS else "")
        + ")"
    )


# ---------------------------------------------------------------------------------------------
# progress

#: Seconds between two progress lines of the same stage (its first and last lines always print).
PROGRESS_INTERVAL_S = 1.0


def stderr_progress(prefix: str = "uopviz report: ", stream: Any = None) -> Report:
    """A progress callback ``(done, total, stage)`` that prints lines such as
    ``uopviz report: out: player frames 120/801`` to stderr: a stage's first and last steps, and
    one line a second in between (a log stays short, a terminal shows the work moving)."""
    last: dict[str, float] = {}

    def report(done: int, total: int, stage: Any = None) -> None:
        now, name = time.monotonic(), str(stage or "")
        if done not in (0, total) and now - last.get(name, 0.0) < PROGRESS_INTERVAL_S:
            return
        last[name] = now
        count = f" {done}/{total}" if total > 1 else ""
        print(f"{prefix}{name}{count}", file=stream or sys.stderr, flush=True)

    return report


def _stage(progress: Report | None, text: str) -> None:
    """Report the start of a one-step stage (compiling, timing, writing)."""
    if progress is not None:
        progress(0, 1, text)


# ---------------------------------------------------------------------------------------------
# building the page


def build_report(
    items: list[tuple[str, Any]],
    title: str = "uopviz report",
    *,
    backends: list[str] | None = None,
    opts: Any = "heuristic",
    time_kernels: bool = True,
    meta: str = "",
    progress: Report | None = None,
) -> str:
    """The HTML of a report over ``items`` (``(name, object)`` pairs); ``progress(done, total,
    stage)`` hears of each stage (compiling, player frames, timing; :func:`stderr_progress`)."""
    from uopviz.widgets.embed import StaticPage

    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    page = StaticPage(title, meta=(meta + " · " if meta else "") + f"made {stamp} by uopviz")
    for name, value in items:
        _add_item(page, name, value, backends=backends, opts=opts, time_kernels=time_kernels,
                  progress=progress)
    _stage(progress, "rendering the page")
    return page.render()


def _add_item(page: Any, name: str, value: Any, **options: Any) -> None:
    from uopviz.widgets.models import is_model_graph, model_html

    if isinstance(value, UOp):
        page.add_dag("Graph", name, value)
    elif is_model_graph(value):
        page.add_operator_graph("Model", f"{name}: operator graph", value)
        page.add_html("Model", f"{name}: operations and tensors", model_html(value))
        backends = options["backends"]
        _stage(options["progress"], f"{name}: compiling")
        program = value.compile(backend=backends[0] if backends else "c", opts=options["opts"])
        _add_program(page, name, program, None, **options)
    elif isinstance(value, Trace):
        page.add_player("Pipeline", name, value, progress=_named(options["progress"], name))
    elif _is_kernel(value):
        _add_kernels(page, name, [value], **options)
    else:
        _stage(options["progress"], f"{name}: compiling")
        program, graph = _program_of(value, options["opts"], options["backends"])
        _add_program(page, name, program, graph, **options)


def _add_program(page: Any, name: str, program: Any, graph: UOp | None, **options: Any) -> None:
    if graph is None:
        graph = compiled_graph(program)
    if graph is not None:
        page.add_dag("Graph", f"{name}: tensor graph", graph)
    rangeify = next((p for p in program.trace.passes if p.name == "Rangeify" and p.output is not None), None)
    if rangeify is not None and rangeify.output is not graph:
        count = len(program.kernels)
        heading = (f"{name}: the program after Rangeify ({count} kernel{'s' if count != 1 else ''}, each the "
                   "body of a CALL: open them one by one)")
        page.add_dag("Graph", heading, rangeify.output)
    kernels = list(program.kernels)
    builds = _start_builds(kernels, options) if program.trace.passes else None
    if program.trace.passes:
        page.add_player("Pipeline", f"{name}: lowering pipeline", program.trace,
                        progress=_named(options["progress"], name))
    _add_kernels(page, name, kernels, builds=builds, **options)


def _named(progress: Report | None, name: str) -> Report | None:
    """``progress`` with the item's name before each stage's text."""
    if progress is None:
        return None
    return lambda done, total, stage=None: progress(done, total, f"{name}: {stage}")


def _program_of(value: Any, opts: Any, backends: list[str] | None) -> tuple[Any, UOp | None]:
    import uopviz

    if _is_program(value):
        stage = next((p for p in value.trace.passes if p.input is not None), None)
        return value, stage.input if stage is not None else None
    tensors = list(value) if isinstance(value, list | tuple) else [value]
    compile_options: dict[str, Any] = {"opts": opts}
    if backends:
        compile_options["backend"] = backends[0]
    program = uopviz.compile(tensors if len(tensors) > 1 else tensors[0], **compile_options)
    graph = tensors[0].uop if len(tensors) == 1 else UOp(uopviz.Ops.SINK, tuple(t.uop for t in tensors))
    return program, graph


def _start_builds(kernels: list[Any], options: dict[str, Any]) -> Builds | None:
    """Start compiling ``kernels`` on every backend they are timed on (None when nothing is timed):
    their sources are rendered here, then compiled in the worker process (``Worker.compile_many``:
    C's compiler runs side by side) from a thread of their own, while this process goes on with what
    times nothing (the player's frames).  The timings wait for the builds, and no build is timed."""
    from uopviz.widgets.backends_view import backend_names
    from uopviz.widgets.tuner import TunerState

    if not options["time_kernels"] or not kernels:
        return None
    states = [TunerState(kernel) for kernel in kernels]
    names = backend_names(options["backends"])
    jobs = {backend: [(entry.source, state.kernel.name) for state in states
                      if (entry := state.source(backend)).source and not entry.error]
            for backend in names}
    pool = ThreadPoolExecutor(1, thread_name_prefix="uopviz-report-builds")
    future = pool.submit(_build_all, {backend: sources for backend, sources in jobs.items() if sources})
    pool.shutdown(wait=False)  # the thread ends with the builds; the timings wait on ``future``
    return Builds(states, future)


@dataclass
class Builds:
    """Kernels being compiled for their timings (:func:`_start_builds`): their tuner states (which
    keep the rendered sources) and the builds' future."""

    states: list[Any]
    future: Future[None]


def _build_all(jobs: dict[str, list[tuple[str, str]]]) -> None:
    """Compile each backend's ``(source, name)`` kernels in the worker process, one backend after
    another.  A kernel that fails to build is left to its timing, which builds it again and shows why."""
    from uopviz.backends import worker

    for backend, sources in jobs.items():
        try:
            worker.default_worker().compile_many(backend, sources)
        except Exception:  # noqa: BLE001, S112 - the timing of the kernel reports the same failure
            continue


def _add_kernels(
    page: Any, name: str, kernels: list[Any], *, backends: list[str] | None, time_kernels: bool,
    progress: Report | None = None, builds: Builds | None = None, **_: Any
) -> None:
    from uopviz.widgets.backends_view import backend_names, backends_table_html, timing_figure
    from uopviz.widgets.tuner import TunerState
    from uopviz.widgets.tuner_view import axes_html, sources_html

    names = backend_names(backends)
    if builds is None:
        builds = _start_builds(kernels, {"time_kernels": time_kernels, "backends": backends})
    states = builds.states if builds is not None else [TunerState(kernel) for kernel in kernels]
    for number, (kernel, state) in enumerate(zip(kernels, states, strict=True)):
        heading = f"{name}: kernel {getattr(kernel, 'name', '')}"
        opts_text = html.escape(state.export_python()) if state.opts else "(no opts: the kernel as lowered)"
        page.add_html(
            "Kernels",
            heading,
            f'<div class="uv-axes">{axes_html(state)}</div>'
            f'<pre class="uv-opts">{opts_text}</pre>{sources_html(state, names, precise=True)}',
        )
        if isinstance(getattr(kernel, "ast", None), UOp):
            page.add_dag("Kernels", "", kernel.ast, height=680)  # kernels are tall: room for labels
        if time_kernels:
            if progress is not None:
                progress(number, len(kernels), f"{name}: timing kernels on {', '.join(names)}")
            if builds is not None:
                builds.future.result()  # nothing is timed while a compiler runs beside it
            entries = [state.timing(b, budget_s=REPORT_TIMING_BUDGET_S) for b in names]
            page.add_bokeh("Kernels", "", timing_figure(entries, getattr(kernel, "name", "")))
        page.add_html("Kernels", "", session_html(state))
    if time_kernels and progress is not None:
        progress(len(kernels), len(kernels), f"{name}: timing kernels on {', '.join(names)}")
    page.add_html("Backends", f"{name}: backends", backends_table_html(kernels, names, time_kernels=False))


def session_html(state: Any) -> str:
    """A kernel's tuning session (:meth:`TunerState.session`: opts, timings, target, device, trace
    summary) as a folded JSON block with a download link; the file loads back into a tuner with
    ``TunerState(kernel).load_session(path)``.  A kernel whose session cannot be made says why."""
    from uopviz.widgets.tuner import TunerSessionError

    name = getattr(state.kernel, "name", "kernel")
    try:
        text = json.dumps(state.session(), indent=1)
    except TunerSessionError as error:
        why = html.escape(str(error))
        return f'<p class="uv-session">No tuning session for {html.escape(name)}: {why}</p>'
    link = f"data:application/json;charset=utf-8,{urllib.parse.quote(text)}"
    return (f'<details class="uv-session"><summary>Tuning session of {html.escape(name)} (JSON: '
            f'<a download="{html.escape(name)}.session.json" href="{link}">save</a>, then '
            f"<code>TunerState(kernel).load_session(path)</code> replays it in a tuner)</summary>"
            f"<pre>{html.escape(text)}</pre></details>")


def write_report(source: str | Path, output: str | Path, **options: Any) -> Path:
    """Read SOURCE, build the report, write it to ``output``; return the output path."""
    _stage(options.get("progress"), f"running {source}")
    items = load_source(source)
    title = options.pop("title", None) or f"uopviz report: {Path(source).name}"
    text = build_report(items, title, meta=str(source), **options)
    _stage(options.get("progress"), f"writing {output}")
    out = Path(output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return out


def cmd_report(args: Any) -> int:
    """``uopviz report``: write the report, print where; exit 2 with the reason on bad input."""
    try:
        out = write_report(
            args.source,
            args.output,
            backends=args.backend or None,
            opts=args.opts,
            time_kernels=not args.no_timing,
            title=args.title,
            progress=stderr_progress(),
        )
    except ReportError as error:
        print(f"uopviz report: {error}", file=sys.stderr)
        return 2
    size_kib = out.stat().st_size / 1024
    print(f"uopviz report: wrote {out} ({size_kib:.0f} KiB); open it in a browser (no server needed)")
    return 0
