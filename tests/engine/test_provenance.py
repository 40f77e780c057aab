"""Provenance end to end: a line of generated source → its instruction → the rewrite step that
created it → the Tensor method or NNEF operation it descends from (uopviz/engine/provenance.py)."""

from __future__ import annotations

import numpy as np
import pytest

import uopviz as uv
from uopviz.backends import get
from uopviz.core.ops import Ops
from uopviz.engine.provenance import Lineage, kernel_provenance, lineage_of
from uopviz.nnef import loads

RNG = np.random.default_rng(7)


def conv_relu_softmax():
    """The student's program of issue 24, with the line that builds it (its origins' location)."""
    x = uv.Tensor(RNG.random((1, 3, 8, 8), dtype=np.float32))
    w = uv.Tensor(RNG.random((4, 3, 3, 3), dtype=np.float32))
    line = conv_relu_softmax.__code__.co_firstlineno + 5  # the return line below
    return x.conv2d(w).relu().reshape(1, -1).softmax(axis=1), f"{__file__}:{line}"


@pytest.fixture(scope="module")
def c_program():
    y, where = conv_relu_softmax()
    return uv.compile(y, backend="c", opts="heuristic", build=False), where


def function_body(source: str) -> list[int]:
    """The 1-based numbers of a C kernel's body lines: after the signature's line, before its
    closing brace."""
    lines = source.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("void ") and line.endswith("{"))
    end = max(i for i, line in enumerate(lines) if line == "}")
    return [i + 1 for i in range(start + 1, end)]


def step_of(trace, creator):
    """The RewriteStep a creator names, found the way the player finds it."""
    return list(trace.walk())[creator.pass_index].steps[creator.step - 1]


def test_every_c_line_maps_to_a_created_uop_and_a_tensor_method(c_program):
    program, where = c_program
    methods = set()
    for index, item in enumerate(program.items):
        provenance = kernel_provenance(program, index)
        assert provenance.source == item.source and provenance.backend == "c"
        mapped = {entry.line for entry in provenance.lines}
        assert set(function_body(item.source)) <= mapped, "a body line holds no instruction"
        linear = item.body.src[0]
        for entry in provenance.lines:
            assert entry.uop is linear.src[entry.position]
            assert entry.text == item.source.split("\n")[entry.line - 1]
            assert entry.creator is not None and entry.creator.kind in ("step", "pass")
            if entry.creator.kind == "step":
                step = step_of(program.trace, entry.creator)
                assert step.rule == entry.creator.rule and step.location == entry.creator.location
                # the node is in what the step built
                assert any(node is entry.uop for node in step.after.toposort())
            else:
                assert entry.creator.pass_name and entry.creator.step == 0
            assert entry.origin is not None and entry.origin.kind == "tensor"
            methods.add(entry.origin.name)
            assert entry.line in provenance.lines_of(entry.uop)  # and the reverse question
    assert {"conv2d", "relu", "softmax"} <= methods


def test_origins_name_the_users_line(c_program):
    program, where = c_program
    lines = [entry for i, _ in enumerate(program.items) for entry in kernel_provenance(program, i).lines]
    softmax = [entry for entry in lines if entry.origin.name == "softmax"]
    assert softmax and {entry.origin.location for entry in softmax} == {where}
    assert softmax[0].origin.describe() == f"Tensor.softmax at {where}"


def test_the_creating_step_of_a_mulacc_is_the_rule_that_fuses_it(c_program):
    program, _ = c_program
    lines = [entry for entry in kernel_provenance(program, 0).lines if entry.uop.op is Ops.MULACC]
    assert lines
    for entry in lines:
        assert entry.creator.kind == "step" and "MULACC" in entry.creator.rule
        assert entry.creator.location.startswith("uopviz/passes/isel.py:")
        assert "MULACC" in entry.describe() and entry.creator.describe().startswith("rule ")


