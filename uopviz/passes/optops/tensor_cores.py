"""The tensor-core opt, TC, and the layouts of the tensor cores' fragments.

``TC(reduce_index, (tc_select, tc_opt, mode))``: the M, N and K axes of a multiply-reduce are split
into the tile and what is left; the tile becomes WARP lanes (for tiles spread over a warp), UNROLL
fragment axes of A and B and an UPCAST fragment axis of the result, and the multiply-accumulate
becomes ``WMMA`` (``tc_opt`` 1 allows casts of the operands, 2 also pads the axes to the tile; mode
3 only splits M, N into UPCAST and K into UNROLL tiles).  Only as the first opt.  The tensor cores
themselves are the backends' declarations (:class:`uopviz.backends.base.TensorCore`).
"""

from __future__ import annotations

from collections.abc import Sequence

from uopviz.backends.base import TensorCore
from uopviz.core.ops import AxisType, Ops
from uopviz.core.rewrite import substitute
from uopviz.core.uop import UOp
from uopviz.passes.indexing import iadd, iconst, idiv, imod, imul
from uopviz.passes.optops.axes import (
    REDUCE_TYPES,
    depends_on,
    pad_axis,
    range_size,
    ranges_of,
    renumber,
    substitute_ranges,
)
from uopviz.passes.optops.opts import Opt, OptError, OptOp, ShapedKernel


def _strip_cast(u: UOp) -> UOp:
    return u.src[0] if u.op is Ops.CAST else u


def _product_of(reduce: UOp) -> UOp:
    """The summed product of a multiply-reduce; through the mask PADTO puts on a padded reduce
    axis (the product is 0 there anyway: the loads of the padding are gated to 0)."""
    value = reduce.src[0]
    if value.op is Ops.WHERE and value.src[2].op is Ops.CONST and value.src[2].const_value == 0:
        return value.src[1]
    return value


def _padded_to_tiles(kernel: ShapedKernel, misfits: list[tuple[UOp, int]]) -> ShapedKernel:
    """``kernel`` with each range of ``misfits`` padded (PADTO) to a multiple of its tile size."""
    for r, tile in misfits:
        number = r.arg[0]
        index = next(i for i, candidate in enumerate(kernel.ranges) if candidate.arg[0] == number)
        ast = pad_axis(kernel, Opt(OptOp.PADTO, index, tile))
        kernel = kernel.with_ast(renumber(ast, ranges_of(ast)))
    return kernel


