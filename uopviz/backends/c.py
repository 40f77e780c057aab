"""The C backend: C99 with GCC vector extensions, compiled by gcc or clang and called through ctypes.

The C backend emits GCC vector extensions for vector lanes (``float32x4`` typedefs; contiguous
loads and stores through ``__builtin_memcpy``), runs THREAD ranges with ``#pragma omp parallel
for`` and compiles with gcc (or clang) ``-O3 -march=native -shared -fPIC`` into a shared library
that ``ctypes`` loads.  Compiled libraries are cached on disk by a hash of source, compiler and flags.
The renderer is the C-family one (:mod:`uopviz.backends.cfamily`), the compiler is found by
:mod:`uopviz.backends.toolchain` and the library runs through :mod:`uopviz.backends.cpu_runtime`.
"""

from __future__ import annotations

import functools
import platform
import re
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from uopviz.backends.base import (
    COMPILED_ALU_OPS,
    Backend,
    CompileError,
    KernelMeta,
    SourceMap,
    TargetsCPU,
    cpu_tensor_cores,
)
from uopviz.backends.cache import cache_folder, cached_file, cached_path, content_key, store_built_file
from uopviz.backends.cfamily import CStyleRenderer
from uopviz.backends.cfamily_dialect import C_COMPARISONS, CDialect
from uopviz.backends.cfamily_spelling import Address, CRendering
from uopviz.backends.cpu_runtime import CPUCompiledKernel, CPULaunch, load_function
from uopviz.backends.linear_program import WINDOW_MAX_TRIPS, power_of_two, underlying_buffer
from uopviz.backends.register_tile import register_tiles_supported
from uopviz.backends.target import cpu_target
from uopviz.backends.toolchain import (
    C_FLAGS,
    GCC_WORKAROUND_FLAG,
    compiler_version,
    find_c_compiler,
    openmp_works,
)
from uopviz.core.affine import even_lane_picks
from uopviz.core.dtype import DType, dtypes
from uopviz.core.ops import AxisType, GroupOp, Ops
from uopviz.core.uop import UOp

#: C99 with GCC vector extensions and OpenMP pragmas
C_DIALECT = CDialect(
    name="c",
    scalar_types={
        "bool": "bool",
        "int8": "int8_t",
        "int16": "int16_t",
        "int32": "int32_t",
        "int64": "int64_t",
        "uint8": "uint8_t",
        "uint16": "uint16_t",
        "uint32": "uint32_t",
        "uint64": "uint64_t",
        "float16": "_Float16",
        "bfloat16": "float",
        "float32": "float",
        "float64": "double",
        "index": "int64_t",
    },
    memory_types={"bfloat16": "uint16_t"},
    kernel_prefix="void",
    includes=("#include <stdint.h>", "#include <stdbool.h>", "#ifdef _OPENMP", "#include <omp.h>", "#endif"),
    parallel_pragma="#pragma omp parallel for schedule(static)",
    barrier="/* BARRIER: workgroups are one thread here, nothing to wait for */",
    prefetch="__builtin_prefetch({pointer});",
    native_vector_counts=(2, 4, 8, 16, 32, 64, 128, 256),
    native_vector_ops=frozenset(
        {Ops.ADD, Ops.SUB, Ops.MUL, Ops.DIV, Ops.NEG, Ops.AND, Ops.OR, Ops.XOR, Ops.RECIP, Ops.MULACC}
    ),
    vector_name="{scalar}x{count}",
    vector_bool_element="signed char",
    vector_typedef="typedef {element} {name} __attribute__((vector_size({bytes})));",
    vector_literal="(({type}){{{items}}})",
    vector_convert="__builtin_convertvector({value}, {type})",
    vector_convert_index=False,
    vector_wrapping_negate="(({type})(-(({unsigned}){a})))",
    vector_wrapping_binary="(({type})((({unsigned}){a}) {op} (({unsigned}){b})))",
    float16_constant="((_Float16){})",
    float_specials={
        ("float32", "nan"): '__builtin_nanf("")',
        ("float32", "inf"): "__builtin_inff()",
        ("float32", "-inf"): "-__builtin_inff()",
        ("float64", "nan"): '__builtin_nan("")',
        ("float64", "inf"): "__builtin_inf()",
        ("float64", "-inf"): "-__builtin_inf()",
    },
    math_functions={
        Ops.SQRT: "__builtin_sqrt",
        Ops.EXP2: "__builtin_exp2",
        Ops.LOG2: "__builtin_log2",
        Ops.SIN: "__builtin_sin",
        Ops.TRUNC: "__builtin_trunc",
        Ops.POW: "__builtin_pow",
    },
    math_float16_call="((_Float16){})",
    math_float16_argument="(float){}",
)


#: GCC only (clang has no such pragma): the functions after it are compiled without ``-fgcse``
NO_GCSE_PRAGMA = '#if defined(__GNUC__) && !defined(__clang__)\n#pragma GCC optimize ("no-gcse")\n#endif'
#: a window loop GCC unrolls whole (a 3x3 or 5x5 convolution's kx, of at most WINDOW_MAX_TRIPS
#: trips), with at least this many broadcast inputs in its body (a register tile of 7 positions)
GCSE_MIN_BROADCASTS = 7


