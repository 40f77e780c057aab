"""PADTO's clamps settled after the opts (``settle_pad_clamps``): the loads of padded vector lanes
read whole vectors under a gate, every other clamped load keeps its clamp, and a clamp PADTO did
not make (a replicate border's, of the same form) is never touched.  IR in, IR out, then values."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import uopviz as uv
from uopviz import AxisType, Ops, Tensor
from uopviz.backends import available, get
from uopviz.backends.target import using_target
from uopviz.core.rewrite import substitute
from uopviz.passes.optimize import finish_optimize
from uopviz.passes.optops import Kernel, Opt, OptOp
from uopviz.passes.optops.axes import PAD_CLAMP, settle_pad_clamps

U, T = AxisType.UPCAST, AxisType.THREAD
BACKENDS = available()


def split(axis: int, factor: int, target: AxisType, top: bool = False) -> Opt:
    return Opt(OptOp.SPLIT, axis, (factor, target, top))


def _matmul(m: int, k: int, n: int, seed: int, transposed: bool = False) -> tuple[Tensor, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if transposed else (k, n)).astype(np.float32)
    right = Tensor(b).T if transposed else Tensor(b)
    return Tensor(a) @ right, a @ (b.T if transposed else b)


def _kernel(out: Tensor, opts: list[Opt], backend: str = "c") -> Kernel:
    return uv.compile(out, backend=backend).kernels[0].with_parallel_outputs().apply_all(opts)


def _clamps(ast: uv.UOp) -> list[uv.UOp]:
    return [u for u in ast.toposort() if u.op is Ops.WHERE and u.src[0].op is Ops.CMP_LT
            and u.src[1] is u.src[0].src[0] and u.src[2].op is Ops.CONST]


def _gated_loads(ast: uv.UOp) -> list[uv.UOp]:
    return [u for u in ast.toposort() if u.op is Ops.LOAD and len(u.src) == 3]


#: the columns (axis 1) padded to whole 8-lane vectors and split into them: the last UPCAST axis
COLUMN_LANES = [Opt(OptOp.PADTO, 1, 8), split(1, 8, U)]


def test_padto_tags_its_clamp_until_the_opts_are_settled() -> None:
    out, _ = _matmul(4, 6, 13, 0)
    kernel = _kernel(out, [Opt(OptOp.PADTO, 1, 8)])
    tagged = [u for u in kernel.ast.toposort() if u.tag == PAD_CLAMP]
    assert len(tagged) == 1 and tagged[0].op is Ops.WHERE
    settled = finish_optimize(kernel)
    assert not [u for u in settled.toposort() if u.tag == PAD_CLAMP]
    assert len(_clamps(settled)) == 1  # no lanes: the column's load still reads the last column


def test_a_padded_vector_lane_load_is_gated_not_clamped() -> None:
    out, _ = _matmul(4, 6, 13, 0)
    kernel = _kernel(out, COLUMN_LANES)
    assert len(_clamps(kernel.ast)) == 1 and not _gated_loads(kernel.ast)
    settled = finish_optimize(kernel)
    assert _clamps(settled) == []
    (load,) = _gated_loads(settled)  # b[k, column]: its lanes are consecutive columns
    assert load.src[2].op is Ops.CMP_LT and load.src[1].op is Ops.CONST and load.src[1].const_value == 0


@pytest.mark.parametrize(("backend", "target", "gated"), [
    ("c", "x86-64-v2", True),  # a whole-vector load and a select on every target
    ("llvm", "x86-64-v3", True),  # llvm.masked.load is AVX's vmaskmovps
    ("llvm", "x86-64-v2", False),  # without AVX, LLVM reads a masked load lane by lane
])
def test_lanes_are_gated_where_the_backend_reads_a_gated_vector_whole(backend: str, target: str,
                                                                     gated: bool) -> None:
    if backend not in BACKENDS:
        pytest.skip(f"the {backend} backend is not available here")
    out, _ = _matmul(4, 6, 13, 0)
    with using_target(target):
        settled = finish_optimize(_kernel(out, COLUMN_LANES, backend))
    assert (len(_gated_loads(settled)), len(_clamps(settled))) == ((1, 0) if gated else (0, 1))


def test_a_strided_lane_load_keeps_its_clamp() -> None:
    # b stored transposed: consecutive columns are k elements apart, a gather either way
    out, _ = _matmul(4, 6, 13, 0, transposed=True)
    settled = finish_optimize(_kernel(out, COLUMN_LANES))
    assert len(_clamps(settled)) == 1 and not _gated_loads(settled)


def test_a_clamp_on_an_outer_upcast_axis_stays() -> None:
    # rows padded and split into lanes, then the columns: the rows' lanes are broadcast one by one
    out, _ = _matmul(5, 6, 16, 0)
    kernel = _kernel(out, [Opt(OptOp.PADTO, 0, 4), split(0, 4, U), split(1, 8, U)])
    assert [r.arg[1] for r in kernel.ranges][-2:] == [U, U]
    settled = finish_optimize(kernel)
    assert len(_clamps(settled)) == 1 and not _gated_loads(settled)


def test_a_clamp_padto_did_not_make_is_left_alone() -> None:
    # a replicate border's clamp has PADTO's form, and its values are used: the same kernel with
    # the clamp untagged (as any other pass would build it) is settled to itself
    out, _ = _matmul(4, 6, 13, 0)
    kernel = _kernel(out, COLUMN_LANES)
    (clamp,) = (u for u in kernel.ast.toposort() if u.tag == PAD_CLAMP)
    untagged = substitute(kernel.ast, {clamp: clamp.replace(tag=None)})
    assert settle_pad_clamps(untagged, kernel.backend_object) is untagged


CASES = [
    (4, 6, 13, COLUMN_LANES),
    (3, 9, 21, [Opt(OptOp.PADTO, 1, 8), split(1, 8, U), split(0, 3, U)]),
    (6, 5, 13, [Opt(OptOp.PADTO, 1, 16), split(1, 8, U)]),
    (5, 7, 29, [Opt(OptOp.PADTO, 1, 8), split(1, 8, U), Opt(OptOp.PADTO, 0, 2), split(0, 2, U)]),
]
#: THREAD axes run on the CPU backends
CPU_BACKENDS = [backend for backend in BACKENDS if backend in ("python", "c", "llvm")]
THREAD_CASES = [
    (6, 5, 13, [Opt(OptOp.PADTO, 1, 16), split(1, 8, U), split(1, 2, T, top=True)]),
    (5, 7, 29, [Opt(OptOp.PADTO, 1, 8), split(1, 8, U), Opt(OptOp.PADTO, 0, 2), split(0, 2, T, top=True)]),
]


@pytest.mark.parametrize(("backend", "m", "k", "n", "opts"), [
    *((backend, *case) for backend in BACKENDS for case in CASES),
    *((backend, *case) for backend in CPU_BACKENDS for case in THREAD_CASES),
])
def test_gated_padded_lanes_keep_the_results(backend: str, m: int, k: int, n: int, opts: list[Opt]) -> None:
    for seed in range(2):
        out, expected = _matmul(m, k, n, seed)
        program = uv.compile(out, backend=backend, opts=opts)
        np.testing.assert_allclose(program.run()[0], expected, rtol=1e-4, atol=1e-4)


def _optimize_steps(program: uv.Program, rule: str) -> list:
    return [step for step in program.trace.find("Optimize").steps if step.rule == rule]


def test_the_trace_records_each_gated_load() -> None:
    out, expected = _matmul(4, 6, 13, 0)
    program = uv.compile(out, backend="c", opts=COLUMN_LANES)
    (gated,) = _optimize_steps(program, "gate_padded_lanes")
    assert gated.before.op is Ops.LOAD and len(gated.before.src) == 1 and len(gated.after.src) == 3
    assert gated.location.startswith("uopviz/passes/optops/axes.py:")
    assert _optimize_steps(program, "untag_pad_clamp") == []  # the clamp went with the load it fed
    np.testing.assert_allclose(program.run()[0], expected, rtol=1e-4, atol=1e-4)


def test_the_trace_records_each_clamp_kept() -> None:
    out, expected = _matmul(5, 6, 16, 0)
    program = uv.compile(out, backend="c", opts=[Opt(OptOp.PADTO, 0, 4), split(0, 4, U), split(1, 8, U)])
    (untagged,) = _optimize_steps(program, "untag_pad_clamp")
    assert untagged.before.tag == PAD_CLAMP and untagged.after.tag is None
    assert _optimize_steps(program, "gate_padded_lanes") == []
    np.testing.assert_allclose(program.run()[0], expected, rtol=1e-4, atol=1e-4)


def _max_pool_rows(columns: int, seed: int = 0) -> tuple[Tensor, np.ndarray]:
    """A 3x3 stride-2 max pool over rows of ``columns`` (a stride-2 read of each row), and numpy's."""
    x = np.random.default_rng(seed).standard_normal((1, 3, 9, columns)).astype(np.float32)
    out = (columns - 3) // 2 + 1
    windows = [x[:, :, r : r + 7 : 2, c : c + 2 * out - 1 : 2] for r in range(3) for c in range(3)]
    return Tensor(x).max_pool2d(3, 2), np.max(windows, axis=0)


