"""Instruction Selection: every decomposition evaluated against numpy (exact for integer ops,
within measured ulp bounds for the transcendentals), Threefry against a reference written here
from the published algorithm, MULACC fusion and devectorization."""

from __future__ import annotations

import numpy as np
import pytest

from uopviz.core import UOp, dtypes
from uopviz.core.alu import evaluate
from uopviz.core.ops import GroupOp, Ops
from uopviz.core.rewrite import graph_rewrite
from uopviz.passes.isel import devectorize, instruction_selection_matcher

#: a target with only the spec's primitive ALU ops (everything decomposed must go)
PRIMITIVES = frozenset(
    {
        Ops.RECIP,
        Ops.TRUNC,
        Ops.CAST,
        Ops.ADD,
        Ops.MUL,
        Ops.MAX,
        Ops.MOD,
        Ops.IDIV,
        Ops.CMP_LT,
        Ops.CMP_NE,
        Ops.XOR,
        Ops.OR,
        Ops.AND,
        Ops.SHR,
        Ops.SHL,
        Ops.WHERE,
    }
)
SCALAR_TARGET = instruction_selection_matcher(PRIMITIVES, ())
ALLOWED = PRIMITIVES | {Ops.BITCAST, Ops.CONST, Ops.PARAM, Ops.STACK, Ops.VECTORIZE, Ops.GEP}


def lower(root: UOp, matcher=SCALAR_TARGET) -> UOp:
    out = graph_rewrite(root, matcher, name="instruction selection")
    leftover = {u.op for u in out.toposort()} - ALLOWED
    assert not leftover, f"ops left after instruction selection: {leftover}"
    return out


def run_unary(op: Ops, dtype, values: np.ndarray, matcher=SCALAR_TARGET) -> np.ndarray:
    x = UOp.param(0, (), dtype)
    return evaluate(lower(UOp(op, (x,)), matcher), {x: values.astype(dtype.numpy_name)})


def run_binary(op: Ops, dtype, a: np.ndarray, b: np.ndarray, matcher=SCALAR_TARGET) -> np.ndarray:
    x, y = UOp.param(0, (), dtype), UOp.param(1, (), dtype)
    return evaluate(
        lower(UOp(op, (x, y)), matcher), {x: a.astype(dtype.numpy_name), y: b.astype(dtype.numpy_name)}
    )


# ---------------------------------------------------------------------------------------------
# ulp measurement


def ulp_errors(got: np.ndarray, reference: np.ndarray, dtype) -> np.ndarray:
    """|got - reference| in ulps of the dtype at the reference (a long double reference);
    equal infinities and nan-for-nan count 0."""
    npd = np.dtype(dtype.numpy_name)
    with np.errstate(over="ignore"):
        rounded = reference.astype(npd)
    spacing = np.spacing(np.abs(rounded)).astype(np.longdouble)
    with np.errstate(invalid="ignore"):
        error = np.abs(got.astype(np.longdouble) - reference) / spacing
    same = (got == rounded) | (np.isnan(got) & np.isnan(rounded))
    return np.where(same, 0.0, error).astype(np.float64)


REFERENCE = {
    Ops.EXP2: np.exp2,
    Ops.LOG2: np.log2,
    Ops.SIN: np.sin,
    Ops.COS: np.cos,
    Ops.TAN: np.tan,
    Ops.SQRT: np.sqrt,
}
TRIGONOMETRIC = (Ops.SIN, Ops.COS, Ops.TAN)


def measure(op: Ops, dtype, values: np.ndarray, matcher=SCALAR_TARGET) -> tuple[float, float]:
    """(max, mean) ulp error of the decomposed op over ``values``."""
    values = values.astype(dtype.numpy_name)
    got = run_unary(op, dtype, values, matcher)
    errors = ulp_errors(got, REFERENCE[op](values.astype(np.longdouble)), dtype)
    return float(errors.max()), float(errors.mean())


