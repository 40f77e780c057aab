"""Render: a LINEAR program to its backend's source, then to a runnable compiled kernel.

The backends live in ``uopviz.backends`` (their registry names them: ``python``, ``c``, ``llvm``,
``opencl``, ``cuda``); this stage only dispatches.  In the program graph a rendered kernel is
``PROGRAM(LINEAR, SOURCE)``: the instructions and the text made from them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from uopviz.backends import get
from uopviz.backends.base import Backend, CompiledKernel
from uopviz.core.ops import Ops
from uopviz.core.uop import UOp
from uopviz.passes.extent_sharing import ExtentBoundKernel, SharedExtents, share_extents
from uopviz.passes.schedule import Lowering, record_step


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

def render_stage(lowering: Lowering) -> None:
    """Render: every LINEAR program rendered and, unless ``build=False``, compiled by the backend
    (identical kernels once; in parallel where the backend's builds are processes of their own)."""
    bodies = {}
    rendered_sources: dict[UOp, str] = {}
    shared = _shared_extents(lowering)
    for item in lowering.items:
        linear = item.body
        if linear in shared:
            record_step(share_extents, linear, shared[linear].linear, f"share extents {linear.arg}")
            linear = shared[linear].linear
        source = rendered_sources.get(linear)
        if source is None:
            source = rendered_sources[linear] = render_source(linear, lowering.backend)
        item.source = source
        rendered = program_uop(linear, source)
        record_step(render_source, linear, rendered, f"render {linear.arg}")
        bodies[item] = rendered
    if lowering.build:
        names = {item: str(rendered.src[0].arg) for item, rendered in bodies.items()}
        compiled = compile_sources({(item.source, names[item]) for item in lowering.items}, lowering.backend)
        for item in lowering.items:
            item.compiled = compiled[item.source, names[item]]
            if item.body in shared:
                item.compiled = ExtentBoundKernel.bind(item.compiled, shared[item.body].values)
    lowering.replace_bodies(bodies)


def _shared_extents(lowering: Lowering) -> dict[UOp, SharedExtents]:
    """The kernels that share a compiled kernel with others of their form (``share_extents``),
    where the program asks for it and its backend launches such kernels."""
    if not lowering.share_extents or not backend_named(lowering.backend).shares_extents:
        return {}
    return share_extents([item.body for item in lowering.items])


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


__all__ = ["backend_named", "compile_source", "compile_sources", "program_uop", "render_source",
           "render_stage"]
