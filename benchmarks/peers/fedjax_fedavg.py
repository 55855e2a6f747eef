"""FedAvg in FedJAX 0.0.17 on the FedLaAvg MNIST partition: seconds per round.

Runs in the FedJAX venv (``benchmarks/peers/setup.sh``), never imports ``fedjax_avail``: the
partition comes from the ``.npz`` written by ``export_partition.py`` (1000 clients holding one
digit each, the same clients and rows as the project's ``one_label_per_client(..., seed=0)``).

What runs is stock FedJAX, configured the documented way:

* data: ``fedjax.InMemoryFederatedData`` with one ``{"x": float32 [n_i, 784] in [0, 1],
  "y": int32 [n_i]}`` dataset per client (ids ``b"0000"`` ... ``b"0999"``);
* model: a haiku ``hk.Linear(10)`` (zero init) on the flattened pixels, wrapped by
  ``fedjax.create_model_from_haiku`` with the per-example cross-entropy train loss;
* algorithm: ``fedjax.algorithms.fed_avg.federated_averaging(fedjax.model_grad(model),
  fedjax.optimizers.sgd(0.01), fedjax.optimizers.sgd(1.0),
  fedjax.ShuffleRepeatBatchHParams(batch_size=5, num_epochs=None, num_steps=10))``: every
  client takes exactly 10 SGD steps on batches of 5 (shuffled without replacement, repeated);
  the server applies the mean delta with SGD at lr 1. FedJAX weights the mean by client size
  (this project's FedAvg uses the plain mean; the cost per round is the same);
* sampling: ``fedjax.client_samplers.UniformGetClientSampler(fd, 100, seed=0)`` (100 distinct
  clients a round, uniformly);
* backend: FedJAX's default ``for_each_client`` backend (``jax.jit``: a Python loop over the
  clients, one jitted call per client init, per batch step and per client final).

Timing: one warm-up round (compilations), then ``--rounds`` rounds, each timed from sampling to
``jax.block_until_ready`` on the new server params. ``s_per_round`` is their mean. Afterwards the
training loss (mean cross-entropy over all training examples) is computed once in numpy, as a
check that training happened. The result is one JSON line on stdout.

Usage (FedJAX venv)::

    /work/venvs/fedjax/bin/python benchmarks/peers/fedjax_fedavg.py --partition PATH.npz \
        [--rounds 20]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import time
import warnings
from typing import Any

import fedjax
import haiku as hk
import jax
import numpy as np
from _timing import round_figures  # benchmarks/peers/_timing.py, next to this script

CLIENTS_PER_ROUND = 100  # K
LOCAL_STEPS = 10  # C
BATCH_SIZE = 5  # B
CLIENT_LR = 0.01
SERVER_LR = 1.0
NUM_CLASSES = 10
SEED = 0


def client_key(i: int) -> bytes:
    """FedJAX client id of client i (zero-padded bytes, so sorted ids follow i)."""
    return f"{i:04d}".encode()


def load_federated_data(path: str) -> tuple[fedjax.InMemoryFederatedData, np.ndarray, np.ndarray]:
    """The partition as FedJAX data, and the pooled training examples (for the final loss)."""
    with np.load(path) as z:
        x = z["x"].astype(np.float32) / 255.0
        y = z["y"].astype(np.int32)
        offsets, counts = z["offsets"], z["counts"]
    clients = {
        client_key(i): {"x": x[lo:lo + n], "y": y[lo:lo + n]}
        for i, (lo, n) in enumerate(zip(offsets.tolist(), counts.tolist(), strict=True))
    }
    return fedjax.InMemoryFederatedData(clients), x, y


def create_model(num_features: int) -> fedjax.Model:
    """784 -> 10 logistic regression as a haiku module (zero init), as a FedJAX model."""

    def forward_pass(batch):
        return hk.Linear(NUM_CLASSES, w_init=hk.initializers.Constant(0.0))(batch["x"])

    sample_batch = {"x": np.zeros((1, num_features), np.float32), "y": np.zeros(1, np.int32)}
    return fedjax.create_model_from_haiku(
        transformed_forward_pass=hk.transform(forward_pass),
        sample_batch=sample_batch,
        train_loss=lambda batch, preds: fedjax.metrics.unreduced_cross_entropy_loss(
            batch["y"], preds),
        eval_metrics={"loss": fedjax.metrics.CrossEntropyLoss(),
                      "accuracy": fedjax.metrics.Accuracy()},
    )


def train_loss(params: Any, x: np.ndarray, y: np.ndarray) -> float:
    """Mean softmax cross-entropy of the linear model over (x, y), in numpy."""
    linear = params["linear"]
    logits = x @ np.asarray(linear["w"], np.float32) + np.asarray(linear["b"], np.float32)
    logits = logits - logits.max(axis=1, keepdims=True)
    log_z = np.log(np.exp(logits).sum(axis=1))
    return float(np.mean(log_z - logits[np.arange(len(y)), y]))


def run(partition: str, rounds: int) -> dict[str, Any]:
    """Builds FedJAX FedAvg, runs 1 warm-up + ``rounds`` timed rounds; returns the figures."""
    t0 = time.perf_counter()
    fd, x, y = load_federated_data(partition)
    load_s = time.perf_counter() - t0

    model = create_model(x.shape[1])
    algorithm = fedjax.algorithms.fed_avg.federated_averaging(
        grad_fn=fedjax.model_grad(model),
        client_optimizer=fedjax.optimizers.sgd(CLIENT_LR),
        server_optimizer=fedjax.optimizers.sgd(SERVER_LR),
        client_batch_hparams=fedjax.ShuffleRepeatBatchHParams(
            batch_size=BATCH_SIZE, num_epochs=None, num_steps=LOCAL_STEPS),
    )
    state = algorithm.init(model.init(jax.random.PRNGKey(SEED)))
    sampler = fedjax.client_samplers.UniformGetClientSampler(fd, CLIENTS_PER_ROUND, seed=SEED)

    def one_round(state):
        state, _ = algorithm.apply(state, sampler.sample())
        jax.block_until_ready(state.params)
        return state

    t0 = time.perf_counter()
    state = one_round(state)  # warm-up: compiles client init / step / final
    warmup = time.perf_counter() - t0
    per_round = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        state = one_round(state)
        per_round.append(time.perf_counter() - t0)

    t0 = time.perf_counter()
    loss = train_loss(state.params, x, y)
    loss_s = time.perf_counter() - t0
    return {
        "system": "fedjax",
        **round_figures(per_round, warmup),
        "train_loss_after": loss,
        "train_loss_s": loss_s,
        "load_s": load_s,
        "num_clients": fd.num_clients(),
        "num_train_examples": len(y),
        "config": {
            "clients_per_round": CLIENTS_PER_ROUND, "local_steps": LOCAL_STEPS,
            "batch_size": BATCH_SIZE, "client_lr": CLIENT_LR, "server_lr": SERVER_LR,
            "weighting": "data_size (fedjax fed_avg default)",
            "sampler": "UniformGetClientSampler(seed=0)",
            "for_each_client_backend": type(fedjax.get_for_each_client_backend()).__name__,
        },
        "versions": versions(),
    }


def versions() -> dict[str, str]:
    """Python and the versions of the packages this script runs on."""
    out = {"python": platform.python_version()}
    for package in ("fedjax", "jax", "jaxlib", "dm-haiku", "optax", "chex", "numpy"):
        out[package] = importlib.metadata.version(package)
    return {**out, "jax_backend": jax.default_backend(), "cpu_count": str(os.cpu_count())}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partition", required=True, help=".npz from export_partition.py")
    parser.add_argument("--rounds", type=int, default=20, help="timed rounds after the warm-up")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    # The jit backend donates buffers, which XLA:CPU cannot use: one warning per compilation.
    warnings.filterwarnings("ignore", message="Some donated buffers were not usable")
    figures = run(args.partition, args.rounds)
    print(json.dumps(figures), flush=True)
    return figures


if __name__ == "__main__":
    main()
