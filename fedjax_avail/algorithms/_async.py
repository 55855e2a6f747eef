"""What every asynchronous algorithm shares: the clock, the model store, one step's contributions.

An asynchronous algorithm is a frozen dataclass like the synchronous ones; one ``round`` is one
server update. It mixes in :class:`AsyncParts` (the keyword arguments ``durations``,
``concurrency``, ``history``, ``offline``), calls :func:`completions` to learn which jobs
complete in this update (from which model version, with which staleness), trains them from their
start models with :func:`fedjax_avail.local.local_sgd` or :func:`~fedjax_avail.local.
local_gradients`, aggregates, and calls :func:`record` with the new model.

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
from fedjax_avail import cohort as cohort_lib
from fedjax_avail._checks import Count, check_int, check_optional_int
from fedjax_avail.algorithms._base import Metrics, RoundInput
from fedjax_avail.availability._timeline import Cursor, Timeline


@dataclasses.dataclass(frozen=True, kw_only=True)
class AsyncParts:
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

    durations: Any = dataclasses.field(default_factory=clock_lib.KofP)
    concurrency: Count | None = None
    history: Count | None = 256
    offline: str = "lost"
    table_dtype: str = "float32"
    # [K, P] arrays an update holds together after training (fa.estimate_memory): the members'
    # results and the start models they were trained from (measured: 2.0 K P); the start
    # models are also held while the members train
    cohort_copies: ClassVar[int] = 2
    cohort_starts: ClassVar[int] = 1

    def _check_async(self, events: int) -> None:
        if not isinstance(self.durations, (clock_lib.KofP, clock_lib.Constant,
                                           clock_lib.Exponential, clock_lib.LogNormal)):
            raise TypeError(f"durations must be fa.clock.KofP(), Constant, Exponential or "
                            f"LogNormal, got {type(self.durations).__name__}")
        check_optional_int("concurrency", self.concurrency, low=events)
        clock_lib.check_offline(self.offline)
        if isinstance(self.durations, clock_lib.KofP) and (
                self.concurrency is not None or self.offline != "lost"):
            raise ValueError(
                f"concurrency={self.concurrency!r} and offline={self.offline!r} apply to an event "
                "clock (durations=Constant, Exponential or LogNormal); with durations=KofP() "
                "every client always holds a model and K of the available ones report, so "
                "leave concurrency=None and offline='lost'")
        cohort_lib.check_table_dtype(self.table_dtype)

    def _validate_async(self, events: int, num_clients: int) -> None:
        if events > num_clients:
            raise ValueError(f"the {events} results a server update needs must be at most "
                             f"num_clients={num_clients}")
        if self.concurrency is not None:
            check_int("concurrency", self.concurrency, events, num_clients + 1)
        if not isinstance(self.durations, clock_lib.KofP):
            self.durations.speeds(num_clients)

    def _clock(self, events: int):
        return clock_lib.make_clock(self.durations, events, self.concurrency, self.offline)

    def _store(self):
        return clock_lib.model_store(self.history, self.table_dtype)

    def _init_async(self, params, num_clients: int, events: int) -> tuple[Any, Any]:
        x0, _ = ravel_pytree(params)
        return self._clock(events).init(num_clients), self._store().init(x0, num_clients)

    @property
    def moves_time(self) -> bool:
        """True: ``round`` returns ``(state, metrics, cursor)`` (see ``Algorithm``)."""
        return True

    def virtual_time(self, state) -> jax.Array:
        """``[]`` the virtual time of the last server update (K-of-P: iterations)."""
        return state.clock.time[0]


class Contributions(NamedTuple):
    """The jobs completing in one update, ready to train."""

    clients: jax.Array  # [K] int32
    staleness: jax.Array  # [K] int32, t - version
    valid: jax.Array  # [K] bool: completed, reported (no drop-out) and replayable
    starts: jax.Array  # [K, P] the model each job started from
    batch_ids: jax.Array  # [K] int32 keys of the jobs' batches (distinct for a client's 2nd job)
    train_key: jax.Array  # the round's batch key (FedAvg's, so one-client-per-round matches it)


def _timeline(inputs: RoundInput) -> tuple[Any, Any]:
    """The round's timeline and cursor; without them (a direct call of ``round``) the mask
    ``inputs.available`` holds in every slot."""
    if inputs.timeline is not None:
        return inputs.timeline, inputs.cursor
    fixed = Timeline(availability.AlwaysOn(), _keys.run_keys(0))
    return fixed, Cursor(inputs.available, jnp.int32(-1), inputs.available)


def completions(parts: AsyncParts, events: int, clock_state, store, inputs: RoundInput,
                params) -> tuple[Any, Contributions, Any, Metrics, Any]:
    """Advances the clock through this update's completions and finds their start models.

    Returns:
      ``(clock state, contributions, started jobs, metrics, cursor)``; pass the started jobs
      to :func:`record`, return the cursor from ``round``.
    """
    t = inputs.round
    x_t, _ = ravel_pytree(params)
    clock_key, train_key = jax.random.split(inputs.key)
    clock = parts._clock(events)
    timeline, cursor = _timeline(inputs)
    if isinstance(clock, clock_lib.EventClock):
        clock_state, done, started, cursor = clock.step(clock_state, timeline, cursor,
                                                        clock_key, t)
    else:  # K-of-P: one iteration is one slot, read by the engine
        clock_state, done, started = clock.step(clock_state, inputs.available, clock_key, t)
    starts, alive = parts._store().starts(store, done.clients, done.versions, t, x_t)
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
        "virtual_time": clock.virtual_time(clock_state),
    }
    if isinstance(clock_state, clock_lib.EventClockState):
        metrics["jobs_lost"] = clock_state.jobs_lost
        metrics["stalled"] = clock_state.stalled
    contributions = Contributions(done.clients, staleness, valid, starts, batch_ids, train_key)
    return clock_state, contributions, started, metrics, cursor


def record(parts: AsyncParts, store, t, params, new_params, started) -> Any:
    """The model store after update t produced ``new_params`` (version t + 1)."""
    x_t, _ = ravel_pytree(params)
    x_new, _ = ravel_pytree(new_params)
    return parts._store().record(store, t + 1, x_new, started, x_t)
