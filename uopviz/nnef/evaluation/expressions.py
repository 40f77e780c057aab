"""Evaluation of SkriptND expressions (NNEF 2.0 §2.4): the value model shared by composition
and lowering.

Values are plain Python objects:

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
(§2.9). Scalar operations go through :func:`apply_binary` / :func:`apply_unary`, which a
lowering extends to UOp operands by passing ``scalar_ops``.
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from uopviz.core.errors import UopvizError
from uopviz.nnef.errors import NNEFError
from uopviz.nnef.syntax import ast

__all__ = [
    "UNDECIDED", "BoundedIndex", "DynamicExtent", "Evaluator", "PythonScalarOps", "RunTimePack",
    "RuntimeScalar", "Unknown", "apply_binary", "apply_unary", "format_value", "is_pack", "length_at_bound",
    "pack_length", "type_name_of", "uniform_value", "widest_extent",
]  # fmt: skip


class Unknown(UopvizError):  # noqa: N818 - a control-flow signal, not an error report
    """An identifier that is declared but not bound yet: the expression cannot be evaluated now."""

    def __init__(self, name: str, position: ast.Position | None = None) -> None:
        super().__init__(name)
        self.name, self.position = name, position


class _Undecided:
    """The truth value of a comparison that depends on run-time extents (decided at run time)."""

    _instance: _Undecided | None = None

    def __new__(cls) -> _Undecided:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNDECIDED"

    def __bool__(self) -> bool:
        raise TypeError("the truth of a comparison of run-time extents is not known at compile time")


UNDECIDED = _Undecided()


#: The keys of the graph-input extents (``x: real[~|6]``, ``real[n|6]``) while a graph is composed
#: before its input shapes are given: a pack length that is one of them (``layout.unstack`` along
#: it, ``layout.split{count=n}``) takes the extent's bound there. ``run`` recomposes the graph for
#: the shapes it is given, where the extent and so the pack length are plain numbers.
INPUT_EXTENT_KEYS: contextvars.ContextVar[frozenset] = contextvars.ContextVar(
    "INPUT_EXTENT_KEYS", default=frozenset()
)
#: The extents whose bound a pack length took meanwhile (their text), for the graph to say so.
BOUNDED_PACK_LENGTHS: contextvars.ContextVar[set | None] = contextvars.ContextVar(
    "BOUNDED_PACK_LENGTHS", default=None
)


class DynamicExtent:
    """A shape extent known only at run time, with a static upper ``bound`` (§2.6.1, §3.1).

    ``key`` is a hashable symbolic expression: two extents with equal keys are the same extent
    (the ``is`` operator compares keys). Arithmetic with ints keeps a conservative bound.
    """

    __slots__ = ("bound", "key")

    def __init__(self, key: Any, bound: int | None) -> None:
        self.key = key
        self.bound = bound

    def __repr__(self) -> str:
        return f"~{self.key_text()}|{self.bound}" if self.bound is not None else f"~{self.key_text()}"

    def key_text(self) -> str:
        """The symbolic expression as text."""
        return _key_text(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DynamicExtent) and other.key == self.key

    def __hash__(self) -> int:
        return hash(("DynamicExtent", self.key))


def _follows_inputs(key: Any, inputs: frozenset) -> bool:
    """Whether an extent's key is built of graph-input extents (``inputs``) and numbers only."""
    if not inputs:
        return False
    if key in inputs or isinstance(key, int | float):
        return True
    if isinstance(key, tuple) and len(key) in (2, 3, 4) and isinstance(key[0], str):
        return all(_follows_inputs(part, inputs) for part in key[1:])
    return False


def _key_text(key: Any) -> str:
    if isinstance(key, tuple) and len(key) == 4:
        return f"({_key_text(key[1])} ? {_key_text(key[2])} : {_key_text(key[3])})"
    if isinstance(key, tuple) and len(key) == 3:
        return f"({_key_text(key[1])} {key[0]} {_key_text(key[2])})"
    if isinstance(key, tuple) and len(key) == 2:
        return f"{key[0]}({_key_text(key[1])})"
    return str(key)


