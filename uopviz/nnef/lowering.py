"""Lowering of composed NNEF operations to UOp kernels, and the glue to the compile pipeline.

Every ``@lower`` contraction (§2.12) of a leaf operation becomes a kernel AST in the form of
``docs/design/kernel-ir.md`` (``SINK(STORE(INDEX(PARAM_out, idx), value[, gate]), ...)``):

- each index symbol ``i < n`` is a RANGE (a pack bound gives a pack of RANGEs); symbols that
  select an item of a tensor pack (``xs[k]``), that other bounds depend on, or that an
  ``unroll..(k -> n)`` names are unrolled at compile time;
- the left side is solved for the output space: a plain index becomes an output (LOOP) range; an
  affine mixed-radix sum (``(i * strides) + ..`` of flatten) becomes one range split back by
  ``//`` and ``%``; any other affine index (``stride * i + j - offset`` of deconv or
  linear_upsample) is inverted — the output position is the loop and the eliminated index is
  recovered with a divisibility and bounds gate; a data-dependent index (scatter) is matched
  against the output position; symbols left out of the left side are REDUCE ranges;
- loads sit at the flat row-major offsets of the access; ``|i|`` guards gate the load *and* drop
  the whole term (the identity of the accumulation takes its place), ``|i <> a : b|`` remaps an
  out-of-range index (the reflect/replicate forms of pad and grid_sample);
- the initialising ``=`` and the accumulating ``+= *= &= |= <?= >?=`` form one REDUCE with the
  initial value folded in when the initialiser maps onto the same points, else an initialising
  kernel and an accumulating one that reads it back;
- ``:=`` updates: argmin/argmax-like conditions that compare the candidate with the current value
  become max-then-first-index reductions; unrolled ones become a chain of selects; others keep
  the last write (a MAX reduction over the iteration order);
- ``with`` locals are shared subexpressions (hash-consing does the sharing), packs and packed
  assignments ``x[:,]`` are unrolled into one store per item;
- a data-dependent output extent (``idx[:,k] = i, i < s | cond``, §2.12) is counted: a positions
  kernel (exclusive prefix count of the condition), a count kernel and a scattering kernel.

Run-time (data-dependent) extents. Tensors are stored at their upper bounds, row-major over the
upper-bound shape, and every kernel is compiled once. What changes at run time is how far each
kernel goes: the spec asks for shape inference interleaved with execution (§3 "Dynamic tensor
shapes"), and the extent expressions are the scalar expressions the composer keeps symbolically
(:class:`~uopviz.nnef.expressions.DynamicExtent` keys). In a kernel such an extent is a UOp: the
counters of the extents its key is built of (``graph.counts``: int32 buffers written by the
counting kernels) loaded and combined by the key's arithmetic (:func:`runtime_extent`). A range
whose bound is a data-dependent extent runs to the upper bound, gated by ``range < extent``: the
gate joins the term's gates, so an accumulation skips the term (its identity takes its place), a
plain ``=`` does not store, an arg-extreme ignores the point, and the term's loads are gated too
(an index computed from the actual extent, such as a reflected one, may point outside there).
Guards ``|i|`` and remaps ``|i <> a : b|`` test the actual extent, and extents inside values (``s -
1 - i``) read it. Elements past the actual extent are never read, so their contents do not matter.
The alternative, recompiling everything after a counted operation for the count it found, would
give static kernels but one compilation per distinct count; the gated kernels give exact results
for any count with one compilation, and stay the same kernels for the tuner. The runner trims
graph outputs to their actual extents, evaluated from the same counters on the host. Built-in
kernels (intrinsics) run over upper bounds: a data-dependent extent may only pass through them to
an output; one they would read across is refused, except by the kernels that read the extents
themselves (cubic resize and grid sampling). Input extents (``real[~|10]``) are different: ``run``
recomposes the graph for the given shapes, so they are static by the time kernels run.

Values computed from such extents (:class:`~uopviz.nnef.expressions.RuntimeScalar`: mean_reduce's
``real(s[axes] * ..)``, a resize's scale) become UOps over the same counters wherever a kernel
uses them (:func:`runtime_value`); passed as a tensor they are ``runtime.scalar`` operations, one
kernel storing the value. An int one used as an extent (rescale's ``int(round(real(s) * f))``) is
a run-time extent whose key is its expression, its bound from the extents' bounds.

Intrinsics (no body) get kernels written here: top_k (rank by comparison counting),
nonmax_suppress (greedy suppression decided in rounds of one kernel, then counted rows), the
random generators (Threefry-2x32), cubic_resize and cubic grid sampling (Keys' cubic convolution,
4 taps per axis), and the ROI pools (each output bin reduces over the input window the ROI maps to,
a window whose extent is data-dependent: the kernel reduces over the whole input extent gated by
the bin's bounds).

Loops decided at run time (:class:`~uopviz.nnef.graph.LoopOperation`) have no kernels of their own:
their body and condition are graphs compiled separately, and the runner executes the loop on the
host (test the condition, run the body, carry the values; scan outputs stacked in iteration order).
What they read with run-time extents, they read through counters of their own that the runner
fills on every iteration (``Graph.extent_inputs``); the extents of the carried values are read back
after each iteration (a body may compress what it carries), and the results' extents that only the
run knows are written to counters of the enclosing graph (``LoopOperation.extent_outputs``).

:func:`compile_graph` compiles the kernels with the pipeline's public
:func:`~uopviz.engine.program.compile_kernels` (graph inputs, variables and constants are the
program's inputs): one Program for a graph without loops, else one per run of kernels between loop
nodes, gathered in a :class:`GraphProgram`; :func:`run_graph` binds the data and runs them in order.
Opts chosen per kernel number the kernels as ``program.kernels`` lists them, loop bodies and
conditions included where their loop runs (:func:`kernel_count`); opts by kernel name reach every
kernel with that name.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections import ChainMap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from uopviz.core.dtype import AddrSpace, DType, dtypes
from uopviz.core.ops import AxisType, Ops
from uopviz.core.uop import ParamArg, UOp, shape_uop
from uopviz.nnef import ast
from uopviz.nnef.ast import identifiers
from uopviz.nnef.errors import NNEFError
from uopviz.nnef.expressions import (
    BoundedIndex,
    DynamicExtent,
    Evaluator,
    PythonScalarOps,
    RuntimeScalar,
    format_value,
    type_name_of,
)
from uopviz.nnef.graph import Graph, LoopOperation, Operation, TensorInfo
from uopviz.nnef.printer import print_expression

__all__ = [
    "GraphProgram",
    "LoweredKernel",
    "compile_graph",
    "kernel_count",
    "lower_operation",
    "operation_kernels",
    "run_graph",
    "runtime_extent",
    "runtime_value",
    "uop_dtype",
]

INDEX = dtypes.index
_UOP_TYPES = {"real": dtypes.float32, "int": dtypes.int32, "bool": dtypes.bool}
_LOG2E = 1.4426950408889634
_LN2 = 0.6931471805599453


def uop_dtype(type_name: str) -> DType:
    """The UOp dtype of a SkriptND element type."""
    try:
        return _UOP_TYPES[type_name]
    except KeyError:
        raise NNEFError(f"tensors of type '{type_name}' cannot be computed by kernels") from None


@dataclass(eq=False)
class LoweredKernel:
    """One kernel of an operation: its AST and the tensors bound to its PARAM slots.

    ``buffers[0]`` is the tensor the kernel writes (it may read it too); ``scratch`` declares
    buffers that exist only for the kernels (name -> (dtype, element count)); ``fused`` lists the
    operations whose kernels :mod:`uopviz.nnef.fusion` folded into this one (in run order).
    """

    name: str
    ast: UOp
    buffers: list[str]
    operation: Operation = field(repr=False)
    scratch: dict[str, tuple[DType, int]] = field(default_factory=dict)
    note: str = ""
    fused: tuple[Operation, ...] = ()


# ------------------------------------------------------------------------------------------------
# scalar UOp helpers


def _const(dtype: DType, value: Any) -> UOp:
    return UOp.const(dtype, value)


def _rank_of(dtype: DType) -> int:
    if dtype.is_bool:
        return 0
    if dtype is INDEX:
        return 2
    if dtype.is_float:
        return 3
    return 1


def _promote(a: UOp, b: UOp) -> tuple[UOp, UOp]:
    """Both operands in one dtype: bool < int32 < index < float32."""
    if a.dtype == b.dtype:
        return a, b
    target = a.dtype if _rank_of(a.dtype) >= _rank_of(b.dtype) else b.dtype
    return a.cast(target), b.cast(target)


def _lift(value: Any, like: UOp) -> tuple[UOp, UOp]:
    """A Python value as a CONST next to the UOp ``like`` (``like`` cast to float for a real)."""
    if isinstance(value, bool):
        if like.dtype.is_bool:
            return _const(dtypes.bool, value), like
        return _const(like.dtype, int(value)), like
    if isinstance(value, float) and not like.dtype.is_float:
        return _const(dtypes.float32, value), like.cast(dtypes.float32)
    if isinstance(value, int | float):
        if like.dtype.is_bool:
            return _const(dtypes.int32, int(value)), like.cast(dtypes.int32)
        return _const(like.dtype, value), like
    raise NNEFError(f"a {type_name_of(value)} value cannot take part in a kernel computation")


def _operands(a: Any, b: Any) -> tuple[UOp, UOp]:
    if isinstance(a, UOp) and isinstance(b, UOp):
        return _promote(a, b)
    if isinstance(a, UOp):
        constant, a = _lift(b, a)
        return a, constant
    constant, b = _lift(a, b)
    return constant, b


def as_uop(value: Any, dtype: DType | None = None) -> UOp:
    """A value (UOp or Python scalar) as a UOp, cast to ``dtype`` when given."""
    if isinstance(value, UOp):
        return value if dtype is None else value.cast(dtype)
    if dtype is None:
        dtype = {bool: dtypes.bool, int: dtypes.int32, float: dtypes.float32}[type(value)]
    return _const(dtype, value)


def _index(value: Any) -> UOp:
    return value.cast(INDEX) if isinstance(value, UOp) else _const(INDEX, int(value))


def _where(condition: Any, a: Any, b: Any) -> Any:
    if isinstance(condition, bool):
        return a if condition else b
    x, y = _operands(a, b) if (isinstance(a, UOp) or isinstance(b, UOp)) else (as_uop(a), as_uop(b))
    if not isinstance(a, UOp) and not isinstance(b, UOp):
        x, y = _promote(x, y)
    return UOp(Ops.WHERE, (condition, x, y))


def _and(conditions: Sequence[Any]) -> Any:
    """The conjunction of UOp / Python bools (True when empty, Python bools folded)."""
    out: Any = True
    for condition in conditions:
        if condition is True:
            continue
        if condition is False:
            return False
        out = condition if out is True else UOp(Ops.AND, (out, condition))
    return out


def _not(condition: Any) -> Any:
    return (not condition) if isinstance(condition, bool) else UOp(Ops.NOT, (condition,))


def _float(x: UOp) -> UOp:
    return x if x.dtype.is_float else x.cast(dtypes.float32)


def _exp(x: UOp) -> UOp:
    return UOp(Ops.EXP2, (x * _LOG2E,))


def _log(x: UOp) -> UOp:
    return UOp(Ops.LOG2, (x,)) * _LN2


def _trunc(x: UOp) -> UOp:
    return UOp(Ops.TRUNC, (x,))


def _floor(x: UOp) -> UOp:
    t = _trunc(x)
    return UOp(Ops.WHERE, (x < t, t - 1.0, t))


def _ceil(x: UOp) -> UOp:
    t = _trunc(x)
    return UOp(Ops.WHERE, (x > t, t + 1.0, t))


def _abs(x: UOp) -> UOp:
    return UOp(Ops.WHERE, (x < _const(x.dtype, 0), -x, x))


def _sign(x: UOp) -> UOp:
    zero, one = _const(x.dtype, 0), _const(x.dtype, 1)
    return UOp(Ops.WHERE, (x > zero, one, UOp(Ops.WHERE, (x < zero, -one, zero))))


def _atan(x: UOp) -> UOp:
    """atan by range reduction to |u| <= tan(pi/8) and its odd Taylor series (error < 1e-7)."""
    ax = _abs(x)
    invert = ax > 1.0
    t = UOp(Ops.WHERE, (invert, ax.recip(), ax))
    shifted = t > 0.41421356237309503
    u = UOp(Ops.WHERE, (shifted, (t - 1.0) / (t + 1.0), t))
    u2 = u * u
    series = _const(dtypes.float32, 1.0 / 19.0) * (-1.0)
    for k in range(8, -1, -1):  # 1 - u2/3 + u2^2/5 - ... (Horner)
        series = series * u2 + ((-1.0) ** k) / (2 * k + 1)
    p = u * series
    r = UOp(Ops.WHERE, (shifted, p + math.pi / 4, p))
    r = UOp(Ops.WHERE, (invert, (math.pi / 2) - r, r))
    return UOp(Ops.WHERE, (x < 0.0, -r, r))


def _erf(x: UOp) -> UOp:
    """erf by Abramowitz & Stegun 7.1.26 (absolute error < 1.5e-7)."""
    ax = _abs(x)
    t = (ax * 0.3275911 + 1.0).recip()
    poly = ((((t * 1.061405429 - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t
    y = 1.0 - poly * _exp(-(ax * ax))
    return UOp(Ops.WHERE, (x < 0.0, -y, y))


def _sinh(x: UOp) -> UOp:
    return (_exp(x) - _exp(-x)) * 0.5


def _cosh(x: UOp) -> UOp:
    return (_exp(x) + _exp(-x)) * 0.5


def _tanh(x: UOp) -> UOp:
    return 1.0 - 2.0 / (_exp(x * 2.0) + 1.0)


def _asin(x: UOp) -> UOp:
    return _atan(x / UOp(Ops.SQRT, (1.0 - x * x,)))


_FLOAT_BUILTINS: dict[str, Callable[[UOp], UOp]] = {
    "sqrt": lambda x: UOp(Ops.SQRT, (x,)),
    "exp": _exp,
    "log": _log,
    "sin": lambda x: UOp(Ops.SIN, (x,)),
    "cos": lambda x: UOp(Ops.COS, (x,)),
    "tan": lambda x: UOp(Ops.TAN, (x,)),
    "asin": _asin,
    "acos": lambda x: (math.pi / 2) - _asin(x),
    "atan": _atan,
    "sinh": _sinh,
    "cosh": _cosh,
    "tanh": _tanh,
    "asinh": lambda x: _sign(x) * _log(_abs(x) + UOp(Ops.SQRT, (x * x + 1.0,))),
    "acosh": lambda x: _log(x + UOp(Ops.SQRT, (x * x - 1.0,))),
    "atanh": lambda x: _log((1.0 + x) / (1.0 - x)) * 0.5,
    "round": lambda x: _trunc(x + UOp(Ops.WHERE, (x < 0.0, _const(x.dtype, -0.5), _const(x.dtype, 0.5)))),
    "floor": _floor,
    "ceil": _ceil,
    "frac": lambda x: x - _floor(x),
    "erf": _erf,
}

_UOP_BINARY: dict[str, Callable[[UOp, UOp], UOp]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "<?": lambda a, b: UOp(Ops.WHERE, (b < a, b, a)),
    ">?": lambda a, b: UOp(Ops.MAX, (a, b)),
    "&&": lambda a, b: UOp(Ops.AND, (a, b)),
    "||": lambda a, b: UOp(Ops.OR, (a, b)),
    "^": lambda a, b: UOp(Ops.XOR, (a, b)),
    "=>": lambda a, b: UOp(Ops.OR, (UOp(Ops.NOT, (a,)), b)),
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "==": lambda a, b: a.eq(b),
    "!=": lambda a, b: a.ne(b),
}


_COMPARISON_OPS = frozenset({"<", "<=", ">", ">=", "==", "!="})


class KernelScalarOps(PythonScalarOps):
    """Scalar operations on UOps (and UOps mixed with Python values) inside a lowering.

    A run-time extent (:class:`DynamicExtent`) that meets a UOp, or is compared, becomes the UOp
    ``runtime(extent)`` gives (its value read from the counters at run time); alone it stays symbolic.
    A run-time scalar (:class:`RuntimeScalar`, such as ``real(s)`` of an extent the data decides)
    becomes its UOp wherever it is used.
    """

    def __init__(self, runtime: Callable[[Any], Any] | None = None) -> None:
        self.runtime = runtime

    def _runtime(self, value: Any) -> Any:
        if isinstance(value, DynamicExtent | RuntimeScalar) and self.runtime is not None:
            return self.runtime(value)
        return value

    def binary(self, op: str, a: Any, b: Any, position: ast.Position) -> Any:
        dynamic = isinstance(a, DynamicExtent) or isinstance(b, DynamicExtent)
        scalar = isinstance(a, RuntimeScalar) or isinstance(b, RuntimeScalar)
        if scalar or (dynamic and (isinstance(a, UOp) or isinstance(b, UOp) or op in _COMPARISON_OPS)):
            a, b = self._runtime(a), self._runtime(b)
        if not isinstance(a, UOp) and not isinstance(b, UOp):
            return super().binary(op, a, b, position)
        if op == "**":
            return self._power(a, b)
        x, y = _operands(a, b)
        if op == "/":
            return x / y if x.dtype.is_float else UOp(Ops.IDIV, (x, y))
        if op == "\\":
            if x.dtype.is_float:
                return _ceil(x / y)
            return -UOp(Ops.IDIV, (-x, y))
        if op == "%":
            return x - y * _floor(x / y) if x.dtype.is_float else UOp(Ops.MOD, (x, y))
        function = _UOP_BINARY.get(op)
        if function is None:
            raise NNEFError.at(position, f"operator '{op}' is not available in a lowering")
        return function(x, y)

    def _power(self, a: Any, b: Any) -> UOp:
        if isinstance(b, int) and not isinstance(b, bool) and 0 <= b <= 8 and isinstance(a, UOp):
            out: UOp = _const(a.dtype, 1)
            for _ in range(b):
                out = out * a
            return out
        x, y = _operands(a, b)
        if not x.dtype.is_float:
            return UOp(Ops.POW, (_float(x), _float(y))).cast(x.dtype)
        return UOp(Ops.POW, (x, y))

    def unary(self, op: str, a: Any, position: ast.Position) -> Any:
        if isinstance(a, RuntimeScalar):
            a = self._runtime(a)
        if not isinstance(a, UOp):
            return super().unary(op, a, position)
        if op == "!":
            return UOp(Ops.NOT, (a,))
        return -a if op == "-" else a

    def select(self, condition: Any, then: Any, otherwise: Any, position: ast.Position) -> Any:
        if isinstance(condition, RuntimeScalar):
            condition = self._runtime(condition)
        if not isinstance(condition, UOp):
            return super().select(condition, then, otherwise, position)
        then, otherwise = self._runtime(then), self._runtime(otherwise)
        if not condition.dtype.is_bool:
            condition = condition.ne(_const(condition.dtype, 0))
        if isinstance(then, BoundedIndex) or isinstance(otherwise, BoundedIndex):
            raise NNEFError.at(position, "a guarded index |i| cannot be chosen by a run-time condition")
        return _where(condition, then, otherwise)

    def builtin(self, func: str, a: Any, position: ast.Position) -> Any:
        a = self._runtime(a)
        if not isinstance(a, UOp):
            return super().builtin(func, a, position)
        if func == "abs":
            return _abs(a)
        if func == "sign":
            return _sign(a)
        return _FLOAT_BUILTINS[func](_float(a))

    def cast(self, type_name: str, a: Any, position: ast.Position) -> Any:
        if (isinstance(a, DynamicExtent) and type_name != "int") or isinstance(a, RuntimeScalar):
            a = self._runtime(a)
        if not isinstance(a, UOp):
            return super().cast(type_name, a, position)
        if type_name == "bool":
            return a if a.dtype.is_bool else a.ne(_const(a.dtype, 0))
        return a.cast(uop_dtype(type_name))

    def truth(self, value: Any, position: ast.Position) -> bool | None:
        if isinstance(value, UOp):
            return None
        return super().truth(value, position)


_KERNEL_OPS = KernelScalarOps()  # without run-time extents (intrinsics, helpers)


# ------------------------------------------------------------------------------------------------
# reading tensors inside a kernel


@dataclass(frozen=True)
class _Choice:
    """A tensor of a pack picked by a run-time index (``xs[y[i..]]``)."""

    tensors: tuple
    selector: UOp


class _All:
    """The ``:`` index of a packed access: every position of a dimension."""

    def __repr__(self) -> str:
        return ":"


_ALL = _All()


class _KernelBuilder:
    """The PARAM slots of one kernel and the gates active while its values are built."""

    def __init__(self, output: TensorInfo, graph: Graph) -> None:
        self.graph = graph
        self.output = output
        self.names: list[str] = []
        self.params: dict[str, UOp] = {}
        self.term_gates: list[Any] = []
        self.gate_stack: list[UOp] = []
        self.current: dict[int, UOp] = {}  # position of a `:` item -> placeholder of the output value
        self.param(output)

    def param(self, tensor: TensorInfo | str, dtype: DType | None = None, size: int | None = None) -> UOp:
        """The PARAM bound to ``tensor`` (slots in order of first use; slot 0 is the output)."""
        name = tensor if isinstance(tensor, str) else tensor.name
        found = self.params.get(name)
        if found is None:
            if not isinstance(tensor, str):
                dtype = uop_dtype(tensor.dtype)
                size = max(math.prod(tensor.upper_shape), 1)
            found = UOp.param(len(self.names), (size,), dtype, "CPU", AddrSpace.GLOBAL)
            self.params[name] = found
            self.names.append(name)
        return found

    def load(
        self,
        tensor: TensorInfo | str,
        flat: UOp,
        gate: Any = True,
        dtype: DType | None = None,
        size: int | None = None,
    ) -> UOp:
        """``LOAD(INDEX(param, flat))``, gated by ``gate`` and every enclosing run-time condition."""
        param = self.param(tensor, dtype, size)
        gate = _and([*self.gate_stack, gate])
        address = UOp(Ops.INDEX, (param, flat))
        if gate is True:
            return UOp(Ops.LOAD, (address,))
        if gate is False:
            return _const(param.arg.dtype, 0)
        return UOp(Ops.LOAD, (address, _const(address.dtype, 0), gate))

    def extent(self, extent: Any) -> Any:
        """The value of an extent inside the kernel: an int, or for a data-dependent extent an index
        UOp read from the counters of the kernels that decide it (see :func:`runtime_extent`); a
        run-time scalar computed from such extents (:func:`runtime_value`)."""
        if isinstance(extent, RuntimeScalar):
            return runtime_value(self.graph, extent, self._counter)
        if not isinstance(extent, DynamicExtent):
            return extent
        found = runtime_extent(self.graph, extent, self._counter)
        return found if found is not None else int(extent.bound)

    def _counter(self, name: str) -> UOp:
        # read without the gates of run-time conditions: an extent is the same everywhere
        return UOp(Ops.LOAD, (UOp(Ops.INDEX, (self.param(name, dtypes.int32, 1), _const(INDEX, 0))),))

    def placeholder(self, item: int, dtype: DType) -> UOp:
        """A stand-in for the current value of the output (item ``item`` of a packed dim)."""
        found = self.current.get(item)
        if found is None:
            found = UOp(Ops.PARAM, (shape_uop(()),), ParamArg(-1 - item, dtype, None, None))
            self.current[item] = found
        return found


def _counter_of(graph: Graph, key: Any) -> str | None:
    """The counter buffer of the data-dependent extent ``key``: operations are lowered in order
    until the one that counts it has registered it (None when no operation counts it)."""
    found = graph.counts.get(key)
    if found is not None:
        return found
    busy = graph.__dict__.setdefault("_lowering_now", set())
    for op in graph.operations:
        if id(op) in busy:
            break  # up to the operation being lowered: nothing after it decides its inputs' extents
        if id(op) not in graph._lowered:
            graph.lower(op)
        found = graph.counts.get(key)
        if found is not None:
            return found
    return None


_LEAF = object()  # "not a leaf" marker of _evaluate_tree


def _evaluate_tree(node: Any, leaf: Callable[[Any], Any], ops: PythonScalarOps) -> Any:
    """The value of a run-time extent's key or a run-time scalar's expression: ``leaf(node)`` gives
    the value of a counted leaf (None: unknown; ``_LEAF``: not a leaf); inner nodes are
    ``(op, a, b)``, ``(cast or function, a)`` and ``("?", condition, a, b)``, computed by ``ops``."""
    found = leaf(node)
    if found is not _LEAF:
        return found
    if isinstance(node, tuple) and node and isinstance(node[0], str):
        items = [_evaluate_tree(item, leaf, ops) for item in node[1:]]
        if any(item is None for item in items):
            return None
        if len(node) == 4:
            condition, then, otherwise = items
            if isinstance(condition, bool):
                return then if condition else otherwise
            return ops.select(condition, then, otherwise, ast.NOWHERE)
        if len(node) == 3:
            return ops.binary(node[0], items[0], items[1], ast.NOWHERE)
        if node[0] in _UOP_TYPES:
            return ops.cast(node[0], items[0], ast.NOWHERE)
        return ops.builtin(node[0], items[0], ast.NOWHERE)
    if isinstance(node, int | float):
        return node
    return None


def runtime_extent(graph: Graph, extent: DynamicExtent, counter: Callable[[str], UOp]) -> UOp | None:
    """A data-dependent extent as an index UOp: its key's counters (``counter(name)`` reads one)
    combined by the key's arithmetic; None when part of it is counted by no kernel (an input
    extent, computed at its upper bound until the graph is recomposed for the given shapes)."""

    def leaf(key: Any) -> Any:
        name = _counter_of(graph, key)
        if name is not None:
            return counter(name).cast(INDEX)
        return None if isinstance(key, str) else _LEAF

    found = _evaluate_tree(extent.key, leaf, _KERNEL_OPS)
    return _index(found) if found is not None else None


def runtime_value(graph: Graph, value: Any, counter: Callable[[str], UOp]) -> Any:
    """A run-time extent or a :class:`RuntimeScalar` as a kernel value: its expression over the
    counters (an extent no kernel counts, an input extent before the graph is recomposed for the
    given shapes, takes its upper bound, as the ranges do)."""
    if isinstance(value, RuntimeScalar):
        return _evaluate_tree(
            value.expression,
            lambda node: runtime_value(graph, node, counter) if isinstance(node, DynamicExtent) else _LEAF,
            _KERNEL_OPS,
        )
    if isinstance(value, DynamicExtent):
        found = runtime_extent(graph, value, counter)
        if found is not None:
            return found
        if value.bound is None:
            raise NNEFError(f"the run-time extent {value!r} has no upper bound and no kernel counts it")
        return int(value.bound)
    return value


def _strides(shape: Sequence[int]) -> list[int]:
    strides = [1] * len(shape)
    for axis in range(len(shape) - 2, -1, -1):
        strides[axis] = strides[axis + 1] * shape[axis + 1]
    return strides


def _flat(indices: Sequence[Any], shape: Sequence[int]) -> UOp:
    total: UOp = _const(INDEX, 0)
    for index, stride in zip(indices, _strides(shape), strict=True):
        if isinstance(index, int):
            if index:
                total = total + index * stride
            continue
        term = index if stride == 1 else index * stride
        total = term if total.op is Ops.CONST and total.arg[0] == 0 else total + term
    return total


class _LoweringEvaluator(Evaluator):
    """The expression evaluator of a lowering: tensor accesses read through a kernel builder."""

    def __init__(self, builder: _KernelBuilder, symbols: Any, types: dict[str, str]) -> None:
        super().__init__(symbols, frozenset(), types, KernelScalarOps(builder.extent))
        self.builder = builder

    def tensor_access(self, node: ast.TensorAccess) -> Any:
        base = self(node.base)
        if base is None:
            return None
        items: list[Any] = []
        for index in node.indices:
            if isinstance(index, ast.Expand):
                value = self(index.value)
                if value is None:
                    return None
                if index.count is not None:
                    count = self.repeat_count(index.count)
                    value = (value if isinstance(value, list) else [value]) * (count or 0)
                if not isinstance(value, list):
                    raise NNEFError.at(index.pos, "'..' in a tensor index expands a pack; this is not a pack")
                items.extend(value)
            elif isinstance(index, ast.Range):
                if index.start is None and index.stop is None and index.step is None:
                    items.append(_ALL)
                else:
                    items.append(("range", index))
            else:
                value = self(index)
                if value is None:
                    return None
                items.append(("positions", value) if isinstance(value, list) else value)
        return self.read(base, items, node)

    def read(self, base: Any, items: list, node: ast.Node) -> Any:
        """The value of ``base`` at ``items`` (a pack when an index is ``:``)."""
        if isinstance(base, list):
            return [self.read(item, items, node) for item in base]
        if isinstance(base, _Choice):
            values = [self.read(tensor, items, node) for tensor in base.tensors]
            return _pick(values, base.selector)
        if isinstance(base, _OutputRef):
            return self._read_output(base, items, node)
        if not isinstance(base, TensorInfo):
            raise NNEFError.at(
                node.pos, f"only tensors can be accessed with x[...], got {type_name_of(base)}"
            )
        if len(items) != base.rank:
            raise NNEFError.at(
                node.pos, f"'{base.name}' has rank {base.rank} but is accessed with {len(items)} indices"
            )
        resolved = [
            self._range_positions(item, extent) for item, extent in zip(items, base.upper_shape, strict=True)
        ]
        packed = [axis for axis, item in enumerate(resolved) if isinstance(item, list)]
        if len(packed) > 1:
            raise NNEFError.at(node.pos, "only one dimension of an access may be ':'")
        if packed:
            axis = packed[0]
            return [
                self._read_point(base, resolved[:axis] + [position] + resolved[axis + 1 :], node)
                for position in resolved[axis]
            ]
        return self._read_point(base, resolved, node)

    def _range_positions(self, item: Any, extent: int) -> Any:
        if item is _ALL:
            return list(range(extent))
        if isinstance(item, tuple) and item and item[0] == "range":
            return self.slice_value(list(range(extent)), item[1])
        if isinstance(item, tuple) and item and item[0] == "positions":
            return list(item[1])  # a pack index (not expanded) reads a pack along this dimension
        return item

    def _read_point(self, tensor: TensorInfo, indices: list, node: ast.Node) -> Any:
        uniform = _uniform_constant(tensor)
        if uniform is not None:
            self._guards(tensor, indices, node)  # a guarded read still skips its term
            return uniform
        positions, gate = self._guards(tensor, indices, node)
        if gate is False:
            return _const(uop_dtype(tensor.dtype), 0)
        return self.builder.load(tensor, _flat(positions, tensor.upper_shape), gate)

    def _guards(self, tensor: TensorInfo, indices: list, node: ast.Node) -> tuple[list, Any]:
        positions: list[Any] = []
        gates: list[Any] = []
        extent_of = self.builder.extent
        for index, extent, declared in zip(indices, tensor.upper_shape, tensor.shape, strict=True):
            if isinstance(index, DynamicExtent):
                index = _index(extent_of(index))
            if isinstance(index, BoundedIndex):  # guards and remaps test the actual extent
                index = BoundedIndex(*(extent_of(part) for part in (index.index, index.lower, index.upper)))
                position, gate = _bounded(index, extent_of(declared))
                gates.append(gate)
                positions.append(position)
            elif isinstance(index, int) and not isinstance(index, bool):
                if not 0 <= index < extent:
                    raise NNEFError.at(
                        node.pos,
                        f"index {index} is out of range for extent {extent} of "
                        f"'{tensor.name}'; guard it with |...|",
                    )
                positions.append(index)
            elif isinstance(index, UOp):
                positions.append(_index(index))
            else:
                raise NNEFError.at(node.pos, f"a tensor index must be an int, got {format_value(index)}")
        gate = _and(gates)
        if gate is not True:
            self.builder.term_gates.append(gate)
        return positions, gate

    def _read_output(self, ref: _OutputRef, items: list, node: ast.Node) -> Any:
        dtype = uop_dtype(ref.tensor.dtype)
        packed = [axis for axis, item in enumerate(items) if item is _ALL]
        if packed:
            return [
                self.builder.placeholder(position, dtype)
                for position in range(ref.tensor.upper_shape[packed[0]])
            ]
        return self.builder.placeholder(0, dtype)

    def index_other(self, base: Any, index: Any, node: ast.Index) -> Any:
        if isinstance(base, TensorInfo | _OutputRef):  # x[i] for x[i,]: the spec's own linear writes it
            return self.read(base, [index], node)
        return super().index_other(base, index, node)

    def dynamic_item(self, base: list | str, index: Any, node: ast.Index) -> Any:
        if not isinstance(index, UOp) or isinstance(base, str):
            return super().dynamic_item(base, index, node)
        if base and all(isinstance(item, TensorInfo) for item in base):
            return _Choice(tuple(base), index)
        return _pick(list(base), index)

    def runtime_select(self, condition: Any, node: ast.Select) -> Any:
        if not condition.dtype.is_bool:
            condition = condition.ne(_const(condition.dtype, 0))
        builder = self.builder
        saved = builder.term_gates
        builder.term_gates = []
        builder.gate_stack.append(condition)
        then = self(node.then)
        builder.gate_stack.pop()
        then_gates, builder.term_gates = builder.term_gates, []
        builder.gate_stack.append(UOp(Ops.NOT, (condition,)))
        otherwise = self(node.otherwise)
        builder.gate_stack.pop()
        other_gates = builder.term_gates
        builder.term_gates = saved
        if then_gates or other_gates:
            saved.append(
                _where(
                    condition, as_uop(_and(then_gates), dtypes.bool), as_uop(_and(other_gates), dtypes.bool)
                )
            )
        if then is None or otherwise is None:
            return None
        if isinstance(then, list) or isinstance(otherwise, list):
            thens = then if isinstance(then, list) else [then] * len(otherwise)
            others = otherwise if isinstance(otherwise, list) else [otherwise] * len(thens)
            return [_where(condition, a, b) for a, b in zip(thens, others, strict=True)]
        return _where(condition, then, otherwise)


@dataclass(frozen=True)
class _OutputRef:
    """The output being assigned, read inside its own statement (the current value)."""

    tensor: TensorInfo


def _pick(values: list, selector: UOp) -> Any:
    """``values[selector]`` for a run-time selector: a chain of WHERE."""
    if not values:
        raise NNEFError("cannot pick an item of an empty pack")
    out = values[-1]
    for position in range(len(values) - 2, -1, -1):
        out = _where(selector.eq(_const(selector.dtype, position)), values[position], out)
    return out


def _bounded(index: BoundedIndex, extent: int | UOp) -> tuple[Any, Any]:
    """(position, gate) of a guarded / remapped index against ``extent`` (an int, or an index UOp
    for an extent decided at run time)."""
    value = index.index
    static = isinstance(extent, int)
    if not index.remaps:
        if isinstance(value, int) and static:
            return value, 0 <= value < extent
        position = _index(value)
        return position, UOp(Ops.AND, (position >= 0, position < extent))
    if static and all(isinstance(v, int) for v in (value, index.lower, index.upper)):
        return (index.lower if value < 0 else index.upper if value >= extent else value), True
    position = _index(value)
    lower, upper = _index(index.lower), _index(index.upper)
    remapped = UOp(Ops.WHERE, (position < 0, lower, UOp(Ops.WHERE, (position >= extent, upper, position))))
    return remapped, True


def _uniform_constant(tensor: TensorInfo) -> Any:
    """The single value of a constant tensor whose items are all equal (read as a literal)."""
    if tensor.kind != "constant" or tensor.data is None or tensor.data.size == 0:
        return None
    cached = tensor.__dict__.get("_uniform", _MISSING)
    if cached is _MISSING:
        flat = tensor.data.reshape(-1)
        cached = flat[0].item() if bool(np.all(flat == flat[0])) else None
        if isinstance(cached, bool) and tensor.dtype != "bool":
            cached = int(cached)
        tensor.__dict__["_uniform"] = cached
    return cached


_MISSING = object()
_LOAD_BACK = object()  # the initial value is read back from the output (written by an init kernel)
# the operators a run-time extent's key may combine (DynamicExtent arithmetic, expressions.py)


# ------------------------------------------------------------------------------------------------
# affine index analysis


def _affine(u: UOp) -> tuple[dict[UOp, int], int] | None:
    """``u`` as ``sum(coeff * range) + const`` over RANGEs, or None when it is not affine."""
    op = u.op
    if op is Ops.CONST:
        value = u.arg[0]
        return ({}, int(value)) if isinstance(value, int | bool) else None
    if op is Ops.RANGE:
        return {u: 1}, 0
    if op is Ops.CAST and (u.src[0].dtype.is_int or u.src[0].dtype is INDEX):
        return _affine(u.src[0])
    if op in (Ops.ADD, Ops.SUB):
        left, right = _affine(u.src[0]), _affine(u.src[1])
        if left is None or right is None:
            return None
        sign = 1 if op is Ops.ADD else -1
        terms = dict(left[0])
        for r, c in right[0].items():
            terms[r] = terms.get(r, 0) + sign * c
        return {r: c for r, c in terms.items() if c}, left[1] + sign * right[1]
    if op is Ops.NEG:
        inner = _affine(u.src[0])
        return None if inner is None else ({r: -c for r, c in inner[0].items()}, -inner[1])
    if op is Ops.MUL:
        left, right = _affine(u.src[0]), _affine(u.src[1])
        if left is None or right is None:
            return None
        if not left[0]:
            left, right = right, left
        if right[0]:
            return None
        factor = right[1]
        return {r: c * factor for r, c in left[0].items() if c * factor}, left[1] * factor
    return None


def _affine_uop(terms: dict[UOp, int], constant: int) -> UOp:
    """``sum(coeff * range) + constant`` as an index UOp."""
    total: UOp = _const(INDEX, constant)
    for r, coefficient in terms.items():
        term = r if coefficient == 1 else r * coefficient
        total = term if total.op is Ops.CONST and total.arg[0] == 0 else total + term
    return total


def _ranges_in(u: Any) -> set[UOp]:
    if not isinstance(u, UOp):
        return set()
    return {node for node in u.toposort() if node.op is Ops.RANGE}


def _range_bound(r: UOp) -> int:
    return int(r.src[0].arg[0])


# ------------------------------------------------------------------------------------------------
# one statement, evaluated


@dataclass
class _Term:
    """The right side of a statement for one binding of its unrolled reduction symbols."""

    value: Any
    gates: list[Any]
    condition: Any


@dataclass
class _Evaluated:
    """A statement with its ranges, its left side and its terms."""

    statement: ast.Lowering
    ranges: list[UOp]  # provisional RANGEs, in declaration order
    lhs: list[Any]
    output: TensorInfo
    terms: list[_Term]
    reads_output: bool


class _OperationLowering:
    """Lowers the @lower statements of one operation."""

    def __init__(self, graph: Graph, op: Operation) -> None:
        self.graph = graph
        self.op = op
        self.symbols = op.symbols
        self.kernels: list[LoweredKernel] = []
        self._range_numbers = itertools.count(1000)
        self.pack_item: int | None = None

    def error(self, node: ast.Node, message: str) -> NNEFError:
        """An error at the statement, naming the operation."""
        where = f" (in {self.op.type} '{self.op.label}', invoked at {self.op.position})"
        return NNEFError.at(node.pos, message + where)

    # -- grouping --------------------------------------------------------------------------------

    def lower(self) -> list[LoweredKernel]:
        groups: dict[str, list[ast.Lowering]] = {}
        for statement in self.op.definition.lowerings:
            groups.setdefault(self._target_name(statement), []).append(statement)
        for name, statements in groups.items():
            init = [s for s in statements if s.op == "="]
            updates = [s for s in statements if s.op != "="]
            if len(init) > 1 or len(updates) > 1:
                raise self.error(
                    statements[-1], f"'{name}' is assigned by more than one '=' or more than one accumulation"
                )
            if updates and updates[0].op == ":=" and not init:
                raise self.error(updates[0], f"':=' updates '{name}', which needs an initialising '=' first")
            self._lower_output(init[0] if init else None, updates[0] if updates else None)
        return self.kernels

    def _target_name(self, statement: ast.Lowering) -> str:
        base = statement.target.base if isinstance(statement.target, ast.TensorAccess) else statement.target
        while isinstance(base, ast.Index):
            base = base.base
        if not isinstance(base, ast.Identifier):
            raise self.error(statement, "the left side of a lowering must be an output tensor access")
        if base.name not in {param.name for param in self.op.definition.outputs}:
            raise self.error(statement, f"'{base.name}' is not an output of {self.op.type}")
        return base.name

    # -- unrolling -------------------------------------------------------------------------------

    def _unrolled(self, statement: ast.Lowering) -> list[str]:
        """Index symbols expanded at compile time: pack selectors, symbols bounds depend on."""
        names = {bound.name for bound in statement.bounds}
        chosen: list[str] = []
        nodes = [
            statement.target,
            statement.value,
            statement.condition,
            *(local.value for local in statement.locals),
        ]
        for root in nodes:
            if root is None:
                continue
            for node in ast.walk(root):
                if (
                    isinstance(node, ast.Index)
                    and isinstance(node.base, ast.Identifier)
                    and isinstance(node.index, ast.Identifier)
                    and node.index.name in names
                ):
                    value = self.symbols.get(node.base.name)
                    if (
                        isinstance(value, list)
                        and value
                        and all(isinstance(item, TensorInfo) for item in value)
                    ):
                        chosen.append(node.index.name)
        for position, bound in enumerate(statement.bounds):
            earlier = {b.name for b in statement.bounds[:position]}
            chosen.extend(identifiers(bound.bound) & earlier)
        return list(dict.fromkeys(chosen))

    def _bindings(
        self, statement: ast.Lowering, names: list[str], local: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """Every combination of values of the unrolled symbols ``names``."""
        if not names:
            return [{}]
        bounds = {bound.name: bound for bound in statement.bounds}
        out: list[dict[str, Any]] = [{}]
        for name in names:
            bound = bounds[name]
            expanded = []
            for binding in out:
                evaluator = Evaluator(ChainMap(binding, local, self.symbols), frozenset(), self.op.dtypes)
                count = evaluator(bound.bound)
                if isinstance(count, list) or not isinstance(count, int) or isinstance(count, bool):
                    raise self.error(
                        bound, f"the unrolled index '{name}' needs an int bound, got {format_value(count)}"
                    )
                expanded.extend({**binding, name: value} for value in range(count))
            out = expanded
        return out

    # -- evaluation -------------------------------------------------------------------------------

    def _evaluate(
        self,
        statement: ast.Lowering,
        builder: _KernelBuilder,
        local: dict[str, Any],
        term_names: list[str],
        output: TensorInfo,
        self_reads: bool,
    ) -> _Evaluated:
        """Ranges, left side and the terms (one per binding of ``term_names``) of a statement."""
        ranges: list[UOp] = []
        symbols: dict[str, Any] = dict(local)
        unrolled = set(local) | set(term_names)
        extent_gates: list[Any] = []  # ranges run to the upper bound of a data-dependent extent
        for bound in statement.bounds:
            if bound.name in unrolled:
                continue
            evaluator = _LoweringEvaluator(builder, ChainMap(symbols, self.symbols), self.op.dtypes)
            extent = evaluator(bound.bound)
            extents = [self._as_extent(e, bound) for e in (extent if isinstance(extent, list) else [extent])]
            made = [self._new_range(self._extent(e, bound)) for e in extents]
            for r, e in zip(made, extents, strict=True):
                actual = builder.extent(e) if isinstance(e, DynamicExtent) else None
                if isinstance(actual, UOp):
                    extent_gates.append(r < actual)
            ranges.extend(made)
            symbols[bound.name] = made if isinstance(extent, list) else made[0]
        overlay = dict(symbols)
        name = self._target_name(statement)
        if self_reads:
            overlay[name] = _OutputRef(output)
        lhs_scope = dict(overlay)
        evaluator = _LoweringEvaluator(builder, ChainMap(lhs_scope, self.symbols), self.op.dtypes)
        pending = set(term_names)
        for local_def in statement.locals:  # the left side may use 'with' locals (conv's oi)
            if identifiers(local_def.value) & pending:
                pending.add(local_def.name)
                continue
            lhs_scope[local_def.name] = evaluator(local_def.value)
        lhs = self._lhs(statement, evaluator, output)
        terms = []
        reads_before = len(builder.current)
        for binding in self._bindings(statement, term_names, symbols):
            builder.term_gates = []
            scope: dict[str, Any] = {**overlay, **binding}
            term_evaluator = _LoweringEvaluator(builder, ChainMap(scope, self.symbols), self.op.dtypes)
            for local_def in statement.locals:
                scope[local_def.name] = term_evaluator(local_def.value)
            value = term_evaluator(statement.value)
            if isinstance(value, list):  # a run-time extent or scalar assigned as it is (x.shape[i])
                value = [
                    builder.extent(v) if isinstance(v, DynamicExtent | RuntimeScalar) else v for v in value
                ]
            elif isinstance(value, DynamicExtent | RuntimeScalar):
                value = builder.extent(value)
            if self.pack_item is not None and isinstance(value, list):
                value = value[self.pack_item]  # the item of a whole-pack assignment
            condition = True if statement.condition is None else term_evaluator(statement.condition)
            if condition is None:
                raise self.error(statement, "the condition after '|' is null")
            if extent_gates:  # past a run-time extent nothing is read: indices there may point outside
                value = _gate_value(value, _and(extent_gates))
            terms.append(_Term(value, [*extent_gates, *builder.term_gates], condition))
        builder.term_gates = []
        return _Evaluated(statement, ranges, lhs, output, terms, len(builder.current) > reads_before)

    def _as_extent(self, value: Any, bound: ast.LoopBound) -> Any:
        """A bound computed from run-time extents (``int(round(real(s) * f))``) as a run-time extent."""
        if not isinstance(value, RuntimeScalar) or value.type != "int":
            return value
        converted = value.as_extent()
        if converted is None:
            raise self.error(bound, f"the bound of '{bound.name}' ({value!r}) has no upper bound")
        return converted

    def _extent(self, value: Any, bound: ast.LoopBound) -> int:
        if isinstance(value, DynamicExtent):
            if value.bound is None:
                raise self.error(
                    bound, f"the bound of '{bound.name}' is a run-time extent without an upper bound"
                )
            return int(value.bound)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(
                bound,
                f"the bound of '{bound.name}' must be an int (or a pack of ints), got {format_value(value)}",
            )
        return value

    def _new_range(self, extent: int) -> UOp:
        return UOp.range(extent, AxisType.LOOP, next(self._range_numbers))

    def _lhs(self, statement: ast.Lowering, evaluator: _LoweringEvaluator, output: TensorInfo) -> list[Any]:
        target = statement.target
        if isinstance(target, ast.Index) and isinstance(target.base, ast.Identifier):
            indices: tuple = (target.index,)  # y[i] for y[i,], as the spec's own 'linear' reads bias[ni]
        elif isinstance(target, ast.TensorAccess):
            indices = target.indices
        else:
            raise self.error(statement, "the left side of a lowering must be an access of an output tensor")
        items: list[Any] = []
        for index in indices:
            if isinstance(index, ast.Expand):
                value = evaluator(index.value)
                if index.count is not None:
                    count = evaluator.repeat_count(index.count)
                    value = (value if isinstance(value, list) else [value]) * (count or 0)
                if not isinstance(value, list):
                    raise self.error(index, "'..' in the left side expands a pack; this is not a pack")
                items.extend(value)
            elif isinstance(index, ast.Range):
                if index.start is not None or index.stop is not None or index.step is not None:
                    raise self.error(index, "only ':' (the whole dimension) may be a range on the left side")
                items.append(_ALL)
            else:
                value = evaluator(index)
                items.append(("positions", value) if isinstance(value, list) else value)
        if len(items) != output.rank:
            raise self.error(
                target, f"'{output.name}' has rank {output.rank} but the left side has {len(items)} indices"
            )
        return items

    def _output_tensor(self, statement: ast.Lowering, local: dict[str, Any]) -> TensorInfo | list[TensorInfo]:
        base = statement.target.base
        evaluator = Evaluator(ChainMap(local, self.symbols), frozenset(), self.op.dtypes)
        tensor = evaluator(base)
        if isinstance(tensor, list) and tensor and all(isinstance(item, TensorInfo) for item in tensor):
            return tensor
        if not isinstance(tensor, TensorInfo):
            raise self.error(statement, "the left side of a lowering must be an output tensor")
        return tensor

    # -- one output ------------------------------------------------------------------------------------

    def _lower_output(self, init: ast.Lowering | None, update: ast.Lowering | None) -> None:
        main = update or init
        unrolled = self._unrolled(main)
        if main.unroll_index is not None:
            unrolled.insert(0, main.unroll_index)
        lhs_names = identifiers(main.target)
        split = [name for name in unrolled if name in lhs_names]
        terms = [name for name in unrolled if name not in lhs_names]
        for binding in self._split_bindings(main, split):
            output = self._output_tensor(main, binding)
            if isinstance(output, list):  # a whole pack assigned at once: one kernel per item (§2.12)
                for item, tensor in enumerate(output):
                    self.pack_item = item
                    self._lower_instance(init, update, binding, terms, tensor)
                self.pack_item = None
            else:
                self._lower_instance(init, update, binding, terms, output)

    def _split_bindings(self, statement: ast.Lowering, names: list[str]) -> list[dict[str, Any]]:
        local: dict[str, Any] = {}
        if statement.unroll_index is not None:
            count = Evaluator(self.symbols, frozenset(), self.op.dtypes)(statement.unroll_count)
            values = [{statement.unroll_index: value} for value in range(count)]
            rest = [name for name in names if name != statement.unroll_index]
            return [{**v, **b} for v in values for b in self._bindings(statement, rest, {**local, **v})]
        return self._bindings(statement, names, local)

    def _lower_instance(
        self,
        init: ast.Lowering | None,
        update: ast.Lowering | None,
        binding: dict[str, Any],
        terms: list[str],
        output: TensorInfo,
    ) -> None:
        main = update or init
        builder = _KernelBuilder(output, self.graph)
        counter = self._counter_symbol(main)
        if counter is not None:
            self._lower_counted(main, binding, output, counter)
            return
        evaluated = self._evaluate(main, builder, binding, terms, output, self_reads=main.op == ":=")
        space = _OutputSpace(self, evaluated)
        indices = [*binding.values(), *([self.pack_item] if self.pack_item is not None else [])]
        label = f"{self.op.label}" + (f"[{','.join(str(v) for v in indices)}]" if indices else "")
        if update is None:
            stores = self._assign(builder, evaluated, space, init_value=None)
            self._emit(builder, stores, label, main)
            return
        init_value = None
        if init is not None:
            init_value = self._fused_init(init, binding, output, space, builder) if space.full else None
            if init_value is None:
                init_builder = _KernelBuilder(output, self.graph)
                init_evaluated = self._evaluate(init, init_builder, binding, [], output, self_reads=False)
                init_space = _OutputSpace(self, init_evaluated)
                self._emit(
                    init_builder,
                    self._assign(init_builder, init_evaluated, init_space, None),
                    f"{label}.init",
                    init,
                )
                init_value = _LOAD_BACK
        stores = self._accumulate(builder, evaluated, space, init_value)
        self._emit(builder, stores, label, main)

    def _emit(
        self,
        builder: _KernelBuilder,
        stores: list[UOp],
        label: str,
        statement: ast.Lowering,
        scratch: dict[str, tuple[DType, int]] | None = None,
    ) -> None:
        ast_uop = UOp(Ops.SINK, tuple(stores))
        leftover = [u for u in ast_uop.toposort() if u.op is Ops.PARAM and u.arg.slot < 0]
        if leftover:
            raise self.error(
                statement, "the statement reads the output it assigns in a way uopviz cannot lower"
            )
        ast_uop, names = _compact_slots(tidy(ast_uop), builder)
        self.kernels.append(
            LoweredKernel(
                label,
                ast_uop,
                names,
                self.op,
                dict(scratch or {}),
                print_expression(statement.value),
            )
        )

    # -- assembling values ------------------------------------------------------------------------------

    def _store(
        self, builder: _KernelBuilder, space: _OutputSpace, value: Any, gate: Any, item: int | None
    ) -> UOp:
        output = builder.output
        dtype = uop_dtype(output.dtype)
        if isinstance(value, list):
            raise NNEFError(
                f"a pack of {len(value)} values is assigned to a single element of '{output.name}'"
            )
        if value is None:
            raise NNEFError(
                f"a null value is assigned to '{output.name}' (resolve optional values with '??')"
            )
        if isinstance(value, BoundedIndex):
            raise NNEFError(f"a guarded index is assigned to '{output.name}'")
        stored = (
            as_uop(value, dtype) if isinstance(value, UOp) else _const(dtype, _python_value(value, dtype))
        )
        address = UOp(Ops.INDEX, (builder.param(output), space.flat(item)))
        gate = _and([gate, *space.store_gates])
        if gate is True:
            return UOp(Ops.STORE, (address, stored))
        if gate is False:
            raise NNEFError(f"an assignment to '{output.name}' can never happen")
        return UOp(Ops.STORE, (address, stored, gate))

    def _items(self, value: Any, space: _OutputSpace) -> list[tuple[int | None, Any]]:
        if space.pack_axis is None:
            return [(None, value)]
        extent = space.pack_extent()
        values = value if isinstance(value, list) else [value] * extent
        if len(values) != extent:
            raise NNEFError(
                f"a pack of {len(values)} values is assigned to the ':' dimension of extent {extent} "
                f"of '{space.output.name}'"
            )
        return list(enumerate(values))

    def _assign(
        self, builder: _KernelBuilder, evaluated: _Evaluated, space: _OutputSpace, init_value: Any
    ) -> list[UOp]:
        """Stores of a plain '=' statement (last write wins if several iterations hit a point)."""
        (term,) = evaluated.terms if len(evaluated.terms) == 1 else (None,)
        if term is None:
            raise self.error(evaluated.statement, "an '=' assignment cannot have unrolled reduction indices")
        gate = _and([*term.gates, term.condition, *space.term_gates])
        if space.reduce_ranges:
            return self._last_write(builder, evaluated, space, [term], init_value)
        stores = []
        for item, value in self._items(term.value, space):
            stores.append(self._store(builder, space, space.apply(value), space.apply_gate(gate), item))
        return stores

    def _accumulate(
        self, builder: _KernelBuilder, evaluated: _Evaluated, space: _OutputSpace, init_value: Any
    ) -> list[UOp]:
        op = evaluated.statement.op
        if op == ":=":
            return self._update(builder, evaluated, space, init_value)
        dtype = uop_dtype(evaluated.output.dtype)
        stores = []
        packs = [self._items(term.value, space) for term in evaluated.terms]
        for position, (item, _) in enumerate(packs[0]):
            total: Any = None
            for term, items in zip(evaluated.terms, packs, strict=True):
                gate = space.apply_gate(_and([*term.gates, term.condition, *space.term_gates]))
                value = _gate_loads(as_uop(space.apply(items[position][1]), dtype), _and(space.term_gates))
                contribution = value if gate is True else _where(gate, value, _identity(op, dtype))
                total = contribution if total is None else _combine(op, total, contribution)
            if space.reduce_ranges:
                total = _reduce(op, total, space.reduce_ranges)
            initial = self._initial(init_value, builder, space, item, op, dtype)
            if initial is not None:
                total = _combine(op, as_uop(initial, dtype), total)
            stores.append(self._store(builder, space, total, True, item))
        return stores

    def _initial(
        self,
        init_value: Any,
        builder: _KernelBuilder,
        space: _OutputSpace,
        item: int | None,
        op: str,
        dtype: DType,
    ) -> Any:
        if init_value is None:
            return None
        if init_value is _LOAD_BACK:
            # read where the store may write: a guarded output index out of range (y[|2*i+j|] += ...)
            # skips the read as it skips the write
            return builder.load(builder.output, space.flat(item), _and(space.store_gates))
        values = init_value if isinstance(init_value, list) else None
        if values is not None:
            return values[item or 0]
        return init_value

    def _update(
        self, builder: _KernelBuilder, evaluated: _Evaluated, space: _OutputSpace, init_value: Any
    ) -> list[UOp]:
        """':=' conditional updates."""
        dtype = uop_dtype(evaluated.output.dtype)
        if evaluated.reads_output:
            if len(evaluated.terms) > 1 and not space.reduce_ranges:
                return self._sequential(builder, evaluated, space, init_value)
            return self._arg_extreme(builder, evaluated, space, init_value)
        if space.reduce_ranges or len(evaluated.terms) > 1:
            return self._last_write(builder, evaluated, space, evaluated.terms, init_value)
        (term,) = evaluated.terms
        gate = space.apply_gate(_and([*term.gates, term.condition, *space.term_gates]))
        stores = []
        for item, value in self._items(term.value, space):
            value = as_uop(space.apply(value), dtype)
            initial = self._initial(init_value, builder, space, item, ":=", dtype)
            if gate is True:
                stores.append(self._store(builder, space, value, True, item))
            elif initial is None:
                stores.append(self._store(builder, space, value, gate, item))
            else:
                stores.append(self._store(builder, space, _where(gate, value, initial), True, item))
        return stores

    def _sequential(
        self, builder: _KernelBuilder, evaluated: _Evaluated, space: _OutputSpace, init_value: Any
    ) -> list[UOp]:
        """Unrolled ':=' updates that read the output: a chain of selects in iteration order."""
        dtype = uop_dtype(evaluated.output.dtype)
        count = space.pack_extent()
        state = [
            as_uop(
                self._initial(init_value, builder, space, item, ":=", dtype) if init_value is not None else 0,
                dtype,
            )
            for item in range(count)
        ]
        placeholders = builder.current
        for term in evaluated.terms:
            mapping = {placeholders[item]: state[item] for item in placeholders}
            gate = space.apply_gate(_and([*term.gates, term.condition, *space.term_gates]))
            gate = _substitute(gate, mapping)
            values = term.value if isinstance(term.value, list) else [term.value] * count
            state = [
                _where(gate, as_uop(_substitute(space.apply(v), mapping), dtype), s)
                if gate is not True
                else as_uop(_substitute(space.apply(v), mapping), dtype)
                for v, s in zip(values, state, strict=True)
            ]
        items = range(count) if space.pack_axis is not None else [None]
        return [self._store(builder, space, state[item or 0], True, item) for item in items]

    def _arg_extreme(
        self, builder: _KernelBuilder, evaluated: _Evaluated, space: _OutputSpace, init_value: Any
    ) -> list[UOp]:
        """``out := r | f(r) > f(out)``: the first (strict) / last (non-strict) index of the extreme."""
        statement = evaluated.statement
        (term,) = evaluated.terms
        condition = term.condition
        values = term.value if isinstance(term.value, list) else [term.value]
        reduce = space.reduce_ranges
        candidates = [_strip_cast(space.apply(value)) for value in values]
        placeholders = [builder.current[item] for item in sorted(builder.current)]
        reduce_set = set(reduce)
        if (
            not isinstance(condition, UOp)
            or condition.op not in _COMPARES
            or len(placeholders) != len(candidates)
            or any(c not in reduce_set for c in candidates)
        ):
            raise self.error(
                statement,
                "this conditional update reads the output in a way uopviz cannot lower "
                "(supported: out := index | f(index) compared with f(out))",
            )
        condition = space.apply(condition)
        left, right = condition.src
        mapping = {
            r: UOp(Ops.CAST, (p,), INDEX) if p.dtype is not INDEX else p
            for r, p in zip(candidates, placeholders, strict=True)
        }
        if _substitute(left, mapping) is not right:
            left, right = right, left
            flipped = True
        else:
            flipped = False
        if _substitute(left, mapping) is not right:
            raise self.error(
                statement,
                "this conditional update reads the output in a way uopviz cannot lower "
                "(the two sides of the comparison differ by more than the index)",
            )
        op = condition.op
        greater = (op in (Ops.CMP_GT, Ops.CMP_GE)) != flipped
        strict = op in (Ops.CMP_GT, Ops.CMP_LT)
        key = _float(left) if not left.dtype.is_float else left
        gate = space.apply_gate(_and(term.gates))  # skipped terms (guards, run-time extents) take no part
        if gate is not True:
            key = _where(gate, key, _const(dtypes.float32, -math.inf if greater else math.inf))
        extreme = _reduce(">?=" if greater else "<?=", key, reduce)
        chosen_set = set(candidates)
        order = [space.mapping[r] for r in evaluated.ranges if space.mapping[r] in chosen_set]
        shape = [_range_bound(r) for r in order]
        flat = _flat(order, shape)
        fresh = {r: UOp.range(_range_bound(r), AxisType.REDUCE, next(self._range_numbers)) for r in reduce}
        hit = _substitute(key, fresh).eq(extreme)  # the second pass runs over ranges of its own
        if gate is not True:
            hit = UOp(Ops.AND, (_substitute(gate, fresh), hit))
        position = _substitute(flat, fresh)
        if strict:  # the first position that reaches the extreme
            chosen = -_reduce(">?=", _where(hit, -position, -(1 << 62)), list(fresh.values()))
        else:  # the last one
            chosen = _reduce(">?=", _where(hit, position, -1), list(fresh.values()))
        indices = _unflatten(chosen, shape)
        by_range = dict(zip(order, indices, strict=True))
        dtype = uop_dtype(evaluated.output.dtype)
        items = [item if space.pack_axis is not None else None for item in range(len(candidates))]
        initial = [
            as_uop(self._initial(init_value, builder, space, item, ":=", dtype), dtype) for item in items
        ]
        # the scan only moves away from its initial value when the extreme beats the value there
        at_initial = _substitute(right, {p: v for p, v in zip(placeholders, initial, strict=True)})
        at_initial = _float(at_initial) if not at_initial.dtype.is_float else at_initial
        if greater:
            better = extreme > at_initial if strict else extreme >= at_initial
        else:
            better = extreme < at_initial if strict else extreme <= at_initial
        stores = []
        for item, candidate, start in zip(items, candidates, initial, strict=True):
            value = _where(better, by_range[candidate].cast(dtype), start)
            stores.append(self._store(builder, space, value, True, item))
        return stores

    def _last_write(
        self,
        builder: _KernelBuilder,
        evaluated: _Evaluated,
        space: _OutputSpace,
        terms: list[_Term],
        init_value: Any,
    ) -> list[UOp]:
        """Several iterations may write a point: the last one in iteration order wins."""
        if len(terms) != 1:
            raise self.error(evaluated.statement, "unrolled indices cannot be combined with scattered writes")
        (term,) = terms
        reduce_set = set(space.reduce_ranges)
        order = [space.mapping[r] for r in evaluated.ranges if space.mapping[r] in reduce_set]
        shape = [_range_bound(r) for r in order]
        gate = space.apply_gate(_and([*term.gates, term.condition, *space.term_gates]))
        flat = _flat(order, shape)
        last = _reduce(">?=", _where(gate, flat, -1), order)
        safe = UOp(Ops.MAX, (last, _const(INDEX, 0)))
        back = dict(zip(order, _unflatten(safe, shape), strict=True))
        dtype = uop_dtype(evaluated.output.dtype)
        stores = []
        for item, value in self._items(term.value, space):
            written = as_uop(_substitute(space.apply(value), back), dtype)
            initial = self._initial(init_value, builder, space, item, ":=", dtype)
            if initial is None:
                stores.append(self._store(builder, space, written, last >= 0, item))
            else:
                stores.append(
                    self._store(
                        builder, space, _where(last >= 0, written, as_uop(initial, dtype)), True, item
                    )
                )
        return stores

    # -- fusing the initialiser ---------------------------------------------------------------------

    def _fused_init(
        self,
        init: ast.Lowering,
        binding: dict[str, Any],
        output: TensorInfo,
        space: _OutputSpace,
        target: _KernelBuilder,
    ) -> Any:
        """The initial value at the update's points, when the initialiser maps onto them."""
        builder = _KernelBuilder(output, self.graph)
        evaluated = self._evaluate(init, builder, binding, [], output, self_reads=False)
        (term,) = evaluated.terms
        if term.gates or term.condition is not True:
            return None
        mapping: dict[UOp, UOp] = {}
        points = space.point_indices()
        for axis, item in enumerate(evaluated.lhs):
            positions = _pack_positions(item, output.upper_shape[axis])
            if positions is not None:
                if space.pack_axis != axis or positions != space.pack_positions:
                    return None
                continue
            point = points[axis]
            if isinstance(item, int):
                if not (isinstance(point, int) and point == item) and output.upper_shape[axis] != 1:
                    return None
                continue
            if (
                not isinstance(item, UOp)
                or item.op is not Ops.RANGE
                or item in mapping
                or _range_bound(item) != output.upper_shape[axis]
            ):
                return None
            mapping[item] = _index(point) if not isinstance(point, UOp) else point
        if set(evaluated.ranges) - set(mapping):
            return None
        value = term.value
        if value is None:
            raise self.error(init, "the initial value is null (resolve optional values with '??')")

        def at_point(item: Any) -> Any:
            if not isinstance(item, UOp):
                return item
            return _rebind_params(_substitute(item, mapping), builder, target)

        return [at_point(v) for v in value] if isinstance(value, list) else at_point(value)

    # -- counted (data-dependent) outputs ---------------------------------------------------------------

    def _counter_symbol(self, statement: ast.Lowering) -> str | None:
        """The output extent this statement counts (§2.12): a symbol the output declares afresh
        (``k`` of ``int[d,k|n]``), not one derived from the inputs' run-time extents."""
        label = self.op.label
        for node in ast.walk(statement.target):
            if isinstance(node, ast.Identifier):
                value = self.symbols.get(node.name)
                if isinstance(value, DynamicExtent) and value.key == (
                    f"{label}.{node.name}" if label else node.name
                ):
                    return node.name
        return None

    def _lower_counted(
        self, statement: ast.Lowering, binding: dict[str, Any], output: TensorInfo, counter: str
    ) -> None:
        """``out[..., k] = v, i < s | cond``: k is the running count of the points where cond holds."""
        if statement.op != "=":
            raise self.error(statement, "a counted output dimension needs a plain '=' assignment")
        marker = UOp(Ops.PARAM, (shape_uop(()),), ParamArg(-100, INDEX, None, None))
        local = {**binding, counter: marker}
        builder = _KernelBuilder(output, self.graph)
        evaluated = self._evaluate(statement, builder, local, [], output, self_reads=False)
        (term,) = evaluated.terms
        ranges = evaluated.ranges
        shape = [_range_bound(r) for r in ranges]
        volume = max(math.prod(shape), 1)
        positions = f"{output.name}#positions"
        count = f"{output.name}#count"
        scratch = {positions: (dtypes.int32, volume), count: (dtypes.int32, 1)}
        condition = _and([*term.gates, term.condition])
        condition_uop = as_uop(condition, dtypes.bool)
        flat = _flat(ranges, shape)
        loops = {r: UOp.range(_range_bound(r), AxisType.LOOP, number) for number, r in enumerate(ranges)}
        reduces = {
            r: UOp.range(_range_bound(r), AxisType.REDUCE, len(ranges) + number)
            for number, r in enumerate(ranges)
        }
        # kernel 1: exclusive prefix count of the condition, in the order of the loop indices
        position_builder = _KernelBuilder(TensorInfo(positions, "int", (volume,)), self.graph)
        before = _substitute(flat, reduces) < _substitute(flat, loops)
        counted = _rebind_params(_substitute(condition_uop, reduces), builder, position_builder)
        total = _reduce(
            "+=",
            _where(UOp(Ops.AND, (counted, before)), _const(dtypes.int32, 1), _const(dtypes.int32, 0)),
            list(reduces.values()),
        )
        address = UOp(Ops.INDEX, (position_builder.param(position_builder.output), _substitute(flat, loops)))
        self._emit(
            position_builder,
            [UOp(Ops.STORE, (address, total))],
            f"{self.op.label}.positions",
            statement,
            {positions: scratch[positions]},
        )
        # kernel 2: the count
        count_builder = _KernelBuilder(TensorInfo(count, "int", (1,)), self.graph)
        counted = _rebind_params(_substitute(condition_uop, reduces), builder, count_builder)
        total = _reduce(
            "+=", _where(counted, _const(dtypes.int32, 1), _const(dtypes.int32, 0)), list(reduces.values())
        )
        address = UOp(Ops.INDEX, (count_builder.param(count_builder.output), _const(INDEX, 0)))
        self._emit(
            count_builder,
            [UOp(Ops.STORE, (address, total))],
            f"{self.op.label}.count",
            statement,
            {count: scratch[count]},
        )
        # kernel 3: zero the output, kernel 4: scatter the values to their counted slots
        zero_builder = _KernelBuilder(output, self.graph)
        size = max(math.prod(output.upper_shape), 1)
        fill = UOp.range(size, AxisType.LOOP, 0)
        zero = UOp(
            Ops.STORE,
            (UOp(Ops.INDEX, (zero_builder.param(output), fill)), _const(uop_dtype(output.dtype), 0)),
        )
        self._emit(zero_builder, [zero], f"{self.op.label}.clear", statement)
        scatter_builder = _KernelBuilder(output, self.graph)
        slot = scatter_builder.load(positions, _substitute(flat, loops), True, dtypes.int32, volume).cast(
            INDEX
        )
        gate = _rebind_params(_substitute(condition_uop, loops), builder, scatter_builder)
        stores = []
        lhs = evaluated.lhs
        packed = [axis for axis, item in enumerate(lhs) if item is _ALL]
        values = term.value if isinstance(term.value, list) else [term.value]
        items = range(output.upper_shape[packed[0]]) if packed else [None]
        for item in items:
            indices = []
            for index in lhs:
                if index is _ALL:
                    indices.append(item)
                elif isinstance(index, UOp) and index is marker:
                    indices.append(slot)
                elif isinstance(index, int):
                    indices.append(index)
                else:
                    raise self.error(
                        statement, "a counted output supports ':', constant and counter indices only"
                    )
            value = values[item or 0]
            value = _rebind_params(
                _substitute(as_uop(value, uop_dtype(output.dtype)), loops), builder, scatter_builder
            )
            address = UOp(Ops.INDEX, (scatter_builder.param(output), _flat(indices, output.upper_shape)))
            stores.append(UOp(Ops.STORE, (address, value, gate)))
        self._emit(
            scatter_builder, stores, f"{self.op.label}.scatter", statement, {positions: scratch[positions]}
        )
        dynamic = self.symbols[counter]
        self.graph.counts[dynamic.key] = count


