"""The Python reference interpreter: the hand-made linear programs against numpy, its integer
semantics, lifted loops, faults, and agreement with the compiled backends on whole programs."""

from __future__ import annotations

import numpy as np
import pytest

import uopviz as uv
from uopviz import AxisType, Ops, Tensor, UOp, dtypes
from uopviz.backends import available, get
from uopviz.backends.base import KernelMeta, RenderError
from uopviz.backends.python import KernelFault
from uopviz.backends.python_loops import carried_ranges

from . import linear_programs as lp

CPU_CASES = [case for case in lp.correctness_cases() if not case.tags & {"gpu", "local", "crash"}]


@pytest.mark.parametrize("case", CPU_CASES, ids=repr)
def test_linear_program_matches_numpy(case: lp.LinearCase) -> None:
    for seed in (0, 1):
        lp.assert_case_matches("python", case, seed)


@pytest.mark.parametrize("case", lp.integer_cases(), ids=repr)
def test_integer_semantics(case: lp.LinearCase) -> None:
    lp.assert_case_matches("python", case)


@pytest.mark.parametrize("case", lp.gpu_cases(), ids=repr)
def test_gpu_programs_run_with_workgroups_in_lockstep(case: lp.LinearCase) -> None:
    """SPECIAL indices are lifted loops, a LOCAL buffer is shared by the threads of a workgroup, and a
    BARRIER holds trivially because all threads run each instruction together."""
    for seed in (0, 1):
        lp.assert_case_matches("python", case, seed)


def test_declares_every_op_native_but_exp_and_log_and_emulated_tensor_cores() -> None:
    backend = get("python")
    assert backend.available()
    from uopviz.core.ops import GroupOp, Ops

    # EXP and LOG are written out by Instruction Selection on every backend, the interpreter included
    assert backend.supported_ops == frozenset(GroupOp.ELEMENTWISE) - {Ops.EXP, Ops.LOG}
    assert backend.tensor_cores and all(tc.threads == 1 for tc in backend.tensor_cores)
    assert backend.has_threads and not backend.has_local


def test_source_is_python_with_the_meta_line() -> None:
    source = get("python").render(lp.elementwise(8).linear)
    meta = KernelMeta.from_source(source)
    assert meta.name == "E_8" and meta.params[0].written and not meta.params[1].written
    compile(source, "<test>", "exec")  # it is Python
    assert "lifted_range" in source and "for " not in source, "independent loops are lifted, not Python loops"


def test_reduce_loops_run_in_python_and_output_loops_are_lifted() -> None:
    case = lp.reduction(4, 6)
    carried = carried_ranges(case.linear.src)
    assert [r.arg[1] for r in carried] == [AxisType.REDUCE]
    source = get("python").render(case.linear)
    assert source.count("for ") == 1


def _out_of_bounds_program() -> UOp:
    b = lp.Builder()
    out, a = b.param(0, 4), b.param(1, 4)
    i = b.loop(4)
    value = b.load(a, i + lp.idx(1))
    b.end(i, b.store(out, i, value))
    return b.linear("E_oob")


def test_out_of_bounds_access_faults() -> None:
    backend = get("python")
    kernel = backend.compile(backend.render(_out_of_bounds_program()), "E_oob")
    with pytest.raises(KernelFault, match="out of a buffer of 4"):
        kernel(np.zeros(4, np.float32), np.zeros(4, np.float32))


def test_unrenderable_ops_are_named() -> None:
    b = lp.Builder()
    out = b.param(0, 1)
    b.store(out, 0, b.emit(UOp(Ops.CUSTOM, (), ("1.0f", dtypes.float32))))
    with pytest.raises(RenderError, match="CUSTOM"):
        get("python").render(b.linear("E_custom"))


def test_registers_are_private_to_each_lifted_iteration() -> None:
    b = lp.Builder()
    out = b.param(0, 8)
    acc = b.register(1, dtypes.int32)
    i = b.loop(8)
    b.store(acc, 0, lp.const(dtypes.int32, 0))
    j = b.loop(3, AxisType.REDUCE)
    update = b.store(acc, 0, b.load(acc, 0) + i.cast(dtypes.int32))
    b.end(j, update)
    done = b.emit(UOp(Ops.AFTER, (acc, b.ops[-1])))
    b.end(i, b.store(out, i, b.load(done, 0).cast(dtypes.float32)))
    backend = get("python")
    result = np.zeros(8, np.float32)
    backend.compile(backend.render(b.linear("r_private")), "r_private")(result)
    np.testing.assert_array_equal(result, np.arange(8) * 3)


