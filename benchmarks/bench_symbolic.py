"""Simplifier speed and result size: uopviz's ``symbolic`` against tinygrad's.

The same random index expressions (one seed; ~10k nodes in all) are built in both libraries over
RANGE variables with random bounds — ``+ - * // % max``, ``<``, ``!=`` and ``where`` — and each is
simplified with the library's own symbolic rules (``uopviz.core.symbolic.simplify``,
``tinygrad``'s ``UOp.simplify``).  Every repetition builds fresh expressions over new RANGE numbers,
so neither library's caches carry over; building is not timed.  Rows report the time ratio and, in
the notes, the node counts of the inputs and results (distinct nodes over all expressions).

Run: ``.venv/bin/python benchmarks/run.py symbolic``.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from uopviz.core import UOp, dtypes  # noqa: E402
from uopviz.core.symbolic import simplify  # noqa: E402
from uopviz.core.uop import toposort  # noqa: E402

SEED = 1234
EXPRESSIONS = 1200
DEPTH = (4, 6)
RANGES = 6
REPEAT = 3

Spec = tuple  # ("range", i) | ("const", v) | (op, spec, spec[, spec, spec])


def random_specs(seed: int = SEED, count: int = EXPRESSIONS) -> tuple[list[int], list[Spec]]:
    """Range bounds and expression trees, library-neutral, from ``seed``."""
    rng = random.Random(seed)
    bounds = [rng.randint(2, 64) for _ in range(RANGES)]

    def tree(depth: int) -> Spec:
        if depth <= 0 or rng.random() < 0.15:
            return ("range", rng.randrange(RANGES)) if rng.random() < 0.75 else ("const", rng.randint(-8, 16))
        op = rng.choice(["+", "+", "-", "*", "*", "//", "%", "max", "where"])
        if op in ("*", "//", "%"):
            return (op, tree(depth - 1), ("const", rng.choice([2, 3, 4, 5, 6, 8, 12, 16, 32])))
        if op == "where":
            comparison = rng.choice(["<", "!="])
            return (
                "where",
                (comparison, tree(depth - 2), ("const", rng.randint(0, 40))),
                tree(depth - 1),
                tree(depth - 1),
            )
        return (op, tree(depth - 1), tree(depth - 1))

    return bounds, [tree(rng.randint(*DEPTH)) for _ in range(count)]


def build(spec: Spec, ranges: list[Any], const: Callable[[int], Any], maximum: Callable, ne: Callable) -> Any:
    """Build ``spec`` with a library's operators (iteratively memoised per call)."""
    kind = spec[0]
    if kind == "range":
        return ranges[spec[1]]
    if kind == "const":
        return const(spec[1])
    parts = [build(s, ranges, const, maximum, ne) for s in spec[1:]]
    if kind == "+":
        return parts[0] + parts[1]
    if kind == "-":
        return parts[0] - parts[1]
    if kind == "*":
        return parts[0] * parts[1]
    if kind == "//":
        return parts[0] // parts[1]
    if kind == "%":
        return parts[0] % parts[1]
    if kind == "max":
        return maximum(parts[0], parts[1])
    if kind == "<":
        return parts[0] < parts[1]
    if kind == "!=":
        return ne(parts[0], parts[1])
    if kind == "where":
        return parts[0].where(parts[1], parts[2])
    raise ValueError(f"unknown spec {kind!r}")


_numbers = iter(range(10**6, 10**9))


def build_ours(bounds: list[int], specs: list[Spec]) -> list[UOp]:
    """The expressions as uopviz UOps over fresh RANGEs."""
    ranges = [UOp.range(b, number=next(_numbers)) for b in bounds]
    return [
        build(
            s, ranges, lambda v: UOp.const(dtypes.index, v), lambda a, b: a.maximum(b), lambda a, b: a.ne(b)
        )
        for s in specs
    ]


def build_tinygrad(bounds: list[int], specs: list[Spec]) -> list[Any]:
    """The expressions as tinygrad UOps over fresh RANGEs."""
    from tinygrad.dtype import dtypes as tdtypes
    from tinygrad.uop.ops import UOp as TUOp

    ranges = [TUOp.range(b, next(_numbers)) for b in bounds]
    return [
        build(
            s,
            ranges,
            lambda v: TUOp.const(v, tdtypes.weakint),
            lambda a, b: a.maximum(b),
            lambda a, b: a.ne(b),
        )
        for s in specs
    ]


def node_count(roots: list[Any], topo: Callable[[Any], Any]) -> int:
    """Distinct nodes over all the graphs."""
    seen: set[int] = set()
    for r in roots:
        seen.update(id(u) for u in topo(r))
    return len(seen)


def timed(
    build_fn: Callable[[], list[Any]], simplify_fn: Callable[[Any], Any]
) -> tuple[float, list[Any], list[Any]]:
    """Median seconds to simplify a freshly built set of expressions; the last inputs and outputs."""
    samples = []
    inputs: list[Any] = []
    outputs: list[Any] = []
    for _ in range(REPEAT):
        inputs = build_fn()
        started = time.perf_counter()
        outputs = [simplify_fn(e) for e in inputs]
        samples.append(time.perf_counter() - started)
    return statistics.median(samples), inputs, outputs


def run() -> list[dict]:
    """One row: uopviz's simplifier against tinygrad's on the same expressions."""
    from run import row

    bounds, specs = random_specs()
    ours_s, our_in, our_out = timed(lambda: build_ours(bounds, specs), simplify)
    our_nodes_in, our_nodes_out = node_count(our_in, toposort_one), node_count(our_out, toposort_one)
    try:
        import tinygrad  # noqa: F401
    except ImportError:
        return [
            row(
                f"simplify {len(specs)} random index expressions",
                ours_s,
                notes=f"tinygrad not installed; nodes {our_nodes_in} -> {our_nodes_out}",
            )
        ]
    from importlib.metadata import version

    peer_s, peer_in, peer_out = timed(lambda: build_tinygrad(bounds, specs), lambda e: e.simplify())
    peer_nodes_in = node_count(peer_in, lambda u: list(u.toposort()))
    peer_nodes_out = node_count(peer_out, lambda u: list(u.toposort()))
    return [
        row(
            f"simplify {len(specs)} random index expressions",
            ours_s,
            peer=f"tinygrad {version('tinygrad')}",
            peer_s=peer_s,
            notes=f"nodes in/out: uopviz {our_nodes_in} -> {our_nodes_out}, "
            f"tinygrad {peer_nodes_in} -> {peer_nodes_out} (seed {SEED})",
        )
    ]


def toposort_one(u: UOp) -> list[UOp]:
    """``toposort`` of one root."""
    return toposort([u])
