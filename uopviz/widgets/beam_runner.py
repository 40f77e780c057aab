"""BEAM search for the tuner: ``uopviz.engine.search.beam_search`` with its progress turned into
``progress(done, total)`` calls for a progress bar, and a one-line summary of the outcome."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from uopviz.backends.timing import format_seconds


def run_beam(kernel: Any, backend: str, *, width: int = 4, budget_s: float = 60.0,
             progress: Callable[[int, int], None] | None = None, **options: Any) -> tuple[Any, str, Any]:
    """Search ``kernel``'s opts on ``backend``; return (best kernel, summary, the BeamResult)."""
    from uopviz.engine.search import beam_search

    def report(event: Any) -> None:
        if progress is not None:
            progress(event.done, event.total)

    result = beam_search(kernel, backend, width=width, budget_s=budget_s, progress=report, **options)
    best = result.best
    speedup = result.speedup
    timing = format_seconds(best.run_s) if best.run_s is not None else "no time"
    summary = (f"{best.name}: {timing}" + (f", {speedup:.2f}x the unoptimized kernel" if speedup else "")
               + f" ({len(result.candidates)} candidates in {result.elapsed_s:.1f} s"
               + (f"; {result.stopped}" if result.stopped else "") + ")")
    return result.kernel, summary, result


def candidates_html(result: Any, limit: int = 8) -> str:
    """The fastest candidates of a BEAM result as a small HTML table: the search's time of each,
    and for the finalists the time measured again side by side, which picks the winner (marked)."""
    import html

    chosen = result.best
    rows = []
    for candidate in sorted((c for c in result.candidates if c.ok), key=lambda c: c.run_s)[:limit]:
        mark = "★ " if candidate is chosen else ""
        rows.append(
            f"<tr><td>{mark}{html.escape(candidate.name)}</td>"
            f"<td>{html.escape(', '.join(map(repr, candidate.opts)) or '—')}</td>"
            f"<td>{format_seconds(candidate.run_s)}</td><td>{format_seconds(candidate.verified_s)}</td></tr>"
        )
    failed = sum(1 for c in result.candidates if not c.ok)
    head = "<tr><th>kernel</th><th>opts</th><th>search time</th><th>re-timed (finalists)</th></tr>"
    note = (f"<div>★ chosen: fastest when the finalists were timed again side by side"
            f"{f'; {failed} candidates failed' if failed else ''}</div>")
    return (f'<table class="uv-table" style="font-size:12px;border-collapse:collapse"><thead>{head}</thead>'
            f"<tbody>{''.join(rows)}</tbody></table>{note}")
