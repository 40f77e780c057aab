"""The one affine/index analysis (uopviz.core.affine) that Expand, Optimize and the renderers share."""

from __future__ import annotations

import time

from uopviz.core.affine import (
    affine_coefficients,
    affine_lanes,
    build_range_sum,
    constant_chunk_width,
    contiguous_start,
    linear_coefficient,
    range_sum,
)
from uopviz.core.dtype import dtypes
from uopviz.core.ops import Ops
from uopviz.core.uop import UOp


def index(value: int) -> UOp:
    return UOp.const(dtypes.index, value)


def test_coefficients_of_an_affine_index() -> None:
    row, col, other = UOp.range(16), UOp.range(8), UOp.range(4)
    expression = row * index(32) + col + other * index(2) + index(7)
    assert affine_coefficients(expression, (row, col)) == {row: 32, col: 1}  # ``other`` is part of the base
    assert affine_coefficients(index(4) * row + col, (row, col)) == {row: 4, col: 1}
    assert linear_coefficient(expression, row) == 32
    assert linear_coefficient(expression, UOp.range(3)) == 0  # not in it at all


def test_non_affine_indices_have_no_coefficients() -> None:
    row, col = UOp.range(16), UOp.range(8)
    assert affine_coefficients(row * col, (row, col)) is None
    assert affine_coefficients(row // index(2), (row,)) is None
    assert linear_coefficient(row * col + index(1), row) is None
    as_int = (row * index(2)).cast(dtypes.int32)
    assert affine_coefficients(as_int, (row,)) is None  # only index expressions are addresses


def test_fused_multiply_add_is_looked_through() -> None:
    """Instruction Selection fuses ``a * c + b`` into MULACC: the renderers still see the stride."""
    row, col = UOp.range(16), UOp.range(8)
    fused = UOp(Ops.MULACC, (row, index(24), col * index(3)))
    assert linear_coefficient(fused, row) == 24
    assert linear_coefficient(fused, col) == 3
    assert affine_coefficients(fused, (row, col)) == {row: 24, col: 3}


def test_shared_subexpressions_are_analysed_once() -> None:
    """A chain of ``x + x`` doubles the paths to the range at every step; the analysis is memoised,
    so 80 steps (2**80 paths) take no time and give the exact coefficient."""
    row = UOp.range(16)
    expression = row
    for _ in range(80):
        expression = expression + expression
    start = time.perf_counter()
    assert linear_coefficient(expression, row) == 2**80
    assert affine_coefficients(expression, (row,)) == {row: 2**80}
    assert time.perf_counter() - start < 5.0


def test_lanes_of_a_contiguous_vector_index() -> None:
    base = UOp.range(16) * index(8)
    lanes = UOp(Ops.VECTORIZE, tuple(base + index(4 + i) for i in range(4)))
    assert affine_lanes(lanes) == [(base, 4), (base, 5), (base, 6), (base, 7)]
    assert contiguous_start(lanes) == (base, 4)
    gathered = UOp(Ops.VECTORIZE, tuple(base + index(2 * i) for i in range(4)))
    assert contiguous_start(gathered) is None


def test_constant_chunks() -> None:
    aligned = UOp(Ops.VECTORIZE, tuple(index(8 + i) for i in range(4)))
    misaligned = UOp(Ops.VECTORIZE, tuple(index(6 + i) for i in range(4)))
    assert constant_chunk_width(aligned) == 4
    assert constant_chunk_width(misaligned) is None
    assert constant_chunk_width(index(3)) == 1
    assert constant_chunk_width(UOp.range(4)) is None


def test_index_of_ranges_and_constants() -> None:
    """``range_sum`` reads an index built of ranges and constants only (a front end's index
    equation); ``build_range_sum`` writes one back."""
    i, j = UOp.range(6), UOp.range(4)
    expression = (i * index(3) - j + index(5)).cast(dtypes.int32).cast(dtypes.index) * index(2)
    assert range_sum(expression) == ({i: 6, j: -2}, 10)
    assert range_sum(i - i + index(1)) == ({}, 1)  # cancelled terms are dropped
    assert range_sum(i * j) is None  # not affine
    assert range_sum(i + UOp.range(2).cast(dtypes.float32).cast(dtypes.index)) is None  # through a float
    rebuilt = build_range_sum({i: 6, j: -2}, 10)
    assert range_sum(rebuilt) == ({i: 6, j: -2}, 10)
    assert build_range_sum({i: 1}, 0) is i
