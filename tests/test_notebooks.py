"""Every notebook in notebooks/ runs top to bottom (on small settings) and is stored clean.

The small settings are injected as a cell after each notebook's ``# settings`` cell (tagged
``parameters``, as papermill does), so the notebooks keep their own laptop-sized defaults.
"""

from __future__ import annotations

import json
import re

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib
from conftest import MNIST_DIR, REPO

pytestmark = pytest.mark.slow  # a long tier: `pytest -m slow` (.ci/run runs it)

NOTEBOOKS = sorted((REPO / "notebooks").glob("*.ipynb"))
SMALL = {
    "01_quickstart.ipynb": "ROUNDS, E, EVAL_EVERY = 120, 20, 20",
    "02_availability_gallery.ipynb": "NUM_CLIENTS, STEPS = 100, 120",
    "03_write_your_own_algorithm.ipynb": "ROUNDS = 60",
    "04_asynchrony.ipynb": "UPDATES = 100",
    "05_fair_selection.ipynb": "ROUNDS, SEEDS = 20, [0, 1]",
    "06_scaling.ipynb": "MAX_N, ROUNDS = 10**4, 5",
    "07_real_traces.ipynb": "HIDDEN, SEQ_LEN, BUDGET_MINUTES, DEVICES = 16, 20, 240, 200",
}


def _repository() -> str:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return project["urls"]["Repository"]


def _jax_range() -> str:
    """The version range pyproject.toml gives jax (e.g. ``>=0.7.1,<0.12``)."""
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    return next(d.removeprefix("jax") for d in deps if d.startswith("jax>="))


def test_every_notebook_has_small_settings():
    assert [p.name for p in NOTEBOOKS] == sorted(SMALL)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_stored_clean_and_opens_in_colab(path):
    notebook = json.loads(path.read_text())
    cells = notebook["cells"]
    for cell in cells:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None, path.name
    repository = _repository()
    slug = repository.removeprefix("https://github.com/")
    badge = f"https://colab.research.google.com/github/{slug}/blob/main/notebooks/{path.name}"
    assert badge in "".join(cells[0]["source"])
    install = "".join(cells[1]["source"])
    assert f"git+{repository}" in install and "find_spec(\"fedjax_avail\")" in install
    # On a GPU runtime (Colab) the install keeps a CUDA JAX: the extra exists and is asked for.
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert extras["cuda12"] == ["jax[cuda12]" + _jax_range()]
    assert '"[cuda12]" if shutil.which("nvidia-smi")' in install
    tagged = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1 and "".join(tagged[0]["source"]).startswith("# settings")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs_top_to_bottom(path, mnist, monkeypatch):
    del mnist
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.read(path, as_version=4)
    index = next(i for i, c in enumerate(notebook.cells)
                 if "parameters" in c.metadata.get("tags", []))
    small = nbformat.v4.new_code_cell(SMALL[path.name])
    small.metadata["tags"] = ["injected-parameters"]
    notebook.cells.insert(index + 1, small)
    monkeypatch.setenv("FEDJAX_AVAIL_MNIST_DIR", str(MNIST_DIR))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    client = nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    errors = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "error"]
    assert not errors
    text = "".join(o.get("text", "") for c in notebook.cells if c.cell_type == "code"
                   for o in c.outputs)
    assert not re.search(r"\bnan\b", text), "a notebook printed NaN"
