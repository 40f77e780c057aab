"""The rewrite player's data model: which pass, which step, and what that step looks like.

:class:`PlayerState` walks a :class:`uopviz.core.Trace` (a ``with uv.tracing()`` block or a
``Program.trace``).  Passes are listed depth first (a pipeline stage, then its passes) with their
step counts; passes that changed nothing can be hidden.  For the chosen step,
:meth:`PlayerState.frame` gives the graph right after it (``step.graph``) laid out, the nodes it
added or changed (a :func:`graph_diff` against the graph before it), the rule's name, its
``file:line`` and source line, and a unified diff of the printed graph (``str(uop)``).  Step 0 of
a pass is its input.  Laid-out graphs are cached by UOp, so going back and forth is cheap.

No widget code here: :class:`uopviz.widgets.views.RewritePlayer` draws these frames.
"""

from __future__ import annotations

import difflib
import linecache
import re
from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import networkx as nx

from uopviz.core.errors import UopvizError
from uopviz.core.ops import Ops
from uopviz.core.rewrite import PassTrace, RewriteStep, Trace
from uopviz.core.rewrite_explain import Explanation, explain
from uopviz.core.uop import UOp, UOpError
from uopviz.core.uop_printing import graph_lines, linear_lines
from uopviz.engine.provenance import KernelProvenance, lineage_of, source_provenance
from uopviz.widgets.graph import GraphDiff, graph_diff, layout, layout_many, node_key
from uopviz.widgets.highlight import highlight

PACKAGE_PARENT = Path(__file__).resolve().parent.parent.parent
#: How many laid-out graphs a player keeps (a step's graph and its predecessor's per frame).
LAYOUT_CACHE_SIZE = 64
#: Lines of the printed graphs beyond which the text diff is cut (it stays readable and fast).
DIFF_LINE_LIMIT = 400


#: Passes whose recorded name ends with the name of the kernel they work on.
KERNEL_PASS_PREFIXES = ("expand ", "linearize ", "render ", "parallel outputs ")


@dataclass(frozen=True)
class PassEntry:
    """One row of the pass list: the pass, its depth in the tree, its position and step count, and
    the kernel it works on ('' for a stage or a pass over the whole program)."""

    index: int
    depth: int
    record: PassTrace
    kernel: str = ""

    @property
    def name(self) -> str:
        """The pass's name as shown: as recorded, followed by its kernel's name when the recorded
        name does not say it (``index pushdown r_g4_R16``; a kernel's passes repeat per kernel)."""
        if not self.kernel or named_kernel(self.record.name):
            return self.record.name
        return f"{self.record.name} {self.kernel}"

    @property
    def rule_counts(self) -> list[tuple[str, int]]:
        """How many of this pass's steps each rule made, most first (they sum to the step count)."""
        return Counter(step.rule for step in self.record.steps).most_common()

    @property
    def step_rules(self) -> list[str]:
        """The rule of each step, in step order (step k is ``step_rules[k - 1]``)."""
        return [step.rule for step in self.record.steps]

    @property
    def step_count(self) -> int:
        """Steps recorded in this pass, nested passes included."""
        return len(self.record.steps)

    @property
    def changed(self) -> bool:
        """True when the pass rewrote anything."""
        return self.record.changed


#: What marks a backend's source text (the language to highlight it in), checked in this order;
#: C is what is left (its ``#define`` lines do not start with ``define``).
SOURCE_MARKERS = (("llvm", re.compile(r"^define ", re.MULTILINE)), ("cuda", re.compile(r"__global__")),
                  ("opencl", re.compile(r"__kernel")), ("python", re.compile(r"^def ", re.MULTILINE)))


def source_language(text: str) -> str:
    """The backend whose language ``text`` is written in, from what marks it (:data:`SOURCE_MARKERS`),
    for a trace whose backend is not known (highlighting only)."""
    return next((backend for backend, marker in SOURCE_MARKERS if marker.search(text)), "c")


