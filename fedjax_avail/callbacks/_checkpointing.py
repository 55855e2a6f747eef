"""Checkpointing as a callback: the run saved at chunk boundaries, and continued from its newest
intact checkpoint (storage and verification: :mod:`fedjax_avail.checkpoint`)."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from pathlib import Path

import jax
import numpy as np

from fedjax_avail._checks import NonNegative, check_value
from fedjax_avail._host import to_host
from fedjax_avail.callbacks._callback import Callback, Run, join_chunks
from fedjax_avail.checkpoint import KEEP, RunCheckpointer
from fedjax_avail.history import History


class Checkpointing(Callback):
    """Saves the run into ``directory`` every ``every`` rounds (skipping a save that would
    come less than ``seconds`` of wall time after the run's start or its last save), at the
    end and when the run is stopped (Ctrl-C, a callback's
    :meth:`~fedjax_avail.callbacks.Run.stop`), keeping the newest ``keep``; :meth:`restore`
    continues a run from the newest intact checkpoint.

    A save costs about 70 ms however small the model (orbax: the CLI's default run, 3 x 600
    rounds saved every 50, spent 2.7 s on 36 saves), so ``seconds`` bounds that cost for runs
    whose rounds are fast; a run killed outright loses at most ``seconds`` plus ``every``
    rounds of work.

    Listed last, so it saves what every other callback of the boundary has seen (and a stop
    any of them asked for).
    """

    def __init__(self, directory: str | Path, settings: Mapping[str, str], every: int,
                 keep: int = KEEP, seconds: float = 0.0):
        check_value("seconds", seconds, NonNegative)
        self.checkpointer = RunCheckpointer(directory, settings, keep)
        self.directory, self.every, self.seconds = self.checkpointer.directory, every, seconds
        self._last = time.perf_counter()

    def on_run_start(self, run: Run) -> None:
        self._last = time.perf_counter()

    def restore(self, run: Run) -> bool:
        """Puts the newest intact checkpoint of this run into ``run`` (before anything is
        compiled); False when the directory holds none.

        Raises:
          ValueError: a checkpoint of a different run (naming the settings that differ) or of
            other code (naming the code that wrote it), none intact, or one with more rounds
            done than ``run.rounds``.
        """
        restored = self.checkpointer.restore(jax.eval_shape(lambda: run.carry))
        if restored is None:
            return False
        if restored.done > run.rounds:
            raise ValueError(
                f"checkpoint_dir holds this run after {restored.done} rounds, more than "
                f"rounds={run.rounds}; ask for at least {restored.done} rounds or use another "
                "checkpoint_dir")
        run.done = run.started_at = restored.done
        run.carry = restored.carry
        # The last row of a shorter run may be off the eval_every schedule: an uninterrupted
        # longer run has no row there.
        saved = restored.rows if run.several else [restored.rows]
        run.histories = [History([row for row in rows if row["round"] % run.eval_every == 0
                                  or row["round"] == run.rounds]) for rows in saved]
        since = int(run.histories[0].rows[-1]["round"])  # rounds the rows summarise
        metrics = restored.round_metrics
        run.chunks = [{k: v[:since] for k, v in metrics.items()},
                      {k: v[since:] for k, v in metrics.items()}]
        run.reported_chunks = 1
        # A run diverged where its model first was not finite (the health flag) or its loss
        # first was not (seen by the host at an evaluation, recorded in its rows).
        health = np.atleast_1d(to_host(run.carry[2]))
        run.diverged = [_diverged_at(int(h), history)
                        for h, history in zip(health, run.histories, strict=True)]
        run.timing["earlier"] = restored.seconds
        return True

    def on_chunk_end(self, run: Run, metrics: dict[str, np.ndarray]) -> None:
        if run.done != run.rounds and run.stop_reason is None and (
                run.done % self.every or time.perf_counter() - self._last < self.seconds):
            return
        rows = [h.rows for h in run.histories] if run.several else run.histories[0].rows
        seconds = run.timing.get("earlier", 0.0) + time.perf_counter() - run.start_time
        self.checkpointer.save(run.done, run.carry, rows, join_chunks(run.chunks), seconds)
        self._last = time.perf_counter()


def _diverged_at(health: int, history: History) -> int | None:
    """The first round whose model (``health`` >= 0) or recorded loss was not finite."""
    rounds = [int(row["round"]) for row in history.rows if not math.isfinite(row["train_loss"])]
    return min([*rounds, *([health] if health >= 0 else [])], default=None)
