"""The UOp: one immutable, hash-consed node ``(op, src, arg, tag)`` of the program DAG.

Structurally equal UOps are the same Python object, so identity (``is``) is equality and
graphs share every common subexpression.  The cache holds UOps weakly: a graph nobody refers
to is freed.

Derived properties follow the spec's table.  ``dtype`` and ``shape`` are computed when a UOp
is built, because computing them is what validates the construction (a malformed UOp raises
:class:`UOpError` at once, naming the op and the shapes involved).  ``device``, ``min_max``
and ``axis`` are computed on first use.  Every graph walk here is iterative, so graphs of
hundreds of thousands of nodes never meet Python's recursion limit.

Shapes follow the spec literally: movement ops take their target shape as a source UOp, a
``STACK`` of index ``CONST``s (``Reshape(T, s')``).  ``UOp.marg`` reads those back as tuples.

This module holds the UOp class, hash-consing, the constructors and builders, and the graph
walks.  The rules deriving the properties live in :mod:`uopviz.core.uop_properties`, the printer in
:mod:`uopviz.core.uop_printing`, and ``Shape``, ``Device``, :class:`UOpError` and the source ops'
args in :mod:`uopviz.core.uop_types`; this module re-exports the public names of all three.
"""

from __future__ import annotations

import itertools
import math
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from uopviz.core.dtype import AddrSpace, DType, as_python_value, dtypes
from uopviz.core.ops import AxisType, Ops
from uopviz.core.uop_printing import format_graph, graph_lines, inline_text, short_arg
from uopviz.core.uop_properties import (
    broadcast_shapes,
    derive_axis,
    derive_device,
    derive_dtype_shape,
    derive_min_max,
    read_ints,
)
from uopviz.core.uop_types import BufferArg, Device, ParamArg, Shape, UOpError, UOpTypeError, format_device

_NORMALISED_OPS = frozenset({Ops.RESHAPE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.CONST})

_buffer_numbers = itertools.count()
_range_numbers = itertools.count(1000)


def reserve_buffer_number(number: int) -> None:
    """Take ``number`` out of the fresh buffer numbers: a graph read from text (uop_text) holds
    buffers numbered by another process, and a buffer made later must not get one of their numbers
    (two buffers of one size, dtype and number would be one hash-consed UOp)."""
    global _buffer_numbers
    following = next(_buffer_numbers)
    _buffer_numbers = itertools.count(max(following, number + 1))

# ---------------------------------------------------------------------------------------------
# hash-consing


def _arg_key(arg: Any) -> Any:
    """Make args that Python calls equal but that mean different things distinct (-0.0, 0.0, nan)."""
    if type(arg) is tuple:
        return tuple(_arg_key(a) for a in arg)
    if type(arg) is float and (arg == 0.0 or arg != arg):
        return ("float", repr(arg))
    return arg


_cache: dict[tuple, weakref.ref] = {}


def live_uop_count() -> int:
    """How many distinct UOps are alive (the size of the hash-consing cache)."""
    return len(_cache)


class _UOpMeta(type):
    """Builds a UOp at most once per structure: ``UOp(...)`` returns the living equal UOp if any.

    The cache holds weak references, removed when their UOp dies, so it never keeps a graph alive.
    """

    def __call__(cls, op: Ops, src: tuple[UOp, ...] = (), arg: Any = None, tag: Any = None) -> UOp:
        if type(src) is not tuple:
            src = tuple(src)
        normalised = type(op) is not Ops or op in _NORMALISED_OPS
        if normalised:
            op, src, arg = _normalise(op, src, arg)
        key = _cache_key(op, src, arg, tag)
        ref = _cache.get(key)
        if ref is not None:
            found = ref()
            if found is not None:
                # the sources are the living UOps the found one holds (no other object has their
                # ids): checking them is for a UOp being built, most calls find one
                return found
        if not normalised:
            _normalise(op, src, arg)  # the sources' check: raises for one that is not a UOp
        uop = super().__call__(op, src, arg, tag)

        def forget(dead: weakref.ref, key: tuple = key) -> None:
            if _cache.get(key) is dead:
                del _cache[key]

        _cache[key] = weakref.ref(uop, forget)
        return uop


_SPECIAL_ARG_TYPES = (tuple, float)


def _cache_key(op: Ops, src: tuple, arg: Any, tag: Any) -> tuple:
    """The key a UOp is hash-consed under.  Ids, not the UOps, of the sources: the cached UOp keeps
    its sources alive, so their ids are stable."""
    return (op, tuple(map(id, src)), _arg_key(arg) if type(arg) in _SPECIAL_ARG_TYPES else arg, tag)


