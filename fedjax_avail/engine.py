"""The engine: builds the state, then a short loop: compile a chunk of rounds, run it, hand it
to the callbacks.

One round is a pure function ``(algorithm state, availability state, health) -> (states,
metrics)``; rounds ``[a, b)`` run as one ``jit``-compiled ``lax.scan`` whose state buffers are
donated, so they are updated in place (:class:`RoundChunks`). Between chunks (every
``eval_every`` rounds, and at checkpoints) the host evaluates the global model
(:class:`fedjax_avail.evaluation.RunEvaluation`) and calls the callbacks
(:mod:`fedjax_avail.callbacks`): Ctrl-C, memory measurement, the progress display, the user's
own, the divergence guard and checkpointing, in that order. Nothing else crosses to the host.

Before anything is compiled or allocated, every input is checked (``inputs.py``) and the run's
device memory is predicted (``memory.py``). Every round checks that the global model is finite
(a flag carried in the scan), so a diverging run stops at the end of the chunk in which it
diverged, naming the round.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import os
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from fedjax_avail import _keys, _provenance, inputs, memory
from fedjax_avail import cohort as cohort_lib
from fedjax_avail import runs as runs_lib
from fedjax_avail._checks import Annotated, Count, NonNegative, Positive, Range, Seed, checked
from fedjax_avail._host import to_host
from fedjax_avail._io import check_writable_dir
from fedjax_avail._lock import DirectoryLock
from fedjax_avail.algorithms import Algorithm, RoundInput
from fedjax_avail.availability import AvailabilityProcess, reports_of
from fedjax_avail.availability._timeline import Timeline
from fedjax_avail.callbacks import (
    Callback,
    Checkpointing,
    DivergenceGuard,
    MeasureHeld,
    ProgressDisplay,
    Run,
    StallGuard,
    StopOnCtrlC,
    TimeBudget,
)
from fedjax_avail.callbacks._callback import dispatch, run_end
from fedjax_avail.checkpoint import KEEP, run_settings
from fedjax_avail.data import FederatedData
from fedjax_avail.evaluation import RunEvaluation
from fedjax_avail.history import IN_BUDGET
from fedjax_avail.local import Problem
from fedjax_avail.results import DivergenceError, Interrupted, Result
from fedjax_avail.tasks import Task

__all__ = ["DivergenceError", "Interrupted", "Result", "simulate"]

_HEALTHY = -1  # the health flag: the first round whose global model was not finite, else -1


def _finite(state) -> jax.Array:
    """Whether the model, the optimizer state and the vector server arrays are finite.

    Tables (``[N, P]`` latest updates, an ``[H, P]`` model history) are left out: checking them
    every round would cost more than the round; their running means are vectors and are checked.
    """
    extra = state._replace(params=None, **({"opt_state": None}
                                            if "opt_state" in state._fields else {}))
    leaves = jax.tree.leaves((state.params, getattr(state, "opt_state", None))) + [
        leaf for leaf in jax.tree.leaves(extra) if jnp.ndim(leaf) <= 1]
    checks = [jnp.all(jnp.isfinite(leaf)) for leaf in leaves
              if jnp.issubdtype(jnp.result_type(leaf), jnp.inexact)]
    return jnp.all(jnp.stack(checks)) if checks else jnp.bool_(True)


def _mesh_context(mesh: Any):
    """Tracing under ``mesh``, so that :func:`fedjax_avail.cohort.map_cohort` splits the cohort
    over its ``"cohort"`` axis (no mesh: nothing changes)."""
    return jax.set_mesh(mesh) if mesh is not None else contextlib.nullcontext()


# XLA:CPU hands batched dots to YNNPACK; with two batch dimensions (runs x cohort: several
# seeds in one program) its kernel was measured 20x slower per run than with one (FedAvg on
# MNIST, K = 100, C = 1: 58 ms a round for 8 seeds against 2.5 ms for one; benchmarks/README.md,
# run_axis). Without that fusion XLA's own dot emitter scales linearly in the runs.
_CPU_RUNS_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": ""}


def _compile(lowered: Any, batched_runs: bool) -> Any:
    """``lowered.compile()``; for vmapped runs on a CPU without the YNNPACK dot fusion, where
    this XLA has the option (else the default compile)."""
    if batched_runs and jax.default_backend() == "cpu":
        try:
            return lowered.compile(compiler_options=_CPU_RUNS_OPTIONS)
        except Exception:  # an XLA without the option: its default is the only choice
            pass
    return lowered.compile()


def _mesh_layout(mesh: Any) -> dict[str, int] | None:
    """A mesh as its axes and sizes: what can change a result (not which devices)."""
    return None if mesh is None else dict(mesh.shape)


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


def _boundaries(done: int, rounds: int, every: tuple[int, ...]) -> list[int]:
    """Round counts at which chunks end: multiples of each of ``every``, and ``rounds``."""
    ends = {rounds}
    for step in every:
        ends.update(range((done // step + 1) * step, rounds, step))
    return sorted(e for e in ends if e > done)


def _one_run_per_checkpoint_dir(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (``simulate``) with its ``checkpoint_dir`` checked (a writable directory) and
    locked for the run (:class:`DirectoryLock`; the first process of a multi-process run holds
    it), so a second run on the directory refuses at once."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("checkpoint_dir") is None:
            return fn(*args, **kwargs)
        kwargs["checkpoint_dir"] = check_writable_dir(kwargs["checkpoint_dir"], "checkpoint_dir")
        lock = (DirectoryLock(kwargs["checkpoint_dir"], "checkpoint_dir")
                if jax.process_index() == 0 else contextlib.nullcontext())
        with lock:
            return fn(*args, **kwargs)

    return wrapper


class Runs(NamedTuple):
    """The runs of one call: one per seed, with its algorithm and availability process."""

    seeds: list[Any]
    algorithms: list[Algorithm]
    processes: list[AvailabilityProcess]
    several: bool  # a runs axis (any of the three was a list), even of one run


def _runs_of(seed: Any, algorithm: Any, availability: Any) -> Runs:
    """``simulate``'s seed, algorithm and availability arguments as aligned runs (any of them
    may be a list; the others repeat)."""
    count = runs_lib.run_count(seed, algorithm, availability)

    def each(value):
        return list(value) if runs_lib.is_runs(value) else [value] * (count or 1)

    return Runs(each(seed), each(algorithm), each(availability), count is not None)


def _swept_values(runs: Runs, num_clients: int) -> dict[str, jax.Array]:
    """The hyperparameter values that differ between the runs (``[S]`` each), after checking
    every run's algorithm and process (:mod:`fedjax_avail.runs`)."""
    if not runs.several:
        return {}
    for other in runs.algorithms[1:]:
        inputs.check_algorithm(other, num_clients)
    for other in runs.processes[1:]:
        inputs.check_availability(other)
    hyper = runs_lib.swept_values(runs.algorithms, "algorithm")
    runs_lib.swept_values(runs.processes, "availability",
                          getattr(type(runs.processes[0]), "run_parameters", ()))
    return {name: jnp.asarray(values) for name, values in hyper.items()}


