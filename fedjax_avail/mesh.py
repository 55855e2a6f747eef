"""Devices: the mesh a run is split over, and how each array is placed on it.

A mesh may have a ``"clients"`` axis, over which every client array is split along its client
axis (:func:`client_axis`: data rows, per-client tables, stamps, an availability process's
state), the model and server arrays replicated (XLA's SPMD partitioner then runs the same
program on every device); and a ``"cohort"`` axis, over which each round's cohort training is
split (:func:`fedjax_avail.cohort.map_cohort`; on a CPU, several host devices are several
cores training members in parallel: :func:`cohort_mesh`).
"""

from __future__ import annotations

import contextlib
from typing import Any

import jax
import numpy as np

CLIENTS = "clients"  # the mesh axis the client axis is sharded over
COHORT = "cohort"  # the mesh axis each round's cohort training is split over


def cohort_mesh(devices: int) -> Any:
    """A mesh with one ``"cohort"`` axis over the first ``devices`` devices: ``simulate(...,
    mesh=cohort_mesh(2))`` trains each round's K cohort members K / 2 per device.

    On a CPU, ask JAX for that many devices first (one per core is the useful number), before
    any JAX computation: ``jax.config.update("jax_num_cpu_devices", 2)``. XLA:CPU runs the
    cohort's small batched matrix products on about one core, so this is how a multi-core CPU
    is used (measured: ``docs/guide/performance.md``, the devices table).

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


def mesh_context(mesh: Any) -> Any:
    """Tracing under ``mesh``, so that :func:`fedjax_avail.cohort.map_cohort` splits the cohort
    over its ``"cohort"`` axis (no mesh: nothing changes)."""
    return jax.set_mesh(mesh) if mesh is not None else contextlib.nullcontext()


def partitions(mesh: Any) -> int:
    """This process's devices that each run a partition of a program compiled for ``mesh``
    (XLA's ``memory_analysis`` describes one): 1 without a mesh."""
    return 1 if mesh is None else len(mesh.local_devices)