def _normalise(op: Ops, src: tuple, arg: Any) -> tuple[Ops, tuple, Any]:
    """Accept the convenient spellings: python numbers in src, shapes given as arg to movement ops."""
    if type(op) is not Ops:
        raise UOpError(f"op must be an Ops member, got {op!r}")
    for s in src:
        if type(s) is not UOp:
            raise UOpError(f"{op.name}: every source must be a UOp, got {type(s).__name__} {s!r}")
    if op not in _NORMALISED_OPS:
        return op, src, arg
    if op in (Ops.RESHAPE, Ops.EXPAND) and len(src) == 1 and arg is not None:
        return op, (src[0], shape_uop(arg)), None
    if op in (Ops.PAD, Ops.SHRINK) and len(src) == 1 and arg is not None:
        offsets, shape = arg
        return op, (src[0], shape_uop(offsets), shape_uop(shape)), None
    if op is Ops.CONST and isinstance(arg, tuple) and len(arg) == 2 and isinstance(arg[1], DType):
        return op, src, (as_python_value(arg[1], arg[0]), arg[1])
    return op, src, arg


def shape_uop(values: Sequence[int]) -> UOp:
    """The STACK of index constants that stands for a shape (or offsets) in a movement op's src."""
    values = tuple(values)
    for v in values:
        if isinstance(v, UOp):
            continue
        if not isinstance(v, int) or isinstance(v, bool):
            raise UOpError(f"a shape holds ints, got {v!r} in {values}")
    return UOp(
        Ops.STACK,
        tuple(v if isinstance(v, UOp) else UOp.const(dtypes.index, v) for v in values),
        dtypes.index,
    )



# ---------------------------------------------------------------------------------------------
# the UOp