def _initial_carry(task: Task, num_clients: int, runs: Runs) -> tuple[Any, Any]:
    """The scan carry and the random keys, each run's built as a single run's, then stacked on
    a leading runs axis when ``runs.several``."""
    def one(seed, alg, process):
        keys = _keys.run_keys(seed)
        params = task.init(keys.params)
        cursor = Timeline.start(process.init(keys.availability_init, num_clients), num_clients)
        return (alg.init(params, num_clients), cursor, jnp.int32(_HEALTHY)), keys

    built = [one(*run) for run in zip(runs.seeds, runs.algorithms, runs.processes, strict=True)]
    if not runs.several:
        return built[0]
    return jax.tree.map(lambda *leaves: jnp.stack(leaves), *built)


class Placement(NamedTuple):
    """The data on the devices and how the carry and the data are split (None without a
    mesh): what the compiled programs are built for."""

    data: FederatedData
    carry_shardings: Any
    data_shardings: Any


def _place(carry: Any, data: FederatedData, mesh: Mesh | None, several: bool
           ) -> tuple[Any, Placement]:
    """The carry and the data on the devices: split over a mesh's ``"clients"`` axis
    (:func:`fedjax_avail.cohort.client_shardings`), else on the default device. The caller
    drops its own carry: the placed one replaces it (never two states at once)."""
    if mesh is None:
        return carry, Placement(jax.device_put(data), None, None)
    n, axis = data.num_clients, int(several)
    state, cursor, health = carry  # the availability cursor's state may be a [T, N] trace
    carry_shardings = (cohort_lib.client_shardings(state, n, mesh, axis),
                       cohort_lib.client_shardings(cursor, n, mesh, axis, availability=True),
                       cohort_lib.client_shardings(health, n, mesh, axis))
    data_shardings = data.replace(
        arrays=cohort_lib.example_shardings(data.arrays, mesh),
        offsets=cohort_lib.client_shardings(data.offsets, n, mesh),
        counts=cohort_lib.client_shardings(data.counts, n, mesh))
    return (jax.device_put(carry, carry_shardings),
            Placement(jax.device_put(data, data_shardings), carry_shardings, data_shardings))


