"""The asynchronous experiments (WKAFL tables, the async comparison), on tiny settings."""

import json

import numpy as np
import pytest
from conftest import MNIST_DIR

from fedjax_avail import experiments
from fedjax_avail.experiments._wkafl import stability
from fedjax_avail.history import History


@pytest.mark.slow
def test_wkafl_experiment_smoke(tmp_path, mnist):
    del mnist
    small = dict(num_clients=60, clients_per_round=4, rounds=6, eval_every=3, model="lr",
                 pixels="unit", history=None, data_dir=str(MNIST_DIR), train_eval_examples=500,
                 algorithms=("wkafl", "twafl", "sasgd", "gsgm", "wkafl_no_selection"))
    outcome = experiments.run(experiments.WKAFL_MNIST, small, tmp_path, progress=False)
    assert [r["algorithm"] for r in outcome.summary] == list(small["algorithms"])
    assert all(r["status"] == "ok" for r in outcome.summary)
    history = outcome.histories["wkafl"]
    assert {"staleness_mean", "staleness_max", "virtual_time"} <= set(history.columns)
    rows = json.loads((tmp_path / "summary.json").read_text())
    assert "stability" in rows[0] and "staleness_mean" in rows[0]


def test_stability_is_the_std_of_log_accuracy():
    acc = np.linspace(0.5, 0.9, 12)
    history = History([{"round": i, "test_accuracy": float(a)} for i, a in
                       enumerate([0.1, *acc])])
    assert stability(history)["stability"] == np.std(np.log(acc[-10:]))
    assert np.isnan(stability(History(history.rows[:5]))["stability"])


@pytest.mark.slow
def test_async_comparison_smoke(tmp_path, mnist):
    del mnist
    small = dict(num_clients=50, clients_per_round=5, concurrency=10, rounds=4, eval_every=2,
                 local_steps=2, data_dir=str(MNIST_DIR))
    outcome = experiments.run(experiments.ASYNC_MNIST, small, tmp_path, progress=False)
    assert all(r["status"] == "ok" for r in outcome.summary)
    assert outcome.histories["fedasync"]["round"][-1] == 4 * 5  # K times as many updates
    assert outcome.histories["fedavg"]["virtual_time"][-1] > 0
    assert (tmp_path / "curves_virtual_time.png").read_bytes()[:4] == b"\x89PNG"


def test_time_to_accuracy_is_the_first_evaluation_at_the_target():
    from fedjax_avail.experiments._time_to_accuracy import time_to_accuracy

    history = History([{"round": r, "virtual_time": 2.5 * r, "test_accuracy": a}
                       for r, a in enumerate([0.1, 0.84, 0.86, 0.83, 0.91, 0.95])])
    got = time_to_accuracy(history)
    assert (got["time_to_85"], got["round_to_85"]) == (5.0, 2.0)
    assert (got["time_to_90"], got["round_to_90"]) == (10.0, 4.0)
    assert np.isnan(time_to_accuracy(history, (0.99,))["time_to_99"])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["time-to-accuracy-mnist", "time-to-accuracy-stragglers-mnist"])
def test_time_to_accuracy_experiment_smoke(tmp_path, mnist, name):
    del mnist
    small = dict(num_clients=40, clients_per_round=8, buffer_size=4, concurrency=8,
                 local_steps=2, max_virtual_time=12.0, eval_every=2, async_eval_every=10,
                 data_dir=str(MNIST_DIR))
    if name == "time-to-accuracy-mnist":
        small["E"] = 5
    experiment = experiments.get(name)
    outcome = experiments.run(experiment, small, tmp_path, progress=False)
    assert [r["algorithm"] for r in outcome.summary] == list(experiment.defaults["algorithms"])
    for algorithm, history in outcome.histories.items():
        times = history["virtual_time"]
        assert times[-1] >= 12.0 and (times[:-1] < 12.0).all(), algorithm  # stopped at the budget
    rows = json.loads((tmp_path / "summary.json").read_text())
    assert {"time_to_85", "time_to_90", "round_to_85"} <= set(rows[0])
    assert (tmp_path / "curves_virtual_time.png").read_bytes()[:4] == b"\x89PNG"


def test_the_two_regimes_differ_where_they_say():
    """Skew: one digit per client, diurnal; stragglers: a Dirichlet split, everyone on,
    heavier-tailed jobs; the synchronous K and the asynchronous K come from their own
    settings (fedavg_small takes the buffer's K)."""
    config = dict(num_clients=30, clients_per_round=6, buffer_size=3, concurrency=6,
                  source="idx", data_dir=str(MNIST_DIR))
    skew = experiments.get("time-to-accuracy-mnist")
    stragglers = experiments.get("time-to-accuracy-stragglers-mnist")
    a = skew.setup(skew.config(config))
    b = stragglers.setup(stragglers.config(config))
    assert (np.array([len(np.unique(a.train.client(i)["y"])) for i in range(30)]) == 1).all()
    assert max(len(np.unique(b.train.client(i)["y"])) for i in range(30)) > 1
    assert type(b.availability).__name__ == "AlwaysOn"
    assert b.algorithms["fedavg"].clients_per_round == 6
    assert b.algorithms["fedavg_small"].clients_per_round == 3
    assert b.algorithms["fedbuff"].buffer_size == 3 and b.algorithms["wkafl"].clients_per_round == 3
    assert b.algorithms["fedbuff"].durations.sigma == 1.0 > a.algorithms["fedbuff"].durations.sigma
    assert b.algorithms["fedbuff"].history is None and a.algorithms["fedbuff"].history == 256
    assert not b.algorithms["mifa"].lr_decay
