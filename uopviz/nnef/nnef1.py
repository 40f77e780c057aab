"""NNEF 1.0 models (``graph.nnef`` + ``.dat`` files) on the SkriptND graph model.

The ``nnef`` package (the Khronos parser, ``import nnef``) reads the NNEF 1.0 text and fills in
every attribute's default; each operation is then translated to an invocation of the SkriptND
standard library (``nn.conv``, ``math.add``, ...) — a SkriptND ``graph`` that the ordinary
composer builds into a :class:`~uopviz.nnef.graph.Graph` with the 1.0 tensor names, so it lowers,
compiles and runs like any SkriptND model. The generated text is kept (``graph.source``) and
errors quote it, with the index and name of the 1.0 operation at the end of each line.

Differences of the two versions the translation bridges: 1.0 shapes have implicit trailing
singleton dimensions (binary operations align left), biases and normalisation parameters are
``[1, C]``, padding is a list of ``(before, after)`` pairs (empty: "same", output
``ceil(input / stride)``), pooling sizes cover every dimension, a ``border`` names the padding
method, ``reshape`` copies dimensions given as 0, ``slice`` ends at the extent for an end of 0.

Every fragment of the 1.0 standard library is translated (the ``nnef`` package's list; its shape
table also names ``max_unpool`` and ``avg_unpool``, which its parser does not know). Compound
fragments are written out from their 1.0 definitions (separable convolutions as two, the local and
L1 normalisations, the quantisations, ``softabs``, ``copy_n``, the ROI aligns as a resample and a
pooling); the sliding-window primitives SkriptND has no operator for (``argmax_pool``, ``sample``,
``desample``, ``debox``, ``roi_resample``) are operators of the helper module ``nnef1.sknd``.
Borders: 'constant' pads with zeros that take part, 'ignore' leaves the padding out, 'reflect',
'replicate' and 'reflect-even' pad the input as ``pad`` does before a conv or pooling without
padding; the transposed operations (``deconv``, ``debox``, ``desample``) take 'constant' and
'ignore' only. ``argmax_pool``'s index is the flat row-major position inside the window, and ROI
rows are ``[start.., end..]`` along the spatial axes, as the SkriptND ROI pools read them: the 1.0
text leaves both open. Fragments a graph file defines itself (``KHR_enable_fragment_definitions``)
are expanded into their bodies by the parser; one without a body is an error.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from uopviz.core.progress import progress_reporter
from uopviz.nnef import ast
from uopviz.nnef.composer import Composer
from uopviz.nnef.data import inside_folder, read_tensor
from uopviz.nnef.errors import NNEFError, register_source
from uopviz.nnef.graph import Graph
from uopviz.nnef.lexer import KEYWORDS
from uopviz.nnef.nnef1_process import parse_nnef1
from uopviz.nnef.parser import parse_module
from uopviz.nnef.stdlib_loader import ModuleSet, read_source_text

__all__ = ["SUPPORTED", "load_nnef1", "loads_nnef1", "translate"]

_TYPES = {"scalar": "real", "integer": "int", "logical": "bool"}


def _import_nnef() -> Any:
    try:
        import nnef
    except ImportError as error:  # pragma: no cover - the package is a dependency
        raise NNEFError("reading NNEF 1.0 needs the 'nnef' package (pip install nnef)") from error
    return nnef


def nnef_shapes() -> Any:
    """The ``nnef`` package's shape functions (``nnef.shapes``)."""
    return _import_nnef().shapes


def _literal(value: Any) -> str:
    """A Python value (from the nnef parser) as SkriptND text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value) if value >= 0 else f"({value})"
    if isinstance(value, float):
        if math.isinf(value):
            return "inf" if value > 0 else "(-inf)"
        text = repr(float(value))
        return text if value >= 0 else f"({text})"
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_literal(item) for item in value) + "]"
    raise NNEFError(f"cannot express the NNEF 1.0 value {value!r} in SkriptND")


class _Translation:
    """The SkriptND graph being written for one NNEF 1.0 graph."""

    def __init__(self, graph: Any) -> None:
        self.graph = graph
        self.lines: list[str] = []
        self.inputs: list[str] = []
        self.variables: list[str] = []
        self.constants: list[str] = []
        self.labels: dict[str, str] = {}
        self.names: dict[str, str] = {}  # 1.0 tensor name -> SkriptND identifier
        self._temporaries = 0
        self.uses_helpers = False  # the text imports the helper module nnef1 (nnef1.sknd)
        self.updates: list[str] = []
        self.index = 0
        self.op_name = ""

    # -- names and values -------------------------------------------------------------------------

    def name(self, tensor: str) -> str:
        """A SkriptND identifier for a 1.0 tensor name (keywords get a trailing underscore)."""
        found = self.names.get(tensor)
        if found is None:
            found = f"{tensor}_" if tensor in KEYWORDS else str(tensor)
            self.names[tensor] = found
        return found

    def arg(self, value: Any) -> str:
        """An argument: a tensor name, a literal, or a list of them."""
        if isinstance(value, list):
            return "[" + ", ".join(self.arg(item) for item in value) + "]"
        if self._is_tensor(value):
            return self.name(value)
        return _literal(value)

    def operand(self, value: Any) -> str:
        """Like :meth:`arg`, but a string that is no 1.0 tensor is already a SkriptND name."""
        if isinstance(value, str) and not self._is_tensor(value):
            return value
        return self.arg(value)

    def _is_tensor(self, value: Any) -> bool:
        return type(value).__name__ == "Identifier" or (
            isinstance(value, str) and value in self.graph.tensors and not isinstance(value, bool)
        )

    def shape(self, value: Any) -> list[int]:
        """The shape of a tensor argument (a literal is rank 0)."""
        if self._is_tensor(value):
            shape = self.graph.tensors[value].shape
            if shape is None:
                raise NNEFError(f"the shape of NNEF 1.0 tensor '{value}' is unknown")
            return list(shape)
        return []

    def temporary(self) -> str:
        """A fresh name for an intermediate tensor of a multi-line translation."""
        self._temporaries += 1
        return f"__t{self._temporaries}"

    def emit(self, results: str, invocation: str) -> None:
        """One @compose line, tagged with the 1.0 operation it comes from."""
        self.lines.append(
            f"        {results} = {invocation};  # NNEF 1.0 operation {self.index}: {self.op_name}"
        )

    def emit_helper(self, results: str, invocation: str) -> None:
        """:meth:`emit` for an operator of the helper module ``nnef1`` (the text imports it)."""
        self.uses_helpers = True
        self.emit(results, invocation)

    def result_name(self, op: Any, key: str | None = None) -> str:
        """The 1.0 name of an operation's (first, or ``key``) result."""
        outputs = op.outputs
        return outputs[key] if key is not None else next(iter(outputs.values()))

    def result(self, op: Any, key: str | None = None) -> str:
        outputs = op.outputs
        value = outputs[key] if key is not None else next(iter(outputs.values()))
        if isinstance(value, list):
            return "[" + ", ".join(self.name(item) for item in value) + "]"
        return self.name(value)


