#!/usr/bin/env bash
# The GPU checks of issue #23, in one call of a lent GPU machine (H100 or H200): the GPU bench
# (benchmarks/bench_gpu.py) and the CUDA tests, without make and without the project's venv.
#
#   bash scripts/gpu-check.sh            # outputs under $OUT (default: ./gpu-out)
#
# What the machine must have (the 'cuda' image of the device machines has all of it): an NVIDIA GPU
# and driver (libcuda, nvidia-smi); python3 >= 3.11 with numpy, llvmlite, networkx, tqdm, pytest,
# pytest-timeout, hypothesis and ml-dtypes; NVRTC (the nvidia-cuda-nvrtc wheel or the toolkit's
# libnvrtc) or nvcc; torch with CUDA (the bench's peer).  Not there, so carried: tinygrad (the
# other peer, pure Python) as a wheel in .whl/ -- here: `python3 -m pip download --no-deps
# --only-binary=:all: -d .whl tinygrad==0.14.0`, then name `.whl` in the call's carry.  Without it
# the tinygrad rows say so and are skipped.  uopviz itself runs from the checkout (PYTHONPATH=.).
#
# Time: the bench is given 300 s (its own budget, UOPVIZ_GPU_BENCH_BUDGET_S, is 240 s: cases left
# when it is spent become skipped rows), the tests 240 s; about 9 minutes at the very most, 3 to 5
# expected.  Files back: gpu-results.json, gpu-bench.log, gpu-tests.log, gpu-info.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export UOPVIZ_CACHE="${UOPVIZ_CACHE:-/tmp/uopviz-cache}"
export UOPVIZ_GPU_BENCH_BUDGET_S="${UOPVIZ_GPU_BENCH_BUDGET_S:-240}"
PYTHON="${PYTHON:-python3}"

if compgen -G ".whl/*.whl" >/dev/null; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/gpu-site .whl/*.whl && export PYTHONPATH="$PYTHONPATH:/tmp/gpu-site"
fi

{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  command -v nvcc >/dev/null && nvcc --version | tail -2
  "$PYTHON" -c "import sys, numpy, torch; print(sys.version.split()[0], 'numpy', numpy.__version__,
'torch', torch.__version__, 'cuda', torch.version.cuda)"
  "$PYTHON" -c "import tinygrad; print('tinygrad', tinygrad.__file__)" 2>&1 | tail -1
} >"$OUT/gpu-info.txt" 2>&1
cat "$OUT/gpu-info.txt"

echo "== bench: python benchmarks/run.py gpu -o \$OUT/gpu-results.json"
timeout "${GPU_BENCH_S:-300}" "$PYTHON" benchmarks/run.py gpu -o "$OUT/gpu-results.json" 2>&1 | tee "$OUT/gpu-bench.log"
bench_rc=${PIPESTATUS[0]}

echo "== tests: pytest tests/backends/test_cuda.py (its gpu-marked tests run here; the rest render and compile)"
timeout "${GPU_TESTS_S:-240}" "$PYTHON" -m pytest -p no:cacheprovider -n "${GPU_TEST_WORKERS:-8}" -q tests/backends/test_cuda.py \
  tests/backends/test_accuracy.py -k "cuda" 2>&1 \
  | tee "$OUT/gpu-tests.log" | tail -30
tests_rc=${PIPESTATUS[0]}

echo "== bench exit $bench_rc (124: timed out), tests exit $tests_rc"
exit $(( bench_rc != 0 || tests_rc != 0 ))
