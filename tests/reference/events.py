"""An event-driven reference of the asynchronous clock on slotted availability (plain Python).

Written from the rules in ``fedjax_avail.clock._events`` and issue 16, not from its code: every
available client works continuously (concurrency N), job durations are constant per client
(``duration[i]``), availability is a ``[T, N]`` table indexed by slot ``floor(time / L)``. Events
are processed in order of (finish time, client); an update happens at the K-th completion;
jobs that start at the instant of an update, while it is being gathered, start from the new
model.
"""

from __future__ import annotations

import math


def simulate_events(table, duration, k, updates, offline="lost", slot_length=1.0):
    """Returns ``[(time, [clients], [staleness])]`` for each of ``updates`` server updates."""
    n = len(duration)
    jobs = {}  # client -> [start time, finish time, version, updates made when it started]
    version, now, out, buffer = 0, 0.0, [], []
    slot = 0
    while len(out) < updates:
        row = table[slot]
        if offline == "lost":
            for c in [c for c in jobs if not row[c]]:
                del jobs[c]
        for c in range(n):  # every available idle client starts a job
            if row[c] and c not in jobs:
                jobs[c] = [now, now + duration[c], version, version]
        end = (slot + 1) * slot_length
        while len(out) < updates:
            ready = [(max(job[1], now), c) for c, job in jobs.items()
                     if offline == "lost" or row[c]]
            ready = [(f, c) for f, c in ready if f <= end]
            if not ready:
                break
            # order: the original finish time, then the client index
            when, c = min(ready, key=lambda fc: (jobs[fc[1]][1], fc[1]))
            now = when
            buffer.append((c, jobs[c][2]))  # the version the job started from
            jobs[c] = [now, now + duration[c], version, version]  # restarts at once
            if len(buffer) == k:
                version += 1
                out.append((now, [b[0] for b in buffer], [version - 1 - b[1] for b in buffer]))
                buffer = []
                for job in jobs.values():
                    # started at the instant of the update, while it was being gathered (not
                    # before an earlier update at the same instant)
                    if job[0] == now and job[3] == version - 1:
                        job[2] = version
        if len(out) < updates:
            slot += 1
            now = slot * slot_length
            if slot >= len(table):
                raise RuntimeError("the table ended")
    return out


def first_slot(time, slot_length=1.0):
    return math.floor(time / slot_length)
