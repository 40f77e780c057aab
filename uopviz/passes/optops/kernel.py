"""The :class:`Kernel`: one kernel AST (``docs/design/kernel-ir.md``) shaped for a backend by opts.

Its ``axes`` are its RANGEs in kernel order (``axes.py``), each as ``(size, AxisType)``.
``apply(Opt)`` returns a new Kernel; a kernel is never modified.  Which function applies each OptOp
is one table, :data:`OPT_HANDLERS`; an opt that the spec's AxisType table forbids raises
:class:`OptError` saying which rule it breaks.  Lowering and timing a kernel are the engine's
(``uopviz.engine.kernel``), reached through the entry points of :mod:`uopviz.core.entry_points`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from uopviz.core.entry_points import entry_point
from uopviz.core.exp_log import expanded_ops
from uopviz.core.ops import AxisType, Ops
from uopviz.core.rewrite import PatternMatcher, UPat, location_of, rewrite_root, traced_pass
from uopviz.core.uop import UOp
from uopviz.passes.indexing import simplify_indices
from uopviz.passes.optops.axes import (
    REDUCE_TYPES,
    missing_ability,
    no_locals,
    pad_axis,
    range_size,
    ranges_of,
    renumber,
    split_axis,
    substitute_ranges,
    swap_axes,
)
from uopviz.passes.optops.opts import Opt, OptError, OptOp
from uopviz.passes.optops.tensor_cores import tensor_core

_NOT_FLOPS = frozenset({Ops.CAST, Ops.WHERE, Ops.CMP_LT, Ops.CMP_NE})


def _float_operations(u: UOp) -> int:
    """Float operations one lane of the float elementwise ``u`` costs: 1, none for casts, selects and
    comparisons, and for EXP and LOG those of the UOps Instruction Selection writes them as."""
    if u.op in (Ops.EXP, Ops.LOG):
        return sum(v.op.is_elementwise and v.dtype.scalar.is_float and v.op not in _NOT_FLOPS
                   for v in expanded_ops(u.op, u.dtype))
    return 0 if u.op in _NOT_FLOPS else 1


def loops_to_global(sink: UOp) -> UOp | None:
    """Every output LOOP range of the kernel becomes a GLOBAL one (split over the hardware's threads)."""
    mapping = {r: UOp.range(r.src[0], AxisType.GLOBAL, r.arg[0])
               for r in ranges_of(sink) if r.arg[1] is AxisType.LOOP}
    return substitute_ranges(sink, mapping) if mapping else None


#: the first state of a kernel on parallel hardware (:meth:`Kernel.with_parallel_outputs`): a rule
#: on the whole kernel, tried at its SINK alone
parallel_output_rules = PatternMatcher([
    (UPat(Ops.SINK, name="sink"), loops_to_global, "output loops become GLOBAL"),
], name="parallel outputs")


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
            if u.op.is_elementwise and u.dtype.scalar.is_float:
                total += math.prod(range_size(r) for r in ranges) * u.dtype.count * _float_operations(u)
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
        handler = OPT_HANDLERS.get(opt.op)
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
        if not any(r.arg[1] is AxisType.LOOP for r in self.ranges):
            return self  # nothing for the rule to do: no pass in the trace either
        ast = rewrite_root(self.ast, parallel_output_rules, name=f"parallel outputs {self.name}")
        return self.with_ast(ast)

    def with_ast(self, ast: UOp) -> Kernel:
        """This kernel's backend, opts and name hint on another AST (an opt's intermediate step)."""
        return Kernel(ast, self.backend, self.opts, self.name_hint)

    def for_backend(self, backend: Any) -> Kernel:
        """This kernel shaped as it is, for ``backend`` (a Backend): what the Optimize stage finishes
        (staged strips, local buffers) is then decided for that backend, not the one the opts were
        chosen for.  A shape that needs what ``backend`` lacks is an :class:`OptError`, raised before
        any code is made or run (the C heuristic's THREAD axis timed on OpenCL: with C's staged
        strip, a 64 KiB array per work-item, it crashed pocl)."""
        if backend.name == self.backend:
            return self
        where = f"kernel {self.name} (shaped for {self.backend} by {list(self.opts)})"
        for position, (_, axis_type) in enumerate(self.axes):
            missing = missing_ability(backend, axis_type)
            if missing is not None:
                raise OptError(f"{where}: axis {position} is {axis_type.name}, and the {backend.name} "
                               f"backend has no {missing}; lower the program for {backend.name} "
                               f"(uv.compile(..., backend={backend.name!r})) to shape it there")
        for wmma in (u for u in self.ast.toposort() if u.op is Ops.WMMA):
            if wmma.arg[0] not in backend.tensor_cores:
                raise OptError(f"{where}: its tensor core {wmma.arg[0]} is not one of the "
                               f"{backend.name} backend's")
        return Kernel(self.ast, backend.name, self.opts, self.name_hint)

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

    def time(self, backend: str | None = None, repeats: int = 10, isolated: bool | None = None,
             budget_s: float | None = None) -> Any:
        """Run time on random inputs (``uopviz.backends.timing.Timing``: median_s, min_s, runs).
        Compiled backends run in the isolated worker by default (a crashing kernel cannot take the
        caller down), and the worker makes the random arguments (this process allocates nothing); the
        Python interpreter runs here.  With ``budget_s`` every backend runs in the worker, stops
        repeating once half the budget is spent and is stopped at the budget (``KernelTimeout``);
        Kernel › Interrupt stops a timing in the worker too.  Arguments over the memory limit are a
        MemoryLimitError."""
        return entry_point("time_kernel")(self, backend, repeats, isolated, budget_s)

    def axes_text(self) -> str:
        """The axes as error messages list them: ``[0: GLOBAL 16, 1: REDUCE 8]``."""
        return "[" + ", ".join(f"{i}: {t.name} {size}" for i, (size, t) in enumerate(self.axes)) + "]"


#: the function that applies each OptOp: ``(kernel, opt) -> the new AST`` (renumbered and simplified
#: by :meth:`Kernel.apply`), raising :class:`OptError` when the opt does not fit
OPT_HANDLERS: dict[OptOp, Callable[[Kernel, Opt], UOp]] = {
    OptOp.SPLIT: split_axis,
    OptOp.PADTO: pad_axis,
    OptOp.SWAP: swap_axes,
    OptOp.NOLOCALS: no_locals,
    OptOp.TC: tensor_core,
}


__all__ = ["OPT_HANDLERS", "Kernel", "loops_to_global", "parallel_output_rules"]
