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
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from uopviz.nnef.composer import Composer
from uopviz.nnef.data import inside_folder, read_tensor
from uopviz.nnef.errors import NNEFError, register_source
from uopviz.nnef.graph import Graph
from uopviz.nnef.lexer import KEYWORDS
from uopviz.nnef.nnef1_process import parse_nnef1
from uopviz.nnef.parser import parse_module
from uopviz.nnef.stdlib_loader import ModuleSet

__all__ = ["SUPPORTED", "load_nnef1", "loads_nnef1", "translate"]

_TYPES = {"scalar": "real", "integer": "int", "logical": "bool"}


def _import_nnef() -> Any:
    try:
        import nnef
    except ImportError as error:  # pragma: no cover - the package is a dependency
        raise NNEFError("reading NNEF 1.0 needs the 'nnef' package (pip install nnef)") from error
    return nnef


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


def _conv(t: _Translation, op: Any) -> None:
    x, w, b = op.inputs.values()
    attribs = op.attribs
    if attribs.get("border", "constant") != "constant":
        raise NNEFError(
            f"NNEF 1.0 {op.name} with border '{attribs['border']}' is not supported (only 'constant')"
        )
    xs, ws = t.shape(x), t.shape(w)
    d = len(xs) - 2
    stride = attribs["stride"] or [1] * d
    dilation = attribs["dilation"] or [1] * d
    groups = attribs.get("groups", 1)
    if op.name == "conv":
        padding = (
            _pairs(attribs["padding"])
            if attribs["padding"]
            else _same_padding(xs[2:], ws[2:], stride, dilation)
        )
        bias = _channels(t, b, ws[0])
        extra = ""
    else:
        padding = _pairs(attribs["padding"]) if attribs["padding"] else None
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
    arguments = [t.arg(x), t.arg(w)] + ([bias] if bias is not None else [])
    t.emit(t.result(op), f"nn.{op.name}{{{', '.join(attributes)}{extra}}}({', '.join(arguments)})")


def _pool(t: _Translation, op: Any) -> None:
    (x,) = op.inputs.values()
    attribs = op.attribs
    shape = t.shape(x)
    rank = len(shape)
    size = list(attribs["size"])
    stride = list(attribs["stride"] or [1] * rank)
    dilation = list(attribs["dilation"] or [1] * rank)
    padding = (
        _pairs(attribs["padding"]) if attribs["padding"] else _same_padding(shape, size, stride, dilation)
    )
    border = attribs.get("border", "constant")
    source = t.arg(x)
    kind = {"max_pool": "max_pool", "avg_pool": "avg_pool", "rms_pool": "rms_pool", "box": "sum_pool"}[
        op.name
    ]
    extra = ""
    if kind == "max_pool" and border == "constant" and any(padding):
        padded = t.temporary()  # zeros take part in the maximum
        t.emit(padded, f"layout.pad{{padding={_literal(padding)}}}({source})")
        source, padding = padded, [0] * (2 * rank)
    elif kind in ("avg_pool", "rms_pool"):
        extra = f", ignore_border={'true' if border == 'ignore' else 'false'}"
    elif border not in ("constant", "ignore"):
        raise NNEFError(f"NNEF 1.0 {op.name} with border '{border}' is not supported")
    if op.name == "box" and attribs.get("normalize"):
        kind, extra = "avg_pool", ", ignore_border=false"
    t.emit(
        t.result(op),
        f"nn.{kind}{{axes={_literal(list(range(rank)))}, size={_literal(size)}, "
        f"stride={_literal(stride)}, dilation={_literal(dilation)}, padding={_literal(padding)}"
        f"{extra}}}({source})",
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
    (x,) = op.inputs.values()
    axes = list(op.attribs["axes"])
    if len(axes) != 1:
        raise NNEFError(f"NNEF 1.0 {op.name} over several axes {axes} is not supported")
    kind = "argmax" if op.name == "argmax_reduce" else "argmin"
    t.emit(t.result(op), f"math.{kind}{{axis={axes[0]}}}({t.arg(x)})")


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
    (x,) = op.inputs.values()
    attribs = op.attribs
    method, border = attribs.get("method", "symmetric"), attribs.get("border", "replicate")
    if method not in ("symmetric", "asymmetric"):
        raise NNEFError(f"NNEF 1.0 multilinear_upsample with method '{method}' is not supported")
    factor = list(attribs["factor"])
    axes = list(range(2, 2 + len(factor)))
    t.emit(
        t.result(op),
        f"image.linear_upsample{{axes={_literal(axes)}, factor={_literal(factor)}, "
        f"symmetric={_literal(method == 'symmetric')}, "
        f"replicate_border={_literal(border == 'replicate')}}}({t.arg(x)})",
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
    imports = "import layout, math, nn, linalg, image;"
    text = f"{imports}\n\ngraph {graph.name} {{\n" + "\n".join(blocks) + "\n}\n"
    return text, dict(t.labels), dict(t.names)


def _parse(text: str | None, path: Path | None) -> Any:
    """The ``nnef`` package's parse (with shape inference) of ``text`` or the file ``path``, run in a
    child process: its C parser can crash on malformed input (see :mod:`uopviz.nnef.nnef1_process`)."""
    _import_nnef()
    file = str(path) if path is not None else "<string>"
    return parse_nnef1(text, str(path) if path is not None else None, file)


def _compose_translation(
    graph: Any, source_name: str, data: Callable[[str], np.ndarray | None], attribs: Mapping[str, Any] | None
) -> Graph:
    text, labels, names = translate(graph)
    file = f"{source_name} (as SkriptND)"
    register_source(file, text)
    modules = ModuleSet(None)
    modules.add("main", parse_module(text, file))

    def variable_data(name: str, info: Any) -> np.ndarray | None:
        label = labels.get(name)
        return None if label is None else data(label)

    composed = Composer(modules, variable_data).compose("main", None, attribs)
    composed.source = text
    renamed = {skriptnd: original for original, skriptnd in names.items() if skriptnd != original}
    if renamed:
        _restore_names(composed, renamed)
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
) -> Graph:
    """An NNEF 1.0 folder (``graph.nnef`` + ``<label>.dat``) or ``graph.nnef`` file as a Graph.

    ``fetch`` (archives) brings a data file into the folder before it is read."""
    path = Path(path)
    folder = path if path.is_dir() else path.parent
    graph_file = folder / "graph.nnef" if path.is_dir() else path
    root = folder.resolve()
    inside_folder(root, graph_file, "the graph file")
    parsed = _parse(None, graph_file)

    def data(label: str) -> np.ndarray | None:
        candidate = root / f"{label.lstrip('/')}.dat"
        if fetch is not None:
            fetch(candidate)
        file = inside_folder(root, candidate, f"the data file of label '{label}'")
        return read_tensor(file) if file.is_file() else None

    return _compose_translation(parsed, str(graph_file), data, attribs)


def loads_nnef1(
    text: str, variables: Mapping[str, np.ndarray] | None = None, attribs: Mapping[str, Any] | None = None
) -> Graph:
    """NNEF 1.0 text as a Graph; ``variables`` maps labels to data."""
    parsed = _parse(text, None)
    given = dict(variables or {})
    return _compose_translation(parsed, "<nnef 1.0>", given.get, attribs)
