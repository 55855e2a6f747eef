"""Finished runs side by side: curves read back from output directories, and TensorBoard logs."""

from __future__ import annotations

import csv
import json
import textwrap
from collections import defaultdict
from pathlib import Path

from fedjax_avail.experiments._folder import mean_history
from fedjax_avail.history import History
from fedjax_avail.plotting import plot_histories


def read_histories(directory: str | Path) -> dict[str, History]:
    """The histories in ``directory/metrics.csv``, one per curve (the mean over seeds): see
    :func:`read_runs`."""
    return {name: mean_history(runs) for name, runs in read_runs(directory).items()}


def read_runs(directory: str | Path) -> dict[str, list[History]]:
    """The histories in ``directory/metrics.csv``, each curve's runs one per seed.

    Reads the files ``fedjax-avail run`` writes (an ``algorithm`` column, a ``seed`` column with
    several seeds; a sweep's ``setting`` column: one curve per algorithm and setting) and those
    of :class:`fedjax_avail.callbacks.CSVLogger` and :meth:`fedjax_avail.History.to_csv` (no
    ``algorithm`` column: one curve, named after the folder; runs of a runs axis that share a
    seed, a ``run`` column: one curve each). Text columns are left out.

    Raises:
      FileNotFoundError: no metrics.csv there.
      ValueError: a metrics.csv with no rows, or without a ``round`` column.
    """
    path = Path(directory) / "metrics.csv"
    if not path.is_file():
        raise FileNotFoundError(f"{directory} holds no metrics.csv (is it a finished run's "
                                "output directory?)")
    rows: dict[str, dict[str, list[dict[str, float]]]] = defaultdict(lambda: defaultdict(list))
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None:
            raise ValueError(f"{path} holds no rows: the run wrote no evaluation yet")
        if "round" not in reader.fieldnames:
            raise ValueError(f"{path} has no 'round' column (columns: {reader.fieldnames}); "
                             "compare reads the metrics.csv of fedjax-avail run, CSVLogger or "
                             "History.to_csv")
        text = {"algorithm", "seed", "run", "setting"}
        for row in reader:
            name = row.get("algorithm") or Path(directory).resolve().name
            if row.get("setting"):
                name = f"{name} ({row['setting']})"
            if row.get("run") not in (None, ""):
                name = f"{name} (run {row['run']})"
            values = {k: _number(v) for k, v in row.items()
                      if k not in text and v not in ("", None)}
            values = {k: v for k, v in values.items() if v is not None}
            rows[name][row.get("seed") or ""].append(values)
    if not rows:
        raise ValueError(f"{path} holds no rows: the run wrote no evaluation yet")
    return {name: [History(sorted(seed_rows, key=lambda r: r["round"]))
                   for seed_rows in by_seed.values()] for name, by_seed in rows.items()}


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def compare_runs(directories: list[str | Path], out: str | Path, x: str = "round"):
    """Overlays the training loss and test accuracy of finished runs in one figure.

    Each run label's curve is the mean over its seeds, in a band from their minimum to their
    maximum, one colour per curve name (an algorithm, with a sweep's setting) and one line style
    per directory. With several directories each gets a letter (``fedavg [A]``), and a table beside
    the axes says what each letter's run set: the settings in which the runs' ``config.json``
    files differ (``A: lr=0.05``), or its folder where none differs or a run has no
    ``config.json``. The title names the experiment and the settings that differ.

    Returns:
      the matplotlib ``Figure``.

    Raises:
      FileNotFoundError: a directory without metrics.csv.
    """
    configs = [_run_settings(directory) for directory in directories]
    differ = _differing(configs) if None not in configs else []
    folders = _folder_names(directories)
    several = len(directories) > 1
    curves, spread, table, styles = {}, {}, [], {}
    colours: dict[str, str] = {}  # one colour per curve of a run, one line style per run
    for i, (directory, config, folder) in enumerate(zip(directories, configs, folders,
                                                        strict=True)):
        tag = _letter(i)
        what = ", ".join(f"{key}={_value_text(config[key])}" for key in differ
                         if key in config) or folder
        if several:
            table += textwrap.wrap(f"{tag}: {what}", 40, subsequent_indent="   ")
        for name, runs in read_runs(directory).items():
            label = f"{name} [{tag}]" if several else name
            curves[label] = mean_history(runs)
            spread[label] = runs
            colour = colours.setdefault(name, f"C{len(colours) % 10}")  # a sweep's settings too
            styles[label] = {"color": colour, "linestyle": _STYLES[i % len(_STYLES)]}
    names = sorted({str(c.get("experiment", "")) for c in configs if c} - {""})
    what = f"runs differing in {', '.join(differ)}" if differ else ", ".join(folders)
    title = f"{' / '.join(names)}: {what}" if names else f"compared: {what}"
    return plot_histories(curves, out, title=title, x=x, spread=spread, table=table,
                          styles=styles if several else None)


_STYLES = ("-", "--", ":", "-.")


def _letter(i: int) -> str:
    """A, B, ..., Z, AA, AB, ...: the short tag of the ``i``-th run compared."""
    return (_letter(i // 26 - 1) if i >= 26 else "") + chr(ord("A") + i % 26)


def _run_settings(directory: str | Path) -> dict | None:
    """A run's settings from its ``config.json`` (its provenance aside); None without one."""
    path = Path(directory) / "config.json"
    if not path.is_file():
        return None
    settings = json.loads(path.read_text())
    settings.pop("provenance", None)
    if "sweep" in settings:  # a sweep's: its name and shared settings (panels name the rest)
        return {"experiment": settings["sweep"],
                **settings.get("shared", settings.get("overrides", {}))}
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
