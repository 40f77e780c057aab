"""Linearize: from a kernel graph to the LINEAR program of kernel-ir.md.

Reductions arrive as REG accumulators (Instruction Selection made them: ``uopviz.passes.isel``).

**Linearize** places every UOp in the innermost loop its dependencies need (so loop-invariant
work is hoisted out of loops), nests the output loops in kernel order with each reduce loop inside
the loops around its reduction, turns each gated store into an ``IF``/``ENDIF`` block, and orders
each block topologically (ties broken by the original graph order), except that a pure value or a
load of an input the kernel never writes, used only after a loop of its block, goes after that loop,
just before its first user (a value held across a loop takes a register the loop needs).  It is one rule,
:data:`linearize_rules`' "kernel becomes LINEAR", fired on each kernel's SINK.  On backends with
workgroups the GLOBAL and LOCAL ranges have become ``SPECIAL`` thread indices before it: the GPU
backends' own rule for this stage (:mod:`uopviz.backends.gpu_rules`, run by
:func:`uopviz.passes.pipeline.run_stage`).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

from uopviz.backends.linear_program import WINDOW_MAX_TRIPS
from uopviz.core.errors import UopvizError
from uopviz.core.ops import GroupOp, Ops
from uopviz.core.rewrite import PatternMatcher, UPat
from uopviz.core.uop import UOp, toposort
from uopviz.passes.optops.axes import kernel_order
from uopviz.passes.schedule import Lowering, once_per_body, rewrite_kernel


class LinearizeError(UopvizError, ValueError):
    """A kernel graph whose dependencies do not nest into loops."""


# ---------------------------------------------------------------------------------------------
# linearize


@dataclass(eq=False)
class Block:
    """A block of the program: the function body, a loop (``opener`` is its RANGE) or an IF."""

    kind: str  # "root", "loop", "if"
    opener: UOp | None
    # the openers of the blocks around this one, outermost first (the root's is None).  Not parent
    # blocks: a parent and its children pointing at each other would leave every linearized
    # kernel's blocks to the cyclic garbage collector.
    around: tuple[UOp | None, ...]
    nodes: list[UOp] = field(default_factory=list)
    children: list[Block] = field(default_factory=list)
    closers: list[UOp] = field(default_factory=list)  # the END uops of a loop
    priority: int = 1 << 60

    @property
    def depth(self) -> int:
        return len(self.around)

    def inside(self, other: Block) -> bool:
        """True when this block is ``other`` or nested in it."""
        if other is self or other.kind == "root":
            return True
        return any(opener is other.opener for opener in self.around)

    def open_child(self, kind: str, opener: UOp) -> Block:
        """A new block inside this one."""
        child = Block(kind, opener, (*self.around, self.opener))
        self.children.append(child)
        return child


def _ranges_in_scope(order: Sequence[UOp]) -> dict[UOp, frozenset[UOp]]:
    """For every UOp, the loops it must run inside (an END leaves its loop)."""
    scope: dict[UOp, frozenset[UOp]] = {}
    empty: frozenset[UOp] = frozenset()
    for u in order:
        # most uops inherit one source's set unchanged: share it instead of building a new one
        inherited = empty
        for s in u.src:
            found = scope.get(s)
            if found is None or found is inherited:
                continue
            inherited = found if not inherited or inherited < found else (
                inherited if found <= inherited else inherited | found)
        if u.op is Ops.RANGE:
            inherited = inherited | {u}
        elif u.op is Ops.END:
            inherited = inherited - {u.src[-1]}
        scope[u] = inherited
    return scope


def _graph_order(root: UOp) -> list[UOp]:
    """Topological order of the kernel graph; a PARAM's shape is not part of the program."""
    return toposort([root], lambda node: () if node.op is Ops.PARAM else node.src)


