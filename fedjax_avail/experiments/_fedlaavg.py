"""FedLaAvg's diurnal-availability experiments (Sec. 6, P:L327-415) and the offline default.

Both put one label on each client (``one_label_per_client``) and make the clients holding
labels ``< D`` available for E rounds, then the others for E rounds (``diurnal``), and compare
the baselines with FedLaAvg and sequential SGD under that one availability process.
"""

from __future__ import annotations

from typing import Any

from fedjax_avail import algorithms, availability, data, tasks
from fedjax_avail.experiments._experiment import Experiment, Setup
from fedjax_avail.experiments._parts import Part, Setting, build_parts, part
from fedjax_avail.experiments._settings import CHOICES, check_choice, clients_per_round
from fedjax_avail.experiments._sweep import BETA_SETTINGS, N_SETTINGS, Sweep

_K = Setting("clients_per_round", read=clients_per_round,
             checked_as=(algorithms.FedAvg, "clients_per_round"))
_SHARED = dict(clients_per_round=_K, batch_size=Setting("batch_size"), client_lr=Setting("lr"))
_LOCAL = dict(_SHARED, local_steps=Setting("local_steps"))
# table_dtype, float32 in an experiment without that setting
_TABLE = Setting("table_dtype", default="float32", has_default=True)

# The algorithms these experiments compare, as data: every one with the constant learning rate
# lr (MIFA's decay switched off); table_dtype (default float32) is how FedLaAvg and MIFA store
# their [N, P] table of latest updates.
PARTS: dict[str, Part] = {
    "fedsgd": part(algorithms.FedSGD, **_SHARED),
    "fedavg": part(algorithms.FedAvg, **_LOCAL),
    "fedprox": part(algorithms.FedProx, **_LOCAL, mu=Setting("mu")),
    "fedlaavg": part(algorithms.FedLaAvg, **_LOCAL, table_dtype=_TABLE),
    "fedlaavg_c1": part(algorithms.FedLaAvg, **_SHARED, local_steps=1, table_dtype=_TABLE),
    "fedadam": part(algorithms.FedAdam, **_LOCAL),
    "mifa": part(algorithms.MIFA, **_LOCAL, lr_decay=False, table_dtype=_TABLE),
    "sequential": part(algorithms.SequentialSGD, clients_per_round=_K,
                       local_steps=Setting("local_steps"), batch_size=Setting("batch_size"),
                       lr=Setting("lr")),
}


def algorithms_from_config(config: dict[str, Any]) -> dict[str, algorithms.Algorithm]:
    """The algorithms named by ``config["algorithms"]`` (among :data:`PARTS`), with the
    config's hyperparameters; K is ``round(beta * num_clients)`` when the setting ``beta`` is
    given, else ``clients_per_round``.

    Raises:
      ValueError: a name not in :data:`PARTS`.
    """
    return build_parts(PARTS, config)


def _diurnal(config: dict[str, Any], fd: data.FederatedData) -> availability.AvailabilityProcess:
    return availability.diurnal(fd.client_labels(), D=config["D"], E=config["E"])


def setup_one_label(config: dict[str, Any], train, test, task, make_process=_diurnal) -> Setup:
    """One label per client (``one_label_per_client``), the process ``make_process(config, fd)``
    and the configured algorithms; the amplitude window is 2E."""
    fd = data.one_label_per_client(train["x"], train["y"], config["num_clients"],
                                   seed=config["seed"])
    return Setup(task, fd, test, make_process(config, fd), algorithms_from_config(config),
                 window=2 * config["E"],
                 window_of=_diurnal_window if make_process is _diurnal else None)


def _diurnal_window(process: availability.Periodic) -> int:
    """2E: both groups' turns, from the process itself (``availability.period`` is E)."""
    return 2 * int(process.period)


def _build_digits(config: dict[str, Any]) -> Setup:
    train, test = data.load_digits(seed=config["seed"])
    return setup_one_label(config, train, test, tasks.logistic_regression(64, 10))


