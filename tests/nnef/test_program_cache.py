"""The whole-program cache of NNEF graphs (uopviz.nnef.program.program_cache): a graph compiled
again (loaded afresh, as in a new process) comes from the cache and runs as the program it was
stored from; anything that changes the program misses; a corrupt entry is ignored; the trace of a
cached program, made when first read, has the uncached trace's passes and rules."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import uopviz as uv
from uopviz.backends import target as target_module
from uopviz.backends.target import set_target
from uopviz.engine.program import Program
from uopviz.nnef.program import program_cache
from uopviz.nnef.program.compile import compile_graph
from uopviz.nnef.program.program_cache import CachedProgram, program_key

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import zoo  # noqa: E402

SMALL = {
    "resnet18": {"size": 16, "width": 0.125},
    "mobilenet_v2": {"size": 16, "width": 0.25},
    "inception_v1": {"size": 16, "width": 0.125},
}

TINY = """
version 1.0;

graph tiny( x ) -> ( y )
{{
    x = external<scalar>(shape = [1, 4, 6, 6]);
    w = variable<scalar>(shape = [{channels}, 4, 3, 3], label = 'w');
    c = conv(x, w, padding = [(1, 1), (1, 1)]);
    y = relu(add(c, {offset}));
}}
"""


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Every test starts with an empty cache folder of its own."""
    monkeypatch.setenv("UOPVIZ_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(program_cache.SWITCH, raising=False)


def _tiny_folder(tmp_path: Path, channels: int = 3, offset: str = "0.5", seed: int = 0) -> Path:
    folder = tmp_path / f"tiny-{channels}-{offset}-{seed}"
    folder.mkdir(exist_ok=True)
    (folder / "graph.nnef").write_text(TINY.format(channels=channels, offset=offset))
    weights = np.random.default_rng(seed).standard_normal((channels, 4, 3, 3)).astype(np.float32)
    from uopviz.nnef.data import write_tensor

    write_tensor(folder / "w.dat", weights)
    return folder


def _entries() -> list[Path]:
    return sorted((program_cache.cache_dir() / program_cache.NAMESPACE).glob("*.pickle"))


def _rule_names(trace) -> list[tuple[str, list[str]]]:
    return [(found.name, [step.rule for step in found.steps]) for found in trace.walk()]


@pytest.mark.parametrize("model", sorted(SMALL))
def test_a_cached_program_computes_what_the_uncached_one_does(tmp_path, model):
    net = zoo.BUILDERS[model](**SMALL[model])
    folder = zoo.write_nnef1(net, tmp_path / model)
    first = uv.nnef.load(folder)
    uncached = first.compile("c", opts="heuristic", progress=False)
    assert type(uncached) is Program and len(_entries()) == 1
    again = uv.nnef.load(folder)  # a new graph object, as in a new process
    cached = again.compile("c", opts="heuristic", progress=False)
    assert isinstance(cached, CachedProgram)
    assert cached.sources == uncached.sources
    assert [k.name for k in cached.kernels] == [k.name for k in uncached.kernels]
    assert "_trace" not in cached.__dict__ or cached.__dict__["_trace"] is None  # not lowered again
    for seed in (3, 11):
        x = np.random.default_rng(seed).standard_normal(net.input_shape).astype(np.float32)
        expected = first.run({net.input_name: x}, backend="c", opts="heuristic")[net.output]
        got = again.run({net.input_name: x}, backend="c", opts="heuristic")[net.output]
        np.testing.assert_array_equal(got, expected)
        np.testing.assert_allclose(got, zoo.reference(net, x), rtol=1e-4, atol=1e-4)
    assert cached.__dict__.get("_trace") is None  # running never made the trace


def test_llvm_programs_come_from_the_cache_too(tmp_path):
    folder = _tiny_folder(tmp_path)
    x = np.random.default_rng(2).standard_normal((1, 4, 6, 6)).astype(np.float32)
    expected = uv.nnef.load(folder).run({"x": x}, backend="llvm", opts="heuristic")["y"]
    again = uv.nnef.load(folder)
    assert isinstance(again.compile("llvm", opts="heuristic", progress=False), CachedProgram)
    np.testing.assert_array_equal(again.run({"x": x}, backend="llvm", opts="heuristic")["y"], expected)


def test_the_trace_of_a_cached_program_names_the_uncached_passes_and_rules(tmp_path):
    net = zoo.BUILDERS["resnet18"](**SMALL["resnet18"])
    folder = zoo.write_nnef1(net, tmp_path / "resnet18")
    uncached = uv.nnef.load(folder).compile("c", opts="heuristic", progress=False)
    cached = uv.nnef.load(folder).compile("c", opts="heuristic", progress=False)
    assert isinstance(cached, CachedProgram)
    expected = _rule_names(uncached.trace)
    assert len(expected) > 10 and any(rules for _, rules in expected)
    assert _rule_names(cached.trace) == expected
    assert [k.name for k in cached.nnef_kernels] == [k.name for k in uncached.nnef_kernels]


def test_the_explorer_shows_a_cached_program(tmp_path):
    folder = _tiny_folder(tmp_path)
    uncached = uv.nnef.load(folder).compile("c", opts="heuristic", progress=False)
    cached = uv.nnef.load(folder).compile("c", opts="heuristic", progress=False)
    assert isinstance(cached, CachedProgram)
    tabs, expected = uv.explore(cached).views, uv.explore(uncached).views
    assert set(tabs) == set(expected) >= {"Pipeline", "Kernels"}
    names = [[entry["name"] for entry in view["Pipeline"].passes] for view in (tabs, expected)]
    assert names[0] == names[1] and "Rangeify" in names[0]


def test_what_changes_the_program_misses(tmp_path, monkeypatch):
    base = uv.nnef.load(_tiny_folder(tmp_path))
    key = program_key(base, "c", "heuristic", True)
    assert key == program_key(uv.nnef.load(_tiny_folder(tmp_path, seed=7)), "c", "heuristic", True)  # weights
    others = {
        "graph": program_key(uv.nnef.load(_tiny_folder(tmp_path, channels=5)), "c", "heuristic", True),
        "constant": program_key(uv.nnef.load(_tiny_folder(tmp_path, offset="0.25")), "c", "heuristic", True),
        "opts": program_key(base, "c", None, True),
        "backend": program_key(base, "llvm", "heuristic", True),
        "build": program_key(base, "c", "heuristic", False),
    }
    # the choice made here is undone after the test (set_target returns the new target, not the old)
    monkeypatch.setattr(target_module, "_chosen", target_module._chosen)
    set_target("x86-64-v2")
    others["target"] = program_key(base, "c", "heuristic", True)
    assert key is not None and len({key, *others.values()}) == len(others) + 1


def test_a_changed_graph_compiles_afresh_and_runs_right(tmp_path):
    uv.nnef.load(_tiny_folder(tmp_path)).compile("c", opts="heuristic", progress=False)
    changed = uv.nnef.load(_tiny_folder(tmp_path, channels=5))
    assert type(changed.compile("c", opts="heuristic", progress=False)) is Program
    assert type(uv.nnef.load(_tiny_folder(tmp_path)).compile("c", progress=False)) is Program  # opts
    assert len(_entries()) == 3


def test_new_weights_reuse_the_program_and_compute_with_their_values(tmp_path):
    uv.nnef.load(_tiny_folder(tmp_path, seed=0)).compile("c", opts="heuristic", progress=False)
    folder = _tiny_folder(tmp_path, seed=9)
    fresh = uv.nnef.load(folder)
    x = np.random.default_rng(4).standard_normal((1, 4, 6, 6)).astype(np.float32)
    assert isinstance(fresh.compile("c", opts="heuristic", progress=False), CachedProgram)
    uncached = uv.nnef.load(folder)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(program_cache.SWITCH, "0")
        expected = uncached.run({"x": x}, backend="c", opts="heuristic")["y"]
        assert type(uncached.compile("c", opts="heuristic", progress=False)) is Program
    np.testing.assert_array_equal(fresh.run({"x": x}, backend="c", opts="heuristic")["y"], expected)


@pytest.mark.parametrize("damage", [b"", b"not a pickle", b"\x80\x05\x95garbage"])
def test_a_corrupt_entry_is_ignored_and_rewritten(tmp_path, damage):
    folder = _tiny_folder(tmp_path)
    x = np.random.default_rng(1).standard_normal((1, 4, 6, 6)).astype(np.float32)
    expected = uv.nnef.load(folder).run({"x": x}, backend="c", opts="heuristic")["y"]
    (entry,) = _entries()
    entry.write_bytes(damage)
    graph = uv.nnef.load(folder)
    assert type(graph.compile("c", opts="heuristic", progress=False)) is Program
    np.testing.assert_array_equal(graph.run({"x": x}, backend="c", opts="heuristic")["y"], expected)
    assert entry.stat().st_size > 1000  # written again, whole
    assert isinstance(uv.nnef.load(folder).compile("c", opts="heuristic", progress=False), CachedProgram)


def test_an_entry_of_another_format_is_ignored(tmp_path, monkeypatch):
    folder = _tiny_folder(tmp_path)
    uv.nnef.load(folder).compile("c", opts="heuristic", progress=False)
    monkeypatch.setattr(program_cache, "FORMAT", program_cache.FORMAT + 1)
    assert type(uv.nnef.load(folder).compile("c", opts="heuristic", progress=False)) is Program


def test_the_switch_turns_the_cache_off(tmp_path, monkeypatch):
    monkeypatch.setenv(program_cache.SWITCH, "0")
    uv.nnef.load(_tiny_folder(tmp_path)).compile("c", opts="heuristic", progress=False)
    assert _entries() == []


# x is read by the padded conv and by the add: the conv reads a padded copy of it (a pad kernel)
PADDED = """import nn; import math;
graph Padded {
    @input { x: real[1, 2, 5, 5]; }
    @output { y: real; }
    @variable { w: real[2, 2, 3, 3]; b: real[2]; }
    @compose { d = nn.conv{padding=1}(x, w, b); y = math.add(d, x); }
}"""

#: in a new process: a hit (kept alive), its kernels lowered again, then the graph lowered afresh
AFTER_A_HIT = f"""
import sys
from uopviz.nnef.composition.composer import compose
from uopviz.nnef.program.compile import compile_graph
from uopviz.nnef.program.program_cache import CachedProgram
text = {PADDED!r}
hit = compile_graph(compose(text), sys.argv[1])
assert isinstance(hit, CachedProgram)
print(",".join(kernel.name for kernel in hit.nnef_kernels))
print(",".join(kernel.name for kernel in compile_graph(compose(text), sys.argv[1], cache=False).nnef_kernels))
"""


@pytest.mark.parametrize("backend", [b for b in ("python", "c", "opencl") if b in uv.backends.available()])
def test_a_hit_leaves_later_lowerings_in_its_process_as_they_were(backend):
    # the hit builds hash-consed UOps a later lowering gets back: their dtypes must be the very
    # ``dtypes`` objects (padding compares them with ``is``), or the conv stops reading a padded copy
    from uopviz.nnef.composition.composer import compose

    first = compile_graph(compose(PADDED), backend)
    names = ",".join(kernel.name for kernel in first.nnef_kernels)
    assert "pad_x" in names
    root = Path(__file__).resolve().parents[2]
    found = subprocess.run(
        [sys.executable, "-c", AFTER_A_HIT, backend],
        capture_output=True, text=True, check=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(root)}, cwd=root,
    )  # fmt: skip
    assert found.stdout.split() == [names, names]


