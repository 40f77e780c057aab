"""The CPU target profile: what code the CPU backends generate, compile and tune for.

One :class:`CPUTarget` says which instruction set the C, LLVM and OpenCL (CPU device) backends
generate code for: its ISA level and features, the SIMD registers the heuristics plan register
tiles for, whether FMA and native float16/bfloat16 conversions exist, how many cores run
THREAD loops and how large each core's L2 cache is (the heuristic's loop order).  Everything that
depends on the CPU reads it from here — the heuristic's tile sizes, BEAM's records, the C
compiler's ``-march``, LLVM's target machine, the compile caches' keys — never from constants
that happen to fit the machine that wrote the code.

The target is chosen, in this order, by :func:`set_target` (or the :func:`using_target` context),
by the environment variable ``UOPVIZ_TARGET``, else ``native`` (the host as detected).  Names:

==============  ===================================================================================
``native``      the host CPU: its own feature list (``-march=native``, LLVM's host CPU)
``x86-64-v4``   AVX-512 (F, BW, CD, DQ, VL): 32 registers of 64 bytes, FMA
``x86-64-v3``   AVX2 + FMA + F16C (Haswell, Zen 1 and later): 16 registers of 32 bytes
``x86-64-v2``   SSE4.2 + POPCNT (Nehalem and later): 16 registers of 16 bytes, no FMA, no F16C
==============  ===================================================================================

A named level generates exactly the code a host of that level would get, on any host that has
at least its features; on a host that lacks them the code still renders and compiles, and
running it raises :class:`~uopviz.backends.base.BackendUnavailable` instead of SIGILL.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import platform
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

#: the environment variable that picks the target when :func:`set_target` was not called
TARGET_ENVIRONMENT_VARIABLE = "UOPVIZ_TARGET"

# Feature names are Linux's /proc/cpuinfo spellings.  Each level adds to the one below it
# (the x86-64 psABI's micro-architecture levels).
_LEVEL_FEATURES: dict[str, tuple[str, ...]] = {
    "x86-64-v2": ("pni", "ssse3", "sse4_1", "sse4_2", "popcnt", "cx16", "lahf_lm"),
    "x86-64-v3": ("avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"),
    "x86-64-v4": ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"),
}
LEVELS: tuple[str, ...] = tuple(_LEVEL_FEATURES)

#: the L2 cache a core is assumed to have where the system does not say (x86-64 cores since 2019
#: have 512 KiB to 2 MiB)
DEFAULT_L2_BYTES = 1 << 20
#: the L1 data cache a core is assumed to have where the system does not say (32 KiB on x86-64
#: cores from 2008 to 2021, 48 KiB on newer ones)
DEFAULT_L1_BYTES = 32 << 10

# /proc/cpuinfo flag → LLVM feature name, for the flags that change generated code
_LLVM_FEATURE_NAMES = {
    "pni": "sse3", "ssse3": "ssse3", "sse4_1": "sse4.1", "sse4_2": "sse4.2", "popcnt": "popcnt",
    "cx16": "cx16", "lahf_lm": "sahf", "avx": "avx", "avx2": "avx2", "bmi1": "bmi", "bmi2": "bmi2",
    "f16c": "f16c", "fma": "fma", "abm": "lzcnt", "movbe": "movbe", "xsave": "xsave",
    "avx512f": "avx512f", "avx512bw": "avx512bw", "avx512cd": "avx512cd", "avx512dq": "avx512dq",
    "avx512vl": "avx512vl", "avx512_bf16": "avx512bf16", "avx512_fp16": "avx512fp16",
    "avx512vnni": "avx512vnni", "avx512ifma": "avx512ifma", "avx512vbmi": "avx512vbmi",
}


def level_features(level: str) -> frozenset[str]:
    """Every feature an x86-64 micro-architecture level guarantees (its own and the lower ones')."""
    if level not in _LEVEL_FEATURES:
        raise ValueError(f"unknown x86-64 level {level!r}; known: {', '.join(LEVELS)}")
    features: set[str] = {"sse", "sse2"}
    for name in LEVELS[: LEVELS.index(level) + 1]:
        features.update(_LEVEL_FEATURES[name])
    return frozenset(features)


@dataclass(frozen=True)
class HostCPU:
    """What /proc/cpuinfo says of the machine this process runs on."""

    model: str
    architecture: str
    features: frozenset[str]
    cores: int
    #: bytes of one core's L2 cache (Linux's sysfs; DEFAULT_L2_BYTES where it does not say)
    l2_bytes: int = DEFAULT_L2_BYTES
    #: bytes of one core's L1 data cache (Linux's sysfs; DEFAULT_L1_BYTES where it does not say)
    l1_bytes: int = DEFAULT_L1_BYTES

    @property
    def level(self) -> str | None:
        """The highest x86-64 level whose features the host has (None on other architectures)."""
        if self.architecture not in ("x86_64", "AMD64"):
            return None
        found = None
        for level in LEVELS:
            if level_features(level) <= self.features:
                found = level
        return found


@functools.cache
def host_cpu() -> HostCPU:
    """The host CPU, read once per process."""
    model, features = "", frozenset[str]()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("model name", "Hardware", "CPU part") and not model:
                model = value.strip()
            elif key in ("flags", "Features") and not features:
                features = frozenset(value.split())
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    name = model or platform.processor() or platform.machine()
    return HostCPU(name, platform.machine(), features, cores, _cache_bytes("2", DEFAULT_L2_BYTES),
                   _cache_bytes("1", DEFAULT_L1_BYTES))


_CACHE_FOLDER = Path("/sys/devices/system/cpu/cpu0/cache")
_SIZE_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _cache_bytes(wanted: str, default: int) -> int:
    """Bytes of the first core's data (or unified) cache of level ``wanted`` from Linux's sysfs
    (``index*/level``, ``type``, ``size`` such as ``512K``); ``default`` where unreadable."""
    try:
        for index in sorted(_CACHE_FOLDER.glob("index*")):
            level = (index / "level").read_text().strip()
            kind = (index / "type").read_text().strip()
            if level == wanted and kind in ("Unified", "Data"):
                size = (index / "size").read_text().strip()
                unit = _SIZE_UNITS.get(size[-1:].upper(), 1)
                return int(size.rstrip("KMGkmg")) * unit
    except (OSError, ValueError):
        pass
    return default


@dataclass(frozen=True)
class CPUTarget:
    """What the CPU backends generate code for (see the module docstring for the names)."""

    #: the name asked for: ``native`` or an x86-64 level
    name: str
    #: the x86-64 level the features satisfy (None for a non-x86 native host)
    level: str | None
    #: the instruction-set features code may use (/proc/cpuinfo spellings)
    features: frozenset[str]
    #: bytes of one SIMD register, and how many there are (the heuristic's register tiles)
    vector_bytes: int
    vector_registers: int
    #: cores that run THREAD loops
    cores: int
    #: bytes of one core's L2 cache: the operands a loop nest may keep there (the host's, as cores)
    l2_bytes: int
    #: the host CPU's model name (where this profile was resolved)
    host_model: str = field(compare=False)
    #: bytes of one core's L1 data cache: the rows a register tile reads over its reduction
    #: (the heuristic's choice of which operand the lanes hold; the host's, as cores)
    l1_bytes: int = DEFAULT_L1_BYTES

    @property
    def has_fma(self) -> bool:
        """Fused multiply-add instructions (FMA3 on x86, always on AArch64)."""
        return "fma" in self.features or "asimd" in self.features

    @property
    def native_float16(self) -> bool:
        """float16 ⇄ float32 conversions in hardware (F16C on x86)."""
        return "f16c" in self.features or "fphp" in self.features

    @property
    def native_bfloat16(self) -> bool:
        """bfloat16 conversions in hardware (AVX512-BF16 on x86)."""
        return "avx512_bf16" in self.features or "bf16" in self.features

    @property
    def is_native(self) -> bool:
        """True for the host's own profile (``-march=native``, LLVM's host CPU)."""
        return self.name == "native"

    @property
    def missing_on_host(self) -> frozenset[str]:
        """Features this target uses that the host CPU lacks (code for it cannot run here)."""
        return self.features - host_cpu().features

    @property
    def runs_here(self) -> bool:
        """True when the host can run code generated for this target."""
        return self.is_native or (host_cpu().level is not None and not self.missing_on_host)

    def why_not_here(self) -> str | None:
        """Why code for this target cannot run on this host, or None when it can."""
        if self.runs_here:
            return None
        missing = ", ".join(sorted(self.missing_on_host)) or "an x86-64 CPU"
        return (f"code for target {self.name} needs {missing}, which this CPU ({host_cpu().model}) "
                f"lacks; it renders and compiles, but runs only on such a CPU")

    def c_flags(self) -> tuple[str, ...]:
        """The C compiler's ISA flags for this target (gcc ≥ 11 and clang ≥ 12 know the levels)."""
        if self.is_native:
            return ("-march=native",)
        return (f"-march={self.level}", "-mtune=generic")

    def llvm_cpu_and_features(self, host_name: str, host_features: str) -> tuple[str, str]:
        """LLVM's (cpu, features) for this target, given LLVM's own view of the host."""
        if self.is_native:
            return host_name, host_features
        names = sorted(_LLVM_FEATURE_NAMES[f] for f in self.features if f in _LLVM_FEATURE_NAMES)
        return str(self.level), ",".join("+" + name for name in names)

    @property
    def key(self) -> str:
        """A stable text naming exactly the code this target gets: level and sorted features
        (caches and tuning records use it; never the word ``native`` or a marketing name)."""
        code_features = sorted(f for f in self.features if f in _LLVM_FEATURE_NAMES)
        # -march=native also tunes for the host and may use features the table above does not name
        tuning = "tune=generic"
        if self.is_native:
            tuning = f"host={self.host_model}#{_flags_digest(self.features)}"
        return f"{self.level or platform.machine()}[{','.join(code_features)}];{tuning}"

    @property
    def device_tag(self) -> str:
        """What a device name on this target ends with: the name asked for and the key."""
        return f"[{self.name}] {self.key}"

    def describe(self) -> str:
        """One line for people: name, level, registers, FMA, half types, cores, L2."""
        level = f" ({self.level})" if self.is_native and self.level else ""
        return (f"{self.name}{level}: {self.vector_registers} × {self.vector_bytes * 8}-bit vector "
                f"registers, FMA {'yes' if self.has_fma else 'no'}, float16 "
                f"{'native' if self.native_float16 else 'emulated'}, bfloat16 "
                f"{'native' if self.native_bfloat16 else 'emulated'}, {self.cores} cores, "
                f"{self.l1_bytes >> 10} KiB L1 and {self.l2_bytes >> 10} KiB L2 a core")

    def to_json(self) -> dict[str, object]:
        """The profile as JSON fields (benchmarks' results.json, tuning records)."""
        return {
            "name": self.name, "level": self.level, "key": self.key, "host_model": self.host_model,
            "vector_bits": self.vector_bytes * 8, "vector_registers": self.vector_registers,
            "fma": self.has_fma, "native_float16": self.native_float16,
            "native_bfloat16": self.native_bfloat16, "cores": self.cores, "l1_bytes": self.l1_bytes,
            "l2_bytes": self.l2_bytes,
            "features": sorted(self.features),
        }


def _flags_digest(features: frozenset[str]) -> str:
    """A short digest of a whole feature list."""
    return hashlib.sha256(" ".join(sorted(features)).encode()).hexdigest()[:12]


def _registers_for(features: frozenset[str], architecture: str) -> tuple[int, int]:
    """(bytes, count) of the SIMD registers code with ``features`` uses."""
    if "avx512f" in features:
        return 64, 32
    if "avx" in features:
        return 32, 16
    if architecture in ("aarch64", "arm64"):
        return 16, 32
    return 16, 16


@functools.cache
def resolve_target(name: str) -> CPUTarget:
    """The profile called ``name`` (``native`` or an x86-64 level), for this host."""
    host = host_cpu()
    if name == "native":
        features, level = host.features, host.level
    elif name in _LEVEL_FEATURES:
        features, level = level_features(name), name
    else:
        raise ValueError(
            f"unknown CPU target {name!r}: use 'native' or one of {', '.join(LEVELS)} "
            f"(set by uopviz.set_target or ${TARGET_ENVIRONMENT_VARIABLE})"
        )
    vector_bytes, registers = _registers_for(features, host.architecture if name == "native" else "x86_64")
    return CPUTarget(name, level, features, vector_bytes, registers, host.cores, host.l2_bytes,
                     host.model, host.l1_bytes)


_chosen: str | None = None


def cpu_target() -> CPUTarget:
    """The target the CPU backends generate code for now (set_target, else $UOPVIZ_TARGET, else native)."""
    name = _chosen or os.environ.get(TARGET_ENVIRONMENT_VARIABLE, "").strip() or "native"
    return resolve_target(name)


def set_target(name: str | None) -> CPUTarget:
    """Generate code for ``name`` from now on (None: back to $UOPVIZ_TARGET / native); returns it."""
    global _chosen
    if name is not None:
        resolve_target(name)  # a bad name fails here, before anything changes
    _chosen = name
    return cpu_target()


@contextlib.contextmanager
def using_target(name: str) -> Iterator[CPUTarget]:
    """Generate code for ``name`` inside the ``with`` block, then restore the previous choice."""
    global _chosen
    previous = _chosen
    target = set_target(name)
    try:
        yield target
    finally:
        _chosen = previous


__all__ = ["DEFAULT_L1_BYTES", "DEFAULT_L2_BYTES", "LEVELS", "TARGET_ENVIRONMENT_VARIABLE", "CPUTarget",
           "HostCPU", "cpu_target", "host_cpu", "level_features", "resolve_target", "set_target",
           "using_target"]
