"""Graph composition (NNEF 2.0 chapter 3): expression evaluation, attributes and defaults, the
binding order of inputs, affine extents, @using/@assert interleaving, generics, null propagation,
static branches and loops, labels, dynamic shapes, and the AlexNet of §2.1.

Expected values come from plain Python evaluations written here (hypothesis builds expression
trees together with their Python value) and from shapes computed by hand.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uopviz.nnef.composition.composer import compose
from uopviz.nnef.errors import NNEFError
from uopviz.nnef.evaluation.expressions import Evaluator
from uopviz.nnef.evaluation.values import DynamicExtent
from uopviz.nnef.syntax.parser import parse_expression

# ------------------------------------------------------------------------------------------------
# expressions: hypothesis builds (text, python value) pairs


def _floor_div(a: int, b: int) -> int:
    return a // b


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


_INT_OPS = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "<?": min, ">?": max,
}  # fmt: skip
_DIV_OPS = {"/": _floor_div, "\\": _ceil_div, "%": lambda a, b: a % b}
_COMPARE = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}
_LOGIC = {
    "&&": lambda a, b: a and b,
    "||": lambda a, b: a or b,
    "^": lambda a, b: a != b,
    "=>": lambda a, b: (not a) or b,
}

ints = st.integers(-20, 20).map(lambda v: (str(v) if v >= 0 else f"({v})", v))


def _int_expr(children):
    def binary(pair):
        (op, (a, va), (b, vb)) = pair
        return f"({a} {op} {b})", _INT_OPS[op](va, vb)

    def division(pair):
        (op, (a, va), (b, vb)) = pair
        return f"({a} {op} {b})", _DIV_OPS[op](va, vb)

    def select(triple):
        (c, vc), (a, va), (b, vb) = triple
        return f"({c} ? {a} : {b})", va if vc else vb

    def fold(pair):
        op, items = pair
        text = "[" + ", ".join(t for t, _ in items) + "]"
        values = [v for _, v in items]
        if op == "+":
            return f"({text} + ..)", sum(values)
        if op == "*":
            return f"({text} * ..)", math.prod(values)
        return f"({text} {op} ..)", (min if op == "<?" else max)(values)

    def index(pair):
        items, position = pair
        text = "[" + ", ".join(t for t, _ in items) + "]"
        return f"{text}[{position % len(items)}]", items[position % len(items)][1]

    def coalesce(triple):
        (c, vc), (a, va), (b, vb) = triple
        return f"(({c} ? {a}) ?? {b})", va if vc else vb

    return st.one_of(
        st.tuples(st.sampled_from(sorted(_INT_OPS)), children, children).map(binary),
        st.tuples(
            st.sampled_from(sorted(_DIV_OPS)), children, children.filter(lambda pair: pair[1] != 0)
        ).map(division),
        st.tuples(bools_from(children), children, children).map(select),
        st.tuples(st.sampled_from(["+", "*", "<?", ">?"]), st.lists(children, min_size=1, max_size=4)).map(
            fold
        ),
        st.tuples(st.lists(children, min_size=1, max_size=4), st.integers(0, 10)).map(index),
        st.tuples(bools_from(children), children, children).map(coalesce),
    )


def bools_from(int_exprs):
    def compare(triple):
        op, (a, va), (b, vb) = triple
        return f"({a} {op} {b})", _COMPARE[op](va, vb)

    base = st.tuples(st.sampled_from(sorted(_COMPARE)), int_exprs, int_exprs).map(compare)

    def logic(triple):
        op, (a, va), (b, vb) = triple
        return f"({a} {op} {b})", _LOGIC[op](va, vb)

    def negate(pair):
        text, value = pair
        return f"!{text}", not value

    return st.one_of(
        base, st.tuples(st.sampled_from(sorted(_LOGIC)), base, base).map(logic), base.map(negate)
    )


int_expressions = st.recursive(ints, _int_expr, max_leaves=12)


@settings(max_examples=300)
@given(int_expressions)
def test_int_expressions_evaluate_like_python(pair):
    text, expected = pair
    assert Evaluator({})(parse_expression(text)) == expected


@settings(max_examples=150)
@given(bools_from(int_expressions))
def test_bool_expressions_evaluate_like_python(pair):
    text, expected = pair
    assert Evaluator({})(parse_expression(text)) is expected


@settings(max_examples=150)
@given(st.lists(st.integers(-9, 9), min_size=0, max_size=6), st.integers(-9, 9), st.integers(1, 4))
def test_pack_expressions_evaluate_like_python(items, scalar, repeat):
    symbols = {"a": items, "k": scalar, "n": repeat}
    evaluate = lambda text: Evaluator(symbols)(parse_expression(text))  # noqa: E731
    assert evaluate("a + k") == [x + scalar for x in items]
    assert evaluate("a * 2 - k") == [2 * x - scalar for x in items]
    assert evaluate("a + ..") == sum(items)
    assert evaluate("a * ..") == math.prod(items)
    assert evaluate("a + ...") == [sum(items[: i + 1]) for i in range(len(items))]
    assert evaluate("[k, a.., k]") == [scalar, *items, scalar]
    assert evaluate("[k ..(n)]") == [scalar] * repeat
    assert evaluate("[a..(n)]") == items * repeat
    assert evaluate("a[::-1]") == items[::-1]
    assert evaluate("a[1:]") == items[1:]
    assert evaluate("a > 0") == [x > 0 for x in items]
    assert evaluate("a[a > 0]") == [x for x in items if x > 0]
    assert evaluate("k in a") == (scalar in items)
    assert evaluate("a != ..") == (len(set(items)) == len(items))
    assert evaluate("a == ..") == (len(set(items)) <= 1)
    assert evaluate("a := ..") == (items[0] if items and len(set(items)) == 1 else None)
    assert evaluate("[0:n]") == list(range(repeat))
    assert evaluate("a is k") == [x == scalar for x in items]
    assert evaluate("a > 0 ? a : -a") == [abs(x) for x in items]
    if items:
        assert evaluate("a <? ..") == min(items)
        assert evaluate("a >? ...") == [max(items[: i + 1]) for i in range(len(items))]
        assert evaluate("a[0] <- k") == [scalar, *items[1:]]
        assert evaluate("a[-1]") == items[-1]
    if len(items) % 2 == 0:
        assert evaluate("[(a[0::2], a[1::2])..]") == items


def test_expression_values_of_every_kind():
    evaluate = lambda text, **symbols: Evaluator(symbols)(parse_expression(text))  # noqa: E731
    assert evaluate("real(7) / 2.0") == 3.5
    assert evaluate("int(-3.7)") == -3
    assert evaluate("bool(0)") is False
    assert evaluate("7 \\ 2") == 4 and evaluate("-7 / 2") == -4 and evaluate("-7 % 3") == 2
    assert evaluate("2 ** 10") == 1024
    assert evaluate("round(2.5)") == 3.0 and evaluate("round(-2.5)") == -3.0
    assert evaluate("frac(-1.25)") == 0.75
    assert evaluate("sqrt(16.0) + abs(-2.0)") == 6.0
    assert evaluate("sign(-3)") == -1
    assert evaluate("'abc'[1]") == "b"
    assert evaluate('"a = {x + 2}, b = {y}"', x=40, y=[1, 2]) == "a = 42, b = [1, 2]"
    assert evaluate("?x", x=None) is False and evaluate("x ?? 3", x=None) == 3
    assert evaluate("x + 1", x=None) is None
    assert evaluate("[1, x]", x=None) is None
    assert evaluate("int()") == 0 and evaluate("real()") == 0.0
    assert evaluate("inf > 1e30") is True and evaluate("pi") == math.pi
    assert evaluate("[1, 2, 3][[2, 0]]") == [3, 1]
    assert evaluate("[1, 2, 3][[0, 2]] <- [7, 9]") == [7, 2, 9]
    assert evaluate("x.shape", x=type("T", (), {"shape": (2, 3)})()) == [2, 3]


@pytest.mark.parametrize(
    "text, message",
    [
        ("1 / 0", "division by zero"),
        ("[1, 2] + [1, 2, 3]", "packs of different lengths"),
        ("[1, 2][5]", "out of range"),
        ("true + 1", "cannot combine"),
        ("1 && true", "needs bool operands"),
        ("undefined_name", "unknown identifier 'undefined_name'"),
        ("[1, [2]]", "expanded with '..'"),
    ],
)
def test_expression_errors_name_the_problem(text, message):
    with pytest.raises(NNEFError, match=message) as info:
        Evaluator({"a": 1})(parse_expression(text))
    assert info.value.line == 1


# ------------------------------------------------------------------------------------------------
# operators written for the tests


def graph(body: str, *, imports: str = "", operators: str = "", attribs: dict | None = None):
    """Compose the graph ``G`` whose blocks are ``body``."""
    return compose(f"{imports}\n{operators}\ngraph G {{\n{body}\n}}", attribs=attribs, file="test.sknd")


PROBE = """
operator probe {
    @attrib {
        r: int;
        a: optional int;
        b: int..(d) = 0;
        c: int = 2 * d + r;
        e: int..(f) = [0:r];
    }
    @input {
        x: real[s..(r),z..(d),t..];
        y: real[s..(r),z..(d)];
    }
    @output {
        out: real[s.., t..];
    }
    @lower {
        out[i.., j..] = x[i.., 0 ..(d), j..], i < s, j < t;
    }
}
"""


def test_binding_order_and_deferred_attributes_of_2_6_2():
    g = graph(
        """
        @input { x: real[2,3,4,5,6]; y: real[2,3,4]; }
        @output { o: real[2,5,6]; }
        @compose { o = probe{r=1}(x, y); }
    """,
        operators=PROBE,
    )
    (op,) = g.operations
    symbols = op.symbols
    assert symbols["s"] == [2] and symbols["z"] == [3, 4] and symbols["d"] == 2 and symbols["t"] == [5, 6]
    assert op.attribs["b"] == [0, 0]  # a single value made uniform once d is known
    assert op.attribs["c"] == 2 * 2 + 1  # deferred default
    assert op.attribs["e"] == [0] and symbols["f"] == 1
    assert op.attribs["a"] is None
    assert g.tensors["o"].shape == (2, 5, 6)


def test_affine_extents_are_solved_and_checked():
    operators = """
    operator affine {
        @attrib { n: int; }
        @input { x: real[m, k + 1, s..(2 * d), n / 2]; w: real[4 * m]; }
        @output { y: real[m, k, d, s..]; }
        @lower { y[a, b, c, e..] = x[a, b, e.., 0], a < m, b < k, c < d, e < s; }
    }
    """
    g = graph(
        """
        @input { x: real[3, 5, 2, 7, 4, 6, 4]; w: real[12]; }
        @output { y: real[3, 4, 2, 2, 7, 4, 6]; }
        @compose { y = affine{n=8}(x, w); }
    """,
        operators=operators,
    )
    symbols = g.operations[0].symbols
    assert (symbols["m"], symbols["k"], symbols["d"], symbols["s"]) == (3, 4, 2, [2, 7, 4, 6])
    with pytest.raises(NNEFError, match=r"is 3, which '2 \* d' cannot equal") as info:  # an even count
        graph(
            """
            @input { x: real[3, 5, 2, 7, 4, 4]; w: real[12]; }
            @output { y: real; }
            @compose { y = affine{n=8}(x, w); }
        """,
            operators=operators,
        )
    with pytest.raises(NNEFError, match="'4 \\* m' = 12|is 10"):
        graph(
            """
            @input { x: real[3, 5, 2, 7, 4, 6, 4]; w: real[10]; }
            @output { y: real; }
            @compose { y = affine{n=8}(x, w); }
        """,
            operators=operators,
        )
    assert info.value.line is not None


INTERLEAVED = """
operator interleaved {
    @attrib { a: int; b: int; c: int; }
    @input { x: real[n]; }
    @output { y: real[n + r]; }
    @using { r = a / b; }
    @assert {
        r + c == 42: "some condition must be true for a/b and c: r={r}", r, c;
        b > 0: "b must be positive", b;
        a % b == 0: "a must be divisible by b", a, b;
    }
    @lower { y[i,] = 0.0, i < n + r; }
}
"""


@pytest.mark.parametrize(
    "attribs, message",
    [
        ("a=6, b=0, c=1", r"b must be positive \(b = 0\)"),  # checked before r = a / b divides by 0
        ("a=7, b=2, c=1", r"a must be divisible by b \(a = 7, b = 2\)"),
        ("a=8, b=2, c=1", r"some condition must be true for a/b and c: r=4 \(r = 4, c = 1\)"),
    ],
)
def test_using_and_asserts_interleave_as_2_9_says(attribs, message):
    with pytest.raises(NNEFError, match=message) as info:
        graph(
            f"""
            @input {{ x: real[3]; }}
            @output {{ y: real; }}
            @compose {{ y = interleaved{{{attribs}}}(x); }}
        """,
            operators=INTERLEAVED,
        )
    assert info.value.file == "test.sknd" and "interleaved{" in info.value.source_line
    assert info.value.source_line[info.value.column - 1 :].startswith("interleaved")


def test_using_symbols_and_asserts_pass():
    g = graph(
        """
        @input { x: real[3]; }
        @output { y: real[44]; }
        @compose { y = interleaved{a=82, b=2, c=1}(x); }
    """,
        operators=INTERLEAVED,
    )
    assert g.operations[0].symbols["r"] == 41
    assert g.tensors["y"].shape == (3 + 41,)


def test_generics_are_deduced_given_and_checked():
    g = graph(
        """
        @input { x: int[2, 3]; }
        @output { y: int[2, 3]; z: real[2, 3]; }
        @compose { y = math.neg(x); z = layout.cast<real>(x); }
    """,
        imports="import math; import layout;",
    )
    assert g.operations[0].dtypes == {"T": "int"}
    assert g.operations[1].dtypes == {"R": "real", "T": "int"}
    assert g.tensors["y"].dtype == "int" and g.tensors["z"].dtype == "real"
    with pytest.raises(NNEFError, match="generic type T is int but would also be real"):
        graph(
            """
            @input { x: int[2]; w: real[2]; }
            @output { y: int[2]; }
            @compose { y = math.add(x, w); }
        """,
            imports="import math;",
        )
    with pytest.raises(NNEFError, match="T: num cannot be bool"):
        graph(
            """
            @input { x: bool[2]; }
            @output { y: bool[2]; }
            @compose { y = math.neg(x); }
        """,
            imports="import math;",
        )


def test_null_propagation_skips_asserts_and_picks_branches():
    g = graph(
        """
        @input { x: real[2, 3]; }
        @output { y: real[2, 3]; z: real[2, 3]; }
        @compose { y = nn.relu(x); z = nn.relu{max=6.0}(x); }
    """,
        imports="import nn;",
    )
    assert g.operations[0].attribs == {"alpha": None, "max": None}
    assert g.operations[1].attribs["max"] == 6.0
    with pytest.raises(NNEFError, match="'max' must be positive"):
        graph(
            """
            @input { x: real[2]; }
            @output { y: real[2]; }
            @compose { y = nn.relu{max=-1.0}(x); }
        """,
            imports="import nn;",
        )


def test_static_branches_and_optional_promotion():
    operators = """
    operator maybe_scale {
        @attrib { scale: optional real; twice: bool = false; }
        @input { x: real[s..]; }
        @output { y: real[s..]; }
        @compose {
            a = if ?scale then math.mul(x, scale) else math.iden(x);
            y = if twice then math.add(a, a) else a;
        }
    }
    """
    g = graph(
        """
        @input { x: real[4]; }
        @output { y: real[4]; z: real[4]; }
        @compose { y = maybe_scale{scale=2.0}(x); z = maybe_scale{twice=true}(x); }
    """,
        imports="import math;",
        operators=operators,
    )
    assert [op.type for op in g.operations] == ["math.mul", "math.iden", "math.add"]
    assert g.operations[0].inputs[1] == "y.y" or g.tensors[g.operations[0].inputs[1]].data.tolist() == 2.0


def test_labels_qualify_nested_variables_and_tensors():
    g = graph(
        """
        @input { x: real[1, 3, 8, 8]; }
        @output { y: real[1, 4, 8, 8]; }
        @compose {
            h = block1: layer.conv{channels=4, size=[3, 3]}(x);
            y = layer.conv{channels=4, size=[1, 1], use_bias=false}(h);
        }
    """,
        imports="import layer;",
    )
    assert g.tensors["block1.filter"].shape == (4, 3, 3, 3) and g.tensors["block1.filter"].kind == "variable"
    assert g.tensors["y.filter"].shape == (4, 4, 1, 1)
    assert g.tensors["h"].producer.label == "block1.output"  # layer.conv has variables: a scope of its own
    assert [op.scopes for op in g.operations] == [("block1",), ("y",)]
    conv = g.operations[1]
    assert conv.inputs == ("h", "y.filter", None)


def test_loops_unroll_and_packs_destructure():
    g = graph(
        """
        @input { x: real[2, 3]; }
        @output { y: real[2, 3]; }
        @compose {
            y = math.cumsum{axis=1}(x);
        }
    """,
        imports="import math;",
    )
    types = [op.type for op in g.operations]
    assert types.count("layout.unstack") == 1 and types.count("math.add") == 3 and types[-1] == "layout.stack"
    assert g.tensors["y"].shape == (2, 3)
    g = graph(
        """
        @input { x: real[2, 8]; }
        @output { y: real[2, 2]; }
        @compose {
            [a, b, c..] = layout.split{axis=1, sizes=[2, 2, 3, 1]}(x);
            y = math.add(a, b);
        }
    """,
        imports="import math; import layout;",
    )
    assert g.tensors["a"].shape == (2, 2) and g.tensors["c[1]"].shape == (2, 1)


def test_dynamic_input_shapes_carry_upper_bounds():
    g = graph(
        """
        @input { x: real[s|10, 3]; }
        @output { y: real[s, 3]; }
        @compose { y = nn.relu(x); }
    """,
        imports="import nn;",
    )
    extent = g.tensors["x"].shape[0]
    assert isinstance(extent, DynamicExtent) and extent.bound == 10
    assert g.tensors["y"].shape[0] == extent and g.tensors["y"].upper_shape == (10, 3)
    g = graph(
        """
        @input { x: real[3, 4]; }
        @output { y: int; }
        @compose { y = layout.nonzero(x); }
    """,
        imports="import layout;",
    )
    count = g.tensors["y"].shape[1]
    assert isinstance(count, DynamicExtent) and count.bound == 12 and g.tensors["y"].upper_shape == (2, 12)


def test_graph_attributes_can_be_overridden():
    text = (
        "import nn;\ngraph G { @attrib { n: int = 2; } @input { x: real[n, 3]; } @output { y: real[n, 3]; }"
        " @compose { y = nn.relu(x); } }"
    )
    assert compose(text).tensors["x"].shape == (2, 3)
    assert compose(text, attribs={"n": 5}).tensors["y"].shape == (5, 3)
    with pytest.raises(NNEFError, match="no attribute"):
        compose(text, attribs={"m": 5})


@pytest.mark.parametrize(
    "body, message",
    [
        ("y = nn.convo(x);", "module 'nn' has no operator 'convo'; did you mean 'nn.conv'"),
        ("y = layout.flatten(x);", "module 'layout' is not imported"),
        ("y = nn.relu{alhpa=0.5}(x);", "has no attribute 'alhpa'; did you mean 'alpha'"),
        ("y = nn.softmax{axes=1.5}(x);", r"attribute 'axes' \(int\.\.\) expects int, got real 1.5"),
        ("y = nn.softmax{axes=['a']}(x);", "expects int, got str"),
        ("y = nn.relu(x, x);", "takes 1 input"),
        ("y = nn.linear(x, w);", "shape mismatch: nn.linear input 'filter'"),
        ("y = nn.conv{groups=2}(x, x);", "input-channels must equal"),
        ("y = math.add(x, w);", r"incompatible argument shapes for broadcasting \(\[4, 3\] vs \[1, 5\]"),
        ("y = nn.relu(x); y = nn.relu(x);", "'y' is already defined"),
    ],
)
def test_composition_errors_are_located_and_named(body, message):
    with pytest.raises(NNEFError, match=message) as info:
        graph(
            f"""
            @input {{ x: real[4, 3]; w: real[5]; }}
            @output {{ y: real; }}
            @compose {{ {body} }}
        """,
            imports="import nn; import math;",
        )
    assert info.value.file == "test.sknd" and "@compose" in info.value.source_line
    assert "^" in str(info.value) and info.value.column > 1


def test_output_shapes_are_checked_against_declarations():
    with pytest.raises(NNEFError, match=r"declared with shape \[4, 4\] but the graph computes \[4, 3\]"):
        graph(
            """
            @input { x: real[4, 3]; }
            @output { y: real[4, 4]; }
            @compose { y = nn.relu(x); }
        """,
            imports="import nn;",
        )
    operators = """
    operator wrong {
        @input { x: real[n]; }
        @output { y: real[n + 1]; }
        @compose { y = math.neg(x); }
    }
    """
    with pytest.raises(
        NNEFError, match=r"output 'y' is declared with shape \[4\] but its @compose produced \[3\]"
    ):
        graph(
            """
            @input { x: real[3]; }
            @output { y: real; }
            @compose { y = wrong(x); }
        """,
            imports="import math;",
            operators=operators,
        )


def test_branches_on_run_time_conditions_select_between_both():
    operators = """
    operator larger {
        @input { a: real[]; b: real[]; x: real[s..]; }
        @output { y: real[s..]; }
        @compose {
            y = if math.gt(a, b) then math.mul(x, 2.0) else math.neg(x);
        }
    }
    """
    g = graph(
        """
        @input { a: real[]; b: real[]; x: real[3]; }
        @output { y: real[3]; }
        @compose { y = larger(a, b, x); }
    """,
        imports="import math;",
        operators=operators,
    )
    assert [op.type for op in g.operations] == ["math.gt", "math.mul", "math.neg", "math.select"]
    x = np.array([1.0, -2.0, 3.0], np.float32)
    for a, expected in ((2.0, 2 * x), (0.5, -x)):
        out = g.run({"a": np.float32(a), "b": np.float32(1.0), "x": x})["y"]
        np.testing.assert_allclose(out, expected)
    with pytest.raises(NNEFError, match="a branch condition must be a single bool"):
        graph(
            """
            @input { x: real[3]; }
            @output { y: real; }
            @compose { y = if math.gt(x, 0.0) then math.neg(x) else x; }
        """,
            imports="import math;",
        )


RECURSIVE_OPERATORS = {
    "itself": """
    operator foo {
        @input { x: real[k]; }
        @output { y: real[k]; }
        @compose { y = foo(x); }
    }
    """,
    "mutually": """
    operator a {
        @input { x: real[k]; }
        @output { y: real[k]; }
        @compose { y = b(x); }
    }
    operator b {
        @input { x: real[k]; }
        @output { y: real[k]; }
        @compose { z = math.neg(x); y = a(z); }
    }
    """,
    "through a compile-time branch": """
    operator countdown {
        @attrib { n: int; }
        @input { x: real[k]; }
        @output { y: real[k]; }
        @compose { y = if n > 0 then countdown{n=n - 1}(x) else math.neg(x); }
    }
    """,
}


@pytest.mark.parametrize(
    "case, entry, line, column, message",
    [
        ("itself", "foo(x)", 6, 24, r"operator 'foo' invokes itself \(a cycle: foo -> foo\); recursion"),
        ("mutually", "a(x)", 11, 41, r"operator 'a' invokes itself through 'b' \(a cycle: a -> b -> a\)"),
        ("through a compile-time branch", "countdown{n=3}(x)", 7, 38, r"\(a cycle: countdown -> countdown\)"),
    ],
)
def test_recursive_operators_are_rejected_at_the_invocation_that_closes_the_cycle(
    case, entry, line, column, message
):
    with pytest.raises(NNEFError, match=message) as info:
        graph(
            f"@input {{ x: real[3]; }} @output {{ y: real[3]; }} @compose {{ y = {entry}; }}",
            imports="import math;",
            operators=RECURSIVE_OPERATORS[case],
        )
    assert (info.value.file, info.value.line, info.value.column) == ("test.sknd", line, column)
    assert "recursion is not allowed" in info.value.message
