"""Which loops of a LINEAR program the Python backend (:mod:`uopviz.backends.python`) keeps as Python
``for`` loops and which it runs vectorised: :func:`carried_ranges` (the RANGEs whose iterations
carry state; every other range is lifted into a numpy axis) and :func:`foldable_loops` (the carried
ones whose only state is accumulators folded with an associative op, run as chunks of iterations
folded in loop order)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from uopviz.backends.linear_program import underlying_buffer
from uopviz.backends.python_runtime import fold_ufunc
from uopviz.core.dtype import AddrSpace
from uopviz.core.ops import AxisType, GroupOp, Ops
from uopviz.core.uop import UOp


def is_register(u: UOp) -> bool:
    """Whether an INDEX source is a REG or LOCAL buffer (one copy per lifted iteration or workgroup)."""
    base = underlying_buffer(u)
    return base.op is Ops.BUFFER and base.arg.addrspace in (AddrSpace.REG, AddrSpace.LOCAL)


def is_shared(u: UOp) -> bool:
    """Whether an INDEX source is a LOCAL buffer (one copy per workgroup, shared by its threads)."""
    base = underlying_buffer(u)
    return base.op is Ops.BUFFER and base.arg.addrspace is AddrSpace.LOCAL


def carried_ranges(program: Sequence[UOp]) -> set[UOp]:
    """The RANGEs whose iterations carry state: inside the loop, some register is read before it is
    written, or written at an index that depends on the loop, or a REDUCE loop stores to a global
    buffer (a sequential scan: an iteration reads what the earlier ones stored).  Those run as
    Python loops; every other range is lifted into a numpy axis."""
    carried: set[UOp] = set()
    open_loops: list[tuple[UOp, set[UOp], set[UOp]]] = []  # (range, registers written, registers read)
    for u in program:
        if u.op is Ops.RANGE:
            open_loops.append((u, set(), set()))
            continue
        if u.op is Ops.END:
            target = u.src[-1]
            while open_loops and open_loops[-1][0] is not target:
                open_loops.pop()
            if open_loops:
                open_loops.pop()
            continue
        if u.op is Ops.STORE and u.src[0].op is Ops.INDEX and not is_register(u.src[0].src[0]):
            carried.update(loop for loop, _, _ in open_loops if loop.arg[1] is AxisType.REDUCE)
            continue
        if u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is Ops.INDEX and is_register(u.src[0].src[0]):
            register = underlying_buffer(u.src[0].src[0])
            # a register filled element by element over a loop (a staged strip) is one buffer for all
            # of its iterations: that loop runs in Python too
            index = u.src[0].src[1]
            index_ranges = {r for r in index.toposort() if r.op is Ops.RANGE} if u.op is Ops.STORE else set()
            for loop, written, read in open_loops:
                if u.op is Ops.LOAD and register not in written:
                    read.add(register)
                    carried.add(loop)
                elif u.op is Ops.STORE:
                    written.add(register)
                    if loop in index_ranges:
                        carried.add(loop)
    return carried


#: ops a vectorised loop body may hold: values computed per iteration, and loads and stores (the
#: loads and stores are checked one by one); loops, IF blocks, barriers, buffers, tensor cores keep
#: the loop
_FOLDABLE_BODY_OPS = frozenset(GroupOp.ELEMENTWISE) | {
    Ops.CONST, Ops.VECTORIZE, Ops.GEP, Ops.CAST, Ops.BITCAST, Ops.INDEX, Ops.LOAD, Ops.STORE, Ops.AFTER}


def _loop_bodies(program: Sequence[UOp]) -> dict[UOp, tuple[list[UOp], int]]:
    """Every RANGE's body (the uops between it and its END) and the position of its END."""
    bodies: dict[UOp, tuple[list[UOp], int]] = {}
    open_loops: list[UOp] = []
    for position, u in enumerate(program):
        for loop in open_loops:
            if not (u.op is Ops.END and u.src[-1] is loop):
                bodies[loop][0].append(u)
        if u.op is Ops.RANGE:
            bodies[u] = ([], len(program))
            open_loops.append(u)
        elif u.op is Ops.END and any(loop is u.src[-1] for loop in open_loops):
            while (closed := open_loops.pop()) is not u.src[-1]:
                bodies[closed] = (bodies[closed][0], position)
            bodies[closed] = (bodies[closed][0], position)
    return bodies


def _register_elements(index: UOp) -> tuple[int, ...] | None:
    """The register elements a constant index names (a CONST or a VECTORIZE of CONSTs), else None."""
    lanes = index.src if index.op is Ops.VECTORIZE else (index,)
    if not all(lane.op is Ops.CONST and isinstance(lane.arg[0], int) for lane in lanes):
        return None
    return tuple(int(lane.arg[0]) for lane in lanes)


def _fold_update(store: UOp, loads: dict[UOp, UOp], uses: _Uses) -> UOp | None:
    """The ALU of ``acc = op(acc, value)`` that ``store`` writes, when it is such an update of the
    accumulator ``loads`` maps its INDEX to (the accumulator read once, only by the ALU), else None."""
    value, load = store.src[1], loads.get(store.src[0])
    if load is None or value.op not in GroupOp.ELEMENTWISE or len(value.src) != 2:
        return None
    if fold_ufunc(value.op, value.dtype) is None or uses.program.get(value, 0) != 1:
        return None
    # the accumulator's value is used by the ALU alone; after the loop it may be read again (the LOAD
    # issued anew after the END: the vectorised loop leaves the register as the loop would)
    if uses.body.get(load, 0) != 1 or (uses.program.get(load, 0) != 1 and load not in uses.later):
        return None
    # floats fold with the accumulator first (the loop's operand order: max of -0.0 and 0.0, and which
    # NaN survives, depend on it); integer and bool ops commute exactly
    if value.src[0] is load and value.src[1] is not load:
        return value
    if value.src[1] is load and value.src[0] is not load and not value.dtype.scalar.is_float:
        return value
    return None


