"""Fuzzing the SkriptND lexer, parser and composer with grammar-aware mutations of the stdlib modules,
the example files and small graphs over the stdlib (issue 11). Only NNEFError may escape, and a
composition finishes in time bounded by the graph's size."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from uopviz import nnef
from uopviz.nnef import NNEFError
from uopviz.nnef.syntax.lexer import tokenize
from uopviz.nnef.syntax.parser import parse_module

from .fuzzing import CORPUS_FILES, budget, corpus_text, mutated, record

TEXTS = {path.name: corpus_text(path) for path in CORPUS_FILES}

#: Small graphs over the stdlib: the composer's seeds (each composes as written).
GRAPHS = [
    "import math; graph G { @input { x: real[2, 3]; } @output { y: real[2, 3]; } "
    "@compose { t = math.mul(x, 2.0); y = math.add(t, 1.0); } }",
    "import math; graph G { @input { x: real[2, 5]; } @output { y: real[2, 5]; } "
    "@compose { y = math.cumsum{axis = 1}(x); } }",
    "import math, layout; graph G { @input { x: real[4, 6]; } @output { y: real[6, 4]; } "
    "@compose { y = layout.transpose{perm = [1, 0]}(x); } }",
    "import nn; graph G { @input { x: real[1, 2, 6, 6]; } @output { y: real[1, 2, 3, 3]; } "
    "@compose { y = nn.max_pool{size = 2, stride = 2, padding = 0}(x); } }",
    "import math; graph G { @input { x: real[3, 4]; } @output { y: real[3, 1]; } "
    "@compose { y = math.sum_reduce{axes = [1]}(x); } }",
    "import math; graph G { @attrib { n: int = 3; } @input { x: real[n]; } @output { y: real[n]; } "
    "@constant { c: real[n] = 2.0; } @compose { t = math.add(x, c); y = math.mul(t, c); } }",
    "import linalg; graph G { @input { a: real[2, 3]; b: real[3, 4]; } @output { y: real[2, 4]; } "
    "@compose { y = linalg.matmul(a, b); } }",
    "import math; operator twice { @input { x: real[s..]; } @output { y: real[s..]; } "
    "@compose { y = math.add(x, x); } } graph G { @input { x: real[5]; } @output { y: real[5]; } "
    "@compose { y = twice(x); } }",
]
#: A composition may take this long at most (seconds; generous for two shared cores).
COMPOSE_LIMIT_S = 20.0


def outcome_of(action) -> BaseException | None:
    try:
        action()
    except NNEFError as error:
        return error
    return None


@pytest.mark.parametrize("graph", GRAPHS, ids=range(len(GRAPHS)))
def test_the_seed_graphs_compose(graph):
    nnef.loads(graph)  # the mutations start from valid graphs


@budget(default=60, slow=3000)
@given(st.sampled_from(sorted(TEXTS)).flatmap(lambda name: mutated(TEXTS[name])))
def test_mutated_modules_lex_and_parse_or_raise_nnef_errors(text):
    def parse():
        tokenize(text, "<fuzz>")
        parse_module(text, "<fuzz>")

    record("skriptnd parse", outcome_of(parse))


@budget(default=60, slow=2500)
@given(st.sampled_from(GRAPHS).flatmap(mutated))
def test_mutated_graphs_compose_or_raise_nnef_errors(text):
    start = time.monotonic()
    record("skriptnd compose", outcome_of(lambda: nnef.loads(text)))
    elapsed = time.monotonic() - start
    assert elapsed < COMPOSE_LIMIT_S, f"composition took {elapsed:.1f} s, more than the graph's size explains"


#: The example as printed has a shape error (conv7 takes relu6); mutations start from the fixed model.
ALEXNET = TEXTS["alexnet.sknd"].replace("conv7 = nn.linear(relu6,", "conv7 = nn.linear(flat1,")


def test_the_fixed_alexnet_composes():
    assert len(nnef.loads(ALEXNET).operations) > 20


@budget(default=15, slow=500)
@given(mutated(ALEXNET, max_mutations=2))
def test_mutated_alexnet_composes_or_raises_nnef_errors(text):
    start = time.monotonic()
    record("skriptnd compose alexnet", outcome_of(lambda: nnef.loads(text)))
    assert time.monotonic() - start < COMPOSE_LIMIT_S
