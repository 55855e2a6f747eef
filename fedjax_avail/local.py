"""Local training of a cohort: C steps of minibatch SGD per member, from the global model.

Shared by every algorithm. A client starts from the global model x, takes C SGD steps on
minibatches of its own data, and reports its model delta ``u_k = x_k^C - x`` (FedLaAvg
Alg. 2 L8 / Alg. 3 L10-14, P:L300). With ``mu > 0`` each step also descends the FedProx
proximal term ``(mu / 2) ||x_k - x||^2`` (Li et al. 2020, eq. 2).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from fedjax_avail import cohort as cohort_lib
from fedjax_avail.data import FederatedData, sample_rows
from fedjax_avail.tasks import Task


class Problem(NamedTuple):
    """What a round trains on: the task (static functions) and the data (device arrays)."""

    task: Task
    data: FederatedData
    client_chunk: int | None = None

    def pooled(self) -> Problem:
        """The same problem with all examples pooled into one client (for centralised SGD)."""
        data = self.data
        total = jnp.sum(data.counts, keepdims=True)
        pooled = FederatedData(arrays=data.arrays, offsets=jnp.zeros((1,), jnp.int32),
                               counts=total)
        return self._replace(data=pooled)


def local_sgd(
    problem: Problem,
    params,
    clients: jax.Array,
    key: jax.Array,
    *,
    steps: int,
    batch_size: int,
    lr: float,
    mu: float = 0.0,
) -> jax.Array:
    """Runs C local SGD steps for each cohort member and returns the flat model deltas.

    ``x_k^{t} = x_k^{t-1} - lr * (grad F(x_k^{t-1}; xi_k^t) + mu (x_k^{t-1} - x))``, with
    ``xi_k^t`` a batch of B rows drawn uniformly with replacement from member k's rows.

    Args:
      problem: task and data.
      params: global model pytree x, P parameters in all.
      clients: ``[K]`` int32 indices of the cohort's clients.
      key: PRNG key of this round's batches (:func:`fedjax_avail.data.sample_rows`).
      steps: C, local steps (static).
      batch_size: B (static).
      lr: client learning rate.
      mu: proximal coefficient (0 is plain local SGD).

    Returns:
      ``[K, P]`` float32 deltas ``u_k = x_k^C - x``, flattened with ``ravel_pytree``.
    """
    x0, unravel = ravel_pytree(params)
    data = jax.tree.map(jnp.asarray, problem.data)
    offsets = cohort_lib.gather(data.offsets, clients)
    counts = cohort_lib.gather(data.counts, clients)
    rows = sample_rows(key, clients, offsets, counts, steps, batch_size)  # [K, C, B]
    arrays = data.arrays

    def loss(x, batch_rows):
        batch = {name: a[batch_rows] for name, a in arrays.items()}
        return problem.task.loss(unravel(x), batch)

    def one_member(member_rows):  # [C, B]
        def sgd_step(x, batch_rows):
            g = jax.grad(loss)(x, batch_rows) + mu * (x - x0)
            return x - lr * g, None

        x, _ = jax.lax.scan(sgd_step, x0, member_rows)
        return x - x0

    return cohort_lib.map_cohort(one_member, rows, chunk=problem.client_chunk)


def flat_size(params) -> int:
    """P, the number of parameters of a pytree."""
    return int(sum(jnp.size(leaf) for leaf in jax.tree.leaves(params)))
