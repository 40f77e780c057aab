"""The runtime the Python backend's generated code calls (:mod:`uopviz.backends.python`): loads and
stores that raise on an out-of-bounds index, REG and LOCAL buffers with one copy per lifted
iteration (or workgroup), the ALU ops through :func:`uopviz.core.alu.exec_alu_array` (the one
definition of the dialect's semantics), tensor-core tiles, and the folds of vectorised reduction
loops.  :data:`RUNTIME` is the namespace a kernel's source runs in."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from uopviz.backends.base import RenderError
from uopviz.core.alu import exec_alu_array
from uopviz.core.alu import numpy_dtype as value_numpy_dtype
from uopviz.core.dtype import DType, dtypes
from uopviz.core.errors import UopvizError
from uopviz.core.ops import Ops


class KernelFault(UopvizError, RuntimeError):
    """A kernel did something a real device would not survive: an out-of-bounds access."""


def lifted_range(bound: int, position: int, total: int) -> np.ndarray:
    """The values ``0..bound-1`` of a lifted loop, along dimension ``position`` of ``total``."""
    shape = [1] * total
    shape[position] = bound
    return np.arange(bound, dtype=np.int64).reshape(shape)


def make_const(value: Any, dtype_name: str) -> Any:
    """A constant as the numpy scalar the ALU semantics work on."""
    return np.asarray(value, dtype=value_numpy_dtype(dtypes.from_name(dtype_name)))[()]


def _from_storage(values: np.ndarray, dtype: DType) -> np.ndarray:
    """Buffer contents as values (bfloat16 bits become float32 numbers)."""
    if dtype.scalar is dtypes.bfloat16:
        return (values.astype(np.uint32) << np.uint32(16)).view(np.float32)
    return values


def _to_storage(values: Any, dtype: DType) -> np.ndarray:
    """Values as buffer contents (float32 rounded to bfloat16 bits for bfloat16 buffers)."""
    if dtype.scalar is dtypes.bfloat16:
        bits = np.asarray(values, dtype=np.float32).view(np.uint32)
        rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
        return np.where(np.isnan(np.asarray(values, dtype=np.float32)), np.uint16(0x7FC0),
                        rounded.astype(np.uint16))
    return np.asarray(values).astype(value_numpy_dtype(dtype), copy=False)


def _check_bounds(where: str, index: np.ndarray, size: int) -> None:
    if index.size and (int(index.min()) < 0 or int(index.max()) >= size):
        raise KernelFault(f"{where}: index {int(index.min())}..{int(index.max())} out of a buffer of {size} "
                          f"elements")


def load_global(where: str, buffer: np.ndarray, dtype_name: str, index: Any, alt: Any = None,
                gate: Any = None) -> np.ndarray:
    """``buffer[index]`` (``gate ? buffer[index] : alt`` with a gate), broadcast over the lifted loops."""
    dtype = dtypes.from_name(dtype_name)
    index = np.asarray(index)
    if gate is None:
        _check_bounds(where, index, buffer.size)
        return _from_storage(buffer[index], dtype)
    gate, index = np.broadcast_arrays(np.asarray(gate), index)
    if buffer.size == 0:
        return np.broadcast_to(np.asarray(alt), index.shape).copy()
    _check_bounds(where, index[gate], buffer.size)
    safe = np.where(gate, index, 0)
    return np.where(gate, _from_storage(buffer[safe], dtype), alt)


def store_global(where: str, buffer: np.ndarray, dtype_name: str, index: Any, value: Any,
                 gate: Any = None) -> None:
    """``buffer[index] = value`` for every lifted iteration (where ``gate`` holds)."""
    dtype = dtypes.from_name(dtype_name)
    if gate is None:
        index, value = np.broadcast_arrays(np.asarray(index), np.asarray(value))
    else:
        index, value, gate = np.broadcast_arrays(np.asarray(index), np.asarray(value), np.asarray(gate))
        index, value = index[gate], value[gate]
    _check_bounds(where, index, buffer.size)
    buffer[index.reshape(-1)] = _to_storage(value, dtype).reshape(-1)


def new_register(size: int, dtype_name: str, lifted_shape: tuple[int, ...]) -> np.ndarray:
    """A REG buffer: ``size`` elements for every iteration of the lifted loops."""
    dtype = dtypes.from_name(dtype_name)
    return np.zeros((*lifted_shape, size), dtype=value_numpy_dtype(dtype))


def _register_index(register: np.ndarray, index: Any, lanes: int) -> tuple[Any, bool]:
    """``(key, simple)``: a key for ``register[..., key]`` when the index is the same in every lifted
    iteration, else a broadcast index array for take/put_along_axis."""
    index = np.asarray(index)
    if index.ndim == 0 or (lanes > 1 and index.ndim == 1):
        return index, True
    shape = register.shape[:-1] + ((lanes,) if lanes > 1 else (1,))
    full = np.broadcast_to(index if lanes > 1 else index[..., None], shape)
    return full, False


def load_register(where: str, register: np.ndarray, index: Any, lanes: int, alt: Any = None,
                  gate: Any = None) -> np.ndarray:
    """Read a REG buffer at ``index`` (lanes on the trailing axis for a vector index)."""
    key, simple = _register_index(register, index, lanes)
    _check_bounds(where, np.asarray(key), register.shape[-1])
    if simple:
        value = register[..., key]
    else:
        value = np.take_along_axis(register, key, -1)
        value = value if lanes > 1 else value[..., 0]
    return value if gate is None else np.where(gate, value, alt)


def store_register(where: str, register: np.ndarray, index: Any, value: Any, lanes: int,
                   gate: Any = None) -> None:
    """Write a REG buffer at ``index`` in every lifted iteration (where ``gate`` holds)."""
    key, simple = _register_index(register, index, lanes)
    _check_bounds(where, np.asarray(key), register.shape[-1])
    if simple:
        target_shape = register[..., key].shape
        value = np.broadcast_to(np.asarray(value), target_shape)
        if gate is not None:
            value = np.where(np.broadcast_to(gate, target_shape), value, register[..., key])
        register[..., key] = value
        return
    value = np.asarray(value)
    value = np.broadcast_to(value if lanes > 1 else value[..., None], key.shape)
    if gate is not None:
        old = np.take_along_axis(register, key, -1)
        gate = np.asarray(gate)
        value = np.where(np.broadcast_to(gate if lanes > 1 else gate[..., None], key.shape), value, old)
    np.put_along_axis(register, key, value, -1)


def new_shared(size: int, dtype_name: str, lifted_shape: tuple[int, ...],
               local_dims: tuple[int, ...]) -> np.ndarray:
    """A LOCAL buffer: ``size`` elements per workgroup, shared by its threads (the lifted ``lidx``
    dimensions have one copy, the other lifted dimensions one each)."""
    shape = tuple(1 if d in local_dims else n for d, n in enumerate(lifted_shape))
    return np.zeros((*shape, size), dtype=value_numpy_dtype(dtypes.from_name(dtype_name)))


def _shared_positions(where: str, buffer: np.ndarray, index: Any, lanes: int) -> np.ndarray:
    """The flat position in ``buffer`` of ``index`` for every lifted iteration (and lane)."""
    lifted = buffer.shape[:-1]
    index = np.asarray(index).astype(np.int64)
    full = np.broadcast_shapes(index.shape, (*lifted, lanes) if lanes > 1 else lifted)
    index = np.broadcast_to(index, full)
    _check_bounds(where, index, buffer.shape[-1])
    position = index.copy()
    stride = buffer.shape[-1]
    for d in range(len(lifted) - 1, -1, -1):
        size = lifted[d]
        if size > 1:
            shape = [1] * len(full)
            shape[d] = size
            position = position + np.arange(size, dtype=np.int64).reshape(shape) * stride
        stride *= size
    return position


def load_shared(where: str, buffer: np.ndarray, index: Any, lanes: int, alt: Any = None,
                gate: Any = None) -> np.ndarray:
    """Read a LOCAL buffer: each thread reads its workgroup's copy."""
    position = _shared_positions(where, buffer, index if gate is None else np.where(gate, index, 0), lanes)
    value = buffer.reshape(-1)[position]
    return value if gate is None else np.where(gate, value, alt)


