"""The GPU (CUDA) heuristic: a sum of products of float16 inputs takes the f16 -> f32 tensor core
(its axes padded to the tile where they are not multiples of it), float32 does not (no float32
tensor core is declared).  The kernels compile with NVRTC, and their CUDA linear programs (warp,
workgroup and mma fragments included) give numpy's float32-accumulated values on the python
interpreter, so no GPU is needed."""

from __future__ import annotations

import numpy as np
import pytest

import uopviz as uv
from uopviz import Tensor
from uopviz.backends.nvrtc import find_nvrtc, nvrtc_compile
from uopviz.core.ops import Ops
from uopviz.engine.gpu_model import gpu_account

needs_nvrtc = pytest.mark.skipif(find_nvrtc() is None,
                                 reason="no NVRTC library (the nvidia-cuda-nvrtc wheel)")


def _on_the_interpreter(program: uv.Program) -> list[np.ndarray]:
    """``program``'s CUDA linear programs run by the python backend (the CUDA lowering's WARP lanes,
    LOCAL threads and mma fragments as the interpreter's lifted dimensions)."""
    python = uv.backends.get("python")
    for item in program.items:
        linear = item.body.src[0]
        item.compiled = python.compile(python.render(linear), str(linear.arg))
    program.build = True
    return program.run()


def _half_gemm(m: int, k: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, k)).astype(np.float16), rng.standard_normal((k, n)).astype(np.float16)


@needs_nvrtc
@pytest.mark.parametrize("m, k, n", [(256, 256, 256), (64, 1024, 32), (200, 100, 300), (40, 24, 8)])
def test_a_half_gemm_takes_the_tensor_core(m: int, k: int, n: int) -> None:
    a, b = _half_gemm(m, k, n, seed=m + k + n)
    program = uv.compile(Tensor(a) @ Tensor(b), backend="cuda", opts="heuristic", build=False)
    (kernel,) = program.kernels
    assert any(u.op is Ops.WMMA for u in kernel.ast.toposort()), kernel.name
    assert gpu_account(kernel).uses_tensor_cores
    assert nvrtc_compile(program.sources[0], "sm_90")
    got = _on_the_interpreter(program)[0]
    assert got.dtype == np.float16
    wanted = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)  # summed in float32
    np.testing.assert_allclose(got.astype(np.float32), wanted.astype(np.float32), rtol=2**-9, atol=2**-10)


@needs_nvrtc
def test_a_half_gemm_1024_takes_the_tensor_core_and_compiles() -> None:
    # (too big for the interpreter: its values are checked on the smaller shapes above, K=1024 included)
    out = Tensor.empty(1024, 1024, dtype=np.float16) @ Tensor.empty(1024, 1024, dtype=np.float16)
    program = uv.compile(out, backend="cuda", opts="heuristic", build=False)
    (kernel,) = program.kernels
    assert kernel.opts[0].op is uv.OptOp.TC and gpu_account(kernel).uses_tensor_cores
    assert "mma.sync.aligned.m16n8k16" in program.sources[0]
    assert nvrtc_compile(program.sources[0], "sm_90")


def test_a_half_gemm_cast_to_float32_by_hand_takes_the_tensor_core() -> None:
    a, b = _half_gemm(32, 48, 64, seed=1)
    out = Tensor(a).cast(uv.dtypes.float32) @ Tensor(b).cast(uv.dtypes.float32)
    program = uv.compile(out, backend="cuda", opts="heuristic", build=False)
    assert program.kernels[0].opts[0].op is uv.OptOp.TC
    got = _on_the_interpreter(program)[0]
    np.testing.assert_allclose(got, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-4, atol=1e-4)


def test_a_large_half_gemm_gives_each_warp_several_tiles() -> None:
    out = Tensor.empty(4096, 4096, dtype=np.float16) @ Tensor.empty(4096, 4096, dtype=np.float16)
    program = uv.compile(out, backend="cuda", opts="heuristic", build=False)
    (kernel,) = program.kernels
    assert kernel.opts[0].op is uv.OptOp.TC
    upcasts = [size for size, kind in kernel.axes if kind is uv.AxisType.UPCAST]
    assert len(upcasts) > 1  # the C fragment and tiles along N (and M)
    assert gpu_account(kernel).block[0] * gpu_account(kernel).block[1] <= 1024


@pytest.mark.parametrize("m, k, n", [(64, 64, 64), (200, 100, 300)])
def test_a_float32_gemm_keeps_the_float32_path(m: int, k: int, n: int) -> None:
    rng = np.random.default_rng(m)
    a, b = (rng.standard_normal(shape).astype(np.float32) for shape in ((m, k), (k, n)))
    program = uv.compile(Tensor(a) @ Tensor(b), backend="cuda", opts="heuristic", build=False)
    (kernel,) = program.kernels
    assert all(opt.op is not uv.OptOp.TC for opt in kernel.opts)
    assert not gpu_account(kernel).uses_tensor_cores
    np.testing.assert_allclose(_on_the_interpreter(program)[0], a @ b, rtol=1e-4, atol=1e-4)


def test_a_half_gemm_with_a_tiny_reduction_is_not_padded_to_the_tile() -> None:
    # K of 3 padded to 16 would do 5.3x the work: the float32 path instead
    a, b = _half_gemm(64, 3, 64, seed=4)
    program = uv.compile(Tensor(a) @ Tensor(b), backend="cuda", opts="heuristic", build=False)
    assert all(opt.op is not uv.OptOp.TC for opt in program.kernels[0].opts)
    got = _on_the_interpreter(program)[0]
    wanted = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)
    np.testing.assert_allclose(got.astype(np.float32), wanted.astype(np.float32), rtol=2**-9, atol=2**-10)


