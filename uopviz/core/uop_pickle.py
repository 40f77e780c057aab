"""Pickling values that hold many UOps: every UOp once, in one table in topological order.

A UOp pickles on its own as its whole graph (:meth:`UOp.__reduce__`), so a value holding many
kernels, buffers and a program graph that share nodes pickles each shared node once per root
(DenseNet-121's program: 24.5k UOps pickled 839k times that way).  :func:`dumps_sharing_uops` finds
every UOp the value holds, writes them once as a table (op, source positions, arg, tag) and the
value with each UOp as its position; :func:`loads_sharing_uops` builds the table's UOps in order
(hash-consing gives back the ones this process has) and the value around them.  Used by the
whole-program cache (``uopviz.nnef.program.program_cache``) and by the forked processes of a split
lowering (``uopviz.passes.parallel``).
"""

from __future__ import annotations

import io
import pickle
from typing import Any

from uopviz.core.uop import UOp, toposort


class _RecordingPickler(pickle.Pickler):
    """Pickles nothing worth keeping: finds every UOp the value holds (the roots of the table)."""

    def __init__(self, stream: io.BytesIO) -> None:
        super().__init__(stream, protocol=pickle.HIGHEST_PROTOCOL)
        self.roots: dict[UOp, None] = {}

    def persistent_id(self, obj: Any) -> Any:
        if type(obj) is UOp:
            self.roots[obj] = None
            return 0
        return None


class _TablePickler(pickle.Pickler):
    """Pickles each UOp as its position in the shared table (a scalar DType pickles as its name:
    :meth:`~uopviz.core.dtype.DType.__reduce_ex__`)."""

    def __init__(self, stream: io.BytesIO, number: dict[UOp, int] | None = None) -> None:
        super().__init__(stream, protocol=pickle.HIGHEST_PROTOCOL)
        self.number = number

    def persistent_id(self, obj: Any) -> Any:
        if self.number is not None and type(obj) is UOp:
            return self.number[obj]
        return None


class _TableUnpickler(pickle.Unpickler):
    """Reads each UOp back as the table's UOp at its position."""

    def __init__(self, stream: io.BytesIO, built: list[UOp] | None = None) -> None:
        super().__init__(stream)
        self.built = built

    def persistent_load(self, pid: Any) -> Any:
        assert self.built is not None
        return self.built[pid]


def _dumps(value: Any, number: dict[UOp, int] | None = None) -> bytes:
    stream = io.BytesIO()
    _TablePickler(stream, number).dump(value)
    return stream.getvalue()


def _loads(data: bytes, built: list[UOp] | None = None) -> Any:
    return _TableUnpickler(io.BytesIO(data), built).load()


def dumps_sharing_uops(value: Any) -> bytes:
    """``value`` pickled with every UOp it holds once, in one table (sources before their users)."""
    recorder = _RecordingPickler(io.BytesIO())
    recorder.dump(value)
    order = toposort(list(recorder.roots))
    number = {uop: position for position, uop in enumerate(order)}
    table = [(u.op, tuple(number[s] for s in u.src), u.arg, u.tag) for u in order]
    return _dumps((_dumps(table), _dumps(value, number)))


def loads_sharing_uops(data: bytes) -> Any:
    """The value :func:`dumps_sharing_uops` pickled, its UOps rebuilt once each."""
    table_bytes, value_bytes = _loads(data)
    built: list[UOp] = []
    for op, src, arg, tag in _loads(table_bytes):
        built.append(UOp(op, tuple(built[i] for i in src), arg, tag))
    return _loads(value_bytes, built)


__all__ = ["dumps_sharing_uops", "loads_sharing_uops"]