def near_multiples_of_pi(dtype, count: int = 4000, limit: float = 1e4) -> np.ndarray:
    """The floats nearest k·π (and their neighbours) for k up to ``limit/π``: where sin is tiny."""
    npd = np.dtype(dtype.numpy_name)
    k = np.unique(np.linspace(1, limit / np.pi, count).astype(np.int64))
    centres = (k.astype(np.longdouble) * np.longdouble(np.pi)).astype(npd)  # long double π: 64 bits
    values = [centres]
    for _ in (1, 2):
        values += [np.nextafter(centres, np.inf, dtype=npd), np.nextafter(centres, -np.inf, dtype=npd)]
        centres = values[-1]
    out = np.concatenate(values)
    return np.concatenate([out, -out])


def every_finite_float(dtype, count: int) -> np.ndarray:
    """``count`` finite floats with uniformly random bit patterns: every exponent alike, from the
    denormals to the largest (long double glibc sin/cos/tan reduce them exactly)."""
    npd = np.dtype(dtype.numpy_name)
    unsigned = np.uint32 if npd.itemsize == 4 else np.uint64
    bits = RNG.integers(0, np.iinfo(unsigned).max, count, dtype=unsigned, endpoint=True)
    values = bits.view(npd)
    return values[np.isfinite(values)]


def near_multiples_of_half_pi(dtype, count: int = 3000) -> np.ndarray:
    """The floats nearest k·π/2 (and their neighbours) for k log-spread up to where the spacing of
    floats passes π/2: where sin, cos or tan is tiny or huge."""
    npd = np.dtype(dtype.numpy_name)
    mantissa_bits = 24 if npd.itemsize == 4 else 53
    k = np.unique((2.0 ** RNG.uniform(0, mantissa_bits, count)).astype(np.int64))
    centres = (k.astype(np.longdouble) * (np.longdouble(np.pi) / 2)).astype(npd)
    values = [centres, np.nextafter(centres, np.inf, dtype=npd), np.nextafter(centres, -np.inf, dtype=npd)]
    out = np.concatenate(values)
    return np.concatenate([out, -out])


RNG = np.random.default_rng(2024)
CASES = {
    # (op, dtype, inputs name): (inputs, max ulp bound) — bounds a little above what docs/accuracy.md records
    (Ops.EXP2, "float32", "[-126, 127]"): (RNG.uniform(-126, 127, 100_000), 1.5),
    (Ops.EXP2, "float64", "[-1022, 1023]"): (RNG.uniform(-1022, 1023, 100_000), 1.5),
    (Ops.EXP2, "float32", "denormal results [-149, -126]"): (RNG.uniform(-149, -126, 20_000), 1.0),
    (Ops.EXP2, "float64", "denormal results [-1074, -1022]"): (RNG.uniform(-1074, -1022, 20_000), 1.0),
    (Ops.LOG2, "float32", "[1e-38, 1e38] log-spaced"): (10 ** RNG.uniform(-38, 38, 100_000), 2.0),
    (Ops.LOG2, "float64", "[1e-300, 1e300] log-spaced"): (10 ** RNG.uniform(-300, 300, 100_000), 2.0),
    (Ops.LOG2, "float32", "[0.5, 2]"): (RNG.uniform(0.5, 2, 100_000), 2.0),
    (Ops.LOG2, "float64", "[0.5, 2]"): (RNG.uniform(0.5, 2, 100_000), 2.0),
    (Ops.LOG2, "float32", "denormals"): (10 ** RNG.uniform(-45, -38, 20_000), 2.0),
    (Ops.SIN, "float32", "[-1e4, 1e4]"): (RNG.uniform(-1e4, 1e4, 100_000), 2.5),
    (Ops.SIN, "float64", "[-1e4, 1e4]"): (RNG.uniform(-1e4, 1e4, 100_000), 2.0),
    (Ops.SIN, "float32", "[-π, π]"): (RNG.uniform(-np.pi, np.pi, 100_000), 2.5),
    (Ops.SIN, "float32", "near k·π, |x| <= 1e4"): (near_multiples_of_pi(dtypes.float32), 2.5),
    (Ops.SIN, "float64", "near k·π, |x| <= 1e4"): (near_multiples_of_pi(dtypes.float64), 2.0),
    # float32 reduced in float64: as accurate far out, up to |x| = 1e8
    (Ops.SIN, "float32", "[1e4, 1e5]"): (RNG.uniform(1e4, 1e5, 100_000), 2.0),
    (Ops.SIN, "float32", "[1e5, 1e8]"): (RNG.uniform(1e5, 1e8, 100_000), 2.0),
    (Ops.SIN, "float32", "near k·π, |x| <= 1e8"): (near_multiples_of_pi(dtypes.float32, limit=1e8), 2.0),
    (Ops.SIN, "float64", "[1e5, 1e8]"): (RNG.uniform(1e5, 1e8, 100_000), 2.0),
    # every finite float (Payne–Hanek past 2**26), and the floats nearest multiples of π/2
    **{
        (op, dtype, inputs): (make(dtypes.from_name(dtype)), bound)
        for op in TRIGONOMETRIC
        for dtype, bound in (("float32", 1.5), ("float64", 4.0 if op is Ops.TAN else 3.0))
        for inputs, make in (
            ("every finite float", lambda d: every_finite_float(d, 40_000)),
            ("near k·π/2", near_multiples_of_half_pi),
        )
    },
    (Ops.SQRT, "float32", "[1e-38, 1e38] log-spaced"): (10 ** RNG.uniform(-38, 38, 100_000), 1.5),
    (Ops.SQRT, "float64", "[1e-300, 1e300] log-spaced"): (10 ** RNG.uniform(-300, 300, 100_000), 1.5),
}


