"""The notebooks under notebooks/: stored without outputs, and every one runs top to bottom
(executed by nbmake, each in its own pytest process so a notebook kernel never shares state)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
EXPECTED = ["00_tour.ipynb", "01_uops_and_rewrites.ipynb", "02_lowering_pipeline.ipynb",
            "03_hand_tuning_gemm.ipynb", "04_nnef_inspection.ipynb"]


def test_every_notebook_is_there():
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == EXPECTED


def test_the_tours_next_list_names_every_other_notebook():
    tour = nbformat.read(NOTEBOOKS / "00_tour.ipynb", as_version=4)
    (next_cell,) = [c for c in tour.cells if c.cell_type == "markdown" and c.source.startswith("## Next")]
    listed = [line.split("`")[1] for line in next_cell.source.splitlines() if line.startswith("* `")]
    assert listed == EXPECTED[1:]


@pytest.mark.parametrize("name", EXPECTED)
def test_notebooks_are_stored_without_outputs(name):
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbformat.validate(notebook)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert code, f"{name} has no code"
    for cell in code:
        assert cell.outputs == [] and cell.execution_count is None, f"{name}: a cell was saved with output"
    assert notebook.metadata.get("widgets") is None, f"{name}: widget state was saved"
    assert notebook.cells[0].cell_type == "markdown" and notebook.cells[0].source.startswith("# ")


@pytest.mark.slow
@pytest.mark.parametrize("name", EXPECTED)
def test_notebook_runs_with_nbmake(name, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(NOTEBOOKS.parent) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--nbmake", "--nbmake-timeout=600", "-q", "-p", "no:cacheprovider",
         "-p", "no:xdist", "-p", "no:randomly", "--rootdir", str(tmp_path), str(NOTEBOOKS / name)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{name} failed under nbmake:\n{done.stdout[-6000:]}\n{done.stderr[-3000:]}"
