"""Tokenizer for SkriptND (NNEF 2.0) source text.

The token set follows §2.16 of the NNEF 2.0 draft with the corrections of
``/work/shared/spec/README.md``: ``??`` (coalesce), ``<?`` / ``>?`` (min / max), ``=>``
(implication), ``<?=`` / ``>?=`` / ``:=`` (lowering assignments and the uniform-value fold),
``..`` (pack expansion, fold) and ``...`` (cumulative fold) are distinct operators.

Lexing is maximal munch, as in the reference tools: ``a<-1`` is ``a <- 1`` (substitution), not
``a < -1``; the parser turns such a mistake into a readable error.

Comments run from ``#`` to the end of the line; the language has no block comments.
Strings are delimited by ``"`` or ``'``, may not span lines, understand the escapes
``\\n \\t \\r \\\\ \\" \\' \\{ \\}``, and unescaped ``{expr}`` placeholders are kept as
:class:`Placeholder` parts for the parser to read as expressions.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass
from enum import Enum
from typing import NamedTuple

from uopviz.nnef.errors import NNEFError, register_source

__all__ = ["KEYWORDS", "OPERATORS", "Kind", "Placeholder", "Token", "tokenize"]


class Kind(Enum):
    """The category of a token."""

    IDENTIFIER = "identifier"
    KEYWORD = "keyword"
    INTEGER = "integer"
    REAL = "real"
    STRING = "string"
    BLOCK = "block"
    OPERATOR = "operator"
    END = "end of input"


# Reserved words: they can never be identifiers. ``version``, ``extension``, ``dynamic`` and
# ``static`` are contextual (recognised by the parser where they may appear) so that files using
# them as names keep working.
KEYWORDS = frozenset(
    {
        "import", "graph", "public", "operator", "optional",
        "type", "arith", "num", "int", "real", "bool", "str",
        "inf", "pi", "true", "false", "is", "in",
        "if", "then", "elif", "else", "do", "for", "while", "with", "yield", "unroll",
    }
)  # fmt: skip

# Every operator and punctuation token; the lexer always takes the longest that matches.
OPERATORS = frozenset(
    {
        "+", "-", "*", "/", "\\", "%", "**", "^", "!", "~", "|", "&&", "||",
        "<", "<=", ">", ">=", "==", "!=", "<?", ">?", "=>", "<-", "->", "<>",
        "=", "+=", "*=", "&=", "|=", "<?=", ">?=", ":=",
        "?", "??", ",", ".", "..", "...", ":", ";",
        "(", ")", "[", "]", "{", "}",
    }
)  # fmt: skip

_MAX_OPERATOR_LENGTH = max(len(op) for op in OPERATORS)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DIGITS = re.compile(r"[0-9]+")
_SPACE_AND_COMMENTS = re.compile(r"(?:\s+|#[^\n]*)+")
_NEWLINE = re.compile(r"\n")
# Regular tokens in one pattern. A number is taken here only when what follows cannot make it
# malformed (no letter, digit, '_' or '.' right after); otherwise number() reports the problem.
_FAST_TOKEN = re.compile(
    r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<real>[0-9]+(?:\.(?!\.)[0-9]*(?:[eE][+-]?[0-9]+)?|[eE][+-]?[0-9]+))(?![A-Za-z0-9_.])"
    r"|(?P<integer>[0-9]+)(?![A-Za-z0-9_]|\.(?!\.))"
    r"|(?P<operator>" + "|".join(re.escape(op) for op in sorted(OPERATORS, key=len, reverse=True)) + ")"
)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "{": "{", "}": "}"}


@dataclass(frozen=True)
class Placeholder:
    """A ``{expression}`` inside a string literal: its source text and where that text starts."""

    text: str
    line: int
    column: int


class Token(NamedTuple):
    """One token: its kind, its exact source text, its value and its 1-based position.

    ``value`` is the int / float for numbers, the name (without ``@``) for blocks, and for strings
    a tuple of parts, each a ``str`` (escapes decoded) or a :class:`Placeholder`.
    """

    kind: Kind
    text: str
    line: int
    column: int
    value: object = None

    def is_op(self, *ops: str) -> bool:
        """Whether this token is one of the operators ``ops``."""
        return self.kind is Kind.OPERATOR and self.text in ops

    def is_keyword(self, *words: str) -> bool:
        """Whether this token is one of the keywords ``words``."""
        return self.kind is Kind.KEYWORD and self.text in words

    def describe(self) -> str:
        """How error messages name this token, e.g. ``';'`` or ``end of input``."""
        if self.kind is Kind.END:
            return "end of input"
        if self.kind is Kind.STRING:
            return "a string"
        return f"'{self.text}'"


class _Lexer:
    """A single pass over a source text producing tokens."""

    def __init__(self, text: str, file: str, line: int = 1, column: int = 1) -> None:
        self.text = text
        self.file = file
        self.index = 0
        # Positions are computed from the index when needed, which keeps scanning cheap.
        self.line_starts = [0] + [match.end() for match in _NEWLINE.finditer(text)]
        self.first_line = line
        self.first_column = column

    @property
    def line(self) -> int:
        """The 1-based line of the current index."""
        return self.first_line + bisect_right(self.line_starts, self.index) - 1

    @property
    def column(self) -> int:
        """The 1-based column of the current index."""
        row = bisect_right(self.line_starts, self.index) - 1
        start_column = self.first_column if row == 0 else 1
        return start_column + self.index - self.line_starts[row]

    def error(self, message: str, line: int | None = None, column: int | None = None) -> NNEFError:
        """An NNEFError at the current position (or the one given)."""
        # The excerpt comes from the registered source: placeholder texts are lexed on their own
        # but must quote the line of the enclosing file.
        return NNEFError(message, self.file, self.line if line is None else line,
                         self.column if column is None else column)  # fmt: skip

    def peek(self, offset: int = 0) -> str:
        """The character ``offset`` ahead, or '' past the end."""
        position = self.index + offset
        return self.text[position] if position < len(self.text) else ""

    def advance(self, count: int = 1) -> str:
        """Consume ``count`` characters and return them."""
        consumed = self.text[self.index : self.index + count]
        self.index += len(consumed)
        return consumed

    def skip_space_and_comments(self) -> None:
        """Skip white space and ``#`` comments."""
        match = _SPACE_AND_COMMENTS.match(self.text, self.index)
        if match:
            self.index = match.end()

    def tokens(self) -> list[Token]:
        """All tokens of the text, ending with a single END token.

        Names, numbers and operators take a fast path through one regular expression; strings,
        blocks and anything irregular (errors included) go through the methods below.
        """
        result = []
        text, line_starts, end = self.text, self.line_starts, len(self.text)
        row = 0
        while True:
            self.skip_space_and_comments()
            if self.index >= end:
                result.append(Token(Kind.END, "", self.line, self.column))
                return result
            match = _FAST_TOKEN.match(text, self.index)
            if match is None:
                result.append(self.token())
                continue
            start = self.index
            while row + 1 < len(line_starts) and line_starts[row + 1] <= start:
                row += 1
            line = self.first_line + row
            column = (self.first_column if row == 0 else 1) + start - line_starts[row]
            token_text = match.group()
            self.index = match.end()
            kind = match.lastgroup
            if kind == "name":
                result.append(Token(Kind.KEYWORD if token_text in KEYWORDS else Kind.IDENTIFIER,
                                    token_text, line, column, token_text))  # fmt: skip
            elif kind == "integer":
                result.append(Token(Kind.INTEGER, token_text, line, column, int(token_text)))
            elif kind == "real":
                result.append(Token(Kind.REAL, token_text, line, column, float(token_text)))
            else:
                result.append(Token(Kind.OPERATOR, token_text, line, column))

    def token(self) -> Token:
        """The token starting at the current position."""
        char = self.peek()
        if char.isascii() and (char.isalpha() or char == "_"):
            return self.identifier()
        if char.isascii() and char.isdigit():
            return self.number()
        if char in "\"'":
            return self.string()
        if char == "@":
            return self.block()
        return self.operator()

    def identifier(self) -> Token:
        """An identifier or keyword."""
        line, column = self.line, self.column
        text = _NAME.match(self.text, self.index).group()
        self.index += len(text)
        kind = Kind.KEYWORD if text in KEYWORDS else Kind.IDENTIFIER
        return Token(kind, text, line, column, text)

    def digits(self) -> None:
        """Consume a run of decimal digits."""
        match = _DIGITS.match(self.text, self.index)
        if match:
            self.index = match.end()

    def number(self) -> Token:
        """An integer or real literal (``12``, ``1.5``, ``2.``, ``1e-5``, ``1.5E+3``)."""
        line, column, start = self.line, self.column, self.index
        self.digits()
        is_real = False
        # '1..' is the integer 1 followed by '..' (expansion), never the real '1.' then '.'.
        if self.peek() == "." and self.peek(1) != ".":
            is_real = True
            self.advance()
            self.digits()
        if self.peek() in ("e", "E"):
            sign = 1 if self.peek(1) in ("+", "-") else 0
            if not (self.peek(1 + sign).isascii() and self.peek(1 + sign).isdigit()):
                self.advance(1 + sign)
                number = self.text[start : self.index]
                raise self.error(f"expected a digit in the exponent of number '{number}'")
            is_real = True
            self.advance(1 + sign)
            self.digits()
        if _NAME.match(self.text, self.index):
            number = self.text[start : self.index]
            raise self.error(f"invalid character '{self.peek()}' after number '{number}'")
        text = self.text[start : self.index]
        if is_real:
            return Token(Kind.REAL, text, line, column, float(text))
        return Token(Kind.INTEGER, text, line, column, int(text))

    def string(self) -> Token:
        """A string literal, decoding escapes and splitting out ``{}`` placeholders."""
        line, column, start = self.line, self.column, self.index
        quote = self.advance()
        parts: list[str | Placeholder] = []
        chars: list[str] = []
        while True:
            char = self.peek()
            if char in ("", "\n", "\r"):
                raise self.error(
                    f"unterminated string literal (missing closing {quote}); strings cannot span lines, "
                    "write adjacent literals instead",
                    line, column,
                )  # fmt: skip
            if char == quote:
                self.advance()
                break
            if char == "\\":
                chars.append(self.escape())
            elif char == "{":
                if chars:
                    parts.append("".join(chars))
                    chars = []
                parts.append(self.placeholder())
            elif char == "}":
                raise self.error("unmatched '}' in string literal; write '\\}' for a literal brace")
            else:
                chars.append(self.advance())
        if chars or not parts:
            parts.append("".join(chars))
        return Token(Kind.STRING, self.text[start : self.index], line, column, tuple(parts))

    def escape(self) -> str:
        """One backslash escape sequence inside a string."""
        line, column = self.line, self.column
        self.advance()
        char = self.peek()
        if char not in _ESCAPES:
            shown = char if char not in ("", "\n", "\r") else "end of line"
            raise self.error(f"unknown escape sequence '\\{shown}' in string literal", line, column)
        self.advance()
        return _ESCAPES[char]

    def placeholder(self) -> Placeholder:
        """A ``{expression}`` formatting placeholder; nested brackets are allowed, braces are not."""
        line, column = self.line, self.column
        self.advance()
        text_line, text_column, start = self.line, self.column, self.index
        while self.peek() != "}":
            if self.peek() in ("", "\n", "\r", '"', "'", "{"):
                raise self.error("unterminated '{' placeholder in string literal; write '\\{' for a brace",
                                 line, column)  # fmt: skip
            self.advance()
        text = self.text[start : self.index]
        self.advance()
        if not text.strip():
            raise self.error("empty '{}' placeholder in string literal", line, column)
        return Placeholder(text, text_line, text_column)

    def block(self) -> Token:
        """A block name such as ``@input`` (validated by the parser)."""
        line, column, start = self.line, self.column, self.index
        self.advance()
        name = _NAME.match(self.text, self.index)
        if not name:
            raise self.error("expected a block name after '@'")
        self.index = name.end()
        text = self.text[start : self.index]
        return Token(Kind.BLOCK, text, line, column, text[1:])

    def operator(self) -> Token:
        """The longest operator or punctuation token at the current position."""
        line, column = self.line, self.column
        for length in range(_MAX_OPERATOR_LENGTH, 0, -1):
            candidate = self.text[self.index : self.index + length]
            if candidate in OPERATORS:
                self.advance(length)
                return Token(Kind.OPERATOR, candidate, line, column)
        char = self.peek()
        if char == "&":
            raise self.error("invalid character '&'; logical and is written '&&'")
        shown = repr(char) if not char.isprintable() else f"'{char}'"
        raise self.error(f"invalid character {shown}")


def tokenize(text: str, file: str = "<string>", line: int = 1, column: int = 1) -> list[Token]:
    """Split SkriptND ``text`` into tokens ending with an END token.

    ``line`` / ``column`` give the position of the first character (used for the expressions in
    string placeholders). Raises :class:`NNEFError` on invalid characters, malformed numbers and
    unterminated strings.
    """
    if (line, column) == (1, 1):
        # A byte-order mark is not part of the text editors show (columns count without it).
        text = text.removeprefix("\ufeff")
        register_source(file, text)
    return _Lexer(text, file, line, column).tokens()
