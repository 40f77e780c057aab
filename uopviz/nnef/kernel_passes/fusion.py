"""Fusing the kernels of an NNEF graph: a tensor that only feeds later kernels of the same program
is computed where it is read instead of being stored and loaded.

Every operation lowers to kernels of its own (``uopviz.nnef.lowering``); a ResNet-50 block is a
convolution, six batch-norm operations and a ReLU: eight kernels, seven intermediate tensors of
the activation's size.  :func:`fuse_kernels` folds such chains into one kernel before the
pipeline compiles them:

- an **elementwise** producer (a kernel without a reduction) is inlined into each kernel that
  reads its tensor, where every read is made once per output element (outside the reader's
  reductions): the per-channel parameter chains of batch norm, copies, and elementwise tails;
- a **reducing** producer (a convolution, a matmul) is inlined into its only reader when that
  reader reads each of its elements exactly once, at the position of its own output (the bias,
  batch-norm and ReLU tail after a convolution; the residual add).

A producer's tensor must be written by that kernel alone, over its whole extent, by one
ungated store, be no graph output and no input of a later program; the inputs the producer reads
must not change between the two kernels.  The fused kernel keeps the reader's name and
operation; its ``fused`` lists the operations folded into it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from uopviz.core.affine import range_sum
from uopviz.core.ops import AxisType, Ops
from uopviz.core.origins import carry_origins
from uopviz.core.rewrite import substitute
from uopviz.core.uop import UOp, toposort
from uopviz.nnef.lowering.kernel_builder import LoweredKernel
from uopviz.nnef.lowering.kernel_math import gate_loads
from uopviz.nnef.model.nodes import Operation
from uopviz.passes.indexing import simplify_indices
from uopviz.passes.rangeify import drop_unread_params

__all__ = ["Producer", "dense_walk", "fuse_kernels", "producer_form"]


@dataclass(frozen=True)
class Producer:
    """What inlining needs of a producer kernel: its stored value and the strides of its ranges."""

    value: UOp
    strides: dict[UOp, int]  # output range -> its coefficient in the flat store index
    reduces: bool
    params: dict[int, UOp]  # the PARAMs the value reads, by slot
    ranges: tuple[UOp, ...]  # every range of the value


def _const_bound(r: UOp) -> int | None:
    bound = r.src[0]
    return int(bound.arg[0]) if bound.op is Ops.CONST else None


def dense_walk(affine: tuple[dict[UOp, int], int] | None) -> int | None:
    """The element count an index walks when it is a dense row-major walk (``affine``: its
    :func:`~uopviz.core.affine.range_sum`; a mixed-radix sum of LOOP ranges of constant bounds,
    from 0, every element once); None otherwise."""
    if affine is None or affine[1] != 0:
        return None
    expected = 1
    for r, stride in sorted(affine[0].items(), key=lambda pair: pair[1]):
        bound = _const_bound(r)
        if bound is None or r.arg[1] is not AxisType.LOOP or stride != expected:
            return None
        expected *= bound
    return expected


def _params(ast: UOp) -> dict[int, UOp]:
    return {u.arg.slot: u for u in ast.toposort() if u.op is Ops.PARAM}


@dataclass(frozen=True)
class _Facts:
    """What :func:`producer_form` needs to know of a value's whole graph, in the order a toposort
    meets it: its PARAMs and RANGEs, the PARAMs it indexes, whether it has a reduction and whether it
    has a node a producer must not have.  Facts of a node follow from its sources' facts, so a
    fused value's facts cost only its new nodes (a chain of n kernels: O(n), not O(n²))."""

    params: tuple[UOp, ...]
    ranges: tuple[UOp, ...]
    indexed: frozenset[UOp]
    reduces: bool
    forbidden: bool


_NO_FACTS = _Facts((), (), frozenset(), False, False)


def _merged(first: tuple[UOp, ...], second: tuple[UOp, ...]) -> tuple[UOp, ...]:
    """``first`` then what ``second`` adds: the order a depth-first toposort meets them in (a
    source's subgraph already walked is skipped whole, so the rest keeps its order)."""
    if not second or second is first:
        return first
    if not first:
        return second
    return tuple(dict.fromkeys(first + second))


