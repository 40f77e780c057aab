"""The LLVM backend: LLVM IR text from a LINEAR program, verified, optimised and JIT-compiled by llvmlite.

One IR instruction (or a few) per uop; loops are the canonical header/body/latch/exit blocks with a
``phi`` induction variable; REG and LOCAL buffers are ``alloca``s in the entry block (``mem2reg``
turns accumulators into registers).  UPCAST lanes are LLVM vector types (``<4 x float>``):
contiguous vector addresses become vector loads and stores, others ``llvm.masked.gather`` /
``llvm.masked.scatter``, gated vector accesses ``llvm.masked.load`` / ``llvm.masked.store``.

Semantics follow kernel-ir.md as the C backend does: integer arithmetic wraps (no ``nsw``/``nuw``),
``IDIV``/``MOD`` are floor division and modulo through small ``alwaysinline`` helpers that never
divide by zero, shifts past the width give numpy's 0 / -1, float → int casts go through a range
check instead of LLVM's poison.  The only fast-math flag used is ``contract`` (fusing a multiply
and an add into an FMA, which changes no special value); ``MAX`` is ``llvm.maximum`` (NaN wins,
like numpy).

THREAD ranges run in parallel when the kernel has one THREAD range at the top with every side
effect inside it: the kernel body becomes ``@name.body(..., start, end)`` and ``@name`` hands
chunks of the range to the threads of libgomp's ``GOMP_parallel``.  Otherwise (or without
libgomp) they run sequentially, and ``LLVMBackend.threads_note`` says why.

Compiled machine code is cached on disk by a hash of IR text, host CPU, features and LLVM version.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import math
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from uopviz.backends.base import (
    COMPILED_ALU_OPS,
    Backend,
    CompiledKernel,
    CompileError,
    KernelMeta,
    KernelParam,
    Launch,
    RenderError,
    TargetsCPU,
    TensorCore,
    cpu_tensor_cores,
)
from uopviz.backends.cache import cache_dir, content_key
from uopviz.backends.cpu_runtime import CPULaunch
from uopviz.backends.linear_program import (
    PREFETCH_ITERATIONS,
    PREFETCH_MIN_STRIDE_BYTES,
    LinearRenderState,
    live_uops,
    underlying_buffer,
)
from uopviz.backends.target import CPUTarget
from uopviz.core.affine import contiguous_start, linear_coefficient
from uopviz.core.dtype import AddrSpace, DType, dtypes
from uopviz.core.ops import AxisType, GroupOp, Ops
from uopviz.core.uop import UOp

# ---------------------------------------------------------------------------------------------
# types and constants


_SCALAR_TYPES = {
    "bool": "i1",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "i8",
    "uint16": "i16",
    "uint32": "i32",
    "uint64": "i64",
    "float16": "half",
    "bfloat16": "float",
    "float32": "float",
    "float64": "double",
    "index": "i64",
}
_MANGLE = {
    "i1": "i1",
    "i8": "i8",
    "i16": "i16",
    "i32": "i32",
    "i64": "i64",
    "half": "f16",
    "float": "f32",
    "double": "f64",
    "bfloat": "bf16",
    "ptr": "p0",
}


def scalar_type(dtype: DType) -> str:
    """The LLVM type of a value of ``dtype``'s lane type (bfloat16 values are held as float)."""
    try:
        return _SCALAR_TYPES[dtype.scalar.name]
    except KeyError:
        raise RenderError(f"llvm: no type for {dtype.name}") from None


def value_type(dtype: DType) -> str:
    """The LLVM type of a value of ``dtype`` (a vector type for vector dtypes)."""
    scalar = scalar_type(dtype)
    return f"<{dtype.count} x {scalar}>" if dtype.count > 1 else scalar


def memory_scalar_type(dtype: DType) -> str:
    """The LLVM type of one element in memory (bool is a byte, bfloat16 its 16 bits as ``i16``: LLVM
    lowers ``fptrunc`` to ``bfloat`` to a runtime-library call on CPUs without AVX512-BF16, which
    the JIT cannot resolve, so conversions are integer arithmetic)."""
    scalar = dtype.scalar
    if scalar.is_bool:
        return "i8"
    if scalar is dtypes.bfloat16:
        return "i16"
    return scalar_type(scalar)


def memory_type(dtype: DType) -> str:
    """The LLVM type of ``dtype.count`` consecutive elements in memory."""
    element = memory_scalar_type(dtype)
    return f"<{dtype.count} x {element}>" if dtype.count > 1 else element


def mangle(type_text: str) -> str:
    """The suffix of an overloaded intrinsic for a type (``<4 x float>`` → ``v4f32``)."""
    if type_text.startswith("<"):
        count, _, element = type_text[1:-1].partition(" x ")
        return f"v{count}{_MANGLE[element]}"
    return _MANGLE[type_text]


def float_literal(value: float, type_text: str) -> str:
    """An exact LLVM float constant (hex for anything not a small integer)."""
    if type_text == "half":
        return "0xH" + struct.pack(">e", value).hex().upper()
    if type_text == "bfloat":
        bits = struct.unpack(">I", struct.pack(">f", value))[0] >> 16
        return f"0xR{bits:04X}"
    if type_text == "float" and not math.isnan(value) and not math.isinf(value):
        value = struct.unpack("f", struct.pack("f", value))[0]  # what float32 holds, widened exactly
    return "0x" + struct.pack(">d", value).hex().upper()


def scalar_literal(value: Any, dtype: DType) -> str:
    """A scalar constant of ``dtype`` as LLVM writes it."""
    scalar = dtype.scalar
    if scalar.is_bool:
        return "true" if value else "false"
    if scalar.is_float:
        return float_literal(float(value), scalar_type(scalar))
    bits = scalar.bits
    number = int(value) & ((1 << bits) - 1)
    if number >= 1 << (bits - 1):
        number -= 1 << bits  # LLVM integer literals are read as signed
    return str(number)


def splat(text: str, type_text: str) -> str:
    """A constant of ``type_text`` with every lane ``text`` (scalar types: the text itself)."""
    if not type_text.startswith("<"):
        return text
    count, _, element = type_text[1:-1].partition(" x ")
    return "<" + ", ".join(f"{element} {text}" for _ in range(int(count))) + ">"


def with_element(type_text: str, element: str) -> str:
    """``type_text`` with its lane type replaced (scalars: ``element`` itself)."""
    if type_text.startswith("<"):
        count = type_text[1:].split(" x ")[0]
        return f"<{count} x {element}>"
    return element


# ---------------------------------------------------------------------------------------------
# the renderer


@dataclass
class _Address:
    buffer: str
    dtype: DType  # what a LOAD from here produces
    pointer: str | None = None  # scalar or contiguous start
    pointers: str | None = None  # <N x ptr> for gathers and scatters (made when a gate needs it)
    lane_pointers: list[str] | None = None  # one pointer per lane of a gather or scatter


@dataclass
class _Scope:
    opener: UOp | None
    number: int
    label: str = ""


class LLVMRenderer:
    """Renders LINEAR programs to LLVM IR (see the module docstring)."""

    def __init__(self, parallel: bool = True):
        self.parallel = parallel

    def render(self, linear: UOp) -> str:
        """The LLVM IR module of a LINEAR program."""
        if linear.op is not Ops.LINEAR:
            raise RenderError(f"llvm: render takes a LINEAR program, got {linear.op.name}")
        return _LLVMState(self, linear).run()


