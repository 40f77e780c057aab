"""BEAM search for the tuner: ``uopviz.passes.beam.beam_search`` with its progress turned into
``progress(done, total)`` calls for a progress bar, and a one-line summary of the outcome."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def run_beam(kernel: Any, backend: str, *, width: int = 4, budget_s: float = 60.0,
             progress: Callable[[int, int], None] | None = None, **options: Any) -> tuple[Any, str, Any]:
    """Search ``kernel``'s opts on ``backend``; return (best kernel, summary, the BeamResult)."""
    from uopviz.passes.beam import beam_search

    def report(event: Any) -> None:
        if progress is not None:
            progress(event.done, event.total)

    result = beam_search(kernel, backend, width=width, budget_s=budget_s, progress=report, **options)
    best = result.best
    speedup = result.speedup
    timing = f"{best.run_s * 1e3:.3f} ms" if best.run_s is not None else "no time"
    summary = (f"{best.name}: {timing}" + (f", {speedup:.2f}x the unoptimized kernel" if speedup else "")
               + f" ({len(result.candidates)} candidates in {result.elapsed_s:.1f} s"
               + (f"; {result.stopped}" if result.stopped else "") + ")")
    return result.kernel, summary, result


def candidates_html(result: Any, limit: int = 8) -> str:
    """The fastest candidates of a BEAM result as a small HTML table."""
    import html

    def run_time(row: dict[str, Any]) -> str:
        return "—" if row["run_s"] is None else f"{row['run_s'] * 1e3:.3f} ms"

    body = "".join(
        f"<tr><td>{html.escape(row['name'])}</td><td>{html.escape(', '.join(row['opts']) or '—')}</td>"
        f"<td>{run_time(row)}</td><td>{html.escape(row['error'] or '')}</td></tr>"
        for row in result.table()[:limit])
    head = "<tr><th>kernel</th><th>opts</th><th>run time</th><th>error</th></tr>"
    return (f'<table class="uv-table" style="font-size:12px;border-collapse:collapse"><thead>{head}</thead>'
            f"<tbody>{body}</tbody></table>")
