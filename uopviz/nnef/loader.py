"""Loading NNEF models: ``load(path)`` and ``loads(text)``.

``load`` accepts

- a SkriptND file (``model.sknd``): its folder is the model folder (imports and data files are
  looked up there);
- a SkriptND model folder: ``main.sknd`` (the main module, §2.15), further modules (``a/b.sknd``
  for ``import a.b``), and tensor data: each variable ``name`` (qualified by labels, e.g.
  ``conv1.filter``) is read from ``name.dat`` next to ``main.sknd`` (``conv1/filter.dat`` is
  accepted too);
- an NNEF 1.0 folder (``graph.nnef`` and ``.dat`` files named by the variables' labels), read by
  the ``nnef`` package's parser and mapped onto the same graph model (:mod:`uopviz.nnef.nnef1.loader`);
- a ``.tgz`` / ``.tar.gz`` of either (unpacked to a temporary folder; members that would land
  outside it, links and devices are refused; source members are capped in size and data members
  are unpacked only when a variable reads them, within the memory limit).

The graph's variables get the data of their files; missing files leave them without data
(``Graph.run`` then wants them by name). Every problem is an :class:`NNEFError`.
"""

from __future__ import annotations

import lzma
import os
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from uopviz.core.collector import collector_paused
from uopviz.core.limits import MemoryLimitError, check_allocation
from uopviz.core.progress import progress_reporter
from uopviz.nnef.composition.composer import Composer
from uopviz.nnef.composition.stdlib import ModuleSet, read_source_text
from uopviz.nnef.data import inside_folder, read_tensor, read_variable
from uopviz.nnef.errors import NNEFError
from uopviz.nnef.graph import Graph, TensorInfo
from uopviz.nnef.load_cache import cached_load
from uopviz.nnef.syntax.parser import parse_module

__all__ = ["load", "loads"]

_ARCHIVE_SUFFIXES = (".tgz", ".tar.gz", ".tar")
#: Brings a data file of an archive into the model folder before it is read.
Fetch = Callable[[Path], None]


@collector_paused()
def loads(
    text: str,
    *,
    graph: str | None = None,
    attribs: Mapping[str, Any] | None = None,
    file: str = "<string>",
    lenient: bool = False,
    variables: Mapping[str, np.ndarray] | None = None,
    progress: Any = None,
) -> Graph:
    """Compose the first (or the named) graph of SkriptND ``text``; it may import standard modules.

    ``variables`` gives data for variables by (qualified) name. ``progress`` as in
    :mod:`uopviz.core.progress` (a bar over the graph's statements when composing takes a while).
    """
    modules = ModuleSet(None, lenient=lenient)
    modules.add("main", parse_module(text, file, lenient=lenient))
    given = dict(variables or {})
    return _compose(
        modules, graph, attribs, lambda name, info: given.get(name), source=text, progress=progress
    )


@collector_paused()  # a model's parsed and composed objects live as long as it does (core.collector)
def load(
    path: str | os.PathLike,
    *,
    graph: str | None = None,
    attribs: Mapping[str, Any] | None = None,
    lenient: bool = False,
    progress: Any = None,
) -> Graph:
    """Load a SkriptND file or model folder, an NNEF 1.0 folder, or a .tgz of either.

    ``progress`` as in :mod:`uopviz.core.progress`: by default a bar over the graph's statements
    appears when composing takes more than a second.  A file or folder loaded before, unchanged
    since, is read back from the disk cache of composed graphs (:mod:`uopviz.nnef.load_cache`)."""
    path = Path(path)
    if not path.exists():
        raise NNEFError(f"no such file or folder: {path}")
    if path.is_file() and path.name.endswith(_ARCHIVE_SUFFIXES):
        return _load_archive(path, graph, attribs, lenient, progress)
    # a warm load reads the composed graph back (uopviz.nnef.load_cache)
    options = {"graph": graph, "attribs": dict(attribs) if attribs else None, "lenient": lenient}
    return cached_load(path, path if path.is_dir() else path.parent, options,
                       lambda: _load_path(path, graph, attribs, lenient, None, progress))


