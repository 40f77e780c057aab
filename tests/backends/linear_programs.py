"""Hand-made LINEAR programs (the Render stage's input, kernel-ir.md) with numpy references.

Each ``LinearCase`` holds a LINEAR program, a maker of random arguments (one numpy array per
PARAM slot, outputs included) and the expected contents of the written slots.  The backend tests
run every case on every backend and compare; they also stand as examples of the linear form the
pipeline produces: REG accumulators, gated loads, THREAD ranges, vector lanes, IF/ENDIF, WMMA.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from uopviz.backends.base import TensorCore, cpu_tensor_cores, numpy_dtype
from uopviz.core.dtype import AddrSpace, DType, dtypes
from uopviz.core.ops import AxisType, Ops
from uopviz.core.uop import UOp  # noqa: F401 - re-exported for tests

Arrays = list[np.ndarray]


@dataclass
class LinearCase:
    """A LINEAR program with random arguments and numpy's answer for the slots it writes."""

    name: str
    linear: UOp
    make_arrays: Callable[[np.random.Generator], Arrays]
    expected: Callable[[Arrays], dict[int, np.ndarray]]
    exact: bool = False  # integer results: compare bit for bit
    rtol: float = 1e-5
    atol: float = 1e-6
    flops: int = 0
    tags: set[str] = field(default_factory=set)
    tensor_core: TensorCore | None = None  # the tile a WMMA case needs the backend to offer

    def __repr__(self) -> str:
        return self.name


class Builder:
    """Builds a LINEAR list in program order.  ``emit`` adds a uop after any of its sources not
    yet emitted; ``again`` adds a uop a second time (a re-read of an accumulator after its loop)."""

    def __init__(self) -> None:
        self.ops: list[UOp] = []
        self.seen: set[UOp] = set()

    def emit(self, u: UOp) -> UOp:
        order: list[UOp] = []
        stack: list[tuple[UOp, bool]] = [(u, False)]
        while stack:  # sources first; a PARAM's shape and the CONSTs are not instructions
            node, ready = stack.pop()
            if ready:
                order.append(node)
            elif node not in self.seen and node.op not in (Ops.CONST, Ops.STACK):
                self.seen.add(node)
                stack.append((node, True))
                if node.op is not Ops.PARAM:
                    stack.extend((s, False) for s in reversed(node.src))
        self.ops.extend(order)
        return u

    def again(self, u: UOp) -> UOp:
        self.ops.append(u)
        return u

    def param(self, slot: int, size: int, dtype: DType = dtypes.float32) -> UOp:
        return self.emit(UOp.param(slot, (size,), dtype, "CPU", AddrSpace.GLOBAL))

    def register(self, size: int, dtype: DType = dtypes.float32) -> UOp:
        return self.emit(UOp.buffer(size, dtype, "CPU", AddrSpace.REG))

    def loop(self, bound: int, axis_type: AxisType = AxisType.LOOP) -> UOp:
        return self.emit(UOp.range(bound, axis_type))

    def end(self, range_uop: UOp, *body: UOp) -> UOp:
        return self.emit(UOp(Ops.END, (*body, range_uop)))

    def load(self, buffer: UOp, index: UOp | int, alt: UOp | None = None, gate: UOp | None = None) -> UOp:
        index_uop = index if isinstance(index, UOp) else idx(index)
        address = self.emit(UOp(Ops.INDEX, (buffer, index_uop)))
        src = (address,) if gate is None else (address, alt, gate)
        return self.emit(UOp(Ops.LOAD, src))

    def store(self, buffer: UOp, index: UOp | int, value: UOp, gate: UOp | None = None) -> UOp:
        index_uop = index if isinstance(index, UOp) else idx(index)
        address = self.emit(UOp(Ops.INDEX, (buffer, index_uop)))
        return self.emit(UOp(Ops.STORE, (address, value) if gate is None else (address, value, gate)))

    def linear(self, name: str) -> UOp:
        return UOp(Ops.LINEAR, tuple(self.ops), name)


def idx(value: int) -> UOp:
    """An index constant."""
    return UOp.const(dtypes.index, value)


def const(dtype: DType, value: float | int | bool) -> UOp:
    return UOp.const(dtype, value)


def lanes(*values: UOp) -> UOp:
    return UOp(Ops.VECTORIZE, tuple(values))


def random_array(
    rng: np.random.Generator, size: int, dtype: DType, low: float = -3, high: float = 3
) -> np.ndarray:
    """Random values of ``dtype`` in [low, high) (the whole range for narrow integers)."""
    storage = numpy_dtype(dtype)
    if dtype.is_float:
        return rng.uniform(low, high, size).astype(storage)
    if dtype.is_bool:
        return rng.integers(0, 2, size).astype(np.bool_)
    info = np.iinfo(storage)
    return rng.integers(
        max(info.min, int(low)) if low > info.min else info.min,
        min(info.max, int(high)) + 1,
        size,
        dtype=storage,
    )


# ---------------------------------------------------------------------------------------------
# the cases


def elementwise(n: int) -> LinearCase:
    """``out[i] = a[i] * 2 + b[i]``."""
    b = Builder()
    out, a, c = b.param(0, n), b.param(1, n), b.param(2, n)
    i = b.loop(n)
    value = b.load(a, i) * const(dtypes.float32, 2.0) + b.load(c, i)
    b.end(i, b.store(out, i, value))

    def make(rng):
        return [
            np.zeros(n, np.float32),
            random_array(rng, n, dtypes.float32),
            random_array(rng, n, dtypes.float32),
        ]

    return LinearCase(
        f"elementwise_{n}", b.linear(f"E_{n}"), make, lambda x: {0: x[1] * 2 + x[2]}, flops=2 * n
    )


