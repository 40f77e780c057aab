"""Register tiles written as assembly blocks (uopviz.backends.register_tile): which loops are tile
steps, the block's instructions, and conv kernels rendered with them computing what numpy does and
exactly what the compiler's own code computes."""

from __future__ import annotations

import re

import numpy as np
import pytest
from cpu_targets import target_params

from tests.backends.linear_programs import elementwise, reduction
from tests.backends.test_cpu_codegen import _convolution
from uopviz.backends import get
from uopviz.backends.register_tile import find_register_tiles, register_tiles_supported
from uopviz.backends.target import resolve_target, using_target

needs_c = pytest.mark.skipif(not get("c").available(), reason="no C compiler on this machine")
needs_llvm = pytest.mark.skipif(not get("llvm").available(), reason="llvmlite is not installed")


def _run(graph, x: np.ndarray, target: str, backend: str = "c"):
    """The graph (:func:`_convolution`: padding keeps the size) compiled for ``backend`` under
    ``target`` with the heuristic: its conv kernel's item, and the output."""
    with using_target(target):
        program = graph.compile(backend, opts="heuristic", progress=False)
        out = graph.run({"x": x}, backend=backend, opts="heuristic")["y"]
    (conv,) = [item for item in program.items if item.kernel.name.startswith("r_")]
    return conv, out


def _conv_linear(backend: str, channels_in: int, channels_out: int, window: int, size: int, seed: int):
    """The LINEAR program of :func:`_convolution`'s conv kernel as ``backend`` gets it under
    x86-64-v3 with the heuristic."""
    graph, _, _ = _convolution(channels_in, channels_out, size, window, seed)
    with using_target("x86-64-v3"):
        program = graph.compile(backend, opts="heuristic", progress=False, build=False)
        (conv,) = [item for item in program.items if item.kernel.name.startswith("r_")]
        return conv.kernel.linear(get(backend))


def _blocks_off(monkeypatch) -> None:
    """The C renderer writing the compiler's own code for every tile (the heuristic's tiles as
    they are)."""
    from uopviz.backends.c import CRenderer

    monkeypatch.setattr(CRenderer, "register_tile_lanes", lambda self: None)


@needs_c
@pytest.mark.parametrize("target", target_params("x86-64-v3"))
@pytest.mark.parametrize(
    "channels_in, channels_out, size, window, tile",
    [
        (32, 64, 14, 3, "_u7_u16"),  # 7 columns x 16 channels: 14 accumulators
        (16, 32, 7, 3, "_u7_u16"),
        (24, 32, 14, 5, "_u7_u16"),
        (40, 48, 7, 1, "_u7_u16"),  # a 1x1 conv: its input strip staged in the kernel, then read
    ],
)
def test_conv_tiles_are_assembly_blocks_computing_numpys_values(
    monkeypatch, target, channels_in, channels_out, size, window, tile
) -> None:
    seed = size + window + channels_in
    graph, x, expected = _convolution(channels_in, channels_out, size, window, seed)
    conv, out = _run(graph, x, target)
    assert conv.kernel.name.endswith(tile), conv.kernel.name
    assert re.search(r'__asm__\("vbroadcastss', conv.source) is None  # kept vectors load first
    assert "vfmadd231ps" in conv.source and '"memory"' in conv.source, conv.source
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
    # the same fused multiply-adds in the same order as the compiler's code for the same tile: the
    # same values, bit for bit
    _blocks_off(monkeypatch)
    plain_conv, plain_out = _run(_convolution(channels_in, channels_out, size, window, seed)[0], x, target)
    assert plain_conv.kernel.name == conv.kernel.name and "vfmadd231ps" not in plain_conv.source
    np.testing.assert_array_equal(out, plain_out)


@needs_c
@pytest.mark.parametrize("target", target_params("x86-64-v3"))
def test_a_kernel_of_two_convolutions_keeps_the_compilers_code(target) -> None:
    # a residual's conv fused into another's (ResNet's projection shortcut): the first tile's
    # accumulators stay live through the second's loop, so neither loop is a block and each keeps
    # 7 x 8 accumulators
    from uopviz.nnef.nnef1.loader import loads_nnef1

    rng = np.random.default_rng(3)
    text = """version 1.0;
graph G( x, z ) -> ( y )
{
    x = external<scalar>(shape = [1, 64, 7, 7]);
    z = external<scalar>(shape = [1, 128, 7, 7]);
    v = variable<scalar>(shape = [256, 64, 1, 1], label = 'v');
    w = variable<scalar>(shape = [256, 128, 1, 1], label = 'w');
    y = add(conv(x, v, 0.0), conv(z, w, 0.0));
}
"""
    v = rng.standard_normal((256, 64, 1, 1)).astype(np.float32)
    w = rng.standard_normal((256, 128, 1, 1)).astype(np.float32)
    x = rng.standard_normal((1, 64, 7, 7)).astype(np.float32)
    z = rng.standard_normal((1, 128, 7, 7)).astype(np.float32)
    graph = loads_nnef1(text, {"v": v, "w": w})
    with using_target(target):
        program = graph.compile("c", opts="heuristic", progress=False)
        out = graph.run({"x": x, "z": z}, backend="c", opts="heuristic")["y"]
    (pair,) = [item for item in program.items if item.kernel.name.startswith("r_")]
    assert "_R64_" in pair.kernel.name and "_R128_" in pair.kernel.name, pair.kernel.name
    assert pair.kernel.name.endswith("_u7_u8") and "vfmadd231ps" not in pair.source, pair.kernel.name
    expected = (np.einsum("oc,chw->ohw", v[:, :, 0, 0].astype(np.float64), x[0])
                + np.einsum("oc,chw->ohw", w[:, :, 0, 0].astype(np.float64), z[0]))
    np.testing.assert_allclose(out[0], expected, rtol=1e-4, atol=1e-4)


