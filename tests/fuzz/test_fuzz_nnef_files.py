"""Fuzzing NNEF files (issue 11): ``.dat`` tensor headers, NNEF 1.0 folders (the nnef package's parser
runs in a child process) and model archives. Only NNEFError may escape; an accepted ``.dat`` file
gives an array of its header's shape; no archive writes outside its folder."""

from __future__ import annotations

import io
import struct
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from uopviz import nnef
from uopviz.nnef import NNEFError
from uopviz.nnef.data import HEADER_SIZE, read_header, read_tensor, tensor_bytes
from uopviz.nnef.nnef1.loader import loads_nnef1

from .fuzzing import budget, mutated, record

# ------------------------------------------------------------------------------------------------
# .dat headers

_U32_EDGES = st.sampled_from([0, 1, 2, 3, 7, 8, 9, 16, 32, 64, 255, 65536, 2**31 - 1, 2**31, 2**32 - 1])
_ARRAYS = [
    np.arange(6, dtype=np.float32).reshape(2, 3), np.zeros((0, 3), np.float16), np.ones(5, np.bool_),
    np.arange(-4, 4, dtype=np.int8), np.arange(12, dtype=np.uint16).reshape(3, 4), np.float64([1.5]),
    np.zeros((1, 0), np.int32), np.int64([2**40, -3]),
]


@st.composite
def dat_files(draw: st.DrawFn) -> bytes:
    """A valid tensor file with header fields and data length mutated."""
    raw = bytearray(tensor_bytes(draw(st.sampled_from(_ARRAYS))))
    for _ in range(draw(st.integers(1, 4))):
        if len(raw) < HEADER_SIZE:  # cut short by an earlier mutation: the header's fields stay writable
            raw += bytes(HEADER_SIZE - len(raw))
        field = draw(st.sampled_from(["magic", "version", "length", "rank", "extent", "bits", "type",
                                      "reserved", "data"]))
        if field == "magic":
            raw[draw(st.integers(0, 1))] = draw(st.integers(0, 255))
        elif field == "version":
            raw[2:4] = bytes([draw(st.integers(0, 4)), draw(st.integers(0, 255))])
        elif field in ("length", "rank", "bits", "type"):
            offset = {"length": 4, "rank": 8, "bits": 44, "type": 48}[field]
            struct.pack_into("<I", raw, offset, draw(_U32_EDGES))
        elif field == "extent":
            struct.pack_into("<I", raw, 12 + 4 * draw(st.integers(0, 7)), draw(_U32_EDGES))
        elif field == "reserved":
            struct.pack_into("<I", raw, 52 + 4 * draw(st.integers(0, 18)), draw(_U32_EDGES))
        else:
            cut = draw(st.integers(0, len(raw) + 8))
            raw = raw[:cut] if cut <= len(raw) else raw + bytes(cut - len(raw))
    return bytes(raw)


@budget(default=80, slow=2000)
@given(dat_files())
def test_mutated_tensor_files_read_or_raise_nnef_errors(raw):
    try:
        header = read_header(raw)
        array = read_tensor(raw)
    except NNEFError as error:
        record("dat header", error)
        return
    record("dat header", None)
    assert array.shape == tuple(header.shape) and len(raw) == HEADER_SIZE + header.data_length


# ------------------------------------------------------------------------------------------------
# NNEF 1.0 text

NNEF1_GRAPHS = [
    "version 1.0;\ngraph G( x ) -> ( y )\n{\n    x = external(shape = [2, 3]);\n    y = relu(x);\n}\n",
    "version 1.0;\ngraph G( x ) -> ( y )\n{\n    x = external(shape = [1, 2, 4, 4]);\n"
    "    w = variable(shape = [3, 2, 3, 3], label = 'w');\n"
    "    y = conv(x, w, 0.0, padding = [(1, 1), (1, 1)]);\n}\n",
    "version 1.0;\ngraph G( x ) -> ( y )\n{\n    x = external(shape = [4, 6]);\n"
    "    t = reshape(x, shape = [6, 4]);\n    y = transpose(t, axes = [1, 0]);\n}\n",
    "version 1.0;\ngraph G( a, b ) -> ( y )\n{\n    a = external(shape = [2, 3]);\n"
    "    b = external(shape = [3, 5]);\n    y = matmul(a, b);\n}\n",
    "version 1.0;\ngraph G( x ) -> ( y )\n{\n    x = external(shape = [1, 2, 6, 6]);\n"
    "    y = max_pool(x, size = [1, 1, 2, 2], stride = [1, 1, 2, 2]);\n}\n",
    "version 1.0;\ngraph G( x ) -> ( y, z )\n{\n    x = external(shape = [3, 4]);\n"
    "    y = sum_reduce(x, axes = [1]);\n    [z, w] = split(x, axis = 1, ratios = [1, 1]);\n}\n",
]


