#!/usr/bin/env bash
# `make test-emulated` for one emulated CPU: the given tests under scripts/emulated-host.sh, then,
# if a few of them failed, those alone once more, one process and one test at a time.
#
#   scripts/emulated-tests.sh haswell|nehalem PYTEST_ARGS...
#
# Why the second run: qemu-user itself is not reliable under load with threads and fork.  In CI
# (stop 26: 2,883 passed) one xdist worker died inside a C kernel run of a test that passes alone
# under the same emulator, and a fork of the kernel worker hung in `_fork_exec` for 300 s; both
# passed when run again (also as a whole file, two workers).  A test that fails because the code
# is wrong for the emulated CPU -- an instruction it lacks is SIGILL, a wrong value is a wrong
# value -- fails again on the rerun, and the stage fails.  More than MAX_RERUNS failures are not
# rerun: that is no flake.  Every rerun test is named in the output.
# A CPU of the host's own level is not emulated: `make test` ran natively on such a CPU (on an
# AVX2-only host, `native` is x86-64-v3, as under emulated Haswell), and qemu would take ~1 hour
# for what the host checked in minutes.
# Env: VENV (default .venv), MAX_RERUNS (default 5).
set -uo pipefail

[ $# -ge 2 ] || { echo "usage: $0 haswell|nehalem PYTEST_ARGS..." >&2; exit 2; }
cpu=$1
shift
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
max_reruns=${MAX_RERUNS:-5}
level=$(bash "$repo/scripts/emulated-host.sh" --level "$cpu") || exit 2
host_level=$(bash "$repo/scripts/host-level.sh") || exit 2
if [ "$level" = "$host_level" ]; then
    echo "== emulated $cpu ($level): not emulated, this host is $host_level itself and make test ran natively on it"
    exit 0
fi
cache=$(mktemp -d "${TMPDIR:-/tmp}/uopviz-emulated-cache.XXXXXX")
trap 'rm -rf "$cache"' EXIT

emulated() { bash "$repo/scripts/emulated-host.sh" "$cpu" python -m pytest -o cache_dir="$cache" "$@"; }

emulated -n auto "$@"
rc=$?
[ "$rc" -eq 1 ] || exit "$rc"  # passed, or an error that is not a failed test (usage, collection)

failed=$(python3 -c 'import json, sys; print("\n".join(json.load(open(sys.argv[1]))))' \
    "$cache/v/cache/lastfailed" 2>/dev/null)
count=$(printf '%s' "$failed" | grep -c . || true)
if [ "$count" -eq 0 ] || [ "$count" -gt "$max_reruns" ]; then
    echo "== emulated $cpu: $count test(s) failed; not rerun (more than $max_reruns, or none recorded)"
    exit 1
fi
echo "== emulated $cpu: $count test(s) failed; each runs once more, alone (qemu-user flakes under load):"
printf '   %s\n' $failed
emulated -n 0 --last-failed --last-failed-no-failures none "$@"
rc=$?
if [ "$rc" -eq 0 ]; then
    echo "== emulated $cpu: the $count test(s) above passed when run again alone"
fi
exit "$rc"