@pytest.mark.parametrize("case", list(CASES), ids=[f"{o.name} {d} {n}" for o, d, n in CASES])
def test_transcendental_accuracy(case):
    op, dtype_name, _ = case
    values, bound = CASES[case]
    worst, mean = measure(op, dtypes.from_name(dtype_name), values)
    assert worst <= bound, f"max {worst:.3g} ulp (mean {mean:.3g})"
    assert mean <= 0.5


@pytest.mark.parametrize("op", TRIGONOMETRIC, ids=lambda o: o.name)
def test_float32_trigonometry_without_float64_reduces_in_float32(op):
    # a target without float64 (an OpenCL device without cl_khr_fp64): Cody–Waite in float32 up to
    # 2**14, Payne–Hanek beyond; tan divides two float32 polynomials (docs/accuracy.md)
    target = instruction_selection_matcher(PRIMITIVES, (), has_float64=False)
    lowered = lower(UOp(op, (UOp.param(0, (), dtypes.float32),)), target)
    assert all(u.dtype.scalar is not dtypes.float64 for u in lowered.toposort())
    bound = 4.0 if op is Ops.TAN else 2.5
    for values in (
        RNG.uniform(-2.5e4, 2.5e4, 30_000),
        near_multiples_of_half_pi(dtypes.float32),
        every_finite_float(dtypes.float32, 30_000),
    ):
        worst, mean = measure(op, dtypes.float32, values, target)
        assert worst <= bound and mean <= 0.5, (worst, mean)


SPECIAL = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    np.inf,
    -np.inf,
    np.nan,
    1e-45,
    1e-40,
    3e38,
    -3e38,
    127.9,
    128.0,
    -149.5,
    -150.0,
]


