"""The trace of a compile: one top-level pass per stage, named and ordered as the spec's Lowering
Pipeline table, and every step naming its rule and the line where the rule is written."""

from __future__ import annotations

import gc
import linecache
import weakref
from pathlib import Path

import numpy as np
import pytest

import uopviz as uv
from uopviz import Tensor
from uopviz.backends import available
from uopviz.core.tensor import buffer_data
from uopviz.passes.optops.opts import Opt, OptOp
from uopviz.passes.pipeline import STAGES

REPO = Path(__file__).resolve().parents[2]
SPEC_STAGES = ["Callify", "Rangeify", "Optimize", "Expand", "Instruction Selection", "Linearize",
               "Register/Memory Plan", "Render"]


def _programs() -> dict[str, uv.Program]:
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((8, 4)).astype(np.float32)

    @uv.function
    def scale(a):
        return a * 2

    padded = Tensor(x).pad(((1, 1), (0, 2))).exp2().softmax()
    return {
        "softmax of a pad": uv.compile(padded),
        "matmul with opts": uv.compile(Tensor(x) @ Tensor(w), opts=[
            Opt(OptOp.SPLIT, 1, (4, uv.AxisType.UPCAST, False)),
            Opt(OptOp.SPLIT, 1, (4, uv.AxisType.UNROLL, False)), Opt(OptOp.PADTO, 0, 3)]),
        "heuristic conv and @function": uv.compile(
            [scale(Tensor(rng.standard_normal((1, 2, 6, 6)).astype(np.float32))).conv2d(
                Tensor(rng.standard_normal((3, 2, 3, 3)).astype(np.float32)))], opts="heuristic"),
    }


PROGRAMS = _programs()


def test_stages_are_the_spec_table_in_order() -> None:
    assert list(STAGES) == SPEC_STAGES
    for program in PROGRAMS.values():
        assert [p.name for p in program.trace.passes] == SPEC_STAGES


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_every_step_names_its_rule_and_its_line(name: str) -> None:
    trace = PROGRAMS[name].trace
    steps = trace.steps
    assert steps, "the lowering made steps"
    for step in steps:
        assert step.rule, step
        path, _, line = step.location.rpartition(":")
        source = linecache.getline(str(REPO / path), int(line))
        assert source.strip(), f"{step.location} is not a line of the repository ({step.rule})"
        rule_word = step.rule.split(":")[0].split(" ")[0]
        if step.location.startswith("uopviz/passes/") and "isel" not in step.location:
            # the pipeline's own rules: the line shows the rule's name
            assert rule_word in source, f"{step.location}: {source.strip()!r} does not show {step.rule!r}"


def test_each_stage_records_its_work() -> None:
    program = PROGRAMS["matmul with opts"]
    rules = {p.name: {s.rule.split(":")[0] for s in p.steps} for p in program.trace.passes}
    assert {"input_to_param"} <= rules["Callify"]
    assert {"realize_output", "bufferize", "kernelize", "index_through_reshape", "index_through_reduce",
            "load_buffer"} <= rules["Rangeify"]
    assert {"output loops become GLOBAL", "split_axis", "pad_axis"} <= rules["Optimize"]
    assert {"expand range", "expand reduce", "expand memory"} <= rules["Expand"]
    assert "lower_reduce" in rules["Instruction Selection"]
    assert "kernel becomes LINEAR" in rules["Linearize"]
    assert "LINEAR becomes PROGRAM" in rules["Render"]


def test_step_graphs_replay() -> None:
    program = PROGRAMS["softmax of a pad"]
    rangeify = program.trace.passes[1]
    last = rangeify.steps[-1]
    assert last.graph is not None
    kernels = [u for u in rangeify.output.toposort() if u.op is uv.Ops.CALL]
    assert len(kernels) == len(program.kernels)


def test_tracing_inside_a_user_trace() -> None:
    x = Tensor(np.ones((2, 2), np.float32))
    with uv.tracing() as outer:
        program = uv.compile(x + 1)
    assert [p.name for p in program.trace.passes] == SPEC_STAGES
    assert [p.name for p in outer.passes] == SPEC_STAGES