def _partitions(mesh: Mesh | None) -> int:
    """This process's devices that each run a partition of a program compiled for ``mesh``
    (XLA's ``memory_analysis`` describes one): 1 without a mesh."""
    return 1 if mesh is None else len(mesh.local_devices)


@functools.partial(jax.jit, donate_argnums=0)
def _put_run(stacked: Any, i: jax.Array, one: Any) -> Any:
    """``stacked`` (a runs axis ``[S, ...]``) with run ``i`` replaced by ``one``, in place."""
    return jax.tree.map(lambda a, b: a.at[i].set(b), stacked, one)


def _runs_at_once(stacked: Any, one_run: Callable[[int, Any], tuple[Any, Any]], workers: int,
                  keep: Callable[[Any], None]) -> list[Any]:
    """The ``"loop"`` layout's runs: ``one_run(i, run i's slice of stacked) -> (its new slice,
    extra)`` for each run i of ``stacked`` (a runs axis ``[S, ...]``), ``workers`` at once on
    threads (XLA:CPU runs one small run on about one core: :func:`fedjax_avail.cohort.
    loop_workers`). At most ``workers`` slices are in flight; each new one is written back in
    place (``stacked`` is donated) and released before the next is taken, and ``keep`` gets the
    updated ``stacked`` after every write-back, so the caller always holds a live state, also
    when a run raises. Returns the extras in run order."""
    count = len(jax.tree.leaves(stacked)[0])
    extras: list[Any] = [None] * count
    pending = iter(range(count))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        running: dict[concurrent.futures.Future, int] = {}
        while True:
            while len(running) < workers and (i := next(pending, None)) is not None:
                running[pool.submit(one_run, i, jax.tree.map(lambda a, i=i: a[i], stacked))] = i
            if not running:
                return extras
            done, _ = concurrent.futures.wait(running,
                                              return_when=concurrent.futures.FIRST_COMPLETED)
            for future in done:
                i = running.pop(future)
                new, extras[i] = future.result()
                stacked = _put_run(stacked, i, new)
                keep(stacked)
            del done, future, new  # the finished slices, written back


