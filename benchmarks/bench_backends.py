"""Backends and tuning (``make bench BENCH_ARGS=backends``): kernel time per backend, heuristic vs BEAM.

Cases, on every CPU-runnable backend (c, llvm, opencl where a device exists):

* gemm 512 and 1024 (float32), heuristic opts and BEAM-chosen opts, next to numpy (OpenBLAS); the
  notes give GFLOP/s and tinygrad's CPU device on the same gemm;
* ``(x*2+1).exp()`` on 4M floats with the heuristic opts, next to numpy;
* cold compile time of the gemm 512 kernel per backend (an empty compiled-object cache).

Targets from the issue: gemm 1024 with BEAM on the best backend ≥ 60% of numpy's GFLOP/s;
the elementwise chain ≤ 2 ms.  BEAM budgets: ``$UOPVIZ_BENCH_BEAM_S`` seconds per search (default
30); measured candidates are cached in the BEAM sqlite cache, so a second run is quick.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import numpy as np
from run import measure, row, settle

import uopviz as uv
from uopviz.backends import get
from uopviz.backends.worker import time_kernel

BACKENDS = ("c", "llvm", "opencl")
BEAM_S = float(os.environ.get("UOPVIZ_BENCH_BEAM_S", "30"))


def _kernel_time(kernel: uv.Kernel, backend: str) -> float:
    """Median seconds of the kernel on random inputs (isolated worker, 10 warm-up runs, 15 timed,
    2 input copies), after the previous measurement's threads settled."""
    lowered = kernel.lower(backend)
    arrays = lowered.random_arguments()
    settle()
    timing = time_kernel(backend, lowered.source, lowered.name, arrays, warmup=10, repeats=15, rotate=2)
    return timing.median_s


def _gemm_kernel(n: int, backend: str, opts: Any) -> uv.Kernel:
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
    return uv.compile([uv.Tensor(a) @ uv.Tensor(b)], backend=backend, opts=opts).kernels[0]


def _tinygrad_gemm(n: int) -> float | None:
    """tinygrad's CPU device on the same gemm (a TinyJit replay), or None without tinygrad."""
    try:
        from tinygrad import Tensor, TinyJit

        rng = np.random.default_rng(0)
        a, b = (
            Tensor(rng.standard_normal((n, n)).astype(np.float32), device="CPU").realize() for _ in range(2)
        )

        @TinyJit
        def step(x, y):
            return (x @ y).realize()

        for _ in range(3):
            step(a, b)
        return measure(lambda: step(a, b), repeat=5, warmup=1, min_time_s=0.1)
    except Exception:  # noqa: BLE001 - tinygrad missing or broken: no peer number
        return None


def _gflops(n: int, seconds: float) -> float:
    return 2 * n**3 / seconds / 1e9


def _cold_compile(backend: str) -> float:
    """Seconds to compile the gemm 512 heuristic kernel with nothing cached (fresh cache folder)."""
    kernel = _gemm_kernel(512, backend, "heuristic")
    source = kernel.source(backend)
    previous = os.environ.get("UOPVIZ_CACHE")
    with tempfile.TemporaryDirectory(prefix="uopviz-bench-cache-") as folder:
        os.environ["UOPVIZ_CACHE"] = folder
        try:
            fresh = type(get(backend))()
            return fresh.compile(source, kernel.name).compile_s
        finally:
            if previous is None:
                os.environ.pop("UOPVIZ_CACHE", None)
            else:
                os.environ["UOPVIZ_CACHE"] = previous


def run() -> list[dict]:
    from uopviz.engine.search import beam_search

    rows: list[dict] = []
    backends = [b for b in BACKENDS if get(b).available()]
    best_beam_1024: tuple[float, str] | None = None
    numpy_1024 = None
    for n in (512, 1024):
        rng = np.random.default_rng(1)
        a, b = (rng.standard_normal((n, n)).astype(np.float32) for _ in range(2))
        numpy_s = measure(lambda a=a, b=b: a @ b, repeat=5, warmup=1)
        tinygrad_s = _tinygrad_gemm(n)
        if n == 1024:
            numpy_1024 = numpy_s
        context = f"numpy {_gflops(n, numpy_s):.1f} GFLOP/s" + (
            f", tinygrad CPU {_gflops(n, tinygrad_s):.1f} GFLOP/s" if tinygrad_s else ", tinygrad unavailable"
        )
        if tinygrad_s:
            rows.append(
                row(
                    f"gemm {n} tinygrad CPU",
                    tinygrad_s,
                    peer="numpy",
                    peer_s=numpy_s,
                    notes=f"{_gflops(n, tinygrad_s):.1f} GFLOP/s",
                )
            )
        for backend in backends:
            heuristic = _gemm_kernel(n, backend, "heuristic")
            seconds = _kernel_time(heuristic, backend)
            rows.append(
                row(
                    f"gemm {n} {backend} heuristic",
                    seconds,
                    peer="numpy",
                    peer_s=numpy_s,
                    notes=f"{_gflops(n, seconds):.1f} GFLOP/s; {heuristic.name}; {context}",
                )
            )
            start = _gemm_kernel(n, backend, None)
            result = beam_search(start, width=3, rounds=3, budget_s=BEAM_S, repeats=3, progress=False)
            tuned = _kernel_time(result.kernel, backend)
            rows.append(
                row(
                    f"gemm {n} {backend} BEAM",
                    tuned,
                    peer="numpy",
                    peer_s=numpy_s,
                    notes=f"{_gflops(n, tuned):.1f} GFLOP/s; {result.kernel.name}; "
                    f"{len(result.candidates)} candidates in {result.elapsed_s:.0f} s "
                    f"({result.stopped})",
                )
            )
            if n == 1024 and (best_beam_1024 is None or tuned < best_beam_1024[0]):
                best_beam_1024 = (tuned, backend)
    if best_beam_1024 is not None and numpy_1024 is not None:
        share = numpy_1024 / best_beam_1024[0]
        verdict = "met" if share >= 0.6 else "missed"
        rows.append(
            row(
                "gemm 1024 best BEAM vs numpy",
                best_beam_1024[0],
                peer="numpy",
                peer_s=numpy_1024,
                notes=f"{best_beam_1024[1]}: {share:.0%} of numpy's GFLOP/s; target >= 60% {verdict}",
            )
        )
    x = np.random.default_rng(2).standard_normal(4 * 1024 * 1024).astype(np.float32)
    numpy_s = measure(lambda: np.exp(x * 2 + 1), repeat=5, warmup=1)
    for backend in backends:
        kernel = uv.compile([(uv.Tensor(x) * 2 + 1).exp()], backend=backend, opts="heuristic").kernels[0]
        seconds = _kernel_time(kernel, backend)
        verdict = "met" if seconds <= 2e-3 else "missed"
        rows.append(
            row(
                f"(x*2+1).exp() 4M {backend}",
                seconds,
                peer="numpy",
                peer_s=numpy_s,
                notes=f"{kernel.name}; target <= 2 ms {verdict}",
            )
        )
    for backend in backends:
        rows.append(
            row(
                f"cold compile gemm 512 kernel {backend}",
                _cold_compile(backend),
                notes="empty compiled-object cache",
            )
        )
    return rows
