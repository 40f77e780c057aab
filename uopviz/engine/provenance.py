"""Provenance, end to end: each line of a kernel's generated source → the instruction it was written
for → the rewrite step that created that UOp → the user-level operation it descends from.

* The backend's :meth:`~uopviz.backends.base.Backend.render_mapped` says which instruction of the
  LINEAR program each line was written for (:class:`~uopviz.backends.base.SourceMap`).
* :class:`Lineage` reads a lowering's trace once, in the order things happened, and notes for every
  UOp the first thing that built it: a rewrite step (its pass, rule, ``file:line`` and where the
  player shows it: pass index and step number), a pass that built it outside any rule (named, never
  blank), or the program as given to the first pass.  That is exact.  A node a step created
  descends from the node that step replaced (``step.before``; the operation an INDEX was pushed
  below); a node rebuilt outside a rule (a pass's, graph_rewrite's, a rule's copy of a kernel)
  from its counterpart: the earlier node alike whose sources its sources descend from (structural,
  so approximate where two such nodes are alike).
* Following that descent back reaches a node of the user's graph, whose origin the front end
  recorded (:mod:`uopviz.core.origins`): the Tensor method, or the NNEF operation.  An instruction
  whose descent reaches none (a loop, an index) takes the origin of the instructions using it.

:func:`kernel_provenance` puts the three together for one kernel of a compiled program, and
:func:`source_provenance` for a ``PROGRAM(LINEAR, SOURCE)`` node a player shows.
"""

from __future__ import annotations

import weakref
from collections import deque
from dataclasses import dataclass
from typing import Any

from uopviz.backends import get
from uopviz.backends.base import SourceMap
from uopviz.core.ops import Ops
from uopviz.core.origins import Origin, origin_of, origins_of
from uopviz.core.rewrite import PassTrace, Trace
from uopviz.core.uop import UOp

#: How many nodes the search for an origin through a node's sources looks at, at most (a node a
#: pass built outside any rule names the origin of the nearest source that has one).
ORIGIN_SEARCH_LIMIT = 20_000


@dataclass(frozen=True)
class Creator:
    """What first built a UOp during a lowering.

    ``kind`` is ``"step"`` (a rewrite step: ``rule`` and ``location`` name the rule, ``step`` is its
    number in pass ``pass_index``, as the rewrite player counts them), ``"pass"`` (the pass built it
    outside any named rule: ``step`` is 0) or ``"given"`` (it was in the input of the pass, the
    program as given)."""

    kind: str
    pass_name: str
    pass_index: int
    step: int = 0
    rule: str = ""
    location: str = ""

    def describe(self) -> str:
        """In plain words: ``rule 'x' (file:line), step 3 of pass 'p'``."""
        if self.kind == "step":
            return f"rule {self.rule!r} ({self.location}), step {self.step} of pass {self.pass_name!r}"
        if self.kind == "pass":
            return f"built by pass {self.pass_name!r} outside a named rule"
        return f"in the program given to pass {self.pass_name!r}"

    def to_json(self) -> dict[str, Any]:
        """The creator as the front end shows it (``pass_index`` and ``step`` are a player frame)."""
        return {"kind": self.kind, "pass": self.pass_name, "pass_index": self.pass_index,
                "step": self.step, "rule": self.rule, "location": self.location, "text": self.describe()}


