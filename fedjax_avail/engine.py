"""The engine: :func:`simulate`, a plan and a short loop over chunks of compiled rounds.

``simulate`` reads top to bottom:

1. **The plan** (:mod:`fedjax_avail.plan`): every argument and the data checked, the runs
   axis, the chunks, the memory estimate, the state built and placed on the devices; nothing is
   compiled yet.
2. **The callbacks**: the engine's own concerns (Ctrl-C, memory measurement, progress, the
   evaluation, the divergence and stall guards, checkpointing) and the user's, in one list;
   the evaluation and checkpointing act at their cadence (:mod:`fedjax_avail.callbacks`).
3. **The loop**: a checkpoint of this run is restored, the evaluators compile, the algorithm's
   pass before round 0 runs, the initial model is evaluated; then until the run is complete or
   stopped, a chunk of rounds runs as one compiled ``lax.scan`` (:mod:`fedjax_avail.program`),
   the callbacks see it, and the actions due at its boundary act.

Nothing but the chunks' per-round metrics and the evaluations crosses to the host. Every round
checks that the global model is finite (a flag carried in the scan), so a diverging run stops at
the end of the chunk in which it diverged, naming the round.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
from jax.sharding import Mesh

from fedjax_avail import inputs
from fedjax_avail._checks import Annotated, Count, Positive, Range, Seed, checked
from fedjax_avail.algorithms import Algorithm
from fedjax_avail.availability import AvailabilityProcess
from fedjax_avail.callbacks import (
    Callback,
    Checkpointing,
    DivergenceGuard,
    Evaluation,
    MeasureHeld,
    ProgressDisplay,
    StallGuard,
    StopOnCtrlC,
)
from fedjax_avail.data import FederatedData
from fedjax_avail.plan import make_plan
from fedjax_avail.program import RoundProgram
from fedjax_avail.results import DivergenceError, Interrupted, Result
from fedjax_avail.run import Run
from fedjax_avail.tasks import Task

__all__ = ["DivergenceError", "Interrupted", "Result", "simulate"]

# simulate()'s former parameters, now options of the callbacks that own them
_MOVED = {
    "checkpoint_every": "fa.callbacks.Checkpointing(directory, every=...)",
    "checkpoint_keep": "fa.callbacks.Checkpointing(directory, keep=...)",
    "checkpoint_seconds": "fa.callbacks.Checkpointing(directory, seconds=...)",
    "eval_batch_size": "fa.callbacks.Evaluation(test_data, batch_size=...)",
    "train_eval_examples": "fa.callbacks.Evaluation(test_data, train_examples=...)",
}


def _refuse_moved(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` (``simulate``), refusing a former parameter with where it went."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        for name in kwargs.keys() & _MOVED.keys():
            raise TypeError(f"simulate() no longer takes {name}: pass "
                            f"callbacks=[{_MOVED[name]}]")
        return fn(*args, **kwargs)

    return wrapper


def _the_one(callbacks: Sequence[Callback], kind: type, made: Callable[[], Any],
             given: dict[str, Any]) -> Any:
    """The one ``kind`` callback among ``callbacks``, else ``made()``; refuses two, and one
    given beside the simple arguments (``given``: those not left at their defaults)."""
    found = [c for c in callbacks if isinstance(c, kind)]
    if len(found) > 1:
        raise ValueError(f"callbacks holds {len(found)} {kind.__name__} callbacks; a run has one")
    if found and given:
        raise ValueError(f"pass {', '.join(given)} to the {kind.__name__} callback in "
                         f"callbacks, not to simulate (got both)")
    return found[0] if found else made()


def _warn(results: list[Result], algorithms: list[Algorithm]) -> None:
    """Warns about what the per-round metrics show went wrong without stopping the run:
    contributions dropped for a model history too short to hold their start (asynchronous
    algorithms' ``history``), and a deadline that no selected client met in any round."""
    dropped = int(sum(np.sum(r.round_metrics.get("dropped_stale", 0)) for r in results))
    if dropped:
        warnings.warn(
            f"{dropped} contributions were dropped: the model version their job started from "
            f"was older than the history of {algorithms[0].history} models kept; raise "
            f"{type(algorithms[0]).__name__}'s `history`, or use history=None (exact "
            "per-client copies); on the command line --set NAME.history=H, NAME the "
            "algorithm's name in the experiment (e.g. fedbuff.history=512)", stacklevel=5)
    for result, algorithm in zip(results, algorithms, strict=True):
        m = result.round_metrics
        if "num_late" in m and np.sum(m["num_late"]) > 0 and np.sum(m["num_selected"]) == 0:
            warnings.warn(
                f"no selected client finished in time in any of the {len(m['num_late'])} "
                f"rounds: every round trained nothing; raise deadline={algorithm.deadline!r} "
                f"against the durations {type(algorithm.durations).__name__}", stacklevel=5)
            return


@_refuse_moved
@checked
def simulate(
    task: Task,
    data: FederatedData,
    algorithm: Algorithm | Sequence[Algorithm],
    availability: AvailabilityProcess | Sequence[AvailabilityProcess],
    rounds: Annotated[int, Range(1, inputs.MAX_ROUNDS, high_open=True)],
    seed: Seed | Sequence[Seed] | np.ndarray = 0,
    eval_every: Count | None = None,
    test_data: FederatedData | Mapping[str, np.ndarray] | None = None,
    *,
    callbacks: Sequence[Callback] = (),
    checkpoint_dir: str | os.PathLike | None = None,
    max_virtual_time: Positive | None = None,
    slot_length: Positive = 1.0,
    client_chunk: Count | Literal["auto"] | None = "auto",
    mesh: Mesh | Literal["auto"] | None = "auto",
    runs_layout: Literal["auto", "vmap", "map", "loop"] = "auto",
    progress: bool = False,
    desc: str | None = None,
    check_memory: bool = True,
) -> Result | list[Result]:
    """Runs ``rounds`` rounds of ``algorithm`` under ``availability``; round r uses mask r.

    Args:
      task: model, loss and metrics.
      data: the clients' training data, N clients.
      algorithm: e.g. ``fa.algorithms.FedLaAvg(...)``.
      availability: e.g. ``fa.availability.Bernoulli(0.5)``.
      rounds: R >= 1.
      seed: one seed for everything (model init, availability, selection, batches). Round r's
        randomness depends on (seed, r) only, so results are bit-identical whatever the
        evaluation's or checkpoints' cadence, ``client_chunk`` or a resume. A list of seeds
        runs them all in one compiled program (a runs axis over the whole state, the data
        shared; ``runs_layout``) and returns a list of :class:`Result`, one per seed, each
        equal to ``simulate(..., seed=s)`` (bit for bit on a CPU: ``runs_layout``). ``algorithm``
        and ``availability`` may also be lists, aligned with the seeds run by run
        (:mod:`fedjax_avail.runs`: real-valued hyperparameters and availability parameters in
        one program).
      eval_every: evaluate every this many rounds (default 20), after round 0 and at each
        run's last round: ``fa.callbacks.Evaluation(test_data, every=eval_every)``, which
        ``callbacks`` may hold instead (with its other options).
      test_data: optional held-out examples (a dict of ``[M, ...]`` arrays or FederatedData).
      callbacks: :class:`fedjax_avail.callbacks.Callback` objects called at run start, after
        each chunk of rounds, after each evaluation and at run end, after the progress display
        and the evaluation and before the divergence guard and checkpointing; one with a
        cadence also acts when it is due. One may end the run early with ``run.stop(reason)``:
        the boundary completes (the final evaluation and checkpoint) and the results so far
        are returned with ``Result.stopped = reason``. E.g. :class:`fedjax_avail.callbacks.
        CSVLogger`, :class:`fedjax_avail.callbacks.TensorBoard` (written at every evaluation),
        or an :class:`~fedjax_avail.callbacks.Evaluation` or
        :class:`~fedjax_avail.callbacks.Checkpointing` with options of its own.
      checkpoint_dir: save the run there (orbax) every ``eval_every`` rounds and at its end;
        if it
        already holds a checkpoint of this same run, continue from the newest one
        (bit-identical to an uninterrupted run): ``fa.callbacks.Checkpointing(checkpoint_dir,
        every=eval_every)``, which ``callbacks`` may hold instead (its cadence, how many to
        keep, a floor of seconds between saves). A checkpoint of a different run is refused,
        naming the settings that differ, and so is one written by other code (another version
        of this package, or edited source); a damaged checkpoint (checksums, :mod:`checkpoint`)
        is skipped with a warning for the one before it. The run holds a lock on the
        directory: a second run on it refuses at once.
      max_virtual_time: also end each run once its virtual time reaches this budget: the round
        (server update) in progress at the budget is its last one (``rounds`` still caps it),
        its model is evaluated there, and its ``Result.stopped`` names the budget. Each run of
        a runs axis ends at its own budget; its ``round_metrics`` and ``history`` end with its
        last round (the call returns when every run has ended). None: rounds only.
      slot_length: L, the virtual time an availability mask holds for (slot s is
        ``[s L, (s + 1) L)``; :mod:`fedjax_avail.timeline`). A synchronous round without
        durations lasts one slot; with durations it reads the slot of its start time; an
        asynchronous update moves through the slots its jobs run in. The clocks count slots:
        durations and the budget are divided by L in float64, and ``virtual_time`` is
        recorded as slots times L.
      client_chunk: train the cohort in sequential chunks of this many clients (under a
        ``"cohort"`` mesh axis, each device its share in chunks of this many), and hold at
        most this many clients' full batches at once (a memory bound); None: the whole cohort
        in one ``vmap``. ``"auto"`` (default): one ``vmap`` on accelerators; on a CPU,
        chunks of at most ``fedjax_avail.memory.CPU_CHUNK_BYTES`` of members' working sets
        when the cohort (under a ``"cohort"`` mesh axis, each device's share of it) is larger
        (XLA:CPU's batched small products slow down past the cache: MNIST logistic
        regression trains K = 1000 on one device in 91 chunks of 11), no bound on full-batch passes
        (:func:`fedjax_avail.memory.client_chunks`). Results match up to float reordering.
      mesh: a ``jax.sharding.Mesh`` with a ``"clients"`` axis, a ``"cohort"`` axis, or both.
        ``"clients"``: every client array (data rows, per-client tables, stamps, availability
        state) is split over it, the model and server arrays replicated
        (:func:`fedjax_avail.mesh.client_shardings`); N must be a multiple of its size.
        ``"cohort"``: each round's local training is split over it, K / D members a device
        (:func:`fedjax_avail.cohort.map_cohort`), the rest replicated; on a CPU,
        ``jax.config.update("jax_num_cpu_devices", cores)`` before JAX starts makes each core a
        device. Results equal a single device's up to float reordering
        (``tests/test_sharding.py``). None: one device. ``"auto"`` (default): on a CPU, one
        run whose cohort has at least 8 members a core is split over the cores (a
        ``"cohort"`` mesh over the CPU devices importing the package asked for:
        :func:`fedjax_avail.mesh.use_cpu_cores`, :func:`fedjax_avail.mesh.auto_mesh`) when it
        fits in memory; otherwise, and on accelerators, one device. ``result.memory["devices"]``
        records the choice.
      runs_layout: how several runs share the compiled program
        (:func:`fedjax_avail.runs.runs_layout`): ``"vmap"`` batches them into every
        operation (accelerators: S runs in about one's time); ``"loop"`` compiles one run's
        program once and runs each run's chunk of rounds with it, one run a CPU core at once
        (:func:`fedjax_avail.runs.loop_workers`), and evaluates each run's model with one
        run's evaluation program: each run's model, ``round_metrics`` and ``history`` then
        equal its separate run's bit for bit (no mesh); ``"map"`` runs
        them one after the other inside each compiled round (a ``lax.map``); ``"auto"``
        (default): ``"loop"`` on a CPU, ``"map"`` on a CPU with a mesh, ``"vmap"`` on
        accelerators. ``"vmap"`` and ``"map"`` evaluate the runs batched, so their ``history``
        and models equal a separate run's up to float reordering (``tests/test_runs.py``).
      progress: show progress: rounds/s and ETA from the round time (compile excluded), the
        training loss; a bar on a terminal, a line every 30 s otherwise.
      desc: the progress bar's label.
      check_memory: refuse a run whose predicted device memory
        (:func:`fedjax_avail.estimate_memory`) exceeds what is free.

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
      StalledError: an asynchronous update can never gather its K results (the availability
        process will bring no client back); ``.result`` keeps the history so far.
      fedjax_avail.DirectoryBusyError: another running process holds the checkpoint directory.
      Interrupted: Ctrl-C; the run stops at the next chunk boundary, evaluated and checkpointed
        there; ``.result`` keeps the history so far.
    """
    start_time = time.perf_counter()
    evaluation = _the_one(callbacks, Evaluation, lambda: Evaluation(test_data, eval_every or 20),
                          {k: v for k, v in (("eval_every", eval_every),
                                             ("test_data", test_data)) if v is not None})
    checkpointing = _the_one(
        callbacks, Checkpointing,
        lambda: None if checkpoint_dir is None else Checkpointing(checkpoint_dir,
                                                                  every=evaluation.every),
        {"checkpoint_dir": checkpoint_dir} if checkpoint_dir is not None else {})
    # one run a checkpoint directory: a second one refuses at once
    with checkpointing.lock() if checkpointing else contextlib.nullcontext():
        held = MeasureHeld()  # before anything of the run is allocated
        plan = make_plan(task, data, algorithm, availability, rounds, seed, evaluation,
                         client_chunk=client_chunk, mesh=mesh, runs_layout=runs_layout,
                         slot_length=slot_length, max_virtual_time=max_virtual_time,
                         check_memory=check_memory)
        run = Run(rounds, plan.runs.seeds, plan.runs.several, desc, plan.carry,
                  max_virtual_time, start_time=start_time,
                  memory={"estimated": plan.estimate.total,
                          "devices": 1 if plan.mesh is None else int(plan.mesh.size),
                          "client_chunk": plan.chunks[0]})
        plan.carry = None  # the run holds the state; a restored one replaces it
        own = [c for c in callbacks if c is not evaluation and c is not checkpointing]
        hooks = [StopOnCtrlC(checkpointing.directory if checkpointing else None), held,
                 ProgressDisplay(progress), evaluation, *own, DivergenceGuard(),
                 StallGuard(slot_length), *([checkpointing] if checkpointing else [])]
        # restored (and verified) before anything is compiled: a refused resume costs nothing
        restored = checkpointing.restore(run, plan.fingerprint()) if checkpointing else False
        evaluation.bind(task, plan.placement.data, plan.runs.several, plan.mesh, plan.layout)
        _loop(run, RoundProgram(plan), hooks, fresh=not restored)
    results = run.results()
    _warn(results, plan.runs.algorithms)
    return results if run.several else results[0]


def dispatch(callbacks: Sequence[Callback], hook: str, *args: Any) -> None:
    """Calls ``hook`` on every callback, in order."""
    for callback in callbacks:
        getattr(callback, hook)(*args)


class Actions:
    """The callbacks with a cadence, each acting when it is due (``on_due``); the rows an
    action records go to every callback's ``on_evaluation``."""

    def __init__(self, callbacks: Sequence[Callback]):
        self.callbacks = list(callbacks)
        self._last = {id(c): time.perf_counter() for c in self.callbacks}

    def boundaries(self, run: Run) -> list[int]:
        """Round counts at which the next chunks end: the multiples of every cadence's
        ``every`` after ``run.done``, and ``run.rounds``."""
        ends = {run.rounds}
        for callback in self.callbacks:
            every = callback.cadence.every if callback.cadence else None
            if every:
                ends.update(range((run.done // every + 1) * every, run.rounds, every))
        return sorted(e for e in ends if e > run.done)

    def act(self, run: Run, start: bool = False) -> None:
        """Each due action in order (before the first round: those due ``at_start``). When
        one of them ends the run (a stop in ``on_due`` or ``on_evaluation``), the actions due at
        the end act once more, so the earlier ones in the list act at the end too (the final
        evaluation's row, and a checkpoint holding it)."""
        ending = run.finishing
        for callback in self.callbacks:
            cadence = callback.cadence
            if cadence is None or not (cadence.at_start if start else cadence.due(
                    run, self._last[id(callback)])):
                continue
            rows = callback.on_due(run)
            self._last[id(callback)] = time.perf_counter()
            if rows is not None:
                dispatch(self.callbacks, "on_evaluation", run, rows)
        if run.finishing and not ending:
            self.act(run)


def run_end(callbacks: Sequence[Callback], run: Run) -> None:
    """``on_run_end`` of every callback, even when one raises (each releases what it holds);
    the first error is raised after all have run, unless the run already has one
    (``run.error``, which then goes on: the others are warnings)."""
    errors = []
    for callback in callbacks:
        try:
            callback.on_run_end(run)
        except Exception as error:  # each callback must still get its call
            errors.append(error)
    if run.error is not None:
        for error in errors:
            warnings.warn(f"{type(error).__name__} in a callback's on_run_end after the run "
                          f"ended with {type(run.error).__name__}: {error}", stacklevel=2)
    if errors and run.error is None:
        raise errors[0]


def _loop(run: Run, program: RoundProgram, hooks: list[Callback], fresh: bool) -> None:
    """The run's rounds, chunk by chunk, with the callbacks (module docstring); raises the
    error a stop ended the run with."""
    try:
        dispatch(hooks, "on_run_start", run)
        actions = Actions(hooks)  # their seconds count from here
        if fresh:
            if program.prepares:
                program.prepare(run)
            actions.act(run, start=True)
        if run.finishing:  # stopped before a round ran, or restored complete: the end's actions
            actions.act(run)
        while not run.finishing:
            metrics = program(run, actions.boundaries(run)[0])
            dispatch(hooks, "on_chunk_end", run, metrics)
            actions.act(run)
    except Exception as error:
        if error is run.error or not run.failed:  # the run's own error, or the first one
            run.error = error
            raise
        # the run had already ended with its own error (a divergence, a stall, Ctrl-C):
        # that one is raised, this one reported (a checkpoint that could not be written, ...)
        warnings.warn(f"{type(error).__name__} after the run had ended with "
                      f"{type(run.error).__name__}: {error}", stacklevel=3)
    except BaseException as error:  # a second Ctrl-C
        run.error = error
        raise
    finally:
        run_end(hooks, run)
    if run.error is not None:
        raise run.error
