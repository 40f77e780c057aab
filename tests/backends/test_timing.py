"""The timing harness: statistics, warm-up and repeats, input rotation, throughput from counted work."""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from uopviz.backends import get
from uopviz.backends.base import Launch
from uopviz.backends.c import find_c_compiler
from uopviz.backends.timing import Timing, TimingOptions, time_compiled, time_launches
from uopviz.backends.worker import Worker, time_kernel
from uopviz.core.dtype import dtypes

from . import linear_programs as lp

needs_c = pytest.mark.skipif(find_c_compiler() is None, reason="no C compiler (gcc/clang) on this machine")


def test_statistics_of_known_times() -> None:
    times = (0.004, 0.001, 0.003, 0.002, 0.010)
    timing = Timing(times, flops=2_000_000, bytes=8_000_000)
    assert timing.runs == 5
    assert timing.median_s == 0.003 and timing.min_s == 0.001 and timing.max_s == 0.010
    low, _, high = statistics.quantiles(times, n=4, method="inclusive")
    assert timing.spread == pytest.approx((high - low) / 0.003)
    assert timing.gflops == pytest.approx(2e6 / 0.003 / 1e9)
    assert timing.gbs == pytest.approx(8e6 / 0.003 / 1e9) == timing.gbps
    assert "GFLOP/s" in str(timing) and "median 3 ms" in str(timing)
    assert Timing((0.5,)).spread == 0.0 and Timing((0.5,)).gflops is None
    with pytest.raises(ValueError, match="at least one run"):
        Timing(())


class CountingLaunch(Launch):
    """A fake launch that records its runs and reports a fixed time."""

    def __init__(self, name: str, log: list[str], seconds: float):
        self.name, self.log, self.seconds = name, log, seconds

    def run(self) -> float:
        self.log.append(self.name)
        return self.seconds


def test_warmup_repeats_and_rotation_order() -> None:
    log: list[str] = []
    launches = [CountingLaunch(n, log, 0.001) for n in "abc"]
    times = time_launches(launches, warmup=2, repeats=4)
    assert log == ["a", "b", "c", "a", "b", "c"]
    assert times == [0.001] * 4


def test_budget_stops_early_after_three_runs() -> None:
    log: list[str] = []
    times = time_launches([CountingLaunch("a", log, 1.0)], warmup=0, repeats=50, budget_s=0.5)
    assert len(times) == 3


def test_budget_cuts_the_warm_up_of_a_slow_kernel_to_one_run() -> None:
    # 0.2 s a run, 0.5 s of budget: a second warm-up would leave the 3 timed runs past the budget
    log: list[str] = []
    launches = [CountingLaunch(n, log, 0.2) for n in "ab"]
    times = time_launches(launches, warmup=2, repeats=50, budget_s=0.5)
    assert log == ["a", "b", "a", "b"] and times == [0.2] * 3


def test_budget_keeps_the_warm_up_of_a_fast_kernel() -> None:
    log: list[str] = []
    times = time_launches([CountingLaunch("a", log, 0.01)], warmup=2, repeats=4, budget_s=0.5)
    assert len(log) == 6 and len(times) == 4


class FakeKernel:
    """A compiled kernel whose launches take ``seconds`` each (for time_compiled's bookkeeping)."""

    backend, name, compile_s = "fake", "k", 0.0

    def __init__(self, seconds: float):
        self.log: list[str] = []
        self.seconds = seconds

    def prepare(self, *arrays: np.ndarray) -> Launch:
        return CountingLaunch("k", self.log, self.seconds)


@pytest.mark.parametrize(("seconds", "warmed", "runs"), [(0.2, 1, 3), (0.001, 2, 10)])
def test_time_compiled_records_the_warm_up_runs_made(seconds: float, warmed: int, runs: int) -> None:
    kernel = FakeKernel(seconds)
    timing = time_compiled(kernel, [np.zeros(4, np.float32)], warmup=2, repeats=10, budget_s=0.5)
    assert (timing.warmup, timing.runs, len(kernel.log)) == (warmed, runs, warmed + runs)


