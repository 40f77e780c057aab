"""Typed syntax tree of a SkriptND (NNEF 2.0) module, as produced by :mod:`uopviz.nnef.syntax.parser`.

Every node is a frozen dataclass. Each has a ``pos`` (:class:`Position`: file, line, column of
the node's first token) that is excluded from ``==`` and ``repr``, so two trees parsed from
differently formatted but equivalent texts compare equal. Sequences are tuples.

Layout (the later stages start from :class:`Module`)::

    Module(file, version, extensions, imports, definitions: tuple[Definition])
    Definition(name, kind 'operator'|'graph', public,
               dtypes: TypeParam, attribs/inputs/outputs/constants/variables: Param,
               usings: Using, asserts: Assert, lowerings: Lowering,
               components/updates: Component, quantizations: Quantization)

Declarations use :class:`TypeSpec` (``optional T^(r)[shape]..(count)``), :class:`Shape` and
:class:`Extent`, :class:`PackSpec`. Expressions are the :data:`Expr` union; the lowering math
is :class:`Lowering`; the ``@compose`` / ``@update`` statements are :class:`Component` whose
right-hand side is a :data:`Callable` (an :class:`Invocation`, a :class:`Block`, an
:class:`If`, a :class:`Loop`, or a plain expression that the statement simply yields).

Operator spellings kept as strings (``Binary.op`` etc.) are exactly the SkriptND tokens:

- :class:`Unary`: ``+ - !`` and ``?`` (null test)
- :class:`Binary`: ``+ - * / \\ % ** <? >? && || ^ => < <= > >= == !=`` and the keyword
  operators ``is`` (identity) and ``in`` (containment)
- :class:`Fold`: ``+ * <? >? && || := < <= > >= == !=`` (``cumulative`` only ``+ * <? >? && ||``)
- :class:`Lowering`: ``= += *= &= |= <?= >?= :=``

:func:`walk` iterates over all nodes of a tree; :func:`children` over the direct ones.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import NamedTuple

__all__ = [
    "identifiers",
    "Assert", "AssertPrint", "Binary", "Block", "Bounded", "BoolLiteral", "Builtin", "Callable",
    "Carry", "Cast", "Coalesce", "Component", "Definition", "Expand", "Expr", "Extent", "Fold",
    "Format", "Identifier", "If", "Import", "Index", "IntLiteral", "Invocation", "KeywordConstant",
    "List", "LocalDef", "Loop", "LoopBound", "Lowering", "Member", "Module", "NOWHERE", "Node",
    "PackSpec", "Param", "Placeholder", "Position", "Quantization", "Range", "RealLiteral",
    "Result", "ResultList", "ResultTuple", "Scan", "Select", "Shape", "StringLiteral",
    "Substitute", "TensorAccess", "TypeParam", "TypeSpec", "Unary", "Using", "Zip",
    "children", "walk",
]  # fmt: skip


class Position(NamedTuple):
    """Where a node starts: file name, 1-based line and column (a tuple: cheap to make)."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


NOWHERE = Position("<unknown>", 0, 0)


def _pos() -> Position:
    """The ``pos`` field shared by all nodes: ignored by ``==`` and ``repr``."""
    return field(default=NOWHERE, compare=False, repr=False, kw_only=True)


@dataclass(frozen=True)
class Node:
    """Base class of all syntax tree nodes."""

    pos: Position = _pos()


# ------------------------------------------------------------------------------------------------
# Expressions


@dataclass(frozen=True)
class Identifier(Node):
    """A name: attribute, shape symbol, tensor, index variable, ... (``_`` included)."""

    name: str


@dataclass(frozen=True)
class Member(Node):
    """An implicitly defined identifier ``name.shape``, ``name.rank`` or ``name.size``."""

    name: str
    member: str


@dataclass(frozen=True)
class IntLiteral(Node):
    """An integer literal such as ``42`` (always non-negative; ``-1`` is a :class:`Unary`)."""

    value: int


@dataclass(frozen=True)
class RealLiteral(Node):
    """A real literal such as ``1.5`` or ``1e-5``."""

    value: float


@dataclass(frozen=True)
class BoolLiteral(Node):
    """``true`` or ``false``."""

    value: bool


@dataclass(frozen=True)
class StringLiteral(Node):
    """A string without placeholders; adjacent literals are already joined, escapes decoded."""

    value: str


@dataclass(frozen=True)
class KeywordConstant(Node):
    """The real constants ``inf`` and ``pi``."""

    name: str


@dataclass(frozen=True)
class Format(Node):
    """A string with ``{expression}`` placeholders: ``parts`` alternate text (str) and Expr."""

    parts: tuple[str | Expr, ...]