def store_shared(where: str, buffer: np.ndarray, index: Any, value: Any, lanes: int,
                 gate: Any = None) -> None:
    """Write a LOCAL buffer: every thread's write lands in its workgroup's copy (in thread order)."""
    position = _shared_positions(where, buffer, index if gate is None else np.where(gate, index, 0), lanes)
    value = np.broadcast_to(np.asarray(value), position.shape)
    if gate is not None:
        keep = np.broadcast_to(np.asarray(gate), position.shape)
        position, value = position[keep], value[keep]
    buffer.reshape(-1)[position.reshape(-1)] = value.reshape(-1)


def alu(op: Ops, dtype_name: str, *operands: Any) -> np.ndarray:
    """One elementwise op with the dialect's semantics (``uopviz.core.alu``)."""
    return exec_alu_array(op, dtypes.from_name(dtype_name), operands)


def cast(value: Any, source_name: str, target_name: str) -> np.ndarray:
    """CAST with the dialect's semantics (truncation toward zero, wraparound, bool as != 0)."""
    return exec_alu_array(Ops.CAST, dtypes.from_name(target_name), (np.asarray(value),),
                          (dtypes.from_name(source_name),))


def bitcast(value: Any, source_name: str, target_name: str) -> np.ndarray:
    """Reinterpret the bytes of every value (and lane) as ``target``."""
    source, target = dtypes.from_name(source_name), dtypes.from_name(target_name)
    raw = np.array(_to_storage(value, source), copy=True)  # contiguous, and keeps a 0-d shape
    storage = np.uint16 if target is dtypes.bfloat16 else value_numpy_dtype(target)
    return _from_storage(raw.view(storage), target)


