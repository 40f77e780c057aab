"""How a C-family language spells what the C-family renderer writes: :class:`CDialect` (the data
that tells C, OpenCL C and CUDA C apart; each backend module holds its instance), and the C math
library's function names and comparison operators the dialects share."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from uopviz.core.ops import Ops


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
    #: the type of index values in a kernel whose every buffer and index value fits in int32
    #: (:func:`~uopviz.backends.cfamily.indices_fit_int32`); None: always ``scalar_types["index"]``
    narrow_index_type: str | None = None
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