class Lineage:
    """Every UOp of a traced lowering with what first built it and the node it replaced.

    Built once per trace (:func:`lineage_of` keeps it): the passes are walked depth first, as the
    rewrite player lists them, and within a pass its own steps and its nested passes in the order
    they ran.  A pass that recorded no steps is taken where it comes among its siblings."""

    def __init__(self, trace: Trace):
        self.passes: list[PassTrace] = list(trace.walk())
        self._pass_index = {id(record): index for index, record in enumerate(self.passes)}
        # id(uop) -> (uop, creator); the uop is kept so that its id stays its own
        self._created: dict[int, tuple[UOp, Creator]] = {}
        self._replaced: dict[int, UOp] = {}
        # id(uop) -> the nodes seen so far that use it (where a rebuilt node's counterpart is looked for)
        self._users: dict[int, list[UOp]] = {}
        self._files: set[str] | None = None
        for record in trace.passes:
            self._walk(record, None)

    # -- reading the trace ---------------------------------------------------------------------
    def _walk(self, record: PassTrace, parent: PassTrace | None) -> None:
        index = self._pass_index[id(record)]
        if record.input is not None:
            # what a nested pass is given first, the pass around it built (in a rule's code)
            given = (Creator("given", record.name, index) if parent is None
                     else Creator("pass", parent.name, self._pass_index[id(parent)]))
            self._visit(record.input, given, None)
        position = {id(step): number for number, step in enumerate(record.steps)}
        done = 0
        for child in record.passes:
            if child.steps:
                start = position[id(child.steps[0])]
                self._steps(record, index, done, start)
                self._walk(child, record)
                done = start + len(child.steps)
            else:
                self._walk(child, record)
        self._steps(record, index, done, len(record.steps))
        if record.output is not None:
            # what the pass built outside its rules descends from its input (the output's root at least)
            self._visit(record.output, Creator("pass", record.name, index), None, record.input)

    def _steps(self, record: PassTrace, index: int, start: int, stop: int) -> None:
        for number in range(start, stop):
            step = record.steps[number]
            self._visit(step.before, Creator("pass", record.name, index), None)
            creator = Creator("step", record.name, index, number + 1, step.rule, step.location)
            self._visit(step.after, creator, _pushed_through(step.before, step.after))

    def _visit(self, root: UOp, creator: Creator, before: UOp | None, fallback: UOp | None = None) -> None:
        """Note ``creator`` for every node under ``root`` not seen before (its sources were seen
        when it was, so the walk stops at a seen node), each as descending from ``before``; a node
        with no ``before`` (a pass built it outside a rule, or graph_rewrite rebuilt it over new
        sources before a rule fired on it) descends from its counterpart (:meth:`_counterpart`).
        Sources are noted before the nodes that use them, so that a counterpart can be found; a
        ``root`` without one descends from ``fallback`` (a pass's output from its input)."""
        created, replaced, users = self._created, self._replaced, self._users
        stack: list[tuple[UOp, bool]] = [(root, False)]
        while stack:
            node, sources_done = stack.pop()
            if id(node) in created:
                continue
            if not sources_done:
                stack.append((node, True))
                stack.extend((source, False) for source in node.src if id(source) not in created)
                continue
            created[id(node)] = (node, creator)
            if node is not root and before is not None:
                # a node a rule built under its result: a copy of one it rebuilt over new sources
                # (a rule on a whole kernel), else part of what replaced ``before``
                counterpart = self._counterpart(node, complete=True)
                replaced[id(node)] = before if counterpart is None else counterpart
            elif before is not None and node is not before:
                replaced[id(node)] = before
            elif creator.kind != "given":  # the program as given is the user's own graph
                counterpart = self._counterpart(node)
                if counterpart is None and node is root:
                    counterpart = fallback
                if counterpart is not None and counterpart is not node:
                    replaced[id(node)] = counterpart
            for source in node.src:
                users.setdefault(id(source), []).append(node)

    def _counterpart(self, node: UOp, complete: bool = False) -> UOp | None:
        """The node seen earlier that ``node`` stands for, when it is a rebuilt copy: one with the
        same op, arg and element type (Expand widens it into lanes) that uses what ``node``'s sources
        descend from, the one that shares the most of them (the earliest of equals); ``complete``:
        only one that shares them all, each in its place (a copy a rule rebuilt keeps their order)."""
        best, best_shared = None, len(node.src) - 1 if complete else 0
        element = node.dtype.scalar
        # what each source descends from (itself included), by id: worked out once per node
        descends = [self.ancestors(source) for source in node.src]
        lines = [{id(original) for original in chain} for chain in descends]
        # a constant is shared by everything: it pairs only a node with no other source (a loop's RANGE)
        searched = [chain for chain in descends if chain[0].op is not Ops.CONST] or descends
        tried: set[int] = set()
        for chain in searched:
            for original in chain:
                for candidate in self._users.get(id(original), ()):
                    if (id(candidate) in tried or candidate is node or candidate.op is not node.op
                            or not _same_arg(candidate, node) or candidate.dtype.scalar != element):
                        continue
                    tried.add(id(candidate))
                    shared = _shared_sources(lines, candidate, ordered=complete)
                    if shared > best_shared:
                        best, best_shared = candidate, shared
        return best

    # -- questions -----------------------------------------------------------------------------
    def creator(self, uop: UOp) -> Creator | None:
        """What first built ``uop`` in this lowering (None: the trace never showed it)."""
        found = self._created.get(id(uop))
        return found[1] if found is not None and found[0] is uop else None

    def ancestors(self, uop: UOp) -> list[UOp]:
        """``uop``, the node the step that created it replaced, that node's, and so on back to a
        node of the program as given."""
        chain, seen = [uop], {id(uop)}
        while True:
            before = self._replaced.get(id(chain[-1]))
            if before is None or id(before) in seen:
                return chain
            chain.append(before)
            seen.add(id(before))

    def owns(self, origin: Origin | None) -> bool:
        """True when ``origin`` is one of this lowering's.  A node shared with another program
        (hash-consed: a loop's RANGE, a constant) may carry that program's origin: a Tensor method's
        is this program's when what the call returned is in the trace (this program's graph holds
        it, so it is alive while the trace is).  An NNEF operation's kernels are rebuilt (fused,
        padded) before the pipeline sees them, so its origin is this program's when it comes from
        a model file whose kernels are in the trace."""
        if origin is None:
            return False
        if self._returned_here(origin):
            return True
        return origin.kind == "nnef" and _model_file(origin) in self._model_files()

    def _model_files(self) -> set[str]:
        """The NNEF model files whose operations' kernels this lowering compiled (worked out once)."""
        if self._files is None:
            found = (origin for node, _ in self._created.values() for origin in origins_of(node))
            self._files = {_model_file(origin) for origin in found
                           if origin.kind == "nnef" and self._returned_here(origin)}
        return self._files

    def _returned_here(self, origin: Origin) -> bool:
        """True when something the recorded call returned is in this lowering's trace."""
        return any(self.creator(root) is not None for root in origin.returned())

    def own_origin(self, uop: UOp) -> Origin | None:
        """The first origin of this lowering's along ``uop``'s :meth:`ancestors` (None: the chain
        reaches no node the user built, as for a loop's RANGE made from a shape)."""
        # the latest first: of two programs alike (a graph loaded twice), the one compiled last
        candidates = (origin for ancestor in self.ancestors(uop) for origin in reversed(origins_of(ancestor)))
        return next((origin for origin in candidates if self.owns(origin)), None)

    def origin(self, uop: UOp) -> Origin | None:
        """The user-level operation ``uop`` descends from: its :meth:`own_origin`; else the nearest
        origin among the sources of the nodes along its ancestors, breadth first."""
        queue, seen = deque([uop]), set()
        while queue and len(seen) < ORIGIN_SEARCH_LIMIT:
            node = queue.popleft()
            if id(node) in seen:
                continue
            seen.add(id(node))
            found = self.own_origin(node)
            if found is not None:
                return found
            queue.extend(source for ancestor in self.ancestors(node) for source in ancestor.src)
        return None


