"""The stall guard: an asynchronous run whose next update can never be made stops, naming when."""

from __future__ import annotations

import numpy as np

from fedjax_avail.callbacks._callback import Callback
from fedjax_avail.clock import MAX_SLOTS_PER_UPDATE
from fedjax_avail.results import StalledError
from fedjax_avail.run import Run


class StallGuard(Callback):
    """Ends the run with :class:`fedjax_avail.StalledError` naming each run whose asynchronous
    update could not gather its K results (the clock's ``stalled`` flag: the availability
    process ended, or an update spent ``MAX_SLOTS_PER_UPDATE`` slots without them).

    A stalled run ends on its own at that update (``run.ended``): its last history row is
    there and its per-round metrics stop there; the other runs of a runs axis go on, and the
    error comes at the end of the run, naming every run that stalled with its update, virtual
    time and slot. A restored run that had finished with a stall raises it again.

    Args:
      slot_length: the run's slot length (for the message).
    """

    def __init__(self, slot_length: float = 1.0):
        self.slot_length = slot_length

    def on_run_start(self, run: Run) -> None:
        if run.complete:
            self._report(run)

    def on_chunk_end(self, run: Run, metrics: dict[str, np.ndarray]) -> None:
        if run.finishing:
            self._report(run)

    def on_evaluation(self, run: Run, rows: list[dict[str, float] | None]) -> None:
        if run.finishing:
            self._report(run)

    def _report(self, run: Run) -> None:
        stalls = []
        for i, (end, why) in enumerate(zip(run.ended, run.end_reasons, strict=True)):
            if why == "stalled":  # the update that failed holds the time the run stood still
                stalls.append((end, float(run.round_metrics(end)[i]["virtual_time"][0]), i))
        if not stalls:
            return
        # a stalled clock stands at a slot's start: time / L is that slot, up to rounding
        parts = [f"{run.label(i)}update {end} at virtual time {time:.6g} (slot "
                 f"{round(time / self.slot_length)})" for end, time, i in stalls]
        round_index, time, _ = min(stalls)
        message = (
            "the asynchronous run stalled: " + "; ".join(parts) + ": its jobs could not "
            "gather the results a server update needs because no client will ever be "
            "available again (a trace played once ended: use cyclic=True or fewer rounds) or "
            f"none came back within {MAX_SLOTS_PER_UPDATE} slots. Error.result holds the "
            "history, its last row at that update")
        rounds = [end if why == "stalled" else None
                  for end, why in zip(run.ended, run.end_reasons, strict=True)]
        run.stop("stalled", lambda: StalledError(message, run.result(), round_index, time,
                                                 rounds))