# ------------------------------------------------------------------------------------------------
# operation translators: (translation, op) -> None (they emit lines)

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


def _unary(t: _Translation, op: Any) -> None:
    name = "iden" if op.name == "copy" else op.name
    (x,) = op.inputs.values()
    t.emit(t.result(op), f"math.{name}({t.arg(x)})")


def _binary(t: _Translation, op: Any) -> None:
    x, y = op.inputs.values()
    t.emit(t.result(op), f"math.{op.name}{{lhs_align=0, rhs_align=0}}({t.arg(x)}, {t.arg(y)})")


def _select(t: _Translation, op: Any) -> None:
    c, x, y = op.inputs.values()
    t.emit(
        t.result(op),
        f"math.select{{cond_align=0, lhs_align=0, rhs_align=0}}({t.arg(c)}, {t.arg(x)}, {t.arg(y)})",
    )


def _clamp(t: _Translation, op: Any) -> None:
    x, a, b = op.inputs.values()
    t.emit(
        t.result(op),
        f"math.clamp{{val_align=0, min_align=0, max_align=0}}({t.arg(x)}, {t.arg(a)}, {t.arg(b)})",
    )


def _activation(t: _Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    t.emit(t.result(op), f"nn.{op.name}({t.arg(x)})")


def _relu(t: _Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    t.emit(t.result(op), f"nn.relu({t.arg(x)})")


def _leaky_relu(t: _Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    t.emit(t.result(op), f"nn.relu{{alpha={_literal(float(op.attribs['alpha']))}}}({t.arg(x)})")


def _elu(t: _Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    t.emit(t.result(op), f"nn.elu{{alpha={_literal(float(op.attribs.get('alpha', 1.0)))}}}({t.arg(x)})")


def _selu(t: _Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    attribs = op.attribs
    t.emit(
        t.result(op),
        f"nn.selu{{alpha={_literal(float(attribs['alpha']))}, "
        f"lambda={_literal(float(attribs['lambda']))}}}({t.arg(x)})",
    )


def _prelu(t: _Translation, op: Any) -> None:
    x, alpha = op.inputs.values()
    negative, scaled = t.temporary(), t.temporary()
    t.emit(negative, f"math.lt{{lhs_align=0, rhs_align=0}}({t.arg(x)}, 0.0)")
    t.emit(scaled, f"math.mul{{lhs_align=0, rhs_align=0}}({t.arg(x)}, {t.arg(alpha)})")
    t.emit(t.result(op), f"math.select({negative}, {scaled}, {t.arg(x)})")


def _channels(t: _Translation, value: Any, channels: int | None = None) -> str | None:
    """A ``[1, C]`` parameter as the ``[C]`` SkriptND wants; None for the literal 0."""
    if not t._is_tensor(value):
        if value == 0 or value == 0.0:
            return None
        if channels is None:
            raise NNEFError(f"a literal parameter {value!r} needs a known channel count")
        name = t.temporary()
        t.emit(name, f"layout.uniform{{shape=[{channels}]}}({_literal(float(value))})")
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


def _check_border(t: _Translation, op_name: str, border: str, allowed: tuple[str, ...] = _BORDERS) -> None:
    if border not in allowed:
        raise NNEFError(
            f"NNEF 1.0 operation {t.index} '{op_name}': border '{border}' is not supported here "
            f"(supported: {', '.join(allowed)})"
        )


def _padded(t: _Translation, source: str, padding: list[int], border: str, value: float = 0.0) -> str:
    """``source`` padded by ``padding`` (befores, then afters) as the 1.0 ``border`` says; a
    constant border pads with ``value``."""
    if not any(padding):
        return source
    name = t.temporary()
    if border in _PAD_METHODS:
        t.emit(name, f"layout.pad{{padding={_literal(padding)}, method='{_PAD_METHODS[border]}'}}({source})")
    else:
        extra = f", {_literal(float(value))}" if value else ""
        t.emit(name, f"layout.pad{{padding={_literal(padding)}}}({source}{extra})")
    return name


def _conv(t: _Translation, op: Any) -> None:
    x, w, b = op.inputs.values()
    _emit_conv(t, op.name, t.result(op), t.arg(x), t.shape(x), t.arg(w), t.shape(w), b, dict(op.attribs))


def _emit_conv(
    t: _Translation,
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
        extra = f", output_size={_literal(list(output_shape[2:]))}" if output_shape else ""
        if padding is None and not output_shape:  # 'same': output input * stride
            sizes = [i * s for i, s in zip(xs[2:], stride, strict=True)]
            extra = f", output_size={_literal(sizes)}"
            fd = [(k - 1) * dl + 1 for k, dl in zip(ws[2:], dilation, strict=True)]
            totals = [(i - 1) * s + f - o for i, s, f, o in zip(xs[2:], stride, fd, sizes, strict=True)]
            padding = [total // 2 for total in totals] + [total - total // 2 for total in totals]
    attributes = [
        f"stride={_literal(list(stride))}",
        f"dilation={_literal(list(dilation))}",
        f"groups={groups}",
    ]
    if padding is not None:
        attributes.append(f"padding={_literal(padding)}")
    arguments = [x, w] + ([bias] if bias is not None else [])
    t.emit(result, f"nn.{kind}{{{', '.join(attributes)}{extra}}}({', '.join(arguments)})")


def _separable_conv(t: _Translation, op: Any) -> None:
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


def _window(t: _Translation, attribs: Mapping[str, Any], shape: list[int], size: list[int]) -> tuple:
    """A 1.0 window's stride, dilation and padding (befores, then afters) over every dimension of
    ``shape``; empty padding is 'same' (output ceil(input / stride))."""
    rank = len(shape)
    stride = list(attribs.get("stride") or [1] * rank)
    dilation = list(attribs.get("dilation") or [1] * rank)
    padding = (
        _pairs(attribs["padding"]) if attribs.get("padding") else _same_padding(shape, size, stride, dilation)
    )
    return stride, dilation, padding


def _pool(t: _Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    kind = {"max_pool": "max", "avg_pool": "avg", "rms_pool": "rms", "box": "sum"}[op.name]
    if op.name == "box" and op.attribs.get("normalize"):
        kind = "avg"
    _emit_pool(t, op.name, t.result(op), t.arg(x), t.shape(x), kind, list(op.attribs["size"]), op.attribs)


def _emit_pool(
    t: _Translation,
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
        extra = f", ignore_border={_literal(border == 'ignore')}"
    t.emit(
        result,
        f"nn.{kind}_pool{{axes={_literal(list(range(rank)))}, size={_literal(size)}, "
        f"stride={_literal(stride)}, dilation={_literal(dilation)}, padding={_literal(padding)}"
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
        f"size={_literal(size)}, window_strides={_literal(_window_strides(size))}, "
        f"stride={_literal(stride)}, dilation={_literal(dilation)}"
    )


def _argmax_pool(t: _Translation, op: Any) -> None:
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


def _sample(t: _Translation, op: Any) -> None:
    x, index = list(op.inputs.values())[:2]
    _emit_sample(t, op.name, t.result(op), t.arg(x), t.shape(x), t.arg(index), op.attribs)


def _emit_sample(
    t: _Translation,
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


def _max_pool_with_index(t: _Translation, op: Any) -> None:
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


def _unpooling_window(t: _Translation, op: Any, input_shape: list[int]) -> tuple:
    """Size, stride, dilation, padding befores and output shape of desample and debox; empty
    padding is 'same' as seen from the output (the pooling that the operation transposes)."""
    size = list(op.attribs["size"])
    output_shape = t.shape(t.result_name(op))
    border = op.attribs.get("border", "constant")
    _check_border(t, op.name, border, ("constant", "ignore"))
    stride, dilation, padding = _window(t, op.attribs, output_shape, size)
    return size, stride, dilation, padding[: len(input_shape)], output_shape


def _desample(t: _Translation, op: Any) -> None:
    x, index = op.inputs.values()
    size, stride, dilation, offset, output_shape = _unpooling_window(t, op, t.shape(x))
    t.emit_helper(
        t.result(op),
        f"nnef1.desample{{{_window_attributes(size, stride, dilation)}, offset={_literal(offset)}, "
        f"output_shape={_literal(output_shape)}}}({t.arg(x)}, {t.arg(index)})",
    )


def _debox(t: _Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    size, stride, dilation, offset, output_shape = _unpooling_window(t, op, t.shape(x))
    scale = 1.0 / math.prod(size) if op.attribs.get("normalize") else 1.0
    t.emit_helper(
        t.result(op),
        f"nnef1.debox{{size={_literal(size)}, stride={_literal(stride)}, dilation={_literal(dilation)}, "
        f"offset={_literal(offset)}, output_shape={_literal(output_shape)}, scale={_literal(scale)}}}"
        f"({t.arg(x)})",
    )


def _reshape(t: _Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    shape = t.shape(x)
    attribs = op.attribs
    start = attribs.get("axis_start", 0)
    count = attribs.get("axis_count", -1)
    count = len(shape) - start if count == -1 else count
    new = [shape[start + i] if value == 0 else value for i, value in enumerate(attribs["shape"])]
    t.emit(t.result(op), f"layout.reshape{{axis={start}, rank={count}, shape={_literal(new)}}}({t.arg(x)})")


def _axes_op(layout_name: str) -> Callable[[_Translation, Any], None]:
    def translate_op(t: _Translation, op: Any) -> None:
        (x,) = op.inputs.values()
        t.emit(t.result(op), f"layout.{layout_name}{{axes={_literal(list(op.attribs['axes']))}}}({t.arg(x)})")

    return translate_op


def _transpose(t: _Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    perm = list(op.attribs["axes"])
    perm += list(range(len(perm), len(t.shape(x))))
    t.emit(t.result(op), f"layout.transpose{{perm={_literal(perm)}}}({t.arg(x)})")


def _concat(t: _Translation, op: Any) -> None:
    (values,) = op.inputs.values()
    t.emit(t.result(op), f"layout.concat{{axis={op.attribs['axis']}}}({t.arg(list(values))})")


def _split(t: _Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    axis, ratios = op.attribs["axis"], list(op.attribs["ratios"])
    extent = t.shape(x)[axis]
    unit, remainder = divmod(extent, sum(ratios))
    if remainder:
        raise NNEFError(f"split: the extent {extent} is not divisible by the sum of the ratios {ratios}")
    sizes = [unit * ratio for ratio in ratios]
    t.emit(t.result(op), f"layout.split{{axis={axis}, sizes={_literal(sizes)}}}({t.arg(x)})")


def _stack(t: _Translation, op: Any) -> None:
    (values,) = op.inputs.values()
    t.emit(t.result(op), f"layout.stack{{axis={op.attribs['axis']}}}({t.arg(list(values))})")


def _unstack(t: _Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    t.emit(t.result(op), f"layout.unstack{{axis={op.attribs['axis']}}}({t.arg(x)})")


def _slice(t: _Translation, op: Any) -> None:
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
        f"layout.slice{{axes={_literal(axes)}, begin={_literal(begin)}, end={_literal(end)}, "
        f"stride={_literal(stride)}}}({t.arg(x)})",
    )


def _pad(t: _Translation, op: Any) -> None:
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
    extra = f", {_literal(float(value))}" if border == "constant" and value else ""
    t.emit(
        t.result(op),
        f"layout.pad{{padding={_literal(_pairs(attribs['padding']))}, "
        f"method='{methods[border]}'}}({t.arg(x)}{extra})",
    )


def _tile(t: _Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    t.emit(t.result(op), f"layout.tile{{repeats={_literal(list(op.attribs['repeats']))}}}({t.arg(x)})")


def _reduce(t: _Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    name = op.name
    if name == "sum_reduce" and op.attribs.get("normalize"):
        name = "mean_reduce"
    t.emit(t.result(op), f"math.{name}{{axes={_literal(list(op.attribs['axes']))}}}({t.arg(x)})")


def _arg_reduce(t: _Translation, op: Any) -> None:
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
    t.emit(moved, f"layout.transpose{{perm={_literal(kept + axes)}}}({t.arg(x)})")
    merged_shape = [shape[axis] for axis in kept] + [math.prod(shape[axis] for axis in axes)]
    t.emit(merged, f"layout.reshape{{shape={_literal(merged_shape)}}}({moved})")
    t.emit(found, f"math.{kind}{{axis={len(kept)}}}({merged})")
    result_shape = [1 if axis in axes else extent for axis, extent in enumerate(shape)]
    t.emit(t.result(op), f"layout.reshape{{shape={_literal(result_shape)}}}({found})")


def _moments(t: _Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    t.emit(
        f"{t.result(op, 'mean')}, {t.result(op, 'variance')}",
        f"math.moments{{axes={_literal(list(op.attribs['axes']))}}}({t.arg(x)})",
    )


def _matmul(t: _Translation, op: Any) -> None:
    a, b = op.inputs.values()
    attribs = op.attribs
    t.emit(
        t.result(op),
        f"linalg.matmul{{transA={_literal(bool(attribs['transposeA']))}, "
        f"transB={_literal(bool(attribs['transposeB']))}}}({t.arg(a)}, {t.arg(b)})",
    )


def _linear(t: _Translation, op: Any) -> None:
    x, w, b = op.inputs.values()
    bias = _channels(t, b, t.shape(w)[0])
    arguments = [t.arg(x), t.arg(w)] + ([bias] if bias is not None else [])
    t.emit(t.result(op), f"nn.linear({', '.join(arguments)})")


def _softmax(t: _Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    t.emit(t.result(op), f"nn.softmax{{axes={_literal(list(op.attribs['axes']))}}}({t.arg(x)})")


def _batch_norm(t: _Translation, op: Any) -> None:
    x, mean, variance, offset, scale = op.inputs.values()
    channels = t.shape(x)[1]
    arguments = [t.arg(x), _channels(t, mean, channels), _channels(t, variance, channels)]
    bias = _channels(t, offset, channels)
    scale_value = None if not t._is_tensor(scale) and scale == 1.0 else _channels(t, scale, channels)
    arguments += [bias or "~", scale_value or "~"]
    while arguments[-1] == "~":
        arguments.pop()
    t.emit(
        t.result(op),
        f"nn.batch_norm{{epsilon={_literal(float(op.attribs['epsilon']))}}}({', '.join(arguments)})",
    )


def _lrn(t: _Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    attribs = op.attribs
    size = list(attribs["size"])
    axes = [axis for axis, extent in enumerate(size) if extent != 1] or [1]
    t.emit(
        t.result(op),
        f"nn.local_response_norm{{axes={_literal(axes)}, size={_literal([size[a] for a in axes])}, "
        f"alpha={_literal(float(attribs['alpha']))}, beta={_literal(float(attribs['beta']))}, "
        f"bias={_literal(float(attribs['bias']))}}}({t.arg(x)})",
    )


def _l2_norm(t: _Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    attribs = op.attribs
    square, total, biased, root, capped = (t.temporary() for _ in range(5))
    t.emit(square, f"math.sqr({t.arg(x)})")
    t.emit(total, f"math.sum_reduce{{axes={_literal(list(attribs['axes']))}}}({square})")
    t.emit(biased, f"math.add({total}, {_literal(float(attribs.get('bias', 0.0)))})")
    t.emit(root, f"math.sqrt({biased})")
    t.emit(capped, f"math.max({root}, {_literal(float(attribs.get('epsilon', 0.0)))})")
    t.emit(t.result(op), f"math.div({t.arg(x)}, {capped})")


def _sampling(t: _Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    factor = list(op.attribs["factor"])
    axes = list(range(2, 2 + len(factor)))
    t.emit(t.result(op), f"image.{op.name}{{axes={_literal(axes)}, factor={_literal(factor)}}}({t.arg(x)})")


def _multilinear(t: _Translation, op: Any) -> None:
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
            f"image.linear_resize{{axes={_literal(axes)}, size={_literal(sizes)}, antialias=false, "
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
        f"image.linear_upsample{{axes={_literal(axes)}, factor={_literal(factor)}, "
        f"symmetric={_literal(method == 'symmetric')}, "
        f"replicate_border={_literal(border != 'constant')}}}({source})",
    )
    if result != t.result(op):
        ends = [f * (extent + 1) for f, extent in zip(factor, shape[2:], strict=True)]
        t.emit(
            t.result(op),
            f"layout.slice{{axes={_literal(axes)}, begin={_literal(factor)}, "
            f"end={_literal(ends)}}}({result})",
        )


# -- compound fragments of the 1.0 standard, written out ---------------------------------------------


def _math(t: _Translation, name: str, *arguments: Any, result: str | None = None) -> str:
    """One elementwise ``math`` operation with 1.0 (left-aligned) broadcasting; the result name."""
    result = result or t.temporary()
    aligns = {1: "", 2: "{lhs_align=0, rhs_align=0}", 3: "{val_align=0, min_align=0, max_align=0}"}
    operands = ", ".join(t.operand(argument) for argument in arguments)
    t.emit(result, f"math.{name}{aligns[len(arguments)]}({operands})")
    return result


def _softabs(t: _Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    square = _math(t, "sqr", x)
    shifted = _math(t, "add", square, float(op.attribs["epsilon"]))
    _math(t, "sqrt", shifted, result=t.result(op))


def _l1_norm(t: _Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    attribs = op.attribs
    magnitude = _math(t, "abs", x)
    total = t.temporary()
    t.emit(total, f"math.sum_reduce{{axes={_literal(list(attribs['axes']))}}}({magnitude})")
    biased = _math(t, "add", total, float(attribs.get("bias", 0.0)))
    capped = _math(t, "max", biased, float(attribs.get("epsilon", 0.0)))
    _math(t, "div", x, capped, result=t.result(op))


def _local_mean(
    t: _Translation, source: str, shape: list[int], size: list[int], result: str | None = None
) -> str:
    """``box(source, size, normalize = true)`` with the default 'constant' border and 'same' padding."""
    result = result or t.temporary()
    _emit_pool(t, "box", result, source, shape, "avg", size, {})
    return result


def _local_normalization(t: _Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    attribs, shape, size = op.attribs, t.shape(x), list(op.attribs["size"])
    source = t.arg(x)
    if op.name in ("local_mean_normalization", "local_contrast_normalization"):
        mean = _local_mean(t, source, shape, size)
        centered = op.name == "local_contrast_normalization"
        source = _math(t, "sub", source, mean, result=None if centered else t.result(op))
        if not centered:
            return
    square = _math(t, "sqr", source)
    sigma = _math(t, "sqrt", _local_mean(t, square, shape, size))
    biased = _math(t, "add", sigma, float(attribs.get("bias", 0.0)))
    capped = _math(t, "max", biased, float(attribs.get("epsilon", 0.0)))
    _math(t, "div", source, capped, result=t.result(op))


def _min_max_quantize(t: _Translation, op: Any) -> None:
    """min_max_linear_quantize (and linear_quantize, its unsigned asymmetric case): the value
    rounded to one of ``r + 1`` levels spread over [min, max]; the ``p`` shift of the definition
    cancels out of the round trip."""
    x, low, high = op.inputs.values()
    attribs = op.attribs
    signed = bool(attribs.get("signed", False)) and op.name == "min_max_linear_quantize"
    symmetric = bool(attribs.get("symmetric", False)) and op.name == "min_max_linear_quantize"
    levels = float(2 ** attribs["bits"] - 1 - int(signed and symmetric))
    clamped = _math(t, "clamp", x, low, high)
    extent = _math(t, "sub", high, low)
    scaled = _math(t, "mul", _math(t, "div", _math(t, "sub", clamped, low), extent), levels)
    step = _math(t, "div", _math(t, "round", scaled), levels)
    _math(t, "add", _math(t, "mul", step, extent), low, result=t.result(op))


def _zero_point_quantize(t: _Translation, op: Any) -> None:
    x, zero_point, scale = op.inputs.values()
    attribs = op.attribs
    bits, signed, symmetric = attribs["bits"], bool(attribs["signed"]), bool(attribs["symmetric"])
    top = float(2 ** (bits - 1) - 1 if signed else 2**bits - 1)
    bottom = 0.0 if not signed else (-top if symmetric else -top - 1.0)
    if t._is_tensor(zero_point):
        zero = t.temporary()
        t.emit(zero, f"layout.cast<real>({t.arg(zero_point)})")
    else:
        zero = float(zero_point)
    shifted = _math(t, "add", _math(t, "round", _math(t, "div", x, scale)), zero)
    clamped = _math(t, "clamp", shifted, bottom, top)
    _math(t, "mul", _math(t, "sub", clamped, zero), scale, result=t.result(op))


def _logarithmic_quantize(t: _Translation, op: Any) -> None:
    x, high = op.inputs.values()
    levels = float(2 ** op.attribs["bits"] - 1)
    top = _math(t, "ceil", _math(t, "log2", high))
    exponent = _math(
        t, "round", _math(t, "clamp", _math(t, "log2", _math(t, "abs", x)), _math(t, "sub", top, levels), top)
    )
    _math(t, "mul", _math(t, "sign", x), _math(t, "pow", 2.0, exponent), result=t.result(op))


def _copy_n(t: _Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    for name in next(iter(op.outputs.values())):
        t.emit(t.name(name), f"math.iden({t.arg(x)})")


def _update(t: _Translation, op: Any) -> None:
    """``update(variable, value)``: the result is the value; the variable takes it after the run
    (an ``@update`` assignment: ``Graph.run(..., update=True)`` stores it)."""
    variable, value = op.inputs.values()
    if t.name(variable) not in t.labels:
        raise NNEFError(f"NNEF 1.0 operation {t.index} 'update': '{variable}' is not a variable")
    t.emit(t.result(op), f"math.iden({t.arg(value)})")
    t.updates.append(f"        {t.name(variable)} = math.iden({t.result(op)});")


def _roi_pool(t: _Translation, op: Any) -> None:
    x, rois, index = op.inputs.values()
    t.emit(
        t.result(op),
        f"image.{op.name}{{output_size={_literal(list(op.attribs['output_size']))}}}"
        f"({t.arg(x)}, {t.arg(rois)}, {t.arg(index)})",
    )


def _roi_resample(t: _Translation, op: Any) -> None:
    x, rois, index = op.inputs.values()
    method = op.attribs.get("method", op.attribs.get("resize_method", "symmetric"))
    if method not in ("symmetric", "asymmetric", "aligned"):
        raise NNEFError(f"NNEF 1.0 operation {t.index} '{op.name}': unknown method '{method}'")
    output_size = list(op.attribs["output_size"])
    if op.name == "roi_resample":
        t.emit_helper(
            t.result(op),
            f"nnef1.roi_resample{{output_size={_literal(output_size)}, method='{method}'}}"
            f"({t.arg(x)}, {t.arg(rois)}, {t.arg(index)})",
        )
        return
    rate = list(op.attribs["sampling_rate"])  # the roi_align fragments: resample finer, then pool
    resized = t.temporary()
    sizes = [o * r for o, r in zip(output_size, rate, strict=True)]
    t.emit_helper(
        resized,
        f"nnef1.roi_resample{{output_size={_literal(sizes)}, method='{method}'}}"
        f"({t.arg(x)}, {t.arg(rois)}, {t.arg(index)})",
    )
    kind = "avg" if op.name == "avg_roi_align" else "max"
    window = [1, 1] + rate
    padding = [0] * (2 * len(window))
    t.emit(
        t.result(op),
        f"nn.{kind}_pool{{axes={_literal(list(range(len(window))))}, size={_literal(window)}, "
        f"stride={_literal(window)}, padding={_literal(padding)}}}({resized})",
    )


def _gather(t: _Translation, op: Any) -> None:
    x, indices = op.inputs.values()
    t.emit(t.result(op), f"layout.gather{{axis={op.attribs['axis']}}}({t.arg(x)}, {t.arg(indices)})")


def _cast(t: _Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    t.emit(t.result(op), f"layout.cast<{_TYPES.get(op.dtype, 'real')}>({t.arg(x)})")


def _add_n(t: _Translation, op: Any) -> None:
    (values,) = op.inputs.values()
    t.emit(t.result(op), f"math.sum_n({t.arg(list(values))})")


_TRANSLATORS: dict[str, Callable[[_Translation, Any], None]] = {
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
    "softabs": _softabs, "l1_normalization": _l1_norm, "local_mean_normalization": _local_normalization,
    "local_variance_normalization": _local_normalization,
    "local_contrast_normalization": _local_normalization,
    "linear_quantize": _min_max_quantize, "min_max_linear_quantize": _min_max_quantize,
    "zero_point_linear_quantize": _zero_point_quantize, "logarithmic_quantize": _logarithmic_quantize,
    "copy_n": _copy_n, "update": _update, "max_roi_pool": _roi_pool, "avg_roi_pool": _roi_pool,
    "roi_resample": _roi_resample, "avg_roi_align": _roi_resample, "max_roi_align": _roi_resample,
}  # fmt: skip
SUPPORTED = frozenset(_TRANSLATORS) | {"external", "variable", "constant"}


def translate(graph: Any) -> tuple[str, dict[str, str], dict[str, str]]:
    """SkriptND text for a parsed NNEF 1.0 graph (shapes inferred), the variables' labels by
    SkriptND name, and the SkriptND name of every 1.0 tensor."""
    t = _Translation(graph)
    inputs, variables, constants = [], [], []
    for index, op in enumerate(graph.operations):
        t.index, t.op_name = index, op.name
        output = next(iter(op.outputs.values()))
        if op.name == "external":
            inputs.append(f"{t.name(output)}: {_TYPES[op.dtype]}{_literal(list(op.attribs['shape']))};")
        elif op.name == "variable":
            variables.append(f"{t.name(output)}: {_TYPES[op.dtype]}{_literal(list(op.attribs['shape']))};")
            t.labels[t.name(output)] = op.attribs["label"]
        elif op.name == "constant":
            shape, value = list(op.attribs["shape"]), list(op.attribs["value"])
            literal = _literal(value[0] if len(value) == 1 else value)
            constants.append(f"{t.name(output)}: {_TYPES[op.dtype]}{_literal(shape)} = {literal};")
        else:
            translator = _TRANSLATORS.get(op.name)
            if translator is None:
                raise NNEFError(
                    f"NNEF 1.0 operation {index} '{op.name}' is not supported by uopviz "
                    f"(supported: {', '.join(sorted(SUPPORTED))})"
                )
            translator(t, op)
    outputs = [f"{t.name(name)}: {_TYPES.get(graph.tensors[name].dtype, 'real')};" for name in graph.outputs]
    blocks = [f"    @input {{ {' '.join(inputs)} }}", f"    @output {{ {' '.join(outputs)} }}"]
    if variables:
        blocks.append("    @variable {\n        " + "\n        ".join(variables) + "\n    }")
    if constants:
        blocks.append("    @constant {\n        " + "\n        ".join(constants) + "\n    }")
    blocks.append("    @compose {\n" + "\n".join(t.lines) + "\n    }")
    if t.updates:
        blocks.append("    @update {\n" + "\n".join(t.updates) + "\n    }")
    quantized = _quantize_lines(t)
    if quantized:
        blocks.append("    @quantize {\n" + "\n".join(quantized) + "\n    }")
    imports = "import layout, math, nn, linalg, image, quant" + (", nnef1;" if t.uses_helpers else ";")
    text = f"{imports}\n\ngraph {graph.name} {{\n" + "\n".join(blocks) + "\n}\n"
    return text, dict(t.labels), dict(t.names)


#: The 1.0 quantisation algorithms (``graph.quant``) that SkriptND's quant module has: the name
#: there and the attributes the 1.0 one leaves implicit.
_QUANTIZERS = {
    "linear_quantize": ("quant.min_max_linear_quantize", {"signed": False, "symmetric": False}),
    "min_max_linear_quantize": ("quant.min_max_linear_quantize", {}),
    "zero_point_linear_quantize": ("quant.zero_point_linear_quantize", {}),
}


def _quantization(info: Any) -> tuple[str, dict[str, Any]] | None:
    """A tensor's 1.0 quantisation (from ``graph.quant``) as (algorithm, attributes); None if none."""
    given = getattr(info, "quantization", None)
    if not given:
        return None
    attribs = {}
    for key, value in given.items():
        if key == "op-name":
            continue
        array = np.asarray(value)
        attribs[key] = array.item() if array.size == 1 else array.reshape(-1).tolist()
    return given["op-name"], attribs


def _quantize_lines(t: _Translation) -> list[str]:
    """The ``@quantize`` entries of the tensors whose 1.0 quantisation SkriptND's quant module has."""
    lines = []
    for name, info in t.graph.tensors.items():
        found = _quantization(info)
        if found is None or found[0] not in _QUANTIZERS:
            continue
        operator, implicit = _QUANTIZERS[found[0]]
        attribs = ", ".join(f"{key}={_literal(value)}" for key, value in {**found[1], **implicit}.items())
        lines.append(f"        {t.name(name)}: {operator}{{{attribs}}};")
    return lines


def _keep_other_quantizations(parsed: Any, composed: Graph) -> None:
    """Quantisations SkriptND has no operator for (logarithmic_quantize, a custom one) are kept as
    annotations of their tensors, named as in ``graph.quant``."""
    for name, info in parsed.tensors.items():
        found = _quantization(info)
        tensor = composed.tensors.get(name)
        if found is not None and found[0] not in _QUANTIZERS and tensor is not None:
            tensor.quantization = {"op": found[0], "attribs": found[1], "types": ()}


def _parse(
    text: str,
    file: str,
    quantization: str | None = None,
    quantization_file: str = "<quantization>",
) -> Any:
    """The ``nnef`` package's parse of ``text`` (with the quantisation text ``quantization``), its own
    fragments expanded and its shapes inferred, run in a child process: the package's C parser can
    crash on malformed input (see :mod:`uopviz.nnef.nnef1_process`)."""
    _import_nnef()
    return parse_nnef1(text, None, file, quantization=quantization, quantization_file=quantization_file)


HELPER_MODULE_PATH = Path(__file__).with_name("nnef1.sknd")


@functools.cache
def helper_module() -> ast.Module:
    """The parsed helper module ``nnef1`` (``nnef1.sknd``): the 1.0 sliding-window primitives that
    the standard library lacks (argmax_pool, sample, desample, debox, roi_resample)."""
    text = HELPER_MODULE_PATH.read_text()
    register_source(str(HELPER_MODULE_PATH), text)
    return parse_module(text, str(HELPER_MODULE_PATH))


def _imports_helpers(text: str) -> bool:
    """Whether a translated text imports the helper module."""
    return text.startswith("import") and "nnef1;" in text.split("\n", 1)[0]


def _compose_translation(
    graph: Any,
    source_name: str,
    data: Callable[[str], np.ndarray | None],
    attribs: Mapping[str, Any] | None,
    progress: Any = None,
) -> Graph:
    text, labels, names = translate(graph)
    file = f"{source_name} (as SkriptND)"
    register_source(file, text)
    modules = ModuleSet(None)
    if _imports_helpers(text):
        modules.add("nnef1", helper_module())
    modules.add("main", parse_module(text, file))

    def variable_data(name: str, info: Any) -> np.ndarray | None:
        label = labels.get(name)
        return None if label is None else data(label)

    with progress_reporter(progress, len(graph.operations), "composing") as report:
        composed = Composer(modules, variable_data, report).compose("main", None, attribs)
    composed.source = text
    renamed = {skriptnd: original for original, skriptnd in names.items() if skriptnd != original}
    if renamed:
        _restore_names(composed, renamed)
    _keep_other_quantizations(graph, composed)
    return composed


def _restore_names(graph: Graph, renamed: dict[str, str]) -> None:
    """Give the tensors whose 1.0 names are SkriptND keywords their 1.0 names back."""

    def fix(value: Any) -> Any:
        if isinstance(value, list):
            return [fix(item) for item in value]
        if isinstance(value, tuple):
            return tuple(fix(item) for item in value)
        return renamed.get(value, value) if isinstance(value, str) else value

    graph.tensors = {renamed.get(name, name): info for name, info in graph.tensors.items()}
    for name, info in graph.tensors.items():
        info.name = name
    for op in graph.operations:
        op.inputs, op.outputs = fix(op.inputs), fix(op.outputs)
    graph.inputs, graph.outputs = fix(graph.inputs), fix(graph.outputs)


def load_nnef1(
    path: str | os.PathLike,
    attribs: Mapping[str, Any] | None = None,
    fetch: Callable[[Path], None] | None = None,
    progress: Any = None,
) -> Graph:
    """An NNEF 1.0 folder (``graph.nnef`` + ``<label>.dat``, and ``graph.quant`` if there) or
    ``graph.nnef`` file as a Graph.

    ``fetch`` (archives) brings a data file into the folder before it is read; ``progress`` as in
    :mod:`uopviz.core.progress`."""
    path = Path(path)
    folder = path if path.is_dir() else path.parent
    graph_file = folder / "graph.nnef" if path.is_dir() else path
    root = folder.resolve()
    inside_folder(root, graph_file, "the graph file")
    text = read_source_text(graph_file)
    register_source(str(graph_file), text)
    quant_file = graph_file.with_name("graph.quant")
    quant_path = inside_folder(root, quant_file, "the quantization file")
    quantization = read_source_text(quant_file) if quant_path.is_file() else None
    parsed = _parse(text, str(graph_file), quantization, str(quant_file))

    def data(label: str) -> np.ndarray | None:
        candidate = root / f"{label.lstrip('/')}.dat"
        if fetch is not None:
            fetch(candidate)
        file = inside_folder(root, candidate, f"the data file of label '{label}'")
        return read_tensor(file) if file.is_file() else None

    return _compose_translation(parsed, str(graph_file), data, attribs, progress)


def loads_nnef1(
    text: str,
    variables: Mapping[str, np.ndarray] | None = None,
    attribs: Mapping[str, Any] | None = None,
    progress: Any = None,
    quantization: str | None = None,
) -> Graph:
    """NNEF 1.0 text as a Graph; ``variables`` maps labels to data; ``progress`` as in
    :mod:`uopviz.core.progress`; ``quantization`` is the text of a ``graph.quant`` file (each
    tensor's quantisation is kept as ``graph.tensors[name].quantization``)."""
    parsed = _parse(text, "<string>", quantization)
    given = dict(variables or {})
    return _compose_translation(parsed, "<nnef 1.0>", given.get, attribs, progress)
