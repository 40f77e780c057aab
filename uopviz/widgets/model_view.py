"""The Model tab of ``uv.explore(g)`` for an NNEF graph: the operator graph, and the kernels of the
operation clicked in the kernel tuner.

:class:`OperatorGraphView` draws :func:`uopviz.widgets.nnef_graph.operator_graph` with the DAG
canvas every UOp graph uses (zoom, pan, hover, side panel on click), tensor shapes on the edges
and a legend of the module colours.  :class:`ModelExplorer` puts it above a bar naming the selected
operation with a button that lowers it and opens its kernels in a :class:`KernelTuner`.
"""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as widgets
import networkx as nx

from uopviz.widgets.nnef_graph import (
    OPERATOR_PANEL_PROMPT,
    module_legend,
    operator_graph,
    operator_graph_json,
    tensor_text,
    written_tensors,
)
from uopviz.widgets.views import GraphView

__all__ = ["ModelExplorer", "OperatorGraphView"]


class OperatorGraphView(GraphView):
    """An interactive operator graph of a model: ``OperatorGraphView(g)`` (an NNEF graph) or
    ``OperatorGraphView(graph=operator_graph(g))``.  ``view.graph_model`` is the laid-out
    ``networkx.DiGraph``; ``view.selected`` the key of the clicked node (``op:<index>``)."""

    def __init__(self, model: Any = None, *, graph: nx.DiGraph | None = None, height: int = 620,
                 engine: str = "auto", **kwargs: Any):
        kwargs.setdefault("empty_text", OPERATOR_PANEL_PROMPT)
        super().__init__(None, height=height, engine=engine, can_toggle=False, **kwargs)
        self.model = model
        if graph is None and model is not None:
            graph = operator_graph(model, engine=engine)
        if graph is not None:
            self.show_operators(graph)

    def show_operators(self, graph: nx.DiGraph) -> None:
        """Draw a laid-out operator graph (:func:`operator_graph`)."""
        self.graph_model = graph
        with self.hold_sync():
            self.legend = module_legend(graph)
            self.graph = operator_graph_json(graph)

    def selected_operation(self) -> tuple[int, Any] | None:
        """(index, operation) of the selected node when it is an operation, else None."""
        if self.graph_model is None or self.selected not in self.graph_model:
            return None
        data = self.graph_model.nodes[self.selected]
        if data.get("kind") != "operation":
            return None
        return data["index"], data["operation"]


#: How many matches the search box lists.
SEARCH_MATCHES = 50


