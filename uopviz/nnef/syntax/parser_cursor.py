"""The token cursor the SkriptND parser reads with: the current token and lookahead, consuming
expected operators, names and closing delimiters, and errors and warnings located at a token
(the ``...``-for-``..`` policy of :mod:`uopviz.nnef.syntax.parser` included)."""

from __future__ import annotations

import warnings

from uopviz.nnef.errors import NNEFError, NNEFWarning
from uopviz.nnef.syntax import ast
from uopviz.nnef.syntax.lexer import Kind, Token

_SOFT_KEYWORDS = ("is", "in")
_CLOSERS = {"(": ")", "[": "]", "{": "}", "<": ">", "|": "|"}


class TokenCursor:
    """A cursor over one parse's token list, with the options of the parse."""

    def __init__(self, tokens: list[Token], file: str, lenient: bool, type_names: frozenset[str]) -> None:
        self.tokens = tokens
        self.index = 0
        self.file = file
        self.lenient = lenient
        # Names callable as casts: type keywords plus the generics of the current definition.
        self.type_names = type_names
        # What the END token stands for in messages ('' for the end of the input).
        self.end_name = ""

    @property
    def token(self) -> Token:
        """The current token."""
        return self.tokens[self.index]

    def peek(self, offset: int = 1) -> Token:
        """The token ``offset`` positions ahead (the END token past the end)."""
        return self.tokens[min(self.index + offset, len(self.tokens) - 1)]

    def advance(self) -> Token:
        """Consume and return the current token."""
        token = self.tokens[self.index]
        if token.kind is not Kind.END:
            self.index += 1
        return token

    def at(self, *ops: str) -> bool:
        """Whether the current token is one of the operators ``ops``."""
        token = self.tokens[self.index]
        return token.kind is Kind.OPERATOR and token.text in ops

    def at_keyword(self, *words: str) -> bool:
        """Whether the current token is one of the keywords ``words``."""
        return self.token.is_keyword(*words)

    def at_word(self, *words: str) -> bool:
        """Whether the current token is an identifier spelled as one of ``words`` (contextual)."""
        return self.token.kind is Kind.IDENTIFIER and self.token.text in words

    def accept(self, *ops: str) -> Token | None:
        """Consume the current token if it is one of ``ops``."""
        return self.advance() if self.at(*ops) else None

    def pos(self, token: Token | None = None) -> ast.Position:
        """The AST position of ``token`` (default: the current one)."""
        token = token or self.token
        return ast.Position(self.file, token.line, token.column)

    def describe(self, token: Token) -> str:
        """How messages name ``token``; the end of a string placeholder is not the end of the file."""
        if token.kind is Kind.END and self.end_name:
            return self.end_name
        return token.describe()

    def error(self, token: Token, message: str) -> NNEFError:
        """An NNEFError located at ``token``."""
        return NNEFError(message, self.file, token.line, token.column)

    def error_after_previous(self, message: str) -> NNEFError:
        """An NNEFError just after the previous token (where a missing ';' belongs)."""
        previous = self.tokens[self.index - 1] if self.index > 0 else self.token
        lines = previous.text.split("\n")
        line = previous.line + len(lines) - 1
        column = (previous.column if len(lines) == 1 else 1) + len(lines[-1])
        return NNEFError(message, self.file, line, column)

    def warn(self, token: Token, message: str) -> None:
        """Emit an NNEFWarning located at ``token`` (lenient mode only)."""
        warnings.warn(NNEFWarning(message, self.file, token.line, token.column), stacklevel=4)

    def expect(self, op: str, context: str = "") -> Token:
        """Consume the operator ``op`` or fail naming what was found."""
        if self.at(op):
            return self.advance()
        where = f" {context}" if context else ""
        raise self.error(self.token, f"expected '{op}'{where}, found {self.describe(self.token)}")

    def expect_close(self, opener: Token) -> Token:
        """Consume the delimiter closing ``opener`` or report where the pair was opened."""
        if self.at(_CLOSERS[opener.text]):
            return self.advance()
        raise self.unclosed(opener)

    def unclosed(self, opener: Token) -> NNEFError:
        """The error for a missing closer of ``opener`` at the current token."""
        return self.error(
            self.token,
            f"expected '{_CLOSERS[opener.text]}' to close '{opener.text}' opened at "
            f"{opener.line}:{opener.column}, found {self.describe(self.token)}",
        )

    def expect_semicolon(self, what: str) -> None:
        """Consume the ';' ending ``what``; a missing one is reported after the previous token."""
        if not self.accept(";"):
            raise self.error_after_previous(f"expected ';' after {what}, found {self.describe(self.token)}")

    def at_name(self) -> bool:
        """Whether the current token can be a name.

        ``is`` and ``in`` are operators only between two operands; where a name is expected they
        are names (the specification's own ``conv`` calls an input extent ``is``).
        """
        return self.token.kind is Kind.IDENTIFIER or self.token.is_keyword(*_SOFT_KEYWORDS)

    def expect_identifier(self, what: str) -> Token:
        """Consume an identifier, or fail naming ``what`` was expected."""
        if self.at_name():
            return self.advance()
        found = self.describe(self.token)
        if self.token.kind is Kind.KEYWORD:
            found = f"keyword '{self.token.text}' (reserved, not usable as a name)"
        raise self.error(self.token, f"expected {what}, found {found}")

    def qualified_name(self, what: str) -> str:
        """A possibly dotted name ``a.b.c``."""
        parts = [self.expect_identifier(what).text]
        while self.at(".") and self.peek().kind is Kind.IDENTIFIER:
            self.advance()
            parts.append(self.advance().text)
        return ".".join(parts)

    def at_dots(self) -> bool:
        """Whether the current token is '..' or a '...' meant as '..' (policy in the module doc)."""
        return self.at("..") or self.at("...")

    def accept_expansion_dots(self, what: str) -> Token | None:
        """Consume '..' where only an expansion / pack is valid, applying the '...' policy."""
        if self.at(".."):
            return self.advance()
        if self.at("..."):
            token = self.token
            message = (f"'...' is the cumulative-fold token; {what} is written '..' "
                       "(the PDF extraction of the specification often shows '...' for '..')")  # fmt: skip
            if not self.lenient:
                raise self.error(token, message)
            self.warn(token, f"read '...' as '..' ({what}); " + message)
            return self.advance()
        return None
