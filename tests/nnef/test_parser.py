"""The SkriptND parser and printer: tree shapes, precedence, round trips and located syntax errors.

Round trips check ``parse(print(parse(src))) == parse(src)`` (positions are not part of ``==``) and
that printing is idempotent. The spec examples below are copied from chapters 2 and 3 of the
NNEF 2.0 draft with the extraction defects listed in /work/shared/spec/README.md corrected.
"""

from __future__ import annotations

import functools
import itertools
import pickle
import re
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uopviz.nnef import ast, examples
from uopviz.nnef.errors import NNEFError, NNEFWarning
from uopviz.nnef.syntax.parser import (
    BINARY_PRECEDENCE,
    BUILTIN_FUNCTIONS,
    CUMULATIVE_FOLD_OPERATORS,
    FOLD_OPERATORS,
    parse_expression,
    parse_module,
)
from uopviz.nnef.syntax.printer import print_expression, print_module

STDLIB = Path(__file__).resolve().parents[2] / "uopviz" / "nnef" / "stdlib"


def roundtrip(source: str) -> ast.Module:
    """Parse, print, re-parse; the trees must be equal and printing must be a fixed point."""
    module = parse_module(source, "first.sknd")
    text = print_module(module)
    again = parse_module(text, "second.sknd")
    assert again == module, f"round trip changed the tree; printed text:\n{text}"
    assert print_module(again) == text
    return module


def expression_roundtrip(source: str) -> ast.Expr:
    """The same for a lone expression."""
    tree = parse_expression(source, type_names=frozenset({"T"}))
    text = print_expression(tree)
    assert parse_expression(text, type_names=frozenset({"T"})) == tree, text
    return tree


def op(body: str, head: str = "operator op") -> str:
    """Wrap blocks into a definition."""
    return f"{head} {{\n{body}\n}}\n"


# ------------------------------------------------------------------------------------------------
# Expression trees


I = ast.Identifier  # noqa: E741 - short constructors keep the expected trees readable
N = ast.IntLiteral


def B(op: str, left: ast.Expr, right: ast.Expr) -> ast.Binary:
    """A binary node."""
    return ast.Binary(op, left, right)


@pytest.mark.parametrize(
    ("source", "tree"),
    [
        ("a + b * c", B("+", I("a"), B("*", I("b"), I("c")))),
        ("a - b - c", B("-", B("-", I("a"), I("b")), I("c"))),
        ("a * b + c", B("+", B("*", I("a"), I("b")), I("c"))),
        ("a / b \\ c % d", B("%", B("\\", B("/", I("a"), I("b")), I("c")), I("d"))),
        ("a + b <? c", B("<?", B("+", I("a"), I("b")), I("c"))),
        ("a <? b < c", B("<", B("<?", I("a"), I("b")), I("c"))),
        ("a < b && c", B("&&", B("<", I("a"), I("b")), I("c"))),
        ("a && b || c", B("||", B("&&", I("a"), I("b")), I("c"))),
        ("a || b && c", B("&&", B("||", I("a"), I("b")), I("c"))),
        ("a ^ b", B("^", I("a"), I("b"))),
        ("a && b => c", B("=>", B("&&", I("a"), I("b")), I("c"))),
        ("x is -1", B("is", I("x"), ast.Unary("-", N(1)))),
        ("x in xs == true", B("==", B("in", I("x"), I("xs")), ast.BoolLiteral(True))),
        ("a ** b ** c", B("**", B("**", I("a"), I("b")), I("c"))),
        ("-x ** 2", ast.Unary("-", B("**", I("x"), N(2)))),
        ("2 ** -x", B("**", N(2), ast.Unary("-", I("x")))),
        ("!a && b", B("&&", ast.Unary("!", I("a")), I("b"))),
        ("?x && c", B("&&", ast.Unary("?", I("x")), I("c"))),
        ("c ? a : b", ast.Select(I("c"), I("a"), I("b"))),
        ("c ? a", ast.Select(I("c"), I("a"), None)),
        ("c ? a : d ? e : f", ast.Select(I("c"), I("a"), ast.Select(I("d"), I("e"), I("f")))),
        ("a ?? b ?? c", ast.Coalesce(I("a"), ast.Coalesce(I("b"), I("c")))),
        ("2 * p ?? q + 1", ast.Coalesce(B("*", N(2), I("p")), B("+", I("q"), N(1)))),
        ("c ? a : b ?? d", ast.Select(I("c"), I("a"), ast.Coalesce(I("b"), I("d")))),
        ("x + ..", ast.Fold("+", I("x"))),
        ("x + ...", ast.Fold("+", I("x"), cumulative=True)),
        ("a * b + ..", ast.Fold("+", B("*", I("a"), I("b")))),
        ("a + b * ..", B("+", I("a"), ast.Fold("*", I("b")))),
        ("x + .. + 42", B("+", ast.Fold("+", I("x")), N(42))),
        ("x <? ..", ast.Fold("<?", I("x"))),
        ("x >? ...", ast.Fold(">?", I("x"), cumulative=True)),
        ("v := ..", ast.Fold(":=", I("v"))),
        ("axes != ..", ast.Fold("!=", I("axes"))),
        ("x && ..", ast.Fold("&&", I("x"))),
        ("(x + ..) * 2", B("*", ast.Fold("+", I("x")), N(2))),
        ("x.shape", ast.Member("x", "shape")),
        ("x.rank + xs.size", B("+", ast.Member("x", "rank"), ast.Member("xs", "size"))),
        ("input.shape[i]", ast.Index(ast.Member("input", "shape"), I("i"))),
        ("a[i]", ast.Index(I("a"), I("i"))),
        ("a[i:j]", ast.Index(I("a"), ast.Range(I("i"), I("j")))),
        ("a[::-1]", ast.Index(I("a"), ast.Range(None, None, ast.Unary("-", N(1))))),
        ("a[1:]", ast.Index(I("a"), ast.Range(N(1), None))),
        ("a[:r]", ast.Index(I("a"), ast.Range(None, I("r")))),
        ("a[!m]", ast.Index(I("a"), ast.Unary("!", I("m")))),
        ("p[:-1][1:]",
         ast.Index(ast.Index(I("p"), ast.Range(None, ast.Unary("-", N(1)))), ast.Range(N(1), None))),
        ("x[i,]", ast.TensorAccess(I("x"), (I("i"),))),
        ("x[i, j]", ast.TensorAccess(I("x"), (I("i"), I("j")))),
        ("x[]", ast.TensorAccess(I("x"), ())),
        ("x[i..]", ast.TensorAccess(I("x"), (ast.Expand(I("i")),))),
        ("x[:,]", ast.TensorAccess(I("x"), (ast.Range(None, None),))),
        ("x[i, :]", ast.TensorAccess(I("x"), (I("i"), ast.Range(None, None)))),
        ("xs[k][i, j]", ast.TensorAccess(ast.Index(I("xs"), I("k")), (I("i"), I("j")))),
        ("x[|i|]", ast.TensorAccess(I("x"), (ast.Bounded(I("i")),))),
        ("x[|i <> 0 : s - 1|, j]",
         ast.TensorAccess(I("x"), (ast.Bounded(I("i"), N(0), B("-", I("s"), N(1))), I("j")))),
        ("x[|i|..]", ast.TensorAccess(I("x"), (ast.Expand(ast.Bounded(I("i"))),))),
        ("a[i] <- b", ast.Substitute(I("a"), I("i"), I("b"))),
        ("a[i] <- b + 1", ast.Substitute(I("a"), I("i"), B("+", I("b"), N(1)))),
        ("[a, b.., c]", ast.List((I("a"), ast.Expand(I("b")), I("c")))),
        ("[a..(5)]", ast.List((ast.Expand(I("a"), N(5)),))),
        ("[1 ..(d)]", ast.List((ast.Expand(N(1), I("d")),))),
        ("[0, 2:n, b..]", ast.List((N(0), ast.Range(N(2), I("n")), ast.Expand(I("b"))))),
        ("[b:e:s]", ast.List((ast.Range(I("b"), I("e"), I("s")),))),
        ("[(a, b)..]", ast.List((ast.Expand(ast.Zip((I("a"), I("b")))),))),
        ("[]", ast.List(())),
        ("[o[c] <- s..]", ast.List((ast.Expand(ast.Substitute(I("o"), I("c"), I("s"))),))),
        ("int(x)", ast.Cast("int", I("x"))),
        ("real()", ast.Cast("real", None)),
        ("T(1)", ast.Cast("T", N(1))),
        ("sqrt(x)", ast.Builtin("sqrt", I("x"))),
        ("true", ast.BoolLiteral(True)),
        ("inf", ast.KeywordConstant("inf")),
        ("-pi", ast.Unary("-", ast.KeywordConstant("pi"))),
        ("1.5", ast.RealLiteral(1.5)),
        ("'a' 'b'", ast.StringLiteral("ab")),
        ('"a = {a + 2}"', ast.Format(("a = ", B("+", I("a"), N(2))))),
        ('"{x}" " and {y}"', ast.Format((I("x"), " and ", I("y")))),
        ("(a, b, c)", ast.Zip((I("a"), I("b"), I("c")))),
        ("is + 1", B("+", I("is"), N(1))),
    ],
)
def test_expression_trees(source: str, tree: ast.Expr) -> None:
    assert parse_expression(source, type_names=frozenset({"T"})) == tree
    expression_roundtrip(source)


