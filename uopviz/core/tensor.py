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
  floats keep their dtype.  ``float16``/``bfloat16`` sums, products, cumsums, means and
  matmuls keep the half type but accumulate in ``float32`` and round once at the end (as
  numpy, torch and tinygrad), whatever the opts.  ``mean``/``var``/``std`` of integers give
  ``float32``.
* **Compositions from the spec** are written exactly as the spec writes them: ``matmul``
  (gemm: reshape + mul + sum), ``cumsum`` (prefix_sum), ``arange``, ``gather`` and
  ``scatter_add`` (one-hot masks from ``arange``), and the seven multi-device collectives.

Dtype rules that differ from numpy (on purpose, like tinygrad and torch): true division and
transcendental functions of integers give ``float32`` (numpy: ``float64``); ``argmax`` gives
``int32``; integer sums keep ``int32`` rather than widening to ``int64``.

This module holds the core of the :class:`Tensor` class (data, shape, dtype, device and UOp;
construction; operand promotion and broadcasting, casts, ``where`` and the operators; markers,
devices and ``backward``) and ``cat``/``stack``.  The class composes its method groups from mixins,
one module each: movement and indexing (:mod:`uopviz.core.tensor_movement`), the named elementwise
functions (:mod:`uopviz.core.tensor_elementwise`), reductions, contractions and scans
(:mod:`uopviz.core.tensor_reduce`) and the neural-network layers (:mod:`uopviz.core.tensor_nn`).
The mixins build Tensors through ``_wrap`` and ``_tensor_of`` and never import this module.  The
helpers they share live in :mod:`uopviz.core.tensor_helpers` (shapes, axes, dtypes, data buffers),
the accurate ``exp``, ``sigmoid`` and ``tanh`` in :mod:`uopviz.core.tensor_math`, and the
collectives in :mod:`uopviz.core.collectives` (re-exported here, and as ``Tensor.collectives``).
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
from uopviz.core.origins import record_method_origins
from uopviz.core.tensor_elementwise import ElementwiseMixin
from uopviz.core.tensor_helpers import (
    DEFAULT_DEVICE,
    Scalar,
    Shape,
    broadcast_operands,
    broadcast_shape,
    check_devices,
    check_scalar_fits,
    data_buffer,
    default_dtype_of,
    float_dtype,
    is_scalar,
    normalize_axis,
    shape_args,
    sharded_buffer,
    to_dtype,
    weak_scalar_dtype,
)
from uopviz.core.tensor_movement import MovementMixin
from uopviz.core.tensor_nn import NeuralNetworkMixin
from uopviz.core.tensor_reduce import ReduceMixin
from uopviz.core.uop import Device, UOp, UOpError, UOpTypeError

_seed_state = {"seed": 0, "calls": itertools.count()}

# ---------------------------------------------------------------------------------------------
# the Tensor

# id(tensor) -> weak reference, for every tensor a user marked requires_grad (backward finds them)
_gradient_leaves: dict[int, weakref.ref] = {}


