"""Benchmark: a round's time against the cohort size K, one ``vmap`` against ``"auto"`` chunks.

FedAvg (C = 10, B = 5) on MNIST-shaped data (N = 10^4, ``scaling._images``), Bernoulli(0.5)
availability, on one device (``mesh=None``; ``chunk_budget.py`` also times chunks with the
cohort over the cores), side by side in one process: for each task and K, the cohort trained
in one ``vmap`` (``client_chunk=None``) and with the automatic choice (``"auto"``, the
default: on a CPU, chunks of at most ``fedjax_avail.memory.CPU_CHUNK_BYTES`` of members'
working sets, :func:`fedjax_avail.memory.client_chunks`). Tasks: MNIST logistic regression
and the 784-200-200-10 MLP. Records s/round (compile excluded, best of ``--repeats`` after a
warm-up run), the chunk "auto" chose, and each K's time over the smallest K's. Target (issue
17): on a CPU a round's time grows at most linearly in K (K = 1000 at most 10x K = 100).

Usage::

    python benchmarks/cohort_chunks.py [--rounds 20] [--mlp-rounds 5] [--repeats 2] [--quick]
                                       [--out results/cohort_chunks.json]
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

from _common import machine_info, write_json  # noqa: I001 (benchmarks/ is on sys.path)
from scaling import _images, _time

import fedjax_avail as fa

OUT = Path(__file__).resolve().parent / "results" / "cohort_chunks.json"
C, B = 10, 5
K_VALUES = {"logistic_regression": (10, 100, 300, 1000, 3000), "mlp": (10, 100, 300, 1000)}


def _task(name: str) -> fa.Task:
    if name == "logistic_regression":
        return fa.tasks.logistic_regression(784, 10)
    return fa.tasks.mlp(784, (200, 200), 10)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--mlp-rounds", type=int, default=5,
                        help="rounds of the MLP (K = 1000 in one vmap: ~7 s a round on 2 cores)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true",
                        help="K <= 1000, 3 rounds (MLP 2), 1 repeat (a smoke test)")
    parser.add_argument("--out", type=Path, default=OUT)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.quick:
        args.rounds, args.mlp_rounds, args.repeats = 3, 2, 1
    fd = _images(10_000)
    rows: list = []
    payload = {
        "benchmark": "cohort_chunks",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "settings": {"rounds": args.rounds, "mlp_rounds": args.mlp_rounds,
                     "repeats": args.repeats, "N": fd.num_clients,
                     "C": C, "B": B, "cpu_chunk_bytes": fa.memory.CPU_CHUNK_BYTES},
        "rows": rows,
    }
    for name, k_values in K_VALUES.items():
        task = _task(name)
        rounds = args.rounds if name == "logistic_regression" else args.mlp_rounds
        for k in k_values:
            if args.quick and k > 1000:
                continue
            algorithm = fa.algorithms.FedAvg(clients_per_round=k, local_steps=C, batch_size=B,
                                             client_lr=0.01)
            chosen, _ = fa.memory.client_chunks("auto", task, fd, algorithm)
            row = {"task": name, "k": k, "auto_chunk": chosen}
            for label, chunk in (("vmap", None), ("auto", "auto")):
                if label == "auto" and chosen is None:  # "auto" is one vmap here: the same run
                    row["auto_s_per_round"] = row["vmap_s_per_round"]
                    continue
                result = _time(task, fd, algorithm, rounds, args.repeats,
                               client_chunk=chunk, mesh=None)
                row[f"{label}_s_per_round"] = result.timing["s_per_round"]
            first = next((r for r in rows if r["task"] == name), row)
            for label in ("vmap", "auto"):
                row[f"{label}_over_first_k"] = (row[f"{label}_s_per_round"]
                                                / first[f"{label}_s_per_round"])
            rows.append(row)
            write_json(args.out, payload)  # a run cut short keeps every finished row
            print(f"{name:20s} K={k:>5} vmap {1e3 * row['vmap_s_per_round']:9.2f} ms/round "
                  f"(x{row['vmap_over_first_k']:6.1f})   auto (chunk {chosen}) "
                  f"{1e3 * row['auto_s_per_round']:9.2f} ms/round "
                  f"(x{row['auto_over_first_k']:6.1f})", flush=True)


if __name__ == "__main__":
    main()
