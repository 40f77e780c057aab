"""Progress bars for work that may take a while: loading, lowering and compiling a model.

``progress=`` arguments take ``None`` (the default: an automatic bar, ``tqdm.auto``: a widget bar
in a notebook, a text bar on stderr in a script, shown only once the work has run for
:data:`DELAY_S`, so quick work prints nothing), ``False`` (no bar) or a callable
``progress(done, total, stage)`` that receives the reports instead.
"""

from __future__ import annotations

import contextlib
import threading
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
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc=description, unit=unit, delay=DELAY_S, leave=False, dynamic_ncols=True)
    timer = threading.Timer(DELAY_S, _show_late, (bar,))
    timer.daemon = True
    timer.start()

    def report(done: int, count: int, stage: Any = None) -> None:
        if count != bar.total:
            bar.total = count
        if stage is not None and str(stage) != bar.desc:
            bar.set_description_str(str(stage), refresh=False)
        bar.update(done - bar.n)

    try:
        yield report
    finally:
        timer.cancel()
        bar.close()


def _show_late(bar: Any) -> None:
    """Draw a bar whose work has outlasted the delay without a step ending since."""
    with contextlib.suppress(Exception):  # the work may finish (and close the bar) meanwhile
        if not bar.disable:
            bar.refresh()
