"""FedAvg in pfl-research (``pfl``, Apple) with its PyTorch backend: seconds per round.

Runs in the pfl venv (``benchmarks/peers/setup.sh pfl``), never imports ``fedjax_avail``. Two
workloads (``--workload``):

* ``mnist``: FedLaAvg's MNIST setting, the clients and rows of the ``.npz`` written by
  ``export_partition.py`` (1000 clients holding one digit each): a 784 -> 10 logistic
  regression (zero init, pixels / 255), 100 clients a round, 10 local SGD steps on batches of 5
  at lr 0.01, server lr 1. pfl trains a user on its dataset in order, so each time a user is
  drawn its dataset is 50 of its rows drawn with replacement (``make_dataset_fn``): its 10
  batches of 5 are the setting's 10 batches sampled with replacement.
* ``cifar10``: pfl's own CIFAR-10 benchmark shape (``cifar10_shape.py``): 1000 users of 50
  synthetic normalised images, a cohort of 50, one local epoch of batches of 10 (5 steps) at
  lr 0.1, central lr 1, pfl's ``simple_cnn`` without its dropout layers.

What runs is stock pfl, configured as its ``benchmarks/image_classification/pytorch/train.py``
does: ``FederatedDataset`` with the ``"random"`` user sampler (uniform, with replacement, as
pfl's benchmarks), ``PyTorchModel(model, torch.optim.SGD, torch.optim.SGD(params, 1.0))``,
``SimulatedBackend(training_data, val_data=None, postprocessors=[WeightByUser()])``,
``FederatedAveraging().run(NNAlgorithmParams(...), backend, model, NNTrainHyperParams(...))``
with no evaluation during training. pfl's simulator is one process here (its multi-worker
mode is for several GPUs); PyTorch uses its default threads (one per core).

Timing: a callback takes ``time.perf_counter()`` after every central iteration; the first
iteration is the warm-up, the next ``--rounds`` are timed. Afterwards the training loss (mean
cross-entropy; MNIST: all training rows, CIFAR-10: the first 5,000 rows) is computed once. The
result is one JSON line on stdout.

Usage (pfl venv)::

    /work/venvs/pfl/bin/python benchmarks/peers/pfl_fedavg.py --workload mnist \
        --partition PATH.npz [--rounds 5]
    /work/venvs/pfl/bin/python benchmarks/peers/pfl_fedavg.py --workload cifar10 [--rounds 3]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import time
import types
from typing import Any

import cifar10_shape  # benchmarks/peers/cifar10_shape.py, next to this script
import numpy as np
import torch
from _timing import round_figures  # benchmarks/peers/_timing.py
from pfl.aggregate.simulate import SimulatedBackend
from pfl.aggregate.weighting import WeightByUser
from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
from pfl.callback.base import TrainingProcessCallback
from pfl.data.dataset import Dataset
from pfl.data.federated_dataset import FederatedDataset
from pfl.data.sampling import get_user_sampler
from pfl.hyperparam import NNTrainHyperParams
from pfl.metrics import Metrics
from pfl.model.pytorch import PyTorchModel

SEED = 0
MNIST = {"cohort": 100, "local_steps": 10, "batch_size": 5, "client_lr": 0.01,
         "server_lr": 1.0, "rows_per_draw": 50}


class RoundClock(TrainingProcessCallback):
    """Records ``time.perf_counter()`` when training starts and after each central iteration."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def on_train_begin(self, *, model: Any) -> Metrics:
        self.times.append(time.perf_counter())
        return Metrics()

    def after_central_iteration(self, aggregate_metrics: Metrics, model: Any, *,
                                central_iteration: int) -> tuple[bool, Metrics]:
        if torch.cuda.is_available():  # pfl trains on the GPU when there is one: wait for it
            torch.cuda.synchronize()
        self.times.append(time.perf_counter())
        return False, Metrics()


def with_loss(module: torch.nn.Module) -> torch.nn.Module:
    """Attaches the ``loss(inputs, targets)`` / ``metrics`` methods ``PyTorchModel`` calls (pfl's
    benchmarks do the same with ``types.MethodType``)."""

    def loss(self, inputs, targets, eval=False):  # noqa: A002 (pfl's keyword)
        self.eval() if eval else self.train()
        return torch.nn.functional.cross_entropy(self(inputs), targets.long())

    def metrics(self, inputs, targets, eval=True):  # noqa: A002
        return {}

    module.loss = types.MethodType(loss, module)
    module.metrics = types.MethodType(metrics, module)
    return module


def simple_cnn() -> torch.nn.Module:
    """pfl's ``simple_cnn`` on ``[32, 32, 3]`` images (channels last, as pfl's datasets hold
    them), without its two dropout layers; Glorot-uniform weights, as pfl initialises it."""
    model = torch.nn.Sequential(
        Channels(),
        torch.nn.Conv2d(3, 32, kernel_size=3), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, kernel_size=3), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Flatten(),
        torch.nn.Linear(14 * 14 * 64, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, cifar10_shape.NUM_CLASSES),
    )
    for layer in model.modules():
        if isinstance(layer, (torch.nn.Conv2d, torch.nn.Linear)):
            torch.nn.init.xavier_uniform_(layer.weight)
    return model


