"""Live outputs: the history as a CSV file and as TensorBoard events, written at every
evaluation while the run goes on."""

from __future__ import annotations

import os
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedjax_avail.callbacks._callback import Callback, Run
from fedjax_avail.history import History


class CSVLogger(Callback):
    """Writes every run's history to ``path`` at each evaluation (atomically: a reader never
    sees half a file), so the file is current while the run goes on.

    Args:
      path: the CSV file.
      fields: constant columns put first in every row (e.g. ``{"algorithm": "FedAvg"}``).
      preceding: rows written before this run's (e.g. other algorithms' rows of one file).

    With several runs each row also has a ``seed`` column. A write that fails (a full disk)
    is a warning, not an error: the run goes on.
    """

    def __init__(self, path: str | os.PathLike, fields: Mapping[str, Any] | None = None,
                 preceding: Sequence[Mapping[str, Any]] = ()):
        self.path, self.fields, self.preceding = Path(path), dict(fields or {}), list(preceding)
        self._failed = False

    def on_run_start(self, run: Run) -> None:
        if run.done:  # resumed: the restored rows are current at once
            self.write(run)

    def on_evaluation(self, run: Run, rows: list[dict[str, float]]) -> None:
        self.write(run)

    def write(self, run: Run) -> None:
        """Writes the rows recorded so far."""
        rows = list(self.preceding)
        for i, history in enumerate(run.histories):
            seed = {"seed": run.seeds[i]} if run.several else {}
            rows += [{**self.fields, **seed, **row} for row in history]
        try:
            History(rows).to_csv(self.path)
        except OSError as error:  # an output error never stops the run: warn once
            if not self._failed:
                warnings.warn(f"could not write {self.path} ({error}); the run goes on",
                              stacklevel=2)
            self._failed = True


class TensorBoard(Callback):
    """TensorBoard scalars of every history column at each evaluation (step: the round),
    written to disk before the run goes on; with several runs, one subdirectory per seed
    (``seed_<s>``).

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
        dirs = ([self.log_dir / f"seed_{s}" for s in run.seeds] if run.several
                else [self.log_dir])
        for directory in dirs:
            directory.mkdir(parents=True, exist_ok=True)
        self._writers = [self._writer_type(str(d / "events")) for d in dirs]

    def on_evaluation(self, run: Run, rows: list[dict[str, float]]) -> None:
        for writer, row in zip(self._writers, rows, strict=True):
            values = [self._summary.Value(tag=key, simple_value=float(value))
                      for key, value in row.items() if key != "round" and value == value]
            writer.write_event(self._event(wall_time=time.time(), step=int(row["round"]),
                                           summary=self._summary(value=values)))
            writer.flush()

    def on_run_end(self, run: Run) -> None:
        for writer in self._writers:
            writer.close()
        self._writers = []
