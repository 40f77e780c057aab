"""Kernels that differ only in an extent share one compiled kernel (uopviz.passes.extent_sharing):
a dense block's layers (each a concatenation one growth wider) compile to fewer kernels than
they launch, and still compute what numpy does, in this process and in the isolated worker."""

from __future__ import annotations

import re

import numpy as np
import pytest
from cpu_targets import target_params

import uopviz as uv
from uopviz.backends.target import using_target
from uopviz.core.dtype import dtypes
from uopviz.core.ops import AxisType, Ops
from uopviz.core.uop import UOp
from uopviz.nnef.nnef1.loader import loads_nnef1
from uopviz.passes.extent_sharing import ExtentBoundKernel, ExtentSharing, _affine_fit, share_extents

BACKENDS = [name for name in ("c", "llvm") if name in uv.backends.available()]
RNG = np.random.default_rng(25)
GROWTH, FIRST, LAYERS = 4, 8, 4

# a DenseNet block: each layer's 1x1 convolution reads every channel so far (FIRST + k * GROWTH)
# and its output is concatenated after them
LAYER = """    r{k} = relu(x{k});
    c{k} = conv(r{k}, w{k}, 0.0);
    x{n} = concat([x{k}, c{k}], axis = 1);
"""
DENSE_BLOCK = (
    "version 1.0;\ngraph Dense( x0 ) -> ( x{layers} )\n{{\n"
    "    x0 = external<scalar>(shape = [1, {first}, {size}, {size}]);\n{variables}{layers_text}}}\n"
)


def _dense_block(
    first: int = FIRST, growth: int = GROWTH, layers: int = LAYERS, size: int = 6
) -> tuple[str, dict[str, np.ndarray]]:
    weights = {f"w{k}": RNG.standard_normal((growth, first + k * growth, 1, 1)).astype(np.float32)
               for k in range(layers)}  # fmt: skip
    variables = "".join(
        f"    w{k} = variable<scalar>(shape = [{growth}, {first + k * growth}, 1, 1], label = 'w{k}');\n"
        for k in range(layers)
    )
    layers_text = "".join(LAYER.format(k=k, n=k + 1) for k in range(layers))
    text = DENSE_BLOCK.format(
        layers=layers, first=first, size=size, variables=variables, layers_text=layers_text
    )
    return text, weights


