"""The program being lowered: what every stage of the pipeline reads and writes.

Between stages the whole program is one UOp graph: ``FUNCTION(TUPLE(outputs...), inputs...)``,
where after Rangeify each output reads ``AFTER(buffer, CALL(kernel, buffer, arguments...))`` and
each later stage replaces the kernels in the CALLs (optimized AST, expanded AST, selected
instructions, LINEAR, ``PROGRAM(LINEAR, SOURCE)``).  :class:`Lowering` holds that graph and one
:class:`ScheduleItem` per kernel launch; every stage is a function ``stage(lowering) -> None``
(``uopviz.passes.pipeline.STAGES``).  A lone kernel (``Kernel.lower``) is a Lowering with one item
and no program graph.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from uopviz.backends.base import CompiledKernel
from uopviz.core.errors import UopvizError
from uopviz.core.ops import Ops
from uopviz.core.rewrite import PatternMatcher, Trace, graph_rewrite, rewrite_root, substitute
from uopviz.core.uop import UOp
from uopviz.passes.optops.kernel import Kernel


class PipelineError(UopvizError, RuntimeError):
    """A stage could not lower the program; names the stage and the kernel."""


# the views a program-level value sees its buffer through (``rangeify.view_of``): the first elements
# of a bigger buffer, and a value on an n-tuple device as a RESHAPE/PERMUTE of its device-major buffer
VIEW_OPS = (Ops.RESHAPE, Ops.SHRINK, Ops.PERMUTE)


def storage_of(value: UOp) -> UOp:
    """The BUFFER (or input PARAM) behind a program-level value: through AFTER and views."""
    while value.op is Ops.AFTER or value.op in VIEW_OPS:
        value = value.src[0]
    return value


@dataclass(eq=False)
class ScheduleItem:
    """One kernel launch: the kernel, its current body in the program graph, and the program-level
    values bound to its PARAM slots (slot 0 is the buffer it writes)."""

    index: int
    body: UOp
    arguments: list[UOp]
    kernel: Kernel
    source: str = ""
    compiled: CompiledKernel | None = None
    shard: tuple[int, int, bool] | None = None  # (device index, device count, reads whole buffers)

    @property
    def device(self) -> Any:
        """The device this launch runs on (one of an n-tuple device for a per-device launch)."""
        device = storage_of(self.arguments[0]).arg.device
        return device[self.shard[0]] if self.shard is not None else device


@dataclass(eq=False)
class Lowering:
    """A program on its way through the stages: its graph, its kernels and what the stages decided.

    ``opts`` is compile's choice of OptOps (Optimize reads it); ``optimized`` says the kernels come
    with their opts applied already (``Kernel.lower``), so Optimize only finishes them;
    ``build=False`` stops Render at the source text.  The engine's ``Program`` is a Lowering that
    can also run.
    """

    outputs: list[UOp]
    backend: str
    graph: UOp | None = None
    inputs: list[UOp] = field(default_factory=list)
    items: list[ScheduleItem] = field(default_factory=list)
    memory_plan: Any = None  # a memory_plan.MemoryPlan once Register/Memory Plan ran on a program
    trace: Trace | None = None
    build: bool = True
    opts: Any = None
    optimized: bool = False

    # -- what it is ---------------------------------------------------------------------------
    @property
    def kernels(self) -> list[Kernel]:
        """The kernels, in run order (with the opts the Optimize stage applied)."""
        return [item.kernel for item in self.items]

    @property
    def sources(self) -> list[str]:
        """The rendered source of every kernel."""
        return [item.source for item in self.items]

    @property
    def buffers(self) -> list[UOp]:
        """Every buffer of the program: inputs, then the buffers its kernels write."""
        written = [storage_of(item.arguments[0]) for item in self.items]
        return [*self.inputs, *dict.fromkeys(written)]

    def memory_report(self) -> str:
        """The Register/Memory Plan's report (bytes saved by sharing)."""
        return self.memory_plan.report() if self.memory_plan is not None else "no memory plan"

    def output_values(self) -> list[UOp]:
        """The program-level value of every output (a view of the buffer holding it)."""
        body = self.graph.src[0] if self.graph is not None and self.graph.op is Ops.FUNCTION else None
        if body is None:
            raise RuntimeError("the program has not been lowered")
        return list(body.src)

    def stage_input(self) -> UOp | None:
        """What a stage's trace shows as its input: the program graph; before Callify the Tensor
        graph ``TUPLE(outputs...)``; for a lone kernel its body."""
        if self.graph is not None:
            return self.graph
        if self.items:
            bodies = tuple(item.body for item in self.items)
            return bodies[0] if len(bodies) == 1 else UOp(Ops.TUPLE, bodies)
        if all(isinstance(out, UOp) for out in self.outputs):
            return UOp(Ops.TUPLE, tuple(self.outputs))
        return None  # an output that is not a UOp: Callify says which

    # -- what stages do to it -------------------------------------------------------------------
    def replace_bodies(self, bodies: Mapping[ScheduleItem, UOp]) -> None:
        """Put each new body in place of its item's kernel body, in one walk of the program graph (a
        stage replaces every kernel's body: one walk per kernel made a 250-kernel graph's stages
        quadratic).  Items sharing one body (identical kernels) get the first item's new body."""
        mapping: dict[UOp, UOp] = {}
        for item, new_body in bodies.items():
            if new_body is not item.body:
                mapping.setdefault(item.body, new_body)
        if mapping and self.graph is not None:
            self.graph = substitute(self.graph, mapping)
        for item, new_body in bodies.items():
            item.body = new_body


def once_per_body(lowering: Lowering, transform: Callable[[ScheduleItem], UOp]) -> dict[ScheduleItem, UOp]:
    """``transform(item)`` for every item; an item whose body and kernel name are an earlier item's
    gets that item's result (identical kernels are lowered once)."""
    done: dict[tuple[UOp, str], UOp] = {}
    bodies = {}
    for item in lowering.items:
        key = (item.body, item.kernel.name)
        if key not in done:
            done[key] = transform(item)
        bodies[item] = done[key]
    return bodies


def whole_kernel_rules(matcher: PatternMatcher) -> bool:
    """True when every rule of ``matcher`` is for a SINK: rules that see a whole kernel, which
    :func:`rewrite_kernel` tries at the kernel's root only."""
    return all(rule.pattern.ops == {Ops.SINK} for rule in matcher.rules)


def rewrite_kernel(kernel: UOp, matcher: PatternMatcher, ctx: Any = None, name: str | None = None) -> UOp:
    """``kernel`` rewritten with ``matcher`` until no rule applies, as a traced pass ``name``.

    Rules for a SINK see the whole kernel and fire at its root (a kernel has one SINK); a matcher of
    such rules only (Linearize's, the GPU backends' thread indices) is tried on the root alone, each
    firing a step named after its rule, which gives what :func:`graph_rewrite` gives without its
    walk over every node (a tenth of Linearize): :func:`~uopviz.core.rewrite.rewrite_root`.  Any other
    matcher runs as :func:`graph_rewrite`."""
    if not whole_kernel_rules(matcher):
        return graph_rewrite(kernel, matcher, ctx=ctx, name=name)
    return rewrite_root(kernel, matcher, ctx=ctx, name=name or matcher.name or "rewrite kernel")


__all__ = ["VIEW_OPS", "Lowering", "PipelineError", "ScheduleItem", "once_per_body",
           "rewrite_kernel", "storage_of", "whole_kernel_rules"]
