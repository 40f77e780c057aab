"""Tensor's reductions: REDUCE over axes, and the contractions (matmul, dot) and scans built on it.

``sum``, ``prod``, ``max`` build ``REDUCE`` (axes collapse to 1) and a ``RESHAPE`` dropping them;
``min``, ``any``, ``all``, ``mean``, ``var``, ``std``, ``argmax``, ``argmin`` are compositions;
``matmul`` and ``dot`` are products summed over the shared axis (the spec's gemm) and ``cumsum``
the spec's prefix_sum.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Self

from uopviz.core.dtype import DType, dtypes
from uopviz.core.ops import Ops
from uopviz.core.tensor_helpers import (
    accumulator_dtype,
    float_dtype,
    in_accumulator,
    normalize_axis,
    sum_dtype,
    to_dtype,
)
from uopviz.core.uop import UOpError

#: The block size of :meth:`ReduceMixin.cumsum`'s blocked prefix sum: each point sums at most this
#: many elements per level, and the levels number ``log(n) / log(SCAN_BLOCK)``.
SCAN_BLOCK = 32


class ReduceMixin:
    """The reduction, contraction and scan methods of :class:`~uopviz.core.tensor.Tensor` (a mixin)."""

    # -- reductions --------------------------------------------------------------------------------
    def _reduce(self, op: Ops, axis: int | Sequence[int] | None, keepdim: bool) -> Self:
        """REDUCE (axes collapse to 1), then a RESHAPE dropping them unless ``keepdim``."""
        axes = self._axes(axis)
        if not axes:
            return self
        if op is Ops.MAX and any(self.shape[a] == 0 for a in axes):  # as numpy: max/min of nothing
            raise ValueError(f"max/min over a zero-size axis of {self.shape}: nothing to choose from")
        out = self._wrap(self.uop.reduce(op, axes), self)
        if keepdim:
            return out
        return out.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    def _accumulate(self, op: Ops, axis: int | Sequence[int] | None, keepdim: bool,
                    dtype: DType | str | None) -> Self:
        """REDUCE ``op`` giving ``dtype`` (None: the sum rule's type of ``self.dtype``), accumulated in
        float32 where that is a half float and rounded to it once at the end."""
        result = to_dtype(dtype) if dtype is not None else sum_dtype(self.dtype)
        return self.cast(accumulator_dtype(result))._reduce(op, axis, keepdim).cast(result)

    def sum(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
            dtype: DType | str | None = None) -> Self:
        """Sum over ``axis`` (None: all), of type ``dtype`` or the sum rule's (small integers widen to
        int32/uint32).  float16 and bfloat16 sums accumulate in float32 and round once to the half
        type, as numpy's."""
        return self._accumulate(Ops.ADD, axis, keepdim, dtype)

    def prod(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
             dtype: DType | str | None = None) -> Self:
        """Product over ``axis`` (REDUCE MUL), typed and accumulated as :meth:`sum`."""
        return self._accumulate(Ops.MUL, axis, keepdim, dtype)

    def max(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Self:
        """Maximum over ``axis`` (REDUCE MAX)."""
        return self._reduce(Ops.MAX, axis, keepdim)

    def min(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Self:
        """Minimum over ``axis``: ``-max(-x)`` for floats, ``~max(~x)`` for integers, ``all`` for bool."""
        if self.dtype.is_bool:
            return self.all(axis, keepdim)
        if self.dtype.is_float:
            return -((-self).max(axis, keepdim))
        return ~((~self).max(axis, keepdim))

    def any(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Self:
        """True where any element along ``axis`` is nonzero (REDUCE MAX over bool); over a
        zero-size axis False, as numpy (nothing is nonzero), where max itself has no answer."""
        truth = self if self.dtype.is_bool else self != 0
        axes = self._axes(axis)
        if any(self.shape[a] == 0 for a in axes):
            kept = tuple(1 if i in axes else size for i, size in enumerate(self.shape))
            shape = kept if keepdim else tuple(size for i, size in enumerate(self.shape) if i not in axes)
            return self.full(shape, False, dtype=dtypes.bool, device=self.device)
        return truth._reduce(Ops.MAX, axis, keepdim)

    def all(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Self:
        """True where every element along ``axis`` is nonzero: ``not any(not x)`` (so True over a
        zero-size axis, as numpy)."""
        truth = self if self.dtype.is_bool else self != 0
        return truth.logical_not().any(axis, keepdim).logical_not()

    def _count(self, axis: int | Sequence[int] | None) -> int:
        return math.prod(self.shape[a] for a in self._axes(axis))

    def mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Self:
        """Mean over ``axis``: ``sum / count`` (integers give float32; half types accumulate in float32)."""
        dtype = float_dtype(self.dtype)
        total = self.cast(accumulator_dtype(dtype)).sum(axis, keepdim)
        return (total / self._count(axis)).cast(dtype)

    def var(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, ddof: int = 0) -> Self:
        """Variance over ``axis``: ``sum((x - mean)^2) / (count - ddof)`` (numpy's ``ddof``)."""
        x = self.cast(float_dtype(self.dtype))
        centered = x - x.mean(axis, keepdim=True)
        return (centered * centered).sum(axis, keepdim) / max(0, self._count(axis) - ddof)

    def std(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, ddof: int = 0) -> Self:
        """Standard deviation: ``sqrt(var)``."""
        return self.var(axis, keepdim, ddof).sqrt()

    def argmax(self, axis: int | None = None, keepdim: bool = False) -> Self:
        """Index of the first maximum along ``axis`` (None: of the flattened tensor), as int32:
        ``n - max(is_max * (n - arange(n)))``."""
        if axis is None:  # keepdim keeps every axis as a 1 (numpy's keepdims=True with axis=None)
            flat = self.flatten().argmax(0)
            return flat.reshape((1,) * self.ndim) if keepdim else flat
        axis = normalize_axis(axis, self.ndim)
        length = self.shape[axis]
        is_max = (self == self.max(axis, keepdim=True)).cast(dtypes.int32)
        countdown = self.arange(length, 0, -1, device=self.device)
        countdown = countdown.reshape((length,) + (1,) * (self.ndim - axis - 1))
        return length - (is_max * countdown).max(axis, keepdim)

    def argmin(self, axis: int | None = None, keepdim: bool = False) -> Self:
        """Index of the first minimum along ``axis``: argmax of the order-reversed values."""
        if self.dtype.is_float:
            return (-self).argmax(axis, keepdim)
        if self.dtype.is_bool:
            return self.logical_not().argmax(axis, keepdim)
        return (~self).argmax(axis, keepdim)

    # -- contractions and scans ------------------------------------------------------------------
    def matmul(self, other: Any) -> Self:
        """Matrix product by the spec's gemm: ``(A.reshape(M,K,1) * B.reshape(1,K,N)).sum(1)``.

        Batch axes broadcast (numpy's matmul); a 1-D left operand is a row ``(1, K)`` and a 1-D
        right operand a column ``(K, 1)``, the added axis removed from the result.  The result has
        the operands' promoted dtype; float16 and bfloat16 operands are multiplied and summed in
        float32 and the sum rounded once to the half type (as numpy; tensor cores with half inputs
        and float32 accumulators match this sum of products); bool matrices combine with OR (max).
        """
        other = self._tensor_of(other)
        if self.ndim == 0 or other.ndim == 0:
            raise UOpError(f"matmul needs at least 1-D operands, got {self.shape} @ {other.shape}")
        dtype = dtypes.promote(self.dtype, other.dtype)
        a = self.cast(dtype)
        b = other.cast(dtype)
        a = a.reshape(1, a.shape[0]) if self.ndim == 1 else a
        b = b.reshape(b.shape[0], 1) if other.ndim == 1 else b
        (m, k), (k2, n) = a.shape[-2:], b.shape[-2:]
        if k != k2:
            raise UOpError(f"matmul {self.shape} @ {other.shape}: inner sizes {k} and {k2} differ")
        a, b = in_accumulator(a), in_accumulator(b)  # half types: exact float32 products
        products = a.reshape(*a.shape[:-2], m, k, 1) * b.reshape(*b.shape[:-2], 1, k, n)
        reduce_axis = products.ndim - 2
        out = products.max(reduce_axis) if dtype.is_bool else products.sum(reduce_axis, dtype=dtype)
        if self.ndim == 1:
            out = out.squeeze(-2)
        if other.ndim == 1:
            out = out.squeeze(-1)
        return out

    def dot(self, other: Any) -> Self:
        """``numpy.dot``: the product of scalars, matmul for 1-D and 2-D operands, and for N-D the sum
        over the last axis of ``self`` and the second-to-last of ``other`` (no broadcasting)."""
        other = self._tensor_of(other)
        if self.ndim == 0 or other.ndim == 0:
            return self * other
        if self.ndim <= 2 and other.ndim <= 2:
            return self.matmul(other)
        dtype = dtypes.promote(self.dtype, other.dtype)
        k = self.shape[-1]
        other_k = other.shape[-2] if other.ndim > 1 else other.shape[0]
        if k != other_k:
            raise UOpError(f"dot {self.shape} . {other.shape}: summed sizes {k} and {other_k} differ")
        if other.ndim == 1:
            return self.matmul(other)
        before, rest = other.shape[:-2], other.shape[-1]
        a = in_accumulator(self.cast(dtype)).reshape(*self.shape[:-1], *(1,) * len(before), k, 1)
        b = in_accumulator(other.cast(dtype)).reshape(*(1,) * (self.ndim - 1), *before, k, rest)
        products = a * b
        return products.sum(products.ndim - 2, dtype=dtype)

    def _prefix_sum(self) -> Self:
        """The spec's prefix_sum along the last axis (leading axes are batch axes)."""
        n = self.shape[-1]
        batch = self.shape[:-1]
        none = [(0, 0)] * len(batch)
        x = self.pad([*none, (n - 1, 0)])  # (..., 2n-1)
        x = x.reshape(*batch, 1, 2 * n - 1).expand(*batch, n + 1, 2 * n - 1)  # tile
        x = x.reshape(*batch, (n + 1) * (2 * n - 1)).shrink_to(*batch, 2 * n * n)  # trim
        x = x.reshape(*batch, n, 2 * n).shrink_to(*batch, n, n)  # windows
        return x.sum(-1, dtype=x.dtype)  # reduce

    def _blocked_prefix_sum(self) -> Self:
        """prefix_sum along the last axis in ``O(n * SCAN_BLOCK)`` work: the spec's prefix_sum inside
        blocks of :data:`SCAN_BLOCK`, the blocked prefix sum of the block totals (recursively), and
        each block's carry (the totals before it) added back.  The spec's composition alone sums a
        window of up to ``n`` elements at each of the ``n`` points (``n²`` work)."""
        n = self.shape[-1]
        if n <= SCAN_BLOCK:
            return self._prefix_sum()
        batch = self.shape[:-1]
        none = [(0, 0)] * len(batch)
        blocks = -(-n // SCAN_BLOCK)
        x = self.pad([*none, (0, blocks * SCAN_BLOCK - n)]).reshape(*batch, blocks, SCAN_BLOCK)
        inside = x._prefix_sum()  # (..., blocks, B): the prefix sum within each block
        whole = [(0, size) for size in batch]
        totals = inside.shrink([*whole, (0, blocks), (SCAN_BLOCK - 1, SCAN_BLOCK)]).reshape(*batch, blocks)
        through = totals._blocked_prefix_sum()  # the sum up to the end of each block
        carry = through.pad([*none, (1, 0)]).shrink_to(*batch, blocks)  # ... up to its start
        out = inside + carry.reshape(*batch, blocks, 1)
        return out.reshape(*batch, blocks * SCAN_BLOCK).shrink_to(*batch, n)

    def cumsum(self, axis: int | None = None) -> Self:
        """Cumulative sum along ``axis`` (None: of the flattened tensor) by the spec's prefix_sum
        (pad, tile, trim, windows, reduce) inside blocks, block totals carried over
        (:meth:`_blocked_prefix_sum`); the axis moves last and back.  Typed as :meth:`sum`; half
        types sum in float32 and each running sum is rounded once."""
        if axis is None:
            return self.flatten().cumsum(0)
        axis = normalize_axis(axis, self.ndim)
        result = sum_dtype(self.dtype)
        x = self.cast(accumulator_dtype(result))  # half types: running sums in float32, rounded once
        if self.shape[axis] == 0:
            return x.cast(result)
        order = [i for i in range(self.ndim) if i != axis] + [axis]
        summed = x.permute(order)._blocked_prefix_sum()
        return summed.permute([order.index(i) for i in range(self.ndim)]).cast(result)
