"""The graph model (uopviz.widgets.graph): nodes, colours from the spec, folding, collapsing,
both layout engines and the graph diff. No browser."""

from __future__ import annotations

import random
import re
from pathlib import Path

import networkx as nx
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import uopviz as uv
from uopviz import AxisType, OpFamily, Ops, UOp, dtypes
from uopviz.core.uop import ParamArg, shape_uop
from uopviz.widgets import graph as graph_module
from uopviz.widgets.graph import (
    LayoutError,
    build_graph,
    graph_diff,
    is_foldable,
    layout,
    node_color,
    node_key,
)
from uopviz.widgets.serialize import graph_json, legend, marks_json

SPEC = Path(__file__).resolve().parents[3] / "shared" / "spec" / "uop-dialect.tex"


# ---------------------------------------------------------------------------------------------
# helpers


def random_graph(seed: int, size: int) -> UOp:
    """A random elementwise/movement/reduce graph over a few buffers (several shapes and ops)."""
    rng = random.Random(seed)
    values = [UOp.buffer(24, dtypes.float32).reshape((4, 6)) for _ in range(rng.randint(1, 3))]
    for _ in range(size):
        op = rng.choice(["add", "mul", "max", "recip", "permute2", "where", "const_add", "reduce"])
        a, b = rng.choice(values), rng.choice(values)
        if op == "add":
            values.append(a + b)
        elif op == "mul":
            values.append(a * b)
        elif op == "max":
            values.append(a.maximum(b))
        elif op == "recip":
            values.append(a.recip())
        elif op == "permute2":
            values.append(a.permute((1, 0)).permute((1, 0)))
        elif op == "where":
            values.append((a < b).where(a, b))
        elif op == "const_add":
            values.append(a + float(rng.randint(1, 9)))
        else:
            values.append(a.reduce(Ops.ADD, (1,)).expand((4, 6)))
    root = values[-1]
    for v in values[-4:-1]:
        root = root + v
    return root


def spec_colours() -> tuple[dict[str, str], dict[str, str]]:
    """(family title -> colour, AxisType name -> colour) read from the spec's LaTeX source."""
    text = SPEC.read_text()
    definitions = re.findall(r"\\definecolor\{(\w+)\}\{HTML\}\{(\w+)\}", text)
    defined = {name: "#" + value.upper() for name, value in definitions}
    families = {
        title: defined[name]
        for name, title in re.findall(r"\\subsection\*\{\{\\color\{(\w+)\}(\w+) Ops\}", text)
    }
    axes = {
        name.replace("\\_", "_"): defined[colour]
        for colour, name in re.findall(r"\{\\color\{(\w+)\}\\texttt\{([A-Z\\_]+)\}\}", text)
    }
    return families, axes


def boxes_overlap(a: dict, b: dict) -> bool:
    (ax, ay), (bx, by) = a["pos"], b["pos"]
    apart_x = abs(ax - bx) * 2 >= (a["width"] + b["width"]) - 1e-6
    return not apart_x and abs(ay - by) * 2 < (a["height"] + b["height"]) - 1e-6


ENGINES = ["layered"] + (["dot"] if graph_module.dot_available() else [])


# ---------------------------------------------------------------------------------------------
# colours


@pytest.mark.skipif(not SPEC.is_file(), reason=f"the spec is not checked out beside the repo ({SPEC})")
def test_family_and_axis_colours_are_the_specs():
    families, axes = spec_colours()
    assert len(families) == 8, families  # the card colours eight families
    for family in OpFamily:
        if family.title in families:
            assert family.color.upper() == families[family.title], family
    assert set(axes) == {a.name for a in AxisType}
    for axis_type in AxisType:
        assert axis_type.color.upper() == axes[axis_type.name]
    # and the graph model uses them: one node of several families
    buffer = UOp.buffer(16, dtypes.float32)
    root = (buffer.reshape((4, 4)) + 1.0).reduce(Ops.ADD, (1,))
    g = layout(root, engine="layered")
    by_op = {d["op"]: d for _, d in g.nodes(data=True)}
    assert by_op["RESHAPE"]["color"].upper() == families["Movement"]
    assert by_op["ADD"]["color"].upper() == families["Elementwise"]
    assert by_op["REDUCE"]["color"].upper() == families["Reduce"]
    assert by_op["RESHAPE"]["family"] == "Movement"


