"""Progress bars for work that may take a while: loading, lowering and compiling a model.

``progress=`` arguments take ``None`` (the default: an automatic bar, ``tqdm.auto``: a widget bar
in a notebook, a text bar on stderr in a script, shown only once the work has run for
:data:`DELAY_S`, so quick work prints nothing), ``False`` (no bar) or a callable
``progress(done, total, stage)`` that receives the reports instead.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["DELAY_S", "Report", "progress_reporter"]

#: Seconds of work before an automatic bar appears.
DELAY_S = 1.0

#: What a progress callback receives: (done, total, stage), stage a short text or None.
Report = Callable[[int, int, Any], None]


@contextlib.contextmanager
def progress_reporter(
    progress: Any, total: int, description: str, unit: str = "op"
) -> Iterator[Report | None]:
    """The callback for ``progress`` (see the module's text) over ``total`` steps, for as long as
    the ``with`` block runs; None for ``progress=False``.

    The automatic bar is drawn after :data:`DELAY_S` even when no step ends meanwhile (a long
    final stage, compiling the kernels, reports nothing until it is over).
    """
    if progress is False:
        yield None
        return
    if callable(progress):
        yield progress
        return
    bar = _LateBar(total, description, unit)
    # the bar is drawn after DELAY_S even when no step ends meanwhile (a long final stage)
    timer = threading.Timer(DELAY_S, bar.show)
    timer.daemon = True
    timer.start()
    try:
        yield bar.report
    finally:
        timer.cancel()
        bar.close()


class _LateBar:
    """A ``tqdm.auto`` bar made only once the work has run for :data:`DELAY_S`: quick work (a
    model read back from the caches in a fraction of a second) neither draws one nor imports tqdm,
    whose notebook flavour imports asyncio (0.15 s)."""

    def __init__(self, total: int, description: str, unit: str) -> None:
        self.total, self.description, self.unit = total, description, unit
        self.done = 0
        self.started = time.time()
        self.lock = threading.Lock()
        self.bar: Any = None
        self.closed = False

    def report(self, done: int, count: int, stage: Any = None) -> None:
        """A progress report: ``done`` of ``count`` steps, now at ``stage`` (None: unchanged)."""
        with self.lock:
            self.done, self.total = done, count
            if stage is not None:
                self.description = str(stage)
            if self.bar is None and time.time() - self.started >= DELAY_S:
                self._open()
            if self.bar is not None:
                self._draw()

    def show(self) -> None:
        """Draw the bar now (the work has outlasted the delay)."""
        with self.lock, contextlib.suppress(Exception):  # a display that cannot draw costs nothing
            if self.bar is None:
                self._open()
            if self.bar is not None and not self.bar.disable:
                self._draw()
                self.bar.refresh()

    def close(self) -> None:
        """Take the bar away (none was drawn for quick work)."""
        with self.lock:
            self.closed = True
            if self.bar is not None:
                self.bar.close()

    def _open(self) -> None:
        if self.closed:
            return
        from tqdm.auto import tqdm

        self.bar = tqdm(total=self.total, desc=self.description, unit=self.unit, leave=False,
                        dynamic_ncols=True)
        self.bar.start_t = self.started  # the rate and elapsed time count from the work's start

    def _draw(self) -> None:
        bar = self.bar
        if self.total != bar.total:
            bar.total = self.total
        if self.description != bar.desc:
            bar.set_description_str(self.description, refresh=False)
        bar.update(self.done - bar.n)