@dataclass(frozen=True)
class Placeholder(Node):
    """The ``~`` symbol: an omitted argument, result, shape extent or pack length."""


@dataclass(frozen=True)
class List(Node):
    """A list ``[a, b.., 0:n, (x, y)..]``; items may be Expand and Range nodes."""

    items: tuple[Expr, ...]


@dataclass(frozen=True)
class Range(Node):
    """``start:stop:step`` in a list or an index; any part may be None where omitted."""

    start: Expr | None
    stop: Expr | None
    step: Expr | None = None


@dataclass(frozen=True)
class Expand(Node):
    """Pack expansion ``value..`` or repetition ``value..(count)`` in an item position."""

    value: Expr
    count: Expr | None = None


@dataclass(frozen=True)
class Zip(Node):
    """A parenthesised tuple ``(a, b, ...)``: zipping (in lists) or unzipping (in @using)."""

    items: tuple[Expr, ...]


@dataclass(frozen=True)
class Index(Node):
    """Pack / string indexing ``base[index]``; ``index`` may be a Range (slice) or a bool mask."""

    base: Expr
    index: Expr


@dataclass(frozen=True)
class TensorAccess(Node):
    """Tensor element access ``base[i, j, ..]``, ``x[i,]`` or ``x[]`` (rank 0).

    The indices may be Expand (packed indices), Range (``x[i,:]``) and Bounded nodes.
    """

    base: Expr
    indices: tuple[Expr, ...]


@dataclass(frozen=True)
class Substitute(Node):
    """``base[index] <- value``: the pack ``base`` with the items at ``index`` replaced."""

    base: Expr
    index: Expr
    value: Expr


@dataclass(frozen=True)
class Unary(Node):
    """``op operand`` with ``op`` one of ``+ - ! ?`` (``?x``: is x not null)."""

    op: str
    operand: Expr


@dataclass(frozen=True)
class Binary(Node):
    """``left op right`` for arithmetic, comparison, logical, min/max, ``is`` and ``in``."""

    op: str
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Select(Node):
    """``condition ? then : otherwise``; ``otherwise`` is None for the optional form ``c ? a``."""

    condition: Expr
    then: Expr
    otherwise: Expr | None


@dataclass(frozen=True)
class Coalesce(Node):
    """``value ?? fallback``."""

    value: Expr
    fallback: Expr


@dataclass(frozen=True)
class Fold(Node):
    """``operand op ..`` (reduction) or, with ``cumulative``, ``operand op ...`` (scan)."""

    op: str
    operand: Expr
    cumulative: bool = False


@dataclass(frozen=True)
class Cast(Node):
    """``type_name(arg)``; ``type_name`` is a built-in type or a generic from @dtype.

    ``arg`` is None for the default value ``int()``, ``T()``.
    """

    type_name: str
    arg: Expr | None


@dataclass(frozen=True)
class Builtin(Node):
    """A built-in math function applied element-wise: ``sqrt(x)``, ``abs(x)``, ..."""

    func: str
    arg: Expr


@dataclass(frozen=True)
class Bounded(Node):
    """A guarded tensor index ``|index|`` or a remapped one ``|index <> lower : upper|``."""

    index: Expr
    lower: Expr | None = None
    upper: Expr | None = None


Expr = (
    Identifier | Member | IntLiteral | RealLiteral | BoolLiteral | StringLiteral | KeywordConstant
    | Format | Placeholder | List | Range | Expand | Zip | Index | TensorAccess | Substitute | Unary
    | Binary | Select | Coalesce | Fold | Cast | Builtin | Bounded
)


# ------------------------------------------------------------------------------------------------
# Declarations


@dataclass(frozen=True)
class PackSpec(Node):
    """The pack modifier ``..`` / ``..(count)`` / ``..(count|bound)`` / ``..(~)``.

    ``count`` is None when no length is written and a Placeholder for ``~``; ``qualifier`` is
    ``'static'``, ``'dynamic'`` or None as written inside the parentheses.
    """

    count: Expr | None = None
    bound: Expr | None = None
    qualifier: str | None = None


@dataclass(frozen=True)
class Extent(Node):
    """One item of a shape: ``[static] [..] value [|bound] [..[(count)]]``.

    ``value`` is a Placeholder for ``~``; ``distinct`` marks a leading ``..`` (an extent that
    differs per item of a tensor pack); ``pack`` is the trailing ``..`` (a packed extent).
    """

    value: Expr
    bound: Expr | None = None
    distinct: bool = False
    pack: PackSpec | None = None
    qualifier: str | None = None


@dataclass(frozen=True)
class Shape(Node):
    """A shape specifier ``[e1, e2, ...]`` (``[]`` is rank 0)."""

    extents: tuple[Extent, ...]