@pytest.mark.parametrize("axis_type", list(AxisType))
def test_range_nodes_take_their_axis_type_colour(axis_type):
    r = UOp.range(8, axis_type)
    buffer = UOp.buffer(8, dtypes.float32)
    root = buffer.index(r)
    g = layout(root, engine="layered")
    (range_data,) = [d for _, d in g.nodes(data=True) if d["op"] == "RANGE"]
    assert range_data["color"] == axis_type.color
    assert range_data["axis_type"] == axis_type.name
    assert node_color(r) == axis_type.color
    assert axis_type.name in range_data["label"]
    assert range_data["details"]["axis_type"].startswith(axis_type.name)


@pytest.mark.parametrize("axis_type", list(AxisType))
def test_range_nodes_have_a_shape_of_their_own_and_the_legend_draws_axis_types_in_it(axis_type):
    # an AxisType's colour is also an op family's (UPCAST = Elementwise yellow, REDUCE = Reduce red):
    # the shape tells a RANGE from the MUL/ADD beside it
    r = UOp.range(16, axis_type)
    root = UOp.buffer(64, dtypes.float32).index(r * 4 + r)
    g = layout(root, engine="layered")
    shapes = {d["op"]: d["shape"] for _, d in g.nodes(data=True)}
    assert shapes == {"RANGE": "range", "MUL": "box", "ADD": "box", "BUFFER": "box", "INDEX": "box"}
    (range_key,) = [k for k, d in g.nodes(data=True) if d["op"] == "RANGE"]
    nodes = {n["k"]: n for n in graph_json(g)["nodes"]}
    assert nodes[range_key]["sh"] == "range"
    assert {n["sh"] for k, n in nodes.items() if k != range_key} == {"box"}
    legend_items = legend()
    assert {item["shape"] for item in legend_items["axis_types"]} == {"range"}
    assert all("shape" not in item for item in legend_items["families"])


# ---------------------------------------------------------------------------------------------
# nodes, labels, folding


@pytest.mark.parametrize("seed,size", [(0, 5), (1, 20), (2, 60), (3, 150)])
@pytest.mark.parametrize("engine", ENGINES)
def test_one_node_per_shown_uop_and_edges_follow_sources(seed, size, engine):
    root = random_graph(seed, size)
    g = layout(root, engine=engine)
    shown = [u for u in root.toposort() if not is_foldable(u) or u is root]
    assert set(g.nodes) == {node_key(u) for u in shown}
    assert g.graph["root"] == node_key(root)
    assert g.graph["engine"] == engine
    expected_edges = {
        (node_key(s), node_key(u), slot) for u in shown for slot, s in enumerate(u.src) if not is_foldable(s)
    }
    assert {(s, t, slot) for s, t, slots in g.edges(data="slots") for slot in slots} == expected_edges
    for _, _, data in g.edges(data=True):
        assert data["slot"] == data["slots"][0]
    for key, data in g.nodes(data=True):
        u = data["uop"]
        assert key == node_key(u)
        assert data["op"] == u.op.name
        assert data["family"] == u.op.family.title
        assert data["color"] == node_color(u)
        assert u.dtype.name in data["label"]
        assert len(data["pos"]) == 2 and all(isinstance(v, float) for v in data["pos"])
    assert nx.is_directed_acyclic_graph(g)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("seed", [4, 5])
