"""Shared pieces of the fuzz tests (issue 11): example budgets, the record of outcomes, and
grammar-aware mutations of SkriptND and NNEF 1.0 text.

Budgets: the default profile runs a few hundred inputs in all (CI); ``HYPOTHESIS_PROFILE=slow`` (or
``UOPVIZ_FUZZ=slow``) runs the long budgets, over 10,000 inputs in all. Every test is seeded, so a
run is reproducible. Outcomes (accepted, or the exception type; ``undocumented <type>`` for one that
does not derive from ``uv.UopvizError``) are counted per target; with
``UOPVIZ_FUZZ_REPORT=path.json`` the counts are written there at the end of the session.
"""

from __future__ import annotations

import os
import re
from collections import Counter, defaultdict
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from uopviz.core.errors import UopvizError
from uopviz.nnef.composition.stdlib import STDLIB_DIR
from uopviz.nnef.syntax.lexer import KEYWORDS, OPERATORS

SLOW = "slow" in (os.environ.get("HYPOTHESIS_PROFILE", ""), os.environ.get("UOPVIZ_FUZZ", ""))

#: target -> outcome ("accepted" or an exception type's name) -> count
OUTCOMES: defaultdict[str, Counter] = defaultdict(Counter)


def budget(default: int, slow: int) -> settings:
    """Seeded settings with ``default`` examples, or ``slow`` under the slow profile."""
    return settings(
        max_examples=slow if SLOW else default,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


#: the OUTCOMES entry that sums, over every target, the exceptions outside the documented hierarchy
UNDOCUMENTED = "undocumented exception types"


def outcome_name(outcome: BaseException | None) -> str:
    """``accepted``, the exception type's name when it derives from the documented root
    ``uv.UopvizError`` (docs/robustness.md), else ``undocumented <name>``."""
    if outcome is None:
        return "accepted"
    name = type(outcome).__name__
    return name if isinstance(outcome, UopvizError) else f"undocumented {name}"


def record(target: str, outcome: BaseException | None) -> None:
    """Count one input's outcome for ``target``; an exception outside the documented hierarchy is
    also counted under :data:`UNDOCUMENTED` (the fuzz campaign's criterion: none)."""
    name = outcome_name(outcome)
    OUTCOMES[target][name] += 1
    if name.startswith("undocumented "):
        OUTCOMES[UNDOCUMENTED][f"{target}: {type(outcome).__name__}"] += 1


# ------------------------------------------------------------------------------------------------
# SkriptND corpus and mutations

CORPUS_FILES = sorted(STDLIB_DIR.glob("*.sknd")) + sorted((STDLIB_DIR.parent / "examples").glob("*.sknd"))

#: Token texts that stress the composer: edge numbers, nesting, packs, the language's keywords.
EDGE_TOKENS = (
    "0", "-1", "1", "2147483648", "4294967296", "9223372036854775808", "1e308", "-1e308", "1e-320",
    "0.0", "-0.0", "inf", "nan", "true", "false", "''", '"a"', '"{x}"', "[]", "[0]", "..", "...", "..(3)",
    "..(2147483648)", "(", ")", "[", "]", "{", "}", ";", ",", ":", "?", "??", "-", "!", "@compose", "@input",
    "@output", "@constant", "@variable", "@using", "@attrib", "@lower", "@dtype", "real", "int", "bool",
    "str", "type", "x", "s", "n", "axis", "graph", "operator", "for", "while", "do", "yield", "if", "then",
    "else", "with", "unroll", "\u00ff", "\t", "\n", "#",
)
VOCABULARY = tuple(sorted(set(EDGE_TOKENS) | set(KEYWORDS) | set(OPERATORS)))

_TOKEN = re.compile(r"\s+|#[^\n]*|\"[^\"\n]*\"|'[^'\n]*'|@?[A-Za-z_][A-Za-z0-9_]*|\d+(?:\.\d*)?(?:e[-+]?\d+)?"
                    r"|\.\.\.|\.\.|[<>]\?=|[-+*/%^<>=!&|?:]=?|\?\?|->|<-|=>|\*\*|&&|\|\||.", re.S)


def pieces(text: str) -> list[str]:
    """``text`` split into token-like pieces (whitespace and comments kept), joined back exactly."""
    return _TOKEN.findall(text)


@st.composite
def mutated(draw: st.DrawFn, text: str, max_mutations: int = 4) -> str:
    """``text`` with 1..max_mutations token-level mutations: delete, duplicate, swap, replace with a
    vocabulary token, insert, nest in brackets, or cut the text short."""
    parts = pieces(text)
    for _ in range(draw(st.integers(1, max_mutations))):
        if not parts:
            break
        index = draw(st.integers(0, len(parts) - 1))
        kind = draw(st.sampled_from(["delete", "duplicate", "swap", "replace", "insert", "nest", "truncate",
                                     "number"]))
        if kind == "delete":
            end = min(len(parts), index + draw(st.integers(1, 6)))
            del parts[index:end]
        elif kind == "duplicate":
            parts.insert(index, parts[index])
        elif kind == "swap":
            other = draw(st.integers(0, len(parts) - 1))
            parts[index], parts[other] = parts[other], parts[index]
        elif kind == "replace":
            parts[index] = " " + draw(st.sampled_from(VOCABULARY)) + " "
        elif kind == "insert":
            parts.insert(index, " " + draw(st.sampled_from(VOCABULARY)) + " ")
        elif kind == "nest":
            depth = draw(st.sampled_from([1, 2, 50, 300, 1200]))
            opener = draw(st.sampled_from(["(", "-", "!", "[", "1 + ", "true ? "]))
            closer = {"(": ")", "[": "]", "true ? ": " : 0"}.get(opener, "")
            parts[index] = opener * depth + parts[index] + closer * depth
        elif kind == "truncate":
            del parts[index:]
        else:
            numbers = [i for i, piece in enumerate(parts) if piece[:1].isdigit()]
            if numbers:
                parts[draw(st.sampled_from(numbers))] = draw(st.sampled_from(
                    ["0", "1", "3", "1000003", "2147483648", "18446744073709551616", "1e400", "0.5"]))
    return "".join(parts)


def corpus_text(path: Path) -> str:
    """The text of a corpus file."""
    return path.read_text(encoding="utf-8")