def _lanes(kernel, kind=uv.AxisType.UPCAST) -> int:
    return int(np.prod([size for size, axis in kernel.axes if axis is kind]))


def test_a_float32_gemm_2048_gets_a_strided_register_tile_of_coalesced_loads() -> None:
    # issue #23, H200: the 1x4 contiguous tile (2.82 ms) -> 32x8 threads with 4x4 lanes a workgroup
    # width apart, K unrolled by 4 (0.86 ms; torch 0.369 ms)
    out = Tensor.empty(2048, 2048) @ Tensor.empty(2048, 2048)
    (kernel,) = uv.compile(out, backend="cuda", opts="heuristic", build=False).kernels
    assert _lanes(kernel) >= 16 and _lanes(kernel, uv.AxisType.UNROLL) == 4
    kinds = [opt.arg[1] for opt in kernel.opts]
    assert kinds.index(uv.AxisType.LOCAL) < kinds.index(uv.AxisType.UPCAST)  # threads first: strided lanes
    account = gpu_account(kernel, "H200")
    assert account.threads_per_block == 256 and account.blocks >= 132
    loads = [a for a in account.accesses if a.kind == "load"]
    assert loads and all(a.lines == 1 for a in loads)  # a warp reads one line per load (B) or broadcasts (A)
    assert account.predicted_s < 1e-3


@pytest.fixture
def small_tiles(monkeypatch: pytest.MonkeyPatch) -> None:
    """The register tile on shapes small enough for the interpreter (it keeps 132 blocks otherwise)."""
    from uopviz.passes.optops import heuristic

    monkeypatch.setattr(heuristic, "GPU_TILE_MIN_BLOCKS", 1)


@pytest.mark.parametrize("m, k, n", [(128, 64, 128), (96, 36, 120), (56, 20, 84), (40, 7, 6)])
def test_float32_gemm_register_tiles_give_numpys_values(small_tiles: None, m: int, k: int, n: int) -> None:
    rng = np.random.default_rng(m + k + n)
    a, b = (rng.standard_normal(shape).astype(np.float32) for shape in ((m, k), (k, n)))
    program = uv.compile(Tensor(a) @ Tensor(b), backend="cuda", opts="heuristic", build=False)
    (kernel,) = program.kernels
    if m % 2 == 0 and n % 2 == 0 and min(m, n) >= 56:
        assert _lanes(kernel) >= 4  # a tile of both axes (not a multiple of 32 or 8: other divisors)
    np.testing.assert_allclose(_on_the_interpreter(program)[0], a @ b, rtol=1e-4, atol=1e-4)


def test_conv_register_tiles_give_numpys_values(small_tiles: None) -> None:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 8, 28, 28)).astype(np.float32)
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32)
    out = Tensor(x).conv2d(Tensor(w), padding=1)
    program = uv.compile(out, backend="cuda", opts="heuristic", build=False)
    (kernel,) = program.kernels
    assert _lanes(kernel) >= 8 and gpu_account(kernel).threads_per_block >= 128
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))  # n c h w kh kw
    wanted = np.einsum("nchwij,ocij->nohw", windows, w)
    np.testing.assert_allclose(_on_the_interpreter(program)[0], wanted, rtol=1e-4, atol=1e-4)


def test_the_conv_of_issue_23_tiles_rows_and_channels() -> None:
    # H200: 8-thread blocks with 4 columns each (1.81 ms) -> 28 columns x 8 rows of threads, 7 rows x
    # 4 channels each (0.115 ms; torch 88 us, tinygrad 561 us)
    out = Tensor.empty(8, 64, 56, 56).conv2d(Tensor.empty(64, 64, 3, 3), padding=1)
    (kernel,) = uv.compile(out, backend="cuda", opts="heuristic", build=False).kernels
    account = gpu_account(kernel, "H200")
    assert account.block == (28, 8, 1) and _lanes(kernel) == 28
    assert account.predicted_s < 0.3e-3


def test_a_gemm_reading_both_inputs_along_the_reduction_keeps_a_contiguous_tile() -> None:
    # A @ B.T: no load steps along the outputs, so threads along N cannot coalesce; the LOCAL-first
    # strided tile would cost 32 lines per warp load (H200 model: 1.08 ms vs 0.55 ms at 512)
    (kernel,) = uv.compile(Tensor.empty(512, 512) @ Tensor.empty(512, 512).T, backend="cuda",
                           opts="heuristic", build=False).kernels
    assert kernel.opts[0].arg[1] is uv.AxisType.UPCAST and _lanes(kernel) == 4
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((48, 40)).astype(np.float32), rng.standard_normal((56, 40)).astype(np.float32)
    program = uv.compile(Tensor(a) @ Tensor(b).T, backend="cuda", opts="heuristic", build=False)
    np.testing.assert_allclose(_on_the_interpreter(program)[0], a @ b.T, rtol=1e-4, atol=1e-4)


def test_a_strided_conv_still_gets_the_register_tile() -> None:
    # ResNet's stem (stride 2): its input steps by 2 elements along the output columns, two lines
    # per warp: threads along them still share lines (H200 model 51 us, 122 us with the old tile)
    out = Tensor.empty(1, 3, 224, 224).conv2d(Tensor.empty(64, 3, 7, 7), stride=2, padding=3)
    (kernel,) = uv.compile(out, backend="cuda", opts="heuristic", build=False).kernels
    assert kernel.opts[0].arg[1] is uv.AxisType.LOCAL and _lanes(kernel) == 16
