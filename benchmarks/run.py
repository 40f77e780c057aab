"""Benchmark harness: runs ``benchmarks/bench_*.py``, prints a table, writes ``results.json``.

Usage::

    python benchmarks/run.py              # every bench_*.py
    python benchmarks/run.py core nnef    # only bench_core.py and bench_nnef.py (globs work: 'n*')
    python benchmarks/run.py --list       # the names that can be given
    python benchmarks/run.py -o out.json  # write the results elsewhere

A benchmark module ``bench_<name>.py`` defines ``run() -> list[dict]``; each dict is one row
(see ``ROW_FIELDS``). Build rows with ``row(...)`` and time callables with ``measure(...)``::

    from run import measure, row          # benchmarks/ is on sys.path while modules load

    def run():
        ours = measure(lambda: our_thing())
        peer = measure(lambda: their_thing())
        return [row("matmul 256", ours, peer="tinygrad", peer_s=peer, notes="C backend")]

A row with ``status: "skipped"`` (and no times) says in its notes why a case could not run here
(no GPU, a peer missing). A module may also define ``machine_info() -> dict``, called after
``run()``: what it learnt of the machine (a GPU's name and driver, say), written to results.json
under ``machine["modules"][name]`` and printed above the table.

A module that fails to import, raises in ``run()`` or returns malformed rows becomes one
``status: "error"`` row carrying the error; the other modules still run. The exit status is 1 when
any row is an error, else 0.
"""

from __future__ import annotations

import argparse
import fnmatch
import gc
import importlib.util
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
DEFAULT_OUT = BENCH_DIR / "results.json"

#: Fields of a result row. Times are seconds (a median per call); ``ratio`` is ours_s / peer_s,
#: so < 1 means uopviz is faster. ``peer`` is "" with ``peer_s``/``ratio`` None when a case has no
#: peer. ``benchmark`` is filled in by the harness from the module name when a row omits it.
ROW_FIELDS: dict[str, str] = {
    "benchmark": "module name without bench_ (e.g. 'core')",
    "case": "what was measured (e.g. 'matmul 256x256 float32')",
    "ours_s": "uopviz time in seconds (float)",
    "peer": "what we compare against (e.g. 'tinygrad 0.11', 'numpy'); '' if none",
    "peer_s": "peer time in seconds (float) or None",
    "ratio": "ours_s / peer_s (float) or None; < 1 means uopviz is faster",
    "notes": "free text: backend, sizes, caveats",
    "status": "'ok', 'skipped' (nothing measured; notes say why) or 'error'",
}


# --------------------------------------------------------------------------------------------
# helpers for benchmark modules
# --------------------------------------------------------------------------------------------
SETTLE_S = 0.25  # idle time before each measurement: thread pools of the previous one go to sleep
WARMUP_S = 0.2  # untimed calls for at least this long: pages mapped, clocks and caches warm


def settle() -> None:
    """Wait for the previous measurement's worker threads to stop spinning.  OpenBLAS and OpenMP
    threads busy-wait for a while after a call; measured: an OpenMP kernel timed right after numpy's
    gemm took 8 ms per call instead of 1.8 ms.  Every measurement, ours and the peers', starts so."""
    time.sleep(SETTLE_S)


def measure(fn: Callable[[], Any], *, repeat: int = 5, number: int | None = None, warmup: int = 1,
            min_time_s: float = 0.05) -> float:
    """Median seconds per call of ``fn()``.

    After :func:`settle`, ``warmup`` untimed calls come first (compilation, caches), continued
    until ``WARMUP_S`` has passed. Each of ``repeat`` samples times ``number`` back-to-back calls;
    when ``number`` is None it is chosen so a sample lasts at least ``min_time_s``. Garbage
    collection is off while sampling.
    """
    settle()
    started = time.perf_counter()
    for _ in range(warmup):
        fn()
    while time.perf_counter() - started < WARMUP_S:
        fn()
    if number is None:
        number = 1
        while True:
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            if time.perf_counter() - t0 >= min_time_s or number >= 1 << 20:
                break
            number *= 2
    samples = []
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeat):
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            samples.append((time.perf_counter() - t0) / number)
    finally:
        if gc_was_enabled:
            gc.enable()
    return statistics.median(samples)


