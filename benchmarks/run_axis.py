"""Benchmark: several runs of one configuration in one compiled program against a loop.

For FedAvg and FedLaAvg on the FedLaAvg MNIST setting (N = 1000, K = 100, C = 10, B = 5,
logistic regression, diurnal E = 100, D = 1), side by side in one process: one seed; S seeds in
one program with each runs layout (``simulate(seed=[...], runs_layout=...)``: ``"vmap"``
batches the runs into every operation, ``"map"`` runs them one after the other inside each
compiled round, ``"loop"`` runs one compiled single-run program for each run's chunk of rounds,
one run per CPU core at once on threads, ``"auto"`` picks per backend); and a loop of S
separate ``simulate`` calls, the cost one call must never exceed. Wall time of each whole
call (compile and evaluation included) and its rounds alone, each the best of ``--repeats``.
Targets (issue 17): S runs in one call never slower than the loop; on 2 CPU cores 8 seeds in
<= 4x one seed's wall time.

Usage::

    python benchmarks/run_axis.py [--rounds 500] [--seeds 8] [--repeats 2] [--quick]
                                  [--out results/run_axis.json]
"""

from __future__ import annotations

import argparse
import datetime
import time
from pathlib import Path

from _common import default_data_dir, machine_info, write_json  # noqa: I001 (benchmarks/ is on sys.path)

import fedjax_avail as fa

REPO = Path(__file__).resolve().parents[1]
OUT = Path(__file__).resolve().parent / "results" / "run_axis.json"
LAYOUTS = ("vmap", "map", "loop")


def _mnist():
    return fa.data.load_mnist(default_data_dir())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--seeds", type=int, default=8, help="S, the runs of one call")
    parser.add_argument("--repeats", type=int, default=2, help="best of this many calls")
    parser.add_argument("--quick", action="store_true", help="50 rounds, S = 2, one repeat")
    parser.add_argument("--out", type=Path, default=OUT)
    return parser.parse_args(argv)


def _call(task, fd, alg, process, test, rounds, seeds, layout):
    """One ``simulate`` call; (wall seconds, rounds-only seconds)."""
    start = time.perf_counter()
    out = fa.simulate(task, fd, alg, process, rounds=rounds, eval_every=20, test_data=test,
                      seed=seeds, runs_layout=layout)
    wall = time.perf_counter() - start
    first = out[0] if isinstance(out, list) else out  # the runs of a call share its timing
    return wall, first.timing["run"]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    rounds = 50 if args.quick else args.rounds
    count = 2 if args.quick else args.seeds
    repeats = 1 if args.quick else args.repeats
    train, test = _mnist()
    fd = fa.data.one_label_per_client(train["x"], train["y"], 1000, seed=0)
    task = fa.tasks.logistic_regression(784, 10)
    process = fa.availability.diurnal(fd.client_labels(), D=1, E=100)
    common = dict(clients_per_round=100, local_steps=10, batch_size=5, client_lr=0.01)
    algorithms = {"fedavg": fa.algorithms.FedAvg(**common),
                  "fedlaavg": fa.algorithms.FedLaAvg(**common)}
    seeds = list(range(count))
    rows = []
    for name, alg in algorithms.items():
        best: dict[str, tuple[float, float]] = {}
        cases = [("one seed", 0, "auto"),
                 *((f"{count} seeds, {layout}", seeds, layout) for layout in LAYOUTS),
                 (f"{count} seeds, loop of calls", None, "auto")]
        for _ in range(repeats):
            for case, seed, layout in cases:
                if seed is None:  # S separate calls, one seed each
                    calls = [_call(task, fd, alg, process, test, rounds, s, layout) for s in seeds]
                    wall, run = sum(c[0] for c in calls), sum(c[1] for c in calls)
                else:
                    wall, run = _call(task, fd, alg, process, test, rounds, seed, layout)
                old = best.get(case, (float("inf"), float("inf")))
                best[case] = (min(old[0], wall), min(old[1], run))
        one_wall = best["one seed"][0]
        loop_wall = best[f"{count} seeds, loop of calls"][0]
        for case, (wall, run) in best.items():
            rows.append({"algorithm": name, "case": case, "wall_s": wall, "run_s": run,
                         "x_one_seed_wall": wall / one_wall, "x_loop_wall": wall / loop_wall})
            print(f"{name:9s} {case:24s} wall {wall:7.1f} s ({wall / one_wall:5.2f}x one seed, "
                  f"{wall / loop_wall:4.2f}x the loop), rounds {run:6.1f} s", flush=True)
    write_json(args.out, {
        "benchmark": "run_axis",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info(), "rounds": rounds, "seeds": count,
        "auto_layout": fa.runs.runs_layout("auto"), "rows": rows})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
