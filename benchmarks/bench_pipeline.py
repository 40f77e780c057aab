"""The lowering pipeline against tinygrad and numpy (``make bench BENCH_ARGS=pipeline``).

For gemm 512, conv2d, softmax, layernorm and ``(x*2+1).exp()``:

* **codegen**: Tensor graph → rendered source, cold (a fresh graph every time, tracing on, as
  ``uv.compile`` always traces), C backend with the heuristic opts, next to tinygrad's scheduling
  plus code generation for its CPU device (its caches cleared each time, its compiler not run).
* **kernels**: the time of the compiled kernels of one run (C backend, heuristic opts, buffers
  bound once: ``Program.bind``), next to tinygrad's CPU device (a TinyJit replay) and numpy.

Targets from the issue: codegen ≤ 1/3 of tinygrad's; gemm 512 ≥ 60 GFLOP/s; the elementwise chain
on 4M floats ≤ 2 ms.  The notes say whether a target is met.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np
from run import measure, row

CPU_COUNT = os.cpu_count() or 1


def _conv_numpy(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), (2, 3))
    return np.einsum("nchwij,ocij->nohw", windows, w, optimize=True)


def _softmax_numpy(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def _layernorm_numpy(x: np.ndarray) -> np.ndarray:
    mean = x.mean(1, keepdims=True)
    return (x - mean) / np.sqrt(((x - mean) ** 2).mean(1, keepdims=True) + 1e-5)


def cases() -> dict[str, dict[str, Any]]:
    """Each case: the input arrays, how to build it from tensors (uopviz's or tinygrad's Tensor:
    the methods are the same), numpy's version and its float work."""
    rng = np.random.default_rng(0)

    def data(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape, np.float32)

    return {
        "gemm 512": {"inputs": [data(512, 512), data(512, 512)], "build": lambda a, b: a @ b,
                     "numpy": lambda a, b: a @ b, "flops": 2 * 512 ** 3},
        "conv2d 1x16x64x64 k32x3x3": {"inputs": [data(1, 16, 64, 64), data(32, 16, 3, 3)],
                                      "build": lambda x, w: x.conv2d(w, padding=1), "numpy": _conv_numpy,
                                      "flops": 2 * 32 * 16 * 9 * 64 * 64},
        "softmax 1024x1024": {"inputs": [data(1024, 1024)], "build": lambda x: x.softmax(),
                              "numpy": _softmax_numpy, "flops": 0},
        "layernorm 1024x1024": {"inputs": [data(1024, 1024)], "build": lambda x: x.layernorm(),
                                "numpy": _layernorm_numpy, "flops": 0},
        "(x*2+1).exp() 4M": {"inputs": [data(2048, 2048)], "build": lambda x: (x * 2 + 1).exp(),
                             "numpy": lambda x: np.exp(x * 2 + 1), "flops": 0},
    }


# ---------------------------------------------------------------------------------------------
# uopviz


def ours_codegen(case: dict[str, Any]) -> float:
    import uopviz as uv

    def once() -> None:
        tensors = [uv.Tensor(a) for a in case["inputs"]]
        uv.compile(case["build"](*tensors), backend="c", opts="heuristic", build=False)

    return measure(once, repeat=5, number=1, warmup=1)


def ours_kernels(case: dict[str, Any], backend: str = "c") -> tuple[float, Any]:
    import uopviz as uv

    tensors = [uv.Tensor(a) for a in case["inputs"]]
    program = uv.compile(case["build"](*tensors), backend=backend, opts="heuristic")
    expected = case["numpy"](*case["inputs"])
    np.testing.assert_allclose(program.run()[0], expected, rtol=1e-3, atol=1e-3)
    bound = program.bind()
    return measure(bound.run, repeat=7, warmup=2, min_time_s=0.1), program


# ---------------------------------------------------------------------------------------------
# tinygrad (benchmarks only; uopviz never imports it)


def tinygrad_available() -> str | None:
    """None when tinygrad's CPU device works here, else why not."""
    try:
        from tinygrad import Device, Tensor

        Device["CPU"]
        (Tensor([1.0], device="CPU") + 1).realize()
    except Exception as error:  # noqa: BLE001 - any failure means no peer numbers
        return f"{type(error).__name__}: {error}"
    return None