def parallel_range(program: Sequence[UOp]) -> UOp | None:
    """The THREAD range to run in parallel: the only THREAD range at the top, with every side effect
    of the kernel inside it; None when there is none such."""
    depth, candidates = 0, []
    for u in program:
        if u.op in (Ops.RANGE, Ops.IF):
            if depth == 0 and u.op is Ops.RANGE and u.arg[1] is AxisType.THREAD:
                candidates.append(u)
            depth += 1
        elif u.op in (Ops.END, Ops.ENDIF):
            depth -= 1
        elif depth == 0 and u.op in (Ops.STORE, Ops.CUSTOM, Ops.BARRIER, Ops.ATOMIC_ADD):
            return None
    if len(candidates) != 1 or candidates[0].src[0].op is not Ops.CONST:
        return None
    return candidates[0]


class _LLVMState(LinearRenderState):
    """One rendering: SSA names, blocks, allocas, helper functions and declarations."""

    name_prefix = "%"
    dialect = "llvm"

    def __init__(self, renderer: LLVMRenderer, linear: UOp):
        super().__init__(linear)
        self.r = renderer
        self.addresses: dict[UOp, _Address]  # (made by LinearRenderState: what each INDEX addresses)
        self.lines: list[str] = []
        self.allocas: list[str] = []
        self.declarations: dict[str, str] = {}
        self.helpers: dict[str, str] = {}
        self.scopes: list[_Scope] = [_Scope(None, 0)]
        self.block = "entry"
        self.thread_range: UOp | None = None

    # -- bookkeeping --------------------------------------------------------------------------

    def emit(self, line: str) -> None:
        self.lines.append("  " + line)

    def label(self, name: str) -> None:
        self.lines.append(f"{name}:")
        self.block = name

    def ref(self, u: UOp) -> str:
        """The text of an earlier uop's value (a constant inline), checking scope."""
        if u.op is Ops.AFTER and u not in self.names:
            return self.ref(u.src[0])
        if u.op is Ops.CONST:
            return scalar_literal(u.arg[0], u.dtype)
        if u not in self.names:
            raise self.fail(u, f"uses a {u.op.name} that was not rendered before it")
        where, here = self.defined_in.get(u), self.scope_path()
        if where is not None and here[: len(where)] != where:
            raise self.fail(u, f"uses a {u.op.name} defined inside a loop or IF that is already closed")
        return self.names[u]

    def typed(self, u: UOp) -> str:
        return f"{value_type(u.dtype)} {self.ref(u)}"

    def declare(self, name: str, signature: str) -> str:
        self.declarations.setdefault(name, f"declare {signature}")
        return name

    def intrinsic(self, base: str, result: str, arguments: Sequence[str], overloads: Sequence[str]) -> str:
        """Declare ``llvm.<base>.<mangled overloads>`` returning ``result`` and return its name."""
        name = f"@llvm.{base}." + ".".join(mangle(t) for t in overloads)
        self.declare(name, f"{result} {name}({', '.join(arguments)})")
        return name

    def assign(self, u: UOp, prefix: str, instruction: str) -> str:
        name = self.fresh(prefix)
        self.emit(f"{name} = {instruction}")
        return self.define(u, name)

    def temp(self, prefix: str, instruction: str) -> str:
        name = self.fresh(prefix)
        self.emit(f"{name} = {instruction}")
        return name

    # -- the whole module ---------------------------------------------------------------------
    def run(self) -> str:
        params = self.collect_params()
        self.thread_range = parallel_range(self.program) if self.r.parallel else None
        for param, name in params:
            self.names[self.param_uops[param.slot]] = name
        live = live_uops(self.program)
        for position, u in enumerate(self.program):
            self.position = position
            if u in live:
                self.render_uop(u)
        if len(self.scopes) != 1:
            raise RenderError(
                f"llvm: kernel {self.linear.arg!r} ends with an open block; an END or ENDIF is missing"
            )
        meta = KernelMeta(str(self.linear.arg), tuple(p for p, _ in params))
        return self.assemble(meta, params)

    def assemble(self, meta: KernelMeta, params: list[tuple[KernelParam, str]]) -> str:
        name = meta.name
        arguments = [f"ptr noalias {'' if p.written else 'readonly '}{n}" for p, n in params]
        out = [f"; {meta.to_comment_text()}"]
        if self.thread_range is None:
            out.append(f"define void @{name}({', '.join(arguments)}) #0 {{")
            out += ["entry:", *["  " + a for a in self.allocas], *self.lines, "  ret void", "}"]
        else:
            bound = scalar_literal(self.thread_range.src[0].arg[0], dtypes.index)
            body_args = [*arguments, "i64 %thread_start", "i64 %thread_end"]
            out.append("; the THREAD range runs in chunks [thread_start, thread_end) on libgomp's threads")
            out.append(f"define internal void @{name}.body({', '.join(body_args)}) #0 {{")
            out += ["entry:", *["  " + a for a in self.allocas], *self.lines, "  ret void", "}", ""]
            count = len(params)
            out.append(f"define internal void @{name}.thread(ptr %context) #0 {{")
            out.append("entry:")
            loaded = []
            for i, (_, pname) in enumerate(params):
                out.append(f"  %slot{i} = getelementptr [{count} x ptr], ptr %context, i64 0, i64 {i}")
                out.append(f"  {pname} = load ptr, ptr %slot{i}")
                loaded.append(f"ptr {pname}")
            out += [
                "  %tid32 = call i32 @omp_get_thread_num()",
                "  %threads32 = call i32 @omp_get_num_threads()",
                "  %tid = sext i32 %tid32 to i64",
                "  %threads = sext i32 %threads32 to i64",
                f"  %rounded = add i64 {bound}, %threads",
                "  %rounded1 = sub i64 %rounded, 1",
                "  %chunk = sdiv i64 %rounded1, %threads",
                "  %start = mul i64 %tid, %chunk",
                "  %end0 = add i64 %start, %chunk",
                f"  %end = call i64 @llvm.smin.i64(i64 %end0, i64 {bound})",
                f"  call void @{name}.body({', '.join([*loaded, 'i64 %start', 'i64 %end'])})",
                "  ret void",
                "}",
                "",
            ]
            self.declare("@llvm.smin.i64", "i64 @llvm.smin.i64(i64, i64)")
            self.declare("@omp_get_thread_num", "i32 @omp_get_thread_num()")
            self.declare("@omp_get_num_threads", "i32 @omp_get_num_threads()")
            self.declare("@GOMP_parallel", "void @GOMP_parallel(ptr, ptr, i32, i32)")
            out.append(f"define void @{name}({', '.join(arguments)}) #0 {{")
            out += ["entry:", f"  %context = alloca [{count} x ptr]"]
            for i, (_, pname) in enumerate(params):
                out.append(f"  %slot{i} = getelementptr [{count} x ptr], ptr %context, i64 0, i64 {i}")
                out.append(f"  store ptr {pname}, ptr %slot{i}")
            out += [
                f"  call void @GOMP_parallel(ptr @{name}.thread, ptr %context, i32 0, i32 0)",
                "  ret void",
                "}",
            ]
        out += [
            "",
            *self.helpers.values(),
            *self.declarations.values(),
            "",
            "attributes #0 = { nounwind }",
            "",
        ]
        return "\n".join(out)

    # -- per op -------------------------------------------------------------------------------
    def render_uop(self, u: UOp) -> None:
        handler = _HANDLERS.get(u.op)
        if handler is not None:
            handler(self, u)
        elif u.op in GroupOp.ELEMENTWISE:
            self.render_alu(u)
        else:
            raise self.fail(u, f"{u.op.name} cannot appear in a linear program for this backend")

    def render_nothing(self, u: UOp) -> None:
        return None

    def render_buffer(self, u: UOp) -> None:
        if u.arg.addrspace is AddrSpace.GLOBAL:
            raise self.fail(u, "a GLOBAL BUFFER inside a kernel must be a PARAM")
        name = self.fresh("acc" if u.arg.addrspace is AddrSpace.REG else "temp")
        element = memory_type(u.arg.dtype)
        self.allocas.append(f"{name} = alloca [{u.arg.size} x {element}], align 64")
        self.names[u] = name

    def render_special(self, u: UOp) -> None:
        raise self.fail(u, f"SPECIAL {u.arg!r} needs a GPU backend; CPU backends use RANGEs")

    def render_range(self, u: UOp) -> None:
        number = self.scope_numbers + 1
        loop = f"loop{number}"
        name = self.fresh("ridx")
        if u is self.thread_range:
            start, bound = "%thread_start", "%thread_end"
        else:
            start, bound = "0", self.ref(u.src[0])
        entry = self.block
        self.emit(f"br label %{loop}  ; {u.arg[1].name} range")
        self.label(loop)
        self.emit(f"{name} = phi i64 [ {start}, %{entry} ], [ {name}.next, %{loop}.latch ]")
        self.emit(f"{name}.go = icmp slt i64 {name}, {bound}")
        self.emit(f"br i1 {name}.go, label %{loop}.body, label %{loop}.exit")
        self.label(f"{loop}.body")
        self.define(u, name)
        self.scope_numbers = number
        self.scopes.append(_Scope(u, number, loop))

    def render_end(self, u: UOp) -> None:
        ranges = [s for s in u.src if s.op is Ops.RANGE]
        if not ranges or self.scopes[-1].opener is not ranges[-1]:
            raise self.fail(u, "END does not close the innermost open RANGE")
        scope = self.scopes.pop()
        name = self.names[ranges[-1]]
        self.emit(f"br label %{scope.label}.latch")
        self.label(f"{scope.label}.latch")
        self.emit(f"{name}.next = add i64 {name}, 1")
        self.emit(f"br label %{scope.label}")
        self.label(f"{scope.label}.exit")

    def render_if(self, u: UOp) -> None:
        number = self.scope_numbers + 1
        gate = self.ref(u.src[0])
        self.emit(f"br i1 {gate}, label %if{number}.then, label %if{number}.end")
        self.label(f"if{number}.then")
        self.scope_numbers = number
        self.scopes.append(_Scope(u, number, f"if{number}"))

    def render_endif(self, u: UOp) -> None:
        if self.scopes[-1].opener is not u.src[0]:
            raise self.fail(u, "ENDIF does not close the innermost open IF")
        scope = self.scopes.pop()
        self.emit(f"br label %{scope.label}.end")
        self.label(f"{scope.label}.end")

    def render_barrier(self, u: UOp) -> None:
        self.emit("; BARRIER: workgroups are one thread here, nothing to wait for")

    def render_vectorize(self, u: UOp) -> None:
        vtype, stype = value_type(u.dtype), scalar_type(u.dtype)
        if all(s.op is Ops.CONST for s in u.src):
            self.names[u] = "<" + ", ".join(f"{stype} {self.ref(s)}" for s in u.src) + ">"
            self.defined_in[u] = (0,)
            return
        current = "poison"
        for lane, s in enumerate(u.src):
            current = self.temp("vec", f"insertelement {vtype} {current}, {stype} {self.ref(s)}, i32 {lane}")
        self.define(u, current)

    def render_gep(self, u: UOp) -> None:
        source = u.src[0]
        if source.dtype.count == 1:
            if len(u.arg) == 1:
                self.names[u] = self.ref(source)
                self.defined_in[u] = self.defined_in.get(source, (0,))
                return
            vector = self.temp(
                "vec", f"insertelement <1 x {scalar_type(source.dtype)}> poison, {self.typed(source)}, i32 0"
            )
            source_type = f"<1 x {scalar_type(source.dtype)}>"
        else:
            vector, source_type = self.ref(source), value_type(source.dtype)
        if len(u.arg) == 1:
            self.assign(u, "gep", f"extractelement {source_type} {vector}, i32 {u.arg[0]}")
            return
        mask = "<" + ", ".join(f"i32 {lane}" for lane in u.arg) + ">"
        self.assign(
            u,
            "gep",
            f"shufflevector {source_type} {vector}, {source_type} poison, <{len(u.arg)} x i32> {mask}",
        )

    # -- memory -------------------------------------------------------------------------------
    def render_index(self, u: UOp) -> None:
        buffer_uop = underlying_buffer(u.src[0])
        if buffer_uop.op not in (Ops.PARAM, Ops.BUFFER) or len(u.src) != 2:
            raise self.fail(u, "INDEX in a linear program takes (PARAM or BUFFER, flat index)")
        buffer = self.ref(buffer_uop)
        element = memory_scalar_type(buffer_uop.arg.dtype)
        if buffer_uop.arg.dtype.count > 1:
            element = memory_type(buffer_uop.arg.dtype)
        index = u.src[1]
        if index.dtype.count == 1:
            pointer = self.temp("ptr", f"getelementptr {element}, ptr {buffer}, i64 {self.ref(index)}")
            self.addresses[u] = _Address(buffer, u.dtype, pointer=pointer)
            return
        found = contiguous_start(index)
        if found is not None:
            base, start = found
            offset = str(start) if base is None else self.ref(base)
            if base is not None and start:
                offset = self.temp("alu", f"add i64 {offset}, {start}")
            pointer = self.temp("ptr", f"getelementptr {element}, ptr {buffer}, i64 {offset}")
            self.addresses[u] = _Address(buffer, u.dtype, pointer=pointer)
            if base is not None and buffer_uop.op is Ops.PARAM:
                self.prefetch(pointer, element, base, buffer_uop.arg.dtype.itemsize)
            return
        # lane by lane: LLVM merges neighbouring scalar loads into vector loads and shuffles, which
        # beats llvm.masked.gather (often scalarized) on the interleaved patterns kernels have
        if index.op is Ops.VECTORIZE:
            offsets = [self.ref(lane) for lane in index.src]
        else:
            vector = self.ref(index)
            offsets = [
                self.temp("lane", f"extractelement {value_type(index.dtype)} {vector}, i32 {i}")
                for i in range(index.dtype.count)
            ]
        pointers = [self.temp("ptr", f"getelementptr {element}, ptr {buffer}, i64 {o}") for o in offsets]
        self.addresses[u] = _Address(buffer, u.dtype, lane_pointers=pointers)

    def prefetch(self, pointer: str, element: str, base: UOp, itemsize: int) -> None:
        """Prefetch a few iterations ahead of a contiguous access that jumps a kilobyte or more per
        iteration of its loop (the C backend's rule, see ``cfamily_state.CFamilyRenderState.prefetch``)."""
        loop = next(
            (
                scope.opener
                for scope in reversed(self.scopes)
                if scope.opener is not None and scope.opener.op is Ops.RANGE
            ),
            None,
        )
        if loop is None:
            return
        stride = linear_coefficient(base, loop)
        if stride is None or abs(stride) * itemsize < PREFETCH_MIN_STRIDE_BYTES:
            return
        distance = PREFETCH_ITERATIONS * stride
        ahead = self.temp("ahead", f"getelementptr {element}, ptr {pointer}, i64 {distance}")
        self.declare("llvm.prefetch.p0", "void @llvm.prefetch.p0(ptr, i32, i32, i32)")
        self.emit(f"call void @llvm.prefetch.p0(ptr {ahead}, i32 0, i32 3, i32 1)")

    def vector_of_pointers(self, address: _Address) -> str:
        """The ``<N x ptr>`` of a lane-by-lane address (for masked gathers and scatters)."""
        if address.pointers is None:
            count = len(address.lane_pointers or [])
            current = "poison"
            for i, pointer in enumerate(address.lane_pointers or []):
                current = self.temp(
                    "ptrs", f"insertelement <{count} x ptr> {current}, ptr {pointer}, i32 {i}"
                )
            address.pointers = current
        return address.pointers

    def address_of(self, u: UOp) -> _Address:
        source = u.src[0]
        while source.op is Ops.AFTER:
            source = source.src[0]
        if source not in self.addresses:
            raise self.fail(u, f"{u.op.name} needs an INDEX rendered before it, got {source.op.name}")
        return self.addresses[source]

    def from_memory(self, value: str, dtype: DType) -> str:
        """A value loaded as its memory type, converted to its value type."""
        mtype = memory_type(dtype)
        if dtype.scalar.is_bool:
            return self.temp("bool", f"icmp ne {mtype} {value}, {splat('0', mtype)}")
        if dtype.scalar is dtypes.bfloat16:
            return self.bfloat16_value(value, value_type(dtype))
        return value

    def to_memory(self, value: str, dtype: DType) -> str:
        """A value converted to its memory type for a store."""
        if dtype.scalar.is_bool:
            return self.temp("byte", f"zext {value_type(dtype)} {value} to {memory_type(dtype)}")
        if dtype.scalar is dtypes.bfloat16:
            return self.bfloat16_bits(value, value_type(dtype))
        return value

    def render_load(self, u: UOp) -> None:
        address = self.address_of(u)
        dtype = u.dtype
        mtype, align = memory_type(dtype), dtype.scalar.itemsize
        if len(u.src) == 2:
            raise self.fail(u, "LOAD takes (index) or (index, alt, gate)")
        gated = len(u.src) == 3
        if address.lane_pointers is not None and not gated:
            current = "poison"
            element = memory_scalar_type(dtype)
            for i, pointer in enumerate(address.lane_pointers):
                lane = self.temp("val", f"load {element}, ptr {pointer}, align {align}")
                current = self.temp("vec", f"insertelement {mtype} {current}, {element} {lane}, i32 {i}")
            self.define(u, self.from_memory(current, dtype))
            return
        if address.lane_pointers is not None or (gated and u.src[2].dtype.count > 1):
            self.masked_load(u, address)
            return
        if not gated:
            raw = self.temp("val", f"load {mtype}, ptr {address.pointer}, align {align}")
            self.define(u, self.from_memory(raw, dtype))
            return
        number = self.scope_numbers = self.scope_numbers + 1
        gate, alt = self.ref(u.src[2]), self.ref(u.src[1])
        entry = self.block
        self.emit(f"br i1 {gate}, label %load{number}.then, label %load{number}.end")
        self.label(f"load{number}.then")
        raw = self.temp("val", f"load {mtype}, ptr {address.pointer}, align {align}")
        loaded = self.from_memory(raw, dtype)
        then_block = self.block
        self.emit(f"br label %load{number}.end")
        self.label(f"load{number}.end")
        self.assign(u, "val", f"phi {value_type(dtype)} [ {loaded}, %{then_block} ], [ {alt}, %{entry} ]")

    def mask_of(self, u: UOp, count: int) -> str:
        if len(u.src) == 3:
            gate = u.src[2]
            if gate.dtype.count == count:
                return self.ref(gate)
            splatted = self.temp("mask", f"insertelement <{count} x i1> poison, i1 {self.ref(gate)}, i32 0")
            return self.temp(
                "mask",
                f"shufflevector <{count} x i1> {splatted}, <{count} x i1> poison, "
                f"<{count} x i32> zeroinitializer",
            )
        return splat("true", f"<{count} x i1>")

    def masked_load(self, u: UOp, address: _Address) -> None:
        dtype = u.dtype
        count, mtype, align = dtype.count, memory_type(dtype), dtype.scalar.itemsize
        mask = self.mask_of(u, count)
        passthru = "poison"
        if len(u.src) == 3:
            passthru = self.to_memory(self.ref(u.src[1]), u.src[1].dtype)
        if address.lane_pointers is not None:
            self.vector_of_pointers(address)
            function = self.intrinsic(
                "masked.gather",
                mtype,
                [f"<{count} x ptr>", "i32", f"<{count} x i1>", mtype],
                [mtype, f"<{count} x ptr>"],
            )
            raw = self.temp(
                "val",
                f"call {mtype} {function}(<{count} x ptr> {address.pointers}, i32 {align}, "
                f"<{count} x i1> {mask}, {mtype} {passthru})",
            )
        else:
            function = self.intrinsic(
                "masked.load", mtype, ["ptr", "i32", f"<{count} x i1>", mtype], [mtype, "ptr"]
            )
            raw = self.temp(
                "val",
                f"call {mtype} {function}(ptr {address.pointer}, i32 {align}, "
                f"<{count} x i1> {mask}, {mtype} {passthru})",
            )
        self.define(u, self.from_memory(raw, dtype))

    def render_store(self, u: UOp) -> None:
        address = self.address_of(u)
        value_uop = u.src[1]
        dtype = value_uop.dtype
        mtype, align = memory_type(dtype), dtype.scalar.itemsize
        value = self.to_memory(self.ref(value_uop), dtype)
        gated = len(u.src) == 3
        if address.lane_pointers is not None and not gated:
            element = memory_scalar_type(dtype)
            for i, pointer in enumerate(address.lane_pointers):
                lane = self.temp("lane", f"extractelement {mtype} {value}, i32 {i}")
                self.emit(f"store {element} {lane}, ptr {pointer}, align {align}")
            return
        if address.lane_pointers is not None or (gated and u.src[2].dtype.count > 1):
            count = dtype.count
            mask = self.mask_of(u, count)
            if address.lane_pointers is not None:
                self.vector_of_pointers(address)
                function = self.intrinsic(
                    "masked.scatter",
                    "void",
                    [mtype, f"<{count} x ptr>", "i32", f"<{count} x i1>"],
                    [mtype, f"<{count} x ptr>"],
                )
                self.emit(
                    f"call void {function}({mtype} {value}, <{count} x ptr> {address.pointers}, i32 {align}, "
                    f"<{count} x i1> {mask})"
                )
            else:
                function = self.intrinsic(
                    "masked.store", "void", [mtype, "ptr", "i32", f"<{count} x i1>"], [mtype, "ptr"]
                )
                self.emit(
                    f"call void {function}({mtype} {value}, ptr {address.pointer}, i32 {align}, "
                    f"<{count} x i1> {mask})"
                )
            return
        if not gated:
            self.emit(f"store {mtype} {value}, ptr {address.pointer}, align {align}")
            return
        number = self.scope_numbers = self.scope_numbers + 1
        self.emit(f"br i1 {self.ref(u.src[2])}, label %store{number}.then, label %store{number}.end")
        self.label(f"store{number}.then")
        self.emit(f"store {mtype} {value}, ptr {address.pointer}, align {align}")
        self.emit(f"br label %store{number}.end")
        self.label(f"store{number}.end")

    # -- arithmetic ---------------------------------------------------------------------------
    def render_alu(self, u: UOp) -> None:
        op = u.op
        operand = u.src[-1] if op is Ops.WHERE else u.src[0]
        scalar = operand.dtype.scalar
        vtype = value_type(operand.dtype)
        args = [self.ref(s) for s in u.src]
        result = alu_instruction(self, op, scalar, vtype, args, u)
        if scalar is dtypes.bfloat16 and op not in GroupOp.COMPARISON:
            result = self.round_bfloat16(result, value_type(u.dtype))
        self.define(u, result)

    def _bfloat16_rounded(self, value: str, vtype: str) -> tuple[str, str, str]:
        """(float bits rounded to nearest-even at bit 16, the bits, the i32 type) of a float value."""
        itype = with_element(vtype, "i32")
        bits = self.temp("bf", f"bitcast {vtype} {value} to {itype}")
        low = self.temp("bf", f"lshr {itype} {bits}, {splat('16', itype)}")
        odd = self.temp("bf", f"and {itype} {low}, {splat('1', itype)}")
        bias = self.temp("bf", f"add {itype} {odd}, {splat('32767', itype)}")
        return self.temp("bf", f"add {itype} {bits}, {bias}"), bits, itype

    def _keep_nan(self, value: str, vtype: str, number: str, nan: str, itype: str) -> str:
        """``number`` where ``value`` is a number, ``nan`` (both of ``itype``) where it is NaN."""
        is_nan = self.temp("bf", f"fcmp uno {vtype} {value}, {value}")
        condition = with_element(vtype, "i1")
        return self.temp("bf", f"select {condition} {is_nan}, {itype} {nan}, {itype} {number}")

    def round_bfloat16(self, value: str, vtype: str) -> str:
        """Round a float held value to bfloat16 precision, to nearest-even (bfloat16 arithmetic is
        done in float); NaN stays a (quiet) NaN.  Through the 16 bits: LLVM folds the narrowing."""
        return self.bfloat16_value(self.bfloat16_bits(value, vtype), vtype)

    def bfloat16_bits(self, value: str, vtype: str) -> str:
        """The 16 bits (``i16``) of a float held value rounded to bfloat16 (nearest-even; NaN quiet)."""
        rounded, bits, itype = self._bfloat16_rounded(value, vtype)
        high = self.temp("bf", f"lshr {itype} {rounded}, {splat('16', itype)}")
        quiet = self.temp("bf", f"lshr {itype} {bits}, {splat('16', itype)}")
        quiet = self.temp("bf", f"or {itype} {quiet}, {splat('64', itype)}")
        chosen = self._keep_nan(value, vtype, high, quiet, itype)
        return self.temp("bf", f"trunc {itype} {chosen} to {with_element(vtype, 'i16')}")

    def bfloat16_value(self, bits: str, vtype: str) -> str:
        """The float held value of bfloat16 bits (``i16``): the bits are a float's upper half."""
        itype = with_element(vtype, "i32")
        wide = self.temp("bf", f"zext {with_element(vtype, 'i16')} {bits} to {itype}")
        shifted = self.temp("bf", f"shl {itype} {wide}, {splat('16', itype)}")
        return self.temp("bf", f"bitcast {itype} {shifted} to {vtype}")

    def render_cast(self, u: UOp) -> None:
        self.define(u, cast_value(self, self.ref(u.src[0]), u.src[0].dtype, u.dtype))

    def render_bitcast(self, u: UOp) -> None:
        source = u.src[0]
        if source.dtype.itemsize != u.dtype.itemsize:
            raise self.fail(u, f"BITCAST from {source.dtype.name} to {u.dtype.name} changes the size")
        value = self.ref(source)
        if source.dtype.scalar is dtypes.bfloat16:
            value = self.bfloat16_bits(value, value_type(source.dtype))
            from_type = memory_type(source.dtype)
        else:
            from_type = value_type(source.dtype)
        if u.dtype.scalar is dtypes.bfloat16:
            narrow = self.temp("cast", f"bitcast {from_type} {value} to {memory_type(u.dtype)}")
            self.define(u, self.bfloat16_value(narrow, value_type(u.dtype)))
            return
        self.assign(u, "cast", f"bitcast {from_type} {value} to {value_type(u.dtype)}")

    def render_wmma(self, u: UOp) -> None:
        config = u.arg
        if not isinstance(config, TensorCore):
            raise self.fail(u, f"WMMA's arg must be a TensorCore, got {type(config).__name__}")
        if config.threads != 1:
            raise self.fail(
                u,
                f"tensor core {config.name} spreads a tile over {config.threads} lanes; the llvm "
                f"backend emulates only one-thread tiles",
            )
        a, b, c = u.src
        if (a.dtype.count, b.dtype.count, c.dtype.count) != (
            config.elements("a"),
            config.elements("b"),
            config.elements("c"),
        ):
            raise self.fail(
                u,
                f"WMMA {config.name} takes vectors of {config.elements('a')}, "
                f"{config.elements('b')} and {config.elements('c')} lanes",
            )
        out = value_type(config.dtype_out)
        where_a = {coordinate: i for i, coordinate in enumerate(config.layout_a)}
        where_b = {coordinate: i for i, coordinate in enumerate(config.layout_b)}

        def lane(vector: UOp, index: int, target: DType) -> str:
            value = self.temp(
                "lane", f"extractelement {value_type(vector.dtype)} {self.ref(vector)}, i32 {index}"
            )
            return cast_value(self, value, vector.dtype.scalar, target)

        self.emit(
            f"; WMMA {config.name}: {config.dims[0]}x{config.dims[1]}x{config.dims[2]} tile as scalar "
            f"multiply-adds"
        )
        current = "poison"
        ctype = value_type(c.dtype)
        for index, (m, n) in enumerate(config.layout_c):
            total = lane(c, index, config.dtype_out)
            for k in range(config.dims[2]):
                left = lane(a, where_a[(m, k)], config.dtype_out)
                right = lane(b, where_b[(k, n)], config.dtype_out)
                if config.dtype_out.is_float:
                    product = self.temp("mul", f"fmul contract {out} {left}, {right}")
                    total = self.temp("sum", f"fadd contract {out} {total}, {product}")
                else:
                    product = self.temp("mul", f"mul {out} {left}, {right}")
                    total = self.temp("sum", f"add {out} {total}, {product}")
            current = self.temp("wmma", f"insertelement {ctype} {current}, {out} {total}, i32 {index}")
        self.define(u, current)

    def render_custom(self, u: UOp) -> None:
        text = self.custom_text(u)
        if u.dtype is dtypes.void:
            self.emit(text)
        else:
            self.assign(u, "custom", text)


