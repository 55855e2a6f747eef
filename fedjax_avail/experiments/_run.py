"""Running an experiment: every algorithm under one availability process, its results written.

:func:`run` checks the settings, checks that the output directory can be written (before any
compute), simulates every algorithm of the setup under the same availability process and
seed, and writes ``metrics.csv``, ``config.json`` (the settings and their provenance),
``summary.json`` and ``curves.png`` into the output directory
(:mod:`fedjax_avail.experiments._folder`), each file atomically and after every algorithm, so
a crash or Ctrl-C keeps what finished; ``metrics.csv`` is also rewritten at every evaluation
while an algorithm runs. Each algorithm checkpoints into ``checkpoints/<name>/`` (unless
``checkpoint=False``); ``resume=True`` continues an interrupted run bit-identically.
:func:`run_together` runs several points of one experiment (a sweep's learning rates) as one
compiled program on the runs axis (:mod:`fedjax_avail.experiments._programs`), each point
written as its own run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedjax_avail import inputs, memory
from fedjax_avail._checks import NonNegative, check_int, check_optional_int, check_value
from fedjax_avail._io import atomic_write_text, check_writable_dir
from fedjax_avail._lock import DirectoryLock
from fedjax_avail._provenance import provenance
from fedjax_avail.callbacks import Checkpointing, CSVLogger, Evaluation, TensorBoard
from fedjax_avail.checkpoint import KEEP
from fedjax_avail.engine import simulate
from fedjax_avail.experiments._experiment import Experiment, Setup, seeds_of
from fedjax_avail.experiments._folder import (
    check_fresh,
    csv_rows,
    mean_history,
    resumable_settings,
    write_results,
)
from fedjax_avail.experiments._programs import program_setups
from fedjax_avail.experiments._summary import summary_row
from fedjax_avail.history import History
from fedjax_avail.results import DivergenceError, Interrupted, StalledError
from fedjax_avail.runs import runs_layout

# run()'s floor between checkpoints with its default checkpoint_every: a save costs ~70 ms
# however small the model, so the default digits-diurnal run (3 algorithms x 600 fast rounds,
# saved every 10 evaluations of 5 rounds) spent 2.7 s on 36 saves
DEFAULT_CHECKPOINT_SECONDS = 30.0


@dataclasses.dataclass
class RunOutcome:
    """What :func:`run` returns: per-algorithm histories (the mean over seeds), the summary
    rows, where the files are, and each algorithm's history per seed."""

    histories: dict[str, History]
    summary: list[dict[str, Any]]
    out_dir: Path | None
    per_seed: dict[str, list[History]] = dataclasses.field(default_factory=dict)


