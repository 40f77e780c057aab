"""Tensor's shape and indexing methods: movement ops, indexing (by ints, slices, tensors), splitting.

``reshape``, ``permute``, ``expand``, ``pad``, ``shrink``, ``flip`` build the spec's movement UOps; the
rest (``transpose``, ``flatten``, ``squeeze``, ``repeat``, basic indexing, ``split``) are compositions
of them, and ``gather`` / ``scatter_add`` index by integer tensors through the spec's one-hot masks.
The methods build new Tensors through the class's ``_wrap`` and ``_tensor_of``; this module does
not import :mod:`uopviz.core.tensor`, which composes the mixin.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any, Self

import numpy as np

from uopviz.core.tensor_helpers import Scalar, normalize_axis, shape_args, wrapped_indices
from uopviz.core.uop import UOpError, UOpTypeError


class MovementMixin:
    """The movement, indexing and splitting methods of :class:`~uopviz.core.tensor.Tensor` (a mixin)."""

    # -- movement ------------------------------------------------------------------------------------
    def reshape(self, *shape: int) -> Self:
        """Reinterpret in row-major order; one ``-1`` takes the remaining size."""
        shape = tuple(int(s) for s in shape_args(shape))
        if shape.count(-1) > 1:
            raise UOpError(f"reshape {self.shape} to {shape}: only one -1 allowed")
        if -1 in shape:
            known = math.prod(s for s in shape if s != -1)
            if known == 0 or self.numel() % known:
                raise UOpError(f"cannot reshape {self.shape} ({self.numel()} elements) to {shape}")
            shape = tuple(self.numel() // known if s == -1 else s for s in shape)
        if any(s < 0 for s in shape):
            raise UOpError(f"reshape {self.shape} to {shape}: negative size")
        if math.prod(shape) != self.numel():
            raise UOpError(f"cannot reshape {self.shape} ({self.numel()} elements) to {shape} "
                             f"({math.prod(shape)} elements)")
        if shape == self.shape:
            return self
        return self._wrap(self.uop.reshape(shape), self)

    def permute(self, *order: int) -> Self:
        """Reorder the axes: axis ``i`` of the result is axis ``order[i]`` of this tensor."""
        order = shape_args(order)
        if len(order) != self.ndim:
            raise UOpError(f"permute of a rank-{self.ndim} tensor {self.shape} needs {self.ndim} axes, "
                             f"got {order}")
        order = tuple(normalize_axis(a, self.ndim) for a in order)
        if sorted(order) != list(range(self.ndim)):
            raise UOpError(f"{order} is not a permutation of the axes of {self.shape}")
        if order == tuple(range(self.ndim)):
            return self
        return self._wrap(self.uop.permute(order), self)

    def expand(self, *shape: int) -> Self:
        """Broadcast to ``shape`` as ``numpy.broadcast_to`` does (new leading axes allowed; ``-1``
        keeps a size)."""
        shape = tuple(shape_args(shape))
        if len(shape) < self.ndim:
            raise UOpError(f"cannot expand {self.shape} to the lower rank {shape}")
        padded = (1,) * (len(shape) - self.ndim) + self.shape
        shape = tuple(old if new == -1 else new for old, new in zip(padded, shape))
        for axis, (old, new) in enumerate(zip(padded, shape)):
            if old not in (1, new):
                raise UOpError(f"cannot expand {self.shape} to {shape}: axis {axis} has size {old}")
        out = self.reshape(padded)
        if shape == out.shape:
            return out
        return self._wrap(out.uop.expand(shape), out)

    def broadcast_to(self, *shape: int) -> Self:
        """Same as :meth:`expand`."""
        return self.expand(*shape)

    def pad(self, padding: Any, value: Scalar = 0) -> Self:
        """Pad each axis with ``(before, after)`` elements of ``value``.

        ``padding``: one ``(before, after)`` pair per axis (``None`` = no padding), or a single pair or
        int applied to every axis (as ``numpy.pad``).  Negative amounts crop.  A zero fill is one PAD;
        another ``value`` is ``where(PAD(ones mask), PAD(x), value)``.
        """
        pairs = self._pad_pairs(padding)
        crop = [(max(0, -b), size - max(0, -a)) for (b, a), size in zip(pairs, self.shape)]
        x = self.shrink(crop) if any(c != (0, s) for c, s in zip(crop, self.shape)) else self
        pairs = [(max(0, b), max(0, a)) for b, a in pairs]
        if all(p == (0, 0) for p in pairs):
            return x
        offsets = tuple(b for b, _ in pairs)
        new_shape = tuple(s + b + a for s, (b, a) in zip(x.shape, pairs))
        x._keep_shards("PAD", new_shape)
        padded = self._wrap(x.uop.pad(offsets, new_shape), x)
        if value == 0:
            return padded
        inside = self.full(x.shape, True, device=x.device)
        mask = self._wrap(inside.uop.pad(offsets, new_shape), inside)
        return mask.where(padded, value)

    def _pad_pairs(self, padding: Any) -> list[tuple[int, int]]:
        if isinstance(padding, int):
            return [(padding, padding)] * self.ndim
        padding = tuple(padding)
        if len(padding) == 2 and all(isinstance(p, int) for p in padding):
            return [tuple(padding)] * self.ndim  # type: ignore[list-item]
        if len(padding) != self.ndim:
            raise UOpError(f"pad of {self.shape} needs one (before, after) per axis, got {padding}")
        pairs = []
        for axis, pair in enumerate(padding):
            if pair is None:
                pairs.append((0, 0))
            elif len(pair) == 2:
                pairs.append((int(pair[0]), int(pair[1])))
            else:
                raise UOpError(f"pad axis {axis}: expected (before, after), got {pair}")
        return pairs

    def shrink(self, bounds: Any) -> Self:
        """Keep ``[start, end)`` of each axis (``None`` keeps the axis; missing trailing axes are kept)."""
        bounds = tuple(bounds)
        if len(bounds) > self.ndim:
            raise UOpError(f"shrink of {self.shape} got {len(bounds)} bounds")
        full = [(0, s) if b is None else (int(b[0]), int(b[1])) for b, s in
                itertools.zip_longest(bounds, self.shape, fillvalue=None) if s is not None]
        for axis, ((start, end), size) in enumerate(zip(full, self.shape)):
            if not 0 <= start <= end <= size:
                raise UOpError(f"shrink {self.shape}: axis {axis} bounds ({start}, {end}) are outside "
                                 f"[0, {size}]")
        if all(b == (0, s) for b, s in zip(full, self.shape)):
            return self
        offsets = tuple(start for start, _ in full)
        sizes = tuple(end - start for start, end in full)
        self._keep_shards("SHRINK", sizes)
        return self._wrap(self.uop.shrink(offsets, sizes), self)

    def _keep_shards(self, op: str, new_shape: Sequence[int]) -> None:
        """A PAD or SHRINK may not change the size of the shard axis of a multi-device value: its
        shards would differ in size (the spec keeps the axis through these ops)."""
        axis = self.uop.axis if isinstance(self.device, tuple) else None
        if axis is not None and new_shape[axis] != self.shape[axis]:
            raise UOpError(f"{op}: {self.shape} to {tuple(new_shape)} changes the size of axis {axis}, which "
                           f"is sharded over {len(self.device)} devices: the shards would no longer be "
                           f"equal; copy() it to one device first")

    def shrink_to(self, *shape: int) -> Self:
        """Keep the first ``shape[k]`` elements of each axis (the spec's ``shrink_to``)."""
        shape = shape_args(shape)
        return self.shrink([(0, s) for s in shape])

    def flip(self, axis: int | Sequence[int] | None = None) -> Self:
        """Reverse the order along ``axis`` (int, tuple, or None for every axis)."""
        axes = self._axes(axis)
        flags = tuple(i in axes for i in range(self.ndim))
        if not any(flags):
            return self
        return self._wrap(self.uop.flip(flags), self)

    def transpose(self, a: int = -2, b: int = -1) -> Self:
        """Swap axes ``a`` and ``b`` (torch's ``transpose``, so it needs two axes; numpy's
        ``transpose()`` reversing every axis is :attr:`T` or :meth:`permute`)."""
        a, b = normalize_axis(a, self.ndim), normalize_axis(b, self.ndim)
        order = list(range(self.ndim))
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self) -> Self:  # noqa: N802 - numpy's name
        """All axes reversed (numpy's ``.T``)."""
        return self.permute(tuple(reversed(range(self.ndim))))

    def flatten(self, start: int = 0, end: int = -1) -> Self:
        """Merge axes ``start..end`` (inclusive) into one."""
        if self.ndim == 0:
            return self.reshape(1)
        start, end = normalize_axis(start, self.ndim), normalize_axis(end, self.ndim)
        if start > end:
            raise UOpError(f"flatten {self.shape}: start {start} is after end {end}")
        merged = math.prod(self.shape[start:end + 1])
        return self.reshape(self.shape[:start] + (merged,) + self.shape[end + 1:])

    def unflatten(self, axis: int, sizes: Sequence[int]) -> Self:
        """Split ``axis`` into ``sizes`` (one may be -1)."""
        axis = normalize_axis(axis, self.ndim)
        sizes = tuple(sizes)
        if -1 in sizes:
            known = math.prod(s for s in sizes if s != -1)
            sizes = tuple(self.shape[axis] // known if s == -1 else s for s in sizes)
        if math.prod(sizes) != self.shape[axis]:
            raise UOpError(f"unflatten axis {axis} of {self.shape} into {sizes}: sizes do not multiply to "
                             f"{self.shape[axis]}")
        return self.reshape(self.shape[:axis] + sizes + self.shape[axis + 1:])

    def squeeze(self, axis: int | Sequence[int] | None = None) -> Self:
        """Drop axes of size 1 (all of them, or the given ones, which must have size 1)."""
        if axis is None:
            return self.reshape(tuple(s for s in self.shape if s != 1))
        axes = self._axes(axis)
        for a in axes:
            if self.shape[a] != 1:
                raise UOpError(f"squeeze {self.shape}: axis {a} has size {self.shape[a]}, not 1")
        return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    def unsqueeze(self, axis: int) -> Self:
        """Insert an axis of size 1 at ``axis`` (negative counts from the end of the result)."""
        axis = normalize_axis(axis, self.ndim + 1)
        return self.reshape(self.shape[:axis] + (1,) + self.shape[axis:])

    def repeat(self, *repeats: int) -> Self:
        """Tile the tensor ``repeats[k]`` times along each axis (``numpy.tile`` semantics; more repeats
        than axes add leading axes): reshape, expand, reshape."""
        repeats = tuple(shape_args(repeats))
        if len(repeats) < self.ndim:
            repeats = (1,) * (self.ndim - len(repeats)) + repeats
        base = (1,) * (len(repeats) - self.ndim) + self.shape
        x = self.reshape(tuple(itertools.chain.from_iterable((1, s) for s in base)))
        x = x.expand(tuple(itertools.chain.from_iterable((r, s) for r, s in zip(repeats, base))))
        return x.reshape(tuple(r * s for r, s in zip(repeats, base)))

    tile = repeat

    def repeat_interleave(self, repeats: int, axis: int | None = None) -> Self:
        """Repeat each element ``repeats`` times along ``axis`` (``numpy.repeat``; None flattens)."""
        x = self.flatten() if axis is None else self
        axis = 0 if axis is None else normalize_axis(axis, x.ndim)
        x = x.unsqueeze(axis + 1)
        x = x.expand(x.shape[:axis + 1] + (repeats,) + x.shape[axis + 2:])
        return x.flatten(axis, axis + 1)

    def __getitem__(self, index: Any) -> Self:
        """Basic indexing: ints, slices (any step, negative too), ``None`` and ``...``.

        Built from SHRINK (the covered range), FLIP (negative steps), PAD + RESHAPE + SHRINK (steps
        larger than 1: pad to a multiple of the step, split, keep the first of each group) and a
        final RESHAPE that drops integer-indexed axes and adds ``None`` axes.
        """
        entries = self._index_entries(index)
        bounds: list[tuple[int, int]] = []
        flips: list[bool] = []
        steps: list[tuple[int, int]] = []  # (count, step) per axis
        final_shape: list[int] = []
        axis = 0
        for entry in entries:
            if entry is None:
                final_shape.append(1)
                continue
            size = self.shape[axis]
            if isinstance(entry, slice):
                start, stop, step = entry.indices(size)
                count = len(range(start, stop, step))
                stride = abs(step) if count > 1 else 1
                if count == 0:
                    bounds.append((0, 0))
                    flips.append(False)
                elif step > 0:
                    bounds.append((start, start + (count - 1) * step + 1))
                    flips.append(False)
                else:
                    bounds.append((start + (count - 1) * step, start + 1))
                    flips.append(True)
                steps.append((count, stride))
                final_shape.append(count)
            else:
                position = int(entry)
                if not -size <= position < size:
                    raise IndexError(f"index {position} is out of bounds for axis {axis} of size {size} "
                                     f"(shape {self.shape})")
                position %= size
                bounds.append((position, position + 1))
                flips.append(False)
                steps.append((1, 1))
            axis += 1
        x = self.shrink(bounds).flip(tuple(i for i, f in enumerate(flips) if f))
        if any(step > 1 for _, step in steps):
            x = x.pad([(0, count * step - size) for (count, step), size in zip(steps, x.shape)])
            x = x.reshape(tuple(itertools.chain.from_iterable(steps)))
            x = x.shrink([(0, count) if k % 2 == 0 else (0, 1)
                          for k, count in enumerate(itertools.chain.from_iterable((c, 1) for c, _ in steps))])
        return x.reshape(tuple(final_shape))

    def _index_entries(self, index: Any) -> list[Any]:
        entries = list(index) if isinstance(index, tuple) else [index]
        for entry in entries:
            # every Tensor is a MovementMixin (the mixin is composed only into Tensor)
            if isinstance(entry, MovementMixin | list | np.ndarray) or isinstance(entry, bool):
                raise UOpTypeError(f"indexing with {type(entry).__name__}: only ints, slices, None and ... "
                                   f"are supported; use t.gather(idx, axis) for integer-array indexing")
            if not (entry is None or entry is Ellipsis or isinstance(entry, slice | int | np.integer)):
                raise UOpTypeError(f"invalid index {entry!r} of type {type(entry).__name__}")
        if sum(entry is Ellipsis for entry in entries) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        used = sum(entry is not None and entry is not Ellipsis for entry in entries)
        if used > self.ndim:
            raise IndexError(f"too many indices ({used}) for a tensor of shape {self.shape}")
        fill = [slice(None)] * (self.ndim - used)
        if any(entry is Ellipsis for entry in entries):
            at = next(i for i, e in enumerate(entries) if e is Ellipsis)
            return entries[:at] + fill + entries[at + 1:]
        return entries + fill


    def split(self, sizes: int | Sequence[int], axis: int = 0) -> tuple[Self, ...]:
        """Split along ``axis`` into pieces of ``sizes`` elements (an int: equal pieces, the last may be
        smaller; a list: those sizes, which must add up to the axis) — torch's semantics."""
        axis = normalize_axis(axis, self.ndim)
        length = self.shape[axis]
        if isinstance(sizes, int):
            if sizes <= 0:
                raise UOpError(f"split size must be positive, got {sizes}")
            sizes = [min(sizes, length - start) for start in range(0, length, sizes)] or [0]
        sizes = list(sizes)
        if sum(sizes) != length:
            raise UOpError(f"split sizes {sizes} do not add up to axis {axis} of {self.shape}")
        pieces = []
        start = 0
        for size in sizes:
            bounds: list[Any] = [None] * self.ndim
            bounds[axis] = (start, start + size)
            pieces.append(self.shrink(bounds))
            start += size
        return tuple(pieces)

    def chunk(self, chunks: int, axis: int = 0) -> tuple[Self, ...]:
        """Split into ``chunks`` pieces of ``ceil(size/chunks)`` elements (the last may be smaller)."""
        if chunks <= 0:
            raise UOpError(f"chunk count must be positive, got {chunks}")
        axis = normalize_axis(axis, self.ndim)
        return self.split(max(1, math.ceil(self.shape[axis] / chunks)), axis)

    # -- indexing by tensors ----------------------------------------------------------------------
    def gather(self, idx: Any, axis: int = 0) -> Self:
        """``out[i] = t[idx[i]]`` along ``axis`` as ``numpy.take`` (result shape
        ``shape[:axis] + idx.shape + shape[axis+1:]``; a negative index counts from the end) by
        the spec's one-hot composition: ``mask = arange(K).reshape(K, 1) == idx.reshape(1, -1)``,
        ``mask.where(t.reshape(K, 1), 0).sum(0)`` (a select rather than the spec's product with
        the mask, so an inf or nan elsewhere in ``t`` does not turn the sum into nan).

        Indices outside ``[-K, K)`` raise IndexError when they are data (known when the graph is
        built); computed indices cannot be checked before running, and one out of range there
        gives 0, where numpy would raise."""
        idx = self._tensor_of(idx)
        if not idx.dtype.is_int:
            raise UOpTypeError(f"gather indices must be integers, got {idx.dtype.name}")
        axis = normalize_axis(axis, self.ndim)
        x = self.permute([axis] + [i for i in range(self.ndim) if i != axis])  # gather axis first
        k, rest = x.shape[0], x.shape[1:]
        flat = wrapped_indices(idx, k, f"gather along axis {axis} of {self.shape}").reshape(-1)
        count = flat.shape[0]
        pos = self.arange(k, device=self.device).reshape(k, 1)  # (K, 1)
        mask = (pos == flat.reshape(1, -1)).reshape(k, count, *(1,) * len(rest))  # (K, D, 1...)
        gathered = mask.where(x.reshape(k, 1, *rest), 0).sum(0, dtype=self.dtype)  # (D, *rest)
        gathered = gathered.reshape(*idx.shape, *rest)
        # the gathered axes sit first: move them to where the gather axis was
        lead = idx.ndim
        order = [*range(lead, lead + axis), *range(lead), *range(lead + axis, lead + len(rest))]
        return gathered.permute(order)

    def scatter_add(self, idx: Any, val: Any) -> Self:
        """``t[idx[i]] += val[i]`` along axis 0 as ``numpy.add.at`` (repeated indices add up; a
        negative index counts from the end), by the spec's composition:
        ``mask = arange(K).reshape(K, 1) == idx.reshape(1, D)``,
        ``t + mask.where(val.reshape(1, D), 0).sum(1)`` (a select, not the spec's product with the
        mask, so an inf or nan value lands only in its own row).  ``val`` has shape
        ``idx.shape + t.shape[1:]``.

        Indices outside ``[-K, K)`` raise IndexError when they are data; computed indices cannot
        be checked before running, and a value at an index out of range there is dropped."""
        idx = self._tensor_of(idx)
        val = self._tensor_of(val, dtype=self.dtype)
        if not idx.dtype.is_int:
            raise UOpTypeError(f"scatter_add indices must be integers, got {idx.dtype.name}")
        k, rest = self.shape[0], self.shape[1:]
        count = idx.numel()
        if val.shape != idx.shape + rest:
            raise UOpError(f"scatter_add into {self.shape} with indices {idx.shape} needs values of shape "
                             f"{idx.shape + rest}, got {val.shape}")
        idx = wrapped_indices(idx, k, f"scatter_add into axis 0 of {self.shape}")
        pos = self.arange(k, device=self.device).reshape(k, 1)  # (K, 1)
        mask = (pos == idx.reshape(1, count)).reshape(k, count, *(1,) * len(rest))  # (K, D, 1...)
        values = val.cast(self.dtype).reshape(1, count, *rest)
        return self + mask.where(values, 0).sum(1, dtype=self.dtype)
