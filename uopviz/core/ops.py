"""The ops of the UOp dialect, their families (with the spec's colours) and the AxisTypes.

Every op of ``uop-dialect.tex`` is here under the upper-snake-case of its name.  ``COPY`` is
kept as the name of a device-changing load (see ``shared/spec/README.md``).  Two codegen ops
are ours, beyond the card: ``VECTORIZE`` (build a vector from lanes) and ``GEP`` (take lanes
of a vector); the Expand stage needs them to turn UPCAST ranges into vector lanes.  Two
decomposed elementwise ops are ours too: ``COS`` and ``TAN``.  The card composes cos as
``sin(π/2 - x)``, whose rounded subtraction loses every correct digit for large ``|x|``; as
ops of their own they are decomposed by Instruction Selection with SIN's exact argument
reduction (``uopviz.passes.isel``), so they are as accurate as SIN on every backend.  ``EXP`` and
``LOG`` (the natural exponential and logarithm) are ours as well: the card has only EXP2 and LOG2,
so ``Tensor.exp()`` would be a dozen bit operations in the graph a student reads; as ops of their
own they stay one node until Instruction Selection writes them out (``uopviz.core.exp_log``).
"""

from __future__ import annotations

import enum


class OpFamily(enum.Enum):
    """The op families of the spec, each with the colour its section header uses.

    Source and Codegen have no colour in the card; they get neutral greys.
    """

    SOURCE = ("Source", "#455A64")
    MOVEMENT = ("Movement", "#2E7D32")  # movgreen
    REDUCE = ("Reduce", "#C62828")  # reducered
    CALL = ("Call", "#1565C0")  # callblue
    LOAD = ("Load", "#C08080")  # loadred
    STORE = ("Store", "#7B1FA2")  # multipurple
    ORDERING = ("Ordering", "#795548")  # assignbrown
    ELEMENTWISE = ("Elementwise", "#F9A825")  # elwyellow
    MARKER = ("Marker", "#E65100")  # markerorange
    CODEGEN = ("Codegen", "#90A4AE")

    @property
    def title(self) -> str:
        """The family's name as the spec's section title writes it."""
        return self.value[0]

    @property
    def color(self) -> str:
        """The family's colour as ``#RRGGBB``."""
        return self.value[1]


class AxisType(enum.Enum):
    """The type of a kernel Range: how that loop is executed (the spec's AxisType table)."""

    GLOBAL = ("g", "#1565C0")
    LOCAL = ("l", "#00838F")
    WARP = ("w", "#00ACC1")
    THREAD = ("t", "#42A5F5")
    LOOP = ("L", "#616161")
    REDUCE = ("R", "#C62828")
    GROUP_REDUCE = ("G", "#E53935")
    UPCAST = ("u", "#F9A825")
    UNROLL = ("r", "#7B1FA2")

    @property
    def letter(self) -> str:
        """The one-letter code used in kernel names (``r_g64_R512_u4``)."""
        return self.value[0]

    @property
    def color(self) -> str:
        """The spec's colour for this AxisType."""
        return self.value[1]

    @property
    def is_reduce(self) -> bool:
        """True for axes that accumulate (REDUCE, GROUP_REDUCE, UNROLL)."""
        return self in (AxisType.REDUCE, AxisType.GROUP_REDUCE, AxisType.UNROLL)

    def __repr__(self) -> str:  # AxisType.GLOBAL, not <AxisType.GLOBAL: ('g', '#1565C0')>
        return f"AxisType.{self.name}"

    @classmethod
    def from_letter(cls, letter: str) -> AxisType:
        """The AxisType with the given letter."""
        for axis_type in cls:
            if axis_type.letter == letter:
                return axis_type
        raise ValueError(f"no AxisType has letter {letter!r}")