def run(
    experiment: Experiment,
    overrides: Mapping[str, Any] | None = None,
    out_dir: str | Path | None = None,
    progress: bool = True,
    *,
    resume: bool = False,
    checkpoint_every: int | None = None,
    mesh: Any = "auto",
    checkpoint: bool = True,
    keep_checkpoints: int = KEEP,
    tensorboard: bool = False,
    checkpoint_seconds: float | None = None,
    overwrite: bool = False,
) -> RunOutcome:
    """Runs every algorithm of an experiment and writes its results.

    A diverging algorithm, or an asynchronous one whose clock stalls, keeps the history it
    recorded and is marked ``diverged`` or ``stalled`` in the summary (with the error's
    words); the other algorithms still run.

    Args:
      experiment: the experiment.
      overrides: settings that replace the defaults.
      out_dir: where results and checkpoints go (None: nothing is written).
      progress: show progress bars.
      resume: continue from the checkpoints in ``out_dir`` (algorithms that finished are not
        run again); without it, old checkpoints there are removed first.
      checkpoint_every: rounds between checkpoints (default: every 10 evaluations, at least
        ``checkpoint_seconds`` apart).
      mesh: ``simulate``'s ``mesh``: a device mesh (e.g. a ``"cohort"`` axis: each round's
        cohort split over the devices; :func:`cohort_mesh`), None (one device) or ``"auto"``
        (default: on a CPU, every core where that wins).
      checkpoint: checkpoint each algorithm into ``out_dir/checkpoints/<name>/`` (needed by
        ``resume``).
      keep_checkpoints: how many of each algorithm's newest checkpoints to keep.
      tensorboard: also write TensorBoard events into ``out_dir/tensorboard/<name>/`` at every
        evaluation (needs tensorboardX, checked first).
      checkpoint_seconds: skip a checkpoint due sooner than this many seconds after the last
        (``simulate``'s); default ``DEFAULT_CHECKPOINT_SECONDS`` (30) with the default
        ``checkpoint_every``, 0 (every ``checkpoint_every`` rounds) with one given. The last
        round and an interrupted run are always saved.
      overwrite: replace the results of an earlier run in ``out_dir`` (without it, and without
        ``resume``, a folder holding ``metrics.csv``, ``config.json``, ``summary.json`` or
        checkpoints is refused).

    ``metrics.csv`` is rewritten at every evaluation while the algorithms run
    (:class:`fedjax_avail.callbacks.CSVLogger`); ``summary.json``'s ``seconds`` add up the
    wall time of every invocation that worked on an algorithm (``--resume``).

    Raises:
      ValueError: a bad setting, an ``out_dir`` that cannot be written, holds an earlier run
        (without ``overwrite`` or ``resume``) or no run to resume (``resume``), before compute.
      ImportError: ``tensorboard`` without tensorboardX (before compute).
      fedjax_avail.Interrupted: Ctrl-C; what finished is written and checkpointed first.
    """
    return run_together(
        experiment, [overrides or {}], [out_dir], progress, resume=resume,
        checkpoint_every=checkpoint_every, mesh=mesh, checkpoint=checkpoint,
        keep_checkpoints=keep_checkpoints, tensorboard=tensorboard,
        checkpoint_seconds=checkpoint_seconds, overwrite=overwrite)[0]


