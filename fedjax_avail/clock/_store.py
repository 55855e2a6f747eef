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

Either store may keep its rows as ``"bfloat16"`` or ``"int8"`` (with a scale per row) instead of
float32 (``table_dtype``; :func:`fedjax_avail.tables.encode_rows`): a stale job then starts from
the rounded model. The store's state is ``(rows, row scales)``.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp

from fedjax_avail import cohort as cohort_lib
from fedjax_avail import tables as tables_lib
from fedjax_avail._checks import Count, check_fields


class Starts(NamedTuple):
    """Jobs that started in a step: which clients, from which model version."""

    clients: jax.Array  # [S] int32
    versions: jax.Array  # [S] int32 (the current version t, or t + 1 after this step's update)
    valid: jax.Array  # [S] bool


def _filled(x0: jax.Array, rows: int, dtype: str):
    values, scale = tables_lib.table_zeros(rows, x0.shape[0], dtype)
    stored, row_scale = tables_lib.encode_rows(x0[None], values.dtype)
    return values.at[:].set(stored[0]), scale.at[:].set(row_scale[0])


def _put(store, rows, models, valid=None):
    """Writes float32 ``models`` [S, P] into rows ``rows`` [S] (invalid ones dropped)."""
    values, scale = store
    stored, row_scale = tables_lib.encode_rows(models, values.dtype)
    if valid is not None:
        rows = jnp.where(valid, rows, values.shape[0])
    return (values.at[rows].set(stored, mode="drop"),
            scale.at[rows].set(row_scale, mode="drop"))


def _get(store, rows):
    """Rows ``rows`` [S] of the store, decoded to float32 ``[S, P]`` (read with
    :func:`fedjax_avail.cohort.gather`, so that one row does not make XLA:CPU copy the store)."""
    values, scale = store
    return tables_lib.decode_rows(cohort_lib.gather(values, rows), cohort_lib.gather(scale, rows))


@dataclasses.dataclass(frozen=True)
class ModelHistory:
    """The last ``size`` global models, ``[H, P]``; version v lives in row ``v % H``."""

    size: Count = 256
    dtype: str = "float32"

    def __post_init__(self):
        check_fields(self)
        tables_lib.check_table_dtype(self.dtype)

    def init(self, x0: jax.Array, num_clients: int):
        del num_clients
        return _filled(x0, self.size, self.dtype)

    def starts(self, store, clients, versions, t, x_t) -> tuple[jax.Array, jax.Array]:
        """``([K, P] start models, [K] bool alive)``; dead rows (fallen out) are garbage."""
        del clients, x_t
        return _get(store, versions % self.size), (t - versions) < self.size

    def record(self, store, t_new, x_new, starts: tuple[Starts, ...], x_t):
        del starts, x_t
        return _put(store, jnp.reshape(t_new % self.size, (1,)), x_new[None])


@dataclasses.dataclass(frozen=True)
class PerClientModels:
    """``[N, P]``: row i is the model client i's current job started from (exact, N x P)."""

    dtype: str = "float32"

    def __post_init__(self):
        check_fields(self)

    def init(self, x0: jax.Array, num_clients: int):
        return _filled(x0, num_clients, self.dtype)

    def starts(self, store, clients, versions, t, x_t) -> tuple[jax.Array, jax.Array]:
        # A job that started in this very step (version t) has not been written yet: it is x_t.
        rows = jnp.where((versions == t)[:, None], x_t, _get(store, clients))
        return rows, jnp.ones(clients.shape, bool)

    def record(self, store, t_new, x_new, starts: tuple[Starts, ...], x_t):
        for started in starts:
            def write(store, started=started):
                model = jnp.where((started.versions == t_new)[:, None], x_new, x_t)
                return _put(store, started.clients, model, started.valid)

            store = jax.lax.cond(jnp.any(started.valid), write, lambda s: s, store)
        return store


def model_store(history: int | None, dtype: str = "float32") -> ModelHistory | PerClientModels:
    """``ModelHistory(history, dtype)``, or ``PerClientModels(dtype)`` when ``history`` is None."""
    return PerClientModels(dtype) if history is None else ModelHistory(history, dtype)
