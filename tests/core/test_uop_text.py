"""The text form of UOp graphs that reads back (uopviz.core.uop_text): every graph the pipeline makes,
for every kind of program and backend, prints and parses back to the same hash-consed UOp; text
written by hand reads as the graph the API builds; bad text is refused naming the line and why."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import uopviz as uv
from uopviz.core.dtype import AddrSpace, dtypes
from uopviz.core.ops import AxisType, Ops
from uopviz.core.uop import UOp
from uopviz.core.uop_text import UOpTextError, arg_text, parse_graph, print_graph, read_arg
from uopviz.core.uop_types import ParamArg

RNG = np.random.default_rng(11)


def _programs() -> dict[str, list[uv.Tensor]]:
    a = uv.Tensor(RNG.standard_normal((16, 32)).astype(np.float32))
    h = uv.Tensor(RNG.standard_normal((32, 32)).astype(np.float16))
    x = uv.Tensor(RNG.standard_normal((1, 4, 8, 8)).astype(np.float32))
    w = uv.Tensor(RNG.standard_normal((4, 4, 3, 3)).astype(np.float32))
    i = uv.Tensor(RNG.integers(-50, 50, (7, 5)).astype(np.int32))
    return {
        "matmul": [a @ a.T],
        "softmax": [a.softmax()],
        "conv2d": [x.conv2d(w, padding=1).relu()],
        "float16 matmul": [h @ h],
        "scans and arg-reductions": [a.cumsum(axis=1), a.argmax(axis=1)],
        "integers, bitcast, where": [(i // 3 % 4).where(i, -i), i.bitcast("float32")],
        "nan, inf and -0.0 constants": [(a * math.nan).maximum(-math.inf) + (-0.0), a.clip(-math.inf, 0.5)],
        "zero-size": [uv.Tensor(np.zeros((0, 4), np.float32)).sum(axis=0)],
    }


def _every_graph(program: uv.Program) -> list[UOp]:
    graphs = {program.graph: None}
    for step in program.trace.steps:
        for graph in (step.before, step.after, step.graph):
            if graph is not None:
                graphs[graph] = None
    return list(graphs)


@pytest.mark.parametrize("backend", ["python", "c", "cuda"])
@pytest.mark.parametrize("name", list(_programs()))
def test_every_graph_of_the_lowering_prints_and_parses_back_to_the_same_uop(name: str, backend: str) -> None:
    # the trace's graphs: the Tensor graph, every stage's graph and every rewrite's before/after
    program = uv.compile(_programs()[name], backend=backend, opts="heuristic", build=False)
    graphs = _every_graph(program)
    assert len(graphs) > 10
    for graph in graphs:
        text = print_graph(graph)
        assert parse_graph(text) is graph, text[:2000]


def test_a_function_and_several_devices_print_and_parse_back() -> None:
    @uv.function
    def scaled_sum(p, q):
        return (p * 2 + q).sum(axis=0)

    a = RNG.standard_normal((8, 6)).astype(np.float32)
    sharded = uv.Tensor(a).shard(("CPU:0", "CPU:1"), axis=0)
    for outputs in ([scaled_sum(uv.Tensor(a), uv.Tensor(a))], [(sharded * 3).sum(axis=1)]):
        program = uv.compile(outputs, backend="python", opts="heuristic", build=False)
        for graph in _every_graph(program):
            assert parse_graph(print_graph(graph)) is graph


def test_an_nnef_graphs_kernels_print_and_parse_back() -> None:
    text = """
    import math; import linalg;
    graph G {
        @input { x: real[4, 6]; w: real[6, 3]; }
        @output { y: real[4, 3]; }
        @compose { z = linalg.matmul(x, w); y = math.max(z, 0.0); }
    }
    """
    graph = uv.nnef.loads(text, file="text-form.sknd")
    program = graph.compile(backend="c", opts="heuristic", build=False, progress=False)
    kernels = [kernel.ast for kernel in graph.lower()] + [item.body for item in program.items]
    for kernel in kernels:
        assert parse_graph(print_graph(kernel)) is kernel


HAND_WRITTEN = """
# y[i] = x[i] * 0.5 (float16) for i < 4
%0 = STACK 4 [dtypes.index]  : index (1,)
%1 = PARAM %0 [ParamArg(slot=0, dtype=dtypes.float16, device='CPU', addrspace=AddrSpace.GLOBAL)]
%2 = PARAM %0 [ParamArg(slot=1, dtype=dtypes.float16, device='CPU', addrspace=AddrSpace.GLOBAL)]
%3 = RANGE 4 [(0, AxisType.LOOP)]  : index
%4 = INDEX %2, %3
%5 = LOAD %4  : float16
%6 = MUL %5, 0.5:float16  : float16
%7 = INDEX %1, %3
%8 = STORE %7, %6  : void
%9 = END %8, %3
%10 = SINK %9
"""


def test_hand_written_text_reads_as_the_graph_the_api_builds() -> None:
    y, x = (UOp.param(slot, (4,), dtypes.float16, "CPU", AddrSpace.GLOBAL) for slot in (0, 1))
    i = UOp(Ops.RANGE, (UOp.const(dtypes.index, 4),), (0, AxisType.LOOP))
    value = UOp(Ops.LOAD, (UOp(Ops.INDEX, (x, i)),)) * UOp.const(dtypes.float16, 0.5)
    store = UOp(Ops.STORE, (UOp(Ops.INDEX, (y, i)), value))
    expected = UOp(Ops.SINK, (UOp(Ops.END, (store, i)),))
    assert parse_graph(HAND_WRITTEN) is expected
    # and prints back as what was written, the comment aside, with every line's type
    printed = print_graph(expected)
    assert re.search(r"= MUL %\d+, 0\.5:float16  : float16\n", printed)
    assert parse_graph(printed) is expected


def test_the_modules_own_example_reads() -> None:
    import uopviz.core.uop_text as module

    example = module.__doc__.split("::", 1)[1].split("\n\n")[1]
    store = parse_graph(example)
    assert store.op is Ops.STORE and store.src[1].arg == (1.5, dtypes.float16)
    assert store.src[0].src[1].arg == (0, AxisType.GLOBAL)


@pytest.mark.parametrize(
    "arg",
    [
        None, 3, -2.5, math.inf, -math.inf, "a 'quoted' [bracket] %1 string", b"\x00\xff",
        (1, (2.0, dtypes.int8), [AxisType.GROUP_REDUCE, Ops.MAX]), (7,), (),
        dtypes.bfloat16.vec(8), dtypes.float32.vec(4).ptr(16, AddrSpace.LOCAL),
        ParamArg(3, dtypes.uint8, ("CPU:0", "CPU:1"), AddrSpace.REG),
    ],
)
def test_args_read_back_equal(arg) -> None:
    assert read_arg(arg_text(arg)) == arg
    assert type(read_arg(arg_text(arg))) is type(arg)


def test_nan_and_negative_zero_constants_keep_their_meaning() -> None:
    for value in (math.nan, -0.0, 0.0):
        other = UOp.const(dtypes.float64, 1.0).cast(dtypes.float32)
        graph = UOp(Ops.SINK, (UOp.const(dtypes.float32, value) + other,))
        assert parse_graph(print_graph(graph)) is graph


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("%0 = FROB 1", "line 1: 'FROB' is not an op of the dialect"),
        ("%0 = ADD %1, 2", "line 1: %1 is used before a line defines it"),
        ("%0 = ADD 1, 2\n%0 = ADD 1, 3", "line 2: %0 is defined twice"),
        ("%0 = ADD 1, 2  : float32",
         "line 1: the line says its type is 'float32', but ADD of these sources and arg is 'index'"),
        ("%0 = CAST 1 [dtypes.float33]", "unknown attribute 'float33'"),
        ("%0 = CAST 1 [__import__('os').system('true')]", "unknown name '__import__'"),
        ("%0 = CAST 1 [dtypes.float32.__class__]", "unknown attribute '__class__'"),
        ("%0 = CAST 1 [dtypes.float32.scalar()]", "unknown attribute 'scalar'"),
        ("%0 = CAST 1 [(lambda: 0)()]", "an arg cannot hold a Lambda expression"),
        ("%0 = CAST 1 [dtypes.float32", "line 1: the arg's"),
        ("%0 = CAST 1 [open]", "unknown name 'open'"),
        ("%0 = ADD 1, 2.5:float99", "'float99' is not a dtype"),
        ("%0 = ADD 1, x", "'x' is neither a name (%N) nor a constant"),
        ("ADD 1, 2", "expected '%N = OP ...'"),
        ("# only a comment", "the text holds no UOp line"),
        ("%0 = RANGE 4 [(0, AxisType.SIDEWAYS)]", "unknown attribute 'SIDEWAYS'"),
    ],
)
def test_bad_text_is_refused_naming_the_line_and_why(text: str, message: str) -> None:
    with pytest.raises(UOpTextError) as caught:
        parse_graph(text)
    assert message in str(caught.value)
    assert isinstance(caught.value, uv.UopvizError) and isinstance(caught.value, ValueError)


def test_an_arg_of_a_type_nobody_registered_is_refused_when_printed() -> None:
    class Opaque:
        pass

    with pytest.raises(UOpTextError, match="cannot write an arg of type Opaque"):
        print_graph(UOp(Ops.SINK, (), Opaque()))


def test_buffers_read_from_text_keep_their_numbers_from_fresh_buffers() -> None:
    # a graph printed by another process names buffers by its numbers; one made after the parse
    # must not take them (same size and dtype and number would be one hash-consed BUFFER)
    taken = 10**7 + int(RNG.integers(1000))
    text = f"%0 = BUFFER [BufferArg(number={taken}, size=4, dtype=dtypes.float32, device='CPU')]"
    parsed = parse_graph(text)
    fresh = UOp.buffer(4, dtypes.float32)
    assert fresh is not parsed and fresh.arg.number > taken
