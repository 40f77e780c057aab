"""The kernel tuner's data model: a kernel, the opts applied to it, undo/redo, exports.

:class:`TunerState` wraps a :class:`uopviz.passes.optops.kernel.Kernel` (``axes``, ``opts``,
``apply(Opt)``, ``source(backend)``, ``time(backend)``).  Applying an opt asks the kernel (which
checks it against the spec's AxisType rules); an invalid opt raises ``OptError`` there, and the
tuner keeps the kernel as it was and records the message for the panel.  History is a list of
kernels with a cursor: undo and redo move the cursor, a new opt after an undo drops the redo tail.

Sources and timings are asked of the kernel per backend and cached per (kernel, backend); a
backend that fails says why in its entry instead of breaking the others.  A tuning session is a
file (:meth:`TunerState.session`, ``save_session``, ``load_session``: the kernel's key, the target
profile and device, the opts, every timing taken, BEAM's result in short, the passes the opts ran);
BEAM's winner and any of its candidates open here undoably (``take_beam``, ``open_candidate``), the
winner with its re-timed runs as its timing.  No widget code here:
:class:`uopviz.widgets.tuner_view.KernelTuner` draws this state.  What it keeps per backend (a
source, a timing) is :mod:`uopviz.widgets.tuner_results`'s, re-exported here.
"""

from __future__ import annotations

import json
import os
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from uopviz.core.errors import UopvizError
from uopviz.core.ops import AxisType
from uopviz.passes.optops.opts import Opt, OptError, OptOp
from uopviz.widgets.tuner_results import (
    GPU_MODEL_GPU,
    TIMING_BUDGET_S,
    UNSTEADY_SPREAD,
    SourceEntry,
    TimingEntry,
    TunerSessionError,
    timing_entry,
)

#: the OptOps' names as the spec writes them, in OptOp's order (a new OptOp is offered by itself)
OPT_NAMES = tuple(OptOp.__members__)
#: the controls (``make_opt``'s parameters) each OptOp takes in the tuner; the view shows these
OPT_CONTROLS: dict[str, tuple[str, ...]] = {
    "SPLIT": ("axis", "factor", "target", "top"),
    "PADTO": ("axis", "multiple"),
    "SWAP": ("axis", "other_axis"),
    "NOLOCALS": (),
    "TC": ("axis", "tc_select", "tc_opt", "tc_mode"),
}
#: what a saved tuning session says it is, and the version of its layout
SESSION_FORMAT = "uopviz-tuner-session"
SESSION_VERSION = 1


# ---------------------------------------------------------------------------------------------
# opts as data: build from control values, encode to JSON / Python and back


def make_opt(
    op: str,
    axis: int | None = None,
    *,
    factor: int = 4,
    target: AxisType | str = AxisType.UPCAST,
    top: bool = False,
    multiple: int = 4,
    other_axis: int = 1,
    tc_select: int = -1,
    tc_opt: int = 0,
    tc_mode: int = 1,
) -> Any:
    """An ``Opt`` from the tuner's control values: SPLIT takes axis, factor, target and top; PADTO
    axis and multiple; SWAP axis and other_axis; NOLOCALS nothing; TC the reduce index (axis) and
    (tc_select, tc_opt, tc_mode)."""
    name = op.upper()
    if name not in OPT_NAMES:
        raise ValueError(f"unknown opt {op!r}; the spec's OptOps are {', '.join(OPT_NAMES)}")
    kind = OptOp[name]
    if isinstance(target, str):
        target = AxisType[target.upper()]
    if name == "SPLIT":
        return Opt(kind, axis, (int(factor), target, bool(top)))
    if name == "PADTO":
        return Opt(kind, axis, int(multiple))
    if name == "SWAP":
        return Opt(kind, axis, int(other_axis))
    if name == "NOLOCALS":
        return Opt(kind, None, None)
    if name == "TC":
        return Opt(kind, axis, (int(tc_select), int(tc_opt), int(tc_mode)))
    raise ValueError(f"the tuner has no controls for OptOp.{name} yet (see OPT_CONTROLS)")


