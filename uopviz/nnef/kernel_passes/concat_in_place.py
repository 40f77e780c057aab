"""Concatenations grown in place: a tensor copied whole to the front of another is written there.

A DenseNet block is a chain of concatenations: each layer's input is the concatenation of the
block's input and every earlier layer's output, ``concat(previous, new)``.  Lowered as written,
each concatenation copies ``previous`` into the front of its own buffer (the piece ``[0]``
kernel; fusion writes ``new`` into the back where it is made) and the block copies its growing
prefix again and again: DenseNet-121's 58 layers copy 36 MB, 1.4 ms of kernels on two cores, and
hold one buffer per concatenation.

:func:`concatenate_in_place` removes such a copy: where a kernel copies every element ``i`` of a
buffer ``A`` to element ``i`` of a buffer ``B`` (a concatenation's first piece along its first
axis of more than one element: batch 1, channels), ``A`` *is* the first ``|A|`` elements of ``B``
(the spec's zero-copy view of a prefix), so every kernel that wrote or read ``A`` writes or reads
``B`` there instead and the copy goes.  A chain collapses into one buffer per block, each
layer writing its channels where the block's output keeps them.

It is done only where nothing can tell the difference:

- the copy is exact: one ungated STORE of ``LOAD(A[i])`` to ``B[i]``, same dtype, over all of
  ``A`` once (a dense row-major walk of its elements);
- ``A`` is written in this run of kernels, before the copy and never after it, and is not kept
  after the run (a graph output, or read by a later program, keeps its own buffer);
- nothing before the copy reads ``B``, and every other kernel that writes ``B`` writes beyond
  ``|A|`` only (its addresses' lower bound, :func:`~uopviz.core.symbolic_bounds.bounds`): ``A``'s
  elements are never overwritten while a reader of ``A`` may still come.

The kernels' ASTs are not touched: a PARAM bound to ``B`` that holds ``|A|`` elements reads the
first ``|A|`` of them, which launches allow (an array at least as large as its PARAM).
"""

from __future__ import annotations

from dataclasses import replace

from uopviz.core.affine import range_sum
from uopviz.core.ops import Ops
from uopviz.core.symbolic_bounds import bounds
from uopviz.nnef.kernel_passes.fusion import dense_walk
from uopviz.nnef.lowering.kernel_builder import LoweredKernel

__all__ = ["concatenate_in_place", "prefix_copy"]


def prefix_copy(kernel: LoweredKernel) -> int | None:
    """The element count of the buffer ``kernel`` copies whole, element ``i`` to element ``i``,
    from its slot 1 to the front of its slot 0; None when it is not such a copy."""
    ast = kernel.ast
    if ast.op is not Ops.SINK or len(ast.src) != 1 or len(kernel.buffers) != 2:
        return None
    store = ast.src[0]
    if store.op is not Ops.STORE or len(store.src) != 2 or store.src[0].op is not Ops.INDEX:
        return None
    target, value = store.src[0], store.src[1]
    if value.op is not Ops.LOAD or len(value.src) != 1 or value.src[0].op is not Ops.INDEX:
        return None
    source = value.src[0]
    if len(target.src) != 2 or len(source.src) != 2 or target.src[1] is not source.src[1]:
        return None  # a gate, or two different addresses
    written, read = target.src[0], source.src[0]
    if written.op is not Ops.PARAM or read.op is not Ops.PARAM or (written.arg.slot, read.arg.slot) != (0, 1):
        return None
    if written.dtype != read.dtype or value.dtype != read.dtype.scalar or value.dtype.count != 1:
        return None
    count = dense_walk(range_sum(target.src[1]))
    return count if count is not None and count == read.shape[0] <= written.shape[0] else None


def _writes_beyond(kernel: LoweredKernel, count: int) -> bool:
    """Every STORE of ``kernel`` to its slot 0 lands at element ``count`` or later."""
    stores = [u for u in kernel.ast.toposort() if u.op is Ops.STORE]
    for store in stores:
        address = store.src[0]
        if address.op is not Ops.INDEX or address.src[0].op is not Ops.PARAM:
            return False
        if address.src[0].arg.slot == 0 and bounds(address.src[1])[0] < count:
            return False
    return True


def _in_place(kernels: list[LoweredKernel], at: int, kept: frozenset[str]) -> bool:
    """Whether the copy ``kernels[at]`` can go: its source becomes its target's prefix."""
    copy = kernels[at]
    count = prefix_copy(copy)
    if count is None:
        return False
    target, source = copy.buffers
    if source == target or source in kept:
        return False
    before, after = kernels[:at], kernels[at + 1:]
    if not any(kernel.buffers[0] == source for kernel in before):
        return False  # an input of the run: its data is in its own buffer
    if any(kernel.buffers[0] == source for kernel in after):
        return False  # written again after the copy: the copy keeps the old values
    if any(target in kernel.buffers[1:] for kernel in before):
        return False
    if any(source in kernel.scratch or target in kernel.scratch for kernel in kernels):
        return False  # a scratch buffer's size is its kernel's to say
    writers = [kernel for kernel in (*before, *after) if kernel.buffers[0] == target]
    return all(_writes_beyond(kernel, count) for kernel in writers)


def concatenate_in_place(
    kernels: list[LoweredKernel], kept: frozenset[str] | set[str]
) -> list[LoweredKernel]:
    """``kernels`` without the copies of a whole tensor to the front of another, each such tensor
    written and read in that other's buffer instead (see the module's docstring).  ``kept``: the
    tensors that must keep their own buffers after the run."""
    kept = frozenset(kept)
    out = list(kernels)
    at = 0
    while at < len(out):
        if not _in_place(out, at, kept):
            at += 1
            continue
        target, source = out[at].buffers
        del out[at]
        note = f"writes {source} in the front of {target} (no copy)"
        out = [_renamed(kernel, source, target, note) for kernel in out]
    return out


def _renamed(kernel: LoweredKernel, source: str, target: str, note: str) -> LoweredKernel:
    """``kernel`` with buffer ``source`` bound as ``target``; unchanged when it has no ``source``."""
    if source not in kernel.buffers:
        return kernel
    buffers = [target if name == source else name for name in kernel.buffers]
    if kernel.buffers[0] != source:
        note = f"reads {source} in the front of {target}"
    return replace(kernel, buffers=buffers, note=(kernel.note + "; " if kernel.note else "") + note)