class RoundChunks:
    """Rounds ``[run.done, end)`` as one compiled ``lax.scan``, one compilation per length.

    Records compile and run seconds and XLA's working set in ``run``, the chunk's metrics in
    ``run.chunks`` and each run's first non-finite round in ``run.diverged``; returns the
    chunk's per-round metrics.
    """

    def __init__(self, task: Task, runs: Runs, chunks: tuple[int | None, int | None], keys: Any,
                 hyper: dict[str, jax.Array], mesh: Mesh | None, placement: Placement,
                 slot_length: float = 1.0, max_virtual_time: float | None = None,
                 layout: str = "vmap", workers: int = 1):
        algorithm, availability = runs.algorithms[0], runs.processes[0]  # the code; values vary

        moves_time = getattr(algorithm, "moves_time", False)

        def one_round(carry, r, keys, data, hyper):
            alg_state, cursor, health = carry
            alg = runs_lib.bind(algorithm, hyper)  # this run's hyperparameter values
            timeline = Timeline(availability, keys, slot_length)
            start = getattr(alg, "virtual_time", lambda state: None)(alg_state)
            cursor = timeline.at(cursor, r if start is None else timeline.slot_of(start))
            now = timeline.start_of(r) if start is None else start  # when the round starts
            mask = cursor.mask
            reports = reports_of(availability, mask, r, _keys.availability_key(keys, r))
            round_input = RoundInput(r, mask, _keys.algorithm_key(keys, r), reports,
                                     timeline, cursor)
            out = alg.round(alg_state, round_input, Problem(task, data, *chunks))
            (alg_state, metrics), cursor = (out[:2], out[2]) if moves_time else (out, cursor)
            if "virtual_time" not in metrics:  # one slot a round
                metrics["virtual_time"] = (r + 1).astype(jnp.float32) * jnp.float32(slot_length)
            metrics = {"num_available": jnp.sum(mask), **metrics}
            if max_virtual_time is not None:  # past the budget a round changes nothing
                ran = now < max_virtual_time
                alg_state, cursor = jax.tree.map(lambda new, old: jnp.where(ran, new, old),
                                                 (alg_state, cursor), carry[:2])
                metrics = {k: jnp.where(ran, v, now if k == "virtual_time" else
                                        jnp.zeros_like(v)) for k, v in metrics.items()}
                metrics[IN_BUDGET] = ran
            bad = ~_finite(alg_state)
            health = jnp.where((health == _HEALTHY) & bad, r, health)
            return (alg_state, cursor, health), metrics

        # "loop": one single-run program, executed for each run (_each_run, _runs_at_once)
        self._loop = runs.several and layout == "loop"
        step = (cohort_lib.map_runs(one_round, (0, None, 0, None, 0), layout)
                if runs.several and not self._loop else one_round)

        def run_chunk(carry, data, round_ids, keys, hyper):
            return jax.lax.scan(lambda c, r: step(c, r, keys, data, hyper), carry, round_ids)

        shardings = {}
        if mesh is not None:
            replicated = NamedSharding(mesh, PartitionSpec())
            shardings = dict(in_shardings=(placement.carry_shardings, placement.data_shardings,
                                           replicated, replicated, replicated),
                             out_shardings=(placement.carry_shardings, replicated))
        self._jitted = jax.jit(run_chunk, donate_argnums=0, **shardings)
        self._compiled: dict[int, Any] = {}
        self._args = (placement.data, keys, hyper)
        self._mesh, self._batched = mesh, runs.several and layout == "vmap"
        self._workers = workers  # the runs a "loop" trains at once

    def _executable(self, run: Run, round_ids: jax.Array, carry: Any, keys: Any,
                    hyper: dict[str, jax.Array], in_flight: int = 0) -> Any:
        """The compiled chunk of ``len(round_ids)`` rounds for arguments of these shapes; its
        working set is recorded in ``run.memory`` (times ``in_flight`` runs of a ``"loop"``,
        each also holding its state slice ``carry``)."""
        length = len(round_ids)
        if length not in self._compiled:
            data = self._args[0]
            start = time.perf_counter()
            with _mesh_context(self._mesh):
                self._compiled[length] = _compile(
                    self._jitted.lower(carry, data, round_ids, keys, hyper), self._batched)
            run.timing["compile"] += time.perf_counter() - start
            analysis = self._compiled[length].memory_analysis()
            temp = int(getattr(analysis, "temp_size_in_bytes", 0) or 0) * _partitions(self._mesh)
            if in_flight:
                temp = in_flight * (temp + memory.tree_bytes(carry))
            run.memory["working_set"] = max(run.memory.get("working_set", 0), temp)
        return self._compiled[length]

    def __call__(self, run: Run, end: int) -> dict[str, np.ndarray]:
        """Runs rounds ``[run.done, end)``; returns their metrics, each ``[length(, S)]``."""
        round_ids = jnp.arange(run.done, end, dtype=jnp.int32)
        data, keys, hyper = self._args
        if self._loop:
            metrics = self._each_run(run, round_ids)
        else:
            executable = self._executable(run, round_ids, run.carry, keys, hyper)
            start = time.perf_counter()
            run.carry, metrics = executable(run.carry, data, round_ids, keys, hyper)
            jax.block_until_ready(run.carry)
            run.timing["run"] += time.perf_counter() - start
        run.chunks.append(to_host(metrics))
        run.done = end
        for i, h in enumerate(np.atleast_1d(to_host(run.carry[2]))):
            if h != _HEALTHY and run.diverged[i] is None:
                run.diverged[i] = int(h)
        return run.chunks[-1]

    def _each_run(self, run: Run, round_ids: jax.Array) -> Any:
        """The ``"loop"`` layout: the single-run program over each run's slice of the stacked
        carry (:func:`_runs_at_once`), written back in place; the metrics stacked as a runs
        axis ``[length, S]``."""
        data, keys, hyper = self._args
        executable = self._executable(run, round_ids, *_run_shapes((run.carry, keys, hyper)),
                                      in_flight=self._workers)

        def one_run(i: int, carry: Any) -> tuple[Any, Any]:
            run_keys, run_hyper = jax.tree.map(lambda a: a[i], (keys, hyper))
            carry, chunk = executable(carry, data, round_ids, run_keys, run_hyper)
            return jax.block_until_ready(carry), chunk

        def keep(carry: Any) -> None:
            run.carry = carry

        start = time.perf_counter()
        metrics = _runs_at_once(run.carry, one_run, self._workers, keep)
        jax.block_until_ready(run.carry)
        run.timing["run"] += time.perf_counter() - start
        return jax.tree.map(lambda *each: jnp.stack(each, axis=1), *metrics)


