"""The CPU's measured multiply-add peak: the GFLOP/s that a kernel of nothing but independent fused
multiply-adds reaches on the C backend's target, on a given number of threads.

A conv kernel's GFLOP/s against ONNX Runtime's says which is faster; against this peak it says how
far from the machine both are, and so whether a gap is in the register tile (the multiply-adds per
cycle) or elsewhere (memory, copies, launches).  The probe is a C kernel compiled by the C backend
itself (its compiler, flags and target: ``-march`` of the target profile, OpenMP), so the vector
width is the one our kernels get: each thread keeps ``ACCUMULATORS`` vectors of one SIMD register
each, more chains than the multiply-add units' latency needs, started apart (identical chains are
one chain to the compiler); the C renderer's register pin (an empty ``asm``) on each at every step
and the sums written out keep every step (a probe whose results went unused lost its loop and read
22,000 GFLOP/s).  Benchmark-only: never imported by ``uopviz``.
"""

from __future__ import annotations

import json
import platform

import numpy as np

#: independent accumulators per thread: more than two multiply-add units of latency 4 keep busy
ACCUMULATORS = 12
#: multiply-add steps of every accumulator per call (about 21 ms on a 2.8 GHz AVX2 core)
STEPS = 10_000_000
#: calls timed; the fastest counts (the probe has no memory traffic to vary)
REPEAT = 5
#: the most multiply-adds a core issues per cycle, and a clock no CPU of this decade exceeds: the
#: bound above which a probe reading is wrong, not fast
MAX_FMA_PER_CYCLE = 2
MAX_CLOCK_HZ = 6.0e9


def probe_source(threads: int, lanes: int, pins: list[str]) -> str:
    """The C source of the probe (a kernel with the metadata line the C backend reads); ``pins``: the
    statement that keeps each accumulator in a register, in order."""
    params = json.dumps([[0, "float32", threads, True]])
    names = [f"a{i}" for i in range(ACCUMULATORS)]
    # distinct starts: identical chains would be one chain to the compiler
    starts = "\n".join(f"    vector {name} = splat((float)(thread + {index + 1}));"
                       for index, name in enumerate(names))
    steps = "\n".join(f"      {name} = {name} * scale + shift;" for name in names)
    total = " + ".join(f"{name}[0]" for name in names)
    return f"""// uopviz-meta {{"name":"fma_peak","global":[1,1,1],"local":[1,1,1],"params":{params}}}
#include <stdint.h>
typedef float vector __attribute__((vector_size({4 * lanes})));
static inline vector splat(float x) {{ vector v; for (int i = 0; i < {lanes}; i++) v[i] = x; return v; }}
void fma_peak(float* restrict data0) {{
  #pragma omp parallel for schedule(static)
  for (int64_t thread = 0; thread < {threads}; thread++) {{
    vector scale = splat(0.999999f), shift = splat(1e-7f);
{starts}
    for (int64_t step = 0; step < {STEPS}; step++) {{
{steps}
      {"  ".join(pins)}
    }}
    data0[thread] = {total};
  }}
}}
"""


def accumulator_pins(backend) -> list[str] | None:  # noqa: ANN001 - the C backend
    """The C renderer's register pin of each accumulator ``a0``, ``a1``, ... (None where it has none
    for this architecture)."""
    pins = [backend.renderer.register_pin(f"a{index}") for index in range(ACCUMULATORS)]
    return None if None in pins else pins


def float32_lanes(backend) -> int:  # noqa: ANN001 - the C backend
    """Float32 lanes of one SIMD register of the backend's target: the probe's vector width."""
    return max(1, backend.vector_bytes // 4)


def flops_per_call(threads: int, lanes: int) -> int:
    """Floating-point operations of one probe call: a multiply and an add per lane and step."""
    return 2 * lanes * ACCUMULATORS * STEPS * threads


def upper_bound_gflops(threads: int, lanes: int) -> float:
    """The GFLOP/s no CPU reaches (:data:`MAX_FMA_PER_CYCLE` at :data:`MAX_CLOCK_HZ` on each thread)."""
    return 2 * lanes * MAX_FMA_PER_CYCLE * MAX_CLOCK_HZ * threads / 1e9


def fma_peak_gflops(threads: int) -> float:
    """GFLOP/s of :data:`ACCUMULATORS` independent multiply-add chains per thread on ``threads``
    threads, in the C backend's float32 vectors of one register (the fastest of :data:`REPEAT` calls).
    Raises RuntimeError where no probe can run (no C compiler, an unknown architecture)."""
    from uopviz.backends.c import CBackend

    backend = CBackend()
    if (reason := backend.unavailable_reason()) is not None:
        raise RuntimeError(reason)
    pins = accumulator_pins(backend)
    if pins is None:
        raise RuntimeError(f"the C renderer pins no SIMD register on {platform.machine()}")
    lanes = float32_lanes(backend)
    kernel = backend.compile(probe_source(threads, lanes, pins), "fma_peak")
    launch = kernel.prepare(np.zeros(threads, dtype=np.float32))
    best = min(launch.run() for _ in range(REPEAT))  # each run returns its own seconds
    return flops_per_call(threads, lanes) / best / 1e9
