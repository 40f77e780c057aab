"""The Tensor front end: a thin, immutable-style wrapper over a UOp graph.

A :class:`Tensor` holds one UOp (``t.uop``); every method builds a new UOp and returns a new
Tensor, nothing is computed until ``t.numpy()`` hands the graph to the pipeline.  The graphs
are written so that a person reading them in the explorer sees the spec's ops:

* **Data** (lists, numpy arrays) becomes a ``BUFFER`` (reshaped to the data's shape).  Its
  initial contents live in the registry :data:`uopviz.core.buffers.buffer_data`, keyed by the
  buffer; the engine reads them with :func:`initial_data` when it runs a program.  Python scalars
  become a ``CONST`` (shape ``()``), which is how the spec writes ``Tensor(1)`` in ``arange``.
* **Broadcasting is explicit**: before an elementwise op both operands are brought to the
  output shape with ``RESHAPE`` (new leading axes of size 1) and ``EXPAND``; a scalar becomes a
  ``CONST`` reshaped and expanded.  Operands get one dtype first (``dtypes.promote``, then
  ``CAST``).  Python scalars are *weak*: they take the tensor's dtype when they are of the same
  kind (bool < int < float), else the default dtype of their kind (``int32`` / ``float32``).
* **Primitive vs decomposed**: the ops the spec names (``EXP2``, ``LOG2``, ``SIN``, ``SQRT``,
  ``POW``, ``RECIP``, ``SUB``, ``DIV``, ``NEG``, the comparisons...) are built as UOps; the rest
  are compositions: ``exp(x) = exp2(x*log2(e))``, ``log(x) = log2(x)*ln(2)``,
  ``cos(x) = sin(pi/2 - x)``, ``sigmoid``, ``tanh``, ``gelu`` ...
* **Reductions** build ``REDUCE`` (which collapses the axes to 1, as the spec says) and then a
  ``RESHAPE`` that drops them unless ``keepdim``.  Sums and products of bool and of integers
  narrower than 32 bits accumulate in ``int32`` (unsigned: ``uint32``); wider integers and
  floats keep their dtype.  ``mean``/``var``/``std`` of integers give ``float32``.
* **Compositions from the spec** are written exactly as the spec writes them: ``matmul``
  (gemm: reshape + mul + sum), ``cumsum`` (prefix_sum), ``arange``, ``gather`` and
  ``scatter_add`` (one-hot masks from ``arange``), and the seven multi-device collectives.

Dtype rules that differ from numpy (on purpose, like tinygrad and torch): true division and
transcendental functions of integers give ``float32`` (numpy: ``float64``); ``argmax`` gives
``int32``; integer sums keep ``int32`` rather than widening to ``int64``.

This module holds the :class:`Tensor` class and ``cat``/``stack``; the helpers it shares live in
:mod:`uopviz.core.tensor_helpers` (shapes, axes, dtypes, data buffers), the accurate ``exp``,
``sigmoid`` and ``tanh`` in :mod:`uopviz.core.tensor_math`, and the collectives in
:mod:`uopviz.core.collectives` (re-exported here, and as ``Tensor.collectives``).
"""

from __future__ import annotations

import itertools
import math
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from uopviz.core.buffers import BufferData, buffer_data, initial_data
from uopviz.core.collectives import (
    allgather,
    allreduce,
    broadcast,
    collectives,
    gather,
    reduce,
    reduce_scatter,
    scatter,
)
from uopviz.core.dtype import DType, dtypes
from uopviz.core.entry_points import entry_point
from uopviz.core.inline import resolve_functions
from uopviz.core.ops import Ops
from uopviz.core.tensor_helpers import (
    DEFAULT_DEVICE,
    Scalar,
    Shape,
    _accumulate_dtype,
    _broadcast,
    _check_devices,
    _check_scalar_fits,
    _data_buffer,
    _default_dtype_of,
    _float_dtype,
    _is_scalar,
    _normalize_axis,
    _pair,
    _shape_args,
    _sharded_buffer,
    _to_dtype,
    _weak_scalar_dtype,
    _wrapped_indices,
    broadcast_shape,
)
from uopviz.core.tensor_math import (
    LN_2,
    _exp,
    _sigmoid,
    _tanh,
)
from uopviz.core.uop import Device, UOp, UOpError

_seed_state = {"seed": 0, "calls": itertools.count()}

# ---------------------------------------------------------------------------------------------
# the Tensor

# id(tensor) -> weak reference, for every tensor a user marked requires_grad (backward finds them)
_gradient_leaves: dict[int, weakref.ref] = {}


