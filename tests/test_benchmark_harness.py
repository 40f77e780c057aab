"""The benchmark harness holds numpy's code paths to uopviz's target, so that a lesser target is
compared with peers using the same instructions (issue #10: honest figures)."""

from __future__ import annotations

import ast
import importlib
import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import run  # noqa: E402  (benchmarks/ is not a package)


def _numpy_features(environment: dict[str, str]) -> dict[str, bool]:
    probe = ("import json; from numpy._core._multiarray_umath import __cpu_features__ as f;"
             "print(json.dumps(f))")
    out = subprocess.run([sys.executable, "-c", probe], env={**_clean_env(), **environment},
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def _clean_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k not in run.PEER_ISA_VARS}


def test_native_holds_the_peers_to_the_hosts_own_level(monkeypatch):
    from uopviz.backends.target import host_cpu, resolve_target

    monkeypatch.setenv("UOPVIZ_TARGET", "native")
    level = resolve_target("native").level
    assert level == host_cpu().level
    environment = run.peer_isa_environment()
    if level in run.OPENBLAS_CORETYPES:  # an AVX2 or SSE4.2 host: the peers' choice is the host's
        assert environment["OPENBLAS_CORETYPE"] == run.OPENBLAS_CORETYPES[level]
    else:
        assert environment == {}


@pytest.mark.parametrize("target", ["x86-64-v3", "x86-64-v2"])
def test_lesser_targets_hold_openblas_and_numpy_to_their_level(monkeypatch, target):
    monkeypatch.setenv("UOPVIZ_TARGET", target)
    environment = run.peer_isa_environment()
    assert environment["OPENBLAS_CORETYPE"] == run.OPENBLAS_CORETYPES[target]
    disabled = environment.get("NPY_DISABLE_CPU_FEATURES", "").split()
    assert not set(disabled) & run.NUMPY_FEATURES_ALLOWED[target]
    # numpy accepts the list (an unknown or absent feature would make its import fail) and every
    # feature above the level is off in a child that got the environment
    features = _numpy_features(environment)
    above = [name for name in ("X86_V4", "AVX512F", "AVX512_SKX") if name in features]
    assert all(not features[name] for name in above if name in disabled or name == "X86_V4")
    if target == "x86-64-v2":
        assert not features.get("X86_V3", False)


# --------------------------------------------------------------------------------------------
# the GPU bench (issue #23): runs anywhere; without a GPU its cases are skipped rows with the
# reason, beside the GPU model's predicted times


def _gpu_bench(monkeypatch):
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_gpu_under_test", BENCHMARKS / "bench_gpu.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look their module up
    monkeypatch.setitem(sys.modules, "run", run)  # as run.py does while modules load
    spec.loader.exec_module(module)
    return module


def test_gpu_bench_without_a_gpu_skips_each_case_with_the_reason_and_predicts(monkeypatch):
    import time

    bench = _gpu_bench(monkeypatch)
    monkeypatch.setattr(bench, "cuda_missing", lambda: "no NVIDIA driver (a test's stand-in)")
    monkeypatch.setenv("UOPVIZ_GPU_BENCH_CASES", "sum,gemm32,argmax")
    started = time.perf_counter()
    rows = [run.normalize("gpu", r) for r in bench.run()]
    assert time.perf_counter() - started < 60
    skipped = [r for r in rows if r["status"] == "skipped"]
    predicted = [r for r in rows if r["status"] == "ok"]
    titles = {key: bench.cases()[key].title for key in ("sum", "gemm32", "argmax")}
    assert [r["case"] for r in skipped] == list(titles.values())
    reason = "no CUDA device (no NVIDIA driver (a test's stand-in))"
    assert all(r["notes"] == f"skipped: {reason}" for r in skipped)
    models = [f"{t} [GPU model {g}]" for t in titles.values() for g in ("H100", "H200")]
    assert [r["case"] for r in predicted] == models
    assert not [r for r in rows if r["status"] == "error"]
    for r in predicted:
        assert 0 < r["ours_s"] < 1 and r["peer_s"] is None and "not measured" in r["notes"], r
    # H200 has more memory bandwidth than H100: a memory-bound sum is predicted faster on it
    sum_h100, sum_h200 = (r["ours_s"] for r in predicted if r["case"].startswith("x.sum()"))
    assert sum_h200 < sum_h100
    gemm = next(r for r in predicted if r["case"] == f"{titles['gemm32']} [GPU model H100]")
    assert "TFLOP/s" in gemm["notes"]
    assert bench.machine_info() == {"gpu": None,
                                    "skip_reason": "no CUDA device (no NVIDIA driver (a test's stand-in))"}
    assert "no CUDA device" in run.format_table(rows)


def test_gpu_bench_names_the_model_of_each_detected_gpu(monkeypatch):
    bench = _gpu_bench(monkeypatch)
    assert bench.gpu_spec_name("NVIDIA H200") == "H200"
    assert bench.gpu_spec_name("NVIDIA H100 80GB HBM3") == "H100"
    assert bench.gpu_spec_name("NVIDIA A100-SXM4-80GB") == "A100"
    assert bench.gpu_spec_name("NVIDIA GeForce RTX 4090") == "RTX4090"
    assert bench.gpu_spec_name("Tesla T4") is None


def test_gpu_bench_rejects_an_unknown_case(monkeypatch):
    bench = _gpu_bench(monkeypatch)
    monkeypatch.setenv("UOPVIZ_GPU_BENCH_CASES", "sum,gemm9")
    with pytest.raises(ValueError, match=r"unknown cases \['gemm9'\]"):
        bench.run_all(None)


