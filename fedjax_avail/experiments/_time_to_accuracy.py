"""Time to accuracy: synchronous and asynchronous algorithms on one virtual clock.

No paper runs this comparison; it is what the one clock is for. FedAvg, FedLaAvg, DivFL (FedAvg
with DivFL's selection), FedBuff and WKAFL train on MNIST under **one** diurnal availability
process (clients holding digits < D on for E time units, then the others, FedLaAvg's Sec. 6.1.3
pattern, here in virtual time) and **one** speed model (log-normal job times with log-normal
per-client speed factors). Synchronous rounds last as long as their slowest participant; the
asynchronous servers update whenever their K results are in. Every run gets the same
virtual-time budget, and the summary reports the virtual time at which each first reaches 85% and
90% test accuracy (the first evaluation at or above; None if not within the budget).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedjax_avail import algorithms, availability, data, selection, tasks
from fedjax_avail.experiments._async import DURATIONS, LOCAL
from fedjax_avail.experiments._experiment import Experiment, Setup
from fedjax_avail.experiments._fedlaavg import load_mnist_for
from fedjax_avail.experiments._parts import Setting, build_parts, part
from fedjax_avail.history import History

ASYNCHRONOUS = ("fedbuff", "wkafl")
TARGETS = (0.85, 0.90)


def time_to_accuracy(history: History, targets: tuple[float, ...] = TARGETS
                     ) -> dict[str, float]:
    """``time_to_<pct>`` and ``round_to_<pct>``: the virtual time and the round (server update)
    of the first evaluation with test accuracy >= each target; NaN if none reached it."""
    accuracy, time, rounds = (history[c] for c in ("test_accuracy", "virtual_time", "round"))
    out = {}
    for target in targets:
        reached = np.flatnonzero(accuracy >= target)
        pct = round(100 * target)
        out[f"time_to_{pct}"] = float(time[reached[0]]) if reached.size else float("nan")
        out[f"round_to_{pct}"] = float(rounds[reached[0]]) if reached.size else float("nan")
    return out


_K = Setting("clients_per_round")
PARTS = {
    "fedavg": part(algorithms.FedAvg, clients_per_round=_K, **LOCAL),
    "fedlaavg": part(algorithms.FedLaAvg, clients_per_round=_K, **LOCAL),
    "divfl": part(algorithms.FedAvg, clients_per_round=_K, selection=part(selection.DivFL),
                  **LOCAL),
    "fedbuff": part(algorithms.FedBuff, buffer_size=_K, concurrency=Setting("concurrency"),
                    **LOCAL),
    "wkafl": part(algorithms.WKAFL, clients_per_round=_K, concurrency=Setting("concurrency"),
                  durations=DURATIONS, client_lr=Setting("wkafl_lr")),
}
ALGORITHMS = tuple(PARTS)


def _build(config: dict[str, Any]) -> Setup:
    train, test = load_mnist_for(config)
    fd = data.one_label_per_client(train["x"], train["y"], config["num_clients"],
                                   seed=config["seed"])
    algs = build_parts(PARTS, config)
    process = availability.diurnal(fd.client_labels(), D=config["D"], E=config["E"])
    eval_every = {name: config["async_eval_every"] for name in ASYNCHRONOUS}
    return Setup(tasks.logistic_regression(784, 10), fd, test, process, algs,
                 window=config["eval_every"], summary=time_to_accuracy,
                 x_axes=("virtual_time", "round"), max_virtual_time=config["max_virtual_time"],
                 eval_every=eval_every)


TIME_TO_ACCURACY_MNIST = Experiment(
    name="time-to-accuracy-mnist",
    description="virtual time to 85%/90% accuracy: FedAvg, FedLaAvg, DivFL, FedBuff, WKAFL on "
                "one clock (diurnal availability, log-normal speeds), MNIST",
    defaults=dict(
        num_clients=1000, clients_per_round=10, concurrency=100, local_steps=10, batch_size=5,
        lr=0.01, wkafl_lr=0.05, D=5, E=100, duration_mean=1.0, duration_sigma=0.5,
        speed_sigma=0.5, max_virtual_time=3000.0, rounds=100_000, eval_every=5,
        async_eval_every=100, seed=0, algorithms=ALGORITHMS, source="idx", data_dir=None,
    ),
    build=_build,
    meanings={
        "clients_per_round": "K: a synchronous round's cohort, and the results an asynchronous "
                             "update waits for",
        "concurrency": "jobs in flight at once (FedBuff, WKAFL)",
        "E": "virtual time units each half of the clients is on (diurnal phase)",
        "max_virtual_time": "the virtual-time budget every algorithm runs for",
        "rounds": "a cap on rounds (server updates); the budget normally ends a run first",
        "eval_every": "synchronous rounds between evaluations",
        "async_eval_every": "asynchronous server updates between evaluations",
        "wkafl_lr": "WKAFL's eta_0 (one gradient per job; logistic regression, as in "
                    "wkafl-mnist-table2 --set model=lr)",
    },
    measured=(
        "docs/reproducing.md, FedBuff analysis, from docs/results/time-to-accuracy-mnist/"
    ),
    parts=PARTS,
)