_COMPARES = frozenset({Ops.CMP_GT, Ops.CMP_GE, Ops.CMP_LT, Ops.CMP_LE})


def tidy(kernel: UOp) -> UOp:
    """The kernel simplified by the core simplifier (index arithmetic, constant gates dropped)."""
    from uopviz.core.symbolic import simplify

    simplified = simplify(kernel)
    mapping = {}
    for u in simplified.toposort():
        gate = u.src[2] if u.op in (Ops.LOAD, Ops.STORE) and len(u.src) == 3 else None
        if gate is not None and gate.op is Ops.CONST and gate.arg[0] is True:
            mapping[u] = UOp(u.op, u.src[:2] if u.op is Ops.STORE else u.src[:1], u.arg)
    return _substitute(simplified, mapping)


def _compact_slots(kernel: UOp, builder: _KernelBuilder) -> tuple[UOp, list[str]]:
    """The kernel with only the PARAMs it uses, numbered 0..n-1 (slot 0 stays the output)."""
    used = {u for u in kernel.toposort() if u.op is Ops.PARAM}
    names: list[str] = []
    mapping: dict[UOp, UOp] = {}
    for name in builder.names:
        param = builder.params[name]
        if param not in used and name != builder.names[0]:
            continue
        slot = len(names)
        names.append(name)
        if slot != param.arg.slot:
            arg = param.arg
            mapping[param] = UOp.param(slot, param.shape, arg.dtype, arg.device, arg.addrspace)
    return _substitute(kernel, mapping), names


