"""The spec's seven multi-device collectives, built from primitives exactly as the spec writes them.

Also the module functions of :mod:`uopviz.core.tensor` and the namespace
``Tensor.collectives``.
"""

from __future__ import annotations

from collections.abc import Sequence

from uopviz.core.tensor_helpers import TensorLike

# ---------------------------------------------------------------------------------------------
# the spec's multi-device collectives, built from primitives exactly as the spec writes them.
# D = (d_0, ..., d_{n-1}).  REPLICATED collapses its axes to 1 (the spec's table), so where the
# spec's comment gives the squeezed shape, a final RESHAPE drops that axis.


def _multi_device(t: TensorLike, what: str) -> tuple[str, ...]:
    device = t.device
    if not isinstance(device, tuple):
        raise ValueError(f"{what} needs a tensor on an n-tuple device, got one on {device!r}")
    if t.ndim != 1:
        raise ValueError(f"{what} works on 1-D tensors (the spec's (n*s,)), got shape {t.shape}")
    return device


def _single_device_vector(t: TensorLike, devices: Sequence[str], what: str) -> tuple[str, ...]:
    devices = tuple(devices)
    if len(devices) < 1 or isinstance(t.device, tuple):
        raise ValueError(f"{what} takes a tensor on one device and an n-tuple of devices")
    if t.ndim != 1:
        raise ValueError(f"{what} works on 1-D tensors (the spec's (s,)), got shape {t.shape}")
    return devices


def broadcast(t: TensorLike, devices: Sequence[str]) -> TensorLike:
    """Replicate ``t`` (shape ``(s,)`` on one device) to all ``n`` devices:
    ``T.reshape(1, s).expand(n, s).copy(D).replicated(0)`` → ``(1, s)``, then RESHAPE to the spec's
    ``(s,)`` on D, axis null."""
    devices = _single_device_vector(t, devices, "broadcast")
    n, s = len(devices), t.shape[0]
    return t.reshape(1, s).expand(n, s).copy(devices).replicated(0).reshape(s)


def scatter(t: TensorLike, devices: Sequence[str]) -> TensorLike:
    """Split ``t`` (``(s,)`` on one device) into ``n`` chunks, one per device: ``T.copy(D)`` →
    ``(s,)`` on D, axis 0."""
    devices = _single_device_vector(t, devices, "scatter")
    if t.shape[0] % len(devices):
        raise ValueError(f"scatter of {t.shape} over {len(devices)} devices: the size does not divide")
    return t.copy(devices)


def gather(t: TensorLike) -> TensorLike:
    """Collect all shards (``(n*s,)`` on D, axis 0) onto the first device: ``T.copy(D[0])`` →
    ``(n*s,)`` on D[0], axis null."""
    devices = _multi_device(t, "gather")
    return t.copy(devices[0])


def reduce(t: TensorLike) -> TensorLike:
    """Gather and sum: ``gather(T).reshape(n, s).sum(0)`` → ``(s,)`` on D[0], axis null (the sum's
    REDUCE gives ``(1, s)``; its RESHAPE drops the axis)."""
    devices = _multi_device(t, "reduce")
    n = len(devices)
    return gather(t).reshape(n, t.shape[0] // n).sum(0, dtype=t.dtype)


def allgather(t: TensorLike) -> TensorLike:
    """Collect all shards and replicate to every device:
    ``T.reshape(1, n*s).expand(n, n*s).copy(D).replicated(0)`` → ``(1, n*s)``, then RESHAPE to the
    spec's ``(n*s,)`` on D, axis null."""
    devices = _multi_device(t, "allgather")
    n, total = len(devices), t.shape[0]
    return t.reshape(1, total).expand(n, total).copy(devices).replicated(0).reshape(total)


def reduce_scatter(t: TensorLike) -> TensorLike:
    """Reduce across devices and scatter the result:
    ``T.reshape(n, n, s//n).permute(1, 0, 2).copy(D).sum(1).reshape(s)`` → ``(s,)`` on D, axis 0.
    ``t`` is ``(n*s,)`` on D with axis 0 (each device holds ``(s,)``)."""
    devices = _multi_device(t, "reduce_scatter")
    n = len(devices)
    s = t.shape[0] // n
    if s % n:
        raise ValueError(f"reduce_scatter of {t.shape} over {n} devices: each shard ({s}) must split "
                         f"into {n}")
    return t.reshape(n, n, s // n).permute(1, 0, 2).copy(devices).sum(1, dtype=t.dtype).reshape(s)


def allreduce(t: TensorLike) -> TensorLike:
    """``allgather(reduce_scatter(T))`` → ``(s,)`` on D, axis null."""
    return allgather(reduce_scatter(t))


class collectives:  # noqa: N801 - a namespace, used as Tensor.collectives.allreduce(t)
    """The spec's seven multi-device collectives (also module functions of ``uopviz.core.tensor``)."""

    broadcast = staticmethod(broadcast)
    scatter = staticmethod(scatter)
    gather = staticmethod(gather)
    reduce = staticmethod(reduce)
    allgather = staticmethod(allgather)
    reduce_scatter = staticmethod(reduce_scatter)
    allreduce = staticmethod(allreduce)


