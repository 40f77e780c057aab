"""The operator graph of NNEF models (uopviz.widgets.nnef_graph) and the explorer's Model tab: one
node per operation plus the graph's inputs, variables and outputs, edges labelled with the tensors'
shapes (checked against shapes worked out by hand and against what running the model gives),
colours per module, side-panel details with attributes and the operator's SkriptND text."""

from __future__ import annotations

import numpy as np
import pytest

import uopviz as uv
from uopviz.widgets.model_view import ModelExplorer, OperatorGraphView
from uopviz.widgets.nnef_graph import (
    MODULE_COLORS,
    TENSOR_COLORS,
    USER_COLORS,
    module_legend,
    operator_graph,
    operator_graph_json,
)

MAIN = """import nn;
import math;
import layout;
import mine;

graph Small {{
    @input {{
        x: real[{batch}, 3, {size}, {size}];
    }}
    @output {{
        y: real[{batch}, {channels}];
    }}
    @variable {{
        w: real[{channels}, 3, 3, 3];
    }}
    @compose {{
        c = nn.conv{{padding=1}}(x, w);
        r = mine.twice(c);
        s = math.add(r, c);
        f = layout.flatten{{axis=2}}(s);
        y = math.sum_reduce{{axes=[2], squeeze=true}}(f);
    }}
}}
"""

MINE = """# Doubles every element.
operator twice {
    @input {
        x: real[s..];
    }
    @output {
        y: real[s..];
    }
    @lower {
        y[i..] = x[i..] * 2.0,
            i < s;
    }
}
"""


def small_model(tmp_path, batch: int, size: int, channels: int):
    folder = tmp_path / f"small_{batch}_{size}_{channels}"
    folder.mkdir()
    (folder / "main.sknd").write_text(MAIN.format(batch=batch, size=size, channels=channels))
    (folder / "mine.sknd").write_text(MINE)
    return uv.nnef.load(folder)


def edge_shapes(graph) -> dict[tuple[str, str], tuple]:
    return {(s, t): data["shape"] for s, t, data in graph.edges(data=True)}


@pytest.mark.parametrize("batch,size,channels", [(1, 4, 8), (2, 6, 5), (3, 5, 2)])
def test_small_model_nodes_edges_and_shapes(tmp_path, batch, size, channels):
    model = small_model(tmp_path, batch, size, channels)
    graph = operator_graph(model)
    operations = [k for k, d in graph.nodes(data=True) if d["kind"] == "operation"]
    assert len(operations) == len(model.operations) == 5
    assert graph.number_of_nodes() == 5 + 3  # + input x, variable w, output y
    assert {k for k in graph if not k.startswith("op:")} == {"input:x", "variable:w", "output:y"}
    assert [graph.nodes[f"op:{i}"]["type"] for i in range(5)] == [
        "nn.conv", "mine.twice", "math.add", "layout.flatten", "math.sum_reduce"]
    image = (batch, channels, size, size)  # a 3x3 convolution padded by 1 keeps the size
    assert edge_shapes(graph) == {
        ("input:x", "op:0"): (batch, 3, size, size),
        ("variable:w", "op:0"): (channels, 3, 3, 3),
        ("op:0", "op:1"): image,
        ("op:0", "op:2"): image,  # c is read by twice and by add
        ("op:1", "op:2"): image,
        ("op:2", "op:3"): image,
        ("op:3", "op:4"): (batch, channels, size * size),
        ("op:4", "output:y"): (batch, channels),
    }
    for _, _, data in graph.edges(data=True):
        assert data["dtype"] == "real"
        assert data["label"] == "real[" + ", ".join(map(str, data["shape"])) + "]"
    assert graph.edges["op:0", "op:2"]["tensor"] == "c" and graph.edges["op:3", "op:4"]["tensor"] == "f"
    # the output edge's shape is what running the model gives
    rng = np.random.default_rng(batch * 100 + size)
    out = model.run({"x": rng.standard_normal((batch, 3, size, size)).astype(np.float32),
                     "w": rng.standard_normal((channels, 3, 3, 3)).astype(np.float32)})
    assert out["y"].shape == graph.edges["op:4", "output:y"]["shape"]
    # every node has a position and a box; sources are drawn above their users (y grows upwards)
    for source, target in graph.edges:
        assert graph.nodes[source]["pos"][1] > graph.nodes[target]["pos"][1]
    assert all(graph.nodes[k]["width"] > 0 and graph.nodes[k]["height"] > 0 for k in graph)


