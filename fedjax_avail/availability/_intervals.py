"""Availability from per-client intervals in seconds (device traces), read on the one clock.

A client is available in slot s when it is active at the slot's start time ``t = s L`` (L the
slot length in seconds, ``seconds_per_slot``): when some interval ``[start_j, end_j]`` (closed,
FedScale's ``is_active`` rule) holds ``t``, or with a period P, ``t mod P``. The intervals are
kept on the device as padded ``[J, N]`` arrays (J the most intervals a client has) and each step
compares every client's phase with its intervals (a binary search beyond 64 of them), so memory
is ``2 N J`` floats whatever the length of the run: a week of one-minute slots for 10^5
clients would be a 1 GB ``[T, N]`` table (:class:`~fedjax_avail.availability.Trace`), the
intervals of a FedScale trace a few MB.

Times are float32 on the device: the rule is exact while the slot start times, the interval
bounds and the periods are whole seconds below 2^24 s (194 days); beyond that, or with fractions
of a second, a bound is resolved to float32's rounding (about 6e-8 of the time).

The plain-text format (:meth:`Intervals.from_file`) is one interval per line, ``client, start,
end`` in seconds: a CSV with that header, or JSON lines ``{"client": 0, "start": 0, "end": 60}``;
clients are numbered 0..N-1 and a client without a line is never available.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_avail._checks import Positive, check_fields

COMPARE_ALL_UP_TO = 64  # intervals a client: a search compares with all of them up to here


class IntervalsState(NamedTuple):
    # [J, N]: clients on the last axis (contiguous in a step's compares, and where the mesh
    # and the memory estimate look for an availability state's clients)
    starts: jax.Array  # [J, N] float32 seconds, ascending over J; +inf pads
    ends: jax.Array  # [J, N] float32 seconds; -inf pads
    # [N] float32 seconds, +inf where the intervals do not repeat; [] when every client's is
    # the same (one phase a step instead of N: an eighth of the step at N = 10^5 on a CPU)
    period: jax.Array


def check_intervals(starts: np.ndarray, ends: np.ndarray, where: str = "client") -> None:
    """Refuses padded ``[N, J]`` intervals (``start = +inf``, ``end = -inf`` after a row's
    last) that a sorted search cannot read, naming the row (``where`` i) and the interval: a
    bound that is not a number, padding in the middle of a row, ``start > end``, a start before
    the previous interval's end (unsorted or overlapping)."""
    starts, ends = np.asarray(starts, np.float64), np.asarray(ends, np.float64)
    used = starts < np.inf

    def first(bad: np.ndarray) -> tuple[int, int]:
        i, j = np.argwhere(bad)[0]
        return int(i), int(j)

    bad = np.isnan(starts) | np.isnan(ends) | (used & ~np.isfinite(ends)) | (
        ~used & (ends > -np.inf)) | (starts == -np.inf)
    if bad.any():
        i, j = first(bad)
        raise ValueError(f"{where} {i}: interval {j} has bounds ({starts[i, j]}, {ends[i, j]}); "
                         "bounds must be finite numbers (padding: start = +inf, end = -inf)")
    if (used[:, 1:] & ~used[:, :-1]).any():
        i, j = first(used[:, 1:] & ~used[:, :-1])
        raise ValueError(f"{where} {i}: interval {j + 1} follows padding; padding goes after a "
                         "client's intervals")
    bad = used & (starts > ends)
    if bad.any():
        i, j = first(bad)
        raise ValueError(f"{where} {i}: interval {j} starts at {starts[i, j]:g} after it ends at "
                         f"{ends[i, j]:g}")
    bad = used[:, 1:] & (starts[:, 1:] < ends[:, :-1])
    if bad.any():
        i, j = first(bad)
        raise ValueError(
            f"{where} {i}: interval {j + 1} starts at {starts[i, j + 1]:g}, before interval {j} "
            f"ends at {ends[i, j]:g}; intervals must be sorted and must not overlap (merge them)")


def _pad(rows: Sequence[np.ndarray], fill: float) -> np.ndarray:
    width = max(1, max((len(r) for r in rows), default=0))
    out = np.full((len(rows), width), fill, np.float64)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return out


