"""Hostile and malformed NNEF inputs (issue 11): each case once escaped as an undocumented exception
type, hung, or allocated without bound; now each is an NNEFError that names the file and position,
or is handled in bounded time and memory."""

from __future__ import annotations

import io
import tarfile

import numpy as np
import pytest

from uopviz import nnef
from uopviz.backends import available
from uopviz.core.limits import memory_limit_set
from uopviz.nnef import NNEFError, data, loader

CPU_BACKENDS = [name for name in ("python", "c", "llvm", "opencl") if name in available()]


def graph_text(compose: str, inputs: str = "x: real[3];", outputs: str = "y: real[3];",
               extra: str = "") -> str:
    """A one-graph SkriptND module importing math."""
    return (f"import math; graph G {{ @input {{ {inputs} }} @output {{ {outputs} }} {extra} "
            f"@compose {{ {compose} }} }}")


@pytest.mark.parametrize(
    "value",
    [
        "+".join(["1.0"] * 1500),  # a left-associative chain parses flat but nests one level per '+'
        "true ? " * 800 + "1.0" + " : 2.0" * 800,
        "-" * 1500 + "1.0",
        "(" * 400 + "1.0" + ")" * 400,
    ],
    ids=["plus-chain", "nested-select", "minus-chain", "parentheses"],
)
def test_deeply_nested_expressions_are_located_errors(value):
    with pytest.raises(NNEFError, match="nested") as caught:
        nnef.loads(graph_text(f"y = math.mul(x, {value});"))
    assert caught.value.file == "<string>" and caught.value.line == 1 and caught.value.column is not None


def test_a_long_flat_expression_under_the_nesting_limit_still_composes():
    graph = nnef.loads(graph_text("y = math.mul(x, " + "+".join(["1.0"] * 50) + ");"))
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_allclose(graph.run({"x": x})["y"], x * 50)


def test_an_int_literal_out_of_int32_range_is_a_located_error():
    # issue 11: OverflowError from numpy while composing math.add(x, 2147483648) on int
    with pytest.raises(NNEFError, match="2147483648") as caught:
        nnef.loads(graph_text("y = math.add(x, 2147483648);", "x: int[3];", "y: int[3];"))
    assert caught.value.line == 1 and caught.value.column is not None


def test_a_constant_over_the_memory_limit_is_refused_before_allocation():
    # issue 11: `c: real[2147483648] = 1.0` allocated and filled 8 GiB inside loads
    text = graph_text("y = math.exp(x);", extra="@constant { c: real[2147483648] = 1.0; }")
    with memory_limit_set(1 << 30), pytest.raises(NNEFError, match="memory limit") as caught:
        nnef.loads(text)
    assert caught.value.line == 1
    small = graph_text("y = math.add(x, c);", extra="@constant { c: real[3] = 2.0; }")
    with memory_limit_set(12):  # three float32 values fit exactly
        graph = nnef.loads(small)
    np.testing.assert_allclose(graph.run({"x": np.ones(3, np.float32)})["y"], 3.0)


def test_a_pack_count_of_two_to_the_31_is_refused_at_once():
    # issue 11: an output pack declared `real[2]..(2147483648)` stalled for minutes, then MemoryError
    text = ("import math; operator f { @input { x: real[2]; } @output { y: real[2]..(2147483648); } "
            "@compose { y = math.exp(x); } } "
            "graph G { @input { a: real[2]; } @output { b: real[2]; } @compose { b.. = f(a); } }")
    with pytest.raises(NNEFError, match="2147483648 items") as caught:
        nnef.loads(text)
    assert caught.value.line == 1 and caught.value.column == text.index("2147483648") + 1


@pytest.mark.parametrize("shape,axis", [((2, 10000), 1), ((3, 70), 0), ((5, 7), 1)])
def test_cumsum_composes_in_work_bounded_by_the_graph_not_the_extent(shape, axis):
    # issue 11: cumsum over real[2, 10000] expanded into one operation per element (> 30 s)
    dims = ", ".join(map(str, shape))
    text = graph_text(f"y = math.cumsum{{axis={axis}}}(x);", f"x: real[{dims}];", f"y: real[{dims}];")
    graph = nnef.loads(text)
    unrolled = max(shape) <= 64  # small inputs keep the spec's composition
    assert (len(graph.operations) > shape[axis]) if unrolled else (len(graph.operations) <= 3)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(graph.run({"x": x})["y"], np.cumsum(x, axis=axis), rtol=1e-4, atol=1e-3)


