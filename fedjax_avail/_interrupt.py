"""Ctrl-C during a run: finish the chunk in flight, then stop cleanly (a second Ctrl-C aborts)."""

from __future__ import annotations

import signal
import threading

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