def fill(rows: int, cols: int, value: float = 0.0) -> LinearCase:
    """``out[i * stride + j] = value`` for the first ``cols`` of each row of ``cols + 2``: a padded
    buffer's border filled (the NNEF front end's padding), a nest that reads no memory."""
    b = Builder()
    stride = cols + 2
    out = b.param(0, rows * stride)
    i = b.loop(rows)
    j = b.loop(cols)
    b.end(j, b.store(out, i * stride + j, const(dtypes.float32, value)))
    b.end(i)

    def make(rng):
        return [random_array(rng, rows * stride, dtypes.float32)]

    def expected(x):
        filled = x[0].reshape(rows, stride).copy()
        filled[:, :cols] = value
        return {0: filled.reshape(-1)}

    return LinearCase(f"fill_{rows}x{cols}", b.linear(f"E_{rows}_{cols}"), make, expected)


def reduction(rows: int, cols: int) -> LinearCase:
    """``out[i] = sum_j a[i, j]`` with a REG accumulator, re-read after the reduce loop (again)."""
    b = Builder()
    out, a = b.param(0, rows), b.param(1, rows * cols)
    acc = b.register(1)
    i = b.loop(rows)
    init = b.store(acc, 0, const(dtypes.float32, 0.0))
    j = b.loop(cols, AxisType.REDUCE)
    read = b.load(acc, 0)
    update = b.store(acc, 0, read + b.load(a, i * cols + j))
    b.end(j, update)
    total = b.again(read)
    b.end(i, b.store(out, i, total))
    del init

    def make(rng):
        return [np.zeros(rows, np.float32), random_array(rng, rows * cols, dtypes.float32)]

    return LinearCase(
        f"reduction_{rows}x{cols}",
        b.linear(f"r_{rows}_{cols}"),
        make,
        lambda x: {0: x[1].reshape(rows, cols).sum(1, dtype=np.float64).astype(np.float32)},
        rtol=1e-4,
        atol=1e-4,
        flops=rows * cols,
    )


def max_reduction_after(rows: int, cols: int) -> LinearCase:
    """``out[i] = max_j a[i, j]``; the read after the loop goes through AFTER(acc, END)."""
    b = Builder()
    out, a = b.param(0, rows), b.param(1, rows * cols)
    acc = b.register(1)
    i = b.loop(rows)
    b.store(acc, 0, const(dtypes.float32, -math.inf))
    j = b.loop(cols, AxisType.REDUCE)
    update = b.store(acc, 0, b.load(acc, 0).maximum(b.load(a, i * cols + j)))
    end_j = b.end(j, update)
    done = b.emit(UOp(Ops.AFTER, (acc, end_j)))
    b.end(i, b.store(out, i, b.load(done, 0)))

    def make(rng):
        return [np.zeros(rows, np.float32), random_array(rng, rows * cols, dtypes.float32)]

    return LinearCase(
        f"max_reduction_{rows}x{cols}",
        b.linear(f"r_max_{rows}_{cols}"),
        make,
        lambda x: {0: x[1].reshape(rows, cols).max(1)},
        exact=True,
    )


def gated_load(n: int, shift: int = 2) -> LinearCase:
    """``out[i] = a[i - shift]`` where that exists, else -1 (a PAD)."""
    b = Builder()
    out, a = b.param(0, n), b.param(1, n)
    i = b.loop(n)
    source = i - idx(shift)
    gate = b.emit(source >= idx(0))
    value = b.load(a, source, const(dtypes.float32, -1.0), gate)
    b.end(i, b.store(out, i, value))

    def make(rng):
        return [np.zeros(n, np.float32), random_array(rng, n, dtypes.float32)]

    def expected(x):
        want = np.full(n, -1.0, np.float32)
        want[shift:] = x[1][: n - shift]
        return {0: want}

    return LinearCase(f"gated_load_{n}", b.linear(f"E_pad_{n}"), make, expected, exact=True)


def thread_range(threads: int, inner: int) -> LinearCase:
    """A THREAD range over row blocks with a REG accumulator inside: each thread its own."""
    b = Builder()
    rows = threads * 3
    out, a = b.param(0, rows), b.param(1, rows * inner)
    acc = b.register(1)
    t = b.loop(threads, AxisType.THREAD)
    r = b.loop(3)
    row = b.emit(t * idx(3) + r)
    b.store(acc, 0, const(dtypes.float32, 0.0))
    k = b.loop(inner, AxisType.REDUCE)
    read = b.load(acc, 0)
    value = b.load(a, row * inner + k)
    b.end(k, b.store(acc, 0, read + value * value))
    total = b.again(read)
    b.end(r, b.store(out, row, UOp(Ops.SQRT, (total,))))
    b.end(t)

    def make(rng):
        return [np.zeros(rows, np.float32), random_array(rng, rows * inner, dtypes.float32)]

    return LinearCase(
        f"thread_range_{threads}x{inner}",
        b.linear(f"r_t{threads}_{inner}"),
        make,
        lambda x: {0: np.sqrt((x[1].reshape(rows, inner).astype(np.float64) ** 2).sum(1)).astype(np.float32)},
        rtol=1e-4,
        atol=1e-5,
        tags={"threads"},
    )


def vector_lanes(n4: int) -> LinearCase:
    """Contiguous float32x4 loads/stores, whole-vector ALU, a REG vector accumulator, GEP lanes."""
    b = Builder()
    n = n4 * 4
    out, a, c, total = b.param(0, n), b.param(1, n), b.param(2, n), b.param(3, 1)
    acc = b.register(4)
    four = lanes(*(idx(k) for k in range(4)))
    b.store(acc, four, lanes(*(const(dtypes.float32, 0.0),) * 4))
    i = b.loop(n4)
    base = i * idx(4)
    address = lanes(*(base + idx(k) for k in range(4)))
    x, y = b.load(a, address), b.load(c, address)
    product = x * y + x
    b.store(out, address, product)
    read = b.load(acc, four)
    b.end(i, b.store(acc, four, read + product))
    summed = b.again(read)
    parts = [UOp(Ops.GEP, (summed,), (k,)) for k in range(4)]
    b.store(total, 0, (parts[0] + parts[1]) + (parts[2] + parts[3]))

    def make(rng):
        return [
            np.zeros(n, np.float32),
            random_array(rng, n, dtypes.float32),
            random_array(rng, n, dtypes.float32),
            np.zeros(1, np.float32),
        ]

    def expected(x):
        product = x[1] * x[2] + x[1]
        return {0: product, 3: np.array([product.astype(np.float64).sum()], np.float32)}

    return LinearCase(
        f"vector_lanes_{n4}x4", b.linear(f"E_{n4}_u4"), make, expected, rtol=1e-4, atol=1e-4, tags={"vector"}
    )


