"""The derived properties of a UOp, one rule per op (the spec's table): ``dtype`` and ``shape``,
computed at construction (this is the validation: a malformed UOp raises :class:`UOpError`), and
``device``, ``min_max`` and ``axis``, computed on first use.

The rules read a UOp's fields and its sources' derived values through
:class:`~uopviz.core.uop_types.UOpNode`; they build no UOp, so this module does not import
:mod:`uopviz.core.uop`, which calls them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from uopviz.core.dtype import DType, dtypes
from uopviz.core.ops import AxisType, GroupOp, Ops
from uopviz.core.uop_printing import short_arg
from uopviz.core.uop_types import BufferArg, Device, ParamArg, Shape, UOpError, UOpNode


def read_ints(u: UOpNode) -> tuple[int, ...]:
    """Read a shape/offset STACK back to a tuple of ints."""
    if u.op is not Ops.STACK or any(s.op is not Ops.CONST for s in u.src):
        raise UOpError(f"expected a constant shape (a STACK of CONSTs), got {u.op.name}")
    return tuple(s.arg[0] for s in u.src)


# ---------------------------------------------------------------------------------------------
# derived dtype and shape: computed at construction, this is the validation


def _fail(u: UOpNode, problem: str) -> UOpError:
    sources = ", ".join(f"{s.op.name}{s.shape}:{s.dtype.name}" for s in u.src) or "none"
    return UOpError(f"{u.op.name}: {problem} (sources: {sources}; arg: {short_arg(u)})")


def broadcast_shapes(u: UOpNode, shapes: Sequence[Shape]) -> Shape:
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


def _value_dtypes_must_match(u: UOpNode, values: Sequence[UOpNode]) -> DType:
    first = values[0].dtype
    if all(v.dtype is first for v in values):
        return first
    kinds = {v.dtype for v in values}
    if len(kinds) > 1:
        raise _fail(u, f"operands have different dtypes {sorted(d.name for d in kinds)}; cast one first")
    return values[0].dtype


def derive_dtype_shape(u: UOpNode) -> tuple[DType, Shape]:
    """``u``'s dtype and shape by its op's rule (:data:`_DTYPE_SHAPE`): the validation of a UOp being
    built; a malformed one raises :class:`UOpError`.  An op with no rule is ``void`` of shape ``()``."""
    rule = _DTYPE_SHAPE.get(u.op)
    if rule is None:
        return dtypes.void, ()
    return rule(u)


def _dtype_shape_const(u: UOpNode) -> tuple[DType, Shape]:
    if not (isinstance(u.arg, tuple) and len(u.arg) == 2 and isinstance(u.arg[1], DType)):
        raise _fail(u, "arg must be (value, dtype); use UOp.const(dtype, value)")
    if u.src:
        raise _fail(u, "CONST takes no sources")
    return u.arg[1], ()


def _dtype_shape_buffer(u: UOpNode) -> tuple[DType, Shape]:
    arg = u.arg
    if not isinstance(arg, BufferArg):
        raise _fail(u, "arg must be a BufferArg; use UOp.buffer(size, dtype, device)")
    if arg.size < 0:
        raise _fail(u, f"negative size {arg.size}")
    copies = len(arg.device) if isinstance(arg.device, tuple) else 1
    return arg.dtype, (copies * arg.size,)


def _dtype_shape_param(u: UOpNode) -> tuple[DType, Shape]:
    if not isinstance(u.arg, ParamArg) or len(u.src) != 1:
        raise _fail(u, "PARAM takes (shape,) and a ParamArg; use UOp.param(slot, shape, dtype)")
    return u.arg.dtype, read_ints(u.src[0])


def _dtype_shape_binary(u: UOpNode) -> tuple[DType, Shape]:
    if not isinstance(u.arg, bytes | bytearray):
        raise _fail(u, "BINARY's arg must be bytes")
    return dtypes.uint8, (len(u.arg),)


def _dtype_shape_stack(u: UOpNode) -> tuple[DType, Shape]:
    if not u.src:
        return (u.arg if isinstance(u.arg, DType) else dtypes.index), (0,)
    shapes = {s.shape for s in u.src}
    if len(shapes) > 1:
        raise _fail(u, f"all stacked shapes must match, got {sorted(shapes)}")
    return _value_dtypes_must_match(u, u.src), (len(u.src), *u.src[0].shape)


def _check_movement_source(u: UOpNode, count: int) -> Shape:
    if len(u.src) != count:
        raise _fail(u, f"expects {count} sources, got {len(u.src)}")
    return u.src[0].shape


def _dtype_shape_reshape(u: UOpNode) -> tuple[DType, Shape]:
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


def _dtype_shape_expand(u: UOpNode) -> tuple[DType, Shape]:
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


def _dtype_shape_pad(u: UOpNode) -> tuple[DType, Shape]:
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


def _dtype_shape_shrink(u: UOpNode) -> tuple[DType, Shape]:
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


def _dtype_shape_permute(u: UOpNode) -> tuple[DType, Shape]:
    shape = _check_movement_source(u, 1)
    order = u.arg
    if not isinstance(order, tuple) or sorted(order) != list(range(len(shape))):
        raise _fail(u, f"{order} is not a permutation of the {len(shape)} axes of {shape}")
    return u.src[0].dtype, tuple(shape[i] for i in order)


def _dtype_shape_flip(u: UOpNode) -> tuple[DType, Shape]:
    shape = _check_movement_source(u, 1)
    if not isinstance(u.arg, tuple) or len(u.arg) != len(shape):
        raise _fail(u, f"needs one flag per axis of {shape}, got {u.arg}")
    return u.src[0].dtype, shape


def _dtype_shape_index(u: UOpNode) -> tuple[DType, Shape]:
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


def _dtype_shape_replicated(u: UOpNode) -> tuple[DType, Shape]:
    shape = _check_movement_source(u, 1)
    axes = u.arg
    if not isinstance(axes, tuple) or any(not 0 <= a < len(shape) for a in axes):
        raise _fail(u, f"axes {axes} are not axes of {shape}")
    return u.src[0].dtype, tuple(1 if i in axes else s for i, s in enumerate(shape))


def _dtype_shape_slice(u: UOpNode) -> tuple[DType, Shape]:
    if len(u.src) != 2 or not (isinstance(u.arg, tuple) and len(u.arg) == 2):
        raise _fail(u, "SLICE takes (T, offset) and arg (size, dtype)")
    size, dtype = u.arg
    return dtype, (size,)


def _dtype_shape_bitcast(u: UOpNode) -> tuple[DType, Shape]:
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


def _dtype_shape_reduce(u: UOpNode) -> tuple[DType, Shape]:
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


def _dtype_shape_elementwise(u: UOpNode) -> tuple[DType, Shape]:
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


def _elementwise_cast(u: UOpNode) -> DType:
    if not isinstance(u.arg, DType):
        raise _fail(u, "CAST's arg is the target dtype")
    return u.arg


def _elementwise_where(u: UOpNode) -> DType:
    if u.src[0].dtype.scalar is not dtypes.bool:
        raise _fail(u, f"the condition must be bool, got {u.src[0].dtype.name}")
    return _value_dtypes_must_match(u, u.src[1:])


def _elementwise_comparison(u: UOpNode) -> DType:
    dtype = _value_dtypes_must_match(u, u.src)
    return dtypes.bool.vec(dtype.count) if dtype.count > 1 else dtypes.bool


def _elementwise_integer(u: UOpNode) -> DType:
    dtype = _value_dtypes_must_match(u, u.src)
    scalar = dtype.scalar
    if not (scalar.is_int or (scalar.is_bool and u.op in (Ops.AND, Ops.OR, Ops.XOR))):
        raise _fail(u, f"{u.op.name} needs integer operands, got {dtype.name}")
    return dtype


def _elementwise_float(u: UOpNode) -> DType:
    dtype = _value_dtypes_must_match(u, u.src)
    if not dtype.scalar.is_float:
        raise _fail(u, f"{u.op.name} needs floating-point operands, got {dtype.name}")
    return dtype


def _elementwise_not(u: UOpNode) -> DType:
    dtype = u.src[0].dtype
    if not (dtype.scalar.is_bool or dtype.scalar.is_int):
        raise _fail(u, f"NOT needs a bool or integer operand, got {dtype.name}")
    return dtype


_ARITY = {
    op: 1 if op in GroupOp.UNARY_ALU else 3 if op in GroupOp.TERNARY_ALU else 2 for op in GroupOp.ELEMENTWISE
}
_ELEMENTWISE_SPECIAL: dict[Ops, Callable[[UOpNode], DType]] = {
    Ops.CAST: _elementwise_cast,
    Ops.WHERE: _elementwise_where,
    Ops.NOT: _elementwise_not,
    **{op: _elementwise_comparison for op in GroupOp.COMPARISON},
    **{op: _elementwise_integer for op in GroupOp.INTEGER_ONLY},
    **{
        op: _elementwise_float
        for op in (Ops.EXP2, Ops.LOG2, Ops.EXP, Ops.LOG, Ops.SIN, Ops.COS, Ops.TAN, Ops.SQRT, Ops.POW,
                   Ops.RECIP, Ops.DIV)
    },
}


def _dtype_shape_threefry(u: UOpNode) -> tuple[DType, Shape]:
    if len(u.src) != 2:
        raise _fail(u, "THREEFRY takes (x, key)")
    for s in u.src:
        if s.dtype.scalar is not dtypes.uint64:
            raise _fail(u, f"THREEFRY works on uint64 (two packed uint32 words), got {s.dtype.name}")
    return u.src[0].dtype, broadcast_shapes(u, [s.shape for s in u.src])


def _same_as_first(u: UOpNode) -> tuple[DType, Shape]:
    if not u.src:
        raise _fail(u, "needs a source")
    return u.src[0].dtype, u.src[0].shape


def _dtype_shape_copy(u: UOpNode) -> tuple[DType, Shape]:
    if len(u.src) != 1:
        raise _fail(u, "COPY takes one source")
    return u.src[0].dtype, u.src[0].shape


def _dtype_shape_store(u: UOpNode) -> tuple[DType, Shape]:
    if len(u.src) not in (2, 3):
        raise _fail(u, "STORE takes (buf, val, gate?)")
    if u.src[0].shape != u.src[1].shape:
        raise _fail(u, f"buf.shape {u.src[0].shape} must equal val.shape {u.src[1].shape}")
    if u.src[0].dtype.scalar != u.src[1].dtype.scalar:
        raise _fail(u, f"storing {u.src[1].dtype.name} into a {u.src[0].dtype.name} buffer")
    return dtypes.void, ()


def _dtype_shape_range(u: UOpNode) -> tuple[DType, Shape]:
    if len(u.src) != 1 or u.src[0].shape != () or not u.src[0].dtype.is_int:
        raise _fail(u, "RANGE takes (bound,) with a scalar integer bound")
    if not (isinstance(u.arg, tuple) and len(u.arg) == 2 and isinstance(u.arg[1], AxisType)):
        raise _fail(u, f"RANGE's arg is (number, AxisType), got {u.arg}")
    return dtypes.index, ()


def _dtype_shape_special(u: UOpNode) -> tuple[DType, Shape]:
    if len(u.src) != 1 or not isinstance(u.arg, str):
        raise _fail(u, "SPECIAL takes (bound,) and a name")
    return dtypes.index, ()


def _dtype_shape_get_tuple(u: UOpNode) -> tuple[DType, Shape]:
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


def _dtype_shape_function(u: UOpNode) -> tuple[DType, Shape]:
    if not u.src:
        raise _fail(u, f"{u.op.name} needs a body")
    if u.op is Ops.FUNCTION and u.src[0].op is not Ops.TUPLE:
        raise _fail(u, f"a FUNCTION's body must be a TUPLE, got {u.src[0].op.name}")
    return u.src[0].dtype, u.src[0].shape


def _dtype_shape_vectorize(u: UOpNode) -> tuple[DType, Shape]:
    if not u.src:
        raise _fail(u, "VECTORIZE needs lanes")
    dtype = _value_dtypes_must_match(u, u.src)
    return dtype.vec(len(u.src)), ()


def _dtype_shape_gep(u: UOpNode) -> tuple[DType, Shape]:
    if len(u.src) != 1 or not isinstance(u.arg, tuple):
        raise _fail(u, "GEP takes one vector and a tuple of lanes")
    count = u.src[0].dtype.count
    if any(not 0 <= lane < count for lane in u.arg):
        raise _fail(u, f"lanes {u.arg} out of a {count}-lane vector")
    return u.src[0].dtype.scalar.vec(len(u.arg)), ()


def _dtype_shape_wmma(u: UOpNode) -> tuple[DType, Shape]:
    if len(u.src) != 3:
        raise _fail(u, "WMMA takes (A, B, acc)")
    return u.src[2].dtype, u.src[2].shape


def _dtype_from_arg_or_void(u: UOpNode) -> tuple[DType, Shape]:
    if isinstance(u.arg, tuple) and len(u.arg) == 2 and isinstance(u.arg[1], DType):
        return u.arg[1], ()
    return dtypes.void, ()


def _void(u: UOpNode) -> tuple[DType, Shape]:
    return dtypes.void, ()


_DTYPE_SHAPE: dict[Ops, Callable[[UOpNode], tuple[DType, Shape]]] = {
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


def derive_device(u: UOpNode) -> Device:
    """The device ``u`` lives on (None: anywhere, as a constant), from its sources' devices."""
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


def _mm(u: UOpNode, position: int) -> tuple[Any, Any]:
    return u.src[position].__dict__["_min_max"]


def derive_min_max(u: UOpNode) -> tuple[Any, Any]:
    """The least and greatest values ``u`` can take (the spec's min_max), from its sources' (an op
    with no rule gets its dtype's whole range)."""
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


def _axis_of(u: UOpNode, position: int) -> int | None:
    return u.src[position].__dict__["_axis"]


def derive_axis(u: UOpNode) -> int | None:
    """The axis a multi-device ``u`` is sharded along (None: replicated or on one device)."""
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


def _reshape_axis(u: UOpNode, axis: int) -> int:
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
