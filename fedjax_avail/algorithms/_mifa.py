"""MIFA: Memory-augmented Impatient Federated Averaging (Gu et al., NeurIPS 2021).

Compared in the FedLaAvg supplement (S:L9) as "basically the same" algorithm: the server keeps
every client's latest update and averages all N of them. The differences this class keeps from
the authors' code (``hmgxr128/MIFA_code``, ``src/trainers/fdu.py``):

* the table holds updates divided by the learning rate they were computed with,
  ``G_i = (x_i^C - x) / lr``, and the server steps ``x <- x + lr_t * mean_i G_i``;
* the learning rate decays as ``lr_t = client_lr / (t + 1)`` (``inverse_prop_decay``), t counting
  the rounds since training started (``lr_decay=True``);
* the server waits until every client has been available at least once, then fills the table
  by training all N clients at the current model, and only then starts stepping
  (``wait_for_all=True``, the code's ``table_initialized``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from fedjax_avail import cohort as cohort_lib
from fedjax_avail import selection, server
from fedjax_avail.algorithms._base import (
    Metrics,
    RoundInput,
    check_cohort_fits,
    check_local_training,
    reported,
)
from fedjax_avail.local import Problem, flat_size, local_sgd


class MIFAState(NamedTuple):
    params: Any  # global model pytree x, P parameters
    table: jax.Array  # [N, P] float32, G_i = latest update / its learning rate (0 if never)
    table_mean: jax.Array  # [P] float32, (1/N) sum_i G_i
    last_round: jax.Array  # [N] int32, round of the last reported update, -1 if never
    seen: jax.Array  # [N] bool, available at least once so far
    step: jax.Array  # [] int32, rounds since training started (t of lr_t); -1 while waiting


@dataclasses.dataclass(frozen=True)
class MIFA:
    """Every available client trains; the server averages the latest updates of all N clients.

    Round r (after start): ``A^r`` = the available clients (at most ``clients_per_round`` of
    them, the least recently updated first); each i in ``A^r`` sets
    ``G_i <- (x_i^C - x) / lr_t`` after C local steps at ``lr_t``; then
    ``x <- x + server_lr * lr_t * (1/N) sum_i G_i``.

    With ``wait_for_all=False``, ``lr_decay=False`` and ``clients_per_round`` at least the number
    of available clients, this is FedLaAvg's averaging rule with every available client selected.

    Args:
      clients_per_round: cohort cap K (static); MIFA proper trains every available client, so
        pick K >= the most clients ever available at once.
      local_steps: C.
      batch_size: B.
      client_lr: initial learning rate lr_0, > 0.
      server_lr: > 0 (1 in MIFA).
      lr_decay: ``lr_t = lr_0 / (t + 1)`` as in the authors' code; False keeps lr_0.
      wait_for_all: wait until every client has been seen, then initialise the table by training
        all N clients (authors' code); False starts at round 0 with a zero table.

    References:
      Gu, Huang, Zhang, Su, Yang, Lin. "Fast Federated Learning in the Presence of Arbitrary Device
      Unavailability". NeurIPS 2021. arXiv:2106.04159.
    """

    clients_per_round: int
    local_steps: int = 10
    batch_size: int = 5
    client_lr: float = 0.01
    server_lr: float = 1.0
    lr_decay: bool = True
    wait_for_all: bool = True

    def __post_init__(self):
        check_local_training(
            self.clients_per_round, self.local_steps, self.batch_size, self.client_lr, "client_lr",
            self.server_lr,
        )

    def validate(self, num_clients: int) -> None:
        check_cohort_fits(self.clients_per_round, num_clients)

    def init(self, params: Any, num_clients: int) -> MIFAState:
        size = flat_size(params)
        return MIFAState(
            params=params,
            table=jnp.zeros((num_clients, size), jnp.float32),
            table_mean=jnp.zeros((size,), jnp.float32),
            last_round=jnp.full((num_clients,), -1, jnp.int32),
            seen=jnp.zeros((num_clients,), bool),
            step=jnp.asarray(-1 if self.wait_for_all else 0, jnp.int32),
        )

    def _lr(self, step: jax.Array) -> jax.Array:
        return self.client_lr / (step + 1.0) if self.lr_decay else jnp.float32(self.client_lr)

    def _train(self, problem, state, clients, key, lr):
        updates = local_sgd(problem, state.params, clients, key, steps=self.local_steps,
                            batch_size=self.batch_size, lr=lr)
        return updates / lr

    def round(
        self, state: MIFAState, inputs: RoundInput, problem: Problem
    ) -> tuple[MIFAState, Metrics]:
        key = jax.random.split(inputs.key)[1]  # the batch key FedAvg and FedLaAvg use too
        seen = state.seen | inputs.available
        num_clients = seen.shape[0]

        def wait(state):
            return state._replace(seen=seen), jnp.int32(0)

        def fill_table(state):  # fdu.py initialize_update_table: all N clients, lr_0
            table = self._train(problem, state, jnp.arange(num_clients), key, self._lr(0))
            return state._replace(table=table, table_mean=table.mean(axis=0), seen=seen,
                                  last_round=jnp.full_like(state.last_round, inputs.round),
                                  step=jnp.int32(0)), jnp.int32(num_clients)

        def train(state):
            lr = self._lr(state.step)
            cohort, valid = selection.least_recent(
                state.last_round, inputs.available, self.clients_per_round
            )
            valid = reported(inputs, cohort, valid)
            grads = self._train(problem, state, cohort, key, lr)
            table, table_mean = cohort_lib.scatter_keep_mean(
                state.table, state.table_mean, cohort, grads, valid
            )
            last_round = cohort_lib.scatter(
                state.last_round, cohort, jnp.full(cohort.shape, inputs.round, jnp.int32), valid
            )
            params = server.add_delta(state.params, self.server_lr * lr * table_mean)
            return MIFAState(params, table, table_mean, last_round, seen,
                             state.step + 1), jnp.sum(valid).astype(jnp.int32)

        if not self.wait_for_all:
            new_state, selected = train(state)
        else:
            branch = jnp.where(state.step >= 0, 2, jnp.where(jnp.all(seen), 1, 0))
            new_state, selected = jax.lax.switch(branch, (wait, fill_table, train), state)
        return new_state, {"num_selected": selected}
