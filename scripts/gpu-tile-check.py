"""Issue #23's open measurement on a CUDA GPU, under a minute (run where scripts/gpu-check.sh runs):

    PYTHONPATH=. python3 scripts/gpu-tile-check.py

It times (CUDA events, median of 20, values checked against numpy) the gemm 2048 float32 of the
heuristic (0.871 ms on an H200 on 2026-11-28; multiply-adds chained into the accumulator measured
0.888 ms in the same run and were reverted) and the gemm 4096 float16 of the heuristic (4x4 tensor
core tiles per warp, 3.06 ms) against 8 N x 4 M and 8 N x 2 M tiles per warp, which the GPU model
puts at 1.6 and 2.1 ms against 2.6 ms (their registers are not modelled).  ``BUILD=0`` prints the
opts without a GPU.
"""

from __future__ import annotations

import os
import statistics

import numpy as np

import uopviz as uv
from uopviz import AxisType, Opt, OptOp

BUILD = os.environ.get("BUILD", "1") == "1"
TC = Opt(OptOp.TC, 0, (-1, 1, 1))


def split(axis: int, size: int, kind: AxisType) -> Opt:
    """SPLIT of ``axis`` into an inner part of ``size`` of type ``kind``."""
    return Opt(OptOp.SPLIT, axis, (size, kind, False))


#: tensor-core tiles per warp to time against the heuristic's (N along axis 1, M along axis 0)
HALF_GEMM_OPTS = {
    "heuristic": "heuristic",
    "TC 8Nx4M, 4 warps": [TC, split(1, 8, AxisType.UPCAST), split(0, 4, AxisType.UPCAST),
                          split(1, 4, AxisType.LOCAL)],
    "TC 8Nx2M, 4 warps": [TC, split(1, 8, AxisType.UPCAST), split(0, 2, AxisType.UPCAST),
                          split(1, 4, AxisType.LOCAL)],
}  # fmt: skip


def time_case(label: str, expression: uv.Tensor, reference: np.ndarray, opts: object = "heuristic") -> None:
    """Print the median time of ``expression`` compiled for CUDA with ``opts``, and its error."""
    program = uv.compile(expression, backend="cuda", opts=opts, build=BUILD)
    if not BUILD:
        print(f"{label}: {[list(kernel.opts) for kernel in program.kernels]}")
        return
    got = program.run()[0].astype(np.float64)
    error = float(np.linalg.norm(got - reference) / np.linalg.norm(reference))
    bound = program.bind()
    for _ in range(3):
        bound.run()
    median = statistics.median(bound.run() for _ in range(20))
    print(f"{label}: {median * 1e3:.3f} ms, relative error {error:.1e}", flush=True)


def main() -> None:
    """Time the cases (see the module docstring)."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((2048, 2048), np.float32) for _ in range(2))
    time_case("gemm 2048 float32, heuristic", uv.Tensor(a) @ uv.Tensor(b), a.astype(np.float64) @ b)
    a16, b16 = (rng.standard_normal((4096, 4096)).astype(np.float16) for _ in range(2))
    reference = a16.astype(np.float32) @ b16.astype(np.float32)
    for label, opts in HALF_GEMM_OPTS.items():
        time_case(f"gemm 4096 float16, {label}", uv.Tensor(a16) @ uv.Tensor(b16), reference, opts)


if __name__ == "__main__":
    main()
