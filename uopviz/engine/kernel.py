"""One kernel lowered and timed: what ``Kernel.lower`` and ``Kernel.time`` run (through the
``lower_kernel`` and ``time_kernel`` entry points of :mod:`uopviz.core.entry_points`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

# through the modules, not their names: tests (and users) replace these functions on the modules
from uopviz.backends import timing, worker
from uopviz.backends.base import CompiledKernel, KernelMeta, KernelParam
from uopviz.core.limits import check_allocation
from uopviz.core.uop import UOp
from uopviz.passes.optops.kernel import Kernel
from uopviz.passes.pipeline import lower
from uopviz.passes.render import backend_named, compile_source
from uopviz.passes.schedule import Lowering, ScheduleItem


@dataclass
class LoweredKernel:
    """One kernel after every stage: its LINEAR program and source; compiled on first use of
    :attr:`compiled` (viewing source never compiles, so CUDA source renders on any machine)."""

    name: str
    backend: str
    linear: UOp
    source: str
    _compiled: CompiledKernel | None = field(default=None, repr=False)

    @property
    def compiled(self) -> CompiledKernel:
        """The compiled kernel (compiled now if it was not; backends cache by source and target)."""
        if self._compiled is None:
            self._compiled = compile_source(self.source, self.name, self.backend)
        return self._compiled

    @property
    def params(self) -> tuple[KernelParam, ...]:
        """The kernel's arguments, in slot order, read from the rendered source."""
        return KernelMeta.from_source(self.source, self.backend).params

    def random_arguments(self, seed: int = 0) -> list[np.ndarray]:
        """Random arrays for every PARAM slot (the written ones zero), for timing; within the memory
        limit (``uopviz.backends.timing.random_arguments``)."""
        return timing.random_arguments(self.params, seed)


def lower_kernel(kernel: Kernel, backend_name: str) -> LoweredKernel:
    """A Kernel, with the opts it has, through the pipeline's table from Optimize to Render (the
    source only: :attr:`LoweredKernel.compiled` builds it when asked).  A kernel whose axes or tensor
    cores need what ``backend_name`` lacks is an :class:`OptError` (``Kernel.for_backend``)."""
    backend = backend_named(backend_name)
    kernel = kernel.for_backend(backend)
    item = ScheduleItem(0, kernel.ast, [], kernel)
    lower(Lowering([], backend.name, items=[item], build=False, optimized=True), first="Optimize")
    return LoweredKernel(kernel.name, backend.name, item.body.src[0], item.source)


def time_kernel_on_random_inputs(kernel: Kernel, backend: str | None = None, repeats: int = 10,
                                 isolated: bool | None = None, budget_s: float | None = None) -> Any:
    """``kernel``'s run time on random inputs (a ``Timing``); compiled backends run in the isolated
    worker unless ``isolated`` is False (see :meth:`Kernel.time`).  With ``budget_s`` every backend,
    the Python interpreter too, runs in the worker: it is compiled first, then its runs stop once half
    the budget is spent, and the worker is stopped (:class:`KernelTimeout`) at the budget."""
    lowered = kernel.lower(backend)
    if budget_s is not None:
        if not budget_s > 0:
            raise ValueError(f"budget_s must be a positive number of seconds, got {budget_s!r}")
        isolated = True
    elif isolated is None:
        isolated = lowered.backend != "python"
    params = lowered.params
    total = sum(param.size * param.dtype.itemsize for param in params)
    check_allocation(total, f"the arguments of kernel {kernel.name}")
    counts = {"flops": kernel.flops, "bytes_moved": kernel.bytes}
    if not isolated:
        return worker.time_kernel(lowered.backend, lowered.source, lowered.name, lowered.random_arguments(),
                                  repeats=repeats, isolated=False, **counts)
    process = worker.default_worker()
    if budget_s is None:
        return process.time_random(lowered.backend, lowered.source, lowered.name, repeats=repeats, **counts)
    process.compile(lowered.backend, lowered.source, lowered.name)  # building is not the kernel's time
    return process.time_random(lowered.backend, lowered.source, lowered.name, repeats=repeats,
                               timeout_s=budget_s, budget_s=budget_s / 2, **counts)


__all__ = ["LoweredKernel", "lower_kernel", "time_kernel_on_random_inputs"]
