"""Benchmark: wall seconds of ``fedjax-avail run NAME --dry-run``, this tree against a git revision.

A dry run makes every check a run makes before compute (settings, data, the algorithms, the
settings nothing reads, the memory estimate of each program), so a user waits for it before
anything trains, and the documented-commands test makes about 170 of them. Each measurement is
one fresh process (imports included), the two trees alternating so that slow and fast phases of
a noisy machine fall on both alike; the medians and their ratio are recorded.

Usage::

    python benchmarks/dry_run_seconds.py --ref b8d2ea5 [--repeats 3]
        [--out benchmarks/results/dry_run_seconds.json]
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO_ROOT, default_data_dir, machine_info, write_json  # noqa: I001 (benchmarks/ is on sys.path)
from before_after import export

# Sweeps of the reproduction guide: five panels of one program each, six panels, and three
# points sharing one program.
COMMANDS = (
    ("fedlaavg-mnist-fig4",),
    ("subtrunc-mnist-table2",),
    ("time-to-accuracy-mnist", "--sweep", "lr=0.01,0.03,0.1", "--set", "seeds=0,1,2,3,4"),
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", default="HEAD", help="the git revision to compare with")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data-dir", default=None, help="MNIST's IDX files (default: "
                        "$FEDJAX_AVAIL_MNIST_DIR or ../shared/data/mnist)")
    parser.add_argument("--out", default="benchmarks/results/dry_run_seconds.json")
    return parser.parse_args(argv)


def dry_run_seconds(tree: Path, command: tuple[str, ...], data_dir: Path) -> float:
    """One dry run of ``command`` with the package of ``tree``, in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(tree), "FEDJAX_AVAIL_MNIST_DIR": str(data_dir)}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "fedjax_avail", "run", *command, "--dry-run"],
                          env=env, cwd=tree, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} in {tree}: {done.stderr[-2000:]}")
    return seconds


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    data_dir = (Path(args.data_dir) if args.data_dir else default_data_dir()).resolve()
    with tempfile.TemporaryDirectory() as scratch:
        trees = {"this tree": REPO_ROOT, args.ref: export(args.ref, Path(scratch))}
        for tree in trees.values():  # each child imports the package of its own tree
            where = subprocess.run([sys.executable, "-c", "import fedjax_avail; "
                                    "print(fedjax_avail.__file__)"], cwd=tree, check=True,
                                   env={**os.environ, "PYTHONPATH": str(tree)},
                                   capture_output=True, text=True).stdout.strip()
            if not where.startswith(str(tree)):
                raise RuntimeError(f"a child imported fedjax_avail from {where}, not {tree}")
        rows = []
        for command in COMMANDS:
            seconds: dict[str, list[float]] = {name: [] for name in trees}
            for _ in range(args.repeats):
                for name, tree in trees.items():
                    seconds[name].append(dry_run_seconds(tree, command, data_dir))
            medians = {name: statistics.median(values) for name, values in seconds.items()}
            rows.append({"command": " ".join(command), "seconds": seconds, "median_s": medians,
                         "this_over_ref": medians["this tree"] / medians[args.ref]})
            print(f"{rows[-1]['command']}: {medians['this tree']:.2f} s against "
                  f"{medians[args.ref]:.2f} s ({rows[-1]['this_over_ref']:.2f}x)", flush=True)
    write_json(args.out, {
        "benchmark": "dry_run_seconds", "ref": args.ref,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["dry_run_seconds.py", *(argv if argv is not None else
                                                      sys.argv[1:])]),
        "machine": machine_info(), "repeats": args.repeats, "rows": rows})


if __name__ == "__main__":
    main()
