"""Ctrl-C during a run: finish the chunk in flight, then stop cleanly (a second Ctrl-C aborts)."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import numpy as np

from fedjax_avail.callbacks._callback import Callback
from fedjax_avail.results import Interrupted
from fedjax_avail.run import Run

_UNSET = object()


class StopOnInterrupt:
    """A context manager whose ``requested`` turns True at the first SIGINT.

    The first Ctrl-C only sets the flag (the engine stops at the next chunk boundary, saving what
    it has); a second one raises ``KeyboardInterrupt`` as soon as Python runs again (a compiled
    chunk in flight finishes first). Outside the main thread, where Python delivers no signals,
    or where SIGINT is ignored (a background job), it changes nothing.
    """

    def __init__(self):
        self.requested = False
        self._previous = _UNSET

    def _handle(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __enter__(self) -> StopOnInterrupt:
        if threading.current_thread() is threading.main_thread():
            previous = signal.getsignal(signal.SIGINT)
            if previous is not signal.SIG_IGN:
                signal.signal(signal.SIGINT, self._handle)
                self._previous = previous
        return self

    def __exit__(self, *exc) -> None:
        if self._previous is not _UNSET:
            # getsignal gives None for a handler not installed from Python: restore the default.
            signal.signal(signal.SIGINT, self._previous if self._previous is not None
                          else signal.default_int_handler)


class StopOnCtrlC(Callback):
    """Ctrl-C ends the run at the next chunk boundary with :class:`fedjax_avail.Interrupted`,
    after the boundary's final evaluation and checkpoint (listed first, so the callbacks after
    it, and the actions due at the boundary, see the stop)."""

    def __init__(self, checkpoint_dir: Path | None):
        self.checkpoint_dir = checkpoint_dir
        self._signal = StopOnInterrupt()

    def on_run_start(self, run: Run) -> None:
        self._signal.__enter__()

    def on_chunk_end(self, run: Run, metrics: dict[str, np.ndarray]) -> None:
        if not self._signal.requested or run.complete:  # the last chunk: finished
            return
        where = self.checkpoint_dir
        message = (f"interrupted after round {run.done} of {run.rounds}"
                   + (f"; saved to {where}, run again with the same arguments to resume"
                      if where else " (no checkpoint_dir: nothing saved)"))
        run.stop("interrupted", lambda: Interrupted(message, run.result(), where))

    def on_run_end(self, run: Run) -> None:
        self._signal.__exit__()
