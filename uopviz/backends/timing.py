"""Timing kernels: warm-up, repeats, robust statistics, input rotation, GFLOP/s and GB/s.

``time_launches`` is the measuring loop itself (it runs wherever the kernel runs: by default in
the isolated worker process of :mod:`uopviz.backends.worker`, so a crashing kernel cannot take a
notebook down).  ``uopviz.backends.worker.time_kernel`` (it picks the worker or this process; the
worker imports this module, never the other way) is the entry point the rest of uopviz uses::

    timing = time_kernel("c", source, name, arrays, flops=2 * n**3)
    timing.median_s, timing.min_s, timing.spread, timing.gflops

Input rotation (``rotate=k``) makes ``k`` copies of every argument and cycles through them, so a
kernel whose data fits in cache is not timed on data its previous run left there.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from uopviz.backends.base import CompiledKernel, Launch, numpy_dtype


@dataclass(frozen=True)
class Timing:
    """Run times of one kernel (seconds, one per timed run, in run order) and what they mean.

    ``spread`` is the interquartile range over the median: 0.05 means the middle half of the runs
    lie within 5% of the median's size of each other.  ``gflops`` and ``gbs`` use the median time.
    """

    times_s: tuple[float, ...]
    flops: int = 0
    bytes: int = 0
    warmup: int = 0
    rotate: int = 1
    backend: str = ""
    kernel: str = ""
    compile_s: float = 0.0
    notes: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.times_s:
            raise ValueError("a Timing needs at least one run")

    @property
    def runs(self) -> int:
        """How many runs were timed (warm-up runs excluded)."""
        return len(self.times_s)

    @property
    def median_s(self) -> float:
        """The median run time."""
        return statistics.median(self.times_s)

    @property
    def min_s(self) -> float:
        """The fastest run."""
        return min(self.times_s)

    @property
    def max_s(self) -> float:
        """The slowest run."""
        return max(self.times_s)

    @property
    def spread(self) -> float:
        """Interquartile range of the run times divided by their median."""
        if len(self.times_s) < 2:
            return 0.0
        low, _, high = statistics.quantiles(self.times_s, n=4, method="inclusive")
        median = self.median_s
        return (high - low) / median if median > 0 else 0.0

    @property
    def gflops(self) -> float | None:
        """Billions of floating-point operations per second at the median time (None: no count)."""
        return self.flops / self.median_s / 1e9 if self.flops and self.median_s > 0 else None

    @property
    def gbs(self) -> float | None:
        """Gigabytes per second moved at the median time (None: no count)."""
        return self.bytes / self.median_s / 1e9 if self.bytes and self.median_s > 0 else None

    @property
    def gbps(self) -> float | None:
        """Same as ``gbs`` (gigabytes per second)."""
        return self.gbs

    def __str__(self) -> str:
        parts = [
            f"median {format_seconds(self.median_s)}",
            f"min {format_seconds(self.min_s)}",
            f"spread {self.spread:.1%}",
            f"{self.runs} runs",
        ]
        if self.gflops is not None:
            parts.append(f"{self.gflops:.2f} GFLOP/s")
        if self.gbs is not None:
            parts.append(f"{self.gbs:.2f} GB/s")
        return f"{self.kernel or 'kernel'} on {self.backend or '?'}: " + ", ".join(parts)

    def to_dict(self) -> dict:
        """The numbers as plain data (for tables and JSON)."""
        return {
            "kernel": self.kernel,
            "backend": self.backend,
            "median_s": self.median_s,
            "min_s": self.min_s,
            "max_s": self.max_s,
            "spread": self.spread,
            "runs": self.runs,
            "gflops": self.gflops,
            "gbs": self.gbs,
            "compile_s": self.compile_s,
        }


def format_seconds(value: float | None) -> str:
    """A duration with its unit, three significant digits (``3 ms``, ``81.2 µs``); ``—`` for None."""
    if value is None:
        return "—"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-9:.3g} ns"


#: With a budget, warm-up runs stop once they have spent this share of it: one run of a slow kernel
#: (the Python interpreter's, a tenth of a second and more) warms what a second would, and the timed
#: runs after it (3 at least) must fit the budget too.
WARMUP_SHARE_OF_BUDGET = 0.2


def time_launches(
    launches: Sequence[Launch], warmup: int = 2, repeats: int = 10, budget_s: float | None = None
) -> list[float]:
    """Run ``warmup`` untimed then ``repeats`` timed runs, cycling through ``launches`` (one per copy of
    the inputs).  With ``budget_s`` timing stops early once that much run time is spent (3 runs at least),
    and the warm-up once it has spent :data:`WARMUP_SHARE_OF_BUDGET` of it (1 run at least)."""
    _check_runs(launches, repeats)
    return timed_runs(launches, warm_up(launches, warmup, budget_s), repeats, budget_s)


def _check_runs(launches: Sequence[Launch], repeats: int) -> None:
    """Refuse, before any run, a timing of nothing or of no runs."""
    if not launches:
        raise ValueError("time_launches needs at least one launch")
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")


def warm_up(launches: Sequence[Launch], warmup: int, budget_s: float | None = None) -> int:
    """The untimed runs before timing: ``warmup`` of them, cycling through ``launches``, or fewer once
    they have spent :data:`WARMUP_SHARE_OF_BUDGET` of ``budget_s``; returns how many ran."""
    spent = 0.0
    for i in range(warmup):
        spent += launches[i % len(launches)].run()
        if budget_s is not None and spent > budget_s * WARMUP_SHARE_OF_BUDGET:
            return i + 1
    return warmup


def timed_runs(
    launches: Sequence[Launch], warmed: int, repeats: int = 10, budget_s: float | None = None
) -> list[float]:
    """``repeats`` timed runs after ``warmed`` warm-up runs (the cycle through ``launches`` goes on
    from there); with ``budget_s`` they stop once that much run time is spent (3 runs at least)."""
    times: list[float] = []
    spent = 0.0
    for i in range(repeats):
        elapsed = launches[(warmed + i) % len(launches)].run()
        times.append(elapsed)
        spent += elapsed
        if budget_s is not None and spent > budget_s and len(times) >= 3:
            break
    return times


def random_arguments(params: Sequence[Any], seed: int = 0) -> list[np.ndarray]:
    """Random arrays for a compiled kernel's PARAM slots (``.dtype``, ``.size``, ``.written``): the
    written ones zero, floats standard normal, bools 0/1, integers 0..7. The bytes are checked
    against the memory limit first."""
    from uopviz.core.limits import check_allocation

    total = sum(param.size * numpy_dtype(param.dtype).itemsize for param in params)
    check_allocation(total, f"the {len(params)} arguments of a kernel timed on random data")
    rng = np.random.default_rng(seed)
    arrays = []
    for param in params:
        storage = numpy_dtype(param.dtype)
        if param.written:
            arrays.append(np.zeros(param.size, storage))
        elif param.dtype.is_float:
            arrays.append(rng.standard_normal(param.size).astype(storage))
        elif param.dtype.is_bool:
            arrays.append(rng.integers(0, 2, param.size).astype(storage))
        else:
            arrays.append(rng.integers(0, 8, param.size).astype(storage))
    return arrays


@dataclass(frozen=True)
class TimingOptions:
    """How a kernel is timed: the one definition of the timing keywords that :func:`time_compiled`,
    ``worker.time_kernel`` and the worker's ``time`` and ``time_random`` requests take (each passes
    ``**options`` on, and this class checks them: an unknown keyword is a TypeError naming it).

    ``warmup`` untimed runs, then ``repeats`` timed ones over ``rotate`` copies of the inputs;
    ``flops`` and ``bytes_moved`` give the Timing its GFLOP/s and GB/s; with ``budget_s`` the runs stop
    once that much run time is spent (see :func:`time_launches`).
    """

    warmup: int = 2
    repeats: int = 10
    rotate: int = 1
    flops: int = 0
    bytes_moved: int = 0
    budget_s: float | None = None

    def __post_init__(self) -> None:
        for name, least in (("warmup", 0), ("repeats", 1), ("rotate", 1)):
            if getattr(self, name) < least:
                raise ValueError(f"{name} must be at least {least}, got {getattr(self, name)}")

    @classmethod
    def checked(cls, options: dict[str, Any]) -> dict[str, Any]:
        """``options`` checked and completed with the defaults, as keywords to pass on."""
        return asdict(cls(**options))


def time_compiled(kernel: CompiledKernel, arrays: Sequence[np.ndarray], **options: Any) -> Timing:
    """Time an already compiled kernel in this process (see ``time_kernel`` for the isolated way);
    ``options`` are :class:`TimingOptions`' fields."""
    settings = TimingOptions(**options)
    copies = [list(arrays)] + [[np.array(a, copy=True) for a in arrays] for _ in range(settings.rotate - 1)]
    launches = [kernel.prepare(*copy) for copy in copies]
    _check_runs(launches, settings.repeats)
    warmed = warm_up(launches, settings.warmup, settings.budget_s)
    times = timed_runs(launches, warmed, settings.repeats, settings.budget_s)
    launches[0].read_back()
    return Timing(tuple(times), settings.flops, settings.bytes_moved, warmed, settings.rotate, kernel.backend,
                  kernel.name, kernel.compile_s)  # fmt: skip
