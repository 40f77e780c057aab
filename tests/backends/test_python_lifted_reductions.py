"""Reduction loops the Python interpreter runs vectorised (the loop's values computed along a lifted
numpy axis, then folded into the accumulator in loop order) against the same programs run as plain
Python loops, bit for bit: every reduction, dtype, size and opts; and which loops may be vectorised."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pytest

import uopviz as uv
from uopviz import AxisType, Ops, Tensor, UOp, dtypes
from uopviz.backends import available, get
from uopviz.backends import python as python_backend
from uopviz.backends.python_loops import carried_ranges, foldable_loops
from uopviz.backends.python_runtime import fold

from . import linear_programs as lp

REDUCTIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "sum": lambda t: t.sum(),
    "max": lambda t: t.max(),
    "min": lambda t: t.min(),
    "prod": lambda t: t.prod(),
    "mean": lambda t: t.mean(),
    "argmax": lambda t: t.argmax(),
    "argmin": lambda t: t.argmin(),
    "any": lambda t: t.any(),
    "all": lambda t: t.all(),
    "cumsum": lambda t: t.cumsum(),
}
DTYPES = ["float32", "float16", "int32", "uint8", "bool"]
CHOOSING = {"max", "min", "argmax", "argmin"}  # nothing to choose from in an empty array


def _values(dtype: str, size: int, seed: int = 0) -> np.ndarray:
    """Random values of ``dtype``; floats hold a NaN (and a -0.0) once there are a few."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(size) > 0.2
    values = (rng.standard_normal(size) * 40).astype(dtype)
    if dtype.startswith("float") and size >= 3:
        values[size // 3] = np.nan
        values[size // 2] = -0.0
    return values


def _run(
    name: str, values: np.ndarray, opts: str | None, vectorise: bool, monkeypatch: pytest.MonkeyPatch
) -> tuple[np.ndarray, str]:
    """The reduction's value on the python backend, and the source of its kernels."""
    monkeypatch.setattr(python_backend, "VECTORISE_REDUCTIONS", vectorise)
    program = uv.compile(REDUCTIONS[name](Tensor(values)), opts=opts)
    return program.run()[0], "\n".join(kernel.source() for kernel in program.kernels)


def _assert_bit_identical(got: np.ndarray, want: np.ndarray, where: str) -> None:
    got, want = np.atleast_1d(got), np.atleast_1d(want)
    assert (got.dtype, got.shape) == (want.dtype, want.shape), where
    assert got.tobytes() == want.tobytes(), f"{where}: got {got[:8]} want {want[:8]}"


@pytest.mark.parametrize("opts", [None, "heuristic"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_vectorised_reductions_match_the_loop_bit_for_bit(
    name: str, dtype: str, opts: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    for size in (0, 1, 7, 1001):
        if size == 0 and name in CHOOSING:
            continue
        values = _values(dtype, size, seed=size)
        got, vectorised = _run(name, values, opts, True, monkeypatch)
        want, looped = _run(name, values, opts, False, monkeypatch)
        _assert_bit_identical(got, want, f"{name} of {size} {dtype}, opts {opts}")
        if size == 1001:  # small reductions need no loop at all (unrolled, or nothing to reduce)
            assert "folded_chunks(" in vectorised and " in range(" not in vectorised, "vectorised"
            assert " in range(" in looped and "folded_chunks(" not in looped, "the reference loops"


def test_the_vectorised_loop_says_so_in_the_source() -> None:
    program = uv.compile(Tensor(np.arange(10, dtype=np.float32)).sum())
    source = program.kernels[0].source()
    assert "# loop r2 runs vectorised" in source
    assert "v5 = fold(Ops.ADD, 'float32', v3, v4, r2)" in source
    compile(source, "<test>", "exec")


def test_a_sum_of_a_million_elements_takes_well_under_seconds() -> None:
    """A hang guard: the loop took minutes; a sequential float32 fold (numpy's cumsum adds in order)
    is the value, as the loop gave."""
    values = np.random.default_rng(7).standard_normal(1 << 20).astype(np.float32)
    start = time.perf_counter()
    got = Tensor(values).sum().numpy()
    assert time.perf_counter() - start < 5.0
    _assert_bit_identical(got, np.cumsum(values, dtype=np.float32)[-1:].reshape(()), "sum of 2**20")


@pytest.mark.skipif("c" not in available(), reason="needs the C backend's sequential loops")
@pytest.mark.parametrize("name", ["sum", "max", "mean", "argmax", "argmin"])
def test_million_element_reductions_match_the_c_backend(name: str) -> None:
    """Without opts, C runs the same single sequential loop (no fast-math reassociation)."""
    values = np.random.default_rng(3).standard_normal((1 << 20) + 3).astype(np.float32)
    ours = uv.compile(REDUCTIONS[name](Tensor(values))).run()[0]
    theirs = uv.compile(REDUCTIONS[name](Tensor(values)), backend="c").run()[0]
    _assert_bit_identical(ours, theirs, f"{name} of 2**20 + 3")


def test_a_long_loop_is_folded_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks fold one after another, each from the accumulator the last one left."""
    monkeypatch.setattr(python_backend, "FOLD_CHUNK_ELEMENTS", 1000)
    values = _values("float32", 12345, seed=5)
    values[values != values] = 1.0
    got, source = _run("sum", values, None, True, monkeypatch)
    assert "folded_chunks(int(c2), 1000, 0)" in source
    _assert_bit_identical(got, np.cumsum(values, dtype=np.float32)[-1:].reshape(()), "sum in chunks")


def test_fold_adds_in_loop_order_not_pairwise() -> None:
    """float32 addition is not associative: 1 + 2**-24 + 2**-24 ... stays 1 in loop order, while a
    pairwise sum would see the small ones add up first."""
    values = np.array([1.0] + [2.0**-24] * 1000, dtype=np.float32)
    chunk = np.arange(values.size).reshape(-1)
    got = fold(Ops.ADD, "float32", np.float32(0.0), values, chunk)
    assert got == np.float32(1.0) and np.add.reduce(values) != np.float32(1.0)


# ---------------------------------------------------------------------------------------------
# which loops may run vectorised


def _accumulate(
    update: Callable[[UOp, UOp], UOp],
    dtype=dtypes.float32,
    store_inside: bool = False,
    last_after: bool = False,
) -> UOp:
    """``out[0] = fold of update(acc, a[j])`` over a REDUCE loop (optionally also storing each step, or
    storing the last ``a[j]`` read in the loop to ``out[1]`` after it)."""
    b = lp.Builder()
    out, a = b.param(0, 8, dtype), b.param(1, 8, dtype)
    acc = b.register(1, dtype)
    b.store(acc, 0, lp.const(dtype, 0))
    j = b.loop(8, AxisType.REDUCE)
    read = b.load(acc, 0)
    element = b.load(a, j)
    value = update(read, element)
    stores = [b.store(acc, 0, value)]
    if store_inside:
        stores.append(b.store(out, j, value))
    b.end(j, *stores)
    b.store(out, 0, b.again(read))
    if last_after:
        b.store(out, 1, element)
    return b.linear("r_test")


def _is_folded(linear: UOp) -> bool:
    program = linear.src
    return bool(foldable_loops(program, carried_ranges(program)))


@pytest.mark.parametrize(
    ("case", "update", "dtype", "folded"),
    [
        ("sum", lambda acc, x: acc + x, dtypes.float32, True),
        ("max with the accumulator first", lambda acc, x: acc.maximum(x), dtypes.float32, True),
        ("float max with the accumulator second", lambda acc, x: x.maximum(acc), dtypes.float32, False),
        ("int max with the accumulator second", lambda acc, x: x.maximum(acc), dtypes.int32, True),
        ("xor", lambda acc, x: acc ^ x, dtypes.int32, True),
        ("subtract (not a reduce op)", lambda acc, x: acc - x, dtypes.float32, False),
        ("bfloat16 (rounded after every step)", lambda acc, x: acc + x, dtypes.bfloat16, False),
        ("a value that reads the accumulator", lambda acc, x: acc + acc * x, dtypes.float32, False),
        ("the accumulator under another op", lambda acc, x: acc * acc + x, dtypes.float32, False),
    ],
)
def test_only_folds_of_an_associative_op_into_an_accumulator_are_vectorised(
    case, update, dtype, folded
) -> None:
    linear = _accumulate(update, dtype)
    assert _is_folded(linear) is folded, case
    source = get("python").render(linear)
    assert ("folded_chunks(" in source) is folded and (" in range(" in source) is not folded, case


def test_a_loop_that_also_stores_to_memory_keeps_the_python_loop() -> None:
    assert not _is_folded(_accumulate(lambda acc, x: acc + x, store_inside=True))


def test_a_loop_whose_last_value_is_used_after_it_keeps_the_python_loop() -> None:
    """After the loop, a value computed in it is the last iteration's: a vectorised loop has them all."""
    linear = _accumulate(lambda acc, x: acc + x, last_after=True)
    assert not _is_folded(linear)
    backend = get("python")
    out, values = np.zeros(8, np.float32), np.arange(1, 9, dtype=np.float32)
    backend.compile(backend.render(linear), "r_test")(out, values)
    assert out[:2].tolist() == [36.0, 8.0]


@pytest.mark.parametrize(
    ("case", "update", "dtype", "inputs", "want"),
    [
        (
            "int max, accumulator second",
            lambda acc, x: x.maximum(acc),
            dtypes.int32,
            np.array([3, -9, 12, 4, 12, 0, -1, 7], np.int32),
            12,
        ),
        (
            "xor",
            lambda acc, x: acc ^ x,
            dtypes.int32,
            np.array([3, 9, 12, 4, 12, 0, 1, 7], np.int32),
            3 ^ 9 ^ 4 ^ 1 ^ 7,
        ),
        ("wrapping int add", lambda acc, x: acc + x, dtypes.int32, np.full(8, 2**30, np.int32), 0),
    ],
)
def test_vectorised_integer_folds_give_the_loop_value(
    case, update, dtype, inputs, want, monkeypatch: pytest.MonkeyPatch
) -> None:
    linear = _accumulate(update, dtype)
    results = []
    for vectorise in (True, False):
        monkeypatch.setattr(python_backend, "VECTORISE_REDUCTIONS", vectorise)
        backend = get("python")
        out = np.zeros(8, np.int32)
        backend.compile(backend.render(linear), "r_test")(out, inputs.copy())
        results.append(out[0])
    assert results == [want, want], case


def _masked_row_sums(rows: int, cols: int) -> UOp:
    """``out[i] = sum_j a[i, j]`` for the first half of the rows, inside an IF: the masked rows fold
    too, and the mask keeps their accumulators and outputs as they were."""
    b = lp.Builder()
    out, a = b.param(0, rows), b.param(1, rows * cols)
    acc = b.register(1)
    i = b.loop(rows)
    block = b.emit(UOp(Ops.IF, (b.emit(i < lp.idx(rows // 2)),)))
    b.store(acc, 0, lp.const(dtypes.float32, 0.0))
    j = b.loop(cols, AxisType.REDUCE)
    read = b.load(acc, 0)
    b.end(j, b.store(acc, 0, read + b.load(a, i * lp.idx(cols) + j)))
    store = b.store(out, i, b.again(read))
    b.emit(UOp(Ops.ENDIF, (block, store)))
    b.end(i)
    return b.linear("r_masked")


def test_a_reduction_inside_an_if_block_folds_where_the_mask_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    linear = _masked_row_sums(6, 37)
    assert _is_folded(linear)
    values = np.random.default_rng(2).standard_normal(6 * 37).astype(np.float32)
    results = []
    for vectorise in (True, False):
        monkeypatch.setattr(python_backend, "VECTORISE_REDUCTIONS", vectorise)
        backend = get("python")
        out = np.full(6, -1.0, np.float32)
        backend.compile(backend.render(linear), "r_masked")(out, values)
        results.append(out)
    _assert_bit_identical(results[0], results[1], "masked row sums")
    want = np.cumsum(values.reshape(6, 37), axis=1, dtype=np.float32)[:3, -1]
    _assert_bit_identical(results[0], np.concatenate([want, np.full(3, -1.0, np.float32)]), "masked row sums")
