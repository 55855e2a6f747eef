"""FedAvg (McMahan et al. 2017) and its variants FedSGD, FedProx and FedAdam.

The baselines of FedLaAvg's experiments (P:L359-367): K clients chosen uniformly at random among
the available ones train C local SGD steps from the global model; the server averages the deltas
of *this round's* participants only and steps along the average.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, NamedTuple

import jax.numpy as jnp

from fedjax_avail import cohort as cohort_lib
from fedjax_avail import server
from fedjax_avail._checks import Count, NonNegative, Positive, check_fields
from fedjax_avail.algorithms._base import Metrics, RoundInput
from fedjax_avail.algorithms._sync import SyncParts
from fedjax_avail.local import Problem, local_sgd


class FedAvgState(NamedTuple):
    params: Any  # global model pytree, P parameters
    opt_state: Any  # server optimizer state
    selection: Any  # the selection strategy's state (DivFL: [N, P] gradients)
    clock: Any  # RoundClockState (speeds [N], virtual time) when durations are given, else None


@dataclasses.dataclass(frozen=True)
class FedAvg(SyncParts):
    """Federated averaging over the round's participants.

    Round r: ``B^r <-`` K clients among the available ones (uniformly by default, or by any
    ``selection`` strategy); each trains
    ``u_k = x_k^C - x`` (:func:`fedjax_avail.local.local_sgd`); the server steps
    ``x <- x + server_lr * sum_k w_k u_k / sum_k w_k`` (an optax SGD step on ``-mean``; with
    ``server_optimizer="adam"`` an Adam step, FedAdam). A round nobody takes part in (no client
    available, all dropped out or late) takes no server step.

    Args:
      clients_per_round: K, >= 1 and <= N.
      local_steps: C, >= 1 (1 gives FedSGD).
      batch_size: B, >= 1.
      client_lr: local SGD step size, > 0.
      server_lr: server step size, > 0.
      weighting: ``"uniform"`` (w_k = 1, the default: FedLaAvg's "naively uses the average",
        P:L363) or ``"data_size"`` (w_k = n_k, McMahan et al.).
      mu: FedProx proximal coefficient, >= 0 (0 is FedAvg).
      server_optimizer: ``"sgd"`` or ``"adam"`` (:func:`fedjax_avail.server.server_optimizer`).
      selection, durations, deadline, over_selection: who trains and how long a round lasts
        (:class:`~fedjax_avail.algorithms.SyncParts`; default ``fa.selection.Uniform()``, one
        slot a round).

    Example:
      >>> alg = FedAvg(clients_per_round=10, local_steps=10, batch_size=5, client_lr=0.01)
    """

    # the round sums the deltas as the members finish: no [K, P] array held (memory.py)
    cohort_copies: ClassVar[int] = 0

    clients_per_round: Count
    local_steps: Count = 10
    batch_size: Count = 5
    client_lr: Positive = 0.01
    server_lr: Positive = 1.0
    weighting: str = "uniform"
    mu: NonNegative = 0.0
    server_optimizer: str = "sgd"

    def __post_init__(self):
        check_fields(self)
        if self.weighting not in ("uniform", "data_size"):
            raise ValueError(f"weighting must be 'uniform' or 'data_size', got {self.weighting!r}")
        self._optimizer()  # validates server_optimizer
        self._check_sync()

    def _optimizer(self):
        return server.server_optimizer(self.server_optimizer, self.server_lr)

    def init(self, params: Any, num_clients: int) -> FedAvgState:
        return FedAvgState(params, self._optimizer().init(params),
                           *self.init_parts(params, num_clients))

    def round(
        self, state: FedAvgState, inputs: RoundInput, problem: Problem
    ) -> tuple[FedAvgState, Metrics]:
        c = self.cohort(state, inputs, problem)
        counts = cohort_lib.gather(problem.data.counts, c.clients)
        weights = (c.valid * (counts if self.weighting == "data_size" else 1.0)).astype(
            jnp.float32)
        # sum_k w_k u_k, summed as the members finish (no [K, P] deltas held in chunks)
        total = local_sgd(problem, state.params, c.clients, c.train_key, steps=self.local_steps,
                          batch_size=self.batch_size, lr=self.client_lr, mu=self.mu,
                          weights=weights)
        delta = total / cohort_lib.weight_total(weights)
        params, opt_state = server.apply_delta(  # a round nobody took part in: no step
            self._optimizer(), state.params, state.opt_state, delta, jnp.any(c.valid)
        )
        state = FedAvgState(params, opt_state, self.selection_after(c), c.clock)
        return state, {"num_selected": jnp.sum(c.valid), **c.metrics}


@dataclasses.dataclass(frozen=True)
class FedSGD(FedAvg):
    """FedAvg with one local step (FedLaAvg P:L363: "a special case of FedAvg")."""

    local_steps: Count = 1

    def __post_init__(self):
        super().__post_init__()
        if self.local_steps != 1:
            raise ValueError(f"FedSGD has local_steps=1, got {self.local_steps}; use FedAvg")


@dataclasses.dataclass(frozen=True)
class FedProx(FedAvg):
    """FedAvg with the proximal term ``(mu/2)||x_k - x||^2`` (Li et al. 2020).

    ``mu`` defaults to 1.0, FedLaAvg's MNIST setting (P:L365); ``mu=0`` is exactly FedAvg.
    """

    mu: NonNegative = 1.0


@dataclasses.dataclass(frozen=True)
class FedAdam(FedAvg):
    """FedAvg with Adam as the server optimizer (Reddi et al. 2021; FedLaAvg supplement S:L297).

    ``server_lr`` defaults to 0.01, Adam's b1=0.9, b2=0.99, eps=1e-3 (Reddi et al. Sec. 5).
    """

    server_lr: Positive = 0.01
    server_optimizer: str = "adam"
