"""The engine: builds the state, runs rounds as a compiled ``lax.scan`` in chunks, evaluates.

One round is a pure function ``(algorithm state, availability state, health) -> (states,
metrics)``; rounds ``[a, b)`` run as one ``jit``-compiled ``lax.scan`` whose state buffers are
donated, so they are updated in place. Between chunks (every ``eval_every`` rounds, and at
checkpoints) the host evaluates the global model, saves a checkpoint and moves the progress
bar; nothing else crosses to the host.

Before anything is compiled or allocated, every input is checked (``inputs.py``) and the run's
device memory is predicted (``memory.py``). Every round checks that the global model is finite
(a flag carried in the scan), so a diverging run stops at the end of the chunk in which it
diverged, naming the round.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import os
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from fedjax_avail import _keys, inputs, memory
from fedjax_avail import cohort as cohort_lib
from fedjax_avail import runs as runs_lib
from fedjax_avail._checks import Annotated, Count, Range, Seed, checked
from fedjax_avail._interrupt import StopOnInterrupt
from fedjax_avail._io import check_writable_dir
from fedjax_avail._lock import DirectoryLock
from fedjax_avail._progress import Progress
from fedjax_avail.algorithms import Algorithm, RoundInput
from fedjax_avail.availability import AvailabilityProcess, reports_of
from fedjax_avail.checkpoint import RunCheckpointer, run_settings
from fedjax_avail.data import FederatedData
from fedjax_avail.evaluation import make_client_evaluator, make_evaluator
from fedjax_avail.fairness import fairness_metrics
from fedjax_avail.history import History, round_columns
from fedjax_avail.local import Problem
from fedjax_avail.tasks import Task

_HEALTHY = -1  # the health flag: the first round whose global model was not finite, else -1


@dataclasses.dataclass
class Result:
    """What :func:`simulate` returns.

    Attributes:
      params: the final global model.
      history: per-evaluation metrics (round 0 is the initial model).
      round_metrics: per-round metrics, each ``[R]`` (``num_available``, ``num_selected``, ...).
      state: the algorithm's final state.
      timing: seconds: ``compile`` (all compilations), ``run`` (rounds, compile excluded),
        ``eval`` (evaluations), ``prepare`` (an algorithm's one-off pass before round 0, e.g.
        DivFL's gradients of all clients, compile included), ``total`` (wall time of
        ``simulate``); ``s_per_round`` = run / R
        (rounds run by this call: a resumed run times only what it ran).
      memory: ``estimated`` device bytes (:func:`fedjax_avail.estimate_memory`); ``held``: bytes
        of the device arrays this run held after its first chunk (data, states); ``working_set``:
        XLA's temporary buffers of the compiled round chunk; ``measured`` = held + working set.
    """

    params: Any
    history: History
    round_metrics: dict[str, np.ndarray]
    state: Any
    timing: dict[str, float]
    memory: dict[str, int] = dataclasses.field(default_factory=dict)


class DivergenceError(RuntimeError):
    """The run produced a NaN or Inf; ``.result`` holds everything recorded up to that point
    and ``.round`` is the round in which it happened (0: the initial model)."""

    def __init__(self, message: str, result: Result, round_index: int):
        super().__init__(message)
        self.result, self.round = result, round_index


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped the run at a chunk boundary; ``.result`` holds what was recorded.

    ``.checkpoint_dir`` is where the state was saved (None without checkpointing); calling
    ``simulate`` again with the same arguments resumes from it.
    """

    def __init__(self, message: str, result: Result, checkpoint_dir: Path | None):
        super().__init__(message)
        self.result, self.checkpoint_dir = result, checkpoint_dir


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


def _fetch(tree):
    """Device values on the host. In a multi-process run the values the engine reads (metrics,
    evaluations, the health flag) are replicated global arrays: their local copy is read."""
    def one(a):
        if isinstance(a, jax.Array) and not a.is_fully_addressable:
            return np.asarray(a.addressable_data(0))
        return np.asarray(jax.device_get(a))

    return jax.tree.map(one, tree)


