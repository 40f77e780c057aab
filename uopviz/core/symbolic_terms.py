"""Integer sums as terms, for the simplifier: a canonical, structural order of UOps (:func:`order_key`)
and sums decomposed into ``{term: coefficient}`` plus a constant and rebuilt sorted
(:func:`build_sum`), exact modulo ``2**bits``.
"""

from __future__ import annotations

from uopviz.core.dtype import DType
from uopviz.core.ops import Ops
from uopviz.core.symbolic_bounds import bounds, dtype_limits, wrapped_const
from uopviz.core.uop import UOp, derived_attribute

# ---------------------------------------------------------------------------------------------
# a canonical order of UOps (deterministic across runs: structural, never by id)


def order_key(u: UOp) -> tuple:
    """A structural sort key: ranges by number, then by op, arg and sources.  Cached on the UOp."""
    cached = u.__dict__.get("_order_key")
    if cached is not None:
        return cached
    return derived_attribute(u, "_order_key", _derive_order_key)


def _derive_order_key(u: UOp) -> tuple:
    arg = u.arg
    if u.op is Ops.CONST:
        value = arg[0]
        arg_key: tuple = (1, value) if isinstance(value, int) else (2, repr(value))
    elif u.op is Ops.RANGE:
        arg_key = (0, arg[0])
    else:
        arg_key = (3, "" if arg is None else repr(arg))
    return (int(u.op), arg_key, u.dtype.name, tuple(s.__dict__["_order_key"] for s in u.src))


# ---------------------------------------------------------------------------------------------
# integer sums as terms


def _signed_coefficient(value: int, dtype: DType) -> int:
    """The representative of a coefficient modulo 2**bits closest to zero (sums are exact mod 2**bits)."""
    bits = dtype.itemsize * 8
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def linear_terms(u: UOp) -> tuple[dict[UOp, int], int]:
    """``u`` as ``sum(coefficient * base) + constant``: walks ADD, SUB, NEG and MUL by a constant.

    Bases are the non-sum UOps met (keys in left-to-right order).  A constant multiple of a sum of
    several terms stays one base (distributing it would grow the graph).
    """
    coefficients: dict[UOp, int] = {}
    constant = 0
    stack: list[tuple[UOp, int]] = [(u, 1)]
    while stack:
        node, coefficient = stack.pop()
        op = node.op
        if op is Ops.ADD:
            stack.append((node.src[1], coefficient))
            stack.append((node.src[0], coefficient))
        elif op is Ops.SUB:
            stack.append((node.src[1], -coefficient))
            stack.append((node.src[0], coefficient))
        elif op is Ops.NEG:
            stack.append((node.src[0], -coefficient))
        elif op is Ops.CONST:
            constant += coefficient * node.arg[0]
        elif op is Ops.MUL and node.src[1].op is Ops.CONST:
            inner = node.src[0]
            factor = coefficient * node.src[1].arg[0]
            if inner.op in (Ops.ADD, Ops.SUB, Ops.NEG, Ops.MUL) and is_single_term(inner):
                stack.append((inner, factor))
            else:
                coefficients[inner] = coefficients.get(inner, 0) + factor
        else:
            coefficients[node] = coefficients.get(node, 0) + coefficient
    return coefficients, constant


def is_single_term(u: UOp) -> bool:
    """True when the sum ``u`` holds at most one non-constant term (so scaling it distributes
    without growing the graph)."""
    return len(linear_terms(u)[0]) <= 1


def recombine_divmod(coefficients: dict[UOp, int]) -> int | None:
    """Replace ``m*(y%d) + m*d*(y//d)`` by ``m*y`` in place (``y = d*(y//d) + y%d`` for floor
    division, any sign); returns the constant the expansion of ``y`` adds, None when nothing changed."""
    added: int | None = None
    for base in list(coefficients):
        if base.op is not Ops.MOD or base not in coefficients or base.src[1].op is not Ops.CONST:
            continue
        y, divisor = base.src[0], base.src[1].arg[0]
        if divisor == 0:
            continue
        quotient = UOp(Ops.IDIV, (y, base.src[1]))
        m = coefficients[base]
        if coefficients.get(quotient) == m * divisor:
            del coefficients[base], coefficients[quotient]
            inner, constant = linear_terms(y)
            for b, c in inner.items():
                coefficients[b] = coefficients.get(b, 0) + c * m
            added = (added or 0) + constant * m
    return added