_HANDLERS: dict[Ops, Callable[[_LLVMState, UOp], None]] = {
    Ops.PARAM: _LLVMState.render_nothing,
    Ops.CONST: _LLVMState.render_nothing,
    Ops.SINK: _LLVMState.render_nothing,
    Ops.GROUP: _LLVMState.render_nothing,
    Ops.BUFFER: _LLVMState.render_buffer,
    Ops.AFTER: _LLVMState.render_after,
    Ops.SPECIAL: _LLVMState.render_special,
    Ops.RANGE: _LLVMState.render_range,
    Ops.END: _LLVMState.render_end,
    Ops.IF: _LLVMState.render_if,
    Ops.ENDIF: _LLVMState.render_endif,
    Ops.BARRIER: _LLVMState.render_barrier,
    Ops.VECTORIZE: _LLVMState.render_vectorize,
    Ops.GEP: _LLVMState.render_gep,
    Ops.INDEX: _LLVMState.render_index,
    Ops.LOAD: _LLVMState.render_load,
    Ops.STORE: _LLVMState.render_store,
    Ops.CAST: _LLVMState.render_cast,
    Ops.BITCAST: _LLVMState.render_bitcast,
    Ops.WMMA: _LLVMState.render_wmma,
    Ops.CUSTOM: _LLVMState.render_custom,
}


