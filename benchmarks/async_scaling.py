"""Benchmark: asynchronous server updates per second against N, and memory of stale models.

For N = 10^3, 10^4, 10^5 clients (10 random uint8 8x8 examples each, 64x10 logistic regression)
it times, in one process and side by side:

* ``FedBuff(buffer_size=K, concurrency=100, local_steps=5, batch_size=5)`` under exponential job
  times (the event clock);
* ``KAsyncSGD(clients_per_round=K, batch_size=4)`` under WKAFL's K-of-P protocol;

for K = 10 (and K = 50 at N = 10^4, to show the cost follows K), with a history of H = 64
models. ``updates_per_s`` = R / run time (compile and evaluation excluded, best of 3 after an
untimed warm-up). Memory: the estimate of the stale-model store for ``history=64`` (H x P) and
``history=None`` (per-client copies, N x P), and the device bytes the run held.

Usage::

    python benchmarks/async_scaling.py [--rounds 300] [--quick] [--out results/async_scaling.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import time
from pathlib import Path

import numpy as np
from _common import machine_info, write_json  # noqa: I001 (benchmarks/ is on sys.path)

import fedjax_avail as fa

OUT = Path(__file__).resolve().parent / "results" / "async_scaling.json"


def _data(n: int) -> fa.FederatedData:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 255, (n * 10, 8, 8)).astype(np.uint8)
    return fa.data.iid(x, rng.integers(0, 10, n * 10), n)


def _algorithms(k: int) -> dict[str, object]:
    return {
        "fedbuff": fa.algorithms.FedBuff(buffer_size=k, concurrency=100, local_steps=5,
                                         batch_size=5, history=64,
                                         durations=fa.clock.Exponential(1.0)),
        "kasync_kofp": fa.algorithms.KAsyncSGD(clients_per_round=k, batch_size=4, history=64),
    }


def _time(task, fd, algorithm, rounds: int, repeats: int) -> tuple[float, dict]:
    run = lambda: fa.simulate(task, fd, algorithm, fa.availability.AlwaysOn(),  # noqa: E731
                              rounds=rounds, eval_every=rounds)
    run()  # warm-up (compilation caches are per call; timing excludes compile anyway)
    best, memory = np.inf, {}
    for _ in range(repeats):
        result = run()
        best = min(best, result.timing["run"])
        memory = result.memory
    return rounds / best, memory


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="N up to 10^4, 1 repeat")
    parser.add_argument("--out", type=Path, default=OUT)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    sizes = (1_000, 10_000) if args.quick else (1_000, 10_000, 100_000)
    repeats = 1 if args.quick else args.repeats
    task = fa.tasks.logistic_regression(64, 10)
    rows = []
    for n in sizes:
        fd = _data(n)
        for k in ((10, 50) if n == 10_000 else (10,)):
            for name, algorithm in _algorithms(k).items():
                rate, memory = _time(task, fd, algorithm, args.rounds, repeats)
                store = {}
                for history in (64, None):
                    est = fa.estimate_memory(task, fd, dataclasses.replace(
                        algorithm, history=history))
                    store["history_64" if history else "per_client"] = (
                        est.terms["server_state"] + est.terms["per_client_tables"])
                rows.append({"algorithm": name, "num_clients": n, "k": k,
                             "updates_per_s": rate, "state_bytes": store,
                             "measured_bytes": memory.get("measured")})
                print(f"{name:12s} N={n:>7} K={k:>3}: {rate:8.1f} updates/s; state bytes "
                      f"H=64: {store['history_64'] / 1e6:7.1f} MB, per-client: "
                      f"{store['per_client'] / 1e6:8.1f} MB", flush=True)
    write_json(args.out, {
        "benchmark": "async_scaling",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "rounds": args.rounds,
        "rows": rows,
    })
    print(f"wrote {args.out}")


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"{time.perf_counter() - t0:.0f} s in all")
