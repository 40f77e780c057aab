"""Errors raised while reading NNEF / SkriptND sources and tensor data files.

Every problem found in a user's input is reported as an :class:`NNEFError` that names the file,
the line and the column (1-based) and shows the offending source line with a caret under the
column, e.g.::

    model.sknd:3:17: expected ')' to close '(' opened at 3:7, found ';'
        x = nn.conv(input;
                    ^

The parser registers every source text it reads (:func:`register_source`), so that errors raised
later by other stages (composer, lowering) that only know a file name and a position still get
the excerpt.
"""

from __future__ import annotations

from collections import OrderedDict

from uopviz.core.errors import UopvizError
from uopviz.nnef.load_recording import note_source

__all__ = ["NNEFError", "NNEFWarning", "register_source", "source_line"]

# Sources seen most recently, by file name; bounded so that long sessions do not grow without limit.
_SOURCES: OrderedDict[str, str] = OrderedDict()
_MAX_SOURCES = 256
_LINES: dict[str, tuple[str, list[str]]] = {}  # file -> (its text, the text split into lines)


def register_source(file: str, text: str) -> None:
    """Remember ``text`` as the contents of ``file`` so later errors can quote its lines."""
    note_source(file, text)  # a cached load registers it again (uopviz.nnef.load_cache)
    _SOURCES[file] = text
    _SOURCES.move_to_end(file)
    while len(_SOURCES) > _MAX_SOURCES:
        _SOURCES.popitem(last=False)


def source_line(file: str | None, line: int | None) -> str | None:
    """The text of ``line`` (1-based) in a registered ``file``, or None when unknown."""
    if file is None or line is None or file not in _SOURCES:
        return None
    text = _SOURCES[file]
    cached = _LINES.get(file)
    if cached is None or cached[0] is not text:  # split once per text, not once per line asked for
        cached = _LINES[file] = (text, text.splitlines())
        while len(_LINES) > _MAX_SOURCES:
            del _LINES[next(iter(_LINES))]
    lines = cached[1]
    if 1 <= line <= len(lines):
        return lines[line - 1]
    return None


class NNEFError(UopvizError):
    """A problem in an NNEF input, located by ``file``, ``line`` and ``column``.

    ``line`` and ``column`` are 1-based; either may be None when the problem has no position
    in a text (for instance a broken binary ``.dat`` header). ``message`` is the bare
    description, ``str(error)`` adds the location and an excerpt with a caret.
    """

    def __init__(
        self,
        message: str,
        file: str | None = None,
        line: int | None = None,
        column: int | None = None,
        source: str | None = None,
    ) -> None:
        self.message = message
        self.file = file
        self.line = line
        self.column = column
        # The excerpt is captured now: a registered source may be replaced later.
        self.source_line = _line_of(source, line) if source is not None else source_line(file, line)
        super().__init__(self._format())

    @classmethod
    def at(cls, position: object, message: str) -> NNEFError:
        """An error at an AST ``position`` (any object with ``file``, ``line``, ``column``)."""
        return cls(
            message,
            getattr(position, "file", None),
            getattr(position, "line", None),
            getattr(position, "column", None),
        )

    def _format(self) -> str:
        """``file:line:column: message`` and, when the source is known, the line and a caret."""
        location = ":".join(str(part) for part in (self.file, self.line, self.column) if part is not None)
        text = f"{location}: {self.message}" if location else self.message
        if self.source_line is not None:
            excerpt = self.source_line.expandtabs(1)
            text += "\n    " + excerpt
            if self.column is not None:
                text += "\n    " + " " * max(self.column - 1, 0) + "^"
        return text

    def __str__(self) -> str:
        return self._format()

    def __reduce__(self):
        # Keep the attributes across pickling (pytest-xdist, multiprocessing).
        return (_rebuild_error, (self.message, self.file, self.line, self.column, self.source_line))


def _rebuild_error(message, file, line, column, excerpt) -> NNEFError:
    """Unpickling helper for :class:`NNEFError`."""
    error = NNEFError(message, file, line, column)
    error.source_line = excerpt
    error.args = (error._format(),)
    return error


def _line_of(text: str, line: int | None) -> str | None:
    """The 1-based ``line`` of ``text`` or None."""
    if line is None:
        return None
    lines = text.splitlines()
    return lines[line - 1] if 1 <= line <= len(lines) else None


class NNEFWarning(UserWarning):
    """A tolerated irregularity in an NNEF input (only in lenient parsing), with its location."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None,
                 column: int | None = None) -> None:
        self.message = message
        self.file = file
        self.line = line
        self.column = column
        location = ":".join(str(part) for part in (file, line, column) if part is not None)
        super().__init__(f"{location}: {message}" if location else message)
