# uopviz developer entry points. GNU make.
#
#   make lab        JupyterLab on the tour notebook (prints the URL with its token)
#   make test       the whole test suite, slow and browser tests included (pytest-xdist)
#   make test-fast  the suite without `slow` and `browser` tests
#   make test-targets  backend, pipeline and NNEF-lowering tests again for each lesser CPU target
#                   (UOPVIZ_TARGET=x86-64-v3, x86-64-v2) this host can run
#   make test-emulated  the same tests on emulated older CPUs (qemu-x86_64: Haswell = AVX2, no
#                   AVX-512; Nehalem = SSE4.2), less the `host_independent` ones (Python
#                   interpreter, CUDA sources): `native` is detected there, and code using an
#                   instruction the CPU lacks would SIGILL; a few failures are run once more alone
#                   (scripts/emulated-tests.sh: qemu-user flakes under load), a real one fails twice
#   make fuzz-slow  tests/fuzz under the slow hypothesis profile (> 10,000 fuzz inputs, 500 generated
#                   programs on every CPU backend); outcome counts in tests/artifacts/fuzz-outcomes.json
#   make bench      benchmarks/run.py: a table on stdout, benchmarks/results.json
#   make bench-gpu  benchmarks/run.py gpu: uopviz's CUDA backend against torch and tinygrad on the GPU,
#                   with the GPU model's predicted times (without a GPU: the predictions, cases skipped);
#                   on a lent GPU machine run scripts/gpu-check.sh instead (no venv there)
#   make accuracy   scripts/accuracy.py: max ulp error per op, dtype and backend into docs/accuracy.md
#   make lint       ruff, and lint-imports (the layer contract in pyproject.toml; make test runs it too)
#   make venv       system packages (when root) + .venv with `pip install -e .[dev,bench]`
#   make converter  .venv-nnef-tools: Khronos' NNEF converter in a venv of its own (make test and
#                   make bench use it: tests/nnef/test_converter_forms.py, bench_zoo's converted rows)
#   make clean      caches and build outputs; `make distclean` also removes .venv

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.uopviz-installed
LAB_OVERRIDES := $(VENV)/share/jupyter/lab/settings/overrides.d
LAB_NEWS_OFF  := {"fetchNews": "false", "checkForUpdates": false}

# Extra arguments: make test PYTEST_ARGS="-k rewrite", make lab LAB_ARGS="--port 8888",
# make bench BENCH_ARGS="core".
PYTEST_ARGS ?=
LAB_ARGS    ?=
BENCH_ARGS  ?=
ACCURACY_ARGS ?=
# When set, `make test` writes pytest's own exit status to this file (.ci/run reads it).
PYTEST_RC_FILE ?=

export PIP_DISABLE_PIP_VERSION_CHECK := 1
export PIP_NO_INPUT := 1
export DEBIAN_FRONTEND := noninteractive

.PHONY: help venv converter system-deps test test-fast test-targets test-emulated fuzz-slow lab bench bench-gpu accuracy lint clean distclean

# The tests whose generated code depends on the CPU target, run again under each lesser target.
TARGET_TESTS ?= tests/backends tests/passes tests/engine tests/nnef/test_lowering.py tests/nnef/test_stdlib_ops.py
TARGET_LEVELS ?= x86-64-v3 x86-64-v2
# The emulated CPUs of `make test-emulated` (scripts/emulated-host.sh names them) and what runs on
# each: on Haswell (AVX2, no AVX-512) the backends', the engine's and the NNEF operations' tests, on
# Nehalem (SSE4.2) the backends'.  What emulation adds to `make test-targets` is the host: `native`
# detected from an AVX2-only CPU and an AVX-512 instruction stopping with SIGILL; the backends' tests
# compile and run every code path of the renderers and the NNEF operations' tests every operation.
# tests/passes is left out: it checks rewrites of the IR, and its few kernels that run do so under
# each level natively in `make test-targets` with the same target profile.  Under qemu on the
# 2-core host its 1,500 tests made emulated Haswell take over 30 minutes (CI 2,726 s in all, stop
# 56); without them both emulated CPUs take 11 minutes (Haswell 7:00, Nehalem 3:13).
EMULATED_CPUS ?= haswell nehalem
EMULATED_TESTS_haswell ?= tests/backends tests/engine tests/nnef/test_lowering.py tests/nnef/test_stdlib_ops.py
EMULATED_TESTS_nehalem ?= tests/backends
# Left out there: the OpenCL backend's own tests (pocl's LLVM, emulated too, took 742 of the 1,890
# CPU-seconds of emulated Nehalem's backend tests); OpenCL's CPU target is checked by
# tests/backends/test_targets.py, which runs there and under each level natively.
EMULATED_IGNORE ?= --ignore=tests/backends/test_opencl.py

# Khronos' converter (nnef-tools, with onnx) in a venv of its own, never a dependency of uopviz: the
# tests and the benchmark run it as a subprocess (UOPVIZ_NNEF_TOOLS_PYTHON).  A failed install only
# costs those tests (they are skipped, saying why) and the benchmark's converted rows.
CONVERTER_VENV ?= .venv-nnef-tools
CONVERTER_STAMP := $(CONVERTER_VENV)/.installed
CONVERTER_PACKAGES ?= nnef-tools onnx
export UOPVIZ_NNEF_TOOLS_PYTHON ?= $(abspath $(CONVERTER_VENV))/bin/python

