"""Shapes of an invocation: binding extents, @using and asserts, declared outputs (§2.6.2, §2.9).

The :class:`ShapeBinder` is a part of the :class:`~uopviz.nnef.composition.composer.Composer`; it
keeps no state of its own: every method works on the :class:`Instance` (one invocation's symbols)
it is given. See :mod:`uopviz.nnef.composition.composer` for the order of composition.
"""

from __future__ import annotations

from collections import ChainMap
from typing import Any

from uopviz.nnef.composition.support import (
    Instance,
    describe_type,
    element_type,
    extent_matches,
    in_stdlib,
    target_names,
)
from uopviz.nnef.errors import NNEFError
from uopviz.nnef.evaluation.expressions import Evaluator
from uopviz.nnef.evaluation.values import UNDECIDED, DynamicExtent, RuntimeScalar, Unknown, format_value
from uopviz.nnef.graph import (
    TensorInfo,
)
from uopviz.nnef.syntax import ast
from uopviz.nnef.syntax.ast import identifiers
from uopviz.nnef.syntax.printer import print_expression


class ShapeBinder:
    """Binding and checking shapes: extents solved for their symbols, @using symbols and
    assertions, the declared output shapes."""

    # -- binding shapes ------------------------------------------------------------------------------

    def bind_dims(
        self,
        instance: Instance,
        spec: ast.TypeSpec,
        dims: list,
        position: ast.Position,
        what: str,
        distinct: dict[str, list] | None,
        value: Any,
    ) -> bool:
        """Bind/check ``dims`` against a declared shape; False when it cannot be bound yet."""
        if spec.rank is not None and not self.bind_or_check(
            instance, spec.rank, len(dims), position, f"the rank of {what}"
        ):
            return False
        if spec.shape is None:
            return True
        evaluator = instance.evaluator()
        plan: list[tuple[ast.Extent, int | None, bool]] = []
        unknown = -1
        for extent in spec.shape.extents:
            length, count_is_bool = self._extent_length(instance, extent, evaluator)
            if length is False:
                return False
            if length is None:
                if unknown >= 0:
                    return False  # two packs of unknown length: wait for other inputs
                unknown = len(plan)
            plan.append((extent, length, count_is_bool))
        known = sum(length for _, length, _ in plan if length is not None)
        if unknown < 0 and known != len(dims) or known > len(dims):
            raise _shape_error(
                instance,
                spec,
                dims,
                position,
                what,
                value,
                f"rank {len(dims)} where {known}{'+' if unknown >= 0 else ''} is declared",
            )
        offset = 0
        for index, (extent, length, count_is_bool) in enumerate(plan):
            if index == unknown:
                length = len(dims) - known
                count = extent.pack.count if extent.pack is not None else None
                if count is not None and not isinstance(count, ast.Placeholder):
                    _solve(instance, count, length, position, f"the length of a pack in {what}")
            part = dims[offset : offset + length]
            offset += length
            self._bind_extent(
                instance, spec, extent, part, count_is_bool, dims, position, what, distinct, evaluator, value
            )
        return True

    def _extent_length(
        self, instance: Instance, extent: ast.Extent, evaluator: Evaluator
    ) -> tuple[Any, bool]:
        """(length, count is bool): length None = unknown but solvable, False = not yet bindable."""
        if extent.pack is None or extent.distinct:
            if (
                extent.distinct
                or isinstance(extent.value, ast.Placeholder)
                or _declares(instance, extent.value)
            ):
                return 1, False
            try:
                value = evaluator(extent.value)
            except Unknown:
                return False, False
            if isinstance(value, list):
                raise NNEFError.at(extent.pos, "a pack used as a shape extent needs '..' after it")
            return (0 if value is None else 1), False
        count = extent.pack.count
        if count is None or isinstance(count, ast.Placeholder):
            if isinstance(extent.value, ast.Identifier) and isinstance(
                instance.symbols.get(extent.value.name), list
            ):
                return len(instance.symbols[extent.value.name]), False
            if isinstance(extent.value, ast.Identifier) and instance.declaration(extent.value.name):
                return None, False
            try:
                value = evaluator(extent.value)
            except Unknown:
                return False, False
            return (len(value) if isinstance(value, list) else None), False
        try:
            length = evaluator(count)
        except Unknown:
            return (None, False) if _declares(instance, count) else (False, False)
        if length is None:
            return 0, False
        if isinstance(length, bool):
            return int(length), True
        if not isinstance(length, int) or length < 0:
            raise NNEFError.at(
                count.pos, f"a pack length must be a non-negative int, got {format_value(length)}"
            )
        return length, False

    def _bind_extent(
        self,
        instance: Instance,
        spec: ast.TypeSpec,
        extent: ast.Extent,
        part: list,
        count_is_bool: bool,
        dims: list,
        position: ast.Position,
        what: str,
        distinct: dict[str, list] | None,
        evaluator: Evaluator,
        value: Any,
    ) -> None:
        node = extent.value
        if isinstance(node, ast.Placeholder):
            return
        if extent.distinct:
            if not isinstance(node, ast.Identifier) or distinct is None:
                raise NNEFError.at(extent.pos, "a distinct extent '..x' must be a name in a tensor pack")
            distinct.setdefault(node.name, []).append(part[0])
            return
        if extent.pack is not None and not count_is_bool:
            if isinstance(node, ast.Identifier) and instance.declaration(node.name):
                instance.symbols[node.name] = list(part)
                return
            expected = evaluator(node)
            expected_items = expected if isinstance(expected, list) else [expected] * len(part)
            if expected is None:
                expected_items = []
            if len(expected_items) != len(part) or any(
                not extent_matches(e, d) for e, d in zip(expected_items, part, strict=False)
            ):
                raise _shape_error(
                    instance,
                    spec,
                    dims,
                    position,
                    what,
                    value,
                    f"extents {format_value(part)} where '{print_expression(node)}' = "
                    f"{format_value(expected)}",
                )
            return
        if not part:
            return
        actual = part[0]
        if _declares(instance, node):
            _solve(instance, node, actual, position, what)
            return
        expected = evaluator(node)
        if not extent_matches(expected, actual):
            raise _shape_error(
                instance,
                spec,
                dims,
                position,
                what,
                value,
                f"extent {format_value(actual)} where '{print_expression(node)}' = {format_value(expected)}",
            )

    def bind_or_check(
        self, instance: Instance, node: ast.Expr, value: Any, position: ast.Position, what: str
    ) -> bool:
        """Bind ``node`` (a new symbol or an affine expression of one) to ``value``, or check it."""
        if _declares(instance, node):
            _solve(instance, node, value, position, what)
            return True
        try:
            expected = instance.evaluator()(node)
        except Unknown:
            return False
        if isinstance(expected, bool):
            expected = int(expected)
        if expected is not None and not extent_matches(expected, value):
            raise NNEFError.at(
                position,
                f"{instance.name}: {what} is {format_value(value)} but "
                f"'{print_expression(node)}' = {format_value(expected)}",
            )
        return True

    # -- using and asserts ------------------------------------------------------------------------------

    def advance_usings(self, instance: Instance) -> bool:
        """Evaluate every @using entry that can be evaluated now (asserts first, §2.9)."""
        progress = False
        for index, using in enumerate(instance.info.definition.usings):
            if index in instance.done_usings:
                continue
            self._check_asserts(instance, final=False)
            try:
                value = instance.evaluator()(using.value)
            except Unknown:
                continue
            self._assign_using(instance, using, value)
            instance.done_usings.add(index)
            progress = True
        return progress

    def usings_and_asserts(self, instance: Instance) -> None:
        """Evaluate the remaining @using entries in order, each after the assertions it may already
        check (§2.9), then every assertion left; a failed one raises its message."""
        usings = instance.info.definition.usings
        schedule = instance.info.assert_schedule
        position = 0
        for index, using in enumerate(usings):
            while position < len(schedule) and schedule[position][0] < index:
                self._check_assert(instance, schedule[position][1], final=False)
                position += 1
            if index in instance.done_usings:
                continue
            try:
                value = instance.evaluator()(using.value)
            except Unknown as unknown:
                raise NNEFError.at(
                    using.pos,
                    f"{instance.name}: '{unknown.name}' is used before it is known "
                    f"(in @using '{print_expression(using.value)}')",
                ) from None
            self._assign_using(instance, using, value)
            instance.done_usings.add(index)
        self._check_asserts(instance, final=True)

    def _assign_using(self, instance: Instance, using: ast.Using, value: Any) -> None:
        target = using.target
        if isinstance(target, ast.Identifier):
            if using.count is not None:
                _check_using_count(instance, using, value)
            instance.symbols[target.name] = value
            return
        if value is None:
            for name in target_names(target):
                instance.symbols[name] = None
            return
        if not isinstance(value, list):
            raise NNEFError.at(
                using.pos, f"{instance.name}: cannot destructure the non-pack {format_value(value)}"
            )
        _destructure(instance, target, value, using.pos)

    def _check_asserts(self, instance: Instance, final: bool) -> None:
        for index in range(len(instance.info.definition.asserts)):
            self._check_assert(instance, index, final)

    def _check_assert(self, instance: Instance, index: int, final: bool) -> None:
        if index in instance.done_asserts:
            return
        assertion = instance.info.definition.asserts[index]
        symbols = instance.symbols
        if not final and not all(name in symbols for name in identifiers(assertion.condition)):
            return  # refers to a symbol not known yet (cheaper than trying)
        try:
            value = instance.evaluator()(assertion.condition)
        except Unknown as unknown:
            if final:
                raise NNEFError.at(
                    assertion.pos,
                    f"{instance.name}: assertion refers to '{unknown.name}', which is never defined",
                ) from None
            return
        instance.done_asserts.add(index)
        items = value if isinstance(value, list) else [value]
        for item in items:
            if item is None or item is UNDECIDED or isinstance(item, RuntimeScalar):
                continue  # decided by run-time extents: not checked at compile time
            if not isinstance(item, bool):
                raise NNEFError.at(
                    assertion.pos, f"{instance.name}: an assertion must be a bool, got {format_value(item)}"
                )
            if not item:
                raise _assertion_error(instance, assertion)

    # -- output declarations -----------------------------------------------------------------------------

    def evaluate_shape(
        self, instance: Instance, spec: ast.TypeSpec, name: str, item: int, bind_dynamic: bool = True
    ) -> list:
        """The shape of a declared output / constant / variable (item ``item`` of a pack)."""
        evaluator = instance.evaluator()
        shape: list = []
        for position, extent in enumerate(spec.shape.extents):
            node = extent.value
            bound = None if extent.bound is None else evaluator(extent.bound)
            if isinstance(bound, DynamicExtent):  # bounded by a run-time extent: by that one's bound
                bound = bound.bound
            if isinstance(node, ast.Placeholder):
                # the output and axis it is declared on, as a string (a tuple reads as an expression)
                dynamic = DynamicExtent(f"{instance.label or instance.name}.{name}.shape[{position}]", bound)
                shape.extend([dynamic] * extent_count(instance, extent, evaluator))
                continue
            if (
                extent.bound is not None
                and isinstance(node, ast.Identifier)
                and node.name not in instance.symbols
            ):
                dynamic = DynamicExtent(
                    f"{instance.label}.{node.name}" if instance.label else node.name, bound
                )
                if bind_dynamic:
                    instance.symbols[node.name] = dynamic
                shape.append(dynamic)
                continue
            value = evaluator(node)
            if extent.distinct:
                if not isinstance(value, list) or item >= len(value):
                    raise NNEFError.at(
                        extent.pos,
                        f"the distinct extent '..{print_expression(node)}' needs a pack "
                        f"with an item per tensor",
                    )
                shape.append(value[item])
            elif extent.pack is not None:
                if value is None:
                    continue
                if isinstance(value, list):
                    count = extent.pack.count
                    if count is not None and not isinstance(count, ast.Placeholder):
                        length = evaluator.repeat_count(count)
                        if (
                            length is not None
                            and length != len(value)
                            and not isinstance(evaluator(count), bool)
                        ):
                            raise NNEFError.at(
                                extent.pos,
                                f"'{print_expression(node)}' has {len(value)} items, "
                                f"its declared length is {length}",
                            )
                    shape.extend(value)
                else:
                    shape.extend([value] * extent_count(instance, extent, evaluator))
            else:
                if value is None:
                    continue
                if isinstance(value, list):
                    raise NNEFError.at(
                        extent.pos, f"'{print_expression(node)}' is a pack; expand it with '..'"
                    )
                shape.append(value)
        for index, extent in enumerate(shape):
            if isinstance(extent, RuntimeScalar) and extent.type == "int":  # computed from run-time extents
                converted = extent.as_extent()
                if converted is None:
                    raise NNEFError.at(
                        spec.pos,
                        f"{instance.name}: the extent {extent!r} of '{name}' is computed at run time and "
                        f"has no upper bound that follows from its extents' bounds",
                    )
                shape[index] = extent = converted
            if isinstance(extent, bool) or not isinstance(extent, int | DynamicExtent):
                raise NNEFError.at(
                    spec.pos,
                    f"{instance.name}: the shape of '{name}' evaluates to "
                    f"{format_value(shape)}, which is not a list of ints",
                )
        return shape

    def declared_outputs(self, instance: Instance) -> dict[str, tuple[str, Any]]:
        """Each declared output: (element type, shape or list of shapes for a pack)."""
        out: dict[str, tuple[str, Any]] = {}
        for param in instance.info.definition.outputs:
            element = element_type(instance, param.type)
            if element is None:
                raise NNEFError.at(
                    param.pos,
                    f"{instance.name}: output '{param.name}' has the abstract type '{param.type.name}'",
                )
            out[param.name] = (element, self._declared_shapes(instance, param))
        return out

    def _declared_shapes(self, instance: Instance, param: ast.Param) -> Any:
        spec = param.type
        if spec.pack is None:
            return None if spec.shape is None else self.evaluate_shape(instance, spec, param.name, 0)
        count_node = spec.pack.count
        if count_node is None or isinstance(count_node, ast.Placeholder):
            return None
        count = instance.evaluator().repeat_count(count_node)
        if spec.shape is None:
            return [None] * (count or 0)
        return [self.evaluate_shape(instance, spec, param.name, item) for item in range(count or 0)]


