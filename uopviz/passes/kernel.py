"""Kernel objects and the OptOps that reshape their iteration space.

A :class:`Kernel` wraps one kernel AST (``docs/design/kernel-ir.md``) for a backend.  Its ``axes``
are its RANGEs in *kernel order* — grouped by AxisType (parallel outputs, workgroup, loops,
reductions, then the lanes), and within a group by range number — each as ``(size, AxisType)``.
``apply(Opt)`` returns a new Kernel; a kernel is never modified.  An opt that the spec's AxisType
table forbids raises :class:`OptError` saying which rule it breaks.

The OptOps (spec "Kernel Optimizations"):

* ``SPLIT(axis, (k, target, top))``: axis of size ``n`` becomes ``(n/k, k)`` — the inner part of
  the ``target`` type — or ``(k, n/k)`` with the outer part of the target type when ``top``.
  Allowed splits (type of the new part ← types it may come from, direction):
  LOCAL ← GLOBAL, LOOP (inner); THREAD ← GLOBAL (outer); GROUP_REDUCE ← REDUCE (either);
  UPCAST ← GLOBAL, LOCAL, LOOP (inner); UNROLL ← REDUCE, GROUP_REDUCE (inner).
* ``PADTO(axis, m)``: pad the axis to the next multiple of ``m``; loads and stores of the padded
  iterations are gated off, and reductions see their identity there.
* ``SWAP(i, j)``: exchange two axes of the same group (their loop nesting).
* ``NOLOCALS``: no LOCAL axes from now on.
* ``TC(reduce_index, (tc_select, tc_opt, mode))``: a tensor core: the M, N and K axes of a
  multiply-reduce are split into the tile and what is left; the tile becomes WARP lanes (for tiles
  spread over a warp), UNROLL fragment axes of A and B and an UPCAST fragment axis of the result,
  and the multiply-accumulate becomes ``WMMA`` (``tc_opt`` 1 allows casts of the operands; mode 3
  only splits M, N into UPCAST and K into UNROLL tiles).  Only as the first opt.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from uopviz.backends.base import TensorCore
from uopviz.core.dtype import dtypes
from uopviz.core.entry_points import entry_point
from uopviz.core.ops import AxisType, Ops
from uopviz.core.rewrite import PatternMatcher, UPat, graph_rewrite, location_of, substitute, traced_pass
from uopviz.core.uop import UOp
from uopviz.passes.indexing import conjuncts, iadd, iconst, idiv, imod, imul, simplify_indices


class OptError(ValueError):
    """An optimization that cannot apply to this kernel; the message says which rule it breaks."""


class OptOp(enum.Enum):
    """The spec's kernel optimizations."""

    SPLIT = "SPLIT"
    PADTO = "PADTO"
    SWAP = "SWAP"
    NOLOCALS = "NOLOCALS"
    TC = "TC"


@dataclass(frozen=True)
class Opt:
    """One optimization ``(op, axis, arg)`` as the spec writes it.

    Its fields are checked when it is made (:class:`OptError` otherwise): ``op`` an :class:`OptOp`,
    ``axis`` an int or None (not a bool), ``arg`` None, an int or a tuple of ints, bools and
    AxisTypes. Integers of other types (numpy's) become ints. Whether it fits a kernel is
    :meth:`Kernel.apply`'s to check.
    """

    op: OptOp
    axis: int | None = None
    arg: Any = None

    def __post_init__(self) -> None:
        if not isinstance(self.op, OptOp):
            named = isinstance(self.op, str) and self.op in OptOp.__members__
            named = f"; write OptOp.{self.op}" if named else ""
            raise OptError(f"an Opt's op is an OptOp ({', '.join(OptOp.__members__)}), got "
                           f"{type(self.op).__name__} {self.op!r}{named}")  # fmt: skip
        object.__setattr__(self, "axis", _checked_integer(self, "axis", self.axis))
        arg = self.arg
        if isinstance(arg, tuple):
            arg = tuple(_checked_arg_item(self, item) for item in arg)
        elif arg is not None:
            arg = _checked_integer(self, "arg", arg)
        object.__setattr__(self, "arg", arg)

    def __repr__(self) -> str:
        arg = self.arg
        if isinstance(arg, tuple):
            arg = "(" + ", ".join(a.name if isinstance(a, AxisType) else repr(a) for a in arg) + ")"
        return f"Opt({getattr(self.op, 'name', self.op)}, {self.axis}, {arg})"


def _checked_integer(opt: Opt, field: str, value: Any) -> int | None:
    """``value`` as an int (None stays None); a bool or a non-integer is an OptError."""
    if value is None:
        return None
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        kind = "an int, a tuple or None" if field == "arg" else "an int or None"
        raise OptError(f"Opt({opt.op.name}, ...): its {field} is {kind}, got {type(value).__name__} "
                       f"{_short(value)}")  # fmt: skip
    return int(value)