def test_positions_of_nodes() -> None:
    tree = parse_expression("a +\n  b * c", "p.sknd")
    assert tree.pos == ast.Position("p.sknd", 1, 1)
    assert tree.right.pos == ast.Position("p.sknd", 2, 3)
    assert tree.right.right.pos == ast.Position("p.sknd", 2, 7)


def test_placeholder_expressions_are_located_in_the_file() -> None:
    module = parse_module(op('    @assert {\n        a > 0: "bad {a + b}";\n    }'), "q.sknd")
    message = module.definitions[0].asserts[0].message
    assert isinstance(message, ast.Format)
    assert message.parts[1].pos == ast.Position("q.sknd", 3, 22)
    assert message.parts[1].right.pos == ast.Position("q.sknd", 3, 26)


@pytest.mark.parametrize(
    "source",
    [
        "(a + b) * c", "a - (b - c)", "a - (b + ..)", "(a ?? b) + c", "(c ? a : b) * 2",
        "c ? (d ? x) : y", "c ? (d ? x : y) : z", "(c ? a : b) ? x : y", "(a[i] <- b)[j]",
        "(a[i] <- b) + 1", "(-x) ** 2", "-(-x)", "!(!x)", "?(?x)", "2 ** (-1)", "a ** (b ** c)",
        "-(a + b)", "(a + b)[i]", "[(x + ..)..]", "[x + .. ..]", "|(c ? a : b)|", "x[(c ? a)..(2)]",
        "a[(c ? a):b]", "a[i] <- (c ? x)", "(a, b)", "sqrt(x) + int(y)", "f ?? (g ?? h)",
        "((a => b) => c)", "a => (b => c)", "x <? ..", "[1 ..(3), 2.5 ..(n), x..]", "(1.5)",
        '"quote \\" and brace \\{ \\} and {x}"', "'single'", "1e-05", "1e+16", "[0:r:2]",
    ],
)
def test_expression_roundtrips(source: str) -> None:
    expression_roundtrip(source)


# ------------------------------------------------------------------------------------------------
# Module structure


def test_imports_version_and_extensions() -> None:
    module = roundtrip("version 2.0;\nextension KHR_a, KHR_b;\nimport nn, layout;\nimport custom.ops;\n")
    assert module.version == (2, 0)
    assert module.extensions == ("KHR_a", "KHR_b")
    assert [item.module for item in module.imports] == ["nn", "layout", "custom.ops"]


def test_import_without_semicolon_before_a_definition() -> None:
    module = parse_module("import nn\nimport layout\ngraph G { }")
    assert [item.module for item in module.imports] == ["nn", "layout"]


def test_definition_kinds() -> None:
    module = roundtrip("operator a { }\npublic operator b { }\ngraph c { }\n")
    assert [(d.name, d.kind, d.public, d.is_graph) for d in module.definitions] == [
        ("a", "operator", False, False),
        ("b", "operator", True, False),
        ("c", "graph", False, True),
    ]
    assert module.graphs == (module.definitions[2],)
    assert module.definition("b") is module.definitions[1]


def test_generic_parameters_after_the_name_are_dtypes() -> None:
    written = parse_module("operator f<T: num = real, S: type> { @input { x: T[n]; } }")
    blocks = parse_module("operator f { @dtype { T: num = real; S: type; } @input { x: T[n]; } }")
    assert written == blocks
    assert written.definitions[0].dtypes == (ast.TypeParam("T", "num", "real"), ast.TypeParam("S", "type"))


def test_declarations() -> None:
    module = roundtrip(
        op(
            """
    @dtype { T: num; }
    @attrib {
        a: int = 42;
        b: int..(k) = [];
        c: optional int..(d);
        e: int.. = [0:r];
        shape: dynamic int..;
        f: optional dynamic int;
    }
    @input {
        x: real^(r)[s..(d), z..];
        xs: real[z, s..(l), ..t]..(k);
        y: T[b, static c];
        w: real[s | 10, ~ | 20, t | 5 ..(3)];
        p: optional real[n] = 0.0;
        q: real[n]..(static k);
    }
    @constant {
        I: real[n, n] = i == j ? 1.0 : 0.0, i < n, j < n;
    }
    @output {
        o: real[~ | k, m];
        g: real;
        h: real[~, ~];
        u: int[d, k | (s * ..)];
    }
"""
        )
    )
    definition = module.definitions[0]
    a, b, c, e, shape, f = definition.attribs
    assert a.default == N(42) and a.type == ast.TypeSpec("int")
    assert b.type.pack == ast.PackSpec(I("k")) and b.default == ast.List(())
    assert c.type.optional and c.type.pack.count == I("d")
    assert e.type.pack == ast.PackSpec() and e.default == ast.List((ast.Range(N(0), I("r")),))
    assert shape.type.qualifier == "dynamic" and shape.type.pack == ast.PackSpec()
    assert f.type.optional and f.type.qualifier == "dynamic"
    x, xs, y, w, p, q = definition.inputs
    assert x.type.rank == I("r")
    assert x.type.shape.extents == (
        ast.Extent(I("s"), pack=ast.PackSpec(I("d"))),
        ast.Extent(I("z"), pack=ast.PackSpec()),
    )
    assert xs.type.shape.extents[2] == ast.Extent(I("t"), distinct=True)
    assert xs.type.pack == ast.PackSpec(I("k"))
    assert y.type.shape.extents[1] == ast.Extent(I("c"), qualifier="static")
    assert w.type.shape.extents == (
        ast.Extent(I("s"), bound=N(10)),
        ast.Extent(ast.Placeholder(), bound=N(20)),
        ast.Extent(I("t"), bound=N(5), pack=ast.PackSpec(N(3))),
    )
    assert p.default == ast.RealLiteral(0.0)
    assert q.type.pack == ast.PackSpec(I("k"), qualifier="static")
    (identity,) = definition.constants
    assert identity.bounds == (ast.LoopBound("i", I("n")), ast.LoopBound("j", I("n")))
    o, g, h, u = definition.outputs
    assert o.type.shape.extents[0] == ast.Extent(ast.Placeholder(), bound=I("k"))
    assert g.type.shape is None
    assert u.type.shape.extents[1] == ast.Extent(I("k"), bound=ast.Fold("*", I("s")))