@dataclass(frozen=True)
class TypeSpec(Node):
    """``[dynamic] [optional] name [^(rank)] [shape] [pack]``.

    ``name`` is a type keyword (``int real bool str type arith num``) or a generic from @dtype;
    ``rank`` is the ``^(r)`` capture; ``shape`` None means no ``[...]`` at all.
    """

    name: str
    optional: bool = False
    rank: Expr | None = None
    shape: Shape | None = None
    pack: PackSpec | None = None
    qualifier: str | None = None


@dataclass(frozen=True)
class TypeParam(Node):
    """An @dtype entry ``name: base [= default]``."""

    name: str
    base: str
    default: str | None = None


@dataclass(frozen=True)
class LoopBound(Node):
    """An index bound ``name < bound`` (lowering loops, constant initialisers)."""

    name: str
    bound: Expr


@dataclass(frozen=True)
class Param(Node):
    """An @attrib / @input / @output / @constant / @variable declaration.

    ``name: type [= default [, i < n]*]``; ``bounds`` are the index bounds of a per-element
    constant initialiser.
    """

    name: str
    type: TypeSpec
    default: Expr | None = None
    bounds: tuple[LoopBound, ...] = ()


@dataclass(frozen=True)
class Using(Node):
    """An @using entry ``target[..(count)] = value``.

    ``target`` is an Identifier or a List of Identifier / Expand / Zip items (destructuring).
    """

    target: Expr
    value: Expr
    count: Expr | None = None


@dataclass(frozen=True)
class AssertPrint(Node):
    """A value printed when an assertion fails, with an optional label ``'label': value``."""

    value: Expr
    label: str | None = None


@dataclass(frozen=True)
class Assert(Node):
    """An @assert entry ``condition [: message [, prints]*]``."""

    condition: Expr
    message: Expr | None = None
    prints: tuple[AssertPrint, ...] = ()


@dataclass(frozen=True)
class LocalDef(Node):
    """A loop-local value ``name = value`` of a lowering's ``with`` clause."""

    name: str
    value: Expr


@dataclass(frozen=True)
class Lowering(Node):
    """An @lower statement::

        [unroll..(index -> count)] [with locals:] target op value [, bounds]* [| condition]

    ``target`` is a TensorAccess (possibly on an Index for pack items, ``ys[k][i, j]``), or an
    Index when a 1-D tensor is written without the trailing comma (``y[i]`` for ``y[i,]``): the
    parser cannot tell a tensor from a pack, the consumer decides.
    """

    target: Expr
    op: str
    value: Expr
    bounds: tuple[LoopBound, ...] = ()
    condition: Expr | None = None
    locals: tuple[LocalDef, ...] = ()
    unroll_index: str | None = None
    unroll_count: Expr | None = None


# ------------------------------------------------------------------------------------------------
# Composition


@dataclass(frozen=True)
class Result(Node):
    """One left-hand side item of a component: ``name [: type[shape]] [..(count)]`` or ``~``.

    ``name`` is None for ``~``; ``type`` carries an explicit type/shape (no pack) when written;
    ``pack`` the trailing pack modifier.
    """

    name: str | None
    type: TypeSpec | None = None
    pack: PackSpec | None = None


@dataclass(frozen=True)
class ResultList(Node):
    """A bracketed group of results ``[b, c..(k)]`` (one packed result)."""

    items: tuple[Result | ResultTuple, ...]


@dataclass(frozen=True)
class ResultTuple(Node):
    """A parenthesised group ``(a, b)..(k)`` that unzips a packed result."""

    items: tuple[Result, ...]
    pack: PackSpec | None = None


@dataclass(frozen=True)
class Invocation(Node):
    """An operator invocation ``[label:] name<types>{attribs}(args)``.

    ``name`` is the possibly qualified operator name (``nn.conv``); ``attribs`` pairs attribute
    names with values; ``args`` may contain Placeholder for ``~``.
    """

    name: str
    args: tuple[Expr, ...] = ()
    attribs: tuple[tuple[str, Expr], ...] = ()
    types: tuple[str, ...] = ()
    label: str | None = None


@dataclass(frozen=True)
class Block(Node):
    """An embedded block ``[label:] { components; yield values; }``."""

    components: tuple[Component, ...]
    yields: tuple[Expr, ...]
    label: str | None = None


@dataclass(frozen=True)
class If(Node):
    """``if c1 then v1 elif c2 then v2 ... else otherwise``; ``branches`` are (cond, then)."""

    branches: tuple[tuple[Callable, Callable], ...]
    otherwise: Callable


