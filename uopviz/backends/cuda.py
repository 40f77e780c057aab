"""The CUDA backend: CUDA C++ (rendered by :mod:`uopviz.backends.cuda_render`, the C-family renderer
with CUDA's dialect and tensor-core instruction) compiled and run where an NVIDIA GPU is.

Compiling and running: the source is compiled for the GPU's exact architecture in this process by
NVRTC (:mod:`uopviz.backends.nvrtc`: the toolkit's ``libnvrtc`` or the ``nvidia-cuda-nvrtc``
wheel's), else by an ``nvcc -cubin`` process; cubins are cached on disk by source, architecture
and compiler version.  The cubin is loaded and launched through the CUDA driver API (``libcuda``, via
ctypes, so no Python package is needed).  Without a GPU the backend is unavailable, with the
reason, but ``render`` still works, and ``compile_to_ptx`` checks a source with NVRTC or nvcc
wherever either exists.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from uopviz.backends.base import (
    COMPILED_ALU_OPS,
    Backend,
    BackendUnavailable,
    CompiledKernel,
    CompileError,
    KernelMeta,
    Launch,
    RenderError,
    SourceMap,
)
from uopviz.backends.cache import cached_file, content_key
from uopviz.backends.cuda_render import CUDA_DIALECT, MMA_M16N8K16_F16_F32, CUDARenderer
from uopviz.backends.gpu_rules import GPU_EXTRA_RULES
from uopviz.backends.nvrtc import find_nvrtc, nvrtc_compile, nvrtc_version
from uopviz.core.errors import UopvizError
from uopviz.core.uop import UOp

# ---------------------------------------------------------------------------------------------
# compilers


@functools.cache
def find_nvcc() -> str | None:
    """``$UOPVIZ_NVCC``, else nvcc on PATH, else ``$CUDA_HOME/bin/nvcc``; None when there is none."""
    override = os.environ.get("UOPVIZ_NVCC")
    if override:
        return shutil.which(override)
    found = shutil.which("nvcc")
    if found:
        return found
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
    candidate = Path(home) / "bin" / "nvcc"
    return str(candidate) if candidate.exists() else None


def run_nvcc(source: str, output: str, arch: str, extra: Sequence[str] = ()) -> bytes:
    """Compile ``source`` with nvcc to ``output`` (``ptx`` or ``cubin``) for ``arch`` (``sm_80``)."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise BackendUnavailable("nvcc not found (install the CUDA toolkit or set UOPVIZ_NVCC)")
    with tempfile.TemporaryDirectory(prefix="uopviz-nvcc-") as folder:
        source_path = Path(folder) / "kernel.cu"
        target = Path(folder) / f"kernel.{output}"
        source_path.write_text(source)
        command = [nvcc, f"-{output}", f"-arch={arch}", "-O3", *extra, str(source_path), "-o", str(target)]
        result = subprocess.run(command, capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            raise CompileError(
                "cuda",
                KernelMeta.from_source(source, "cuda").name,
                (result.stderr or result.stdout).strip(),
                source,
            )
        return target.read_bytes()


def compile_to_ptx(source: str, arch: str = "sm_80") -> str:
    """The PTX of a rendered CUDA source (NVRTC, else ``nvcc -ptx``): checks that the source compiles,
    no GPU needed."""
    if find_nvrtc() is not None:
        return nvrtc_compile(source, arch, "ptx").decode()
    return run_nvcc(source, "ptx", arch).decode()


def compile_to_cubin(source: str, arch: str, name: str = "kernel") -> bytes:
    """The cubin of a rendered CUDA source for ``arch`` (``sm_90``): NVRTC in this process where it is
    found (a JIT's way: no process per kernel), else nvcc."""
    if find_nvrtc() is not None:
        return nvrtc_compile(source, arch, "cubin", name)
    return run_nvcc(source, "cubin", arch)


@functools.cache
def compiler_version() -> str:
    """The version of the compiler :func:`compile_to_cubin` uses (part of the cubin cache's key)."""
    if find_nvrtc() is not None:
        return nvrtc_version()
    nvcc = find_nvcc()
    if nvcc is None:
        return ""
    return subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout


# ---------------------------------------------------------------------------------------------
# the driver API through ctypes


class CUDAError(UopvizError, RuntimeError):
    """A CUDA driver call failed."""


class _Driver:
    """The few CUDA driver functions a kernel launch needs (libcuda via ctypes)."""

    def __init__(self, library: ctypes.CDLL):
        self.lib = library
        self.check(library.cuInit(0), "cuInit")
        count = ctypes.c_int()
        self.check(library.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
        if count.value == 0:
            raise CUDAError("the CUDA driver sees no GPU")
        self.device = ctypes.c_int()
        self.check(library.cuDeviceGet(ctypes.byref(self.device), 0), "cuDeviceGet")
        self.context = ctypes.c_void_p()
        self.check(
            library.cuDevicePrimaryCtxRetain(ctypes.byref(self.context), self.device),
            "cuDevicePrimaryCtxRetain",
        )
        self.activate()
        name = ctypes.create_string_buffer(256)
        self.check(library.cuDeviceGetName(name, 256, self.device), "cuDeviceGetName")
        self.name = name.value.decode()
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.check(
            library.cuDeviceGetAttribute(ctypes.byref(major), 75, self.device), "compute capability major"
        )
        self.check(
            library.cuDeviceGetAttribute(ctypes.byref(minor), 76, self.device), "compute capability minor"
        )
        self.arch = f"sm_{major.value}{minor.value}"
        library.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        library.cuMemcpyHtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
        library.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
        library.cuMemFree_v2.argtypes = [ctypes.c_uint64]
        library.cuLaunchKernel.argtypes = (
            [ctypes.c_void_p]
            + [ctypes.c_uint] * 6
            + [ctypes.c_uint, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
        )

    def activate(self) -> None:
        self.check(self.lib.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def check(self, status: int, what: str) -> None:
        if status != 0:
            text = ctypes.c_char_p()
            self.lib.cuGetErrorString(status, ctypes.byref(text))
            raise CUDAError(f"{what} failed: {text.value.decode() if text.value else status}")


@functools.cache
def _driver() -> _Driver | str:
    """The driver, or why there is none."""
    path = ctypes.util.find_library("cuda") or "libcuda.so.1"
    try:
        library = ctypes.CDLL(path)
    except OSError:
        return "no NVIDIA driver (libcuda) on this machine"
    try:
        return _Driver(library)
    except (CUDAError, AttributeError) as error:
        return f"the CUDA driver cannot run kernels here: {error}"


class CUDALaunch(Launch):
    """Device copies of the arguments; ``run`` launches and times with CUDA events."""

    def __init__(self, kernel: CUDACompiledKernel, arrays: Sequence[np.ndarray]):
        driver = kernel.driver
        driver.activate()
        self.kernel, self.driver, self.arrays = kernel, driver, list(arrays)
        self.pointers: list[ctypes.c_uint64] = []
        for array in arrays:
            pointer = ctypes.c_uint64()
            driver.check(driver.lib.cuMemAlloc_v2(ctypes.byref(pointer), max(array.nbytes, 1)), "cuMemAlloc")
            if array.nbytes:
                driver.check(
                    driver.lib.cuMemcpyHtoD_v2(pointer, array.ctypes.data, array.nbytes), "cuMemcpyHtoD"
                )
            self.pointers.append(pointer)
        self.parameters = (ctypes.c_void_p * len(self.pointers))(
            *[ctypes.cast(ctypes.pointer(p), ctypes.c_void_p) for p in self.pointers]
        )
        self.start, self.stop = ctypes.c_void_p(), ctypes.c_void_p()
        driver.check(driver.lib.cuEventCreate(ctypes.byref(self.start), 0), "cuEventCreate")
        driver.check(driver.lib.cuEventCreate(ctypes.byref(self.stop), 0), "cuEventCreate")

    def run(self) -> float:
        lib, meta = self.driver.lib, self.kernel.meta
        self.driver.check(lib.cuEventRecord(self.start, None), "cuEventRecord")
        self.driver.check(
            lib.cuLaunchKernel(
                self.kernel.function, *meta.global_size, *meta.local_size, 0, None, self.parameters, None
            ),
            "cuLaunchKernel",
        )
        self.driver.check(lib.cuEventRecord(self.stop, None), "cuEventRecord")
        self.driver.check(lib.cuEventSynchronize(self.stop), "cuEventSynchronize")
        milliseconds = ctypes.c_float()
        self.driver.check(
            lib.cuEventElapsedTime(ctypes.byref(milliseconds), self.start, self.stop), "cuEventElapsedTime"
        )
        return milliseconds.value * 1e-3

    def read_back(self) -> None:
        for param, array, pointer in zip(self.kernel.params, self.arrays, self.pointers):
            if param.written and array.nbytes:
                self.driver.check(
                    self.driver.lib.cuMemcpyDtoH_v2(array.ctypes.data, pointer, array.nbytes), "cuMemcpyDtoH"
                )

    def __del__(self) -> None:
        for pointer in getattr(self, "pointers", []):
            self.driver.lib.cuMemFree_v2(pointer)


@dataclass(kw_only=True)
class CUDACompiledKernel(CompiledKernel):
    """A loaded CUDA module and its kernel function."""

    driver: _Driver = field(repr=False)
    module: ctypes.c_void_p = field(repr=False)
    function: ctypes.c_void_p = field(repr=False)

    def prepare(self, *arrays: np.ndarray) -> Launch:
        return CUDALaunch(self, self.check_arguments(arrays))


class CUDABackend(Backend):
    """CUDA C++ on an NVIDIA GPU (rendering works everywhere)."""

    name = "cuda"
    # EXP2 stays ISel's polynomial, as on the CPUs: the GPU's exp2f (<= 2 ulp) under exp's split
    # measured 2.56 ulp for float32 exp on the H200 (tests/backends/test_accuracy.py, gpu-check.sh),
    # over the 2 ulp docs/accuracy.md promises, for 7 % of softmax 4096² (162 -> 150 us)
    supported_ops = COMPILED_ALU_OPS
    vector_widths = ()
    has_local = True
    has_threads = False
    tensor_cores = (MMA_M16N8K16_F16_F32,)
    extra_rules = GPU_EXTRA_RULES  # GLOBAL and LOCAL ranges become thread indices

    def __init__(self) -> None:
        self.renderer = CUDARenderer(self.tensor_cores)
        self._compiled: dict[str, CUDACompiledKernel] = {}

    def unavailable_reason(self) -> str | None:
        driver = _driver()
        if isinstance(driver, str):
            return driver
        if find_nvrtc() is None and find_nvcc() is None:
            return ("a GPU is present but neither NVRTC nor nvcc is (install the CUDA toolkit or the "
                    "nvidia-cuda-nvrtc wheel, or set UOPVIZ_NVRTC / UOPVIZ_NVCC)")
        return None

    @property
    def device(self) -> str:
        driver = _driver()
        return "CUDA:none" if isinstance(driver, str) else f"CUDA:{driver.name}"

    def render(self, linear: UOp) -> str:
        return self.renderer.render(linear)

    def render_mapped(self, linear: UOp) -> tuple[str, SourceMap]:
        return self.renderer.render_mapped(linear)

    def compile(self, source: str, name: str) -> CUDACompiledKernel:
        self.require()
        driver = _driver()
        assert not isinstance(driver, str)
        key = content_key(source, driver.arch, compiler_version())
        cached = self._compiled.get(key)
        if cached is not None:
            return cached
        meta = KernelMeta.from_source(source, self.name)
        start = time.perf_counter()

        def build(target: Path) -> None:
            target.write_bytes(compile_to_cubin(source, driver.arch, meta.name))

        path, was_cached = cached_file("cuda", key, ".cubin", build)
        driver.activate()
        module, function = ctypes.c_void_p(), ctypes.c_void_p()
        image = path.read_bytes()
        driver.check(driver.lib.cuModuleLoadData(ctypes.byref(module), image), "cuModuleLoadData")
        driver.check(
            driver.lib.cuModuleGetFunction(ctypes.byref(function), module, meta.name.encode()),
            "cuModuleGetFunction",
        )
        kernel = CUDACompiledKernel.built(
            self.name, meta, source, start, {"cached": was_cached}, driver=driver, module=module,
            function=function,
        )
        self._compiled[key] = kernel
        return kernel


# the renderer's names are re-exported: the backend's public module names them as before the split
__all__ = ["CUDA_DIALECT", "CUDABackend", "CUDARenderer", "MMA_M16N8K16_F16_F32", "RenderError",
           "compile_to_cubin", "compile_to_ptx", "compiler_version"]