# ---------------------------------------------------------------------------------------------
# instructions


_INT_COMPARE = {
    Ops.CMP_LT: ("slt", "ult"),
    Ops.CMP_GT: ("sgt", "ugt"),
    Ops.CMP_GE: ("sge", "uge"),
    Ops.CMP_LE: ("sle", "ule"),
    Ops.CMP_NE: ("ne", "ne"),
    Ops.CMP_EQ: ("eq", "eq"),
}
_FLOAT_COMPARE = {
    Ops.CMP_LT: "olt",
    Ops.CMP_GT: "ogt",
    Ops.CMP_GE: "oge",
    Ops.CMP_LE: "ole",
    Ops.CMP_NE: "une",
    Ops.CMP_EQ: "oeq",
}
_FLOAT_INTRINSICS = {Ops.SQRT: "sqrt", Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.TRUNC: "trunc"}


def _signed(dtype: DType) -> bool:
    return dtype.kind.value in ("signed", "index")


def alu_instruction(state: _LLVMState, op: Ops, scalar: DType, vtype: str, args: list[str], u: UOp) -> str:
    """Emit the instructions of one ALU op on values of ``vtype`` and return the result's name."""
    a = args[0]
    b = args[1] if len(args) > 1 else ""
    is_float, is_bool = scalar.is_float, scalar.is_bool
    fast = "contract " if is_float else ""
    if is_bool and op in (Ops.ADD, Ops.MAX, Ops.OR):
        return state.temp("alu", f"or {vtype} {a}, {b}")
    if is_bool and op in (Ops.MUL, Ops.AND):
        return state.temp("alu", f"and {vtype} {a}, {b}")
    simple = {Ops.ADD: ("add", "fadd"), Ops.SUB: ("sub", "fsub"), Ops.MUL: ("mul", "fmul")}
    if op in simple:
        instruction = simple[op][1 if is_float else 0]
        return state.temp("alu", f"{instruction} {fast}{vtype} {a}, {b}")
    if op is Ops.DIV:
        return state.temp("alu", f"fdiv {vtype} {a}, {b}")
    if op in (Ops.XOR, Ops.OR, Ops.AND):
        return state.temp("alu", f"{op.name.lower()} {vtype} {a}, {b}")
    if op is Ops.NEG:
        if is_float:
            return state.temp("alu", f"fneg {vtype} {a}")
        return a if is_bool else state.temp("alu", f"sub {vtype} {splat('0', vtype)}, {a}")
    if op is Ops.NOT:
        return state.temp("alu", f"xor {vtype} {a}, {splat('true' if is_bool else '-1', vtype)}")
    if op is Ops.RECIP:
        one = splat(float_literal(1.0, scalar_type(scalar)), vtype)
        return state.temp("alu", f"fdiv {vtype} {one}, {a}")
    if op in _INT_COMPARE or op in _FLOAT_COMPARE:
        if is_float:
            return state.temp("alu", f"fcmp {_FLOAT_COMPARE[op]} {vtype} {a}, {b}")
        signed, unsigned = _INT_COMPARE[op]
        return state.temp("alu", f"icmp {signed if _signed(scalar) else unsigned} {vtype} {a}, {b}")
    if op is Ops.MAX:
        base = "maximum" if is_float else ("smax" if _signed(scalar) else "umax")
        function = state.intrinsic(base, vtype, [vtype, vtype], [vtype])
        return state.temp("alu", f"call {vtype} {function}({vtype} {a}, {vtype} {b})")
    if op is Ops.WHERE:
        condition = value_type(u.src[0].dtype)
        return state.temp("alu", f"select {condition} {a}, {vtype} {b}, {vtype} {args[2]}")
    if op is Ops.MULACC:
        if is_float:
            function = state.intrinsic("fmuladd", vtype, [vtype] * 3, [vtype])
            return state.temp("alu", f"call {vtype} {function}({vtype} {a}, {vtype} {b}, {vtype} {args[2]})")
        product = state.temp("alu", f"mul {vtype} {a}, {b}")
        return state.temp("alu", f"add {vtype} {product}, {args[2]}")
    if op in (Ops.IDIV, Ops.MOD):
        if scalar is dtypes.index and u.src[0].vmin >= 0 and u.src[1].vmin > 0:
            return state.temp("alu", f"{'sdiv' if op is Ops.IDIV else 'srem'} {vtype} {a}, {b}")
        helper = division_helper(state, op, scalar, vtype)
        return state.temp("alu", f"call {vtype} {helper}({vtype} {a}, {vtype} {b})")
    if op in (Ops.SHL, Ops.SHR):
        if scalar is dtypes.index:
            return state.temp("alu", f"{'shl' if op is Ops.SHL else 'ashr'} {vtype} {a}, {b}")
        helper = shift_helper(state, op, scalar, vtype)
        return state.temp("alu", f"call {vtype} {helper}({vtype} {a}, {vtype} {b})")
    if op in _FLOAT_INTRINSICS or op is Ops.POW:
        if not is_float:
            raise state.fail(u, f"{op.name} of {scalar.name}")
        name = "pow" if op is Ops.POW else _FLOAT_INTRINSICS[op]
        function = state.intrinsic(name, vtype, [vtype] * len(args), [vtype])
        return state.temp("alu", f"call {vtype} {function}({', '.join(f'{vtype} {x}' for x in args)})")
    raise state.fail(u, f"cannot render {op.name} (Instruction Selection should have decomposed it)")


