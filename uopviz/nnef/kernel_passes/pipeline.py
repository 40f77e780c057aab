"""The kernel passes of an NNEF graph, in order, as one table.

Each operation of a graph lowers to kernels of its own (:mod:`uopviz.nnef.lowering`); before a run
of them compiles as one Program, these passes rewrite the list (each keeps the kernels' results and
says what it did in :attr:`~uopviz.nnef.lowering.kernel_builder.LoweredKernel.note`):

===============  ==========================================================  ========================
pass             what it does                                                module
===============  ==========================================================  ========================
Fusion           a tensor that only feeds later kernels is computed where    ``kernel_passes.fusion``
                 it is read (batch norm, bias, ReLU folded into the conv)
Padding          a sum whose loads are gated by bounds tests reads a         ``kernel_passes.padding``
                 zero-padded buffer instead
Concat In Place  a tensor copied whole to the front of another (a            ``kernel_passes.concat_in_place``
                 concatenation's first piece) is written there: no copy
Weight Layout    filters read with output channels in vector lanes come      ``kernel_passes.weight_layout``
                 from a copy blocked by the CPU target's lanes
Loop Merge       nested output loops that every address walks as one run     ``kernel_passes.loop_merge``
                 become one loop
Offset Views     a kernel writing its buffer from a constant offset on       ``kernel_passes.offset_views``
                 writes a view from there (kernels differing only in where
                 they write are one body)
===============  ==========================================================  ========================

:func:`run_kernel_passes` walks the table, each pass one traced pass
(:func:`~uopviz.core.rewrite.traced_pass`) whose steps are the kernels it made or changed, so the
trace of ``g.compile()`` shows every pass between Rangeify and Optimize, as the pipeline's stages
show in a Tensor program's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from uopviz.core.ops import Ops
from uopviz.core.origins import carry_origins
from uopviz.core.rewrite import location_of, traced_pass
from uopviz.core.uop import UOp
from uopviz.nnef.kernel_passes.concat_in_place import concatenate_in_place
from uopviz.nnef.kernel_passes.fusion import fuse_kernels
from uopviz.nnef.kernel_passes.loop_merge import merge_contiguous_loops
from uopviz.nnef.kernel_passes.offset_views import write_through_views
from uopviz.nnef.kernel_passes.padding import pad_guarded_reads
from uopviz.nnef.kernel_passes.weight_layout import block_weight_reads
from uopviz.nnef.lowering.kernel_builder import LoweredKernel

if TYPE_CHECKING:
    from uopviz.nnef.model.graph import ComposedGraph


@dataclass(frozen=True)
class KernelPassContext:
    """What the kernel passes of one run of kernels know besides the kernels: the graph, the
    tensors that must stay stored after the run (graph outputs, inputs of later programs) and the
    backend the kernels compile for."""

    graph: ComposedGraph
    kept: frozenset[str]
    backend: Any


KernelPass = Callable[[list[LoweredKernel], KernelPassContext], list[LoweredKernel]]


def fusion(kernels: list[LoweredKernel], context: KernelPassContext) -> list[LoweredKernel]:
    """Fold each tensor that only feeds later kernels into its readers (:func:`fuse_kernels`)."""
    return fuse_kernels(kernels, context.kept)


def padding(kernels: list[LoweredKernel], context: KernelPassContext) -> list[LoweredKernel]:
    """Turn guarded reads in sums into reads of padded buffers (:func:`pad_guarded_reads`)."""
    return pad_guarded_reads(kernels, context.graph, context.kept)


def concat_in_place(kernels: list[LoweredKernel], context: KernelPassContext) -> list[LoweredKernel]:
    """Write each tensor copied whole to another's front there (:func:`concatenate_in_place`)."""
    return concatenate_in_place(kernels, context.kept)


def weight_layout(kernels: list[LoweredKernel], context: KernelPassContext) -> list[LoweredKernel]:
    """Read filters from copies blocked by the target's vector lanes (:func:`block_weight_reads`)."""
    return block_weight_reads(kernels, context.graph, context.backend)


def loop_merge(kernels: list[LoweredKernel], context: KernelPassContext) -> list[LoweredKernel]:
    """Merge the nested output loops each kernel walks as one run (:func:`merge_contiguous_loops`)."""
    return [merge_contiguous_loops(kernel) for kernel in kernels]


def offset_views(kernels: list[LoweredKernel], context: KernelPassContext) -> list[LoweredKernel]:
    """Write through a view where a kernel writes from a constant offset (:func:`write_through_views`)."""
    return write_through_views(kernels)


