"""The values of SkriptND expressions (NNEF 2.0 §2.4) besides plain Python ones: what composition and
lowering pass around.

- ``int``, ``float`` (SkriptND ``real``), ``bool``, ``str`` for the primitive types; ``list`` for a
  pack; ``None`` for the null value of an optional type;
- :class:`DynamicExtent` for a shape extent only known at run time (with its static upper bound),
  :class:`RunTimePack` for a pack whose length is one;
- :class:`RuntimeScalar` for a scalar computed from such extents, kept symbolic until a kernel
  computes it;
- :class:`BoundedIndex` for a guarded tensor index ``|i|`` / ``|i <> a : b|`` (lowering only);
- :data:`UNDECIDED` for a value not decided yet, and :class:`Unknown`, raised for a name declared
  but not bound yet.

With the helpers on values (:func:`is_pack`, :func:`type_name_of`, :func:`format_value`, ...) and
the operator classes (:data:`COMPARISONS`, :data:`LOGICAL`, :data:`ARITHMETIC`).
"""

from __future__ import annotations

import contextvars
import math
from dataclasses import dataclass
from typing import Any

from uopviz.core.errors import UopvizError
from uopviz.nnef.syntax import ast

__all__ = [
    "ARITHMETIC", "BoundedIndex", "COMPARISONS", "DIVISIONS", "DynamicExtent", "LOGICAL",
    "RunTimePack", "RuntimeScalar", "UNDECIDED", "Unknown", "format_value", "is_pack",
    "length_at_bound", "pack_length", "same_value", "type_name_of", "uniform_value",
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
        if node[0] in COMPARISONS or node[0] in LOGICAL:
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
        if not same_value(item, first):
            return None
    return first


def same_value(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` are the same value (numbers of either type by value, other objects
    by identity)."""
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


DIVISIONS = frozenset({"/", "\\", "%"})
COMPARISONS = frozenset({"<", "<=", ">", ">=", "==", "!="})
LOGICAL = frozenset({"&&", "||", "^", "=>"})
ARITHMETIC = frozenset({"+", "-", "*", "/", "\\", "%", "**", "<?", ">?"})