def apply_tensor_core(kernel: ShapedKernel, opt: Opt) -> UOp:
    """TC on the ``reduce_index``-th reduce axis: find the multiply-reduce, its M (an output axis only
    the first operand varies over), N (only the second) and a matching tensor core; then mode 1
    emits ``REDUCE(WMMA(a, b, 0))`` over the tile's fragments and warp (``_tensor_core_wmma``), and
    mode 3 only splits M, N into UPCAST and K into UNROLL tiles of the tile's sizes."""
    if not (isinstance(opt.arg, tuple) and len(opt.arg) == 3):
        raise OptError(f"{opt}: TC's arg is (tc_select, tc_opt, mode)")
    tc_select, tc_opt, mode = opt.arg
    if mode not in (1, 3):
        raise OptError(f"{opt}: TC mode {mode!r} is not known; 1 emits WMMA, 3 only shapes the tile axes")
    if tc_opt not in (0, 1, 2):
        raise OptError(f"{opt}: tc_opt must be 0 (exact multiply), 1 (casts allowed) or 2 (also pad axes)")
    reduce_axes = [r for r in kernel.ranges if r.arg[1] in REDUCE_TYPES]
    if not isinstance(opt.axis, int) or not 0 <= opt.axis < len(reduce_axes):
        raise OptError(f"{opt}: reduce axis {opt.axis} does not exist; the kernel has {len(reduce_axes)} "
                       f"reduce axes")
    k_range = reduce_axes[opt.axis]
    reduces = [u for u in kernel.ast.toposort()
               if u.op is Ops.REDUCE and any(s is k_range for s in u.src[1:])]
    if len(reduces) != 1 or reduces[0].arg[0] is not Ops.ADD or _product_of(reduces[0]).op is not Ops.MUL:
        raise OptError(f"{opt}: TC needs exactly one sum of products over reduce axis {opt.axis}")
    reduce = reduces[0]
    a, b = _product_of(reduce).src
    if tc_opt == 0 and (a.op is Ops.CAST or b.op is Ops.CAST):
        raise OptError(f"{opt}: the products cast their operands; use tc_opt=1 to allow that")
    a_in, b_in = (_strip_cast(a), _strip_cast(b)) if tc_opt >= 1 else (a, b)
    outputs = [r for r in kernel.ranges if r.arg[1] in (AxisType.GLOBAL, AxisType.LOOP)]
    m_candidates = [r for r in outputs if depends_on(a_in, r) and not depends_on(b_in, r)]
    n_candidates = [r for r in outputs if depends_on(b_in, r) and not depends_on(a_in, r)]
    if not m_candidates or not n_candidates:
        raise OptError(f"{opt}: TC needs an output axis only the first operand varies over (M) and one "
                       f"only the second varies over (N)")
    m_range, n_range = m_candidates[-1], n_candidates[-1]
    cores = kernel.backend_object.tensor_cores
    matching = [tc for tc in cores
                if tc.dtype_in == a_in.dtype.scalar and tc.dtype_out == reduce.dtype.scalar]
    if not matching:
        raise OptError(f"{opt}: the {kernel.backend} backend has no tensor core for {a_in.dtype.name} -> "
                       f"{reduce.dtype.name} (it has {[tc.name for tc in cores]})")
    if tc_select == -1:
        config = matching[0]
    elif isinstance(tc_select, int) and 0 <= tc_select < len(cores) and cores[tc_select] in matching:
        config = cores[tc_select]
    else:
        raise OptError(f"{opt}: tc_select {tc_select!r} is not one of the matching tensor cores "
                       f"{[cores.index(tc) for tc in matching]}")
    tile_m, tile_n, tile_k = config.dims
    misfits = [(r, tile) for r, tile in ((m_range, tile_m), (n_range, tile_n), (k_range, tile_k))
               if range_size(r) % tile]
    if misfits and tc_opt == 2:  # pad them to the tile (loads and stores of the padding gated off)
        return apply_tensor_core(_padded_to_tiles(kernel, misfits), opt)
    for r, tile, what in ((m_range, tile_m, "M"), (n_range, tile_n, "N"), (k_range, tile_k, "K")):
        if range_size(r) % tile:
            raise OptError(f"{opt}: the {what} axis of size {range_size(r)} is not a multiple of the "
                           f"tile's {tile}; use tc_opt=2 to pad it (TC is the first opt, so no PADTO "
                           f"can come before it)")
    if mode == 1:
        return _tensor_core_wmma(kernel, config, reduce, (a_in, b_in), m_range, n_range, k_range)
    # mode 3: r = outer * tile + inner for M, N (inner UPCAST) and K (inner UNROLL); the outer parts
    # keep their numbers (so their loops keep their places), the tiles come last in kernel order
    mapping: dict[UOp, UOp] = {}
    inner: dict[str, UOp] = {}
    for number, (key, r, tile, target) in enumerate((("m", m_range, tile_m, AxisType.UPCAST),
                                                      ("n", n_range, tile_n, AxisType.UPCAST),
                                                      ("k", k_range, tile_k, AxisType.UNROLL))):
        inner[key] = UOp.range(tile, target, 30_000 + number)
        rest = range_size(r) // tile
        if rest == 1:
            mapping[r] = inner[key]
        else:
            outer = UOp.range(rest, r.arg[1], r.arg[0])
            mapping[r] = outer * UOp.const(outer.dtype, tile) + inner[key]
    return substitute_ranges(kernel.ast, mapping)


def _bit(x: UOp, bit: int) -> UOp:
    """Bit ``bit`` of the index ``x`` (0 or 1)."""
    return imod(idiv(x, 1 << bit), 2)


def _select(x: UOp, values: Sequence[UOp]) -> UOp:
    """``values[x]`` for an index ``x`` in ``range(len(values))``, as a chain of WHEREs."""
    out = values[-1]
    for i in range(len(values) - 2, -1, -1):
        out = UOp(Ops.WHERE, (UOp(Ops.CMP_NE, (x, iconst(i))), out, values[i]))
    return out


