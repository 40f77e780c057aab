"""The results of an invocation checked against its declaration, with no composer state: the
length a packed result declares on the left side (:func:`declared_length`, bound to the value's
by :func:`bind_frame_count`) and each output of a ``@compose`` block against its declared type and
shape (:func:`check_output`)."""

from __future__ import annotations

from typing import Any

from uopviz.nnef.composition.support import Frame, Instance, shapes_match
from uopviz.nnef.errors import NNEFError
from uopviz.nnef.evaluation.values import Unknown, format_value, length_at_bound
from uopviz.nnef.model.nodes import TensorInfo
from uopviz.nnef.syntax import ast

__all__ = ["bind_frame_count", "check_output", "declared_length"]


def declared_length(group: ast.Result | ast.ResultList | ast.ResultTuple, frame: Frame) -> int | None:
    """The length a packed result declares on the left side (``ys..(8)``, §2.10: packed results
    denote their length), when it is known before the value is composed."""
    if not isinstance(group, ast.Result) or group.pack is None:
        return None
    count = group.pack.count
    if count is None or isinstance(count, ast.Placeholder):
        return None
    if isinstance(count, ast.Identifier) and count.name not in frame.symbols:
        return None  # a new symbol: it takes the length the value has
    try:
        value = frame.evaluator()(count)
    except Unknown:
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def bind_frame_count(frame: Frame, count: ast.Expr, length: int, result: ast.Result) -> None:
    """Bind (or check) the length a packed result declares with a symbol or an expression of the
    frame (``ys..(n)``) to the number of tensors it receives."""
    if isinstance(count, ast.Identifier) and count.name not in frame.symbols:
        frame.symbols[count.name] = length
        return
    try:
        expected = frame.evaluator()(count)
    except Unknown:
        if isinstance(count, ast.Identifier):
            frame.symbols[count.name] = length
            return
        raise
    if length_at_bound(expected) == length:
        return  # declared by the input extents the pack follows (``rows..(s)``): taken at their bound
    if expected != length:
        raise NNEFError.at(
            result.pos,
            f"'{result.name}' receives {length} tensors, but its length is declared {format_value(expected)}",
        )


def check_output(
    instance: Instance,
    param: ast.Param,
    value: Any,
    declared: tuple[str, Any],
    position: ast.Position,
) -> None:
    """Check what an invocation's ``@compose`` produced for the output ``param`` against its
    declaration: a tensor (or a pack of the declared length) of the declared type and shape."""
    element, shapes = declared
    items = value if isinstance(value, list) else [value]
    expected_shapes = (
        shapes if isinstance(shapes, list) and param.type.pack is not None else [shapes] * len(items)
    )
    if param.type.pack is not None and isinstance(shapes, list) and len(shapes) != len(items):
        raise NNEFError.at(
            position,
            f"{instance.name}: output '{param.name}' should be {len(shapes)} tensors, "
            f"its @compose produced {len(items)}",
        )
    for item, shape in zip(items, expected_shapes, strict=False):
        if not isinstance(item, TensorInfo):
            raise NNEFError.at(position, f"{instance.name}: output '{param.name}' is not a tensor")
        if item.dtype != element:
            raise NNEFError.at(
                position,
                f"{instance.name}: output '{param.name}' is declared {element} but its "
                f"@compose produced a {item.dtype} tensor",
            )
        if shape is not None and not shapes_match(shape, item.shape):
            raise NNEFError.at(
                position,
                f"{instance.name}: output '{param.name}' is declared with shape "
                f"{format_value(shape)} but its @compose produced "
                f"{format_value(list(item.shape))}",
            )
