"""Ctrl-C during a run: finish the chunk in flight, then stop cleanly (a second Ctrl-C aborts)."""

from __future__ import annotations

import signal
import threading


class StopOnInterrupt:
    """A context manager whose ``requested`` turns True at the first SIGINT.

    The first Ctrl-C only sets the flag (the engine stops at the next chunk boundary, saving what
    it has); the second raises ``KeyboardInterrupt`` at once. Outside the main thread, where
    Python delivers no signals, it does nothing.
    """

    def __init__(self):
        self.requested = False
        self._previous = None

    def _handle(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __enter__(self) -> StopOnInterrupt:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
