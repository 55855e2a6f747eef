"""Finished runs side by side: curves read back from output directories, and TensorBoard logs."""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

import numpy as np

from fedjax_avail.history import History
from fedjax_avail.plotting import plot_histories


def read_histories(directory: str | Path) -> dict[str, History]:
    """The histories in ``directory/metrics.csv``, one per algorithm (the mean over seeds).

    Raises:
      FileNotFoundError: no metrics.csv there.
    """
    path = Path(directory) / "metrics.csv"
    if not path.is_file():
        raise FileNotFoundError(f"{directory} holds no metrics.csv (is it a finished run's "
                                "output directory?)")
    rows: dict[str, dict[float, list[dict[str, float]]]] = defaultdict(lambda: defaultdict(list))
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            values = {k: float(v) for k, v in row.items()
                      if k not in ("algorithm", "seed") and v not in ("", None)}
            rows[row["algorithm"]][values["round"]].append(values)
    return {name: History([{k: float(np.mean([r.get(k, np.nan) for r in group]))
                            for k in group[0]} for _, group in sorted(by_round.items())])
            for name, by_round in rows.items()}


def compare_runs(directories: list[str | Path], out: str | Path, x: str = "round") -> None:
    """Overlays the training loss and test accuracy of finished runs in one figure.

    Curves are labelled ``directory: algorithm``.
    """
    curves = {}
    for directory in directories:
        for name, history in read_histories(directory).items():
            curves[f"{Path(directory).name}: {name}"] = history
    plot_histories(curves, out, title="fedjax-avail compare", x=x)


def write_tensorboard(outcome, log_dir: str | Path) -> None:
    """Every history of a finished run as TensorBoard scalars, one subdirectory per algorithm.

    Uses ``tensorboardX`` (``pip install 'fedjax_avail[tensorboard]'``); the step is the round.
    """
    try:
        from tensorboardX import SummaryWriter
    except ImportError as error:
        raise ImportError("--tensorboard needs tensorboardX: pip install "
                          "'fedjax_avail[tensorboard]'") from error
    for name, history in outcome.histories.items():
        with SummaryWriter(str(Path(log_dir) / name)) as writer:
            for row in history:
                for key, value in row.items():
                    if key != "round" and value == value:
                        writer.add_scalar(key, value, int(row["round"]))