def _gate_loads(value: UOp, gate: Any) -> UOp:
    """Every LOAD in ``value`` also gated by ``gate`` (an inverted index may point outside)."""
    if gate is True:
        return value
    mapping = {}
    for u in value.toposort():
        if u.op is Ops.LOAD:
            if len(u.src) == 1:
                mapping[u] = UOp(Ops.LOAD, (u.src[0], _const(u.dtype, 0), gate))
            else:
                mapping[u] = UOp(Ops.LOAD, (u.src[0], u.src[1], UOp(Ops.AND, (u.src[2], gate))))
    return _substitute(value, mapping)


def _gate_value(value: Any, gate: Any) -> Any:
    """``value`` (a UOp, a Python value or a pack of them) with its loads gated by ``gate``; the loads
    the gate itself makes (counters) stay as they are."""
    if isinstance(value, list):
        return [_gate_value(item, gate) for item in value]
    if not isinstance(value, UOp) or gate is True:
        return value
    own = {u for u in gate.toposort() if u.op is Ops.LOAD}
    mapping = {}
    for u in value.toposort():
        if u.op is Ops.LOAD and u not in own:
            alternative, condition = (
                (u.src[1], UOp(Ops.AND, (u.src[2], gate)))
                if len(u.src) == 3
                else (
                    _const(u.dtype, 0),
                    gate,
                )
            )
            mapping[u] = UOp(Ops.LOAD, (u.src[0], alternative, condition))
    return _substitute(value, mapping) if mapping else value


