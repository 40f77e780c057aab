"""Maximum ulp error of every transcendental and special op, per float dtype and backend.

``make accuracy`` runs this and rewrites the table of ``docs/accuracy.md`` (between the
``accuracy-table`` markers).  Each op is run through the public Tensor API (``uv.compile`` on the
backend), on inputs covering its whole domain:

* float16 and bfloat16: every bit pattern (65 536 values, the non-finite ones included);
* float32: random bit patterns (every exponent alike, denormals to the largest finite), a dense
  uniform sample of the range where the op is interesting, and the hard cases: ±0, ±inf, nan,
  the smallest denormal, the largest float, the floats nearest k·π/2 and their neighbours;
* float64: the same kinds, fewer of them (the reference is slower).

The reference is exact arithmetic rounded late: numpy float64 on the (exactly converted) input
for the 16- and 32-bit types, mpmath at 128 bits for float64.  The error of a result ``y`` against
the reference ``v`` is ``|y - v| / ulp(v)`` with ``ulp`` the spacing of the dtype at ``v`` (at the
denormal spacing below the normal range): a correctly rounded result is within 0.5.  An inf or nan
where the reference has the same is 0; any other mismatch of the special values is inf.

Usage: ``python scripts/accuracy.py [--write docs/accuracy.md] [--quick] [--backends c,llvm]``.
Each backend and dtype runs in a child process, so a crash (a backend bug) is reported as such.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

DTYPES = ("float16", "bfloat16", "float32", "float64")
BACKENDS = ("python", "c", "llvm", "opencl")
PRECISION = {
    "float16": (11, -14, 65504.0),
    "bfloat16": (8, -126, 3.3895313892515355e38),
    "float32": (24, -126, 3.4028234663852886e38),
    "float64": (53, -1022, 1.7976931348623157e308),
}
TABLE_START, TABLE_END = "<!-- accuracy-table:start -->", "<!-- accuracy-table:end -->"


@dataclass(frozen=True)
class Op:
    """One measured op: how uopviz computes it, how numpy / mpmath compute the exact value, the range
    sampled densely, the goal bound (ulp) and whether it is a basic op (goal 1 ulp)."""

    name: str
    ours: Callable[..., Any]
    numpy_reference: Callable[..., Any]
    mpmath_reference: Callable[..., Any]
    dense: tuple[float, float]
    basic: bool = False
    binary: bool = False


def _mp():
    import mpmath

    return mpmath


def _mpmath_power(mpmath, a, b):
    """``a**b`` as numpy defines it for real numbers (nan for a negative base and a fractional
    exponent; ``0**-b`` is inf)."""
    if b == 0:
        return mpmath.mpf(1)
    if a == 0:
        return mpmath.mpf(0) if b > 0 else mpmath.inf
    if a < 0 and b != mpmath.floor(b):
        return mpmath.nan
    return mpmath.power(a, b)


def _sigmoid_numpy(x):
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


OPS = (
    Op(
        "sqrt", lambda t: t.sqrt(), np.sqrt, lambda m, x: m.sqrt(x) if x >= 0 else m.nan, (0, 1e4), basic=True
    ),
    Op(
        "reciprocal",
        lambda t: t.reciprocal(),
        lambda x: 1.0 / x,
        lambda m, x: 1 / x if x else m.inf,
        (-1e4, 1e4),
        basic=True,
    ),
    Op(
        "rsqrt",
        lambda t: t.rsqrt(),
        lambda x: 1.0 / np.sqrt(x),
        lambda m, x: 1 / m.sqrt(x) if x > 0 else (m.inf if x == 0 else m.nan),
        (0, 1e4),
    ),
    Op("exp2", lambda t: t.exp2(), np.exp2, lambda m, x: m.power(2, x), (-150, 130)),
    Op("exp", lambda t: t.exp(), np.exp, lambda m, x: m.exp(x), (-104, 90)),
    Op(
        "log2",
        lambda t: t.log2(),
        np.log2,
        lambda m, x: m.log(x, 2) if x > 0 else (-m.inf if x == 0 else m.nan),
        (0, 1e4),
    ),
    Op(
        "log",
        lambda t: t.log(),
        np.log,
        lambda m, x: m.log(x) if x > 0 else (-m.inf if x == 0 else m.nan),
        (0, 1e4),
    ),
    Op("sin", lambda t: t.sin(), np.sin, lambda m, x: m.sin(x), (-1e4, 1e4)),
    Op("cos", lambda t: t.cos(), np.cos, lambda m, x: m.cos(x), (-1e4, 1e4)),
    Op("tan", lambda t: t.tan(), np.tan, lambda m, x: m.tan(x), (-1e4, 1e4)),
    Op("tanh", lambda t: t.tanh(), np.tanh, lambda m, x: m.tanh(x), (-10, 10)),
    Op("sigmoid", lambda t: t.sigmoid(), _sigmoid_numpy, lambda m, x: 1 / (1 + m.exp(-x)), (-20, 20)),
    Op("pow", lambda a, b: a**b, np.power, lambda m, a, b: _mpmath_power(m, a, b), (0, 100), binary=True),
)
OPS_BY_NAME = {op.name: op for op in OPS}


# ---------------------------------------------------------------------------------------------
# inputs


def _storage(dtype: str) -> np.dtype:
    return np.dtype(np.float32 if dtype == "bfloat16" else dtype)


def _every_16_bit(dtype: str) -> np.ndarray:
    bits = np.arange(2**16, dtype=np.uint32)
    if dtype == "float16":
        return bits.astype(np.uint16).view(np.float16)
    return (bits << 16).view(np.float32)


def hard_cases(dtype: str) -> np.ndarray:
    """±0, ±inf, nan, the smallest denormal and the largest finite float, and the floats nearest
    k·π/2 (with their neighbours) for k spread up to where floats are further apart than π/2."""
    npd = _storage(dtype)
    precision, min_exponent, largest = PRECISION[dtype]
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 2.0 ** (min_exponent - precision + 1), largest, -largest]
    k = np.unique(np.round(2.0 ** np.linspace(0, precision, 400)).astype(np.int64))
    with np.errstate(over="ignore"):
        centres = (k.astype(np.longdouble) * (np.longdouble(np.pi) / 2)).astype(npd)
    near = [centres, np.nextafter(centres, np.inf), np.nextafter(centres, -np.inf)]
    values = np.concatenate([np.array(special, npd), *near])
    return np.concatenate([values, -values])


def inputs(op: Op, dtype: str, count: int, rng: np.random.Generator) -> np.ndarray:
    """The inputs of ``op`` in ``dtype`` (see the module docstring)."""
    if dtype in ("float16", "bfloat16"):
        return _every_16_bit(dtype)
    npd = np.dtype(dtype)
    unsigned = np.uint32 if npd.itemsize == 4 else np.uint64
    random_bits = rng.integers(0, np.iinfo(unsigned).max, count, dtype=unsigned, endpoint=True).view(npd)
    low, high = op.dense
    dense = rng.uniform(low, high, count).astype(npd)
    return np.concatenate([random_bits, dense, hard_cases(dtype)])


def exponents(dtype: str, base: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The second operand of pow: exponents spread so that ``base**b`` spans the finite range."""
    npd = _storage(dtype)
    precision, min_exponent, largest = PRECISION[dtype]
    with np.errstate(divide="ignore", invalid="ignore"):
        span = np.log2(largest) / np.maximum(np.abs(np.log2(np.abs(base.astype(np.float64)))), 1e-3)
    exponent = rng.uniform(-1, 1, base.shape) * np.minimum(span, 64)
    return np.nan_to_num(exponent, nan=1.0).astype(npd)