def _helper_name(kind: str, vtype: str) -> str:
    return f"@{kind}.{mangle(vtype)}"


def division_helper(state: _LLVMState, op: Ops, scalar: DType, vtype: str) -> str:
    """``@idiv.<type>`` / ``@mod.<type>``: floor division and modulo, 0 for a zero divisor, no UB."""
    kind = "idiv" if op is Ops.IDIV else "mod"
    name = _helper_name(kind if _signed(scalar) else kind + "u", vtype)  # signed and unsigned differ
    if name in state.helpers:
        return name
    zero, one, minus = splat("0", vtype), splat("1", vtype), splat("-1", vtype)
    bool_type = with_element(vtype, "i1")
    if not _signed(scalar):
        body = [
            f"  %zero = icmp eq {vtype} %b, {zero}",
            f"  %safe = select {bool_type} %zero, {vtype} {one}, {vtype} %b",
            f"  %r = {'udiv' if op is Ops.IDIV else 'urem'} {vtype} %a, %safe",
            f"  %out = select {bool_type} %zero, {vtype} {zero}, {vtype} %r",
        ]
    else:
        body = [
            f"  %zero = icmp eq {vtype} %b, {zero}",
            f"  %minus = icmp eq {vtype} %b, {minus}",
            f"  %bad = or {bool_type} %zero, %minus",
            f"  %safe = select {bool_type} %bad, {vtype} {one}, {vtype} %b",
            f"  %q = sdiv {vtype} %a, %safe",
            f"  %r = srem {vtype} %a, %safe",
            f"  %r_nonzero = icmp ne {vtype} %r, {zero}",
            f"  %a_sign = icmp slt {vtype} %a, {zero}",
            f"  %b_sign = icmp slt {vtype} %b, {zero}",
            f"  %signs = xor {bool_type} %a_sign, %b_sign",
            f"  %adjust = and {bool_type} %r_nonzero, %signs",
        ]
        if op is Ops.IDIV:
            body += [
                f"  %q_minus = sub {vtype} %q, {one}",
                f"  %floor = select {bool_type} %adjust, {vtype} %q_minus, {vtype} %q",
                f"  %negated = sub {vtype} {zero}, %a",
                f"  %by_minus = select {bool_type} %minus, {vtype} %negated, {vtype} %floor",
                f"  %out = select {bool_type} %zero, {vtype} {zero}, {vtype} %by_minus",
            ]
        else:
            body += [
                f"  %r_plus = add {vtype} %r, %b",
                f"  %floor = select {bool_type} %adjust, {vtype} %r_plus, {vtype} %r",
                f"  %out = select {bool_type} %bad, {vtype} {zero}, {vtype} %floor",
            ]
    state.helpers[name] = "\n".join(
        [
            f"define internal {vtype} {name}({vtype} %a, {vtype} %b) alwaysinline {{",
            *body,
            f"  ret {vtype} %out",
            "}",
            "",
        ]
    )
    return name