# ------------------------------------------------------------------------------------------------
# zero-size inputs (issue 21 item 5): they loaded, then Graph.run raised ValueError; an empty range's
# folded indices made kernels write and read outside the zero-size tensors

ZERO_SIZE_GRAPHS = [
    ("exp", "x: real[2, 0];", "y: real[2, 0];", "y = math.exp(x);", {"x": (2, 0)}, np.exp),
    ("sum over the empty axis", "x: real[2, 0];", "y: real[2, 1];", "y = math.sum_reduce{axes=[1]}(x);",
     {"x": (2, 0)}, lambda x: x.sum(1, keepdims=True)),
    ("sum keeping the empty axis", "x: real[0, 3];", "y: real[1, 3];", "y = math.sum_reduce{axes=[0]}(x);",
     {"x": (0, 3)}, lambda x: x.sum(0, keepdims=True)),
    ("max over the kept axes", "x: real[0, 3];", "y: real[0, 1];", "y = math.max_reduce{axes=[1]}(x);",
     {"x": (0, 3)}, lambda x: x.max(1, keepdims=True)),
    ("matmul, inner 0", "a: real[2, 0]; b: real[0, 3];", "y: real[2, 3];", "y = linalg.matmul(a, b);",
     {"a": (2, 0), "b": (0, 3)}, np.matmul),
    ("matmul, outer 0", "a: real[0, 4]; b: real[4, 3];", "y: real[0, 3];", "y = linalg.matmul(a, b);",
     {"a": (0, 4), "b": (4, 3)}, np.matmul),
    ("concat of an empty piece", "a: real[0, 3]; b: real[2, 3];", "y: real[2, 3];",
     "y = layout.concat{axis=0}([a, b]);", {"a": (0, 3), "b": (2, 3)}, lambda a, b: np.concatenate([a, b])),
]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize(("inputs", "outputs", "compose", "shapes", "reference"),
                         [case[1:] for case in ZERO_SIZE_GRAPHS], ids=[case[0] for case in ZERO_SIZE_GRAPHS])
def test_zero_size_inputs_run_like_numpy(inputs, outputs, compose, shapes, reference, backend):
    text = ("import math; import linalg; import layout; "
            f"graph G {{ @input {{ {inputs} }} @output {{ {outputs} }} @compose {{ {compose} }} }}")
    rng = np.random.default_rng(len(compose))
    arrays = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}
    got = nnef.loads(text).run(arrays, backend=backend)["y"]
    expected = reference(*arrays.values())
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-6)


# ------------------------------------------------------------------------------------------------
# NNEF 1.0 folders: the nnef package's C parser runs in a child process


def nnef1_folder(tmp_path, text: str):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "graph.nnef").write_text(text)
    return folder


def test_a_text_that_crashes_the_nnef_parser_is_an_error_not_a_dead_process(tmp_path):
    # issue 11: this graph.nnef killed Python inside the nnef package's parser, called in-process
    folder = nnef1_folder(tmp_path, "version 1.0; graph G( x ) -> ( y ) { x ( }")
    with pytest.raises(NNEFError, match="crashed") as caught:
        nnef.load(folder)
    assert caught.value.file == str(folder / "graph.nnef")
    (tmp_path / "next").mkdir()
    good = nnef1_folder(tmp_path / "next", "version 1.0; graph G( x ) -> ( y ) "
                                           "{ x = external(shape = [2, 3]); y = relu(x); }")
    x = np.float32([[-1, 2, -3], [4, -5, 6]])
    np.testing.assert_array_equal(nnef.load(good).run({"x": x})["y"], np.maximum(x, 0))  # parses again


