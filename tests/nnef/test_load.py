"""uopviz.nnef.load / loads: SkriptND files and model folders with modules and .dat variables,
.tgz archives of them, qualified variable names, confinement of imports and data files, and
broken inputs (bad .dat files, unsafe archives) reported as located NNEFErrors."""

from __future__ import annotations

import io
import re
import tarfile
from pathlib import Path

import numpy as np
import pytest

import uopviz as uv
from uopviz.nnef import NNEFError, load, loads, write_tensor

RNG = np.random.default_rng(7)

MAIN = """
import nn;
import blocks.tiny;

graph Net {
    @attrib { channels: int = 4; }
    @input { x: real[1, 3, 6, 6]; }
    @output { y: real[1, channels, 6, 6]; }
    @variable { w: real[channels, 3, 3, 3]; b: real[channels]; }
    @compose {
        c = nn.conv(x, w, b);
        y = scaled: blocks.tiny.scale_relu{factor=2.0}(c);
    }
}
"""

TINY = """
import math;
import nn;

operator scale_relu {
    @attrib { factor: real; }
    @input { x: real[s..]; }
    @output { y: real[s..]; }
    @variable { offset: real[]; }
    @compose {
        m = math.mul(x, factor);
        a = math.add(m, offset);
        y = nn.relu(a);
    }
}
"""


def _write_model(root: Path) -> dict[str, np.ndarray]:
    (root / "blocks").mkdir(parents=True)
    (root / "main.sknd").write_text(MAIN)
    (root / "blocks" / "tiny.sknd").write_text(TINY)
    data = {
        "w": RNG.standard_normal((4, 3, 3, 3)).astype(np.float32),
        "b": RNG.standard_normal(4).astype(np.float32),
        "scaled.offset": np.array(0.25, np.float32),
    }
    write_tensor(root / "w.dat", data["w"])
    write_tensor(root / "b.dat", data["b"])
    write_tensor(root / "scaled.offset.dat", data["scaled.offset"])
    return data


def _reference(x: np.ndarray, data: dict[str, np.ndarray]) -> np.ndarray:
    xp = np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)])
    out = np.zeros((1, 4, 6, 6), np.float32)
    for i in range(6):
        for j in range(6):
            out[0, :, i, j] = np.einsum("cij,ocij->o", xp[0, :, i : i + 3, j : j + 3], data["w"])
    out += data["b"].reshape(1, 4, 1, 1)
    return np.maximum(out * 2.0 + data["scaled.offset"], 0)


def test_model_folder_with_modules_and_data(tmp_path):
    data = _write_model(tmp_path / "model")
    graph = load(tmp_path / "model")
    assert graph.name == "Net" and graph.inputs == ["x"] and graph.outputs == ["y"]
    assert sorted(graph.variables) == ["b", "scaled.offset", "w"]
    np.testing.assert_array_equal(graph.tensors["w"].data, data["w"])
    assert {op.module for op in graph.operations} == {"nn", "math"}
    x = RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(graph.run({"x": x})["y"], _reference(x, data), rtol=1e-4, atol=1e-4)
    # the main file alone is also a model: its folder holds the modules and the data
    again = load(tmp_path / "model" / "main.sknd")
    np.testing.assert_allclose(again.run({"x": x})["y"], _reference(x, data), rtol=1e-4, atol=1e-4)
    assert uv.nnef.load is load


def test_variables_in_sub_folders_and_given_at_run_time(tmp_path):
    root = tmp_path / "model"
    data = _write_model(root)
    (root / "scaled.offset.dat").unlink()
    (root / "scaled").mkdir()
    write_tensor(root / "scaled" / "offset.dat", data["scaled.offset"])
    (root / "b.dat").unlink()
    graph = load(root)
    assert graph.tensors["scaled.offset"].data is not None and graph.tensors["b"].data is None
    x = RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)
    with pytest.raises(NNEFError, match="variable 'b' has no data"):
        graph.run({"x": x})
    np.testing.assert_allclose(
        graph.run({"x": x, "b": data["b"]})["y"], _reference(x, data), rtol=1e-4, atol=1e-4
    )