@dataclasses.dataclass(frozen=True, eq=False)
class Intervals:
    """Per-client availability intervals in seconds, optionally repeating with a period.

    Args:
      starts, ends: ``[N, J]`` interval bounds in seconds; row i holds client i's intervals in
        ascending order, not overlapping, padded at the end with ``start = +inf``
        (``end = -inf``); :meth:`from_lists` pads for you.
      period: None (the intervals are played once: after the last one ends no client is
        available), a period P > 0 in seconds shared by every client, or ``[N]`` periods
        (FedScale's per-client ``finish_time``); the rule reads ``t mod P``.
      seconds_per_slot: L > 0, the seconds one slot of the clock stands for.

    Raises:
      ValueError: shapes that are not ``[N, J]`` alike, unsorted or overlapping intervals (the
        client and interval named), a period <= 0, an interval that ends after its client's
        period.

    Example:
      >>> Intervals.from_lists([[(0, 3600)], [(1800, 7200)]], period=86400, seconds_per_slot=60)
    """

    starts: np.ndarray
    ends: np.ndarray
    period: float | np.ndarray | None = None
    seconds_per_slot: Positive = 1.0

    def __post_init__(self):
        check_fields(self)
        starts = np.asarray(self.starts, np.float64)
        ends = np.asarray(self.ends, np.float64)
        if starts.ndim != 2 or starts.shape != ends.shape or starts.shape[0] == 0:
            raise ValueError(f"starts and ends must both be [N, J] with N >= 1, got shapes "
                             f"{starts.shape} and {ends.shape}")
        check_intervals(starts, ends)
        if self.period is not None:
            period = np.asarray(self.period, np.float64)
            if period.ndim > 1 or not (np.isfinite(period).all() and (period > 0).all()):
                raise ValueError(f"period must be None, a number > 0 or [N] of them (seconds), "
                                 f"got {np.ravel(period)[:5].tolist()}")
            if period.ndim == 1 and period.shape[0] != starts.shape[0]:
                raise ValueError(f"period has {period.shape[0]} entries for {starts.shape[0]} "
                                 "clients")
            # the rule reads t mod P in [0, P): an interval past its client's period would
            # never be read (a week of intervals with a daily period keeps the first day)
            periods = np.broadcast_to(period, starts.shape[:1])
            past = (starts < np.inf) & (ends > periods[:, None])
            if past.any():
                i, j = (int(v) for v in np.argwhere(past)[0])
                raise ValueError(
                    f"client {i}: interval {j} ({starts[i, j]:g}, {ends[i, j]:g}) ends after the "
                    f"period {periods[i]:g} s; with a period P every interval must end by P "
                    "(the rule reads t mod P): split one that runs over into (start, P) and "
                    "(0, end - P), pass the period the intervals span, or period=None to play "
                    "them once")

    @classmethod
    def from_lists(cls, intervals: Sequence[Sequence[tuple[float, float]]],
                   period: float | np.ndarray | None = None,
                   seconds_per_slot: float = 1.0) -> Intervals:
        """From one list of ``(start, end)`` pairs (seconds) per client; an empty list: never
        available."""
        if len(intervals) == 0:
            raise ValueError("intervals must hold one list of (start, end) pairs per client, "
                             "got none")
        starts, ends = [], []
        for i, client in enumerate(intervals):
            pairs = np.asarray(list(client), np.float64).reshape(-1, 2) if len(client) else \
                np.zeros((0, 2))
            if pairs.ndim != 2 or pairs.shape[1] != 2:
                raise ValueError(f"intervals[{i}] must be (start, end) pairs")
            starts.append(pairs[:, 0])
            ends.append(pairs[:, 1])
        return cls(_pad(starts, np.inf), _pad(ends, -np.inf), period, seconds_per_slot)

    @classmethod
    def from_file(cls, path: str | os.PathLike, num_clients: int,
                  period: float | np.ndarray | None = None,
                  seconds_per_slot: float = 1.0) -> Intervals:
        """Reads the plain-text format: ``.csv`` with the header ``client,start,end``, or
        ``.jsonl`` with one ``{"client", "start", "end"}`` object a line (module docstring).

        Raises:
          ValueError: another suffix, a missing column or key, a client outside
            ``0..num_clients-1``, a value that is not a number (the file and line named), or
            intervals :class:`Intervals` refuses.
        """
        path = os.fspath(path)
        suffix = os.path.splitext(path)[1].lower()
        records = []
        if suffix == ".csv":
            with open(path, newline="") as f:
                reader = csv.DictReader(f)
                missing = {"client", "start", "end"} - set(reader.fieldnames or ())
                if missing:
                    raise ValueError(f"{path}: the header must name client, start and end; "
                                     f"missing {sorted(missing)}")
                records = [(n + 2, r) for n, r in enumerate(reader)]
        elif suffix == ".jsonl":
            with open(path) as f:
                for n, line in enumerate(f, 1):
                    if line.strip():
                        try:
                            records.append((n, json.loads(line)))
                        except json.JSONDecodeError as error:
                            raise ValueError(f"{path} line {n}: not JSON: {error}") from None
        else:
            raise ValueError(f"path must end in .csv or .jsonl, got {path!r}")
        per_client: list[list[tuple[float, float]]] = [[] for _ in range(num_clients)]
        for n, record in records:
            try:
                raw = record["client"]
                if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
                    raise ValueError(f"client {raw!r} is not an integer")
                client = int(raw)
                start, end = float(record["start"]), float(record["end"])
            except (KeyError, TypeError, ValueError) as error:
                raise ValueError(f"{path} line {n}: needs client (an integer), start and end "
                                 f"(numbers): {error!r}") from None
            if not 0 <= client < num_clients:
                raise ValueError(f"{path} line {n}: client {client} is outside "
                                 f"0..{num_clients - 1}")
            per_client[client].append((start, end))
        for pairs in per_client:
            pairs.sort()
        return cls.from_lists(per_client, period, seconds_per_slot)

    def init(self, key: jax.Array, num_clients: int) -> IntervalsState:
        del key
        starts = np.asarray(self.starts)
        if starts.shape[0] != num_clients:
            raise ValueError(f"the intervals are for {starts.shape[0]} clients but there are "
                             f"{num_clients}")
        period = np.inf if self.period is None else np.asarray(self.period, np.float64)
        if np.unique(period).size == 1:
            period = np.ravel(period)[0]
        return IntervalsState(
            jnp.asarray(starts.T, jnp.float32), jnp.asarray(np.asarray(self.ends).T, jnp.float32),
            jnp.asarray(period, jnp.float32))

    def step(self, state: IntervalsState, t: jax.Array, key: jax.Array
             ) -> tuple[IntervalsState, jax.Array]:
        del key
        time = jnp.asarray(t, jnp.float32) * jnp.float32(self.seconds_per_slot)
        return state, active(state, time)

    def skip(self, state: IntervalsState, t: jax.Array, k: jax.Array,
             key: jax.Array) -> IntervalsState:
        del t, k, key  # a lookup by time
        return state

    def ended(self, state: IntervalsState, t: jax.Array) -> jax.Array:
        """Played once (no period): no client is available after the last interval ends."""
        if self.period is not None:
            return jnp.bool_(False)
        time = jnp.asarray(t, jnp.float32) * jnp.float32(self.seconds_per_slot)
        return time > jnp.max(state.ends)


