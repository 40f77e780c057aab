"""Generated-program sweep (issue 11): random Tensor programs over every op family and every dtype
the backends declare, on shapes with 0, 1, odd and prime extents, with broadcasting, movement chains,
reductions over any axes, matmul and conv shapes and edge values (±0, ±inf, NaN, denormals, integer
limits); each compiled with opts None, "heuristic" and a random valid opt sequence, run on every
available CPU backend and compared with numpy and with the python backend (dtype-aware tolerances);
then shown without a browser (report, explorer, player frames, tuner state).

Budgets: a handful of programs by default (each is compiled twelve times: four backends, three
kinds of opts); ``HYPOTHESIS_PROFILE=slow`` runs 500 programs, each on
every CPU backend with the three kinds of opts. Compiled backends run isolated (a crash is a
KernelCrashed failure here, not a dead test run).
"""

from __future__ import annotations

import math
import random

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import uopviz as uv
from uopviz import dtypes
from uopviz.backends import available, get
from uopviz.engine.search import candidate_opts

from .fuzzing import OUTCOMES, SLOW, budget, record

CPU_BACKENDS = [name for name in ("python", "c", "llvm", "opencl") if name in available()]
DTYPES = [dtypes.bool, dtypes.int8, dtypes.int16, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint16,
          dtypes.uint32, dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]
EXTENTS = [0, 1, 1, 2, 3, 4, 5, 7, 8, 13, 31, 127]
MAX_ELEMENTS = 4096


def is_float(dtype) -> bool:
    return dtype.is_float


def numpy_of(dtype) -> np.dtype:
    """numpy's type for data of ``dtype`` (bfloat16 data is given as float32, rounded to bf16)."""
    return np.dtype(np.float32) if dtype is dtypes.bfloat16 else np.dtype(dtype.numpy_name)


