"""Virtual time: one clock for synchronous and asynchronous algorithms, availability read on it.

Virtual time is divided into slots of a fixed length L (``slot_length``, default 1.0): slot s
is ``[s L, (s + 1) L)``, and an availability process gives one mask per slot. Whoever owns
time reads the mask of the slot it is in:

* a synchronous round reads the slot of its start time (without durations round r lasts exactly
  one slot, so round r reads slot r: every run made before the clock was unified is unchanged);
* an asynchronous server step moves through the slots its jobs run in
  (:class:`fedjax_avail.clock.EventClock`), reading each slot as it enters it.

A read may jump several slots at once (:func:`fedjax_avail.availability.skip`: memoryless and
periodic processes just read the later slot; the Markov chain draws its k-step transition).
Slot s always uses the availability key of s, so a mask does not depend on who reads it.

The clocks keep time **in slots**: a float32 pair (sum, compensation) added up by
:func:`add_time` (Kahan), slot s beginning at exactly s, and job durations converted to slots
once, on the host, in float64 (:meth:`fedjax_avail.clock.Constant.in_slots`). So a run at slot
length L with every duration times L makes the choices of the run at L = 1 (the same slots
read, the same jobs completing at a slot's end), where float32 cannot hold L (0.1) too, and
time is reported in the caller's unit only at the end (:meth:`Timeline.seconds`: slots times
L). A run's virtual-time budget (``simulate(max_virtual_time=...)``) is converted the same way
and ends it after the round in progress at the budget (:func:`within_budget`,
:func:`budget_end`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_avail import _keys
from fedjax_avail.availability import AvailabilityProcess, ended, skip

_SKIP_STREAM = 0x5C1  # folded into the first skipped slot's key: the skip's own draw


class Cursor(NamedTuple):
    """Where a run stands on the slot axis (one per run, in the scan carry)."""

    state: Any  # the process state, positioned after slot ``slot``
    slot: jax.Array  # [] int32, the slot ``mask`` belongs to; -1 before the first read
    mask: jax.Array  # [N] bool, availability in slot ``slot``


@dataclasses.dataclass(frozen=True)
class Timeline:
    """Reads a process's masks by slot (traced; built inside the compiled round).

    Attributes:
      process: the availability process.
      keys: the run's keys (slot s uses ``availability_key(keys, s)``).
      slot_length: L > 0, virtual time per slot.
    """

    process: AvailabilityProcess
    keys: _keys.RunKeys
    slot_length: float = 1.0

    @staticmethod
    def start(state: Any, num_clients: int) -> Cursor:
        """The cursor before the first read, around the process's initial state."""
        return Cursor(state, jnp.int32(-1), jnp.zeros((num_clients,), bool))

    @staticmethod
    def slot_of(time: jax.Array) -> jax.Array:
        """``[]`` int32: the slot clock time ``time`` (in slots) falls in, ``floor(time)``."""
        return jnp.floor(jnp.asarray(time, jnp.float32)).astype(jnp.int32)

    @staticmethod
    def start_of(slot: jax.Array) -> jax.Array:
        """``[]`` float32 clock time (in slots) at which ``slot`` begins: ``slot``, exactly."""
        return jnp.asarray(slot, jnp.float32)

    def seconds(self, time: jax.Array) -> jax.Array:
        """Clock time (in slots) in the run's time unit, as recorded: ``time * L``."""
        return jnp.asarray(time, jnp.float32) * jnp.float32(self.slot_length)

    def at(self, cursor: Cursor, slot: jax.Array) -> Cursor:
        """The cursor at ``slot`` (>= ``cursor.slot``): the slots in between are skipped in one
        call; reading the cursor's own slot again returns it unchanged."""
        def read(c: Cursor) -> Cursor:
            first = c.slot + 1
            state = skip(self.process, c.state, first, slot - first,
                         jax.random.fold_in(_keys.availability_key(self.keys, first),
                                            _SKIP_STREAM))
            state, mask = self.process.step(state, slot, _keys.availability_key(self.keys, slot))
            return Cursor(state, jnp.asarray(slot, jnp.int32), mask)

        return jax.lax.cond(slot > cursor.slot, read, lambda c: c, cursor)

    def ended(self, cursor: Cursor) -> jax.Array:
        """``[]`` bool: nobody is available in any slot after the cursor's (a trace played once
        that has run out)."""
        return ended(self.process, cursor.state, cursor.slot + 1)


def add_time(time: jax.Array, dt: jax.Array) -> jax.Array:
    """Kahan summation: ``time = (sum, compensation)``, ``[2]`` float32."""
    y = dt - time[1]
    total = time[0] + y
    return jnp.stack([total, (total - time[0]) - y])


# A round's budget flag (``history.IN_BUDGET``): the round ran, and the budget was spent by it
# (the round after it will not run).
RAN, SPENT = 1, 2


def within_budget(start: jax.Array, budget: float, slot_length: float) -> jax.Array:
    """``[]`` bool: a round (server update) that starts at clock time ``start`` (in slots) runs
    under a budget of ``budget`` (in the run's time unit, slots of ``slot_length``): the one in
    progress at the budget is the last. The budget is converted to slots in float64, so
    ``budget = k L`` runs the rounds that start before slot k."""
    return jnp.asarray(start, jnp.float32) < jnp.float32(budget / slot_length)


def budget_flag(start: jax.Array, after: jax.Array, budget: float,
                slot_length: float) -> jax.Array:
    """``[]`` int8 ``IN_BUDGET`` flag of a round from ``start`` to ``after`` (clock times):
    0 when it does not run, ``RAN``, plus ``SPENT`` when the round after it will not run."""
    ran = within_budget(start, budget, slot_length)
    spent = ~within_budget(after, budget, slot_length)
    return jnp.where(ran, RAN + jnp.where(spent, SPENT, 0), 0).astype(jnp.int8)


def budget_end(in_budget: np.ndarray) -> int | None:
    """The round count at which a run's budget ended it, from its per-round flags so far
    (``in_budget`` ``[R]``, :func:`budget_flag`): the rounds that ran, once a round past the
    budget was skipped or the last one spent it; None while it goes on."""
    flags = np.asarray(in_budget)
    ran = int(np.count_nonzero(flags))
    if ran < len(flags) or (ran and flags[ran - 1] & SPENT):
        return ran
    return None
