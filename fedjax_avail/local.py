"""Local training of a cohort: C steps of minibatch SGD per member, or one gradient per member.

Shared by every algorithm. A client starts from a model x (the global model, or, for a stale
asynchronous job, the version it downloaded), takes C SGD steps on minibatches of its own data,
and reports its model delta ``u_k = x_k^C - x`` (FedLaAvg Alg. 2 L8 / Alg. 3 L10-14, P:L300;
FedBuff Alg. 1, which uploads ``-u_k``). With ``mu > 0`` each step also descends the FedProx
proximal term ``(mu / 2) ||x_k - x||^2`` (Li et al. 2020, eq. 2). K-async clients instead report
one gradient and its loss on one minibatch (WKAFL Alg. 1): :func:`local_gradients`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from fedjax_avail import cohort as cohort_lib
from fedjax_avail._checks import check_int
from fedjax_avail.data import FederatedData, sample_rows
from fedjax_avail.tasks import Task


class Problem(NamedTuple):
    """What a round trains on: the task (static functions) and the data (device arrays)."""

    task: Task
    data: FederatedData
    client_chunk: int | None = None  # members trained at once (local SGD, gradients); None: all
    full_batch_chunk: int | None = None  # members of a full-batch pass at once (:func:`full_batch`)

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


def _split(flat: jax.Array, like):
    """``flat [P]`` (``ravel_pytree(like)[0]``'s layout) as a pytree shaped like ``like``, every
    leaf in ``flat``'s dtype (``ravel_pytree``'s unravel would cast each to its leaf's dtype)."""
    leaves, treedef = jax.tree.flatten(like)
    ends = np.cumsum([math.prod(jnp.shape(leaf)) for leaf in leaves])
    pieces = jnp.split(flat, ends[:-1])
    return treedef.unflatten([piece.reshape(jnp.shape(leaf))
                              for piece, leaf in zip(pieces, leaves, strict=True)])


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
    weights: jax.Array | None = None,
) -> jax.Array:
    """Runs C local SGD steps for each cohort member and returns the flat model deltas (or,
    with ``weights``, their weighted sum).

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
      mu: proximal coefficient (0 is plain local SGD); the anchor is the member's start. A
        Python 0 drops the term from members of the global model; a traced 0 adds it.
      starts: optional ``[K, P]`` flat start models, one per member (stale asynchronous jobs).
      batch_ids: optional ``[K]`` ints that key each member's batches instead of its client
        index (a client with two jobs in one step draws two different batches).
      weights: optional ``[K]`` float weights: return ``sum_k w_k u_k`` ``[P]``, summed as the
        members finish (:func:`fedjax_avail.cohort.map_cohort_sum`; the ``[K, P]`` deltas are
        never held when the cohort trains in chunks).

    Returns:
      ``[K, P]`` deltas ``u_k = x_k^C - x_k^0``, flattened with ``ravel_pytree`` (its dtype:
      float32 for a float32 model); with ``weights``, ``[P]`` their weighted sum.
    """
    arrays, rows = _cohort_rows(problem, clients, key, steps, batch_size, batch_ids)
    dtype = jax.eval_shape(lambda p: ravel_pytree(p)[0], params).dtype  # the flat vector's
    static_zero = isinstance(mu, (int, float)) and mu == 0  # plain SGD (a traced mu: not)

    def loss(x, batch_rows):  # x: the model's pytree, each leaf in the flat vector's dtype
        batch = {name: a[batch_rows] for name, a in arrays.items()}
        model = jax.tree.map(lambda v, like: v.astype(jnp.result_type(like)), x, params)
        return problem.task.loss(model, batch)

    def trained(start, member_rows, proximal=True):  # start: a model pytree; rows [C, B]
        def sgd_step(x, batch_rows):
            grad = jax.grad(loss)(x, batch_rows)
            if proximal:
                grad = jax.tree.map(lambda g, v, v0: g + mu * (v - v0), grad, x, start)
            return jax.tree.map(lambda v, g: v - lr * g, x, grad), None

        return jax.lax.scan(sgd_step, start, member_rows)[0]

    # The steps carry the model as a pytree, not as the flat [P] vector: slicing the leaves
    # out of it and concatenating the gradient back cost 2 copies of the model a step (14 %
    # of a step of pfl's CIFAR-10 CNN on a CPU; benchmarks/README.md). Members of the global
    # model start from it, closed over, and keep their deltas as pytrees until FedAvg's sum
    # adds them leaf by leaf (or they are raveled into the member's row of the [K, P] stack):
    # a round of that CNN took 0.99x the time of one splitting a flat start out and
    # concatenating a delta per member, with the same models
    # (benchmarks/results/before_after_issue36_pytree_members_pfl_cnn.json). From the global
    # model a static mu = 0 drops the proximal term (0 (x - x0) read x0 every step: that
    # round took 1.06x, before_after_issue36_variant_zero_proximal_term.json); a stale job
    # keeps it (without it XLA compiled FedAsync's MLP update, its start row gathered from
    # the model store, to 1.06x the time, 1.10x of the best runs:
    # before_after_issue36_variant_stale_jobs_without_proximal_term.json). The deltas are
    # equal to the term's for finite models (0 (x - x0) adds a zero).
    def from_global(member_rows):  # u_k as a pytree
        x = trained(start, member_rows, proximal=not static_zero)
        return jax.tree.map(jnp.subtract, x, start)

    def from_own(member_start, member_rows):  # a stale job from its start row [P]: u_k [P]
        return ravel_pytree(trained(_split(member_start, params), member_rows))[0] - member_start

    if starts is None:
        start = jax.tree.map(lambda v: jnp.asarray(v, dtype), params)  # shared, not [K, P]
        member, args = from_global, (rows,)
    else:
        member, args = from_own, (starts, rows)
    if weights is not None:
        total = cohort_lib.map_cohort_sum(member, weights, *args, chunk=problem.client_chunk)
        return ravel_pytree(total)[0]
    if starts is None:
        return cohort_lib.map_cohort(lambda r: ravel_pytree(from_global(r))[0], rows,
                                     chunk=problem.client_chunk)
    return cohort_lib.map_cohort(from_own, starts, rows, chunk=problem.client_chunk)


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


