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


def _public_exception_classes() -> dict[str, type]:
    """The exception classes (not warnings) defined in uopviz's public modules, by name."""
    import importlib
    import inspect
    import pkgutil

    import uopviz

    found: dict[str, type] = {}
    for info in pkgutil.walk_packages(uopviz.__path__, "uopviz."):
        if any(part.startswith("_") for part in info.name.split(".")[1:]):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and not issubclass(value, Warning)
                and value.__module__.startswith("uopviz.")
                and not name.startswith("_")
            ):
                found[value.__qualname__] = value
    return found


def test_every_exception_class_derives_from_the_root_and_is_documented():
    # issue 21: PipelineError, the ValueError of uint8.clip(-3, 3) and the TypeError of Tensor(bfloat16
    # array) escaped as types docs/robustness.md did not list and `except UopvizError` did not catch
    import uopviz as uv

    documented = (ROOT / "docs" / "robustness.md").read_text(encoding="utf-8")
    found = _public_exception_classes()
    expected = {"UopvizError", "UOpError", "NNEFError", "CompileError", "PipelineError", "ExploreError"}
    assert expected <= set(found)
    for name, cls in found.items():
        assert issubclass(cls, uv.UopvizError), f"{cls.__module__}.{name} does not derive from UopvizError"
        assert f"`{name}`" in documented, f"{cls.__module__}.{name} is not listed in docs/robustness.md"
