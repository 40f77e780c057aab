"""A disk cache of compiled objects, keyed by a hash of the source and everything that shapes the build.

The cache lives in ``$UOPVIZ_CACHE`` when set, else ``~/.cache/uopviz``.  Entries are written to a
temporary file and renamed into place, so several processes (a notebook, the timing worker, BEAM's
compile pool) can build the same kernel at once without ever reading a half-written file.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

_PACKAGE = Path(__file__).resolve().parents[1]
_package_digest: str | None = None


def package_digest() -> str:
    """A hash of uopviz's own sources (``*.py``, ``*.sknd``; computed once per process): a cache
    whose entries depend on the compiler itself (a whole compiled program, a composed graph) keys
    them by it, so any edit to uopviz misses."""
    global _package_digest
    if _package_digest is None:
        digest = hashlib.sha256()
        for path in sorted([*_PACKAGE.rglob("*.py"), *_PACKAGE.rglob("*.sknd")]):
            digest.update(str(path.relative_to(_PACKAGE)).encode())
            digest.update(path.read_bytes())
        _package_digest = digest.hexdigest()
    return _package_digest


def plain_data(value: Any, leaves: tuple[type, ...] = ()) -> bool:
    """Whether ``value`` is made of values whose repr is their whole content, so the repr can key a
    cache: None, strings, numbers, bools and ``leaves``, in lists, tuples and dicts."""
    if value is None or isinstance(value, (str, int, float, bool, *leaves)):
        return True
    if type(value) in (list, tuple):
        return all(plain_data(item, leaves) for item in value)
    if type(value) is dict:
        return all(plain_data(key, leaves) and plain_data(item, leaves) for key, item in value.items())
    return False


def cache_dir() -> Path:
    """The root of uopviz's on-disk caches (created on first use)."""
    root = os.environ.get("UOPVIZ_CACHE")
    path = Path(root).expanduser() if root else Path.home() / ".cache" / "uopviz"
    path.mkdir(parents=True, exist_ok=True)
    return path


def content_key(*parts: str | bytes | Iterable[str]) -> str:
    """A hex sha256 over ``parts`` (strings, bytes, or lists of strings such as compiler flags)."""
    digest = hashlib.sha256()
    for part in parts:
        if isinstance(part, str):
            data = part.encode()
        elif isinstance(part, bytes):
            data = part
        else:
            data = "\0".join(part).encode()
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


def cache_folder(namespace: str) -> Path:
    """The folder of the cache's ``namespace`` (created on first use)."""
    folder = cache_dir() / namespace
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def cached_path(namespace: str, key: str, suffix: str) -> Path:
    """Where the cached object ``namespace/key+suffix`` lives (the object may not exist yet)."""
    return cache_folder(namespace) / f"{key}{suffix}"


def cached_file(namespace: str, key: str, suffix: str, build: Callable[[Path], None]) -> tuple[Path, bool]:
    """The path of the cached object ``namespace/key+suffix``, building it with ``build(tmp_path)`` when
    missing.  Returns ``(path, was_cached)``.  ``build`` writes the object to the path it is given."""
    target = cached_path(namespace, key, suffix)
    if target.exists():
        return target, True
    replace_atomically(target, build)
    return target, False


def store_built_file(built: Path, namespace: str, key: str, suffix: str) -> Path:
    """``built`` (a file made beside the cache's ``namespace`` folder) cached under ``key`` as well:
    a hard link, so one build serves several keys without a copy (a copy where the filesystem has
    no hard links); placed atomically, as :func:`cached_file` places its builds."""
    target = cached_path(namespace, key, suffix)

    def place(temporary: Path) -> None:
        temporary.unlink()
        try:
            os.link(built, temporary)
        except OSError:
            shutil.copyfile(built, temporary)

    replace_atomically(target, place)
    return target


def replace_atomically(target: Path, build: Callable[[Path], None]) -> None:
    """``build(path)`` writes a file beside ``target`` that then replaces it in one step: a reader (a
    process of another worker) never sees half of it; the temporary file goes on failure."""
    prefix = f".{target.stem[:16]}-"
    handle, temporary = tempfile.mkstemp(prefix=prefix, suffix=target.suffix, dir=target.parent)
    os.close(handle)
    try:
        build(Path(temporary))
        os.replace(temporary, target)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def read_cached_bytes(
    namespace: str, key: str, suffix: str, build: Callable[[], bytes]
) -> tuple[bytes, bool]:
    """Bytes cached under ``namespace/key+suffix``, made by ``build()`` when missing."""

    def write(path: Path) -> None:
        path.write_bytes(build())

    path, was_cached = cached_file(namespace, key, suffix, write)
    return path.read_bytes(), was_cached
