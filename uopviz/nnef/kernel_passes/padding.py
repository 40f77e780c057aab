"""Padded inputs for guarded reads in sums and maxima: a convolution's zero padding (a max pool's
-inf border) materialised once.

A convolution reads its input at ``|stride * i + dilation * j - offset|``: the guard makes every
read near the border skip its term (:mod:`uopviz.nnef.lowering`).  In the kernel that is a gated
LOAD and a WHERE around the product, evaluated for every multiply-add of the innermost loops: the
C compiler cannot vectorise gathers under per-lane masks (a 64-channel 56x56 3x3 conv: 20 GFLOP/s
gated, 120 reading a padded copy, same run on 2 cores).

:func:`pad_guarded_reads` removes the gates where it is exact to do so: for a load

- inside an ADD (or float MAX) reduction, of a tensor the kernel does not write, whose static
  shape is known;
- gated only by bounds tests of its own positions (``p >= 0``, ``p < extent``), each position a
  linear sum of ranges (and bounded terms such as a grouped conv's ``n // m``), the flat index
  the row-major sum of those positions and of in-range unguarded ones (checked as an identity of
  the linear forms);
- where every use of those tests outside the load is a WHERE that replaces a product having the
  load as a factor with 0 (the skipped term); or, in a MAX reduction of floats, a WHERE that
  replaces the load itself with -inf: a max pool's ignored border, padded with -inf

a small kernel copies the tensor into a padded scratch buffer (``name#pad...``, padded by exactly
how far the positions reach outside, with the reduction's identity), and the load reads that
buffer at the shifted position without a gate; the gates become true and the simplifier drops
them.  A skipped term and ``0 * w`` differ only where ``w`` is infinite or NaN (a weight the
product then makes NaN), the same convention as every zero-padding convolution library.
Kernels reading the same tensor with the same padding share one pad kernel while the tensor is
not written again.

When nothing else reads the tensor (and the graph does not output it), there is no copy at all:
its one producer stores into the interior of the padded buffer, and border kernels fill the rest
with the padding's value, one per padded axis whose two sides are equally deep, else one per
padded side (MobileNet-v2's expand conv feeding a padded depthwise conv: 4.9 MB written once
instead of written, read and written again).  Padded buffers of one border (one padded shape,
padding and fill) alive one after the other are one buffer, its border filled once by the first
one's border kernels: a network repeats its block shapes (DenseNet-121: 313 kernels -> 205,
ResNet-50 93 -> 75, MobileNet-v2 95 -> 81).
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from uopviz.core.affine import build_range_sum, range_sum
from uopviz.core.dtype import dtypes
from uopviz.core.ops import AxisType, Ops
from uopviz.core.rewrite import substitute
from uopviz.core.uop import UOp
from uopviz.nnef.kernel_passes.fusion import producer_form
from uopviz.nnef.lowering.kernel_builder import LoweredKernel
from uopviz.nnef.lowering.kernel_math import uop_constant, uop_dtype
from uopviz.passes.indexing import simplify_indices
from uopviz.passes.rangeify import finish_kernel

if TYPE_CHECKING:
    from uopviz.nnef.model.graph import ComposedGraph

__all__ = ["pad_guarded_reads"]

# ranges of the pad kernels: numbers of their own (one kernel, no clash with the reader's)
_RANGE_BASE = 0


@dataclass(frozen=True)
class _Plan:
    """How one guarded load becomes an ungated load of a padded copy of its tensor."""

    load: UOp
    tensor: str
    shape: tuple[int, ...]
    positions: tuple[tuple[dict[UOp, int], int], ...]  # affine position per axis
    low: tuple[int, ...]
    high: tuple[int, ...]
    atoms: frozenset[UOp]  # the bounds tests that gate it
    fill: float = 0.0  # what the padding holds: the identity of the reduction the load is in

    @property
    def padded_shape(self) -> tuple[int, ...]:
        return tuple(s + lo + hi for s, lo, hi in zip(self.shape, self.low, self.high))

    @property
    def buffer(self) -> str:
        pads = "_".join(f"{lo}-{hi}" for lo, hi in zip(self.low, self.high))
        fill = "" if self.fill == 0 else f"#{self.fill}"
        return f"{self.tensor}#pad{pads}{fill}"


def _conjuncts(gate: UOp) -> list[UOp]:
    if gate.op is Ops.AND and gate.dtype.is_bool:
        return [*_conjuncts(gate.src[0]), *_conjuncts(gate.src[1])]
    return [gate]


def _bound_test(atom: UOp) -> tuple[UOp, str, int] | None:
    """``(position, 'low' | 'high', bound)`` of ``p >= 0`` / ``p < bound``; None for other tests."""
    if len(atom.src) != 2 or atom.src[1].op is not Ops.CONST:
        return None
    bound = atom.src[1].arg[0]
    if not isinstance(bound, int) or isinstance(bound, bool):
        return None
    if atom.op is Ops.CMP_GE and bound == 0:
        return atom.src[0], "low", 0
    if atom.op is Ops.CMP_LT:
        return atom.src[0], "high", bound
    return None


def _is_integer(u: UOp) -> bool:
    """Whether ``u`` is an index or integer expression that can be a term of :func:`index_linear_form` of its
    own. Not a cast: one from a float has no bounds worth having, and one from an integer is looked
    through by range_sum."""
    return (u.dtype is dtypes.index or u.dtype.is_int) and u.op is not Ops.CAST


def index_linear_form(u: UOp) -> tuple[dict[UOp, int], int] | None:
    """``u`` as ``sum(coeff * term) + const``; a term is a RANGE or any other index expression that
    is not a sum or a product by a constant (a grouped conv's ``n // m``), bounded by its min_max."""
    return range_sum(u, _is_integer) if u.dtype is dtypes.index or u.dtype.is_int else None


def _bounds(term: UOp) -> tuple[object, object]:
    """The least and largest value of a term (the core's min_max does not bound divisions)."""
    if term.op in (Ops.IDIV, Ops.MOD) and term.src[1].op is Ops.CONST:
        divisor = term.src[1].arg[0]
        inner = index_linear_form(term.src[0])
        span = None if inner is None else index_span(*inner)
        if isinstance(divisor, int) and divisor > 0 and span is not None and span[0] >= 0:
            if term.op is Ops.IDIV:
                return span[0] // divisor, span[1] // divisor
            return 0, min(divisor - 1, span[1])
    return term.min_max


def index_span(terms: dict[UOp, int], constant: int) -> tuple[int, int] | None:
    """The least and largest value of ``sum(coefficient * term) + constant`` (a linear form of
    :func:`index_linear_form`), or None where a term has no integer bounds."""
    low = high = constant
    for term, coefficient in terms.items():
        least, most = _bounds(term)
        if not isinstance(least, int) or not isinstance(most, int):
            return None
        reach = sorted((coefficient * least, coefficient * most))
        low, high = low + reach[0], high + reach[1]
    return low, high


def _subtract(a: tuple[dict[UOp, int], int], b: tuple[dict[UOp, int], int], factor: int):
    terms = dict(a[0])
    for r, c in b[0].items():
        terms[r] = terms.get(r, 0) - c * factor
    return {r: c for r, c in terms.items() if c}, a[1] - b[1] * factor


def _unguarded(residual, axes: list[int], shape, strides) -> dict[int, tuple[dict[UOp, int], int]] | None:
    """``residual`` as ``sum(position[axis] * stride)`` over ``axes`` with every position in range."""
    terms, constant = residual
    positions: dict[int, tuple[dict[UOp, int], int]] = {axis: ({}, 0) for axis in axes}
    ordered = sorted(axes, key=lambda axis: -strides[axis])
    for r, coefficient in terms.items():
        axis = next((a for a in ordered if coefficient % strides[a] == 0), None)
        if axis is None:
            return None
        positions[axis][0][r] = coefficient // strides[axis]
    for axis in ordered:
        share, constant = divmod(constant, strides[axis])
        positions[axis] = (positions[axis][0], share)
    if constant:
        return None
    for axis, position in positions.items():
        span = index_span(*position)
        if span is None or span[0] < 0 or span[1] >= shape[axis]:
            return None
    return positions


def _plan(load: UOp, kernel: LoweredKernel, graph: ComposedGraph) -> _Plan | None:
    """The padded form of a guarded load, when exact (see the module's docstring)."""
    address, alternative, gate = load.src
    param, flat = address.src
    if param.op is not Ops.PARAM or alternative.op is not Ops.CONST or alternative.arg[0] != 0:
        return None
    slot = param.arg.slot
    if slot <= 0 or slot >= len(kernel.buffers) or kernel.buffers[slot] == kernel.buffers[0]:
        return None
    name = kernel.buffers[slot]
    tensor = graph.tensors.get(name)
    if tensor is None or not tensor.is_static or uop_dtype(tensor.dtype) is not load.dtype:
        return None
    shape = tuple(int(s) for s in tensor.upper_shape)
    if not shape or math.prod(shape) != param.shape[0]:
        return None
    # the simplifier moves constants across a test (i + j - 1 < 6 becomes i + j < 7): tests of one
    # position are grouped by its ranges and coefficients, the constant is set per axis below
    tests: dict[frozenset, dict[str, tuple[int, int]]] = {}
    terms_of: dict[frozenset, dict[UOp, int]] = {}
    atoms = _conjuncts(gate)
    for atom in atoms:
        found = _bound_test(atom)
        if found is None:
            return None
        affine = index_linear_form(found[0])
        if affine is None or not affine[0] or index_span(*affine) is None:
            return None
        key = frozenset(affine[0].items())
        terms_of[key] = affine[0]
        tests.setdefault(key, {})[found[1]] = (affine[1], found[2])
    whole = index_linear_form(flat)
    if whole is None or len(tests) > len(shape):
        return None
    guarded = list(tests)
    strides = [math.prod(shape[axis + 1 :]) for axis in range(len(shape))]
    for axes in itertools.permutations(range(len(shape)), len(guarded)):
        positions: dict[int, tuple[dict[UOp, int], int]] = {}
        for axis, key in zip(axes, guarded):
            sides = tests[key]
            # the position's constant: from p + c >= 0, else from p + c' < bound read as extent shape
            high = sides.get("high")
            constant = sides["low"][0] if "low" in sides else high[0] - high[1] + shape[axis]
            if high is not None and high[1] - high[0] + constant != shape[axis]:
                break
            first, last = index_span(terms_of[key], constant)
            # an untested side must hold anyway (the lowering proved it and left the test out)
            if ("low" not in sides and first < 0) or (high is None and last >= shape[axis]):
                break
            positions[axis] = (terms_of[key], constant)
        else:
            residual = whole
            for axis, affine in positions.items():
                residual = _subtract(residual, affine, strides[axis])
            others = _unguarded(residual, [a for a in range(len(shape)) if a not in axes], shape, strides)
            if others is None:
                continue
            low = [0] * len(shape)
            high_pad = [0] * len(shape)
            for axis, affine in positions.items():
                first, last = index_span(*affine)
                low[axis], high_pad[axis] = max(0, -first), max(0, last - shape[axis] + 1)
            positions.update(others)
            return _Plan(
                load, name, shape, tuple(positions[a] for a in range(len(shape))), tuple(low),
                tuple(high_pad), frozenset(atoms),
            )
    return None


def _factors(u: UOp) -> list[UOp]:
    if u.op is Ops.MUL and not u.dtype.is_int and u.dtype is not dtypes.index:
        return [*_factors(u.src[0]), *_factors(u.src[1])]
    return [u]


def _gates_only_skip_terms(value: UOp, plans: list[_Plan], op: Ops) -> bool:
    """Whether every use of the plans' bounds tests (besides their loads) skips a term the padding's
    value leaves out of the reduction anyway: in a sum, a product with one of the loads as a factor
    replaced by 0 (0 read from the padding makes it 0); in a max, the load itself replaced by
    -inf, which the padding then holds."""
    gating = set().union(*(plan.atoms for plan in plans))
    loads = {plan.load for plan in plans}
    for u in value.toposort():  # sources first: an AND of tests is known before its users
        if u in gating or not any(s in gating for s in u.src):
            continue
        if u.op is Ops.AND:
            gating.add(u)
        elif u.op is Ops.LOAD and u in loads:
            continue
        elif u.op is Ops.WHERE and u.src[0] in gating and not any(s in gating for s in u.src[1:]):
            skipped = u.src[2]
            if skipped.op is not Ops.CONST or skipped.arg[0] != _IDENTITY[op]:
                return False
            if op is Ops.ADD and not loads & set(_factors(u.src[1])):
                return False
            if op is not Ops.ADD and u.src[1] not in loads:
                return False
        else:
            return False
    return True


#: the reductions whose guarded terms can read a padding instead, and the value the padding holds
_IDENTITY = {Ops.ADD: 0.0, Ops.MAX: -math.inf}


def _padded_kernel(kernel: LoweredKernel, graph: ComposedGraph) -> tuple[LoweredKernel, list[_Plan]] | None:
    ast = kernel.ast
    plans: list[_Plan] = []
    for reduce in (u for u in ast.toposort() if u.op is Ops.REDUCE and u.arg[0] in _IDENTITY):
        op = reduce.arg[0]
        found: list[_Plan] = []
        for u in reduce.src[0].toposort():
            if u.op is Ops.LOAD and len(u.src) == 3 and all(p.load is not u for p in plans + found):
                if op is not Ops.ADD and not u.dtype.is_float:
                    continue  # an integer max has no infinity to pad with
                plan = _plan(u, kernel, graph)
                if plan is not None and (any(plan.low) or any(plan.high)):
                    found.append(replace(plan, fill=_IDENTITY[op]))
        if found and not _gates_only_skip_terms(reduce.src[0], found, op):
            return None
        plans += found
    if not plans:
        return None
    true = uop_constant(dtypes.bool, True)
    mapping: dict[UOp, UOp] = {}
    buffers = list(kernel.buffers)
    scratch = dict(kernel.scratch)
    for plan in plans:
        mapping.update({atom: true for atom in plan.atoms})
        if plan.buffer not in buffers:
            buffers.append(plan.buffer)
        slot = buffers.index(plan.buffer)
        size = math.prod(plan.padded_shape)
        arg = plan.load.src[0].src[0].arg
        param = UOp.param(slot, (size,), arg.dtype, arg.device, arg.addrspace)
        padded = plan.padded_shape
        flat = _padded_flat(plan.positions, plan.low, padded)
        mapping[plan.load] = UOp(Ops.LOAD, (UOp(Ops.INDEX, (param, flat)),))
    new_ast, kept = finish_kernel(substitute(ast, mapping), buffers, keep=(0,))  # 0: the output
    return replace(kernel, ast=new_ast, buffers=kept, scratch=scratch), plans


def _padded_flat(positions, low: tuple[int, ...], padded: tuple[int, ...]) -> UOp:
    """The flat index in a padded buffer of the position ``positions`` (an affine form per axis)
    of the unpadded tensor."""
    flat_terms: dict[UOp, int] = {}
    flat_constant = 0
    for axis, (terms, constant) in enumerate(positions):
        stride = math.prod(padded[axis + 1 :])
        for r, c in terms.items():
            flat_terms[r] = flat_terms.get(r, 0) + c * stride
        flat_constant += (constant + low[axis]) * stride
    return build_range_sum({r: c for r, c in flat_terms.items() if c}, flat_constant)


def _pad_kernel(plan: _Plan, operation) -> LoweredKernel:
    """Copies the tensor into the middle of its zero-padded buffer (one loop per axis)."""
    padded = plan.padded_shape
    dtype = plan.load.dtype
    ranges = [UOp.range(extent, AxisType.LOOP, _RANGE_BASE + axis) for axis, extent in enumerate(padded)]
    source = [r - lo if lo else r for r, lo in zip(ranges, plan.low)]
    tests = []
    for axis, position in enumerate(source):
        if plan.low[axis]:
            tests.append(position >= 0)
        if plan.high[axis]:
            tests.append(position < plan.shape[axis])
    gate = tests[0]
    for test in tests[1:]:
        gate = UOp(Ops.AND, (gate, test))
    strides = [math.prod(plan.shape[axis + 1 :]) for axis in range(len(plan.shape))]
    padded_strides = [math.prod(padded[axis + 1 :]) for axis in range(len(padded))]
    read = source[0] * strides[0] if strides[0] != 1 else source[0]
    write = ranges[0] * padded_strides[0] if padded_strides[0] != 1 else ranges[0]
    for axis in range(1, len(padded)):
        read = read + (source[axis] * strides[axis] if strides[axis] != 1 else source[axis])
        write = write + (ranges[axis] * padded_strides[axis] if padded_strides[axis] != 1 else ranges[axis])
    space = plan.load.src[0].src[0].arg.addrspace
    output = UOp.param(0, (math.prod(padded),), dtype, "CPU", space)
    source_param = UOp.param(1, (math.prod(plan.shape),), dtype, "CPU", space)
    fill = uop_constant(dtype, plan.fill if plan.fill else 0)  # an integer sum pads with the int 0
    value = UOp(Ops.LOAD, (UOp(Ops.INDEX, (source_param, read)), fill, gate))
    ast = simplify_indices(UOp(Ops.SINK, (UOp(Ops.STORE, (UOp(Ops.INDEX, (output, write)), value)),)))
    name = "pad_" + re.sub(r"\W", "_", plan.tensor)
    return LoweredKernel(
        name=name,
        ast=ast,
        buffers=[plan.buffer, plan.tensor],
        operation=operation,
        scratch={plan.buffer: (dtype, math.prod(padded))},
        note=f"padding {list(zip(plan.low, plan.high))} with {plan.fill} of {plan.tensor} for the "
        "guarded reads after it",
    )


def _border_sides(low: int, high: int, inner: int) -> list[tuple[str, int, int, int]]:
    """The slabs of one padded axis as ``(side, first, extent, sides)``: both sides in one slab
    (``sides`` 2, the second ``low + inner`` further on) where they are equally deep, else each
    side that has a border."""
    if low and low == high:
        return [("both", 0, low, 2)]
    slabs = (("low", 0, low), ("high", low + inner, high))
    return [(side, first, extent, 1) for side, first, extent in slabs if extent]


def _border_kernels(plan: _Plan, operation) -> list[LoweredKernel]:
    """Fill the border of a padded buffer with the padding's value: one kernel per padded axis
    whose two sides are equally deep (a loop over the two sides outside the axis's own), else one
    per padded side; disjoint slabs (an axis before the slab's own runs over the interior only).
    One kernel each, not one kernel of several stores: a kernel's output loops nest, one store's
    loops would run inside another's.  A 3x3 convolution's buffer padded by 1 on each side takes 2
    kernels, not 4 (MobileNet-v2: 60 border kernels -> 34, ResNet-50 the same)."""
    padded = plan.padded_shape
    dtype = plan.load.dtype
    space = plan.load.src[0].src[0].arg.addrspace
    output = UOp.param(0, (math.prod(padded),), dtype, "CPU", space)
    fill = uop_constant(dtype, plan.fill if plan.fill else 0)
    strides = [math.prod(padded[axis + 1 :]) for axis in range(len(padded))]
    kernels = []
    label = re.sub(r"\W", "_", plan.tensor)
    for axis, (low, high) in enumerate(zip(plan.low, plan.high)):
        for side, start, extent, sides in _border_sides(low, high, plan.shape[axis]):
            flat: UOp | int = 0
            for other in range(len(padded)):
                if other < axis:  # the interior: the slabs of earlier axes hold the rest
                    first, count = plan.low[other], plan.shape[other]
                elif other == axis:
                    first, count = start, extent
                else:
                    first, count = 0, padded[other]
                # range numbers in loop order: the loop over the two sides just outside the axis's
                position = UOp.range(count, AxisType.LOOP, _RANGE_BASE + other + (other >= axis))
                position = position + first if first else position
                if other == axis and sides == 2:
                    side_loop = UOp.range(2, AxisType.LOOP, _RANGE_BASE + axis)
                    position = position + side_loop * (low + plan.shape[axis])
                flat = flat + (position * strides[other] if strides[other] != 1 else position)
            store = UOp(Ops.STORE, (UOp(Ops.INDEX, (output, flat)), fill))
            where = "both borders" if sides == 2 else f"the {side} border"
            kernels.append(
                LoweredKernel(
                    name=f"border_{label}_{axis}{side}",
                    ast=simplify_indices(UOp(Ops.SINK, (store,))),
                    buffers=[plan.buffer],
                    operation=operation,
                    scratch={plan.buffer: (dtype, math.prod(padded))},
                    note=f"{where} of axis {axis} of {plan.tensor}'s padded buffer, filled "
                    f"with {plan.fill}: {plan.tensor}'s producer writes the interior",
                )
            )
    return kernels


def _written_in_place(producer: LoweredKernel, plan: _Plan) -> LoweredKernel | None:
    """``producer`` storing into the interior of ``plan``'s padded buffer instead of its tensor, or
    None when its store is not one ungated write of each element of the tensor."""
    form = producer_form(producer)
    if form is None:
        return None
    store = producer.ast.src[0]
    address = store.src[0]
    strides = [math.prod(plan.shape[axis + 1 :]) for axis in range(len(plan.shape))]
    positions = _unguarded((form.strides, 0), list(range(len(plan.shape))), plan.shape, strides)
    if positions is None:
        return None
    padded = plan.padded_shape
    arg = address.src[0].arg
    target = UOp.param(0, (math.prod(padded),), arg.dtype, arg.device, arg.addrspace)
    flat = _padded_flat(tuple(positions[axis] for axis in range(len(padded))), plan.low, padded)
    moved = UOp(Ops.STORE, (UOp(Ops.INDEX, (target, flat)), *store.src[1:]))
    return replace(
        producer,
        ast=simplify_indices(substitute(producer.ast, {store: moved})),
        buffers=[plan.buffer, *producer.buffers[1:]],
        scratch={**producer.scratch, plan.buffer: (plan.load.dtype, math.prod(padded))},
        note=(producer.note + "; " if producer.note else "")
        + f"writes the interior of {plan.buffer} (no padded copy of {plan.tensor})",
    )


def _write_in_place(
    out: list[LoweredKernel], pads: dict[int, _Plan], needed: set[str]
) -> tuple[list[LoweredKernel], dict[str, list[LoweredKernel]]]:
    """``out`` with each pad kernel whose tensor is read by nothing else replaced: the tensor's one
    producer writes the padded buffer's interior, a border kernel before it fills the rest; and
    the border kernels of each padded buffer so written, by buffer."""
    bordered: dict[str, list[LoweredKernel]] = {}
    for kernel in list(out):
        plan = pads.get(id(kernel))
        if plan is None or plan.tensor in needed:
            continue
        writers = [k for k in out if k.buffers[0] == plan.tensor]
        touching = [k for k in out if plan.tensor in k.buffers]
        if len(writers) != 1 or len(touching) != 2 or plan.tensor in writers[0].buffers[1:]:
            continue  # a graph input, a tensor written twice, or one something else reads
        at = out.index(writers[0])
        moved = _written_in_place(writers[0], plan)
        if moved is None or at > out.index(kernel):
            continue
        borders = _border_kernels(plan, writers[0].operation)
        bordered[plan.buffer] = borders
        out[at : at + 1] = [*borders, moved]
        out.remove(kernel)
    return out, bordered


def _share_bordered_buffers(
    out: list[LoweredKernel], bordered: dict[str, list[LoweredKernel]]
) -> list[LoweredKernel]:
    """``out`` with padded buffers of the same border, alive one after the other, made one buffer
    whose border is filled once: the border kernels of the first fill it, those of the others are
    dropped.  Nothing writes that border but them (a producer writes the interior, readers read),
    and one buffer alive from the first producer to the last reader keeps every other tensor out
    of its bytes, so the border holds from one padded buffer to the next.  Same border: the same
    border kernels (one AST for one padded shape, padding and fill).  A network repeats its block
    shapes: DenseNet-121's 58 padded 3x3 inputs take 2 border kernels each, 8 in all now."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for index, kernel in enumerate(out):
        for name in kernel.buffers:
            first.setdefault(name, index)
            last[name] = index
    chains: dict[tuple, list[str]] = {}  # a border -> the buffers standing for its chains
    renamed: dict[str, str] = {}
    dropped: set[int] = set()
    for buffer in sorted(bordered, key=first.__getitem__):
        border = tuple(kernel.ast for kernel in bordered[buffer])
        heads = chains.setdefault(border, [])
        head = next((name for name in heads if last[name] < first[buffer]), None)
        if head is None:
            heads.append(buffer)
            continue
        renamed[buffer] = head
        last[head] = last[buffer]
        dropped.update(id(kernel) for kernel in bordered[buffer])
    return [_renamed(kernel, renamed) for kernel in out if id(kernel) not in dropped]


def _renamed(kernel: LoweredKernel, renamed: dict[str, str]) -> LoweredKernel:
    """``kernel`` with the buffers ``renamed`` names given their new names."""
    if not any(name in renamed for name in (*kernel.buffers, *kernel.scratch)):
        return kernel
    shared = sorted({renamed[name] for name in kernel.buffers if name in renamed})
    return replace(
        kernel,
        buffers=[renamed.get(name, name) for name in kernel.buffers],
        scratch={renamed.get(name, name): spec for name, spec in kernel.scratch.items()},
        note=(kernel.note + "; " if kernel.note else "")
        + f"shares the padded buffer {', '.join(shared)} (its border filled once)",
    )


def pad_guarded_reads(
    kernels: list[LoweredKernel], graph: ComposedGraph, needed: set[str] | frozenset[str] = frozenset()
) -> list[LoweredKernel]:
    """The kernels of one program with guarded reads in sums turned into reads of zero-padded
    copies (see the module's docstring), each copy made by a pad kernel placed before its first
    reader.  Where the copied tensor is read by nothing else and not ``needed`` after these kernels,
    its producer writes the padded buffer's interior and a border kernel fills the rest: no copy."""
    out: list[LoweredKernel] = []
    made: dict[str, int] = {}  # padded buffer -> position in ``out`` of its pad kernel
    pads: dict[int, _Plan] = {}  # id of a pad kernel -> its plan
    for kernel in kernels:
        found = _padded_kernel(kernel, graph)
        if found is None:
            out.append(kernel)
            continue
        padded, plans = found
        for plan in plans:
            at = made.get(plan.buffer)
            stale = at is None or any(k.buffers[0] == plan.tensor for k in out[at + 1 :])
            if stale:
                made[plan.buffer] = len(out)
                out.append(_pad_kernel(plan, kernel.operation))
                pads[id(out[-1])] = plan
        out.append(padded)
    return _share_bordered_buffers(*_write_in_place(out, pads, set(needed)))
