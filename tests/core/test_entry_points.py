"""Entry points: the layers below call the engine through names the package root provides."""

from __future__ import annotations

import numpy as np
import pytest

import uopviz as uv
from uopviz.core import entry_points
from uopviz.core.entry_points import entry_point, provide


def test_the_root_provides_the_engine_entry_points():
    assert entry_point("compile") is uv.compile
    assert entry_point("gradient") is uv.gradient
    from uopviz.engine.kernel import lower_kernel

    assert entry_point("lower_kernel") is lower_kernel


def test_an_entry_point_given_by_name_is_imported_on_first_use(monkeypatch):
    monkeypatch.setattr(entry_points, "_PROVIDED", {})
    provide("square", "math:sqrt")
    assert entry_point("square")(9.0) == 3.0
    assert entry_points._PROVIDED["square"] is __import__("math").sqrt  # resolved once, kept


def test_an_entry_point_nobody_provided_is_a_lookup_error_naming_the_known_ones(monkeypatch):
    monkeypatch.setattr(entry_points, "_PROVIDED", {"compile": "x:y"})
    with pytest.raises(LookupError, match="'search'.*known: compile"):
        entry_point("search")


def test_tensor_numpy_and_kernel_lower_reach_the_engine():
    x = uv.Tensor(np.arange(6, dtype=np.float32))
    np.testing.assert_allclose((x * 2).numpy(), np.arange(6, dtype=np.float32) * 2)
    kernel = uv.compile(x * 2, backend="python").kernels[0]
    lowered = kernel.lower()
    assert lowered.linear.op is uv.Ops.LINEAR and lowered.source == kernel.source()