@pytest.mark.parametrize("backend", available())
def test_trace_on_every_backend(backend: str) -> None:
    program = uv.compile(Tensor(np.ones((4, 4), np.float32)).sum(1), backend=backend)
    assert [p.name for p in program.trace.passes] == SPEC_STAGES
    render = program.trace.passes[-1]
    assert render.steps and render.steps[0].after.op is uv.Ops.PROGRAM


@pytest.fixture
def no_cyclic_collection():
    """The cyclic garbage collector off: what is freed is freed by reference counting."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.parametrize("backend", available())
def test_a_dropped_program_frees_its_graphs_and_input_data_at_once(
    backend: str, no_cyclic_collection
) -> None:
    # a trace, a kernel or a backend object in a reference cycle keeps every graph of the compile,
    # and the Tensors' input arrays those graphs hold, until a full collection: in a notebook that
    # recompiles big inputs, memory grew by the input's size per compile
    rng = np.random.default_rng(3)
    for shape in ((8, 8), (33, 17)):
        data = rng.standard_normal(shape).astype(np.float32)
        held_before = len(buffer_data)
        x = Tensor(data)
        outputs = [(x * 2 + 1).exp(), (x @ x.transpose()).sum(1)]
        program = uv.compile(outputs, backend=backend, opts="heuristic")
        exp_out, gemm_out = program.run()
        np.testing.assert_allclose(exp_out, np.exp(data * 2 + 1), rtol=1e-5)
        np.testing.assert_allclose(gemm_out, (data @ data.T).sum(1), rtol=1e-4, atol=1e-4)
        assert any(step.graph is not None for step in program.trace.steps)  # frames built and cached
        assert len(buffer_data) > held_before
        stages = [weakref.ref(stage) for stage in program.trace.passes]
        del x, outputs, program
        assert len(buffer_data) == held_before
        assert all(stage() is None for stage in stages)


def test_a_step_kept_alone_still_shows_its_whole_graph() -> None:
    # steps do not point back at their pass (that would be a cycle), yet one kept after its
    # Program and Trace are gone still replays the graph after it
    rng = np.random.default_rng(4)
    x = Tensor(rng.standard_normal((6, 5)).astype(np.float32))

    def shapes_of_graphs(steps: list) -> list[list[tuple]]:
        # each graph as its ops and shapes in order (buffer numbers differ between compiles)
        return [[(u.op, u.shape) for u in step.graph.toposort()] for step in steps]

    program = uv.compile(x.softmax())
    expected = shapes_of_graphs(program.trace.find("Rangeify").steps)
    kept = uv.compile(x.softmax()).trace.find("Rangeify").steps  # its Program is dropped at once
    assert len(kept) == len(expected) > 3
    assert shapes_of_graphs(kept) == expected
    assert len({len(graph) for graph in expected}) > 1  # the steps' graphs are not all alike


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_callify_starts_from_the_tensor_graph_and_each_step_shows_the_whole_program(name: str) -> None:
    # Callify's input was not recorded (the program had no graph yet): its frame 0 fell back to the
    # finished FUNCTION, and its first step showed a graph with no FUNCTION, fewer nodes than frame 0
    program = PROGRAMS[name]
    callify = program.trace.find("Callify")
    assert callify.input is not None and callify.input.op is uv.Ops.TUPLE
    assert tuple(callify.input.src) == tuple(program.outputs)
    graphs = [callify.input] + [callify.graph_after(step) for step in callify.steps]
    # a @function's PARAMs are inlined first; then the data leaves become PARAMs one at a time
    parametrized = [step.rule == "input_to_param" for step in callify.steps]
    first = parametrized.index(True)
    params = [sum(u.op is uv.Ops.PARAM for u in graph.toposort()) for graph in graphs[first:]]
    assert params == list(range(len(params) - 1)) + [len(program.inputs)] and len(program.inputs) > 0
    assert graphs[-1] is callify.output and callify.output.op is uv.Ops.FUNCTION
    assert all(graph.op is uv.Ops.TUPLE for graph in graphs[:-1])  # the stage's graph, not a fragment


def _rule_steps(record) -> dict[str, list]:
    """A pass's steps by rule name."""
    found: dict[str, list] = {}
    for step in record.steps:
        found.setdefault(step.rule, []).append(step)
    return found


