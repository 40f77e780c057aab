"""The renderer shared by the C-family backends (C, OpenCL C, CUDA C).

Rendering walks the LINEAR program once, in order, one source line per uop (so a line of the
source maps back to a uop of the program).  The integer semantics of kernel-ir.md are kept in C,
where the language leaves them undefined:

* fixed-width integer ``+ - *`` and negation are computed in the unsigned type of the same width
  (at least 32 bits) and converted back, so they wrap around instead of being undefined;
* ``IDIV`` is floor division and ``MOD`` its modulo (sign of the divisor), through small inline
  helpers; as numpy does, dividing by zero gives 0 and ``MIN // -1`` wraps to ``MIN``;
* shifts by the width or more (or by a negative amount) give 0, or -1 for ``SHR`` of a negative
  value (numpy's rule); ``SHR`` of signed values is arithmetic;
* float → int casts truncate toward zero; values that do not fit go through int32 (targets up
  to 32 bits) or int64 and wrap, the way numpy's casts behave on x86-64, never undefined.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from uopviz.backends.base import (
    KernelMeta,
    KernelParam,
    RenderError,
    TensorCore,
)
from uopviz.backends.linear_program import (
    PREFETCH_ITERATIONS,
    PREFETCH_MIN_STRIDE_BYTES,
    LinearRenderState,
    live_uops,
    underlying_buffer,
)
from uopviz.core.affine import constant_chunk_width, contiguous_start, linear_coefficient
from uopviz.core.dtype import AddrSpace, DType, DTypeKind, dtypes
from uopviz.core.ops import AxisType, GroupOp, Ops
from uopviz.core.uop import UOp

# ---------------------------------------------------------------------------------------------
# what every C-family renderer shares


@dataclass
class Address:
    """Where an INDEX points: ``buffer`` (a rendered name) at a scalar ``offset``, at ``count``
    contiguous elements from ``offset``, or at one element per lane (``lanes``)."""

    buffer: str
    buffer_uop: UOp
    dtype: DType  # the dtype a LOAD from here produces
    offset: str | None = None  # scalar or contiguous-vector start
    lanes: list[str] | None = None  # gather/scatter: one element offset per lane
    variable: str | None = None  # a REG buffer kept in variables: the variable holding these lanes
    base: UOp | None = None  # a contiguous vector access: the index of its first lane (None: constant)

    @property
    def contiguous(self) -> bool:
        """True for a vector access of consecutive elements."""
        return self.offset is not None and self.dtype.count > 1


@dataclass
class Scope:
    """An open block of the rendered code: a RANGE loop, an IF, or the function body."""

    opener: UOp | None
    kind: str  # "function", "range", "if"
    number: int


def _is_buffer_like(u: UOp) -> bool:
    return u.op in (Ops.PARAM, Ops.BUFFER)


def register_variable_widths(program: Sequence[UOp]) -> dict[UOp, int]:
    """The REG buffers that a renderer can keep in plain variables, each with its lanes per variable:
    every access is an INDEX at constant, aligned lanes of one width (a vector accumulator read and
    written in whole chunks) with no per-lane gate.  Compilers keep such variables in registers;
    an array indexed the same way is often left in memory (measured: gemm twice as fast)."""
    widths: dict[UOp, int | None] = {}
    for u in program:
        for s in u.src:
            base = underlying_buffer(s)
            if base.op is not Ops.BUFFER or base.arg.addrspace is not AddrSpace.REG:
                continue
            width = None
            if u.op is Ops.INDEX and len(u.src) == 2:
                width = constant_chunk_width(u.src[1])
            elif u.op is Ops.AFTER:
                continue
            if width is None or base.arg.size % width or widths.get(base, width) != width:
                widths[base] = None
            else:
                widths.setdefault(base, width)
        if u.op in (Ops.LOAD, Ops.STORE) and len(u.src) == 3 and u.src[2].dtype.count > 1:
            base = underlying_buffer(u.src[0].src[0]) if u.src[0].op is Ops.INDEX else u.src[0]
            if base in widths:
                widths[base] = None
    return {buffer: width for buffer, width in widths.items() if width is not None}


@dataclass(frozen=True, kw_only=True, eq=False)
class CDialect:
    """How one C-family language spells what the renderer writes: the data that tells C, OpenCL C
    and CUDA C apart (one :class:`CStyleRenderer` reads it; a dialect's subclass adds code only where
    the structure of its output differs).  Templates are ``str.format`` patterns; each attribute
    names its fields."""

    name: str  #: the language, first word of every error ("c", "opencl", "cuda")
    #: the type of a value of each scalar dtype (by dtype name) held in a variable
    scalar_types: Mapping[str, str]
    #: element types of buffers where they differ from the variable type (by scalar dtype name)
    memory_types: Mapping[str, str]
    #: scalar dtypes (by name) whose values live in float variables, rounded after every op
    held_as_float: frozenset[str] = frozenset({"bfloat16"})
    kernel_prefix: str  #: what comes before the kernel's name
    helper_prefix: str = "static inline"  #: what comes before each helper function
    global_qualifier: str = ""  #: before each pointer parameter's type
    restrict: str = "restrict"
    comment: str = "//"
    long_suffix: str = "LL"  #: of 64-bit integer constants
    includes: tuple[str, ...] = ()  #: lines at the very top of the source
    #: the line before an outermost THREAD loop; None: THREAD loops run sequentially
    parallel_pragma: str | None = None
    #: GPU indices of SPECIALs by name (``gidx``, ``lidx``, ``idx``; ``gidx_alone``: ``gidx`` in a
    #: kernel without ``lidx``), fields ``dim`` (its digits) and ``axis`` (x, y, z); empty: none
    special_indices: Mapping[str, str] = field(default_factory=dict)
    barrier: str  #: the statement of a workgroup barrier
    local_qualifier: str = ""  #: before a LOCAL (workgroup-shared) array's declaration
    locals_at_top: bool = False  #: LOCAL arrays must be declared at the top of the kernel
    prefetch: str | None = None  #: a statement prefetching ``{pointer}`` for reading (None: none)
    #: vector lane counts the dialect has types for
    native_vector_counts: tuple[int, ...]
    #: what other lane counts become: "pad" (the next native count), "struct" (``struct {T v[N];}``)
    #: or "exact" (the count itself)
    other_vector_counts: str = "pad"
    #: ops computed on whole vectors (everything else is computed lane by lane)
    native_vector_ops: frozenset[Ops]
    vector_name: str  #: a vector type's name; fields scalar (dtype name), element (C type), count
    vector_bool_element: str  #: the element type of bool vectors
    #: the declaration of a vector type (None: the types are built in); fields name, element,
    #: lanes, bytes, align
    vector_typedef: str | None = None
    lane: str = "{vector}[{index}]"  #: one lane of a vector; fields vector, index, hex
    vector_literal: str  #: a vector from its lanes; fields type, items
    #: a whole-vector conversion (None: lane by lane); fields value, type
    vector_convert: str | None = None
    #: whether :attr:`vector_convert` takes index vectors
    vector_convert_index: bool = True
    #: wrapping vector arithmetic through the unsigned vector type: fields type, unsigned, a, b, op
    vector_wrapping_negate: str = ""
    vector_wrapping_binary: str = ""
    #: float constants: a float16 one from its float32 text (``{}``)
    float16_constant: str = "{}"
    #: NaN and infinities by (precision "float32"/"float64", "nan"/"inf"/"-inf"); field type
    float_specials: Mapping[tuple[str, str], str]
    #: the special values name their own type: a float16 one is not converted again
    typed_specials: bool = False
    #: math functions by op, the suffix of their float32 form, and how a float16 call is made: the
    #: float32 call converted back (``{}``), each argument converted to float (``{}``)
    math_functions: Mapping[Ops, str]
    math_float32_suffix: str = "f"
    math_float16_call: str = "{}"
    math_float16_argument: str = "{}"
    #: scalar float16 conversions that go through float (None: a plain cast): widening to a
    #: non-float type, narrowing from any type
    float16_widen: str | None = None
    float16_narrow: str | None = None
    #: how a bool element is read from and written to memory
    bool_element_value: str = "{}"
    bool_element_store: str = "{}"
    #: contiguous vector loads and stores (fields count, pointer, value; None: through byte-copy
    #: helpers), and the conversions of bool vectors around them (fields count, value)
    vector_load: str | None = None
    vector_store: str | None = None
    vector_bool_load: str = "{value}"
    vector_bool_store: str = "{value}"
    #: vectors are read and written element by element (no vector memory access)
    element_vectors: bool = False
    copy: str = "__builtin_memcpy"  #: the byte copy bitcasts use
    #: a bitcast as an expression (fields type, value; None: a byte copy into a new variable)
    reinterpret: str | None = None
    #: bfloat16's bits as a float and back (None: through a byte copy)
    bits_as_float: str | None = None
    float_as_bits: str | None = None


class CStyleRenderer:
    """Renders a LINEAR program to a C-family language: what it writes is spelled by the renderer's
    :class:`CDialect`; a dialect's subclass overrides the hooks below only where its output has
    another structure."""

    dialect: CDialect

    def __init__(self, tensor_cores: Sequence[TensorCore] = ()):
        self.tensor_cores = tuple(tensor_cores)

    # -- types ------------------------------------------------------------------------------------
    def scalar_type(self, dtype: DType) -> str:
        """The type of a value of scalar ``dtype`` held in a variable."""
        try:
            return self.dialect.scalar_types[dtype.scalar.name]
        except KeyError:
            raise RenderError(f"{self.dialect.name}: no type for {dtype.name}") from None

    def memory_type(self, dtype: DType) -> str:
        """The element type of a buffer of ``dtype`` (bfloat16 is stored as its 16 bits)."""
        if dtype.count > 1:
            return self.vector_type(dtype)
        return self.dialect.memory_types.get(dtype.scalar.name) or self.scalar_type(dtype)

    def padded_count(self, count: int) -> int:
        """Lanes of the vector type used for ``count`` lanes."""
        native = self.dialect.native_vector_counts
        if count in native or self.dialect.other_vector_counts == "exact":
            return count
        bigger = [c for c in native if c >= count]
        if not bigger:
            raise RenderError(f"{self.dialect.name}: no vector type with {count} lanes")
        return min(bigger)

    def struct_vector(self, dtype: DType) -> bool:
        """True for lane counts the dialect has no vector type for when they become
        ``struct {T v[N];}`` (OpenCL's vectors have 2, 3, 4, 8 or 16 lanes)."""
        return (
            self.dialect.other_vector_counts == "struct"
            and dtype.count > 1
            and dtype.count not in self.dialect.native_vector_counts
        )

    def vector_type(self, dtype: DType) -> str:
        """The name of the vector type for ``dtype`` (recorded so its typedef is emitted)."""
        if dtype.count == 1:
            return self.scalar_type(dtype)
        if dtype.scalar is dtypes.bfloat16:
            raise RenderError(f"{self.dialect.name}: bfloat16 vectors are not rendered; devectorize them")
        element = self.dialect.vector_bool_element if dtype.scalar.is_bool else self.scalar_type(dtype.scalar)
        if self.struct_vector(dtype):
            name = f"{element}_x{dtype.count}"
            if self._state is not None and name not in self._state.typedefs:
                self._state.typedefs[name] = f"typedef struct {{ {element} v[{dtype.count}]; }} {name};"
            return name
        name = self.dialect.vector_name.format(scalar=dtype.scalar.name, element=element, count=dtype.count)
        declared = self.dialect.vector_typedef is not None and self._state is not None
        if declared and name not in self._state.typedefs:
            lanes = self.padded_count(dtype.count)
            self._state.typedefs[name] = self.vector_typedef(name, dtype, lanes)
        return name

    def vector_typedef(self, name: str, dtype: DType, lanes: int) -> str:
        """The declaration of a vector type of ``lanes`` lanes."""
        element = self.dialect.vector_bool_element if dtype.scalar.is_bool else self.scalar_type(dtype.scalar)
        size = lanes * dtype.scalar.itemsize
        align = min(16, 1 << (size.bit_length() - 1)) if size else 1
        template = self.dialect.vector_typedef or ""
        return template.format(name=name, element=element, lanes=lanes, bytes=size, align=align)

    def lane(self, expression: str, index: int, dtype: DType) -> str:
        """Lane ``index`` of a vector expression."""
        if dtype.count == 1:
            return expression
        if self.struct_vector(dtype):
            return f"{expression}.v[{index}]"
        return self.dialect.lane.format(vector=expression, index=index, hex=f"{index:x}")

    def vectors_native(self, dtype: DType) -> bool:
        """True when whole-vector arithmetic works on values of ``dtype`` in this dialect."""
        return not self.struct_vector(dtype)

    def vector_expression(self, u: UOp, operands: list[str]) -> str | None:
        """A whole-vector form of comparisons, WHERE and shifts where the dialect has one (None: the
        op is rendered lane by lane)."""
        return None

    def selects_lanes(self, dtype: DType) -> bool:
        """True when :meth:`select_lanes` has a whole-vector form for values of ``dtype`` (else a
        gated vector LOAD is read lane by lane)."""
        return False

    def select_lanes(self, mask: str, if_true: str, if_false: str, dtype: DType) -> str:
        """A whole-vector pick: ``if_true``'s lanes where the bool vector ``mask`` is set and
        ``if_false``'s elsewhere, both of ``dtype`` (only where :meth:`selects_lanes` says so)."""
        raise RenderError(f"{self.dialect.name}: no whole-vector select of {dtype.name}")

    def register_pin(self, name: str) -> str | None:
        """A statement that keeps vector variable ``name`` in a register (None: the dialect has none)."""
        return None

    def lane_target(self, expression: str, index: int, dtype: DType) -> str:
        """An assignable lane of a vector variable (the lane expression itself in every dialect here)."""
        return self.lane(expression, index, dtype)

    def vector_from_runs(
        self, dtype: DType, runs: Sequence[tuple[str, int, int]]
    ) -> tuple[list[str], str] | None:
        """Statements and the name of a vector of ``dtype`` made of runs ``(vector variable, first
        lane, lane count)`` of other vectors' lanes, in order; None where the dialect has no such
        form (the vector is then built lane by lane)."""
        return None

    def vector_literal(self, dtype: DType, items: Sequence[str]) -> str:
        """A vector of ``dtype`` built from one expression per lane."""
        if self.struct_vector(dtype):
            return f"(({self.vector_type(dtype)}){{{{{', '.join(items)}}}}})"
        return self.dialect.vector_literal.format(type=self.vector_type(dtype), items=", ".join(items))

    # -- constants ------------------------------------------------------------------------------
    def const(self, value: Any, dtype: DType) -> str:
        """A constant written inline."""
        scalar = dtype.scalar
        long_suffix = self.dialect.long_suffix
        if scalar.is_bool:
            return "1" if value else "0"
        if scalar.is_float:
            return self.float_const(float(value), scalar)
        value = int(value)
        if scalar is dtypes.index:
            return str(value) if -(2**31) < value < 2**31 else f"{value}{long_suffix}"
        if scalar.is_unsigned:
            suffix = f"u{long_suffix.lower()}" if scalar.itemsize == 8 else "u"
            text = f"{value}{suffix}"
            return text if scalar.itemsize >= 4 else f"(({self.scalar_type(scalar)}){text})"
        if value == scalar.min:
            return f"({value + 1}{long_suffix if scalar.itemsize == 8 else ''}-1)"
        text = f"{value}{long_suffix if scalar.itemsize == 8 else ''}"
        return text if scalar.itemsize >= 4 else f"(({self.scalar_type(scalar)}){text})"

    def float_const(self, value: float, dtype: DType) -> str:
        """A float constant (inf and nan as the dialect spells them)."""
        precision = "float64" if dtype is dtypes.float64 else "float32"
        if math.isnan(value) or math.isinf(value):
            kind = "nan" if math.isnan(value) else "-inf" if value < 0 else "inf"
            text = self.dialect.float_specials[precision, kind].format(type=self.scalar_type(dtype))
            if self.dialect.typed_specials:
                return text
        else:
            suffix = "" if precision == "float64" else "f"
            text = (
                f"{value!r}{suffix}" if "e" in repr(value) or "." in repr(value) else f"{value!r}.0{suffix}"
            )
        if dtype is dtypes.float16:
            return self.dialect.float16_constant.format(text)
        return text

    # -- declarations and statements ------------------------------------------------------------
    def kernel_signature(self, name: str, params: Sequence[tuple[KernelParam, str]]) -> str:
        """The first line of the kernel function."""
        dialect = self.dialect
        args = []
        for param, pname in params:
            const = "" if param.written else "const "
            element = self.memory_type(param.dtype)
            args.append(f"{dialect.global_qualifier}{const}{element}* {dialect.restrict} {pname}")
        return f"{dialect.kernel_prefix} {name}({', '.join(args) or 'void'})"

    def special(self, name: str, uses_local: bool) -> str:
        """The expression of a GPU index (SPECIAL) named ``name`` (``gidxN`` workgroup, ``lidxN`` lane in the
        workgroup, ``idxN`` global); ``uses_local`` says whether the kernel has workgroup lanes at all."""
        indices = self.dialect.special_indices
        if not indices:
            raise RenderError(
                f"{self.dialect.name}: SPECIAL {name!r} needs a GPU backend; CPU backends use RANGEs"
            )
        kind, dim = name.rstrip("0123456789"), name[len(name.rstrip("0123456789")) :]
        if kind == "gidx" and not uses_local:
            kind = "gidx_alone"
        elif kind not in ("gidx", "lidx"):
            kind = "idx"
        return indices[kind].format(dim=dim, axis="xyz"[int(dim or 0)])

    def barrier(self) -> str:
        """The statement of a workgroup barrier."""
        return self.dialect.barrier

    def local_declaration(self, dtype: DType, name: str, size: int) -> str:
        """A workgroup-shared (LOCAL) array declaration."""
        return f"{self.dialect.local_qualifier}{self.memory_type(dtype)} {name}[{size}];"

    def register_declaration(self, dtype: DType, name: str, size: int) -> str:
        """A per-thread (REG) array declaration."""
        return f"{self.memory_type(dtype)} {name}[{size}];"

    def range_header(self, range_uop: UOp, name: str, bound: str, parallel: bool) -> list[str]:
        """The lines that open a RANGE loop (``parallel``: the dialect's parallel pragma first)."""
        prefix = [self.dialect.parallel_pragma] if parallel and self.dialect.parallel_pragma else []
        ctype = self.scalar_type(dtypes.index)
        return [*prefix, f"for ({ctype} {name} = 0; {name} < {bound}; {name}++) {{"]

    def includes(self) -> list[str]:
        """Lines at the very top of the source."""
        return list(self.dialect.includes)

    def prefetch_statement(self, pointer: str) -> str | None:
        """A statement prefetching the cache line at ``pointer`` for reading (None: the dialect has none)."""
        template = self.dialect.prefetch
        return None if template is None else template.format(pointer=pointer)

    def vector_load(self, address: Address) -> str:
        """An expression loading ``address.dtype.count`` contiguous elements."""
        dtype, dialect = address.dtype, self.dialect
        if self.struct_vector(dtype) or dialect.element_vectors:
            items = [
                self.load_element(address.buffer, f"{address.offset} + {i}", dtype.scalar)
                for i in range(dtype.count)
            ]
            return self.vector_literal(dtype, items)
        pointer = f"{address.buffer} + {address.offset}"
        if dialect.vector_load is None:
            return f"{self.helper_vector_load(dtype)}({pointer})"
        loaded = dialect.vector_load.format(count=dtype.count, pointer=pointer)
        if dtype.scalar.is_bool:
            return dialect.vector_bool_load.format(count=dtype.count, value=loaded)
        return loaded

    def vector_store(self, address: Address, value: str) -> str:
        """A statement storing a vector to contiguous elements."""
        dtype, dialect = address.dtype, self.dialect
        if self.struct_vector(dtype) or dialect.element_vectors:
            return " ".join(
                self.store_element(
                    address.buffer, f"{address.offset} + {i}", self.lane(value, i, dtype), dtype.scalar
                )
                for i in range(dtype.count)
            )
        pointer = f"{address.buffer} + {address.offset}"
        if dialect.vector_store is None:
            return f"{self.helper_vector_store(dtype)}({pointer}, {value});"
        if dtype.scalar.is_bool:
            value = dialect.vector_bool_store.format(count=dtype.count, value=value)
        return dialect.vector_store.format(count=dtype.count, pointer=pointer, value=value)

    def bitcast(self, value: str, source: DType, target: DType) -> tuple[list[str], str]:
        """Statements and the expression reinterpreting ``value``'s bits as ``target``."""
        dialect = self.dialect
        if dialect.reinterpret is not None:
            if self.struct_vector(source) or self.struct_vector(target):
                raise RenderError(
                    f"{dialect.name}: no bitcast between {source.name} and {target.name} (vectors of more "
                    f"than {max(dialect.native_vector_counts)} lanes are structs); devectorize it"
                )
            return [], dialect.reinterpret.format(type=self.vector_type(target), value=value)
        name = self._state.fresh("bits")
        declared = self.memory_type(target) if target.count == 1 else self.vector_type(target)
        lines = [f"{declared} {name};", f"{dialect.copy}(&{name}, &{value}, sizeof({name}));"]
        return lines, name

    def math_call(self, op: Ops, dtype: DType, args: Sequence[str]) -> str:
        """A math function call on scalars of ``dtype``."""
        dialect = self.dialect
        base = dialect.math_functions[op]
        if dtype is dtypes.float64:
            return f"{base}({', '.join(args)})"
        if dtype is dtypes.float16:
            converted = ", ".join(dialect.math_float16_argument.format(a) for a in args)
            return dialect.math_float16_call.format(f"{base}{dialect.math_float32_suffix}({converted})")
        return f"{base}{dialect.math_float32_suffix}({', '.join(args)})"

    # -- helpers emitted into the prelude -----------------------------------------------------
    def helper(self, name: str, make: Callable[[], str]) -> str:
        """Request helper ``name`` (its definition made by ``make``) and return its name."""
        if name not in self._state.helpers:
            self._state.helpers[name] = make()
        return name

    def _unsigned_name(self, dtype: DType) -> str:
        return self.scalar_type(dtypes.uint64 if dtype.itemsize == 8 else dtypes.uint32)

    def helper_idiv(self, dtype: DType) -> str:
        """Floor division of ``dtype`` (0 for division by zero, wrapping at MIN // -1)."""
        t, u = self.scalar_type(dtype), self._unsigned_name(dtype)
        if dtype.is_unsigned:
            return self.helper(
                f"idiv_{dtype.name}",
                lambda: (
                    f"{self.dialect.helper_prefix} {t} idiv_{dtype.name}({t} a, {t} b) {{ "
                    f"return b == 0 ? 0 : a / b; }}"
                ),
            )
        return self.helper(
            f"idiv_{dtype.name}",
            lambda: (
                f"{self.dialect.helper_prefix} {t} idiv_{dtype.name}({t} a, {t} b) {{\n"
                f"  if (b == 0) return 0;\n"
                f"  if (b == -1) return ({t})(({u})0 - ({u})a);  /* MIN // -1 wraps, as numpy */\n"
                f"  {t} q = a / b;\n"
                f"  return q - (({t})(a % b != 0) & ({t})((a < 0) != (b < 0)));\n"
                f"}}"
            ),
        )

    def helper_mod(self, dtype: DType) -> str:
        """Modulo with the divisor's sign (0 for modulo by zero)."""
        t = self.scalar_type(dtype)
        if dtype.is_unsigned:
            return self.helper(
                f"mod_{dtype.name}",
                lambda: (
                    f"{self.dialect.helper_prefix} {t} mod_{dtype.name}({t} a, {t} b) {{ "
                    f"return b == 0 ? 0 : a % b; }}"
                ),
            )
        return self.helper(
            f"mod_{dtype.name}",
            lambda: (
                f"{self.dialect.helper_prefix} {t} mod_{dtype.name}({t} a, {t} b) {{\n"
                f"  if (b == 0 || b == -1) return 0;\n"
                f"  {t} r = a % b;\n"
                f"  return (r != 0 && ((r < 0) != (b < 0))) ? ({t})(r + b) : r;\n"
                f"}}"
            ),
        )

    def helper_shift(self, op: Ops, dtype: DType) -> str:
        """SHL/SHR with numpy's rule for counts outside ``[0, bits)``."""
        t, u = self.scalar_type(dtype), self._unsigned_name(dtype)
        bits = dtype.bits
        narrow = self.scalar_type(dtypes.from_name(f"uint{bits}"))
        if op is Ops.SHL:
            return self.helper(
                f"shl_{dtype.name}",
                lambda: (
                    f"{self.dialect.helper_prefix} {t} shl_{dtype.name}({t} a, {t} b) {{ "
                    f"return ({narrow})b < {bits}u ? ({t})(({u})({narrow})a << b) : 0; }}"
                ),
            )
        overflow = "(a < 0 ? -1 : 0)" if not dtype.is_unsigned else "0"
        return self.helper(
            f"shr_{dtype.name}",
            lambda: (
                f"{self.dialect.helper_prefix} {t} shr_{dtype.name}({t} a, {t} b) {{ "
                f"return ({narrow})b < {bits}u ? ({t})(a >> b) : {overflow}; }}"
            ),
        )

    def helper_max(self, dtype: DType) -> str:
        """MAX that propagates NaN like numpy.maximum."""
        t = self.scalar_type(dtype)
        return self.helper(
            f"max_{dtype.name}",
            lambda: (
                f"{self.dialect.helper_prefix} {t} max_{dtype.name}({t} a, {t} b) {{ "
                f"return (a != a || a > b) ? a : b; }}"
            ),
        )

    def helper_float_to_int(self, dtype: DType, source: DType = dtypes.float64) -> str:
        """Truncating float → int conversion without undefined behaviour (see module docstring).
        ``source`` float32 compares in float (every bound below is exact there), anything else in double."""
        t = self.scalar_type(dtype)
        i32, i64 = self.scalar_type(dtypes.int32), self.scalar_type(dtypes.int64)
        u64 = self.scalar_type(dtypes.uint64)
        single = source is dtypes.float32
        ftype = self.scalar_type(dtypes.float32 if single else dtypes.float64)
        f = "f" if single else ""
        # in float no value lies strictly between -2^31-1 and -2^31, so ">= -2^31" is the same test
        low32 = f"x >= -2147483648.0{f}" if single else "x > -2147483649.0"
        name = f"{'float32' if single else 'float'}_to_{dtype.name}"
        minimum64 = f"-9223372036854775807{self.dialect.long_suffix} - 1"
        if dtype.itemsize <= 4 and dtype is not dtypes.uint32:
            body = f"return ({t})(({low32} && x < 2147483648.0{f}) ? ({i32})x : ({i32})(-2147483647 - 1));"
        elif dtype is dtypes.uint64:
            body = (
                f"if (x >= 9223372036854775808.0{f} && x < 18446744073709551616.0{f}) return ({u64})x;\n"
                f"  return ({u64})((x >= -9223372036854775808.0{f} && x < 9223372036854775808.0{f}) ? "
                f"({i64})x : ({i64})({minimum64}));"
            )
        else:
            body = (
                f"return ({t})((x >= -9223372036854775808.0{f} && x < 9223372036854775808.0{f}) ? ({i64})x : "
                f"({i64})({minimum64}));"
            )
        prefix = self.dialect.helper_prefix
        return self.helper(name, lambda: f"{prefix} {t} {name}({ftype} x) {{\n  {body}\n}}")

    def helper_bfloat16(self) -> tuple[str, str]:
        """Helpers converting bfloat16 bits to float and float to bfloat16 bits (round to nearest even)."""
        dialect = self.dialect
        u16, u32 = self.memory_type(dtypes.bfloat16), self.scalar_type(dtypes.uint32)
        if dialect.bits_as_float is not None:
            widen = f"return {dialect.bits_as_float.format(f'({u32})h << 16')};"
        else:
            widen = f"{u32} u = ({u32})h << 16; float f; {dialect.copy}(&f, &u, 4); return f;"
        if dialect.float_as_bits is not None:
            bits = f"{u32} u = {dialect.float_as_bits.format('f')};"
        else:
            bits = f"{u32} u; {dialect.copy}(&u, &f, 4);"
        to_float = self.helper(
            "bf16_to_float",
            lambda: f"{dialect.helper_prefix} float bf16_to_float({u16} h) {{ {widen} }}",
        )
        from_float = self.helper(
            "float_to_bf16",
            lambda: (
                f"{dialect.helper_prefix} {u16} float_to_bf16(float f) {{\n"
                f"  {bits}\n"
                f"  if ((u & 0x7fffffffu) > 0x7f800000u)  /* NaN: keep it quiet */\n"
                f"    return ({u16})((u >> 16) | 0x40u);\n"
                f"  u += 0x7fffu + ((u >> 16) & 1u);\n"
                f"  return ({u16})(u >> 16);\n"
                f"}}"
            ),
        )
        return to_float, from_float

    def helper_vector_load(self, dtype: DType) -> str:
        """``load_<vec>(pointer)``: contiguous unaligned vector load."""
        vtype, element = self.vector_type(dtype), self.memory_type(dtype.scalar)
        size = dtype.count * dtype.scalar.itemsize
        return self.helper(
            f"load_{vtype}",
            lambda: (
                f"{self.dialect.helper_prefix} {vtype} load_{vtype}(const {element}* p) {{ {vtype} v; "
                f"__builtin_memcpy(&v, p, {size}); return v; }}"
            ),
        )

    def helper_vector_store(self, dtype: DType) -> str:
        """``store_<vec>(pointer, value)``: contiguous unaligned vector store."""
        vtype, element = self.vector_type(dtype), self.memory_type(dtype.scalar)
        size = dtype.count * dtype.scalar.itemsize
        return self.helper(
            f"store_{vtype}",
            lambda: (
                f"{self.dialect.helper_prefix} void store_{vtype}({element}* p, {vtype} v) {{ "
                f"__builtin_memcpy(p, &v, {size}); }}"
            ),
        )

    # -- scalar expressions ---------------------------------------------------------------------
    def wrapping(self, dtype: DType) -> bool:
        """True when arithmetic on ``dtype`` must be done unsigned to wrap without UB."""
        return dtype.kind is DTypeKind.SIGNED

    def alu_expression(self, op: Ops, dtype: DType, operands: Sequence[str], uop: UOp) -> str:
        """The C expression of one scalar ALU op; ``dtype`` is the operands' scalar dtype."""
        a = operands[0]
        b = operands[1] if len(operands) > 1 else ""
        t = self.scalar_type(dtype)
        if dtype.is_bool and op in (Ops.ADD, Ops.MAX, Ops.OR):
            return f"({a} | {b})"
        if dtype.is_bool and op in (Ops.MUL, Ops.AND):
            return f"({a} & {b})"
        if op in (Ops.ADD, Ops.SUB, Ops.MUL) and self.wrapping(dtype):
            u = self._unsigned_name(dtype)
            symbol = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*"}[op]
            return f"(({t})(({u}){a} {symbol} ({u}){b}))"
        simple = {
            Ops.ADD: "+",
            Ops.SUB: "-",
            Ops.MUL: "*",
            Ops.DIV: "/",
            **C_COMPARISONS,
            Ops.XOR: "^",
            Ops.OR: "|",
            Ops.AND: "&",
        }
        if op in simple:
            return f"({a} {simple[op]} {b})"
        if op is Ops.NEG:
            if self.wrapping(dtype):
                return f"(({t})(({self._unsigned_name(dtype)})0 - ({self._unsigned_name(dtype)}){a}))"
            return f"(-{a})" if not dtype.is_bool else a
        if op is Ops.NOT:
            return f"(!{a})" if dtype.is_bool else f"(({t})~{a})"
        if op is Ops.MAX:
            if dtype.is_float:
                return f"{self.helper_max(dtype)}({a}, {b})"
            return f"({a} > {b} ? {a} : {b})"
        if op in (Ops.IDIV, Ops.MOD):
            if dtype is dtypes.index and uop.src[0].vmin >= 0 and uop.src[1].vmin > 0:
                return f"({a} {'/' if op is Ops.IDIV else '%'} {b})"
            helper = self.helper_idiv(dtype) if op is Ops.IDIV else self.helper_mod(dtype)
            return f"{helper}({a}, {b})"
        if op in (Ops.SHL, Ops.SHR):
            if dtype is dtypes.index:
                return f"({a} {'<<' if op is Ops.SHL else '>>'} {b})"
            return f"{self.helper_shift(op, dtype)}({a}, {b})"
        if op is Ops.WHERE:
            return f"({a} ? {b} : {operands[2]})"
        if op is Ops.RECIP:
            return f"({self.const(1.0, dtype)} / {a})"
        if op is Ops.MULACC:
            return f"({a} * {b} + {operands[2]})"
        if op in self.dialect.math_functions:
            if not dtype.is_float:
                raise RenderError(f"{self.dialect.name}: {op.name} of {dtype.name}")
            return self.math_call(op, dtype, operands)
        raise RenderError(
            f"{self.dialect.name}: cannot render {op.name} (Instruction Selection should have "
            f"decomposed it for this backend)"
        )

    # -- types held in float variables (bfloat16 everywhere; float16 where the dialect lacks it) --------
    def held_as_float(self, dtype: DType) -> bool:
        """True when values of ``dtype`` live in float variables, rounded after every op."""
        return dtype.scalar.name in self.dialect.held_as_float

    def round_to(self, expression: str, dtype: DType) -> str:
        """A float expression rounded to the precision of ``dtype`` (one held as float)."""
        to_float, from_float = self.helper_bfloat16()
        return f"{to_float}({from_float}({expression}))"

    def load_element(self, buffer: str, offset: str, dtype: DType) -> str:
        """The value of element ``offset`` of ``buffer`` (of scalar ``dtype``)."""
        if dtype.scalar is dtypes.bfloat16:
            to_float, _ = self.helper_bfloat16()
            return f"{to_float}({buffer}[{offset}])"
        return self.element_value(f"{buffer}[{offset}]", dtype.scalar)

    def store_element(self, buffer: str, offset: str, value: str, dtype: DType) -> str:
        """The statement storing ``value`` to element ``offset`` of ``buffer``."""
        if dtype.scalar is dtypes.bfloat16:
            _, from_float = self.helper_bfloat16()
            return f"{buffer}[{offset}] = {from_float}({value});"
        return f"{buffer}[{offset}] = {self.element_store_value(value, dtype.scalar)};"

    def cast_expression(self, value: str, source: DType, target: DType) -> str:
        """A scalar conversion with numpy's semantics."""
        dialect = self.dialect
        if (
            dialect.float16_widen is not None
            and source is dtypes.float16
            and target != source
            and not target.is_float
        ):
            value, source = dialect.float16_widen.format(value), dtypes.float32
        if dialect.float16_narrow is not None and target is dtypes.float16 and source != target:
            return dialect.float16_narrow.format(value)
        if source == target:
            return value
        t = self.scalar_type(target)
        if target.is_bool:
            return f"({value} != 0)"
        if self.held_as_float(source):
            source = dtypes.float32
        if self.held_as_float(target):
            return self.round_to(f"(float){value}", target)
        if source.is_float and target.is_int:
            if source is dtypes.float32:
                return f"{self.helper_float_to_int(target, dtypes.float32)}({value})"
            return f"{self.helper_float_to_int(target)}(({self.scalar_type(dtypes.float64)}){value})"
        return f"(({t}){value})"

    # -- memory and vector hooks ----------------------------------------------------------------
    def element_value(self, text: str, dtype: DType) -> str:
        """An element read from memory as a value (bools as the dialect stores them)."""
        return self.dialect.bool_element_value.format(text) if dtype.is_bool else text

    def element_store_value(self, value: str, dtype: DType) -> str:
        """A value converted to the element type it is stored as."""
        return self.dialect.bool_element_store.format(value) if dtype.is_bool else value

    def vector_wrapping(self, op: Ops, a: str, b: str, dtype: DType, unsigned: DType) -> str:
        """Wrapping vector arithmetic through the unsigned vector type (a bit reinterpretation)."""
        unsigned_type = self.vector_type(unsigned)  # (first: the order its typedef is emitted in)
        names = {"type": self.vector_type(dtype), "unsigned": unsigned_type, "a": a, "b": b}
        if op is Ops.NEG:
            return self.dialect.vector_wrapping_negate.format(**names)
        symbol = {Ops.ADD: "+", Ops.SUB: "-", Ops.MUL: "*"}[op]
        return self.dialect.vector_wrapping_binary.format(op=symbol, **names)

    def vector_cast(self, value: str, source: DType, target: DType) -> str:
        """A lane-wise conversion: int↔float and float↔float as one whole-vector conversion where
        the dialect has one, else lane by lane."""
        s, t = source.scalar, target.scalar
        dialect = self.dialect
        index_ok = dialect.vector_convert_index
        plain = (
            (s.is_int and t.is_float and (index_ok or s is not dtypes.index))
            or (s.is_float and t.is_float)
            or (s.is_int and t.is_int and (index_ok or (s is not dtypes.index and t is not dtypes.index)))
        )
        if (
            dialect.vector_convert is not None
            and plain
            and self.vectors_native(source)
            and self.vectors_native(target)
            and not self.held_as_float(s)
            and not self.held_as_float(t)
            and self.padded_count(source.count) == self.padded_count(target.count)
        ):
            return dialect.vector_convert.format(value=value, type=self.vector_type(target))
        items = [self.cast_expression(self.lane(value, i, source), s, t) for i in range(target.count)]
        return self.vector_literal(target, items)

    def render_wmma(
        self, state: CFamilyRenderState, u: UOp, config: TensorCore, a: str, b: str, c: str
    ) -> None:
        """WMMA lowered to scalar multiply-adds (CPU backends emulate one-thread tiles)."""
        render_wmma_scalar(self, state, u, config, a, b, c)

    # -- the entry point ----------------------------------------------------------------------
    _state: CFamilyRenderState | None = None

    def render(self, linear: UOp) -> str:
        """The source of a LINEAR program (its arg is the kernel name)."""
        if linear.op is not Ops.LINEAR:
            raise RenderError(f"{self.dialect.name}: render takes a LINEAR program, got {linear.op.name}")
        state = CFamilyRenderState(self, linear)
        previous, self._state = self._state, state
        try:
            return state.run()
        finally:
            self._state = previous

    def assemble(self, state: CFamilyRenderState, signature: str, body: list[str], meta: KernelMeta) -> str:
        """The whole source file from its parts."""
        out = [f"{self.dialect.comment} {meta.to_comment_text()}", *self.includes()]
        out += list(state.typedefs.values())
        out += list(state.helpers.values())
        out += [signature + " {", *state.top_lines, *body, "}", ""]
        return "\n".join(out)


class CFamilyRenderState(LinearRenderState):
    """One rendering of one LINEAR program in a C-family dialect (names, scopes, emitted lines)."""

    def __init__(self, renderer: CStyleRenderer, linear: UOp):
        super().__init__(linear)
        self.r = renderer
        self.addresses: dict[UOp, Address]  # (made by LinearRenderState: what each INDEX addresses)
        self.scopes: list[Scope] = [Scope(None, "function", 0)]
        self.lines: list[str] = []
        self.top_lines: list[str] = []
        self.typedefs: dict[str, str] = {}
        self.helpers: dict[str, str] = {}
        self.parallel_depth = 0
        self.register_scopes: dict[UOp, tuple[UOp | None, ...]] = {}
        self.pending_registers: dict[UOp | None, list[UOp]] = {}
        self.register_widths: dict[UOp, int] = {}  # REG buffers kept in variables: lanes per variable
        self.vector_masks: dict[UOp, str] = {}  # vector comparisons: the 0/-1 mask variable of each

    # -- bookkeeping --------------------------------------------------------------------------
    @property
    def dialect(self) -> str:
        return self.r.dialect.name

    def emit(self, line: str) -> None:
        self.lines.append("  " * len(self.scopes) + line)

    def ref(self, u: UOp) -> str:
        """The name of an earlier uop's value, checking it is in scope here."""
        u = u.src[0] if u.op is Ops.AFTER and u not in self.names else u
        if u.op is Ops.CONST:
            return self.r.const(u.arg[0], u.dtype)
        if u not in self.names:
            if u.op is Ops.INDEX and u in self.addresses:
                return self.address_expression(self.addresses[u])
            raise self.fail(
                u,
                f"uses a {u.op.name} that was not rendered before it (is it missing from "
                f"the LINEAR, or placed after its user?)",
            )
        where = self.defined_in.get(u)
        here = self.scope_path()
        if where is not None and here[: len(where)] != where:
            raise self.fail(u, f"uses a {u.op.name} defined inside a loop or IF that is already closed")
        return self.names[u]

    def assign(self, u: UOp, prefix: str, expression: str) -> str:
        name = self.fresh(prefix)
        ctype = self.r.vector_type(u.dtype) if u.dtype.count > 1 else self.r.scalar_type(u.dtype)
        self.emit(f"{ctype} {name} = {expression};")
        return self.define(u, name)

    # -- passes -------------------------------------------------------------------------------
    def run(self) -> str:
        self.use_counts = Counter(s for u in self.program for s in u.src)
        # vector loads whose every use broadcasts one of their lanes (a conv's row of input columns,
        # each column broadcast against a vector of output channels): not pinned in a register, so
        # the C compiler broadcasts each lane from memory (a load port) instead of by shuffles
        lane_uses: dict[UOp, bool] = {}
        for u in self.program:
            for s in u.src:
                if s.op is Ops.LOAD and s.dtype.count > 1:
                    broadcast = u.op is Ops.GEP and len(set(u.arg)) == 1
                    lane_uses[s] = lane_uses.get(s, True) and broadcast
        self.broadcast_only = {load for load, only in lane_uses.items() if only}
        params = self.collect_params()
        self.plan_registers()
        meta_sizes = self.launch_sizes()
        for param, pname in params:
            self.names[self.param_uops[param.slot]] = pname
        live = live_uops(self.program)
        for position, u in enumerate(self.program):
            self.position = position
            if u in live:
                self.render_uop(u)
        if len(self.scopes) != 1:
            opener = self.scopes[-1].opener
            raise RenderError(
                f"{self.r.dialect.name}: kernel {self.linear.arg!r} ends with an open "
                f"{self.scopes[-1].kind} ({opener.op.name if opener is not None else '?'}); "
                f"an END or ENDIF is missing"
            )
        meta = KernelMeta(str(self.linear.arg), tuple(p for p, _ in params), *meta_sizes)
        signature = self.r.kernel_signature(meta.name, params)
        return self.r.assemble(self, signature, self.lines, meta)

    def plan_registers(self) -> None:
        """Each REG buffer is declared at the start of the innermost loop holding all its uses, so
        a thread of a parallel loop gets its own copy."""
        path: list[UOp | None] = [None]
        uses: dict[UOp, list[tuple[UOp | None, ...]]] = {}
        for u in self.program:
            for s in u.src:
                base = underlying_buffer(s)
                if base.op is Ops.BUFFER and base.arg.addrspace is AddrSpace.REG:
                    uses.setdefault(base, []).append(tuple(path))
            if u.op in (Ops.RANGE, Ops.IF):
                path.append(u)
            elif u.op in (Ops.END, Ops.ENDIF) and len(path) > 1:
                path.pop()
        for buffer, paths in uses.items():
            common = paths[0]
            for p in paths[1:]:
                length = 0
                while length < min(len(common), len(p)) and common[length] is p[length]:
                    length += 1
                common = common[:length]
            # an IF scope is not a lifetime: declare at the enclosing loop
            while len(common) > 1 and common[-1].op is Ops.IF:
                common = common[:-1]
            self.register_scopes[buffer] = common
            self.pending_registers.setdefault(common[-1], []).append(buffer)
        self.register_widths = register_variable_widths(self.program)

    def launch_sizes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        groups, local, flat = [1, 1, 1], [1, 1, 1], {}
        for u in self.program:
            if u.op is not Ops.SPECIAL:
                continue
            bound = u.src[0]
            if bound.op is not Ops.CONST:
                raise self.fail(u, "a SPECIAL's bound must be a constant (it is a launch size)")
            kind, dim = u.arg.rstrip("0123456789"), int(u.arg[len(u.arg.rstrip("0123456789")) :] or 0)
            if dim > 2:
                raise self.fail(u, f"SPECIAL {u.arg}: at most 3 launch dimensions")
            if kind == "gidx":
                groups[dim] = int(bound.arg[0])
            elif kind == "lidx":
                local[dim] = int(bound.arg[0])
            elif kind == "idx":
                flat[dim] = int(bound.arg[0])
            else:
                raise self.fail(u, f"SPECIAL name {u.arg!r}: expected gidxN, lidxN or idxN")
        for dim, total in flat.items():
            if total % local[dim]:
                raise RenderError(
                    f"{self.r.dialect.name}: idx{dim} bound {total} is not a multiple of the local "
                    f"size {local[dim]}"
                )
            groups[dim] = total // local[dim]
        return tuple(groups), tuple(local)

    def declare_registers(self, opener: UOp | None) -> None:
        for buffer in self.pending_registers.pop(opener, []):
            name = self.define(buffer, self.fresh("acc"))
            width = self.register_widths.get(buffer)
            if width is None:
                self.emit(self.r.register_declaration(buffer.arg.dtype, name, buffer.arg.size))
                continue
            dtype = buffer.arg.dtype.scalar
            ctype = self.r.vector_type(dtype.vec(width)) if width > 1 else self.r.scalar_type(dtype)
            variables = ", ".join(f"{name}_{slot}" for slot in range(buffer.arg.size // width))
            self.emit(f"{ctype} {variables};")

    # -- per op -------------------------------------------------------------------------------
    def render_uop(self, u: UOp) -> None:
        op = u.op
        if self.position == 0 or not self.lines:
            self.declare_registers(None)
        handler = _HANDLERS.get(op)
        if handler is not None:
            handler(self, u)
            return
        if op in GroupOp.ELEMENTWISE:
            self.render_alu(u)
            return
        raise self.fail(u, f"{op.name} cannot appear in a linear program for this backend")

    def render_param(self, u: UOp) -> None:
        return None  # named in run(); the argument list declares it

    def render_buffer(self, u: UOp) -> None:
        space = u.arg.addrspace
        if space is AddrSpace.REG:
            return None  # declared where plan_registers decided
        if space is AddrSpace.LOCAL:
            name = self.define(u, self.fresh("temp"))
            declaration = self.r.local_declaration(u.arg.dtype, name, u.arg.size)
            if self.r.dialect.locals_at_top:
                self.defined_in[u] = (0,)
                self.top_lines.append("  " + declaration)
            else:
                self.emit(declaration)
            return None
        raise self.fail(u, "a GLOBAL BUFFER inside a kernel must be a PARAM")

    def render_nothing(self, u: UOp) -> None:
        return None

    def render_special(self, u: UOp) -> None:
        ctype = self.r.scalar_type(dtypes.index)
        uses_local = any(s.op is Ops.SPECIAL and s.arg.startswith("lidx") for s in self.program)
        self.emit(
            f"{ctype} {u.arg} = {self.r.special(u.arg, uses_local)};  {self.r.dialect.comment} 0 .. "
            f"{u.src[0].arg[0] - 1}"
        )
        self.define(u, u.arg)

    def render_range(self, u: UOp) -> None:
        number, axis_type = u.arg
        name = self.fresh("ridx")
        bound = self.ref(u.src[0])
        parallel = (
            axis_type is AxisType.THREAD
            and self.parallel_depth == 0
            and self.r.dialect.parallel_pragma is not None  # (dialects without one run it sequentially)
        )
        header = self.r.range_header(u, name, bound, parallel)
        comment = f"  {self.r.dialect.comment} {axis_type.name}"
        for line in header[:-1]:
            self.emit(line)
        self.emit(header[-1] + comment)
        self.define(u, name)
        self.scope_numbers += 1
        self.scopes.append(Scope(u, "range", self.scope_numbers))
        if parallel:
            self.parallel_depth = len(self.scopes)
        self.declare_registers(u)

    def render_end(self, u: UOp) -> None:
        ranges = [s for s in u.src if s.op is Ops.RANGE]
        if not ranges:
            raise self.fail(u, "END needs its RANGE as a source")
        target = ranges[-1]
        if self.scopes[-1].opener is not target:
            open_one = self.scopes[-1].opener
            raise self.fail(
                u,
                f"END closes range {target.arg[0]} but the innermost open block is "
                f"{'the function' if open_one is None else open_one.op.name}",
            )
        if self.parallel_depth == len(self.scopes):
            self.parallel_depth = 0
        self.scopes.pop()
        self.emit("}")

    def render_if(self, u: UOp) -> None:
        gate = self.ref(u.src[0])
        self.emit(f"if ({gate}) {{")
        self.scope_numbers += 1
        self.scopes.append(Scope(u, "if", self.scope_numbers))
        self.declare_registers(u)

    def render_endif(self, u: UOp) -> None:
        if self.scopes[-1].opener is not u.src[0]:
            raise self.fail(u, "ENDIF does not close the innermost open IF")
        self.scopes.pop()
        self.emit("}")

    def render_barrier(self, u: UOp) -> None:
        self.emit(self.r.barrier())

    def render_vectorize(self, u: UOp) -> None:
        lanes = [(s.src[0], s.arg[0]) if s.op is Ops.GEP and len(s.arg) == 1 else (None, 0) for s in u.src]
        if self.render_lane_runs(u, lanes):
            return
        items = [self.ref(s) for s in u.src]
        self.assign(u, "vec", self.r.vector_literal(u.dtype, items))

    def render_lane_runs(self, u: UOp, lanes: list[tuple[UOp | None, int]]) -> bool:
        """Render vector ``u`` made of ``lanes`` (source vector, lane) as copies of runs of
        consecutive lanes where the dialect can (True), when the runs are fewer than the lanes."""
        if u.dtype.scalar.is_bool or any(
            source is None or source.dtype.count == 1 or source.op is Ops.VECTORIZE for source, _ in lanes
        ):
            return False
        runs: list[list] = []
        for source, lane in lanes:
            if runs and runs[-1][0] is source and runs[-1][1] + runs[-1][2] == lane:
                runs[-1][2] += 1
            else:
                runs.append([source, lane, 1])
        if len(runs) == len(lanes):
            return False
        names = [self.ref(source) for source, _, _ in runs]
        if not all(name.isidentifier() for name in names):  # (a copy needs a variable to point at)
            return False
        rendered = self.r.vector_from_runs(u.dtype, [(name, first, count) for name, (_, first, count) in
                                                     zip(names, runs, strict=True)])
        if rendered is None:
            return False
        lines, name = rendered
        for line in lines:
            self.emit(line)
        self.define(u, name)
        return True

    def render_gep(self, u: UOp) -> None:
        source = u.src[0]
        if source.dtype.count == 1:
            lanes = [self.ref(source)] * len(u.arg)
        elif source.op is Ops.VECTORIZE:
            lanes = [self.ref(source.src[i]) for i in u.arg]
        else:
            if len(u.arg) > 1 and self.render_lane_runs(u, [(source, i) for i in u.arg]):
                return
            vector = self.ref(source)
            lanes = [self.r.lane(vector, i, source.dtype) for i in u.arg]
        if len(lanes) == 1:
            if source.op is Ops.VECTORIZE or source.dtype.count == 1:
                self.names[u] = lanes[0]
                self.defined_in[u] = self.defined_in.get(
                    source.src[u.arg[0]] if source.op is Ops.VECTORIZE else source, self.scope_path()
                )
                return
            self.assign(u, "gep", lanes[0])
            return
        self.assign(u, "gep", self.r.vector_literal(u.dtype, lanes))

    # -- memory -------------------------------------------------------------------------------
    def render_index(self, u: UOp) -> None:
        buffer_uop = underlying_buffer(u.src[0])
        if not _is_buffer_like(buffer_uop):
            raise self.fail(u, f"INDEX must address a PARAM or BUFFER, got {buffer_uop.op.name}")
        buffer = self.ref(buffer_uop)
        if len(u.src) != 2:
            raise self.fail(u, "INDEX in a linear program takes (buffer, flat index)")
        index = u.src[1]
        width = self.register_widths.get(buffer_uop)
        if width is not None:
            start = int(index.arg[0]) if index.dtype.count == 1 else contiguous_start(index)[1]
            self.addresses[u] = Address(
                buffer, buffer_uop, u.dtype, offset=str(start), variable=f"{buffer}_{start // width}"
            )
            return
        if index.dtype.count == 1:
            self.addresses[u] = Address(buffer, buffer_uop, u.dtype, offset=self.ref(index))
            return
        count = index.dtype.count
        found = contiguous_start(index)
        if found is not None:
            base, start = found
            if base is None:
                offset = str(start)
            else:
                offset = self.ref(base) if start == 0 else f"({self.ref(base)} + {start})"
            self.addresses[u] = Address(buffer, buffer_uop, u.dtype, offset=offset, base=base)
            return
        if index.op is Ops.VECTORIZE:
            offsets = [self.ref(s) for s in index.src]
        else:
            vector = self.ref(index)
            offsets = [self.r.lane(vector, i, index.dtype) for i in range(count)]
        self.addresses[u] = Address(buffer, buffer_uop, u.dtype, lanes=offsets)

    def address_of(self, u: UOp) -> Address:
        source = u.src[0]
        while source.op is Ops.AFTER:
            source = source.src[0]
        if source not in self.addresses:
            raise self.fail(
                u, f"{u.op.name} needs an INDEX rendered before it as its first source, got {source.op.name}"
            )
        return self.addresses[source]

    def address_expression(self, address: Address) -> str:
        if address.offset is None:
            raise RenderError(f"{self.r.dialect.name}: a gathered INDEX has no single address")
        return f"({address.buffer} + {address.offset})"

    def element(self, address: Address, offset: str) -> str:
        """A scalar element read, converted to its value type."""
        return self.r.load_element(address.buffer, offset, address.dtype.scalar)

    def render_load(self, u: UOp) -> None:
        address = self.address_of(u)
        dtype = u.dtype
        gate = self.ref(u.src[2]) if len(u.src) == 3 else None
        alt = self.ref(u.src[1]) if len(u.src) >= 2 else None
        if len(u.src) == 2:
            raise self.fail(u, "LOAD takes (index) or (index, alt, gate)")
        if address.variable is not None:  # a copy: a later STORE to the variable must not change it
            value = address.variable
            self.assign(u, "val", value if gate is None else f"({gate} ? {value} : {alt})")
            return
        if dtype.count == 1 or address.offset is not None and dtype.count == 1:
            value = self.element(address, address.offset)
            self.assign(u, "val", value if gate is None else f"({gate} ? {value} : {alt})")
            return
        gate_dtype = u.src[2].dtype if gate is not None else None
        if address.contiguous and (gate is None or gate_dtype.count == 1):
            self.prefetch(address)
            value = self.r.vector_load(address)
            name = self.assign(u, "val", value if gate is None else f"({gate} ? {value} : {alt})")
            pinned = self.use_counts[u] > 1 and u not in self.broadcast_only
            pin = self.r.register_pin(name) if pinned else None
            if pin is not None:
                self.emit(pin)
            return
        if address.contiguous and gate is not None:
            whole = self.gated_vector_load(u, address, gate, alt)
            if whole is not None:
                self.assign(u, "val", whole)
                return
        self.assign(u, "val", self.lane_by_lane_load(u, address, gate, alt))

    def lane_by_lane_load(self, u: UOp, address: Address, gate: str | None, alt: str | None) -> str:
        """A vector LOAD as one element read per lane, each behind its lane of the gate."""
        offsets = (
            address.lanes
            if address.lanes is not None
            else [f"{address.offset} + {i}" for i in range(u.dtype.count)]
        )
        items = []
        for i, offset in enumerate(offsets):
            value = self.element(address, offset)
            if gate is not None:
                lane_gate = self.r.lane(gate, i, u.src[2].dtype)
                value = f"({lane_gate} ? {value} : {self.r.lane(alt, i, u.src[1].dtype)})"
            items.append(value)
        return self.r.vector_literal(u.dtype, items)

    def gated_vector_load(self, u: UOp, address: Address, gate: str, alt: str) -> str | None:
        """A contiguous vector LOAD gated lane by lane (zero padding: the lanes past an edge of the
        padded input are off) as one whole-vector load and a select of its lanes, where every lane
        lies inside the buffer; the lane-by-lane reads remain for the vectors that cross an end of
        the buffer.  Reading an element whose lane is off is harmless there (its value is never
        used, and it is in the buffer), while a read per lane behind its own test kept pocl's and
        GCC's vectorisers off the loop (measured: conv2d on pocl 2.3x the C backend's time).
        None when the dialect has no whole-vector select for these dtypes, the buffer's size is
        unknown, or a constant start puts the vector outside the buffer."""
        count = u.dtype.count
        if not self.r.selects_lanes(u.dtype) or {u.src[1].dtype.count, u.src[2].dtype.count} != {count}:
            return None
        elements = self.buffer_elements(address.buffer_uop)
        if elements is None or elements < count:
            return None
        last_start = elements - count  # the largest start whose vector ends inside the buffer
        if address.base is None and not 0 <= int(address.offset) <= last_start:
            return None  # a constant start outside: every lane is read on its own
        selected = self.r.select_lanes(gate, self.r.vector_load(address), alt, u.dtype)
        if address.base is None:
            return selected
        inside = f"(0 <= {address.offset} && {address.offset} <= {last_start})"
        return f"({inside} ? {selected} : {self.lane_by_lane_load(u, address, gate, alt)})"

    def buffer_elements(self, buffer_uop: UOp) -> int | None:
        """How many elements the kernel may read from a buffer: a PARAM's size as the kernel's
        metadata states it (every launch checks that its array holds that many), a LOCAL array's
        declared size; None where it is not known."""
        if buffer_uop.op is Ops.PARAM and buffer_uop.arg.dtype.count == 1:
            size = buffer_uop.shape[0] if buffer_uop.shape else 1
            return size if isinstance(size, int) else None
        if (
            buffer_uop.op is Ops.BUFFER
            and buffer_uop.arg.addrspace is AddrSpace.LOCAL
            and buffer_uop.arg.dtype.count == 1
        ):
            return int(buffer_uop.arg.size)
        return None

    def prefetch(self, address: Address) -> None:
        """Before a contiguous vector load that jumps a kilobyte or more per iteration of its loop (a
        column strip of a row-major matrix), prefetch the vector a few iterations ahead: each
        iteration touches a new page, where hardware prefetchers lose the stream (measured: gemm
        1024, 34 → 52 GFLOP/s on one core)."""
        if address.base is None or address.buffer_uop.op is not Ops.PARAM:
            return
        loop = next((scope.opener for scope in reversed(self.scopes) if scope.kind == "range"), None)
        if loop is None:
            return
        stride = linear_coefficient(address.base, loop)
        if stride is None or abs(stride) * address.dtype.scalar.itemsize < PREFETCH_MIN_STRIDE_BYTES:
            return
        ahead = f"{address.buffer} + {address.offset} + {PREFETCH_ITERATIONS * stride}"
        statement = self.r.prefetch_statement(ahead)
        if statement:
            self.emit(statement)

    def render_store(self, u: UOp) -> None:
        address = self.address_of(u)
        value_uop = u.src[1]
        value = self.ref(value_uop)
        gate = self.ref(u.src[2]) if len(u.src) == 3 else None
        dtype = value_uop.dtype
        if address.variable is not None:
            statement = f"{address.variable} = {value};"
            self.emit(statement if gate is None else f"if ({gate}) {{ {statement} }}")
            return
        if dtype.count == 1:
            statement = self.r.store_element(address.buffer, address.offset, value, dtype)
            self.emit(statement if gate is None else f"if ({gate}) {statement}")
            return
        gate_dtype = u.src[2].dtype if gate is not None else None
        if address.contiguous and (gate is None or gate_dtype.count == 1):
            statement = self.r.vector_store(address, value)
            self.emit(statement if gate is None else f"if ({gate}) {{ {statement} }}")
            return
        offsets = (
            address.lanes
            if address.lanes is not None
            else [f"{address.offset} + {i}" for i in range(dtype.count)]
        )
        for i, offset in enumerate(offsets):
            statement = self.r.store_element(address.buffer, offset, self.r.lane(value, i, dtype), dtype)
            if gate is not None:
                statement = f"if ({self.r.lane(gate, i, gate_dtype)}) {statement}"
            self.emit(statement)

    # -- arithmetic ---------------------------------------------------------------------------
    def render_alu(self, u: UOp) -> None:
        op = u.op
        if op is Ops.THREEFRY:
            raise self.fail(u, "THREEFRY must be decomposed by Instruction Selection")
        operands = [self.ref(s) for s in u.src]
        operand_dtype = u.src[-1].dtype if op is Ops.WHERE else u.src[0].dtype
        scalar = operand_dtype.scalar
        count = u.dtype.count
        prefix = "alu"
        held = self.r.held_as_float(scalar) and op not in GroupOp.COMPARISON
        if count == 1:
            expression = self.r.alu_expression(op, scalar, operands, u)
            if held:
                expression = self.r.round_to(expression, scalar)
        elif (
            op in self.r.dialect.native_vector_ops
            and self.r.vectors_native(u.dtype)
            and not self.r.held_as_float(scalar)
            and not (scalar.is_bool and op in (Ops.ADD, Ops.MUL, Ops.NEG))
        ):
            expression = self.vector_alu(u, op, scalar, operands)
        elif op is Ops.WHERE and u.src[0].dtype.count == 1:
            expression = f"({operands[0]} ? {operands[1]} : {operands[2]})"
        elif (vector := self.r.vector_expression(u, operands)) is not None:
            expression = vector
        else:
            items = []
            for i in range(count):
                lanes = [self.r.lane(o, i, s.dtype) for o, s in zip(operands, u.src)]
                item = self.r.alu_expression(op, scalar, lanes, u)
                items.append(self.r.round_to(item, scalar) if held else item)
            expression = self.r.vector_literal(u.dtype, items)
        self.assign(u, prefix, expression)

    def vector_alu(self, u: UOp, op: Ops, scalar: DType, operands: list[str]) -> str:
        """A whole-vector expression (GCC/OpenCL vector arithmetic)."""
        a = operands[0]
        b = operands[1] if len(operands) > 1 else ""
        if self.r.wrapping(scalar) and op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.NEG):
            unsigned = dtypes.from_name(f"uint{scalar.bits}").vec(u.dtype.count)
            return self.r.vector_wrapping(op, a, b, u.dtype, unsigned)
        symbol = {
            Ops.ADD: "+",
            Ops.SUB: "-",
            Ops.MUL: "*",
            Ops.DIV: "/",
            Ops.AND: "&",
            Ops.OR: "|",
            Ops.XOR: "^",
        }
        if op in symbol:
            return f"({a} {symbol[op]} {b})"
        if op is Ops.NEG:
            return f"(-{a})"
        if op is Ops.RECIP:
            return f"({self.r.const(1.0, scalar)} / {a})"
        if op is Ops.MULACC:
            return f"({a} * {b} + {operands[2]})"
        raise self.fail(u, f"no vector form of {op.name}")

    def render_cast(self, u: UOp) -> None:
        source = u.src[0]
        value = self.ref(source)
        if u.dtype.count == 1:
            self.assign(u, "cast", self.r.cast_expression(value, source.dtype.scalar, u.dtype.scalar))
            return
        self.assign(u, "cast", self.r.vector_cast(value, source.dtype, u.dtype))

    def render_bitcast(self, u: UOp) -> None:
        source = u.src[0]
        if source.dtype.itemsize != u.dtype.itemsize:
            raise self.fail(u, f"BITCAST from {source.dtype.name} to {u.dtype.name} changes the size")
        lines, expression = self.r.bitcast(self.ref(source), source.dtype, u.dtype)
        for line in lines:
            self.emit(line)
        self.assign(u, "cast", expression)

    def render_wmma(self, u: UOp) -> None:
        config = u.arg
        if not isinstance(config, TensorCore):
            raise self.fail(u, f"WMMA's arg must be a TensorCore, got {type(config).__name__}")
        a, b, c = (self.ref(s) for s in u.src)
        self.r.render_wmma(self, u, config, a, b, c)

    def render_custom(self, u: UOp) -> None:
        text = self.custom_text(u)
        if u.dtype is dtypes.void:
            self.emit(text if text.rstrip().endswith((";", "}")) else text + ";")
            return
        self.assign(u, "custom", text)


_HANDLERS: dict[Ops, Callable[[CFamilyRenderState, UOp], None]] = {
    Ops.PARAM: CFamilyRenderState.render_param,
    Ops.BUFFER: CFamilyRenderState.render_buffer,
    Ops.CONST: CFamilyRenderState.render_nothing,
    Ops.SINK: CFamilyRenderState.render_nothing,
    Ops.GROUP: CFamilyRenderState.render_nothing,
    Ops.AFTER: CFamilyRenderState.render_after,
    Ops.SPECIAL: CFamilyRenderState.render_special,
    Ops.RANGE: CFamilyRenderState.render_range,
    Ops.END: CFamilyRenderState.render_end,
    Ops.IF: CFamilyRenderState.render_if,
    Ops.ENDIF: CFamilyRenderState.render_endif,
    Ops.BARRIER: CFamilyRenderState.render_barrier,
    Ops.VECTORIZE: CFamilyRenderState.render_vectorize,
    Ops.GEP: CFamilyRenderState.render_gep,
    Ops.INDEX: CFamilyRenderState.render_index,
    Ops.LOAD: CFamilyRenderState.render_load,
    Ops.STORE: CFamilyRenderState.render_store,
    Ops.CAST: CFamilyRenderState.render_cast,
    Ops.BITCAST: CFamilyRenderState.render_bitcast,
    Ops.WMMA: CFamilyRenderState.render_wmma,
    Ops.CUSTOM: CFamilyRenderState.render_custom,
}


#: the C math library's functions by op (float64; their float32 forms add an "f")
MATH_LIBRARY = {
    Ops.SQRT: "sqrt",
    Ops.EXP2: "exp2",
    Ops.LOG2: "log2",
    Ops.SIN: "sin",
    Ops.TRUNC: "trunc",
    Ops.POW: "pow",
}

#: comparison operators of C (also lane-wise on GCC vectors, giving 0/-1 lanes)
C_COMPARISONS = {
    Ops.CMP_LT: "<",
    Ops.CMP_NE: "!=",
    Ops.CMP_GT: ">",
    Ops.CMP_GE: ">=",
    Ops.CMP_LE: "<=",
    Ops.CMP_EQ: "==",
}


def render_wmma_scalar(
    renderer: CStyleRenderer, state: CFamilyRenderState, u: UOp, config: TensorCore, a: str, b: str, c: str
) -> None:
    """Emit ``D = A @ B + C`` of a one-thread tile, one output lane per line."""
    if config.threads != 1:
        raise state.fail(
            u,
            f"tensor core {config.name} spreads a tile over {config.threads} lanes; the "
            f"{renderer.dialect.name} backend emulates only one-thread tiles",
        )
    a_dtype, b_dtype, c_dtype = (s.dtype for s in u.src)
    if (
        a_dtype.count != config.elements("a")
        or b_dtype.count != config.elements("b")
        or c_dtype.count != config.elements("c")
    ):
        raise state.fail(
            u,
            f"WMMA {config.name} takes vectors of {config.elements('a')}, "
            f"{config.elements('b')} and {config.elements('c')} lanes, got "
            f"{a_dtype.count}, {b_dtype.count} and {c_dtype.count}",
        )
    where_a = {coordinate: i for i, coordinate in enumerate(config.layout_a)}
    where_b = {coordinate: i for i, coordinate in enumerate(config.layout_b)}
    out_type = config.dtype_out
    name = state.fresh("wmma")
    state.emit(
        f"{renderer.vector_type(u.dtype)} {name};  {renderer.dialect.comment} {config.name}: "
        f"{config.dims[0]}x{config.dims[1]}x{config.dims[2]} tile as scalar multiply-adds"
    )
    for lane, (m, n) in enumerate(config.layout_c):
        terms = [renderer.lane(c, lane, c_dtype)]
        for k in range(config.dims[2]):
            left = renderer.cast_expression(
                renderer.lane(a, where_a[(m, k)], a_dtype), config.dtype_in, out_type
            )
            right = renderer.cast_expression(
                renderer.lane(b, where_b[(k, n)], b_dtype), config.dtype_in, out_type
            )
            terms.append(f"{left}*{right}")
        state.emit(f"{renderer.lane_target(name, lane, u.dtype)} = {' + '.join(terms)};")
    state.define(u, name)