def gcse_spills_tile(linear: UOp) -> bool:
    """Whether ``linear`` has an innermost loop of 2 to 7 trips (GCC unrolls it whole) that
    broadcasts 7 or more loaded scalars (a register tile of 7 positions, 7 accumulators): GCC's
    global CSE then keeps the inputs shared by consecutive window steps (position p at kx + 1 is
    position p + 1 at kx) live across the steps, which leaves too few of the 16 AVX2 registers and
    spills an accumulator into the loop.  Without it, each kernel alone, warm, in the model (min of
    15, AMD EPYC, AVX2): ResNet-50's 3x3 convolutions at 14x14 and 7x7 2.89 -> 2.19 and 3.21 -> 2.60
    ms, Inception-v1's at 14x14 0.86-0.90x.  Left on elsewhere: 1x1 convolutions and 4-position
    tiles measured up to 1.1x slower without it."""
    return bool(window_tile_loops(linear))


@functools.lru_cache(maxsize=64)
def window_tile_loops(linear: UOp) -> frozenset[UOp]:
    """The innermost loops of ``linear`` of 2 to :data:`WINDOW_MAX_TRIPS` constant trips that
    broadcast :data:`GCSE_MIN_BROADCASTS` or more loaded scalars: a register tile's window row (a
    3x3 or 5x5 convolution's kx over a tile of 7 positions).

    The C renderer asks GCC to unroll each whole (``#pragma GCC unroll``, clang reads it too): GCC
    leaves one rolled where its body is large, AVX-512's 7 positions x 32 channels (14
    accumulators, 7 broadcasts and 2 weight loads a tap): Inception-v1's 5x5 convolutions alone on
    random arrays (Sapphire Rapids, 2 cores) 88 -> 58 us, as LLVM's code, which unrolls them."""
    instructions = linear.src
    loops = []
    for start, u in enumerate(instructions):
        if u.op is not Ops.RANGE or u.src[0].op is not Ops.CONST:
            continue
        if not 2 <= int(u.src[0].arg[0]) <= WINDOW_MAX_TRIPS:
            continue
        body = _loop_body(instructions, start, max_inner_trips=0)
        if body is not None and len({b for b in body if _broadcast_load(b)}) >= GCSE_MIN_BROADCASTS:
            loops.append(u)
    return frozenset(loops)


def _loop_body(instructions: tuple[UOp, ...], start: int, max_inner_trips: int) -> list[UOp] | None:
    """The instructions between the RANGE at ``instructions[start]`` and its END; None where a loop
    of more than ``max_inner_trips`` trips opens inside it (0: the loop must be innermost; 1: loops
    of one trip, a 1x1 filter's, may sit inside) or the END never comes."""
    loop = instructions[start]
    for end in range(start + 1, len(instructions)):
        inner = instructions[end]
        bound = inner.src[0] if inner.op is Ops.RANGE else None
        if bound is not None and (bound.op is not Ops.CONST or int(bound.arg[0]) > max_inner_trips):
            return None
        if inner.op is Ops.END and inner.src[-1] is loop:
            return list(instructions[start + 1 : end])
    return None


#: GCC only: the functions after it are compiled as with ``-funroll-loops``
UNROLL_LOOPS_PRAGMA = (
    '#if defined(__GNUC__) && !defined(__clang__)\n#pragma GCC optimize ("unroll-loops")\n#endif'
)
#: a register tile's reduction loop worth unrolling: at least this many trips (a channel sum, not a
#: window), this many broadcast inputs per trip (a tile of positions), vectors this wide (AVX2's)
TILE_UNROLL_MIN_TRIPS = 24
TILE_UNROLL_MIN_BROADCASTS = 4
TILE_UNROLL_MIN_VECTOR_BYTES = 32


def unrolls_tile_reduction(linear: UOp) -> bool:
    """Whether GCC should unroll the loops of ``linear``: a register tile's reduction in a kernel
    whose every loop has a constant trip count.  The tile's reduction: a loop of at least
    :data:`TILE_UNROLL_MIN_TRIPS` trips with only loops of one trip inside it, each trip
    broadcasting at least :data:`TILE_UNROLL_MIN_BROADCASTS` loaded scalars (a 1x1 convolution's
    positions) into vectors of :data:`TILE_UNROLL_MIN_VECTOR_BYTES` or more, more of them than the
    weight vectors they multiply.

    GCC does not unroll that loop (``#pragma GCC unroll`` is lost where OpenMP outlines the
    parallel loop); LLVM does, 3 trips at a time.  Each changed kernel alone, in the model, on its
    arrays, before/after in one process (min of 15-21, AMD EPYC, AVX2): ResNet-50's 29 45.7 -> 42.4
    ms, Inception-v1's 27 6.39 -> 5.76 ms, MobileNet-v2's 33 5.58 -> 5.33 ms, DenseNet-121's 3
    (those not sharing their extents) 7.55 -> 5.32 ms.  Left alone: a trip count read at run time
    (kernels sharing their extents: DenseNet-121's 1x1 convolutions at 28x28 1.5-1.9x slower
    unrolled), windows, pools and a classifier's row of weights, each meeting one broadcast
    (1.0-1.4x), and SSE's 16-byte tiles (x86-64-v2 on the same host: MobileNet-v2's 1x1
    convolutions 1.0-1.2x).  AVX-512's tiles (64-byte vectors, 32 registers) are unrolled too,
    unmeasured."""
    instructions = linear.src
    if any(u.op is Ops.RANGE and u.src[0].op is not Ops.CONST for u in instructions):
        return False
    return any(
        u.op is Ops.RANGE and u.arg[1] is AxisType.REDUCE and int(u.src[0].arg[0]) >= TILE_UNROLL_MIN_TRIPS
        and _broadcasts_over_weights(instructions, start)
        for start, u in enumerate(instructions)
    )


