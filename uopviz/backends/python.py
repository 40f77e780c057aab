"""The Python backend: the reference interpreter of linear programs.

``render`` turns a LINEAR program into straight-line Python over numpy, one line per uop (so a
line of the source maps back to a uop), and ``compile`` executes that source.  Every ALU op goes
through :func:`uopviz.core.alu.exec_alu_array`, the one definition of the dialect's semantics, so
this backend is the reference the compiled backends are checked against.

Speed comes from *lifting* loops: a RANGE whose iterations are independent becomes a numpy axis
(``arange`` along its own dimension) instead of a Python ``for``; every value is an array that
broadcasts over the lifted loops it depends on, with vector lanes on a trailing axis.  A loop
whose iterations carry state (an accumulator read before it is written in the loop body: a
reduction) runs as a Python ``for`` inside the lifted ones, unless its only state is accumulators
each updated as ``acc = op(acc, value)`` with an associative ``op`` (ADD, MUL, MAX, the bitwise
ones) and values independent of the accumulators (:func:`foldable_loops`): such a loop runs
*vectorised*, its values computed for a chunk of iterations along a leading numpy axis and folded
into the accumulator with ``ufunc.accumulate``, which applies the op in loop order, so the result
is bit for bit the loop's (``ufunc.reduce`` would add floats pairwise).  THREAD, GLOBAL and LOOP
ranges are lifted, which runs them "sequentially" in the sense that no two threads ever run at once.

Registers (REG buffers) get one copy per iteration of the lifted loops (a trailing axis of the
buffer's size); a LOCAL buffer one copy per workgroup, shared by its threads (the lifted ``lidx``
loops), and a BARRIER holds by construction since every thread runs each instruction together.
IF blocks become masks applied to the stores (and loads) inside them.
Out-of-bounds accesses raise instead of reading a wrong element: this backend exists to catch
pipeline bugs, and numpy would silently wrap a negative index.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from uopviz.backends.base import (
    Backend,
    CompiledKernel,
    CompileError,
    KernelMeta,
    KernelParam,
    Launch,
    RenderError,
    SourceMap,
    TensorCore,
    cpu_tensor_cores,
    map_lines,
)
from uopviz.core.alu import exec_alu_array
from uopviz.core.alu import numpy_dtype as value_numpy_dtype
from uopviz.core.dtype import AddrSpace, DType, dtypes
from uopviz.core.errors import UopvizError
from uopviz.core.ops import AxisType, GroupOp, Ops
from uopviz.core.uop import UOp

# ---------------------------------------------------------------------------------------------
# the runtime the generated code calls


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

#: how many elements (iterations times accumulator elements) one chunk of a vectorised loop folds
FOLD_CHUNK_ELEMENTS = 1 << 18

#: whether the renderer runs foldable reduction loops vectorised (off: every carried loop is a Python
#: ``for``, the plain reading of the program, which the tests compare the vectorised one against)
VECTORISE_REDUCTIONS = True


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


# ---------------------------------------------------------------------------------------------
# rendering a LINEAR program to Python


def _buffer_of(u: UOp) -> UOp:
    """The PARAM/BUFFER an INDEX source refers to, through AFTER passthroughs."""
    while u.op is Ops.AFTER:
        u = u.src[0]
    return u


def _is_register(u: UOp) -> bool:
    base = _buffer_of(u)
    return base.op is Ops.BUFFER and base.arg.addrspace in (AddrSpace.REG, AddrSpace.LOCAL)


def _is_shared(u: UOp) -> bool:
    base = _buffer_of(u)
    return base.op is Ops.BUFFER and base.arg.addrspace is AddrSpace.LOCAL


def carried_ranges(program: Sequence[UOp]) -> set[UOp]:
    """The RANGEs whose iterations carry state: inside the loop, some register is read before it is
    written, or written at an index that depends on the loop, or a REDUCE loop stores to a global
    buffer (a sequential scan: an iteration reads what the earlier ones stored).  Those run as
    Python loops; every other range is lifted into a numpy axis."""
    carried: set[UOp] = set()
    open_loops: list[tuple[UOp, set[UOp], set[UOp]]] = []  # (range, registers written, registers read)
    for u in program:
        if u.op is Ops.RANGE:
            open_loops.append((u, set(), set()))
            continue
        if u.op is Ops.END:
            target = u.src[-1]
            while open_loops and open_loops[-1][0] is not target:
                open_loops.pop()
            if open_loops:
                open_loops.pop()
            continue
        if u.op is Ops.STORE and u.src[0].op is Ops.INDEX and not _is_register(u.src[0].src[0]):
            carried.update(loop for loop, _, _ in open_loops if loop.arg[1] is AxisType.REDUCE)
            continue
        if u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is Ops.INDEX and _is_register(u.src[0].src[0]):
            register = _buffer_of(u.src[0].src[0])
            # a register filled element by element over a loop (a staged strip) is one buffer for all
            # of its iterations: that loop runs in Python too
            index = u.src[0].src[1]
            index_ranges = {r for r in index.toposort() if r.op is Ops.RANGE} if u.op is Ops.STORE else set()
            for loop, written, read in open_loops:
                if u.op is Ops.LOAD and register not in written:
                    read.add(register)
                    carried.add(loop)
                elif u.op is Ops.STORE:
                    written.add(register)
                    if loop in index_ranges:
                        carried.add(loop)
    return carried


#: ops a vectorised loop body may hold: values computed per iteration, and loads and stores (the
#: loads and stores are checked one by one); loops, IF blocks, barriers, buffers, tensor cores keep
#: the loop
_FOLDABLE_BODY_OPS = frozenset(GroupOp.ELEMENTWISE) | {
    Ops.CONST, Ops.VECTORIZE, Ops.GEP, Ops.CAST, Ops.BITCAST, Ops.INDEX, Ops.LOAD, Ops.STORE, Ops.AFTER}


def _loop_bodies(program: Sequence[UOp]) -> dict[UOp, tuple[list[UOp], int]]:
    """Every RANGE's body (the uops between it and its END) and the position of its END."""
    bodies: dict[UOp, tuple[list[UOp], int]] = {}
    open_loops: list[UOp] = []
    for position, u in enumerate(program):
        for loop in open_loops:
            if not (u.op is Ops.END and u.src[-1] is loop):
                bodies[loop][0].append(u)
        if u.op is Ops.RANGE:
            bodies[u] = ([], len(program))
            open_loops.append(u)
        elif u.op is Ops.END and any(loop is u.src[-1] for loop in open_loops):
            while (closed := open_loops.pop()) is not u.src[-1]:
                bodies[closed] = (bodies[closed][0], position)
            bodies[closed] = (bodies[closed][0], position)
    return bodies


