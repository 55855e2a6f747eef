"""Checks of experiment settings, naming the setting as the user typed it (``--set lr=-1``).

Each known setting has one rule; a setting an experiment has but this table does not know is
checked by the library call it feeds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fedjax_avail._checks import is_int, is_real
from fedjax_avail.inputs import MAX_ROUNDS


def _int(low: int, high: int | None = None) -> tuple[str, Callable[[Any], bool]]:
    text = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high})"
    return text, lambda v: is_int(v) and v >= low and (high is None or v < high)


def _real(text: str, test: Callable[[float], bool]) -> tuple[str, Callable[[Any], bool]]:
    def check(v: Any) -> bool:
        return is_real(v) and test(float(v))

    return text, check


RULES: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "num_clients": _int(1),
    "clients_per_round": _int(1),
    "local_steps": _int(1),
    "batch_size": _int(1),
    "rounds": _int(1, MAX_ROUNDS),
    "eval_every": _int(1),
    "seed": _int(0, 2**32),
    "E": _int(1),
    "D": _int(1),

    "server_lr": _real("a number > 0", lambda v: v > 0),
    "mu": _real("a number >= 0", lambda v: v >= 0),
    "alpha": _real("a number in [0, 0.5]", lambda v: 0 <= v <= 0.5),
    "mean_availability": _real("a number in (0, 1)", lambda v: 0 < v < 1),
    "markov_p_off": _real("a number in (0, 1]", lambda v: 0 < v <= 1),
    "rounds_per_hour": _int(1),
    "labels": _int(1),
    "min_size": _int(1),
    "max_size": _int(1),
    "switch_round": _int(0),
    "concurrency": _int(1),
    "duration_mean": _real("a number > 0", lambda v: v > 0),
    "duration_sigma": _real("a number >= 0", lambda v: v >= 0),
    "speed_sigma": _real("a number >= 0", lambda v: v >= 0),
    "p_on": _real("a number in (0, 1]", lambda v: 0 < v <= 1),
    "p_off": _real("a number in (0, 1]", lambda v: 0 < v <= 1),
    "lr": _real("a number > 0", lambda v: v > 0),
    "beta": _real("a number in (0, 1]", lambda v: 0 < v <= 1),
    "history": _int(1),
    "classes": _int(1),
    "candidates": _int(1),
    "poc_d": _int(1),
    "lam": _real("a number >= 0", lambda v: v >= 0),
    "b": _real("a number > 0", lambda v: v > 0),
    "window": _int(1),
    "seeds": ("a tuple of distinct integers in [0, 2^32), e.g. --set seeds=0,1,2,3,4",
              lambda v: isinstance(v, tuple) and all(is_int(x) and 0 <= x < 2**32 for x in v)
              and len(set(v)) == len(v)),
    "train_eval_examples": _int(1),
    "algorithms": ("a non-empty list of algorithm names, e.g. --set algorithms=fedavg,fedlaavg",
                   lambda v: isinstance(v, tuple) and len(v) > 0
                   and all(isinstance(x, str) and x for x in v)),
    "table_dtype": ("one of 'float32', 'bfloat16', 'int8'",
                    lambda v: v in ("float32", "bfloat16", "int8")),
}


NULLABLE = {"history"}  # None has a meaning whatever the default (per-client model copies)


def optional(defaults: Mapping[str, Any], key: str) -> bool:
    """A setting whose default is None, or ``history``, may be None (``--set key=none``)."""
    return key in NULLABLE or (key in defaults and defaults[key] is None)


def check_settings(config: Mapping[str, Any], defaults: Mapping[str, Any]) -> None:
    """Raises ValueError naming the first setting outside its allowed range.

    A setting whose default is None may also be None (it then means the documented default
    behaviour, e.g. each method's own learning rate).
    """
    for key, value in config.items():
        if key not in RULES or (value is None and optional(defaults, key)):
            continue
        allowed, ok = RULES[key]
        if not ok(value):
            prefix = "None or " if optional(defaults, key) else ""
            raise ValueError(f"setting {key} must be {prefix}{allowed}, got {value!r}")
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


def clients_per_round(config: Mapping[str, Any]) -> int:
    """K: ``round(beta * num_clients)`` when ``beta`` is set, else ``clients_per_round``."""
    if config.get("beta") is not None:
        return int(round(config["beta"] * config["num_clients"]))
    return int(config["clients_per_round"])
