"""LLVM IR text from a LINEAR program: :class:`LLVMRenderer` and the walk that writes it
(:class:`LLVMRenderState`, a :class:`~uopviz.backends.linear_walk.LinearWalk`).

One IR instruction (or a few) per uop; loops are the canonical header/body/latch/exit blocks with a
``phi`` induction variable; REG and LOCAL buffers are ``alloca``s in the entry block (``mem2reg``
turns accumulators into registers).  An accumulator whose values wait across a later loop (a fused
residual conv's first sum, read after the second: ``linear_program.parked_accumulators``) is copied
to a second ``alloca`` with volatile stores after its loop and read back with volatile loads, so it
leaves the registers to that loop on every target.  UPCAST lanes are LLVM vector types (``<4 x float>``):
contiguous vector addresses become vector loads and stores, others ``llvm.masked.gather`` /
``llvm.masked.scatter``, gated vector accesses ``llvm.masked.load`` / ``llvm.masked.store`` (a
gated store behind a test of its mask: every lane in range, as all but a padded tile's last vectors
are, takes the plain store).
The instructions of ALU ops and conversions are in :mod:`uopviz.backends.llvm_instructions`, the
spelling of types and constants in :mod:`uopviz.backends.llvm_types`.

THREAD ranges run in parallel when the kernel has one THREAD range at the top with every side
effect inside it (:func:`parallel_range`): the kernel body becomes ``@name.body(..., start, end)``
and ``@name`` hands chunks of the range to the threads of libgomp's ``GOMP_parallel``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from uopviz.backends.base import (
    KernelMeta,
    KernelParam,
    RenderError,
    SourceMap,
    TensorCore,
)
from uopviz.backends.linear_program import (
    PREFETCH_ITERATIONS,
    matrix_column,
    open_scopes,
    parked_accumulators,
    transpose_plan,
    underlying_buffer,
    vector_prefetch_distance,
)
from uopviz.backends.linear_walk import LinearWalk, Scope
from uopviz.backends.llvm_instructions import (
    alu_instruction,
    bfloat16_bits,
    bfloat16_value,
    cast_value,
    round_bfloat16,
)
from uopviz.backends.llvm_types import (
    mangle,
    memory_scalar_type,
    memory_type,
    scalar_literal,
    scalar_type,
    splat,
    value_type,
)
from uopviz.backends.register_tile import RegisterTile, find_register_tiles, register_tiles_supported
from uopviz.backends.target import cpu_target
from uopviz.core.affine import (
    contiguous_start,
    even_lane_picks,
    every_other_lane,
    every_other_lane_loads,
)
from uopviz.core.dtype import AddrSpace, DType, dtypes
from uopviz.core.ops import AxisType, GroupOp, Ops
from uopviz.core.uop import UOp

#: vector multiply-adds a reduction loop's body may hold, its inner loops unrolled, when LLVM
#: unrolls the loop whole: measured on 3x3 convs' taps (below), 126 ran faster unrolled, 144 slower
FULL_UNROLL_FMA_BUDGET = 128
#: the most accumulator registers of a register tile inside a window's tap loops that stays LLVM's
#: own code rather than an assembly block (:mod:`uopviz.backends.register_tile`): LLVM keeps a 5 x 16
#: tile's ten in registers itself, and the 13x13 convs of AlexNet and SqueezeNet that take it were
#: 1.00-1.16x slower as blocks (AlexNet's 384 -> 256 channels 1.75 -> 2.03 ms).  The 7 x 16 tiles (14)
#: are blocks: LLVM's own code for them spills (5.68 ms against 2.91 at 512 channels 7x7), and as
#: blocks, the window's rows kept rolled (:func:`loops_around_register_tiles`), they beat the 7 x 8
#: tile LLVM's own code gets otherwise; docs/design/cpu-conv-layout.md 20.1
OWN_WINDOW_TILE_ACCUMULATORS = 10
#: the most iterations of a loop LLVM unrolls whole (loops of more are no candidates and get no
#: metadata, which keeps the IR readable)
FULL_UNROLL_MAX_TRIP = 16


def loops_kept_rolled(program: Sequence[UOp]) -> set[UOp]:
    """The REDUCE loops of at most :data:`FULL_UNROLL_MAX_TRIP` iterations holding another loop
    whose whole unrolling, inner loops included, would hold more than
    :data:`FULL_UNROLL_FMA_BUDGET` vector multiply-adds (the innermost such loop of a nest): LLVM
    is told not to unroll them.

    The pipeline unrolls what it chose to (UPCAST and UNROLL axes); LLVM at -O3 also unrolls whole
    the small loops around a register tile's innermost loop, e.g. a 3x3 conv's rows of taps.  VGG-16's
    64-channel 3x3 conv at 224x224 (8 x 32 tiles, 16 FMAs a tap: 144 unrolled), one core: 34-39 ms
    unrolled whole, 26-28 ms with the rows' loop kept, as GCC keeps it (26-28 ms); ResNet-18's
    512-channel 3x3 conv at 7x7 (7 x 32 tiles, 14 FMAs a tap: 126) ran faster unrolled (1.34-1.42
    against 1.46-1.49 ms), and a 3x3 max pool's loops (no FMA) too (0.20 against 0.23 ms)."""
    scopes = open_scopes(program)
    trips = {u: u.src[0].arg[0] if u.src[0].op is Ops.CONST else 1 for u in program if u.op is Ops.RANGE}
    fmas: dict[int, int] = {}  # a loop's position -> vector multiply-adds of its body, unrolled
    holds_loop: set[int] = set()
    for index, u in enumerate(program):
        copies = 1
        for opener in reversed(scopes[index]):  # innermost first
            if u.op is Ops.MULACC and u.dtype.count > 1:
                fmas[opener] = fmas.get(opener, 0) + copies
            if program[opener].op is Ops.RANGE:
                copies *= trips[program[opener]]
                if u.op is Ops.RANGE:
                    holds_loop.add(opener)
    over = {index for index in holds_loop
            if program[index].arg[1] is AxisType.REDUCE and 1 < trips[program[index]] <= FULL_UNROLL_MAX_TRIP
            and trips[program[index]] * fmas.get(index, 0) > FULL_UNROLL_FMA_BUDGET}
    # the innermost of a nest over the budget: the loops around it unroll no further once it stays
    around_another = {opener for index in over for opener in scopes[index] if opener in over}
    return {program[index] for index in over - around_another} | _scalar_nests_kept_rolled(program, scopes)