def test_graph_attributes_change_declared_shapes(tmp_path):
    _write_model(tmp_path / "model")
    with pytest.raises(
        NNEFError,
        match=r"variable 'w' is declared with shape \[6, 3, 3, 3\], but its data file holds shape "
        r"\[4, 3, 3, 3\]",
    ) as caught:
        load(tmp_path / "model", attribs={"channels": 6})
    assert caught.value.file == str((tmp_path / "model" / "w.dat").resolve())


def test_tgz_of_a_model_folder(tmp_path):
    data = _write_model(tmp_path / "model")
    archive = tmp_path / "model.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "model", arcname="model")
    graph = load(archive)
    x = RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(graph.run({"x": x})["y"], _reference(x, data), rtol=1e-4, atol=1e-4)


def test_unsafe_archives_are_refused(tmp_path):
    archive = tmp_path / "evil.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("../outside.sknd")
        payload = b"graph G {}"
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    with pytest.raises(NNEFError, match="outside the extraction folder"):
        load(archive)
    archive = tmp_path / "link.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("main.sknd")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/passwd"
        tar.addfile(info)
    with pytest.raises(NNEFError, match="is a link or device"):
        load(archive)
    (tmp_path / "empty").mkdir()
    archive = tmp_path / "empty.tgz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "empty", arcname="empty")
    with pytest.raises(NNEFError, match="holds neither main.sknd nor graph.nnef"):
        load(archive)
    (tmp_path / "broken.tgz").write_bytes(b"not a tar file at all")
    with pytest.raises(NNEFError, match="cannot unpack"):
        load(tmp_path / "broken.tgz")


@pytest.mark.parametrize(
    "corrupt, message",
    [
        (lambda raw: raw[:100], "truncated|header"),
        (lambda raw: b"XX" + raw[2:], "magic"),
        (lambda raw: raw[:-8], "data|truncated|bytes"),
    ],
)
def test_bad_dat_files_are_located_errors(tmp_path, corrupt, message):
    root = tmp_path / "model"
    _write_model(root)
    raw = (root / "w.dat").read_bytes()
    (root / "w.dat").write_bytes(corrupt(raw))
    with pytest.raises(NNEFError, match=message) as info:
        load(root)
    assert info.value.file is not None and info.value.file.endswith("w.dat")


def test_dat_with_the_wrong_type_is_refused(tmp_path):
    root = tmp_path / "model"
    _write_model(root)
    write_tensor(root / "w.dat", np.ones((4, 3, 3, 3), bool))
    refusal = "variable 'w' is declared real, but its data file holds bool items"
    with pytest.raises(NNEFError, match=refusal) as caught:
        load(root)
    assert caught.value.file == str((root / "w.dat").resolve())


def test_imports_stay_in_the_model_folder_and_the_library(tmp_path):
    root = tmp_path / "model"
    root.mkdir()
    (root / "main.sknd").write_text(
        "import nosuchmodule;\ngraph G { @input { x: real[2]; } @output { y: real; } "
        "@compose { y = nosuchmodule.f(x); } }"
    )
    with pytest.raises(NNEFError, match="unknown module 'nosuchmodule': no nosuchmodule.sknd in ") as info:
        load(root)
    assert (info.value.file, info.value.line, info.value.column) == (str(root / "main.sknd"), 1, 8)
    (tmp_path / "secret.sknd").write_text("operator f { @input { x: real[n]; } @output { y: real[n]; } }")
    (root / "main.sknd").write_text(
        "import secret;\ngraph G { @input { x: real[2]; } @output { y: real; } "
        "@compose { y = secret.f(x); } }"
    )
    with pytest.raises(NNEFError, match="unknown module 'secret'"):
        load(root)
    with pytest.raises(NNEFError, match="neither a SkriptND model folder"):
        load(tmp_path)
    with pytest.raises(NNEFError, match="no such file"):
        load(tmp_path / "missing")


COPY = "@compose { y = x; }"


