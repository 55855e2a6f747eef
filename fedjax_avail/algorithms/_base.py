"""What every algorithm shares: the round's inputs, the protocol, and hyperparameter checks."""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp

from fedjax_avail import clock as clock_lib
from fedjax_avail.local import Problem

Metrics = dict[str, jax.Array]


class RoundInput(NamedTuple):
    """Per-round inputs the engine hands an algorithm."""

    round: jax.Array  # [] int32, r = 0, 1, ...
    available: jax.Array  # [N] bool, availability in the slot the round starts in
    key: jax.Array  # PRNG key of round r
    reports: jax.Array | None = None  # [N] bool, False: a selected client fails to report
    # Where the round starts on the slot axis (availability._timeline's Timeline and Cursor), for
    # algorithms that move through time within a round (the event clock); None: ``available``
    # holds for the whole round.
    timeline: Any = None
    cursor: Any = None


def reported(inputs: RoundInput, cohort: jax.Array, valid: jax.Array) -> jax.Array:
    """``[K]`` validity of the cohort after drop-outs: selected and able to report.

    A client that fails to report (``fa.availability.dropout``) does not participate: its update
    is lost and its participation stamp is not renewed.
    """
    return valid if inputs.reports is None else valid & inputs.reports[cohort]


class Algorithm(Protocol):
    """A frozen dataclass of hyperparameters with pure ``init`` and ``round``.

    ``state.params`` must hold the global model pytree. Optional: ``virtual_time(state)``, the
    ``[]`` virtual time the next round starts at (None or absent: round r starts at slot r);
    ``moves_time = True`` for an algorithm whose round moves through availability slots itself
    (the asynchronous event clock): its ``round`` returns ``(state, metrics, cursor)``, the
    cursor where the round ended. ``cohort_copies``: how many ``[K, P]`` float32 arrays a round
    holds together after training, for :func:`fedjax_avail.estimate_memory` (absent: 1, the
    members' updates alone, as FedAvg); ``cohort_starts``: how many of them are held while the
    members train (absent: 0; the asynchronous algorithms' start models, 1).
    """

    def validate(self, num_clients: int) -> None: ...

    def init(self, params: Any, num_clients: int) -> Any: ...

    def round(self, state: Any, inputs: RoundInput, problem: Problem) -> tuple[Any, Metrics]: ...


def next_slot_start(inputs: RoundInput, time: jax.Array) -> jax.Array:
    """``[]`` virtual time at which the slot after the round's begins (slot length 1 when the
    round runs outside the engine, without a timeline)."""
    if inputs.timeline is None:
        return jnp.floor(time) + 1.0
    return inputs.timeline.start_of(inputs.cursor.slot + 1)


def round_clock(durations: Any, deadline: float | None, over_selection: float
                ) -> clock_lib.RoundClock | None:
    """The synchronous round clock of an algorithm's ``durations``, ``deadline`` and
    ``over_selection`` fields (None without durations); refuses the last two without the first,
    naming them."""
    if durations is None:
        for name, value, unset in (("deadline", deadline, None),
                                   ("over_selection", over_selection, 1.0)):
            if value != unset:
                raise ValueError(f"{name}={value!r} needs a duration model: pass durations="
                                 "fa.clock.Constant/Exponential/LogNormal(...)")
        return None
    return clock_lib.RoundClock(durations, deadline, over_selection)


def timed_cohort(clock: clock_lib.RoundClock | None, state: Any, inputs: RoundInput,
                 key: jax.Array, cohort: jax.Array, valid: jax.Array, keep: int
                 ) -> tuple[Any, jax.Array, jax.Array, Metrics]:
    """The cohort that counts after the round clock (:mod:`fedjax_avail.clock._rounds`) and
    the clock after the round: ``(clock_state, cohort [keep], valid [keep], metrics)``; without a
    clock, everything unchanged. ``metrics`` adds ``virtual_time`` and, with a deadline or
    over-selection, ``num_late``."""
    if clock is None:
        return state, cohort, valid, {}
    state, timed = clock.step(state, key, cohort, valid, keep,
                              next_slot_start(inputs, state.time[0]))
    metrics = {"virtual_time": state.time[0]}
    if clock.deadline is not None or clock.over_selection > 1:
        metrics["num_late"] = timed.late
    return state, timed.cohort, timed.valid, metrics


def selected_count(clock: clock_lib.RoundClock | None, clients_per_round: int) -> int:
    """How many clients a round selects: ``ceil(f K)`` with over-selection, else K."""
    return clients_per_round if clock is None else clock.selected(clients_per_round)


def check_round_clock(clock: clock_lib.RoundClock | None, clients_per_round: int,
                      num_clients: int) -> None:
    """Checks the round clock against N: its speed factors, and an over-selection that would
    select more than N clients."""
    if clock is None:
        return
    clock.durations.speeds(num_clients)
    selected = clock.selected(clients_per_round)
    if selected > num_clients:
        raise ValueError(
            f"over_selection={clock.over_selection!r} selects ceil({clock.over_selection!r} * "
            f"clients_per_round={clients_per_round}) = {selected} clients, more than "
            f"num_clients={num_clients}; over_selection must be in [1, "
            f"{num_clients / clients_per_round:g}]")


def check_cohort_fits(clients_per_round: int, num_clients: int) -> None:
    if clients_per_round > num_clients:
        raise ValueError(
            f"clients_per_round must be in [1, num_clients={num_clients}], "
            f"got {clients_per_round}"
        )
