"""What BEAM search tries: the kernel key that names a computation, and the opts proposed next.

:func:`kernel_key` names a kernel's computation independently of range and buffer numbering (the
BEAM cache, tuning records and the tuner's sessions are keyed by it); :func:`candidate_opts` lists
every single opt worth trying next on a kernel, each one checked to apply.
"""

from __future__ import annotations

import hashlib
from typing import Any

from uopviz.core.dtype import DType
from uopviz.core.ops import AxisType, Ops
from uopviz.core.uop import BufferArg, ParamArg, UOp
from uopviz.passes.optops.axes import REDUCE_TYPES
from uopviz.passes.optops.kernel import Kernel
from uopviz.passes.optops.opts import Opt, OptError, OptOp

# ---------------------------------------------------------------------------------------------
# keys


def _canonical_arg(u: UOp, ranges: dict[UOp, int], buffers: dict[Any, int]) -> str:
    arg = u.arg
    if u.op is Ops.RANGE:
        return f"r{ranges.setdefault(u, len(ranges))}:{arg[1].name}"
    if isinstance(arg, BufferArg):
        number = buffers.setdefault(("buffer", arg.number), len(buffers))
        return f"b{number}:{arg.size}:{arg.dtype.name}:{arg.addrspace.name}"
    if isinstance(arg, ParamArg):
        return f"p{arg.slot}:{arg.dtype.name}:{arg.addrspace.name if arg.addrspace else ''}"
    if isinstance(arg, DType):
        return arg.name
    if isinstance(arg, tuple):
        return "(" + ",".join(a.name if isinstance(a, DType | Ops | AxisType) else repr(a) for a in arg) + ")"
    return repr(arg)


def kernel_key(kernel: Kernel) -> str:
    """A name for the kernel's computation that does not depend on range or buffer numbering:
    ``<kernel name>-<16 hex digits>``.  Tuning caches and records are keyed by it."""
    ranges: dict[UOp, int] = {}
    buffers: dict[Any, int] = {}
    order = kernel.ast.toposort()
    position = {u: i for i, u in enumerate(order)}
    digest = hashlib.sha256()
    for u in order:
        line = f"{u.op.name}|{u.dtype.name}|{_canonical_arg(u, ranges, buffers)}|" + ",".join(
            str(position[s]) for s in u.src
        )
        digest.update(line.encode() + b"\n")
    return f"{kernel.name}-{digest.hexdigest()[:16]}"


# ---------------------------------------------------------------------------------------------
# candidates


SPLIT_FACTORS = (2, 3, 4, 8, 16, 32)
SPLIT_TARGETS: tuple[tuple[AxisType, bool], ...] = (
    (AxisType.UPCAST, False),
    (AxisType.UNROLL, False),
    (AxisType.LOCAL, False),
    (AxisType.THREAD, True),
    (AxisType.GROUP_REDUCE, False),
    (AxisType.GROUP_REDUCE, True),
)


def candidate_opts(kernel: Kernel) -> list[Opt]:
    """Every single opt worth trying next on ``kernel`` (each one checked: it applies)."""
    proposals: list[Opt] = []
    axes = kernel.axes
    backend = kernel.backend_object
    if not kernel.opts:
        reduce_count = sum(1 for _, t in axes if t in REDUCE_TYPES)
        for reduce_index in range(reduce_count):
            for tc_opt in (0, 1):
                proposals.append(Opt(OptOp.TC, reduce_index, (-1, tc_opt, 1)))
    for axis, (size, _) in enumerate(axes):
        for factor in SPLIT_FACTORS:
            if factor >= size or size % factor:
                continue
            for target, top in SPLIT_TARGETS:
                proposals.append(Opt(OptOp.SPLIT, axis, (factor, target, top)))
        for multiple in (4, 8, 16):
            if size % multiple and size > multiple:
                proposals.append(Opt(OptOp.PADTO, axis, multiple))
    for first in range(len(axes)):
        for second in range(first + 1, len(axes)):
            proposals.append(Opt(OptOp.SWAP, first, second))
    if backend.has_local and not kernel.nolocals:
        proposals.append(Opt(OptOp.NOLOCALS, None, None))
    valid = []
    for opt in proposals:
        try:
            kernel.apply(opt)
        except OptError:
            continue
        valid.append(opt)
    return valid


__all__ = ["SPLIT_FACTORS", "SPLIT_TARGETS", "candidate_opts", "kernel_key"]
