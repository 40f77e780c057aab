"""The kernel passes of an NNEF graph (uopviz.nnef.kernel_passes.pipeline) run as traced passes: the
trace of ``g.compile()`` names them in the table's order between Rangeify and Optimize, each with a
step per kernel it made or changed, and the last one's output is the kernels the pipeline compiles."""

from __future__ import annotations

import uopviz.nnef as nnef
from uopviz.core.ops import Ops
from uopviz.nnef.kernel_passes.pipeline import KERNEL_PASSES
from uopviz.passes.pipeline import STAGES


def _alexnet_program(backend: str):
    graph = nnef.loads(nnef.examples.text("alexnet", fixed=True))
    return graph.compile(backend=backend, build=False, progress=False)


def test_the_trace_names_the_kernel_passes_in_order():
    program = _alexnet_program("c")
    names = [record.name for record in program.trace.passes]
    assert list(KERNEL_PASSES) == ["Fusion", "Padding", "Concat In Place", "Weight Layout", "Loop Merge",
                                   "Offset Views"]
    assert names == ["Callify", "Rangeify", *KERNEL_PASSES, *STAGES[STAGES.index("Optimize"):]]


def test_each_kernel_pass_records_what_it_did_to_each_kernel():
    trace = _alexnet_program("c").trace
    rangeify = trace.find("Rangeify")
    assert len(rangeify.steps) == 24  # one kernel per operation, as the operations lowered
    assert rangeify.steps[0].rule == "@lower nn.conv 'conv1' -> kernel conv1"
    fusion = [step.rule for step in trace.find("Fusion").steps]
    assert "Fusion: kernel relu1 (folds nn.conv 'conv1' in)" in fusion
    layout = [step.rule for step in trace.find("Weight Layout").steps]
    # the lanes are the C target's (16 on AVX-512, 8 on AVX2, 4 on SSE)
    assert any(rule.startswith("Weight Layout: kernel relu1 (kernel1 read blocked by ") for rule in layout)
    padding = [step.rule for step in trace.find("Padding").steps]
    border = "Padding: kernel border_pool1_2both (both borders of axis 2 of pool1's padded buffer"
    assert any(rule.startswith(border) for rule in padding)
    # the kernels a pass rewrote are finished by Rangeify's rules (finish_kernel), named in the trace
    tidied = [record for record in trace.find("Padding").walk() if record.name == "simplify indices"]
    assert tidied and "x + 0 → x" in {step.rule for record in tidied for step in record.steps}


def test_the_last_kernel_pass_gives_the_kernels_that_compile():
    program = _alexnet_program("c")
    merged = program.trace.find("Loop Merge")
    assert merged.output.op is Ops.SINK
    assert list(merged.output.src) == [kernel.ast for kernel in program.nnef_kernels]
    fused = program.trace.find("Fusion")
    assert len(fused.input.src) == 24 and len(fused.output.src) < 24  # ReLUs took their convs in


def test_a_backend_without_vector_lanes_keeps_its_filters():
    # the Python interpreter has no vector registers: Weight Layout runs, and changes no kernel
    trace = _alexnet_program("python").trace
    layout = trace.find("Weight Layout")
    assert [record.name for record in trace.passes][2:2 + len(KERNEL_PASSES)] == list(KERNEL_PASSES)
    assert not [step for step in layout.steps if step.rule.startswith("Weight Layout:")]
    assert layout.output is layout.input


def test_the_player_shows_each_kernel_pass_step_by_step():
    from uopviz.widgets.player import PlayerState

    state = PlayerState(_alexnet_program("c").trace)
    state.select("Fusion")
    kernels_shown = []
    for step in range(1, state.current.step_count + 1):
        state.move_to(step)
        assert state.step == step  # no step of a kernel pass is an empty one the player skips
        frame = state.frame()
        assert frame.note == "" and not frame.empty
        kernels_shown.append(len(frame.uop.src))
    # 24 kernels as lowered; each of the 7 fusions folds one producer into its reader
    assert kernels_shown == list(range(23, 16, -1))
    state.select("Padding")
    state.move_to(state.current.step_count)
    assert state.frame().rule.startswith("Padding: kernel ")


def _written_at(location: str) -> str:
    """The line a step's ``file:line`` names, read from the repository."""
    import linecache
    from pathlib import Path

    path, _, line = location.rpartition(":")
    return linecache.getline(str(Path(__file__).resolve().parents[2] / path), int(line)).strip()


def test_each_front_end_and_kernel_pass_step_names_its_rule_and_its_line():
    from uopviz.nnef.program.compile import run_function_rules

    trace = _alexnet_program("c").trace
    # Callify: a rule of a rule table, at the root (the SINK of the run's kernels as they lowered)
    callify = trace.find("Callify")
    assert callify.matcher is run_function_rules
    (step,) = callify.steps
    assert step.rule == "kernels become one FUNCTION"
    assert step.location == run_function_rules.rules[0].location
    assert '"kernels become one FUNCTION"' in _written_at(step.location)
    assert step.before is callify.input and step.before.op is Ops.SINK and len(step.before.src) == 24
    assert step.after is callify.output is trace.find("Rangeify").input and step.after.op is Ops.FUNCTION
    calls = [u.src[0] for u in step.after.toposort() if u.op is Ops.CALL]
    assert calls == list(step.before.src)  # each kernel a CALL, in run order
    # Rangeify: each @lower formula at its line of the standard library, written from the package
    rangeify = trace.find("Rangeify").steps
    assert rangeify[0].location.startswith("uopviz/nnef/stdlib/nn.sknd:")
    assert _written_at(rangeify[0].location) == "operator conv {"
    # the kernel passes: each step at the def of the pass that made it
    located = {}
    for name, kernel_pass in KERNEL_PASSES.items():
        for step in trace.find(name).steps:
            if step.rule.startswith(f"{name}: "):  # the pass's own (its nested rewrites name theirs)
                located.setdefault(name, set()).add(_written_at(step.location).split("(")[0])
        assert located.get(name, {f"def {kernel_pass.__name__}"}) == {f"def {kernel_pass.__name__}"}
    # every pass but Concat In Place and Offset Views changed a kernel of AlexNet on C (it has no
    # concatenation: their steps are tested in test_concat_in_place.py and test_offset_views.py)
    assert set(located) == set(KERNEL_PASSES) - {"Concat In Place", "Offset Views"}
