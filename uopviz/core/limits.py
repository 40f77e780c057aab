"""The memory limit: the most bytes one request may allocate, checked before anything is allocated.

A program, an NNEF constant or a tensor file that declares a 2³¹-element buffer would otherwise be
allocated (and filled) before anything looks at its size: a long stall, then a ``MemoryError`` or a
swapping machine. Every place that allocates from a size the user wrote asks :func:`check_allocation`
first. The limit is

- ``set_memory_limit(nbytes)`` (``None`` goes back to the default), or :func:`memory_limit_set` for
  a block;
- else the environment variable ``UOPVIZ_MEMORY_LIMIT`` (bytes; suffixes K, M, G, T for powers of
  1024), read when asked;
- else :data:`DEFAULT_FRACTION` of the machine's physical memory (4 GiB where it cannot be read).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from uopviz.core.errors import UopvizError

__all__ = [
    "DEFAULT_FRACTION",
    "MemoryLimitError",
    "check_allocation",
    "memory_limit",
    "memory_limit_set",
    "set_memory_limit",
]

#: The default limit's share of physical memory: one request may take half the machine.
DEFAULT_FRACTION = 0.5
ENVIRONMENT_VARIABLE = "UOPVIZ_MEMORY_LIMIT"
_FALLBACK_BYTES = 4 << 30
_SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}

_limit: int | None = None


class MemoryLimitError(UopvizError, MemoryError):
    """A request would allocate more than the memory limit; nothing was allocated.

    ``what`` names the buffer, ``requested`` and ``limit`` are in bytes.
    """

    def __init__(self, what: str, requested: int, limit: int) -> None:
        self.what, self.requested, self.limit = what, requested, limit
        super().__init__(
            f"{what} would take {format_bytes(requested)}, over the memory limit of {format_bytes(limit)}; "
            f"nothing was allocated (raise the limit with uopviz.core.limits.set_memory_limit or "
            f"${ENVIRONMENT_VARIABLE})"
        )

    def __reduce__(self):
        return (MemoryLimitError, (self.what, self.requested, self.limit))


def format_bytes(count: int) -> str:
    """``count`` bytes in the largest binary unit that keeps it at least 1 (``8.0 GiB``)."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def _from_environment() -> int | None:
    text = os.environ.get(ENVIRONMENT_VARIABLE, "").strip().upper().removesuffix("B").removesuffix("I")
    if not text:
        return None
    suffix = text[-1] if text[-1] in _SUFFIXES else ""
    number = text[: len(text) - len(suffix)]
    try:
        return int(float(number) * _SUFFIXES[suffix])
    except ValueError:
        raise ValueError(
            f"${ENVIRONMENT_VARIABLE}={os.environ[ENVIRONMENT_VARIABLE]!r} is not a byte count "
            f"(write e.g. 2000000000, 512M or 4G)"
        ) from None


def memory_limit() -> int:
    """The current limit in bytes (see the module docstring for where it comes from)."""
    if _limit is not None:
        return _limit
    configured = _from_environment()
    if configured is not None:
        return configured
    physical = _physical_memory()
    return int(physical * DEFAULT_FRACTION) if physical else _FALLBACK_BYTES


def set_memory_limit(nbytes: int | None) -> int | None:
    """Set the limit to ``nbytes`` (``None``: back to the environment or default); returns the previous
    explicit setting."""
    global _limit
    if nbytes is not None and (isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0):
        raise ValueError(f"the memory limit is a byte count >= 0 or None, got {nbytes!r}")
    previous, _limit = _limit, nbytes
    return previous


@contextmanager
def memory_limit_set(nbytes: int | None) -> Iterator[None]:
    """``with memory_limit_set(1 << 20): ...`` runs the block under that limit."""
    previous = set_memory_limit(nbytes)
    try:
        yield
    finally:
        set_memory_limit(previous)


def check_allocation(nbytes: int, what: str) -> None:
    """Raise :class:`MemoryLimitError` when allocating ``nbytes`` for ``what`` would pass the limit."""
    limit = memory_limit()
    if nbytes > limit:
        raise MemoryLimitError(what, int(nbytes), limit)
