"""FedBuff (Nguyen et al., AISTATS 2022) as analysed by Toghani and Uribe (arXiv 2210.01161).

Client (Algorithm 1, L52-63): download w, take Q SGD steps on its data, upload
``Delta_i = w_{i,0} - w_{i,Q}``, repeat. Server (Algorithm 2, L70-85): add each upload to a
buffer (a sum); when K have arrived, ``w <- w - beta * sum_k Delta_k`` (beta = 1/K in Theorem 1)
and empty the buffer. Uploads are not weighted by staleness in the analysed algorithm; the
original FedBuff paper's ``1 / sqrt(1 + tau)`` is an option.

With ``buffer_size = 1``, ``concurrency = 1`` and constant durations this is sequential local SGD,
one client at a time (FedAvg with one client per round); with ``buffer_size = concurrency = N``
and constant durations it is FedAvg with server lr ``beta K`` on the mean delta
(``fedbuff.md`` 7, facts 4-6). The default durations are exponential: with every client working
continuously, uploads then arrive from uniformly random clients, the analysis's assumption (L100).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax.numpy as jnp

from fedjax_avail import clock as clock_lib
from fedjax_avail import server
from fedjax_avail._checks import Count, Positive, check_fields
from fedjax_avail.algorithms._async import AsyncParts
from fedjax_avail.algorithms._base import Metrics, RoundInput
from fedjax_avail.algorithms._staleness import staleness_factor
from fedjax_avail.local import Problem, local_sgd

WEIGHTS = (None, "sqrt")


class FedBuffState(NamedTuple):
    params: Any  # global model pytree, P parameters
    clock: Any  # the event clock's state (jobs in flight, virtual time)
    store: Any  # ([H, P] model history or [N, P] per-client start models, row scales)


@dataclasses.dataclass(frozen=True)
class FedBuff(AsyncParts):
    """Buffered asynchronous aggregation (module docstring).

    Args:
      buffer_size: K, uploads per server update.
      local_steps: Q.
      batch_size: B.
      client_lr: eta.
      server_lr: beta; None means 1/K (Theorem 1, L134).
      staleness_weight: None (the analysed algorithm) or ``"sqrt"``: each upload times
        ``1 / sqrt(1 + staleness)``.
      durations, concurrency, history, offline: :class:`AsyncParts`; the default durations are
        ``Exponential(1.0)``, the default concurrency every client (Algorithm 1's loop).

    Example:
      >>> fa.algorithms.FedBuff(buffer_size=10, local_steps=5, batch_size=5, client_lr=0.01,
      ...                       concurrency=100, durations=fa.clock.Exponential(1.0))
    """

    buffer_size: Count
    local_steps: Count = 10
    batch_size: Count = 5
    client_lr: Positive = 0.01
    server_lr: Positive | None = None
    staleness_weight: str | None = None
    durations: clock_lib.Durations | clock_lib.KofP = dataclasses.field(
        default_factory=lambda: clock_lib.Exponential(1.0), kw_only=True)

    def __post_init__(self):
        check_fields(self)
        if self.staleness_weight not in WEIGHTS:
            raise ValueError(f"staleness_weight must be None or 'sqrt', got "
                             f"{self.staleness_weight!r}")
        self._check_async()

    @property
    def beta(self) -> float:
        return 1.0 / self.buffer_size if self.server_lr is None else self.server_lr

    @property
    def events(self) -> int:
        """K = ``buffer_size`` uploads per update."""
        return self.buffer_size

    def init(self, params: Any, num_clients: int) -> FedBuffState:
        return FedBuffState(params, *self.init_parts(params, num_clients))

    def round(
        self, state: FedBuffState, inputs: RoundInput, problem: Problem
    ) -> tuple[FedBuffState, Metrics, Any]:  # Any: the cursor
        clock, c, cursor = self.completions(state, inputs)
        updates = local_sgd(problem, state.params, c.clients, c.train_key,
                            steps=self.local_steps, batch_size=self.batch_size,
                            lr=self.client_lr, starts=c.starts,
                            batch_ids=c.batch_ids)  # Alg. 1: u_k = w_{k,Q} - w_{k,0} = -Delta_k
        weights = c.valid.astype(jnp.float32)
        if self.staleness_weight == "sqrt":
            weights = weights * staleness_factor(c.staleness, "polynomial", a=0.5)
        buffer = jnp.tensordot(weights, updates, 1)  # Alg. 2 L6: sum of the K uploads
        params = server.add_delta(state.params, self.beta * buffer)  # L9: w - beta sum Delta
        store = self.record(state, inputs.round, params, c)
        return FedBuffState(params, clock, store), c.metrics, cursor
