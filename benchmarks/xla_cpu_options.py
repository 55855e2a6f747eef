"""Benchmark: the quickstart notebook's rounds under XLA:CPU's kernel-library options.

The notebook's rounds (FedAvg, FedLaAvg and sequential SGD of MNIST logistic regression, N =
1000, K = 100, C = 10 local steps of B = 5) are most of its time once the compilation cache
holds its programs (``compile_cache.py``). Their small batched matmuls run at a fraction of the
CPU's matmul rate. This benchmark asks whether another of XLA:CPU's dot back ends (YNNPACK, the
default here; its single-dot mode; XLA's own emitter; XNNPACK; oneDNN) runs them faster. Each
option runs in a fresh process (``XLA_FLAGS`` is read when JAX starts), the options interleaved
over ``--repeats`` passes of the list, each pass in another order, so that a drift of the
machine touches them all. None of these options changes a result beyond float reordering (the
final training losses are recorded to show it); fast-math options, which do, are left out. An
option this XLA does not know fails its process; it is recorded as an error and the others run.

Usage::

    python benchmarks/xla_cpu_options.py [--rounds 100] [--repeats 2]
        [--out benchmarks/results/xla_cpu_options.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from _common import QUICKSTART_SETUP, REPO_ROOT, default_data_dir, machine_info, write_json  # noqa: I001 (benchmarks/ is on sys.path)

DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "xla_cpu_options.json"

OPTIONS = {  # name -> XLA_FLAGS; the names say what they are on JAX 0.10.2, whose XLA:CPU
    # fuses dots with YNNPACK by default and XNNPACK or oneDNN only when asked
    "default (YNNPACK dot fusions)": "",
    "YNNPACK single dots": "--xla_cpu_experimental_ynn_fusion_type=individual_dot",
    "XLA's own dot emitter (no YNNPACK fusions)": "--xla_cpu_experimental_ynn_fusion_type=",
    "XNNPACK dot fusions": "--xla_cpu_experimental_ynn_fusion_type= "
                           "--xla_cpu_experimental_xnn_fusion_type=dot",
    "oneDNN dot fusions": "--xla_cpu_experimental_ynn_fusion_type= "
                          "--xla_cpu_experimental_onednn_fusion_type=dot",
}

CELL = """
import json, sys
data_dir = sys.argv[1]
""" + QUICKSTART_SETUP + """
rounds = int(sys.argv[2])
out = {}
for name, algorithm in algorithms.items():
    result = fa.simulate(task, fd, algorithm, availability, rounds=rounds, seed=0,
                         eval_every=rounds, test_data=test)
    out[name] = {"ms_per_round": result.timing["run"] / rounds * 1e3,
                 "compile_s": result.timing["compile"],
                 "train_loss": result.history["train_loss"][-1]}
print(json.dumps(out))
"""


def _cell(flags: str, data_dir: str, rounds: int) -> dict:
    """The cell's rounds under ``flags``, or ``{"error": ...}`` when the process fails (an XLA
    that does not know a flag stops at start; the other options still run)."""
    env = {**os.environ, "XLA_FLAGS": flags}
    done = subprocess.run([sys.executable, "-c", CELL, data_dir, str(rounds)], env=env,
                          capture_output=True, text=True)
    if done.returncode:
        print(f"XLA_FLAGS={flags!r} failed:\n{done.stderr[-1500:]}", file=sys.stderr)
        return {"error": done.stderr[-1500:]}
    return json.loads(done.stdout.splitlines()[-1])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--data-dir", default=str(default_data_dir()))
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    names = list(OPTIONS)
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for repeat in range(args.repeats):  # each repeat in another order: a drift touches all
        for name in names[repeat % len(names):] + names[:repeat % len(names)]:
            runs[name].append(_cell(OPTIONS[name], args.data_dir, args.rounds))
    results = {}
    for name, cells in runs.items():
        done = [cell for cell in cells if "error" not in cell]
        results[name] = {"xla_flags": OPTIONS[name], "runs": cells}
        for alg in done[0] if done else ():
            results[name][alg] = {key: statistics.median(cell[alg][key] for cell in done)
                                  for key in ("ms_per_round", "compile_s", "train_loss")}
    default = results[names[0]]
    algorithms = [alg for alg in default if alg not in ("xla_flags", "runs")]
    print(f"{'option':44s}" + "".join(f"{alg:>22s}" for alg in algorithms))
    for name, r in results.items():
        cells = (f"{r[a]['ms_per_round']:9.2f} ms "
                 f"({default[a]['ms_per_round'] / r[a]['ms_per_round']:4.2f}x)"
                 if a in r else f"{'failed':>22s}" for a in algorithms)
        print(f"{name:44s}" + "".join(cells))
    write_json(args.out, {"benchmark": "xla_cpu_options", "rounds": args.rounds,
                          "repeats": args.repeats, "date": str(datetime.date.today()),
                          "machine": machine_info(), "results": results})


if __name__ == "__main__":
    main()
