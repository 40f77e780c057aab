"""The memory limit (uopviz.core.limits) and isolation that covers memory (issue 11): a program or a
timing whose buffers pass the limit is a MemoryLimitError before anything is allocated, and isolated
runs and timings allocate their buffers in the kernel worker, not in the caller."""

from __future__ import annotations

import numpy as np
import pytest

import uopviz as uv
from uopviz.backends import available
from uopviz.backends import worker as worker_module
from uopviz.core import limits
from uopviz.core.limits import MemoryLimitError, memory_limit, memory_limit_set, set_memory_limit

needs_c = pytest.mark.skipif("c" not in available(), reason="needs the C backend (a C compiler)")


def test_the_default_limit_is_a_fraction_of_physical_memory(monkeypatch):
    monkeypatch.delenv(limits.ENVIRONMENT_VARIABLE, raising=False)
    monkeypatch.setattr(limits, "_physical_memory", lambda: 16 << 30)
    assert memory_limit() == int((16 << 30) * limits.DEFAULT_FRACTION)
    monkeypatch.setattr(limits, "_physical_memory", lambda: None)
    assert memory_limit() == 4 << 30


@pytest.mark.parametrize("text,expected", [("2000000", 2_000_000), ("512M", 512 << 20), ("4G", 4 << 30),
                                           ("1.5GiB", int(1.5 * (1 << 30))), ("64k", 64 << 10)])
def test_the_environment_sets_the_limit(monkeypatch, text, expected):
    monkeypatch.setenv(limits.ENVIRONMENT_VARIABLE, text)
    assert memory_limit() == expected
    with memory_limit_set(123):
        assert memory_limit() == 123  # an explicit setting wins
    assert memory_limit() == expected


def test_bad_limits_are_refused(monkeypatch):
    monkeypatch.setenv(limits.ENVIRONMENT_VARIABLE, "lots")
    with pytest.raises(ValueError, match="byte count"):
        memory_limit()
    for bad in (-1, 1.5, True, "1G"):
        with pytest.raises(ValueError):
            set_memory_limit(bad)


def huge_program(backend: str) -> uv.Program:
    # 2**31 float32 outputs: 8 GiB, never allocated
    return uv.compile(uv.Tensor.full((2**31,), 1.5) * 2, backend=backend)


@needs_c
@pytest.mark.parametrize("isolated", [False, True])
def test_a_program_over_the_limit_is_refused_before_allocating(isolated, monkeypatch):
    # issue 11: run(isolated=True) allocated a 2**31-element program's buffers in the caller (MemoryError)
    program = huge_program("c")
    monkeypatch.setattr(worker_module, "allocate_buffers", _no_allocation)
    with memory_limit_set(1 << 30), pytest.raises(MemoryLimitError, match="8.0 GiB") as caught:
        program.run(isolated=isolated)
    assert caught.value.requested == 8 << 30 and caught.value.limit == 1 << 30


@needs_c
def test_timing_a_kernel_over_the_limit_is_refused_before_allocating(monkeypatch):
    # issue 11: Kernel.time() made the random arguments of a 2**31-element kernel in the caller
    kernel = huge_program("c").kernels[0]
    monkeypatch.setattr(uv.backends.timing, "random_arguments", _no_allocation)
    with memory_limit_set(1 << 30), pytest.raises(MemoryLimitError):
        kernel.time("c")


def _no_allocation(*args, **kwargs):
    raise AssertionError("allocated in the calling process")


@needs_c
def test_isolated_runs_and_timings_allocate_in_the_worker(monkeypatch):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((5, 7)).astype(np.float32)
    y = rng.standard_normal((7, 3)).astype(np.float32)
    program = uv.compile([(uv.Tensor(x) @ uv.Tensor(y)).relu(), uv.Tensor(x).sum(axis=0)], backend="c",
                         opts="heuristic")
    expected = program.run()
    # the caller's allocation helpers fail: the worker process (its own copy of the module) allocates
    monkeypatch.setattr(worker_module, "allocate_buffers", _no_allocation)
    monkeypatch.setattr(uv.backends.timing, "random_arguments", _no_allocation)
    got = program.run(isolated=True)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_array_equal(g, e)
    np.testing.assert_allclose(got[0], np.maximum(x @ y, 0), rtol=1e-5, atol=1e-5)
    timing = program.kernels[0].time("c", repeats=3)
    assert timing.runs >= 3 and timing.median_s > 0