def test_using_and_assert_blocks() -> None:
    module = roundtrip(
        op(
            """
    @using {
        c = a + d;
        c..(n) = [a..(n)];
        [a, b..] = c;
        [(e, f)..] = c;
    }
    @assert {
        b > 0: "b must be positive", b;
        a % b == 0: "a must be divisible by b", a, b;
        r + c == 42: "some condition";
        stride != 0;
        axes >= -d: "axes between {-d} and {d}", 'output.rank': d + k, axes;
    }
"""
        )
    )
    definition = module.definitions[0]
    assert definition.usings[1].count == I("n")
    assert definition.usings[2].target == ast.List((I("a"), ast.Expand(I("b"))))
    assert definition.usings[3].target == ast.List((ast.Expand(ast.Zip((I("e"), I("f")))),))
    last = definition.asserts[4]
    assert last.prints == (ast.AssertPrint(B("+", I("d"), I("k")), "output.rank"), ast.AssertPrint(I("axes")))
    assert definition.asserts[3].message is None


def test_lowering_forms() -> None:
    module = roundtrip(
        op(
            """
    @lower {
        C[i, j] += A[i, l] * B[l, j], i < m, l < k, j < n;
        idx[] = 0;
        idx[] := i, i < n | x[i,] > x[idx[],];
        idx[:,] := [i, j], i < m, j < n | x[i, j] > x[idx[:,]..];
        unroll..(ki -> k) ys[ki][ni, mi] = xs[ki][ni, mi] + z[ni, mi], ni < n, mi < m;
        with z = x[i..] ** 2, w = z + 1: y[i..] = z * sin(w), i < s;
        y[i] <?= x[|i - n <> 0 : s - 1|], i < s + 2 * n;
        y[i] >?= x[i], i < s;
        b[i] &= c[i], i < s;
        b[i] |= c[i], i < s;
        p[i] *= c[i], i < s;
        output[si.., (i * strides) + .., ti..] = input[si.., i.., ti..], si < s, i < shape, ti < t;
    }
"""
        )
    )
    lowerings = module.definitions[0].lowerings
    assert [lowering.op for lowering in lowerings] == [
        "+=", "=", ":=", ":=", "=", "=", "<?=", ">?=", "&=", "|=", "*=", "=",
    ]  # fmt: skip
    assert lowerings[2].condition == B(">", ast.TensorAccess(I("x"), (I("i"),)),
                                       ast.TensorAccess(I("x"), (ast.TensorAccess(I("idx"), ()),)))
    assert (lowerings[4].unroll_index, lowerings[4].unroll_count) == ("ki", I("k"))
    assert [local.name for local in lowerings[5].locals] == ["z", "w"]
    assert lowerings[11].target.indices[1] == ast.Fold("+", B("*", I("i"), I("strides")))


def test_compose_forms() -> None:
    module = roundtrip(
        op(
            """
    @compose {
        z = mul(x, a);
        a, ~, c = op(x, ~, z);
        a..(n), [b, c..(k)] = op(x, [y, z]);
        y = op1: op{a = true, b = [1, 2, 3]}(x);
        x = op<real>(y);
        w = nn.conv{padding = 0, stride = 4}(input, kernel1, bias1);
        q = layout.flatten{axis = 1}(w);
        y = x;
        y = (sqrt(x));
        y = x < y;
        d = a < b > (c && e);
        v = if cond(x, y) then op1(x, y) else op2(x, y);
        v = if ?x && c then op1(x) elif c2 then {
            r = op2(x);
            yield r;
        } else x;
        y = with sum: real[n] = 0.0 for x : xs do add(sum, x);
        ys = for x : xs do add(x, z);
        s = with s = 0 do..(i -> k) add(s, i);
        B = with X = I do..(p) matmul(X, A);
        z = with x = x0 do op(x, y) while cond(x);
        z = with x = x0 while cond(x) do op(x, y);
        z, ~ = with x = x0, cond = True while cond do op(x, y);
        y = with sum: real[n] = 0.0 for x : xs unroll add(sum, x);
        t = with a = 0 do..(i ->) step(a, i) while c(a);
        b = label: {
            y = op1(x);
            z = op2(y);
            yield y, z;
        };
        m: real[n], (e, f)..(2) = op(x);
    }
    @update {
        w = mul_add(dw, update_rate, w);
    }
    @quantize {
        a: quant_op1{attr1 = true};
        op1.w: quant.linear<real>{bits = 8};
    }
"""
        )
    )
    definition = module.definitions[0]
    components = definition.components
    assert components[1].results == (ast.Result("a"), ast.Result(None), ast.Result("c"))
    assert components[1].value.args == (I("x"), ast.Placeholder(), I("z"))
    assert components[2].results == (
        ast.Result("a", pack=ast.PackSpec(I("n"))),
        ast.ResultList((ast.Result("b"), ast.Result("c", pack=ast.PackSpec(I("k"))))),
    )
    labelled = components[3].value
    assert (labelled.label, labelled.name) == ("op1", "op")
    assert labelled.attribs == (("a", ast.BoolLiteral(True)), ("b", ast.List((N(1), N(2), N(3)))))
    assert components[4].value.types == ("real",)
    assert components[5].value.name == "nn.conv"
    assert components[7].value == I("x")
    assert components[8].value == ast.Builtin("sqrt", I("x"))
    assert components[9].value == B("<", I("x"), I("y"))
    branch = components[12].value
    assert isinstance(branch, ast.If) and len(branch.branches) == 2
    assert isinstance(branch.branches[1][1], ast.Block) and branch.otherwise == I("x")
    loop = components[13].value
    assert loop.carries == (ast.Carry("sum", ast.RealLiteral(0.0), ast.TypeSpec("real", shape=ast.Shape(
        (ast.Extent(I("n")),)))),)  # fmt: skip
    assert loop.scans == (ast.Scan("x", I("xs")),)
    assert (components[15].value.index, components[15].value.count) == ("i", I("k"))
    assert components[17].value.pretest is False and components[18].value.pretest is True
    assert components[20].value.unroll is True
    assert (components[21].value.index, components[21].value.count) == ("i", None)
    assert components[22].value.label == "label" and len(components[22].value.yields) == 2
    typed, pair = components[23].results
    assert typed.type.name == "real" and pair.pack == ast.PackSpec(N(2))
    assert definition.quantizations[1].tensor == "op1.w"
    assert definition.quantizations[1].invocation.types == ("real",)


def test_attribute_assignments_accept_a_colon() -> None:
    colon = parse_module(op("@compose { y = op1: op{a: 42}(x); }"))
    equals = parse_module(op("@compose { y = op1: op{a = 42}(x); }"))
    assert colon == equals


def test_component_ending_in_a_brace_may_omit_the_semicolon() -> None:
    module = parse_module(op("@compose { z = if c then { r = a(x); yield r; } else { r = b(x); yield r; } }"))
    assert isinstance(module.definitions[0].components[0].value, ast.If)


def test_walk_visits_every_node() -> None:
    module = parse_module(op("@compose { y = f{a = 1 + b}(x[i] <- 2); }"))
    kinds = [type(node).__name__ for node in ast.walk(module)]
    assert kinds == [
        "Module", "Definition", "Component", "Result", "Invocation", "Substitute", "Identifier",
        "Identifier", "IntLiteral", "Binary", "IntLiteral", "Identifier",
    ]  # fmt: skip


# ------------------------------------------------------------------------------------------------
# The '...' policy


def test_triple_dots_for_expansion_are_an_error_by_default() -> None:
    with pytest.raises(NNEFError) as caught:
        parse_module(op("@input { x: real[s...]; }"), "d.sknd")
    assert (caught.value.line, caught.value.column) == (2, 19)
    assert "'...' is the cumulative-fold token" in caught.value.message
    assert "written '..'" in caught.value.message


