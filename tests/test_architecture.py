"""The layer contract (pyproject.toml, [tool.importlinter]) holds: imports point down, no cycles.

``lint-imports`` (import-linter) reads the contract from pyproject.toml and measures the import
graph of ``uopviz/`` (module-level and in-function imports alike); the test fails with its report
when a contract is broken, so the shape cannot rot unnoticed.  The imports under ``if TYPE_CHECKING:``
count too, so a class is not split into parts that import it back only for annotations.  Beside it:
no module imports another module's private ``_name``; every exception class derives from UopvizError
and is documented; every backend makes its CompiledKernel through ``CompiledKernel.built``.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _lint_imports(config: Path | None = None) -> subprocess.CompletedProcess:
    """``lint-imports --no-cache`` (with ``config``, else pyproject.toml) as a function call, in a
    process whose path starts with this checkout (so the uopviz measured is this one, whatever is
    installed)."""
    pytest.importorskip("importlinter", reason="import-linter is in the dev extra (pip install -e .[dev])")
    argument = "" if config is None else f"config_filename={str(config)!r}, "
    code = ("import sys; from importlinter.cli import lint_imports; "
            f"sys.exit(lint_imports({argument}no_cache=True))")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env,
                          timeout=240)


def test_layer_contract_holds():
    result = _lint_imports()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


# ---------------------------------------------------------------------------------------------
# the contract counts the imports under `if TYPE_CHECKING:`


def test_the_contract_counts_type_checking_imports():
    # issue 22: Tensor and its four method groups, the UOp and its printer and property rules, the
    # OptOps' Kernel and the functions applying each opt, NNEF's graph and the modules lowering it
    # imported each other back under TYPE_CHECKING, which the contract left out; they are parts now
    # (Self; the UOpNode and ShapedKernel protocols; the ComposedGraph base class) and the contract
    # counts them
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    assert settings["exclude_type_checking_imports"] is False


def test_the_cycle_check_counts_type_checking_imports(tmp_path):
    # with that setting the no-cycles contract fails on a cycle made only of TYPE_CHECKING imports
    package = tmp_path / "uopviz_cycle_probe"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from uopviz_cycle_probe import b\n")
    (package / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                  "    from uopviz_cycle_probe import a\n")
    config = tmp_path / "probe.toml"
    config.write_text('[tool.importlinter]\nroot_package = "uopviz_cycle_probe"\n'
                      "exclude_type_checking_imports = false\n\n[[tool.importlinter.contracts]]\n"
                      'name = "probe"\ntype = "acyclic_siblings"\nancestors = ["uopviz_cycle_probe"]\n')
    pytest.importorskip("importlinter", reason="import-linter is in the dev extra (pip install -e .[dev])")
    code = (f"import sys; from importlinter.cli import lint_imports; "
            f"sys.exit(lint_imports(config_filename={str(config)!r}, no_cache=True))")
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "NO_COLOR": "1"}
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                            env=env, timeout=120)
    assert result.returncode != 0 and "1 broken" in result.stdout, result.stdout + result.stderr


# ---------------------------------------------------------------------------------------------
# private names stay in their module

def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _uopviz_modules() -> frozenset[str]:
    return frozenset(_module_name(path) for path in (ROOT / "uopviz").rglob("*.py"))


def private_imports(source: str, module: str, is_package: bool = False,
                    modules: frozenset[str] = frozenset()) -> list[str]:
    """``"line: from X import _name"`` for every private name (one underscore) ``source``, the text
    of ``module``, imports from a uopviz module, at any depth (in functions, under TYPE_CHECKING);
    and ``"line: X._name"`` for every private name it reads of a uopviz module it imported whole
    (``import uopviz.x as m``, or ``from uopviz import x`` where ``uopviz.x`` is one of ``modules``)."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    found = []
    imported_modules: dict[str, str] = {}  # local name -> the uopviz module it is
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported_modules.update({alias.asname: alias.name for alias in node.names
                                     if alias.asname and alias.name.split(".")[0] == "uopviz"})
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level:  # a relative import, from the module's package upwards
            base = package[: len(package) - node.level + 1]
            imported = ".".join([*base, *([node.module] if node.module else [])])
        else:
            imported = node.module or ""
        if imported.split(".")[0] != "uopviz":
            continue
        for alias in node.names:
            if alias.name.startswith("_") and not alias.name.startswith("__"):
                found.append(f"{node.lineno}: from {imported} import {alias.name}")
            elif f"{imported}.{alias.name}" in modules:
                imported_modules[alias.asname or alias.name] = f"{imported}.{alias.name}"
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in imported_modules
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            found.append(f"{node.lineno}: {imported_modules[node.value.id]}.{node.attr}")
    return sorted(found, key=lambda hit: int(hit.split(":")[0]))


def test_private_imports_finds_absolute_relative_nested_and_module_attribute_imports():
    source = ("from uopviz.core.uop import UOp, _hidden\n"
              "from .tensor_helpers import _helper, __version__\n"
              "def f():\n    from uopviz.passes import _late\n"
              "from numpy import _private_of_numpy\n"
              "import uopviz.core.buffers as buffers\n"
              "from uopviz.core import dtype\n"
              "x = buffers._registry, dtype._SCALARS, dtype.dtypes, buffers.__name__\n")
    assert private_imports(source, "uopviz.core.tensor", modules=frozenset({"uopviz.core.dtype"})) == [
        "1: from uopviz.core.uop import _hidden",
        "2: from uopviz.core.tensor_helpers import _helper",
        "4: from uopviz.passes import _late",
        "8: uopviz.core.buffers._registry",
        "8: uopviz.core.dtype._SCALARS",
    ]


def test_no_module_imports_a_private_name_of_another():
    # issue 22: 115 imports of private names crossed module boundaries (19 in nnef/composer.py); there
    # are none now, and there must stay none: a name two modules share is public and documented
    offenders = []
    modules = _uopviz_modules()
    for path in sorted((ROOT / "uopviz").rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        found = private_imports(source, _module_name(path), path.name == "__init__.py", modules)
        offenders += [f"{path.relative_to(ROOT).as_posix()}:{hit}" for hit in found]
    assert offenders == [], "private names imported across modules:\n" + "\n".join(offenders)


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


def test_every_backend_makes_its_compiled_kernel_through_built():
    # issue 22: the CUDA, OpenCL and LLVM backends each built their CompiledKernel by hand, by position
    for path in sorted((ROOT / "uopviz" / "backends").glob("*.py")):
        text = path.read_text(encoding="utf-8")
        direct = [line.strip() for line in text.splitlines()
                  if re.search(r"\b\w*CompiledKernel\(", line) and not line.lstrip().startswith("class ")]
        assert direct == [], f"{path.name} makes a CompiledKernel without CompiledKernel.built: {direct}"