def linearize(ast: UOp, name: str) -> UOp:
    """The LINEAR program of a kernel graph (accumulators already lowered)."""
    order = _graph_order(ast)
    priority = {u: i for i, u in enumerate(order)}
    scope = _ranges_in_scope(order)
    ranges = [u for u in order if u.op is Ops.RANGE]
    closers: dict[UOp, list[UOp]] = {}
    for u in order:
        if u.op is Ops.END:
            closers.setdefault(u.src[-1], []).append(u)
    root = Block("root", None, ())
    loop_of: dict[UOp, Block] = {}

    def depth_of(block: Block) -> int:
        return block.depth

    # output loops nest in kernel order; each reduce loop sits in the deepest loop around its END
    output_chain = kernel_order([r for r in ranges if r not in closers])
    parent = root
    for r in output_chain:
        block = parent.open_child("loop", r)
        loop_of[r] = block
        parent = block
    pending = [r for r in ranges if r in closers]
    while pending:
        progressed = False
        for r in list(pending):
            around = frozenset().union(*(scope[e] for e in closers[r])) | scope[r] - {r}
            if not all(s in loop_of for s in around):
                continue
            parent_block = max((loop_of[s] for s in around), key=depth_of, default=root)
            block = parent_block.open_child("loop", r)
            loop_of[r] = block
            pending = [p for p in pending if p is not r]
            progressed = True
        if not progressed:
            raise LinearizeError(f"kernel {name}: reduce loops {[r.arg for r in pending]} do not nest")

    # the home of every UOp: its deepest loop, an IF block for a gated store, the loop an END closes
    home: dict[UOp, Block] = {}
    if_blocks: dict[tuple[int, UOp], Block] = {}
    for u in order:
        if u.op in (Ops.SINK, Ops.GROUP, Ops.STACK) or (u.op is Ops.CONST and u not in scope):
            continue
        if u.op is Ops.RANGE:
            continue
        if u.op is Ops.END:
            block = loop_of[u.src[-1]]
            block.closers.append(u)
            home[u] = block
            continue
        loops = [loop_of[r] for r in scope[u]]
        deepest = max(loops, key=depth_of, default=root)
        if not all(deepest.inside(loop) for loop in loops):
            raise LinearizeError(f"kernel {name}: {u.op.name} depends on loops that do not nest "
                                 f"({sorted(r.arg for r in scope[u])})")
        if u.op is Ops.STORE and len(u.src) > 2 and u.src[2].dtype.count == 1:
            key = (id(deepest), u.src[2])
            block = if_blocks.get(key)
            if block is None:
                block = deepest.open_child("if", u.src[2])
                if_blocks[key] = block
            deepest = block
        deepest.nodes.append(u)
        home[u] = deepest
    sinkable = _sinkable(order)
    _sink_loads_into_tiles(order, home, sinkable)
    for block in _all_blocks(root):
        block.priority = min((priority[n] for n in _contents(block)), default=1 << 60)
    sequence: list[tuple[str, object]] = []
    _emit(root, home, _Ordering(priority, sinkable), sequence)
    return _rebuild(sequence, name)


@dataclass(frozen=True)
class _Ordering:
    """What orders a block's items: the graph order, and the uops that may sink past a loop."""

    priority: dict[UOp, int]
    sinkable: frozenset[UOp]


#: uops that compute a value and nothing else: placing one later changes no result
_PURE_OPS = GroupOp.UNARY_ALU | GroupOp.BINARY_ALU | GroupOp.TERNARY_ALU | {
    Ops.CONST, Ops.INDEX, Ops.GEP, Ops.VECTORIZE, Ops.BITCAST}


def _sinkable(order: Sequence[UOp]) -> frozenset[UOp]:
    """The pure values and the loads of inputs the kernel never stores to: these may be placed
    after a loop their users follow (:func:`_sunk_keys`).  A load through a kernel-local buffer
    or of a buffer the kernel writes keeps its place: its order against the stores is the graph's."""
    stored = {u.src[0].src[0] for u in order if u.op is Ops.STORE and u.src[0].op is Ops.INDEX}
    return frozenset(u for u in order if u.op in _PURE_OPS or (
        u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.PARAM
        and u.src[0].src[0] not in stored))


