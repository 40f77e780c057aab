"""Widgets: views over pure data models, for JupyterLab and standalone HTML reports.

* :func:`layout` — a UOp graph as a laid-out ``networkx.DiGraph`` (spec colours, folded
  constants, collapsible FUNCTION/CALL bodies); :func:`graph_diff` compares two of them.
* :class:`GraphView` — the interactive DAG; :class:`RewritePlayer` — step through a trace;
  :class:`KernelTuner` — apply OptOps with live sources and timings.
* :func:`explore` — tabs Graph, Pipeline, Kernels, Backends for a Tensor, Program, Kernel, UOp or
  anything registered with :func:`register_explorer`.

The data layer (graph, layered, player, tuner) needs no browser; views import anywidget and
ipywidgets, so they load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from uopviz.widgets.graph import GraphDiff, LayoutError, graph_diff, layout

__all__ = [
    "ExploreError",
    "GraphDiff",
    "GraphView",
    "KernelTuner",
    "LayoutError",
    "RewritePlayer",
    "explore",
    "graph_diff",
    "layout",
    "register_explorer",
]

_LAZY = {
    "GraphView": "uopviz.widgets.views",
    "RewritePlayer": "uopviz.widgets.views",
    "KernelTuner": "uopviz.widgets.tuner_view",
    "ExploreError": "uopviz.widgets.explorer",
    "explore": "uopviz.widgets.explorer",
    "register_explorer": "uopviz.widgets.explorer",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'uopviz.widgets' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
