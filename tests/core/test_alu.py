"""exec_alu and the array evaluator against numpy: wraparound, floor division, shifts, casts, floats."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uopviz.core import UOp, dtypes
from uopviz.core.alu import (
    ALUError,
    bitcast_value,
    evaluate,
    exec_alu,
    exec_alu_array,
    threefry2x32,
    wrap_integer,
)
from uopviz.core.ops import Ops

INTEGER_DTYPES = [
    dtypes.int8,
    dtypes.int16,
    dtypes.int32,
    dtypes.int64,
    dtypes.uint8,
    dtypes.uint16,
    dtypes.uint32,
    dtypes.uint64,
]
BINARY_INTEGER_OPS = {
    Ops.ADD: np.add,
    Ops.SUB: np.subtract,
    Ops.MUL: np.multiply,
    Ops.MAX: np.maximum,
    Ops.IDIV: np.floor_divide,
    Ops.MOD: np.remainder,
    Ops.XOR: np.bitwise_xor,
    Ops.OR: np.bitwise_or,
    Ops.AND: np.bitwise_and,
    Ops.SHL: np.left_shift,
    Ops.SHR: np.right_shift,
}
COMPARISONS = {
    Ops.CMP_LT: np.less,
    Ops.CMP_NE: np.not_equal,
    Ops.CMP_GT: np.greater,
    Ops.CMP_GE: np.greater_equal,
    Ops.CMP_LE: np.less_equal,
    Ops.CMP_EQ: np.equal,
}


def random_values(rng: np.random.Generator, dtype, count: int) -> np.ndarray:
    """Values spread over the whole range of an integer dtype, with the extremes and small values mixed in."""
    info = np.iinfo(dtype.numpy_name)
    wide = rng.integers(info.min, info.max, size=count, dtype=dtype.numpy_name, endpoint=True)
    small = rng.integers(max(info.min, -9), 10, size=count).astype(dtype.numpy_name)
    extremes = np.array([info.min, info.max, 0, 1], dtype=dtype.numpy_name)
    return np.concatenate([wide, small, extremes])


@pytest.mark.parametrize("dtype", INTEGER_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("op", list(BINARY_INTEGER_OPS), ids=lambda o: o.name)
def test_integer_binary_matches_numpy(dtype, op):
    rng = np.random.default_rng(hash((dtype.name, op.name)) % 2**32)
    a = random_values(rng, dtype, 150)
    b = rng.permutation(random_values(rng, dtype, 150))
    if op in (Ops.SHL, Ops.SHR):  # include amounts inside, at and beyond the width, and negative ones
        bits = dtype.itemsize * 8
        amounts = rng.integers(-3 if not dtype.is_unsigned else 0, bits + 4, size=a.size)
        b = amounts.astype(dtype.numpy_name)
    with np.errstate(all="ignore"):
        expected = BINARY_INTEGER_OPS[op](a, b)
    got = [exec_alu(op, dtype, (int(x), int(y))) for x, y in zip(a, b)]
    assert got == [int(v) for v in expected], f"{op.name} {dtype.name}"
    array = exec_alu_array(op, dtype, [a, b])
    assert array.dtype == np.dtype(dtype.numpy_name)
    np.testing.assert_array_equal(array, expected)


@pytest.mark.parametrize("dtype", INTEGER_DTYPES, ids=lambda d: d.name)
def test_integer_unary_and_comparisons_match_numpy(dtype):
    rng = np.random.default_rng(7)
    a, b = random_values(rng, dtype, 100), random_values(rng, dtype, 100)
    for op, reference in COMPARISONS.items():
        assert [exec_alu(op, dtypes.bool, (int(x), int(y))) for x, y in zip(a, b)] == list(reference(a, b))
    with np.errstate(all="ignore"):
        assert [exec_alu(Ops.NEG, dtype, (int(x),)) for x in a] == [int(v) for v in np.negative(a)]
        assert [exec_alu(Ops.NOT, dtype, (int(x),)) for x in a] == [int(v) for v in np.invert(a)]
    np.testing.assert_array_equal(exec_alu_array(Ops.NOT, dtype, [a]), np.invert(a))


def test_floor_division_and_modulo_signs():
    # floor division and the divisor's sign for the modulo, as numpy; a zero divisor gives 0
    cases = [
        (7, 2, 3, 1),
        (-7, 2, -4, 1),
        (7, -2, -4, -1),
        (-7, -2, 3, -1),
        (7, 0, 0, 0),
        (-128, -1, -128, 0),
    ]
    for a, b, quotient, remainder in cases:
        assert exec_alu(Ops.IDIV, dtypes.int8, (a, b)) == quotient
        assert exec_alu(Ops.MOD, dtypes.int8, (a, b)) == remainder


@given(st.integers(-(2**70), 2**70))
@settings(max_examples=200)
def test_wrap_integer_is_modular(value):
    for dtype in INTEGER_DTYPES:
        wrapped = wrap_integer(value, dtype)
        assert dtype.min <= wrapped <= dtype.max
        assert (wrapped - value) % 2 ** (dtype.itemsize * 8) == 0


@pytest.mark.parametrize("target", INTEGER_DTYPES + [dtypes.bool], ids=lambda d: d.name)
def test_cast_float_to_integer_truncates_and_wraps(target):
    rng = np.random.default_rng(3)
    # values numpy's astype defines on every platform: within int32 for the narrow types and within the
    # target for 32/64-bit ones
    limit = 2.0**31 if target.itemsize < 4 else 2.0 ** (target.itemsize * 8 - 1)
    low = 0.0 if target.is_unsigned and target.itemsize >= 4 else -limit
    values = np.concatenate(
        [rng.uniform(low, limit * 0.999, 200), rng.uniform(-300, 300, 200), [0.0, -0.5, 0.99]]
    )
    expected = values.astype(target.numpy_name)
    got = [exec_alu(Ops.CAST, target, (float(v),)) for v in values]
    assert got == [v.item() for v in expected]
    np.testing.assert_array_equal(exec_alu_array(Ops.CAST, target, [values], [dtypes.float64]), expected)
    assert exec_alu(Ops.CAST, target, (float("nan"),)) == (True if target.is_bool else 0)


@pytest.mark.parametrize("source", INTEGER_DTYPES, ids=lambda d: d.name)
def test_cast_between_integers_and_to_floats_matches_astype(source):
    rng = np.random.default_rng(5)
    values = random_values(rng, source, 100)
    for target in INTEGER_DTYPES + [dtypes.float32, dtypes.float64, dtypes.float16, dtypes.bool]:
        with np.errstate(over="ignore"):  # large integers overflow float16 to inf, as intended
            expected = values.astype(target.numpy_name)
        got = [exec_alu(Ops.CAST, target, (int(v),)) for v in values]
        assert got == [v.item() for v in expected], f"{source.name} -> {target.name}"


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.float32, dtypes.float64], ids=lambda d: d.name)
def test_float_ops_in_the_dtypes_precision(dtype):
    rng = np.random.default_rng(11)
    npd = np.dtype(dtype.numpy_name)
    a = (rng.standard_normal(200) * 100).astype(npd)
    b = (rng.standard_normal(200) * 100).astype(npd)
    b[:5] = 0
    pairs = {
        Ops.ADD: np.add,
        Ops.SUB: np.subtract,
        Ops.MUL: np.multiply,
        Ops.DIV: np.divide,
        Ops.MAX: np.maximum,
    }
    with np.errstate(all="ignore"):
        for op, reference in pairs.items():
            expected = reference(a, b)
            got = np.array([exec_alu(op, dtype, (float(x), float(y))) for x, y in zip(a, b)], dtype=npd)
            np.testing.assert_array_equal(got, expected)
            np.testing.assert_array_equal(exec_alu_array(op, dtype, [a, b]), expected)
        for op, reference in {
            Ops.SIN: np.sin,
            Ops.EXP2: np.exp2,
            Ops.LOG2: np.log2,
            Ops.SQRT: np.sqrt,
            Ops.RECIP: np.reciprocal,
            Ops.TRUNC: np.trunc,
            Ops.NEG: np.negative,
        }.items():
            # the transcendentals in float64, rounded once (numpy's float32 loops vary by CPU)
            widened = op in (Ops.SIN, Ops.EXP2, Ops.LOG2)
            expected = (reference(a.astype(np.float64)) if widened else reference(a)).astype(npd)
            got = np.array([exec_alu(op, dtype, (float(x),)) for x in a], dtype=npd)
            np.testing.assert_array_equal(got, expected)


def test_float32_results_are_rounded_to_float32():
    assert exec_alu(Ops.ADD, dtypes.float32, (0.1, 0.2)) == float(np.float32(0.1) + np.float32(0.2))
    assert exec_alu(Ops.ADD, dtypes.float64, (0.1, 0.2)) == 0.1 + 0.2
    assert exec_alu(Ops.MUL, dtypes.float32, (3e38, 10.0)) == float("inf")
    assert exec_alu(Ops.ADD, dtypes.bfloat16, (1.0, 2.0**-9)) == 1.0  # 8 mantissa bits: rounds back to 1
    assert exec_alu(Ops.ADD, dtypes.bfloat16, (1.0, 2.0**-7)) == 1.0 + 2.0**-7


def test_bool_semantics():
    assert exec_alu(Ops.ADD, dtypes.bool, (True, False)) is True
    assert exec_alu(Ops.MUL, dtypes.bool, (True, False)) is False
    assert exec_alu(Ops.XOR, dtypes.bool, (True, True)) is False
    assert exec_alu(Ops.NOT, dtypes.bool, (False,)) is True
    assert exec_alu(Ops.WHERE, dtypes.int32, (False, 1, 2)) == 2
    with pytest.raises(ALUError, match="SUB is not defined on bool"):
        exec_alu(Ops.SUB, dtypes.bool, (True, False))


def test_bitcast_values():
    assert bitcast_value(1.0, dtypes.float32, dtypes.int32) == 0x3F800000
    assert bitcast_value(-1, dtypes.int32, dtypes.uint32) == 0xFFFFFFFF
    assert bitcast_value(0x3FF0000000000000, dtypes.uint64, dtypes.float64) == 1.0
    assert bitcast_value(1.5, dtypes.bfloat16, dtypes.uint16) == 0x3FC0
    with pytest.raises(ALUError, match="sizes"):
        bitcast_value(1.0, dtypes.float32, dtypes.int64)


def test_threefry_known_answers():
    # Threefry-2x32-20 known-answer vectors of the published algorithm (Salmon et al., Random123)
    assert threefry2x32(0, 0) == 0x99BA4EFE_6B200159
    assert threefry2x32(0xFFFFFFFF_FFFFFFFF, 0xFFFFFFFF_FFFFFFFF) == 0xBB002BE7_1CB996FC
    assert threefry2x32(0x85A308D3_243F6A88, 0x03707344_13198A2E) == 0x483DF7A0_C4923A9C
    rng = np.random.default_rng(0)
    counters = rng.integers(0, 2**64, size=50, dtype=np.uint64)
    keys = rng.integers(0, 2**64, size=50, dtype=np.uint64)
    array = exec_alu_array(Ops.THREEFRY, dtypes.uint64, [counters, keys])
    assert [int(v) for v in array] == [
        exec_alu(Ops.THREEFRY, dtypes.uint64, (int(c), int(k))) for c, k in zip(counters, keys)
    ]


def test_evaluate_graph_and_vectors():
    r = UOp.range(10)
    x = UOp.param(0, (), dtypes.float32)
    expression = (r * 3 + 1) % 4
    values = np.arange(10)
    np.testing.assert_array_equal(evaluate(expression, {r: values}), (values * 3 + 1) % 4)
    vector = UOp(Ops.VECTORIZE, (x, x * 2.0, x + 1.0))
    lane = UOp(Ops.GEP, (vector * UOp(Ops.VECTORIZE, (UOp.const(dtypes.float32, 3.0),) * 3),), (2,))
    inputs = np.linspace(-1, 1, 7, dtype=np.float32)
    np.testing.assert_array_equal(evaluate(lane, {x: inputs}), (inputs + np.float32(1)) * np.float32(3))
    with pytest.raises(ALUError, match="RANGE is not an elementwise op"):
        evaluate(r + 1, {})