#: The kernel passes: name (as the trace writes it) -> the pass, in order.
KERNEL_PASSES: dict[str, KernelPass] = {
    "Fusion": fusion,
    "Padding": padding,
    "Concat In Place": concat_in_place,
    "Weight Layout": weight_layout,
    "Loop Merge": loop_merge,
    "Offset Views": offset_views,
}


def run_kernel_passes(kernels: list[LoweredKernel], context: KernelPassContext) -> list[LoweredKernel]:
    """``kernels`` rewritten by every pass of :data:`KERNEL_PASSES`, in order, each a traced pass.

    A kernel that fusion built and a later pass rebuilt keeps the origins (the NNEF operation each
    node came from) of the nodes it rebuilt."""
    fused: dict[str, UOp] = {}
    for name, kernel_pass in KERNEL_PASSES.items():
        kernels = run_kernel_pass(name, kernel_pass, kernels, context)
        if kernel_pass is fusion:
            fused = {kernel.name: kernel.ast for kernel in kernels}
    for kernel in kernels:
        if kernel.name in fused:
            carry_origins(fused[kernel.name], kernel.ast)
    return kernels


def run_kernel_pass(
    name: str, kernel_pass: KernelPass, kernels: list[LoweredKernel], context: KernelPassContext
) -> list[LoweredKernel]:
    """Run one kernel pass as a traced pass over the run's kernels (a SINK of their ASTs): one step
    per kernel it made or changed, named after the kernel and what the pass did to it and written at
    the pass's ``def`` line (the function :data:`KERNEL_PASSES` names), each showing the run's
    kernels as they are once that kernel changed (:class:`_KernelSteps`).  A pass decides over the
    whole run (fusion folds a producer into every reader), so its steps are what it decided, kernel
    by kernel, not the firings of pattern rules."""
    with traced_pass(name, kernel_sink(kernels)) as record:
        rewritten = kernel_pass(kernels, context)
        steps = _KernelSteps(kernels, rewritten)
        for count, (kernel, old) in enumerate(steps.changed, start=1):
            record.step(
                f"{name}: kernel {kernel.name} ({_what_changed(old, kernel)})",
                old.ast if old is not None else UOp(Ops.SINK, ()),
                kernel.ast,
                lambda count=count: steps.graph_after(count),
                location=location_of(kernel_pass),
            )
        record.output = kernel_sink(rewritten)
    return rewritten


class _KernelSteps:
    """The kernels a pass changed, in run order, with the run as it is once the first ``count`` of
    them changed: those kernels new, the others as they were, and a kernel the pass removed there
    until a changed kernel folds its operation in (at the last step otherwise)."""

    def __init__(self, kernels: list[LoweredKernel], rewritten: list[LoweredKernel]) -> None:
        self.kernels = kernels
        self.rewritten = rewritten
        self.before = {kernel.name: kernel for kernel in kernels}
        self.changed = [
            (kernel, self.before.get(kernel.name))
            for kernel in rewritten
            if kernel.name not in self.before
            or self.before[kernel.name].ast is not kernel.ast
            or self.before[kernel.name].buffers != kernel.buffers  # the same AST on other buffers
        ]

    def graph_after(self, count: int) -> UOp:
        """The run's kernels (a SINK of their ASTs) once the first ``count`` changed kernels are in."""
        if count >= len(self.changed):
            return kernel_sink(self.rewritten)
        done = {id(kernel) for kernel, _ in self.changed[:count]}
        folded = {id(op) for kernel, _ in self.changed[:count] for op in kernel.fused}
        kept = {kernel.name for kernel in self.rewritten}
        removed = [kernel for kernel in self.kernels if kernel.name not in kept]
        asts = [kernel.ast for kernel in removed if id(kernel.operation) not in folded]
        for kernel in self.rewritten:
            old = self.before.get(kernel.name)
            if id(kernel) in done or (old is not None and old.ast is kernel.ast):
                asts.append(kernel.ast)
            elif old is not None:
                asts.append(old.ast)
        return UOp(Ops.SINK, tuple(asts))


def _what_changed(old: LoweredKernel | None, new: LoweredKernel) -> str:
    """What a pass did to a kernel, in words: the note it added, the operations it folded in."""
    if old is None:
        return new.note or "new"
    if new.note != old.note:
        return new.note[len(old.note):].lstrip("; ") if new.note.startswith(old.note) else new.note
    folded = [op for op in new.fused if op not in old.fused]
    if folded:
        return "folds " + ", ".join(f"{op.type} '{op.label}'" for op in folded) + " in"
    return "rewritten"


def kernel_sink(kernels: list[LoweredKernel]) -> UOp:
    """The ASTs of a run of kernels as one graph (a SINK of them, in run order)."""
    return UOp(Ops.SINK, tuple(kernel.ast for kernel in kernels))
