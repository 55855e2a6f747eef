"""FedBuff vs FedAsync vs FedAvg under one duration model and one availability process.

No paper runs this comparison: the FedBuff analysis has no experiments (``fedbuff.md`` 6). It
shows what the clock adds: every algorithm's clients take log-normal job times with log-normal
per-client speeds, availability is a bursty Markov process, and the curves are drawn against
server updates and against virtual time (FedAvg's rounds last as long as their slowest client).
FedAsync applies one job per update, so it runs K times as many updates (the same client work).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedjax_avail import algorithms, availability, clock, data, tasks
from fedjax_avail.experiments._experiment import Experiment, Setup
from fedjax_avail.experiments._fedlaavg import load_mnist_for
from fedjax_avail.experiments._settings import check_choice

ALGORITHMS = ("fedavg", "fedbuff", "fedasync")


def async_setup(config, fd, test, task) -> Setup:
    """FedAvg, FedBuff and FedAsync under one duration model and one availability process."""
    n, k = fd.num_clients, config["clients_per_round"]
    speed = np.exp(np.random.default_rng(config["seed"]).normal(0, config["speed_sigma"], n))
    durations = clock.LogNormal(config["duration_mean"], config["duration_sigma"], speed=speed)
    local = dict(local_steps=config["local_steps"], batch_size=config["batch_size"],
                 client_lr=config["lr"])
    factories = {
        "fedavg": lambda: algorithms.FedAvg(clients_per_round=k, durations=durations, **local),
        "fedbuff": lambda: algorithms.FedBuff(buffer_size=k, concurrency=config["concurrency"],
                                              durations=durations, **local),
        "fedasync": lambda: algorithms.FedAsync(concurrency=config["concurrency"],
                                                durations=durations, **local),
    }
    check_choice("algorithms", tuple(config["algorithms"]), ALGORITHMS)
    process = availability.Markov(p_on=config["p_on"], p_off=config["p_off"])
    algs = {name: factories[name]() for name in config["algorithms"]}
    # FedAsync applies one job an update: as many jobs as the others' rounds * K.
    rounds = {"fedasync": config["rounds"] * k}
    return Setup(task, fd, test, process, algs, window=config["rounds"], x_axes=("round",
                 "virtual_time"), rounds=rounds)


def _build_async(config: dict[str, Any]) -> Setup:
    train, test = load_mnist_for(config)
    fd = data.one_label_per_client(train["x"], train["y"], config["num_clients"],
                                   seed=config["seed"])
    return async_setup(config, fd, test, tasks.logistic_regression(784, 10))


ASYNC_MNIST = Experiment(
    name="async-mnist",
    description="FedBuff vs FedAsync vs FedAvg: log-normal job times, bursty availability, MNIST",
    defaults=dict(
        num_clients=1000, clients_per_round=10, concurrency=100, local_steps=10, batch_size=5,
        lr=0.01, rounds=1000, eval_every=20, seed=0, duration_mean=1.0, duration_sigma=0.5,
        speed_sigma=0.5, p_on=0.05, p_off=0.05, algorithms=("fedavg", "fedbuff", "fedasync"),
        source="idx", data_dir=None,
    ),
    build=_build_async,
    meanings={"clients_per_round": "K, the clients of a FedAvg round and the uploads of a "
                                   "FedBuff update",
              "rounds": "the server updates to run (FedAsync runs rounds * K, one job each)"},
    choices={"algorithms": ALGORITHMS},
    measured=(
        "`fedjax-avail run async-mnist` (2026-11-22, 2-core CPU): final test acc / virtual time "
        "/ mean staleness: fedavg 0.907 / 2937 / 0, fedbuff 0.909 / 122 / 7.3, fedasync (10,000 "
        "updates) 0.888 / 207 / 31.4."
    ),
)