def _strip_cast(u: Any) -> Any:
    while isinstance(u, UOp) and u.op is Ops.CAST:
        u = u.src[0]
    return u


def _python_value(value: Any, dtype: DType) -> Any:
    if dtype.is_bool:
        return bool(value)
    if dtype.is_float:
        return float(value)
    return int(value)


def _substitute(value: Any, mapping: dict[UOp, UOp]) -> Any:
    from uopviz.core.rewrite import substitute

    if not isinstance(value, UOp) or not mapping:
        return value
    return substitute(value, mapping)


def _rebind_params(value: UOp, source: _KernelBuilder, target: _KernelBuilder) -> UOp:
    """``value`` built with ``source``'s PARAM slots, re-expressed with ``target``'s."""
    mapping = {}
    for name, param in source.params.items():
        if any(u is param for u in value.toposort()):
            found = target.params.get(name)
            if found is None:
                found = target.param(name, param.arg.dtype, param.shape[0])
            if found is not param:
                mapping[param] = found
    return _substitute(value, mapping)


def _unflatten(flat: UOp, shape: Sequence[int]) -> list[UOp]:
    out = []
    for axis, stride in enumerate(_strides(shape)):
        index = UOp(Ops.IDIV, (flat, _const(INDEX, stride))) if stride != 1 else flat
        out.append(index if axis == 0 else UOp(Ops.MOD, (index, _const(INDEX, shape[axis]))))
    return out


