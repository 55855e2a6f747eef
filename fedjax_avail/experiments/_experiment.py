"""The shape every named experiment shares, and the runner that writes its results.

An experiment is a name, a dict of default settings and a ``build(config) -> Setup`` function.
:func:`run` overrides the settings, simulates every algorithm of the setup under the same
availability process and seed, and writes ``metrics.csv``, ``config.json``, ``summary.json`` and
``curves.png`` into the output directory (each file atomically).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from fedjax_avail._io import atomic_write_text
from fedjax_avail.algorithms import Algorithm
from fedjax_avail.availability import AvailabilityProcess
from fedjax_avail.data import FederatedData
from fedjax_avail.engine import DivergenceError, simulate
from fedjax_avail.experiments._analysis import oscillation_amplitude
from fedjax_avail.history import History
from fedjax_avail.plotting import plot_histories
from fedjax_avail.tasks import Task


class Setup(NamedTuple):
    """Everything an experiment's algorithms run on."""

    task: Task
    train: FederatedData
    test: dict[str, np.ndarray] | None
    availability: AvailabilityProcess
    algorithms: dict[str, Algorithm]
    window: int  # rounds over which the final oscillation amplitude is measured (2E)


@dataclasses.dataclass(frozen=True)
class Experiment:
    """A named, versioned configuration.

    Attributes:
      name: the CLI name.
      description: one line, shown by ``fedjax-avail list``.
      defaults: every setting with its default; ``--set key=value`` may override any of them.
      build: ``config -> Setup``.
      measured: the recorded outcome of the default run and the command that produced it.
    """

    name: str
    description: str
    defaults: Mapping[str, Any]
    build: Callable[[dict[str, Any]], Setup]
    measured: str = ""

    def config(self, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The defaults with ``overrides`` applied; unknown keys are an error."""
        config = dict(self.defaults)
        for key, value in (overrides or {}).items():
            if key not in config:
                raise ValueError(f"{self.name} has no setting {key!r}; settings: {sorted(config)}")
            config[key] = value
        return config


def parse_value(text: str, default: Any) -> Any:
    """Parses ``--set`` text to the type of the default (bool, int, float, str, tuple of str)."""
    if isinstance(default, bool):
        if text.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"expected true/false, got {text!r}")
        return text.lower() in ("true", "1")
    if isinstance(default, int):
        return int(text)
    if isinstance(default, float):
        return float(text)
    if isinstance(default, tuple):
        return tuple(item.strip() for item in text.split(",") if item.strip())
    if default is None:
        return None if text.lower() == "none" else text
    return text


@dataclasses.dataclass
class RunOutcome:
    """What :func:`run` returns: per-algorithm histories and the summary rows."""

    histories: dict[str, History]
    summary: list[dict[str, Any]]
    out_dir: Path | None


def run(
    experiment: Experiment,
    overrides: Mapping[str, Any] | None = None,
    out_dir: str | Path | None = None,
    progress: bool = True,
) -> RunOutcome:
    """Runs every algorithm of an experiment and writes its results.

    A diverging algorithm keeps the history it recorded and is marked ``diverged`` in the summary;
    the other algorithms still run.
    """
    config = experiment.config(overrides)
    setup = experiment.build(config)
    histories: dict[str, History] = {}
    summary = []
    for name, algorithm in setup.algorithms.items():
        start = time.perf_counter()
        try:
            result = simulate(
                setup.task, setup.train, algorithm, setup.availability,
                rounds=config["rounds"], seed=config["seed"], eval_every=config["eval_every"],
                test_data=setup.test, progress=progress, desc=name,
            )
            status = "ok"
        except DivergenceError as error:
            result, status = error.result, f"diverged: {error}"
        history = result.history
        histories[name] = history
        last = history.rows[-1]
        summary.append({
            "algorithm": name,
            "status": status,
            "final_train_loss": last["train_loss"],
            "final_test_accuracy": last.get("test_accuracy", float("nan")),
            "amplitude_last_window": oscillation_amplitude(history, setup.window),
            "seconds": round(time.perf_counter() - start, 2),
            "compile_seconds": round(result.timing["compile"], 2),
        })
    if out_dir is not None:
        out_dir = Path(out_dir)
        _write(out_dir, experiment, config, histories, summary)
    return RunOutcome(histories, summary, out_dir)


def _write(out_dir: Path, experiment: Experiment, config, histories, summary) -> None:
    History([{"algorithm": name, **row} for name, history in histories.items()
             for row in history]).to_csv(out_dir / "metrics.csv")
    atomic_write_text(
        out_dir / "config.json",
        json.dumps({"experiment": experiment.name, **config}, indent=2, default=str) + "\n",
    )
    atomic_write_text(out_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    plot_histories(histories, out_dir / "curves.png", title=experiment.description)


def format_summary(summary: list[dict[str, Any]]) -> str:
    """A fixed-width table of the summary rows."""
    lines = [f"{'algorithm':<14} {'train loss':>10} {'test acc':>9} {'amplitude':>10} {'sec':>7}"]
    for row in summary:
        flag = "" if row["status"] == "ok" else "  (diverged)"
        lines.append(
            f"{row['algorithm']:<14} {row['final_train_loss']:>10.4f} "
            f"{row['final_test_accuracy']:>9.4f} {row['amplitude_last_window']:>10.4f} "
            f"{row['seconds']:>7.1f}{flag}"
        )
    return "\n".join(lines)