def _checked_arg_item(opt: Opt, item: Any) -> Any:
    """An item of a tuple arg: an AxisType, a bool (SPLIT's top) or an int."""
    if isinstance(item, AxisType | bool | np.bool_):
        return bool(item) if isinstance(item, np.bool_) else item
    if isinstance(item, int | np.integer):
        return int(item)
    raise OptError(f"Opt({opt.op.name}, ...): an item of its arg is an int, a bool or an AxisType, got "
                   f"{type(item).__name__} {_short(item)}")  # fmt: skip


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# the kernel order: groups of AxisTypes, then the range number
_GROUP = {AxisType.THREAD: 0, AxisType.GLOBAL: 0, AxisType.LOOP: 0, AxisType.LOCAL: 1, AxisType.WARP: 1,
          AxisType.GROUP_REDUCE: 2, AxisType.REDUCE: 2, AxisType.UPCAST: 3, AxisType.UNROLL: 4}
REDUCE_TYPES = frozenset({AxisType.REDUCE, AxisType.GROUP_REDUCE, AxisType.UNROLL})
LANE_TYPES = frozenset({AxisType.UPCAST, AxisType.UNROLL})
MAX_LANES = 256  # UPCAST x UNROLL lanes of one kernel: beyond this the vectors stop being registers
MAX_PAD_GROWTH = 4  # PADTO may at most quadruple an axis: more is wasted work, never a speed-up

# what SPLIT may create, from what, in which direction (None: either)
SPLIT_RULES: dict[AxisType, tuple[frozenset[AxisType], bool | None]] = {
    AxisType.LOCAL: (frozenset({AxisType.GLOBAL, AxisType.LOOP}), False),
    AxisType.THREAD: (frozenset({AxisType.GLOBAL}), True),
    AxisType.GROUP_REDUCE: (frozenset({AxisType.REDUCE}), None),
    AxisType.UPCAST: (frozenset({AxisType.GLOBAL, AxisType.LOCAL, AxisType.LOOP}), False),
    AxisType.UNROLL: (frozenset({AxisType.REDUCE, AxisType.GROUP_REDUCE}), False),
}


def kernel_order(ranges: Sequence[UOp]) -> list[UOp]:
    """RANGEs sorted into kernel order (group of their AxisType, then number)."""
    return sorted(ranges, key=lambda r: (_GROUP[r.arg[1]], r.arg[0]))


def ranges_of(ast: UOp) -> list[UOp]:
    """The distinct RANGEs of a kernel AST, in kernel order."""
    return kernel_order([u for u in ast.toposort() if u.op is Ops.RANGE])


def position_of(items: Sequence[UOp], item: UOp) -> int:
    """The position of ``item`` in ``items`` by identity (``list.index`` would build CMP_EQ UOps)."""
    for position, candidate in enumerate(items):
        if candidate is item:
            return position
    raise ValueError(f"{item!r} is not in the sequence")


def range_size(r: UOp) -> int:
    """The trip count of a RANGE with a constant bound."""
    return int(r.src[0].arg[0])


def substitute_ranges(ast: UOp, mapping: dict[UOp, UOp]) -> UOp:
    """``substitute`` for RANGEs: also renames the ranges a pre-expand WMMA names in its arg
    (``(config, m_range, n_range, k_range)``)."""
    if not mapping:
        return ast
    out = substitute(ast, mapping)
    fixed: dict[UOp, UOp] = {}
    for u in out.toposort():
        if u.op is Ops.WMMA and isinstance(u.arg, tuple) and any(a in mapping for a in u.arg[1:]):
            fixed[u] = UOp(Ops.WMMA, u.src, (u.arg[0], *(mapping.get(a, a) for a in u.arg[1:])))
        elif u.op is Ops.REDUCE and any(s.op is not Ops.RANGE for s in u.src[1:]):
            # a split reduce range is now an expression: the REDUCE loops over the ranges in it
            inside = (r for s in u.src[1:] for r in s.toposort() if r.op is Ops.RANGE)
            loops = kernel_order(list(dict.fromkeys(inside)))
            fixed[u] = UOp(Ops.REDUCE, (u.src[0], *loops), u.arg)
    return substitute(out, fixed) if fixed else out


def renumber(ast: UOp, ordered: Sequence[UOp]) -> UOp:
    """The AST with its ranges renumbered 0.. in the given order (keeps kernel order stable and
    source text deterministic)."""
    mapping = {}
    for number, r in enumerate(ordered):
        if r.arg[0] != number:
            mapping[r] = UOp.range(r.src[0], r.arg[1], number)
    return substitute_ranges(ast, mapping)


