"""Virtual time of synchronous rounds: stragglers, deadlines and over-selection.

A synchronous algorithm given ``durations`` (``FedAvg(..., durations=fa.clock.LogNormal(...))``,
also FedLaAvg and MIFA) draws each selected client's job duration from the same models the
asynchronous clock uses, so synchronous and asynchronous runs share one time axis:

* by default a round lasts as long as its slowest participant (the straggler cost FedBuff
  avoids);
* with ``deadline`` the server waits at most that long: clients whose job takes longer are
  dropped from the round (their update is lost, their participation stamp not renewed), and the
  round lasts until the last job in time, or the deadline if a job missed it;
* with ``over_selection`` f > 1 the server selects ``ceil(f K)`` clients and keeps the first K to
  finish (production FL's and FedScale's over-commitment; Bonawitz et al. 2019 select 130%).
  Only the K kept train in the simulation: their durations are drawn when the jobs start, so who
  finishes first is known before training, and the others' work would be discarded anyway.

A round in which no selected client is available takes no training time; the server waits for
the next availability slot (without that, time would stand still through an outage and every
round would re-read the same empty slot).
"""

from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_avail._checks import Annotated, Range, check_fields
from fedjax_avail.clock._durations import Constant, Durations, Exponential, LogNormal
from fedjax_avail.timeline import add_time


class RoundClockState(NamedTuple):
    speed: jax.Array  # [N] float32 speed factors
    time: jax.Array  # [2] float32 clock time in slots (sum, compensation)


class Timed(NamedTuple):
    """What the clock decided about a round's cohort."""

    cohort: jax.Array  # [K] int32, the clients kept (the first K to finish when over-selecting)
    valid: jax.Array  # [K] bool, available and finished in time
    late: jax.Array  # [] int32, available selected clients dropped (deadline, over-selection)


@dataclasses.dataclass(frozen=True)
class RoundClock:
    """The time of synchronous rounds (see the module docstring).

    Args:
      durations: a duration model (``fa.clock.Constant``, ``Exponential``, ``LogNormal``; per-
        client ``speed`` factors included).
      deadline: None (wait for every participant) or the longest the server waits, > 0.
      over_selection: f >= 1: select ``ceil(f K)``, keep the first K to finish.
    """

    durations: Durations
    deadline: Annotated[float | None, Range(0, low_open=True)] = None
    over_selection: Annotated[float, Range(1)] = 1.0

    def __post_init__(self):
        check_fields(self)
        if not isinstance(self.durations, (Constant, Exponential, LogNormal)):
            raise TypeError(f"durations must be fa.clock.Constant, Exponential or LogNormal, got "
                            f"{type(self.durations).__name__}")

    def selected(self, k: int) -> int:
        """How many clients to select for K to train: ``ceil(f K)`` (K without over-selection)."""
        return math.ceil(round(self.over_selection * k, 9))

    def check(self, num_clients: int) -> None:
        """Checks the speed factors against N, and that a job can meet the deadline.

        Raises:
          ValueError: ``speed`` of another length, or a deadline shorter than the shortest job
            any client can draw (the round would train nothing, every round).
        """
        speed = self.durations.speeds(num_clients)
        shortest = self.durations.shortest(speed)
        # as the round compares them: float32 durations <= the deadline
        if self.deadline is not None and np.float32(shortest) > np.float32(self.deadline):
            raise ValueError(
                f"deadline={self.deadline!r} is shorter than every job: with durations="
                f"{type(self.durations).__name__}{self.durations._text()} the fastest client's "
                f"job takes {shortest:.6g}, so no client could ever finish in time and every "
                f"round would train nothing; raise the deadline above {shortest:.6g} or "
                "shorten the jobs")

    def init(self, num_clients: int) -> RoundClockState:
        return RoundClockState(jnp.asarray(self.durations.speeds(num_clients)),
                               jnp.zeros((2,), jnp.float32))

    def step(self, state: RoundClockState, key: jax.Array, cohort: jax.Array, valid: jax.Array,
             keep: int, next_slot: jax.Array, slot_length: float = 1.0
             ) -> tuple[RoundClockState, Timed]:
        """One round: draws the selected clients' durations, keeps who counts, advances time.

        Args:
          state: the clock.
          key: the round's duration key.
          cohort: ``[M]`` int32 selected clients (M = ``selected(keep)``).
          valid: ``[M]`` bool, selected and available.
          keep: K (static), the most clients that train.
          next_slot: ``[]`` the start (in slots) of the slot after the round's: where time
            goes when nobody is available.
          slot_length: L: the clock keeps time in slots (``state.time``, ``next_slot``).

        Returns:
          the clock after the round, and the kept cohort. The round lasts
          ``max_{kept} d_i`` when the K (or, with fewer available, all available) clients it
          waits for finish in time, else ``deadline``; time goes to ``next_slot`` when nobody
          was available.
        """
        speed = state.speed[cohort]
        # who is in time and who finishes first, in the durations' unit (as ``check``); how
        # long the round lasts, in slots: the same draws of the model converted on the host,
        # and the deadline divided by L in float32 (a swept deadline is a float32 value)
        durations = self.durations.sample(key, speed)
        slots = self.durations.in_slots(slot_length).sample(key, speed)
        in_time = valid if self.deadline is None else valid & (durations <= self.deadline)
        if cohort.shape[0] > keep:  # over-selection: the first K to finish, ties by position
            order = jnp.argsort(jnp.where(in_time, durations, jnp.inf), stable=True)[:keep]
            cohort, slots, kept = cohort[order], slots[order], in_time[order]
        else:
            kept = in_time
        longest = jnp.max(jnp.where(kept, slots, 0.0))
        if self.deadline is not None:
            waited_for = jnp.minimum(keep, jnp.sum(valid))
            longest = jnp.where(jnp.sum(kept) >= waited_for, longest,
                                jnp.float32(self.deadline) / jnp.float32(slot_length))
        time = jnp.where(jnp.any(valid), add_time(state.time, longest),
                         jnp.stack([jnp.asarray(next_slot, jnp.float32), jnp.float32(0)]))
        late = (jnp.sum(valid) - jnp.sum(kept)).astype(jnp.int32)
        return state._replace(time=time), Timed(cohort, kept, late)