help:
	@echo "uopviz: make lab | test | test-fast | test-targets | test-emulated | fuzz-slow | bench | bench-gpu | accuracy | lint | venv | converter | system-deps | clean | distclean"

system-deps:
	@PYTHON="$(PYTHON)" bash scripts/system-deps.sh

venv: $(STAMP)

# Re-run pip only when pyproject.toml or this Makefile changes (or the venv is new); system
# packages are checked every time, which costs one dpkg-query when everything is there.
# The editable install maps the package `uopviz` to ./uopviz, so modules and subpackages added
# later import without reinstalling.
$(STAMP): pyproject.toml Makefile | system-deps
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
	  { echo "uopviz needs Python >= 3.11; $(PYTHON) is $$($(PYTHON) -V 2>&1). Try: make PYTHON=python3.11"; exit 1; }
	@test -x $(PY) || { echo "Creating $(VENV) with $$($(PYTHON) -V)"; $(PYTHON) -m venv $(VENV); }
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(PY) -m pip install --progress-bar off -e '.[dev,bench]'
	@# JupyterLab in this venv: never ask about (or fetch) news and updates; the network is closed
	@# and the toast would cover notebooks in screenshots.
	@mkdir -p $(LAB_OVERRIDES)
	@echo '{"@jupyterlab/apputils-extension:notification": $(LAB_NEWS_OFF)}' > $(LAB_OVERRIDES)/uopviz.json
	@touch $@
	@echo "$(VENV) is ready."

converter: $(CONVERTER_STAMP)

$(CONVERTER_STAMP): Makefile
	@{ test -x $(CONVERTER_VENV)/bin/python || $(PYTHON) -m venv $(CONVERTER_VENV); } && \
	 $(CONVERTER_VENV)/bin/python -m pip install -q --progress-bar off $(CONVERTER_PACKAGES) && \
	 $(CONVERTER_VENV)/bin/python -c 'import nnef_tools.convert' && touch $@ || \
	 echo "== $(CONVERTER_VENV): nnef-tools did not install; the converter's tests are skipped"

test: venv converter
	@echo "$(PY) -m pytest -n auto $(PYTEST_ARGS)"
	@rc=0; $(PY) -m pytest -n auto $(PYTEST_ARGS) || rc=$$?; \
	 if [ -n "$(PYTEST_RC_FILE)" ]; then echo $$rc > "$(PYTEST_RC_FILE)"; fi; exit $$rc

test-fast: venv
	$(PY) -m pytest -n auto -m "not slow and not browser" $(PYTEST_ARGS)

test-targets: venv
	@host_level=$$(VENV=$(VENV) bash scripts/host-level.sh); \
	for level in $(TARGET_LEVELS); do \
	  if ! $(PY) -c "import sys; from uopviz.backends.target import resolve_target as r; \
	      sys.exit(r('$$level').why_not_here() is not None)"; then \
	    echo "== $$level: this CPU cannot run its code; skipped"; continue; fi; \
	  if [ "$$level" = "$$host_level" ]; then \
	    echo "== $$level: this host's own level; make test ran these tests at it natively; skipped"; continue; fi; \
	  echo "== UOPVIZ_TARGET=$$level $(PY) -m pytest -n auto -m 'not slow and not browser' $(TARGET_TESTS)"; \
	  UOPVIZ_TARGET=$$level $(PY) -m pytest -n auto -m "not slow and not browser" $(TARGET_TESTS) \
	    $(PYTEST_ARGS) || exit $$?; \
	done

test-emulated: venv
	@if ! command -v qemu-x86_64 >/dev/null || [ "$$(uname -m)" != x86_64 ]; then \
	  echo "== test-emulated: needs qemu-user on an x86-64 host (make system-deps as root); skipped"; \
	  exit 0; fi; \
	$(foreach cpu,$(EMULATED_CPUS), \
	  echo "== scripts/emulated-tests.sh $(cpu) -m 'not slow and not browser and not host_independent' $(EMULATED_IGNORE) $(EMULATED_TESTS_$(cpu))"; \
	  VENV=$(VENV) bash scripts/emulated-tests.sh $(cpu) -m "not slow and not browser and not host_independent" \
	    $(EMULATED_IGNORE) $(EMULATED_TESTS_$(cpu)) $(PYTEST_ARGS) || exit $$?;)

fuzz-slow: venv
	mkdir -p tests/artifacts && rm -f tests/artifacts/fuzz-outcomes.json
	HYPOTHESIS_PROFILE=slow UOPVIZ_FUZZ_REPORT=tests/artifacts/fuzz-outcomes.json \
	  $(PY) -m pytest -n 0 tests/fuzz $(PYTEST_ARGS)

lab: venv
	$(VENV)/bin/uopviz lab $(LAB_ARGS)

bench: venv converter
	$(PY) benchmarks/run.py $(BENCH_ARGS)

bench-gpu: venv
	$(PY) benchmarks/run.py gpu $(BENCH_ARGS)

# A few minutes: every 16-bit input, 400k float32 and 40k float64 inputs per op on every CPU backend.
accuracy: venv
	$(PY) scripts/accuracy.py --write docs/accuracy.md $(ACCURACY_ARGS)

lint: venv
	$(VENV)/bin/ruff check $(wildcard uopviz tests benchmarks)
	$(VENV)/bin/lint-imports

clean:
	rm -rf build dist *.egg-info .pytest_cache .ruff_cache .hypothesis tests/artifacts benchmarks/results.json
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -print0 | xargs -0 rm -rf

distclean: clean
	rm -rf $(VENV) $(CONVERTER_VENV)