def run_together(
    experiment: Experiment,
    points: Sequence[Mapping[str, Any]],
    out_dirs: Sequence[str | Path | None],
    progress: bool = True,
    *,
    resume: bool = False,
    checkpoint_every: int | None = None,
    mesh: Any = "auto",
    checkpoint: bool = True,
    keep_checkpoints: int = KEEP,
    tensorboard: bool = False,
    checkpoint_seconds: float | None = None,
    overwrite: bool = False,
    check_read: bool = True,
) -> list[RunOutcome]:
    """:func:`run` at several points (settings) of one experiment that share one compiled
    program: each algorithm is one ``simulate`` call whose runs axis holds every point's seeds
    (:mod:`fedjax_avail.runs`), and each point's results are written to its own folder as its
    separate :func:`run` writes them.

    The points may differ only in real-valued hyperparameters of their algorithms (learning
    rates, ``mu``: fields annotated ``float``) and in the availability parameters a process
    holds in its state (:func:`shared_program` says why two points cannot share). A point's
    ``seconds`` and ``compile_seconds`` are its program's, shared with the other points; its
    checkpoints are kept in the first point's folder (``checkpoints/<algorithm>``), and each
    point's ``checkpoints/settings.json`` names the program's folders, so only the same group
    resumes them. A point whose run diverges or stalls is marked so and its record ends where
    its own run's would (a diverged run: at the first evaluation at or after the round it
    diverged in; with a ``checkpoint_every`` that is not a multiple of ``eval_every`` its own
    run would stop at that checkpoint instead); the other points run to the end.

    Args:
      experiment: the experiment.
      points: each point's overrides of the defaults.
      out_dirs: each point's output folder (all None: nothing is written).
      progress, resume, checkpoint_every, mesh, checkpoint, keep_checkpoints, tensorboard,
        checkpoint_seconds, overwrite: as :func:`run`'s, for every point.
      check_read: refuse a setting changed from its default that none of ``points`` reads
        (:meth:`Experiment.check_read`); :func:`run_sweep` checks all its points at once
        instead, as a program holds only some of them.

    Returns:
      one :class:`RunOutcome` per point.

    Raises:
      ValueError: as :func:`run`; also points that cannot share one program.
    """
    configs = [experiment.config(overrides) for overrides in points]
    if len(out_dirs) != len(configs):
        raise ValueError(f"out_dirs must give one folder per point: {len(configs)} points, "
                         f"{len(out_dirs)} folders")
    check_optional_int("checkpoint_every", checkpoint_every)
    check_int("keep_checkpoints", keep_checkpoints, 1)
    if checkpoint_seconds is None:
        checkpoint_seconds = DEFAULT_CHECKPOINT_SECONDS if checkpoint_every is None else 0.0
    check_value("checkpoint_seconds", checkpoint_seconds, NonNegative)
    if resume and not checkpoint:
        raise ValueError("resume=True continues from checkpoints; it cannot go with "
                         "checkpoint=False")
    if len({d is None for d in out_dirs}) > 1:
        raise ValueError("out_dirs: give every point a folder, or none (None)")
    if tensorboard and out_dirs[0] is None:
        raise ValueError("tensorboard=True needs an out_dir to write the events to")
    dirs = [None if d is None else check_writable_dir(d, "out_dir") for d in out_dirs]
    if out_dirs[0] is not None and len(set(dirs)) < len(dirs):
        raise ValueError("out_dirs: two points would write to one folder")
    program = [d.name for d in dirs] if len(dirs) > 1 and dirs[0] is not None else None
    if tensorboard:
        TensorBoard(dirs[0] / "tensorboard")  # tensorboardX is importable, before any compute
    # One run per output directory; the settings a resume must share are checked first.
    with contextlib.ExitStack() as locks:
        for d in dirs:
            if d is not None:
                locks.enter_context(DirectoryLock(d, "out_dir"))
        earlier = [d is not None and check_fresh(d, resume, overwrite) for d in dirs]
        settings = [d is not None and resumable_settings(d, experiment.name, config, resume,
                                                         program)
                    for d, config in zip(dirs, configs, strict=True)]
        setups = program_setups(experiment, configs)
        for config, setup in zip(configs, setups, strict=True):  # all, before the first trains
            check_algorithms(setup, config, seeds_of(config))
        if check_read:
            experiment.check_read(configs, [setup.read for setup in setups])
        for d, found, recorded in zip(dirs, earlier, settings, strict=True):
            if d is None:
                continue
            if overwrite and found:  # an earlier run's files this one may not write again
                shutil.rmtree(d / "checkpoints", ignore_errors=True)
                for name in setups[0].algorithms:
                    shutil.rmtree(d / "tensorboard" / name, ignore_errors=True)
                for figure in d.glob("curves*.png"):
                    figure.unlink()
            path = d / "checkpoints" / "settings.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, json.dumps(recorded, indent=2, sort_keys=True) + "\n")
        return _run_program(experiment, configs, setups, dirs, progress, resume=resume,
                            checkpoint_every=checkpoint_every, mesh=mesh,
                            checkpoint=checkpoint, keep_checkpoints=keep_checkpoints,
                            tensorboard=tensorboard, checkpoint_seconds=checkpoint_seconds)


class _Point:
    """One point of a program as it runs: its settings, parts, folder and what it recorded."""

    def __init__(self, experiment: Experiment, config: dict[str, Any], setup: Setup,
                 out_dir: Path | None, first_run: int):
        self.config, self.setup, self.out_dir = config, setup, out_dir
        self.seeds = list(config["seeds"]) if config.get("seeds") else None
        self.runs = range(first_run, first_run + len(seeds_of(config)))  # in the program
        self.meta = {"experiment": experiment.name, **config, "provenance": provenance()}
        self.histories: dict[str, History] = {}
        self.per_seed: dict[str, list[History]] = {}
        self.summary: list[dict[str, Any]] = []

    def names(self, single: bool) -> dict[int, dict[str, Any]]:
        """Its runs' indices in the program -> the columns naming their rows (CSVLogger)."""
        if single:
            return {self.runs[0]: {}}
        return {i: {"seed": seed} for i, seed in zip(self.runs, self.seeds, strict=True)}


