"""What BEAM search reports: a :class:`Candidate` per measured kernel (the rows of the candidate
table), a :class:`BeamProgress` after each one, and the :class:`BeamResult` with the winner, why it
won, and every candidate."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from uopviz.passes.optops.kernel import Kernel
from uopviz.passes.optops.opts import Opt


@dataclass
class Candidate:
    """One row of the candidate table."""

    opts: tuple[Opt, ...]
    name: str
    round: int
    uop_count: int | None = None
    compile_s: float | None = None
    run_s: float | None = None
    error: str | None = None
    cached: bool = False
    source_hash: str | None = None
    verified_s: float | None = None  # the finalists' re-measured time (fastest of interleaved runs)
    #: the finalists' re-timing, every run of it (``Timing``): its median is "the kernel's time" that
    #: the tuner's summary, candidate table and chart all show
    retimed: Any = None
    #: what the finalists' check of outputs against the untuned kernel found ("" when not a finalist)
    verification: str = ""

    @property
    def retimed_median_s(self) -> float | None:
        """The median of the finalists' re-timed runs (None when not re-timed)."""
        return None if self.retimed is None else self.retimed.median_s

    @property
    def ok(self) -> bool:
        """True when the candidate built and ran."""
        return self.error is None and self.run_s is not None

    @property
    def cacheable(self) -> bool:
        """True for results that would come out the same again: a time, or an error of the candidate
        itself (not a time limit or the search's budget, which depend on the moment)."""
        if self.ok:
            return True
        transient = ("KernelTimeout", "took longer", "not timed")
        return self.error is not None and not any(word in self.error for word in transient)

    def to_dict(self) -> dict[str, Any]:
        """The row as plain data."""
        return {
            "opts": [repr(o) for o in self.opts],
            "name": self.name,
            "round": self.round,
            "uop_count": self.uop_count,
            "compile_s": self.compile_s,
            "run_s": self.run_s,
            "error": self.error,
            "cached": self.cached,
            "verified_s": self.verified_s,
            "retimed_median_s": self.retimed_median_s,
            "verification": self.verification,
        }


@dataclass
class BeamProgress:
    """What a progress callback receives after every evaluated candidate."""

    round: int
    done: int
    total: int
    candidate: Candidate | None
    best: Candidate | None
    elapsed_s: float


@dataclass
class BeamResult:
    """The search's outcome: the best kernel, its opts, and every candidate it measured."""

    kernel: Kernel
    best: Candidate
    baseline: Candidate
    heuristic: Candidate | None
    candidates: list[Candidate]
    key: str
    backend: str
    device: str
    elapsed_s: float
    stopped: str = ""
    #: the kernel the search started from (its initial state): every candidate's opts apply to it
    start: Kernel | None = None

    def kernel_of(self, candidate: Candidate) -> Kernel:
        """The kernel of one candidate: the winner's own, else its opts applied to :attr:`start`."""
        if candidate is self.best:
            return self.kernel
        if self.start is None:
            raise ValueError(f"this BeamResult does not keep the kernel it started from, so candidate "
                             f"{candidate.name} cannot be rebuilt")
        return self.start.apply_all(candidate.opts[len(self.start.opts):])

    @property
    def opts(self) -> tuple[Opt, ...]:
        """The chosen opts (apply them to the kernel's initial state)."""
        return self.best.opts

    @property
    def speedup(self) -> float | None:
        """Baseline time over best time."""
        if self.baseline.run_s and self.best.run_s:
            return self.baseline.run_s / self.best.run_s
        return None

    @property
    def winner_s(self) -> float | None:
        """The winner's time, the one figure shown for it everywhere: the median of its re-timed runs
        (its search time when the finalists were not re-timed)."""
        return self.best.retimed_median_s if self.best.retimed is not None else self.best.run_s

    @property
    def winner_figure(self) -> str:
        """Which figure :attr:`winner_s` is: ``"re-timed median"`` or ``"search time"``."""
        return "re-timed median" if self.best.retimed is not None else "search time"

    def ranked(self) -> list[Candidate]:
        """The candidates in the order the winner was chosen: the re-timed finalists by their fastest
        re-timed run (the winner first), then the others by search time, then the failed ones."""
        retimed = sorted((c for c in self.candidates if c.ok and c.verified_s is not None),
                         key=lambda c: c.verified_s)
        others = sorted((c for c in self.candidates if c.ok and c.verified_s is None), key=lambda c: c.run_s)
        failed = [c for c in self.candidates if not c.ok]
        rows = [*retimed, *others, *failed]
        if self.best in rows:  # the winner heads the table even when the re-timing could not run
            rows.remove(self.best)
            rows.insert(0, self.best)
        return rows

    @property
    def runner_up(self) -> Candidate | None:
        """The second of :meth:`ranked` that ran (None when the winner is the only one)."""
        rest = [c for c in self.ranked()[1:] if c.ok]
        return rest[0] if rest else None

    def reason(self) -> str:
        """Why the winner won, in words, with its lead over the runner-up and over the starting kernel
        in the same figure (re-timed medians when the finalists were re-timed)."""
        from uopviz.backends.timing import format_seconds

        def figure(candidate: Candidate) -> float | None:
            return candidate.retimed_median_s if self.best.retimed is not None else candidate.run_s

        best_s = self.winner_s
        if self.best.verified_s is not None:
            why = (f"{self.best.name} won: the fastest re-timed run of the finalists whose outputs match the "
                   f"untuned kernel's ({format_seconds(self.best.verified_s)})")
        else:
            why = f"{self.best.name} won: the fastest in the search (the finalists were not re-timed)"
        leads = []
        for label, other in (("the runner-up", self.runner_up), ("the starting kernel", self.baseline)):
            if other is None or other is self.best:
                continue
            other_s = figure(other)
            if other_s and best_s:
                # the winner is picked on its fastest run: its median may still trail (a noisy machine)
                lead = (f"{other_s / best_s:.2f}x faster than" if other_s >= best_s
                        else f"{best_s / other_s:.2f}x slower in median than")
                leads.append(f"{lead} {label} {other.name} "
                             f"({format_seconds(best_s)} vs {format_seconds(other_s)}, {self.winner_figure})")
        if self.baseline is self.best:
            leads.append("it is the starting kernel: no opt beat it")
        return why + ("; " + "; ".join(leads) if leads else "")

    def table(self) -> list[dict[str, Any]]:
        """Every candidate as a dict (opts, name, UOp count, compile time, run time, error, re-timed
        time of the finalists), fastest in the search first (the winner is the fastest re-timed)."""
        rows = sorted(self.candidates, key=lambda c: (c.run_s is None, c.run_s or 0.0))
        return [c.to_dict() for c in rows]

    def __repr__(self) -> str:
        from uopviz.backends.timing import format_seconds

        # the winner is chosen by the finalists' side-by-side re-timing, so it may not head table(); its
        # time is the one figure the tuner shows for it (winner_s), named
        searched = "" if self.best.retimed is None else f", {format_seconds(self.best.run_s)} in the search"
        return (
            f"<BeamResult {self.best.name} on {self.backend}: {format_seconds(self.winner_s)} "
            f"({self.winner_figure}){searched}, {len(self.candidates)} candidates, opts={list(self.opts)}>"
        )


__all__ = ["BeamProgress", "BeamResult", "Candidate"]
