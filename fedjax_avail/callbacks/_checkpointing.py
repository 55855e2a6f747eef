"""Checkpointing as a callback with a cadence: the run saved at chunk boundaries, and continued
from its newest intact checkpoint (storage and verification: :mod:`fedjax_avail.checkpoint`)."""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Mapping

import jax
import numpy as np

from fedjax_avail._checks import Count, NonNegative, check_value
from fedjax_avail._host import to_host
from fedjax_avail._io import check_writable_dir
from fedjax_avail._lock import DirectoryLock
from fedjax_avail.callbacks._cadence import Cadence
from fedjax_avail.callbacks._callback import Callback
from fedjax_avail.checkpoint import KEEP, RunCheckpointer
from fedjax_avail.history import History
from fedjax_avail.run import Run, join_chunks


class Checkpointing(Callback):
    """Saves the run into ``directory`` every ``every`` rounds and at its end (the last round,
    a stop: Ctrl-C, a callback's :meth:`~fedjax_avail.Run.stop`, a divergence of some of its
    runs), keeping the newest ``keep``; :meth:`restore` continues a run from the newest intact
    checkpoint, bit-identically.

    ``fa.simulate(..., checkpoint_dir=D)`` builds ``Checkpointing(D, every=eval_every)``; pass
    one in ``callbacks`` instead to set the other options. A run whose every run diverged is
    not saved (its state is NaN): the checkpoint before it stays the newest.

    A save costs about 70 ms however small the model (orbax: the CLI's default run, 3 x 600
    rounds saved every 50, spent 2.7 s on 36 saves), so ``seconds`` bounds that cost for runs
    whose rounds are fast; a run killed outright loses at most ``seconds`` plus ``every``
    rounds of work.

    Args:
      directory: where the checkpoints live (made if missing; must be writable). The run holds
        a lock on it (:class:`fedjax_avail.DirectoryBusyError` for a second run on it).
      every: rounds between checkpoints; None: only at the run's end.
      keep: how many of the newest checkpoints to keep (default 2: the newest and the fallback
        should it be damaged).
      seconds: skip a checkpoint due less than this many seconds of wall time after the run's
        start or its last save (the end is always saved).
    """

    def __init__(self, directory: str | os.PathLike, every: Count | None = None, *,
                 keep: Count = KEEP, seconds: NonNegative = 0.0):
        check_value("checkpoint_dir", directory, str | os.PathLike)
        check_value("checkpoint_every", every, Count | None)
        check_value("checkpoint_keep", keep, Count)
        check_value("checkpoint_seconds", seconds, NonNegative)
        self.directory = check_writable_dir(directory, "checkpoint_dir").resolve()
        self.every, self.keep, self.seconds = every, keep, seconds
        self.cadence = Cadence(every=every, seconds=seconds, at_end=True)
        self._checkpointer: RunCheckpointer | None = None
        # the rounds of the newest checkpoint: a step is saved once (a stop's row added after
        # the step was saved is one a resume drops anyway: off the evaluation's cadence)
        self._saved = 0

    def lock(self) -> contextlib.AbstractContextManager:
        """The directory's lock for the run (held by the first process of a multi-process
        run), so a second run on it refuses at once."""
        return (DirectoryLock(self.directory, "checkpoint_dir") if jax.process_index() == 0
                else contextlib.nullcontext())

    def restore(self, run: Run, settings: Mapping[str, str]) -> bool:
        """Puts the newest intact checkpoint of this run (``settings``: its fingerprint,
        :func:`fedjax_avail.checkpoint.run_settings`) into ``run``, before anything is
        compiled; False when the directory holds none.

        Raises:
          ValueError: a checkpoint of a different run (naming the settings that differ) or of
            other code (naming the code that wrote it), none intact, or one with more rounds
            done than ``run.rounds``.
        """
        self._checkpointer = RunCheckpointer(self.directory, settings, self.keep)
        self._saved = 0
        restored = self._checkpointer.restore(jax.eval_shape(lambda: run.carry))
        if restored is None:
            return False
        if restored.done > run.rounds:
            raise ValueError(
                f"checkpoint_dir holds this run after {restored.done} rounds, more than "
                f"rounds={run.rounds}; ask for at least {restored.done} rounds or use another "
                "checkpoint_dir")
        run.done = run.started_at = restored.done
        run.carry = restored.carry
        saved = restored.rows if run.several else [restored.rows]
        run.histories = [History(rows) for rows in saved]
        run.chunks = [restored.round_metrics]
        run.record_ends(0)
        # A run diverged where its model first was not finite (the health flag) or its loss
        # first was not (seen by the host at an evaluation, recorded in its rows).
        health = np.atleast_1d(to_host(run.carry[2]))
        run.diverged = [_diverged_at(int(h), history)
                        for h, history in zip(health, run.histories, strict=True)]
        run.timing["earlier"] = restored.seconds
        self._saved = run.done
        return True

    def on_due(self, run: Run) -> None:
        if run.done in (0, self._saved) or all(d is not None for d in run.diverged):
            return  # nothing ran, or saved already; no run of it is healthy: not worth keeping
        rows = [h.rows for h in run.histories] if run.several else run.histories[0].rows
        seconds = run.timing.get("earlier", 0.0) + time.perf_counter() - run.start_time
        self._checkpointer.save(run.done, run.carry, rows, join_chunks(run.chunks), seconds)
        self._saved = run.done


def _diverged_at(health: int, history: History) -> int | None:
    """The first round whose model (``health`` >= 0) or recorded loss was not finite."""
    rounds = [int(row["round"]) for row in history.rows if not math.isfinite(row["train_loss"])]
    return min([*rounds, *([health] if health >= 0 else [])], default=None)

