"""BEAM search over the OptOps of one kernel: compile candidates in parallel, time them in isolation.

``beam_search(kernel)`` keeps the ``width`` fastest kernels found so far and extends each with every
opt that applies (SPLIT to every AxisType the spec allows, PADTO, SWAP, NOLOCALS, and TC as the
first opt), for ``rounds`` rounds or until ``budget_s`` seconds are spent.  Each round:

1. new candidates are de-duplicated (two opt sequences that give the same kernel AST are one
   candidate; two candidates whose sources are equal are timed once);
2. they are lowered and compiled in parallel by a process pool (``workers`` processes), each with a
   time limit (``timeout_s``); a candidate that fails to build is kept in the table with its error;
3. they are timed one after another in the isolated kernel worker (a crash or a hang is that
   candidate's error, not the caller's), on the same random inputs, ``repeats`` runs each.

The search starts from the kernel (its initial state when it has no opts yet) *and* from the
hand-coded heuristic's choice; these two are timed even past the budget.  At the end the
``finalists`` fastest candidates and the heuristic's are timed again, interleaved (``verified_s``),
and the fastest of those wins: a single lucky measurement during the search cannot pick the result,
and the result is never slower than the heuristic in that final comparison.
Every measurement is cached in sqlite (``<cache>/beam.sqlite``), keyed by kernel key, backend,
device and opts: searching the same kernel again costs only the lookups.

``executor=`` hands candidate evaluation (lower, compile and time, in one job) to an existing
``concurrent.futures.Executor`` or ``dask.distributed.Client``; the times then come from wherever the
jobs ran.  ``progress=`` receives a :class:`BeamProgress` after every candidate (``"tqdm"`` draws a bar;
by default a bar is drawn when stderr is a terminal).  The result holds the full candidate table.
"""

from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import json
import multiprocessing
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from uopviz.core.dtype import DType
from uopviz.core.ops import AxisType, Ops
from uopviz.core.uop import BufferArg, ParamArg, UOp
from uopviz.passes.optops.axes import REDUCE_TYPES
from uopviz.passes.optops.heuristic import hand_coded_optimizations
from uopviz.passes.optops.kernel import Kernel
from uopviz.passes.optops.opts import Opt, OptError, OptOp, opts_to_json

# ---------------------------------------------------------------------------------------------
# keys


def _canonical_arg(u: UOp, ranges: dict[UOp, int], buffers: dict[Any, int]) -> str:
    arg = u.arg
    if u.op is Ops.RANGE:
        return f"r{ranges.setdefault(u, len(ranges))}:{arg[1].name}"
    if isinstance(arg, BufferArg):
        number = buffers.setdefault(("buffer", arg.number), len(buffers))
        return f"b{number}:{arg.size}:{arg.dtype.name}:{arg.addrspace.name}"
    if isinstance(arg, ParamArg):
        return f"p{arg.slot}:{arg.dtype.name}:{arg.addrspace.name if arg.addrspace else ''}"
    if isinstance(arg, DType):
        return arg.name
    if isinstance(arg, tuple):
        return "(" + ",".join(a.name if isinstance(a, DType | Ops | AxisType) else repr(a) for a in arg) + ")"
    return repr(arg)


def kernel_key(kernel: Kernel) -> str:
    """A name for the kernel's computation that does not depend on range or buffer numbering:
    ``<kernel name>-<16 hex digits>``.  Tuning caches and records are keyed by it."""
    ranges: dict[UOp, int] = {}
    buffers: dict[Any, int] = {}
    order = kernel.ast.toposort()
    position = {u: i for i, u in enumerate(order)}
    digest = hashlib.sha256()
    for u in order:
        line = f"{u.op.name}|{u.dtype.name}|{_canonical_arg(u, ranges, buffers)}|" + ",".join(
            str(position[s]) for s in u.src
        )
        digest.update(line.encode() + b"\n")
    return f"{kernel.name}-{digest.hexdigest()[:16]}"


# ---------------------------------------------------------------------------------------------
# candidates


SPLIT_FACTORS = (2, 3, 4, 8, 16, 32)
SPLIT_TARGETS: tuple[tuple[AxisType, bool], ...] = (
    (AxisType.UPCAST, False),
    (AxisType.UNROLL, False),
    (AxisType.LOCAL, False),
    (AxisType.THREAD, True),
    (AxisType.GROUP_REDUCE, False),
    (AxisType.GROUP_REDUCE, True),
)