# the accumulation of each lowering operator: (REDUCE op, how values enter, how the result leaves)


def _identity(op: str, dtype: DType) -> UOp:
    if op == "+=":
        return _const(dtype, 0)
    if op == "*=":
        return _const(dtype, 1)
    if op == "&=":
        return _const(dtype, True)
    if op == "|=":
        return _const(dtype, False)
    if op == ">?=":
        return _const(dtype, dtype.min)
    if op == "<?=":
        return _const(dtype, dtype.max)
    raise NNEFError(f"'{op}' has no identity")


def _combine(op: str, a: UOp, b: UOp) -> UOp:
    a, b = _promote(a, b)
    if op == "+=":
        return a + b
    if op == "*=":
        return a * b
    if op == "&=":
        return UOp(Ops.AND, (a, b))
    if op == "|=":
        return UOp(Ops.OR, (a, b))
    if op == ">?=":
        return UOp(Ops.MAX, (a, b))
    if op == "<?=":
        return UOp(Ops.WHERE, (b < a, b, a))
    raise NNEFError(f"'{op}' is not an accumulation")


def _reduce(op: str, value: UOp, ranges: Sequence[UOp]) -> UOp:
    """REDUCE over ``ranges`` with the accumulation of ``op`` (MIN as a negated MAX, bools as ints)."""
    ranges = list(ranges)
    if not ranges:
        return value
    if op == "+=":
        return UOp(Ops.REDUCE, (value, *ranges), (Ops.ADD, ()))
    if op == "*=":
        return UOp(Ops.REDUCE, (value, *ranges), (Ops.MUL, ()))
    if op == ">?=":
        return UOp(Ops.REDUCE, (value, *ranges), (Ops.MAX, ()))
    if op == "<?=":
        return -UOp(Ops.REDUCE, (-value, *ranges), (Ops.MAX, ()))
    if op == "|=":
        as_int = value.cast(dtypes.int32)
        return UOp(Ops.REDUCE, (as_int, *ranges), (Ops.MAX, ())).ne(_const(dtypes.int32, 0))
    if op == "&=":
        missing = UOp(Ops.NOT, (value,)).cast(dtypes.int32)
        return UOp(Ops.REDUCE, (missing, *ranges), (Ops.MAX, ())).eq(_const(dtypes.int32, 0))
    raise NNEFError(f"'{op}' is not an accumulation")


# ------------------------------------------------------------------------------------------------
# the output space of a statement


class _OutputSpace:
    """How a statement's left side maps iteration points to output elements.

    After construction: ``mapping`` sends every provisional range to its final form (an output
    LOOP range, a REDUCE range or an expression of output ranges), ``store_gates`` hold the
    conditions under which a point is written, ``term_gates`` those that drop a term,
    ``reduce_ranges`` the REDUCE ranges, ``full`` whether every output element is written.
    """

    def __init__(self, lowering: _OperationLowering, evaluated: _Evaluated) -> None:
        self.lowering = lowering
        self.output = evaluated.output
        shape = evaluated.output.upper_shape
        self.mapping: dict[UOp, UOp] = {}
        self.store_gates: list[Any] = []
        self.term_gates: list[Any] = []
        self.indices: list[Any] = []
        self.pack_axis: int | None = None
        self.pack_positions: list[int] = []
        self.full = True
        outputs: list[UOp] = []
        lhs = evaluated.lhs
        usage: dict[UOp, int] = {}
        for item in lhs:
            for r in _ranges_in(item.index if isinstance(item, BoundedIndex) else item):
                usage[r] = usage.get(r, 0) + 1
        solved: dict[UOp, UOp] = {}
        number = itertools.count()
        for axis, (item, extent) in enumerate(zip(lhs, shape, strict=True)):
            guarded = isinstance(item, BoundedIndex)
            if guarded:
                if item.remaps:
                    raise lowering.error(
                        evaluated.statement, "a remapped index |i <> a : b| cannot be on the left side"
                    )
                item = item.index
            positions = _pack_positions(item, extent)
            if positions is not None:
                if self.pack_axis is not None:
                    raise lowering.error(
                        evaluated.statement, "only one packed dimension is allowed on the left side"
                    )
                self.pack_axis = axis
                self.pack_positions = positions
                self.full = self.full and positions == list(range(extent))
                self.indices.append(None)
                continue
            if isinstance(item, int) and not isinstance(item, bool):
                if not 0 <= item < extent:
                    raise lowering.error(
                        evaluated.statement, f"index {item} is out of range for the extent {extent}"
                    )
                self.indices.append(item)
                self.full = self.full and extent == 1
                continue
            if not isinstance(item, UOp):
                raise lowering.error(
                    evaluated.statement, f"an index of the left side must be an int, got {format_value(item)}"
                )
            item = _index(item)
            affine = _affine(item) if not any(r in solved for r in _ranges_in(item)) else None
            if affine is not None and not affine[0]:
                self.indices.append(affine[1])
                self.full = self.full and extent == 1
                continue
            own = None if affine is None else [r for r in affine[0] if usage.get(r) == 1 and r not in solved]
            exclusive = affine is not None and len(own) == len(affine[0])
            if exclusive and len(own) == 1 and affine[0][own[0]] == 1:
                r = own[0]
                final = UOp.range(_range_bound(r), AxisType.LOOP, next(number))
                solved[r] = final
                outputs.append(final)
                index = final + affine[1] if affine[1] else final
                self._bounds_gate(
                    index, extent, _range_bound(r) + affine[1] - 1, affine[1], guarded, evaluated
                )
                self.full = self.full and affine[1] == 0 and _range_bound(r) == extent
                self.indices.append(index)
                continue
            radix = _mixed_radix(affine) if exclusive else None
            if radix is not None:
                total = radix[-1][1] * _range_bound(radix[-1][0])
                final = UOp.range(total, AxisType.LOOP, next(number))
                for r, coefficient in radix:
                    solved[r] = _div_mod(final, coefficient, _range_bound(r))
                outputs.append(final)
                index = final + affine[1] if affine[1] else final
                self._bounds_gate(index, extent, total + affine[1] - 1, affine[1], guarded, evaluated)
                self.full = self.full and affine[1] == 0 and total == extent
                self.indices.append(index)
                continue
            final = UOp.range(extent, AxisType.LOOP, next(number))
            outputs.append(final)
            self.indices.append(final)
            candidates = list(own or []) if affine is not None else []
            if candidates:
                r = max(candidates, key=_range_bound)
                coefficient = affine[0][r]
                rest = _affine_uop({q: c for q, c in affine[0].items() if q is not r}, affine[1])
                numerator = final - rest
                if coefficient == 1:
                    recovered = numerator
                elif coefficient == -1:
                    recovered = -numerator
                else:
                    recovered = UOp(Ops.IDIV, (numerator, _const(INDEX, coefficient)))
                    self.term_gates.append(
                        UOp(Ops.MOD, (numerator, _const(INDEX, abs(coefficient)))).eq(_const(INDEX, 0))
                    )
                solved[r] = recovered
                self.term_gates.append(UOp(Ops.AND, (recovered >= 0, recovered < _range_bound(r))))
            else:
                self.term_gates.append(
                    item.eq(final)
                )  # a data-dependent or shared index must match the point
        self.reduce_ranges: list[UOp] = []
        number_reduce = itertools.count(len(outputs))
        for r in evaluated.ranges:
            if r not in solved:
                final = UOp.range(_range_bound(r), AxisType.REDUCE, next(number_reduce))
                solved[r] = final
                self.reduce_ranges.append(final)
        # solved expressions may mention ranges that are themselves replaced (reduce ranges in `rest`)
        self.mapping = _resolve(solved)
        self.term_gates = [self.apply(g) for g in self.term_gates]
        self.indices = [self.apply(i) for i in self.indices]
        self.outputs = outputs
        if self.term_gates and not self.reduce_ranges:
            self.store_gates.extend(self.term_gates)
            self.term_gates = []

    def _bounds_gate(
        self, index: UOp, extent: int, high: int, low: int, guarded: bool, evaluated: _Evaluated
    ) -> None:
        if low < 0 or high >= extent:
            if not guarded:
                raise self.lowering.error(
                    evaluated.statement,
                    f"an index of the left side runs from {low} to "
                    f"{high}, outside [0, {extent}); guard it with |...|",
                )
            self.store_gates.append(UOp(Ops.AND, (index >= 0, index < extent)))
            self.full = False

    def apply(self, value: Any) -> Any:
        """``value`` with the provisional ranges replaced by their final forms."""
        if isinstance(value, list):
            return [self.apply(v) for v in value]
        return _substitute(value, self.mapping) if isinstance(value, UOp) else value

    def apply_gate(self, gate: Any) -> Any:
        return self.apply(gate)

    def point_indices(self) -> list[Any]:
        """The index of each output dimension at the stored point (None for the ':' dimension)."""
        return list(self.indices)

    def pack_extent(self) -> int:
        return len(self.pack_positions) if self.pack_axis is not None else 1

    def flat(self, item: int | None) -> UOp:
        indices = [
            self.pack_positions[item] if axis == self.pack_axis else index
            for axis, index in enumerate(self.indices)
        ]
        return _flat(indices, self.output.upper_shape)


def _resolve(solved: dict[UOp, UOp]) -> dict[UOp, UOp]:
    """The mapping with every provisional range inside the values replaced too (to a fixed point)."""
    from uopviz.core.rewrite import substitute_closure

    return {r: substitute_closure(v, solved) for r, v in solved.items()}


def _pack_positions(item: Any, extent: int) -> list[int] | None:
    """The positions a packed index of the left side covers (``:`` or a static pack), else None."""
    if item is _ALL:
        return list(range(extent))
    if isinstance(item, tuple) and item and item[0] == "positions":
        positions = item[1]
        if not all(isinstance(p, int) and not isinstance(p, bool) and 0 <= p < extent for p in positions):
            raise NNEFError(
                f"a packed index of the left side must hold ints in [0, {extent}), got "
                f"{format_value(positions)}"
            )
        return list(positions)
    return None


def _mixed_radix(affine: tuple[dict[UOp, int], int]) -> list[tuple[UOp, int]] | None:
    """The ranges of an exact mixed-radix sum (coefficients 1, n0, n0*n1, ...), smallest first."""
    terms = sorted(affine[0].items(), key=lambda pair: pair[1])
    expected = 1
    for r, coefficient in terms:
        if coefficient != expected:
            return None
        expected *= _range_bound(r)
    return terms if len(terms) > 1 else None


def _div_mod(final: UOp, coefficient: int, bound: int) -> UOp:
    index = final if coefficient == 1 else UOp(Ops.IDIV, (final, _const(INDEX, coefficient)))
    return UOp(Ops.MOD, (index, _const(INDEX, bound)))


# ------------------------------------------------------------------------------------------------
# intrinsics


def _intrinsic_top_k(graph: Graph, op: Operation) -> list[LoweredKernel]:
    """top_k: each candidate's rank is the number of candidates that beat it (ties: lower index
    first); candidates ranked below k are scattered to their rank. Always sorted."""
    symbols = op.symbols
    data: TensorInfo = symbols["input"]
    k = op.attribs["k"]
    largest = op.attribs["largest"]
    outer, m, inner = symbols["s"], symbols["m"], symbols["t"]
    kept = min(k, m)
    kernels = []
    for output_name in ("values", "indices"):
        output = symbols[output_name]
        builder = _KernelBuilder(output, graph)
        outer_ranges = [UOp.range(e, AxisType.LOOP, n) for n, e in enumerate(outer)]
        candidate = UOp.range(m, AxisType.LOOP, len(outer))
        inner_ranges = [UOp.range(e, AxisType.LOOP, len(outer) + 1 + n) for n, e in enumerate(inner)]
        other = UOp.range(m, AxisType.REDUCE, len(outer) + 1 + len(inner))
        shape = data.upper_shape

        mine = builder.load(data, _flat([*outer_ranges, candidate, *inner_ranges], shape))
        theirs = builder.load(data, _flat([*outer_ranges, other, *inner_ranges], shape))
        beats = theirs > mine if largest else theirs < mine
        ties = UOp(Ops.AND, (theirs.eq(mine), other < candidate))
        rank = _reduce("+=", _where(UOp(Ops.OR, (beats, ties)), _const(INDEX, 1), _const(INDEX, 0)), [other])
        value = mine if output_name == "values" else candidate.cast(dtypes.int32)
        address = UOp(
            Ops.INDEX,
            (builder.param(output), _flat([*outer_ranges, rank, *inner_ranges], output.upper_shape)),
        )
        store = UOp(Ops.STORE, (address, value, rank < kept))
        kernels.append(
            LoweredKernel(
                f"{op.label}.{output_name}",
                tidy(UOp(Ops.SINK, (store,))),
                list(builder.names),
                op,
                note="rank by counting",
            )
        )
    return kernels


def _seed(op: Operation) -> int:
    return int.from_bytes(hashlib.sha256(op.label.encode()).digest()[:4], "little")


def _random_bits(position: UOp, op: Operation, stream: int = 0) -> UOp:
    """32 uniformly random bits per position (Threefry-2x32 keyed by the operation's label)."""
    counter = position.cast(dtypes.uint64) + _const(dtypes.uint64, stream << 32)
    key = _const(dtypes.uint64, _seed(op))
    bits = UOp(Ops.THREEFRY, (counter, key))
    return UOp(Ops.AND, (bits, _const(dtypes.uint64, 0xFFFFFFFF))).cast(dtypes.uint32)


def _uniform01(position: UOp, op: Operation, stream: int = 0) -> UOp:
    """A float in [0, 1) from the top 24 random bits."""
    bits = UOp(Ops.SHR, (_random_bits(position, op, stream), _const(dtypes.uint32, 8)))
    return bits.cast(dtypes.float32) * (1.0 / (1 << 24))


def _intrinsic_random(graph: Graph, op: Operation) -> list[LoweredKernel]:
    output: TensorInfo = op.symbols["output"]
    builder = _KernelBuilder(output, graph)
    size = max(math.prod(output.upper_shape), 1)
    position = UOp.range(size, AxisType.LOOP, 0)
    attribs = op.attribs
    if op.name == "uniform":
        low, high = attribs["min"], attribs["max"]
        value: UOp = _uniform01(position, op) * float(high - low) + float(low)
        if output.dtype == "int":
            value = _floor(value).cast(dtypes.int32)
    elif op.name == "normal":
        u1 = 1.0 - _uniform01(position, op, 0)  # (0, 1]: the log stays finite
        u2 = _uniform01(position, op, 1)
        radius = UOp(Ops.SQRT, (_log(u1) * -2.0,))
        value = radius * UOp(Ops.SIN, (u2 * (2 * math.pi) + math.pi / 2,)) * float(attribs["std"]) + float(
            attribs["mean"]
        )
    else:
        value = _uniform01(position, op) < float(attribs["prob"])
    store = UOp(
        Ops.STORE, (UOp(Ops.INDEX, (builder.param(output), position)), value.cast(uop_dtype(output.dtype)))
    )
    return [
        LoweredKernel(op.label, tidy(UOp(Ops.SINK, (store,))), list(builder.names), op, note="Threefry-2x32")
    ]


def _keys_weight(distance: UOp, a: float) -> UOp:
    """Keys' cubic convolution weight of a tap at ``distance`` (>= 0) from the sample point."""
    near = ((distance * (a + 2.0) - (a + 3.0)) * distance * distance) + 1.0
    far = ((distance * a - 5.0 * a) * distance + 8.0 * a) * distance - 4.0 * a
    return _where(distance <= 1.0, near, _where(distance < 2.0, far, _const(dtypes.float32, 0.0)))


def _clamp_index(index: UOp, extent: int | UOp) -> UOp:
    last = _const(INDEX, extent - 1) if isinstance(extent, int) else extent - 1
    return _where(index < 0, _const(INDEX, 0), _where(index >= extent, last, index))


