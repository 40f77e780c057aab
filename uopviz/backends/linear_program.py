"""What every renderer of a LINEAR program shares, whatever language it writes (the C family in
:mod:`uopviz.backends.cfamily_state`, LLVM IR in :mod:`uopviz.backends.llvm_renderer`): the
bookkeeping of one walk over the program (fresh names, scopes, AFTER as a passthrough, the PARAM
table), which uops are live, and when a strided vector load is prefetched."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from uopviz.backends.base import (
    KernelParam,
    RenderError,
    SourceMap,
    map_lines,
)
from uopviz.core.affine import contiguous_start
from uopviz.core.ops import Ops
from uopviz.core.uop import UOp


def underlying_buffer(u: UOp) -> UOp:
    """A PARAM/BUFFER seen through AFTER passthroughs."""
    while u.op is Ops.AFTER:
        u = u.src[0]
    return u


PREFETCH_MIN_STRIDE_BYTES = 1024
PREFETCH_ITERATIONS = 8  # measured on gemm 1024: 4 → 50.8, 8 → 52.4, 16 → 51.2, 32 → 46.1 GFLOP/s

_SIDE_EFFECTS = frozenset(
    {
        Ops.STORE,
        Ops.RANGE,
        Ops.END,
        Ops.IF,
        Ops.ENDIF,
        Ops.BARRIER,
        Ops.CUSTOM,
        Ops.ATOMIC_ADD,
        Ops.PARAM,
        Ops.SPECIAL,
    }
)


def live_uops(program: Sequence[UOp], gather_by_lanes: bool = True) -> set[UOp]:
    """The uops whose values reach a side effect.  A contiguous vector INDEX needs only its base lane,
    not the index vector, so the lane arithmetic of vector addresses is not rendered; with
    ``gather_by_lanes`` a gathering INDEX of a VECTORIZE needs only the lanes, not the vector."""
    live: set[UOp] = set()
    for u in reversed(program):
        if u.op not in _SIDE_EFFECTS and u not in live:
            continue
        live.add(u)
        sources: Sequence[UOp] = u.src
        if u.op is Ops.INDEX and len(u.src) == 2 and u.src[1].dtype.count > 1:
            found = contiguous_start(u.src[1])
            if found is not None:
                sources = (u.src[0],) if found[0] is None else (u.src[0], found[0])
            elif gather_by_lanes and u.src[1].op is Ops.VECTORIZE:
                sources = (u.src[0], *u.src[1].src)
        live.update(sources)
    return live


class LinearRenderState:
    """The bookkeeping every renderer of a LINEAR program needs, whatever text it writes: fresh
    names, the scope each value was defined in (a use outside it is an error, not wrong code), AFTER
    as a passthrough, and the kernel's PARAM table.  Subclasses set up ``scopes`` (the function's
    scope first) and say how names and errors are spelled."""

    name_prefix = ""  # LLVM's SSA names start with "%"
    dialect: str  # the language, first word of every error (each subclass says)
    scopes: list  # open scopes, the function's first: each has a ``number``
    ref: Callable[[UOp], str]  # the name of an earlier uop's value (each subclass says how)
    render_uop: Callable[[UOp], None]  # write one uop's code (each subclass says how)
    #: the lists of emitted text whose entries a source map attributes to uops, in the order they
    #: appear in the source, each with the prefix the source puts before its entries
    mapped_lists: tuple[tuple[str, str], ...] = (("lines", ""),)

    def __init__(self, linear: UOp):
        self.linear = linear
        self.program: tuple[UOp, ...] = linear.src
        self.names: dict[UOp, str] = {}
        self.addresses: dict[UOp, Any] = {}
        self.defined_in: dict[UOp, tuple[int, ...]] = {}
        self.counters: dict[str, int] = {}
        self.scope_numbers = 0
        self.position = 0
        #: for each list of :attr:`mapped_lists`: the position of the uop each entry was written for
        self.owners: dict[str, list[int | None]] = {name: [] for name, _ in self.mapped_lists}

    def fresh(self, prefix: str) -> str:
        number = self.counters.get(prefix, 0)
        self.counters[prefix] = number + 1
        return f"{self.name_prefix}{prefix}{number}"

    def fail(self, u: UOp, problem: str) -> RenderError:
        return RenderError(
            f"{self.dialect}: uop {self.position} ({u.op.name}, {u.dtype.name}) of kernel "
            f"{self.linear.arg!r}: {problem}"
        )

    def scope_path(self) -> tuple[int, ...]:
        return tuple(s.number for s in self.scopes)

    def define(self, u: UOp, name: str) -> str:
        self.names[u] = name
        self.defined_in[u] = self.scope_path()
        return name

    def render_after(self, u: UOp) -> None:
        source = u.src[0]
        if source in self.names:
            self.names[u] = self.names[source]
            if source in self.defined_in:
                self.defined_in[u] = self.defined_in[source]
        if source in self.addresses:
            self.addresses[u] = self.addresses[source]

    def custom_text(self, u: UOp) -> str:
        """A CUSTOM's text: its format (``u.arg[0]``) filled with its sources' names (each renderer
        defines ``ref``)."""
        if not (isinstance(u.arg, tuple) and len(u.arg) == 2 and isinstance(u.arg[0], str)):
            raise self.fail(u, "CUSTOM's arg is (format, dtype)")
        operands = [self.ref(s) for s in u.src]
        try:
            return u.arg[0].format(*operands)
        except (IndexError, KeyError) as error:
            raise self.fail(u, f"CUSTOM format {u.arg[0]!r} needs more sources: {error}") from None

    def render_live_uops(self, params: Sequence[tuple[KernelParam, str]]) -> None:
        """Name the PARAMs (``params`` from :meth:`collect_params`), then render every live uop of the
        program in order, keeping ``position`` (the uop's place, which errors name)."""
        for param, name in params:
            self.names[self.param_uops[param.slot]] = name
        live = live_uops(self.program)
        for position, u in enumerate(self.program):
            self.position = position
            if u in live:
                self.note_owners(None)
                self.render_uop(u)
                self.note_owners(position)
        self.note_owners(None)

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


