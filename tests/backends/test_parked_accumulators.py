"""Accumulators parked across a later loop (linear_program.parked_accumulators, the LLVM renderer's
park slots): a residual's convolution fused into another's sums in a second loop after the first's,
and the first tile waits in memory, not in registers, until both are done."""

from __future__ import annotations

import re

import numpy as np
import pytest
from cpu_targets import target_params

from uopviz.backends import get
from uopviz.backends.linear_program import open_scopes, parked_accumulators
from uopviz.backends.target import using_target
from uopviz.core.ops import Ops
from uopviz.nnef.nnef1.loader import loads_nnef1

needs_llvm = pytest.mark.skipif(not get("llvm").available(), reason="llvmlite is not installed")


def _fused_convolutions(first: int, second: int, channels: int, size: int, seed: int):
    """``relu(bn(conv(x, w1)) + bn(conv(y, w2)))`` of 1x1 convs, each with its batch norm (one
    kernel of two sums, as ResNet's blocks: the residual's conv fused into the other's), its
    weights, inputs and numpy's output."""
    rng = np.random.default_rng(seed)
    text = f"""version 1.0;
graph G( x, y ) -> ( z )
{{
    x = external<scalar>(shape = [1, {first}, {size}, {size}]);
    y = external<scalar>(shape = [1, {second}, {size}, {size}]);
    w1 = variable<scalar>(shape = [{channels}, {first}, 1, 1], label = 'w1');
    w2 = variable<scalar>(shape = [{channels}, {second}, 1, 1], label = 'w2');
    m1 = variable<scalar>(shape = [1, {channels}], label = 'm1');
    v1 = variable<scalar>(shape = [1, {channels}], label = 'v1');
    m2 = variable<scalar>(shape = [1, {channels}], label = 'm2');
    v2 = variable<scalar>(shape = [1, {channels}], label = 'v2');
    c = conv(x, w1, 0.0);
    d = conv(y, w2, 0.0);
    a = batch_normalization(c, m1, v1, 0.5, 2.0, epsilon = 0.25);
    b = batch_normalization(d, m2, v2, -0.5, 0.75, epsilon = 0.25);
    s = add(a, b);
    z = relu(s);
}}
"""
    w1 = rng.standard_normal((channels, first, 1, 1)).astype(np.float32)
    w2 = rng.standard_normal((channels, second, 1, 1)).astype(np.float32)
    x = rng.standard_normal((1, first, size, size)).astype(np.float32)
    y = rng.standard_normal((1, second, size, size)).astype(np.float32)
    m1, m2 = (rng.standard_normal((1, channels)).astype(np.float32) for _ in range(2))
    v1, v2 = (rng.uniform(0.5, 2.0, (1, channels)).astype(np.float32) for _ in range(2))

    def normalized(t, w, mean, variance, offset, scale):
        c = np.einsum("nchw,oc->nohw", t.astype(np.float64), w[:, :, 0, 0].astype(np.float64))
        deviation = np.sqrt(variance.reshape(1, -1, 1, 1) + 0.25)
        return (c - mean.reshape(1, -1, 1, 1)) / deviation * scale + offset

    summed = normalized(x, w1, m1, v1, 0.5, 2.0) + normalized(y, w2, m2, v2, -0.5, 0.75)
    data = {"w1": w1, "w2": w2, "m1": m1, "v1": v1, "m2": m2, "v2": v2}
    return loads_nnef1(text, data), {"x": x, "y": y}, np.maximum(summed, 0)


def _fused_linear(target: str, first: int = 24, second: int = 40, channels: int = 32, size: int = 7):
    """The LINEAR program of the fused kernel (its name has two reductions) for LLVM under ``target``."""
    graph, _, _ = _fused_convolutions(first, second, channels, size, 0)
    with using_target(target):
        program = graph.compile("llvm", opts="heuristic", progress=False, build=False)
    (item,) = [item for item in program.items if item.kernel.name.count("_R") >= 4]
    return item, item.kernel.linear(get("llvm"))


