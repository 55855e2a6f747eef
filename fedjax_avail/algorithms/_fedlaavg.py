"""FedLaAvg: Federated Latest Averaging (Yan et al., arXiv 2002.07399, Algorithms 1 and 2)."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp

from fedjax_avail import cohort as cohort_lib
from fedjax_avail import selection as selection_lib
from fedjax_avail import server
from fedjax_avail import tables as tables_lib
from fedjax_avail._checks import Count, Positive, check_fields
from fedjax_avail.algorithms._base import Metrics, RoundInput
from fedjax_avail.algorithms._sync import SyncParts
from fedjax_avail.local import Problem, flat_size, local_sgd


class FedLaAvgState(NamedTuple):
    params: Any  # global model pytree x, P parameters
    opt_state: Any  # server optimizer state (SGD with server_lr)
    latest: jax.Array  # [N, P] table_dtype, u_i^{R_i}: each client's latest update (0 if never)
    mean_update: jax.Array  # [P] float32, u^r = (1/N) sum_i latest[i]  (eq. 3 analogue)
    last_round: jax.Array  # [N] int32, R_i: round of last participation, -1 if never
    latest_scale: Any  # [N] float32 row scales of an int8 table (None otherwise)
    selection: Any  # the selection strategy's state (LeastRecent: the same stamps)
    clock: Any  # RoundClockState (speeds [N], virtual time) when durations are given, else None


@dataclasses.dataclass(frozen=True)
class FedLaAvg(SyncParts):
    """Selects the least recently participated clients and averages everyone's latest update.

    Algorithm 2 of the paper (P:L283-302), rounds r = 0, 1, ...:

    * L6: ``B^r <-`` the K available clients with the lowest ``R_i`` (ties: lower index; all of
      them when fewer than K are available), :func:`fedjax_avail.selection.least_recent`;
    * L7: ``R_i <- r`` for i in ``B^r``;
    * L8: each i in ``B^r`` computes ``u_i^r = x_i^C - x`` by C local SGD steps;
    * L9: ``u^r <- u^{r-1} + (1/N) sum_{i in B^r} (u_i^r - u_i^{R_i^{r-1}})``: the average over
      **all N** clients of their latest updates, never-seen clients counting as zero;
    * L10: ``x <- x + server_lr * u^r`` (the paper has server_lr = 1).

    With ``local_steps=1`` this is Algorithm 1 (P:L138-151) with ``g_i = -u_i / client_lr``
    (P:L300). The state keeps the ``[N, P]`` table of latest updates and updates the running mean
    by the uploaded differences, exactly as the paper's server does (App. D, P:L853).

    Args:
      clients_per_round: K = beta N, >= 1 and <= N.
      local_steps: C, >= 1.
      batch_size: B, >= 1.
      client_lr: gamma, > 0.
      server_lr: step along u^r, > 0 (1 in the paper).
      table_dtype: how the ``[N, P]`` table of latest updates is stored: ``"float32"``,
        ``"bfloat16"`` (half the memory) or ``"int8"`` with a float32 scale per row (a quarter);
        the running mean ``u^r`` stays float32 and equal to the mean of the stored rows
        (:func:`fedjax_avail.tables.scatter_keep_mean`).
      selection: who participates (default ``fa.selection.LeastRecent()``, L6); another
        strategy keeps the latest-update average of L9 with another cohort rule.
      durations, deadline, over_selection: optional round timing
        (:class:`~fedjax_avail.algorithms.SyncParts`): a round lasts as long as its slowest
        participant (or the deadline), and reads the availability of the slot it starts in.
        The paper's rounds take no time (None).

    Example:
      >>> alg = FedLaAvg(clients_per_round=100, local_steps=10, batch_size=5, client_lr=0.01)

    References:
      Yan, Niu, Ding, Zheng, Wu, Chen, Tang, Wu. "Distributed Non-Convex Optimization with
      Sublinear Speedup under Intermittent Client Availability". arXiv:2002.07399.
    """

    clients_per_round: Count
    local_steps: Count = 10
    batch_size: Count = 5
    client_lr: Positive = 0.01
    server_lr: Positive = 1.0
    table_dtype: str = "float32"
    selection: selection_lib.Selection = dataclasses.field(
        default_factory=selection_lib.LeastRecent, kw_only=True)
    # [K, P] arrays a round holds together after training (fa.estimate_memory): the deltas,
    # the table rows gathered, their differences and the rows scattered back (measured: 3.9 K P)
    cohort_copies: ClassVar[int] = 4

    def __post_init__(self):
        check_fields(self)
        tables_lib.check_table_dtype(self.table_dtype)
        self._check_sync()

    def _optimizer(self):
        return server.server_optimizer("sgd", self.server_lr)

    def init(self, params: Any, num_clients: int) -> FedLaAvgState:
        size = flat_size(params)
        latest, scale = tables_lib.table_zeros(num_clients, size, self.table_dtype)
        return FedLaAvgState(
            params, self._optimizer().init(params), latest, jnp.zeros((size,), jnp.float32),
            jnp.full((num_clients,), -1, jnp.int32),  # R_i = -1: never participated
            None if self.table_dtype == "float32" else scale,
            *self.init_parts(params, num_clients))

    def round(
        self, state: FedLaAvgState, inputs: RoundInput, problem: Problem
    ) -> tuple[FedLaAvgState, Metrics]:
        c = self.cohort(state, inputs, problem)  # L6
        last_round = cohort_lib.scatter(
            state.last_round, c.clients, jnp.full(c.clients.shape, inputs.round, jnp.int32),
            c.valid)  # L7
        updates = local_sgd(problem, state.params, c.clients, c.train_key,
                            steps=self.local_steps, batch_size=self.batch_size,
                            lr=self.client_lr)  # L8 (the batch key FedAvg uses too)
        scale = state.latest_scale
        if scale is None:
            latest, mean_update = tables_lib.scatter_keep_mean(
                state.latest, state.mean_update, c.clients, updates, c.valid)  # L9
        else:
            latest, mean_update, scale = tables_lib.scatter_keep_mean(
                state.latest, state.mean_update, c.clients, updates, c.valid,
                scale)  # L9, the mean of the stored rows
        params, opt_state = server.apply_delta(
            self._optimizer(), state.params, state.opt_state, mean_update)  # L10
        # r - R_i^r, never-seen clients having R_i = -1 (the paper's T_i^0 = 0, 1-based rounds).
        staleness = jnp.max(inputs.round - last_round)
        new_state = FedLaAvgState(params, opt_state, latest, mean_update, last_round, scale,
                                  self.selection_after(c), c.clock)
        return new_state, {"num_selected": jnp.sum(c.valid), "max_staleness": staleness,
                           **c.metrics}
