"""Linearize alone, from text: a kernel graph becomes one LINEAR instruction list (tests/stage_text.py)."""

from __future__ import annotations

import pytest
from cpu_targets import target_params
from stage_text import check_stage

from uopviz.backends.target import using_target
from uopviz.core.ops import Ops
from uopviz.passes.linearize import linearize_kernel

# the accumulator kernel Instruction Selection makes of y[0] = sum of x[0..2]
BEFORE = """
%0 = STACK 1 [dtypes.index]  : index (1,)
%1 = PARAM %0 [ParamArg(slot=0, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (1,)
%2 = INDEX %1, 0  : float32
%3 = BUFFER [BufferArg(number=0, size=1, dtype=dtypes.float32, device=None, addrspace=AddrSpace.REG)]  : float32 (1,)
%4 = AFTER %3  : float32 (1,)
%5 = INDEX %4, 0  : float32
%6 = STORE %5, 0.0  : void
%7 = RANGE 3 [(0, AxisType.REDUCE)]  : index
%8 = AFTER %3, %6, %7  : float32 (1,)
%9 = INDEX %8, 0  : float32
%10 = LOAD %9  : float32
%11 = STACK 3 [dtypes.index]  : index (1,)
%12 = PARAM %11 [ParamArg(slot=1, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (3,)
%13 = INDEX %12, %7  : float32
%14 = LOAD %13  : float32
%15 = ADD %10, %14  : float32
%16 = STORE %9, %15  : void
%17 = END %16, %7  : void
%18 = AFTER %3, %17  : float32 (1,)
%19 = INDEX %18, 0  : float32
%20 = LOAD %19  : float32
%21 = STORE %2, %20  : void
%22 = SINK %21  : void
"""

# the same nodes, now also the sources of one LINEAR in program order: the constants it uses, the
# zeroing before the RANGE, the loop body, its END, the final load, the output's address and store
# (the address, used only after the loop, is placed after it)
EXPECTED = """
%0 = STACK 1 [dtypes.index]  : index (1,)
%1 = PARAM %0 [ParamArg(slot=0, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (1,)
%2 = BUFFER [BufferArg(number=0, size=1, dtype=dtypes.float32, device=None, addrspace=AddrSpace.REG)]  : float32 (1,)
%3 = AFTER %2  : float32 (1,)
%4 = INDEX %3, 0  : float32
%5 = STORE %4, 0.0  : void
%6 = STACK 3 [dtypes.index]  : index (1,)
%7 = PARAM %6 [ParamArg(slot=1, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (3,)
%8 = RANGE 3 [(0, AxisType.REDUCE)]  : index
%9 = AFTER %2, %5, %8  : float32 (1,)
%10 = INDEX %9, 0  : float32
%11 = LOAD %10  : float32
%12 = INDEX %7, %8  : float32
%13 = LOAD %12  : float32
%14 = ADD %11, %13  : float32
%15 = STORE %10, %14  : void
%16 = END %15, %8  : void
%17 = AFTER %2, %16  : float32 (1,)
%18 = INDEX %17, 0  : float32
%19 = LOAD %18  : float32
%20 = INDEX %1, 0  : float32
%21 = STORE %20, %19  : void
%22 = LINEAR %1, 0, %2, %3, %4, 0.0, %5, 3, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21 ['r_R3']  : void
"""


def test_linearize_lists_every_instruction_once_in_program_order() -> None:
    linear = check_stage(BEFORE, lambda ast: linearize_kernel(ast, "r_R3"), EXPECTED)
    assert linear.op is Ops.LINEAR and linear.arg == "r_R3"
    position = {u.op: i for i, u in reversed(list(enumerate(linear.src)))}  # each op's first place
    assert position[Ops.RANGE] < position[Ops.LOAD] < position[Ops.END]  # the loop opens, then closes
    assert len(set(linear.src)) == len(linear.src)