def _broadcasts_over_weights(instructions: tuple[UOp, ...], start: int) -> bool:
    """Whether the loop opened at ``instructions[start]``, with only one-trip loops inside it,
    broadcasts at least :data:`TILE_UNROLL_MIN_BROADCASTS` loaded scalars into vectors of
    :data:`TILE_UNROLL_MIN_VECTOR_BYTES` or more each trip, more than the weight vectors it loads:
    each weight vector meets several broadcast positions (a classifier's row of weights meets one
    each, and ran 1.1-1.4x slower unrolled)."""
    body = _loop_body(instructions, start, max_inner_trips=1)
    if body is None:
        return False  # a loop of its own inside: not the tile's innermost reduction
    broadcasts = {
        u for u in body if (_broadcast_load(u) or _broadcast_lane(u))
        and u.dtype.count * u.dtype.scalar.itemsize >= TILE_UNROLL_MIN_VECTOR_BYTES
    }
    weights = {u for u in body if _vector_load_from_memory(u)} - {b.src[0] for b in broadcasts}
    return len(broadcasts) >= TILE_UNROLL_MIN_BROADCASTS and len(broadcasts) > len(weights)


#: GCC only: if-conversion back on (``GCC_WORKAROUND_FLAG`` turns it off for every kernel)
IF_CONVERSION_PRAGMA = (
    '#if defined(__GNUC__) && !defined(__clang__)\n#pragma GCC optimize ("tree-loop-if-convert")\n#endif'
)


def needs_if_conversion(linear: UOp) -> bool:
    """Whether ``linear`` has no reduction and a scalar branch in its loop: an element read under a
    gate (a padded copy: the input where the position is inside it, a constant elsewhere) or a float
    MAX (the NaN test of ``max_float32``: a batch norm's ReLU left to the compiler's vectors).  GCC
    vectorises such a loop only with its loop if-conversion, which ``GCC_WORKAROUND_FLAG`` turns off
    because it miscompiled nested sums of gated terms, a reduction; without it Inception-v1's -inf
    padded copy of 240 channels at 29x29 took 0.21 ms, LLVM 0.066 ms, with it 0.066 ms, and
    DenseNet-121's batch norm + ReLU over 7x7 maps (49 positions, no lanes of ours) 0.027 ms
    against LLVM's 0.010."""
    reduces = any(u.op is Ops.RANGE and u.arg[1] is AxisType.REDUCE for u in linear.src)
    branches = any(
        (u.op is Ops.LOAD and len(u.src) == 3 and u.dtype.count == 1)
        or (u.op is Ops.MAX and u.dtype.count == 1 and u.dtype.is_float)
        for u in linear.src
    )
    return branches and not reduces


def _broadcast_load(u: UOp) -> bool:
    """Whether ``u`` is one loaded scalar in every lane of a vector."""
    return (
        u.op is Ops.VECTORIZE
        and u.src[0].op is Ops.LOAD
        and u.src[0].dtype.count == 1
        and all(lane is u.src[0] for lane in u.src)
    )


def _vector_load_from_memory(u: UOp) -> bool:
    """Whether ``u`` loads a vector from a buffer of the kernel (not an accumulator's register)."""
    return (
        u.op is Ops.LOAD
        and u.dtype.count > 1
        and u.src[0].op is Ops.INDEX
        and underlying_buffer(u.src[0].src[0]).op is Ops.PARAM
    )


def _broadcast_lane(u: UOp) -> bool:
    """Whether ``u`` is one lane of a loaded vector in every lane of a vector (a tile of 4
    positions loads them as one vector and broadcasts each)."""
    return (
        u.op is Ops.GEP
        and len(u.arg) > 1
        and len(set(u.arg)) == 1
        and u.src[0].op is Ops.LOAD
    )


#: float32 lanes -> (the masked-load builtin, its mask's C type, the CPU feature it needs)
MASKED_FLOAT32_LOADS = {
    16: ("__builtin_ia32_loadups512_mask", "unsigned short", "avx512f"),
    8: ("__builtin_ia32_loadups256_mask", "unsigned char", "avx512vl"),
}


