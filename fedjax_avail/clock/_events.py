"""The event clock: jobs of random durations in up to M concurrency slots, completed in time order.

One call of :meth:`EventClock.step` is one server update (the scan step): it advances virtual
time through the next K job completions (the buffer of FedBuff, the K gradients of K-async
SGD), reading availability slot by slot on the run's timeline
(:class:`fedjax_avail.timeline.Timeline`). Within the current availability slot, in order:

1. **Offline clients.** A job whose client is unavailable in the slot is ``"lost"`` (cancelled,
   its slot freed; counted in ``jobs_lost``) or, with ``offline="late"``, it cannot complete
   until its client is available again (it then completes at once if its time has passed).
2. **Starting.** Free slots are filled by available idle clients drawn uniformly at random; a job
   starts from the current model (version t) and draws its duration then.
3. **Completing.** The eligible jobs that finish first complete, one event at a time, in order
   of (finish time, client index): the lower index first on equal times. A job finishing
   exactly at the slot's end completes in the slot (time is kept in slots, so a job of L, or
   four of L / 4, started at its start, is done, L = 0.1 too), and so do the others finishing
   at that instant when the update comes at it: the next update starts in the same slot, at its
   end (the clock keeps its cursor: ``step`` returns it). Each completion frees its slot, and
   at that instant a client drawn uniformly from the available idle clients (the
   one that just finished included) starts a new job in it. With concurrency N every other
   client is busy, so a client simply restarts: FedBuff's Algorithm 1 (download, Q steps,
   upload, repeat). A restarted job may complete again within the same update.
4. **The update.** The server model changes at the K-th completion (FedBuff Alg. 2 L8). If the
   slot ends first, virtual time moves to its end and the next slot is read (rules 1-3 again):
   an outage passes without an update, and staleness counts server updates only. Uploads at
   the instant of the update are received before it, and downloads at that instant see the new
   model: a job started at the instant of the update starts from version t + 1 (so K = M = N
   with constant, equal durations is synchronous FedAvg).
5. **Several updates at one instant.** When the completions at one instant fill several
   updates (K = 1 and two jobs finishing together), they are made one after the other, and a
   job that restarts while update t is gathered downloads version t + 1, the model of the
   update it uploaded to: it does not see the later updates made at the same instant (its
   client has downloaded already). Its next contribution is therefore one update staler than a
   job restarted during the last of them (``tests/test_seams.py``, and the event-driven
   reference ``tests/reference/events.py`` follows the same rule).

An update that cannot gather K results because the availability process will never bring a
client back (a trace played once that has ended), or none within ``MAX_SLOTS_PER_UPDATE``
slots, sets the sticky ``stalled`` flag: the engine then stops the run
(:class:`fedjax_avail.StalledError`). Clock time is kept in slots, as a compensated float32
sum (:mod:`fedjax_avail.timeline`); the durations are converted to slots when drawn.

Cost per update: O(N) per slot entered for the availability bookkeeping and the draws of
starting clients, O(M) to find the K earliest jobs in flight, O(K^2) for the events among those
and the restarted jobs; never O(N P).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp

from fedjax_avail._checks import Count, check_fields
from fedjax_avail.clock._durations import Durations
from fedjax_avail.clock._store import Starts
from fedjax_avail.timeline import Cursor, Timeline, add_time

OFFLINE = ("lost", "late")
_NEVER = jnp.inf
# Slots one update may wait through for its K results before the run is stopped as stalled
# (e.g. a Bernoulli process whose clients are almost never on).
MAX_SLOTS_PER_UPDATE = 100_000


class Completions(NamedTuple):
    """The jobs completed in a step (K slots, padded)."""

    clients: jax.Array  # [K] int32
    versions: jax.Array  # [K] int32, the model version each job started from
    valid: jax.Array  # [K] bool


class EventClockState(NamedTuple):
    slot_client: jax.Array  # [M] int32, the client running in slot m; -1: free
    slot_remaining: jax.Array  # [M] float32, slots until that job finishes
    slot_version: jax.Array  # [M] int32, the model version the job started from
    busy: jax.Array  # [N] bool, client has a job in flight
    speed: jax.Array  # [N] float32, duration divisors
    time: jax.Array  # [2] float32, clock time in slots as (sum, compensation)
    jobs_lost: jax.Array  # [] int32, jobs cancelled because their client went offline
    stalled: jax.Array  # [] bool: an update could not gather its K results (sticky)


def _earliest(remaining: jax.Array, client: jax.Array, k: int, num_clients: int) -> jax.Array:
    """``[k]`` slots of the k jobs first in rule 3's order, (finish time, client index):
    ``top_k`` of the times alone breaks ties by slot, and slots hold clients in random order.

    The k-th smallest time is found first; every job before it is taken (at most k - 1), and
    the jobs at it by client index. ``remaining [M]``: ``inf`` for jobs that cannot complete;
    ``client [M]``: indices below ``num_clients``, -1 for a free slot."""
    kth = -jax.lax.top_k(-remaining, k)[0][-1]
    order = jnp.where(remaining < kth, -1,
                      jnp.where(remaining == kth, jnp.maximum(client, 0), num_clients))
    return jax.lax.top_k(-order, k)[1]


def _left_in_slot(time: jax.Array, slot: jax.Array) -> jax.Array:
    """``[]`` float32: what is left of ``slot`` at clock time ``time`` (``[2]``, the Kahan pair,
    in slots): 1 less the time passed in it (exact: the slot starts at the integer ``slot``),
    0 once time stands at or past its end."""
    now, start = time[0], Timeline.start_of(jnp.maximum(slot, 0))
    return jnp.where(now >= Timeline.start_of(slot + 1), 0.0,
                     jnp.maximum(1.0 - (now - start), 0.0))


def _uniform_scores(key: jax.Array, mask: jax.Array) -> jax.Array:
    """float32 scores, uniform in [0, 1) where ``mask``, -1 elsewhere (for a random top_k)."""
    return jnp.where(mask, jax.random.uniform(key, mask.shape), -1.0)


@dataclasses.dataclass(frozen=True)
class EventClock:
    """Jobs with durations drawn from ``durations`` in ``concurrency`` slots (see module doc).

    Args:
      durations: a duration model (``fa.clock.Constant``, ``Exponential``, ``LogNormal``).
      concurrency: M, the most jobs in flight at once (None: one per client, M = N).
      events: K, completions per server step.
      offline: ``"lost"`` or ``"late"`` (rule 1).
    """

    durations: Durations
    concurrency: Count | None
    events: Count
    offline: str = "lost"

    def __post_init__(self):
        check_fields(self)

    def slots(self, num_clients: int) -> int:
        return num_clients if self.concurrency is None else self.concurrency

    def init(self, num_clients: int) -> EventClockState:
        m = self.slots(num_clients)
        return EventClockState(
            slot_client=jnp.full((m,), -1, jnp.int32),
            slot_remaining=jnp.zeros((m,), jnp.float32),
            slot_version=jnp.zeros((m,), jnp.int32),
            busy=jnp.zeros((num_clients,), bool),
            speed=jnp.asarray(self.durations.speeds(num_clients)),
            time=jnp.zeros((2,), jnp.float32),
            jobs_lost=jnp.int32(0),
            stalled=jnp.bool_(False),
        )

    def virtual_time(self, state: EventClockState) -> jax.Array:
        return state.time[0]

    def metrics(self, state: EventClockState) -> dict[str, jax.Array]:
        """Per-update metrics of the clock: ``jobs_lost`` (so far) and ``stalled``."""
        return {"jobs_lost": state.jobs_lost, "stalled": state.stalled}

    def step(self, state: EventClockState, timeline: Timeline, cursor: Cursor, key: jax.Array,
             t: jax.Array):
        """One server update: ``(state, Completions [K], (fills [M], restarts [K]), cursor)``.

        Runs segments until K jobs have completed: each segment is the rest of the current
        availability slot (rules 1-3 with that slot's mask); a segment that ends before the
        K-th completion moves virtual time to the slot's end and the cursor to the next slot.
        The cursor returned is the slot of the K-th completion, where the next update starts
        (at the slot's end, it completes the other jobs finishing then in that slot first).
        """
        k, m = self.events, state.slot_client.shape[0]
        acc = dict(client=jnp.full((k,), -1, jnp.int32), version=jnp.zeros((k,), jnp.int32),
                   valid=jnp.zeros((k,), bool), restart_slot=jnp.full((k,), m, jnp.int32))
        # filled, restarted this update; started at the instant the last segment ended
        flags = (jnp.zeros((m,), bool), jnp.zeros((m,), bool), jnp.zeros((m,), bool))
        loop = (state, cursor, acc, jnp.int32(0), flags, jnp.int32(0))

        def going(carry):
            state, _, _, n_done, _, segment = carry
            return (n_done < k) & ~state.stalled & (segment < MAX_SLOTS_PER_UPDATE)

        def segment_of(carry):
            state, cursor, acc, n_done, flags, segment = carry
            state, cursor, acc, n_done, flags = self._segment(
                state, timeline, cursor, jax.random.fold_in(key, segment), t, acc, n_done, flags)
            return state, cursor, acc, n_done, flags, segment + 1

        state, cursor, acc, n_done, (filled, restarted, _), _ = jax.lax.while_loop(
            going, segment_of, loop)
        state = state._replace(stalled=n_done < k)
        occupied = state.slot_client >= 0
        fills = Starts(state.slot_client, state.slot_version, filled & occupied)
        rs = acc["restart_slot"]
        rs_ok = rs < m
        rs_c = jnp.minimum(rs, m - 1)
        restarts = Starts(jnp.where(rs_ok, state.slot_client[rs_c], -1),
                          state.slot_version[rs_c], rs_ok & restarted[rs_c] & occupied[rs_c])
        done = Completions(acc["client"], acc["version"], acc["valid"])
        return state, done, (fills, restarts), cursor

    def _segment(self, state, timeline, cursor, key, t, acc, n_done, flags):
        """Rules 1-3 within the rest of the cursor's slot; at most ``K - n_done`` completions."""
        k_start, k_durations, k_queue, k_events = jax.random.split(key, 4)
        durations = self.durations.in_slots(timeline.slot_length)  # time is kept in slots
        available = cursor.mask
        filled, restarted, fresh = flags
        num_clients = available.shape[0]
        occupied = state.slot_client >= 0
        client = jnp.where(occupied, state.slot_client, 0)
        online = available[client]

        # 1. Offline clients.
        if self.offline == "lost":
            lost = occupied & ~online
            busy = state.busy.at[jnp.where(lost, client, num_clients)].set(False, mode="drop")
            state = state._replace(slot_client=jnp.where(lost, -1, state.slot_client), busy=busy,
                                   jobs_lost=state.jobs_lost + jnp.sum(lost))
            filled, restarted, fresh = filled & ~lost, restarted & ~lost, fresh & ~lost

        # 2. Free slots filled by available idle clients, uniformly.
        state, take = jax.lax.cond(
            jnp.any(state.slot_client < 0) & jnp.any(available & ~state.busy),
            lambda s: self._fill(s, available, k_start, durations, k_durations, t),
            lambda s: (s, jnp.zeros(s.slot_client.shape, bool)),
            state)
        filled, fresh = filled | take, fresh | take  # fresh: started at the segment's start

        # 3. Completions in time order until the slot ends, each slot refilled at once. Only
        # the K earliest jobs in flight and the (at most K) jobs restarted in the segment can
        # complete in it, so the events run over those 2K candidates: O(M + K^2), not O(K M).
        k = self.events
        horizon = _left_in_slot(state.time, cursor.slot)
        budget = k - n_done
        idle = available & ~state.busy
        _, queue = jax.lax.top_k(_uniform_scores(k_queue, idle), min(k, num_clients))
        queue = jnp.pad(queue, (0, k - queue.shape[0]))
        eligible = state.slot_client >= 0
        if self.offline == "late":
            eligible &= available[jnp.maximum(state.slot_client, 0)]
        first = _earliest(jnp.where(eligible, state.slot_remaining, _NEVER), state.slot_client,
                          min(k, eligible.shape[0]), num_clients)
        first = jnp.pad(first, (0, k - first.shape[0]))
        empty_i = jnp.full((k,), -1, jnp.int32)
        carry = dict(
            slot=jnp.concatenate([first, jnp.zeros((k,), jnp.int32)]),
            client=jnp.concatenate([state.slot_client[first], empty_i]),
            remaining=jnp.concatenate([state.slot_remaining[first],
                                       jnp.zeros((k,), jnp.float32)]),
            duration=jnp.zeros((2 * k,), jnp.float32),
            version=jnp.concatenate([state.slot_version[first], jnp.zeros((k,), jnp.int32)]),
            active=jnp.concatenate([eligible[first] & (jnp.arange(k) < eligible.shape[0]),
                                    jnp.zeros((k,), bool)]),
            busy=state.busy, elapsed=jnp.float32(0), idle_left=jnp.sum(idle),
            queue_used=jnp.int32(0), finished=empty_i, finished_free=jnp.zeros((k,), bool),
            count=jnp.int32(0), acc=acc,
        )
        big = jnp.int32(num_clients)

        def event(i, c):
            remaining = jnp.where(c["active"], c["remaining"], _NEVER)
            soonest = jnp.min(remaining)
            tied = c["active"] & (remaining == soonest)
            j = jnp.argmin(jnp.where(tied, c["client"], big))  # lower client index first
            dt = jnp.maximum(soonest, 0.0)
            ok = jnp.any(c["active"]) & (i < budget) & (c["elapsed"] + dt <= horizon)
            dt = jnp.where(ok, dt, 0.0)
            who = c["client"][j]
            at = jnp.where(ok, n_done + i, k)  # this completion's place in the update
            c = {**c, "remaining": c["remaining"] - dt, "elapsed": c["elapsed"] + dt,
                 "count": c["count"] + ok}
            c["active"] = c["active"].at[j].set(c["active"][j] & ~ok)
            c["acc"] = {**c["acc"],
                        "client": c["acc"]["client"].at[at].set(who, mode="drop"),
                        "version": c["acc"]["version"].at[at].set(c["version"][j], mode="drop"),
                        "valid": c["acc"]["valid"].at[at].set(True, mode="drop"),
                        "restart_slot": c["acc"]["restart_slot"].at[at].set(c["slot"][j],
                                                                            mode="drop")}
            c["busy"] = c["busy"].at[jnp.where(ok, who, big)].set(False, mode="drop")
            c["finished"] = c["finished"].at[i].set(jnp.where(ok, who, -1))
            c["finished_free"] = c["finished_free"].at[i].set(ok)
            # The slot restarts with a client drawn uniformly from the idle available ones:
            # the queue (idle at the segment's start, in random order) or the finished ones.
            u_pick, u_member, k_dur = jax.random.split(jax.random.fold_in(k_events, i), 3)
            n_free = jnp.sum(c["finished_free"])
            from_queue = jax.random.uniform(u_pick) * (c["idle_left"] + n_free) < c["idle_left"]
            nth = jnp.floor(jax.random.uniform(u_member) * n_free).astype(jnp.int32)
            member = jnp.argmax(jnp.cumsum(c["finished_free"]) > nth)
            new = jnp.where(from_queue, queue[jnp.minimum(c["queue_used"], k - 1)],
                            c["finished"][member])
            c["queue_used"] = c["queue_used"] + (ok & from_queue)
            c["idle_left"] = c["idle_left"] - (ok & from_queue)
            c["finished_free"] = jnp.where(ok & ~from_queue & (jnp.arange(k) == member),
                                           False, c["finished_free"])
            duration = durations.sample(k_dur, state.speed[new][None])[0]
            r = k + i  # the restarted job's candidate entry
            c["slot"] = c["slot"].at[r].set(c["slot"][j])
            c["client"] = c["client"].at[r].set(jnp.where(ok, new, -1))
            c["remaining"] = c["remaining"].at[r].set(duration)
            c["duration"] = c["duration"].at[r].set(duration)
            c["version"] = c["version"].at[r].set(t)
            c["active"] = c["active"].at[r].set(ok)
            c["busy"] = c["busy"].at[jnp.where(ok, new, big)].set(True, mode="drop")
            return c

        c = jax.lax.fori_loop(0, k, event, carry)
        n_done = n_done + c["count"]
        complete = n_done == k
        # The update happens at the K-th completion; short of it, time moves to the slot's end.
        rest = jnp.where(complete, 0.0, horizon - c["elapsed"])
        remaining = c["remaining"][k:] - rest
        # 4. Jobs started at the instant of this update download its result: version t + 1
        # (no time has passed since they started: their remaining time is their whole
        # duration). Those are the restarts of this step's completions, and, when the update
        # comes at the segment's start, the jobs started at that instant (filled at the
        # segment's start, or started in this update's earlier segments at the same instant:
        # a slot's end, where the next slot is entered without time passing).
        restarting = c["client"][k:] >= 0
        at_start = restarting & (c["remaining"][k:] == c["duration"][k:])
        at_update = complete & at_start
        versions = jnp.where(at_update, t + 1, t)
        # Each slot holds the job of its last restart; the other slots only lost time.
        slots = c["slot"][k:]
        later = jnp.triu(jnp.ones((k, k), bool), 1) & restarting[None, :] & (
            slots[:, None] == slots[None, :])
        current = restarting & ~jnp.any(later, axis=1)
        target = jnp.where(current, slots, state.slot_client.shape[0])
        # At the slot's end (short of K, or the K-th completion there) time is that end
        # exactly: the float32 sum of the steps may miss it, and the next update starts there.
        at_end = ~complete | (c["elapsed"] >= horizon)
        time = jnp.where(at_end, jnp.stack([timeline.start_of(cursor.slot + 1), jnp.float32(0)]),
                         add_time(state.time, c["elapsed"]))
        time = jnp.where(time[0] < state.time[0], state.time, time)  # never backwards
        state = state._replace(
            slot_client=state.slot_client.at[target].set(c["client"][k:], mode="drop"),
            slot_remaining=(state.slot_remaining - c["elapsed"] - rest).at[target].set(
                remaining, mode="drop"),
            slot_version=jnp.where(fresh & complete & (c["elapsed"] == 0), t + 1,
                                   state.slot_version).at[target].set(versions, mode="drop"),
            busy=c["busy"], time=time)
        filled = filled.at[target].set(False, mode="drop")
        restarted = restarted.at[target].set(True, mode="drop")
        # Started at the instant the segment ends: before it, if no time passed in it.
        fresh = (fresh & (horizon == 0)).at[target].set(at_start & (rest == 0), mode="drop")
        # Short of K: the next slot, unless no client will ever be available again.
        state = state._replace(stalled=~complete & timeline.ended(cursor))
        cursor = jax.lax.cond(complete, lambda c: c, lambda c: timeline.at(c, c.slot + 1),
                              cursor)
        return state, cursor, c["acc"], n_done, (filled, restarted, fresh)

    def _fill(self, state, available, key, durations, key_durations, t):
        """Rule 2: free slots get available idle clients in uniformly random order, their jobs
        drawn from ``durations`` (in slots)."""
        m = state.slot_client.shape[0]
        idle = available & ~state.busy
        _, candidates = jax.lax.top_k(_uniform_scores(key, idle), m)
        free = state.slot_client < 0
        rank = jnp.cumsum(free) - 1
        take = free & (rank < jnp.sum(idle))
        new = candidates[jnp.clip(rank, 0, m - 1)]
        durations = durations.sample(key_durations, state.speed[new])
        busy = state.busy.at[jnp.where(take, new, state.busy.shape[0])].set(True, mode="drop")
        state = state._replace(
            slot_client=jnp.where(take, new, state.slot_client),
            slot_remaining=jnp.where(take, durations, state.slot_remaining),

            slot_version=jnp.where(take, t, state.slot_version), busy=busy)
        return state, take


def check_offline(offline: str) -> None:
    if offline not in OFFLINE:
        raise ValueError(f"offline must be one of {OFFLINE}, got {offline!r}")