# ------------------------------------------------------------------------------------------------
# checks and computations that need no composer state (module functions, not methods)


def _declares(instance: Instance, node: ast.Node) -> bool:
    """Whether ``node`` is an affine expression of exactly one new shape symbol."""
    new = [name for name in identifiers(node) if instance.declaration(name)]
    if len(new) != 1:
        return False
    others = identifiers(node) - {new[0]}
    return all(name in instance.symbols for name in others)


def _shape_error(
    instance: Instance,
    spec: ast.TypeSpec,
    dims: list,
    position: ast.Position,
    what: str,
    value: Any,
    detail: str,
) -> NNEFError:
    argument = f"the argument '{value.name}'" if isinstance(value, TensorInfo) else "the argument"
    if isinstance(value, list):
        argument = "an item of the argument"
    return NNEFError.at(
        position,
        f"shape mismatch: {instance.name} {what} is declared "
        f"{describe_type(spec)} but {argument} has shape "
        f"{format_value(list(dims))}: {detail}",
    )


def _solve(instance: Instance, node: ast.Expr, value: Any, position: ast.Position, what: str) -> None:
    """Solve the affine ``node`` (one unknown symbol) for ``node == value`` and bind the symbol."""
    if isinstance(node, ast.Identifier):
        instance.symbols[node.name] = value
        return
    (name,) = [n for n in identifiers(node) if instance.declaration(n)]
    if isinstance(value, DynamicExtent):
        raise NNEFError.at(
            position,
            f"{instance.name}: {what}: cannot solve '{print_expression(node)}' for a run-time extent",
        )

    def at(x: int) -> Any:
        return instance.evaluator(ChainMap({name: x}, instance.symbols))(node)

    try:
        f0, f1, f2 = at(0), at(1), at(2)
    except NNEFError:
        f0 = f1 = f2 = None
    if (
        not all(isinstance(f, int) and not isinstance(f, bool) for f in (f0, f1, f2))
        or f2 - f1 != f1 - f0
        or f1 == f0
    ):
        raise NNEFError.at(
            node.pos,
            f"'{print_expression(node)}' is not an affine expression of '{name}'; it cannot declare it",
        )
    slope = f1 - f0
    solution, remainder = divmod(value - f0, slope)
    if remainder or at(solution) != value:
        raise NNEFError.at(
            position,
            f"{instance.name}: {what} is {value}, which '{print_expression(node)}' "
            f"cannot equal for an integer '{name}'",
        )
    instance.symbols[name] = solution


