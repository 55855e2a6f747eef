"""The client axis: array kinds, and the verbs that move data between them.

Array kinds, by leading axis:

* client arrays ``[N, ...]``: one row per client (stamps, latest-update buffers, data counts);
* cohort arrays ``[K, ...]``: one row per member of the round's cohort;
* server arrays: no client axis (the global model, the running mean update);
* run arrays ``[S, ...]``: several runs (seeds) of one configuration, the whole state stacked.

:func:`map_cohort` is the only place that maps a per-client function over a cohort: it owns
``vmap`` and the ``client_chunk`` memory knob, so algorithms never call ``jax.vmap`` themselves;
:func:`map_runs` maps a whole round (or an evaluation) over the runs axis.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

ClientArray = jax.Array  # [N, ...]
CohortArray = jax.Array  # [K, ...]
ServerArray = jax.Array  # no client axis


def map_runs(fn: Callable[..., Any], in_axes: Any = 0) -> Callable[..., Any]:
    """``fn`` over a leading runs axis ``[S, ...]`` (seeds of one configuration): one ``vmap``.

    Arguments with ``in_axes`` None (the data) are shared by every run.
    """
    return jax.vmap(fn, in_axes=in_axes)


def map_cohort(fn: Callable[..., Any], *args: Any, chunk: int | None = None) -> Any:
    """Applies ``fn`` to every cohort member: ``fn(*(a[k] for a in args))`` for k < K.

    Args:
      fn: a function of one member's slices of ``args``.
      *args: pytrees of cohort arrays ``[K, ...]``.
      chunk: None maps the whole cohort with one ``vmap``; an int c runs ``ceil(K / c)``
        sequential ``vmap`` s of c members each (``lax.map``), bounding memory to c members'
        activations. The cohort is padded by repeating member 0 and the padding is dropped.

    Returns:
      ``fn``'s outputs stacked on a leading cohort axis ``[K, ...]``.
    """
    if chunk is None:
        return jax.vmap(fn)(*args)
    size = jax.tree.leaves(args)[0].shape[0]
    if chunk < 1:
        raise ValueError(f"client_chunk must be >= 1 or None, got {chunk}")
    if chunk >= size:
        return jax.vmap(fn)(*args)
    blocks = -(-size // chunk)
    pad = blocks * chunk - size

    def to_blocks(a):
        a = jnp.concatenate([a, jnp.repeat(a[:1], pad, axis=0)]) if pad else a
        return a.reshape((blocks, chunk, *a.shape[1:]))

    out = jax.lax.map(lambda block: jax.vmap(fn)(*block), jax.tree.map(to_blocks, args))
    return jax.tree.map(lambda a: a.reshape((blocks * chunk, *a.shape[2:]))[:size], out)


def gather(client_array: ClientArray, cohort: CohortArray) -> CohortArray:
    """Rows of a client array for the cohort's client indices ``[K]``."""
    return jnp.asarray(client_array)[cohort]


def scatter(
    client_array: ClientArray, cohort: CohortArray, values: CohortArray, valid: CohortArray
) -> ClientArray:
    """Writes ``values[k]`` to row ``cohort[k]`` where ``valid[k]``; other rows keep their value.

    ``cohort`` indices must be distinct (selection guarantees it).
    """
    old = client_array[cohort]
    mask = valid.reshape(valid.shape + (1,) * (values.ndim - 1))
    return client_array.at[cohort].set(jnp.where(mask, values, old))


def masked_mean(values: CohortArray, weights: CohortArray) -> ServerArray:
    """``sum_k w_k values[k] / sum_k w_k`` over the cohort; zero when every weight is zero."""
    total = jnp.sum(weights)
    return jnp.tensordot(weights, values, axes=1) / jnp.where(total > 0, total, 1.0)


def scatter_keep_mean(
    client_array: ClientArray,
    mean: ServerArray,
    cohort: CohortArray,
    values: CohortArray,
    valid: CohortArray,
) -> tuple[ClientArray, ServerArray]:
    """:func:`scatter` that also keeps ``mean == client_array.mean(axis=0)`` up to date.

    The mean moves by ``(1/N) sum_k valid_k (values[k] - old[k])``: the uploaded differences of
    FedLaAvg Alg. 2 L9 (P:L290), O(K P) work instead of O(N P).

    Returns:
      ``(client_array, mean)`` after the update.
    """
    old = gather(client_array, cohort)
    change = jnp.where(valid.reshape(valid.shape + (1,) * (values.ndim - 1)), values - old, 0.0)
    mean = mean + jnp.sum(change, axis=0) / client_array.shape[0]
    return scatter(client_array, cohort, values, valid), mean