def _term_uop(dtype: DType, base: UOp, coefficient: int) -> UOp:
    return base if coefficient == 1 else UOp(Ops.MUL, (base, wrapped_const(dtype, coefficient)))


def build_sum(dtype: DType, coefficients: dict[UOp, int], constant: int) -> UOp:
    """The canonical UOp of ``sum(coefficient * base) + constant`` (integers).

    Terms are sorted by :func:`order_key` of their base; positive terms are added, negative ones
    subtracted; the constant comes last as ``+ c`` (or first as ``c - t`` when every term is
    negative, which is one node smaller than ``-t + c``).
    """
    terms = sorted(
        ((b, _signed_coefficient(c, dtype)) for b, c in coefficients.items()),
        key=lambda item: order_key(item[0]),
    )
    terms = [(b, c) for b, c in terms if c != 0]
    constant = _signed_coefficient(constant, dtype)
    positive = [(b, c) for b, c in terms if c > 0]
    negative = [(b, -c) for b, c in terms if c < 0]
    if not terms:
        return wrapped_const(dtype, constant)
    if positive:
        total = _term_uop(dtype, *positive[0])
        for base, c in positive[1:]:
            total = UOp(Ops.ADD, (total, _term_uop(dtype, base, c)))
    elif constant != 0:
        total = UOp(Ops.SUB, (wrapped_const(dtype, constant), _term_uop(dtype, *negative[0])))
        constant, negative = 0, negative[1:]
        for base, c in negative:
            total = UOp(Ops.SUB, (total, _term_uop(dtype, base, c)))
        return total
    else:
        # lead with a term that already needs a MUL (times a negative constant), else negate one
        lead = next((i for i, (_, c) in enumerate(negative) if c != 1), 0)
        base, c = negative.pop(lead)
        total = UOp(Ops.NEG, (base,)) if c == 1 else UOp(Ops.MUL, (base, wrapped_const(dtype, -c)))
    for base, c in negative:
        total = UOp(Ops.SUB, (total, _term_uop(dtype, base, c)))
    if constant != 0:
        total = UOp(Ops.ADD, (total, wrapped_const(dtype, constant)))
    return total


def sum_interval(coefficients: dict[UOp, int], constant: int) -> tuple[int, int] | None:
    """The exact integer interval of ``sum(coefficient * base) + constant``, or None (a float bound)."""
    low = high = constant
    for base, c in coefficients.items():
        lo, hi = bounds(base)
        if not (isinstance(lo, int) and isinstance(hi, int)):
            return None
        if c >= 0:
            low, high = low + c * lo, high + c * hi
        else:
            low, high = low + c * hi, high + c * lo
    return low, high


def exact_terms(u: UOp) -> tuple[dict[UOp, int], int] | None:
    """``u``'s terms with signed coefficients, when the sum provably does not wrap (else None):
    then ``u``'s value equals the integer sum, and division and comparisons may reason on it."""
    coefficients, constant = linear_terms(u)
    dtype = u.dtype
    coefficients = {b: _signed_coefficient(c, dtype) for b, c in coefficients.items()}
    coefficients = {b: c for b, c in coefficients.items() if c != 0}
    constant = _signed_coefficient(constant, dtype)
    interval = sum_interval(coefficients, constant)
    if interval is None:
        return None
    dmin, dmax = dtype_limits(dtype)
    if interval[0] < dmin or interval[1] > dmax:
        return None
    return coefficients, constant


def fits_in(dtype: DType, low: int, high: int) -> bool:
    """True when every integer of ``[low, high]`` is a value of ``dtype``."""
    dmin, dmax = dtype_limits(dtype)
    return dmin <= low and high <= dmax