def _reflect_index(index: UOp, extent: int | UOp) -> UOp:
    """``index`` mirrored about the border elements 0 and ``extent - 1`` as often as it takes:
    repeated reflections are periodic with period ``2 * (extent - 1)``, so ``|index|`` is folded
    into one period and its second half mirrored (an extent of 1 maps everything to 0). The spec's
    ``|i <> -i : 2 * (s - 1) - i|`` is one reflection and leaves far indices outside."""
    size = _index(extent)
    span = size * 2 - 2
    folded = UOp(Ops.MOD, (_abs(index), UOp(Ops.MAX, (span, _const(INDEX, 1)))))
    return _where(folded < size, folded, span - folded)


def _intrinsic_cubic_resize(graph: Graph, op: Operation) -> list[LoweredKernel]:
    """Cubic (Keys) resampling along ``axes``: 4 taps per axis, replicated border (input extents
    decided at run time are read from their counters)."""
    symbols = op.symbols
    data: TensorInfo = symbols["input"]
    output: TensorInfo = symbols["output"]
    shape = data.upper_shape
    axes = [a + len(shape) if a < 0 else a for a in op.attribs["axes"]]
    sizes = op.attribs["size"]
    transform = op.attribs["coordinate_transform"]
    a = float(op.attribs["coeff_a"])
    builder = _KernelBuilder(output, graph)
    out_ranges = [UOp.range(e, AxisType.LOOP, n) for n, e in enumerate(output.upper_shape)]
    taps = [UOp.range(4, AxisType.REDUCE, len(out_ranges) + n) for n in range(len(axes))]
    weight: UOp | None = None
    positions: list[UOp] = list(out_ranges)
    for axis, size, tap in zip(axes, sizes, taps, strict=True):
        extent = builder.extent(data.shape[axis])  # an int, or the counted extent
        length = float(extent) if isinstance(extent, int) else _float(extent)
        size = builder.extent(size)  # rescale's size of a counted extent is computed at run time
        count = float(size) if isinstance(size, int) else _float(size)
        if transform == "ALIGNED":
            stretch = (length - 1.0) / (count - 1.0) if isinstance(size, UOp) or size > 1 else 0.0
            scale = (
                stretch if isinstance(size, int) else _where(size <= 1, _const(dtypes.float32, 0.0), stretch)
            )
            offset = 0.0
        else:
            scale = length / count
            offset = 0.5 * scale - 0.5 if transform == "SYMMETRIC" else 0.0
        x = out_ranges[axis].cast(dtypes.float32) * scale + offset
        base = _floor(x)
        tap_f = tap.cast(dtypes.float32) - 1.0
        w = _keys_weight(_abs(x - (base + tap_f)), a)
        weight = w if weight is None else weight * w
        positions[axis] = _clamp_index((base + tap_f).cast(dtypes.int32).cast(INDEX), extent)
    value = _reduce("+=", builder.load(data, _flat(positions, shape)) * weight, taps)
    store = UOp(
        Ops.STORE, (UOp(Ops.INDEX, (builder.param(output), _flat(out_ranges, output.upper_shape))), value)
    )
    return [
        LoweredKernel(
            op.label, tidy(UOp(Ops.SINK, (store,))), list(builder.names), op, note="cubic (Keys) taps"
        )
    ]


GRID_SAMPLE_CUBIC_A = -0.75  # Keys' coefficient of bicubic grid sampling (the common choice)


def _intrinsic_cubic_grid_sample(graph: Graph, op: Operation) -> list[LoweredKernel]:
    """Cubic grid sampling, written as the spec writes ``_linear_grid_sample`` with 4 taps per axis
    instead of 2: the grid's last dimension holds the coordinates in reversed axis order (x first),
    mapped from [-1, 1] to pixels (``aligned``: the corner pixels' centres); taps ``floor(x) - 1 ..
    floor(x) + 2`` weighted by Keys' kernel (a = -0.75). Taps outside the input are zero (``ZEROS``),
    the nearest border pixel (``REPLICATE``) or mirrored about the border pixels as often as it takes
    (``REFLECT``, period ``2 * (s - 1)``, as the stdlib's ``_linear_grid_sample`` writes it). Input
    extents decided at run time are read from their counters."""
    symbols = op.symbols
    data: TensorInfo = symbols["input"]
    grid: TensorInfo = symbols["grid"]
    output: TensorInfo = symbols["output"]
    padding, aligned = op.attribs["padding"], op.attribs["aligned"]
    shape = data.upper_shape
    d = len(shape) - 2
    builder = _KernelBuilder(output, graph)
    out_ranges = [UOp.range(e, AxisType.LOOP, n) for n, e in enumerate(output.upper_shape)]
    batch, channel, points = out_ranges[0], out_ranges[1], out_ranges[2:]
    taps = [UOp.range(4, AxisType.REDUCE, len(out_ranges) + n) for n in range(d)]
    weight: Any = True
    gates: list[Any] = []
    positions: list[UOp] = []
    for axis, tap in enumerate(taps):
        extent = builder.extent(data.shape[2 + axis])  # an int, or the counted extent
        size = float(extent) if isinstance(extent, int) else _float(extent)
        coordinate = builder.load(grid, _flat([batch, *points, d - 1 - axis], grid.upper_shape))
        g = (coordinate + 1.0) * 0.5
        x = g * (size - 1.0) if aligned else g * size - 0.5
        tap_f = _floor(x) + (tap.cast(dtypes.float32) - 1.0)
        w = _keys_weight(_abs(x - tap_f), GRID_SAMPLE_CUBIC_A)
        weight = w if weight is True else weight * w
        index = tap_f.cast(dtypes.int32).cast(INDEX)
        if padding == "ZEROS":
            gates.append(UOp(Ops.AND, (index >= 0, index < extent)))
            positions.append(index)
            continue
        if padding == "REFLECT":
            index = _reflect_index(index, extent)
        positions.append(_clamp_index(index, extent))
    sample = builder.load(data, _flat([batch, channel, *positions], shape), _and(gates))
    value = _reduce("+=", sample * weight, taps)
    store = UOp(
        Ops.STORE, (UOp(Ops.INDEX, (builder.param(output), _flat(out_ranges, output.upper_shape))), value)
    )
    return [
        LoweredKernel(
            op.label, tidy(UOp(Ops.SINK, (store,))), list(builder.names), op, note="Keys cubic taps"
        )
    ]


def _intrinsic_runtime_scalar(graph: Graph, op: Operation) -> list[LoweredKernel]:
    """A rank-0 tensor computed from the counters of run-time extents (a ``RuntimeScalarOperation``)."""
    output = graph.tensors[op.outputs[0]]
    builder = _KernelBuilder(output, graph)
    dtype = uop_dtype(output.dtype)
    value = runtime_value(graph, op.attribs["value"], builder._counter)
    stored = as_uop(value, dtype) if isinstance(value, UOp) else _const(dtype, _python_value(value, dtype))
    store = UOp(Ops.STORE, (UOp(Ops.INDEX, (builder.param(output), _const(INDEX, 0))), stored))
    return [
        LoweredKernel(
            op.label, tidy(UOp(Ops.SINK, (store,))), list(builder.names), op, note=repr(op.attribs["value"])
        )
    ]


def _round_half_away(x: UOp) -> UOp:
    return _trunc(x + _where(x < 0.0, _const(dtypes.float32, -0.5), _const(dtypes.float32, 0.5)))


def _intrinsic_roi_pool(graph: Graph, op: Operation) -> list[LoweredKernel]:
    """Max / average pooling of regions of interest (the spec declares the operators only).

    Row ``r`` of ``rois`` is ``[start_0, .., start_{d-1}, end_0, .., end_{d-1}]`` in input element
    coordinates along the spatial axes (in their order), both corners inclusive after rounding
    half away from zero; ``index[r]`` is the batch item it is cut from. A region of extent
    ``e = max(end - start + 1, 1)`` is split into ``o = output_size`` bins of ``e / o`` elements: bin
    ``p`` covers ``[start + floor(p * e / o), start + ceil((p + 1) * e / o))`` (exact integer
    arithmetic), clipped to the input. ``max_roi_pool`` takes each bin's maximum, ``avg_roi_pool``
    its mean; an empty bin (or an index outside the batch) gives 0. A bin's extent depends on the
    data, so the kernel reduces over the whole spatial extent, gated by the bin's bounds.
    """
    symbols = op.symbols
    data: TensorInfo = symbols["input"]
    rois: TensorInfo = symbols["rois"]
    index: TensorInfo = symbols["index"]
    output: TensorInfo = symbols["output"]
    sizes = list(op.attribs["output_size"])
    shape = data.upper_shape
    spatial = list(shape[2:])
    d = len(spatial)
    builder = _KernelBuilder(output, graph)
    out_ranges = [UOp.range(e, AxisType.LOOP, n) for n, e in enumerate(output.upper_shape)]
    roi, channel, bins = out_ranges[0], out_ranges[1], out_ranges[2:]
    window = [UOp.range(e, AxisType.REDUCE, len(out_ranges) + n) for n, e in enumerate(spatial)]
    item = builder.load(index, roi).cast(INDEX)
    inside = [UOp(Ops.AND, (item >= 0, item < shape[0]))]
    count: UOp = _const(INDEX, 1)
    for axis, (extent, size, p, t) in enumerate(zip(spatial, sizes, bins, window, strict=True)):
        start = _round_half_away(builder.load(rois, _flat([roi, axis], rois.upper_shape))).cast(dtypes.int32)
        end = _round_half_away(builder.load(rois, _flat([roi, d + axis], rois.upper_shape))).cast(
            dtypes.int32
        )
        length = UOp(Ops.MAX, (end - start + 1, _const(dtypes.int32, 1))).cast(INDEX)
        first = start.cast(INDEX)  # bin bounds in integers: floor(p e / o) and ceil((p + 1) e / o)
        low = first + UOp(Ops.IDIV, (p * length, _const(INDEX, size)))
        high = first + UOp(Ops.IDIV, ((p + 1) * length + (size - 1), _const(INDEX, size)))
        low = UOp(Ops.MAX, (low, _const(INDEX, 0)))
        high = _where(high > extent, _const(INDEX, extent), high)
        inside.append(UOp(Ops.AND, (t >= low, t < high)))
        count = count * UOp(Ops.MAX, (high - low, _const(INDEX, 0)))
    gate = _and(inside)
    sample = builder.load(data, _flat([item, channel, *window], shape), gate)
    empty = UOp(Ops.OR, (count <= 0, _not(_and(inside[:1]))))
    zero = _const(dtypes.float32, 0.0)
    if op.name == "max_roi_pool":
        value = _where(
            empty, zero, _reduce(">?=", _where(gate, sample, _const(dtypes.float32, -math.inf)), window)
        )
    else:
        total = _reduce("+=", _where(gate, sample, zero), window)
        value = _where(empty, zero, total / UOp(Ops.MAX, (count, _const(INDEX, 1))).cast(dtypes.float32))
    store = UOp(
        Ops.STORE, (UOp(Ops.INDEX, (builder.param(output), _flat(out_ranges, output.upper_shape))), value)
    )
    return [
        LoweredKernel(op.label, tidy(UOp(Ops.SINK, (store,))), list(builder.names), op, note="bins gated")
    ]


def _kernel(
    op: Operation,
    name: str,
    output: TensorInfo | str,
    stores: Callable[[_KernelBuilder], list[UOp]],
    graph: Graph,
    scratch: dict[str, tuple[DType, int]],
    note: str = "",
) -> LoweredKernel:
    """A hand-written kernel: ``stores(builder)`` builds its STOREs (``output``: a tensor or scratch)."""
    if isinstance(output, str):
        dtype, size = scratch[output]
        target = TensorInfo(
            output, {dtypes.int32: "int", dtypes.float32: "real", dtypes.bool: "bool"}[dtype], (size,)
        )
    else:
        target = output
    builder = _KernelBuilder(target, graph)
    kernel, names = _compact_slots(tidy(UOp(Ops.SINK, tuple(stores(builder)))), builder)
    used = {name: spec for name, spec in scratch.items() if name in names}
    return LoweredKernel(name, kernel, names, op, used, note)


def _box_corners(builder: _KernelBuilder, boxes: TensorInfo, batch: UOp, box: UOp, center: bool) -> list[UOp]:
    """(y1, x1, y2, x2) of a box, ordered (NNEF/ONNX allow either corner first)."""
    values = [builder.load(boxes, _flat([batch, box, _const(INDEX, k)], boxes.upper_shape)) for k in range(4)]
    if center:
        x, y, w, h = values
        return [y - h * 0.5, x - w * 0.5, y + h * 0.5, x + w * 0.5]
    a, b, c, d = values
    lo = lambda p, q: UOp(Ops.WHERE, (p < q, p, q))  # noqa: E731
    return [lo(a, c), lo(b, d), UOp(Ops.MAX, (a, c)), UOp(Ops.MAX, (b, d))]


def _iou(first: list[UOp], second: list[UOp]) -> UOp:
    zero = _const(dtypes.float32, 0.0)
    lo = lambda p, q: UOp(Ops.WHERE, (p < q, p, q))  # noqa: E731
    height = UOp(Ops.MAX, (lo(first[2], second[2]) - UOp(Ops.MAX, (first[0], second[0])), zero))
    width = UOp(Ops.MAX, (lo(first[3], second[3]) - UOp(Ops.MAX, (first[1], second[1])), zero))
    inter = height * width
    area = lambda c: (c[2] - c[0]) * (c[3] - c[1])  # noqa: E731
    union = area(first) + area(second) - inter
    return UOp(
        Ops.WHERE,
        (union > 0.0, inter / UOp(Ops.WHERE, (union > 0.0, union, _const(dtypes.float32, 1.0))), zero),
    )


def _intrinsic_nms(graph: Graph, op: Operation) -> list[LoweredKernel]:
    """Non-maximum suppression, greedy in descending score order per batch item and class.

    A box's status is decided in rounds (undecided 0, kept 1, removed 2): a box is removed once a
    higher-ranked box that overlaps it (IoU > threshold) is kept, and kept once every such box is
    removed. Each round decides at least the best undecided box, so ``n`` rounds (the same kernel,
    ping-ponging two status buffers) settle all. Kept boxes, at most ``max_outputs_per_class`` per
    class, are then counted and scattered as (batch, class, box) rows in batch, class, score order.
    """
    symbols = op.symbols
    boxes: TensorInfo = symbols["boxes"]
    scores: TensorInfo = symbols["scores"]
    output: TensorInfo = symbols["indices"]
    batches, classes, n = symbols["b"], symbols["c"], symbols["n"]
    limit = int(op.attribs["max_outputs_per_class"])
    threshold = float(op.attribs["iou_threshold"])
    minimum = op.attribs["score_threshold"]
    center = op.attribs["box_format"] == "CENTER"
    groups = batches * classes
    label = op.label
    rank, total, counts = f"{label}#rank", f"{label}#count", f"{label}#per_class"
    status = [f"{label}#status0", f"{label}#status1"]
    scratch = {
        rank: (dtypes.int32, groups * n),
        status[0]: (dtypes.int32, groups * n),
        status[1]: (dtypes.int32, groups * n),
        counts: (dtypes.int32, groups),
        total: (dtypes.int32, 1),
    }
    one, zero = _const(dtypes.int32, 1), _const(dtypes.int32, 0)
    kernels = []

    def ranges() -> tuple[UOp, UOp, UOp, UOp]:
        group = UOp.range(groups, AxisType.LOOP, 0)
        box = UOp.range(n, AxisType.LOOP, 1)
        return (
            group,
            box,
            UOp(Ops.IDIV, (group, _const(INDEX, classes))),
            UOp(Ops.MOD, (group, _const(INDEX, classes))),
        )

    def score(builder: _KernelBuilder, batch: UOp, cls: UOp, box: UOp) -> UOp:
        return builder.load(scores, _flat([batch, cls, box], scores.upper_shape))

    def rank_stores(builder: _KernelBuilder) -> list[UOp]:
        group, box, batch, cls = ranges()
        other = UOp.range(n, AxisType.REDUCE, 2)
        mine, theirs = score(builder, batch, cls, box), score(builder, batch, cls, other)
        ahead = UOp(Ops.OR, (theirs > mine, UOp(Ops.AND, (theirs.eq(mine), other < box))))
        value = _reduce("+=", _where(ahead, one, zero), [other])
        return [
            UOp(
                Ops.STORE,
                (UOp(Ops.INDEX, (builder.param(rank, dtypes.int32, groups * n), group * n + box)), value),
            )
        ]

    def init_stores(builder: _KernelBuilder) -> list[UOp]:
        group, box, batch, cls = ranges()
        valid = score(builder, batch, cls, box) > float(minimum) if minimum is not None else True
        value = _where(valid, zero, _const(dtypes.int32, 2))
        address = UOp(Ops.INDEX, (builder.param(status[0], dtypes.int32, groups * n), group * n + box))
        return [UOp(Ops.STORE, (address, as_uop(value, dtypes.int32)))]

    def round_stores(source: str, target: str) -> Callable[[_KernelBuilder], list[UOp]]:
        def stores(builder: _KernelBuilder) -> list[UOp]:
            out = builder.param(target, dtypes.int32, groups * n)
            group, box, batch, cls = ranges()
            other = UOp.range(n, AxisType.REDUCE, 2)
            current = builder.load(source, group * n + box, True, dtypes.int32, groups * n)
            their_state = builder.load(source, group * n + other, True, dtypes.int32, groups * n)
            my_rank = builder.load(rank, group * n + box, True, dtypes.int32, groups * n)
            their_rank = builder.load(rank, group * n + other, True, dtypes.int32, groups * n)
            overlap = (
                _iou(
                    _box_corners(builder, boxes, batch, box, center),
                    _box_corners(builder, boxes, batch, other, center),
                )
                > threshold
            )
            suppressor = UOp(Ops.AND, (their_rank < my_rank, overlap))
            # 2: a kept box suppresses me, 1: an undecided one might, 0: nothing stands in the way
            verdict = _where(
                suppressor,
                _where(their_state.eq(one), _const(dtypes.int32, 2), _where(their_state.eq(zero), one, zero)),
                zero,
            )
            worst = _reduce(">?=", verdict, [other])
            decided = _where(
                worst.eq(_const(dtypes.int32, 2)), _const(dtypes.int32, 2), _where(worst.eq(one), zero, one)
            )
            value = _where(current.eq(zero), decided, current)
            return [UOp(Ops.STORE, (UOp(Ops.INDEX, (out, group * n + box)), value))]

        return stores

    kernels.append(_kernel(op, f"{label}.rank", rank, rank_stores, graph, scratch, "rank by score"))
    kernels.append(_kernel(op, f"{label}.status", status[0], init_stores, graph, scratch, "score threshold"))
    for number in range(n):
        source, target = status[number % 2], status[(number + 1) % 2]
        kernels.append(
            _kernel(
                op,
                f"{label}.round{number}",
                target,
                round_stores(source, target),
                graph,
                scratch,
                "decide boxes",
            )
        )
    final = status[n % 2]

    def kept(builder: _KernelBuilder, group: UOp, box: UOp) -> UOp:
        return builder.load(final, group * n + box, True, dtypes.int32, groups * n).eq(one)

    def count_stores(builder: _KernelBuilder) -> list[UOp]:
        group = UOp.range(groups, AxisType.LOOP, 0)
        box = UOp.range(n, AxisType.REDUCE, 1)
        value = _reduce("+=", _where(kept(builder, group, box), one, zero), [box])
        capped = _where(value < limit, value, _const(dtypes.int32, limit))
        return [
            UOp(Ops.STORE, (UOp(Ops.INDEX, (builder.param(counts, dtypes.int32, groups), group)), capped))
        ]

    def total_stores(builder: _KernelBuilder) -> list[UOp]:
        group = UOp.range(groups, AxisType.REDUCE, 0)
        value = _reduce("+=", builder.load(counts, group, True, dtypes.int32, groups), [group])
        return [
            UOp(Ops.STORE, (UOp(Ops.INDEX, (builder.param(total, dtypes.int32, 1), _const(INDEX, 0))), value))
        ]

    def clear_stores(builder: _KernelBuilder) -> list[UOp]:
        position = UOp.range(max(math.prod(output.upper_shape), 1), AxisType.LOOP, 0)
        return [UOp(Ops.STORE, (UOp(Ops.INDEX, (builder.param(output), position)), zero))]

    def scatter_stores(builder: _KernelBuilder) -> list[UOp]:
        group, box, batch, cls = ranges()
        other = UOp.range(n, AxisType.REDUCE, 2)
        before = UOp.range(groups, AxisType.REDUCE, 3)
        my_rank = builder.load(rank, group * n + box, True, dtypes.int32, groups * n)
        their_rank = builder.load(rank, group * n + other, True, dtypes.int32, groups * n)
        order = _reduce(
            "+=",
            _where(UOp(Ops.AND, (kept(builder, group, other), their_rank < my_rank)), one, zero),
            [other],
        )
        base = _reduce(
            "+=",
            _where(before < group, builder.load(counts, before, True, dtypes.int32, groups), zero),
            [before],
        )
        gate = UOp(Ops.AND, (kept(builder, group, box), order < limit))
        row = (base + order).cast(INDEX)
        values = [batch.cast(dtypes.int32), cls.cast(dtypes.int32), box.cast(dtypes.int32)]
        return [
            UOp(Ops.STORE, (UOp(Ops.INDEX, (builder.param(output), row * 3 + column)), value, gate))
            for column, value in enumerate(values)
        ]

    kernels.append(_kernel(op, f"{label}.per_class", counts, count_stores, graph, scratch, "kept per class"))
    kernels.append(_kernel(op, f"{label}.count", total, total_stores, graph, scratch, "output count"))
    kernels.append(_kernel(op, f"{label}.clear", output, clear_stores, graph, scratch))
    kernels.append(_kernel(op, f"{label}.scatter", output, scatter_stores, graph, scratch, "rows in order"))
    graph.counts[output.shape[0].key] = total
    return kernels