def _run_shapes(stacked: Any) -> Any:
    """The shapes of one run's slice of ``stacked`` (a runs axis ``[S, ...]``), copying nothing."""
    return jax.eval_shape(lambda tree: jax.tree.map(lambda a: a[0], tree), stacked)


def _prepare(run: Run, prepare: Callable[..., Any], task: Task, placement: Placement,
             chunks: tuple[int | None, int | None], mesh: Mesh | None,
             layout: str, workers: int = 1) -> np.ndarray:
    """An algorithm's one-off pass before round 0 (DivFL's gradients of all clients) on the
    state in ``run.carry``, timed as ``prepare`` (compile included); returns, per run, whether
    the prepared state is finite."""
    start = time.perf_counter()

    def prepare_state(state, data):
        return prepare(state, Problem(task, data, *chunks))

    loop = run.several and layout == "loop"  # the single-run pass, runs at once (_runs_at_once)
    prepare_fn = (cohort_lib.map_runs(prepare_state, (0, None), layout)
                  if run.several and not loop else prepare_state)
    placed = {} if mesh is None else dict(out_shardings=placement.carry_shardings[0])
    state = run.carry[0]
    with _mesh_context(mesh):
        # donated: the state may hold [N, P] tables, which must not exist twice
        executable = jax.jit(prepare_fn, donate_argnums=0, keep_unused=True, **placed).lower(
            _run_shapes(state) if loop else state, placement.data).compile()
    analysis = executable.memory_analysis()
    run.memory["working_set"] = (sum(int(getattr(analysis, name, 0) or 0) for name in (
        "temp_size_in_bytes", "output_size_in_bytes")) - int(
            getattr(analysis, "alias_size_in_bytes", 0) or 0)) * _partitions(mesh)
    if loop:
        def keep(stacked: Any) -> None:
            run.carry = (stacked, *run.carry[1:])

        _runs_at_once(state, lambda i, one: (
            jax.block_until_ready(executable(one, placement.data)), None), workers, keep)
        del state  # donated: run.carry holds the prepared one
    else:
        run.carry = (executable(state, placement.data), *run.carry[1:])
    jax.block_until_ready(run.carry[0])
    run.timing["prepare"] = time.perf_counter() - start
    finite = cohort_lib.map_runs(_finite, (0,)) if run.several else _finite
    return np.atleast_1d(to_host(jax.jit(finite)(run.carry[0])))


def _check_prepared(run: Run, finite: np.ndarray) -> None:
    """Raises :class:`DivergenceError` naming the first run whose prepared state is not
    finite (``finite``: ``[S]``)."""
    if not finite.all():
        bad = int(np.argmin(finite))
        raise DivergenceError(
            f"{run.label(bad)}the state prepared before round 0 (e.g. DivFL's gradients of all "
            "clients) holds NaN/Inf: a client's gradient or loss at the initial model is not "
            "finite (check the model and the data); the run stopped in round 0. Error.result "
            "holds the history so far.", run.result(), 0)


def _warn_dropped(results: list[Result], algorithm: Algorithm) -> None:
    """Warns when contributions were dropped for a model history too short to hold their
    start (asynchronous algorithms' ``history``)."""
    dropped = int(sum(np.sum(r.round_metrics.get("dropped_stale", 0)) for r in results))
    if dropped:
        warnings.warn(
            f"{dropped} contributions were dropped: the model version their job started from "
            f"was older than the history of {getattr(algorithm, 'history', '?')} models kept; "
            "raise `history`, or use history=None (exact per-client copies)", stacklevel=5)


