"""Federated algorithms: frozen dataclasses of hyperparameters with pure ``init``/``round``."""

from fedjax_avail.algorithms._base import Algorithm, RoundInput
from fedjax_avail.algorithms._fedavg import FedAdam, FedAvg, FedAvgState, FedProx, FedSGD
from fedjax_avail.algorithms._fedlaavg import FedLaAvg, FedLaAvgState
from fedjax_avail.algorithms._mifa import MIFA, MIFAState
from fedjax_avail.algorithms._sequential import SequentialSGD, SequentialSGDState

__all__ = [
    "Algorithm",
    "FedAdam",
    "FedAvg",
    "FedAvgState",
    "FedLaAvg",
    "FedLaAvgState",
    "FedProx",
    "FedSGD",
    "MIFA",
    "MIFAState",
    "RoundInput",
    "SequentialSGD",
    "SequentialSGDState",
]