@needs_c
@pytest.mark.parametrize(
    "target, channels_in, channels_out, size, window, tile",
    [
        *[pytest.param(*p.values, 32, 64, 14, 3, "_u7_u8", marks=p.marks)
          for p in target_params("x86-64-v2")],
        # 24 channels: 7 x 8, 7 accumulators, which the compiler keeps in registers itself
        *[pytest.param(*p.values, 16, 24, 7, 3, "_u7_u8", marks=p.marks)
          for p in target_params("x86-64-v3")],
    ],
)
def test_tiles_the_compiler_keeps_in_registers_and_targets_without_fma_write_no_blocks(
    target, channels_in, channels_out, size, window, tile
) -> None:
    graph, x, expected = _convolution(channels_in, channels_out, size, window, seed=5)
    conv, out = _run(graph, x, target)
    assert conv.kernel.name.endswith(tile), conv.kernel.name
    assert "vfmadd231ps" not in conv.source and "vbroadcastss" not in conv.source
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def test_which_targets_get_blocks() -> None:
    import platform

    x86 = platform.machine() in ("x86_64", "AMD64")
    assert register_tiles_supported(resolve_target("x86-64-v3")) == x86
    assert not register_tiles_supported(resolve_target("x86-64-v2"))  # no FMA
    assert not register_tiles_supported(resolve_target("x86-64-v4"))  # 64-byte registers: unmeasured


def test_the_step_of_a_tile_is_found_and_its_block_planned() -> None:
    # the 3x3 conv's innermost loop (one window row's tap): 7 broadcast columns x 2 weight vectors
    # into 14 accumulators; one weight vector kept (16 registers: 14 + it + the broadcast), the other
    # read by each multiply-add from memory; the inputs one pointer, the weights another.  Its loop
    # is inside the taps' and the channels' loops: no block where a window's tile needs more
    # accumulators than 14
    linear = _conv_linear("c", 32, 64, window=3, size=14, seed=1)
    assert find_register_tiles(linear.src, lanes=8, window_tiles_above=14) == {}
    (tile,) = find_register_tiles(linear.src, lanes=8).values()
    assert (len(tile.accumulators), len(tile.broadcasts), len(tile.vectors), len(tile.bases)) == (14, 7, 2, 2)
    assert tile.plan() == tile.vectors[:1] and tile.scratch_registers() == (15, 14)
    ((accumulators, lines),) = tile.statements(lambda n: f"%{n}", lambda n: f"%%ymm{n}")
    assert accumulators == tile.accumulators
    assert lines[0].startswith("vmovups ") and lines[0].endswith("%%ymm14")
    assert sum(line.startswith("vbroadcastss") for line in lines) == 7
    fmas = [line for line in lines if line.startswith("vfmadd231ps")]
    assert len(fmas) == 14 and sum("(%" in line.split(",")[0] for line in fmas) == 7  # memory operands
    # accumulators are operands 0-13, the bases 14 and 15
    assert {re.search(r"%(\d+)$", line).group(1) for line in fmas} == {str(n) for n in range(14)}
    assert {re.search(r"\(%(\d+)\)", line).group(1) for line in lines if "(%" in line} == {"14", "15"}


@pytest.mark.parametrize("case", ["elementwise", "reduction", "gemm"])
def test_loops_that_are_not_tile_steps_are_left_alone(case) -> None:
    # no broadcast times vector into accumulators (an elementwise loop, a scalar sum), or a tile
    # whose step has no vector accumulator of 8 lanes (a gemm tiled 2 x 4 on 4-lane vectors)
    import uopviz as uv
    from uopviz.backends.c import CBackend
    from uopviz.core.ops import AxisType
    from uopviz.passes.optops.opts import Opt, OptOp

    if case == "gemm":
        rng = np.random.default_rng(0)
        a, b = (uv.Tensor(rng.standard_normal((16, 16)).astype(np.float32)) for _ in range(2))
        tile = [Opt(OptOp.SPLIT, 1, (4, AxisType.UPCAST, False)),
                Opt(OptOp.SPLIT, 0, (2, AxisType.UPCAST, False))]
        with using_target("x86-64-v3"):
            program = uv.compile([a @ b], backend="c", opts=tile)
            linear = program.items[0].kernel.linear(CBackend())
    else:
        linear = (elementwise(64) if case == "elementwise" else reduction(8, 32)).linear
    assert find_register_tiles(linear.src, lanes=8) == {}