def test_sources_sit_above_users_and_nodes_do_not_overlap(engine, seed):
    g = layout(random_graph(seed, 40), engine=engine)
    for s, t in g.edges:
        assert g.nodes[s]["pos"][1] > g.nodes[t]["pos"][1], (g.nodes[s]["op"], g.nodes[t]["op"])
    data = [d for _, d in g.nodes(data=True)]
    for i, a in enumerate(data):
        for b in data[i + 1 :]:
            assert not boxes_overlap(a, b), (a["label"], b["label"])
    width, height = g.graph["size"]
    assert width > 0 and height > 0


def test_constants_and_shape_stacks_fold_into_user_labels():
    buffer = UOp.buffer(16, dtypes.float32)
    root = buffer.reshape((4, 4)) * 3.5
    folded = layout(root, engine="layered")
    ops = sorted(d["op"] for _, d in folded.nodes(data=True))
    assert ops == ["BUFFER", "MUL", "RESHAPE"]
    labels = {d["op"]: d["label"] for _, d in folded.nodes(data=True)}
    assert labels["RESHAPE"].splitlines()[1] == "(16,) → (4, 4)"
    assert labels["MUL"].splitlines()[1] == "x * 3.5"
    assert labels["MUL"].splitlines()[-1] == "float32 (4, 4)"
    unfolded = layout(root, engine="layered", fold_constants=False)
    unfolded_ops = sorted(d["op"] for _, d in unfolded.nodes(data=True))
    assert unfolded_ops.count("CONST") == 2  # index 4 (hash-consed: both axes share it) and 3.5
    assert "STACK" in unfolded_ops
    assert unfolded.number_of_nodes() == len(root.toposort())


@pytest.mark.parametrize("rows, cols", [(4, 6), (3, 8)])
def test_labels_write_folded_operands_as_the_op_reads_them(rows, cols):
    size = rows * cols
    buffer = UOp.buffer(size, dtypes.float32)
    x = buffer.reshape((rows, cols))
    r = UOp.range(size, AxisType.UPCAST, 3)
    index = r * 4 + 1
    cases = {
        x: ["RESHAPE", f"({size},) → ({rows}, {cols})", f"float32 ({rows}, {cols})"],
        x.reshape((rows, 1, cols)).expand((rows, 5, cols)): [
            "EXPAND", f"({rows}, 1, {cols}) → ({rows}, 5, {cols})", f"float32 ({rows}, 5, {cols})"],
        x.pad((1, 0), (rows + 2, cols)): [
            "PAD", f"({rows}, {cols}) → ({rows + 2}, {cols})", "at (1, 0)", f"float32 ({rows + 2}, {cols})"],
        x.shrink((1, 2), (rows - 1, cols - 2)): [
            "SHRINK", f"({rows}, {cols}) → ({rows - 1}, {cols - 2})", "from (1, 2)",
            f"float32 ({rows - 1}, {cols - 2})"],
        r: ["RANGE r3 UPCAST", f"size {size}", "index"],
        index: ["ADD", "x + 1", "index"],
        r * 4: ["MUL", "x * 4", "index"],
        UOp(Ops.MULACC, (r, UOp.const(dtypes.index, cols), index)): ["MULACC", f"x * {cols} + y", "index"],
        x.maximum(0.0): ["MAX", "max(x, 0.0)", f"float32 ({rows}, {cols})"],
        UOp(Ops.VECTORIZE, (UOp.const(dtypes.float32, 1 / 3),) * 4): [
            "VECTORIZE", "0.333333 (all 4 lanes)", "float32.vec4"],
        UOp(Ops.STORE, (buffer.index(r), UOp.const(dtypes.float32, -1.5))): ["STORE", "value -1.5", "void"],
        x.cast(dtypes.int32): ["CAST", f"float32 → int32 ({rows}, {cols})"],
        UOp(Ops.PARAM, (shape_uop((size,)),), ParamArg(0, dtypes.float32)): [
            "PARAM param0", f"float32 ({size},)"],
    }
    for uop, expected in cases.items():
        data = layout(uop, engine="layered").nodes[node_key(uop)]
        assert data["label"].splitlines() == expected, uop.op
        assert "·" not in data["label"]