def _shared_sources(lines: list[set[int]], candidate: UOp, ordered: bool) -> int:
    """How many of a node's sources (``lines``: the ids of what each descends from) descend from a
    source of ``candidate``; ``ordered``: from the source in the same place."""
    if not ordered:
        theirs = {id(source) for source in candidate.src}
        return sum(not line.isdisjoint(theirs) for line in lines)
    if len(lines) != len(candidate.src):
        return 0
    return sum(id(theirs) in line for line, theirs in zip(lines, candidate.src, strict=True))


def _same_arg(candidate: UOp, node: UOp) -> bool:
    """True when ``node``'s arg is ``candidate``'s, a loop's kind aside: the optimizer turns a LOOP
    range into a GLOBAL one, the same loop (its axis number)."""
    if node.op is Ops.RANGE and isinstance(node.arg, tuple) and isinstance(candidate.arg, tuple):
        return node.arg[:1] == candidate.arg[:1]
    return candidate.arg == node.arg


def _pushed_through(before: UOp, after: UOp) -> UOp:
    """What a step's ``after`` descends from: ``before``, or, where Rangeify's index pushdown moved
    an INDEX below the operation it indexed (``INDEX(MAX(a, b), i)`` → ``MAX(INDEX(a, i), INDEX(b, i))``),
    that operation: the kernel's MAX is the tensor graph's MAX, computed at one index."""
    if before.op is Ops.INDEX and before.src and before.src[0].op is after.op and after.op is not Ops.INDEX:
        return before.src[0]
    return before


