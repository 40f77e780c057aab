"""Render: a LINEAR program to its backend's source, then to a runnable compiled kernel.

The backends live in ``uopviz.backends`` (their registry names them: ``python``, ``c``, ``llvm``,
``opencl``, ``cuda``); this stage only dispatches.  In the program graph a rendered kernel is
``PROGRAM(LINEAR, SOURCE)``: the instructions and the text made from them, by one rule
(:data:`render_rules`' "LINEAR becomes PROGRAM") fired on each kernel's LINEAR.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from uopviz.backends import get
from uopviz.backends.base import Backend, CompiledKernel
from uopviz.core.ops import Ops
from uopviz.core.rewrite import PatternMatcher, UPat, rewrite_root
from uopviz.core.uop import UOp
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


def render_kernel(linear: UOp, context: RenderContext) -> UOp:
    """``PROGRAM(LINEAR, SOURCE)`` of one kernel, by :data:`render_rules` (a pass ``render <name>`` in
    the trace, one step named after the rule)."""
    if linear.op is not Ops.LINEAR:
        raise TypeError(f"render takes a LINEAR program, got {linear.op.name}")
    return rewrite_root(linear, render_rules, ctx=context, name=f"render {linear.arg}")


def render_stage(lowering: Lowering) -> None:
    """Render: every LINEAR program rendered and, unless ``build=False``, compiled by the backend
    (identical kernels once; in parallel where the backend's builds are processes of their own)."""
    context = RenderContext(lowering.backend)
    bodies = {}
    for item in lowering.items:
        rendered = render_kernel(item.body, context)
        item.source = context.sources[item.body]
        bodies[item] = rendered
    if lowering.build:
        compiled = compile_sources({(item.source, str(item.body.arg)) for item in lowering.items},
                                   lowering.backend)
        for item in lowering.items:
            item.compiled = compiled[item.source, str(item.body.arg)]
    lowering.replace_bodies(bodies)


def compile_sources(sources: Iterable[tuple[str, str]], backend_name: str) -> dict[tuple[str, str], Any]:
    """Each ``(source, name)`` compiled once: in a thread per core when the backend's builds run as
    processes of their own (``Backend.parallel_compile``), else one after the other."""
    backend = backend_named(backend_name)
    pending = list(dict.fromkeys(sources))
    workers = min(len(pending), os.cpu_count() or 1) if backend.parallel_compile else 1
    if workers <= 1:
        return {(source, name): compile_source(source, name, backend) for source, name in pending}
    with ThreadPoolExecutor(workers, thread_name_prefix="uopviz-compile") as pool:
        futures = {key: pool.submit(compile_source, key[0], key[1], backend) for key in pending}
        return {key: future.result() for key, future in futures.items()}


__all__ = ["RenderContext", "backend_named", "compile_source", "compile_sources", "linear_to_program",
           "program_uop", "render_kernel", "render_rules", "render_source", "render_stage"]