class UOp(metaclass=_UOpMeta):
    """A node of the program DAG: ``op`` from :class:`Ops`, ``src`` a tuple of UOps, an op-dependent
    ``arg`` and a ``tag`` for temporary processing.  Immutable and hash-consed."""

    __slots__ = ("op", "src", "arg", "tag", "dtype", "shape", "__dict__", "__weakref__")

    op: Ops
    src: tuple[UOp, ...]
    arg: Any
    tag: Any
    dtype: DType
    shape: Shape

    def __init__(self, op: Ops, src: tuple[UOp, ...] = (), arg: Any = None, tag: Any = None):
        setter = object.__setattr__
        setter(self, "op", op)
        setter(self, "src", src)
        setter(self, "arg", arg)
        setter(self, "tag", tag)
        dtype, shape = derive_dtype_shape(self)
        setter(self, "dtype", dtype)
        setter(self, "shape", shape)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"UOp is immutable: cannot set {name}; build a new UOp with .replace()")

    def __reduce__(self):
        # flat list instead of nested tuples: pickling a deep graph never recurses
        return (_rebuild, (_flatten(self),))

    def __repr__(self) -> str:
        return (f"UOp({self.op!r}, {self.dtype!r}, shape={self.shape}, arg={short_arg(self)}, "
                f"nsrc={len(self.src)})")

    def __str__(self) -> str:
        return format_graph(self)

    def __bool__(self) -> bool:
        raise TypeError("a UOp has no truth value (`a == b` builds CMP_EQ); compare UOps with `is`")

    __hash__ = object.__hash__

    # -- identity helpers -------------------------------------------------------------------
    def replace(self, **changes: Any) -> UOp:
        """A UOp equal to this one except for the given fields (op, src, arg, tag)."""
        fields = {"op": self.op, "src": self.src, "arg": self.arg, "tag": self.tag}
        fields.update(changes)
        return UOp(fields["op"], tuple(fields["src"]), fields["arg"], fields["tag"])

    # -- lazily derived properties ------------------------------------------------------------
    @property
    def device(self) -> Device:
        """Where the value lives (spec table, 'device' column)."""
        return derived_attribute(self, "_device", derive_device)

    @property
    def min_max(self) -> tuple[Any, Any]:
        """Bounds ``(min, max)`` of every value this UOp can take (spec table, 'min_max' column)."""
        return derived_attribute(self, "_min_max", derive_min_max)

    @property
    def vmin(self) -> Any:
        """``min_max[0]``."""
        return self.min_max[0]

    @property
    def vmax(self) -> Any:
        """``min_max[1]``."""
        return self.min_max[1]

    @property
    def axis(self) -> int | None:
        """The multi-device shard dimension, or None (spec: 'axis tracks the sharding dimension')."""
        return derived_attribute(self, "_axis", derive_axis)

    @property
    def size(self) -> int:
        """The number of elements of the value."""
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        """The rank of the value."""
        return len(self.shape)

    @property
    def marg(self) -> Any:
        """The movement op's argument as plain Python (shape, (offsets, shape), order, flags...)."""
        if self.op in (Ops.RESHAPE, Ops.EXPAND):
            return read_ints(self.src[1])
        if self.op in (Ops.PAD, Ops.SHRINK):
            return read_ints(self.src[1]), read_ints(self.src[2])
        return self.arg

    @property
    def const_value(self) -> Any:
        """The value of a CONST."""
        if self.op is not Ops.CONST:
            raise UOpError(f"const_value of a {self.op.name}")
        return self.arg[0]

    @property
    def buffer_number(self) -> int:
        """The unique number of a BUFFER."""
        return self.arg.number

    # -- graph walks ----------------------------------------------------------------------------
    def toposort(self) -> list[UOp]:
        """Every UOp of the graph, sources before users (iterative depth-first post-order).

        A UOp never changes, so its order is kept on it: compiling a model asks for the order of
        the same kernel again and again (DenseNet-121: 30,700 walks of 7,900 graphs).  Kept without
        the UOp itself, which would make each such UOp a reference cycle; a new list each call."""
        sources = self.__dict__.get("_toposort_sources")
        if sources is None:
            order = toposort([self])
            sources = self.__dict__["_toposort_sources"] = tuple(order[:-1])
            return order
        return [*sources, self]

    def to_networkx(self):
        """The graph as a ``networkx.DiGraph``: one node per UOp (keyed by its position in toposort),
        edges source → user with the source slot as ``slot``."""
        import networkx as nx

        graph = nx.DiGraph()
        order = self.toposort()
        number = {u: i for i, u in enumerate(order)}
        for u, i in number.items():
            graph.add_node(i, uop=u, op=u.op.name, dtype=u.dtype.name, shape=u.shape, arg=short_arg(u))
            for slot, s in enumerate(u.src):
                graph.add_edge(number[s], i, slot=slot)
        return graph

    # -- constructors ---------------------------------------------------------------------------
    @staticmethod
    def const(dtype: DType, value: Any) -> UOp:
        """A scalar CONST of ``dtype`` (shape ``()``, no device)."""
        value = as_python_value(dtype, value)
        # the living CONST looked up first, by the key UOp(...) would make: index constants are
        # built hundreds of thousands of times while compiling a model, nearly all already alive
        arg = (value, dtype)
        ref = _cache.get(_cache_key(Ops.CONST, (), arg, None))
        found = ref() if ref is not None else None
        return found if found is not None else UOp(Ops.CONST, (), arg)

    @staticmethod
    def range(bound: int | UOp, axis_type: AxisType = AxisType.LOOP, number: int | None = None) -> UOp:
        """A RANGE from 0 to ``bound``-1.  ``number`` tells ranges of equal bound and type apart;
        a fresh one is drawn when not given."""
        bound_uop = bound if isinstance(bound, UOp) else UOp.const(dtypes.index, bound)
        return UOp(Ops.RANGE, (bound_uop,), (next(_range_numbers) if number is None else number, axis_type))

    @staticmethod
    def buffer(
        size: int,
        dtype: DType,
        device: Device = "CPU",
        addrspace: AddrSpace = AddrSpace.GLOBAL,
        number: int | None = None,
    ) -> UOp:
        """A fresh BUFFER of ``size`` elements of ``dtype`` on ``device``."""
        num = next(_buffer_numbers) if number is None else number
        return UOp(Ops.BUFFER, (), BufferArg(num, size, dtype, device, addrspace))

    @staticmethod
    def param(
        slot: int, shape: Shape, dtype: DType, device: Device = None, addrspace: AddrSpace | None = None
    ) -> UOp:
        """A PARAM placeholder of ``shape`` for argument ``slot`` of a Function."""
        return UOp(Ops.PARAM, (shape_uop(shape),), ParamArg(slot, dtype, device, addrspace))

    # -- builders: movement ----------------------------------------------------------------
    def reshape(self, shape: Sequence[int]) -> UOp:
        """RESHAPE to ``shape`` (row-major reinterpretation).  A value sharded over an n-tuple device
        must keep its shard boundary (spec: 'Reshape remaps axis'): UOpError here if it cannot."""
        out = UOp(Ops.RESHAPE, (self, shape_uop(shape)))
        if isinstance(self.device, tuple) and self.axis is not None:
            _ = out.axis  # derived now, so a reshape that breaks the shards fails where it is written
        return out

    def expand(self, shape: Sequence[int]) -> UOp:
        """EXPAND size-1 axes to ``shape``."""
        return UOp(Ops.EXPAND, (self, shape_uop(shape)))

    def permute(self, order: Sequence[int]) -> UOp:
        """PERMUTE the axes into ``order``."""
        return UOp(Ops.PERMUTE, (self,), tuple(order))

    def flip(self, flags: Sequence[bool]) -> UOp:
        """FLIP the axes whose flag is True."""
        return UOp(Ops.FLIP, (self,), tuple(bool(f) for f in flags))

    def pad(self, offsets: Sequence[int], shape: Sequence[int]) -> UOp:
        """PAD: place this at ``offsets`` in a zero-filled value of ``shape``."""
        return UOp(Ops.PAD, (self, shape_uop(offsets), shape_uop(shape)))

    def shrink(self, offsets: Sequence[int], shape: Sequence[int]) -> UOp:
        """SHRINK: keep ``shape`` elements from ``offsets`` on each axis."""
        return UOp(Ops.SHRINK, (self, shape_uop(offsets), shape_uop(shape)))

    def index(self, *indices: UOp) -> UOp:
        """INDEX from the left by each index UOp."""
        return UOp(Ops.INDEX, (self, *indices))

    def bitcast(self, dtype: DType) -> UOp:
        """BITCAST the storage to ``dtype``."""
        return UOp(Ops.BITCAST, (self,), dtype)

    def replicated(self, axes: Sequence[int]) -> UOp:
        """Mark as REPLICATED along ``axes`` (they collapse to 1)."""
        return UOp(Ops.REPLICATED, (self,), tuple(axes))

    def copy_to(self, device: Device) -> UOp:
        """COPY to ``device`` (a device-changing load)."""
        return UOp(Ops.COPY, (self,), device)

    # -- builders: compute -------------------------------------------------------------------
    def reduce(self, op: Ops, axes: Sequence[int] | None = None, *ranges: UOp) -> UOp:
        """REDUCE with ``op`` (ADD, MAX or MUL) along ``axes`` (tensor level) or ``ranges`` (kernel)."""
        return UOp(Ops.REDUCE, (self, *ranges), (op, tuple(axes) if axes is not None else ()))

    def cast(self, dtype: DType) -> UOp:
        """CAST to ``dtype`` (no-op when already of that type)."""
        return self if dtype == self.dtype else UOp(Ops.CAST, (self,), dtype)

    def alu(self, op: Ops, *others: UOp | int | float | bool) -> UOp:
        """An elementwise op of this UOp and ``others`` (Python numbers become CONSTs of our dtype)."""
        return UOp(op, (self, *(self._operand(o) for o in others)))

    def where(self, if_true: UOp | int | float, if_false: UOp | int | float) -> UOp:
        """WHERE: ``if_true`` where this is nonzero, else ``if_false``."""
        reference = if_true if isinstance(if_true, UOp) else if_false
        if not isinstance(reference, UOp):
            raise UOpError("WHERE needs at least one UOp among its two values")
        return UOp(Ops.WHERE, (self, reference._operand(if_true), reference._operand(if_false)))

    def _operand(self, value: UOp | int | float | bool) -> UOp:
        if isinstance(value, UOp):
            return value
        dtype = self.dtype.scalar
        if isinstance(value, float) and not dtype.is_float and value != int(value):
            raise UOpError(f"cannot combine {dtype.name} with the non-integer {value}")
        const = UOp.const(dtype, value)
        return const if self.dtype.count == 1 else UOp(Ops.VECTORIZE, (const,) * self.dtype.count)

    def _reverse(self, op: Ops, other: int | float | bool) -> UOp:
        return UOp(op, (self._operand(other), self))

    def __add__(self, other):
        return self.alu(Ops.ADD, other)

    def __radd__(self, other):
        return self._reverse(Ops.ADD, other)

    def __sub__(self, other):
        return self.alu(Ops.SUB, other)

    def __rsub__(self, other):
        return self._reverse(Ops.SUB, other)

    def __mul__(self, other):
        return self.alu(Ops.MUL, other)

    def __rmul__(self, other):
        return self._reverse(Ops.MUL, other)

    def __truediv__(self, other):
        return self.alu(Ops.DIV, other)

    def __rtruediv__(self, other):
        return self._reverse(Ops.DIV, other)

    def __floordiv__(self, other):
        return self.alu(Ops.IDIV, other)

    def __rfloordiv__(self, other):
        return self._reverse(Ops.IDIV, other)

    def __mod__(self, other):
        return self.alu(Ops.MOD, other)

    def __rmod__(self, other):
        return self._reverse(Ops.MOD, other)

    def __and__(self, other):
        return self.alu(Ops.AND, other)

    def __rand__(self, other):
        return self._reverse(Ops.AND, other)

    def __or__(self, other):
        return self.alu(Ops.OR, other)

    def __ror__(self, other):
        return self._reverse(Ops.OR, other)

    def __xor__(self, other):
        return self.alu(Ops.XOR, other)

    def __rxor__(self, other):
        return self._reverse(Ops.XOR, other)

    def __lshift__(self, other):
        return self.alu(Ops.SHL, other)

    def __rshift__(self, other):
        return self.alu(Ops.SHR, other)

    def __lt__(self, other):
        return self.alu(Ops.CMP_LT, other)

    def __gt__(self, other):
        return self.alu(Ops.CMP_GT, other)

    def __le__(self, other):
        return self.alu(Ops.CMP_LE, other)

    def __ge__(self, other):
        return self.alu(Ops.CMP_GE, other)

    def __eq__(self, other):
        return self.alu(Ops.CMP_EQ, other)  # type: ignore[override]

    def __ne__(self, other):
        return self.alu(Ops.CMP_NE, other)  # type: ignore[override]

    def __neg__(self):
        return UOp(Ops.NEG, (self,))

    def __invert__(self):
        return UOp(Ops.NOT, (self,))

    def maximum(self, other: UOp | int | float) -> UOp:
        """MAX of this and ``other``."""
        return self.alu(Ops.MAX, other)

    def ne(self, other: UOp | int | float) -> UOp:
        """CMP_NE (same as ``!=``)."""
        return self.alu(Ops.CMP_NE, other)

    def eq(self, other: UOp | int | float) -> UOp:
        """CMP_EQ (same as ``==``)."""
        return self.alu(Ops.CMP_EQ, other)

    def recip(self) -> UOp:
        """RECIP: 1/x."""
        return UOp(Ops.RECIP, (self,))

    def sink(self, *others: UOp) -> UOp:
        """A SINK over this and ``others``."""
        return UOp(Ops.SINK, (self, *others))


