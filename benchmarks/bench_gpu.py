"""uopviz on a real GPU (``make bench-gpu``, ``python benchmarks/run.py gpu``): the CUDA backend with
the heuristic's opts next to torch and tinygrad's CUDA device in the same process, and the GPU
model's predicted times (``uopviz.engine.gpu_model.gpu_account``) beside the measurements.

Cases (issue #23): ``x.sum()`` of 64M float32; gemm 4096 float16 (float32 accumulation) and 2048
float32 (heuristic; BEAM too with ``UOPVIZ_GPU_BEAM=1``, a search of at most
``UOPVIZ_GPU_BEAM_BUDGET_S`` = 30 s); conv2d 8x64x56x56 with 64 3x3 filters; softmax and layernorm
of 4096x4096; argmax and cumsum along axis 1 of 1024x1024; ``(x*2+1).exp()`` of 64M; and the zoo's
ResNet-50 (SkriptND form, batch 1, 224x224: load + compile, then inference against torch eager
float32 built from the same weights).

How it times: uopviz's kernels bound to device arrays (``Program.bind``), each launch between CUDA
events (``CUDALaunch.run``), summed per run; torch between ``torch.cuda.Event``s around the call;
tinygrad a ``TinyJit`` replay between ``Device["CUDA"].synchronize()`` calls (wall clock: its
Python replay is included).  Each is warmed up (``WARMUP`` runs: compilation, the JIT's capture)
and the median of ``REPEATS`` runs is kept.  Every result is checked against numpy (float64 or
float32 references), ours and the peers' alike; a wrong uopviz value is an error row.  torch's TF32
is switched off so that float32 means float32 for every side.

Without a CUDA device every case is a skipped row saying why, and the GPU model's predictions for
H100 and H200 are rows of their own (``build=False``: rendered, not compiled) -- a few seconds.
With one, the predictions are still there, and each measured row's notes compare the measurement
with the model's prediction for the detected GPU.  ``machine_info()`` (results.json
``machine.modules.gpu``) records the GPU, driver, CUDA version and the peers' versions.

Environment: ``UOPVIZ_GPU_BENCH_CASES`` (comma-separated keys of ``CASES``, default all);
``UOPVIZ_GPU_BENCH_BUDGET_S`` (default 300): once spent, the remaining cases are skipped rows, so
one device call always ends.  ``python benchmarks/bench_gpu.py dry-run`` runs the measuring code on
the CPU (uopviz's C backend, torch and tinygrad on the CPU) at a 1/16 scale: a check of this
module where there is no GPU.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
WARMUP = 3
REPEATS = 20
MODEL_GPUS = ("H100", "H200")
M = 1024 * 1024


@dataclass(frozen=True)
class Case:
    """One benchmark: its inputs, the expression (uopviz's and tinygrad's Tensor share the API),
    torch's, the numpy reference, and what it counts (FLOPs for compute, bytes for memory-bound)."""

    key: str
    title: str
    inputs: tuple[tuple[tuple[int, ...], str], ...]
    ours: Callable[..., Any]
    torch: Callable[..., Any]
    reference: Callable[..., np.ndarray]
    flops: int = 0
    bytes: int = 0
    tolerance: float = 1e-4
    exact: bool = False  # integer results (argmax): every element must match
    scale: Callable[..., float] | None = None  # the error's denominator; default ||reference||

    def data(self, seed: int = 0) -> list[np.ndarray]:
        """Seeded random inputs (never zeros: they hide unwritten outputs)."""
        rng = np.random.default_rng(seed)
        return [rng.standard_normal(shape, np.float32).astype(dtype) for shape, dtype in self.inputs]

    def error(self, out: Any, expected: np.ndarray, inputs: list[np.ndarray]) -> float:
        """The relative error of ``out`` (mismatched fraction for ``exact`` cases)."""
        out = np.asarray(out).reshape(expected.shape)
        if self.exact:
            return float(np.mean(out != expected))
        if not np.all(np.isfinite(out)):
            return float("inf")
        diff = np.linalg.norm((out.astype(np.float64) - expected).ravel())
        denominator = self.scale(*inputs) if self.scale else np.linalg.norm(expected.ravel())
        return float(diff / max(denominator, 1e-30))