def loops_around_register_tiles(program: Sequence[UOp], tile_loops: Iterable[UOp]) -> set[UOp]:
    """The REDUCE loops of 2 to :data:`FULL_UNROLL_MAX_TRIP` iterations around a register
    tile's loop written as an assembly block (a 3x3 or 5x5 window's rows of taps around the loop of
    one row's taps): LLVM is told not to unroll them; the tile's own loop it unrolls.

    Unrolled whole, a 3x3 conv's nine blocks a channel were slower than LLVM's own code for a tile
    of half the size (Inception-v1's 3x3 and 5x5 convs 1.03-1.20x); all the taps' loops kept
    rolled, 1.7x slower still.  The rows rolled and each row's taps unrolled (three blocks), the 7 x
    16 blocks mostly beat LLVM's 7 x 8: both in one process, each kernel run in turn on the model's
    arrays (AMD EPYC, AVX2, 2 cores, min of 8): ResNet-18's and ResNet-50's stride-1 3x3 convs at 14x14
    and 7x7 0.89-0.98x, Inception-v1's 3x3 and 5x5 convs 0.89-0.93x (models 0.97-0.985x); ResNet-50's
    strided 512-channel one 1.09x, VGG-16's 512-channel ones at 14x14 1.10-1.15x (its model
    1.007x); docs/design/cpu-conv-layout.md 20.1."""
    scopes = open_scopes(program)
    position = {u: index for index, u in enumerate(program)}
    around: set[UOp] = set()
    for loop in tile_loops:
        for opener in scopes[position[loop]]:
            u = program[opener]
            bound = u.src[0] if u.op is Ops.RANGE else None
            if bound is not None and u.arg[1] is AxisType.REDUCE and bound.op is Ops.CONST \
                    and 1 < bound.arg[0] <= FULL_UNROLL_MAX_TRIP:
                around.add(u)
    return around


def _scalar_nests_kept_rolled(program: Sequence[UOp], scopes: Sequence[Sequence[int]]) -> set[UOp]:
    """The loops whose nest holds no vector value and that are a REDUCE loop or read no memory (a
    fill): LLVM is told not to unroll them, for compile time, not speed.

    At -O3 LLVM unrolled such nests whole and its later passes then took seconds over the result:
    DenseNet-121's 7x7 average pool (a scalar REDUCE loop of 7 taps in a loop of 512 channels), 1 s,
    0.9 s of it LoopLoadElimination; its padding's border fills (thousands of unrolled stores),
    0.1-0.5 s each, in the machine schedulers, the unroller and the loop vectorizer; its 40 kernels
    4.5 CPU-s, 1.6-1.9 with these loops rolled.  Their time is the same (each kernel of ten zoo
    models timed both ways in one process: sums 0.991-1.003x; a fill of 3 us took 7).  A scalar loop
    that reads memory and is no reduction (a padded copy) stays LLVM's to unroll: unrolled, its edge
    conditions fold (2x faster)."""
    holds_vector: set[int] = set()  # the loops (positions) whose nest holds a vector value
    holds_load: set[int] = set()
    for index, u in enumerate(program):
        if u.dtype.count > 1:
            holds_vector.update(scopes[index])
        if u.op is Ops.LOAD:
            holds_load.update(scopes[index])
    return {u for index, u in enumerate(program)
            if u.op is Ops.RANGE and index not in holds_vector
            and (u.arg[1] is AxisType.REDUCE or index not in holds_load)}


