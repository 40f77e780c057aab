"""Instruction Selection: rewrite what a target lacks into the primitives it has.

:func:`instruction_selection_matcher` builds, for one backend's ``supported_ops`` and
``vector_widths``, a :class:`PatternMatcher` of the spec's "decomposed elementwise ops":

=============  ================================================================================
``NEG``        ``MUL(x, -1)``
``SUB``        ``ADD(a, NEG(b))``
``DIV``        ``MUL(a, RECIP(b))``
``CMP_GT``     ``CMP_LT(b, a)``; ``CMP_GE`` / ``CMP_LE`` / ``CMP_EQ`` as ``CMP_NE(…, True)`` of a
               ``CMP_LT`` / ``CMP_NE``, as the spec's table writes them (so with a nan operand they
               answer True where IEEE says False)
``NOT``        ``CMP_NE(x, True)`` on bool, ``XOR(x, all-ones)`` on integers
``EXP``        "decompose exp": ``EXP2(t)·(1 + d·ln 2)``, ``t = x·log2 e`` rounded and ``d`` its rounding
               error from exact products of halves (:mod:`uopviz.core.exp_log`); no target has EXP
``LOG``        "decompose log": ``LOG2(x)·ln 2``
``EXP2``       round to ``n + f`` (``|f| <= 1/2``) by adding ``1.5·2**mantissa_bits`` (``n`` is the
               sum's low bits), a minimax polynomial for ``2**f``, and ``2**n``
               built from exponent bits (``BITCAST(SHL(n + bias))``) in two halves, so results
               underflow to denormals and overflow to inf correctly
``LOG2``       denormals scaled by ``2**64``; exponent and mantissa from the bits; mantissa
               centred on ``[√½, √2)``; ``log2(m) = s·R(s²)`` with ``s = (m-1)/(m+1)``; ``x < 0``
               gives nan, ``0`` gives ``-inf``, ``inf`` gives ``inf``
``SIN``        ``x = k·π/2 + r`` exactly for every finite ``x``: Cody–Waite (π/2 split into parts
``COS``        whose products with ``k`` are exact) while ``|x| < 2**26`` (float32 reduced in
``TAN``        float64) / ``2**14`` (float32 on targets without float64), Payne–Hanek beyond (a
               window of 2/π's bits chosen by the exponent, multiplied in integers); then minimax
               polynomials for sin and cos of ``r`` chosen and signed by the quadrant (COS: the
               next quadrant); TAN divides them (``-cos r / sin r`` in odd quadrants)
``SQRT``       ``EXP2(0.5·LOG2(x))`` as the spec writes it, then one Newton step
               ``y + (x/y - y)/2`` (without it the error grows with ``|log2 x|``); ``0`` and
               ``inf`` pass through
``POW``        ``EXP2(LOG2(|a|)·b)`` (float32 in float64 where the target has it); float64 with
               ``b·log2 a`` to extra precision (``log2`` and the product in pairs of doubles,
               ``EXP2(t)·(1 + d·ln 2)``); a negative base with an integer exponent gets the sign
               of ``(-1)**b``, with a non-integer exponent nan; ``b = 0`` or ``a = 1`` give 1.
``MULACC``     ``ADD(MUL(a, b), c)`` where the target lacks it; where it has it, ``ADD(MUL(a, b), c)``
               is fused into ``MULACC``
``THREEFRY``   Threefry-2x32-20 on uint32 words: 5 groups of 4 add-rotate-xor rounds with the
               rotations (13, 15, 26, 6), (17, 29, 16, 24) and a key injection after each group
``MAX``        ``WHERE(CMP_LT(a, b), b, a)`` (a nan in ``b`` is not propagated)
``SHL``/``SHR``  by a constant: ``MUL`` / floor ``IDIV`` by ``2**c``
``BITCAST``    to or from bool: ``CAST`` (on every target, :data:`always_rules`)
=============  ================================================================================

float16 and bfloat16 transcendentals are computed in float32 and rounded back; float64 ones use
polynomials of higher degree.  Vector ops of a width the target does not have are split into
chunks of the widest width it has that divides them (a 64-lane tile on a 16-lane target: four
16-lane ops; scalar lanes when no width divides); targets without vectors get every vector op
split into per-lane scalar ops (:data:`devectorize_rules`, :func:`devectorize`).

The transcendental decompositions and Threefry are written in :mod:`uopviz.passes.isel_math` (the
math library in UOps, with its measured accuracy), on the primitives of
:mod:`uopviz.passes.isel_primitives`; this module holds the rules that call them, devectorization,
the matcher of one target and the stage.

The stage (:func:`select_instructions`) first lowers reductions to **accumulators**, so that the
target's rules see the multiply-add of a reduction: ``REDUCE(value, r...)`` becomes a REG buffer
``acc`` with

* ``STORE(acc[AFTER(acc, outer ranges...)], identity)`` — initialised once per output element
  (and per step of a sequential range the value depends on: ``optops.axes.sequential_axes``),
* ``STORE(acc[AFTER(acc, init, r...)], LOAD(acc) op value)`` — updated in the reduce loops,
* ``END(update, r)`` closing each reduce range (innermost first),
* ``LOAD(acc[AFTER(acc, END)])`` — the result, read after the loops.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from uopviz.backends.base import Backend, chunk_sizes
from uopviz.backends.linear_program import matrix_column, next_power_of_two, power_of_two
from uopviz.core.affine import contiguous_start, lane_keys
from uopviz.core.dtype import AddrSpace, DType, dtypes
from uopviz.core.exp_log import decompose_exp, decompose_log
from uopviz.core.ops import GroupOp, Ops
from uopviz.core.rewrite import PatternMatcher, UPat, graph_rewrite
from uopviz.core.uop import UOp
from uopviz.passes.indexing import iconst
from uopviz.passes.isel_math import (
    decompose_exp2,
    decompose_log2,
    decompose_sqrt,
    decompose_threefry,
    in_float32,
    pow_in,
    reduced_in_float64,
    reduced_in_own_type,
)
from uopviz.passes.isel_primitives import add, const_like, less, mul, not_equal, recip, where
from uopviz.passes.optops.axes import REDUCE_TYPES, kernel_order, ranges_of, reduce_identity, sequential_axes
from uopviz.passes.render import backend_named
from uopviz.passes.schedule import Lowering, PipelineError, once_per_body

__all__ = ["accumulator_rules", "instruction_selection_stage", "lower_reductions", "select_instructions",
    "DECOMPOSITIONS",
    "devectorize",
    "devectorize_rules",
    "instruction_selection_matcher",
    "always_rules",
    "mulacc_fusion",
]


# ---------------------------------------------------------------------------------------------
# the rules, one list per decomposed op (each rule fires only where the target lacks the op)


def _all_ones(dtype: DType) -> int:
    return dtype.scalar.max if dtype.is_unsigned else -1


def _true_like(x: UOp) -> UOp:
    return const_like(x, True, dtypes.bool)


def _not(x: UOp) -> UOp:
    if x.dtype.scalar is dtypes.bool:
        return UOp(Ops.CMP_NE, (x, _true_like(x)))
    return UOp(Ops.XOR, (x, const_like(x, _all_ones(x.dtype))))


def _power_of_two_shift(x: UOp, c: UOp) -> int | None:
    amount = c.arg[0] if c.op is Ops.CONST else None
    if amount is None or not 0 <= amount < x.dtype.scalar.itemsize * 8:
        return None
    return 1 << amount


def _shift_as_multiply(x: UOp, c: UOp) -> UOp | None:
    factor = _power_of_two_shift(x, c)
    return None if factor is None else mul(x, factor)


def _shift_as_divide(x: UOp, c: UOp) -> UOp | None:
    factor = _power_of_two_shift(x, c)
    if factor is None or (not x.dtype.is_unsigned and factor == 1 << (x.dtype.scalar.itemsize * 8 - 1)):
        return None
    return UOp(Ops.IDIV, (x, const_like(x, factor)))  # floor division is the arithmetic shift


_A, _B = UPat.var("a"), UPat.var("b")
_FLOAT_X = UPat.var("x")

#: op → the rules that remove it (used for the ops a target lacks).
DECOMPOSITIONS: dict[Ops, list[tuple]] = {
    Ops.NEG: [(UPat(Ops.NEG, src=(_FLOAT_X,)), lambda x: mul(x, -1), "NEG → MUL(x, -1)")],
    Ops.SUB: [(UPat(Ops.SUB, src=(_A, _B)), lambda a, b: add(a, UOp(Ops.NEG, (b,))), "SUB → ADD(a, NEG b)")],
    Ops.DIV: [(UPat(Ops.DIV, src=(_A, _B)), lambda a, b: mul(a, recip(b)), "DIV → MUL(a, RECIP b)")],
    Ops.CMP_GT: [(UPat(Ops.CMP_GT, src=(_A, _B)), lambda a, b: less(b, a), "CMP_GT → CMP_LT(b, a)")],
    Ops.CMP_GE: [
        (UPat(Ops.CMP_GE, src=(_A, _B)), lambda a, b: _not(less(a, b)), "CMP_GE → CMP_NE(CMP_LT(a, b), 1)")
    ],
    Ops.CMP_LE: [
        (UPat(Ops.CMP_LE, src=(_A, _B)), lambda a, b: _not(less(b, a)), "CMP_LE → CMP_NE(CMP_LT(b, a), 1)")
    ],
    Ops.CMP_EQ: [
        (
            UPat(Ops.CMP_EQ, src=(_A, _B)),
            lambda a, b: _not(not_equal(a, b)),
            "CMP_EQ → CMP_NE(CMP_NE(a, b), 1)",
        )
    ],
    Ops.NOT: [(UPat(Ops.NOT, src=(_FLOAT_X,)), _not, "NOT → CMP_NE(x, 1) / XOR(x, -1)")],
    Ops.EXP2: [
        (
            UPat(Ops.EXP2, src=(_FLOAT_X,)),
            lambda x: in_float32(x, decompose_exp2),
            "EXP2 → 2**n (exponent bits) · polynomial(f)",
        )
    ],
    Ops.LOG2: [
        (
            UPat(Ops.LOG2, src=(_FLOAT_X,)),
            lambda x: in_float32(x, decompose_log2),
            "LOG2 → exponent + polynomial(mantissa)",
        )
    ],
    Ops.EXP: [(UPat(Ops.EXP, src=(_FLOAT_X,)), lambda x: in_float32(x, decompose_exp), "decompose exp")],
    Ops.LOG: [(UPat(Ops.LOG, src=(_FLOAT_X,)), lambda x: in_float32(x, decompose_log), "decompose log")],
    **{
        op: [
            (
                UPat(op, src=(_FLOAT_X,)),
                lambda x, op=op: in_float32(x, reduced_in_float64(op)),
                f"{op.name} → Cody–Waite / Payne–Hanek reduction (float64) + polynomials",
            )
        ]
        for op in (Ops.SIN, Ops.COS, Ops.TAN)
    },
    Ops.SQRT: [
        (
            UPat(Ops.SQRT, src=(_FLOAT_X,)),
            lambda x: in_float32(x, decompose_sqrt),
            "SQRT → EXP2(0.5·LOG2(x)) + Newton step",
        )
    ],
    Ops.POW: [
        (
            UPat(Ops.POW, src=(_A, _B)),
            lambda a, b: pow_in(a, b, dtypes.float64),
            "POW → EXP2(LOG2(|a|)·b) with the sign of (-1)**b (float32 in float64)",
        )
    ],
    Ops.MULACC: [
        (
            UPat(Ops.MULACC, src=(_A, _B, UPat.var("c"))),
            lambda a, b, c: add(mul(a, b), c),
            "MULACC → ADD(MUL(a, b), c)",
        )
    ],
    Ops.THREEFRY: [
        (
            UPat(Ops.THREEFRY, src=(_FLOAT_X, UPat.var("key"))),
            decompose_threefry,
            "THREEFRY → 20 rounds of uint32 add-rotate-xor",
        )
    ],
    Ops.MAX: [
        (UPat(Ops.MAX, src=(_A, _B)), lambda a, b: where(less(a, b), b, a), "MAX → WHERE(a < b, b, a)")
    ],
    Ops.SHL: [(UPat(Ops.SHL, src=(_FLOAT_X, UPat.cvar("c"))), _shift_as_multiply, "SHL by c → MUL by 2**c")],
    Ops.SHR: [
        (UPat(Ops.SHR, src=(_FLOAT_X, UPat.cvar("c"))), _shift_as_divide, "SHR by c → floor IDIV by 2**c")
    ],
}

# float32 SIN, COS, TAN and POW on a target without float64 (an OpenCL device without cl_khr_fp64, say)
_WITHOUT_FLOAT64: dict[Ops, list] = {
    Ops.POW: [
        (
            UPat(Ops.POW, src=(_A, _B)),
            lambda a, b: pow_in(a, b, dtypes.float32),
            "POW → EXP2(LOG2(|a|)·b) with the sign of (-1)**b",
        )
    ],
    **{
        op: [
            (
                UPat(op, src=(_FLOAT_X,)),
                lambda x, op=op: in_float32(x, reduced_in_own_type(op)),
                f"{op.name} → Cody–Waite / Payne–Hanek reduction + polynomials",
            )
        ]
        for op in (Ops.SIN, Ops.COS, Ops.TAN)
    },
}

def _bool_bitcast_as_cast(x: UOp) -> UOp | None:
    source = x.src[0]
    if not (x.dtype.scalar.is_bool or source.dtype.scalar.is_bool):
        return None
    return UOp(Ops.CAST, (source,), x.dtype)


#: rules every target gets: a bool is one byte holding 0 or 1, but no backend reinterprets a byte as
#: a bool (LLVM's i1 has no bitcast, OpenCL has no ``as_bool``, and a C ``_Bool`` holding 2 is
#: undefined), so a BITCAST to or from bool is the CAST with the same bits: 0/1 from a bool, and
#: ``!= 0`` to a bool (a non-zero byte reads as True, as in numpy's ``view(bool)``).
always_rules = PatternMatcher(
    [(UPat(Ops.BITCAST, name="x"), _bool_bitcast_as_cast, "BITCAST to or from bool → CAST")],
    name="instruction selection (every target)",
)

#: ``ADD(MUL(a, b), c) → MULACC(a, b, c)`` for targets with a multiply-add.
mulacc_fusion = PatternMatcher(
    [
        (
            UPat(Ops.ADD, src=[UPat(Ops.MUL, src=(_A, _B)), UPat.var("c")]),
            lambda a, b, c: UOp(Ops.MULACC, (a, b, c)),
            "ADD(MUL(a, b), c) → MULACC(a, b, c)",
        ),
    ],
    name="mulacc fusion",
)


# ---------------------------------------------------------------------------------------------
# devectorization


def _splittable_alu(x: UOp) -> bool:
    """A vector ALU op whose operands have its lanes (a BITCAST between lane sizes has none to split)."""
    count = x.dtype.count
    if count == 1 or any(s.dtype.count != count for s in x.src):
        return False
    return x.op is not Ops.BITCAST or x.src[0].dtype.scalar.itemsize == x.dtype.scalar.itemsize


def _split_alu(x: UOp, chunks: list[int]) -> UOp:
    """``x`` as ops of ``chunks`` lanes each (1: scalar lanes), joined again by a VECTORIZE."""

    def make(lanes: tuple[int, ...]) -> UOp:
        arg = x.arg
        if x.op in (Ops.CAST, Ops.BITCAST):
            arg = x.dtype.scalar if len(lanes) == 1 else x.dtype.scalar.vec(len(lanes))
        return UOp(x.op, tuple(_piece(s, lanes) for s in x.src), arg)

    return _chunked(x, chunks, make)


def _devectorize_alu(x: UOp) -> UOp | None:
    return _split_alu(x, [1] * x.dtype.count) if _splittable_alu(x) else None


def _gep_of_vectorize(g: UOp, v: UOp) -> UOp:
    picked = [v.src[i] for i in g.arg]
    return picked[0] if len(picked) == 1 else UOp(Ops.VECTORIZE, tuple(picked))


def _gep_of_gep(g: UOp, inner: UOp) -> UOp:
    return UOp(Ops.GEP, (inner.src[0],), tuple(inner.arg[i] for i in g.arg))


_VECTOR_ALU = GroupOp.ELEMENTWISE | {Ops.BITCAST}

#: Rules that split vector ALU ops into VECTORIZE of per-lane scalar ops (lanes taken with GEP),
#: and fold the GEPs of VECTORIZEs this leaves behind.
devectorize_rules = PatternMatcher(
    [
        (UPat(_VECTOR_ALU, name="x"), _devectorize_alu, "vector ALU → VECTORIZE of lanes"),
        (
            UPat(Ops.GEP, src=(UPat(Ops.VECTORIZE, name="v"),), name="g"),
            _gep_of_vectorize,
            "GEP(VECTORIZE) → lane",
        ),
        (UPat(Ops.GEP, src=(UPat(Ops.GEP, name="inner"),), name="g"), _gep_of_gep, "GEP(GEP) → GEP"),
        (
            UPat(Ops.GEP, name="g"),
            lambda g: g.src[0] if g.arg == tuple(range(g.src[0].dtype.count)) else None,
            "GEP of every lane → the vector",
        ),
    ],
    name="devectorize",
)


def devectorize(root: UOp) -> UOp:
    """``root`` with every vector ALU op split into scalar lanes (for targets without vectors)."""
    return graph_rewrite(root, devectorize_rules, name="devectorize")


def _piece(x: UOp, lanes: tuple[int, ...]) -> UOp:
    """Lanes ``lanes`` of ``x`` (a scalar operand is the same in every chunk).  Picked straight from a
    VECTORIZE (a split op's chunks, lane constants) rather than as a GEP the folding rules would
    rewrite again: the same result, made once."""
    if x.dtype.count == 1:
        return x
    if x.op is Ops.VECTORIZE:
        picked = [x.src[i] for i in lanes]
        if len(picked) == 1:
            return picked[0]
        first = picked[0]
        if first.op is Ops.GEP and len(first.arg) == 1:
            whole = first.src[0]
            if whole.dtype.count == len(picked) and all(
                p.op is Ops.GEP and p.src[0] is whole and p.arg == (i,) for i, p in enumerate(picked)
            ):
                return whole  # exactly one chunk of a split op
        return UOp(Ops.VECTORIZE, tuple(picked))
    return UOp(Ops.GEP, (x,), lanes)


def _lane_chunks(chunks: list[int]) -> list[tuple[int, ...]]:
    """The lanes of each chunk of widths ``chunks``, in order."""
    starts = [sum(chunks[:i]) for i in range(len(chunks))]
    return [tuple(range(start, start + width)) for start, width in zip(starts, chunks)]


def _chunked(x: UOp, chunks: list[int], make) -> UOp:
    """``x`` rebuilt chunk by chunk: ``make(lanes)`` builds the chunk of ``lanes``; the result is the
    VECTORIZE of every chunk's lanes, which consumers split again by the GEP folding rules."""
    parts = [make(lanes) for lanes in _lane_chunks(chunks)]
    return UOp(Ops.VECTORIZE, tuple(
        part if width == 1 else UOp(Ops.GEP, (part,), (i,))
        for part, width in zip(parts, chunks) for i in range(width)
    ))


def _vectorize_of_geps(v: UOp) -> UOp | None:
    """``VECTORIZE(GEP(x, i0), GEP(x, i1), ...)`` of one vector ``x`` is ``GEP(x, (i0, i1, ...))``."""
    first = v.src[0]
    if first.op is not Ops.GEP or len(first.arg) != 1:
        return None
    vector = first.src[0]
    if not all(s.op is Ops.GEP and s.src[0] is vector and len(s.arg) == 1 for s in v.src):
        return None
    return UOp(Ops.GEP, (vector,), tuple(s.arg[0] for s in v.src))


#: a store split by address runs takes runs of at least this many lanes (narrower: lane order stays)
TRANSPOSED_STORE_MIN_LANES = 4


def padded_column_width(lanes: int, widths: frozenset[int]) -> int | None:
    """The register width a column of ``lanes`` rows is stored from when ``lanes`` is no width the
    target renders but a wider power of two is (7 positions of a channel: the tile's 7 rows
    transposed as 8, the column's first 7 lanes stored); None otherwise.  Lane by lane, the 7 x 32
    tiles of the 1x1 convs at 7x7 to 28x28 were 224 single-element stores each, a third of GCC's
    time on DenseNet-121's sources."""
    if lanes < TRANSPOSED_STORE_MIN_LANES or lanes in widths or power_of_two(lanes):
        return None
    padded = next_power_of_two(lanes)
    return padded if padded in widths else None


def _padded_column_store(store: UOp, widths: frozenset[int]) -> bool:
    """True for a STORE of one padded column (:func:`padded_column_width`) to contiguous elements:
    a column of a register tile (:func:`matrix_column`), as :func:`_address_runs` made it; left
    whole for the renderer."""
    value, index = store.src[1], store.src[0].src[1]
    return (padded_column_width(value.dtype.count, widths) is not None and matrix_column(value) is not None
            and contiguous_start(index) is not None)


def _address_runs(
    index: UOp, chunks: list[tuple[int, ...]], widths: frozenset[int]
) -> list[tuple[int, ...]] | None:
    """A STORE's lanes regrouped by address, where its lane-order ``chunks`` scatter: each group a run
    of consecutive elements, as wide as the target renders (at least
    :data:`TRANSPOSED_STORE_MIN_LANES`).  A register tile of a convolution holds its lanes as
    positions × channels (each vector: the channels of one position, for the broadcast input) but
    the output's rows are positions: 8 positions × 16 channels were 128 single-element stores, and
    are 16 row stores of 8 (the renderer transposes the tile).  None when lane order is already
    contiguous, an address is not a base plus a constant, the runs do not come out whole, or a run is
    not one column of the tile (the same lane of as many lane-order chunks, a power of two)."""
    lanes = lane_keys(index)
    if lanes is None:
        return None
    by_base: dict[tuple[int, ...], list[tuple[int, int]]] = {}
    for lane, (key, constant) in enumerate(lanes):
        by_base.setdefault(key, []).append((constant, lane))
    runs: list[tuple[int, ...]] = []
    for group in by_base.values():
        group.sort()
        if len({constant for constant, _ in group}) != len(group):
            return None  # two lanes store to one element: their order would matter
        start = 0
        for end in range(1, len(group) + 1):
            if end == len(group) or group[end][0] != group[end - 1][0] + 1:
                run = [lane for _, lane in group[start:end]]
                sizes = [len(run)] if padded_column_width(len(run), widths) else chunk_sizes(len(run), widths)
                for size in sizes:
                    if size < TRANSPOSED_STORE_MIN_LANES:
                        return None
                    runs.append(tuple(run[:size]))
                    run = run[size:]
                start = end
    # each run one lane, the same, of as many lane-order chunks: a column of the tile whose rows are
    # the chunks (the renderer's transpose); other regroupings would build vectors lane by lane
    offset_in_chunk = {lane: offset for chunk in chunks for offset, lane in enumerate(chunk)}
    for run in runs:
        one_column = len({offset_in_chunk[lane] for lane in run}) == 1
        width = len(run) if power_of_two(len(run)) else padded_column_width(len(run), widths)
        if not one_column or width is None or width > len(chunks[0]):
            return None
    # stores lane order makes: one per contiguous chunk, one per element of a scattered one
    lane_order_stores = sum(1 if len(chunk) > 1 and contiguous_start(_piece(index, chunk)) is not None
                            else len(chunk) for chunk in chunks)
    return runs if len(runs) < lane_order_stores else None


def _split_widths(
    vector_widths: tuple[int, ...], scalar_dtypes: frozenset[DType] = frozenset(), vector_bytes: int = 0,
    transposed_stores: bool = False,
) -> PatternMatcher:
    """Vector ops whose lane count the target does not render, split into chunks of the widest width
    it does render that divides them (scalar lanes when none does): ALU ops, LOADs and STOREs.
    Values of ``scalar_dtypes`` are never vectors there (C-family renderers hold bfloat16 in float
    variables, one lane at a time), and with ``vector_bytes`` no chunk is wider than one register
    (GCC lowers a vector type wider than the target's registers through memory: 10× slower).  With
    ``transposed_stores`` a STORE whose lanes scatter in lane order is split by address runs
    (:func:`_address_runs`)."""
    all_widths = frozenset(vector_widths)

    def widths_for(*values: UOp) -> frozenset[int]:
        if any(v.dtype.scalar in scalar_dtypes for v in values):
            return frozenset()
        if not vector_bytes:
            return all_widths
        itemsize = max(v.dtype.scalar.itemsize for v in values)
        return frozenset(w for w in all_widths if w * itemsize <= vector_bytes)

    def split_alu(x: UOp) -> UOp | None:
        widths = widths_for(x, *x.src)
        if x.dtype.count in widths or not _splittable_alu(x):
            return None
        return _split_alu(x, chunk_sizes(x.dtype.count, widths))

    def split_load(x: UOp) -> UOp | None:
        count, widths = x.dtype.count, widths_for(x)
        index = x.src[0]
        if count == 1 or count in widths or index.op is not Ops.INDEX or index.src[1].dtype.count != count:
            return None
        def make(lanes: tuple[int, ...]) -> UOp:
            address = UOp(Ops.INDEX, (index.src[0], _piece(index.src[1], lanes)))
            return UOp(Ops.LOAD, (address, *(_piece(s, lanes) for s in x.src[1:])), x.arg)

        return _chunked(x, chunk_sizes(count, widths), make)

    def split_store(x: UOp) -> UOp | None:
        index, value = x.src[0], x.src[1]
        count, widths = value.dtype.count, widths_for(value)
        if count == 1 or count in widths or index.op is not Ops.INDEX or index.src[1].dtype.count != count:
            return None
        if transposed_stores and _padded_column_store(x, widths):
            return None
        chunks = _lane_chunks(chunk_sizes(count, widths))
        if transposed_stores:
            chunks = _address_runs(index.src[1], chunks, widths) or chunks
        stores = []
        for lanes in chunks:
            address = UOp(Ops.INDEX, (index.src[0], _piece(index.src[1], lanes)))
            stores.append(UOp(Ops.STORE, (address, *(_piece(s, lanes) for s in x.src[1:])), x.arg))
        return UOp(Ops.GROUP, tuple(stores))

    return PatternMatcher(
        [
            (UPat(_VECTOR_ALU, name="x"), split_alu, "vector ALU of an unsupported width → chunks"),
            (UPat(Ops.LOAD, name="x"), split_load, "vector LOAD of an unsupported width → chunks"),
            (UPat(Ops.STORE, name="x"), split_store, "vector STORE of an unsupported width → chunks"),
            *devectorize_rules.rules[1:],
            (UPat(Ops.VECTORIZE, name="v"), _vectorize_of_geps, "VECTORIZE of one vector's lanes → GEP"),
        ],
        name="split widths",
    )


# ---------------------------------------------------------------------------------------------
# the matcher of one target


@functools.lru_cache(maxsize=32)  # one per target: building it was a tenth of the stage on DenseNet-121
def instruction_selection_matcher(
    supported_ops: frozenset[Ops],
    vector_widths: tuple[int, ...] = (),
    has_float64: bool = True,
    scalar_dtypes: frozenset[DType] = frozenset(),
    vector_bytes: int = 0,
    transposed_stores: bool = False,
) -> PatternMatcher:
    """The Instruction Selection rules of a target that renders ``supported_ops`` natively and
    vectors of ``vector_widths`` lanes: every decomposed op it lacks is rewritten into ones it has
    (or into ops that are decomposed in turn), MULACC is fused where it exists, and vector ALU ops
    of other widths are split into chunks of widths it has.  Without ``has_float64`` float32 SIN
    reduces its argument in float32 (accurate for |x| up to 2.5e4 only).  Vectors of
    ``scalar_dtypes`` are split into scalar lanes (the backend renders no vectors of them), and vectors
    wider than ``vector_bytes`` (when given) into chunks of at most one register; with
    ``transposed_stores`` (:attr:`Backend.transposes_stores`) a store whose lanes scatter is split by
    address runs."""
    supported = frozenset(supported_ops)
    rules: list = list(always_rules.rules)
    chosen = DECOMPOSITIONS if has_float64 else {**DECOMPOSITIONS, **_WITHOUT_FLOAT64}
    for op, decompositions in chosen.items():
        if op not in supported:
            rules.extend(decompositions)
    if Ops.MULACC in supported:
        rules.extend(mulacc_fusion.rules)
    splits = _split_widths(tuple(vector_widths), frozenset(scalar_dtypes), vector_bytes, transposed_stores)
    rules.extend(splits.rules)
    return PatternMatcher(rules, name="instruction selection")


# ---------------------------------------------------------------------------------------------
# accumulators


@dataclass
class AccumulatorContext:
    """The loops around every reduction (the kernel's non-reduce ranges) and a counter for REG buffers."""

    outer: tuple[UOp, ...]
    sequential: frozenset[UOp] = frozenset()  # REDUCE ranges no REDUCE reduces: the steps of a scan
    count: int = 0


def lower_reduce(ctx: AccumulatorContext, reduce: UOp) -> UOp:
    """REDUCE → a REG accumulator: init before the loops, update inside, read after them."""
    op = reduce.arg[0]
    value, loops = reduce.src[0], reduce.src[1:]
    dtype = value.dtype
    accumulator = UOp.buffer(dtype.count, dtype.scalar, None, AddrSpace.REG, number=ctx.count)
    ctx.count += 1
    lanes = iconst(0)
    if dtype.count > 1:
        lanes = UOp(Ops.VECTORIZE, tuple(iconst(i) for i in range(dtype.count)))
    # a reduction inside a sequential loop starts again at every step that its value depends on
    steps = tuple(r for r in kernel_order(list(ctx.sequential)) if any(u is r for u in value.toposort()))
    first = UOp(Ops.INDEX, (UOp(Ops.AFTER, (accumulator, *ctx.outer, *steps)), lanes))
    init = UOp(Ops.STORE, (first, reduce_identity(op, dtype)))
    inside = UOp(Ops.INDEX, (UOp(Ops.AFTER, (accumulator, init, *loops)), lanes))
    update = UOp(Ops.STORE, (inside, UOp(op, (UOp(Ops.LOAD, (inside,)), value))))
    closed = update
    for r in reversed(kernel_order(list(loops))):
        closed = UOp(Ops.END, (closed, r))
    return UOp(Ops.LOAD, (UOp(Ops.INDEX, (UOp(Ops.AFTER, (accumulator, closed)), lanes)),))


def fuse_wmma_accumulate(acc: UOp, wmma: UOp) -> UOp | None:
    """``acc + WMMA(a, b, 0)`` is ``WMMA(a, b, acc)``: the tensor core accumulates by itself."""
    zero = wmma.src[2]
    lanes = zero.src if zero.op is Ops.VECTORIZE else (zero,)
    if not all(s.op is Ops.CONST and s.arg[0] == 0 for s in lanes):
        return None
    return UOp(Ops.WMMA, (wmma.src[0], wmma.src[1], acc), wmma.arg)


accumulator_rules = PatternMatcher([
    (UPat(Ops.REDUCE, name="reduce"), lower_reduce, "lower_reduce"),
    (UPat(Ops.ADD, src=[UPat(Ops.LOAD, name="acc"), UPat(Ops.WMMA, name="wmma")]), fuse_wmma_accumulate, "fuse_wmma_accumulate"),  # noqa: E501
], name="accumulators")


def lower_reductions(ast: UOp) -> UOp:
    """Every REDUCE of the kernel as a REG accumulator (see the module docstring)."""
    if not any(u.op is Ops.REDUCE for u in ast.toposort()):
        return ast
    outer = tuple(r for r in ranges_of(ast) if r.arg[1] not in REDUCE_TYPES)
    context = AccumulatorContext(outer, sequential_axes(ast))
    return graph_rewrite(ast, accumulator_rules, ctx=context, name="accumulators")


# ---------------------------------------------------------------------------------------------
# the stage


def select_instructions(ast: UOp, backend: Backend, name: str = "kernel") -> UOp:
    """Instruction Selection for one kernel: REDUCE → REG accumulators, then the target's rules
    (decompositions of what the backend lacks, devectorization)."""
    ast = lower_reductions(ast)
    matcher = instruction_selection_matcher(
        backend.supported_ops, backend.vector_widths, backend.supports_dtype(dtypes.float64),
        backend.scalar_dtypes, backend.vector_bytes, transposed_stores=backend.transposes_stores,
    )
    ast = graph_rewrite(ast, matcher, name="instruction selection")
    if not backend.vector_widths:
        ast = devectorize(ast)
    missing = sorted({u.op.name for u in ast.toposort() if u.op in GroupOp.ELEMENTWISE
                      and u.op not in backend.supported_ops and u.op is not Ops.CAST})
    if missing:
        raise PipelineError(f"kernel {name}: the {backend.name} backend has no {', '.join(missing)} and no "
                            f"instruction-selection rule decomposed them")
    return ast


def instruction_selection_stage(lowering: Lowering) -> None:
    """Instruction Selection: accumulators for reductions, then the target's instruction rules."""
    backend = backend_named(lowering.backend)
    lowering.replace_bodies(once_per_body(
        lowering, lambda item: select_instructions(item.body, backend, item.kernel.name)))