@checked
@_one_run_per_checkpoint_dir
def simulate(
    task: Task,
    data: FederatedData,
    algorithm: Algorithm | Sequence[Algorithm],
    availability: AvailabilityProcess | Sequence[AvailabilityProcess],
    rounds: Annotated[int, Range(1, inputs.MAX_ROUNDS, high_open=True)],
    seed: Seed | Sequence[Seed] | np.ndarray = 0,
    eval_every: Count = 20,
    test_data: FederatedData | Mapping[str, np.ndarray] | None = None,
    *,
    client_chunk: Count | Literal["auto"] | None = "auto",
    eval_batch_size: Count = 4096,
    progress: bool = False,
    desc: str | None = None,
    checkpoint_dir: str | os.PathLike | None = None,
    checkpoint_every: Count | None = None,
    check_memory: bool = True,
    train_eval_examples: Count | None = None,
    mesh: Mesh | None = None,
    callbacks: Sequence[Callback] = (),
    checkpoint_keep: Count = KEEP,
    slot_length: Positive = 1.0,
    max_virtual_time: Positive | None = None,
    runs_layout: Literal["auto", "vmap", "map", "loop"] = "auto",
    checkpoint_seconds: NonNegative = 0.0,
) -> Result | list[Result]:
    """Runs ``rounds`` rounds of ``algorithm`` under ``availability``; round r uses mask r.

    Args:
      task: model, loss and metrics.
      data: the clients' training data, N clients.
      algorithm: e.g. ``fa.algorithms.FedLaAvg(...)``.
      availability: e.g. ``fa.availability.Bernoulli(0.5)``.
      rounds: R >= 1.
      seed: one seed for everything (model init, availability, selection, batches). Round r's
        randomness depends on (seed, r) only, so results are bit-identical whatever
        ``eval_every``, ``client_chunk`` or checkpointing. A list of seeds runs them all in one
        compiled program (a runs axis over the whole state, the data shared; ``runs_layout``)
        and returns a list of :class:`Result`, one per seed, each equal to
        ``simulate(..., seed=s)`` (see the README for the tolerance). ``algorithm`` and
        ``availability`` may also be lists, aligned with the seeds run by run
        (:mod:`fedjax_avail.runs`: hyperparameter values in one program).
      eval_every: evaluate every this many rounds (and after round 0 and the last round).
      test_data: optional held-out examples (a dict of ``[M, ...]`` arrays or FederatedData).
      client_chunk: train the cohort in sequential chunks of this many clients (under a
        ``"cohort"`` mesh axis, each device its share in chunks of this many), and hold at
        most this many clients' full batches at once (a memory bound); None: the whole cohort
        in one ``vmap``. ``"auto"`` (default): one ``vmap`` on accelerators; on a CPU,
        chunks of at most ``fedjax_avail.memory.CPU_CHUNK_BYTES`` of members' working sets
        when the cohort (under a ``"cohort"`` mesh axis, each device's share of it) is larger
        (XLA:CPU's batched small products slow down past the cache: MNIST logistic
        regression trains K = 1000 in 17 chunks of 59), no bound on full-batch passes
        (:func:`fedjax_avail.memory.client_chunks`). Results match up to float reordering.
      eval_batch_size: examples per evaluation block.
      progress: show progress: rounds/s and ETA from the round time (compile excluded), the
        training loss; a bar on a terminal, a line every 30 s otherwise.
      desc: the progress bar's label.
      checkpoint_dir: save the run there (orbax) every ``checkpoint_every`` rounds and at the
        end; if it already holds a checkpoint of this same run, continue from the newest one
        (bit-identical to an uninterrupted run). A checkpoint of a different run is refused,
        naming the settings that differ, and so is one written by other code (another version
        of this package, or edited source); a damaged checkpoint (checksums, :mod:`checkpoint`)
        is skipped with a warning for the one before it. The run holds a lock on the
        directory: a second run on it refuses at once.
      checkpoint_every: rounds between checkpoints (default ``eval_every``).
      checkpoint_keep: how many of the newest checkpoints to keep (default 2: the newest and
        the fallback should it be damaged).
      check_memory: refuse a run whose predicted device memory
        (:func:`fedjax_avail.estimate_memory`) exceeds what is free.
      mesh: a ``jax.sharding.Mesh`` with a ``"clients"`` axis, a ``"cohort"`` axis, or both.
        ``"clients"``: every client array (data rows, per-client tables, stamps, availability
        state) is split over it, the model and server arrays replicated
        (:func:`fedjax_avail.cohort.client_shardings`); N must be a multiple of its size.
        ``"cohort"``: each round's local training is split over it, K / D members a device
        (:func:`fedjax_avail.cohort.map_cohort`), the rest replicated; on a CPU,
        ``jax.config.update("jax_num_cpu_devices", cores)`` before JAX starts makes each core a
        device. Results equal a single device's up to float reordering (README).
      train_eval_examples: evaluate the training metrics on this many evenly spaced training
        examples (rows ``round(i M / n)``, every client's share in proportion) instead of all M;
        for big models whose full evaluation would cost more than the rounds. None: all.
      callbacks: :class:`fedjax_avail.callbacks.Callback` objects called at run start, after
        each evaluation, after each chunk of rounds and at run end, after the progress display
        and before the divergence guard and checkpointing. One may end the run early with
        ``run.stop(reason)``: it stops at that chunk boundary (checkpointed, when
        ``checkpoint_dir`` is set) and the results so far are returned with
        ``Result.stopped = reason``. E.g. :class:`fedjax_avail.callbacks.CSVLogger`,
        :class:`fedjax_avail.callbacks.TensorBoard` (written at every evaluation).
      slot_length: L, the virtual time an availability mask holds for (slot s is
        ``[s L, (s + 1) L)``; :mod:`fedjax_avail.availability._timeline`). A synchronous round
        without durations lasts one slot; with durations it reads the slot of its start time;
        an asynchronous update moves through the slots its jobs run in.
      max_virtual_time: also stop once virtual time reaches this budget: the round (server
        update) in progress at the budget is the last one, and the run ends with
        ``Result.stopped`` naming the budget (``rounds`` still caps it). Each run of a runs axis
        stops at its own budget; its ``round_metrics`` and ``history`` end with its last round
        (the call returns when every run is done). None: rounds only.
      runs_layout: how several runs share the compiled program
        (:func:`fedjax_avail.cohort.runs_layout`): ``"vmap"`` batches them into every
        operation (accelerators: S runs in about one's time); ``"loop"`` compiles one run's
        program once and runs each run's chunk of rounds with it, one run a CPU core at once
        (:func:`fedjax_avail.cohort.loop_workers`; each run's model and ``round_metrics`` then
        equal its separate run's bit for bit; no mesh); ``"map"`` runs
        them one after the other inside each compiled round (a ``lax.map``); ``"auto"``
        (default): ``"loop"`` on a CPU, ``"map"`` on a CPU with a mesh, ``"vmap"`` on
        accelerators. Evaluation is batched over the runs in every layout, so ``history``
        equals a separate run's up to float reordering (README), as do the models of
        ``"vmap"`` and ``"map"``.
      checkpoint_seconds: skip a checkpoint due less than this many seconds of wall time
        after the run's start or its last save (default 0: every ``checkpoint_every``
        rounds); the last round and a stopped run are always saved. A save costs about 70 ms
        however small the model (orbax), so this bounds checkpointing's share of a run of fast
        rounds; a run killed outright loses at most this many seconds plus
        ``checkpoint_every`` rounds.

    Returns:
      a :class:`Result` (a list of them for a list of seeds). ``history`` holds ``train_loss``
      (mean over all clients' examples, the quantity the FedLaAvg figures plot) and every task
      metric as ``train_<name>``, plus
      ``test_loss`` and ``test_<name>`` when ``test_data`` is given, and ``virtual_time`` (every
      algorithm: the time at the end of the last round). When ``test_data`` is a
      ``FederatedData`` (each client's own test split) and the task has an ``accuracy``
      metric, the fairness metrics of the per-client accuracies are added as
      ``test_client_dissimilarity``, ``test_acc_worst10``, ``test_jain``, ...
      (:func:`fedjax_avail.fairness.fairness_metrics`).

    Raises:
      ValueError / TypeError: bad arguments or data, before anything is compiled.
      MemoryError: the run cannot fit in device memory (before anything is allocated).
      DivergenceError: the global model or the training loss became NaN/Inf; the message names
        the round, and ``.result`` keeps the history so far. With several seeds the other runs
        finish first; ``.result`` is then the list of all results and the message names every
        seed that diverged and its round.
      fedjax_avail.DirectoryBusyError: another running process holds ``checkpoint_dir``.
      Interrupted: Ctrl-C; the run stops at the next chunk boundary, saving a checkpoint when
        ``checkpoint_dir`` is set; ``.result`` keeps the history so far.
    """
    start_time = time.perf_counter()
    cohort_lib.runs_layout(runs_layout)  # its name, checked first
    runs = _runs_of(seed, algorithm, availability)
    layout = cohort_lib.runs_layout(runs_layout, mesh if runs.several else None)
    algorithm, availability = runs.algorithms[0], runs.processes[0]
    test_arrays = inputs.check_simulate_args(
        task, data, algorithm, availability, rounds, runs.seeds, eval_every, test_data,
        client_chunk, eval_batch_size, checkpoint_every, train_eval_examples)
    hyper = _swept_values(runs, data.num_clients)
    chunks = memory.client_chunks(client_chunk, task, data, algorithm, mesh=mesh,
                                  runs_at_once=len(runs.seeds) if layout == "vmap" else 1)
    loop = runs.several and layout == "loop"
    available = memory.available_bytes(mesh=mesh) if check_memory or loop else None
    estimate, workers = memory.fitting_estimate(
        task, data, algorithm, availability, available=available, runs=len(runs.seeds),
        runs_layout=layout, test_data=test_arrays, client_chunk=client_chunk, mesh=mesh)
    if check_memory:
        memory.check_fits(estimate, available)
    held = MeasureHeld()  # before anything of the run is allocated
    carry, keys = _initial_carry(task, data.num_clients, runs)
    checkpointing = None
    if checkpoint_dir is not None:
        checkpointing = Checkpointing(checkpoint_dir, run_settings(
            algorithm=runs.algorithms if runs.several else algorithm,
            availability=runs.processes if runs.several else availability, task=task,
            seed=runs.seeds if runs.several else seed, eval_every=eval_every,
            data=(data.arrays, data.counts), test_data=test_arrays,
            train_eval_examples=train_eval_examples, eval_batch_size=eval_batch_size,
            client_chunk=chunks[0] if chunks[0] == chunks[1] else list(chunks),
            mesh=_mesh_layout(mesh), slot_length=slot_length,
            max_virtual_time=max_virtual_time,
            **({"runs_layout": layout} if runs.several else {}),
            model=jax.eval_shape(lambda params: params, carry[0].params), **_environment()),
            every=checkpoint_every or eval_every, keep=checkpoint_keep,
            seconds=checkpoint_seconds)
    carry, placement = _place(carry, data, mesh, runs.several)
    run = Run(rounds, runs.seeds, runs.several, eval_every, desc, carry,
              start_time=start_time, memory={"estimated": estimate.total})
    del carry  # the run holds the state; a restored one replaces it
    # Restored (and verified) before anything is compiled: a refused resume costs nothing.
    restored = checkpointing.restore(run) if checkpointing else False
    evaluation = RunEvaluation(task, placement.data, test_arrays, test_data, eval_batch_size,
                               train_eval_examples, runs.several, mesh)
    round_chunks = RoundChunks(task, runs, chunks, keys, hyper, mesh, placement, slot_length,
                               max_virtual_time, layout, workers)
    every = (eval_every,) + ((checkpointing.every,) if checkpointing else ())
    hooks = [StopOnCtrlC(checkpointing.directory if checkpointing else None), held,
             ProgressDisplay(progress, max_virtual_time), *callbacks, DivergenceGuard(),
             StallGuard(slot_length),
             *([TimeBudget(max_virtual_time)] if max_virtual_time is not None else []),
             *([checkpointing] if checkpointing else [])]
    try:
        dispatch(hooks, "on_run_start", run)
        compile_start = time.perf_counter()
        evaluation.compile(run.params)
        run.timing["compile"] += time.perf_counter() - compile_start
        if not restored:
            prepare = getattr(algorithm, "prepare", None)
            prepared = (_prepare(run, prepare, task, placement, chunks, mesh, layout, workers)
                        if prepare is not None else np.ones(1, bool))
            dispatch(hooks, "on_evaluation", run, evaluation(run))
            _check_prepared(run, prepared)
        for end in _boundaries(run.done, rounds, every):
            if run.stop_reason is not None:
                break
            metrics = round_chunks(run, end)
            if end % eval_every == 0 or end == rounds or (
                    not runs.several and run.diverged[0] is not None):
                dispatch(hooks, "on_evaluation", run, evaluation(run))
            dispatch(hooks, "on_chunk_end", run, metrics)
    except BaseException as error:
        run.error = error
        raise
    finally:
        run_end(hooks, run)
    if run.error is not None:
        raise run.error
    results = run.results()
    _warn_dropped(results, algorithm)
    return results if runs.several else results[0]
