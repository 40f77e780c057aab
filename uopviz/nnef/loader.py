"""Loading NNEF models: ``load(path)`` and ``loads(text)``.

``load`` accepts

- a SkriptND file (``model.sknd``): its folder is the model folder (imports and data files are
  looked up there);
- a SkriptND model folder: ``main.sknd`` (the main module, §2.15), further modules (``a/b.sknd``
  for ``import a.b``), and tensor data: each variable ``name`` (qualified by labels, e.g.
  ``conv1.filter``) is read from ``name.dat`` next to ``main.sknd`` (``conv1/filter.dat`` is
  accepted too);
- an NNEF 1.0 folder (``graph.nnef`` and ``.dat`` files named by the variables' labels), read by
  the ``nnef`` package's parser and mapped onto the same graph model (:mod:`uopviz.nnef.nnef1`);
- a ``.tgz`` / ``.tar.gz`` of either (unpacked to a temporary folder; members that would land
  outside it, links and devices are refused).

The graph's variables get the data of their files; missing files leave them without data
(``Graph.run`` then wants them by name). Every problem is an :class:`NNEFError`.
"""

from __future__ import annotations

import os
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from uopviz.core.progress import progress_reporter
from uopviz.nnef.composer import Composer
from uopviz.nnef.data import read_tensor
from uopviz.nnef.errors import NNEFError
from uopviz.nnef.graph import Graph, TensorInfo
from uopviz.nnef.parser import parse_module
from uopviz.nnef.stdlib_loader import ModuleSet

__all__ = ["load", "loads"]

_ARCHIVE_SUFFIXES = (".tgz", ".tar.gz", ".tar")


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
    appears when composing takes more than a second."""
    path = Path(path)
    if not path.exists():
        raise NNEFError(f"no such file or folder: {path}")
    if path.is_file() and path.name.endswith(_ARCHIVE_SUFFIXES):
        return _load_archive(path, graph, attribs, lenient, progress)
    if path.is_dir():
        if (path / "main.sknd").is_file():
            return _load_folder(path, path / "main.sknd", graph, attribs, lenient, progress)
        if (path / "graph.nnef").is_file():
            from uopviz.nnef.nnef1 import load_nnef1

            return load_nnef1(path, attribs=attribs, progress=progress)
        raise NNEFError(
            f"{path} is neither a SkriptND model folder (no main.sknd) nor an NNEF 1.0 folder (no graph.nnef)"
        )
    if path.suffix == ".nnef":
        from uopviz.nnef.nnef1 import load_nnef1

        return load_nnef1(path, attribs=attribs, progress=progress)
    return _load_folder(path.parent, path, graph, attribs, lenient, progress)


def _load_folder(
    root: Path,
    main: Path,
    graph: str | None,
    attribs: Mapping[str, Any] | None,
    lenient: bool,
    progress: Any = None,
) -> Graph:
    modules = ModuleSet(root, lenient=lenient)
    try:
        text = main.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise NNEFError(f"cannot read {main}: {error}") from error
    modules.add("main", parse_module(text, str(main), lenient=lenient))
    data_root = root.resolve()
    return _compose(
        modules,
        graph,
        attribs,
        lambda name, info: _variable_data(data_root, name),
        source=main,
        progress=progress,
    )


def _variable_data(root: Path, name: str) -> np.ndarray | None:
    """The data of variable ``name``: ``<name>.dat`` or ``<a>/<b>.dat`` for ``a.b``, inside ``root``."""
    candidates = [root / f"{name}.dat", (root / Path(*name.split("."))).with_suffix(".dat")]
    for candidate in candidates:
        resolved = candidate.resolve()
        if root != resolved and root not in resolved.parents:
            raise NNEFError(f"the data file of variable '{name}' would lie outside the model folder {root}")
        if resolved.is_file():
            return read_tensor(resolved)
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


def _load_archive(
    path: Path, graph: str | None, attribs: Mapping[str, Any] | None, lenient: bool, progress: Any = None
) -> Graph:
    with tempfile.TemporaryDirectory(prefix="uopviz-nnef-") as folder:
        target = Path(folder).resolve()
        try:
            with tarfile.open(path) as archive:
                members = archive.getmembers()
                for member in members:
                    destination = (target / member.name).resolve()
                    if target != destination and target not in destination.parents:
                        raise NNEFError(
                            f"archive member '{member.name}' would be written outside the extraction folder",
                            str(path),
                        )
                    if not (member.isfile() or member.isdir()):
                        raise NNEFError(
                            f"archive member '{member.name}' is a link or device; only files and "
                            f"folders are allowed",
                            str(path),
                        )
                archive.extractall(target, members=members, filter="data")
        except (tarfile.TarError, OSError, EOFError) as error:
            raise NNEFError(f"cannot unpack {path}: {error}", str(path)) from error
        root = _model_root(target, path)
        loaded = load(root, graph=graph, attribs=attribs, lenient=lenient, progress=progress)
        _keep_data_in_memory(loaded)
        return loaded


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
