"""Transcendentals (``make bench BENCH_ARGS=numerics``): kernel time of ``(x*2+1).<op>()`` on 4M
values per compiled CPU backend, next to numpy.

sin, cos and tan reduce their argument exactly for every finite input (Cody–Waite, and Payne–Hanek
past 2**26, both computed: the vector code is branch-free), and exp recovers the rounding of
``x·log2 e``; these rows show what that accuracy costs on the common small-argument path
(docs/accuracy.md records the accuracy and the before/after numbers).
"""

from __future__ import annotations

import numpy as np
from run import measure, row, settle

import uopviz as uv
from uopviz.backends import get
from uopviz.backends.worker import time_kernel

BACKENDS = ("c", "llvm", "opencl")
CASES = (("sin", "float32"), ("cos", "float32"), ("tan", "float32"), ("exp", "float32"), ("sin", "float64"))


def _kernel_time(op: str, x: np.ndarray, backend: str) -> tuple[float, str]:
    """Median seconds of the heuristic kernel (isolated worker, 10 warm-up runs, 15 timed)."""
    kernel = uv.compile([getattr(uv.Tensor(x) * 2 + 1, op)()], backend=backend, opts="heuristic").kernels[-1]
    lowered = kernel.lower(backend)
    arrays = lowered.random_arguments()
    settle()
    timing = time_kernel(backend, lowered.source, lowered.name, arrays, warmup=10, repeats=15, rotate=2)
    return timing.median_s, kernel.name


def run() -> list[dict]:
    rows: list[dict] = []
    backends = [b for b in BACKENDS if get(b).available()]
    for op, dtype in CASES:
        x = np.random.default_rng(3).standard_normal(4 * 1024 * 1024).astype(dtype)
        numpy_s = measure(lambda x=x, op=op: getattr(np, op)(x * 2 + 1), repeat=5, warmup=1)
        for backend in backends:
            seconds, name = _kernel_time(op, x, backend)
            rows.append(row(f"(x*2+1).{op}() 4M {dtype} {backend}", seconds, peer="numpy", peer_s=numpy_s,
                            notes=name))
    return rows