@pytest.mark.parametrize(
    ("lenient_source", "strict_source"),
    [
        ("@input { x: real[s...(d), t...]; }", "@input { x: real[s..(d), t..]; }"),
        ("@attrib { a: int...(k); }", "@attrib { a: int..(k); }"),
        ("@input { xs: real[m, ...n]..(k); }", "@input { xs: real[m, ..n]..(k); }"),
        ("@lower { y[i...] = x[i...], i < s; }", "@lower { y[i..] = x[i..], i < s; }"),
        ("@assert { axes != ...: \"distinct\"; }", "@assert { axes != ..: \"distinct\"; }"),
        ("@using { u = z := ...; }", "@using { u = z := ..; }"),
        ("@using { v = [a, b...]; }", "@using { v = [a, b..]; }"),
    ],
)
def test_lenient_mode_reads_misplaced_triple_dots_as_two_with_a_warning(
    lenient_source: str, strict_source: str
) -> None:
    with pytest.raises(NNEFError):
        parse_module(op(lenient_source))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lenient = parse_module(op(lenient_source), "l.sknd", lenient=True)
    assert lenient == parse_module(op(strict_source))
    assert caught and all(issubclass(item.category, NNEFWarning) for item in caught)
    assert all(item.message.file == "l.sknd" and item.message.line == 2 for item in caught)


def test_cumulative_folds_keep_their_meaning_in_lenient_mode() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        module = parse_module(op("@using { p = [1, s..] * ...; }"), lenient=True)
    assert module.definitions[0].usings[0].value.cumulative is True


# ------------------------------------------------------------------------------------------------
# Spec examples (chapters 2 and 3), corrected


SPEC_EXAMPLES = {
    "alexnet": examples.text("alexnet"),  # as printed (§2.1), the example the package ships
    "matmul": """
operator matmul {
    @input {
        A: real[m,k];
        B: real[k,n];
        Z: optional real[m,n];
    }
    @output {
        C: real[m,n];
    }
    @lower {
        C[i,j] = Z[i,j] ?? 0.0,
            i < m, j < n;
        C[i,j] += A[i,l] * B[l,j],
            i < m, l < k, j < n;
    }
}
""",
    "conv": """
operator conv {
    @attrib {
        stride: int..(d) = 1;
        dilation: int..(d) = 1;
        padding: optional int..(d);
    }
    @input {
        input: real[b,c,is..(d)];
        filter: real[n,c,fs..(d)];
        bias: optional real[n];
    }
    @using {
        fd = (fs - 1) * dilation + 1;
        paddings = 2 * padding ?? (is \\ stride - 1) * stride + fd - is;
        os = (is + paddings - fd) / stride + 1;
    }
    @output {
        output: real[b,n,os..];
    }
    @assert {
        stride > 0: "'stride' must be positive; got {stride}";
        dilation > 0: "'dilation' must be positive; got {dilation}";
        is + paddings >= fd: "padded input-size must be greater than (dilated) filter-size; "
                             "got input-size={is}, filter-size={fs}, "
                             "dilation={dilation}, "
                             "total-padding={paddings}";
    }
    @lower {
        output[bi,ni,i..] = bias[ni,] ?? 0.0,
            bi < b, ni < n, i < os;
        output[bi,ni,i..] += input[bi,ci,|stride * i + dilation * j - paddings / 2|..]
                            * filter[ni,ci,j..],
            bi < b, ni < n, ci < c, i < os, j < fs;
    }
}
""",
    "block_overview": """
operator Op {
    @dtype {
        # generic data-types
    }
    @attrib {
        # compile-time (scalar) attributes
    }
    @input { }
    @using { }
    @constant { }
    @variable { }
    @output { }
    @assert { }
    @lower { }
    @compose { }
    @update { }
    @quantize { }
}
""",
    "graph_dynamic": """
graph G {
    @input {
        x: real[s|10];
        y: real[s];
        input: real[~|10, ~|20];
        other: real[s|10 ..(3)];
        third: real[~|10 ..(3)];
    }
    @output {
        z: real[s];
        output: real[~, ~, ~];
        any: real;
    }
}
""",
    "dynamic_output": """
operator Op {
    @attrib {
        k: int;
    }
    @input {
        x: real[n,m];
    }
    @output {
        y: real[~|k,m];    # at most k outputs (in first dimension)
        z: real[s|k,m];
    }
}
""",
    "binding_order": """
operator binding {
    @attrib {
        r: int;
        a: optional int;
        b: int..(d) = 0;
        c: int = 2 * d + r;
    }
    @input {
        x: real[s..(r),z..(d),t..];
        y: real[s..(r),z..(d)];
        w: real[m, k + 1, q..(2 * d), r / 2];
    }
}
""",
    "mul_add": """
operator mul_add {
    @input {
        x: real[n];
        a: real[n];
        b: real[n];
    }
    @output {
        y: real[n];
    }
    @compose {
        z = mul(x, a);
        y = add(z, b);
    }
}
""",
    "branches": """
public operator branching {
    @compose {
        z = if {
            c = cond(x,y);
            yield c;
        } then {
            r = op1(x,y);
            yield r;
        } else {
            r = op2(x,y);
            yield r;
        }
        c = cond(x,y);
        z = if c then op1(x,y) else op2(x,y);
    }
}
""",
    "loops": """
operator add_to_all {
  @input {
    xs: real[n]..(k);
    z: real[n];
  }
  @output {
    ys: real[n]..(k);
  }
  @compose {
    ys = for x : xs do add(x, z);
  }
}

operator add_all {
    @input {
        xs: real[n]..(k);
    }
    @output {
        y: real[n];
    }
    @compose {
        y = with sum: real[n] = 0.0 for x : xs unroll add(sum, x);
    }
}

operator matpow {
    @input {
        A: real[n,n];
        p: int[];
    }
    @output {
        B: real[n,n];
    }
    @constant {
        I: real[n,n] = i == j ? 1 : 0, i < n, j < n;
    }
    @compose {
        B = with X = I do..(p) matmul(X, A);
    }
}
""",
    "lowering_examples": """
operator add_to_all {
    @input {
        xs: real[n,m]..(k);
        z: real[n,m];
    }
    @output {
        ys: real[n,m]..(k);
    }
    @lower {
        unroll..(ki -> k)
        ys[ki][ni,mi] = xs[ki][ni,mi] + z[ni,mi],
        ni < n, mi < m;
    }
}

operator add_to_all_tensor {
    @input {
        xs: real[n,m,k];
        z: real[n,m];
    }
    @output {
        ys: real[n,m,k];
    }
    @using {
        ki = [0:k];
    }
    @lower {
        ys[ni,mi,ki] = xs[ni,mi,ki] + z[ni,mi],
        ni < n, mi < m;
        ys[ni,mi,:] = xs[ni,mi,:] + z[ni,mi],
        ni < n, mi < m;
    }
}

operator max_idx {
    @input {
        x: real[n];
    }
    @output {
        idx: int[];
    }
    @lower {
        idx[] = 0;
        idx[] := i,
            i < n | x[i,] > x[idx[],];
    }
}

operator max_idx_2d {
    @input {
        x: real[m,n];
    }
    @output {
        idx: int[2];
    }
    @lower {
        idx[:,] = 0;
        idx[:,] := [i,j],
            i < m, j < n | x[i,j] > x[idx[:,]..];
    }
}

operator square_sin {
    @input {
        x: real[s..];
    }
    @output {
        y: real[s..];
    }
    @lower {
        with
            z = x[i..] ** 2:
            y[i..] = z * sin(z),
            i < s;
    }
}

operator smooth {
    @attrib {
        w: int;
    }
    @input {
        x: real[s];
    }
    @output {
        y: real[s];
    }
    @lower {
        y[i,] += x[|i + j - w/2|] / real(w),
            i < s, j < w;
    }
}

operator replicate_border {
    @attrib {
        n: int;
    }
    @input {
        x: real[s];
    }
    @output {
        y: real[s + 2 * n];
    }
    @lower {
        y[i,] = x[|i - n <> 0 : s - 1|],
            i < s + 2 * n;
    }
}

operator where_true {
    @input {
        cond: bool[s..(d)];
    }
    @output {
        idx: int[d,k|(s * ..)];
    }
    @lower {
        idx[:,k] = i,
        i < s | cond[i..];
    }
}
""",
    "generics_and_quantize": """
operator generic {
    @dtype {
        T: num;
        S: type = real;
    }
    @attrib {
        a: T = T(1);
        update_rate: real;
    }
    @variable {
        w: real[s..];
    }
    @compose {
        a = op1(x, y);
        b = op2(a, z);
        x = op<real>(y);
    }
    @update {
        w = mul_add(dw, update_rate, w);
    }
    @quantize {
        a: quant_op1{attr1=true};
        b: quant_op2{attr2=42};
    }
}
""",
    "tensor_generator": """
operator tensor {
    @dtype {
        T: type;
    }
    @attrib {
        shape: int..(d) = [];
        value: T..(shape * ..);
    }
    @output {
        output: T[shape..];
    }
    @using {
        u = value := ..;
        prods = [1, shape[::-1]..] * ...;
        strides = prods[::-1][1:];
    }
    @lower {
        output[i..] = u ?? value[(i * strides) + ..],
            i < shape;
    }
}
""",
    "squeeze": """
operator squeeze {
    @dtype {
        T: type;
    }
    @attrib {
        axes: int..(k);
    }
    @input {
        input: T[s..(d)];
    }
    @output {
        output: T[s[kept_axes]..];
    }
    @using {
        dims = [0:d];
        axes_mask = dims in (axes < 0 ? axes + d : axes);
        kept_axes = dims[!axes_mask];
        zeros = [0 ..(d)];
    }
    @assert {
        axes >= -d && axes < d:
            "axes must be between -input.rank (inclusive) and input.rank (exclusive)",
            input.rank, axes;
        axes != ..:
            "axes must be distinct", axes;
        s[axes] == 1:
            "input.shape at 'axes' must be 1", input.shape, axes;
    }
    @lower {
        output[si..] = input[zeros[kept_axes] <- si..],
            si < s[kept_axes];
    }
}
""",
}


