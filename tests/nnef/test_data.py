"""NNEF ``.dat`` tensor files: round trips for every item type and broken headers.

The expected header bytes are assembled here with ``struct`` from the layout in
/work/shared/spec/README.md, independently of the writer under test.
"""

from __future__ import annotations

import io
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from uopviz.nnef.data import ItemType, read_header, read_tensor, tensor_bytes, write_tensor
from uopviz.nnef.errors import NNEFError

DTYPES = ["float16", "float32", "float64", "int8", "int16", "int32", "int64",
          "uint8", "uint16", "uint32", "uint64", "bool"]  # fmt: skip
SHAPES = [(), (1,), (7,), (3, 4), (2, 3, 5), (2, 1, 3, 1, 2), (1, 1, 1, 1, 1, 1, 1, 2), (0,), (4, 0, 2)]
ITEM_CODES = {"f": 0, "u": 1, "i": 4, "b": 5}


def header(
    length: int, shape: tuple[int, ...], bits: int, code: int, *, magic: bytes = b"\x4e\xef",
    version: tuple[int, int] = (1, 0), rank: int | None = None, reserved: bytes = b"",
) -> bytes:
    """A header written field by field, following the documented layout."""
    extents = list(shape) + [0] * (8 - len(shape))
    raw = magic + bytes(version) + struct.pack("<II", length, len(shape) if rank is None else rank)
    raw += struct.pack("<8I", *extents[:8]) + struct.pack("<II", bits, code)
    raw += reserved + bytes(128 - len(raw) - len(reserved))
    assert len(raw) == 128
    return raw