class Kernel:
    """One kernel: its AST, the opts applied to it, and the backend it is shaped for."""

    def __init__(self, ast: UOp, backend: str = "python", opts: Sequence[Opt] = (), name_hint: str = ""):
        if ast.op is not Ops.SINK:
            raise TypeError(f"a Kernel wraps a kernel AST (a SINK of STOREs), got {ast.op.name}")
        self.ast = ast
        self.backend = backend
        self.opts: tuple[Opt, ...] = tuple(opts)
        self.name_hint = name_hint

    def __repr__(self) -> str:
        return f"<Kernel {self.name} opts={list(self.opts)}>"

    # -- what the kernel is ---------------------------------------------------------------------
    @property
    def ranges(self) -> list[UOp]:
        """The RANGE UOps in kernel order."""
        cached = self.__dict__.get("_ranges")
        if cached is None:
            cached = ranges_of(self.ast)
            self.__dict__["_ranges"] = cached
        return cached

    @property
    def axes(self) -> tuple[tuple[int, AxisType], ...]:
        """``(size, AxisType)`` of every axis, in kernel order."""
        return tuple((range_size(r), r.arg[1]) for r in self.ranges)

    @property
    def has_reduce(self) -> bool:
        """True when the kernel accumulates (a reduction axis, or a REDUCE fully unrolled)."""
        if any(t in REDUCE_TYPES for _, t in self.axes):
            return True
        return any(u.op is Ops.REDUCE for u in self.ast.toposort())

    @property
    def name(self) -> str:
        """``r_`` (reduces) or ``E_`` (elementwise), then each axis as its letter and size."""
        cached = self.__dict__.get("_name")  # every stage names its kernel: walk the AST once
        if cached is None:
            parts = [f"{t.letter}{size}" for size, t in self.axes]
            cached = ("r_" if self.has_reduce else "E_") + ("_".join(parts) if parts else "1")
            self.__dict__["_name"] = cached
        return cached

    @property
    def nolocals(self) -> bool:
        """True once NOLOCALS was applied."""
        return any(o.op is OptOp.NOLOCALS for o in self.opts)

    @property
    def backend_object(self) -> Any:
        """The Backend this kernel is shaped for (its abilities decide which opts apply)."""
        from uopviz.backends import get

        return get(self.backend)

    @property
    def flops(self) -> int:
        """Floating-point operations of one run: float ALU ops times the iterations around them."""
        iterations: dict[UOp, frozenset[UOp]] = {}
        total = 0
        for u in self.ast.toposort():
            own = frozenset({u}) if u.op is Ops.RANGE else frozenset()
            ranges = frozenset().union(own, *(iterations[s] for s in u.src))
            iterations[u] = ranges
            if u.op.is_elementwise and u.op not in (Ops.CAST, Ops.WHERE) and u.dtype.scalar.is_float \
                    and u.op not in (Ops.CMP_LT, Ops.CMP_NE):
                total += math.prod(range_size(r) for r in ranges) * u.dtype.count
            elif u.op is Ops.REDUCE and u.dtype.scalar.is_float and u.src[0].op is not Ops.WMMA:
                total += math.prod(range_size(r) for r in ranges) * u.dtype.count
            if u.op is Ops.REDUCE:  # its result is one value per iteration of the loops around it
                iterations[u] = ranges - frozenset(u.src[1:])
            elif u.op is Ops.WMMA:  # one tile per thread of the warp, per iteration of the other loops
                config, fragment_a, fragment_b = u.arg[0], u.arg[1], u.arg[2]
                around = [r for r in ranges if r is not fragment_a and r is not fragment_b]
                total += math.prod(range_size(r) for r in around) * config.flops // config.threads
        return total

    @property
    def bytes(self) -> int:
        """Bytes of the buffers the kernel reads and writes (each once: the least traffic possible)."""
        params = {u for u in self.ast.toposort() if u.op is Ops.PARAM}
        return sum(p.shape[0] * p.arg.dtype.itemsize for p in params)

    # -- optimizing -----------------------------------------------------------------------------
    def apply(self, opt: Opt) -> Kernel:
        """A new kernel with ``opt`` applied; raises :class:`OptError` (this kernel unchanged)."""
        if not isinstance(opt, Opt):
            raise OptError(f"apply takes an Opt, got {type(opt).__name__} {opt!r}")
        handler = _HANDLERS.get(opt.op)
        if handler is None:
            raise OptError(f"{opt}: unknown OptOp {opt.op!r}")
        with traced_pass(f"apply {opt}", self.ast) as record:
            new_ast = handler(self, opt)
            new_ast = renumber(new_ast, ranges_of(new_ast))
            new_ast = simplify_indices(new_ast)
            record.step(f"{handler.__name__}: {opt}", self.ast, new_ast, location=location_of(handler))
            record.output = new_ast
        return Kernel(new_ast, self.backend, (*self.opts, opt), self.name_hint)

    def apply_all(self, opts: Sequence[Opt]) -> Kernel:
        """The kernel with ``opts`` applied left to right."""
        kernel = self
        for opt in opts:
            kernel = kernel.apply(opt)
        return kernel

    def with_parallel_outputs(self) -> Kernel:
        """The initial state on a backend with parallel hardware: output LOOP axes become GLOBAL."""
        backend = self.backend_object
        if not (backend.has_local or backend.has_threads):
            return self
        mapping = {r: UOp.range(r.src[0], AxisType.GLOBAL, r.arg[0])
                   for r in self.ranges if r.arg[1] is AxisType.LOOP}
        if not mapping:
            return self
        with traced_pass(f"parallel outputs {self.name}", self.ast) as record:
            ast = substitute_ranges(self.ast, mapping)
            where = location_of(Kernel.with_parallel_outputs)
            record.step("parallel_outputs", self.ast, ast, location=where)
            record.output = ast
        return Kernel(ast, self.backend, self.opts, self.name_hint)

    # -- lowering and running (the engine's: called through entry points, see core.entry_points) --
    def lower(self, backend: str | None = None) -> Any:
        """The kernel through Expand, Instruction Selection, Linearize, Register Plan and Render."""
        return entry_point("lower_kernel")(self, backend or self.backend)

    def source(self, backend: str | None = None) -> str:
        """The rendered source for ``backend`` (default: the kernel's own)."""
        return self.lower(backend).source

    def linear(self, backend: str | None = None) -> UOp:
        """The LINEAR program for ``backend``."""
        return self.lower(backend).linear

    def time(self, backend: str | None = None, repeats: int = 10, isolated: bool | None = None) -> Any:
        """Run time on random inputs (``uopviz.backends.timing.Timing``: median_s, min_s, runs).
        Compiled backends run in the isolated worker by default (a crashing kernel cannot take the
        caller down), and the worker makes the random arguments (this process allocates nothing); the
        Python interpreter runs here. Arguments over the memory limit are a MemoryLimitError."""
        return entry_point("time_kernel")(self, backend, repeats, isolated)

    def axes_text(self) -> str:
        """The axes as error messages list them: ``[0: GLOBAL 16, 1: REDUCE 8]``."""
        return "[" + ", ".join(f"{i}: {t.name} {size}" for i, (size, t) in enumerate(self.axes)) + "]"


