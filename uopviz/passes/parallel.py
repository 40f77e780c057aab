"""The per-kernel stages of a big program on every core: Optimize ... Linearize in forked processes.

From Optimize to Linearize each kernel is lowered on its own: no rule of those stages reads another
kernel, and each stage ends by putting the new bodies in the program graph.  A network's lowering
spends most of its time there in Python (DenseNet-121: 151 kernels, ~5 s of a 9.5 s cold compile on
one core while the other waited for Render's first source), so a big program whose lowering nobody
traces runs those four stages in work units shared out between this process and forked copies of
it: each unit is the launches of one kernel body, taken from a shared counter by whichever process
is free, lowered through the four stages as a program without a graph, and sent back pickled (the
LINEAR bodies and the optimized kernels, every UOp once: ``core.uop_pickle``); the program graph
then gets every new body in one walk, and Register/Memory Plan and Render go on as for a lowering
on one core.  The result is the same
program: the units are the same kernels the stages would lower, with the same opts and backend.

Only an untraced lowering splits (a trace records steps in the order they happen, in one process;
the NNEF front end lowers a big graph untraced and makes its trace when first read), and only where
forking is safe and pays: Linux (``os.fork``; macOS's system libraries are not fork-safe), more
than one core, a CPU backend (a GPU runtime in the parent is not safe to use from a fork), opts
that do not search (BEAM times candidates on the cores itself), and at least
:data:`MINIMUM_UNITS` distinct kernels.  A child that fails or dies loses nothing: the parent
lowers whatever did not come back itself (raising the error there, as a lowering on one core
would); where no child can be made (no fork, no temporary file, no POSIX semaphore for the shared
counter) the parent lowers every unit.  ``UOPVIZ_PARALLEL_LOWERING=0`` keeps every lowering in one
process.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from uopviz.backends.target import host_cpu
from uopviz.core.rewrite_trace import is_tracing
from uopviz.core.uop_pickle import dumps_sharing_uops, loads_sharing_uops
from uopviz.passes.schedule import Lowering, ScheduleItem

#: the stages that lower each kernel on its own, in order
PER_KERNEL_STAGES = ("Optimize", "Expand", "Instruction Selection", "Linearize")
#: fewer distinct kernels than this lower in one process (a fork and the results' pickles cost
#: ~0.1 s; a kernel's four stages ~30 ms)
MINIMUM_UNITS = 24
#: the backends whose lowering a forked process may run (no device runtime behind them)
FORK_SAFE_BACKENDS = frozenset({"python", "c", "llvm"})
SWITCH = "UOPVIZ_PARALLEL_LOWERING"

RunStage = Callable[[Lowering, str], None]


def enabled() -> bool:
    """Whether big lowerings may split across processes (``UOPVIZ_PARALLEL_LOWERING`` is not 0)."""
    return os.environ.get(SWITCH, "1").strip().lower() not in ("0", "false", "no", "off")


def searches(opts: Any) -> bool:
    """True when ``opts`` asks for a BEAM search for some kernel."""
    if isinstance(opts, str):
        return opts == "beam"
    if isinstance(opts, dict):
        return any(searches(choice) for choice in opts.values())
    if isinstance(opts, (list, tuple)):
        return any(isinstance(choice, str) and choice == "beam" for choice in opts)
    return False


def process_count(backend: str, opts: Any, kernels: int) -> int:
    """How many processes lower the per-kernel stages of a program of ``kernels`` distinct kernels
    on ``backend`` with ``opts`` (1: this one alone)."""
    if not (enabled() and sys.platform.startswith("linux") and not is_tracing()):
        return 1
    if backend not in FORK_SAFE_BACKENDS or searches(opts) or kernels < MINIMUM_UNITS:
        return 1
    return max(1, min(host_cpu().cores, kernels // (MINIMUM_UNITS // 2)))


def work_units(lowering: Lowering) -> list[list[ScheduleItem]]:
    """The program's launches grouped by kernel body and name (the launches the stages lower once),
    in program order."""
    units: dict[tuple[Any, str], list[ScheduleItem]] = {}
    for item in lowering.items:
        units.setdefault((item.body, item.kernel.name), []).append(item)
    return list(units.values())


def lower_kernels_in_processes(lowering: Lowering, run_stage: RunStage, processes: int) -> None:
    """Run :data:`PER_KERNEL_STAGES` on every kernel of ``lowering``, the work shared out between
    this process and ``processes - 1`` forked ones; the program graph gets the new bodies at once."""
    units = work_units(lowering)
    original = {item: item.body for item in lowering.items}
    children: list[tuple[int, str]] = []
    done: set[int] = set()
    try:
        counter = multiprocessing.get_context("fork").Value("l", 0)
    except OSError:  # no POSIX semaphores here (no /dev/shm): every unit below, in this process
        counter = None
    try:
        if counter is not None:
            for _ in range(processes - 1):
                child = _fork(lowering, units, counter, run_stage)
                if child is None:  # no fork (process limit, memory): fewer processes
                    break
                children.append(child)
            done.update(_take_units(lowering, units, counter, run_stage))
        for pid, path in children:
            _collect(pid, path, units, done)
        children = []
        for position, unit in enumerate(units):  # what a failed child did not send back
            if position not in done:
                _lower_unit(lowering, unit, run_stage)
    finally:
        for pid, path in children:  # an error or an interrupt here: the children stop too
            _stop(pid, path)
    final = {item: item.body for item in lowering.items}
    for item, body in original.items():
        item.body = body
    lowering.replace_bodies(final)


def _lower_unit(lowering: Lowering, unit: Sequence[ScheduleItem], run_stage: RunStage) -> None:
    """The per-kernel stages on one unit's launches, as a program of its own without a graph."""
    alone = Lowering(outputs=[], backend=lowering.backend, items=list(unit), build=lowering.build,
                     opts=lowering.opts, optimized=lowering.optimized, share_extents=lowering.share_extents)
    for stage in PER_KERNEL_STAGES:
        run_stage(alone, stage)


