"""The types of SkriptND declarations: :class:`TypeParser` reads type specs (``real[b, c]``,
``int..(n)``, ``static``/``dynamic`` qualifiers), pack specs and shapes with their extents, for
the declarations and components that :mod:`uopviz.nnef.syntax.parser` parses above it."""

from __future__ import annotations

import difflib

from uopviz.nnef.syntax import ast
from uopviz.nnef.syntax.lexer import Kind
from uopviz.nnef.syntax.parser_expressions import TYPE_NAMES, ExpressionParser

__all__ = ["TypeParser"]

_QUALIFIERS = ("static", "dynamic")


class TypeParser(ExpressionParser):
    """Parses type specs, pack specs and shapes (expressions inside them are
    :class:`~uopviz.nnef.syntax.parser_expressions.ExpressionParser`'s)."""

    def type_keyword(self, what: str) -> str:
        """One of the built-in type keywords."""
        if self.token.kind is Kind.KEYWORD and self.token.text in TYPE_NAMES:
            return self.advance().text
        raise self.error(self.token, f"expected {what}, found {self.describe(self.token)}")

    def type_name(self) -> str:
        """A type in a declaration: a type keyword or a generic name."""
        if self.token.kind is Kind.KEYWORD and self.token.text in TYPE_NAMES:
            return self.advance().text
        if self.token.kind is Kind.IDENTIFIER:
            if self.token.text not in self.type_names:
                close = difflib.get_close_matches(self.token.text, sorted(self.type_names), n=1)
                hint = f"; did you mean '{close[0]}'?" if close else " (generic types are declared in @dtype)"
                raise self.error(self.token, f"unknown type '{self.token.text}'{hint}")
            return self.advance().text
        raise self.error(self.token, f"expected a type (int, real, bool, str or a generic type), "
                                     f"found {self.describe(self.token)}")  # fmt: skip

    def qualifier(self) -> str | None:
        """A contextual ``dynamic`` / ``static`` qualifier before something it can qualify."""
        if self.at_word(*_QUALIFIERS):
            following = self.peek()
            if following.kind in (Kind.IDENTIFIER, Kind.INTEGER) or following.is_keyword(
                "optional", *TYPE_NAMES
            ) or following.is_op("~", "(", "..", "..."):
                return self.advance().text
        return None

    def type_spec(self, allow_shape: bool = True, allow_pack: bool = True) -> ast.TypeSpec:
        """``[dynamic] [optional] [dynamic] type [^(rank)] [shape] [pack]``."""
        start = self.token
        qualifier = self.qualifier()
        optional = bool(self.at_keyword("optional") and self.advance())
        qualifier = qualifier or self.qualifier()
        name = self.type_name()
        rank = None
        if self.at("^"):
            self.advance()
            opener = self.expect("(", "after '^' (rank capture is written '^(r)')")
            rank = self.expression()
            self.expect_close(opener)
        shape = self.shape() if allow_shape and self.at("[") else None
        pack = None
        if allow_pack and self.at_dots():
            pack = self.pack_spec("a pack type")
        return ast.TypeSpec(name, optional, rank, shape, pack, qualifier, pos=self.pos(start))

    def pack_spec(self, what: str) -> ast.PackSpec:
        """``..`` [``(`` [static|dynamic] (~ | count) [| bound] ``)``]."""
        start = self.token
        self.accept_expansion_dots(what)
        if not self.at("("):
            return ast.PackSpec(pos=self.pos(start))
        opener = self.advance()
        qualifier = None
        if self.at_word(*_QUALIFIERS) and not self.peek().is_op(")", "|"):
            qualifier = self.advance().text
        placeholder = self.accept("~")
        count = ast.Placeholder(pos=self.pos(placeholder)) if placeholder else self.expression()
        bound = self.expression() if self.accept("|") else None
        self.expect_close(opener)
        return ast.PackSpec(count, bound, qualifier, pos=self.pos(start))

    def shape(self) -> ast.Shape:
        """``[ extent, ... ]``."""
        opener = self.advance()
        extents = []
        if not self.at("]"):
            extents.append(self.extent())
            while self.accept(","):
                extents.append(self.extent())
        self.expect_close(opener)
        return ast.Shape(tuple(extents), pos=self.pos(opener))

    def extent(self) -> ast.Extent:
        """``[static] [..] (~ | expr) [| bound] [..[(count)]]``."""
        start = self.token
        qualifier = self.qualifier()
        distinct = bool(self.accept_expansion_dots("a per-item (distinct) extent"))
        placeholder = self.accept("~")
        value = ast.Placeholder(pos=self.pos(placeholder)) if placeholder else self.expression()
        bound = self.expression() if self.accept("|") else None
        pack = self.pack_spec("a packed extent") if self.at_dots() else None
        return ast.Extent(value, bound, distinct, pack, qualifier, pos=self.pos(start))