@pytest.mark.parametrize("backend", [b for b in available() if b != "python"])
def test_agrees_with_compiled_backends_under_heuristic_opts(backend: str) -> None:
    rng = np.random.default_rng(4)
    x = Tensor(rng.standard_normal((16, 24)).astype(np.float32))
    w = Tensor(rng.standard_normal((24, 8)).astype(np.float32))
    out = ((x @ w).relu() + 1).softmax()
    ours = uv.compile(out, backend="python", opts="heuristic").run()[0]
    theirs = uv.compile(out, backend=backend, opts="heuristic").run()[0]
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif("c" not in available(), reason="the C backend's programs are the decomposed code to run")
def test_runs_code_decomposed_for_another_backend() -> None:
    """The C backend lacks EXP2, LOG2, SIN, POW...: its linear programs hold their decompositions.
    The interpreter runs those programs and gets what the native ops give."""
    rng = np.random.default_rng(7)
    x = rng.uniform(0.5, 4.0, (8, 16)).astype(np.float32)
    t = Tensor(x)
    outputs = [(t * 2 + 1).exp(), t.log2(), t.sin(), t.sqrt(), t.pow(1.5), t.softmax()]
    program = uv.compile(outputs, backend="c", opts="heuristic")
    python = get("python")
    for item in program.items:
        linear = item.body.src[0]
        assert not any(u.op in (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.POW) for u in linear.src)
        item.compiled = python.compile(python.render(linear), str(linear.arg))
    results = program.run()
    e = np.exp(x - x.max(1, keepdims=True))
    expected = [np.exp(x * 2 + 1), np.log2(x), np.sin(x), np.sqrt(x), x ** 1.5, e / e.sum(1, keepdims=True)]
    for got, want in zip(results, expected):
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)


@pytest.mark.skipif("opencl" not in available(), reason="OpenCL's programs are the GPU-style code to run")
def test_runs_programs_lowered_for_a_gpu() -> None:
    """Programs lowered for OpenCL (SPECIAL thread indices, LOCAL axes, GROUP_REDUCE through local
    memory and barriers) give the same values on the interpreter."""
    from uopviz.passes.optops.opts import Opt, OptOp

    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((8, 64)).astype(np.float32), rng.standard_normal((64, 4)).astype(np.float32)
    split = [Opt(OptOp.SPLIT, 2, (8, AxisType.GROUP_REDUCE, False)),
             Opt(OptOp.SPLIT, 1, (4, AxisType.UPCAST, False)),
             Opt(OptOp.SPLIT, 0, (2, AxisType.LOCAL, False))]
    program = uv.compile([Tensor(a) @ Tensor(b)], backend="opencl", opts=split)
    python = get("python")
    for item in program.items:
        linear = item.body.src[0]
        assert any(u.op is Ops.SPECIAL for u in linear.src) and any(u.op is Ops.BARRIER for u in linear.src)
        item.compiled = python.compile(python.render(linear), str(linear.arg))
    np.testing.assert_allclose(program.run()[0], a @ b, rtol=1e-5, atol=1e-5)


def test_every_backend_makes_its_compiled_kernel_one_way():
    # CompiledKernel.built: compile_s measured from the reading taken before the build; what runs the
    # kernel (module, program, engine, library, function) is each subclass's required keyword fields
    import time

    from uopviz.backends.base import CompiledKernel
    from uopviz.backends.cpu_runtime import CPUCompiledKernel
    from uopviz.backends.cuda import CUDACompiledKernel
    from uopviz.backends.llvm import LLVMCompiledKernel
    from uopviz.backends.opencl import OpenCLCompiledKernel
    from uopviz.backends.python import PythonCompiledKernel

    meta = KernelMeta("k", ())
    kernel = PythonCompiledKernel.built("python", meta, "src", time.perf_counter() - 2.0, {"cached": True},
                                        function=len)  # fmt: skip
    made = (kernel.backend, kernel.meta, kernel.source, kernel.extra)
    assert made == ("python", meta, "src", {"cached": True})
    assert 2.0 <= kernel.compile_s < 60.0 and kernel.function is len
    handles = {CUDACompiledKernel: {"driver", "module", "function"}, OpenCLCompiledKernel: {"program"},
               LLVMCompiledKernel: {"engine", "function"}, CPUCompiledKernel: {"library_path", "function"},
               PythonCompiledKernel: {"function"}}  # fmt: skip
    for kind, names in handles.items():
        assert issubclass(kind, CompiledKernel)
        with pytest.raises(TypeError, match="required keyword-only argument"):
            kind.built("b", meta, "src", time.perf_counter(), {})  # a kernel without what runs it
        with pytest.raises(TypeError, match="positional"):
            kind("b", meta, "src", 0.0, {}, *names)  # handles are named, never by position