def candidate_opts(kernel: Kernel) -> list[Opt]:
    """Every single opt worth trying next on ``kernel`` (each one checked: it applies)."""
    proposals: list[Opt] = []
    axes = kernel.axes
    backend = kernel.backend_object
    if not kernel.opts:
        reduce_count = sum(1 for _, t in axes if t in REDUCE_TYPES)
        for reduce_index in range(reduce_count):
            for tc_opt in (0, 1):
                proposals.append(Opt(OptOp.TC, reduce_index, (-1, tc_opt, 1)))
    for axis, (size, _) in enumerate(axes):
        for factor in SPLIT_FACTORS:
            if factor >= size or size % factor:
                continue
            for target, top in SPLIT_TARGETS:
                proposals.append(Opt(OptOp.SPLIT, axis, (factor, target, top)))
        for multiple in (4, 8, 16):
            if size % multiple and size > multiple:
                proposals.append(Opt(OptOp.PADTO, axis, multiple))
    for first in range(len(axes)):
        for second in range(first + 1, len(axes)):
            proposals.append(Opt(OptOp.SWAP, first, second))
    if backend.has_local and not kernel.nolocals:
        proposals.append(Opt(OptOp.NOLOCALS, None, None))
    valid = []
    for opt in proposals:
        try:
            kernel.apply(opt)
        except OptError:
            continue
        valid.append(opt)
    return valid


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


# ---------------------------------------------------------------------------------------------
# the sqlite cache


def _measured_on(device: str) -> str:
    return f"{device} | compiler {compiler_fingerprint()}"


