"""The shape every named experiment shares, and the runner that writes its results.

An experiment is a name, a dict of default settings and a ``build(config) -> Setup`` function.
:func:`run` checks the settings, checks that the output directory can be written (before any
compute), simulates every algorithm of the setup under the same availability process and seed,
and writes ``metrics.csv``, ``config.json`` (the settings and their provenance),
``summary.json`` and ``curves.png`` into the output directory, each file atomically and after
every algorithm, so a crash or Ctrl-C keeps what finished. Each algorithm checkpoints into
``checkpoints/<name>/``; ``resume=True`` continues an interrupted run bit-identically.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from fedjax_avail import inputs, memory
from fedjax_avail._checks import check_optional_int
from fedjax_avail._io import atomic_write_text, check_writable_dir
from fedjax_avail._lock import DirectoryLock
from fedjax_avail._provenance import provenance
from fedjax_avail.algorithms import Algorithm
from fedjax_avail.availability import AvailabilityProcess
from fedjax_avail.data import FederatedData
from fedjax_avail.engine import DivergenceError, Interrupted, simulate
from fedjax_avail.experiments._analysis import oscillation_amplitude
from fedjax_avail.experiments._settings import check_settings
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
    summary: Callable[[History], dict[str, float]] | None = None  # extra summary columns
    x_axes: tuple[str, ...] = ("round",)  # history columns the curves are drawn against
    rounds: Mapping[str, int] = {}  # per-algorithm rounds instead of the setting rounds

    def rounds_of(self, name: str, config: Mapping[str, Any]) -> int:
        return int(self.rounds.get(name, config["rounds"]))


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
        """The defaults with ``overrides`` applied, checked (unknown keys and values out of
        range are errors naming the setting)."""
        config = dict(self.defaults)
        for key, value in (overrides or {}).items():
            if key not in config:
                raise ValueError(f"{self.name} has no setting {key!r}; settings: {sorted(config)}")
            config[key] = value
        overrides = overrides or {}
        if overrides.get("beta") is not None and "clients_per_round" in overrides:
            raise ValueError("set either beta or clients_per_round, not both (beta sets "
                             "clients_per_round = round(beta * num_clients))")
        check_settings(config, self.defaults)
        return config


def parse_value(text: str, default: Any) -> Any:
    """Parses ``--set`` text to the type of the default (bool, int, float, str, tuple of str).

    A default of None accepts ``none``, a number (int, else float) or any other text.
    """
    if isinstance(default, bool):
        if text.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"expected true/false, got {text!r}")
        return text.lower() in ("true", "1")
    if isinstance(default, int):
        return int(text)
    if isinstance(default, float):
        return float(text)
    if isinstance(default, tuple):
        items = [item.strip() for item in text.split(",") if item.strip()]
        if items and all(item.lstrip("-").isdigit() for item in items):  # e.g. seeds=0,1,2
            return tuple(int(item) for item in items)
        return tuple(items)
    if default is None:
        if text.lower() == "none":
            return None
        for kind in (int, float):
            try:
                return kind(text)
            except ValueError:
                pass
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
    *,
    resume: bool = False,
    checkpoint_every: int | None = None,
    mesh: Any = None,
) -> RunOutcome:
    """Runs every algorithm of an experiment and writes its results.

    A diverging algorithm keeps the history it recorded and is marked ``diverged`` in the
    summary; the other algorithms still run.

    Args:
      experiment: the experiment.
      overrides: settings that replace the defaults.
      out_dir: where results and checkpoints go (None: nothing is written).
      progress: show progress bars.
      resume: continue from the checkpoints in ``out_dir`` (algorithms that finished are not
        run again); without it, old checkpoints there are removed first.
      checkpoint_every: rounds between checkpoints (default: every 10 evaluations).
      mesh: a device mesh for ``simulate`` (e.g. a ``"cohort"`` axis: each round's cohort split
        over the devices; :func:`cohort_mesh`).

    Raises:
      ValueError: a bad setting, or an ``out_dir`` that cannot be written (before compute).
      fedjax_avail.Interrupted: Ctrl-C; what finished is written and checkpointed first.
    """
    config = experiment.config(overrides)
    check_optional_int("checkpoint_every", checkpoint_every)
    if out_dir is not None:
        out_dir = check_writable_dir(out_dir, "out_dir")
    # One run per output directory; the settings a resume must share are checked first.
    lock = DirectoryLock(out_dir, "out_dir") if out_dir is not None else contextlib.nullcontext()
    with lock:
        if out_dir is not None:
            _record_settings(out_dir, experiment.name, config, resume)
        setup = experiment.build(config)
        every = checkpoint_every or 10 * config["eval_every"]
        seeds = list(config["seeds"]) if config.get("seeds") else None
        meta = {"experiment": experiment.name, **config, "provenance": provenance()}
        histories: dict[str, History] = {}
        per_seed: dict[str, list[History]] = {}
        summary = []

        def record(name, status, results, start, stopped, plot):
            nonlocal out_dir
            per_seed[name] = [r.history for r in results]
            histories[name] = mean_history(per_seed[name])
            summary.append(_summary_row(name, status, results, setup, start, stopped, seeds))
            if out_dir is not None:
                out_dir = _write(out_dir, meta, per_seed, summary, experiment, setup, plot, seeds)

        for name, algorithm in setup.algorithms.items():
            checkpoints = None
            if out_dir is not None:
                checkpoints = out_dir / "checkpoints" / name
                if not resume:
                    shutil.rmtree(checkpoints, ignore_errors=True)
            start = time.perf_counter()
            try:
                result = simulate(
                    setup.task, setup.train, algorithm, setup.availability,
                    rounds=setup.rounds_of(name, config), seed=seeds or config["seed"],
                    eval_every=config["eval_every"],
                    test_data=setup.test, progress=progress, desc=name,
                    checkpoint_dir=checkpoints, checkpoint_every=every,
                    train_eval_examples=config.get("train_eval_examples"), mesh=mesh,
                )
                status, stopped = "ok", None
            except DivergenceError as error:
                result, status, stopped = error.result, f"diverged: {error}", error.round
            except Interrupted as interrupted:
                results = _as_list(interrupted.result)
                record(name, "interrupted", results, start,
                       int(results[0].history.rows[-1]["round"]), plot=True)
                raise
            last = len(per_seed) + 1 == len(setup.algorithms)
            record(name, status, _as_list(result), start, stopped, plot=last)
        return RunOutcome(histories, summary, out_dir)


# Settings a resumed run may change: more rounds (never fewer: ``simulate`` refuses that), and
# where the same data lives (its contents are in ``simulate``'s fingerprint).
RESUMABLE = ("rounds", "data_dir")


def _record_settings(out_dir: Path, name: str, config: Mapping[str, Any], resume: bool) -> None:
    """Writes ``checkpoints/settings.json``; with ``resume``, first refuses settings that
    differ from the recorded ones (naming them), before anything is loaded or compiled."""
    path = out_dir / "checkpoints" / "settings.json"
    now = json.loads(json.dumps({"experiment": name, **{
        k: v for k, v in config.items() if k not in RESUMABLE}}, default=str))
    if resume and path.exists():
        try:
            then = json.loads(path.read_text())
        except ValueError:
            raise ValueError(f"--resume: {path} is damaged (not JSON); delete {out_dir} "
                             "/checkpoints to start afresh") from None
        differ = sorted(k for k in {*now, *then} if now.get(k) != then.get(k))
        if differ:
            raise ValueError(
                f"--resume: {out_dir} holds a run with different settings: " + ", ".join(
                    f"{k} (was {then.get(k)!r}, now {now.get(k)!r})" for k in differ)
                + "; resume with the same settings, or choose another --out (or omit "
                "--resume to start afresh)")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(now, indent=2, sort_keys=True) + "\n")


def plan(experiment: Experiment, overrides: Mapping[str, Any] | None = None) -> list[dict]:
    """Everything :func:`run` checks before compute, and no compute: ``--dry-run``.

    Builds the experiment (loads its data, constructs every algorithm), runs ``simulate``'s
    argument checks for each algorithm and its memory estimate against this device.

    Returns:
      one row per algorithm: ``algorithm``, ``rounds``, ``seeds``, ``estimated_bytes``.

    Raises:
      ValueError, FileNotFoundError, MemoryError: what :func:`run` would raise before compute.
    """
    config = experiment.config(overrides)
    setup = experiment.build(config)
    seeds = list(config["seeds"]) if config.get("seeds") else [config["seed"]]
    rows = []
    for name, algorithm in setup.algorithms.items():
        rounds = setup.rounds_of(name, config)
        test = inputs.check_simulate_args(
            setup.task, setup.train, algorithm, setup.availability, rounds, seeds,
            config["eval_every"], setup.test, None, 4096, None,
            config.get("train_eval_examples"))
        estimate = memory.estimate_memory(setup.task, setup.train, algorithm, setup.availability,
                                          test_data=test, runs=len(seeds))
        memory.check_fits(estimate, memory.available_bytes())
        rows.append({"algorithm": name, "rounds": rounds, "seeds": seeds,
                     "estimated_bytes": estimate.total})
    return rows


def _as_list(result) -> list:
    return result if isinstance(result, list) else [result]


def mean_history(histories: list[History]) -> History:
    """The row-by-row mean of the histories of several seeds (one history: itself)."""
    if len(histories) == 1:
        return histories[0]
    rows = []
    for group in zip(*(h.rows for h in histories), strict=False):
        rows.append({k: float(np.mean([row.get(k, np.nan) for row in group]))
                     for k in group[0]})
    return History(rows)


def _number(value: float | None) -> float | None:
    """None for a value that was not measured or is not finite (JSON has no NaN)."""
    return None if value is None or not math.isfinite(value) else float(value)


def _measures(history: History, setup: Setup) -> dict[str, float | None]:
    """One run's final numbers."""
    last = history.rows[-1]
    out = {
        "final_train_loss": _number(last["train_loss"]),
        "final_test_accuracy": _number(last.get("test_accuracy")),
        "amplitude_last_window": _number(oscillation_amplitude(history, setup.window)),
    }
    if "test_client_dissimilarity" in last:
        out["client_dissimilarity"] = _number(last["test_client_dissimilarity"])
    if setup.summary:
        out.update({k: _number(v) for k, v in setup.summary(history).items()})
    return out