# an epilogue y[0] = x2[0] * sum(x1) + y[0] whose graph order puts the loads of the scale x2[0] and of
# y[0] before the reduction loop
EPILOGUE_BEFORE = """
%0 = STACK 1 [dtypes.index]  : index (1,)
%1 = PARAM %0 [ParamArg(slot=0, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (1,)
%2 = INDEX %1, 0  : float32
%3 = BUFFER [BufferArg(number=0, size=1, dtype=dtypes.float32, device=None, addrspace=AddrSpace.REG)]  : float32 (1,)
%4 = AFTER %3  : float32 (1,)
%5 = INDEX %4, 0  : float32
%6 = STORE %5, 0.0  : void
%7 = PARAM %0 [ParamArg(slot=2, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (1,)
%8 = INDEX %7, 0  : float32
%9 = LOAD %8  : float32
%10 = LOAD %2  : float32
%11 = RANGE 3 [(0, AxisType.REDUCE)]  : index
%12 = AFTER %3, %6, %11  : float32 (1,)
%13 = INDEX %12, 0  : float32
%14 = LOAD %13  : float32
%15 = STACK 3 [dtypes.index]  : index (1,)
%16 = PARAM %15 [ParamArg(slot=1, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (3,)
%17 = INDEX %16, %11  : float32
%18 = LOAD %17  : float32
%19 = ADD %14, %18  : float32
%20 = STORE %13, %19  : void
%21 = END %20, %11  : void
%22 = AFTER %3, %21  : float32 (1,)
%23 = INDEX %22, 0  : float32
%24 = LOAD %23  : float32
%25 = MUL %9, %24  : float32
%26 = ADD %10, %25  : float32
%27 = STORE %2, %26  : void
%28 = SINK %27  : void
"""

# the scale's load goes after the loop, just before its use: a value held across a loop takes a
# register the loop needs.  The load of y[0], which the kernel stores to, keeps its place before it.
EPILOGUE_EXPECTED = """
%0 = STACK 1 [dtypes.index]  : index (1,)
%1 = PARAM %0 [ParamArg(slot=0, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (1,)
%2 = INDEX %1, 0  : float32
%3 = LOAD %2  : float32
%4 = PARAM %0 [ParamArg(slot=2, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (1,)
%5 = BUFFER [BufferArg(number=0, size=1, dtype=dtypes.float32, device=None, addrspace=AddrSpace.REG)]  : float32 (1,)
%6 = AFTER %5  : float32 (1,)
%7 = INDEX %6, 0  : float32
%8 = STORE %7, 0.0  : void
%9 = STACK 3 [dtypes.index]  : index (1,)
%10 = PARAM %9 [ParamArg(slot=1, dtype=dtypes.float32, device='CPU', addrspace=AddrSpace.GLOBAL)]  : float32 (3,)
%11 = RANGE 3 [(0, AxisType.REDUCE)]  : index
%12 = AFTER %5, %8, %11  : float32 (1,)
%13 = INDEX %12, 0  : float32
%14 = LOAD %13  : float32
%15 = INDEX %10, %11  : float32
%16 = LOAD %15  : float32
%17 = ADD %14, %16  : float32
%18 = STORE %13, %17  : void
%19 = END %18, %11  : void
%20 = AFTER %5, %19  : float32 (1,)
%21 = INDEX %20, 0  : float32
%22 = LOAD %21  : float32
%23 = INDEX %4, 0  : float32
%24 = LOAD %23  : float32
%25 = MUL %24, %22  : float32
%26 = ADD %3, %25  : float32
%27 = STORE %2, %26  : void
%28 = LINEAR %1, 0, %2, %3, %4, %5, %6, %7, 0.0, %8, 3, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27 ['r_R3']  : void
"""


def test_linearize_places_loads_used_after_a_loop_after_it() -> None:
    linear = check_stage(EPILOGUE_BEFORE, lambda ast: linearize_kernel(ast, "r_R3"), EPILOGUE_EXPECTED)
    place = {u: i for i, u in enumerate(linear.src)}
    end = next(u for u in linear.src if u.op is Ops.END)
    loads = [u for u in linear.src if u.op is Ops.LOAD and u.src[0].src[0].op is Ops.PARAM]
    slots = {load.src[0].src[0].arg.slot: place[load] for load in loads}
    assert slots[0] < place[end] < slots[2]