@pytest.mark.parametrize("backend", ["cuda", "opencl", "llvm", "python"])
def test_other_backends_map_their_sources_too(backend):
    y, _ = conv_relu_softmax()
    build = backend == "python"
    program = uv.compile(y, backend=backend, opts="heuristic", build=build)
    for index, item in enumerate(program.items):
        provenance = kernel_provenance(program, index)
        text, source_map = get(backend).render_mapped(item.body.src[0])
        assert text == item.source  # the mapped render writes the very same text
        assert provenance.lines and len(provenance.lines) == len(source_map.lines)
        assert all(entry.creator is not None and entry.origin is not None for entry in provenance.lines)
        ops = {entry.uop.op for entry in provenance.lines}
        assert Ops.STORE in ops and (Ops.RANGE in ops or Ops.SPECIAL in ops or backend == "python")


def test_a_renderer_whose_text_changed_maps_no_lines(c_program):
    from uopviz.engine.provenance import source_provenance

    program, _ = c_program
    item = program.items[0]
    edited = item.source + "// edited"
    provenance = source_provenance(lineage_of(program.trace), item.body.src[0], edited, "c")
    assert provenance.lines == () and "not mapped" in provenance.note


def test_kernels_by_name_and_bad_names(c_program):
    program, _ = c_program
    name = str(program.items[-1].kernel.name)
    assert kernel_provenance(program, name).kernel == str(program.items[-1].body.src[0].arg)
    with pytest.raises(KeyError, match="no kernel named"):
        kernel_provenance(program, "nope")
    with pytest.raises(IndexError):
        kernel_provenance(program, len(program.items))


def test_the_lineage_is_made_once_per_trace(c_program):
    program, _ = c_program
    assert lineage_of(program.trace) is lineage_of(program.trace)
    assert isinstance(lineage_of(program.trace), Lineage)


NNEF_TEXT = """import nn;
graph G {
  @input { x: real[2, 3]; }
  @output { y: real[2, 4]; }
  @variable { w: real[4, 3]; }
  @compose {
    h = nn.linear(x, w);
    y = nn.relu(h);
  }
}"""


def test_an_nnef_graphs_kernels_name_its_operations():
    graph = loads(NNEF_TEXT, variables={"w": RNG.random((4, 3), dtype=np.float32)}, file="tiny.sknd")
    program = graph.compile("c", build=False, progress=False)
    operations = set()
    for index in range(len(program.items)):
        provenance = kernel_provenance(program, index)
        assert provenance.lines
        for entry in provenance.lines:
            assert entry.creator is not None and entry.origin is not None and entry.origin.kind == "nnef"
            operations.add((entry.origin.operator, entry.origin.location))
    assert operations == {("nn.linear", "tiny.sknd:7"), ("nn.relu", "tiny.sknd:8")}


def test_programs_sharing_nodes_keep_their_own_origins():
    """Hash-consed nodes (constants, loop bounds) are shared by an NNEF program and a Tensor program
    built after it, in either order: each program's lines name only its own front end's origins."""
    graph = loads(NNEF_TEXT, variables={"w": RNG.random((4, 3), dtype=np.float32)}, file="shared.sknd")
    nnef_program = graph.compile("c", build=False, progress=False)
    y, _ = conv_relu_softmax()
    tensor_program = uv.compile(y, backend="c", opts="heuristic", build=False)
    graph_again = loads(NNEF_TEXT, variables={"w": RNG.random((4, 3), dtype=np.float32)}, file="again.sknd")
    nnef_again = graph_again.compile("c", build=False, progress=False)
    for program, kind in ((nnef_program, "nnef"), (tensor_program, "tensor"), (nnef_again, "nnef")):
        kinds = {entry.origin.kind for index in range(len(program.items))
                 for entry in kernel_provenance(program, index).lines}
        assert kinds == {kind}
    files = {entry.origin.location.split(":")[0] for entry in kernel_provenance(nnef_again, 0).lines}
    assert files == {"again.sknd"}


# -- attribution: the arithmetic of each kernel names the operation the user wrote --------------


