"""When a periodic action is due: every N rounds, every S seconds, at the start, at the end.

The loop of :func:`fedjax_avail.simulate` runs rounds in chunks that end at the multiples of
every cadence's ``every`` (and at ``rounds``); after a chunk, each callback with a cadence is
asked whether it is due (:meth:`Cadence.due`), in the order the callbacks are listed. The
evaluation (:class:`~fedjax_avail.callbacks.Evaluation`) and checkpointing
(:class:`~fedjax_avail.callbacks.Checkpointing`) are such callbacks; a user's may be too.
"""

from __future__ import annotations

import dataclasses
import time

from fedjax_avail._checks import Count, NonNegative, check_fields
from fedjax_avail.run import Run


@dataclasses.dataclass(frozen=True)
class Cadence:
    """When an action is due.

    Attributes:
      every: at each multiple of this many rounds (the loop ends a chunk there); None: at no
        multiple.
      seconds: with ``every``, skip a multiple that comes less than this many seconds of wall
        time after the action's last time (or the run's start); without ``every``, act at the
        first chunk boundary at least this many seconds after it (boundaries come from the
        other cadences). 0: no such condition.
      at_start: before the first round (a fresh run; a resumed one has acted already).
      at_end: at the run's end: the last round, a stop (Ctrl-C, a divergence, a callback's
        :meth:`~fedjax_avail.Run.stop`), or every run's virtual-time budget reached.
      at_each_end: also at the boundary after each run ended on its own (its virtual-time
        budget reached, its asynchronous clock stalled; a runs axis's runs end at their own
        budgets).

    Example:
      >>> Cadence(every=50, seconds=30.0)  # every 50 rounds, at least 30 s apart, and at the end
    """

    every: Count | None = None
    seconds: NonNegative = 0.0
    at_start: bool = False
    at_end: bool = True
    at_each_end: bool = False

    def __post_init__(self):
        check_fields(self)

    def due(self, run: Run, last: float) -> bool:
        """Whether the action is due at ``run``'s boundary, ``last`` the
        ``time.perf_counter()`` of its last time (or of the run's start)."""
        if self.at_end and run.finishing:
            return True
        if self.at_each_end and run.newly_ended:
            return True
        waited = time.perf_counter() - last >= self.seconds
        if self.every is None:
            return self.seconds > 0 and waited
        return run.done % self.every == 0 and waited
