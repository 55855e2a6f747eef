"""The client axis: array kinds, and the verbs that move data between them.

Array kinds, by leading axis:

* client arrays ``[N, ...]``: one row per client (stamps, latest-update buffers, data counts;
  an availability trace ``[T, N]`` keeps its clients on its last axis:
  :func:`fedjax_avail.mesh.client_axis`);
* cohort arrays ``[K, ...]``: one row per member of the round's cohort;
* server arrays: no client axis (the global model, the running mean update);
* run arrays ``[S, ...]``: several runs (seeds) of one configuration, the whole state stacked
  (:mod:`fedjax_avail.runs`).

:func:`map_cohort` and :func:`map_cohort_sum` (the same map, returning the members' weighted
sum without holding the ``[K, ...]`` results: FedAvg) are the only places that map a per-client
function over a cohort: they own ``vmap``, the ``client_chunk`` memory knob and the split of the
cohort over a device mesh's ``"cohort"`` axis (:mod:`fedjax_avail.mesh`), so algorithms never
call ``jax.vmap`` themselves. :func:`gather`, :func:`scatter` and :func:`masked_mean` move rows
between client and cohort arrays; compressed ``[N, P]`` tables live in
:mod:`fedjax_avail.tables`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.extend import core as jax_core

from fedjax_avail.mesh import COHORT

ClientArray = jax.Array  # [N, ...]
CohortArray = jax.Array  # [K, ...]
ServerArray = jax.Array  # no client axis


def map_cohort(fn: Callable[..., Any], *args: Any, chunk: int | None = None) -> Any:
    """Applies ``fn`` to every cohort member: ``fn(*(a[k] for a in args))`` for k < K.

    Under a device mesh with a ``"cohort"`` axis (``simulate(..., mesh=...)``), the K members
    are split over that axis by sharding constraints (XLA's SPMD partitioner): each device
    trains K / D of them (the cohort is padded to a multiple of D by repeating member 0, and
    the padding dropped), in chunks of its own share when ``chunk`` is set. Every member's
    computation is unchanged, so the members' results do not depend on D beyond float
    reassociation in XLA's batched kernels.

    Args:
      fn: a function of one member's slices of ``args``.
      *args: pytrees of cohort arrays ``[K, ...]``.
      chunk: None maps the whole cohort (or a device's share of it) with one ``vmap``; an int c
        runs ``ceil(K / c)`` sequential ``vmap`` s of c members each (a ``fori_loop`` writing
        into the ``[K, ...]`` results; when c does not divide K the last chunk overlaps the one
        before and trains up to c - 1 members twice: :func:`_map_here`), bounding memory to c
        members' activations; under a ``"cohort"`` mesh, c of each device's K / D members at
        a time on every device (D c at once in all).

    Returns:
      ``fn``'s outputs stacked on a leading cohort axis ``[K, ...]``.
    """
    devices = _cohort_devices(chunk)
    if devices is None:
        return _map_here(fn, args, chunk)
    size = jax.tree.leaves(args)[0].shape[0]
    padded = _split(_pad_to(args, size, devices))
    if chunk is None:
        return jax.tree.map(lambda a: a[:size], _split(jax.vmap(fn)(*padded)))
    # in chunks: each device's share [D, K / D, ...] in its own chunks (a chunk slicing the
    # sharded axis itself gathered every member to every device: 3x one device's time)
    out = _split(jax.vmap(lambda *a: _map_here(fn, a, chunk))(*_shares(padded, devices)))
    return jax.tree.map(lambda a: a.reshape((-1, *a.shape[2:]))[:size], out)


def _cohort_devices(chunk: int | None) -> int | None:
    """D, the devices of the ``"cohort"`` axis of the mesh being traced under (None without
    one), after checking ``chunk``."""
    if chunk is not None and chunk < 1:
        raise ValueError(f"client_chunk must be >= 1 or None, got {chunk}")
    mesh = jax.sharding.get_abstract_mesh()
    return None if mesh.empty or COHORT not in mesh.axis_names else mesh.shape[COHORT]


def _split(tree: Any) -> Any:
    """Every leaf split over the ``"cohort"`` axis on its leading axis."""
    split = jax.sharding.PartitionSpec(COHORT)
    return jax.tree.map(lambda a: jax.lax.with_sharding_constraint(a, split), tree)


def _shares(padded: Any, devices: int) -> Any:
    """``[D K', ...]`` leaves as the devices' shares ``[D, K', ...]``, each on its device."""
    return _split(jax.tree.map(lambda a: a.reshape((devices, -1, *a.shape[1:])), padded))


def _pad_to(args: Any, size: int, multiple: int) -> Any:
    """``args`` with the leading axis padded to a multiple of ``multiple`` (repeating row 0)."""
    pad = -size % multiple
    if not pad:
        return args
    return jax.tree.map(lambda a: jnp.concatenate([a, jnp.repeat(a[:1], pad, axis=0)]), args)


def _map_here(fn: Callable[..., Any], args: Any, chunk: int | None) -> Any:
    """``vmap`` of ``fn`` over the leading axis, in sequential chunks of ``chunk`` members.

    The chunks' results are written into one ``[K, ...]`` buffer, nothing padded: chunk b trains
    members ``[s, s + chunk)`` with ``s = min(b * chunk, K - chunk)``, so a last chunk that
    would run past K starts early and trains again the last few members of the chunk before it
    (their own rows, keys and start models; its results overwrite theirs). Padding the cohort
    to whole chunks instead held the padded stack beside the K rows sliced out of it (2003
    P-rows for K = 1000 in chunks of 59 on JAX 0.10.2's XLA:CPU). A weakly typed output comes
    back strongly typed (none of the engine's are).
    """
    size = jax.tree.leaves(args)[0].shape[0]
    if chunk is None or chunk >= size:
        return jax.vmap(fn)(*args)
    members_from, shapes = _chunk_replay(fn, args, chunk)

    def one_chunk(b, out):
        start = _chunk_start(b, chunk, size)
        return jax.tree.map(lambda o, r: jax.lax.dynamic_update_slice_in_dim(o, r, start, 0),
                            out, members_from(start))

    out = jax.tree.map(lambda s: jnp.zeros((size, *s.shape[1:]), s.dtype), shapes)
    return jax.lax.fori_loop(0, -(-size // chunk), one_chunk, out)


def _chunk_replay(fn: Callable[..., Any], args: Any, chunk: int) -> tuple[Callable, Any]:
    """``members_from(start)``: ``vmap`` of ``fn`` over the ``chunk`` members from ``start``,
    and its outputs' shapes. ``fn`` is traced once, for the shapes, and replayed in the loop
    (tracing it again there cost FedAvg's round program 0.1 s of its 0.25 s of tracing, every
    simulate call)."""
    batched = jax.vmap(fn)

    def members_from(start):
        return batched(*jax.tree.map(
            lambda a: jax.lax.dynamic_slice_in_dim(a, start, chunk), args))

    traced, shapes = jax.make_jaxpr(members_from, return_shape=True)(jnp.int32(0))
    replay, tree = jax_core.jaxpr_as_fun(traced), jax.tree.structure(shapes)
    return (lambda start: jax.tree.unflatten(tree, replay(start))), shapes


def _chunk_start(b: jax.Array, chunk: int, size: int) -> jax.Array:
    """The first member of chunk ``b``: ``min(b chunk, K - chunk)`` (the last chunk starts
    early rather than run past K), int32 as traced (under jax_enable_x64 the loop counts in
    int64)."""
    return jnp.minimum(b * chunk, size - chunk).astype(jnp.int32)


def map_cohort_sum(fn: Callable[..., Any], weights: CohortArray, *args: Any,
                   chunk: int | None = None) -> Any:
    """``sum_k weights[k] fn(*(a[k] for a in args))`` over the cohort, each output leaf summed
    over the members as :func:`map_cohort` trains them (same ``vmap``, chunks and split over a
    ``"cohort"`` mesh axis). In chunks, each chunk's weighted sum is added to the loop's carry
    as the chunk finishes, so the ``[K, ...]`` results are never held: one ``[...]`` sum a
    device, added over the devices at the end. A member a last, overlapping chunk trains again
    (:func:`_map_here`) and a padding member of the mesh's split count with weight 0. Equal to
    ``jnp.tensordot(weights, map_cohort(fn, *args), 1)`` up to float reordering.

    FedAvg's round used to hold its K deltas and average them after training: on pfl's
    CIFAR-10 shape (K = 50 over 2 CPU devices, a member at a time) 325 MB written, read back
    and allocated afresh every round. Summed here, its rounds took 0.964x the time (median of
    4, ``benchmarks/results/before_after_issue36_cohort_sum_pfl_cnn.json``, the same final
    models), and XLA's working set of a chunked cohort (an MLP, K = 40) is 4.0 MB where its
    deltas alone took 32 MB (``tests/test_client_chunk.py``).

    Args:
      fn: a function of one member's slices of ``args``, returning a pytree of float arrays
        (each summed in its dtype promoted with the weights', as ``jnp.tensordot`` does).
      weights: ``[K]`` float weights.
      *args: pytrees of cohort arrays ``[K, ...]``.
      chunk: as for :func:`map_cohort`.
    """
    size = jax.tree.leaves(args)[0].shape[0]
    if jnp.shape(weights) != (size,):
        raise ValueError(f"weights must be [K] = [{size}] (one per cohort member), got shape "
                         f"{list(jnp.shape(weights))}")
    devices = _cohort_devices(chunk)
    if devices is None:
        return _sum_here(fn, weights, args, chunk)
    padded = _pad_to(args, size, devices)
    weights = jnp.concatenate([weights, jnp.zeros((-size % devices,), weights.dtype)])
    parts = _split(jax.vmap(lambda w, a: _sum_here(fn, w, a, chunk))(
        *_shares((weights, padded), devices)))
    return jax.tree.map(lambda a: jnp.sum(a, axis=0), parts)


def _sum_here(fn: Callable[..., Any], weights: CohortArray, args: Any,
              chunk: int | None) -> Any:
    """``sum_k weights[k] fn(args[k])`` on this device, in sequential chunks of ``chunk``
    members (those of a last, overlapping chunk that the chunk before trained count once)."""
    def wide(dtype):  # what a leaf is summed in (a bfloat16 result: float32, as tensordot)
        return jnp.promote_types(dtype, weights.dtype)

    def weighted(w, out):
        return jax.tree.map(lambda o: jnp.tensordot(w.astype(wide(o.dtype)),
                                                    o.astype(wide(o.dtype)), 1), out)

    size = jax.tree.leaves(args)[0].shape[0]
    if chunk is None or chunk >= size:
        return weighted(weights, jax.vmap(fn)(*args))
    members_from, shapes = _chunk_replay(fn, args, chunk)

    def one_chunk(b, total):
        start = _chunk_start(b, chunk, size)
        fresh = start + jnp.arange(chunk) >= b * chunk  # not trained by the chunk before
        w = jnp.where(fresh, jax.lax.dynamic_slice_in_dim(weights, start, chunk), 0)
        return jax.tree.map(jnp.add, total, weighted(w, members_from(start)))

    total = jax.tree.map(lambda s: jnp.zeros(s.shape[1:], wide(s.dtype)), shapes)
    return jax.lax.fori_loop(0, -(-size // chunk), one_chunk, total)


def gather(client_array: ClientArray, cohort: CohortArray) -> CohortArray:
    """Rows of a client array (or any table) for the cohort's client indices ``[K]``.

    One row is gathered as two (the same row twice): XLA:CPU (JAX 0.10.2) turned a one-row
    gather into a dynamic slice fused into every reader, so the whole table stayed live until
    the round wrote its rows back in place, and XLA then copied the table twice every round or
    update (FedLaAvg with K = 1 at N = 40: 82 P-rows of working set, 5 read as two; FedAsync
    with an MLP and its H = 256 model store: 46.7 ms an update, 3.94 ms read as two;
    tests/test_async.py, benchmarks/README.md)."""
    client_array, cohort = jnp.asarray(client_array), jnp.asarray(cohort)
    if cohort.shape == (1,):
        return client_array[jnp.concatenate([cohort, cohort])][:1]
    return client_array[cohort]


def scatter(
    client_array: ClientArray, cohort: CohortArray, values: CohortArray, valid: CohortArray
) -> ClientArray:
    """Writes ``values[k]`` to row ``cohort[k]`` where ``valid[k]``; other rows keep their value.

    ``cohort`` indices must be distinct (selection guarantees it).
    """
    old = gather(client_array, cohort)
    mask = valid.reshape(valid.shape + (1,) * (values.ndim - 1))
    return client_array.at[cohort].set(jnp.where(mask, values, old))


def masked_mean(values: CohortArray, weights: CohortArray) -> ServerArray:
    """``sum_k w_k values[k] / sum_k w_k`` over the cohort; zero when every weight is zero."""
    return jnp.tensordot(weights, values, axes=1) / weight_total(weights)


def weight_total(weights: CohortArray) -> jax.Array:
    """``sum_k w_k``, or 1 when it is 0 (a mean of no members is zero, not NaN)."""
    total = jnp.sum(weights)
    return jnp.where(total > 0, total, 1.0)


