"""Shared pytest setup for the uopviz test suite.

Markers (declared in pyproject.toml):

* ``slow``    long-tail tests; ``make test`` runs them, ``make test-fast`` does not.
* ``browser`` needs Debian's chromium and JupyterLab. Outside CI they are skipped when no chromium
              is found; under ``CI=true`` they run and fail loudly, because a missing browser
              there means the install step broke.
* ``gpu``     needs a CUDA device; skipped where there is none (CI has none).

Fixtures: ``repo_root``, ``artifacts_dir`` (kept under tests/artifacts/ for a person to look at),
``chromium_executable``, ``chromium_browser`` / ``browser_page`` (Playwright driving the system
chromium; Playwright never downloads a browser here) and ``jupyter_lab`` (a JupyterLab server on
a free loopback port, started the way ``uopviz lab`` starts it).

Hypothesis profiles: ``dev`` (default), ``ci`` (chosen when ``CI`` is set: derandomized, so
a CI run is reproducible) and ``slow`` (the long budgets of the fuzz tests and program sweeps).
None has a deadline: two cores shared by xdist workers make per-example timings meaningless.
Override with ``HYPOTHESIS_PROFILE``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

REPO_ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS_ROOT = REPO_ROOT / "tests" / "artifacts"
IN_CI = os.environ.get("CI", "").lower() not in ("", "0", "false", "no")

#: Flags for headless chromium on a root, offline, GPU-less machine. Without the
#: background-networking ones chromium keeps trying (and failing) to reach Google's hosts.
CHROMIUM_ARGS: tuple[str, ...] = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)

# --------------------------------------------------------------------------------------------
# hypothesis
# --------------------------------------------------------------------------------------------
settings.register_profile("dev", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
# ``slow``: the long fuzzing and program-sweep budgets of tests/fuzz (see tests/fuzz/fuzzing.py)
settings.register_profile("slow", deadline=None, derandomize=True, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if IN_CI else "dev"))

# The tests exercise the lowering itself: NNEF programs compiled by an earlier run (or another worker)
# must not come back from the whole-program cache in ~/.cache (a hit reports no per-operation
# progress and builds no trace until it is read).  tests/nnef/test_program_cache.py turns it on, with
# a cache folder of its own per test.
os.environ["UOPVIZ_PROGRAM_CACHE"] = "0"
# Likewise loads: a graph read back from the disk cache of composed graphs reports no composing
# progress; tests/nnef/test_load_cache.py turns it on, with a cache folder of its own per test.
os.environ["UOPVIZ_LOAD_CACHE"] = "0"


# --------------------------------------------------------------------------------------------
# environment probes
# --------------------------------------------------------------------------------------------
def find_chromium() -> str | None:
    """Path of a chromium binary: ``$UOPVIZ_CHROMIUM``, else the first of chromium,
    chromium-browser, google-chrome on PATH; None if there is none."""
    env = os.environ.get("UOPVIZ_CHROMIUM")
    if env and Path(env).is_file():
        return env
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def cuda_available() -> bool:
    """True when an NVIDIA driver reports at least one GPU."""
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


#: Test modules whose every test checks something no CPU target changes: CUDA sources rendered and
#: compiled to PTX without a GPU, the worker process that survives crashing or hanging kernels, and
#: the Python interpreter (its few comparisons with compiled backends use them as references; those
#: backends' own tests run on the emulated CPUs).
HOST_INDEPENDENT_MODULES = {"test_cuda.py", "test_isolation.py", "test_python_backend.py",
                            "test_python_lifted_reductions.py"}


def _host_independent(item: pytest.Item) -> bool:
    """True for a test that runs no code generated for the host CPU: a case of the Python
    interpreter backend alone, or a module of HOST_INDEPENDENT_MODULES.

    `make test-emulated` leaves these out: under qemu they take ~30 % of the emulated Haswell run
    and check nothing the CPU's features change (make test and make test-targets run them)."""
    if item.path.name in HOST_INDEPENDENT_MODULES:
        return True
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return False
    return any(name.startswith("backend") and value == "python"
               for name, value in callspec.params.items())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``gpu`` tests without a GPU, and ``browser`` tests without chromium (outside CI); mark
    the ``host_independent`` ones."""
    has_gpu_tests = any(item.get_closest_marker("gpu") for item in items)
    has_browser_tests = any(item.get_closest_marker("browser") for item in items)
    skip_gpu = None
    if has_gpu_tests and not cuda_available():
        skip_gpu = pytest.mark.skip(reason="needs a CUDA device (none found by nvidia-smi)")
    skip_browser = None
    if has_browser_tests and not IN_CI and find_chromium() is None:
        skip_browser = pytest.mark.skip(
            reason="needs chromium: run `make system-deps` as root (apt-get install chromium)")
    for item in items:
        if _host_independent(item):
            item.add_marker(pytest.mark.host_independent)
        if skip_gpu is not None and item.get_closest_marker("gpu"):
            item.add_marker(skip_gpu)
        if skip_browser is not None and item.get_closest_marker("browser"):
            item.add_marker(skip_browser)


# --------------------------------------------------------------------------------------------
# fixtures
# --------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The checkout's root directory."""
    return REPO_ROOT


