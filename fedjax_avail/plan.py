"""Everything :func:`fedjax_avail.simulate` decides before its loop: the plan of a run.

In order, before anything is compiled: every argument and the data are checked
(:mod:`fedjax_avail.inputs`); the runs of the call are aligned on a runs axis and its layout
chosen (:mod:`fedjax_avail.runs`); the cohort's chunks are sized (:func:`fedjax_avail.memory.
client_chunks`); the device memory is predicted and a run that cannot fit refused
(:mod:`fedjax_avail.memory`). Then the state is built, each run's as a single run's (under a
mesh, the algorithm states on their devices), and placed there with the data
(:mod:`fedjax_avail.mesh`). The run's fingerprint for its
checkpoints (:func:`fedjax_avail.checkpoint.run_settings`) hashes the data, so it is taken only
when a checkpoint asks for it (:attr:`Plan.fingerprint`): for pfl's CIFAR-10 shape (614 MB of
images) it took 0.73 s, which every ``simulate`` call paid before.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from fedjax_avail import _keys, _provenance, inputs, memory
from fedjax_avail import mesh as mesh_lib
from fedjax_avail import runs as runs_lib
from fedjax_avail.checkpoint import run_settings
from fedjax_avail.data import FederatedData
from fedjax_avail.tasks import Task
from fedjax_avail.timeline import Timeline

HEALTHY = -1  # the carry's health flag: the first round whose global model was not finite


class Placement(NamedTuple):
    """The data on the devices and how the carry and the data are split (None without a
    mesh): what the compiled programs are built for."""

    data: FederatedData
    carry_shardings: Any
    data_shardings: Any


@dataclasses.dataclass
class Plan:
    """A run as :func:`fedjax_avail.simulate` set it up, ready for its loop.

    Attributes:
      task: the task.
      runs: the runs of the call (:class:`fedjax_avail.runs.Runs`).
      rounds: R.
      layout: the runs axis's layout (``"vmap"``, ``"map"``, ``"loop"``).
      workers: the runs a ``"loop"`` layout trains at once.
      hyper: the hyperparameter values that differ between the runs, ``{field: [S]}``.
      chunks: ``(train, full_batch)`` members at once (:func:`fedjax_avail.memory.
        client_chunks`).
      keys: the runs' random keys (a leading ``[S]`` axis with several runs).
      carry: the initial scan carry ``(algorithm state, availability cursor, health)``, placed.
      placement: the data on the devices and the shardings.
      mesh: the device mesh, or None.
      slot_length: L, the virtual time of one availability slot.
      max_virtual_time: the budget, or None.
      estimate: the predicted device memory (:class:`fedjax_avail.MemoryEstimate`).
      fingerprint: takes the run's fingerprint for its checkpoints (``{setting: hash}``).
    """

    task: Task
    runs: runs_lib.Runs
    rounds: int
    layout: str
    workers: int
    hyper: dict[str, jax.Array]
    chunks: tuple[int | None, int | None]
    keys: Any
    carry: Any
    placement: Placement
    mesh: Mesh | None
    slot_length: float
    max_virtual_time: float | None
    estimate: memory.MemoryEstimate
    fingerprint: Callable[[], dict[str, str]]

    @property
    def algorithm(self) -> Any:
        """The algorithm's code (the runs' values may differ: ``hyper``)."""
        return self.runs.algorithms[0]


def make_plan(task: Task, data: FederatedData, algorithm: Any, availability: Any, rounds: int,
              seed: Any, evaluation: Any, *, client_chunk: Any, mesh: Mesh | str | None,
              runs_layout: str, slot_length: float, max_virtual_time: float | None,
              check_memory: bool) -> Plan:
    """The plan of a ``simulate`` call (module docstring); ``evaluation`` its
    :class:`fedjax_avail.callbacks.Evaluation`, checked against the task here.

    Raises:
      ValueError / TypeError: a bad argument or bad data, naming it.
      MemoryError: the run cannot fit in device memory.
    """
    runs_lib.runs_layout(runs_layout)  # its name, checked first
    mesh_lib.check_mesh_argument(mesh)
    runs = runs_lib.runs_of(seed, algorithm, availability)
    # "auto" gives several runs no mesh (they use the cores with the "loop" layout)
    layout = runs_lib.runs_layout(
        runs_layout, mesh if runs.several and not isinstance(mesh, str) else None)
    inputs.check_simulate_args(task, data, runs.algorithms[0], runs.processes[0], rounds,
                               runs.seeds, client_chunk)
    evaluation.check(task, data)
    hyper = _swept_values(runs, data.num_clients)
    algorithm = runs.algorithms[0]
    # "auto" is recorded as asked (not as resolved): a resume where free memory or the cores
    # differ may choose other devices; the checkpoint restores onto any placement
    asked = "auto" if isinstance(mesh, str) else None
    mesh = memory.fitting_mesh(mesh, task, data, algorithm, runs.processes[0],
                               several=runs.several, test_data=evaluation.test_arrays,
                               client_chunk=client_chunk)
    chunks = memory.client_chunks(client_chunk, task, data, algorithm, mesh=mesh,
                                  runs_at_once=len(runs.seeds) if layout == "vmap" else 1)
    loop = runs.several and layout == "loop"
    available = memory.available_bytes(mesh=mesh) if check_memory or loop else None
    estimate, workers = memory.fitting_estimate(
        task, data, algorithm, runs.processes[0], available=available, runs=len(runs.seeds),
        runs_layout=layout, test_data=evaluation.test_arrays, client_chunk=client_chunk,
        mesh=mesh)
    if check_memory:
        memory.check_fits(estimate, available)
    carry, keys = _initial_carry(task, data.num_clients, runs, mesh)
    fingerprint = functools.partial(
        run_settings, algorithm=runs.algorithms if runs.several else algorithm,
        availability=runs.processes if runs.several else runs.processes[0], task=task,
        seed=runs.seeds if runs.several else runs.seeds[0],
        data=(data.arrays, data.counts), **evaluation.settings(),
        client_chunk=chunks[0] if chunks[0] == chunks[1] else list(chunks),
        mesh=asked or (None if mesh is None else dict(mesh.shape)), slot_length=slot_length,
        max_virtual_time=max_virtual_time,
        **({"runs_layout": layout} if runs.several else {}),
        model=jax.eval_shape(lambda params: params, carry[0].params), **_environment())
    carry, placement = _place(carry, data, mesh, runs.several)
    return Plan(task, runs, rounds, layout, workers, hyper, chunks, keys, carry, placement,
                mesh, slot_length, max_virtual_time, estimate, fingerprint)


def _environment() -> dict[str, Any]:
    """What outside the arguments can change a result: the simulator's own code (its version
    and the digest of its source as loaded, ``_provenance.code``), the JAX version, the backend
    and the JAX flags that change random numbers or arithmetic."""
    names = ("jax_default_prng_impl", "jax_threefry_partitionable", "jax_enable_x64",
             "jax_default_matmul_precision")
    code = _provenance.code()
    return {"fedjax_avail_version": code["fedjax_avail_version"],
            "fedjax_avail_source": code["fedjax_avail_source"],
            "jax_version": jax.__version__, "backend": jax.default_backend(),
            "jax_config": {name: getattr(jax.config, name, None) for name in names}}


def _swept_values(runs: runs_lib.Runs, num_clients: int) -> dict[str, jax.Array]:
    """The hyperparameter values that differ between the runs (``[S]`` each), after checking
    every run's algorithm and process (:mod:`fedjax_avail.runs`)."""
    if not runs.several:
        return {}
    for i, other in enumerate(runs.algorithms[1:], 1):
        inputs.check_algorithm(other, num_clients, f"algorithm[{i}]")
    for i, other in enumerate(runs.processes[1:], 1):
        inputs.check_availability(other, f"availability[{i}]")
    hyper = runs_lib.swept_values(runs.algorithms)
    runs_lib.check_processes(runs.processes)
    return {name: jnp.asarray(values) for name, values in hyper.items()}