#: the pooled columns (axis 2) padded to whole 32-lane vectors and split into them
POOL_COLUMN_LANES = [Opt(OptOp.PADTO, 2, 32), split(2, 32, U)]


#: what a gated stride-2 row's whole read looks like in each backend's source: C's two loads and
#: shuffle behind a test of the buffer's bounds (lane by lane in its else), LLVM's block of them and
#: its select, a masked gather in the block taken at the buffer's ends
WHOLE_STRIDED_READ = {"c": ("__builtin_shufflevector", "} else {"),
                      "llvm": (".whole:", "shufflevector", "select <16 x i1>", "masked.gather")}
GATED_STRIDED_BACKENDS = [backend for backend in ("c", "llvm") if backend in BACKENDS]


@pytest.mark.parametrize("backend", GATED_STRIDED_BACKENDS)
@pytest.mark.parametrize(("columns", "gated"), [
    (111, True),  # 55 pooled columns as 2 tiles of 32: each tile's last lanes clamp by the tile
    (55, False),  # 27 as one tile: its clamped lanes are constants, set after the shuffle
])
def test_a_stride_2_row_padded_in_several_tiles_is_gated(backend: str, columns: int, gated: bool) -> None:
    # SqueezeNet's first max pool: clamped, every tile's second vector was read lane by lane
    # (C 0.211 ms, LLVM 0.263 in the model); gated, two whole loads, a shuffle and a select (C
    # 0.147 ms, LLVM 0.169)
    out, expected = _max_pool_rows(columns)
    settled = finish_optimize(_kernel(out, POOL_COLUMN_LANES, backend))
    gated = gated and get(backend).loads_gated_strided_vectors_whole  # (LLVM: from AVX on)
    assert (len(_gated_loads(settled)) > 0, len(_clamps(settled)) == 0) == (gated, gated)
    program = uv.compile(out, backend=backend, opts=POOL_COLUMN_LANES)
    if gated:
        assert all(text in program.sources[0] for text in WHOLE_STRIDED_READ[backend])
    np.testing.assert_array_equal(program.run()[0], expected)


