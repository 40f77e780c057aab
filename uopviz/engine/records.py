"""Tuning records: the opts chosen for each kernel, saved as JSON and reused by ``uv.compile``.

::

    records = TuningRecords()
    records.add_result(beam_search(kernel))          # or records.add(kernel, opts, backend="c")
    records.save("tuned.json")
    prog = uv.compile(t, backend="c", opts=TuningRecords.load("tuned.json"))

A record is keyed by the kernel key of :func:`uopviz.engine.search.kernel_key` (the kernel's
computation, independent of range and buffer numbering) and remembers the kernel's name, backend,
device, the opts, and the times measured when it was chosen.

``uv.compile(..., opts=records)`` reads the records as a mapping: the Optimize stage looks a
kernel up by its name, which this class answers for the kernel as Rangeify makes it (LOOP axes) and
as it looks in its initial state (GLOBAL axes).  Where the exact kernel is at hand,
:meth:`TuningRecords.opts_for_kernel` matches on the kernel key first (and the backend).
Opts are relative to the kernel's initial state, which is what the Optimize stage applies them to.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from uopviz.engine.search import BeamResult, kernel_key
from uopviz.passes.optops.kernel import Kernel
from uopviz.passes.optops.opts import Opt, opts_from_json, opts_to_json

FORMAT = "uopviz-tuning-records"
VERSION = 1


def _initial_state(kernel: Kernel) -> Kernel:
    return kernel.with_parallel_outputs() if not kernel.opts else kernel


def _loop_name(name: str) -> str:
    """The name a kernel had before its initial state made its LOOP axes GLOBAL."""
    prefix, _, rest = name.partition("_")
    parts = [("L" + part[1:]) if part.startswith("g") else part for part in rest.split("_")]
    return prefix + "_" + "_".join(parts)


@dataclass
class TuningRecord:
    """The opts chosen for one kernel on one backend and device."""

    key: str
    name: str
    backend: str
    device: str
    opts: tuple[Opt, ...]
    run_s: float | None = None
    baseline_s: float | None = None
    created: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))

    def measured_elsewhere(self, device: str) -> bool:
        """True when BEAM measured these opts on another device or CPU target than ``device`` (a
        record with no device, written by hand, applies everywhere)."""
        return bool(self.device) and self.device != device

    @property
    def lookup_names(self) -> tuple[str, ...]:
        """The kernel names this record answers to."""
        return tuple(dict.fromkeys((self.name, _loop_name(self.name))))

    def to_json(self) -> dict[str, Any]:
        """The record as JSON data."""
        return {
            "key": self.key,
            "name": self.name,
            "backend": self.backend,
            "device": self.device,
            "opts": opts_to_json(self.opts),
            "run_s": self.run_s,
            "baseline_s": self.baseline_s,
            "created": self.created,
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> TuningRecord:
        """A record from JSON data (raises ValueError naming a missing or bad field)."""
        missing = [f for f in ("key", "name", "backend", "opts") if f not in data]
        if missing:
            raise ValueError(f"tuning record {data.get('key', '?')!r} lacks {', '.join(missing)}")
        return TuningRecord(
            data["key"],
            data["name"],
            data["backend"],
            data.get("device", ""),
            opts_from_json(data["opts"]),
            data.get("run_s"),
            data.get("baseline_s"),
            data.get("created", ""),
        )


class TuningRecords(dict):
    """Records by kernel key; as a mapping, kernel name → opts (what ``uv.compile(opts=...)`` reads)."""

    def __init__(self, records: Iterable[TuningRecord] = ()):
        super().__init__()
        self.records: dict[tuple[str, str], TuningRecord] = {}
        for record in records:
            self.put(record)

    # -- adding -----------------------------------------------------------------------------
    def put(self, record: TuningRecord) -> TuningRecord:
        """Add or replace the record of (kernel key, backend)."""
        self.records[(record.key, record.backend)] = record
        for name in record.lookup_names:
            super().__setitem__(name, record.opts)
        return record

    def add(
        self,
        kernel: Kernel,
        opts: Sequence[Opt],
        backend: str | None = None,
        device: str = "",
        run_s: float | None = None,
        baseline_s: float | None = None,
    ) -> TuningRecord:
        """Record ``opts`` for ``kernel`` (opts relative to its initial state) after checking they apply."""
        start = _initial_state(
            kernel
            if backend is None or backend == kernel.backend
            else Kernel(kernel.ast, backend, kernel.opts, kernel.name_hint)
        )
        start.apply_all(list(opts))  # raises OptError if they do not fit this kernel
        return self.put(
            TuningRecord(kernel_key(start), start.name, start.backend, device, tuple(opts), run_s, baseline_s)
        )

    def add_result(self, result: BeamResult) -> TuningRecord:
        """Record the winner of a BEAM search."""
        start_name = result.baseline.name
        return self.put(
            TuningRecord(
                result.key,
                start_name,
                result.backend,
                result.device,
                result.opts,
                result.best.run_s,
                result.baseline.run_s,
            )
        )

    # -- looking up -------------------------------------------------------------------------
    def record_for_kernel(self, kernel: Kernel) -> TuningRecord | None:
        """The record of ``kernel`` on its backend: by kernel key, else by name, else None."""
        start = _initial_state(kernel)
        record = self.records.get((kernel_key(start), kernel.backend))
        if record is not None:
            return record
        for candidate in self.records.values():
            if candidate.backend == kernel.backend and kernel.name in candidate.lookup_names:
                return candidate
        return None

    def opts_for_kernel(self, kernel: Kernel) -> tuple[Opt, ...] | None:
        """The recorded opts for ``kernel`` on its backend, or None.  A record measured on another
        device or CPU target is not reused: a warning names both (what is fastest on one CPU is not
        on another; the opts stay readable in ``record_for_kernel``)."""
        record = self.record_for_kernel(kernel)
        if record is None:
            return None
        device = kernel.backend_object.device
        if record.measured_elsewhere(device):
            warnings.warn(
                f"tuning record of {record.name} ({record.backend}) was measured on {record.device}; "
                f"this is {device}: not reused (tune again here, or pass its opts explicitly)",
                stacklevel=2,
            )
            return None
        return record.opts

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and super().__contains__(name)

    def __reduce__(self):  # pickles as its records (the name mapping is rebuilt from them)
        return (TuningRecords, (list(self.records.values()),))

    # -- files ------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """All records as JSON data."""
        return {"format": FORMAT, "version": VERSION, "records": [r.to_json() for r in self.records.values()]}

    @classmethod
    def from_json(cls, data: dict[str, Any], where: str = "tuning records") -> TuningRecords:
        """Records from JSON data (raises ValueError saying what is wrong and where)."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"{where}: not a uopviz tuning-records file (expected format {FORMAT!r})")
        if data.get("version") != VERSION:
            raise ValueError(
                f"{where}: version {data.get('version')!r} is not supported (this uopviz reads "
                f"version {VERSION})"
            )
        try:
            return cls(TuningRecord.from_json(entry) for entry in data.get("records", []))
        except ValueError as error:
            raise ValueError(f"{where}: {error}") from None

    def save(self, path: str | os.PathLike) -> None:
        """Write the records as JSON."""
        with open(path, "w", encoding="utf-8") as file:
            json.dump(self.to_json(), file, indent=1)
            file.write("\n")

    @classmethod
    def load(cls, path: str | os.PathLike) -> TuningRecords:
        """Read records written by :meth:`save`."""
        with open(path, encoding="utf-8") as file:
            try:
                data = json.load(file)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}: not JSON ({error})") from None
        return cls.from_json(data, str(path))

    def __repr__(self) -> str:
        devices = sorted({r.device for r in self.records.values() if r.device})
        where = f" measured on {len(devices)} devices/targets" if len(devices) > 1 else ""
        return (
            f"<TuningRecords {len(self.records)} records{where}: "
            f"{', '.join(r.name for r in self.records.values())}>"
        )


__all__ = ["TuningRecord", "TuningRecords"]
