"""Writes at an offset through a view: where a kernel writes its buffer, it writes a view of it.

A concatenation's pieces are written where they go in its buffer: DenseNet's layer ``k`` stores
its 32 new channels at ``offset_k + i`` of the block's buffer (Concat In Place makes the whole block
one buffer).  The layers' kernels are then the same code but for ``offset_k``, and the pipeline
lowers each of them (60-70 ms each for DenseNet-121's 58 growth convolutions, 2.9 s of its cold
compile) before Render finds them equal up to that constant (``passes.extent_sharing``).

:func:`write_through_views` takes the constant out of the code: where every access a kernel makes
to the buffer it writes (its slot 0) is ``i + c`` with a constant ``c`` and ``i >= 0``, the kernel
accesses ``i + (c - o)`` of a view of the buffer that starts at element ``o`` (the smallest ``c``)
and holds as many elements as the kernel reaches (its reach ``r``), where ``o >= r``: a piece
written past a stretch as long as itself is placed by what comes before it (a concatenation's
later pieces, a padded buffer's bottom rows), which differs between otherwise equal kernels; an
offset within the kernel's own reach (a padded interior, one row and one column in) follows from
the kernel's own shape, the same wherever it is equal, and stays in the code.  The view is named
``<buffer>@<o>`` (:func:`view_name`); the Program binds it as a one-dimensional SHRINK of the
buffer, whose launches pass the buffer's array from element ``o`` on.  The addresses the kernel
touches are the same as before, so its speed is too; kernels differing only in where they write
become one body, lowered once.
"""

from __future__ import annotations

from dataclasses import replace

from uopviz.core.affine import constant_term
from uopviz.core.dtype import dtypes
from uopviz.core.ops import Ops
from uopviz.core.rewrite import substitute
from uopviz.core.symbolic_bounds import bounds
from uopviz.core.uop import UOp
from uopviz.nnef.lowering.kernel_builder import LoweredKernel
from uopviz.passes.indexing import iadd

__all__ = ["split_view_name", "view_name", "write_through_views"]

VIEW_SEPARATOR = "@"


def view_name(buffer: str, offset: int) -> str:
    """The name a kernel binds for the view of ``buffer`` from element ``offset`` on."""
    return f"{buffer}{VIEW_SEPARATOR}{offset}"


def split_view_name(name: str) -> tuple[str, int | None]:
    """``(buffer, offset)`` of a view's name, ``(name, None)`` for a buffer's own name."""
    buffer, separator, offset = name.rpartition(VIEW_SEPARATOR)
    if not separator or not offset.isdigit():
        return name, None
    return buffer, int(offset)


def _through_view(kernel: LoweredKernel) -> LoweredKernel | None:
    """``kernel`` writing a view of its buffer, or None when its accesses to it have no common
    constant offset (see the module's docstring)."""
    nodes = kernel.ast.toposort()
    params = [u for u in nodes if u.op is Ops.PARAM and u.arg.slot == 0]
    if len(params) != 1 or split_view_name(kernel.buffers[0])[1] is not None:
        return None
    param = params[0]
    users = [u for u in nodes if any(source is param for source in u.src)]
    if not users or any(u.op is not Ops.INDEX or len(u.src) != 2 or u.src[0] is not param for u in users):
        return None  # the buffer used other than as one flat index
    terms = [constant_term(u.src[1]) for u in users]
    if any(rest is not None and bounds(rest)[0] < 0 for rest, _ in terms):
        return None
    offset = min(constant for _, constant in terms)
    if offset <= 0:
        return None
    indices = [UOp.const(dtypes.index, constant - offset) if rest is None else iadd(rest, constant - offset)
               for rest, constant in terms]  # fmt: skip
    reach = max(bounds(index)[1] for index in indices) + 1
    if offset < reach or offset + reach > param.shape[0]:
        return None  # positioned by its own extent (a padded interior at one row and one column)
    arg = param.arg
    view = UOp.param(0, (reach,), arg.dtype, arg.device, arg.addrspace)
    mapping = {user: UOp(Ops.INDEX, (view, index)) for user, index in zip(users, indices)}
    return replace(
        kernel,
        ast=substitute(kernel.ast, mapping),
        buffers=[view_name(kernel.buffers[0], offset), *kernel.buffers[1:]],
        note=(kernel.note + "; " if kernel.note else "")
        + f"writes {kernel.buffers[0]} from element {offset} on through a view",
    )


def write_through_views(kernels: list[LoweredKernel]) -> list[LoweredKernel]:
    """``kernels``, each that accesses the buffer it writes at a common constant offset writing a
    view of it from that offset on instead (see the module's docstring)."""
    return [_through_view(kernel) or kernel for kernel in kernels]