@pytest.mark.parametrize("name", sorted(SPEC_EXAMPLES))
def test_spec_examples_roundtrip(name: str) -> None:
    module = roundtrip(SPEC_EXAMPLES[name])
    assert module.definitions


def test_alexnet_structure() -> None:
    graph = parse_module(SPEC_EXAMPLES["alexnet"]).definition("AlexNet")
    assert graph.is_graph
    assert [param.name for param in graph.attribs] == ["batch", "classes"]
    assert graph.components[0].value == ast.Invocation(
        "nn.conv", (I("input"), I("kernel1"), I("bias1")), (("padding", N(0)), ("stride", N(4)))
    )


@pytest.mark.parametrize("path", sorted(STDLIB.glob("*.sknd")), ids=lambda path: path.stem)
def test_stdlib_roundtrips(path: Path) -> None:
    roundtrip(path.read_text(encoding="utf-8"))


def test_stdlib_is_present() -> None:
    assert len(list(STDLIB.glob("*.sknd"))) >= 7


# ------------------------------------------------------------------------------------------------
# Syntax errors: file, line, column and a message naming the problem


@pytest.mark.parametrize(
    ("source", "line", "column", "fragment"),
    [
        ('operator f {\n    @input {\n        x: real[n;\n    }\n}',
         3, 18, "expected ']' to close '[' opened at 3:16, found ';'"),
        ('operator f {\n    @inptu {\n        x: real[n];\n    }\n}',
         2, 5, "unknown block '@inptu'; did you mean '@input'?"),
        ('operator f {\n    @compose {\n        y = nn.conv(input;\n    }\n}',
         3, 26, "expected ')' to close '(' opened at 3:20, found ';'"),
        ('operator f {\n    @input {\n        x: real[n]\n    }\n}',
         3, 19, "expected ';' after the declaration of 'x', found '}'"),
        ('operator f {\n    @input { x: real[n]; }\n    @input { y: real[n]; }\n}',
         3, 5, "duplicate block '@input' (first defined at 2:5)"),
        ('operator f {\n    @input { x real[n]; }\n}',
         2, 16, "expected ':' after 'x' (declarations are written 'name:"),
        ('operator f {\n    @input { x: rael[n]; }\n}',
         2, 17, "unknown type 'rael'; did you mean 'real'?"),
        ('operator f {\n    @attrib { a: int = ; }\n}',
         2, 24, "expected an expression, found ';'"),
        ('operator f {\n    @using { a = (b + c; }\n}',
         2, 24, "expected ')' to close '(' opened at 2:18, found ';'"),
        ('operator f {\n    @using { a = [1, 2; }\n}',
         2, 23, "expected ']' to close '[' opened at 2:18, found ';'"),
        ('operator f {\n    @using { a = b + * c; }\n}',
         2, 22, "expected an expression, found '*'"),
        ('operator f {\n    @using { a = b ? c : ; }\n}',
         2, 26, "expected an expression, found ';'"),
        ('operator f {\n    @using { a = foo(b); }\n}',
         2, 18, "unknown function 'foo'; did you mean 'floor'? (operator"),
        ('operator f {\n    @using { a = sqrt(b, c); }\n}',
         2, 24, "built-in function 'sqrt' takes one argument"),
        ('operator f {\n    @using { a = x.shpe; }\n}',
         2, 20, "expected 'shape', 'rank' or 'size' after 'x.', found 'shpe'"),
        ('operator f {\n    @using { a = b - ..; }\n}',
         2, 20, "'-' has no fold; folds exist for != && * + := < <= <? == >"),
        ('operator f {\n    @using { a = b != ...; }\n}',
         2, 23, "'!=' has no cumulative fold ('x != ...'); its reduction is"),
        ('operator f {\n    @using { a = b := c; }\n}',
         2, 20, "':=' is only a fold ('x := ..') or a lowering assignment"),
        ('operator f {\n    @using { a = b <-1; }\n}',
         2, 20, "substitution '<-' needs an indexed pack on its left ('a[i]"),
        ('operator f {\n    @using { a = int; }\n}',
         2, 18, "type 'int' used as a value; a cast is written 'int(x)'"),
        ('operator f {\n    @using { a = ~; }\n}',
         2, 18, "'~' (omitted value) is only allowed as an argument, result"),
        ('operator f {\n    @using { a = [b...]; }\n}',
         2, 20, "'...' is the cumulative-fold token; pack expansion is"),
        ('operator f {\n    @using { 1 = b; }\n}',
         2, 14, 'expected a name or a list of names to define in @using,'),
        ('operator f {\n    @using { [a + 1] = b; }\n}',
         2, 15, "only names, 'name..' and '(a, b)..' may appear on the"),
        ('operator f {\n    @assert { a > 0: 42; }\n}',
         2, 22, "expected a message string after ':' in the assertion, found"),
        ('operator f {\n    @assert { a > 0 "msg"; }\n}',
         2, 20, "expected ';' after the assertion, found a string"),
        ('operator f {\n    @lower { y[i] = x[i], i > n; }\n}',
         2, 29, "expected '<' after index 'i' (loop bounds are written 'i <"),
        ('operator f {\n    @lower { y[i] == x[i], i < n; }\n}',
         2, 19, "expected a lowering assignment ('=', '+=', '*=', '&=',"),
        ('operator f {\n    @lower { y = x[i], i < n; }\n}',
         2, 16, "expected '[' after 'y' (the left-hand side of a lowering is"),
        ('operator f {\n    @lower { with z = x[i]; y[i] = z, i < n; }\n}',
         2, 27, "expected ':' after the 'with' values of the lowering, found"),
        ('operator f {\n    @lower { y[i] = x[|i < 0 : 1|], i < n; }\n}',
         2, 30, "expected '|' to close the bounded index; a remapped index"),
        ('operator f {\n    @compose { y = if c then a(x); }\n}',
         2, 34, "expected 'elif' or 'else' (a branch must end with an"),
        ('operator f {\n    @compose { y = if c a(x) else b(x); }\n}',
         2, 25, "expected 'then' after the condition, found 'a'"),
        ('operator f {\n    @compose { y = with s = 0 for x : xs add(s, x); }\n}',
         2, 42, "expected 'do' or 'unroll' to start the loop body, found"),
        ('operator f {\n    @compose { y = { z = a(x); }; }\n}',
         2, 32, "a block must end with 'yield values;' before its '}'"),
        ('operator f {\n    @compose { y = { yield z; w = a(x); }; }\n}',
         2, 31, "'yield' must be the last statement of a block; expected '}'"),
        ('operator f {\n    @compose { y = op{a = 1, a = 2}(x); }\n}',
         2, 30, "attribute 'a' is assigned twice"),
        ('operator f {\n    @compose { y = op{a 1}(x); }\n}',
         2, 25, "expected '=' after attribute 'a', found '1'"),
        ('operator f {\n    @compose { y = op(x) }\n}',
         2, 25, "expected ';' after the component, found '}'"),
        ('operator f {\n    @compose { y = op(x);\n}',
         3, 2, "expected '}' to close '{' opened at 1:12, found end of"),
        ('operator f {\n    @compose { 1 = op(x); }\n}',
         2, 16, "expected a result name or '~', found '1'"),
        ('operator f {\n    @compose { y = op{a = 1}; }\n}',
         2, 29, "expected '(' with the arguments of 'op', found ';'"),
        ('operator f {\n    @quantize { a quant{bits = 8}; }\n}',
         2, 19, "expected ':' after 'a' (quantization is written 'tensor:"),
        ('operator f {\n    @dtype { T: float; }\n}',
         2, 17, 'expected a base type (type, arith, num, int, real, bool,'),
        ('operator f {\n    @dtype { T: num; T: type; }\n}',
         2, 22, "generic type 'T' is declared twice"),
        ('operator f { }\noperator f { }',
         2, 1, "'f' is already defined at 1:1"),
        ('operator { }',
         1, 10, "expected the name of the operator, found '{'"),
        ('operator f @input { }',
         1, 12, "expected '{' to open the body of operator 'f', found"),
        ('operator f {\n    @input { x: real[n]; }\n',
         3, 1, "expected '}' to close '{' opened at 1:12, found end of"),
        ('import nn\noperator f { }\nimport layout;',
         3, 1, 'imports must come before all operator and graph definitions'),
        ('import nn layout;',
         1, 10, "expected ';' or ',' after the imported module name, found"),
        ('import;',
         1, 7, "expected a module name after 'import', found ';'"),
        ('version 2;\n',
         1, 9, "expected a version number such as '2.0', found '2'"),
        ('foo f { }',
         1, 1, "expected 'operator', 'public operator' or 'graph', found"),
        ('public graph_ f { }',
         1, 8, "expected 'operator' or 'graph', found 'graph_'"),
        ('@input { x: real; }',
         1, 1, "block '@input' outside of an operator or graph definition"),
        ('operator f {\n    x: real;\n}',
         2, 5, "expected a block such as '@input' or '}', found 'x'"),
        ('operator f {\n    @input { x: real^r[n]; }\n}',
         2, 22, "expected '(' after '^' (rank capture is written '^(r)'),"),
        ('operator f {\n    @input { operator: real[n]; }\n}',
         2, 14, 'expected a name to declare in @input, found keyword'),
        ('operator f {\n    @using { a = b[1:2] <- c; }\n}',
         2, 25, "substitution '<-' needs an indexed pack on its left ('a[i]"),
        ('operator f {\n    @using { a = "x {b +} y"; }\n}',
         2, 25, "expected an expression, found the end of the '{}'"),
        ('operator f {\n    @using { a = real; }\n}',
         2, 18, "type 'real' used as a value; a cast is written 'real(x)'"),
        ('operator f {\n    @attrib { a: num(3); }\n}',
         2, 21, "expected ';' after the declaration of 'a', found '('"),
        ('operator f {\n    @using { a = num(3); }\n}',
         2, 18, "cannot cast to the abstract type 'num'"),
        ('operator f {\n    @using { a = b ** ..; }\n}',
         2, 20, "'**' has no fold"),
        ('operator f {\n    @using { a = ?? b; }\n}',
         2, 18, "'??' needs a value on its left; a null test is written '?x'"),
        ('operator f {\n    @using { a = b.c.d; }\n}',
         2, 20, "expected 'shape', 'rank' or 'size' after 'b.', found 'c'"),
        ('operator f {\n    @compose { y = for x xs do a(x); }\n}',
         2, 26, "expected ':' after loop item 'x' (scans are written 'x :"),
        ('operator f {\n    @lower { unroll..(i ->) y[i] = x[i], i < n; }\n}',
         2, 27, "expected the iteration count after '->'"),
        ('graph G {\n    @attrib { n: int = 99999999999999999999999; }\n}',
         2, 24, "literal 99999999999999999999999 is out of the int64 range (at most 9223372036854775807)"),
        ('operator f {\n    @output { y: real[2, 9223372036854775808]; }\n}',
         2, 26, "integer literal 9223372036854775808 is out of the int64 range"),
    ],
)
def test_syntax_errors(source: str, line: int, column: int, fragment: str) -> None:
    with pytest.raises(NNEFError) as caught:
        parse_module(source, "e.sknd")
    error = caught.value
    assert (error.file, error.line, error.column) == ("e.sknd", line, column), error.message
    assert fragment in error.message
    text = str(error)
    assert text.startswith(f"e.sknd:{line}:{column}: {error.message}")
    lines = source.split("\n")
    if line <= len(lines) and lines[line - 1]:
        assert text.split("\n")[1:] == ["    " + lines[line - 1], "    " + " " * (column - 1) + "^"]


