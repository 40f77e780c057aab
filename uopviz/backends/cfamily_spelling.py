"""How each piece of a C-family kernel (C, OpenCL C, CUDA C) is spelled: :class:`CSpelling` (types,
constants, declarations, expressions, the helper functions of the prelude) as its
:class:`~uopviz.backends.cfamily_dialect.CDialect` says.

The walk over the LINEAR program that asks it for each line is
:class:`~uopviz.backends.cfamily_state.CFamilyRenderState`; what the spelling records into that
rendering (typedefs, helpers, fresh names) it sees as a :class:`CRendering`.  The renderer the
backends hold, :class:`~uopviz.backends.cfamily.CStyleRenderer`, is a CSpelling that runs the
walk.  The integer semantics of kernel-ir.md are kept in C, where the language leaves them
undefined:

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from uopviz.backends.base import KernelMeta, KernelParam, RenderError, TensorCore
from uopviz.backends.cfamily_dialect import C_COMPARISONS, CDialect
from uopviz.core.dtype import DType, DTypeKind, dtypes
from uopviz.core.ops import Ops
from uopviz.core.uop import UOp


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


class CRendering(Protocol):
    """What the spelling records into the rendering in progress
    (:class:`~uopviz.backends.cfamily_state.CFamilyRenderState`) and asks of it."""

    linear: UOp  # the LINEAR program being rendered
    typedefs: dict[str, str]  # the vector types used, each declared once
    helpers: dict[str, str]  # the helper functions used, each defined once
    top_lines: list[str]  # declarations hoisted to the top of the function
    vector_masks: dict[UOp, str]  # vector comparisons: the 0/-1 mask variable of each
    register_tiles: dict  # loops written as assembly blocks, by RANGE (uopviz.backends.register_tile)

    def fresh(self, prefix: str) -> str:
        """A new name starting with ``prefix``."""

    def emit(self, line: str) -> None:
        """Write a line of the function's body."""

    def define(self, u: UOp, name: str) -> str:
        """Name ``u``'s value."""

    def assign(self, u: UOp, prefix: str, expression: str) -> str:
        """Declare a fresh variable holding ``expression`` as ``u``'s value."""

    def fail(self, u: UOp, problem: str) -> RenderError:
        """The error that ``u`` cannot be rendered, and why."""


