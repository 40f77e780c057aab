"""A disk cache of loaded NNEF graphs: a warm ``uv.nnef.load`` skips parsing and composing.

Loading DenseNet-121 (NNEF 1.0, 913 operations) parses its graph, translates it to SkriptND,
parses that and composes every operation: about 2.4 s, where its whole-program cache hit
(:mod:`uopviz.nnef.program.program_cache`) then compiles it in 0.5 s.  This cache keeps the composed
graph, pickled, under ``$UOPVIZ_CACHE/nnef-graphs/<key>.pickle``.

- **Key**: the path as resolved, the loader's options (``graph``, ``attribs``, ``lenient``) and
  uopviz's own sources (:func:`~uopviz.backends.cache.package_digest`).
- **Validity**: the entry holds a snapshot of the model's folder, every file under it with its size,
  modification time and inode; a hit needs the folder as it was.  The file system stamps
  modification times from a coarse clock (a few milliseconds), so a file rewritten within one tick
  of the load could keep its stamp: a file written less than :data:`SETTLED_SECONDS` before the
  entry is stored has its content hash stored too, checked on every hit (a model folder written
  just before its first load: DenseNet-121's 32 MB hash in about 20 ms).
- **Data** is not copied into the cache: the arrays the loader read from ``.dat`` files are stored
  as the call that read them and read again on a hit (memory-mapped, as a cold load maps them).
- **Side effects** of a load are replayed on a hit: the source texts registered for error excerpts
  (:func:`uopviz.nnef.errors.register_source`); both are noted while a load is recorded
  (:mod:`uopviz.nnef.load_recording`).

Archives (``.tgz``) and ``loads(text)`` are not cached; nor is a folder with more than
:data:`MAX_FILES` files, or a graph that does not pickle.  An entry that cannot be read back (a
class moved, a truncated file) is a miss and is rewritten.  ``UOPVIZ_LOAD_CACHE=0`` turns the
cache off.
"""

from __future__ import annotations

import copyreg
import functools
import hashlib
import io
import os
import pickle
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from uopviz.backends.cache import cache_dir, package_digest, plain_data, replace_atomically
from uopviz.nnef.composition.stdlib import stdlib_modules
from uopviz.nnef.errors import register_source
from uopviz.nnef.load_recording import Recording, recorded
from uopviz.nnef.syntax import ast

__all__ = ["cached_load", "enabled"]

#: the folder of the cache below ``cache_dir()``
NAMESPACE = "nnef-graphs"
#: bumped when an entry changes shape (older entries then fail to load and are rewritten)
FORMAT = 1
#: the environment variable that turns the cache off (``0``)
SWITCH = "UOPVIZ_LOAD_CACHE"
#: a folder with more files than this is not snapshotted (a model beside a home folder's contents)
MAX_FILES = 20_000
#: a file written less than this long before an entry is stored is checked by its content (seconds)
SETTLED_SECONDS = 2.0

#: every file under a folder: (relative path, size, modification time in ns, inode), sorted
Snapshot = tuple[tuple[str, int, int, int], ...]
#: what an entry checks: the folder's snapshot and the content hash of each file written just before
Validity = tuple[Snapshot, dict[str, str]]


def enabled() -> bool:
    """Whether loads are cached (``UOPVIZ_LOAD_CACHE`` is not ``0``)."""
    return os.environ.get(SWITCH, "1").strip() not in ("0", "false", "no", "off")


def cached_load(path: Path, folder: Path, options: Mapping[str, Any], load: Callable[[], Any]) -> Any:
    """The graph ``load()`` makes of ``path`` (its model folder ``folder``), from the cache when an
    entry for the same path, options and folder contents is there; else loaded and stored."""
    key = _key(path, options) if enabled() else None
    snapshot = _snapshot(folder) if key is not None else None
    if key is None or snapshot is None:
        return load()
    found = _read_entry(key, folder, snapshot)
    if found is not None:
        graph, recomposes = found
        graph.recompose = functools.partial(_recompose_afresh, load) if recomposes else None
        return graph
    with recorded() as recording:
        graph = load()
    _write_entry(key, (snapshot, _unsettled_hashes(folder, snapshot, time.time_ns())), graph, recording)
    return graph


# ---------------------------------------------------------------------------------------------
# keys and snapshots


def _key(path: Path, options: Mapping[str, Any]) -> str | None:
    """The entry's key; None when an option is not plain data (its repr would not be its content)."""
    if not plain_data(dict(options)):
        return None
    digest = hashlib.sha256()
    for part in (f"format {FORMAT}", package_digest(), str(path.resolve()), repr(sorted(options.items()))):
        data = part.encode()
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


def _snapshot(folder: Path) -> Snapshot | None:
    """Every file under ``folder`` as ``(relative path, size, modification time ns, inode)``,
    sorted (the cache's own folder left out); None for a folder with more than :data:`MAX_FILES`
    files, one that cannot be read, or a cache folder that cannot be made (a read-only home: the
    load runs uncached)."""
    found: list[tuple[str, int, int, int]] = []
    pending = [folder]
    try:
        own = os.path.realpath(cache_dir())  # a cache inside the model folder is not part of the model
        while pending:
            with os.scandir(pending.pop()) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        if os.path.realpath(entry.path) != own:
                            pending.append(Path(entry.path))
                        continue
                    status = entry.stat()
                    found.append((os.path.relpath(entry.path, folder), status.st_size, status.st_mtime_ns,
                                  status.st_ino))
                    if len(found) > MAX_FILES:
                        return None
    except OSError:
        return None
    return tuple(sorted(found))


