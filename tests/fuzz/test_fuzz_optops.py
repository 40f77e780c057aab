"""Fuzzing OptOp arguments (issue 11): ``Opt(op, axis, arg)`` with fields of any type and value,
applied to kernels of several shapes on every available CPU backend. Only OptError may escape making
or applying an opt, and an accepted opt sequence always renders and compiles on the kernel's
backend (and computes what the kernel computed before)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import uopviz as uv
from uopviz import AxisType, Opt, OptError, OptOp
from uopviz.backends import available
from uopviz.engine.search import candidate_opts

from .fuzzing import budget, record

CPU_BACKENDS = [name for name in ("python", "c", "llvm", "opencl") if name in available()]
_RNG = np.random.default_rng(11)
_A = _RNG.standard_normal((6, 10)).astype(np.float32)
_B = _RNG.standard_normal((10, 4)).astype(np.float32)
_H = _RNG.standard_normal((16, 32)).astype(np.float16)


def _programs():
    """(name, tensor builder, reference) of the kernels the opts are applied to."""
    return [
        ("matmul", lambda: uv.Tensor(_A) @ uv.Tensor(_B), _A @ _B),
        ("sum16", lambda: uv.Tensor(_H).sum(axis=1), _H.astype(np.float32).sum(axis=1)),
        ("relu-sum", lambda: ((uv.Tensor(_A) @ uv.Tensor(_B)).relu() + 1).sum(axis=1),
         (np.maximum(_A @ _B, 0) + 1).sum(axis=1)),
        ("elementwise", lambda: (uv.Tensor(_A) * 2).exp(), np.exp(_A * 2)),
    ]


PROGRAMS = _programs()
_KERNELS: dict[tuple[int, str], uv.Kernel] = {}


def kernel_for(program: int, backend: str) -> uv.Kernel:
    key = (program, backend)
    if key not in _KERNELS:
        _KERNELS[key] = uv.compile(PROGRAMS[program][1](), backend=backend).kernels[-1]
    return _KERNELS[key]


def with_random_opts(kernel: uv.Kernel, random, count: int) -> uv.Kernel:
    """``kernel`` with up to ``count`` accepted opts, each drawn from the candidates of the last."""
    for _ in range(count):
        candidates = candidate_opts(kernel)
        if not candidates:
            break
        kernel = kernel.apply(random.choice(candidates))
    return kernel


_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 40), st.sampled_from([2**31, 2**62, -(2**63), 10**30]),
    st.floats(allow_nan=True), st.text(max_size=4), st.sampled_from(list(AxisType)),
    st.sampled_from([np.int64(2), np.float32(4.0), np.bool_(True)]),
)
_ARGS = st.one_of(
    _SCALARS,
    st.tuples(st.integers(-1, 40), st.sampled_from(list(AxisType)), st.booleans()),
    st.tuples(st.integers(-2, 3), st.integers(-1, 3), st.integers(-1, 4)),
    st.lists(_SCALARS, max_size=4).map(lambda items: tuple(items)),
    st.lists(_SCALARS, max_size=3), st.dictionaries(st.text(max_size=2), _SCALARS, max_size=2),
    st.just(np.array([4, 1, 0])),
)
_OPS = st.one_of(st.sampled_from(list(OptOp)),
                 st.sampled_from(["SPLIT", "TC", None, 0, 1.5, AxisType.UPCAST]))


@budget(default=60, slow=1500)
@given(_OPS, _SCALARS, _ARGS, st.integers(0, len(PROGRAMS) - 1), st.sampled_from(CPU_BACKENDS), st.data())
def test_any_opt_is_accepted_or_an_opt_error(op, axis, arg, program, backend, data):
    kernel = kernel_for(program, backend)
    candidates = candidate_opts(kernel)
    if candidates and data.draw(st.booleans()):  # near an opt that applies: one field changed, or none
        start = data.draw(st.sampled_from(candidates))
        field = data.draw(st.sampled_from(["op", "axis", "arg", "none"]))
        op = op if field == "op" else start.op
        axis = axis if field == "axis" else start.axis
        arg = arg if field == "arg" else start.arg
    try:
        applied = kernel.apply(Opt(op, axis, arg))
    except OptError as error:
        record("opt arguments", error)
        return
    record("opt arguments", None)
    assert applied.source(backend)  # an accepted opt renders on the kernel's backend


@budget(default=12, slow=400)
@given(st.integers(0, len(PROGRAMS) - 1), st.sampled_from(CPU_BACKENDS), st.randoms(use_true_random=False),
       st.integers(1, 4))
def test_accepted_opt_sequences_render_compile_and_compute_the_same(program, backend, random, count):
    name, build, reference = PROGRAMS[program]
    kernel = with_random_opts(kernel_for(program, backend), random, count)
    last = len(uv.compile(build(), backend=backend, build=False).kernels) - 1
    (out,) = uv.compile(build(), backend=backend, opts={last: list(kernel.opts)}).run()
    record("opt sequences", None)
    np.testing.assert_allclose(out.astype(np.float64), reference, rtol=2e-2, atol=5e-2,
                               err_msg=f"{name} on {backend} with {list(kernel.opts)}")


@pytest.mark.parametrize("shaped_for", CPU_BACKENDS)
@pytest.mark.parametrize("timed_on", CPU_BACKENDS)
@budget(default=6, slow=100)
@given(st.integers(0, len(PROGRAMS) - 1), st.randoms(use_true_random=False), st.integers(1, 4))
def test_a_kernel_shaped_for_one_backend_times_on_another_or_is_refused(shaped_for, timed_on, program,
                                                                        random, count):
    """Hand-applied opts never crash a worker: a kernel shaped for ``shaped_for`` and timed on
    ``timed_on`` (the tuner's "time on all backends") gives a timing or an OptError before any run."""
    kernel = with_random_opts(kernel_for(program, shaped_for), random, count)
    try:
        timing = kernel.time(timed_on, repeats=1)
    except OptError as error:
        record("opts timed on another backend", error)
        return
    record("opts timed on another backend", None)
    assert timing.median_s > 0
