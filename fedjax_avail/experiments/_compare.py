"""Finished runs side by side: curves read back from output directories, and TensorBoard logs."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from fedjax_avail.history import History
from fedjax_avail.plotting import plot_histories


def read_histories(directory: str | Path) -> dict[str, History]:
    """The histories in ``directory/metrics.csv``, one per algorithm (the mean over seeds).

    Reads the files ``fedjax-avail run`` writes (an ``algorithm`` column, a ``seed`` column with
    several seeds) and those of :class:`fedjax_avail.callbacks.CSVLogger` and
    :meth:`fedjax_avail.History.to_csv` (no ``algorithm`` column: one curve, named after the
    folder; runs of a runs axis that share a seed, a ``run`` column: one curve each). Text
    columns are left out.

    Raises:
      FileNotFoundError: no metrics.csv there.
      ValueError: a metrics.csv with no rows, or without a ``round`` column.
    """
    path = Path(directory) / "metrics.csv"
    if not path.is_file():
        raise FileNotFoundError(f"{directory} holds no metrics.csv (is it a finished run's "
                                "output directory?)")
    rows: dict[str, dict[float, list[dict[str, float]]]] = defaultdict(lambda: defaultdict(list))
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None:
            raise ValueError(f"{path} holds no rows: the run wrote no evaluation yet")
        if "round" not in reader.fieldnames:
            raise ValueError(f"{path} has no 'round' column (columns: {reader.fieldnames}); "
                             "compare reads the metrics.csv of fedjax-avail run, CSVLogger or "
                             "History.to_csv")
        for row in reader:
            name = row.get("algorithm") or Path(directory).resolve().name
            if row.get("run") not in (None, ""):
                name = f"{name} (run {row['run']})"
            values = {k: _number(v) for k, v in row.items()
                      if k not in ("algorithm", "seed", "run") and v not in ("", None)}
            values = {k: v for k, v in values.items() if v is not None}
            rows[name][values["round"]].append(values)
    if not rows:
        raise ValueError(f"{path} holds no rows: the run wrote no evaluation yet")
    return {name: History([{k: float(np.mean([r.get(k, np.nan) for r in group]))
                            for k in group[0]} for _, group in sorted(by_round.items())])
            for name, by_round in rows.items()}


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def compare_runs(directories: list[str | Path], out: str | Path, x: str = "round"):
    """Overlays the training loss and test accuracy of finished runs in one figure.

    Curves are labelled ``algorithm (setting=value, ...)`` with the settings in which the runs'
    ``config.json`` files differ (e.g. ``fedavg (lr=0.1)``; a run without a setting leaves it
    out), or ``algorithm (folder)`` where none differs or a run has no ``config.json``; the
    title names the experiment and what differs.

    Returns:
      the matplotlib ``Figure``.

    Raises:
      FileNotFoundError: a directory without metrics.csv.
    """
    configs = [_run_settings(directory) for directory in directories]
    differ = _differing(configs) if None not in configs else []
    folders = _folder_names(directories)
    curves = {}
    for directory, config, folder in zip(directories, configs, folders, strict=True):
        tag = ", ".join(f"{key}={_value_text(config[key])}" for key in differ
                        if key in config) or folder
        for name, history in read_histories(directory).items():
            curves[f"{name} ({tag})"] = history
    names = sorted({str(c.get("experiment", "")) for c in configs if c} - {""})
    what = f"runs differing in {', '.join(differ)}" if differ else ", ".join(folders)
    title = f"{' / '.join(names)}: {what}" if names else f"compared: {what}"
    return plot_histories(curves, out, title=title, x=x)


def _run_settings(directory: str | Path) -> dict | None:
    """A run's settings from its ``config.json`` (its provenance aside); None without one."""
    path = Path(directory) / "config.json"
    if not path.is_file():
        return None
    settings = json.loads(path.read_text())
    settings.pop("provenance", None)
    return settings


def _differing(configs: list[dict]) -> list[str]:
    """The settings whose values are not the same in every config, in first-seen order."""
    keys = list(dict.fromkeys(key for config in configs for key in config))
    return [key for key in keys if any(c.get(key) != configs[0].get(key) for c in configs)]


def _folder_names(directories: list[str | Path]) -> list[str]:
    """Each directory's folder name, or its whole path where two folder names are the same."""
    names = [Path(directory).name for directory in directories]
    return names if len(set(names)) == len(names) else [str(d) for d in directories]


def _value_text(value) -> str:
    """A setting as ``--set`` writes it (a list as ``a,b``)."""
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)
