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
    return result.kernel, beam_summary(result), result


def beam_summary(result: Any) -> str:
    """One line on a BEAM result: the winner and its time in the one figure the candidate table's top
    row and the tuner's chart show (the re-timed median, named), its lead, and the search's extent."""
    best, winner_s = result.best, result.winner_s
    timing = f"{format_seconds(winner_s)} ({result.winner_figure})" if winner_s is not None else "no time"
    baseline_s = (result.baseline.retimed_median_s if best.retimed is not None else result.baseline.run_s)
    speedup = baseline_s / winner_s if baseline_s and winner_s else None
    return (f"{best.name}: {timing}" + (f", {speedup:.2f}x the starting kernel" if speedup else "")
            + f" ({len(result.candidates)} candidates in {result.elapsed_s:.1f} s"
            + (f"; {result.stopped}" if result.stopped else "") + ")")


def candidate_rows(result: Any, limit: int | None = None) -> list[dict[str, Any]]:
    """The candidates as the tuner's table shows them, in :meth:`BeamResult.ranked` order (the winner
    first): name, opts, the time (re-timed median, else search time) and which figure it is, the
    fastest re-timed run, the search time, and the verification or error."""
    rows = []
    for index, candidate in enumerate(result.ranked()[:limit]):
        retimed = candidate.retimed_median_s
        rows.append({
            "index": index,
            "winner": candidate is result.best,
            "name": candidate.name,
            "opts": ", ".join(map(repr, candidate.opts)) or "—",
            "time_s": retimed if retimed is not None else candidate.run_s,
            "figure": "re-timed median" if retimed is not None else "search time",
            "best_run_s": candidate.verified_s,
            "search_s": candidate.run_s,
            "check": candidate.error or candidate.verification or "not a finalist: not checked",
            "ok": candidate.ok,
        })
    return rows


#: the height (px) of the candidate table's scroll box
BEAM_TABLE_HEIGHT = 360


def candidates_html(result: Any, limit: int = 12) -> str:
    """The candidates of a BEAM result as an HTML table, the winner first (★): each one's time (the
    re-timed median for finalists, named), fastest re-timed run, search time and verification or
    error, and under it why the winner won."""
    import html

    def seconds(value: float | None) -> str:
        return format_seconds(value) if value is not None else "—"

    rows = []
    for row in candidate_rows(result, limit):
        style = "" if row["ok"] else ' style="color:#82071e"'
        rows.append(
            f"<tr{style}><td>{row['index']}</td>"
            f"<td style=\"white-space:nowrap\">{'★ ' if row['winner'] else ''}{html.escape(row['name'])}</td>"
            f"<td style=\"font-size:11px\">{html.escape(row['opts'])}</td>"
            f"<td>{seconds(row['time_s'])} <small>{row['figure']}</small></td>"
            f"<td>{seconds(row['best_run_s'])}</td><td>{seconds(row['search_s'])}</td>"
            f"<td>{html.escape(row['check'])}</td></tr>"
        )
    head = ("<tr><th>#</th><th>kernel</th><th>opts</th><th>time</th><th>fastest re-timed run</th>"
            "<th>search time</th><th>check</th></tr>")
    more = len(result.candidates) - len(rows)
    note = (f"<div>★ {html.escape(result.reason())}"
            f"{f'; {more} more candidates not shown' if more > 0 else ''}</div>")
    # a scroll box: twelve candidates of seven opts each made the table 3,000 px tall in the tuner
    return (f'<div class="uv-beam-box" style="max-height:{BEAM_TABLE_HEIGHT}px;overflow:auto">'
            f'<table class="uv-table uv-beam-candidates" style="font-size:12px;border-collapse:collapse">'
            f"<thead>{head}</thead><tbody>{''.join(rows)}</tbody></table></div>{note}")
