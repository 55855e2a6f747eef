"""The Sentiment140 experiments, end to end on a small synthetic CSV in the authors' format."""

import csv

import numpy as np
import pytest
from test_sentiment140 import synthetic_rows

import fedjax_avail as fa
from fedjax_avail import cli, experiments


def _csv(tmp_path):
    path = tmp_path / fa.data.SENTIMENT140_CSV
    with open(path, "w", newline="", encoding="ISO-8859-1") as f:
        writer = csv.writer(f, quoting=csv.QUOTE_ALL)
        for r in synthetic_rows():
            writer.writerow([r[k] for k in ("polarity", "id", "date", "query", "user", "text")])
    return path


@pytest.mark.slow
def test_sentiment140_experiment_runs_every_algorithm_under_sleep_hours(tmp_path):
    overrides = dict(csv_path=str(_csv(tmp_path)), num_clients=3, clients_per_round=2,
                     local_steps=2, E=24, rounds=6, eval_every=3, vocab_size=50,
                     algorithms=("fedavg", "fedlaavg", "sequential"))
    setup = experiments.FEDLAAVG_SENTIMENT140.build(
        experiments.FEDLAAVG_SENTIMENT140.config(overrides))
    # Client "dave" never tweets in hours 1..8: his 8 quiet hours start at 1.
    assert 1 in setup.availability.start_hour.tolist()
    masks = fa.availability.sample(setup.availability, setup.train.num_clients, 24)
    np.testing.assert_array_equal(masks.sum(axis=0), [8] * setup.train.num_clients)
    outcome = experiments.run(experiments.FEDLAAVG_SENTIMENT140, overrides, tmp_path / "out",
                              progress=False)
    assert [r["status"] for r in outcome.summary] == ["ok"] * 3
    assert outcome.histories["fedlaavg"]["round"].tolist() == [0, 3, 6]


def test_sentiment140_rejects_E_that_is_not_whole_days(tmp_path, capsys):
    code = cli.main(["run", "fedlaavg-sentiment140", "--set", f"csv_path={_csv(tmp_path)}",
                     "--set", "E=100", "--out", str(tmp_path / "o"), "--no-progress"])
    assert code == 2 and "multiple of 24" in capsys.readouterr().err