class Ops(enum.IntEnum):
    """Every op of the dialect.  ``op.family`` gives its OpFamily.

    An IntEnum because hashing a plain Enum member runs Python code, and ops are hashed on every
    UOp construction and every rule dispatch.
    """

    __hash__ = int.__hash__

    # Source
    PARAM = enum.auto()
    BUFFER = enum.auto()
    CONST = enum.auto()
    BINARY = enum.auto()
    # Movement
    PERMUTE = enum.auto()
    FLIP = enum.auto()
    RESHAPE = enum.auto()
    EXPAND = enum.auto()
    PAD = enum.auto()
    SHRINK = enum.auto()
    INDEX = enum.auto()
    STACK = enum.auto()
    REPLICATED = enum.auto()
    SLICE = enum.auto()
    BITCAST = enum.auto()
    # Reduce
    REDUCE = enum.auto()
    # Call
    FUNCTION = enum.auto()
    CALL = enum.auto()
    TUPLE = enum.auto()
    GET_TUPLE = enum.auto()
    # Load
    LOAD = enum.auto()
    COPY = enum.auto()
    # Store
    STORE = enum.auto()
    # Ordering
    RANGE = enum.auto()
    END = enum.auto()
    AFTER = enum.auto()
    GROUP = enum.auto()
    SINK = enum.auto()
    LINEAR = enum.auto()
    # Elementwise primitives
    RECIP = enum.auto()
    TRUNC = enum.auto()
    CAST = enum.auto()
    ADD = enum.auto()
    MUL = enum.auto()
    MAX = enum.auto()
    MOD = enum.auto()
    IDIV = enum.auto()
    CMP_LT = enum.auto()
    CMP_NE = enum.auto()
    XOR = enum.auto()
    OR = enum.auto()
    AND = enum.auto()
    SHR = enum.auto()
    SHL = enum.auto()
    WHERE = enum.auto()
    # Elementwise, decomposed
    NEG = enum.auto()
    SUB = enum.auto()
    DIV = enum.auto()
    CMP_GT = enum.auto()
    CMP_GE = enum.auto()
    CMP_LE = enum.auto()
    CMP_EQ = enum.auto()
    NOT = enum.auto()
    EXP2 = enum.auto()
    LOG2 = enum.auto()
    SIN = enum.auto()
    COS = enum.auto()  # ours: cos, sharing SIN's argument reduction (the card composes it)
    TAN = enum.auto()  # ours: tan, likewise
    SQRT = enum.auto()
    POW = enum.auto()
    MULACC = enum.auto()
    THREEFRY = enum.auto()
    # Marker
    CONTIGUOUS = enum.auto()
    CONTIGUOUS_BACKWARD = enum.auto()
    DETACH = enum.auto()
    # Codegen
    BARRIER = enum.auto()
    INS = enum.auto()
    SPECIAL = enum.auto()
    IF = enum.auto()
    ENDIF = enum.auto()
    WMMA = enum.auto()
    CUSTOM = enum.auto()
    ATOMIC_ADD = enum.auto()
    CUSTOM_FUNCTION = enum.auto()
    PROGRAM = enum.auto()
    SOURCE = enum.auto()
    VECTORIZE = enum.auto()  # ours: lanes -> vector
    GEP = enum.auto()  # ours: vector -> lanes (arg: tuple of lane numbers)
    # Elementwise, decomposed, ours (last, so that every other op keeps its number: the simplifier's
    # canonical operand order sorts by it, and generated code follows that order)
    EXP = enum.auto()  # ours: e**x, kept whole until Instruction Selection (the card composes it)
    LOG = enum.auto()  # ours: ln x, likewise

    def __repr__(self) -> str:
        return f"Ops.{self.name}"

    def __str__(self) -> str:
        return f"Ops.{self.name}"

    @property
    def family(self) -> OpFamily:
        """The op family this op belongs to (its colour is ``op.family.color``)."""
        return _FAMILY[self]

    @property
    def is_elementwise(self) -> bool:
        """True for every elementwise op, primitive or decomposed."""
        return _FAMILY[self] is OpFamily.ELEMENTWISE


