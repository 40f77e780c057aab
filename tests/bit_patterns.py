"""Bit patterns of every dtype for the bitcast tests: random bits of each type, tensors of them, and
the check that a bitcast's result holds the source's bits (tests/backends/test_targets.py and
tests/fuzz/test_sweep_dtypes.py)."""

from __future__ import annotations

import ml_dtypes
import numpy as np

import uopviz as uv

#: numpy's type for each dtype's bits (bfloat16 through ml_dtypes)
BIT_TYPES = {
    "bool": np.bool_, "int8": np.int8, "uint8": np.uint8, "int16": np.int16, "uint16": np.uint16,
    "float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "int32": np.int32, "uint32": np.uint32,
    "float32": np.float32, "int64": np.int64, "uint64": np.uint64, "float64": np.float64,
}
BITCAST_PAIRS = [(s, t) for s in BIT_TYPES for t in BIT_TYPES
                 if s != t and np.dtype(BIT_TYPES[s]).itemsize == np.dtype(BIT_TYPES[t]).itemsize]
_UNSIGNED_OF_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def bit_pattern_source(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Random bits of type ``name`` (any pattern, NaNs and denormals included; a bool holds 0 or 1)."""
    if name == "bool":
        return rng.integers(0, 2, shape).astype(np.bool_)
    unsigned = _UNSIGNED_OF_SIZE[np.dtype(BIT_TYPES[name]).itemsize]
    return rng.integers(0, np.iinfo(unsigned).max, shape, dtype=unsigned, endpoint=True).view(BIT_TYPES[name])


def bit_pattern_tensor(values: np.ndarray, name: str) -> uv.Tensor:
    """A tensor of ``values`` (bfloat16 ones given as their exact float32 values)."""
    if name == "bfloat16":
        return uv.Tensor(values.astype(np.float32), dtype=uv.dtypes.bfloat16)
    return uv.Tensor(values)


def _nan_of(values: np.ndarray, name: str) -> np.ndarray:
    """Where ``values`` (of type ``name``) are NaN (nowhere for integer types)."""
    if not name.startswith(("float", "bfloat")):
        return np.zeros(values.shape, bool)
    return np.isnan(values.astype(np.float32))


def assert_same_bits(got: np.ndarray, source: np.ndarray, source_name: str, target_name: str,
                     what: str) -> None:
    """``got`` (the bitcast's result) holds ``source``'s bits as ``target_name``: a bool is True where
    the byte is not 0.  Where the source or the result is a NaN, a NaN is all that is asked (a half
    type held in float variables keeps no NaN payload: float16 on OpenCL without cl_khr_fp16)."""
    target = BIT_TYPES[target_name]
    got = np.asarray(got).astype(target) if target_name == "bfloat16" else np.asarray(got)
    assert got.shape == source.shape and got.dtype == np.dtype(target), f"{what}: {got.dtype}{got.shape}"
    if target_name == "bool":
        np.testing.assert_array_equal(got, source.view(np.uint8) != 0, err_msg=what)
        return
    if source_name == "bool":
        np.testing.assert_array_equal(got, source.astype(target), err_msg=what)
        return
    want = source.view(target)
    source_nan, want_nan = _nan_of(source, source_name), _nan_of(want, target_name)
    assert _nan_of(got[source_nan].view(source.dtype), source_name).all(), f"{what}: a NaN became a number"
    assert _nan_of(got[want_nan & ~source_nan], target_name).all(), f"{what}: a NaN's bits became a number"
    nan = source_nan | want_nan
    unsigned = _UNSIGNED_OF_SIZE[want.dtype.itemsize]
    mismatch = np.flatnonzero(got[~nan].view(unsigned) != want[~nan].view(unsigned))
    assert mismatch.size == 0, (f"{what}: bits {got[~nan].view(unsigned)[mismatch][:4]} where "
                                f"{want[~nan].view(unsigned)[mismatch][:4]} were wanted")
