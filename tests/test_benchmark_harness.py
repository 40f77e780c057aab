"""The benchmark harness holds numpy's code paths to uopviz's target, so that a lesser target is
compared with peers using the same instructions (issue #10: honest figures)."""

from __future__ import annotations

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
