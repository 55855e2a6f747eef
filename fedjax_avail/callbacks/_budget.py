"""The virtual-time budget: a run ends once every run has reached ``max_virtual_time``."""

from __future__ import annotations

import numpy as np

from fedjax_avail.callbacks._callback import Callback, Run


class TimeBudget(Callback):
    """Stops the run at the end of the chunk in which every run reached ``max_virtual_time``.

    The compiled rounds past a run's budget change nothing (``simulate``'s ``max_virtual_time``)
    and :meth:`Run.results` cuts each run's record at its last round, so stopping at a chunk
    boundary loses nothing and adds nothing.
    """

    def __init__(self, max_virtual_time: float):
        self.max_virtual_time = max_virtual_time

    def on_chunk_end(self, run: Run, metrics: dict[str, np.ndarray]) -> None:
        times = np.asarray(metrics["virtual_time"])
        if len(times) and np.all(times[-1] >= self.max_virtual_time):
            run.stop(f"max_virtual_time={self.max_virtual_time:g} reached")