@pytest.mark.parametrize("value, shape", [(0.0, (1, 1)), (-2.5, (1, 1, 1)), (3, (1,))])
def test_a_constant_moved_by_a_movement_op_shows_its_value(value, shape):
    # ReLU's zero reaches MAX as RESHAPE(CONST 0.0, (1, 1)) then EXPAND: the CONST has no edge, so
    # its value must be in the RESHAPE's label
    dtype = dtypes.float32 if isinstance(value, float) else dtypes.int32
    constant = UOp.const(dtype, value)
    reshaped = constant.reshape(shape)
    label = layout(reshaped, engine="layered").nodes[node_key(reshaped)]["label"].splitlines()
    assert label == ["RESHAPE", f"{value!r}: () → {shape}", f"{dtype.name} {shape}"]
    wide = tuple(4 for _ in shape)
    relu = (UOp.buffer(4 ** len(shape), dtype).reshape(wide)).maximum(reshaped.expand(wide))
    labels = [d["label"] for _, d in layout(relu, engine="layered").nodes(data=True)]
    assert any(text.splitlines()[1] == f"{value!r}: () → {shape}" for text in labels)
    assert "CONST" not in {d["op"] for _, d in build_graph(relu).nodes(data=True)}
    padded = UOp.const(dtype, value).reshape((1,)).expand((3,))
    assert build_graph(padded).nodes[node_key(padded)]["label"].splitlines()[1] == "(1,) → (3,)"


def test_no_label_of_a_lowered_program_has_a_placeholder_or_an_unknown_device():
    import numpy as np

    import uopviz as uv

    rng = np.random.default_rng(2)
    a = uv.Tensor(rng.standard_normal((8, 16)).astype(np.float32))
    b = uv.Tensor(rng.standard_normal((16, 4)).astype(np.float32))
    image = uv.Tensor(rng.standard_normal((1, 2, 6, 6)).astype(np.float32))
    weight = uv.Tensor(rng.standard_normal((3, 2, 3, 3)).astype(np.float32))
    for tensor in (a @ b, a.softmax(), image.conv2d(weight)):
        program = uv.compile(tensor, backend="python", opts="heuristic", build=False)
        graphs = [tensor.uop] + [stage.output for stage in program.trace.passes]
        for graph in graphs:
            for _, data in build_graph(graph).nodes(data=True):
                label = data["label"]
                assert "·" not in label and "None" not in label and "(-," not in label, label
                assert all(len(line) <= 48 for line in label.splitlines()), label


def test_a_root_constant_is_still_a_node():
    c = UOp.const(dtypes.int32, 7)
    g = layout(c)
    assert [d["op"] for _, d in g.nodes(data=True)] == ["CONST"]
    assert "7" in g.nodes[node_key(c)]["label"]


def test_details_name_every_property_the_panel_shows():
    r = UOp.range(16, AxisType.REDUCE)
    buffer = UOp.buffer(16, dtypes.int32, "CPU")
    value = buffer.index(r) + 2
    data = layout(value).nodes[node_key(value)]
    details = data["details"]
    assert set(details) >= {"op", "dtype", "shape", "arg", "sources", "min_max", "device", "axis"}
    assert details["op"] == "ADD" and details["dtype"] == "int32" and details["device"] == "CPU"
    assert details["min_max"] == repr(value.min_max)
    # the drawn source is listed (and linked); the folded constant is a value, not a source
    assert details["sources"] == f"INDEX {node_key(value.src[0])}" and details["values"] == "2 (CONST)"


# ---------------------------------------------------------------------------------------------
# FUNCTION / CALL bodies