def test_colours_and_legend_per_module(tmp_path):
    graph = operator_graph(small_model(tmp_path, 1, 4, 8))
    colours = {graph.nodes[k]["module"]: graph.nodes[k]["color"] for k in graph if k.startswith("op:")}
    assert colours == {"nn": MODULE_COLORS["nn"], "mine": USER_COLORS[0], "math": MODULE_COLORS["math"],
                       "layout": MODULE_COLORS["layout"]}
    assert len(set(colours.values())) == 4
    assert graph.nodes["input:x"]["color"] == TENSOR_COLORS["input"]
    assert graph.nodes["variable:w"]["color"] == TENSOR_COLORS["variable"]
    legend = module_legend(graph)
    assert [(m["name"], m["color"]) for m in legend["modules"]] == list(colours.items())
    assert [t["name"] for t in legend["tensors"]] == ["input", "variable", "output"]


def test_details_hold_attributes_tensors_and_definition_text(tmp_path):
    model = small_model(tmp_path, 2, 6, 5)
    graph = operator_graph(model)
    conv = graph.nodes["op:0"]["details"]
    assert conv["op"] == "nn.conv" and conv["family"] == "neural network" and conv["label"] == "c"
    attributes = dict(line.split(" = ", 1) for line in conv["attributes"].splitlines())
    assert attributes["padding"] == "[1, 1, 1, 1]" and attributes["stride"] == "[1, 1]"
    assert attributes.keys() == model.operations[0].attribs.keys()
    assert conv["inputs"].splitlines() == [
        "input = x  real[2, 3, 6, 6]  (input)", "filter = w  real[5, 3, 3, 3]  (variable)",
        "bias = (omitted)"]
    assert conv["outputs"] == "output = c  real[2, 5, 6, 6]" and conv["shape"] == "real[2, 5, 6, 6]"
    # the operator's text as the standard library writes it: from its header to its closing brace
    definition = conv["definition"].splitlines()
    assert definition[0] == "# Convolution" and definition[1] == "operator conv {" and definition[-1] == "}"
    assert any("@lower" in line for line in definition) and "operator" not in "\n".join(definition[2:])
    assert conv["defined at"].endswith("nn.sknd:" + str(model.operations[0].definition.pos.line))
    # the model's own operator: its module's text
    twice = graph.nodes["op:1"]["details"]
    assert twice["definition"] == MINE.rstrip("\n") and twice["defined at"].endswith("mine.sknd:2")
    assert twice["attributes"] == "—" and twice["family"] == "mine"
    assert graph.nodes["input:x"]["details"]["shape"] == "[2, 3, 6, 6]"


def test_alexnet_operator_graph():
    model = uv.nnef.loads(uv.nnef.examples.text("alexnet", fixed=True))
    graph = operator_graph(model)
    assert len(model.operations) == 24  # softmax expands into 5 operations
    assert graph.number_of_nodes() == 24 + 1 + 16 + 1
    assert sum(graph.nodes[k]["kind"] == "variable" for k in graph) == 16
    by_label = {graph.nodes[k]["details"]["label"]: k for k in graph if k.startswith("op:")}

    def shape_into(producer: str, consumer: str) -> tuple:
        return graph.edges[by_label[producer], by_label[consumer]]["shape"]

    # (224 - 11) / 4 + 1 = 54; pools of 3 by 2: 54 -> 26 -> 12 -> 5; a 5x5 convolution of 5 -> 1
    assert shape_into("conv1", "relu1") == (1, 64, 54, 54)
    assert shape_into("pool1", "conv2") == (1, 64, 26, 26)
    assert shape_into("pool2", "conv3") == (1, 192, 12, 12)
    assert shape_into("pool3", "conv6") == (1, 256, 5, 5)
    assert shape_into("relu6", "flat1") == (1, 4096, 1, 1)
    assert shape_into("flat1", "conv7") == (1, 4096)
    assert graph.edges["variable:kernel1", by_label["conv1"]]["shape"] == (64, 3, 11, 11)
    (last,) = graph.predecessors("output:output")
    assert graph.nodes[last]["type"] == "math.div"
    assert graph.edges[last, "output:output"]["shape"] == (1, 1000)
    softmax = [k for k in graph if k.startswith("op:") and graph.nodes[k]["operation"].scopes]
    assert len(softmax) == 5 and all("in output" in graph.nodes[k]["label"] for k in softmax)
    nn_colours = {graph.nodes[k]["color"] for k in graph if graph.nodes[k]["module"] == "nn"}
    assert nn_colours == {MODULE_COLORS["nn"]}
    data = operator_graph_json(graph)
    assert len(data["nodes"]) == 42 and len(data["edges"]) == graph.number_of_edges()
    assert ["op:0", "op:1"] == [data["nodes"][i]["k"] for i in data["edges"][0][:2]]
    assert data["edges"][0][3] == "real[1, 64, 54, 54]"
    drawn = {(data["nodes"][s]["k"], data["nodes"][t]["k"]): label for s, t, _, label in data["edges"]}
    assert drawn["variable:kernel1", "op:0"] == "" and drawn["input:input", "op:0"] == ""
    assert drawn[by_label["flat1"], by_label["conv7"]] == "real[1, 4096]"