def opt_to_python(opt: Any) -> str:
    """``Opt(OptOp.SPLIT, 0, (4, AxisType.UPCAST, False))``: Python that rebuilds ``opt``."""

    def literal(value: Any) -> str:
        if isinstance(value, AxisType):
            return f"AxisType.{value.name}"
        if isinstance(value, tuple):
            inner = ", ".join(literal(v) for v in value)
            return f"({inner}{',' if len(value) == 1 else ''})"
        return repr(value)

    return f"Opt(OptOp.{opt.op.name}, {literal(opt.axis)}, {literal(opt.arg)})"


# ---------------------------------------------------------------------------------------------
# what the OptOps panel may offer: every value checked by applying it to the kernel

#: the multiples PADTO is offered with (those that apply to the axis: not already a divisor of its size,
#: within the growth PADTO allows)
PAD_MULTIPLES = (2, 3, 4, 8, 16, 32, 64, 128)


@dataclass(frozen=True)
class SplitChoice:
    """An AxisType SPLIT can make from one axis: the factors that apply and the part it takes
    (``tops``: ``(False,)`` the inner part, ``(True,)`` the outer, both when the spec leaves it open)."""

    target: AxisType
    factors: tuple[int, ...]
    tops: tuple[bool, ...]


@dataclass(frozen=True)
class OptChoices:
    """What one OptOp may be applied with on one axis of a kernel, each value found by applying it:
    SPLIT's targets (with their factors), PADTO's multiples, SWAP's partner axes, and whether NOLOCALS
    applies.  ``none_reason`` says why nothing applies (empty when something does)."""

    op: str
    axis: int | None
    splits: tuple[SplitChoice, ...] = ()
    multiples: tuple[int, ...] = ()
    partners: tuple[int, ...] = ()
    applies: bool = False
    none_reason: str = ""

    @property
    def targets(self) -> tuple[AxisType, ...]:
        """The AxisTypes a SPLIT of this axis can make, in the spec's order."""
        return tuple(choice.target for choice in self.splits)

    def split(self, target: AxisType | str) -> SplitChoice | None:
        """The choice for ``target`` (an AxisType or its name), or None when SPLIT cannot make it here."""
        name = target.name if isinstance(target, AxisType) else str(target).upper()
        return next((choice for choice in self.splits if choice.target.name == name), None)


def _applies(kernel: Any, opt: Any) -> str:
    """The OptError's message when ``opt`` does not apply to ``kernel``; empty when it applies."""
    try:
        kernel.apply(opt)
    except OptError as error:
        return str(error)
    return ""


def _divisors(size: int) -> tuple[int, ...]:
    return tuple(factor for factor in range(2, size + 1) if size % factor == 0)


def opt_choices(kernel: Any, op: str, axis: int | None) -> OptChoices:
    """What ``op`` may be applied with on ``axis`` of ``kernel`` (see :class:`OptChoices`).  TC is not
    enumerated (its arguments select among the backend's tensor cores): it is offered as it is."""
    from uopviz.passes.optops.axes import SPLIT_RULES

    name = op.upper()
    axes = list(kernel.axes)
    if name == "NOLOCALS":
        reason = _applies(kernel, Opt(OptOp.NOLOCALS, None, None))
        return OptChoices(name, None, applies=not reason, none_reason=reason)
    if name == "TC" or axis is None or not 0 <= axis < len(axes):
        reason = "" if name == "TC" else f"the kernel has no axis {axis!r} (it has {len(axes)})"
        return OptChoices(name, axis, applies=name == "TC", none_reason=reason)
    size = int(axes[axis][0])
    reasons: list[str] = []
    if name == "SPLIT":
        splits = []
        for target, (_, direction) in SPLIT_RULES.items():
            tops = (False, True) if direction is None else (direction,)
            factors = []
            for factor in _divisors(size):
                found = [_applies(kernel, Opt(OptOp.SPLIT, axis, (factor, target, top)))
                         for top in tops]
                factors += [factor] if "" in found else []
                reasons += [reason for reason in found if reason]
            if factors:
                splits.append(SplitChoice(target, tuple(factors), tops))
        axis_type = axes[axis][1]
        if not any(axis_type in sources for sources, _ in SPLIT_RULES.values()):
            sources = sorted({t.name for rule_sources, _ in SPLIT_RULES.values() for t in rule_sources})
            reasons = [f"axis {axis} is {axis_type.name}, and SPLIT makes new axes from {'/'.join(sources)} "
                       "axes only (spec AxisType table, 'Split from')"]
        return OptChoices(name, axis, splits=tuple(splits), none_reason=_none(splits, reasons))
    if name == "PADTO":
        found = {multiple: _applies(kernel, Opt(OptOp.PADTO, axis, multiple))
                 for multiple in PAD_MULTIPLES}
        multiples = tuple(multiple for multiple, reason in found.items() if not reason)
        return OptChoices(name, axis, multiples=multiples, none_reason=_none(multiples, found.values()))
    if name == "SWAP":
        found = {other: _applies(kernel, Opt(OptOp.SWAP, axis, other))
                 for other in range(len(axes)) if other != axis}
        partners = tuple(other for other, reason in found.items() if not reason)
        return OptChoices(name, axis, partners=partners, none_reason=_none(partners, found.values()))
    raise ValueError(f"unknown opt {op!r}; the spec's OptOps are {', '.join(OPT_NAMES)}")


