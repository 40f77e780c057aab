"""Render: a LINEAR program to its backend's source, then to a runnable compiled kernel.

The backends live in ``uopviz.backends`` (their registry names them: ``python``, ``c``, ``llvm``,
``opencl``, ``cuda``); this stage only dispatches.  In the program graph a rendered kernel is
``PROGRAM(LINEAR, SOURCE)``: the instructions and the text made from them.
"""

from __future__ import annotations

from uopviz.backends import get
from uopviz.backends.base import Backend, CompiledKernel
from uopviz.core.ops import Ops
from uopviz.core.uop import UOp


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


__all__ = ["backend_named", "compile_source", "program_uop", "render_source"]