def foldable_loops(program: Sequence[UOp], carried: set[UOp]) -> dict[UOp, dict[UOp, UOp]]:
    """The carried RANGEs that can run vectorised, each with its fold ALUs (and the accumulator LOAD
    each folds into).

    A loop qualifies when its only carried state is accumulators, each updated once per iteration as
    ``acc = op(acc, value)`` with ``op`` an associative reduce op and ``value`` independent of every
    accumulator: then the values of all iterations can be computed at once (the range lifted as a
    numpy axis) and folded in loop order.  Anything else in the body (a nested loop, an IF, a store to
    a global or shared buffer, a register indexed by the loop, an accumulator read twice) keeps the
    Python loop."""
    program_uses = _use_counts(program)
    foldable: dict[UOp, dict[UOp, UOp]] = {}
    for loop, (body, end) in _loop_bodies(program).items():
        if loop in carried:
            folds = _body_folds(loop, body, _Uses(program_uses, _use_counts(body), set(program[end + 1 :])))
            if folds:
                foldable[loop] = folds
    return foldable


@dataclass
class _Uses:
    """How often uops are used as sources: in the whole program and in one loop's body; and the uops
    issued after that loop's END."""

    program: dict[UOp, int]
    body: dict[UOp, int]
    later: set[UOp]


def _use_counts(uops: Sequence[UOp]) -> dict[UOp, int]:
    """How many times each uop is a source of one of ``uops``."""
    uses: dict[UOp, int] = {}
    for u in uops:
        for source in u.src:
            uses[source] = uses.get(source, 0) + 1
    return uses


def _body_folds(loop: UOp, body: list[UOp], uses: _Uses) -> dict[UOp, UOp] | None:
    """The fold ALUs of ``loop`` with their accumulator LOADs (see :func:`foldable_loops`), or None when
    it must stay a loop."""
    if any(u.op not in _FOLDABLE_BODY_OPS for u in body):
        return None
    if any(u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is not Ops.INDEX for u in body):
        return None  # not a well-formed access: the loop renders it (and names the problem)
    register_uses = [u for u in body if u.op in (Ops.LOAD, Ops.STORE) and is_register(u.src[0].src[0])]
    if any(is_shared(u.src[0].src[0]) or len(u.src) > (1 if u.op is Ops.LOAD else 2) for u in register_uses):
        return None  # shared buffers and gated register accesses keep the loop
    if any(u.op is Ops.STORE and not is_register(u.src[0].src[0]) for u in body):
        return None  # a store to a global buffer inside the loop: a scan
    written = {underlying_buffer(u.src[0].src[0]) for u in register_uses if u.op is Ops.STORE}
    varying = _varying(loop, body)
    accumulator_loads: dict[UOp, UOp] = {}
    claimed: dict[UOp, set[int]] = {}
    for u in register_uses:
        index = u.src[0]
        if index.src[1] in varying:
            return None  # a register indexed by the loop: a staged strip
        register = underlying_buffer(index.src[0])
        if u.op is Ops.LOAD and register in written:
            elements = _register_elements(index.src[1])
            if elements is None or index in accumulator_loads or claimed.get(register, set()) & set(elements):
                return None  # accumulators must be distinct, known elements, each read once
            claimed.setdefault(register, set()).update(elements)
            accumulator_loads[index] = u
    folds: dict[UOp, UOp] = {}
    for u in register_uses:
        if u.op is Ops.STORE:
            update = _fold_update(u, accumulator_loads, uses)
            if update is None or update in folds:
                return None
            folds[update] = accumulator_loads[u.src[0]]
    if len(folds) != len(accumulator_loads):
        return None  # an accumulator read but not written back
    accumulators = set(accumulator_loads.values())
    reads_accumulator = _depends_on(body, accumulators)
    if any(reads_accumulator.get(source, False) for update in folds for source in update.src
           if source not in accumulators):
        return None  # a value folded in depends on an accumulator: the iterations are not independent
    if any(uses.program.get(u, 0) > uses.body.get(u, 0) + (1 if u is loop else 0)
           for u in varying if u not in accumulators and u.op is not Ops.STORE):  # END lists the STOREs
        return None  # the last iteration's value used after the loop: the vectorised one has them all
    return folds


def _depends_on(body: list[UOp], roots: set[UOp]) -> dict[UOp, bool]:
    """For every uop of ``body``: whether it depends on one of ``roots`` (uops outside do not)."""
    depends: dict[UOp, bool] = dict.fromkeys(roots, True)
    for u in body:
        depends[u] = depends.get(u, False) or any(depends.get(source, False) for source in u.src)
    return depends


def _varying(loop: UOp, body: list[UOp]) -> set[UOp]:
    """The uops of ``body`` whose value changes from one iteration to the next: those that depend on the
    loop's index or on something loaded inside the loop."""
    depends = _depends_on(body, {loop} | {u for u in body if u.op is Ops.LOAD})
    return {loop} | {u for u, flag in depends.items() if flag}
