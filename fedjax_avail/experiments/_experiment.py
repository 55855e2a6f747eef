"""The shape every named experiment shares, and the runner that writes its results.

An experiment is a name, a dict of default settings and a ``build(config) -> Setup`` function.
:func:`run` checks the settings, checks that the output directory can be written (before any
compute), simulates every algorithm of the setup under the same availability process and seed,
and writes ``metrics.csv``, ``config.json`` (the settings and their provenance),
``summary.json`` and ``curves.png`` into the output directory, each file atomically and after
every algorithm, so a crash or Ctrl-C keeps what finished; ``metrics.csv`` is also rewritten
at every evaluation while an algorithm runs. Each algorithm checkpoints into
``checkpoints/<name>/`` (unless ``checkpoint=False``); ``resume=True`` continues an interrupted
run bit-identically. :func:`run_together` runs several points of one experiment (a sweep's
learning rates) as one compiled program on the runs axis, each point written as its own run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from fedjax_avail import inputs, memory
from fedjax_avail._checks import NonNegative, check_int, check_optional_int, check_value
from fedjax_avail._io import atomic_write_text, check_writable_dir
from fedjax_avail._lock import DirectoryLock
from fedjax_avail._provenance import provenance
from fedjax_avail.algorithms import Algorithm
from fedjax_avail.availability import AvailabilityProcess
from fedjax_avail.callbacks import Checkpointing, CSVLogger, Evaluation, TensorBoard
from fedjax_avail.checkpoint import KEEP, fingerprint
from fedjax_avail.data import FederatedData
from fedjax_avail.engine import simulate
from fedjax_avail.experiments import _parts
from fedjax_avail.experiments._settings import CHOICES, MEANINGS, check_settings
from fedjax_avail.experiments._summary import summary_row
from fedjax_avail.history import History
from fedjax_avail.plotting import plot_histories, run_title
from fedjax_avail.results import DivergenceError, Interrupted, StalledError
from fedjax_avail.runs import check_processes, runs_layout, same, swept_values
from fedjax_avail.tasks import Task

# run()'s floor between checkpoints with its default checkpoint_every: a save costs ~70 ms
# however small the model, so the default digits-diurnal run (3 algorithms x 600 fast rounds,
# saved every 10 evaluations of 5 rounds) spent 2.7 s on 36 saves
DEFAULT_CHECKPOINT_SECONDS = 30.0


class Setup(NamedTuple):
    """Everything an experiment's algorithms run on."""

    task: Task
    train: FederatedData
    test: dict[str, np.ndarray] | None
    availability: AvailabilityProcess
    algorithms: dict[str, Algorithm]
    window: int  # rounds over which the final oscillation amplitude is measured (2E)
    summary: Callable[[History], dict[str, float]] | None = None  # extra summary columns
    x_axes: tuple[str, ...] = ("round",)  # history columns the curves are drawn against
    rounds: Mapping[str, int] = {}  # per-algorithm rounds instead of the setting rounds
    max_virtual_time: float | None = None  # every algorithm's virtual-time budget
    eval_every: Mapping[str, int] = {}  # per-algorithm eval_every instead of the setting's
    # the window as the availability process sets it (so that a dotted availability setting,
    # e.g. availability.period, moves it too); None: ``window`` as given
    window_of: Callable[[AvailabilityProcess], int] | None = None

    def rounds_of(self, name: str, config: Mapping[str, Any]) -> int:
        return int(self.rounds.get(name, config["rounds"]))

    def eval_every_of(self, name: str, config: Mapping[str, Any]) -> int:
        return int(self.eval_every.get(name, config["eval_every"]))


