"""The LLVM backend: the IR of :mod:`uopviz.backends.llvm_renderer`, verified, optimised and
JIT-compiled by llvmlite for the host CPU.

Semantics follow kernel-ir.md as the C backend does (see :mod:`uopviz.backends.llvm_instructions`).
The only fast-math flag used is ``contract`` (fusing a multiply and an add into an FMA, which
changes no special value); a float ``MAX`` is the select C writes (NaN wins, like numpy).

THREAD ranges run on libgomp's threads where the renderer made them parallel; without libgomp they
run sequentially, and ``LLVMBackend.threads_note`` says why.

Compiled machine code is cached on disk by a hash of IR text, host CPU, features and LLVM version.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import struct
import time
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
    TargetsCPU,
    cpu_tensor_cores,
)
from uopviz.backends.cache import cache_dir, content_key
from uopviz.backends.cpu_runtime import CPULaunch
from uopviz.backends.llvm_renderer import LLVMRenderer
from uopviz.backends.llvm_types import float_literal
from uopviz.backends.register_tile import register_tiles_supported
from uopviz.backends.target import CPUTarget
from uopviz.backends.toolchain import configure_openmp_runtime
from uopviz.core.uop import UOp


#: float16 conversions LLVM lowers to runtime-library calls (``__truncsfhf2`` and ``__extendhfsf2``
#: without F16C; ``__truncdfhf2`` for double → half on every x86 CPU without AVX512-FP16).  The JIT
#: cannot resolve them, so a module that uses ``half`` defines them itself, in integer arithmetic
#: (round to nearest-even, subnormals, infinities and NaN as IEEE 754 says).  Subnormal results are
#: rounded by the FPU: adding a power of two whose ulp is half's smallest subnormal (2^-24) leaves the
#: rounded subnormal's bits in the sum's low bits.
def _soft_truncate_to_half(name: str, source: str, integer: str, bits: int, magic: str) -> str:
    """An LLVM function rounding a ``source`` float (``integer`` bits wide) to half.

    ``magic`` is the power of two whose ulp in ``source`` is half's smallest subnormal (2^-24): the
    FPU's own rounding of ``|x| + magic`` leaves a subnormal result's bits in the sum's low bits."""
    mantissa = {32: 23, 64: 52}[bits]
    exponent_bias = {32: 127, 64: 1023}[bits]
    shift = mantissa - 10
    sign_shift = bits - 16
    infinity = ((1 << (bits - mantissa - 1)) - 1) << mantissa
    # |x| ≥ 65520 rounds to infinity; below 2^-14 the result is subnormal
    overflow = (exponent_bias + 15) << mantissa | ((1 << mantissa) - (1 << (shift - 1)))
    smallest_normal = (exponent_bias - 14) << mantissa
    magic_bits = int.from_bytes(struct.pack(">f" if bits == 32 else ">d", float.fromhex(magic)), "big")
    rebias = -((exponent_bias - 15) << mantissa) + (1 << (shift - 1)) - 1
    return f"""
define half @{name}({source} %x) {{
  %b = bitcast {source} %x to {integer}
  %s = lshr {integer} %b, {sign_shift}
  %sign = and {integer} %s, 32768
  %a = and {integer} %b, {(1 << (bits - 1)) - 1}
  %special = icmp uge {integer} %a, {infinity}
  %nan = icmp ugt {integer} %a, {infinity}
  %special.bits = select i1 %nan, {integer} 32256, {integer} 31744
  %over = icmp uge {integer} %a, {overflow}
  %small = icmp ult {integer} %a, {smallest_normal}
  %af = bitcast {integer} %a to {source}
  %sum = fadd {source} %af, {float_literal(float.fromhex(magic), source)}
  %sum.bits = bitcast {source} %sum to {integer}
  %subnormal = sub {integer} %sum.bits, {magic_bits}
  %shifted = lshr {integer} %a, {shift}
  %odd = and {integer} %shifted, 1
  %biased = add {integer} %a, {rebias}
  %rounded = add {integer} %biased, %odd
  %normal = lshr {integer} %rounded, {shift}
  %r1 = select i1 %small, {integer} %subnormal, {integer} %normal
  %r2 = select i1 %over, {integer} 31744, {integer} %r1
  %r3 = select i1 %special, {integer} %special.bits, {integer} %r2
  %r = or {integer} %r3, %sign
  %t = trunc {integer} %r to i16
  %h = bitcast i16 %t to half
  ret half %h
}}
"""


