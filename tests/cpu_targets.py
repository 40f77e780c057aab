"""CPU targets as test parameters.

A test that runs code generated for a named x86-64 level runs it only where this host's CPU has
that level's features: on an AVX2 host an ``x86-64-v4`` case, on an SSE4.2 host an ``x86-64-v3``
case, is skipped with the profile's own reason (the code still renders and compiles there;
tests/backends/test_targets.py checks that).  `make test-emulated` runs the suite on such hosts.
"""

from __future__ import annotations

import os

import pytest

from uopviz.backends.target import LEVELS, resolve_target


def runnable_levels() -> list[str]:
    """The x86-64 levels whose code this host's CPU runs."""
    return [level for level in LEVELS if resolve_target(level).runs_here]


def not_runnable_levels() -> list[str]:
    """The x86-64 levels whose code renders and compiles here but cannot run."""
    return [level for level in LEVELS if not resolve_target(level).runs_here]


def target_params(*names: str) -> list:
    """``names`` (``native`` or levels) as pytest parameters, each one this host cannot run marked
    skipped with the reason."""
    params = []
    for name in names:
        reason = resolve_target(name).why_not_here()
        params.append(pytest.param(name, marks=[pytest.mark.skip(reason=reason)] if reason else []))
    return params


#: The CPU `make test-emulated` runs this process on under qemu-user (scripts/emulated-host.sh sets
#: it: "haswell" or "nehalem"), "" on a real CPU.
EMULATED_CPU = os.environ.get("UOPVIZ_EMULATED_CPU", "")


def skip_when_emulated(cpus: tuple[str, ...], reason: str) -> pytest.MarkDecorator:
    """Skip a case on the emulated ``cpus`` only, saying why (what qemu gets wrong or takes too long
    for, and where the case still runs)."""
    return pytest.mark.skipif(EMULATED_CPU in cpus, reason=f"on qemu's emulated {EMULATED_CPU}: {reason}")
