"""A backend adds rules of its own to a stage (``Backend.extra_rules``, tinygrad's ``extra_matcher``):
the stage runs them on every kernel before its own rules, and the trace records them under the
backend's name with the line each rule is written on."""

from __future__ import annotations

import linecache
from types import SimpleNamespace

import numpy as np
import pytest

import uopviz as uv
import uopviz.backends as registry
from uopviz import Tensor
from uopviz.backends.python import PythonBackend
from uopviz.core.dtype import dtypes
from uopviz.core.ops import Ops
from uopviz.core.rewrite import ROOT_REWRITE_LIMIT, PatternMatcher, RewriteError, UPat, graph_rewrite
from uopviz.core.uop import UOp
from uopviz.passes.pipeline import KERNEL_STAGES, PipelineError
from uopviz.passes.schedule import rewrite_kernel, whole_kernel_rules


def double_as_add(x: UOp) -> UOp:
    """``x * 2`` is ``x + x``."""
    return x + x


doubling_rules = PatternMatcher([
    (UPat(Ops.MUL, src=[UPat.var("x"), UPat.const(None, 2)]), double_as_add, "double as an add"),
], name="doubling")


class DoublingBackend(PythonBackend):
    """The interpreter with one rule of its own in Instruction Selection."""

    name = "python-doubling"
    extra_rules = {"Instruction Selection": doubling_rules}


class CallifyRulesBackend(PythonBackend):
    """A backend that asks for rules in a stage that does not rewrite kernels."""

    name = "python-callify-rules"
    extra_rules = {"Callify": doubling_rules}


def _float_products(linear: UOp) -> list[Ops]:
    """The multiplies of float values in a LINEAR program (index arithmetic left out)."""
    return [u.op for u in linear.src if u.op in (Ops.MUL, Ops.MULACC) and u.dtype.scalar is dtypes.float32]


@pytest.fixture
def use_backend(monkeypatch):
    """Registers a backend instance for the test only."""

    def use(backend: PythonBackend) -> str:
        monkeypatch.setitem(registry._FACTORIES, backend.name, lambda: backend)
        monkeypatch.setitem(registry._INSTANCES, backend.name, backend)
        return backend.name

    return use


def test_a_backend_rule_fires_in_its_stage_and_is_recorded_under_the_backend(use_backend) -> None:
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    program = uv.compile((Tensor(data) * 2).sum(1), backend=use_backend(DoublingBackend()))
    np.testing.assert_array_equal(program.run()[0], (data * 2).sum(1))
    selection = program.trace.find("Instruction Selection")
    (kernel,) = {item.kernel.name for item in program.items}
    names = [p.name for p in selection.passes]
    # before the stage's own rules: the accumulators are made from what the backend's rule made
    assert names[0] == "python-doubling rules" and "accumulators" in names[1:]
    own = selection.passes[0]
    assert own.matcher is doubling_rules
    (step,) = own.steps
    assert step.rule == "double as an add" and step.before.op is Ops.MUL and step.after.op is Ops.ADD
    path, _, line = step.location.rpartition(":")
    assert path == __file__  # a file outside the package: its whole path
    assert '"double as an add"' in linecache.getline(path, int(line))
    assert step in selection.steps  # a step of the stage: the player shows it there
    linear = program.items[0].body.src[0]
    adds = [u for u in linear.src if u.op is Ops.ADD and u.src[0] is u.src[1]]
    assert len(adds) == 1 and _float_products(linear) == []


def test_without_the_rule_the_same_program_multiplies() -> None:
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    program = uv.compile((Tensor(data) * 2).sum(1), backend="python")
    assert not any(" rules " in p.name for p in program.trace.walk())
    linear = program.items[0].body.src[0]
    # the multiply by 2, fused with the accumulation by Instruction Selection's own rules
    assert _float_products(linear) == [Ops.MULACC]


def test_rules_for_a_stage_that_rewrites_no_kernels_are_an_error(use_backend) -> None:
    name = use_backend(CallifyRulesBackend())
    with pytest.raises(PipelineError, match="adds rules to 'Callify'; a backend adds rules to the stages "
                                            "that rewrite kernels: Optimize, Expand"):
        uv.compile(Tensor(np.ones(4, np.float32)) * 2, backend=name)
    assert KERNEL_STAGES[0] == "Optimize" and KERNEL_STAGES[-1] == "Render"


def test_whole_kernel_rules_run_at_the_root_and_give_what_graph_rewrite_gives() -> None:
    from uopviz.backends.gpu_rules import gpu_linearize_rules

    x = Tensor(np.arange(64 * 64, dtype=np.float32).reshape(64, 64))
    program = uv.compile((x * 2).sum(1), backend="cuda", opts="heuristic", build=False)
    (own,) = [p for p in program.trace.find("Linearize").passes if p.name == "cuda rules"]
    item = program.items[0]
    kernel = own.input
    assert whole_kernel_rules(gpu_linearize_rules) and not whole_kernel_rules(doubling_rules)
    context = SimpleNamespace(body=kernel)
    at_root = rewrite_kernel(kernel, gpu_linearize_rules, ctx=context)
    assert at_root is own.output is graph_rewrite(kernel, gpu_linearize_rules, ctx=context)
    assert at_root is not kernel and item.body.src[0].op is Ops.LINEAR


def test_whole_kernel_rules_that_never_stop_are_a_rule_loop() -> None:
    kernel = UOp(Ops.SINK, (UOp.const(dtypes.float32, 1.0),))
    retag = PatternMatcher([
        (UPat(Ops.SINK, name="k"), lambda k: UOp(Ops.SINK, k.src, k.arg, (k.tag or 0) + 1), "retag forever"),
    ])
    with pytest.raises(RewriteError, match=f"rewrote the SINK at the root {ROOT_REWRITE_LIMIT} times over; "
                                           "last rule 'retag forever'"):
        rewrite_kernel(kernel, retag, name="retagging")
