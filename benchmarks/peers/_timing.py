"""Per-round timing figures, one definition for the harness and every peer's script.

numpy only: the peers' scripts import it in their own virtual environments (FedJAX's, Flower's),
where ``fedjax_avail`` is not installed; ``peer_comparison.py`` and ``fedlaavg_mnist.py`` import
it as ``peers._timing``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def round_figures(per_round_s: Sequence[float], warmup_s: float) -> dict[str, float | int]:
    """The figures of ``len(per_round_s)`` timed rounds run after one untimed warm-up round:
    their count, the rounds run in all, the warm-up's time, their total, mean (``s_per_round``),
    median, min and max, in seconds."""
    timed = np.asarray(per_round_s, dtype=np.float64)
    return {
        "rounds_timed": int(timed.size),
        "rounds_run": int(timed.size) + 1,
        "warmup_round_s": float(warmup_s),
        "timed_s": float(timed.sum()),
        "s_per_round": float(timed.mean()),
        "s_per_round_median": float(np.median(timed)),
        "s_per_round_min": float(timed.min()),
        "s_per_round_max": float(timed.max()),
    }