def function_graph() -> tuple[UOp, UOp]:
    p0 = UOp.param(0, (4,), dtypes.float32)
    p1 = UOp.param(1, (4,), dtypes.float32)
    body = UOp(Ops.TUPLE, ((p0 * p1 + p0).recip(),))
    a, b = UOp.buffer(4, dtypes.float32), UOp.buffer(4, dtypes.float32)
    function = UOp(Ops.FUNCTION, (body, a, b))
    return UOp(Ops.GET_TUPLE, (function,), 0), function


def test_function_bodies_collapse_and_expand():
    root, function = function_graph()
    expanded = layout(root, engine="layered")
    collapsed = layout(root, engine="layered", collapse=True)
    by_key = layout(root, engine="layered", collapse=[node_key(function)])
    body_ops = {"TUPLE", "PARAM", "MUL", "ADD", "RECIP"}
    assert body_ops <= {d["op"] for _, d in expanded.nodes(data=True)}
    assert not body_ops & {d["op"] for _, d in collapsed.nodes(data=True)}
    assert set(collapsed.nodes) == set(by_key.nodes)
    data = collapsed.nodes[node_key(function)]
    assert data["collapsible"] and data["collapsed"] and data["body_size"] == len(function.src[0].toposort())
    assert data["label"].splitlines()[0] == f"FUNCTION of 2 inputs [{data['body_size']} ops hidden]"
    assert expanded.nodes[node_key(function)]["collapsed"] is False
    # the expanded body is framed by a cluster box around exactly its nodes
    (cluster,) = expanded.graph["clusters"]
    assert cluster["key"] == node_key(function)
    for key in expanded.graph["bodies"][node_key(function)]:
        x, y = expanded.nodes[key]["pos"]
        assert cluster["x0"] < x < cluster["x1"] and cluster["y0"] < y < cluster["y1"]


# ---------------------------------------------------------------------------------------------
# engines and errors


def test_without_dot_auto_falls_back_and_dot_by_name_fails(monkeypatch):
    monkeypatch.setattr(graph_module.shutil, "which", lambda name: None)
    root = random_graph(7, 10)
    g = layout(root, engine="auto")
    assert g.graph["engine"] == "layered"
    with pytest.raises(LayoutError, match="dot"):
        layout(root, engine="dot")


@pytest.mark.skipif(not graph_module.dot_available(), reason="graphviz dot is not installed")
def test_auto_uses_dot_for_small_graphs_and_layered_for_huge_ones(monkeypatch):
    root = random_graph(8, 10)
    assert layout(root).graph["engine"] == "dot"
    monkeypatch.setattr(graph_module, "DOT_NODE_LIMIT", 3)
    assert layout(root).graph["engine"] == "layered"


def test_bad_input_errors_name_the_problem():
    with pytest.raises(TypeError, match="takes a UOp, got int"):
        layout(3)
    with pytest.raises(ValueError, match="engine must be"):
        layout(UOp.const(dtypes.int32, 1), engine="neato")


# ---------------------------------------------------------------------------------------------
# diff


def test_diff_of_a_graph_with_itself_is_empty():
    root = random_graph(9, 30)
    g = build_graph(root)
    diff = graph_diff(g, layout(root))
    assert diff.empty and diff.summary() == "+0 −0 ~0"


def test_diff_finds_the_rewritten_node_and_its_rebuilt_users():
    buffer = UOp.buffer(16, dtypes.float32).reshape((4, 4))
    inner = buffer + buffer
    before = (inner * 3.0).recip()
    replacement = buffer * 2.0
    after = (replacement * 3.0).recip()
    diff = graph_diff(build_graph(before), build_graph(after))
    # the path root→rewrite site was rebuilt: RECIP and the MUL by 3 are 'changed'; the MUL by 2 is
    # where the ADD stood but is another op: it is 'added', the ADD 'removed'
    assert diff.changed == {
        node_key(after): node_key(before),
        node_key(after.src[0]): node_key(before.src[0]),
    }
    assert diff.added == {node_key(replacement)}
    assert diff.removed == {node_key(inner)}


