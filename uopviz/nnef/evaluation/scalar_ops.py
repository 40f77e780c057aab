"""Scalar operations on SkriptND values: :class:`PythonScalarOps` (the operators and functions on
Python numbers, run-time scalars and undecided values), which a lowering extends to UOp operands,
:func:`apply_binary` / :func:`apply_unary` (elementwise over packs), the folds of a pack
(``+ ..``, ``* ..``, cumulative ones) and :data:`MAX_PACK_LENGTH`, the longest pack a composition
unrolls.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from uopviz.nnef.errors import NNEFError
from uopviz.nnef.evaluation.values import (
    ARITHMETIC,
    COMPARISONS,
    DIVISIONS,
    LOGICAL,
    UNDECIDED,
    DynamicExtent,
    RuntimeScalar,
    format_value,
    same_value,
    type_name_of,
    uniform_value,
)
from uopviz.nnef.syntax import ast

__all__ = [
    "INT_FAST", "PYTHON_OPS", "PythonScalarOps", "apply_binary", "apply_unary", "ceil_div",
    "check_pack_length", "cumulative_fold", "elementwise_binary", "elementwise_unary", "floor_div",
    "fold_pack", "widest_extent",
]  # fmt: skip


def _runtime_operand(value: Any) -> Any:
    """The expression of an operand of a run-time scalar operation."""
    return value.expression if isinstance(value, RuntimeScalar) else value


def _runtime_type(value: Any) -> str:
    return value.type if isinstance(value, RuntimeScalar) else type_name_of(value)


def _runtime_binary(op: str, a: Any, b: Any, position: ast.Position) -> Any:
    """``a op b`` where an operand is a run-time scalar (or a run-time extent meets a real): a
    run-time scalar; a comparison is a run-time bool (which a select can choose with, an
    assertion cannot check)."""
    types = {_runtime_type(a), _runtime_type(b)}
    if op in COMPARISONS and not types - {"int", "real"}:
        return RuntimeScalar((op, _runtime_operand(a), _runtime_operand(b)), "bool")
    if op in LOGICAL and not types - {"bool"}:
        return RuntimeScalar((op, _runtime_operand(a), _runtime_operand(b)), "bool")
    if op not in ARITHMETIC or types - {"int", "real"}:
        raise NNEFError.at(
            position,
            f"operator '{op}' cannot combine the run-time values {format_value(a)} and {format_value(b)}",
        )
    type_name = "real" if "real" in types else "int"
    return RuntimeScalar((op, _runtime_operand(a), _runtime_operand(b)), type_name)


# ------------------------------------------------------------------------------------------------
# scalar operations


def ceil_div(a: Any, b: Any) -> Any:
    """``a \\ b``: the quotient rounded up (ints stay ints)."""
    if isinstance(a, int) and isinstance(b, int):
        return -((-a) // b)
    return math.ceil(a / b)


def floor_div(a: Any, b: Any) -> Any:
    """``a / b``: the floor quotient of ints, the true quotient otherwise."""
    if isinstance(a, int) and isinstance(b, int) and not isinstance(a, bool):
        return a // b
    return a / b


def _power(a: Any, b: Any) -> Any:
    result = a**b
    return result.real if isinstance(result, complex) else result


_PYTHON_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": floor_div,
    "\\": ceil_div,
    "%": lambda a, b: a % b,
    "**": _power,
    "<?": lambda a, b: b if b < a else a,
    ">?": lambda a, b: b if b > a else a,
    "&&": lambda a, b: a and b,
    "||": lambda a, b: a or b,
    "^": lambda a, b: a != b,
    "=>": lambda a, b: (not a) or b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}

# int (op) int that can neither fail nor need checks
INT_FAST: dict[str, Callable[[int, int], Any]] = {
    op: _PYTHON_BINARY[op] for op in ("+", "-", "*", "<?", ">?", "<", "<=", ">", ">=", "==", "!=")
}


def _round_half_away(x: float) -> float:
    """Rounding to the nearest integer, halves away from zero (C's ``round``)."""
    return float(math.floor(x + 0.5)) if x >= 0 else float(math.ceil(x - 0.5))


def _sign(x: Any) -> Any:
    if isinstance(x, int) and not isinstance(x, bool):
        return (x > 0) - (x < 0)
    return math.copysign(1.0, x) if x != 0 else 0.0


_PYTHON_BUILTINS: dict[str, Callable[[Any], Any]] = {
    "sqrt": math.sqrt, "exp": math.exp, "log": math.log, "sin": math.sin, "cos": math.cos,
    "tan": math.tan, "asin": math.asin, "acos": math.acos, "atan": math.atan, "sinh": math.sinh,
    "cosh": math.cosh, "tanh": math.tanh, "asinh": math.asinh, "acosh": math.acosh,
    "atanh": math.atanh, "round": _round_half_away, "floor": lambda x: float(math.floor(x)),
    "ceil": lambda x: float(math.ceil(x)), "frac": lambda x: x - math.floor(x), "abs": abs,
    "sign": _sign, "erf": math.erf,
}  # fmt: skip


class PythonScalarOps:
    """Scalar operations on compile-time values; a lowering subclasses this for UOp operands.

    Every method receives non-null, non-pack operands. ``position`` is for error messages.
    """

    def binary(self, op: str, a: Any, b: Any, position: ast.Position) -> Any:
        """``a op b`` for one pair of items."""
        type_a, type_b = type(a), type(b)
        if (type_a is int or type_a is float) and (type_b is int or type_b is float) and op not in LOGICAL:
            try:  # numbers: the common case, without the checks below
                return _PYTHON_BINARY[op](a, b)
            except ZeroDivisionError:
                raise NNEFError.at(
                    position, f"division by zero in '{format_value(a)} {op} {format_value(b)}'"
                ) from None
            except OverflowError:
                raise NNEFError.at(
                    position, f"'{format_value(a)} {op} {format_value(b)}' overflows"
                ) from None
        return self._binary_other(op, a, b, position)

    def _binary_other(self, op: str, a: Any, b: Any, position: ast.Position) -> Any:
        if isinstance(a, RuntimeScalar) or isinstance(b, RuntimeScalar):
            return _runtime_binary(op, a, b, position)
        if isinstance(a, DynamicExtent) or isinstance(b, DynamicExtent):
            if isinstance(a, float) or isinstance(b, float):  # a real result: no extent any more
                return _runtime_binary(op, a, b, position)
            return _dynamic_binary(op, a, b)
        if op in DIVISIONS and b == 0 and not isinstance(b, float):
            raise NNEFError.at(position, f"division by zero in '{format_value(a)} {op} {format_value(b)}'")
        if op in ARITHMETIC and (isinstance(a, bool | str) or isinstance(b, bool | str)):
            raise NNEFError.at(
                position,
                f"operator '{op}' cannot combine {type_name_of(a)} "
                f"{format_value(a, True)} and {type_name_of(b)} {format_value(b, True)}",
            )
        if (
            op in LOGICAL
            and (a is UNDECIDED or b is UNDECIDED)
            and all(isinstance(x, bool) or x is UNDECIDED for x in (a, b))
        ):
            return _undecided_logic(op, a, b)
        if op in LOGICAL and not (isinstance(a, bool) and isinstance(b, bool)):
            raise NNEFError.at(
                position, f"operator '{op}' needs bool operands, got {type_name_of(a)} and {type_name_of(b)}"
            )
        try:
            return _PYTHON_BINARY[op](a, b)
        except ZeroDivisionError:
            raise NNEFError.at(
                position, f"division by zero in '{format_value(a)} {op} {format_value(b)}'"
            ) from None
        except TypeError:
            raise NNEFError.at(
                position,
                f"operator '{op}' cannot combine {type_name_of(a)} "
                f"{format_value(a, True)} and {type_name_of(b)} "
                f"{format_value(b, True)}",
            ) from None
        except OverflowError:
            raise NNEFError.at(position, f"'{format_value(a)} {op} {format_value(b)}' overflows") from None

    def unary(self, op: str, a: Any, position: ast.Position) -> Any:
        """``op a`` for ``+``, ``-`` and ``!``."""
        if op == "!":
            if a is UNDECIDED:
                return a
            if isinstance(a, RuntimeScalar) and a.type == "bool":
                return RuntimeScalar(("==", a.expression, False), "bool")
            if not isinstance(a, bool):
                raise NNEFError.at(position, f"operator '!' needs a bool operand, got {type_name_of(a)}")
            return not a
        if isinstance(a, RuntimeScalar) and a.type in ("int", "real"):
            return a if op == "+" else RuntimeScalar(("*", a.expression, -1), a.type)
        if isinstance(a, bool) or not isinstance(a, int | float | DynamicExtent):
            raise NNEFError.at(position, f"operator '{op}' needs a number, got {type_name_of(a)}")
        if isinstance(a, DynamicExtent):
            return a if op == "+" else _dynamic_binary("*", a, -1)
        return a if op == "+" else -a

    def select(self, condition: Any, then: Any, otherwise: Any, position: ast.Position) -> Any:
        """``condition ? then : otherwise`` for a condition that is not a Python bool (a run-time
        bool of run-time extents chooses at run time)."""
        if isinstance(condition, RuntimeScalar) and condition.type == "bool":
            types = {_runtime_type(then), _runtime_type(otherwise)}
            if not types - {"int", "real"} or len(types) == 1:
                type_name = "real" if "real" in types else types.pop()
                return RuntimeScalar(
                    ("?", condition.expression, _runtime_operand(then), _runtime_operand(otherwise)),
                    type_name,
                )
            raise NNEFError.at(
                position,
                f"a run-time choice needs branches of one type, got {format_value(then)} and "
                f"{format_value(otherwise)}",
            )
        raise NNEFError.at(position, f"the condition of '? :' must be a bool, got {type_name_of(condition)}")

    def builtin(self, func: str, a: Any, position: ast.Position) -> Any:
        """A built-in function of one item."""
        if isinstance(a, DynamicExtent) or (isinstance(a, RuntimeScalar) and a.type in ("int", "real")):
            type_name = _runtime_type(a) if func in ("abs", "sign") else "real"
            return RuntimeScalar((func, _runtime_operand(a)), type_name)
        if isinstance(a, bool) or not isinstance(a, int | float):
            raise NNEFError.at(position, f"{func}() needs a number, got {type_name_of(a)}")
        if func in ("abs", "sign"):
            return _PYTHON_BUILTINS[func](a)
        try:
            return _PYTHON_BUILTINS[func](float(a))
        except (ValueError, OverflowError):
            raise NNEFError.at(position, f"{func}({format_value(a)}) is not defined") from None

    def cast(self, type_name: str, a: Any, position: ast.Position) -> Any:
        """A cast of one item to ``int``, ``real`` or ``bool``."""
        if isinstance(a, DynamicExtent | RuntimeScalar):
            if type_name == _runtime_type(a):
                return a
            if type_name not in ("int", "real", "bool"):
                raise NNEFError.at(position, f"cannot cast the run-time value {a!r} to {type_name}")
            return RuntimeScalar((type_name, _runtime_operand(a)), type_name)
        if isinstance(a, str) or not isinstance(a, int | float | bool):
            raise NNEFError.at(position, f"cannot cast {type_name_of(a)} to {type_name}")
        if type_name == "int":
            if isinstance(a, float) and not math.isfinite(a):
                raise NNEFError.at(position, f"cannot cast {format_value(a)} to int")
            return int(a)
        if type_name == "real":
            return float(a)
        if type_name == "bool":
            return bool(a)
        raise NNEFError.at(position, f"cannot cast to {type_name}")

    def truth(self, value: Any, position: ast.Position) -> bool | None:
        """The compile-time truth of a condition; None when it is a run-time value."""
        if isinstance(value, bool):
            return value
        if value is UNDECIDED:
            raise NNEFError.at(
                position, "this condition compares run-time extents; it cannot decide a compile-time branch"
            )
        return None


def _undecided_logic(op: str, a: Any, b: Any) -> Any:
    """Logic with a truth value decided only at run time (three-valued: a known operand may still
    decide the result, as ``ex == ey || ex is 1`` does for a broadcast of a scalar)."""
    if op == "&&":
        return False if a is False or b is False else UNDECIDED
    if op == "||":
        return True if a is True or b is True else UNDECIDED
    if op == "=>":
        return True if a is False or b is True else UNDECIDED
    return UNDECIDED


def _dynamic_binary(op: str, a: Any, b: Any) -> Any:
    """Arithmetic and comparisons with run-time extents (bounds kept conservatively)."""
    if op in COMPARISONS:
        if isinstance(a, DynamicExtent) and isinstance(b, DynamicExtent) and a.key == b.key:
            return op in ("<=", ">=", "==")
        return UNDECIDED
    if op in ("&&", "||", "^", "=>", "**"):
        raise TypeError(op)
    bound_a = a.bound if isinstance(a, DynamicExtent) else a
    bound_b = b.bound if isinstance(b, DynamicExtent) else b
    key_a = a.key if isinstance(a, DynamicExtent) else a
    key_b = b.key if isinstance(b, DynamicExtent) else b
    bound: int | None
    if bound_a is None or bound_b is None:
        bound = None
    elif op == "-":
        bound = bound_a - (0 if isinstance(b, DynamicExtent) else bound_b)
    elif op in ("/", "\\") and isinstance(b, DynamicExtent):
        bound = bound_a
    elif op == "%":
        bound = bound_b
    else:
        bound = _PYTHON_BINARY[op](bound_a, bound_b)
    return DynamicExtent((op, key_a, key_b), bound)


def widest_extent(extents: list[DynamicExtent]) -> DynamicExtent:
    """The largest of run-time extents: ``a >? b >? ...``, bounded by the largest bound."""
    widest = extents[0]
    for extent in extents[1:]:
        widest = _dynamic_binary(">?", widest, extent)
    return widest


PYTHON_OPS = PythonScalarOps()


def elementwise_binary(function: Callable[[Any, Any], Any], a: Any, b: Any, position: ast.Position) -> Any:
    """Apply ``function`` item-wise, broadcasting a non-pack operand over a pack."""
    if isinstance(a, list):
        if isinstance(b, list):
            if len(a) != len(b):
                raise NNEFError.at(
                    position,
                    f"packs of different lengths ({len(a)} and {len(b)}) in an "
                    f"element-wise operation: {format_value(a)} and {format_value(b)}",
                )
            return [function(x, y) for x, y in zip(a, b, strict=True)]
        return [function(x, b) for x in a]
    if isinstance(b, list):
        return [function(a, y) for y in b]
    return function(a, b)


def elementwise_unary(function: Callable[[Any], Any], a: Any) -> Any:
    """``function`` of ``a``, item by item when ``a`` is a pack."""
    return [function(x) for x in a] if isinstance(a, list) else function(a)


def apply_binary(op: str, a: Any, b: Any, position: ast.Position, ops: PythonScalarOps = PYTHON_OPS) -> Any:
    """``a op b`` with null propagation and item-wise application over packs."""
    if a is None or b is None:
        return None
    if op == "is":
        return elementwise_binary(_identical, a, b, position)
    if op == "in":
        if not isinstance(b, list):
            raise NNEFError.at(position, f"the right side of 'in' must be a pack, got {type_name_of(b)}")
        if isinstance(a, list):
            return [any(same_value(item, other) for other in b) for item in a]
        return any(same_value(a, other) for other in b)
    return elementwise_binary(lambda x, y: ops.binary(op, x, y, position), a, b, position)


def _identical(a: Any, b: Any) -> bool:
    if isinstance(a, DynamicExtent) or isinstance(b, DynamicExtent):
        return isinstance(a, DynamicExtent) and isinstance(b, DynamicExtent) and a.key == b.key
    if isinstance(a, RuntimeScalar) or isinstance(b, RuntimeScalar):
        return a == b
    if isinstance(a, int | float | bool | str) and isinstance(b, int | float | bool | str):
        return same_value(a, b)
    return a is b


def apply_unary(op: str, a: Any, position: ast.Position, ops: PythonScalarOps = PYTHON_OPS) -> Any:
    """``op a`` with null propagation (``?a`` is the null test and never null)."""
    if op == "?":
        return a is not None
    if a is None:
        return None
    return elementwise_unary(lambda x: ops.unary(op, x, position), a)


# ------------------------------------------------------------------------------------------------
# folds


def fold_pack(op: str, items: list, position: ast.Position, ops: PythonScalarOps) -> Any:
    """The fold ``items op ..`` of a pack (``:=``: its one uniform value; a comparison: whether
    every pair compares so)."""
    if op == ":=":
        return uniform_value(items)
    if op in COMPARISONS:
        if op == "!=":
            return all(not same_value(items[i], items[j]) for i in range(len(items)) for j in range(i))
        if op == "==":
            return all(same_value(item, items[0]) for item in items)
        results = [ops.binary(op, x, y, position) for x, y in zip(items, items[1:], strict=False)]
        total: Any = True
        for result in results:
            total = result if total is True else ops.binary("&&", total, result, position)
        return total
    if not items:
        identities = {"+": 0, "*": 1, "&&": True, "||": False}
        if op not in identities:
            raise NNEFError.at(position, f"the fold '{op} ..' of an empty pack is not defined")
        return identities[op]
    total = items[0]
    for item in items[1:]:
        total = ops.binary(op, total, item, position)
    return total


def cumulative_fold(op: str, items: list, position: ast.Position, ops: PythonScalarOps) -> list:
    """The cumulative fold ``items op ...``: the running results, one per item."""
    out: list = []
    for item in items:
        out.append(item if not out else ops.binary(op, out[-1], item, position))
    return out


#: The longest pack or list a composition may build. Packs are unrolled at compose time (one value
#: per item), so their length bounds the composer's work and memory: a count written as 2**31 is an
#: error here rather than a stall and a MemoryError.
MAX_PACK_LENGTH = 1 << 16


def check_pack_length(length: int, position: ast.Position) -> None:
    """Refuse a pack or list longer than :data:`MAX_PACK_LENGTH`."""
    if length > MAX_PACK_LENGTH:
        raise NNEFError.at(position, f"a pack or list of {length} items exceeds the {MAX_PACK_LENGTH} a "
                                     "composition may unroll")  # fmt: skip