def _model_file(origin: Origin) -> str:
    """The model file an NNEF origin's ``file:line`` names."""
    return origin.location.rpartition(":")[0]


_lineages: weakref.WeakKeyDictionary[Trace, Lineage] = weakref.WeakKeyDictionary()


def lineage_of(trace: Trace) -> Lineage:
    """The :class:`Lineage` of ``trace`` (made once, kept while the trace lives)."""
    found = _lineages.get(trace)
    if found is None:
        found = _lineages[trace] = Lineage(trace)
    return found


# ---------------------------------------------------------------------------------------------
# kernels


@dataclass(frozen=True)
class LineProvenance:
    """One line of generated source: its number (1-based) and text, the instruction it was written
    for (its position in the LINEAR program and the UOp), what created that UOp and its origin."""

    line: int
    text: str
    position: int
    uop: UOp
    creator: Creator | None
    origin: Origin | None

    def describe(self) -> str:
        """The line's provenance in one sentence."""
        made = self.creator.describe() if self.creator is not None else "not in the trace"
        came = self.origin.describe() if self.origin is not None else "no recorded origin"
        return f"line {self.line}: {self.uop.op.name} (instruction {self.position}), {made}; from {came}"


@dataclass(frozen=True)
class KernelProvenance:
    """The provenance of every line of one kernel's source that holds an instruction."""

    kernel: str
    backend: str
    source: str
    source_map: SourceMap
    lines: tuple[LineProvenance, ...]
    note: str = ""

    def line(self, number: int) -> LineProvenance | None:
        """The provenance of line ``number`` (1-based), or None for a line that holds no instruction."""
        return next((entry for entry in self.lines if entry.line == number), None)

    def lines_of(self, uop: UOp) -> list[int]:
        """The lines written for ``uop`` (the reverse question: a selected node's lines)."""
        return [entry.line for entry in self.lines if entry.uop is uop]


def source_provenance(lineage: Lineage | None, linear: UOp, source: str, backend: str,
                      with_origins: bool = True) -> KernelProvenance:
    """The provenance of ``source``, the text ``backend`` rendered from the LINEAR program ``linear``:
    rendered again with its source map, which must give the same text (else the lines are not
    mapped and ``note`` says why: the backend's target changed since, say).  ``with_origins=False``
    leaves every line's origin None (a caller that reads origins elsewhere: the tuner, whose
    lowering's trace holds no program, where each line's search would find none)."""
    if linear.op is not Ops.LINEAR:
        raise TypeError(f"source_provenance takes a LINEAR program, got {linear.op.name}")
    text, source_map = get(backend).render_mapped(linear)
    name = str(linear.arg)
    if text != source:
        note = (f"kernel {name}: rendering it again for {backend} gives another text (the target or the "
                f"backend's settings changed since), so its lines are not mapped")
        return KernelProvenance(name, backend, source, SourceMap(linear, {}, note), (), note)
    source_lines = source.split("\n")
    if not with_origins:
        creator = lineage.creator if lineage is not None else (lambda _: None)
        lines = tuple(LineProvenance(number, source_lines[number - 1], position, linear.src[position],
                                     creator(linear.src[position]), None)
                      for number, position in sorted(source_map.lines.items()))
        return KernelProvenance(name, backend, source, source_map, lines, source_map.note)
    # an instruction's own origin (its chain of steps reaches a node the user built); else that of
    # the nearest instruction using it (a loop's RANGE, an index computed for a load); else, for a
    # STORE, the value's; else the operation the kernel computes (the value of its first STORE that
    # has an origin: a kernel's accumulator, an index nothing with an origin uses); else the nearest
    # source's (breadth first)
    origins: dict[int, Origin | None] = {}
    for u in linear.src:
        origins[id(u)] = lineage.own_origin(u) if lineage is not None else origin_of(u)
    stored = [origins.get(id(u.src[1])) for u in linear.src if u.op is Ops.STORE and len(u.src) > 1]
    whole = next((origin for origin in stored if origin is not None), None)
    entries = []
    for number, position in sorted(source_map.lines.items()):
        uop = linear.src[position]
        creator = lineage.creator(uop) if lineage is not None else None
        origin = origins[id(uop)] or _origin_of_users(linear, uop, origins)
        if origin is None and uop.op is Ops.STORE and len(uop.src) > 1:
            origin = origins.get(id(uop.src[1]))
        origin = origin or whole
        if origin is None and lineage is not None:
            origin = lineage.origin(uop) or lineage.origin(linear)
        entries.append(LineProvenance(number, source_lines[number - 1], position, uop, creator, origin))
    return KernelProvenance(name, backend, source, source_map, tuple(entries), source_map.note)