class CRenderer(CStyleRenderer):
    """C99 with GCC vector extensions and OpenMP pragmas (:data:`C_DIALECT`).

    Vector comparisons, WHERE, shifts and float → int casts have whole-vector forms here: lane-by-lane
    code (``(boolx8){a[0] < b[0], ...}``) stops GCC from vectorising the transcendental decompositions
    (measured: exp over 4M floats 3× slower).  GCC's vector comparisons give 0/-1 lanes of an integer
    vector; bool vectors hold 0/1 lanes (like scalar bools), so masks are converted both ways."""

    dialect = C_DIALECT

    def vector_from_runs(
        self, dtype: DType, runs: Sequence[tuple[str, int, int, int]]
    ) -> tuple[list[str], str] | None:
        """Copies of the runs' bytes into a new vector variable, or one ``__builtin_shufflevector``
        where every run comes from one vector.  GCC turns copies from several vectors into register
        moves (a concatenation), where a literal of lanes ``{a[0], ..., b[7]}`` became inserts and
        extracts through the stack (float32 sin's quadrant, narrowed from two int64x8 halves: a third
        of its time)."""
        name = self._state.fresh("join")
        size = dtype.scalar.itemsize
        lines = [f"{self.vector_type(dtype)} {name};"]
        offset = 0
        copies = []
        for vector, _, first, count in runs:
            target, source = f"(char*)&{name} + {offset * size}", f"(char*)&{vector} + {first * size}"
            copies.append(f"__builtin_memcpy({target}, {source}, {count * size});")
            offset += count
        sources = {(vector, width) for vector, width, _, _ in runs}
        if len(sources) != 1 or not power_of_two(dtype.count) or not power_of_two(runs[0][1]):
            return lines + copies, name
        # lanes of one vector repeated, reordered or a part of it (a register tile's weights, each
        # broadcast over a row of columns; a row of columns repeated for two channels; the halves of
        # an accumulator summed after the loop): one shuffle.  GCC turned the copies into stores and
        # a reload through the stack that stalls (MobileNet-v2's 1x1 convs: 12x slower than LLVM),
        # and an accumulator whose half is copied lives on the stack for the whole loop (its
        # classifier: 376 -> 255 us).  GCC has the shuffle since 12, clang long before.
        ((vector, width),) = sources
        shuffle = []
        while width < dtype.count:  # widened by doubling: GCC widens 4 -> 16 lanes through the stack
            wider = self._state.fresh("wide")
            doubled = ", ".join(str(i) for i in range(2 * width))
            shuffle.append(f"{self.vector_type(dtype.scalar.vec(2 * width))} {wider} = "
                           f"__builtin_shufflevector({vector}, {vector}, {doubled});")
            vector, width = wider, 2 * width
        lanes = ", ".join(str(first + i) for _, _, first, count in runs for i in range(count))
        return [
            *lines,
            "#if defined(__clang__) || __GNUC__ >= 12",
            *shuffle,
            f"{name} = __builtin_shufflevector({vector}, {vector}, {lanes});",
            "#else",
            *copies,
            "#endif",
        ], name

    shuffles_two_vectors = True
    # GCC folds a lane read from memory into the FMA that broadcasts it (AVX-512's {1to16} operand,
    # elsewhere vbroadcastss from memory: a load port); from a loaded vector it moved the first
    # lanes through a general register and vmovd, vbroadcastss (port 5, beside the FMAs):
    # MobileNet-v2's 1x1 convs as 8 columns x 16 channels took 1.1-1.2x LLVM's time
    broadcasts_lanes_from_memory = True

    def two_vector_shuffle(
        self, dtype: DType, halves: Sequence[str], picks: Sequence[int], prefix: str = "even"
    ):
        """``__builtin_shufflevector`` of the two halves (GCC 12+, clang); the fallback before.  The
        even lanes of two 8-lane vectors of 4-byte elements (a stride-2 row, :func:`even_lane_picks`)
        are picked in two steps, as x86 has them: within each 128-bit half (``vshufps``), then the
        64-bit pairs into place (``vpermpd``).  In one step GCC permuted each vector across its
        halves and blended them (two ``vpermd`` and a ``vblendps``): MobileNet-v2's stride-2 3x3
        depthwise convolution at 112x112 alone on random arrays 0.536 -> 0.256 ms.  With AVX-512VL
        one step is one ``vpermt2ps``, which picks from two vectors at once: the same kernel alone
        0.120 -> 0.109 ms (Sapphire Rapids)."""
        name = self._state.fresh(prefix)
        vector = self.vector_type(dtype)
        lanes = ", ".join(map(str, picks))
        even_row = dtype.count == 8 and dtype.scalar.itemsize == 4 and list(picks) == even_lane_picks(8)
        if even_row and "avx512vl" not in cpu_target().features:
            steps = [
                f"  {vector} pairs = __builtin_shufflevector(low, high, 0, 2, 9, 11, 4, 6, 13, 15);",
                f"  {name} = __builtin_shufflevector(pairs, pairs, 0, 1, 4, 5, 2, 3, 6, 7);",
            ]
        else:
            steps = [f"  {name} = __builtin_shufflevector(low, high, {lanes});"]

        def lines(fallback: str, tail: Sequence[tuple[int, str]] = ()) -> list[str]:
            """The declaration; ``tail``: lanes ``(lane, value)`` set after the shuffle."""
            return [
                f"{vector} {name};",
                "#if defined(__clang__) || __GNUC__ >= 12",
                "{",
                f"  {vector} low = {halves[0]}, high = {halves[1]};",
                *steps,
                *(f"  {name}[{lane}] = {value};" for lane, value in tail),
                "}",
                "#else",
                f"{name} = {fallback};",
                "#endif",
            ]

        return lines, name

    def constant_vector(self, name: str, dtype: DType, items: Sequence[str]) -> tuple[str, str] | None:
        """``static const``: a vector of constants declared before an OpenMP loop is otherwise
        passed to the outlined loop body in the shared-variables struct, where GCC no longer sees
        its lanes: shifts by a constant became variable shifts with masks and a multiply by -1 a
        ``vpmulld`` (float32 exp: C 1.22-1.36x LLVM's time)."""
        if self.struct_vector(dtype):
            return None
        return f"static const {self.vector_type(dtype)} {name} = {{{', '.join(items)}}};", name

    def range_header(self, range_uop: UOp, name: str, bound: str, parallel: bool) -> list[str]:
        """A register tile's window row unrolled whole (:func:`window_tile_loops`)."""
        header = super().range_header(range_uop, name, bound, parallel)
        if self._state is not None and range_uop in window_tile_loops(self._state.linear):
            return [f"#pragma GCC unroll {int(range_uop.src[0].arg[0])}", *header]
        return header

    def directives(self, state: CRendering) -> list[str]:
        """GCC's global common-subexpression pass off for a kernel whose short window loops it
        unrolls into a register tile too full for the values it would share (:func:`gcse_spills_tile`),
        its loop unrolling on for a register tile's reduction (:func:`unrolls_tile_reduction`) not
        written as an assembly block, and
        its loop if-conversion on for a loop with a scalar branch and no reduction
        (:func:`needs_if_conversion`)."""
        lines = [NO_GCSE_PRAGMA] if gcse_spills_tile(state.linear) else []
        # a tile written as an assembly block is not unrolled: GCC gave each unrolled copy's
        # accumulators registers of their own and spilled them between copies (ResNet-50's 1x1
        # conv 1024 -> 256 at 14x14 as 7 x 16: 1.11 ms unrolled, 0.70 not)
        unrolled = unrolls_tile_reduction(state.linear) and not state.register_tiles
        lines += [UNROLL_LOOPS_PRAGMA] if unrolled else []
        return lines + ([IF_CONVERSION_PRAGMA] if needs_if_conversion(state.linear) else [])

    def register_pin(self, name: str) -> str | None:
        """An empty ``asm`` that takes the vector in a SIMD register: GCC otherwise folds a vector
        loaded once and used by several FMAs into each FMA as a memory operand, loading it again
        for every use (gemm's row of B: the loads, not the FMAs, bound the loop; 101 → 155 GFLOP/s
        on AVX2).  x86's constraint is "x", AArch64's "w"."""
        constraint = {"x86_64": "x", "AMD64": "x", "aarch64": "w", "arm64": "w"}.get(platform.machine())
        return None if constraint is None else f'__asm__("" : "+{constraint}"({name}));'

    def register_tile_lanes(self) -> int | None:
        """Register tiles are assembly blocks on x86-64 targets with FMA and 32-byte registers
        (:func:`uopviz.backends.register_tile.register_tiles_supported`): 8 float32 lanes."""
        target = cpu_target()
        return target.vector_bytes // 4 if register_tiles_supported(target) else None

    def prefix_vector_load(self, address: Address, alt: str, lanes: int) -> str | None:
        """AVX-512's masked load (``vmovups`` under a constant mask: the lanes off are never read,
        so no test of the buffer's end is needed), for float32 vectors of 16 lanes (8 with
        AVX512VL); GCC and clang both have the builtin.  The whole-vector read behind a test of the
        buffer's end left a compare and a branch beside every load of MobileNet-v2's depthwise convs
        at 14x14 (rows of 14 padded to 16, their input rows read at nine offsets a tile): each
        kernel alone, both renders compiled in one process and run in turn (AMD EPYC, AVX-512, 2
        cores, median of 80), 384 channels 0.047 -> 0.045 ms, 576 channels 0.064 -> 0.062 (with
        the L2 flushed before each run 0.075 -> 0.073); the values the same.  A copy of the lanes'
        bytes into the vector (``memcpy``, as the prefix store) went through the stack: a
        store-forwarding stall a load."""
        dtype = address.dtype
        found = MASKED_FLOAT32_LOADS.get(dtype.count)
        if dtype.scalar is not dtypes.float32 or found is None:
            return None
        name, mask_type, feature = found
        if feature not in cpu_target().features:
            return None
        return f"{name}({address.buffer} + {address.offset}, {alt}, ({mask_type}){(1 << lanes) - 1:#x})"

    def two_vector_shuffle_fallback(self, dtype: DType, halves: Sequence[str], picks: Sequence[int]) -> str:
        """GCC before 12 (no ``__builtin_shufflevector``): ``__builtin_shuffle``, GCC's own form of
        the same shuffle, where the lane-by-lane literal went through the stack (MobileNet-v2's 24 ->
        144 channel conv with its tile transposed: 212 us lane by lane, 151 us storing elements)."""
        picked = ", ".join(map(str, picks))
        return f"__builtin_shuffle({halves[0]}, {halves[1]}, ({self._mask_type(dtype)}){{{picked}}})"

    def _mask_type(self, dtype: DType) -> str:
        """The signed integer vector type with ``dtype``'s lane count and lane width."""
        return self.vector_type(dtypes.from_name(f"int{dtype.scalar.itemsize * 8}").vec(dtype.count))

    def _pick(self, selector: str, if_true: str, if_false: str, dtype: DType) -> str:
        """``if_true``'s lanes where the 0/-1 integer vector ``selector`` is -1, ``if_false``'s
        elsewhere (C has no vector ``?:``: the bits are masked)."""
        mask = self._mask_type(dtype)
        picked = f"((({mask}){if_true} & {selector}) | (({mask}){if_false} & ~{selector}))"
        return f"(({self.vector_type(dtype)}){picked})"

    def selects_lanes(self, dtype: DType) -> bool:
        """Numbers of the widths GCC's vectors hold natively (float16 and bfloat16 vectors are
        converted lane by lane here, as in :meth:`vector_expression`)."""
        scalar = dtype.scalar
        return not (
            scalar.is_bool or scalar is dtypes.index or scalar is dtypes.float16 or self.held_as_float(scalar)
        )

    def select_lanes(self, mask: str, if_true: str, if_false: str, dtype: DType) -> str:
        selector = f"(-__builtin_convertvector({mask}, {self._mask_type(dtype)}))"
        return self._pick(selector, if_true, if_false, dtype)

    def vector_expression(self, u: UOp, operands: list[str]) -> str | None:
        op, dtype = u.op, u.dtype
        if any(s.dtype.count != dtype.count for s in u.src) or any(
            self.held_as_float(s.dtype.scalar) or s.dtype.scalar is dtypes.float16 for s in u.src
        ):
            return None
        if op in GroupOp.COMPARISON and op in C_COMPARISONS:
            # the 0/-1 mask is kept in a variable of its own: a WHERE on it selects without
            # converting to bool lanes and back
            state = self._state
            mask = state.fresh("mask")
            state.emit(
                f"{self._mask_type(u.src[0].dtype)} {mask} = "
                f"({operands[0]} {C_COMPARISONS[op]} {operands[1]});"
            )
            state.vector_masks[u] = mask
            return f"(__builtin_convertvector({mask}, {self.vector_type(dtype)}) & 1)"
        if op is Ops.WHERE:
            value = u.src[1].dtype
            mask = self._mask_type(value)
            condition = u.src[0]
            known = self._state.vector_masks.get(condition)
            same_width = condition.src and condition.src[0].dtype.scalar.itemsize == value.scalar.itemsize
            if known is not None and same_width:
                selector = known
            else:
                selector = f"(-__builtin_convertvector({operands[0]}, {mask}))"
            return self._pick(selector, operands[1], operands[2], value)
        if op is Ops.MAX and not dtype.scalar.is_bool and dtype.scalar is not dtypes.index:
            # numpy's maximum: a NaN in the first operand wins, as the scalar helper says; a lane-by-lane
            # helper call stops GCC vectorising the whole chain (abs in exp: 2.6x slower)
            a, b = operands
            mask = self._mask_type(dtype)
            chosen = f"(({a} != {a}) | ({a} > {b}))" if dtype.scalar.is_float else f"({a} > {b})"
            picked = f"((({mask}){a} & {chosen}) | (({mask}){b} & ~{chosen}))"
            return f"(({self.vector_type(dtype)}){picked})"
        if op in (Ops.SHL, Ops.SHR) and dtype.scalar.is_int and dtype.scalar is not dtypes.index:
            return f"{self.helper_vector_shift(op, dtype)}({operands[0]}, {operands[1]})"
        if op is Ops.TRUNC and dtype.scalar in (dtypes.float32, dtypes.float64):
            return f"{self.helper_vector_trunc(dtype)}({operands[0]})"
        return None

    def helper_vector_trunc(self, dtype: DType) -> str:
        """Lane-wise truncation: through the integers where every float is below ``2**mantissa`` in
        magnitude (the others are integers already, or inf/nan), keeping the sign (``trunc(-0.5)`` is
        ``-0.0``)."""
        f, i = self.vector_type(dtype), self._mask_type(dtype)
        bits = dtype.scalar.bits
        suffix = "f" if dtype.scalar is dtypes.float32 else ""
        sign = f"(({i}){{}} + (-{2 ** (bits - 1) - 1}{self.dialect.long_suffix if bits == 64 else ''} - 1))"
        limit = f"{2.0 ** (23 if bits == 32 else 52)!r}{suffix}"
        name = f"trunc_{f}"
        body = (
            f"{i} sign = ({i})x & {sign};\n"
            f"  {f} magnitude = ({f})(({i})x & ~sign);\n"
            f"  {i} small = ({i})(magnitude < {limit});\n"
            f"  {i} integer = __builtin_convertvector(({f})(({i})x & small), {i});\n"
            f"  {f} whole = __builtin_convertvector(integer, {f});\n"
            f"  return ({f})(((({i})whole | sign) & small) | (({i})x & ~small));"
        )
        return self.helper(name, lambda: f"{self.dialect.helper_prefix} {f} {name}({f} x) {{\n  {body}\n}}")

    def helper_vector_shift(self, op: Ops, dtype: DType) -> str:
        """Lane-wise SHL/SHR with the scalar helpers' rule for counts outside ``[0, bits)``."""
        t = self.vector_type(dtype)
        bits = dtype.scalar.bits
        unsigned = self.vector_type(dtypes.from_name(f"uint{bits}").vec(dtype.count))
        name = f"{'shl' if op is Ops.SHL else 'shr'}_{t}"
        fits = f"(({t})(({unsigned})b < {bits}))"
        if op is Ops.SHL:
            body = f"return ({t})(({unsigned})a << (b & {bits - 1})) & {fits};"
        elif dtype.scalar.is_unsigned:
            body = f"return (a >> (b & {bits - 1})) & {fits};"
        else:
            body = f"return ((a >> (b & {bits - 1})) & {fits}) | ((a >> {bits - 1}) & ~{fits});"
        prefix = self.dialect.helper_prefix
        return self.helper(name, lambda: f"{prefix} {t} {name}({t} a, {t} b) {{ {body} }}")

    def vector_cast(self, value: str, source: DType, target: DType) -> str:
        s, t = source.scalar, target.scalar
        if (
            s.is_float
            and t.is_int
            and s.itemsize == t.itemsize
            and s in (dtypes.float32, dtypes.float64)
            and not t.is_unsigned
            and t is not dtypes.index
        ):
            return f"{self.helper_vector_float_to_int(source, target)}({value})"
        return super().vector_cast(value, source, target)

    def helper_vector_float_to_int(self, source: DType, target: DType) -> str:
        """Truncating float → int of equal width, lane-wise, with the scalar helper's result (the
        integer minimum) for NaN and out-of-range lanes; in-range lanes use the compiler's convert."""
        f, i = self.vector_type(source), self.vector_type(target)
        bits = target.scalar.bits
        suffix = "f" if source.scalar is dtypes.float32 else ""
        low, high = f"-{2 ** (bits - 1)}.0{suffix}", f"{2 ** (bits - 1)}.0{suffix}"
        minimum = f"(-{2 ** (bits - 1) - 1}{self.dialect.long_suffix if bits == 64 else ''} - 1)"
        name = f"{f}_to_{i}"
        body = (
            f"{i} fits = ({i})((x >= {low}) & (x < {high}));\n"
            f"  {f} safe = ({f})(({i})x & fits);\n"
            f"  return (__builtin_convertvector(safe, {i}) & fits) | (~fits & {minimum});"
        )
        return self.helper(name, lambda: f"{self.dialect.helper_prefix} {i} {name}({f} x) {{\n  {body}\n}}")