def test_a_changed_constant_marks_its_user_changed():
    buffer = UOp.buffer(4, dtypes.float32)
    a, b = buffer + 1.0, buffer + 2.0
    diff = graph_diff(build_graph(a), build_graph(b))
    assert diff.changed == {node_key(b): node_key(a)} and not diff.added and not diff.removed


def _chain(start: UOp, length: int) -> UOp:
    """``start`` under ``length`` elementwise ops (a long way from a rewrite site to the root)."""
    value = start
    for i in range(length):
        value = value * float(i + 2) if i % 2 else value.recip()
    return value


@pytest.mark.parametrize("length", [6, 20])
def test_a_steps_region_holds_what_it_put_in_not_the_rebuilt_path_to_the_root(length):
    buffer = UOp.buffer(16, dtypes.float32).reshape((4, 4))
    inner = buffer + buffer
    replacement = buffer * 2.0
    before, after = layout(_chain(inner, length), engine="layered"), layout(_chain(replacement, length),
                                                                         engine="layered")
    diff = graph_diff(before, after)
    focus = node_key(replacement)
    assert diff.added == {focus} and len(diff.changed) == length
    region = graph_module.step_region(after, diff, focus)
    x, y = after.nodes[focus]["pos"]
    half_w, half_h = after.nodes[focus]["width"] / 2, after.nodes[focus]["height"] / 2
    margin = graph_module.REGION_MARGIN
    assert region == {"x0": round(x - half_w - margin, 1), "y0": round(y - half_h - margin, 1),
                      "x1": round(x + half_w + margin, 1), "y1": round(y + half_h + margin, 1)}
    root_x, root_y = after.nodes[after.graph["root"]]["pos"]
    assert not region["y0"] <= root_y <= region["y1"]  # the root is rebuilt, far below: left out
    width, height = after.graph["size"]
    assert region["y1"] - region["y0"] < height / 2
    # serialised with the marks, for the live player and reports alike
    assert marks_json(diff, focus, after)["region"] == region
    assert marks_json(diff, focus)["region"] is None


def test_a_step_that_put_in_no_node_zooms_to_what_it_rebuilt_and_no_step_has_no_region():
    buffer = UOp.buffer(4, dtypes.float32)
    a, b = layout(buffer + 1.0, engine="layered"), layout(buffer + 2.0, engine="layered")
    diff = graph_diff(a, b)
    (changed,) = diff.changed
    region = graph_module.step_region(b, diff, None, margin=0.0)
    (x, y), w, h = b.nodes[changed]["pos"], b.nodes[changed]["width"], b.nodes[changed]["height"]
    assert region == {"x0": round(x - w / 2, 1), "y0": round(y - h / 2, 1),
                      "x1": round(x + w / 2, 1), "y1": round(y + h / 2, 1)}
    assert graph_module.step_region(b, None, None) is None
    assert graph_module.step_region(b, graph_diff(b, b), None) is None


@given(st.integers(0, 10_000), st.integers(1, 25))
def test_diff_partitions_both_node_sets(seed, size):
    a, b = random_graph(seed, size), random_graph(seed + 1, size)
    ga, gb = build_graph(a), build_graph(b)
    diff = graph_diff(ga, gb)
    common = set(ga.nodes) & set(gb.nodes)
    assert diff.added | set(diff.changed) | common == set(gb.nodes)
    assert not diff.added & set(diff.changed)
    assert diff.removed | set(diff.changed.values()) | common == set(ga.nodes)
    for b_key, a_key in diff.changed.items():
        assert ga.nodes[a_key]["op"] == gb.nodes[b_key]["op"]


def test_layout_through_the_package_namespace():
    root = random_graph(11, 5)
    assert set(uv.widgets.layout(root).nodes) == set(layout(root).nodes)


