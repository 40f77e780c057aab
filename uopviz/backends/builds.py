"""Building a program's sources: each compiled once, side by side where the backend's builds are
processes of their own, several sources to one build where the backend takes them so.

The Render stage (``uopviz.passes.render``) submits each source as soon as it is rendered; the
kernel worker (``Worker.compile_many``) builds a report's sources the same way.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from uopviz.backends import get
from uopviz.backends.base import Backend


class SourceBuilds:
    """The builds of a program's sources: each ``(source, name)`` compiled once, in a thread per core
    from the moment it is submitted where the backend's builds run as processes of their own
    (``Backend.parallel_compile``) and ``parallel`` is True, else one after the other when the
    results are asked for; with ``build=False`` none.  A backend whose builds take several sources
    (``Backend.sources_per_build``) gets them that many at a time, the last ones shared out between
    the cores.  A context manager: leaving it waits for the builds still running."""

    def __init__(self, backend: str | Backend, build: bool = True, parallel: bool = True) -> None:
        self.backend = backend if isinstance(backend, Backend) else get(backend)
        self.build = build
        # (source, name) -> (the build making it, its position there); None: built when asked for
        self.pending: dict[tuple[str, str], tuple[Any, int] | None] = {}
        self.waiting: list[tuple[str, str]] = []  # submitted, for the next build of several sources
        self.cores = os.cpu_count() or 1
        parallel = parallel and build and self.backend.parallel_compile and self.cores > 1
        self.pool = ThreadPoolExecutor(self.cores, thread_name_prefix="uopviz-compile") if parallel else None

    def submit(self, source: str, name: str) -> None:
        """Compile ``source`` (started now when builds run in parallel, or once the backend's
        ``sources_per_build`` sources wait)."""
        if not self.build or (source, name) in self.pending:
            return
        self.pending[source, name] = None
        if self.pool is None:
            return
        self.waiting.append((source, name))
        if len(self.waiting) >= self.backend.sources_per_build:
            self._start(self.waiting)
            self.waiting = []

    def _start(self, builds: list[tuple[str, str]]) -> None:
        assert self.pool is not None
        future = self.pool.submit(self.backend.compile_together, builds)
        for position, key in enumerate(builds):
            self.pending[key] = (future, position)

    def results(self) -> dict[tuple[str, str], Any]:
        """Every submitted ``(source, name)``'s compiled kernel (a build's error raised here)."""
        waiting, self.waiting = self.waiting, []
        for share in range(min(self.cores, len(waiting))):  # the last ones: every core takes a share
            self._start(waiting[share::self.cores])
        return {
            key: entry[0].result()[entry[1]] if entry is not None else self.backend.compile(*key)
            for key, entry in self.pending.items()
        }

    def __enter__(self) -> SourceBuilds:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


def compile_sources(sources: Iterable[tuple[str, str]], backend: str | Backend) -> dict[tuple[str, str], Any]:
    """Each ``(source, name)`` compiled once, as :class:`SourceBuilds` builds them: in a thread per
    core when the backend's builds run as processes of their own (``Backend.parallel_compile``),
    several sources to a build where it takes them, else one after the other."""
    with SourceBuilds(backend) as builds:
        for source, name in sources:
            builds.submit(source, name)
        return builds.results()


__all__ = ["SourceBuilds", "compile_sources"]
