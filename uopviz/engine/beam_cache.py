"""BEAM's measurements kept in sqlite (``<cache>/beam.sqlite``), keyed by kernel key, backend,
device and opts, and by the code generator that made them (:func:`compiler_fingerprint`): searching
the same kernel again costs only the lookups."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from uopviz.engine.beam_results import Candidate
from uopviz.passes.optops.opts import Opt, opts_to_json


def _measured_on(device: str) -> str:
    return f"{device} | compiler {compiler_fingerprint()}"


@functools.cache
def compiler_fingerprint() -> str:
    """A hash of the code generator's own source (uopviz.core, .passes with its subpackages such as
    .passes.optops, .backends): a measurement made with other code — a changed heuristic, renderer or
    decomposition — is not reused."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for folder in ("core", "passes", "backends"):
        for path in sorted((root / folder).rglob("*.py")):
            digest.update(path.relative_to(root).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


class BeamCache:
    """Measured candidates by (kernel key, backend, device, opts) in ``<cache>/beam.sqlite``; the
    device column also names the :func:`compiler_fingerprint` the measurement was made with."""

    def __init__(self, path: str | os.PathLike | None = None):
        if path is None:
            from uopviz.backends.cache import cache_dir

            path = cache_dir() / "beam.sqlite"
        self.path = str(path)
        self._lock = threading.Lock()
        with self._connect() as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS candidates (kernel_key TEXT, backend TEXT, device TEXT, "
                "opts TEXT, name TEXT, uop_count INTEGER, compile_s REAL, run_s REAL, error TEXT, "
                "source_hash TEXT, measured_at REAL, PRIMARY KEY (kernel_key, backend, device, opts))"
            )

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30)

    def get(self, key: str, backend: str, device: str, opts: Sequence[Opt]) -> Candidate | None:
        """The cached measurement, or None."""
        text = json.dumps(opts_to_json(opts))
        with self._lock, self._connect() as db:
            row = db.execute(
                "SELECT name, uop_count, compile_s, run_s, error, source_hash FROM candidates WHERE "
                "kernel_key=? AND backend=? AND device=? AND opts=?",
                (key, backend, _measured_on(device), text),
            ).fetchone()
        if row is None:
            return None
        name, uop_count, compile_s, run_s, error, source_hash = row
        return Candidate(tuple(opts), name, 0, uop_count, compile_s, run_s, error, True, source_hash)

    def put(self, key: str, backend: str, device: str, candidate: Candidate) -> None:
        """Store one measurement (timeouts and crashes too: they would happen again)."""
        text = json.dumps(opts_to_json(candidate.opts))
        with self._lock, self._connect() as db:
            db.execute(
                "INSERT OR REPLACE INTO candidates VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    key,
                    backend,
                    _measured_on(device),
                    text,
                    candidate.name,
                    candidate.uop_count,
                    candidate.compile_s,
                    candidate.run_s,
                    candidate.error,
                    candidate.source_hash,
                    time.time(),
                ),
            )

    def count(self, key: str | None = None) -> int:
        """How many measurements are stored (for one kernel key, or all)."""
        with self._lock, self._connect() as db:
            if key is None:
                return db.execute("SELECT COUNT(*) FROM candidates").fetchone()[0]
            return db.execute("SELECT COUNT(*) FROM candidates WHERE kernel_key=?", (key,)).fetchone()[0]


__all__ = ["BeamCache", "compiler_fingerprint"]
