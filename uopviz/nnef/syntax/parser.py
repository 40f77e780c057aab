"""Recursive-descent parser for SkriptND (NNEF 2.0), producing the tree of :mod:`uopviz.nnef.syntax.ast`.

Entry point: :func:`parse_module` ``(text, file="<string>", *, lenient=False) -> ast.Module``;
:func:`parse_expression` parses a lone expression (tests, tools).  This module parses modules,
definitions, their blocks, components and statements; the expressions inside them are parsed by
:class:`~uopviz.nnef.syntax.parser_expressions.ExpressionParser`, on the token cursor of
:mod:`uopviz.nnef.syntax.parser_cursor`.

What is accepted is chapter 2 of the NNEF 2.0 draft and its §2.16 grammar, with the corrections
listed in ``/work/shared/spec/README.md`` and the forms the reference tools and real files use:
``import a, b;``, an optional ``version 2.0;`` and ``extension ...;`` header, ``dynamic`` and
``static`` qualifiers (``shape: dynamic int..``, ``real[b, static c]``, ``..(static n)``), the
``with ... :`` loop-local values of lowerings, ``<T: num>`` generic parameters written after a
definition's name (an alternative spelling of ``@dtype``). Small, meaning-preserving
irregularities are tolerated: a missing ``;`` after ``import x`` or after a component that ends
with ``}``, and ``{a: 1}`` for ``{a = 1}`` in invocation attributes.

Operator precedence (lowest first; binary operators are left-associative), as in the reference
implementation:

====  ======================================================================
 0    ``c ? a : b`` and ``a ?? b`` (right-associative; ``??`` applies after a select)
 1    ``=>``
 2    ``&&  ||  ^`` (one level, left to right)
 3    ``<  <=  >  >=  ==  !=  is  in`` (and ``:=`` as a fold)
 4    ``<?  >?``
 5    ``+  -``
 6    ``*  /  \\  %``
 7    ``**`` (left-associative; binds tighter than a leading unary: ``-x ** 2 == -(x ** 2)``)
 8    unary ``+  -  !  ?``
 9    postfix ``a[i]``, ``a[i, j]``, ``a[i] <- v`` (the substituted value extends to the right)
====  ======================================================================

A fold ``x op ..`` (``x op ...`` cumulative) takes as operand everything to its left at the
precedence of ``op``: ``a * b + ..`` folds ``a * b``; ``x + .. + 42`` adds 42 to the sum.
Pack expansion ``x..`` / repetition ``x..(n)`` applies to a whole item of a list, index list,
shape or ``@using`` target: ``[a[i] <- s..]`` expands the substitution.

Single-item subscripts ``x[i]`` are :class:`~uopviz.nnef.syntax.ast.Index` (pack indexing) since the
parser does not know whether ``x`` is a tensor; ``x[i,]``, ``x[i, j]``, ``x[]``, ``x[i..]`` and
``x[|i|]`` are :class:`~uopviz.nnef.syntax.ast.TensorAccess`.

**Policy on** ``...`` **where** ``..`` **is meant.** The PDF extraction of the specification
turned many pack expansions ``x..`` into ``x...``. ``...`` is a real, different token (the
cumulative fold ``x + ...``), so the parser never reinterprets it silently. By default,
``...`` where only ``..`` is valid (right after an item, a type or a shape extent, or after an
operator that has no cumulative fold such as ``!=`` or ``:=``) is an :class:`NNEFError` that
says to write ``..``. With ``lenient=True`` such a ``...`` is read as ``..`` and an
:class:`~uopviz.nnef.errors.NNEFWarning` naming the place is emitted for each occurrence.
A ``...`` after ``+ * <? >? && ||`` is always the cumulative fold, in both modes.

Every syntax error is an :class:`~uopviz.nnef.errors.NNEFError` with file, line and column.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable as Function
from typing import TypeVar

from uopviz.nnef.errors import NNEFError
from uopviz.nnef.syntax import ast
from uopviz.nnef.syntax.lexer import Kind, Token, tokenize
from uopviz.nnef.syntax.parser_components import ComponentParser
from uopviz.nnef.syntax.parser_expressions import (
    BINARY_PRECEDENCE,
    BUILTIN_FUNCTIONS,
    CUMULATIVE_FOLD_OPERATORS,
    FOLD_OPERATORS,
    TYPE_NAMES,
)

__all__ = [
    "BINARY_PRECEDENCE", "BLOCK_NAMES", "BUILTIN_FUNCTIONS", "CUMULATIVE_FOLD_OPERATORS",
    "FOLD_OPERATORS", "LOWERING_OPERATORS", "TYPE_NAMES", "parse_expression", "parse_module",
]  # fmt: skip

LOWERING_OPERATORS = ("=", "+=", "*=", "&=", "|=", "<?=", ">?=", ":=")
BLOCK_NAMES = (
    "dtype", "attrib", "input", "output", "constant", "variable",
    "using", "assert", "lower", "compose", "update", "quantize",
)  # fmt: skip
_PARAM_BLOCKS = {"attrib": "attribs", "input": "inputs", "output": "outputs",
                 "constant": "constants", "variable": "variables"}  # fmt: skip
_Result = TypeVar("_Result")


class _Parser(ComponentParser):
    """The parser of whole modules: definitions, their blocks and statements (components are
    :class:`~uopviz.nnef.syntax.parser_components.ComponentParser`'s, types
    :class:`~uopviz.nnef.syntax.parser_types.TypeParser`'s, expressions
    :class:`~uopviz.nnef.syntax.parser_expressions.ExpressionParser`'s)."""

    def __init__(self, tokens: list[Token], file: str, lenient: bool, type_names: frozenset[str]) -> None:
        super().__init__(tokens, file, lenient, type_names)
        # Where @dtype blocks and definitions start, to find generic names before parsing a body.
        self._dtype_blocks = [index for index, token in enumerate(tokens)
                              if token.kind is Kind.BLOCK and token.value == "dtype"]  # fmt: skip
        self._definition_keywords = [index for index, token in enumerate(tokens)
                                     if token.is_keyword("operator", "graph")]  # fmt: skip

    # -- module level ----------------------------------------------------------------------------

    def module(self) -> ast.Module:
        """``document ::= [version] extension* import* definition*``."""
        start = self.token
        version = self.version() if self.at_word("version") else None
        extensions: list[str] = []
        while self.at_word("extension"):
            extensions.extend(self.extension())
        imports: list[ast.Import] = []
        while self.at_keyword("import"):
            imports.extend(self.imports())
        definitions: list[ast.Definition] = []
        names: dict[str, ast.Definition] = {}
        while self.token.kind is not Kind.END:
            definition = self.definition()
            if definition.name in names:
                first = names[definition.name].pos
                raise NNEFError(f"'{definition.name}' is already defined at {first.line}:{first.column}",
                                self.file, definition.pos.line, definition.pos.column)  # fmt: skip
            names[definition.name] = definition
            definitions.append(definition)
        return ast.Module(file=self.file, imports=tuple(imports), definitions=tuple(definitions),
                          version=version, extensions=tuple(extensions), pos=self.pos(start))  # fmt: skip

    def version(self) -> tuple[int, int]:
        """``version MAJOR.MINOR;``"""
        self.advance()
        token = self.token
        if token.kind is Kind.REAL and token.text.replace(".", "", 1).isdigit() and "." in token.text:
            self.advance()
            major, minor = token.text.split(".")
        elif token.kind is Kind.INTEGER and self.peek().is_op(".") and self.peek(2).kind is Kind.INTEGER:
            major = self.advance().text
            self.advance()
            minor = self.advance().text
        else:
            raise self.error(token, f"expected a version number such as '2.0', found {self.describe(token)}")
        self.expect_semicolon("the version")
        return int(major), int(minor or 0)

    def extension(self) -> list[str]:
        """``extension NAME [,] NAME ... ;``"""
        self.advance()
        names = [self.qualified_name("an extension name")]
        while not self.at(";"):
            self.accept(",")
            if self.token.kind is not Kind.IDENTIFIER:
                break
            names.append(self.qualified_name("an extension name"))
        self.expect_semicolon("the extension list")
        return names

    def imports(self) -> list[ast.Import]:
        """``import a[, b]*;`` (the ';' may be left out before the next top-level item)."""
        self.advance()
        result = [self._import_name()]
        while self.accept(","):
            result.append(self._import_name())
        if not self.accept(";"):
            starts_item = self.at_keyword("import", "operator", "public", "graph")
            starts_item = starts_item or self.token.kind is Kind.END
            if not starts_item:
                raise self.error_after_previous(
                    f"expected ';' or ',' after the imported module name, found {self.describe(self.token)}"
                )
        return result

    def _import_name(self) -> ast.Import:
        """One module name of an import statement."""
        token = self.token
        return ast.Import(self.qualified_name("a module name after 'import'"), pos=self.pos(token))

    def definition(self) -> ast.Definition:
        """``[public] operator NAME [<generics>] { blocks }`` or ``graph NAME { blocks }``."""
        start = self.token
        public = bool(self.at_keyword("public") and self.advance())
        if self.at_keyword("operator", "graph"):
            kind = self.advance().text
        elif self.at_keyword("import"):
            raise self.error(self.token, "imports must come before all operator and graph definitions")
        elif self.token.kind is Kind.BLOCK:
            raise self.error(self.token,
                             f"block '{self.token.text}' outside of an operator or graph definition")
        else:
            expected = "'operator' or 'graph'" if public else "'operator', 'public operator' or 'graph'"
            raise self.error(self.token, f"expected {expected}, found {self.describe(self.token)}")
        name = self.expect_identifier(f"the name of the {kind}").text
        generics = self.generic_parameters() if self.at("<") else []
        opener = self.expect("{", f"to open the body of {kind} '{name}'")
        self.type_names = TYPE_NAMES | {param.name for param in generics} | self._scan_dtype_names()
        blocks: dict[str, list] = {}
        block_tokens: dict[str, Token] = {}
        while not self.at("}"):
            if self.token.kind is Kind.END:
                raise self.unclosed(opener)
            block_name, entries = self.block(block_tokens)
            blocks[block_name] = entries
        self.expect_close(opener)
        if generics:
            blocks["dtype"] = generics + blocks.get("dtype", [])
        self._check_unique_dtypes(blocks.get("dtype", []))
        fields = {_PARAM_BLOCKS.get(key, key): tuple(value) for key, value in blocks.items()}
        renamed = {"dtype": "dtypes", "using": "usings", "assert": "asserts", "lower": "lowerings",
                   "compose": "components", "update": "updates", "quantize": "quantizations"}  # fmt: skip
        fields = {renamed.get(key, key): value for key, value in fields.items()}
        return ast.Definition(name=name, kind=kind, public=public, pos=self.pos(start), **fields)

    def _check_unique_dtypes(self, params: list[ast.TypeParam]) -> None:
        """Generic type names must be unique within a definition."""
        seen: set[str] = set()
        for param in params:
            if param.name in seen:
                raise NNEFError(f"generic type '{param.name}' is declared twice", self.file,
                                param.pos.line, param.pos.column)  # fmt: skip
            seen.add(param.name)

    def _scan_dtype_names(self) -> set[str]:
        """Names declared in this definition's @dtype block, found ahead of parsing (casts use them).

        Blocks only occur directly in a definition and 'operator' / 'graph' are reserved, so the
        @dtype blocks of this definition are those before the next definition keyword.
        """
        following = [index for index in self._definition_keywords if index > self.index]
        limit = following[0] if following else len(self.tokens)
        names: set[str] = set()
        for block in self._dtype_blocks:
            if self.index <= block < limit:
                names.update(self._names_declared_in(block + 1))
        return names

    def _names_declared_in(self, index: int) -> set[str]:
        """The ``NAME :`` declarations directly inside the braces starting at ``index``."""
        names: set[str] = set()
        depth = 0
        while index < len(self.tokens) - 1:
            token = self.tokens[index]
            depth += token.is_op("{") - token.is_op("}")
            if depth <= 0 and token.is_op("}"):
                break
            if depth == 1 and token.kind is Kind.IDENTIFIER and self.tokens[index + 1].is_op(":"):
                names.add(token.text)
            index += 1
        return names

    def generic_parameters(self) -> list[ast.TypeParam]:
        """``<T: num, S: type = real>`` after a definition's name."""
        opener = self.advance()
        params = [self.type_param()]
        while self.accept(","):
            params.append(self.type_param())
        self.expect_close(opener)
        return params

    def block(self, seen: dict[str, Token]) -> tuple[str, list]:
        """One ``@name { entries }`` block of a definition."""
        token = self.token
        if token.kind is not Kind.BLOCK:
            found = self.describe(token)
            raise self.error(token, f"expected a block such as '@input' or '}}', found {found}")
        name = token.value
        if name not in BLOCK_NAMES:
            close = difflib.get_close_matches(name, BLOCK_NAMES, n=1)
            known = ", ".join("@" + block for block in BLOCK_NAMES)
            hint = f"; did you mean '@{close[0]}'?" if close else f" (blocks: {known})"
            raise self.error(token, f"unknown block '{token.text}'{hint}")
        if name in seen:
            first = seen[name]
            raise self.error(token,
                             f"duplicate block '{token.text}' (first defined at {first.line}:{first.column})")
        seen[name] = token
        self.advance()
        opener = self.expect("{", f"after '{token.text}'")
        entry = self._entry_parser(name)
        entries = []
        while not self.at("}"):
            if self.token.kind in (Kind.END, Kind.BLOCK):
                raise self.unclosed(opener)
            entries.append(entry())
        self.expect_close(opener)
        return name, entries

    def _entry_parser(self, block: str) -> Function[[], object]:
        """The function parsing one entry of the block ``block``."""
        if block in _PARAM_BLOCKS:
            return lambda: self.param(block)
        return {
            "dtype": self.dtype_entry,
            "using": self.using,
            "assert": self.assertion,
            "lower": self.lowering,
            "compose": self.component,
            "update": self.component,
            "quantize": self.quantization,
        }[block]

    # -- declarations ----------------------------------------------------------------------------

    def type_param(self) -> ast.TypeParam:
        """``NAME : base [= default]``."""
        start = self.token
        name = self.expect_identifier("a generic type name").text
        self.expect(":", f"after generic type '{name}'")
        base = self.type_keyword("a base type (type, arith, num, int, real, bool, str)")
        default = None
        if self.accept("="):
            default = self.type_keyword("a default type")
        return ast.TypeParam(name, base, default, pos=self.pos(start))

    def dtype_entry(self) -> ast.TypeParam:
        """An @dtype entry terminated by ';'."""
        param = self.type_param()
        self.expect_semicolon(f"the declaration of generic type '{param.name}'")
        return param

    def param(self, block: str) -> ast.Param:
        """``NAME : type [= default [, i < n]*] ;``."""
        start = self.token
        name = self.expect_identifier(f"a name to declare in @{block}").text
        self.expect(":", f"after '{name}' (declarations are written 'name: type')")
        spec = self.type_spec()
        default = None
        bounds: list[ast.LoopBound] = []
        if self.accept("="):
            default = self.expression()
            while self.accept(","):
                bounds.append(self.loop_bound())
        self.expect_semicolon(f"the declaration of '{name}'")
        return ast.Param(name, spec, default, tuple(bounds), pos=self.pos(start))

    def loop_bound(self) -> ast.LoopBound:
        """``NAME < bound``."""
        start = self.token
        name = self.expect_identifier("an index name of a loop bound 'i < n'").text
        if self.at("<-"):
            raise self.error(self.token, "'<-' is substitution; write '< -' for a bound that is negative")
        self.expect("<", f"after index '{name}' (loop bounds are written '{name} < n')")
        return ast.LoopBound(name, self.expression(), pos=self.pos(start))

    def using(self) -> ast.Using:
        """``target [..(count)] = value ;``."""
        start = self.token
        if self.at("["):
            target = self.list_expression()
            self._check_using_target(target)
        else:
            token = self.expect_identifier("a name or a list of names to define in @using")
            target = ast.Identifier(token.text, pos=self.pos(token))
        count = None
        if self.at_dots():
            dots = self.token
            pack = self.pack_spec("a pack length hint")
            if pack.count is None:
                raise self.error(dots, "a pack length hint in @using is written 'name..(length)'")
            count = pack.count
        self.expect("=", "in @using (entries are written 'name = expression')")
        value = self.expression()
        self.expect_semicolon("the @using entry")
        return ast.Using(target, value, count, pos=self.pos(start))

    def _check_using_target(self, node: ast.Expr) -> None:
        """A destructuring target may only contain names, expansions and tuples of names."""
        if isinstance(node, ast.Identifier):
            return
        if isinstance(node, (ast.List, ast.Zip)):
            for item in node.items:
                self._check_using_target(item)
            return
        if isinstance(node, ast.Expand):
            self._check_using_target(node.value)
            return
        raise NNEFError("only names, 'name..' and '(a, b)..' may appear on the left-hand side of @using",
                        self.file, node.pos.line, node.pos.column)  # fmt: skip

    def assertion(self) -> ast.Assert:
        """``condition [: message [, ['label':] value]*] ;``."""
        start = self.token
        condition = self.expression()
        message = None
        prints: list[ast.AssertPrint] = []
        if self.accept(":"):
            if self.token.kind is not Kind.STRING:
                raise self.error(self.token, f"expected a message string after ':' in the assertion, "
                                             f"found {self.describe(self.token)}")  # fmt: skip
            message = self.string_literal()
            while self.accept(","):
                prints.append(self.assert_print())
        self.expect_semicolon("the assertion")
        return ast.Assert(condition, message, tuple(prints), pos=self.pos(start))

    def assert_print(self) -> ast.AssertPrint:
        """A printed value of an assertion: ``['label':] expression``."""
        start = self.token
        label = None
        if self.token.kind is Kind.STRING and self.peek().is_op(":"):
            literal = self.string_literal()
            if not isinstance(literal, ast.StringLiteral):
                raise self.error(start, "an assertion label cannot contain '{}' placeholders")
            label = literal.value
            self.advance()
        return ast.AssertPrint(self.expression(), label, pos=self.pos(start))

    def lowering(self) -> ast.Lowering:
        """``[unroll..(i -> n)] [with locals :] target op value [, i < n]* [| condition] ;``."""
        start = self.token
        unroll_index = unroll_count = None
        if self.at_keyword("unroll"):
            unroll_token = self.advance()
            if not self.at_dots():
                raise self.error(self.token, "expected '..(index -> count)' after 'unroll'")
            unroll_index, unroll_count = self.iteration_count(allow_omitted_count=False)
            if unroll_count is None:
                raise self.error(unroll_token, "an unrolled lowering needs a count: 'unroll..(i -> n)'")
        local_defs: list[ast.LocalDef] = []
        if self.at_keyword("with"):
            self.advance()
            local_defs.append(self.local_def())
            while self.accept(","):
                local_defs.append(self.local_def())
            if not self.accept(":"):
                raise self.error(self.token, f"expected ':' after the 'with' values of the lowering, "
                                             f"found {self.describe(self.token)}")  # fmt: skip
        target = self.lowering_target()
        if not (self.token.kind is Kind.OPERATOR and self.token.text in LOWERING_OPERATORS):
            ops = ", ".join(f"'{op}'" for op in LOWERING_OPERATORS)
            raise self.error(self.token,
                             f"expected a lowering assignment ({ops}), found {self.describe(self.token)}")
        op = self.advance().text
        value = self.expression()
        bounds: list[ast.LoopBound] = []
        while self.accept(","):
            bounds.append(self.loop_bound())
        condition = self.expression() if self.accept("|") else None
        self.expect_semicolon("the lowering")
        return ast.Lowering(target, op, value, tuple(bounds), condition, tuple(local_defs),
                            unroll_index, unroll_count, pos=self.pos(start))  # fmt: skip

    def local_def(self) -> ast.LocalDef:
        """``NAME = value`` in a lowering's ``with`` clause."""
        start = self.token
        name = self.expect_identifier("a loop-local name after 'with'").text
        self.expect("=", f"after loop-local '{name}'")
        return ast.LocalDef(name, self.expression(), pos=self.pos(start))

    def lowering_target(self) -> ast.Expr:
        """``tensor[indices]`` or ``pack[k][indices]`` on the left of a lowering."""
        token = self.expect_identifier("the output tensor of the lowering")
        target: ast.Expr = ast.Identifier(token.text, pos=self.pos(token))
        if not self.at("["):
            raise self.error(self.token, f"expected '[' after '{token.text}' (the left-hand side of a "
                                         f"lowering is a tensor access such as '{token.text}[i, j]')")
        while self.at("["):
            target = self.subscript(target, allow_substitution=False)
        return target

    def quantization(self) -> ast.Quantization:
        """``tensor : op[<types>][{attribs}] ;``."""
        start = self.token
        tensor = self.qualified_name("a tensor name to quantize")
        self.expect(":", f"after '{tensor}' (quantization is written 'tensor: op{{...}}')")
        op_token = self.token
        name = self.qualified_name("a quantization operator")
        types = self.generic_arguments() if self.at("<") else ()
        attribs = self.attribute_assignments() if self.at("{") else ()
        self.expect_semicolon(f"the quantization of '{tensor}'")
        invocation = ast.Invocation(name, (), attribs, types, pos=self.pos(op_token))
        return ast.Quantization(tensor, invocation, pos=self.pos(start))

MAX_NESTING = 100


def _guarded(parser: _Parser, parse: Function[[], _Result]) -> _Result:
    """Run ``parse``, turning Python's recursion limit and trees deeper than :data:`MAX_NESTING`
    into located errors."""
    try:
        tree = parse()
    except RecursionError:
        raise parser.error(parser.token, "expression or block nested too deeply for the parser") from None
    _check_nesting(tree)
    return tree


def _check_nesting(tree: ast.Node) -> None:
    """Raise at the first node nested deeper than :data:`MAX_NESTING` (walked without recursion)."""
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_NESTING:
            raise NNEFError.at(node.pos, f"expression or block nested more than {MAX_NESTING} levels deep "
                                         "(split it into named intermediate values)")  # fmt: skip
        stack.extend((child, depth + 1) for child in ast.children(node))


def parse_module(text: str, file: str = "<string>", *, lenient: bool = False) -> ast.Module:
    """Parse SkriptND source ``text`` (read from ``file``, used in positions and errors).

    With ``lenient=True``, ``...`` written where only ``..`` is valid is read as ``..`` with an
    :class:`~uopviz.nnef.errors.NNEFWarning` (see the module docstring). Raises
    :class:`~uopviz.nnef.errors.NNEFError` on the first syntax error.
    """
    parser = _Parser(tokenize(text, file), file, lenient, TYPE_NAMES)
    return _guarded(parser, parser.module)


def parse_expression(
    text: str, file: str = "<string>", *, lenient: bool = False, type_names: frozenset[str] = frozenset()
) -> ast.Expr:
    """Parse a single SkriptND expression; ``type_names`` adds generic names usable as casts."""
    parser = _Parser(tokenize(text, file), file, lenient, TYPE_NAMES | type_names)
    value = _guarded(parser, parser.expression)
    if parser.token.kind is not Kind.END:
        raise parser.error(parser.token, f"unexpected {parser.describe(parser.token)} after the expression")
    return value