class RunTimePack(list):
    """A pack whose length is decided at run time (§2.11: the scan outputs of a loop with a run-time
    count): the items are composed up to the static bound, ``length`` is the run-time number of
    them (a :class:`DynamicExtent` whose counter is the loop's clamped trip count). An operator
    input ``..(n)`` that receives it binds ``n`` to ``length``, so ``layout.stack`` of it has that
    run-time extent and its kernels stop at it."""

    def __init__(self, items: list, length: DynamicExtent) -> None:
        super().__init__(items)
        self.length = length


def pack_length(pack: list) -> int | DynamicExtent:
    """The length of a pack: its run-time length for a :class:`RunTimePack`, else ``len``."""
    return pack.length if isinstance(pack, RunTimePack) else len(pack)


def length_at_bound(count: Any) -> int | None:
    """A pack length given by a run-time extent that follows the graph's input extents (``..(s)``
    for an input ``x: real[s|6]``): its bound, recorded so that the graph says it was composed at
    the bound and is recomposed for the given shapes; None for any other value."""
    if not isinstance(count, DynamicExtent) or count.bound is None:
        return None
    if not _follows_inputs(count.key, INPUT_EXTENT_KEYS.get()):
        return None
    bounded = BOUNDED_PACK_LENGTHS.get()
    if bounded is not None:
        bounded.add(repr(count))
    return count.bound


class RuntimeScalar:
    """A scalar value computed at run time from run-time extents.

    §3.1 asks for the shape expressions of operations after a data-dependent one to be kept in
    symbolic form, so that code can compute them at run time: ``real(s[axes] * ..)``, the divisor of
    mean_reduce over an extent counted by the data, is one. ``expression`` is a tree whose leaves
    are :class:`DynamicExtent` objects and numbers, and whose nodes are ``(op, a, b)`` for a binary
    operator and ``(function, a)`` for a cast (``int``, ``real``, ``bool``) or a built-in function;
    ``type`` is the SkriptND type of the value. Arithmetic keeps it symbolic; a comparison is
    :data:`UNDECIDED`. A kernel computes it from the counters (``uopviz.nnef.lowering``); passed
    to an operator as a tensor argument it becomes a rank-0 tensor that a kernel fills.
    """

    __slots__ = ("expression", "type")

    def __init__(self, expression: Any, type_name: str) -> None:
        self.expression = expression
        self.type = type_name

    def __repr__(self) -> str:
        return f"~{_expression_text(self.expression)}"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, RuntimeScalar)
            and other.type == self.type
            and other.expression == self.expression
        )

    def __hash__(self) -> int:
        return hash(("RuntimeScalar", self.type, self.expression))

    def as_extent(self) -> DynamicExtent | None:
        """This int value as a shape extent (``int(round(real(s) * factor))`` of rescale): its key
        the expression over the extents' keys, its bound from the extents' bounds (interval
        arithmetic); None when no bound follows (a division by a range that holds 0, ...)."""
        interval = _interval(self.expression)
        if interval is None or self.type != "int" or not math.isfinite(interval[1]):
            return None
        return DynamicExtent(_extent_key(self.expression), max(0, math.floor(interval[1])))

    def extents(self) -> list[DynamicExtent]:
        """The run-time extents the value is computed from."""
        out: list[DynamicExtent] = []

        def walk(node: Any) -> None:
            if isinstance(node, DynamicExtent):
                out.append(node)
            elif isinstance(node, tuple):
                for item in node[1:]:
                    walk(item)

        walk(self.expression)
        return list(dict.fromkeys(out))


def _extent_key(node: Any) -> Any:
    """The key of a run-time extent computed by ``node``: its extents replaced by their keys."""
    if isinstance(node, DynamicExtent):
        return node.key
    if isinstance(node, tuple):
        return (node[0], *(_extent_key(item) for item in node[1:]))
    return node