class GroupOp:
    """Named sets of ops that passes and rules refer to."""

    SOURCE = frozenset({Ops.PARAM, Ops.BUFFER, Ops.CONST, Ops.BINARY})
    MOVEMENT = frozenset(
        {
            Ops.PERMUTE,
            Ops.FLIP,
            Ops.RESHAPE,
            Ops.EXPAND,
            Ops.PAD,
            Ops.SHRINK,
            Ops.INDEX,
            Ops.STACK,
            Ops.REPLICATED,
            Ops.SLICE,
            Ops.BITCAST,
        }
    )
    # movement ops that take a shape-like source after the tensor
    SHAPED_MOVEMENT = frozenset({Ops.RESHAPE, Ops.EXPAND, Ops.PAD, Ops.SHRINK})
    CALL = frozenset({Ops.FUNCTION, Ops.CALL, Ops.TUPLE, Ops.GET_TUPLE})
    LOAD = frozenset({Ops.LOAD, Ops.COPY})
    STORE = frozenset({Ops.STORE})
    ORDERING = frozenset({Ops.RANGE, Ops.END, Ops.AFTER, Ops.GROUP, Ops.SINK, Ops.LINEAR})
    UNARY_ALU = frozenset(
        {
            Ops.RECIP,
            Ops.TRUNC,
            Ops.CAST,
            Ops.NEG,
            Ops.NOT,
            Ops.EXP2,
            Ops.LOG2,
            Ops.EXP,
            Ops.LOG,
            Ops.SIN,
            Ops.COS,
            Ops.TAN,
            Ops.SQRT,
        }
    )
    BINARY_ALU = frozenset(
        {
            Ops.ADD,
            Ops.MUL,
            Ops.MAX,
            Ops.MOD,
            Ops.IDIV,
            Ops.CMP_LT,
            Ops.CMP_NE,
            Ops.XOR,
            Ops.OR,
            Ops.AND,
            Ops.SHR,
            Ops.SHL,
            Ops.SUB,
            Ops.DIV,
            Ops.CMP_GT,
            Ops.CMP_GE,
            Ops.CMP_LE,
            Ops.CMP_EQ,
            Ops.POW,
        }
    )
    TERNARY_ALU = frozenset({Ops.WHERE, Ops.MULACC})
    COMPARISON = frozenset({Ops.CMP_LT, Ops.CMP_NE, Ops.CMP_GT, Ops.CMP_GE, Ops.CMP_LE, Ops.CMP_EQ})
    COMMUTATIVE = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMP_NE, Ops.CMP_EQ, Ops.XOR, Ops.OR, Ops.AND})
    ASSOCIATIVE = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.XOR, Ops.OR, Ops.AND})
    INTEGER_ONLY = frozenset({Ops.MOD, Ops.IDIV, Ops.XOR, Ops.OR, Ops.AND, Ops.SHR, Ops.SHL})
    DECOMPOSED = frozenset(
        {
            Ops.NEG,
            Ops.SUB,
            Ops.DIV,
            Ops.CMP_GT,
            Ops.CMP_GE,
            Ops.CMP_LE,
            Ops.CMP_EQ,
            Ops.NOT,
            Ops.EXP2,
            Ops.LOG2,
            Ops.EXP,
            Ops.LOG,
            Ops.SIN,
            Ops.COS,
            Ops.TAN,
            Ops.SQRT,
            Ops.POW,
            Ops.MULACC,
            Ops.THREEFRY,
        }
    )
    ELEMENTWISE = UNARY_ALU | BINARY_ALU | TERNARY_ALU | {Ops.THREEFRY}
    MARKER = frozenset({Ops.CONTIGUOUS, Ops.CONTIGUOUS_BACKWARD, Ops.DETACH})
    CODEGEN = frozenset(
        {
            Ops.BARRIER,
            Ops.INS,
            Ops.SPECIAL,
            Ops.IF,
            Ops.ENDIF,
            Ops.WMMA,
            Ops.CUSTOM,
            Ops.ATOMIC_ADD,
            Ops.CUSTOM_FUNCTION,
            Ops.PROGRAM,
            Ops.SOURCE,
            Ops.VECTORIZE,
            Ops.GEP,
        }
    )
    REDUCE_OPS = frozenset({Ops.ADD, Ops.MAX, Ops.MUL})  # what Reduce may accumulate with


_FAMILY: dict[Ops, OpFamily] = {}
for _family, _members in (
    (OpFamily.SOURCE, GroupOp.SOURCE),
    (OpFamily.MOVEMENT, GroupOp.MOVEMENT),
    (OpFamily.REDUCE, {Ops.REDUCE}),
    (OpFamily.CALL, GroupOp.CALL),
    (OpFamily.LOAD, GroupOp.LOAD),
    (OpFamily.STORE, GroupOp.STORE),
    (OpFamily.ORDERING, GroupOp.ORDERING),
    (OpFamily.ELEMENTWISE, GroupOp.ELEMENTWISE),
    (OpFamily.MARKER, GroupOp.MARKER),
    (OpFamily.CODEGEN, GroupOp.CODEGEN),
):
    for _op in _members:
        _FAMILY[_op] = _family
# The spec lists Binary under both Source and Codegen; as a leaf with data it is a Source op.
_FAMILY[Ops.BINARY] = OpFamily.SOURCE
assert set(_FAMILY) == set(Ops), f"ops without a family: {set(Ops) - set(_FAMILY)}"
