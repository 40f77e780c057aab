"""Evaluating BEAM's candidates: lowered and compiled in a pool of spawned processes (or as jobs of
an ``executor=``), each within its time limit, then timed one after another in the isolated kernel
worker, on the same random inputs; a candidate that fails to build or run keeps its error."""

from __future__ import annotations

import concurrent.futures
import hashlib
import multiprocessing
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from uopviz.engine.beam_results import Candidate
from uopviz.passes.optops.kernel import Kernel

# ---------------------------------------------------------------------------------------------
# one candidate (these run in pool processes or on executor workers)


@dataclass
class BuiltCandidate:
    """A candidate lowered and compiled: its source, name, UOp count, build seconds, source hash and
    random arguments, or why it could not be built (``error``)."""

    source: str = ""
    name: str = ""
    uop_count: int | None = None
    compile_s: float | None = None
    error: str | None = None
    source_hash: str | None = None
    arguments: list = field(default_factory=list)


def build_candidate(kernel: Kernel, backend: str) -> BuiltCandidate:
    """Lower and compile one candidate (filling the compiled-object disk cache)."""
    start = time.perf_counter()
    try:
        lowered = kernel.lower(backend)
    except Exception as error:  # noqa: BLE001 - a candidate that cannot be built is a row with its error
        return BuiltCandidate(name=kernel.name, error=f"{type(error).__name__}: {error}")
    return BuiltCandidate(
        lowered.source,
        lowered.name,
        len(lowered.linear.src),
        time.perf_counter() - start,
        source_hash=hashlib.sha256(lowered.source.encode()).hexdigest(),
        arguments=lowered.random_arguments(seed=0),
    )


def evaluate_candidate(
    kernel: Kernel, backend: str, repeats: int, timeout_s: float
) -> tuple[BuiltCandidate, float | None, str | None]:
    """Build and time one candidate (the job sent to an ``executor=``)."""
    built = build_candidate(kernel, backend)
    if built.error is not None:
        return built, None, None
    run_s, error = _time_built(built, backend, repeats, timeout_s)
    built.arguments = []
    return built, run_s, error


def time_isolated(built: BuiltCandidate, backend: str, timeout_s: float, **options: Any) -> Any:
    """A ``Timing`` of a built candidate in the kernel worker, stopped at ``timeout_s``: one warm-up
    run (a search times many candidates), then ``options`` (:class:`TimingOptions`' fields)."""
    from uopviz.backends.worker import time_kernel

    options = {"warmup": 1, **options}
    return time_kernel(backend, built.source, built.name, built.arguments, isolated=True, timeout_s=timeout_s,
                       **options)  # fmt: skip


def _time_built(
    built: BuiltCandidate, backend: str, repeats: int, timeout_s: float
) -> tuple[float | None, str | None]:
    try:
        timing = time_isolated(built, backend, timeout_s, repeats=repeats)
    except Exception as error:  # noqa: BLE001 - any failure to run (a crash, a hang) disqualifies the candidate only
        return None, f"{type(error).__name__}: {error}"
    return timing.median_s, None


# ---------------------------------------------------------------------------------------------
# many candidates: the compile pool, or an executor


# Compile processes are spawned (a forked copy of a process running OpenMP threads can hang), so
# they import the caller's main module: a script without a main guard runs its search again in each.
BROKEN_POOL_HINT = (
    "(a compile process died; from a Python script, call BEAM under `if __name__ == '__main__':`, "
    "since its compile processes are spawned and import the script)"
)


def make_compile_pool(workers: int | None) -> concurrent.futures.ProcessPoolExecutor:
    count = workers or max(1, min(4, os.cpu_count() or 1))
    return concurrent.futures.ProcessPoolExecutor(
        max_workers=count, mp_context=multiprocessing.get_context("spawn")
    )


def shutdown_compile_pool(pool: concurrent.futures.ProcessPoolExecutor) -> None:
    """Stop the pool without waiting for a compile that hangs past its limit."""
    processes = list(getattr(pool, "_processes", {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.kill()


def evaluate_locally(
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
    built: list[tuple[Candidate, BuiltCandidate]] = []
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


def evaluate_remotely(
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
    "BROKEN_POOL_HINT",
    "BuiltCandidate",
    "build_candidate",
    "evaluate_candidate",
    "evaluate_locally",
    "evaluate_remotely",
    "make_compile_pool",
    "shutdown_compile_pool",
    "time_isolated",
]