def vectorize(*lanes: Any) -> np.ndarray:
    """Lanes → a vector (lanes on a trailing axis)."""
    return np.stack(np.broadcast_arrays(*(np.asarray(lane) for lane in lanes)), axis=-1)


def gep(vector: Any, lanes: tuple[int, ...], source_count: int) -> np.ndarray:
    """Lanes of a vector (a scalar source is repeated)."""
    vector = np.asarray(vector)
    if source_count == 1:
        return vector if len(lanes) == 1 else np.stack([vector] * len(lanes), axis=-1)
    return vector[..., lanes[0]] if len(lanes) == 1 else vector[..., list(lanes)]


def wmma(a: Any, b: Any, c: Any, dims: tuple[int, int, int], layout_a: tuple, layout_b: tuple,
         layout_c: tuple, dtype_in: str, dtype_out: str, threads: int = 1, warp_dim: int = -1,
         lifted_shape: tuple[int, ...] = ()) -> np.ndarray:
    """``D = A @ B + C`` of a tile: each operand's lanes placed by its layout.  With ``threads`` > 1 the
    tile is spread over the lanes of a warp, which run along lifted dimension ``warp_dim`` (groups of
    ``threads`` consecutive iterations): each warp's fragments are gathered into tiles, multiplied,
    and the result's fragments handed back to its lanes."""
    if threads > 1:
        layouts = (layout_a, layout_b, layout_c)
        return _warp_wmma(a, b, c, dims, layouts, dtype_in, dtype_out, threads, warp_dim, lifted_shape)
    m, n, k = dims
    out_dtype = dtypes.from_name(dtype_out)
    a, b, c = (np.asarray(x) for x in (a, b, c))
    batch = np.broadcast_shapes(a.shape[:-1], b.shape[:-1], c.shape[:-1])
    matrix_a = np.zeros((*batch, m, k), dtype=value_numpy_dtype(out_dtype))
    matrix_b = np.zeros((*batch, k, n), dtype=value_numpy_dtype(out_dtype))
    for lane, (row, column) in enumerate(layout_a):
        matrix_a[..., row, column] = cast(a[..., lane], dtype_in, dtype_out)
    for lane, (row, column) in enumerate(layout_b):
        matrix_b[..., row, column] = cast(b[..., lane], dtype_in, dtype_out)
    product = np.matmul(matrix_a, matrix_b)
    out = np.empty((*batch, len(layout_c)), dtype=value_numpy_dtype(out_dtype))
    for lane, (row, column) in enumerate(layout_c):
        out[..., lane] = exec_alu_array(Ops.ADD, out_dtype, (product[..., row, column], c[..., lane]))
    return out