def _check_using_count(instance: Instance, using: ast.Using, value: Any) -> None:
    length = instance.evaluator()(using.count)
    actual = len(value) if isinstance(value, list) else None
    if value is not None and actual != length:
        raise NNEFError.at(
            using.pos,
            f"{instance.name}: '{print_expression(using.target)}' has length "
            f"{actual}, but its hint says {format_value(length)}",
        )


def _destructure(instance: Instance, target: ast.List, value: list, position: ast.Position) -> None:
    items = target.items
    expanded = [i for i, item in enumerate(items) if isinstance(item, ast.Expand)]
    if len(items) == 1 and expanded and isinstance(items[0].value, ast.Zip):
        names = [item.name for item in items[0].value.items]
        if len(value) % len(names):
            raise NNEFError.at(
                position, f"cannot unzip a pack of length {len(value)} into {len(names)} packs"
            )
        for offset, name in enumerate(names):
            instance.symbols[name] = value[offset :: len(names)]
        return
    if len(expanded) > 1:
        raise NNEFError.at(position, "at most one item of a destructuring list may be a pack")
    fixed = len(items) - len(expanded)
    if (not expanded and len(value) != fixed) or len(value) < fixed:
        raise NNEFError.at(
            position, f"cannot destructure a pack of length {len(value)} into {len(items)} items"
        )
    rest = len(value) - fixed
    offset = 0
    for item in items:
        if isinstance(item, ast.Expand):
            instance.symbols[item.value.name] = value[offset : offset + rest]
            offset += rest
        else:
            instance.symbols[item.name] = value[offset]
            offset += 1


