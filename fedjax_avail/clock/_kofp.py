"""WKAFL's K-of-P clock: K clients, uniform among the available, report at every iteration.

Every client always holds the model it last received (version ``held[i]``, 0 at the start) and
computes on it; the K that report receive the model of the update their reports go into. This
is the authors' code's protocol (``wkafl.md`` 7.2): an iteration draws K distinct clients
uniformly (``random.sample(workers, K)``).

On the run's timeline an iteration lasts one availability slot, and it follows the event
clock's rules (:mod:`fedjax_avail.clock._events`):

1. In its slot, the available clients that have not reported in this update (with
   ``one_per_round``, nor in the current round of GSGM's scheduling) are eligible; up to the
   missing ones are drawn among them uniformly at random.
2. The update happens when K have reported, at the end of that slot: its virtual time is the
   slot's end. Short of K (fewer eligible clients in the slot than missing reports), the
   reports drawn so far wait and the next slot supplies the rest: an outage passes without an
   update, and staleness counts server updates only.
3. If no client will ever be available again (a trace played once that has ended), or the
   update spent ``MAX_SLOTS_PER_UPDATE`` slots without gathering its K reports, the sticky
   ``stalled`` flag is set and the engine ends the run (:class:`fedjax_avail.StalledError`).

With ``one_per_round`` (GSGM, P:L425: each client reports once per round of P/K iterations; the
code's ``worker_one_round``), a new round begins as soon as no available client is left
unreported, also within an update, so an update still gathers K distinct clients in one slot
when that many are available; the clients drawn after the new round began count in it. (The
authors' code requires P to be a multiple of K; where it is not, the last update of a round
was a partial one here before the one clock, with fewer than K reports.)

Whenever at least K clients are available in every slot this is exactly the authors'
iteration: one update a slot, K uniform reporters, virtual time counting iterations.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp

from fedjax_avail._checks import Count, check_fields
from fedjax_avail.clock._events import MAX_SLOTS_PER_UPDATE, Completions, _uniform_scores
from fedjax_avail.clock._store import Starts
from fedjax_avail.timeline import Cursor, Timeline


class KofPState(NamedTuple):
    held: jax.Array  # [N] int32, the model version each client holds and computes on
    reported: jax.Array  # [N] bool, reported in the current round (one_per_round only)
    time: jax.Array  # [2] float32, clock time in slots (sum, compensation): the last update's
    # slot end
    stalled: jax.Array  # [] bool: an update could not gather its K results (sticky)


@dataclasses.dataclass(frozen=True)
class KofPClock:
    """K uniform reports per update on the run's timeline (``fa.clock.KofP``; module docstring).

    Args:
      events: K, the reports an update gathers.
      one_per_round: GSGM's scheduling: each client reports once per round.
    """

    events: Count
    one_per_round: bool = False

    def __post_init__(self):
        check_fields(self)

    def init(self, num_clients: int) -> KofPState:
        n = num_clients
        return KofPState(jnp.zeros((n,), jnp.int32), jnp.zeros((n,), bool),
                         jnp.zeros((2,), jnp.float32), jnp.bool_(False))

    def virtual_time(self, state: KofPState) -> jax.Array:
        return state.time[0]

    def metrics(self, state: KofPState) -> dict[str, jax.Array]:
        """Per-update metrics of the clock: ``stalled``."""
        return {"stalled": state.stalled}

    def step(self, state: KofPState, timeline: Timeline, cursor: Cursor, key: jax.Array,
             t: jax.Array) -> tuple[KofPState, Completions, tuple[Starts], Cursor]:
        """One server update t: ``(state, Completions [K], (reporters,), cursor)``; the
        reporters receive version t + 1; the cursor returned is the next update's: the slot
        after the update's (the update's own when it stalled)."""
        k, n = self.events, state.held.shape[0]
        clients, valid = jnp.zeros((k,), jnp.int32), jnp.zeros((k,), bool)
        loop = (state.reported, cursor, clients, valid, jnp.zeros((n,), bool), jnp.int32(0),
                jnp.int32(0), jnp.int32(0), state.stalled)

        def going(carry):
            *_, n_done, segment, slots, stalled = carry
            return (n_done < k) & ~stalled

        def draw(carry):
            reported, cursor, clients, valid, in_update, n_done, segment, slots, _ = carry
            available = cursor.mask & ~in_update
            if self.one_per_round:  # a new round once nobody available is left unreported
                reported = jnp.where(jnp.any(available & ~reported), reported, False)
                eligible = available & ~reported
            else:
                eligible = available
            seg_key = jax.lax.cond(segment == 0, lambda: key,
                                   lambda: jax.random.fold_in(key, segment))
            _, picks = jax.lax.top_k(_uniform_scores(seg_key, eligible), k)
            take = eligible[picks] & (jnp.arange(k) < k - n_done)  # a prefix: eligible first
            at = jnp.where(take, n_done + jnp.arange(k), k)
            clients = clients.at[at].set(picks, mode="drop")
            valid = valid.at[at].set(True, mode="drop")
            drawn = jnp.where(take, picks, n)
            in_update = in_update.at[drawn].set(True, mode="drop")
            if self.one_per_round:  # reported in the round they are drawn in
                reported = reported.at[drawn].set(True, mode="drop")
            n_done = n_done + jnp.sum(take).astype(jnp.int32)
            # the next slot when this one has no available client left outside the update
            exhausted = (n_done < k) & ~jnp.any(cursor.mask & ~in_update)
            stalled = exhausted & (timeline.ended(cursor) | (slots + 1 >= MAX_SLOTS_PER_UPDATE))
            cursor = jax.lax.cond(exhausted & ~stalled, lambda c: timeline.at(c, c.slot + 1),
                                  lambda c: c, cursor)
            return (reported, cursor, clients, valid, in_update, n_done, segment + 1,
                    slots + exhausted.astype(jnp.int32), stalled)

        reported, cursor, clients, valid, _, n_done, _, _, stalled = jax.lax.while_loop(
            going, draw, loop)
        done = Completions(clients, state.held[clients], valid & ~stalled)
        rows = jnp.where(done.valid, clients, n)
        held = state.held.at[rows].set(t + 1, mode="drop")
        # a stalled update applies nothing: its draws are not reported
        reported = jnp.where(stalled, state.reported, reported)
        # the end of the update's slot (of the last slot read, when it stalled); a run that had
        # stalled before stands still
        time = jnp.where(state.stalled, state.time,
                         jnp.stack([timeline.start_of(cursor.slot + 1), jnp.float32(0)]))
        state = KofPState(held, reported, time, stalled)
        # the next update's iteration is the next slot (the engine keeps a clock's cursor)
        cursor = jax.lax.cond(stalled, lambda c: c, lambda c: timeline.at(c, c.slot + 1), cursor)
        return state, done, (Starts(clients, jnp.full_like(clients, t + 1), done.valid),), cursor