class CBackend(TargetsCPU, Backend):
    """C compiled by gcc/clang with OpenMP for THREAD axes and GCC vectors for UPCAST lanes."""

    name = "c"
    supported_ops = COMPILED_ALU_OPS
    vector_widths = (2, 4, 8, 16)
    has_local = False
    #: bfloat16 is held in float variables and converted lane by lane (C has no bfloat16 vectors)
    scalar_dtypes = frozenset({dtypes.bfloat16})
    transposes_stores = True  # 8 x 16 tiles: 141 -> 105 us (CFamilyRenderState.render_matrix_column)
    tensor_cores = cpu_tensor_cores()
    parallel_compile = True  # each build is a compiler process
    sources_per_build = 4  # (compile_together): DenseNet-121's Render 2.1 -> 1.4-1.6 s; 6 or 8 no better
    shares_extents = True
    #: a whole-vector load and a select of its lanes, on every target (CFamilyState.gated_vector_load)
    loads_gated_vectors_whole = True
    #: two whole loads, a shuffle and a select (CFamilyRenderState.render_every_other_lane)
    loads_gated_strided_vectors_whole = True

    def __init__(self) -> None:
        self.renderer = CRenderer(self.tensor_cores)
        self._compiled: dict[str, CPUCompiledKernel] = {}

    @property
    def writes_register_tiles(self) -> bool:  # type: ignore[override]
        """True on x86-64 targets with FMA and 32-byte registers (:meth:`CRenderer.register_tile_lanes`)."""
        return register_tiles_supported(self.target)

    @property
    def has_threads(self) -> bool:  # type: ignore[override]
        """True when the compiler's OpenMP works (else THREAD loops run sequentially)."""
        compiler = find_c_compiler()
        return compiler is not None and openmp_works(compiler) is None

    def threads_note(self) -> str:
        """Why THREAD axes run sequentially, or '' when they run in parallel."""
        compiler = find_c_compiler()
        if compiler is None:
            return "no C compiler"
        return openmp_works(compiler) or ""

    def unavailable_reason(self) -> str | None:
        if find_c_compiler() is None:
            return "no C compiler found (install gcc or clang, or set UOPVIZ_CC)"
        return None

    @property
    def vector_bytes(self) -> int:  # type: ignore[override]
        """One SIMD register of the target: GCC lowers wider vector types through memory."""
        return self.target.vector_bytes

    def render(self, linear: UOp) -> str:
        return self.renderer.render(linear)

    def render_mapped(self, linear: UOp) -> tuple[str, SourceMap]:
        return self.renderer.render_mapped(linear)

    def flags(self) -> list[str]:
        """The compiler flags: the target's ISA flags, and OpenMP when it works."""
        compiler = find_c_compiler()
        extra = ["-fopenmp"] if compiler is not None and openmp_works(compiler) is None else []
        if compiler is not None and "gcc" in compiler_version(compiler).lower():
            extra.append(GCC_WORKAROUND_FLAG)
        return [*C_FLAGS, *self.target.c_flags(), *extra]

    def compile(self, source: str, name: str) -> CPUCompiledKernel:
        return self.compile_together([(source, name)])[0]

    def compile_together(self, builds: Sequence[tuple[str, str]]) -> list[CPUCompiledKernel]:
        """Each ``(source, name)`` compiled and loaded, in order; the sources not built before go to
        the compiler in one process (a library of their kernels, cached under each source's key):
        its start and link cost about what a small kernel's compile does (40 of DenseNet-121's
        sources: 4.2 s of compiler time one by one).  Where that build fails, each source is built
        alone, so the error names the kernel it is about."""
        self.require()
        compiler = find_c_compiler()
        assert compiler is not None
        flags = self.flags()
        keys = [self._key(source, compiler, flags) for source, _ in builds]
        fresh: dict[str, tuple[str, str]] = {}  # key -> (source, the function it defines)
        for key, (source, _) in zip(keys, builds):
            if key not in self._compiled and not cached_path("c", key, ".so").exists():
                fresh.setdefault(key, (source, KernelMeta.from_source(source, self.name).name))
        built: dict[str, tuple[float, int]] = {}
        for group in _distinct_names(fresh):
            if len(group) > 1:
                built.update(self._build_together(compiler, flags, group))
        return [self._load(source, name, key, compiler, flags, built)
                for key, (source, name) in zip(keys, builds)]

    def _key(self, source: str, compiler: str, flags: list[str]) -> str:
        # keyed by the resolved target, never by the text -march=native: an object built for
        # another CPU's features would be loaded and die with SIGILL
        return content_key(source, compiler_version(compiler), flags, self.target.key)

    def _build_together(self, compiler: str, flags: list[str],
                        group: dict[str, tuple[str, str]]) -> dict[str, tuple[float, int]]:
        """One library of ``group``'s kernels (key -> (source, function), functions distinct), cached under
        every key; key -> (when the build started, how many kernels it built).  Nothing is cached
        when the build fails.  The sources that can share a translation unit (:func:`one_unit`) are
        compiled as one, the others as files of their own in the same compiler process."""
        start = time.perf_counter()
        joined, apart = [], []
        for source, _ in group.values():
            (joined if shares_a_unit(source) else apart).append(source)
        texts = [one_unit(joined)] if len(joined) > 1 else joined
        with tempfile.TemporaryDirectory(prefix=".together-", dir=cache_folder("c")) as scratch:
            files = []
            for number, text in enumerate([*texts, *apart]):
                path = Path(scratch, f"kernels{number}.c")
                path.write_text(text)
                files.append(str(path))
            library = Path(scratch, "kernels.so")
            result = subprocess.run([compiler, *flags, *files, "-o", str(library), "-lm"],
                                    capture_output=True, text=True, timeout=300)
            if result.returncode != 0:
                return {}
            for key in group:
                store_built_file(library, "c", key, ".so")
        return {key: (start, len(group)) for key in group}

    def _load(self, source: str, name: str, key: str, compiler: str, flags: list[str],
              built: Mapping[str, tuple[float, int]]) -> CPUCompiledKernel:
        """``source`` (cache key ``key``) compiled alone unless cached or ``built`` together with
        others just now, and loaded."""
        target = self.target
        cached = self._compiled.get(key)
        if cached is not None:
            return cached
        meta = KernelMeta.from_source(source, self.name)
        start, together = built.get(key, (time.perf_counter(), 1))

        def build(target: Path) -> None:
            result = subprocess.run(
                [compiler, *flags, "-x", "c", "-", "-o", str(target), "-lm"],
                input=source,
                capture_output=True,
                text=True,
                timeout=300,
            )
            if result.returncode != 0:
                raise CompileError(self.name, name, result.stderr.strip(), source)

        path, was_cached = cached_file("c", key, ".so", build)
        function = load_function(str(path), meta.name, len(meta.params))
        info = {"cached": was_cached and key not in built, "target": target.name,
                "cannot_run": target.why_not_here()}
        if together > 1:
            info["built_with"] = together - 1  # compile_s is then the whole library's
        kernel = CPUCompiledKernel.built(self.name, meta, source, start, info, library_path=str(path),
                                         function=function)
        self._compiled[key] = kernel
        return kernel