def _concat(chunks: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Per-round metrics of consecutive chunks joined along the round axis."""
    names = chunks[0] if chunks else {}
    return {k: np.concatenate([c[k] for c in chunks]) for k in names}


def _mesh_context(mesh: Any):
    """Tracing under ``mesh``, so that :func:`fedjax_avail.cohort.map_cohort` splits the cohort
    over its ``"cohort"`` axis (no mesh: nothing changes)."""
    return jax.set_mesh(mesh) if mesh is not None else contextlib.nullcontext()


# XLA:CPU hands batched dots to YNNPACK; with two batch dimensions (runs x cohort: several
# seeds in one program) its kernel was measured 20x slower per run than with one (FedAvg on
# MNIST, K = 100, C = 1: 58 ms a round for 8 seeds against 2.5 ms for one; benchmarks/README.md,
# run_axis). Without that fusion XLA's own dot emitter scales linearly in the runs.
_CPU_RUNS_OPTIONS = {"xla_cpu_experimental_ynn_fusion_type": ""}


def _compile(lowered: Any, runs: bool) -> Any:
    """``lowered.compile()``; for several runs on a CPU without the YNNPACK dot fusion, where
    this XLA has the option (else the default compile)."""
    if runs and jax.default_backend() == "cpu":
        try:
            return lowered.compile(compiler_options=_CPU_RUNS_OPTIONS)
        except Exception:  # an XLA without the option: its default is the only choice
            pass
    return lowered.compile()


def _mesh_layout(mesh: Any) -> dict[str, int] | None:
    """A mesh as its axes and sizes: what can change a result (not which devices)."""
    return None if mesh is None else dict(mesh.shape)


def _environment() -> dict[str, Any]:
    """What outside the arguments can change a result: the JAX version, the backend and the
    JAX flags that change random numbers or arithmetic."""
    names = ("jax_default_prng_impl", "jax_threefry_partitionable", "jax_enable_x64",
             "jax_default_matmul_precision")
    return {"jax_version": jax.__version__, "backend": jax.default_backend(),
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
    client_chunk: Count | None = None,
    eval_batch_size: Count = 4096,
    progress: bool = False,
    desc: str | None = None,
    checkpoint_dir: str | os.PathLike | None = None,
    checkpoint_every: Count | None = None,
    check_memory: bool = True,
    train_eval_examples: Count | None = None,
    mesh: Mesh | None = None,
) -> Result:
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
        compiled program (a vmapped runs axis over the whole state, the data shared) and returns
        a list of :class:`Result`, one per seed, each equal to ``simulate(..., seed=s)`` (see
        the README for the tolerance). ``algorithm`` and ``availability`` may also be lists,
        aligned with the seeds run by run (:mod:`fedjax_avail.runs`: hyperparameter values in
        one program).
      eval_every: evaluate every this many rounds (and after round 0 and the last round).
      test_data: optional held-out examples (a dict of ``[M, ...]`` arrays or FederatedData).
      client_chunk: train the cohort in sequential chunks of this many clients (memory bound).
      eval_batch_size: examples per evaluation block.
      progress: show progress: rounds/s and ETA from the round time (compile excluded), the
        training loss; a bar on a terminal, a line every 30 s otherwise.
      desc: the progress bar's label.
      checkpoint_dir: save the run there (orbax) every ``checkpoint_every`` rounds and at the
        end; if it already holds a checkpoint of this same run, continue from the newest one
        (bit-identical to an uninterrupted run). A checkpoint of a different run is refused,
        naming the settings that differ; a damaged checkpoint (checksums, :mod:`checkpoint`)
        is skipped with a warning for the one before it. The run holds a lock on the
        directory: a second run on it refuses at once.
      checkpoint_every: rounds between checkpoints (default ``eval_every``).
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

    Returns:
      a :class:`Result` (a list of them for a list of seeds). ``history`` holds ``train_loss``
      (mean over all clients' examples, the quantity the FedLaAvg figures plot) and every task
      metric as ``train_<name>``, plus
      ``test_loss`` and ``test_<name>`` when ``test_data`` is given. When ``test_data`` is a
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
    count = runs_lib.run_count(seed, algorithm, availability)
    runs = count is not None
    count = count or 1

    def each(value):
        return list(value) if runs_lib.is_runs(value) else [value] * count

    seeds, algorithms, processes = each(seed), each(algorithm), each(availability)
    algorithm, availability = algorithms[0], processes[0]  # the programs' code; values vary
    test_arrays = inputs.check_simulate_args(
        task, data, algorithm, availability, rounds, seeds, eval_every, test_data,
        client_chunk, eval_batch_size, checkpoint_every, train_eval_examples)
    num_clients = data.num_clients
    hyper: dict[str, Any] = {}
    if runs:
        for other in algorithms[1:]:
            inputs.check_algorithm(other, num_clients)
        for other in processes[1:]:
            inputs.check_availability(other)
        hyper = runs_lib.swept_values(algorithms, "algorithm")
        runs_lib.swept_values(processes, "availability",
                              getattr(type(availability), "run_parameters", ()))
    estimate = memory.estimate_memory(task, data, algorithm, availability, test_data=test_arrays,
                                      client_chunk=client_chunk, runs=count)
    if check_memory:
        memory.check_fits(estimate, memory.available_bytes())
    baseline_bytes = sum(a.nbytes for a in jax.live_arrays())

    def init_run(keys, alg, process):
        params = task.init(keys.params)
        return (alg.init(params, num_clients), process.init(keys.availability_init, num_clients),
                jnp.int32(_HEALTHY))

    def stack(trees):
        return jax.tree.map(lambda *leaves: jnp.stack(leaves), *trees)

    if runs:  # each run's state built as a single run's, then stacked on a leading runs axis
        keys = stack([_keys.run_keys(x) for x in seeds])
        carry = stack([init_run(_keys.run_keys(x), alg, process)
                       for x, alg, process in zip(seeds, algorithms, processes, strict=True)])
    else:
        keys = _keys.run_keys(seed)
        carry = init_run(keys, algorithm, availability)
    hyper = {name: jnp.asarray(values) for name, values in hyper.items()}
    params = carry[0].params
    checkpointer = None
    if checkpoint_dir is not None:
        checkpointer = RunCheckpointer(checkpoint_dir, run_settings(
            algorithm=algorithms if runs else algorithm,
            availability=processes if runs else availability, task=task,
            seed=seeds if runs else seed, eval_every=eval_every,
            data=(data.arrays, data.counts), test_data=test_arrays,
            train_eval_examples=train_eval_examples, eval_batch_size=eval_batch_size,
            client_chunk=client_chunk, mesh=_mesh_layout(mesh),
            model=jax.eval_shape(lambda: carry[0].params), **_environment()))
    chunk_shardings = {}
    if mesh is not None:
        from jax.sharding import NamedSharding, PartitionSpec

        replicated = NamedSharding(mesh, PartitionSpec())
        carry_shardings = cohort_lib.client_shardings(carry, num_clients, mesh, int(runs))
        data_shardings = data.replace(
            arrays=cohort_lib.example_shardings(data.arrays, mesh),
            offsets=cohort_lib.client_shardings(data.offsets, num_clients, mesh),
            counts=cohort_lib.client_shardings(data.counts, num_clients, mesh))
        carry = jax.device_put(carry, carry_shardings)
        device_data = jax.device_put(data, data_shardings)
        chunk_shardings = dict(in_shardings=(carry_shardings, data_shardings, replicated,
                                             replicated, replicated),
                               out_shardings=(carry_shardings, replicated))
    else:
        device_data = jax.device_put(data)
    params = carry[0].params  # as placed: the evaluators are compiled for it
    # Restored (and verified) before anything is compiled: a refused resume costs nothing.
    restored = checkpointer.restore(jax.eval_shape(lambda: carry)) if checkpointer else None
    train_arrays = device_data.arrays
    if train_eval_examples is not None and train_eval_examples < data.num_examples:
        rows = (np.arange(train_eval_examples) * data.num_examples) // train_eval_examples
        train_arrays = {k: v[rows] for k, v in train_arrays.items()}
    evaluators = {"train": make_evaluator(task, train_arrays, eval_batch_size, runs)}
    if test_arrays is not None:
        evaluators["test"] = make_evaluator(task, test_arrays, eval_batch_size, runs)
    per_client = None  # each client's own test split: fairness metrics at every evaluation
    if isinstance(test_data, FederatedData) and task.metrics is not None:
        per_client = make_client_evaluator(task, test_data, eval_batch_size, runs)

    def one_round(carry, r, keys, data, hyper):
        alg_state, avail_state, health = carry
        avail_key = _keys.availability_key(keys, r)
        avail_state, mask = availability.step(avail_state, r, avail_key)
        reports = reports_of(availability, mask, r, avail_key)
        round_input = RoundInput(r, mask, _keys.algorithm_key(keys, r), reports)
        alg = runs_lib.bind(algorithm, hyper)  # this run's hyperparameter values
        alg_state, metrics = alg.round(alg_state, round_input, Problem(task, data, client_chunk))
        bad = ~_finite(alg_state)
        health = jnp.where((health == _HEALTHY) & bad, r, health)
        return (alg_state, avail_state, health), {"num_available": jnp.sum(mask), **metrics}

    step = cohort_lib.map_runs(one_round, in_axes=(0, None, 0, None, 0)) if runs else one_round

    def run_chunk(carry, data, round_ids, keys, hyper):
        return jax.lax.scan(lambda c, r: step(c, r, keys, data, hyper), carry, round_ids)

    jitted = jax.jit(run_chunk, donate_argnums=0, **chunk_shardings)
    compiled: dict[int, Any] = {}
    timing = {"compile": 0.0, "run": 0.0, "eval": 0.0}
    t0 = time.perf_counter()
    for evaluator in [*evaluators.values(), *([per_client] if per_client else [])]:
        evaluator.compile(params)
    timing["compile"] += time.perf_counter() - t0
    histories = [History() for _ in range(count)]
    per_round: list[dict[str, np.ndarray]] = []  # [length(, S), ...] per chunk
    pending: list[dict[str, np.ndarray]] = []  # per-round metrics since the last history row
    stopped = [None] * count  # the round each run diverged in
    done = 0
    measured: dict[str, int] = {"estimated": estimate.total}

    prepare = getattr(algorithm, "prepare", None)
    prepared_ok = np.ones(count, bool)
    if prepare is not None and restored is None:  # once before round 0 (DivFL's gradients)
        t0 = time.perf_counter()

        def prepare_state(state, data):
            return prepare(state, Problem(task, data, client_chunk))

        prepare_fn = cohort_lib.map_runs(prepare_state, (0, None)) if runs else prepare_state
        placed = {} if mesh is None else dict(out_shardings=carry_shardings[0])
        with _mesh_context(mesh):
            # donated: the state may hold [N, P] tables, which must not exist twice
            prepare_exe = jax.jit(prepare_fn, donate_argnums=0, keep_unused=True,
                                  **placed).lower(carry[0], device_data).compile()
        analysis = prepare_exe.memory_analysis()
        measured["working_set"] = sum(int(getattr(analysis, name, 0) or 0) for name in (
            "temp_size_in_bytes", "output_size_in_bytes")) - int(
                getattr(analysis, "alias_size_in_bytes", 0) or 0)
        carry = (jax.block_until_ready(prepare_exe(carry[0], device_data)), *carry[1:])
        timing["prepare"] = time.perf_counter() - t0
        prepared_ok = np.atleast_1d(_fetch(jax.jit(
            cohort_lib.map_runs(_finite, (0,)) if runs else _finite)(carry[0])))
    if restored is not None:
        if restored.done > rounds:
            raise ValueError(f"checkpoint_dir holds this run after {restored.done} rounds, more "
                             f"than rounds={rounds}; ask for at least {restored.done} rounds or "
                             "use another checkpoint_dir")
        done, carry = restored.done, restored.carry
        # The last row of a shorter run may be off the eval_every schedule: an uninterrupted
        # longer run has no row there.
        saved = restored.rows if runs else [restored.rows]
        histories = [History([row for row in rows if row["round"] % eval_every == 0
                              or row["round"] == rounds]) for rows in saved]
        per_round = [restored.round_metrics] if done else []
        since = int(histories[0].rows[-1]["round"])
        pending = [{k: v[since:] for k, v in restored.round_metrics.items()}] if done else []
        health = np.atleast_1d(_fetch(carry[2]))
        stopped = [int(h) if h != _HEALTHY else None for h in health]

    def run_metrics(chunks: list[dict[str, np.ndarray]], i: int) -> dict[str, np.ndarray]:
        joined = _concat(chunks)
        return {k: v[:, i] for k, v in joined.items()} if runs else joined

    def evaluate(done: int) -> list[dict[str, float]]:
        t0 = time.perf_counter()
        values = {split: _fetch(ev(carry[0].params)) for split, ev in evaluators.items()}
        clients = _fetch(per_client(carry[0].params)) if per_client else None
        new_rows = []
        for i, history in enumerate(histories):
            row: dict[str, float] = {"round": done}
            if done:
                row.update(round_columns(run_metrics(pending, i)))
            if stopped[i] is not None:  # a non-finite model is not scored: its metrics lie
                row.update({name: math.nan for name in history.columns if name != "round"})
                history.append(row)
                new_rows.append(row)
                continue
            for split, split_values in values.items():
                for k in ["loss", *(k for k in split_values if k != "loss")]:
                    v = split_values[k]
                    row[f"{split}_{k}"] = float(v[i] if runs else v)
            if clients is not None and "accuracy" in clients:
                acc = clients["accuracy"][i] if runs else clients["accuracy"]
                row.update({f"test_{k}": v for k, v in fairness_metrics(acc).items()})
            history.append(row)
            new_rows.append(row)
        pending.clear()
        timing["eval"] += time.perf_counter() - t0
        return new_rows

    def results() -> list[Result]:
        timing["total"] = time.perf_counter() - start_time
        ran = done - (restored.done if restored else 0)
        timing["s_per_round"] = timing["run"] / max(ran, 1)
        if "held" in measured:
            measured["measured"] = measured["held"] + measured.get("working_set", 0)
        out = []
        for i, history in enumerate(histories):
            state = jax.tree.map(lambda a, i=i: a[i], carry[0]) if runs else carry[0]
            out.append(Result(state.params, history, run_metrics(per_round, i), state,
                              dict(timing), dict(measured)))
        return out

    def finish(items: list[Result]) -> Result | list[Result]:
        return items if runs else items[0]

    def save() -> None:
        if checkpointer is not None:
            rows = [h.rows for h in histories] if runs else histories[0].rows
            checkpointer.save(done, carry, rows, _concat(per_round))

    def diverged(message: str, round_index: int) -> DivergenceError:
        return DivergenceError(f"{message}. Error.result holds the history so far.",
                               finish(results()), round_index)

    def name(i: int) -> str:
        return f"run {i} (seed {seeds[i]}): " if runs else ""

    if restored is None:
        for i, row in enumerate(evaluate(0)):
            if not math.isfinite(row["train_loss"]):
                raise diverged(f"{name(i)}the training loss of the initial model (round 0) is "
                               f"{row['train_loss']}: the task's init or loss gives NaN/Inf "
                               "before any training (check the model and the data)", 0)
        if not prepared_ok.all():
            bad = int(np.argmin(prepared_ok))
            raise diverged(
                f"{name(bad)}the state prepared before round 0 (e.g. DivFL's gradients of all "
                "clients) holds NaN/Inf: a client's gradient or loss at the initial model is "
                "not finite (check the model and the data); the run stopped in round 0", 0)
    bar = Progress(rounds, done, desc, progress)
    started_at = done
    every = (eval_every,) + ((checkpoint_every or eval_every,) if checkpointer else ())
    with StopOnInterrupt() as interrupt:
        for end in _boundaries(done, rounds, every):
            length = end - done
            round_ids = jnp.arange(done, end, dtype=jnp.int32)
            if length not in compiled:
                t0 = time.perf_counter()
                with _mesh_context(mesh):
                    compiled[length] = _compile(jitted.lower(carry, device_data, round_ids,
                                                             keys, hyper), bool(runs))
                timing["compile"] += time.perf_counter() - t0
                analysis = compiled[length].memory_analysis()
                temp = int(getattr(analysis, "temp_size_in_bytes", 0) or 0)
                measured["working_set"] = max(measured.get("working_set", 0), temp)
            t0 = time.perf_counter()
            carry, metrics = compiled[length](carry, device_data, round_ids, keys, hyper)
            jax.block_until_ready(carry)
            timing["run"] += time.perf_counter() - t0
            if "held" not in measured:
                measured["held"] = sum(a.nbytes for a in jax.live_arrays()) - baseline_bytes
            per_round.append(_fetch(metrics))
            pending.append(per_round[-1])
            done = end
            for i, h in enumerate(np.atleast_1d(_fetch(carry[2]))):
                if h != _HEALTHY and stopped[i] is None:
                    stopped[i] = int(h)
            if not runs and stopped[0] is not None:
                bar.close()
                histories[0].append({k: math.nan for k in histories[0].columns} | {"round": done})
                raise diverged(
                    f"the global model or a state vector (e.g. a client's loss) became NaN/Inf "
                    f"in round {stopped[0]} (the run diverged; try a smaller client_lr or "
                    "server_lr, and check the data)", stopped[0])
            new_rows = evaluate(done) if end % eval_every == 0 or end == rounds else None
            bar.update(length, timing["run"], done - started_at,
                       new_rows[0]["train_loss"] if new_rows else None)
            if new_rows:
                for i, row in enumerate(new_rows):
                    if stopped[i] is None and not math.isfinite(row["train_loss"]):
                        if not runs:
                            bar.close()
                            raise diverged(f"the training loss is {row['train_loss']} after "
                                           f"round {done} while the model is finite (the loss "
                                           "overflows)", done)
                        stopped[i] = done
            stop = interrupt.requested  # read once: saved and raised on the same reading
            if checkpointer and (end % (checkpoint_every or eval_every) == 0 or end == rounds
                                 or stop):
                save()
            if stop and end < rounds:
                bar.close()
                where = checkpointer.directory if checkpointer else None
                raise Interrupted(
                    f"interrupted after round {done} of {rounds}"
                    + (f"; saved to {where}, run again with the same arguments to resume"
                       if where else " (no checkpoint_dir: nothing saved)"),
                    finish(results()), where)
    bar.close()
    out = results()
    if any(r is not None for r in stopped):
        bad = [f"run {i} (seed {seeds[i]}) in round {r}" for i, r in enumerate(stopped)
               if r is not None]
        raise diverged("runs diverged (the global model or the training loss became NaN/Inf): "
                       + ", ".join(bad) + "; the other runs finished",
                       min(r for r in stopped if r is not None))
    dropped = int(sum(np.sum(r.round_metrics.get("dropped_stale", 0)) for r in out))
    if dropped:
        warnings.warn(
            f"{dropped} contributions were dropped: the model version their job started from "
            f"was older than the history of {getattr(algorithm, 'history', '?')} models kept; "
            "raise `history`, or use history=None (exact per-client copies)", stacklevel=2)
    return finish(out)