# ---------------------------------------------------------------------------------------------
# references and errors


def reference(op: Op, dtype: str, *args: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The exact values as (high, low) float64 pairs: numpy float64 for the narrow types (its
    error is far below their ulp; low is 0), mpmath at 128 bits for float64."""
    with np.errstate(invalid="ignore"):  # (random bit patterns include signalling nans)
        wide = [a.astype(np.float64) for a in args]
    if dtype != "float64":
        with np.errstate(all="ignore"):
            high = np.asarray(op.numpy_reference(*wide), dtype=np.float64)
        return high, np.zeros_like(high)
    mpmath = _mp()
    mpmath.mp.prec = 128
    high, low = np.empty(len(wide[0])), np.empty(len(wide[0]))
    for i, values in enumerate(zip(*wide, strict=True)):
        if not all(math.isfinite(v) and v != 0 for v in values):  # IEEE's answers for ±0, ±inf and nan
            with np.errstate(all="ignore"):
                high[i], low[i] = float(op.numpy_reference(*(np.float64(v) for v in values))), 0.0
            continue
        try:
            exact = op.mpmath_reference(mpmath, *(mpmath.mpf(v) for v in values))
        except (ZeroDivisionError, ValueError, OverflowError):
            exact = mpmath.nan
        if isinstance(exact, mpmath.mpc) or mpmath.isnan(exact):
            high[i], low[i] = np.nan, 0.0
            continue
        first = float(exact) if abs(exact) < mpmath.ldexp(1, 1024) else math.copysign(math.inf, exact)
        high[i] = first
        low[i] = float(exact - first) if math.isfinite(first) else 0.0
    return high, low


def ulp_errors(got: np.ndarray, high: np.ndarray, low: np.ndarray, dtype: str) -> np.ndarray:
    """``|got - exact| / ulp(exact)`` in ``dtype`` (see the module docstring)."""
    precision, min_exponent, largest = PRECISION[dtype]
    got = got.astype(np.float64)
    with np.errstate(all="ignore"):
        magnitude = np.abs(high)
        exponent = np.floor(np.log2(np.where(magnitude > 0, magnitude, 1.0)))
        ulp = np.exp2(np.maximum(exponent, min_exponent) - precision + 1)
        error = np.abs((got - high) - low) / ulp
        # past the largest finite value (by half an ulp or more) the correctly rounded result is inf
        overflow = magnitude >= largest + np.exp2(np.floor(np.log2(largest)) - precision)
        expected_inf = np.isinf(high) | overflow
    same_special = (np.isnan(got) & np.isnan(high)) | (
        expected_inf & np.isinf(got) & (np.sign(got) == np.sign(high))
    )
    mismatch = np.isnan(got) | np.isnan(high) | expected_inf | np.isinf(got)
    return np.where(same_special, 0.0, np.where(mismatch, np.inf, error))


# ---------------------------------------------------------------------------------------------
# running


def measure(
    op: Op,
    dtype: str,
    backend: str,
    values: np.ndarray,
    second: np.ndarray | None,
    expected: tuple[np.ndarray, np.ndarray],
) -> dict:
    """The worst error of ``op`` over ``values`` (and ``second``) on ``backend``."""
    import uopviz as uv

    operands = [uv.Tensor(values, dtype=dtype)]
    if second is not None:
        operands.append(uv.Tensor(second, dtype=dtype))
    with np.errstate(invalid="ignore"):  # (signalling nans among the results)
        got = np.asarray(uv.compile([op.ours(*operands)], backend=backend).run()[0], dtype=np.float64)
    errors = ulp_errors(got, *expected, dtype)
    worst = int(np.argmax(errors))
    where = (
        repr(float(values[worst]))
        if second is None
        else f"{float(values[worst])!r} ** {float(second[worst])!r}"
    )
    return {
        "op": op.name,
        "dtype": dtype,
        "backend": backend,
        "max_ulp": float(errors[worst]),
        "mean_ulp": float(np.mean(errors[np.isfinite(errors)])) if np.isfinite(errors).any() else math.inf,
        "at": where,
        "got": float(got[worst]),
        "count": int(values.size),
    }


def _cases(dtype: str, quick: bool) -> list[tuple[Op, np.ndarray, np.ndarray | None]]:
    rng = np.random.default_rng(14)
    count = {"float32": 4000 if quick else 200_000, "float64": 1000 if quick else 20_000}.get(dtype, 0)
    cases = []
    for op in OPS:
        values = inputs(op, dtype, count, rng)
        if quick and dtype in ("float16", "bfloat16"):
            values = values[rng.permutation(values.size)[:4000]]
        second = exponents(dtype, values, rng) if op.binary else None
        cases.append((op, values, second))
    return cases


def cached_reference(op: Op, dtype: str, quick: bool, *args: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`reference`, kept in the temporary folder between the runs of one invocation (the
    inputs are the same for every backend; mpmath is the slow part)."""
    folder = Path(tempfile.gettempdir()) / "uopviz-accuracy"
    folder.mkdir(exist_ok=True)
    key = hashlib.sha256(b"".join(np.ascontiguousarray(a).tobytes() for a in args)).hexdigest()[:16]
    path = folder / f"{op.name}-{dtype}-{'quick' if quick else 'full'}-{key}.npz"
    if path.exists():
        stored = np.load(path)
        return stored["high"], stored["low"]
    high, low = reference(op, dtype, *args)
    np.savez(path, high=high, low=low)
    return high, low


def run_one(backend: str, dtype: str, quick: bool) -> list[dict]:
    """Every op in ``dtype`` on ``backend`` (in this process)."""
    rows = []
    for op, values, second in _cases(dtype, quick):
        expected = cached_reference(op, dtype, quick, *([values] if second is None else [values, second]))
        try:
            rows.append(measure(op, dtype, backend, values, second, expected))
        except Exception as error:  # noqa: BLE001 - a backend that cannot run this op: reported in the table
            rows.append(
                {
                    "op": op.name,
                    "dtype": dtype,
                    "backend": backend,
                    "max_ulp": math.inf,
                    "at": f"error: {type(error).__name__}: {str(error)[:80]}",
                    "count": 0,
                }
            )
    return rows


def goal(op: Op, dtype: str) -> float:
    """The issue's goal: 1 ulp for basic ops; 2 (float32, float16, bfloat16) or 4 (float64) ulp else."""
    if op.basic:
        return 1.0
    return 4.0 if dtype == "float64" else 2.0


def run_all(backends: list[str], dtypes: list[str], quick: bool) -> list[dict]:
    """Each backend and dtype in a child process (a crash is a row, not the end of the run)."""
    rows: list[dict] = []
    for backend in backends:
        for dtype in dtypes:
            command = [sys.executable, __file__, "--one", backend, dtype] + (["--quick"] if quick else [])
            done = subprocess.run(command, capture_output=True, text=True)
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            if done.returncode != 0 or not lines:
                reason = f"crashed (exit {done.returncode})" if done.returncode else "no output"
                rows += [
                    {
                        "op": op.name,
                        "dtype": dtype,
                        "backend": backend,
                        "max_ulp": math.inf,
                        "at": reason,
                        "count": 0,
                    }
                    for op in OPS
                ]
                print(f"{backend} {dtype}: {reason} {done.stderr[-300:]}", file=sys.stderr)
                continue
            rows += [json.loads(line) for line in lines]
            print(f"{backend} {dtype}: done", file=sys.stderr)
    return rows


def markdown(rows: list[dict]) -> str:
    """The table: one line per op and dtype, one column per backend (max ulp, and where)."""
    backends = list(dict.fromkeys(row["backend"] for row in rows))
    by_key = {(row["op"], row["dtype"], row["backend"]): row for row in rows}
    lines = ["| op | dtype | goal | " + " | ".join(backends) + " |", "|---|---|---|" + "---|" * len(backends)]
    for op in OPS:
        for dtype in DTYPES:
            cells = []
            for backend in backends:
                row = by_key.get((op.name, dtype, backend))
                if row is None:
                    cells.append("—")
                    continue
                value = row["max_ulp"]
                shown = "inf" if math.isinf(value) else f"{value:.3g}"
                mark = "" if value <= goal(op, dtype) else " ✗"
                cells.append(f"{shown}{mark} at `{row['at']}`")
            lines.append(f"| {op.name} | {dtype} | {goal(op, dtype):g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write(path: Path, table: str) -> None:
    """Put ``table`` between the markers of ``path``."""
    text = path.read_text()
    start, end = text.index(TABLE_START) + len(TABLE_START), text.index(TABLE_END)
    path.write_text(text[:start] + "\n" + table + "\n" + text[end:])


def main() -> None:
    """Command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", nargs=2, metavar=("BACKEND", "DTYPE"), help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="a few thousand inputs per op (a smoke run)")
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument("--write", type=Path, help="rewrite the table in this markdown file")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = parser.parse_args()
    if args.one:
        for row in run_one(*args.one, args.quick):
            print(json.dumps(row), flush=True)
        return
    from uopviz.backends import get

    backends = [b for b in args.backends.split(",") if get(b).available()]
    rows = run_all(backends, args.dtypes.split(","), args.quick)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    table = markdown(rows)
    if args.write:
        write(args.write, table)
    print(table)


if __name__ == "__main__":
    main()
