"""WKAFL's MNIST experiments (Sec. 6, P:L457-510): Table II (staleness), Table III (non-IID
degree), the ablation (Fig. 5), on real MNIST split by WKAFL's Algorithm 4.

The paper runs EMNIST-MNIST (70,000 images; TFDS ``emnist/mnist`` on a user's machine,
``--set source=emnist``); MNIST (60,000 training images, the same digits) is what these machines
hold. Settings follow the authors' MNIST scripts (``wkafl.md`` 7.1): K-of-P reports, m = 4,
J = 5000 iterations, test every 50, each method's own learning rate, raw 0-255 pixel floats, the
EMNIST CNN from PyTorch's layer defaults (``init="torch"``). ``--set model=mlp`` or ``model=lr``
runs a smaller model (the CNN takes about 0.25 s an iteration on 2 CPU cores).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fedjax_avail import algorithms, availability, data, tasks
from fedjax_avail.experiments._experiment import Experiment, Setup
from fedjax_avail.experiments._fedlaavg import load_mnist_for
from fedjax_avail.experiments._parts import Part, Setting, build_parts, part
from fedjax_avail.experiments._sweep import Sweep
from fedjax_avail.history import History

# Learning rates of the authors' EMNIST-MNIST scripts (wkafl.md 7.1, 7.5).
CODE_LR = {"wkafl": 0.005, "twafl": 0.0005, "sasgd": 0.005, "gsgm": 0.005, "kasync": 0.005}
MODELS = ("cnn", "mlp", "lr")
ABLATIONS = {  # the ablation scripts also drop the CB clip (wkafl.md 7.6)
    "wkafl_no_selection": dict(gradient_selection=False, clipping=False),
    "wkafl_no_staleness": dict(staleness_weighting=False, clipping=False),
    "wkafl_no_noniid": dict(alpha=0.0, clipping=False),
}
_CHOICES = {"model": MODELS, "source": ("idx", "tfds", "emnist"), "init": tasks.INITS}
_MEANINGS = {
    "clients_per_round": "K, the gradients each server update waits for (K-of-P)",
    "batch_size": "m, the examples of one gradient",
    "lr": "the learning rate of every method (none: each method's own, from the authors' "
          "scripts)",
    "rounds": "the server updates (iterations) to run",
    "source": "where the digits come from: IDX files (data_dir), TFDS MNIST, or TFDS "
              "EMNIST-MNIST (the paper's)",
    "model": "the model trained: the EMNIST CNN, an MLP, or logistic regression",
    "init": "the CNN's initial weights: torch (PyTorch's layer defaults, as the authors' code; "
            "on raw pixels Flax's start ~10x larger logits) or flax (model=mlp, lr: unused)",
}


def stability(history: History, last: int = 10) -> dict[str, float]:
    """WKAFL's training stability (P:L431): the standard deviation of the natural log of the
    last ``last`` test accuracies (the paper names no base), and the last staleness mean."""
    acc = history["test_accuracy"][1:][-last:]
    staleness = history["staleness_mean"] if "staleness_mean" in history.columns else [np.nan]
    return {"stability": float(np.std(np.log(acc))) if len(acc) == last else float("nan"),
            "staleness_mean": float(staleness[-1])}


def _lr(method: str) -> Setting:
    """The setting lr, or ``method``'s learning rate in the authors' scripts where it is None."""
    def lr_or_the_scripts(config: Mapping[str, Any]) -> float:
        """lr, None read as the method's rate in the authors' scripts."""
        return CODE_LR[method] if config["lr"] is None else config["lr"]

    return Setting("lr", read=lr_or_the_scripts, checked_as=(algorithms.WKAFL, "client_lr"))


def _method(kind: type, method: str, **fields: Any) -> Part:
    return part(kind, clients_per_round=Setting("clients_per_round"),
                batch_size=Setting("batch_size"), client_lr=_lr(method),
                history=Setting("history"), **fields)


# The methods compared and WKAFL's ablations (wkafl.md 7.6), as data.
PARTS = {
    "wkafl": _method(algorithms.WKAFL, "wkafl", switch_round=Setting("switch_round")),
    "twafl": _method(algorithms.TWAFL, "twafl"),
    "sasgd": _method(algorithms.SASGD, "sasgd"),
    "gsgm": _method(algorithms.GSGM, "gsgm"),
    "kasync": _method(algorithms.KAsyncSGD, "kasync"),
    **{name: _method(algorithms.WKAFL, "wkafl", switch_round=Setting("switch_round"), **flags)
       for name, flags in ABLATIONS.items()},
}


def _build(config: dict[str, Any]) -> Setup:
    if config["source"] == "emnist":
        train, test = data.load_emnist("mnist", data_dir=config["data_dir"])
        train = {"x": train["x"][..., 0], "y": train["y"]}
        test = {"x": test["x"][..., 0], "y": test["y"]}
    else:
        train, test = load_mnist_for(config)
    fd = data.labels_per_client(train["x"], train["y"], config["num_clients"], config["labels"],
                                config["min_size"], config["max_size"], seed=config["seed"])
    if config["pixels"] == "raw":  # the authors' code feeds 0-255 floats (wkafl.md 7.4)
        fd = fd.replace(arrays={**fd.arrays, "x": fd.arrays["x"].astype(np.float32)})
        test = {**test, "x": test["x"].astype(np.float32)}
    task = {"cnn": lambda: tasks.cnn((28, 28, 1), init=config["init"]),
            "mlp": lambda: tasks.mlp(784),
            "lr": lambda: tasks.logistic_regression(784)}[config["model"]]()
    if config["model"] == "cnn":
        fd = fd.replace(arrays={**fd.arrays, "x": fd.arrays["x"][..., None]})
        test = {**test, "x": test["x"][..., None]}
    algs = build_parts(PARTS, config)
    return Setup(task, fd, test, availability.AlwaysOn(), algs, window=config["rounds"],
                 summary=stability, x_axes=("round",))


WKAFL_MNIST = Experiment(
    name="wkafl-mnist",
    description="WKAFL (Zhou et al.): K-async FL with stale gradients, MNIST split by Alg. 4",
    defaults=dict(
        num_clients=1000, clients_per_round=10, labels=1, min_size=10, max_size=49,
        batch_size=4, lr=None, rounds=5000, eval_every=50, seed=1, model="cnn", pixels="raw",
        init="torch", history=2048, switch_round=1000, algorithms=("wkafl", "twafl", "sasgd"),
        source="idx", data_dir=None, train_eval_examples=None,
    ),
    build=_build,
    meanings=_MEANINGS,
    choices=_CHOICES,
    parts=PARTS,
)

WKAFL_MNIST_TABLE2 = Sweep(
    name="wkafl-mnist-table2",
    description="WKAFL Table II / Fig. 7 (MNIST): staleness level P/K = 100, 150, 300",
    base=WKAFL_MNIST,
    settings={
        "P/K=100 (1000/10)": dict(num_clients=1000, clients_per_round=10),
        "P/K=150 (3000/20)": dict(num_clients=3000, clients_per_round=20),
        "P/K=300 (3000/10)": dict(num_clients=3000, clients_per_round=10),
    },
    measured=(
        "docs/reproducing.md, WKAFL Table II, from docs/results/wkafl-mnist-table2-cnn/ (the "
        "default, on a GPU) and docs/results/wkafl-mnist-table2-lr/ (--set model=lr --set "
        "pixels=unit --set lr=0.05)"
    ),
)

WKAFL_MNIST_TABLE3 = Sweep(
    name="wkafl-mnist-table3",
    description="WKAFL Table III / Fig. 9 (MNIST): non-IID degree L_num = 1, 5, 10 at P/K = 300",
    base=WKAFL_MNIST,
    settings={f"L_num={n}": dict(labels=n) for n in (1, 5, 10)},
    defaults=dict(num_clients=3000, clients_per_round=10,
                  algorithms=("wkafl", "twafl", "gsgm", "sasgd")),
    measured=(
        "docs/reproducing.md, WKAFL Table III, from docs/results/wkafl-mnist-table3-cnn/ (the "
        "default, on a GPU) and docs/results/wkafl-mnist-table3-lr/ (--set model=lr --set "
        "pixels=unit --set lr=0.05)"
    ),
)

WKAFL_MNIST_ABLATION = Experiment(
    name="wkafl-mnist-ablation",
    description="WKAFL Fig. 5 ablations (paper: CelebA, EMNIST ByClass; here MNIST)",
    # The paper states no P and K for Fig. 5 (wkafl.md 4.4, L437); P/K = 300, the highest
    # staleness of Table II, is where the staleness strategy matters most.
    defaults={**WKAFL_MNIST.defaults, "num_clients": 3000,
              "algorithms": ("wkafl", "wkafl_no_selection", "wkafl_no_staleness",
                             "wkafl_no_noniid")},
    build=_build,
    meanings=_MEANINGS,
    choices=_CHOICES,
    parts=PARTS,
    measured=(
        "docs/reproducing.md, WKAFL Fig. 5, from docs/results/wkafl-mnist-ablation-lr/ (--set "
        "model=lr --set pixels=unit --set lr=0.05)"
    ),
)
