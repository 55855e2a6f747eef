"""What every asynchronous algorithm shares: the clock, the model store, one update's contributions.

An asynchronous algorithm is a frozen dataclass like the synchronous ones; one ``round`` is one
server update. It subclasses :class:`AsyncParts` (the keyword arguments ``durations``,
``concurrency``, ``history``, ``offline``, ``table_dtype``; ``events``, the K results an
update needs, is its ``clients_per_round`` unless it says otherwise), keeps the fields
``clock`` and ``store`` in its state (:meth:`AsyncParts.init_parts`), calls
:meth:`AsyncParts.completions` to learn which jobs complete in this update (from which model
version, with which staleness), trains them from their start models with
:func:`fedjax_avail.local.local_sgd` or :func:`~fedjax_avail.local.local_gradients`,
aggregates, and calls :meth:`AsyncParts.record` with the new model.

Both clocks follow one set of rules on the run's timeline (:mod:`fedjax_avail.timeline`): an
update happens when its K results have arrived, time moves on through the slots (an outage
passes without an update), staleness counts server updates, and an update that can never
gather its K results stops the run (:class:`fedjax_avail.StalledError`).

Staleness of a contribution = the server updates between the version its job started from and
the update it is applied in (0: computed on the current model). WKAFL counts ``tau = s + 1``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, NamedTuple

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from fedjax_avail import _keys, availability
from fedjax_avail import clock as clock_lib
from fedjax_avail import tables as tables_lib
from fedjax_avail._checks import Count, check_int, check_optional_int
from fedjax_avail.algorithms._base import Algorithm, Footprint, Metrics, RoundInput
from fedjax_avail.timeline import Cursor, Timeline


class Contributions(NamedTuple):
    """The jobs completing in one update, ready to train."""

    clients: jax.Array  # [K] int32
    staleness: jax.Array  # [K] int32, t - version
    valid: jax.Array  # [K] bool: completed, reported (no drop-out) and replayable
    starts: jax.Array  # [K, P] the model each job started from
    batch_ids: jax.Array  # [K] int32 keys of the jobs' batches (distinct for a client's 2nd job)
    train_key: jax.Array  # the round's batch key (FedAvg's, so one-client-per-round matches it)
    started: Any  # the jobs that started in the update: pass to AsyncParts.record
    metrics: Metrics  # num_applied, applied_clients, applied_staleness, virtual_time, ...


@dataclasses.dataclass(frozen=True, kw_only=True)
class AsyncParts(Algorithm):
    """The clock and model-store options of an asynchronous algorithm (keyword arguments).

    Attributes:
      durations: ``fa.clock.KofP()`` (WKAFL's protocol) or a duration model
        (``fa.clock.Constant``, ``Exponential``, ``LogNormal``, with per-client speeds).
      concurrency: M, the most jobs in flight (event clock only); None: every client works
        continuously (M = N). Must be at least the K results a server update needs.
      history: H, the global models kept for stale jobs (memory H x P; a job staler than H - 1
        is dropped and counted); None keeps every client's start model (memory N x P, exact).
      offline: a job whose client goes offline is ``"lost"`` or finishes ``"late"``.
      table_dtype: how the stored models are kept: ``"float32"``, ``"bfloat16"`` or ``"int8"``
        with a scale per row (a stale job then starts from the rounded model).
    """

    durations: clock_lib.Durations | clock_lib.KofP = dataclasses.field(
        default_factory=clock_lib.KofP)
    concurrency: Count | None = None
    history: Count | None = 256
    offline: str = "lost"
    table_dtype: str = "float32"
    # an update holds its jobs' results and the start models they were trained from together
    # after training (measured: 2.0 K P), the start models also while the members train
    cohort_copies: ClassVar[int] = 2
    moves_time: ClassVar[bool] = True  # round returns (state, metrics, cursor)

    @property
    def events(self) -> int:
        """K, the results one server update needs (``clients_per_round`` by default)."""
        return self.clients_per_round

    def _check_async(self) -> None:
        """The checks of ``__post_init__`` beyond the fields' annotations: the clock's options
        and the store's dtype."""
        check_optional_int("concurrency", self.concurrency, low=self.events)
        clock_lib.check_offline(self.offline)
        if isinstance(self.durations, clock_lib.KofP) and (
                self.concurrency is not None or self.offline != "lost"):
            raise ValueError(
                f"concurrency={self.concurrency!r} and offline={self.offline!r} apply to an event "
                "clock (durations=Constant, Exponential or LogNormal); with durations=KofP() "
                "every client always holds a model and K of the available ones report, so "
                "leave concurrency=None and offline='lost'")
        tables_lib.check_table_dtype(self.table_dtype)

    def validate(self, num_clients: int) -> None:
        if self.events > num_clients:
            raise ValueError(f"the {self.events} results a server update needs must be at most "
                             f"num_clients={num_clients}")
        if self.concurrency is not None:
            check_int("concurrency", self.concurrency, self.events, num_clients + 1)
        if not isinstance(self.durations, clock_lib.KofP):
            self.durations.speeds(num_clients)

    def _clock(self):
        return clock_lib.make_clock(self.durations, self.events, self.concurrency, self.offline)

    def _store(self):
        return clock_lib.model_store(self.history, self.table_dtype)

    def init_parts(self, params: Any, num_clients: int) -> tuple[Any, Any]:
        """The clock's state and the model store's."""
        x0, _ = ravel_pytree(params)
        return self._clock().init(num_clients), self._store().init(x0, num_clients)

    def footprint(self, num_clients: int) -> Footprint:
        del num_clients
        k = self.events
        return Footprint(k, self.batch_size, k, self.cohort_copies, starts=1)

    def virtual_time(self, state: Any) -> jax.Array:
        """``[]`` the clock time (in slots) of the last server update."""
        return state.clock.time[0]

    def completions(self, state: Any, inputs: RoundInput) -> tuple[Any, Contributions, Cursor]:
        """Advances the clock (``state.clock``) through this update's completions and finds
        their start models in ``state.store``.

        Returns:
          ``(clock state, contributions, cursor)``: the cursor the next update starts from
          (the event clock's stays where the update happened; K-of-P's moves to the next
          slot), which ``round`` returns and the engine keeps.
        """
        t = inputs.round
        x_t, _ = ravel_pytree(state.params)
        clock_key, train_key = jax.random.split(inputs.key)
        clock = self._clock()
        timeline, cursor = _timeline(inputs, state.clock.time[0])
        clock_state, done, started, cursor = clock.step(state.clock, timeline, cursor,
                                                        clock_key, t)
        starts, alive = self._store().starts(state.store, done.clients, done.versions, t, x_t)
        reported = done.valid
        if inputs.reports is not None:
            reported &= inputs.reports[done.clients]
        valid = reported & alive
        staleness = t - done.versions
        # A client's second job in the same update draws other batches than its first.
        same = (done.clients[:, None] == done.clients[None, :]) & done.valid[None, :]
        occurrence = jnp.sum(jnp.tril(same, -1), axis=1).astype(jnp.int32)
        batch_ids = done.clients + occurrence * inputs.available.shape[0]
        metrics = {
            "num_applied": jnp.sum(valid).astype(jnp.int32),
            "applied_clients": jnp.where(valid, done.clients, -1),
            "applied_staleness": jnp.where(valid, staleness, -1),
            "dropped_stale": jnp.sum(reported & ~alive).astype(jnp.int32),
            "virtual_time": timeline.seconds(clock.virtual_time(clock_state)),
            **clock.metrics(clock_state),
        }
        return clock_state, Contributions(done.clients, staleness, valid, starts, batch_ids,
                                          train_key, started, metrics), cursor

    def record(self, state: Any, t: jax.Array, new_params: Any,
               contributions: Contributions) -> Any:
        """The model store after update t took ``state.params`` to ``new_params`` (version
        t + 1)."""
        x_t, _ = ravel_pytree(state.params)
        x_new, _ = ravel_pytree(new_params)
        return self._store().record(state.store, t + 1, x_new, contributions.started, x_t)


def _timeline(inputs: RoundInput, time: jax.Array) -> tuple[Timeline, Cursor]:
    """The round's timeline and cursor; without them (a direct call of ``round``) slots of
    length 1, the cursor in the slot of ``time``, and the mask ``inputs.available`` holds in
    every slot."""
    if inputs.timeline is not None:
        return inputs.timeline, inputs.cursor
    fixed = Timeline(availability.AlwaysOn(), _keys.run_keys(0))
    return fixed, Cursor(inputs.available, fixed.slot_of(time), inputs.available)
