"""``uv.explore(x)``: one widget with tabs Graph, Pipeline, Kernels and Backends for whatever
``x`` is (and, first, a Model tab for a model graph).

What to show is decided by a registry of (test, builder) pairs, tried newest first, so other
parts of uopviz (the NNEF loader, say) plug in their own objects without this module knowing
them: ``register_explorer("name", lambda x: isinstance(x, Model), build)``.  Built in: UOp, Trace,
Tensor (compiled with ``uv.compile``), Program, Kernel, and model graphs (NNEF: anything with
inputs, outputs, tensors, operations and ``compile``: a Model tab draws its operator graph, one
node per operation, with a search box, and opens an operation's kernels in the tuner; an Operations
tab lists them; a graph of more than :data:`EAGER_COMPILE_OPERATIONS` operations is compiled as a
whole only when its Kernels tab asks, ``explore(model, compile=True)`` compiles it first).  Objects
are recognised by duck typing (what they have), so the widgets never import the modules that
define them.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

import ipywidgets as widgets

from uopviz.core.errors import UopvizError
from uopviz.core.ops import Ops
from uopviz.core.rewrite import Trace
from uopviz.core.uop import UOp
from uopviz.engine.program import compiled_graph
from uopviz.widgets.models import is_model_graph

TABS = ("Model", "Graph", "Pipeline", "Kernels", "Backends", "Operations")

Test = Callable[[Any], bool]
Builder = Callable[..., dict[str, widgets.Widget]]
_REGISTRY: list[tuple[str, Test, Builder]] = []


def register_explorer(name: str, test: Test, build: Builder) -> None:
    """Make ``explore(x)`` use ``build(x, **options)`` for every ``x`` where ``test(x)`` is true.

    ``build`` returns ``{tab title: widget}`` (tabs named as in :data:`TABS` are shown in that
    order, others after them).  Later registrations win, and registering a ``name`` again replaces
    it.
    """
    _REGISTRY[:] = [entry for entry in _REGISTRY if entry[0] != name]
    _REGISTRY.append((name, test, build))


class ExploreError(UopvizError, TypeError):
    """``uv.explore(x)`` for an ``x`` no explorer is registered for (also a ``TypeError``)."""


def explorer_for(x: Any) -> tuple[str, Builder]:
    """The (name, builder) that ``explore`` would use for ``x``."""
    for name, test, build in reversed(_REGISTRY):
        try:
            matches = test(x)
        except Exception:  # noqa: BLE001 - a test that cannot look at x does not match it
            matches = False
        if matches:
            return name, build
    known = ", ".join(name for name, _, _ in _REGISTRY)
    raise ExploreError(
        f"uv.explore() cannot show a {type(x).__name__}; it shows: {known} "
        "(add more with uopviz.widgets.register_explorer)"
    )


def explore(x: Any, **options: Any) -> widgets.Widget:
    """An explorer widget for ``x`` (a Tensor, Program, Kernel, UOp, Trace, or anything
    registered): tabs Graph, Pipeline, Kernels, Backends as far as they apply."""
    name, build = explorer_for(x)
    tabs = build(x, **options)
    ordered = [t for t in TABS if t in tabs] + [t for t in tabs if t not in TABS]
    tab = widgets.Tab(children=[tabs[t] for t in ordered])
    for i, title in enumerate(ordered):
        tab.set_title(i, title)
    tab.add_class("uv-explorer")
    tab.explorer_name = name
    tab.views = tabs
    return tab


def note(text: str) -> widgets.HTML:
    """A short explanatory line under a tab's view."""
    return widgets.HTML(f'<div class="uv-dim" style="font-size:12px;color:#57606a">{html.escape(text)}</div>')


# ---------------------------------------------------------------------------------------------
# built-in explorers


def _is_tensor(x: Any) -> bool:
    return type(x).__name__ == "Tensor" and isinstance(getattr(x, "uop", None), UOp)


def _is_program(x: Any) -> bool:
    return hasattr(x, "kernels") and isinstance(getattr(x, "trace", None), Trace)


def _is_kernel(x: Any) -> bool:
    return all(hasattr(x, name) for name in ("axes", "opts", "apply", "source")) and not _is_program(x)


def _build_uop(x: UOp, **options: Any) -> dict[str, widgets.Widget]:
    from uopviz.widgets.views import GraphView

    return {"Graph": GraphView(x, **options)}