def _node_facts(u: UOp, known: dict[UOp, _Facts]) -> _Facts:
    facts = _NO_FACTS
    for s in u.src:
        other = known[s]
        if facts is _NO_FACTS:
            facts = other
        elif other is not facts and other is not _NO_FACTS:
            facts = _Facts(
                _merged(facts.params, other.params),
                _merged(facts.ranges, other.ranges),
                facts.indexed | other.indexed,
                facts.reduces or other.reduces,
                facts.forbidden or other.forbidden,
            )
    if u.op is Ops.PARAM:
        facts = replace(facts, params=_merged(facts.params, (u,)))
    elif u.op is Ops.RANGE:
        facts = replace(facts, ranges=_merged(facts.ranges, (u,)))
    elif u.op is Ops.INDEX and u.src and u.src[0].op is Ops.PARAM:
        facts = replace(facts, indexed=facts.indexed | {u.src[0]})
    elif u.op is Ops.REDUCE:
        facts = replace(facts, reduces=True)
    elif u.op in (Ops.STORE, Ops.CUSTOM, Ops.WMMA):
        facts = replace(facts, forbidden=True)
    return facts


def _facts(root: UOp, known: dict[UOp, _Facts]) -> _Facts:
    """The facts of ``root``'s graph, walking only the nodes ``known`` has no facts of yet (and
    remembering theirs there)."""
    if root not in known:
        for u in toposort([root], lambda node: () if node in known else node.src):
            if u not in known:
                known[u] = _node_facts(u, known)
    return known[root]


def producer_form(kernel: LoweredKernel, known: dict[UOp, _Facts] | None = None) -> Producer | None:
    """The producer form of ``kernel``, or None when its tensor cannot be computed where it is read.
    ``known``: facts of nodes seen before (:class:`_Facts`), kept between calls by the fuser."""
    ast = kernel.ast
    if kernel.scratch or ast.op is not Ops.SINK or len(ast.src) != 1:
        return None
    store = ast.src[0]
    if store.op is not Ops.STORE or len(store.src) != 2 or store.src[0].op is not Ops.INDEX:
        return None
    target, index = store.src[0].src[0], store.src[0].src[1]
    value = store.src[1]
    if target.op is not Ops.PARAM or target.arg.slot != 0 or value.dtype.count != 1:
        return None
    facts = _facts(value, {} if known is None else known)
    if target in facts.indexed:
        return None  # it reads what it writes
    if facts.forbidden:
        return None
    affine = range_sum(index)
    if dense_walk(affine) != target.shape[0]:  # the store covers the tensor exactly once
        return None
    strides = affine[0]
    for u in facts.ranges:
        if u not in strides and (u.arg[1] is not AxisType.REDUCE or _const_bound(u) is None):
            return None
    params = {u.arg.slot: u for u in facts.params}
    return Producer(value, strides, facts.reduces, params, facts.ranges)


def _loads_of(nodes: list[UOp], slot: int) -> list[UOp] | None:
    """The LOADs of PARAM ``slot`` among ``nodes``; None when the slot is also stored to or used
    otherwise."""
    loads = []
    for u in nodes:
        if u.op is Ops.INDEX and u.src[0].op is Ops.PARAM and u.src[0].arg.slot == slot:
            continue
        for s in u.src:
            if s.op is Ops.INDEX and s.src[0].op is Ops.PARAM and s.src[0].arg.slot == slot:
                if u.op is not Ops.LOAD or s is not u.src[0]:
                    return None
                loads.append(u)
    return loads


def _range_map(producer: Producer, index: UOp, reader_loops: set[UOp] | None) -> dict[UOp, UOp] | None:
    """The producer's output ranges as the reader's ranges, when ``index`` reads each producer range's
    position through one reader range of equal bound and stride; None otherwise.  With
    ``reader_loops``, those ranges must all take part (each element is read exactly once)."""
    affine = range_sum(index)
    if affine is None or affine[1] != 0 or len(affine[0]) != len(producer.strides):
        return None
    by_stride = {stride: r for r, stride in affine[0].items()}
    mapping = {}
    for r, stride in producer.strides.items():
        found = by_stride.get(stride)
        if found is None or found.op is not Ops.RANGE or _const_bound(found) != _const_bound(r):
            return None
        if found.arg[1] is not AxisType.LOOP:
            return None
        mapping[r] = found
    if reader_loops is not None and set(mapping.values()) != reader_loops:
        return None
    return mapping


