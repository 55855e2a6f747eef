"""Memory under a 2-device mesh, for the sharding tests, in its own process (``XLA_FLAGS`` must
be set before JAX starts).

``python sharded_memory.py`` prints one JSON line: for each (algorithm, mesh, client_chunk),
the estimate's total and the run's measured and held bytes, all totals over the devices; and
the test set's bytes.
"""

import json
import os

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh  # noqa: E402

import fedjax_avail as fa  # noqa: E402


def main() -> None:
    counts = np.array([10_000] * 2 + [1] * 198, np.int32)  # two large clients: big full batches
    rng = np.random.default_rng(0)
    fd = fa.FederatedData(
        arrays={"x": rng.integers(0, 256, (int(counts.sum()), 784), dtype=np.uint8),
                "y": rng.integers(0, 10, int(counts.sum())).astype(np.int32)},
        offsets=np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int32), counts=counts)
    test = {"x": rng.integers(0, 256, (2000, 784), dtype=np.uint8),
            "y": rng.integers(0, 10, 2000).astype(np.int32)}
    task = fa.tasks.logistic_regression(784, 10)
    algorithms = {
        "powerofchoice": fa.algorithms.FedAvg(
            clients_per_round=10, selection=fa.selection.PowerOfChoice(d=20)),
        "fedlaavg": fa.algorithms.FedLaAvg(clients_per_round=10),
    }
    meshes = {"none": None, "cohort": fa.mesh.cohort_mesh(2),
              "clients": Mesh(np.array(jax.devices()), ("clients",))}
    rows = []
    for name, alg in algorithms.items():
        for axis, mesh in meshes.items():
            for chunk in (None, 2):
                result = fa.simulate(task, fd, alg, fa.availability.AlwaysOn(), rounds=2,
                                     eval_every=2, mesh=mesh, client_chunk=chunk,
                                     test_data=test)
                rows.append({"algorithm": name, "mesh": axis, "chunk": chunk,
                             **{k: result.memory[k] for k in ("estimated", "measured", "held")}})
    print(json.dumps({"rows": rows, "test_bytes": sum(a.nbytes for a in test.values())}))


if __name__ == "__main__":
    main()
