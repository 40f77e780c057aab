"""NNEF tensor data files (``.dat``), shared by NNEF 1.0 and 2.0.

Layout (all integers little-endian)::

    bytes 0-1     magic 0x4E 0xEF
    bytes 2-3     version major, minor (this writer: 1.0)
    bytes 4-7     u32 data length in bytes
    bytes 8-11    u32 rank (at most 8)
    bytes 12-43   eight u32 extents, zero padded after the rank
    bytes 44-47   u32 bits per item
    bytes 48-51   u32 item type: 0 float, 1 unsigned int, 2 quantized unsigned,
                  3 quantized signed, 4 signed int, 5 bool
    bytes 52-127  reserved (zero)
    then the items in row-major order; bool items are bit-packed, most significant bit first.

:func:`read_tensor` checks the whole header against the size of the input *before* allocating
anything, so a corrupt or hostile file fails with an :class:`~uopviz.nnef.errors.NNEFError` that
names the file and the exact problem instead of exhausting memory. Quantized types read as the
unsigned / signed integers of their bit width; :func:`read_header` tells them apart.  A file
given by path whose items need no conversion is memory-mapped (copy-on-write) instead of read.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum
from math import prod
from pathlib import Path
from typing import BinaryIO

import numpy as np

from uopviz.nnef.errors import NNEFError
from uopviz.nnef.load_recording import note_read

__all__ = [
    "DECLARED_ITEM_TYPES", "HEADER_SIZE", "MAX_RANK", "ItemType", "TensorHeader", "check_declared",
    "inside_folder", "read_header", "read_tensor", "read_variable", "tensor_bytes", "write_tensor",
]  # fmt: skip

HEADER_SIZE = 128
MAX_RANK = 8
MAGIC = b"\x4e\xef"
_MAX_U32 = 2**32 - 1
_KNOWN_MAJOR_VERSIONS = (1, 2)


class ItemType(IntEnum):
    """The item type code of a ``.dat`` header."""

    FLOAT = 0
    UNSIGNED = 1
    QUANTIZED_UNSIGNED = 2
    QUANTIZED_SIGNED = 3
    SIGNED = 4
    BOOL = 5


# (item type, bits) -> numpy type; bool (1 bit, packed) is handled on its own.
_NUMPY_TYPES: dict[tuple[ItemType, int], type[np.generic]] = {
    (ItemType.FLOAT, 16): np.float16,
    (ItemType.FLOAT, 32): np.float32,
    (ItemType.FLOAT, 64): np.float64,
    **{(ItemType.UNSIGNED, bits): np.dtype(f"u{bits // 8}").type for bits in (8, 16, 32, 64)},
    **{(ItemType.QUANTIZED_UNSIGNED, bits): np.dtype(f"u{bits // 8}").type for bits in (8, 16, 32, 64)},
    **{(ItemType.SIGNED, bits): np.dtype(f"i{bits // 8}").type for bits in (8, 16, 32, 64)},
    **{(ItemType.QUANTIZED_SIGNED, bits): np.dtype(f"i{bits // 8}").type for bits in (8, 16, 32, 64)},
}
_SUPPORTED_BITS = {
    item_type: sorted(bits for kind, bits in _NUMPY_TYPES if kind == item_type) for item_type in ItemType
}
_SUPPORTED_BITS[ItemType.BOOL] = [1]
Source = str | os.PathLike | bytes | bytearray | memoryview | BinaryIO


@dataclass(frozen=True)
class TensorHeader:
    """The decoded header of a ``.dat`` file."""

    version: tuple[int, int]
    shape: tuple[int, ...]
    bits: int
    item_type: ItemType
    data_length: int

    @property
    def dtype(self) -> np.dtype:
        """The numpy dtype the items are read as (native byte order)."""
        if self.item_type is ItemType.BOOL:
            return np.dtype(np.bool_)
        return np.dtype(_NUMPY_TYPES[(self.item_type, self.bits)])

    @property
    def quantized(self) -> bool:
        """Whether the items are quantized integers."""
        return self.item_type in (ItemType.QUANTIZED_UNSIGNED, ItemType.QUANTIZED_SIGNED)

    @property
    def count(self) -> int:
        """The number of items (1 for rank 0)."""
        return prod(self.shape)


def _expected_length(count: int, bits: int) -> int:
    """Bytes of data for ``count`` items of ``bits`` each (bit-packed below a byte)."""
    return (count * bits + 7) // 8


def _decode_header(header: bytes, available: int, file: str) -> TensorHeader:
    """Validate the 128 header bytes against ``available`` data bytes; no allocation happens here."""
    if len(header) < HEADER_SIZE:
        raise NNEFError(f"truncated tensor file: {len(header)} bytes, the header alone takes {HEADER_SIZE}",
                        file)  # fmt: skip
    if header[:2] != MAGIC:
        raise NNEFError(f"not an NNEF tensor file: bad magic 0x{header[0]:02X} 0x{header[1]:02X} "
                        "(expected 0x4E 0xEF)", file)  # fmt: skip
    major, minor = header[2], header[3]
    if major not in _KNOWN_MAJOR_VERSIONS:
        raise NNEFError(f"unsupported tensor file version {major}.{minor} (known: 1.x, 2.x)", file)
    data_length, rank = struct.unpack_from("<II", header, 4)
    extents = struct.unpack_from("<8I", header, 12)
    bits, type_code = struct.unpack_from("<II", header, 44)
    if rank > MAX_RANK:
        raise NNEFError(f"tensor rank {rank} in header exceeds the maximum of {MAX_RANK}", file)
    if type_code not in ItemType._value2member_map_:
        raise NNEFError(f"unknown item type {type_code} in header (0 float, 1 unsigned, "
                        "2 quantized unsigned, 3 quantized signed, 4 signed, 5 bool)", file)  # fmt: skip
    item_type = ItemType(type_code)
    if item_type is ItemType.UNSIGNED and struct.unpack_from("<I", header, 52)[0] != 0:
        # NNEF 1.0 writers marked signed integers as type 1 with a non-zero first reserved word.
        item_type = ItemType.SIGNED
    if bits not in _SUPPORTED_BITS[item_type]:
        supported = ", ".join(str(value) for value in _SUPPORTED_BITS[item_type])
        raise NNEFError(f"unsupported bits per item {bits} for item type {item_type.name.lower()} "
                        f"(supported: {supported})", file)  # fmt: skip
    shape = tuple(extents[:rank])
    expected = _expected_length(prod(shape), bits)
    if data_length != expected:
        raise NNEFError(f"data length {data_length} in header does not match shape {list(shape)} with {bits} "
                        f"bits per item ({expected} bytes)", file)  # fmt: skip
    if available != data_length:
        problem = "truncated" if available < data_length else "has trailing bytes"
        raise NNEFError(f"tensor file {problem}: header announces {data_length} data bytes, "
                        f"found {available}", file)  # fmt: skip
    return TensorHeader((major, minor), shape, bits, item_type, data_length)


#: The item types a tensor of each SkriptND element type is stored as: a real tensor's items are
#: floats or quantized integer codes (dequantized by the graph's quantisation), an int tensor's
#: plain integers, a bool tensor's bits.
DECLARED_ITEM_TYPES: dict[str, tuple[ItemType, ...]] = {
    "real": (ItemType.FLOAT, ItemType.QUANTIZED_UNSIGNED, ItemType.QUANTIZED_SIGNED),
    "int": (ItemType.SIGNED, ItemType.UNSIGNED),
    "bool": (ItemType.BOOL,),
}


def check_declared(header: TensorHeader, element: str, shape: Sequence[object], file: str, what: str) -> None:
    """An NNEFError naming ``file`` when the header of ``what`` (e.g. "variable 'w'") contradicts its
    declaration ``element[shape]``: items of another type (an integer file for a real variable would
    otherwise be read as those integers) or another shape.  Extents not known yet are not compared."""
    allowed = DECLARED_ITEM_TYPES.get(element)
    found = f"{header.item_type.name.lower().replace('_', ' ')} items of {header.bits} bits"
    if allowed is not None and header.item_type not in allowed:
        kinds = " or ".join(kind.name.lower().replace("_", " ") for kind in allowed)
        raise NNEFError(f"{what} is declared {element}, but its data file holds {found} (a {element} tensor "
                        f"is stored as {kinds} items)", file)  # fmt: skip
    if all(isinstance(extent, int) for extent in shape) and tuple(shape) != header.shape:
        raise NNEFError(f"{what} is declared with shape {list(shape)}, but its data file holds shape "
                        f"{list(header.shape)} ({found})", file)  # fmt: skip


def _decode_items(header: TensorHeader, data: bytearray) -> np.ndarray:
    """The items of ``data`` as an array of ``header.shape`` (writable, native byte order)."""
    if header.item_type is ItemType.BOOL:
        bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8), count=header.count, bitorder="big")
        return bits.astype(np.bool_).reshape(header.shape)
    little = header.dtype.newbyteorder("<")
    items = np.frombuffer(data, dtype=little, count=header.count)
    return items.astype(header.dtype, copy=False).reshape(header.shape)


def _name_of(source: object) -> str:
    """How errors name a source: its path, or '<bytes>' for in-memory data."""
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    if isinstance(source, (bytes, bytearray, memoryview)):
        return "<bytes>"
    return str(getattr(source, "name", "<stream>"))


def _read_exactly(stream: BinaryIO, count: int) -> bytearray:
    """Read ``count`` bytes into a fresh buffer (shorter only at the end of the stream)."""
    buffer = bytearray(count)
    filled = 0
    with memoryview(buffer) as view:
        while filled < count:
            got = stream.readinto(view[filled:])
            if not got:
                break
            filled += got
    return buffer[:filled] if filled < count else buffer


def _load(source: Source) -> tuple[TensorHeader, bytearray]:
    """Header and data bytes of a ``.dat`` source, validated before the data buffer exists."""
    file = _name_of(source)
    if isinstance(source, (bytes, bytearray, memoryview)):
        raw = memoryview(source).cast("B")
        header = _decode_header(bytes(raw[:HEADER_SIZE]), max(len(raw) - HEADER_SIZE, 0), file)
        return header, bytearray(raw[HEADER_SIZE:])
    if isinstance(source, (str, os.PathLike)):
        try:
            with open(source, "rb") as stream:
                return _load_stream(stream, file, os.fstat(stream.fileno()).st_size)
        except OSError as error:
            raise NNEFError(f"cannot read tensor file: {error.strerror or error}", file) from error
    return _load_stream(source, file, None)


def _load_stream(stream: BinaryIO, file: str, size: int | None) -> tuple[TensorHeader, bytearray]:
    """Header and data from an open binary stream; ``size`` is its total size when known."""
    header_bytes = stream.read(HEADER_SIZE)
    if size is None:
        # Unknown size (pipes): measure what follows without trusting the header's length.
        remaining = stream.read()
        header = _decode_header(header_bytes, len(remaining), file)
        return header, bytearray(remaining)
    header = _decode_header(header_bytes, max(size - HEADER_SIZE, 0), file)
    data = _read_exactly(stream, header.data_length)
    if len(data) != header.data_length:
        raise NNEFError(f"tensor file truncated while reading: expected {header.data_length} data bytes, "
                        f"got {len(data)}", file)  # fmt: skip
    return header, data


def inside_folder(root: Path, candidate: Path, what: str) -> Path:
    """``candidate`` with its links resolved, which must lie inside the (resolved) folder ``root``: a
    model never reads files outside its folder, through ``..`` or a symlink. A symlink loop or a name
    the file system refuses is an NNEFError too."""
    try:
        resolved = candidate.resolve()
        resolved.is_file()  # stats it: a name too long for the file system fails here
    except (OSError, RuntimeError) as error:  # RuntimeError: a symlink loop (Python 3.11)
        raise NNEFError(f"cannot read {what} at {candidate}: {error}", str(candidate)) from None
    if resolved != root and root not in resolved.parents:
        raise NNEFError(f"{what} {candidate} would lie outside the model folder {root}", str(candidate))
    return resolved


def read_header(source: Source) -> TensorHeader:
    """The validated header of a ``.dat`` file (path, bytes or binary stream)."""
    return _load(source)[0]


def read_tensor(source: Source) -> np.ndarray:
    """The tensor stored in a ``.dat`` file (path, bytes or binary stream) as a numpy array.

    Float items read as float16/32/64, (quantized) integers as the signed / unsigned integer
    type of their width, bool items as ``bool``. Raises :class:`NNEFError` (``.file`` set)
    on any inconsistency of the header or the size.
    """
    if isinstance(source, (str, os.PathLike)):
        mapped = _mapped(source)
        # a cached load keeps the file's name, not its items, and reads it again (nnef.load_cache)
        return note_read(mapped if mapped is not None else _decode_items(*_load(source)), read_tensor,
                         os.fspath(source))
    header, data = _load(source)
    return _decode_items(header, data)


def read_variable(path: str | os.PathLike, element: str, shape: Sequence[object], what: str) -> np.ndarray:
    """:func:`read_tensor` of the data file of a declared tensor, its header checked against the
    declaration first (:func:`check_declared`), before any data is read."""
    check_declared(read_header(path), element, shape, _name_of(path), what)
    return read_tensor(path)


def _mapped(path: str | os.PathLike) -> np.ndarray | None:
    """The items of a ``.dat`` file memory-mapped copy-on-write from after its header, when they need
    no conversion (whole-byte items already in the machine's byte order): a model's weights are then
    paged in as kernels read them instead of copied at load time, and the array stays writable
    without ever writing the file (a written page becomes a private copy).  None for the other files
    (bit-packed bools, sub-byte items, a big-endian machine, an empty payload), which are read."""
    file = _name_of(path)
    try:
        with open(path, "rb") as stream:
            size = os.fstat(stream.fileno()).st_size
            header = _decode_header(stream.read(HEADER_SIZE), max(size - HEADER_SIZE, 0), file)
    except OSError as error:
        raise NNEFError(f"cannot read tensor file: {error.strerror or error}", file) from error
    dtype = header.dtype
    if header.item_type is ItemType.BOOL or header.bits % 8 or header.data_length == 0:
        return None
    if dtype.newbyteorder("<") != dtype.newbyteorder("="):
        return None
    try:
        items = np.memmap(path, dtype=dtype, mode="c", offset=HEADER_SIZE, shape=header.count)
    except (OSError, ValueError) as error:
        raise NNEFError(f"cannot map tensor file: {error}", file) from error
    # a plain ndarray over the mapping (the mapping stays alive as its base)
    return items.view(np.ndarray).reshape(header.shape)


def _item_type_of(dtype: np.dtype, quantized: bool, file: str) -> tuple[ItemType, int]:
    """The header item type and bit width for a numpy dtype."""
    kind = dtype.kind
    if kind == "b":
        item_type, bits = ItemType.BOOL, 1
    elif kind == "f" and dtype.itemsize in (2, 4, 8):
        item_type, bits = ItemType.FLOAT, dtype.itemsize * 8
    elif kind in "iu" and dtype.itemsize in (1, 2, 4, 8):
        item_type, bits = (ItemType.SIGNED if kind == "i" else ItemType.UNSIGNED), dtype.itemsize * 8
    else:
        raise NNEFError(f"cannot store dtype {dtype} in a tensor file "
                        "(float16/32/64, int8-64, uint8-64, bool)", file)  # fmt: skip
    if quantized:
        if item_type is ItemType.SIGNED:
            return ItemType.QUANTIZED_SIGNED, bits
        if item_type is ItemType.UNSIGNED:
            return ItemType.QUANTIZED_UNSIGNED, bits
        raise NNEFError(f"quantized tensors must have an integer dtype, got {dtype}", file)
    return item_type, bits


def tensor_bytes(array: np.ndarray | object, *, quantized: bool = False, file: str = "<bytes>") -> bytes:
    """The complete ``.dat`` encoding (header and data) of ``array``."""
    array = np.asarray(array)
    item_type, bits = _item_type_of(array.dtype, quantized, file)
    if array.ndim > MAX_RANK:
        raise NNEFError(f"tensor rank {array.ndim} exceeds the maximum of {MAX_RANK} "
                        "of the tensor file format", file)  # fmt: skip
    if any(extent > _MAX_U32 for extent in array.shape):
        raise NNEFError(f"tensor extent too large for the tensor file format: {list(array.shape)}", file)
    length = _expected_length(array.size, bits)
    if length > _MAX_U32:
        raise NNEFError(f"tensor data of {length} bytes exceeds the 4 GiB limit of the tensor file format",
                        file)  # fmt: skip
    extents = list(array.shape) + [0] * (MAX_RANK - array.ndim)
    header = MAGIC + bytes((1, 0)) + struct.pack("<II8III", length, array.ndim, *extents, bits, item_type)
    header += bytes(HEADER_SIZE - len(header))
    if item_type is ItemType.BOOL:
        data = np.packbits(array.reshape(-1), bitorder="big").tobytes()
    else:
        data = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()
    return header + data


def write_tensor(
    destination: str | os.PathLike | BinaryIO, array: np.ndarray | object, *, quantized: bool = False
) -> None:
    """Write ``array`` as a ``.dat`` file (path or binary stream); ``quantized`` marks integer items."""
    file = _name_of(destination)
    encoded = tensor_bytes(array, quantized=quantized, file=file)
    if isinstance(destination, (str, os.PathLike)):
        try:
            with open(destination, "wb") as stream:
                stream.write(encoded)
        except OSError as error:
            raise NNEFError(f"cannot write tensor file: {error.strerror or error}", file) from error
    else:
        destination.write(encoded)

