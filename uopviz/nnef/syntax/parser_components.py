"""The components of SkriptND ``@compose`` blocks: :class:`ComponentParser` reads results and
their values (invocations with generic arguments and attribute assignments, branches, loops with
their carries, scans and iteration counts, blocks), for the definitions that
:mod:`uopviz.nnef.syntax.parser` parses above it."""

from __future__ import annotations

from uopviz.nnef.syntax import ast
from uopviz.nnef.syntax.lexer import Kind, Token
from uopviz.nnef.syntax.parser_types import TypeParser

__all__ = ["ComponentParser"]

_LOOP_KEYWORDS = ("with", "for", "while", "do", "unroll")


class ComponentParser(TypeParser):
    """Parses components: results, invocations, branches, loops and blocks."""

    def component(self) -> ast.Component:
        """``results = value ;`` in @compose / @update / blocks."""
        start = self.token
        results = [self.result_group()]
        while self.accept(","):
            results.append(self.result_group())
        self.expect("=", "after the results of the component")
        value = self.component_value()
        ends_with_brace = self.tokens[self.index - 1].is_op("}")
        if not self.accept(";") and not ends_with_brace:
            raise self.error_after_previous(
                f"expected ';' after the component, found {self.describe(self.token)}")
        return ast.Component(tuple(results), value, pos=self.pos(start))

    def result_group(self) -> ast.Result | ast.ResultList | ast.ResultTuple:
        """``[a, b..]``, ``(a, b)..``, ``~`` or ``name[: type[shape]][..(n)]``."""
        if self.at("["):
            opener = self.advance()
            items: list[ast.Result | ast.ResultTuple] = []
            if not self.at("]"):
                items.append(self.result_tuple() if self.at("(") else self.result())
                while self.accept(","):
                    items.append(self.result_tuple() if self.at("(") else self.result())
            self.expect_close(opener)
            return ast.ResultList(tuple(items), pos=self.pos(opener))
        if self.at("("):
            return self.result_tuple()
        return self.result()

    def result_tuple(self) -> ast.ResultTuple:
        """``(a, b)..[(n)]`` that unzips a pack."""
        opener = self.advance()
        items = [self.result()]
        while self.accept(","):
            items.append(self.result())
        self.expect_close(opener)
        pack = self.pack_spec("a packed result") if self.at_dots() else None
        return ast.ResultTuple(tuple(items), pack, pos=self.pos(opener))

    def result(self) -> ast.Result:
        """``~`` or ``name [: type[shape]] [..[(count)]]``."""
        start = self.token
        if self.accept("~"):
            return ast.Result(None, pos=self.pos(start))
        name = self.expect_identifier("a result name or '~'").text
        spec = None
        if self.accept(":"):
            spec = self.type_spec(allow_pack=False)
        pack = self.pack_spec("a packed result") if self.at_dots() else None
        return ast.Result(name, spec, pack, pos=self.pos(start))

    def component_value(self) -> ast.Callable:
        """The right-hand side of a component: branch, loop or callable."""
        if self.at_keyword("if"):
            return self.branch()
        if self.at_keyword(*_LOOP_KEYWORDS):
            return self.loop()
        return self.callable()

    def branch(self) -> ast.If:
        """``if c then v (elif c then v)* else v``."""
        start = self.token
        branches = []
        while True:
            self.advance()
            condition = self.callable()
            if not self.at_keyword("then"):
                raise self.error(self.token,
                                 f"expected 'then' after the condition, found {self.describe(self.token)}")
            self.advance()
            branches.append((condition, self.callable()))
            if not self.at_keyword("elif"):
                break
        if not self.at_keyword("else"):
            raise self.error(self.token, f"expected 'elif' or 'else' (a branch must end with an 'else'), "
                                         f"found {self.describe(self.token)}")  # fmt: skip
        self.advance()
        return ast.If(tuple(branches), self.callable(), pos=self.pos(start))

    def loop(self) -> ast.Loop:
        """``[with ...] [for ...] [while c] (do|unroll)[..([i ->] n)] body [while c]``."""
        start = self.token
        carries: list[ast.Carry] = []
        scans: list[ast.Scan] = []
        if self.at_keyword("with"):
            self.advance()
            carries.append(self.carry())
            while self.accept(","):
                carries.append(self.carry())
        if self.at_keyword("for"):
            self.advance()
            scans.append(self.scan())
            while self.accept(","):
                scans.append(self.scan())
        condition = None
        if self.at_keyword("while"):
            self.advance()
            condition = self.callable()
        if not self.at_keyword("do", "unroll"):
            raise self.error(self.token, f"expected 'do' or 'unroll' to start the loop body, "
                                         f"found {self.describe(self.token)}")  # fmt: skip
        unroll = self.advance().text == "unroll"
        index = count = None
        if self.at_dots():
            index, count = self.iteration_count(allow_omitted_count=True)
        body = self.callable()
        pretest = condition is not None
        if condition is None and self.at_keyword("while"):
            self.advance()
            condition = self.callable()
        return ast.Loop(body, tuple(carries), tuple(scans), condition, pretest, unroll, index, count,
                        pos=self.pos(start))  # fmt: skip

    def carry(self) -> ast.Carry:
        """``name [: type[shape]] = initial``."""
        start = self.token
        name = self.expect_identifier("a loop-carried variable name after 'with'").text
        spec = self.type_spec(allow_pack=False) if self.accept(":") else None
        self.expect("=", f"after loop variable '{name}' (written '{name} = initial value')")
        return ast.Carry(name, self.expression(), spec, pos=self.pos(start))

    def scan(self) -> ast.Scan:
        """``item : pack``."""
        start = self.token
        name = self.expect_identifier("a loop item name after 'for'").text
        self.expect(":", f"after loop item '{name}' (scans are written '{name} : pack')")
        return ast.Scan(name, self.expression(), pos=self.pos(start))

    def iteration_count(self, allow_omitted_count: bool) -> tuple[str | None, ast.Expr | None]:
        """``..( [index ->] count )``; the count may be left out after ``->`` for loops."""
        self.accept_expansion_dots("an iteration count")
        opener = self.expect("(", "after '..' of the iteration count")
        index = None
        if self.token.kind is Kind.IDENTIFIER and self.peek().is_op("->"):
            index = self.advance().text
            self.advance()
            if self.at(")"):
                if not allow_omitted_count:
                    raise self.error(self.token, "expected the iteration count after '->'")
                self.advance()
                return index, None
        count = self.expression()
        self.expect_close(opener)
        return index, count

    def callable(self) -> ast.Callable:
        """An invocation, a ``{...}`` block (either optionally labelled) or an expression."""
        start = self.token
        if self.at("{"):
            return self.block_body(None, start)
        if self.token.kind is not Kind.IDENTIFIER:
            return self.expression()
        if self.peek().is_op(":"):
            label = self.advance().text
            self.advance()
            if self.at("{"):
                return self.block_body(label, start)
            if self.token.kind is not Kind.IDENTIFIER:
                raise self.error(self.token, f"expected an operator invocation or a block after label "
                                             f"'{label}:', found {self.describe(self.token)}")  # fmt: skip
            return self.invocation(label, start)
        mark = self.index
        self.qualified_name("an operator name")
        is_invocation = self.at("(", "{") or (self.at("<") and self._generic_arguments_ahead())
        self.index = mark
        if is_invocation:
            return self.invocation(None, start)
        return self.expression()

    def _generic_arguments_ahead(self) -> bool:
        """Whether ``<T, ...>`` followed by ``(`` or ``{`` starts here (versus a comparison)."""
        index = self.index + 1
        while True:
            token = self.tokens[index]
            # Only declared types qualify, which tells 'op<T>(x)' from 'a < b > (c)'.
            if token.text not in self.type_names or token.kind not in (Kind.IDENTIFIER, Kind.KEYWORD):
                return False
            index += 1
            if self.tokens[index].is_op(","):
                index += 1
                continue
            return self.tokens[index].is_op(">") and self.tokens[index + 1].is_op("(", "{")

    def invocation(self, label: str | None, start: Token) -> ast.Invocation:
        """``name [<types>] [{attribs}] (args)``."""
        name = self.qualified_name("an operator name")
        types = self.generic_arguments() if self.at("<") else ()
        attribs = self.attribute_assignments() if self.at("{") else ()
        if not self.at("("):
            found = self.describe(self.token)
            raise self.error(self.token, f"expected '(' with the arguments of '{name}', found {found}")
        opener = self.advance()
        args: list[ast.Expr] = []
        if not self.at(")"):
            args.append(self.argument())
            while self.accept(","):
                args.append(self.argument())
        self.expect_close(opener)
        return ast.Invocation(name, tuple(args), attribs, types, label, pos=self.pos(start))

    def argument(self) -> ast.Expr:
        """An invocation argument: an expression or ``~``."""
        token = self.accept("~")
        return ast.Placeholder(pos=self.pos(token)) if token else self.expression()

    def generic_arguments(self) -> tuple[str, ...]:
        """``<type, ...>`` of an invocation."""
        opener = self.advance()
        types = [self.type_name()]
        while self.accept(","):
            types.append(self.type_name())
        self.expect_close(opener)
        return tuple(types)

    def attribute_assignments(self) -> tuple[tuple[str, ast.Expr], ...]:
        """``{name = value, ...}`` (``name: value`` is accepted too)."""
        opener = self.advance()
        pairs: list[tuple[str, ast.Expr]] = []
        names: set[str] = set()
        while not self.at("}"):
            token = self.expect_identifier("an attribute name")
            if token.text in names:
                raise self.error(token, f"attribute '{token.text}' is assigned twice")
            names.add(token.text)
            if not self.accept("=", ":"):
                raise self.error(self.token, f"expected '=' after attribute '{token.text}', "
                                             f"found {self.describe(self.token)}")  # fmt: skip
            pairs.append((token.text, self.expression()))
            if not self.accept(","):
                break
        self.expect_close(opener)
        return tuple(pairs)

    def block_body(self, label: str | None, start: Token) -> ast.Block:
        """``{ components; yield values; }``."""
        opener = self.advance()
        components = []
        while not self.at_keyword("yield"):
            if self.at("}"):
                raise self.error(self.token, "a block must end with 'yield values;' before its '}'")
            if self.token.kind in (Kind.END, Kind.BLOCK):
                raise self.unclosed(opener)
            components.append(self.component())
        self.advance()
        yields = [self.expression()]
        while self.accept(","):
            yields.append(self.expression())
        self.expect_semicolon("the yielded values")
        if not self.at("}"):
            raise self.error(self.token, "'yield' must be the last statement of a block; expected '}' to "
                                         f"close '{{' opened at {opener.line}:{opener.column}, "
                                         f"found {self.describe(self.token)}")
        self.advance()
        return ast.Block(tuple(components), tuple(yields), label, pos=self.pos(start))


#: The deepest syntax tree accepted (the stdlib's deepest is 14 levels). Later stages (composer,
#: evaluator, printer, lowering) walk the tree recursively; bounding the depth here keeps them inside
#: Python's recursion limit: a left-associative chain ``a + b + ...`` parses without recursion but
#: nests one level per operator.
