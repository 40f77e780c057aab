"""Core IR: building UOps and rewrite throughput (tracing off and on), next to tinygrad.

Both libraries build the same graphs (same sizes, same constants) and apply the same rule
("x * 1 -> x" plus constant folding of ADD) with their own rewrite engines.
"""

from __future__ import annotations

import gc
import statistics
import time

from run import measure, row

import uopviz as uv
from uopviz import Ops, PatternMatcher, UOp, UPat, dtypes, graph_rewrite

NODES = 100_000
REWRITE_TERMS = 10_000


def build_ours(count: int = NODES // 2) -> UOp:
    x = UOp.range(10, number=0)
    for i in range(count):  # each step makes a CONST and an ADD or MUL: `count`*2 UOps
        x = x * 3 if i % 2 else x + i
    return x


def rewrite_graph_ours() -> UOp:
    x = UOp.range(10, number=0)
    for i in range(REWRITE_TERMS):
        x = (x + UOp.const(dtypes.index, i % 5)) * 1
    return x


OUR_RULES = PatternMatcher(
    [
        (UPat(Ops.MUL, src=(UPat.var("x"), UPat.const(None, 1))), lambda x: x, "x*1 -> x"),
        (
            UPat(Ops.ADD, src=(UPat.cvar("a"), UPat.cvar("b"))),
            lambda a, b: UOp.const(a.dtype, a.const_value + b.const_value),
            "fold add",
        ),
    ]
)


def tinygrad_parts():
    from tinygrad.uop.ops import Ops as TgOps
    from tinygrad.uop.ops import PatternMatcher as TgPatternMatcher
    from tinygrad.uop.ops import UOp as TgUOp
    from tinygrad.uop.ops import UPat as TgUPat
    from tinygrad.uop.ops import graph_rewrite as tg_graph_rewrite

    def build(count: int = NODES // 2):
        x = TgUOp.variable("a", 0, 9)
        for i in range(count):
            x = x * 3 if i % 2 else x + i
        return x

    def rewrite_graph():
        x = TgUOp.variable("a", 0, 9)
        for i in range(REWRITE_TERMS):
            x = (x + x.const_like(i % 5)) * x.const_like(1)
        return x

    rules = TgPatternMatcher(
        [
            (
                TgUPat(TgOps.MUL, src=(TgUPat.var("x"), TgUPat.cvar("c"))),
                lambda x, c: x if c.arg == 1 else None,
            ),
            (
                TgUPat(TgOps.ADD, src=(TgUPat.cvar("a"), TgUPat.cvar("b"))),
                lambda a, b: a.const_like(a.arg + b.arg),
            ),
        ]
    )
    return build, rewrite_graph, rules, tg_graph_rewrite


def measure_cold(fn, repeat: int = 7) -> float:
    """Median of single calls, each after a full collection: no graph survives from the last call,
    so every call builds its rewritten nodes afresh (a trace's reference cycles would otherwise keep
    them cached while `measure` holds the collector off)."""
    fn()
    samples = []
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def run() -> list[dict]:
    rows = []
    try:
        import tinygrad

        tg_build, tg_rewrite_graph, tg_rules, tg_graph_rewrite = tinygrad_parts()
        peer = f"tinygrad {getattr(tinygrad, '__version__', '')}".strip()
    except Exception as error:  # noqa: BLE001 - the peer is optional; say why it is missing
        tg_build = None
        peer_error = f"tinygrad unavailable: {error}"

    ours = measure(build_ours, repeat=3, warmup=1)
    if tg_build is not None:
        theirs = measure(tg_build, repeat=3, warmup=1)
        rows.append(row(f"build {NODES // 1000}k UOps", ours, peer=peer, peer_s=theirs))
    else:
        rows.append(row(f"build {NODES // 1000}k UOps", ours, notes=peer_error))

    graph = rewrite_graph_ours()

    def rewrite_off():
        return graph_rewrite(graph, OUR_RULES)

    def rewrite_on():
        with uv.tracing():
            return graph_rewrite(graph, OUR_RULES)

    off = measure_cold(rewrite_off)
    on = measure_cold(rewrite_on)
    nodes = len(graph.toposort())
    if tg_build is not None:
        tg_graph = tg_rewrite_graph()
        theirs = measure_cold(lambda: tg_graph_rewrite(tg_graph, tg_rules))
        rows.append(
            row(
                f"rewrite {nodes} nodes, tracing off",
                off,
                peer=peer,
                peer_s=theirs,
                notes=f"{nodes / off / 1e3:.0f}k nodes/s",
            )
        )
    else:
        rows.append(
            row(f"rewrite {nodes} nodes, tracing off", off, notes=f"{nodes / off / 1e3:.0f}k nodes/s")
        )
    rows.append(
        row(
            f"rewrite {nodes} nodes, tracing on",
            on,
            peer="uopviz tracing off",
            peer_s=off,
            notes=f"tracing overhead {100 * (on / off - 1):.1f}% (goal < 20%)",
        )
    )
    return rows
