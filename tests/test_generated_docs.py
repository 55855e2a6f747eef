"""Every results table of the documentation is written from committed results (issue 39).

`docs/generate.py` writes each `<!-- generated: NAME -->` part of README.md, docs/ and
benchmarks/README.md from `docs/results/` and `benchmarks/results/`; these tests fail when a
part differs from what its results give, when a result number sits outside such a part, and
when the status words break their stated rule.
"""

from __future__ import annotations

import csv
import importlib.util
import re
import shutil
import sys

import pytest
from conftest import REPO

from fedjax_avail import experiments

DOCS = REPO / "docs"
sys.path.insert(0, str(DOCS / "tables"))
import common  # noqa: E402  (docs/tables/)
import subtrunc  # noqa: E402


def _load_generate():
    spec = importlib.util.spec_from_file_location("generate", DOCS / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


generate = _load_generate()


def test_every_generated_part_equals_what_its_results_give(capsys):
    assert generate.main(["--check"]) == 0, capsys.readouterr().out[-4000:]


def test_a_changed_result_changes_its_table(tmp_path, monkeypatch):
    """The check can fail: one seed's final client dissimilarity edited in a copy of the
    results moves the mean that Table I shows."""
    shutil.copytree(common.RESULTS / "subtrunc-mnist-lr", tmp_path / "subtrunc-mnist-lr")
    shutil.copytree(common.RESULTS / "subtrunc-mnist-lr-none", tmp_path / "subtrunc-mnist-lr-none")
    before = subtrunc.table1_lr()
    path = tmp_path / "subtrunc-mnist-lr" / "metrics.csv"
    rows = list(csv.DictReader(path.open()))
    last = [r for r in rows if r["algorithm"] == "divfl" and r["seed"] == "0"][-1]
    last["test_client_dissimilarity"] = str(float(last["test_client_dissimilarity"]) + 5.0)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    after = subtrunc.table1_lr()
    assert after != before
    changed = [b for a, b in zip(before.splitlines(), after.splitlines(), strict=True) if a != b]
    assert any(line.startswith("| DivFL") for line in changed), changed
    regenerated, names = generate.regenerate(
        "<!-- generated: subtrunc-table1-lr -->\nold\n<!-- /generated -->\n")
    assert names == ["subtrunc-table1-lr"] and after in regenerated


# A result is a number with three or more decimals, or a decimal with a unit or a ratio (0.914,
# 13.3 ms, 2.81x, 17.3 GB, 5.3%); settings (lr 0.005) are named here, as is the README's
# supported Python.
RESULT = re.compile(r"(?<![\w.])(\d+\.\d{3,}|\d+\.\d+ ?(?:ms|s|GB|MB|x|%))(?![\w.])")
SETTINGS = {"0.005", "0.003", "0.0005", "0.001", "2002.07399", "0.7.1", "0.11.2"}


def _outside_generated(text: str) -> str:
    text = generate.REGION.sub("", text)
    return re.sub(r"```.*?```", "", text, flags=re.S)


@pytest.mark.parametrize("path", generate.DOCUMENTS, ids=lambda p: str(p.relative_to(REPO)))
def test_no_result_number_outside_a_generated_part(path):
    found = [(m.group(1), line.strip()[:100]) for line in _outside_generated(
        path.read_text()).splitlines() for m in RESULT.finditer(line)
        if m.group(1) not in SETTINGS]
    assert not found, found


def test_every_generated_part_is_marked_in_a_document():
    shown = set()
    for path in generate.DOCUMENTS:
        shown.update(generate.region_names(path.read_text()))
    assert shown == set(generate.TABLES), set(generate.TABLES) ^ shown


def test_the_status_rule():
    # within our spread + the paper's: matches; beyond: the gap and its multiple of the spreads
    assert common.agreement(1.0, 0.1, 1.15, 0.1) == "matches within the spreads"
    assert common.agreement(1.0, 0.1, 1.3, 0.1) == "differs by -0.30, 1.5x the spreads"
    assert common.agreement(0.5, 0.0, 0.5) == "matches within the spreads"
    assert common.agreement(0.5, 0.0, 0.6) == "differs by -0.10"
    # an ordering: every seed, the mean only, or reversed; one seed says so
    a, b = {0: 1.0, 1: 2.0, 2: 3.0}, {0: 2.0, 1: 3.0, 2: 4.0}
    assert common.below(a, b).startswith("holds in every seed (paired difference -1.00")
    assert common.below({0: 1.0, 1: 3.5}, {0: 2.0, 1: 3.0}).startswith("same sign in the mean")
    assert common.below(b, a).startswith("reversed in the mean")
    assert common.below({0: 1.0}, {0: 2.0}) == "holds (one seed, -1.00)"


def test_no_status_says_reproduced_where_its_numbers_differ():
    """A paper's row reads "reproduced" only through the status functions' rule, and every
    "matches" names a comparison the rule made."""
    text = (DOCS / "reproducing.md").read_text()
    for line in _outside_generated(text).splitlines():
        assert not re.search(r"\breproduced\b", line) or "reads \"reproduced\"" in line, line
    for cell in re.findall(r"\| (reproduced\b[^|]*) \|", text):
        assert "differs" not in cell and "reversed" not in cell, cell


def test_every_experiment_points_at_committed_results():
    for name, experiment in experiments.REGISTRY.items():
        for folder in re.findall(r"docs/results/([\w.-]+)/", experiment.measured):
            found = list((DOCS / "results" / folder).rglob("summary.json"))
            assert found, (name, folder)  # a folder, or one per algorithm (the GPU runs)
