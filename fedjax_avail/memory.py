"""Device memory of a run, predicted by term before anything is allocated, and the guard.

A run holds on the device, for its whole length:

* **data**: every training example once, at its storage dtype (uint8 images stay uint8), plus
  the ``[N]`` int32 offsets and counts; the test set likewise;
* **algorithm state**: server arrays (the model, optimizer state: a few x P) and **per-client
  tables** ``[N, ...]`` (FedLaAvg's and MIFA's ``[N, P]`` latest updates: ``N P 4`` bytes in
  float32, 31.4 GB for N = 10^6 and MNIST logistic regression, P = 7850);
* **availability state**: ``[N]`` thresholds or stamps, or a ``[T, N]`` trace table;

and, while a round runs, the **cohort's updates**: the ``[K, P]`` float32 arrays the round
holds together after training, however the cohort is chunked (its ``Footprint.copies`` of
them: an asynchronous update's results and their start models, 2; FedLaAvg's and MIFA's deltas
and table rows, 4; none for FedAvg, whose round sums the deltas as the members finish:
:func:`fedjax_avail.cohort.map_cohort_sum`); the **cohort working set**: what training
holds beyond those buffers (XLA reuses them): the stack of all K deltas and, for each client
trained at once (``client_chunk`` of them when set, on each of a ``"cohort"`` mesh axis's D
devices, the cohort padded to D shares), three P-sized vectors (local model, its
start, gradient), one batch of B examples as float32 and the model's activations for that batch
(:func:`_layer_outputs`), and an asynchronous update's ``[K, P]`` start models; for FedAvg
instead, a sum a device and, for each client trained at once, its local model and gradient
(its members start from the server's model and add their deltas to the sum as they form
them), the batch, the activations and a CPU convolution's largest windows once more, their
gradient (:func:`_windows_bytes`); and,
when the selection strategy reads clients' full-batch losses or gradients
(:func:`fedjax_avail.local.full_batch`: Power-of-Choice's d candidates each round; DivFL's,
SubTrunc's and UnionFL's pass over all N before round 0, in chunks of ``ALL_CLIENTS_CHUNK``,
and over the cohort after each round), the **full-batch working set** of the largest such
pass: members at once (on each of a ``"cohort"`` mesh axis's D devices, as in training)
x W rows x the bytes of one row
(W = :func:`fedjax_avail.local.block_width`, at most ``FULL_BATCH_BLOCK``, whatever the largest
client), plus the gradients it returns. The persistent terms are exact (the shapes of
``algorithm.init`` and ``availability.init`` under ``jax.eval_shape``); the working sets are
approximations (:func:`full_batch_bytes`).

Under a device mesh every term is a total over the devices, as ``Result.memory["measured"]``
is (over this process's devices: a run over several processes measures its own share): a
device holds a copy of each array (the test set too on a mesh with a ``"clients"`` axis; on
one without, the evaluations run on the first device, which holds its one copy), or its part
of one split over a ``"clients"`` axis; over a ``"cohort"`` axis each device trains its share
of the cohort, and the devices of the other axes each train the whole cohort
(:func:`estimate_memory`'s ``mesh``); there a CPU convolution's windows built a group of images
at a time count once, a group's (:func:`_layer_outputs`). Against XLA:CPU over 2 devices
(``tests/test_sharding.py``) this is within 10% for
Power-of-Choice's and FedLaAvg's rounds on either axis; for LeNet-5's FedAvg round at B = 50
(a member at a time on each device, ``tests/test_conv.py``) 1.07x (2.13x with the whole
batch's windows counted).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from typing import Any, Literal

import jax
import numpy as np
from jax.extend import core as jax_core

from fedjax_avail import _keys
from fedjax_avail import mesh as mesh_lib
from fedjax_avail import runs as runs_lib
from fedjax_avail._checks import check_client_chunk, check_int, check_optional_int
from fedjax_avail.data import FederatedData
from fedjax_avail.local import block_width, flat_size
from fedjax_avail.selection import FullBatchPass
from fedjax_avail.tasks import Task

# A CPU device trains its cohort (its share under a "cohort" mesh) in chunks of at most this
# many bytes of members' working sets (client_chunk="auto"): under a core's L2 cache (2 MiB on
# the machine measured). On 2 cores with AVX-512 (JAX 0.10.2, FedAvg, C = 10, B = 5;
# benchmarks/chunk_budget.py, results/chunk_budget.json), with the cohort over both cores
# (simulate's default), MNIST logistic regression was fastest in chunks of 5-11 members
# (0.7-1.5 MiB) and 1.1-1.6x slower in chunks of 16-56 (2.2-7.6 MiB): K = 100 took 0.66x and
# K = 1000 0.62x the time of the 8 MiB budget before (chunks of 50 and 56); the MLP
# 784-200-200-10 (3.1 MiB a member) one member at a time 0.85x that of two. On one device the
# same choices were no slower (0.78-0.90x, within this machine's noise). LeNet-5's members
# (1.7 MiB) and larger pass the budget alone: one at a time (FedAvg of LeNet-5 on MNIST took
# 0.88x the time of 4 at a time, WKAFL's CNN 1.01x, the same models:
# results/before_after_issue36_chunk_budget_cnns.json).
CPU_CHUNK_BYTES = 3 * 2**20 // 2  # 1.5 MiB
_WORKING_COPIES = 3  # P-sized float32 vectors per member in training: x, x0, grad (+ its delta)
_LAYER_OPS = ("dot_general", "conv_general_dilated", "gather", "scan")  # output activations
_BACKWARD_COPIES = 3  # each activation with gradients: its value, its cotangent, one scratch


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """Predicted device bytes of a run, by term (see the module docstring).

    Attributes:
      terms: term name -> bytes (``data``, ``test_data``, ``server_state``,
        ``per_client_tables``, ``availability_state``, ``cohort_updates``,
        ``cohort_working_set``, ``full_batch_working_set``).
      tables: the per-client arrays of the algorithm state, ``"field [N, ...] dtype" -> bytes``.
    """

    terms: Mapping[str, int]
    tables: Mapping[str, int]

    @property
    def total(self) -> int:
        return int(sum(self.terms.values()))

    def describe(self) -> str:
        """One line per term, in human units."""
        lines = [f"{name}: {format_bytes(size)}" for name, size in self.terms.items() if size]
        lines += [f"  {name}: {format_bytes(size)}" for name, size in self.tables.items()]
        return "\n".join([*lines, f"total: {format_bytes(self.total)}"])


def format_bytes(size: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(size) < 1000 or unit == "TB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1000
    raise AssertionError


def tree_bytes(tree: Any) -> int:
    """Bytes of a pytree of arrays or shapes (``jax.ShapeDtypeStruct``; PRNG keys included)."""
    return int(sum(math.prod(leaf.shape) * leaf.dtype.itemsize
                   for leaf in jax.tree.leaves(tree)))


def _arrays_bytes(arrays: Mapping[str, Any] | None) -> int:
    if arrays is None:
        return 0
    def device_bytes(a: Any) -> int:  # as put on the device: int64 as int32 without x64
        shape, dtype = np.shape(a), getattr(a, "dtype", None) or np.asarray(a).dtype
        return math.prod(shape) * jax.dtypes.canonicalize_dtype(dtype).itemsize

    return int(sum(device_bytes(a) for a in arrays.values()))


def estimate_memory(
    task: Task,
    data: FederatedData,
    algorithm: Any,
    availability: Any = None,
    *,
    test_data: Mapping[str, Any] | FederatedData | None = None,
    client_chunk: int | Literal["auto"] | None = "auto",
    runs: int = 1,
    runs_layout: Literal["vmap", "map", "loop"] = "vmap",
    mesh: Any = None,
    loop_workers: int | None = None,
) -> MemoryEstimate:
    """Predicts the device bytes a :func:`fedjax_avail.simulate` run holds, by term.

    Nothing is allocated or compiled: states are shaped with ``jax.eval_shape``, and the loss
    is traced (``jax.make_jaxpr``) on a batch of B rows (a member's activations) and, when the
    selection makes full-batch passes, on one example.

    Args:
      task, data, algorithm, availability, test_data: as for ``simulate``.
      client_chunk: as for ``simulate``; ``"auto"`` (default) is resolved as there
        (:func:`client_chunks`).
      runs: S, runs in one program (``simulate(seed=[...])``): every state term is S times
        larger (plus the copies the layout makes, below); the data is shared.
      runs_layout: ``simulate``'s layout of those runs (resolved: :func:`fedjax_avail.cohort.
        runs_layout`): ``"vmap"`` trains them at once (the working sets S times larger),
        ``"map"`` one after the other (one run's working sets) holding a second copy of every
        run's state (``lax.map``'s stacked output), ``"loop"``
        :func:`fedjax_avail.runs.loop_workers` at once (their working sets, and one more
        copy of each one's state: the slices being trained).
      mesh: ``simulate``'s device mesh. The terms are totals over its devices (a CPU's
        devices share its memory; :func:`available_bytes` sums accelerators'): each device
        holds a copy of the data and the states, or its part of what is split over a
        ``"clients"`` axis (client tables, per-client data: :func:`device_copies`); a
        ``"cohort"`` axis's D devices each train their share of the cohort (it decides
        ``"auto"``'s chunk: :func:`client_chunks`), and the devices of the other axes each
        train the whole cohort again.
      loop_workers: the runs a ``"loop"`` layout trains at once (default
        :func:`fedjax_avail.runs.loop_workers`; ``simulate`` lowers it until the run fits:
        :func:`fitting_estimate`).

    Returns:
      a :class:`MemoryEstimate`; ``.total`` is the sum, ``.describe()`` a readable breakdown.

    Raises:
      TypeError: ``data`` is not a :class:`fedjax_avail.FederatedData`.
      ValueError: ``runs`` is not an integer >= 1, ``client_chunk`` not None, "auto" or >= 1,
        ``runs_layout`` not one of "vmap", "map", "loop", or ``loop_workers`` not None or an
        integer >= 1.

    Example:
      >>> est = fa.estimate_memory(task, fd, fa.algorithms.FedLaAvg(clients_per_round=100))
      >>> est.terms["per_client_tables"]  # N * P * 4 bytes for the latest-update table
    """
    if not isinstance(data, FederatedData):
        raise TypeError(f"data must be a FederatedData (e.g. FederatedData.from_client_arrays"
                        f"(...)), got {type(data).__name__}")
    check_int("runs", runs)
    if runs_layout not in ("vmap", "map", "loop"):
        raise ValueError(f"runs_layout must be 'vmap', 'map' or 'loop', got {runs_layout!r}")
    # runs whose working sets are live at once: "vmap" batches all, "loop" trains
    # loop_workers of them at once on threads (each with its own chunks: runs_at_once stays 1
    # for them, so every run trains as its separate run does), "map" one
    check_optional_int("loop_workers", loop_workers)
    workers = 1 if runs_layout != "loop" or runs == 1 else min(
        runs, loop_workers or runs_lib.loop_workers(runs))
    at_once = runs if runs_layout == "vmap" else workers
    # extra run states alive: "map" stacks every run's new state beside the old one (lax.map
    # cannot write over its input), "loop" holds the slices of the runs being trained
    run_copies = {"vmap": 0, "map": runs, "loop": workers}[runs_layout] if runs > 1 else 0
    num_clients = data.num_clients
    key, params = _shaped_params(task)
    num_params = flat_size(params)
    # under a mesh every device holds a copy of an array, or its part of one split over the
    # "clients" axis (fedjax_avail.mesh.client_shardings, example_shardings)
    copies, split_copies, clients_axis = device_copies(mesh)
    state = jax.eval_shape(lambda: algorithm.init(params, num_clients))
    tables, server = {}, 0
    for path, leaf in jax.tree_util.tree_leaves_with_path(state):
        size = math.prod(leaf.shape) * np.dtype(leaf.dtype).itemsize
        if mesh_lib.client_axis(path, leaf, num_clients) is not None:
            tables[f"{jax.tree_util.keystr(path)} {list(leaf.shape)} {leaf.dtype}"] = size
        else:
            server += size
    avail = 0 if availability is None else sum(
        tree_bytes(leaf) * (split_copies if mesh_lib.client_axis(
            path, leaf, num_clients, availability=True) is not None else copies)
        for path, leaf in jax.tree_util.tree_leaves_with_path(jax.eval_shape(
            lambda k: availability.init(k, num_clients), key)))
    rows = data.arrays[next(iter(data.arrays))].shape[0]
    data_bytes = _arrays_bytes(data.arrays) * (
        split_copies if rows % clients_axis == 0 else copies) + 8 * num_clients * split_copies
    test = test_data.arrays if isinstance(test_data, FederatedData) else test_data
    train_chunk, full_batch_chunk = client_chunks(
        client_chunk, task, data, algorithm, mesh=mesh,
        runs_at_once=runs if runs_layout == "vmap" else 1)
    footprint = algorithm.footprint(num_clients)
    cohort = footprint.largest
    # Phases one after another, XLA reusing the buffers of one in the next: training (the
    # [K, P] results, the start models an asynchronous update trains from, and the members in
    # flight: under a "cohort" mesh axis, the cohort padded to D shares, each device training
    # its own chunk of its share), then aggregation (the footprint's copies [K, P] arrays)
    devices = cohort_devices(mesh)
    share = -(-cohort // devices)
    in_flight = devices * min(share, train_chunk or share)
    kept = _windows_kept(mesh)
    member = _member_bytes(task, params, data, footprint.batch_size, windows_kept=kept)
    if footprint.copies:  # the [K, P] results, each member's written into them
        training = (1 + footprint.starts) * devices * share * num_params * 4 + in_flight * (
            member - num_params * 4)
    else:  # summed as the members finish: a sum a device, and each member's model and
        # gradient (it starts from the server's model; its delta goes into the sum as it is
        # formed) and, on a CPU, its largest convolution windows once more (their gradient)
        # (a member of a user's algorithm that starts from its own row splits that out too)
        starts_copy = 1 if footprint.starts else 2
        streamed = member - starts_copy * num_params * 4 + _windows_bytes(
            task, params, data, footprint.batch_size, windows_kept=kept)
        training = (devices + footprint.starts * devices * share) * num_params * 4 + (
            in_flight * streamed)
    updates = footprint.copies * cohort * num_params * 4
    working = max(0, training - updates)
    terms = {
        "data": data_bytes,
        # on a mesh without a "clients" axis the evaluations run on the first device alone
        # (fedjax_avail.evaluation.Evaluators), which holds the one copy
        "test_data": _arrays_bytes(test) * (
            copies if mesh_lib.CLIENTS in getattr(mesh, "axis_names", ()) else 1),
        "server_state": (runs + run_copies) * server * copies,
        "per_client_tables": (runs + run_copies) * sum(tables.values()) * split_copies,
        "availability_state": (runs + run_copies) * avail,
        # the cohort's terms again on each device of the other axes (a "clients" axis's
        # devices each train the whole cohort)
        "cohort_updates": at_once * updates * (copies // devices),
        "cohort_working_set": at_once * working * (copies // devices),
        "full_batch_working_set": at_once * (copies // devices) * full_batch_bytes(
            task, data, params, footprint.full_batch, full_batch_chunk, devices),
    }
    return MemoryEstimate(terms, {name: runs * size * split_copies
                                  for name, size in tables.items()})


def fitting_estimate(
    task: Task, data: FederatedData, algorithm: Any, availability: Any = None, *,
    available: int | None,
    test_data: Mapping[str, Any] | FederatedData | None = None,
    client_chunk: int | Literal["auto"] | None = "auto",
    runs: int = 1,
    runs_layout: Literal["vmap", "map", "loop"] = "vmap",
    mesh: Any = None,
) -> tuple[MemoryEstimate, int]:
    """:func:`estimate_memory` for the runs a ``"loop"`` layout trains at once, lowered from
    :func:`fedjax_avail.runs.loop_workers` until the estimate fits in ``available`` bytes
    (or one is left): ``(estimate, loop workers)``; the workers are 1 for the other layouts
    and for one run. ``simulate`` chooses its loop's workers with it and the CLI's
    ``--dry-run`` (:func:`fedjax_avail.experiments.plan`) checks with it, so a dry run refuses
    exactly the runs ``simulate`` refuses.

    Args:
      task, data, algorithm, availability, test_data, client_chunk, runs, runs_layout, mesh:
        as for :func:`estimate_memory` (the layout resolved).
      available: free bytes (:func:`available_bytes`); None: unknown, all workers.
    """
    workers = runs_lib.loop_workers(runs) if runs > 1 and runs_layout == "loop" else 1
    while True:
        estimate = estimate_memory(task, data, algorithm, availability, test_data=test_data,
                                   client_chunk=client_chunk, runs=runs, runs_layout=runs_layout,
                                   mesh=mesh, loop_workers=workers)
        if workers == 1 or available is None or estimate.total <= available:
            return estimate, workers
        workers -= 1  # fewer runs trained at once, before refusing (or trying) the run


def fitting_mesh(
    mesh: Any, task: Task, data: FederatedData, algorithm: Any, availability: Any = None, *,
    several: bool = False, test_data: Mapping[str, Any] | FederatedData | None = None,
    client_chunk: int | Literal["auto"] | None = "auto",
) -> Any:
    """``simulate``'s ``mesh`` resolved: a mesh or None as given; ``"auto"``
    (:func:`fedjax_avail.mesh.auto_mesh`) the cohort over this process's CPU devices, or one
    device (None) when that mesh would not fit in the free memory (each CPU device holds its
    own copy of the data and the client arrays) or does not apply (``several``: the run has a
    runs axis, even of one seed). ``simulate`` and the CLI's ``--dry-run`` resolve it with this,
    so both choose the same devices.

    Raises:
      ValueError: ``mesh`` is a string other than ``"auto"``.
    """
    mesh_lib.check_mesh_argument(mesh)
    if not isinstance(mesh, str):
        return mesh
    candidate = mesh_lib.auto_mesh(algorithm.footprint(data.num_clients).cohort, several)
    if candidate is None:
        return None
    available = available_bytes(mesh=candidate)
    if available is not None and estimate_memory(
            task, data, algorithm, availability, test_data=test_data,
            client_chunk=client_chunk, mesh=candidate).total > available:
        return None
    return candidate


def _shaped_params(task: Task) -> tuple[Any, Any]:
    """The run's parameter key and ``task.init``'s parameters, as shapes (nothing computed)."""
    key = jax.eval_shape(lambda: _keys.run_keys(0).params)
    return key, jax.eval_shape(task.init, key)


def _member_bytes(task: Task, params: Any, data: FederatedData, batch: int, *,
                  windows_kept: bool = True) -> int:
    """Bytes one cohort member's local training holds, its delta included: ``_WORKING_COPIES``
    + 1 P-sized float32 vectors, one batch of B examples as float32 and the model's activations
    for it (:func:`_layer_outputs` of the loss traced on B rows, as training calls it; once:
    XLA keeps each layer's output for the backward pass and frees most cotangents as it goes).

    Against XLA:CPU's working set of one round (JAX 0.10.2; K = 10 or 40, B = 5; the cohort
    terms of :func:`estimate_memory`): FedAvg 0.94-1.03x for LeNet-5, 0.96-1.28x for WKAFL's
    CNN and 0.98x for an MLP in chunks of 1; FedLaAvg, MIFA (both starts), FedBuff, K-async
    SGD and WKAFL 0.96-1.01x (MLP, chunks of 1); in chunks of 7 (K = 40, the last chunk
    overlapping), FedBuff 1.01-1.07x, FedLaAvg 1.00x, MIFA 0.99x (MLP); above
    in one ``vmap`` (1.3-2.0x for logistic regression and the MLP, whose members XLA trains
    in fewer copies). FedAvg's members, summed as they finish, are counted apart
    (:func:`estimate_memory`): its cohort terms against XLA:CPU's working set on one device
    (C = 2, B = 5): 0.98-0.99x for LeNet-5 (K = 10 in one ``vmap`` and in chunks of 1; K = 40
    in chunks of 4), 1.00x and 1.11x for the MLP in chunks of 1 and 7 (K = 40), 1.13x in one
    ``vmap``, 0.99-1.00x for logistic regression (K = 1000 in chunks of 59, K = 100 in one
    ``vmap``); with C = 1, whose single step XLA fuses, 1.24-1.51x (the MLP)."""
    example = sum(math.prod(np.shape(a)[1:]) for a in data.arrays.values())
    activations = _layer_outputs(_loss_jaxpr(task, params, data, batch), True,
                                 windows_kept=windows_kept)
    return ((_WORKING_COPIES + 1) * flat_size(params) + batch * example + activations) * 4


def _windows_bytes(task: Task, params: Any, data: FederatedData, batch: int, *,
                   windows_kept: bool) -> int:
    """Float32 bytes of the largest CPU convolution windows (a concatenate of rank >= 3:
    :func:`fedjax_avail.tasks.conv_general_dilated`) in the loss on B rows; 0 without any.
    The backward pass holds their gradient while it adds it back onto the layer's input: a
    group's where a batch is convolved a group of images at a time (``lax.map``) under a
    mesh of several devices, the whole batch's on one device (``windows_kept``: its gradient
    is one product's: :func:`_windows_kept`). Counted for FedAvg's streamed members; the
    other algorithms' members are counted with their start and delta (4 P), calibrated on
    MLPs and LeNet-5's (:func:`_member_bytes`). As in :func:`_layer_outputs`, only a scan
    inside a ``custom_vjp`` (the grouped convolution's loop) is taken for a batch's groups; a
    model's own scan differentiates one step's windows at a time."""
    def largest(jaxpr: Any, grouped: bool = False) -> int:
        sizes = [math.prod(eqn.outvars[0].aval.shape) for eqn in jaxpr.eqns
                 if eqn.primitive.name == "concatenate" and eqn.outvars[0].aval.ndim >= 3]
        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            inside = grouped or "custom_vjp" in name
            loops = eqn.params.get("length", 1) if windows_kept and grouped and name == "scan" \
                else 1
            sizes += [loops * largest(sub, inside) for sub in _sub_jaxprs(eqn.params.values())]
        return max(sizes, default=0)

    return 4 * largest(_loss_jaxpr(task, params, data, batch))


def _loss_jaxpr(task: Task, params: Any, data: FederatedData, batch: int) -> Any:
    """The jaxpr of ``task.loss`` on a batch of B rows of ``data``'s arrays (shapes only)."""
    rows = {name: jax.ShapeDtypeStruct((batch, *np.shape(a)[1:]), np.dtype(a.dtype))
            for name, a in data.arrays.items()}
    return jax.make_jaxpr(task.loss)(params, rows).jaxpr


def client_chunks(
    client_chunk: int | Literal["auto"] | None, task: Task, data: FederatedData, algorithm: Any,
    backend: str | None = None, *, runs_at_once: int = 1, mesh: Any = None,
) -> tuple[int | None, int | None]:
    """``(train, full_batch)``: the cohort members trained at once by local SGD or gradients,
    and the members a full-batch pass holds at once (:func:`fedjax_avail.local.full_batch`);
    None: all at once (one ``vmap``).

    An int or None is the user's memory bound and sets both. ``"auto"`` trains the cohort in
    one ``vmap`` on accelerators; on a CPU (``backend``, default the platform of ``mesh``'s
    devices, else JAX's), when the members' working sets (:func:`_member_bytes`, times
    ``runs_at_once``: runs batched by ``runs_layout="vmap"``) pass ``CPU_CHUNK_BYTES``, in the
    fewest chunks under it, as even as they come (MNIST logistic regression, 141 KB a member,
    at most 11 a chunk: K = 100 in 10 chunks of 10; K = 1000: 91 of 11, the last overlapping
    the one before by 1: :func:`fedjax_avail.cohort.map_cohort`). Under a mesh with a
    ``"cohort"`` axis of D devices, each device trains its ceil(K / D) members in its own
    chunks, so the rule applies to that share (K = 1000 over 2 CPU devices: 46 chunks of 11 on
    each). XLA:CPU runs a ``vmap`` of many small products far slower per member once their
    working sets leave the cache (``CPU_CHUNK_BYTES``; ``benchmarks/chunk_budget.py``;
    ``benchmarks/cohort_chunks.py``). Members compute the same arithmetic in any
    chunk, so results match up to float reordering. ``"auto"`` leaves the full-batch passes
    of a selection that makes them (DivFL, SubTrunc, UnionFL, Power-of-Choice) unbounded
    (None), as before; without such passes the second value repeats the first.

    Raises:
      ValueError: ``client_chunk`` is not None, "auto" or an integer >= 1.
    """
    check_client_chunk(client_chunk)
    if client_chunk != "auto":
        return client_chunk, client_chunk
    if (backend or _platform(mesh)) != "cpu":
        return None, None
    footprint = algorithm.footprint(data.num_clients)
    member = _member_bytes(task, _shaped_params(task)[1], data, footprint.batch_size,
                           windows_kept=_windows_kept(mesh)) * runs_at_once
    most = max(1, CPU_CHUNK_BYTES // member)
    devices = cohort_devices(mesh)
    if most >= -(-footprint.largest // devices):
        return None, None
    # a round's K (a device's share of it) in the fewest even chunks of at most `most` (the
    # split block_width makes of a client's rows); MIFA's authors-code fill round of all N
    # reuses the chunk
    share = -(-footprint.cohort // devices)
    train = block_width(share, most) if share > most else most
    return train, None if footprint.full_batch else train


def full_batch_passes(passes: tuple[FullBatchPass, ...], client_chunk: int | None,
                      devices: int = 1) -> list[tuple[int, int, bool]]:
    """A selection's full-batch passes (:meth:`fedjax_avail.selection.Selection.
    full_batch_passes`: Power-of-Choice's d candidates' losses each round; DivFL's, SubTrunc's
    and UnionFL's gradients of all N before round 0 and of the K members after each round) as
    ``(members at once, result rows, with_grads)``, result rows the ``[rows, P]`` gradients a
    pass adds to a round's working set.

    Under a ``"cohort"`` mesh axis of ``devices`` D, a pass's members are padded to D shares
    and each device computes its own share in its own chunks
    (:func:`fedjax_avail.cohort.map_cohort`): D chunks at once, totals over the devices.
    """
    def at_once(members, default):
        share = -(-members // devices)
        return devices * min(share, client_chunk or default)

    return [(at_once(p.members, p.at_once), -(-p.result_rows // devices) * devices, p.grads)
            for p in passes]


def full_batch_bytes(
    task: Task, data: FederatedData, params: Any, passes: tuple[FullBatchPass, ...],
    client_chunk: int | None, devices: int = 1,
) -> int:
    """Peak bytes of the largest of a selection's full-batch ``passes`` (0 if it makes none),
    in all over a ``"cohort"`` mesh axis's ``devices`` (:func:`full_batch_passes`).

    A pass holds, for each of its members at once, W rows (:func:`fedjax_avail.local.block_width`)
    of ``row`` bytes each and its ``[P]`` float32 gradient (two with several blocks: the block's
    and the running sum), plus its result rows (:func:`full_batch_passes`). One row: every input
    as float32 (twice with gradients when stored in another dtype: the rows read and the
    converted copy the backward pass keeps) and the model's activations for one example
    (:func:`_layer_outputs`; three times with gradients: value, cotangent, scratch). No
    ``[members, W, P]`` per-example gradients: XLA sums the rows inside the weight-gradient
    matmul. Against XLA:CPU's ``memory_analysis`` of a pass (8 members x 1,000 rows) this is
    within 10% for logistic regression, 1.2-1.8x above for an MLP, 1.6-2.2x above for the LSTM,
    and 1.2x above for LeNet-5's losses. LeNet-5's gradients were 3x below it with XLA's own
    convolutions and pooling (whose backward pass keeps index arrays); with the CPU ones
    (``fa.tasks.conv_general_dilated``'s windows, counted here, and ``fa.tasks.max_pool``) a
    gradient pass of 8 members x 1,000 rows measured 634 MB (667 MB with ``nn.max_pool``)
    against this estimate's 999 MB.
    """
    passes = full_batch_passes(passes, client_chunk, devices)
    if not passes:
        return 0
    num_params = flat_size(params)
    largest = data.max_count or int(np.max(np.asarray(data.counts)))
    width = block_width(largest)
    one = {name: jax.ShapeDtypeStruct((1, *np.shape(a)[1:]), np.dtype(a.dtype))
           for name, a in data.arrays.items()}
    jaxpr = jax.make_jaxpr(task.loss)(params, one).jaxpr
    sums = 1 if width == largest else 2  # in blocks: the block's gradient and the running sum
    peak = 0
    for at_once, result_rows, grads in passes:
        inputs = sum(4 * math.prod(a.shape) * (2 if grads and a.dtype != np.float32 else 1)
                     for a in one.values())
        row = inputs + 4 * _layer_outputs(jaxpr, grads) * (_BACKWARD_COPIES if grads else 1)
        vectors = (sums * at_once + result_rows) * num_params * 4 if grads else 0
        peak = max(peak, at_once * width * row + vectors)
    return int(peak)


def _layer_outputs(jaxpr: Any, every_step: bool, *, windows_kept: bool = True) -> int:
    """Elements of the activations of ``jaxpr``: the outputs of its matmuls, convolutions (and
    the windows of a CPU convolution, ``_LAYER_OPS``), gathers (embedding lookups) and scans (a
    recurrent layer's outputs), sub-jaxprs too; a
    ``scan`` body's once per step if ``every_step`` (what the gradient keeps), else once. Not
    ``windows_kept`` (a program under a mesh of several devices, whose grouped CPU convolution
    builds each group's windows again in the backward pass: :mod:`fedjax_avail.tasks._conv`),
    the windows in a ``scan`` body inside a ``custom_vjp`` (the grouped convolution's loop over
    its groups) once: one group's at a time; a scan of the model's own keeps every step's."""
    return sum(_outputs_and_windows(jaxpr, every_step, windows_kept))


def _outputs_and_windows(jaxpr: Any, every_step: bool, windows_kept: bool,
                         grouped: bool = False) -> tuple[int, int]:
    """:func:`_layer_outputs`'s count as ``(layer outputs, convolution windows)``; ``grouped``:
    ``jaxpr`` is inside a ``custom_vjp`` call."""
    outputs = windows = 0
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        size = sum(math.prod(v.aval.shape) for v in eqn.outvars)
        # a concatenate of rank >= 3 is a CPU convolution's windows (fedjax_avail.tasks.
        # conv_general_dilated); an LSTM's concatenates are of rank 1 and 2
        if name == "concatenate" and eqn.outvars[0].aval.ndim >= 3:
            windows += size
        elif name in _LAYER_OPS:
            outputs += size
        steps = eqn.params.get("length", 1) if every_step and name == "scan" else 1
        inside = grouped or "custom_vjp" in name
        for sub in _sub_jaxprs(eqn.params.values()):
            sub_outputs, sub_windows = _outputs_and_windows(sub, every_step, windows_kept,
                                                            inside)
            outputs += steps * sub_outputs
            windows += (1 if inside and not windows_kept else steps) * sub_windows
    return outputs, windows


def _sub_jaxprs(values: Any) -> list[Any]:
    """The jaxprs among an equation's parameter ``values`` (a ``cond``'s branches are a tuple).
    Newer JAX has ``jax.extend.core.jaxprs_in_params``; 0.7.1, the floor, does not."""
    found = []
    for value in values:
        if isinstance(value, jax_core.ClosedJaxpr):
            found.append(value.jaxpr)
        elif isinstance(value, jax_core.Jaxpr):
            found.append(value)
        elif isinstance(value, (tuple, list)):
            found.extend(_sub_jaxprs(value))
    return found


def _platform(mesh: Any) -> str:
    """The platform of ``mesh``'s devices ("cpu", "gpu", "tpu"); JAX's default without one."""
    if mesh is None or isinstance(mesh, jax.sharding.AbstractMesh):
        return jax.default_backend()
    return np.ravel(mesh.devices)[0].platform


def device_copies(mesh: Any) -> tuple[int, int, int]:
    """``(copies, split copies, C)``: the copies ``mesh``'s devices hold of a replicated array
    (one each) and of one split over its ``"clients"`` axis of C devices (one per device of
    the other axes); ``(1, 1, 1)`` without a mesh."""
    if mesh is None:
        return 1, 1, 1
    shape = dict(mesh.shape)
    devices, clients = math.prod(shape.values()), shape.get(mesh_lib.CLIENTS, 1)
    return devices, devices // clients, clients


def _windows_kept(mesh: Any) -> bool:
    """Whether a grouped CPU convolution's gradient keeps the whole batch's windows: on one
    device; under ``mesh`` of several devices its backward pass builds each group's again
    (:mod:`fedjax_avail.tasks._conv`, whose test of it this mirrors)."""
    return mesh is None or math.prod(dict(mesh.shape).values()) == 1


def cohort_devices(mesh: Any) -> int:
    """D, the devices a round's cohort is split over: the size of ``mesh``'s ``"cohort"`` axis
    (:func:`fedjax_avail.cohort.map_cohort`), 1 without one."""
    names = getattr(mesh, "axis_names", ())
    return int(mesh.shape[mesh_lib.COHORT]) if mesh_lib.COHORT in names else 1


def available_bytes(device: jax.Device | None = None, mesh: Any = None) -> int | None:
    """Free memory of ``device`` (default: the first device), or None if it cannot be told;
    with a ``mesh``, of its devices together (as :func:`estimate_memory` totals them).

    Accelerators report it through ``memory_stats()``; for the CPU it is the host's available
    memory (``MemAvailable`` of ``/proc/meminfo``, else free physical pages), which a CPU
    mesh's devices share. A mesh over several processes: this process's devices, scaled to
    the whole mesh (every process's devices taken to have as much free: right for one
    process a host, P times too much for P processes sharing a CPU host); an abstract mesh
    (no devices): the host's memory when JAX's default backend is the CPU, else None.
    """
    if mesh is not None:
        if isinstance(mesh, jax.sharding.AbstractMesh):
            return available_bytes() if _platform(mesh) == "cpu" else None
        local = list(mesh.local_devices)
        if not local:
            return None
        if local[0].platform == "cpu":
            free = [available_bytes(local[0])]
        else:
            free = [available_bytes(d) for d in local]
        if None in free:
            return None
        return sum(free) * mesh.devices.size // len(local)
    device = device or jax.devices()[0]
    try:
        stats = device.memory_stats()
    except Exception:  # some backends do not implement it
        stats = None
    if stats and "bytes_limit" in stats:
        return int(stats["bytes_limit"] - stats.get("bytes_in_use", 0))
    if device.platform != "cpu":
        return None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_fits(estimate: MemoryEstimate, available: int | None) -> None:
    """Raises MemoryError with the estimate and what to change when the run cannot fit."""
    if available is None or estimate.total <= available:
        return
    advice = []
    if estimate.terms["per_client_tables"] > available / 4:
        advice.append("fewer clients or a smaller model (the per-client tables are N x P)")
    if estimate.terms["cohort_updates"] > available / 4:
        advice.append("fewer clients per round (FedBuff: buffer_size) or a smaller model (the "
                      "cohort's updates are K x P)")
    if estimate.terms["cohort_working_set"] > available / 4:
        advice.append("client_chunk=... to train the cohort in sequential chunks (one that "
                      "divides K, or each device's share of K, trains no member twice)")
    elif estimate.terms.get("full_batch_working_set", 0) > available / 4:
        advice.append("client_chunk=... to hold fewer clients' full batches at once")
    if estimate.terms["data"] > available / 4:
        advice.append("fewer examples, or images kept as uint8")
    advice.append("check_memory=False to try anyway")
    raise MemoryError(
        f"this run needs about {format_bytes(estimate.total)} of device memory but only "
        f"{format_bytes(available)} are available:\n{estimate.describe()}\nTry: "
        + "; ".join(advice)
    )