def shift_helper(state: _LLVMState, op: Ops, scalar: DType, vtype: str) -> str:
    """``@shl.<type>`` / ``@shr.<type>``: counts outside [0, bits) give 0 (or -1 for SHR of negatives)."""
    # signed and unsigned SHR differ (ashr / lshr) on the same LLVM type: one helper each
    kind = "shl" if op is Ops.SHL else "shr" if _signed(scalar) else "shru"
    name = _helper_name(kind, vtype)
    if name in state.helpers:
        return name
    bits = scalar.bits
    bool_type = with_element(vtype, "i1")
    zero = splat("0", vtype)
    body = [
        f"  %fits = icmp ult {vtype} %b, {splat(str(bits), vtype)}",
        f"  %count = select {bool_type} %fits, {vtype} %b, {vtype} {zero}",
    ]
    if op is Ops.SHL:
        body += [
            f"  %shifted = shl {vtype} %a, %count",
            f"  %out = select {bool_type} %fits, {vtype} %shifted, {vtype} {zero}",
        ]
    elif _signed(scalar):
        body += [
            f"  %shifted = ashr {vtype} %a, %count",
            f"  %sign = ashr {vtype} %a, {splat(str(bits - 1), vtype)}",
            f"  %out = select {bool_type} %fits, {vtype} %shifted, {vtype} %sign",
        ]
    else:
        body += [
            f"  %shifted = lshr {vtype} %a, %count",
            f"  %out = select {bool_type} %fits, {vtype} %shifted, {vtype} {zero}",
        ]
    state.helpers[name] = "\n".join(
        [
            f"define internal {vtype} {name}({vtype} %a, {vtype} %b) alwaysinline {{",
            *body,
            f"  ret {vtype} %out",
            "}",
            "",
        ]
    )
    return name