@dataclass(frozen=True)
class KernelSource:
    """A rendered kernel as a frame shows it: the kernel's name, the backend, the whole source text
    and that text highlighted (HTML); ``linear`` is the LINEAR program it was rendered from, and
    ``provenance`` (:func:`provenance_json`) what each line came from, once a player has asked."""

    kernel: str
    backend: str
    text: str
    html: str
    linear: UOp | None = field(default=None, compare=False, repr=False)
    provenance: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        """The source as the front end shows it."""
        shown: dict[str, Any] = {"kernel": self.kernel, "backend": self.backend, "html": self.html}
        if self.provenance is not None:
            shown["provenance"] = self.provenance
        return shown  # the html holds the text


def provenance_json(provenance: KernelProvenance) -> dict[str, Any]:
    """A kernel's line provenance as the player's front end reads it, small: ``lines`` holds
    ``[line, node key, creator, origin]`` per line that holds an instruction, the last two indices
    into ``creators`` (``{text, pass_index, step}``: the player frame of the step that created the
    node) and ``origins`` (texts), each listed once; ``note`` says why a source has no lines."""
    creators: dict[Any, int] = {}
    origins: dict[str, int] = {}
    lines = []
    for entry in provenance.lines:
        creator = entry.creator
        made = -1
        if creator is not None:
            made = creators.setdefault(creator, len(creators))
        came = origins.setdefault(entry.origin.describe(), len(origins)) if entry.origin is not None else -1
        lines.append([entry.line, node_key(entry.uop), made, came])
    return {
        "lines": lines,
        "creators": [{"text": c.describe(), "pass_index": c.pass_index, "step": c.step} for c in creators],
        "origins": list(origins),
        "note": provenance.note,
    }


@dataclass(frozen=True)
class KernelListing:
    """A LINEAR program as a frame shows it: the kernel's name and one line per instruction
    (:func:`uopviz.core.uop_printing.linear_lines`)."""

    kernel: str
    lines: list[str]

    def to_json(self) -> dict[str, Any]:
        """The listing as the front end shows it."""
        return {"kernel": self.kernel, "lines": self.lines}


def kernel_sources(
    root: UOp, backend: str | None = None, order: list[UOp] | None = None
) -> list[KernelSource]:
    """The rendered kernels in ``root`` (each ``PROGRAM(LINEAR, SOURCE)`` once, in program order),
    highlighted for ``backend`` (None: guessed from each text, :func:`source_language`).  ``order``:
    ``root.toposort()`` when the caller has it (a frame walks its graph once for all its texts)."""
    found = []
    for u in root.toposort() if order is None else order:
        if u.op is Ops.PROGRAM and len(u.src) == 2 and u.src[1].op is Ops.SOURCE:
            text = str(u.src[1].arg)
            language = backend or source_language(text)
            html = highlight(text, language)  # the fast highlighter: a Render frame stays quick and small
            found.append(KernelSource(str(u.src[0].arg), language, text, html, u.src[0]))
    return found


def kernel_listings(root: UOp, order: list[UOp] | None = None) -> list[KernelListing]:
    """The LINEAR programs in ``root`` not yet rendered (a rendered one shows as its source), each
    as a listing, in program order.  ``order``: ``root.toposort()`` when the caller has it."""
    order = root.toposort() if order is None else order
    rendered = {u.src[0] for u in order if u.op is Ops.PROGRAM and u.src}
    return [KernelListing(str(u.arg), linear_lines(u)) for u in order
            if u.op is Ops.LINEAR and u not in rendered]


def named_kernel(pass_name: str) -> str:
    """The kernel a pass's recorded name ends with (:data:`KERNEL_PASS_PREFIXES`), else ''."""
    prefix = next((p for p in KERNEL_PASS_PREFIXES if pass_name.startswith(p)), "")
    return pass_name[len(prefix):] if prefix else ""


