"""Evaluation of SkriptND expressions (NNEF 2.0 §2.4): the value model shared by composition
and lowering.

Values are plain Python objects (:mod:`uopviz.nnef.evaluation.values` defines the others):

- ``int``, ``float`` (SkriptND ``real``), ``bool``, ``str`` for the primitive types;
- ``list`` for a pack (packs never nest; items are never null);
- ``None`` for the null value of an optional type (it propagates through every expression but
  ``??`` and ``?x``, §2.4.1);
- :class:`DynamicExtent` for a shape extent only known at run time (with its static upper bound);
- :class:`RuntimeScalar` for a scalar computed from such extents (``real(s[axes] * ..)`` of
  mean_reduce over an extent the data decides), kept symbolic until a kernel computes it;
- :class:`BoundedIndex` for a guarded tensor index ``|i|`` / ``|i <> a : b|`` (lowering only);
- any other object (a graph tensor, a :class:`~uopviz.core.uop.UOp` scalar in a lowering) is
  passed through where the language moves values around (select, coalesce, packs, indexing).

:class:`Evaluator` walks the syntax tree of :mod:`uopviz.nnef.syntax.ast`. Identifiers come from a
``symbols`` dict; a name that is *declared* but not bound yet (``pending``) raises
:class:`Unknown`, which the composer uses to decide which assertions can be checked already
(§2.9). Scalar operations go through :func:`~uopviz.nnef.evaluation.scalar_ops.apply_binary` /
:func:`~uopviz.nnef.evaluation.scalar_ops.apply_unary`, which a lowering extends to UOp operands
by passing ``scalar_ops``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from uopviz.nnef.errors import NNEFError
from uopviz.nnef.evaluation.scalar_ops import (
    INT_FAST,
    PYTHON_OPS,
    PythonScalarOps,
    apply_binary,
    apply_unary,
    check_pack_length,
    cumulative_fold,
    elementwise_binary,
    elementwise_unary,
    fold_pack,
)
from uopviz.nnef.evaluation.values import (
    BoundedIndex,
    DynamicExtent,
    RuntimeScalar,
    Unknown,
    format_value,
    length_at_bound,
    type_name_of,
)
from uopviz.nnef.syntax import ast

__all__ = ["Evaluator"]


# ------------------------------------------------------------------------------------------------
# the evaluator

_TYPE_DEFAULTS = {"int": 0, "real": 0.0, "bool": False, "str": ""}


class Evaluator:
    """Evaluates expression nodes against ``symbols``.

    ``pending``: names declared but not bound yet (looking one up raises :class:`Unknown`);
    ``types``: generic type names (``@dtype``) bound to concrete ones; ``ops``: the scalar
    operations (Python values by default). Subclasses override :meth:`tensor_access` to give
    ``x[i, j]`` a meaning (only lowerings have one).
    """

    def __init__(
        self,
        symbols: Mapping[str, Any],
        pending: frozenset[str] | set[str] = frozenset(),
        types: Mapping[str, str] | None = None,
        ops: PythonScalarOps = PYTHON_OPS,
    ) -> None:
        self.symbols = symbols
        self.pending = pending
        self.types = types if types is not None else {}
        self.ops = ops

    # -- entry points -------------------------------------------------------------------------

    def __call__(self, node: ast.Expr) -> Any:
        method = _DISPATCH.get(type(node))
        if method is None:
            raise NNEFError.at(node.pos, f"{type(node).__name__} is not allowed in an expression here")
        return method(self, node)

    def lookup(self, name: str, position: ast.Position) -> Any:
        """The value bound to ``name``."""
        try:
            return self.symbols[name]
        except KeyError:
            if name in self.pending:
                raise Unknown(name, position) from None
            raise NNEFError.at(position, f"unknown identifier '{name}'") from None

    def resolve_type(self, type_name: str, position: ast.Position) -> str:
        """A concrete type name for a possibly generic one."""
        if type_name in _TYPE_DEFAULTS:
            return type_name
        resolved = self.types.get(type_name)
        if resolved is None:
            raise NNEFError.at(position, f"the generic type '{type_name}' is not bound here")
        return resolved

    def tensor_access(self, node: ast.TensorAccess) -> Any:
        """``x[i, j, ...]``: only meaningful in a lowering."""
        raise NNEFError.at(node.pos, "tensor access x[...] is only allowed in @lower formulas")

    # -- leaves -------------------------------------------------------------------------------

    def _identifier(self, node: ast.Identifier) -> Any:
        return self.lookup(node.name, node.pos)

    def _member(self, node: ast.Member) -> Any:
        value = self.lookup(node.name, node.pos)
        if value is None:
            return None
        if node.member == "size":
            if not isinstance(value, list):
                raise NNEFError.at(node.pos, f"'{node.name}.size' needs a pack, '{node.name}' is not one")
            return len(value)
        shape = getattr(value, "shape", None)
        if shape is None:
            raise NNEFError.at(
                node.pos,
                f"'{node.name}.{node.member}' needs a tensor, '{node.name}' is {type_name_of(value)}",
            )
        return list(shape) if node.member == "shape" else len(shape)

    def _int(self, node: ast.IntLiteral) -> int:
        return node.value

    def _real(self, node: ast.RealLiteral) -> float:
        return node.value

    def _bool(self, node: ast.BoolLiteral) -> bool:
        return node.value

    def _string(self, node: ast.StringLiteral) -> str:
        return node.value

    def _keyword(self, node: ast.KeywordConstant) -> float:
        return math.inf if node.name == "inf" else math.pi

    def _format(self, node: ast.Format) -> str | None:
        parts = []
        for part in node.parts:
            if isinstance(part, str):
                parts.append(part)
            else:
                parts.append(format_value(self(part)))
        return "".join(parts)

    def _placeholder(self, node: ast.Placeholder) -> None:
        return None

    # -- packs ----------------------------------------------------------------------------------

    def _list(self, node: ast.List) -> list | None:
        out: list = []
        for item in node.items:
            if isinstance(item, ast.Expand):
                values = self._expand_item(item)
                if values is None:
                    return None
                out.extend(values)
            elif isinstance(item, ast.Range):
                values = self._range(item)
                if values is None:
                    return None
                out.extend(values)
            elif isinstance(item, ast.Zip):
                raise NNEFError.at(item.pos, "a zip (a, b) must be expanded with '..' in a list: [(a, b)..]")
            else:
                value = self(item)
                if value is None:
                    return None
                if isinstance(value, list):
                    raise NNEFError.at(item.pos, "a pack inside a list must be expanded with '..'")
                out.append(value)
        return out

    def _expand_item(self, item: ast.Expand) -> list | None:
        if isinstance(item.value, ast.Zip):
            packs = [self(part) for part in item.value.items]
            if any(pack is None for pack in packs):
                return None
            for part, pack in zip(item.value.items, packs, strict=True):
                if not isinstance(pack, list):
                    raise NNEFError.at(part.pos, "every item of a zip must be a pack")
            lengths = {len(pack) for pack in packs}
            if len(lengths) > 1:
                raise NNEFError.at(item.pos, f"zipped packs have different lengths {sorted(lengths)}")
            return [value for group in zip(*packs, strict=True) for value in group]
        value = self(item.value)
        if value is None:
            return None
        if item.count is None:
            if not isinstance(value, list):
                raise NNEFError.at(
                    item.pos,
                    "'..' without a count expands a pack; this value is not a pack "
                    "(repeat a single value with '..(count)')",
                )
            return value
        count = self.repeat_count(item.count)
        if count is None:
            return None
        if isinstance(value, list):
            check_pack_length(len(value) * count, item.pos)
            return value * count
        return [value] * count

    def repeat_count(self, node: ast.Expr) -> int | None:
        """A repetition count ``..(n)``: an int, or a bool read as 0 / 1."""
        count = self(node)
        if count is None:
            return None
        if isinstance(count, bool):
            return int(count)
        length = length_at_bound(count)
        if length is not None:
            return length
        if isinstance(count, DynamicExtent | RuntimeScalar):
            raise NNEFError.at(
                node.pos,
                f"a repetition count must be known at compile time, got the run-time value {count!r} "
                f"(a pack's length cannot follow an extent the data decides)",
            )
        if not isinstance(count, int):
            raise NNEFError.at(
                node.pos, f"a repetition count must be an int or bool, got {type_name_of(count)}"
            )
        if count < 0:
            raise NNEFError.at(node.pos, f"a repetition count must not be negative, got {count}")
        check_pack_length(count, node.pos)
        return count

    def _range(self, node: ast.Range) -> list | None:
        if node.start is None or node.stop is None:
            raise NNEFError.at(node.pos, "a range in a list needs a start and an end: [start:end]")
        start, stop = self(node.start), self(node.stop)
        step = 1 if node.step is None else self(node.step)
        if start is None or stop is None or step is None:
            return None
        for part, value in (("start", start), ("end", stop), ("step", step)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise NNEFError.at(
                    node.pos, f"the {part} of a range must be an int, got {type_name_of(value)}"
                )
        if step == 0:
            raise NNEFError.at(node.pos, "the step of a range must not be 0")
        items = range(start, stop, step)
        check_pack_length(len(items), node.pos)
        return list(items)

    def _zip(self, node: ast.Zip) -> Any:
        raise NNEFError.at(node.pos, "a zip (a, b) is only allowed expanded inside a list: [(a, b)..]")

    def _expand(self, node: ast.Expand) -> Any:
        raise NNEFError.at(node.pos, "'..' expansion is only allowed inside a list, a shape or an index")

    def _range_alone(self, node: ast.Range) -> Any:
        raise NNEFError.at(node.pos, "a range is only allowed inside a list or an index")

    # -- indexing -----------------------------------------------------------------------------------

    def _index(self, node: ast.Index) -> Any:
        base = self(node.base)
        if base is None:
            return None
        if isinstance(node.index, ast.Range):
            return self.slice_value(base, node.index)
        index = self(node.index)
        if index is None:
            return None
        return self.index_value(base, index, node)

    def slice_value(self, base: Any, node: ast.Range) -> Any:
        """``base[start:stop:step]`` of a pack or a string (Python slice semantics)."""
        parts = [None if part is None else self(part) for part in (node.start, node.stop, node.step)]
        for part in parts:
            if part is not None and (isinstance(part, bool) or not isinstance(part, int)):
                raise NNEFError.at(node.pos, f"slice bounds must be ints, got {type_name_of(part)}")
        if parts[2] == 0:
            raise NNEFError.at(node.pos, "the step of a slice must not be 0")
        if not isinstance(base, list | str):
            raise NNEFError.at(node.pos, f"only packs and strings can be sliced, got {type_name_of(base)}")
        return base[slice(*parts)]

    def index_value(self, base: Any, index: Any, node: ast.Index) -> Any:
        """``base[index]``: an item, a pack of items (int pack) or a masked pack (bool pack)."""
        if not isinstance(base, list | str):
            return self.index_other(base, index, node)
        if isinstance(index, list):
            if index and all(isinstance(item, bool) for item in index):
                if len(index) != len(base):
                    raise NNEFError.at(
                        node.pos, f"a mask of length {len(index)} cannot index a pack of length {len(base)}"
                    )
                items = [item for item, keep in zip(base, index, strict=True) if keep]
            else:
                items = [self._item(base, item, node) for item in index]
            return "".join(items) if isinstance(base, str) else items
        return self._item(base, index, node)

    def index_other(self, base: Any, index: Any, node: ast.Index) -> Any:
        """Indexing something that is neither a pack nor a string (a lowering reads 1-D tensors)."""
        raise NNEFError.at(node.pos, f"only packs and strings can be indexed, got {type_name_of(base)}")

    def _item(self, base: list | str, index: Any, node: ast.Index) -> Any:
        if isinstance(index, bool) or not isinstance(index, int):
            return self.dynamic_item(base, index, node)
        if not -len(base) <= index < len(base):
            raise NNEFError.at(
                node.pos,
                f"index {index} is out of range for a pack of length {len(base)}: {format_value(base)}",
            )
        return base[index]

    def dynamic_item(self, base: list | str, index: Any, node: ast.Index) -> Any:
        """An item picked by a non-int index (a run-time index in a lowering)."""
        raise NNEFError.at(node.pos, f"a pack index must be an int, got {type_name_of(index)}")

    def _substitute(self, node: ast.Substitute) -> Any:
        base, index, value = self(node.base), self(node.index), self(node.value)
        if base is None or index is None or value is None:
            return None
        if not isinstance(base, list):
            raise NNEFError.at(node.pos, f"'<-' substitutes items of a pack, got {type_name_of(base)}")
        out = list(base)
        indices = index if isinstance(index, list) else [index]
        values = value if isinstance(value, list) else [value] * len(indices)
        if isinstance(index, list) and len(values) != len(indices):
            raise NNEFError.at(node.pos, f"'<-' replaces {len(indices)} items with {len(values)} values")
        if not isinstance(index, list) and isinstance(value, list):
            raise NNEFError.at(node.pos, "'<-' with a single index needs a single value")
        for position, item in zip(indices, values, strict=True):
            if isinstance(position, bool) or not isinstance(position, int):
                raise NNEFError.at(node.pos, f"'<-' indices must be ints, got {type_name_of(position)}")
            if not -len(out) <= position < len(out):
                raise NNEFError.at(
                    node.pos, f"'<-' index {position} is out of range for a pack of length {len(out)}"
                )
            out[position] = item
        return out

    # -- operators ----------------------------------------------------------------------------------

    def _unary(self, node: ast.Unary) -> Any:
        return apply_unary(node.op, self(node.operand), node.pos, self.ops)

    def _binary(self, node: ast.Binary) -> Any:
        left, right = self(node.left), self(node.right)
        if type(left) is int and type(right) is int:  # the common case of shape arithmetic
            function = INT_FAST.get(node.op)
            if function is not None:
                return function(left, right)
        return apply_binary(node.op, left, right, node.pos, self.ops)

    def _select(self, node: ast.Select) -> Any:
        condition = self(node.condition)
        if condition is None:
            return None
        if isinstance(condition, list):
            then = self(node.then)
            otherwise = None if node.otherwise is None else self(node.otherwise)
            if then is None or (node.otherwise is not None and otherwise is None):
                return None
            return self._select_items(condition, then, otherwise, node)
        truth = self.ops.truth(condition, node.pos)
        if truth is True:
            return self(node.then)
        if truth is False:
            return None if node.otherwise is None else self(node.otherwise)
        if node.otherwise is None:
            raise NNEFError.at(node.pos, "'c ? x' (without ':') needs a compile-time condition")
        return self.runtime_select(condition, node)

    def _select_items(self, condition: list, then: Any, otherwise: Any, node: ast.Select) -> Any:
        def pick(c: Any, a: Any, b: Any) -> Any:
            truth = self.ops.truth(c, node.pos)
            if truth is None:
                return self.ops.select(c, a, b, node.pos)
            return a if truth else b

        if node.otherwise is None:
            raise NNEFError.at(node.pos, "'c ? x' (without ':') needs a single (non-pack) condition")
        thens = then if isinstance(then, list) else [then] * len(condition)
        others = otherwise if isinstance(otherwise, list) else [otherwise] * len(condition)
        if len(thens) != len(condition) or len(others) != len(condition):
            raise NNEFError.at(
                node.pos,
                f"a select with a pack condition of length {len(condition)} needs "
                f"branches of that length, got {len(thens)} and {len(others)}",
            )
        return [pick(c, a, b) for c, a, b in zip(condition, thens, others, strict=True)]

    def runtime_select(self, condition: Any, node: ast.Select) -> Any:
        """``c ? a : b`` with a run-time condition (a lowering builds a WHERE)."""
        then, otherwise = self(node.then), self(node.otherwise)
        if then is None or otherwise is None:
            return None
        return elementwise_binary(
            lambda a, b: self.ops.select(condition, a, b, node.pos), then, otherwise, node.pos
        )

    def _coalesce(self, node: ast.Coalesce) -> Any:
        value = self(node.value)
        return self(node.fallback) if value is None else value

    def _fold(self, node: ast.Fold) -> Any:
        operand = self(node.operand)
        if operand is None:
            return None
        items = operand if isinstance(operand, list) else [operand]
        if node.cumulative:
            return cumulative_fold(node.op, items, node.pos, self.ops)
        return fold_pack(node.op, items, node.pos, self.ops)

    def _cast(self, node: ast.Cast) -> Any:
        type_name = self.resolve_type(node.type_name, node.pos)
        if node.arg is None:
            if type_name not in _TYPE_DEFAULTS:
                raise NNEFError.at(node.pos, f"type '{type_name}' has no default value")
            return _TYPE_DEFAULTS[type_name]
        value = self(node.arg)
        if value is None:
            return None
        if type_name == "str":
            raise NNEFError.at(node.pos, "casting to str is not allowed (use string formatting)")
        return elementwise_unary(lambda item: self.ops.cast(type_name, item, node.pos), value)

    def _builtin(self, node: ast.Builtin) -> Any:
        value = self(node.arg)
        if value is None:
            return None
        return elementwise_unary(lambda item: self.ops.builtin(node.func, item, node.pos), value)

    def _bounded(self, node: ast.Bounded) -> Any:
        index = self(node.index)
        if index is None:
            return None
        if node.lower is None:
            return elementwise_unary(BoundedIndex, index)
        lower, upper = self(node.lower), self(node.upper)
        if lower is None or upper is None:
            return None
        if isinstance(index, list):
            lowers = lower if isinstance(lower, list) else [lower] * len(index)
            uppers = upper if isinstance(upper, list) else [upper] * len(index)
            if len(lowers) != len(index) or len(uppers) != len(index):
                raise NNEFError.at(node.pos, "the remapping bounds must match the length of the index pack")
            return [BoundedIndex(i, lo, hi) for i, lo, hi in zip(index, lowers, uppers, strict=True)]
        return BoundedIndex(index, lower, upper)

    def _tensor_access(self, node: ast.TensorAccess) -> Any:
        return self.tensor_access(node)


_DISPATCH: dict[type, Callable[[Evaluator, Any], Any]] = {
    ast.Identifier: Evaluator._identifier,
    ast.Member: Evaluator._member,
    ast.IntLiteral: Evaluator._int,
    ast.RealLiteral: Evaluator._real,
    ast.BoolLiteral: Evaluator._bool,
    ast.StringLiteral: Evaluator._string,
    ast.KeywordConstant: Evaluator._keyword,
    ast.Format: Evaluator._format,
    ast.Placeholder: Evaluator._placeholder,
    ast.List: Evaluator._list,
    ast.Range: Evaluator._range_alone,
    ast.Expand: Evaluator._expand,
    ast.Zip: Evaluator._zip,
    ast.Index: Evaluator._index,
    ast.TensorAccess: Evaluator._tensor_access,
    ast.Substitute: Evaluator._substitute,
    ast.Unary: Evaluator._unary,
    ast.Binary: Evaluator._binary,
    ast.Select: Evaluator._select,
    ast.Coalesce: Evaluator._coalesce,
    ast.Fold: Evaluator._fold,
    ast.Cast: Evaluator._cast,
    ast.Builtin: Evaluator._builtin,
    ast.Bounded: Evaluator._bounded,
}