@dataclass(frozen=True)
class Carry(Node):
    """A loop-carried variable ``name [: type[shape]] = initial`` of a ``with`` clause."""

    name: str
    initial: Expr
    type: TypeSpec | None = None


@dataclass(frozen=True)
class Scan(Node):
    """A scan input ``name : pack`` of a ``for`` clause."""

    name: str
    pack: Expr


@dataclass(frozen=True)
class Loop(Node):
    """``[with carries] [for scans] [while c] (do|unroll)[..([index ->] count)] body [while c]``.

    ``pretest`` tells whether the condition came before ``do`` (while-do) or after (do-while).
    """

    body: Callable
    carries: tuple[Carry, ...] = ()
    scans: tuple[Scan, ...] = ()
    condition: Callable | None = None
    pretest: bool = True
    unroll: bool = False
    index: str | None = None
    count: Expr | None = None


Callable = Invocation | Block | If | Loop | Expr


@dataclass(frozen=True)
class Component(Node):
    """An @compose / @update statement ``results = value``."""

    results: tuple[Result | ResultList | ResultTuple, ...]
    value: Callable


@dataclass(frozen=True)
class Quantization(Node):
    """An @quantize entry ``tensor: op<types>{attribs}`` (``tensor`` may be a scoped name)."""

    tensor: str
    invocation: Invocation


# ------------------------------------------------------------------------------------------------
# Module level


@dataclass(frozen=True)
class Definition(Node):
    """An ``operator``, ``public operator`` or ``graph`` definition with all its blocks."""

    name: str
    kind: str = "operator"
    public: bool = False
    dtypes: tuple[TypeParam, ...] = ()
    attribs: tuple[Param, ...] = ()
    inputs: tuple[Param, ...] = ()
    outputs: tuple[Param, ...] = ()
    constants: tuple[Param, ...] = ()
    variables: tuple[Param, ...] = ()
    usings: tuple[Using, ...] = ()
    asserts: tuple[Assert, ...] = ()
    lowerings: tuple[Lowering, ...] = ()
    components: tuple[Component, ...] = ()
    updates: tuple[Component, ...] = ()
    quantizations: tuple[Quantization, ...] = ()

    @property
    def is_graph(self) -> bool:
        """Whether this is a ``graph`` definition."""
        return self.kind == "graph"


@dataclass(frozen=True)
class Import(Node):
    """``import name;`` (``name`` may be dotted for modules in sub-folders)."""

    module: str


@dataclass(frozen=True)
class Module(Node):
    """A parsed SkriptND file (``file`` is where it was read from; not part of ``==``)."""

    file: str = field(compare=False)
    imports: tuple[Import, ...] = ()
    definitions: tuple[Definition, ...] = ()
    version: tuple[int, int] | None = None
    extensions: tuple[str, ...] = ()

    def definition(self, name: str) -> Definition:
        """The operator or graph called ``name`` (KeyError when absent)."""
        for definition in self.definitions:
            if definition.name == name:
                return definition
        raise KeyError(name)

    @property
    def graphs(self) -> tuple[Definition, ...]:
        """The graph definitions, in order of appearance (the first is the primary one)."""
        return tuple(definition for definition in self.definitions if definition.is_graph)


# ------------------------------------------------------------------------------------------------
# Traversal


def children(node: Node) -> Iterator[Node]:
    """The nodes directly contained in ``node`` (through fields, tuples and pairs)."""
    for name in _field_names(type(node)):
        yield from _nodes_in(getattr(node, name))


@functools.cache
def _field_names(kind: type) -> tuple[str, ...]:
    """The fields of a node class but its position (``dataclasses.fields`` walks the class's fields
    each call: a third of parsing the standard library went to it)."""
    return tuple(item.name for item in fields(kind) if item.name != "pos")


def _nodes_in(value: object) -> Iterator[Node]:
    """Nodes in a field value: a node, or nodes nested in tuples."""
    if isinstance(value, Node):
        yield value
    elif isinstance(value, tuple):
        for item in value:
            yield from _nodes_in(item)


def walk(node: Node) -> Iterator[Node]:
    """``node`` and all nodes below it, depth first, parents before children."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(list(children(current))))


_IDENTIFIERS: dict[int, tuple[Node, frozenset[str]]] = {}


def identifiers(node: Node | None) -> frozenset[str]:
    """The identifiers an expression refers to (``x.shape`` counts as ``x``); cached per node."""
    if node is None:
        return frozenset()
    cached = _IDENTIFIERS.get(id(node))
    if cached is not None and cached[0] is node:
        return cached[1]
    names = frozenset(item.name for item in walk(node) if isinstance(item, Identifier | Member))
    _IDENTIFIERS[id(node)] = (node, names)  # the node is kept alive so its id stays unique
    return names
