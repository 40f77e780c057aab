"""What LLVM makes of a convolution's register tile: the IR the renderer writes for it and the
machine code LLVM makes of that IR.

- On AVX-512, a vector load whose lanes are each broadcast to one FMA (a tile of 16 channels x 16
  positions: each weight is the broadcast operand of one FMA) reads through an opaque pointer (an
  empty ``asm``), so x86 addresses the FMAs' memory operands ``disp(base)``: an FMA with an
  indexed operand ``(base,index)`` issues as two micro-ops.  Lanes broadcast to several FMAs go
  through a register and keep the plain pointer, as every broadcast does without AVX-512.
- A reduction loop holding the tile's innermost loop is kept rolled (``llvm.loop.unroll.disable``)
  where unrolling it whole would copy more than ``FULL_UNROLL_FMA_BUDGET`` vector FMAs (an 8 x 32
  tile's 3x3 taps: 144), and left to LLVM below that (a 7 x 32 tile's: 126).
- A loop nest without vector values that reads no memory (a fill) or is a reduction's loop is kept
  rolled too: LLVM's later passes took up to a second over such nests unrolled whole.

Values are numpy's on every target, backend and dtype checked."""

from __future__ import annotations

import re

import numpy as np
import pytest
from cpu_targets import target_params

import uopviz as uv
from uopviz.backends import get
from uopviz.backends.llvm_renderer import FULL_UNROLL_FMA_BUDGET, loops_kept_rolled
from uopviz.backends.target import using_target
from uopviz.core.ops import AxisType, Ops
from uopviz.passes.optops.opts import Opt, OptOp

from . import linear_programs as lp

needs_llvm = pytest.mark.skipif(not get("llvm").available(), reason="llvmlite is not installed")
RNG = np.random.default_rng(53)


def _tile(positions: int, channels: int) -> list[Opt]:
    """A conv's register tile: ``positions`` of an output row (axis 2) by ``channels`` (axis 0)."""
    return [Opt(OptOp.SPLIT, 2, (positions, AxisType.UPCAST, False)),
            Opt(OptOp.SPLIT, 0, (channels, AxisType.UPCAST, False))]


#: (positions, channels) -> what each tile is: weights broadcast once, or twice, or the input
#: broadcast (7 positions: each to 2 FMAs of 16 channels)
TILES = {(16, 16): "each weight to one FMA", (32, 8): "each weight to two FMAs", (7, 32): "7 x 32"}


def _conv_arrays(in_channels: int, out_channels: int, height: int, width: int, kernel: int, dtype):
    x = RNG.standard_normal((1, in_channels, height + kernel - 1, width + kernel - 1)).astype(dtype)
    w = RNG.standard_normal((out_channels, in_channels, kernel, kernel)).astype(dtype)
    return x, w