def layout_expression(config: TensorCore, operand: str, axis: int, lane: UOp | None, element: UOp) -> UOp:
    """The row (``axis`` 0) or column (1) of ``operand``'s tile that element ``element`` of warp lane
    ``lane`` holds, as an index expression: a sum of bits of the lane and the element where the
    layout is such a bit permutation (the PTX layouts are), else a selection among the entries."""
    threads, count = config.threads, config.elements(operand)
    table = [[config.coordinate(operand, t, e)[axis] for e in range(count)] for t in range(threads)]
    base = table[0][0]
    lane_bits = {b: table[1 << b][0] - base for b in range((threads - 1).bit_length())}
    element_bits = {b: table[0][1 << b] - base for b in range((count - 1).bit_length())}
    def predicted(t: int, e: int) -> int:
        return base + sum(w for b, w in lane_bits.items() if t >> b & 1) + \
            sum(w for b, w in element_bits.items() if e >> b & 1)

    if all(table[t][e] == predicted(t, e) for t in range(threads) for e in range(count)):
        out = iconst(base)
        for b, weight in element_bits.items():
            out = iadd(out, imul(_bit(element, b), weight))
        for b, weight in lane_bits.items():
            out = iadd(out, imul(_bit(lane, b), weight))
        return out
    per_element = [_select(lane, [iconst(table[t][e]) for t in range(threads)]) if lane is not None
                   else iconst(table[0][e]) for e in range(count)]
    return _select(element, per_element)


def _tensor_core_wmma(kernel: ShapedKernel, config: TensorCore, reduce: UOp, operands: tuple[UOp, UOp],
                      m_range: UOp, n_range: UOp, k_range: UOp) -> UOp:
    """TC mode 1: each of M, N, K becomes ``outer * tile + coordinate``, where the coordinate comes
    from the tensor core's layout of the operand at hand: A's elements (an UNROLL range ``ea``), B's
    (UNROLL ``eb``) and the result's (UPCAST ``ec``), over the WARP lanes (a WARP range, when the tile
    is spread over several threads).  The multiply-reduce becomes ``REDUCE(WMMA(a, b, 0))``."""
    tile_m, tile_n, tile_k = config.dims
    elements = {name: UOp.range(config.elements(name), kind, 30_000 + i)
                for i, (name, kind) in enumerate((("a", AxisType.UNROLL), ("b", AxisType.UNROLL),
                                                  ("c", AxisType.UPCAST)))}
    warp = UOp.range(config.threads, AxisType.WARP, 30_003) if config.threads > 1 else None

    def outer(r: UOp, tile: int) -> UOp:
        rest = range_size(r) // tile
        return iconst(0) if rest == 1 else imul(UOp.range(rest, r.arg[1], r.arg[0]), tile)

    def at(r: UOp, tile: int, operand: str, axis: int) -> UOp:
        return iadd(outer(r, tile), layout_expression(config, operand, axis, warp, elements[operand]))

    a, b = operands  # in the tensor core's input dtype: the WMMA converts to its output dtype
    a = substitute(a, {m_range: at(m_range, tile_m, "a", 0), k_range: at(k_range, tile_k, "a", 1)})
    b = substitute(b, {k_range: at(k_range, tile_k, "b", 0), n_range: at(n_range, tile_n, "b", 1)})
    wmma = UOp(Ops.WMMA, (a, b, UOp.const(reduce.dtype, 0)), (config, elements["a"], elements["b"],
                                                                elements["c"], warp))
    k_loop = [x for x in outer(k_range, tile_k).toposort() if x.op is Ops.RANGE]
    loops = [r for r in reduce.src[1:] if r is not k_range] + k_loop
    new_reduce = UOp(Ops.REDUCE, (wmma, *loops), reduce.arg)  # (no loops: Expand still finds the tile)
    ast = substitute(kernel.ast, {reduce: new_reduce})
    return substitute(ast, {m_range: at(m_range, tile_m, "c", 0), n_range: at(n_range, tile_n, "c", 1)})


def tensor_core(kernel: ShapedKernel, opt: Opt) -> UOp:
    """TC: the first opt only; see :func:`apply_tensor_core`."""
    if kernel.opts:
        raise OptError(f"{opt}: TC must be the first opt (the kernel already has {list(kernel.opts)})")
    return apply_tensor_core(kernel, opt)


__all__ = ["apply_tensor_core", "layout_expression", "tensor_core"]