def _unflattened(producer: Producer, index: UOp) -> dict[UOp, UOp]:
    """The producer's output ranges as divisions of a flat read position."""
    ordered = sorted(producer.strides.items(), key=lambda pair: -pair[1])
    mapping = {}
    for position, (r, stride) in enumerate(ordered):
        part = index if stride == 1 else UOp(Ops.IDIV, (index, UOp.const(index.dtype, stride)))
        mapping[r] = part if position == 0 else UOp(Ops.MOD, (part, UOp.const(index.dtype, _const_bound(r))))
    return mapping


def _reader_loops(nodes: list[UOp]) -> set[UOp]:
    """The output ranges of a kernel (its ``nodes``): those of its store indices."""
    loops: set[UOp] = set()
    for store in (u for u in nodes if u.op is Ops.STORE):
        loops |= {u for u in store.src[0].toposort() if u.op is Ops.RANGE}
    return loops


def _reduce_free(index: UOp) -> bool:
    return not any(u.op is Ops.RANGE and u.arg[1] is not AxisType.LOOP for u in index.toposort())


class _Fuser:
    """The kernels of one program, fused producer by producer (in run order).  Identical kernels
    fuse identically (a ResNet's repeated blocks): the fused ASTs are remembered by the two ASTs and
    how their buffers coincide."""

    def __init__(self, kernels: list[LoweredKernel], kept: set[str]) -> None:
        self.kernels: list[LoweredKernel | None] = list(kernels)
        self.kept = kept
        self.writers: dict[str, list[int]] = {}
        self.readers: dict[str, set[int]] = {}
        for position, kernel in enumerate(kernels):
            self.writers.setdefault(kernel.buffers[0], []).append(position)
            for name in kernel.buffers[1:]:
                self.readers.setdefault(name, set()).add(position)
        self._producers: dict[UOp, Producer | None] = {}
        self._known: dict[UOp, _Facts] = {}  # facts of every value seen: a fused value's cost its new nodes
        # the operations folded into each fused kernel, as a tree (source's, its operation, reader's)
        # flattened once at the end: concatenating them at each step cost O(n²) on a chain of n
        self._folds: dict[int, _Folds] = {}
        self._inlined: dict[tuple, tuple[UOp, tuple[tuple[int, int], ...]] | None] = {}

    def run(self) -> list[LoweredKernel]:
        for position in range(len(self.kernels)):
            self._try(position)
        for position, folds in self._folds.items():
            kernel = self.kernels[position]
            if kernel is not None:
                self.kernels[position] = replace(kernel, fused=_flattened(folds))
        return [kernel for kernel in self.kernels if kernel is not None]

    def _try(self, position: int) -> None:
        kernel = self.kernels[position]
        assert kernel is not None
        tensor = kernel.buffers[0]
        if tensor in self.kept or self.writers.get(tensor) != [position]:
            return
        readers = sorted(self.readers.get(tensor, ()))
        if not readers or readers[0] < position:
            return
        if any(max(self.writers.get(name, [-1])) >= position for name in kernel.buffers[1:]):
            return  # an input written again by this or a later kernel (in place): keep the order
        if kernel.ast not in self._producers:
            self._producers[kernel.ast] = producer_form(kernel, self._known)
        producer = self._producers[kernel.ast]
        if producer is None or (len(readers) > 1 and producer.reduces):
            return
        fused = {}
        for reader in readers:
            result = self._inline(producer, position, reader, tensor)
            if result is None:
                return
            fused[reader] = result
        source_folds = self._folds_of(position)
        self.kernels[position] = None
        self._folds.pop(position, None)
        self.writers.pop(tensor)
        self.readers.pop(tensor, None)
        for reader, result in fused.items():
            self.kernels[reader] = result
            self._folds[reader] = (source_folds, kernel.operation, self._folds_of(reader))
            for name in result.buffers[1:]:
                self.readers.setdefault(name, set()).add(reader)

    def _folds_of(self, position: int) -> _Folds:
        kernel = self.kernels[position]
        assert kernel is not None
        return self._folds.get(position, kernel.fused)

    def _inline(
        self, producer: Producer, source_position: int, reader_position: int, tensor: str
    ) -> LoweredKernel | None:
        source, reader = self.kernels[source_position], self.kernels[reader_position]
        assert source is not None and reader is not None
        if reader.buffers[0] == tensor or reader.buffers.count(tensor) != 1:
            return None
        key = (
            source.ast,
            reader.ast,
            reader.buffers.index(tensor),
            tuple(source.buffers.index(name) for name in source.buffers),
            tuple(reader.buffers.index(name) for name in reader.buffers),
            tuple(reader.buffers.index(name) if name in reader.buffers else -1 for name in source.buffers),
        )
        if key not in self._inlined:
            self._inlined[key] = _inline(producer, source.buffers, reader.ast, reader.buffers, key[2])
        found = self._inlined[key]
        if found is None:
            return None
        ast, references = found
        sides = (reader.buffers, source.buffers)
        buffers = [sides[side][index] for side, index in references]
        return replace(reader, ast=ast, buffers=buffers)  # its fused: self._folds (run)