def _written_in(step, module: str) -> str:
    """The line of ``module`` a step says its rule is written on (asserting it is that module)."""
    path, _, line = step.location.rpartition(":")
    assert path == module, (step.rule, step.location)
    return linecache.getline(str(REPO / path), int(line)).strip()


def test_expand_names_its_rules_from_its_table() -> None:
    from uopviz.passes.expand import expansion_rules

    table = {rule.name: rule.location for rule in expansion_rules.rules}
    expand = PROGRAMS["matmul with opts"].trace.find("Expand")
    steps = _rule_steps(expand)
    assert {"expand range", "expand memory", "expand reduce", "expand elementwise"} <= set(steps)
    for name, fired in steps.items():
        if name in table:  # Expand's own rules (the index simplifier after it has its own)
            assert {step.location for step in fired} == {table[name]}
            assert f'"{name}"' in _written_in(fired[0], "uopviz/passes/expand.py")
    assert set(steps) - set(table) <= {rule.name for m in expand.matchers() for rule in m.rules}
    assert expansion_rules in expand.matchers()


def test_linearize_and_the_plans_name_their_rules() -> None:
    x, y = Tensor(np.ones((4, 8), np.float32)), Tensor(np.ones((4, 6), np.float32))
    # an intermediate buffer (the contiguous) and two accumulators one after the other in a kernel
    program = uv.compile([(x * 2).contiguous().sum(1) + 1, x.sum(1) + y.max(1)])
    linearized = _rule_steps(program.trace.find("Linearize"))["kernel becomes LINEAR"]
    assert set(_rule_steps(program.trace.find("Linearize"))) == {"kernel becomes LINEAR"}
    assert len(linearized) == len({item.body for item in program.items})
    assert "kernel becomes LINEAR" in _written_in(linearized[0], "uopviz/passes/linearize.py")
    assert all(step.after.op is uv.Ops.LINEAR and step.before.op is uv.Ops.SINK for step in linearized)
    plan = _rule_steps(program.trace.find("Register/Memory Plan"))
    assert {"share register", "declare each register once", "share memory"} <= set(plan)
    for name in ("share register", "declare each register once", "share memory"):
        assert f'"{name}"' in _written_in(plan[name][0], "uopviz/passes/memory_plan.py")
    declared = plan["declare each register once"][0]
    assert len(declared.before.src) == len(declared.after.src) + 1  # the shared register's second declaration


def test_gpu_backends_make_thread_indices_with_a_rule_of_their_own() -> None:
    from uopviz.backends.gpu_rules import gpu_linearize_rules

    x = Tensor(np.ones((64, 64), np.float32))
    opts = [Opt(OptOp.SPLIT, 0, (8, uv.AxisType.LOCAL, False))]
    for backend in ("cuda", "opencl"):
        program = uv.compile((x * 2).sum(1), backend=backend, opts=opts, build=False)
        linearize = program.trace.find("Linearize")
        own = [p for p in linearize.passes if p.name == f"{backend} rules"]
        assert len(own) == len(program.items) == 1 and own[0].matcher is gpu_linearize_rules
        (step,) = own[0].steps
        assert step.rule == "ranges become SPECIAL thread indices"
        assert "ranges become SPECIAL" in _written_in(step, "uopviz/backends/gpu_rules.py")
        specials = sorted(u.arg for u in step.after.toposort() if u.op is uv.Ops.SPECIAL)
        assert specials == ["gidx0", "lidx0"], backend
        assert not any(u.op is uv.Ops.RANGE and u.arg[1] in (uv.AxisType.GLOBAL, uv.AxisType.LOCAL)
                       for u in step.after.toposort())
        # the backend's rules ran before the stage's own: Linearize's rule linearized their output
        (linear_pass,) = [p for p in linearize.passes if p.name.startswith("linearize ")]
        assert linear_pass.input is own[0].output
    c_program = uv.compile((x * 2).sum(1), backend="c", build=False)
    assert not any(" rules " in p.name for p in c_program.trace.walk())
