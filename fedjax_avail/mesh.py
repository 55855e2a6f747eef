"""Devices: the mesh a run is split over, and how each array is placed on it.

A mesh may have a ``"clients"`` axis, over which every client array is split along its client
axis (:func:`client_axis`: data rows, per-client tables, stamps, an availability process's
state), the model and server arrays replicated (XLA's SPMD partitioner then runs the same
program on every device); and a ``"cohort"`` axis, over which each round's cohort training is
split (:func:`fedjax_avail.cohort.map_cohort`; on a CPU, several host devices are several
cores training members in parallel: :func:`cohort_mesh`).

On a CPU every core is used by default: importing the package asks JAX for one CPU device per
core (:func:`use_cpu_cores`), and ``simulate``'s ``mesh="auto"`` splits a run's cohort over
them when that wins (:func:`auto_mesh`).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import jax
import numpy as np

CLIENTS = "clients"  # the mesh axis the client axis is sharded over
COHORT = "cohort"  # the mesh axis each round's cohort training is split over
CPU_DEVICES_ENV = "FEDJAX_AVAIL_CPU_DEVICES"  # CPU devices asked for at import (default: cores)
# "auto" splits the cohort over at most one CPU device per this many members: over 2 devices,
# FedLaAvg of MNIST logistic regression (K of N = 1000, 10 steps of 5) was at most 1.13x
# faster than on one up to K = 10 (K = 2: 24x slower), FedAvg at most 1.6x faster; from K = 16
# both ran 1.5-2.5x faster (benchmarks/cpu_cores.py, the table in docs/guide/performance.md).
AUTO_MEMBERS_PER_DEVICE = 8


def cpu_cores() -> int:
    """The CPU cores this process may use: ``joblib.cpu_count()``, the cores of its CPU
    affinity (``taskset``) within a container's CPU quota (Linux CFS quotas, which
    ``os.sched_getaffinity`` does not see: a container limited to 2 CPUs on a 64-core host has
    2, not 64) and ``LOKY_MAX_CPU_COUNT``."""
    import joblib  # 27 ms at the package's import

    return max(1, int(joblib.cpu_count()))


def use_cpu_cores() -> int | None:
    """Asks JAX for one CPU device per core (``jax_num_cpu_devices``), so that ``simulate`` can
    train a cohort on every core (:func:`auto_mesh`); called when the package is imported.

    XLA:CPU runs a cohort's small batched products on about one core; D CPU devices are D
    cores training members in parallel (MNIST FedAvg at K = 100: 2.5x on 2 cores). It changes
    nothing when JAX's backend has already started (JAX keeps its devices), when the device
    count was chosen already (``jax.config.update("jax_num_cpu_devices", D)`` or
    ``XLA_FLAGS=--xla_force_host_platform_device_count=D``), or on one core; the environment
    variable ``FEDJAX_AVAIL_CPU_DEVICES=D`` chooses D instead of the core count (1: one CPU
    device, as JAX's default; a device count chosen in JAX's own ways wins). It affects the
    CPU backend alone: with a GPU or TPU, JAX's default device and everything run on it are
    unchanged. ``XLA_FLAGS`` set after the import are not seen here: choose the count before
    importing the package (or with ``FEDJAX_AVAIL_CPU_DEVICES``).

    Returns:
      the CPU device count asked for, or None when nothing was changed.

    Raises:
      ValueError: ``FEDJAX_AVAIL_CPU_DEVICES`` is not an integer >= 1.
    """
    text = os.environ.get(CPU_DEVICES_ENV, "").strip()
    devices = cpu_cores()
    if text:
        try:
            devices = int(text)
        except ValueError:
            devices = 0
        if devices < 1:
            raise ValueError(f"{CPU_DEVICES_ENV} must be an integer >= 1, got {text!r}")
    if (jax.config.jax_num_cpu_devices != -1
            or "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", "")
            or (devices == 1 and not text)):
        return None  # chosen already, or one core
    try:  # possible only before JAX has started a backend
        jax.config.update("jax_num_cpu_devices", devices)
    except RuntimeError:
        return None
    return devices


def auto_mesh(cohort: int, several: bool) -> Any:
    """``simulate``'s ``mesh="auto"``: a ``"cohort"`` mesh over this process's CPU devices when
    JAX's default backend is the CPU, the call trains one run (several runs use the cores with
    the ``"loop"`` layout instead: :func:`fedjax_avail.runs.runs_layout`) and its cohort has at
    least ``AUTO_MEMBERS_PER_DEVICE`` members a device (``cohort``: the members a round or an
    update trains, ``algorithm.footprint(N).cohort``); else None (one device).

    ``simulate`` then falls back to one device when the run would not fit in memory with the
    mesh (each CPU device holds its own copy of the data and the client arrays).
    """
    if several or jax.default_backend() != "cpu" or jax.process_count() > 1:
        return None
    devices = jax.local_devices(backend="cpu")
    count = min(len(devices), int(cohort) // AUTO_MEMBERS_PER_DEVICE)
    if count < 2:
        return None
    return jax.sharding.Mesh(np.array(devices[:count]), (COHORT,))


def check_mesh_argument(mesh: Any) -> None:
    """Raises ValueError for a ``mesh`` argument that is a string other than ``"auto"``."""
    if isinstance(mesh, str) and mesh != "auto":
        raise ValueError(f"mesh must be a jax.sharding.Mesh, None (one device) or 'auto', "
                         f"got {mesh!r}")


def cohort_mesh(devices: int) -> Any:
    """A mesh with one ``"cohort"`` axis over the first ``devices`` devices: ``simulate(...,
    mesh=cohort_mesh(2))`` trains each round's K cohort members K / 2 per device.

    On a CPU, importing the package asks JAX for one device per core
    (:func:`use_cpu_cores`); another count must be asked for before any JAX computation:
    ``jax.config.update("jax_num_cpu_devices", 2)``. XLA:CPU runs the
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
