"""Isolated kernel execution: kernels run in a worker process, so a crash cannot kill the caller.

A notebook kernel that calls a generated kernel in-process dies with it when the kernel writes out
of bounds.  Here the kernel is compiled and run by a long-lived worker process (a fresh
``python -m uopviz.backends.worker``, so it shares no OpenCL or OpenMP state with the caller and
can be started from daemonic processes too, such as dask workers).  When the worker dies —
a segfault, an abort, a kernel that never returns — the caller gets :class:`KernelCrashed`
(with the signal or exit code) or :class:`KernelTimeout`, a fresh worker is started for the next
request, and the caller goes on.

Errors raised inside the worker (a ``CompileError``, a bad argument) come back as themselves.
"""

from __future__ import annotations

import atexit
import itertools
import os
import pickle
import queue
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from uopviz.backends.aligned import aligned_zeros
from uopviz.backends.timing import Timing, TimingOptions, random_arguments, time_compiled
from uopviz.core.errors import UopvizError


class KernelCrashed(UopvizError, RuntimeError):
    """The process running a kernel died: ``signal_name`` (e.g. ``SIGSEGV``) or ``exit_code`` says how."""

    def __init__(self, kernel: str, backend: str, exit_code: int | None):
        self.kernel, self.backend, self.exit_code = kernel, backend, exit_code
        self.signal_number = -exit_code if exit_code is not None and exit_code < 0 else None
        self.signal_name = _signal_name(self.signal_number) if self.signal_number is not None else None
        how = (
            f"signal {self.signal_number} ({self.signal_name})"
            if self.signal_number is not None
            else f"exit code {exit_code}"
        )
        super().__init__(
            f"kernel {kernel!r} on backend {backend!r} crashed its worker process with {how}; "
            f"this process is unaffected and the next request starts a new worker"
        )

    def __reduce__(self):
        return (KernelCrashed, (self.kernel, self.backend, self.exit_code))


class KernelTimeout(UopvizError, RuntimeError):
    """A kernel (with its compilation) ran past its time limit; its worker process was killed."""

    def __init__(self, kernel: str, backend: str, timeout_s: float):
        self.kernel, self.backend, self.timeout_s = kernel, backend, timeout_s
        super().__init__(
            f"kernel {kernel!r} on backend {backend!r} did not finish within {timeout_s:g} s; its "
            f"worker process was killed and the next request starts a new one"
        )

    def __reduce__(self):
        return (KernelTimeout, (self.kernel, self.backend, self.timeout_s))


class KernelCancelled(UopvizError, RuntimeError):
    """A request was cancelled (:meth:`Worker.cancel`: the tuner's Stop button); its worker process
    was killed, so nothing goes on running.  (Kernel › Interrupt kills it too, and raises
    KeyboardInterrupt as usual.)"""

    def __init__(self, kernel: str, backend: str):
        self.kernel, self.backend = kernel, backend
        super().__init__(f"kernel {kernel!r} on backend {backend!r} was cancelled; its worker process "
                         f"was stopped, and the next request starts a new one")

    def __reduce__(self):
        return (KernelCancelled, (self.kernel, self.backend))


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


# ---------------------------------------------------------------------------------------------
# inside the worker


def _compile(backend: str, source: str, name: str) -> Any:
    from uopviz.backends import get

    return get(backend).compile(source, name)


def _handle_run(backend: str, source: str, name: str, arrays: list[np.ndarray]) -> dict[int, np.ndarray]:
    kernel = _compile(backend, source, name)
    kernel(*arrays)
    return {p.slot: arrays[i] for i, p in enumerate(kernel.params) if p.written}


def _handle_time(backend: str, source: str, name: str, arrays: list[np.ndarray], **options: Any) -> Timing:
    kernel = _compile(backend, source, name)
    return time_compiled(kernel, arrays, **options)


# Buffers a caller had allocated here (Program.run(isolated=True)): session id -> arrays. A crash
# takes them with it; the caller's run fails then anyway.
_SESSIONS: dict[int, list[np.ndarray]] = {}


