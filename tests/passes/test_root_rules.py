"""The rules that see a whole graph and fire at its root (uopviz.core.rewrite.rewrite_root), alone and
from text (tests/stage_text.py): Callify's "program becomes one FUNCTION", Optimize's "output loops
become GLOBAL" and Render's "LINEAR becomes PROGRAM"; and the trace of a compile, which names each of
them and the line its rule table writes it on, as it does every other rule."""

from __future__ import annotations

import linecache
from pathlib import Path

import numpy as np
from stage_text import check_stage

import uopviz as uv
from uopviz import Tensor
from uopviz.core.ops import Ops
from uopviz.core.rewrite import rewrite_root, tracing
from uopviz.core.uop_text import parse_graph, print_graph
from uopviz.passes.callify import InputContext, function_rules
from uopviz.passes.optops.kernel import Kernel, parallel_output_rules
from uopviz.passes.render import RenderContext, program_uop, render_rules, render_source

REPO = Path(__file__).resolve().parents[2]

# Callify's graph once its data leaf is a PARAM: y = x * 2 for a 2x3 x
PARAMETRIZED = """
%0 = STACK 6 [dtypes.index]  : index (1,)
%1 = PARAM %0 [ParamArg(slot=0, dtype=dtypes.float32, device='CPU', addrspace=None)]  : float32 (6,)
%2 = STACK 2, 3 [dtypes.index]  : index (2,)
%3 = RESHAPE %1, %2  : float32 (2, 3)
%4 = STACK 1, 1 [dtypes.index]  : index (2,)
%5 = RESHAPE 2.0, %4  : float32 (1, 1)
%6 = EXPAND %5, %2  : float32 (2, 3)
%7 = MUL %3, %6  : float32 (2, 3)
%8 = TUPLE %7  : void
"""

INPUT = "%0 = BUFFER [BufferArg(number=0, size=6, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (6,)"  # noqa: E501

# the same body and the buffer its PARAM stands for, as one FUNCTION
FUNCTION = PARAMETRIZED + """%9 = BUFFER [BufferArg(number=0, size=6, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (6,)
%10 = FUNCTION %8, %9  : void
"""  # noqa: E501


def test_make_function_closes_the_outputs_over_their_inputs() -> None:
    data = parse_graph(INPUT)
    context = InputContext(inputs=[data])
    make_function = lambda body: rewrite_root(body, function_rules, ctx=context)  # noqa: E731
    function = check_stage(PARAMETRIZED, make_function, FUNCTION)
    assert function.op is Ops.FUNCTION and function.src[1] is data


# a kernel y[i] = sum of x[3i .. 3i+2] as Rangeify makes it: its output loop a LOOP range
KERNEL = """
%0 = STACK 2 [dtypes.index]  : index (1,)
%1 = PARAM %0 [ParamArg(slot=0, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (2,)
%2 = RANGE 2 [(0, AxisType.LOOP)]  : index
%3 = INDEX %1, %2  : float32
%4 = STACK 6 [dtypes.index]  : index (1,)
%5 = PARAM %4 [ParamArg(slot=1, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (6,)
%6 = MUL %2, 3  : index
%7 = RANGE 3 [(1, AxisType.REDUCE)]  : index
%8 = ADD %6, %7  : index
%9 = INDEX %5, %8  : float32
%10 = LOAD %9  : float32
%11 = REDUCE %10, %7 [(Ops.ADD, ())]  : float32
%12 = STORE %3, %11  : void
%13 = SINK %12  : void
"""  # noqa: E501

# the output loop split over the threads: GLOBAL; the reduce loop stays
PARALLEL = KERNEL.replace("RANGE 2 [(0, AxisType.LOOP)]", "RANGE 2 [(0, AxisType.GLOBAL)]")


def test_output_loops_become_global_and_reduce_loops_stay() -> None:
    assert PARALLEL != KERNEL
    check_stage(KERNEL, lambda sink: rewrite_root(sink, parallel_output_rules), PARALLEL)
    # a kernel with no output loop left is not rewritten (the rule declines: no step, no loop)
    parallel = parse_graph(PARALLEL)
    with tracing() as trace:
        assert rewrite_root(parallel, parallel_output_rules, name="again") is parallel
    assert trace.find("again").steps == []