def _sink_loads_into_tiles(order: Sequence[UOp], home: dict[UOp, Block], sinkable: frozenset[UOp]) -> None:
    """A load of an input the kernel never stores to, placed in an outer loop because it depends
    on no inner one (a conv's per-channel scale, loaded once per channel tile), moves into the
    loop where all its users are when that loop holds a wide register tile's long reduction
    (:func:`_wide_tile`): there :func:`_sunk_keys` places it after the reduction.  Held in
    registers across it, the scales and shifts of a 4 x 16 tile (8 accumulators, 2 weight vectors,
    4 broadcasts) left too few of AVX2's 16 and gcc spilled in the innermost loop.  Each kernel,
    before/after in one process on the model's arrays (C, AMD EPYC): ResNet-50's 3x3 convs 0.77
    and 0.90x, its 1x1 from 256 channels 0.80x, Inception-v1's 5x5 convs 0.74-0.76x and 7x7 stem
    0.85x, MobileNet-v2's 1x1 from 384 channels 0.92-0.97x.  Narrower tiles, short reductions and
    two vectors held (a bias: they fit) measured slower moved (7 x 8 tiles up to 1.4x, 4 x 16 over
    32 channels 1.1-1.2x, Inception-v1's biased 1x1 convs at 7x7 1.1-1.2x): those stay."""
    users: dict[UOp, list[UOp]] = {}
    for u in order:
        for s in u.src:
            users.setdefault(s, []).append(u)
    moving: dict[int, list[UOp]] = {}  # a tile's block -> the loads that would move into it
    targets: dict[int, Block] = {}
    for u in order:
        if u.op is not Ops.LOAD or u not in sinkable or u not in home or not users.get(u):
            continue
        homes = {id(home.get(user)): home.get(user) for user in users[u]}
        if len(homes) != 1:
            continue
        (target,) = homes.values()
        outer = home[u]
        if target is None or target is outer or target.kind != "loop" or not target.inside(outer):
            continue
        moving.setdefault(id(target), []).append(u)
        targets[id(target)] = target
    for key, loads in moving.items():
        target = targets[key]
        # the tile takes 14 of 16 registers: two vectors held across a 1x1 conv's reduction still
        # fit; across a window's, whose unrolled taps share inputs, they did not
        window = _wide_tile(target)
        held = sum(1 for u in loads if u.dtype.count > 1)
        if window is None or (held < WIDE_TILE_HELD_VECTORS and not window):
            continue
        for u in loads:
            outer = home[u]
            outer.nodes = [node for node in outer.nodes if node is not u]  # (== on UOps builds a CMP_EQ)
            target.nodes.append(u)
            home[u] = target


#: a wide register tile (:func:`_wide_tile`): its multiply-adds and weight vectors an iteration, and
#: the iterations of its reduction; and the loaded vectors held across it that move into its loop
WIDE_TILE_FMAS, WIDE_TILE_WEIGHT_VECTORS, WIDE_TILE_MIN_TRIPS = 8, 2, 64
WIDE_TILE_HELD_VECTORS = 3


def _wide_tile(block: Block) -> bool | None:
    """None unless ``block`` holds one chain of loops (a reduction) whose innermost body does 8 or
    more vector multiply-adds on 2 or more loaded vectors, 64 iterations or more in all; then
    whether a loop of the chain is a window's (2 to 7 trips)."""
    loops = [child for child in block.children if child.kind == "loop"]
    trips, window = 1, False
    while len(loops) == 1:
        inner = loops[0]
        bound = inner.opener.src[0] if inner.opener is not None else None
        if bound is None or bound.op is not Ops.CONST:
            return None
        trips *= int(bound.arg[0])
        window = window or 2 <= int(bound.arg[0]) <= WINDOW_MAX_TRIPS
        block, loops = inner, [child for child in inner.children if child.kind == "loop"]
    if loops or block.kind != "loop" or trips < WIDE_TILE_MIN_TRIPS:
        return None
    fmas = sum(1 for u in block.nodes if u.op is Ops.MULACC and u.dtype.count > 1)
    vectors = sum(1 for u in block.nodes if u.op is Ops.LOAD and u.dtype.count > 1)
    return window if fmas >= WIDE_TILE_FMAS and vectors >= WIDE_TILE_WEIGHT_VECTORS else None


