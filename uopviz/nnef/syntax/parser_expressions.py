"""The expressions of SkriptND: :class:`ExpressionParser`, the recursive descent from a full
expression (``? :`` and ``??``) through the binary operators (precedence climbing, folds ``x op ..``),
unary and ``**``, subscripts and substitutions down to literals, names, casts, built-in functions,
lists, zips, bounded indices and string placeholders.  The precedence table is in the docstring of
:mod:`uopviz.nnef.syntax.parser`, which parses everything around expressions."""

from __future__ import annotations

import difflib

from uopviz.nnef.syntax import ast
from uopviz.nnef.syntax.lexer import Kind, Placeholder, Token, tokenize
from uopviz.nnef.syntax.parser_cursor import TokenCursor

BINARY_PRECEDENCE: dict[str, int] = {
    "=>": 1,
    "&&": 2, "||": 2, "^": 2,
    "<": 3, "<=": 3, ">": 3, ">=": 3, "==": 3, "!=": 3, "is": 3, "in": 3, ":=": 3,
    "<?": 4, ">?": 4,
    "+": 5, "-": 5,
    "*": 6, "/": 6, "\\": 6, "%": 6,
    "**": 7,
}  # fmt: skip
FOLD_OPERATORS = frozenset({"+", "*", "<?", ">?", "&&", "||", ":=", "<", "<=", ">", ">=", "==", "!="})
CUMULATIVE_FOLD_OPERATORS = frozenset({"+", "*", "<?", ">?", "&&", "||"})
TYPE_NAMES = frozenset({"type", "arith", "num", "int", "real", "bool", "str"})
ABSTRACT_TYPE_NAMES = frozenset({"type", "arith", "num"})
BUILTIN_FUNCTIONS = frozenset(
    {
        "abs", "sign", "sqrt", "exp", "log", "sin", "cos", "tan", "asin", "acos", "atan",
        "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "round", "floor", "ceil", "frac", "erf",
    }
)  # fmt: skip
# §2.3 leaves the size of `int` open, but extents, indices and the generated code hold 64-bit signed
# integers at most: a larger literal could only turn into absurd shapes and counts.
_INT64_MAX = 2**63 - 1