class CSpelling:
    """How a C-family language spells each piece of a kernel: what it writes is spelled by the
    renderer's :class:`CDialect`; a dialect's renderer (a subclass of
    :class:`~uopviz.backends.cfamily.CStyleRenderer`) overrides the hooks below only where its
    output has another structure."""

    dialect: CDialect

    def __init__(self, tensor_cores: Sequence[TensorCore] = ()):
        self.tensor_cores = tuple(tensor_cores)

    #: the type of index values in the program being rendered (None: the dialect's)
    _index_type: str | None = None
    #: the rendering in progress (set by ``CStyleRenderer.render`` while it runs)
    _state: CRendering | None = None

    # -- types ------------------------------------------------------------------------------------
    def scalar_type(self, dtype: DType) -> str:
        """The type of a value of scalar ``dtype`` held in a variable (an index: the narrow index
        type when the program being rendered allows it)."""
        if self._index_type is not None and dtype.scalar is dtypes.index:
            return self._index_type
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

    def register_tile_lanes(self) -> int | None:
        """The float32 lanes of the register tiles this dialect writes as assembly blocks
        (:mod:`uopviz.backends.register_tile`), None where it writes none."""
        return None

    def lane_target(self, expression: str, index: int, dtype: DType) -> str:
        """An assignable lane of a vector variable (the lane expression itself in every dialect here)."""
        return self.lane(expression, index, dtype)

    def vector_from_runs(
        self, dtype: DType, runs: Sequence[tuple[str, int, int, int]]
    ) -> tuple[list[str], str] | None:
        """Statements and the name of a vector of ``dtype`` made of runs ``(vector variable, its lane
        count, first lane, lane count)`` of other vectors' lanes, in order; None where the dialect has no such
        form (the vector is then built lane by lane)."""
        return None

    #: whether :meth:`two_vector_shuffle` has a form in this dialect
    shuffles_two_vectors = False
    #: whether a broadcast-only vector LOAD of a read-only array (``LinearWalk.broadcast_only``) is
    #: written as one scalar read per broadcast lane rather than a vector load and lane extracts
    broadcasts_lanes_from_memory = False

    def two_vector_shuffle_fallback(self, dtype: DType, halves: Sequence[str], picks: Sequence[int]) -> str:
        """The expression :meth:`two_vector_shuffle` falls back to: lane ``picks[i]`` of the two
        vectors ``halves`` for each lane i, one by one."""
        count = dtype.count
        lanes = [self.lane(halves[pick >= count], pick % count, dtype) for pick in picks]
        return self.vector_literal(dtype, lanes)

    def two_vector_shuffle(
        self, dtype: DType, halves: Sequence[str], picks: Sequence[int], prefix: str = "even"
    ):
        """``(lines, name)``: a vector of ``dtype`` whose lane i is lane ``picks[i]`` of the two
        vectors ``halves`` (numbered on), ``lines(fallback, tail=())`` declaring it, with ``fallback``
        the expression for compilers without the shuffle and ``tail`` lanes ``(lane, value)`` set
        after it; None where the dialect has no shuffle."""
        return None

    def constant_vector(self, name: str, dtype: DType, items: Sequence[str]) -> tuple[str, str] | None:
        """A declaration of vector ``name`` of constant lanes ``items`` and the name to use, where the
        dialect declares such vectors apart (None: an ordinary assignment of the literal)."""
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
            if value == -(2**63):  # the literal 2**63 does not fit a signed 64-bit constant
                return f"({value + 1}{long_suffix}-1)"
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
            # a vector of lanes no register holds (a padded column of 7) stores its lanes only
            lanes = dtype.count if self.padded_count(dtype.count) != dtype.count else None
            return f"{self.helper_vector_store(dtype, lanes)}({pointer}, {value});"
        if dtype.scalar.is_bool:
            value = dialect.vector_bool_store.format(count=dtype.count, value=value)
        return dialect.vector_store.format(count=dtype.count, pointer=pointer, value=value)

    def prefix_vector_store(self, address: Address, value: str, lanes: int) -> str | None:
        """A statement storing the first ``lanes`` lanes of a vector variable ``value`` to contiguous
        elements (a row padded to a whole register: its lanes past the row are gated off by a
        constant gate), as one copy of their bytes; None where the dialect stores vectors otherwise
        (lane by lane, or with its own vector stores)."""
        dtype, dialect = address.dtype, self.dialect
        if self.struct_vector(dtype) or dialect.element_vectors or dialect.vector_store is not None:
            return None
        if not value.isidentifier():
            return None  # the copy takes the vector's address
        return f"{self.helper_vector_store(dtype, lanes)}({address.buffer} + {address.offset}, {value});"

    def prefix_vector_load(self, address: Address, alt: str, lanes: int) -> str | None:
        """An expression loading the first ``lanes`` lanes of a vector from contiguous elements and
        taking the rest from ``alt`` (a row padded to a whole register, read with its lanes past the
        row gated off by a constant gate) as one load that reads no element past them; None where
        the dialect has no such load (the gated load is then a whole-vector read behind a test of
        the buffer's end, or one read per lane)."""
        return None

    def bitcast(self, value: str, source: DType, target: DType) -> tuple[list[str], str]:
        """Statements and the expression reinterpreting ``value``'s bits as ``target``."""
        if self.held_as_float(source) or self.held_as_float(target):
            return self.bitcast_held(value, source, target)
        return self.bitcast_plain(value, source, target)

    def bitcast_held(self, value: str, source: DType, target: DType) -> tuple[list[str], str]:
        """A bitcast from or to a type held in float variables, lane by lane: the held value's own
        bits (its 16-bit element, not the float's) are reinterpreted, and 16 bits become a held value
        through the element's conversion (a float variable copied as 2 bytes gave its low half)."""
        bits = dtypes.uint16  # the held types are the 16-bit floats; their elements are 16 bits
        lines: list[str] = []
        lanes = []
        for i in range(target.count):
            lane, lane_source = self.lane(value, i, source), source.scalar
            if self.held_as_float(lane_source):
                lane, lane_source = self.bits_variable(lines, self.held_bits(lines, lane, lane_source)), bits
            if self.held_as_float(target):
                more, lane = self.bitcast_plain(lane, lane_source, bits)
                lines += more
                lane = self.held_value(lines, self.bits_variable(lines, lane), target.scalar)
            else:
                more, lane = self.bitcast_plain(lane, lane_source, target.scalar)
                lines += more
            lanes.append(lane)
        return lines, lanes[0] if target.count == 1 else self.vector_literal(target, lanes)

    def bits_variable(self, lines: list[str], expression: str) -> str:
        """A uint16 variable holding ``expression`` (a byte copy and ``&`` need a variable)."""
        if expression.isidentifier():
            return expression
        name = self._state.fresh("bits")
        lines.append(f"{self.scalar_type(dtypes.uint16)} {name} = {expression};")
        return name

    def held_bits(self, lines: list[str], value: str, dtype: DType) -> str:
        """The 16 bits of a scalar ``value`` of ``dtype`` held as float (statements go to ``lines``)."""
        if dtype is not dtypes.bfloat16:
            raise RenderError(f"{self.dialect.name}: no bits of {dtype.name} held as float")
        _, from_float = self.helper_bfloat16()
        return f"{from_float}({value})"

    def held_value(self, lines: list[str], bits: str, dtype: DType) -> str:
        """The float held value of ``dtype`` whose 16 bits are variable ``bits``."""
        if dtype is not dtypes.bfloat16:
            raise RenderError(f"{self.dialect.name}: no {dtype.name} value held as float from bits")
        to_float, _ = self.helper_bfloat16()
        return f"{to_float}({bits})"

    def bitcast_plain(self, value: str, source: DType, target: DType) -> tuple[list[str], str]:
        """A bitcast between types whose variables hold their own bits."""
        if source == target:
            return [], value
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
                f"  {u32} rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;\n"
                f"  {u32} quiet = (u >> 16) | 0x40u;  /* NaN: keep it quiet */\n"
                f"  return ({u16})(((u & 0x7fffffffu) > 0x7f800000u) ? quiet : rounded);\n"
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

    def helper_vector_store(self, dtype: DType, lanes: int | None = None) -> str:
        """``store_<vec>(pointer, value)``: contiguous unaligned vector store (of its first ``lanes``
        lanes only: ``store_<vec>_first<lanes>``)."""
        vtype, element = self.vector_type(dtype), self.memory_type(dtype.scalar)
        size = (dtype.count if lanes is None else lanes) * dtype.scalar.itemsize
        name = f"store_{vtype}" if lanes is None else f"store_{vtype}_first{lanes}"
        copy = f"__builtin_memcpy(p, &v, {size});"
        signature = f"{self.dialect.helper_prefix} void {name}({element}* p, {vtype} v)"
        if lanes is None or dtype.scalar.is_bool:
            return self.helper(name, lambda: f"{signature} {{ {copy} }}")
        return self.helper(name, lambda: "\n".join([
            f"{signature} {{",
            "#if defined(__clang__) || __GNUC__ >= 12",
            *(f"  {line}" for line in self._prefix_chunk_stores(dtype, lanes)),
            "#else",
            f"  {copy}",
            "#endif",
            "}",
        ]))

    def _prefix_chunk_stores(self, dtype: DType, lanes: int) -> list[str]:
        """The statements storing the first ``lanes`` lanes of ``v`` (a ``dtype`` vector) to ``p`` as
        whole vectors of power-of-two lanes, largest first (7 as 4 + 2 + 1), each its lanes shuffled
        out of ``v``.  GCC copied the lanes' bytes (one ``memcpy``) through the stack: a 32-byte
        store and overlapping narrower loads, a store-forwarding stall a row: MobileNet-v2's
        depthwise convs at 7x7 (rows of 7 as 8 lanes), 960 channels alone on random arrays (Sapphire
        Rapids, 2 cores) 23 -> 13 us, the same as AVX-512's masked store."""
        itemsize, statements, first = dtype.scalar.itemsize, [], 0
        while first < lanes:
            count = 1 << ((lanes - first).bit_length() - 1)
            if count == 1:
                statements.append(f"p[{first}] = v[{first}];")
            else:
                chunk = self.vector_type(dtype.scalar.vec(count))
                picks = ", ".join(str(first + lane) for lane in range(count))
                statements += [f"{chunk} part{first} = __builtin_shufflevector(v, v, {picks});",
                               f"__builtin_memcpy(p + {first}, &part{first}, {count * itemsize});"]
            first += count
        return statements

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

    def render_wmma(self, state: CRendering, u: UOp, config: TensorCore, a: str, b: str, c: str) -> None:
        """WMMA of a tile spread over the lanes of a warp, as the dialect's tensor-core instruction
        (a one-thread tile the walk writes as scalar multiply-adds); the CPU dialects have none."""
        raise state.fail(
            u,
            f"tensor core {config.name} spreads a tile over {config.threads} lanes; the "
            f"{self.dialect.name} backend emulates only one-thread tiles",
        )

    def assemble(self, state: CRendering, signature: str, body: list[str], meta: KernelMeta) -> str:
        """The whole source file from its parts."""
        out = [f"{self.dialect.comment} {meta.to_comment_text()}", *self.includes()]
        out += self.directives(state)
        out += list(state.typedefs.values())
        out += list(state.helpers.values())
        out += [signature + " {", *state.top_lines, *body, "}", ""]
        return "\n".join(out)

    def directives(self, state: CRendering) -> list[str]:
        """Compiler directives after the includes, for the helpers and the kernel alike (a helper
        compiled with other options than its caller may not be inlined); none by default."""
        return []
