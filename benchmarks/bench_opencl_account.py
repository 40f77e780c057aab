"""Why OpenCL (pocl) trails C on gemm 1024: an account measured on one core
(``make bench BENCH_ARGS=opencl_account``).

The heuristic's gemm tile (M4 x N32 lanes, its THREAD split left out) runs on one core, in a child
process whose pocl device has one compute unit (``POCL_CPU_MAX_CU_COUNT=1``), three ways:

* C as the pipeline builds it: the strip of B (32 columns, rows 4 KiB apart) is copied once into a
  contiguous per-thread buffer and read from there by every row tile (Optimize's strip staging);
* C with the staging switched off: every row tile reads B's rows 4 KiB apart, which share a few
  cache sets, so the strip never stays in cache;
* OpenCL: the same tile as one work-item.  It cannot stage: each work-item is one row tile (no row
  loop inside it to share a copy with), and pocl gives a work-item's private array a small stack
  (a 64 KiB strip crashed it).

If OpenCL's time is close to unstaged C's, the gap to C is the staging, not pocl's code.  A last
row times one launch of a 16-element kernel on pocl and on C: what every kernel of a program pays
on OpenCL before any work (softmax and layernorm are three kernels each), and the pipeline's conv2d
with C's tile on one core, C and pocl: the same kernel through two compilers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SIZE = 1024


def _child() -> dict[str, float]:
    """In the child: the three kernels' times (median seconds of interleaved runs)."""
    import statistics
    import time

    import numpy as np

    import uopviz as uv
    import uopviz.passes.optops.staging as staging
    from uopviz.core.ops import AxisType
    from uopviz.passes.optops import OptOp

    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((SIZE, SIZE), np.float32) for _ in range(2))
    heuristic = uv.compile(uv.Tensor(a) @ uv.Tensor(b), backend="c", opts="heuristic").kernels[0].opts
    one_core = [o for o in heuristic if not (o.op is OptOp.SPLIT and o.arg[1] is AxisType.THREAD)]
    bound, names = {}, {}
    for case, backend, stage in (("c staged", "c", True), ("c unstaged", "c", False),
                                 ("opencl", "opencl", False)):
        limit = staging.STAGE_MAX_BYTES
        staging.STAGE_MAX_BYTES = limit if stage else 0  # no strip is small enough: none staged
        try:
            program = uv.compile(uv.Tensor(a) @ uv.Tensor(b), backend=backend, opts=one_core)
        finally:
            staging.STAGE_MAX_BYTES = limit
        np.testing.assert_allclose(program.run()[0], a @ b, rtol=1e-3, atol=1e-3)
        bound[case], names[case] = program.bind(), program.kernels[0].name
    samples: dict[str, list[float]] = {case: [] for case in bound}
    for _ in range(7):  # interleaved, so a busy moment hits every case alike
        for case, runner in bound.items():
            started = time.perf_counter()
            runner.run()
            samples[case].append(time.perf_counter() - started)
    # the pipeline's conv2d (1x16x64x64, 32x3x3) with C's tile on one core, C and pocl: a kernel
    # both compile from the same opts, so the difference is the compilers' code for it
    x = rng.standard_normal((1, 16, 64, 64), np.float32)
    w = rng.standard_normal((32, 16, 3, 3), np.float32)
    conv = uv.compile(uv.Tensor(x).conv2d(uv.Tensor(w), padding=1), backend="c", opts="heuristic")
    conv_opts = [[o for o in k.opts if not (o.op is OptOp.SPLIT and o.arg[1] is AxisType.THREAD)]
                 for k in conv.kernels]
    convs: dict[str, float] = {}
    for backend in ("c", "opencl"):
        program = uv.compile(uv.Tensor(x).conv2d(uv.Tensor(w), padding=1), backend=backend, opts=conv_opts)
        runner = program.bind()
        for _ in range(5):
            runner.run()
        seconds = []
        for _ in range(20):
            started = time.perf_counter()
            runner.run()
            seconds.append(time.perf_counter() - started)
        convs[backend] = statistics.median(seconds)
    names["conv2d"] = conv.kernels[0].name
    # what one launch costs apart from its work: a 16-element kernel, on C and on pocl
    launches: dict[str, float] = {}
    tiny = np.ones(16, np.float32)
    for backend in ("c", "opencl"):
        runner = uv.compile(uv.Tensor(tiny) + 1, backend=backend, opts="heuristic").bind()
        for _ in range(20):
            runner.run()
        seconds = []
        for _ in range(200):
            started = time.perf_counter()
            runner.run()
            seconds.append(time.perf_counter() - started)
        launches[backend] = statistics.median(seconds)
    return {"times": {case: statistics.median(s) for case, s in samples.items()}, "names": names,
            "launches": launches, "convs": convs}


def run() -> list[dict]:
    from run import row

    environment = {**os.environ, "POCL_CPU_MAX_CU_COUNT": "1", "POCL_MAX_PTHREAD_COUNT": "1"}
    done = subprocess.run([sys.executable, __file__, "child"], capture_output=True, text=True,
                          env=environment, cwd=Path(__file__).resolve().parent.parent, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"child failed: {done.stderr[-2000:]}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    times, names = found["times"], found["names"]
    flops = 2 * SIZE ** 3
    rows = []
    for case in ("c unstaged", "opencl"):
        rows.append(row(f"gemm {SIZE} one core: {case}", times[case], peer="uopviz C staged",
                        peer_s=times["c staged"],
                        notes=f"{names[case]}; {flops / times[case] / 1e9:.1f} vs "
                              f"{flops / times['c staged'] / 1e9:.1f} GFLOP/s"))
    rows.append(row(f"gemm {SIZE} one core: opencl", times["opencl"], peer="uopviz C unstaged",
                    peer_s=times["c unstaged"], notes="the same tile without strip staging on both"))
    convs = found["convs"]
    rows.append(row("conv2d 1x16x64x64 k32x3x3 one core: opencl", convs["opencl"], peer="uopviz C",
                    peer_s=convs["c"], notes=f"{names['conv2d']} without its THREAD split on both: "
                                             "the compilers' code for the same kernel"))
    launches = found["launches"]
    rows.append(row("one launch of a 16-element kernel: opencl", launches["opencl"], peer="uopviz C",
                    peer_s=launches["c"], notes="pocl's cost per kernel launch (one compute unit), "
                                                "paid once per kernel of a program"))
    return rows


if __name__ == "__main__" and sys.argv[1:] == ["child"]:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    print(json.dumps(_child()))
