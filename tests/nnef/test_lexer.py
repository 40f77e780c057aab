"""The SkriptND tokenizer: token kinds, values, positions, maximal munch and lexical errors."""

from __future__ import annotations

import pytest

from uopviz.nnef.errors import NNEFError
from uopviz.nnef.syntax.lexer import KEYWORDS, OPERATORS, Kind, Placeholder, tokenize


def texts(source: str) -> list[str]:
    """The token texts of ``source`` without the END token."""
    return [token.text for token in tokenize(source)[:-1]]


def test_identifiers_keywords_and_positions() -> None:
    tokens = tokenize("operator conv_2d {\n  _x1: real;\n}")
    assert [(token.kind, token.text, token.line, token.column) for token in tokens] == [
        (Kind.KEYWORD, "operator", 1, 1),
        (Kind.IDENTIFIER, "conv_2d", 1, 10),
        (Kind.OPERATOR, "{", 1, 18),
        (Kind.IDENTIFIER, "_x1", 2, 3),
        (Kind.OPERATOR, ":", 2, 6),
        (Kind.KEYWORD, "real", 2, 8),
        (Kind.OPERATOR, ";", 2, 12),
        (Kind.OPERATOR, "}", 3, 1),
        (Kind.END, "", 3, 2),
    ]


def test_every_keyword_is_a_keyword_token() -> None:
    for word in sorted(KEYWORDS):
        (token, end) = tokenize(word)
        assert token.kind is Kind.KEYWORD and token.text == word and end.kind is Kind.END


def test_contextual_words_are_identifiers() -> None:
    for word in ("version", "extension", "dynamic", "static", "shape", "rank", "size", "True"):
        assert tokenize(word)[0].kind is Kind.IDENTIFIER


@pytest.mark.parametrize(
    ("source", "kind", "value"),
    [
        ("0", Kind.INTEGER, 0),
        ("123", Kind.INTEGER, 123),
        ("1.5", Kind.REAL, 1.5),
        ("2.", Kind.REAL, 2.0),
        ("1e-5", Kind.REAL, 1e-5),
        ("1E+3", Kind.REAL, 1000.0),
        ("2.5e3", Kind.REAL, 2500.0),
        ("0.125", Kind.REAL, 0.125),
    ],
)
def test_numbers(source: str, kind: Kind, value: object) -> None:
    token = tokenize(source)[0]
    assert token.kind is kind and token.value == value and type(token.value) is type(value)


def test_integer_followed_by_expansion_is_not_a_real() -> None:
    assert texts("[1..(5)]") == ["[", "1", "..", "(", "5", ")", "]"]
    assert texts("[1 ..(5)]") == ["[", "1", "..", "(", "5", ")", "]"]
    assert tokenize("1..")[0].kind is Kind.INTEGER


def test_every_operator_lexes_as_itself() -> None:
    for op in sorted(OPERATORS):
        tokens = tokenize(f"a {op} b")
        assert [token.text for token in tokens[:-1]] == ["a", op, "b"], op


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("a??b", ["a", "??", "b"]),
        ("a<?b", ["a", "<?", "b"]),
        ("a>?b", ["a", ">?", "b"]),
        ("x[i] <?= y", ["x", "[", "i", "]", "<?=", "y"]),
        ("x[i] >?= y", ["x", "[", "i", "]", ">?=", "y"]),
        ("a=>b", ["a", "=>", "b"]),
        ("x:=..", ["x", ":=", ".."]),
        ("x+...", ["x", "+", "..."]),
        ("x....", ["x", "...", "."]),
        ("a**b", ["a", "**", "b"]),
        ("a\\b", ["a", "\\", "b"]),
        ("a[i]<-b", ["a", "[", "i", "]", "<-", "b"]),
        ("a<-1", ["a", "<-", "1"]),
        ("a < -1", ["a", "<", "-", "1"]),
        ("i->n", ["i", "->", "n"]),
        ("|i<>a:b|", ["|", "i", "<>", "a", ":", "b", "|"]),
        ("a||b&&c", ["a", "||", "b", "&&", "c"]),
        ("^(r)", ["^", "(", "r", ")"]),
        ("s|10", ["s", "|", "10"]),
        ("a!=b", ["a", "!=", "b"]),
        ("!a", ["!", "a"]),
        ("?x", ["?", "x"]),
        ("x[::-1]", ["x", "[", ":", ":", "-", "1", "]"]),
        ("a.shape", ["a", ".", "shape"]),
        ("y |= x", ["y", "|=", "x"]),
        ("y &= x", ["y", "&=", "x"]),
        ("y *= x", ["y", "*=", "x"]),
        ("~|10", ["~", "|", "10"]),
    ],
)
def test_maximal_munch(source: str, expected: list[str]) -> None:
    assert texts(source) == expected


