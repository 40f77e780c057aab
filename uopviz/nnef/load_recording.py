"""What a load reads and registers besides the graph it builds, noted for the load cache.

The readers of data files (:func:`uopviz.nnef.data.read_tensor`) and the registry of source texts
(:func:`uopviz.nnef.errors.register_source`) report here; inside :func:`recorded` (an uncached
load that :mod:`uopviz.nnef.load_cache` is about to store) the reports are kept, so the cache
stores an array as the call that read it and replays the registrations on a hit.  A module of its
own, importing nothing of uopviz: the readers sit below the cache in the package's layers.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Recording", "note_read", "note_source", "recorded"]


@dataclass
class Recording:
    """What one uncached load did besides building the graph: the arrays it read from files (by
    ``id``: the array and the call that read it) and the source texts it registered."""

    reads: dict[int, tuple[Any, Callable[..., Any], tuple]] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)


_recording: contextvars.ContextVar[Recording | None] = contextvars.ContextVar("uopviz_load_recording",
                                                                               default=None)


def note_read(array: Any, reader: Callable[..., Any], *arguments: Any) -> Any:
    """Called by the readers of data files with what they read: inside a load being cached, the
    array is remembered as ``reader(*arguments)`` (read again on a hit, not stored). Returns
    ``array``."""
    recording = _recording.get()
    if recording is not None:
        recording.reads[id(array)] = (array, reader, arguments)
    return array


def note_source(file: str, text: str) -> None:
    """Called by :func:`~uopviz.nnef.errors.register_source`: inside a load being cached, the text is
    kept with the entry and registered again on a hit."""
    recording = _recording.get()
    if recording is not None:
        recording.sources[file] = text


@contextlib.contextmanager
def recorded() -> Iterator[Recording]:
    """Record what the loads inside the ``with`` block read and register."""
    recording = Recording()
    token = _recording.set(recording)
    try:
        yield recording
    finally:
        _recording.reset(token)
