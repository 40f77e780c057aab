"""The CUDA backend: CUDA C++ rendered by the shared C-family renderer; runs where an NVIDIA GPU is.

``gidxN``/``lidxN``/``idxN`` SPECIALs are ``blockIdx``/``threadIdx``/global indices, LOCAL buffers are
``__shared__`` arrays, BARRIER is ``__syncthreads()``.  CUDA has no vector arithmetic, so the
backend asks for devectorized programs (``vector_widths = ()``); the vectors that remain (WMMA
operands, or any vector a hand-made program holds) are small structs (``float32x4 {float v[4];}``)
handled lane by lane.

WMMA is real tensor-core code: the ``mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32`` PTX
instruction, one warp (32 lanes) per 16×8×16 tile, each lane holding the fragment elements the
PTX ISA assigns it (``TensorCore.layout_*`` records that assignment).  It needs sm_80 or newer.

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
from pathlib import Path
from typing import Any

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
    TensorCore,
)
from uopviz.backends.cache import cached_file, content_key
from uopviz.backends.cfamily import CStyleRenderer
from uopviz.backends.cfamily_dialect import MATH_LIBRARY, CDialect
from uopviz.backends.cfamily_state import CFamilyRenderState, render_wmma_scalar
from uopviz.backends.gpu_rules import GPU_EXTRA_RULES
from uopviz.backends.nvrtc import find_nvrtc, nvrtc_compile, nvrtc_version
from uopviz.core.dtype import dtypes
from uopviz.core.errors import UopvizError
from uopviz.core.uop import UOp

# ---------------------------------------------------------------------------------------------
# the tensor core: PTX mma.m16n8k16 with f16 inputs and f32 accumulators


def _mma_m16n8k16_layouts() -> tuple[tuple, tuple, tuple]:
    """Fragment layouts of mma.m16n8k16 (.f16 A/B, .f32 C/D) as the PTX ISA defines them:
    ``group = lane >> 2``, ``thread = lane % 4``."""
    a, b, c = [], [], []
    for lane in range(32):
        group, thread = lane >> 2, lane % 4
        for i in range(8):  # A is 16x16 (m, k), 8 halves per lane
            row = group + (8 if (i >> 1) & 1 else 0)
            col = thread * 2 + (i & 1) + (8 if i >= 4 else 0)
            a.append((row, col))
        for i in range(4):  # B is 16x8 (k, n), 4 halves per lane
            b.append((thread * 2 + (i & 1) + (8 if i >= 2 else 0), group))
        for i in range(4):  # C/D are 16x8 (m, n), 4 floats per lane
            c.append((group + (8 if i >= 2 else 0), thread * 2 + (i & 1)))
    return tuple(a), tuple(b), tuple(c)


MMA_M16N8K16_F16_F32 = TensorCore(
    "cuda_mma_m16n8k16_f16_f32", (16, 8, 16), dtypes.float16, dtypes.float32, 32, *_mma_m16n8k16_layouts()
)


# ---------------------------------------------------------------------------------------------
# the renderer


#: CUDA C++ for NVRTC or nvcc: no vector arithmetic (vectors are small structs handled lane by lane),
#: half through cuda_fp16.h's conversions
CUDA_DIALECT = CDialect(
    name="cuda",
    scalar_types={
        "bool": "bool",
        "int8": "signed char",
        "int16": "short",
        "int32": "int",
        "int64": "long long",
        "uint8": "unsigned char",
        "uint16": "unsigned short",
        "uint32": "unsigned int",
        "uint64": "unsigned long long",
        "float16": "half",
        "bfloat16": "float",
        "float32": "float",
        "float64": "double",
        "index": "long long",
    },
    # 64-bit index arithmetic costs a GPU two 32-bit instructions for each add, several for a multiply
    narrow_index_type="int",
    memory_types={"bfloat16": "unsigned short"},
    kernel_prefix='extern "C" __global__ void',
    helper_prefix="__device__ static inline",
    restrict="__restrict__",
    includes=("#include <cuda_fp16.h>",),
    special_indices={
        "gidx": "blockIdx.{axis}",
        "gidx_alone": "blockIdx.{axis}",
        "lidx": "threadIdx.{axis}",
        "idx": "(blockIdx.{axis} * blockDim.{axis} + threadIdx.{axis})",
    },
    barrier="__syncthreads();",
    local_qualifier="__shared__ ",
    native_vector_counts=(1, 2, 3, 4, 5, 6, 7, 8, 16, 32, 64, 128, 256),
    other_vector_counts="exact",
    native_vector_ops=frozenset(),
    vector_name="{scalar}x{count}",
    vector_bool_element="bool",
    vector_typedef="typedef struct __align__({align}) {{ {element} v[{lanes}]; }} {name};",
    lane="{vector}.v[{index}]",
    vector_literal="{type}{{{{{items}}}}}",
    float16_constant="__float2half({})",
    float_specials={
        ("float32", "nan"): "__int_as_float(0x7fc00000)",
        ("float32", "inf"): "__int_as_float(0x7f800000)",
        ("float32", "-inf"): "__int_as_float(0xff800000)",
        ("float64", "nan"): "__longlong_as_double(0x7ff8000000000000LL)",
        ("float64", "inf"): "__longlong_as_double(0x7ff0000000000000LL)",
        ("float64", "-inf"): "__longlong_as_double(0xfff0000000000000LL)",
    },
    math_functions=MATH_LIBRARY,
    math_float16_call="__float2half({})",
    math_float16_argument="__half2float({})",
    float16_widen="__half2float({})",
    float16_narrow="__float2half((float){})",
    element_vectors=True,
    copy="memcpy",
    bits_as_float="__uint_as_float({})",
    float_as_bits="__float_as_uint({})",
)


class CUDARenderer(CStyleRenderer):
    """CUDA C++ for NVRTC or nvcc (:data:`CUDA_DIALECT`), with code for what has another structure
    in CUDA: WMMA as the PTX ``mma`` instruction."""

    dialect = CUDA_DIALECT

    def render_wmma(
        self, state: CFamilyRenderState, u: UOp, config: TensorCore, a: str, b: str, c: str
    ) -> None:
        if config.threads == 1:
            render_wmma_scalar(self, state, u, config, a, b, c)
            return
        if config != MMA_M16N8K16_F16_F32:
            raise state.fail(u, f"the cuda backend has no instruction for tensor core {config.name}")
        if (u.src[0].dtype, u.src[1].dtype, u.src[2].dtype) != (
            dtypes.float16.vec(8),
            dtypes.float16.vec(4),
            dtypes.float32.vec(4),
        ):
            raise state.fail(
                u,
                f"{config.name} takes half8, half4 and float4 fragments, got "
                f"{', '.join(s.dtype.name for s in u.src)}",
            )
        a_type, b_type, c_type = (self.vector_type(s.dtype) for s in u.src)
        prefix = self.dialect.helper_prefix
        helper = self.helper(
            "mma_m16n8k16_f16_f32",
            lambda: (
                f"{prefix} {c_type} mma_m16n8k16_f16_f32({a_type} a, {b_type} b, {c_type} c) {{\n"
                f"  const unsigned int* ar = reinterpret_cast<const unsigned int*>(&a);\n"
                f"  const unsigned int* br = reinterpret_cast<const unsigned int*>(&b);\n"
                f'  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {{%0, %1, %2, %3}}, '
                f'{{%4, %5, %6, %7}}, {{%8, %9}}, {{%0, %1, %2, %3}};"\n'
                f'      : "+f"(c.v[0]), "+f"(c.v[1]), "+f"(c.v[2]), "+f"(c.v[3])\n'
                f'      : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[0]), "r"(br[1]));\n'
                f"  return c;\n"
                f"}}"
            ),
        )
        state.assign(u, "wmma", f"{helper}({a}, {b}, {c})")


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


class CUDACompiledKernel(CompiledKernel):
    """A loaded CUDA module and its kernel function."""

    def __init__(
        self,
        backend: str,
        meta: KernelMeta,
        source: str,
        compile_s: float,
        extra: dict[str, Any],
        driver: _Driver,
        module: ctypes.c_void_p,
        function: ctypes.c_void_p,
    ):
        super().__init__(backend, meta, source, compile_s, extra)
        self.driver, self.module, self.function = driver, module, function

    def prepare(self, *arrays: np.ndarray) -> Launch:
        return CUDALaunch(self, self.check_arguments(arrays))


class CUDABackend(Backend):
    """CUDA C++ on an NVIDIA GPU (rendering works everywhere)."""

    name = "cuda"
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
        kernel = CUDACompiledKernel(
            self.name,
            meta,
            source,
            time.perf_counter() - start,
            {"cached": was_cached},
            driver,
            module,
            function,
        )
        self._compiled[key] = kernel
        return kernel


__all__ = ["CUDABackend", "CUDARenderer", "MMA_M16N8K16_F16_F32", "RenderError", "compile_to_cubin",
           "compile_to_ptx", "compiler_version"]