def vector_gather(rows: int, cols: int) -> LinearCase:
    """Transpose with 4 lanes reading a column (strided gather) and a vector WHERE/CMP."""
    assert rows % 4 == 0
    b = Builder()
    out, a = b.param(0, rows * cols), b.param(1, rows * cols)
    j = b.loop(cols)
    i = b.loop(rows // 4)
    rows_vector = lanes(*(i * idx(4) + idx(k) for k in range(4)))
    column = b.load(a, lanes(*((i * idx(4) + idx(k)) * idx(cols) + j for k in range(4))))
    zero = lanes(*(const(dtypes.float32, 0.0),) * 4)
    positive = b.emit(column > zero)
    value = b.emit(positive.where(column, column * lanes(*(const(dtypes.float32, 0.5),) * 4)))
    del rows_vector
    b.store(out, lanes(*(j * idx(rows) + i * idx(4) + idx(k) for k in range(4))), value)
    b.end(i)
    b.end(j)

    def make(rng):
        return [np.zeros(rows * cols, np.float32), random_array(rng, rows * cols, dtypes.float32)]

    def expected(x):
        t = x[1].reshape(rows, cols).T.reshape(-1)
        return {0: np.where(t > 0, t, t * np.float32(0.5))}

    return LinearCase(
        f"vector_gather_{rows}x{cols}",
        b.linear(f"E_T_{rows}_{cols}"),
        make,
        expected,
        exact=True,
        tags={"vector"},
    )


def if_block(n: int) -> LinearCase:
    """IF/ENDIF around a store: only the first half of ``out`` changes."""
    b = Builder()
    out, a = b.param(0, n), b.param(1, n)
    i = b.loop(n)
    gate = b.emit(i < idx(n // 2))
    block = b.emit(UOp(Ops.IF, (gate,)))
    store = b.store(out, i, b.load(a, i) + const(dtypes.float32, 1.0))
    b.emit(UOp(Ops.ENDIF, (block, store)))
    b.end(i)

    def make(rng):
        return [random_array(rng, n, dtypes.float32), random_array(rng, n, dtypes.float32)]

    def expected(x):
        want = x[0].copy()
        want[: n // 2] = x[1][: n // 2] + 1
        return {0: want}

    return LinearCase(f"if_block_{n}", b.linear(f"E_if_{n}"), make, expected, exact=True)


def gated_store(n: int) -> LinearCase:
    """STORE with a gate: odd positions keep their old value."""
    b = Builder()
    out, a = b.param(0, n), b.param(1, n)
    i = b.loop(n)
    gate = b.emit((i % idx(2)).ne(idx(1)))
    b.end(i, b.store(out, i, b.load(a, i) * b.load(a, i), gate))

    def make(rng):
        return [random_array(rng, n, dtypes.float32), random_array(rng, n, dtypes.float32)]

    def expected(x):
        want = x[0].copy()
        want[::2] = x[1][::2] * x[1][::2]
        return {0: want}

    return LinearCase(f"gated_store_{n}", b.linear(f"E_gs_{n}"), make, expected, exact=True)


def prefix_gated_store(rows: int, width: int, lanes_: int) -> LinearCase:
    """Rows of ``width`` elements each stored as one vector of ``lanes_`` lanes whose lanes past the
    row are gated off by a constant gate (a row padded to a whole register): the next row's first
    elements and the buffer's last ones are never written by the padded lanes."""
    b = Builder()
    out, a = b.param(0, rows * width), b.param(1, rows * lanes_)
    i = b.loop(rows)
    vector = b.load(a, lanes(*(i * idx(lanes_) + idx(k) for k in range(lanes_))))
    gate = lanes(*(const(dtypes.bool, k < width) for k in range(lanes_)))
    address = lanes(*(i * idx(width) + idx(k) for k in range(lanes_)))
    b.end(i, b.store(out, address, vector, gate))  # the load itself: a value read twice is pinned to
    # a register, which a 16-lane vector is not under x86-64-v3 or -v2

    def make(rng):
        return [np.full(rows * width, np.nan, np.float32), random_array(rng, rows * lanes_, dtypes.float32)]

    def expected(x):
        return {0: x[1].reshape(rows, lanes_)[:, :width].reshape(-1)}

    return LinearCase(f"prefix_gated_store_{rows}x{width}of{lanes_}", b.linear(f"E_pgs_{rows}_{width}"),
                      make, expected, exact=True)


def prefix_gated_load(rows: int, width: int, lanes_: int) -> LinearCase:
    """Rows of ``width`` elements, packed, each loaded as one vector of ``lanes_`` lanes whose lanes
    past the row are gated off by a constant gate (-1 there): the padded lanes of the last row lie
    past the buffer's end, those of the others in the next row, and neither is read into the result."""
    b = Builder()
    out, a = b.param(0, rows * lanes_), b.param(1, rows * width)
    i = b.loop(rows)
    gate = lanes(*(const(dtypes.bool, k < width) for k in range(lanes_)))
    alt = lanes(*(const(dtypes.float32, -1.0) for _ in range(lanes_)))
    vector = b.load(a, lanes(*(i * idx(width) + idx(k) for k in range(lanes_))), alt, gate)
    b.end(i, b.store(out, lanes(*(i * idx(lanes_) + idx(k) for k in range(lanes_))), vector))

    def make(rng):
        return [np.zeros(rows * lanes_, np.float32), random_array(rng, rows * width, dtypes.float32)]

    def expected(x):
        want = np.full((rows, lanes_), -1.0, np.float32)
        want[:, :width] = x[1].reshape(rows, width)
        return {0: want.reshape(-1)}

    return LinearCase(f"prefix_gated_load_{rows}x{width}of{lanes_}", b.linear(f"E_pgl_{rows}_{width}"),
                      make, expected, exact=True)


def wmma_gemm(tiles_m: int, tiles_n: int, tiles_k: int, config: TensorCore | None = None) -> LinearCase:
    """A gemm made of one-thread tensor-core tiles: each tile a WMMA of row-major vectors."""
    tc = config or cpu_tensor_cores()[0]
    tm, tn, tk = tc.dims
    m, n, k = tiles_m * tm, tiles_n * tn, tiles_k * tk
    b = Builder()
    out, a, c = b.param(0, m * n), b.param(1, m * k), b.param(2, k * n)
    acc = b.register(tm * tn)
    c_lanes = lanes(*(idx(e) for e in range(tm * tn)))
    bm = b.loop(tiles_m)
    bn = b.loop(tiles_n)
    # the output addresses are computed before the reduce loop: values made inside it end with it
    out_index = b.emit(
        lanes(*((bm * idx(tm) + idx(r)) * idx(n) + bn * idx(tn) + idx(col) for r, col in tc.layout_c))
    )
    b.store(acc, c_lanes, lanes(*(const(dtypes.float32, 0.0),) * (tm * tn)))
    bk = b.loop(tiles_k, AxisType.REDUCE)
    a_index = lanes(*((bm * idx(tm) + idx(r)) * idx(k) + bk * idx(tk) + idx(col) for r, col in tc.layout_a))
    b_index = lanes(*((bk * idx(tk) + idx(r)) * idx(n) + bn * idx(tn) + idx(col) for r, col in tc.layout_b))
    read = b.load(acc, c_lanes)
    product = b.emit(UOp(Ops.WMMA, (b.load(a, a_index), b.load(c, b_index), read), tc))
    b.end(bk, b.store(acc, c_lanes, product))
    result = b.again(read)
    b.store(out, out_index, result)
    b.end(bn)
    b.end(bm)

    def make(rng):
        return [
            np.zeros(m * n, np.float32),
            random_array(rng, m * k, dtypes.float32),
            random_array(rng, k * n, dtypes.float32),
        ]

    def expected(x):
        return {
            0: (x[1].reshape(m, k).astype(np.float64) @ x[2].reshape(k, n)).astype(np.float32).reshape(-1)
        }

    return LinearCase(
        f"wmma_{tc.name}_{m}x{n}x{k}",
        b.linear(f"r_wmma_{m}_{n}_{k}"),
        make,
        expected,
        rtol=1e-4,
        atol=1e-4,
        flops=2 * m * n * k,
        tags={"wmma"},
        tensor_core=tc,
    )


def gemm(m: int, n: int, k: int, upcast: int = 1) -> LinearCase:
    """A plain gemm, ``upcast`` output columns per iteration held in a REG vector accumulator."""
    assert n % upcast == 0
    b = Builder()
    out, a, c = b.param(0, m * n), b.param(1, m * k), b.param(2, k * n)
    acc = b.register(upcast)
    width = dtypes.float32.vec(upcast)
    acc_lanes = lanes(*(idx(e) for e in range(upcast))) if upcast > 1 else idx(0)
    zero = lanes(*(const(dtypes.float32, 0.0),) * upcast) if upcast > 1 else const(dtypes.float32, 0.0)
    i = b.loop(m, AxisType.THREAD)
    j = b.loop(n // upcast)
    out_index = (
        lanes(*(i * idx(n) + j * idx(upcast) + idx(e) for e in range(upcast)))
        if upcast > 1
        else i * idx(n) + j
    )
    b.emit(out_index)
    b.store(acc, acc_lanes, zero)
    kk = b.loop(k, AxisType.REDUCE)
    a_value = b.load(a, i * idx(k) + kk)
    if upcast > 1:
        a_value = b.emit(lanes(*(a_value,) * upcast))
        b_index = lanes(*(kk * idx(n) + j * idx(upcast) + idx(e) for e in range(upcast)))
    else:
        b_index = kk * idx(n) + j
    read = b.load(acc, acc_lanes)
    del width
    b.end(kk, b.store(acc, acc_lanes, read + a_value * b.load(c, b_index)))
    total = b.again(read)
    b.store(out, out_index, total)
    b.end(j)
    b.end(i)

    def make(rng):
        return [
            np.zeros(m * n, np.float32),
            random_array(rng, m * k, dtypes.float32),
            random_array(rng, k * n, dtypes.float32),
        ]

    def expected(x):
        return {
            0: (x[1].reshape(m, k).astype(np.float64) @ x[2].reshape(k, n)).astype(np.float32).reshape(-1)
        }

    return LinearCase(
        f"gemm_{m}x{n}x{k}_u{upcast}",
        b.linear(f"r_gemm_{m}_{n}_{k}_u{upcast}"),
        make,
        expected,
        rtol=1e-4,
        atol=1e-3,
        flops=2 * m * n * k,
        tags={"threads"},
    )


# ---------------------------------------------------------------------------------------------
# integer semantics


def _binary_program(
    name: str, dtype: DType, n: int, build: Callable[[UOp, UOp], UOp], out_dtype: DType | None = None
) -> Builder:
    b = Builder()
    out, x, y = b.param(0, n, out_dtype or dtype), b.param(1, n, dtype), b.param(2, n, dtype)
    i = b.loop(n)
    b.end(i, b.store(out, i, build(b.load(x, i), b.load(y, i))))
    return b


def _numpy_floor_div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.floor_divide(x, y)


def _numpy_mod(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.remainder(x, y)


def _edge_values(dtype: DType) -> np.ndarray:
    storage = numpy_dtype(dtype)
    info = np.iinfo(storage)
    values = [0, 1, 2, 3, 7, -1, -2, -3, -7, info.min, info.max, info.min + 1, info.max - 1]
    return np.array([v for v in values if info.min <= v <= info.max], dtype=storage)


def integer_binary(op: Ops, dtype: DType) -> LinearCase:
    """``op`` on every pair of edge values (negatives, MIN, MAX, zero) of ``dtype``."""
    edges = _edge_values(dtype)
    x_values = np.repeat(edges, len(edges))
    y_values = np.tile(edges, len(edges))
    n = len(x_values)
    reference = {
        Ops.IDIV: _numpy_floor_div,
        Ops.MOD: _numpy_mod,
        Ops.ADD: np.add,
        Ops.SUB: np.subtract,
        Ops.MUL: np.multiply,
        Ops.MAX: np.maximum,
        Ops.XOR: np.bitwise_xor,
        Ops.AND: np.bitwise_and,
        Ops.OR: np.bitwise_or,
    }[op]
    b = _binary_program(op.name, dtype, n, lambda x, y: UOp(op, (x, y)))

    def make(rng):
        return [np.zeros(n, numpy_dtype(dtype)), x_values.copy(), y_values.copy()]

    def expected(x):
        with np.errstate(all="ignore"):
            return {0: reference(x[1], x[2]).astype(numpy_dtype(dtype))}

    return LinearCase(
        f"int_{op.name.lower()}_{dtype.name}",
        b.linear(f"E_{op.name.lower()}_{dtype.name}"),
        make,
        expected,
        exact=True,
        tags={"integer"},
    )


def integer_vector_binary(op: Ops, dtype: DType) -> LinearCase:
    """The same as ``integer_binary`` with 4-lane vectors (whole-vector and lane-wise paths)."""
    edges = _edge_values(dtype)
    x_values = np.repeat(edges, len(edges))
    y_values = np.tile(edges, len(edges))
    pad = (-len(x_values)) % 4
    x_values = np.concatenate([x_values, x_values[:pad]])
    y_values = np.concatenate([y_values, y_values[:pad]])
    n = len(x_values)
    reference = {
        Ops.IDIV: _numpy_floor_div,
        Ops.MOD: _numpy_mod,
        Ops.ADD: np.add,
        Ops.MUL: np.multiply,
        Ops.SUB: np.subtract,
    }[op]
    b = Builder()
    out, x, y = b.param(0, n, dtype), b.param(1, n, dtype), b.param(2, n, dtype)
    i = b.loop(n // 4)
    address = lanes(*(i * idx(4) + idx(k) for k in range(4)))
    b.end(i, b.store(out, address, UOp(op, (b.load(x, address), b.load(y, address)))))

    def make(rng):
        return [np.zeros(n, numpy_dtype(dtype)), x_values.copy(), y_values.copy()]

    def expected(arrays):
        with np.errstate(all="ignore"):
            return {0: reference(arrays[1], arrays[2]).astype(numpy_dtype(dtype))}

    return LinearCase(
        f"int_vec_{op.name.lower()}_{dtype.name}",
        b.linear(f"E_v_{op.name.lower()}_{dtype.name}"),
        make,
        expected,
        exact=True,
        tags={"integer", "vector"},
    )


def shifts(dtype: DType) -> LinearCase:
    """SHL and SHR by 0..bits+1 and by negative counts: numpy's results (0 or -1 past the width)."""
    storage = numpy_dtype(dtype)
    bits = dtype.bits
    values = _edge_values(dtype)
    counts = np.array(
        [0, 1, 3, bits - 1, bits, bits + 1] + ([-1] if not dtype.is_unsigned else []), dtype=storage
    )
    x_values = np.repeat(values, len(counts))
    y_values = np.tile(counts, len(values))
    n = len(x_values)
    b = Builder()
    left, right = b.param(0, n, dtype), b.param(1, n, dtype)
    x, y = b.param(2, n, dtype), b.param(3, n, dtype)
    i = b.loop(n)
    xv, yv = b.load(x, i), b.load(y, i)
    b.store(left, i, UOp(Ops.SHL, (xv, yv)))
    b.store(right, i, UOp(Ops.SHR, (xv, yv)))
    b.end(i)

    def make(rng):
        return [np.zeros(n, storage), np.zeros(n, storage), x_values.copy(), y_values.copy()]

    def expected(arrays):
        with np.errstate(all="ignore"):
            return {0: np.left_shift(arrays[2], arrays[3]), 1: np.right_shift(arrays[2], arrays[3])}

    return LinearCase(
        f"shifts_{dtype.name}",
        b.linear(f"E_shift_{dtype.name}"),
        make,
        expected,
        exact=True,
        tags={"integer"},
    )


def casts(source: DType, target: DType, values: np.ndarray | None = None) -> LinearCase:
    """CAST of in-range values (and negatives into unsigned types, which wrap as numpy does)."""
    storage_in = numpy_dtype(source)
    if values is None:
        if source.is_float:
            values = np.array(
                [0.0, 0.4, 0.6, -0.4, -0.6, 1.5, -1.5, 2.5, 100.75, -100.75, 126.9, -127.9], dtype=storage_in
            )
        elif source.is_bool:
            values = np.array([True, False, True], dtype=np.bool_)
        else:
            values = _edge_values(source)
    values = values.astype(storage_in)
    n = len(values)
    b = Builder()
    out, x = b.param(0, n, target), b.param(1, n, source)
    i = b.loop(n)
    b.end(i, b.store(out, i, b.load(x, i).cast(target)))

    def make(rng):
        return [np.zeros(n, numpy_dtype(target)), values.copy()]

    def expected(arrays):
        with np.errstate(all="ignore"):
            return {0: arrays[1].astype(numpy_dtype(target))}

    return LinearCase(
        f"cast_{source.name}_to_{target.name}",
        b.linear(f"E_cast_{source.name}_{target.name}"),
        make,
        expected,
        exact=True,
        tags={"integer"},
    )


def half_arithmetic(n: int) -> LinearCase:
    """float16 loads, arithmetic and a cast to float32."""
    b = Builder()
    out, x, y = b.param(0, n, dtypes.float32), b.param(1, n, dtypes.float16), b.param(2, n, dtypes.float16)
    i = b.loop(n)
    value = b.load(x, i) * b.load(y, i) + b.load(x, i)
    b.end(i, b.store(out, i, value.cast(dtypes.float32)))

    def make(rng):
        return [
            np.zeros(n, np.float32),
            random_array(rng, n, dtypes.float16),
            random_array(rng, n, dtypes.float16),
        ]

    def expected(arrays):
        return {0: (arrays[1] * arrays[2] + arrays[1]).astype(np.float32)}

    return LinearCase(f"half_{n}", b.linear(f"E_half_{n}"), make, expected, rtol=2e-3, atol=2e-3)


def bfloat16_roundtrip(n: int) -> LinearCase:
    """bfloat16 loads (as bits in uint16), an add rounded to bfloat16, a store of bits."""
    b = Builder()
    out, x = b.param(0, n, dtypes.bfloat16), b.param(1, n, dtypes.bfloat16)
    i = b.loop(n)
    b.end(i, b.store(out, i, b.load(x, i) + b.load(x, i)))

    def make(rng):
        floats = rng.uniform(-4, 4, n).astype(np.float32)
        return [np.zeros(n, np.uint16), (floats.view(np.uint32) >> 16).astype(np.uint16)]

    def expected(arrays):
        doubled = (arrays[1].astype(np.uint32) << 16).view(np.float32) * 2  # exact: a power of two
        return {0: (doubled.view(np.uint32) >> 16).astype(np.uint16)}

    return LinearCase(f"bfloat16_{n}", b.linear(f"E_bf16_{n}"), make, expected, exact=True)


def float_specials(dtype: DType = dtypes.float32) -> LinearCase:
    """MAX, CMP_LT, CMP_NE and WHERE on NaN, infinities and signed zeros (numpy's answers)."""
    storage = numpy_dtype(dtype)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.5, -2.0], dtype=storage)
    x_values, y_values = np.repeat(specials, len(specials)), np.tile(specials, len(specials))
    n = len(x_values)
    b = Builder()
    big, less, differ = b.param(0, n, dtype), b.param(1, n, dtypes.bool), b.param(2, n, dtypes.bool)
    chosen, x, y = b.param(3, n, dtype), b.param(4, n, dtype), b.param(5, n, dtype)
    i = b.loop(n)
    xv, yv = b.load(x, i), b.load(y, i)
    b.store(big, i, xv.maximum(yv))
    lt = b.emit(xv < yv)
    b.store(less, i, lt)
    b.store(differ, i, xv.ne(yv))
    b.store(chosen, i, lt.where(xv, yv))
    b.end(i)

    def make(rng):
        return [
            np.zeros(n, storage),
            np.zeros(n, np.bool_),
            np.zeros(n, np.bool_),
            np.zeros(n, storage),
            x_values.copy(),
            y_values.copy(),
        ]

    def expected(arrays):
        x, y = arrays[4], arrays[5]
        with np.errstate(invalid="ignore"):
            return {0: np.maximum(x, y), 1: x < y, 2: x != y, 3: np.where(x < y, x, y)}

    return LinearCase(
        f"float_specials_{dtype.name}", b.linear(f"E_special_{dtype.name}"), make, expected, exact=True
    )


def gpu_elementwise(groups: int, local: int, n: int | None = None) -> LinearCase:
    """``out[i] = a[i] * 2 + b[i]`` over SPECIAL workgroup and lane indices, gated past ``n``."""
    n = groups * local if n is None else n
    b = Builder()
    out, a, c = b.param(0, n), b.param(1, n), b.param(2, n)
    group = b.emit(UOp(Ops.SPECIAL, (idx(groups),), "gidx0"))
    lane = b.emit(UOp(Ops.SPECIAL, (idx(local),), "lidx0"))
    i = b.emit(group * idx(local) + lane)
    inside = b.emit(i < idx(n))
    zero = const(dtypes.float32, 0.0)
    value = b.load(a, i, zero, inside) * const(dtypes.float32, 2.0) + b.load(c, i, zero, inside)
    b.store(out, i, value, inside)

    def make(rng):
        return [
            np.zeros(n, np.float32),
            random_array(rng, n, dtypes.float32),
            random_array(rng, n, dtypes.float32),
        ]

    return LinearCase(
        f"gpu_elementwise_{groups}x{local}_{n}",
        b.linear(f"E_g{groups}_l{local}"),
        make,
        lambda x: {0: x[1] * 2 + x[2]},
        tags={"gpu"},
    )


def group_reduce(rows: int, local: int, cols: int) -> LinearCase:
    """Row sums by workgroups: each lane sums a strided part in a REG, lanes meet in a LOCAL buffer after
    a BARRIER, and lane 0 adds the partial sums (GROUP_REDUCE)."""
    b = Builder()
    out, a = b.param(0, rows), b.param(1, rows * cols)
    partial = b.emit(UOp.buffer(local, dtypes.float32, "CPU", AddrSpace.LOCAL))
    acc = b.register(1)
    row = b.emit(UOp(Ops.SPECIAL, (idx(rows),), "gidx0"))
    lane = b.emit(UOp(Ops.SPECIAL, (idx(local),), "lidx0"))
    b.store(acc, 0, const(dtypes.float32, 0.0))
    steps = (cols + local - 1) // local
    k = b.loop(steps, AxisType.REDUCE)
    col = b.emit(k * idx(local) + lane)
    inside = b.emit(col < idx(cols))
    read = b.load(acc, 0)
    value = b.load(a, row * idx(cols) + col, const(dtypes.float32, 0.0), inside)
    b.end(k, b.store(acc, 0, read + value))
    mine = b.again(read)
    stored = b.store(partial, lane, mine)
    barrier = b.emit(UOp(Ops.BARRIER, (stored,)))
    first = b.emit(lane.eq(idx(0)))
    block = b.emit(UOp(Ops.IF, (first, barrier)))
    total = b.register(1)
    b.store(total, 0, const(dtypes.float32, 0.0))
    j = b.loop(local, AxisType.GROUP_REDUCE)
    total_read = b.load(total, 0)
    b.end(j, b.store(total, 0, total_read + b.load(partial, j)))
    result = b.again(total_read)
    done = b.store(out, row, result)
    b.emit(UOp(Ops.ENDIF, (block, done)))

    def make(rng):
        return [np.zeros(rows, np.float32), random_array(rng, rows * cols, dtypes.float32)]

    return LinearCase(
        f"group_reduce_{rows}x{local}_{cols}",
        b.linear(f"r_g{rows}_l{local}_{cols}"),
        make,
        lambda x: {0: x[1].reshape(rows, cols).astype(np.float64).sum(1).astype(np.float32)},
        rtol=1e-4,
        atol=1e-4,
        tags={"gpu", "local"},
    )


def layout_expression(config: TensorCore, operand: str, lane: UOp, element: int) -> tuple[UOp, UOp]:
    """The (row, column) a lane's ``element`` of ``operand`` holds, as index expressions of the ``lane``
    UOp.  PTX's fragment layouts are bit permutations: each bit of a coordinate that varies with the
    lane is one bit of the lane number; this reads them off the layout table (and checks it)."""
    coordinates = [config.coordinate(operand, t, element) for t in range(config.threads)]
    out = []
    for axis in (0, 1):
        values = [coordinate[axis] for coordinate in coordinates]
        constant = values[0]
        sources: list[tuple[int, int]] = []  # (coordinate bit, lane bit)
        for bit in range(max(values).bit_length()):
            varying = [((v ^ constant) >> bit) & 1 for v in values]
            if not any(varying):
                continue
            lane_bit = next(
                (
                    lb
                    for lb in range((config.threads - 1).bit_length())
                    if all(varying[t] == (t >> lb) & 1 for t in range(config.threads))
                ),
                None,
            )
            if lane_bit is None:
                raise ValueError(f"{config.name}: bit {bit} of {operand}'s coordinates is not a lane bit")
            sources.append((bit, lane_bit))
        for t, value in enumerate(values):
            rebuilt = constant + sum(((t >> lb) & 1) << bit for bit, lb in sources)
            if rebuilt != value or any((constant >> bit) & 1 for bit, _ in sources):
                raise ValueError(f"{config.name}: the layout of {operand} is not a bit permutation")
        expression = idx(constant)
        for bit, lane_bit in sources:
            expression = expression + ((lane // idx(1 << lane_bit)) % idx(2)) * idx(1 << bit)
        out.append(expression)
    return out[0], out[1]


def warp_wmma_gemm(tiles_k: int, config: TensorCore) -> LinearCase:
    """One ``M×N`` output tile of ``A[M,K] @ B[K,N]`` computed by one warp with the tensor core ``config``:
    lane = ``lidx0``; each lane loads its fragment elements, WMMA, stores its result elements."""
    tm, tn, tk = config.dims
    k = tiles_k * tk
    b = Builder()
    out, a, c = b.param(0, tm * tn), b.param(1, tm * k, config.dtype_in), b.param(2, k * tn, config.dtype_in)
    lane = b.emit(UOp(Ops.SPECIAL, (idx(config.threads),), "lidx0"))
    count_c = config.elements("c")
    acc = b.register(count_c, config.dtype_out)
    c_lanes = lanes(*(idx(e) for e in range(count_c)))
    out_rows = [layout_expression(config, "c", lane, e) for e in range(count_c)]
    b.emit(lanes(*(row * idx(tn) + col for row, col in out_rows)))
    b.store(acc, c_lanes, lanes(*(const(config.dtype_out, 0),) * count_c))
    kt = b.loop(tiles_k, AxisType.REDUCE)
    a_values = []
    for e in range(config.elements("a")):
        row, col = layout_expression(config, "a", lane, e)
        a_values.append(b.load(a, row * idx(k) + kt * idx(tk) + col))
    b_values = []
    for e in range(config.elements("b")):
        row, col = layout_expression(config, "b", lane, e)
        b_values.append(b.load(c, (kt * idx(tk) + row) * idx(tn) + col))
    read = b.load(acc, c_lanes)
    product = b.emit(UOp(Ops.WMMA, (b.emit(lanes(*a_values)), b.emit(lanes(*b_values)), read), config))
    b.end(kt, b.store(acc, c_lanes, product))
    result = b.again(read)
    for e, (row, col) in enumerate(out_rows):
        b.store(out, row * idx(tn) + col, b.emit(UOp(Ops.GEP, (result,), (e,))))

    def make(rng):
        return [
            np.zeros(tm * tn, np.float32),
            random_array(rng, tm * k, config.dtype_in, -2, 2),
            random_array(rng, k * tn, config.dtype_in, -2, 2),
        ]

    def expected(x):
        product = x[1].reshape(tm, k).astype(np.float64) @ x[2].reshape(k, tn).astype(np.float64)
        return {0: product.astype(np.float32).reshape(-1)}

    return LinearCase(
        f"warp_wmma_{config.name}_k{k}",
        b.linear(f"r_warp_wmma_{k}"),
        make,
        expected,
        rtol=2e-3,
        atol=2e-3,
        flops=2 * tm * tn * k,
        tags={"gpu", "wmma"},
        tensor_core=config,
    )


def gpu_cases() -> list[LinearCase]:
    """Programs with SPECIAL indices, LOCAL buffers and BARRIERs (GPU backends only)."""
    return [
        gpu_elementwise(4, 8),
        gpu_elementwise(3, 16, 40),
        group_reduce(5, 8, 100),
        group_reduce(2, 16, 16),
    ]


def crash_custom(n: int = 16) -> LinearCase:
    """A CUSTOM op that writes far outside its buffer (for the isolation tests; it crashes)."""
    b = Builder()
    out = b.param(0, n)
    b.emit(
        UOp(
            Ops.CUSTOM,
            (out,),
            ("for (long long k = 0; k < (1LL << 40); k += 4096) {0}[k] = 1.0f;", dtypes.void),
        )
    )
    return LinearCase(
        "crash_custom",
        b.linear("crash_out_of_bounds"),
        lambda rng: [np.zeros(n, np.float32)],
        lambda arrays: {},
        tags={"crash"},
    )


def spin_custom(n: int = 4) -> LinearCase:
    """A CUSTOM op that never finishes (for the timeout tests)."""
    b = Builder()
    out = b.param(0, n)
    b.emit(
        UOp(
            Ops.CUSTOM,
            (out,),
            ("for (volatile long long k = 0; k >= 0; k++) {0}[0] = (float)k;", dtypes.void),
        )
    )
    return LinearCase(
        "spin_custom",
        b.linear("spin_forever"),
        lambda rng: [np.zeros(n, np.float32)],
        lambda arrays: {},
        tags={"crash"},
    )


def correctness_cases() -> list[LinearCase]:
    """Every numeric case, at several sizes."""
    cases = [elementwise(n) for n in (1, 7, 64, 1000)]
    cases += [reduction(r, c) for r, c in ((1, 1), (3, 17), (16, 256))]
    cases += [max_reduction_after(r, c) for r, c in ((2, 5), (9, 64))]
    cases += [gated_load(n) for n in (3, 50)]
    cases += [thread_range(t, k) for t, k in ((2, 8), (4, 33))]
    cases += [vector_lanes(n) for n in (1, 5, 64)]
    cases += [vector_gather(r, c) for r, c in ((4, 3), (8, 16))]
    cases += [if_block(n) for n in (4, 31)]
    cases += [gated_store(n) for n in (5, 64)]
    cases += [prefix_gated_store(r, w, n) for r, w, n in ((3, 14, 16), (5, 7, 8), (2, 3, 4))]
    cases += [wmma_gemm(1, 1, 1), wmma_gemm(2, 3, 4), wmma_gemm(1, 2, 2, cpu_tensor_cores()[1])]
    cases += [gemm(8, 8, 8), gemm(5, 12, 7, upcast=4), gemm(16, 32, 16, upcast=8), gemm(4, 64, 8, upcast=32)]
    cases += [
        half_arithmetic(33),
        half_vectors(9),
        bfloat16_roundtrip(40),
        float_specials(dtypes.float32),
        float_specials(dtypes.float64),
    ]
    return cases


INTEGER_TYPES = (
    dtypes.int8,
    dtypes.int16,
    dtypes.int32,
    dtypes.int64,
    dtypes.uint8,
    dtypes.uint32,
    dtypes.uint64,
)


def integer_cases() -> list[LinearCase]:
    """Integer semantics: floor division/modulo, wraparound, shifts, casts."""
    cases = [
        integer_binary(op, dt)
        for op in (Ops.IDIV, Ops.MOD, Ops.ADD, Ops.MUL, Ops.MAX)
        for dt in INTEGER_TYPES
    ]
    cases += [integer_binary(op, dtypes.int32) for op in (Ops.SUB, Ops.XOR, Ops.AND, Ops.OR)]
    cases += [
        integer_vector_binary(op, dt)
        for op in (Ops.IDIV, Ops.MOD, Ops.ADD, Ops.MUL, Ops.SUB)
        for dt in (dtypes.int32, dtypes.int8, dtypes.int64)
    ]
    cases += [shifts(dt) for dt in INTEGER_TYPES]
    floats = (dtypes.float32, dtypes.float64)
    cases += [casts(f, t) for f in floats for t in INTEGER_TYPES + (dtypes.bool,)]
    cases += [
        casts(s, t)
        for s in INTEGER_TYPES
        for t in INTEGER_TYPES + (dtypes.float32, dtypes.float64, dtypes.bool)
        if s != t
    ]
    cases += [casts(dtypes.bool, t) for t in (dtypes.int32, dtypes.float32, dtypes.uint8)]
    return cases


def run_case(backend_name: str, case: LinearCase, seed: int = 0) -> tuple[Arrays, dict[int, np.ndarray]]:
    """Render, compile and run ``case`` on a backend; returns (arrays after the run, expected).
    Skips (with the reason) a WMMA case whose tile the backend does not offer."""
    import pytest

    from uopviz.backends import get

    backend = get(backend_name)
    if case.tensor_core is not None and case.tensor_core not in backend.tensor_cores:
        pytest.skip(
            f"{backend_name} offers no {case.tensor_core.name} tensor core "
            f"(it has {', '.join(tc.name for tc in backend.tensor_cores)})"
        )
    source = backend.render(case.linear)
    kernel = backend.compile(source, case.linear.arg)
    arrays = case.make_arrays(np.random.default_rng(seed))
    expected = case.expected([a.copy() for a in arrays])
    kernel(*arrays)
    return arrays, expected


def assert_case_matches(backend_name: str, case: LinearCase, seed: int = 0) -> None:
    """Run ``case`` and compare every written slot with numpy (bit for bit when ``exact``)."""
    arrays, expected = run_case(backend_name, case, seed)
    for slot, want in expected.items():
        got = arrays[slot]
        where = f"{backend_name}: {case.name}, slot {slot}"
        if case.exact:
            mismatch = (
                np.flatnonzero(
                    got.view(np.uint8).reshape(len(got), -1).tobytes()
                    != want.view(np.uint8).reshape(len(want), -1).tobytes()
                )
                if got.dtype == want.dtype
                else None
            )
            assert got.dtype == want.dtype, f"{where}: dtype {got.dtype} != {want.dtype}"
            same = np.array_equal(got, want, equal_nan=want.dtype.kind == "f")
            assert same, f"{where}: got {got[:16]} want {want[:16]} ({mismatch})"
        else:
            np.testing.assert_allclose(got, want, rtol=case.rtol, atol=case.atol, err_msg=where)


def half_vectors(n4: int) -> LinearCase:
    """float16 vectors: contiguous loads, lane-wise arithmetic, a cast to float32 vectors."""
    b = Builder()
    n = n4 * 4
    out, x, y = b.param(0, n, dtypes.float32), b.param(1, n, dtypes.float16), b.param(2, n, dtypes.float16)
    i = b.loop(n4)
    address = lanes(*(i * idx(4) + idx(k) for k in range(4)))
    xv, yv = b.load(x, address), b.load(y, address)
    b.end(i, b.store(out, address, (xv * yv + xv).cast(dtypes.float32.vec(4))))

    def make(rng):
        return [
            np.zeros(n, np.float32),
            random_array(rng, n, dtypes.float16),
            random_array(rng, n, dtypes.float16),
        ]

    return LinearCase(
        f"half_vectors_{n4}x4",
        b.linear(f"E_half_{n4}_u4"),
        make,
        lambda a: {0: (a[1] * a[2] + a[1]).astype(np.float32)},
        rtol=2e-3,
        atol=2e-3,
        tags={"vector"},
    )
