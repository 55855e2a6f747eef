"""Federated algorithms: frozen dataclasses of hyperparameters with pure ``init``/``round``."""

from fedjax_avail.algorithms._async import AsyncParts, Contributions
from fedjax_avail.algorithms._base import Algorithm, RoundInput, reported
from fedjax_avail.algorithms._fedasync import FedAsync, FedAsyncState
from fedjax_avail.algorithms._fedavg import FedAdam, FedAvg, FedAvgState, FedProx, FedSGD
from fedjax_avail.algorithms._fedbuff import FedBuff, FedBuffState
from fedjax_avail.algorithms._fedlaavg import FedLaAvg, FedLaAvgState
from fedjax_avail.algorithms._kasync import GSGM, SASGD, TWAFL, KAsyncSGD, KAsyncState
from fedjax_avail.algorithms._mifa import MIFA, MIFAState
from fedjax_avail.algorithms._sequential import SequentialSGD, SequentialSGDState
from fedjax_avail.algorithms._wkafl import WKAFL, WKAFLState

__all__ = [
    "GSGM",
    "MIFA",
    "SASGD",
    "TWAFL",
    "WKAFL",
    "Algorithm",
    "AsyncParts",
    "Contributions",
    "FedAdam",
    "FedAsync",
    "FedAsyncState",
    "FedAvg",
    "FedAvgState",
    "FedBuff",
    "FedBuffState",
    "FedLaAvg",
    "FedLaAvgState",
    "FedProx",
    "FedSGD",
    "KAsyncSGD",
    "KAsyncState",
    "MIFAState",
    "RoundInput",
    "SequentialSGD",
    "SequentialSGDState",
    "WKAFLState",
    "reported",
]
