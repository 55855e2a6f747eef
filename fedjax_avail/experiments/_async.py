"""FedBuff vs FedAsync vs FedAvg under one duration model and one availability process.

No paper runs this comparison: the FedBuff analysis has no experiments (``fedbuff.md`` 6). It
shows what the clock adds: every algorithm's clients take log-normal job times with log-normal
per-client speeds, availability is a bursty Markov process, and the curves are drawn against
server updates and against virtual time (FedAvg's rounds last as long as their slowest client).
FedAsync applies one job per update, so it runs K times as many updates (the same client work).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fedjax_avail import algorithms, availability, clock, data, tasks
from fedjax_avail.experiments._experiment import Experiment, Setup
from fedjax_avail.experiments._fedlaavg import load_mnist_for
from fedjax_avail.experiments._parts import Setting, build_parts, part


def speeds(config: Mapping[str, Any]) -> np.ndarray:
    """each client's speed factor exp(N(0, speed_sigma^2)), drawn with the seed: [N]."""
    rng = np.random.default_rng(config["seed"])
    return np.exp(rng.normal(0, config["speed_sigma"], config["num_clients"]))


# Log-normal job times (mean duration_mean, log-scale sigma duration_sigma) divided by each
# client's log-normal speed factor; time-to-accuracy-mnist runs on this one duration model too.
DURATIONS = part(clock.LogNormal, mean=Setting("duration_mean"),
                 sigma=Setting("duration_sigma"),
                 speed=Setting("speed_sigma", read=speeds, checked_as=(clock.LogNormal, "sigma")))
LOCAL = dict(local_steps=Setting("local_steps"), batch_size=Setting("batch_size"),
             client_lr=Setting("lr"), durations=DURATIONS)
_K = Setting("clients_per_round")
PARTS = {
    "fedavg": part(algorithms.FedAvg, clients_per_round=_K, **LOCAL),
    "fedbuff": part(algorithms.FedBuff, buffer_size=_K, concurrency=Setting("concurrency"),
                    **LOCAL),
    "fedasync": part(algorithms.FedAsync, concurrency=Setting("concurrency"), **LOCAL),
}


def async_setup(config, fd, test, task) -> Setup:
    """FedAvg, FedBuff and FedAsync under one duration model and one availability process."""
    process = availability.Markov(p_on=config["p_on"], p_off=config["p_off"])
    # FedAsync applies one job an update: as many jobs as the others' rounds * K.
    rounds = {"fedasync": config["rounds"] * config["clients_per_round"]}
    return Setup(task, fd, test, process, build_parts(PARTS, config), window=config["rounds"],
                 x_axes=("round", "virtual_time"), rounds=rounds)


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
    parts=PARTS,
    measured=(
        "docs/reproducing.md, FedBuff analysis, from docs/results/async-mnist/"
    ),
)