def _summary_row(name, status, results, setup, start, stopped, seeds) -> dict[str, Any]:
    """The summary of one algorithm: its final numbers, averaged over seeds with their std."""
    measures = [_measures(r.history, setup) for r in results]
    row: dict[str, Any] = {
        "algorithm": name,
        "status": status,
        "stopped_at_round": stopped,  # the round it diverged in, or was interrupted after
        "rounds_done": int(results[0].history.rows[-1]["round"]),
    }
    for key in measures[0]:
        values = [m[key] for m in measures if m[key] is not None]
        row[key] = float(np.mean(values)) if values else None
        if seeds:
            row[f"{key}_std"] = float(np.std(values)) if values else None
    if seeds:
        row["seeds"] = seeds
    row["seconds"] = round(time.perf_counter() - start, 2)
    row["compile_seconds"] = round(results[0].timing["compile"], 2)
    return row


def _write(out_dir: Path, meta, per_seed, summary, experiment, setup, plot: bool,
           seeds) -> Path:
    """Writes the result files (the figure only when ``plot``); if that fails, writes them to a
    fresh temporary directory instead (so finished work is never lost to an output error) and
    returns where they are."""
    try:
        _write_files(out_dir, meta, per_seed, summary, experiment, setup, plot, seeds)
        return out_dir
    except OSError as error:
        fallback = Path(tempfile.mkdtemp(prefix=f"fedjax-avail-{experiment.name}-"))
        _write_files(fallback, meta, per_seed, summary, experiment, setup, plot, seeds)
        print(f"fedjax-avail: could not write to {out_dir} ({error}); results saved in "
              f"{fallback}")
        return fallback


