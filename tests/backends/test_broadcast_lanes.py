"""A vector LOAD whose every use broadcasts one of its lanes (a 1x1 conv's row of input columns, each
column broadcast against a vector of output channels) is written by the C renderer as one scalar
read per broadcast lane where the broadcast is, never as a vector load and lane extracts: GCC reads
such a lane as its FMA's broadcast memory operand (AVX-512's ``{1to16}``), where from a loaded
vector it moved the first lanes through a general register (``vmovd``, ``vbroadcastss``: port 5,
beside the FMAs).  Values are numpy's on
every x86-64 level, in float32 and float64."""

from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest
from cpu_targets import target_params

import uopviz as uv
from uopviz.backends import get
from uopviz.backends.target import using_target
from uopviz.backends.toolchain import find_c_compiler

RNG = np.random.default_rng(23)

pytestmark = pytest.mark.skipif(
    "c" not in uv.backends.available(),
    reason="no C compiler here: the scalar broadcast reads are the C backend's")

#: a lane of a vector variable broadcast to a vector literal: ``{val3[1], val3[1], ...}``
LANE_EXTRACT = re.compile(r"\{(\w+)\[(\d+)\], \1\[\2\]")
#: a scalar read from an argument array, then broadcast: ``float val4 = data1[alu20 + 1];``
SCALAR_READ = re.compile(r"(?:float|double) (val\d+) = data\d+\[[^\]]+\];\n\s*\w+ gep\d+ = \(\(\w+\)\{\1, \1")


def _conv_1x1(in_channels: int, out_channels: int, size: int, dtype) -> tuple[uv.Program, np.ndarray]:
    x = RNG.standard_normal((1, in_channels, size, size)).astype(dtype)
    w = RNG.standard_normal((out_channels, in_channels, 1, 1)).astype(dtype)
    program = uv.compile([uv.Tensor(x).conv2d(uv.Tensor(w))], backend="c", opts="heuristic")
    expected = np.einsum("ok,khw->ohw", w[:, :, 0, 0].astype(np.float64), x[0].astype(np.float64))[None]
    return program, expected


@pytest.mark.parametrize("target", target_params("x86-64-v4", "x86-64-v3", "x86-64-v2"))
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("in_channels, out_channels, size, lanes_loaded", [
    (24, 144, 56, True),  # the heuristic's tile loads a vector of columns or of weights: broadcast
    (16, 32, 14, False),  # each step's one column is a scalar read already
    (5, 48, 9, False),
])
def test_a_1x1_convs_columns_are_broadcast_from_memory(target, dtype, in_channels, out_channels, size,
                                                       lanes_loaded):
    with using_target(target):
        program, expected = _conv_1x1(in_channels, out_channels, size, dtype)
        (result,) = program.run()
        sources = [item.source for item in program.items]
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(result, expected, rtol=tolerance, atol=tolerance * in_channels)
    assert not any(LANE_EXTRACT.search(source) for source in sources)
    if lanes_loaded:
        assert any(SCALAR_READ.search(source) for source in sources), "the tile broadcasts scalar reads"


@pytest.mark.parametrize("target", target_params("x86-64-v4"))
def test_gcc_takes_every_broadcast_column_as_an_fma_operand(target):
    compiler = find_c_compiler()
    if compiler is None or "gcc" not in compiler:
        pytest.skip(f"the C compiler here is {compiler!r}: the check reads GCC's code")
    with using_target(target):
        program, _ = _conv_1x1(24, 144, 56, np.float32)
        backend = get("c")
        (source,) = {item.source for item in program.items if "gep" in item.source}
        assembly = subprocess.run([compiler, *backend.flags(), "-S", "-x", "c", "-", "-o", "-"], input=source,
                                  capture_output=True, text=True, check=True).stdout
    broadcast_fmas = re.findall(r"vfmadd\w+ps\s+-?\d*\([^)]*\)\{1to16\}", assembly)
    assert len(broadcast_fmas) >= 8, "each of the tile's 8 columns is an FMA's broadcast operand"
    assert not re.search(r"vbroadcastss\s+%xmm", assembly), "no column is broadcast from a register"

