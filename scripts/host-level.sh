#!/usr/bin/env bash
# Prints the x86-64 level of this host's `native` CPU target (x86-64-v4, -v3, -v2; "None" off x86):
# `make test` runs at it, so `make test-targets` and scripts/emulated-tests.sh do not repeat it.
# Env: VENV (default .venv).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=$(cd "$repo" && cd "${VENV:-.venv}" && pwd)
exec "$venv/bin/python" -c 'from uopviz.backends.target import resolve_target; print(resolve_target("native").level)'