def row(case: str, ours_s: float, *, peer: str = "", peer_s: float | None = None, notes: str = "",
        benchmark: str | None = None) -> dict[str, Any]:
    """One result row; ``ratio`` is computed from ``ours_s`` and ``peer_s``."""
    out: dict[str, Any] = {"case": case, "ours_s": float(ours_s), "peer": peer,
                           "peer_s": None if peer_s is None else float(peer_s), "notes": notes}
    if benchmark is not None:
        out["benchmark"] = benchmark
    return out


# --------------------------------------------------------------------------------------------
# harness
# --------------------------------------------------------------------------------------------
def discover(bench_dir: Path = BENCH_DIR) -> dict[str, Path]:
    """Benchmark name -> module path for every ``bench_<name>.py`` in ``bench_dir``, sorted."""
    return {p.stem.removeprefix("bench_"): p for p in sorted(bench_dir.glob("bench_*.py"))}


def select(available: dict[str, Path], patterns: Sequence[str]) -> dict[str, Path]:
    """The benchmarks whose name matches any of ``patterns`` (exact or glob); all when empty.

    Raises ValueError naming the pattern that matched nothing, and the names there are.
    """
    if not patterns:
        return dict(available)
    chosen: dict[str, Path] = {}
    for pattern in patterns:
        name = pattern.removeprefix("bench_")
        hits = [n for n in available if fnmatch.fnmatchcase(n, name)]
        if not hits:
            names = ", ".join(available) or "(none)"
            raise ValueError(f"no benchmark matches {pattern!r}; available: {names}")
        chosen.update({n: available[n] for n in hits})
    return {n: available[n] for n in available if n in chosen}


def _error_row(name: str, case: str, exc: BaseException) -> dict[str, Any]:
    """A row recording that benchmark ``name`` failed with ``exc``."""
    tb = "".join(traceback.format_exception(exc)).rstrip()
    return {"benchmark": name, "case": case, "ours_s": None, "peer": "", "peer_s": None, "ratio": None,
            "notes": f"{type(exc).__name__}: {exc}", "status": "error", "traceback": tb}


def _seconds(raw: dict[str, Any], key: str, *, optional: bool) -> float | None:
    """``raw[key]`` checked to be a finite number >= 0 (or None/missing when ``optional``)."""
    value = raw.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        allowed = "a finite number >= 0" + (" or None" if optional else "")
        raise ValueError(f"row {raw['case']!r}: {key} must be {allowed}, got {value!r}")
    return float(value)


def normalize(name: str, raw: Any) -> dict[str, Any]:
    """Check one row returned by module ``name`` and fill in benchmark, ratio and status.

    Raises TypeError/ValueError on a malformed row.
    """
    if not isinstance(raw, dict):
        raise TypeError(f"row is {type(raw).__name__}, not dict")
    unknown = set(raw) - set(ROW_FIELDS)
    if unknown:
        raise ValueError(f"unknown row fields {sorted(unknown)}; allowed: {sorted(ROW_FIELDS)}")
    if not isinstance(raw.get("case"), str) or not raw["case"]:
        raise ValueError("row needs a non-empty str 'case'")
    if raw.get("status") in ("error", "skipped"):  # one case failed or could not run (notes say why)
        if raw["status"] == "skipped" and not raw.get("notes"):
            raise ValueError(f"skipped row {raw['case']!r} needs notes saying why")
        return {"benchmark": raw.get("benchmark") or name, "case": raw["case"], "ours_s": None, "peer": "",
                "peer_s": None, "ratio": None, "notes": raw.get("notes") or "", "status": raw["status"]}
    ours = _seconds(raw, "ours_s", optional=False)
    peer_s = _seconds(raw, "peer_s", optional=True)
    ratio = raw.get("ratio")
    if ratio is None and peer_s:
        ratio = ours / peer_s
    return {"benchmark": raw.get("benchmark") or name, "case": raw["case"], "ours_s": ours,
            "peer": raw.get("peer") or "", "peer_s": peer_s,
            "ratio": None if ratio is None else float(ratio), "notes": raw.get("notes") or "",
            "status": "ok"}