def test_the_largest_int64_literal_is_accepted() -> None:
    value = parse_expression("9223372036854775807 + 1")
    assert value == ast.Binary("+", ast.IntLiteral(2**63 - 1), ast.IntLiteral(1))


def test_error_excerpt_and_caret() -> None:
    with pytest.raises(NNEFError) as caught:
        parse_module("operator f {\n    @compose {\n        y = nn.conv(input;\n    }\n}", "m.sknd")
    assert str(caught.value) == (
        "m.sknd:3:26: expected ')' to close '(' opened at 3:20, found ';'\n"
        "            y = nn.conv(input;\n"
        "                             ^"
    )


def test_errors_survive_pickling() -> None:
    with pytest.raises(NNEFError) as caught:
        parse_module("operator f { @inptu { } }", "p.sknd")
    again = pickle.loads(pickle.dumps(caught.value))
    assert (again.file, again.line, again.column, again.message) == ("p.sknd", 1, 14, caught.value.message)
    assert str(again) == str(caught.value)


# ------------------------------------------------------------------------------------------------
# Every code example of chapters 2 to 4 of the spec, with its extraction defects corrected

SPEC = Path("/work/shared/spec/nnef-2.0-skriptnd.md")

# Local symbol losses of the PDF extraction (README of the spec folder), as (found, meant).
SPEC_CORRECTIONS = [
    ("x[idx[:,..]]", "x[idx[:,]..]"),
    ("[:;-1]", "[::-1]"),
    ("input=zeros[kept_axes]", "input[zeros[kept_axes]"),
    ("output=zeros[comp_axes]", "output[zeros[comp_axes]"),
    ("[0, z...] + ....", "[0, z..] + ..."),
    ("axis >= -rank && axis <= rank;\n", "axis >= -rank && axis <= rank:\n"),
    ("method == methods || ...\n", "method == methods || ..:\n"),
    ("perm != . . .:", "perm != ..:"),
    ("(block_size * ..\n        ..)", "(block_size * ..)"),
    ("[s...](n)", "[s..]..(n)"),
    ("[s..](n)", "[s..]..(n)"),
    ("real[s[axes]] <- (factor * s[axes])..]", "real[s[axes] <- (factor * s[axes])..]"),
    ("output[i[axes]] <- |factor * i[axes] + j - padding|..\n",
     "output[i[axes] <- |factor * i[axes] + j - padding|..]\n"),
    ("ceil(x - 0.5) : floor(x + 0.5);", "ceil(x - 0.5) : floor(x + 0.5):"),
    ("r = real(i[axes]) * scale + offset;", "r = real(i[axes]) * scale + offset:"),
    ("[ci,j...,gi * m + mi];", "[ci,j...,gi * m + mi]:"),
    ("w = 1.0 - abs(real(i) - x);", "w = 1.0 - abs(real(i) - x):"),
    (":...]...", ":].."),
    ("si...(u * ni ?? offs[ni]) + zi", "si..,(u * ni ?? offs[ni]) + zi"),
    ("|i < -i : 2 * (s - 1)\n- i|", "|i <> -i : 2 * (s - 1) - i|"),
    ("paddings \\\n2;", "paddings \\ 2;"),
    ("/ real(factor)) *\n...\n", "/ real(factor)) * ..,\n"),
]
# Examples that are illustrations on purpose ('...' placeholders, bare statements).
SPEC_ILLUSTRATIONS = ["c..(n) = ...;", "yield x;", "# x can be used as non-optional", "dw = ...;",
                      "x = op<real>(y);", "x = A.op1(...);"]  # fmt: skip