def float_to_int_helper(state: _LLVMState, source: DType, target: DType, count: int) -> str:
    """``@float_to_<int>``: truncation with the C backend's rule for values that do not fit."""
    source_type = value_type(source.vec(count) if count > 1 else source)
    target_type = value_type(target.vec(count) if count > 1 else target)
    name = f"@float_to_{target.name}.{mangle(source_type)}"
    if name in state.helpers:
        return name
    double = with_element(source_type, "double")
    i32, i64, flag = (
        with_element(source_type, "i32"),
        with_element(source_type, "i64"),
        with_element(source_type, "i1"),
    )
    widen = (
        f"  %d = fpext {source_type} %x to {double}"
        if scalar_type(source) != "double"
        else f"  %d = fadd {double} %x, {splat(float_literal(-0.0, 'double'), double)}"
    )

    def literal(value: float) -> str:
        return splat(float_literal(value, "double"), double)

    if target.itemsize <= 4 and target is not dtypes.uint32:
        body = [
            widen,
            f"  %above = fcmp ogt {double} %d, {literal(-2147483649.0)}",
            f"  %below = fcmp olt {double} %d, {literal(2147483648.0)}",
            f"  %fits = and {flag} %above, %below",
            f"  %i = fptosi {double} %d to {i32}",
            f"  %wide = select {flag} %fits, {i32} %i, {i32} {splat('-2147483648', i32)}",
        ]
        body.append(
            f"  %out = trunc {i32} %wide to {target_type}"
            if target.itemsize < 4
            else f"  %out = add {i32} %wide, {splat('0', i32)}"
        )
    else:
        body = [
            widen,
            f"  %above = fcmp oge {double} %d, {literal(-9223372036854775808.0)}",
            f"  %below = fcmp olt {double} %d, {literal(9223372036854775808.0)}",
            f"  %fits = and {flag} %above, %below",
            f"  %i = fptosi {double} %d to {i64}",
            f"  %wide = select {flag} %fits, {i64} %i, {i64} {splat('-9223372036854775808', i64)}",
        ]
        if target is dtypes.uint64:
            body += [
                f"  %high = fcmp oge {double} %d, {literal(9223372036854775808.0)}",
                f"  %top = fcmp olt {double} %d, {literal(18446744073709551616.0)}",
                f"  %unsigned_fits = and {flag} %high, %top",
                f"  %u = fptoui {double} %d to {i64}",
                f"  %out = select {flag} %unsigned_fits, {i64} %u, {i64} %wide",
            ]
        elif target.itemsize == 4:
            body.append(f"  %out = trunc {i64} %wide to {target_type}")
        else:
            body.append(f"  %out = add {i64} %wide, {splat('0', i64)}")
    state.helpers[name] = "\n".join(
        [
            f"define internal {target_type} {name}({source_type} %x) alwaysinline {{",
            *body,
            f"  ret {target_type} %out",
            "}",
            "",
        ]
    )
    return name


