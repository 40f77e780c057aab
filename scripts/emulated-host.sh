#!/usr/bin/env bash
# Runs a command as if this machine were an older x86-64 host: qemu's user-mode emulator executes
# every Python process (and the C compiler's driver, which resolves -march=native) on an emulated
# CPU, so CPUID reports that CPU's features and an instruction it lacks (AVX-512 on `haswell`,
# AVX on `nehalem`) stops the process with SIGILL, as it would on real hardware.
#
#   scripts/emulated-host.sh haswell  COMMAND...   AVX2 + FMA + F16C, no AVX-512 (x86-64-v3)
#   scripts/emulated-host.sh nehalem  COMMAND...   SSE4.2 + POPCNT, no AVX     (x86-64-v2)
#   scripts/emulated-host.sh --level haswell|nehalem   prints the CPU's x86-64 level, runs nothing
#
# Inside, `python` and `python3` are the project's .venv interpreter under qemu (sys.executable
# points back at the wrapper, so pytest-xdist workers and uopviz's kernel workers are emulated
# too), `gcc`/`cc`/`clang` are the emulated drivers, and /proc/cpuinfo is replaced, in a private
# mount namespace, by the emulated CPU's flags: uopviz's target detection reads the kernel's
# view, which qemu's user mode passes through from the real CPU.
#
# Needs qemu-user (scripts/system-deps.sh installs it), util-linux's unshare, and either root or
# unprivileged user namespaces.  The emulator is 10-20x slower than the host: run focused tests.
# Debian 12's qemu 7.2 miscomputes some AVX2 code: three C-backend tests in tests/nnef (argmax
# pool/sample, the LSTM zoo model) get wrong values there from the very .so files that give
# numpy's values when the host runs them (same cache, same bytes; one thread or two; the same
# kernels built with AddressSanitizer are clean on the host).  The argmax kernels' only AVX2
# instruction is GCC's vgatherqps, and built with -mno-avx2 they pass under qemu.  The
# hand-tuning notebook also outlasts its 5-minute limit there.  So `make test-emulated` runs
# the target-dependent tests, which pass, not the whole suite.
# Env: VENV (default .venv).
set -euo pipefail

usage() { echo "usage: $0 haswell|nehalem COMMAND... | $0 --level haswell|nehalem" >&2; exit 2; }
[ $# -ge 2 ] || usage
query_level=false
if [ "$1" = --level ]; then query_level=true; shift; fi
case "$1" in
    # qemu's Haswell, less the features its TCG does not implement (each would print a warning)
    haswell) cpu_model="Haswell-noTSX,-pcid,-x2apic,-tsc-deadline,-invpcid"; level=x86-64-v3 ;;
    nehalem) cpu_model="Nehalem"; level=x86-64-v2 ;;
    *) usage ;;
esac
cpu_name=$1
shift
if $query_level; then echo "$level"; exit 0; fi
# OpenBLAS (numpy's) detects the emulated CPU itself: a core type the real host's environment forces
# (OPENBLAS_CORETYPE=Haswell, seen on a host of this workplace) runs AVX2 kernels on the emulated
# Nehalem, and numpy's import dies there with SIGILL
unset OPENBLAS_CORETYPE

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=$(cd "$repo" && cd "${VENV:-.venv}" && pwd)
for tool in qemu-x86_64 unshare; do
    command -v "$tool" >/dev/null || { echo "$0: $tool not found (scripts/system-deps.sh installs qemu-user)" >&2; exit 1; }
done
[ "$(uname -m)" = x86_64 ] || { echo "$0: qemu-x86_64 emulates an x86-64 host on an x86-64 host only" >&2; exit 1; }
real_python=$(readlink -f "$venv/bin/python")

# A throw-away venv-shaped folder whose bin/ holds the emulated interpreter and compilers; its
# pyvenv.cfg and lib/ are the project venv's, so the same packages import.
shell=$(mktemp -d "${TMPDIR:-/tmp}/uopviz-$cpu_name.XXXXXX")
trap 'rm -rf "$shell"' EXIT
mkdir "$shell/bin"
cp "$venv/pyvenv.cfg" "$shell/"
ln -s "$venv/lib" "$shell/lib"
printf '#!/bin/sh\nexec qemu-x86_64 -cpu %s -0 %s %s "$@"\n' \
    "$cpu_model" "$shell/bin/python" "$real_python" >"$shell/bin/python"
ln -s python "$shell/bin/python3"
for compiler in gcc cc clang; do
    path=$(command -v "$compiler") || continue
    printf '#!/bin/sh\nexec qemu-x86_64 -cpu %s %s "$@"\n' "$cpu_model" "$path" >"$shell/bin/$compiler"
done
chmod +x "$shell"/bin/*

# What the kernel of a host with this CPU would print: the emulated CPUID's features, read by
# LLVM inside the emulator, in /proc/cpuinfo's spellings.
"$shell/bin/python" - "$cpu_name" >"$shell/cpuinfo" <<'PYTHON'
import re
import sys

import llvmlite.binding as llvm

from uopviz.backends.target import _LLVM_FEATURE_NAMES

present = {name for name, enabled in llvm.get_host_cpu_features().items() if enabled}
flags = {"fpu", "sse", "sse2"} | {flag for flag, name in _LLVM_FEATURE_NAMES.items() if name in present}
text = open("/proc/cpuinfo").read()
text = re.sub(r"(?m)^flags\s*:.*$", lambda _: "flags\t\t: " + " ".join(sorted(flags)), text)
text = re.sub(r"(?m)^model name\s*:.*$", lambda _: f"model name\t: qemu {sys.argv[1]} (emulated)", text)
sys.stdout.write(text)
PYTHON
echo "== emulated $cpu_name host ($level): $(grep -m1 '^flags' "$shell/cpuinfo" | cut -d: -f2-)" >&2

namespace=(unshare --mount --propagation private)
[ "$(id -u)" -eq 0 ] || namespace=(unshare --user --map-root-user --mount --propagation private)
# UOPVIZ_EMULATED_CPU names the emulated CPU to the tests (tests/cpu_targets.py: the few cases
# qemu itself gets wrong or takes too long for are skipped there with the reason)
UOPVIZ_EMULATED_CPU=$cpu_name "${namespace[@]}" bash -c \
    'mount --bind "$0/cpuinfo" /proc/cpuinfo && export PATH="$0/bin:$PATH" && exec "$@"' "$shell" "$@"