_TOP_LEVEL = ("operator", "public", "graph", "import")


def _corrected_spec_text() -> str:
    """Chapters 2 to 4 with the known defects corrected."""
    text = SPEC.read_text(encoding="utf-8")
    text = text[text.index("# Chapter 2.") :]
    for found, meant in SPEC_CORRECTIONS:
        assert found in text, f"correction no longer applies: {found!r}"
        text = text.replace(found, meant)
    # Figure captions the extraction moved from the end of a comment to the next line.
    text = re.sub(r"(#[^\n]*)\n(\[0,1\]|space|integer|pixel|weights)\n", r"\1 \2\n", text)
    # '|i <> a : b|' rendered as '|i < a : b|'.
    return re.sub(r"\|([\w +\-*/]*?) < ([^|:\n]*?) :", r"|\1 <> \2 :", text)


def _fenced_blocks(text: str) -> list[str]:
    """The fenced code blocks, without the grammar of §2.16."""
    grammar = (text.index("## 2.16."), text.index("# Chapter 3."))
    blocks = []
    for match in re.finditer(r"```[^\n]*\n(.*?)```", text, re.DOTALL):
        if not grammar[0] <= match.start() <= grammar[1]:
            blocks.append(_join_broken_strings(match.group(1).strip("\n")))
    return blocks


def _open_quote(line: str) -> str | None:
    """The quote left open at the end of ``line`` (comments ignored)."""
    quote, index = None, 0
    while index < len(line):
        char = line[index]
        if quote is None and char == "#":
            return None
        if quote is None and char in "\"'":
            quote = char
        elif quote is not None and char == "\\":
            index += 1
        elif char == quote:
            quote = None
        index += 1
    return quote


def _join_broken_strings(block: str) -> str:
    """Join the lines that the extraction broke inside string literals."""
    lines: list[str] = []
    for line in block.split("\n"):
        if lines and _open_quote(lines[-1]) is not None:
            lines[-1] = lines[-1].rstrip() + " " + line.strip()
        else:
            lines.append(line)
    return "\n".join(lines)


def _parse_example(text: str) -> ast.Module:
    """Parse an example; fragments of blocks are wrapped into an operator."""
    if not text.lstrip().startswith(_TOP_LEVEL):
        text = f"operator example {{\n{text}\n}}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NNEFWarning)  # the PDF's '...' for '..' (lenient mode)
        return parse_module(text, "spec-example.sknd", lenient=True)


def _parses(text: str) -> bool:
    try:
        _parse_example(text)
    except NNEFError:
        return False
    return True


def _reassemble(blocks: list[str]) -> list[str]:
    """Join definitions that page breaks split into several blocks with extra '}' lines."""
    chains: list[list[str]] = []
    for block in blocks:
        continues = not block.lstrip().startswith(_TOP_LEVEL + ("#",))
        if chains and continues and not _parses(block):
            chains[-1].append(block)
        else:
            chains.append([block])
    return [_join_chain(chain) for chain in chains]


def _trailing_closers(part: str) -> int:
    """How many lines holding only '}' end ``part``."""
    lines = part.rstrip().split("\n")
    return sum(1 for _ in itertools.takewhile(lambda line: line.strip() == "}", reversed(lines)))


def _join_chain(chain: list[str]) -> str:
    """The first way of dropping stray closing braces between the parts that parses."""
    closers = [_trailing_closers(part) for part in chain[:-1]]
    first = None
    for drops in itertools.product(*(range(min(count, 3) + 1) for count in closers)):
        lines: list[str] = []
        for part, drop in zip(chain, drops + (0,)):
            part_lines = part.rstrip().split("\n")
            lines.extend(part_lines[: len(part_lines) - drop])
        text = "\n".join(lines)
        first = first or text
        if _parses(text):
            return text
    return first or chain[0]


@functools.cache
def spec_examples() -> list[str]:
    """The corrected and reassembled examples of chapters 2 to 4."""
    return _reassemble(_fenced_blocks(_corrected_spec_text()))


@pytest.mark.skipif(not SPEC.exists(), reason="the NNEF 2.0 draft is not in /work/shared/spec here")
def test_every_spec_example_parses_and_roundtrips() -> None:
    examples = spec_examples()
    assert len(examples) > 200
    failures = []
    parsed = 0
    for example in examples:
        try:
            module = _parse_example(example)
        except NNEFError as error:
            if not any(marker in example for marker in SPEC_ILLUSTRATIONS):
                failures.append(str(error))
            continue
        parsed += 1
        assert parse_module(print_module(module)) == module
    assert failures == []
    assert parsed >= len(examples) - len(SPEC_ILLUSTRATIONS)


# ------------------------------------------------------------------------------------------------
# Properties: printing any expression tree re-parses to the same tree; no input crashes the parser

_NAMES = st.sampled_from(["a", "b", "x", "is", "in", "shape", "_", "k2"])
_LEAVES = st.one_of(
    _NAMES.map(ast.Identifier),
    st.integers(0, 10**6).map(ast.IntLiteral),
    st.floats(0, 1e6, allow_nan=False).map(ast.RealLiteral),
    st.booleans().map(ast.BoolLiteral),
    st.sampled_from(["inf", "pi"]).map(ast.KeywordConstant),
    st.builds(ast.Member, st.sampled_from(["x", "y"]), st.sampled_from(["shape", "rank", "size"])),
    st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=6).map(ast.StringLiteral),
)
_BINARY_OPERATORS = sorted(op for op in BINARY_PRECEDENCE if op != ":=")


def _compound(children: st.SearchStrategy) -> st.SearchStrategy:
    """Every expression form built from ``children``."""
    optional = st.none() | children
    items = st.one_of(
        children,
        st.builds(ast.Expand, children, optional),
        st.builds(ast.Range, children, children, optional),
        st.builds(ast.Expand, st.lists(children, min_size=2, max_size=3).map(lambda xs: ast.Zip(tuple(xs)))),
    )
    index_items = items | st.builds(ast.Range, optional, optional, optional) | st.builds(
        ast.Bounded, children
    ) | st.builds(ast.Bounded, children, children, children)
    plain_index = children.filter(lambda node: not isinstance(node, (ast.Expand, ast.Bounded)))
    format_text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=4)
    expression_in_format = children.filter(
        lambda node: not any(isinstance(part, (ast.StringLiteral, ast.Format)) for part in ast.walk(node))
    )
    return st.one_of(
        st.builds(ast.Unary, st.sampled_from(["+", "-", "!", "?"]), children),
        st.builds(ast.Binary, st.sampled_from(_BINARY_OPERATORS), children, children),
        st.builds(ast.Select, children, children, optional),
        st.builds(ast.Coalesce, children, children),
        st.builds(ast.Fold, st.sampled_from(sorted(FOLD_OPERATORS)), children, st.just(False)),
        st.builds(ast.Fold, st.sampled_from(sorted(CUMULATIVE_FOLD_OPERATORS)), children, st.just(True)),
        st.builds(ast.Index, children, plain_index | st.builds(ast.Range, optional, optional, optional)),
        st.builds(ast.TensorAccess, children, st.lists(index_items, max_size=3).map(tuple)),
        st.builds(ast.Substitute, children, plain_index, children),
        st.lists(items, max_size=4).map(lambda xs: ast.List(tuple(xs))),
        st.lists(children, min_size=2, max_size=3).map(lambda xs: ast.Zip(tuple(xs))),
        st.builds(ast.Cast, st.sampled_from(["int", "real", "bool", "str", "T"]), optional),
        st.builds(ast.Builtin, st.sampled_from(sorted(BUILTIN_FUNCTIONS)), children),
        st.tuples(format_text, expression_in_format, st.none() | format_text).map(
            lambda parts: ast.Format(tuple(part for part in parts if part is not None))
        ),
    )


