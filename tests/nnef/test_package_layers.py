"""uopviz.nnef imports one way with the imports under ``if TYPE_CHECKING:`` counted too (the
project's linter leaves those out for the packages that still need it): no cycle among its
modules, and no subpackage importing one above it in the NNEF layer contract of pyproject.toml."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _nnef_imports() -> dict[str, set[str]]:
    grimp = pytest.importorskip("grimp", reason="grimp comes with import-linter (the dev extra)")
    graph = grimp.build_graph("uopviz", exclude_type_checking_imports=False, cache_dir=None)
    return {
        module: {
            name
            for name in graph.find_modules_directly_imported_by(module)
            if name.startswith("uopviz.nnef.")
        }
        for module in graph.modules
        if module.startswith("uopviz.nnef.")
    }


def _nnef_layers() -> list[list[str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (contract,) = [
        contract
        for contract in config["tool"]["importlinter"]["contracts"]
        if contract.get("containers") == ["uopviz.nnef"]
    ]
    return [[part.strip() for part in layer.split("|")] for layer in contract["layers"]]


def _layer_of(module: str, layers: list[list[str]]) -> int | None:
    top = module.split(".")[2]
    return next((index for index, names in enumerate(layers) if top in names), None)


def test_no_import_cycle_in_nnef_with_type_checking_imports():
    imports = _nnef_imports()
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for imported in sorted(imports.get(module, ())):
            if state.get(imported) == 1:
                return [*path[path.index(imported) :], imported]
            if imported not in state and (cycle := visit(imported)):
                return cycle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(imports):
        if module not in state:
            cycle = visit(module)
            assert cycle is None, " -> ".join(cycle)


def test_nnef_subpackages_import_down_with_type_checking_imports():
    layers = _nnef_layers()
    assert [names[0] for names in layers[:5]] == ["loader", "load_cache", "nnef1", "composition", "graph"]
    upward = []
    for module, imported in _nnef_imports().items():
        own = _layer_of(module, layers)
        for name in imported:
            other = _layer_of(name, layers)
            if own is not None and other is not None and other < own:
                upward.append(f"{module} -> {name}")
            if own is not None and other == own and module.split(".")[2] != name.split(".")[2]:
                upward.append(f"{module} -> {name} (independent layers)")
    assert upward == []
    # every subpackage and module of uopviz.nnef has its place in the contract
    placed = {name for names in layers for name in names}
    children = {
        path.stem
        for path in (ROOT / "uopviz" / "nnef").iterdir()
        if path.suffix == ".py" or (path / "__init__.py").is_file()
    }
    assert children - {"__init__"} <= placed


def _private_imports(path: Path) -> list[str]:
    import ast

    own = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("uopviz"):
            if node.module != own:
                found += [
                    f"{own} imports {node.module}.{alias.name}"
                    for alias in node.names
                    if alias.name.startswith("_") and not alias.name.startswith("__")
                ]
    return found


def test_no_nnef_module_imports_a_private_name_of_another():
    modules = sorted((ROOT / "uopviz" / "nnef").rglob("*.py"))
    assert len(modules) > 50
    assert [found for path in modules for found in _private_imports(path)] == []