def _load_path(
    path: Path,
    graph: str | None,
    attribs: Mapping[str, Any] | None,
    lenient: bool,
    fetch: Fetch | None,
    progress: Any = None,
) -> Graph:
    """A model file or folder; ``fetch`` (archives) brings a data file into the folder when it is read."""
    if path.is_dir():
        if (path / "main.sknd").is_file():
            return _load_folder(path, path / "main.sknd", graph, attribs, lenient, fetch, progress)
        if (path / "graph.nnef").is_file():
            from uopviz.nnef.nnef1.loader import load_nnef1

            return load_nnef1(path, attribs=attribs, fetch=fetch, progress=progress)
        raise NNEFError(
            f"{path} is neither a SkriptND model folder (no main.sknd) nor an NNEF 1.0 folder (no graph.nnef)"
        )
    if path.suffix == ".nnef":
        from uopviz.nnef.nnef1.loader import load_nnef1

        return load_nnef1(path, attribs=attribs, fetch=fetch, progress=progress)
    return _load_folder(path.parent, path, graph, attribs, lenient, fetch, progress)


def _load_folder(
    root: Path,
    main: Path,
    graph: str | None,
    attribs: Mapping[str, Any] | None,
    lenient: bool,
    fetch: Fetch | None = None,
    progress: Any = None,
) -> Graph:
    modules = ModuleSet(root, lenient=lenient)
    text = read_source_text(main)
    modules.add("main", parse_module(text, str(main), lenient=lenient))
    data_root = root.resolve()
    return _compose(
        modules,
        graph,
        attribs,
        lambda name, info: _variable_data(data_root, name, fetch, info),
        source=main,
        progress=progress,
    )


def _variable_data(root: Path, name: str, fetch: Fetch | None = None, info: TensorInfo | None = None
                   ) -> np.ndarray | None:
    """The data of variable ``name``: ``<name>.dat`` or ``<a>/<b>.dat`` for ``a.b``, inside ``root``;
    with its declaration ``info``, a header that contradicts it is an NNEFError naming the file."""
    candidates = [root / f"{name}.dat", (root / Path(*name.split("."))).with_suffix(".dat")]
    for candidate in candidates:
        if fetch is not None:
            fetch(candidate)
        resolved = inside_folder(root, candidate, f"the data file of variable '{name}'")
        if resolved.is_file():
            if info is None:
                return read_tensor(resolved)
            return read_variable(resolved, info.dtype, info.shape, f"variable '{name}'")
    return None


def _compose(
    modules: ModuleSet,
    graph: str | None,
    attribs: Mapping[str, Any] | None,
    loader: Any,
    source: Any,
    progress: Any = None,
) -> Graph:
    def compose_for(shapes: Mapping[str, tuple[int, ...]] | None, progress: Any = None) -> Graph:
        with progress_reporter(progress, 0, "composing") as report:
            composed = Composer(modules, loader, report).compose("main", graph, attribs, shapes)
        composed.source = source
        composed.recompose = compose_for
        return composed

    return compose_for(None, progress)


#: The largest archive member read as text (a module, graph or quantization file); data members are
#: bounded by the memory limit (uopviz.core.limits), and only those a variable reads are extracted.
MAX_TEXT_MEMBER_BYTES = 64 << 20
#: The most members an archive may list.
MAX_ARCHIVE_MEMBERS = 100_000
#: What a damaged compressed stream raises while it is read.
_ARCHIVE_ERRORS = (tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError, ValueError)


