"""Benchmark: the cost of a selection strategy per round, beside local training, against N.

For N = 10^3, 10^4, 10^5 clients (10 random uint8 8x8 examples each, 64x10 logistic regression,
P = 650), FedAvg with K = 10 clients, C = 10 local steps, B = 5, under each strategy:
``Uniform()``, ``PowerOfChoice(d=100)``, ``DivFL()`` (stochastic greedy, r = 10), ``SubTrunc()``,
``UnionFL()``. ``s_per_round`` is the engine's round time (compile, evaluation and DivFL's
one-off pass over all clients excluded; best of 3 after a warm-up); ``selection_s`` is the same
round time minus Uniform's (whose selection is one top-k over N), i.e. what the strategy adds:
for the submodular ones, coverage distances of every client to r candidates at each of the K
greedy steps (O(K r N P)), and the K selected clients' full-batch gradients.

Usage::

    python benchmarks/selection_scaling.py [--rounds 50] [--quick] [--out results/...json]
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

import numpy as np
from _common import machine_info, write_json  # noqa: I001 (benchmarks/ is on sys.path)

import fedjax_avail as fa

OUT = Path(__file__).resolve().parent / "results" / "selection_scaling.json"
S = fa.selection


def _data(n: int) -> fa.FederatedData:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 255, (n * 10, 8, 8)).astype(np.uint8)
    return fa.data.iid(x, rng.integers(0, 10, n * 10), n)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="N up to 10^4, 1 repeat")
    parser.add_argument("--out", type=Path, default=OUT)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    sizes = (1_000, 10_000) if args.quick else (1_000, 10_000, 100_000)
    repeats = 1 if args.quick else 3
    task = fa.tasks.logistic_regression(64, 10)
    strategies = {"uniform": S.Uniform(), "power_of_choice_d100": S.PowerOfChoice(100),
                  "divfl": S.DivFL(), "subtrunc": S.SubTrunc(), "unionfl": S.UnionFL()}
    rows = []
    for n in sizes:
        fd = _data(n)
        base = None
        for name, strategy in strategies.items():
            alg = fa.algorithms.FedAvg(clients_per_round=10, local_steps=10, batch_size=5,
                                       selection=strategy)
            run = lambda alg=alg, fd=fd: fa.simulate(  # noqa: E731
                task, fd, alg, fa.availability.AlwaysOn(), rounds=args.rounds,
                eval_every=args.rounds)
            run()
            results = [run() for _ in range(repeats)]
            per_round = min(r.timing["s_per_round"] for r in results)
            base = per_round if name == "uniform" else base
            row = {"num_clients": n, "strategy": name, "s_per_round": per_round,
                   "selection_s": per_round - base,
                   "prepare_s": results[0].timing.get("prepare", 0.0)}
            rows.append(row)
            print(f"N={n:>7} {name:22s} {per_round * 1e3:9.2f} ms/round, selection adds "
                  f"{(per_round - base) * 1e3:8.2f} ms (local training ~{base * 1e3:.2f} ms); "
                  f"one-off pass over all clients {row['prepare_s']:.2f} s", flush=True)
    write_json(args.out, {
        "benchmark": "selection_scaling",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "rounds": args.rounds,
        "rows": rows,
    })
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