def _register_elements(index: UOp) -> tuple[int, ...] | None:
    """The register elements a constant index names (a CONST or a VECTORIZE of CONSTs), else None."""
    lanes = index.src if index.op is Ops.VECTORIZE else (index,)
    if not all(lane.op is Ops.CONST and isinstance(lane.arg[0], int) for lane in lanes):
        return None
    return tuple(int(lane.arg[0]) for lane in lanes)


def _fold_update(store: UOp, loads: dict[UOp, UOp], uses: _Uses) -> UOp | None:
    """The ALU of ``acc = op(acc, value)`` that ``store`` writes, when it is such an update of the
    accumulator ``loads`` maps its INDEX to (the accumulator read once, only by the ALU), else None."""
    value, load = store.src[1], loads.get(store.src[0])
    if load is None or value.op not in GroupOp.ELEMENTWISE or len(value.src) != 2:
        return None
    if fold_ufunc(value.op, value.dtype) is None or uses.program.get(value, 0) != 1:
        return None
    # the accumulator's value is used by the ALU alone; after the loop it may be read again (the LOAD
    # issued anew after the END: the vectorised loop leaves the register as the loop would)
    if uses.body.get(load, 0) != 1 or (uses.program.get(load, 0) != 1 and load not in uses.later):
        return None
    # floats fold with the accumulator first (the loop's operand order: max of -0.0 and 0.0, and which
    # NaN survives, depend on it); integer and bool ops commute exactly
    if value.src[0] is load and value.src[1] is not load:
        return value
    if value.src[1] is load and value.src[0] is not load and not value.dtype.scalar.is_float:
        return value
    return None