def run_module(name: str, path: Path, info: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Import ``path`` and call its ``run()``; any failure becomes a single error row.  When the
    module defines ``machine_info()``, its dict goes into ``info[name]`` (a failure of it is recorded
    there as text, and costs no rows)."""
    try:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
        assert spec is not None and spec.loader is not None, f"cannot load {path}"
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    except BaseException as exc:  # a broken module (even a SystemExit) must not stop the others
        if isinstance(exc, KeyboardInterrupt):
            raise
        return [_error_row(name, "(import)", exc)]
    if not callable(getattr(module, "run", None)):
        return [_error_row(name, "(import)", AttributeError(f"{path.name} defines no run()"))]
    try:
        raw_rows = module.run()
        if not isinstance(raw_rows, list | tuple):
            raise TypeError(f"run() returned {type(raw_rows).__name__}, not a list of dicts")
        rows = [normalize(name, r) for r in raw_rows]
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        return [_error_row(name, "(run)", exc)]
    if info is not None and callable(getattr(module, "machine_info", None)):
        try:
            info[name] = module.machine_info()
        except Exception as exc:  # noqa: BLE001 - the rows stand without the module's machine notes
            info[name] = f"machine_info() failed: {type(exc).__name__}: {exc}"
    return rows


def _version(module: str) -> str | None:
    """Installed version of distribution ``module``, or None."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(module)
    except PackageNotFoundError:
        return None


def _git_commit() -> str | None:
    """HEAD of the checkout (with '-dirty' when there are uncommitted changes), or None."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return head.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.TimeoutExpired):
        return None


#: Thread-count variables of the BLAS / OpenMP runtimes that numpy, peers and kernels may use.
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")

#: The peers' own code paths per uopviz target, so that a lesser target is compared with peers held
#: to the same instructions (numpy's OpenBLAS and its SIMD loops pick AVX-512 on an AVX-512 host by
#: themselves, which would compare AVX2 code of ours with AVX-512 code of theirs).  OpenBLAS reads
#: OPENBLAS_CORETYPE (a DYNAMIC_ARCH build, as numpy's wheels are); numpy reads
#: NPY_DISABLE_CPU_FEATURES, which may only name features it dispatches and the host has.
OPENBLAS_CORETYPES = {"x86-64-v3": "Haswell", "x86-64-v2": "Nehalem"}
NUMPY_FEATURES_ALLOWED = {
    "x86-64-v2": {"SSE", "SSE2", "SSE3", "SSSE3", "SSE41", "SSE42", "POPCNT", "X86_V2"},
    "x86-64-v3": {"SSE", "SSE2", "SSE3", "SSSE3", "SSE41", "SSE42", "POPCNT", "X86_V2",
                  "AVX", "F16C", "FMA3", "AVX2", "X86_V3"},
}
PEER_ISA_VARS = ("OPENBLAS_CORETYPE", "NPY_DISABLE_CPU_FEATURES")


def peer_isa_environment() -> dict[str, str]:
    """The environment that holds numpy (its SIMD loops and OpenBLAS) to the ISA level of uopviz's
    target (``UOPVIZ_TARGET``); empty for native and x86-64-v4.  Both the level and numpy's
    dispatched features are read in a child process: importing uopviz imports numpy, and numpy's
    features can only be switched off before numpy is imported."""
    probe = ("from numpy._core._multiarray_umath import __cpu_dispatch__ as d, __cpu_features__ as f;"
             "from uopviz.backends.target import cpu_target;"
             "print(cpu_target().level, *(x for x in d if f.get(x)))")
    try:
        level, *found = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                                       timeout=120, check=True, cwd=REPO_ROOT).stdout.split()
    except (subprocess.SubprocessError, OSError, ValueError) as error:
        print(f"peers left at the host's ISA (probe failed: {error})", file=sys.stderr)
        return {}
    if level not in NUMPY_FEATURES_ALLOWED:
        return {}
    environment = {"OPENBLAS_CORETYPE": OPENBLAS_CORETYPES[level]}
    disabled = [feature for feature in found if feature not in NUMPY_FEATURES_ALLOWED[level]]
    if disabled:
        environment["NPY_DISABLE_CPU_FEATURES"] = " ".join(disabled)
    return environment


def _compilers() -> dict[str, Any]:
    """The code generators behind each CPU backend: the C compiler and its version, LLVM's version,
    the OpenCL device and driver."""
    found: dict[str, Any] = {}
    try:
        from uopviz.backends.c import compiler_version, find_c_compiler

        compiler = find_c_compiler()
        found["c"] = f"{compiler}: {compiler_version(compiler)}" if compiler else None
    except Exception as error:  # noqa: BLE001 - a missing backend is recorded, not fatal
        found["c"] = f"unavailable: {error}"
    try:
        import llvmlite.binding as llvm

        found["llvm"] = "LLVM " + ".".join(map(str, llvm.llvm_version_info))
    except Exception as error:  # noqa: BLE001
        found["llvm"] = f"unavailable: {error}"
    try:
        from uopviz.backends import get

        opencl = get("opencl")
        available = opencl.available()
        found["opencl"] = opencl.device if available else f"unavailable: {opencl.unavailable_reason()}"
        found["pocl_cpu"] = os.environ.get("POCL_LLVM_CPU_NAME", "pocl's default (host CPU)")
    except Exception as error:  # noqa: BLE001
        found["opencl"] = f"unavailable: {error}"
    return found


def target_info() -> dict[str, Any]:
    """uopviz's CPU target profile: what the CPU backends generated code for in this run."""
    from uopviz.backends.target import cpu_target, host_cpu

    return {**cpu_target().to_json(), "host_level": host_cpu().level,
            "host_flags": sorted(host_cpu().features)}


def machine_info() -> dict[str, Any]:
    """Where the numbers were taken: CPU, its flags and uopviz's target profile, core counts, load,
    thread settings, compilers and package versions."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    target = target_info()
    return {
        "target": target,
        "compilers": _compilers(),
        "cpu": target["host_model"],
        "cpu_count": os.cpu_count(),
        "cpu_usable": usable,
        "load_avg_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        "threads_env": {v: os.environ[v] for v in THREAD_VARS if v in os.environ},
        "peer_isa_env": {v: os.environ[v] for v in PEER_ISA_VARS if v in os.environ},
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": _version("numpy"),
        "llvmlite": _version("llvmlite"),
        "pyopencl": _version("pyopencl"),
        "tinygrad": _version("tinygrad"),
        "uopviz": _version("uopviz"),
        "git_commit": _git_commit(),
    }


def machine_header(machine: dict[str, Any]) -> str:
    """The lines printed above the table: the CPU, the target code was generated for, compilers."""
    target, compilers = machine["target"], machine["compilers"]
    return "\n".join([
        f"CPU: {machine['cpu']} ({machine['cpu_usable']} usable cores, host level {target['host_level']}; "
        f"load {machine['load_avg_1m']})",
        f"target: {target['name']} = {target['level']}: {target['vector_registers']} x "
        f"{target['vector_bits']}-bit registers, FMA {target['fma']}; key {target['key']}",
        f"compilers: C {compilers.get('c')}; {compilers.get('llvm')}; OpenCL {compilers.get('opencl')}",
        "peers: " + (" ".join(f"{k}={v!r}" for k, v in machine.get("peer_isa_env", {}).items())
                     or "at the host's own ISA"),
        *(f"{name}: {_info_line(info)}" for name, info in machine.get("modules", {}).items()),
        "",
    ])


def _info_line(info: Any) -> str:
    """A module's ``machine_info()`` on one line: ``key: value; ...`` (nested values as JSON)."""
    if not isinstance(info, dict):
        return str(info)
    return "; ".join(f"{key}: {value if isinstance(value, str) else json.dumps(value)}"
                     for key, value in info.items())


def _fmt_time(seconds: float | None) -> str:
    """Seconds in a readable unit (ns/µs/ms/s), or '-'."""
    if seconds is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """The rows as an aligned text table; error rows say ERROR and carry the message in notes."""
    header = ("benchmark", "case", "ours", "peer", "peer time", "ours/peer", "notes")
    body = []
    for r in rows:
        if r["status"] in ("error", "skipped"):
            body.append((r["benchmark"], r["case"], "ERROR" if r["status"] == "error" else "skipped",
                         "", "", "", r["notes"]))
            continue
        ratio = "-" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        body.append((r["benchmark"], r["case"], _fmt_time(r["ours_s"]), r["peer"] or "-",
                     _fmt_time(r["peer_s"]), ratio, r["notes"]))
    widths = [max(len(str(line[i])) for line in [header, *body]) for i in range(len(header) - 1)]
    right = {2, 4, 5}  # numeric columns

    def fmt(line: Sequence[str]) -> str:
        cells = [str(c).rjust(w) if i in right else str(c).ljust(w)
                 for i, (c, w) in enumerate(zip(line[:-1], widths))]
        return ("  ".join(cells) + "  " + str(line[-1])).rstrip()

    sep = "  ".join("-" * w for w in widths) + "  -----"
    return "\n".join([fmt(header), sep, *(fmt(line) for line in body)])


def main(argv: Sequence[str] | None = None) -> int:
    """Run the selected benchmarks, print the table, write the JSON; 1 if any errored."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="benchmarks to run (bench_<name>.py; globs allowed)")
    parser.add_argument("-o", "--out", type=Path, default=DEFAULT_OUT, help="JSON output path")
    parser.add_argument("--list", action="store_true", help="list the available benchmarks and exit")
    parser.add_argument("--target", default=None,
                        help="uopviz's CPU target for every module: native, x86-64-v4, x86-64-v3 or "
                             "x86-64-v2 (sets UOPVIZ_TARGET; default: leave as is)")
    parser.add_argument("--threads", type=int, default=None,
                        help="set OMP/OPENBLAS/MKL_NUM_THREADS for every module (default: leave as is)")
    args = parser.parse_args(argv)
    if args.threads is not None:  # before any module imports numpy or a peer
        os.environ.update({v: str(args.threads) for v in THREAD_VARS})
    if args.target is not None:  # before any module makes a backend (pocl reads it once)
        os.environ["UOPVIZ_TARGET"] = args.target
        # before any module imports numpy: the peers run at the target's ISA level too
        os.environ.update(peer_isa_environment())

    available = discover()
    if args.list:
        print("\n".join(available) or "(no benchmarks/bench_*.py yet)")
        return 0
    try:
        chosen = select(available, args.names)
    except ValueError as exc:
        parser.error(str(exc))
    if not chosen:
        print("no benchmarks found (benchmarks/bench_*.py)")

    sys.path.insert(0, str(BENCH_DIR))  # so modules can `from run import measure, row`
    sys.modules.setdefault("run", sys.modules[__name__])
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    module_info: dict[str, Any] = {}
    for name, path in chosen.items():
        print(f"running {name} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        module_rows = run_module(name, path, module_info)
        print(f"  {name}: {len(module_rows)} row(s) in {time.perf_counter() - t0:.1f}s", file=sys.stderr)
        rows.extend(module_rows)

    machine = machine_info()
    if module_info:
        machine["modules"] = module_info
    if rows:
        print(machine_header(machine))
        print(format_table(rows))
    results = {
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine,
        "selected": list(chosen),
        "wall_s": round(time.perf_counter() - started, 3),
        "schema": ROW_FIELDS,
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    errors = [r for r in rows if r["status"] == "error"]
    print(f"\n{len(rows)} row(s), {len(errors)} error(s); wrote {args.out}")
    for r in errors:
        print(f"\n--- {r['benchmark']} {r['case']} ---\n{r['traceback']}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