def _assertion_error(instance: Instance, assertion: ast.Assert) -> NNEFError:
    evaluator = instance.evaluator()
    if assertion.message is None:
        message = f"assertion '{print_expression(assertion.condition)}' failed"
    else:
        try:
            message = evaluator(assertion.message)
        except (Unknown, NNEFError):
            message = print_expression(assertion.message)
    printed = []
    for item in assertion.prints:
        label = item.label or print_expression(item.value)
        try:
            printed.append(f"{label} = {format_value(evaluator(item.value), True)}")
        except (Unknown, NNEFError):
            printed.append(f"{label} = ?")
    detail = f" ({', '.join(printed)})" if printed else ""
    where = f" [assertion at {assertion.pos}]" if in_stdlib(assertion.pos.file) else ""
    return NNEFError.at(instance.position, f"{instance.name}: {message}{detail}{where}")


def extent_count(instance: Instance, extent: ast.Extent, evaluator: Evaluator) -> int:
    """How many extents ``extent`` stands for: 1, or the length of a repeated extent ``x..(n)``."""
    if extent.pack is None:
        return 1
    if extent.pack.count is None or isinstance(extent.pack.count, ast.Placeholder):
        raise NNEFError.at(extent.pos, "a repeated extent needs a length: x..(n)")
    return evaluator.repeat_count(extent.pack.count) or 0