def _numpy_conv(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    k = w.shape[-1]
    windows = np.lib.stride_tricks.sliding_window_view(x.astype(np.float64), (k, k), axis=(2, 3))
    return np.einsum("nchwij,ocij->nohw", windows, w.astype(np.float64))


def _program(x, w, tile, backend: str, build: bool = True):
    """The conv with its filter stored output channels last (as the NNEF runtime's blocked filters
    are): a tile's channels are one contiguous vector load."""
    filters = uv.Tensor(np.ascontiguousarray(w.transpose(2, 3, 1, 0))).permute(3, 2, 0, 1)
    return uv.compile([uv.Tensor(x).conv2d(filters)], backend=backend, opts=_tile(*tile), build=build)


def _rendered(tile, kernel: int = 3) -> tuple[str, uv.engine.Program]:
    x, w = _conv_arrays(64, 32, 7, 28 if tile[0] == 7 else 32, kernel, np.float32)
    program = _program(x, w, tile, "llvm", build=False)
    return program.items[0].source, program


# ---------------------------------------------------------------------------------------------
# the IR


@pytest.mark.parametrize("target", target_params("x86-64-v4"))
def test_weights_each_broadcast_to_one_fma_are_read_through_an_opaque_base(target) -> None:
    with using_target(target):
        source, _ = _rendered((16, 16))
    bases = re.findall(r'(%base\d+) = call ptr asm "", "=r,0"\(ptr %\w+\)', source)
    assert bases
    # the weights' vector load reads from the opaque pointer, and its lanes feed the FMAs
    for base in bases:
        assert re.search(rf"= load <16 x float>, ptr {base},", source), base


@pytest.mark.parametrize("target", ["x86-64-v3", "x86-64-v2"])
def test_without_avx512_no_fma_takes_a_broadcast_operand_and_pointers_stay_plain(target) -> None:
    # AVX2 and SSE broadcast with an instruction of its own (a plain load): the asm would only cost
    with using_target(target):
        source, _ = _rendered((16, 16))
    assert 'call ptr asm ""' not in source


@pytest.mark.parametrize("target", target_params("x86-64-v4"))
@pytest.mark.parametrize("tile", [(32, 8), (7, 32)], ids=lambda t: f"{t[0]}x{t[1]}")
def test_lanes_broadcast_to_several_fmas_keep_the_plain_pointer(target, tile) -> None:
    with using_target(target):
        source, _ = _rendered(tile)
    assert 'call ptr asm ""' not in source, TILES[tile]


@pytest.mark.parametrize("target", target_params("x86-64-v4"))
@pytest.mark.parametrize("tile, kept", [((32, 8), True), ((16, 16), True), ((7, 32), False)],
                         ids=lambda v: f"{v[0]}x{v[1]}" if isinstance(v, tuple) else str(v))
def test_the_taps_rows_loop_is_kept_rolled_above_the_fma_budget(target, tile, kept) -> None:
    with using_target(target):
        source, program = _rendered(tile)
    linear = program.items[0].body.src[0]
    rolled = loops_kept_rolled(linear.src)
    fmas_a_tap = sum(1 for u in linear.src if u.op is Ops.MULACC and u.dtype.count > 1)
    assert (fmas_a_tap * 9 > FULL_UNROLL_FMA_BUDGET) == kept, fmas_a_tap
    if not kept:
        assert not rolled and "llvm.loop" not in source
        return
    # one loop: the REDUCE over the filter's rows (3), the one around the taps' innermost loop
    (loop,) = rolled
    assert loop.arg[1] is AxisType.REDUCE and loop.src[0].arg[0] == 3
    assert source.count(", !llvm.loop !") == 1
    assert re.search(r'^!0 = distinct !\{!0, !\{!"llvm.loop.unroll.disable"\}\}$', source, re.M)


def test_a_1x1_conv_and_a_pool_keep_every_loop_to_llvm() -> None:
    x, w = _conv_arrays(64, 64, 14, 14, 1, np.float32)
    conv = uv.compile([uv.Tensor(x).conv2d(uv.Tensor(w))], backend="llvm", opts="heuristic", build=False)
    pool = uv.compile([uv.Tensor(x).max_pool2d(3, 1)], backend="llvm", opts="heuristic", build=False)
    for program in (conv, pool):
        for item in program.items:
            assert not loops_kept_rolled(item.body.src[0].src)
            assert "llvm.loop" not in item.source


# ---------------------------------------------------------------------------------------------
# the machine code (x86 with AVX-512: embedded broadcasts)


def _assembly(tile, target: str) -> str:
    """The machine code LLVM makes of the tile's conv for ``target``; it holds the kernel's function."""
    with using_target(target):
        source, program = _rendered(tile)
        assembly = get("llvm").assembly(source, program.items[0].kernel.name)
    assert f"{program.items[0].body.src[0].arg}:" in assembly
    return assembly


@needs_llvm
@pytest.mark.parametrize("target", target_params("x86-64-v4"))
def test_broadcast_fma_operands_are_addressed_from_one_register(target) -> None:
    assembly = _assembly((16, 16), target)
    operands = re.findall(r"vfmadd\w+\s+(-?\d*\([^)]*\))\{1to16\}", assembly)
    assert len(operands) >= 16, "the tile's FMAs take their weights as broadcast memory operands"
    indexed = [operand for operand in operands if "," in operand]
    assert not indexed, indexed[:4]


@needs_llvm
@pytest.mark.parametrize("target", target_params("x86-64-v4"))
def test_the_rolled_taps_loop_holds_one_row_of_taps(target) -> None:
    fmas = len(re.findall(r"^\s+vfmadd\w+ps", _assembly((32, 8), target), re.M))
    assert 0 < fmas < 9 * 16, fmas  # 3 taps of 16 (LLVM unrolls the innermost loop), not all 9


# ---------------------------------------------------------------------------------------------
# values


@pytest.mark.parametrize("target", target_params("x86-64-v4", "x86-64-v3", "x86-64-v2"))
@pytest.mark.parametrize("tile", list(TILES), ids=lambda t: f"{t[0]}x{t[1]}")
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("in_channels, out_channels, height, kernel",
                         [(8, 32, 3, 3), (5, 64, 2, 3), (3, 32, 2, 5)])
def test_tiles_give_numpys_values(target, tile, dtype, in_channels, out_channels, height, kernel) -> None:
    width = 14 if tile[0] == 7 else 32
    x, w = _conv_arrays(in_channels, out_channels, height, width, kernel, dtype)
    expected = _numpy_conv(x, w)
    tolerance = 1e-4 if dtype == np.float32 else 1e-10
    backends = [b for b in ("llvm", "c") if get(b).available()]
    with using_target(target):
        for backend in backends:
            result = _program(x, w, tile, backend).run()[0]
            np.testing.assert_allclose(result, expected, rtol=tolerance, atol=tolerance, err_msg=backend)


def test_the_python_interpreter_agrees_on_the_tiles() -> None:
    x, w = _conv_arrays(4, 32, 2, 32, 3, np.float32)
    for tile in ((16, 16), (32, 8)):
        reference = _program(x, w, tile, "python").run()[0]
        np.testing.assert_allclose(reference, _numpy_conv(x, w), rtol=1e-4, atol=1e-4)
        if get("llvm").available():
            np.testing.assert_allclose(_program(x, w, tile, "llvm").run()[0], reference, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------------------------
# scalar nests kept rolled (compile time)


@pytest.mark.parametrize(
    "case, rolled_kinds",
    [
        (lp.fill(64, 58), [AxisType.LOOP, AxisType.LOOP]),  # reads no memory: every loop of it
        (lp.reduction(512, 49), [AxisType.REDUCE]),  # a scalar reduction: its REDUCE loop only
        (lp.elementwise(1024), []),  # a scalar copy reads memory: LLVM's to unroll
        (lp.vector_lanes(64), []),  # vector values: LLVM's to unroll
    ],
    ids=repr,
)
def test_scalar_fills_and_reductions_are_kept_rolled(case: lp.LinearCase, rolled_kinds) -> None:
    rolled = loops_kept_rolled(case.linear.src)
    assert sorted(u.arg[1].name for u in rolled) == sorted(kind.name for kind in rolled_kinds)
    source = get("llvm").render(case.linear)
    assert source.count(", !llvm.loop !") == len(rolled_kinds)
    assert source.count('!{!"llvm.loop.unroll.disable"}') == len(rolled_kinds)
    if get("llvm").available():
        for seed in (0, 1):
            lp.assert_case_matches("llvm", case, seed)


SQUEEZE_CLASSIFIER = """
version 1.0;

graph classifier( x ) -> ( y )
{{
    x = external<scalar>(shape = [1, {channels}, 13, 13]);
    w = variable<scalar>(shape = [{classes}, {channels}, 1, 1], label = 'w');
    y = relu(conv(x, w));
}}
"""


@needs_llvm
@pytest.mark.parametrize("target", target_params("x86-64-v3", "x86-64-v2"))
@pytest.mark.parametrize("channels, classes", [(64, 40), (48, 96), (32, 1000)])
def test_a_padded_tiles_gated_vector_stores_test_their_mask_first(target, channels, classes) -> None:
    # a 1x1 conv's 169 positions padded to 176 (two registers of positions): every vector of the
    # tile but the last one's is in range, and takes a plain store behind one test of its mask;
    # only the last takes llvm.masked.store (vmaskmovps, microcoded on AMD's Zen).  SqueezeNet's
    # 1x1 convs at 13x13 on LLVM (AVX2, 2 cores, in one process): 0.045-0.071 -> 0.035-0.058 ms
    from uopviz.nnef.nnef1.loader import loads_nnef1

    x = RNG.standard_normal((1, channels, 13, 13)).astype(np.float32)
    w = RNG.standard_normal((classes, channels, 1, 1)).astype(np.float32)
    graph = loads_nnef1(SQUEEZE_CLASSIFIER.format(channels=channels, classes=classes), variables={"w": w})
    with using_target(target):
        program = graph.compile("llvm", opts="heuristic", progress=False)
        result = graph.run({"x": x}, backend="llvm", opts="heuristic")["y"]
    product = np.einsum("oc,nchw->nohw", w[:, :, 0, 0].astype(np.float64), x.astype(np.float64))
    expected = np.maximum(product, 0)
    np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-4 * np.sqrt(channels))
    source = "\n".join(item.source for item in program.items)
    masked = re.findall(r"call void @llvm\.masked\.store", source)
    tested = re.findall(r"br i1 %all\d+, label %store\d+\.whole, label %store\d+\.lanes", source)
    assert len(masked) == len(tested), (len(masked), len(tested))
    assert bool(masked) == (target == "x86-64-v3"), target  # SSE's padded lanes are clamped, not gated
