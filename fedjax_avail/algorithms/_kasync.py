"""K-asynchronous SGD and the WKAFL paper's baselines TWAFL, SASGD and GSGM.

The server waits for the first K gradients (each one minibatch of m samples at the model the
client last received, WKAFL Alg. 1), steps along a weighted sum, and sends the new model to those
K clients (Zhou et al., "Towards Efficient and Stable K-Asynchronous Federated Learning with
Unbounded Stale Gradients on Non-IID Data", Sec. 3, P:L78-91). The variants differ only in the
weights of the K gradients:

* ``KAsyncSGD`` eq. (2) (P:L80): ``w <- w - (eta / K) sum_i g_i``;
* ``TWAFL`` (P:L412-416, as the authors' code runs it, ``wkafl.md`` 7.5): normalised
  ``(e/2)^(-tau_i)`` weights, ``w <- w - eta sum_i a_i g_i``;
* ``SASGD`` (P:L418-423): ``w <- w - (1 / K) sum_i (eta / tau_i) g_i``, tau counted from 1;
* ``GSGM`` (P:L425): the plain mean, each client reporting at most once per round of P/K
  iterations (``fa.clock.KofP(one_per_round=True)``); the global momentum GSGM's paper
  describes is computed but never applied in the authors' code, and is not applied here.

Defaults are the authors' EMNIST-MNIST settings (``wkafl.md`` 7.1, 7.5).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from fedjax_avail import clock as clock_lib
from fedjax_avail import server
from fedjax_avail._checks import Count, Positive, check_fields
from fedjax_avail.algorithms._async import AsyncParts
from fedjax_avail.algorithms._base import Metrics, RoundInput
from fedjax_avail.algorithms._staleness import exponential_weights
from fedjax_avail.local import Problem, local_gradients

WEIGHTINGS = ("uniform", "exponential", "inverse")


class KAsyncState(NamedTuple):
    params: Any  # global model pytree, P parameters
    clock: Any  # the clock's state (jobs in flight, virtual time)
    store: Any  # ([H, P] model history or [N, P] per-client start models, row scales)


@dataclasses.dataclass(frozen=True)
class KAsyncSGD(AsyncParts):
    """K-async SGD: each update applies the first K gradients, weighted by ``weighting``.

    Args:
      clients_per_round: K, the gradients per update, >= 1 and <= N.
      batch_size: m, samples per gradient.
      client_lr: eta.
      weighting: ``"uniform"`` (eq. 2; the mean over the gradients that arrived),
        ``"exponential"`` (TWAFL), ``"inverse"`` (SASGD).
      durations, concurrency, history, offline: see
        :class:`~fedjax_avail.algorithms._async.AsyncParts` (default: WKAFL's K-of-P protocol).

    Example:
      >>> fa.algorithms.KAsyncSGD(clients_per_round=10, batch_size=4, client_lr=0.005,
      ...                         durations=fa.clock.KofP())
    """

    clients_per_round: Count
    batch_size: Count = 4
    client_lr: Positive = 0.005
    weighting: str = "uniform"

    def __post_init__(self):
        check_fields(self)
        if self.weighting not in WEIGHTINGS:
            raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {self.weighting!r}")
        self._check_async()

    def init(self, params: Any, num_clients: int) -> KAsyncState:
        return KAsyncState(params, *self.init_parts(params, num_clients))

    def _weights(self, staleness: jax.Array, valid: jax.Array) -> jax.Array:
        k = self.clients_per_round
        if self.weighting == "exponential":
            return exponential_weights(staleness, valid)
        if self.weighting == "inverse":
            return valid / ((staleness + 1.0) * k)
        return valid / jnp.maximum(jnp.sum(valid), 1)

    def round(
        self, state: KAsyncState, inputs: RoundInput, problem: Problem
    ) -> tuple[KAsyncState, Metrics, Any]:  # Any: the cursor
        clock, c, cursor = self.completions(state, inputs)
        grads, _ = local_gradients(problem, state.params, c.clients, c.train_key,
                                   batch_size=self.batch_size, starts=c.starts,
                                   batch_ids=c.batch_ids)
        step = jnp.tensordot(self._weights(c.staleness, c.valid).astype(jnp.float32), grads, 1)
        params = server.add_delta(state.params, -self.client_lr * step)
        store = self.record(state, inputs.round, params, c)
        return KAsyncState(params, clock, store), c.metrics, cursor


@dataclasses.dataclass(frozen=True)
class TWAFL(KAsyncSGD):
    """Temporally weighted K-async FL: normalised ``(e/2)^(-tau)`` weights (P:L412-416)."""

    client_lr: Positive = 0.0005
    weighting: str = "exponential"


@dataclasses.dataclass(frozen=True)
class SASGD(KAsyncSGD):
    """Staleness-aware async SGD: ``eta / tau`` per gradient, tau from 1 (P:L418-423)."""

    weighting: str = "inverse"


@dataclasses.dataclass(frozen=True)
class GSGM(KAsyncSGD):
    """Gradient scheduling: one gradient per client per round, plain mean (P:L425)."""

    durations: clock_lib.Durations | clock_lib.KofP = dataclasses.field(
        default_factory=lambda: clock_lib.KofP(one_per_round=True), kw_only=True)