@functools.cache
def compiler_fingerprint() -> str:
    """A hash of the code generator's own source (uopviz.core, .passes with its subpackages such as
    .passes.optops, .backends): a measurement made with other code — a changed heuristic, renderer or
    decomposition — is not reused."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for folder in ("core", "passes", "backends"):
        for path in sorted((root / folder).rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


class BeamCache:
    """Measured candidates by (kernel key, backend, device, opts) in ``<cache>/beam.sqlite``; the
    device column also names the :func:`compiler_fingerprint` the measurement was made with."""

    def __init__(self, path: str | os.PathLike | None = None):
        if path is None:
            from uopviz.backends.cache import cache_dir

            path = cache_dir() / "beam.sqlite"
        self.path = str(path)
        self._lock = threading.Lock()
        with self._connect() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS candidates (kernel_key TEXT, backend TEXT, device TEXT, "
                "opts TEXT, name TEXT, uop_count INTEGER, compile_s REAL, run_s REAL, error TEXT, "
                "source_hash TEXT, measured_at REAL, PRIMARY KEY (kernel_key, backend, device, opts))"
            )

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30)

    def get(self, key: str, backend: str, device: str, opts: Sequence[Opt]) -> Candidate | None:
        """The cached measurement, or None."""
        text = json.dumps(opts_to_json(opts))
        with self._lock, self._connect() as db:
            row = db.execute(
                "SELECT name, uop_count, compile_s, run_s, error, source_hash FROM candidates WHERE "
                "kernel_key=? AND backend=? AND device=? AND opts=?",
                (key, backend, _measured_on(device), text),
            ).fetchone()
        if row is None:
            return None
        name, uop_count, compile_s, run_s, error, source_hash = row
        return Candidate(tuple(opts), name, 0, uop_count, compile_s, run_s, error, True, source_hash)

    def put(self, key: str, backend: str, device: str, candidate: Candidate) -> None:
        """Store one measurement (timeouts and crashes too: they would happen again)."""
        text = json.dumps(opts_to_json(candidate.opts))
        with self._lock, self._connect() as db:
            db.execute(
                "INSERT OR REPLACE INTO candidates VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    key,
                    backend,
                    _measured_on(device),
                    text,
                    candidate.name,
                    candidate.uop_count,
                    candidate.compile_s,
                    candidate.run_s,
                    candidate.error,
                    candidate.source_hash,
                    time.time(),
                ),
            )

    def count(self, key: str | None = None) -> int:
        """How many measurements are stored (for one kernel key, or all)."""
        with self._lock, self._connect() as db:
            if key is None:
                return db.execute("SELECT COUNT(*) FROM candidates").fetchone()[0]
            return db.execute("SELECT COUNT(*) FROM candidates WHERE kernel_key=?", (key,)).fetchone()[0]


# ---------------------------------------------------------------------------------------------
# evaluating candidates (these run in pool processes or on executor workers)


@dataclass
class _Built:
    source: str = ""
    name: str = ""
    uop_count: int | None = None
    compile_s: float | None = None
    error: str | None = None
    source_hash: str | None = None
    arguments: list = field(default_factory=list)


def build_candidate(kernel: Kernel, backend: str) -> _Built:
    """Lower and compile one candidate (filling the compiled-object disk cache)."""
    start = time.perf_counter()
    try:
        lowered = kernel.lower(backend)
    except Exception as error:  # noqa: BLE001 - a candidate that cannot be built is a row with its error
        return _Built(name=kernel.name, error=f"{type(error).__name__}: {error}")
    return _Built(
        lowered.source,
        lowered.name,
        len(lowered.linear.src),
        time.perf_counter() - start,
        source_hash=hashlib.sha256(lowered.source.encode()).hexdigest(),
        arguments=lowered.random_arguments(seed=0),
    )


def evaluate_candidate(
    kernel: Kernel, backend: str, repeats: int, timeout_s: float
) -> tuple[_Built, float | None, str | None]:
    """Build and time one candidate (the job sent to an ``executor=``)."""
    built = build_candidate(kernel, backend)
    if built.error is not None:
        return built, None, None
    run_s, error = _time_built(built, backend, repeats, timeout_s)
    built.arguments = []
    return built, run_s, error


def time_isolated(built: _Built, backend: str, timeout_s: float, **options: Any) -> Any:
    """A ``Timing`` of a built candidate in the kernel worker, stopped at ``timeout_s``: one warm-up
    run (a search times many candidates), then ``options`` (:class:`TimingOptions`' fields)."""
    from uopviz.backends.worker import time_kernel

    options = {"warmup": 1, **options}
    return time_kernel(backend, built.source, built.name, built.arguments, isolated=True, timeout_s=timeout_s,
                       **options)  # fmt: skip


def _time_built(
    built: _Built, backend: str, repeats: int, timeout_s: float
) -> tuple[float | None, str | None]:
    try:
        timing = time_isolated(built, backend, timeout_s, repeats=repeats)
    except Exception as error:  # noqa: BLE001 - any failure to run (a crash, a hang) disqualifies the candidate only
        return None, f"{type(error).__name__}: {error}"
    return timing.median_s, None


# ---------------------------------------------------------------------------------------------
# the search


def _progress_reporter(progress: Any) -> tuple[Callable[[BeamProgress], None] | None, Any]:
    """The callback to call and a tqdm bar to close (or None)."""
    if callable(progress):
        return progress, None
    wants_bar = progress == "tqdm" or (progress is None and sys.stderr.isatty())
    if not wants_bar or progress is False:
        return None, None
    try:
        from tqdm import tqdm
    except ImportError:
        return None, None
    bar = tqdm(total=0, desc="BEAM", unit="candidate", leave=False)

    def update(event: BeamProgress) -> None:
        bar.total = event.total
        bar.n = event.done
        if event.best is not None and event.best.run_s is not None:
            bar.set_postfix_str(f"round {event.round} best {event.best.run_s * 1e3:.3f} ms")
        bar.refresh()

    return update, bar


def _initial_state(kernel: Kernel) -> Kernel:
    return kernel.with_parallel_outputs() if not kernel.opts else kernel


def beam_search(
    kernel: Kernel,
    backend: str | None = None,
    *,
    width: int = 4,
    rounds: int = 4,
    budget_s: float = 60.0,
    timeout_s: float = 20.0,
    repeats: int = 5,
    workers: int | None = None,
    executor: Any = None,
    progress: Any = None,
    cache: BeamCache | bool = True,
    include_heuristic: bool = True,
    finalists: int = 3,
) -> BeamResult:
    """Search the OptOps of ``kernel`` on ``backend`` (default: the kernel's); see the module docstring."""
    from uopviz.backends import get

    backend = backend or kernel.backend
    target = get(backend)
    target.require()
    device = target.device
    if kernel.backend != backend:
        kernel = Kernel(kernel.ast, backend, kernel.opts, kernel.name_hint)
    start_kernel = _initial_state(kernel)
    key = kernel_key(start_kernel)
    store = BeamCache() if cache is True else (cache or None)
    report, bar = _progress_reporter(progress)
    started = time.perf_counter()
    table: list[Candidate] = []
    by_ast: dict[UOp, Candidate] = {}
    by_source: dict[str, Candidate] = {}
    kernels: dict[int, Kernel] = {}
    best: Candidate | None = None
    state = {"done": 0, "total": 0}
    pool = None if executor is not None else _make_pool(workers)
    stopped = ""

    def out_of_time() -> bool:
        return time.perf_counter() - started > budget_s

    def note(candidate: Candidate, round_number: int) -> None:
        nonlocal best
        state["done"] += 1
        if candidate.ok and (best is None or candidate.run_s < best.run_s):  # type: ignore[operator]
            best = candidate
        if report is not None:
            report(
                BeamProgress(
                    round_number,
                    state["done"],
                    state["total"],
                    candidate,
                    best,
                    time.perf_counter() - started,
                )
            )

    def evaluate(variants: list[Kernel], round_number: int, budgeted: bool = True) -> list[Candidate]:
        fresh: list[tuple[Kernel, Candidate]] = []
        out: list[Candidate] = []
        for variant in variants:
            known = by_ast.get(variant.ast)
            if known is not None:
                out.append(known)
                continue
            candidate = Candidate(variant.opts, variant.name, round_number)
            by_ast[variant.ast] = candidate
            kernels[id(candidate)] = variant
            cached = store.get(key, backend, device, variant.opts) if store is not None else None
            if cached is not None:
                cached.round = round_number
                by_ast[variant.ast] = cached
                kernels[id(cached)] = variant
                table.append(cached)
                state["total"] += 1
                note(cached, round_number)
                out.append(cached)
                continue
            fresh.append((variant, candidate))
            out.append(candidate)
        state["total"] += len(fresh)
        if executor is not None:
            _evaluate_remotely(
                executor, fresh, backend, repeats, timeout_s, lambda c: finish(c, round_number)
            )
        else:
            _evaluate_locally(
                pool,
                fresh,
                backend,
                repeats,
                timeout_s,
                by_source,
                out_of_time if budgeted else lambda: False,
                lambda c: finish(c, round_number),
            )
        return out

    def finish(candidate: Candidate, round_number: int) -> None:
        table.append(candidate)
        if store is not None and candidate.cacheable:
            store.put(key, backend, device, candidate)
        note(candidate, round_number)

    try:
        seeds = [start_kernel]
        heuristic_kernel = None
        if include_heuristic:
            heuristic_kernel = hand_coded_optimizations(start_kernel)
            if heuristic_kernel.ast is not start_kernel.ast:
                seeds.append(heuristic_kernel)
        # the starting kernel and the heuristic's are timed whatever the budget: without them the search
        # has nothing to report (a short budget on a busy machine went to starting the compile pool)
        evaluated = evaluate(seeds, 0, budgeted=False)
        baseline = evaluated[0]
        heuristic = evaluated[-1] if heuristic_kernel is not None else None
        beam = sorted((c for c in evaluated if c.ok), key=lambda c: c.run_s)[:width]
        for round_number in range(1, rounds + 1):
            if out_of_time():
                stopped = f"budget of {budget_s:g} s spent"
                break
            variants: list[Kernel] = []
            for parent in beam:
                parent_kernel = kernels[id(parent)]
                for opt in candidate_opts(parent_kernel):
                    variant = parent_kernel.apply(opt)
                    if variant.ast not in by_ast:
                        variants.append(variant)
            if not variants:
                stopped = "no new candidates"
                break
            results = evaluate(variants, round_number)
            pool_of_best = {id(c): c for c in [*beam, *results] if c.ok}
            new_beam = sorted(pool_of_best.values(), key=lambda c: c.run_s)[:width]
            if [id(c) for c in new_beam] == [id(c) for c in beam]:
                stopped = "no candidate beat the beam"
                break
            beam = new_beam
        else:
            stopped = f"{rounds} rounds done"
    finally:
        if pool is not None:
            _shutdown(pool)
        if bar is not None:
            bar.close()
    if best is None:
        errors = "; ".join(sorted({c.error for c in table if c.error})[:3])
        raise RuntimeError(f"BEAM on {kernel.name} ({backend}): no candidate ran; errors: {errors or 'none'}")
    if finalists > 0:
        best = _verify_finalists(
            table, heuristic, kernels, backend, repeats, timeout_s, finalists, kernels[id(baseline)],
            baseline=baseline,
        ) or best
    return BeamResult(
        kernels[id(best)],
        best,
        baseline,
        heuristic,
        table,
        key,
        backend,
        device,
        time.perf_counter() - started,
        stopped,
        start_kernel,
    )


def _verify_finalists(
    table: list[Candidate],
    heuristic: Candidate | None,
    kernels: dict[int, Kernel],
    backend: str,
    repeats: int,
    timeout_s: float,
    count: int,
    untuned: Kernel,
    baseline: Candidate | None = None,
) -> Candidate | None:
    """Re-time the fastest ``count`` candidates and the heuristic's, interleaved, twice each with two
    copies of the inputs; the fastest of those runs picks the winner.  One noisy measurement during the
    search (the machine is shared; a candidate timed while the cache was warm) cannot then decide.
    Before that, each finalist's outputs are checked against the untuned kernel's on the same inputs:
    one that computes something else is marked with the difference and cannot win.  The starting
    kernel (``baseline``) is re-timed beside them, so the winner's gain over it is measured alike."""
    ranked = sorted((c for c in table if c.ok), key=lambda c: c.run_s)
    extra = [c for c in (heuristic, baseline) if c is not None and c.ok]
    chosen = {id(c): c for c in [*ranked[:count], *extra]}
    if len(chosen) < 2:
        return None
    built = {key: build_candidate(kernels[key], backend) for key in chosen}
    reference = _outputs_of(build_candidate(untuned, backend), backend, timeout_s)
    for key, result in built.items():
        wrong = _differs_from(reference, _outputs_of(result, backend, timeout_s))
        if wrong is not None:
            chosen[key].error, result.error = wrong, wrong
        chosen[key].verification = wrong or (
            "outputs match the untuned kernel's" if not isinstance(reference, str)
            else f"not checked: the untuned kernel did not run ({reference})"
        )
    chosen = {key: c for key, c in chosen.items() if c.error is None}
    times: dict[int, list[float]] = {key: [] for key in chosen}
    runs: dict[int, list[Any]] = {key: [] for key in chosen}
    for _ in range(2):
        for key in chosen:
            result = built[key]
            if result.error is not None:
                continue
            try:
                timing = time_isolated(result, backend, timeout_s, repeats=max(repeats, 5), rotate=2)
            except Exception:  # noqa: BLE001 - a finalist that fails now keeps its search time only
                continue
            times[key].append(timing.min_s)
            runs[key].append(timing)
    for key, measured in times.items():
        if measured:
            chosen[key].verified_s = min(measured)
            chosen[key].retimed = _joined(runs[key])
    verified = [c for c in chosen.values() if c.verified_s is not None]
    return min(verified, key=lambda c: c.verified_s) if verified else None


def _joined(timings: list[Any]) -> Any:
    """One ``Timing`` holding every run of several timings of the same kernel (the re-timing rounds)."""
    from dataclasses import replace

    return replace(timings[0], times_s=tuple(t for timing in timings for t in timing.times_s))


def _outputs_of(built: _Built, backend: str, timeout_s: float) -> dict[int, np.ndarray] | str:
    """What a built candidate writes, run in the kernel worker on copies of its inputs (or why not)."""
    from uopviz.backends.worker import run_isolated

    if built.error is not None:
        return built.error
    from uopviz.backends.base import KernelMeta
    from uopviz.core.dtype import dtypes

    try:
        inputs = [a.copy() for a in built.arguments]
        written = run_isolated(backend, built.source, built.name, inputs, timeout_s)
    except Exception as error:  # noqa: BLE001 - a finalist that cannot run is disqualified, not fatal
        return f"{type(error).__name__}: {error}"
    for param in KernelMeta.from_source(built.source, backend).params:
        if param.slot in written and param.dtype.scalar is dtypes.bfloat16:  # its 16 bits, as float32
            written[param.slot] = (written[param.slot].astype(np.uint32) << 16).view(np.float32)
    return written


def _differs_from(reference: dict[int, np.ndarray] | str, outputs: dict[int, np.ndarray] | str) -> str | None:
    """Why ``outputs`` are not the untuned kernel's (None when they agree within the dtype's rounding:
    tuned kernels sum in another order)."""
    if isinstance(reference, str):
        return None  # nothing to check against: the untuned kernel itself did not run
    if isinstance(outputs, str):
        return f"not verified: {outputs}"
    for slot, expected in reference.items():
        actual = outputs.get(slot)
        if actual is None or actual.shape != expected.shape:
            return f"wrong result: output {slot} missing or of another size"
        if expected.dtype.kind != "f":
            if not np.array_equal(actual, expected):
                return f"wrong result: output {slot} differs from the untuned kernel's"
            continue
        tolerance = {2: 2e-2, 4: 1e-3, 8: 1e-9}.get(expected.dtype.itemsize, 1e-3)
        scale = float(np.nanmax(np.abs(expected), initial=1.0))
        if not np.allclose(actual, expected, rtol=tolerance, atol=tolerance * scale, equal_nan=True):
            difference = float(np.nanmax(np.abs(actual.astype(np.float64) - expected)))
            return f"wrong result: output {slot} differs from the untuned kernel's by up to {difference:.3g}"
    return None


# Compile processes are spawned (a forked copy of a process running OpenMP threads can hang), so
# they import the caller's main module: a script without a main guard runs its search again in each.
BROKEN_POOL_HINT = (
    "(a compile process died; from a Python script, call BEAM under `if __name__ == '__main__':`, "
    "since its compile processes are spawned and import the script)"
)


def _make_pool(workers: int | None) -> concurrent.futures.ProcessPoolExecutor:
    count = workers or max(1, min(4, os.cpu_count() or 1))
    return concurrent.futures.ProcessPoolExecutor(
        max_workers=count, mp_context=multiprocessing.get_context("spawn")
    )


def _shutdown(pool: concurrent.futures.ProcessPoolExecutor) -> None:
    """Stop the pool without waiting for a compile that hangs past its limit."""
    processes = list(getattr(pool, "_processes", {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.kill()


def _evaluate_locally(
    pool: concurrent.futures.ProcessPoolExecutor,
    fresh: list[tuple[Kernel, Candidate]],
    backend: str,
    repeats: int,
    timeout_s: float,
    by_source: dict[str, Candidate],
    out_of_time: Callable[[], bool],
    finish: Callable[[Candidate], None],
) -> None:
    """Compile every fresh candidate in the pool, then time them one by one in the kernel worker."""
    futures = {pool.submit(build_candidate, variant, backend): candidate for variant, candidate in fresh}
    built: list[tuple[Candidate, _Built]] = []
    deadline = time.perf_counter() + timeout_s * max(1, len(futures))
    for future, candidate in futures.items():
        try:
            result = future.result(timeout=max(0.1, min(timeout_s, deadline - time.perf_counter())))
        except concurrent.futures.TimeoutError:
            future.cancel()
            candidate.error = f"compile took longer than {timeout_s:g} s"
            finish(candidate)
            continue
        except concurrent.futures.process.BrokenProcessPool as error:
            candidate.error = f"{type(error).__name__}: {error} {BROKEN_POOL_HINT}"
            finish(candidate)
            continue
        except Exception as error:  # noqa: BLE001 - a failed compile job: this candidate's error
            candidate.error = f"{type(error).__name__}: {error}"
            finish(candidate)
            continue
        candidate.uop_count, candidate.compile_s = result.uop_count, result.compile_s
        candidate.source_hash = result.source_hash
        if result.error is not None:
            candidate.error = result.error
            finish(candidate)
            continue
        built.append((candidate, result))
    for candidate, result in built:
        twin = by_source.get(result.source_hash or "")
        if twin is not None and (twin.ok or twin.error):
            candidate.run_s, candidate.error = twin.run_s, twin.error
            finish(candidate)
            continue
        if out_of_time():
            candidate.error = "not timed: the search's budget ran out"
            finish(candidate)
            continue
        candidate.run_s, candidate.error = _time_built(result, backend, repeats, timeout_s)
        if result.source_hash:
            by_source[result.source_hash] = candidate
        finish(candidate)


def _evaluate_remotely(
    executor: Any,
    fresh: list[tuple[Kernel, Candidate]],
    backend: str,
    repeats: int,
    timeout_s: float,
    finish: Callable[[Candidate], None],
) -> None:
    """Each candidate as one job (build and time) on an Executor or a dask.distributed Client."""
    futures = [
        (executor.submit(evaluate_candidate, variant, backend, repeats, timeout_s), candidate)
        for variant, candidate in fresh
    ]
    for future, candidate in futures:
        try:
            built, run_s, error = future.result(timeout=timeout_s * 3 + 60)
        except Exception as error:  # noqa: BLE001 - a lost job or worker: this candidate's error
            candidate.error = f"{type(error).__name__}: {error}"
            finish(candidate)
            continue
        candidate.uop_count, candidate.compile_s = built.uop_count, built.compile_s
        candidate.source_hash = built.source_hash
        candidate.run_s, candidate.error = run_s, built.error or error
        finish(candidate)


__all__ = [
    "BeamCache",
    "BeamProgress",
    "BeamResult",
    "Candidate",
    "beam_search",
    "candidate_opts",
    "evaluate_candidate",
    "kernel_key",
]