#: the operations folded into a kernel: its own ``fused``, or a (producer's, producer's operation,
#: reader's) triple of them
_Folds = tuple


def _flattened(folds: _Folds) -> tuple[Operation, ...]:
    """The operations of a folds tree in order, each once (where first met): what concatenating and
    deduplicating at each fusion step gave.  A subtree met again adds nothing and is not walked."""
    out: dict[Operation, None] = {}
    walked: set[int] = set()
    stack: list[Any] = [folds]
    while stack:
        item = stack.pop()
        if isinstance(item, tuple):
            if id(item) in walked:
                continue
            walked.add(id(item))
            stack.extend(reversed(item))
        else:
            out.setdefault(item, None)
    return tuple(out)


def _inline(
    producer: Producer, source_buffers: list[str], reader: UOp, reader_buffers: list[str], slot: int
) -> tuple[UOp, tuple[tuple[int, int], ...]] | None:
    """The reader's AST with every load of its PARAM ``slot`` replaced by the producer's value, and
    its buffers after that as references ``(0, reader's slot)`` or ``(1, producer's slot)``; None
    when not allowed."""
    nodes = reader.toposort()
    loads = _loads_of(nodes, slot)
    if not loads or (producer.reduces and len(loads) != 1):
        return None
    references = [(0, index) for index in range(len(reader_buffers))]
    reader_params = {u.arg.slot: u for u in nodes if u.op is Ops.PARAM}
    param_map: dict[UOp, UOp] = {}
    for source_slot, param in producer.params.items():
        name = source_buffers[source_slot]
        if name in reader_buffers:
            target_slot = reader_buffers.index(name)
        else:
            target_slot = len(references)
            references.append((1, source_slot))
        target = reader_params.get(target_slot)
        if target is None:
            arg = param.arg
            target = UOp.param(target_slot, param.shape, arg.dtype, arg.device, arg.addrspace)
        elif target.arg.dtype != param.arg.dtype or target.shape != param.shape:
            return None
        if target is not param:
            param_map[param] = target
    fresh = _fresh_ranges(producer, nodes)
    needs_tidy = False
    anywhere: set[UOp] = set()  # loads whose flat index may point outside the producer's tensor
    mappings: dict[UOp, dict[UOp, UOp]] = {}  # each load -> the producer's ranges as the reader's
    for load in loads:
        index = load.src[0].src[1]
        if producer.reduces:
            if len(load.src) != 1:
                return None
            ranges = _range_map(producer, index, _reader_loops(nodes))
        else:
            if not _reduce_free(index):
                return None
            ranges = _range_map(producer, index, None)
            if ranges is None:
                ranges, needs_tidy = _unflattened(producer, index), True
                anywhere.add(load)
        if ranges is None:
            return None
        mappings[load] = ranges
    compacted = None if needs_tidy else _compacted_at_once(producer, reader, mappings, {**param_map, **fresh})
    if compacted is not None:
        ast, kept = compacted
        return ast, tuple(references[old] for old in kept)
    replaced: dict[UOp, UOp] = {}
    for load, ranges in mappings.items():
        mapping = {**param_map, **fresh, **ranges}
        replaced[load] = _inlined_value(producer.value, load, mapping, replaced, load in anywhere)
    ast, kept = drop_unread_params(substitute(reader, replaced), references, keep=(0,))  # 0: the output
    if needs_tidy:
        ast = simplify_indices(ast)
    return ast, tuple(kept)


