"""The client axis: array kinds, and the verbs that move data between them.

Array kinds, by leading axis:

* client arrays ``[N, ...]``: one row per client (stamps, latest-update buffers, data counts);
* cohort arrays ``[K, ...]``: one row per member of the round's cohort;
* server arrays: no client axis (the global model, the running mean update);
* run arrays ``[S, ...]``: several runs (seeds) of one configuration, the whole state stacked.

:func:`map_cohort` is the only place that maps a per-client function over a cohort: it owns
``vmap`` and the ``client_chunk`` memory knob, so algorithms never call ``jax.vmap`` themselves;
:func:`map_runs` maps a whole round (or an evaluation) over the runs axis; with a device mesh,
:func:`client_shardings` splits every client array over the mesh's ``"clients"`` axis (XLA's
SPMD partitioner then runs the same program on every device).
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


CLIENTS = "clients"  # the mesh axis the client axis is sharded over


def client_shardings(tree: Any, num_clients: int, mesh: Any, axis: int = 0) -> Any:
    """Shardings for a pytree on ``mesh``: arrays whose axis ``axis`` has length N (client
    arrays: tables, stamps, availability state) are split over the mesh's ``"clients"`` axis;
    every other array (the model, server arrays) is replicated.

    Raises:
      ValueError: the mesh has no ``"clients"`` axis, or N is not a multiple of its size.
    """
    from jax.sharding import NamedSharding, PartitionSpec

    if CLIENTS not in mesh.axis_names:
        raise ValueError(f"mesh must have a {CLIENTS!r} axis, got axes {mesh.axis_names}")
    size = mesh.shape[CLIENTS]
    if num_clients % size:
        raise ValueError(f"num_clients={num_clients} must be a multiple of the mesh's "
                         f"{CLIENTS!r} axis size {size} to shard the client axis")

    def sharding(leaf):
        shape = getattr(leaf, "shape", ())
        if len(shape) > axis and shape[axis] == num_clients:
            return NamedSharding(mesh, PartitionSpec(*([None] * axis), CLIENTS))
        return NamedSharding(mesh, PartitionSpec())

    return jax.tree.map(sharding, tree)


def example_shardings(arrays: Any, mesh: Any) -> Any:
    """Shardings of the flat example arrays ``[M, ...]``: split over ``"clients"`` when M is a
    multiple of the axis size (rows are grouped by client, so each device holds a run of
    clients), else replicated."""
    from jax.sharding import NamedSharding, PartitionSpec

    size = mesh.shape[CLIENTS]
    return jax.tree.map(lambda a: NamedSharding(mesh, PartitionSpec(
        CLIENTS if a.shape[0] % size == 0 else None)), arrays)


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


TABLE_DTYPES = ("float32", "bfloat16", "int8")


def check_table_dtype(dtype: str) -> None:
    if dtype not in TABLE_DTYPES:
        raise ValueError(f"table_dtype must be one of {TABLE_DTYPES}, got {dtype!r}")


def table_zeros(num_rows: int, width: int, dtype: str) -> tuple[ClientArray, ClientArray]:
    """An all-zero ``[N, P]`` table stored as ``dtype``, and its ``[N]`` float32 row scales.

    ``"float32"`` and ``"bfloat16"`` store values (scales are ones, unused); ``"int8"`` stores
    ``round(v / s)`` with one scale ``s = max |v| / 127`` per row: 4x less memory than float32.
    """
    check_table_dtype(dtype)
    return (jnp.zeros((num_rows, width), jnp.dtype(dtype)),
            jnp.ones((num_rows,), jnp.float32))


def encode_rows(values: CohortArray, dtype) -> tuple[CohortArray, CohortArray]:
    """``[K, P]`` float32 rows as stored in a table of ``dtype``, and their ``[K]`` scales."""
    if jnp.dtype(dtype) != jnp.int8:
        return values.astype(dtype), jnp.ones(values.shape[:1], jnp.float32)
    top = jnp.max(jnp.abs(values), axis=-1)
    scale = jnp.where(top > 0, top / 127.0, 1.0)
    quantised = jnp.clip(jnp.round(values / scale[:, None]), -127, 127).astype(jnp.int8)
    return quantised, scale


def decode_rows(stored: CohortArray, scale: CohortArray) -> CohortArray:
    """The float32 values a table's rows stand for."""
    values = stored.astype(jnp.float32)
    return values * scale[:, None] if stored.dtype == jnp.int8 else values


def scatter_keep_mean(
    client_array: ClientArray,
    mean: ServerArray,
    cohort: CohortArray,
    values: CohortArray,
    valid: CohortArray,
    scale: ClientArray | None = None,
) -> tuple[ClientArray, ServerArray] | tuple[ClientArray, ServerArray, ClientArray]:
    """:func:`scatter` that also keeps ``mean == client_array.mean(axis=0)`` up to date.

    The mean moves by ``(1/N) sum_k valid_k (new[k] - old[k])``: the uploaded differences of
    FedLaAvg Alg. 2 L9 (P:L290), O(K P) work instead of O(N P). For a table stored in a smaller
    dtype (``scale`` given: :func:`table_zeros`), ``new`` and ``old`` are the values the stored
    rows stand for, so the mean stays the mean of the stored (rounded) rows, not of the rows
    before rounding.

    Returns:
      ``(client_array, mean)`` after the update, and the row scales when ``scale`` is given.
    """
    mask = valid.reshape(valid.shape + (1,) * (values.ndim - 1))
    if scale is None:
        old = gather(client_array, cohort)
        change = jnp.where(mask, values - old, 0.0)
        mean = mean + jnp.sum(change, axis=0) / client_array.shape[0]
        return scatter(client_array, cohort, values, valid), mean
    old = decode_rows(gather(client_array, cohort), gather(scale, cohort))
    stored, new_scale = encode_rows(values, client_array.dtype)
    change = jnp.where(mask, decode_rows(stored, new_scale) - old, 0.0)
    mean = mean + jnp.sum(change, axis=0) / client_array.shape[0]
    return (scatter(client_array, cohort, stored, valid), mean,
            scatter(scale, cohort, new_scale, valid))
