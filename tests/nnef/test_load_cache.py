"""The disk cache of composed graphs (uopviz.nnef.load_cache): a folder loaded again, unchanged,
comes back from the cache as the graph a cold load makes (same tensors, data, operations and
values when run); any change to a file (even one within the file system's clock tick), to the
options or to the entry misses; the data is read from the model's files again, not from the cache."""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest

import uopviz as uv
from uopviz.nnef import load_cache, loader
from uopviz.nnef.data import write_tensor
from uopviz.nnef.errors import NNEFError, source_line

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import zoo  # noqa: E402

TINY = """
version 1.0;

graph tiny( x ) -> ( y )
{{
    x = external<scalar>(shape = [1, 4, 6, 6]);
    w = variable<scalar>(shape = [{channels}, 4, 3, 3], label = 'w');
    b = variable<scalar>(shape = [1, {channels}], label = 'b');
    c = conv(x, w, b, padding = [(1, 1), (1, 1)]);
    y = relu(add(c, {offset}));
}}
"""
HOUR_NS = 3600 * 10**9


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Every test starts with an empty cache folder of its own, the cache switched on."""
    monkeypatch.setenv("UOPVIZ_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(load_cache.SWITCH, raising=False)


@pytest.fixture
def cold_loads(monkeypatch):
    """The number of loads that read the model's files (cache misses), counted."""
    calls = []
    original = loader._load_path

    def counted(*arguments, **keywords):
        calls.append(arguments[0])
        return original(*arguments, **keywords)

    monkeypatch.setattr(loader, "_load_path", counted)
    return calls


def _tiny_folder(root: Path, channels: int = 3, offset: str = "0.5", seed: int = 0, age_ns: int = HOUR_NS
                 ) -> Path:
    """A small NNEF 1.0 folder; its files stamped ``age_ns`` in the past (0: as written)."""
    folder = root / "tiny"
    folder.mkdir(exist_ok=True)
    (folder / "graph.nnef").write_text(TINY.format(channels=channels, offset=offset))
    rng = np.random.default_rng(seed)
    write_tensor(folder / "w.dat", rng.standard_normal((channels, 4, 3, 3)).astype(np.float32))
    write_tensor(folder / "b.dat", rng.standard_normal((1, channels)).astype(np.float32))
    if age_ns:
        _stamp_all(folder, age_ns)
    return folder


def _stamp_all(folder: Path, age_ns: int) -> None:
    stamp = os.stat(folder).st_mtime_ns - age_ns
    for path in folder.iterdir():
        os.utime(path, ns=(stamp, stamp))


def _entries() -> list[Path]:
    return sorted((Path(os.environ["UOPVIZ_CACHE"]) / load_cache.NAMESPACE).glob("*.pickle"))


def _reference(folder: Path, x: np.ndarray) -> np.ndarray:
    """The tiny graph by numpy, from the folder's current files."""
    from uopviz.nnef.data import read_tensor

    w, b = read_tensor(folder / "w.dat"), read_tensor(folder / "b.dat")
    offset = float((folder / "graph.nnef").read_text().split("add(c, ")[1].split(")")[0])
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    conv = np.einsum("nchwij,ocij->nohw", windows, w) + b.reshape(1, -1, 1, 1)
    return np.maximum(conv + offset, 0)


def _run(graph, x: np.ndarray, backend: str = "python") -> np.ndarray:
    return graph.run({graph.inputs[0]: x}, backend=backend)[graph.outputs[0]]


def _same_graph(a, b) -> None:
    assert (a.name, a.inputs, a.outputs) == (b.name, b.inputs, b.outputs)
    assert list(a.tensors) == list(b.tensors)
    for name, info in a.tensors.items():
        other = b.tensors[name]
        assert (info.kind, info.dtype, info.shape) == (other.kind, other.dtype, other.shape), name
        if info.data is None:
            assert other.data is None, name
        else:
            np.testing.assert_array_equal(np.asarray(info.data), np.asarray(other.data), err_msg=name)
    assert [(op.type, op.label, op.attribs, op.inputs, op.outputs) for op in a.operations] == [
        (op.type, op.label, op.attribs, op.inputs, op.outputs) for op in b.operations
    ]


