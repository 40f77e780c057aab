"""Python's cyclic garbage collector held while a compiler builds many long-lived objects.

Loading and compiling a model makes hundreds of thousands of UOps (and the records of every rewrite
step) that all live as long as the program does, and almost none of them in reference cycles.
Each time the collector's allocation counters fill up it walks every tracked object of the
generation: on DenseNet-121 (488 kernels) those walks were about a quarter of the front end's CPU
time (about 3 of 13 CPU-s) and found 24 objects to free.  Inside :func:`collector_paused` no
collection starts; the collector is switched back on afterwards (if it was on) and the next
collection, whenever Python decides, frees any cycles made meanwhile.

On the way out every object is moved into the oldest generation (``gc.freeze()`` then
``gc.unfreeze()``: two list splices, no walk) before the collector is switched back on.  Switched on
with them all still in the youngest generation, the first allocation started a collection of that
generation, a walk over everything the block made (0.34 s at the end of compiling DenseNet-121),
then of the middle one (0.5 s), before the oldest's (0.6 s); from the oldest generation they are
walked once, at its next collection, which frees the cycles made meanwhile as before.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["collector_paused"]


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while the ``with`` block (or the decorated function) runs;
    nests, and restores the collector's state on the way out, exceptions included."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            _promote_to_oldest_generation()
            gc.enable()


def _promote_to_oldest_generation() -> None:
    """Every tracked object into the oldest generation, without walking them; left alone where
    objects are frozen already (someone's ``gc.freeze()``, which ``gc.unfreeze()`` would undo)."""
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()