def _reference(x: np.ndarray, weights: dict[str, np.ndarray]) -> np.ndarray:
    for k in range(len(weights)):
        w = weights[f"w{k}"][:, :, 0, 0]
        x = np.concatenate([x, np.einsum("oc,nchw->nohw", w, np.maximum(x, 0))], axis=1)
    return x


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_dense_block_shares_kernels_across_channel_counts_and_computes_what_numpy_does(backend):
    text, weights = _dense_block()
    graph = loads_nnef1(text, weights)
    program = graph.compile(backend, opts="heuristic", progress=False)
    shared = [item for item in program.items if isinstance(item.compiled, ExtentBoundKernel)]
    # every layer's convolution (its reduction over 8, 12, 16, 20 channels) differs only in a channel
    # count (the copies of the block so far into each wider concatenation are gone: Concat In Place)
    assert len(shared) >= LAYERS
    copies = [kernel.buffers for kernel in program.nnef_kernels if kernel.name.endswith("[0]")]
    assert copies == [[f"x{LAYERS}", "x0"]]  # the graph's input only, into the block's last buffer
    assert len(set(program.sources)) <= len(program.items) - len(shared) // 2
    by_source = {}
    for item in shared:
        by_source.setdefault(item.source, []).append(item.compiled.generators)
    assert all(len(set(generators)) == len(generators) for generators in by_source.values())
    x = RNG.standard_normal((1, FIRST, 6, 6)).astype(np.float32)
    expected = _reference(x, weights)
    out = graph.run({"x0": x}, backend=backend, opts="heuristic")[f"x{LAYERS}"]
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def _zoo():
    """The benchmark zoo's module (its networks and numpy reference)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import zoo

    return zoo


def _dense_block_graph(first: int, size: int, folder) -> tuple:
    """The zoo's module, a 3-layer dense block of ``first`` channels at ``size`` x ``size`` and its
    graph, loaded from the NNEF 1.0 folder written to ``folder``."""
    zoo = _zoo()
    net = zoo.dense_block(first, size, 3)
    zoo.write_nnef1(net, str(folder))
    return zoo, net, uv.nnef.load(str(folder))


#: a C vector built from scalar loads of one array (``(float32x8){data3[a], data3[b], ...}``)
LANE_BY_LANE = re.compile(r"x\d+\)\{data\d+\[")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("first, size", [(256, 28), (512, 14), (320, 28)])
def test_convolutions_that_stage_their_input_share_one_kernel(backend, first, size, tmp_path):
    # DenseNet's 1x1 convs at 28x28 from 256 input channels: the heuristic's 7 x 32 tile, with the
    # 4 tiles of the 128 output channels innermost, copies the 7 input positions of every input
    # channel into a kernel-local BUFFER first (a scalar loop over the channels): a staging copy,
    # whose bound and array size vary with the channel count, so the layers' convs share a kernel
    # even where a contiguous vector's lane offsets vary too (below)
    zoo, net, graph = _dense_block_graph(first, size, tmp_path)
    program = graph.compile(backend, opts="heuristic", progress=False)
    convs = [item for item in program.items if "_R1_R1_" in item.kernel.name]
    assert len(convs) == 3
    staged = [item for item in convs if any(u.op is Ops.BUFFER for u in item.body.src[0].src)]
    if (first, size) == (256, 28):  # the case this test is about: each conv stages its input
        assert staged == convs
    # where the second vector of a 16-channel weight tile sits ``channels * 8`` elements after the
    # first, the offsets of its lanes vary between the convs: the shared kernel computes the first
    # lane's address from the extents and adds 1 .. 7 to it, so the vector is still loaded at once
    # (not lane by lane, as when each lane's offset was read at run time)
    assert len({item.source for item in convs}) == 1
    assert all(isinstance(item.compiled, ExtentBoundKernel) for item in convs)
    for item in convs:
        assert not LANE_BY_LANE.search(item.source), item.kernel.name
    x = net.input_data()
    out = graph.run({net.input_name: x}, backend=backend, opts="heuristic")[net.output]
    expected = zoo.reference(net, x)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5 * float(np.abs(expected).max()))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("first, size", [(128, 28), (96, 56)])
def test_weight_vectors_at_a_constant_channel_offset_share_one_kernel(backend, first, size, tmp_path):
    # DenseNet's 1x1 convs at 28x28 and 56x56 with the 32-channel tile: the second 16-channel
    # weight vector of a tile starts at element ``channels * 16`` of the blocked filter, an index
    # VECTORIZE of the constants ``channels * 16 + 0 .. 15`` (no value added to them).  Each lane
    # is the channel count's multiple plus its own constant in every member, so the shared kernel
    # reads that multiple once and the vector stays one load: 3 sources were 1 (DenseNet-121's 48
    # C sources 41, 3.3 s of compiler time where it was 5.0 s)
    zoo, net, graph = _dense_block_graph(first, size, tmp_path)
    program = graph.compile(backend, opts="heuristic", progress=False)
    # (on AVX2 the tiles are 16 channels, their weight vectors one run: shared before these rules too)
    convs = [item for item in program.items if "_R1_R1_" in item.kernel.name]
    assert len(convs) == 3
    assert len({item.source for item in convs}) == 1
    assert all(isinstance(item.compiled, ExtentBoundKernel) for item in convs)
    assert not LANE_BY_LANE.search(convs[0].source)
    x = net.input_data()
    out = graph.run({net.input_name: x}, backend=backend, opts="heuristic")[net.output]
    expected = zoo.reference(net, x)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5 * float(np.abs(expected).max()))


def test_a_vector_of_constant_lanes_varies_as_one_multiple_plus_each_lanes_constant():
    # two programs that differ in a loop bound (the channel count) and in an index vector of the
    # constants ``16 * channels + 0 .. 15``: one form, the lanes fit the bound's generator
    from uopviz.passes.extent_sharing import _contiguous_lanes, _variable_sites

    def program(channels: int) -> UOp:
        param = UOp.param(0, (64 * 16,), dtypes.float32)
        bound = UOp.const(dtypes.index, channels)
        loop = UOp(Ops.RANGE, (bound,), (0, AxisType.REDUCE))
        lanes = _index_lanes((None, 16 * channels, 16))
        index = UOp(Ops.INDEX, (param, lanes))
        load = UOp(Ops.LOAD, (index,))
        end = UOp(Ops.END, (load, loop))
        return UOp(Ops.LINEAR, (param, bound, loop, *lanes.src, lanes, index, load, end), "k")

    small, large = program(8), program(12)
    contiguous = _contiguous_lanes(small.src)
    assert len(contiguous.constant) == 16 and not contiguous.fixed
    assert len(_variable_sites(small)) == 17  # the bound and every lane
    shared = share_extents([small, large])
    assert shared[small].linear is shared[large].linear
    assert shared[small].values == (8,) and shared[large].values == (12,)


@pytest.mark.parametrize("gated", [True, False])
def test_params_read_by_gated_vectors_keep_their_sizes_apart(gated):
    # the renderers load a gated vector whole where it lies inside its PARAM (its size tested) and
    # lane by lane past it; a group's PARAM is its smallest member's, so programs whose gated
    # inputs differ in size stay apart (SqueezeNet's 64- and 128-channel 1x1 convs over a padded
    # input: the larger 1.32x its own time shared); ungated reads share whatever their sizes
    def program(channels: int) -> UOp:
        source = UOp.param(1, (channels * 64,), dtypes.float32)
        bound = UOp.const(dtypes.index, channels)
        loop = UOp(Ops.RANGE, (bound,), (0, AxisType.REDUCE))
        stride = UOp.const(dtypes.index, 16)
        start = UOp(Ops.MUL, (loop, stride))
        lanes = _index_lanes((start, 0, 8))
        index = UOp(Ops.INDEX, (source, lanes))
        if gated:
            alt = UOp(Ops.VECTORIZE, (UOp.const(dtypes.float32, 0.0),) * 8)
            gate = UOp(Ops.VECTORIZE, (UOp(Ops.CMP_LT, (loop, UOp.const(dtypes.index, 3))),) * 8)
            load = UOp(Ops.LOAD, (index, alt, gate))
            middle = (*alt.src[:1], alt, gate.src[0].src[1], gate.src[0], gate)
        else:
            load = UOp(Ops.LOAD, (index,))
            middle = ()
        assert load.dtype.count == 8
        end = UOp(Ops.END, (load, loop))
        return UOp(Ops.LINEAR, (source, bound, loop, stride, start, *lanes.src, lanes, index, *middle,
                                load, end), "k")

    small, large = program(64), program(128)
    shared = share_extents([small, large])
    assert (shared == {}) is gated
    if not gated:
        assert shared[small].linear is shared[large].linear


@pytest.mark.parametrize("backend", BACKENDS)
def test_shared_kernels_run_in_the_isolated_worker_with_their_extents(backend):
    from uopviz.nnef.program.runtime import program_inputs

    text, weights = _dense_block()
    graph = loads_nnef1(text, weights)
    program = graph.compile(backend, opts="heuristic", progress=False)
    assert any(isinstance(item.compiled, ExtentBoundKernel) for item in program.items)
    x = RNG.standard_normal((1, FIRST, 6, 6)).astype(np.float32)
    inputs = program_inputs(graph, program, {"x0": x, **weights})
    here = dict(zip(program.nnef_outputs, program.run(inputs)))
    isolated = dict(zip(program.nnef_outputs, program.run(inputs, isolated=True)))
    expected = _reference(x, weights)
    for outputs in (here, isolated):
        np.testing.assert_allclose(
            outputs[f"x{LAYERS}"].reshape(expected.shape), expected, rtol=1e-5, atol=1e-5
        )


def test_tensor_programs_keep_their_own_kernels():
    # sharing is asked for by the NNEF compile only: a Tensor program's sources stay as they were
    a, b = uv.Tensor.rand(4, 6, seed=1), uv.Tensor.rand(4, 10, seed=2)
    program = uv.compile([a.sum(axis=1), b.sum(axis=1)], backend=BACKENDS[0] if BACKENDS else "python")
    assert not any(isinstance(item.compiled, ExtentBoundKernel) for item in program.items)
    assert len(set(program.sources)) == len(program.items) == 4  # two rand fills, two row sums


def _block_sums(blocks: int, backend: str = "c") -> UOp:
    """The LINEAR program summing the 4 rows of each of ``blocks`` 4 x 8 blocks on ``backend``, as
    the pipeline makes it: a loop over the blocks around a loop over 8 columns around the sum."""
    data = uv.Tensor(np.ones((blocks, 4, 8), np.float32))
    program = uv.compile(data.sum(axis=1), backend=backend, build=False)
    (item,) = program.items
    return item.body.src[0]


def test_share_extents_fits_each_varying_constant_to_a_generator():
    # 6, 10, 14 blocks: the outer loop's length varies (the strides do not): one generator
    linears = [_block_sums(blocks) for blocks in (6, 10, 14)]
    shared = share_extents(linears)
    assert set(shared) == set(linears)
    (program,) = {entry.linear for entry in shared.values()}
    assert [shared[linear].values for linear in linears] == [(6,), (10,), (14,)]
    assert all(entry.members == 3 for entry in shared.values())
    params = sorted((u for u in program.src if u.op is Ops.PARAM), key=lambda u: u.arg.slot)
    assert [p.arg.slot for p in params] == [0, 1, 2] and params[2].arg.dtype == dtypes.int64
    assert params[1].shape == (6 * 32,)  # the smallest member's input
    # alone, a kernel shares with nobody
    assert share_extents(linears[:1]) == {}


def test_extent_sharing_asked_kernel_by_kernel_groups_as_share_extents_does():
    # Render asks for each kernel's group as it reaches it, so that the first kernels build while
    # the later groups are unknown: the answer is share_extents' own, and a program of another
    # outline (a block sum against a row sum) is never worked out before it is asked for
    def row_sums(columns: int) -> UOp:
        program = uv.compile(uv.Tensor(np.ones((4, columns), np.float32)).sum(axis=1), backend="c",
                             build=False)
        return program.items[0].body.src[0]

    blocks = [_block_sums(count) for count in (6, 10, 32)]
    rows = [row_sums(6), row_sums(10)]
    linears = [rows[0], *blocks, rows[1], blocks[0]]
    everything = share_extents(linears)
    sharing = ExtentSharing(linears)
    assert sharing.get(rows[0]) is None and sharing.shared == {}  # the block sums not worked out yet
    assert [sharing.get(linear) for linear in linears] == [everything.get(linear) for linear in linears]
    assert set(everything) == set(blocks) and sharing.shared == everything
    assert ExtentSharing(linears).everything() == everything


def test_the_bound_of_a_scalar_innermost_loop_stays_in_the_code():
    # a row sum's reduction is the innermost loop, with scalar values: C's compiler unrolls and
    # vectorises it knowing its length, so sums of rows of 6 and 10 keep their own kernels
    def row_sums(columns: int) -> UOp:
        program = uv.compile(
            uv.Tensor(np.ones((4, columns), np.float32)).sum(axis=1), backend="c", build=False
        )
        return program.items[0].body.src[0]

    assert share_extents([row_sums(6), row_sums(10)]) == {}


def test_a_member_whose_extent_equals_another_constant_shares_too():
    # 32 blocks: the loop's length is the CONST 32 that is also each block's stride (4 rows of 8),
    # one UOp, one instruction, so that member has an instruction fewer; its uses of the constant
    # are still the same use sites as the other members'
    linears = [_block_sums(blocks) for blocks in (6, 10, 32)]
    shared = share_extents(linears)
    assert [shared[linear].values for linear in linears] == [(6,), (10,), (32,)]
    # 8 blocks: the 8 is also the columns' count where a constant may not vary (it stays in the
    # code), so every use of that CONST stays: the member keeps its own kernel, the others share
    linears = [_block_sums(blocks) for blocks in (6, 8, 10)]
    shared = share_extents(linears)
    assert linears[1] not in shared
    assert [shared[linears[0]].values, shared[linears[2]].values] == [(6,), (10,)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("sizes", [(6, 10, 14), (6, 10, 32), (5, 9, 14)])
def test_a_shared_linear_program_computes_each_members_sums(backend, sizes):
    from uopviz.passes.render import compile_source, render_source

    linears = [_block_sums(blocks, backend) for blocks in sizes]
    shared = share_extents(linears)
    (program,) = {entry.linear for entry in shared.values()}
    compiled = compile_source(render_source(program, backend), str(program.arg), backend)
    for linear, blocks in zip(linears, sizes):
        data = RNG.standard_normal((blocks, 4, 8)).astype(np.float32)
        out = np.zeros(blocks * 8, np.float32)
        ExtentBoundKernel.bind(compiled, shared[linear].values)(out, data.reshape(-1))
        np.testing.assert_allclose(out.reshape(blocks, 8), data.sum(axis=1), rtol=1e-5, atol=1e-6)


def test_affine_fit():
    assert _affine_fit((256, 288, 320), (4096, 4608, 5120)) == (16, 0)
    assert _affine_fit((0, 6272, 12544), (50176, 56448, 62720)) == (1, 50176)
    assert _affine_fit((1, 2, 3), (1, 4, 9)) is None  # not affine
    assert _affine_fit((2, 4), (1, 2)) is None  # not an integer slope


def test_a_constant_used_in_two_sibling_loops_is_computed_before_both():
    # inside the first loop its variable would be out of scope in the second
    from uopviz.passes.extent_sharing import _placements

    constant, four = UOp.const(dtypes.index, 7), UOp.const(dtypes.index, 4)
    first, second = (UOp(Ops.RANGE, (four,), (axis, AxisType.LOOP)) for axis in (0, 1))
    use_first, use_second = UOp(Ops.ADD, (first, constant)), UOp(Ops.MUL, (second, constant))
    instructions = (four, constant, first, use_first, UOp(Ops.END, (use_first, first)),
                    second, use_second, UOp(Ops.END, (use_second, second)))  # fmt: skip
    add = UOp(Ops.ADD, (four, constant))  # stands for the value computed for the constant's uses
    assert _placements(instructions, {add: [3, 6]}) == {2: [add]}  # before the first RANGE
    assert _placements(instructions[:5], {add: [3]}) == {3: [add]}  # in the loop, before its use


@pytest.mark.skipif("llvm" not in BACKENDS, reason="llvmlite is not installed")
@pytest.mark.parametrize("target", target_params("x86-64-v3"))
@pytest.mark.parametrize("first, size", [(256, 14), (512, 7)])
def test_llvm_shares_16_channel_weight_tiles_written_as_register_tile_blocks(first, size, target, tmp_path):
    # DenseNet's 1x1 convs at 14x14 and 7x7 on LLVM: 7 x 16 tiles, LLVM's 16 float32 weights two
    # 8-channel blocks of the blocked layout ``channels * 8`` elements apart.  Shared, the second
    # block's lanes are one address from the extents plus 0 .. 7 (each 8-lane run contiguous), so
    # the tile is still found and written as an assembly block; with each lane's whole offset read
    # at run time it was LLVM's own code, its 14 accumulators partly on the stack (1.4-1.5x the time)
    zoo, net, graph = _dense_block_graph(first, size, tmp_path)
    with using_target(target):
        program = graph.compile("llvm", opts="heuristic", progress=False)
        out = graph.run({net.input_name: net.input_data()}, backend="llvm", opts="heuristic")[net.output]
    convs = [item for item in program.items if "_R1_R1_" in item.kernel.name]
    assert len(convs) == 3 and all(item.kernel.name.endswith("_u7_u16") for item in convs)
    assert len({item.source for item in convs}) == 1
    assert all(isinstance(item.compiled, ExtentBoundKernel) for item in convs)
    assert "vfmadd231ps" in convs[0].source  # the block's inline assembly
    expected = zoo.reference(net, net.input_data())
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5 * float(np.abs(expected).max()))


def _index_lanes(*starts: tuple[UOp | None, int, int]) -> UOp:
    """An index VECTORIZE of runs ``(base, first offset, count)``: ``base + first + i``."""
    lanes = []
    for base, first, count in starts:
        for i in range(count):
            offset = UOp.const(dtypes.index, first + i)
            lanes.append(offset if base is None else UOp(Ops.ADD, (base, offset)))
    return UOp(Ops.VECTORIZE, tuple(lanes))


def test_contiguous_runs_of_an_index_vector():
    from uopviz.passes.extent_sharing import _contiguous_runs

    x = UOp.range(4, AxisType.LOOP, 0)
    assert _contiguous_runs(_index_lanes((x, 0, 16)))  # one run
    assert _contiguous_runs(_index_lanes((x, 0, 8), (x, 4096, 8)))  # two 8-channel blocks apart
    assert _contiguous_runs(_index_lanes((x, 0, 4), (x, 64, 4), (x, 9, 4), (x, 200, 4)))
    assert not _contiguous_runs(_index_lanes((x, 0, 2), (x, 64, 2), (x, 9, 2), (x, 200, 2)))  # runs of 2
    assert not _contiguous_runs(_index_lanes((x, 0, 8), (x, 100, 3), (x, 200, 5)))  # runs of two lengths
