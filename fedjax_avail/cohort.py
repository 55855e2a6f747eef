"""The client axis: array kinds, and the verbs that move data between them.

Array kinds, by leading axis:

* client arrays ``[N, ...]``: one row per client (stamps, latest-update buffers, data counts;
  an availability trace ``[T, N]`` keeps its clients on its last axis: :func:`client_axis`);
* cohort arrays ``[K, ...]``: one row per member of the round's cohort;
* server arrays: no client axis (the global model, the running mean update);
* run arrays ``[S, ...]``: several runs (seeds) of one configuration, the whole state stacked.

:func:`map_cohort` is the only place that maps a per-client function over a cohort: it owns
``vmap`` and the ``client_chunk`` memory knob, so algorithms never call ``jax.vmap`` themselves;
:func:`map_runs` maps a whole round (or an evaluation) over the runs axis; with a device mesh,
:func:`client_shardings` splits every client array over the mesh's ``"clients"`` axis (XLA's
SPMD partitioner then runs the same program on every device), and :func:`map_cohort` splits
each round's cohort training over its ``"cohort"`` axis (a sharding constraint on the padded
cohort; on a CPU, several host devices are several cores training members in parallel;
:func:`cohort_mesh` builds such a mesh).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jax_core

ClientArray = jax.Array  # [N, ...]
CohortArray = jax.Array  # [K, ...]
ServerArray = jax.Array  # no client axis


RUNS_LAYOUTS = ("auto", "vmap", "map", "loop")


def runs_layout(layout: str = "auto", mesh: Any = None) -> str:
    """The layout of a runs axis: ``"auto"`` is ``"loop"`` on a CPU without a device mesh,
    ``"map"`` on a CPU with one, ``"vmap"`` on accelerators; any other value is checked and
    returned.

    ``"vmap"`` batches the S runs into every operation: on an accelerator S runs cost about
    one's time (H100: 8 seeds 1.00x one seed's wall time). On XLA:CPU it turns each batched
    matmul of the cohort into one with two batch dimensions, and S runs took about S
    separate runs' time (8 seeds: 0.81-1.26x a loop of 8 calls on two 2-core machines).
    ``"loop"`` (the engine, :class:`fedjax_avail.engine.RoundChunks`) compiles one run's program
    once and runs each run's chunk of rounds with it, :func:`loop_workers` runs at a time on
    threads: a single run's kernels, each run's model and per-round metrics bit for bit its
    separate run's. XLA:CPU runs one small-model run on about one core whatever the cores (MNIST
    logistic regression, K = 100: 19.7 ms a round on one core, 24 ms on two), so on two cores
    8 seeds' rounds ran 2.07x faster two at a time than one after the other (2.5-2.8x one
    seed's wall time, a third of 8 separate calls).
    ``"map"`` runs them one after the other inside each compiled round (a ``lax.map`` in
    :func:`map_runs`), which copies each run's state in and out every round; it also runs under
    a mesh. Measured side by side in ``benchmarks/run_axis.py``.
    """
    if layout not in RUNS_LAYOUTS:
        raise ValueError(f"runs_layout must be one of {RUNS_LAYOUTS}, got {layout!r}")
    if layout == "loop" and mesh is not None:
        raise ValueError("runs_layout='loop' runs without a mesh; with a mesh use 'vmap' or "
                         "'map' (or 'auto')")
    if layout == "auto":
        if jax.default_backend() != "cpu":
            return "vmap"
        return "loop" if mesh is None else "map"
    return layout


def loop_workers(runs: int) -> int:
    """How many runs of the ``"loop"`` layout train at once: one a CPU core this process may
    use (``os.sched_getaffinity``), at most ``runs``. Each holds its own copy of one run's state
    and its own working sets (counted by :func:`fedjax_avail.estimate_memory`)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(int(runs), cores or 1))


