"""One set of algorithms under several availability processes of equal mean availability.

No paper runs this: the FedLaAvg paper uses a deterministic diurnal pattern, MIFA uses Bernoulli
availability. Here MNIST with one digit per client (N = 1000, K = 100, C = 10) runs under five
processes whose long-run share of available clients is the same ``mean_availability`` m:

* ``bernoulli``: each client independently with probability m each round;
* ``markov``: bursty on/off chains, ``p_off = markov_p_off`` and ``p_on = p_off m / (1 - m)``
  (mean on-run ``1 / p_off`` rounds);
* ``label-correlated``: MIFA's adversarial Bernoulli, ``p_i = m - s + 2 s label_i / 9`` with
  ``s = 0.8 min(m, 1 - m)`` (so every client has p_i > 0), mean m over the ten digits;
* ``periodic``: ``round(1 / m)`` random groups of clients take turns for E rounds each;
* ``hour-of-day``: each client ``round(24 m)`` hours a day from a random start hour,
  ``rounds_per_hour`` rounds an hour.

The two deterministic patterns reach m only up to that rounding (exactly for m = 0.25).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedjax_avail import availability, data, tasks
from fedjax_avail.experiments._experiment import Experiment, Setup
from fedjax_avail.experiments._fedlaavg import (
    FEDLAAVG_MNIST,
    PARTS,
    load_mnist_for,
    setup_one_label,
)
from fedjax_avail.experiments._sweep import Sweep

PROCESSES = ("bernoulli", "markov", "label-correlated", "periodic", "hour-of-day")


def make_process(
    config: dict[str, Any], fd: data.FederatedData
) -> availability.AvailabilityProcess:
    """The process named ``config["process"]`` with long-run availability share m."""
    m, name = config["mean_availability"], config["process"]
    if not 0 < m < 1:
        raise ValueError(f"mean_availability must be in (0, 1), got {m}")
    rng = np.random.default_rng(config["seed"])
    n = fd.num_clients
    if name == "bernoulli":
        return availability.Bernoulli(m)
    if name == "markov":
        p_off = config["markov_p_off"]
        return availability.Markov(p_on=p_off * m / (1 - m), p_off=p_off)
    if name == "label-correlated":
        spread = 0.8 * min(m, 1 - m)  # p_i > 0: every client is seen eventually
        return availability.Bernoulli.label_correlated(fd.client_labels(), m - spread, m + spread,
                                                       max_label=9)
    if name == "periodic":
        groups = rng.permutation(n) % max(round(1 / m), 1)
        return availability.Periodic(groups.astype(np.int32), period=config["E"])
    if name == "hour-of-day":
        start = rng.integers(0, 24, n).astype(np.int32)
        return availability.HourOfDay(start, hours=max(round(24 * m), 1),
                                      rounds_per_hour=config["rounds_per_hour"])
    raise ValueError(f"process must be one of {PROCESSES}, got {name!r}")


def _build(config: dict[str, Any]) -> Setup:
    train, test = load_mnist_for(config)
    return setup_one_label(config, train, test, tasks.logistic_regression(784, 10), make_process)


AVAILABILITY_MNIST = Experiment(
    name="availability-mnist",
    description="MNIST, one digit per client, under one availability process (equal mean)",
    defaults={
        **FEDLAAVG_MNIST.defaults,
        "process": "bernoulli",
        "mean_availability": 0.25,
        "markov_p_off": 0.1,
        "rounds_per_hour": 5,
        "E": 25,
        "algorithms": ("fedavg", "fedprox", "fedlaavg", "sequential"),
    },
    build=_build,
    meanings={"E": "periodic process: the rounds each group's turn lasts; the amplitude is "
                   "measured over the last 2E rounds",
              "D": "unused by these processes (kept from fedlaavg-mnist)"},
    parts=PARTS,
    choices={"process": PROCESSES},
)

AVAILABILITY_SWEEP_MNIST = Sweep(
    name="availability-sweep-mnist",
    description="FedAvg, FedProx, FedLaAvg under five processes of mean availability 0.25",
    base=AVAILABILITY_MNIST,
    settings={name: {"process": name} for name in PROCESSES},
    measured=(
        "docs/reproducing.md, Beyond the papers (--set rounds=1000), from "
        "docs/results/availability-sweep-mnist/"
    ),
)
