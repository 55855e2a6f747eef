"""Time to accuracy: synchronous and asynchronous algorithms on one virtual clock, two regimes.

No paper runs this comparison; it is what the one clock is for. Each algorithm's signature shows
in its own regime, so there are two experiments on MNIST with logistic regression:

* ``time-to-accuracy-mnist``, **availability skew**: one digit per client and FedLaAvg's diurnal
  pattern (Sec. 6.1.3) in virtual time: clients holding digits < D are on for E time units, then
  the others. The latest-update methods (FedLaAvg, MIFA) keep the absent half's updates in the
  average; this is where they should lead.
* ``time-to-accuracy-stragglers-mnist``, **stragglers**: a Dirichlet(0.5) label split, every
  client always available, heavy-tailed job times (log-normal, sigma 1). A synchronous round waits
  for its slowest member; a buffered asynchronous server (FedBuff) updates as soon as its K
  results are in; this is where it should lead (the direction of the FedBuff paper's
  "faster than synchronous FL").

In both, every client's job time is log-normal with a log-normal per-client speed factor; the
synchronous rounds take K = ``clients_per_round`` clients (100 of N = 1000: FedLaAvg's
beta = 0.1) and the asynchronous servers wait for ``buffer_size`` results (FedBuff's K = 10)
with ``concurrency`` jobs in flight (M = 100). Every run gets the same virtual-time budget, and
the summary reports the virtual time at which each first reaches 85% and 90% test accuracy (the
first evaluation at or above; None if not within the budget).
"""

from __future__ import annotations

from functools import partial
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
_BUFFER = Setting("buffer_size")
_HISTORY = Setting("history")
PARTS = {
    "fedavg": part(algorithms.FedAvg, clients_per_round=_K, **LOCAL),
    # FedAvg with the asynchronous servers' K: shorter rounds (the slowest of fewer clients)
    "fedavg_small": part(algorithms.FedAvg, clients_per_round=_BUFFER, **LOCAL),
    "fedlaavg": part(algorithms.FedLaAvg, clients_per_round=_K, **LOCAL),
    # a constant learning rate like every other algorithm here (MIFA's code decays it as 1/t)
    "mifa": part(algorithms.MIFA, clients_per_round=_K, lr_decay=False, **LOCAL),
    "divfl": part(algorithms.FedAvg, clients_per_round=_K, selection=part(selection.DivFL),
                  **LOCAL),
    "fedbuff": part(algorithms.FedBuff, buffer_size=_BUFFER, concurrency=Setting("concurrency"),
                    history=_HISTORY, **LOCAL),
    "wkafl": part(algorithms.WKAFL, clients_per_round=_BUFFER, concurrency=Setting("concurrency"),
                  history=_HISTORY, durations=DURATIONS, client_lr=Setting("wkafl_lr")),
}


def time_to_accuracy_setup(config: dict[str, Any], task: tasks.Task, fd: data.FederatedData,
                           test, process, targets: tuple[float, ...] = TARGETS) -> Setup:
    """``PARTS`` on one virtual-time budget, curves against virtual time, the asynchronous
    servers evaluated every ``async_eval_every`` updates, the summary the time to ``targets``."""
    eval_every = {name: config["async_eval_every"] for name in ASYNCHRONOUS}
    return Setup(task, fd, test, process, build_parts(PARTS, config), window=config["eval_every"],
                 summary=partial(time_to_accuracy, targets=tuple(targets)),
                 x_axes=("virtual_time", "round"), max_virtual_time=config["max_virtual_time"],
                 eval_every=eval_every)


def _setup(config: dict[str, Any], fd: data.FederatedData, test, process) -> Setup:
    return time_to_accuracy_setup(config, tasks.logistic_regression(784, 10), fd, test, process)


def _build_skew(config: dict[str, Any]) -> Setup:
    train, test = load_mnist_for(config)
    fd = data.one_label_per_client(train["x"], train["y"], config["num_clients"],
                                   seed=config["seed"])
    process = availability.diurnal(fd.client_labels(), D=config["D"], E=config["E"])
    return _setup(config, fd, test, process)


def _build_stragglers(config: dict[str, Any]) -> Setup:
    train, test = load_mnist_for(config)
    fd = data.dirichlet(train["x"], train["y"], config["num_clients"],
                        alpha=config["dirichlet_alpha"], seed=config["seed"])
    return _setup(config, fd, test, availability.AlwaysOn())


_COMMON = dict(
    num_clients=1000, clients_per_round=100, buffer_size=10, concurrency=100, local_steps=10,
    batch_size=5, lr=0.01, wkafl_lr=0.05, duration_mean=1.0, speed_sigma=0.5,
    rounds=100_000, seed=0, source="idx", data_dir=None,
)
_MEANINGS = {
    "clients_per_round": "K of a synchronous round (FedAvg, FedLaAvg, MIFA, DivFL): 100 of "
                         "N = 1000 is FedLaAvg's beta = 0.1",
    "buffer_size": "K of the asynchronous servers: the results an update waits for (FedBuff's "
                   "K = 10, WKAFL's K), and fedavg_small's cohort",
    "concurrency": "jobs in flight at once (FedBuff, WKAFL)",
    "history": "H, the global models FedBuff and WKAFL keep for stale jobs (none: each "
               "client's start model, exact however stale a job: the stragglers regime's "
               "heavy-tailed jobs outlive 256 updates)",
    "max_virtual_time": "the virtual-time budget every algorithm runs for",
    "rounds": "a cap on rounds (server updates); the budget normally ends a run first",
    "eval_every": "synchronous rounds between evaluations",
    "async_eval_every": "asynchronous server updates between evaluations",
    "wkafl_lr": "WKAFL's eta_0 (one gradient per job; logistic regression, as in "
                "wkafl-mnist-table2 --set model=lr)",
}

TIME_TO_ACCURACY_MNIST = Experiment(
    name="time-to-accuracy-mnist",
    description="availability skew: virtual time to 85%/90% accuracy of FedAvg, FedLaAvg, MIFA, "
                "FedBuff, WKAFL under diurnal availability and log-normal speeds, MNIST",
    defaults=dict(
        _COMMON, D=5, E=100, duration_sigma=0.5, history=256, max_virtual_time=2000.0, eval_every=5,
        async_eval_every=100, algorithms=("fedavg", "fedlaavg", "mifa", "fedbuff", "wkafl"),
    ),
    build=_build_skew,
    meanings={
        **_MEANINGS,
        "E": "virtual time units each half of the clients is on (diurnal phase)",
    },
    measured=(
        "docs/reproducing.md, Time to accuracy, from docs/results/time-to-accuracy-mnist/"
    ),
    parts=PARTS,
)

TIME_TO_ACCURACY_STRAGGLERS_MNIST = Experiment(
    name="time-to-accuracy-stragglers-mnist",
    description="stragglers: virtual time to 85%/90% accuracy of FedAvg (K = 100 and 10), "
                "FedLaAvg, MIFA, FedBuff, WKAFL with heavy-tailed job times, everyone available, "
                "MNIST Dirichlet(0.5)",
    defaults=dict(
        _COMMON, dirichlet_alpha=0.5, duration_sigma=1.0, history=None, max_virtual_time=1000.0,
        eval_every=1, async_eval_every=20,
        algorithms=("fedavg", "fedavg_small", "fedlaavg", "mifa", "fedbuff", "wkafl"),
    ),
    build=_build_stragglers,
    meanings=_MEANINGS,
    measured=(
        "docs/reproducing.md, Time to accuracy, from "
        "docs/results/time-to-accuracy-stragglers-mnist/"
    ),
    parts=PARTS,
)