@pytest.mark.parametrize("text", NNEF1_GRAPHS, ids=range(len(NNEF1_GRAPHS)))
def test_the_seed_nnef1_graphs_load(text):
    assert loads_nnef1(text).outputs  # the mutations start from valid graphs


@budget(default=40, slow=1500)
@given(st.sampled_from(NNEF1_GRAPHS).flatmap(mutated))
def test_mutated_nnef1_graphs_load_or_raise_nnef_errors(text):
    try:
        loads_nnef1(text)
    except NNEFError as error:
        record("nnef 1.0 graph", error)
        return
    record("nnef 1.0 graph", None)


# ------------------------------------------------------------------------------------------------
# archives

_MAIN = (b"import math; graph G { @input { x: real[3]; } @output { y: real[3]; } @variable { w: real[3]; } "
         b"@compose { y = math.add(x, w); } }")
_GRAPH_NNEF = NNEF1_GRAPHS[0].encode()
_NAMES = st.sampled_from(["main.sknd", "graph.nnef", "w.dat", "model/main.sknd", "model/w.dat", "../x.sknd",
                          "/abs.sknd", "a/../../b.dat", "unused.dat", "deep/" * 20 + "f.dat", "x" * 300,
                          "w.dat/", "main.sknd\x00"])
_PAYLOADS = st.sampled_from([_MAIN, _GRAPH_NNEF, tensor_bytes(np.float32([1, 2, 3])), b"", b"\xff\xfe\x00",
                             tensor_bytes(np.zeros((2, 2), np.int8)), b"NEF" * 50])


@st.composite
def archives(draw: st.DrawFn) -> bytes:
    """A tar archive (compressed or not) of members with hostile names, kinds and payloads, maybe
    damaged."""
    buffer = io.BytesIO()
    mode = draw(st.sampled_from(["w", "w:gz", "w:bz2", "w:xz"]))
    with tarfile.open(fileobj=buffer, mode=mode) as archive:
        if draw(st.booleans()):  # a valid model for the hostile members to sit beside
            for name, payload in (("main.sknd", _MAIN), ("w.dat", tensor_bytes(np.float32([1, 2, 3])))):
                info = tarfile.TarInfo(name)
                info.size = len(payload)
                archive.addfile(info, io.BytesIO(payload))
        for _ in range(draw(st.sampled_from([0, 0, 1, 2, 4]))):
            info = tarfile.TarInfo(draw(_NAMES))
            kind = draw(st.sampled_from([tarfile.REGTYPE] * 4 + [tarfile.DIRTYPE, tarfile.SYMTYPE,
                                                                  tarfile.LNKTYPE, tarfile.FIFOTYPE]))
            info.type = kind
            payload = draw(_PAYLOADS) if kind == tarfile.REGTYPE else b""
            info.size = len(payload)
            if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
                info.linkname = draw(st.sampled_from(["/etc/passwd", "../outside", "main.sknd"]))
            archive.addfile(info, io.BytesIO(payload))
    raw = bytearray(buffer.getvalue())
    for _ in range(draw(st.sampled_from([0, 0, 1, 3]))):
        if raw:
            raw[draw(st.integers(0, len(raw) - 1))] = draw(st.integers(0, 255))
    return bytes(raw)


@budget(default=25, slow=600)
@given(archives(), st.sampled_from([".tgz", ".tar.gz", ".tar"]))
def test_hostile_archives_load_or_raise_nnef_errors(raw, suffix):
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "inside").mkdir()
        path = root / "inside" / f"model{suffix}"
        path.write_bytes(raw)
        try:
            nnef.load(path)
        except NNEFError as error:
            record("archive", error)
        else:
            record("archive", None)
        outside = sorted(p.name for p in root.iterdir())
        assert outside == ["inside"], "an archive wrote outside its folder"