def _initial_carry(task: Task, num_clients: int, runs: runs_lib.Runs,
                   mesh: Mesh | None) -> tuple[Any, Any]:
    """The scan carry and the random keys, each run's built as a single run's, then stacked on
    a leading runs axis when ``runs.several``.

    Under a mesh the algorithm states are built where they will live, by one compiled program
    with the carry's shardings: a state built on one CPU device and placed copies it to each
    other device (FedLaAvg's [N, P] table at N = 10^5, 3.1 GB, on the 2-core machine measured:
    its copy, paid in the first rounds, made 100 rounds' time 37.3 ms a round against 6.96 ms,
    and the whole call 8.59 s against 6.30 s built in place, median of 3:
    ``benchmarks/results/before_after_issue36_state_built_in_place.json``)."""
    def one(i, seed, process):
        keys = _keys.run_keys(seed)
        state = inputs.process_state(process, keys.availability_init, num_clients,
                                     f"availability[{i}]" if runs.several else "availability")
        cursor = Timeline.start(state, num_clients)
        return task.init(keys.params), (cursor, jnp.int32(HEALTHY)), keys

    built = [one(i, seed, process) for i, (seed, process)
             in enumerate(zip(runs.seeds, runs.processes, strict=True))]
    params, rest, keys = zip(*built, strict=True)

    def stacked(trees: Any) -> Any:
        return jax.tree.map(lambda *leaves: jnp.stack(leaves), *trees) if runs.several \
            else trees[0]

    def algorithm_states(params: Any) -> Any:
        return stacked([alg.init(p, num_clients) for alg, p in zip(runs.algorithms, params,
                                                                     strict=True)])

    if mesh is None:
        states = algorithm_states(params)
    else:
        shardings = mesh_lib.client_shardings(jax.eval_shape(algorithm_states, params),
                                              num_clients, mesh, int(runs.several))
        states = jax.jit(algorithm_states, out_shardings=shardings)(params)
    return (states, *stacked(rest)), stacked(keys)


def _place(carry: Any, data: FederatedData, mesh: Mesh | None, several: bool
           ) -> tuple[Any, Placement]:
    """The carry and the data on the devices: split over a mesh's ``"clients"`` axis
    (:func:`fedjax_avail.mesh.client_shardings`), else on the default device. The caller
    drops its own carry: the placed one replaces it (never two states at once)."""
    if mesh is None:
        return carry, Placement(jax.device_put(data), None, None)
    n, axis = data.num_clients, int(several)
    state, cursor, health = carry  # the availability cursor's state may be a [T, N] trace
    carry_shardings = (mesh_lib.client_shardings(state, n, mesh, axis),
                       mesh_lib.client_shardings(cursor, n, mesh, axis, availability=True),
                       mesh_lib.client_shardings(health, n, mesh, axis))
    data_shardings = data.replace(
        arrays=mesh_lib.example_shardings(data.arrays, mesh),
        offsets=mesh_lib.client_shardings(data.offsets, n, mesh),
        counts=mesh_lib.client_shardings(data.counts, n, mesh))
    return (jax.device_put(carry, carry_shardings),
            Placement(jax.device_put(data, data_shardings), carry_shardings, data_shardings))