def sample(dtype: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Random data of a dtype and shape, covering the value range."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith("float"):
        return (rng.standard_normal(shape) * 100).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_roundtrip_every_dtype_and_shape(dtype: str, shape: tuple[int, ...], tmp_path: Path) -> None:
    array = sample(dtype, shape)
    path = tmp_path / "t.dat"
    write_tensor(path, array)
    back = read_tensor(path)
    assert back.dtype == np.dtype(dtype) and back.shape == shape
    np.testing.assert_array_equal(back, array)
    assert back.flags.writeable
    assert np.array_equal(read_tensor(path.read_bytes()), array)
    assert np.array_equal(read_tensor(str(path)), array)


@pytest.mark.parametrize("dtype", DTYPES)
def test_header_fields_follow_the_layout(dtype: str) -> None:
    array = sample(dtype, (2, 3))
    raw = tensor_bytes(array)
    bits = 1 if dtype == "bool" else np.dtype(dtype).itemsize * 8
    length = 1 if dtype == "bool" else 6 * bits // 8
    assert raw[:128] == header(length, (2, 3), bits, ITEM_CODES[np.dtype(dtype).kind])
    assert len(raw) == 128 + length


def test_data_is_little_endian_row_major() -> None:
    array = np.array([[1, 2], [3, 0x01020304]], dtype=">u4")  # big-endian input on purpose
    raw = tensor_bytes(array)
    assert raw[128:] == struct.pack("<4I", 1, 2, 3, 0x01020304)
    assert read_tensor(raw).dtype == np.dtype("uint32")
    floats = np.array([1.5, -2.0], dtype=np.float32)
    assert tensor_bytes(floats)[128:] == struct.pack("<2f", 1.5, -2.0)
    transposed = np.arange(6, dtype=np.int16).reshape(2, 3).T  # not C-contiguous
    assert tensor_bytes(transposed)[128:] == struct.pack("<6h", 0, 3, 1, 4, 2, 5)


def test_bool_is_bit_packed_most_significant_bit_first() -> None:
    array = np.array([True, False, False, False, False, False, False, True, True, False, True])
    raw = tensor_bytes(array)
    assert raw[:128] == header(2, (11,), 1, 5)
    assert raw[128:] == bytes([0b10000001, 0b10100000])
    np.testing.assert_array_equal(read_tensor(raw), array)


def test_rank_zero() -> None:
    raw = tensor_bytes(np.float32(2.5))
    assert raw[:128] == header(4, (), 32, 0)
    value = read_tensor(raw)
    assert value.shape == () and value.dtype == np.float32 and value == 2.5
    flag = read_tensor(tensor_bytes(np.bool_(True)))
    assert flag.shape == () and bool(flag) is True


@pytest.mark.parametrize(
    ("dtype", "code"), [("uint8", 2), ("uint16", 2), ("int8", 3), ("int32", 3), ("int64", 3)]
)
def test_quantized_items_read_as_integers_of_their_width(dtype: str, code: int) -> None:
    array = sample(dtype, (4, 5))
    raw = tensor_bytes(array, quantized=True)
    assert struct.unpack_from("<I", raw, 48)[0] == code
    info = read_header(raw)
    assert info.quantized and info.item_type == ItemType(code) and info.shape == (4, 5)
    back = read_tensor(raw)
    assert back.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(back, array)


def test_headers_written_by_other_tools() -> None:
    # An 8-bit quantized unsigned tensor and an NNEF 1.0 "signed" flag in the first reserved word.
    data = bytes([1, 2, 255])
    np.testing.assert_array_equal(read_tensor(header(3, (3,), 8, 2) + data), np.array([1, 2, 255], np.uint8))
    signed = header(3, (3,), 8, 1, reserved=struct.pack("<I", 1)) + data
    np.testing.assert_array_equal(read_tensor(signed), np.array([1, 2, -1], np.int8))
    version_two = header(4, (1,), 32, 4, version=(2, 0)) + struct.pack("<i", -7)
    assert read_tensor(version_two).tolist() == [-7]


def test_streams() -> None:
    array = sample("float32", (3, 2))
    buffer = io.BytesIO()
    write_tensor(buffer, array)
    buffer.seek(0)
    np.testing.assert_array_equal(read_tensor(buffer), array)


@given(
    hnp.arrays(
        dtype=st.sampled_from(DTYPES).map(np.dtype),
        shape=hnp.array_shapes(min_dims=0, max_dims=8, min_side=0, max_side=4),
    )
)
def test_roundtrip_property(array: np.ndarray) -> None:
    back = read_tensor(tensor_bytes(array))
    assert back.dtype == array.dtype and back.shape == array.shape
    np.testing.assert_array_equal(back, array)


# ------------------------------------------------------------------------------------------------
# Broken inputs: every one is an NNEFError naming the file and the problem.

GOOD = header(8, (2,), 32, 0) + struct.pack("<2f", 1.0, 2.0)


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (b"", "truncated tensor file: 0 bytes"),
        (GOOD[:100], "truncated tensor file: 100 bytes"),
        (b"NNEF" + GOOD[4:], "bad magic 0x4E 0x4E"),
        (b"\x4e\xee" + GOOD[2:], "bad magic 0x4E 0xEE"),
        (header(8, (2,), 32, 0, version=(3, 1)) + GOOD[128:], "unsupported tensor file version 3.1"),
        (header(8, (2,), 32, 0, rank=9) + GOOD[128:], "tensor rank 9 in header exceeds the maximum of 8"),
        (header(8, (2,), 32, 6) + GOOD[128:], "unknown item type 6"),
        (header(8, (2,), 24, 0) + GOOD[128:], "unsupported bits per item 24 for item type float"),
        (header(8, (2,), 8, 5) + GOOD[128:], "unsupported bits per item 8 for item type bool"),
        (header(8, (2,), 4, 3) + GOOD[128:], "unsupported bits per item 4 for item type quantized_signed"),
        (header(8, (2,), 0, 1) + GOOD[128:], "unsupported bits per item 0 for item type unsigned"),
        (header(12, (2,), 32, 0) + GOOD[128:] + bytes(4),
         "data length 12 in header does not match shape [2]"),
        (header(8, (3,), 32, 0) + GOOD[128:], "does not match shape [3] with 32 bits per item (12 bytes)"),
        (GOOD[:-1], "truncated: header announces 8 data bytes, found 7"),
        (GOOD + b"\0", "has trailing bytes: header announces 8 data bytes, found 9"),
        (header(2**32 - 1, (2**30, 2**30, 2**30), 32, 0),
         "data length 4294967295 in header does not match"),
        (header(4, (1,), 64, 4, rank=0) + bytes(4),
         "does not match shape [] with 64 bits per item (8 bytes)"),
    ],
)
def test_broken_files(raw: bytes, fragment: str, tmp_path: Path) -> None:
    with pytest.raises(NNEFError) as from_bytes:
        read_tensor(raw)
    assert fragment in from_bytes.value.message and from_bytes.value.file == "<bytes>"
    path = tmp_path / "broken.dat"
    path.write_bytes(raw)
    with pytest.raises(NNEFError) as from_file:
        read_tensor(path)
    assert fragment in from_file.value.message
    assert from_file.value.file == str(path)
    assert str(from_file.value).startswith(f"{path}: ")
    assert (from_file.value.line, from_file.value.column) == (None, None)


