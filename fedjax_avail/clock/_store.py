"""Where a stale job finds the model it started from: a bounded history, or per-client copies.

Versions count server updates: version t is the global model before update t (version 0 is the
initial model). A job that started from version v and is applied in update t has staleness
``t - v``.

* :class:`ModelHistory` (the default) keeps the last H versions in an ``[H, P]`` ring buffer:
  memory H x P, whatever N. A job whose version fell out of the ring (``t - v >= H``) cannot be
  replayed: it is **dropped** (not applied), and counted in the round metric ``dropped_stale``;
  ``simulate`` warns when any was dropped.
* :class:`PerClientModels` keeps, for every client, the model its current job started from:
  ``[N, P]``, exact for any staleness, for small models. Both give identical results where the
  history is long enough (``tests/test_async.py``).
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp

from fedjax_avail._checks import check_int


class Starts(NamedTuple):
    """Jobs that started in a step: which clients, from which model version."""

    clients: jax.Array  # [S] int32
    versions: jax.Array  # [S] int32 (the current version t, or t + 1 after this step's update)
    valid: jax.Array  # [S] bool


@dataclasses.dataclass(frozen=True)
class ModelHistory:
    """The last ``size`` global models, ``[H, P]``; version v lives in row ``v % H``."""

    size: int = 256

    def __post_init__(self):
        check_int("history", self.size)

    def init(self, x0: jax.Array, num_clients: int) -> jax.Array:
        del num_clients
        return jnp.zeros((self.size, x0.shape[0]), x0.dtype).at[0].set(x0)

    def starts(self, store, clients, versions, t, x_t) -> tuple[jax.Array, jax.Array]:
        """``([K, P] start models, [K] bool alive)``; dead rows (fallen out) are garbage."""
        del clients, x_t
        return store[versions % self.size], (t - versions) < self.size

    def record(self, store, t_new, x_new, starts: tuple[Starts, ...], x_t) -> jax.Array:
        del starts, x_t
        return store.at[t_new % self.size].set(x_new)


@dataclasses.dataclass(frozen=True)
class PerClientModels:
    """``[N, P]``: row i is the model client i's current job started from (exact, N x P)."""

    def init(self, x0: jax.Array, num_clients: int) -> jax.Array:
        return jnp.broadcast_to(x0, (num_clients, x0.shape[0])) + jnp.zeros((), x0.dtype)

    def starts(self, store, clients, versions, t, x_t) -> tuple[jax.Array, jax.Array]:
        # A job that started in this very step (version t) has not been written yet: it is x_t.
        rows = jnp.where((versions == t)[:, None], x_t, store[clients])
        return rows, jnp.ones(clients.shape, bool)

    def record(self, store, t_new, x_new, starts: tuple[Starts, ...], x_t) -> jax.Array:
        for started in starts:
            def write(store, started=started):
                model = jnp.where((started.versions == t_new)[:, None], x_new, x_t)
                rows = jnp.where(started.valid, started.clients, store.shape[0])  # invalid: drop
                return store.at[rows].set(model, mode="drop")

            store = jax.lax.cond(jnp.any(started.valid), write, lambda s: s, store)
        return store


def model_store(history: int | None) -> ModelHistory | PerClientModels:
    """``ModelHistory(history)``, or ``PerClientModels()`` when ``history`` is None."""
    return PerClientModels() if history is None else ModelHistory(history)
