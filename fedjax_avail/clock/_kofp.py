"""WKAFL's K-of-P clock: K clients, uniform among the available, report at every iteration.

Every client always holds the model it last received (version ``held[i]``, 0 at the start) and
computes on it; the K that report receive the model of the update their reports go into. This
is the authors' code's protocol (``wkafl.md`` 7.2); virtual time counts iterations.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp

from fedjax_avail._checks import Count, check_fields
from fedjax_avail.clock._events import Completions, _uniform_scores
from fedjax_avail.clock._store import Starts


class KofPState(NamedTuple):
    held: jax.Array  # [N] int32, the model version each client holds and computes on
    reported: jax.Array  # [N] bool, reported in the current round (one_per_round only)
    time: jax.Array  # [2] float32, iterations so far (as the event clock's (sum, compensation))


@dataclasses.dataclass(frozen=True)
class KofPClock:
    """K uniform reports per iteration (``fa.clock.KofP``); see the module docstring.

    With ``one_per_round``, only clients that have not reported in the current round are drawn;
    a new round begins when no available client is left to draw.
    """

    events: Count
    one_per_round: bool = False

    def __post_init__(self):
        check_fields(self)

    def init(self, num_clients: int) -> KofPState:
        n = num_clients
        return KofPState(jnp.zeros((n,), jnp.int32), jnp.zeros((n,), bool),
                         jnp.zeros((2,), jnp.float32))

    def virtual_time(self, state: KofPState) -> jax.Array:
        return state.time[0]

    def step(self, state: KofPState, available: jax.Array, key: jax.Array, t: jax.Array):
        """``(state, Completions [K], (Starts [K],))``: the reporters receive version t + 1."""
        reported = state.reported
        if self.one_per_round:
            reported = jnp.where(jnp.any(available & ~reported), reported, False)
            eligible = available & ~reported
        else:
            eligible = available
        _, clients = jax.lax.top_k(_uniform_scores(key, eligible), self.events)
        valid = eligible[clients]
        done = Completions(clients, state.held[clients], valid)
        rows = jnp.where(valid, clients, state.held.shape[0])
        held = state.held.at[rows].set(t + 1, mode="drop")
        if self.one_per_round:
            reported = reported.at[rows].set(True, mode="drop")
        state = KofPState(held, reported, state.time + jnp.array([1.0, 0.0], jnp.float32))
        return state, done, (Starts(clients, jnp.full_like(clients, t + 1), valid),)
