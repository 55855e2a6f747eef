"""What every synchronous algorithm shares: who trains in a round, and how long the round lasts.

A synchronous algorithm (FedAvg and its variants, FedLaAvg, MIFA) subclasses
:class:`SyncParts` (the keyword arguments ``selection``, ``durations``, ``deadline``,
``over_selection``), keeps the fields ``selection`` and ``clock`` in its state, and in its
``round`` calls :meth:`SyncParts.cohort` for the round's cohort and
:meth:`SyncParts.selection_after` for the selection's state after it. In order:

1. **Selection.** ``selection`` picks ``ceil(f K)`` clients among those available in the slot
   the round starts in (K without over-selection; :mod:`fedjax_avail.selection`).
2. **The round clock.** With ``durations``, each selected client's job draws a duration and
   the round lasts as long as the kept clients' slowest (:mod:`fedjax_avail.clock._rounds`):
   a ``deadline`` drops later clients, over-selection keeps the first K to finish.
3. **Drop-outs.** A kept client that fails to report (``fa.availability.dropout``) does not
   participate (:func:`~fedjax_avail.algorithms.reported`).

The round's key splits three ways: the selection's key, the local batches' key and the
durations' key. The durations have a stream of their own because a selection may derive any keys
from its own (stochastic greedy draws step i's candidates from ``fold_in(key, i)``); under JAX's
default partitionable Threefry the first two are the halves of a two-way split, as FedAvg always
split them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax

from fedjax_avail import clock as clock_lib
from fedjax_avail import selection as selection_lib
from fedjax_avail._checks import Annotated, Range, Static
from fedjax_avail.algorithms._base import (
    Algorithm,
    Footprint,
    Metrics,
    RoundInput,
    check_cohort_fits,
    reported,
)
from fedjax_avail.local import Problem


class Cohort(NamedTuple):
    """A synchronous round's cohort, ready to train (:meth:`SyncParts.cohort`)."""

    clients: jax.Array  # [K] int32
    valid: jax.Array  # [K] bool: selected, available, in time and reported
    train_key: jax.Array  # the key of the members' local batches
    selection: Any  # the strategy's state after select; pass to SyncParts.selection_after
    clock: Any  # RoundClockState after the round (None without durations)
    context: selection_lib.SelectionContext
    metrics: Metrics  # virtual_time with durations; num_late with a deadline or over-selection


