"""Entry points the layers below call in the layers above, without importing them.

Imports point one way (``docs/design/architecture.md``): the IR and the front end never import the
engine, yet ``Tensor.numpy()`` must compile and ``Kernel.lower()`` must lower.  The package's root
(``uopviz/__init__.py``, which Python runs before any submodule) names the implementation of each
entry point as ``"module:attribute"``; the implementation is imported on first use.

* ``compile``: ``compile(outputs) -> Program`` (``uv.compile``), called by ``Tensor.numpy``.
* ``gradient``: ``gradient(out, wrt, grad_out) -> list`` (``uv.gradient``), called by ``Tensor.backward``.
* ``lower_kernel``: ``lower_kernel(kernel, backend) -> LoweredKernel``, called by ``Kernel.lower``.
* ``time_kernel``: ``time_kernel(kernel, backend, repeats, isolated) -> Timing``, by ``Kernel.time``.
* ``search``: ``search(kernel) -> result with .opts``, called by Optimize for ``opts="beam"``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

_PROVIDED: dict[str, str | Callable[..., Any]] = {}


def provide(name: str, implementation: str | Callable[..., Any]) -> None:
    """Name the implementation of entry point ``name``: a callable, or ``"module:attribute"``
    imported on first use."""
    _PROVIDED[name] = implementation


def entry_point(name: str) -> Callable[..., Any]:
    """The implementation of entry point ``name`` (imported now if it was given by name)."""
    implementation = _PROVIDED.get(name)
    if implementation is None:
        raise LookupError(f"no implementation of the entry point {name!r} was provided; known: "
                          f"{', '.join(sorted(_PROVIDED)) or 'none'}")
    if isinstance(implementation, str):
        module_name, _, attribute = implementation.partition(":")
        implementation = getattr(importlib.import_module(module_name), attribute)
        _PROVIDED[name] = implementation
    return implementation


__all__ = ["entry_point", "provide"]
