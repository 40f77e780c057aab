"""A JupyterLab for browser tests, isolated from the user's Jupyter setup.

Like the suite's ``jupyter_lab`` fixture (same command line as ``uopviz lab``), but every Jupyter
directory (config, data, runtime, lab settings, workspaces) is a fresh temporary one, and the lab
settings make notebooks render every cell (no windowing: cells far down the page exist in the DOM,
so a test can wait for all of them) and never show news or update toasts over the screenshots.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false",
                                                                        "checkForUpdates": False},
}


@dataclass(frozen=True)
class IsolatedLab:
    """A running JupyterLab serving ``root`` on ``port`` with ``token``."""

    port: int
    token: str
    root: Path

    def url(self, path: str) -> str:
        """The browser URL of ``path`` (relative to ``root``), token included, in a workspace of its
        own that starts empty: the default workspace would reopen notebooks of earlier tests, and
        "Run All Cells" would go to whichever of them is active."""
        workspace = "t-" + "".join(c if c.isalnum() else "-" for c in path)
        return f"http://127.0.0.1:{self.port}/lab/workspaces/{workspace}/tree/{path}?token={self.token}&reset"


@pytest.fixture(scope="module")
def isolated_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IsolatedLab]:
    """JupyterLab on a free loopback port with token auth, no browser, isolated Jupyter dirs, serving a
    copy of notebooks/ (so executed outputs never touch the stored notebooks)."""
    from uopviz.cli import free_port, lab_command, wait_until_ready

    base = tmp_path_factory.mktemp("isolated-lab")
    root = base / "root"
    shutil.copytree(REPO / "notebooks", root / "notebooks")
    dirs = {name: base / name for name in ("config", "data", "runtime", "settings", "workspaces")}
    for path in dirs.values():
        path.mkdir()
    for relative, values in LAB_SETTINGS.items():
        target = dirs["settings"] / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(values))
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(dirs["config"]), JUPYTER_DATA_DIR=str(dirs["data"]),
               JUPYTER_RUNTIME_DIR=str(dirs["runtime"]), JUPYTERLAB_SETTINGS_DIR=str(dirs["settings"]),
               JUPYTERLAB_WORKSPACES_DIR=str(dirs["workspaces"]), IPYTHONDIR=str(base / "ipython"),
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"])
    port, token = free_port(), "uopviz-browser-test"
    log_path = base / "jupyterlab.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(lab_command(root, "127.0.0.1", port, token), cwd=root, env=env,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        try:
            if not wait_until_ready("127.0.0.1", port, token, proc, timeout_s=120):
                pytest.fail(f"JupyterLab did not start; log:\n{log_path.read_text()[-4000:]}")
            yield IsolatedLab(port, token, root)
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