def _conv_reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    import zoo

    return zoo._np_conv(x, w, 1, 1, 1)


def _softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _layernorm(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    centered = x - x.mean(axis=-1, keepdims=True)
    return centered / np.sqrt((centered**2).mean(axis=-1, keepdims=True) + 1e-5)


def cases(shrink: int = 1) -> dict[str, Case]:
    """The issue's cases; ``shrink`` divides the sizes (the CPU dry run)."""
    big, gemm16, gemm32, side = 64 * M // shrink, 4096 // shrink, 2048 // shrink, 4096 // shrink
    small, batch = 1024 // shrink, max(8 // shrink, 1)
    f32, f16 = "float32", "float16"
    conv_flops = 2 * batch * 64 * 64 * 9 * 56 * 56
    found = [
        Case("sum", f"x.sum() {big // M or big}{'M' if big >= M else ''} float32", (((big,), f32),),
             lambda x: x.sum(), lambda x: x.sum(), lambda x: np.sum(x, dtype=np.float64),
             bytes=4 * big, tolerance=1e-6, scale=lambda x: float(np.abs(x).sum())),
        Case("gemm16", f"gemm {gemm16} float16 (float32 accumulation)", (((gemm16, gemm16), f16),) * 2,
             lambda a, b: a @ b, lambda a, b: a @ b,
             lambda a, b: a.astype(np.float32) @ b.astype(np.float32),
             flops=2 * gemm16**3, tolerance=5e-3),
        Case("gemm32", f"gemm {gemm32} float32", (((gemm32, gemm32), f32),) * 2,
             lambda a, b: a @ b, lambda a, b: a @ b, lambda a, b: a.astype(np.float64) @ b,
             flops=2 * gemm32**3),
        Case("conv2d", f"conv2d {batch}x64x56x56, 64 3x3 filters",
             (((batch, 64, 56, 56), f32), ((64, 64, 3, 3), f32)),
             lambda x, w: x.conv2d(w, padding=1),
             lambda x, w: __import__("torch").nn.functional.conv2d(x, w, padding=1),
             _conv_reference, flops=conv_flops),
        Case("softmax", f"softmax {side}x{side} float32", (((side, side), f32),),
             lambda x: x.softmax(), lambda x: x.softmax(-1), _softmax, bytes=8 * side * side),
        Case("layernorm", f"layernorm {side}x{side} float32", (((side, side), f32),),
             lambda x: x.layernorm(),
             lambda x: __import__("torch").nn.functional.layer_norm(x, x.shape[-1:]), _layernorm,
             bytes=8 * side * side),
        Case("argmax", f"argmax axis=1 {small}x{small} float32", (((small, small), f32),),
             lambda x: x.argmax(axis=1), lambda x: x.argmax(dim=1), lambda x: x.argmax(axis=1),
             bytes=4 * small * small, exact=True),
        Case("cumsum", f"cumsum axis=1 {small}x{small} float32", (((small, small), f32),),
             lambda x: x.cumsum(axis=1), lambda x: x.cumsum(dim=1),
             lambda x: np.cumsum(x.astype(np.float64), axis=1), bytes=8 * small * small),
        Case("exp", f"(x*2+1).exp() {big // M or big}{'M' if big >= M else ''} float32", (((big,), f32),),
             lambda x: (x * 2 + 1).exp(), lambda x: (x * 2 + 1).exp(),
             lambda x: np.exp(x.astype(np.float64) * 2 + 1), bytes=8 * big),
    ]  # fmt: skip
    return {case.key: case for case in found}


CASE_KEYS = (*cases(), "resnet50")


# --------------------------------------------------------------------------------------------
# the device and the peers


def cuda_missing() -> str | None:
    """Why uopviz's CUDA backend cannot run here, or None."""
    from uopviz.backends import get

    return get("cuda").unavailable_reason()


def gpu_spec_name(device_name: str) -> str | None:
    """The GPU model's name (``uopviz.engine.gpu_specs.GPUS``) for a CUDA device name:
    ``"NVIDIA H200"`` -> ``"H200"``, ``"NVIDIA H100 80GB HBM3"`` -> ``"H100"``; None if unknown."""
    from uopviz.engine.gpu_specs import GPUS

    squeezed = device_name.upper().replace(" ", "").replace("-", "")
    return next((name for name in GPUS if name in squeezed), None)


def _make_primary_context_current() -> None:
    """tinygrad makes a context of its own current on this thread; uopviz's launches and torch use
    the device's primary context, made current again here before their turn."""
    library = ctypes.CDLL(ctypes.util.find_library("cuda") or "libcuda.so.1")
    device, context = ctypes.c_int(), ctypes.c_void_p()
    for status, what in ((library.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet"),
                         (library.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "retain"),
                         (library.cuCtxSetCurrent(context), "cuCtxSetCurrent")):  # fmt: skip
        if status != 0:
            raise RuntimeError(f"{what} failed with CUDA error {status}")
    library.cuDevicePrimaryCtxRelease(device)  # torch and uopviz hold their own references


@dataclass
class Side:
    """Where a run measures: uopviz's backend, torch's and tinygrad's devices, and the peers (a
    module, or the reason it is missing)."""

    backend: str
    torch_device: str
    tinygrad_device: str
    torch: Any = None
    tinygrad: Any = None
    missing: dict[str, str] = field(default_factory=dict)

    @property
    def on_gpu(self) -> bool:
        return self.backend == "cuda"

    def load_peers(self) -> None:
        """Import torch and tinygrad; a failure is recorded as the peer's reason."""
        try:
            import torch

            if self.on_gpu and not torch.cuda.is_available():
                raise RuntimeError("torch sees no CUDA device")
            torch.backends.cuda.matmul.allow_tf32 = False  # float32 means float32 on every side
            torch.backends.cudnn.allow_tf32 = False
            self.torch = torch
        except Exception as error:  # noqa: BLE001 - a missing peer is a skipped row
            self.missing["torch"] = f"{type(error).__name__}: {error}"
        try:
            from tinygrad import Device, Tensor  # noqa: F401

            Device[self.tinygrad_device]  # opens the device (libcuda, nvrtc) now, not inside a case
            import tinygrad

            self.tinygrad = tinygrad
        except Exception as error:  # noqa: BLE001
            self.missing["tinygrad"] = f"{type(error).__name__}: {error}"

    def primary_context(self) -> None:
        if self.on_gpu and self.tinygrad is not None:
            _make_primary_context_current()

    def torch_version(self) -> str:
        return f"torch {self.torch.__version__}" + (" CUDA" if self.on_gpu else " CPU")

    def tinygrad_version(self) -> str:
        from importlib.metadata import version

        return f"tinygrad {version('tinygrad')} {self.tinygrad_device}"


def _median_of(run_once: Callable[[], float]) -> float:
    """Median seconds of ``REPEATS`` calls of ``run_once`` (each returns its own time) after
    ``WARMUP`` untimed ones, garbage collection off."""
    for _ in range(WARMUP):
        run_once()
    gc.disable()
    try:
        return statistics.median(run_once() for _ in range(REPEATS))
    finally:
        gc.enable()


def time_torch(side: Side, fn: Callable[[], Any]) -> float:
    """torch: CUDA events around the call (wall clock on the CPU)."""
    torch = side.torch
    if not side.on_gpu:

        def once() -> float:
            started = time.perf_counter()
            fn()
            return time.perf_counter() - started

        return _median_of(once)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed() -> float:
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop) * 1e-3

    torch.cuda.synchronize()
    return _median_of(timed)


def time_tinygrad(side: Side, jitted: Callable[[], Any]) -> float:
    """tinygrad: a TinyJit replay between two synchronisations of its device (wall clock)."""
    device = side.tinygrad.Device[side.tinygrad_device]

    def timed() -> float:
        device.synchronize()
        started = time.perf_counter()
        jitted()
        device.synchronize()
        return time.perf_counter() - started

    return _median_of(timed)


# --------------------------------------------------------------------------------------------
# the GPU model


def predictions(kernels: list[Any]) -> dict[str, tuple[float | None, str]]:
    """Per model GPU: the sum of the kernels' predicted seconds (None when one cannot launch) and a
    note naming the kernels' bounds."""
    from uopviz.engine.gpu_model import gpu_account

    found = {}
    for gpu in MODEL_GPUS:
        accounts = [gpu_account(kernel, gpu) for kernel in kernels]
        times = [a.predicted_s for a in accounts]
        bounds = sorted({a.bound for a in accounts})
        total = None if any(t is None for t in times) else sum(times)
        found[gpu] = (total, f"{len(accounts)} kernel(s), {'/'.join(bounds)}-bound")
    return found


def _prediction_rows(
    title: str, predicted: dict[str, tuple[float | None, str]], case: Case | None
) -> list[dict]:
    from run import row

    rows = []
    for gpu, (seconds, note) in predicted.items():
        name = f"{title} [GPU model {gpu}]"
        if seconds is None:
            rows.append(
                {"case": name, "status": "skipped", "notes": f"model: a kernel cannot launch on {gpu}"}
            )
            continue
        rows.append(
            row(name, seconds, notes=f"predicted by gpu_account, not measured: {note}{_rate(case, seconds)}")
        )
    return rows


def _rate(case: Case | None, seconds: float) -> str:
    """``, 1.23 TFLOP/s`` or ``, 456 GB/s`` at ``seconds`` (nothing when the case counts neither)."""
    if case is None or seconds <= 0:
        return ""
    if case.flops:
        return f", {case.flops / seconds / 1e12:.2f} TFLOP/s"
    return f", {case.bytes / seconds / 1e9:.0f} GB/s" if case.bytes else ""


# --------------------------------------------------------------------------------------------
# the cases


def _compile_ours(case: Case, data: list[np.ndarray], backend: str, opts: Any, build: bool = True) -> Any:
    """uopviz's program of ``case`` on ``data`` (none: empty tensors of the case's shapes, to render)."""
    import uopviz as uv

    tensors = (
        [uv.Tensor(x) for x in data]
        if data
        else [uv.Tensor.empty(*shape, dtype=dtype) for shape, dtype in case.inputs]
    )
    return uv.compile(case.ours(*tensors), backend=backend, opts=opts, build=build)


def _beam_opts(case: Case, data: list[np.ndarray], backend: str) -> tuple[Any, str]:
    """The BEAM search's opts for a one-kernel case (budget ``UOPVIZ_GPU_BEAM_BUDGET_S``)."""
    from uopviz.engine.search import beam_search

    budget = float(os.environ.get("UOPVIZ_GPU_BEAM_BUDGET_S", "30"))
    plain = _compile_ours(case, data, backend, None, build=False)
    result = beam_search(plain.kernels[0], backend, budget_s=budget, progress=False)
    return list(
        result.opts
    ), f"BEAM {result.elapsed_s:.0f} s{', ' + result.stopped if result.stopped else ''}"


def measure_case(
    case: Case,
    side: Side,
    predicted: dict[str, tuple[float | None, str]],
    spec: str | None,
    opts: Any = "heuristic",
) -> list[dict]:
    """The rows of one case measured on ``side``: ours against each peer (or alone)."""
    from run import row

    data = case.data()
    expected = case.reference(*data)
    side.primary_context()
    label = "heuristic"
    if opts == "beam":
        opts, label = _beam_opts(case, data, side.backend)
    program = _compile_ours(case, data, side.backend, opts)
    ours_error = case.error(program.run()[0], expected, data)
    bound = program.bind()
    ours_s = _median_of(bound.run)
    title = case.title if label == "heuristic" else f"{case.title} ({label})"
    notes = [
        f"{side.backend} {label}, {len(program.kernels)} kernel(s)",
        f"ours{_rate(case, ours_s)}",
        f"error {ours_error:.1e}",
    ]
    if spec is not None and predicted.get(spec, (None,))[0]:
        notes.append(
            f"model {spec} {predicted[spec][0] * 1e3:.3g} ms (measured/model "
            f"{ours_s / predicted[spec][0]:.2f})"
        )
    if ours_error > case.tolerance:
        return [
            {
                "case": title,
                "status": "error",
                "notes": f"WRONG VALUES: error {ours_error:.2e} > {case.tolerance:g}; " + "; ".join(notes),
            }
        ]
    peers: list[tuple[str, float | None, str]] = []
    if side.torch is not None:
        peers.append(_torch_peer(case, side, data, expected))
    if side.tinygrad is not None:
        peers.append(_tinygrad_peer(case, side, data, expected))
    if not peers:
        return [row(title, ours_s, notes="; ".join(notes))]
    rows = []
    for peer, peer_s, peer_note in peers:
        rows.append(
            row(
                title,
                ours_s,
                peer=peer if peer_s is not None else "",
                peer_s=peer_s,
                notes="; ".join([*notes, peer_note]),
            )
        )
    return rows


def _torch_peer(
    case: Case, side: Side, data: list[np.ndarray], expected: np.ndarray
) -> tuple[str, float | None, str]:
    torch = side.torch
    name = side.torch_version()
    try:
        side.primary_context()
        tensors = [torch.from_numpy(x).to(side.torch_device) for x in data]
        out = case.torch(*tensors).cpu().numpy()
        error = case.error(out, expected, data)
        seconds = time_torch(side, lambda: case.torch(*tensors))
        if side.on_gpu:
            torch.cuda.empty_cache()
    except Exception as failure:  # noqa: BLE001 - a peer's failure is a note, not the case's
        return name, None, f"torch failed: {type(failure).__name__}: {failure}"
    wrong = " (WRONG)" if error > case.tolerance else ""
    return name, seconds, f"torch{_rate(case, seconds)}, error {error:.1e}{wrong}"


def _tinygrad_peer(
    case: Case, side: Side, data: list[np.ndarray], expected: np.ndarray
) -> tuple[str, float | None, str]:
    Tensor, TinyJit = side.tinygrad.Tensor, side.tinygrad.TinyJit
    name = side.tinygrad_version()
    try:
        tensors = [Tensor(x, device=side.tinygrad_device).realize() for x in data]
        jitted = TinyJit(lambda *xs: case.ours(*xs).realize())
        for _ in range(2):  # the JIT captures on its second call and replays from the third
            jitted(*tensors)
        out = jitted(*tensors).numpy()
        error = case.error(out, expected, data)
        seconds = time_tinygrad(side, lambda: jitted(*tensors))
    except Exception as failure:  # noqa: BLE001
        return name, None, f"tinygrad failed: {type(failure).__name__}: {str(failure)[:300]}"
    wrong = " (WRONG)" if error > case.tolerance else ""
    return (
        name,
        seconds,
        f"tinygrad{_rate(case, seconds)} (TinyJit replay, wall clock), error {error:.1e}{wrong}",
    )


# --------------------------------------------------------------------------------------------
# ResNet-50


_TORCH_LAYERS: dict[str, Callable[..., Any]] = {
    "conv": lambda F, x, w, b=None, stride=1, padding=0, groups=1: F.conv2d(
        x, w, b, stride, padding, 1, groups),
    "batch_norm": lambda F, x, mean, var, offset, scale, epsilon: F.batch_norm(
        x, mean, var, scale, offset, training=False, eps=epsilon),
    "relu": lambda F, x: F.relu(x),
    "add": lambda F, a, b: a + b,
    "max_pool": lambda F, x, size, stride, padding: F.max_pool2d(x, size, stride, padding),
    "avg_pool": lambda F, x, size, stride, padding: F.avg_pool2d(
        x, size, stride, padding, count_include_pad=False),
    "global_pool": lambda F, x: x.mean(dim=(2, 3)),
    "flatten": lambda F, x: x.flatten(1),
    "linear": lambda F, x, w, b=None: F.linear(x, w, b),
    "softmax": lambda F, x: F.softmax(x, dim=1),
}  # fmt: skip


def torch_forward(net: Any, torch: Any, device: str) -> Callable[[Any], Any]:
    """The zoo network ``net`` as a torch eager forward pass on ``device`` (its own weights)."""
    F = torch.nn.functional
    missing = sorted({node.op for node in net.nodes} - set(_TORCH_LAYERS))
    if missing:
        raise ValueError(f"no torch form for the zoo's layers {missing}")
    weights = {name: torch.from_numpy(data).to(device) for name, data in net.weights.items()}

    def forward(x: Any) -> Any:
        values = {**weights, net.input_name: x}
        for node in net.nodes:
            values[node.outputs[0]] = _TORCH_LAYERS[node.op](
                F, *(values[n] for n in node.inputs), **node.attrs
            )
        return values[net.output]

    return forward


def _load_resnet(folder: Path, backend: str, build: bool) -> tuple[Any, Any, float, float]:
    import uopviz as uv

    started = time.perf_counter()
    graph = uv.nnef.load(folder)
    loaded = time.perf_counter()
    program = graph.compile(backend, opts="heuristic", progress=False, build=build)
    return graph, program, loaded - started, time.perf_counter() - loaded


def resnet_rows(side: Side | None, skipped: str = "", shrink: int = 1) -> list[dict]:
    """ResNet-50's predictions, and on ``side`` its load + compile and inference against torch (no
    side: a skipped row saying ``skipped``).  ``shrink`` > 1: a 64x64, quarter-width ResNet-50."""
    import zoo
    from run import row

    from uopviz.nnef.program.runtime import program_inputs

    net = zoo.resnet50() if shrink == 1 else zoo.resnet50(size=64, width=0.25)
    title = f"ResNet-50 (zoo, SkriptND, {net.input_shape[-1]}x{net.input_shape[-1]} batch 1)"
    with tempfile.TemporaryDirectory(prefix="uopviz-gpu-resnet-") as folder:
        zoo.write_skriptnd(net, folder)
        _, rendered, _, _ = _load_resnet(Path(folder), "cuda", build=False)
        rows = _prediction_rows(title, predictions(list(rendered.kernels)), None)
        if side is None:
            return [
                *rows,
                {"case": f"{title}: inference", "status": "skipped", "notes": f"skipped: {skipped}"},
            ]
        side.primary_context()
        graph, program, load_s, compile_s = _load_resnet(Path(folder), side.backend, build=True)
    x = net.input_data()
    inputs = {net.input_name: x}
    expected = zoo.reference(net, x)
    started = time.perf_counter()
    out = graph.run(inputs, backend=side.backend, opts="heuristic")[net.output]
    run_s = time.perf_counter() - started
    error = float(np.abs(out - expected).max())
    rows.append(row(f"{title}: load + compile", load_s + compile_s,
                    notes=f"load {load_s:.2f} s, compile {compile_s:.2f} s ({side.backend}, heuristic); "
                          f"{len(program.kernels)} kernels"))  # fmt: skip
    steps = [step for kind, step in program.nnef_steps if kind == "kernels"]
    bound = [step.bind(program_inputs(graph, step, inputs)) for step in steps]
    ours_s = _median_of(lambda: sum(b.run() for b in bound))
    how = "each launch between CUDA events" if side.on_gpu else "each launch timed"
    notes = [
        f"kernel times summed ({how}); graph.run with copies {run_s:.3f} s",
        f"max error vs numpy {error:.1e}",
    ]
    if error > 1e-3:
        return [
            *rows,
            {"case": f"{title}: inference", "status": "error", "notes": "WRONG VALUES: " + "; ".join(notes)},
        ]
    if side.torch is None:
        return [
            *rows,
            row(f"{title}: inference", ours_s, notes="; ".join([*notes, "torch: " + side.missing["torch"]])),
        ]
    torch = side.torch
    side.primary_context()
    forward = torch_forward(net, torch, side.torch_device)
    tensor = torch.from_numpy(x).to(side.torch_device)
    with torch.inference_mode():
        peer_error = float(np.abs(forward(tensor).cpu().numpy() - expected).max())
        peer_s = time_torch(side, lambda: forward(tensor))
    notes.append(f"torch eager float32 (no TF32) error {peer_error:.1e}")
    return [
        *rows,
        row(f"{title}: inference", ours_s, peer=side.torch_version(), peer_s=peer_s, notes="; ".join(notes)),
    ]


# --------------------------------------------------------------------------------------------
# the module


def _selected() -> list[str]:
    chosen = [k for k in os.environ.get("UOPVIZ_GPU_BENCH_CASES", ",".join(CASE_KEYS)).split(",") if k]
    unknown = [k for k in chosen if k not in CASE_KEYS]
    if unknown:
        raise ValueError(
            f"UOPVIZ_GPU_BENCH_CASES names unknown cases {unknown}; known: {', '.join(CASE_KEYS)}"
        )
    return chosen


def run_all(side: Side | None, shrink: int = 1) -> list[dict]:
    """Every selected case: predictions always, measurements on ``side`` (None: none, each case a
    skipped row carrying ``skip_reason``)."""
    budget = float(os.environ.get("UOPVIZ_GPU_BENCH_BUDGET_S", "300"))
    started = time.perf_counter()
    found = cases(shrink)
    spec = _INFO.get("model_gpu")
    rows: list[dict] = []
    if side is not None:
        rows += [{"case": f"{peer} peer", "status": "skipped", "notes": f"skipped: {reason}"}
                 for peer, reason in side.missing.items()]  # fmt: skip
    beam = os.environ.get("UOPVIZ_GPU_BEAM", "") not in ("", "0")
    for key in _selected():
        over = time.perf_counter() - started > budget
        why = _INFO.get("skip_reason", "") if side is None else f"the budget of {budget:g} s is spent"
        try:
            if key == "resnet50":
                rows += resnet_rows(None if over else side, why, shrink)
                continue
            case = found[key]
            rendered = _compile_ours(case, [], "cuda", "heuristic", build=False)
            rows += _prediction_rows(case.title, predicted := predictions(list(rendered.kernels)), case)
            if side is None or over:
                rows.append({"case": case.title, "status": "skipped", "notes": f"skipped: {why}"})
                continue
            rows += measure_case(case, side, predicted, spec)
            if beam and key == "gemm32":
                rows += measure_case(case, side, predicted, spec, opts="beam")
        except Exception as error:  # noqa: BLE001 - one case's failure is its own row
            rows.append(
                {"case": key, "status": "error", "notes": f"{type(error).__name__}: {str(error)[:500]}"}
            )
        gc.collect()
    return rows


_INFO: dict[str, Any] = {}


def _nvidia_smi() -> dict[str, str]:
    try:
        query = ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
        out = subprocess.run(query, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as error:
        return {"nvidia_smi": f"unavailable: {error}"}
    if out.returncode != 0:
        return {"nvidia_smi": f"failed: {(out.stderr or out.stdout).strip()[:200]}"}
    name, driver, memory = (part.strip() for part in out.stdout.splitlines()[0].split(","))
    return {"gpu": name, "driver": driver, "memory": memory}


def _cuda_versions() -> dict[str, str]:
    found = {}
    library = ctypes.util.find_library("cuda") or "libcuda.so.1"
    try:
        version = ctypes.c_int()
        if ctypes.CDLL(library).cuDriverGetVersion(ctypes.byref(version)) == 0:
            found["cuda_driver_api"] = f"{version.value // 1000}.{version.value % 1000 // 10}"
    except OSError:
        pass
    from uopviz.backends.cuda import compiler_version

    found["uopviz_compiler"] = (
        compiler_version().strip().splitlines()[-1] if compiler_version().strip() else "none"
    )
    return found


def run() -> list[dict]:
    """The rows (see the module docstring)."""
    _INFO.clear()
    reason = cuda_missing()
    if reason is not None:
        _INFO.update({"gpu": None, "skip_reason": f"no CUDA device ({reason})"})
        return run_all(None)
    from uopviz.backends import get

    side = Side("cuda", "cuda", "CUDA")
    side.load_peers()
    device = get("cuda").device.removeprefix("CUDA:")
    _INFO.update({"gpu": device, "model_gpu": gpu_spec_name(device), **_nvidia_smi(), **_cuda_versions()})
    if side.torch is not None:
        _INFO["torch"] = f"{side.torch.__version__} (CUDA {side.torch.version.cuda})"
    if side.tinygrad is not None:
        _INFO["tinygrad"] = side.tinygrad_version()
    return run_all(side)


def machine_info() -> dict[str, Any]:
    """The GPU (name, the model's spec for it, driver, CUDA versions) and the peers' versions."""
    return dict(_INFO)


def dry_run(shrink: int = 16) -> list[dict]:
    """The measuring code on the CPU (C backend; torch and tinygrad on the CPU) at ``1/shrink``
    scale: exercises everything but the CUDA calls."""
    side = Side("c", "cpu", "CPU")
    side.load_peers()
    _INFO.clear()
    return run_all(side, shrink)


if __name__ == "__main__" and sys.argv[1:2] == ["dry-run"]:
    sys.path.insert(0, str(BENCH_DIR))
    sys.path.insert(0, str(BENCH_DIR.parent))
    import run as harness

    print(harness.format_table([harness.normalize("gpu", r) for r in dry_run()]))