def _interval(node: Any) -> tuple[float, float] | None:
    """The range of values of a run-time expression, each extent between 0 and its bound (None
    where the arithmetic gives no finite range)."""
    if isinstance(node, DynamicExtent):
        return None if node.bound is None else (0.0, float(node.bound))
    if isinstance(node, int | float) and not isinstance(node, bool):
        return (float(node), float(node))
    if not isinstance(node, tuple):
        return None
    parts = [_interval(item) for item in node[1:]]
    if any(part is None for part in parts):
        return None
    if len(node) == 4:  # a run-time choice: either branch
        return (min(parts[1][0], parts[2][0]), max(parts[1][1], parts[2][1]))
    if len(node) == 3:
        if node[0] in _COMPARISONS or node[0] in _LOGICAL:
            return (0.0, 1.0)
        return _interval_binary(node[0], parts[0], parts[1])
    return _interval_unary(node[0], parts[0])


def _interval_binary(op: str, a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float] | None:
    if op == "+":
        return (a[0] + b[0], a[1] + b[1])
    if op == "-":
        return (a[0] - b[1], a[1] - b[0])
    if op == "*":
        products = [x * y for x in a for y in b]
        return (min(products), max(products))
    if op in ("/", "\\") and (b[0] > 0 or b[1] < 0):
        quotients = [x / y for x in a for y in b]
        return (math.floor(min(quotients)), math.ceil(max(quotients)))
    if op == "<?":
        return (min(a[0], b[0]), min(a[1], b[1]))
    if op == ">?":
        return (max(a[0], b[0]), max(a[1], b[1]))
    if op == "%":
        reach = max(abs(b[0]), abs(b[1]))
        return (-reach, reach)
    return None


def _interval_unary(func: str, a: tuple[float, float]) -> tuple[float, float] | None:
    if func == "int":
        return (float(math.trunc(a[0])), float(math.trunc(a[1])))
    if func == "real":
        return a
    if func == "round":
        return (math.floor(a[0] + 0.5) if a[0] >= 0 else math.ceil(a[0] - 0.5),
                math.floor(a[1] + 0.5) if a[1] >= 0 else math.ceil(a[1] - 0.5))  # fmt: skip
    if func in ("floor", "ceil"):
        function = math.floor if func == "floor" else math.ceil
        return (function(a[0]), function(a[1]))
    if func == "abs":
        low = 0.0 if a[0] <= 0.0 <= a[1] else min(abs(a[0]), abs(a[1]))
        return (low, max(abs(a[0]), abs(a[1])))
    if func == "sqrt" and a[0] >= 0:
        return (math.sqrt(a[0]), math.sqrt(a[1]))
    return None


def _expression_text(node: Any) -> str:
    if isinstance(node, DynamicExtent):
        return node.key_text()
    if isinstance(node, tuple) and len(node) == 4:
        return f"({_expression_text(node[1])} ? {_expression_text(node[2])} : {_expression_text(node[3])})"
    if isinstance(node, tuple) and len(node) == 3:
        return f"({_expression_text(node[1])} {node[0]} {_expression_text(node[2])})"
    if isinstance(node, tuple) and len(node) == 2:
        return f"{node[0]}({_expression_text(node[1])})"
    return format_value(node)


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
    if op in _COMPARISONS and not types - {"int", "real"}:
        return RuntimeScalar((op, _runtime_operand(a), _runtime_operand(b)), "bool")
    if op in _LOGICAL and not types - {"bool"}:
        return RuntimeScalar((op, _runtime_operand(a), _runtime_operand(b)), "bool")
    if op not in _ARITHMETIC or types - {"int", "real"}:
        raise NNEFError.at(
            position,
            f"operator '{op}' cannot combine the run-time values {format_value(a)} and {format_value(b)}",
        )
    type_name = "real" if "real" in types else "int"
    return RuntimeScalar((op, _runtime_operand(a), _runtime_operand(b)), type_name)


