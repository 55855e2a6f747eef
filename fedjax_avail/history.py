"""The record of a run: one row of metrics per evaluation."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from fedjax_avail._io import atomic_write_text


class History:
    """Per-evaluation metrics: ``round`` (rounds completed), ``train_loss``, ``test_loss``, ...

    Example:
      >>> h = History([{"round": 0, "train_loss": 2.3}, {"round": 20, "train_loss": 1.1}])
      >>> h["train_loss"].tolist(), h.columns
      ([2.3, 1.1], ['round', 'train_loss'])
    """

    def __init__(self, rows: list[dict[str, float]] | None = None):
        self.rows: list[dict[str, float]] = list(rows or [])

    def append(self, row: dict[str, float]) -> None:
        self.rows.append(dict(row))

    @property
    def columns(self) -> list[str]:
        names: dict[str, None] = {}
        for row in self.rows:
            names.update(dict.fromkeys(row))
        return list(names)

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[dict[str, float]]:
        return iter(self.rows)

    def __getitem__(self, column: str) -> np.ndarray:
        if column not in self.columns:
            raise KeyError(f"no column {column!r}; columns are {self.columns}")
        return np.asarray([row.get(column, math.nan) for row in self.rows])

    def to_csv(self, path: str | Path | None = None) -> str:
        """Writes the history as CSV (atomically, when a path is given) and returns the text."""
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=self.columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(self.rows)
        text = out.getvalue()
        if path is not None:
            atomic_write_text(path, text)
        return text

    def to_pandas(self):
        """The history as a ``pandas.DataFrame`` (needs pandas)."""
        import pandas as pd

        return pd.DataFrame(self.rows, columns=self.columns)

    def __repr__(self) -> str:
        last = self.rows[-1] if self.rows else {}
        return f"History({len(self)} rows, last={last})"


# The per-round flag of a run with a virtual-time budget (``simulate(max_virtual_time=...)``):
# 0 for the rounds after the budget, which change nothing (``timeline.budget_flag``).
IN_BUDGET = "in_budget"


def on_shared_rounds(histories: Sequence[History]) -> list[History]:
    """Each history's rows at the rounds every one of them recorded (their ``round`` column),
    in order: what several seeds' histories are compared or averaged at. A time budget
    (``max_virtual_time``) stops each seed at its own round, so their last rows (and rows by
    position) need not be the same round. Histories without a ``round`` column keep their
    first rows, as many as the shortest has."""
    if not histories:
        return []
    if any("round" not in h.columns for h in histories):
        length = min(len(h) for h in histories)
        return [History(h.rows[:length]) for h in histories]
    rounds = []
    for i, history in enumerate(histories):
        recorded = [row["round"] for row in history]
        if len(set(recorded)) < len(recorded):
            twice = next(r for r in recorded if recorded.count(r) > 1)
            raise ValueError(f"histories[{i}] records round {twice:g} twice; each round once")
        rounds.append(set(recorded))
    shared = set.intersection(*rounds)
    return [History([row for row in h if row["round"] in shared]) for h in histories]


def round_columns(metrics: dict[str, np.ndarray]) -> dict[str, float]:
    """History columns summarising the per-round metrics of the rounds since the last row.

    Every run records ``virtual_time`` (at the end of the last of those rounds); asynchronous
    runs also record the mean and largest staleness of the contributions applied in them
    (``staleness_mean``, ``staleness_max``; NaN when none was applied).
    """
    row: dict[str, float] = {}
    if IN_BUDGET in metrics:  # only the rounds that ran
        ran = np.asarray(metrics[IN_BUDGET], bool)
        metrics = {k: np.asarray(v)[ran] for k, v in metrics.items()}
    if "virtual_time" in metrics and len(metrics["virtual_time"]):
        row["virtual_time"] = float(metrics["virtual_time"][-1])
    if "applied_staleness" in metrics:
        staleness = np.asarray(metrics["applied_staleness"])
        staleness = staleness[staleness >= 0]
        row["staleness_mean"] = float(staleness.mean()) if staleness.size else math.nan
        row["staleness_max"] = float(staleness.max()) if staleness.size else math.nan
    return row