@pytest.mark.parametrize(
    "statement",
    [
        "y = reshape(x, shape = [-1, 0]);",
        "y = reshape(x, shape = [0, 5]);",
        "y = avg_pool(x, size = [0, 1], stride = [0, 1]);",
        "y = slice(x, axes = [0], begin = [true], end = [1]);",
    ],
)
def test_nnef1_shape_inference_failures_are_nnef_errors(statement):
    from uopviz.nnef.nnef1.loader import loads_nnef1

    text = f"version 1.0; graph G( x ) -> ( y ) {{ x = external(shape = [2, 3]); {statement} }}"
    try:
        graph = loads_nnef1(text)
    except NNEFError as error:
        assert error.file == "<string>" and error.message.startswith("NNEF 1.0:")
    else:  # accepted: it must then run like numpy would
        assert graph.outputs == ["y"]


@pytest.mark.parametrize("extent", [2**31, 4294967296, 4294967299, 2**40, 2**62, 2**63, 2**64 + 5])
def test_nnef1_integers_the_parser_would_cut_to_32_bits_are_located_errors(tmp_path, extent):
    # issue 21 item 6: the nnef package's parser keeps 32 bits of an integer: `shape = [4294967299]`
    # loaded as shape (3,), 4294967296 and 2**62 as (0,), with no error
    from uopviz.nnef.nnef1.loader import loads_nnef1

    text = f"version 1.0;\ngraph G( x ) -> ( y )\n{{ x = external(shape = [2, {extent}]); y = relu(x); }}"
    folder = nnef1_folder(tmp_path, text)
    with pytest.raises(NNEFError, match=f"the integer {extent} is above 2147483647") as caught:
        nnef.load(folder)
    error = caught.value
    column = text.split("\n")[2].index(str(extent)) + 1
    assert (error.file, error.line, error.column) == (str(folder / "graph.nnef"), 3, column)
    with pytest.raises(NNEFError, match=str(extent)) as caught:
        loads_nnef1(text)
    assert (caught.value.file, caught.value.line) == ("<string>", 3)
    for elsewhere in (f"y = pad(x, padding = [(0, 0), (0, {extent})]);",
                      f"y = reshape(x, shape = [{extent}]);"):
        with pytest.raises(NNEFError, match=str(extent)):
            loads_nnef1(text.replace("y = relu(x);", elsewhere))


def test_nnef1_integers_that_fit_32_bits_keep_their_value_and_digits_elsewhere_are_no_integers():
    from uopviz.nnef.nnef1.loader import loads_nnef1

    text = ("version 1.0; # 4294967299 in a comment\n"
            "graph G( x ) -> ( y ) { x = external(shape = [2147483647]); y = mul(x, 4294967299.0); }")
    graph = loads_nnef1(text)
    assert graph.tensors["x"].shape == (2147483647,)


def test_nnef1_quantization_integers_are_checked_in_the_quantization_file(tmp_path):
    text = "version 1.0;\ngraph G( x ) -> ( y ) { x = external(shape = [2]); y = neg(x); }"
    folder = nnef1_folder(tmp_path, text)
    (folder / "graph.quant").write_text('"x": linear_quantize(min = 0.0, max = 1.0, bits = 4294967304);\n')
    with pytest.raises(NNEFError, match="4294967304") as caught:
        nnef.load(folder)
    assert caught.value.file == str(folder / "graph.quant") and caught.value.line == 1


def test_a_graph_file_that_links_outside_the_model_folder_is_refused(tmp_path):
    # issue 11: graph.nnef symlinked to a file outside the folder was followed
    outside = tmp_path / "elsewhere.nnef"
    outside.write_text("version 1.0; graph G( x ) -> ( y ) { x = external(shape = [2]); y = relu(x); }")
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "graph.nnef").symlink_to(outside)
    with pytest.raises(NNEFError, match="outside the model folder"):
        nnef.load(folder)