def pass_kernels(entries: list[PassEntry]) -> list[str]:
    """The kernel each nested pass works on ('' for stages and whole-program passes), by following
    the graphs: a pass whose output is the input of a later pass works on that pass's kernel, so
    the names the last stages give (``linearize r_g4_R16``) reach back to the passes that built the
    kernel (Rangeify's ``index pushdown``, Instruction Selection's ``accumulators``).  A pass whose
    output no pass takes (``output address``, whose result the next pass builds on) takes the
    kernel of the pass after it under the same parent."""
    users: dict[int, list[int]] = {}
    for entry in entries:
        if entry.depth and entry.record.input is not None:
            users.setdefault(id(entry.record.input), []).append(entry.index)
    kernels = [""] * len(entries)
    for entry in reversed(entries):
        if not entry.depth:
            continue
        output = entry.record.output
        taken_by = [i for i in users.get(id(output), []) if i != entry.index] if output is not None else []
        found = next((kernels[i] for i in taken_by if kernels[i]), "") or named_kernel(entry.record.name)
        if not found and not taken_by:
            sibling = next((e for e in entries[entry.index + 1:] if e.depth <= entry.depth), None)
            if sibling is not None and sibling.depth == entry.depth:
                found = kernels[sibling.index]
        kernels[entry.index] = found
    return kernels


def source_line(location: str) -> str:
    """The line of code at ``location`` (``path:line``; package paths relative to the checkout),
    stripped; '' when the file cannot be read."""
    path, _, line = location.rpartition(":")
    if not path or not line.isdigit():
        return ""
    for candidate in _source_candidates(Path(path)):
        text = linecache.getline(str(candidate), int(line))
        if text:
            return text.strip()
    return ""


def _source_candidates(path: Path) -> Iterator[Path]:
    """Where a location's file may be: itself when absolute, else in the checkout, then in the working
    directory (asked only when the checkout has no such line: ``Path.cwd()`` is a system call, slow on
    some file systems, and a report looks up the line of each of hundreds of steps)."""
    if path.is_absolute():
        yield path
        return
    yield PACKAGE_PARENT / path
    yield Path.cwd() / path


def text_diff(before: str, after: str, context: int = 2) -> list[str]:
    """The unified diff of two printed graphs, as lines (headers dropped)."""
    return _unified(before.splitlines(), after.splitlines(), context)


def _unified(a: list[str], b: list[str], context: int = 2) -> list[str]:
    lines = list(difflib.unified_diff(a[:DIFF_LINE_LIMIT], b[:DIFF_LINE_LIMIT], lineterm="", n=context))
    return [line for line in lines if not line.startswith(("---", "+++"))]


def printed_graph(
    root: UOp, names: Mapping[UOp, str] | None = None, first_new: int = 0
) -> tuple[list[str], dict[UOp, str]]:
    """``root`` printed as :func:`uopviz.core.uop_printing.format_graph` prints it, with each node's tag,
    and the name each line's UOp got; ``names`` fixes the names of some UOps (those of the graph
    before a step), the others are numbered from ``first_new`` (:func:`uopviz.core.uop_printing.graph_lines`).
    So a graph printed with the names of the graph before it differs only where a node really
    changed, not in the numbers of every node after it."""
    return graph_lines(root, names, first_new, tags=True)


def aligned_text_diff(before: UOp, after: UOp, pairs: Mapping[UOp, UOp] | None = None,
                      context: int = 2) -> list[str]:
    """The unified diff of two printed graphs where a node keeps its name across them: a UOp in both
    graphs, or one of ``after`` paired with one of ``before`` (``{after node: before node}``, a
    rebuilt node that kept its place: :attr:`GraphDiff.changed`), prints under the name it had before;
    new nodes get new numbers.  Only lines of really changed nodes differ."""
    before_lines, before_names = printed_graph(before)
    names = dict(before_names)
    for new, old in (pairs or {}).items():
        if old in before_names:
            names[new] = before_names[old]
    numbered = sum(1 for name in before_names.values() if name.startswith("%"))
    after_lines, _ = printed_graph(after, names, first_new=numbered)
    return _unified(before_lines, after_lines, context)


