"""The heuristic's UPCASTs and UNROLLs are bounded by an estimate of the source they make (issue #21):
lanes times the ops each lane repeats stay within ``HEURISTIC_SOURCE_LANE_OPS`` on every backend.
A 31×8 argmin of rand() values had its 31 rows upcast and its 8 columns unrolled, 248 copies of the
inlined threefry (567 KB of OpenCL C, minutes in pocl); a bfloat16 matmul inlined 128 branchy
rounding helpers into its loop body."""

from __future__ import annotations

import numpy as np
import pytest

import uopviz as uv
from uopviz.backends.target import cpu_target
from uopviz.core.dtype import dtypes
from uopviz.passes.optops.heuristic import HEURISTIC_SOURCE_LANE_OPS, source_estimate

T = uv.Tensor
RUNNABLE = [b for b in ("c", "opencl") if b in uv.backends.available()]


def _argmin(rows: int, columns: int, axis: int):
    return [T.rand(rows, columns, seed=rows).argmin(axis=axis)]


def _bf16_matmul(n: int):
    a, b = T.rand(n, n, seed=1), T.rand(n, n, seed=2)
    return [a.cast(dtypes.bfloat16).matmul(b.cast(dtypes.bfloat16))]


def _lanes(kernel) -> int:
    lane_types = (uv.AxisType.UPCAST, uv.AxisType.UNROLL)
    return int(np.prod([size for size, kind in kernel.axes if kind in lane_types]))


@pytest.mark.parametrize("backend", ["opencl", "c", "cuda"])
def test_a_31x8_argmin_of_rand_values_is_not_unrolled_into_a_huge_source(backend):
    program = uv.compile(_argmin(31, 8, 1), backend, opts="heuristic", build=False)
    source = sum(len(item.source) for item in program.items)
    assert source < 250_000, source  # 567,599 characters on OpenCL before (all 248 lanes)
    assert max(_lanes(kernel) for kernel in program.kernels) < 31 * 8
    for kernel in program.kernels:
        assert source_estimate(kernel) <= HEURISTIC_SOURCE_LANE_OPS or _lanes(kernel) == 1


@pytest.mark.parametrize("backend", RUNNABLE)
@pytest.mark.parametrize(("rows", "columns", "axis"), [(31, 8, 1), (31, 8, 0), (7, 33, 1)])
def test_bounded_argmins_compute_what_the_interpreter_does(backend, rows, columns, axis):
    (expected,) = uv.compile(_argmin(rows, columns, axis), "python").run()
    values = uv.compile([T.rand(rows, columns, seed=rows)], "python").run()[0]
    np.testing.assert_array_equal(expected.reshape(-1), np.argmin(values.reshape(rows, columns), axis=axis))
    (got,) = uv.compile(_argmin(rows, columns, axis), backend, opts="heuristic").run()
    np.testing.assert_array_equal(got, expected)


def test_the_bfloat16_rounding_helper_has_no_branch_for_each_lane_to_inline():
    program = uv.compile(_bf16_matmul(64), "opencl", opts="heuristic", build=False)
    source = program.items[-1].source
    helper = source[source.index("float_to_bf16(float f)"):]
    helper = helper[: helper.index("\n}")]
    assert "if (" not in helper and "return" in helper  # a select: no 128 inlined branches per iteration
    assert len(source) < 120_000, len(source)
    assert max(_lanes(kernel) for kernel in program.kernels) <= 128


@pytest.mark.parametrize("backend", RUNNABLE)
@pytest.mark.parametrize("n", [16, 64])
def test_bfloat16_matmuls_compute_what_the_interpreter_does(backend, n):
    (expected,) = uv.compile(_bf16_matmul(n), "python").run()
    (got,) = uv.compile(_bf16_matmul(n), backend, opts="heuristic").run()
    got, expected = np.asarray(got, np.float32), np.asarray(expected, np.float32)
    np.testing.assert_allclose(got, expected, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("backend", ["c", "opencl", "llvm", "cuda"])
def test_the_budget_leaves_ordinary_tiles_alone(backend):
    # a float32 gemm's register tile (with its rand inputs inlined) stays under the budget
    program = uv.compile([T.rand(64, 64, seed=1).matmul(T.rand(64, 64, seed=2))], backend, opts="heuristic",
                         build=False)
    gemm = [kernel for kernel in program.kernels if kernel.has_reduce][-1]
    # CPU: a tile of at least four SIMD registers of float32 lanes for the target (64 lanes with
    # AVX-512, 32 with AVX2, 16 with SSE); GPU: workgroups, and 4 lanes
    assert _lanes(gemm) >= (4 if backend == "cuda" else 4 * cpu_target().vector_bytes // 4)
    assert source_estimate(gemm) <= HEURISTIC_SOURCE_LANE_OPS
