"""Render a fixed set of programs on the C-family backends (C, OpenCL C, CUDA C) and LLVM and write or compare
their sources: a refactor of the renderers must leave every byte of generated code as it was.

    python scripts/render_sources.py save  sources.json   # before the change
    python scripts/render_sources.py check sources.json   # after: exits 1 and names what differs

CUDA and OpenCL sources render without a GPU or an OpenCL device (``build=False``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's uopviz and tests

import uopviz as uv  # noqa: E402
from tests.backends import linear_programs as lp  # noqa: E402  (the repository's test programs)
from uopviz.backends import get  # noqa: E402
from uopviz.backends.cuda import MMA_M16N8K16_F16_F32  # noqa: E402
from uopviz.backends.opencl import OpenCLRenderer  # noqa: E402
from uopviz.core.dtype import dtypes  # noqa: E402

#: (label, backend, OpenCL device features or None): OpenCL renders differently with and without
#: cl_khr_fp16 / cl_khr_fp64, so both are rendered whatever this machine's device has
BACKENDS = (("c", "c", None), ("opencl", "opencl", (True, True)), ("opencl-nofp16", "opencl", (False, False)),
            ("cuda", "cuda", None), ("llvm", "llvm", None))


def tensor_programs() -> dict[str, Callable[[], list]]:
    """Whole programs through the pipeline: name -> a function making their output Tensors."""
    T = uv.Tensor
    return {
        "gemm": lambda: [T.rand(64, 64, seed=1).matmul(T.rand(64, 64, seed=2))],
        "conv2d_padded": lambda: [T.rand(1, 3, 16, 16, seed=1).conv2d(T.rand(8, 3, 3, 3, seed=2), padding=1)],
        "softmax": lambda: [T.rand(32, 100, seed=1).softmax()],
        "layernorm": lambda: [T.rand(16, 64, seed=1).layernorm()],
        "exp_chain": lambda: [(T.rand(1024, seed=1).exp() * 2).exp().sum()],
        "casts_half": lambda: [(T.rand(256, seed=1).cast(dtypes.float16) * 3).cast(dtypes.float32)],
        "casts_bfloat16": lambda: [(T.rand(256, seed=1).cast(dtypes.bfloat16) + 1).cast(dtypes.float32)],
        "casts_int": lambda: [(T.randn(256, seed=1) * 100).cast(dtypes.int8).cast(dtypes.int32) // 3],
        "reduction_max": lambda: [T.rand(64, 33, seed=1).max(axis=1)],
        "pad_gated": lambda: [T.rand(30, 30, seed=1).pad(((1, 2), (3, 1))) + 1],
        "half_gemm": lambda: [T.rand(32, 32, seed=1).cast(dtypes.float16).matmul(
            T.rand(32, 32, seed=2).cast(dtypes.float16))],
    }


def render_all() -> dict[str, str]:
    """``{"backend/program/opts": source or "error: ..."}`` for every backend and program."""
    out: dict[str, str] = {}
    for label, backend, features in BACKENDS:
        saved_renderer = get(backend).renderer
        if features is not None:
            get(backend).renderer = OpenCLRenderer(saved_renderer.tensor_cores, *features)
        try:
            out.update(render_backend(label, backend))
        finally:
            get(backend).renderer = saved_renderer
    return out


def render_backend(label: str, backend: str) -> dict[str, str]:
    """The sources of every program on one backend, keyed ``label/program/opts``."""
    out: dict[str, str] = {}
    for name, make in tensor_programs().items():
        for opts in (None, "heuristic"):
            key = f"{label}/{name}/{opts}"
            try:
                program = uv.compile(make(), backend, opts=opts, build=False)
                out[key] = "\n=====\n".join(item.source for item in program.items)
            except Exception as error:  # noqa: BLE001 - a refusal is part of what is compared
                out[key] = f"error: {type(error).__name__}: {error}"
    cases = [*lp.correctness_cases(), *lp.integer_cases(), *lp.gpu_cases(), lp.half_vectors(4),
             lp.warp_wmma_gemm(2, MMA_M16N8K16_F16_F32), lp.wmma_gemm(2, 2, 2)]
    for case in cases:
        key = f"{label}/linear/{case.linear.arg}/{case.name}"
        try:
            out[key] = get(backend).render(case.linear)
        except Exception as error:  # noqa: BLE001
            out[key] = f"error: {type(error).__name__}: {error}"
    return out


def main() -> int:
    mode, path = sys.argv[1], sys.argv[2]
    rendered = render_all()
    if mode == "save":
        with open(path, "w") as file:
            json.dump(rendered, file, indent=0, sort_keys=True)
        errors = sum(v.startswith("error:") for v in rendered.values())
        print(f"saved {len(rendered)} sources ({errors} refusals) to {path} from {uv.__file__}")
        return 0
    with open(path) as file:
        saved = json.load(file)
    differing = [key for key in sorted(set(saved) | set(rendered)) if saved.get(key) != rendered.get(key)]
    for key in differing:
        print(f"DIFFERS: {key}")
    total = len(set(saved) | set(rendered))
    print(f"{len(rendered) - len(differing)} of {total} sources identical ({uv.__file__})")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
