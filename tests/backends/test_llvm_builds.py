"""LLVM builds side by side: a program's kernels optimized and compiled in worker processes
(``LLVMBackend.compile_alongside``), each object loaded here; the same machine code and values as a
build in this process, and a worker that dies is a CompileError, not a dead caller."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import pytest

from uopviz.backends.base import CompileError
from uopviz.backends.worker import KernelCrashed, KernelTimeout, WorkerPool

from . import linear_programs as lp

pytest.importorskip("llvmlite", reason="the llvm backend needs llvmlite (pip install llvmlite)")

CASES = [lp.reduction(16, 256), lp.gemm(16, 32, 16, upcast=8), lp.vector_gather(8, 16), lp.half_vectors(8)]


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch) -> Path:
    """An empty disk cache: every build makes its object anew."""
    monkeypatch.setenv("UOPVIZ_CACHE", str(tmp_path))
    return tmp_path


def _fresh_backend():
    from uopviz.backends.llvm import LLVMBackend

    return LLVMBackend()  # no kernels compiled in memory yet


def _objects(cache: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in (cache / "llvm").glob("*.o")}


@pytest.mark.parametrize("case", CASES, ids=repr)
def test_a_kernel_built_in_a_worker_matches_numpy(case: lp.LinearCase, fresh_cache: Path) -> None:
    backend = _fresh_backend()
    source = backend.render(case.linear)
    kernel = backend.compile_alongside(source, case.linear.arg)
    assert kernel.extra["cached"] is False
    assert "define" in kernel.extra["optimized_ir"]  # the worker's optimized IR comes back with it
    for seed in (0, 1):
        arrays = case.make_arrays(np.random.default_rng(seed))
        expected = case.expected([a.copy() for a in arrays])
        kernel(*arrays)
        for slot, want in expected.items():
            np.testing.assert_allclose(arrays[slot], want, rtol=case.rtol, atol=case.atol)


@pytest.mark.parametrize("case", CASES[:2], ids=repr)
def test_the_worker_makes_the_object_this_process_makes(case: lp.LinearCase, tmp_path, monkeypatch) -> None:
    objects = []
    for how in ("compile", "compile_alongside"):
        cache = tmp_path / how
        monkeypatch.setenv("UOPVIZ_CACHE", str(cache))
        backend = _fresh_backend()
        getattr(backend, how)(backend.render(case.linear), case.linear.arg)
        objects.append(_objects(cache))
    assert len(objects[0]) == 1 and objects[0] == objects[1]


def test_a_warm_build_loads_the_object_a_worker_made(fresh_cache: Path) -> None:
    case = CASES[1]
    source = _fresh_backend().render(case.linear)
    _fresh_backend().compile_alongside(source, case.linear.arg)
    again = _fresh_backend().compile(source, case.linear.arg)
    assert again.extra["cached"] is True
    arrays = case.make_arrays(np.random.default_rng(2))
    expected = case.expected([a.copy() for a in arrays])
    again(*arrays)
    np.testing.assert_allclose(arrays[0], expected[0], rtol=case.rtol, atol=case.atol)


def test_builds_from_several_threads_each_get_their_kernel(fresh_cache: Path) -> None:
    backend = _fresh_backend()
    sources = [(backend.render(case.linear), case.linear.arg) for case in CASES]
    built: dict[str, object] = {}
    failures: list[BaseException] = []

    def build(source: str, name: str) -> None:
        try:
            built[name] = backend.compile_alongside(source, name)
        except BaseException as error:  # noqa: BLE001 - reported below
            failures.append(error)

    threads = [threading.Thread(target=build, args=pair) for pair in sources]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures
    for case in CASES:
        kernel = built[case.linear.arg]
        arrays = case.make_arrays(np.random.default_rng(3))
        expected = case.expected([a.copy() for a in arrays])
        kernel(*arrays)
        for slot, want in expected.items():
            np.testing.assert_allclose(arrays[slot], want, rtol=case.rtol, atol=case.atol)


@pytest.mark.parametrize(
    "failure, says",
    [
        (lambda kernel, backend, timeout_s: KernelCrashed(kernel, backend, -6), "SIGABRT"),
        (lambda kernel, backend, timeout_s: KernelTimeout(kernel, backend, timeout_s), "did not finish"),
    ],
    ids=["crashed", "past its time"],
)
def test_a_worker_that_fails_is_a_compile_error_naming_the_kernel(
    failure, says: str, fresh_cache: Path, monkeypatch
) -> None:
    import uopviz.backends.worker as worker_module

    class FailingPool:
        def request(self, kind, payload, timeout_s, kernel="", backend=""):
            raise failure(kernel, backend, timeout_s)

    monkeypatch.setattr(worker_module, "default_pool", lambda: FailingPool())
    backend = _fresh_backend()
    case = CASES[0]
    with pytest.raises(CompileError) as info:
        backend.compile_alongside(backend.render(case.linear), case.linear.arg)
    assert case.linear.arg in str(info.value) and says in str(info.value)
    assert not _objects(fresh_cache)  # nothing half-built is left for a later build to load


def test_the_default_pool_is_made_once_when_threads_ask_at_once(monkeypatch) -> None:
    import uopviz.backends.worker as worker_module

    monkeypatch.setattr(worker_module, "_default_pool", None)  # none made yet in this process
    pools: list[WorkerPool] = []
    start = threading.Barrier(8)

    def ask() -> None:
        start.wait()
        pools.append(worker_module.default_pool())

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(pools) == 8 and len({id(pool) for pool in pools}) == 1
    pools[0].close()


def test_invalid_ir_is_rejected_here_before_any_worker(fresh_cache: Path, monkeypatch) -> None:
    import uopviz.backends.worker as worker_module

    monkeypatch.setattr(worker_module, "default_pool", lambda: pytest.fail("no worker for IR LLVM rejects"))
    backend = _fresh_backend()
    case = CASES[0]
    source = backend.render(case.linear)
    assert "ret void" in source
    with pytest.raises(CompileError) as info:
        backend.compile_alongside(source.replace("ret void", "ret i32 0"), case.linear.arg)
    assert case.linear.arg in str(info.value) and "ret i32 0" in str(info.value)


def test_a_pool_runs_requests_side_by_side_in_processes_of_their_own() -> None:
    pool = WorkerPool(2)
    try:
        busy = pool._acquire()  # one worker held by a request in progress elsewhere
        first = pool.request("ping", {}, 60.0)
        busy_pid = busy.request("ping", {}, 60.0)
        assert first != busy_pid and os.getpid() not in (first, busy_pid)
        pool._idle.put(busy)
        # no third process: both are reused
        assert {pool.request("ping", {}, 60.0) for _ in range(4)} <= {first, busy_pid}
    finally:
        pool.close()


def test_a_pool_worker_that_crashed_is_replaced_by_the_next_request() -> None:
    pool = WorkerPool(1)
    try:
        before = pool.request("ping", {}, 60.0)
        os.kill(before, 9)
        try:  # a request that finds its worker dead while it waits says so; one made after starts anew
            after = pool.request("ping", {}, 60.0)
        except KernelCrashed:
            after = pool.request("ping", {}, 60.0)
        assert after != before
    finally:
        pool.close()
