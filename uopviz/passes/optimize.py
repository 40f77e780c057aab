"""Optimize: choose each kernel's OptOps — given ones, the hand-coded heuristics, or BEAM search —
then finish them (staged strips on CPUs, LOCAL buffers for GROUP_REDUCE on GPUs).

``optimize_kernel(kernel, opts)`` is what the pipeline's Optimize stage runs for every kernel.
``opts`` is None (nothing), ``"heuristic"``, ``"beam"``, or a sequence of :class:`Opt`; compile's
``opts`` may also give one such choice per kernel, a dict by kernel index or name, or tuning records.

The OptOps, the heuristic and the finishing passes are in :mod:`uopviz.passes.optops`.  BEAM search
and tuning records are the engine's (:mod:`uopviz.engine.search`, :mod:`uopviz.engine.records`):
searching times kernels, so this stage reaches it through the ``search`` entry point.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from uopviz.core.entry_points import entry_point
from uopviz.core.uop import UOp
from uopviz.passes.optops.axes import settle_pad_clamps
from uopviz.passes.optops.heuristic import hand_coded_optimizations
from uopviz.passes.optops.kernel import Kernel
from uopviz.passes.optops.local_buffers import insert_local_buffers
from uopviz.passes.optops.opts import Opt
from uopviz.passes.optops.staging import stage_strided_loads
from uopviz.passes.schedule import Lowering


def finish_optimize(kernel: Kernel) -> UOp:
    """The kernel's AST with what the Optimize stage adds after the opts: PADTO's clamps settled
    (the loads of padded vector lanes gated), strips staged into contiguous buffers (CPU),
    GROUP_REDUCE reductions through LOCAL buffers (GPU)."""
    backend = kernel.backend_object
    return insert_local_buffers(stage_strided_loads(settle_pad_clamps(kernel.ast, backend), backend))


# ---------------------------------------------------------------------------------------------
# the stage's choice for one kernel


def optimize_kernel(kernel: Kernel, opts: Any) -> Kernel:
    """``kernel`` in its backend's initial state (parallel outputs GLOBAL) with ``opts`` applied:
    None, ``"heuristic"``, ``"beam"`` (``uopviz.engine.search``, through its entry point) or a sequence
    of Opt."""
    kernel = kernel.with_parallel_outputs()
    if opts is None:
        return kernel
    if opts == "heuristic":
        return hand_coded_optimizations(kernel)
    if opts == "beam":  # search runs kernels: the engine's, reached through its entry point
        return kernel.apply_all(list(entry_point("search")(kernel).opts))
    if isinstance(opts, str):
        raise ValueError(f"opts must be None, 'heuristic', 'beam' or a sequence of Opt, got {opts!r}")
    return kernel.apply_all(list(opts))


def _is_opt_sequence(value: Any) -> bool:
    if not isinstance(value, Sequence) or isinstance(value, str):
        return False
    return all(isinstance(o, Opt) for o in value)


def opts_for(opts: Any, index: int, kernel: Kernel) -> Any:
    """The opts of kernel ``index`` from compile's ``opts`` argument: one choice for every kernel,
    a sequence with one entry per kernel, or a mapping by kernel index or name."""
    if opts is None or isinstance(opts, str) or _is_opt_sequence(opts):
        return opts
    if hasattr(opts, "opts_for_kernel"):  # tuning records: matched by kernel key, then by name
        found = opts.opts_for_kernel(kernel.with_parallel_outputs())
        return list(found) if found is not None else None
    if isinstance(opts, dict):
        for key in (index, kernel.name, kernel.name_hint):
            if key in opts:
                return opts[key]
        return None
    if isinstance(opts, Sequence):
        if index >= len(opts):
            raise ValueError(f"opts has entries for {len(opts)} kernels; the program has more "
                             f"(kernel {index})")
        return opts[index]
    raise ValueError(f"opts must be None, 'heuristic', 'beam', a sequence of Opt, one entry per kernel, "
                     f"or a dict; got {type(opts).__name__}")

def optimize_stage(lowering: Lowering) -> None:
    """Optimize: each kernel in its backend's initial state with its opts (each a recorded step),
    then the opts' finishing touches (local buffers, staged loads).  Identical kernels with the same
    opts (a network's repeated blocks) are optimized once.  Kernels that come optimized already
    (``Kernel.lower``) are only finished."""
    bodies = {}
    done: dict[tuple[UOp, str], tuple[Kernel, UOp]] = {}
    for item in lowering.items:
        if lowering.optimized:
            bodies[item] = finish_optimize(item.kernel)
            continue
        chosen = opts_for(lowering.opts, item.index, item.kernel)
        key = (item.kernel.ast, repr(chosen))
        if key not in done:
            kernel = optimize_kernel(item.kernel, chosen)
            done[key] = (kernel, finish_optimize(kernel))
        kernel, bodies[item] = done[key]
        item.kernel = kernel if kernel.name_hint == item.kernel.name_hint else \
            Kernel(kernel.ast, kernel.backend, kernel.opts, item.kernel.name_hint)
    lowering.replace_bodies(bodies)


__all__ = ["finish_optimize", "optimize_kernel", "optimize_stage", "opts_for"]