@pytest.mark.skipif(not graph_module.dot_available(), reason="graphviz dot is not installed")
def test_auto_sends_wide_fans_to_the_layered_layout():
    buffer = UOp.buffer(256, dtypes.float32)
    wide = UOp(Ops.SINK, tuple(buffer.index(UOp.const(dtypes.index, i)) * 2.0 for i in range(60)))
    g = layout(wide)
    assert g.graph["engine"] == "layered"
    assert layout(wide, engine="dot").graph["engine"] == "dot"


def test_a_linear_program_is_laid_out_as_an_indented_listing():
    import numpy as np

    from uopviz.widgets.serialize import graph_json

    rng = np.random.default_rng(0)
    a = uv.Tensor(rng.random((4, 8), dtype=np.float32))
    (kernel,) = uv.compile(a.sum(axis=1), backend="c").kernels
    linear = kernel.linear("c")
    g = layout(linear)
    assert g.graph["engine"] == "linear"
    shown = [s for s in linear.src if node_key(s) in g]
    ys = [g.nodes[node_key(s)]["pos"][1] for s in shown] + [g.nodes[node_key(linear)]["pos"][1]]
    assert ys == sorted(ys, reverse=True)  # program order, top to bottom, the LINEAR node last
    depth = 0
    left = {}
    for s in shown:  # one indent step per open RANGE, back at its END
        if s.op is Ops.END:
            depth -= 1
        data = g.nodes[node_key(s)]
        left[node_key(s)] = data["pos"][0] - data["width"] / 2
        assert left[node_key(s)] == pytest.approx(28.0 * depth)
        if s.op is Ops.RANGE:
            depth += 1
    edges = graph_json(g)["edges"]
    root_index = list(g.nodes).index(node_key(linear))
    assert edges and all(t != root_index for _, t, _ in edges)  # the LINEAR fan is implied by order
    assert layout(linear, engine="layered").graph["engine"] == "layered"


@pytest.mark.parametrize("rows,cols", [(4, 8), (6, 5)])
def test_layout_many_gives_the_layouts_of_layout_from_batched_dot(rows, cols, monkeypatch):
    """The report's player lays its frames out with layout_many: a few dot processes, each reading
    many graphs, give the positions and body boxes one dot process per graph gives."""
    rng = np.random.default_rng(rows)
    x = uv.Tensor(rng.standard_normal((rows, cols)).astype(np.float32))
    program = uv.compile((x * 2.0 + 1.0).softmax(axis=1), backend="python")
    uops = [step.after for p in program.trace.passes for step in p.steps[:6]]
    uops += [program.trace.passes[1].output, program.kernels[0].ast]  # the CALLs' bodies; a kernel
    single = [graph_module.layout(u) for u in uops]
    runs: list[int] = []
    real_run = graph_module.subprocess.run

    def counted(*args, **kwargs):
        runs.append(kwargs.get("input", "").count("digraph"))
        return real_run(*args, **kwargs)

    monkeypatch.setattr(graph_module.subprocess, "run", counted)
    monkeypatch.setattr(graph_module, "DOT_BATCH_GRAPHS", 5)
    many = graph_module.layout_many(uops)
    assert [g.graph["engine"] for g in many] == [g.graph["engine"] for g in single]
    for a, b in zip(single, many, strict=True):
        assert dict(a.nodes(data="pos")) == dict(b.nodes(data="pos"))
        assert a.graph["clusters"] == b.graph["clusters"] and list(a.edges) == list(b.edges)
    # graphs with open bodies (clusters) get a dot process each, the others go in batches of 5
    clustered = sum(g.graph["engine"] == "dot" and bool(g.graph["clusters"]) for g in single)
    batched = sum(g.graph["engine"] == "dot" for g in single) - clustered
    assert clustered >= 1 and batched >= 8
    assert sum(runs) == batched + clustered and len(runs) == -(-batched // 5) + clustered
