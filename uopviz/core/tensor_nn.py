"""Tensor's neural-network layers: softmax, layer normalisation, convolution and pooling.

``softmax``, ``log_softmax`` and ``layernorm`` are reductions composed along an axis;
``conv2d``, ``avg_pool2d`` and ``max_pool2d`` take the sliding windows of ``_pool`` (movement ops
only) and reduce over them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any, Self

from uopviz.core.dtype import dtypes
from uopviz.core.tensor_helpers import as_pair, float_dtype, in_accumulator
from uopviz.core.uop import UOpError


class NeuralNetworkMixin:
    """The softmax, normalisation, convolution and pooling methods of :class:`~uopviz.core.tensor.Tensor`
    (a mixin)."""

    # -- normalisations -------------------------------------------------------------------------
    def softmax(self, axis: int = -1) -> Self:
        """``exp(x - max) / sum(exp(x - max))`` along ``axis``."""
        x = self.cast(float_dtype(self.dtype))
        exps = (x - x.max(axis, keepdim=True)).exp()
        return exps / exps.sum(axis, keepdim=True)

    def log_softmax(self, axis: int = -1) -> Self:
        """``x - max - log(sum(exp(x - max)))`` along ``axis``."""
        x = self.cast(float_dtype(self.dtype))
        shifted = x - x.max(axis, keepdim=True)
        return shifted - shifted.exp().sum(axis, keepdim=True).log()

    def layernorm(self, axis: int | Sequence[int] = -1, eps: float = 1e-5) -> Self:
        """``(x - mean) / sqrt(var + eps)`` over ``axis`` (no scale or shift)."""
        x = self.cast(float_dtype(self.dtype))
        centered = x - x.mean(axis, keepdim=True)
        return centered * (centered * centered).mean(axis, keepdim=True).add(eps).rsqrt()

    # -- windows: convolution and pooling -------------------------------------------------------
    def _pool(self, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int]) -> Self:
        """Sliding windows over the last ``len(kernel)`` axes: ``(..., o_1..o_n, k_1..k_n)``.

        Movement ops only: tile each axis (reshape + expand + reshape), trim to ``k`` rows of length
        ``L = d + m*i`` (so row ``r`` starts ``r*d`` elements later), keep ``o*s`` columns, split
        into ``(o, s)`` and keep the first of every stride group.
        """
        count = len(kernel)
        prefix, sizes = self.shape[:-count], self.shape[-count:]
        outs, rows, tiles = [], [], []
        for i, k, s, d in zip(sizes, kernel, stride, dilation):
            o = (i - d * (k - 1) - 1) // s + 1
            if o <= 0:
                raise UOpError(f"a window of {k} (dilation {d}) does not fit in an axis of {i} "
                                 f"(shape {self.shape})")
            m = max(1, math.ceil((o * s - d) / i))
            row = d + m * i
            outs.append(o)
            rows.append(row)
            tiles.append(math.ceil(k * row / i))

        def chain(*columns: Sequence[int]) -> tuple[int, ...]:
            return tuple(itertools.chain.from_iterable(zip(*columns)))

        ones = [1] * count
        x = self.reshape(*prefix, *chain(ones, sizes))
        x = x.expand(*prefix, *chain(tiles, sizes))
        x = x.reshape(*prefix, *(t * i for t, i in zip(tiles, sizes)))
        x = x.shrink_to(*prefix, *(k * r for k, r in zip(kernel, rows)))
        x = x.reshape(*prefix, *chain(kernel, rows))
        x = x.shrink_to(*prefix, *chain(kernel, [o * s for o, s in zip(outs, stride)]))
        x = x.reshape(*prefix, *chain(kernel, outs, stride))
        x = x.shrink_to(*prefix, *chain(kernel, outs, ones))
        x = x.reshape(*prefix, *chain(kernel, outs))
        base = len(prefix)
        outputs = [base + 2 * j + 1 for j in range(count)]
        windows = [base + 2 * j for j in range(count)]
        order = [*range(base), *outputs, *windows]
        return x.permute(order)

    @staticmethod
    def _spatial_padding(padding: Any, count: int) -> list[tuple[int, int]]:
        if isinstance(padding, int):
            return [(padding, padding)] * count
        padding = tuple(padding)
        if len(padding) != count:
            raise UOpError(f"padding needs {count} entries, got {padding}")
        return [(p, p) if isinstance(p, int) else (int(p[0]), int(p[1])) for p in padding]

    def conv2d(self, weight: Self, bias: Self | None = None, stride: int | Sequence[int] = 1,
               padding: Any = 0, dilation: int | Sequence[int] = 1, groups: int = 1) -> Self:
        """Convolution (cross-correlation, as in deep learning) of ``(N, C_in, H, W)`` with a weight
        ``(C_out, C_in/groups, kH, kW)``; any number of spatial axes works the same way.

        PAD, then the windows of :meth:`_pool` ``(N, C_in, oH, oW, kH, kW)``, regrouped to
        ``(N, groups, 1, C_in/groups, oH, oW, kH, kW)``, times the weight reshaped to
        ``(1, groups, C_out/groups, C_in/groups, 1, 1, kH, kW)``, summed over the input channel and
        window axes.  ``padding``: an int, one int per spatial axis, or ``(before, after)`` pairs.
        A window larger than its padded axis raises :class:`UOpError`, as torch does, rather than
        giving an empty result (numpy has no convolution; a zero-size window count is almost always
        a shape mistake).
        """
        weight = self._tensor_of(weight)
        count = weight.ndim - 2
        if count < 1 or self.ndim != count + 2:
            raise UOpError(f"conv: input {self.shape} and weight {weight.shape} need ranks n+2 and n+2")
        batch, channels = self.shape[:2]
        out_channels, group_channels = weight.shape[:2]
        kernel = weight.shape[2:]
        if channels != groups * group_channels:
            raise UOpError(f"conv: input has {channels} channels, weight {weight.shape} with {groups} "
                             f"groups expects {groups * group_channels}")
        if out_channels % groups:
            raise UOpError(f"conv: {out_channels} output channels do not divide into {groups} groups")
        stride = as_pair(stride, count, "stride")
        dilation = as_pair(dilation, count, "dilation")
        x = self.pad([(0, 0), (0, 0), *self._spatial_padding(padding, count)])
        windows = x._pool(kernel, stride, dilation)  # (N, C, *out, *kernel)
        outs = windows.shape[2:2 + count]
        windows = windows.reshape(batch, groups, 1, group_channels, *outs, *kernel)
        per_group = out_channels // groups
        w = weight.reshape(1, groups, per_group, group_channels, *(1,) * count, *kernel)
        dtype = dtypes.promote(windows.dtype, w.dtype)
        products = in_accumulator(windows) * in_accumulator(w)  # half types: exact float32 products
        summed_axes = (3, *range(4 + count, 4 + 2 * count))
        out = products.sum(summed_axes, dtype=dtype).reshape(batch, out_channels, *outs)
        if bias is not None:
            bias = self._tensor_of(bias)
            out = out + bias.reshape(1, out_channels, *(1,) * count)
        return out

    def avg_pool2d(self, kernel_size: int | Sequence[int] = 2, stride: int | Sequence[int] | None = None,
                   padding: Any = 0, dilation: int | Sequence[int] = 1) -> Self:
        """Average over windows of the last two axes (zero padding counts in the average, as torch's
        default); a window larger than its padded axis raises, as in :meth:`conv2d`."""
        return self._pool_reduce("mean", kernel_size, stride, padding, dilation)

    def max_pool2d(self, kernel_size: int | Sequence[int] = 2, stride: int | Sequence[int] | None = None,
                   padding: Any = 0, dilation: int | Sequence[int] = 1) -> Self:
        """Maximum over windows of the last two axes (padding never wins: it is the dtype's minimum); a
        window larger than its padded axis raises, as in :meth:`conv2d`."""
        return self._pool_reduce("max", kernel_size, stride, padding, dilation)

    def _pool_reduce(self, how: str, kernel_size: Any, stride: Any, padding: Any, dilation: Any) -> Self:
        kernel = as_pair(kernel_size, 2, "kernel_size")
        stride = kernel if stride is None else as_pair(stride, 2, "stride")
        dilation = as_pair(dilation, 2, "dilation")
        fill = self.dtype.min if how == "max" else 0
        pads = [(0, 0)] * (self.ndim - 2) + self._spatial_padding(padding, 2)
        windows = self.pad(pads, value=fill)._pool(kernel, stride, dilation)
        axes = (-2, -1)
        return windows.max(axes) if how == "max" else windows.mean(axes)