def _all_blocks(block: Block) -> list[Block]:
    out = [block]
    for child in block.children:
        out.extend(_all_blocks(child))
    return out


def _contents(block: Block) -> list[UOp]:
    out = list(block.nodes) + list(block.closers)
    if block.opener is not None and block.kind == "loop":
        out.append(block.opener)
    for child in block.children:
        out.extend(_contents(child))
    return out


def _through_groups(sources: Sequence[UOp]) -> list[UOp]:
    """``sources`` with every GROUP replaced by its members: a GROUP is not placed in a block (it
    renders nothing), so a uop after a GROUP of stores (an accumulator split into vector chunks)
    must wait for each store."""
    out: list[UOp] = []
    for s in sources:
        out.extend(_through_groups(s.src) if s.op is Ops.GROUP else (s,))
    return out


def _emit(block: Block, home: dict[UOp, Block], ordering: _Ordering,
          sequence: list[tuple[str, object]]) -> None:
    """Emit ``block``'s items (its UOps and child blocks) in dependency order, recursively."""
    items: list[object] = [*block.nodes, *block.children]
    item_of: dict[object, object] = {}
    for item in items:
        for u in ([item] if isinstance(item, UOp) else _contents(item)):
            item_of[u] = item
    depends: dict[int, set[int]] = {id(i): set() for i in items}
    users: dict[int, list[object]] = {id(i): [] for i in items}
    for item in items:
        inner = [item] if isinstance(item, UOp) else _contents(item)
        for u in inner:
            for s in _through_groups(u.src):
                owner = item_of.get(s)
                if owner is not None and owner is not item and id(owner) not in depends[id(item)]:
                    depends[id(item)].add(id(owner))
                    users[id(owner)].append(item)
        if isinstance(item, Block) and item.kind == "if":
            owner = item_of.get(item.opener)
            if owner is not None and owner is not item and id(owner) not in depends[id(item)]:
                depends[id(item)].add(id(owner))
                users[id(owner)].append(item)

    keys = _sunk_keys(items, depends, users, ordering)

    def key(item: object) -> int:
        return keys[id(item)]

    ready = [(key(i), n, i) for n, i in enumerate(items) if not depends[id(i)]]
    heapq.heapify(ready)
    counter = len(items)
    emitted = 0
    while ready:
        _, _, item = heapq.heappop(ready)
        emitted += 1
        if isinstance(item, UOp):
            sequence.append(("uop", item))
        else:
            _emit_block(item, home, ordering, sequence)
        for user in users[id(item)]:
            depends[id(user)].discard(id(item))
            if not depends[id(user)]:
                counter += 1
                heapq.heappush(ready, (key(user), counter, user))
    if emitted != len(items):
        raise LinearizeError("a dependency cycle between the uops of one loop")


def _sunk_keys(items: list[object], depends: dict[int, set[int]], users: dict[int, list[object]],
               ordering: _Ordering) -> dict[int, int]:
    """Each item's place in its block: its graph order, except that a value computed before a
    loop and used only after it goes just before its first user.  Values held across a loop take
    registers the loop needs: gcc spilled the staged input of a 1x1 convolution to the stack in
    its innermost loop (a store and eight memory operands an iteration) while holding the scales
    of the epilogue, loaded before the reduction loop, in registers."""
    base = {id(i): ordering.priority[i] if isinstance(i, UOp) else i.priority for i in items}
    loops = sorted(base[id(i)] for i in items if isinstance(i, Block))
    keys = dict(base)
    for item in reversed(_topological(items, depends, users)):
        if not isinstance(item, UOp) or item not in ordering.sinkable or not users[id(item)]:
            continue
        first_use = min(keys[id(user)] for user in users[id(item)])
        index = bisect.bisect_right(loops, base[id(item)])
        if index < len(loops) and loops[index] < first_use:
            keys[id(item)] = first_use
    return keys


def _topological(items: list[object], depends: dict[int, set[int]],
                 users: dict[int, list[object]]) -> list[object]:
    """``items`` in an order where each follows the items it depends on."""
    waiting = {id(i): len(depends[id(i)]) for i in items}
    out = [i for i in items if not waiting[id(i)]]
    for item in out:
        for user in users[id(item)]:
            waiting[id(user)] -= 1
            if not waiting[id(user)]:
                out.append(user)
    return out


