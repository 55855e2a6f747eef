"""FedAsync (Xie, Koyejo, Gupta 2019, "Asynchronous Federated Optimization", arXiv 1903.03934).

Each upload is applied at once (one upload per server update): a client started from version
tau takes Q SGD steps on ``f_i(x) + (mu / 2) ||x - x_tau||^2`` (its regularised local
objective) and the server mixes ``w <- (1 - alpha_t) w + alpha_t x_new`` with
``alpha_t = alpha s(t - tau)``, s a staleness function (:mod:`._staleness`: constant, polynomial
``(s + 1)^(-a)``, hinge). The defaults (alpha = 0.6, polynomial with a = 0.5, mu = 0) are one of
the paper's settings; no paper of this project fixes them.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from fedjax_avail import clock as clock_lib
from fedjax_avail._checks import Count, Fraction, NonNegative, Positive, check_fields
from fedjax_avail.algorithms._async import AsyncParts
from fedjax_avail.algorithms._base import Metrics, RoundInput
from fedjax_avail.algorithms._staleness import check_function, staleness_factor
from fedjax_avail.local import Problem, local_sgd


class FedAsyncState(NamedTuple):
    params: Any  # global model pytree, P parameters
    clock: Any  # the event clock's state
    store: Any  # ([H, P] model history or [N, P] per-client start models, row scales)


@dataclasses.dataclass(frozen=True)
class FedAsync(AsyncParts):
    """Asynchronous federated optimisation with staleness-dependent mixing (module docstring).

    Args:
      local_steps: Q.
      batch_size: B.
      client_lr: eta.
      mixing: alpha in (0, 1].
      staleness: ``"constant"``, ``"polynomial"`` or ``"hinge"``.
      staleness_a, staleness_b: a and b of the staleness function (``"polynomial"`` reads
        a, ``"hinge"`` both, ``"constant"`` neither: a sweep over the functions may keep them
        fixed).
      mu: proximal coefficient rho >= 0 of the local objective.
      durations, concurrency, history, offline: :class:`AsyncParts` (default
        ``Exponential(1.0)`` durations, every client working).
    """

    local_steps: Count = 10
    batch_size: Count = 5
    client_lr: Positive = 0.01
    mixing: Fraction = 0.6
    staleness: str = "polynomial"
    staleness_a: float = 0.5
    staleness_b: float = 4.0
    mu: NonNegative = 0.0
    durations: clock_lib.Durations | clock_lib.KofP = dataclasses.field(
        default_factory=lambda: clock_lib.Exponential(1.0), kw_only=True)

    def __post_init__(self):
        check_fields(self)
        check_function(self.staleness, self.staleness_a, self.staleness_b)
        self._check_async()

    @property
    def events(self) -> int:
        """One upload per update."""
        return 1

    def init(self, params: Any, num_clients: int) -> FedAsyncState:
        return FedAsyncState(params, *self.init_parts(params, num_clients))

    def round(
        self, state: FedAsyncState, inputs: RoundInput, problem: Problem
    ) -> tuple[FedAsyncState, Metrics, Any]:  # Any: the cursor
        clock, c, cursor = self.completions(state, inputs)
        updates = local_sgd(problem, state.params, c.clients, c.train_key,
                            steps=self.local_steps, batch_size=self.batch_size,
                            lr=self.client_lr, mu=self.mu, starts=c.starts,
                            batch_ids=c.batch_ids)
        x_new = c.starts[0] + updates[0]  # the client's model
        weight = self.mixing * staleness_factor(c.staleness, self.staleness, self.staleness_a,
                                                self.staleness_b)[0]
        weight = jnp.where(c.valid[0], weight, 0.0)
        x, unravel = ravel_pytree(state.params)
        params = unravel((1.0 - weight) * x + weight * x_new)
        store = self.record(state, inputs.round, params, c)
        return FedAsyncState(params, clock, store), {**c.metrics, "mixing": weight}, cursor
