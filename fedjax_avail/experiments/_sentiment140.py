"""FedLaAvg's Sentiment140 experiments (Sec. 6, P:L339, L399-413): Fig. 6/10 and 7/11.

Users with more than 40 tweets are clients; a 2-layer LSTM with 16 hidden units reads 25-d GloVe
Twitter embeddings; each client is available during the 8 hours of the day in which it tweets
least; the positive share of tweets follows the hour of day with skew alpha. These runs need the
data (``--set csv_path=...`` for the authors' CSV, or TFDS ``sentiment140``) and, for the paper's
embeddings, ``--set glove_path=.../glove.twitter.27B.25d.txt``; they are meant for users'
machines, and CI runs them on a small synthetic CSV.
"""

from __future__ import annotations

from typing import Any

from fedjax_avail import availability, data, tasks
from fedjax_avail.experiments._experiment import Experiment, Setup
from fedjax_avail.experiments._fedlaavg import (
    FIG4_ALGORITHMS,
    PARTS,
    algorithms_from_config,
)
from fedjax_avail.experiments._sweep import BETA_SETTINGS, N_SETTINGS, Sweep


def _build(config: dict[str, Any]) -> Setup:
    if config["E"] < 24 or config["E"] % 24:
        raise ValueError(f"E (rounds per simulated day) must be a positive multiple of 24, got "
                         f"{config['E']}")
    loaded = data.load_sentiment140(
        config["csv_path"], data_dir=config["data_dir"], download=config["download"],
        num_clients=config["num_clients"], alpha=config["alpha"], max_len=config["max_len"],
        vocab_size=config["vocab_size"], seed=config["seed"],
    )
    embeddings = (data.load_glove(config["glove_path"], loaded.vocab)
                  if config["glove_path"] else None)
    task = tasks.lstm_classifier(len(loaded.vocab), embeddings=embeddings)
    # The paper's E (24, 120, 240) read as rounds per simulated day (spec sec. 4.1, reading (a)).
    process = availability.HourOfDay(
        data.sleep_start_hours(loaded.train), hours=8, rounds_per_hour=config["E"] // 24
    )
    test = {k: loaded.test[k] for k in ("x", "y")}
    return Setup(task, loaded.train, test, process, algorithms_from_config(config),
                 window=config["E"], window_of=lambda p: config["E"] if (
                     p.rounds_per_hour == config["E"] // 24) else 24 * int(p.rounds_per_hour))


FEDLAAVG_SENTIMENT140 = Experiment(
    name="fedlaavg-sentiment140",
    description="FedLaAvg Fig. 6/10: Sentiment140, LSTM, sleep-hour availability (E, alpha)",
    defaults=dict(
        num_clients=1000, clients_per_round=100, beta=None, local_steps=10, batch_size=2,
        lr=0.01,
        E=120, alpha=0.0, mu=0.01, rounds=2000, eval_every=20, seed=0,
        algorithms=("fedsgd", "fedavg", "fedprox", "fedlaavg", "sequential"),
        csv_path=None, data_dir=None, download=True, glove_path=None, max_len=25,
        vocab_size=10000,
    ),
    build=_build,
    meanings={"E": "rounds per simulated day, a multiple of 24 (each client is available 8 "
                   "hours a day); the amplitude is measured over the last E rounds",
              "data_dir": "the TFDS data directory (TFDS only)"},
    parts=PARTS,
)

FEDLAAVG_SENTIMENT140_FIG6 = Sweep(
    name="fedlaavg-sentiment140-fig6",
    description="FedLaAvg Fig. 6/10 (Sentiment140): the five (E, alpha) settings",
    base=FEDLAAVG_SENTIMENT140,
    settings={
        "E=120, a=0.25": dict(E=120, alpha=0.25),
        "E=120, a=0.5": dict(E=120, alpha=0.5),
        "E=24, a=0": dict(E=24, alpha=0.0),
        "E=120, a=0": dict(E=120, alpha=0.0),
        "E=240, a=0": dict(E=240, alpha=0.0),
    },
    defaults=dict(algorithms=FIG4_ALGORITHMS),
)

FEDLAAVG_SENTIMENT140_FIG7_N = Sweep(
    name="fedlaavg-sentiment140-fig7-n",
    description="FedLaAvg Fig. 7a/11a (Sentiment140): FedLaAvg for several N (beta = 0.1)",
    base=FEDLAAVG_SENTIMENT140,
    settings=N_SETTINGS,
    defaults=dict(algorithms=("fedlaavg",)),
    overlay=True,
)

FEDLAAVG_SENTIMENT140_FIG7_BETA = Sweep(
    name="fedlaavg-sentiment140-fig7-beta",
    description="FedLaAvg Fig. 7b/11b (Sentiment140): FedLaAvg for several beta (N = 1000)",
    base=FEDLAAVG_SENTIMENT140,
    settings=BETA_SETTINGS,
    defaults=dict(algorithms=("fedlaavg",)),
    overlay=True,
)
