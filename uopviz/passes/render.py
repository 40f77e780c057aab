"""Render: a LINEAR program to its backend's source, then to a runnable compiled kernel.

The backends live in ``uopviz.backends`` (their registry names them: ``python``, ``c``, ``llvm``,
``opencl``, ``cuda``); this stage only dispatches.  In the program graph a rendered kernel is
``PROGRAM(LINEAR, SOURCE)``: the instructions and the text made from them, by one rule
(:data:`render_rules`' "LINEAR becomes PROGRAM") fired on each kernel's LINEAR.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from uopviz.backends import get
from uopviz.backends.base import Backend, CompiledKernel
from uopviz.backends.builds import SourceBuilds, compile_sources
from uopviz.core.ops import Ops
from uopviz.core.rewrite import PatternMatcher, UPat, rewrite_root
from uopviz.core.uop import UOp
from uopviz.passes.extent_sharing import ExtentBoundKernel, ExtentSharing, SharedExtents
from uopviz.passes.schedule import Lowering


def backend_named(name: str | Backend) -> Backend:
    """The Backend object for a name (or the Backend itself)."""
    return name if isinstance(name, Backend) else get(name)


def render_source(linear: UOp, backend: str | Backend) -> str:
    """The backend's source text of a LINEAR program."""
    if linear.op is not Ops.LINEAR:
        raise TypeError(f"render takes a LINEAR program, got {linear.op.name}")
    return backend_named(backend).render(linear)


def compile_source(source: str, name: str, backend: str | Backend) -> CompiledKernel:
    """Compile a rendered source on its backend (backends cache by source)."""
    return backend_named(backend).compile(source, name)


def program_uop(linear: UOp, source: str) -> UOp:
    """``PROGRAM(LINEAR, SOURCE)``: how a rendered kernel appears in the program graph."""
    return UOp(Ops.PROGRAM, (linear, UOp(Ops.SOURCE, (), source)))

@dataclass
class RenderContext:
    """The backend the kernels render for, and the sources rendered so far: identical kernels (one
    LINEAR in several launches) render once."""

    backend: str | Backend
    sources: dict[UOp, str] = field(default_factory=dict)


def linear_to_program(ctx: RenderContext, linear: UOp) -> UOp:
    """A LINEAR program becomes ``PROGRAM(LINEAR, SOURCE)``: its instructions and the backend's text
    of them (:func:`render_source`)."""
    source = ctx.sources.get(linear)
    if source is None:
        source = ctx.sources[linear] = render_source(linear, ctx.backend)
    return program_uop(linear, source)


#: Render's rule, tried at each kernel's root alone (its PROGRAM holds the LINEAR it matched)
render_rules = PatternMatcher([
    (UPat(Ops.LINEAR, name="linear"), linear_to_program, "LINEAR becomes PROGRAM"),
], name="render")


def linear_shares_extents(ctx: ExtentSharing, linear: UOp) -> UOp | None:
    """A kernel of a group that differs only in index constants becomes the group's one LINEAR, those
    constants read from its extents PARAM (:func:`~uopviz.passes.extent_sharing.share_extents`)."""
    group = ctx.get(linear)
    return None if group is None else group.linear


#: tried at the root of each kernel that shares a compiled kernel with others of its form
share_extents_rules = PatternMatcher([
    (UPat(Ops.LINEAR, name="linear"), linear_shares_extents, "kernels differing only in extents share one"),
], name="share extents")


def render_kernel(linear: UOp, context: RenderContext) -> UOp:
    """``PROGRAM(LINEAR, SOURCE)`` of one kernel, by :data:`render_rules` (a pass ``render <name>`` in
    the trace, one step named after the rule)."""
    if linear.op is not Ops.LINEAR:
        raise TypeError(f"render takes a LINEAR program, got {linear.op.name}")
    return rewrite_root(linear, render_rules, ctx=context, name=f"render {linear.arg}")


def render_stage(lowering: Lowering) -> None:
    """Render: every LINEAR program rendered and, unless ``build=False``, compiled by the backend
    (identical kernels once, kernels differing only in an extent once where the program asks for
    it; in parallel where the backend's builds are processes of their own, each build starting as
    soon as its source is rendered)."""
    context = RenderContext(lowering.backend)
    bodies = {}
    shared = _extent_sharing(lowering)
    groups: dict[UOp, SharedExtents] = {}  # the kernels that share, each with its group's program
    # one kernel builds here: a worker process would only add its start (LLVM's builds)
    several = len({item.body for item in lowering.items}) > 1
    with SourceBuilds(lowering.backend, lowering.build, parallel=several) as builds:
        for item in lowering.items:
            linear = item.body
            group = shared.get(linear) if shared is not None else None
            if group is not None:
                groups[linear] = group
                name = f"share extents {linear.arg}"
                linear = rewrite_root(linear, share_extents_rules, ctx=shared, name=name)
            first = linear not in context.sources
            rendered = render_kernel(linear, context)
            item.source = context.sources[linear]
            if first:
                builds.submit(item.source, str(linear.arg))
            bodies[item] = rendered
        compiled = builds.results()
    if lowering.build:
        for item, rendered in bodies.items():
            item.compiled = compiled[item.source, str(rendered.src[0].arg)]
            if item.body in groups:
                item.compiled = ExtentBoundKernel.bind(item.compiled, groups[item.body].values)
    lowering.replace_bodies(bodies)


def _extent_sharing(lowering: Lowering) -> ExtentSharing | None:
    """Which kernels share a compiled kernel with others of their form, worked out as Render reaches
    them (``ExtentSharing``), where the program asks for it and its backend launches such kernels."""
    if not lowering.share_extents or not backend_named(lowering.backend).shares_extents:
        return None
    return ExtentSharing([item.body for item in lowering.items])


__all__ = ["RenderContext", "SourceBuilds", "backend_named", "compile_source", "compile_sources",
           "linear_to_program", "linear_shares_extents", "program_uop", "render_kernel", "render_rules",
           "render_source", "render_stage", "share_extents_rules"]
