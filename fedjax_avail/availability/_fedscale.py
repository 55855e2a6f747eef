"""FedScale's device-availability traces (``client_behave_trace``) as :class:`Intervals`.

FedScale (Lai et al., ICML 2022) ships the availability of about 136k phones from the FLASH
study as a pickled dict, one entry per device::

    {key: {"active": [a_0, a_1, ...], "inactive": [b_0, b_1, ...], "finish_time": P,
           "duration": ..., "model": ...}, ...}

A device is active at time t (seconds) when some ``a_j <= t mod P <= b_j``
(``fedscale/cloud/internal/client_metadata.py``, ``ClientMetadata.is_active``; that method
walks the intervals with a stored index that moves one interval per call, which equals this
rule when it is called at least once an interval, as FedScale's rounds do, and the entry's
sessions end by ``P``; the part of a session after ``P``, which this rule never reads, is cut
off here, and FedScale's stored index may stop on such a session instead). Simulated client
i replays the entry ``keys[i % len(keys)]``, the keys in the file's order, as FedScale's
client manager assigns them (``fedscale/cloud/client_manager.py``, ``register_client``:
``self.user_trace_keys[int(clientId) % len(self.user_trace)]``); ``assignment`` picks other
entries.

Unpickling runs whatever code a file holds, so :func:`load_fedscale_pickle` reads a path with
an unpickler that admits only dicts, lists, tuples, numbers and strings: a file naming any
class or function is refused before anything in it runs. A dict the user unpickled from a
file they trust is accepted as is.
"""

from __future__ import annotations

import io
import os
import pickle
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fedjax_avail._checks import Count, Positive, checked
from fedjax_avail.availability._intervals import Intervals, check_intervals


class _PlainUnpickler(pickle.Unpickler):
    """Builds only what pickle's own opcodes make (dicts, lists, tuples, sets, numbers,
    strings, bytes, None, booleans): every class or function a file names is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(
            f"{self.path}: refused: the pickle names {module}.{name}; a FedScale trace holds "
            "only dicts, lists, numbers and strings, and loading any other object would run "
            "code from the file (unpickle it yourself if you trust it and pass the dict)")


def load_fedscale_pickle(path: str | os.PathLike) -> dict:
    """FedScale's ``client_behave_trace`` (or ``client_device_capacity``) pickle, read without
    running code from it (module docstring).

    Raises:
      pickle.UnpicklingError: the file names a class or a function (nothing from it has run).
      ValueError: the file is not a pickle of a dict.
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        unpickler = _PlainUnpickler(io.BufferedReader(f))
        unpickler.path = path
        try:
            trace = unpickler.load()
        except pickle.UnpicklingError:
            raise
        except Exception as error:  # a truncated or foreign file
            raise ValueError(f"{path}: not a readable pickle: {error!r}") from None
    if not isinstance(trace, dict):
        raise ValueError(f"{path}: expected a pickled dict (device key -> entry), got "
                         f"{type(trace).__name__}")
    return trace


def _entry(trace: Mapping, key: Any) -> tuple[np.ndarray, np.ndarray, float]:
    """One device's intervals and period, checked (the key and the field named)."""
    entry = trace[key]
    if not isinstance(entry, Mapping):
        raise ValueError(f"trace[{key!r}] must be a dict with active, inactive and finish_time, "
                         f"got {type(entry).__name__}")
    for field in ("active", "inactive", "finish_time"):
        if field not in entry:
            raise ValueError(f"trace[{key!r}] has no {field!r}")
    try:
        starts = np.asarray(entry["active"], np.float64).reshape(-1)
        ends = np.asarray(entry["inactive"], np.float64).reshape(-1)
        period = float(entry["finish_time"])
    except (TypeError, ValueError) as error:
        raise ValueError(f"trace[{key!r}]: active and inactive must be lists of numbers and "
                         f"finish_time a number: {error}") from None
    if starts.shape != ends.shape:
        raise ValueError(f"trace[{key!r}]: active has {starts.size} entries but inactive has "
                         f"{ends.size}; they must pair up")
    if not np.isfinite(period) or period <= 0:
        raise ValueError(f"trace[{key!r}]['finish_time'] must be a number > 0, got "
                         f"{entry['finish_time']!r}")
    try:
        check_intervals(starts[None], ends[None])
    except ValueError as error:
        raise ValueError(f"trace[{key!r}]: {str(error).removeprefix('client 0: ')}") from None
    # the rule reads t mod finish_time: a session's part after finish_time is never read, so
    # it is cut off here (Intervals refuses intervals past their period; module docstring)
    kept = starts < period
    return starts[kept], np.minimum(ends[kept], period), period


