"""The OpenCL backend: OpenCL C (rendered by :mod:`uopviz.backends.opencl_render`, the C-family
renderer with OpenCL's dialect) built and run with pyopencl.

Runs on the first OpenCL GPU, else the first CPU device (pocl here); ``$UOPVIZ_OPENCL_DEVICE``
picks another by a substring of its name.  Program binaries are cached on disk by a hash of the
source, device and driver.  Run times come from OpenCL profiling events (device time).
"""

from __future__ import annotations

import functools
import os
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from uopviz.backends.base import (
    COMPILED_ALU_OPS,
    Backend,
    CompiledKernel,
    CompileError,
    KernelMeta,
    Launch,
    SourceMap,
    cpu_tensor_cores,
)
from uopviz.backends.cache import content_key, read_cached_bytes
from uopviz.backends.gpu_rules import GPU_EXTRA_RULES
from uopviz.backends.opencl_render import OpenCLRenderer, opencl_dialect
from uopviz.backends.target import LEVELS, CPUTarget, cpu_target, resolve_target
from uopviz.core.dtype import DType, dtypes
from uopviz.core.uop import UOp

# ---------------------------------------------------------------------------------------------
# runtime


@functools.cache
def _opencl() -> tuple[Any, Any] | str:
    """``(pyopencl module, device)``, or a string saying why there is none."""
    # pocl compiles a CPU device's kernels with its own LLVM for the CPU named here, read once when
    # its devices are made: a named target level applies from then on (see ``device_target``)
    target = cpu_target()
    if not target.is_native and target.level is not None:
        os.environ.setdefault("POCL_LLVM_CPU_NAME", target.level)
    try:
        import pyopencl as cl
    except ImportError as error:
        return f"pyopencl is not installed ({error}); pip install pyopencl"
    try:
        platforms = cl.get_platforms()
    except cl.Error as error:
        return f"no OpenCL platform ({error}); install an ICD such as pocl-opencl-icd"
    devices = [d for p in platforms for d in p.get_devices()]
    if not devices:
        return "the OpenCL platforms have no devices"
    wanted = os.environ.get("UOPVIZ_OPENCL_DEVICE")
    if wanted:
        chosen = [d for d in devices if wanted.lower() in d.name.lower()]
        if not chosen:
            return f"no OpenCL device matches UOPVIZ_OPENCL_DEVICE={wanted!r}; there are " + ", ".join(
                d.name for d in devices
            )
        return cl, chosen[0]
    gpus = [d for d in devices if d.type & cl.device_type.GPU]
    return cl, (gpus or devices)[0]


@functools.cache
def _context_and_queue() -> tuple[Any, Any]:
    cl, device = _opencl()  # type: ignore[misc]
    context = cl.Context(devices=[device])
    queue = cl.CommandQueue(context, device)
    return context, queue


class OpenCLLaunch(Launch):
    """Device buffers made once from the host arrays; ``run`` enqueues and waits, timed by the wall clock
    around launch and wait, as the CPU backends time their calls (the event's own start-to-end leaves
    out the launch overhead the others include)."""

    def __init__(self, kernel: OpenCLCompiledKernel, arrays: Sequence[np.ndarray]):
        cl, _ = _opencl()  # type: ignore[misc]
        context, self.queue = _context_and_queue()
        self.kernel, self.arrays = kernel, list(arrays)
        flags = cl.mem_flags
        self.buffers = []
        for array in arrays:
            nbytes = max(array.nbytes, 1)
            if array.nbytes:
                self.buffers.append(cl.Buffer(context, flags.READ_WRITE | flags.COPY_HOST_PTR, hostbuf=array))
            else:
                self.buffers.append(cl.Buffer(context, flags.READ_WRITE, size=nbytes))
        meta = kernel.meta
        uses_local = "get_local_id" in kernel.source
        self.local = tuple(meta.local_size) if uses_local else None
        self.global_size = tuple(g * l for g, l in zip(meta.global_size, meta.local_size))
        self.program_kernel = kernel.program_kernel

    def run(self) -> float:
        start = time.perf_counter()
        event = self.program_kernel(self.queue, self.global_size, self.local, *self.buffers)
        event.wait()
        return time.perf_counter() - start

    def read_back(self) -> None:
        cl, _ = _opencl()  # type: ignore[misc]
        for param, array, buffer in zip(self.kernel.params, self.arrays, self.buffers):
            if param.written and array.nbytes:
                cl.enqueue_copy(self.queue, array, buffer)
        self.queue.finish()


@dataclass(kw_only=True)
class OpenCLCompiledKernel(CompiledKernel):
    """A built OpenCL program and its kernel."""

    program: Any = field(repr=False)
    #: the program's kernel, taken once: pyopencl makes a new kernel object (arguments unset) per lookup
    program_kernel: Any = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.program_kernel = getattr(self.program, self.meta.name)

    def prepare(self, *arrays: np.ndarray) -> Launch:
        return OpenCLLaunch(self, self.check_arguments(arrays))