@pytest.mark.parametrize(("backend", "target"), [("python", None), ("llvm", "x86-64-v2")])
def test_a_stride_2_row_keeps_its_clamps_where_the_backend_reads_no_gated_shuffle(
        backend: str, target: str | None) -> None:
    # the Python interpreter, and LLVM without AVX (a masked load there is a branch per lane)
    if backend not in BACKENDS:
        pytest.skip(f"{backend} is not available here")
    out, expected = _max_pool_rows(111)
    with using_target(target) if target else contextlib.nullcontext():
        settled = finish_optimize(_kernel(out, POOL_COLUMN_LANES, backend))
        assert not _gated_loads(settled)
        program = uv.compile(out, backend=backend, opts=POOL_COLUMN_LANES)
        np.testing.assert_array_equal(program.run()[0], expected)


@pytest.mark.parametrize("backend", GATED_STRIDED_BACKENDS)
@pytest.mark.parametrize("seed", range(3))
def test_a_gated_stride_2_row_at_the_buffers_end_reads_lane_by_lane(backend: str, seed: int) -> None:
    # the last row's second tile would read past the end of the input: its vectors are read lane
    # by lane there (the test against the buffer's size), every value still the pool's
    out, expected = _max_pool_rows(111, seed)
    program = uv.compile(out, backend=backend, opts=POOL_COLUMN_LANES)
    np.testing.assert_array_equal(program.run()[0], expected)