@dataclasses.dataclass(frozen=True)
class Experiment:
    """A named, versioned configuration.

    Attributes:
      name: the CLI name.
      description: one line, shown by ``fedjax-avail list``.
      defaults: every setting with its default; ``--set key=value`` may override any of them.
      build: ``config -> Setup``.
      measured: the recorded outcome of the default run and the command that produced it.
      meanings: setting -> one line on what it does here, where the shared ``MEANINGS`` line
        (``experiments/_settings.py``) does not fit this experiment.
      choices: setting -> its valid values, added to (or replacing) the shared ``CHOICES``.
      parts: the algorithms it can run, as data (name -> :class:`~fedjax_avail.experiments.
        _parts.Part`): the choices of its ``algorithms`` setting; a setting that feeds a field
        of one is checked by that field's annotation.

    Every experiment also has ``seeds`` (default ``()``: one run with ``seed``; several: one
    program on the runs axis, mean and std in the summary), and every field of its parts by a
    dotted name (``fedbuff.history``: :mod:`fedjax_avail.experiments._parts`).
    """

    name: str
    description: str
    defaults: Mapping[str, Any]
    build: Callable[[dict[str, Any]], Setup]
    measured: str = ""
    meanings: Mapping[str, str] = dataclasses.field(default_factory=dict)
    choices: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    parts: Mapping[str, _parts.Part] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if "seed" in self.defaults and "seeds" not in self.defaults:  # every experiment's
            object.__setattr__(self, "defaults", {**self.defaults, "seeds": ()})

    def setup(self, config: Mapping[str, Any]) -> Setup:
        """The experiment's parts under ``config`` (checked by :meth:`config`), its dotted
        settings applied to them."""
        setup = _parts.apply(self.build(dict(config)), config)
        if setup.window_of is not None:
            setup = setup._replace(window=setup.window_of(setup.availability))
        return setup

    def meaning(self, key: str) -> str:
        """One line on what setting ``key`` does ("" for a setting nobody described)."""
        return self.meanings.get(key, MEANINGS.get(key, ""))

    def all_choices(self) -> dict[str, tuple[str, ...]]:
        """Each choice-valued setting of this experiment -> its valid values."""
        own = {"algorithms": tuple(self.parts)} if self.parts else {}
        return {k: v for k, v in {**CHOICES, **own, **self.choices}.items()
                if k in self.defaults}

    def config(self, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The defaults with ``overrides`` applied, checked (unknown keys and values out of
        range are errors naming the setting)."""
        config = dict(self.defaults)
        for key, value in (overrides or {}).items():
            if key not in config and not _parts.is_dotted(key):
                raise ValueError(f"{self.name} has no setting {key!r}; settings: "
                                 f"{sorted(config)}, or a part's field by a dotted name "
                                 "(fedavg.client_lr, availability.period)")
            config[key] = value
        overrides = overrides or {}
        if overrides.get("beta") is not None and "clients_per_round" in overrides:
            raise ValueError("set either beta or clients_per_round, not both (beta sets "
                             "clients_per_round = round(beta * num_clients))")
        check_settings(config, self.defaults, self.all_choices(), _parts.feeds(self.parts))
        return config


def parse_value(text: str, default: Any) -> Any:
    """Parses ``--set`` text to the type of the default (bool, int, float, str, tuple of str).

    A default of None accepts ``none``, a number (int, else float) or any other text.
    """
    if isinstance(default, bool):
        if text.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"expected true/false, got {text!r}")
        return text.lower() in ("true", "1")
    if isinstance(default, int):
        return _number(int, text, "an integer")
    if isinstance(default, float):
        return _number(float, text, "a number")
    if isinstance(default, tuple):
        items = [item.strip() for item in text.split(",") if item.strip()]
        if items and all(item.lstrip("-").isdigit() for item in items):  # e.g. seeds=0,1,2
            return tuple(int(item) for item in items)
        return tuple(items)
    if default is None:
        if text.lower() == "none":
            return None
        for kind in (int, float):
            try:
                return kind(text)
            except ValueError:
                pass
    return text


def _number(kind: type, text: str, words: str) -> Any:
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f"expected {words}, got {text!r}") from None


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
    mesh: Any = None,
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
      mesh: a device mesh for ``simulate`` (e.g. a ``"cohort"`` axis: each round's cohort split
        over the devices; :func:`cohort_mesh`).
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
    mesh: Any = None,
    checkpoint: bool = True,
    keep_checkpoints: int = KEEP,
    tensorboard: bool = False,
    checkpoint_seconds: float | None = None,
    overwrite: bool = False,
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
        setups = _setups(experiment, configs)
        for config, setup in zip(configs, setups, strict=True):  # all, before the first trains
            check_algorithms(setup, config, seeds_of(config))
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
            point.out_dir = _write(point.out_dir, point.meta, point.per_seed, point.summary,
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


class ProgramShape(NamedTuple):
    """What points of an experiment must share to run in one compiled program.

    Attributes:
      settings: the point's settings other than real numbers (``float``), which must be equal.
      rest: a fingerprint of its setup's data, task, rounds and budget, which must be equal.
      algorithms: its algorithms, which may differ in real-valued fields only.
      availability: its availability process, which may differ in its ``run_parameters``.
    """

    settings: dict[str, Any]
    rest: str
    algorithms: dict[str, Algorithm]
    availability: AvailabilityProcess


def program_shape(config: Mapping[str, Any], setup: Setup) -> ProgramShape:
    """The :class:`ProgramShape` of a point (its checked ``config`` and its ``setup``)."""
    settings = {k: v for k, v in config.items() if type(v) is not float}
    rest = fingerprint(setup._replace(algorithms={}, availability=None, window=0,
                                      window_of=None))
    return ProgramShape(settings, rest, dict(setup.algorithms), setup.availability)


def shared_program(a: ProgramShape, b: ProgramShape) -> str | None:
    """None when points of shapes ``a`` and ``b`` can run in one compiled program (on the runs
    axis, :mod:`fedjax_avail.runs`), else why not, e.g. ``"setting local_steps differs (2, 5)"``.
    """
    for key in dict.fromkeys([*a.settings, *b.settings]):
        if not same(a.settings.get(key), b.settings.get(key)):
            return f"setting {key} differs ({a.settings.get(key)!r}, {b.settings.get(key)!r})"
    if a.rest != b.rest:
        return "their data, task, rounds or budget differ"
    if list(a.algorithms) != list(b.algorithms):
        return f"their algorithms differ ({list(a.algorithms)}, {list(b.algorithms)})"
    try:
        for name in a.algorithms:
            try:
                swept_values([a.algorithms[name], b.algorithms[name]])
            except ValueError as error:
                raise ValueError(f"{name}: {error}") from None
        check_processes([a.availability, b.availability])
    except ValueError as error:
        return str(error)
    return None


def _setups(experiment: Experiment, configs: Sequence[dict[str, Any]]) -> list[Setup]:
    """Each point's setup, the first point's data shared by all (one copy in memory).

    Raises:
      ValueError: points that cannot share one program (:func:`shared_program`'s reason).
    """
    setups = [experiment.setup(configs[0])]
    first = program_shape(configs[0], setups[0])
    for config in configs[1:]:
        setup = experiment.setup(config)
        why = shared_program(first, program_shape(config, setup))
        if why is not None:
            raise ValueError(f"these points cannot share one compiled program: {why}")
        setups.append(setup._replace(train=setups[0].train, test=setups[0].test))
    return setups


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


def seeds_of(config: Mapping[str, Any]) -> list[int]:
    """The seeds a configuration trains: its ``seeds``, else its one ``seed``."""
    return list(config["seeds"]) if config.get("seeds") else [config["seed"]]


# Settings a resumed run may change: more rounds (never fewer: ``simulate`` refuses that), and
# where the same data lives (its contents are in ``simulate``'s fingerprint).
RESUMABLE = ("rounds", "data_dir")


# What a run leaves in its output directory: a second run there must be asked for.
_RESULTS = ("metrics.csv", "config.json", "summary.json")


def check_fresh(out_dir: Path, resume: bool, overwrite: bool) -> list[str]:
    """Refuses to start a run (``resume`` False) in a folder holding an earlier run's results
    (its result files or a checkpoint) unless ``overwrite``; and ``resume`` together with
    ``overwrite``. Returns what of an earlier run it found."""
    if resume and overwrite:
        raise ValueError("--resume continues the run in --out and --overwrite replaces it; "
                         "choose one")
    found = [name for name in _RESULTS if (out_dir / name).exists()]
    if any(step.name.isdigit() for step in (out_dir / "checkpoints").glob("*/*")):
        found.append("checkpoints")
    if found and not resume and not overwrite:
        raise ValueError(f"{out_dir} already holds a run's results ({', '.join(found)}); "
                         "pass --overwrite (overwrite=True) to replace them, --resume to "
                         "continue that run, or choose another --out")
    return found


def resumable_settings(out_dir: Path, name: str, config: Mapping[str, Any],
                        resume: bool, program: list[str] | None = None) -> dict[str, Any]:
    """What ``checkpoints/settings.json`` records of this run (and, for a point of a shared
    program, ``program``: the folders of its points); with ``resume``, first refuses a folder
    with no run to resume and settings that differ from the recorded ones (naming them),
    before anything is loaded or compiled."""
    path = out_dir / "checkpoints" / "settings.json"
    now = json.loads(json.dumps({"experiment": name, **{
        k: v for k, v in config.items() if k not in RESUMABLE},
        **({"program": program} if program else {})}, default=str))
    if resume and not path.exists():
        raise ValueError(f"--resume: {out_dir} holds no run to resume (no checkpoints/"
                         "settings.json); run without --resume to start one")
    if resume:
        try:
            then = json.loads(path.read_text())
        except ValueError:
            raise ValueError(f"--resume: {path} is damaged (not JSON); delete {out_dir} "
                             "/checkpoints to start afresh") from None
        differ = sorted(k for k in {*now, *then} if now.get(k) != then.get(k))
        if differ:
            raise ValueError(
                f"--resume: {out_dir} holds a run with different settings: " + ", ".join(
                    f"{k} (was {then.get(k)!r}, now {now.get(k)!r})" for k in differ)
                + "; resume with the same settings, or choose another --out (or "
                "--overwrite to start afresh)")
    return now


def plan(experiment: Experiment, overrides: Mapping[str, Any] | None = None,
         mesh: Any = None, points: int = 1) -> list[dict]:
    """Everything :func:`run` checks before compute, and no compute: ``--dry-run``.

    Builds the experiment (loads its data, constructs every algorithm), runs ``simulate``'s
    argument checks for each algorithm and its memory estimate against this device (against
    ``mesh``'s devices, :func:`run`'s ``mesh``, when given), for ``points`` points of a sweep
    sharing the program (:func:`run_together`: ``points`` times the seeds on its runs axis).

    Returns:
      one row per algorithm: ``algorithm``, ``rounds``, ``seeds``, ``estimated_bytes``.

    Raises:
      ValueError, FileNotFoundError, MemoryError: what :func:`run` would raise before compute.
    """
    config = experiment.config(overrides)
    setup = experiment.setup(config)
    seeds = seeds_of(config)
    check_algorithms(setup, config, seeds)
    runs = len(seeds) * points
    rows = []
    for name, algorithm in setup.algorithms.items():
        rounds = setup.rounds_of(name, config)
        evaluation = _evaluation(setup, setup.eval_every_of(name, config), config)
        available = memory.available_bytes(mesh=mesh)
        estimate, _ = memory.fitting_estimate(  # simulate's choice of runs at once
            setup.task, setup.train, algorithm, setup.availability, available=available,
            runs=runs, runs_layout=runs_layout(mesh=mesh if runs > 1 else None),
            test_data=evaluation.test_arrays, mesh=mesh)
        memory.check_fits(estimate, available)
        rows.append({"algorithm": name, "rounds": rounds, "seeds": seeds,
                     "estimated_bytes": estimate.total})
    return rows


def check_algorithms(setup: Setup, config: Mapping[str, Any], seeds: list[int]) -> None:
    """``simulate``'s checks of every algorithm's arguments and evaluation, before the first
    trains; a refusal names the algorithm (``fedlaavg: clients_per_round must be ...``)."""
    for name, algorithm in setup.algorithms.items():
        try:
            inputs.check_simulate_args(setup.task, setup.train, algorithm, setup.availability,
                                       setup.rounds_of(name, config), seeds, "auto")
            _evaluation(setup, setup.eval_every_of(name, config), config).check(setup.task)
        except (TypeError, ValueError) as error:
            error.args = (f"{name}: {error}", *error.args[1:])
            raise


def _evaluation(setup: Setup, every: int, config: Mapping[str, Any]) -> Evaluation:
    """The evaluation of one of the experiment's algorithms (its ``eval_every``; the
    ``train_eval_examples`` setting where the experiment has one)."""
    return Evaluation(setup.test, every, train_examples=config.get("train_eval_examples"))


def _as_list(result) -> list:
    return result if isinstance(result, list) else [result]


def mean_history(histories: list[History]) -> History:
    """The row-by-row mean of the histories of several seeds (one history: itself)."""
    if len(histories) == 1:
        return histories[0]
    rows = []
    for group in zip(*(h.rows for h in histories), strict=False):
        rows.append({k: float(np.mean([row.get(k, np.nan) for row in group]))
                     for k in group[0]})
    return History(rows)


def csv_rows(per_seed: Mapping[str, list[History]], seeds: list[int] | None) -> list[dict]:
    """The rows of ``metrics.csv``: one per algorithm, seed and evaluation."""
    return [{"algorithm": name, **({"seed": seeds[i]} if seeds else {}), **row}
            for name, histories in per_seed.items() for i, history in enumerate(histories)
            for row in history]


def _write(out_dir: Path, meta, per_seed, summary, experiment, setup, plot: bool,
           seeds) -> Path:
    """Writes the result files (the figure only when ``plot``); if that fails, writes them to a
    fresh temporary directory instead (so finished work is never lost to an output error) and
    returns where they are."""
    try:
        _write_files(out_dir, meta, per_seed, summary, experiment, setup, plot, seeds)
        return out_dir
    except OSError as error:
        fallback = Path(tempfile.mkdtemp(prefix=f"fedjax-avail-{experiment.name}-"))
        _write_files(fallback, meta, per_seed, summary, experiment, setup, plot, seeds)
        print(f"fedjax-avail: could not write to {out_dir} ({error}); results saved in "
              f"{fallback}")
        return fallback


def _write_files(out_dir: Path, meta, per_seed, summary, experiment, setup, plot: bool,
                 seeds) -> None:
    """metrics.csv (one row per algorithm, seed and evaluation), config.json, summary.json and
    the figures (the mean over seeds, in a band from their minimum to their maximum)."""
    History(csv_rows(per_seed, seeds)).to_csv(out_dir / "metrics.csv")
    histories = {name: mean_history(h) for name, h in per_seed.items()}
    atomic_write_text(out_dir / "config.json", json.dumps(meta, indent=2, default=str) + "\n")
    atomic_write_text(out_dir / "summary.json", json.dumps(summary, indent=2) + "\n")
    if plot:
        for x in setup.x_axes:
            name = "curves.png" if x == "round" else f"curves_{x}.png"
            title = run_title(experiment.name, per_seed, len(seeds or [None]))
            plot_histories(histories, out_dir / name, title=title, x=x, spread=per_seed)
