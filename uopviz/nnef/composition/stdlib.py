"""Finding, parsing and caching SkriptND modules: the standard library and a model's own modules.

The standard library (``uopviz/nnef/stdlib/*.sknd``) is parsed once per process and kept in
memory; the parsed trees are also pickled to a cache file (``$UOPVIZ_CACHE`` or
``~/.cache/uopviz``) keyed by a hash of the library texts and of the parser's sources, so a new
process loads them in a fraction of the parse time. A stale or unreadable cache is simply
rebuilt.

:class:`ModuleSet` resolves ``import`` names for one model (§2.15): a module ``a.b`` is the file
``a/b.sknd`` inside the model folder, else the standard module of that name. Imports never leave
the model folder (no absolute paths, no ``..``) and never reach anything but the folder and the
standard library.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import pickle
import re
import threading
from pathlib import Path

from uopviz.nnef.errors import NNEFError, register_source
from uopviz.nnef.syntax import ast
from uopviz.nnef.syntax.parser import parse_module

__all__ = ["STDLIB_DIR", "ModuleSet", "read_source_text", "stdlib_module", "stdlib_modules", "stdlib_names"]

STDLIB_DIR = Path(__file__).resolve().parents[1] / "stdlib"
# the modules that make the pickled trees: a change to any of them makes the cache stale
_PARSER_SOURCES = (
    "syntax/ast.py", "syntax/lexer.py", "syntax/parser.py", "syntax/parser_cursor.py",
    "syntax/parser_expressions.py", "syntax/parser_types.py", "syntax/parser_components.py",
)  # fmt: skip
_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_lock = threading.Lock()
_stdlib: dict[str, ast.Module] | None = None


def stdlib_names() -> list[str]:
    """The names of the standard modules (file stems of ``stdlib/*.sknd``)."""
    return sorted(path.stem for path in STDLIB_DIR.glob("*.sknd"))


def _cache_key(texts: dict[str, str]) -> str:
    digest = hashlib.sha256()
    # the pickled trees hold their files' paths (error locations, quoted definitions): a cache made
    # by another copy of uopviz would point at that copy's files
    digest.update(str(STDLIB_DIR.resolve()).encode())
    for name in sorted(texts):
        digest.update(name.encode())
        digest.update(texts[name].encode())
    here = Path(__file__).resolve().parents[1]
    for source in _PARSER_SOURCES:
        digest.update((here / source).read_bytes())
    return digest.hexdigest()[:24]


def _cache_dir() -> Path:
    configured = os.environ.get("UOPVIZ_CACHE")
    if configured:
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "uopviz"


def _load_cached(path: Path) -> dict[str, ast.Module] | None:
    try:
        with path.open("rb") as stream:
            modules = pickle.load(stream)
    except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError, TypeError, ValueError):
        return None
    return modules if isinstance(modules, dict) else None


def _store_cached(path: Path, modules: dict[str, ast.Module]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        with temporary.open("wb") as stream:
            pickle.dump(modules, stream, protocol=pickle.HIGHEST_PROTOCOL)
        temporary.replace(path)
    except OSError:
        pass  # a read-only home only costs the parse time next run


def stdlib_modules(reread: bool = False) -> dict[str, ast.Module]:
    """Every standard module, parsed (once per process; from the disk cache when fresh).
    ``reread``: forget this process's copy and read them again (the benchmark of the disk cache)."""
    global _stdlib
    if _stdlib is not None and not reread:
        return _stdlib
    with _lock:
        if _stdlib is not None and not reread:
            return _stdlib
        texts = {path.stem: path.read_text() for path in sorted(STDLIB_DIR.glob("*.sknd"))}
        files = {name: str(STDLIB_DIR / f"{name}.sknd") for name in texts}
        cache = _cache_dir() / f"nnef-stdlib-{_cache_key(texts)}.pickle"
        modules = _load_cached(cache)
        if modules is None or set(modules) != set(texts):
            modules = {name: parse_module(texts[name], files[name]) for name in texts}
            _store_cached(cache, modules)
        else:
            for name, text in texts.items():
                register_source(files[name], text)  # error excerpts quote the library's lines
        _stdlib = modules
        return modules


def stdlib_module(name: str) -> ast.Module:
    """The standard module ``name`` (KeyError when there is none)."""
    return stdlib_modules()[name]


def read_source_text(path: Path, position: ast.Position = ast.NOWHERE) -> str:
    """The UTF-8 text of a module file; an unreadable file or one that is not UTF-8 is an NNEFError (at
    the first bad byte's line and column, or at ``position``, the import, when the file is unreadable)."""
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise NNEFError.at(position, f"cannot read {path}: {error.strerror or error}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw.count(b"\n", 0, error.start) + 1
        column = error.start - (raw.rfind(b"\n", 0, error.start) + 1) + 1
        raise NNEFError(f"{path} is not UTF-8 text: byte 0x{raw[error.start]:02X} cannot start a "
                        f"character here", str(path), line, column) from None  # fmt: skip


class ModuleSet:
    """The modules one model can see: its folder's ``.sknd`` files and the standard library.

    ``root`` is the model folder (None for a lone text: only the standard library is importable).
    Modules are parsed on first use and kept.
    """

    def __init__(self, root: str | Path | None = None, lenient: bool = False) -> None:
        self.root = Path(root).resolve() if root is not None else None
        self.lenient = lenient
        self.modules: dict[str, ast.Module] = {}

    def add(self, name: str, module: ast.Module) -> None:
        """Register an already parsed module under ``name`` (the main module, for instance).

        Every module it imports must exist (§2.15), used or not: NNEFError at the first that does not.
        """
        self.modules[name] = module
        self._check_imports(module)

    def get(self, name: str, position: ast.Position = ast.NOWHERE) -> ast.Module:
        """The module imported as ``name``; NNEFError (at ``position``) when it does not exist."""
        module = self.modules.get(name)
        if module is not None:
            return module
        if not _MODULE_NAME.match(name):
            raise NNEFError.at(position, f"'{name}' is not a valid module name")
        path = self._local_path(name, position)
        if path is not None:
            module = parse_module(read_source_text(path, position), str(path), lenient=self.lenient)
            self.add(name, module)
            return module
        library = stdlib_modules()
        if name not in library:
            raise self._unknown_module(name, library, position)
        module = library[name]
        self.modules[name] = module
        return module

    def _check_imports(self, module: ast.Module) -> None:
        # Registered before its imports are followed, so modules that import each other terminate.
        for item in module.imports:
            self.get(item.module, item.pos)

    def _unknown_module(self, name: str, library: dict[str, ast.Module], position: ast.Position) -> NNEFError:
        where = f"no {Path(*name.split('.'))}.sknd in {self.root} and " if self.root is not None else ""
        close = difflib.get_close_matches(name, list(library), n=3)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        return NNEFError.at(
            position,
            f"unknown module '{name}': {where}no standard module of that name "
            f"(standard modules: {', '.join(sorted(library))}){hint}",
        )

    def _local_path(self, name: str, position: ast.Position) -> Path | None:
        if self.root is None:
            return None
        path = (self.root / Path(*name.split("."))).with_suffix(".sknd").resolve()
        if self.root not in path.parents:
            raise NNEFError.at(position, f"module '{name}' resolves outside the model folder {self.root}")
        return path if path.is_file() else None