def round_bfloat16(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), as float32."""
    bits = np.asarray(values, np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    nan = np.isnan(values)
    out = rounded.astype(np.uint32).view(np.float32)
    return np.where(nan, np.float32("nan"), out)


# ------------------------------------------------------------------------------------------------
# data


@st.composite
def shapes(draw: st.DrawFn, min_rank: int = 0, max_rank: int = 3) -> tuple[int, ...]:
    rank = draw(st.integers(min_rank, max_rank))
    shape = tuple(draw(st.sampled_from(EXTENTS)) for _ in range(rank))
    while math.prod(shape) > MAX_ELEMENTS:
        shape = shape[1:]
    return shape


def edge_values(dtype) -> list:
    if dtype is dtypes.bool:
        return [False, True]
    if dtype.is_float:
        tiny = {dtypes.float16: 6e-8, dtypes.bfloat16: 1e-39, dtypes.float32: 1e-45,
                dtypes.float64: 5e-324}[dtype]  # the smallest denormal of each
        return [0.0, -0.0, math.inf, -math.inf, math.nan, tiny, -tiny, 1.0, -1.0, 0.5]
    info = np.iinfo(numpy_of(dtype))
    return [int(info.min), int(info.max), 0, 1, -1 if info.min < 0 else 2]


@st.composite
def arrays(draw: st.DrawFn, dtype, shape: tuple[int, ...], edges: bool = True, positive: bool = False,
           nonzero: bool = False) -> np.ndarray:
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    size = math.prod(shape)
    if dtype is dtypes.bool:
        data = rng.integers(0, 2, size).astype(np.bool_)
    elif dtype.is_float:
        data = rng.standard_normal(size) * 3
        if positive:
            data = np.abs(data) + 0.1
    else:
        info = np.iinfo(numpy_of(dtype))
        low, high = (1 if positive else max(int(info.min), -20)), min(int(info.max), 20)
        data = rng.integers(low, high + 1, size)
        if nonzero:
            data[data == 0] = 1
    data = data.astype(numpy_of(dtype))
    if edges and size and draw(st.booleans()):
        candidates = [v for v in edge_values(dtype) if not (nonzero and v == 0) and not (positive and v <= 0)]
        for _ in range(draw(st.integers(1, 3))):
            data[rng.integers(0, size)] = candidates[rng.integers(0, len(candidates))]
    if dtype is dtypes.bfloat16:
        data = round_bfloat16(data)
    return data.reshape(shape)


# ------------------------------------------------------------------------------------------------
# programs: (description, build() -> Tensor, reference() -> numpy array or None, tolerance kind)


class Case:
    """One generated program: how to build it, numpy's answer (None where numpy has no
    comparable answer) and the result dtype for tolerances."""

    def __init__(self, text: str, build, reference, dtype, exact: bool = False, uses: tuple = ()):
        self.text, self.build, self.reference, self.dtype, self.exact = text, build, reference, dtype, exact
        self.uses = (dtype, *uses)  # every dtype the program holds values of

    def __repr__(self) -> str:
        return self.text


def tensor(data: np.ndarray, dtype) -> uv.Tensor:
    return uv.Tensor(data, dtype=dtype)


UNARY_FLOAT = {
    "neg": (lambda t: -t, np.negative), "exp": (lambda t: t.exp(), np.exp),
    "log": (lambda t: t.log(), np.log), "sqrt": (lambda t: t.sqrt(), np.sqrt),
    "relu": (lambda t: t.relu(), lambda a: np.maximum(a, 0)), "abs": (lambda t: t.abs(), np.abs),
    "sin": (lambda t: t.sin(), np.sin), "exp2": (lambda t: t.exp2(), np.exp2),
    "reciprocal": (lambda t: t.reciprocal(), np.reciprocal), "square": (lambda t: t.square(), np.square),
}
UNARY_INT = {"neg": (lambda t: -t, np.negative), "abs": (lambda t: t.abs(), np.abs),
             "square": (lambda t: t * t, lambda a: a * a)}
BINARY = {"add": (lambda a, b: a + b, np.add), "sub": (lambda a, b: a - b, np.subtract),
          "mul": (lambda a, b: a * b, np.multiply), "max": (lambda a, b: a.maximum(b), np.maximum),
          "lt": (lambda a, b: a < b, np.less), "eq": (lambda a, b: a == b, np.equal)}


@st.composite
def unary_cases(draw: st.DrawFn) -> Case:
    dtype = draw(st.sampled_from([d for d in DTYPES if d is not dtypes.bool]))
    shape = draw(shapes())
    table = UNARY_FLOAT if dtype.is_float else UNARY_INT
    name = draw(st.sampled_from(sorted(table)))
    if name == "sin":  # huge arguments belong to the numerics work (argument reduction), not this sweep
        data = np.clip(draw(arrays(dtype, shape, edges=False)), -100, 100).astype(numpy_of(dtype))
    else:
        data = draw(arrays(dtype, shape, edges=name not in ("neg", "abs") or dtype.is_float))
    build, ref = table[name]
    return Case(f"{name}({dtype.name}{list(shape)})", lambda: build(tensor(data, dtype)),
                lambda: ref(data.astype(np.float64) if dtype.is_float else data), dtype, not dtype.is_float)


@st.composite
def binary_cases(draw: st.DrawFn) -> Case:
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(shapes(1))
    other = tuple(1 if draw(st.booleans()) else extent for extent in shape)  # broadcasting
    name = draw(st.sampled_from(sorted(BINARY) if dtype is not dtypes.bool else ["lt", "eq", "max"]))
    a, b = draw(arrays(dtype, shape)), draw(arrays(dtype, other))
    if draw(st.booleans()):
        a, b = b, a
    build, ref = BINARY[name]
    result = dtypes.bool if name in ("lt", "eq") else dtype

    def reference():
        if dtype.is_float:
            return ref(a.astype(np.float64), b.astype(np.float64))
        return ref(a, b)

    return Case(f"{name}({dtype.name}{list(a.shape)}, {list(b.shape)})",
                lambda: build(tensor(a, dtype), tensor(b, dtype)), reference, result, not result.is_float)


@st.composite
def integer_division_cases(draw: st.DrawFn) -> Case:
    dtype = draw(st.sampled_from([d for d in DTYPES if d.is_int]))
    shape = draw(shapes(1))
    a = draw(arrays(dtype, shape, edges=False))
    b = draw(arrays(dtype, shape, edges=False, nonzero=True))
    name = draw(st.sampled_from(["floordiv", "mod"]))
    build = (lambda x, y: x // y) if name == "floordiv" else (lambda x, y: x % y)
    ref = np.floor_divide if name == "floordiv" else np.mod
    return Case(f"{name}({dtype.name}{list(shape)})", lambda: build(tensor(a, dtype), tensor(b, dtype)),
                lambda: ref(a, b), dtype, True)


@st.composite
def movement_cases(draw: st.DrawFn) -> Case:
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(shapes(1))
    data = draw(arrays(dtype, shape))
    steps = []
    current = shape
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["permute", "flip", "pad", "shrink", "reshape", "expand"]))
        rank = len(current)
        if kind == "permute" and rank:
            order = tuple(draw(st.permutations(range(rank))))
            steps.append((kind, order))
            current = tuple(current[i] for i in order)
        elif kind == "flip" and rank:
            axis = draw(st.integers(0, rank - 1))
            steps.append((kind, axis))
        elif kind == "pad" and rank and math.prod(current) * 4 <= MAX_ELEMENTS:
            pads = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in current)
            steps.append((kind, pads))
            current = tuple(e + p + q for e, (p, q) in zip(current, pads))
        elif kind == "shrink" and rank:
            bounds = []
            for extent in current:
                start = draw(st.integers(0, extent))
                bounds.append((start, draw(st.integers(start, extent))))
            steps.append((kind, tuple(bounds)))
            current = tuple(stop - start for start, stop in bounds)
        elif kind == "reshape":
            size = math.prod(current)
            steps.append((kind, (size,)))
            current = (size,)
        elif kind == "expand" and rank and 1 in current and math.prod(current) * 3 <= MAX_ELEMENTS:
            target = tuple(3 if e == 1 else e for e in current)
            steps.append((kind, target))
            current = target

    def apply(value, numpy: bool):
        for kind, argument in steps:
            if kind == "permute":
                value = np.transpose(value, argument) if numpy else value.permute(*argument)
            elif kind == "flip":
                value = np.flip(value, argument) if numpy else value.flip(argument)
            elif kind == "pad":
                value = np.pad(value, argument) if numpy else value.pad(argument)
            elif kind == "shrink":
                value = value[tuple(slice(a, b) for a, b in argument)] if numpy else value.shrink(argument)
            elif kind == "reshape":
                value = value.reshape(argument)
            else:
                value = np.broadcast_to(value, argument) if numpy else value.expand(*argument)
        return value

    return Case(f"movement({dtype.name}{list(shape)}, {steps})", lambda: apply(tensor(data, dtype), False) + 0
                if dtype is not dtypes.bool else apply(tensor(data, dtype), False).logical_not(),
                lambda: (apply(data, True) + 0) if dtype is not dtypes.bool else ~apply(data, True),
                dtype, True)


@st.composite
def reduce_cases(draw: st.DrawFn) -> Case:
    dtype = draw(st.sampled_from([d for d in DTYPES if d is not dtypes.bool]))
    shape = draw(shapes(1))
    data = draw(arrays(dtype, shape, edges=dtype.is_float))
    axes = tuple(sorted(draw(st.sets(st.integers(0, len(shape) - 1), min_size=1))))
    keepdim = draw(st.booleans())
    wide = dtype.is_float or np.iinfo(numpy_of(dtype)).bits >= 32
    name = draw(st.sampled_from(["sum", "max", "min"] if wide else ["max", "min"]))
    empty = any(shape[a] == 0 for a in axes)
    if empty and name != "sum":
        name = "sum"
    axis = axes if len(axes) > 1 else axes[0]
    build = getattr(uv.Tensor, name)
    ref = {"sum": np.sum, "max": np.max, "min": np.min}[name]

    def reference():
        values = data.astype(np.float64) if dtype.is_float else data
        out = ref(values, axis=axes, keepdims=keepdim)
        return out.astype(data.dtype) if not dtype.is_float and name == "sum" else out

    return Case(f"{name}({dtype.name}{list(shape)}, axis={axis}, keepdim={keepdim})",
                lambda: build(tensor(data, dtype), axis=axis, keepdim=keepdim), reference, dtype,
                not dtype.is_float)


@st.composite
def matmul_cases(draw: st.DrawFn) -> Case:
    dtype = draw(st.sampled_from([dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64,
                                  dtypes.int32, dtypes.int64]))
    m, k, n = (draw(st.sampled_from([1, 2, 3, 5, 8, 13, 16, 31])) for _ in range(3))
    a, b = draw(arrays(dtype, (m, k), edges=False)), draw(arrays(dtype, (k, n), edges=False))
    relu = draw(st.booleans())

    def build():
        out = tensor(a, dtype) @ tensor(b, dtype)
        return (out.relu() + 1).sum(axis=1) if relu else out

    def reference():
        out = a.astype(np.float64) @ b.astype(np.float64) if dtype.is_float else a @ b
        return (np.maximum(out, 0) + 1).sum(axis=1) if relu else out

    return Case(f"matmul({dtype.name}[{m},{k}]@[{k},{n}], relu_sum={relu})", build, reference, dtype,
                not dtype.is_float)


@st.composite
def conv_cases(draw: st.DrawFn) -> Case:
    dtype = draw(st.sampled_from([dtypes.float32, dtypes.float16]))
    batch, cin, cout = draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    height, width = draw(st.integers(3, 9)), draw(st.integers(3, 9))
    kernel = draw(st.integers(1, 3))
    x = draw(arrays(dtype, (batch, cin, height, width), edges=False))
    w = draw(arrays(dtype, (cout, cin, kernel, kernel), edges=False))

    def reference():
        xs, ws = x.astype(np.float64), w.astype(np.float64)
        out = np.zeros((batch, cout, height - kernel + 1, width - kernel + 1))
        for i in range(kernel):
            for j in range(kernel):
                window = xs[:, :, i:i + out.shape[2], j:j + out.shape[3]]
                out += np.einsum("bchw,oc->bohw", window, ws[:, :, i, j])
        return out

    return Case(f"conv2d({dtype.name}{list(x.shape)}, {list(w.shape)})",
                lambda: tensor(x, dtype).conv2d(tensor(w, dtype)), reference, dtype)


@st.composite
def cast_cases(draw: st.DrawFn) -> Case:
    source, target = draw(st.sampled_from(DTYPES)), draw(st.sampled_from(DTYPES))
    shape = draw(shapes())
    data = draw(arrays(source, shape, edges=False))
    if source.is_float and not target.is_float and target is not dtypes.bool:
        data = np.clip(np.trunc(data), 0, 100).astype(data.dtype)  # in range of every integer type

    def reference():
        if target is dtypes.bfloat16:
            return round_bfloat16(data.astype(np.float32))
        return data.astype(numpy_of(target))

    return Case(f"cast({source.name}{list(shape)} -> {target.name})",
                lambda: tensor(data, source).cast(target), reference, target, not target.is_float, (source,))


@st.composite
def where_cases(draw: st.DrawFn) -> Case:
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(shapes(1))
    condition = draw(arrays(dtypes.bool, shape))
    a, b = draw(arrays(dtype, shape)), draw(arrays(dtype, shape))
    return Case(f"where({dtype.name}{list(shape)})",
                lambda: tensor(condition, dtypes.bool).where(tensor(a, dtype), tensor(b, dtype)),
                lambda: np.where(condition, a, b), dtype, True)


@st.composite
def cumsum_cases(draw: st.DrawFn) -> Case:
    dtype = draw(st.sampled_from([dtypes.float32, dtypes.float64, dtypes.int32, dtypes.int64]))
    shape = draw(shapes(1, 2))
    data = draw(arrays(dtype, shape, edges=False))
    axis = draw(st.integers(0, len(shape) - 1))
    return Case(f"cumsum({dtype.name}{list(shape)}, axis={axis})", lambda: tensor(data, dtype).cumsum(axis),
                lambda: np.cumsum(data.astype(np.float64) if dtype.is_float else data, axis=axis), dtype,
                not dtype.is_float)


PROGRAMS = st.one_of(unary_cases(), binary_cases(), integer_division_cases(), movement_cases(),
                     reduce_cases(), matmul_cases(), conv_cases(), cast_cases(), where_cases(),
                     cumsum_cases())


# ------------------------------------------------------------------------------------------------
# comparing


def tolerance(case: Case) -> tuple[float, float]:
    """(rtol, atol) for comparing a result of ``case.dtype`` with a float64 reference."""
    dtype = case.dtype
    if case.exact or not dtype.is_float:
        return 0.0, 0.0
    return {dtypes.float16: (2e-2, 2e-2), dtypes.bfloat16: (5e-2, 5e-2), dtypes.float32: (2e-4, 1e-4),
            dtypes.float64: (1e-9, 1e-9)}[dtype]


def assert_close(got: np.ndarray, want: np.ndarray, case: Case, what: str) -> None:
    want = np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape} ({case})"
    rtol, atol = tolerance(case)
    if rtol == 0 and atol == 0 and not case.dtype.is_float:
        np.testing.assert_array_equal(got, want.astype(got.dtype), err_msg=f"{what}: {case}")
        return
    scale = np.where(np.isfinite(want), np.abs(want), 0)
    # a long sum carries the rounding of every term: scale the tolerance by the terms' count
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol,
                               atol=atol * max(1.0, float(np.max(scale, initial=1.0)) ** 0.5),
                               equal_nan=True, err_msg=f"{what}: {case}")


def random_opts(program: uv.Program, seed: int) -> dict[int, list]:
    """A random valid opt sequence (1..3 opts) for every kernel of ``program``."""
    chooser = random.Random(seed)
    chosen = {}
    for index, kernel in enumerate(program.kernels):
        for _ in range(chooser.randint(1, 3)):
            candidates = candidate_opts(kernel)
            if not candidates:
                break
            kernel = kernel.apply(chooser.choice(candidates))
        chosen[index] = list(kernel.opts)
    return chosen


def run_on(case: Case, backend: str, opts) -> np.ndarray:
    program = uv.compile(case.build(), backend=backend, opts=opts)
    (out,) = program.run(isolated=backend != "python")
    return out


def sweep(case: Case, backends: list[str]) -> None:
    reference = case.reference()
    baseline = run_on(case, "python", None)
    assert_close(baseline, reference, case, "python backend vs numpy")
    for backend in backends:
        if not all(get(backend).supports_dtype(dtype) for dtype in case.uses):
            OUTCOMES[f"sweep {backend}"]["dtype not declared"] += 1  # float64 without cl_khr_fp64, ...
            continue
        plain = uv.compile(case.build(), backend=backend)
        for opts in (None, "heuristic", random_opts(plain, hash(case.text) & 0xFFFF)):
            got = run_on(case, backend, opts)
            assert_close(got, reference, case, f"{backend} opts={opts} vs numpy")
            record(f"sweep {backend}", None)


# ------------------------------------------------------------------------------------------------
# the tests


@budget(default=6, slow=500)
@given(PROGRAMS)
def test_generated_programs_match_numpy_on_every_cpu_backend(case):
    sweep(case, CPU_BACKENDS)


SHOWN = st.one_of(matmul_cases(), reduce_cases(), unary_cases(), movement_cases())


@budget(default=1, slow=40)
@given(SHOWN)
def test_generated_programs_are_shown_without_a_browser(case):
    from uopviz.report import build_report
    from uopviz.widgets.embed import player_state
    from uopviz.widgets.tuner import TunerState

    value = case.build()
    backends = [b for b in CPU_BACKENDS if b != "opencl"] if not SLOW else CPU_BACKENDS
    html = build_report([("program", value)], backends=backends, opts="heuristic", time_kernels=True)
    assert "<html" in html.lower()
    explorer = uv.explore(value)
    assert explorer.titles[:2] == ("Graph", "Pipeline")
    program = uv.compile(value, backend="c" if "c" in CPU_BACKENDS else "python", opts="heuristic")
    state, _notes = player_state(program.trace)
    assert state["passes"]
    for kernel in program.kernels:
        tuner = TunerState(kernel)
        candidates = candidate_opts(kernel)
        if candidates:
            assert tuner.apply(candidates[0]) and not tuner.error
        shown = tuner.source(program.backend)
        assert shown.source and not shown.error
    record("shown", None)
