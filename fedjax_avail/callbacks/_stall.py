"""The stall guard: an asynchronous run whose next update can never be made stops, naming when."""

from __future__ import annotations

import numpy as np

from fedjax_avail.callbacks._callback import Callback
from fedjax_avail.clock import MAX_SLOTS_PER_UPDATE
from fedjax_avail.results import StalledError
from fedjax_avail.run import Run


class StallGuard(Callback):
    """Raises :class:`fedjax_avail.StalledError` at the end of the chunk in which an
    asynchronous update could not gather its K results (the event clock's ``stalled`` flag:
    the availability process ended, or no result arrived within ``MAX_SLOTS_PER_UPDATE``
    slots). The error's result keeps the history; updates after the stall applied nothing.

    Args:
      slot_length: the run's slot length (for the message).
    """

    def __init__(self, slot_length: float = 1.0):
        self.slot_length = slot_length

    def on_chunk_end(self, run: Run, metrics: dict[str, np.ndarray]) -> None:
        if "stalled" not in metrics or not np.any(metrics["stalled"]):
            return
        stalled = np.asarray(metrics["stalled"]).reshape(len(metrics["stalled"]), -1)
        times = np.asarray(metrics["virtual_time"]).reshape(stalled.shape)
        first_round = run.done - stalled.shape[0]
        parts, rounds = [], []
        for i in range(stalled.shape[1]):
            if stalled[:, i].any():
                j = int(np.argmax(stalled[:, i]))
                rounds.append((first_round + j, float(times[j, i])))
                parts.append(f"{run.label(i)}update {first_round + j} at virtual time "
                             f"{times[j, i]:.6g} (slot {int(times[j, i] // self.slot_length)})")
        round_index, time = min(rounds)
        message = (
            "the asynchronous run stalled: " + "; ".join(parts) + ": its jobs could not "
            "gather the results a server update needs because no client will ever be "
            "available again (a trace played once ended: use cyclic=True or fewer rounds) or "
            f"none came back within {MAX_SLOTS_PER_UPDATE} slots. Error.result holds the "
            "history; the updates from that one on applied nothing")
        run.stop("stalled", lambda: StalledError(message, run.result(), round_index, time))