SOFT_HALF_FUNCTIONS = _soft_truncate_to_half("__truncsfhf2", "float", "i32", 32, "0x1p-1") + \
    _soft_truncate_to_half("__truncdfhf2", "double", "i64", 64, "0x1p28") + """
define float @__extendhfsf2(half %x) {
  %h16 = bitcast half %x to i16
  %h = zext i16 %h16 to i32
  %sign.low = and i32 %h, 32768
  %sign = shl i32 %sign.low, 16
  %magnitude = and i32 %h, 32767
  %o = shl i32 %magnitude, 13
  %exponent = and i32 %o, 260046848
  %normal = add i32 %o, 939524096
  %special.bits = add i32 %normal, 939524096
  %subnormal.biased = add i32 %normal, 8388608
  %subnormal.float = bitcast i32 %subnormal.biased to float
  %subnormal.value = fsub float %subnormal.float, 0x3F10000000000000
  %subnormal = bitcast float %subnormal.value to i32
  %special = icmp eq i32 %exponent, 260046848
  %zero.exponent = icmp eq i32 %exponent, 0
  %r1 = select i1 %zero.exponent, i32 %subnormal, i32 %normal
  %r2 = select i1 %special, i32 %special.bits, i32 %r1
  %r = or i32 %r2, %sign
  %f = bitcast i32 %r to float
  ret float %f
}
"""


@functools.cache
def _llvm() -> Any:
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    # the assembly blocks of register tiles (uopviz.backends.register_tile) are parsed when compiled
    llvm.initialize_native_asmparser()
    return llvm


def llvm_cpu_and_features(target: CPUTarget) -> tuple[str, str]:
    """LLVM's CPU name and feature string for a CPU target profile."""
    llvm = _llvm()
    return target.llvm_cpu_and_features(llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten())


# MCJIT places a kernel's code and its constants in separate allocations that may land more than
# 2 GiB apart (they do under qemu-user and on hosts with scattered mappings); the small code
# model's 32-bit PC-relative references then overflow (an assertion, or a wild jump without
# one).  The large code model addresses constants and callees with 64-bit immediates.
CODE_MODEL = "large"
#: seconds a worker process may take to optimize and compile one kernel (C's compiler has as long)
COMPILE_TIMEOUT_S = 300.0


def _target_machine(cpu: str, features: str) -> Any:
    """A new target machine (an MCJIT engine owns and disposes the one it is given)."""
    llvm = _llvm()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(
        cpu=cpu,
        features=features,
        opt=3,
        reloc="pic",
        codemodel=CODE_MODEL,
    )


@functools.cache
def libgomp_reason() -> str | None:
    """None when libgomp is loaded into the JIT's symbol table, else why not."""
    path = ctypes.util.find_library("gomp")
    if path is None:
        return "libgomp not found (install gcc's OpenMP runtime, libgomp1)"
    configure_openmp_runtime()
    try:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        _llvm().load_library_permanently(path)
    except (OSError, RuntimeError) as error:
        return f"libgomp does not load: {error}"
    return None


@dataclass(kw_only=True)
class LLVMCompiledKernel(CompiledKernel):
    """A JIT-compiled kernel; holds its execution engine so the code stays mapped."""

    engine: Any = field(repr=False)
    function: Any = field(repr=False)

    def prepare(self, *arrays: np.ndarray) -> Launch:
        return CPULaunch(self.function, self.check_arguments(arrays))


@dataclass
class _ObjectCache:
    """MCJIT's object cache hooks, backed by the uopviz disk cache; ``provided``: an object made
    elsewhere (a worker process), given to MCJIT as a cached one."""

    key: str
    provided: bytes | None = None

    def path(self):
        folder = cache_dir() / "llvm"
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"{self.key}.o"

    def notify(self, module: Any, buffer: bytes) -> None:
        self.store(buffer)

    def store(self, buffer: bytes) -> None:
        """Write an object to the disk cache (whole or not at all: a reader never sees half of one)."""
        import os
        import tempfile

        handle, temporary = tempfile.mkstemp(dir=self.path().parent, suffix=".o")
        with os.fdopen(handle, "wb") as file:
            file.write(buffer)
        os.replace(temporary, self.path())

    def get(self, module: Any) -> bytes | None:
        if self.provided is not None:
            return self.provided
        path = self.path()
        return path.read_bytes() if path.exists() else None


