"""Dtype sweep (issue 21): bitcast between every pair of equal-size dtypes on every CPU backend, and
half-type sums and matmuls of at least 4096 terms under opts None, "heuristic" and a random accepted
opt sequence, against numpy's float32-accumulated result rounded once to the half type.

Budgets: one bitcast draw and three reductions by default (a bitcast draw compiles all 30 pairs on
every backend; about 60 s in all on 2 cores);
``HYPOTHESIS_PROFILE=slow`` runs many more.  Outcomes are counted per target in ``OUTCOMES``.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from bit_patterns import BIT_TYPES, BITCAST_PAIRS, assert_same_bits, bit_pattern_source, bit_pattern_tensor
from hypothesis import given
from hypothesis import strategies as st

import uopviz as uv
from uopviz.backends import available
from uopviz.core.dtype import round_to_bfloat16

from .fuzzing import budget, record
from .test_program_sweep import random_opts

CPU_BACKENDS = [name for name in ("python", "c", "llvm", "opencl") if name in available()]
HALVES = {"float16": (np.float16, 2.0**-11), "bfloat16": (ml_dtypes.bfloat16, 2.0**-8)}
SHAPES = [(5,), (4, 9), (2, 3, 17), (130,)]


# ------------------------------------------------------------------------------------------------
# bitcast


@budget(default=1, slow=60)
@given(shape=st.sampled_from(SHAPES), seed=st.integers(0, 2**32 - 1),
       opts=st.sampled_from([None, "heuristic"]))
def test_bitcast_between_every_equal_size_pair_on_every_cpu_backend(shape, seed, opts):
    rng = np.random.default_rng(seed)
    sources = {name: bit_pattern_source(name, shape, rng) for name in BIT_TYPES}
    outputs = [bit_pattern_tensor(sources[s], s).bitcast(t) for s, t in BITCAST_PAIRS]
    for backend in CPU_BACKENDS:
        results = uv.compile(outputs, backend=backend, opts=opts).run()
        for (s, t), got in zip(BITCAST_PAIRS, results):
            assert_same_bits(got, sources[s], s, t, f"{s} -> {t} {list(shape)} on {backend} opts={opts}")
            record(f"bitcast {backend}", None)


# ------------------------------------------------------------------------------------------------
# half-type reductions


def half_values(rng: np.random.Generator, shape: tuple[int, ...], half: str) -> np.ndarray:
    """Random values of ``half``, as float32 (exact), positive or not (a drawn sign mix)."""
    values = (rng.random(shape) * 2 - rng.random() * 0.5).astype(np.float32)
    return values.astype(HALVES[half][0]).astype(np.float32)


def rounded(exact: np.ndarray, half: str) -> np.ndarray:
    """numpy's float32 result rounded once to ``half``, as float64."""
    exact = np.asarray(exact, np.float32)
    held = exact.astype(np.float16) if half == "float16" else round_to_bfloat16(exact)
    return held.astype(np.float64)


@st.composite
def half_programs(draw: st.DrawFn):
    """(text, build() -> Tensor, numpy's float32-accumulated result, half type): a sum or a matmul
    of at least 4096 terms."""
    half = draw(st.sampled_from(list(HALVES)))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if draw(st.booleans()):
        rows, terms = draw(st.sampled_from([1, 3])), draw(st.sampled_from([4096, 4099, 6000]))
        x = half_values(rng, (rows, terms), half)
        return (f"sum({half}[{rows},{terms}], axis=1)", lambda: uv.Tensor(x, dtype=half).sum(1),
                x.sum(1, dtype=np.float32), half)
    m, k, n = (draw(st.sampled_from(choices)) for choices in ([1, 4], [4096, 4100], [1, 3]))
    a, b = half_values(rng, (m, k), half), half_values(rng, (k, n), half)
    return (f"matmul({half}[{m},{k}]@[{k},{n}])",
            lambda: uv.Tensor(a, dtype=half) @ uv.Tensor(b, dtype=half), a @ b, half)


@budget(default=3, slow=200)
@given(program=half_programs(), choice=st.integers(0, 2**16 - 1))
def test_half_reductions_round_once_whatever_the_opts(program, choice):
    text, build, exact, half = program
    unit = HALVES[half][1]
    want = rounded(exact, half)
    # the float32 sums' own error (their order differs) can move a result across a half rounding
    # boundary: one half ulp of the result, plus float32's summation error on the terms' magnitude
    atol = 2 * unit * np.abs(want) + 4096 * 2.0**-24 * 4
    for backend in CPU_BACKENDS:
        plain = uv.compile(build(), backend=backend)
        for opts in (None, "heuristic", random_opts(plain, choice)):
            (got,) = uv.compile(build(), backend=backend, opts=opts).run()
            assert got.dtype == np.dtype(np.float32 if half == "bfloat16" else np.float16), text
            error = np.abs(np.asarray(got, np.float64) - want)
            assert (error <= atol).all(), f"{text} on {backend} opts={opts}: error {error.max()}"
            record(f"half reductions {backend}", None)
