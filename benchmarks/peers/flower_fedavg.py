"""FedAvg in Flower's simulation engine on the FedLaAvg MNIST partition: seconds per round.

Runs in the Flower venv (``benchmarks/peers/setup.sh``), never imports ``fedjax_avail``: the
partition comes from the ``.npz`` written by ``export_partition.py`` (1000 clients holding one
digit each, the same clients and rows as the project's ``one_label_per_client(..., seed=0)``).

What runs is stock Flower, written with its current Message API:

* ``flwr.simulation.run_simulation`` with ``num_supernodes=1000`` virtual clients on the Ray
  backend, ``client_resources = {"num_cpus": 1, "num_gpus": 0}`` (so on 2 cores two ClientApp
  actors work in parallel);
* the ServerApp runs ``flwr.serverapp.strategy.FedAvg(fraction_train=0.1,
  fraction_evaluate=0.0)``: 100 clients sampled uniformly a round, no federated evaluation, the
  replies averaged weighted by their ``num-examples`` (Flower's default; this project's FedAvg uses
  the plain mean; the cost per round is the same), the mean model taken as the new one (server
  lr 1);
* each ClientApp ``train`` call (a virtual client, ``context.node_config["partition-id"]``)
  reads the global weights ``W [784, 10]``, ``b [10]`` from the message, takes 10 SGD steps at lr
  0.01 on batches of 5 of its own rows (drawn with replacement) of a numpy softmax regression
  (pixels / 255), and replies with its weights and ``num-examples``. Each Ray worker process
  reads the partition file once and keeps it (so the figure is Flower's cost, not file I/O).

Timing: the strategy calls ``evaluate_fn`` on the server after round 0 (start) and after every
round; its timestamps give each round's wall time (sampling, message transport through the
simulation engine, the Ray actors' work, aggregation). Round 1 is the warm-up (actors start,
first imports); ``s_per_round`` is the mean of rounds 2 ... ``--rounds + 1``. Ray's start-up is
outside every round. After the last round the training loss (mean cross-entropy over all
training examples) is computed once in numpy on the server. The result is one JSON line on
stdout (Flower's and Ray's logs go to stderr).

Usage (Flower venv)::

    /work/venvs/flower/bin/python benchmarks/peers/flower_fedavg.py --partition PATH.npz \
        [--rounds 5] [--num-cpus-per-client 1]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import types
from typing import Any

# Flower's telemetry would try the network, which is not reachable here.
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

import numpy as np  # noqa: E402
from _timing import round_figures  # noqa: E402 (benchmarks/peers/_timing.py, next to this script)
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.serverapp import Grid, ServerApp  # noqa: E402
from flwr.serverapp.strategy import FedAvg  # noqa: E402
from flwr.simulation import run_simulation  # noqa: E402

NUM_CLIENTS = 1000  # N
FRACTION_TRAIN = 0.1  # K = 100 of 1000
LOCAL_STEPS = 10  # C
BATCH_SIZE = 5  # B
CLIENT_LR = 0.01
NUM_CLASSES = 10
SEED = 0
PARTITION_ENV = "FEDJAX_AVAIL_PEER_PARTITION"  # read by the Ray workers
ROUNDS_ENV = "FEDJAX_AVAIL_PEER_ROUNDS"
CACHE_MODULE = "_fedjax_avail_peer_cache"  # a per-process cache, registered in sys.modules


def partition_cache() -> types.ModuleType:
    """This process's cache of the partition (a module in ``sys.modules``, so that it outlives
    the ClientApp objects Ray unpickles for every message)."""
    cache = sys.modules.get(CACHE_MODULE)
    if cache is None:
        cache = types.ModuleType(CACHE_MODULE)
        path = os.environ[PARTITION_ENV]
        with np.load(path) as z:
            cache.x = z["x"].astype(np.float32) / 255.0
            cache.y = z["y"].astype(np.int64)
            cache.offsets = z["offsets"].astype(np.int64)
            cache.counts = z["counts"].astype(np.int64)
        sys.modules[CACHE_MODULE] = cache
    return cache


def softmax_xent_grad(w: np.ndarray, b: np.ndarray, x: np.ndarray,
                      y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Gradients of the mean softmax cross-entropy of ``x @ w + b`` w.r.t. ``w`` and ``b``."""
    logits = x @ w + b
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(len(y)), y] -= 1.0
    p /= len(y)
    return x.T @ p, p.sum(axis=0)