def _emit_block(block: Block, home: dict[UOp, Block], ordering: _Ordering,
                sequence: list[tuple[str, object]]) -> None:
    if block.kind == "loop":
        sequence.append(("open", block))
        _emit(block, home, ordering, sequence)
        sequence.append(("close", block))
    else:
        sequence.append(("if", block))
        _emit(block, home, ordering, sequence)
        sequence.append(("endif", block))


def _rebuild(sequence: list[tuple[str, object]], name: str) -> UOp:
    """The emitted order as new UOps: one END per loop, ungated stores inside IF blocks."""
    mapping: dict[UOp, UOp] = {}
    program: list[UOp] = []
    opened: dict[int, UOp] = {}
    open_ifs: list[Block] = []
    if_count = 0

    def new(u: UOp) -> UOp:
        return mapping.get(u, u)

    for kind, item in sequence:
        if kind == "uop":
            u = item
            sources = tuple(new(s) for s in u.src)
            if open_ifs and u.op is Ops.STORE and any(n is u for n in open_ifs[-1].nodes):
                sources = sources[:2]  # the IF is the gate now
            built = u if len(sources) == len(u.src) and all(a is b for a, b in zip(sources, u.src)) \
                else UOp(u.op, sources, u.arg, u.tag)
            mapping[u] = built
            program.append(built)
        elif kind == "open":
            rng = new(item.opener)
            program.append(rng)
            opened[id(item)] = rng
        elif kind == "close":
            rng = opened[id(item)]
            body = program[-1]
            end = UOp(Ops.END, (body, rng)) if body is not rng else UOp(Ops.END, (rng,))
            for closer in item.closers:
                mapping[closer] = end
            program.append(end)
        elif kind == "if":
            # the tag tells apart two IF blocks on one gate (UOps are hash-consed)
            if_uop = UOp(Ops.IF, (new(item.opener),), None, if_count or None)
            if_count += 1
            opened[id(item)] = if_uop
            open_ifs.append(item)
            program.append(if_uop)
        elif kind == "endif":
            open_ifs.pop()
            program.append(UOp(Ops.ENDIF, (opened[id(item)],)))
    return UOp(Ops.LINEAR, tuple(program), name)


@dataclass(frozen=True)
class LinearizeContext:
    """The kernel being linearized (its root SINK) and its name, the LINEAR's arg."""

    kernel: UOp
    name: str


def kernel_to_linear(ctx: LinearizeContext, sink: UOp) -> UOp | None:
    """The kernel's SINK becomes its LINEAR program (see :func:`linearize`)."""
    return linearize(sink, ctx.name) if sink is ctx.kernel else None


#: Linearize's rules: one, as the ordering is a whole-kernel decision (each node's loop and block,
#: each block's order), made where the walk reaches the kernel's SINK
linearize_rules = PatternMatcher([
    (UPat(Ops.SINK, name="sink"), kernel_to_linear, "kernel becomes LINEAR"),
], name="linearize")


def linearize_kernel(ast: UOp, name: str) -> UOp:
    """The LINEAR program of one kernel (a pass ``linearize <name>`` in the trace, one step named
    after the rule).  GPU backends have made GLOBAL/LOCAL ranges SPECIAL thread indices first (their
    ``extra_rules``)."""
    linear = rewrite_kernel(ast, linearize_rules, LinearizeContext(ast, name), name=f"linearize {name}")
    if linear.op is not Ops.LINEAR:
        raise LinearizeError(f"kernel {name}: its body is {ast.op.name}, not a SINK to linearize")
    return linear


def linearize_stage(lowering: Lowering) -> None:
    """Linearize: every kernel as a LINEAR program."""
    bodies = once_per_body(lowering, lambda item: linearize_kernel(item.body, item.kernel.name))
    lowering.replace_bodies(bodies)


__all__ = ["LinearizeContext", "LinearizeError", "kernel_to_linear", "linearize", "linearize_kernel",
           "linearize_rules", "linearize_stage"]