def test_comments_are_skipped_to_the_end_of_the_line() -> None:
    tokens = tokenize("a # comment ; } \n# whole line\n  b")
    assert [(token.text, token.line, token.column) for token in tokens[:-1]] == [("a", 1, 1), ("b", 3, 3)]


def test_blocks() -> None:
    token = tokenize("@input {")[0]
    assert token.kind is Kind.BLOCK and token.text == "@input" and token.value == "input"


def test_strings_with_escapes_and_both_quotes() -> None:
    token = tokenize(r'"a\"b\\c\nd\te\{f\}" ')[0]
    assert token.kind is Kind.STRING
    assert token.value == ('a"b\\c\nd\te{f}',)
    assert tokenize(r"'it\'s \"q\"'")[0].value == ("it's \"q\"",)
    assert tokenize('""')[0].value == ("",)


def test_string_placeholders_keep_their_source_position() -> None:
    token = tokenize('  x: "got {a + 2} and {b}!"')[2]
    assert token.value == (
        "got ",
        Placeholder("a + 2", 1, 12),
        " and ",
        Placeholder("b", 1, 24),
        "!",
    )


def test_crlf_line_endings_count_lines() -> None:
    tokens = tokenize("a\r\nb\r\n  c")
    assert [(token.line, token.column) for token in tokens[:-1]] == [(1, 1), (2, 1), (3, 3)]


@pytest.mark.parametrize(
    ("source", "line", "column", "fragment"),
    [
        ("a $ b", 1, 3, "invalid character '$'"),
        ("x = a & b;", 1, 7, "logical and is written '&&'"),
        ('x = "abc', 1, 5, "unterminated string literal"),
        ('x = "abc\n";', 1, 5, "strings cannot span lines"),
        ("x = 'abc\"", 1, 5, "missing closing '"),
        (r'"a\qb"', 1, 3, "unknown escape sequence '\\q'"),
        ('"a {b"', 1, 4, "unterminated '{' placeholder"),
        ('"a {}"', 1, 4, "empty '{}' placeholder"),
        ('"a } b"', 1, 4, "unmatched '}'"),
        ("1e+", 1, 4, "expected a digit in the exponent"),
        ("12abc", 1, 3, "invalid character 'a' after number '12'"),
        ("@ input", 1, 2, "expected a block name after '@'"),
        ("a\n  b `", 2, 5, "invalid character '`'"),
        ("x = 3 € 4", 1, 7, "invalid character '€'"),
    ],
)
def test_lexical_errors(source: str, line: int, column: int, fragment: str) -> None:
    with pytest.raises(NNEFError) as caught:
        tokenize(source, "bad.sknd")
    error = caught.value
    assert (error.file, error.line, error.column) == ("bad.sknd", line, column)
    assert fragment in error.message
    assert str(error).startswith(f"bad.sknd:{line}:{column}: ")


def test_error_text_shows_the_line_and_a_caret() -> None:
    with pytest.raises(NNEFError) as caught:
        tokenize("first\n  x = a $ b\nlast", "f.sknd")
    assert str(caught.value) == (
        "f.sknd:2:9: invalid character '$'\n"
        "      x = a $ b\n"
        "            ^"
    )