def _write_files(out_dir: Path, meta, per_seed, summary, experiment, setup, plot: bool,
                 seeds) -> None:
    """metrics.csv (one row per algorithm, seed and evaluation), config.json, summary.json and
    the figures (the mean over seeds)."""
    History([{"algorithm": name, **({"seed": seeds[i]} if seeds else {}), **row}
             for name, histories in per_seed.items() for i, history in enumerate(histories)
             for row in history]).to_csv(out_dir / "metrics.csv")
    histories = {name: mean_history(h) for name, h in per_seed.items()}
    atomic_write_text(out_dir / "config.json", json.dumps(meta, indent=2, default=str) + "\n")
    atomic_write_text(out_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    if plot:
        for x in setup.x_axes:
            name = "curves.png" if x == "round" else f"curves_{x}.png"
            plot_histories(histories, out_dir / name, title=experiment.description, x=x)


def _cell(value: float | None, width: int) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return f"{'n/a':>{width}}"
    return f"{value:>{width}.4f}"


_STANDARD = ("algorithm", "status", "stopped_at_round", "rounds_done", "final_train_loss",
             "final_test_accuracy", "amplitude_last_window", "seconds", "compile_seconds",
             "seeds")


def format_summary(summary: list[dict[str, Any]]) -> str:
    """A fixed-width table of the summary rows ("n/a" where a value was not measured); an
    experiment's own summary columns (e.g. WKAFL's stability) follow the standard ones."""
    extra = [k for k in (summary[0] if summary else {})
             if k not in _STANDARD and not k.endswith("_std")]
    head = "".join(f" {k[:12]:>12}" for k in extra)
    lines = [f"{'algorithm':<20} {'train loss':>10} {'test acc':>9} {'amplitude':>10}{head} "
             f"{'sec':>7}"]
    for row in summary:
        flag = "" if row["status"] == "ok" else (
            f"  ({row['status'].split(':')[0]} at round {row['stopped_at_round']})")
        cells = "".join(f" {_cell(row[k], 12)}" for k in extra)
        lines.append(
            f"{row['algorithm']:<20} {_cell(row['final_train_loss'], 10)} "
            f"{_cell(row['final_test_accuracy'], 9)} {_cell(row['amplitude_last_window'], 10)}"
            f"{cells} {row['seconds']:>7.1f}{flag}"
        )
        if row.get("seeds"):  # the spread over seeds, under the means
            stds = "".join(f" {_cell(row.get(f'{k}_std'), 12)}" for k in extra)
            lines.append(
                f"{'  +- (std, ' + str(len(row['seeds'])) + ' seeds)':<20} "
                f"{_cell(row.get('final_train_loss_std'), 10)} "
                f"{_cell(row.get('final_test_accuracy_std'), 9)} "
                f"{_cell(row.get('amplitude_last_window_std'), 10)}{stds}")
    return "\n".join(lines)