def load_mnist_for(config: dict[str, Any]) -> tuple[dict, dict]:
    """MNIST from ``config["source"]``: ``"idx"`` files in ``config["data_dir"]`` or ``"tfds"``."""
    if config["source"] == "tfds":
        return data.load_mnist_tfds()
    check_choice("source", config["source"], CHOICES["source"])
    return data.load_mnist(config["data_dir"])


def _build_mnist(config: dict[str, Any]) -> Setup:
    train, test = load_mnist_for(config)
    return setup_one_label(config, train, test, tasks.logistic_regression(784, 10))


DEFAULT = Experiment(
    name="digits-diurnal",
    description="FedAvg vs FedLaAvg, diurnal availability, scikit-learn digits (offline)",
    defaults=dict(
        num_clients=100, clients_per_round=10, beta=None, local_steps=10, batch_size=5, lr=0.05,
        E=20, D=5, mu=1.0, rounds=600, eval_every=5, seed=0,
        algorithms=("fedavg", "fedlaavg", "sequential"),
    ),
    build=_build_digits,
    parts=PARTS,
    measured=(
        "README.md's first table, from docs/results/digits-diurnal/"
    ),
)

FEDLAAVG_MNIST = Experiment(
    name="fedlaavg-mnist",
    description="FedLaAvg Fig. 4/8: MNIST, one digit per client, diurnal availability (E, D)",
    defaults=dict(
        num_clients=1000, clients_per_round=100, beta=None, local_steps=10, batch_size=5,
        lr=0.01, E=100, D=1, mu=1.0, rounds=2000, eval_every=20, seed=0,
        algorithms=("fedsgd", "fedavg", "fedprox", "fedlaavg", "sequential"),
        source="idx", data_dir=None, table_dtype="float32",
    ),
    build=_build_mnist,
    parts=PARTS,
    measured=(
        "docs/reproducing.md, FedLaAvg Fig. 4 / 8 (its E=100, D=1 row), from "
        "docs/results/fedlaavg-mnist-fig4/"
    ),
)

FIG4_ALGORITHMS = ("fedsgd", "fedavg", "fedprox", "fedlaavg_c1", "fedlaavg", "sequential")

FEDLAAVG_MNIST_FIG4 = Sweep(
    name="fedlaavg-mnist-fig4",
    description="FedLaAvg Fig. 4/8 (MNIST): the five (E, D) availability settings",
    base=FEDLAAVG_MNIST,
    settings={
        "E=100, D=3": dict(E=100, D=3),
        "E=100, D=5": dict(E=100, D=5),
        "E=50, D=1": dict(E=50, D=1),
        "E=100, D=1": dict(E=100, D=1),
        "E=200, D=1": dict(E=200, D=1),
    },
    defaults=dict(algorithms=FIG4_ALGORITHMS),
    measured=(
        "docs/reproducing.md, FedLaAvg Fig. 4 / 8, from docs/results/fedlaavg-mnist-fig4/"
    ),
)

FEDLAAVG_MNIST_FIG5_N = Sweep(
    name="fedlaavg-mnist-fig5-n",
    description="FedLaAvg Fig. 5a/9a (MNIST): FedLaAvg for several N (beta = 0.1)",
    base=FEDLAAVG_MNIST,
    settings=N_SETTINGS,
    defaults=dict(algorithms=("fedlaavg",)),
    overlay=True,
    measured=(
        "docs/reproducing.md, FedLaAvg Fig. 5 / 9, from docs/results/fedlaavg-mnist-fig5-n/"
    ),
)

FEDLAAVG_MNIST_FIG5_BETA = Sweep(
    name="fedlaavg-mnist-fig5-beta",
    description="FedLaAvg Fig. 5b/9b (MNIST): FedLaAvg for several beta (N = 1000)",
    base=FEDLAAVG_MNIST,
    settings=BETA_SETTINGS,
    defaults=dict(algorithms=("fedlaavg",)),
    overlay=True,
    measured=(
        "docs/reproducing.md, FedLaAvg Fig. 5 / 9, from "
        "docs/results/fedlaavg-mnist-fig5-beta/"
    ),
)