def _conv_batch_norm(channels: int, size: int, rng):
    """A 3x3 convolution, its batch normalization and a relu (NNEF text), its variables and numpy's output."""
    import numpy as np

    from uopviz.nnef.nnef1.loader import loads_nnef1

    text = f"""version 1.0;
graph G( x ) -> ( y )
{{
    x = external<scalar>(shape = [1, {channels}, {size}, {size}]);
    w = variable<scalar>(shape = [{channels}, {channels}, 3, 3], label = 'w');
    mean = variable<scalar>(shape = [1, {channels}], label = 'mean');
    variance = variable<scalar>(shape = [1, {channels}], label = 'variance');
    offset = variable<scalar>(shape = [1, {channels}], label = 'offset');
    scale = variable<scalar>(shape = [1, {channels}], label = 'scale');
    c = conv(x, w, 0.0, padding = [(1, 1), (1, 1)]);
    b = batch_normalization(c, mean, variance, offset, scale, epsilon = 1e-5);
    y = relu(b);
}}
"""
    variables = {"w": rng.standard_normal((channels, channels, 3, 3)).astype(np.float32) / channels,
                 "mean": rng.standard_normal((1, channels)).astype(np.float32),
                 "variance": rng.uniform(0.5, 2.0, (1, channels)).astype(np.float32),
                 "offset": rng.standard_normal((1, channels)).astype(np.float32),
                 "scale": rng.standard_normal((1, channels)).astype(np.float32)}  # fmt: skip
    x = rng.standard_normal((1, channels, size, size)).astype(np.float32)
    padded = np.pad(x[0].astype(np.float64), ((0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(1, 2))
    c = np.einsum("chwij,ocij->ohw", windows, variables["w"].astype(np.float64))[None]
    per_channel = {k: variables[k].reshape(1, channels, 1, 1) for k in ("mean", "variance", "offset", "scale")}
    b = (c - per_channel["mean"]) / np.sqrt(per_channel["variance"] + 1e-5) * per_channel["scale"]
    return loads_nnef1(text, variables), x, np.maximum(b + per_channel["offset"], 0)



@pytest.mark.parametrize("target", target_params("x86-64-v3"))
@pytest.mark.parametrize(
    "channels, size, moves, blocks",
    [(128, 28, True, True), (64, 56, True, True), (256, 14, True, True), (256, 14, False, False)],
)
def test_a_wide_tiles_per_channel_vectors_are_loaded_after_its_reduction(
    monkeypatch, target, channels, size, moves, blocks
) -> None:
    # a 4 positions x 16 channels tile (8 accumulators, 2 weight vectors, 4 broadcasts: 14 of AVX2's
    # 16 registers) over a 3x3 window: its batch norm's scale and shift vectors, which depend only on
    # the channel tile, are loaded in the tile's loop after the reduction, not held across it; so
    # are a 7 x 16 tile's (an assembly block's 14 accumulators); GCC's 7 x 8 tile (no blocks) keeps
    # them before its loops (moved, GCC's allocation measured up to 1.4x slower)
    import numpy as np

    from uopviz.backends.c import CBackend, CRenderer
    from uopviz.backends.linear_program import open_scopes

    if not blocks:
        monkeypatch.setattr(CRenderer, "register_tile_lanes", lambda self: None)
        monkeypatch.setattr(CBackend, "writes_register_tiles", False)

    graph, x, expected = _conv_batch_norm(channels, size, np.random.default_rng(channels + size))
    with using_target(target):  # AVX2's 16 registers: 4 x 16 and 7 x 8 tiles
        program = graph.compile("c", opts="heuristic", progress=False)
        out = graph.run({"x": x}, backend="c", opts="heuristic")["y"]
    (conv,) = [item for item in program.items if item.kernel.name.startswith("r_")]
    assert conv.kernel.name.endswith("_u4_u16" if size > 14 else "_u7_u16" if blocks else "_u7_u8"), conv.kernel.name
    linear = conv.body.src[0] if conv.body.op is not Ops.LINEAR else conv.body
    instructions = linear.src
    scopes = open_scopes(instructions)
    position = {id(u): i for i, u in enumerate(instructions)}  # (== on UOps builds a CMP_EQ)
    reduce_loops = {i for i, u in enumerate(instructions) if u.op is Ops.RANGE and u.arg[1].name == "REDUCE"}
    ends = [i for i, u in enumerate(instructions) if u.op is Ops.END and position[id(u.src[-1])] in reduce_loops]
    first_reduce, last_end = min(reduce_loops), max(ends)
    per_channel = [i for i, u in enumerate(instructions) if u.op is Ops.LOAD and u.dtype.count > 1
                   and not reduce_loops & set(scopes[i]) and u.src[0].src[0].op is Ops.PARAM]
    assert len(per_channel) >= (4 if moves else 2)  # 16 or 8 channels: scale and shift
    if moves:
        assert all(i > last_end for i in per_channel)
    else:
        assert all(i < first_reduce for i in per_channel)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
