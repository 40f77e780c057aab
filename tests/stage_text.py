"""Per-stage tests written as text, as xDSL's FileCheck and TVM's Before/Expected tests are: a graph
before a stage (uopviz.core.uop_text), the stage's own function, and the graph expected after.

A stage that changes what it makes changes its expected text: print the new one with
``print(print_graph(after))`` and read the difference before pasting it."""

from __future__ import annotations

import re
from collections.abc import Callable

from uopviz.core.uop import UOp
from uopviz.core.uop_text import parse_graph, print_graph


def renumbered(text: str) -> str:
    """Buffer numbers counted from 0 in order of appearance: a stage that makes buffers takes their
    numbers from a process-wide counter, so only their order is the stage's doing."""
    numbers: dict[str, int] = {}
    return re.sub(r"number=(\d+)", lambda m: f"number={numbers.setdefault(m.group(1), len(numbers))}", text)


def check_stage(before: str, stage: Callable[[UOp], UOp], expected: str, renumber: bool = False) -> UOp:
    """Parse ``before``, run ``stage`` on it, and compare the result's text with ``expected``; the
    expected text parses to the very UOp the stage made (hash-consing).  Returns that UOp."""
    after = stage(parse_graph(before))
    printed = print_graph(after)
    if renumber:
        printed = renumbered(printed)
    assert printed == expected.strip(), f"the stage made:\n{printed}"
    if not renumber:
        assert parse_graph(expected) is after
    return after