class Channels(torch.nn.Module):
    """``[B, H, W, C] -> [B, C, H, W]`` (pfl's ``Transpose2D``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(0, 3, 1, 2)


def mnist_setting(partition: str) -> tuple[FederatedDataset, torch.nn.Module, dict, tuple]:
    """The MNIST workload: the federated dataset, the model, the hyperparameters, and the
    rows the training loss is computed on."""
    with np.load(partition) as data:
        x = torch.from_numpy(data["x"].astype(np.float32) / 255.0)  # [M, 784] uint8 -> [0, 1]
        y = torch.from_numpy(data["y"].astype(np.int64))
        offsets, counts = data["offsets"], data["counts"]
    rng = np.random.default_rng(SEED)

    def make_dataset_fn(user_id: int) -> Dataset:
        rows = offsets[user_id] + rng.integers(0, counts[user_id], MNIST["rows_per_draw"])
        rows = torch.from_numpy(rows)
        return Dataset(raw_data=[x[rows], y[rows]], user_id=user_id)

    users = list(range(len(counts)))
    fd = FederatedDataset(make_dataset_fn, get_user_sampler("random", users))
    model = torch.nn.Linear(784, 10)
    torch.nn.init.zeros_(model.weight)
    torch.nn.init.zeros_(model.bias)
    hparams = {"cohort": MNIST["cohort"], "local_steps": MNIST["local_steps"],
               "local_epochs": None, "batch_size": MNIST["batch_size"],
               "client_lr": MNIST["client_lr"], "server_lr": MNIST["server_lr"]}
    return fd, with_loss(model), hparams, (x, y)


def cifar10_setting() -> tuple[FederatedDataset, torch.nn.Module, dict, tuple]:
    """The CIFAR-10 workload (``cifar10_shape``), as the MNIST one."""
    x, y, client = cifar10_shape.synthetic_clients()
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    per = cifar10_shape.IMAGES_PER_CLIENT
    users = {i: [x[i * per:(i + 1) * per], y[i * per:(i + 1) * per]]
             for i in range(cifar10_shape.NUM_CLIENTS)}
    fd = FederatedDataset.from_slices(users, get_user_sampler("random", list(users)))
    hparams = {"cohort": cifar10_shape.COHORT, "local_steps": None,
               "local_epochs": cifar10_shape.LOCAL_EPOCHS,
               "batch_size": cifar10_shape.BATCH_SIZE, "client_lr": cifar10_shape.CLIENT_LR,
               "server_lr": cifar10_shape.SERVER_LR}
    return fd, with_loss(simple_cnn()), hparams, (x[:5000], y[:5000])


def run(workload: str, partition: str | None, rounds: int) -> dict[str, Any]:
    np.random.seed(SEED)  # pfl's "random" user sampler draws from numpy's global generator
    torch.manual_seed(SEED)
    t0 = time.perf_counter()
    fd, module, hp, (x, y) = mnist_setting(partition) if workload == "mnist" else \
        cifar10_setting()
    load_s = time.perf_counter() - t0
    params = [p for p in module.parameters() if p.requires_grad]
    model = PyTorchModel(model=module, local_optimizer_create=torch.optim.SGD,
                         central_optimizer=torch.optim.SGD(params, hp["server_lr"]))
    backend = SimulatedBackend(training_data=fd, val_data=None,
                               postprocessors=[WeightByUser()])
    clock = RoundClock()
    FederatedAveraging().run(
        algorithm_params=NNAlgorithmParams(
            central_num_iterations=rounds + 1, evaluation_frequency=rounds + 2,
            train_cohort_size=hp["cohort"], val_cohort_size=0),
        backend=backend, model=model,
        model_train_params=NNTrainHyperParams(
            local_learning_rate=hp["client_lr"], local_num_epochs=hp["local_epochs"],
            local_batch_size=hp["batch_size"], local_num_steps=hp["local_steps"]),
        callbacks=[clock])
    ends = np.diff(clock.times)  # [rounds + 1]: the warm-up iteration, then the timed ones
    with torch.no_grad():
        module.eval()
        device = next(module.parameters()).device  # pfl moved the model to its device
        loss = float(torch.nn.functional.cross_entropy(module(x.to(device)), y.long().to(device)))
    return {
        "system": "pfl",
        "workload": workload,
        **round_figures(ends[1:].tolist(), float(ends[0])),
        "train_loss_after": loss,
        "load_s": load_s,
        "num_params": int(sum(p.numel() for p in params)),
        "config": {**hp, "user_sampler": "random (uniform, with replacement)",
                   "weighting": "WeightByUser", "backend": "SimulatedBackend, one process",
                   "torch_threads": torch.get_num_threads()},
        "versions": versions(),
    }


def versions() -> dict[str, str]:
    """Python and the versions of the packages this script runs on."""
    out = {"python": platform.python_version()}
    for package in ("pfl", "torch", "numpy"):
        out[package] = importlib.metadata.version(package)
    return {**out, "cpu_count": str(os.cpu_count())}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workload", choices=("mnist", "cifar10"), default="mnist")
    parser.add_argument("--partition", help=".npz from export_partition.py (mnist)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds after the warm-up")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    if args.workload == "mnist" and not args.partition:
        parser.error("--workload mnist needs --partition")
    figures = run(args.workload, args.partition, args.rounds)
    print(json.dumps(figures), flush=True)
    return figures


if __name__ == "__main__":
    main()
