"""Live outputs: the history as a CSV file and as TensorBoard events, written at every
evaluation while the run goes on. A write that fails (a full disk) is a warning, not an error:
an output never stops the run or costs it its checkpoint."""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fedjax_avail.callbacks._callback import Callback, Run
from fedjax_avail.history import History


def run_names(run: Run) -> list[dict[str, Any]]:
    """What tells each run's rows apart: ``{"seed": s}`` with several runs, or ``{"run": i,
    "seed": s}`` when runs share a seed (hyperparameter values in one program); one run:
    nothing."""
    if not run.several:
        return [{}]
    if len(set(map(str, run.seeds))) == len(run.seeds):
        return [{"seed": s} for s in run.seeds]
    return [{"run": i, "seed": s} for i, s in enumerate(run.seeds)]


class _Output(Callback):
    """Writes through :meth:`_attempt`, which warns once instead of raising ``OSError``."""

    _failed = False

    def _attempt(self, what: Path, write: Callable[[], Any]) -> None:
        try:
            write()
        except OSError as error:
            if not self._failed:
                warnings.warn(f"could not write {what} ({error}); the run goes on",
                              stacklevel=3)
            self._failed = True


class CSVLogger(_Output):
    """Writes every run's history to ``path`` at each evaluation (atomically: a reader never
    sees half a file), so the file is current while the run goes on.

    Args:
      path: the CSV file (its directory is made if missing).
      fields: constant columns put first in every row (e.g. ``{"algorithm": "FedAvg"}``).
      preceding: rows written before this run's (e.g. other algorithms' rows of one file).

    With several runs each row also has a ``seed`` column (and ``run``, when runs share a
    seed).
    """

    def __init__(self, path: str | os.PathLike, fields: Mapping[str, Any] | None = None,
                 preceding: Sequence[Mapping[str, Any]] = ()):
        self.path, self.fields, self.preceding = Path(path), dict(fields or {}), list(preceding)

    def on_run_start(self, run: Run) -> None:
        if run.done:  # resumed: the restored rows are current at once
            self.write(run)

    def on_evaluation(self, run: Run, rows: list[dict[str, float]]) -> None:
        self.write(run)

    def write(self, run: Run) -> None:
        """Writes the rows recorded so far."""
        rows = list(self.preceding)
        for name, history in zip(run_names(run), run.histories, strict=True):
            rows += [{**self.fields, **name, **row} for row in history]

        def write_rows():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            History(rows).to_csv(self.path)

        self._attempt(self.path, write_rows)


class TensorBoard(_Output):
    """TensorBoard scalars of every history column at each evaluation (step: the round),
    written to disk before the run goes on; with several runs, one subdirectory per run
    (``seed_<s>``, or ``run_<i>_seed_<s>`` when runs share a seed).

    Needs ``tensorboardX`` (``pip install 'fedjax_avail[tensorboard]'``), checked when the
    callback is made, before any compute. Its synchronous event-file writer is used, not
    ``SummaryWriter``, whose background thread writes events at some later time.
    """

    def __init__(self, log_dir: str | os.PathLike):
        try:
            from tensorboardX.event_file_writer import EventsWriter
            from tensorboardX.proto import event_pb2, summary_pb2
        except ImportError as error:
            raise ImportError("TensorBoard logging needs tensorboardX: pip install "
                              "'fedjax_avail[tensorboard]'") from error
        self.log_dir, self._writers = Path(log_dir), []
        self._writer_type, self._event, self._summary = (EventsWriter, event_pb2.Event,
                                                         summary_pb2.Summary)

    def on_run_start(self, run: Run) -> None:
        names = ["_".join(f"{k}_{v}" for k, v in name.items()) for name in run_names(run)]
        dirs = [self.log_dir / name if name else self.log_dir for name in names]

        def open_writers():
            for directory in dirs:
                directory.mkdir(parents=True, exist_ok=True)
            self._writers = [self._writer_type(str(d / "events")) for d in dirs]

        self._attempt(self.log_dir, open_writers)

    def on_evaluation(self, run: Run, rows: list[dict[str, float]]) -> None:
        for writer, row in zip(self._writers, rows, strict=False):
            values = [self._summary.Value(tag=key, simple_value=float(value))
                      for key, value in row.items() if key != "round" and value == value]
            event = self._event(wall_time=time.time(), step=int(row["round"]),
                                summary=self._summary(value=values))
            self._attempt(self.log_dir, lambda w=writer, e=event: (w.write_event(e), w.flush()))

    def on_run_end(self, run: Run) -> None:
        for writer in self._writers:
            self._attempt(self.log_dir, writer.close)
        self._writers = []
