"""The renderer the C-family backends (C, OpenCL C, CUDA C) hold: :class:`CStyleRenderer`, a
:class:`~uopviz.backends.cfamily_spelling.CSpelling` (how each piece of a kernel is spelled, as its
:class:`~uopviz.backends.cfamily_dialect.CDialect` says) that renders a LINEAR program by running
the walk :class:`~uopviz.backends.cfamily_state.CFamilyRenderState` over it.  Index arithmetic is
narrowed to 32 bits where the program allows (:func:`indices_fit_int32`)."""

from __future__ import annotations

from uopviz.backends.base import RenderError, SourceMap
from uopviz.backends.cfamily_spelling import CSpelling
from uopviz.backends.cfamily_state import CFamilyRenderState
from uopviz.core.dtype import dtypes
from uopviz.core.ops import Ops
from uopviz.core.symbolic_bounds import bounds as symbolic_bounds
from uopviz.core.uop import UOp

#: the values a 32-bit ``int`` holds
INT32_BOUNDS = (-(2**31), 2**31 - 1)


def _index_bounds(u: UOp) -> tuple[int, int] | None:
    """Inclusive bounds of the index values ``u`` holds (None: not known to be integers); a
    VECTORIZE or GEP holds values of its sources, which the program has checked already."""
    if u.dtype.count > 1 and u.op in (Ops.VECTORIZE, Ops.GEP):
        return None
    low, high = symbolic_bounds(u)
    if u.op is Ops.MULACC:  # the product is a C value of its own before the addend comes
        (a, big_a), (c, big_c) = symbolic_bounds(u.src[0]), symbolic_bounds(u.src[1])
        products = (a * c, a * big_c, big_a * c, big_a * big_c)
        low, high = min(low, *products), max(high, *products)
    if isinstance(low, bool) or not isinstance(low, int) or not isinstance(high, int):
        return INT32_BOUNDS[0] - 1, INT32_BOUNDS[1] + 1  # not integers: never narrowed
    return low, high


def indices_fit_int32(linear: UOp) -> bool:
    """Whether a LINEAR program may compute its indices in 32-bit ``int``: every buffer it is
    given holds fewer than 2^31 elements and every index value it computes (loop counters,
    addresses and the partial sums that build them) lies in int32's range by its symbolic bounds.
    64-bit index arithmetic costs a 32-bit GPU two instructions for each add and several for each
    multiply (:attr:`CDialect.narrow_index_type`)."""
    low_limit, high_limit = INT32_BOUNDS
    for u in linear.src:
        if u.op is Ops.PARAM and (u.shape[0] if u.shape else 1) > high_limit:
            return False
        if u.dtype.scalar is dtypes.index:
            found = _index_bounds(u)
            if found is not None and not low_limit <= found[0] <= found[1] <= high_limit:
                return False
    return True


class CStyleRenderer(CSpelling):
    """Renders a LINEAR program to a C-family language: the walk writes one line per uop, each
    spelled by this renderer (:class:`~uopviz.backends.cfamily_spelling.CSpelling`, reading its
    dialect); a dialect's subclass overrides spelling hooks only where its output has another
    structure."""

    def render(self, linear: UOp) -> str:
        """The source of a LINEAR program (its arg is the kernel name)."""
        return self._rendered(linear)[0]

    def render_mapped(self, linear: UOp) -> tuple[str, SourceMap]:
        """The source of a LINEAR program and which uop each of its lines was written for."""
        source, state = self._rendered(linear)
        return source, state.source_map(source)

    def _rendered(self, linear: UOp) -> tuple[str, CFamilyRenderState]:
        """The source of a LINEAR program and the walk that wrote it."""
        if linear.op is not Ops.LINEAR:
            raise RenderError(f"{self.dialect.name}: render takes a LINEAR program, got {linear.op.name}")
        state = CFamilyRenderState(self, linear)
        narrow = self.dialect.narrow_index_type
        index_type = narrow if narrow is not None and indices_fit_int32(linear) else None
        previous, self._state = self._state, state
        previous_index, self._index_type = self._index_type, index_type
        try:
            return state.run(), state
        finally:
            self._state, self._index_type = previous, previous_index
