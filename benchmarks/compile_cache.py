"""Benchmark: the persistent compilation cache, first invocation against the second.

Two workloads, each run twice in fresh processes on one empty cache directory (the second
finds what the first wrote), side by side in one run:

* ``cli``: the README's default run, ``fedjax-avail run`` (digits-diurnal, offline), with
  ``XDG_CACHE_HOME`` pointing at the fresh cache: compile seconds are ``summary.json``'s
  ``compile_seconds`` summed over the algorithms, wall seconds the whole process;
* ``notebook``: the quickstart notebook's main cell (FedAvg, FedLaAvg and sequential SGD on
  MNIST, N = 1000, K = 100, ``--rounds`` rounds) after ``fa.enable_compilation_cache(DIR)``:
  compile seconds are ``Result.timing["compile"]`` summed, wall seconds the whole process
  (imports and data loading included).

Targets (issue 17): the second invocation >= 5x less compile time and >= 2x less wall time.
``wall_s_first_over_second_without_compile`` bounds what a faster cache lookup could give: the
first invocation's wall time over the second's less its measured compile time (the
algorithms' ``compile`` timings; a few tiny eager programs are not in them).

Usage::

    python benchmarks/compile_cache.py [--rounds 100] [--repeats 3]
        [--out benchmarks/results/compile_cache.json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import QUICKSTART_SETUP, REPO_ROOT, default_data_dir, machine_info, write_json  # noqa: I001 (benchmarks/ is on sys.path)

DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "compile_cache.json"

NOTEBOOK = """
import json, sys
import fedjax_avail as fa
fa.enable_compilation_cache(sys.argv[1])
data_dir = sys.argv[2]
""" + QUICKSTART_SETUP + """
compile_s = sum(fa.simulate(task, fd, a, availability, rounds=int(sys.argv[3]), seed=0,
                            eval_every=10, test_data=test).timing["compile"]
                for a in algorithms.values())
print(json.dumps({"compile_s": compile_s}))
"""


def _cli(cache: Path, out: Path) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if k != "FEDJAX_AVAIL_COMPILATION_CACHE"}
    env["XDG_CACHE_HOME"] = str(cache)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "fedjax_avail", "run", "--out", str(out),
                    "--no-progress"], env=env, check=True, capture_output=True)
    wall = time.perf_counter() - start
    summary = json.loads((out / "summary.json").read_text())
    return {"wall_s": wall, "compile_s": sum(row["compile_seconds"] for row in summary)}


def _notebook(cache: Path, data_dir: str, rounds: int) -> dict[str, float]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", NOTEBOOK, str(cache), data_dir, str(rounds)],
                          check=True, capture_output=True, text=True)
    wall = time.perf_counter() - start
    return {"wall_s": wall, **json.loads(done.stdout.splitlines()[-1])}


def _ratios(first: list[dict], second: list[dict]) -> dict[str, float]:
    def median(rows, key):
        return statistics.median(r[key] for r in rows)

    ratios = {f"{key}_first_over_second": median(first, key) / median(second, key)
              for key in ("compile_s", "wall_s")}
    # the second invocation less its measured compile time: the rest no cache can cut
    ratios["wall_s_first_over_second_without_compile"] = median(first, "wall_s") / (
        median(second, "wall_s") - median(second, "compile_s"))
    return ratios


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data-dir", default=str(default_data_dir()))
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    runs: dict[str, dict[str, list]] = {w: {"first": [], "second": []}
                                        for w in ("cli", "notebook")}
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as scratch:
            scratch = Path(scratch)
            for order in ("first", "second"):
                runs["cli"][order].append(_cli(scratch / "xdg", scratch / f"out_{order}"))
                runs["notebook"][order].append(
                    _notebook(scratch / "nb_cache", args.data_dir, args.rounds))
    results = {w: {**r, **_ratios(r["first"], r["second"])} for w, r in runs.items()}
    for workload, r in results.items():
        print(f"{workload}: compile {r['compile_s_first_over_second']:.1f}x less, wall "
              f"{r['wall_s_first_over_second']:.2f}x less on the second invocation ("
              f"{r['wall_s_first_over_second_without_compile']:.2f}x without its compile time)")
    write_json(args.out, {"benchmark": "compile_cache", "rounds": args.rounds,
                          "repeats": args.repeats, "date": str(datetime.date.today()),
                          "machine": machine_info(), "results": results})


if __name__ == "__main__":
    main()