class OpenCLBackend(Backend):
    """OpenCL C on the first OpenCL GPU, else the first CPU device (pocl)."""

    name = "opencl"
    supported_ops = COMPILED_ALU_OPS
    vector_widths = (2, 4, 8, 16)
    has_local = True
    #: bfloat16 is held in float variables and converted lane by lane (C has no bfloat16 vectors)
    scalar_dtypes = frozenset({dtypes.bfloat16})
    has_threads = False
    tensor_cores = cpu_tensor_cores()
    extra_rules = GPU_EXTRA_RULES  # GLOBAL and LOCAL ranges become thread indices

    def __init__(self) -> None:
        found = _opencl()
        fp16 = fp64 = True
        if not isinstance(found, str):
            extensions = found[1].extensions
            fp16, fp64 = "cl_khr_fp16" in extensions, "cl_khr_fp64" in extensions
        self.renderer = OpenCLRenderer(self.tensor_cores, has_fp16=fp16, has_fp64=fp64)
        self._compiled: dict[str, OpenCLCompiledKernel] = {}

    def supports_dtype(self, dtype: DType) -> bool:
        """float16 always (held in floats where the device lacks cl_khr_fp16); float64 with cl_khr_fp64."""
        if dtype.scalar is dtypes.float64:
            return self.renderer.has_fp64
        return True

    def unavailable_reason(self) -> str | None:
        found = _opencl()
        return found if isinstance(found, str) else None

    @property
    def device(self) -> str:
        found = _opencl()
        if isinstance(found, str):
            return "OpenCL:none"
        if self.runs_on_cpu:
            return f"OpenCL:{found[1].name} {self.device_target.device_tag}"
        return f"OpenCL:{found[1].name}"

    @property
    def runs_on_cpu(self) -> bool:  # type: ignore[override]
        """True on a CPU device (pocl): register tiles beat workgroup tiles there (measured on gemm
        512: 82 vs 20 GFLOP/s)."""
        found = _opencl()
        return not isinstance(found, str) and bool(found[1].type & found[0].device_type.CPU)

    @property
    def device_target(self) -> CPUTarget:
        """The CPU target a CPU device's kernels are compiled for: pocl reads it once, when the
        device is made (``POCL_LLVM_CPU_NAME``), so a later :func:`set_target` does not change it."""
        _opencl()
        name = os.environ.get("POCL_LLVM_CPU_NAME", "")
        return resolve_target(name if name in LEVELS else "native")

    @property
    def register_bytes(self) -> int:  # type: ignore[override]
        """The device target's SIMD register width on a CPU device, else the base default."""
        return self.device_target.vector_bytes if self.runs_on_cpu else Backend.register_bytes

    @property
    def vector_registers(self) -> int:  # type: ignore[override]
        """The device target's SIMD register count on a CPU device, else the base default."""
        return self.device_target.vector_registers if self.runs_on_cpu else Backend.vector_registers

    @property
    def l2_bytes(self) -> int:  # type: ignore[override]
        """The device target's L2 cache a core on a CPU device, else the base default."""
        return self.device_target.l2_bytes if self.runs_on_cpu else Backend.l2_bytes

    @property
    def l1_bytes(self) -> int:  # type: ignore[override]
        """The device target's L1 data cache a core on a CPU device, else the base default."""
        return self.device_target.l1_bytes if self.runs_on_cpu else Backend.l1_bytes

    def render(self, linear: UOp) -> str:
        return self.renderer.render(linear)

    def render_mapped(self, linear: UOp) -> tuple[str, SourceMap]:
        return self.renderer.render_mapped(linear)

    def compile(self, source: str, name: str) -> OpenCLCompiledKernel:
        self.require()
        cl, device = _opencl()  # type: ignore[misc]
        target_key = self.device_target.key if self.runs_on_cpu else ""
        key = content_key(
            source, device.name, device.version, device.driver_version, device.platform.version, target_key
        )
        cached = self._compiled.get(key)
        if cached is not None:
            return cached
        meta = KernelMeta.from_source(source, self.name)
        context, _ = _context_and_queue()
        start = time.perf_counter()
        options = ["-cl-std=CL1.2"]

        said: list[str] = []  # the build logs, from source (when not cached) and from the binary

        def build_binary() -> bytes:
            try:
                program, log = _build(cl.Program(context, source), device, options)
            except cl.Error as error:
                raise CompileError(self.name, name, str(error), source) from None
            said.append(log)
            return program.get_info(cl.program_info.BINARIES)[0]

        binary, was_cached = read_cached_bytes("opencl", key, ".bin", build_binary)
        try:
            program, log = _build(cl.Program(context, [device], [binary]), device, options)
        except cl.Error as error:
            raise CompileError(self.name, name, f"the cached binary does not load: {error}", source) from None
        said.append(log)
        info = {"cached": was_cached, "compiler_output": "\n".join(dict.fromkeys(filter(None, said)))}
        kernel = OpenCLCompiledKernel.built(self.name, meta, source, start, info, program=program)
        self._compiled[key] = kernel
        return kernel


def _build(program: Any, device: Any, options: list[str]) -> tuple[Any, str]:
    """``program`` built for ``device``, and what the compiler said (the kernel's
    ``compiler_output``) instead of a warning: pocl on an SSE-only CPU warns on every build that a
    float8 built-in's ABI changes, which in a notebook would bury the user's own output."""
    cl = _opencl()[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cl.CompilerWarning)
        built = program.build(options=options)
    return built, built.get_build_info(device, cl.program_build_info.LOG).strip()


# the renderer's names are re-exported: the backend's public module names them as before the split
__all__ = ["OpenCLBackend", "OpenCLRenderer", "opencl_dialect"]
