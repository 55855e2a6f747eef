"""``fedjax-avail``: run named experiments from the shell; a thin shell over the library."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from fedjax_avail import experiments
from fedjax_avail.engine import Interrupted
from fedjax_avail.experiments._settings import optional


def _defaults(experiment) -> dict:
    return experiment.all_defaults() if isinstance(experiment, experiments.Sweep) else dict(
        experiment.defaults)


def _overrides(experiment, pairs: list[str]) -> dict:
    defaults = _defaults(experiment)
    out = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep:
            raise ValueError(f"--set takes key=value, got {pair!r}")
        key = key.strip()
        if key not in defaults:
            raise ValueError(
                f"{experiment.name} has no setting {key!r}; settings: {sorted(defaults)}"
            )
        try:
            if text.strip().lower() == "none" and optional(defaults, key):
                out[key] = None
                continue
            out[key] = experiments.parse_value(text, defaults[key])
        except ValueError as error:
            raise ValueError(f"--set {key}: {error}") from None
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fedjax-avail", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    run_parser = commands.add_parser("run", help="run an experiment (default: digits-diurnal)")
    run_parser.add_argument("name", nargs="?", default=experiments.DEFAULT.name)
    run_parser.add_argument("--set", dest="settings", action="append", default=[],
                            metavar="KEY=VALUE", help="override a setting (repeatable)")
    run_parser.add_argument("--out", type=Path, default=None,
                            help="output directory (default: runs/NAME)")
    run_parser.add_argument("--no-progress", action="store_true", help="hide progress bars")
    run_parser.add_argument("--resume", action="store_true",
                            help="continue an interrupted run from the checkpoints in --out")
    run_parser.add_argument("--checkpoint-every", type=int, default=None, metavar="ROUNDS",
                            help="rounds between checkpoints (default: 10 evaluations)")
    commands.add_parser("list", help="list the experiments and their settings")
    args = parser.parse_args(argv)

    if args.command == "list":
        for experiment in experiments.REGISTRY.values():
            print(f"{experiment.name}: {experiment.description}")
            if experiment.measured:
                print(f"    measured: {experiment.measured}")
            print("    " + " ".join(f"{k}={v}" for k, v in _defaults(experiment).items()))
            if isinstance(experiment, experiments.Sweep):
                print("    settings: " + "; ".join(experiment.settings))
        return 0

    try:
        experiment = experiments.get(args.name)
        overrides = _overrides(experiment, args.settings)
        out_dir = args.out or Path("runs") / experiment.name
        options = dict(progress=not args.no_progress, resume=args.resume,
                       checkpoint_every=args.checkpoint_every)
        if isinstance(experiment, experiments.Sweep):
            outcomes = experiments.run_sweep(experiment, overrides, out_dir, **options)
        else:
            outcomes = {"": experiments.run(experiment, overrides, out_dir, **options)}
    except (ValueError, FileNotFoundError, MemoryError) as error:
        print(f"fedjax-avail: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as interrupted:  # fa.Interrupted, or Ctrl-C between algorithms
        if "out_dir" not in locals():  # before anything ran
            return 130
        command = ["fedjax-avail", "run", experiment.name, *(
            a for pair in args.settings for a in ("--set", pair)), "--out", str(out_dir),
            "--resume"]
        what = interrupted if isinstance(interrupted, Interrupted) else "interrupted"
        print(f"\nfedjax-avail: {what}; finished results are in {out_dir}/. Resume "
              f"with:\n  {shlex.join(command)}", file=sys.stderr)
        return 130
    for label, outcome in outcomes.items():
        if label:
            print(f"\n== {label}")
        print(experiments.format_summary(outcome.summary))
    written = next(iter(outcomes.values())).out_dir if len(outcomes) == 1 else out_dir
    print(f"wrote results to {written}/")
    ok = all(row["status"] == "ok" for o in outcomes.values() for row in o.summary)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
