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
"""

from __future__ import annotations

import itertools
import math
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from uopviz.core.dtype import AddrSpace, DType, as_python_value, dtypes
from uopviz.core.ops import AxisType, GroupOp, Ops

Shape = tuple[int, ...]
_NORMALISED_OPS = frozenset({Ops.RESHAPE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.CONST})
Device = str | tuple[str, ...] | None


class UOpError(ValueError):
    """A malformed UOp: the message names the op, its sources' shapes/dtypes and the problem."""


# ---------------------------------------------------------------------------------------------
# args of the source ops


@dataclass(frozen=True)
class BufferArg:
    """Arg of a Buffer: a unique number (two buffers of equal size are still two), size, dtype,
    device and address space."""

    number: int
    size: int
    dtype: DType
    device: Device
    addrspace: AddrSpace = AddrSpace.GLOBAL

    def __repr__(self) -> str:
        return f"buf{self.number}<{self.dtype.name}[{self.size}], {format_device(self.device)}>"


@dataclass(frozen=True)
class ParamArg:
    """Arg of a Param: the slot it is substituted from, dtype, and optional device/address space."""

    slot: int
    dtype: DType
    device: Device = None
    addrspace: AddrSpace | None = None

    def __repr__(self) -> str:
        return f"param{self.slot}<{self.dtype.name}>"


_buffer_numbers = itertools.count()
_range_numbers = itertools.count(1000)


def format_device(device: Device) -> str:
    """``CPU`` or ``(CPU:0,CPU:1)``: a device as the printer writes it."""
    if isinstance(device, tuple):
        return "(" + ",".join(device) + ")"
    return str(device)


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
        op, src, arg = _normalise(op, src, arg)
        # ids, not the UOps, in the key: the cached UOp keeps its sources alive, so their ids are stable
        key = (op, tuple(map(id, src)), _arg_key(arg) if type(arg) in _SPECIAL_ARG_TYPES else arg, tag)
        ref = _cache.get(key)
        if ref is not None:
            found = ref()
            if found is not None:
                return found
        uop = super().__call__(op, src, arg, tag)

        def forget(dead: weakref.ref, key: tuple = key) -> None:
            if _cache.get(key) is dead:
                del _cache[key]

        _cache[key] = weakref.ref(uop, forget)
        return uop


_SPECIAL_ARG_TYPES = (tuple, float)


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


