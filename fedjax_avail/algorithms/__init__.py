"""Federated algorithms: frozen dataclasses of hyperparameters with pure ``init``/``round``.

Every algorithm subclasses :class:`Algorithm` (the contract, with defaults); synchronous ones
build on :class:`SyncParts` (selection, round clock, drop-outs), asynchronous ones on
:class:`AsyncParts` (the clock, the model store, one update's contributions).
"""

from fedjax_avail.algorithms._async import AsyncParts, Contributions
from fedjax_avail.algorithms._base import Algorithm, Footprint, RoundInput, reported
from fedjax_avail.algorithms._fedasync import FedAsync, FedAsyncState
from fedjax_avail.algorithms._fedavg import FedAdam, FedAvg, FedAvgState, FedProx, FedSGD
from fedjax_avail.algorithms._fedbuff import FedBuff, FedBuffState
from fedjax_avail.algorithms._fedlaavg import FedLaAvg, FedLaAvgState
from fedjax_avail.algorithms._kasync import GSGM, SASGD, TWAFL, KAsyncSGD, KAsyncState
from fedjax_avail.algorithms._mifa import MIFA, MIFAState
from fedjax_avail.algorithms._sequential import SequentialSGD, SequentialSGDState
from fedjax_avail.algorithms._sync import Cohort, SyncParts
from fedjax_avail.algorithms._wkafl import WKAFL, WKAFLState

__all__ = [
    "GSGM",
    "MIFA",
    "SASGD",
    "TWAFL",
    "WKAFL",
    "Algorithm",
    "AsyncParts",
    "Cohort",
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
    "Footprint",
    "KAsyncSGD",
    "KAsyncState",
    "MIFAState",
    "RoundInput",
    "SequentialSGD",
    "SequentialSGDState",
    "SyncParts",
    "WKAFLState",
    "reported",
]