@pytest.fixture
def artifacts_dir(request: pytest.FixtureRequest) -> Path:
    """A fresh directory tests/artifacts/<test id>/ for screenshots, reports and the like.

    Unlike ``tmp_path`` it is kept after the run (and git-ignored) so a person can look.
    """
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.nodeid).strip("_")[:150]
    path = ARTIFACTS_ROOT / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


@pytest.fixture(scope="session")
def chromium_executable() -> str:
    """Path of the system chromium; fails (rather than skips) when it is missing."""
    path = find_chromium()
    if path is None:
        pytest.fail("chromium not found: `apt-get install chromium` (make system-deps does it as root)")
    return path


@pytest.fixture(scope="session")
def chromium_browser(chromium_executable: str) -> Iterator[Any]:
    """A Playwright ``Browser`` on the system chromium, shared by the session (one per worker)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_executable, args=list(CHROMIUM_ARGS))
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def browser_page(chromium_browser: Any) -> Iterator[Any]:
    """A Playwright ``Page`` in a fresh browser context, closed after the test."""
    context = chromium_browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    try:
        yield page
    finally:
        context.close()


@dataclass(frozen=True)
class JupyterLab:
    """A running JupyterLab: ``url(path)`` gives a browser URL with the token."""

    ip: str
    port: int
    token: str
    root: Path

    @property
    def base_url(self) -> str:
        """``http://ip:port`` with no trailing slash."""
        return f"http://{self.ip}:{self.port}"

    def url(self, path: str = "") -> str:
        """Browser URL of ``path`` (relative to ``root``) in JupyterLab, token included."""
        from uopviz.cli import lab_url

        return lab_url(self.ip, self.port, path, self.token)


@pytest.fixture(scope="session")
def jupyter_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterLab]:
    """A JupyterLab serving a temporary root (one per xdist worker), stopped at session end.

    Tests write notebooks into ``jupyter_lab.root`` and open ``jupyter_lab.url("x.ipynb")``.
    """
    from uopviz.cli import free_port, lab_command, wait_until_ready

    root = tmp_path_factory.mktemp("lab-root")
    ip, port, token = "127.0.0.1", free_port(), "uopviz-test-token"
    log = (tmp_path_factory.getbasetemp() / f"jupyter-lab-{port}.log").open("wb")
    env = dict(os.environ, PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"])
    proc = subprocess.Popen(lab_command(root, ip, port, token), cwd=root, env=env,
                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    try:
        if not wait_until_ready(ip, port, token, proc, timeout_s=120):
            proc.kill()
            log.close()
            pytest.fail(f"JupyterLab did not start; log:\n{Path(log.name).read_text()[-4000:]}")
        yield JupyterLab(ip=ip, port=port, token=token, root=root)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()