def allocate_buffers(specs: Sequence[tuple]) -> list[np.ndarray]:
    """Arrays from specs: ``("data", array)``, ``("zeros", size, numpy dtype)`` or ``("view", index of an
    earlier uint8 array, byte offset, byte count, numpy dtype)`` (a buffer placed in a memory arena)."""
    arrays: list[np.ndarray] = []
    for spec in specs:
        kind = spec[0]
        if kind == "data":
            arrays.append(spec[1])  # the caller's own array in-process, a fresh copy in the worker
        elif kind == "zeros":  # on a cache line (and so every buffer an arena places on one)
            arrays.append(aligned_zeros(spec[1], spec[2]))
        elif kind == "view":
            _, arena, offset, nbytes, dtype = spec
            arrays.append(arrays[arena][offset:offset + nbytes].view(dtype))
        else:
            raise ValueError(f"unknown buffer spec {kind!r}")
    return arrays


def bound_arguments(arrays: Sequence[np.ndarray], arguments: Sequence[tuple[int, int, int | None]]) -> list:
    """A kernel's arguments: ``(buffer index, start, stop)``, the elements start:stop of that buffer
    (stop None: to its end)."""
    return [arrays[index][start:stop] for index, start, stop in arguments]


def _handle_allocate(session: int, specs: list[tuple]) -> int:
    _SESSIONS[session] = allocate_buffers(specs)
    return len(_SESSIONS[session])


def _handle_run_bound(backend: str, source: str, name: str, session: int, arguments: list[tuple],
                      extents: tuple[int, ...] = ()) -> None:
    arrays = bound_arguments(_SESSIONS[session], arguments)
    if extents:  # a kernel shared by kernels that differ in an extent reads this launch's from its last array
        arrays.append(np.array(extents, dtype=np.int64))
    _compile(backend, source, name)(*arrays)


def _handle_fetch(session: int, indexes: list[int]) -> list[np.ndarray]:
    arrays = _SESSIONS.pop(session)
    return [arrays[index] for index in indexes]


def _handle_release(session: int) -> None:
    _SESSIONS.pop(session, None)


def _handle_time_random(backend: str, source: str, name: str, seed: int, **options: Any) -> Timing:
    kernel = _compile(backend, source, name)
    return time_compiled(kernel, random_arguments(kernel.params, seed), **options)


def _handle_compile(backend: str, source: str, name: str) -> float:
    return _compile(backend, source, name).compile_s


def _handle_compile_many(backend: str, sources: list[tuple[str, str]]) -> list[float]:
    """Compile many ``(source, name)`` kernels of one backend, filling its caches, as the Render
    stage builds a program's (:class:`~uopviz.backends.builds.SourceBuilds`: side by side where its
    builds are processes of their own, several sources to a build where it takes them).  Their
    compile times, in order."""
    from uopviz.backends.builds import compile_sources

    built = compile_sources(sources, backend)
    return [built[pair].compile_s for pair in map(tuple, sources)]


def _handle_llvm_object(source: str, name: str, cpu: str, features: str) -> tuple[bytes, str]:
    from uopviz.backends import get

    return get("llvm").object_code(source, name, cpu, features)


def _handle_ping() -> int:
    import os

    return os.getpid()


_REQUESTS = {"run": _handle_run, "time": _handle_time, "compile": _handle_compile,
             "compile_many": _handle_compile_many, "ping": _handle_ping,
             "allocate": _handle_allocate, "run_bound": _handle_run_bound, "fetch": _handle_fetch,
             "release": _handle_release, "time_random": _handle_time_random,
             "llvm_object": _handle_llvm_object}


