"""Benchmark: one run's cohort on one CPU device against split over the cores, by cohort size.

The measurements behind ``simulate``'s ``mesh="auto"`` rule (``fa.mesh.auto_mesh``: the cohort
over the CPU devices when it has at least ``AUTO_MEMBERS_PER_DEVICE`` members a device).
FedAvg and FedLaAvg on FedLaAvg's MNIST setting (N = 1000 one-digit clients, logistic
regression, diurnal availability D = 1, E = 100, C = 10, B = 5, lr 0.01) for each K of
``--ks``, each run ``--rounds`` rounds with ``mesh=None`` (one device) and with a ``"cohort"``
mesh over every CPU device, alternating, ``--repeats`` times; ``s_per_round`` is the engine's
own round time (compilation and evaluation excluded), the best of the repeats.

Usage::

    python benchmarks/cpu_cores.py [--ks 2,4,10,20,100] [--rounds 300] [--repeats 2]
        [--out benchmarks/results/cpu_cores.json]
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path
from typing import Any

import jax
from _common import REPO_ROOT, default_data_dir, machine_info, write_json  # noqa: I001 (benchmarks/ is on sys.path)

import fedjax_avail as fa

DEFAULT_OUT = REPO_ROOT / "benchmarks" / "results" / "cpu_cores.json"
ALGORITHMS = {"fedavg": fa.algorithms.FedAvg, "fedlaavg": fa.algorithms.FedLaAvg}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ks", default="2,4,10,20,100")
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    args.ks = [int(k) for k in args.ks.split(",")]
    if min(args.ks) < 1 or args.rounds < 1 or args.repeats < 1:
        parser.error("--ks, --rounds and --repeats must be >= 1")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    devices = jax.devices("cpu")
    if len(devices) < 2:
        raise SystemExit(f"one CPU device ({fa.mesh.CPU_DEVICES_ENV} or a single core): "
                         "nothing to compare")
    cores = jax.sharding.Mesh(devices, (fa.mesh.COHORT,))
    train, _ = fa.data.load_mnist(args.data_dir or default_data_dir())
    fd = fa.data.one_label_per_client(train["x"], train["y"], 1000, seed=0)
    task = fa.tasks.logistic_regression(784, 10)
    process = fa.availability.diurnal(fd.client_labels(), D=1, E=100)
    rows = []
    for k in args.ks:
        for name, make in ALGORITHMS.items():
            algorithm = make(clients_per_round=k, local_steps=10, batch_size=5, client_lr=0.01)
            times: dict[str, list[float]] = {"one_device": [], "cores": []}
            for _ in range(args.repeats):
                for label, mesh in (("one_device", None), ("cores", cores)):
                    result = fa.simulate(task, fd, algorithm, process, rounds=args.rounds,
                                         seed=0, eval_every=args.rounds, mesh=mesh)
                    times[label].append(result.timing["s_per_round"])
            row = {"algorithm": name, "k": k, "one_device_s_per_round": min(times["one_device"]),
                   "cores_s_per_round": min(times["cores"]), "runs": times,
                   "auto_picks_cores": fa.mesh.auto_mesh(k, False) is not None}
            row["speedup"] = row["one_device_s_per_round"] / row["cores_s_per_round"]
            print(f"{name:9s} K={k:<4d} one device {row['one_device_s_per_round'] * 1e3:7.2f} ms, "
                  f"{len(devices)} cores {row['cores_s_per_round'] * 1e3:7.2f} ms: "
                  f"{row['speedup']:.2f}x (auto: {'cores' if row['auto_picks_cores'] else 'one'})",
                  flush=True)
            rows.append(row)
    payload = {"benchmark": "cpu_cores", "date": datetime.datetime.now(
        datetime.timezone.utc).isoformat(timespec="seconds"), "machine": machine_info(),
        "devices": len(devices), "rounds": args.rounds, "repeats": args.repeats,
        "members_per_device_rule": fa.mesh.AUTO_MEMBERS_PER_DEVICE, "rows": rows}
    write_json(args.out, payload)
    return payload


if __name__ == "__main__":
    main()