class ModelExplorer(widgets.VBox):
    """The operator graph of ``model`` with a search box above it and a bar under it: the selected
    operation and a button opening its lowered kernels (``model.kernels(index, backend)``: that
    operation alone is lowered, never the whole graph) in a kernel tuner below.

    ``explorer.view`` is the :class:`OperatorGraphView`; ``explorer.open_kernels(index)`` does what
    the button does and returns the tuner (``explorer.tuner``); ``explorer.search(text)`` lists the
    operations and tensors whose names, types or labels hold every word of ``text`` (what the
    search box shows) and ``explorer.reveal(key)`` selects a node and brings it into view."""

    def __init__(self, model: Any, *, backend: str = "c", backends: list[str] | None = None,
                 height: int = 620, engine: str = "auto"):
        self.model = model
        self.backend = backend
        self.backends = backends
        self.tuner: Any = None
        self.view = OperatorGraphView(model, height=height, engine=engine)
        inputs = ", ".join(f"{name} {tensor_text(model.tensors.get(name))}" for name in model.inputs)
        outputs = ", ".join(f"{name} {tensor_text(model.tensors.get(name))}" for name in model.outputs)
        self.header = widgets.HTML(
            f'<div style="font-size:12px"><b>graph {html.escape(str(getattr(model, "name", "model")))}</b>: '
            f"{len(model.operations)} operations · inputs <code>{html.escape(inputs)}</code> · outputs "
            f"<code>{html.escape(outputs)}</code> · click an operation for its attributes, tensors and "
            "SkriptND definition</div>")
        self.selection = widgets.HTML('<span style="color:#57606a">no operation selected</span>')
        self.open_button = widgets.Button(
            description="Open kernels in tuner", disabled=True, icon="wrench",
            tooltip="lower the selected operation to UOp kernels and tune them",
            layout=widgets.Layout(width="auto"))
        self.message = widgets.HTML()
        self.tuner_box = widgets.VBox()
        self.open_button.on_click(lambda _: self._open_from_button())
        self.view.observe(self._on_select, "selected")
        self._search_index: list[tuple[str, str, str]] | None = None
        self.search_box = widgets.Text(
            placeholder="search operations and tensors (name, operator, label)", continuous_update=True,
            layout=widgets.Layout(width="360px"))
        self.matches = widgets.Select(
            options=[], rows=6, layout=widgets.Layout(width="620px", display="none"))
        self.search_box.observe(lambda change: self._show_matches(change["new"]), "value")
        # Enter in the box (the text widget's "submit" message) reveals the first match
        self.search_box.on_msg(self._on_search_message)
        self.matches.observe(self._on_match, "value")
        bar = widgets.HBox([self.selection, self.open_button, self.message],
                           layout=widgets.Layout(align_items="center", justify_content="flex-start"))
        super().__init__([self.header, self.search_box, self.matches, self.view, bar, self.tuner_box])

    # -- search -----------------------------------------------------------------------------------

    def search(self, text: str, limit: int = SEARCH_MATCHES) -> list[tuple[str, str]]:
        """``(description, node key)`` of the operations and tensors matching ``text``: every word
        of it (any case) in the operation's index, operator, label and tensors, or in the tensor's
        name; exact names first. A tensor's node is the operation computing it (or its own node for
        a graph input, variable, constant)."""
        words = text.lower().split()
        if not words:
            return []
        exact, partial = [], []
        for haystack, key, description in self._index():
            if all(word in haystack for word in words):
                names = haystack.split()
                (exact if any(word in names for word in words) else partial).append((description, key))
        return (exact + partial)[:limit]

    def submit_search(self) -> str | None:
        """What Enter in the search box does: select the first match listed and bring it into view;
        returns its node key (None when nothing matches)."""
        options = self.matches.options
        if not options:
            return None
        key = options[0][1]
        self.matches.value = key
        self.reveal(key)
        return key

    def reveal(self, key: str) -> None:
        """Select the node ``key`` (``op:<index>``, ``input:<name>``, ...) and centre the view on it."""
        if self.view.graph_model is None or key not in self.view.graph_model:
            raise KeyError(f"the operator graph has no node {key!r}")
        self.view.selected = key

    def _index(self) -> list[tuple[str, str, str]]:
        """(searched text, node key, description) of every operation and tensor, made on first use."""
        if self._search_index is None:
            graph = self.view.graph_model
            entries, producer = [], {}
            for key, data in graph.nodes(data=True):
                if data.get("kind") != "operation":
                    producer.setdefault(data.get("tensor"), key)
                    continue
                operation = data["operation"]
                written = written_tensors(operation)
                producer.update(dict.fromkeys(written, key))
                label = str(getattr(operation, "label", "") or "")
                description = f"operation {data['index']}: {operation.type} {label}".rstrip()
                searched = f"{data['index']} {operation.type} {label} {' '.join(written)}".lower()
                entries.append((searched, key, description))
            for name, info in self.model.tensors.items():
                key = producer.get(name)
                if key is not None:
                    entries.append((name.lower(), key, f"tensor {name} {tensor_text(info)}"))
            self._search_index = entries
        return self._search_index

    def _on_search_message(self, _widget: Any, content: dict[str, Any], _buffers: Any) -> None:
        if content.get("event") == "submit":
            self.submit_search()

    def _show_matches(self, text: str) -> None:
        found = self.search(text)
        with self.matches.hold_trait_notifications():
            self.matches.options = found
            self.matches.value = None
        self.matches.layout.display = "" if found else "none"

    def _on_match(self, change: dict[str, Any]) -> None:
        if change["new"]:
            self.reveal(change["new"])

    def _on_select(self, change: dict[str, Any] | None = None) -> None:
        chosen = self.view.selected_operation()
        self.open_button.disabled = chosen is None
        if chosen is None:
            self.selection.value = '<span style="color:#57606a">no operation selected</span>'
            return
        index, operation = chosen
        label = html.escape(str(getattr(operation, "label", "")))
        kind = html.escape(str(operation.type))
        self.selection.value = f"<b>{kind}</b> <code>{label}</code> (operation {index})"

    def _open_from_button(self) -> None:
        """The button's action: an operation that does not lower says why in the bar (a click has
        no caller to raise to)."""
        try:
            self.open_kernels()
        except Exception as error:  # noqa: BLE001 - shown to the person who clicked
            self.message.value = f'<span style="color:#cf222e">{html.escape(str(error))}</span>'
            self.tuner_box.children = []
            self.tuner = None

    def open_kernels(self, index: int | None = None) -> Any:
        """Lower operation ``index`` (default: the selected one) and show its kernels in a tuner."""
        from uopviz.widgets.tuner_view import KernelTuner

        if index is None:
            chosen = self.view.selected_operation()
            if chosen is None:
                raise ValueError("select an operation in the graph first (or pass its index)")
            index = chosen[0]
        operation = self.model.operations[index]
        kernels = self.model.kernels(index, backend=self.backend)
        if not kernels:
            self.message.value = f"{html.escape(str(operation.type))} lowers to no kernel"
            self.tuner_box.children = []
            self.tuner = None
            return None
        self.tuner = KernelTuner(kernels, backends=self.backends)
        self.tuner.operation_index = index
        plural = "s" if len(kernels) != 1 else ""
        label = html.escape(str(getattr(operation, "label", operation.type)))
        self.message.value = f'<span class="uv-dim">{len(kernels)} kernel{plural} of {label} below</span>'
        self.tuner_box.children = [self.tuner]
        return self.tuner