def worker_main(receiver: Connection, sender: Connection) -> None:
    """The worker's loop: answer ``(kind, payload)`` requests until the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the caller, which kills us if needed
    while True:
        try:
            kind, payload = receiver.recv()
        except (EOFError, OSError):
            return
        try:
            # the worker generates code for the caller's CPU target (set_target in a notebook does not
            # reach a separate process through the environment)
            from uopviz.backends.target import set_target

            set_target(payload.pop("target", None))
            answer = ("ok", _REQUESTS[kind](**payload))
        except BaseException as error:  # noqa: BLE001 - every failure goes back to the caller
            answer = ("error", _portable(error), traceback.format_exc())
        sender.send(answer)


def _portable(error: BaseException) -> BaseException:
    """``error`` if it survives pickling, else a RuntimeError carrying its text."""
    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:  # noqa: BLE001 - any pickling failure
        return RuntimeError(f"{type(error).__name__}: {error}")


# ---------------------------------------------------------------------------------------------
# the caller's side


class Worker:
    """A kernel-running process, restarted after every crash or timeout.  Thread-safe (one request at
    a time)."""

    def __init__(self) -> None:
        self._process: subprocess.Popen | None = None
        self._sender: Connection | None = None
        self._receiver: Connection | None = None
        self._lock = threading.Lock()
        self._cancel = threading.Event()
        self.restarts = 0

    @property
    def pid(self) -> int | None:
        """The worker process id (None before the first request)."""
        return self._process.pid if self._alive() else None

    def cancel(self) -> None:
        """Stop the request in progress (from another thread): its worker process is killed and the
        waiting caller gets :class:`KernelCancelled`.  Without a request in progress, nothing."""
        if self._lock.locked():
            self._cancel.set()

    def _alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _start(self) -> None:
        to_child_read, to_child_write = os.pipe()
        to_parent_read, to_parent_write = os.pipe()
        environment = dict(os.environ)
        paths = [p for p in sys.path if p]
        environment["PYTHONPATH"] = os.pathsep.join(paths + [environment.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        )
        command = [sys.executable, "-m", "uopviz.backends.worker", str(to_child_read), str(to_parent_write)]
        try:
            self._process = subprocess.Popen(
                command, pass_fds=(to_child_read, to_parent_write), env=environment, stdin=subprocess.DEVNULL
            )
        finally:
            os.close(to_child_read)
            os.close(to_parent_write)
        self._sender = Connection(to_child_write, readable=False)
        self._receiver = Connection(to_parent_read, writable=False)

    def _discard(self, kill: bool) -> int | None:
        process, self._process = self._process, None
        for connection in (self._sender, self._receiver):
            if connection is not None:
                connection.close()
        self._sender = self._receiver = None
        if process is None:
            return None
        if kill and process.poll() is None:
            process.kill()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        self.restarts += 1
        return process.returncode

    def request(
        self, kind: str, payload: dict[str, Any], timeout_s: float, kernel: str = "", backend: str = ""
    ) -> Any:
        """Send one request and wait for its answer (raising what the worker raised)."""
        from uopviz.backends.target import cpu_target

        payload = {**payload, "target": cpu_target().name}
        with self._lock:
            if not self._alive():
                if self._process is not None:
                    self._discard(kill=True)
                self._start()
            try:
                self._sender.send((kind, payload))
            except (BrokenPipeError, OSError):
                raise KernelCrashed(kernel, backend, self._discard(kill=True)) from None
            self._cancel.clear()
            try:
                answer = self._wait(timeout_s, kernel, backend)
            except KeyboardInterrupt:  # Kernel > Interrupt: the request must not run on unseen
                self._discard(kill=True)
                raise
        if answer[0] == "ok":
            return answer[1]
        error = answer[1]
        if isinstance(error, BaseException):
            error.add_note(f"raised in the kernel worker process:\n{answer[2]}")
            raise error
        raise RuntimeError(f"kernel worker failed: {error}")

    def _wait(self, timeout_s: float, kernel: str, backend: str) -> Any:
        """The worker's answer, waiting at most ``timeout_s``, until a cancel or the worker's death."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._discard(kill=True)
                raise KernelTimeout(kernel, backend, timeout_s)
            if self._cancel.is_set():
                self._cancel.clear()
                self._discard(kill=True)
                raise KernelCancelled(kernel, backend)
            if self._receiver.poll(min(remaining, 0.1)):
                try:
                    return self._receiver.recv()
                except (EOFError, OSError):
                    raise KernelCrashed(kernel, backend, self._discard(kill=False)) from None
            if not self._alive():
                raise KernelCrashed(kernel, backend, self._discard(kill=False))

    def run(
        self, backend: str, source: str, name: str, arrays: Sequence[np.ndarray], timeout_s: float = 120.0
    ) -> dict[int, np.ndarray]:
        """Compile and run a kernel on copies of ``arrays``; returns slot → contents of each written array."""
        return self.request(
            "run",
            {"backend": backend, "source": source, "name": name, "arrays": list(arrays)},
            timeout_s,
            name,
            backend,
        )

    def time(
        self,
        backend: str,
        source: str,
        name: str,
        arrays: Sequence[np.ndarray],
        *,
        timeout_s: float = 120.0,
        **options: Any,
    ) -> Timing:
        """Compile and time a kernel (``options``: :class:`TimingOptions`' fields, checked here)."""
        options = TimingOptions.checked(options)
        payload = {"backend": backend, "source": source, "name": name, "arrays": list(arrays), **options}
        return self.request("time", payload, timeout_s, name, backend)

    def time_random(
        self, backend: str, source: str, name: str, *, seed: int = 0, timeout_s: float = 120.0, **options: Any
    ) -> Timing:
        """Compile and time a kernel on random arguments made in the worker (written ones zero), so
        the caller allocates nothing (``options``: :class:`TimingOptions`' fields, checked here)."""
        options = TimingOptions.checked(options)
        payload = {"backend": backend, "source": source, "name": name, "seed": seed, **options}
        return self.request("time_random", payload, timeout_s, name, backend)

    def allocate(self, specs: Sequence[tuple], timeout_s: float = 120.0) -> int:
        """Allocate buffers in the worker (specs of :func:`allocate_buffers`); returns a session id for
        :meth:`run_bound` and :meth:`fetch`."""
        session = next(_SESSION_NUMBERS)
        self.request("allocate", {"session": session, "specs": list(specs)}, timeout_s, "allocate buffers")
        return session

    def run_bound(
        self,
        backend: str,
        source: str,
        name: str,
        session: int,
        arguments: Sequence[tuple[int, int, int | None]],
        timeout_s: float = 120.0,
        extents: Sequence[int] = (),
    ) -> None:
        """Run a kernel on buffers of an :meth:`allocate` session (see :func:`bound_arguments`);
        ``extents``: the int64 values a kernel shared across extents reads from its last argument
        (``uopviz.passes.extent_sharing``)."""
        payload = {"backend": backend, "source": source, "name": name, "session": session,
                   "arguments": list(arguments), "extents": tuple(extents)}  # fmt: skip
        self.request("run_bound", payload, timeout_s, name, backend)

    def fetch(self, session: int, indexes: Sequence[int], timeout_s: float = 120.0) -> list[np.ndarray]:
        """The buffers ``indexes`` of a session, which ends."""
        payload = {"session": session, "indexes": list(indexes)}
        return self.request("fetch", payload, timeout_s, "fetch buffers")

    def release(self, session: int) -> None:
        """End a session without fetching (nothing to do when the worker has died since)."""
        if self._alive():
            self.request("release", {"session": session}, 30.0, "release buffers")

    def compile(self, backend: str, source: str, name: str, timeout_s: float = 300.0) -> float:
        """Compile (filling the disk cache) and return the compile time."""
        return self.request(
            "compile", {"backend": backend, "source": source, "name": name}, timeout_s, name, backend
        )

    def compile_many(
        self, backend: str, sources: Sequence[tuple[str, str]], timeout_s: float = 300.0
    ) -> list[float]:
        """Compile each ``(source, name)`` on ``backend`` (side by side where the backend's builds are
        processes of their own), filling the caches later requests compile from; their compile times."""
        names = ", ".join(dict.fromkeys(name for _, name in sources))
        payload = {"backend": backend, "sources": list(sources)}
        return self.request("compile_many", payload, timeout_s, names, backend)

    def close(self) -> None:
        """Stop the worker process."""
        with self._lock:
            if self._process is not None:
                self._discard(kill=True)