_INTRINSICS: dict[str, Callable[[Graph, Operation], list[LoweredKernel]]] = {
    "algo.top_k": _intrinsic_top_k,
    "rand.uniform": _intrinsic_random,
    "rand.normal": _intrinsic_random,
    "rand.bernoulli": _intrinsic_random,
    "image.cubic_resize": _intrinsic_cubic_resize,
    "image._cubic_grid_sample": _intrinsic_cubic_grid_sample,
    "image.max_roi_pool": _intrinsic_roi_pool,
    "image.avg_roi_pool": _intrinsic_roi_pool,
    "algo.nonmax_suppress": _intrinsic_nms,
    "runtime.scalar": _intrinsic_runtime_scalar,
}


# ------------------------------------------------------------------------------------------------
# entry points


def lower_operation(graph: Graph, op: Operation) -> list[LoweredKernel]:
    """The kernels of one operation of ``graph`` (none for a loop node: its body and condition are
    graphs of their own)."""
    if isinstance(op, LoopOperation):
        graph.counts.update(op.counted)  # extents of its results that the runner counts
        return []
    signature = _lowering_signature(graph, op)
    templates = graph.__dict__.setdefault("_lowering_templates", {})
    if signature is not None and signature in templates:
        reused = _renamed_kernels(*templates[signature], op)
        if reused is not None:
            return reused
    busy = graph.__dict__.setdefault("_lowering_now", set())  # see _counter_of
    busy.add(id(op))
    try:
        kernels = _lower_one(graph, op)
    finally:
        busy.discard(id(op))
    if signature is not None:
        templates[signature] = (op, kernels)
    return kernels


def _lowering_signature(graph: Graph, op: Operation) -> tuple | None:
    """What the kernels of ``op`` depend on besides its tensors' names: its operator, attributes and
    types, and each tensor's type, shape, kind and (for a constant of one repeated value, which the
    kernels read as a literal) value.  Operations with equal signatures lower to the same kernel
    ASTs (a ResNet's repeated blocks), so one is lowered and the others renamed.  None where the
    names or the data matter: intrinsics, run-time extents."""
    if op.is_intrinsic or graph.counts or graph.extent_inputs:
        return None
    names = [*op.input_names(), *op.output_names()]
    tensors: list[Any] = [tuple(names.index(name) for name in names)]  # which tensors are one
    for name in names:
        tensor = graph.tensors.get(name)
        if tensor is None or not tensor.is_static:
            return None
        tensors.append((tensor.dtype, tuple(tensor.shape), tensor.kind, repr(_uniform_constant(tensor))))
    structure = repr((_shape_of_names(op.inputs), _shape_of_names(op.outputs), sorted(op.constants)))
    types = repr(sorted(op.dtypes.items()))
    return (op.type, id(op.definition), _exact(op.attribs), types, structure, *tensors)


def _exact(value: Any) -> Any:
    """A hashable form of an attribute value that tells every two values apart (numpy's repr
    elides the middle of a long array)."""
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, dict):
        return tuple((key, _exact(item)) for key, item in value.items())
    if isinstance(value, list | tuple):
        return (type(value).__name__, *(_exact(item) for item in value))
    return repr(value)


def _shape_of_names(values: Any) -> Any:
    """A pack structure with its names left out (None stays None)."""
    if isinstance(values, list | tuple):
        return [_shape_of_names(value) for value in values]
    return None if values is None else ""


def _renamed_kernels(
    template: Operation, kernels: list[LoweredKernel], op: Operation
) -> list[LoweredKernel] | None:
    """The kernels lowered for ``template`` as those of ``op`` (same signature): buffers and names
    renamed; None when a kernel uses a buffer that is not one of the operation's tensors."""
    names = dict(
        zip(
            [*template.input_names(), *template.output_names()],
            [*op.input_names(), *op.output_names()],
            strict=True,
        )
    )
    out = []
    for kernel in kernels:
        if kernel.scratch or any(name not in names for name in kernel.buffers):
            return None
        if kernel.name == template.label:
            name = op.label
        elif kernel.name.startswith(template.label + "."):
            name = op.label + kernel.name[len(template.label) :]
        else:
            return None
        buffers = [names[buffer] for buffer in kernel.buffers]
        out.append(LoweredKernel(name, kernel.ast, buffers, op, note=kernel.note))
    return out


def _lower_one(graph: Graph, op: Operation) -> list[LoweredKernel]:
    if op.is_intrinsic:
        handler = _INTRINSICS.get(op.type)
        if handler is None:
            raise NNEFError.at(
                op.position,
                f"uopviz has no kernel for the intrinsic operator {op.type} "
                f"(intrinsics with kernels: {', '.join(sorted(_INTRINSICS))})",
            )
        _check_intrinsic_extents(graph, op)
        return handler(graph, op)
    return _OperationLowering(graph, op).lower()


# built-in kernels that read the actual value of their inputs' run-time extents
_INTRINSICS_READING_EXTENTS = frozenset({"image._cubic_grid_sample", "image.cubic_resize", "runtime.scalar"})


def _check_intrinsic_extents(graph: Graph, op: Operation) -> None:
    """The built-in kernels run over the upper bounds of their inputs: a data-dependent extent may
    only pass through to an output (rows past the count are never read), not be read across,
    except by the kernels that read the extents themselves."""
    if op.type in _INTRINSICS_READING_EXTENTS:
        return
    passed = {
        e for name in op.output_names() for e in graph.tensors[name].shape if isinstance(e, DynamicExtent)
    }
    for name in op.input_names():
        tensor = graph.tensors.get(name)
        for extent in tensor.shape if tensor is not None else ():
            if (
                isinstance(extent, DynamicExtent)
                and extent not in passed
                and runtime_extent(graph, extent, lambda _: _const(dtypes.int32, 0)) is not None
            ):
                raise NNEFError.at(
                    op.position,
                    f"{op.type} '{op.label}' reads '{name}', whose extent {extent!r} is decided by the data "
                    f"at run time; the built-in kernel of {op.type} needs it fixed (it may only carry "
                    f"through to the output)",
                )


def operation_kernels(graph: Graph, op: Operation, backend: str = "python") -> list:
    """The kernels of ``op`` as pipeline :class:`~uopviz.passes.kernel.Kernel` objects (tunable); for
    a loop node, those of its body and condition (nested loops included), in program order."""
    from uopviz.passes.kernel import Kernel

    if isinstance(op, LoopOperation):
        return [
            kernel
            for sub in op.subgraphs.values()
            for inner in sub.operations
            for kernel in operation_kernels(sub, inner, backend)
        ]
    return [Kernel(kernel.ast, backend, name_hint=kernel.name) for kernel in graph.lower(op)]


def kernel_count(graph: Graph) -> int:
    """How many kernels ``g.compile()`` gives, loop bodies and conditions (nested ones too) included:
    the length of ``program.kernels``, whose order is the numbering of per-kernel opts."""
    total = 0
    for op in graph.operations:
        if isinstance(op, LoopOperation):
            total += sum(kernel_count(sub) for sub in op.subgraphs.values())
        else:
            total += len(graph.lower(op))
    return total


# ------------------------------------------------------------------------------------------------
# the whole graph: programs for the pipeline, run step by step


def _lower_all(graph: Graph, progress: Callable[[int, int, Operation], None] | None) -> list[LoweredKernel]:
    kernels: list[LoweredKernel] = []
    total = len(graph.operations)
    for index, op in enumerate(graph.operations):
        if progress is not None:
            progress(index, total, op)
        kernels.extend(graph.lower(op))
    if progress is not None:
        progress(total, total, None)
    return kernels


def _buffer_spec(graph: Graph, kernels: list[LoweredKernel], name: str) -> tuple[DType, int]:
    if name in graph.extent_inputs or name in graph.counts.values():
        return dtypes.int32, 1  # the counter of a run-time extent
    tensor = graph.tensors.get(name)
    if tensor is not None:
        return uop_dtype(tensor.dtype), max(math.prod(tensor.upper_shape), 1)
    for kernel in kernels:
        if name in kernel.scratch:
            return kernel.scratch[name]
    raise NNEFError(f"kernel buffer '{name}' is neither a tensor of the graph nor a scratch buffer")


def _steps(graph: Graph) -> list[list[Operation] | LoopOperation]:
    """The operations in run order: runs of kernel operations, with the loop nodes between them."""
    steps: list[list[Operation] | LoopOperation] = []
    for op in graph.operations:
        if isinstance(op, LoopOperation):
            steps.append(op)
        elif steps and isinstance(steps[-1], list):
            steps[-1].append(op)
        else:
            steps.append([op])
    return steps


def _step_reads(graph: Graph, step: list[Operation] | LoopOperation) -> set[str]:
    if isinstance(step, LoopOperation):
        return set(step.input_names())
    return {name for op in step for kernel in graph.lower(op) for name in kernel.buffers}


def _per_kernel_list(opts: Any) -> bool:
    """Whether ``opts`` is a sequence with one entry per kernel (not one list of Opt for all)."""
    from uopviz.passes.kernel import Opt

    return isinstance(opts, list | tuple) and bool(opts) and not all(isinstance(item, Opt) for item in opts)


def _segment_opts(opts: Any, offset: int, count: int) -> Any:
    """The opts of kernels ``offset .. offset + count`` of the graph (per-kernel choices re-indexed;
    choices by kernel name, one choice for every kernel and tuning records pass as they are)."""
    if isinstance(opts, dict):
        return {
            (key - offset if isinstance(key, int) else key): value
            for key, value in opts.items()
            if not isinstance(key, int) or offset <= key < offset + count
        }
    if _per_kernel_list(opts):
        return list(opts[offset : offset + count])
    return opts


def _loop_opts(opts: Any, offset: int, loop: LoopOperation) -> tuple[dict[str, Any], int]:
    """The opts a loop's body and condition compile with: per-kernel choices numbered as in
    ``program.kernels`` (the body's kernels after those before the loop, then the condition's), and
    the offset after them."""
    chosen: dict[str, Any] = {}
    for role, sub in loop.subgraphs.items():
        count = kernel_count(sub)
        chosen[role] = _segment_opts(opts, offset, count)
        offset += count
    return chosen, offset


def _compile_segment(
    graph: Graph,
    kernels: list[LoweredKernel],
    every_kernel: list[LoweredKernel],
    needed: set[str],
    backend: str,
    opts: Any,
    first_inputs: Sequence[str] = (),
):
    """One run of kernels as a pipeline Program (``compile_kernels``): its inputs are what it reads
    and does not write, its outputs what it writes and ``needed`` names."""
    from uopviz.core.rewrite import traced_pass
    from uopviz.engine.program import compile_kernels

    storage: dict[str, UOp] = {}

    def buffer(name: str) -> UOp:
        found = storage.get(name)
        if found is None:
            dtype, size = _buffer_spec(graph, every_kernel, name)
            found = storage[name] = UOp.buffer(size, dtype, "CPU")
        return found

    written = {kernel.buffers[0] for kernel in kernels}
    input_names = list(
        dict.fromkeys([*first_inputs, *(n for k in kernels for n in k.buffers if n not in written)])
    )
    output_names = [name for name in dict.fromkeys(k.buffers[0] for k in kernels) if name in needed]

    def front_end(program: Any) -> None:
        # the NNEF composition stands for Callify, the @lower formulas for Rangeify: one step per kernel
        function = program.graph
        with traced_pass("Callify", None) as record:
            record.step(
                f"compose NNEF graph {graph.name} ({len(graph.operations)} operations)",
                UOp(Ops.SINK, ()),
                function,
                function,
                location=str(graph.definition.pos if graph.definition else ""),
            )
            record.output = function
        with traced_pass("Rangeify", function) as record:
            for kernel in kernels:
                op = kernel.operation
                folded = "".join(f"{inner.type} '{inner.label}' + " for inner in kernel.fused)
                record.step(
                    f"@lower {folded}{op.type} '{op.label}' -> kernel {kernel.name}",
                    UOp(Ops.SINK, ()),
                    kernel.ast,
                    function,
                    location=f"{op.definition.pos.file}:{op.definition.pos.line}",
                )
            record.output = function

    program = compile_kernels(
        [(kernel.name, kernel.ast, [buffer(name) for name in kernel.buffers]) for kernel in kernels],
        [buffer(name) for name in input_names],
        [buffer(name) for name in output_names],
        backend=backend,
        opts=opts,
        front_end=front_end,
    )
    program.nnef_inputs = input_names
    program.nnef_outputs = output_names
    program.nnef_kernels = kernels
    return program


class GraphProgram:
    """What ``g.compile()`` gives for a graph with loop nodes (or with no kernels at all).

    Its ``steps`` run in order: ``("kernels", Program)`` for each run of kernel operations (a
    pipeline Program of their own), ``("loop", LoopOperation)`` for a loop node, which the runner
    executes on the host with the programs of its body and condition. It reads like a Program for
    viewers: ``kernels``, ``items`` and ``sources`` of every program (loop bodies included, in
    order) and the ``trace`` of their lowering. ``run(inputs)`` runs the graph: inputs and outputs
    by name, as ``g.run``.
    """

    def __init__(
        self,
        graph: Graph,
        backend: str,
        opts: Any,
        steps: list[tuple[str, Any]],
        trace: Any,
        loop_opts: dict[int, dict[str, Any]] | None = None,
    ) -> None:
        self.graph = graph
        self.backend = backend
        self.opts = opts
        self.nnef_steps = steps
        self.nnef_loop_opts = loop_opts or {}  # id(loop) -> role -> the opts its sub-graph compiles with
        self.trace = trace

    def __repr__(self) -> str:
        loops = sum(1 for kind, _ in self.nnef_steps if kind == "loop")
        return (
            f"<GraphProgram {self.graph.name}: {len(self.items)} kernels, {loops} loop(s) on {self.backend}>"
        )

    def _programs(self) -> list[Any]:
        out = []
        for kind, step in self.nnef_steps:
            if kind == "kernels":
                out.append(step)
            else:
                chosen = self.nnef_loop_opts[id(step)]
                for role, sub in step.subgraphs.items():
                    compiled = sub.compile(self.backend, chosen[role])
                    out.extend(compiled._programs() if isinstance(compiled, GraphProgram) else [compiled])
        return out

    @property
    def items(self) -> list:
        """Every kernel launch of every program, in program order."""
        return [item for program in self._programs() for item in program.items]

    @property
    def kernels(self) -> list:
        """Every kernel (loop bodies and conditions included)."""
        return [kernel for program in self._programs() for kernel in program.kernels]

    @property
    def sources(self) -> list[str]:
        """The rendered source of every kernel."""
        return [source for program in self._programs() for source in program.sources]

    def run(self, inputs: Mapping[str, Any] | None = None) -> dict[str, np.ndarray]:
        """Run the graph on ``inputs`` (names -> arrays): the outputs by name."""
        return run_graph(self.graph, dict(inputs or {}), self.backend, self.opts)


