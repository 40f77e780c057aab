"""The layer contract (pyproject.toml, [tool.importlinter]) holds: imports point down, no cycles.

``lint-imports`` (import-linter) reads the contract from pyproject.toml and measures the import
graph of ``uopviz/`` (module-level and in-function imports alike); the test fails with its report
when a contract is broken, so the shape cannot rot unnoticed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_layer_contract_holds():
    pytest.importorskip("importlinter", reason="import-linter is in the dev extra (pip install -e .[dev])")
    # `lint-imports --no-cache` as a function call, in a process whose path starts with this checkout
    # (so the uopviz measured is this one, whatever is installed)
    code = "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports(no_cache=True))"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env,
                            timeout=240)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout
