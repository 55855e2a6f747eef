"""Benchmark: several runs of one configuration in one compiled program against a loop.

* The FedLaAvg MNIST default (N = 1000, K = 100, C = 10, B = 5, logistic regression, diurnal
  E = 100, D = 1) for S = 1, 2, 4, 8 seeds in one program (``simulate(seed=[...])``): wall time
  of the whole call (compile and evaluation included) and the round time per run, against
  one seed. Target: 8 seeds in <= 3x the wall time of one.
* The SubTrunc Table I configuration (100 clients, 3 classes each, K = 10, DivFL selection,
  logistic regression) for 5 seeds: one program against a loop of 5 ``simulate`` calls.

Usage::

    python benchmarks/run_axis.py [--rounds 500] [--quick] [--out results/run_axis.json]
"""

from __future__ import annotations

import argparse
import datetime
import os
import time
from pathlib import Path

from _common import machine_info, write_json  # noqa: I001 (benchmarks/ is on sys.path)

import fedjax_avail as fa

REPO = Path(__file__).resolve().parents[1]
OUT = Path(__file__).resolve().parent / "results" / "run_axis.json"


def _mnist():
    where = os.environ.get(fa.data.MNIST_ENV) or REPO.parent / "shared" / "data" / "mnist"
    return fa.data.load_mnist(where)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--quick", action="store_true", help="50 rounds, S = 1, 2")
    parser.add_argument("--out", type=Path, default=OUT)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    rounds = 50 if args.quick else args.rounds
    train, test = _mnist()
    fd = fa.data.one_label_per_client(train["x"], train["y"], 1000, seed=0)
    task = fa.tasks.logistic_regression(784, 10)
    process = fa.availability.diurnal(fd.client_labels(), D=1, E=100)
    alg = fa.algorithms.FedLaAvg(clients_per_round=100, local_steps=10, batch_size=5,
                                 client_lr=0.01)
    rows = []
    for s in ((1, 2) if args.quick else (1, 2, 4, 8)):
        t0 = time.perf_counter()
        out = fa.simulate(task, fd, alg, process, rounds=rounds, eval_every=20, test_data=test,
                          seed=list(range(s)) if s > 1 else 0)
        wall = time.perf_counter() - t0
        result = out[0] if isinstance(out, list) else out
        rows.append({"setting": "fedlaavg-mnist", "seeds": s, "wall_s": wall,
                     "run_s": result.timing["run"], "compile_s": result.timing["compile"],
                     "eval_s": result.timing["eval"]})
        print(f"FedLaAvg MNIST, {s} seed(s) in one program: {wall:6.1f} s in all "
              f"(rounds {result.timing['run']:.1f} s, compile {result.timing['compile']:.1f} s, "
              f"eval {result.timing['eval']:.1f} s), {wall / rows[0]['wall_s']:.2f}x one seed",
              flush=True)
    three = fa.data.classes_per_client(train["x"], train["y"], 100, k=3)
    client_test = fa.data.classes_per_client(test["x"], test["y"], 100, k=3)
    divfl = fa.algorithms.FedAvg(clients_per_round=10, local_steps=10, batch_size=10,
                                 client_lr=0.1, selection=fa.selection.DivFL())
    timings = {}
    for mode in ("one program", "loop"):
        t0 = time.perf_counter()
        kw = dict(rounds=rounds, eval_every=10, test_data=client_test)
        if mode == "one program":
            fa.simulate(task, three, divfl, fa.availability.AlwaysOn(), seed=[0, 1, 2, 3, 4], **kw)
        else:
            for seed in range(5):
                fa.simulate(task, three, divfl, fa.availability.AlwaysOn(), seed=seed, **kw)
        timings[mode] = time.perf_counter() - t0
    rows.append({"setting": "subtrunc-table1-divfl", "seeds": 5, "one_program_s":
                 timings["one program"], "loop_s": timings["loop"]})
    print(f"DivFL Table I, 5 seeds: one program {timings['one program']:.1f} s, loop "
          f"{timings['loop']:.1f} s ({timings['loop'] / timings['one program']:.2f}x)")
    write_json(args.out, {
        "benchmark": "run_axis",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info(), "rounds": rounds, "rows": rows})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