def cast_value(state: _LLVMState, value: str, source: DType, target: DType) -> str:
    """Emit a conversion with numpy's semantics; returns the converted value's name."""
    count = max(source.count, target.count)
    s, t = source.scalar, target.scalar
    stype = value_type(s.vec(count) if count > 1 else s)
    ttype = value_type(t.vec(count) if count > 1 else t)
    if s == t or (stype == ttype and not (s.is_float and t is dtypes.bfloat16)):
        return value
    if t.is_bool:
        if s.is_float:
            return state.temp(
                "cast", f"fcmp une {stype} {value}, {splat(float_literal(0.0, scalar_type(s)), stype)}"
            )
        return state.temp("cast", f"icmp ne {stype} {value}, {splat('0', stype)}")
    if s.is_bool:
        return state.temp("cast", f"{'uitofp' if t.is_float else 'zext'} {stype} {value} to {ttype}")
    if t is dtypes.bfloat16:
        as_float = (
            value
            if stype == with_element(stype, "float")
            else cast_value(state, value, source, dtypes.float32.vec(count) if count > 1 else dtypes.float32)
        )
        float_type = with_element(stype, "float")
        return state.round_bfloat16(as_float, float_type)
    if s.is_float and t.is_float:
        widths = {"half": 16, "float": 32, "double": 64}
        instruction = "fpext" if widths[scalar_type(t)] > widths[scalar_type(s)] else "fptrunc"
        return state.temp("cast", f"{instruction} {stype} {value} to {ttype}")
    if s.is_float:
        helper = float_to_int_helper(state, s, t, count)
        return state.temp("cast", f"call {ttype} {helper}({stype} {value})")
    if t.is_float:
        return state.temp("cast", f"{'sitofp' if _signed(s) else 'uitofp'} {stype} {value} to {ttype}")
    if t.bits > s.bits:
        return state.temp("cast", f"{'sext' if _signed(s) else 'zext'} {stype} {value} to {ttype}")
    return state.temp("cast", f"trunc {stype} {value} to {ttype}")


# ---------------------------------------------------------------------------------------------
# compiling and running


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
    return llvm


def llvm_cpu_and_features(target: CPUTarget) -> tuple[str, str]:
    """LLVM's CPU name and feature string for a CPU target profile."""
    llvm = _llvm()
    return target.llvm_cpu_and_features(llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten())


def _target_machine(cpu: str, features: str) -> Any:
    """A new target machine (an MCJIT engine owns and disposes the one it is given)."""
    llvm = _llvm()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(
        cpu=cpu,
        features=features,
        opt=3,
        reloc="pic",
        codemodel="default",
    )


@functools.cache
def libgomp_reason() -> str | None:
    """None when libgomp is loaded into the JIT's symbol table, else why not."""
    path = ctypes.util.find_library("gomp")
    if path is None:
        return "libgomp not found (install gcc's OpenMP runtime, libgomp1)"
    try:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        _llvm().load_library_permanently(path)
    except (OSError, RuntimeError) as error:
        return f"libgomp does not load: {error}"
    return None


class LLVMCompiledKernel(CompiledKernel):
    """A JIT-compiled kernel; holds its execution engine so the code stays mapped."""

    def __init__(
        self,
        backend: str,
        meta: KernelMeta,
        source: str,
        compile_s: float,
        extra: dict[str, Any],
        engine: Any,
        function: Any,
    ):
        super().__init__(backend, meta, source, compile_s, extra)
        self.engine = engine
        self.function = function

    def prepare(self, *arrays: np.ndarray) -> Launch:
        return CPULaunch(self.function, self.check_arguments(arrays))


@dataclass
class _ObjectCache:
    """MCJIT's object cache hooks, backed by the uopviz disk cache."""

    key: str
    stored: dict[str, bytes] = field(default_factory=dict)

    def path(self):
        folder = cache_dir() / "llvm"
        folder.mkdir(parents=True, exist_ok=True)
        return folder / f"{self.key}.o"

    def notify(self, module: Any, buffer: bytes) -> None:
        import os
        import tempfile

        handle, temporary = tempfile.mkstemp(dir=self.path().parent, suffix=".o")
        with os.fdopen(handle, "wb") as file:
            file.write(buffer)
        os.replace(temporary, self.path())

    def get(self, module: Any) -> bytes | None:
        path = self.path()
        return path.read_bytes() if path.exists() else None


class LLVMBackend(TargetsCPU, Backend):
    """LLVM IR JIT-compiled with llvmlite for the host CPU."""

    name = "llvm"
    supported_ops = COMPILED_ALU_OPS
    vector_widths = (2, 4, 8, 16)
    has_local = False
    tensor_cores = cpu_tensor_cores()

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

    def compile(self, source: str, name: str) -> LLVMCompiledKernel:
        self.require()
        llvm = _llvm()
        target = self.target
        cpu, features = llvm_cpu_and_features(target)
        key = content_key(source, cpu, features, target.key, ".".join(map(str, llvm.llvm_version_info)),
                          "O3+slp", "soft-half-1")
        cached = self._compiled.get(key)
        if cached is not None:
            return cached
        meta = KernelMeta.from_source(source, self.name)
        if "@GOMP_parallel" in source and libgomp_reason() is not None:
            raise CompileError(
                self.name, name, f"the kernel runs on OpenMP threads but {libgomp_reason()}", source
            )
        start = time.perf_counter()
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
            raise CompileError(self.name, name, str(error), source) from None
        machine = _target_machine(cpu, features)
        module.triple, module.data_layout = machine.triple, str(machine.target_data)
        object_cache = _ObjectCache(key)
        was_cached = object_cache.path().exists()
        if not was_cached:
            options = llvm.create_pipeline_tuning_options(speed_level=3)
            # clang -O3 turns these on; llvmlite leaves SLP off, and the UPCAST lanes the pipeline
            # devectorized are exactly what SLP puts back into vector registers
            options.slp_vectorization = True
            options.loop_vectorization = True
            builder = llvm.create_pass_builder(machine, options)
            builder.getModulePassManager().run(module, builder)
        engine = llvm.create_mcjit_compiler(module, machine)
        engine.set_object_cache(object_cache.notify, object_cache.get)
        engine.finalize_object()
        address = engine.get_function_address(meta.name)
        if not address:
            raise CompileError(self.name, name, f"function @{meta.name} not found after JIT", source)
        function = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * len(meta.params)))(address)
        kernel = LLVMCompiledKernel(
            self.name,
            meta,
            source,
            time.perf_counter() - start,
            {"cached": was_cached, "optimized_ir": None if was_cached else str(module),
             "target": target.name, "cannot_run": target.why_not_here()},
            engine,
            function,
        )
        self._compiled[key] = kernel
        return kernel