# ---------------------------------------------------------------------------------------------
# the OptOps


def _axis(kernel: Kernel, opt: Opt, what: str = "axis") -> UOp:
    if not isinstance(opt.axis, int) or not 0 <= opt.axis < len(kernel.ranges):
        raise OptError(f"{opt}: {what} {opt.axis} does not exist; the kernel {kernel.name} has "
                       f"{len(kernel.ranges)} axes {kernel.axes_text()}")
    return kernel.ranges[opt.axis]


def _lanes(kernel: Kernel) -> int:
    """UPCAST x UNROLL lanes of a kernel (a tensor core's fragment axes count once: a fragment is one
    register of the WMMA, not lanes multiplied into every value)."""
    fragments = {r for u in kernel.ast.toposort() if u.op is Ops.WMMA and isinstance(u.arg, tuple)
                 for r in u.arg[1:3]}
    return math.prod(range_size(r) for r in kernel.ranges if r.arg[1] in LANE_TYPES and r not in fragments)


def split_axis(kernel: Kernel, opt: Opt) -> UOp:
    """SPLIT: ``r = outer * k + inner``; the new part gets the target AxisType."""
    r = _axis(kernel, opt)
    if not (isinstance(opt.arg, tuple) and len(opt.arg) == 3):
        raise OptError(f"{opt}: SPLIT's arg is (factor, target AxisType, top)")
    factor, target, top = opt.arg
    size, source_type = range_size(r), r.arg[1]
    if not isinstance(factor, int) or isinstance(factor, bool) or factor < 2:
        raise OptError(f"{opt}: the factor must be an integer of at least 2, got {factor!r}")
    if target not in SPLIT_RULES:
        made_by = "only TC creates WARP axes" if target is AxisType.WARP else \
            f"{getattr(target, 'name', target)} axes are not made by splitting"
        raise OptError(f"{opt}: SPLIT cannot create {getattr(target, 'name', target)} ({made_by}); "
                       f"targets are {', '.join(t.name for t in SPLIT_RULES)}")
    allowed, direction = SPLIT_RULES[target]
    if source_type not in allowed:
        sources = "/".join(sorted(t.name for t in allowed))
        raise OptError(f"{opt}: {target.name} is split from {sources} axes; axis {opt.axis} is "
                       f"{source_type.name} (spec AxisType table, 'Split from')")
    if direction is not None and bool(top) != direction:
        raise OptError(f"{opt}: {target.name} takes the {'outer' if direction else 'inner'} part of the axis "
                       f"(top={direction}); got top={bool(top)} (spec AxisType table, 'Direction')")
    if size % factor:
        raise OptError(f"{opt}: factor {factor} does not divide axis {opt.axis} of size {size}; "
                       f"PADTO it first")
    _check_backend(kernel, opt, target)
    if target in LANE_TYPES and _lanes(kernel) * factor > MAX_LANES:
        raise OptError(f"{opt}: the kernel would have {_lanes(kernel) * factor} UPCAST/UNROLL lanes; "
                       f"at most {MAX_LANES}")
    rest = size // factor
    ordered = list(kernel.ranges)
    position = position_of(ordered, r)
    new = UOp.range(factor, target, 10_000)
    kept = UOp.range(rest, source_type, 10_001) if rest > 1 else None
    outer, inner = (new, kept) if top else (kept, new)
    inner_size = range_size(inner) if inner is not None else 1
    if outer is not None and inner is not None:
        value = iadd(imul(outer, inner_size), inner)
    else:
        value = outer if outer is not None else inner
    ordered[position:position + 1] = [u for u in (outer, inner) if u is not None]
    ast = substitute_ranges(kernel.ast, {r: value})
    return _reorder(ast, ordered)


