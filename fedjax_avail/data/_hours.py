"""Time of day in tweet data: FedLaAvg's hour-of-day label skew and sleep-hour availability.

Sentiment140 (P:L399): tweets are dropped so the positive share follows the hour of day, and each
client is available during the 8 hours in which it tweets least.
"""

from __future__ import annotations

import numpy as np

from fedjax_avail.availability import HourOfDay
from fedjax_avail.data._federated import FederatedData


def positive_share(hour: np.ndarray, alpha: float) -> np.ndarray:
    """FedLaAvg's target share of positive tweets at hour of day h (P:L399, spec sec. 4.1).

    ``p(h) = alpha + (1 - 2 alpha) h / 12`` for h <= 12 and
    ``p(h) = (1 - alpha) - (1 - 2 alpha)(h - 12) / 12`` for h > 12: alpha at 0:00-1:00,
    1 - alpha at 12:00-13:00, linear in between [DERIVED from the paper's words].
    """
    h = np.asarray(hour, np.float64)
    rise = alpha + (1 - 2 * alpha) * h / 12
    fall = (1 - alpha) - (1 - 2 * alpha) * (h - 12) / 12
    return np.where(h <= 12, rise, fall)


def skew_by_hour(hours: np.ndarray, labels: np.ndarray, alpha: float, seed: int = 0) -> np.ndarray:
    """Which tweets to keep so the positive share at each hour h is :func:`positive_share` (h).

    FedLaAvg P:L399: "we randomly drop tweets" so that positives are a fraction alpha at
    0:00-1:00 and 1 - alpha at 12:00-13:00, interpolated linearly between. At each hour, only the
    over-represented class loses tweets, as few as reach the target: with ``n+`` positives and
    ``n-`` negatives and target p, either all ``n-`` stay and ``round(p n- / (1 - p))`` positives
    do, or all ``n+`` stay and ``round((1 - p) n+ / p)`` negatives do (nearest integer, so the
    kept share is p up to one tweet). Which tweets of a class go is uniformly random.

    alpha = 0.5 makes every hour exactly half positive (spec sec. 7, fact 12), which drops only
    an hour's surplus of its majority class, and nothing where hours are already balanced.
    alpha = 0 leaves only negatives at 0:00-1:00 and only positives at 12:00-13:00.

    Args:
      hours: ``[M]`` ints in 0..23.
      labels: ``[M]`` 0 (negative) or 1 (positive).
      alpha: in [0, 0.5].
      seed: seed of the random choice of dropped tweets.

    Returns:
      ``[M]`` bool, True for kept tweets.

    Raises:
      ValueError: alpha outside [0, 0.5], lengths differ, hours outside 0..23, labels not 0/1.

    Example:
      >>> keep = skew_by_hour(np.array([0, 0, 12, 12]), np.array([0, 1, 0, 1]), alpha=0.0)
      >>> keep.tolist()
      [True, False, False, True]
    """
    hours, labels = np.asarray(hours), np.asarray(labels)
    if not 0 <= alpha <= 0.5:
        raise ValueError(f"alpha must be in [0, 0.5], got {alpha}")
    if hours.shape != labels.shape or hours.ndim != 1:
        raise ValueError(f"hours and labels must be [M] vectors of one length, got {hours.shape} "
                         f"and {labels.shape}")
    if hours.size and (hours.min() < 0 or hours.max() > 23):
        raise ValueError(f"hours must be in 0..23, got range {hours.min()}..{hours.max()}")
    if not np.isin(labels, (0, 1)).all():
        raise ValueError(f"labels must be 0 or 1, got values {np.unique(labels).tolist()}")
    rng = np.random.default_rng(seed)
    keep = np.ones(hours.shape, bool)
    for h in range(24):
        pos = np.flatnonzero((hours == h) & (labels == 1))
        neg = np.flatnonzero((hours == h) & (labels == 0))
        p = float(positive_share(h, alpha))
        if len(pos) >= p * (len(pos) + len(neg)):  # positives over-represented (or exact)
            surplus, target = pos, len(pos) if p == 1 else np.rint(p * len(neg) / (1 - p))
        else:  # p > 0 here
            surplus, target = neg, np.rint((1 - p) * len(pos) / p)
        drop = len(surplus) - min(int(target), len(surplus))
        keep[rng.choice(surplus, drop, replace=False)] = False
    return keep


def hourly_counts(fd: FederatedData, key: str = "hour") -> np.ndarray:
    """``[N, 24]`` int64: how many of client i's examples have hour h (``fd.arrays[key]``)."""
    client = np.repeat(np.arange(fd.num_clients), np.asarray(fd.counts))
    counts = np.zeros((fd.num_clients, 24), np.int64)
    np.add.at(counts, (client, np.asarray(fd.arrays[key], np.int64)), 1)
    return counts


def sleep_start_hours(fd: FederatedData, window: int = 8, key: str = "hour") -> np.ndarray:
    """Per client, the first hour of the ``window`` consecutive hours it tweets least in.

    FedLaAvg P:L399: a client is available 8 hours a day, "the hours in which the client sends
    the fewest tweets", modelling sleep. The paper does not say the hours are consecutive; here
    they are (one sleep period), counted cyclically over 24 hours (a window may start at 22 and
    end at 5). Ties go to the earliest start hour. Feeds
    ``fa.availability.HourOfDay(start_hour, hours=window, rounds_per_hour=...)``.

    Args:
      fd: clients whose ``fd.arrays[key]`` holds each tweet's hour (0..23), e.g. the ``train``
        of :func:`load_sentiment140` (the hours left after any label skew).
      window: hours per day a client is available, in [1, 24].
      key: the array of hours.

    Returns:
      ``[N]`` int32 start hours in 0..23; client i is available at hours
      ``(start[i] + j) % 24`` for j < window.

    Raises:
      ValueError: ``window`` outside [1, 24].
    """
    if not 1 <= int(window) <= 24:
        raise ValueError(f"window must be in [1, 24], got {window}")
    quiet = HourOfDay.quietest_window(hourly_counts(fd, key), hours=int(window))
    return np.asarray(quiet.start_hour, np.int32)