def _operators(children: st.SearchStrategy) -> st.SearchStrategy:
    """Only the operator forms, so that precedence and associativity get exercised densely."""
    optional = st.none() | children
    return st.one_of(
        st.builds(ast.Unary, st.sampled_from(["-", "!", "?"]), children),
        st.builds(ast.Binary, st.sampled_from(_BINARY_OPERATORS), children, children),
        st.builds(ast.Binary, st.sampled_from(_BINARY_OPERATORS), children, children),
        st.builds(ast.Select, children, children, optional),
        st.builds(ast.Coalesce, children, children),
        st.builds(ast.Fold, st.sampled_from(sorted(FOLD_OPERATORS)), children, st.just(False)),
        st.builds(ast.Fold, st.sampled_from(sorted(CUMULATIVE_FOLD_OPERATORS)), children, st.just(True)),
        st.builds(ast.Substitute, children, children.filter(lambda node: not isinstance(node, ast.Bounded)),
                  children),  # fmt: skip
    )


EXPRESSIONS = st.recursive(_LEAVES, _compound, max_leaves=12)
_SYMBOLS = "abxy01_.,:;()[]{}<>=!?|&^~+-*/\\%@#\"' \n"
OPERATOR_EXPRESSIONS = st.recursive(_NAMES.map(ast.Identifier), _operators, max_leaves=8)


@settings(max_examples=400)
@given(EXPRESSIONS)
def test_printed_expressions_reparse_to_the_same_tree(tree: ast.Expr) -> None:
    text = print_expression(tree)
    assert parse_expression(text, type_names=frozenset({"T"})) == tree, text


@settings(max_examples=400)
@given(OPERATOR_EXPRESSIONS)
def test_printed_operator_expressions_reparse_to_the_same_tree(tree: ast.Expr) -> None:
    text = print_expression(tree)
    assert parse_expression(text) == tree, text


@settings(max_examples=200)
@given(EXPRESSIONS | OPERATOR_EXPRESSIONS)
def test_printed_compose_values_reparse_to_the_same_tree(tree: ast.Expr) -> None:
    component = ast.Component((ast.Result("y"),), tree)
    definition = ast.Definition("f", dtypes=(ast.TypeParam("T", "type"),), components=(component,))
    module = ast.Module("m", definitions=(definition,))
    assert parse_module(print_module(module)) == module


@settings(max_examples=200)
@given(EXPRESSIONS | OPERATOR_EXPRESSIONS, EXPRESSIONS | OPERATOR_EXPRESSIONS)
def test_printed_declarations_and_lowerings_reparse_to_the_same_tree(
    first: ast.Expr, second: ast.Expr
) -> None:
    extent = ast.Extent(first, bound=second, pack=ast.PackSpec(second))
    spec = ast.TypeSpec("real", shape=ast.Shape((extent, ast.Extent(second))), pack=ast.PackSpec(first))
    target = ast.TensorAccess(ast.Identifier("y"), (first,))
    definition = ast.Definition(
        "f",
        dtypes=(ast.TypeParam("T", "type"),),
        inputs=(ast.Param("x", spec, first, (ast.LoopBound("i", second),)),),
        usings=(ast.Using(ast.Identifier("u"), first, second),),
        asserts=(ast.Assert(first, ast.StringLiteral("m"), (ast.AssertPrint(second, "label"),)),
                 ast.Assert(second)),
        lowerings=(ast.Lowering(target, "+=", second, (ast.LoopBound("i", first),), second,
                                (ast.LocalDef("z", first),), "k", second),),
    )  # fmt: skip
    module = ast.Module("m", definitions=(definition,))
    text = print_module(module)
    assert parse_module(text) == module, text


@settings(max_examples=300)
@given(st.text(st.sampled_from(list(_SYMBOLS)) | st.characters(), max_size=60))
def test_arbitrary_text_fails_only_with_nnef_errors(text: str) -> None:
    for source in (text, f"operator f {{ @lower {{ {text} }} }}", f"operator f {{ @compose {{ {text} }} }}"):
        try:
            parse_module(source)
        except NNEFError as error:
            assert error.line is not None and error.line >= 1 and error.column >= 1


def test_deep_nesting_is_an_error_not_a_crash() -> None:
    with pytest.raises(NNEFError) as caught:
        parse_expression("(" * 5000 + "x" + ")" * 5000, "deep.sknd")
    assert "nested too deeply" in caught.value.message and caught.value.line == 1


def test_generic_casts_work_whatever_the_block_order() -> None:
    late = parse_module("operator f {\n @attrib { a: T = T(1); }\n @dtype { T: num; }\n}\noperator g { }")
    assert late.definitions[0].attribs[0].default == ast.Cast("T", N(1))
    with pytest.raises(NNEFError, match="unknown function 'T'"):
        parse_module("operator f { @dtype { T: num; } }\noperator g { @using { a = T(1); } }")


def test_large_graph_parses() -> None:
    layers = 2000
    variables = "".join(f"        k{i}: real[64, 64, 3, 3];\n" for i in range(layers))
    components = "".join(f"        c{i} = nn.conv{{padding = 1}}(c{i - 1}, k{i});\n"
                         for i in range(1, layers))  # fmt: skip
    source = (f"import nn;\ngraph G {{\n    @variable {{\n{variables}    }}\n"
              f"    @compose {{\n{components}    }}\n}}\n")  # fmt: skip
    graph = parse_module(source, "big.sknd").definitions[0]
    assert len(graph.variables) == layers and len(graph.components) == layers - 1
    assert graph.components[-1].pos == ast.Position("big.sknd", 2 * layers + 4, 9)


def test_forms_used_by_real_files() -> None:
    """Forms the reference tools and real models use beyond the text of the draft."""
    module = roundtrip(
        """
import layer, image, layout, quant, math, algo, rand, nn, linalg, misc;

graph sqrt {
    @input {
        inputs: real[4, c|2, 8]..(5);
        items: real[2]..(s|5);
        dynamic_input: real[h|100, w|100];
    }
    @output {
        output: real[4, 5 * c, 8];
        parts: real[1]..(s);
        indices: int[1, ~|10];
    }
    @compose {
        output = layout.concat{axis=1}(inputs);
        parts..(s) = layout.split{axis=0, count=s}(items);
        [first, second] = layout.split{axis=0, sizes=[s \\ 2, s / 2]}(items);
        conv = nn.conv{}(output, filter);
        indices = layout.nonzero(dynamic_input);
        constant = layout.constant{shape=[10,20], value=42.0}();
        y = layout.cast<int>(output);
    }
}
"""
    )
    graph = module.definitions[0]
    assert graph.name == "sqrt" and len(module.imports) == 10
    assert graph.inputs[0].type.shape.extents[1] == ast.Extent(I("c"), bound=N(2))
    assert graph.inputs[1].type.pack == ast.PackSpec(I("s"), bound=N(5))
    components = graph.components
    assert components[1].results == (ast.Result("parts", pack=ast.PackSpec(I("s"))),)
    assert components[3].value.attribs == () and components[5].value.args == ()
    assert components[6].value.types == ("int",)


def test_byte_order_mark_is_ignored() -> None:
    with_mark = parse_module("\ufeffoperator f { @input { x: real; } }", "bom.sknd")
    assert with_mark == parse_module("operator f { @input { x: real; } }")
    assert with_mark.definitions[0].pos == ast.Position("bom.sknd", 1, 1)
    with pytest.raises(NNEFError) as caught:
        parse_module("\ufeffoperator $", "bom2.sknd")
    assert (caught.value.column, caught.value.source_line) == (10, "operator $")
