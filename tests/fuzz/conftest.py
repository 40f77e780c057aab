"""Writes the fuzz tests' outcome counts to ``$UOPVIZ_FUZZ_REPORT`` (JSON) when it is set."""

from __future__ import annotations

import json
import os

import pytest

from .fuzzing import OUTCOMES


@pytest.fixture(scope="session", autouse=True)
def fuzz_report():
    """Yield to the session, then write the counts."""
    yield
    path = os.environ.get("UOPVIZ_FUZZ_REPORT")
    if path:
        existing = json.loads(open(path).read()) if os.path.exists(path) else {}
        for target, counts in OUTCOMES.items():
            merged = existing.setdefault(target, {})
            for outcome, count in counts.items():
                merged[outcome] = merged.get(outcome, 0) + count
        with open(path, "w") as stream:
            json.dump(existing, stream, indent=1, sort_keys=True)


def pytest_collection_modifyitems(config, items):
    """Under the slow profile the long budgets run past pytest-timeout's 300 s per test: lift it."""
    from .fuzzing import SLOW

    if SLOW:
        for item in items:
            if "tests/fuzz/" in str(item.fspath).replace("\\", "/"):
                item.add_marker(pytest.mark.timeout(0))
