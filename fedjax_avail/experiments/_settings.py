"""Checks of experiment settings, naming the setting as the user typed it (``--set lr=-1``).

A setting that feeds a field of the experiment's parts (``lr`` for every algorithm's
``client_lr``: its :class:`~fedjax_avail.experiments._parts.Part` declarations) is checked by
that field's own annotation, the one source of truth the Python API checks too; each other
setting of an experiment's own (rounds, the data split, the availability pattern) by its
annotation in :data:`SETTINGS`, in the same layer (:mod:`fedjax_avail._checks`); a setting
neither knows is checked by the library call it feeds; a part's field by its dotted name
(``fedbuff.history``) is checked when it is applied (:mod:`fedjax_avail.experiments._parts`).
A setting whose value must be one of a fixed set has its choices in :data:`CHOICES` (or an
experiment's own ``choices``): the checks here and the settings listed by ``describe`` and
``run NAME --help`` read them from there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedjax_avail._checks import (
    Annotated,
    Count,
    Fraction,
    Positive,
    Range,
    Seed,
    check_value,
    field_hints,
)
from fedjax_avail.inputs import MAX_ROUNDS
from fedjax_avail.selection import PHIS
from fedjax_avail.tables import TABLE_DTYPES

# The experiments' own settings (no part's field takes them as they are), each with the
# annotation that checks it, in the annotation layer the Python API checks with
# (:mod:`fedjax_avail._checks`).
SETTINGS: dict[str, Any] = {
    "num_clients": Count,
    "rounds": Annotated[int, Range(1, MAX_ROUNDS, high_open=True)],
    "eval_every": Count,
    "seed": Seed,
    "E": Count,
    "D": Count,
    "alpha": Annotated[float, Range(0, 0.5)],
    "dirichlet_alpha": Positive,
    "mean_availability": Annotated[float, Range(0, 1, low_open=True, high_open=True)],
    "markov_p_off": Fraction,
    "rounds_per_hour": Count,
    "labels": Count,
    "min_size": Count,
    "max_size": Count,
    "p_on": Fraction,
    "p_off": Fraction,
    "beta": Fraction,
    "classes": Count,
    "poc_d": Count,
    "seeds": tuple[Seed, ...],
    "train_eval_examples": Count,
    "async_eval_every": Count,
    "max_virtual_time": Positive,
    "algorithms": tuple[str, ...],
    "data_dir": str,
    "csv_path": str,
    "glove_path": str,
    "download": bool,
    "max_len": Count,
    "vocab_size": Count,
    "seq_len": Count,
    "hidden": Count,
    "num_layers": Count,
    "test_examples": Count,
    "targets": tuple[Fraction, ...],
    "trace_devices": Count,
    "trace_path": str,
    "trace_period": Positive,
}
# What a refusal of these settings adds, to show the form a value takes.
EXAMPLES = {
    "seeds": "e.g. --set seeds=0,1,2,3,4",
    "data_dir": "a folder path, e.g. --set data_dir=~/data/mnist",
    "algorithms": "e.g. --set algorithms=fedavg,fedlaavg",
}

# Settings shared by several experiments whose value must be one of these; an experiment adds
# or replaces entries with its own ``choices`` (e.g. its ``algorithms``, its ``model``).
CHOICES: dict[str, tuple[str, ...]] = {
    "source": ("idx", "tfds"),
    "table_dtype": TABLE_DTYPES,
    "pixels": ("raw", "unit"),
    "phi": PHIS,
}

# One line of meaning per setting, shown by ``describe`` and ``run NAME --help``; an experiment
# whose setting means something else there says so in its own ``meanings``.
MEANINGS: dict[str, str] = {
    "num_clients": "N, the clients the training set is split among",
    "clients_per_round": "K, the clients that train in each round (the cohort)",
    "beta": "K as a share of N: K = round(beta * N) (none: clients_per_round sets K)",
    "local_steps": "C, the local SGD steps a client takes in a round",
    "batch_size": "B, the examples of one local SGD step",
    "lr": "the clients' learning rate (constant, the same for every algorithm)",
    "E": "diurnal availability: clients with labels < D are available for E rounds, then the "
         "others for E rounds; the amplitude is measured over the last 2E rounds",
    "D": "diurnal availability: the clients holding labels < D form the first group",
    "mu": "FedProx's proximal weight (mu)",
    "rounds": "the server updates to run",
    "eval_every": "rounds between evaluations (one metrics.csv row per algorithm each)",
    "seed": "the random seed of the data split, the availability process and the training",
    "seeds": "seeds trained together in one compiled program (summary: mean and std); the data "
             "split and the clients' speed factors use seed",
    "algorithms": "the algorithms compared, in this order",
    "source": "where MNIST comes from: IDX files (data_dir) or TensorFlow Datasets",
    "data_dir": "the directory holding the data (none: $FEDJAX_AVAIL_MNIST_DIR for IDX files)",
    "table_dtype": "how FedLaAvg and MIFA store their [N, P] table of latest updates",
    "alpha": "label skew by hour of day, in [0, 0.5] (0: none)",
    "dirichlet_alpha": "the Dirichlet concentration of each label's split over the clients "
                       "(small: few labels per client)",
    "csv_path": "the authors' Sentiment140 CSV (none: TFDS sentiment140)",
    "download": "let TFDS download and prepare the data (false where offline)",
    "glove_path": "GloVe Twitter 25-d embeddings (none: a random trainable embedding)",
    "max_len": "tokens kept per tweet",
    "vocab_size": "words in the vocabulary",
    "process": "the availability process (module docstring of experiments/_availability_sweep)",
    "mean_availability": "m, the long-run share of clients available",
    "markov_p_off": "markov process: the chance an available client goes offline each round",
    "rounds_per_hour": "hour-of-day process: rounds per simulated hour",
    "labels": "L_num, the distinct labels each client holds (WKAFL Alg. 4)",
    "min_size": "the fewest examples a client holds (WKAFL Alg. 4)",
    "max_size": "the most examples a client holds (WKAFL Alg. 4)",
    "model": "the model trained",
    "pixels": "raw: 0-255 pixel floats (the authors' code); unit: scaled to [0, 1]",
    "history": "H, the global models kept for stale gradients (none: every client's start model)",
    "switch_round": "the iteration WKAFL's stage 2 starts at",
    "train_eval_examples": "training examples the training loss is measured on (none: all)",
    "concurrency": "M, the most client jobs in flight at once (FedBuff, FedAsync)",
    "duration_mean": "the mean of a job's log-normal duration (virtual time)",
    "duration_sigma": "the log-normal sigma of a job's duration",
    "speed_sigma": "the log-normal sigma of each client's speed factor",
    "p_on": "Markov availability: the chance an offline client comes online each round",
    "p_off": "Markov availability: the chance an online client goes offline each round",
    "classes": "the distinct classes each client holds, in equal shares",
    "lam": "SubTrunc's lambda, the weight of the truncated loss term (0: DivFL)",
    "b": "SubTrunc's truncation b of the summed losses",
    "phi": "SubTrunc's phi, applied to each client's loss",
    "window": "UnionFL's look-back window: rounds a selected client stays penalised",
    "candidates": "r, stochastic greedy's candidates per step (DivFL, SubTrunc, UnionFL)",
    "poc_d": "Power-of-Choice's d, candidates per round in [K, N] (none: N)",
    "seq_len": "characters a window holds (LEAF: 80)",
    "hidden": "units of each LSTM layer (LEAF: 256)",
    "num_layers": "stacked LSTM layers (LEAF: 2)",
    "test_examples": "held-out examples the test accuracy is scored on, drawn once with the seed",
    "targets": "the test accuracies whose first virtual time the summary reports",
    "trace_devices": "the devices of the generated FedScale-format trace (trace_path none)",
    "trace_path": "a device trace: FedScale's client_behave_trace pickle, or client,start,end "
                  "seconds as .csv or .jsonl, clients 0..num_clients-1 the drawn roles in "
                  "file order (none: a generated trace)",
    "trace_period": "a .csv/.jsonl trace repeats every this many seconds (none: played once)",
}

NULLABLE = {"history"}  # None has a meaning whatever the default (per-client model copies)


def optional(defaults: Mapping[str, Any], key: str) -> bool:
    """A setting whose default is None, or ``history``, may be None (``--set key=none``)."""
    return key in NULLABLE or (key in defaults and defaults[key] is None)


def check_settings(config: Mapping[str, Any], defaults: Mapping[str, Any],
                   choices: Mapping[str, tuple[str, ...]] | None = None,
                   feeds: Mapping[str, list[tuple[type, str]]] | None = None) -> None:
    """Raises ValueError naming the first setting outside its allowed range or choices.

    A setting whose default is None may also be None (it then means the documented default
    behaviour, e.g. each method's own learning rate). ``choices``: setting -> its valid values
    (for a tuple-valued setting such as ``algorithms``, each item's). ``feeds``: setting ->
    the ``(class, field)`` pairs whose annotations check it (the experiment's parts:
    :func:`fedjax_avail.experiments._parts.feeds`).
    """
    for key, value in config.items():
        if "." in key:  # a part's field: checked by its annotation when applied (_parts)
            continue
        if value is None and optional(defaults, key):
            continue
        hints = [field_hints(owner)[field] for owner, field in (feeds or {}).get(key, ())]
        if key in SETTINGS:
            hints.append(SETTINGS[key] | None if optional(defaults, key) else SETTINGS[key])
        for hint in hints:
            try:
                check_value(f"setting {key}", value, hint)
            except ValueError as error:
                raise ValueError(f"{error} ({EXAMPLES[key]})" if key in EXAMPLES
                                 else str(error)) from None
        if key in ("data_dir", "csv_path", "glove_path", "trace_path") and not value.strip():
            raise ValueError(f"setting {key} must be None or a path, got {value!r}")
        if key == "targets" and len({round(100 * t) for t in value}) < len(value):
            raise ValueError(f"setting targets must differ in whole percents (the summary's "
                             f"time_to_<percent> columns), got {value!r}")
        if key == "seeds" and len(set(value)) < len(value):
            raise ValueError(f"setting seeds must list distinct seeds, got {value!r}")
        if key == "algorithms" and (not value or len(set(value)) < len(value)):
            raise ValueError("setting algorithms must be a non-empty list of distinct algorithm "
                             f"names, e.g. --set algorithms=fedavg,fedlaavg, got {value!r}")
        if choices and key in choices:
            check_choice(key, value, choices[key])
    if config.get("poc_d") is not None and "num_clients" in config:
        n = config["num_clients"]
        k = clients_per_round(config) if "clients_per_round" in config else 1
        if not k <= config["poc_d"] <= n:
            raise ValueError(f"setting poc_d (Power-of-Choice's candidate count d) must be in "
                             f"[clients_per_round, num_clients] = [{k}, {n}], got "
                             f"{config['poc_d']}")
    if config.get("beta") is not None and "num_clients" in config:
        cohort = clients_per_round(config)
        if cohort < 1:
            raise ValueError(f"setting beta={config['beta']} gives round(beta * num_clients) = "
                             f"{cohort} clients per round; it must be at least 1")


def check_choice(key: str, value: Any, choices: tuple[str, ...]) -> None:
    """Raises ValueError unless ``value`` (each item of a tuple ``value``) is in ``choices``.

    Example: ``check_choice("model", "cnn", ("cnn", "mlp"))`` passes; ``"rnn"`` raises
    ``setting model must be one of ('cnn', 'mlp'), got 'rnn'``.
    """
    if isinstance(value, tuple):
        unknown = [item for item in value if item not in choices]
        if unknown:
            raise ValueError(f"setting {key} must list only {choices}, got unknown {unknown}")
    elif value not in choices:
        raise ValueError(f"setting {key} must be one of {choices}, got {value!r}")


def clients_per_round(config: Mapping[str, Any]) -> int:
    """K: round(beta * num_clients) when beta is set, else clients_per_round."""
    if config.get("beta") is not None:
        return int(round(config["beta"] * config["num_clients"]))
    return int(config["clients_per_round"])
