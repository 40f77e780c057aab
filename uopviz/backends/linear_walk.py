"""The one walk over a LINEAR program that every renderer shares, whatever language it writes: the
C family (:mod:`uopviz.backends.cfamily_state`), LLVM IR (:mod:`uopviz.backends.llvm_renderer`) and
the Python interpreter (:mod:`uopviz.backends.python`).

:class:`LinearWalk` visits the uops in order and hands each to the method :data:`RENDER_METHODS`
names for its op (every elementwise op to ``render_alu``); a renderer is a subclass that defines
those methods.  The walk itself keeps what is the same in every language: fresh names, the open
scopes (a RANGE or IF opens one, its END or ENDIF must close the innermost: a program that
interleaves them is an error, not wrong code), the scope each value was defined in, AFTER as a
passthrough, the kernel's PARAM table, which uops are live, and which uop each emitted line was
written for (the source map).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from uopviz.backends.base import (
    KernelParam,
    RenderError,
    SourceMap,
    map_lines,
)
from uopviz.backends.linear_program import line_prefetch_stride, live_uops, padded_rows, underlying_buffer
from uopviz.backends.register_tile import RegisterTile
from uopviz.core.dtype import AddrSpace
from uopviz.core.ops import GroupOp, Ops
from uopviz.core.uop import UOp

#: the method of a :class:`LinearWalk` that renders each op; every other elementwise op goes to
#: ``render_alu``, and an op whose method a renderer lacks cannot appear in its programs
RENDER_METHODS: dict[Ops, str] = {
    Ops.PARAM: "render_nothing",  # named before the walk; the argument list declares it
    Ops.SINK: "render_nothing",
    Ops.GROUP: "render_nothing",
    Ops.CONST: "render_const",
    Ops.AFTER: "render_after",
    Ops.BUFFER: "render_buffer",
    Ops.SPECIAL: "render_special",
    Ops.RANGE: "walk_range",  # the walk opens the scope; render_range writes the loop's header
    Ops.END: "walk_end",  # the walk closes the scope; render_end writes the loop's end
    Ops.IF: "walk_if",
    Ops.ENDIF: "walk_endif",
    Ops.BARRIER: "render_barrier",
    Ops.STACK: "render_stack",
    Ops.VECTORIZE: "render_vectorize",
    Ops.GEP: "render_gep",
    Ops.INDEX: "render_index",
    Ops.LOAD: "render_load",
    Ops.STORE: "render_store",
    Ops.CAST: "render_cast",
    Ops.BITCAST: "render_bitcast",
    Ops.WMMA: "render_wmma",
    Ops.CUSTOM: "render_custom",
}


@dataclass
class Scope:
    """An open block of the rendered code: a RANGE loop, an IF, or the function body."""

    opener: UOp | None
    kind: str  # "function", "range", "if"
    number: int


def broadcast_only_loads(program: Sequence[UOp]) -> set[UOp]:
    """The vector LOADs of ``program`` whose every use broadcasts one of their lanes (a conv's row
    of input columns or of weights, each broadcast against a vector): renderers have the compiler
    read each lane from memory as the broadcast operand of an FMA (a load port) instead of
    shuffling it out of a register."""
    lane_uses: dict[UOp, bool] = {}
    for u in program:
        for s in u.src:
            if s.op is Ops.LOAD and s.dtype.count > 1:
                broadcast = u.op is Ops.GEP and len(set(u.arg)) == 1
                lane_uses[s] = lane_uses.get(s, True) and broadcast
    return {load for load, only in lane_uses.items() if only}


class LinearWalk:
    """One rendering of one LINEAR program (see the module docstring).  Subclasses define the
    ``render_*`` methods of :data:`RENDER_METHODS` they support, the scope hooks declared here,
    ``ref`` (the text of an earlier uop's value), and how names and errors are spelled."""

    name_prefix = ""  # LLVM's SSA names start with "%"
    dialect: str  # the language, first word of every error (each subclass says)
    ref: Callable[[UOp], str]  # the name of an earlier uop's value (each subclass says how)
    #: what the walk has each subclass write where it opens and closes a scope: a RANGE's loop header,
    #: an IF's test, the end of each (the walk keeps the scopes themselves)
    render_range: Callable[[UOp, Scope], None]
    render_if: Callable[[UOp, Scope], None]
    render_end: Callable[[UOp, Scope], None]
    render_endif: Callable[[UOp, Scope], None]
    #: the shuffles transposing a register tile (rows: its vectors) and column -> (vector, first
    #: lane) of the result, in renderers that store tiles transposed (C, LLVM)
    render_transpose: Callable[[tuple[UOp, ...]], dict[int, tuple[str, int]]]
    #: the lists of emitted text whose entries a source map attributes to uops, in the order they
    #: appear in the source, each with the prefix the source puts before its entries
    mapped_lists: tuple[tuple[str, str], ...] = (("lines", ""),)
    #: render only the uops whose values reach a side effect (the Python interpreter renders all)
    only_live_uops = True

    def __init__(self, linear: UOp):
        self.linear = linear
        self.program: tuple[UOp, ...] = linear.src
        self.names: dict[UOp, str] = {}
        self.addresses: dict[UOp, Any] = {}
        self.defined_in: dict[UOp, tuple[int, ...]] = {}
        self.counters: dict[str, int] = {}
        self.scopes: list[Scope] = [Scope(None, "function", 0)]
        self.scope_numbers = 0
        self.position = 0
        #: for each list of :attr:`mapped_lists`: the position of the uop each entry was written for
        self.owners: dict[str, list[int | None]] = {name: [] for name, _ in self.mapped_lists}
        #: register tiles transposed so far, per rows and scope: column -> (vector name, first lane)
        self.transposes: dict[tuple, dict[int, tuple[str, int]]] = {}
        self.use_counts = Counter(s for u in self.program for s in u.src)
        self.broadcast_only = broadcast_only_loads(self.program)
        #: (buffer, loop) pairs whose scalar stream is prefetched already (:meth:`line_to_prefetch`)
        self.prefetched_lines: set[tuple[UOp, UOp]] = set()
        #: loops written as one assembly block each (:meth:`use_register_tiles`), by RANGE
        self.register_tiles: dict[UOp, RegisterTile] = {}
        self.tile_members: frozenset[UOp] = frozenset()

    def use_register_tiles(self, tiles: dict[UOp, RegisterTile]) -> None:
        """Write each of ``tiles`` (:mod:`uopviz.backends.register_tile`) as one assembly block at its
        loop's end (``render_register_tile``), its member uops not one by one (``render_tile_member``:
        what a renderer still writes for one, such as a prefetch)."""
        self.register_tiles = tiles
        self.tile_members = frozenset().union(*(tile.members for tile in tiles.values()))

    # -- names and scopes ---------------------------------------------------------------------
    def fresh(self, prefix: str) -> str:
        """A new name starting with ``prefix``."""
        number = self.counters.get(prefix, 0)
        self.counters[prefix] = number + 1
        return f"{self.name_prefix}{prefix}{number}"

    def fail(self, u: UOp, problem: str) -> RenderError:
        """The error that uop ``u`` (the one being rendered) cannot be rendered, and why."""
        return RenderError(
            f"{self.dialect}: uop {self.position} ({u.op.name}, {u.dtype.name}) of kernel "
            f"{self.linear.arg!r}: {problem}"
        )

    def scope_path(self) -> tuple[int, ...]:
        """The numbers of the open scopes, outermost first."""
        return tuple(s.number for s in self.scopes)

    def transposed_column(self, rows: tuple[UOp, ...], column: int) -> tuple[str, int]:
        """The vector holding ``column`` of the tile whose rows are ``rows``, and its first lane: the
        tile is transposed once per scope (the subclass's ``render_transpose``), its columns read
        from that transpose after."""
        key = (rows, self.scope_path())
        if key not in self.transposes:
            self.transposes[key] = self.render_transpose(padded_rows(rows))
        return self.transposes[key][column]

    def innermost_loop(self) -> UOp | None:
        """The RANGE of the innermost loop open where the walk is (None outside every loop)."""
        return next((s.opener for s in reversed(self.scopes) if s.kind == "range"), None)

    def loop_around_innermost(self) -> UOp | None:
        """The RANGE of the loop around the innermost open loop (None where there is none)."""
        loops = [s.opener for s in self.scopes if s.kind == "range"]
        return loops[-2] if len(loops) >= 2 else None

    def line_to_prefetch(self, load: UOp) -> int | None:
        """The stride (elements per iteration) to prefetch a scalar LOAD by, the first time its
        buffer is read in the innermost open loop (``linear_program.line_prefetch_stride``); None
        when not to (one prefetch per buffer and loop: a row of 7 broadcast inputs is one line)."""
        loop = self.innermost_loop()
        stride = line_prefetch_stride(load, loop)
        if stride is None:
            return None
        key = (underlying_buffer(load.src[0].src[0]), loop)
        if key in self.prefetched_lines:
            return None
        self.prefetched_lines.add(key)
        return stride

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

    def define(self, u: UOp, name: str) -> str:
        """Name ``u``'s value, defined in the innermost open scope."""
        self.names[u] = name
        self.defined_in[u] = self.scope_path()
        return name

    # -- the walk -----------------------------------------------------------------------------
    def walk(self, params: Sequence[tuple[KernelParam, str]]) -> None:
        """Name the PARAMs (``params`` from :meth:`collect_params`), render the uops in order
        (keeping ``position``, the uop's place, which errors name), and check every scope closed."""
        for param, name in params:
            self.names[self.param_uops[param.slot]] = name
        live = live_uops(self.program) if self.only_live_uops else None
        for position, u in enumerate(self.program):
            self.position = position
            if live is None or u in live:
                self.note_owners(None)
                self.render_uop(u)
                self.note_owners(position)
        self.note_owners(None)
        if len(self.scopes) != 1:
            opener = self.scopes[-1].opener
            raise RenderError(
                f"{self.dialect}: kernel {self.linear.arg!r} ends with an open "
                f"{self.scopes[-1].kind} ({opener.op.name if opener is not None else '?'}); "
                f"an END or ENDIF is missing"
            )

    def render_uop(self, u: UOp) -> None:
        """Render one uop through the method :data:`RENDER_METHODS` names for its op (a register
        tile's member through ``render_tile_member``)."""
        if u in self.tile_members:
            self.render_tile_member(u)
            return
        name = RENDER_METHODS.get(u.op) or ("render_alu" if u.op in GroupOp.ELEMENTWISE else None)
        method = getattr(self, name, None) if name is not None else None
        if method is None:
            raise self.fail(u, f"{u.op.name} cannot appear in a linear program for this backend")
        method(u)

    def walk_range(self, u: UOp) -> None:
        """A RANGE: its header rendered in the enclosing scope, then the loop's scope opened."""
        scope = Scope(u, "range", self.scope_numbers + 1)
        self.render_range(u, scope)
        self.enter(scope)

    def walk_if(self, u: UOp) -> None:
        """An IF: its test rendered in the enclosing scope, then the IF's scope opened."""
        scope = Scope(u, "if", self.scope_numbers + 1)
        self.render_if(u, scope)
        self.enter(scope)

    def enter(self, scope: Scope) -> None:
        """Open ``scope`` (rendered by now) and let the renderer start it (:meth:`render_scope_start`)."""
        self.scope_numbers = scope.number
        self.scopes.append(scope)
        self.render_scope_start(scope)

    def walk_end(self, u: UOp) -> None:
        """An END: it must close the innermost open scope, its RANGE's."""
        ranges = [s for s in u.src if s.op is Ops.RANGE]
        if not ranges:
            raise self.fail(u, "END needs its RANGE as a source")
        target, innermost = ranges[-1], self.scopes[-1].opener
        if innermost is not target:
            raise self.fail(
                u,
                f"END closes range {target.arg[0]} but the innermost open block is "
                f"{'the function' if innermost is None else innermost.op.name}",
            )
        if target in self.register_tiles:
            self.render_register_tile(self.register_tiles[target])
        self.render_end(u, self.scopes.pop())

    def walk_endif(self, u: UOp) -> None:
        """An ENDIF: it must close the innermost open scope, its IF's."""
        if self.scopes[-1].opener is not u.src[0]:
            raise self.fail(u, "ENDIF does not close the innermost open IF")
        self.render_endif(u, self.scopes.pop())

    def render_scope_start(self, scope: Scope) -> None:
        """What a renderer writes first inside a scope it just opened (nothing here)."""

    def render_nothing(self, u: UOp) -> None:
        """A uop that writes no code."""

    def render_tile_member(self, u: UOp) -> None:
        """A uop of a register tile's step, which its assembly block computes (nothing here)."""

    def render_register_tile(self, tile: RegisterTile) -> None:
        """A register tile's step as one assembly block (renderers that :meth:`use_register_tiles`
        define it)."""
        raise RenderError(f"{self.dialect}: this renderer writes no register tiles")

    render_const = render_nothing  # constants are written inline where they are used

    def render_after(self, u: UOp) -> None:
        """AFTER is its source (a buffer once some side effect is done): the same name and address."""
        source = u.src[0]
        if source in self.names:
            self.names[u] = self.names[source]
            if source in self.defined_in:
                self.defined_in[u] = self.defined_in[source]
        if source in self.addresses:
            self.addresses[u] = self.addresses[source]

    def custom_text(self, u: UOp) -> str:
        """A CUSTOM's text: its format (``u.arg[0]``) filled with its sources' names."""
        if not (isinstance(u.arg, tuple) and len(u.arg) == 2 and isinstance(u.arg[0], str)):
            raise self.fail(u, "CUSTOM's arg is (format, dtype)")
        operands = [self.ref(s) for s in u.src]
        try:
            return u.arg[0].format(*operands)
        except (IndexError, KeyError) as error:
            raise self.fail(u, f"CUSTOM format {u.arg[0]!r} needs more sources: {error}") from None

    # -- the source map -----------------------------------------------------------------------
    def note_owners(self, position: int | None) -> None:
        """Attribute the entries emitted since the last call to the uop at ``position`` (None: to no
        uop), in every list a source map reads."""
        for name, owners in self.owners.items():
            emitted = len(getattr(self, name))
            owners.extend([position] * (emitted - len(owners)))

    def source_map(self, source: str) -> SourceMap:
        """The :class:`SourceMap` of ``source``, the text this walk rendered."""
        blocks = [([prefix + text for text in getattr(self, name)], self.owners[name])
                  for name, prefix in self.mapped_lists]
        return map_lines(source, self.linear, blocks)

    # -- the kernel's parameters ----------------------------------------------------------------
    def collect_params(self) -> list[tuple[KernelParam, str]]:
        """The kernel's parameters in slot order, each with its argument name; a PARAM is written
        when a STORE, CUSTOM or ATOMIC_ADD reaches it."""
        self.param_uops: dict[int, UOp] = {}
        written: set[int] = set()
        for u in self.program:
            if u.op is Ops.PARAM:
                slot = u.arg.slot
                if slot in self.param_uops and self.param_uops[slot] is not u:
                    raise self.fail(u, f"two different PARAMs share slot {slot}")
                self.param_uops[slot] = u
            if u.op is Ops.STORE and u.src[0].op is Ops.INDEX:
                target = underlying_buffer(u.src[0].src[0])
                if target.op is Ops.PARAM:
                    written.add(target.arg.slot)
            if u.op in (Ops.CUSTOM, Ops.ATOMIC_ADD):
                written.update(s.arg.slot for s in u.toposort() if s.op is Ops.PARAM)
        slots = sorted(self.param_uops)
        if slots != list(range(len(slots))):
            raise RenderError(
                f"{self.dialect}: kernel {self.linear.arg!r} has PARAM slots {slots}; "
                f"slots must be 0..n-1 (they are the argument positions)"
            )
        out = []
        for slot in slots:
            u = self.param_uops[slot]
            size = u.shape[0] if u.shape else 1
            parameter = KernelParam(slot, u.arg.dtype, size, slot in written)
            out.append((parameter, f"{self.name_prefix}data{slot}"))
        return out
