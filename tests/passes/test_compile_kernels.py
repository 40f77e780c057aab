"""``compile_kernels``: kernel ASTs written by a front end (not Tensors) compiled into a Program.

The kernels here are written by hand in the kernel-AST form of ``docs/design/kernel-ir.md``: an
element-wise kernel, a reduction that reads its result and a kernel that updates a buffer it also
reads; the programs run on every available CPU backend against numpy on random inputs.
"""

from __future__ import annotations

import numpy as np
import pytest

from uopviz import Ops, UOp, dtypes
from uopviz.backends import available
from uopviz.core.dtype import AddrSpace
from uopviz.core.ops import AxisType
from uopviz.core.rewrite import traced_pass
from uopviz.engine.program import compile_kernels
from uopviz.passes.pipeline import STAGES

BACKENDS = [name for name in ("python", "c") if name in available()]


def _param(slot: int, size: int) -> UOp:
    return UOp.param(slot, (size,), dtypes.float32, "CPU", AddrSpace.GLOBAL)


def _load(param: UOp, index: UOp) -> UOp:
    return UOp(Ops.LOAD, (UOp(Ops.INDEX, (param, index)),))


def _store(param: UOp, index: UOp, value: UOp) -> UOp:
    return UOp(Ops.SINK, (UOp(Ops.STORE, (UOp(Ops.INDEX, (param, index)), value)),))


def _kernels(n: int):
    """y = 2 x + b; s = sum(y); y = y - s (in place): the three kernels and their buffers."""
    x, b, y, s = (UOp.buffer(size, dtypes.float32, "CPU") for size in (n, n, n, 1))
    i = UOp.range(n, AxisType.LOOP, 0)
    scale = _store(_param(0, n), i, _load(_param(1, n), i) * 2.0 + _load(_param(2, n), i))
    r = UOp.range(n, AxisType.REDUCE, 0)
    zero = UOp.const(dtypes.index, 0)
    total = UOp(Ops.REDUCE, (_load(_param(1, n), r), r), (Ops.ADD, ()))
    reduce = _store(_param(0, 1), zero, total)
    shift = _store(_param(0, n), i, _load(_param(0, n), i) - _load(_param(1, 1), zero))
    kernels = [("scale", scale, [y, x, b]), ("sum", reduce, [s, y]), ("shift", shift, [y, s])]
    return kernels, x, b, y, s


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n", [1, 7, 64])
def test_hand_written_kernels_compile_and_run_like_numpy(backend: str, n: int) -> None:
    rng = np.random.default_rng(n)
    kernels, x, b, y, s = _kernels(n)
    program = compile_kernels(kernels, [x, b], [y, s], backend=backend)
    assert [kernel.name_hint for kernel in program.kernels] == ["scale", "sum", "shift"]
    xs, bs = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out_y, out_s = program.run({0: xs, 1: bs})
    first = 2 * xs + bs
    np.testing.assert_allclose(out_s, [first.sum()], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out_y, first - first.sum(), rtol=1e-5, atol=1e-5)


def test_the_stages_are_traced_after_the_front_ends_own_passes() -> None:
    kernels, x, b, y, s = _kernels(5)
    seen = []

    def front_end(program) -> None:
        seen.append(len(program.items))
        with traced_pass("My front end", program.graph) as record:
            record.output = program.graph

    program = compile_kernels(kernels, [x, b], [y], front_end=front_end)
    assert seen == [3]
    names = [stage.name for stage in program.trace.passes]
    assert names == ["My front end", *STAGES[2:]]
    assert program.graph.op is Ops.FUNCTION


def test_opts_apply_to_the_named_kernels() -> None:
    from uopviz.passes.optops.opts import Opt, OptOp

    kernels, x, b, y, s = _kernels(16)
    upcast = Opt(OptOp.SPLIT, 0, (4, AxisType.UPCAST, False))
    program = compile_kernels(kernels, [x, b], [y], opts={"scale": [upcast]})
    assert program.kernels[0].opts and not program.kernels[2].opts
    xs, bs = np.arange(16, dtype=np.float32), np.ones(16, np.float32)
    (out,) = program.run({0: xs, 1: bs})
    np.testing.assert_allclose(out, 2 * xs + 1 - (2 * xs + 1).sum())


def test_an_output_no_kernel_writes_is_refused() -> None:
    kernels, x, b, y, s = _kernels(3)
    stray = UOp.buffer(3, dtypes.float32, "CPU")
    with pytest.raises(ValueError, match="no kernel writes the output"):
        compile_kernels(kernels, [x, b], [stray])