def _reorder(ast: UOp, ordered: Sequence[UOp]) -> UOp:
    """Renumber so that kernel order within each group follows ``ordered``."""
    present = {u for u in ast.toposort() if u.op is Ops.RANGE}
    return renumber(ast, [r for r in ordered if r in present])


def _check_backend(kernel: Kernel, opt: Opt, target: AxisType) -> None:
    backend = kernel.backend_object
    if target is AxisType.LOCAL and kernel.nolocals:
        raise OptError(f"{opt}: NOLOCALS was applied, so no LOCAL axes")
    if target in (AxisType.LOCAL, AxisType.GROUP_REDUCE) and not backend.has_local:
        raise OptError(f"{opt}: the {backend.name} backend has no workgroups or local memory for "
                       f"{target.name} axes")
    if target is AxisType.THREAD and not backend.has_threads:
        raise OptError(f"{opt}: the {backend.name} backend has no threads for THREAD axes")
    if target is AxisType.GROUP_REDUCE and kernel.nolocals:
        raise OptError(f"{opt}: NOLOCALS was applied, so no shared memory for GROUP_REDUCE")


def reduce_identity(op: Ops, dtype: Any) -> UOp:
    """The value a reduction by ``op`` starts from (and gives over nothing): 0 for ADD, 1 for MUL,
    the dtype's lowest value for MAX; a VECTORIZE of it for a vector dtype."""
    scalar = dtype.scalar
    value = 0 if op is Ops.ADD else 1 if op is Ops.MUL else scalar.min
    const = UOp.const(scalar, value)
    return const if dtype.count == 1 else UOp(Ops.VECTORIZE, (const,) * dtype.count)


def depends_on(u: UOp, r: UOp) -> bool:
    """True when ``r`` is in ``u``'s graph (by identity: ``in`` would build CMP_EQ UOps)."""
    return any(s is r for s in u.toposort())


@dataclass
class _PadContext:
    padded: UOp
    valid: UOp


def pad_mask_load(ctx: _PadContext, load: UOp) -> UOp | None:
    """A load whose address uses the padded range is gated off on the padded iterations."""
    address = load.src[0]
    if not depends_on(address, ctx.padded):
        return None
    if len(load.src) == 1:
        return UOp(Ops.LOAD, (address, UOp.const(load.dtype.scalar, 0), ctx.valid))
    if any(t is ctx.valid for t in conjuncts(load.src[2])):
        return None
    return UOp(Ops.LOAD, (address, load.src[1], UOp(Ops.AND, (load.src[2], ctx.valid))))


def pad_mask_store(ctx: _PadContext, store: UOp) -> UOp | None:
    """A store whose address uses the padded range is gated off on the padded iterations."""
    address, value = store.src[0], store.src[1]
    if not depends_on(address, ctx.padded):
        return None
    if len(store.src) > 2:
        if any(t is ctx.valid for t in conjuncts(store.src[2])):
            return None
        return UOp(Ops.STORE, (address, value, UOp(Ops.AND, (store.src[2], ctx.valid))))
    return UOp(Ops.STORE, (address, value, ctx.valid))


def pad_mask_reduce(ctx: _PadContext, reduce: UOp) -> UOp | None:
    """A reduction over the padded range sees its identity on the padded iterations."""
    if not any(s is ctx.padded for s in reduce.src[1:]):
        return None
    value = reduce.src[0]
    if value.op is Ops.WHERE and value.src[0] is ctx.valid:
        return None
    masked = UOp(Ops.WHERE, (ctx.valid, value, reduce_identity(reduce.arg[0], value.dtype)))
    return UOp(Ops.REDUCE, (masked, *reduce.src[1:]), reduce.arg)


pad_rules = PatternMatcher([
    (UPat(Ops.LOAD, name="load"), pad_mask_load, "pad_mask_load"),
    (UPat(Ops.STORE, name="store"), pad_mask_store, "pad_mask_store"),
    (UPat(Ops.REDUCE, name="reduce"), pad_mask_reduce, "pad_mask_reduce"),
], name="padto masks")