def _none(found: Any, reasons: Any) -> str:
    """Why nothing was found: the first refusal's message ("" when something was)."""
    if found:
        return ""
    return next((reason for reason in reasons if reason), "no value applies")


# ---------------------------------------------------------------------------------------------
# the tuner state


@dataclass(frozen=True)
class AxisView:
    """One axis of the kernel as the tuner shows it: position, size, AxisType, letter, colour."""

    index: int
    size: int
    axis_type: AxisType

    @property
    def text(self) -> str:
        """``u4``: the AxisType letter and the size."""
        return f"{self.axis_type.letter}{self.size}"

    @property
    def color(self) -> str:
        """The spec's colour of the AxisType."""
        return self.axis_type.color


class TunerState:
    """A kernel being tuned: apply opts, undo/redo, export, and per-backend sources and timings."""

    def __init__(self, kernel: Any, program_trace: Any = None):
        for needed in ("axes", "opts", "apply", "source"):
            if not hasattr(kernel, needed):
                raise TypeError(f"TunerState needs a Kernel (with .{needed}), got {type(kernel).__name__}")
        self._history: list[Any] = [kernel]
        self._cursor = 0
        self.message = ""
        self.error = False
        # keyed by id(kernel) and backend; the kernel is kept beside the entry so that an id reused
        # by a later kernel (after its history was dropped) is never taken for the old one
        self._sources: dict[tuple[int, str], tuple[Any, SourceEntry]] = {}
        self._gpu_accounts: dict[tuple[int, str], tuple[Any, Any]] = {}
        self._timings: dict[tuple[int, str], tuple[Any, TimingEntry]] = {}
        self._choices: dict[tuple[int, str, int | None], tuple[Any, OptChoices]] = {}
        self._provenance: dict[tuple[int, str], tuple[Any, dict[str, Any]]] = {}
        #: the trace of the program the kernel came from (``program.trace``), where its origins are read
        self.program_trace = program_trace
        #: every timing taken in this session, oldest first: {"kernel", "opts", "source", "timing"}
        self.timing_history: list[dict[str, Any]] = []
        #: the last BEAM search's result (``uopviz.engine.search.BeamResult``), if any
        self.beam_result: Any = None

    # -- the kernel and its opts ----------------------------------------------------------
    @property
    def kernel(self) -> Any:
        """The kernel with every applied opt."""
        return self._history[self._cursor]

    @property
    def base(self) -> Any:
        """The kernel as given (before the tuner's opts)."""
        return self._history[0]

    @property
    def opts(self) -> tuple[Any, ...]:
        """Every opt applied to the kernel, in order (its own ``opts``)."""
        return tuple(self.kernel.opts)

    @property
    def axes(self) -> list[AxisView]:
        """The kernel's axes in kernel order."""
        return [AxisView(i, int(size), axis_type) for i, (size, axis_type) in enumerate(self.kernel.axes)]

    @property
    def axis_string(self) -> str:
        """``L64 L128 R512``: each axis as letter and size."""
        return " ".join(a.text for a in self.axes)

    def apply(self, opt: Any) -> bool:
        """Apply ``opt``; on ``OptError`` keep the kernel as it was and keep the message. Returns
        whether the opt was applied."""
        try:
            new_kernel = self.kernel.apply(opt)
        except OptError as error:
            self.message, self.error = f"not valid here: {error}", True  # the error names the opt
            return False
        except Exception as error:  # noqa: BLE001 - a failing opt must not take the tuner down with it
            self.message = f"{opt_to_python(opt)} failed inside the kernel: {type(error).__name__}: {error}"
            self.error = True
            return False
        del self._history[self._cursor + 1 :]
        self._history.append(new_kernel)
        self._cursor += 1
        self.message, self.error = f"applied {opt_to_python(opt)}", False
        return True

    def apply_all(self, opts: list[Any]) -> bool:
        """Apply several opts in order, stopping at the first invalid one."""
        return all(self.apply(opt) for opt in opts)

    @property
    def can_undo(self) -> bool:
        """True when there is an opt to undo."""
        return self._cursor > 0

    @property
    def can_redo(self) -> bool:
        """True when an undone opt can be re-applied."""
        return self._cursor < len(self._history) - 1

    def undo(self) -> bool:
        """Step back one opt; False when there is none."""
        if not self.can_undo:
            self.message, self.error = "nothing to undo", False
            return False
        self._cursor -= 1
        self.message, self.error = "undone", False
        return True

    def redo(self) -> bool:
        """Re-apply the last undone opt; False when there is none."""
        if not self.can_redo:
            self.message, self.error = "nothing to redo", False
            return False
        self._cursor += 1
        self.message, self.error = "redone", False
        return True

    def reset(self) -> None:
        """Back to the kernel as given (the history stays, so redo works)."""
        self._cursor = 0
        self.message, self.error = "reset to the kernel as given", False

    def replace(self, kernel: Any, message: str) -> None:
        """Make ``kernel`` (found elsewhere, e.g. by BEAM) the current one, undoably."""
        del self._history[self._cursor + 1 :]
        self._history.append(kernel)
        self._cursor += 1
        self.message, self.error = message, False

    def choices(self, op: str, axis: int | None) -> OptChoices:
        """What ``op`` may be applied with on ``axis`` of the current kernel (:func:`opt_choices`,
        cached per kernel): the OptOps panel offers only these."""
        kernel = self.kernel
        cached = self._choices.get((id(kernel), op, axis))
        if cached is not None and cached[0] is kernel:
            return cached[1]
        choices = opt_choices(kernel, op, axis)
        self._choices[(id(kernel), op, axis)] = (kernel, choices)
        return choices

    # -- exports -----------------------------------------------------------------------------
    def new_opts(self) -> tuple[Any, ...]:
        """The opts the tuner added on top of the base kernel's own."""
        return self.opts[len(tuple(self.base.opts)) :]

    def export_python(self) -> str:
        """Python that rebuilds the kernel's opts and a function applying them to the kernel."""
        base, tuned = getattr(self.base, "name", "kernel"), getattr(self.kernel, "name", "kernel")
        lines = ["from uopviz import AxisType, Opt, OptOp", ""]
        lines += [f"# the opts of kernel {base} (tuned: {tuned})", "opts = ["]
        lines += [f"    {opt_to_python(opt)}," for opt in self.opts]
        lines += [
            "]",
            "",
            "",
            "def tuned(kernel):",
            f'    """``kernel`` ({base}, e.g. ``uv.compile(...).kernels[i]``) with the opts applied."""',
            "    for opt in opts:",
            "        kernel = kernel.apply(opt)",
            "    return kernel",
        ]
        return "\n".join(lines)

    def export_json(self) -> str:
        """The kernel's opts as JSON: the kernel they apply to, its tuned name, the backend, and the
        opts as BEAM's cache and the tuning records write them."""
        from uopviz.passes.optops.opts import opts_to_json

        return json.dumps(
            {
                "kernel": getattr(self.base, "name", ""),
                "tuned": getattr(self.kernel, "name", ""),
                "backend": getattr(self.kernel, "backend", ""),
                "opts": opts_to_json(self.opts),
            },
            indent=1,
        )

    @staticmethod
    def opts_from_json(text: str) -> list[Any]:
        """The opts of a JSON export (or of a bare list of opts)."""
        from uopviz.passes.optops.opts import opts_from_json

        data = json.loads(text)
        return list(opts_from_json(data["opts"] if isinstance(data, dict) else data))

    # -- per-backend results -------------------------------------------------------------------
    def source(self, backend: str) -> SourceEntry:
        """The current kernel's source on ``backend`` (cached)."""
        return self.source_of(self.kernel, backend)

    def source_of(self, kernel: Any, backend: str) -> SourceEntry:
        """``kernel``'s source on ``backend`` (cached; any kernel, e.g. one compared with the current)."""
        cached = self._sources.get((id(kernel), backend))
        if cached is not None and cached[0] is kernel:
            return cached[1]
        started = time.perf_counter()
        try:
            entry = SourceEntry(backend, source=kernel.source(backend))
        except Exception as error:  # noqa: BLE001 - one backend's failure is shown in its pane
            entry = SourceEntry(backend, error=f"{type(error).__name__}: {error}")
        entry.seconds = time.perf_counter() - started
        self._sources[(id(kernel), backend)] = (kernel, entry)
        return entry

    def provenance(self, backend: str) -> dict[str, Any]:
        """What each line of the current kernel's source on ``backend`` came from, as the front end
        reads it (the player's layout, :func:`uopviz.widgets.player.provenance_json`): ``lines`` holds
        ``[line, node key, creator, origin]`` per line that holds an instruction, the node being the
        one of the tuner's graph (``kernel.ast``) the instruction descends from (None when it descends
        from none: the creator then names the pass that built it); ``creators`` (``{text, pass_index,
        step}``: the opt, pass or rule and ``file:line``) and ``origins`` (the Tensor method or NNEF
        operation) are listed once; ``ops`` names each node's op; ``note`` says why there are no lines.
        Worked out once per kernel and backend, from a traced replay of the opts and lowering."""
        kernel = self.kernel
        cached = self._provenance.get((id(kernel), backend))
        if cached is not None and cached[0] is kernel:
            return cached[1]
        entry = self.source(backend)
        if entry.error:
            found = _no_provenance(entry.error)
        else:
            try:
                found = self._traced_provenance(kernel, backend, entry.source)
            except (UopvizError, KeyError) as error:  # a backend that is not registered, a source it rejects
                found = _no_provenance(str(error))
        self._provenance[(id(kernel), backend)] = (kernel, found)
        return found

    def _traced_provenance(self, kernel: Any, backend: str, source: str) -> dict[str, Any]:
        """:meth:`provenance` worked out: the opts replayed on the base kernel and the lowering, both
        traced, so that an instruction's chain of descent reaches the graph's node and the base
        kernel's (whose origin the program's trace knows)."""
        from uopviz.core.rewrite import tracing
        from uopviz.engine.provenance import lineage_of, source_provenance
        from uopviz.widgets.graph import node_key

        try:
            start: str | None = self._start_of_current()
        except TunerSessionError:  # BEAM's kernel, a loaded one that changed: lowered as it is
            start = None
        with tracing() as trace:
            if start is not None:  # the opts' steps recorded: the graph's nodes descend from the base's
                self._replay(self.new_opts(), start)
            linear = kernel.linear(backend)
        lineage = lineage_of(trace)
        found = source_provenance(lineage, linear, source, backend, with_origins=False)
        drawn = {id(node) for node in kernel.ast.toposort()}
        whole = self._origin(kernel.ast) or self._origin(self.base.ast)
        origin_of_node: dict[int, Any] = {}  # per node the chain ends at (many lines share one)
        creators: dict[Any, int] = {}
        origins: dict[str, int] = {}
        lines, ops = [], {}
        for line in found.lines:
            chain = lineage.ancestors(line.uop)
            node = next((ancestor for ancestor in chain if id(ancestor) in drawn), None)
            made = creators.setdefault(line.creator, len(creators)) if line.creator is not None else -1
            if id(chain[-1]) not in origin_of_node:
                origin_of_node[id(chain[-1])] = self._origin(chain[-1])
            origin = origin_of_node[id(chain[-1])] or whole
            came = origins.setdefault(origin.describe(), len(origins)) if origin is not None else -1
            key = node_key(node) if node is not None else None
            if node is not None:
                ops[key] = node.op.name
            lines.append([line.line, key, made, came])
        return {"lines": lines, "ops": ops, "note": found.note, "origins": list(origins),
                "creators": [{"text": c.describe(), "pass_index": c.pass_index, "step": c.step,
                              "pass": c.pass_name} for c in creators]}

    def _origin(self, node: Any) -> Any:
        """The Tensor method or NNEF operation ``node`` (of the tuned kernel's lowering, or of the
        base kernel) descends from: read from the program's trace when the tuner was given it, else
        the latest origin recorded for ``node`` or the nearest of its sources, breadth first."""
        from uopviz.core.origins import origins_of
        from uopviz.engine.provenance import lineage_of

        if self.program_trace is not None:
            # only the program's own origins: a hash-consed node (a constant, a loop bound) may also
            # carry the call of another program of this process, which the trace does not own
            return lineage_of(self.program_trace).origin(node)
        queue, seen = deque([node]), set()
        while queue:
            current = queue.popleft()
            if id(current) in seen:
                continue
            seen.add(id(current))
            recorded = origins_of(current)
            if recorded:
                return recorded[-1]
            queue.extend(current.src)
        return None

    def gpu_account(self, gpu: str = GPU_MODEL_GPU) -> Any:
        """The GPU model's account of the current kernel on ``gpu`` (``uopviz.engine.gpu_model``: worked
        out from its CUDA program, no GPU needed), or the text of why there is none (cached)."""
        from uopviz.engine.gpu_model import gpu_account

        kernel = self.kernel
        cached = self._gpu_accounts.get((id(kernel), gpu))
        if cached is not None and cached[0] is kernel:
            return cached[1]
        try:
            account: Any = gpu_account(kernel, gpu)
        except Exception as error:  # noqa: BLE001 - shown under the CUDA source instead of the model
            account = f"{type(error).__name__}: {error}"
        self._gpu_accounts[(id(kernel), gpu)] = (kernel, account)
        return account

    def timing(self, backend: str, refresh: bool = False, budget_s: float | None = None) -> TimingEntry:
        """A timing of the current kernel on ``backend`` (cached unless ``refresh``), within
        ``budget_s`` seconds (default :data:`TIMING_BUDGET_S`): the kernel runs in the worker process,
        which is stopped at the budget or by ``Worker.cancel`` (the tuner's Stop button)."""
        from uopviz.backends.worker import KernelCancelled, KernelTimeout

        kernel, budget_s = self.kernel, TIMING_BUDGET_S if budget_s is None else budget_s
        cached = self.cached_timing(backend)
        if cached is not None and not refresh:
            return cached
        try:
            entry = timing_entry(kernel, backend, kernel.time(backend, budget_s=budget_s))
        except KernelTimeout:
            entry = TimingEntry(backend, error=f"stopped at its {budget_s:g} s budget (Kernel.time("
                                               f"{backend!r}, budget_s=...) takes longer)")
        except KernelCancelled:
            return TimingEntry(backend, error="stopped")  # not cached: the next click times it again
        except Exception as error:  # noqa: BLE001 - shown in the chart's table, others still run
            entry = TimingEntry(backend, error=f"{type(error).__name__}: {error}")
        self._keep_timing(kernel, entry, "measured")
        return entry

    def _keep_timing(self, kernel: Any, entry: TimingEntry, source: str) -> None:
        """Cache ``entry`` as ``kernel``'s timing on its backend and add it to the history."""
        from uopviz.passes.optops.opts import opts_to_json

        self._timings[(id(kernel), entry.backend)] = (kernel, entry)
        self.timing_history.append({"kernel": getattr(kernel, "name", ""), "opts": opts_to_json(kernel.opts),
                                    "source": source, "timing": entry.to_json()})

    def cached_timing(self, backend: str, kernel: Any = None) -> TimingEntry | None:
        """The timing already taken for ``kernel`` (default: the current one) on ``backend``, if any."""
        kernel = self.kernel if kernel is None else kernel
        cached = self._timings.get((id(kernel), backend))
        return cached[1] if cached is not None and cached[0] is kernel else None

    # -- comparing schedules --------------------------------------------------------------------
    def comparison_points(self) -> list[tuple[str, Any]]:
        """Kernels the current one can be compared with, labelled: the heuristic's choice for the
        base kernel, BEAM's result (after a search), and every other point of the undo history."""
        from uopviz.passes.optops.heuristic import hand_coded_optimizations

        points: list[tuple[str, Any]] = []
        heuristic = self.__dict__.get("_heuristic")
        if heuristic is None:  # the base kernel does not change: its heuristic kernel is made once
            start = self.base.with_parallel_outputs() if not tuple(self.base.opts) else self.base
            try:
                heuristic = hand_coded_optimizations(start)
            except Exception as error:  # noqa: BLE001 - the other points stay comparable
                heuristic = f"{type(error).__name__}: {error}"
            self.__dict__["_heuristic"] = heuristic
        if not isinstance(heuristic, str):
            points.append((f"the heuristic's: {heuristic.name}", heuristic))
        if self.beam_result is not None:
            points.append((f"BEAM's result: {self.beam_result.kernel.name}", self.beam_result.kernel))
        for position, kernel in enumerate(self._history):
            if position != self._cursor:
                label = "as given" if position == 0 else f"{len(tuple(kernel.opts))} opts"
                points.append((f"history {position} ({label}): {kernel.name}", kernel))
        return points

    # -- BEAM -----------------------------------------------------------------------------------
    def take_beam(self, result: Any, summary: str = "") -> None:
        """Make BEAM's winner the current kernel (undoably) and keep ``result``.  The winner's re-timed
        runs become its timing on the search's backend, so the chart shows the figure BEAM's summary
        and table show (the re-timed median), not another measurement."""
        self.beam_result = result
        self.replace(result.kernel, f"BEAM ({result.backend}): {summary or result.best.name}")
        if result.best.retimed is not None:
            entry = timing_entry(result.kernel, result.backend, result.best.retimed)
            self._keep_timing(result.kernel, entry, "BEAM re-timing")

    def open_candidate(self, index: int) -> Any:
        """Make candidate ``index`` of the last BEAM result (in ``BeamResult.ranked()`` order, the
        winner 0) the current kernel, undoably; returns it."""
        if self.beam_result is None:
            raise ValueError("no BEAM result to open a candidate of: run BEAM search first")
        ranked = self.beam_result.ranked()
        if not 0 <= index < len(ranked):
            raise IndexError(f"candidate {index} out of range: the BEAM result has {len(ranked)} candidates")
        candidate = ranked[index]
        kernel = self.beam_result.kernel_of(candidate)
        self.replace(kernel, f"opened BEAM candidate {index}: {candidate.name}")
        if candidate.retimed is not None:
            self._keep_timing(kernel, timing_entry(kernel, self.beam_result.backend, candidate.retimed),
                              "BEAM re-timing")
        return kernel

    # -- sessions --------------------------------------------------------------------------------
    def _replay(self, opts: tuple[Any, ...], start: str) -> Any:
        """The base kernel (``start``: "as given" or "parallel outputs", its initial state) with ``opts``."""
        kernel = self.base.with_parallel_outputs() if start == "parallel outputs" else self.base
        return kernel.apply_all(opts)

    def _start_of_current(self) -> str:
        """Which start the current kernel's opts rebuild it from ("as given", or "parallel outputs":
        BEAM starts from the initial state)."""
        from uopviz.engine.search import kernel_key

        wanted = kernel_key(self.kernel)
        for start in ("as given", "parallel outputs"):
            try:
                if kernel_key(self._replay(self.new_opts(), start)) == wanted:
                    return start
            except Exception:  # noqa: BLE001, S112 - an opt that does not fit this start: try the other
                continue
        raise TunerSessionError(f"the current kernel {self.kernel.name} is not the base kernel "
                                f"{self.base.name} with its opts {list(self.new_opts())}: "
                                "it cannot be saved as a session")

    def session(self) -> dict[str, Any]:
        """This tuning session as JSON-able data: the kernel (name, key, backend), the target profile
        and device, the opts in order and the start they apply to, every timing taken, BEAM's result
        in short, and the passes the opts ran (names and step counts)."""
        from uopviz.backends import BackendUnavailable, get
        from uopviz.backends.target import cpu_target
        from uopviz.core.rewrite import tracing
        from uopviz.engine.search import kernel_key
        from uopviz.passes.optops.opts import opts_to_json

        start = self._start_of_current()
        with tracing() as trace:
            self._replay(self.new_opts(), start)
        backend = getattr(self.base, "backend", "")
        try:
            device = get(backend).device
        except (KeyError, BackendUnavailable):
            device = ""
        return {
            "format": SESSION_FORMAT,
            "version": SESSION_VERSION,
            "kernel": {"name": self.base.name, "key": kernel_key(self.base), "backend": backend},
            "tuned": {"name": self.kernel.name, "key": kernel_key(self.kernel)},
            "target": cpu_target().name,
            "device": device,
            "start": start,
            "opts": opts_to_json(self.new_opts()),
            "timings": list(self.timing_history),
            "beam": self._beam_summary(),
            "trace": [{"pass": p.name, "steps": len(p.steps)} for p in trace.passes],
        }

    def _beam_summary(self) -> dict[str, Any] | None:
        result = self.beam_result
        if result is None:
            return None
        from uopviz.passes.optops.opts import opts_to_json

        return {"backend": result.backend, "device": result.device, "winner": result.best.name,
                "opts": opts_to_json(result.opts), "winner_s": result.winner_s,
                "figure": result.winner_figure, "reason": result.reason(),
                "candidates": len(result.candidates), "stopped": result.stopped}

    def save_session(self, path: str | os.PathLike) -> dict[str, Any]:
        """Write :meth:`session` to ``path`` as JSON; returns it."""
        data = self.session()
        with open(path, "w", encoding="utf-8") as file:
            json.dump(data, file, indent=1)
        self.message, self.error = f"saved the session to {os.fspath(path)}", False
        return data

    def load_session(self, source: str | os.PathLike | dict[str, Any]) -> Any:
        """Replay a saved session (a path or :meth:`session`'s dict) on this tuner's kernel: check it
        was saved for the same kernel (name, key and backend; a :class:`TunerSessionError` names what
        differs), apply its opts (undoably), check they rebuild the saved kernel, and restore its
        timings as history.  Returns the replayed kernel."""
        from uopviz.engine.search import kernel_key
        from uopviz.passes.optops.opts import opts_from_json

        where = "the session" if isinstance(source, dict) else f"session {os.fspath(source)}"
        data = source if isinstance(source, dict) else _read_json(source, where)
        if not isinstance(data, dict) or data.get("format") != SESSION_FORMAT:
            raise TunerSessionError(f"{where} is not a tuner session (format {SESSION_FORMAT!r} expected)")
        if data.get("version") != SESSION_VERSION:
            raise TunerSessionError(f"{where} has version {data.get('version')!r}; this uopviz reads "
                                    f"version {SESSION_VERSION}")
        saved = data.get("kernel", {})
        here = {"name": self.base.name, "key": kernel_key(self.base),
                "backend": getattr(self.base, "backend", "")}
        differs = [f"{field} {saved.get(field)!r} there, {here[field]!r} here"
                   for field in ("name", "key", "backend") if saved.get(field) != here[field]]
        if differs:
            raise TunerSessionError(f"{where} was saved for another kernel: " + "; ".join(differs))
        opts = tuple(opts_from_json(data.get("opts", [])))
        try:
            kernel = self._replay(opts, data.get("start", "as given"))
        except Exception as error:
            raise TunerSessionError(f"{where}: its opts {list(opts)} do not apply to {self.base.name}: "
                                    f"{type(error).__name__}: {error}") from error
        tuned = data.get("tuned", {}).get("key")
        if tuned is not None and kernel_key(kernel) != tuned:
            raise TunerSessionError(f"{where}: its opts rebuild {kernel_key(kernel)}, not the saved {tuned} "
                                    f"(the opts code changed since it was saved)")
        self.replace(kernel, f"loaded {where}: {len(opts)} opts, {len(data.get('timings', []))} timings")
        for record in data.get("timings", []):
            TimingEntry.from_json(record["timing"])  # refuse a malformed timing before keeping any
        self.timing_history = [dict(record, loaded_from=where) for record in data.get("timings", [])]
        return kernel


def _no_provenance(reason: str) -> dict[str, Any]:
    """:meth:`TunerState.provenance` of a source whose lines cannot be mapped, saying why."""
    return {"lines": [], "creators": [], "origins": [], "ops": {}, "note": f"no provenance: {reason}"}


def _read_json(path: str | os.PathLike, where: str) -> Any:
    try:
        with open(path, encoding="utf-8") as file:
            return json.load(file)
    except (OSError, json.JSONDecodeError) as error:
        raise TunerSessionError(f"{where} cannot be read: {type(error).__name__}: {error}") from error


__all__ = [
    "AxisView",
    "GPU_MODEL_GPU",
    "OPT_CONTROLS",
    "OPT_NAMES",
    "OptChoices",
    "PAD_MULTIPLES",
    "SESSION_FORMAT",
    "SESSION_VERSION",
    "SourceEntry",
    "SplitChoice",
    "TIMING_BUDGET_S",
    "TimingEntry",
    "TunerSessionError",
    "TunerState",
    "UNSTEADY_SPREAD",
    "make_opt",
    "opt_choices",
    "opt_to_python",
    "timing_entry",
]
