"""The heuristic's loop order for a reduction over strided rows (heuristic._order_for_staging): a
long one (gemm's K of 512) puts the N tiles outside the M tiles so a copied strip of B serves
every tile of A; a short one whose operands fit in L2 (a 1x1 convolution of 64 channels, as a
matmul of the weights by the image) keeps M outside, each output row written in long runs and
nothing staged.  Values against numpy on random inputs, on C and LLVM, AVX-512 and AVX2."""

from __future__ import annotations

import numpy as np
import pytest
from cpu_targets import target_params

import uopviz as uv
from uopviz.backends.target import using_target
from uopviz.passes.optops.heuristic import IN_ORDER_MAX_OPERAND_BYTES, STAGE_MIN_REDUCTION
from uopviz.passes.optops.opts import OptOp

RNG = np.random.default_rng(26)
CPU_BACKENDS = [b for b in ("c", "llvm") if b in uv.backends.available()]


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@pytest.mark.parametrize("target", target_params("x86-64-v4", "x86-64-v3"))
@pytest.mark.parametrize(
    "m,k,n,in_order",
    # two cases in the emulated CPUs' runs (qemu takes ~10 s a case); all of them in `make test`
    [(128, 64, 1024, True), (256, 1024, 512, False),
     *(pytest.param(*case, marks=pytest.mark.slow) for case in
       [(256, 64, 3136, True), (512, 128, 784, True), (256, 512, 3136, False)])],
)  # fmt: skip
def test_a_short_reduction_keeps_its_output_loops_in_order(backend, target, m, k, n, in_order):
    assert (k < STAGE_MIN_REDUCTION and 4 * k * (m + n) <= IN_ORDER_MAX_OPERAND_BYTES) == in_order
    a = RNG.standard_normal((m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    with using_target(target):
        program = uv.compile([uv.Tensor(a) @ uv.Tensor(b)], backend=backend, opts="heuristic")
        (result,) = program.run()
    np.testing.assert_allclose(result, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-3)
    (kernel,) = program.kernels
    swapped = any(opt.op is OptOp.SWAP for opt in kernel.opts)
    assert swapped != in_order, kernel.opts
    if in_order:
        assert "acc0[" not in kernel.source("c")  # nothing staged: the rows are read where they are
