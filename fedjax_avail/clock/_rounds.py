"""Virtual time of synchronous rounds: a round lasts as long as its slowest participant.

A synchronous algorithm given ``durations`` (FedAvg's ``durations=fa.clock.LogNormal(...)``)
draws each participant's job duration from the same models the asynchronous clock uses and
advances its virtual time by the largest, so synchronous and asynchronous runs share one time
axis (the straggler cost FedBuff avoids).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp

from fedjax_avail._checks import check_fields
from fedjax_avail.clock._durations import Durations
from fedjax_avail.clock._events import add_time


class RoundClockState(NamedTuple):
    speed: jax.Array  # [N] float32 speed factors
    time: jax.Array  # [2] float32 virtual time (sum, compensation)


@dataclasses.dataclass(frozen=True)
class RoundClock:
    """The time of synchronous rounds under ``durations``."""

    durations: Durations

    def __post_init__(self):
        check_fields(self)

    def init(self, num_clients: int) -> RoundClockState:
        return RoundClockState(jnp.asarray(self.durations.speeds(num_clients)),
                               jnp.zeros((2,), jnp.float32))

    def step(self, state: RoundClockState, key: jax.Array, cohort: jax.Array,
             valid: jax.Array) -> RoundClockState:
        """Advances time by the longest job of the round's valid participants (0 if none)."""
        durations = self.durations.sample(key, state.speed[cohort])
        return state._replace(time=add_time(state.time, jnp.max(jnp.where(valid, durations,
                                                                          0.0))))
