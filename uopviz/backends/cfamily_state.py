"""The walk of a LINEAR program in a C-family language (C, OpenCL C, CUDA C).

:class:`CFamilyRenderState`, a :class:`~uopviz.backends.linear_walk.LinearWalk`, writes one source
line per uop (so a line of the source maps back to a uop of the program), keeping the emitted lines
and what each INDEX addresses (an :class:`~uopviz.backends.cfamily_spelling.Address`); how each
line is spelled it asks the renderer (a :class:`~uopviz.backends.cfamily_spelling.CSpelling`, which
reads its dialect).  Here too: where REG buffers are declared and which are kept in plain
variables, the launch sizes of GPU indices, contiguous, gathered and gated vector memory access,
and a one-thread WMMA tile as scalar multiply-adds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, NamedTuple

from uopviz.backends.base import KernelMeta, RenderError, TensorCore
from uopviz.backends.cfamily_spelling import Address, CSpelling
from uopviz.backends.linear_program import (
    PREFETCH_ITERATIONS,
    matrix_column,
    padded_rows,
    transpose_plan,
    underlying_buffer,
    vector_prefetch_distance,
)
from uopviz.backends.linear_walk import LinearWalk, Scope
from uopviz.backends.register_tile import RegisterTile, find_register_tiles
from uopviz.core.affine import (
    constant_chunk_width,
    contiguous_start,
    even_lane_picks,
    every_other_lane,
    every_other_lane_loads,
)
from uopviz.core.dtype import AddrSpace, DType, dtypes
from uopviz.core.ops import AxisType, GroupOp, Ops
from uopviz.core.uop import UOp


def true_prefix(gate: UOp) -> int | None:
    """How many leading lanes of a constant vector gate are on, where exactly those are (a row
    padded to a whole register: its padded lanes are off); None for any other gate."""
    if gate.op is not Ops.VECTORIZE or not all(s.op is Ops.CONST for s in gate.src):
        return None
    lanes = [bool(s.const_value) for s in gate.src]
    on = sum(lanes)
    return on if 0 < on < len(lanes) and lanes == [True] * on + [False] * (len(lanes) - on) else None


#: the most distinct conditions a vector store's gate may have for a whole-vector store behind them
MOSTLY_ON_MAX_CONDITIONS = 2


def lanes_that_may_be_off(gate: UOp) -> list[UOp] | None:
    """The distinct conditions of a vector gate whose lanes are each on (a constant) or one of at
    most :data:`MOSTLY_ON_MAX_CONDITIONS` scalar conditions: where they all hold, every lane is on
    (an empty list: every lane is on always).  None where a lane is off for good or the conditions
    are many.  A register tile of 16 columns over a row of 111: its last lane is on in every tile
    but the last (``{1, .., 1, tile < 6}``)."""
    if gate.op is not Ops.VECTORIZE:
        return None
    if any(lane.op is Ops.CONST and not lane.const_value for lane in gate.src):
        return None
    conditions = list(dict.fromkeys(lane for lane in gate.src if lane.op is not Ops.CONST))
    return conditions if len(conditions) <= MOSTLY_ON_MAX_CONDITIONS else None


class EveryOtherLane(NamedTuple):
    """A vector LOAD of every other element as two whole loads and a shuffle
    (:meth:`CFamilyRenderState.every_other_lane_shuffle`)."""

    lines: Any  # the dialect's ``lines(fallback, tail)``: the statements, the lanes of ``tail`` set after
    name: str  # the shuffled vector
    start: str  # the first element's offset
    rest: list[int]  # the lanes past the run of every other element, read one by one


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


class CFamilyRenderState(LinearWalk):
    """One rendering of one LINEAR program in a C-family dialect (names, scopes, emitted lines)."""

    # REG buffers declared at the top of the function come before the body
    mapped_lists = (("top_lines", ""), ("lines", ""))

    def __init__(self, renderer: CSpelling, linear: UOp):
        super().__init__(linear)
        self.r = renderer
        self.addresses: dict[UOp, Address]  # (made by LinearWalk: what each INDEX addresses)
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
        self.require_in_scope(u)
        return self.names[u]

    def require_in_scope(self, u: UOp) -> None:
        """A clear error where ``u`` was defined inside a loop or IF that is already closed."""
        where = self.defined_in.get(u)
        here = self.scope_path()
        if where is not None and here[: len(where)] != where:
            raise self.fail(u, f"uses a {u.op.name} defined inside a loop or IF that is already closed")

    def assign(self, u: UOp, prefix: str, expression: str) -> str:
        name = self.fresh(prefix)
        ctype = self.r.vector_type(u.dtype) if u.dtype.count > 1 else self.r.scalar_type(u.dtype)
        self.emit(f"{ctype} {name} = {expression};")
        return self.define(u, name)

    # -- passes -------------------------------------------------------------------------------
    def run(self) -> str:
        # VECTORIZEs rendered as columns of a transposed register tile, where the dialect shuffles
        self.matrix_columns: dict[UOp, tuple[tuple[UOp, ...], int]] = {}
        if self.r.shuffles_two_vectors:
            found = ((u, matrix_column(u)) for u in self.program if u.op is Ops.VECTORIZE)
            self.matrix_columns = {u: column for u, column in found
                                   if column is not None and self.r.selects_lanes(column[0][0].dtype)}
        # a lane read only by matrix columns is named, not assigned: the transpose reads whole vectors
        column_uses: dict[UOp, bool] = {}
        for u in self.program:
            for s in u.src:
                if s.op is Ops.GEP:
                    column_uses[s] = column_uses.get(s, True) and u in self.matrix_columns
        self.column_lanes = {gep for gep, only in column_uses.items() if only}
        # the LOADs left to their broadcasts (reads_lanes_from_memory): each one's address
        self.lanes_in_memory: dict[UOp, Address] = {}
        # loads with a lane taken as a scalar (a VECTORIZE may gather such lanes back into runs)
        self.scalar_lanes_taken = {u.src[0] for u in self.program if u.op is Ops.GEP and u.dtype.count == 1}
        self.stored_buffers = {underlying_buffer(u.src[0]) for u in self.program if u.op is Ops.STORE}
        params = self.collect_params()
        self.plan_registers()
        self.plan_register_tiles()
        meta_sizes = self.launch_sizes()
        self.declare_registers(None)  # the function's own registers come first
        self.walk(params)
        meta = KernelMeta(str(self.linear.arg), tuple(p for p, _ in params), *meta_sizes)
        signature = self.r.kernel_signature(meta.name, params)
        return self.r.assemble(self, signature, self.lines, meta)

    def plan_register_tiles(self) -> None:
        """The loops written as assembly blocks, where the dialect writes them: those whose
        accumulators are vector variables of the tile's lanes (an asm operand is a variable) and
        whose loads read arrays (a pointer into each is an operand)."""
        lanes = self.r.register_tile_lanes()
        if lanes is None:
            return
        tiles = find_register_tiles(self.program, lanes)
        self.use_register_tiles({
            loop: tile for loop, tile in tiles.items()
            if all(self.register_widths.get(underlying_buffer(part.uop.src[0])) == lanes
                   for part in tile.accumulators)
            and not any(underlying_buffer(buffer) in self.register_widths for buffer, _ in tile.bases)
        })

    def render_tile_member(self, u: UOp) -> None:
        """A broadcast input's prefetch, as its LOAD would have had (:meth:`prefetch_line`)."""
        if u.op is Ops.LOAD and u.dtype.count == 1:
            self.prefetch_line(u, self.address_of(u))

    def render_register_tile(self, tile: RegisterTile) -> None:
        """The step as GCC extended ``asm`` statements (:meth:`RegisterTile.statements`): the
        accumulators in-out, each base a pointer, the block's own registers clobbered."""
        bases = [f'"r"({self.ref(buffer)} + {self.ref(base)})' for buffer, base in tile.bases]
        # "memory": the block reads buffers that stores earlier in the kernel may have written
        clobbers = [f'"xmm{n}"' for n in tile.scratch_registers()] + ['"memory"']
        for accumulators, lines in tile.statements(lambda n: f"%{n}", lambda n: f"%%ymm{n}"):
            outputs = [f'"+x"({self.addresses[a.uop].variable})' for a in accumulators]
            self.emit("__asm__(" + "".join(f'"{line}\\n\\t"' for line in lines))
            self.emit(f"  : {', '.join(outputs)}")
            self.emit(f"  : {', '.join(bases)}")
            self.emit(f"  : {', '.join(clobbers)});")

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
            self.note_owners(self.position)  # what came before is the uop being rendered's
            name = self.define(buffer, self.fresh("acc"))
            width = self.register_widths.get(buffer)
            if width is None:
                self.emit(self.r.register_declaration(buffer.arg.dtype, name, buffer.arg.size))
            else:
                dtype = buffer.arg.dtype.scalar
                ctype = self.r.vector_type(dtype.vec(width)) if width > 1 else self.r.scalar_type(dtype)
                variables = ", ".join(f"{name}_{slot}" for slot in range(buffer.arg.size // width))
                self.emit(f"{ctype} {variables};")
            # a declaration is its buffer's line (by identity: a UOp's == builds a comparison)
            self.note_owners(next(i for i, u in enumerate(self.program) if u is buffer))

    # -- per op (the methods linear_walk.RENDER_METHODS names) ----------------------------------
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

    def render_special(self, u: UOp) -> None:
        ctype = self.r.scalar_type(dtypes.index)
        uses_local = any(s.op is Ops.SPECIAL and s.arg.startswith("lidx") for s in self.program)
        self.emit(
            f"{ctype} {u.arg} = {self.r.special(u.arg, uses_local)};  {self.r.dialect.comment} 0 .. "
            f"{u.src[0].arg[0] - 1}"
        )
        self.define(u, u.arg)

    def render_range(self, u: UOp, scope: Scope) -> None:
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
        if parallel:
            self.parallel_depth = len(self.scopes) + 1  # the depth of the loop's scope, about to open

    def render_scope_start(self, scope: Scope) -> None:
        self.declare_registers(scope.opener)

    def render_end(self, u: UOp, scope: Scope) -> None:
        if self.parallel_depth == len(self.scopes) + 1:  # (the closed loop's depth)
            self.parallel_depth = 0
        self.emit("}")

    def render_if(self, u: UOp, scope: Scope) -> None:
        gate = self.ref(u.src[0])
        self.emit(f"if ({gate}) {{")

    def render_endif(self, u: UOp, scope: Scope) -> None:
        self.emit("}")

    def render_barrier(self, u: UOp) -> None:
        self.emit(self.r.barrier())

    def render_vectorize(self, u: UOp) -> None:
        if u in self.matrix_columns:
            self.render_matrix_column(u)
            return
        lanes = [(s.src[0], s.arg[0]) if s.op is Ops.GEP and len(s.arg) == 1 else (None, 0) for s in u.src]
        if self.render_lane_runs(u, lanes):
            return
        items = [self.ref(s) for s in u.src]
        if all(s.op is Ops.CONST for s in u.src):
            declared = self.r.constant_vector(self.fresh("vec"), u.dtype, items)
            if declared is not None:
                self.emit(declared[0])
                self.define(u, declared[1])
                return
        self.assign(u, "vec", self.r.vector_literal(u.dtype, items))

    def render_matrix_column(self, u: UOp) -> None:
        """A matrix column (:func:`matrix_column`) as a slice of the transposed matrix: the transpose
        is rendered once per matrix and scope (:func:`transpose_plan`: log2(n) rounds of two-vector
        shuffles), and each of its columns is then a run of lanes of one of its vectors.  Lane by
        lane, an 8 x 16 register tile's 16 columns were 128 inserts through the stack
        (MobileNet-v2's 24 -> 144 channel 1x1 conv: 182 us, against 141 us storing its 128 elements
        one by one and 100 us transposed)."""
        rows, column = self.matrix_columns[u]
        name, first = self.transposed_column(rows, column)
        width, taken = rows[0].dtype.count, len(padded_rows(rows))  # 7 rows: 8 lanes, the last unused
        if first == 0 and taken == width:
            self.define(u, name)
            return
        rendered = self.r.vector_from_runs(u.dtype.scalar.vec(taken), [(name, width, first, taken)])
        if rendered is None:
            raise self.fail(u, "a matrix column needs a dialect that copies runs of lanes")
        lines, picked = rendered
        for line in lines:
            self.emit(line)
        self.define(u, picked)

    def render_transpose(self, rows: tuple[UOp, ...]) -> dict[int, tuple[str, int]]:
        """The transpose of the vectors ``rows`` (:func:`transpose_plan`): column -> (vector, first
        lane)."""
        dtype, width = rows[0].dtype, rows[0].dtype.count
        steps, columns = transpose_plan(len(rows), width)
        names = [self.ref(row) for row in rows]
        for first, second, picks in steps:
            lines, name = self.r.two_vector_shuffle(dtype, (names[first], names[second]), picks, "transposed")
            fallback = self.r.two_vector_shuffle_fallback(dtype, (names[first], names[second]), picks)
            for line in lines(fallback):
                self.emit(line)
            names.append(name)
        return {column: (names[number], lane) for column, (number, lane) in columns.items()}

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
        described = [(name, source.dtype.count, first, count)
                     for name, (source, first, count) in zip(names, runs, strict=True)]
        rendered = self.r.vector_from_runs(u.dtype, described)
        if rendered is None:
            return False
        lines, name = rendered
        for line in lines:
            self.emit(line)
        self.define(u, name)
        return True

    def reads_lanes_from_memory(self, u: UOp, address: Address) -> bool:
        """Whether the vector LOAD ``u`` (contiguous or one element per lane) is left to its
        broadcasts, each reading its lane from memory (:meth:`render_lane_from_memory`): where the
        dialect writes them so, the load's every use broadcasts a lane to a vector (``broadcast_only``,
        no lane taken as a scalar) and nothing in the kernel writes its array (a read later than the
        load's own place sees what the load would have)."""
        return (self.r.broadcasts_lanes_from_memory and (address.contiguous or address.lanes is not None)
                and u in self.broadcast_only and u not in self.scalar_lanes_taken
                and underlying_buffer(u.src[0]) not in self.stored_buffers)

    def render_lane_from_memory(self, u: UOp, address: Address) -> None:
        """A GEP of one lane (broadcast to ``u``'s lanes) of a LOAD left to its broadcasts: the
        element read where the GEP is, for the C compiler to read as its FMA's broadcast operand."""
        lane = u.arg[0]
        if address.lanes is not None:
            offset = address.lanes[lane]
        else:
            offset = address.offset if lane == 0 else f"{address.offset} + {lane}"
        value = self.element(address, offset)
        if len(u.arg) == 1:
            self.assign(u, "val", value)
            return
        scalar = self.fresh("val")
        self.emit(f"{self.r.scalar_type(u.dtype.scalar)} {scalar} = {value};")
        self.assign(u, "gep", self.r.vector_literal(u.dtype, [scalar] * len(u.arg)))

    def render_gep(self, u: UOp) -> None:
        source = u.src[0]
        address = self.lanes_in_memory.get(source)
        if address is not None:
            self.require_in_scope(source)
            self.render_lane_from_memory(u, address)
            return
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
            if source.op is Ops.VECTORIZE or source.dtype.count == 1 or u in self.column_lanes:
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
            self.prefetch_line(u, address)
            value = self.element(address, address.offset)
            self.assign(u, "val", value if gate is None else f"({gate} ? {value} : {alt})")
            return
        gate_dtype = u.src[2].dtype if gate is not None else None
        if gate is None and self.reads_lanes_from_memory(u, address):
            if address.contiguous:
                self.prefetch(address)
            self.lanes_in_memory[u] = address
            self.defined_in[u] = self.scope_path()
            return
        if address.contiguous and (gate is None or gate_dtype.count == 1):
            self.prefetch(address)
            value = self.r.vector_load(address)
            name = self.assign(u, "val", value if gate is None else f"({gate} ? {value} : {alt})")
            # a load read by several FMAs stays in a register; one whose lanes are only broadcast
            # is read lane by lane from memory (LinearWalk.broadcast_only)
            pinned = self.use_counts[u] > 1 and u not in self.broadcast_only
            pin = self.r.register_pin(name) if pinned else None
            if pin is not None:
                self.emit(pin)
            return
        prefix = true_prefix(u.src[2]) if gate is not None and address.contiguous else None
        if prefix is not None and address.lanes is None:
            loaded = self.r.prefix_vector_load(address, alt, prefix)
            if loaded is not None:
                self.assign(u, "val", loaded)
                return
        if address.contiguous and gate is not None:
            whole = self.gated_vector_load(u, address, gate, alt)
            if whole is not None:
                self.assign(u, "val", whole)
                return
        if gate is None and self.render_every_other_lane(u, address):
            return
        if gate is not None and self.render_gated_every_other_lane(u, address, gate, alt):
            return
        self.assign(u, "val", self.lane_by_lane_load(u, address, gate, alt))

    def render_every_other_lane(self, u: UOp, address: Address) -> bool:
        """A vector LOAD of every other element (a stride-2 convolution's or pool's input row) as two
        contiguous loads over exactly the elements it spans and one shuffle of their even lanes,
        where the dialect has the shuffle (True); lanes past the run of every other element (a
        padded row's last tile, clamped to the row's end) are read one by one into the shuffled
        vector.  A read per lane kept GCC from vectorizing MobileNet-v2's stride-2 depthwise convs;
        read per lane, SqueezeNet-1.1's first max pool (55 columns as 7 tiles of 8, the last lane of
        the last clamped) took 0.183 ms on C and 0.330 on LLVM, with its clamped lanes apart 0.171
        and 0.206, its second (27 as 2 x 16) 0.224 -> 0.165 ms on LLVM (in the model, both renders
        in one process and run in turn, AVX2, 2 cores, min of 21)."""
        count = u.dtype.count
        found = self.every_other_lane_shuffle(u, address)
        if found is None:
            return False
        fallback = self.lane_by_lane_load(u, address, None, None)
        offsets = self.lane_offsets(address, count)
        tail = [(lane, self.element(address, offsets[lane])) for lane in found.rest]
        for line in found.lines(fallback, tail):
            self.emit(line)
        self.define(u, found.name)
        return True

    def render_gated_every_other_lane(self, u: UOp, address: Address, gate: str, alt: str) -> bool:
        """A gated vector LOAD of every other element (a stride-2 pool's row padded in several
        tiles, its padded lanes gated off) as :meth:`render_every_other_lane` reads it and a select
        of its lanes, where both vectors lie inside the buffer (an element of a lane that is off is
        read and never used); lane by lane behind each lane's gate where they cross an end of the
        buffer.  False where the lanes are not every other element of one run or the buffer's size
        is unknown."""
        count = u.dtype.count
        found = self.every_other_lane_shuffle(u, address)
        elements = self.buffer_elements(address.buffer_uop)
        if found is None or found.rest or elements is None:
            return False
        lines, name, start = found.lines, found.name, found.start
        value = self.fresh("val")
        last_start = elements - 2 * count + 1  # the last start whose two vectors end inside the buffer
        self.emit(f"{self.r.vector_type(u.dtype)} {value};")
        self.emit(f"if (0 <= {start} && {start} <= {last_start}) {{")
        for line in lines(self.lane_by_lane_load(u, address, None, None)):
            self.emit(line)
        self.emit(f"  {value} = {self.r.select_lanes(gate, name, alt, u.dtype)};")
        self.emit("} else {")
        self.emit(f"  {value} = {self.lane_by_lane_load(u, address, gate, alt)};")
        self.emit("}")
        self.define(u, value)
        return True

    def every_other_lane_shuffle(self, u: UOp, address: Address) -> EveryOtherLane | None:
        """The two whole loads and the shuffle of a vector LOAD of every other element
        (:func:`~uopviz.core.affine.every_other_lane`); None where the lanes are no such run or the
        dialect has no shuffle for them.  A lane past the run that reads an element of the run (a
        padded row's lanes clamped to its last element) takes it in the shuffle: inserted one by
        one, GCC moved the vector's upper half out and back for each (MobileNet-v2's stride-2
        depthwise conv to 7 columns, 8 lanes, nine taps a row)."""
        count = u.dtype.count
        found = every_other_lane(u) if self.r.selects_lanes(u.dtype) else None  # lanes held in vectors
        if found is None or found[0] not in self.names:
            return None
        base, first, lanes = found
        start = f"{self.ref(base)} + {first}"
        halves = [self.r.vector_load(replace(address, offset=offset, lanes=None))
                  for offset in (f"{start} + {skip}" if skip else start
                                 for skip in every_other_lane_loads(count, lanes))]
        picks, offsets, rest = even_lane_picks(count, lanes), self.lane_offsets(address, count), []
        for lane in range(lanes, count):
            if offsets[lane] in offsets[:lanes]:
                picks[lane] = picks[offsets.index(offsets[lane])]
            else:
                rest.append(lane)
        shuffled = self.r.two_vector_shuffle(u.dtype, halves, picks)
        if shuffled is None:
            return None
        return EveryOtherLane(*shuffled, start, rest)

    @staticmethod
    def lane_offsets(address: Address, count: int) -> list[str]:
        """The element offset of each of a vector access's ``count`` lanes."""
        if address.lanes is not None:
            return list(address.lanes)
        return [f"{address.offset} + {i}" for i in range(count)]

    def lane_by_lane_load(self, u: UOp, address: Address, gate: str | None, alt: str | None) -> str:
        """A vector LOAD as one element read per lane, each behind its lane of the gate."""
        offsets = self.lane_offsets(address, u.dtype.count)
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

    def prefetch(self, address: Address) -> None:
        """Before a contiguous vector load that jumps a kilobyte or more per iteration of its loop (a
        column strip of a row-major matrix), prefetch the vector a few iterations ahead, or along
        its row where the loop is short and the loop around it walks the row
        (``linear_program.vector_prefetch_distance``)."""
        if address.base is None or address.buffer_uop.op is not Ops.PARAM:
            return
        loop, around = self.innermost_loop(), self.loop_around_innermost()
        distance = vector_prefetch_distance(address.base, loop, around, address.dtype.scalar.itemsize)
        if distance is not None:
            self.prefetch_at(address, distance)

    def prefetch_line(self, u: UOp, address: Address) -> None:
        """Before a scalar load that steps to a new cache line each iteration of a reduction (a
        register tile's broadcast inputs), prefetch its line a few iterations ahead, once per
        buffer and loop (``LinearWalk.line_to_prefetch``)."""
        stride = self.line_to_prefetch(u) if address.offset is not None else None
        if stride is not None:
            self.prefetch_at(address, PREFETCH_ITERATIONS * stride)

    def prefetch_at(self, address: Address, distance: int) -> None:
        """Prefetch the element ``distance`` elements after what ``address`` reads (where the
        dialect has a prefetch)."""
        ahead = f"{address.buffer} + {address.offset} + {distance}"
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
        prefix = true_prefix(u.src[2]) if gate is not None and address.contiguous else None
        if prefix is not None:
            statement = self.r.prefix_vector_store(address, value, prefix)
            if statement is not None:
                self.emit(statement)
                return
        conditions = lanes_that_may_be_off(u.src[2]) if gate is not None and address.contiguous else None
        if conditions is not None:
            # every lane on but a few that share a condition (a tile's last column, past the row
            # in the last tile only): the whole vector where they are on, lane by lane elsewhere
            whole = self.r.vector_store(address, value)
            if not conditions:
                self.emit(whole)
                return
            held = " && ".join(self.ref(condition) for condition in conditions)
            if all(lane is conditions[0] for lane in u.src[2].src):
                # one condition in every lane (a tile's row past the output's end): off, all are off
                self.emit(f"if ({held}) {{ {whole} }}")
                return
            self.emit(f"if ({held}) {{ {whole} }} else {{")
            for statement in self.lane_stores(address, value, dtype, gate, gate_dtype):
                self.emit(f"  {statement}")
            self.emit("}")
            return
        for statement in self.lane_stores(address, value, dtype, gate, gate_dtype):
            self.emit(statement)

    def lane_stores(self, address: Address, value: str, dtype: DType, gate: str | None,
                    gate_dtype: DType | None) -> list[str]:
        """The statements storing each lane of the vector ``value`` on its own, behind its lane of
        ``gate``."""
        offsets = (
            address.lanes
            if address.lanes is not None
            else [f"{address.offset} + {i}" for i in range(dtype.count)]
        )
        statements = []
        for i, offset in enumerate(offsets):
            statement = self.r.store_element(address.buffer, offset, self.r.lane(value, i, dtype), dtype)
            if gate is not None:
                statement = f"if ({self.r.lane(gate, i, gate_dtype)}) {statement}"
            statements.append(statement)
        return statements

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
        if config.threads == 1:
            self.render_wmma_scalar(u, config, a, b, c)
        else:
            self.r.render_wmma(self, u, config, a, b, c)

    def render_custom(self, u: UOp) -> None:
        text = self.custom_text(u)
        if u.dtype is dtypes.void:
            self.emit(text if text.rstrip().endswith((";", "}")) else text + ";")
            return
        self.assign(u, "custom", text)

    def render_wmma_scalar(self, u: UOp, config: TensorCore, a: str, b: str, c: str) -> None:
        """Emit ``D = A @ B + C`` of a one-thread tile, one output lane per line."""
        a_dtype, b_dtype, c_dtype = (s.dtype for s in u.src)
        if (
            a_dtype.count != config.elements("a")
            or b_dtype.count != config.elements("b")
            or c_dtype.count != config.elements("c")
        ):
            raise self.fail(
                u,
                f"WMMA {config.name} takes vectors of {config.elements('a')}, "
                f"{config.elements('b')} and {config.elements('c')} lanes, got "
                f"{a_dtype.count}, {b_dtype.count} and {c_dtype.count}",
            )
        where_a = {coordinate: i for i, coordinate in enumerate(config.layout_a)}
        where_b = {coordinate: i for i, coordinate in enumerate(config.layout_b)}
        out_type = config.dtype_out
        name = self.fresh("wmma")
        self.emit(
            f"{self.r.vector_type(u.dtype)} {name};  {self.r.dialect.comment} {config.name}: "
            f"{config.dims[0]}x{config.dims[1]}x{config.dims[2]} tile as scalar multiply-adds"
        )
        for lane, (m, n) in enumerate(config.layout_c):
            terms = [self.r.lane(c, lane, c_dtype)]
            for k in range(config.dims[2]):
                left = self.r.cast_expression(
                    self.r.lane(a, where_a[(m, k)], a_dtype), config.dtype_in, out_type
                )
                right = self.r.cast_expression(
                    self.r.lane(b, where_b[(k, n)], b_dtype), config.dtype_in, out_type
                )
                terms.append(f"{left}*{right}")
            self.emit(f"{self.r.lane_target(name, lane, u.dtype)} = {' + '.join(terms)};")
        self.define(u, name)
