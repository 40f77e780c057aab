"""Multi-device values seen through movement ops: read back in logical order on every backend, with
the shard ``axis`` the spec derives ('Reshape remaps axis to preserve the shard boundary. Permute
follows the permutation.'), and a reshape that cannot keep the shard boundary is a UOpError where it
is written (not an internal error of a later stage).

A value on an n-tuple device is stored device-major (device ``d``'s shard in the ``d``-th part of its
buffer); what ``Program.run`` returns is the logical value, compared here with numpy on random data.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import uopviz as uv
from uopviz.backends import available

# the interpreter and C always; LLVM and OpenCL where this machine has them
BACKENDS = [b for b in ("python", "c", "llvm", "opencl") if b in available()]


def devices(count: int) -> tuple[str, ...]:
    return tuple(f"CPU:{i}" for i in range(count))


def run(tensor: uv.Tensor, backend: str) -> np.ndarray:
    return uv.compile(tensor, backend=backend).run()[0]


def random_array(shape: tuple[int, ...], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# (shape, shard axis, device count): every shard axis 0/1/2, two and three devices
SHARDINGS = [((4, 6), 0, 2), ((4, 6), 1, 2), ((6, 3), 1, 3), ((6, 3, 4), 0, 3), ((2, 3, 4), 2, 2),
             ((3, 2, 6), 2, 3), ((2, 6, 5), 1, 3)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape, axis, count", SHARDINGS)
def test_sharded_value_reads_back_in_logical_order(backend, shape, axis, count):
    a = random_array(shape, seed=len(shape) * 10 + axis)
    sharded = uv.Tensor(a).shard(devices(count), axis=axis)
    assert sharded.uop.axis == axis
    np.testing.assert_array_equal(run(sharded, backend), a)
    computed = sharded * 2 + 1  # computed per device into device-major storage
    assert computed.uop.axis == axis
    np.testing.assert_allclose(run(computed, backend), a * 2 + 1, rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape, axis, count", SHARDINGS)
def test_permuted_sharded_value(backend, shape, axis, count):
    a = random_array(shape, seed=7 + axis)
    order = tuple(reversed(range(len(shape))))
    permuted = uv.Tensor(a).shard(devices(count), axis=axis).permute(*order)
    assert permuted.uop.axis == order.index(axis)  # Permute follows the permutation
    np.testing.assert_array_equal(run(permuted, backend), a.transpose(order))
    np.testing.assert_allclose(run(permuted - 0.5, backend), a.transpose(order) - 0.5, rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_reshape_then_permute_of_a_shard(backend):
    # the audit's case: axis 0 of (12,) over 2 devices, reshaped to (2, 6) (axis 0), transposed (axis 1)
    a = random_array((12,), seed=3)
    out = uv.Tensor(a).shard(devices(2)).reshape(2, 6).permute(1, 0)
    assert out.uop.axis == 1
    np.testing.assert_array_equal(run(out, backend), a.reshape(2, 6).T)


@pytest.mark.parametrize("backend", BACKENDS)
def test_expanded_and_shrunk_views_of_a_shard(backend):
    a = random_array((6, 4), seed=11)
    sharded = uv.Tensor(a).shard(devices(2), axis=1)
    expanded = sharded.reshape(6, 1, 4).expand(6, 5, 4)
    assert expanded.uop.axis == 2
    np.testing.assert_array_equal(run(expanded, backend), np.broadcast_to(a.reshape(6, 1, 4), (6, 5, 4)))
    shrunk = sharded[1:4, :]  # a SHRINK of a non-shard axis
    assert shrunk.uop.axis == 1
    np.testing.assert_array_equal(run(shrunk, backend), a[1:4, :])
    flipped = sharded.flip(0)
    assert flipped.uop.axis == 1
    np.testing.assert_array_equal(run(flipped, backend), a[::-1])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape, axis, count", [((4, 3), 0, 2), ((6, 4), 1, 2), ((3, 5, 2), 0, 3)])
def test_padded_view_of_a_non_shard_axis(backend, shape, axis, count):
    # the padded positions read nothing: their clamped addresses stay inside the device's part
    a = random_array(shape, seed=13)
    other = (axis + 1) % len(shape)
    padding = [(0, 0)] * len(shape)
    padding[other] = (1, 2)
    padded = uv.Tensor(a).shard(devices(count), axis=axis).pad(tuple(padding))
    assert padded.uop.axis == axis
    np.testing.assert_array_equal(run(padded * 2 + 1, backend), np.pad(a, padding) * 2 + 1)


# (flat size per device, device count, new shape, the shard axis it keeps)
BOUNDARY_KEEPING = [(4, 3, (3, 4), 0), (4, 3, (6, 2), 0), (4, 3, (1, 3, 4), 1), (4, 3, (3, 2, 2), 0),
                    (3, 2, (2, 3), 0), (3, 2, (2, 1, 3), 0), (6, 2, (4, 3), 0), (2, 3, (3, 1, 2), 0)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("per_device, count, shape, axis", BOUNDARY_KEEPING)
def test_reshape_keeping_the_shard_boundary(backend, per_device, count, shape, axis):
    a = random_array((per_device * count,), seed=per_device + count)
    reshaped = uv.Tensor(a).shard(devices(count)).reshape(*shape)
    assert reshaped.uop.axis == axis
    np.testing.assert_array_equal(run(reshaped, backend), a.reshape(shape))
    order = tuple(reversed(range(len(shape))))
    transposed = reshaped.permute(*order)
    assert transposed.uop.axis == order.index(axis)
    np.testing.assert_array_equal(run(transposed, backend), a.reshape(shape).transpose(order))
    # a reduction over the other axes stays on each device: the result is sharded on the same axis
    others = tuple(i for i in range(len(shape)) if i != axis and shape[i] != 1)
    if others:
        summed = reshaped.sum(others)
        assert summed.uop.axis == axis - sum(1 for i in others if i < axis)
        np.testing.assert_allclose(run(summed, backend), a.reshape(shape).sum(others), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_reshape_of_a_non_leading_shard_axis(backend):
    # (2, 6, 4) sharded on axis 1 over 3 devices: (2, 3, 2, 4) keeps the boundary on axis 1, (2, 6, 2, 2)
    # on axis 1 too (splitting a later axis), (12, 4) cannot (device 0's rows are not a run of them)
    a = random_array((2, 6, 4), seed=5)
    sharded = uv.Tensor(a).shard(devices(3), axis=1)
    split = sharded.reshape(2, 3, 2, 4)
    assert split.uop.axis == 1
    np.testing.assert_array_equal(run(split, backend), a.reshape(2, 3, 2, 4))
    np.testing.assert_allclose(run(split.sum((2, 3)), backend), a.reshape(2, 3, 2, 4).sum((2, 3)),
                               rtol=1e-5, atol=1e-5)
    later = sharded.reshape(2, 6, 2, 2)
    assert later.uop.axis == 1
    np.testing.assert_array_equal(run(later, backend), a.reshape(2, 6, 2, 2))
    with pytest.raises(uv.UOpError, match=r"\(2, 6, 4\) to \(12, 4\).*axis 1.*3 devices"):
        sharded.reshape(12, 4)


# (size per device, device count, a shape whose axes cannot hold the shards)
BOUNDARY_BREAKING = [(4, 3, (2, 6)), (4, 3, (4, 3)), (4, 3, (2, 2, 3)), (3, 2, (3, 2)),
                     (2, 3, (2, 3))]


@pytest.mark.parametrize("per_device, count, shape", BOUNDARY_BREAKING)
def test_reshape_breaking_the_shard_boundary_is_a_clear_error(per_device, count, shape):
    sharded = uv.Tensor(random_array((per_device * count,), seed=1)).shard(devices(count))
    size = per_device * count
    expected = (rf"RESHAPE: .*\({size},\) to {re.escape(str(shape))}.*axis 0 \(size {size}\) is sharded over "
                rf"{count} devices, {per_device} each")
    with pytest.raises(uv.UOpError, match=expected):
        sharded.reshape(*shape)  # Tensor.reshape: at construction
    with pytest.raises(uv.UOpError, match=expected):
        sharded.uop.reshape(shape)  # UOp.reshape: the same


def test_the_audit_cases_fail_at_construction_not_in_rangeify():
    sharded = uv.Tensor(np.arange(12, dtype=np.float32)).shard(devices(3))
    with pytest.raises(uv.UOpError, match="3 devices"):
        sharded.reshape(2, 6)
    with pytest.raises(uv.UOpError, match="3 devices"):
        sharded.reshape(4, 3).sum(1)
    np.testing.assert_array_equal(run(sharded.reshape(3, 4).sum(1), "python"),
                                  np.arange(12, dtype=np.float32).reshape(3, 4).sum(1))


def test_sharded_output_is_not_shared_with_intermediates():
    # the output's buffer, behind its PERMUTE view, is an output of the memory plan (never an arena slot
    # another kernel may reuse), and every kernel's result still reads back right
    a = random_array((4, 6), seed=9)
    sharded = uv.Tensor(a).shard(devices(2), axis=1)
    out = (sharded * 2).exp() + 1
    program = uv.compile(out, backend="python")
    storage = program.output_values()[0]
    while storage.op is not uv.Ops.BUFFER and storage.src:
        storage = storage.src[0]
    assert storage.op is uv.Ops.BUFFER and storage not in program.memory_plan.placements
    np.testing.assert_allclose(program.run()[0], np.exp(a * 2) + 1, rtol=1e-5)


@pytest.mark.parametrize("shape, axis, count", [((2, 4), 1, 2), ((6, 3), 0, 3)])
def test_pad_or_shrink_of_the_shard_axis_is_a_clear_error(shape, axis, count):
    sharded = uv.Tensor(random_array(shape, seed=17)).shard(devices(count), axis=axis)
    bounds = [(0, size) for size in shape]
    bounds[axis] = (1, shape[axis])
    padding = [(0, 0)] * len(shape)
    padding[axis] = (1, 1)
    for build, op in ((lambda: sharded.shrink(bounds), "SHRINK"), (lambda: sharded.pad(padding), "PAD")):
        with pytest.raises(uv.UOpError, match=rf"{op}: .* changes the size of axis {axis}, which is sharded "
                                              rf"over {count} devices"):
            build()
    # the same reads after a copy to one device
    gathered = sharded.copy("CPU:0")
    np.testing.assert_array_equal(run(gathered.shrink(bounds), "c"), run(sharded.copy("CPU:0"), "c")[
        tuple(slice(start, end) for start, end in bounds)])
