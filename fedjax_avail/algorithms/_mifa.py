"""MIFA: Memory-augmented Impatient Federated Averaging (Gu et al., NeurIPS 2021).

Compared in the FedLaAvg supplement (S:L9) as "basically the same" algorithm: the server keeps
every client's latest update and averages all N of them (the latest-update rule it shares with
FedLaAvg, :func:`fedjax_avail.cohort.scatter_keep_mean`); unlike FedLaAvg it needs every client
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
from fedjax_avail import selection, server
from fedjax_avail._checks import Annotated, Count, Positive, Range, check_fields
from fedjax_avail.algorithms._base import (
    Metrics,
    RoundInput,
    check_cohort_fits,
    check_round_clock,
    reported,
    round_clock,
    selected_count,
    timed_cohort,
)
from fedjax_avail.local import Problem, flat_size, local_sgd

STARTS = ("after_all_seen", "immediately", "authors_code")


class MIFAState(NamedTuple):
    params: Any  # global model pytree x, P parameters
    table: jax.Array  # [N, P] table_dtype, G_i = latest update / its learning rate (0 if none)
    table_mean: jax.Array  # [P] float32, (1/N) sum_i G_i
    last_round: jax.Array  # [N] int32, round of the last reported update, -1 if never
    seen: jax.Array  # [N] bool: "authors_code": available once so far; else: has a row
    step: jax.Array  # [] int32, server steps taken so far (t of lr_t)
    table_scale: Any = None  # [N] float32 row scales of an int8 table (None otherwise)
    clock: Any = None  # RoundClockState (speeds [N], virtual time) when durations are given


@dataclasses.dataclass(frozen=True)
class MIFA:
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
      durations, deadline, over_selection: optional round timing, as FedAvg's
        (:mod:`fedjax_avail.clock._rounds`); not with ``start="authors_code"``.

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
    durations: Any = None
    deadline: Annotated[float | None, Range(0, low_open=True)] = None
    over_selection: Annotated[float, Range(1)] = 1.0

    def __post_init__(self):
        check_fields(self)
        if self.start not in STARTS:
            raise ValueError(f"start must be one of {STARTS}, got {self.start!r}")
        cohort_lib.check_table_dtype(self.table_dtype)
        if self.start == "authors_code" and self.table_dtype != "float32":
            raise ValueError("table_dtype must be 'float32' with start='authors_code' (its fill "
                             "round writes the whole table)")
        if self._clock() is not None and self.start == "authors_code":
            raise ValueError("durations must be None with start='authors_code' (its fill round "
                             "trains all N clients, available or not, in no defined time)")

    def _clock(self):
        return round_clock(self.durations, self.deadline, self.over_selection)

    @property
    def cohort_copies(self) -> int:
        """[K, P] arrays a round holds together after training (fa.estimate_memory): FedLaAvg's
        4, the same latest-update rule; the authors-code fill round of all N writes the table
        without gathering rows (measured: 3.0 N P)."""
        return 3 if self.start == "authors_code" else 4

    def validate(self, num_clients: int) -> None:
        check_cohort_fits(self.clients_per_round, num_clients)
        check_round_clock(self._clock(), self.clients_per_round, num_clients)

    def virtual_time(self, state: MIFAState) -> jax.Array | None:
        """``[]`` the time the rounds so far took (durations given), else None (one slot a
        round)."""
        return None if state.clock is None else state.clock.time[0]

    def cohort_size(self, num_clients: int) -> int:
        """Clients trained at once: all N in the authors' fill round, else K."""
        return num_clients if self.start == "authors_code" else self.clients_per_round

    def init(self, params: Any, num_clients: int) -> MIFAState:
        size = flat_size(params)
        table, scale = cohort_lib.table_zeros(num_clients, size, self.table_dtype)
        return MIFAState(
            params=params,
            table=table,
            table_mean=jnp.zeros((size,), jnp.float32),
            last_round=jnp.full((num_clients,), -1, jnp.int32),
            seen=jnp.zeros((num_clients,), bool),
            step=jnp.int32(0),
            table_scale=None if self.table_dtype == "float32" else scale,
            clock=None if self.durations is None else self._clock().init(num_clients),
        )

    def _lr(self, step: jax.Array) -> jax.Array:
        return self.client_lr / (step + 1.0) if self.lr_decay else jnp.float32(self.client_lr)

    def _train(self, problem, state, clients, key, lr):
        updates = local_sgd(problem, state.params, clients, key, steps=self.local_steps,
                            batch_size=self.batch_size, lr=lr)
        return updates / lr

    def round(
        self, state: MIFAState, inputs: RoundInput, problem: Problem
    ) -> tuple[MIFAState, Metrics]:
        clock_key, key = jax.random.split(inputs.key)  # the keys FedAvg and FedLaAvg use too
        if self.start == "authors_code":
            return self._authors_round(state, inputs, problem, key)
        state, selected, valid_rows, timing = self._refresh(
            state, inputs, problem, key, jax.random.fold_in(clock_key, 1))
        seen = state.seen | valid_rows
        started = jnp.bool_(True) if self.start == "immediately" else jnp.all(seen)
        lr = self._lr(state.step)
        moved = server.add_delta(state.params, self.server_lr * lr * state.table_mean)
        params = jax.tree.map(lambda new, old: jnp.where(started, new, old), moved, state.params)
        state = state._replace(params=params, seen=seen,
                               step=state.step + started.astype(jnp.int32))
        return state, {"num_selected": selected, **timing}

    def _refresh(self, state, inputs, problem, key, clock_key=None):
        """The cohort (<= K available, least recently updated first) refreshes its rows."""
        lr = self._lr(state.step)
        clock = self._clock()
        cohort, valid = selection.least_recent(
            state.last_round, inputs.available, selected_count(clock, self.clients_per_round))
        clock_state, cohort, valid, timing = timed_cohort(
            clock, state.clock, inputs, clock_key, cohort, valid, self.clients_per_round)
        valid = reported(inputs, cohort, valid)
        grads = self._train(problem, state, cohort, key, lr)
        scale = state.table_scale
        if scale is None:
            table, table_mean = cohort_lib.scatter_keep_mean(
                state.table, state.table_mean, cohort, grads, valid
            )
        else:
            table, table_mean, scale = cohort_lib.scatter_keep_mean(
                state.table, state.table_mean, cohort, grads, valid, scale
            )
        last_round = cohort_lib.scatter(
            state.last_round, cohort, jnp.full(cohort.shape, inputs.round, jnp.int32), valid
        )
        rows = jnp.zeros_like(state.seen).at[cohort].set(valid)
        state = state._replace(table=table, table_mean=table_mean, last_round=last_round,
                               table_scale=scale, clock=clock_state)
        return state, jnp.sum(valid).astype(jnp.int32), rows, timing

    def _authors_round(self, state, inputs, problem, key):
        """``fdu.py``: wait for every client, fill the table with all N, then train."""
        seen = state.seen | inputs.available
        num_clients = seen.shape[0]
        filled = state.last_round[0] >= 0  # the fill round stamps every client

        def wait(state):
            return state._replace(seen=seen), jnp.int32(0)

        def fill_table(state):  # fdu.py initialize_update_table: all N clients, lr_0
            table = self._train(problem, state, jnp.arange(num_clients), key, self._lr(0))
            return state._replace(table=table, table_mean=table.mean(axis=0), seen=seen,
                                  last_round=jnp.full_like(state.last_round, inputs.round)
                                  ), jnp.int32(num_clients)

        def train(state):
            lr = self._lr(state.step)
            state, selected, _, _ = self._refresh(state, inputs, problem, key)
            params = server.add_delta(state.params, self.server_lr * lr * state.table_mean)
            return state._replace(params=params, seen=seen, step=state.step + 1), selected

        branch = jnp.where(filled, 2, jnp.where(jnp.all(seen), 1, 0))
        new_state, selected = jax.lax.switch(branch, (wait, fill_table, train), state)
        return new_state, {"num_selected": selected}