def test_the_first_sums_tile_is_parked_after_its_loop_until_after_the_second_sum():
    _, linear = _fused_linear("x86-64-v3")
    instructions = linear.src
    parked = parked_accumulators(instructions)
    (buffer,) = parked  # the first tile's accumulators; the second's are read right after their loop
    parking = parked[buffer]
    assert buffer.arg.size == 56  # 7 positions x 8 channels
    assert instructions[parking.after].op is Ops.END
    assert all(index > parking.after for index in parking.readers)
    scopes = open_scopes(instructions)
    # a whole loop (the second sum's) runs between the parking and the last read, and every read
    # is outside it, in the scope the parking is in
    loops = [index for index, u in enumerate(instructions) if u.op is Ops.RANGE]
    assert any(parking.after < index < max(parking.readers) for index in loops)
    assert all(scopes[index] == scopes[parking.after] for index in parking.readers)


def test_an_accumulator_read_inside_the_next_loop_stays_in_registers():
    # softmax: the maximum is read in every trip of the sum of exponentials after it
    graph = loads_nnef1(
        """version 1.0;
graph G( x ) -> ( y )
{
    x = external<scalar>(shape = [4, 64]);
    y = softmax(x, axes = [1]);
}
"""
    )
    with using_target("x86-64-v3"):
        program = graph.compile("llvm", opts="heuristic", progress=False, build=False)
    for item in program.items:
        assert parked_accumulators(item.kernel.linear(get("llvm")).src) == {}, item.kernel.name
        assert "%park" not in item.source


def test_an_avx512_tile_of_fourteen_registers_is_parked_too():
    """AVX-512's tile (7 positions x 32 channels, 14 zmm registers) is parked as AVX2's 7 x 8 is: the
    bound is in registers of the target (PARKED_MAX_REGISTERS), not AVX2's bytes."""
    _, linear = _fused_linear("x86-64-v4")
    parked = parked_accumulators(linear.src, vector_bytes=64)
    (buffer,) = parked
    assert buffer.arg.size == 7 * 32
    # the same buffer counted in AVX2's registers is 28 of them: a kernel-local array, not a tile
    assert parked_accumulators(linear.src, vector_bytes=32) == {}


@needs_llvm
@pytest.mark.parametrize("target", target_params("x86-64-v3", "x86-64-v2", "native"))
@pytest.mark.parametrize("first, second, channels, size", [(24, 40, 32, 7), (64, 32, 64, 14), (8, 16, 16, 5)])
def test_fused_convolutions_with_a_parked_tile_equal_numpy(first, second, channels, size, target):
    graph, inputs, expected = _fused_convolutions(first, second, channels, size, first + size)
    with using_target(target):
        program = graph.compile("llvm", opts="heuristic", progress=False)
        out = graph.run(inputs, backend="llvm", opts="heuristic")["z"]
    (fused,) = [item for item in program.items if item.kernel.name.count("_R") >= 4]
    assert re.search(r"%park\d+ = alloca", fused.source), fused.kernel.name
    assert "store volatile" in fused.source and "load volatile" in fused.source
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


@needs_llvm
def test_the_second_sums_loop_keeps_its_accumulators_in_registers_on_x86_64_v3():
    # without the park slot, LLVM's generic x86-64-v3 CPU spilled two of the second tile's seven
    # accumulators inside its loop: a load and a store around each of their multiply-adds
    item, _ = _fused_linear("x86-64-v3", 256, 512, 64, 7)
    with using_target("x86-64-v3"):
        assembly = get("llvm").assembly(item.source, item.kernel.name).split("\n")
    labels = {line[:-1]: index for index, line in enumerate(assembly) if re.match(r"\.LBB\d+_\d+:$", line)}
    loops = []  # (first, last) line of each loop: a label and the backward jump to it
    for index, line in enumerate(assembly):
        jump = re.match(r"\s+j\w+\s+(\.LBB\d+_\d+)$", line)
        if jump and labels.get(jump.group(1), index) < index:
            loops.append((labels[jump.group(1)], index))
    nested = {(a, b) for a, b in loops for c, d in loops if a <= c and d <= b and (c, d) != (a, b)}
    innermost = [loop for loop in loops if loop not in nested]
    fma_loops = [(a, b) for a, b in innermost if any("vfmadd" in line for line in assembly[a:b])]
    assert len(fma_loops) >= 2, fma_loops  # the two sums
    stack_store = re.compile(r"vmov\w+\s+%[xy]mm\d+, -?\d*\(%rsp\)")
    for first, last in fma_loops:
        spills = [line for line in assembly[first:last] if stack_store.search(line)]
        assert not spills, (first, last, spills)
