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


def shaped_kernel(program: int, backend: str, start: str) -> uv.Kernel:
    """The kernel of ``program`` shaped for ``backend`` with no opts ("none") or by the heuristic (the
    C heuristic's THREAD axis, the tuner's starting point in the issue)."""
    key = (program, backend, start)
    if key not in _SHAPED:
        opts = "heuristic" if start == "heuristic" else None
        _SHAPED[key] = uv.compile(PROGRAMS[program][1](), backend=backend, opts=opts, build=False).kernels[-1]
    return _SHAPED[key]


_SHAPED: dict[tuple[int, str, str], uv.Kernel] = {}
#: the tuner's per-backend budget, small: the interpreter's timings may stop at it (a KernelTimeout)
TUNER_BUDGET_S = 3.0


def time_elsewhere(kernel: uv.Kernel, backend: str, budget_s: float | None) -> str:
    """Time ``kernel`` on ``backend`` as the tuner (``budget_s``: every backend in the worker) or a
    cell (None) does: "timed", or the documented refusal's name; a worker crash fails the test."""
    from uopviz.backends.worker import KernelTimeout

    try:
        timing = kernel.time(backend, repeats=1, budget_s=budget_s)
    except OptError as error:
        record("opts timed on another backend", error)
        with pytest.raises(OptError):  # refused the same way wherever it is lowered, before any code runs
            kernel.source(backend)
        return "OptError"
    except KernelTimeout as error:  # stopped at the budget: the worker was killed on purpose, not crashed
        record("opts timed on another backend", error)
        return "KernelTimeout"
    record("opts timed on another backend", None)
    assert timing.median_s > 0
    return "timed"


@pytest.mark.parametrize("shaped_for", CPU_BACKENDS)
@pytest.mark.parametrize("timed_on", CPU_BACKENDS)
@budget(default=6, slow=100)
@given(st.integers(0, len(PROGRAMS) - 1), st.sampled_from(["none", "heuristic"]),
       st.randoms(use_true_random=False), st.integers(1, 4), st.sampled_from([None, TUNER_BUDGET_S]))
def test_a_kernel_shaped_for_one_backend_times_on_another_or_is_refused(shaped_for, timed_on, program, start,
                                                                        random, count, budget_s):
    """Hand-applied opts never crash a worker: a kernel shaped for ``shaped_for`` (from no opts or the
    heuristic's) with random accepted opts, timed on ``timed_on`` as a cell or the tuner's "time on all
    backends" does, gives a timing, an OptError before any run, or the tuner's budget stop."""
    kernel = with_random_opts(shaped_kernel(program, shaped_for, start), random, count)
    outcome = time_elsewhere(kernel, timed_on, budget_s)
    assert outcome != "KernelTimeout" or budget_s is not None


@pytest.mark.parametrize("shaped_for", CPU_BACKENDS)
@pytest.mark.parametrize("run_on", CPU_BACKENDS)
@budget(default=3, slow=60)
@given(st.integers(0, len(PROGRAMS) - 1), st.sampled_from(["none", "heuristic"]),
       st.randoms(use_true_random=False), st.integers(0, 3))
def test_opts_chosen_for_one_backend_run_on_another_or_are_refused(shaped_for, run_on, program, start,
                                                                   random, count):
    """The opts of a kernel tuned for ``shaped_for``, compiled for ``run_on`` and run in the worker:
    an OptError at compile time, or the reference result; never a crashed worker."""
    name, build, reference = PROGRAMS[program]
    kernel = with_random_opts(shaped_kernel(program, shaped_for, start), random, count)
    last = len(uv.compile(build(), backend=run_on, build=False).kernels) - 1
    try:
        program_there = uv.compile(build(), backend=run_on, opts={last: list(kernel.opts)})
    except OptError as error:
        record("opts run on another backend", error)
        return
    record("opts run on another backend", None)
    (out,) = program_there.run(isolated=True)
    np.testing.assert_allclose(out.astype(np.float64), reference, rtol=2e-2, atol=5e-2,
                               err_msg=f"{name} shaped for {shaped_for} run on {run_on}: {list(kernel.opts)}")


@pytest.mark.parametrize("shaped_for", [b for b in ("c", "llvm") if b in CPU_BACKENDS])
@pytest.mark.parametrize("timed_on", CPU_BACKENDS)
def test_the_issues_heuristic_512_matmul_times_everywhere_or_is_refused(shaped_for, timed_on):
    """The issue's SIGSEGV: ``uv.compile(a @ b, backend="c", opts="heuristic")``'s 512 matmul kernel
    (a THREAD axis) timed on OpenCL is refused by name before the worker; on its own kind of backend
    it is timed, and the interpreter is stopped at the tuner's budget."""
    a, b = (uv.Tensor(_RNG.standard_normal((512, 512)).astype(np.float32)) for _ in range(2))
    kernel = uv.compile(a @ b, backend=shaped_for, opts="heuristic", build=False).kernels[0]
    assert kernel.axes[0][1] is AxisType.THREAD, kernel.name
    expected = {"opencl": "OptError", "python": "KernelTimeout"}.get(timed_on, "timed")
    if timed_on == "opencl":
        with pytest.raises(OptError, match="axis 0 is THREAD, and the opencl backend has no threads"):
            kernel.time(timed_on)
    assert time_elsewhere(kernel, timed_on, TUNER_BUDGET_S) == expected
