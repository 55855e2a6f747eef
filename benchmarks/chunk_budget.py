"""Benchmark: a CPU round's time against the cohort chunk, over the cores and on one device.

What ``fedjax_avail.memory.CPU_CHUNK_BYTES`` (``client_chunk="auto"``'s budget) is chosen
from. FedAvg (C = 10, B = 5) on MNIST-shaped data (N = 10^4, ``scaling._images``), Bernoulli(0.5)
availability, side by side in one process: MNIST logistic regression at K = 100 and 1000 and
the 784-200-200-10 MLP at K = 40, each trained in explicit chunks of members
(``client_chunk=c``) and in ``"auto"``'s, with ``simulate``'s default mesh (on a CPU, the cohort
over the cores: ``fa.mesh.auto_mesh``) and on one device (``mesh=None``). Each row records
s/round (compile excluded, best of ``--repeats`` after a warm-up run), the chunk in members and
in bytes of members' working sets (one member's working set and update as the budget counts
them, ``fedjax_avail.memory._member_bytes``: what ``"auto"`` divides it by), and its time over
the same layout's best chunk.

Usage::

    python benchmarks/chunk_budget.py [--rounds 20] [--repeats 2] [--quick]
                                      [--out results/chunk_budget.json]
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

import jax
from _common import machine_info, write_json  # noqa: I001 (benchmarks/ is on sys.path)
from cohort_chunks import _task
from scaling import _images, _time

import fedjax_avail as fa

OUT = Path(__file__).resolve().parent / "results" / "chunk_budget.json"
C, B = 10, 5
# (task, K, explicit chunks in members, rounds per run as a multiple of --rounds)
SETTINGS = (("logistic_regression", 100, (2, 5, 10, 16, 25, 50), 1.0),
            ("logistic_regression", 1000, (5, 10, 16, 25, 56), 0.25),
            ("mlp", 40, (1, 2, 4, 10), 0.25))
LAYOUTS = {"cores": "auto", "one_device": None}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="4 rounds, 1 repeat (a smoke test)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    for name in ("rounds", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.quick:
        args.rounds, args.repeats = 4, 1
    fd = _images(10_000)
    rows: list = []
    payload = {
        "benchmark": "chunk_budget",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "settings": {"rounds": args.rounds, "repeats": args.repeats, "N": fd.num_clients,
                     "C": C, "B": B, "cpu_chunk_bytes": fa.memory.CPU_CHUNK_BYTES},
        "rows": rows,
    }
    for name, k, chunks, share in SETTINGS:
        task = _task(name)
        algorithm = fa.algorithms.FedAvg(clients_per_round=k, local_steps=C, batch_size=B,
                                         client_lr=0.01)
        # one member's working set in training and its update, as the budget counts them
        member = fa.memory._member_bytes(task, task.init(jax.random.PRNGKey(0)), fd, B)
        rounds = max(2, round(args.rounds * share))
        for layout, mesh in LAYOUTS.items():
            timed = []
            for chunk in (*chunks, "auto"):
                result = _time(task, fd, algorithm, rounds, args.repeats, client_chunk=chunk,
                               mesh=mesh)
                row = {"task": name, "k": k, "layout": layout,
                       "devices": result.memory["devices"], "client_chunk": chunk,
                       "members_at_once": result.memory["client_chunk"],
                       "chunk_bytes": member * chunk if isinstance(chunk, int) else None,
                       "s_per_round": result.timing["s_per_round"]}
                timed.append(row)
                print(f"{name:20s} K={k:>5} {layout:10s} chunk {chunk!s:>4} "
                      f"({(row['chunk_bytes'] or 0) / 2**20:5.2f} MiB) "
                      f"{1e3 * row['s_per_round']:8.2f} ms/round", flush=True)
            best = min(r["s_per_round"] for r in timed)
            for row in timed:
                row["over_best"] = row["s_per_round"] / best
            rows.extend(timed)
            write_json(args.out, payload)  # a run cut short keeps every finished layout
    return payload


if __name__ == "__main__":
    main()