def test_with_parallel_outputs_is_the_rule_on_parallel_hardware_only() -> None:
    kernel = parse_graph(KERNEL)
    assert Kernel(kernel, "cuda").with_parallel_outputs().ast is parse_graph(PARALLEL)
    parallel = Kernel(parse_graph(PARALLEL), "c")
    assert parallel.with_parallel_outputs() is parallel  # no output loop left: the kernel as it is


# the LINEAR program of y = x + 1 for three elements
LINEAR = """
%0 = STACK 3 [dtypes.index]  : index (1,)
%1 = PARAM %0 [ParamArg(slot=0, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (3,)
%2 = PARAM %0 [ParamArg(slot=1, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (3,)
%3 = RANGE 3 [(0, AxisType.GLOBAL)]  : index
%4 = INDEX %1, %3  : float32
%5 = INDEX %2, %3  : float32
%6 = LOAD %5  : float32
%7 = ADD %6, 1.0  : float32
%8 = STORE %4, %7  : void
%9 = END %8, %3  : void
%10 = LINEAR %1, 3, %2, 1.0, %3, %4, %5, %6, %7, %8, %9 ['E_g3']  : void
"""  # noqa: E501


def test_linear_becomes_program_with_the_backends_source() -> None:
    linear = parse_graph(LINEAR)
    context = RenderContext("python")
    program = rewrite_root(linear, render_rules, ctx=context)
    source = render_source(linear, "python")
    assert source.startswith('# uopviz-meta {"name":"E_g3"') and "alu(Ops.ADD" in source
    assert program is program_uop(linear, source)
    assert context.sources == {linear: source}
    # the LINEAR is kept whole inside: its text is the PROGRAM's first lines
    printed = print_graph(program).splitlines()
    assert printed[: len(LINEAR.strip().splitlines())] == LINEAR.strip().splitlines()
    assert printed[-1] == "%12 = PROGRAM %10, %11  : void"
    # the PROGRAM holds the LINEAR it matched, which the rule would match again in a walk: at the
    # root alone it fires once
    with tracing() as trace:
        rewrite_root(linear, render_rules, ctx=context, name="render once")
    (step,) = trace.find("render once").steps
    assert step.before is linear and step.after is program and step.graph is program


def _written_at(step) -> str:
    path, _, line = step.location.rpartition(":")
    return linecache.getline(str(REPO / path), int(line)).strip()


def test_the_trace_of_a_tensor_program_names_the_root_rules_and_their_lines() -> None:
    x = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    program = uv.compile((x * 2).sum(1), backend="cuda", build=False)
    steps = {}
    for step in program.trace.steps:
        steps.setdefault(step.rule, []).append(step)
    expected = {
        "program becomes one FUNCTION": ("uopviz/passes/callify.py", function_rules, Ops.TUPLE, Ops.FUNCTION),
        "output loops become GLOBAL": ("uopviz/passes/optops/kernel.py", parallel_output_rules, Ops.SINK,
                                       Ops.SINK),
        "LINEAR becomes PROGRAM": ("uopviz/passes/render.py", render_rules, Ops.LINEAR, Ops.PROGRAM),
    }
    for name, (module, table, before, after) in expected.items():
        (rule,) = [rule for rule in table.rules if rule.name == name]
        (step,) = steps[name]
        assert step.location == rule.location and step.location.startswith(module + ":")
        assert f'"{name}"' in _written_at(step)  # the line is the rule's entry in its table
        assert (step.before.op, step.after.op) == (before, after)
        assert step.after in set(step.graph.toposort())  # the whole graph after it holds its result
    # the stage shows the whole program after each: Callify's FUNCTION, the program with its PROGRAM
    for name, stage in (("program becomes one FUNCTION", "Callify"), ("LINEAR becomes PROGRAM", "Render")):
        record = program.trace.find(stage)
        assert record.graph_after(steps[name][0]) is record.output and record.output.op is Ops.FUNCTION
    (render,) = [p for p in program.trace.find("Render").passes if p.name.startswith("render ")]
    assert render.matcher is render_rules and render.name == f"render {program.items[0].body.src[0].arg}"