@dataclass(frozen=True)
class BoundedIndex:
    """A guarded tensor index: ``|index|`` (skip out-of-range terms) or, with ``lower`` and
    ``upper``, ``|index <> lower : upper|`` (remap an index that falls below 0 / past the end)."""

    index: Any
    lower: Any = None
    upper: Any = None

    @property
    def remaps(self) -> bool:
        """Whether out-of-range indices are remapped (else the term is skipped)."""
        return self.lower is not None


# ------------------------------------------------------------------------------------------------
# helpers on values


def is_pack(value: Any) -> bool:
    """Whether ``value`` is a pack (a list)."""
    return isinstance(value, list)


def uniform_value(pack: list) -> Any:
    """The uniform value of a pack (``x := ..``): the common item, or None (empty or mixed)."""
    if not pack:
        return None
    first = pack[0]
    for item in pack[1:]:
        if not _same(item, first):
            return None
    return first


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b) and not (_is_number(a) and _is_number(b)):
        return False
    return a is b if not isinstance(a, int | float | str | bool | DynamicExtent | RuntimeScalar) else a == b


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def type_name_of(value: Any) -> str:
    """The SkriptND type name of a compile-time value (``int``, ``real``, ``bool``, ``str``)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | DynamicExtent):
        return "int"
    if isinstance(value, RuntimeScalar):
        return value.type
    if isinstance(value, float):
        return "real"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list):
        return (type_name_of(value[0]) if value else "int") + ".."
    if value is None:
        return "null"
    return type(value).__name__


def format_value(value: Any, quote_strings: bool = False) -> str:
    """A value as SkriptND-like text for messages: ``[1, 2]``, ``true``, ``1.5``, ``null``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return repr(value) if quote_strings else value
    if isinstance(value, list):
        return "[" + ", ".join(format_value(item, True) for item in value) + "]"
    name = getattr(value, "name", None)
    if isinstance(name, str):
        return name
    return str(value)


# ------------------------------------------------------------------------------------------------
# scalar operations