def mean_loss(w: np.ndarray, b: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    """Mean softmax cross-entropy of ``x @ w + b`` over (x, y)."""
    logits = x @ w + b
    logits -= logits.max(axis=1, keepdims=True)
    log_z = np.log(np.exp(logits).sum(axis=1))
    return float(np.mean(log_z - logits[np.arange(len(y)), y]))


client_app = ClientApp()


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    """One client's local training: C SGD steps on batches of B of its rows."""
    data = partition_cache()
    cid = int(context.node_config["partition-id"])
    lo, n = int(data.offsets[cid]), int(data.counts[cid])
    server_round = int(msg.content["config"]["server-round"])
    rng = np.random.default_rng([SEED, server_round, cid])
    w, b = (a.astype(np.float32, copy=True) for a in msg.content["arrays"].to_numpy_ndarrays())
    for _ in range(LOCAL_STEPS):
        rows = lo + rng.integers(0, n, size=BATCH_SIZE)
        grad_w, grad_b = softmax_xent_grad(w, b, data.x[rows], data.y[rows])
        w -= CLIENT_LR * grad_w
        b -= CLIENT_LR * grad_b
    content = RecordDict({
        "arrays": ArrayRecord([w, b]),
        "metrics": MetricRecord({"num-examples": n}),
    })
    return Message(content=content, reply_to=msg)


server_app = ServerApp()
SERVER_RESULT: dict[str, Any] = {}  # filled by the ServerApp thread (same process)


@server_app.main()
def server_main(grid: Grid, context: Context) -> None:
    """FedAvg for 1 warm-up + ``$FEDJAX_AVAIL_PEER_ROUNDS`` rounds, timing every round."""
    rounds = int(os.environ[ROUNDS_ENV])
    num_features = partition_cache().x.shape[1]
    ends: list[float] = []  # ends[r]: when round r ended (r = 0: before round 1)

    def round_end(server_round: int, arrays: ArrayRecord) -> None:
        ends.append(time.perf_counter())
        if server_round == rounds + 1:
            data = partition_cache()
            w, b = arrays.to_numpy_ndarrays()
            SERVER_RESULT["train_loss_after"] = mean_loss(w, b, data.x, data.y)
        return None

    strategy = FedAvg(fraction_train=FRACTION_TRAIN, fraction_evaluate=0.0,
                      min_available_nodes=NUM_CLIENTS)
    initial = ArrayRecord([np.zeros((num_features, NUM_CLASSES), np.float32),
                           np.zeros(NUM_CLASSES, np.float32)])
    strategy.start(grid=grid, initial_arrays=initial, num_rounds=rounds + 1,
                   evaluate_fn=round_end)
    SERVER_RESULT["round_s"] = list(np.diff(ends))


def versions() -> dict[str, str]:
    """Python and the versions of the packages this script runs on."""
    import flwr
    import ray

    return {
        "python": platform.python_version(),
        "flwr": flwr.__version__,
        "ray": ray.__version__,
        "numpy": np.__version__,
        "cpu_count": str(os.cpu_count()),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partition", required=True, help=".npz from export_partition.py")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds after the warm-up")
    parser.add_argument("--num-cpus-per-client", type=float, default=1.0,
                        help="Ray CPUs reserved per ClientApp actor")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    # Set before Ray starts, so its worker processes inherit them.
    os.environ[PARTITION_ENV] = os.path.abspath(args.partition)
    os.environ[ROUNDS_ENV] = str(args.rounds)

    backend_config = {
        "client_resources": {"num_cpus": args.num_cpus_per_client, "num_gpus": 0.0},
        "init_args": {"include_dashboard": False},
    }
    t0 = time.perf_counter()
    run_simulation(server_app=server_app, client_app=client_app, num_supernodes=NUM_CLIENTS,
                   backend_config=backend_config)
    total = time.perf_counter() - t0
    if "round_s" not in SERVER_RESULT:
        raise RuntimeError("the ServerApp did not finish its rounds (see the log above)")
    round_s = SERVER_RESULT["round_s"]
    figures = {
        "system": "flower",
        **round_figures(round_s[1:], round_s[0]),
        "train_loss_after": SERVER_RESULT["train_loss_after"],
        "simulation_total_s": total,
        "num_clients": NUM_CLIENTS,
        "config": {
            "clients_per_round": int(NUM_CLIENTS * FRACTION_TRAIN), "local_steps": LOCAL_STEPS,
            "batch_size": BATCH_SIZE, "client_lr": CLIENT_LR, "server_lr": 1.0,
            "weighting": "num-examples (flwr FedAvg default)",
            "strategy": "flwr.serverapp.strategy.FedAvg(fraction_train=0.1, "
                        "fraction_evaluate=0.0)",
            "backend": "ray", "client_resources": backend_config["client_resources"],
        },
        "versions": versions(),
    }
    print(json.dumps(figures), flush=True)
    return figures


if __name__ == "__main__":
    main()