def _run_program(experiment, configs, setups, dirs, progress, *, resume, checkpoint_every,
                 mesh, checkpoint, keep_checkpoints, tensorboard, checkpoint_seconds
                 ) -> list[RunOutcome]:
    """Every algorithm of ``setups`` once, all points' runs in one ``simulate`` call."""
    points, total = [], 0
    for config, setup, out_dir in zip(configs, setups, dirs, strict=True):
        points.append(_Point(experiment, config, setup, out_dir, total))
        total += len(points[-1].runs)
    single = len(points) == 1 and points[0].seeds is None  # no runs axis: as ever
    main, config = points[0], configs[0]

    def record(point, name, status, results, start, stopped, plot):
        point.per_seed[name] = [r.history for r in results]
        point.histories[name] = mean_history(point.per_seed[name])
        point.summary.append(summary_row(name, status, results, point.setup, start, stopped,
                                         point.seeds))
        if point.out_dir is not None:
            point.out_dir = write_results(point.out_dir, point.meta, point.per_seed, point.summary,
                                   experiment, point.setup, plot, point.seeds)

    for name in main.setup.algorithms:
        eval_every = main.setup.eval_every_of(name, config)
        callbacks = [_evaluation(main.setup, eval_every, config)]
        if main.out_dir is not None:
            checkpoints = main.out_dir / "checkpoints" / name
            if not resume:
                shutil.rmtree(checkpoints, ignore_errors=True)
            if checkpoint:
                callbacks.append(Checkpointing(
                    checkpoints, every=checkpoint_every or 10 * eval_every,
                    keep=keep_checkpoints, seconds=checkpoint_seconds))
        for point in points:
            if point.out_dir is None:
                continue
            runs = None if single else point.names(point.seeds is None)
            callbacks.append(CSVLogger(point.out_dir / "metrics.csv", {"algorithm": name},
                                       csv_rows(point.per_seed, point.seeds), runs=runs))
            if tensorboard:
                callbacks.append(TensorBoard(point.out_dir / "tensorboard" / name, runs=runs))
        if single:
            seed, algorithm, process = (config["seed"], main.setup.algorithms[name],
                                        main.setup.availability)
        else:
            seed = [s for point in points for s in seeds_of(point.config)]
            algorithm = [point.setup.algorithms[name] for point in points for _ in point.runs]
            process = [point.setup.availability for point in points for _ in point.runs]
        start = time.perf_counter()
        try:
            result = simulate(
                main.setup.task, main.setup.train, algorithm, process,
                rounds=main.setup.rounds_of(name, config), seed=seed,
                max_virtual_time=main.setup.max_virtual_time, progress=progress, desc=name,
                mesh=mesh, callbacks=callbacks,
            )
            kind, words, ended = None, "", [None] * total
        except (DivergenceError, StalledError) as error:  # recorded; the next algorithm runs
            # its words, not the error: its traceback would keep the run's arrays alive
            result, words = error.result, str(error)
            kind = "diverged" if isinstance(error, DivergenceError) else "stalled"
            ended = error.rounds if len(error.rounds) == total else [error.round] * total
        except Interrupted as interrupted:
            results = _as_list(interrupted.result)
            for point in points:
                mine = [results[i] for i in point.runs]
                record(point, name, "interrupted", mine, start,
                       int(mine[0].history.rows[-1]["round"]), plot=True)
            raise
        results = _as_list(result)
        last = len(main.per_seed) + 1 == len(main.setup.algorithms)
        for point in points:
            mine = [results[i] for i in point.runs]
            bad = {seed: ended[i] for i, seed in zip(point.runs, seeds_of(point.config),
                                                     strict=True) if ended[i] is not None}
            status, stopped = "ok", None
            if bad:
                stopped = min(bad.values())
                status = f"{kind}: {words if len(points) == 1 else _failed(kind, point, bad)}"
                if kind == "diverged" and point.seeds is None:  # where its own run stops
                    mine = [_until_diverged(mine[0], stopped)]
            record(point, name, status, mine, start, stopped, plot=last)
    return [RunOutcome(p.histories, p.summary, p.out_dir, p.per_seed) for p in points]