def foldable_loops(program: Sequence[UOp], carried: set[UOp]) -> dict[UOp, dict[UOp, UOp]]:
    """The carried RANGEs that can run vectorised, each with its fold ALUs (and the accumulator LOAD
    each folds into).

    A loop qualifies when its only carried state is accumulators, each updated once per iteration as
    ``acc = op(acc, value)`` with ``op`` an associative reduce op and ``value`` independent of every
    accumulator: then the values of all iterations can be computed at once (the range lifted as a
    numpy axis) and folded in loop order.  Anything else in the body (a nested loop, an IF, a store to
    a global or shared buffer, a register indexed by the loop, an accumulator read twice) keeps the
    Python loop."""
    program_uses = _use_counts(program)
    foldable: dict[UOp, dict[UOp, UOp]] = {}
    for loop, (body, end) in _loop_bodies(program).items():
        if loop in carried:
            folds = _body_folds(loop, body, _Uses(program_uses, _use_counts(body), set(program[end + 1 :])))
            if folds:
                foldable[loop] = folds
    return foldable


@dataclass
class _Uses:
    """How often uops are used as sources: in the whole program and in one loop's body; and the uops
    issued after that loop's END."""

    program: dict[UOp, int]
    body: dict[UOp, int]
    later: set[UOp]


def _use_counts(uops: Sequence[UOp]) -> dict[UOp, int]:
    """How many times each uop is a source of one of ``uops``."""
    uses: dict[UOp, int] = {}
    for u in uops:
        for source in u.src:
            uses[source] = uses.get(source, 0) + 1
    return uses


def _body_folds(loop: UOp, body: list[UOp], uses: _Uses) -> dict[UOp, UOp] | None:
    """The fold ALUs of ``loop`` with their accumulator LOADs (see :func:`foldable_loops`), or None when
    it must stay a loop."""
    if any(u.op not in _FOLDABLE_BODY_OPS for u in body):
        return None
    if any(u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is not Ops.INDEX for u in body):
        return None  # not a well-formed access: the loop renders it (and names the problem)
    register_uses = [u for u in body if u.op in (Ops.LOAD, Ops.STORE) and _is_register(u.src[0].src[0])]
    if any(_is_shared(u.src[0].src[0]) or len(u.src) > (1 if u.op is Ops.LOAD else 2) for u in register_uses):
        return None  # shared buffers and gated register accesses keep the loop
    if any(u.op is Ops.STORE and not _is_register(u.src[0].src[0]) for u in body):
        return None  # a store to a global buffer inside the loop: a scan
    written = {_buffer_of(u.src[0].src[0]) for u in register_uses if u.op is Ops.STORE}
    varying = _varying(loop, body)
    accumulator_loads: dict[UOp, UOp] = {}
    claimed: dict[UOp, set[int]] = {}
    for u in register_uses:
        index = u.src[0]
        if index.src[1] in varying:
            return None  # a register indexed by the loop: a staged strip
        register = _buffer_of(index.src[0])
        if u.op is Ops.LOAD and register in written:
            elements = _register_elements(index.src[1])
            if elements is None or index in accumulator_loads or claimed.get(register, set()) & set(elements):
                return None  # accumulators must be distinct, known elements, each read once
            claimed.setdefault(register, set()).update(elements)
            accumulator_loads[index] = u
    folds: dict[UOp, UOp] = {}
    for u in register_uses:
        if u.op is Ops.STORE:
            update = _fold_update(u, accumulator_loads, uses)
            if update is None or update in folds:
                return None
            folds[update] = accumulator_loads[u.src[0]]
    if len(folds) != len(accumulator_loads):
        return None  # an accumulator read but not written back
    accumulators = set(accumulator_loads.values())
    reads_accumulator = _depends_on(body, accumulators)
    if any(reads_accumulator.get(source, False) for update in folds for source in update.src
           if source not in accumulators):
        return None  # a value folded in depends on an accumulator: the iterations are not independent
    if any(uses.program.get(u, 0) > uses.body.get(u, 0) + (1 if u is loop else 0)
           for u in varying if u not in accumulators and u.op is not Ops.STORE):  # END lists the STOREs
        return None  # the last iteration's value used after the loop: the vectorised one has them all
    return folds


def _depends_on(body: list[UOp], roots: set[UOp]) -> dict[UOp, bool]:
    """For every uop of ``body``: whether it depends on one of ``roots`` (uops outside do not)."""
    depends: dict[UOp, bool] = dict.fromkeys(roots, True)
    for u in body:
        depends[u] = depends.get(u, False) or any(depends.get(source, False) for source in u.src)
    return depends


