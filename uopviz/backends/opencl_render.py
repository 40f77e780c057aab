"""OpenCL C as the shared C-family renderer writes it (the source the OpenCL backend,
:mod:`uopviz.backends.opencl`, builds and runs): :func:`opencl_dialect` and :class:`OpenCLRenderer`.

GPU indices come from SPECIAL uops: ``gidxN`` is ``get_group_id(N)`` (``get_global_id(N)`` when the
kernel has no ``lidx``: then the runtime may choose the workgroup size), ``lidxN`` is
``get_local_id(N)`` and ``idxN`` is ``get_global_id(N)``.  The launch sizes are their bounds:
``global = groups × local``.  LOCAL buffers are ``__local`` arrays at the top of the kernel and
BARRIER is ``barrier(CLK_LOCAL_MEM_FENCE)``.  Vector lanes use OpenCL's vector types
(``float4``, ``vload4``/``vstore4``, ``.s0``…); a vector load gated lane by lane (zero padding) is
``select(alt, vloadN(...), mask)`` where the vector lies inside the buffer.  Bool buffers are
``uchar`` (OpenCL forbids bool pointers), bfloat16 buffers ``ushort``.
"""

from __future__ import annotations

from uopviz.backends.cfamily import CStyleRenderer
from uopviz.backends.cfamily_dialect import C_COMPARISONS, MATH_LIBRARY, CDialect
from uopviz.backends.cfamily_spelling import Address
from uopviz.core.dtype import DType, dtypes
from uopviz.core.ops import GroupOp, Ops
from uopviz.core.uop import UOp


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


__all__ = ["OpenCLRenderer", "opencl_dialect"]