class WorkerPool:
    """Up to ``size`` workers, each answering one request at a time: requests made from several
    threads at once run side by side, each in a process of its own (LLVM's builds: llvmlite holds
    one lock around all of LLVM in a process).  Workers start on demand and are kept for later
    requests; one that crashed is restarted by its next request, as a lone :class:`Worker` is."""

    def __init__(self, size: int) -> None:
        self.size = max(1, size)
        self._idle: queue.SimpleQueue[Worker] = queue.SimpleQueue()
        self._workers: list[Worker] = []
        self._lock = threading.Lock()

    def request(
        self, kind: str, payload: dict[str, Any], timeout_s: float, kernel: str = "", backend: str = ""
    ) -> Any:
        """:meth:`Worker.request` on an idle worker (a new one while fewer than ``size`` exist, else
        the first to become idle)."""
        worker = self._acquire()
        try:
            return worker.request(kind, payload, timeout_s, kernel, backend)
        finally:
            self._idle.put(worker)

    def _acquire(self) -> Worker:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        with self._lock:
            if len(self._workers) < self.size:
                self._workers.append(Worker())
                return self._workers[-1]
        return self._idle.get()

    def close(self) -> None:
        """Stop every worker process."""
        with self._lock:
            for worker in self._workers:
                worker.close()