@pytest.mark.parametrize(
    "imports, column, message",
    [
        ("import nosuchmod;", 8, r"unknown module 'nosuchmod': no standard module of that name \(standard "
         r"modules: algo, image, layer, layout, linalg, math, misc, nn, quant, rand\)$"),
        ("import nn, mth;", 12, r"unknown module 'mth': .*; did you mean 'math'\?$"),
    ],
)  # fmt: skip
def test_an_unknown_import_is_an_error_at_the_import_even_when_nothing_of_it_is_used(
    imports, column, message
):
    with pytest.raises(NNEFError) as info:
        loads(f"{imports}\ngraph G {{ @input {{ x: real[2]; }} @output {{ y: real[2]; }} {COPY} }}")
    assert re.search(message, info.value.message)
    assert (info.value.file, info.value.line, info.value.column) == ("<string>", 1, column)


def test_an_unknown_import_of_a_model_module_is_located_in_that_module(tmp_path):
    root = tmp_path / "model"
    _write_model(root)
    (root / "blocks" / "tiny.sknd").write_text(
        TINY.replace("import nn;", "import nn;\nimport blocks.missing;")
    )
    with pytest.raises(
        NNEFError, match=r"unknown module 'blocks.missing': no blocks/missing.sknd in "
    ) as info:
        load(root)
    assert (info.value.file, info.value.line, info.value.column) == (str(root / "blocks" / "tiny.sknd"), 4, 8)


def test_loads_with_variables_and_errors():
    text = (
        "import nn;\ngraph G { @input { x: real[2, 3]; } @output { y: real; } @variable { w: real[4, 3]; } "
        "@compose { y = nn.linear(x, w); } }"
    )
    w = RNG.standard_normal((4, 3)).astype(np.float32)
    graph = loads(text, variables={"w": w})
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(graph.run({"x": x})["y"], x @ w.T, rtol=1e-5, atol=1e-5)
    with pytest.raises(NNEFError, match="missing graph input"):
        graph.run({})
    with pytest.raises(NNEFError, match=r"'x' must have shape \[2, 3\]"):
        graph.run({"x": np.zeros((3, 2), np.float32)})
    with pytest.raises(NNEFError, match="unknown input name"):
        graph.run({"x": x, "nope": x})
    with pytest.raises(NNEFError) as info:
        loads("graph G { @input { x: real[2]; }", file="bad.sknd")
    assert info.value.file == "bad.sknd"


@pytest.mark.parametrize("text", ["", "# nothing but a comment\n", TINY])
def test_a_text_without_a_graph_is_an_error_at_its_start(text):
    with pytest.raises(NNEFError) as info:
        loads(text, file="empty.sknd")
    assert info.value.message == "module 'main' (empty.sknd) defines no graph"
    assert (info.value.file, info.value.line, info.value.column) == ("empty.sknd", 1, 1)


def test_dynamic_input_extents_recompose_for_the_given_shapes():
    graph = loads(
        "import nn;\ngraph G { @input { x: real[s|16, 3]; } @output { y: real[s, 3]; } "
        "@compose { y = nn.softmax(x); } }"
    )
    assert graph.tensors["x"].upper_shape == (16, 3)
    for rows in (2, 5):
        x = RNG.standard_normal((rows, 3)).astype(np.float32)
        e = np.exp(x - x.max(1, keepdims=True))
        np.testing.assert_allclose(graph.run({"x": x})["y"], e / e.sum(1, keepdims=True), rtol=1e-5)
    with pytest.raises(NNEFError, match="does not fit the declared"):
        graph.run({"x": np.zeros((17, 3), np.float32)})


def test_a_variable_without_data_is_located_at_its_declaration(tmp_path):
    (tmp_path / "main.sknd").write_text(
        "import math;\ngraph G {\n  @input { x: real[2]; }\n  @output { y: real[2]; }\n"
        "  @variable { w: real[2]; }\n  @compose { y = math.mul(x, w); }\n}\n"
    )
    graph = load(tmp_path)
    with pytest.raises(NNEFError, match="variable 'w' has no data") as caught:
        graph.run({"x": np.ones(2, np.float32)})
    assert (Path(caught.value.file).name, caught.value.line, caught.value.column) == ("main.sknd", 5, 15)
    given = graph.run({"x": np.full(2, 3, np.float32), "w": np.array([1, 2], np.float32)})
    np.testing.assert_array_equal(given["y"], [3, 6])