def test_a_quantization_file_is_confined_checked_and_its_errors_located(tmp_path):
    # graph.quant beside graph.nnef is read like the graph file: inside the folder, as UTF-8, and a
    # parse error of it names graph.quant (not graph.nnef) with the line and column
    text = "version 1.0;\ngraph G( x ) -> ( y ) { x = external(shape = [2]); y = neg(x); }"
    folder = nnef1_folder(tmp_path, text)
    quant = folder / "graph.quant"
    quant.write_text('"x": linear_quantize(min = 0.0, max = 1.0, bits = 8);\n"y" foo;\n')
    with pytest.raises(NNEFError, match="expected token") as caught:
        nnef.load(folder)
    assert (caught.value.file, caught.value.line) == (str(quant), 2)
    valid = b'"x": linear_quantize(min = 0.0, max = 1.0, bits = 8); '
    quant.write_bytes(valid + b"\xff")
    with pytest.raises(NNEFError, match="not UTF-8") as caught:
        nnef.load(folder)
    assert (caught.value.file, caught.value.line, caught.value.column) == (str(quant), 1, len(valid) + 1)
    outside = tmp_path / "elsewhere.quant"
    outside.write_text('"x": linear_quantize(min = 0.0, max = 1.0, bits = 8);')
    quant.unlink()
    quant.symlink_to(outside)
    with pytest.raises(NNEFError, match="outside the model folder"):
        nnef.load(folder)
    quant.unlink()
    quant.write_text('"x": linear_quantize(min = 0.0, max = 1.0, bits = 8);')
    x = np.float32([0.5, -2.0])
    np.testing.assert_array_equal(nnef.load(folder).run({"x": x})["y"], -x)


def test_the_child_expands_own_fragments_and_corrects_the_sample_shape():
    # the whole nnef package's work runs in the child: the answer holds only standard operations
    # (the graph's own fragment expanded) and sample's output takes argmax_pool's pooled shape
    from uopviz.nnef.nnef1 import process as nnef1_process

    text = (
        "version 1.0;\nextension KHR_enable_fragment_definitions;\n"
        "fragment twice( x: tensor<scalar> ) -> ( y: tensor<scalar> ) { y = add(x, x); }\n"
        "graph G( x ) -> ( y, s ) { x = external<scalar>(shape = [1, 1, 4, 4]); y = twice(x);\n"
        "i = argmax_pool(x, size = [1, 1, 2, 2], stride = [1, 1, 2, 2]);\n"
        "s = sample(x, i, size = [1, 1, 2, 2], stride = [1, 1, 2, 2]); }\n"
    )
    kind, encoded = nnef1_process._answer({"text": text, "path": None})
    assert kind == "ok"
    graph = nnef1_process.decode(encoded)
    assert [op.name for op in graph.operations] == ["external", "add", "argmax_pool", "sample"]
    assert graph.tensors["y"].shape == [1, 1, 4, 4] and graph.tensors["s"].shape == [1, 1, 2, 2]
    bodiless = text.replace("{ y = add(x, x); }", ";")
    kind, message = nnef1_process._answer({"text": bodiless, "path": None})
    assert kind == "error" and "twice have no body" in message


def test_a_data_file_symlink_loop_and_an_overlong_label_are_nnef_errors(tmp_path):
    # issue 11: RuntimeError (symlink loop) and OSError (a 300-character label) escaped
    folder = tmp_path / "loop"
    folder.mkdir()
    (folder / "main.sknd").write_text(graph_text("y = math.add(x, w);", extra="@variable { w: real[3]; }"))
    (folder / "w.dat").symlink_to(folder / "w.dat")
    with pytest.raises(NNEFError, match="w.dat"):
        nnef.load(folder)
    label = "a" * 300
    long = nnef1_folder(tmp_path, "version 1.0; graph G( x ) -> ( y ) { x = external(shape = [2]); "
                                  f"w = variable(shape = [2], label = '{label}'); y = add(x, w); }}")
    with pytest.raises(NNEFError, match="cannot read"):
        nnef.load(long)


# ------------------------------------------------------------------------------------------------
# archives and source files


def write_archive(path, members: dict[str, bytes], mode: str = "w:gz") -> None:
    with tarfile.open(path, mode) as archive:
        for name, payload in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            archive.addfile(info, io.BytesIO(payload))


def test_an_archive_member_the_model_never_reads_is_not_unpacked(tmp_path, monkeypatch):
    # issue 11: a 309 KB .tgz holding a 300 MB member was unpacked in full
    main = graph_text("y = math.add(x, w);", extra="@variable { w: real[3]; }").encode()
    weights = data.tensor_bytes(np.float32([1, 2, 3]))
    archive = tmp_path / "model.tgz"
    write_archive(archive, {"main.sknd": main, "w.dat": weights, "unused.dat": bytes(300 << 20)})
    assert archive.stat().st_size < 1 << 20
    unpacked = []
    original = loader._ArchiveFolder._unpack

    def recording(self, member, destination):
        unpacked.append(member.name)
        original(self, member, destination)

    monkeypatch.setattr(loader._ArchiveFolder, "_unpack", recording)
    graph = nnef.load(archive)
    assert sorted(unpacked) == ["main.sknd", "w.dat"]
    np.testing.assert_allclose(graph.run({"x": np.ones(3, np.float32)})["y"], [2, 3, 4])