def _optimize(module: Any, machine: Any) -> None:
    """LLVM's -O3 pipeline on ``module``, with the loop and SLP vectorizers on: clang -O3 turns
    them on; llvmlite leaves SLP off, and the UPCAST lanes the pipeline devectorized are exactly
    what SLP puts back into vector registers."""
    llvm = _llvm()
    options = llvm.create_pipeline_tuning_options(speed_level=3)
    options.slp_vectorization = True
    options.loop_vectorization = True
    builder = llvm.create_pass_builder(machine, options)
    builder.getModulePassManager().run(module, builder)


class LLVMBackend(TargetsCPU, Backend):
    """LLVM IR JIT-compiled with llvmlite for the host CPU."""

    name = "llvm"
    # a program's kernels build side by side, each in a worker process (compile_alongside)
    parallel_compile = True
    supported_ops = COMPILED_ALU_OPS
    vector_widths = (2, 4, 8, 16)
    transposes_stores = True  # 8 x 16 tiles: 99-110 -> 90-95 us (LLVMRenderState.render_matrix_column)
    has_local = False
    tensor_cores = cpu_tensor_cores()
    shares_extents = True

    @property
    def loads_gated_vectors_whole(self) -> bool:  # type: ignore[override]
        """``llvm.masked.load`` is one instruction where the target has one (x86 from AVX on:
        ``vmaskmovps``); elsewhere LLVM reads it lane by lane behind a branch per lane (SSE4.2:
        Inception-v1's padded 7x7 convs 1.3-1.8x their clamped time)."""
        return "avx" in self.target.features

    @property
    def loads_gated_strided_vectors_whole(self) -> bool:  # type: ignore[override]
        """As for contiguous ones: a gated load of every other element is two vector loads, a
        shuffle and a select inside the buffer, a masked gather at its ends
        (``LLVMRenderState.gated_every_other_lane``)."""
        return self.loads_gated_vectors_whole

    @property
    def writes_register_tiles(self) -> bool:  # type: ignore[override]
        """True on x86-64 targets with FMA and 32-byte registers, as for C
        (``LLVMRenderState.plan_register_tiles``)."""
        return register_tiles_supported(self.target)

    def __init__(self) -> None:
        self._compiled: dict[str, LLVMCompiledKernel] = {}
        self.renderer = LLVMRenderer(parallel=self.unavailable_reason() is None and libgomp_reason() is None)

    @property
    def has_threads(self) -> bool:  # type: ignore[override]
        """True when THREAD ranges can run on libgomp's threads."""
        return self.renderer.parallel

    def threads_note(self) -> str:
        """Why THREAD ranges run sequentially ('' when they can run in parallel)."""
        if self.unavailable_reason() is not None:
            return self.unavailable_reason() or ""
        return libgomp_reason() or ""

    def unavailable_reason(self) -> str | None:
        try:
            import llvmlite.binding  # noqa: F401
        except ImportError as error:
            return f"llvmlite is not installed ({error}); pip install llvmlite"
        return None

    def render(self, linear: UOp) -> str:
        return self.renderer.render(linear)

    def render_mapped(self, linear: UOp) -> tuple[str, SourceMap]:
        return self.renderer.render_mapped(linear)

    def assembly(self, source: str, name: str) -> str:
        """The machine code LLVM makes of the IR ``source`` (kernel ``name``) for this backend's CPU
        target, as assembly text: what :meth:`compile` runs (made again, not cached)."""
        self.require()
        module, machine = self._parsed(source, name, *llvm_cpu_and_features(self.target))
        _optimize(module, machine)
        return machine.emit_assembly(module)

    def _object_code_in_worker(self, source: str, name: str, cpu: str, features: str) -> tuple[bytes, str]:
        """:meth:`object_code` in a worker process; a worker that dies (LLVM aborting on IR it
        accepted) or runs past :data:`COMPILE_TIMEOUT_S` is a :class:`CompileError` naming the
        kernel, and this process goes on."""
        from uopviz.backends.worker import KernelCrashed, KernelTimeout, default_pool

        payload = {"source": source, "name": name, "cpu": cpu, "features": features}
        try:
            return default_pool().request("llvm_object", payload, COMPILE_TIMEOUT_S, name, self.name)
        except (KernelCrashed, KernelTimeout) as failure:
            raise CompileError(self.name, name, f"LLVM did not compile it: {failure}", source) from None

    @staticmethod
    def _parsed(source: str, name: str, cpu: str, features: str) -> tuple[Any, Any]:
        """``source`` parsed and verified, with the CPU attributes ``cpu`` and ``features``, and a
        target machine for them; a :class:`CompileError` naming the kernel for IR LLVM rejects."""
        llvm = _llvm()
        # host-specific attributes are added here, not in the rendered IR, to keep the IR readable
        text = source.replace(
            "attributes #0 = { nounwind }",
            f'attributes #0 = {{ nounwind "target-cpu"="{cpu}" "target-features"="{features}" }}',
        )
        if "half" in source:
            text += SOFT_HALF_FUNCTIONS
        try:
            module = llvm.parse_assembly(text)
            module.verify()
        except RuntimeError as error:
            raise CompileError(LLVMBackend.name, name, str(error), source) from None
        machine = _target_machine(cpu, features)
        module.triple, module.data_layout = machine.triple, str(machine.target_data)
        return module, machine

    @staticmethod
    def object_code(source: str, name: str, cpu: str, features: str) -> tuple[bytes, str]:
        """The IR ``source`` (kernel ``name``) optimized and compiled for ``cpu`` with ``features``:
        the ELF object MCJIT loads and the optimized IR.  What a worker process makes for
        :meth:`compile_alongside`."""
        module, machine = LLVMBackend._parsed(source, name, cpu, features)
        _optimize(module, machine)
        return machine.emit_object(module), str(module)

    def compile(self, source: str, name: str) -> LLVMCompiledKernel:
        return self._compile(source, name, in_worker=False)

    def compile_alongside(self, source: str, name: str) -> LLVMCompiledKernel:
        """:meth:`compile`, with the optimization and the machine code made in a worker process
        (``worker.default_pool``): llvmlite holds one lock around all of LLVM in a process, so a
        program's builds in threads ran one after the other; this process loads the object."""
        return self._compile(source, name, in_worker=True)

    def _compile(self, source: str, name: str, in_worker: bool) -> LLVMCompiledKernel:
        self.require()
        llvm = _llvm()
        target = self.target
        cpu, features = llvm_cpu_and_features(target)
        key = content_key(source, cpu, features, target.key, ".".join(map(str, llvm.llvm_version_info)),
                          "O3+slp", "soft-half-1", CODE_MODEL)
        cached = self._compiled.get(key)
        if cached is not None:
            return cached
        meta = KernelMeta.from_source(source, self.name)
        if "@GOMP_parallel" in source and libgomp_reason() is not None:
            raise CompileError(
                self.name, name, f"the kernel runs on OpenMP threads but {libgomp_reason()}", source
            )
        start = time.perf_counter()
        module, machine = self._parsed(source, name, cpu, features)
        object_cache = _ObjectCache(key)
        was_cached = object_cache.path().exists()
        optimized_ir = None
        if not was_cached and in_worker:
            code, optimized_ir = self._object_code_in_worker(source, name, cpu, features)
            object_cache.provided = code  # MCJIT loads it as a cached object, as a warm build does
            object_cache.store(code)
        elif not was_cached:
            _optimize(module, machine)
        engine = llvm.create_mcjit_compiler(module, machine)
        engine.set_object_cache(object_cache.notify, object_cache.get)
        engine.finalize_object()
        address = engine.get_function_address(meta.name)
        if not address:
            raise CompileError(self.name, name, f"function @{meta.name} not found after JIT", source)
        function = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * len(meta.params)))(address)
        if not was_cached and optimized_ir is None:
            optimized_ir = str(module)
        info = {"cached": was_cached, "optimized_ir": optimized_ir,
                "target": target.name, "cannot_run": target.why_not_here()}  # fmt: skip
        kernel = LLVMCompiledKernel.built(self.name, meta, source, start, info,
                                          engine=engine, function=function)
        self._compiled[key] = kernel
        return kernel
