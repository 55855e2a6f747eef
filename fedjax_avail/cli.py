"""``fedjax-avail``: run named experiments from the shell; a thin shell over the library."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fedjax_avail import experiments


def _overrides(experiment: experiments.Experiment, pairs: list[str]) -> dict:
    out = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep:
            raise ValueError(f"--set takes key=value, got {pair!r}")
        key = key.strip()
        if key not in experiment.defaults:
            raise ValueError(
                f"{experiment.name} has no setting {key!r}; settings: {sorted(experiment.defaults)}"
            )
        try:
            out[key] = experiments.parse_value(text, experiment.defaults[key])
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
    commands.add_parser("list", help="list the experiments and their settings")
    args = parser.parse_args(argv)

    if args.command == "list":
        for experiment in experiments.REGISTRY.values():
            print(f"{experiment.name}: {experiment.description}")
            if experiment.measured:
                print(f"    measured: {experiment.measured}")
            print("    " + " ".join(f"{k}={v}" for k, v in experiment.defaults.items()))
        return 0

    try:
        experiment = experiments.get(args.name)
        overrides = _overrides(experiment, args.settings)
        out_dir = args.out or Path("runs") / experiment.name
        outcome = experiments.run(experiment, overrides, out_dir, progress=not args.no_progress)
    except (ValueError, FileNotFoundError) as error:
        print(f"fedjax-avail: error: {error}", file=sys.stderr)
        return 2
    print(experiments.format_summary(outcome.summary))
    print(f"wrote {out_dir}/metrics.csv, config.json, summary.json, curves.png")
    return 0 if all(row["status"] == "ok" for row in outcome.summary) else 1


if __name__ == "__main__":
    sys.exit(main())