class Tensor:
    """A lazily evaluated n-dimensional array: a UOp graph with numpy-like methods.

    ``Tensor(data, dtype=None, device="CPU", requires_grad=None)`` where ``data`` is a (nested)
    list, a numpy array, a Python scalar or a UOp.  Lists take ``float32`` / ``int32`` / ``bool``;
    numpy arrays keep their dtype.  A tuple ``device`` shards the data along axis 0 over those
    devices (see :meth:`shard`).  Attributes: ``uop``, ``shape``, ``dtype``, ``device``,
    ``requires_grad``, ``grad``.
    """

    __array_priority__ = 1000  # numpy scalars/arrays on the left defer to our reflected operators

    uop: UOp
    grad: Tensor | None

    def __init__(self, data: Any, dtype: DType | str | None = None, device: Device = None,
                 requires_grad: bool | None = None):
        dtype = None if dtype is None else _to_dtype(dtype)
        self.grad = None
        self._requires_grad: bool | None = None
        if isinstance(data, Tensor):
            uop = data.uop if dtype is None else data.uop.cast(dtype)
            self._device = device if device is not None else data.device
        elif isinstance(data, UOp):
            uop = data if dtype is None else data.cast(dtype)
            self._device = device if device is not None else (data.device or DEFAULT_DEVICE)
        elif _is_scalar(data) or isinstance(data, np.generic):
            if isinstance(data, np.generic):
                dtype = dtype or dtypes.from_numpy(data.dtype)
                data = data.item()
            dtype = dtype or dtypes.from_python(data)
            _check_scalar_fits(data, dtype)
            uop = UOp.const(dtype, data)
            self._device = device if device is not None else DEFAULT_DEVICE
        elif isinstance(data, list | tuple | np.ndarray):
            array = np.asarray(data)
            if dtype is None:
                dtype = _default_dtype_of(array, from_list=not isinstance(data, np.ndarray))
            if isinstance(device, tuple):
                uop = _sharded_buffer(array, dtype, device, 0)
            else:
                uop = _data_buffer(array, dtype, device or DEFAULT_DEVICE)
            self._device = device if device is not None else DEFAULT_DEVICE
        else:
            raise TypeError(f"cannot make a Tensor from {type(data).__name__}; give a list, a numpy array, "
                            f"a Python scalar or a UOp")
        self.uop = uop
        if requires_grad is not None:
            self.requires_grad = requires_grad

    @classmethod
    def _wrap(cls, uop: UOp, *parents: Tensor, device: Device = None) -> Tensor:
        """A Tensor over ``uop`` built from ``parents`` (device and requires_grad come from them)."""
        tensor = object.__new__(cls)
        tensor.uop = uop
        tensor.grad = None
        tensor._requires_grad = True if any(p._requires_grad for p in parents) else None
        if device is None:
            device = next((p._device for p in parents if p._device is not None), DEFAULT_DEVICE)
        tensor._device = device
        return tensor

    # -- properties ------------------------------------------------------------------------------
    @property
    def shape(self) -> Shape:
        """The shape of the value."""
        return self.uop.shape

    @property
    def dtype(self) -> DType:
        """The element type."""
        return self.uop.dtype

    @property
    def device(self) -> Device:
        """Where the value lives: the graph's device, or the requested one for graphs of constants."""
        device = self.uop.device
        return device if device is not None else self._device

    @property
    def ndim(self) -> int:
        """The rank."""
        return len(self.uop.shape)

    def numel(self) -> int:
        """The number of elements."""
        return math.prod(self.uop.shape)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    @property
    def requires_grad(self) -> bool | None:
        """True when gradients flow to this tensor; ``backward`` sets ``.grad`` on the tensors a
        user marked (leaves); results of operations on them report True too."""
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool | None) -> None:
        self._requires_grad = value
        key = id(self)
        if value:
            _gradient_leaves[key] = weakref.ref(self, lambda _ref, key=key: _gradient_leaves.pop(key, None))
        else:
            _gradient_leaves.pop(key, None)

    __hash__ = object.__hash__

    def __bool__(self) -> bool:
        raise TypeError("a Tensor has no truth value (it is lazy; `a == b` builds a comparison); "
                        "use .numpy() or .item()")

    def __repr__(self) -> str:
        grad = ", requires_grad=True" if self._requires_grad else ""
        device = "(" + ", ".join(self.device) + ")" if isinstance(self.device, tuple) else self.device
        return (f"<Tensor shape={self.shape} dtype={self.dtype.name} device={device}{grad} "
                f"op={self.uop.op.name}>")

    def __iter__(self) -> Iterator[Tensor]:
        for i in range(len(self)):
            yield self[i]

    def __setitem__(self, key: Any, value: Any) -> None:
        raise TypeError("Tensors are immutable: build a new one (pad/where/scatter_add) instead of assigning")

    # -- running -----------------------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """Compile and run the graph on the default backend; the value as a numpy array."""
        return entry_point("compile")([self]).run()[0]  # the engine lives above the front end

    def item(self) -> Scalar:
        """The value of a one-element tensor as a Python scalar."""
        if self.numel() != 1:
            raise ValueError(f"item() needs exactly one element, the tensor has shape {self.shape}")
        return self.numpy().reshape(-1)[0].item()

    def tolist(self) -> Any:
        """The value as nested Python lists."""
        return self.numpy().tolist()

    @staticmethod
    def realized_data(buffer: UOp) -> np.ndarray | None:
        """The initial contents of a data BUFFER (see :func:`initial_data`)."""
        return initial_data(buffer)

    # -- creation ------------------------------------------------------------------------------------
    @staticmethod
    def full(shape: Shape | int, value: Scalar, dtype: DType | str | None = None, device: Device = None,
             requires_grad: bool | None = None) -> Tensor:
        """A tensor of ``shape`` filled with ``value``: a CONST reshaped and expanded."""
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        const = Tensor(value, dtype=dtype, device=device)
        out = const.reshape((1,) * len(shape)).expand(shape)
        if requires_grad is not None:
            out.requires_grad = requires_grad
        return out

    @staticmethod
    def zeros(*shape: int, dtype: DType | str | None = None, device: Device = None,
              requires_grad: bool | None = None) -> Tensor:
        """A tensor of zeros (``float32`` unless ``dtype``)."""
        return Tensor.full(_shape_args(shape), 0.0 if dtype is None else 0, dtype=dtype, device=device,
                           requires_grad=requires_grad)

    @staticmethod
    def ones(*shape: int, dtype: DType | str | None = None, device: Device = None,
             requires_grad: bool | None = None) -> Tensor:
        """A tensor of ones (``float32`` unless ``dtype``)."""
        return Tensor.full(_shape_args(shape), 1.0 if dtype is None else 1, dtype=dtype, device=device,
                           requires_grad=requires_grad)

    def full_like(self, value: Scalar, dtype: DType | str | None = None) -> Tensor:
        """A tensor like this one (shape, dtype, device) filled with ``value``."""
        return Tensor.full(self.shape, value, dtype=dtype or self.dtype, device=self.device)

    def zeros_like(self, dtype: DType | str | None = None) -> Tensor:
        """Zeros of this tensor's shape, dtype and device."""
        return self.full_like(0, dtype)

    def ones_like(self, dtype: DType | str | None = None) -> Tensor:
        """Ones of this tensor's shape, dtype and device."""
        return self.full_like(1, dtype)

    @staticmethod
    def empty(*shape: int, dtype: DType | str | None = None, device: Device = None) -> Tensor:
        """A BUFFER without initial contents, reshaped to ``shape``."""
        shape = _shape_args(shape)
        dtype = _to_dtype(dtype) if dtype is not None else dtypes.default_float
        device = device or DEFAULT_DEVICE
        if isinstance(device, tuple):
            raise ValueError("empty() on a multi-device tuple: make it on one device and shard it")
        buffer = UOp.buffer(math.prod(shape), dtype, device)
        return Tensor(buffer.reshape(shape) if buffer.shape != shape else buffer, device=device)

    @staticmethod
    def arange(start: int | float, stop: int | float | None = None, step: int | float = 1,
               dtype: DType | str | None = None, device: Device = None) -> Tensor:
        """``[start, start+step, ...)`` below ``stop``; ``arange(n)`` is the spec's composition:
        ``prefix_sum(Tensor(1).reshape(1).expand(n)) - 1``."""
        if stop is None:
            start, stop = 0, start
        count = max(0, math.ceil((stop - start) / step))
        out = Tensor(1, device=device).reshape(1).expand(count)
        if count:
            out = out._prefix_sum() - 1  # [1, 2, ..., n] - 1
        all_ints = all(isinstance(v, int) for v in (start, stop, step))
        if step != 1:
            out = out * (step if all_ints else float(step))
        if start != 0:
            out = out + (start if all_ints else float(start))
        if not all_ints and not out.dtype.is_float:
            out = out.cast(dtypes.default_float)
        return out.cast(_to_dtype(dtype)) if dtype is not None else out

    @staticmethod
    def eye(n: int, m: int | None = None, dtype: DType | str | None = None, device: Device = None) -> Tensor:
        """The identity matrix ``(n, m)``: ``arange(n)[:, None] == arange(m)[None, :]``."""
        m = n if m is None else m
        rows = Tensor.arange(n, device=device).reshape(n, 1)
        cols = Tensor.arange(m, device=device).reshape(1, m)
        return (rows == cols).cast(_to_dtype(dtype) if dtype is not None else dtypes.default_float)

    @staticmethod
    def manual_seed(seed: int) -> None:
        """Seed the random numbers drawn without an explicit ``seed``."""
        _seed_state["seed"] = int(seed)
        _seed_state["calls"] = itertools.count()

    @staticmethod
    def rand(*shape: int, seed: int | None = None, dtype: DType | str | None = None,
             device: Device = None) -> Tensor:
        """Uniform ``[0, 1)`` numbers from the counter-based THREEFRY generator.

        Counters ``arange(n)`` (as ``uint64``) are hashed with THREEFRY under a key (``seed``, or the
        global seed and a call counter when ``seed`` is None); the high bits of each result become
        a float's mantissa with exponent 0 (a number in ``[1, 2)``, the mantissa trick), minus 1.
        """
        shape = _shape_args(shape)
        dtype = _to_dtype(dtype) if dtype is not None else dtypes.default_float
        if not dtype.is_float:
            raise TypeError(f"rand makes floats, not {dtype.name}")
        if seed is None:
            key = ((_seed_state["seed"] & 0xFFFFFFFF) << 32) | (next(_seed_state["calls"]) & 0xFFFFFFFF)
        else:
            key = int(seed) & 0xFFFFFFFFFFFFFFFF
        count = math.prod(shape)
        counters = Tensor.arange(count, device=device).cast(dtypes.uint64)
        keys = Tensor(key, dtype=dtypes.uint64, device=device)
        counters, keys = _broadcast(counters, keys)
        bits = Tensor._wrap(UOp(Ops.THREEFRY, (counters.uop, keys.uop)), counters, keys)
        if dtype is dtypes.float64:
            mantissa = (bits >> 12) | 0x3FF0000000000000
            unit = mantissa.bitcast(dtypes.float64) - 1.0
        else:
            low = (bits & 0xFFFFFFFF).cast(dtypes.uint32)
            mantissa = (low >> 9) | 0x3F800000
            unit = (mantissa.bitcast(dtypes.float32) - 1.0).cast(dtype)
        return unit.reshape(shape)

    @staticmethod
    def randn(*shape: int, seed: int | None = None, dtype: DType | str | None = None,
              device: Device = None) -> Tensor:
        """Standard normal numbers by Box-Muller from two uniform draws."""
        shape = _shape_args(shape)
        dtype = _to_dtype(dtype) if dtype is not None else dtypes.default_float
        uniform = Tensor.rand(2, *shape, seed=seed, dtype=dtypes.float32, device=device)
        radius = ((1.0 - uniform[0]).log() * -2.0).sqrt()  # 1 - u is in (0, 1]: log never sees 0
        return (radius * (uniform[1] * (2 * math.pi)).cos()).cast(dtype)

    # -- movement ------------------------------------------------------------------------------------
    def reshape(self, *shape: int) -> Tensor:
        """Reinterpret in row-major order; one ``-1`` takes the remaining size."""
        shape = tuple(int(s) for s in _shape_args(shape))
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
        return Tensor._wrap(self.uop.reshape(shape), self)

    def permute(self, *order: int) -> Tensor:
        """Reorder the axes: axis ``i`` of the result is axis ``order[i]`` of this tensor."""
        order = _shape_args(order)
        if len(order) != self.ndim:
            raise UOpError(f"permute of a rank-{self.ndim} tensor {self.shape} needs {self.ndim} axes, "
                             f"got {order}")
        order = tuple(_normalize_axis(a, self.ndim) for a in order)
        if sorted(order) != list(range(self.ndim)):
            raise UOpError(f"{order} is not a permutation of the axes of {self.shape}")
        if order == tuple(range(self.ndim)):
            return self
        return Tensor._wrap(self.uop.permute(order), self)

    def expand(self, *shape: int) -> Tensor:
        """Broadcast to ``shape`` as ``numpy.broadcast_to`` does (new leading axes allowed; ``-1``
        keeps a size)."""
        shape = tuple(_shape_args(shape))
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
        return Tensor._wrap(out.uop.expand(shape), out)

    def broadcast_to(self, *shape: int) -> Tensor:
        """Same as :meth:`expand`."""
        return self.expand(*shape)

    def pad(self, padding: Any, value: Scalar = 0) -> Tensor:
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
        padded = Tensor._wrap(x.uop.pad(offsets, new_shape), x)
        if value == 0:
            return padded
        inside = Tensor.full(x.shape, True, device=x.device)
        mask = Tensor._wrap(inside.uop.pad(offsets, new_shape), inside)
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

    def shrink(self, bounds: Any) -> Tensor:
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
        return Tensor._wrap(self.uop.shrink(offsets, sizes), self)

    def _keep_shards(self, op: str, new_shape: Sequence[int]) -> None:
        """A PAD or SHRINK may not change the size of the shard axis of a multi-device value: its
        shards would differ in size (the spec keeps the axis through these ops)."""
        axis = self.uop.axis if isinstance(self.device, tuple) else None
        if axis is not None and new_shape[axis] != self.shape[axis]:
            raise UOpError(f"{op}: {self.shape} to {tuple(new_shape)} changes the size of axis {axis}, which "
                           f"is sharded over {len(self.device)} devices: the shards would no longer be "
                           f"equal; copy() it to one device first")

    def shrink_to(self, *shape: int) -> Tensor:
        """Keep the first ``shape[k]`` elements of each axis (the spec's ``shrink_to``)."""
        shape = _shape_args(shape)
        return self.shrink([(0, s) for s in shape])

    def flip(self, axis: int | Sequence[int] | None = None) -> Tensor:
        """Reverse the order along ``axis`` (int, tuple, or None for every axis)."""
        axes = self._axes(axis)
        flags = tuple(i in axes for i in range(self.ndim))
        if not any(flags):
            return self
        return Tensor._wrap(self.uop.flip(flags), self)

    def transpose(self, a: int = -2, b: int = -1) -> Tensor:
        """Swap axes ``a`` and ``b`` (torch's ``transpose``, so it needs two axes; numpy's
        ``transpose()`` reversing every axis is :attr:`T` or :meth:`permute`)."""
        a, b = _normalize_axis(a, self.ndim), _normalize_axis(b, self.ndim)
        order = list(range(self.ndim))
        order[a], order[b] = order[b], order[a]
        return self.permute(order)

    @property
    def T(self) -> Tensor:  # noqa: N802 - numpy's name
        """All axes reversed (numpy's ``.T``)."""
        return self.permute(tuple(reversed(range(self.ndim))))

    def flatten(self, start: int = 0, end: int = -1) -> Tensor:
        """Merge axes ``start..end`` (inclusive) into one."""
        if self.ndim == 0:
            return self.reshape(1)
        start, end = _normalize_axis(start, self.ndim), _normalize_axis(end, self.ndim)
        if start > end:
            raise UOpError(f"flatten {self.shape}: start {start} is after end {end}")
        merged = math.prod(self.shape[start:end + 1])
        return self.reshape(self.shape[:start] + (merged,) + self.shape[end + 1:])

    def unflatten(self, axis: int, sizes: Sequence[int]) -> Tensor:
        """Split ``axis`` into ``sizes`` (one may be -1)."""
        axis = _normalize_axis(axis, self.ndim)
        sizes = tuple(sizes)
        if -1 in sizes:
            known = math.prod(s for s in sizes if s != -1)
            sizes = tuple(self.shape[axis] // known if s == -1 else s for s in sizes)
        if math.prod(sizes) != self.shape[axis]:
            raise UOpError(f"unflatten axis {axis} of {self.shape} into {sizes}: sizes do not multiply to "
                             f"{self.shape[axis]}")
        return self.reshape(self.shape[:axis] + sizes + self.shape[axis + 1:])

    def squeeze(self, axis: int | Sequence[int] | None = None) -> Tensor:
        """Drop axes of size 1 (all of them, or the given ones, which must have size 1)."""
        if axis is None:
            return self.reshape(tuple(s for s in self.shape if s != 1))
        axes = self._axes(axis)
        for a in axes:
            if self.shape[a] != 1:
                raise UOpError(f"squeeze {self.shape}: axis {a} has size {self.shape[a]}, not 1")
        return self.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    def unsqueeze(self, axis: int) -> Tensor:
        """Insert an axis of size 1 at ``axis`` (negative counts from the end of the result)."""
        axis = _normalize_axis(axis, self.ndim + 1)
        return self.reshape(self.shape[:axis] + (1,) + self.shape[axis:])

    def repeat(self, *repeats: int) -> Tensor:
        """Tile the tensor ``repeats[k]`` times along each axis (``numpy.tile`` semantics; more repeats
        than axes add leading axes): reshape, expand, reshape."""
        repeats = tuple(_shape_args(repeats))
        if len(repeats) < self.ndim:
            repeats = (1,) * (self.ndim - len(repeats)) + repeats
        base = (1,) * (len(repeats) - self.ndim) + self.shape
        x = self.reshape(tuple(itertools.chain.from_iterable((1, s) for s in base)))
        x = x.expand(tuple(itertools.chain.from_iterable((r, s) for r, s in zip(repeats, base))))
        return x.reshape(tuple(r * s for r, s in zip(repeats, base)))

    tile = repeat

    def repeat_interleave(self, repeats: int, axis: int | None = None) -> Tensor:
        """Repeat each element ``repeats`` times along ``axis`` (``numpy.repeat``; None flattens)."""
        x = self.flatten() if axis is None else self
        axis = 0 if axis is None else _normalize_axis(axis, x.ndim)
        x = x.unsqueeze(axis + 1)
        x = x.expand(x.shape[:axis + 1] + (repeats,) + x.shape[axis + 2:])
        return x.flatten(axis, axis + 1)

    def __getitem__(self, index: Any) -> Tensor:
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
            if isinstance(entry, Tensor | list | np.ndarray) or isinstance(entry, bool):
                raise TypeError(f"indexing with {type(entry).__name__}: only ints, slices, None and ... are "
                                f"supported; use t.gather(idx, axis) for integer-array indexing")
            if not (entry is None or entry is Ellipsis or isinstance(entry, slice | int | np.integer)):
                raise TypeError(f"invalid index {entry!r} of type {type(entry).__name__}")
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

    def cat(self: Tensor | Sequence[Tensor], *others: Tensor, axis: int = 0) -> Tensor:
        """Concatenate along ``axis`` (``a.cat(b, c)`` or ``Tensor.cat([a, b, c])``): each tensor is
        PADded to the full length at its offset, then the padded tensors are added (OR for bool)."""
        tensors = [*self, *others] if isinstance(self, list | tuple) else [self, *others]
        if not tensors:
            raise ValueError("cat needs at least one tensor")
        tensors = [t if isinstance(t, Tensor) else Tensor(t) for t in tensors]
        first = tensors[0]
        axis = _normalize_axis(axis, first.ndim)
        for t in tensors[1:]:
            if t.ndim != first.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, first.shape))
                                           if i != axis):
                shapes = [x.shape for x in tensors]
                raise UOpError(f"cat along axis {axis}: shapes {shapes} differ off that axis")
        dtype = first.dtype
        for t in tensors[1:]:
            dtype = dtypes.promote(dtype, t.dtype)
        total = sum(t.shape[axis] for t in tensors)
        parts: list[Tensor] = []
        offset = 0
        for t in tensors:
            pads = [(0, 0)] * t.ndim
            pads[axis] = (offset, total - offset - t.shape[axis])
            parts.append(t.cast(dtype).pad(pads))
            offset += t.shape[axis]
        out = parts[0]
        for part in parts[1:]:
            out = (out | part) if dtype.is_bool else out + part
        return out

    def stack(self: Tensor | Sequence[Tensor], *others: Tensor, axis: int = 0) -> Tensor:
        """Join along a new axis: each tensor gets a size-1 axis, then :meth:`cat`."""
        tensors = [*self, *others] if isinstance(self, list | tuple) else [self, *others]
        if not tensors:
            raise ValueError("stack needs at least one tensor")
        tensors = [t if isinstance(t, Tensor) else Tensor(t) for t in tensors]
        shapes = {t.shape for t in tensors}
        if len(shapes) > 1:
            raise UOpError(f"stack needs equal shapes, got {[t.shape for t in tensors]}")
        axis = _normalize_axis(axis, tensors[0].ndim + 1)
        return Tensor.cat([t.unsqueeze(axis) for t in tensors], axis=axis)

    def split(self, sizes: int | Sequence[int], axis: int = 0) -> tuple[Tensor, ...]:
        """Split along ``axis`` into pieces of ``sizes`` elements (an int: equal pieces, the last may be
        smaller; a list: those sizes, which must add up to the axis) — torch's semantics."""
        axis = _normalize_axis(axis, self.ndim)
        length = self.shape[axis]
        if isinstance(sizes, int):
            if sizes <= 0:
                raise ValueError(f"split size must be positive, got {sizes}")
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

    def chunk(self, chunks: int, axis: int = 0) -> tuple[Tensor, ...]:
        """Split into ``chunks`` pieces of ``ceil(size/chunks)`` elements (the last may be smaller)."""
        if chunks <= 0:
            raise ValueError(f"chunk count must be positive, got {chunks}")
        axis = _normalize_axis(axis, self.ndim)
        return self.split(max(1, math.ceil(self.shape[axis] / chunks)), axis)

    # -- elementwise: building blocks ------------------------------------------------------------
    def _scalar_tensor(self, value: Scalar, dtype: DType) -> Tensor:
        _check_scalar_fits(value, dtype)
        return Tensor._wrap(UOp.const(dtype, value), device=self._device)

    def _operands(self, other: Any, reverse: bool = False, op: Ops | None = None) -> tuple[Tensor, Tensor]:
        """``(self, other)`` (or swapped) with one dtype and one shape: promotion by CAST,
        broadcasting by RESHAPE + EXPAND (``op``, what they are for, is named if they cannot)."""
        if isinstance(other, Tensor):
            dtype = dtypes.promote(self.dtype, other.dtype)
            x, y = self.cast(dtype), other.cast(dtype)
        elif _is_scalar(other):
            dtype = _weak_scalar_dtype(self.dtype, other)
            x, y = self.cast(dtype), self._scalar_tensor(other, dtype)
        elif isinstance(other, UOp | list | tuple | np.ndarray | np.generic):
            return self._operands(Tensor(other, device=self.device), reverse, op)
        else:
            raise TypeError(f"cannot combine a Tensor with {type(other).__name__}")
        _check_devices(x, y)
        x, y = _broadcast(x, y, op=op)
        return (y, x) if reverse else (x, y)

    def _elementwise(self, op: Ops, *others: Tensor) -> Tensor:
        return Tensor._wrap(UOp(op, (self.uop, *(o.uop for o in others))), self, *others)

    def _binary(self, op: Ops, other: Any, reverse: bool = False) -> Tensor:
        x, y = self._operands(other, reverse, op)
        return x._elementwise(op, y)

    def _binary_float(self, op: Ops, other: Any, reverse: bool = False) -> Tensor:
        x, y = self._operands(other, reverse, op)
        dtype = _float_dtype(x.dtype)
        return x.cast(dtype)._elementwise(op, y.cast(dtype))

    def _binary_integer(self, op: Ops, other: Any, reverse: bool = False, allow_bool: bool = False) -> Tensor:
        x, y = self._operands(other, reverse, op)
        if not (x.dtype.is_int or (allow_bool and x.dtype.is_bool)):
            raise TypeError(f"{op.name} needs integer{' or bool' if allow_bool else ''} operands, got "
                            f"{x.dtype.name}")
        return x._elementwise(op, y)

    def _unary_float(self, op: Ops) -> Tensor:
        return self.cast(_float_dtype(self.dtype))._elementwise(op)

    def cast(self, dtype: DType | str) -> Tensor:
        """Convert to ``dtype`` (CAST; nothing when already of that type)."""
        dtype = _to_dtype(dtype)
        if dtype == self.dtype:
            return self
        return Tensor._wrap(self.uop.cast(dtype), self)

    def bitcast(self, dtype: DType | str) -> Tensor:
        """Reinterpret the bits as ``dtype`` of the same size (BITCAST)."""
        dtype = _to_dtype(dtype)
        if dtype.itemsize != self.dtype.itemsize:
            raise UOpError(f"bitcast {self.dtype.name} ({self.dtype.itemsize} bytes) to {dtype.name} "
                             f"({dtype.itemsize} bytes): sizes differ")
        return Tensor._wrap(self.uop.bitcast(dtype), self)

    # -- elementwise: arithmetic ---------------------------------------------------------------
    def add(self, other: Any, reverse: bool = False) -> Tensor:
        """``self + other`` (ADD)."""
        return self._binary(Ops.ADD, other, reverse)

    def sub(self, other: Any, reverse: bool = False) -> Tensor:
        """``self - other`` (SUB)."""
        x, y = self._operands(other, reverse, Ops.SUB)
        if x.dtype.is_bool:
            raise TypeError("subtraction of bool tensors is not defined; use ^ or logical_not")
        return x._elementwise(Ops.SUB, y)

    def mul(self, other: Any, reverse: bool = False) -> Tensor:
        """``self * other`` (MUL)."""
        return self._binary(Ops.MUL, other, reverse)

    def div(self, other: Any, reverse: bool = False) -> Tensor:
        """True division ``self / other`` (DIV); integers give ``float32``."""
        return self._binary_float(Ops.DIV, other, reverse)

    def floordiv(self, other: Any, reverse: bool = False) -> Tensor:
        """Floor division: IDIV for integers (the spec's floor semantics); ``floor(a / b)`` for floats."""
        x, y = self._operands(other, reverse, Ops.IDIV)
        if x.dtype.is_bool:
            x, y = x.cast(dtypes.default_int), y.cast(dtypes.default_int)
        if x.dtype.is_float:
            return (x / y).floor()
        return x._elementwise(Ops.IDIV, y)

    def mod(self, other: Any, reverse: bool = False) -> Tensor:
        """Modulo with the sign of the divisor: MOD for integers; ``a - b*floor(a/b)`` for floats."""
        x, y = self._operands(other, reverse, Ops.MOD)
        if x.dtype.is_bool:
            x, y = x.cast(dtypes.default_int), y.cast(dtypes.default_int)
        if x.dtype.is_float:
            return x - y * (x / y).floor()
        return x._elementwise(Ops.MOD, y)

    def neg(self) -> Tensor:
        """``-self`` (NEG)."""
        if self.dtype.is_bool:
            raise TypeError("negation of a bool tensor is not defined; use logical_not")
        return self._elementwise(Ops.NEG)

    def reciprocal(self) -> Tensor:
        """``1 / self`` (RECIP)."""
        return self._unary_float(Ops.RECIP)

    def square(self) -> Tensor:
        """``self * self``."""
        return self * self

    def pow(self, exponent: Any, reverse: bool = False) -> Tensor:
        """``self ** exponent``.

        A Python integer exponent multiplies (square-and-multiply; exact and defined for negative
        bases, a negative exponent takes the reciprocal).  Any other exponent builds the spec's POW
        (``exp2(log2(a) * b)``, so defined for positive bases), in floating point.
        """
        if not reverse and isinstance(exponent, int) and not isinstance(exponent, bool):
            return self._integer_power(exponent)
        return self._binary_float(Ops.POW, exponent, reverse)

    def _integer_power(self, exponent: int) -> Tensor:
        if exponent < 0:
            if not self.dtype.is_float:
                raise ValueError(f"integer tensors to the negative power {exponent} are not allowed")
            return self._integer_power(-exponent).reciprocal()
        result: Tensor | None = None
        base = self
        while exponent:
            if exponent & 1:
                result = base if result is None else result * base
            exponent >>= 1
            if exponent:
                base = base * base
        return result if result is not None else self.ones_like()

    def maximum(self, other: Any) -> Tensor:
        """Elementwise maximum (MAX)."""
        return self._binary(Ops.MAX, other)

    def minimum(self, other: Any) -> Tensor:
        """Elementwise minimum: ``-max(-a, -b)`` for floats, ``~max(~a, ~b)`` for integers (never
        overflows), AND for bool."""
        x, y = self._operands(other, op=Ops.MAX)
        if x.dtype.is_float:
            return -((-x).maximum(-y))
        if x.dtype.is_bool:
            return x & y
        return ~((~x).maximum(~y))

    def clip(self, min_: Any = None, max_: Any = None) -> Tensor:
        """``minimum(maximum(self, min_), max_)`` (either bound may be None)."""
        if min_ is None and max_ is None:
            raise ValueError("clip needs min_ or max_")
        out = self if min_ is None else self.maximum(min_)
        return out if max_ is None else out.minimum(max_)

    clamp = clip

    def abs(self) -> Tensor:
        """``|x|`` as ``max(x, -x)`` (unsigned and bool: unchanged)."""
        if self.dtype.is_unsigned or self.dtype.is_bool:
            return self
        return self.maximum(-self)

    def sign(self) -> Tensor:
        """-1, 0 or 1 by the sign: ``(x > 0) - (x < 0)`` in the tensor's dtype."""
        if self.dtype.is_bool:
            return self
        positive = (self > 0).cast(self.dtype)
        if self.dtype.is_unsigned:
            return positive
        return positive - (self < 0).cast(self.dtype)

    def trunc(self) -> Tensor:
        """Round toward zero (TRUNC; integers unchanged)."""
        return self if not self.dtype.is_float else self._elementwise(Ops.TRUNC)

    def floor(self) -> Tensor:
        """Round down: ``trunc(x) - (x < trunc(x))``."""
        if not self.dtype.is_float:
            return self
        truncated = self.trunc()
        return truncated - (self < truncated).cast(self.dtype)

    def ceil(self) -> Tensor:
        """Round up: ``trunc(x) + (x > trunc(x))``."""
        if not self.dtype.is_float:
            return self
        truncated = self.trunc()
        return truncated + (self > truncated).cast(self.dtype)

    # -- elementwise: transcendental -------------------------------------------------------------
    def exp2(self) -> Tensor:
        """``2 ** x`` (EXP2)."""
        return self._unary_float(Ops.EXP2)

    def log2(self) -> Tensor:
        """``log2(x)`` (LOG2)."""
        return self._unary_float(Ops.LOG2)

    def _in_float32_for_halves(self, compute: Any) -> Tensor:
        """``compute(x)`` in the tensor's float type; float16 and bfloat16 in float32, rounded once at
        the end, because the roundings of a composition's steps to 8 or 11 bits would dominate its
        error (``x·log2 e`` rounded to bfloat16 made ``exp(88.5)`` overflow)."""
        dtype = _float_dtype(self.dtype)
        if dtype in (dtypes.float16, dtypes.bfloat16):
            return compute(self.cast(dtypes.float32)).cast(dtype)
        return compute(self.cast(dtype))

    def exp(self) -> Tensor:
        """``e ** x`` as ``exp2(t)·(1 + d·ln 2)`` with ``t = x·log2 e`` rounded and ``d`` its rounding
        error, recovered exactly by splitting ``x`` and ``log2 e`` into halves (a bare
        ``exp2(x·log2 e)`` carries the product's rounding into the exponent: 62 ulp near the float32
        overflow).  float16/bfloat16 are computed in float32."""
        return self._in_float32_for_halves(_exp)

    def log(self) -> Tensor:
        """Natural log as ``log2(x) * ln(2)`` (float16/bfloat16 computed in float32)."""
        return self._in_float32_for_halves(lambda x: x.log2() * LN_2)

    def sin(self) -> Tensor:
        """``sin(x)`` (SIN)."""
        return self._unary_float(Ops.SIN)

    def cos(self) -> Tensor:
        """``cos(x)`` (COS, one of our two ops beyond the card).

        Not the card's ``sin(pi/2 - x)``: rounding ``pi/2 - x`` loses the result's digits as ``|x|``
        grows (4.8e-4 absolute error near 1e4 in float32); COS shares SIN's exact reduction."""
        return self._unary_float(Ops.COS)

    def tan(self) -> Tensor:
        """``tan(x)`` (TAN, ours beyond the card): one reduction and one division, accurate near the
        poles, where ``sin(x) / cos(x)`` of two separately rounded results is not."""
        return self._unary_float(Ops.TAN)

    def sqrt(self) -> Tensor:
        """``sqrt(x)`` (SQRT)."""
        return self._unary_float(Ops.SQRT)

    def rsqrt(self) -> Tensor:
        """``1 / sqrt(x)`` (RECIP of SQRT)."""
        return self.sqrt().reciprocal()

    def relu(self) -> Tensor:
        """``max(x, 0)``."""
        return self.maximum(0)

    def sigmoid(self) -> Tensor:
        """``1 / (1 + exp(-x))``, as ``exp(x) / (1 + exp(x))`` for negative ``x`` (the exponential
        never overflows); float16/bfloat16 computed in float32."""
        return self._in_float32_for_halves(_sigmoid)

    def tanh(self) -> Tensor:
        """``x·P(x²)`` for ``|x| < 0.55`` (``2·sigmoid(2x) - 1`` cancels there: 2e7 ulp at 4e-8),
        ``2 * sigmoid(2x) - 1`` beyond; float16/bfloat16 computed in float32."""
        return self._in_float32_for_halves(_tanh)

    def gelu(self) -> Tensor:
        """GELU, tanh approximation: ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``."""
        x = self.cast(_float_dtype(self.dtype))
        return 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh())

    # -- elementwise: comparisons and logic -------------------------------------------------------
    def where(self, if_true: Any, if_false: Any) -> Tensor:
        """``if_true`` where this (the condition) is nonzero, else ``if_false`` (WHERE)."""
        condition = self if self.dtype.is_bool else self != 0
        if isinstance(if_true, Tensor):
            x, y = if_true._operands(if_false, op=Ops.WHERE)
        elif isinstance(if_false, Tensor):
            y, x = if_false._operands(if_true, op=Ops.WHERE)
        else:
            if not (_is_scalar(if_true) and _is_scalar(if_false)):
                x = Tensor(if_true, device=self.device)
                x, y = x._operands(if_false, op=Ops.WHERE)
            else:
                dtype = dtypes.from_python(if_true)
                dtype = _weak_scalar_dtype(dtype, if_false)
                x, y = self._scalar_tensor(if_true, dtype), self._scalar_tensor(if_false, dtype)
        _check_devices(condition, x)
        condition, x, y = _broadcast(condition, x, y, op=Ops.WHERE)
        return Tensor._wrap(UOp(Ops.WHERE, (condition.uop, x.uop, y.uop)), condition, x, y)

    def logical_not(self) -> Tensor:
        """``not x`` as bool: NOT of a bool tensor, ``x == 0`` otherwise."""
        if self.dtype.is_bool:
            return self._elementwise(Ops.NOT)
        return self == 0

    def __invert__(self) -> Tensor:
        if self.dtype.is_bool:
            return self._elementwise(Ops.NOT)
        if not self.dtype.is_int:
            raise TypeError(f"~ needs an integer or bool tensor, got {self.dtype.name}")
        all_ones = self.dtype.max if self.dtype.is_unsigned else -1
        return self._elementwise(Ops.XOR, self._scalar_tensor(all_ones, self.dtype).expand(self.shape))

    def __add__(self, other: Any) -> Tensor: return self.add(other)
    def __radd__(self, other: Any) -> Tensor: return self.add(other, True)
    def __sub__(self, other: Any) -> Tensor: return self.sub(other)
    def __rsub__(self, other: Any) -> Tensor: return self.sub(other, True)
    def __mul__(self, other: Any) -> Tensor: return self.mul(other)
    def __rmul__(self, other: Any) -> Tensor: return self.mul(other, True)
    def __truediv__(self, other: Any) -> Tensor: return self.div(other)
    def __rtruediv__(self, other: Any) -> Tensor: return self.div(other, True)
    def __floordiv__(self, other: Any) -> Tensor: return self.floordiv(other)
    def __rfloordiv__(self, other: Any) -> Tensor: return self.floordiv(other, True)
    def __mod__(self, other: Any) -> Tensor: return self.mod(other)
    def __rmod__(self, other: Any) -> Tensor: return self.mod(other, True)
    def __pow__(self, other: Any) -> Tensor: return self.pow(other)
    def __rpow__(self, other: Any) -> Tensor: return self.pow(other, True)
    def __neg__(self) -> Tensor: return self.neg()
    def __abs__(self) -> Tensor: return self.abs()
    def __matmul__(self, other: Any) -> Tensor: return self.matmul(other)
    def __rmatmul__(self, other: Any) -> Tensor: return Tensor(other, device=self.device).matmul(self)
    def __and__(self, other: Any) -> Tensor: return self._binary_integer(Ops.AND, other, allow_bool=True)
    def __rand__(self, other: Any) -> Tensor: return self._binary_integer(Ops.AND, other, True, True)
    def __or__(self, other: Any) -> Tensor: return self._binary_integer(Ops.OR, other, allow_bool=True)
    def __ror__(self, other: Any) -> Tensor: return self._binary_integer(Ops.OR, other, True, True)
    def __xor__(self, other: Any) -> Tensor: return self._binary_integer(Ops.XOR, other, allow_bool=True)
    def __rxor__(self, other: Any) -> Tensor: return self._binary_integer(Ops.XOR, other, True, True)
    def __lshift__(self, other: Any) -> Tensor: return self._binary_integer(Ops.SHL, other)
    def __rlshift__(self, other: Any) -> Tensor: return self._binary_integer(Ops.SHL, other, True)
    def __rshift__(self, other: Any) -> Tensor: return self._binary_integer(Ops.SHR, other)
    def __rrshift__(self, other: Any) -> Tensor: return self._binary_integer(Ops.SHR, other, True)
    def __lt__(self, other: Any) -> Tensor: return self._binary(Ops.CMP_LT, other)
    def __le__(self, other: Any) -> Tensor: return self._binary(Ops.CMP_LE, other)
    def __gt__(self, other: Any) -> Tensor: return self._binary(Ops.CMP_GT, other)
    def __ge__(self, other: Any) -> Tensor: return self._binary(Ops.CMP_GE, other)
    def __eq__(self, other: Any) -> Tensor: return self._binary(Ops.CMP_EQ, other)  # type: ignore[override]
    def __ne__(self, other: Any) -> Tensor: return self._binary(Ops.CMP_NE, other)  # type: ignore[override]

    # -- reductions --------------------------------------------------------------------------------
    def _axes(self, axis: int | Sequence[int] | None) -> tuple[int, ...]:
        if axis is None:
            return tuple(range(self.ndim))
        axes = (axis,) if isinstance(axis, int | np.integer) else tuple(axis)
        normalized = tuple(sorted(_normalize_axis(a, self.ndim) for a in axes))
        if len(set(normalized)) != len(normalized):
            raise ValueError(f"repeated axis in {axis}")
        return normalized

    def _reduce(self, op: Ops, axis: int | Sequence[int] | None, keepdim: bool) -> Tensor:
        """REDUCE (axes collapse to 1), then a RESHAPE dropping them unless ``keepdim``."""
        axes = self._axes(axis)
        if not axes:
            return self
        if op is Ops.MAX and any(self.shape[a] == 0 for a in axes):  # as numpy: max/min of nothing
            raise ValueError(f"max/min over a zero-size axis of {self.shape}: nothing to choose from")
        out = Tensor._wrap(self.uop.reduce(op, axes), self)
        if keepdim:
            return out
        return out.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

    def sum(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
            dtype: DType | str | None = None) -> Tensor:
        """Sum over ``axis`` (None: all).  Accumulates in ``dtype`` or the accumulation rule's type."""
        accumulate = _to_dtype(dtype) if dtype is not None else _accumulate_dtype(self.dtype)
        return self.cast(accumulate)._reduce(Ops.ADD, axis, keepdim)

    def prod(self, axis: int | Sequence[int] | None = None, keepdim: bool = False,
             dtype: DType | str | None = None) -> Tensor:
        """Product over ``axis`` (REDUCE MUL)."""
        accumulate = _to_dtype(dtype) if dtype is not None else _accumulate_dtype(self.dtype)
        return self.cast(accumulate)._reduce(Ops.MUL, axis, keepdim)

    def max(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """Maximum over ``axis`` (REDUCE MAX)."""
        return self._reduce(Ops.MAX, axis, keepdim)

    def min(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """Minimum over ``axis``: ``-max(-x)`` for floats, ``~max(~x)`` for integers, ``all`` for bool."""
        if self.dtype.is_bool:
            return self.all(axis, keepdim)
        if self.dtype.is_float:
            return -((-self).max(axis, keepdim))
        return ~((~self).max(axis, keepdim))

    def any(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """True where any element along ``axis`` is nonzero (REDUCE MAX over bool); over a
        zero-size axis False, as numpy (nothing is nonzero), where max itself has no answer."""
        truth = self if self.dtype.is_bool else self != 0
        axes = self._axes(axis)
        if any(self.shape[a] == 0 for a in axes):
            kept = tuple(1 if i in axes else size for i, size in enumerate(self.shape))
            shape = kept if keepdim else tuple(size for i, size in enumerate(self.shape) if i not in axes)
            return Tensor.full(shape, False, dtype=dtypes.bool, device=self.device)
        return truth._reduce(Ops.MAX, axis, keepdim)

    def all(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """True where every element along ``axis`` is nonzero: ``not any(not x)`` (so True over a
        zero-size axis, as numpy)."""
        truth = self if self.dtype.is_bool else self != 0
        return truth.logical_not().any(axis, keepdim).logical_not()

    def _count(self, axis: int | Sequence[int] | None) -> int:
        return math.prod(self.shape[a] for a in self._axes(axis))

    def mean(self, axis: int | Sequence[int] | None = None, keepdim: bool = False) -> Tensor:
        """Mean over ``axis``: ``sum / count`` (integers give float32; half types accumulate in float32)."""
        dtype = _float_dtype(self.dtype)
        accumulate = dtypes.float32 if dtype.itemsize < 4 else dtype
        total = self.cast(accumulate).sum(axis, keepdim)
        return (total / self._count(axis)).cast(dtype)

    def var(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, ddof: int = 0) -> Tensor:
        """Variance over ``axis``: ``sum((x - mean)^2) / (count - ddof)`` (numpy's ``ddof``)."""
        x = self.cast(_float_dtype(self.dtype))
        centered = x - x.mean(axis, keepdim=True)
        return (centered * centered).sum(axis, keepdim) / max(0, self._count(axis) - ddof)

    def std(self, axis: int | Sequence[int] | None = None, keepdim: bool = False, ddof: int = 0) -> Tensor:
        """Standard deviation: ``sqrt(var)``."""
        return self.var(axis, keepdim, ddof).sqrt()

    def argmax(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
        """Index of the first maximum along ``axis`` (None: of the flattened tensor), as int32:
        ``n - max(is_max * (n - arange(n)))``."""
        if axis is None:
            return self.flatten().argmax(0)
        axis = _normalize_axis(axis, self.ndim)
        length = self.shape[axis]
        is_max = (self == self.max(axis, keepdim=True)).cast(dtypes.int32)
        countdown = Tensor.arange(length, 0, -1, device=self.device)
        countdown = countdown.reshape((length,) + (1,) * (self.ndim - axis - 1))
        return length - (is_max * countdown).max(axis, keepdim)

    def argmin(self, axis: int | None = None, keepdim: bool = False) -> Tensor:
        """Index of the first minimum along ``axis``: argmax of the order-reversed values."""
        if self.dtype.is_float:
            return (-self).argmax(axis, keepdim)
        if self.dtype.is_bool:
            return self.logical_not().argmax(axis, keepdim)
        return (~self).argmax(axis, keepdim)

    # -- compositions --------------------------------------------------------------------------------
    def softmax(self, axis: int = -1) -> Tensor:
        """``exp(x - max) / sum(exp(x - max))`` along ``axis``."""
        x = self.cast(_float_dtype(self.dtype))
        exps = (x - x.max(axis, keepdim=True)).exp()
        return exps / exps.sum(axis, keepdim=True)

    def log_softmax(self, axis: int = -1) -> Tensor:
        """``x - max - log(sum(exp(x - max)))`` along ``axis``."""
        x = self.cast(_float_dtype(self.dtype))
        shifted = x - x.max(axis, keepdim=True)
        return shifted - shifted.exp().sum(axis, keepdim=True).log()

    def layernorm(self, axis: int | Sequence[int] = -1, eps: float = 1e-5) -> Tensor:
        """``(x - mean) / sqrt(var + eps)`` over ``axis`` (no scale or shift)."""
        x = self.cast(_float_dtype(self.dtype))
        centered = x - x.mean(axis, keepdim=True)
        return centered * (centered * centered).mean(axis, keepdim=True).add(eps).rsqrt()

    def matmul(self, other: Any) -> Tensor:
        """Matrix product by the spec's gemm: ``(A.reshape(M,K,1) * B.reshape(1,K,N)).sum(1)``.

        Batch axes broadcast (numpy's matmul); a 1-D left operand is a row ``(1, K)`` and a 1-D
        right operand a column ``(K, 1)``, the added axis removed from the result.  The sum
        accumulates in the operands' dtype (as numpy); bool matrices combine with OR (max).
        """
        other = other if isinstance(other, Tensor) else Tensor(other, device=self.device)
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
        products = a.reshape(*a.shape[:-2], m, k, 1) * b.reshape(*b.shape[:-2], 1, k, n)
        reduce_axis = products.ndim - 2
        out = products.max(reduce_axis) if dtype.is_bool else products.sum(reduce_axis, dtype=dtype)
        if self.ndim == 1:
            out = out.squeeze(-2)
        if other.ndim == 1:
            out = out.squeeze(-1)
        return out

    def dot(self, other: Any) -> Tensor:
        """``numpy.dot``: the product of scalars, matmul for 1-D and 2-D operands, and for N-D the sum
        over the last axis of ``self`` and the second-to-last of ``other`` (no broadcasting)."""
        other = other if isinstance(other, Tensor) else Tensor(other, device=self.device)
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
        a = self.cast(dtype).reshape(*self.shape[:-1], *(1,) * len(before), k, 1)
        b = other.cast(dtype).reshape(*(1,) * (self.ndim - 1), *before, k, rest)
        products = a * b
        return products.sum(products.ndim - 2, dtype=dtype)

    def _prefix_sum(self) -> Tensor:
        """The spec's prefix_sum along the last axis (leading axes are batch axes)."""
        n = self.shape[-1]
        batch = self.shape[:-1]
        none = [(0, 0)] * len(batch)
        x = self.pad([*none, (n - 1, 0)])  # (..., 2n-1)
        x = x.reshape(*batch, 1, 2 * n - 1).expand(*batch, n + 1, 2 * n - 1)  # tile
        x = x.reshape(*batch, (n + 1) * (2 * n - 1)).shrink_to(*batch, 2 * n * n)  # trim
        x = x.reshape(*batch, n, 2 * n).shrink_to(*batch, n, n)  # windows
        return x.sum(-1, dtype=x.dtype)  # reduce

    def cumsum(self, axis: int | None = None) -> Tensor:
        """Cumulative sum along ``axis`` (None: of the flattened tensor) by the spec's prefix_sum:
        pad, tile, trim, windows, reduce (the axis moves last and back)."""
        if axis is None:
            return self.flatten().cumsum(0)
        axis = _normalize_axis(axis, self.ndim)
        x = self.cast(_accumulate_dtype(self.dtype))
        if self.shape[axis] == 0:
            return x
        order = [i for i in range(self.ndim) if i != axis] + [axis]
        summed = x.permute(order)._prefix_sum()
        return summed.permute([order.index(i) for i in range(self.ndim)])

    def gather(self, idx: Any, axis: int = 0) -> Tensor:
        """``out[i] = t[idx[i]]`` along ``axis`` as ``numpy.take`` (result shape
        ``shape[:axis] + idx.shape + shape[axis+1:]``; a negative index counts from the end) by
        the spec's one-hot composition: ``mask = arange(K).reshape(K, 1) == idx.reshape(1, -1)``,
        ``mask.where(t.reshape(K, 1), 0).sum(0)`` (a select rather than the spec's product with
        the mask, so an inf or nan elsewhere in ``t`` does not turn the sum into nan).

        Indices outside ``[-K, K)`` raise IndexError when they are data (known when the graph is
        built); computed indices cannot be checked before running, and one out of range there
        gives 0, where numpy would raise."""
        idx = idx if isinstance(idx, Tensor) else Tensor(idx, device=self.device)
        if not idx.dtype.is_int:
            raise TypeError(f"gather indices must be integers, got {idx.dtype.name}")
        axis = _normalize_axis(axis, self.ndim)
        x = self.permute([axis] + [i for i in range(self.ndim) if i != axis])  # gather axis first
        k, rest = x.shape[0], x.shape[1:]
        flat = _wrapped_indices(idx, k, f"gather along axis {axis} of {self.shape}").reshape(-1)
        count = flat.shape[0]
        pos = Tensor.arange(k, device=self.device).reshape(k, 1)  # (K, 1)
        mask = (pos == flat.reshape(1, -1)).reshape(k, count, *(1,) * len(rest))  # (K, D, 1...)
        gathered = mask.where(x.reshape(k, 1, *rest), 0).sum(0, dtype=self.dtype)  # (D, *rest)
        gathered = gathered.reshape(*idx.shape, *rest)
        # the gathered axes sit first: move them to where the gather axis was
        lead = idx.ndim
        order = [*range(lead, lead + axis), *range(lead), *range(lead + axis, lead + len(rest))]
        return gathered.permute(order)

    def scatter_add(self, idx: Any, val: Any) -> Tensor:
        """``t[idx[i]] += val[i]`` along axis 0 as ``numpy.add.at`` (repeated indices add up; a
        negative index counts from the end), by the spec's composition:
        ``mask = arange(K).reshape(K, 1) == idx.reshape(1, D)``,
        ``t + mask.where(val.reshape(1, D), 0).sum(1)`` (a select, not the spec's product with the
        mask, so an inf or nan value lands only in its own row).  ``val`` has shape
        ``idx.shape + t.shape[1:]``.

        Indices outside ``[-K, K)`` raise IndexError when they are data; computed indices cannot
        be checked before running, and a value at an index out of range there is dropped."""
        idx = idx if isinstance(idx, Tensor) else Tensor(idx, device=self.device)
        val = val if isinstance(val, Tensor) else Tensor(val, dtype=self.dtype, device=self.device)
        if not idx.dtype.is_int:
            raise TypeError(f"scatter_add indices must be integers, got {idx.dtype.name}")
        k, rest = self.shape[0], self.shape[1:]
        count = idx.numel()
        if val.shape != idx.shape + rest:
            raise UOpError(f"scatter_add into {self.shape} with indices {idx.shape} needs values of shape "
                             f"{idx.shape + rest}, got {val.shape}")
        idx = _wrapped_indices(idx, k, f"scatter_add into axis 0 of {self.shape}")
        pos = Tensor.arange(k, device=self.device).reshape(k, 1)  # (K, 1)
        mask = (pos == idx.reshape(1, count)).reshape(k, count, *(1,) * len(rest))  # (K, D, 1...)
        values = val.cast(self.dtype).reshape(1, count, *rest)
        return self + mask.where(values, 0).sum(1, dtype=self.dtype)

    def _pool(self, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int]) -> Tensor:
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

    def conv2d(self, weight: Tensor, bias: Tensor | None = None, stride: int | Sequence[int] = 1,
               padding: Any = 0, dilation: int | Sequence[int] = 1, groups: int = 1) -> Tensor:
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
        weight = weight if isinstance(weight, Tensor) else Tensor(weight, device=self.device)
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
        stride = _pair(stride, count, "stride")
        dilation = _pair(dilation, count, "dilation")
        x = self.pad([(0, 0), (0, 0), *self._spatial_padding(padding, count)])
        windows = x._pool(kernel, stride, dilation)  # (N, C, *out, *kernel)
        outs = windows.shape[2:2 + count]
        windows = windows.reshape(batch, groups, 1, group_channels, *outs, *kernel)
        per_group = out_channels // groups
        w = weight.reshape(1, groups, per_group, group_channels, *(1,) * count, *kernel)
        products = windows * w
        summed_axes = (3, *range(4 + count, 4 + 2 * count))
        out = products.sum(summed_axes, dtype=products.dtype).reshape(batch, out_channels, *outs)
        if bias is not None:
            bias = bias if isinstance(bias, Tensor) else Tensor(bias, device=self.device)
            out = out + bias.reshape(1, out_channels, *(1,) * count)
        return out

    def avg_pool2d(self, kernel_size: int | Sequence[int] = 2, stride: int | Sequence[int] | None = None,
                   padding: Any = 0, dilation: int | Sequence[int] = 1) -> Tensor:
        """Average over windows of the last two axes (zero padding counts in the average, as torch's
        default); a window larger than its padded axis raises, as in :meth:`conv2d`."""
        return self._pool_reduce("mean", kernel_size, stride, padding, dilation)

    def max_pool2d(self, kernel_size: int | Sequence[int] = 2, stride: int | Sequence[int] | None = None,
                   padding: Any = 0, dilation: int | Sequence[int] = 1) -> Tensor:
        """Maximum over windows of the last two axes (padding never wins: it is the dtype's minimum); a
        window larger than its padded axis raises, as in :meth:`conv2d`."""
        return self._pool_reduce("max", kernel_size, stride, padding, dilation)

    def _pool_reduce(self, how: str, kernel_size: Any, stride: Any, padding: Any, dilation: Any) -> Tensor:
        kernel = _pair(kernel_size, 2, "kernel_size")
        stride = kernel if stride is None else _pair(stride, 2, "stride")
        dilation = _pair(dilation, 2, "dilation")
        fill = self.dtype.min if how == "max" else 0
        pads = [(0, 0)] * (self.ndim - 2) + self._spatial_padding(padding, 2)
        windows = self.pad(pads, value=fill)._pool(kernel, stride, dilation)
        axes = (-2, -1)
        return windows.max(axes) if how == "max" else windows.mean(axes)

    # -- markers and devices -------------------------------------------------------------------------
    def contiguous(self) -> Tensor:
        """Force a contiguous, materialised value (CONTIGUOUS marker: a kernel boundary)."""
        return Tensor._wrap(UOp(Ops.CONTIGUOUS, (self.uop,)), self)

    def contiguous_backward(self) -> Tensor:
        """Identity forward; the gradient flowing back through it is made contiguous
        (CONTIGUOUS_BACKWARD marker)."""
        return Tensor._wrap(UOp(Ops.CONTIGUOUS_BACKWARD, (self.uop,)), self)

    def detach(self) -> Tensor:
        """Identity that stops gradients (DETACH marker)."""
        out = Tensor._wrap(UOp(Ops.DETACH, (self.uop,)), self)
        out._requires_grad = None
        return out

    def copy(self, device: Device) -> Tensor:
        """Move to ``device`` (COPY; a device-changing load).  To an ``n``-tuple device this shards
        axis 0 (``.uop.axis == 0``); to one device it gathers."""
        return Tensor._wrap(self.uop.copy_to(device), self, device=device)

    to = copy

    def replicated(self, axes: int | Sequence[int]) -> Tensor:
        """Mark as replicated along ``axes`` (REPLICATED; those axes collapse to 1)."""
        axes = (axes,) if isinstance(axes, int) else tuple(axes)
        return Tensor._wrap(self.uop.replicated(tuple(_normalize_axis(a, self.ndim) for a in axes)), self)

    def shard(self, devices: Sequence[str], axis: int = 0) -> Tensor:
        """Split along ``axis`` over the ``n`` devices; ``.uop.axis`` is ``axis``.

        A tensor made from data becomes one BUFFER on the ``n``-tuple device (shape ``(n*size,)``,
        axis 0, device ``k`` holding the ``k``-th slice), then ``RESHAPE`` to ``(n, *slice)``,
        ``PERMUTE`` the device axis next to ``axis`` and ``RESHAPE`` to the logical shape.  Any other
        tensor is moved there by COPY: ``permute(axis first).copy(devices).permute(back)``.
        """
        devices = tuple(devices)
        if len(devices) < 2 or not all(isinstance(d, str) for d in devices):
            raise ValueError(f"shard needs a tuple of at least two device names, got {devices!r}")
        axis = _normalize_axis(axis, self.ndim)
        if self.shape[axis] % len(devices):
            raise UOpError(f"shard axis {axis} of {self.shape} does not split evenly over "
                             f"{len(devices)} devices")
        data = self._initial_array()
        if data is not None:
            return Tensor._wrap(_sharded_buffer(data, self.dtype, devices, axis, stored=True), self,
                                device=devices)
        order = [axis] + [i for i in range(self.ndim) if i != axis]
        moved = self.permute(order).copy(devices)
        return moved.permute([order.index(i) for i in range(self.ndim)])

    def _initial_array(self) -> np.ndarray | None:
        """The data of a tensor that is a (reshaped) data BUFFER, in storage form; else None."""
        uop = self.uop
        if uop.op is Ops.RESHAPE:
            uop = uop.src[0]
        if uop.op is not Ops.BUFFER or isinstance(uop.arg.device, tuple):
            return None
        data = initial_data(uop)
        return None if data is None else data.reshape(self.shape)

    # -- gradients ---------------------------------------------------------------------------------
    def backward(self, gradient: Tensor | None = None) -> Tensor:
        """Reverse-mode differentiation: accumulate into ``.grad`` of every tensor marked
        ``requires_grad`` that this one depends on.  A non-scalar output needs ``gradient``."""
        from uopviz.core.uop import toposort

        compute_gradients = entry_point("gradient")  # gradient rules are written on Tensors: above us
        if gradient is None and self.numel() != 1:
            raise ValueError(f"backward of a non-scalar tensor {self.shape} needs an explicit gradient")
        graph = set(toposort([self.uop]))
        leaves = [t for ref in list(_gradient_leaves.values()) if (t := ref()) is not None]
        targets = [t for t in leaves if t.requires_grad and t.uop in graph]
        if not targets:
            graph = set(toposort([resolve_functions(self.uop)]))
            targets = [t for t in leaves if t.requires_grad and t.uop in graph]
        if not targets:
            raise ValueError("backward: no tensor with requires_grad=True feeds this one")
        grads = compute_gradients(self, targets, gradient)
        for target, grad in zip(targets, grads):
            target.grad = grad if target.grad is None else target.grad + grad
        return self


# ---------------------------------------------------------------------------------------------
# module-level conveniences


def cat(*tensors: Tensor, axis: int = 0) -> Tensor:
    """Concatenate along ``axis`` (see :meth:`Tensor.cat`)."""
    flat = list(tensors[0]) if len(tensors) == 1 and isinstance(tensors[0], list | tuple) else list(tensors)
    return Tensor.cat(flat, axis=axis)


def stack(*tensors: Tensor, axis: int = 0) -> Tensor:
    """Stack along a new ``axis`` (see :meth:`Tensor.stack`)."""
    flat = list(tensors[0]) if len(tensors) == 1 and isinstance(tensors[0], list | tuple) else list(tensors)
    return Tensor.stack(flat, axis=axis)


Tensor.collectives = collectives  # type: ignore[attr-defined]

__all__ = ["DEFAULT_DEVICE", "BufferData", "Tensor", "UOpError", "allgather", "allreduce", "broadcast",
           "broadcast_shape", "buffer_data", "cat", "collectives", "gather", "initial_data", "reduce",
           "reduce_scatter", "scatter", "stack"]