def pad_axis(kernel: Kernel, opt: Opt) -> UOp:
    """PADTO: the axis runs to the next multiple of ``m``; the extra iterations are masked."""
    r = _axis(kernel, opt)
    multiple = opt.arg
    if not isinstance(multiple, int) or isinstance(multiple, bool) or multiple < 2:
        raise OptError(f"{opt}: PADTO's arg is a multiple of at least 2, got {multiple!r}")
    size, axis_type = range_size(r), r.arg[1]
    if axis_type is AxisType.WARP:
        raise OptError(f"{opt}: WARP axes belong to a tensor core tile and cannot be padded")
    padded_size = -(-size // multiple) * multiple
    if padded_size == size:
        raise OptError(f"{opt}: axis {opt.axis} of size {size} is already a multiple of {multiple}")
    if padded_size > MAX_PAD_GROWTH * size:
        raise OptError(f"{opt}: padding axis {opt.axis} of size {size} to {padded_size} would run more than "
                       f"{MAX_PAD_GROWTH}x its iterations; pad to a multiple of at most "
                       f"{MAX_PAD_GROWTH * size}")  # fmt: skip
    if any(u.op is Ops.WMMA and isinstance(u.arg, tuple) and any(a is r for a in u.arg[1:])
           for u in kernel.ast.toposort()):
        raise OptError(f"{opt}: axis {opt.axis} is a tensor core's tile axis; its size is the tile's")
    if any(u.op is Ops.REDUCE and u.src[0].op is Ops.WMMA and any(s is r for s in u.src[1:])
           for u in kernel.ast.toposort()):
        # a masked WMMA is no longer the REDUCE(WMMA) Expand turns into the tile (TC with
        # tc_opt=2 pads the tensor core's axes itself)
        raise OptError(f"{opt}: axis {opt.axis} is the reduce axis of a tensor core; padding it is not "
                       f"supported (TC with tc_opt=2 pads the axes to the tile)")
    if axis_type in LANE_TYPES and _lanes(kernel) // size * padded_size > MAX_LANES:
        raise OptError(f"{opt}: padding would make more than {MAX_LANES} lanes")
    padded = UOp.range(padded_size, axis_type, r.arg[0])
    ast = substitute_ranges(kernel.ast, {r: padded})
    valid = UOp(Ops.CMP_LT, (padded, iconst(size)))
    return graph_rewrite(ast, pad_rules, ctx=_PadContext(padded, valid), name="padto masks")


def swap_axes(kernel: Kernel, opt: Opt) -> UOp:
    """SWAP: exchange the loop positions of two axes of the same group."""
    first = _axis(kernel, opt)
    other = opt.arg
    if not isinstance(other, int) or not 0 <= other < len(kernel.ranges):
        raise OptError(f"{opt}: the axis to swap with, {other!r}, does not exist; the kernel has "
                       f"{len(kernel.ranges)} axes")
    second = kernel.ranges[other]
    if first is second:
        raise OptError(f"{opt}: an axis cannot be swapped with itself")
    if _GROUP[first.arg[1]] != _GROUP[second.arg[1]]:
        raise OptError(f"{opt}: axes {opt.axis} ({first.arg[1].name}) and {other} ({second.arg[1].name}) "
                       f"are in different groups of the kernel order; SWAP exchanges loops of one group")
    ordered = list(kernel.ranges)
    i, j = position_of(ordered, first), position_of(ordered, second)
    ordered[i], ordered[j] = ordered[j], ordered[i]
    mapping = {r: UOp.range(r.src[0], r.arg[1], 20_000 + n) for n, r in enumerate(ordered)}
    return substitute_ranges(kernel.ast, mapping)


def no_locals(kernel: Kernel, opt: Opt) -> UOp:
    """NOLOCALS: from now on no LOCAL axes (and none may exist already)."""
    if opt.axis is not None or opt.arg is not None:
        raise OptError(f"{opt}: NOLOCALS takes no axis and no arg")
    if any(t in (AxisType.LOCAL, AxisType.GROUP_REDUCE) for _, t in kernel.axes):
        raise OptError(f"{opt}: the kernel already has LOCAL (or GROUP_REDUCE) axes")
    if kernel.nolocals:
        raise OptError(f"{opt}: NOLOCALS was already applied")
    return kernel.ast


# ---------------------------------------------------------------------------------------------
# tensor cores


def _strip_cast(u: UOp) -> UOp:
    return u.src[0] if u.op is Ops.CAST else u


def _product_of(reduce: UOp) -> UOp:
    """The summed product of a multiply-reduce; through the mask PADTO puts on a padded reduce
    axis (the product is 0 there anyway: the loads of the padding are gated to 0)."""
    value = reduce.src[0]
    if value.op is Ops.WHERE and value.src[2].op is Ops.CONST and value.src[2].const_value == 0:
        return value.src[1]
    return value


def _padded_to_tiles(kernel: Kernel, misfits: list[tuple[UOp, int]]) -> Kernel:
    """``kernel`` with each range of ``misfits`` padded (PADTO) to a multiple of its tile size."""
    for r, tile in misfits:
        number = r.arg[0]
        index = next(i for i, candidate in enumerate(kernel.ranges) if candidate.arg[0] == number)
        ast = pad_axis(kernel, Opt(OptOp.PADTO, index, tile))
        kernel = Kernel(renumber(ast, ranges_of(ast)), kernel.backend, kernel.opts, kernel.name_hint)
    return kernel


def apply_tensor_core(kernel: Kernel, opt: Opt) -> UOp:
    """TC on the ``reduce_index``-th reduce axis: find the multiply-reduce, its M (an output axis only
    the first operand varies over), N (only the second) and a matching tensor core; then mode 1
    emits ``REDUCE(WMMA(a, b, 0))`` over the tile's fragments and warp (``_tensor_core_wmma``), and
    mode 3 only splits M, N into UPCAST and K into UNROLL tiles of the tile's sizes."""
    if not (isinstance(opt.arg, tuple) and len(opt.arg) == 3):
        raise OptError(f"{opt}: TC's arg is (tc_select, tc_opt, mode)")
    tc_select, tc_opt, mode = opt.arg
    if mode not in (1, 3):
        raise OptError(f"{opt}: TC mode {mode!r} is not known; 1 emits WMMA, 3 only shapes the tile axes")
    if tc_opt not in (0, 1, 2):
        raise OptError(f"{opt}: tc_opt must be 0 (exact multiply), 1 (casts allowed) or 2 (also pad axes)")
    reduce_axes = [r for r in kernel.ranges if r.arg[1] in REDUCE_TYPES]
    if not isinstance(opt.axis, int) or not 0 <= opt.axis < len(reduce_axes):
        raise OptError(f"{opt}: reduce axis {opt.axis} does not exist; the kernel has {len(reduce_axes)} "
                       f"reduce axes")
    k_range = reduce_axes[opt.axis]
    reduces = [u for u in kernel.ast.toposort()
               if u.op is Ops.REDUCE and any(s is k_range for s in u.src[1:])]
    if len(reduces) != 1 or reduces[0].arg[0] is not Ops.ADD or _product_of(reduces[0]).op is not Ops.MUL:
        raise OptError(f"{opt}: TC needs exactly one sum of products over reduce axis {opt.axis}")
    reduce = reduces[0]
    a, b = _product_of(reduce).src
    if tc_opt == 0 and (a.op is Ops.CAST or b.op is Ops.CAST):
        raise OptError(f"{opt}: the products cast their operands; use tc_opt=1 to allow that")
    a_in, b_in = (_strip_cast(a), _strip_cast(b)) if tc_opt >= 1 else (a, b)
    outputs = [r for r in kernel.ranges if r.arg[1] in (AxisType.GLOBAL, AxisType.LOOP)]
    m_candidates = [r for r in outputs if depends_on(a_in, r) and not depends_on(b_in, r)]
    n_candidates = [r for r in outputs if depends_on(b_in, r) and not depends_on(a_in, r)]
    if not m_candidates or not n_candidates:
        raise OptError(f"{opt}: TC needs an output axis only the first operand varies over (M) and one "
                       f"only the second varies over (N)")
    m_range, n_range = m_candidates[-1], n_candidates[-1]
    cores = kernel.backend_object.tensor_cores
    matching = [tc for tc in cores
                if tc.dtype_in == a_in.dtype.scalar and tc.dtype_out == reduce.dtype.scalar]
    if not matching:
        raise OptError(f"{opt}: the {kernel.backend} backend has no tensor core for {a_in.dtype.name} -> "
                       f"{reduce.dtype.name} (it has {[tc.name for tc in cores]})")
    if tc_select == -1:
        config = matching[0]
    elif isinstance(tc_select, int) and 0 <= tc_select < len(cores) and cores[tc_select] in matching:
        config = cores[tc_select]
    else:
        raise OptError(f"{opt}: tc_select {tc_select!r} is not one of the matching tensor cores "
                       f"{[cores.index(tc) for tc in matching]}")
    tile_m, tile_n, tile_k = config.dims
    misfits = [(r, tile) for r, tile in ((m_range, tile_m), (n_range, tile_n), (k_range, tile_k))
               if range_size(r) % tile]
    if misfits and tc_opt == 2:  # pad them to the tile (loads and stores of the padding gated off)
        return apply_tensor_core(_padded_to_tiles(kernel, misfits), opt)
    for r, tile, what in ((m_range, tile_m, "M"), (n_range, tile_n, "N"), (k_range, tile_k, "K")):
        if range_size(r) % tile:
            raise OptError(f"{opt}: the {what} axis of size {range_size(r)} is not a multiple of the "
                           f"tile's {tile}; use tc_opt=2 to pad it (TC is the first opt, so no PADTO "
                           f"can come before it)")
    if mode == 1:
        return _tensor_core_wmma(kernel, config, reduce, (a_in, b_in), m_range, n_range, k_range)
    # mode 3: r = outer * tile + inner for M, N (inner UPCAST) and K (inner UNROLL); the outer parts
    # keep their numbers (so their loops keep their places), the tiles come last in kernel order
    mapping: dict[UOp, UOp] = {}
    inner: dict[str, UOp] = {}
    for number, (key, r, tile, target) in enumerate((("m", m_range, tile_m, AxisType.UPCAST),
                                                      ("n", n_range, tile_n, AxisType.UPCAST),
                                                      ("k", k_range, tile_k, AxisType.UNROLL))):
        inner[key] = UOp.range(tile, target, 30_000 + number)
        rest = range_size(r) // tile
        if rest == 1:
            mapping[r] = inner[key]
        else:
            outer = UOp.range(rest, r.arg[1], r.arg[0])
            mapping[r] = outer * UOp.const(outer.dtype, tile) + inner[key]
    return substitute_ranges(kernel.ast, mapping)


def _bit(x: UOp, bit: int) -> UOp:
    """Bit ``bit`` of the index ``x`` (0 or 1)."""
    return imod(idiv(x, 1 << bit), 2)


def _select(x: UOp, values: Sequence[UOp]) -> UOp:
    """``values[x]`` for an index ``x`` in ``range(len(values))``, as a chain of WHEREs."""
    out = values[-1]
    for i in range(len(values) - 2, -1, -1):
        out = UOp(Ops.WHERE, (UOp(Ops.CMP_NE, (x, iconst(i))), out, values[i]))
    return out


def layout_expression(config: TensorCore, operand: str, axis: int, lane: UOp | None, element: UOp) -> UOp:
    """The row (``axis`` 0) or column (1) of ``operand``'s tile that element ``element`` of warp lane
    ``lane`` holds, as an index expression: a sum of bits of the lane and the element where the
    layout is such a bit permutation (the PTX layouts are), else a selection among the entries."""
    threads, count = config.threads, config.elements(operand)
    table = [[config.coordinate(operand, t, e)[axis] for e in range(count)] for t in range(threads)]
    base = table[0][0]
    lane_bits = {b: table[1 << b][0] - base for b in range((threads - 1).bit_length())}
    element_bits = {b: table[0][1 << b] - base for b in range((count - 1).bit_length())}
    def predicted(t: int, e: int) -> int:
        return base + sum(w for b, w in lane_bits.items() if t >> b & 1) + \
            sum(w for b, w in element_bits.items() if e >> b & 1)

    if all(table[t][e] == predicted(t, e) for t in range(threads) for e in range(count)):
        out = iconst(base)
        for b, weight in element_bits.items():
            out = iadd(out, imul(_bit(element, b), weight))
        for b, weight in lane_bits.items():
            out = iadd(out, imul(_bit(lane, b), weight))
        return out
    per_element = [_select(lane, [iconst(table[t][e]) for t in range(threads)]) if lane is not None
                   else iconst(table[0][e]) for e in range(count)]
    return _select(element, per_element)


def _tensor_core_wmma(kernel: Kernel, config: TensorCore, reduce: UOp, operands: tuple[UOp, UOp],
                      m_range: UOp, n_range: UOp, k_range: UOp) -> UOp:
    """TC mode 1: each of M, N, K becomes ``outer * tile + coordinate``, where the coordinate comes
    from the tensor core's layout of the operand at hand: A's elements (an UNROLL range ``ea``), B's
    (UNROLL ``eb``) and the result's (UPCAST ``ec``), over the WARP lanes (a WARP range, when the tile
    is spread over several threads).  The multiply-reduce becomes ``REDUCE(WMMA(a, b, 0))``."""
    tile_m, tile_n, tile_k = config.dims
    elements = {name: UOp.range(config.elements(name), kind, 30_000 + i)
                for i, (name, kind) in enumerate((("a", AxisType.UNROLL), ("b", AxisType.UNROLL),
                                                  ("c", AxisType.UPCAST)))}
    warp = UOp.range(config.threads, AxisType.WARP, 30_003) if config.threads > 1 else None

    def outer(r: UOp, tile: int) -> UOp:
        rest = range_size(r) // tile
        return iconst(0) if rest == 1 else imul(UOp.range(rest, r.arg[1], r.arg[0]), tile)

    def at(r: UOp, tile: int, operand: str, axis: int) -> UOp:
        return iadd(outer(r, tile), layout_expression(config, operand, axis, warp, elements[operand]))

    a, b = operands  # in the tensor core's input dtype: the WMMA converts to its output dtype
    a = substitute(a, {m_range: at(m_range, tile_m, "a", 0), k_range: at(k_range, tile_k, "a", 1)})
    b = substitute(b, {k_range: at(k_range, tile_k, "b", 0), n_range: at(n_range, tile_n, "b", 1)})
    wmma = UOp(Ops.WMMA, (a, b, UOp.const(reduce.dtype, 0)), (config, elements["a"], elements["b"],
                                                                elements["c"], warp))
    k_loop = [x for x in outer(k_range, tile_k).toposort() if x.op is Ops.RANGE]
    loops = [r for r in reduce.src[1:] if r is not k_range] + k_loop
    new_reduce = UOp(Ops.REDUCE, (wmma, *loops), reduce.arg)  # (no loops: Expand still finds the tile)
    ast = substitute(kernel.ast, {reduce: new_reduce})
    return substitute(ast, {m_range: at(m_range, tile_m, "c", 0), n_range: at(n_range, tile_n, "c", 1)})


# ---------------------------------------------------------------------------------------------
# local buffers for GROUP_REDUCE


def tensor_core(kernel: Kernel, opt: Opt) -> UOp:
    """TC: the first opt only; see :func:`apply_tensor_core`."""
    if kernel.opts:
        raise OptError(f"{opt}: TC must be the first opt (the kernel already has {list(kernel.opts)})")
    return apply_tensor_core(kernel, opt)


_HANDLERS = {OptOp.SPLIT: split_axis, OptOp.PADTO: pad_axis, OptOp.SWAP: swap_axes, OptOp.NOLOCALS: no_locals,
             OptOp.TC: tensor_core}


__all__ = ["Kernel", "Opt", "OptError", "OptOp", "SPLIT_RULES", "dtypes", "kernel_order", "ranges_of"]