FULL_BATCH_BLOCK = 256  # rows of one member held at once in a full-batch pass


def block_width(max_count: int, block: int = FULL_BATCH_BLOCK) -> int:
    """Rows per block of a full-batch pass: ``max_count`` when it fits in one block, else the
    even split ``ceil(max_count / ceil(max_count / block)) <= block`` (the least padding)."""
    check_int("max_count", max_count)
    check_int("block", block)
    blocks = -(-max_count // block)
    return -(-max_count // blocks)


def full_batch(
    problem: Problem, params, clients: jax.Array, *, with_grads: bool = True,
    chunk: int | None = None, block: int = FULL_BATCH_BLOCK,
) -> tuple[jax.Array | None, jax.Array]:
    """Each member's loss (and gradient) over **all** its examples at the global model.

    The quantities DivFL, SubTrunc and Power-of-Choice read (the client's full-batch gradient
    ``grad f_i(w) = (1 / n_i) sum_j grad l(w; z_ij)`` and loss ``f_i(w)``, spec
    ``subtrunc_unionfl.md`` 1.5). Each member's rows are taken W at a time (W =
    :func:`block_width` ``(data.max_count, block)``), the rows past its count masked, and the
    sums of losses and gradients accumulated over ``ceil(n_i / W)`` blocks, so the rows held at
    once are chunk x W whatever the largest client; a chunk loops as often as its own largest
    member needs. When every client fits in one block (W = max_count) there is no loop.

    Args:
      problem, params, clients: as :func:`local_sgd`.
      with_grads: also the gradients (False: losses only).
      chunk: members computed at once (sequential ``vmap`` s,
        :func:`fedjax_avail.cohort.map_cohort`, bounding the activations held to chunk x W
        examples); default ``problem.full_batch_chunk``.
      block: the most rows of one member held at once (static), >= 1.

    Returns:
      ``([K, P] flat gradients or None, [K] losses)``.
    """
    width = block_width(problem.data.max_count, block)
    chunk = problem.full_batch_chunk if chunk is None else chunk
    x0, unravel = ravel_pytree(params)
    data = jax.tree.map(jnp.asarray, problem.data)
    one_block = width == problem.data.max_count
    arrays = data.arrays

    def block_loss(x, offset, count, start):  # summed over rows [start, start + W) of a member
        index = start + jnp.arange(width)
        keep = index < count
        rows = jnp.where(keep, offset + index, offset)
        losses = jax.vmap(lambda row: problem.task.loss(
            unravel(x), {k: a[row][None] for k, a in arrays.items()}))(rows)
        return jnp.sum(jnp.where(keep, losses, 0.0))

    value = jax.value_and_grad(block_loss) if with_grads else (
        lambda *a: (block_loss(*a), None))

    def one_member(offset, count):
        if one_block:
            total, grad = value(x0, offset, count, 0)
        else:
            def body(carry):
                i, total, grad = carry
                loss, g = value(x0, offset, count, i * width)
                return i + 1, total + loss, None if g is None else grad + g

            zero = None if not with_grads else jnp.zeros_like(x0)
            _, total, grad = jax.lax.while_loop(
                lambda carry: carry[0] * width < count, body, (0, jnp.float32(0.0), zero))
        return (None if grad is None else grad / count), total / count

    offsets = cohort_lib.gather(data.offsets, clients)
    counts = cohort_lib.gather(data.counts, clients)
    return cohort_lib.map_cohort(one_member, offsets, counts, chunk=chunk)


def flat_size(params) -> int:
    """P, the number of parameters of a pytree."""
    return int(sum(math.prod(jnp.shape(leaf)) for leaf in jax.tree.leaves(params)))
