"""Timing one kernel: what ``Kernel.time`` runs (through the ``time_kernel`` entry point)."""

from __future__ import annotations

from typing import Any

from uopviz.backends.worker import default_worker, time_kernel
from uopviz.core.limits import check_allocation
from uopviz.passes.kernel import Kernel


def time_kernel_on_random_inputs(kernel: Kernel, backend: str | None = None, repeats: int = 10,
                                 isolated: bool | None = None) -> Any:
    """``kernel``'s run time on random inputs (a ``Timing``); compiled backends run in the isolated
    worker unless ``isolated`` is False (see :meth:`Kernel.time`)."""
    lowered = kernel.lower(backend)
    if isolated is None:
        isolated = lowered.backend != "python"
    params = lowered.params
    total = sum(param.size * param.dtype.itemsize for param in params)
    check_allocation(total, f"the arguments of kernel {kernel.name}")
    if isolated:
        return default_worker().time_random(lowered.backend, lowered.source, lowered.name,
                                            repeats=repeats, flops=kernel.flops, bytes_moved=kernel.bytes)
    return time_kernel(lowered.backend, lowered.source, lowered.name, lowered.random_arguments(),
                       repeats=repeats, flops=kernel.flops, bytes_moved=kernel.bytes, isolated=False)


__all__ = ["time_kernel_on_random_inputs"]
