"""MIFA: Memory-augmented Impatient Federated Averaging (Gu et al., NeurIPS 2021).

Compared in the FedLaAvg supplement (S:L9) as "basically the same" algorithm: the server keeps
every client's latest update and averages all N of them (the latest-update rule it shares with
FedLaAvg, :func:`fedjax_avail.tables.scatter_keep_mean`); unlike FedLaAvg it needs every client
to have reported once before the first server step. What this class takes from the authors' code
(``hmgxr128/MIFA_code``, ``src/trainers/fdu.py``):

* the table holds updates divided by the learning rate they were computed with,
  ``G_i = (x_i^C - x) / lr``, and the server steps ``x <- x + lr_t * mean_i G_i``;
* the learning rate decays as ``lr_t = client_lr / (t + 1)`` (``inverse_prop_decay``), t counting
  the server steps taken so far (``lr_decay=True``);
* ``start="authors_code"``: wait until every client has been available once, then fill the table
  by training **all N clients** in one round (unavailable ones included) at the current model,
  and only then step (the code's ``table_initialized``). That round breaks "a selected client was
  available" and puts an N-wide ``vmap`` in the compiled round, so it is an option, not the
  default.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from fedjax_avail import cohort as cohort_lib
from fedjax_avail import selection as selection_lib
from fedjax_avail import server
from fedjax_avail import tables as tables_lib
from fedjax_avail._checks import Count, Positive, check_fields
from fedjax_avail.algorithms._base import Footprint, Metrics, RoundInput
from fedjax_avail.algorithms._sync import Cohort, SyncParts
from fedjax_avail.local import Problem, flat_size, local_sgd

STARTS = ("after_all_seen", "immediately", "authors_code")


class MIFAState(NamedTuple):
    params: Any  # global model pytree x, P parameters
    table: jax.Array  # [N, P] table_dtype, G_i = latest update / its learning rate (0 if none)
    table_mean: jax.Array  # [P] float32, (1/N) sum_i G_i
    last_round: jax.Array  # [N] int32, round of the last reported update, -1 if never
    seen: jax.Array  # [N] bool: "authors_code": available once so far; else: has a row
    step: jax.Array  # [] int32, server steps taken so far (t of lr_t)
    table_scale: Any  # [N] float32 row scales of an int8 table (None otherwise)
    selection: Any  # the selection strategy's state (LeastRecent: last_round's stamps)
    clock: Any  # RoundClockState (speeds [N], virtual time) when durations are given, else None


@dataclasses.dataclass(frozen=True)
class MIFA(SyncParts):
    """Every available client trains; the server averages the latest updates of all N clients.

    Round r: ``A^r`` = the available clients (at most ``clients_per_round`` of them, the least
    recently updated first); each i in ``A^r`` sets ``G_i <- (x_i^C - x) / lr_t`` after C local
    steps at ``lr_t``; then, once the server has started, ``x <- x + server_lr * lr_t * (1/N)
    sum_i G_i``.

    When the server starts (``start``):

    * ``"after_all_seen"`` (default): MIFA's requirement that every client has reported before
      the first step (S:L9), within availability: until then the available clients (at most K a
      round) train at the unchanged initial model and fill their rows; the server steps from the
      round in which the last row is filled.
    * ``"immediately"``: from round 0, clients without a row counting as zero. With
      ``lr_decay=False`` and ``clients_per_round`` at least the number of available clients
      this is FedLaAvg's averaging rule with every available client selected.
    * ``"authors_code"``: as the authors' code (module docstring), training all N clients in the
      round in which every client has been seen.

    Args:
      clients_per_round: cohort cap K (static); MIFA proper trains every available client, so
        pick K >= the most clients ever available at once.
      local_steps: C.
      batch_size: B.
      client_lr: initial learning rate lr_0, > 0.
      server_lr: > 0 (1 in MIFA).
      lr_decay: ``lr_t = lr_0 / (t + 1)`` as in the authors' code; False keeps lr_0.
      start: one of ``"after_all_seen"``, ``"immediately"``, ``"authors_code"``.
      table_dtype: ``"float32"``, ``"bfloat16"`` or ``"int8"`` (as FedLaAvg's).
      selection: who of the available trains when more than K are (default
        ``fa.selection.LeastRecent()``: the least recently updated first).
      durations, deadline, over_selection: optional round timing
        (:class:`~fedjax_avail.algorithms.SyncParts`); not with ``start="authors_code"``.

    References:
      Gu, Huang, Zhang, Su, Yang, Lin. "Fast Federated Learning in the Presence of Arbitrary Device
      Unavailability". NeurIPS 2021. arXiv:2106.04159.
    """

    clients_per_round: Count
    local_steps: Count = 10
    batch_size: Count = 5
    client_lr: Positive = 0.01
    server_lr: Positive = 1.0
    lr_decay: bool = True
    start: str = "after_all_seen"
    table_dtype: str = "float32"
    selection: selection_lib.Selection = dataclasses.field(
        default_factory=selection_lib.LeastRecent, kw_only=True)

    def __post_init__(self):
        check_fields(self)
        if self.start not in STARTS:
            raise ValueError(f"start must be one of {STARTS}, got {self.start!r}")
        tables_lib.check_table_dtype(self.table_dtype)
        if self.start == "authors_code" and self.table_dtype != "float32":
            raise ValueError("table_dtype must be 'float32' with start='authors_code' (its fill "
                             "round writes the whole table)")
        self._check_sync()
        if self.durations is not None and self.start == "authors_code":
            raise ValueError("durations must be None with start='authors_code' (its fill round "
                             "trains all N clients, available or not, in no defined time)")
        if self.start == "authors_code" and self.selection.full_batch_passes(1, 1):
            raise ValueError(
                f"selection={type(self.selection).__name__}() cannot go with "
                "start='authors_code': its fill round stamps all N clients at once, and this "
                "strategy would read all N clients' whole data in one pass; use LeastRecent() "
                "or Uniform()")

    def footprint(self, num_clients: int) -> Footprint:
        """FedLaAvg's 4 ``[K, P]`` arrays after training, the same latest-update rule; the
        authors-code fill round trains all N and writes the table without gathering rows
        (measured: 3.0 N P)."""
        authors = self.start == "authors_code"
        return super().footprint(num_clients)._replace(
            largest=num_clients if authors else self.clients_per_round,
            copies=3 if authors else 4)

    def init(self, params: Any, num_clients: int) -> MIFAState:
        size = flat_size(params)
        table, scale = tables_lib.table_zeros(num_clients, size, self.table_dtype)
        return MIFAState(
            params, table, jnp.zeros((size,), jnp.float32),
            jnp.full((num_clients,), -1, jnp.int32), jnp.zeros((num_clients,), bool),
            jnp.int32(0), None if self.table_dtype == "float32" else scale,
            *self.init_parts(params, num_clients))

    def _lr(self, step: jax.Array) -> jax.Array:
        return self.client_lr / (step + 1.0) if self.lr_decay else jnp.float32(self.client_lr)

    def _train(self, problem, state, clients, key, lr):
        updates = local_sgd(problem, state.params, clients, key, steps=self.local_steps,
                            batch_size=self.batch_size, lr=lr)
        return updates / lr

    def round(
        self, state: MIFAState, inputs: RoundInput, problem: Problem
    ) -> tuple[MIFAState, Metrics]:
        if self.start == "authors_code":
            return self._authors_round(state, inputs, problem)
        c = self.cohort(state, inputs, problem)
        state, valid_rows = self._refresh(state, inputs, problem, c)
        seen = state.seen | valid_rows
        started = jnp.bool_(True) if self.start == "immediately" else jnp.all(seen)
        lr = self._lr(state.step)
        moved = server.add_delta(state.params, self.server_lr * lr * state.table_mean)
        params = jax.tree.map(lambda new, old: jnp.where(started, new, old), moved, state.params)
        state = state._replace(params=params, seen=seen,
                               step=state.step + started.astype(jnp.int32))
        return state, {"num_selected": jnp.sum(c.valid).astype(jnp.int32), **c.metrics}

    def _refresh(self, state: MIFAState, inputs: RoundInput, problem: Problem, c: Cohort
                 ) -> tuple[MIFAState, jax.Array]:
        """The cohort ``c`` (<= K available) refreshes its rows; returns ``[N]`` the rows
        written."""
        grads = self._train(problem, state, c.clients, c.train_key, self._lr(state.step))
        scale = state.table_scale
        if scale is None:
            table, table_mean = tables_lib.scatter_keep_mean(
                state.table, state.table_mean, c.clients, grads, c.valid)
        else:
            table, table_mean, scale = tables_lib.scatter_keep_mean(
                state.table, state.table_mean, c.clients, grads, c.valid, scale)
        last_round = cohort_lib.scatter(
            state.last_round, c.clients, jnp.full(c.clients.shape, inputs.round, jnp.int32),
            c.valid)
        rows = jnp.zeros_like(state.seen).at[c.clients].set(c.valid)
        state = state._replace(table=table, table_mean=table_mean, last_round=last_round,
                               table_scale=scale, selection=self.selection_after(c),
                               clock=c.clock)
        return state, rows

    def _authors_round(self, state: MIFAState, inputs: RoundInput, problem: Problem
                       ) -> tuple[MIFAState, Metrics]:
        """``fdu.py``: wait for every client, fill the table with all N, then train."""
        seen = state.seen | inputs.available
        num_clients = seen.shape[0]
        filled = state.last_round[0] >= 0  # the fill round stamps every client

        def wait(state):
            return state._replace(seen=seen), jnp.int32(0)

        def fill_table(state):  # fdu.py initialize_update_table: all N clients, lr_0
            select_key, train_key = jax.random.split(inputs.key)
            everyone = jnp.arange(num_clients)
            table = self._train(problem, state, everyone, train_key, self._lr(0))
            context = selection_lib.SelectionContext(select_key, inputs.available, inputs.round,
                                                     state.params, problem)
            chosen = self.selection.update(state.selection, context, everyone,
                                           jnp.ones((num_clients,), bool))
            return state._replace(table=table, table_mean=table.mean(axis=0), seen=seen,
                                  last_round=jnp.full_like(state.last_round, inputs.round),
                                  selection=chosen), jnp.int32(num_clients)

        def train(state):
            lr = self._lr(state.step)
            c = self.cohort(state, inputs, problem)
            state, _ = self._refresh(state, inputs, problem, c)
            params = server.add_delta(state.params, self.server_lr * lr * state.table_mean)
            return (state._replace(params=params, seen=seen, step=state.step + 1),
                    jnp.sum(c.valid).astype(jnp.int32))

        branch = jnp.where(filled, 2, jnp.where(jnp.all(seen), 1, 0))
        new_state, selected = jax.lax.switch(branch, (wait, fill_table, train), state)
        return new_state, {"num_selected": selected}