def test_bad_input_is_named():
    with pytest.raises(TypeError, match="model graph.*int"):
        operator_graph(42)


def test_explore_opens_on_the_operator_graph(tmp_path):
    model = small_model(tmp_path, 2, 4, 3)
    tab = uv.explore(model)
    assert tab.titles[0] == "Model"
    explorer = tab.children[0]
    assert isinstance(explorer, ModelExplorer) and isinstance(explorer.view, OperatorGraphView)
    assert explorer.view.node_count == 8 and explorer.view.graph_model.number_of_nodes() == 8
    assert [m["name"] for m in explorer.view.legend["modules"]] == ["nn", "mine", "math", "layout"]
    assert explorer.open_button.disabled
    explorer.view.selected = "input:x"  # a tensor node: nothing to lower
    assert explorer.open_button.disabled
    explorer.view.selected = "op:1"  # as a click in the canvas sets it
    assert not explorer.open_button.disabled and "mine.twice" in explorer.selection.value
    tuner = explorer.open_kernels()
    expected = model.kernels(1, backend="c")
    assert [k.name for k in tuner.kernels] == [k.name for k in expected]
    assert explorer.tuner_box.children == (tuner,)
    conv_tuner = explorer.open_kernels(0)
    assert [k.name for k in conv_tuner.kernels] == [k.name for k in model.kernels(0, backend="c")]


def test_an_operator_graphs_side_panel_prompt_is_about_operations_not_uops(tmp_path):
    from uopviz.widgets.embed import StaticPage
    from uopviz.widgets.nnef_graph import OPERATOR_PANEL_PROMPT
    from uopviz.widgets.views import UOP_PANEL_PROMPT, GraphView

    model = small_model(tmp_path, 1, 4, 2)
    view = OperatorGraphView(model)
    assert view.empty_text == OPERATOR_PANEL_PROMPT and "operation" in view.empty_text
    assert "dtype" not in view.empty_text and "min_max" not in view.empty_text
    assert GraphView().empty_text == UOP_PANEL_PROMPT and "min_max" in UOP_PANEL_PROMPT
    page = StaticPage("model")
    page.add_operator_graph("Model", "", model)
    assert OPERATOR_PANEL_PROMPT in page.render()


def test_enter_in_the_search_box_selects_and_reveals_the_first_match(tmp_path):
    explorer = ModelExplorer(small_model(tmp_path, 1, 4, 2))
    assert explorer.submit_search() is None and explorer.view.selected == ""  # nothing typed
    explorer.search_box.value = "twice"
    first = explorer.matches.options[0][1]
    assert explorer.view.selected == ""  # listing alone selects nothing
    # what the browser sends on Enter: the text widget's custom "submit" message
    explorer.search_box._handle_custom_msg({"event": "submit"}, [])
    assert explorer.view.selected == first == explorer.matches.value
    assert explorer.view.graph_model.nodes[first]["kind"] == "operation"
