"""The lowering pipeline: the spec's eight stages, in order, as one table.

Every stage is a function ``stage(lowering)`` on the program being lowered
(:class:`~uopviz.passes.schedule.Lowering`: its graph, one schedule item per kernel) and lives in
the module named after it.  :func:`lower` walks the table, each stage one traced pass named as the
spec's table names it, so ``Program.trace`` shows every rule that fired, stage by stage.  Every
way into the compiler walks this table: ``uv.compile`` from Callify, ``compile_kernels`` (kernel
ASTs from another front end, NNEF's) and ``Kernel.lower`` (one kernel, opts applied) from Optimize
(both in :mod:`uopviz.engine`).

==========================  ============================================  ========================
stage                       what it does                                  module
==========================  ============================================  ========================
Callify                     the graph as one FUNCTION of its inputs       ``passes.callify``
Rangeify                    kernel boundaries; kernels over RANGEs        ``passes.rangeify``
Optimize                    OptOps per kernel (given, heuristic, BEAM)    ``passes.optimize``
Expand                      UPCAST/UNROLL ranges become vector lanes      ``passes.expand``
Instruction Selection       accumulators, then the target's rules         ``passes.isel``
Linearize                   every kernel as a LINEAR program              ``passes.linearize``
Register/Memory Plan        registers in kernels, buffers between them    ``passes.memory_plan``
Render                      source text, compiled by the backend          ``passes.render``
==========================  ============================================  ========================
"""

from __future__ import annotations

from collections.abc import Callable

from uopviz.backends.base import Backend
from uopviz.core.collector import collector_paused
from uopviz.core.errors import UopvizError
from uopviz.core.rewrite import PatternMatcher, traced_pass
from uopviz.passes.callify import callify_stage
from uopviz.passes.expand import expand_stage
from uopviz.passes.isel import instruction_selection_stage
from uopviz.passes.linearize import linearize_stage
from uopviz.passes.memory_plan import memory_plan_stage
from uopviz.passes.optimize import optimize_stage
from uopviz.passes.parallel import PER_KERNEL_STAGES, lower_kernels_in_processes, process_count, work_units
from uopviz.passes.rangeify import rangeify_stage
from uopviz.passes.render import backend_named, render_stage
from uopviz.passes.schedule import Lowering, PipelineError, ScheduleItem, once_per_body, rewrite_kernel

Stage = Callable[[Lowering], None]

#: The pipeline: stage name (as the spec and the trace write it) -> the stage, in order.
PIPELINE: dict[str, Stage] = {
    "Callify": callify_stage,
    "Rangeify": rangeify_stage,
    "Optimize": optimize_stage,
    "Expand": expand_stage,
    "Instruction Selection": instruction_selection_stage,
    "Linearize": linearize_stage,
    "Register/Memory Plan": memory_plan_stage,
    "Render": render_stage,
}
STAGES = tuple(PIPELINE)  # the stage names, in order


@collector_paused()  # a program's UOps and trace live as long as it does: no collector walks over them
def lower(lowering: Lowering, first: str = "Callify", last: str = "Render") -> Lowering:
    """Run the stages from ``first`` to ``last`` (the whole pipeline by default) on ``lowering``; a
    big program lowered untraced runs Optimize ... Linearize on every core (:mod:`.parallel`)."""
    names = list(PIPELINE)
    chosen = names[names.index(first):names.index(last) + 1]
    done_in_processes: set[str] = set()
    for name in chosen:
        if name == PER_KERNEL_STAGES[0] and set(PER_KERNEL_STAGES) <= set(chosen):
            processes = process_count(lowering.backend, lowering.opts, len(work_units(lowering)))
            if processes > 1:
                lower_kernels_in_processes(lowering, _run_named_stage, processes)
                done_in_processes = set(PER_KERNEL_STAGES)
        if name not in done_in_processes:
            run_stage(lowering, name, PIPELINE[name])
    return lowering


def _run_named_stage(lowering: Lowering, name: str) -> None:
    run_stage(lowering, name, PIPELINE[name])


#: The stages a backend can add rules to (``Backend.extra_rules``): those that rewrite kernels.
KERNEL_STAGES = STAGES[STAGES.index("Optimize"):]


def backend_rules(backend: Backend, stage: str) -> PatternMatcher | None:
    """The rules ``backend`` adds to ``stage`` (None: none); a clear error for a stage name that is
    not one of :data:`KERNEL_STAGES`."""
    unknown = sorted(set(backend.extra_rules) - set(KERNEL_STAGES))
    if unknown:
        stages = ", ".join(KERNEL_STAGES)
        raise PipelineError(f"backend {backend.name!r} adds rules to {', '.join(map(repr, unknown))}; a "
                            f"backend adds rules to the stages that rewrite kernels: {stages}")
    return backend.extra_rules.get(stage)


def apply_backend_rules(lowering: Lowering, stage: str) -> None:
    """The backend's own rules for ``stage`` (:func:`backend_rules`), on every kernel before the
    stage's own rules: each kernel is a traced pass ``<backend> rules`` inside the stage (the player
    names its kernel), its steps named after the backend's rules and the lines they are written on.
    A rule that takes ``ctx`` gets the kernel's :class:`ScheduleItem` (``ctx.body``: the kernel as
    the stage got it, ``ctx.kernel.name``)."""
    if not lowering.items:
        return
    backend = backend_named(lowering.backend)
    matcher = backend_rules(backend, stage)
    if matcher is None:
        return
    lowering.replace_bodies(once_per_body(lowering, lambda item: rewrite_kernel(
        item.body, matcher, ctx=item, name=f"{backend.name} rules")))


def run_stage(lowering: Lowering, name: str, stage: Stage) -> None:
    """Run one stage as a traced pass over the whole program graph: the backend's rules for it
    (:func:`apply_backend_rules`), then the stage."""
    with traced_pass(name, lowering.stage_input()) as record:
        try:
            if name in KERNEL_STAGES:
                apply_backend_rules(lowering, name)
            stage(lowering)
        except (PipelineError, ValueError):
            raise  # errors about the program itself (CallifyError, OptError, ...) say what is wrong
        except UopvizError as error:
            # a documented error (CompileError, MemoryLimitError, ...) keeps its class, so that
            # `except CompileError` catches it; the note names the stage
            error.add_note(f"raised in the pipeline stage {name}")
            raise
        except Exception as error:
            raise PipelineError(f"{name}: {type(error).__name__}: {error}") from error
        record.output = lowering.graph if lowering.graph is not None else lowering.stage_input()


__all__ = ["KERNEL_STAGES", "PIPELINE", "STAGES", "Lowering", "PipelineError", "ScheduleItem", "Stage",
           "apply_backend_rules", "backend_rules", "lower", "run_stage"]
