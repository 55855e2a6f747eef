"""Live outputs: the history as a CSV file and as TensorBoard events, written at every
evaluation while the run goes on. A write that fails (a full disk) is a warning, not an error:
an output never stops the run or costs it its checkpoint."""

from __future__ import annotations

import csv
import dataclasses
import io
import os
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fedjax_avail._io import atomic_write_text
from fedjax_avail.callbacks._callback import Callback
from fedjax_avail.run import Run


def run_names(run: Run, runs: Mapping[int, Mapping[str, Any]] | None = None
              ) -> dict[int, dict[str, Any]]:
    """Run index -> what tells its rows apart: ``{"seed": s}`` with several runs, or ``{"run":
    i, "seed": s}`` when runs share a seed (hyperparameter values in one program); one run:
    nothing. ``runs``: only these runs, with these names (an output's ``runs``)."""
    if runs is not None:
        return {i: dict(name) for i, name in runs.items()}
    return dict(enumerate(_default_names(run)))


def _default_names(run: Run) -> list[dict[str, Any]]:
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
      runs: which of the call's runs to write, each with the columns that name its rows
        (``{2: {"seed": 0}, 3: {"seed": 1}}``: one sweep point's seeds among other points'
        runs in one program; ``{2: {}}``: one run, unnamed); None: every run.

    With several runs each row also has a ``seed`` column (and ``run``, when runs share a
    seed). Each row is formatted once, when it is new (every row again when the header
    changes), so writing at every evaluation stays cheap however long the run; rows, like
    everything a callback sees, must not be changed once recorded.
    """

    def __init__(self, path: str | os.PathLike, fields: Mapping[str, Any] | None = None,
                 preceding: Sequence[Mapping[str, Any]] = (),
                 runs: Mapping[int, Mapping[str, Any]] | None = None):
        self.path, self.fields, self.preceding = Path(path), dict(fields or {}), list(preceding)
        self.runs = runs
        self._blocks: list[_Block] = []  # the file's rows: preceding, then each run's
        self._header: list[str] = []

    def on_run_start(self, run: Run) -> None:
        self._blocks = []  # a logger may serve several calls: nothing of this one written yet
        if run.done:  # resumed: the restored rows are current at once
            self.write(run)

    def on_evaluation(self, run: Run, rows: list[dict[str, float] | None]) -> None:
        self.write(run)

    def write(self, run: Run) -> None:
        """Writes the rows recorded so far."""
        names = run_names(run, self.runs)
        sources = [self.preceding, *(run.histories[i].rows for i in names)]
        prefixes = [{}, *({**self.fields, **name} for name in names.values())]
        if len(self._blocks) != len(sources) or any(
                block.source is not rows or len(rows) < len(block.rows)
                for block, rows in zip(self._blocks, sources, strict=True)):
            self._blocks = [_Block(rows) for rows in sources]  # other histories: start over
        new = [block.extend(prefix) for block, prefix in zip(self._blocks, prefixes,
                                                               strict=True)]
        header = list(dict.fromkeys(c for block in self._blocks for c in block.columns))
        if header != self._header:  # as History.to_csv orders columns: every row again
            self._header = header
            for block in self._blocks:
                block.text = [_csv_text(header, block.rows)]
        else:
            for block, rows in zip(self._blocks, new, strict=True):
                block.text.append(_csv_text(header, rows))
        text = _csv_text(header, [], header=True) + "".join(
            piece for block in self._blocks for piece in block.text)

        def write_text():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.path, text)

        self._attempt(self.path, write_text)


@dataclasses.dataclass
class _Block:
    """Rows of one source (the preceding rows, or a run's history) as written so far."""

    source: list[Mapping[str, Any]]  # the rows as recorded (it grows)
    rows: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # with their prefix
    columns: dict[str, None] = dataclasses.field(default_factory=dict)  # in order of use
    text: list[str] = dataclasses.field(default_factory=list)  # ``rows`` as CSV, in pieces

    def extend(self, prefix: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Takes the source's new rows (``prefix`` first in each); returns them."""
        new = [{**prefix, **row} for row in self.source[len(self.rows):]]
        self.rows += new
        for row in new:
            self.columns.update(dict.fromkeys(row))
        return new


def _csv_text(columns: list[str], rows: list[dict[str, Any]], header: bool = False) -> str:
    """``rows`` as CSV lines under ``columns`` (missing values empty), as
    :meth:`History.to_csv` writes them; with ``header``, the header line first."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    if header:
        writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


class TensorBoard(_Output):
    """TensorBoard scalars of every history column at each evaluation (step: the round),
    written to disk before the run goes on; with several runs, one subdirectory per run
    (``seed_<s>``, or ``run_<i>_seed_<s>`` when runs share a seed); ``runs`` as
    :class:`CSVLogger`'s (each selected run's subdirectory named by its columns).

    Needs ``tensorboardX`` (``pip install 'fedjax_avail[tensorboard]'``), checked when the
    callback is made, before any compute. Its synchronous event-file writer is used, not
    ``SummaryWriter``, whose background thread writes events at some later time. A resumed run
    begins its event files with TensorBoard's purge marker (``SummaryWriter``'s
    ``purge_step``) at the round after its last kept row, so TensorBoard drops what an earlier
    process wrote after that point (a stop's row, rows after the checkpoint it resumes from):
    it shows the rows the run's history holds.
    """

    def __init__(self, log_dir: str | os.PathLike,
                 runs: Mapping[int, Mapping[str, Any]] | None = None):
        try:
            from tensorboardX.event_file_writer import EventsWriter
            from tensorboardX.proto import event_pb2, summary_pb2
        except ImportError as error:
            raise ImportError("TensorBoard logging needs tensorboardX: pip install "
                              "'fedjax_avail[tensorboard]'") from error
        self.log_dir, self.runs, self._writers = Path(log_dir), runs, []
        self._indices: list[int] = []
        self._writer_type, self._event, self._summary = (EventsWriter, event_pb2.Event,
                                                         summary_pb2.Summary)
        self._session_log = event_pb2.SessionLog

    def on_run_start(self, run: Run) -> None:
        selected = run_names(run, self.runs)
        self._indices = list(selected)
        names = ["_".join(f"{k}_{v}" for k, v in name.items()) for name in selected.values()]
        dirs = [self.log_dir / name if name else self.log_dir for name in names]

        def open_writers():
            for directory in dirs:
                directory.mkdir(parents=True, exist_ok=True)
            self._writers = [self._writer_type(str(d / "events")) for d in dirs]
            if run.done:  # resumed: TensorBoard purges the earlier events from here on
                for writer, i in zip(self._writers, self._indices, strict=True):
                    history = run.histories[i]
                    step = int(history.rows[-1]["round"]) + 1 if history.rows else 0
                    writer.write_event(self._event(
                        wall_time=time.time(), step=step,
                        session_log=self._session_log(status=self._session_log.START)))
                    writer.flush()

        self._attempt(self.log_dir, open_writers)

    def on_evaluation(self, run: Run, rows: list[dict[str, float] | None]) -> None:
        for writer, i in zip(self._writers, self._indices, strict=False):
            row = rows[i]
            if row is None:  # no new row for that run (it ended on its own earlier)
                continue
            values = [self._summary.Value(tag=key, simple_value=float(value))
                      for key, value in row.items() if key != "round" and value == value]
            event = self._event(wall_time=time.time(), step=int(row["round"]),
                                summary=self._summary(value=values))
            self._attempt(self.log_dir, lambda w=writer, e=event: (w.write_event(e), w.flush()))

    def on_run_end(self, run: Run) -> None:
        for writer in self._writers:
            self._attempt(self.log_dir, writer.close)
        self._writers = []