def _take_units(lowering: Lowering, units: list[list[ScheduleItem]], counter: Any,
                run_stage: RunStage) -> Iterator[int]:
    """Lower units taken from the shared counter until none is left, yielding each one's position
    once it is lowered."""
    while True:
        with counter.get_lock():
            position = counter.value
            counter.value += 1
        if position >= len(units):
            return
        _lower_unit(lowering, units[position], run_stage)
        yield position


def _fork(lowering: Lowering, units: list[list[ScheduleItem]], counter: Any,
          run_stage: RunStage) -> tuple[int, str] | None:
    """A child lowering units from the shared counter, which writes what it lowered to a file: its
    process id and that file; None where no child could be made."""
    try:
        handle, path = tempfile.mkstemp(prefix="uopviz-lowering-", suffix=".pickle")
        os.close(handle)
    except OSError:
        return None
    try:
        pid = os.fork()
    except OSError:
        _remove(path)
        return None
    if pid:
        return pid, path
    status = 1
    try:  # the child: never returns into the caller's code, whatever happens
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles an interrupt and stops us
        results = []
        try:
            for position in _take_units(lowering, units, counter, run_stage):
                results.append((position, [(item.kernel, item.body) for item in units[position]]))
        except BaseException:  # noqa: BLE001 - the parent lowers the failed unit again and raises
            pass
        with open(path, "wb") as file:
            file.write(dumps_sharing_uops(results))
        status = 0
    finally:
        os._exit(status)


def _collect(pid: int, path: str, units: list[list[ScheduleItem]], done: set[int]) -> None:
    """Wait for a child and take the units it lowered (none when it failed)."""
    _, status = os.waitpid(pid, 0)
    try:
        if status == 0:
            with open(path, "rb") as file:
                results = loads_sharing_uops(file.read())
            for position, lowered in results:
                for item, (kernel, body) in zip(units[position], lowered, strict=True):
                    item.kernel, item.body = kernel, body
                done.add(position)
    except Exception:  # noqa: BLE001 - an unreadable result: the parent lowers those units itself
        pass
    finally:
        _remove(path)


def _stop(pid: int, path: str) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except OSError:
        pass
    _remove(path)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


__all__ = ["MINIMUM_UNITS", "PER_KERNEL_STAGES", "enabled", "lower_kernels_in_processes", "process_count",
           "searches", "work_units"]