def test_time_launches_refuses_no_launches_and_no_repeats() -> None:
    with pytest.raises(ValueError, match="at least one launch"):
        time_launches([], warmup=2, repeats=4)
    log: list[str] = []
    with pytest.raises(ValueError, match="repeats must be at least 1"):
        time_launches([CountingLaunch("a", log, 0.1)], warmup=2, repeats=0)
    assert log == []  # refused before any run


def test_every_way_to_time_takes_the_same_checked_options() -> None:
    # TimingOptions is the one list of timing keywords: time_compiled, time_kernel (either way) and the
    # worker's requests check them before anything runs or is sent
    kernel = FakeKernel(0.001)
    arrays = [np.zeros(4, np.float32)]
    assert TimingOptions.checked({"repeats": 3}) == {"warmup": 2, "repeats": 3, "rotate": 1, "flops": 0,
                                                     "bytes_moved": 0, "budget_s": None}  # fmt: skip
    timing = time_compiled(kernel, arrays, warmup=0, repeats=3, flops=8, bytes_moved=16)
    assert (timing.runs, timing.warmup, timing.flops, timing.bytes, len(kernel.log)) == (3, 0, 8, 16, 3)
    worker = Worker()
    for way in (lambda **o: time_compiled(kernel, arrays, **o),
                lambda **o: time_kernel("c", "no source", "k", arrays, isolated=True, **o),
                lambda **o: time_kernel("c", "no source", "k", arrays, isolated=False, **o),
                lambda **o: worker.time("c", "no source", "k", arrays, **o),
                lambda **o: worker.time_random("c", "no source", "k", **o)):  # fmt: skip
        with pytest.raises(TypeError, match="unexpected keyword argument 'repeat'"):
            way(repeat=3)
        with pytest.raises(ValueError, match="rotate must be at least 1, got 0"):
            way(rotate=0)
        with pytest.raises(ValueError, match="warmup must be at least 0, got -1"):
            way(warmup=-1)
    assert len(kernel.log) == 3 and worker.pid is None  # nothing ran, nothing was sent to a worker


@needs_c
def test_real_kernel_timing_is_sane() -> None:
    case = lp.gemm(64, 64, 64, upcast=8)
    backend = get("c")
    kernel = backend.compile(backend.render(case.linear), case.linear.arg)
    arrays = case.make_arrays(np.random.default_rng(0))
    timing = time_compiled(kernel, arrays, warmup=1, repeats=7, flops=case.flops, bytes_moved=3 * 64 * 64 * 4)
    assert timing.runs == 7
    assert 0 < timing.min_s <= timing.median_s <= timing.max_s < 5
    assert timing.gflops == pytest.approx(case.flops / timing.median_s / 1e9)
    np.testing.assert_allclose(arrays[0], case.expected(arrays)[0], rtol=1e-4, atol=1e-3)  # results kept


@needs_c
def test_rotation_runs_on_separate_copies() -> None:
    b = lp.Builder()
    counter = b.param(0, 1)
    b.store(counter, lp.idx(0), b.load(counter, lp.idx(0)) + lp.const(dtypes.float32, 1.0))
    linear = b.linear("increment")
    backend = get("c")
    kernel = backend.compile(backend.render(linear), "increment")
    original = np.zeros(1, np.float32)
    time_compiled(kernel, [original], warmup=0, repeats=6, rotate=3)
    assert original[0] == 2.0, "with 3 copies and 6 runs the first copy runs twice"


@needs_c
def test_isolated_timing_matches_the_request() -> None:
    case = lp.elementwise(4096)
    source = get("c").render(case.linear)
    timing = time_kernel(
        "c",
        source,
        case.linear.arg,
        case.make_arrays(np.random.default_rng(0)),
        repeats=4,
        warmup=1,
        rotate=2,
        flops=case.flops,
    )
    assert timing.runs == 4 and timing.rotate == 2 and timing.backend == "c"
    assert timing.gflops is not None and timing.gflops > 0