def float_alu_origins(program) -> dict[str, list[tuple[str, str]]]:
    """Per kernel, ``(op, origin name)`` of every line of floating-point arithmetic."""
    from uopviz.core.ops import GroupOp

    found = {}
    for index in range(len(program.items)):
        provenance = kernel_provenance(program, index)
        found[f"{index}:{provenance.kernel}"] = [
            (entry.uop.op.name, entry.origin.name) for entry in provenance.lines
            if entry.uop.op in GroupOp.ELEMENTWISE and entry.uop.dtype.scalar.name.startswith("float")]
    return found


def test_softmaxs_kernels_name_softmax_and_the_convs_names_conv2d(c_program):
    program, _ = c_program
    kernels = float_alu_origins(program)
    conv, *softmax = kernels.values()
    assert conv and all(name == "conv2d" for _, name in conv), conv
    for lines in softmax:
        assert lines
        for op, name in lines:
            # relu is fused into softmax's kernels: its max(x, 0) is the one MAX that is relu's
            assert name == "softmax" or (name, op) == ("relu", "MAX"), lines
        assert sum(name == "relu" for _, name in lines) <= 1
    assert all(any(name == "softmax" for _, name in lines) for lines in softmax)
    # and every line, addressing included: the conv kernel's are conv2d's; softmax's kernels name
    # softmax, or relu for relu's max and its reads of the conv's buffer (their indices too)
    names = [{entry.origin.name for entry in kernel_provenance(program, index).lines}
             for index in range(len(program.items))]
    assert names[0] == {"conv2d"} and all(found == {"softmax", "relu"} for found in names[1:]), names


def test_a_matmul_plus_bias_relu_names_each_operation():
    a = uv.Tensor(RNG.random((4, 8), dtype=np.float32))
    w = uv.Tensor(RNG.random((8, 5), dtype=np.float32))
    b = uv.Tensor(RNG.random((5,), dtype=np.float32))
    program = uv.compile((a @ w + b).relu(), backend="c", opts="heuristic", build=False)
    (lines,) = float_alu_origins(program).values()
    named = {(op, name) for op, name in lines}
    expected = {("MUL", "matmul"), ("MULACC", "matmul"), ("ADD", "matmul"), ("ADD", "add"), ("MAX", "relu")}
    assert named <= expected
    assert ("MAX", "relu") in named and ("ADD", "add") in named
    # the bias add is a line per output lane or per vector of lanes, as wide as the target's vectors
    # (5 scalar lines on AVX-512, 1 under x86-64-v2); the other ADDs are the dot product's
    bias_adds = sum(item == ("ADD", "add") for item in lines)
    assert 1 <= bias_adds <= 5


def test_a_layernorms_kernels_name_layernorm():
    x = uv.Tensor(RNG.random((4, 16), dtype=np.float32))
    program = uv.compile(x.layernorm(), backend="c", opts="heuristic", build=False)
    kernels = float_alu_origins(program)
    assert len(kernels) == 3 and all(lines for lines in kernels.values())
    assert {name for lines in kernels.values() for _, name in lines} == {"layernorm"}


def test_a_fused_nnef_kernels_arithmetic_names_each_operation():
    """linear and relu are one kernel: the dot product is ``h = nn.linear``'s, the max ``y = nn.relu``'s."""
    graph = loads(NNEF_TEXT, variables={"w": RNG.random((4, 3), dtype=np.float32)}, file="fused.sknd")
    program = graph.compile("c", build=False, progress=False)
    (lines,) = float_alu_origins(program).values()
    assert sorted(set(lines)) == [("ADD", "h"), ("MAX", "y"), ("MULACC", "h")]


def test_lines_without_origins_keep_their_instructions_and_creators(c_program):
    from uopviz.engine.provenance import source_provenance

    program, _ = c_program
    item = program.items[0]
    full = kernel_provenance(program, 0)
    linear = item.body.src[0]
    bare = source_provenance(lineage_of(program.trace), linear, item.source, "c", with_origins=False)
    assert [(e.line, e.position, e.uop, e.creator) for e in bare.lines] == \
        [(e.line, e.position, e.uop, e.creator) for e in full.lines]
    assert all(e.origin is None for e in bare.lines) and any(e.origin is not None for e in full.lines)