def _inlined_value(
    value: UOp, load: UOp, mapping: dict[UOp, UOp], earlier: dict[UOp, UOp], anywhere: bool
) -> UOp:
    """The producer's ``value`` read where ``load`` was: ``mapping`` applied (its identities left
    out: a value whose PARAMs and ranges stay is not walked), gated as ``load`` was.  The gate and
    the alternative get the ``earlier`` loads' values too: abs(x) = x < 0 ? -x : x gates its loads
    of x by a load of x, which would otherwise still read the tensor no kernel writes any more.
    The value's own loads are gated too only where the read position may lie outside the producer's
    tensor (``anywhere``: a flat index); read at the producer's own ranges they are in bounds, and
    a copy of the value per gate grew a chain of n abs exponentially."""
    inlined = substitute(value, {key: new for key, new in mapping.items() if key is not new})
    carry_origins(value, inlined)  # the producer's nodes, read here, are still its operation's
    value = inlined
    if len(load.src) == 3:
        alternative, gate = substitute(load.src[1], earlier), substitute(load.src[2], earlier)
        value = UOp(Ops.WHERE, (gate, gate_loads(value, gate) if anywhere else value, alternative))
    return value


def _compacted_at_once(
    producer: Producer, reader: UOp, mappings: dict[UOp, dict[UOp, UOp]], renamed: dict[UOp, UOp]
) -> tuple[UOp, list[int]] | None:
    """What :func:`~uopviz.passes.rangeify.drop_unread_params` makes of ``reader`` with the producer's
    value in place of each load (``mappings``: the load -> the producer's ranges as the reader's;
    ``renamed``: the producer's
    PARAMs as the reader's and its reductions renumbered), and the old slot of each new one —
    without walking the inlined value twice.  The slots the result keeps are those the reader still
    reaches (its graph with the replaced loads left out) and the producer's, so each PARAM goes to
    its compacted slot in one substitution: a chain of n fused kernels costs O(n), not O(n²) (each
    step renumbered the whole chain to a new slot and back).  None (do it in two steps) when an
    index the value takes in has PARAMs (a gather): the second substitution would renumber those
    inside the value too."""
    for ranges in mappings.values():
        if any(u.op is Ops.PARAM for new in ranges.values() for u in new.toposort()):
            return None
    reached = toposort([reader], lambda u: u.src[1:] if u in mappings else u.src)  # a gate stays
    targets = [renamed.get(param, param) for param in producer.params.values()]
    params: dict[int, UOp] = {}
    for param in [*(u for u in reached if u.op is Ops.PARAM), *targets]:
        if params.setdefault(param.arg.slot, param) is not param:
            return None  # two PARAMs of one slot: one substitution per slot would miss one
    used = sorted(params)
    if 0 not in used:
        used.insert(0, 0)
    renumbered: dict[UOp, UOp] = {}
    for new_slot, old_slot in enumerate(used):
        param = params.get(old_slot)
        if param is not None and new_slot != old_slot:
            arg = param.arg
            renumbered[param] = UOp.param(new_slot, param.shape, arg.dtype, arg.device, arg.addrspace)
    into_value = {**renamed, **{param: renumbered.get(target, target)
                                for param, target in zip(producer.params.values(), targets, strict=True)}}
    replaced: dict[UOp, UOp] = dict(renumbered)
    for load, ranges in mappings.items():
        replaced[load] = _inlined_value(producer.value, load, {**into_value, **ranges}, replaced, False)
    return substitute(reader, replaced), used


def _fresh_ranges(producer: Producer, reader_nodes: list[UOp]) -> dict[UOp, UOp]:
    """The producer's reduction ranges renumbered past every range of the reader (two kernels number
    their ranges from 0: equal numbers and bounds would be one UOp)."""
    # in the producer's own order (its numbers), not the order the AST first meets them: a conv's
    # input channels stay the outer reduction (a fused conv that reduced over kernel rows and columns
    # first read its input a channel apart innermost, and the heuristic then staged strips of it
    # and streamed the filters once per output tile: ResNet-50's 256-channel 3x3, half the GFLOP/s)
    inner = sorted((r for r in producer.ranges if r not in producer.strides), key=lambda r: r.arg[0])
    if not inner:
        return {}
    numbers = [u.arg[0] for u in reader_nodes if u.op is Ops.RANGE] + [r.arg[0] for r in producer.ranges]
    start = max(numbers) + 1
    return {r: UOp.range(r.src[0], r.arg[1], start + offset) for offset, r in enumerate(inner)}


def fuse_kernels(kernels: Iterable[LoweredKernel], kept: Iterable[str]) -> list[LoweredKernel]:
    """The kernels of one program with each tensor that only feeds later kernels computed where it is
    read, when that is cheap (see the module's docstring); ``kept`` names the tensors that must be
    stored (graph outputs, inputs of later programs)."""
    kernels = list(kernels)
    if len(kernels) < 2:
        return kernels
    return _Fuser(kernels, set(kept)).run()