@dataclasses.dataclass(frozen=True, kw_only=True)
class SyncParts(Algorithm):
    """The cohort and round-clock options of a synchronous algorithm (keyword arguments).

    Attributes:
      selection: who trains among the available (default ``fa.selection.Uniform()``; also
        ``LeastRecent()``, ``DivFL()``, ``SubTrunc(...)``, ``UnionFL(...)``,
        ``PowerOfChoice(d)``).
      durations: optional job-duration model (``fa.clock.Constant``, ``Exponential``,
        ``LogNormal``): each round then lasts as long as its slowest participant's job,
        recorded as ``virtual_time`` (the time axis the asynchronous algorithms share), and
        reads the availability of the slot it starts in. None: a round is one slot.
      deadline: with durations, the longest a round waits (> 0); later clients are dropped.
        Refused when no job could ever meet it.
      over_selection: with durations, f >= 1: select ``ceil(f K)`` clients and keep the first K
        to finish (1.3 is production FL's 130%).
    """

    selection: selection_lib.Selection = dataclasses.field(default_factory=selection_lib.Uniform)
    durations: clock_lib.Durations | None = None
    deadline: Annotated[float | None, Range(0, low_open=True)] = None
    over_selection: Annotated[float, Range(1), Static(
        "how many clients a round selects, ceil(f K)")] = 1.0

    def _check_sync(self) -> None:
        """The checks of ``__post_init__``: the selection's type and the round clock's."""
        selection_lib.check_selection(self.selection)
        self._round_clock()

    def _round_clock(self) -> clock_lib.RoundClock | None:
        """The round clock of ``durations``, ``deadline`` and ``over_selection`` (None without
        durations); refuses the last two without the first, naming them."""
        if self.durations is None:
            for name, value, unset in (("deadline", self.deadline, None),
                                       ("over_selection", self.over_selection, 1.0)):
                if value != unset:
                    raise ValueError(f"{name}={value!r} needs a duration model: pass durations="
                                     "fa.clock.Constant/Exponential/LogNormal(...)")
            return None
        return clock_lib.RoundClock(self.durations, self.deadline, self.over_selection)

    def _selected(self) -> int:
        """How many clients a round selects: ``ceil(f K)`` with over-selection, else K."""
        clock = self._round_clock()
        k = self.clients_per_round
        return k if clock is None else clock.selected(k)

    def validate(self, num_clients: int) -> None:
        k = self.clients_per_round
        check_cohort_fits(k, num_clients)
        clock = self._round_clock()
        if clock is not None:
            clock.check(num_clients)
            if self._selected() > num_clients:
                raise ValueError(
                    f"over_selection={self.over_selection!r} selects ceil({self.over_selection!r}"
                    f" * clients_per_round={k}) = {self._selected()} clients, more than "
                    f"num_clients={num_clients}; over_selection must be in [1, "
                    f"{num_clients / k:g}]")
        self.selection.validate(self._selected(), num_clients)

    def init_parts(self, params: Any, num_clients: int) -> tuple[Any, Any]:
        """The selection's state and the round clock's (None without durations)."""
        clock = self._round_clock()
        return (self.selection.init(params, num_clients),
                None if clock is None else clock.init(num_clients))

    def virtual_time(self, state: Any) -> jax.Array | None:
        """``[]`` the clock time (in slots) the rounds so far took (durations given), else None
        (a round is one availability slot)."""
        return None if state.clock is None else state.clock.time[0]

    @property
    def prepares(self) -> bool:
        return self.selection.prepares

    def prepare(self, state: Any, problem: Problem) -> Any:
        """Before round 0: the selection's preparation (DivFL: every client's gradient)."""
        return state._replace(selection=self.selection.prepare(state.selection, state.params,
                                                               problem))

    def footprint(self, num_clients: int) -> Footprint:
        return super().footprint(num_clients)._replace(
            full_batch=self.selection.full_batch_passes(self.clients_per_round, num_clients))

    def cohort(self, state: Any, inputs: RoundInput, problem: Problem) -> Cohort:
        """Steps 1-3 of the module docstring for ``state`` (its ``params``, ``selection`` and
        ``clock`` fields)."""
        select_key, train_key, clock_key = jax.random.split(inputs.key, 3)
        context = selection_lib.SelectionContext(select_key, inputs.available, inputs.round,
                                                 state.params, problem)
        chosen, clients, valid = self.selection.select(state.selection, context,
                                                       self._selected())
        clock, metrics = state.clock, {}
        timer = self._round_clock()
        if timer is not None:
            slot_length = 1.0 if inputs.timeline is None else inputs.timeline.slot_length
            clock, timed = timer.step(state.clock, clock_key, clients,
                                      valid, self.clients_per_round,
                                      _next_slot_start(inputs, state.clock.time[0]),
                                      slot_length)
            clients, valid = timed.cohort, timed.valid
            metrics["virtual_time"] = (clock.time[0] if inputs.timeline is None
                                       else inputs.timeline.seconds(clock.time[0]))
            if timer.deadline is not None or timer.over_selection > 1:
                metrics["num_late"] = timed.late
        valid = reported(inputs, clients, valid)
        return Cohort(clients, valid, train_key, chosen, clock, context, metrics)

    def selection_after(self, cohort: Cohort) -> Any:
        """The selection's state after the round (the members that reported are refreshed)."""
        return self.selection.update(cohort.selection, cohort.context, cohort.clients,
                                     cohort.valid)


def _next_slot_start(inputs: RoundInput, time: jax.Array) -> jax.Array:
    """``[]`` clock time (in slots) at which the slot after the round's begins (the slot of
    ``time`` when the round runs outside the engine, without a timeline)."""
    if inputs.timeline is None:
        return jax.numpy.floor(time) + 1.0
    return inputs.timeline.start_of(inputs.cursor.slot + 1)
