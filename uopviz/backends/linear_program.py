"""Facts about a LINEAR program that every renderer reads, whatever language it writes: which uops
are live, the buffer an INDEX addresses through AFTERs, and when a strided vector load is
prefetched.  The walk that renders a program is :mod:`uopviz.backends.linear_walk`."""

from __future__ import annotations

from collections.abc import Sequence

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


#: the instructions that open and close a scope of a LINEAR program (kernel-ir.md)
SCOPE_OPENERS, SCOPE_CLOSERS = frozenset({Ops.RANGE, Ops.IF}), frozenset({Ops.END, Ops.ENDIF})


def open_scopes(instructions: Sequence[UOp]) -> list[tuple[int, ...]]:
    """Each instruction's scope: the positions of the RANGEs and IFs open around it, outermost
    first (an END or ENDIF is outside the scope it closes, a RANGE or IF outside its own)."""
    open_now: list[int] = []
    scopes = []
    for index, u in enumerate(instructions):
        if u.op in SCOPE_CLOSERS:
            open_now.pop()
        scopes.append(tuple(open_now))
        if u.op in SCOPE_OPENERS:
            open_now.append(index)
    return scopes
