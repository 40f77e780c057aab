"""A big untraced program's per-kernel stages on several processes (uopviz.passes.parallel): the same
program as on one core (sources, kernels, values against numpy), its trace made when first read,
and nothing lost when a forked process fails, dies or the parent is interrupted."""

from __future__ import annotations

import dataclasses
import os
import sys

import numpy as np
import pytest

import uopviz as uv
from uopviz.core.rewrite import tracing
from uopviz.nnef.composition.composer import compose
from uopviz.nnef.program import program_cache
from uopviz.nnef.program.compile import compile_graph
from uopviz.nnef.program.runtime import program_inputs
from uopviz.passes import parallel, pipeline
from uopviz.passes.optops.opts import Opt, OptError, OptOp

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="lowering splits across forked processes on Linux only")

BACKENDS = [name for name in ("python", "c", "llvm") if name in uv.backends.available()]
# channel counts along the chain: every conv a kernel of its own shape (26 distinct kernels and
# their padded copies, above parallel.MINIMUM_UNITS)
CHANNELS = [2, 3, 4, 5, 6, 7, 3, 5, 8, 2, 6, 4, 7, 9, 3, 8, 5, 2, 9, 6, 4, 10, 3, 7, 5, 11, 4]


def _chain_text(channels: list[int], size: int) -> str:
    variables = "; ".join(
        f"w{k}: real[{out}, {into}, 3, 3]; b{k}: real[{out}]"
        for k, (into, out) in enumerate(zip(channels, channels[1:]))
    )
    lines, value = [], "x"
    for k in range(len(channels) - 1):
        lines.append(f"c{k} = nn.conv{{padding=1}}({value}, w{k}, b{k}); r{k} = nn.relu(c{k});")
        value = f"r{k}"
    lines.append(f"y = math.add({value}, {value});")
    return (f"import nn; import math; graph Chain {{ @input {{ x: real[1, {channels[0]}, {size}, {size}]; }} "
            f"@output {{ y: real; }} @variable {{ {variables}; }} @compose {{ {' '.join(lines)} }} }}")