@pytest.mark.parametrize("op", [Ops.EXP2, Ops.LOG2, *TRIGONOMETRIC, Ops.SQRT], ids=lambda o: o.name)
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64], ids=lambda d: d.name)
def test_special_values(op, dtype):
    with np.errstate(over="ignore"):  # 1e308 is inf in float32, on purpose
        values = np.array(SPECIAL + [1e-310, 1e308, -1075.0, 1023.9], dtype=np.float64).astype(
            dtype.numpy_name
        )
    got = run_unary(op, dtype, values)
    with np.errstate(all="ignore"):
        reference = REFERENCE[op](values.astype(np.longdouble))
        rounded = reference.astype(dtype.numpy_name)
    errors = ulp_errors(got, reference, dtype)
    assert np.array_equal(np.isnan(got), np.isnan(rounded)), (values, got)
    finite = ~np.isnan(got)
    assert np.array_equal(np.isinf(got[finite]), np.isinf(rounded[finite]))
    assert errors.max() <= 3, (values[errors.argmax()], got[errors.argmax()])
    if op is Ops.SQRT:
        assert np.signbit(got[1]), "sqrt(-0.0) is -0.0"


@pytest.mark.parametrize("op", [Ops.EXP2, Ops.LOG2, *TRIGONOMETRIC, Ops.SQRT], ids=lambda o: o.name)
@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16], ids=lambda d: d.name)
def test_half_precision_computes_in_float32(op, dtype):
    values = {
        Ops.EXP2: RNG.uniform(-14, 15, 3000),
        Ops.LOG2: 10 ** RNG.uniform(-4, 4, 3000),
        Ops.SIN: RNG.uniform(-100, 100, 3000),
        Ops.COS: RNG.uniform(-100, 100, 3000),
        Ops.TAN: RNG.uniform(-100, 100, 3000),
        Ops.SQRT: 10 ** RNG.uniform(-4, 4, 3000),
    }[op]
    x = UOp.param(0, (), dtype)
    lowered = lower(UOp(op, (x,)))
    inputs = np.asarray(evaluate(UOp(Ops.CAST, (x,), dtypes.float32), {x: values.astype(np.float32)}))
    got = evaluate(lowered, {x: values.astype(np.float32)}).astype(np.float64)
    reference = REFERENCE[op](inputs.astype(np.float64))
    # the float32 result rounded once more to 11 (float16) or 8 (bfloat16) bits: within one half-ulp step
    relative = 2.0**-10 if dtype is dtypes.float16 else 2.0**-7
    np.testing.assert_allclose(got, reference, rtol=relative, atol=1e-7 if dtype is dtypes.float16 else 1e-30)


def test_pow_positive_bases_and_signs():
    a = 10 ** RNG.uniform(-3, 3, 20_000)
    b = RNG.uniform(-8, 8, 20_000)
    got = run_binary(Ops.POW, dtypes.float32, a, b)
    reference = np.power(
        a.astype(np.float32).astype(np.longdouble), b.astype(np.float32).astype(np.longdouble)
    )
    errors = ulp_errors(got, reference, dtypes.float32)
    # float32 computes in float64 on this target: b·log2 a keeps its digits, one rounding at the end
    assert errors.max() <= 1, errors.max()
    # float64 carries b·log2 a to extra precision (a plain exp2(b·log2 a) grows about one ulp per
    # unit of |b·log2 a|: 745 ulp near -1016); exponents b·log2 a up to ±1000 included
    tiny = 10.0 ** -RNG.uniform(100, 300, 5000)
    for bases, exponents in ((a, b), (tiny, RNG.uniform(-1000, 1000, 5000) / np.abs(np.log2(tiny)))):
        got = run_binary(Ops.POW, dtypes.float64, bases, exponents)
        exact = np.power(bases.astype(np.longdouble), exponents.astype(np.longdouble))
        errors = ulp_errors(got, exact, dtypes.float64)
        assert errors.max() <= 2.5, (bases[errors.argmax()], exponents[errors.argmax()], errors.max())
    negative = -RNG.integers(1, 9, 500).astype(np.float64)
    exponents = RNG.integers(-6, 7, 500).astype(np.float64)
    got = run_binary(Ops.POW, dtypes.float64, negative, exponents)
    np.testing.assert_allclose(got, np.power(negative, exponents), rtol=1e-13)
    special_a = np.array([-2.0, 0.0, 0.0, 1.0, np.nan, 2.0, -8.0, 0.0])
    special_b = np.array([0.5, 2.0, -1.0, np.nan, 0.0, np.inf, 1.0 / 3.0, 0.0])
    got = run_binary(Ops.POW, dtypes.float64, special_a, special_b)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(got, np.power(special_a, special_b))


