"""The layer contract (pyproject.toml, [tool.importlinter]) holds: imports point down, no cycles.

``lint-imports`` (import-linter) reads the contract from pyproject.toml and measures the import
graph of ``uopviz/`` (module-level and in-function imports alike); the test fails with its report
when a contract is broken, so the shape cannot rot unnoticed.  The imports under ``if TYPE_CHECKING:``
count too, so a class is not split into parts that import it back only for annotations.  Beside it:
no module imports another module's private ``_name``; no class reads through ``self`` what neither it
nor its bases define (a mixin reaching into the class it is mixed into); every exception class derives
from UopvizError and is documented; every backend makes its CompiledKernel through
``CompiledKernel.built``.
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


# ---------------------------------------------------------------------------------------------
# classes own their parts: none reads through `self` what only the class it is mixed into defines


def _class_facts(source: str, module: str) -> dict[str, tuple[list[str], set[str], set[str]]]:
    """For each top-level class of ``source`` (the text of ``module``): its bases (qualified where
    they are uopviz names), the attributes it defines (methods, class-level names, ``self.x = ...``)
    and the ones it reads through ``self``."""
    tree = ast.parse(source)
    imported = {alias.asname or alias.name: f"{node.module}.{alias.name}"
                for node in ast.walk(tree)
                if isinstance(node, ast.ImportFrom) and not node.level
                and (node.module or "").split(".")[0] in ("uopviz", module.split(".")[0])
                for alias in node.names}
    facts = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        defined: set[str] = set()
        for item in node.body:
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                defined.add(item.name)
            targets = (item.targets if isinstance(item, ast.Assign)
                       else [item.target] if isinstance(item, ast.AnnAssign) else [])
            defined |= {target.id for target in targets if isinstance(target, ast.Name)}
        read: set[str] = set()
        for item in ast.walk(node):
            through_self = isinstance(item, ast.Attribute) and isinstance(item.value, ast.Name)
            if through_self and item.value.id == "self":
                (defined if isinstance(item.ctx, ast.Store) else read).add(item.attr)
        bases = [imported.get(ast.unparse(base), f"{module}.{ast.unparse(base)}") for base in node.bases]
        facts[f"{module}.{node.name}"] = (bases, defined, read)
    return facts


def reads_of_the_class_mixed_into(sources: dict[str, str]) -> dict[str, list[str]]:
    """For each class of ``sources`` (module name -> text): the attributes it reads through
    ``self`` that neither it nor any of its bases defines, which only a class it is mixed into can
    give it. A class with a base from outside ``sources`` (``Exception``, a widget) is left out:
    what that base defines is not known here."""
    facts: dict[str, tuple[list[str], set[str], set[str]]] = {}
    for module, source in sources.items():
        facts.update(_class_facts(source, module))

    def defined_by(name: str) -> set[str] | None:
        if name not in facts:
            return None
        bases, defined, _ = facts[name]
        found = set(defined)
        for base in bases:
            inherited = defined_by(base)
            if inherited is None:
                return None
            found |= inherited
        return found

    reaching = {}
    for name, (_, _, read) in facts.items():
        known = defined_by(name)
        if known is None or "__getattr__" in known:
            continue
        missing = sorted(attribute for attribute in read - known if not attribute.startswith("__"))
        if missing:
            reaching[name] = missing
    return reaching


def test_reads_of_the_class_mixed_into_finds_mixins_not_parts_or_unknown_bases():
    mixin = ("class Binding:\n    def bind(self):\n        return self._error(self.tensors)\n"
             "class Composer(Binding):\n    def __init__(self):\n        self.tensors = {}\n"
             "    def _error(self):\n        pass\n")
    parts = ("class ShapeBinder:\n    def __init__(self, builder):\n        self.builder = builder\n"
             "    def bind(self):\n        return self.builder.tensors, self.check()\n"
             "    def check(self):\n        return self.limit\n    limit = 3\n"
             "class Walk:\n    render: object\n    def walk(self):\n        self.render()\n"
             "class Failure(ValueError):\n    def text(self):\n        return self.args\n")
    assert reads_of_the_class_mixed_into({"m.mixin": mixin, "m.parts": parts}) == {
        "m.mixin.Binding": ["_error", "tensors"]
    }


def test_no_class_is_made_of_mixins_that_reach_into_it():
    # issue 22: the Composer was five mixins (binding, shapes, leaves, loops, graph I/O) reaching into
    # its state through `self`; it owns its parts now, each given what it works with.  Tensor's
    # method groups stay mixins: they are the public methods of one class (t.sum(), t.reshape()),
    # written on `Self` in a file each, and the layer contract keeps them from importing tensor.py
    sources = {_module_name(path): path.read_text(encoding="utf-8")
               for path in sorted((ROOT / "uopviz").rglob("*.py"))}
    assert sorted(reads_of_the_class_mixed_into(sources)) == [
        "uopviz.core.tensor_elementwise.ElementwiseMixin",
        "uopviz.core.tensor_movement.MovementMixin",
        "uopviz.core.tensor_nn.NeuralNetworkMixin",
        "uopviz.core.tensor_reduce.ReduceMixin",
    ]


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
