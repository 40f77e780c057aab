"""numpy-side references shared by the NNEF image tests."""

from __future__ import annotations


def keys(t: float, a: float = -0.75) -> float:
    """The Keys cubic convolution weight at distance ``t`` (``a = -0.75``, the stdlib's choice)."""
    t = abs(t)
    if t <= 1:
        return ((a + 2) * t - (a + 3)) * t * t + 1
    if t < 2:
        return ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return 0.0
