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

The search is written in five modules: ``beam_candidates`` (the kernel key and the opts proposed),
``beam_evaluation`` (compile pool, executor jobs and isolated timing), ``beam_finalists`` (the final
verified re-timing), ``beam_results`` (Candidate, BeamProgress, BeamResult) and ``beam_cache`` (the
sqlite cache); this module holds the search itself and gives their public names.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from uopviz.core.uop import UOp
from uopviz.engine.beam_cache import BeamCache, compiler_fingerprint
from uopviz.engine.beam_candidates import SPLIT_FACTORS, SPLIT_TARGETS, candidate_opts, kernel_key
from uopviz.engine.beam_evaluation import (
    BROKEN_POOL_HINT,
    build_candidate,
    evaluate_candidate,
    evaluate_locally,
    evaluate_remotely,
    make_compile_pool,
    shutdown_compile_pool,
)
from uopviz.engine.beam_finalists import verify_finalists
from uopviz.engine.beam_results import BeamProgress, BeamResult, Candidate
from uopviz.passes.optops.heuristic import hand_coded_optimizations
from uopviz.passes.optops.kernel import Kernel

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
    pool = None if executor is not None else make_compile_pool(workers)
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
            evaluate_remotely(
                executor, fresh, backend, repeats, timeout_s, lambda c: finish(c, round_number)
            )
        else:
            evaluate_locally(
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
            shutdown_compile_pool(pool)
        if bar is not None:
            bar.close()
    if best is None:
        errors = "; ".join(sorted({c.error for c in table if c.error})[:3])
        raise RuntimeError(f"BEAM on {kernel.name} ({backend}): no candidate ran; errors: {errors or 'none'}")
    if finalists > 0:
        best = verify_finalists(
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


__all__ = [
    "BROKEN_POOL_HINT",
    "SPLIT_FACTORS",
    "SPLIT_TARGETS",
    "BeamCache",
    "BeamProgress",
    "BeamResult",
    "Candidate",
    "beam_search",
    "build_candidate",
    "candidate_opts",
    "compiler_fingerprint",
    "evaluate_candidate",
    "kernel_key",
]
