"""The C toolchain of the CPU backends: which compiler there is, its version (part of every cache
key), whether its OpenMP works, and the flags every C kernel is built with."""

from __future__ import annotations

import ctypes
import functools
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

#: libgomp's spin-wait before its threads sleep (``GOMP_SPINCOUNT``, in iterations). Its default
#: (300,000) keeps a THREAD kernel's threads spinning for their partner's time slice when another
#: process holds a core; too short a spin lets them sleep between the kernels of one program.
#: Measured (2 cores, AVX-512, 2026-11-26; one core busy / quiet): ResNet-50 on C, default
#: 207 / 50.8 ms, 100,000 184 ms, 20,000 124 ms (ORT 83 ms in that run), 1,000 88–97 / 49.6–54.3 ms;
#: softmax 1024² on C quiet: default 788 µs, 20,000 802 µs, 1,000 960 µs (layernorm 337, 333, 478).
OPENMP_SPIN_COUNT = "20000"


def configure_openmp_runtime() -> None:
    """Give libgomp a short spin before its threads sleep, unless the user set ``GOMP_SPINCOUNT``
    (or ``OMP_WAIT_POLICY``) themselves.  libgomp reads it once, when it is first loaded: the C
    backend's first kernel or its OpenMP probe, the LLVM backend's libgomp."""
    if "GOMP_SPINCOUNT" not in os.environ and "OMP_WAIT_POLICY" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = OPENMP_SPIN_COUNT


configure_openmp_runtime()  # before any module of the CPU backends loads libgomp


@functools.cache
def find_c_compiler() -> str | None:
    """gcc, else clang, else cc (``$UOPVIZ_CC`` overrides); None when there is none."""
    override = os.environ.get("UOPVIZ_CC")
    if override:
        return shutil.which(override)
    for candidate in ("gcc", "clang", "cc"):
        found = shutil.which(candidate)
        if found:
            return found
    return None


@functools.cache
def compiler_version(compiler: str) -> str:
    """The first line of ``compiler --version`` (part of the cache key)."""
    return _probed(compiler)["version"]


@functools.cache
def openmp_works(compiler: str) -> str | None:
    """None when ``compiler -fopenmp`` builds and runs a parallel loop, else why not."""
    return _probed(compiler)["openmp"]


def _probed(compiler: str) -> dict[str, Any]:
    """The compiler's version and whether its OpenMP works, kept in the persistent cache by the
    compiler's resolved path, size and modification time: every process that compiles a C kernel
    or loads one from the caches asked both (a gcc build and a run of ``gcc --version``, 70 ms of a
    warm start)."""
    from uopviz.backends.cache import cached_file, content_key, replace_atomically

    try:
        status = os.stat(os.path.realpath(compiler))
        identity = f"{os.path.realpath(compiler)}|{status.st_size}|{status.st_mtime_ns}"
    except OSError:
        return {"version": _version(compiler), "openmp": _openmp_probe(compiler)}

    def write(path: Path) -> None:
        path.write_text(json.dumps({"version": _version(compiler), "openmp": _openmp_probe(compiler)}))

    path, _ = cached_file("toolchain", content_key("probe 1", identity), ".json", write)
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        found = None  # a damaged entry: probed again and written again below
    if isinstance(found, dict) and set(found) == {"version", "openmp"}:
        return found
    replace_atomically(path, write)
    return json.loads(path.read_text())


def _version(compiler: str) -> str:
    out = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30)
    return out.stdout.splitlines()[0] if out.stdout else compiler


def _openmp_probe(compiler: str) -> str | None:
    import tempfile

    code = (
        "#include <omp.h>\nint count(void){int s=0;\n#pragma omp parallel for reduction(+:s)\n"
        "for(int i=0;i<64;i++)s+=i;\nreturn s + 0*omp_get_max_threads();}\n"
    )
    with tempfile.TemporaryDirectory() as folder:
        library = Path(folder) / "probe.so"
        result = subprocess.run(
            [compiler, "-O1", "-shared", "-fPIC", "-fopenmp", "-x", "c", "-", "-o", str(library)],
            input=code,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if result.returncode != 0:
            return f"{compiler} -fopenmp failed: {result.stderr.strip()[:300]}"
        try:
            value = ctypes.CDLL(str(library)).count()
        except OSError as error:
            return f"the OpenMP probe library does not load: {error}"
        return None if value == 2016 else f"the OpenMP probe computed {value}, not 2016"


#: the flags of every C kernel; the ISA flags (``-march=...``) come from the CPU target profile
C_FLAGS = ("-O3", "-shared", "-fPIC", "-fno-math-errno", "-std=gnu11")
#: GCC 12.2 at -O3 -march=native vectorises a nested sum of gated terms wrongly (two loops over r, c
#: adding ``(c < hi1) & (c >= lo1) & ((r < hi0) & (r >= lo0)) ? x[r*9+c] : 0``: 6 instead of 9 for a
#: 3x3 window of ones; found by the NNEF avg_roi_pool tests).  Without loop if-conversion it is
#: right; the kernels' own vectors (UPCAST lanes) do not depend on that pass.
GCC_WORKAROUND_FLAG = "-fno-tree-loop-if-convert"