def _failed(kind: str, point: _Point, bad: Mapping[int, int]) -> str:
    """Why a point that shared its program diverged or stalled (``kind``), naming its runs by
    their seeds and rounds (``bad``: seed -> round)."""
    what = ("the global model, a state vector (e.g. a client's loss) or the training loss "
            "became NaN/Inf" if kind == "diverged" else "an asynchronous update could not "
            "gather its K results (no client available)")
    where = ", ".join(f"{'' if point.seeds is None else f'seed {seed} '}in round {r}"
                      for seed, r in bad.items())
    tail = ("; try a smaller client_lr or server_lr, and check the data" if kind == "diverged"
            else "")
    return f"{what}: {where}{tail}"


def _until_diverged(result: Any, round_index: int) -> Any:
    """``result`` with its history cut after the first evaluation at or after
    ``round_index``: a diverged run's last row when it runs alone."""
    rows = result.history.rows
    end = next((i for i, row in enumerate(rows) if row["round"] >= round_index), len(rows) - 1)
    return dataclasses.replace(result, history=History(rows[:end + 1]))


def plan(experiment: Experiment, overrides: Mapping[str, Any] | None = None,
         mesh: Any = "auto", points: int = 1, check_read: bool = True) -> list[dict]:
    """Everything :func:`run` checks before compute, and no compute: ``--dry-run``.

    Builds the experiment (loads its data, constructs every algorithm), runs ``simulate``'s
    argument checks for each algorithm and its memory estimate against this device (against
    ``mesh``'s devices, :func:`run`'s ``mesh``, when given), for ``points`` points of a sweep
    sharing the program (:func:`run_together`: ``points`` times the seeds on its runs axis).
    ``check_read``: refuse a setting changed from its default that the run does not read
    (False for a sweep's program, whose sweep checks its points together).

    Returns:
      one row per algorithm: ``algorithm``, ``rounds``, ``seeds``, ``estimated_bytes``.

    Raises:
      ValueError, FileNotFoundError, MemoryError: what :func:`run` would raise before compute.
    """
    config = experiment.config(overrides)
    setup = experiment.setup(config)
    seeds = seeds_of(config)
    check_algorithms(setup, config, seeds)
    if check_read:
        experiment.check_read([config], [setup.read])
    runs = len(seeds) * points
    rows = []
    for name, algorithm in setup.algorithms.items():
        rounds = setup.rounds_of(name, config)
        evaluation = _evaluation(setup, setup.eval_every_of(name, config), config)
        devices = memory.fitting_mesh(  # simulate's choice of devices
            mesh, setup.task, setup.train, algorithm, setup.availability,
            several=points > 1 or bool(config.get("seeds")),  # as run() gives simulate
            test_data=evaluation.test_arrays)
        available = memory.available_bytes(mesh=devices)
        estimate, _ = memory.fitting_estimate(  # simulate's choice of runs at once
            setup.task, setup.train, algorithm, setup.availability, available=available,
            runs=runs, runs_layout=runs_layout(mesh=devices if runs > 1 else None),
            test_data=evaluation.test_arrays, mesh=devices)
        memory.check_fits(estimate, available)
        rows.append({"algorithm": name, "rounds": rounds, "seeds": seeds,
                     "estimated_bytes": estimate.total,
                     "devices": 1 if devices is None else int(devices.size)})
    return rows


def check_algorithms(setup: Setup, config: Mapping[str, Any], seeds: list[int]) -> None:
    """``simulate``'s checks of every algorithm's arguments and evaluation, before the first
    trains; a refusal names the algorithm (``fedlaavg: clients_per_round must be ...``)."""
    for name, algorithm in setup.algorithms.items():
        try:
            inputs.check_simulate_args(setup.task, setup.train, algorithm, setup.availability,
                                       setup.rounds_of(name, config), seeds, "auto")
            _evaluation(setup, setup.eval_every_of(name, config), config).check(
                setup.task, setup.train)
        except (TypeError, ValueError) as error:
            error.args = (f"{name}: {error}", *error.args[1:])
            raise


def _evaluation(setup: Setup, every: int, config: Mapping[str, Any]) -> Evaluation:
    """The evaluation of one of the experiment's algorithms (its ``eval_every``; the
    ``train_eval_examples`` setting where the experiment has one)."""
    return Evaluation(setup.test, every, train_examples=config.get("train_eval_examples"))


def _as_list(result) -> list:
    return result if isinstance(result, list) else [result]