def assigned_keys(devices: Mapping, num_clients: int, assignment: Sequence[Any] | None,
                  what: str) -> list:
    """Each client's device key: ``keys[i % len(keys)]`` in the file's order, as FedScale's
    client manager assigns them, or the ``assignment`` given (``what`` names the dict in
    errors: a trace or a capacity file)."""
    keys = list(devices)
    if not keys:
        raise ValueError(f"{what} holds no devices")
    if assignment is None:
        return [keys[i % len(keys)] for i in range(num_clients)]
    chosen = list(assignment)
    if len(chosen) != num_clients:
        raise ValueError(f"assignment has {len(chosen)} keys for {num_clients} clients")
    missing = [k for k in chosen if k not in devices]
    if missing:
        raise ValueError(f"assignment names keys the {what} lacks: {missing[:5]}")
    return chosen


@checked
def from_fedscale(
    trace: Mapping | str | os.PathLike,
    num_clients: Count,
    seconds_per_slot: Positive = 60.0,
    assignment: Sequence[Any] | None = None,
) -> Intervals:
    """FedScale's ``client_behave_trace`` as an :class:`Intervals` process.

    Args:
      trace: the dict (device key -> ``{"active", "inactive", "finish_time", ...}``) or the
        path of FedScale's pickle (read by :func:`load_fedscale_pickle`).
      num_clients: N, the simulated clients.
      seconds_per_slot: L, the seconds one slot of the clock stands for (default one minute).
      assignment: None (client i replays ``keys[i % len(keys)]``, FedScale's client manager),
        or N device keys, one per client.

    Raises:
      ValueError: an empty trace, a malformed entry (unpaired or unsorted intervals,
        finish_time <= 0; the key and the field named), an assignment of the wrong length or
        naming a key the trace lacks.
    """
    if not isinstance(trace, Mapping):
        trace = load_fedscale_pickle(trace)
    chosen = assigned_keys(trace, num_clients, assignment, "trace")
    used = list(dict.fromkeys(chosen))
    entries = [_entry(trace, key) for key in used]
    width = max(1, max(len(s) for s, _, _ in entries))
    key_starts = np.full((len(used), width), np.inf)
    key_ends = np.full((len(used), width), -np.inf)
    for k, (s, e, _) in enumerate(entries):
        key_starts[k, :len(s)], key_ends[k, :len(e)] = s, e
    row = {key: k for k, key in enumerate(used)}
    index = np.array([row[key] for key in chosen])
    period = np.array([p for _, _, p in entries])[index]
    starts, ends = key_starts[index], key_ends[index]
    return Intervals(starts, ends, period, seconds_per_slot)


def example_fedscale_trace(num_devices: int = 200, days: int = 7, seed: int = 0) -> dict:
    """A trace in FedScale's format with daily on/off cycles, for tests, docs and notebooks
    (the real file is not on the package index; ``docs/guide/availability.md`` says where it
    is and how to load it).

    Each device is on in one or two sessions a day: a main session starting around its own
    preferred hour (charging overnight, spread over the day by device) lasting 1-8 hours, and
    with probability 0.5 a shorter one (20 min - 2 h); start times jitter by about 30 minutes
    from day to day, days are skipped with probability 0.1, and the trace repeats after
    ``days`` days (``finish_time``; a session running past the end goes on at the start).

    Returns:
      ``{str(device): {"active", "inactive", "finish_time", "duration", "model"}}``, integer
      seconds.
    """
    rng = np.random.default_rng(seed)
    day = 86_400
    trace = {}
    for device in range(num_devices):
        hour = rng.normal(23.0, 4.0) % 24  # preferred start: late evening, spread out
        length = rng.uniform(1, 8) * 3600
        intervals = []
        for d in range(days):
            if rng.random() < 0.1:
                continue
            start = d * day + (hour * 3600 + rng.normal(0, 1800)) % day
            intervals.append((start, start + length * rng.uniform(0.7, 1.3)))
            if rng.random() < 0.5:
                extra = d * day + rng.uniform(0, day)
                intervals.append((extra, extra + rng.uniform(1200, 7200)))
        finish = days * day
        # a session running past the end of the trace goes on at its start (it repeats)
        intervals += [(0.0, end - finish) for _, end in intervals if end >= finish]
        intervals = sorted((start, min(end, finish - 1)) for start, end in intervals)
        merged: list[list[float]] = []
        for start, end in intervals:  # overlapping sessions are one
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        merged = [[int(s), int(e)] for s, e in merged]
        trace[str(device)] = {
            "active": [s for s, _ in merged], "inactive": [e for _, e in merged],
            "finish_time": finish, "duration": finish, "model": "synthetic",
        }
    return trace