class PlayerState:
    """Where the player is in a trace, and the frames it shows.

    ``pass_index`` indexes :attr:`entries` (every pass, nested ones included); ``step`` runs from 0
    (the pass's input) to the pass's step count.  Setting either clamps it into range.
    """

    def __init__(
        self, trace: Trace, *, hide_unchanged: bool = True, engine: str = "auto", fold_constants: bool = True,
        backend: str | None = None,
    ):
        if not isinstance(trace, Trace):
            raise TypeError(f"PlayerState needs a uopviz Trace, got {type(trace).__name__}")
        self.trace = trace
        self.hide_unchanged = hide_unchanged
        self.engine = engine
        self.fold_constants = fold_constants
        #: the backend the trace's kernels were rendered for (None: guessed from each source)
        self.backend = backend
        self.entries: list[PassEntry] = []
        for top in trace.passes:
            self._add(top, 0)
        self.entries = [replace(entry, kernel=kernel)
                        for entry, kernel in zip(self.entries, pass_kernels(self.entries), strict=True)]
        self._layouts: OrderedDict[int, tuple[UOp, nx.DiGraph]] = OrderedDict()
        self._preloaded: dict[int, tuple[UOp, nx.DiGraph]] = {}
        self._replay_errors: dict[int, str] = {}
        self._provenance: dict[tuple[int, str], tuple[UOp, dict[str, Any]]] = {}
        self._pass_index = self._first_pass()
        self._step = 0
        if self.entries and self.current.step_count:
            self.move_to(1)

    def _add(self, record: PassTrace, depth: int) -> None:
        self.entries.append(PassEntry(len(self.entries), depth, record))
        for child in record.passes:
            self._add(child, depth + 1)

    def _first_pass(self) -> int:
        for entry in self.entries:
            if entry.step_count:
                return entry.index
        return 0

    # -- position ------------------------------------------------------------------------------
    @property
    def visible_entries(self) -> list[PassEntry]:
        """The pass list as shown: every pass, or only those that changed something."""
        return [e for e in self.entries if e.changed or not self.hide_unchanged]

    @property
    def current(self) -> PassEntry:
        """The chosen pass."""
        if not self.entries:
            raise ValueError("the trace recorded no passes: run graph_rewrite inside `with uv.tracing()`")
        return self.entries[self._pass_index]

    @property
    def pass_index(self) -> int:
        """Index of the chosen pass in :attr:`entries`."""
        return self._pass_index

    @pass_index.setter
    def pass_index(self, value: int) -> None:
        if not self.entries:
            raise ValueError("the trace recorded no passes")
        self._pass_index = max(0, min(int(value), len(self.entries) - 1))
        self._step = min(self._step, self.current.step_count)

    @property
    def step(self) -> int:
        """The chosen step: 0 is the pass's input, k the graph after the k-th step."""
        return self._step

    @step.setter
    def step(self, value: int) -> None:
        self._step = max(0, min(int(value), self.current.step_count))

    def select(self, pass_index: int | str, step: int | None = None) -> None:
        """Choose a pass (by index, or by name as shown or as recorded: the first of that name) and a
        step (default: its first step)."""
        if isinstance(pass_index, str):
            matches = [e.index for e in self.entries if pass_index in (e.name, e.record.name)]
            if not matches:
                raise KeyError(f"no pass named {pass_index!r}; passes: {[e.name for e in self.entries]}")
            pass_index = matches[0]
        self.pass_index = pass_index
        if step is None:
            self._step = 0
            self.move_to(1 if self.current.step_count else 0)
        else:
            self.step = step

    def next(self) -> None:
        """One step forward (stays at the last step); with ``hide_unchanged``, past steps that
        changed nothing."""
        self.move_to(self._step + 1)

    def previous(self) -> None:
        """One step back (stays at the input); with ``hide_unchanged``, past steps that changed
        nothing."""
        self.move_to(self._step - 1)

    def move_to(self, step: int) -> None:
        """Go to ``step``; with ``hide_unchanged``, a step that changed nothing (:meth:`is_empty`) is
        passed over in the direction of travel (or, at the end of the pass, back to the nearest
        step that changed something)."""
        direction = 1 if step >= self._step else -1
        self.step = step
        if not self.hide_unchanged or not self.is_empty(self._step):
            return
        count = self.current.step_count
        for candidate in (*range(self._step + direction, count + 1 if direction > 0 else 0, direction),
                          *range(self._step - direction, 0 if direction > 0 else count + 1, -direction)):
            if not self.is_empty(candidate):
                self.step = candidate
                return

    def is_empty(self, step: int | None = None) -> bool:
        """True when ``step`` left the shown graph exactly as it was (the same UOp before and after:
        Expand's last ``keep`` rebuilds the SINK the graph already shows).  Step 0 is never empty."""
        record = self.step_record(step)
        if record is None:
            return False
        before, after = self.graph_before(record), self.whole_graph(record)
        if before is None or after is None or id(record) in self._replay_errors:
            return record.before is record.after
        return before is after

    # -- graphs ----------------------------------------------------------------------------
    def step_record(self, step: int | None = None) -> RewriteStep | None:
        """The RewriteStep shown at ``step`` (None for step 0, the input)."""
        step = self._step if step is None else step
        return self.current.record.steps[step - 1] if step > 0 else None

    def graph_before(self, step_record: RewriteStep) -> UOp | None:
        """The chosen pass's whole graph just before the step (None when it cannot be rebuilt)."""
        try:
            graph = self.current.record.graph_before(step_record)
        except UOpError as error:
            self._replay_errors[id(step_record)] = str(error)
            return None
        return graph if graph is not None else step_record.before

    def whole_graph(self, step_record: RewriteStep) -> UOp | None:
        """The chosen pass's whole graph right after the step (``PassTrace.graph_after``: a stage
        shows the whole program, a nested pass its own graph), or None when it cannot be built.

        Every pass of the pipeline replays: rule steps by substitution, steps recorded by hand
        once, and Expand's node-by-node steps from the whole graphs it records.  A trace made by
        other code can hold a hand-recorded step whose substitution is ill-typed (it changes a
        value's dtype under users it did not rebuild); building that graph raises
        :class:`UOpError`, and the player then shows the step locally.
        """
        try:
            return self.current.record.graph_after(step_record)
        except UOpError as error:
            self._replay_errors[id(step_record)] = str(error)
            return None

    def uop_at(self, step: int | None = None) -> UOp:
        """The graph shown at ``step``: the pass's input at 0, else the graph after that step."""
        record = self.step_record(step)
        if record is None:
            entry = self.current.record
            if entry.input is not None:
                return entry.input
            if entry.output is not None:
                return entry.output
            raise ValueError(f"pass {entry.name!r} recorded no input graph")
        whole = self.whole_graph(record)
        return whole if whole is not None else record.after

    def layouts_of(self, uops: Iterable[UOp]) -> list[tuple[UOp, nx.DiGraph]]:
        """Each distinct graph of ``uops`` laid out as :meth:`laid_out` would, many at once
        (:func:`uopviz.widgets.graph.layout_many`: batched ``dot``); changes nothing here, so it
        can run in another thread while this player makes frames."""
        distinct = list({id(uop): uop for uop in uops}.values())
        graphs = layout_many(distinct, engine=self.engine, fold_constants=self.fold_constants)
        return list(zip(distinct, graphs, strict=True))

    def preload(self, uops: Iterable[UOp], laid_out: list[tuple[UOp, nx.DiGraph]] | None = None) -> None:
        """Keep layouts for :meth:`laid_out` until :meth:`forget_preloaded`: ``laid_out`` (from
        :meth:`layouts_of`), or those of ``uops`` made now.  What embeds many frames lays out the
        graphs of the next few hundred first."""
        for uop, graph in laid_out if laid_out is not None else self.layouts_of(uops):
            self._preloaded[id(uop)] = (uop, graph)

    def forget_preloaded(self) -> None:
        """Drop the layouts :meth:`preload` made (they are large; the LRU cache keeps recent ones)."""
        self._preloaded.clear()

    def laid_out(self, uop: UOp) -> nx.DiGraph:
        """The layout of ``uop`` (cached)."""
        preloaded = self._preloaded.get(id(uop))
        if preloaded is not None and preloaded[0] is uop:
            return preloaded[1]
        cached = self._layouts.get(id(uop))
        if cached is not None and cached[0] is uop:
            self._layouts.move_to_end(id(uop))
            return cached[1]
        graph = layout(uop, engine=self.engine, fold_constants=self.fold_constants)
        self._layouts[id(uop)] = (uop, graph)
        while len(self._layouts) > LAYOUT_CACHE_SIZE:
            self._layouts.popitem(last=False)
        return graph

    def frame(self) -> Frame:
        """Everything the player shows for the current pass and step."""
        entry = self.current
        record = self.step_record()
        after = self.uop_at()
        graph = self.laid_out(after)
        order = after.toposort()
        sources = [self.with_provenance(source) for source in kernel_sources(after, self.backend, order)]
        texts = {"sources": sources, "listings": kernel_listings(after, order)}
        if record is None:
            return Frame(entry, 0, graph, None, None, "", "", "", [], after, **texts)
        before = self.graph_before(record)
        note = ""
        if before is None or id(record) in self._replay_errors:
            # the whole graph around this step cannot be rebuilt: show the step locally
            before, after = record.before, record.after
            graph = self.laid_out(after)
            reason = self._replay_errors.get(id(record), "")
            note = ("the whole graph cannot be rebuilt at this step (a step recorded by hand changes a "
                    "value's dtype under users it did not rebuild), so this shows what matched and what "
                    f"replaced it; replaying gives: {reason}")
        before_graph = self.laid_out(before)
        diff = graph_diff(before_graph, graph)
        focus = node_key(record.after) if node_key(record.after) in graph else None
        pairs = {graph.nodes[new]["uop"]: before_graph.nodes[old]["uop"] for new, old in diff.changed.items()}
        lines = aligned_text_diff(before, after, pairs)
        return Frame(entry, self._step, graph, diff, focus, record.rule, record.location,
                     source_line(record.location), lines, after, note,
                     explanation=_explain(before, after, pairs, lines), scope=self.scope(record),
                     empty=before is after, **texts)

    def shown_uop(self) -> UOp:
        """The graph the current frame draws (:meth:`frame`'s ``uop``) without building the frame:
        the whole graph after the step, or the step's own ``after`` where that cannot be rebuilt."""
        shown = self.uop_at()
        record = self.step_record()
        if record is not None and (self.graph_before(record) is None or id(record) in self._replay_errors):
            return record.after
        return shown

    def why_not(self, key: str) -> WhyNot:
        """Why no rule (or which rule) of the chosen pass rewrites the node ``key`` of the current
        frame's graph: each rule set the pass (a stage: its nested passes) rewrote with, tried on
        that node (:func:`uopviz.core.rewrite_explain.explain`; the passes' contexts are not kept, so
        rules that need one say so)."""
        node = self.laid_out(self.shown_uop()).nodes.get(key)
        if node is None or "uop" not in node:
            raise KeyError(f"no node {key!r} in the graph of {self.current.name!r} at step {self.step}")
        entry = self.current
        matchers = entry.record.matchers()
        explanations = [explain(matcher, node["uop"]) for matcher in matchers]
        note = "" if matchers else (
            f"{entry.name} rewrites without pattern rules (its steps are recorded by hand), so there are "
            "no rules to try on this node")
        return WhyNot(key, entry.name, node["uop"].op.name, explanations, note)

    def with_provenance(self, source: KernelSource) -> KernelSource:
        """``source`` with what each of its lines came from (:mod:`uopviz.engine.provenance`: the
        instruction, the step that created it and the user's operation), worked out once per
        kernel and backend."""
        if source.linear is None:
            return source
        key = (id(source.linear), source.backend)
        cached = self._provenance.get(key)
        if cached is None or cached[0] is not source.linear:
            try:
                found = provenance_json(source_provenance(lineage_of(self.trace), source.linear, source.text,
                                                          source.backend))
            except (UopvizError, KeyError) as error:  # a backend that is not registered, a source it rejects
                found = {"lines": [], "creators": [], "origins": [], "note": f"no provenance: {error}"}
            cached = self._provenance[key] = (source.linear, found)
        return replace(source, provenance=cached[1])

    def scope(self, step_record: RewriteStep) -> str:
        """'' when the step is shown in the chosen pass's own graph; else a line saying, in plain
        words, which graph the frame shows: a step made while a rule of the chosen pass was building
        a kernel (Rangeify builds each kernel body with ``index pushdown``) is shown in that kernel as
        built so far, not in the whole program, which shows again at a later step."""
        record = self.current.record
        shown = record.shown_pass(step_record)
        if shown is record:
            return ""
        entry = next((e for e in self.entries if e.record is shown), None)
        kernel = entry.kernel if entry is not None else ""
        label = entry.name if entry is not None else shown.name
        back = next((k for k in range(self._step + 1, len(record.steps) + 1)
                     if record.shown_pass(record.steps[k - 1]) is record), None)
        again = (f"; the whole program shows again at step {back} ({record.steps[back - 1].rule})"
                 if back is not None else "")
        if kernel:
            return (f"this step rewrote kernel {kernel} while {record.name} was building it "
                    f"(pass {label!r}); the graph shows that kernel as built so far, not the whole "
                    f"program{again}")
        return (f"this step rewrote a part of the program while {record.name} was building it (pass "
                f"{label!r}); the graph shows that part, not the whole program{again}")