class ExpressionParser(TokenCursor):
    """Parses expressions from the cursor's tokens (the statement parser extends it)."""

    def expression(self) -> ast.Expr:
        """A full expression: binary operators, then ``? :`` and ``??``."""
        start = self.token
        value = self.binary(1)
        if self.at("?"):
            self.advance()
            then = self.expression()
            otherwise = self.expression() if self.accept(":") else None
            value = ast.Select(value, then, otherwise, pos=self.pos(start))
        if self.at("??"):
            self.advance()
            value = ast.Coalesce(value, self.expression(), pos=self.pos(start))
        return value

    def binary_operator(self) -> str | None:
        """The binary operator at the cursor, if any (``is`` / ``in`` included)."""
        token = self.token
        if token.kind is Kind.OPERATOR and token.text in BINARY_PRECEDENCE:
            return token.text
        if token.is_keyword("is", "in"):
            return token.text
        return None

    def binary(self, min_precedence: int) -> ast.Expr:
        """Precedence climbing over the binary operators, with folds ``x op ..``."""
        start = self.token
        left = self.unary()
        while True:
            if self.at("<-"):
                raise self.error(self.token, "substitution '<-' needs an indexed pack on its left "
                                             "('a[i] <- v'); write '< -' to compare with a negative value")
            op = self.binary_operator()
            if op is None or op == "**" or BINARY_PRECEDENCE[op] < min_precedence:
                return left
            op_token = self.advance()
            if self.at("..", "..."):
                left = self.fold(op, op_token, left, start)
                continue
            if op == ":=":
                raise self.error(op_token, "':=' is only a fold ('x := ..') or a lowering assignment")
            right = self.binary(BINARY_PRECEDENCE[op] + 1)
            left = ast.Binary(op, left, right, pos=self.pos(start))

    def fold(self, op: str, op_token: Token, operand: ast.Expr, start: Token) -> ast.Fold:
        """``operand op ..`` or ``operand op ...`` (the dots are the current token)."""
        dots = self.advance()
        cumulative = dots.text == "..."
        if op not in FOLD_OPERATORS:
            raise self.error(op_token, f"'{op}' has no fold; folds exist for "
                                       f"{' '.join(sorted(FOLD_OPERATORS))}")  # fmt: skip
        if cumulative and op not in CUMULATIVE_FOLD_OPERATORS:
            message = (f"'{op}' has no cumulative fold ('x {op} ...'); its reduction is written 'x {op} ..' "
                       "(the PDF extraction of the specification often shows '...' for '..')")  # fmt: skip
            if not self.lenient:
                raise self.error(dots, message)
            self.warn(dots, f"read '...' as '..' after '{op}'; " + message)
            cumulative = False
        return ast.Fold(op, operand, cumulative, pos=self.pos(start))

    def unary(self) -> ast.Expr:
        """Prefix ``+ - ! ?`` then a power expression."""
        start = self.token
        if self.at("+", "-", "!", "?"):
            op = self.advance().text
            return ast.Unary(op, self.unary(), pos=self.pos(start))
        if self.at("??"):
            raise self.error(start, "'??' needs a value on its left; a null test is written '?x'")
        return self.power()

    def power(self) -> ast.Expr:
        """``base ** exponent ** ...`` (left-associative; the exponent may have a unary sign)."""
        start = self.token
        value = self.postfix()
        while self.at("**"):
            op_token = self.advance()
            if self.at("..", "..."):
                raise self.error(op_token, "'**' has no fold")
            value = ast.Binary("**", value, self.exponent(), pos=self.pos(start))
        return value

    def exponent(self) -> ast.Expr:
        """The right operand of ``**``: optional unary signs then a postfix expression."""
        start = self.token
        if self.at("+", "-", "!", "?"):
            op = self.advance().text
            return ast.Unary(op, self.exponent(), pos=self.pos(start))
        return self.postfix()

    def postfix(self) -> ast.Expr:
        """A primary followed by subscripts ``[...]`` (and possibly a substitution)."""
        value = self.primary()
        while self.at("["):
            value = self.subscript(value, allow_substitution=True)
            if isinstance(value, ast.Substitute):
                break
        return value

    def subscript(self, base: ast.Expr, allow_substitution: bool) -> ast.Expr:
        """``base[...]``: pack index, slice, tensor access, or substitution ``base[i] <- v``."""
        opener = self.advance()
        position = base.pos
        if self.at("]"):
            self.advance()
            return ast.TensorAccess(base, (), pos=position)
        first = self.item(allow_open_range=True)
        if self.at(",") or isinstance(first, (ast.Expand, ast.Bounded)):
            indices = [first]
            while self.accept(","):
                if self.at("]"):
                    break
                indices.append(self.item(allow_open_range=True))
            self.expect_close(opener)
            return ast.TensorAccess(base, tuple(indices), pos=position)
        self.expect_close(opener)
        if self.at("<-") and not isinstance(first, ast.Range):
            if not allow_substitution:
                raise self.error(self.token, "substitution '<-' is not allowed here")
            self.advance()
            return ast.Substitute(base, first, self.expression(), pos=position)
        return ast.Index(base, first, pos=position)

    def item(self, allow_open_range: bool = False) -> ast.Expr:
        """A list / index item: expression, ``x..[(n)]`` or range ``a:b[:c]``."""
        start = self.token
        if allow_open_range and self.at(":"):
            return self.range_rest(None, start, allow_open_range)
        value = self.expression()
        if self.at_dots():
            self.accept_expansion_dots("pack expansion")
            count = None
            if self.at("("):
                opener = self.advance()
                count = self.expression()
                self.expect_close(opener)
            return ast.Expand(value, count, pos=self.pos(start))
        if self.at(":"):
            return self.range_rest(value, start, allow_open_range)
        return value

    def range_rest(self, first: ast.Expr | None, start: Token, allow_open: bool) -> ast.Range:
        """The ``:stop[:step]`` part of a range whose start was parsed."""
        self.advance()
        ends = ("]", ",", ":")
        stop = None if allow_open and self.at(*ends) else self.expression()
        step = None
        if self.accept(":"):
            step = None if allow_open and self.at("]", ",") else self.expression()
        return ast.Range(first, stop, step, pos=self.pos(start))

    def primary(self) -> ast.Expr:
        """Literals, names, casts, builtins, parentheses / zips, lists and bounded indices."""
        token = self.token
        position = self.pos(token)
        if token.kind is Kind.INTEGER:
            if token.value > _INT64_MAX:
                raise self.error(
                    token, f"integer literal {token.text} is out of the int64 range (at most {_INT64_MAX})"
                )
            self.advance()
            return ast.IntLiteral(token.value, pos=position)
        if token.kind is Kind.REAL:
            self.advance()
            return ast.RealLiteral(token.value, pos=position)
        if token.kind is Kind.STRING:
            return self.string_literal()
        if self.at_name():
            return self.name_primary(token)
        if token.kind is Kind.KEYWORD:
            return self.keyword_primary(token)
        if token.is_op("("):
            return self.parenthesized()
        if token.is_op("["):
            return self.list_expression()
        if token.is_op("|"):
            return self.bounded()
        if token.is_op("~"):
            raise self.error(token,
                             "'~' (omitted value) is only allowed as an argument, result or shape extent")
        if token.is_op("..", "..."):
            raise self.error(token, f"expected an expression before '{token.text}'")
        raise self.error(token, f"expected an expression, found {self.describe(token)}")

    def keyword_primary(self, token: Token) -> ast.Expr:
        """``true false inf pi`` and casts ``int(x)``."""
        position = self.pos(token)
        if token.text in ("true", "false"):
            self.advance()
            return ast.BoolLiteral(token.text == "true", pos=position)
        if token.text in ("inf", "pi"):
            self.advance()
            return ast.KeywordConstant(token.text, pos=position)
        if token.text in TYPE_NAMES:
            self.advance()
            if not self.at("("):
                raise self.error(token,
                                 f"type '{token.text}' used as a value; a cast is written '{token.text}(x)'")
            if token.text in ABSTRACT_TYPE_NAMES:
                raise self.error(token, f"cannot cast to the abstract type '{token.text}'")
            return self.cast(token.text, position)
        raise self.error(token, f"expected an expression, found keyword '{token.text}'")

    def name_primary(self, token: Token) -> ast.Expr:
        """Identifiers, ``x.shape``-style members, builtins and generic casts ``T(x)``."""
        position = self.pos(token)
        self.advance()
        name = token.text
        if self.at("("):
            if name in self.type_names:
                return self.cast(name, position)
            if name in BUILTIN_FUNCTIONS:
                return self.builtin(name, position)
            close = difflib.get_close_matches(name, sorted(BUILTIN_FUNCTIONS | self.type_names), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise self.error(token, f"unknown function '{name}'{hint} (operator invocations cannot appear "
                                    f"inside expressions; built-ins: {', '.join(sorted(BUILTIN_FUNCTIONS))})")
        if self.at(".") and self.peek().kind is Kind.IDENTIFIER:
            member = self.peek()
            if member.text in ("shape", "rank", "size"):
                self.advance()
                self.advance()
                return ast.Member(name, member.text, pos=position)
            raise self.error(member, f"expected 'shape', 'rank' or 'size' after '{name}.', found "
                                     f"'{member.text}' (scoped names cannot be used in expressions)")
        return ast.Identifier(name, pos=position)

    def cast(self, type_name: str, position: ast.Position) -> ast.Cast:
        """``type(arg)`` or the default value ``type()``."""
        opener = self.advance()
        arg = None if self.at(")") else self.expression()
        if self.at(","):
            raise self.error(self.token, f"a cast to '{type_name}' takes one argument")
        self.expect_close(opener)
        return ast.Cast(type_name, arg, pos=position)

    def builtin(self, func: str, position: ast.Position) -> ast.Builtin:
        """``func(arg)`` for a built-in math function."""
        opener = self.advance()
        if self.at(")"):
            raise self.error(self.token, f"built-in function '{func}' takes one argument")
        arg = self.expression()
        if self.at(","):
            raise self.error(self.token, f"built-in function '{func}' takes one argument")
        self.expect_close(opener)
        return ast.Builtin(func, arg, pos=position)

    def parenthesized(self) -> ast.Expr:
        """``(expr)`` or a zip tuple ``(a, b, ...)``."""
        opener = self.advance()
        first = self.expression()
        if self.at(","):
            items = [first]
            while self.accept(","):
                items.append(self.expression())
            self.expect_close(opener)
            return ast.Zip(tuple(items), pos=self.pos(opener))
        self.expect_close(opener)
        return first

    def list_expression(self) -> ast.List:
        """``[item, ...]``."""
        opener = self.advance()
        items = []
        if not self.at("]"):
            items.append(self.item())
            while self.accept(","):
                items.append(self.item())
        self.expect_close(opener)
        return ast.List(tuple(items), pos=self.pos(opener))

    def bounded(self) -> ast.Bounded:
        """``|index|`` or ``|index <> lower : upper|``."""
        opener = self.advance()
        index = self.expression()
        lower = upper = None
        if self.accept("<>"):
            lower = self.expression()
            self.expect(":", "between the lower and upper replacement of '|i <> lower : upper|'")
            upper = self.expression()
        elif self.at(":") and isinstance(index, ast.Binary) and index.op == "<":
            # '|i < a : b|' is how the PDF extraction renders '|i <> a : b|'.
            raise self.error(self.token, "expected '|' to close the bounded index; a remapped index is "
                                         "written '|i <> lower : upper|'")  # fmt: skip
        self.expect_close(opener)
        return ast.Bounded(index, lower, upper, pos=self.pos(opener))

    def string_literal(self) -> ast.StringLiteral | ast.Format:
        """One or more adjacent string tokens, joined; placeholders become expressions."""
        start = self.token
        parts: list[str | ast.Expr] = []
        while self.token.kind is Kind.STRING:
            for part in self.advance().value:
                if isinstance(part, Placeholder):
                    parts.append(self.placeholder_expression(part))
                elif parts and isinstance(parts[-1], str):
                    parts[-1] += part
                else:
                    parts.append(part)
        if all(isinstance(part, str) for part in parts):
            return ast.StringLiteral("".join(parts), pos=self.pos(start))  # type: ignore[arg-type]
        return ast.Format(tuple(part for part in parts if part != ""), pos=self.pos(start))

    def placeholder_expression(self, placeholder: Placeholder) -> ast.Expr:
        """The expression inside a ``{...}`` string placeholder."""
        tokens = tokenize(placeholder.text, self.file, placeholder.line, placeholder.column)
        sub = ExpressionParser(tokens, self.file, self.lenient, self.type_names)
        sub.end_name = "the end of the '{}' placeholder"
        value = sub.expression()
        if sub.token.kind is not Kind.END:
            raise sub.error(sub.token, f"unexpected {sub.describe(sub.token)} in string placeholder")
        return value