def tinygrad_codegen(case: dict[str, Any]) -> float:
    from tinygrad import Device, Tensor
    from tinygrad.codegen import full_rewrite_to_sink, pm_to_program
    from tinygrad.schedule import schedule_cache
    from tinygrad.uop.ops import Ops, PatternMatcher, ProgramInfo, UOp, graph_rewrite

    renderer = Device["CPU"].renderer
    to_source = PatternMatcher(pm_to_program.patterns[:4])  # linearize, estimates, render: no compile

    # the inputs are made (and copied into tinygrad's buffers) outside the timed region: uopviz's
    # Tensor wraps the numpy arrays without a copy, so both sides time graph building to source
    tensors = [Tensor(a, device="CPU").realize() for a in case["inputs"]]

    def once() -> None:
        schedule_cache.clear()
        linear = case["build"](*tensors).schedule_linear()
        for call in linear.src:
            for u in call.toposort():
                if u.op is Ops.SINK and type(u.arg).__name__ == "KernelInfo":
                    sink = full_rewrite_to_sink(u, renderer, optimize=True)
                    program = UOp(Ops.PROGRAM, src=(sink,), arg=ProgramInfo.from_sink(sink, renderer.target))
                    graph_rewrite(program, to_source, ctx=renderer, name="linearize/render")

    return measure(once, repeat=5, number=1, warmup=1)


def tinygrad_kernels(case: dict[str, Any]) -> float:
    from tinygrad import Tensor, TinyJit

    tensors = [Tensor(a, device="CPU").realize() for a in case["inputs"]]

    @TinyJit
    def step(*args):
        return case["build"](*args).realize()

    for _ in range(3):
        step(*tensors)
    return measure(lambda: step(*tensors), repeat=7, warmup=1, min_time_s=0.1)


# ---------------------------------------------------------------------------------------------


def run() -> list[dict]:
    rows: list[dict] = []
    peer_problem = tinygrad_available()
    for name, case in cases().items():
        codegen = ours_codegen(case)
        if peer_problem is None:
            peer = tinygrad_codegen(case)
            met = "target met" if codegen <= peer / 3 else "target (<= 1/3 of tinygrad) missed"
            rows.append(row(f"codegen {name}", codegen, peer="tinygrad CPU", peer_s=peer,
                            notes=f"cold, tracing on, C backend, heuristic opts; {met}"))
        else:
            rows.append(row(f"codegen {name}", codegen, notes=f"tinygrad unavailable: {peer_problem}"))
        kernels, program = ours_kernels(case)
        names = ", ".join(k.name for k in program.kernels)
        notes = f"C, heuristic opts: {names}"
        if case["flops"]:
            gflops = case["flops"] / kernels / 1e9
            notes += f"; {gflops:.1f} GFLOP/s"
            if name.startswith("gemm"):
                notes += "; target >= 60 GFLOP/s " + ("met" if gflops >= 60 else "missed")
        if name.endswith("4M"):
            notes += "; target <= 2 ms " + ("met" if kernels <= 2e-3 else "missed")
        if peer_problem is None:
            rows.append(row(f"kernels {name}", kernels, peer="tinygrad CPU", peer_s=tinygrad_kernels(case),
                            notes=notes))
        reference, inputs = case["numpy"], case["inputs"]
        numpy_s = measure(lambda f=reference, x=inputs: f(*x), repeat=7, warmup=1, min_time_s=0.1)
        rows.append(row(f"kernels {name}", kernels, peer="numpy", peer_s=numpy_s, notes=notes))
        rows.extend(other_backends(name, case, kernels))
    return rows


def other_backends(name: str, case: dict[str, Any], c_s: float) -> list[dict]:
    """The same program on LLVM (target: C within 1.3x of it) and OpenCL (target: within 2x of C)."""
    from uopviz.backends import get

    rows = []
    for backend, limit, against in (("llvm", 1.3, "C / LLVM"), ("opencl", 2.0, "OpenCL / C")):
        if not get(backend).available():
            continue
        seconds, program = ours_kernels(case, backend)
        ratio = c_s / seconds if backend == "llvm" else seconds / c_s
        verdict = "met" if ratio <= limit else "missed"
        rows.append(row(f"kernels {name} on {backend}", seconds, peer="uopviz C", peer_s=c_s,
                        notes=f"{against} = {ratio:.2f} (target <= {limit}: {verdict}); "
                              f"{', '.join(k.name for k in program.kernels)}"))
    return rows


if __name__ == "__main__":  # a quick look without the harness
    import sys

    sys.path.insert(0, os.path.dirname(__file__))
    started = time.perf_counter()
    for r in run():
        print(r)
    print(f"{time.perf_counter() - started:.1f}s")
