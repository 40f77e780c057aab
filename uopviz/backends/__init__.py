"""The backends: renderers and runtimes for linear programs (``docs/design/kernel-ir.md``).

Backends are made on first ``get`` from a ``"module:Class"`` entry, so importing this package stays
cheap.

``get(name)`` → the Backend; ``available()`` → names of the backends usable on this machine;
``register(name, factory)`` adds one.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from uopviz.backends.base import Backend, BackendUnavailable, CompiledKernel, TensorCore

_FACTORIES: dict[str, str | Callable[[], Backend]] = {
    "python": "uopviz.backends.python:PythonBackend",
    "c": "uopviz.backends.c:CBackend",
    "llvm": "uopviz.backends.llvm:LLVMBackend",
    "opencl": "uopviz.backends.opencl:OpenCLBackend",
    "cuda": "uopviz.backends.cuda:CUDABackend",
}
_INSTANCES: dict[str, Backend] = {}


def register(name: str, factory: str | Callable[[], Backend]) -> None:
    """Add (or replace) backend ``name``: a zero-argument factory or a ``"module:Class"`` path."""
    _FACTORIES[name] = factory
    _INSTANCES.pop(name, None)


def get(name: str) -> Backend:
    """The backend called ``name`` (one instance per process)."""
    backend = _INSTANCES.get(name)
    if backend is not None:
        return backend
    factory = _FACTORIES.get(name)
    if factory is None:
        raise KeyError(f"no backend {name!r}; known: {', '.join(_FACTORIES)}")
    if isinstance(factory, str):
        module_name, _, class_name = factory.partition(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            raise BackendUnavailable(f"backend {name!r} is not installed: {error}") from error
        factory = getattr(module, class_name)
    backend = factory()
    _INSTANCES[name] = backend
    return backend


def unavailable_reasons() -> dict[str, str]:
    """Backend name → why it cannot run here, for each backend that cannot."""
    reasons: dict[str, str] = {}
    for name in _FACTORIES:
        try:
            reason = get(name).unavailable_reason()
        except BackendUnavailable as error:
            reason = str(error)
        if reason is not None:
            reasons[name] = reason
    return reasons


def available() -> list[str]:
    """Names of the backends that can compile and run kernels on this machine."""
    reasons = unavailable_reasons()
    return [name for name in _FACTORIES if name not in reasons]


__all__ = ["Backend", "BackendUnavailable", "CompiledKernel", "TensorCore", "available", "get", "register",
           "unavailable_reasons"]