def _build_trace(x: Trace, **options: Any) -> dict[str, widgets.Widget]:
    from uopviz.widgets.views import RewritePlayer

    return {"Pipeline": RewritePlayer(x, **options)}


class GraphChoice(widgets.VBox):
    """One DAG view and buttons choosing which of several graphs it shows (the tensor graph, the
    program with one CALL body per kernel...).  ``choice.view`` is the :class:`GraphView`;
    ``choice.graphs`` maps each button's name to its UOp."""

    def __init__(self, graphs: dict[str, UOp], **view_options: Any):
        from uopviz.widgets.embed import AUTO_COLLAPSE_NODES
        from uopviz.widgets.graph import NO_BODIES, collapse_for_view, function_bodies
        from uopviz.widgets.views import GraphView

        self.graphs = graphs
        names = list(graphs)
        self.view = GraphView(None, **view_options)
        self.buttons = widgets.ToggleButtons(options=names, value=names[0], style={"button_width": "auto"})

        def show(uop: UOp) -> None:
            # a big graph of FUNCTION/CALL bodies opens with them closed (open them one by one), as
            # reports do: all of AlexNet's 25 kernel bodies open were 474 unreadable nodes
            many = function_bodies(uop) and len(uop.toposort()) > AUTO_COLLAPSE_NODES
            self.view.show(uop, collapse=collapse_for_view(uop, NO_BODIES) if many else [])

        show(graphs[names[0]])
        self.buttons.observe(lambda change: show(graphs[change["new"]]), "value")
        super().__init__([self.buttons, self.view] if len(names) > 1 else [self.view])


def _program_graphs(program: Any, graph: UOp | None) -> dict[str, UOp]:
    """The graphs a program's Graph tab offers: what was compiled, and the program after Rangeify
    (each kernel the body of a CALL, to open one by one)."""
    graphs: dict[str, UOp] = {}
    root = graph if graph is not None else compiled_graph(program)
    if root is not None:
        graphs["tensor graph"] = root
    rangeify = next((p for p in program.trace.passes if p.name == "Rangeify" and p.output is not None), None)
    if rangeify is not None and rangeify.output is not root:
        graphs["program: one CALL per kernel"] = rangeify.output
    return graphs


def _build_program(
    program: Any, graph: UOp | None = None, backends: list[str] | None = None, **options: Any
) -> dict[str, widgets.Widget]:
    from uopviz.widgets.views import RewritePlayer

    tabs: dict[str, widgets.Widget] = {}
    graphs = _program_graphs(program, graph)
    if graphs:
        tabs["Graph"] = GraphChoice(graphs)
    if program.trace.passes:
        tabs["Pipeline"] = RewritePlayer(program.trace, backend=program.backend)
    if program.kernels:
        from uopviz.widgets.tuner_view import KernelTuner

        tabs["Kernels"] = KernelTuner(program.kernels, backends=backends, trace=program.trace)
        from uopviz.widgets.backends_view import backends_panel

        tabs["Backends"] = backends_panel(program.kernels, backends=backends)
    return tabs


def _build_tensor(
    tensor: Any, backend: str | None = None, opts: Any = None, **options: Any
) -> dict[str, widgets.Widget]:
    import uopviz

    compile_options = {"opts": opts}
    if backend is not None:
        compile_options["backend"] = backend
    program = uopviz.compile(tensor, **compile_options)
    return _build_program(program, graph=tensor.uop, **options)


def _build_tensor_list(tensors: Any, **options: Any) -> dict[str, widgets.Widget]:
    import uopviz

    program = uopviz.compile(list(tensors), opts=options.pop("opts", None))
    sink = UOp(Ops.SINK, tuple(t.uop for t in tensors))
    return _build_program(program, graph=sink, **options)


def _build_kernel(
    kernel: Any, backends: list[str] | None = None, **options: Any
) -> dict[str, widgets.Widget]:
    from uopviz.widgets.backends_view import backends_panel
    from uopviz.widgets.tuner_view import KernelTuner
    from uopviz.widgets.views import GraphView

    tabs: dict[str, widgets.Widget] = {}
    if isinstance(getattr(kernel, "ast", None), UOp):
        tabs["Graph"] = GraphView(kernel.ast)
    tabs["Kernels"] = KernelTuner([kernel], backends=backends)
    tabs["Backends"] = backends_panel([kernel], backends=backends)
    return tabs