def test_archive_members_over_their_caps_are_refused(tmp_path, monkeypatch):
    main = graph_text("y = math.add(x, w);", extra="@variable { w: real[3]; }").encode()
    archive = tmp_path / "big.tgz"
    write_archive(archive, {"main.sknd": main, "w.dat": data.tensor_bytes(np.float32([1, 2, 3]))})
    with memory_limit_set(64), pytest.raises(NNEFError, match="memory limit"):
        nnef.load(archive)
    monkeypatch.setattr(loader, "MAX_TEXT_MEMBER_BYTES", 100)
    with pytest.raises(NNEFError, match="source file may have"):
        nnef.load(archive)


@pytest.mark.parametrize("mode", ["w:xz", "w:gz", "w:bz2"])
def test_a_damaged_compressed_archive_is_an_nnef_error(tmp_path, mode):
    # issue 11: LZMAError escaped from a corrupt archive
    main = graph_text("y = math.add(x, w);", extra="@variable { w: real[3]; }").encode()
    archive = tmp_path / "model.tar.gz"
    write_archive(archive, {"main.sknd": main, "w.dat": np.random.default_rng(0).bytes(50_000)}, mode)
    payload = bytearray(archive.read_bytes())
    for offset in range(len(payload) // 3, len(payload) - 40, 97):
        payload[offset] ^= 0x5A
    archive.write_bytes(bytes(payload))
    with pytest.raises(NNEFError) as caught:
        nnef.load(archive)
    assert caught.value.file == str(archive)


def test_source_files_that_are_not_utf8_are_located_errors(tmp_path):
    # issue 11: UnicodeDecodeError escaped for a non-UTF-8 imported module
    (tmp_path / "main.sknd").write_text(
        "import helper; graph G { @input { x: real[2]; } @output { y: real[2]; } @compose { y = x; } }")
    (tmp_path / "helper.sknd").write_bytes(b"# helper\noperator f { } \xff\xfe")
    with pytest.raises(NNEFError, match="not UTF-8") as caught:
        nnef.load(tmp_path)
    error = caught.value
    assert (error.file, error.line, error.column) == (str(tmp_path / "helper.sknd"), 2, 16)
    (tmp_path / "main.sknd").write_bytes(b"graph G { } \xc3")
    with pytest.raises(NNEFError, match="not UTF-8"):
        nnef.load(tmp_path)


# ------------------------------------------------------------------------------------------------
# shrunk fuzz findings (tests/fuzz/test_fuzz_skriptnd.py)


@pytest.mark.parametrize(
    "text,name",
    [
        ("import nn; graph G { @input { x: real[1, 2, 6, 6]; } @output { y: real[1, 2, 3,  is ]; } "
         "@compose { y = nn.max_pool{size = 2, stride = 2, padding = 0}(x); } }", "is"),
        ("import math; graph G { @input { x: real[3]; } @output { y: real[n - n]; } "
         "@compose { y = math.exp(x); } }", "n"),
        ("import math; graph G { @attrib { batch: int = 1; classesclasses: int = 10; } "
         "@input { x: real[batch, 3]; } @output { y: real[batch, classes]; } @compose { y = math.exp(x); } }",
         "classes"),
    ],
    ids=["keyword-extent", "n-minus-n", "renamed-attribute"],
)
def test_an_unbound_name_in_an_output_shape_is_a_located_error(text, name):
    # expressions.Unknown (a control-flow signal of the evaluator) escaped from the composer
    with pytest.raises(NNEFError, match=f"'{name}' has no value") as caught:
        nnef.loads(text)
    column = caught.value.column
    assert caught.value.line == 1 and text[column - 1:].startswith(name) and column > text.index("@output")


def test_an_extent_past_64_bit_indexing_is_a_located_error():
    text = graph_text("y = math.exp(x);", "x: real[n];", "y: real[n];", extra="@attrib { n: int = 3; }")
    with pytest.raises(NNEFError, match="too large extent") as caught:
        nnef.loads(text, attribs={"n": 2**70})
    assert caught.value.line == 1
    assert nnef.loads(text, attribs={"n": 5}).tensors["x"].shape == (5,)


def test_run_data_that_cannot_become_the_tensor_type_is_an_nnef_error():
    graph = nnef.loads(graph_text("y = math.exp(x);"))
    with pytest.raises(NNEFError, match="'x' is float32 data"):
        graph.run({"x": np.array(["a", "b", "c"])})
    np.testing.assert_allclose(graph.run({"x": [0, 1, 2]})["y"], np.exp([0, 1, 2]), rtol=1e-6)


@pytest.mark.parametrize("raised", [TypeError("bad operand"), ZeroDivisionError("division by zero")])
def test_python_errors_of_the_nnef_shape_inference_become_nnef_errors(monkeypatch, raised):
    # issue 11: the nnef package's shape inference raises more than nnef.Error; the child process
    # answers every exception as an error message, which the caller raises as an NNEFError
    import nnef as khronos

    from uopviz.nnef.nnef1 import process as nnef1_process

    def failing(graph):
        raise raised

    monkeypatch.setattr(khronos, "infer_shapes", failing)
    text = "version 1.0; graph G( x ) -> ( y ) { x = external(shape = [2]); y = relu(x); }"
    kind, message = nnef1_process._answer({"text": text, "path": None})
    assert kind == "error" and type(raised).__name__ in message
    monkeypatch.setattr(nnef1_process._PARSER, "request", lambda payload, timeout_s: (kind, message))
    with pytest.raises(NNEFError, match=type(raised).__name__):
        nnef1_process.parse_nnef1(text, None, "<string>")


def test_a_hung_nnef_parser_is_an_nnef_error(monkeypatch):
    from uopviz.nnef.nnef1 import process as nnef1_process

    monkeypatch.setattr(nnef1_process._PARSER, "request", lambda payload, timeout_s: None)
    with pytest.raises(NNEFError, match="did not finish within 60 s"):
        nnef1_process.parse_nnef1("version 1.0;", None, "<string>")


@pytest.mark.parametrize("extent", ['"a"', "'3'", "2.5", "true"])
def test_an_extent_that_is_not_an_int_is_a_located_error(extent):
    # issue 11: ValueError/AttributeError for string extents
    for text in (graph_text("y = math.exp(x);", f"x: real[{extent}];", "y: real[2];"),
                 graph_text("y = math.exp(x);", extra=f"@constant {{ c: real[{extent}] = 1.0; }}")):
        with pytest.raises(NNEFError) as caught:
            nnef.loads(text)
        assert caught.value.line == 1 and caught.value.column is not None


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.uint16, np.int64, np.bool_])
@pytest.mark.parametrize("shape", [(0,), (0, 3), (3, 0), (2, 0, 2)])
def test_tensor_files_with_a_zero_extent_read_as_empty_arrays(dtype, shape):
    # issue 11: ValueError from .dat headers with a zero extent
    array = data.read_tensor(data.tensor_bytes(np.zeros(shape, dtype)))
    assert array.shape == shape and array.dtype == np.dtype(dtype)


def test_a_constant_formula_over_too_many_elements_is_refused_at_once():
    # compose-time work bounded: a constant computed element by element takes ~30 us per element
    big = graph_text("y = math.exp(x);", extra="@constant { I: real[4096, 4096] = i == j ? 1.0 : 0.0, "
                                               "i < 4096, j < 4096; }")
    with pytest.raises(NNEFError, match="element by element"):
        nnef.loads(big)
    small = graph_text("y = math.exp(x);",
                       extra="@constant { I: real[3, 3] = i == j ? 1.0 : 0.0, i < 3, j < 3; }")
    np.testing.assert_array_equal(nnef.loads(small).tensors["I"].data, np.eye(3))


def test_a_compile_time_loop_count_is_bounded():
    loop = "y = with s = x unroll..({count}) math.add(s, x);"
    with pytest.raises(NNEFError, match="at most 4096"):
        nnef.loads(graph_text(loop.format(count=2**31)))
    graph = nnef.loads(graph_text(loop.format(count=3)))
    np.testing.assert_allclose(graph.run({"x": np.ones(3, np.float32)})["y"], 4.0)