@dataclass
class _Address:
    buffer: str
    dtype: DType  # what a LOAD from here produces
    pointer: str | None = None  # scalar or contiguous start
    pointers: str | None = None  # <N x ptr> for gathers and scatters (made when a gate needs it)
    lane_pointers: list[str] | None = None  # one pointer per lane of a gather or scatter


class LLVMRenderer:
    """Renders LINEAR programs to LLVM IR (see the module docstring)."""

    def __init__(self, parallel: bool = True):
        self.parallel = parallel

    def render(self, linear: UOp) -> str:
        """The LLVM IR module of a LINEAR program."""
        if linear.op is not Ops.LINEAR:
            raise RenderError(f"llvm: render takes a LINEAR program, got {linear.op.name}")
        return LLVMRenderState(self, linear).run()

    def render_mapped(self, linear: UOp) -> tuple[str, SourceMap]:
        """The LLVM IR module of a LINEAR program and which uop each of its lines was written for."""
        if linear.op is not Ops.LINEAR:
            raise RenderError(f"llvm: render takes a LINEAR program, got {linear.op.name}")
        state = LLVMRenderState(self, linear)
        source = state.run()
        return source, state.source_map(source)


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


class LLVMRenderState(LinearWalk):
    """One rendering: SSA names, blocks, allocas, helper functions and declarations."""

    name_prefix = "%"
    dialect = "llvm"
    # the allocas open the entry block (each indented there), then the body
    mapped_lists = (("allocas", "  "), ("lines", ""))

    def __init__(self, renderer: LLVMRenderer, linear: UOp):
        super().__init__(linear)
        self.r = renderer
        self.addresses: dict[UOp, _Address]  # (made by LinearWalk: what each INDEX addresses)
        self.lines: list[str] = []
        self.allocas: list[str] = []
        self.declarations: dict[str, str] = {}
        self.helpers: dict[str, str] = {}
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
        #: broadcast-only loads of several lanes, each read by one instruction (:meth:`broadcast_base`);
        #: only AVX-512 FMAs take a broadcast memory operand (elsewhere a broadcast is a load of its own)
        self.memory_operand_broadcasts: set[UOp] = set()
        if "avx512f" in cpu_target().features:
            # loads with a lane taken as a scalar, or broadcast to several uses (through a register)
            other_lanes = {u.src[0] for u in self.program
                           if u.op is Ops.GEP and (u.dtype.count == 1 or self.use_counts[u] > 1)}
            self.memory_operand_broadcasts = {load for load in self.broadcast_only
                                              if self.use_counts[load] > 1 and load not in other_lanes}
        self.kept_rolled = loops_kept_rolled(self.program)
        self.plan_parking()
        self.plan_register_tiles()
        self.kept_rolled |= loops_around_register_tiles(self.program, self.register_tiles)
        self.loop_metadata: list[str] = []  # one loop ID per loop kept rolled
        params = self.collect_params()
        self.thread_range = parallel_range(self.program) if self.r.parallel else None
        self.walk(params)
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
            *self.loop_metadata,
        ]
        return "\n".join(out)

    # -- register tiles -----------------------------------------------------------------------
    def plan_register_tiles(self) -> None:
        """The loops written as inline assembly (:mod:`uopviz.backends.register_tile`), on targets
        that get them: those whose accumulators are whole vectors of a register buffer, and whose
        nest reduces over one axis or that take more accumulators than LLVM's own code keeps
        (:data:`OWN_WINDOW_TILE_ACCUMULATORS`)."""
        target = cpu_target()
        if not register_tiles_supported(target):
            return
        lanes = target.vector_bytes // dtypes.float32.itemsize
        tiles = find_register_tiles(self.program, lanes, window_tiles_above=OWN_WINDOW_TILE_ACCUMULATORS)
        self.use_register_tiles({
            loop: tile for loop, tile in tiles.items()
            if all(contiguous_start(a.uop.src[1]) is not None or a.uop.src[1].dtype.count == 1
                   for a in tile.accumulators)
        })

    def render_tile_member(self, u: UOp) -> None:
        """A broadcast input's prefetch, as its LOAD would have had (:meth:`prefetch_line`)."""
        if u.op is Ops.LOAD and u.dtype.count == 1:
            self.prefetch_line(u, self.address_of(u))

    def render_register_tile(self, tile: RegisterTile) -> None:
        """The step as LLVM inline ``asm`` calls (:meth:`RegisterTile.statements`): each returns its
        accumulators' registers, which it takes tied (``0``, ``1``, ...) from their register buffer
        (a vector of two registers split in its two halves, joined again after), reads through one
        pointer per base (``r``) and clobbers the block's own registers and memory (it reads buffers
        that stores earlier in the kernel may have written)."""
        part_type = value_type(dtypes.float32.vec(tile.lanes))
        bases = [self.tile_base(buffer, element) for buffer, element in tile.bases]
        clobbers = [f"~{{xmm{n}}}" for n in tile.scratch_registers()]
        clobbers += ["~{memory}", "~{dirflag}", "~{fpsr}", "~{flags}"]
        for accumulators, lines in tile.statements(lambda n: f"${n}", lambda n: f"%ymm{n}"):
            parts = {a.uop: self.register_parts(a.uop, tile.lanes) for a in accumulators}
            count = len(accumulators)
            tied = [str(n) for n in range(count)]
            constraints = ",".join(["=x"] * count + ["r"] * len(bases) + tied + clobbers)
            result_type = "{ " + ", ".join([part_type] * count) + " }" if count > 1 else part_type
            arguments = [f"ptr {b}" for b in bases]
            arguments += [f"{part_type} {parts[a.uop][a.part]}" for a in accumulators]
            text = "\\0A\\09".join(lines)
            call = f'call {result_type} asm "{text}", "{constraints}"({", ".join(arguments)})'
            result = self.temp("tile", call)
            for number, a in enumerate(accumulators):
                parts[a.uop][a.part] = result if count == 1 else self.temp(
                    "acc", f"extractvalue {result_type} {result}, {number}")
            for index, values in parts.items():
                whole, pointer = self.joined(values, tile.lanes), self.addresses[index].pointer
                self.emit(f"store {value_type(index.dtype)} {whole}, ptr {pointer}, align 4")

    def tile_base(self, buffer: UOp, element: UOp) -> str:
        """The pointer to ``element`` of ``buffer``: a base a register tile's block reads through."""
        source = underlying_buffer(buffer)
        scalar = memory_scalar_type(source.arg.dtype)
        return self.temp("base", f"getelementptr {scalar}, ptr {self.ref(source)}, i64 {self.ref(element)}")

    def register_parts(self, index: UOp, lanes: int) -> list[str]:
        """The vector at ``index`` (an accumulator of a register buffer) loaded, as its parts of
        ``lanes`` lanes each (one register's)."""
        whole_type = value_type(index.dtype)
        whole = self.temp("acc", f"load {whole_type}, ptr {self.addresses[index].pointer}, align 4")
        if index.dtype.count == lanes:
            return [whole]
        parts = []
        for part in range(index.dtype.count // lanes):
            picks = ", ".join(f"i32 {lane}" for lane in range(part * lanes, (part + 1) * lanes))
            parts.append(self.temp("part", f"shufflevector {whole_type} {whole}, {whole_type} poison, "
                                           f"<{lanes} x i32> <{picks}>"))
        return parts

    def joined(self, values: list[str], lanes: int) -> str:
        """Float32 vectors of ``lanes`` lanes each (a power of two of them) joined into one, the
        first's lanes first."""
        while len(values) > 1:
            vector = value_type(dtypes.float32.vec(lanes))
            picks = ", ".join(f"i32 {lane}" for lane in range(2 * lanes))
            values = [self.temp("joined", f"shufflevector {vector} {first}, {vector} {second}, "
                                          f"<{2 * lanes} x i32> <{picks}>")
                      for first, second in zip(values[::2], values[1::2], strict=True)]
            lanes *= 2
        return values[0]

    # -- per op (the methods linear_walk.RENDER_METHODS names) ----------------------------------
    def render_buffer(self, u: UOp) -> None:
        if u.arg.addrspace is AddrSpace.GLOBAL:
            raise self.fail(u, "a GLOBAL BUFFER inside a kernel must be a PARAM")
        name = self.fresh("acc" if u.arg.addrspace is AddrSpace.REG else "temp")
        element = memory_type(u.arg.dtype)
        self.allocas.append(f"{name} = alloca [{u.arg.size} x {element}], align 64")
        self.names[u] = name
        if u in self.parked:
            self.park_slots[u] = self.fresh("park")
            self.park_names.add(self.park_slots[u])
            self.allocas.append(f"{self.park_slots[u]} = alloca [{u.arg.size} x {element}], align 64")

    # -- accumulators parked across a later loop (linear_program.parked_accumulators) ----------
    def plan_parking(self) -> None:
        """The register buffers to park (:func:`~uopviz.backends.linear_program.parked_accumulators`):
        each gets a second ``alloca``, written with ``store volatile`` after its last loop and read
        with ``load volatile`` after the next one, so that no optimisation carries its values in
        registers across that loop (SROA still keeps the buffer itself in registers inside its own)."""
        self.parked = parked_accumulators(self.program, cpu_target().vector_bytes)
        self.park_slots: dict[UOp, str] = {}
        self.park_names: set[str] = set()  # the slots' names: a LOAD through one is volatile
        self.parked_readers = {
            index: buffer for buffer, parking in self.parked.items() for index in parking.readers
        }
        self.parking_after: dict[int, list[UOp]] = {}
        for buffer, parking in self.parked.items():
            self.parking_after.setdefault(parking.after, []).append(buffer)

    def park(self, buffer: UOp) -> None:
        """Copy ``buffer``'s values to its park slot, a vector register's width at a time."""
        dtype = buffer.arg.dtype
        element = memory_scalar_type(dtype)
        lanes = max(1, cpu_target().vector_bytes // dtype.itemsize)
        whole = buffer.arg.size - buffer.arg.size % lanes
        pieces = [(offset, f"<{lanes} x {element}>") for offset in range(0, whole, lanes)]
        pieces += [(offset, element) for offset in range(whole, buffer.arg.size)]
        for offset, piece in pieces:
            source = self.temp("ptr", f"getelementptr {element}, ptr {self.names[buffer]}, i64 {offset}")
            value = self.temp("val", f"load {piece}, ptr {source}, align {dtype.itemsize}")
            target = self.temp("ptr", f"getelementptr {element}, ptr {self.park_slots[buffer]}, i64 {offset}")
            self.emit(f"store volatile {piece} {value}, ptr {target}, align {dtype.itemsize}")

    def render_special(self, u: UOp) -> None:
        raise self.fail(u, f"SPECIAL {u.arg!r} needs a GPU backend; CPU backends use RANGEs")

    def render_range(self, u: UOp, scope: Scope) -> None:
        loop = f"loop{scope.number}"
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

    def render_end(self, u: UOp, scope: Scope) -> None:
        loop, name = f"loop{scope.number}", self.names[scope.opener]
        self.emit(f"br label %{loop}.latch")
        self.label(f"{loop}.latch")
        self.emit(f"{name}.next = add i64 {name}, 1")
        if scope.opener in self.kept_rolled:
            number = len(self.loop_metadata)
            disable = '!{!"llvm.loop.unroll.disable"}'
            self.loop_metadata.append(f"!{number} = distinct !{{!{number}, {disable}}}")
            self.emit(f"br label %{loop}, !llvm.loop !{number}")
        else:
            self.emit(f"br label %{loop}")
        self.label(f"{loop}.exit")
        for buffer in self.parking_after.get(self.position, ()):
            self.park(buffer)

    def render_if(self, u: UOp, scope: Scope) -> None:
        number = scope.number
        gate = self.ref(u.src[0])
        self.emit(f"br i1 {gate}, label %if{number}.then, label %if{number}.end")
        self.label(f"if{number}.then")

    def render_endif(self, u: UOp, scope: Scope) -> None:
        self.emit(f"br label %if{scope.number}.end")
        self.label(f"if{scope.number}.end")

    def render_barrier(self, u: UOp) -> None:
        self.emit("; BARRIER: workgroups are one thread here, nothing to wait for")

    def render_vectorize(self, u: UOp) -> None:
        vtype, stype = value_type(u.dtype), scalar_type(u.dtype)
        if all(s.op is Ops.CONST for s in u.src):
            self.names[u] = "<" + ", ".join(f"{stype} {self.ref(s)}" for s in u.src) + ">"
            self.defined_in[u] = (0,)
            return
        column = matrix_column(u)
        if column is not None:
            self.render_matrix_column(u, *column)
            return
        if u.dtype.scalar.is_bool and len(set(u.src)) < len(u.src):
            self.define(u, self.mask_of_repeated_lanes(u))
            return
        current = "poison"
        for lane, s in enumerate(u.src):
            current = self.temp("vec", f"insertelement {vtype} {current}, {stype} {self.ref(s)}, i32 {lane}")
        self.define(u, current)

    def mask_of_repeated_lanes(self, u: UOp) -> str:
        """A VECTORIZE of bools that repeats lanes (a padded tile's gate: the row's condition in
        every lane, the edges' in the first and last) as the OR of each distinct value's splat ANDed
        with the lanes it fills.  Inserted lane by lane, x86 built the mask in mask registers one
        lane at a time, spilling them (Inception-v1's padded copies of 14x14 maps: 66 instructions
        for an 8-lane gate, 0.042 ms against C's 0.020)."""
        count = len(u.src)
        vtype = f"<{count} x i1>"
        result = None
        for value in dict.fromkeys(u.src):
            lanes = ", ".join(f"i1 {'true' if s is value else 'false'}" for s in u.src)
            first = self.temp("mask", f"insertelement {vtype} poison, i1 {self.ref(value)}, i32 0")
            part = self.temp("mask", f"shufflevector {vtype} {first}, {vtype} poison, "
                                     f"<{count} x i32> zeroinitializer")
            part = self.temp("mask", f"and {vtype} {part}, <{lanes}>")
            result = part if result is None else self.temp("mask", f"or {vtype} {result}, {part}")
        assert result is not None
        return result

    def render_matrix_column(self, u: UOp, rows: tuple[UOp, ...], column: int) -> None:
        """A column of a register tile (:func:`matrix_column`) as lanes of its transpose, rendered once
        per tile and scope (:func:`transpose_plan`'s shufflevectors): inserted lane by lane, an
        8 x 16 tile's columns took 110 us where storing its elements one by one took 100."""
        name, first = self.transposed_column(rows, column)
        vtype = value_type(rows[0].dtype)
        if first == 0 and len(rows) == rows[0].dtype.count:  # a padded column (7 rows): its lanes below
            self.define(u, name)
            return
        mask = ", ".join(f"i32 {first + lane}" for lane in range(len(rows)))
        self.assign(u, "column",
                    f"shufflevector {vtype} {name}, {vtype} poison, <{len(rows)} x i32> <{mask}>")

    def render_transpose(self, rows: tuple[UOp, ...]) -> dict[int, tuple[str, int]]:
        """The transpose of the vectors ``rows`` by :func:`transpose_plan`: column -> (vector, first
        lane)."""
        vtype = value_type(rows[0].dtype)
        steps, columns = transpose_plan(len(rows), rows[0].dtype.count)
        names = [self.ref(row) for row in rows]
        for first, second, picks in steps:
            mask = ", ".join(f"i32 {pick}" for pick in picks)
            names.append(self.temp(
                "transposed", f"shufflevector {vtype} {names[first]}, {vtype} {names[second]}, "
                f"<{len(picks)} x i32> <{mask}>"))
        return {column: (names[number], lane) for column, (number, lane) in columns.items()}

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
        if self.parked_readers.get(self.position) is buffer_uop and (
            index.dtype.count == 1 or contiguous_start(index) is not None
        ):  # a read of a parked accumulator (a gather reads the buffer itself: still its values)
            buffer = self.park_slots[buffer_uop]
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
        iteration of its loop, or along its row where the loop is short and the loop around it walks
        the row (``linear_program.vector_prefetch_distance``, shared with the C backend)."""
        loop, around = self.innermost_loop(), self.loop_around_innermost()
        distance = vector_prefetch_distance(base, loop, around, itemsize)
        if distance is not None:
            self.prefetch_ahead(pointer, element, distance)

    def prefetch_ahead(self, pointer: str, element: str, distance: int) -> None:
        """Prefetch (for reading, kept in every cache level) the element ``distance`` elements of
        type ``element`` after ``pointer``."""
        ahead = self.temp("ahead", f"getelementptr {element}, ptr {pointer}, i64 {distance}")
        self.declare("llvm.prefetch.p0", "void @llvm.prefetch.p0(ptr, i32, i32, i32)")
        self.emit(f"call void @llvm.prefetch.p0(ptr {ahead}, i32 0, i32 3, i32 1)")

    def prefetch_line(self, u: UOp, address: _Address) -> None:
        """Prefetch a scalar LOAD's stream a few iterations ahead, once per buffer and loop
        (``LinearWalk.line_to_prefetch``)."""
        stride = self.line_to_prefetch(u)
        if stride is not None:
            self.prefetch_ahead(address.pointer, memory_scalar_type(u.dtype), PREFETCH_ITERATIONS * stride)

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
            return bfloat16_value(self, value, value_type(dtype))
        return value

    def to_memory(self, value: str, dtype: DType) -> str:
        """A value converted to its memory type for a store."""
        if dtype.scalar.is_bool:
            return self.temp("byte", f"zext {value_type(dtype)} {value} to {memory_type(dtype)}")
        if dtype.scalar is dtypes.bfloat16:
            return bfloat16_bits(self, value, value_type(dtype))
        return value

    def render_load(self, u: UOp) -> None:
        address = self.address_of(u)
        dtype = u.dtype
        mtype, align = memory_type(dtype), dtype.scalar.itemsize
        if len(u.src) == 2:
            raise self.fail(u, "LOAD takes (index) or (index, alt, gate)")
        gated = len(u.src) == 3
        if address.lane_pointers is not None and not gated:
            even = self.every_other_lane(u, address)
            if even is not None:
                self.define(u, self.from_memory(even, dtype))
                return
            current = "poison"
            element = memory_scalar_type(dtype)
            for i, pointer in enumerate(address.lane_pointers):
                lane = self.temp("val", f"load {element}, ptr {pointer}, align {align}")
                current = self.temp("vec", f"insertelement {mtype} {current}, {element} {lane}, i32 {i}")
            self.define(u, self.from_memory(current, dtype))
            return
        if gated and address.lane_pointers is not None and self.gated_every_other_lane(u, address):
            return
        if address.lane_pointers is not None or (gated and u.src[2].dtype.count > 1):
            self.define(u, self.masked_load(u, address))
            return
        if not gated:
            if dtype.count == 1:
                self.prefetch_line(u, address)
            pointer = self.broadcast_base(u, address.pointer)
            volatile = "volatile " if address.buffer in self.park_names else ""
            raw = self.temp("val", f"load {volatile}{mtype}, ptr {pointer}, align {align}")
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

    def broadcast_base(self, u: UOp, pointer: str) -> str:
        """The pointer a vector load reads from; for a load whose lanes are each broadcast once, to
        one use, and that several times (:attr:`memory_operand_broadcasts`), that pointer through an
        empty ``asm``.

        On AVX-512 each such broadcast becomes an FMA's memory operand (``{1to16}``; AVX2 and SSE
        broadcast with a load of its own, and get no ``asm``).  Seeing the pointer's sum, x86's
        instruction selection addresses them ``(base,index)``, and an FMA with an indexed memory
        operand issues as two micro-ops instead of one (un-lamination): VGG-16's 3x3 convs at
        112x112 (16 channels x 16 columns, each weight read by one FMA) ran 1.7x the C backend's
        time, GCC addressing them from one register.  Behind the ``asm`` the backend sees one base
        register and addresses the lanes ``disp(base)``: 39.4 -> 23.4 ms on one core, GCC's 22.9.
        A lane broadcast to several FMAs goes to a register first (a plain load, never
        un-laminated), and the ``asm`` there only cost (19.3 -> 23.0 ms, 8 x 32 tiles)."""
        if u not in self.memory_operand_broadcasts:
            return pointer
        return self.temp("base", f'call ptr asm "", "=r,0"(ptr {pointer})')

    def every_other_lane(self, u: UOp, address: _Address) -> str | None:
        """A load of every other element (a stride-2 convolution's or pool's input row) as two vector
        loads over exactly the elements it spans and one shufflevector of their even lanes, lanes
        past the run of every other element (a padded row's last tile, clamped to the row's end)
        inserted one by one; None for other lane patterns (the C backend's rule,
        ``CFamilyRenderState.render_every_other_lane``)."""
        count = u.dtype.count
        found = self.every_other_run(u)
        if found is None:
            return None
        base, first, lanes = found
        mtype, element, align = memory_type(u.dtype), memory_scalar_type(u.dtype), u.dtype.scalar.itemsize
        start = self.temp("alu", f"add i64 {self.ref(base)}, {first}")
        halves = []
        for skip in every_other_lane_loads(count, lanes):
            offset = self.temp("alu", f"add i64 {start}, {skip}")
            pointer = self.temp("ptr", f"getelementptr {element}, ptr {address.buffer}, i64 {offset}")
            halves.append(self.temp("val", f"load {mtype}, ptr {pointer}, align {align}"))
        mask = ", ".join(f"i32 {p}" for p in even_lane_picks(count, lanes))
        pair = f"{mtype} {halves[0]}, {mtype} {halves[1]}"
        vector = self.temp("vec", f"shufflevector {pair}, <{count} x i32> <{mask}>")
        for lane in range(lanes, count):
            value = self.temp("val", f"load {element}, ptr {address.lane_pointers[lane]}, align {align}")
            vector = self.temp("vec", f"insertelement {mtype} {vector}, {element} {value}, i32 {lane}")
        return vector

    def every_other_run(self, u: UOp) -> tuple[UOp, int, int] | None:
        """The run of every other element a vector LOAD reads (:func:`every_other_lane`: its base,
        first offset and lane count) where its lanes are 4 or 8 bytes and its base is rendered."""
        wide = u.dtype.scalar.itemsize >= 4 and not u.dtype.scalar.is_bool
        found = every_other_lane(u) if wide else None
        return found if found is not None and found[0] in self.names else None

    def gated_every_other_lane(self, u: UOp, address: _Address) -> bool:
        """A gated LOAD of every other element (a stride-2 pool's row padded in several tiles, its
        padded lanes gated off) as :meth:`every_other_lane` reads it and a select of its lanes, where
        both vectors lie inside the buffer (an element of a lane that is off is read and never used);
        a masked gather where they cross an end of it (the C backend's rule,
        ``CFamilyRenderState.render_gated_every_other_lane``).  False where the lanes are not every
        other element of one run or the buffer's size is unknown."""
        count = u.dtype.count
        found = self.every_other_run(u)
        elements = self.buffer_elements(underlying_buffer(u.src[0].src[0]))
        if found is None or found[2] != count or elements is None:
            return False
        base, first, _ = found
        start = self.temp("alu", f"add i64 {self.ref(base)}, {first}")
        last_start = elements - 2 * count + 1  # the last start whose two vectors end inside the buffer
        after_first = self.temp("inside", f"icmp sge i64 {start}, 0")
        before_last = self.temp("inside", f"icmp sle i64 {start}, {last_start}")
        inside = self.temp("inside", f"and i1 {after_first}, {before_last}")
        number = self.scope_numbers = self.scope_numbers + 1
        self.emit(f"br i1 {inside}, label %strided{number}.whole, label %strided{number}.lanes")
        self.label(f"strided{number}.whole")
        mtype = memory_type(u.dtype)  # (4 and 8-byte lanes: their memory type is their value type)
        shuffled = self.every_other_lane(u, address)
        whole = self.temp("val", f"select <{count} x i1> {self.mask_of(u, count)}, {mtype} {shuffled}, "
                                 f"{mtype} {self.ref(u.src[1])}")
        whole_block = self.block
        self.emit(f"br label %strided{number}.end")
        self.label(f"strided{number}.lanes")
        lanes = self.masked_load(u, address)
        lanes_block = self.block
        self.emit(f"br label %strided{number}.end")
        self.label(f"strided{number}.end")
        self.assign(u, "val", f"phi {mtype} [ {whole}, %{whole_block} ], [ {lanes}, %{lanes_block} ]")
        return True

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

    def masked_load(self, u: UOp, address: _Address) -> str:
        """A vector LOAD's lanes through ``llvm.masked.load`` (a contiguous address) or
        ``llvm.masked.gather`` (lane by lane), each behind its lane of the gate: its value."""
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
        return self.from_memory(raw, dtype)

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
                # a padded tile's lanes are all in range but in its last vectors: those take the
                # plain store, the masked one (vmaskmovps: microcoded on AMD's Zen) only the rest
                number = self.scope_numbers = self.scope_numbers + 1
                reduce = self.intrinsic("vector.reduce.and", "i1", [f"<{count} x i1>"], [f"<{count} x i1>"])
                every = self.temp("all", f"call i1 {reduce}(<{count} x i1> {mask})")
                self.emit(f"br i1 {every}, label %store{number}.whole, label %store{number}.lanes")
                self.label(f"store{number}.whole")
                self.emit(f"store {mtype} {value}, ptr {address.pointer}, align {align}")
                self.emit(f"br label %store{number}.end")
                self.label(f"store{number}.lanes")
                self.emit(
                    f"call void {function}({mtype} {value}, ptr {address.pointer}, i32 {align}, "
                    f"<{count} x i1> {mask})"
                )
                self.emit(f"br label %store{number}.end")
                self.label(f"store{number}.end")
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
            result = round_bfloat16(self, result, value_type(u.dtype))
        self.define(u, result)

    def render_cast(self, u: UOp) -> None:
        self.define(u, cast_value(self, self.ref(u.src[0]), u.src[0].dtype, u.dtype))

    def render_bitcast(self, u: UOp) -> None:
        source = u.src[0]
        if source.dtype.itemsize != u.dtype.itemsize:
            raise self.fail(u, f"BITCAST from {source.dtype.name} to {u.dtype.name} changes the size")
        value = self.ref(source)
        if source.dtype.scalar is dtypes.bfloat16:
            value = bfloat16_bits(self, value, value_type(source.dtype))
            from_type = memory_type(source.dtype)
        else:
            from_type = value_type(source.dtype)
        if u.dtype.scalar is dtypes.bfloat16:
            narrow = self.temp("cast", f"bitcast {from_type} {value} to {memory_type(u.dtype)}")
            self.define(u, bfloat16_value(self, narrow, value_type(u.dtype)))
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