# ---------------------------------------------------------------------------------------------
# exact decompositions


INTEGER_DTYPES = [
    dtypes.int8,
    dtypes.int16,
    dtypes.int32,
    dtypes.int64,
    dtypes.uint8,
    dtypes.uint32,
    dtypes.uint64,
]


def integer_values(dtype, count: int = 400) -> np.ndarray:
    info = np.iinfo(dtype.numpy_name)
    values = RNG.integers(info.min, info.max, size=count, dtype=dtype.numpy_name, endpoint=True)
    return np.concatenate([values, np.array([info.min, info.max, 0, 1], dtype=dtype.numpy_name)])


EXACT_BINARY = {
    Ops.SUB: np.subtract,
    Ops.CMP_GT: np.greater,
    Ops.CMP_GE: np.greater_equal,
    Ops.CMP_LE: np.less_equal,
    Ops.CMP_EQ: np.equal,
}


@pytest.mark.parametrize("dtype", INTEGER_DTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("op", list(EXACT_BINARY), ids=lambda o: o.name)
def test_integer_decompositions_are_exact(op, dtype):
    a, b = integer_values(dtype), integer_values(dtype)
    b[: len(b) // 4] = a[: len(b) // 4]  # equal pairs for the comparisons
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(run_binary(op, dtype, a, b), EXACT_BINARY[op](a, b))


@pytest.mark.parametrize("dtype", INTEGER_DTYPES, ids=lambda d: d.name)
def test_neg_not_max_mulacc_shifts_without_native_ops(dtype):
    target = instruction_selection_matcher(PRIMITIVES - {Ops.MAX, Ops.SHL, Ops.SHR}, ())
    a, b, c = integer_values(dtype), integer_values(dtype), integer_values(dtype)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(
            run_unary(Ops.NEG, dtype, a), np.negative(a) if not dtype.is_unsigned else (np.zeros_like(a) - a)
        )
        np.testing.assert_array_equal(run_unary(Ops.NOT, dtype, a), np.invert(a))
        np.testing.assert_array_equal(run_binary(Ops.MAX, dtype, a, b, target), np.maximum(a, b))
        x, y, z = (UOp.param(i, (), dtype) for i in range(3))
        mulacc = evaluate(lower(UOp(Ops.MULACC, (x, y, z)), target), {x: a, y: b, z: c})
        np.testing.assert_array_equal(mulacc, a * b + c)
        bits = dtype.itemsize * 8
        for amount in (0, 1, 3, bits - 2):
            shift = UOp.const(dtype, amount)
            left = evaluate(lower(UOp(Ops.SHL, (x, shift)), target), {x: a})
            right = evaluate(lower(UOp(Ops.SHR, (x, shift)), target), {x: a})
            np.testing.assert_array_equal(left, np.left_shift(a, np.array(amount, dtype=a.dtype)))
            np.testing.assert_array_equal(right, np.right_shift(a, np.array(amount, dtype=a.dtype)))


def test_bool_not_and_comparisons():
    a = RNG.integers(0, 2, 64).astype(bool)
    b = RNG.integers(0, 2, 64).astype(bool)
    np.testing.assert_array_equal(run_unary(Ops.NOT, dtypes.bool, a), ~a)
    np.testing.assert_array_equal(run_binary(Ops.CMP_EQ, dtypes.bool, a, b), a == b)
    np.testing.assert_array_equal(run_binary(Ops.CMP_GE, dtypes.bool, a, b), a >= b)


@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float64], ids=lambda d: d.name)
def test_float_neg_sub_div_comparisons(dtype):
    a = RNG.standard_normal(5000) * 1e3
    b = RNG.standard_normal(5000) * 1e3
    b[:100] = a[:100]
    npd = np.dtype(dtype.numpy_name)
    a, b = a.astype(npd), b.astype(npd)
    np.testing.assert_array_equal(run_unary(Ops.NEG, dtype, a), -a)
    np.testing.assert_array_equal(run_binary(Ops.SUB, dtype, a, b), a - b)
    for op, reference in list(EXACT_BINARY.items())[1:]:
        np.testing.assert_array_equal(run_binary(op, dtype, a, b), reference(a, b))
    quotient = run_binary(Ops.DIV, dtype, a, b)
    # a * (1/b): two roundings, so within 1.5 ulp of the correctly rounded quotient
    assert ulp_errors(quotient, a.astype(np.longdouble) / b.astype(np.longdouble), dtype).max() <= 1.5


