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
from uopviz.nnef.syntax.parser_expressions import (
    BINARY_PRECEDENCE,
    BUILTIN_FUNCTIONS,
    CUMULATIVE_FOLD_OPERATORS,
    FOLD_OPERATORS,
    TYPE_NAMES,
    ExpressionParser,
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
_QUALIFIERS = ("static", "dynamic")
_LOOP_KEYWORDS = ("with", "for", "while", "do", "unroll")
_Result = TypeVar("_Result")


class _Parser(ExpressionParser):
    """The parser of whole modules: definitions, their blocks, components and statements (the
    expressions inside them are :class:`ExpressionParser`'s)."""

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

    # -- composition -----------------------------------------------------------------------------

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
