"""fedjax-avail: run the named experiments that reproduce the papers, from the shell.

A thin shell over fedjax_avail.experiments: every command here is a library call notebooks can
make too. A user error (unknown experiment or setting, bad value, missing data) prints one line
and exits with status 2; Ctrl-C during a run exits 130 after printing the resume command.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import textwrap
from pathlib import Path
from typing import Any

from fedjax_avail import experiments
from fedjax_avail._checks import NonNegative, check_value
from fedjax_avail._lock import DirectoryBusyError
from fedjax_avail.checkpoint import KEEP
from fedjax_avail.compilation_cache import ENV, enable_compilation_cache
from fedjax_avail.experiments import DEFAULT_CHECKPOINT_SECONDS, optional
from fedjax_avail.results import Interrupted

EPILOG = """examples:
  fedjax-avail run                                   the default experiment (offline, ~10 s)
  fedjax-avail run fedlaavg-mnist --set rounds=500   FedLaAvg Fig. 4 with 500 rounds
  fedjax-avail run fedlaavg-mnist --help             that experiment's settings
  fedjax-avail run async-mnist --set fedbuff.history=512   any field of a part, dotted
  fedjax-avail run --set seeds=0,1,2 --sweep lr=0.01,0.1   3 seeds at each of 2 values
  fedjax-avail run subtrunc-mnist --config my.toml   settings from a TOML file
  fedjax-avail describe wkafl-mnist-table2           what it reproduces, its settings
  fedjax-avail compare runs/a runs/b --out both.png  overlay finished runs
"""


class UserError(Exception):
    """A mistake in the command line: printed as one line, exit status 2."""


def _defaults(experiment) -> dict:
    return experiment.all_defaults() if isinstance(experiment, experiments.Sweep) else dict(
        experiment.defaults)


def _setting(experiment, key: str, value: Any, defaults: dict, source: str) -> Any:
    if "." in key:  # a part's field: read and checked by its annotation when the parts exist
        if not all(key.split(".")):
            raise UserError(f"{source} {key}: a dotted setting names a part and its field, "
                            "e.g. fedavg.client_lr")
        if isinstance(value, str):  # as TOML would have it: 2 and "2" are one setting
            return experiments.parse_value(value, None)
        return tuple(value) if isinstance(value, list) else value
    if key == "seed" and isinstance(value, str) and "," in value:
        raise UserError(f"{source} seed takes one seed, got {value!r}; for several seeds "
                        f"trained together: --set seeds={value}")
    if key not in defaults:
        raise UserError(f"{experiment.name} has no setting {key!r} ({source}); settings: "
                        f"{', '.join(sorted(defaults))}; or a part's field by a dotted name "
                        "(fedavg.client_lr, availability.period; run NAME --help and "
                        "--dry-run list them)")
    if value is None or (isinstance(value, str) and value.strip().lower() == "none"):
        if optional(defaults, key):
            return None
        if value is None:
            raise UserError(f"{source} {key}: None is not allowed for this setting")
    if isinstance(value, str):
        try:
            return experiments.parse_value(value, defaults[key])
        except ValueError as error:
            raise UserError(f"{source} {key}: {error}") from None
    expected = _toml_kind(defaults[key])
    if expected is not None and not expected[1](value):
        raise UserError(f"{source} {key} must be {expected[0]}, got {value!r} "
                        f"({type(value).__name__})")
    return tuple(value) if isinstance(value, list) else value


def _toml_kind(default: Any) -> tuple[str, Any] | None:
    """What a TOML value of a setting with this default must be: ``(words, test)``; None for a
    default of None (its setting's own rule checks it)."""
    def number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    if isinstance(default, bool):
        return "true or false", lambda v: isinstance(v, bool)
    if isinstance(default, int):
        return "an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)
    if isinstance(default, float):
        return "a number", number
    if isinstance(default, str):
        return "a string", lambda v: isinstance(v, str)
    if isinstance(default, tuple):
        return "a list", lambda v: isinstance(v, list)
    return None


def _overrides(experiment, pairs: list[str], config: Path | None) -> dict:
    """Settings from a TOML file, then ``--set key=value`` pairs (which win)."""
    defaults = _defaults(experiment)
    out = {}
    if config is not None:
        for key, value in _read_toml(config).items():
            out[key] = _setting(experiment, key, value, defaults, f"{config.name}:")
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep:
            raise UserError(f"--set takes key=value, got {pair!r}")
        out[key.strip()] = _setting(experiment, key.strip(), text, defaults, "--set")
    return out


def _read_toml(path: Path) -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    if not path.is_file():
        raise UserError(f"--config {path}: no such file")
    try:
        with open(path, "rb") as f:
            table = tomllib.load(f)
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"--config {path}: not valid TOML: {error}") from None
    except UnicodeDecodeError as error:
        raise UserError(f"--config {path}: not valid TOML (TOML files are UTF-8 text; byte "
                        f"{error.start} is not UTF-8)") from None
    # Settings may be top-level keys, a [settings] table, or both (a key in both is an error).
    nested = table.pop("settings", {})
    if not isinstance(nested, dict):
        raise UserError(f"--config {path}: 'settings' must be a table ([settings]), got "
                        f"{nested!r}")
    both = sorted(set(table) & set(nested))
    if both:
        raise UserError(f"--config {path}: {', '.join(both)} set both at the top level and "
                        "in [settings]; set each once")
    return _flatten({**table, **nested})