def compile_graph(
    graph: Graph,
    backend: str = "python",
    opts: Any = None,
    progress: Callable[[int, int, Operation | None], None] | None = None,
    fuse: bool | None = None,
):
    """Lower every operation of ``graph`` and compile its kernels with the pipeline.

    A graph without loop nodes becomes one pipeline ``Program``: its inputs are the graph's inputs,
    variables and constants (in that order of first use), its outputs the graph's outputs, the
    counters of data-dependent extents and the tensors ``@update`` assigns;
    ``program.nnef_inputs`` / ``program.nnef_outputs`` name them. A graph with loop nodes becomes a
    :class:`GraphProgram`: one Program per run of kernel operations between them, each loop's body
    and condition compiled as graphs of their own. ``progress(done, total, op)`` is called while
    lowering.

    ``opts`` as for the pipeline's ``compile``; choices per kernel (a dict by index, one entry per
    kernel) number the kernels as ``program.kernels`` lists them: in run order, each loop's body and
    then condition kernels (nested loops included) where the loop runs. Choices by kernel name reach
    the kernels of loop bodies as well.

    ``fuse``: compute each tensor that only feeds later kernels where it is read, when that is cheap
    (:mod:`uopviz.nnef.fusion`: batch-norm chains and activations into the convolution before them).
    By default on, except with choices per kernel (a list or a dict by index), which number the
    kernels before fusion.
    """
    from uopviz.core.rewrite import traced_pass, tracing
    from uopviz.nnef.fusion import fuse_kernels
    from uopviz.nnef.padding import pad_guarded_reads

    if fuse is None:
        fuse = not (_per_kernel_list(opts) or isinstance(opts, dict))

    kernels = _lower_all(graph, progress)
    if _per_kernel_list(opts) and len(opts) < kernel_count(graph):
        raise NNEFError(
            f"opts has entries for {len(opts)} kernels; graph {graph.name} compiles to {kernel_count(graph)} "
            f"(loop bodies and conditions included, in the order of program.kernels)"
        )
    steps = _steps(graph)
    final = {*graph.outputs, *graph.counts.values(), *graph.updates.values()}
    read_after: list[set[str]] = [set() for _ in steps]
    later: set[str] = set()
    for position in range(len(steps) - 1, -1, -1):
        read_after[position] = set(later)
        later |= _step_reads(graph, steps[position])
    compiled: list[tuple[str, Any]] = []
    loop_opts: dict[int, dict[str, Any]] = {}
    offset = 0
    with tracing() as trace:
        for position, step in enumerate(steps):
            if isinstance(step, LoopOperation):
                loop_opts[id(step)], offset = _loop_opts(opts, offset, step)
                with traced_pass(f"loop {step.label}", None) as record:
                    for role, sub in step.subgraphs.items():
                        sub.compile(backend, loop_opts[id(step)][role])
                    record.output = None
                compiled.append(("loop", step))
                continue
            segment = [kernel for op in step for kernel in graph.lower(op)]
            if not segment:
                continue
            count = len(segment)
            if fuse:
                segment = fuse_kernels(segment, final | read_after[position])
                segment = pad_guarded_reads(segment, graph)
            program = _compile_segment(
                graph,
                segment,
                [*kernels, *segment],
                final | read_after[position],
                backend,
                _segment_opts(opts, offset, count),
                graph.inputs if position == 0 else (),
            )
            offset += count
            compiled.append(("kernels", program))
    if len(compiled) == 1 and compiled[0][0] == "kernels":
        program = compiled[0][1]
        program.nnef_steps = compiled
        program.nnef_loop_opts = {}
        return program
    return GraphProgram(graph, backend, opts, compiled, trace, loop_opts)


def _input_array(graph: Graph, name: str, given: Mapping[str, Any]) -> np.ndarray:
    tensor = graph.tensors[name] if name in graph.tensors else None
    if tensor is None:
        if name in graph.extent_inputs:  # a counter a loop's runner fills
            if name not in given:
                raise NNEFError(
                    f"the sub-graph {graph.name} reads the run-time extent '{name}' "
                    f"({graph.extent_inputs[name]!r}), which the loop that runs it passes; give it by name"
                )
            return np.asarray(given[name], np.int32).reshape(1)
        raise NNEFError(f"the program reads '{name}', which the graph does not define")
    if name in given:
        array = np.asarray(given[name])
        expected = tensor.upper_shape
        if tuple(array.shape) != tuple(expected):
            raise NNEFError(
                f"'{name}' must have shape {list(expected)}, the array given has shape {list(array.shape)}"
            )
        try:
            return np.ascontiguousarray(array.astype(tensor.numpy_dtype, copy=False))
        except (TypeError, ValueError, OverflowError) as error:
            raise NNEFError(f"'{name}' is {tensor.numpy_dtype} data; the array given ({array.dtype}) cannot "
                            f"become that: {error}") from None  # fmt: skip
    if tensor.data is not None:
        return tensor.data
    kind = "input" if tensor.kind == "input" else tensor.kind
    hint = " (no .dat file was found for it; give it by name in the inputs)" if kind == "variable" else ""
    raise NNEFError.at(tensor.position, f"{kind} '{name}' has no data{hint}")


def _execute(graph: Graph, given: Mapping[str, Any], backend: str, opts: Any) -> dict[str, np.ndarray]:
    """Run the compiled steps of ``graph``: every buffer they produce, by name (flat arrays)."""
    compiled = graph.compile(backend=backend, opts=opts)
    values: dict[str, np.ndarray] = {}

    def fetch(name: str) -> np.ndarray:
        found = values.get(name)
        return found if found is not None else _input_array(graph, name, given)

    def extent_of(extent: Any) -> int:
        return extent if isinstance(extent, int) else _host_extent(extent, graph, ChainMap(values, given))

    for kind, step in compiled.nnef_steps:
        if kind == "kernels":
            results = step.run({position: fetch(name) for position, name in enumerate(step.nnef_inputs)})
            values.update(zip(step.nnef_outputs, results, strict=True))
        else:
            values.update(
                _run_loop(step, graph, fetch, extent_of, backend, compiled.nnef_loop_opts[id(step)])
            )
    return values


def _relayout(
    array: np.ndarray, source: Sequence[int], target: Sequence[int], actual: Sequence[int]
) -> np.ndarray:
    """A tensor stored row-major over the upper shape ``source``, stored over ``target`` instead
    (the elements inside the actual extents kept, the rest zero)."""
    array = np.asarray(array).reshape(tuple(source))
    if tuple(source) == tuple(target):
        return array
    out = np.zeros(tuple(target), array.dtype)
    window = tuple(slice(0, extent) for extent in actual)
    out[window] = array[window]
    return out


class _BoundSubgraph:
    """A loop's body or condition compiled once and bound to its arrays: each iteration copies the
    values it is given into the program's input arrays and launches the kernels (no allocation, no
    argument checks, no look-ups).  For CPU backends, whose arrays are the kernels' memory, and
    sub-graphs of fixed extents that compile to one program.  A finished loop gives its bound forms
    back to the sub-graph (:meth:`take`, :meth:`give_back`) for its next run."""

    def __init__(self, graph: Graph, program: Any, given: Mapping[str, Any], key: tuple) -> None:
        self.graph = graph
        self.program = program
        self.key = key
        initial = {
            position: np.array(_input_array(graph, name, given), copy=True)
            for position, name in enumerate(program.nnef_inputs)
        }
        self.arrays = program._allocate(initial)
        self.inputs = {
            name: self.arrays[program.inputs[position]] for position, name in enumerate(program.nnef_inputs)
        }
        arrays, array_of = self.arrays, program._array_of
        self.launches = [
            item.compiled.prepare(*(array_of(arrays, a, item, slot) for slot, a in enumerate(item.arguments)))
            for item in program.items
        ]
        values = program.output_values()
        self.outputs = [
            (values[index], program.outputs[index], graph.tensors[name].upper_shape)
            for index, name in ((program.nnef_outputs.index(name), name) for name in graph.outputs)
        ]
        self.extents = [list(graph.tensors[name].shape) for name in graph.outputs]

    @classmethod
    def take(cls, graph: Graph, given: Mapping[str, Any], backend: str, opts: Any) -> _BoundSubgraph | None:
        """A bound form of ``graph`` a finished loop gave back, else a new one (a loop nested in its
        own body, or running in another thread, gets arrays of its own); None where binding does
        not apply (the per-iteration path runs)."""
        pools = graph.__dict__.setdefault("_bound", {})
        key = (backend, repr(opts))
        if key in pools and pools[key] is None:
            return None
        try:
            return pools.setdefault(key, []).pop()
        except IndexError:
            bound = cls._bind(graph, given, backend, opts, key)
            if bound is None:
                pools[key] = None
            return bound

    @classmethod
    def _bind(cls, graph: Graph, given: Mapping[str, Any], backend: str, opts: Any, key: tuple) -> Any:
        from uopviz.passes.render import backend_named

        if not backend_named(backend).runs_on_cpu or graph.extent_inputs or graph.counts:
            return None
        if not all(graph.tensors[name].is_static for name in (*graph.inputs, *graph.outputs)):
            return None
        program = graph.compile(backend=backend, opts=opts)
        if isinstance(program, GraphProgram) or len(program.nnef_steps) != 1:
            return None
        if not all(name in program.nnef_outputs for name in graph.outputs):
            return None  # an output passed through from an input: no kernel writes it
        return cls(graph, program, given, key)

    def give_back(self) -> None:
        """Make this bound form available to the sub-graph's next loop."""
        pool = self.graph.__dict__.get("_bound", {}).get(self.key)
        if pool is not None:
            pool.append(self)

    def run(self, given: Mapping[str, Any]) -> list[np.ndarray]:
        """The sub-graph's outputs for ``given`` (names -> arrays), in the order of its outputs."""
        for name, array in given.items():
            target = self.inputs.get(name)
            if target is not None:
                np.copyto(target, np.asarray(array).reshape(-1), casting="unsafe")
        for launch in self.launches:
            launch.run()
        read = self.program._output
        return [read(self.arrays, value, original).reshape(shape) for value, original, shape in self.outputs]


def _run_loop(
    op: LoopOperation,
    graph: Graph,
    fetch: Callable[[str], np.ndarray],
    extent_of: Callable[[Any], int],
    backend: str,
    sub_opts: dict[str, Any],
) -> dict:
    """A loop node on the host: test the condition, run the body, carry the values (§3).

    Run-time extents: the body and condition get the actual extents of what they read in their
    counters (:attr:`Graph.extent_inputs`); after each iteration the extents of the carried values
    are read back from the body's counters, so a body that compresses what it carries hands the
    next iteration the new extent. The results' extents that only the run knows are written to
    their counters (``op.extent_outputs``)."""
    carried_formals = [op.body.tensors[name] for name in op.body.inputs[: len(op.carried)]]
    carried = [
        np.asarray(fetch(name)).reshape(formal.upper_shape)
        for name, formal in zip(op.carried, carried_formals, strict=True)
    ]
    carried_extents = [[extent_of(extent) for extent in graph.tensors[name].shape] for name in op.carried]
    scans = [[fetch(name) for name in pack] for pack in op.scans]
    captured = {name: fetch(name) for name in op.captures}
    outer_extents: dict[str, int] = {}  # counters filled from the enclosing graph (fixed for the loop)
    bounds = [len(pack) for pack in op.scans]
    if isinstance(op.count, int):
        bounds.append(op.count)
    elif isinstance(op.count, str):
        bounds.append(int(np.asarray(fetch(op.count)).reshape(-1)[0]))
    bound = min(bounds, default=None)
    indexed = len(op.body.inputs) > len(op.carried) + len(op.scans)

    def counters(sub: Graph) -> dict[str, np.ndarray]:
        out = {}
        for counter, source in sub.extent_inputs.items():
            if isinstance(source, tuple):  # ("carry", index, axis): the carried value's current extent
                value = carried_extents[source[1]][source[2]]
            else:
                if counter not in outer_extents:
                    outer_extents[counter] = extent_of(source)
                value = outer_extents[counter]
            out[counter] = np.array([value], np.int32)
        return out

    bound_programs: dict[int, _BoundSubgraph | None] = {}

    def run(sub: Graph, step: int) -> tuple[list[np.ndarray], list[list[int]]]:
        arguments = [*carried, *(pack[step] for pack in scans)]
        if indexed:
            arguments.append(np.array(step, np.int32))
        fast = bound_programs.get(id(sub))
        if fast is not None:  # the captured values are in its arrays since the first iteration
            return fast.run(dict(zip(sub.inputs, arguments, strict=True))), fast.extents
        given = {name: captured[name] for name in sub.captures}
        given.update(zip(sub.inputs, arguments, strict=True))
        given = {name: np.asarray(a).reshape(sub.tensors[name].upper_shape) for name, a in given.items()}
        given.update(counters(sub))
        opts = sub_opts["body" if sub is op.body else "condition"]
        if id(sub) not in bound_programs:
            fast = bound_programs[id(sub)] = _BoundSubgraph.take(sub, given, backend, opts)
            if fast is not None:
                return fast.run(given), fast.extents
        values = _execute(sub, given, backend, opts)
        known = ChainMap(values, given)
        arrays = [values[name] if name in values else _input_array(sub, name, given) for name in sub.outputs]
        extents = [
            [
                extent if isinstance(extent, int) else _host_extent(extent, sub, known)
                for extent in sub.tensors[name].shape
            ]
            for name in sub.outputs
        ]
        return arrays, extents

    scanned: list[list[tuple[np.ndarray, list[int]]]] = [[] for _ in op.outputs[len(op.carried) :]]
    step = 0
    try:
        while bound is None or step < bound:
            if op.condition is not None and (op.pretest or step > 0):
                (test,), _ = run(op.condition, step)
                if not bool(np.asarray(test).reshape(-1)[0]):
                    break
            if op.scan_limit is not None and step >= op.scan_limit:
                raise NNEFError.at(
                    op.position,
                    f"loop '{op.label}' goes on to iteration {step + 1}, but the left side declares "
                    f"{op.scan_limit} items for its scan outputs (their upper bound); declare more items or "
                    f"bound the loop with a count (do..({op.scan_limit}))",
                )
            updated, extents = run(op.body, step)
            for index, formal in enumerate(carried_formals):
                source = op.body.tensors[op.body.outputs[index]].upper_shape
                carried[index] = _relayout(updated[index], source, formal.upper_shape, extents[index])
                carried_extents[index] = extents[index]
            for outputs, value, extent in zip(
                scanned, updated[len(op.carried) :], extents[len(op.carried) :], strict=True
            ):
                outputs.append((value, extent))
            step += 1
    finally:
        for bound_program in bound_programs.values():
            if bound_program is not None:
                bound_program.give_back()
    results: dict[str, np.ndarray] = {}
    for name, value, formal in zip(op.outputs[: len(op.carried)], carried, carried_formals, strict=True):
        results[name] = value.reshape(formal.upper_shape)
    produced = op.body.outputs[len(op.carried) :]
    for names, values, source in zip(op.outputs[len(op.carried) :], scanned, produced, strict=True):
        tensor = op.body.tensors[source]
        for item, name in enumerate(names):  # items past the last iteration are zero (and empty)
            results[name] = (
                values[item][0] if item < len(values) else np.zeros(tensor.upper_shape, tensor.numpy_dtype)
            )
    for counter, where in op.extent_outputs.items():
        if where[0] == "carry":
            value = carried_extents[where[1]][where[2]]
        else:
            _, output, item, axis = where
            value = scanned[output][item][1][axis] if item < len(scanned[output]) else 0
        results[counter] = np.array([value], np.int32)
    return results


def _needs_recompose(graph: Graph, given: dict[str, Any]) -> dict[str, tuple[int, ...]] | None:
    shapes = {}
    for name in graph.inputs:
        tensor = graph.tensors[name]
        if name in given and not tensor.is_static:
            shapes[name] = tuple(np.asarray(given[name]).shape)
    return shapes or None


def _host_extent(extent: Any, graph: Graph, values: Mapping[str, np.ndarray]) -> int:
    """The value of a run-time extent after a run (from the counters its key is built of)."""

    def leaf(key: Any) -> Any:
        counter = graph.counts.get(key)
        if counter is not None:
            return int(np.asarray(values[counter]).reshape(-1)[0])
        if isinstance(key, str):
            raise NNEFError(f"the run-time extent {extent!r} depends on a value that no kernel counts")
        return _LEAF

    return max(0, min(int(_evaluate_tree(extent.key, leaf, PythonScalarOps())), int(extent.bound)))


def run_graph(
    graph: Graph, inputs: dict[str, Any], backend: str = "python", opts: Any = None, update: bool = False
) -> dict[str, np.ndarray]:
    """Run ``graph`` on ``inputs`` (names -> arrays; variables may be given too); outputs by name.

    Outputs with run-time extents come at their actual extents. With ``update``, the variables
    assigned in ``@update`` blocks take their new values.
    """
    unknown = [name for name in inputs if name not in graph.tensors]
    if unknown:
        raise NNEFError(f"unknown input name(s) {unknown}; the graph's inputs are {graph.inputs}")
    missing = [name for name in graph.inputs if name not in inputs]
    if missing:
        raise NNEFError(f"missing graph input(s) {missing}")
    shapes = _needs_recompose(graph, inputs)
    if shapes is not None:
        return run_graph(graph.recomposed(shapes), inputs, backend, opts, update)
    values = _execute(graph, inputs, backend, opts)
    outputs = {}
    for name in graph.outputs:
        tensor = graph.tensors[name]
        array = np.asarray(values[name] if name in values else _input_array(graph, name, inputs))
        array = array.reshape(tensor.upper_shape)
        for axis, extent in enumerate(tensor.shape):
            if isinstance(extent, DynamicExtent):
                array = np.take(array, np.arange(_host_extent(extent, graph, values)), axis=axis)
        outputs[name] = array
    if update:
        for variable, tensor in graph.updates.items():
            info = graph.tensors[variable]
            info.data = np.asarray(values[tensor]).reshape(info.upper_shape).astype(info.numpy_dtype)
    return outputs
