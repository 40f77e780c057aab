"""A row padded to a whole register stores its first lanes only (C): as whole vectors of
power-of-two lanes shuffled out of the register, largest first (7 lanes as 4 + 2 + 1), never a copy
of the lanes' bytes through the stack (a store-forwarding stall a row).  The values are numpy's,
for rows of every width a register pads, in float32, float64 and int32."""

from __future__ import annotations

import re

import numpy as np
import pytest

import uopviz as uv
from uopviz.backends.target import cpu_target

RNG = np.random.default_rng(41)

pytestmark = pytest.mark.skipif(
    "c" not in uv.backends.available(), reason="no C compiler here: the prefix stores are the C backend's"
)


def _helper(source: str, name: str) -> str:
    """The body of the helper ``name`` in ``source`` (up to its closing brace)."""
    start = source.index(f"void {name}(")
    return source[start:source.index("\n}", start)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("width,register", [(3, 4), (5, 8), (6, 8), (7, 8), (13, 16), (14, 16), (15, 16)])
@pytest.mark.parametrize("rows", [4, 9])
def test_a_padded_row_stores_its_lanes_as_power_of_two_vectors(dtype, width, register, rows):
    x = (RNG.standard_normal((rows, width)) * 100).astype(dtype)
    upcast = (register, uv.AxisType.UPCAST, False)
    opts = [uv.Opt(uv.OptOp.PADTO, 1, register), uv.Opt(uv.OptOp.SPLIT, 1, upcast)]
    program = uv.compile([uv.Tensor(x) * 3 + 1], backend="c", opts=[opts])
    np.testing.assert_allclose(program.run()[0], x * 3 + 1, rtol=1e-6)
    source = program.kernels[0].source("c")
    names = set(re.findall(r"store_\w+_first\d+", source))
    itemsize = np.dtype(dtype).itemsize
    # a row that ends on a register's end is whole registers (float64 rows of 6 on SSE: 3 x 2
    # lanes); else its last register stores a prefix (float64 rows of 14 on AVX-512: 8 and 6)
    assert bool(names) == (width * itemsize % cpu_target().vector_bytes != 0)
    for name in names:
        lanes = int(name.rsplit("first", 1)[1])
        shuffled = _helper(source, name).split("#else")[0]
        copied = [int(n) for n in re.findall(r"__builtin_memcpy\(p \+ \d+, &part\d+, (\d+)\)", shuffled)]
        scalars = re.findall(r"p\[(\d+)\] = v\[\1\];", shuffled)
        # every lane stored once, in vectors of power-of-two lanes, none past the row
        assert sum(copied) + len(scalars) * itemsize == lanes * itemsize, name
        assert all(count // itemsize & (count // itemsize - 1) == 0 for count in copied), name
        assert len(copied) + len(scalars) == bin(lanes).count("1"), name


def test_the_conditions_a_mostly_on_gate_stores_a_whole_vector_behind():
    from uopviz.backends.cfamily_state import lanes_that_may_be_off
    from uopviz.core.dtype import dtypes
    from uopviz.core.ops import AxisType, Ops
    from uopviz.core.uop import UOp

    on, off = UOp.const(dtypes.bool, True), UOp.const(dtypes.bool, False)
    tile = UOp.range(7, AxisType.LOOP, 0)
    last, other = tile < 6, tile < 5

    def gate(*lanes):
        return UOp(Ops.VECTORIZE, tuple(lanes))

    assert lanes_that_may_be_off(gate(on, on, on, last)) == [last]
    assert lanes_that_may_be_off(gate(on, last, last, last)) == [last]
    assert lanes_that_may_be_off(gate(on, on, on, on)) == []
    assert lanes_that_may_be_off(gate(on, last, other, on)) == [last, other]
    assert lanes_that_may_be_off(gate(on, on, on, off)) is None  # a lane off for good: a prefix
    assert lanes_that_may_be_off(gate(last, other, tile < 4, on)) is None  # too many conditions


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("width,register", [(111, 16), (55, 8), (27, 16), (13, 8)])
def test_a_row_tile_past_the_rows_end_stores_whole_vectors_where_every_lane_is_on(dtype, width, register):
    # a row padded to whole registers (PADTO) and split into them: the last register's lanes past
    # the row are off in the last tile only (``{1, .., 1, tile < 6}``): every other tile stores its
    # vector whole, the last one lane by lane (a conv's rows of 111 columns as 7 tiles of 16)
    x = (RNG.standard_normal((5, width)) * 100).astype(dtype)
    padded = -(-width // register) * register
    upcast = (register, uv.AxisType.UPCAST, False)
    opts = [uv.Opt(uv.OptOp.PADTO, 1, padded), uv.Opt(uv.OptOp.SPLIT, 1, upcast)]
    program = uv.compile([uv.Tensor(x) * 3 + 1], backend="c", opts=[opts])
    np.testing.assert_allclose(program.run()[0], x * 3 + 1, rtol=1e-5)
    source = program.kernels[0].source("c")
    whole = re.search(r"if \((\w+)\) \{ store_\w+\(data0 \+ [^;]+; \} else \{\n(.*?)\n *\}", source, re.S)
    assert whole is not None, source
    lanes = re.findall(r"if \(\w+\[(\d+)\]\) data0\[", whole.group(2))
    assert len(lanes) == min(register, cpu_target().vector_bytes // np.dtype(dtype).itemsize)