#: a helper function the renderer writes at file scope (``static inline T name(...)``)
_FILE_SCOPE_FUNCTION = re.compile(r"^static [^(=;]*?\b([A-Za-z_]\w*)\s*\(")
#: the lines of a source at column 0 that may start with ``#`` and still share a translation unit
_UNIT_DIRECTIVES = frozenset(C_DIALECT.includes)


def shares_a_unit(source: str) -> bool:
    """Whether ``source`` compiles to the same code inside one translation unit with others
    (:func:`one_unit`): its only directives at file scope are the standard includes (a ``#pragma
    GCC optimize`` there changed the code of the functions after it, even between ``push_options``
    and ``pop_options``), it declares no struct type (two sources' ``typedef struct`` of one name
    conflict) and everything ``static`` at file scope is a helper function (renamed per source)."""
    for line in source.splitlines():
        if line.startswith("#") and line not in _UNIT_DIRECTIVES:
            return False
        if line.startswith("static ") and not _FILE_SCOPE_FUNCTION.match(line):
            return False
        if line.startswith("typedef struct"):
            return False
    return True


def one_unit(sources: Sequence[str]) -> str:
    """``sources`` (each :func:`shares_a_unit`, their kernels' names distinct) as one translation
    unit: the includes once, then each source with its helper functions renamed for it (two sources
    define ``load_float32x8`` alike; a ``#define`` gives each its own).  A compiler process per
    source spent a third of its time on its start, the headers and setting up the target: 31 of
    DenseNet-121's sources 1.97 CPU-s as files of one gcc process, 1.46 s as one unit, each
    function's machine code the same as built alone (objdump, alignment padding aside)."""
    parts = list(C_DIALECT.includes)
    for number, source in enumerate(sources):
        found = map(_FILE_SCOPE_FUNCTION.match, source.splitlines())
        helpers = sorted({match.group(1) for match in found if match is not None})
        parts += [f"#define {helper} {helper}_unit{number}" for helper in helpers]
        parts.append(source)
        parts += [f"#undef {helper}" for helper in helpers]
    return "\n".join(parts) + "\n"


def _distinct_names(builds: Mapping[str, tuple[str, str]]) -> list[dict[str, tuple[str, str]]]:
    """``builds`` (key -> (source, the function it defines)) split into groups whose functions' names
    differ (one library cannot hold two functions of one name), in order."""
    groups: list[dict[str, tuple[str, str]]] = []
    for key, (source, name) in builds.items():
        group = next((g for g in groups if all(n != name for _, n in g.values())), None)
        if group is None:
            group = {}
            groups.append(group)
        group[key] = (source, name)
    return groups


__all__ = [  # the C backend, and the names that lived here before the C family was split up
    "C_DIALECT",
    "C_FLAGS",
    "GCC_WORKAROUND_FLAG",
    "CBackend",
    "CPUCompiledKernel",
    "CPULaunch",
    "CRenderer",
    "compiler_version",
    "find_c_compiler",
    "load_function",
    "openmp_works",
]
