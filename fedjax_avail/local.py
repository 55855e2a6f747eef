"""Local training of a cohort: C steps of minibatch SGD per member, or one gradient per member.

Shared by every algorithm. A client starts from a model x (the global model, or, for a stale
asynchronous job, the version it downloaded), takes C SGD steps on minibatches of its own data,
and reports its model delta ``u_k = x_k^C - x`` (FedLaAvg Alg. 2 L8 / Alg. 3 L10-14, P:L300;
FedBuff Alg. 1, which uploads ``-u_k``). With ``mu > 0`` each step also descends the FedProx
proximal term ``(mu / 2) ||x_k - x||^2`` (Li et al. 2020, eq. 2). K-async clients instead report
one gradient and its loss on one minibatch (WKAFL Alg. 1): :func:`local_gradients`.
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
        size = len(next(iter(data.arrays.values())))
        pooled = FederatedData(arrays=data.arrays, offsets=jnp.zeros((1,), jnp.int32),
                               counts=total, max_count=size)
        return self._replace(data=pooled)


def _cohort_rows(problem, clients, key, steps, batch_size, batch_ids):
    """``[K, C, B]`` rows: member k's batches are keyed by ``batch_ids[k]`` (default its client)."""
    data = jax.tree.map(jnp.asarray, problem.data)
    offsets = cohort_lib.gather(data.offsets, clients)
    counts = cohort_lib.gather(data.counts, clients)
    ids = clients if batch_ids is None else batch_ids
    return data.arrays, sample_rows(key, ids, offsets, counts, steps, batch_size)


def _map_members(problem, one_member, params, starts, rows):
    """``one_member(x0, member_rows)`` for every member: from the shared global model (closed
    over, not broadcast to ``[K, P]``), or from each member's own row of ``starts``."""
    if starts is None:
        x0, _ = ravel_pytree(params)
        return cohort_lib.map_cohort(lambda r: one_member(x0, r), rows,
                                     chunk=problem.client_chunk)
    return cohort_lib.map_cohort(one_member, starts, rows, chunk=problem.client_chunk)


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
    starts: jax.Array | None = None,
    batch_ids: jax.Array | None = None,
) -> jax.Array:
    """Runs C local SGD steps for each cohort member and returns the flat model deltas.

    ``x_k^{t} = x_k^{t-1} - lr * (grad F(x_k^{t-1}; xi_k^t) + mu (x_k^{t-1} - x_k^0))``, with
    ``xi_k^t`` a batch of B rows drawn uniformly with replacement from member k's rows.

    Args:
      problem: task and data.
      params: the global model pytree x (P parameters); every member starts from it unless
        ``starts`` is given.
      clients: ``[K]`` int32 indices of the cohort's clients.
      key: PRNG key of this round's batches (:func:`fedjax_avail.data.sample_rows`).
      steps: C, local steps (static).
      batch_size: B (static).
      lr: client learning rate.
      mu: proximal coefficient (0 is plain local SGD); the anchor is the member's start.
      starts: optional ``[K, P]`` flat start models, one per member (stale asynchronous jobs).
      batch_ids: optional ``[K]`` ints that key each member's batches instead of its client
        index (a client with two jobs in one step draws two different batches).

    Returns:
      ``[K, P]`` float32 deltas ``u_k = x_k^C - x_k^0``, flattened with ``ravel_pytree``.
    """
    unravel = ravel_pytree(params)[1]
    arrays, rows = _cohort_rows(problem, clients, key, steps, batch_size, batch_ids)

    def loss(x, batch_rows):
        batch = {name: a[batch_rows] for name, a in arrays.items()}
        return problem.task.loss(unravel(x), batch)

    def one_member(x0, member_rows):  # [P], [C, B]
        def sgd_step(x, batch_rows):
            g = jax.grad(loss)(x, batch_rows) + mu * (x - x0)
            return x - lr * g, None

        x, _ = jax.lax.scan(sgd_step, x0, member_rows)
        return x - x0

    return _map_members(problem, one_member, params, starts, rows)


def local_gradients(
    problem: Problem,
    params,
    clients: jax.Array,
    key: jax.Array,
    *,
    batch_size: int,
    starts: jax.Array | None = None,
    batch_ids: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Each member's loss and gradient on one minibatch of B rows (WKAFL Alg. 1 L2, P:L192).

    Args: as :func:`local_sgd`.

    Returns:
      ``([K, P] flat gradients, [K] losses)``, both at the member's start model.
    """
    unravel = ravel_pytree(params)[1]
    arrays, rows = _cohort_rows(problem, clients, key, 1, batch_size, batch_ids)

    def one_member(x, member_rows):  # [P], [1, B]
        batch = {name: a[member_rows[0]] for name, a in arrays.items()}
        loss, grad = jax.value_and_grad(lambda x: problem.task.loss(unravel(x), batch))(x)
        return grad, loss

    return _map_members(problem, one_member, params, starts, rows)


def full_batch(
    problem: Problem, params, clients: jax.Array, *, with_grads: bool = True,
    chunk: int | None = None,
) -> tuple[jax.Array | None, jax.Array]:
    """Each member's loss (and gradient) over **all** its examples at the global model.

    The quantities DivFL, SubTrunc and Power-of-Choice read (the client's full-batch gradient
    ``grad f_i(w)`` and loss ``f_i(w)``, spec ``subtrunc_unionfl.md`` 1.5). Rows are padded to
    the largest client (``data.max_count``) and masked, so the cost is K x max_count examples.

    Args:
      problem, params, clients: as :func:`local_sgd`.
      with_grads: also the gradients (False: losses only).
      chunk: members computed at once (a ``lax.map`` of ``vmap`` s, bounding the activations
        held to chunk x max_count examples); default ``problem.client_chunk``.

    Returns:
      ``([K, P] flat gradients or None, [K] losses)``.
    """
    chunk = problem.client_chunk if chunk is None else chunk
    x0, unravel = ravel_pytree(params)
    data = jax.tree.map(jnp.asarray, problem.data)
    width = problem.data.max_count
    arrays = data.arrays

    def member_loss(x, offset, count):
        rows = offset + jnp.arange(width)
        keep = jnp.arange(width) < count
        rows = jnp.where(keep, rows, offset)
        losses = jax.vmap(lambda row: problem.task.loss(
            unravel(x), {k: a[row][None] for k, a in arrays.items()}))(rows)
        return jnp.sum(jnp.where(keep, losses, 0.0)) / count

    offsets = cohort_lib.gather(data.offsets, clients)
    counts = cohort_lib.gather(data.counts, clients)
    if not with_grads:
        losses = cohort_lib.map_cohort(lambda o, c: member_loss(x0, o, c), offsets, counts,
                                       chunk=chunk)
        return None, losses

    def one_member(offset, count):
        loss, grad = jax.value_and_grad(member_loss)(x0, offset, count)
        return grad, loss

    return cohort_lib.map_cohort(one_member, offsets, counts, chunk=chunk)


def flat_size(params) -> int:
    """P, the number of parameters of a pytree."""
    return int(sum(jnp.size(leaf) for leaf in jax.tree.leaves(params)))