def _varying(loop: UOp, body: list[UOp]) -> set[UOp]:
    """The uops of ``body`` whose value changes from one iteration to the next: those that depend on the
    loop's index or on something loaded inside the loop."""
    depends = _depends_on(body, {loop} | {u for u in body if u.op is Ops.LOAD})
    return {loop} | {u for u, flag in depends.items() if flag}


@dataclass
class _Emitter:
    """The state of rendering one program: names, indentation, lifted dimensions, masks."""

    linear: UOp
    lines: list[str] = field(default_factory=list)
    header: list[str] = field(default_factory=list)
    names: dict[UOp, str] = field(default_factory=dict)
    indent: int = 1
    masks: list[str] = field(default_factory=list)
    open_loops: list[tuple[UOp, bool]] = field(default_factory=list)
    counter: int = 0
    local_dims: tuple[int, ...] = ()
    warp_dim: int | None = None  # the lifted dimension whose iterations are the lanes of warps
    folds: dict[UOp, tuple[UOp, UOp]] = field(default_factory=dict)  # fold ALU -> (its loop, accumulator)
    fold_chunks: dict[UOp, int] = field(default_factory=dict)  # vectorised loop -> iterations per chunk

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def emit(self, text: str) -> None:
        self.lines.append("    " * self.indent + text)

    def ref(self, u: UOp) -> str:
        if u.op is Ops.AFTER:
            return self.ref(u.src[0])
        name = self.names.get(u)
        if name is None:
            if u.op is Ops.CONST:
                return self.constant(u)
            raise RenderError(f"python: {u.op.name} is used before it is computed in kernel "
                              f"{self.linear.arg!r}")
        return name

    def constant(self, u: UOp) -> str:
        name = self.names.get(u)
        if name is None:
            name = f"c{len(self.header)}"
            value = u.arg[0]
            literal = repr(float(value)) if isinstance(value, float) else repr(value)
            if isinstance(value, float) and not math.isfinite(value):
                literal = f"float({str(value)!r})"
            self.header.append(f"{name} = make_const({literal}, {u.dtype.scalar.name!r})")
            self.names[u] = name
        return name

    def mask(self) -> str | None:
        return self.masks[-1] if self.masks else None


def _fail(u: UOp, position: int, problem: str) -> RenderError:
    return RenderError(f"python: {u.op.name} at position {position}: {problem}")


def render_python(linear: UOp, lifted_sizes: dict[UOp, int] | None = None) -> str:
    """The Python source of a LINEAR program (see the module docstring for how it runs)."""
    return render_python_mapped(linear)[0]