_default: Worker | None = None
_default_pool: WorkerPool | None = None
_default_pool_lock = threading.Lock()
_SESSION_NUMBERS = itertools.count(1)


def default_worker() -> Worker:
    """The process-wide worker that ``time_kernel`` and ``run_isolated`` use."""
    global _default
    if _default is None:
        _default = Worker()
        atexit.register(_default.close)
    return _default


def default_pool() -> WorkerPool:
    """The process-wide pool of a worker per core that builds LLVM kernels side by side (made once,
    also when the Render stage's build threads first ask for it at the same time)."""
    global _default_pool
    with _default_pool_lock:
        if _default_pool is None:
            _default_pool = WorkerPool(os.cpu_count() or 1)
            atexit.register(_default_pool.close)
        return _default_pool


def run_isolated(
    backend: str, source: str, name: str, arrays: Sequence[np.ndarray], timeout_s: float = 120.0
) -> dict[int, np.ndarray]:
    """Run a kernel in the default worker; returns slot → contents of each array it writes."""
    return default_worker().run(backend, source, name, arrays, timeout_s)


def time_kernel(
    backend: str,
    source: str,
    name: str,
    arrays: Sequence[np.ndarray],
    *,
    isolated: bool = True,
    timeout_s: float = 120.0,
    **options: Any,
) -> Timing:
    """Compile ``source`` on ``backend`` and time it on ``arrays`` (numpy arrays in PARAM slot order);
    ``options`` are :class:`TimingOptions`' fields (warmup, repeats, rotate, flops, bytes_moved,
    budget_s), checked before anything runs and passed the same either way.

    With ``isolated`` (the default) it runs in the worker process: a crash raises
    ``KernelCrashed`` and a run past ``timeout_s`` raises ``KernelTimeout``, and this process goes on.
    """
    options = TimingOptions.checked(options)
    if isolated:
        return default_worker().time(backend, source, name, arrays, timeout_s=timeout_s, **options)
    from uopviz.backends import get

    return time_compiled(get(backend).compile(source, name), arrays, **options)


if __name__ == "__main__":  # python -m uopviz.backends.worker READ_FD WRITE_FD (started by Worker)
    worker_main(Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False))