@pytest.mark.parametrize("channels", [2, 5])
def test_a_folder_loaded_again_comes_from_the_cache_as_the_cold_load_made_it(tmp_path, cold_loads, channels):
    folder = _tiny_folder(tmp_path, channels=channels, seed=channels)
    cold = uv.nnef.load(folder)
    assert len(_entries()) == 1 and len(cold_loads) == 1
    warm = uv.nnef.load(folder)
    assert len(cold_loads) == 1, "the second load read the model's files"
    assert warm is not cold
    _same_graph(cold, warm)
    x = np.random.default_rng(channels).standard_normal((1, 4, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(_run(warm, x), _reference(folder, x), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(_run(warm, x), _run(cold, x))


def test_data_is_read_from_the_model_files_again_not_kept_in_the_cache(tmp_path):
    folder = _tiny_folder(tmp_path)
    uv.nnef.load(folder)
    entry = _entries()[0]
    weights = (folder / "w.dat").read_bytes()[128:]  # the items after the 128-byte header
    assert weights not in entry.read_bytes()
    warm = uv.nnef.load(folder)
    np.testing.assert_array_equal(np.asarray(warm.tensors["w"].data).tobytes(), weights)


def test_a_data_file_rewritten_within_the_same_clock_tick_misses(tmp_path, cold_loads):
    """Files written just before the first load: their stamps alone cannot tell a rewrite with the same
    size and stamp (the file system's clock is coarse), so their contents are checked."""
    folder = _tiny_folder(tmp_path, seed=1, age_ns=0)
    uv.nnef.load(folder)
    status = os.stat(folder / "w.dat")
    rng = np.random.default_rng(2)
    write_tensor(folder / "w.dat", rng.standard_normal((3, 4, 3, 3)).astype(np.float32))
    os.utime(folder / "w.dat", ns=(status.st_atime_ns, status.st_mtime_ns))  # the same stamp, same size
    assert os.stat(folder / "w.dat").st_ino == status.st_ino
    again = uv.nnef.load(folder)
    assert len(cold_loads) == 2
    x = np.random.default_rng(3).standard_normal((1, 4, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(_run(again, x), _reference(folder, x), rtol=1e-5, atol=1e-5)
    uv.nnef.load(folder)
    assert len(cold_loads) == 2, "the folder as the second load saw it is a hit"


@pytest.mark.parametrize("change", ["data", "graph", "new file", "removed file"])
def test_any_change_to_the_folder_misses(tmp_path, cold_loads, change):
    folder = _tiny_folder(tmp_path)
    uv.nnef.load(folder)
    if change == "data":
        write_tensor(folder / "b.dat", np.full((1, 3), 7, np.float32))
    elif change == "graph":
        (folder / "graph.nnef").write_text(TINY.format(channels=3, offset="2.5"))
    elif change == "new file":
        (folder / "notes.txt").write_text("a file the loader does not read still changes the folder")
    else:
        (folder / "b.dat").unlink()
    _stamp_all(folder, HOUR_NS // 2)  # stamps that are neither the old ones nor new
    again = uv.nnef.load(folder)
    assert len(cold_loads) == 2
    x = np.random.default_rng(4).standard_normal((1, 4, 6, 6)).astype(np.float32)
    if change == "removed file":
        assert again.tensors["b"].data is None
        with pytest.raises(NNEFError, match="'b'"):
            _run(again, x)
    else:
        np.testing.assert_allclose(_run(again, x), _reference(folder, x), rtol=1e-5, atol=1e-5)


def test_options_and_the_switch_are_part_of_the_key(tmp_path, cold_loads, monkeypatch):
    folder = _tiny_folder(tmp_path)
    uv.nnef.load(folder)
    uv.nnef.load(folder / "graph.nnef")  # the same model by its graph file: another path, another entry
    assert len(cold_loads) == 2 and len(_entries()) == 2
    uv.nnef.load(folder / "graph.nnef")
    assert len(cold_loads) == 2
    monkeypatch.setenv(load_cache.SWITCH, "0")
    uv.nnef.load(folder)
    assert len(cold_loads) == 3 and len(_entries()) == 2


def test_a_corrupt_or_foreign_entry_is_a_miss_and_is_written_again(tmp_path, cold_loads):
    folder = _tiny_folder(tmp_path)
    uv.nnef.load(folder)
    entry = _entries()[0]
    for damaged in (entry.read_bytes()[: entry.stat().st_size // 2], pickle.dumps("not an entry"), b""):
        entry.write_bytes(damaged)
        graph = uv.nnef.load(folder)
        x = np.ones((1, 4, 6, 6), np.float32)
        np.testing.assert_allclose(_run(graph, x), _reference(folder, x), rtol=1e-5, atol=1e-5)
    assert len(cold_loads) == 4
    uv.nnef.load(folder)
    assert len(cold_loads) == 4, "the last miss wrote a whole entry again"


def test_a_cached_load_registers_its_sources_for_error_excerpts(tmp_path, monkeypatch):
    from uopviz.nnef import errors

    folder = _tiny_folder(tmp_path)
    uv.nnef.load(folder)
    monkeypatch.setattr(errors, "_SOURCES", type(errors._SOURCES)())  # as in a new process
    monkeypatch.setattr(errors, "_LINES", {})
    uv.nnef.load(folder)
    graph_file = str(folder / "graph.nnef")
    assert source_line(graph_file, 2) == "version 1.0;"


def test_a_skriptnd_folder_comes_back_able_to_recompose(tmp_path, cold_loads):
    (tmp_path / "main.sknd").write_text(
        "import nn;\ngraph G { @input { x: real[s|16, 3]; } @variable { w: real[3, 3]; } "
        "@output { y: real[s, 3]; } @compose { z = nn.linear(x, w); y = nn.softmax(z); } }\n"
    )
    w = np.random.default_rng(5).standard_normal((3, 3)).astype(np.float32)
    write_tensor(tmp_path / "w.dat", w)
    _stamp_all(tmp_path, HOUR_NS)
    cold = uv.nnef.load(tmp_path)
    warm = uv.nnef.load(tmp_path)
    assert len(cold_loads) == 1
    for rows in (2, 5):
        x = np.random.default_rng(rows).standard_normal((rows, 3)).astype(np.float32)
        logits = x @ w.T
        e = np.exp(logits - logits.max(1, keepdims=True))
        expected = e / e.sum(1, keepdims=True)
        np.testing.assert_allclose(warm.run({"x": x})["y"], expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(cold.run({"x": x})["y"], expected, rtol=1e-5, atol=1e-6)


def test_a_zoo_model_comes_back_whole(tmp_path, cold_loads):
    """A network as the zoo writes it (blocked convolutions, residual adds, pooling): the warm graph
    compiles to the same kernels as the cold one and computes the same values on C."""
    from uopviz.backends import get

    folder = zoo.write_nnef1(zoo.BUILDERS["resnet18"](size=16, width=0.125), tmp_path / "resnet18")
    _stamp_all(folder, HOUR_NS)
    cold = uv.nnef.load(folder)
    warm = uv.nnef.load(folder)
    assert len(cold_loads) == 1
    _same_graph(cold, warm)
    backend = "c" if get("c").available() else "python"
    cold_program = cold.compile(backend, opts="heuristic", build=False)
    warm_program = warm.compile(backend, opts="heuristic", build=False)
    assert cold_program.sources == warm_program.sources
    x = np.random.default_rng(6).standard_normal(cold.tensors[cold.inputs[0]].shape).astype(np.float32)
    np.testing.assert_allclose(_run(warm, x, backend), _run(cold, x, backend), rtol=1e-5, atol=1e-6)


def test_hashed_files_are_checked_by_their_stamps_once_settled(tmp_path, cold_loads, monkeypatch):
    """A folder written just before its first load is checked by content; once a hit has found the
    contents unchanged and the files settled, the entry drops the hashes (a rewrite now gets a later
    stamp): a large model is not hashed on every load."""
    folder = _tiny_folder(tmp_path, age_ns=0)
    uv.nnef.load(folder)
    hashed = []
    file_hash = load_cache._file_hash
    monkeypatch.setattr(load_cache, "_file_hash", lambda path: hashed.append(path.name) or file_hash(path))
    uv.nnef.load(folder)  # not settled yet: checked by content, the hashes kept
    assert sorted(hashed) == ["b.dat", "graph.nnef", "w.dat"] and len(cold_loads) == 1
    monkeypatch.setattr(load_cache, "SETTLED_SECONDS", 0.0)  # as two seconds later
    hashed.clear()
    uv.nnef.load(folder)
    assert sorted(hashed) == ["b.dat", "graph.nnef", "w.dat"], "the last check by content"
    hashed.clear()
    graph = uv.nnef.load(folder)
    assert hashed == [] and len(cold_loads) == 1
    write_tensor(folder / "b.dat", np.full((1, 3), 2, np.float32))
    _stamp_all(folder, -HOUR_NS)  # a later stamp, as any rewrite after the check gets
    again = uv.nnef.load(folder)
    assert len(cold_loads) == 2
    x = np.ones((1, 4, 6, 6), np.float32)
    np.testing.assert_allclose(_run(again, x), _reference(folder, x), rtol=1e-5, atol=1e-5)
    assert graph is not again


def test_a_cache_folder_that_cannot_be_made_loads_uncached(tmp_path, monkeypatch, cold_loads):
    folder = _tiny_folder(tmp_path)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder would go")
    monkeypatch.setenv("UOPVIZ_CACHE", str(blocker / "cache"))
    x = np.ones((1, 4, 6, 6), np.float32)
    for _ in range(2):
        graph = uv.nnef.load(folder)
        np.testing.assert_allclose(_run(graph, x), _reference(folder, x), rtol=1e-5, atol=1e-5)
    assert len(cold_loads) == 2
