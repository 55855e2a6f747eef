"""The algorithm contract: the base every algorithm subclasses, the round's inputs, its footprint.

An algorithm is a frozen dataclass of hyperparameters subclassing :class:`Algorithm`, with pure
``init`` and ``round`` over a ``NamedTuple`` state; every other hook has a default here, which
the shared parts (:class:`~fedjax_avail.algorithms.SyncParts` for a synchronous cohort and its
round clock, :class:`~fedjax_avail.algorithms.AsyncParts` for the asynchronous clock and model
store) override, so an algorithm file holds its paper's update and nothing else.
"""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple

import jax

from fedjax_avail.local import Problem
from fedjax_avail.selection import FullBatchPass

Metrics = dict[str, jax.Array]


class RoundInput(NamedTuple):
    """Per-round inputs the engine hands an algorithm."""

    round: jax.Array  # [] int32, r = 0, 1, ...
    available: jax.Array  # [N] bool, availability in the slot the round starts in
    key: jax.Array  # PRNG key of round r
    reports: jax.Array | None = None  # [N] bool, False: a selected client fails to report
    # Where the round starts on the slot axis (fedjax_avail.timeline's Timeline and Cursor), for
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


class Footprint(NamedTuple):
    """What a round holds on the device besides the state, as an algorithm states it for
    :func:`fedjax_avail.estimate_memory` (and ``client_chunk="auto"``'s chunks)."""

    cohort: int  # K, the members a round (update) trains: "auto"'s chunks are sized on it
    batch_size: int  # B, the examples of a member's local batch
    largest: int  # the most members one pass trains (MIFA's authors-code fill round: all N)
    # [K, P] float32 arrays held together after training; 0: the round sums its members'
    # results as they finish (fedjax_avail.cohort.map_cohort_sum)
    copies: int = 1
    starts: int = 0  # [K, P] start models held while the members train
    full_batch: tuple[FullBatchPass, ...] = ()  # the selection's passes over whole local data


class Algorithm:
    """The base of every algorithm: subclass it as a frozen dataclass of hyperparameters.

    Define ``init(params, num_clients) -> state`` (``state.params`` holds the global model
    pytree) and ``round(state, inputs, problem) -> (state, metrics)``; override the defaults
    below where the algorithm needs more:

    * ``validate(num_clients)``: checks against N, before anything is compiled (default: none);
    * ``prepares`` / ``prepare(state, problem) -> state``: a one-off pass before round 0
      (DivFL's gradients of all clients; default: none);
    * ``virtual_time(state)``: the ``[]`` clock time the next round starts at, **in slots**
      (slot s starts at s; the engine records it as slots times ``slot_length``; default
      None: round r starts at slot r, one slot a round);
    * ``moves_time``: True for an algorithm whose round moves through availability slots itself
      (the asynchronous clocks): its ``round`` returns ``(state, metrics, cursor)``, and the
      next round starts from that cursor (only the first round's is placed at its start time);
    * ``footprint(num_clients)``: its round's memory (default: ``clients_per_round`` members of
      ``batch_size`` examples, ``cohort_copies`` ``[K, P]`` results held together).

    Example (FedAvg in a few lines; ``notebooks/03_write_your_own_algorithm.ipynb``)::

        @dataclasses.dataclass(frozen=True)
        class MyFedAvg(fa.algorithms.Algorithm):
            clients_per_round: int
            batch_size: int = 5

            def init(self, params, num_clients):
                return MyState(params)

            def round(self, state, inputs, problem):
                ...
    """

    moves_time: ClassVar[bool] = False
    cohort_copies: ClassVar[int] = 1  # [K, P] arrays a round holds together after training

    def __init_subclass__(cls, **kwargs: Any):
        super().__init_subclass__(**kwargs)
        if "prepare" in vars(cls) and "prepares" not in vars(cls):
            cls.prepares = True  # defining prepare is asking for it

    def validate(self, num_clients: int) -> None:
        del num_clients

    def init(self, params: Any, num_clients: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define init")

    def round(self, state: Any, inputs: RoundInput, problem: Problem) -> tuple[Any, Metrics]:
        raise NotImplementedError(f"{type(self).__name__} must define round")

    @property
    def prepares(self) -> bool:
        """Whether :meth:`prepare` runs before round 0."""
        return False

    def prepare(self, state: Any, problem: Problem) -> Any:
        del problem
        return state

    def virtual_time(self, state: Any) -> jax.Array | None:
        del state
        return None

    def footprint(self, num_clients: int) -> Footprint:
        del num_clients
        try:
            k, batch = self.clients_per_round, self.batch_size
        except AttributeError as error:
            raise NotImplementedError(
                f"{type(self).__name__}: the default footprint reads clients_per_round and "
                "batch_size; define footprint(num_clients) -> fa.algorithms.Footprint") from error
        return Footprint(k, batch, k, self.cohort_copies)


def check_cohort_fits(clients_per_round: int, num_clients: int) -> None:
    if clients_per_round > num_clients:
        raise ValueError(
            f"clients_per_round must be in [1, num_clients={num_clients}], "
            f"got {clients_per_round}"
        )