def _ceil_div(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int):
        return -((-a) // b)
    return math.ceil(a / b)


def _floor_div(a: Any, b: Any) -> Any:
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
    "/": _floor_div,
    "\\": _ceil_div,
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
_INT_FAST: dict[str, Callable[[int, int], Any]] = {
    op: _PYTHON_BINARY[op] for op in ("+", "-", "*", "<?", ">?", "<", "<=", ">", ">=", "==", "!=")
}
_DIVISIONS = frozenset({"/", "\\", "%"})
_COMPARISONS = frozenset({"<", "<=", ">", ">=", "==", "!="})
_LOGICAL = frozenset({"&&", "||", "^", "=>"})
_ARITHMETIC = frozenset({"+", "-", "*", "/", "\\", "%", "**", "<?", ">?"})


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
        if (type_a is int or type_a is float) and (type_b is int or type_b is float) and op not in _LOGICAL:
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
        if op in _DIVISIONS and b == 0 and not isinstance(b, float):
            raise NNEFError.at(position, f"division by zero in '{format_value(a)} {op} {format_value(b)}'")
        if op in _ARITHMETIC and (isinstance(a, bool | str) or isinstance(b, bool | str)):
            raise NNEFError.at(
                position,
                f"operator '{op}' cannot combine {type_name_of(a)} "
                f"{format_value(a, True)} and {type_name_of(b)} {format_value(b, True)}",
            )
        if (
            op in _LOGICAL
            and (a is UNDECIDED or b is UNDECIDED)
            and all(isinstance(x, bool) or x is UNDECIDED for x in (a, b))
        ):
            return _undecided_logic(op, a, b)
        if op in _LOGICAL and not (isinstance(a, bool) and isinstance(b, bool)):
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
    if op in _COMPARISONS:
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


_PYTHON_OPS = PythonScalarOps()


def _elementwise2(function: Callable[[Any, Any], Any], a: Any, b: Any, position: ast.Position) -> Any:
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


def _elementwise1(function: Callable[[Any], Any], a: Any) -> Any:
    return [function(x) for x in a] if isinstance(a, list) else function(a)


def apply_binary(op: str, a: Any, b: Any, position: ast.Position, ops: PythonScalarOps = _PYTHON_OPS) -> Any:
    """``a op b`` with null propagation and item-wise application over packs."""
    if a is None or b is None:
        return None
    if op == "is":
        return _elementwise2(_identical, a, b, position)
    if op == "in":
        if not isinstance(b, list):
            raise NNEFError.at(position, f"the right side of 'in' must be a pack, got {type_name_of(b)}")
        if isinstance(a, list):
            return [any(_same(item, other) for other in b) for item in a]
        return any(_same(a, other) for other in b)
    return _elementwise2(lambda x, y: ops.binary(op, x, y, position), a, b, position)


def _identical(a: Any, b: Any) -> bool:
    if isinstance(a, DynamicExtent) or isinstance(b, DynamicExtent):
        return isinstance(a, DynamicExtent) and isinstance(b, DynamicExtent) and a.key == b.key
    if isinstance(a, RuntimeScalar) or isinstance(b, RuntimeScalar):
        return a == b
    if isinstance(a, int | float | bool | str) and isinstance(b, int | float | bool | str):
        return _same(a, b)
    return a is b


def apply_unary(op: str, a: Any, position: ast.Position, ops: PythonScalarOps = _PYTHON_OPS) -> Any:
    """``op a`` with null propagation (``?a`` is the null test and never null)."""
    if op == "?":
        return a is not None
    if a is None:
        return None
    return _elementwise1(lambda x: ops.unary(op, x, position), a)


# ------------------------------------------------------------------------------------------------
# folds


def _fold(op: str, items: list, position: ast.Position, ops: PythonScalarOps) -> Any:
    if op == ":=":
        return uniform_value(items)
    if op in _COMPARISONS:
        if op == "!=":
            return all(not _same(items[i], items[j]) for i in range(len(items)) for j in range(i))
        if op == "==":
            return all(_same(item, items[0]) for item in items)
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


def _cumulative_fold(op: str, items: list, position: ast.Position, ops: PythonScalarOps) -> list:
    out: list = []
    for item in items:
        out.append(item if not out else ops.binary(op, out[-1], item, position))
    return out


#: The longest pack or list a composition may build. Packs are unrolled at compose time (one value
#: per item), so their length bounds the composer's work and memory: a count written as 2**31 is an
#: error here rather than a stall and a MemoryError.
MAX_PACK_LENGTH = 1 << 16


def _check_pack_length(length: int, position: ast.Position) -> None:
    if length > MAX_PACK_LENGTH:
        raise NNEFError.at(position, f"a pack or list of {length} items exceeds the {MAX_PACK_LENGTH} a "
                                     "composition may unroll")  # fmt: skip


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
        ops: PythonScalarOps = _PYTHON_OPS,
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
            _check_pack_length(len(value) * count, item.pos)
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
        _check_pack_length(count, node.pos)
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
        _check_pack_length(len(items), node.pos)
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
            function = _INT_FAST.get(node.op)
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
        return _elementwise2(
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
            return _cumulative_fold(node.op, items, node.pos, self.ops)
        return _fold(node.op, items, node.pos, self.ops)

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
        return _elementwise1(lambda item: self.ops.cast(type_name, item, node.pos), value)

    def _builtin(self, node: ast.Builtin) -> Any:
        value = self(node.arg)
        if value is None:
            return None
        return _elementwise1(lambda item: self.ops.builtin(node.func, item, node.pos), value)

    def _bounded(self, node: ast.Bounded) -> Any:
        index = self(node.index)
        if index is None:
            return None
        if node.lower is None:
            return _elementwise1(BoundedIndex, index)
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
