"""Graphs around a data-dependent extent, shared by the NNEF tests of run-time extents and loops.

``compress`` keeps the positive items of a vector: its output extent ``k`` is counted at run time
(§"Data dependent output shapes"), so whatever a graph does with its result works on a run-time
extent bounded by the input's length.
"""

from __future__ import annotations

from collections.abc import Sequence

from uopviz.nnef.composition.composer import compose

COMPRESS = """operator compress {
    @input { x: real[n]; }
    @output { y: real[k|n]; }
    @lower { y[k] = x[i,], i < n | x[i,] > 0.0; }
}
"""


def counted_graph(
    inputs: str, outputs: str, body: str, *, imports: Sequence[str], file: str, extra: str = ""
):
    """Graph ``G`` with the given ``@input``/``@output``/``@compose`` texts, ``compress`` and the
    operators of ``extra`` in scope, composed as if read from ``file``."""
    head = "".join(f"import {module}; " for module in imports)
    graph = f"graph G {{ @input {{ {inputs} }} @output {{ {outputs} }} @compose {{ {body} }} }}"
    return compose(f"{head}\n{COMPRESS}{extra}{graph}", file=file)