def _explain(before: UOp, after: UOp, pairs: Mapping[UOp, UOp], lines: list[str]) -> str:
    """Why the printed diff is empty, when it is: the step changed nothing, or what it changed that
    the print does not show ('' when the printed diff shows the change)."""
    if lines:
        return ""
    if before is after:
        return "this step changed nothing: the graph after it is the graph before it"
    changes = []
    for new, old in pairs.items():
        fields = [name for name in ("arg", "tag", "dtype", "shape")
                  if getattr(new, name) != getattr(old, name)]
        if fields:
            changes.append(f"{new.op.name} ({', '.join(fields)})")
    if changes:
        return "the print looks the same; changed beyond what it shows: " + ", ".join(changes[:6])
    return "the print looks the same: the step rebuilt nodes with equal lines (the same op, arg and sources)"


@dataclass
class Frame:
    """One step as shown: the pass, the step number, the laid-out graph after it, its diff with
    the graph before (None at step 0), the node that replaced the match (``focus``), the rule's
    name, location and code line, the printed-graph diff lines, a ``note`` when the step is
    shown locally (the whole graph could not be rebuilt there), an ``explanation`` when the printed
    diff is empty (what changed, or that nothing did), a ``scope`` line when the graph shown is a
    nested pass's own graph rather than the chosen pass's whole graph, and ``empty`` when the step
    left the graph as it was (players pass over it while hiding what changed nothing).  ``sources``:
    the rendered kernels in the graph (Render), ``listings``: its LINEAR programs not yet rendered
    (Linearize), each shown as text beside the graph."""

    entry: PassEntry
    step: int
    graph: nx.DiGraph
    diff: GraphDiff | None
    focus: str | None
    rule: str
    location: str
    code: str
    diff_lines: list[str]
    uop: UOp
    note: str = ""
    explanation: str = ""
    scope: str = ""
    empty: bool = False
    sources: list[KernelSource] = field(default_factory=list)
    listings: list[KernelListing] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The frame as the front end's player draws it."""
        from uopviz.widgets.serialize import graph_json, marks_json

        return {
            "pass_index": self.entry.index,
            "pass_name": self.entry.name,
            "step": self.step,
            "step_count": self.entry.step_count,
            "graph": graph_json(self.graph),
            "marks": marks_json(self.diff, self.focus, self.graph),
            "rule": self.rule,
            "location": self.location,
            "code": self.code,
            "diff": self.diff_lines,
            "summary": self.diff.summary() if self.diff else "",
            "note": self.note,
            "explanation": self.explanation,
            "scope": self.scope,
            "empty": self.empty,
            "sources": [source.to_json() for source in self.sources],
            "listings": [listing.to_json() for listing in self.listings],
        }


@dataclass
class WhyNot:
    """What the player's "Why didn't a rule fire?" section shows for a selected node: its key, the
    pass, the node's op, one :class:`~uopviz.core.rewrite_explain.Explanation` per rule set of the
    pass, and a ``note`` when the pass has no rule sets."""

    key: str
    pass_name: str
    op: str
    explanations: list[Explanation]
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        """The section as the front end shows it."""
        return {"key": self.key, "pass_name": self.pass_name, "op": self.op, "note": self.note,
                "explanations": [explanation.to_json() for explanation in self.explanations]}
