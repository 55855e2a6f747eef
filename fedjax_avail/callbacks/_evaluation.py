"""The evaluation as a callback: the history rows, at the one list of evaluated rounds.

Every record of a run reads what this callback appends: ``Result.history``, the live CSV and
TensorBoard files (which write the rows it hands to ``on_evaluation``) and the checkpoints
(which save the histories). Its cadence: the initial model, every ``every`` rounds, and each
run's last round (all rounds done, a stop, or its own end: its virtual-time budget reached or
its asynchronous clock stalled; a runs axis's runs end at their own budgets and each gets its
final row at its own last round, once).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from fedjax_avail._checks import Count, check_value
from fedjax_avail.callbacks._cadence import Cadence
from fedjax_avail.callbacks._callback import Callback, Rows
from fedjax_avail.data import FederatedData
from fedjax_avail.evaluation import Evaluators
from fedjax_avail.fairness import fairness_metrics
from fedjax_avail.history import History, round_columns
from fedjax_avail.inputs import check_finite, test_arrays
from fedjax_avail.run import Run
from fedjax_avail.tasks import Task


class Evaluation(Callback):
    """Scores the global model into each run's history rows (module docstring).

    Each row holds ``round``, the summary of the per-round metrics since the run's last row
    (:func:`fedjax_avail.history.round_columns`: ``virtual_time`` at the end of the last of
    those rounds, staleness), ``train_loss`` and ``train_<metric>`` over the training examples,
    ``test_loss`` and ``test_<metric>`` over ``test_data``, and the fairness metrics of the
    per-client test accuracies when ``test_data`` is a ``FederatedData``. A diverged run is not
    scored: its row is ``round`` and NaN in every column its history has.

    ``fa.simulate(..., eval_every=E, test_data=T)`` builds ``Evaluation(T, every=E)``; pass one
    in ``callbacks`` instead to set the other options.

    Args:
      test_data: optional held-out examples (a dict of ``[M, ...]`` arrays or a
        ``FederatedData`` of each client's own test split).
      every: rounds between evaluations (also after round 0 and at each run's last round).
      batch_size: examples per evaluation block (a memory bound).
      train_examples: score the training metrics on this many evenly spaced training examples
        (rows ``floor(i M / n)``, every client's share in proportion) instead of all M; for big
        models whose full evaluation would cost more than the rounds. None: all.

    Raises:
      ValueError / TypeError: a bad argument or test set, naming it.
    """

    def __init__(self, test_data: FederatedData | Mapping[str, Any] | None = None,
                 every: Count = 20, *, batch_size: Count = 4096,
                 train_examples: Count | None = None):
        check_value("eval_every", every, Count)
        check_value("eval_batch_size", batch_size, Count)
        check_value("train_eval_examples", train_examples, Count | None)
        self.test_data, self.test_arrays = test_data, test_arrays(test_data)
        if self.test_arrays is not None:
            check_finite(self.test_arrays, "test_data")
        self.every, self.batch_size, self.train_examples = every, batch_size, train_examples
        self.cadence = Cadence(every=every, at_start=True, at_end=True, at_each_end=True)
        self._evaluators: Evaluators | None = None
        self._last: list[int] = []  # per run, the round of its last row (-1: none)

    def check(self, task: Task, train: FederatedData) -> None:
        """The test set against the task (labels it can read, input sizes) and against the
        training data ``train`` (inputs ``"x"`` on one scale; a per-client test set of its
        clients), before compute."""
        if self.test_arrays is None:
            return
        if task.validate is not None:
            task.validate(self.test_arrays, "test_data")
        if isinstance(self.test_data, FederatedData) and (
                self.test_data.num_clients != train.num_clients):
            raise ValueError(f"test_data is a FederatedData of {self.test_data.num_clients} "
                             f"clients but data has {train.num_clients}: a per-client test set "
                             "holds each training client's own split (the fairness metrics "
                             "compare the clients); pass a dict of arrays for a pooled test set")
        arrays = train.arrays
        if "x" in arrays and "x" in self.test_arrays:  # the inputs (labels are not scaled)
            _check_same_scale("x", np.asarray(arrays["x"]), np.asarray(self.test_arrays["x"]))

    def settings(self) -> dict[str, Any]:
        """What of this callback can change a recorded number (a checkpoint's fingerprint)."""
        return {"eval_every": self.every, "test_data": self.test_arrays,
                "train_eval_examples": self.train_examples, "eval_batch_size": self.batch_size}

    def bind(self, task: Task, train: FederatedData, runs: bool, mesh: Any = None,
             layout: str = "vmap") -> None:
        """Builds the evaluators over ``train`` (the data as placed on the devices), for the
        runs axis's ``layout`` when ``runs``."""
        self._evaluators = Evaluators(task, train, self.test_arrays, self.test_data,
                                      self.batch_size, self.train_examples, runs, mesh, layout)

    def on_run_start(self, run: Run) -> None:
        # A resumed run drops the rows off this cadence (a shorter run's last round, a stop):
        # the uninterrupted run has none there.
        self._last = []
        for i, history in enumerate(run.histories):
            if run.done:
                history.rows[:] = [row for row in history.rows if self._on_schedule(
                    int(row["round"]), run.rounds, run.ended[i])]
            self._last.append(int(history.rows[-1]["round"]) if history.rows else -1)
        start = time.perf_counter()
        self._evaluators.compile(run.params)
        run.timing["compile"] += time.perf_counter() - start

    def _on_schedule(self, round_index: int, rounds: int, end: int | None) -> bool:
        return round_index % self.every == 0 or round_index in (rounds, end)

    def _due_rounds(self, run: Run) -> list[int | None]:
        """Per run, the round of the row due now, or None."""
        due = []
        for end, last in zip(run.ended, self._last, strict=True):
            if end is not None:  # it ended on its own: its last row, once
                due.append(end if end > last else None)
            elif run.done > last and (run.done % self.every == 0 or run.finishing):
                due.append(run.done)
            else:
                due.append(None)
        return due

    def on_due(self, run: Run) -> Rows | None:
        """Appends each run's due row to its history and returns the rows (None for a run with
        none due)."""
        due = self._due_rounds(run)
        if all(d is None for d in due):
            return None
        start = time.perf_counter()
        scored = any(d is None for d in run.diverged)
        values, clients = self._evaluators(run.params) if scored else ({}, None)
        pending: dict[int, list[dict[str, np.ndarray]]] = {}  # since -> each run's metrics
        rows: Rows = []
        for i, (history, at) in enumerate(zip(run.histories, due, strict=True)):
            if at is None:
                rows.append(None)
                continue
            row = self._row(run, i, at, history, values, clients, pending)
            history.append(row)
            self._last[i] = at
            rows.append(row)
        run.timing["eval"] += time.perf_counter() - start
        return rows

    def _row(self, run: Run, i: int, at: int, history: History,
             values: dict[str, dict[str, np.ndarray]], clients: dict[str, np.ndarray] | None,
             pending: dict[int, list[dict[str, np.ndarray]]]) -> dict[str, float]:
        row: dict[str, float] = {"round": at}
        if run.diverged[i] is not None:  # a non-finite model is not scored: its metrics lie
            row.update({name: math.nan for name in history.columns if name != "round"})
            return row
        if at == 0:
            row["virtual_time"] = 0.0  # every run starts at time 0
        else:  # the rounds since its last row, up to this one's (not those after its end)
            since = max(self._last[i], 0)
            if since not in pending:
                pending[since] = run.round_metrics(since)
            row.update(round_columns({k: v[:at - since] for k, v in pending[since][i].items()}))
        for split, split_values in values.items():
            for k in ["loss", *(k for k in split_values if k != "loss")]:
                v = split_values[k]
                row[f"{split}_{k}"] = float(v[i] if run.several else v)
        if clients is not None and "accuracy" in clients:
            accuracy = clients["accuracy"][i] if run.several else clients["accuracy"]
            row.update({f"test_{k}": v for k, v in fairness_metrics(accuracy).items()})
        return row


def _check_same_scale(key: str, train: np.ndarray, test: np.ndarray) -> None:
    """Raises ValueError where the training and test arrays of ``key`` would be read on two
    scales: unsigned integer pixels are divided by their dtype's maximum
    (:func:`fedjax_avail.tasks.normalize_images`), floats are used as they are, so uint8
    images next to 0-255 floats (or uint16 ones) would be scored on another scale than they
    were trained on."""
    unsigned = [a.dtype for a in (train, test) if a.dtype.kind == "u"]
    if not unsigned:
        return
    if len(unsigned) == 2:
        if train.dtype != test.dtype:
            raise ValueError(f"test_data[{key!r}] is {test.dtype} but data.arrays[{key!r}] is "
                             f"{train.dtype}: integer pixels are divided by their dtype's "
                             "maximum, so the two would be read on different scales; give "
                             "both one dtype")
        return
    floats = test if train.dtype.kind == "u" else train
    if floats.dtype.kind == "f" and floats.size and (floats.min() < 0 or floats.max() > 1):
        names = ("test_data", "data.arrays") if floats is test else ("data.arrays", "test_data")
        raise ValueError(f"{names[0]}[{key!r}] holds floats in [{floats.min()}, "
                         f"{floats.max()}] but {names[1]}[{key!r}] is {unsigned[0]}, whose "
                         "pixels are scaled to [0, 1]: the two would be read on different "
                         f"scales; give both one dtype (e.g. {names[0]}[{key!r}].astype("
                         f"np.{unsigned[0]}))")
