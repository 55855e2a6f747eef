"""Shakespeare under device availability: FedAvg, FedLaAvg, MIFA and FedBuff on one clock.

No paper runs this; it is the availability question on a naturally partitioned dataset. LEAF's
next-character task offline (:func:`fedjax_avail.data.load_shakespeare`: one client per play
and speaking role, windows of 80 characters) trains LEAF's LSTM (an 8-d character embedding,
``num_layers`` LSTM layers of ``hidden`` units; LEAF and FedJAX use 2 x 256, the default here
is 1 x 64 for CPUs) under one of two availability processes, on a clock of one-minute slots:

* ``fedscale-trace``: device intervals in FedScale's ``client_behave_trace`` format
  (:func:`fedjax_avail.availability.from_fedscale`, one minute a slot): by default
  :func:`~fedjax_avail.availability.example_fedscale_trace` (``trace_devices`` devices, a week,
  daily sessions; about 4% of devices on in the afternoon and 37% at night), or the file at
  ``trace_path``: FedScale's pickle, or the plain-text format (``client,start,end`` seconds,
  ``.csv`` or ``.jsonl``; repeating every ``trace_period`` seconds, none: played once);
* ``diurnal``: the roles of the first half of the plays (in file order) are available for ``E``
  minutes, then those of the other half (FedLaAvg's diurnal pattern, Sec. 6.1.3, over a
  natural partition: who is available decides which plays' text is learnt).

Every job takes a log-normal time (mean ``duration_mean`` minutes) divided by its client's
log-normal speed factor, as in ``time-to-accuracy-mnist``; the synchronous rounds take K =
``clients_per_round`` of the available clients (LEAF's 10), FedBuff waits for ``buffer_size``
results with ``concurrency`` jobs in flight. Every algorithm runs for ``max_virtual_time``
minutes; the summary gives the virtual time to each of ``targets`` test accuracies, scored on
``test_examples`` held-out windows drawn once with the seed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fedjax_avail import availability, data, tasks
from fedjax_avail.experiments._experiment import Experiment, Setup
from fedjax_avail.experiments._sweep import Sweep
from fedjax_avail.experiments._time_to_accuracy import PARTS, time_to_accuracy_setup

PROCESSES = ("fedscale-trace", "diurnal")
SECONDS_PER_SLOT = 60.0  # one slot of the clock (and one unit of virtual time) is a minute
TRACE_DAYS = 7


def select_roles(loaded: data.Shakespeare, num_clients: int, seed: int
                 ) -> tuple[data.FederatedData, dict[str, np.ndarray], list[tuple[str, str]]]:
    """``num_clients`` roles drawn with ``seed`` (all where that is every role), kept in file
    order: their training data, their held-out windows (``client`` renumbered) and their
    (play, role)."""
    total = loaded.train.num_clients
    if num_clients == total:
        return loaded.train, loaded.test, list(loaded.clients)
    if num_clients > total:
        raise ValueError(f"setting num_clients must be at most the {total} roles with data, "
                         f"got {num_clients}")
    chosen = np.sort(np.random.default_rng(seed).choice(total, num_clients, replace=False))
    train = data.FederatedData.from_client_arrays([loaded.train.client(i) for i in chosen])
    new_id = np.full(total, -1)
    new_id[chosen] = np.arange(num_clients)
    keep = new_id[loaded.test["client"]] >= 0
    test = {k: v[keep] for k, v in loaded.test.items()}
    test["client"] = new_id[test["client"]].astype(np.int32)
    return train, test, [loaded.clients[i] for i in chosen]


def make_process(config: dict[str, Any], roles: list[tuple[str, str]]
                 ) -> availability.AvailabilityProcess:
    """The process named ``config["process"]`` for these roles (module docstring)."""
    n = len(roles)
    if config["process"] == "diurnal":
        plays = list(dict.fromkeys(play for play, _ in roles))
        if len(plays) < 2:
            raise ValueError("the diurnal process needs roles from at least 2 plays, got "
                             f"{plays}")
        second_half = set(plays[len(plays) // 2:])
        groups = np.array([play in second_half for play, _ in roles], np.int32)
        return availability.Periodic(groups, period=config["E"])
    if config["process"] != "fedscale-trace":
        raise ValueError(f"setting process must be one of {PROCESSES}, got "
                         f"{config['process']!r}")
    path = config["trace_path"]
    if path is not None and Path(path).suffix.lower() in (".csv", ".jsonl"):
        return availability.Intervals.from_file(path, n, period=config["trace_period"],
                                                seconds_per_slot=SECONDS_PER_SLOT)
    if config["trace_period"] is not None:
        raise ValueError(f"setting trace_period={config['trace_period']} applies to a .csv or "
                         ".jsonl trace_path only (FedScale's entries carry their finish_time), "
                         f"got trace_path={path!r}")
    trace = path if path is not None else availability.example_fedscale_trace(
        config["trace_devices"], TRACE_DAYS, seed=config["seed"])
    return availability.from_fedscale(trace, n, seconds_per_slot=SECONDS_PER_SLOT)


def _build(config: dict[str, Any]) -> Setup:
    loaded = data.load_shakespeare(seq_len=config["seq_len"])
    train, test, roles = select_roles(loaded, config["num_clients"], config["seed"])
    rng = np.random.default_rng(config["seed"])
    rows = np.sort(rng.choice(len(test["y"]), min(config["test_examples"], len(test["y"])),
                              replace=False))
    task = tasks.next_character_lstm(len(loaded.vocab), embed_dim=8, hidden=config["hidden"],
                                     num_layers=config["num_layers"])
    return time_to_accuracy_setup(config, task, train, {k: test[k][rows] for k in ("x", "y")},
                                  make_process(config, roles), targets=config["targets"])


SHAKESPEARE = Experiment(
    name="shakespeare",
    description="Shakespeare next-character (LEAF, offline): virtual time to accuracy of "
                "FedAvg, FedLaAvg, MIFA, FedBuff under one availability process",
    defaults=dict(
        process="fedscale-trace", num_clients=1000, seq_len=80, hidden=64, num_layers=1,
        clients_per_round=10, buffer_size=10, concurrency=20, local_steps=10, batch_size=10,
        lr=1.0, wkafl_lr=1.0, history=256, duration_mean=5.0, duration_sigma=0.5,
        speed_sigma=0.5, E=720, trace_devices=1000, trace_path=None, trace_period=None,
        max_virtual_time=2880.0, rounds=100_000, eval_every=10, async_eval_every=10,
        targets=(0.35, 0.40), test_examples=2000, train_eval_examples=2000, seed=0,
        algorithms=("fedavg", "fedlaavg", "mifa", "fedbuff"),
    ),
    build=_build,
    meanings={
        "process": "the availability process: fedscale-trace or diurnal (module docstring of "
                   "experiments/_shakespeare)",
        "num_clients": "N, the (play, role) clients drawn with the seed, of the 1,183 roles "
                       "with an 80-character window",
        "clients_per_round": "K of a synchronous round (FedAvg, FedLaAvg, MIFA): LEAF's 10",
        "buffer_size": "K of the asynchronous servers: the results an update waits for",
        "concurrency": "jobs in flight at once (FedBuff, WKAFL)",
        "E": "diurnal process: the minutes each half of the plays is available",
        "duration_mean": "the mean of a job's log-normal duration, in minutes",
        "max_virtual_time": "the minutes of virtual time every algorithm runs for (2 days)",
        "rounds": "a cap on rounds (server updates); the budget normally ends a run first",
        "eval_every": "synchronous rounds between evaluations",
        "async_eval_every": "asynchronous server updates between evaluations",
        "wkafl_lr": "WKAFL's eta_0, where algorithms names wkafl",
    },
    choices={"process": PROCESSES},
    parts=PARTS,
)

SHAKESPEARE_AVAILABILITY = Sweep(
    name="shakespeare-availability",
    description="Shakespeare (LEAF, offline): FedAvg, FedLaAvg, MIFA, FedBuff under a "
                "FedScale-format device trace and under diurnal availability",
    base=SHAKESPEARE,
    settings={name: {"process": name} for name in PROCESSES},
    measured=(
        "docs/reproducing.md, Shakespeare's clients under a device trace, from "
        "docs/results/shakespeare-availability/"
    ),
)