# ---------------------------------------------------------------------------------------------
# graph walks


def toposort(roots: Sequence[UOp], sources: Callable[[UOp], Sequence[UOp]] | None = None) -> list[UOp]:
    """Every UOp reachable from ``roots``, each once, sources before users.

    ``sources`` chooses which sources of a node to follow (default: all of ``src``): a view that
    leaves out FUNCTION bodies, PARAM shapes or folded constants walks the graph the same way."""
    # depth-first post-order without recursion: each node on the stack holds an iterator over its
    # sources, so an edge costs one set lookup (compiling a model walks graphs ~70,000 times)
    order: list[UOp] = []
    visited: set[UOp] = set()
    for root in roots:
        if root in visited:
            continue
        visited.add(root)
        stack = [(root, iter(root.src if sources is None else sources(root)))]
        while stack:
            node, pending = stack[-1]
            for s in pending:
                if s not in visited:
                    visited.add(s)
                    stack.append((s, iter(s.src if sources is None else sources(s))))
                    break
            else:
                stack.pop()
                order.append(node)
    return order


def _flatten(root: UOp) -> list[tuple[Ops, tuple[int, ...], Any, Any]]:
    order = root.toposort()
    number = {u: i for i, u in enumerate(order)}
    return [(u.op, tuple(number[s] for s in u.src), u.arg, u.tag) for u in order]


def _rebuild(flat: list[tuple[Ops, tuple[int, ...], Any, Any]]) -> UOp:
    built: list[UOp] = []
    for op, src, arg, tag in flat:
        built.append(UOp(op, tuple(built[i] for i in src), arg, tag))
    return built[-1]


def derived_attribute(u: UOp, attr: str, derive: Callable[[UOp], Any]) -> Any:
    """Compute ``attr`` for ``u`` and, iteratively in topological order, every source missing it."""
    cached = u.__dict__.get(attr, _MISSING)
    if cached is not _MISSING:
        return cached
    stack: list[tuple[UOp, bool]] = [(u, False)]
    while stack:
        node, ready = stack.pop()
        if attr in node.__dict__:
            continue
        if ready:
            node.__dict__[attr] = derive(node)
            continue
        stack.append((node, True))
        stack.extend((s, False) for s in node.src if attr not in s.__dict__)
    return u.__dict__[attr]


_MISSING = object()


__all__ = [
    "BufferArg", "Device", "ParamArg", "Shape", "UOp", "UOpError", "UOpTypeError", "broadcast_shapes",
    "derived_attribute", "format_device", "format_graph", "graph_lines", "inline_text", "live_uop_count",
    "read_ints", "shape_uop", "toposort",
]