def _unsettled(snapshot: Snapshot, now_ns: int) -> list[str]:
    """The files of ``snapshot`` written less than :data:`SETTLED_SECONDS` before ``now_ns`` (their
    stamps alone could miss a rewrite within the same clock tick)."""
    limit = now_ns - int(SETTLED_SECONDS * 1e9)
    return [name for name, _, modified, _ in snapshot if modified > limit]


def _unsettled_hashes(folder: Path, snapshot: Snapshot, now_ns: int) -> dict[str, str]:
    """The content hash of each file of ``snapshot`` that has not settled at ``now_ns``."""
    return {name: _file_hash(folder / name) for name in _unsettled(snapshot, now_ns)}


def _file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        while chunk := stream.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _still_valid(folder: Path, snapshot: Snapshot, validity: Validity) -> bool:
    """Whether the folder, now ``snapshot``, is as the entry saw it: the same files, sizes, stamps and
    inodes, and the same contents of those it hashed."""
    stored, hashes = validity
    if stored != snapshot:
        return False
    try:
        return all(_file_hash(folder / name) == digest for name, digest in hashes.items())
    except OSError:
        return False


# ---------------------------------------------------------------------------------------------
# entries


class _GraphPickler(pickle.Pickler):
    """Pickles by reference what this process has already or can read again, through a dispatch
    table (a ``persistent_id`` would be a Python call per object: DenseNet-121's graph took 0.9 s
    to pickle that way):

    - an array a data file gave: as the call that read it (read again on a hit);
    - a standard module and each of its definitions: by name (the process parses them once,
      :func:`~uopviz.nnef.composition.stdlib.stdlib_modules`; operations keep pointing into them).
    """

    def __init__(self, stream: io.BytesIO, recording: Recording) -> None:
        super().__init__(stream, protocol=pickle.HIGHEST_PROTOCOL)
        reads = recording.reads
        standard = _standard_objects()

        def array(obj: np.ndarray) -> Any:
            read = reads.get(id(obj))
            if read is not None and read[0] is obj:
                return read[1], read[2]
            return obj.__reduce_ex__(pickle.HIGHEST_PROTOCOL)

        def by_name(obj: Any) -> Any:
            where = standard.get(id(obj))
            if where is not None:
                return _standard_object, where
            return obj.__reduce_ex__(pickle.HIGHEST_PROTOCOL)

        self.dispatch_table = {
            **copyreg.dispatch_table,
            np.ndarray: array,
            np.memmap: array,
            ast.Module: by_name,
            ast.Definition: by_name,
        }


def _standard_objects() -> dict[int, tuple[str, int | None]]:
    """The standard modules of this process (``(name, None)``) and their definitions (``(name,
    position)``), by ``id``."""
    found: dict[int, tuple[str, int | None]] = {}
    for name, module in stdlib_modules().items():
        found[id(module)] = (name, None)
        for position, definition in enumerate(module.definitions):
            found[id(definition)] = (name, position)
    return found


def _standard_object(name: str, position: int | None) -> Any:
    """A standard module (``position`` None) or one of its definitions, as this process parsed it."""
    module = stdlib_modules()[name]
    return module if position is None else module.definitions[position]


def _entry_path(key: str) -> Path:
    return cache_dir() / NAMESPACE / f"{key}.pickle"


def _write_entry(key: str, validity: Validity, graph: Any, recording: Recording) -> None:
    """Store ``graph``; a graph that does not pickle or a folder that cannot be written only costs
    the next load its time."""
    recompose = getattr(graph, "recompose", None)
    stream = io.BytesIO()
    try:
        graph.recompose = None  # a closure over the parsed modules: made again on a hit
        _GraphPickler(stream, recording).dump((recording.sources, recompose is not None, graph))
    except (pickle.PicklingError, TypeError, AttributeError, RecursionError):
        return
    finally:
        graph.recompose = recompose
    _write_bytes(key, validity, stream.getvalue())


def _write_bytes(key: str, validity: Validity, payload: bytes) -> None:
    """The entry ``key``: the folder's validity first, on its own (a stale entry is found out before
    the graph is read), then the pickled graph; written atomically, and a cache folder that cannot
    be written is left alone."""
    data = pickle.dumps((FORMAT, validity, payload), protocol=pickle.HIGHEST_PROTOCOL)
    path = _entry_path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_atomically(path, lambda temporary: temporary.write_bytes(data))
    except OSError:
        return


def _read_entry(key: str, folder: Path, snapshot: Snapshot) -> tuple[Any, bool] | None:
    """The graph stored under ``key`` when ``folder`` (now ``snapshot``) is as the entry saw it, and
    whether it had a ``recompose``; None otherwise."""
    try:
        data = _entry_path(key).read_bytes()
    except OSError:
        return None
    try:
        entry_format, validity, payload = pickle.loads(data)
        if entry_format != FORMAT or not _still_valid(folder, snapshot, validity):
            return None
        sources, recomposes, graph = pickle.loads(payload)
    except Exception:  # noqa: BLE001 - any unreadable entry (truncated, stale classes, a data file gone) is a miss
        return None
    if validity[1] and not _unsettled(snapshot, time.time_ns()):
        # the hashed files matched and have settled since: a later rewrite gets a later stamp, so
        # the stamps alone check them from now on (a model written just before its first load is
        # not hashed on every load: VGG-16's 528 MB)
        _write_bytes(key, (snapshot, {}), payload)
    for file, text in sources.items():
        register_source(file, text)
    return graph, recomposes


def _recompose_afresh(load: Callable[[], Any], shapes: Any, progress: Any = None) -> Any:
    """A cached graph's ``recompose(shapes)``: the model loaded again without the cache, composed for
    ``shapes`` (composing for new shapes is rare: the parse it needs is made then)."""
    return load().recompose(shapes, progress)