def _origin_of_users(linear: UOp, uop: UOp, origins: dict[int, Origin | None]) -> Origin | None:
    """For an instruction that descends from no user-level node (a loop's RANGE, built from a
    shape): the origin of the nearest instruction that uses it, breadth first."""
    users: dict[int, list[UOp]] = {}
    for u in linear.src:
        for source in u.src:
            users.setdefault(id(source), []).append(u)
    queue, seen = deque(users.get(id(uop), [])), {id(uop)}
    while queue:
        user = queue.popleft()
        if id(user) in seen:
            continue
        seen.add(id(user))
        if origins.get(id(user)) is not None:
            return origins[id(user)]
        queue.extend(users.get(id(user), []))
    return None


def kernel_provenance(program: Any, kernel: int | str = 0) -> KernelProvenance:
    """The provenance of one kernel (by index or name) of a compiled program (``uv.compile``, an
    NNEF graph's ``compile``): every line of its source that holds an instruction."""
    items = list(program.items)
    if isinstance(kernel, str):
        found = [item for item in items if str(item.kernel.name) == kernel or _linear_of(item).arg == kernel]
        if not found:
            raise KeyError(f"no kernel named {kernel!r}; kernels: {[str(_linear_of(i).arg) for i in items]}")
        item = found[0]
    else:
        if not -len(items) <= kernel < len(items):
            raise IndexError(f"kernel {kernel} of a program with {len(items)} kernels")
        item = items[kernel]
    trace = _trace_of(program, item)
    lineage = lineage_of(trace) if trace is not None else None
    return source_provenance(lineage, _linear_of(item), item.source, program_backend(program, item))


def program_backend(program: Any, item: Any) -> str:
    """The backend that rendered ``item`` of ``program``."""
    backend = getattr(program, "backend", None)
    if isinstance(backend, str):
        return backend
    for inner in getattr(program, "_programs", lambda: [])():
        if item in inner.items:
            return inner.backend
    raise ValueError("the program does not say which backend rendered its kernels")


def _trace_of(program: Any, item: Any) -> Trace | None:
    """The trace that lowered ``item``: the program's own, or that of the program inside an NNEF
    GraphProgram holding it."""
    for inner in getattr(program, "_programs", lambda: [])():
        if item in inner.items:
            return inner.trace
    return getattr(program, "trace", None)


def _linear_of(item: Any) -> UOp:
    """The LINEAR program of a rendered schedule item (its body is ``PROGRAM(LINEAR, SOURCE)``)."""
    body = item.body
    return body.src[0] if body.op is Ops.PROGRAM else body


__all__ = ["Creator", "KernelProvenance", "LineProvenance", "Lineage", "kernel_provenance", "lineage_of",
           "program_backend", "source_provenance"]
