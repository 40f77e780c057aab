"""Tuning records: built from BEAM or by hand, saved and loaded, reused by uv.compile(opts=records)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import uopviz as uv
from uopviz.backends.c import find_c_compiler
from uopviz.core.ops import AxisType
from uopviz.engine.records import TuningRecord, TuningRecords
from uopviz.engine.search import BeamCache, beam_search, kernel_key
from uopviz.passes.optops.opts import Opt, OptError, OptOp

needs_c = pytest.mark.skipif(find_c_compiler() is None, reason="no C compiler (gcc/clang) for the c backend")


def _program(n: int, backend: str, seed: int = 0, opts=None):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    return uv.compile([(uv.Tensor(a) @ uv.Tensor(b)).relu()], backend=backend, opts=opts), a, b


UPCAST = Opt(OptOp.SPLIT, 1, (4, AxisType.UPCAST, False))
UNROLL = Opt(OptOp.SPLIT, 2, (4, AxisType.UNROLL, False))


def test_hand_made_records_round_trip_and_compile_uses_them(tmp_path) -> None:
    program, _, _ = _program(16, "python")
    kernel = program.kernels[0]
    records = TuningRecords()
    device = uv.backends.get("python").device
    record = records.add(kernel, (UPCAST, UNROLL), backend="python", device=device, run_s=1e-3)
    assert record.key == kernel_key(kernel.with_parallel_outputs())
    path = tmp_path / "tuned.json"
    records.save(path)
    loaded = TuningRecords.load(path)
    assert list(loaded.records) == list(records.records)
    again = loaded.records[(record.key, "python")]
    assert again.opts == (UPCAST, UNROLL) and again.run_s == 1e-3 and again.device == device
    tuned, a, b = _program(16, "python", seed=3, opts=loaded)
    assert tuned.kernels[0].opts == (UPCAST, UNROLL)
    np.testing.assert_allclose(tuned.run()[0], np.maximum(a @ b, 0), rtol=1e-4, atol=1e-4)


@needs_c
def test_a_record_measured_on_another_cpu_target_is_shown_not_reused() -> None:
    from uopviz.backends.target import using_target

    program, _, _ = _program(16, "c")
    kernel = program.kernels[0]
    records = TuningRecords()
    with using_target("x86-64-v2"):
        v2_device = uv.backends.get("c").device
        records.add(kernel, (UPCAST,), device=v2_device)
        assert records.opts_for_kernel(kernel) == (UPCAST,)  # the target it was measured on reuses it
    with using_target("native"), pytest.warns(UserWarning, match="x86-64-v2.*not reused"):
        assert records.opts_for_kernel(kernel) is None
    assert records.record_for_kernel(kernel).opts == (UPCAST,)
    records.add(kernel, (UNROLL,), backend="c", device="")  # written by hand, for any device
    assert records.opts_for_kernel(kernel) == (UNROLL,)


def test_lookup_by_key_name_and_backend() -> None:
    program, _, _ = _program(16, "python")
    kernel = program.kernels[0]
    records = TuningRecords()
    records.add(kernel, (UPCAST,), backend="python")
    assert records.opts_for_kernel(kernel) == (UPCAST,)
    assert records.opts_for_kernel(kernel.with_parallel_outputs()) == (UPCAST,)
    other_size, _, _ = _program(32, "python")
    assert records.opts_for_kernel(other_size.kernels[0]) is None
    # the name the Optimize stage looks up (before the initial state) answers, an index does not
    rangeified = uv.compile(
        [uv.Tensor(np.ones((16, 16), np.float32)) @ uv.Tensor(np.ones((16, 16), np.float32))],
        backend="python",
        opts=None,
    )
    assert rangeified.kernels[0].name in records
    assert 0 not in records


def test_opts_that_do_not_fit_are_refused() -> None:
    program, _, _ = _program(16, "python")
    with pytest.raises(OptError):
        TuningRecords().add(
            program.kernels[0], (Opt(OptOp.SPLIT, 9, (4, AxisType.UPCAST, False)),), backend="python"
        )


def test_bad_files_are_reported(tmp_path) -> None:
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json: not JSON"):
        TuningRecords.load(path)
    path.write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(ValueError, match="not a uopviz tuning-records file"):
        TuningRecords.load(path)
    path.write_text(json.dumps({"format": "uopviz-tuning-records", "version": 99}))
    with pytest.raises(ValueError, match="version 99 is not supported"):
        TuningRecords.load(path)
    path.write_text(json.dumps({"format": "uopviz-tuning-records", "version": 1, "records": [{"key": "k"}]}))
    with pytest.raises(ValueError, match="lacks name, backend, opts"):
        TuningRecords.load(path)


def test_records_survive_pickling() -> None:
    import pickle

    records = TuningRecords([TuningRecord("r_g4-0123", "r_g4", "c", "cpu", (UPCAST,))])
    copy = pickle.loads(pickle.dumps(records))
    assert copy.records == records.records and copy["r_g4"] == (UPCAST,) and "r_L4" in copy


@needs_c
def test_beam_result_becomes_a_record_that_compile_reuses(tmp_path) -> None:
    program, _, _ = _program(32, "c")
    result = beam_search(
        program.kernels[0],
        width=2,
        rounds=1,
        budget_s=30,
        repeats=2,
        cache=BeamCache(tmp_path / "beam.sqlite"),
        progress=False,
    )
    records = TuningRecords()
    record = records.add_result(result)
    assert record.opts == result.opts and record.run_s == result.best.run_s
    records.save(tmp_path / "tuned.json")
    tuned, a, b = _program(32, "c", seed=5, opts=TuningRecords.load(tmp_path / "tuned.json"))
    assert tuned.kernels[0].opts == result.opts
    np.testing.assert_allclose(tuned.run()[0], np.maximum(a @ b, 0), rtol=1e-4, atol=1e-4)