def _warp_wmma(a: Any, b: Any, c: Any, dims: tuple[int, int, int], layouts: tuple, dtype_in: str,
               dtype_out: str, threads: int, warp_dim: int, lifted_shape: tuple[int, ...]) -> np.ndarray:
    m, n, k = dims
    out_dtype = dtypes.from_name(dtype_out)
    storage = value_numpy_dtype(out_dtype)
    size = lifted_shape[warp_dim]
    fragments = []
    for value, elements in ((a, len(layouts[0]) // threads), (b, len(layouts[1]) // threads),
                            (c, len(layouts[2]) // threads)):
        value = np.asarray(value)
        shape = list(np.broadcast_shapes(value.shape[:-1], (1,) * len(lifted_shape)))
        shape[warp_dim] = size
        value = np.broadcast_to(value, (*shape, elements))
        value = np.moveaxis(value, warp_dim, -2)  # (..., lanes of all warps, elements)
        fragments.append(value.reshape(*value.shape[:-2], size // threads, threads * elements))
    tiles = []
    for fragment, layout, rows, columns, source in ((fragments[0], layouts[0], m, k, dtype_in),
                                                    (fragments[1], layouts[1], k, n, dtype_in),
                                                    (fragments[2], layouts[2], m, n, dtype_out)):
        tile = np.zeros((*fragment.shape[:-1], rows, columns), dtype=storage)
        where = np.array(layout)
        tile[..., where[:, 0], where[:, 1]] = cast(fragment, source, dtype_out)
        tiles.append(tile)
    result = exec_alu_array(Ops.ADD, out_dtype, (np.matmul(tiles[0], tiles[1]), tiles[2]))
    where = np.array(layouts[2])
    out = result[..., where[:, 0], where[:, 1]]  # (..., warps, threads * elements of C)
    out = out.reshape(*out.shape[:-2], size, len(layouts[2]) // threads)
    return np.moveaxis(out, -2, warp_dim)


#: the ufunc each foldable reduce op is on each kind of dtype: the ones ``exec_alu_array`` applies, so a
#: fold gives what the loop would (bfloat16 is left out: the loop rounds after every step)
FOLD_UFUNCS: dict[str, dict[Ops, np.ufunc]] = {
    "float": {Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.MAX: np.maximum},
    "int": {Ops.ADD: np.add, Ops.MUL: np.multiply, Ops.MAX: np.maximum, Ops.XOR: np.bitwise_xor,
            Ops.OR: np.bitwise_or, Ops.AND: np.bitwise_and},
    "bool": {Ops.ADD: np.logical_or, Ops.MAX: np.logical_or, Ops.OR: np.logical_or,
             Ops.MUL: np.logical_and, Ops.AND: np.logical_and, Ops.XOR: np.logical_xor},
}


def fold_ufunc(op: Ops, dtype: DType) -> np.ufunc | None:
    """The ufunc that folds ``op`` on ``dtype`` exactly as the loop's ALU does, or None."""
    scalar = dtype.scalar
    if scalar is dtypes.bfloat16 or scalar.numpy_name is None:
        return None
    kind = "bool" if scalar.is_bool else "int" if scalar.is_int else "float" if scalar.is_float else None
    return FOLD_UFUNCS[kind].get(op) if kind is not None else None


def folded_chunks(bound: int, chunk: int, total: int) -> Any:
    """The iterations ``0..bound-1`` of a vectorised reduction loop, ``chunk`` at a time, each chunk
    along a new leading dimension in front of the ``total`` lifted ones."""
    for start in range(0, bound, chunk):
        yield np.arange(start, min(start + chunk, bound), dtype=np.int64).reshape((-1,) + (1,) * total)


def fold(op: Ops, dtype_name: str, accumulator: Any, values: Any, iterations: np.ndarray) -> np.ndarray:
    """``accumulator = op(accumulator, value)`` for the value of every iteration of a chunk, in loop
    order: ``ufunc.accumulate`` folds sequentially (``reduce`` would add floats pairwise), so the
    result is bit for bit the loop's."""
    dtype = dtypes.from_name(dtype_name)
    ufunc = fold_ufunc(op, dtype)
    if ufunc is None:
        raise RenderError(f"python: {op.name} on {dtype_name} cannot be folded")
    storage = value_numpy_dtype(dtype)
    start = np.asarray(accumulator).astype(storage)
    steps = np.empty((iterations.shape[0] + 1, *start.shape), dtype=storage)
    steps[0] = start
    steps[1:] = np.asarray(values).astype(storage, copy=False)
    return ufunc.accumulate(steps, axis=0, dtype=storage)[-1]


RUNTIME: dict[str, Any] = {
    "np": np, "Ops": Ops, "lifted_range": lifted_range, "make_const": make_const, "load_global": load_global,
    "store_global": store_global, "new_register": new_register, "load_register": load_register,
    "new_shared": new_shared, "load_shared": load_shared, "store_shared": store_shared,
    "store_register": store_register, "alu": alu, "cast": cast, "bitcast": bitcast, "vectorize": vectorize,
    "gep": gep, "wmma": wmma, "math": math, "folded_chunks": folded_chunks, "fold": fold,
}