def test_huge_header_fails_before_allocating(tmp_path: Path) -> None:
    # 2**32 - 1 bytes announced with a consistent shape; the file has none of them.
    extents = (65535, 65537)
    path = tmp_path / "huge.dat"
    path.write_bytes(header(65535 * 65537, extents, 8, 1))
    with pytest.raises(NNEFError, match="truncated: header announces 4294967295 data bytes, found 0"):
        read_tensor(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(NNEFError) as caught:
        read_tensor(tmp_path / "absent.dat")
    assert caught.value.file.endswith("absent.dat") and "cannot read tensor file" in caught.value.message


@pytest.mark.parametrize(
    ("array", "kwargs", "fragment"),
    [
        (np.zeros((1,) * 9, np.float32), {}, "tensor rank 9 exceeds the maximum of 8"),
        (np.zeros(3, np.complex64), {}, "cannot store dtype complex64"),
        (np.array(["a"]), {}, "cannot store dtype <U1"),
        (np.zeros(3, np.float32), {"quantized": True}, "quantized tensors must have an integer dtype"),
    ],
)
def test_unwritable_arrays(array: np.ndarray, kwargs: dict, fragment: str, tmp_path: Path) -> None:
    path = tmp_path / "w.dat"
    with pytest.raises(NNEFError) as caught:
        write_tensor(path, array, **kwargs)
    assert fragment in caught.value.message and caught.value.file == str(path)
    assert not path.exists()


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int8", "int32", "uint64"])
def test_files_read_by_path_are_memory_mapped_copy_on_write(dtype: str, tmp_path: Path) -> None:
    array = (np.arange(24).reshape(2, 3, 4) * 3 - 7).astype(dtype)
    path = tmp_path / "weights.dat"
    write_tensor(path, array)
    mapped = read_tensor(path)
    assert mapped.dtype == array.dtype and mapped.shape == array.shape
    np.testing.assert_array_equal(mapped, array)
    np.testing.assert_array_equal(mapped, read_tensor(path.read_bytes()))  # the same items as read
    assert isinstance(mapped.base, np.memmap) or isinstance(getattr(mapped.base, "base", None), np.memmap)
    before = path.read_bytes()
    mapped[0, 0, 0] = 1  # writable, but the write stays in this process's copy of the page
    assert mapped[0, 0, 0] == 1 and path.read_bytes() == before
    np.testing.assert_array_equal(read_tensor(path), array)


def test_bool_files_by_path_are_unpacked_not_mapped(tmp_path: Path) -> None:
    array = np.array([True, False, True, True, False, False, True, False, True])
    path = tmp_path / "mask.dat"
    write_tensor(path, array)
    read = read_tensor(path)
    np.testing.assert_array_equal(read, array)
    assert read.flags.writeable


# ------------------------------------------------------------------------------------------------
# a data file against the variable it is declared as (issue 21 item 6: an integer file of a real
# variable was read as those integers, with no error)

SKRIPTND_MODEL = ("import math; graph G {{ @input {{ x: real[2, 3]; }} @output {{ y: real[2, 3]; }} "
                  "@variable {{ w: {declared}; }} @compose {{ y = math.add(x, {use}); }} }}")
NNEF1_MODEL = ("version 1.0; graph G( x ) -> ( y ) {{ x = external(shape = [2, 3]); "
               "w = variable<{scalar}>(shape = {shape}, label = 'w'); y = add(x, {use}); }}")


def _model(tmp_path: Path, version: str, declared: str, array: np.ndarray, quantized: bool = False) -> Path:
    """A model folder of ``version`` declaring ``w`` as ``declared`` (``real[2, 3]``, ...) with
    ``array`` as its data file."""
    element, shape = declared.split("[")
    use = "w" if element == "real" else "x"
    folder = tmp_path / version
    folder.mkdir(parents=True)
    if version == "skriptnd":
        (folder / "main.sknd").write_text(SKRIPTND_MODEL.format(declared=declared, use=use))
    else:
        scalar = {"real": "scalar", "int": "integer", "bool": "logical"}[element]
        (folder / "graph.nnef").write_text(NNEF1_MODEL.format(scalar=scalar, shape=f"[{shape}", use=use))
    write_tensor(folder / "w.dat", array, quantized=quantized)
    return folder


@pytest.mark.parametrize("version", ["skriptnd", "nnef1"])
@pytest.mark.parametrize(
    ("declared", "array", "fragments"),
    [
        ("real[2, 3]", sample("int32", (2, 3)), ["declared real", "signed items of 32 bits"]),
        ("real[2, 3]", sample("uint8", (2, 3)), ["declared real", "unsigned items of 8 bits"]),
        ("real[2, 3]", np.ones((2, 3), bool), ["declared real", "bool items of 1 bits"]),
        ("int[2, 3]", np.ones((2, 3), np.float32), ["declared int", "float items of 32 bits"]),
        ("bool[2, 3]", np.ones((2, 3), np.int8), ["declared bool", "signed items of 8 bits"]),
        ("real[2, 3]", np.ones((3, 2), np.float32), ["declared with shape [2, 3]", "holds shape [3, 2]"]),
        ("real[2, 3]", np.ones(6, np.float32), ["declared with shape [2, 3]", "holds shape [6]"]),
    ],
    ids=["int32-for-real", "uint8-for-real", "bool-for-real", "float-for-int", "int8-for-bool", "transposed",
         "flat"],
)
def test_a_data_file_that_contradicts_its_declaration_is_an_error_naming_it(
    version: str, declared: str, array: np.ndarray, fragments: list[str], tmp_path: Path
) -> None:
    from uopviz import nnef

    folder = _model(tmp_path, version, declared, array)
    with pytest.raises(NNEFError) as caught:
        nnef.load(folder)
    assert caught.value.file == str((folder / "w.dat").resolve())
    for fragment in fragments:
        assert fragment in caught.value.message


@pytest.mark.parametrize("version", ["skriptnd", "nnef1"])
def test_data_files_that_match_their_declaration_still_load(version: str, tmp_path: Path) -> None:
    from uopviz import nnef

    x = sample("float32", (2, 3))
    cases = [("real[2, 3]", sample("float32", (2, 3), 1), False),
             ("real[2, 3]", sample("uint8", (2, 3)), True),
             ("int[2, 3]", sample("int16", (2, 3)), False)]
    for index, (declared, array, quantized) in enumerate(cases):
        folder = _model(tmp_path / str(index), version, declared, array, quantized)
        graph = nnef.load(folder)
        np.testing.assert_array_equal(graph.tensors["w"].data, array.astype(graph.tensors["w"].numpy_dtype))
        expected = x + array if declared.startswith("real") else x + x  # an int w is only loaded
        np.testing.assert_allclose(graph.run({"x": x})["y"], expected.astype(np.float32), rtol=1e-6)
