"""The rules the GPU backends (CUDA, OpenCL) add to the pipeline's stages (``Backend.extra_rules``).

**Linearize**: "ranges become SPECIAL thread indices".  A kernel runs as a grid of workgroups of
threads; its GLOBAL ranges become the workgroup index ``gidxN`` and its LOCAL (and WARP) ranges
the thread index ``lidxN`` inside the workgroup, innermost range as dimension 0, at most three of
each (further GLOBAL ranges stay loops in every thread).  A WARP range is ``lidx0``, so the lanes
of a warp are consecutive threads.  The renderers name the SPECIALs
(``blockIdx.x`` / ``get_group_id(0)``) and launch the grid from the SPECIALs' sizes.
"""

from __future__ import annotations

from typing import Protocol

from uopviz.core.ops import AxisType, Ops
from uopviz.core.rewrite import PatternMatcher, UPat, substitute
from uopviz.core.uop import UOp

#: how many dimensions a grid has (of workgroups, and of threads in a workgroup)
GRID_DIMENSIONS = 3


def _numbered(ranges: list[UOp], *axis_types: AxisType) -> list[UOp]:
    """The ranges of ``axis_types``, each type's in the order of their numbers, types in the given
    order (kernel order within each type)."""
    return [
        r
        for axis_type in axis_types
        for r in sorted((r for r in ranges if r.arg[1] is axis_type), key=lambda r: r.arg[0])
    ]


class KernelInStage(Protocol):
    """What a backend's rule gets as ``ctx``: the kernel's schedule item, ``body`` the kernel as the
    stage received it."""

    body: UOp


def ranges_to_special(ctx: KernelInStage, kernel: UOp) -> UOp | None:
    """GLOBAL ranges become ``gidxN``, LOCAL and WARP ranges ``lidxN`` (the last three of each, the
    innermost as dimension 0), once: on the kernel as the stage received it, not on the kernel this
    rule made (whose remaining GLOBAL ranges are the ones that stay loops)."""
    if kernel is not ctx.body:
        return None
    nodes = kernel.toposort()
    ranges = [u for u in nodes if u.op is Ops.RANGE]
    mapping: dict[UOp, UOp] = {}
    for prefix, chosen in (
        ("gidx", _numbered(ranges, AxisType.GLOBAL)),
        ("lidx", _numbered(ranges, AxisType.LOCAL, AxisType.WARP)),
    ):
        for dimension, r in enumerate(reversed(chosen[-GRID_DIMENSIONS:])):
            mapping[r] = UOp(Ops.SPECIAL, (r.src[0],), f"{prefix}{dimension}")
    return substitute(kernel, mapping) if mapping else None


#: the GPU backends' rules for Linearize, which runs them on each kernel before its own rules
gpu_linearize_rules = PatternMatcher(
    [
        (UPat(Ops.SINK, name="kernel"), ranges_to_special, "ranges become SPECIAL thread indices"),
    ],
    name="GPU thread indices",
)

#: ``Backend.extra_rules`` of the GPU backends
GPU_EXTRA_RULES = {"Linearize": gpu_linearize_rules}

__all__ = ["GPU_EXTRA_RULES", "GRID_DIMENSIONS", "KernelInStage", "gpu_linearize_rules", "ranges_to_special"]
