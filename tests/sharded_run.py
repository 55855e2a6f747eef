"""A run for the sharding tests, in its own process (``XLA_FLAGS`` must be set before JAX starts).

``python sharded_run.py DEVICES AXES ALGORITHM [PROCESS_ID NUM_PROCESSES PORT]`` prints one
JSON line: the final model, the history's last training loss, and the table's sharding. AXES is
the mesh's axis names joined by commas (``clients``, ``cohort``; with DEVICES = 1 no mesh is
used); ALGORITHM is one of ``ALGORITHMS``, ``@C`` after it training the cohort with
``client_chunk=C``, ``+trace`` after it replaying a ``[7, N]`` availability trace instead of
Bernoulli(0.5). With a process id it joins a ``jax.distributed`` run
on localhost (the CPU backend, Gloo collectives).
"""

import json
import os
import sys

devices = int(sys.argv[1])
os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"

import jax  # noqa: E402

axes, (algorithm_name, _, chunk) = tuple(sys.argv[2].split(",")), sys.argv[3].partition("@")
algorithm_name, _, availability_name = algorithm_name.partition("+")
if len(sys.argv) > 4:
    process_id, processes, port = (int(a) for a in sys.argv[4:7])
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}",
                               num_processes=processes, process_id=process_id)

import numpy as np  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402
from jax.flatten_util import ravel_pytree  # noqa: E402
from jax.sharding import Mesh  # noqa: E402

import fedjax_avail as fa  # noqa: E402
from fedjax_avail import plan  # noqa: E402

LOCAL = dict(local_steps=3, batch_size=4, client_lr=0.1)
ALGORITHMS = {
    "fedlaavg": lambda: fa.algorithms.FedLaAvg(clients_per_round=8, **LOCAL),
    "fedavg": lambda: fa.algorithms.FedAvg(clients_per_round=7, **LOCAL),  # 7: padded cohort
    "divfl": lambda: fa.algorithms.FedAvg(clients_per_round=8, selection=fa.selection.DivFL(),
                                          **LOCAL),
    "fedbuff": lambda: fa.algorithms.FedBuff(buffer_size=4, concurrency=10, **LOCAL),
    "wkafl": lambda: fa.algorithms.WKAFL(clients_per_round=8, batch_size=4, client_lr=0.1,
                                         switch_round=10),
}


def main() -> None:
    train, test = fa.data.load_digits()
    fd = fa.data.one_label_per_client(train["x"], train["y"], 40, seed=0)
    task = fa.tasks.logistic_regression(64, 10)
    alg = ALGORITHMS[algorithm_name]()
    count = len(jax.devices())
    shape = (count,) if len(axes) == 1 else (2, count // 2)
    mesh = Mesh(np.array(jax.devices()).reshape(shape), axes) if len(jax.devices()) > 1 else None
    availability = fa.availability.Bernoulli(0.5)
    placed = {}  # the shards of the trace as the engine places it (the carry is donated later)
    if availability_name == "trace":
        availability = fa.availability.Trace(np.random.default_rng(0).random((7, 40)) < 0.5)
        place = plan._place

        def spy(carry, *args):
            carry, placement = place(carry, *args)
            placed["trace"] = [list(s.data.shape) for s in carry[1].state.addressable_shards]
            return carry, placement

        plan._place = spy
    result = fa.simulate(task, fd, alg, availability, rounds=20,
                         eval_every=10, test_data=test, mesh=mesh,
                         client_chunk=int(chunk) if chunk else "auto")
    params = multihost_utils.process_allgather(ravel_pytree(result.params)[0], tiled=True)
    table = getattr(result.state, "latest", None)  # FedLaAvg's [N, P] table
    print(json.dumps({
        "params": np.asarray(params).tolist(),
        "train_loss": result.history["train_loss"][-1],
        "test": [result.history[k][-1] for k in ("test_loss", "test_accuracy")],
        "spec": str(table.sharding.spec) if mesh is not None and table is not None else None,
        "local_shards": [list(s.data.shape) for s in table.addressable_shards]
        if table is not None else None,
        "devices": len(jax.devices()),
        "trace_shards": placed.get("trace"),
    }))


if __name__ == "__main__":
    main()
