"""Two schedules of one computation side by side: the opts of each, their axes (AxisType and size),
a unified diff of the rendered source per backend, and their timings where taken.

:func:`schedule_diff` computes it all (no widget code); the kernel tuner's "Compare with…" control
draws the result (:func:`uopviz.widgets.tuner_view.schedule_diff_html`).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from uopviz.widgets.tuner import AxisView, SourceEntry, TimingEntry


@dataclass
class SourceDiff:
    """One backend's sources of the two kernels and the unified diff between them."""

    backend: str
    a: SourceEntry
    b: SourceEntry

    @property
    def diff(self) -> str:
        """The unified diff from kernel a's source to kernel b's ("" when they are the same)."""
        return "".join(difflib.unified_diff(
            self.a.source.splitlines(keepends=True), self.b.source.splitlines(keepends=True),
            fromfile=f"a ({self.backend})", tofile=f"b ({self.backend})",
        ))

    @property
    def same(self) -> bool:
        """True when both rendered and the sources are identical."""
        return not (self.a.error or self.b.error) and self.a.source == self.b.source


@dataclass
class ScheduleDiff:
    """What differs between two kernels' schedules (see :func:`schedule_diff`)."""

    name_a: str
    name_b: str
    opts_a: tuple[Any, ...]
    opts_b: tuple[Any, ...]
    axes_a: list[AxisView]
    axes_b: list[AxisView]
    sources: dict[str, SourceDiff] = field(default_factory=dict)
    timings: dict[str, tuple[TimingEntry | None, TimingEntry | None]] = field(default_factory=dict)

    @property
    def same_opts(self) -> bool:
        """True when both kernels carry the same opts."""
        return self.opts_a == self.opts_b

    @property
    def common_opts(self) -> int:
        """How many leading opts the two share (where their schedules part)."""
        count = 0
        for first, second in zip(self.opts_a, self.opts_b, strict=False):
            if first != second:
                break
            count += 1
        return count


def _axes(kernel: Any) -> list[AxisView]:
    return [AxisView(i, int(size), axis_type) for i, (size, axis_type) in enumerate(kernel.axes)]


def _source(kernel: Any, backend: str) -> SourceEntry:
    try:
        return SourceEntry(backend, source=kernel.source(backend))
    except Exception as error:  # noqa: BLE001 - one backend's failure stays in its row of the diff
        return SourceEntry(backend, error=f"{type(error).__name__}: {error}")


def schedule_diff(
    kernel_a: Any,
    kernel_b: Any,
    backends: list[str],
    *,
    source: Callable[[Any, str], SourceEntry] | None = None,
    timing: Callable[[Any, str], TimingEntry | None] | None = None,
) -> ScheduleDiff:
    """Compare two kernels: their opts, axis chips (AxisType and size), a unified diff of their
    sources on each of ``backends``, and their timings.  ``source(kernel, backend)`` renders (default:
    ``kernel.source``, a failure kept as the entry's error); ``timing(kernel, backend)`` gives a timing
    already taken or None (default: none; nothing is timed here)."""
    render = source or _source
    diff = ScheduleDiff(
        getattr(kernel_a, "name", "a"), getattr(kernel_b, "name", "b"),
        tuple(kernel_a.opts), tuple(kernel_b.opts), _axes(kernel_a), _axes(kernel_b),
    )
    for backend in backends:
        diff.sources[backend] = SourceDiff(backend, render(kernel_a, backend), render(kernel_b, backend))
        if timing is not None:
            diff.timings[backend] = (timing(kernel_a, backend), timing(kernel_b, backend))
    return diff


def tuner_schedule_diff(state: Any, other: Any, backends: list[str]) -> ScheduleDiff:
    """:func:`schedule_diff` of a :class:`uopviz.widgets.tuner.TunerState`'s current kernel (a)
    against ``other`` (b), with the tuner's cached sources and the timings it has taken."""
    return schedule_diff(state.kernel, other, backends, source=state.source_of,
                         timing=lambda kernel, backend: state.cached_timing(backend, kernel))
