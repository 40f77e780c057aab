"""BEAM's final comparison: the fastest candidates, the heuristic's and the starting kernel's
outputs checked against the untuned kernel's, then re-timed side by side; the fastest of those runs
wins, so one lucky measurement during the search cannot pick the result."""

from __future__ import annotations

from typing import Any

import numpy as np

from uopviz.engine.beam_evaluation import BuiltCandidate, build_candidate, time_isolated
from uopviz.engine.beam_results import Candidate
from uopviz.passes.optops.kernel import Kernel


def verify_finalists(
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


def _outputs_of(built: BuiltCandidate, backend: str, timeout_s: float) -> dict[int, np.ndarray] | str:
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


__all__ = ["verify_finalists"]
