#!/usr/bin/env bash
# Installs the Debian packages uopviz needs, but only those that are missing.
#
#   graphviz                 `dot`, used by the graphviz Python package for static graph renders
#   chromium                 headless browser for the `browser` tests (Playwright drives it)
#   clang, libomp-dev        the C backend's compiler and its OpenMP runtime
#   pocl-opencl-icd          a CPU OpenCL platform, so the OpenCL backend runs without a GPU
#   ocl-icd-libopencl1       the OpenCL ICD loader (libOpenCL.so.1)
#   ocl-icd-opencl-dev       OpenCL headers + libOpenCL.so, for building pyopencl from source
#   clinfo                   diagnostics: lists the OpenCL platforms the loader sees
#   qemu-user                qemu-x86_64, which runs the tests on an emulated AVX2 or SSE4.2 CPU
#                            (scripts/emulated-host.sh, `make test-emulated`)
#
# Behaviour:
#   * every package already installed      -> prints nothing, exits 0 (fast: one dpkg-query)
#   * missing, running as root with apt     -> `apt-get update` once, then
#                                              `apt-get install -y --no-install-recommends`
#   * missing, not root / no apt-get        -> prints what to run, exits 0 (skips gracefully)
# A package name the configured Debian release does not know (no apt candidate) is reported
# and skipped rather than failing the whole install.
#
# Env: PYTHON (the interpreter the venv will be made from; if it is Debian's python3 without
# ensurepip, python3-venv is added to the list).
set -euo pipefail

PACKAGES=(graphviz chromium clang libomp-dev pocl-opencl-icd ocl-icd-libopencl1 ocl-icd-opencl-dev clinfo
          qemu-user)
PYTHON="${PYTHON:-python3}"

if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "system-deps: not a Debian-based system; install these by hand if missing: ${PACKAGES[*]}"
    exit 0
fi

# Debian's own python3 ships venv without ensurepip unless python3-venv is installed.
if command -v "$PYTHON" >/dev/null 2>&1 && ! "$PYTHON" -c 'import ensurepip' >/dev/null 2>&1; then
    PACKAGES+=(python3-venv)
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
    [ "$status" = "installed" ] || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "system-deps: missing Debian packages: ${missing[*]}"
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "system-deps: not root (or no apt-get); skipping. To install them run:"
    echo "    sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}"
    echo "system-deps: tests that need them will be skipped or fail."
    exit 0
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq </dev/null

# Keep only names this release can install (apt-cache policy shows a candidate).
installable=()
for pkg in "${missing[@]}"; do
    candidate=$(apt-cache policy "$pkg" 2>/dev/null | awk '/Candidate:/ {print $2}')
    if [ -n "$candidate" ] && [ "$candidate" != "(none)" ]; then
        installable+=("$pkg")
    else
        echo "system-deps: WARNING: no Debian package named '$pkg' on this release; skipped" >&2
    fi
done
[ ${#installable[@]} -eq 0 ] && exit 0

echo "system-deps: apt-get install ${installable[*]}"
apt-get install -y -qq --no-install-recommends "${installable[@]}" </dev/null
