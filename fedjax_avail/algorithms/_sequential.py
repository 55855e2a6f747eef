"""Sequential SGD on the pooled data: FedLaAvg's "ideal solution" reference (P:L367)."""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax.numpy as jnp

from fedjax_avail import server
from fedjax_avail._checks import Count, Positive, check_fields
from fedjax_avail.algorithms._base import Algorithm, Footprint, Metrics, RoundInput
from fedjax_avail.local import Problem, local_sgd


class SequentialSGDState(NamedTuple):
    params: Any  # model pytree


@dataclasses.dataclass(frozen=True)
class SequentialSGD(Algorithm):
    """Plain minibatch SGD on all clients' data pooled, ``K * C`` steps per round.

    "Standard SGD on the whole training dataset", with ``beta N C`` iterations per round so that
    it does the same computation per round as the federated algorithms (P:L367). Availability is
    ignored. Batches are drawn uniformly with replacement from all examples; the batch size and
    step size are the clients' (the paper does not state them).

    Args:
      clients_per_round: K (only K * C matters).
      local_steps: C.
      batch_size: B.
      lr: step size, > 0.
    """

    clients_per_round: Count
    local_steps: Count = 10
    batch_size: Count = 5
    lr: Positive = 0.01

    def __post_init__(self):
        check_fields(self)

    def footprint(self, num_clients: int) -> Footprint:
        """One pooled "client" trains."""
        del num_clients
        return Footprint(1, self.batch_size, 1)

    def init(self, params: Any, num_clients: int) -> SequentialSGDState:
        del num_clients
        return SequentialSGDState(params)

    def round(
        self, state: SequentialSGDState, inputs: RoundInput, problem: Problem
    ) -> tuple[SequentialSGDState, Metrics]:
        delta = local_sgd(
            problem.pooled(),
            state.params,
            jnp.zeros((1,), jnp.int32),  # the one pooled "client"
            inputs.key,
            steps=self.clients_per_round * self.local_steps,
            batch_size=self.batch_size,
            lr=self.lr,
        )[0]
        params = server.add_delta(state.params, delta)
        return SequentialSGDState(params), {"num_selected": jnp.asarray(0, jnp.int32)}
