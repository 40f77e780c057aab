"""Hostile and malformed NNEF inputs (issue 11): each case once escaped as an undocumented exception
type, hung, or allocated without bound; now each is an NNEFError that names the file and position,
or is handled in bounded time and memory."""

from __future__ import annotations

import numpy as np
import pytest

from uopviz import nnef
from uopviz.nnef import NNEFError


def graph_text(compose: str, inputs: str = "x: real[3];", outputs: str = "y: real[3];", extra: str = "") -> str:
    """A one-graph SkriptND module importing math."""
    return (f"import math; graph G {{ @input {{ {inputs} }} @output {{ {outputs} }} {extra} "
            f"@compose {{ {compose} }} }}")


@pytest.mark.parametrize(
    "value",
    [
        "+".join(["1.0"] * 1500),  # a left-associative chain parses flat but nests one level per '+'
        "true ? " * 800 + "1.0" + " : 2.0" * 800,
        "-" * 1500 + "1.0",
        "(" * 400 + "1.0" + ")" * 400,
    ],
    ids=["plus-chain", "nested-select", "minus-chain", "parentheses"],
)
def test_deeply_nested_expressions_are_located_errors(value):
    with pytest.raises(NNEFError, match="nested") as caught:
        nnef.loads(graph_text(f"y = math.mul(x, {value});"))
    assert caught.value.file == "<string>" and caught.value.line == 1 and caught.value.column is not None


def test_a_long_flat_expression_under_the_nesting_limit_still_composes():
    graph = nnef.loads(graph_text("y = math.mul(x, " + "+".join(["1.0"] * 50) + ");"))
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_allclose(graph.run({"x": x})["y"], x * 50)