def _data(channels: list[int], size: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    data = {"x": rng.standard_normal((1, channels[0], size, size)).astype(np.float32)}
    for k, (into, out) in enumerate(zip(channels, channels[1:])):
        data[f"w{k}"] = (rng.standard_normal((out, into, 3, 3)) / (3 * into) ** 0.5).astype(np.float32)
        data[f"b{k}"] = rng.standard_normal(out).astype(np.float32) * 0.1
    return data


def _reference(data: dict[str, np.ndarray], channels: list[int]) -> np.ndarray:
    value = data["x"].astype(np.float64)
    for k in range(len(channels) - 1):
        padded = np.pad(value, [(0, 0), (0, 0), (1, 1), (1, 1)])
        windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
        value = np.einsum("nchwij,ocij->nohw", windows, data[f"w{k}"]) + data[f"b{k}"].reshape(1, -1, 1, 1)
        value = np.maximum(value, 0)
    return value + value


@pytest.fixture
def two_cores(monkeypatch):
    """Two cores whatever the machine has, and a record of every split lowering's process count."""
    cpu = parallel.host_cpu()
    monkeypatch.setattr(parallel, "host_cpu", lambda: dataclasses.replace(cpu, cores=2))
    splits: list[int] = []
    split = pipeline.lower_kernels_in_processes

    def recorded(lowering, run_stage, processes):
        assert len(parallel.work_units(lowering)) >= parallel.MINIMUM_UNITS
        splits.append(processes)
        return split(lowering, run_stage, processes)

    monkeypatch.setattr(pipeline, "lower_kernels_in_processes", recorded)
    return splits


def _compile(backend: str, size: int = 6, opts="heuristic", monkeypatch=None, split: bool = True):
    if monkeypatch is not None:
        monkeypatch.setenv(parallel.SWITCH, "1" if split else "0")
    graph = compose(_chain_text(CHANNELS, size), file="chain.sknd")
    return graph, compile_graph(graph, backend, opts, cache=False)


def _run(graph, program, data):
    return dict(zip(program.nnef_outputs, program.run(program_inputs(graph, program, data))))["y"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("size", [5, 8])
def test_a_big_graph_lowers_on_two_processes_to_the_program_one_process_makes(backend, size, two_cores,
                                                                              monkeypatch):
    graph, split = _compile(backend, size, monkeypatch=monkeypatch)
    assert two_cores == [2]
    _, alone = _compile(backend, size, monkeypatch=monkeypatch, split=False)
    assert two_cores == [2]  # the second compile lowered in one process
    assert split.sources == alone.sources
    assert [k.name for k in split.kernels] == [k.name for k in alone.kernels]
    assert [k.opts for k in split.kernels] == [k.opts for k in alone.kernels]
    for seed in (1, 2):
        data = _data(CHANNELS, size, seed)
        expected = _reference(data, CHANNELS)
        np.testing.assert_allclose(_run(graph, split, data).reshape(expected.shape), expected, rtol=2e-4,
                                   atol=2e-4)


def test_the_trace_of_a_split_lowering_is_made_when_first_read_and_is_the_one_lowering_records(
        two_cores, monkeypatch):
    _, split = _compile("c", monkeypatch=monkeypatch)
    assert two_cores == [2] and split.__dict__.get("_trace") is None and split.retrace is not None
    _, alone = _compile("c", monkeypatch=monkeypatch, split=False)
    assert alone.retrace is None and alone.trace is not None
    lazy, eager = split.trace, alone.trace
    assert split.trace is lazy  # made once
    assert [p.name for p in lazy.walk()] == [p.name for p in eager.walk()]
    assert [(s.pass_name, s.rule) for s in lazy.steps] == [(s.pass_name, s.rule) for s in eager.steps]
    assert lazy.passes[-1].name == "Render" and len(lazy.steps) > 1000
    assert two_cores == [2]  # the trace's lowering ran in one process, traced


def test_compile_with_trace_records_it_in_one_process(two_cores, monkeypatch):
    monkeypatch.setenv(parallel.SWITCH, "1")
    graph = compose(_chain_text(CHANNELS, 6), file="chain.sknd")
    program = graph.compile("c", "heuristic", progress=False, trace=True)  # as the explorer compiles
    assert two_cores == [] and program.retrace is None
    assert [p.name for p in program.trace.passes][-2:] == ["Register/Memory Plan", "Render"]


def test_a_cached_big_program_makes_its_trace_in_one_process(two_cores, monkeypatch, tmp_path):
    monkeypatch.setenv("UOPVIZ_CACHE", str(tmp_path))
    monkeypatch.delenv(program_cache.SWITCH, raising=False)  # the suite turns the cache off
    monkeypatch.setenv(parallel.SWITCH, "1")
    first = compose(_chain_text(CHANNELS, 6), file="chain.sknd").compile("c", "heuristic", progress=False)
    assert two_cores == [2]
    again = compose(_chain_text(CHANNELS, 6), file="chain.sknd").compile("c", "heuristic", progress=False)
    assert type(again).__name__ == "CachedProgram" and again.sources == first.sources
    assert [p.name for p in again.trace.walk()] == [p.name for p in first.trace.walk()]
    assert two_cores == [2]  # both traces lowered in one process, traced: no second split


def test_inside_an_open_trace_the_lowering_stays_in_one_process_and_records_into_it(two_cores, monkeypatch):
    with tracing() as outer:
        _, program = _compile("c", monkeypatch=monkeypatch)
    assert two_cores == [] and program.retrace is None
    assert any(p.name == "Linearize" and p.steps for p in outer.walk())
    assert [p.name for p in program.trace.passes][-4:] == ["Instruction Selection", "Linearize",
                                                           "Register/Memory Plan", "Render"]


def test_a_forked_process_that_dies_loses_nothing(two_cores, monkeypatch):
    parent = os.getpid()
    lower_unit = parallel._lower_unit

    def dies_in_the_child(lowering, unit, run_stage):
        if os.getpid() != parent:
            os._exit(9)  # as a crash would: no result file
        lower_unit(lowering, unit, run_stage)

    monkeypatch.setattr(parallel, "_lower_unit", dies_in_the_child)
    graph, split = _compile("c", monkeypatch=monkeypatch)
    assert two_cores == [2]
    monkeypatch.setattr(parallel, "_lower_unit", lower_unit)
    _, alone = _compile("c", monkeypatch=monkeypatch, split=False)
    assert split.sources == alone.sources
    data = _data(CHANNELS, 6, 3)
    expected = _reference(data, CHANNELS)
    result = _run(graph, split, data).reshape(expected.shape)
    np.testing.assert_allclose(result, expected, rtol=2e-4, atol=2e-4)


def test_units_a_child_failed_on_are_lowered_again_by_the_parent(two_cores, monkeypatch):
    parent = os.getpid()
    lower_unit = parallel._lower_unit
    child_units = []

    def fails_late_in_the_child(lowering, unit, run_stage):
        if os.getpid() != parent:
            child_units.append(unit)
            if len(child_units) > 3:  # three units sent back, then an error
                raise RuntimeError("a failure in the forked process")
        lower_unit(lowering, unit, run_stage)

    monkeypatch.setattr(parallel, "_lower_unit", fails_late_in_the_child)
    _, split = _compile("llvm" if "llvm" in BACKENDS else "c", monkeypatch=monkeypatch)
    monkeypatch.setattr(parallel, "_lower_unit", lower_unit)
    _, alone = _compile("llvm" if "llvm" in BACKENDS else "c", monkeypatch=monkeypatch, split=False)
    assert two_cores == [2] and split.sources == alone.sources


class _NoSemaphores:
    def Value(self, *arguments):  # noqa: N802 - multiprocessing's name
        raise OSError("no /dev/shm")


@pytest.mark.parametrize("missing", ["fork", "semaphore"])
def test_where_no_child_can_be_made_this_process_lowers_every_kernel(missing, two_cores, monkeypatch):
    if missing == "fork":
        def no_fork():
            raise OSError("Resource temporarily unavailable")

        monkeypatch.setattr(parallel.os, "fork", no_fork)
    else:
        monkeypatch.setattr(parallel.multiprocessing, "get_context", lambda method: _NoSemaphores())
    graph, split = _compile("c", monkeypatch=monkeypatch)
    monkeypatch.undo()
    _, alone = _compile("c", split=False, monkeypatch=monkeypatch)
    assert two_cores == [2] and split.sources == alone.sources
    data = _data(CHANNELS, 6, 4)
    expected = _reference(data, CHANNELS)
    np.testing.assert_allclose(_run(graph, split, data).reshape(expected.shape), expected, rtol=2e-4,
                               atol=2e-4)


def test_an_invalid_opt_raises_as_it_does_on_one_core(two_cores, monkeypatch):
    # a SWAP of an axis with itself: OptError for every kernel given it
    opts = {index: [Opt(OptOp.SWAP, 0, 0)] for index in range(20, 30)}
    with pytest.raises(OptError) as split_error:
        _compile("c", opts=opts, monkeypatch=monkeypatch)
    assert two_cores == [2]
    with pytest.raises(OptError) as alone_error:
        _compile("c", opts=opts, monkeypatch=monkeypatch, split=False)
    assert str(split_error.value) == str(alone_error.value)


def test_an_interrupt_in_the_parent_stops_the_forked_processes(two_cores, monkeypatch):
    forked = []
    fork = parallel._fork

    def recorded_fork(*arguments):
        forked.append(fork(*arguments))
        return forked[-1]

    parent = os.getpid()
    lower_unit = parallel._lower_unit

    def interrupted(lowering, unit, run_stage):
        if os.getpid() == parent:
            raise KeyboardInterrupt
        lower_unit(lowering, unit, run_stage)

    monkeypatch.setattr(parallel, "_fork", recorded_fork)
    monkeypatch.setattr(parallel, "_lower_unit", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _compile("c", monkeypatch=monkeypatch)
    assert len(forked) == 1
    pid, path = forked[0]
    with pytest.raises(ChildProcessError):  # killed and reaped
        os.waitpid(pid, os.WNOHANG)
    assert not os.path.exists(path)


@pytest.mark.parametrize(
    ("backend", "opts", "kernels", "switch", "expected"),
    [
        ("c", "heuristic", 100, "1", 2),
        ("llvm", None, parallel.MINIMUM_UNITS, "1", 2),
        ("c", "heuristic", parallel.MINIMUM_UNITS - 1, "1", 1),  # too few to pay for a fork
        ("c", "heuristic", 100, "0", 1),  # turned off
        ("c", "beam", 100, "1", 1),  # BEAM times candidates on the cores itself
        ("c", {3: "beam"}, 100, "1", 1),
        ("opencl", "heuristic", 100, "1", 1),  # a device runtime is not safe in a fork
        ("cuda", "heuristic", 100, "1", 1),
    ],
)
def test_process_count(backend, opts, kernels, switch, expected, two_cores, monkeypatch):
    monkeypatch.setenv(parallel.SWITCH, switch)
    assert parallel.process_count(backend, opts, kernels) == expected
    with tracing():
        assert parallel.process_count(backend, opts, kernels) == 1


def test_the_process_count_follows_the_cores(monkeypatch):
    cpu = parallel.host_cpu()
    monkeypatch.delenv(parallel.SWITCH, raising=False)
    for cores, kernels, expected in [(1, 500, 1), (16, 500, 16), (16, 48, 4), (8, 30, 2)]:
        monkeypatch.setattr(parallel, "host_cpu", lambda cores=cores: dataclasses.replace(cpu, cores=cores))
        assert parallel.process_count("c", "heuristic", kernels) == expected


@pytest.mark.parametrize(
    ("opts", "expected"),
    [("beam", True), ("heuristic", False), (None, False), ({0: "beam"}, True),
     ({"k": [Opt(OptOp.NOLOCALS)]}, False), (["heuristic", "beam"], True), ([Opt(OptOp.NOLOCALS)], False)],
)
def test_searches(opts, expected):
    assert parallel.searches(opts) is expected
