"""The simplifier: identities asserted one by one, properties on random index expressions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uopviz.core import UOp, dtypes, tracing
from uopviz.core.alu import evaluate, exec_alu, wrap_integer
from uopviz.core.ops import Ops
from uopviz.core.symbolic import (
    algebraic_identities,
    bounds,
    canonical_form,
    comparison_folding,
    constant_folding,
    index_arithmetic,
    reduce_collapse,
    simplify,
    symbolic,
)
from uopviz.core.uop import format_graph

# ranges with fixed numbers, so expected results are built from the same UOps
A = UOp.range(16, number=9001)  # a in [0, 15]
B = UOp.range(4, number=9002)  # b in [0, 3]
C = UOp.range(8, number=9003)  # c in [0, 7]
X = UOp.param(0, (), dtypes.int32)  # an int32 of unknown value
F = UOp.param(1, (), dtypes.float32)  # a float32 of unknown value
P = UOp.param(2, (), dtypes.bool)  # a bool of unknown value
T, FALSE = UOp.const(dtypes.bool, True), UOp.const(dtypes.bool, False)


def i(v: int) -> UOp:
    return UOp.const(dtypes.index, v)


def i32(v: int) -> UOp:
    return UOp.const(dtypes.int32, v)


IDENTITIES: list[tuple[str, UOp, UOp]] = [
    # constant folding with the dtype's semantics
    ("fold add", i(3) + i(4), i(7)),
    (
        "fold int8 wraparound",
        UOp.const(dtypes.int8, 100) + UOp.const(dtypes.int8, 100),
        UOp.const(dtypes.int8, -56),
    ),
    (
        "fold uint8 wraparound",
        UOp.const(dtypes.uint8, 3) - UOp.const(dtypes.uint8, 5),
        UOp.const(dtypes.uint8, 254),
    ),
    ("fold floor division", i(-7) // i(2), i(-4)),
    ("fold modulo sign of divisor", i(7) % i(-2), i(-1)),
    ("fold comparison", i(3) < i(4), T),
    (
        "fold float32 rounding",
        UOp.const(dtypes.float32, 0.1) + UOp.const(dtypes.float32, 0.2),
        UOp.const(dtypes.float32, float(np.float32(0.1) + np.float32(0.2))),
    ),
    ("fold cast truncates", UOp.const(dtypes.float32, -2.7).cast(dtypes.int32), i32(-2)),
    ("fold cast wraps", UOp.const(dtypes.int32, 300).cast(dtypes.uint8), UOp.const(dtypes.uint8, 44)),
    (
        "fold arithmetic shift",
        UOp.const(dtypes.int8, -8) >> UOp.const(dtypes.int8, 1),
        UOp.const(dtypes.int8, -4),
    ),
    ("fold where", T.where(i(1), i(2)), i(1)),
    ("fold bitcast", UOp.const(dtypes.float32, 1.0).bitcast(dtypes.int32), i32(0x3F800000)),
    # algebraic identities
    ("x + 0", A + 0, A),
    ("0 + x", i(0) + A, A),
    ("x - 0", A - 0, A),
    ("x * 1", A * 1, A),
    ("x * 0 (int)", X * 0, i32(0)),
    ("x // 1", X // 1, X),
    ("x // -1", X // -1, -X),
    ("x % 1", X % 1, i32(0)),
    ("x - x (int)", X - X, i32(0)),
    ("double negation", X.alu(Ops.NEG).alu(Ops.NEG), X),
    ("x // x when x > 0", (A + 1) // (A + 1), i(1)),
    ("x % x", X % X, i32(0)),
    ("max(x, x)", X.maximum(X), X),
    ("x < x", X < X, FALSE),
    ("x != x (int)", X.ne(X), FALSE),
    ("x == x (int)", X.eq(X), T),
    ("where(c, x, x)", P.where(X, X), X),
    ("where(False, a, b)", FALSE.where(A, B), B),
    ("where(c, True, False)", P.where(T, FALSE), P),
    ("where(not c, a, b)", P.ne(True).where(A, B), P.where(B, A)),
    ("where(c, where(c, a, _), b)", P.where(P.where(A, C), B), P.where(A, B)),
    ("float x * 1", F * 1.0, F),
    ("float x - 0", F - 0.0, F),
    ("float double negation", F.alu(Ops.NEG).alu(Ops.NEG), F),
    ("float max(x, x)", F.maximum(F), F),
    # bool identities
    ("x & True", P & True, P),
    ("x & False", P & False, FALSE),
    ("x | True", P | True, T),
    ("x | False", P | False, P),
    ("x ^ False", P ^ False, P),
    ("double not", P.ne(True).ne(True), P),
    ("x & not x", P & P.ne(True), FALSE),
    ("x | not x", P | P.ne(True), T),
    ("x == True", P.eq(True), P),
    # integer bits
    ("x & 0", X & 0, i32(0)),
    ("x | 0", X | 0, X),
    ("x ^ x", X ^ X, i32(0)),
    ("x & -1", X & -1, X),
    ("mask within range", A & 15, A),
    ("x >> 0", X >> 0, X),
    ("shift decided by range", A >> 4, i(0)),
    # canonical order, reassociation, like terms
    ("constant to the right", i(5) * A, A * 5),
    ("(x + c1) + c2", (A + 3) + 5, A + 8),
    ("(x * c1) * c2", (A * 3) * 5, A * 15),
    ("x*c1 + x*c2", A * 3 + A * 5, A * 8),
    ("x + x", A + A, A * 2),
    ("x + x*c", A + A * 4, A * 5),
    ("(x + y) - x", (A + C) - A, C),
    ("(x + c) + y keeps the constant last", (A + 3) + C, (A + C) + 3),
    ("(x + c) * k distributes", (A + 2) * 3, A * 3 + 6),
    ("-(x + y)", -(A + C), -A - C),
    ("5 - x stays", i(5) - A, i(5) - A),
    (
        "int8 sums combine under wraparound",
        (X.cast(dtypes.int8) * 100) + (X.cast(dtypes.int8) * 100),
        X.cast(dtypes.int8) * -56,
    ),
    ("commutative operands ordered", C * A, A * C),
    ("max(max(x, 2), 5)", X.maximum(2).maximum(5), X.maximum(5)),
    # index arithmetic with ranges
    ("(x*4 + 3)//4", (A * 4 + 3) // 4, A),
    ("(x*c + y)//c", (A * 4 + B) // 4, A),
    ("(x*c + y)//c, y not small", (A * 4 + C) // 4, A + C // 4),
    ("x % n → x", B % 4, B),
    ("x // n → 0", B // 4, i(0)),
    ("(x*c + y) % c → y", (A * 4 + B) % 4, B),
    ("(x*c + y) % c → y % c", (A * 4 + C) % 4, C % 4),
    ("(x//a)//b", (A // 2) // 4, A // 8),
    ("(x % (a*b)) // a", (A % 8) // 2, (A // 2) % 4),
    ("x % a % b, b | a", (A % 8) % 4, A % 4),
    ("x % a % b, a | b", (A % 4) % 8, A % 4),
    ("divisible terms", (A * 4 + C * 8) // 4, A + C * 2),
    ("divisible terms mod", (A * 4 + C * 8) % 4, i(0)),
    ("gcd factoring", (A * 4 + C * 2) // 2, A * 2 + C),
    ("x % c recombines", A % 4 + (A // 4) * 4, A),
    ("block fold of modulo", (B + 4) % 4, B),
    ("modulo shifted block", (C + 8) % 8, C),
    ("(x//a + k)//b", (A // 4 + 1) // 2, (A + 4) // 8),
    ("negative divisor decided by range", (B + 1) // -8, i(-1)),
    ("negative values keep floor semantics", (A * 4 - 21) // 4, A + -6),
    ("negative numerator modulo", (A - 21) % 4, (A + 3) % 4),
    ("negative range unchanged", (A - 20) // 4, (A + -20) // 4),
    # comparisons and where by ranges
    ("x < c, always", A < 16, T),
    ("x < c, never", A < 0, FALSE),
    ("x != c out of range", A.ne(20), T),
    ("x*c < d", A * 4 < 9, A < 3),
    ("x + c < d", A + 5 < 9, A < 4),
    ("x//d < c", A // 4 < 2, A < 8),
    ("c < x*a + k", i(10) < A * 3 + 1, i(3) < A),
    ("x*a + k != c (not divisible)", (A * 4 + 1).ne(6), T),
    ("x*a + k == c", (A * 4 + 2).eq(10), A.eq(2)),
    ("where decided by range", (A < 20).where(B, C), B),
    ("max decided by range", B.maximum(A + 4), A + 4),
    ("lt with small remainder", A * 4 + B < 8, A < 2),
]


@pytest.mark.parametrize(("name", "expression", "expected"), IDENTITIES, ids=[n for n, _, _ in IDENTITIES])
def test_identity(name, expression, expected):
    result = simplify(expression)
    assert result is expected, (
        f"{name}:\n{format_graph(expression)}\n=> got\n{format_graph(result)}\n"
        f"expected\n{format_graph(expected)}"
    )


def test_there_are_at_least_fifty_identities():
    assert len(IDENTITIES) >= 50


def test_float_rules_stay_exact():
    # nan and inf make these unsound for floats: they must not fire
    assert simplify(F * 0.0) is F * 0.0
    assert simplify(F - F) is F - F
    assert simplify(F.ne(F)) is F.ne(F)
    assert simplify(F + 0.0) is F + 0.0  # (-0.0) + 0.0 is +0.0
    assert simplify(F + -0.0) is F
    assert simplify((F + 1.0) + 2.0) is (F + 1.0) + 2.0  # float addition does not reassociate


def test_division_rules_respect_wraparound():
    # in int8, (x*64 + y)//64 is not x + y//64 once x*64 wraps: nothing may fold
    small = X.cast(dtypes.int8)
    expression = (small * 64 + 1) // 64
    result = simplify(expression)
    assert result.op is Ops.IDIV
    for value in (-128, -3, 0, 1, 2, 100, 127):
        env = {X: value}
        assert evaluate_scalar(expression, env) == evaluate_scalar(result, env)


def test_a_remainder_below_the_common_factor_does_not_carry():
    # (a*8 + c) // 16 with c in [0, 7]: c never carries into a, so it is a // 2 (a grouped conv's
    # input channel over a register tile's lanes); with c up to 8 (c + 1) it may, and stays
    for expression, expected in (((A * 8 + C) // 16, A // 2), ((A * 8 + B + 4) // 32, A // 4)):
        assert simplify(expression) is simplify(expected)
    carrying = (A * 8 + C + 1) // 16
    result = simplify(carrying)
    assert any(u is C for u in result.toposort())  # not folded to a // 2
    for a in range(16):
        for c in range(8):
            env = {A: a, C: c}
            assert evaluate_scalar(carrying, env) == evaluate_scalar(result, env) == (a * 8 + c + 1) // 16


def test_rule_groups_are_named_and_in_symbolic():
    groups = [constant_folding, algebraic_identities, canonical_form, index_arithmetic, comparison_folding,
              reduce_collapse]
    assert sum(len(g) for g in groups) == len(symbolic)
    names = [r.name for g in groups for r in g.rules]
    assert len(names) == len(set(names)), "rule names are unique"
    # every rule is written in the simplifier's modules (uopviz/core/symbolic.py, symbolic_index.py)
    assert all(name and "core/symbolic" in rule.location for rule, name in zip(symbolic.rules, names))


def test_trace_shows_rule_names():
    with tracing() as trace:
        simplify((A * 4 + B) // 4)
    record = trace.find("symbolic")
    assert any(step.rule == "fold floor division by a constant" for step in record.steps)
    assert record.output is A


def test_bounds_refine_the_spec_table():
    assert bounds(A % 4) == (0, 3)
    assert bounds(A // 4) == (0, 3)
    assert bounds((A - 20) // 4) == (-5, -2)
    assert bounds(A - C) == (-7, 15)
    assert bounds(-A) == (-15, 0)
    assert bounds(A & 6) == (0, 6)
    assert bounds(A >> 2) == (0, 3)
    assert bounds((A - 8) % 5) == (0, 4)
    assert bounds(A % -4) == (-3, 0)
    assert bounds(A % (B + 1)) == (0, 3)
    assert bounds(A.ne(20)) == (True, True)
    assert bounds(X.cast(dtypes.int8)) == (-128, 127)
    assert bounds((A + 1).cast(dtypes.bool)) == (True, True)


# ---------------------------------------------------------------------------------------------
# properties on random expressions


def evaluate_scalar(root: UOp, env: dict[UOp, int]) -> object:
    """A straightforward evaluator: every node through exec_alu, leaves from ``env``."""
    values: dict[UOp, object] = {}
    for u in root.toposort():
        if u in env:
            values[u] = env[u]
        elif u.op is Ops.CONST:
            values[u] = u.arg[0]
        elif u.op.is_elementwise:
            values[u] = exec_alu(u.op, u.dtype, [values[s] for s in u.src])
        elif u.op in (Ops.STACK, Ops.RANGE, Ops.PARAM):
            values[u] = None  # shape sources and unbound leaves; never read by an ALU op here
        else:
            raise AssertionError(f"unexpected {u.op.name}")
    return values[root]


def tree_size(root: UOp) -> int:
    """Non-constant nodes of the expression tree (a shared subexpression counts at each use)."""
    size: dict[UOp, int] = {}
    for u in root.toposort():
        size[u] = (u.op is not Ops.CONST) + sum(size[s] for s in u.src)
    return size[root]


BINARY = ["+", "-", "*", "//", "%", "max"]
COMPARE = [Ops.CMP_LT, Ops.CMP_NE, Ops.CMP_EQ, Ops.CMP_GT, Ops.CMP_LE, Ops.CMP_GE]


@st.composite
def expressions(draw, dtype=dtypes.index):
    """A random expression over 1–3 RANGEs with random bounds (cast to ``dtype``), depth 4–6."""
    count = draw(st.integers(1, 3))
    ranges = [UOp.range(draw(st.integers(1, 48)), number=10_000 + n) for n in range(count)]
    leaves = ranges if dtype is dtypes.index else [r.cast(dtype) for r in ranges]

    def constant() -> UOp:
        return UOp.const(dtype, wrap_integer(draw(st.integers(-20, 40)), dtype))

    def build(depth: int) -> UOp:
        if depth == 0 or draw(st.integers(0, 9)) == 0:
            return leaves[draw(st.integers(0, count - 1))] if draw(st.booleans()) else constant()
        kind = draw(st.sampled_from(BINARY + ["const op", "where", "neg"]))
        left = build(depth - 1)
        if kind == "neg":
            return -left
        if kind == "where":
            comparison = UOp(
                draw(st.sampled_from(COMPARE)), (build(depth - 2 if depth > 1 else 0), constant())
            )
            return comparison.where(left, build(depth - 1))
        if kind == "const op":
            kind = draw(st.sampled_from(["*", "//", "%"]))
            right = UOp.const(
                dtype, wrap_integer(draw(st.sampled_from([1, 2, 3, 4, 6, 8, 16, -3, 0])), dtype)
            )
        else:
            right = build(depth - 1)
        return {
            "+": left + right,
            "-": left - right,
            "*": left * right,
            "//": left // right,
            "%": left % right,
            "max": left.maximum(right),
        }[kind]

    return build(draw(st.integers(4, 6))), ranges


def check_equivalent(expression: UOp, ranges: list[UOp], seed: int) -> UOp:
    result = simplify(expression)
    rng = np.random.default_rng(seed)
    bound_of = {r: r.src[0].arg[0] for r in ranges}
    points = [{r: int(rng.integers(0, bound_of[r])) for r in ranges} for _ in range(12)]
    points.append({r: bound_of[r] - 1 for r in ranges})
    points.append({r: 0 for r in ranges})
    for env in points:
        want, got = evaluate_scalar(expression, env), evaluate_scalar(result, env)
        assert want == got, (
            f"at {[(r.arg[0], env[r]) for r in ranges]}: {want} != {got}\n"
            f"{format_graph(expression)}\n=>\n{format_graph(result)}"
        )
    return result


@given(expressions(), st.integers(0, 2**32 - 1))
@settings(max_examples=300)
def test_simplify_preserves_values_on_index_expressions(case, seed):
    expression, ranges = case
    check_equivalent(expression, ranges, seed)


@pytest.mark.parametrize(
    "dtype", [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.int32], ids=lambda d: d.name
)
@given(data=st.data(), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=80)
def test_simplify_preserves_values_under_wraparound(dtype, data, seed):
    expression, ranges = data.draw(expressions(dtype))
    check_equivalent(expression, ranges, seed)


@given(expressions())
@settings(max_examples=300)
def test_simplify_never_grows_the_expression(case):
    expression, _ = case
    assert tree_size(simplify(expression)) <= tree_size(expression)


@given(expressions())
@settings(max_examples=100)
def test_simplify_is_idempotent(case):
    expression, _ = case
    once = simplify(expression)
    assert simplify(once) is once


def test_simplify_matches_the_array_evaluator():
    # the same expressions through the vectorised evaluator over every point of the ranges
    expression = ((A * 3 + C) % 8 + (A // 4) * 2 - B).maximum(C - 3) // 3
    result = simplify(expression)
    grid = np.meshgrid(np.arange(16), np.arange(4), np.arange(8), indexing="ij")
    bindings = dict(zip((A, B, C), grid))
    np.testing.assert_array_equal(evaluate(expression, bindings), evaluate(result, bindings))
    assert tree_size(result) <= tree_size(expression)


@pytest.mark.parametrize("scale,modulus", [(8, 16), (4, 16), (8, 32), (6, 18), (2, 4)])
def test_a_multiple_plus_a_lane_modulo_keeps_the_lane_outside(scale, modulus):
    # (g*a + k) % (g*d) → g*((a + k//g) % d) + k%g: the lanes k of a vector share one base, so a
    # load of them is contiguous (a conv's weights blocked by 16, read 8 channels at a time)
    for k in range(scale + 3):
        expression = UOp(Ops.MOD, (A * scale + k, UOp.const(dtypes.index, modulus)))
        simplified = simplify(expression)
        for a in range(16):
            assert evaluate_scalar(simplified, {A: a}) == (scale * a + k) % modulus
        if k < scale:  # the lane is added outside the modulo, not inside it
            assert simplified.op is Ops.ADD or k == 0, format_graph(simplified)


# ---------------------------------------------------------------------------------------------
# reduce collapse (issue 21): a REDUCE(ADD) counting the points of a range between bounds


def _reduced_by_loop(value: UOp, loop: UOp, outer: UOp, point: int) -> int:
    """The sum over ``loop`` of ``value`` at ``outer = point``, by evaluating every iteration."""
    extent = loop.src[0].arg[0]
    return sum(int(evaluate_scalar(value, {outer: point, loop: r})) for r in range(extent))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reduce_collapse_folds_a_windowed_count_to_its_closed_form(seed):
    rng = np.random.default_rng(seed)
    loop = UOp.range(int(rng.integers(1, 40)), number=9100 + seed)
    for _ in range(6):
        low, high, scale = (int(v) for v in rng.integers(-20, 40, size=3))
        gates = [
            UOp(Ops.CMP_LT, (i(low), A + loop)),  # the spec's arange: c < i + r
            UOp(Ops.CMP_LT, (loop + A * 2, i(high))),
            UOp(Ops.AND, (UOp(Ops.CMP_LT, (i(low), loop - A)), UOp(Ops.CMP_LT, (loop, i(high))))),
            UOp(Ops.AND, (UOp(Ops.CMP_LT, (i(low), A + loop)), UOp(Ops.CMP_LT, (A, i(high))))),  # A alone
        ]
        for gate in gates:
            value = UOp(Ops.WHERE, (gate, i32(scale), i32(0)))
            reduced = UOp(Ops.REDUCE, (value, loop), (Ops.ADD, ()))
            with tracing() as trace:
                folded = simplify(reduced)
            left = [u for u in folded.toposort() if u.op is Ops.REDUCE or u is loop]
            assert not left, format_graph(folded)
            assert any(step.rule.startswith("reduce collapse") for step in trace.steps)
            for point in range(16):
                assert evaluate_scalar(folded, {A: point}) == _reduced_by_loop(value, loop, A, point)


def test_reduce_collapse_leaves_what_is_not_a_count():
    loop = UOp.range(8, number=9200)
    gate = UOp(Ops.CMP_LT, (i(3), A + loop))
    kept = [
        # the value reads r
        UOp(Ops.REDUCE, (UOp(Ops.WHERE, (gate, loop.cast(dtypes.int32), i32(0))), loop), (Ops.ADD, ())),
        UOp(Ops.REDUCE, (UOp(Ops.WHERE, (gate, i32(1), i32(0))), loop), (Ops.MAX, ())),  # not a sum
        UOp(Ops.REDUCE, (UOp(Ops.WHERE, (UOp(Ops.CMP_LT, (loop % 3, i(1))), i32(1), i32(0))), loop),
            (Ops.ADD, ())),  # r inside a modulo: not an interval of r
        UOp(Ops.REDUCE, (UOp(Ops.WHERE, (UOp(Ops.CMP_NE, (loop, A)), i32(1), i32(0))), loop), (Ops.ADD, ())),
    ]
    for reduced in kept:
        assert any(u.op is Ops.REDUCE for u in simplify(reduced).toposort())