#: Above this many operations ``explore(model)`` opens without compiling the whole graph: the
#: Model tab lowers only the operation opened, and the Kernels tab compiles the rest on request.
EAGER_COMPILE_OPERATIONS = 300


def _build_model(graph: Any, backend: str = "c", opts: Any = None, backends: list[str] | None = None,
                 compile: bool | None = None, **options: Any) -> dict[str, widgets.Widget]:
    """The Model tab, the program's tabs and the Operations table. ``compile``: whether the whole
    graph is compiled before the explorer opens (default: for graphs of at most
    :data:`EAGER_COMPILE_OPERATIONS` operations, or already compiled)."""
    from uopviz.widgets.model_view import ModelExplorer
    from uopviz.widgets.models import model_html

    tabs: dict[str, widgets.Widget] = {"Model": ModelExplorer(graph, backend=backend, backends=backends)}
    if compile is None:
        compiled = (backend, repr(opts)) in getattr(graph, "_programs", {})
        compile = compiled or len(graph.operations) <= EAGER_COMPILE_OPERATIONS
    placeholders = getattr(graph, "pack_lengths_at_bounds", None)
    if placeholders:  # its packs stand for lengths only a run decides: nothing to compile
        tabs["Kernels"] = note(
            f"pack lengths follow the run-time input extents {', '.join(placeholders)}: explore the graph "
            "composed for given shapes (model.recomposed({name: shape})) to see its kernels")
    elif compile:
        program = graph.compile(backend=backend, opts=opts, trace=True)  # its tabs show the trace
        tabs.update(_build_program(program, backends=backends, **options))
    else:
        tabs["Kernels"] = WholeGraphCompiler(graph, backend=backend, opts=opts, backends=backends, **options)
    tabs["Operations"] = widgets.HTML(model_html(graph))
    return tabs


class WholeGraphCompiler(widgets.VBox):
    """The Kernels tab of a big model's explorer: a button compiling the whole graph (with a
    progress bar over its operations), then the program's Graph, Pipeline, Kernels and Backends
    views in tabs of their own. ``panel.compile()`` does what the button does; ``panel.program``
    and ``panel.tabs`` are what it made."""

    def __init__(self, graph: Any, *, backend: str = "c", opts: Any = None,
                 backends: list[str] | None = None, **options: Any):
        self.graph, self.backend, self.opts = graph, backend, opts
        self.backends, self.options = backends, options
        self.program: Any = None
        self.tabs: dict[str, widgets.Widget] = {}
        self.button = widgets.Button(description=f"Compile the whole graph ({backend})", icon="cogs",
                                     layout=widgets.Layout(width="auto"))
        self.progress = widgets.IntProgress(value=0, min=0, max=max(len(graph.operations), 1),
                                            description="lowering", layout=widgets.Layout(display="none"))
        self.button.on_click(lambda _: self.compile())
        super().__init__([note(
            f"{len(graph.operations)} operations: the whole graph is compiled only on request (the Model "
            "tab lowers just the operation it opens)."), self.button, self.progress])

    def _report(self, done: int, total: int, operation: Any) -> None:
        self.progress.max = max(total, 1)
        self.progress.value = done
        self.progress.description = "compiling" if operation is None else "lowering"

    def compile(self) -> Any:
        """Compile the whole graph and show the program's views; the Program."""
        self.button.disabled = True
        self.progress.layout.display = ""
        self.program = self.graph.compile(backend=self.backend, opts=self.opts, progress=self._report,
                                          trace=True)  # the program's tabs show its trace
        self.tabs = _build_program(self.program, backends=self.backends, **self.options)
        inner = widgets.Tab(children=list(self.tabs.values()))
        for index, title in enumerate(self.tabs):
            inner.set_title(index, title)
        self.children = [inner]
        return self.program


register_explorer("UOp", lambda x: isinstance(x, UOp), _build_uop)
register_explorer("Trace", lambda x: isinstance(x, Trace), _build_trace)
register_explorer("Kernel", _is_kernel, _build_kernel)
register_explorer("Program", _is_program, _build_program)
register_explorer("Tensor", _is_tensor, _build_tensor)
register_explorer(
    "list of Tensors",
    lambda x: isinstance(x, list | tuple) and bool(x) and all(map(_is_tensor, x)),
    _build_tensor_list,
)
register_explorer("model graph", is_model_graph, _build_model)