def phase(time: jax.Array, period: jax.Array) -> jax.Array:
    """``time mod period`` (``[N]`` or ``[]``, like ``period``) in ``[0, period)``, exact for
    whole numbers below 2^24 (the float quotient's rounding corrected); ``time`` where the
    period is +inf."""
    cycles = jnp.floor(time / period)
    rest = time - cycles * period
    rest = jnp.where(rest < 0, rest + period, rest)
    rest = jnp.where(rest >= period, rest - period, rest)
    return jnp.where(jnp.isinf(period), time, rest)


def active(state: IntervalsState, time: jax.Array) -> jax.Array:
    """``[N]`` bool: client i has an interval ``[start, end]`` holding its phase of ``time``."""
    at = phase(time, state.period)
    if state.starts.shape[0] <= COMPARE_ALL_UP_TO:
        # up to a few dozen intervals a client, comparing with all of them, one [N] row at a
        # time, beats a sorted search's gathers (1.7x at J = 14, N = 10^5 on a CPU:
        # benchmarks/availability_overhead.py)
        on = jnp.zeros(state.starts.shape[1:], bool)
        for start, end in zip(state.starts, state.ends, strict=True):
            on = on | ((start <= at) & (at <= end))
        return on

    def one(starts, ends, t):  # the last interval starting at or before t, by binary search
        j = jnp.searchsorted(starts, t, side="right", method="scan_unrolled") - 1
        return (j >= 0) & (t <= ends[jnp.maximum(j, 0)])

    at = jnp.broadcast_to(at, state.starts.shape[1:])
    return jax.vmap(one, in_axes=(1, 1, 0))(state.starts, state.ends, at)