class _ArchiveFolder:
    """An archive's members checked (names, kinds, sizes) and unpacked into ``target`` on demand: text
    members at once, a data member when a variable reads it, so unused members never take disk or
    memory."""

    def __init__(self, archive: tarfile.TarFile, path: Path, target: Path) -> None:
        self.archive, self.path, self.target = archive, path, target
        self.members: dict[Path, tarfile.TarInfo] = {}
        for count, member in enumerate(archive, start=1):
            if count > MAX_ARCHIVE_MEMBERS:
                raise NNEFError(f"archive lists more than {MAX_ARCHIVE_MEMBERS} members", str(path))
            self.members[self._destination(member)] = member

    def _destination(self, member: tarfile.TarInfo) -> Path:
        destination = (self.target / member.name).resolve()
        if self.target != destination and self.target not in destination.parents:
            raise NNEFError(
                f"archive member '{member.name}' would be written outside the extraction folder",
                str(self.path),
            )
        if not (member.isfile() or member.isdir()):
            raise NNEFError(
                f"archive member '{member.name}' is a link or device; only files and folders are allowed",
                str(self.path),
            )
        return destination

    def unpack_texts(self) -> None:
        """Create the folders and unpack every member that is not a ``.dat`` data file."""
        for destination, member in self.members.items():
            if member.isdir():
                destination.mkdir(parents=True, exist_ok=True)
            elif destination.suffix != ".dat":
                if member.size > MAX_TEXT_MEMBER_BYTES:
                    raise NNEFError(
                        f"archive member '{member.name}' holds {member.size} bytes, over the "
                        f"{MAX_TEXT_MEMBER_BYTES} a source file may have",
                        str(self.path),
                    )
                self._unpack(member, destination)

    def fetch(self, candidate: Path) -> None:
        """Unpack the data member that lands at ``candidate`` (if any, and not yet unpacked)."""
        try:
            destination = candidate.resolve()
        except (OSError, RuntimeError):
            return  # inside_folder reports it
        member = self.members.get(destination)
        if member is None or not member.isfile() or destination.exists():
            return
        try:
            check_allocation(member.size, f"archive member '{member.name}'")
        except MemoryLimitError as error:
            raise NNEFError(str(error), str(self.path)) from None
        self._unpack(member, destination)

    def _unpack(self, member: tarfile.TarInfo, destination: Path) -> None:
        destination.parent.mkdir(parents=True, exist_ok=True)
        try:
            source = self.archive.extractfile(member)
            with source, destination.open("wb") as stream:
                shutil.copyfileobj(source, stream)
        except _ARCHIVE_ERRORS as error:
            message = f"cannot unpack '{member.name}' from {self.path}: {error}"
            raise NNEFError(message, str(self.path)) from None


def _load_archive(
    path: Path, graph: str | None, attribs: Mapping[str, Any] | None, lenient: bool, progress: Any = None
) -> Graph:
    with tempfile.TemporaryDirectory(prefix="uopviz-nnef-") as folder:
        target = Path(folder).resolve()
        try:
            with tarfile.open(path) as archive:
                unpacked = _ArchiveFolder(archive, path, target)
                unpacked.unpack_texts()
                root = _model_root(target, path)
                loaded = _load_path(root, graph, attribs, lenient, unpacked.fetch, progress)
                _keep_data_in_memory(loaded)
                return loaded
        except _ARCHIVE_ERRORS as error:
            raise NNEFError(f"cannot unpack {path}: {error}", str(path)) from None


def _model_root(target: Path, archive: Path) -> Path:
    """The folder holding main.sknd or graph.nnef: the archive's root or its single sub-folder."""
    for candidate in [target, *sorted(p for p in target.iterdir() if p.is_dir())]:
        if (candidate / "main.sknd").is_file() or (candidate / "graph.nnef").is_file():
            return candidate
    raise NNEFError(
        f"{archive} holds neither main.sknd nor graph.nnef (at its root or in one folder)", str(archive)
    )


def _keep_data_in_memory(graph: Graph) -> None:
    """Once the temporary folder is gone, a recomposition must not read files from it."""
    data = {
        name: info.data
        for name, info in graph.tensors.items()
        if info.kind == "variable" and info.data is not None
    }
    recompose = graph.recompose
    if recompose is None:
        return

    def from_memory(shapes: Any) -> Graph:
        composed = recompose(shapes)
        for name, array in data.items():
            tensor: TensorInfo | None = composed.tensors.get(name)
            if tensor is not None and tensor.data is None:
                tensor.data = array
        return composed

    graph.recompose = from_memory
