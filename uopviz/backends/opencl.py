"""The OpenCL backend: OpenCL C rendered by the shared C-family renderer, built and run with pyopencl.

GPU indices come from SPECIAL uops: ``gidxN`` is ``get_group_id(N)`` (``get_global_id(N)`` when the
kernel has no ``lidx``: then the runtime may choose the workgroup size), ``lidxN`` is
``get_local_id(N)`` and ``idxN`` is ``get_global_id(N)``.  The launch sizes are their bounds:
``global = groups × local``.  LOCAL buffers are ``__local`` arrays at the top of the kernel and
BARRIER is ``barrier(CLK_LOCAL_MEM_FENCE)``.  Vector lanes use OpenCL's vector types
(``float4``, ``vload4``/``vstore4``, ``.s0``…); a vector load gated lane by lane (zero padding) is
``select(alt, vloadN(...), mask)`` where the vector lies inside the buffer.  Bool buffers are
``uchar`` (OpenCL forbids bool pointers), bfloat16 buffers ``ushort``.

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
from uopviz.backends.cfamily import CStyleRenderer
from uopviz.backends.cfamily_dialect import C_COMPARISONS, MATH_LIBRARY, CDialect
from uopviz.backends.cfamily_state import Address
from uopviz.backends.gpu_rules import GPU_EXTRA_RULES
from uopviz.backends.target import LEVELS, CPUTarget, cpu_target, resolve_target
from uopviz.core.dtype import DType, dtypes
from uopviz.core.ops import GroupOp, Ops
from uopviz.core.uop import UOp

_HEX_LANES = "0123456789abcdef"


def opencl_dialect(has_fp16: bool = True, has_fp64: bool = True) -> CDialect:
    """OpenCL C 1.2 on a device with or without ``cl_khr_fp16`` / ``cl_khr_fp64``: without fp16, half
    values live in float variables (``vload_half``/``vstore_half`` read and write them)."""
    includes = []
    if has_fp16:
        includes.append("#pragma OPENCL EXTENSION cl_khr_fp16 : enable")
    if has_fp64:
        includes.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
    return CDialect(
        name="opencl",
        scalar_types={
            "bool": "bool",
            "int8": "char",
            "int16": "short",
            "int32": "int",
            "int64": "long",
            "uint8": "uchar",
            "uint16": "ushort",
            "uint32": "uint",
            "uint64": "ulong",
            "float16": "half" if has_fp16 else "float",
            "bfloat16": "float",
            "float32": "float",
            "float64": "double",
            "index": "long",
        },
        # OpenCL forbids bool pointers; half pointers need no extension (vload_half reads them)
        memory_types={"bool": "uchar", "bfloat16": "ushort", "float16": "half"},
        held_as_float=frozenset({"bfloat16"} if has_fp16 else {"bfloat16", "float16"}),
        kernel_prefix="__kernel void",
        global_qualifier="__global ",
        long_suffix="L",
        includes=tuple(includes),
        special_indices={
            "gidx": "get_group_id({dim})",
            "gidx_alone": "get_global_id({dim})",  # no lidx: the runtime may choose the workgroup size
            "lidx": "get_local_id({dim})",
            "idx": "get_global_id({dim})",
        },
        barrier="barrier(CLK_LOCAL_MEM_FENCE);",
        local_qualifier="__local ",
        locals_at_top=True,
        native_vector_counts=(2, 3, 4, 8, 16),
        other_vector_counts="struct",
        native_vector_ops=frozenset(
            {Ops.ADD, Ops.SUB, Ops.MUL, Ops.DIV, Ops.NEG, Ops.AND, Ops.OR, Ops.XOR, Ops.RECIP, Ops.MULACC}
        ),
        vector_name="{element}{count}",
        vector_bool_element="char",
        lane="{vector}.s{hex}",
        vector_literal="(({type})({items}))",
        vector_convert="convert_{type}({value})",
        vector_wrapping_negate="as_{type}(-as_{unsigned}({a}))",
        vector_wrapping_binary="as_{type}(as_{unsigned}({a}) {op} as_{unsigned}({b}))",
        float16_constant="((half){})" if has_fp16 else "{}",
        float_specials={
            (precision, kind): f"(({{type}}){text})"
            for precision in ("float32", "float64")
            for kind, text in (("nan", "NAN"), ("inf", "INFINITY"), ("-inf", "-INFINITY"))
        },
        typed_specials=True,
        math_functions=MATH_LIBRARY,
        math_float32_suffix="",  # the math functions are overloaded
        bool_element_value="({} != 0)",
        bool_element_store="(uchar)({})",
        vector_load="vload{count}(0, {pointer})",
        vector_store="vstore{count}({value}, 0, {pointer});",
        vector_bool_load="as_char{count}({value})",  # bool vectors are char lanes, stored as uchar
        vector_bool_store="as_uchar{count}({value})",
        reinterpret="as_{type}({value})",
        bits_as_float="as_float({})",
        float_as_bits="as_uint({})",
    )


class OpenCLRenderer(CStyleRenderer):
    """OpenCL C 1.2 (runs on OpenCL 1.2 and 3.0 devices): :func:`opencl_dialect` for the device's
    extensions, and code for what has another structure in OpenCL: half values held in floats
    (``vload_half``/``vstore_half``), ``vloadN``/``vstoreN``, ``select`` and ``as_`` reinterpretations."""

    def __init__(self, tensor_cores=(), has_fp16: bool = True, has_fp64: bool = True):
        super().__init__(tensor_cores)
        self.has_fp16, self.has_fp64 = has_fp16, has_fp64
        self.dialect = opencl_dialect(has_fp16, has_fp64)

    def round_to(self, expression: str, dtype: DType) -> str:
        if dtype.scalar is not dtypes.float16:
            return super().round_to(expression, dtype)
        helper = self.helper(
            "round_half",
            lambda: (
                f"{self.dialect.helper_prefix} float round_half(float x) {{ "
                f"ushort bits; vstore_half(x, 0, (half*)&bits); "
                f"return vload_half(0, (half*)&bits); }}"
            ),
        )
        return f"{helper}({expression})"

    def held_bits(self, lines: list[str], value: str, dtype: DType) -> str:
        if dtype is not dtypes.float16:
            return super().held_bits(lines, value, dtype)
        name = self._state.fresh("bits")  # vstore_half writes the 16 bits where a pointer points
        lines += [f"ushort {name};", f"vstore_half({value}, 0, (half*)&{name});"]
        return name

    def held_value(self, lines: list[str], bits: str, dtype: DType) -> str:
        if dtype is not dtypes.float16:
            return super().held_value(lines, bits, dtype)
        return f"vload_half(0, (half*)&{bits})"

    def load_element(self, buffer: str, offset: str, dtype: DType) -> str:
        if self.held_as_float(dtype) and dtype.scalar is dtypes.float16:
            return f"vload_half({offset}, {buffer})"
        return super().load_element(buffer, offset, dtype)

    def store_element(self, buffer: str, offset: str, value: str, dtype: DType) -> str:
        if self.held_as_float(dtype) and dtype.scalar is dtypes.float16:
            return f"vstore_half({value}, {offset}, {buffer});"
        return super().store_element(buffer, offset, value, dtype)

    def vector_expression(self, u: UOp, operands: list[str]) -> str | None:
        """Whole-vector comparisons, WHERE and MAX with OpenCL's relational operators and ``select``:
        lane-by-lane code (``(char8)((a.s0 < b.s0), ...)``) kept pocl from vectorising the
        transcendental decompositions.  OpenCL compares vectors to -1/0 lanes of the same-width signed
        integer type; bool vectors hold 0/1 ``char`` lanes, so masks are converted both ways."""
        op, dtype = u.op, u.dtype
        count = dtype.count
        sources = [s.dtype for s in u.src]
        if (
            self.struct_vector(dtype)
            or any(d.count != count or self.held_as_float(d.scalar) or d.scalar is dtypes.index
                   for d in sources)
        ):
            return None
        if op in GroupOp.COMPARISON and op in C_COMPARISONS and not sources[0].scalar.is_bool:
            return f"convert_char{count}(-({operands[0]} {C_COMPARISONS[op]} {operands[1]}))"
        if op is Ops.WHERE and not sources[1].scalar.is_bool:
            return self.select_lanes(operands[0], operands[1], operands[2], sources[1])
        if op is Ops.MAX and dtype.scalar.is_float:
            a, b = operands  # numpy's maximum: a NaN in the first operand wins
            return f"select({b}, {a}, ({a} != {a}) | ({a} > {b}))"
        return None

    def selects_lanes(self, dtype: DType) -> bool:
        """OpenCL vector types of numbers (not structs of more than 16 lanes, not values held in
        floats, not bools, whose vectors are char lanes converted on load)."""
        scalar = dtype.scalar
        if self.struct_vector(dtype) or self.held_as_float(scalar):
            return False
        return not (scalar.is_bool or scalar is dtypes.index)

    def select_lanes(self, mask: str, if_true: str, if_false: str, dtype: DType) -> str:
        """``select`` takes a mask of signed lanes as wide as the values' lanes and picks its second
        operand where a lane's top bit is set: bool lanes (0/1 chars) are negated to 0/-1."""
        selector = f"(-convert_{self._mask_element(dtype)}{dtype.count}({mask}))"
        return f"select({if_false}, {if_true}, {selector})"

    @staticmethod
    def _mask_element(dtype: DType) -> str:
        """The signed integer element ``select`` takes as the mask for values of ``dtype``."""
        return {1: "char", 2: "short", 4: "int", 8: "long"}[dtype.scalar.itemsize]

    def local_declaration(self, dtype: DType, name: str, size: int) -> str:
        if self.held_as_float(dtype) and dtype.scalar is dtypes.float16:
            # without cl_khr_fp16 no half variable may be declared, arrays included; a pointer to half
            # may be, and vload_half/vstore_half read and write through it
            return (f"__local ushort {name}_bits[{size * dtype.count}]; "
                    f"__local half* {name} = (__local half*){name}_bits;")  # fmt: skip
        return super().local_declaration(dtype, name, size)

    def vector_load(self, address: Address) -> str:
        """Half vectors held in floats are read with ``vload_halfN``."""
        dtype = address.dtype
        if self.held_as_float(dtype) and dtype.scalar is dtypes.float16 and not self.struct_vector(dtype):
            return f"vload_half{dtype.count}(0, {address.buffer} + {address.offset})"
        return super().vector_load(address)

    def vector_store(self, address: Address, value: str) -> str:
        """Half vectors held in floats are written with ``vstore_halfN``."""
        dtype = address.dtype
        if self.held_as_float(dtype) and dtype.scalar is dtypes.float16 and not self.struct_vector(dtype):
            return f"vstore_half{dtype.count}({value}, 0, {address.buffer} + {address.offset});"
        return super().vector_store(address, value)


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


class OpenCLCompiledKernel(CompiledKernel):
    """A built OpenCL program and its kernel."""

    def __init__(
        self,
        backend: str,
        meta: KernelMeta,
        source: str,
        compile_s: float,
        extra: dict[str, Any],
        program: Any,
    ):
        super().__init__(backend, meta, source, compile_s, extra)
        self.program = program
        self.program_kernel = getattr(program, meta.name)

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
    def max_local_size(self) -> int:
        """The device's largest workgroup (0 when there is no device)."""
        found = _opencl()
        return 0 if isinstance(found, str) else int(found[1].max_work_group_size)

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
        kernel = OpenCLCompiledKernel(self.name, meta, source, time.perf_counter() - start, info, program)
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


__all__ = ["OpenCLBackend", "OpenCLRenderer", "opencl_dialect"]
