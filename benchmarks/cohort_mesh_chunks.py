"""Benchmark: a chunked cohort split over a "cohort" device mesh, against one device.

FedAvg training an MLP 784-200-200-10 (K = 40 of N = 100 random MNIST-shaped clients, 5 local
steps of B = 10) on a CPU made into 2 devices, its cohort trained in chunks of 4
(``client_chunk=4``), in ``"auto"``'s chunks (1 member: ``fa.memory.client_chunks``; under
the mesh, of each device's 20) or in one ``vmap``, with and without
``mesh=fa.mesh.cohort_mesh(2)``:
the engine's round time (compilation apart) and XLA's working set of a round, per layout, in
one process one after the other, and the largest difference of each final model from the
one-device chunked run's.

Usage::

    python benchmarks/cohort_mesh_chunks.py [--rounds 10] [--repeats 3]
        [--out benchmarks/results/cohort_mesh_chunks.json]
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

import jax
import numpy as np
from _common import machine_info, write_json  # noqa: I001 (benchmarks/ is on sys.path)
from jax.flatten_util import ravel_pytree

import fedjax_avail as fa

OUT = Path(__file__).resolve().parent / "results" / "cohort_mesh_chunks.json"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=OUT)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    jax.config.update("jax_num_cpu_devices", 2)  # before JAX's first computation
    rng = np.random.default_rng(0)
    n, rows = 100, 2000
    fd = fa.FederatedData.from_arrays(
        {"x": rng.integers(0, 256, (rows, 784)).astype(np.uint8),
         "y": rng.integers(0, 10, rows)}, np.arange(rows) % n, num_clients=n)
    task = fa.tasks.mlp(784, (200, 200), 10)
    alg = fa.algorithms.FedAvg(clients_per_round=40, local_steps=5, batch_size=10,
                               client_lr=0.05)
    results, reference = {}, None
    for devices, chunk in ((1, 4), (2, 4), (2, "auto"), (2, None), (1, "auto"), (1, None)):
        mesh = fa.mesh.cohort_mesh(devices) if devices > 1 else None
        times = []
        for _ in range(args.repeats):
            r = fa.simulate(task, fd, alg, fa.availability.AlwaysOn(), rounds=args.rounds,
                            eval_every=args.rounds, client_chunk=chunk, mesh=mesh)
            times.append(r.timing["run"] / args.rounds)
        model = np.asarray(ravel_pytree(r.params)[0])
        reference = model if reference is None else reference
        name = f"devices={devices} client_chunk={chunk}"
        results[name] = {"s_per_round": times, "s_per_round_min": min(times),
                         "compile_s": r.timing["compile"],
                         # per device: Result.memory totals over the devices
                         "working_set_bytes": r.memory.get("working_set", 0) // devices,
                         "max_abs_difference": float(np.max(np.abs(model - reference)))}
        print(f"{name}: {min(times) * 1e3:.1f} ms a round (best of {args.repeats}), working "
              f"set {results[name]['working_set_bytes'] / 2**20:.1f} MiB a device", flush=True)
    payload = {"benchmark": "cohort_mesh_chunks", "rounds": args.rounds,
               "repeats": args.repeats, "date": datetime.date.today().isoformat(),
               "machine": machine_info(), "results": results}
    write_json(args.out, payload)
    return payload


if __name__ == "__main__":
    main()