def render_python_mapped(linear: UOp) -> tuple[str, SourceMap]:
    """The Python source of a LINEAR program and which uop each of its lines was written for (a
    constant's line in the header goes to the uop whose rendering first used it)."""
    program = list(linear.src)
    carried = carried_ranges(program)
    lifted = [u for u in dict.fromkeys(program) if u.op in (Ops.RANGE, Ops.SPECIAL) and u not in carried]
    for u in lifted:
        if u.src[0].op is not Ops.CONST:
            raise RenderError(f"python: the bound of lifted {u.op.name} {u.arg} must be a constant")
    position_of = {u: i for i, u in enumerate(lifted)}
    lifted_shape = tuple(int(u.src[0].arg[0]) for u in lifted)
    state = _Emitter(linear)
    state.local_dims = tuple(position_of[u] for u in lifted
                             if u.op is Ops.SPECIAL and u.arg.startswith("lidx"))
    warps = [u for u in lifted if (u.op is Ops.RANGE and u.arg[1] is AxisType.WARP)
             or (u.op is Ops.SPECIAL and u.arg == "lidx0")]
    state.warp_dim = position_of[warps[0]] if warps else None
    foldable = foldable_loops(program, carried) if VECTORISE_REDUCTIONS else {}
    state.folds = {update: (loop, accumulator) for loop, updates in foldable.items()
                   for update, accumulator in updates.items()}
    for loop, updates in foldable.items():  # chunks of at most FOLD_CHUNK_ELEMENTS accumulator steps
        lanes = max(update.dtype.count for update in updates)
        state.fold_chunks[loop] = max(1, FOLD_CHUNK_ELEMENTS // (math.prod(lifted_shape) * lanes))
    params: dict[int, UOp] = {}
    written: set[int] = set()
    for u in program:
        if u.op is Ops.PARAM:
            params.setdefault(u.arg.slot, u)
        if u.op is Ops.STORE and u.src[0].op is Ops.INDEX and _buffer_of(u.src[0].src[0]).op is Ops.PARAM:
            written.add(_buffer_of(u.src[0].src[0]).arg.slot)
    slots = sorted(params)
    if slots != list(range(len(slots))):
        raise RenderError(f"python: kernel {linear.arg!r} has PARAM slots {slots}; they must be 0..n-1")
    for slot in slots:
        state.names[params[slot]] = f"data{slot}"
    owners: dict[str, list[int | None]] = {"header": [], "lines": []}
    for position, u in enumerate(program):
        _render_uop(state, u, position, carried, position_of, lifted_shape)
        for name, attributed in owners.items():
            attributed.extend([position] * (len(getattr(state, name)) - len(attributed)))
    if state.open_loops:
        raise RenderError(f"python: kernel {linear.arg!r} ends inside an open loop; an END is missing")
    meta = KernelMeta(str(linear.arg), tuple(
        KernelParam(slot, params[slot].arg.dtype, params[slot].shape[0] if params[slot].shape else 1,
                    slot in written) for slot in slots))
    signature = ", ".join(f"data{slot}" for slot in slots)
    body = state.lines or ["    pass"]
    title = f"# kernel {linear.arg}: {len(program)} uops, lifted loops {list(lifted_shape)}"
    header = [f"# {meta.to_comment_text()}", title, *state.header]
    source = "\n".join([*header, f"def kernel({signature}):", *body, ""])
    blocks = [(state.header, owners["header"]), (state.lines, owners["lines"])]
    return source, map_lines(source, linear, blocks)


def _render_uop(state: _Emitter, u: UOp, position: int, carried: set[UOp], position_of: dict[UOp, int],
                lifted_shape: tuple[int, ...]) -> None:
    op = u.op
    where = f"{state.linear.arg}@{position}"
    if op in (Ops.PARAM, Ops.SINK, Ops.GROUP, Ops.AFTER, Ops.BARRIER, Ops.STACK):
        return  # parameters are named; AFTER is its buffer; BARRIER: lifted threads run in lockstep
    if op is Ops.CONST:
        state.constant(u)
        return
    if op is Ops.BUFFER:
        if u.arg.addrspace is AddrSpace.GLOBAL:
            raise _fail(u, position, "a GLOBAL BUFFER inside a kernel must be a PARAM")
        dtype_name = u.arg.dtype.scalar.name
        if u.arg.addrspace is AddrSpace.LOCAL:
            name = state.fresh("shared")
            shape = f"{lifted_shape!r}, {state.local_dims!r}"
            state.emit(f"{name} = new_shared({u.arg.size}, {dtype_name!r}, {shape})")
        else:
            name = state.fresh("reg")
            state.emit(f"{name} = new_register({u.arg.size}, {dtype_name!r}, {lifted_shape!r})")
        state.names[u] = name
        return
    if op in (Ops.RANGE, Ops.SPECIAL):
        name = state.fresh("r" if op is Ops.RANGE else "s")
        state.names[u] = name
        bound = state.ref(u.src[0])
        if u in state.fold_chunks:
            state.emit(f"# loop {name} runs vectorised: each iteration only folds a value into an")
            chunk = state.fold_chunks[u]
            state.emit(f"# accumulator, so fold() folds {chunk} iterations at a time, in order")
            state.emit(f"for {name} in folded_chunks(int({bound}), {chunk}, {len(lifted_shape)}):")
            state.indent += 1
        elif u in carried:
            state.emit(f"for {name} in range(int({bound})):")
            state.indent += 1
            state.emit(f"{name} = np.int64({name})")
        else:
            state.emit(f"{name} = lifted_range(int({bound}), {position_of[u]}, {len(lifted_shape)})")
        if op is Ops.RANGE:
            state.open_loops.append((u, u in carried))
        return
    if op is Ops.END:
        target = u.src[-1]
        if not state.open_loops or state.open_loops[-1][0] is not target:
            raise _fail(u, position, "END does not close the innermost open RANGE")
        _, was_carried = state.open_loops.pop()
        if was_carried:
            state.indent -= 1
        return
    if op is Ops.IF:
        name = state.fresh("mask")
        gate = state.ref(u.src[0])
        outer = state.mask()
        state.emit(f"{name} = {gate}" if outer is None else f"{name} = np.logical_and({outer}, {gate})")
        state.masks.append(name)
        state.names[u] = name
        return
    if op is Ops.ENDIF:
        if not state.masks:
            raise _fail(u, position, "ENDIF without an open IF")
        state.masks.pop()
        return
    if op is Ops.INDEX:
        return  # rendered into the LOAD/STORE that uses it
    if op is Ops.LOAD:
        _render_load(state, u, position, where)
        return
    if op is Ops.STORE:
        _render_store(state, u, position, where)
        return
    name = state.fresh("v")
    if op is Ops.VECTORIZE:
        expression = f"vectorize({', '.join(state.ref(s) for s in u.src)})"
    elif op is Ops.GEP:
        expression = f"gep({state.ref(u.src[0])}, {tuple(u.arg)!r}, {u.src[0].dtype.count})"
    elif op is Ops.CAST:
        expression = f"cast({state.ref(u.src[0])}, {u.src[0].dtype.scalar.name!r}, {u.dtype.scalar.name!r})"
    elif op is Ops.BITCAST:
        source, target = u.src[0].dtype.scalar.name, u.dtype.scalar.name
        expression = f"bitcast({state.ref(u.src[0])}, {source!r}, {target!r})"
    elif op is Ops.WMMA:
        config = u.arg
        if not isinstance(config, TensorCore):
            raise _fail(u, position, "WMMA's arg must be a TensorCore config")
        warp = ""
        if config.threads > 1:
            if state.warp_dim is None or lifted_shape[state.warp_dim] % config.threads:
                raise _fail(u, position, f"WMMA of {config.name} needs a warp of {config.threads} lanes: a "
                                         f"WARP range or lidx0 whose size is a multiple of it")
            warp = f", {config.threads}, {state.warp_dim}, {lifted_shape!r}"
        a, b, c = (state.ref(s) for s in u.src)
        expression = (f"wmma({a}, {b}, {c}, {config.dims!r}, {config.layout_a!r}, {config.layout_b!r}, "
                      f"{config.layout_c!r}, {config.dtype_in.name!r}, {config.dtype_out.name!r}{warp})")
    elif u in state.folds:
        loop, accumulator = state.folds[u]
        value = next(s for s in u.src if s is not accumulator)
        operands = f"{state.ref(accumulator)}, {state.ref(value)}, {state.ref(loop)}"
        expression = f"fold(Ops.{op.name}, {u.dtype.scalar.name!r}, {operands})"
    elif op in GroupOp.ELEMENTWISE:
        operands = ", ".join(state.ref(s) for s in u.src)
        expression = f"alu(Ops.{op.name}, {u.dtype.scalar.name!r}, {operands})"
    else:
        raise _fail(u, position, f"{op.name} cannot run on the Python backend")
    state.names[u] = name
    state.emit(f"{name} = {expression}")


def _render_load(state: _Emitter, u: UOp, position: int, where: str) -> None:
    index = u.src[0]
    if index.op is not Ops.INDEX:
        raise _fail(u, position, f"LOAD reads an INDEX, got {index.op.name}")
    buffer, address = index.src[0], state.ref(index.src[1])
    gate = state.ref(u.src[2]) if len(u.src) > 2 else None
    alt = state.ref(u.src[1]) if len(u.src) > 1 else None
    mask = state.mask()
    if mask is not None:  # a load inside an IF must not fault where the IF is false
        if gate is None:
            alt = state.constant(UOp.const(u.dtype.scalar, 0))
            gate = mask
        else:
            combined = state.fresh("g")
            state.emit(f"{combined} = np.logical_and({mask}, {gate})")
            gate = combined
    gated = "" if gate is None else f", {alt}, {gate}"
    name = state.fresh("v")
    if _is_register(buffer):
        register = state.ref(_buffer_of(buffer))
        helper = "load_shared" if _is_shared(buffer) else "load_register"
        expression = f"{helper}({where!r}, {register}, {address}, {u.dtype.count}{gated})"
    else:
        base = _buffer_of(buffer)
        if base.op is not Ops.PARAM:
            raise _fail(u, position, f"LOAD from a {base.op.name}; kernels read PARAMs and REG buffers")
        dtype_name = base.arg.dtype.scalar.name
        expression = f"load_global({where!r}, {state.ref(base)}, {dtype_name!r}, {address}{gated})"
    state.names[u] = name
    state.emit(f"{name} = {expression}")


def _render_store(state: _Emitter, u: UOp, position: int, where: str) -> None:
    index = u.src[0]
    if index.op is not Ops.INDEX:
        raise _fail(u, position, f"STORE writes an INDEX, got {index.op.name}")
    buffer, address, value = index.src[0], state.ref(index.src[1]), state.ref(u.src[1])
    gate = state.ref(u.src[2]) if len(u.src) > 2 else None
    mask = state.mask()
    if mask is not None:
        if gate is None:
            gate = mask
        else:
            combined = state.fresh("g")
            state.emit(f"{combined} = np.logical_and({mask}, {gate})")
            gate = combined
    gated = "" if gate is None else f", {gate}"
    if _is_register(buffer):
        helper = "store_shared" if _is_shared(buffer) else "store_register"
        state.emit(f"{helper}({where!r}, {state.ref(_buffer_of(buffer))}, {address}, {value}, "
                   f"{u.src[1].dtype.count}{gated})")
        return
    base = _buffer_of(buffer)
    if base.op is not Ops.PARAM:
        raise _fail(u, position, f"STORE into a {base.op.name}; kernels write PARAMs and REG buffers")
    dtype_name = base.arg.dtype.scalar.name
    state.emit(f"store_global({where!r}, {state.ref(base)}, {dtype_name!r}, {address}, {value}{gated})")


# ---------------------------------------------------------------------------------------------
# compiling and running


class PythonLaunch(Launch):
    """The generated function bound to host arrays."""

    def __init__(self, function: Any, arrays: Sequence[np.ndarray]):
        self.function, self.arrays = function, list(arrays)

    def run(self) -> float:
        start = time.perf_counter()
        with np.errstate(all="ignore"):
            self.function(*self.arrays)
        return time.perf_counter() - start


@dataclass(kw_only=True)
class PythonCompiledKernel(CompiledKernel):
    """A kernel as a Python function over numpy arrays."""

    function: Any = field(repr=False)

    def prepare(self, *arrays: np.ndarray) -> Launch:
        return PythonLaunch(self.function, self.check_arguments(arrays))


class PythonBackend(Backend):
    """The reference interpreter: every op native, vectors native, THREAD axes lifted (never parallel),
    the CPU tensor cores emulated."""

    name = "python"
    # EXP and LOG are written out by Instruction Selection here too: every backend computes them
    # with the same UOps, so the reference interpreter gives the compiled backends' values
    supported_ops = frozenset(GroupOp.ELEMENTWISE - {Ops.EXP, Ops.LOG})
    vector_widths = (2, 3, 4, 8, 16)
    has_local = False
    has_threads = True
    tensor_cores = cpu_tensor_cores()

    def __init__(self) -> None:
        self._compiled: dict[str, PythonCompiledKernel] = {}

    @property
    def device(self) -> str:
        return "python"

    def render(self, linear: UOp) -> str:
        if linear.op is not Ops.LINEAR:
            raise RenderError(f"python: render takes a LINEAR program, got {linear.op.name}")
        return render_python(linear)

    def render_mapped(self, linear: UOp) -> tuple[str, SourceMap]:
        if linear.op is not Ops.LINEAR:
            raise RenderError(f"python: render takes a LINEAR program, got {linear.op.name}")
        return render_python_mapped(linear)

    def compile(self, source: str, name: str) -> PythonCompiledKernel:
        cached = self._compiled.get(source)
        if cached is not None:
            return cached
        meta = KernelMeta.from_source(source, self.name)
        start = time.perf_counter()
        namespace = dict(RUNTIME)
        try:
            exec(compile(source, f"<uopviz kernel {name}>", "exec"), namespace)  # noqa: S102 - our own source
        except SyntaxError as error:
            raise CompileError(self.name, name, f"{error.msg} at line {error.lineno}", source) from error
        kernel = PythonCompiledKernel.built(self.name, meta, source, start, {}, function=namespace["kernel"])
        self._compiled[source] = kernel
        return kernel
