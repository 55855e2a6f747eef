"""Asynchronous jobs: durations, the clocks that complete them, where stale models live.

Shared by every asynchronous algorithm (``KAsyncSGD``, ``WKAFL``, ``FedBuff``, ``FedAsync``...):
one ``simulate`` round is one server update; :func:`make_clock` picks the event clock (jobs of
random durations in concurrency slots, :mod:`._events`) or WKAFL's K-of-P protocol
(:class:`KofP`); :func:`model_store` keeps the models stale jobs started from.
"""

from __future__ import annotations

import numpy as np

from fedjax_avail.clock._durations import Constant, Durations, Exponential, KofP, LogNormal
from fedjax_avail.clock._events import (
    MAX_SLOTS_PER_UPDATE,
    OFFLINE,
    Completions,
    EventClock,
    EventClockState,
    check_offline,
)
from fedjax_avail.clock._fedscale import capacity_seconds, from_fedscale_capacity
from fedjax_avail.clock._kofp import KofPClock, KofPState
from fedjax_avail.clock._rounds import RoundClock, RoundClockState
from fedjax_avail.clock._store import ModelHistory, PerClientModels, Starts, model_store


def make_clock(
    durations: Durations | KofP, events: int, concurrency: int | None = None,
    offline: str = "lost",
) -> EventClock | KofPClock:
    """The clock for ``durations``: K-of-P reports, or events of random durations."""
    if isinstance(durations, KofP):
        return KofPClock(events, durations.one_per_round)
    if not isinstance(durations, (Constant, Exponential, LogNormal)):
        raise TypeError(f"durations must be fa.clock.Constant, Exponential, LogNormal or KofP, "
                        f"got {type(durations).__name__}")
    check_offline(offline)
    return EventClock(durations, concurrency, events, offline)


def staleness_histogram(round_metrics) -> np.ndarray:
    """``counts[s]``: how many applied contributions had staleness s, over a whole run.

    Args:
      round_metrics: ``Result.round_metrics`` of an asynchronous run (its ``applied_staleness``
        ``[R, K]``, -1 for empty slots), or that array itself.
    """
    if hasattr(round_metrics, "get"):
        if "applied_staleness" not in round_metrics:
            raise ValueError(
                "round_metrics has no 'applied_staleness': staleness_histogram needs the "
                "round_metrics of an asynchronous run (FedBuff, FedAsync, WKAFL, ...); a "
                f"synchronous run records {sorted(round_metrics)}")
        round_metrics = round_metrics["applied_staleness"]
    staleness = np.asarray(round_metrics)
    if staleness.dtype.kind not in "iu":
        raise ValueError(f"applied_staleness must be an integer array, got {staleness.dtype}")
    staleness = staleness[staleness >= 0]
    return np.bincount(staleness.astype(np.int64)) if staleness.size else np.zeros(1, np.int64)


__all__ = [
    "MAX_SLOTS_PER_UPDATE",
    "OFFLINE",
    "Completions",
    "Constant",
    "Durations",
    "EventClock",
    "EventClockState",
    "Exponential",
    "KofP",
    "KofPClock",
    "KofPState",
    "LogNormal",
    "ModelHistory",
    "PerClientModels",
    "RoundClock",
    "RoundClockState",
    "Starts",
    "capacity_seconds",
    "from_fedscale_capacity",
    "make_clock",
    "model_store",
    "staleness_histogram",
]
