"""Translators of the NNEF 1.0 operations into invocations of the SkriptND standard library, one
function ``(translation, op) -> None`` per kind (elementwise math, activations, convolutions,
poolings and the other sliding windows, layout changes, reductions, linear algebra, normalisation,
resampling), and :data:`OPERATION_TRANSLATORS`, the 1.0 operation names they serve.  1.0 and
SkriptND differ in broadcasting, bias shapes, padding and borders; the module docstring of
:mod:`uopviz.nnef.nnef1.loader` says how each difference is bridged."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from uopviz.nnef.errors import NNEFError
from uopviz.nnef.nnef1.translation import SKRIPTND_TYPES, Translation, literal, nnef_shapes

_UNARY_MATH = (
    "copy",
    "neg",
    "rcp",
    "exp",
    "log",
    "sin",
    "cos",
    "tan",
    "sinh",
    "cosh",
    "tanh",
    "asin",
    "acos",
    "atan",
    "asinh",
    "acosh",
    "atanh",
    "abs",
    "sign",
    "not",
    "floor",
    "ceil",
    "round",
    "sqr",
    "sqrt",
    "rsqr",
    "rsqrt",
    "log2",
)
_BINARY_MATH = (
    "add",
    "sub",
    "mul",
    "div",
    "pow",
    "lt",
    "gt",
    "le",
    "ge",
    "eq",
    "ne",
    "and",
    "or",
    "min",
    "max",
)
_ACTIVATIONS = ("sigmoid", "softplus", "silu", "gelu")


def _unary(t: Translation, op: Any) -> None:
    name = "iden" if op.name == "copy" else op.name
    (x,) = op.inputs.values()
    t.emit(t.result(op), f"math.{name}({t.arg(x)})")


def _binary(t: Translation, op: Any) -> None:
    x, y = op.inputs.values()
    t.emit(t.result(op), f"math.{op.name}{{lhs_align=0, rhs_align=0}}({t.arg(x)}, {t.arg(y)})")


def _select(t: Translation, op: Any) -> None:
    c, x, y = op.inputs.values()
    t.emit(
        t.result(op),
        f"math.select{{cond_align=0, lhs_align=0, rhs_align=0}}({t.arg(c)}, {t.arg(x)}, {t.arg(y)})",
    )


def _clamp(t: Translation, op: Any) -> None:
    x, a, b = op.inputs.values()
    t.emit(
        t.result(op),
        f"math.clamp{{val_align=0, min_align=0, max_align=0}}({t.arg(x)}, {t.arg(a)}, {t.arg(b)})",
    )


def _activation(t: Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    t.emit(t.result(op), f"nn.{op.name}({t.arg(x)})")


def _relu(t: Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    t.emit(t.result(op), f"nn.relu({t.arg(x)})")


def _leaky_relu(t: Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    t.emit(t.result(op), f"nn.relu{{alpha={literal(float(op.attribs['alpha']))}}}({t.arg(x)})")


def _elu(t: Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    t.emit(t.result(op), f"nn.elu{{alpha={literal(float(op.attribs.get('alpha', 1.0)))}}}({t.arg(x)})")


def _selu(t: Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    attribs = op.attribs
    t.emit(
        t.result(op),
        f"nn.selu{{alpha={literal(float(attribs['alpha']))}, "
        f"lambda={literal(float(attribs['lambda']))}}}({t.arg(x)})",
    )


def _prelu(t: Translation, op: Any) -> None:
    x, alpha = op.inputs.values()
    negative, scaled = t.temporary(), t.temporary()
    t.emit(negative, f"math.lt{{lhs_align=0, rhs_align=0}}({t.arg(x)}, 0.0)")
    t.emit(scaled, f"math.mul{{lhs_align=0, rhs_align=0}}({t.arg(x)}, {t.arg(alpha)})")
    t.emit(t.result(op), f"math.select({negative}, {scaled}, {t.arg(x)})")


def _channels(t: Translation, value: Any, channels: int | None = None) -> str | None:
    """A ``[1, C]`` parameter as the ``[C]`` SkriptND wants; None for the literal 0."""
    if not t.is_tensor(value):
        if value == 0 or value == 0.0:
            return None
        if channels is None:
            raise NNEFError(f"a literal parameter {value!r} needs a known channel count")
        name = t.temporary()
        t.emit(name, f"layout.uniform{{shape=[{channels}]}}({literal(float(value))})")
        return name
    shape = t.shape(value)
    if len(shape) == 1:
        return t.name(value)
    if len(shape) == 2 and shape[0] == 1:
        name = t.temporary()
        t.emit(name, f"layout.squeeze{{axes=[0]}}({t.name(value)})")
        return name
    if shape == [] or all(extent == 1 for extent in shape):
        if channels is None:
            raise NNEFError(f"the parameter '{value}' of shape {shape} needs a known channel count")
        flat, name = t.temporary(), t.temporary()
        t.emit(
            flat,
            f"layout.reshape{{shape=[1]}}({t.name(value)})"
            if shape
            else f"layout.unsqueeze{{axes=[0]}}({t.name(value)})",
        )
        t.emit(name, f"layout.tile{{repeats=[{channels}]}}({flat})")
        return name
    raise NNEFError(f"the parameter '{value}' of shape {shape} should be [1, C]")


def _same_padding(sizes: list[int], kernel: list[int], stride: list[int], dilation: list[int]) -> list[int]:
    """NNEF 1.0's automatic padding: output ceil(input / stride), the odd unit after."""
    before, after = [], []
    for size, k, s, d in zip(sizes, kernel, stride, dilation, strict=True):
        extent = (k - 1) * d + 1
        total = max((-(-size // s) - 1) * s + extent - size, 0)
        before.append(total // 2)
        after.append(total - total // 2)
    return before + after


def _pairs(padding: list) -> list[int]:
    return [p[0] for p in padding] + [p[1] for p in padding]


_PAD_METHODS = {"reflect": "REFLECT", "replicate": "REPLICATE", "reflect-even": "SYMMETRIC"}
_BORDERS = ("constant", "ignore", *_PAD_METHODS)


def _check_border(t: Translation, op_name: str, border: str, allowed: tuple[str, ...] = _BORDERS) -> None:
    if border not in allowed:
        raise NNEFError(
            f"NNEF 1.0 operation {t.index} '{op_name}': border '{border}' is not supported here "
            f"(supported: {', '.join(allowed)})"
        )


def _padded(t: Translation, source: str, padding: list[int], border: str, value: float = 0.0) -> str:
    """``source`` padded by ``padding`` (befores, then afters) as the 1.0 ``border`` says; a
    constant border pads with ``value``."""
    if not any(padding):
        return source
    name = t.temporary()
    if border in _PAD_METHODS:
        t.emit(name, f"layout.pad{{padding={literal(padding)}, method='{_PAD_METHODS[border]}'}}({source})")
    else:
        extra = f", {literal(float(value))}" if value else ""
        t.emit(name, f"layout.pad{{padding={literal(padding)}}}({source}{extra})")
    return name


def _conv(t: Translation, op: Any) -> None:
    x, w, b = op.inputs.values()
    _emit_conv(t, op.name, t.result(op), t.arg(x), t.shape(x), t.arg(w), t.shape(w), b, dict(op.attribs))


def _emit_conv(
    t: Translation,
    kind: str,
    result: str,
    x: str,
    xs: list[int],
    w: str,
    ws: list[int],
    b: Any,
    attribs: dict[str, Any],
) -> None:
    """One 1.0 ``conv`` or ``deconv`` (``kind``) of ``x`` (shape ``xs``) and ``w``: a border other
    than 'constant' / 'ignore' (which both leave the padded terms out) pads ``x`` first."""
    border = attribs.get("border", "constant")
    _check_border(t, kind, border, _BORDERS if kind == "conv" else ("constant", "ignore"))
    d = len(xs) - 2
    stride = attribs.get("stride") or [1] * d
    dilation = attribs.get("dilation") or [1] * d
    groups = attribs.get("groups", 1)
    if kind == "conv":
        padding = (
            _pairs(attribs["padding"])
            if attribs.get("padding")
            else _same_padding(xs[2:], ws[2:], stride, dilation)
        )
        if border in _PAD_METHODS:
            x, padding = _padded(t, x, [0, 0] + padding[:d] + [0, 0] + padding[d:], border), [0] * (2 * d)
        bias = _channels(t, b, ws[0])
        extra = ""
    else:
        padding = _pairs(attribs["padding"]) if attribs.get("padding") else None
        channels = ws[1] * (xs[1] if groups == 0 else groups)
        bias = _channels(t, b, channels)
        output_shape = attribs.get("output_shape") or []
        extra = f", output_size={literal(list(output_shape[2:]))}" if output_shape else ""
        if padding is None and not output_shape:  # 'same': output input * stride
            sizes = [i * s for i, s in zip(xs[2:], stride, strict=True)]
            extra = f", output_size={literal(sizes)}"
            fd = [(k - 1) * dl + 1 for k, dl in zip(ws[2:], dilation, strict=True)]
            totals = [(i - 1) * s + f - o for i, s, f, o in zip(xs[2:], stride, fd, sizes, strict=True)]
            padding = [total // 2 for total in totals] + [total - total // 2 for total in totals]
    attributes = [
        f"stride={literal(list(stride))}",
        f"dilation={literal(list(dilation))}",
        f"groups={groups}",
    ]
    if padding is not None:
        attributes.append(f"padding={literal(padding)}")
    arguments = [x, w] + ([bias] if bias is not None else [])
    t.emit(result, f"nn.{kind}{{{', '.join(attributes)}{extra}}}({', '.join(arguments)})")


def _separable_conv(t: Translation, op: Any) -> None:
    x, plane, point, b = op.inputs.values()
    attribs = dict(op.attribs)
    xs, plane_shape, point_shape = t.shape(x), t.shape(plane), t.shape(point)
    d = len(xs) - 2
    if op.name == "separable_conv":  # the 1.0 definition: a plane-wise conv, then a point-wise one
        plane_attribs = {**attribs, "groups": 0}
        filtered_shape = nnef_shapes().conv_shape(
            xs,
            plane_shape,
            [],
            attribs["border"],
            attribs["padding"],
            attribs["stride"],
            attribs["dilation"],
            0,
        )
        filtered = t.temporary()
        _emit_conv(t, "conv", filtered, t.arg(x), xs, t.arg(plane), plane_shape, 0.0, plane_attribs)
        point_attribs = {"groups": attribs["groups"], "padding": [(0, 0)] * d}
        _emit_conv(
            t, "conv", t.result(op), filtered, filtered_shape, t.arg(point), point_shape, b, point_attribs
        )
        return
    # separable_deconv: the point-wise deconv first, then the plane-wise one
    point_attribs = {"groups": attribs["groups"], "padding": [(0, 0)] * d}
    filtered_shape = nnef_shapes().conv_shape(
        xs, point_shape, [], "constant", [(0, 0)] * d, [], [], attribs["groups"], transposed=True
    )
    filtered = t.temporary()
    _emit_conv(t, "deconv", filtered, t.arg(x), xs, t.arg(point), point_shape, 0.0, point_attribs)
    plane_attribs = {**attribs, "groups": 0}
    _emit_conv(
        t, "deconv", t.result(op), filtered, filtered_shape, t.arg(plane), plane_shape, b, plane_attribs
    )


def _window(t: Translation, attribs: Mapping[str, Any], shape: list[int], size: list[int]) -> tuple:
    """A 1.0 window's stride, dilation and padding (befores, then afters) over every dimension of
    ``shape``; empty padding is 'same' (output ceil(input / stride))."""
    rank = len(shape)
    stride = list(attribs.get("stride") or [1] * rank)
    dilation = list(attribs.get("dilation") or [1] * rank)
    padding = (
        _pairs(attribs["padding"]) if attribs.get("padding") else _same_padding(shape, size, stride, dilation)
    )
    return stride, dilation, padding


def _pool(t: Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    kind = {"max_pool": "max", "avg_pool": "avg", "rms_pool": "rms", "box": "sum"}[op.name]
    if op.name == "box" and op.attribs.get("normalize"):
        kind = "avg"
    emit_pool(t, op.name, t.result(op), t.arg(x), t.shape(x), kind, list(op.attribs["size"]), op.attribs)


def emit_pool(
    t: Translation,
    op_name: str,
    result: str,
    source: str,
    shape: list[int],
    kind: str,
    size: list[int],
    attribs: Mapping[str, Any],
) -> None:
    """A 1.0 pooling (``kind``: max, avg, rms or sum) over every dimension of ``source``.

    Borders: 'constant' pads with zeros that take part (an average divides by the whole window),
    'ignore' leaves the padding out (an average divides by the elements inside), the others pad
    the input the way pad does before pooling without padding."""
    border = attribs.get("border", "constant")
    _check_border(t, op_name, border)
    rank = len(shape)
    stride, dilation, padding = _window(t, attribs, shape, size)
    if border in _PAD_METHODS or (kind == "max" and border == "constant"):
        source, padding = _padded(t, source, padding, border), [0] * (2 * rank)
    extra = ""
    if kind in ("avg", "rms"):
        extra = f", ignore_border={literal(border == 'ignore')}"
    t.emit(
        result,
        f"nn.{kind}_pool{{axes={literal(list(range(rank)))}, size={literal(size)}, "
        f"stride={literal(stride)}, dilation={literal(dilation)}, padding={literal(padding)}"
        f"{extra}}}({source})",
    )


def _window_strides(size: list[int]) -> list[int]:
    """Row-major strides of a window of ``size``: how a flat window element unflattens."""
    strides = [1] * len(size)
    for axis in range(len(size) - 2, -1, -1):
        strides[axis] = strides[axis + 1] * size[axis + 1]
    return strides


def _window_attributes(size: list[int], stride: list[int], dilation: list[int]) -> str:
    return (
        f"size={literal(size)}, window_strides={literal(_window_strides(size))}, "
        f"stride={literal(stride)}, dilation={literal(dilation)}"
    )


def _argmax_pool(t: Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    shape, size = t.shape(x), list(op.attribs["size"])
    border = op.attribs.get("border", "constant")
    _check_border(t, op.name, border)
    stride, dilation, padding = _window(t, op.attribs, shape, size)
    padded = _padded(t, t.arg(x), padding, border, -math.inf if border == "ignore" else 0.0)
    t.emit_helper(
        t.result(op),
        f"nnef1.argmax_pool{{{_window_attributes(size, stride, dilation)}, "
        f"volume={math.prod(size)}}}({padded})",
    )


def _sample(t: Translation, op: Any) -> None:
    x, index = list(op.inputs.values())[:2]
    _emit_sample(t, op.name, t.result(op), t.arg(x), t.shape(x), t.arg(index), op.attribs)


def _emit_sample(
    t: Translation,
    op_name: str,
    result: str,
    x: str,
    shape: list[int],
    index: str,
    attribs: Mapping[str, Any],
) -> None:
    size = list(attribs["size"])
    border = attribs.get("border", "constant")
    _check_border(t, op_name, border)
    stride, dilation, padding = _window(t, attribs, shape, size)
    padded = _padded(t, x, padding, border)  # 'ignore': argmax_pool's indices never name the padding
    t.emit_helper(result, f"nnef1.sample{{{_window_attributes(size, stride, dilation)}}}({padded}, {index})")


def _max_pool_with_index(t: Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    index = t.result(op, "index")
    _argmax_pool(t, _Renamed(op, "argmax_pool", {"index": op.outputs["index"]}))
    _emit_sample(t, op.name, t.result(op, "output"), t.arg(x), t.shape(x), index, op.attribs)


class _Renamed:
    """An operation seen under another name with other outputs (a compound's first part)."""

    def __init__(self, op: Any, name: str, outputs: dict[str, Any]) -> None:
        self.name, self.inputs, self.attribs, self.outputs, self.dtype = (
            name,
            op.inputs,
            op.attribs,
            outputs,
            op.dtype,
        )


def _unpooling_window(t: Translation, op: Any, input_shape: list[int]) -> tuple:
    """Size, stride, dilation, padding befores and output shape of desample and debox; empty
    padding is 'same' as seen from the output (the pooling that the operation transposes)."""
    size = list(op.attribs["size"])
    output_shape = t.shape(t.result_name(op))
    border = op.attribs.get("border", "constant")
    _check_border(t, op.name, border, ("constant", "ignore"))
    stride, dilation, padding = _window(t, op.attribs, output_shape, size)
    return size, stride, dilation, padding[: len(input_shape)], output_shape


def _desample(t: Translation, op: Any) -> None:
    x, index = op.inputs.values()
    size, stride, dilation, offset, output_shape = _unpooling_window(t, op, t.shape(x))
    t.emit_helper(
        t.result(op),
        f"nnef1.desample{{{_window_attributes(size, stride, dilation)}, offset={literal(offset)}, "
        f"output_shape={literal(output_shape)}}}({t.arg(x)}, {t.arg(index)})",
    )


def _debox(t: Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    size, stride, dilation, offset, output_shape = _unpooling_window(t, op, t.shape(x))
    scale = 1.0 / math.prod(size) if op.attribs.get("normalize") else 1.0
    t.emit_helper(
        t.result(op),
        f"nnef1.debox{{size={literal(size)}, stride={literal(stride)}, dilation={literal(dilation)}, "
        f"offset={literal(offset)}, output_shape={literal(output_shape)}, scale={literal(scale)}}}"
        f"({t.arg(x)})",
    )


def _reshape(t: Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    shape = t.shape(x)
    attribs = op.attribs
    start = attribs.get("axis_start", 0)
    count = attribs.get("axis_count", -1)
    count = len(shape) - start if count == -1 else count
    new = [shape[start + i] if value == 0 else value for i, value in enumerate(attribs["shape"])]
    t.emit(t.result(op), f"layout.reshape{{axis={start}, rank={count}, shape={literal(new)}}}({t.arg(x)})")


def _axes_op(layout_name: str) -> Callable[[Translation, Any], None]:
    def translate_op(t: Translation, op: Any) -> None:
        (x,) = op.inputs.values()
        t.emit(t.result(op), f"layout.{layout_name}{{axes={literal(list(op.attribs['axes']))}}}({t.arg(x)})")

    return translate_op


def _transpose(t: Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    perm = list(op.attribs["axes"])
    perm += list(range(len(perm), len(t.shape(x))))
    t.emit(t.result(op), f"layout.transpose{{perm={literal(perm)}}}({t.arg(x)})")


def _concat(t: Translation, op: Any) -> None:
    (values,) = op.inputs.values()
    t.emit(t.result(op), f"layout.concat{{axis={op.attribs['axis']}}}({t.arg(list(values))})")


def _split(t: Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    axis, ratios = op.attribs["axis"], list(op.attribs["ratios"])
    extent = t.shape(x)[axis]
    unit, remainder = divmod(extent, sum(ratios))
    if remainder:
        raise NNEFError(f"split: the extent {extent} is not divisible by the sum of the ratios {ratios}")
    sizes = [unit * ratio for ratio in ratios]
    t.emit(t.result(op), f"layout.split{{axis={axis}, sizes={literal(sizes)}}}({t.arg(x)})")


def _stack(t: Translation, op: Any) -> None:
    (values,) = op.inputs.values()
    t.emit(t.result(op), f"layout.stack{{axis={op.attribs['axis']}}}({t.arg(list(values))})")


def _unstack(t: Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    t.emit(t.result(op), f"layout.unstack{{axis={op.attribs['axis']}}}({t.arg(x)})")


def _slice(t: Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    shape = t.shape(x)
    attribs = op.attribs
    axes = list(attribs["axes"])
    stride = list(attribs.get("stride") or [1] * len(axes))
    begin, end = [], []
    for axis, b, e, s in zip(axes, attribs["begin"], attribs["end"], stride, strict=True):
        extent = shape[axis]
        b = b + extent if b < 0 else b
        if s > 0:
            e = extent if e == 0 else (e + extent if e < 0 else e)
        else:
            e = e + extent if e < -1 else e
        begin.append(min(b, extent - 1))
        end.append(e)
    t.emit(
        t.result(op),
        f"layout.slice{{axes={literal(axes)}, begin={literal(begin)}, end={literal(end)}, "
        f"stride={literal(stride)}}}({t.arg(x)})",
    )


def _pad(t: Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    attribs = op.attribs
    methods = {
        "constant": "CONSTANT",
        "reflect": "REFLECT",
        "replicate": "REPLICATE",
        "reflect-even": "SYMMETRIC",
    }
    border = attribs.get("border", "constant")
    if border not in methods:
        raise NNEFError(f"NNEF 1.0 pad with border '{border}' is not supported")
    value = attribs.get("value", 0.0)
    extra = f", {literal(float(value))}" if border == "constant" and value else ""
    t.emit(
        t.result(op),
        f"layout.pad{{padding={literal(_pairs(attribs['padding']))}, "
        f"method='{methods[border]}'}}({t.arg(x)}{extra})",
    )


def _tile(t: Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    t.emit(t.result(op), f"layout.tile{{repeats={literal(list(op.attribs['repeats']))}}}({t.arg(x)})")


def _reduce(t: Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    name = op.name
    if name == "sum_reduce" and op.attribs.get("normalize"):
        name = "mean_reduce"
    t.emit(t.result(op), f"math.{name}{{axes={literal(list(op.attribs['axes']))}}}({t.arg(x)})")


def _arg_reduce(t: Translation, op: Any) -> None:
    """The flat index of the extreme within the reduced axes (row-major over them, in increasing
    axis order), one per kept position; several axes are moved last and merged first."""
    (x,) = op.inputs.values()
    shape = t.shape(x)
    axes = sorted(axis % len(shape) for axis in op.attribs["axes"])
    kind = "argmax" if op.name == "argmax_reduce" else "argmin"
    if len(axes) == 1:
        t.emit(t.result(op), f"math.{kind}{{axis={axes[0]}}}({t.arg(x)})")
        return
    kept = [axis for axis in range(len(shape)) if axis not in axes]
    moved, merged, found = t.temporary(), t.temporary(), t.temporary()
    t.emit(moved, f"layout.transpose{{perm={literal(kept + axes)}}}({t.arg(x)})")
    merged_shape = [shape[axis] for axis in kept] + [math.prod(shape[axis] for axis in axes)]
    t.emit(merged, f"layout.reshape{{shape={literal(merged_shape)}}}({moved})")
    t.emit(found, f"math.{kind}{{axis={len(kept)}}}({merged})")
    result_shape = [1 if axis in axes else extent for axis, extent in enumerate(shape)]
    t.emit(t.result(op), f"layout.reshape{{shape={literal(result_shape)}}}({found})")


def _moments(t: Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    t.emit(
        f"{t.result(op, 'mean')}, {t.result(op, 'variance')}",
        f"math.moments{{axes={literal(list(op.attribs['axes']))}}}({t.arg(x)})",
    )


def _matmul(t: Translation, op: Any) -> None:
    a, b = op.inputs.values()
    attribs = op.attribs
    t.emit(
        t.result(op),
        f"linalg.matmul{{transA={literal(bool(attribs['transposeA']))}, "
        f"transB={literal(bool(attribs['transposeB']))}}}({t.arg(a)}, {t.arg(b)})",
    )


def _linear(t: Translation, op: Any) -> None:
    x, w, b = op.inputs.values()
    bias = _channels(t, b, t.shape(w)[0])
    arguments = [t.arg(x), t.arg(w)] + ([bias] if bias is not None else [])
    t.emit(t.result(op), f"nn.linear({', '.join(arguments)})")


def _softmax(t: Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    t.emit(t.result(op), f"nn.softmax{{axes={literal(list(op.attribs['axes']))}}}({t.arg(x)})")


def _batch_norm(t: Translation, op: Any) -> None:
    x, mean, variance, offset, scale = op.inputs.values()
    channels = t.shape(x)[1]
    arguments = [t.arg(x), _channels(t, mean, channels), _channels(t, variance, channels)]
    bias = _channels(t, offset, channels)
    scale_value = None if not t.is_tensor(scale) and scale == 1.0 else _channels(t, scale, channels)
    arguments += [bias or "~", scale_value or "~"]
    while arguments[-1] == "~":
        arguments.pop()
    t.emit(
        t.result(op),
        f"nn.batch_norm{{epsilon={literal(float(op.attribs['epsilon']))}}}({', '.join(arguments)})",
    )


def _lrn(t: Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    attribs = op.attribs
    size = list(attribs["size"])
    axes = [axis for axis, extent in enumerate(size) if extent != 1] or [1]
    t.emit(
        t.result(op),
        f"nn.local_response_norm{{axes={literal(axes)}, size={literal([size[a] for a in axes])}, "
        f"alpha={literal(float(attribs['alpha']))}, beta={literal(float(attribs['beta']))}, "
        f"bias={literal(float(attribs['bias']))}}}({t.arg(x)})",
    )


def _l2_norm(t: Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    attribs = op.attribs
    square, total, biased, root, capped = (t.temporary() for _ in range(5))
    t.emit(square, f"math.sqr({t.arg(x)})")
    t.emit(total, f"math.sum_reduce{{axes={literal(list(attribs['axes']))}}}({square})")
    t.emit(biased, f"math.add({total}, {literal(float(attribs.get('bias', 0.0)))})")
    t.emit(root, f"math.sqrt({biased})")
    t.emit(capped, f"math.max({root}, {literal(float(attribs.get('epsilon', 0.0)))})")
    t.emit(t.result(op), f"math.div({t.arg(x)}, {capped})")


def _sampling(t: Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    factor = list(op.attribs["factor"])
    axes = list(range(2, 2 + len(factor)))
    t.emit(t.result(op), f"image.{op.name}{{axes={literal(axes)}, factor={literal(factor)}}}({t.arg(x)})")


def _multilinear(t: Translation, op: Any) -> None:
    """Multilinear upsampling. 'aligned' maps the corner samples onto each other (no border is
    read); 'symmetric' and 'asymmetric' read one element past the edges: zeros ('constant'), the
    edge ('replicate'), or for 'reflect' and 'reflect-even' the input padded by one element that
    way, upsampled, and cropped back by one factor on each side."""
    (x,) = op.inputs.values()
    attribs = op.attribs
    method, border = attribs.get("method", "symmetric"), attribs.get("border", "replicate")
    if method not in ("symmetric", "asymmetric", "aligned"):
        raise NNEFError(
            f"NNEF 1.0 operation {t.index} 'multilinear_upsample': unknown method '{method}' "
            "(the standard's: symmetric, asymmetric, aligned)"
        )
    _check_border(t, op.name, border, ("constant", "replicate", "reflect", "reflect-even"))
    factor = list(attribs["factor"])
    shape = t.shape(x)
    axes = list(range(2, 2 + len(factor)))
    if method == "aligned":
        sizes = [extent * f for extent, f in zip(shape[2:], factor, strict=True)]
        t.emit(
            t.result(op),
            f"image.linear_resize{{axes={literal(axes)}, size={literal(sizes)}, antialias=false, "
            f"coordinate_transform='ALIGNED'}}({t.arg(x)})",
        )
        return
    source, result = t.arg(x), t.result(op)
    if border in ("reflect", "reflect-even"):
        ones = [0, 0] + [1] * len(factor)
        source = _padded(t, source, ones + ones, border)
        result = t.temporary()
    t.emit(
        result,
        f"image.linear_upsample{{axes={literal(axes)}, factor={literal(factor)}, "
        f"symmetric={literal(method == 'symmetric')}, "
        f"replicate_border={literal(border != 'constant')}}}({source})",
    )
    if result != t.result(op):
        ends = [f * (extent + 1) for f, extent in zip(factor, shape[2:], strict=True)]
        t.emit(
            t.result(op),
            f"layout.slice{{axes={literal(axes)}, begin={literal(factor)}, "
            f"end={literal(ends)}}}({result})",
        )


def _update(t: Translation, op: Any) -> None:
    """``update(variable, value)``: the result is the value; the variable takes it after the run
    (an ``@update`` assignment: ``Graph.run(..., update=True)`` stores it)."""
    variable, value = op.inputs.values()
    if t.name(variable) not in t.labels:
        raise NNEFError(f"NNEF 1.0 operation {t.index} 'update': '{variable}' is not a variable")
    t.emit(t.result(op), f"math.iden({t.arg(value)})")
    t.updates.append(f"        {t.name(variable)} = math.iden({t.result(op)});")


def _roi_pool(t: Translation, op: Any) -> None:
    x, rois, index = op.inputs.values()
    t.emit(
        t.result(op),
        f"image.{op.name}{{output_size={literal(list(op.attribs['output_size']))}}}"
        f"({t.arg(x)}, {t.arg(rois)}, {t.arg(index)})",
    )


def _gather(t: Translation, op: Any) -> None:
    x, indices = op.inputs.values()
    t.emit(t.result(op), f"layout.gather{{axis={op.attribs['axis']}}}({t.arg(x)}, {t.arg(indices)})")


def _cast(t: Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    t.emit(t.result(op), f"layout.cast<{SKRIPTND_TYPES.get(op.dtype, 'real')}>({t.arg(x)})")


def _add_n(t: Translation, op: Any) -> None:
    (values,) = op.inputs.values()
    t.emit(t.result(op), f"math.sum_n({t.arg(list(values))})")


#: The translator of each 1.0 operation written here (the compound fragments' are in
#: :data:`uopviz.nnef.nnef1.compound.COMPOUND_TRANSLATORS`).
OPERATION_TRANSLATORS: dict[str, Callable[[Translation, Any], None]] = {
    **dict.fromkeys(_UNARY_MATH, _unary), **dict.fromkeys(_BINARY_MATH, _binary),
    **dict.fromkeys(_ACTIVATIONS, _activation),
    "select": _select, "clamp": _clamp, "relu": _relu, "leaky_relu": _leaky_relu, "elu": _elu, "selu": _selu,
    "prelu": _prelu, "conv": _conv, "deconv": _conv, "max_pool": _pool, "avg_pool": _pool, "rms_pool": _pool,
    "box": _pool, "reshape": _reshape, "squeeze": _axes_op("squeeze"), "unsqueeze": _axes_op("unsqueeze"),
    "transpose": _transpose, "concat": _concat, "split": _split, "stack": _stack, "unstack": _unstack,
    "slice": _slice, "pad": _pad, "tile": _tile, "sum_reduce": _reduce, "mean_reduce": _reduce,
    "max_reduce": _reduce, "min_reduce": _reduce, "any_reduce": _reduce, "all_reduce": _reduce,
    "argmax_reduce": _arg_reduce, "argmin_reduce": _arg_reduce, "moments": _moments, "matmul": _matmul,
    "linear": _linear, "softmax": _softmax, "batch_normalization": _batch_norm,
    "local_response_normalization": _lrn, "l2_normalization": _l2_norm, "nearest_upsample": _sampling,
    "nearest_downsample": _sampling, "area_downsample": _sampling, "multilinear_upsample": _multilinear,
    "gather": _gather, "cast": _cast, "add_n": _add_n,
    "separable_conv": _separable_conv, "separable_deconv": _separable_conv, "argmax_pool": _argmax_pool,
    "sample": _sample, "desample": _desample, "debox": _debox, "max_pool_with_index": _max_pool_with_index,
    "update": _update, "max_roi_pool": _roi_pool, "avg_roi_pool": _roi_pool,
}  # fmt: skip