def test_opts_whose_text_is_not_their_content_are_not_cached(tmp_path):
    from uopviz.engine.records import TuningRecords

    graph = uv.nnef.load(_tiny_folder(tmp_path))
    assert program_key(graph, "c", TuningRecords(), True) is None
    chosen = {0: [uv.Opt(uv.OptOp.SPLIT, 0, (4, uv.AxisType.UPCAST, False))]}
    assert program_key(graph, "c", (chosen, False), True) not in (
        None,
        program_key(graph, "c", (None, False), True),
    )


def test_a_compile_inside_an_open_trace_is_lowered_and_traced(tmp_path):
    from uopviz.core.rewrite import tracing

    folder = _tiny_folder(tmp_path)
    uv.nnef.load(folder).compile("c", opts="heuristic", progress=False)
    with tracing() as trace:
        inner = uv.nnef.load(folder).compile("c", opts="heuristic", progress=False)
    assert type(inner) is Program and "Rangeify" in [found.name for found in trace.walk()]


def test_graphs_with_run_time_extents_lower_every_time():
    # their lowering registers the extents' counters on the graph (graph.counts), which running reads
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from counted_graphs import counted_graph

    graph = counted_graph(
        "x: real[2, 3];", "y: int;", "y = layout.nonzero(x);", imports=("layout",), file="extents.sknd"
    )
    assert program_key(graph, "c", None, True) is None
    x = np.array([[0, 1, 2], [3, 0, 0]], np.float32)
    assert type(graph.compile("c", progress=False)) is Program
    np.testing.assert_array_equal(graph.run({"x": x}, backend="c")["y"], np.argwhere(x).T)
