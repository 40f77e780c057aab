"""The root of uopviz's exceptions: every error a user can meet derives from :class:`UopvizError`.

``except uv.UopvizError`` catches all of them. Each class also keeps the built-in base it had
(``UOpError`` is a ``ValueError``, ``MemoryLimitError`` a ``MemoryError``, ``CompileError`` a
``RuntimeError``...), so code that catches those keeps working. docs/robustness.md lists every
class and what raises it; tests/test_architecture.py checks that the list is complete.
"""

from __future__ import annotations

__all__ = ["UopvizError"]


class UopvizError(Exception):
    """The base class of every exception uopviz raises on bad input or a failed compile or run."""