class Tensor(MovementMixin, ElementwiseMixin, ReduceMixin, NeuralNetworkMixin):
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
        dtype = None if dtype is None else to_dtype(dtype)
        self.grad = None
        self._requires_grad: bool | None = None
        if isinstance(data, Tensor):
            uop = data.uop if dtype is None else data.uop.cast(dtype)
            self._device = device if device is not None else data.device
        elif isinstance(data, UOp):
            uop = data if dtype is None else data.cast(dtype)
            self._device = device if device is not None else (data.device or DEFAULT_DEVICE)
        elif is_scalar(data) or isinstance(data, np.generic):
            if isinstance(data, np.generic):
                dtype = dtype or dtypes.from_numpy(data.dtype)
                data = data.item()
            dtype = dtype or dtypes.from_python(data)
            check_scalar_fits(data, dtype)
            uop = UOp.const(dtype, data)
            self._device = device if device is not None else DEFAULT_DEVICE
        elif isinstance(data, list | tuple | np.ndarray):
            array = np.asarray(data)
            if dtype is None:
                dtype = default_dtype_of(array, from_list=not isinstance(data, np.ndarray))
            if array.dtype.name == "bfloat16":  # ml_dtypes' bfloat16: float32 holds its values exactly
                array = array.astype(np.float32)
            if isinstance(device, tuple):
                uop = sharded_buffer(array, dtype, device, 0)
            else:
                uop = data_buffer(array, dtype, device or DEFAULT_DEVICE)
            self._device = device if device is not None else DEFAULT_DEVICE
        else:
            raise UOpTypeError(f"cannot make a Tensor from {type(data).__name__}; give a list, a numpy "
                               f"array, a Python scalar or a UOp")
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

    def _tensor_of(self, value: Any, dtype: DType | str | None = None) -> Tensor:
        """``value`` itself when it is a Tensor, else a Tensor of it (``dtype``) on this tensor's device."""
        return value if isinstance(value, Tensor) else Tensor(value, dtype=dtype, device=self.device)

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
            raise UOpTypeError("len() of a 0-d tensor")
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
        raise UOpTypeError("a Tensor has no truth value (it is lazy; `a == b` builds a comparison); "
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
        raise UOpTypeError("Tensors are immutable: build a new one (pad/where/scatter_add) instead of "
                           "assigning")

    # -- running -----------------------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """Compile and run the graph on the default backend; the value as a numpy array."""
        return entry_point("compile")([self]).run()[0]  # the engine lives above the front end

    def item(self) -> Scalar:
        """The value of a one-element tensor as a Python scalar."""
        if self.numel() != 1:
            raise UOpError(f"item() needs exactly one element, the tensor has shape {self.shape}")
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
        return Tensor.full(shape_args(shape), 0.0 if dtype is None else 0, dtype=dtype, device=device,
                           requires_grad=requires_grad)

    @staticmethod
    def ones(*shape: int, dtype: DType | str | None = None, device: Device = None,
             requires_grad: bool | None = None) -> Tensor:
        """A tensor of ones (``float32`` unless ``dtype``)."""
        return Tensor.full(shape_args(shape), 1.0 if dtype is None else 1, dtype=dtype, device=device,
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
        shape = shape_args(shape)
        dtype = to_dtype(dtype) if dtype is not None else dtypes.default_float
        device = device or DEFAULT_DEVICE
        if isinstance(device, tuple):
            raise UOpError("empty() on a multi-device tuple: make it on one device and shard it")
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
        return out.cast(to_dtype(dtype)) if dtype is not None else out

    @staticmethod
    def eye(n: int, m: int | None = None, dtype: DType | str | None = None, device: Device = None) -> Tensor:
        """The identity matrix ``(n, m)``: ``arange(n)[:, None] == arange(m)[None, :]``."""
        m = n if m is None else m
        rows = Tensor.arange(n, device=device).reshape(n, 1)
        cols = Tensor.arange(m, device=device).reshape(1, m)
        return (rows == cols).cast(to_dtype(dtype) if dtype is not None else dtypes.default_float)

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
        shape = shape_args(shape)
        dtype = to_dtype(dtype) if dtype is not None else dtypes.default_float
        if not dtype.is_float:
            raise UOpTypeError(f"rand makes floats, not {dtype.name}")
        if seed is None:
            key = ((_seed_state["seed"] & 0xFFFFFFFF) << 32) | (next(_seed_state["calls"]) & 0xFFFFFFFF)
        else:
            key = int(seed) & 0xFFFFFFFFFFFFFFFF
        count = math.prod(shape)
        counters = Tensor.arange(count, device=device).cast(dtypes.uint64)
        keys = Tensor(key, dtype=dtypes.uint64, device=device)
        counters, keys = broadcast_operands(counters, keys)
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
        shape = shape_args(shape)
        dtype = to_dtype(dtype) if dtype is not None else dtypes.default_float
        uniform = Tensor.rand(2, *shape, seed=seed, dtype=dtypes.float32, device=device)
        radius = ((1.0 - uniform[0]).log() * -2.0).sqrt()  # 1 - u is in (0, 1]: log never sees 0
        return (radius * (uniform[1] * (2 * math.pi)).cos()).cast(dtype)

    # -- joining: one tensor from several (self may be a list: Tensor.cat([a, b])) ----------------
    def cat(self: Tensor | Sequence[Tensor], *others: Tensor, axis: int = 0) -> Tensor:
        """Concatenate along ``axis`` (``a.cat(b, c)`` or ``Tensor.cat([a, b, c])``): each tensor is
        PADded to the full length at its offset, then the padded tensors are added (OR for bool)."""
        tensors = [*self, *others] if isinstance(self, list | tuple) else [self, *others]
        if not tensors:
            raise UOpError("cat needs at least one tensor")
        tensors = [t if isinstance(t, Tensor) else Tensor(t) for t in tensors]
        first = tensors[0]
        axis = normalize_axis(axis, first.ndim)
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
            raise UOpError("stack needs at least one tensor")
        tensors = [t if isinstance(t, Tensor) else Tensor(t) for t in tensors]
        shapes = {t.shape for t in tensors}
        if len(shapes) > 1:
            raise UOpError(f"stack needs equal shapes, got {[t.shape for t in tensors]}")
        axis = normalize_axis(axis, tensors[0].ndim + 1)
        return Tensor.cat([t.unsqueeze(axis) for t in tensors], axis=axis)

    # -- axis arguments (movement ops and reductions) ------------------------------------------------
    def _axes(self, axis: int | Sequence[int] | None) -> tuple[int, ...]:
        if axis is None:
            return tuple(range(self.ndim))
        axes = (axis,) if isinstance(axis, int | np.integer) else tuple(axis)
        normalized = tuple(sorted(normalize_axis(a, self.ndim) for a in axes))
        if len(set(normalized)) != len(normalized):
            raise UOpError(f"repeated axis in {axis}")
        return normalized

    # -- elementwise: building blocks ------------------------------------------------------------
    def _scalar_tensor(self, value: Scalar, dtype: DType) -> Tensor:
        check_scalar_fits(value, dtype)
        return Tensor._wrap(UOp.const(dtype, value), device=self._device)

    def _operands(self, other: Any, reverse: bool = False, op: Ops | None = None) -> tuple[Tensor, Tensor]:
        """``(self, other)`` (or swapped) with one dtype and one shape: promotion by CAST,
        broadcasting by RESHAPE + EXPAND (``op``, what they are for, is named if they cannot)."""
        if isinstance(other, Tensor):
            dtype = dtypes.promote(self.dtype, other.dtype)
            x, y = self.cast(dtype), other.cast(dtype)
        elif is_scalar(other):
            dtype = weak_scalar_dtype(self.dtype, other)
            x, y = self.cast(dtype), self._scalar_tensor(other, dtype)
        elif isinstance(other, UOp | list | tuple | np.ndarray | np.generic):
            return self._operands(Tensor(other, device=self.device), reverse, op)
        else:
            raise UOpTypeError(f"cannot combine a Tensor with {type(other).__name__}")
        check_devices(x, y)
        x, y = broadcast_operands(x, y, op=op)
        return (y, x) if reverse else (x, y)

    def _elementwise(self, op: Ops, *others: Tensor) -> Tensor:
        return Tensor._wrap(UOp(op, (self.uop, *(o.uop for o in others))), self, *others)

    def _binary(self, op: Ops, other: Any, reverse: bool = False) -> Tensor:
        x, y = self._operands(other, reverse, op)
        return x._elementwise(op, y)

    def _binary_float(self, op: Ops, other: Any, reverse: bool = False) -> Tensor:
        x, y = self._operands(other, reverse, op)
        dtype = float_dtype(x.dtype)
        return x.cast(dtype)._elementwise(op, y.cast(dtype))

    def _binary_integer(self, op: Ops, other: Any, reverse: bool = False, allow_bool: bool = False) -> Tensor:
        x, y = self._operands(other, reverse, op)
        if not (x.dtype.is_int or (allow_bool and x.dtype.is_bool)):
            raise UOpTypeError(f"{op.name} needs integer{' or bool' if allow_bool else ''} operands, got "
                            f"{x.dtype.name}")
        return x._elementwise(op, y)

    def _unary_float(self, op: Ops) -> Tensor:
        return self.cast(float_dtype(self.dtype))._elementwise(op)

    def cast(self, dtype: DType | str) -> Tensor:
        """Convert to ``dtype`` (CAST; nothing when already of that type)."""
        dtype = to_dtype(dtype)
        if dtype == self.dtype:
            return self
        return Tensor._wrap(self.uop.cast(dtype), self)

    def bitcast(self, dtype: DType | str) -> Tensor:
        """Reinterpret the bits as ``dtype`` of the same size (BITCAST)."""
        dtype = to_dtype(dtype)
        if dtype.itemsize != self.dtype.itemsize:
            raise UOpError(f"bitcast {self.dtype.name} ({self.dtype.itemsize} bytes) to {dtype.name} "
                             f"({dtype.itemsize} bytes): sizes differ")
        return Tensor._wrap(self.uop.bitcast(dtype), self)

    # -- elementwise: comparisons and logic -------------------------------------------------------
    def where(self, if_true: Any, if_false: Any) -> Tensor:
        """``if_true`` where this (the condition) is nonzero, else ``if_false`` (WHERE)."""
        condition = self if self.dtype.is_bool else self != 0
        if isinstance(if_true, Tensor):
            x, y = if_true._operands(if_false, op=Ops.WHERE)
        elif isinstance(if_false, Tensor):
            y, x = if_false._operands(if_true, op=Ops.WHERE)
        else:
            if not (is_scalar(if_true) and is_scalar(if_false)):
                x = Tensor(if_true, device=self.device)
                x, y = x._operands(if_false, op=Ops.WHERE)
            else:
                dtype = dtypes.from_python(if_true)
                dtype = weak_scalar_dtype(dtype, if_false)
                x, y = self._scalar_tensor(if_true, dtype), self._scalar_tensor(if_false, dtype)
        check_devices(condition, x)
        condition, x, y = broadcast_operands(condition, x, y, op=Ops.WHERE)
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
            raise UOpTypeError(f"~ needs an integer or bool tensor, got {self.dtype.name}")
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
        return Tensor._wrap(self.uop.replicated(tuple(normalize_axis(a, self.ndim) for a in axes)), self)

    def shard(self, devices: Sequence[str], axis: int = 0) -> Tensor:
        """Split along ``axis`` over the ``n`` devices; ``.uop.axis`` is ``axis``.

        A tensor made from data becomes one BUFFER on the ``n``-tuple device (shape ``(n*size,)``,
        axis 0, device ``k`` holding the ``k``-th slice), then ``RESHAPE`` to ``(n, *slice)``,
        ``PERMUTE`` the device axis next to ``axis`` and ``RESHAPE`` to the logical shape.  Any other
        tensor is moved there by COPY: ``permute(axis first).copy(devices).permute(back)``.
        """
        devices = tuple(devices)
        if len(devices) < 2 or not all(isinstance(d, str) for d in devices):
            raise UOpError(f"shard needs a tuple of at least two device names, got {devices!r}")
        axis = normalize_axis(axis, self.ndim)
        if self.shape[axis] % len(devices):
            raise UOpError(f"shard axis {axis} of {self.shape} does not split evenly over "
                             f"{len(devices)} devices")
        data = self._initial_array()
        if data is not None:
            return Tensor._wrap(sharded_buffer(data, self.dtype, devices, axis, stored=True), self,
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
            raise UOpError(f"backward of a non-scalar tensor {self.shape} needs an explicit gradient")
        graph = set(toposort([self.uop]))
        leaves = [t for ref in list(_gradient_leaves.values()) if (t := ref()) is not None]
        targets = [t for t in leaves if t.requires_grad and t.uop in graph]
        if not targets:
            graph = set(toposort([resolve_functions(self.uop)]))
            targets = [t for t in leaves if t.requires_grad and t.uop in graph]
        if not targets:
            raise UOpError("backward: no tensor with requires_grad=True feeds this one")
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
record_method_origins(Tensor)  # provenance: which call of the user's built each node

__all__ = ["DEFAULT_DEVICE", "BufferData", "Tensor", "UOpError", "allgather", "allreduce", "broadcast",
           "broadcast_shape", "buffer_data", "cat", "collectives", "gather", "initial_data", "reduce",
           "reduce_scatter", "scatter", "stack"]
