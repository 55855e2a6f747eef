"""What every algorithm shares: the round's inputs, the protocol, and hyperparameter checks."""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import jax

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
    cursor where the round ended.
    """

    def validate(self, num_clients: int) -> None: ...

    def init(self, params: Any, num_clients: int) -> Any: ...

    def round(self, state: Any, inputs: RoundInput, problem: Problem) -> tuple[Any, Metrics]: ...


def check_cohort_fits(clients_per_round: int, num_clients: int) -> None:
    if clients_per_round > num_clients:
        raise ValueError(
            f"clients_per_round must be in [1, num_clients={num_clients}], "
            f"got {clients_per_round}"
        )