def test_skipped_rows_need_a_reason_and_module_machine_info_is_kept(tmp_path):
    row = run.normalize("x", {"case": "c", "status": "skipped", "notes": "skipped: no GPU"})
    assert row == {"benchmark": "x", "case": "c", "ours_s": None, "peer": "", "peer_s": None,
                   "ratio": None, "notes": "skipped: no GPU", "status": "skipped"}
    with pytest.raises(ValueError, match="needs notes"):
        run.normalize("x", {"case": "c", "status": "skipped"})
    module = tmp_path / "bench_probe.py"
    module.write_text("def run():\n    return [{'case': 'a', 'status': 'skipped', 'notes': 'why'}]\n"
                      "def machine_info():\n    return {'gpu': 'none here'}\n")
    info = {}
    rows = run.run_module("probe", module, info)
    assert [r["status"] for r in rows] == ["skipped"] and info == {"probe": {"gpu": "none here"}}
    assert "skipped" in run.format_table(rows)


def _uopviz_imports(path: Path) -> list[tuple[int, str, str | None]]:
    """(line, module, name or None) of every ``import uopviz...`` / ``from uopviz... import name`` in
    ``path``, the ones inside functions too (a benchmark imports lazily)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "uopviz":
            found += [(node.lineno, node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, None) for alias in node.names
                      if alias.name.split(".")[0] == "uopviz"]
    return found


def test_every_uopviz_name_a_benchmark_imports_exists():
    """A module moved inside uopviz must not break ``make bench`` where no test runs it (bench_nnef
    imported ``uopviz.nnef.stdlib_loader`` after the nnef package was split into subpackages)."""
    missing = []
    for path in sorted(BENCHMARKS.glob("*.py")):
        for line, module, name in _uopviz_imports(path):
            try:
                imported = importlib.import_module(module)
            except ImportError as error:
                missing.append(f"{path.name}:{line}: import {module}: {error}")
                continue
            if name is not None and not hasattr(imported, name):
                try:
                    importlib.import_module(f"{module}.{name}")
                except ImportError:
                    missing.append(f"{path.name}:{line}: {module} has no {name}")
    assert not missing, "\n".join(missing)


def test_the_multiply_add_peak_probe_reads_below_what_any_cpu_can_do(monkeypatch):
    """The probe's steps all run: a probe whose sums go unused loses its loop to the compiler and
    reads 22,000 GFLOP/s; a reading above two multiply-adds per cycle at 6 GHz on each thread is
    such a bug, not a fast machine."""
    import fma_peak

    from uopviz.backends.c import CBackend

    backend = CBackend()
    if (reason := backend.unavailable_reason()) is not None:
        pytest.skip(f"the probe is a C kernel: {reason}")
    pins = fma_peak.accumulator_pins(backend)
    if pins is None:
        pytest.skip("the C renderer pins no SIMD register on this architecture")
    monkeypatch.setattr(fma_peak, "STEPS", 200_000)  # ~1 ms a call natively; emulated CPUs are slower
    lanes = fma_peak.float32_lanes(backend)
    for threads in (1, 2):
        peak = fma_peak.fma_peak_gflops(threads)
        assert 0.05 * threads < peak < fma_peak.upper_bound_gflops(threads, lanes), (threads, peak)
    source = fma_peak.probe_source(2, lanes, pins)
    assert source.count(" * scale + shift;") == source.count("__asm__") == fma_peak.ACCUMULATORS
    assert f"vector_size({4 * lanes})" in source


def test_the_conv_rows_give_both_rates_as_shares_of_the_peak_or_say_why_not():
    import bench_zoo

    assert bench_zoo._of_peak(90e9, 135e9, 180.0).startswith("; ours 50%, onnxruntime 75% of the 180 GFLOP/s")
    why = bench_zoo._of_peak(90e9, 135e9, "no C compiler")
    assert why == "; no multiply-add peak measured (no C compiler)"


def test_converted_rows_time_each_side_in_blocks_of_its_own_calls(monkeypatch):
    # every side (our two folders and ONNX Runtime) in blocks of consecutive calls of its own, the
    # blocks alternating, each side as many timed rounds: a model's weights stay warm between its
    # calls for each side alike; our two sides take turns at going first after the peer's pause
    import bench_zoo

    monkeypatch.setattr(bench_zoo, "PEER_SETTLE_S", 0.0)
    calls: list[str] = []
    ours = {name: (lambda name=name: calls.append(name)) for name in ("converted", "zoo")}
    times = bench_zoo._in_blocks(ours, lambda: calls.append("peer"))
    rounds = bench_zoo.INTERLEAVED_ROUNDS // bench_zoo.INTERLEAVED_BLOCKS
    runs = [(name, sum(1 for _ in group)) for name, group in itertools.groupby(calls)]
    turns = [["converted", "zoo", "peer"], ["zoo", "converted", "peer"]]
    assert [name for name, _ in runs] == [
        name for block in range(bench_zoo.INTERLEAVED_BLOCKS) for name in turns[block % 2]
    ]
    assert [length for _, length in runs[:3]] == [rounds + 2] * 3  # two untimed warm-up calls first
    assert all(length == rounds for _, length in runs[3:])
    assert set(times) == {"converted", "zoo", "peer"}
    assert all(best <= median for median, best in times.values())
