"""Equitable client selection (Castillo J. et al., SubTrunc / UnionFL): Tables I-IV on MNIST.

The paper's setting (spec ``subtrunc_unionfl.md`` 4.1): 100 clients holding 3 distinct classes
each in equal shares, 10 clients a round, LeNet; every client always available. Each client's
test split has its 3 classes (``classes_per_client`` on the test set, the same assignment), so
the history records per-client fairness: the client dissimilarity (std of per-client test
accuracy, in %) and more (:mod:`fedjax_avail.fairness`). The paper leaves the rounds, local
steps, learning rate and batch size open; DivFL's code (``melodi-lab/divfl``) trains with batch
10 at lr 0.1 (its CNN scripts); the defaults below are chosen to finish on a laptop CPU and are
recorded in ``config.json``. Seeds run in one compiled program (``seeds=0,1,2,3,4``).

SubTrunc and UnionFL weigh DivFL's G divided by the N clients (``normalize=mean``, the
project's choice where the paper is silent; issue 18): as eq. 13 is written (``normalize=none``)
G's sum over 100 clients dwarfs ``lam * min(b, F) <= 1.05`` and SubTrunc (nearly) picks what
DivFL picks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fedjax_avail import algorithms, availability, data, selection, tasks
from fedjax_avail.experiments._experiment import Experiment, Setup
from fedjax_avail.experiments._fedlaavg import load_mnist_for
from fedjax_avail.experiments._parts import Setting, build_parts, part
from fedjax_avail.experiments._settings import check_choice
from fedjax_avail.experiments._sweep import Sweep
from fedjax_avail.selection import NORMALIZE as SCALINGS

MODELS = ("lenet", "lr")
NORMALIZE = (*SCALINGS, "none")  # the setting normalize's values; none: G as written


def _normalize(config: Mapping[str, Any]) -> str | None:
    """normalize, "none" read as None (G as written)."""
    return None if config["normalize"] == "none" else config["normalize"]


def _poc_d(config: Mapping[str, Any]) -> int:
    """poc_d, None read as num_clients (every client a candidate)."""
    return config["poc_d"] or config["num_clients"]


_R = Setting("candidates")
_NORMALIZED = Setting("normalize", read=_normalize)
# The selection strategies compared (each runs FedAvg), as data.
SELECTIONS = {
    "random": part(selection.Uniform),
    "poc": part(selection.PowerOfChoice, d=Setting("poc_d", read=_poc_d)),
    "divfl": part(selection.DivFL, candidates=_R),
    "subtrunc": part(selection.SubTrunc, candidates=_R, lam=Setting("lam"), b=Setting("b"),
                     phi=Setting("phi"), normalize=_NORMALIZED),
    "unionfl": part(selection.UnionFL, candidates=_R, mu=Setting("mu"),
                    window=Setting("window"), normalize=_NORMALIZED),
}
_COMMON = dict(clients_per_round=Setting("clients_per_round"),
              local_steps=Setting("local_steps"), batch_size=Setting("batch_size"),
              client_lr=Setting("lr"))
PARTS = {name: part(algorithms.FedAvg, **_COMMON, selection=choice)
         for name, choice in SELECTIONS.items()}
METHODS = tuple(PARTS)


def strategy(name: str, config: dict[str, Any]):
    """The selection strategy ``name`` with the config's parameters."""
    check_choice("algorithms", (name,), METHODS)
    return SELECTIONS[name].build(config)


def _build(config: dict[str, Any]) -> Setup:
    train, test = load_mnist_for(config)
    fd = data.classes_per_client(train["x"], train["y"], config["num_clients"],
                                 k=config["classes"], seed=config["seed"])
    client_test = data.classes_per_client(test["x"], test["y"], config["num_clients"],
                                          k=config["classes"], seed=config["seed"])
    task = tasks.lenet5((28, 28, 1)) if config["model"] == "lenet" else (
        tasks.logistic_regression(784, 10))
    return Setup(task, fd, client_test, availability.AlwaysOn(), build_parts(PARTS, config),
                 window=config["rounds"])


SUBTRUNC_MNIST = Experiment(
    name="subtrunc-mnist",
    description="SubTrunc/UnionFL Table I (MNIST): selection strategies, fairness over 5 seeds",
    defaults=dict(
        num_clients=100, clients_per_round=10, classes=3, local_steps=10, batch_size=10,
        lr=0.05, rounds=150, eval_every=10, seed=0, seeds=(0, 1, 2, 3, 4), model="lenet",
        lam=0.95, b=1.10, phi="log1p", mu=1.0, window=5, normalize="mean", candidates=10,
        poc_d=None, algorithms=METHODS, source="idx", data_dir=None, train_eval_examples=None,
    ),
    build=_build,
    meanings={"mu": "UnionFL's penalty mu on each client selected in the last window rounds "
                    "(0: DivFL)",
              "model": "the model trained: LeNet-5 or logistic regression",
              "normalize": "SubTrunc's and UnionFL's scale of DivFL's G against their terms: "
                           "mean (G / N, the mean coverage) or none (G as eq. 13 writes it: "
                           "SubTrunc then nearly always picks what DivFL picks)",
              "algorithms": "the selection strategies compared (each with FedAvg), in this "
                            "order"},
    choices={"model": MODELS, "normalize": NORMALIZE},
    parts=PARTS,
    measured=(
        "docs/reproducing.md, SubTrunc Table I, from docs/results/subtrunc-mnist-lenet/ (the "
        "default, on a GPU) and docs/results/subtrunc-mnist-lr/ (--set model=lr --set lr=0.1)"
    ),
)

SUBTRUNC_MNIST_LAMBDA = Sweep(
    name="subtrunc-mnist-table2",
    description="SubTrunc Table II (MNIST): lambda = 0.01 ... 0.95",
    base=SUBTRUNC_MNIST,
    settings={f"lam={lam}": dict(lam=lam) for lam in (0.01, 0.10, 0.25, 0.50, 0.75, 0.95)},
    defaults=dict(algorithms=("subtrunc",)),
)

SUBTRUNC_MNIST_WINDOW = Sweep(
    name="subtrunc-mnist-table3",
    description="UnionFL Table III (MNIST): look-back window 2, 5, 10",
    base=SUBTRUNC_MNIST,
    settings={f"window={w}": dict(window=w) for w in (2, 5, 10)},
    defaults=dict(algorithms=("unionfl",)),
)

SUBTRUNC_MNIST_PHI = Sweep(
    name="subtrunc-mnist-table4",
    description="SubTrunc Table IV (MNIST): phi = identity vs ln(1 + x)",
    base=SUBTRUNC_MNIST,
    settings={f"phi={phi}": dict(phi=phi) for phi in ("identity", "log1p")},
    defaults=dict(algorithms=("subtrunc",)),
)
