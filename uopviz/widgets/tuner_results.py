"""What the kernel tuner shows per backend: a kernel's source (:class:`SourceEntry`) and its timing
(:class:`TimingEntry`), as :class:`uopviz.widgets.tuner.TunerState` caches them and a tuning session
saves them; and :class:`TunerSessionError`, what a session that cannot be loaded raises.
:mod:`uopviz.widgets.tuner` re-exports every name here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from uopviz.core.errors import UopvizError


class TunerSessionError(UopvizError, ValueError):
    """A tuning session that cannot be loaded: not a session file, another version, or one saved for
    another kernel (the message names what differs: kernel name, key, backend, or the replayed opts)."""


@dataclass
class SourceEntry:
    """The source of the current kernel on one backend, or why there is none."""

    backend: str
    source: str = ""
    error: str = ""
    seconds: float = 0.0


#: seconds a timing in the tuner may take per backend (the kernel's build not counted): its runs stop
#: repeating at half of it and its worker is stopped at it, so no click can hang the notebook
TIMING_BUDGET_S = 5.0
#: the GPU the tuner's GPU model describes under the CUDA source
GPU_MODEL_GPU = "H100"
#: the spread (interquartile range over median) beyond which a timing is flagged as unsteady
UNSTEADY_SPREAD = 0.25


@dataclass
class TimingEntry:
    """A timing of the current kernel on one backend (or why it failed), with rates when the
    kernel's op and byte counts are known."""

    backend: str
    median_s: float | None = None
    min_s: float | None = None
    runs: int = 0
    gflops: float | None = None
    gbps: float | None = None
    flops: float | None = None
    bytes: float | None = None
    error: str = ""
    #: where it was measured: the backend's device, which names the CPU and its target profile
    device: str = ""
    max_s: float | None = None
    #: the runs' interquartile range over their median (0.05: the middle half within 5 %)
    spread: float | None = None

    @property
    def unsteady(self) -> bool:
        """True when the runs disagree enough that the median should not be trusted alone (a busy
        machine): their middle half spans more than :data:`UNSTEADY_SPREAD` of the median."""
        return self.spread is not None and self.spread > UNSTEADY_SPREAD

    def to_json(self) -> dict[str, Any]:
        """The entry as plain data (a tuning session's timing history)."""
        return asdict(self)

    @staticmethod
    def from_json(data: dict[str, Any]) -> TimingEntry:
        """The entry :meth:`to_json` wrote (fields it does not know are refused by name)."""
        known = set(TimingEntry.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown or "backend" not in data:
            raise TunerSessionError(f"a timing in the session has unknown fields {unknown} or no "
                                    f"backend: {data}")
        return TimingEntry(**data)

    @property
    def intensity(self) -> float | None:
        """Arithmetic intensity, FLOP per byte moved."""
        if self.flops is None or not self.bytes:
            return None
        return self.flops / self.bytes


def _counts(kernel: Any, timing: Any) -> tuple[float | None, float | None]:
    """(FLOPs, bytes) of one run, as the timing or the kernel report them (None if unknown)."""
    flops = bytes_moved = None
    for owner in (timing, kernel):
        for name in ("flops", "ops"):
            value = getattr(owner, name, None)
            if flops is None and isinstance(value, int | float) and not isinstance(value, bool):
                flops = float(value)
        for name in ("bytes", "bytes_moved", "mem_bytes"):
            value = getattr(owner, name, None)
            if bytes_moved is None and isinstance(value, int | float) and not isinstance(value, bool):
                bytes_moved = float(value)
    return flops, bytes_moved


def timing_entry(kernel: Any, backend: str, timing: Any) -> TimingEntry:
    """A :class:`TimingEntry` from a backend's ``Timing``."""
    median = float(timing.median_s)
    flops, bytes_moved = _counts(kernel, timing)
    gflops = getattr(timing, "gflops", None)
    gbps = getattr(timing, "gbps", None)
    if gflops is None and flops is not None and median > 0:
        gflops = flops / median / 1e9
    if gbps is None and bytes_moved is not None and median > 0:
        gbps = bytes_moved / median / 1e9
    from uopviz.backends import BackendUnavailable, get

    try:
        device = get(backend).device
    except (KeyError, BackendUnavailable):
        device = ""
    return TimingEntry(
        backend,
        median,
        float(getattr(timing, "min_s", median)),
        int(getattr(timing, "runs", 0)),
        gflops,
        gbps,
        flops,
        bytes_moved,
        device=device,
        max_s=float(getattr(timing, "max_s", median)),
        spread=getattr(timing, "spread", None),
    )


__all__ = [
    "GPU_MODEL_GPU",
    "SourceEntry",
    "TIMING_BUDGET_S",
    "TimingEntry",
    "TunerSessionError",
    "UNSTEADY_SPREAD",
    "timing_entry",
]
