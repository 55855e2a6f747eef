"""Sweeps: one experiment run under several settings, laid out like the paper's figure grids."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fedjax_avail._io import atomic_write_text, check_writable_dir
from fedjax_avail._lock import DirectoryLock
from fedjax_avail._provenance import provenance
from fedjax_avail.experiments import _parts
from fedjax_avail.experiments._compare import read_runs
from fedjax_avail.experiments._experiment import Experiment, _text, seeds_of
from fedjax_avail.experiments._folder import check_fresh, csv_rows, resumable_settings
from fedjax_avail.experiments._programs import (
    ProgramShape,
    fixed_settings,
    program_shape,
    shared_program,
)
from fedjax_avail.experiments._run import RunOutcome, check_algorithms, run_together
from fedjax_avail.history import History
from fedjax_avail.plotting import plot_grid, plot_histories, run_title
from fedjax_avail.runs import same

# FedLaAvg Fig. 5/9 and 7/11 vary N (beta = 0.1) and beta (N = 1000) without giving the values
# (spec sec. 4.4); these span the text's N = 200 and the defaults N = 1000, beta = 0.1. K is
# round(beta * N) of the N actually run, so the labels stay true under --set num_clients=...
N_SETTINGS = {f"N={n}": dict(num_clients=n, beta=0.1) for n in (200, 500, 1000)}
BETA_SETTINGS = {f"beta={b}": dict(beta=b) for b in (0.05, 0.1, 0.2, 0.5)}
# A user's setting that a panel's own setting would overwrite: refused, not silently dropped.
_CONFLICTS = {"beta": ("beta", "clients_per_round"), "clients_per_round": ("beta",
                                                                           "clients_per_round")}


@dataclasses.dataclass(frozen=True)
class Sweep:
    """An experiment run once per setting, e.g. FedLaAvg Fig. 4's five (E, D) panels.

    Attributes:
      name: the CLI name.
      description: one line.
      base: the experiment each setting overrides.
      settings: panel label -> overrides of ``base``'s settings.
      defaults: overrides applied to every panel (``--set`` may change these and any setting of
        ``base`` that the panels do not set themselves).
      overlay: draw every setting as one curve in a single panel (for one-algorithm sweeps such
        as Fig. 5's N and beta); otherwise one column per setting.
      measured: where its recorded outcome is: the page and section that show it, and the
        results folder under ``docs/results/`` its tables are generated from.
    """

    name: str
    description: str
    base: Experiment
    settings: Mapping[str, Mapping[str, Any]]
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    overlay: bool = False
    measured: str = ""

    def all_defaults(self) -> dict[str, Any]:
        """Every setting ``--set`` accepts, with its value before the panels' overrides."""
        return {**self.base.defaults, **self.defaults}

    def check_read(self, panels: Mapping[str, Mapping[str, Any]]) -> None:
        """Refuses a setting changed from its default that no panel reads
        (:meth:`~fedjax_avail.experiments.Experiment.check_read`, every panel built: its data
        loaded); one that some panel reads is kept (``mu`` in a sweep over
        ``algorithms=fedavg`` and ``fedprox``). :func:`run_sweep` calls it before the first
        panel trains.

        Args:
          panels: panel label -> its overrides of ``base`` (:func:`sweep_settings`).
        """
        configs = [self.base.config(panel) for panel in panels.values()]
        # panels that differ only in real numbers (learning rates, mu) read the same settings:
        # one of them is built
        distinct = {_fixed_key(c): c for c in configs}
        self.base.check_read(configs, [self.base.setup(c).read for c in distinct.values()])


def sweep_settings(sweep: Sweep, overrides: Mapping[str, Any] | None = None
                   ) -> dict[str, dict[str, Any]]:
    """Each panel's overrides of ``sweep.base``: the sweep's defaults, the user's ``overrides``,
    the panel's own settings; every panel's configuration checked.

    Raises:
      ValueError: an override of a setting that the panels set themselves (e.g. ``E`` in the
        Fig. 4 sweep), or a bad setting.
    """
    overrides = dict(overrides or {})
    for label, setting in sweep.settings.items():
        for key in overrides:
            clash = [k for k in _CONFLICTS.get(key, (key,)) if k in setting]
            if clash:
                raise ValueError(f"setting {key} cannot be changed in {sweep.name}: its panels "
                                 f"set {clash[0]} themselves (panel {label!r}: {dict(setting)})")
    panels = {label: {**sweep.defaults, **overrides, **setting}
              for label, setting in sweep.settings.items()}
    for panel in panels.values():
        sweep.base.config(panel)
    _check_parts(sweep, panels)
    return panels


def with_grid(experiment: Experiment | Sweep, values: Mapping[str, Sequence[Any]]) -> Sweep:
    """``experiment`` run at every point of the grid ``values`` (setting -> its values, the
    product of all): ``--sweep lr=0.01,0.1 --sweep E=10,20`` is 4 runs. On a :class:`Sweep`
    each of its panels runs at every point.

    Raises:
      ValueError: an empty list of values, a value given twice, or a swept setting that a
        sweep's own panels set.
    """
    for key, options in values.items():
        if not options:
            raise ValueError(f"--sweep {key}: no values (give them as {key}=V1,V2,...)")
        if len({str(v) for v in options}) != len(options):
            raise ValueError(f"--sweep {key}: a value is given twice: {list(options)}")
    points = {", ".join(f"{k}={_text(v)}" for k, v in zip(values, combo, strict=True)):
              dict(zip(values, combo, strict=True))
              for combo in itertools.product(*values.values())}
    if isinstance(experiment, Experiment):
        return Sweep(experiment.name, experiment.description, experiment, points)
    for label, setting in experiment.settings.items():
        clash = [k for k in values if k in setting]
        if clash:
            raise ValueError(f"--sweep {clash[0]}: the panels of {experiment.name} set it "
                             f"themselves (panel {label!r}: {dict(setting)})")
    settings = {f"{label}, {point}": {**setting, **values_}
                for label, setting in experiment.settings.items()
                for point, values_ in points.items()}
    return dataclasses.replace(experiment, settings=settings, overlay=False)


def run_sweep(
    sweep: Sweep,
    overrides: Mapping[str, Any] | None = None,
    out_dir: str | Path | None = None,
    progress: bool = True,
    *,
    resume: bool = False,
    overwrite: bool = False,
    best: str = "final_test_accuracy",
    together: bool = True,
    checkpoint_every: int | None = None,
    mesh: Any = "auto",
    **run_options: Any,
) -> dict[str, RunOutcome]:
    """Runs every panel; writes ``<label>/`` per panel, plus ``metrics.csv`` (every panel's
    rows with one column per setting the panels vary, named after it), ``summary.json``
    (every panel's summary rows, the varied settings, ``best``: whether the row is its
    algorithm's best panel) and ``grid.png`` (training loss and test accuracy of every
    panel). ``run_options`` (``checkpoint``, ``keep_checkpoints``, ``checkpoint_seconds``,
    ``tensorboard``) go to each program's :func:`~fedjax_avail.experiments.run_together`.

    Panels that differ only in real-valued hyperparameters (learning rates, ``mu``, an
    availability process's parameters: :func:`programs`) run as one compiled program, their
    runs on one runs axis (:func:`~fedjax_avail.experiments.run_together`); each panel's
    results equal its separate run's (bit for bit on a CPU when the separate run trains on one
    device, up to float reordering when ``mesh="auto"`` splits its cohort over the cores; its
    ``seconds`` are the program's).

    Args:
      best: what makes a panel an algorithm's best: ``final_test_accuracy`` (highest),
        ``final_train_loss`` (lowest), or ``time_to=ACC`` (the least mean over the seeds of
        each seed's virtual time, rounds where the run has no clock, to a test accuracy of ACC,
        a seed that never gets there counting as its run's end; a point where no seed gets there
        is never best): :func:`criterion`. :func:`rescore_sweep` picks again by another.
      resume: continue every panel that has checkpoints; start the others.
      overwrite: replace an earlier sweep's results in ``out_dir``.
      together: run the panels that can share a compiled program in one (False: every panel
        its own program, one after the other: ``--separate-programs``). A resumed sweep runs
        its started panels in the programs they started in, whatever ``together``.

    Raises:
      ValueError: an override of a setting that the panels set themselves (e.g. ``E`` in the
        Fig. 4 sweep), a bad setting or ``best``, or an ``out_dir`` that cannot be written,
        holds an earlier run (without ``overwrite`` or ``resume``) or none to resume
        (``resume``), before compute.
    """
    score = criterion(best)
    panels = sweep_settings(sweep, overrides)
    sweep.check_read(panels)
    shared = {**sweep.defaults, **dict(overrides or {})}
    if out_dir is not None:
        out_dir = check_writable_dir(out_dir, "out_dir")
    lock = DirectoryLock(out_dir, "out_dir") if out_dir is not None else contextlib.nullcontext()
    with lock:  # one sweep per output directory (each panel also locks its own)
        dirs = {label: None if out_dir is None else Path(out_dir) / _slug(label)
                for label in panels}
        groups = _groups(sweep, panels, dirs, together, resume)
        if out_dir is not None:
            _check_sweep_dir(out_dir, dirs, resume, overwrite)
            if resume:  # every started program resumes as it started, before compute
                _check_resumable(sweep, panels, dirs, groups)
        varied = list(dict.fromkeys(k for setting in sweep.settings.values() for k in setting))
        done: dict[str, RunOutcome] = {}
        for labels in groups:
            first = dirs[labels[0]]
            started = first is not None and (first / "checkpoints" / "settings.json").exists()
            results = run_together(sweep.base, [panels[label] for label in labels],
                                   [dirs[label] for label in labels], progress,
                                   check_read=False,  # sweep.check_read checked them all
                                   resume=resume and started,
                                   overwrite=overwrite or (resume and not started),
                                   checkpoint_every=checkpoint_every, mesh=mesh, **run_options)
            done.update(zip(labels, results, strict=True))
            outcomes = {label: done[label] for label in panels if label in done}
            if out_dir is not None:  # after every program: what finished is never lost
                _write_tables(out_dir, sweep, outcomes, varied, score)
        outcomes = {label: done[label] for label in panels}
        if out_dir is not None:
            first = sweep.base.config(next(iter(panels.values())))
            common = {k: v for k, v in first.items() if k not in varied}
            atomic_write_text(out_dir / "config.json", json.dumps(
                {"sweep": sweep.name, "overrides": shared, "settings": sweep.settings,
                 "shared": common, "best": best, "provenance": provenance()}, indent=2,
                default=str) + "\n")
            title = sweep_title(sweep, panels, outcomes)
            if sweep.overlay:
                curves = {f"{label} ({name})": history for label, o in outcomes.items()
                          for name, history in o.histories.items()}
                spread = {f"{label} ({name})": seeds for label, o in outcomes.items()
                          for name, seeds in o.per_seed.items()}
                plot_histories(curves, out_dir / "grid.png", title=title, spread=spread)
            else:
                plot_grid({label: o.histories for label, o in outcomes.items()},
                          out_dir / "grid.png", title=title)
    return outcomes


def programs(sweep: Sweep, panels: Mapping[str, Mapping[str, Any]]) -> list[list[str]]:
    """The panels by the compiled program they share, in panel order.

    Panels whose settings differ only in real numbers and whose parts differ only where one
    program can vary them (:func:`~fedjax_avail.experiments.shared_program`: real-valued
    hyperparameters of the algorithms such as ``lr`` or ``fedavg.mu``, availability
    parameters that a process holds in its state such as ``availability.p_on``) share one; a
    panel that differs in anything else (an integer such as ``local_steps``, an option, the
    data) gets its own. E.g. ``--sweep lr=0.01,0.1 --sweep local_steps=2,5`` is two programs
    of two panels each.

    Args:
      sweep: the sweep.
      panels: panel label -> its overrides of ``sweep.base`` (:func:`sweep_settings`).
    """
    configs = {label: sweep.base.config(panel) for label, panel in panels.items()}
    candidates: dict[str, list[str]] = {}  # by the settings that are not real numbers
    for label, config in configs.items():
        candidates.setdefault(_fixed_key(config), []).append(label)
    groups = []
    for labels in candidates.values():
        shared: list[tuple[ProgramShape, list[str]]] = []  # each program's first shape
        for label in labels:
            shape = (program_shape(configs[label], sweep.base.setup(configs[label]))
                     if len(labels) > 1 else None)
            home = next((group for first, group in shared
                         if shape is not None and shared_program(first, shape) is None), None)
            if home is None:
                shared.append((shape, [label]))
            else:
                home.append(label)
        groups += [group for _, group in shared]
    order = list(panels)
    return sorted(groups, key=lambda group: order.index(group[0]))


def _fixed_key(config: Mapping[str, Any]) -> str:
    """``config``'s settings other than real numbers (:func:`fixed_settings`) as one text:
    points with the same key read the same settings and may share a program."""
    return json.dumps(fixed_settings(config), sort_keys=True, default=str)


def _check_parts(sweep: Sweep, panels: Mapping[str, Mapping[str, Any]]) -> None:
    """Before the first panel trains: every panel's dotted settings applied to its own parts
    and its algorithms checked; a dotted setting of a field that the panels' own settings vary
    (``availability.period`` in the Fig. 4 sweep over E) is refused, as a short one is."""
    configs = {label: sweep.base.config(panel) for label, panel in panels.items()}
    dotted = dict.fromkeys(k for config in configs.values() for k in config
                           if _parts.is_dotted(k))
    if not dotted:
        return
    groups: dict[str, list[dict[str, Any]]] = {}  # panels by their undotted configuration
    for config in configs.values():
        plain = {k: v for k, v in config.items() if not _parts.is_dotted(k)}
        groups.setdefault(json.dumps(plain, sort_keys=True, default=str), []).append(config)
    leaves = []  # each group's parts built once (and let go before the next is built)
    for group in groups.values():
        built = sweep.base.build({k: v for k, v in group[0].items() if not _parts.is_dotted(k)})
        for config in group:
            check_algorithms(_parts.apply(built, config), config, seeds_of(config))
        leaves.append(_parts.leaf_values(built))
    varied = {path for path in leaves[0] if any(
        not same(other.get(path), leaves[0][path]) for other in leaves[1:])}
    for key in dotted:
        hit = [path for path in varied if path == key or path.startswith(key + ".")]
        if hit:
            raise ValueError(f"setting {key}: the panels of {sweep.name} set {hit[0]} "
                             "themselves (it differs from panel to panel)")


def _groups(sweep: Sweep, panels: Mapping[str, Mapping[str, Any]],
            dirs: Mapping[str, Path | None], together: bool, resume: bool) -> list[list[str]]:
    """The programs the panels run in, in panel order: with ``resume``, a started panel's as its
    ``checkpoints/settings.json`` records it; the others' by :func:`programs` (``together``)
    or one each."""
    by_name = {path.name: label for label, path in dirs.items() if path is not None}
    groups: list[list[str]] = []
    for label, path in dirs.items():
        settings = None if path is None else path / "checkpoints" / "settings.json"
        if not resume or settings is None or not settings.exists() or any(
                label in group for group in groups):
            continue
        try:
            names = json.loads(settings.read_text()).get("program") or [path.name]
        except (ValueError, AttributeError):  # damaged: resumable_settings names it
            names = [path.name]
        missing = [name for name in names if name not in by_name]
        if missing:
            raise ValueError(f"--resume: the point {label} ran in one program with "
                             f"{', '.join(missing)}, which this sweep does not have; resume "
                             "with the points it started with (new ones may be added), or "
                             "--overwrite")
        groups.append([by_name[name] for name in names])
    rest = {label: panel for label, panel in panels.items()
            if not any(label in group for group in groups)}
    if rest:
        groups += programs(sweep, rest) if together else [[label] for label in rest]
    order = list(panels)
    return sorted(groups, key=lambda group: order.index(group[0]))


def _check_resumable(sweep: Sweep, panels: Mapping[str, Mapping[str, Any]],
                     dirs: Mapping[str, Path], groups: list[list[str]]) -> None:
    """Refuses to resume a program of which some points started and others did not, or a
    started point whose settings or program (the folders it shares it with) changed."""
    for labels in groups:
        started = [(dirs[label] / "checkpoints" / "settings.json").exists() for label in labels]
        if any(started) and not all(started):
            raise ValueError(
                f"--resume: the points {', '.join(labels)} run as one program, but only "
                f"{', '.join(label for label, s in zip(labels, started, strict=True) if s)} "
                "started (was the sweep started with other points, or with "
                "--separate-programs?); resume it as it was started, or --overwrite")
        program = [dirs[label].name for label in labels] if len(labels) > 1 else None
        for label in labels if all(started) else []:
            resumable_settings(dirs[label], sweep.base.name, sweep.base.config(panels[label]),
                               True, program)


def _check_sweep_dir(out_dir: Path, dirs: Mapping[str, Path], resume: bool,
                     overwrite: bool) -> None:
    """:func:`check_fresh` for the sweep's own files and each panel's folder; ``resume``
    needs at least one panel that started."""
    check_fresh(out_dir, resume, overwrite)
    for path in dirs.values():
        check_fresh(path, resume, overwrite)
    if resume and not any((p / "checkpoints" / "settings.json").exists()
                          for p in dirs.values()):
        raise ValueError(f"--resume: {out_dir} holds no panel of this sweep to resume; run "
                         "without --resume to start it")


def criterion(best: str) -> Callable[[Mapping[str, Any], Sequence[History]], float | None]:
    """``best`` as ``(summary row, the row's runs: one History per seed) -> score`` (higher is
    better; None: no score), naming what is wrong with it otherwise.

    ``final_test_accuracy`` and ``final_train_loss`` score the summary row (the mean over the
    seeds). ``time_to=ACC`` scores minus the mean over the seeds of each seed's own time to ACC:
    the virtual time (the round where the run has no clock) of its first evaluation with test
    accuracy >= ACC, a seed that never gets there counting as the end of its run (its last
    evaluation); None when no seed gets there. With every seed there, that is the mean the
    time-to-accuracy tables print. The mean curve over the seeds is not what is scored: under a
    time budget it keeps only the rounds every seed recorded, and seeds that oscillate above and
    below ACC at different times can each pass ACC while their mean never does.
    """
    if best == "final_test_accuracy":
        return lambda row, runs: row.get("final_test_accuracy")
    if best == "final_train_loss":
        return lambda row, runs: (None if row.get("final_train_loss") is None
                                  else -row["final_train_loss"])
    key, _, target = best.partition("=")
    try:
        accuracy = float(target)
    except ValueError:
        accuracy = math.nan
    if key != "time_to" or not 0 < accuracy <= 1:
        raise ValueError(f"best must be final_test_accuracy, final_train_loss or time_to=ACC "
                         f"with ACC in (0, 1], got {best!r}")

    def time_to(row, runs: Sequence[History]) -> float | None:
        times = [_time_to(history, accuracy) for history in runs]
        if all(t is None for t in times):
            return None
        return -statistics.fmean(_x(history.rows[-1]) if t is None else t
                                 for t, history in zip(times, runs, strict=True))

    return time_to


def _time_to(history: History, accuracy: float) -> float | None:
    """The x (:func:`_x`) of ``history``'s first evaluation at test accuracy >= ``accuracy``."""
    return next((_x(r) for r in history.rows
                 if r.get("test_accuracy") is not None and r["test_accuracy"] >= accuracy), None)


def _x(row: Mapping[str, Any]) -> float:
    """A row's virtual time (round 0's, NaN: 0), or its round where the run has no clock."""
    if "virtual_time" not in row:
        return float(row["round"])
    value = float(row["virtual_time"])
    return value if math.isfinite(value) else 0.0


def _write_tables(out_dir: Path, sweep: Sweep, outcomes: Mapping[str, RunOutcome],
                  varied: list[str], score) -> None:
    """The sweep's ``metrics.csv`` and ``summary.json`` over the panels run so far."""
    def columns(label: str) -> dict[str, Any]:
        setting = sweep.settings[label]
        return {"setting": label, **{k: _text(setting[k]) if k in setting else "" for k in varied}}

    rows = [{**columns(label), **row} for label, o in outcomes.items()
            for row in csv_rows(o.per_seed, _seeds(o))]
    History(rows).to_csv(out_dir / "metrics.csv")
    summary = [{**columns(label), **row, "score": score(row, o.per_seed[row["algorithm"]])}
               for label, o in outcomes.items() for row in o.summary]
    _mark_best(summary)
    atomic_write_text(out_dir / "summary.json", json.dumps(summary, indent=2) + "\n")


def _mark_best(summary: list[dict[str, Any]]) -> None:
    """Sets each row's ``best``: whether its score is the top of its algorithm's finished rows
    (a diverged or interrupted run is never best; ties are all best)."""
    for name in dict.fromkeys(row["algorithm"] for row in summary):
        scored = [row for row in summary if row["algorithm"] == name and row["score"] is not None
                  and row["status"] == "ok"]
        top = max((row["score"] for row in scored), default=None)
        for row in summary:
            if row["algorithm"] == name:
                row["best"] = top is not None and row["score"] == top and row["status"] == "ok"


def rescore_sweep(out_dir: str | Path, best: str) -> list[dict[str, Any]]:
    """Picks each algorithm's best point of a sweep again by another ``best``
    (:func:`criterion`), from what the sweep wrote: each point's ``metrics.csv`` (per seed) and
    the sweep's ``summary.json`` (an interrupted sweep's too: the points it finished).
    Rewrites ``summary.json``'s ``score`` and ``best``, and ``config.json``'s ``best`` beside
    ``rescored`` (the provenance of this rescoring: commit, command line, time); nothing is run
    again. Returns the summary rows (:func:`best_lines` names the best points).

    Raises:
      ValueError: a bad ``best``, or ``out_dir`` holds no sweep's results (a ``summary.json``
        whose rows name their point, and no single run's ``config.json``), before anything is
        written.
      FileNotFoundError: a point's folder without its ``metrics.csv``.
      fedjax_avail.DirectoryBusyError: a run or sweep is writing ``out_dir``.
    """
    score = criterion(best)
    out_dir = Path(out_dir)
    config_path, summary_path = out_dir / "config.json", out_dir / "summary.json"

    def sweep_files() -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        config = json.loads(config_path.read_text()) if config_path.is_file() else None
        summary = json.loads(summary_path.read_text()) if summary_path.is_file() else []
        if not summary or not all("setting" in row for row in summary) or (
                config is not None and "sweep" not in config):
            raise ValueError(f"{out_dir} holds no sweep's results (the summary.json and "
                             "config.json that fedjax-avail run --sweep writes)")
        return config, summary

    sweep_files()  # before the lock, which would write its file into any folder
    with DirectoryLock(out_dir, "out_dir"):
        config, summary = sweep_files()  # as they are now that nothing else writes them
        runs = {label: read_runs(out_dir / _slug(label))
                for label in dict.fromkeys(row["setting"] for row in summary)}
        for row in summary:
            row["score"] = score(row, runs[row["setting"]][row["algorithm"]])
        _mark_best(summary)
        atomic_write_text(summary_path, json.dumps(summary, indent=2) + "\n")
        if config is not None:
            atomic_write_text(config_path, json.dumps(
                {**config, "best": best, "rescored": provenance()}, indent=2, default=str) + "\n")
    return summary


def _seeds(outcome: RunOutcome) -> list[int] | None:
    seeds = outcome.summary[0].get("seeds") if outcome.summary else None
    return list(seeds) if seeds else None


def best_lines(summary: list[dict[str, Any]], best: str) -> list[str]:
    """One line per algorithm and best panel (ties: one each), e.g. ``best for fedavg by
    final_test_accuracy: lr=0.1 (0.9312)``; an algorithm with none (no panel reached the
    ``time_to`` target, or none finished) gets a line saying so."""
    lines = []
    for name in dict.fromkeys(row["algorithm"] for row in summary):
        top = [row for row in summary if row["algorithm"] == name and row.get("best")]
        if not top:
            lines.append(f"best for {name} by {best}: none (no point "
                         f"{'reached the target' if best.startswith('time_to') else 'finished'})")
        for row in top:
            shown = abs(row["score"]) if best != "final_test_accuracy" else row["score"]
            lines.append(f"best for {name} by {best}: {row['setting']} ({shown:.4g})")
    return lines


def sweep_title(sweep: Sweep, panels: Mapping[str, Mapping[str, Any]],
                outcomes: Mapping[str, RunOutcome]) -> str:
    """A sweep figure's title from what was run: the sweep, the algorithms drawn, the seeds and
    the settings the panels vary, e.g. ``"fedlaavg-mnist-fig4: fedavg, fedlaavg; 1 seed; over
    E, D"``.

    Args:
      sweep: the sweep.
      panels: panel label -> its overrides of ``sweep.base`` (:func:`sweep_settings`).
      outcomes: panel label -> its :class:`RunOutcome`.
    """
    config = sweep.base.config(next(iter(panels.values())))
    algorithms = dict.fromkeys(name for o in outcomes.values() for name in o.histories)
    varied = dict.fromkeys(key for setting in sweep.settings.values() for key in setting)
    return (f"{run_title(sweep.name, algorithms, len(config.get('seeds') or [None]))}; over "
            f"{', '.join(varied)}")


def _slug(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in label).strip("_")
