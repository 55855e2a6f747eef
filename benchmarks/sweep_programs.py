"""Benchmark: a sweep of real-valued hyperparameters as one compiled program against one
program per point.

``fedjax-avail run fedlaavg-mnist --sweep lr=...`` (FedAvg and FedLaAvg, N = 1000, K = 100,
C = 10, B = 5, logistic regression, diurnal E = 100, D = 1): ``run_sweep(together=True)`` runs
the points on one runs axis per algorithm (issue 38), ``together=False`` one program per point
as before. Each variant runs in a fresh process (no compiled program carries over), in turn
``--repeats`` times; wall time of the whole sweep (data, compile, rounds, writing) and the sum
of the compile seconds its summaries record. The two must give the same numbers: every
``metrics.csv`` row is compared.

Usage::

    python benchmarks/sweep_programs.py [--rounds 300] [--lrs 0.003,0.01,0.03,0.1]
                                        [--repeats 2] [--out results/sweep_programs.json]
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import default_data_dir, machine_info, write_json  # noqa: I001 (benchmarks/ is on sys.path)

OUT = Path(__file__).resolve().parent / "results" / "sweep_programs.json"

# One variant in a fresh process: prints {"seconds": wall, "compile": sum of compile seconds}.
_ONE = """
import json, sys, time
from fedjax_avail import experiments
out, together, rounds, lrs = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3]), sys.argv[4]
sweep = experiments.with_grid(experiments.get("fedlaavg-mnist"),
                              {"lr": [float(v) for v in lrs.split(",")]})
settings = {"rounds": rounds, "eval_every": 50, "algorithms": ("fedavg", "fedlaavg")}
start = time.perf_counter()
outcomes = experiments.run_sweep(sweep, settings, out, progress=False, together=together,
                                 checkpoint=False)
seconds = time.perf_counter() - start
panels = experiments.sweep_settings(sweep, settings)
groups = experiments.programs(sweep, panels) if together else [[label] for label in panels]
compile = sum(row["compile_seconds"] for group in groups for row in outcomes[group[0]].summary)
print(json.dumps({"seconds": seconds, "compile": compile, "programs": len(groups)}))
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--lrs", default="0.003,0.01,0.03,0.1")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", type=Path, default=OUT)
    return parser.parse_args(argv)


def _variant(together: bool, out: Path, args: argparse.Namespace) -> dict:
    env = {**os.environ, "FEDJAX_AVAIL_MNIST_DIR": str(default_data_dir())}
    done = subprocess.run([sys.executable, "-c", _ONE, str(out), "1" if together else "0",
                           str(args.rounds), args.lrs], env=env, check=True,
                          capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _rows(out: Path) -> list[dict]:
    with open(out / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    timings: dict[str, list[dict]] = {"together": [], "separate": []}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for name in timings:
                out = Path(tmp) / f"{name}-{repeat}"
                timings[name].append(_variant(name == "together", out, args))
                print(name, timings[name][-1], flush=True)
        same = _rows(Path(tmp) / "together-0") == _rows(Path(tmp) / "separate-0")
    best = {name: min(t["seconds"] for t in runs) for name, runs in timings.items()}
    result = {
        "benchmark": "sweep_programs",
        "date": datetime.date.today().isoformat(),
        "command": "python benchmarks/sweep_programs.py " + " ".join(argv or sys.argv[1:]),
        "machine": machine_info(),
        "setting": {"experiment": "fedlaavg-mnist", "algorithms": ["fedavg", "fedlaavg"],
                    "rounds": args.rounds, "lr": args.lrs},
        "runs": timings,
        "best_seconds": best,
        "separate_over_together": best["separate"] / best["together"],
        "same_metrics": same,
    }
    write_json(args.out, result)
    print(json.dumps({k: result[k] for k in ("best_seconds", "separate_over_together",
                                             "same_metrics")}, indent=2))
    if not same:
        raise SystemExit("the sweep run together differs from its points run separately")


if __name__ == "__main__":
    main()