@needs_llvm
@pytest.mark.parametrize("target", target_params("x86-64-v3"))
@pytest.mark.parametrize(
    "channels_in, channels_out, size, window, tile, blocks",
    [
        (40, 48, 7, 1, "_u7_u16", True),  # a 1x1 conv: one reduced axis, a block
        (160, 96, 7, 1, "_u7_u16", True),
        # a 3x3 or 5x5 conv's 14 accumulators: a block, the window's rows kept rolled around it
        (32, 64, 14, 3, "_u7_u16", True),
        (24, 32, 14, 5, "_u7_u16", True),
        # 5 columns x 16 channels (13x13): LLVM's own code keeps the 10 accumulators in registers
        # (llvm_renderer.OWN_WINDOW_TILE_ACCUMULATORS)
        (48, 64, 13, 3, "_u5_u16", False),
    ],
)
def test_llvm_writes_blocks_for_tiles_its_own_code_would_spill(
    monkeypatch, target, channels_in, channels_out, size, window, tile, blocks
) -> None:
    from uopviz.backends.llvm_renderer import LLVMRenderState

    seed = size + window + channels_in
    graph, x, expected = _convolution(channels_in, channels_out, size, window, seed)
    conv, out = _run(graph, x, target, "llvm")
    assert conv.kernel.name.endswith(tile), conv.kernel.name
    assert ("vfmadd231ps" in conv.source) == blocks and ("~{memory}" in conv.source) == blocks
    # the loops LLVM is told to keep rolled: a window's rows around a block's row of taps
    rolled = "llvm.loop.unroll.disable" in conv.source
    assert rolled == (blocks and window > 1), conv.source
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
    if blocks:
        # 16 channels are two registers a vector: each accumulator is split into its halves for
        # the block and joined after; LLVM's own code for the same tile computes the same bits
        assert "shufflevector <16 x float>" in conv.source and " x i32> <i32 8, " in conv.source
        monkeypatch.setattr(LLVMRenderState, "plan_register_tiles", lambda self: None)
        graph, _, _ = _convolution(channels_in, channels_out, size, window, seed)
        plain_conv, plain_out = _run(graph, x, target, "llvm")
        assert plain_conv.kernel.name == conv.kernel.name and "vfmadd231ps" not in plain_conv.source
        np.testing.assert_array_equal(out, plain_out)


@pytest.mark.parametrize("window", [3, 5])
def test_llvm_keeps_a_windows_rows_rolled_around_a_block_and_unrolls_its_row(window) -> None:
    # the block's own loop (one row's taps) is LLVM's to unroll; the loop of the window's rows around
    # it is kept rolled (unrolled whole, nine blocks a channel ran slower than LLVM's 7 x 8 tile);
    # the channels' loop, longer than LLVM unrolls whole, needs no word
    from uopviz.backends.llvm_renderer import FULL_UNROLL_MAX_TRIP, loops_around_register_tiles
    from uopviz.core.ops import AxisType, Ops

    linear = _conv_linear("llvm", 24, 32, window=window, size=14, seed=window)
    (tile_loop,) = find_register_tiles(linear.src, lanes=8).keys()
    (rows,) = loops_around_register_tiles(linear.src, [tile_loop])
    assert rows.op is Ops.RANGE and rows.arg[1] is AxisType.REDUCE and rows.src[0].arg[0] == window
    assert tile_loop.src[0].arg[0] == window and rows is not tile_loop
    position = {id(u): index for index, u in enumerate(linear.src)}  # (== on UOps builds a CMP_EQ)
    assert position[id(rows)] < position[id(tile_loop)]  # the rows hold the row's taps
    outside = linear.src[: position[id(rows)]]
    channels = [u for u in outside if u.op is Ops.RANGE and u.arg[1] is AxisType.REDUCE]
    assert channels and all(u.src[0].arg[0] > FULL_UNROLL_MAX_TRIP for u in channels)
    assert loops_around_register_tiles(linear.src, []) == set()


def test_vectors_of_two_registers_are_two_parts_each() -> None:
    # LLVM's vectors of 16 float32 lanes (a 1x1 conv's 16 channels) on 8-lane registers: each
    # multiply-add is two products; the weights' second half is the next 8-channel block of the
    # blocked layout, apart from the first (a part's own address)
    linear = _conv_linear("llvm", 48, 32, window=1, size=7, seed=2)
    (tile,) = find_register_tiles(linear.src, lanes=8, window_tiles_above=14).values()
    assert len(tile.accumulators) == 14 and {a.part for a in tile.accumulators} == {0, 1}
    assert {a.uop.dtype.count for a in tile.accumulators} == {16} and len(tile.broadcasts) == 7
    first, second = tile.vectors
    assert first.uop is second.uop and (first.part, second.part) == (0, 1)
    (base, first_offset), (second_base, second_offset) = tile.addresses[first], tile.addresses[second]
    assert base == second_base and second_offset - first_offset == 48 * 8  # 48 channels in x 8 out
    assert len(tile.products) == 14 and all(p.accumulator.part == p.vector.part for p in tile.products)