def read_ints(u: UOp) -> tuple[int, ...]:
    """Read a shape/offset STACK back to a tuple of ints."""
    if u.op is not Ops.STACK or any(s.op is not Ops.CONST for s in u.src):
        raise UOpError(f"expected a constant shape (a STACK of CONSTs), got {u.op.name}")
    return tuple(s.arg[0] for s in u.src)


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
        dtype, shape = _derive_dtype_shape(self)
        setter(self, "dtype", dtype)
        setter(self, "shape", shape)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"UOp is immutable: cannot set {name}; build a new UOp with .replace()")

    def __reduce__(self):
        # flat list instead of nested tuples: pickling a deep graph never recurses
        return (_rebuild, (_flatten(self),))

    def __repr__(self) -> str:
        return (f"UOp({self.op!r}, {self.dtype!r}, shape={self.shape}, arg={_short_arg(self)}, "
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
        return derived_attribute(self, "_device", _derive_device)

    @property
    def min_max(self) -> tuple[Any, Any]:
        """Bounds ``(min, max)`` of every value this UOp can take (spec table, 'min_max' column)."""
        return derived_attribute(self, "_min_max", _derive_min_max)

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
        return derived_attribute(self, "_axis", _derive_axis)

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
        """Every UOp of the graph, sources before users (iterative depth-first post-order)."""
        return toposort([self])

    def to_networkx(self):
        """The graph as a ``networkx.DiGraph``: one node per UOp (keyed by its position in toposort),
        edges source → user with the source slot as ``slot``."""
        import networkx as nx

        graph = nx.DiGraph()
        order = self.toposort()
        number = {u: i for i, u in enumerate(order)}
        for u, i in number.items():
            graph.add_node(i, uop=u, op=u.op.name, dtype=u.dtype.name, shape=u.shape, arg=_short_arg(u))
            for slot, s in enumerate(u.src):
                graph.add_edge(number[s], i, slot=slot)
        return graph

    # -- constructors ---------------------------------------------------------------------------
    @staticmethod
    def const(dtype: DType, value: Any) -> UOp:
        """A scalar CONST of ``dtype`` (shape ``()``, no device)."""
        return UOp(Ops.CONST, (), (as_python_value(dtype, value), dtype))

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
    order: list[UOp] = []
    visited: set[UOp] = set()
    stack: list[tuple[UOp, bool]] = [(r, False) for r in reversed(roots)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if node in visited:
            continue
        visited.add(node)
        stack.append((node, True))
        for s in reversed(node.src if sources is None else sources(node)):
            if s not in visited:
                stack.append((s, False))
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


# ---------------------------------------------------------------------------------------------
# derived dtype and shape: computed at construction, this is the validation


def _fail(u: UOp, problem: str) -> UOpError:
    sources = ", ".join(f"{s.op.name}{s.shape}:{s.dtype.name}" for s in u.src) or "none"
    return UOpError(f"{u.op.name}: {problem} (sources: {sources}; arg: {_short_arg(u)})")


def broadcast_shapes(u: UOp, shapes: Sequence[Shape]) -> Shape:
    """Right-align the shapes and take the element-wise max; each axis must be equal or 1."""
    first = shapes[0]
    if all(s == first for s in shapes):
        return first
    rank = max((len(s) for s in shapes), default=0)
    out: list[int] = []
    for position in range(rank):
        sizes = {s[position - rank + len(s)] for s in shapes if position - rank + len(s) >= 0}
        sizes.discard(1)
        if len(sizes) > 1:
            raise _fail(u, f"shapes {', '.join(map(str, shapes))} do not broadcast (axis {position})")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def _value_dtypes_must_match(u: UOp, values: Sequence[UOp]) -> DType:
    first = values[0].dtype
    if all(v.dtype is first for v in values):
        return first
    kinds = {v.dtype for v in values}
    if len(kinds) > 1:
        raise _fail(u, f"operands have different dtypes {sorted(d.name for d in kinds)}; cast one first")
    return values[0].dtype


def _derive_dtype_shape(u: UOp) -> tuple[DType, Shape]:
    rule = _DTYPE_SHAPE.get(u.op)
    if rule is None:
        return dtypes.void, ()
    return rule(u)


def _dtype_shape_const(u: UOp) -> tuple[DType, Shape]:
    if not (isinstance(u.arg, tuple) and len(u.arg) == 2 and isinstance(u.arg[1], DType)):
        raise _fail(u, "arg must be (value, dtype); use UOp.const(dtype, value)")
    if u.src:
        raise _fail(u, "CONST takes no sources")
    return u.arg[1], ()


def _dtype_shape_buffer(u: UOp) -> tuple[DType, Shape]:
    arg = u.arg
    if not isinstance(arg, BufferArg):
        raise _fail(u, "arg must be a BufferArg; use UOp.buffer(size, dtype, device)")
    if arg.size < 0:
        raise _fail(u, f"negative size {arg.size}")
    copies = len(arg.device) if isinstance(arg.device, tuple) else 1
    return arg.dtype, (copies * arg.size,)


def _dtype_shape_param(u: UOp) -> tuple[DType, Shape]:
    if not isinstance(u.arg, ParamArg) or len(u.src) != 1:
        raise _fail(u, "PARAM takes (shape,) and a ParamArg; use UOp.param(slot, shape, dtype)")
    return u.arg.dtype, read_ints(u.src[0])


def _dtype_shape_binary(u: UOp) -> tuple[DType, Shape]:
    if not isinstance(u.arg, bytes | bytearray):
        raise _fail(u, "BINARY's arg must be bytes")
    return dtypes.uint8, (len(u.arg),)


def _dtype_shape_stack(u: UOp) -> tuple[DType, Shape]:
    if not u.src:
        return (u.arg if isinstance(u.arg, DType) else dtypes.index), (0,)
    shapes = {s.shape for s in u.src}
    if len(shapes) > 1:
        raise _fail(u, f"all stacked shapes must match, got {sorted(shapes)}")
    return _value_dtypes_must_match(u, u.src), (len(u.src), *u.src[0].shape)


def _check_movement_source(u: UOp, count: int) -> Shape:
    if len(u.src) != count:
        raise _fail(u, f"expects {count} sources, got {len(u.src)}")
    return u.src[0].shape


def _dtype_shape_reshape(u: UOp) -> tuple[DType, Shape]:
    shape = _check_movement_source(u, 2)
    new_shape = read_ints(u.src[1])
    if any(s < 0 for s in new_shape):
        raise _fail(u, f"negative size in {new_shape}")
    if math.prod(shape) != math.prod(new_shape):
        raise _fail(
            u,
            f"cannot reshape {shape} ({math.prod(shape)} elements) to {new_shape} "
            f"({math.prod(new_shape)} elements)",
        )
    return u.src[0].dtype, new_shape


def _dtype_shape_expand(u: UOp) -> tuple[DType, Shape]:
    shape = _check_movement_source(u, 2)
    new_shape = read_ints(u.src[1])
    if len(new_shape) != len(shape):
        raise _fail(u, f"cannot expand rank {len(shape)} {shape} to rank {len(new_shape)} {new_shape}")
    for axis, (old, new) in enumerate(zip(shape, new_shape, strict=True)):
        if old not in (1, new):
            raise _fail(
                u,
                f"axis {axis} of size {old} is not 1, so it cannot expand to {new} ({shape} -> {new_shape})",
            )
    return u.src[0].dtype, new_shape


def _dtype_shape_pad(u: UOp) -> tuple[DType, Shape]:
    shape = _check_movement_source(u, 3)
    offsets, new_shape = read_ints(u.src[1]), read_ints(u.src[2])
    if not len(offsets) == len(new_shape) == len(shape):
        raise _fail(u, f"offsets {offsets} and shape {new_shape} must have the rank of {shape}")
    for axis, (old, offset, new) in enumerate(zip(shape, offsets, new_shape, strict=True)):
        if offset < 0 or offset + old > new:
            raise _fail(
                u,
                f"axis {axis}: {old} elements at offset {offset} do not fit in {new} "
                f"({shape} padded to {new_shape} at {offsets})",
            )
    return u.src[0].dtype, new_shape


def _dtype_shape_shrink(u: UOp) -> tuple[DType, Shape]:
    shape = _check_movement_source(u, 3)
    offsets, new_shape = read_ints(u.src[1]), read_ints(u.src[2])
    if not len(offsets) == len(new_shape) == len(shape):
        raise _fail(u, f"offsets {offsets} and shape {new_shape} must have the rank of {shape}")
    for axis, (old, offset, new) in enumerate(zip(shape, offsets, new_shape, strict=True)):
        if offset < 0 or new < 0 or offset + new > old:
            raise _fail(
                u,
                f"axis {axis}: {new} elements from offset {offset} exceed size {old} "
                f"({shape} shrunk to {new_shape} at {offsets})",
            )
    return u.src[0].dtype, new_shape


def _dtype_shape_permute(u: UOp) -> tuple[DType, Shape]:
    shape = _check_movement_source(u, 1)
    order = u.arg
    if not isinstance(order, tuple) or sorted(order) != list(range(len(shape))):
        raise _fail(u, f"{order} is not a permutation of the {len(shape)} axes of {shape}")
    return u.src[0].dtype, tuple(shape[i] for i in order)


def _dtype_shape_flip(u: UOp) -> tuple[DType, Shape]:
    shape = _check_movement_source(u, 1)
    if not isinstance(u.arg, tuple) or len(u.arg) != len(shape):
        raise _fail(u, f"needs one flag per axis of {shape}, got {u.arg}")
    return u.src[0].dtype, shape


def _dtype_shape_index(u: UOp) -> tuple[DType, Shape]:
    if not u.src:
        raise _fail(u, "INDEX needs the value to index")
    shape, indices = u.src[0].shape, u.src[1:]
    if len(indices) > len(shape):
        raise _fail(u, f"{len(indices)} indices for a value of rank {len(shape)}")
    out: list[int] = []
    lanes = 1
    for position, index in enumerate(indices):
        if not (index.dtype.scalar.is_int or index.dtype.scalar is dtypes.bool):
            raise _fail(u, f"index {position} has dtype {index.dtype.name}; indices are integers")
        if len(index.shape) > 1:
            raise _fail(u, f"index {position} has shape {index.shape}; an index is () or (k,)")
        out.extend(index.shape)
        lanes = max(lanes, index.dtype.count)
    dtype = u.src[0].dtype
    return (dtype.vec(lanes) if lanes > 1 else dtype), (*out, *shape[len(indices) :])


def _dtype_shape_replicated(u: UOp) -> tuple[DType, Shape]:
    shape = _check_movement_source(u, 1)
    axes = u.arg
    if not isinstance(axes, tuple) or any(not 0 <= a < len(shape) for a in axes):
        raise _fail(u, f"axes {axes} are not axes of {shape}")
    return u.src[0].dtype, tuple(1 if i in axes else s for i, s in enumerate(shape))


def _dtype_shape_slice(u: UOp) -> tuple[DType, Shape]:
    if len(u.src) != 2 or not (isinstance(u.arg, tuple) and len(u.arg) == 2):
        raise _fail(u, "SLICE takes (T, offset) and arg (size, dtype)")
    size, dtype = u.arg
    return dtype, (size,)


def _dtype_shape_bitcast(u: UOp) -> tuple[DType, Shape]:
    shape = _check_movement_source(u, 1)
    if not isinstance(u.arg, DType):
        raise _fail(u, "BITCAST's arg is the target dtype")
    if u.arg.itemsize != u.src[0].dtype.itemsize:
        raise _fail(
            u,
            f"{u.src[0].dtype.name} ({u.src[0].dtype.itemsize} bytes) and {u.arg.name} "
            f"({u.arg.itemsize} bytes) differ in size; the shape is kept, so bytes would not be",
        )
    return u.arg, shape


def _dtype_shape_reduce(u: UOp) -> tuple[DType, Shape]:
    if not u.src:
        raise _fail(u, "REDUCE needs a value")
    if not (isinstance(u.arg, tuple) and len(u.arg) == 2 and u.arg[0] in GroupOp.REDUCE_OPS):
        raise _fail(u, f"arg must be (ADD|MAX|MUL, axes), got {u.arg}")
    shape, axes = u.src[0].shape, u.arg[1]
    if any(not 0 <= a < len(shape) for a in axes):
        raise _fail(u, f"axes {axes} out of range for {shape}")
    for r in u.src[1:]:
        if r.op is not Ops.RANGE and r.dtype is not dtypes.index:
            raise _fail(u, f"kernel-level reduce sources after the value must be ranges, got {r.op.name}")
    return u.src[0].dtype, tuple(1 if i in axes else s for i, s in enumerate(shape))


def _dtype_shape_elementwise(u: UOp) -> tuple[DType, Shape]:
    op, src = u.op, u.src
    if len(src) != _ARITY[op]:
        raise _fail(u, f"takes {_ARITY[op]} sources, got {len(src)}")
    first = src[0]
    shape = first.shape
    if len(src) > 1 and not all(s.shape == shape for s in src):
        shape = broadcast_shapes(u, [s.shape for s in src])
    special = _ELEMENTWISE_SPECIAL.get(op)
    if special is None:  # the common case: operands of one dtype, result of that dtype
        dtype = first.dtype
        if len(src) > 1 and not all(s.dtype is dtype for s in src):
            dtype = _value_dtypes_must_match(u, src)
        return dtype, shape
    return special(u), shape


def _elementwise_cast(u: UOp) -> DType:
    if not isinstance(u.arg, DType):
        raise _fail(u, "CAST's arg is the target dtype")
    return u.arg


def _elementwise_where(u: UOp) -> DType:
    if u.src[0].dtype.scalar is not dtypes.bool:
        raise _fail(u, f"the condition must be bool, got {u.src[0].dtype.name}")
    return _value_dtypes_must_match(u, u.src[1:])


def _elementwise_comparison(u: UOp) -> DType:
    dtype = _value_dtypes_must_match(u, u.src)
    return dtypes.bool.vec(dtype.count) if dtype.count > 1 else dtypes.bool


def _elementwise_integer(u: UOp) -> DType:
    dtype = _value_dtypes_must_match(u, u.src)
    scalar = dtype.scalar
    if not (scalar.is_int or (scalar.is_bool and u.op in (Ops.AND, Ops.OR, Ops.XOR))):
        raise _fail(u, f"{u.op.name} needs integer operands, got {dtype.name}")
    return dtype


def _elementwise_float(u: UOp) -> DType:
    dtype = _value_dtypes_must_match(u, u.src)
    if not dtype.scalar.is_float:
        raise _fail(u, f"{u.op.name} needs floating-point operands, got {dtype.name}")
    return dtype


def _elementwise_not(u: UOp) -> DType:
    dtype = u.src[0].dtype
    if not (dtype.scalar.is_bool or dtype.scalar.is_int):
        raise _fail(u, f"NOT needs a bool or integer operand, got {dtype.name}")
    return dtype


_ARITY = {
    op: 1 if op in GroupOp.UNARY_ALU else 3 if op in GroupOp.TERNARY_ALU else 2 for op in GroupOp.ELEMENTWISE
}
_ELEMENTWISE_SPECIAL: dict[Ops, Callable[[UOp], DType]] = {
    Ops.CAST: _elementwise_cast,
    Ops.WHERE: _elementwise_where,
    Ops.NOT: _elementwise_not,
    **{op: _elementwise_comparison for op in GroupOp.COMPARISON},
    **{op: _elementwise_integer for op in GroupOp.INTEGER_ONLY},
    **{
        op: _elementwise_float
        for op in (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.COS, Ops.TAN, Ops.SQRT, Ops.POW, Ops.RECIP, Ops.DIV)
    },
}


def _dtype_shape_threefry(u: UOp) -> tuple[DType, Shape]:
    if len(u.src) != 2:
        raise _fail(u, "THREEFRY takes (x, key)")
    for s in u.src:
        if s.dtype.scalar is not dtypes.uint64:
            raise _fail(u, f"THREEFRY works on uint64 (two packed uint32 words), got {s.dtype.name}")
    return u.src[0].dtype, broadcast_shapes(u, [s.shape for s in u.src])


def _same_as_first(u: UOp) -> tuple[DType, Shape]:
    if not u.src:
        raise _fail(u, "needs a source")
    return u.src[0].dtype, u.src[0].shape


def _dtype_shape_copy(u: UOp) -> tuple[DType, Shape]:
    if len(u.src) != 1:
        raise _fail(u, "COPY takes one source")
    return u.src[0].dtype, u.src[0].shape


def _dtype_shape_store(u: UOp) -> tuple[DType, Shape]:
    if len(u.src) not in (2, 3):
        raise _fail(u, "STORE takes (buf, val, gate?)")
    if u.src[0].shape != u.src[1].shape:
        raise _fail(u, f"buf.shape {u.src[0].shape} must equal val.shape {u.src[1].shape}")
    if u.src[0].dtype.scalar != u.src[1].dtype.scalar:
        raise _fail(u, f"storing {u.src[1].dtype.name} into a {u.src[0].dtype.name} buffer")
    return dtypes.void, ()


def _dtype_shape_range(u: UOp) -> tuple[DType, Shape]:
    if len(u.src) != 1 or u.src[0].shape != () or not u.src[0].dtype.is_int:
        raise _fail(u, "RANGE takes (bound,) with a scalar integer bound")
    if not (isinstance(u.arg, tuple) and len(u.arg) == 2 and isinstance(u.arg[1], AxisType)):
        raise _fail(u, f"RANGE's arg is (number, AxisType), got {u.arg}")
    return dtypes.index, ()


def _dtype_shape_special(u: UOp) -> tuple[DType, Shape]:
    if len(u.src) != 1 or not isinstance(u.arg, str):
        raise _fail(u, "SPECIAL takes (bound,) and a name")
    return dtypes.index, ()


def _dtype_shape_get_tuple(u: UOp) -> tuple[DType, Shape]:
    if len(u.src) != 1 or not isinstance(u.arg, int):
        raise _fail(u, "GET_TUPLE takes one source and an integer index")
    tuple_uop = u.src[0]
    if tuple_uop.op in (Ops.FUNCTION, Ops.CALL):
        tuple_uop = tuple_uop.src[0]
    if tuple_uop.op is not Ops.TUPLE:
        raise _fail(u, f"GET_TUPLE reads a TUPLE (or a FUNCTION/CALL of one), got {tuple_uop.op.name}")
    if not 0 <= u.arg < len(tuple_uop.src):
        raise _fail(u, f"index {u.arg} out of a tuple of {len(tuple_uop.src)}")
    element = tuple_uop.src[u.arg]
    return element.dtype, element.shape


def _dtype_shape_function(u: UOp) -> tuple[DType, Shape]:
    if not u.src:
        raise _fail(u, f"{u.op.name} needs a body")
    if u.op is Ops.FUNCTION and u.src[0].op is not Ops.TUPLE:
        raise _fail(u, f"a FUNCTION's body must be a TUPLE, got {u.src[0].op.name}")
    return u.src[0].dtype, u.src[0].shape


def _dtype_shape_vectorize(u: UOp) -> tuple[DType, Shape]:
    if not u.src:
        raise _fail(u, "VECTORIZE needs lanes")
    dtype = _value_dtypes_must_match(u, u.src)
    return dtype.vec(len(u.src)), ()


def _dtype_shape_gep(u: UOp) -> tuple[DType, Shape]:
    if len(u.src) != 1 or not isinstance(u.arg, tuple):
        raise _fail(u, "GEP takes one vector and a tuple of lanes")
    count = u.src[0].dtype.count
    if any(not 0 <= lane < count for lane in u.arg):
        raise _fail(u, f"lanes {u.arg} out of a {count}-lane vector")
    return u.src[0].dtype.scalar.vec(len(u.arg)), ()


def _dtype_shape_wmma(u: UOp) -> tuple[DType, Shape]:
    if len(u.src) != 3:
        raise _fail(u, "WMMA takes (A, B, acc)")
    return u.src[2].dtype, u.src[2].shape


def _dtype_from_arg_or_void(u: UOp) -> tuple[DType, Shape]:
    if isinstance(u.arg, tuple) and len(u.arg) == 2 and isinstance(u.arg[1], DType):
        return u.arg[1], ()
    return dtypes.void, ()


def _void(u: UOp) -> tuple[DType, Shape]:
    return dtypes.void, ()


_DTYPE_SHAPE: dict[Ops, Callable[[UOp], tuple[DType, Shape]]] = {
    Ops.CONST: _dtype_shape_const,
    Ops.BUFFER: _dtype_shape_buffer,
    Ops.PARAM: _dtype_shape_param,
    Ops.BINARY: _dtype_shape_binary,
    Ops.STACK: _dtype_shape_stack,
    Ops.RESHAPE: _dtype_shape_reshape,
    Ops.EXPAND: _dtype_shape_expand,
    Ops.PAD: _dtype_shape_pad,
    Ops.SHRINK: _dtype_shape_shrink,
    Ops.PERMUTE: _dtype_shape_permute,
    Ops.FLIP: _dtype_shape_flip,
    Ops.INDEX: _dtype_shape_index,
    Ops.REPLICATED: _dtype_shape_replicated,
    Ops.SLICE: _dtype_shape_slice,
    Ops.BITCAST: _dtype_shape_bitcast,
    Ops.REDUCE: _dtype_shape_reduce,
    Ops.THREEFRY: _dtype_shape_threefry,
    Ops.COPY: _dtype_shape_copy,
    Ops.LOAD: _same_as_first,
    Ops.STORE: _dtype_shape_store,
    Ops.AFTER: _same_as_first,
    Ops.CONTIGUOUS: _same_as_first,
    Ops.CONTIGUOUS_BACKWARD: _same_as_first,
    Ops.DETACH: _same_as_first,
    Ops.RANGE: _dtype_shape_range,
    Ops.SPECIAL: _dtype_shape_special,
    Ops.GET_TUPLE: _dtype_shape_get_tuple,
    Ops.FUNCTION: _dtype_shape_function,
    Ops.CALL: _dtype_shape_function,
    Ops.TUPLE: _void,
    Ops.VECTORIZE: _dtype_shape_vectorize,
    Ops.GEP: _dtype_shape_gep,
    Ops.WMMA: _dtype_shape_wmma,
    Ops.CUSTOM: _dtype_from_arg_or_void,
    Ops.INS: _dtype_from_arg_or_void,
}
for _op in GroupOp.ELEMENTWISE - {Ops.THREEFRY}:
    _DTYPE_SHAPE[_op] = _dtype_shape_elementwise


# ---------------------------------------------------------------------------------------------
# derived device


def _derive_device(u: UOp) -> Device:
    op, arg = u.op, u.arg
    if op is Ops.BUFFER:
        return arg.device
    if op is Ops.PARAM:
        return arg.device
    if op in (Ops.CONST, Ops.RANGE, Ops.STACK) and all(s.__dict__["_device"] is None for s in u.src):
        return None
    if op is Ops.COPY:
        return arg
    if op is Ops.LOAD and isinstance(arg, tuple) and arg and arg[0] is not None:
        return arg[0]
    if op in (Ops.FUNCTION, Ops.CALL):
        return u.src[1].__dict__["_device"] if len(u.src) > 1 else None
    # src[0].device per the table; a CONST operand (no device) defers to the next source
    for s in u.src:
        device = s.__dict__["_device"]
        if device is not None:
            return device
    return None


# ---------------------------------------------------------------------------------------------
# derived min_max


def _dtype_range(dtype: DType) -> tuple[Any, Any]:
    if dtype.kind.value == "void" or dtype.count > 1 and dtype.scalar.kind.value == "void":
        return (None, None)
    scalar = dtype.scalar
    return scalar.min, scalar.max


def _clamp_to(dtype: DType, low: Any, high: Any) -> tuple[Any, Any]:
    """Bounds that overflow the dtype's range fall back to the whole range (values would wrap)."""
    dmin, dmax = _dtype_range(dtype)
    if (
        low is None
        or high is None
        or (isinstance(low, float) and math.isnan(low))
        or (isinstance(high, float) and math.isnan(high))
    ):
        return dmin, dmax
    if low < dmin or high > dmax:
        return dmin, dmax
    if dtype.scalar.is_bool:
        return bool(low), bool(high)
    return low, high


def _mm(u: UOp, position: int) -> tuple[Any, Any]:
    return u.src[position].__dict__["_min_max"]


def _derive_min_max(u: UOp) -> tuple[Any, Any]:
    op, dtype = u.op, u.dtype
    if op is Ops.CONST:
        return u.arg[0], u.arg[0]
    if op is Ops.RANGE:
        return 0, _mm(u, 0)[1] - 1
    if op is Ops.SPECIAL:
        return 0, _mm(u, 0)[1] - 1
    if op is Ops.STACK:
        if not u.src:
            return _dtype_range(dtype)
        return min(_mm(u, i)[0] for i in range(len(u.src))), max(_mm(u, i)[1] for i in range(len(u.src)))
    if op is Ops.PAD:  # the zero fill is a value too (the table says src[0]; zero keeps it sound)
        low, high = _mm(u, 0)
        return (min(low, 0), max(high, 0)) if low is not None else (low, high)
    if (
        op in GroupOp.MOVEMENT - {Ops.BITCAST, Ops.SLICE}
        or op in (Ops.COPY, Ops.INDEX, Ops.AFTER)
        or op in GroupOp.MARKER
    ):
        return _mm(u, 0)
    if op is Ops.CAST:
        low, high = _mm(u, 0)
        if low is None:
            return _dtype_range(dtype)
        dmin, dmax = _dtype_range(dtype)
        if dtype.scalar.is_bool:
            return (bool(low) and bool(high) and not (low <= 0 <= high)), not (low == high == 0)
        if dtype.is_int:
            low, high = (
                math.floor(low) if math.isfinite(low) else low,
                math.floor(high) if math.isfinite(high) else high,
            )
        return max(dmin, min(dmax, low)), max(dmin, min(dmax, high))
    if op is Ops.ADD:
        (a, big_a), (b, big_b) = _mm(u, 0), _mm(u, 1)
        return _clamp_to(dtype, _safe(lambda: a + b), _safe(lambda: big_a + big_b))
    if op is Ops.MUL:
        (a, big_a), (b, big_b) = _mm(u, 0), _mm(u, 1)
        products = [_safe(lambda x=x, y=y: x * y) for x in (a, big_a) for y in (b, big_b)]
        if any(p is None or (isinstance(p, float) and math.isnan(p)) for p in products):
            return _dtype_range(dtype)
        return _clamp_to(dtype, min(products), max(products))
    if op is Ops.MAX:
        (a, big_a), (b, big_b) = _mm(u, 0), _mm(u, 1)
        return max(a, b), max(big_a, big_b)
    if op is Ops.CMP_LT:
        (a, big_a), (b, big_b) = _mm(u, 0), _mm(u, 1)
        if big_a < b:
            return True, True
        if a >= big_b:
            return False, False
        return False, True
    if op is Ops.CMP_NE:
        (a, big_a), (b, big_b) = _mm(u, 0), _mm(u, 1)
        if big_a < b or big_b < a:
            return True, True
        if a == big_a == b == big_b:
            return False, False
        return False, True
    if op is Ops.WHERE:
        (c, big_c), (b, big_b), (e, big_e) = _mm(u, 0), _mm(u, 1), _mm(u, 2)
        if c is True or (c == big_c and c):
            return b, big_b
        if big_c is False or (c == big_c and not c):
            return e, big_e
        return min(b, e), max(big_b, big_e)
    return _dtype_range(dtype)


def _safe(compute: Callable[[], Any]) -> Any:
    try:
        return compute()
    except (OverflowError, TypeError):
        return None


# ---------------------------------------------------------------------------------------------
# derived axis (multi-device shard dimension)


def _axis_of(u: UOp, position: int) -> int | None:
    return u.src[position].__dict__["_axis"]


def _derive_axis(u: UOp) -> int | None:
    op = u.op
    if op is Ops.BUFFER:
        return 0 if isinstance(u.arg.device, tuple) else None
    if op is Ops.PARAM:
        return 0 if isinstance(u.arg.device, tuple) else None
    if op is Ops.COPY:  # COPY to an n-tuple device reshards on axis 0; any other COPY gathers
        return 0 if isinstance(u.arg, tuple) else None
    if op in (Ops.CONST, Ops.RANGE, Ops.STACK, Ops.INDEX):
        return None
    if not u.src:
        return None
    axis = _axis_of(u, 0)
    if op is Ops.PERMUTE:
        return None if axis is None else u.arg.index(axis)
    if op is Ops.RESHAPE:
        return None if axis is None else _reshape_axis(u, axis)
    if op is Ops.REDUCE:
        return None if axis is None or axis in u.arg[1] else axis
    if op is Ops.REPLICATED:
        return None if axis is None or axis in u.arg else axis
    if op in GroupOp.ELEMENTWISE:
        for position in range(len(u.src)):
            if _axis_of(u, position) is not None:
                return _axis_of(u, position)
        return None
    if op in GroupOp.MOVEMENT or op in GroupOp.MARKER or op in (Ops.LOAD, Ops.AFTER):
        return axis
    return None


def _reshape_axis(u: UOp, axis: int) -> int:
    """The new position of the shard boundary: the axis with the same number of elements before it,
    whose size the device count divides (so each device's shard is a run of whole slices of it)."""
    old_shape, new_shape = u.src[0].shape, u.shape
    devices = u.src[0].device
    count = len(devices) if isinstance(devices, tuple) else 1
    before = math.prod(old_shape[:axis])
    for candidate in range(len(new_shape)):
        size = new_shape[candidate]
        if math.prod(new_shape[:candidate]) == before and size != 1 and size % count == 0:
            return candidate
    raise _fail(u, f"reshaping {old_shape} to {new_shape} breaks the shard boundary: axis {axis} (size "
                   f"{old_shape[axis]}) is sharded over {count} devices, {old_shape[axis] // count} each, "
                   f"and no axis of {new_shape} splits into those shards")


# ---------------------------------------------------------------------------------------------
# printing


def _short_arg(u: UOp) -> str:
    arg = u.arg
    # (a malformed CONST or RANGE arg is printed as it is: this also writes UOpError's message)
    well_formed = isinstance(arg, tuple) and len(arg) == 2 and hasattr(arg[1], "name")
    if u.op is Ops.CONST and well_formed:
        return f"{arg[0]!r}:{arg[1].name}"
    if u.op is Ops.RANGE and well_formed:
        return f"r{arg[0]}:{arg[1].name}"
    if isinstance(arg, DType):
        return arg.name
    if isinstance(arg, tuple) and arg and isinstance(arg[0], Ops):
        return f"({arg[0].name}, {arg[1]})"
    if isinstance(arg, bytes | bytearray):
        return f"<{len(arg)} bytes>"
    text = repr(arg)
    return text if len(text) <= 60 else text[:57] + "..."


def inline_text(u: UOp) -> str | None:
    """How a constant-like UOp is written inline where it is used (None: it gets its own line)."""
    if u.op is Ops.CONST:
        return repr(u.arg[0])
    if u.op is Ops.STACK and u.dtype is dtypes.index and all(s.op is Ops.CONST for s in u.src):
        return "(" + ", ".join(str(s.arg[0]) for s in u.src) + ("," if len(u.src) == 1 else "") + ")"
    return None


def format_graph(root: UOp) -> str:
    """The graph as text: each UOp once, named ``%N``, referred to by name; constants written inline.

    Each line: ``%N = OP src... [arg] : dtype shape``.
    """
    return "\n".join(graph_lines(root)[0])


def graph_lines(
    root: UOp, names: Mapping[UOp, str] | None = None, first_new: int = 0, tags: bool = False
) -> tuple[list[str], dict[UOp, str]]:
    """:func:`format_graph`'s lines, and the name each UOp got.  ``names`` fixes the names of some
    UOps (a graph's names before a rewrite, say); the others are numbered ``%first_new``, ``%first_new
    + 1``, ...  ``tags``: a node's tag is written after its type."""
    given = names or {}
    lines: list[str] = []
    named: dict[UOp, str] = {}
    fresh = first_new
    for u in root.toposort():
        if inline_text(u) is not None and u is not root:
            named[u] = inline_text(u)
            continue
        name = given.get(u)
        if name is None:
            name, fresh = f"%{fresh}", fresh + 1
        named[u] = name
        parts = [f"{name} = {u.op.name}"]
        if u.src:
            parts.append(", ".join(named[s] for s in u.src))
        if u.arg is not None and not (u.op is Ops.STACK and isinstance(u.arg, DType)):
            parts.append(f"[{_short_arg(u)}]")
        type_text = u.dtype.name + (f" {u.shape}" if u.shape else "")
        tag_text = f"  tag={u.tag!r}" if tags and u.tag is not None else ""
        lines.append(" ".join(parts) + f"  : {type_text}{tag_text}")
    return lines, named