def _flatten(table: dict, prefix: str = "") -> dict:
    """TOML's dotted keys (``fedbuff.history = 512``, a ``[fedbuff]`` table) as dotted
    settings (``{"fedbuff.history": 512}``)."""
    out = {}
    for key, value in table.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _toml(value: Any) -> str:
    """A default written as a TOML value, so ``describe``'s output pastes into a --config file."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


def _describe(experiment) -> str:
    """What the experiment is, its record and its settings: valid TOML (all prose is comments),
    so ``fedjax-avail describe NAME > my.toml`` is a --config file to edit."""
    lines = [f"# {experiment.name}: {experiment.description}"]
    if isinstance(experiment, experiments.Sweep):
        lines += textwrap.wrap(f"a sweep of {experiment.base.name} over: "
                               + "; ".join(experiment.settings), 96,
                               initial_indent="# ", subsequent_indent="#   ")
    if experiment.measured:
        lines += textwrap.wrap(f"measured: {experiment.measured}", 96, initial_indent="# ",
                               subsequent_indent="#   ")
    lines += textwrap.wrap(
        "Every field of every part is also a setting, by a dotted name: "
        "ALGORITHM.FIELD for each algorithm run (fedavg.client_lr, fedbuff.history, "
        "fedavg.selection.lam, fedbuff.durations.sigma) and availability.FIELD; the "
        "algorithms' fields are listed at the end, and `fedjax-avail run NAME --dry-run` "
        "lists every part's, the availability process's too, with their values. Any setting "
        "may "
        "be swept: --sweep KEY=V1,V2 (repeatable: a grid); --set seeds=0,1,2 trains seeds "
        "together (mean and std in the summary).", 96, initial_indent="# ",
        subsequent_indent="# ")
    lines.append("# settings (--set key=value, or this file with --config), each under what it "
                 "means:")
    for key, value in _defaults(experiment).items():
        lines += _explain(experiment, key)
        lines.append(f"# {key} = (none; optional)" if value is None
                     else f"{key} = {_toml(value)}")
    own = experiment.base if isinstance(experiment, experiments.Sweep) else experiment
    if own.parts:
        lines.append("# the algorithms' fields (ALGORITHM.FIELD <- SETTING: the setting feeds "
                     "it; = VALUE: fixed, or the class's default), each a setting by its "
                     "dotted name:")
        running = tuple(_defaults(experiment).get("algorithms", ()))
        lines += [f"#   {line}" for line in experiments.describe_parts(
            own.parts, running, _defaults(experiment))]
    return "\n".join(lines)


def _explain(experiment, key: str) -> list[str]:
    """A setting's meaning and, for a choice-valued one, its valid values, as TOML comments."""
    own = experiment.base if isinstance(experiment, experiments.Sweep) else experiment
    text = f"{key}: {own.meaning(key)}"
    choices = own.all_choices().get(key)
    if choices:
        each = "any of" if isinstance(_defaults(experiment)[key], tuple) else "one of"
        text += f"; {each}: {', '.join(choices)}"
    return textwrap.wrap(text, 96, initial_indent="# ", subsequent_indent="#   ")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fedjax-avail", description=__doc__.split("\n\n")[0], epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    run = commands.add_parser(
        "run", add_help=False, help="run an experiment (default: digits-diurnal)",
        description="Run the experiment NAME (default digits-diurnal). 'fedjax-avail list' "
                    "names them all; 'fedjax-avail run NAME --help' lists NAME's settings.")
    run.add_argument("name", nargs="?", default=experiments.DEFAULT.name, metavar="NAME",
                     help="the experiment (fedjax-avail list)")
    run.add_argument("-h", "--help", action="store_true", help="show NAME's settings")
    run.add_argument("--set", dest="settings", action="append", default=[],
                     metavar="KEY=VALUE", help="change a setting (repeatable)")
    run.add_argument("--config", type=Path, default=None, metavar="FILE.toml",
                     help="settings from a TOML file (key = value lines; --set wins)")
    run.add_argument("--out", type=Path, default=None, help="output directory (runs/NAME)")
    run.add_argument("--no-progress", action="store_true", help="hide progress")
    run.add_argument("--sweep", dest="sweeps", action="append", default=[],
                     metavar="KEY=V1,V2,...",
                     help="run at each value (repeatable: every combination); OUT/metrics.csv "
                          "gets a column per swept setting, the summary each algorithm's best")
    run.add_argument("--best", default=None, metavar="CRITERION",
                     help="a sweep's best value: final_test_accuracy (default), "
                          "final_train_loss, or time_to=ACC (least mean over the seeds of "
                          "their virtual time to ACC)")
    run.add_argument("--separate-programs", action="store_true",
                     help="a sweep: run every point as its own program (by default the points "
                          "that differ only in real-valued settings share one, on the runs "
                          "axis)")
    run.add_argument("--resume", action="store_true",
                     help="continue an interrupted run from the checkpoints in --out")
    run.add_argument("--overwrite", action="store_true",
                     help="replace the results of an earlier run in --out")
    run.add_argument("--checkpoint-every", type=int, default=None, metavar="ROUNDS",
                     help="rounds between checkpoints (default: 10 evaluations, at least "
                          "--checkpoint-seconds apart)")
    run.add_argument("--checkpoint-seconds", type=float, default=None, metavar="S",
                     help="skip a checkpoint due sooner than S seconds after the run's start "
                          "or its last save (default "
                          f"{DEFAULT_CHECKPOINT_SECONDS:g} without --checkpoint-every, else 0); "
                          "the last round and an interrupted run are always saved")
    run.add_argument("--dry-run", action="store_true",
                     help="check the settings, load the data, estimate memory; train nothing")
    run.add_argument("--devices", type=int, default=None, metavar="D",
                     help="split each round's cohort over D devices; on a CPU, D virtual "
                          "devices, one per core (2 cores: about 2x faster). Default: on a "
                          "CPU, every core for a run of one seed with at least 8 clients a "
                          "core per round (simulate's mesh='auto'), else one device; "
                          "--devices 1: one device (mesh=None; several seeds still use "
                          "the cores, one run a core)")
    run.add_argument("--tensorboard", action="store_true",
                     help="also write TensorBoard logs to OUT/tensorboard at every evaluation "
                          "(needs tensorboardX)")
    run.add_argument("--no-compilation-cache", action="store_true",
                     help="compile every program afresh (default: reuse compiled programs "
                          "kept in ~/.cache/fedjax_avail/jax, or $XDG_CACHE_HOME; "
                          f"${ENV}=0 also turns it off, =DIR moves it)")
    run.add_argument("--no-checkpoint", action="store_true",
                     help="write no checkpoints (a run cannot then be resumed)")
    run.add_argument("--keep-checkpoints", type=int, default=KEEP, metavar="K",
                     help=f"keep each algorithm's newest K checkpoints (default {KEEP})")
    run.set_defaults(usage=run.format_help)
    commands.add_parser("list", help="list the experiments")
    describe = commands.add_parser("describe", help="an experiment's settings and record")
    describe.add_argument("name", metavar="NAME")
    compare = commands.add_parser("compare", help="overlay the curves of finished runs")
    compare.add_argument("dirs", nargs="+", type=Path, metavar="DIR",
                         help="output directories holding metrics.csv")
    compare.add_argument("--out", type=Path, default=Path("compare.png"), help="the figure")
    compare.add_argument("--x", default="round", choices=("round", "virtual_time"),
                         help="the x axis")
    rescore = commands.add_parser(
        "rescore", help="pick a finished sweep's best points again by another --best")
    rescore.add_argument("dir", type=Path, metavar="DIR", help="the sweep's output directory")
    rescore.add_argument("--best", required=True, metavar="CRITERION",
                         help="final_test_accuracy, final_train_loss, or time_to=ACC (as run's)")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        if args.command == "list":
            for experiment in experiments.REGISTRY.values():
                print(f"{experiment.name:34s} {experiment.description}")
            return 0
        if args.command == "describe":
            print(_describe(_get(args.name)))
            return 0
        if args.command == "compare":
            from fedjax_avail.experiments import compare_runs

            compare_runs(args.dirs, args.out, x=args.x)
            print(f"wrote {args.out}")
            return 0
        if args.command == "rescore":
            rows = experiments.rescore_sweep(args.dir, args.best)
            print("\n".join(experiments.best_lines(rows, args.best)))
            print(f"rewrote {args.dir / 'summary.json'}")
            return 0
        return _run(args)
    except (UserError, ValueError, OSError, MemoryError, ImportError,
            DirectoryBusyError) as error:
        print(f"fedjax-avail: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `fedjax-avail list | head`: stop quietly, as Python's docs advise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _get(name: str):
    try:
        return experiments.get(name)
    except ValueError as error:
        raise UserError(str(error)) from None


def _run(args) -> int:
    experiment = _get(args.name)
    if args.help:
        print(args.usage())
        print(_describe(experiment))
        return 0
    overrides = _overrides(experiment, args.settings, args.config)
    if args.sweeps:
        experiment = _with_sweeps(experiment, args.sweeps, overrides)
    if args.best is not None and not isinstance(experiment, experiments.Sweep):
        raise UserError(f"--best {args.best} picks a sweep's best point, but {experiment.name} "
                        "is not a sweep: add --sweep KEY=V1,V2,... or leave --best out")
    if args.best is None:
        args.best = "final_test_accuracy"
    experiments.criterion(args.best)  # a bad --best is refused before a dry run passes
    if args.checkpoint_seconds is not None:  # named as the flag, before a dry run
        check_value("--checkpoint-seconds", args.checkpoint_seconds, NonNegative)
    if args.dry_run:
        return _dry_run(experiment, overrides, _planned_mesh(args.devices),
                        together=not args.separate_programs)
    out_dir = args.out or Path("runs") / experiment.name
    if not args.no_compilation_cache:
        enable_compilation_cache()
    if args.resume and args.no_checkpoint:
        raise UserError("--resume continues from checkpoints; it cannot go with --no-checkpoint")
    options = dict(progress=not args.no_progress, resume=args.resume,
                   checkpoint_every=args.checkpoint_every, mesh=_mesh(args.devices),
                   checkpoint_seconds=args.checkpoint_seconds,
                   checkpoint=not args.no_checkpoint, keep_checkpoints=args.keep_checkpoints,
                   tensorboard=args.tensorboard, overwrite=args.overwrite)
    try:
        if isinstance(experiment, experiments.Sweep):
            outcomes = experiments.run_sweep(experiment, overrides, out_dir, best=args.best,
                                             together=not args.separate_programs, **options)
        else:
            outcomes = {"": experiments.run(experiment, overrides, out_dir, **options)}
    except KeyboardInterrupt as interrupted:  # fa.Interrupted, or Ctrl-C between algorithms
        command = ["fedjax-avail", "run", experiment.name, *(
            a for pair in args.settings for a in ("--set", pair)),
            *(["--config", str(args.config)] if args.config else []),
            *(a for pair in args.sweeps for a in ("--sweep", pair)),
            *(["--best", args.best] if isinstance(experiment, experiments.Sweep) else []),
            *(["--separate-programs"] if args.separate_programs else []),
            *(["--devices", str(args.devices)] if args.devices is not None else []),
            "--out", str(out_dir), "--resume"]
        what = interrupted if isinstance(interrupted, Interrupted) else "interrupted"
        how = ("run it again with --overwrite to start afresh (--no-checkpoint: nothing to "
               "resume from)"
               if args.no_checkpoint else f"Resume with:\n  {shlex.join(command)}")
        print(f"\nfedjax-avail: {what}; finished results are in {out_dir}/. {how}",
              file=sys.stderr)
        return 130
    for label, outcome in outcomes.items():
        if label:
            print(f"\n== {label}")
        print(experiments.format_summary(outcome.summary))
    if isinstance(experiment, experiments.Sweep):
        summary = [{"setting": label, **row} for label, o in outcomes.items() for row in o.summary]
        rows = json.loads((out_dir / "summary.json").read_text()) if (
            out_dir / "summary.json").is_file() else summary
        print("\n" + "\n".join(experiments.best_lines(rows, args.best)))
    written = next(iter(outcomes.values())).out_dir if len(outcomes) == 1 else out_dir
    print(f"wrote results to {written}/")
    ok = all(row["status"] == "ok" for o in outcomes.values() for row in o.summary)
    return 0 if ok else 1


def _with_sweeps(experiment, sweeps: list[str], overrides: dict):
    """The experiment run at every combination of the ``--sweep KEY=V1,V2`` values."""
    defaults = _defaults(experiment)
    values = {}
    for pair in sweeps:
        key, sep, text = pair.partition("=")
        key = key.strip()
        if not sep or not text.strip():
            raise UserError(f"--sweep takes KEY=V1,V2,..., got {pair!r}")
        if key in values:
            raise UserError(f"--sweep {key} is given twice; list all its values once")
        if key in overrides:
            raise UserError(f"{key} is both set (--set/--config) and swept (--sweep); "
                            "drop one")
        if key == "seeds":
            raise UserError("--sweep seeds: seeds are not swept but trained together: "
                            "--set seeds=0,1,2")
        values[key] = [_setting(experiment, key, item.strip(), defaults, "--sweep")
                       for item in text.split(",")]
    return experiments.with_grid(experiment, values)


def _mesh(devices: int | None):
    """A ``"cohort"`` mesh over ``devices`` devices (None: ``simulate``'s ``"auto"``; 1: no
    mesh, one device, as ``simulate(mesh=None)``, whose checkpoints resume with it)."""
    if devices is None:
        return "auto"
    if devices < 1:
        raise UserError(f"--devices must be an integer >= 1, got {devices}")
    import jax

    from fedjax_avail.mesh import cohort_mesh

    try:  # only possible before JAX has started a backend; it affects the CPU backend alone
        jax.config.update("jax_num_cpu_devices", devices)
    except RuntimeError:
        pass
    return None if devices == 1 else cohort_mesh(devices)


def _planned_mesh(devices: int | None):
    """The mesh a run with ``--devices`` would use, for a dry run: on a CPU an abstract one (a
    run's fresh process makes that many CPU devices, which this one may no longer), else the
    run's own (which checks that the devices exist)."""
    if devices is None or devices <= 1:
        return _mesh(devices)
    import jax

    from fedjax_avail.mesh import COHORT

    if jax.default_backend() == "cpu":
        return jax.sharding.AbstractMesh((devices,), (COHORT,))
    return _mesh(devices)


def _dry_run(experiment, overrides: dict, mesh=None, together: bool = True) -> int:
    """Prints what a run would do (over ``mesh``'s devices) after every check it makes before
    compute."""
    from fedjax_avail.memory import format_bytes

    if isinstance(experiment, experiments.Sweep):
        panels = experiments.sweep_settings(experiment, overrides)
        experiment.check_read(panels)
        groups = (experiments.programs(experiment, panels) if together
                  else [[label] for label in panels])
        plans = [(group, experiments.plan(experiment.base, panels[group[0]], mesh,
                                          points=len(group), check_read=False))
                 for group in groups]  # checked together above
        base, first = experiment.base, next(iter(panels.values()))
    else:
        plans = [([], experiments.plan(experiment, overrides, mesh))]
        base, first = experiment, overrides
    print("the parts' fields (set any with --set or --sweep by its dotted name):")
    for line in experiments.part_settings(base.setup(base.config(first))):
        print(f"  {line}")
    for group, rows in plans:
        if group:  # a sweep's program: its points share one runs axis
            print(f"== {' + '.join(group)}")
        points = len(group)
        for row in rows:
            seeds = row["seeds"]
            print(f"{row['algorithm']:24s} {row['rounds']:>7d} rounds, "
                  f"{len(seeds)} seed{'s' if len(seeds) > 1 else ''}"
                  f"{f' x {points} points in one program' if points > 1 else ''}, "
                  f"estimated device memory {format_bytes(row['estimated_bytes'])}"
                  + (f", the cohort over {row['devices']} devices" if row["devices"] > 1
                     else ""))
    print(f"dry run: {experiment.name} with {overrides or 'its defaults'} passes every check")
    return 0


if __name__ == "__main__":
    sys.exit(main())