def map_runs(fn: Callable[..., Any], in_axes: tuple[int | None, ...],
             layout: str = "vmap") -> Callable[..., Any]:
    """``fn`` over a leading runs axis ``[S, ...]`` (seeds of one configuration).

    Arguments with ``in_axes`` None (the data) are shared by every run, the others (0) carry
    the runs axis. ``layout`` ``"vmap"``: one ``vmap``; ``"map"`` or ``"loop"``: a
    ``lax.map``, one run at a time (:func:`runs_layout`; the engine runs a ``"loop"``'s rounds
    itself and maps only one-off passes here). Either returns every output with a leading
    ``[S]`` axis.
    """
    if layout == "vmap":
        return jax.vmap(fn, in_axes=in_axes)
    if any(axis not in (0, None) for axis in in_axes):
        raise ValueError(f"map_runs maps over axis 0 (or None) only, got in_axes={in_axes}")
    mapped = [i for i, axis in enumerate(in_axes) if axis is not None]

    def one_at_a_time(*args):
        def one(stacked):
            full = list(args)
            for i, value in zip(mapped, stacked, strict=True):
                full[i] = value
            return fn(*full)

        return jax.lax.map(one, tuple(args[i] for i in mapped))

    return one_at_a_time


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
    if chunk is not None and chunk < 1:
        raise ValueError(f"client_chunk must be >= 1 or None, got {chunk}")
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or COHORT not in mesh.axis_names:
        return _map_here(fn, args, chunk)
    from jax.sharding import PartitionSpec

    size, devices = jax.tree.leaves(args)[0].shape[0], mesh.shape[COHORT]
    split = PartitionSpec(COHORT)
    padded = jax.lax.with_sharding_constraint(_pad_to(args, size, devices), split)
    if chunk is None:
        out = jax.lax.with_sharding_constraint(jax.vmap(fn)(*padded), split)
        return jax.tree.map(lambda a: a[:size], out)
    # in chunks: each device's share [D, K / D, ...] in its own chunks (a chunk slicing the
    # sharded axis itself gathered every member to every device: 3x one device's time)
    share = jax.tree.map(lambda a: jax.lax.with_sharding_constraint(
        a.reshape((devices, -1, *a.shape[1:])), split), padded)
    out = jax.vmap(lambda *a: _map_here(fn, a, chunk))(*share)
    out = jax.tree.map(lambda a: jax.lax.with_sharding_constraint(a, split), out)
    return jax.tree.map(lambda a: a.reshape((-1, *a.shape[2:]))[:size], out)


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
    batched = jax.vmap(fn)

    def members_from(start):
        return batched(*jax.tree.map(
            lambda a: jax.lax.dynamic_slice_in_dim(a, start, chunk), args))

    # fn traced once, for the buffer's shapes, and replayed in the loop (tracing it again there
    # cost FedAvg's round program 0.1 s of its 0.25 s of tracing, every simulate call)
    traced, shapes = jax.make_jaxpr(members_from, return_shape=True)(jnp.int32(0))
    replay, tree = jax_core.jaxpr_as_fun(traced), jax.tree.structure(shapes)

    def one_chunk(b, out):
        # int32, as traced (under jax_enable_x64 the loop counts in int64)
        start = jnp.minimum(b * chunk, size - chunk).astype(jnp.int32)
        return jax.tree.map(lambda o, r: jax.lax.dynamic_update_slice_in_dim(o, r, start, 0),
                            out, jax.tree.unflatten(tree, replay(start)))

    out = jax.tree.map(lambda s: jnp.zeros((size, *s.shape[1:]), s.dtype), shapes)
    return jax.lax.fori_loop(0, -(-size // chunk), one_chunk, out)


CLIENTS = "clients"  # the mesh axis the client axis is sharded over
COHORT = "cohort"  # the mesh axis each round's cohort training is split over


def cohort_mesh(devices: int) -> Any:
    """A mesh with one ``"cohort"`` axis over the first ``devices`` devices: ``simulate(...,
    mesh=cohort_mesh(2))`` trains each round's K cohort members K / 2 per device.

    On a CPU, ask JAX for that many devices first (one per core is the useful number), before
    any JAX computation: ``jax.config.update("jax_num_cpu_devices", 2)``. XLA:CPU runs the
    cohort's small batched matrix products on about one core, so this is how a multi-core CPU
    is used (measured: FedAvg on MNIST, K = 100, 2.07x faster on 2 cores; README, Speed).

    Raises:
      ValueError: fewer than ``devices`` devices, or ``devices`` < 1.
    """
    available = jax.devices()
    if not isinstance(devices, int) or isinstance(devices, bool) or devices < 1:
        raise ValueError(f"devices must be an integer >= 1, got {devices!r}")
    if devices > len(available):
        raise ValueError(f"devices={devices}, but JAX sees {len(available)} "
                         f"{available[0].platform} device(s); on a CPU set "
                         f"jax.config.update('jax_num_cpu_devices', {devices}) before any JAX "
                         f"computation")
    return jax.sharding.Mesh(np.array(available[:devices]), (COHORT,))


def check_mesh(mesh: Any, num_clients: int) -> None:
    """Raises ValueError unless ``mesh`` has a ``"clients"`` or ``"cohort"`` axis (or both) and
    N is a multiple of the ``"clients"`` axis size."""
    names = tuple(getattr(mesh, "axis_names", ()))
    if not {CLIENTS, COHORT} & set(names):
        raise ValueError(f"mesh must have a {CLIENTS!r} axis (split the client arrays) or a "
                         f"{COHORT!r} axis (split each round's cohort), got axes {names}")
    explicit = [name for name, kind in zip(names, getattr(mesh, "axis_types", ()), strict=False)
                 if "Explicit" in str(kind)]
    if explicit:
        raise ValueError(
            f"mesh axes {explicit} are Explicit (jax.make_mesh's default): the engine places "
            "arrays with shardings and needs Auto axes; build the mesh with "
            "jax.sharding.Mesh(devices, names) or jax.make_mesh(shape, names, "
            "axis_types=(jax.sharding.AxisType.Auto,) * len(names))")
    if CLIENTS in names and num_clients % mesh.shape[CLIENTS]:
        raise ValueError(f"num_clients={num_clients} must be a multiple of the mesh's "
                         f"{CLIENTS!r} axis size {mesh.shape[CLIENTS]} to shard the client axis")


MODEL_FIELDS = ("params", "opt_state")  # an algorithm state's model and server optimizer


def client_axis(path: Any, leaf: Any, num_clients: int, axis: int = 0,
                availability: bool = False) -> int | None:
    """The axis of a state leaf (at ``path``, a ``jax.tree_util`` key path) that holds one
    entry per client, or None.

    An algorithm's state keeps its clients on axis ``axis`` (0, or 1 after a leading runs
    axis): ``[N, P]`` tables, ``[N]`` stamps. An availability process's state
    (``availability``) keeps them on its last axis of length N: ``[N]`` thresholds, or a trace
    ``[T, N]`` whose T slots come first (also when T = N). Leaves under a field named in
    ``MODEL_FIELDS`` have none: the model and the server optimizer's state are never per
    client, whatever their shapes (a bias of 10 classes with N = 10 clients).
    :func:`client_shardings` splits leaves over this axis and
    :func:`fedjax_avail.estimate_memory` counts them split."""
    if any(getattr(key, "name", None) in MODEL_FIELDS for key in path):
        return None
    shape = getattr(leaf, "shape", ())
    if availability:
        return next((i for i in reversed(range(axis, len(shape)))
                     if shape[i] == num_clients), None)
    return axis if len(shape) > axis and shape[axis] == num_clients else None


def client_shardings(tree: Any, num_clients: int, mesh: Any, axis: int = 0,
                     availability: bool = False) -> Any:
    """Shardings for a pytree on ``mesh``: client arrays (tables, stamps, an availability
    process's state when ``availability``) are split over the mesh's ``"clients"`` axis along
    their client axis (:func:`client_axis`); every other array (the model, server arrays) is
    replicated, and so is everything on a mesh without a ``"clients"`` axis.
    """
    from jax.sharding import NamedSharding, PartitionSpec

    check_mesh(mesh, num_clients)
    if CLIENTS not in mesh.axis_names:
        return jax.tree.map(lambda _: NamedSharding(mesh, PartitionSpec()), tree)

    def sharding(path, leaf):
        split = client_axis(path, leaf, num_clients, axis, availability)
        if split is None:
            return NamedSharding(mesh, PartitionSpec())
        return NamedSharding(mesh, PartitionSpec(*([None] * split), CLIENTS))

    return jax.tree_util.tree_map_with_path(sharding, tree)


def example_shardings(arrays: Any, mesh: Any) -> Any:
    """Shardings of the flat example arrays ``[M, ...]``: split over ``"clients"`` when M is a
    multiple of the axis size (rows are grouped by client, so each device holds a run of
    clients), else replicated."""
    from jax.sharding import NamedSharding, PartitionSpec

    size = mesh.shape[CLIENTS] if CLIENTS in mesh.axis_names else 0
    return jax.tree.map(lambda a: NamedSharding(mesh, PartitionSpec(
        CLIENTS if size and a.shape[0] % size == 0 else None)), arrays)


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
    total = jnp.sum(weights)
    return jnp.tensordot(weights, values, axes=1) / jnp.where(total > 0, total, 1.0)


TABLE_DTYPES = ("float32", "bfloat16", "int8")


_BFLOAT16_BITS = jnp.uint16  # how a "bfloat16" table is stored (table_zeros)


def check_table_dtype(dtype: str) -> None:
    if dtype not in TABLE_DTYPES:
        raise ValueError(f"table_dtype must be one of {TABLE_DTYPES}, got {dtype!r}")


def table_zeros(num_rows: int, width: int, dtype: str) -> tuple[ClientArray, ClientArray]:
    """An all-zero ``[N, P]`` table stored as ``dtype``, and its ``[N]`` float32 row scales.

    ``"float32"`` stores values (scales are ones, unused); ``"bfloat16"`` stores each value's
    bfloat16 bits as uint16 (half the memory): XLA:CPU has no bfloat16 scatter and would convert
    the whole table to float32 and back every round (measured: 6.3 GB of temporaries for a
    3.1 GB table at N = 2 x 10^5; as uint16 bits the rows are written in place); ``"int8"``
    stores ``round(v / s)`` with one scale ``s = max |v| / 127`` per row: 4x less memory than
    float32. :func:`encode_rows` and :func:`decode_rows` convert rows to and from float32.
    """
    check_table_dtype(dtype)
    storage = _BFLOAT16_BITS if dtype == "bfloat16" else jnp.dtype(dtype)
    return (jnp.zeros((num_rows, width), storage), jnp.ones((num_rows,), jnp.float32))


def encode_rows(values: CohortArray, dtype) -> tuple[CohortArray, CohortArray]:
    """``[K, P]`` float32 rows as stored in a table of storage ``dtype`` (the table's dtype:
    float32, uint16 bfloat16 bits or int8), and their ``[K]`` scales."""
    dtype = jnp.dtype(dtype)
    ones = jnp.ones(values.shape[:1], jnp.float32)
    if dtype == _BFLOAT16_BITS:
        return jax.lax.bitcast_convert_type(values.astype(jnp.bfloat16), _BFLOAT16_BITS), ones
    if dtype != jnp.int8:
        return values.astype(dtype), ones
    top = jnp.max(jnp.abs(values), axis=-1)
    scale = jnp.where(top > 0, top / 127.0, 1.0)
    quantised = jnp.clip(jnp.round(values / scale[:, None]), -127, 127).astype(jnp.int8)
    return quantised, scale


def decode_rows(stored: CohortArray, scale: CohortArray) -> CohortArray:
    """The float32 values a table's rows stand for."""
    if stored.dtype == _BFLOAT16_BITS:
        return jax.lax.bitcast_convert_type(stored, jnp.bfloat16).astype(jnp.float32)
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