# ---------------------------------------------------------------------------------------------
# Threefry


def threefry_reference(counter: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Threefry-2x32-20 (Salmon, Moraes, Dror, Shaw 2011), written from the paper's definition:
    key schedule k0, k1, k2 = k0 ^ k1 ^ 0x1BD11BDA; per round x0 += x1, x1 = rotl(x1, R[r % 8]) ^ x0
    with R = 13 15 26 6 17 29 16 24; after every 4 rounds s: x0 += k[s % 3], x1 += k[(s+1) % 3] + s."""
    rotations = [13, 15, 26, 6, 17, 29, 16, 24]
    x = [(counter & 0xFFFFFFFF).astype(np.uint32), (counter >> np.uint64(32)).astype(np.uint32)]
    k = [(key & 0xFFFFFFFF).astype(np.uint32), (key >> np.uint64(32)).astype(np.uint32)]
    k.append(k[0] ^ k[1] ^ np.uint32(0x1BD11BDA))
    with np.errstate(over="ignore"):
        x[0] = x[0] + k[0]
        x[1] = x[1] + k[1]
        for r in range(20):
            x[0] = x[0] + x[1]
            rotation = np.uint32(rotations[r % 8])
            x[1] = ((x[1] << rotation) | (x[1] >> (np.uint32(32) - rotation))) ^ x[0]
            if r % 4 == 3:
                s = r // 4 + 1
                x[0] = x[0] + k[s % 3]
                x[1] = x[1] + k[(s + 1) % 3] + np.uint32(s)
    return x[1].astype(np.uint64) << np.uint64(32) | x[0].astype(np.uint64)


def test_threefry_decomposition_matches_reference():
    counters = RNG.integers(0, 2**64, size=2000, dtype=np.uint64)
    keys = RNG.integers(0, 2**64, size=2000, dtype=np.uint64)
    counters[:3] = [0, 2**64 - 1, 0x85A308D3_243F6A88]
    keys[:3] = [0, 2**64 - 1, 0x03707344_13198A2E]
    got = run_binary(Ops.THREEFRY, dtypes.uint64, counters, keys)
    expected = threefry_reference(counters, keys)
    np.testing.assert_array_equal(got, expected)
    # Random123's known answers for threefry2x32_20
    assert [int(v) for v in expected[:3]] == [0x99BA4EFE_6B200159, 0xBB002BE7_1CB996FC, 0x483DF7A0_C4923A9C]
    shiftless = instruction_selection_matcher(PRIMITIVES - {Ops.SHL, Ops.SHR}, ())
    np.testing.assert_array_equal(
        run_binary(Ops.THREEFRY, dtypes.uint64, counters, keys, shiftless), expected
    )


# ---------------------------------------------------------------------------------------------
# MULACC, targets, vectors


def test_mulacc_fusion_where_supported():
    x, y, z = (UOp.param(i, (), dtypes.float32) for i in range(3))
    expression = x * y + z
    fused = graph_rewrite(expression, instruction_selection_matcher(PRIMITIVES | {Ops.MULACC}, ()))
    assert fused.op is Ops.MULACC and fused.src == (x, y, z)
    flipped = graph_rewrite(z + x * y, instruction_selection_matcher(PRIMITIVES | {Ops.MULACC}, ()))
    assert flipped.op is Ops.MULACC
    unfused = lower(UOp(Ops.MULACC, (x, y, z)))
    assert unfused.op is Ops.ADD and unfused.src[0].op is Ops.MUL
    values = [RNG.standard_normal(100).astype(np.float32) for _ in range(3)]
    bindings = dict(zip((x, y, z), values))
    np.testing.assert_array_equal(evaluate(fused, bindings), evaluate(expression, bindings))


def test_supported_ops_are_left_alone():
    x = UOp.param(0, (), dtypes.float32)
    everything = instruction_selection_matcher(frozenset(GroupOp.ELEMENTWISE), (4,))
    for op in (Ops.EXP2, Ops.SIN, Ops.SQRT, Ops.NEG):
        assert graph_rewrite(UOp(op, (x,)), everything) is UOp(op, (x,))
    # a target with EXP2 and LOG2 but no SQRT keeps the spec's form EXP2(0.5·LOG2(x))
    lowered = graph_rewrite(
        UOp(Ops.SQRT, (x,)), instruction_selection_matcher(PRIMITIVES | {Ops.EXP2, Ops.LOG2}, ())
    )
    assert {Ops.EXP2, Ops.LOG2} <= {u.op for u in lowered.toposort()}


def test_devectorize_splits_vector_alu_into_lanes():
    x = UOp.param(0, (), dtypes.float32)
    y = UOp.param(1, (), dtypes.int32)
    vector = UOp(Ops.VECTORIZE, (x, x * 2.0, x + 1.0, x * x))
    other = UOp(Ops.VECTORIZE, tuple(UOp.const(dtypes.float32, v) for v in (1.0, -2.0, 3.0, 0.5)))
    ints = UOp(Ops.VECTORIZE, (y, y + 1, y * 3, y - 7))
    mixed = (vector * other).maximum(ints.cast(dtypes.float32.vec(4)))
    expression = (mixed < other).where(mixed, UOp(Ops.NEG, (other,)))
    flat = devectorize(expression)
    assert all(u.dtype.count == 1 for u in flat.toposort() if u.op in GroupOp.ELEMENTWISE)
    lowered = lower(expression, instruction_selection_matcher(PRIMITIVES, ()))
    assert all(u.dtype.count == 1 for u in lowered.toposort() if u.op in GroupOp.ELEMENTWISE)
    bindings = {x: np.linspace(-3, 3, 9, dtype=np.float32), y: np.arange(-4, 5, dtype=np.int32)}
    reference = evaluate(expression, bindings)
    np.testing.assert_array_equal(evaluate(flat, bindings), reference)
    np.testing.assert_array_equal(evaluate(lowered, bindings), reference)
    kept = graph_rewrite(expression, instruction_selection_matcher(PRIMITIVES | {Ops.NEG}, (4,)))
    assert any(u.dtype.count == 4 for u in kept.toposort() if u.op is Ops.MUL)


def test_vector_transcendentals():
    x = UOp.param(0, (), dtypes.float32)
    vector = UOp(Ops.VECTORIZE, (x, x * 0.5, x + 3.0))
    for op in (Ops.EXP2, Ops.SIN, Ops.SQRT, Ops.LOG2):
        lowered = lower(UOp(op, (vector,)), instruction_selection_matcher(PRIMITIVES, (3,)))
        values = np.linspace(0.25, 6, 11, dtype=np.float32)
        lanes = evaluate(UOp(op, (vector,)), {x: values})
        got = evaluate(lowered, {x: values})
        assert got.shape == (11, 3)
        assert ulp_errors(got, lanes.astype(np.longdouble), dtypes.float32).max() <= 3
