"""Benchmark: what an availability process adds to a round at N = 100,000 clients.

Setting: N = 100,000 clients with 10 random uint8 8x8 examples each (``fa.data.iid`` on random
data, 10 classes), a 64x10 logistic regression, FedAvg with K = 100 clients per round, C = 10
local SGD steps on batches of B = 5, client lr 0.01. The same run is timed under five processes,
side by side in one process:

* ``AlwaysOn()``, the baseline;
* ``Bernoulli.uniform_range(N, 0.1, 0.9)`` (MIFA's random per-client p_i);
* ``Markov(p_on=0.1, p_off=0.1)`` (bursty, on half the time in runs of ~10 rounds);
* ``HourOfDay(start_hour, hours=8)`` with random start hours;
* ``all_of(HourOfDay(...), Bernoulli(0.5))``;
* ``from_fedscale(example_fedscale_trace(1000 devices, 7 days), seconds_per_slot=60)``: interval
  traces in FedScale's format: each step compares every client's phase with its intervals.

Two figures per process:

* **round**: ``fa.simulate(..., rounds=R, eval_every=R)``, ``Result.timing["s_per_round"]``
  (compilation and evaluation excluded: the round scan is compiled ahead of time and timed alone).
  The processes are run ``--repeats`` times in interleaved order and the median is reported;
  ``overhead`` = median round / median AlwaysOn round - 1 (``overhead_of_min``: the same with
  the fastest repeats, less sensitive to other load on a shared machine).
* **step**: a compiled ``lax.scan`` of ``process.step`` alone (with the keys ``simulate`` uses,
  and ``sum(mask)`` so the mask is not optimised away), per step, best of ``--repeats``. Its
  ratio to the fastest AlwaysOn round (``step_share``) is a less noisy estimate of the added
  time.

The target is at most 10% added round time. The result is written atomically to
``benchmarks/results/availability_overhead.json``.

Usage::

    python benchmarks/availability_overhead.py [--num-clients 100000] [--rounds 200]
        [--repeats 5] [--step-rounds 500] [--out benchmarks/results/availability_overhead.json]
    python benchmarks/availability_overhead.py --quick   # N = 10,000, R = 50, 1 repeat
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from _common import machine_info, write_json  # noqa: I001 (benchmarks/ is on sys.path)

import fedjax_avail as fa
from fedjax_avail import _keys

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "availability_overhead.json"

EXAMPLES_PER_CLIENT = 10
FEATURES = 64  # 8x8 uint8 images
NUM_CLASSES = 10
CLIENTS_PER_ROUND = 100  # K
LOCAL_STEPS = 10  # C
BATCH_SIZE = 5  # B
CLIENT_LR = 0.01
SEED = 0
TARGET_OVERHEAD = 0.10



PROCESS_DESCRIPTIONS = {
    "AlwaysOn": "AlwaysOn()",
    "Bernoulli": "Bernoulli.uniform_range(N, 0.1, 0.9, seed=0)",
    "Markov": "Markov(p_on=0.1, p_off=0.1)",
    "HourOfDay": "HourOfDay(start_hour=[N] random 0..23, hours=8, rounds_per_hour=1)",
    "all_of(HourOfDay, Bernoulli)": "all_of(the HourOfDay above, Bernoulli(0.5))",
    "Intervals (FedScale format)": "from_fedscale(example_fedscale_trace(num_devices=1000, "
                                   "days=7, seed=0), N, seconds_per_slot=60)",
}


def make_processes(num_clients: int) -> dict[str, Any]:
    av = fa.availability
    start = np.random.default_rng(SEED).integers(0, 24, num_clients)
    hours = av.HourOfDay(start, hours=8, rounds_per_hour=1)
    return {
        "AlwaysOn": av.AlwaysOn(),
        "Bernoulli": av.Bernoulli.uniform_range(num_clients, 0.1, 0.9, seed=SEED),
        "Markov": av.Markov(p_on=0.1, p_off=0.1),
        "HourOfDay": hours,
        "all_of(HourOfDay, Bernoulli)": av.all_of(hours, av.Bernoulli(0.5)),
        "Intervals (FedScale format)": av.from_fedscale(
            av.example_fedscale_trace(num_devices=1000, days=7, seed=SEED), num_clients,
            seconds_per_slot=60),
    }


def step_seconds(process, num_clients: int, steps: int, repeats: int) -> float:
    """Seconds per ``process.step`` in a compiled scan of ``steps`` steps (best of repeats)."""
    keys = _keys.run_keys(SEED)
    state = process.init(keys.availability_init, num_clients)

    def run(state):
        def body(carry, t):
            state, count = carry
            state, mask = process.step(state, t, _keys.availability_key(keys, t))
            return (state, count + jnp.sum(mask)), None

        (_, count), _ = jax.lax.scan(body, (state, jnp.int32(0)),
                                     jnp.arange(steps, dtype=jnp.int32))
        return count

    compiled = jax.jit(run).lower(state).compile()
    jax.block_until_ready(compiled(state))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(state))
        times.append(time.perf_counter() - t0)
    return min(times) / steps


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-clients", type=int, default=100_000, help="N")
    parser.add_argument("--rounds", type=int, default=200, help="rounds per simulate run (R)")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved repeats")
    parser.add_argument("--step-rounds", type=int, default=500, help="steps in the step-only scan")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON result path")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: N = 10000, R = 50, 1 repeat, 100 steps")
    args = parser.parse_args(argv)
    if args.quick:
        args.num_clients, args.rounds, args.repeats, args.step_rounds = 10_000, 50, 1, 100
    if min(args.num_clients, args.rounds, args.repeats, args.step_rounds) < 1:
        parser.error("--num-clients, --rounds, --repeats and --step-rounds must be >= 1")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    n = args.num_clients
    rng = np.random.default_rng(SEED)
    x = rng.integers(0, 256, (n * EXAMPLES_PER_CLIENT, FEATURES), dtype=np.uint8)
    y = rng.integers(0, NUM_CLASSES, n * EXAMPLES_PER_CLIENT).astype(np.int32)
    fd = fa.data.iid(x, y, n, seed=SEED)
    task = fa.tasks.logistic_regression(FEATURES, NUM_CLASSES)
    alg = fa.algorithms.FedAvg(clients_per_round=CLIENTS_PER_ROUND, local_steps=LOCAL_STEPS,
                               batch_size=BATCH_SIZE, client_lr=CLIENT_LR)
    processes = make_processes(n)

    rounds: dict[str, list[float]] = {name: [] for name in processes}
    compile_s: dict[str, list[float]] = {name: [] for name in processes}
    available: dict[str, float] = {}
    # Warm-up (untimed): the first run of a process pays one-off allocation and cache costs.
    fa.simulate(task, fd, alg, processes["AlwaysOn"], rounds=args.rounds, seed=SEED,
                eval_every=args.rounds)
    for repeat in range(args.repeats):
        order = list(processes) if repeat % 2 == 0 else list(reversed(processes))
        for name in order:
            result = fa.simulate(task, fd, alg, processes[name], rounds=args.rounds, seed=SEED,
                                 eval_every=args.rounds)
            rounds[name].append(result.timing["s_per_round"])
            compile_s[name].append(result.timing["compile"])
            available[name] = float(np.mean(result.round_metrics["num_available"]) / n)
            print(f"  repeat {repeat}: {name:30s} {result.timing['s_per_round'] * 1e3:7.3f} "
                  "ms/round", flush=True)

    steps = {name: step_seconds(p, n, args.step_rounds, max(args.repeats, 3))
             for name, p in processes.items()}
    base = statistics.median(rounds["AlwaysOn"])
    base_min = min(rounds["AlwaysOn"])
    rows = {}
    for name in processes:
        median = statistics.median(rounds[name])
        rows[name] = {
            "s_per_round_median": median,
            "s_per_round_min": min(rounds[name]),
            "s_per_round_all": rounds[name],
            "compile_s_median": statistics.median(compile_s[name]),
            "mean_available_share": available[name],
            "overhead": median / base - 1.0,
            "overhead_of_min": min(rounds[name]) / base_min - 1.0,
            "s_per_step_alone": steps[name],
            "step_share": steps[name] / base_min,
            "target_met": median / base - 1.0 <= TARGET_OVERHEAD,
        }
    payload = {
        "benchmark": "availability_overhead",
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "command": "python benchmarks/availability_overhead.py "
                   f"--num-clients {n} --rounds {args.rounds} --repeats {args.repeats} "
                   f"--step-rounds {args.step_rounds}",
        "machine": machine_info(),
        "setting": {
            "num_clients": n, "examples_per_client": EXAMPLES_PER_CLIENT,
            "features": FEATURES, "task": "logistic_regression(64, 10)",
            "algorithm": f"FedAvg(K={CLIENTS_PER_ROUND}, C={LOCAL_STEPS}, B={BATCH_SIZE}, "
                         f"client_lr={CLIENT_LR})",
            "rounds": args.rounds, "repeats": args.repeats, "step_rounds": args.step_rounds,
            "processes": PROCESS_DESCRIPTIONS,
        },
        "target_overhead": TARGET_OVERHEAD,
        "results": rows,
    }
    write_json(args.out, payload)

    print(f"\nN = {n}, FedAvg K={CLIENTS_PER_ROUND} C={LOCAL_STEPS} B={BATCH_SIZE}, "
          f"R = {args.rounds}, median of {args.repeats}; {payload['machine']['cpu_count']} CPUs, "
          f"JAX {jax.__version__} ({jax.default_backend()})")
    print(f"{'process':30s} {'ms/round':>9s} {'overhead':>9s} {'min ms':>7s} {'overhead':>9s} "
          f"{'step us':>8s} {'step/round':>10s} {'avail':>6s}")
    for name, row in rows.items():
        print(f"{name:30s} {row['s_per_round_median'] * 1e3:9.3f} {row['overhead']:+9.1%} "
              f"{row['s_per_round_min'] * 1e3:7.3f} {row['overhead_of_min']:+9.1%} "
              f"{row['s_per_step_alone'] * 1e6:8.1f} {row['step_share']:10.1%} "
              f"{row['mean_available_share']:6.1%}")
    print("(ms/round: median of the repeats; min ms: fastest repeat; step/round: the step-only "
          "cost over the fastest AlwaysOn round)")
    print(f"target: <= {TARGET_OVERHEAD:.0%} added round time; written to {args.out}")
    return payload


if __name__ == "__main__":
    main()
