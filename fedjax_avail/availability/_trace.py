"""Availability replayed from a recorded ``[T, N]`` table."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_avail.availability._process import State


@dataclasses.dataclass(frozen=True, eq=False)
class Trace:
    """Replays a recorded availability table cyclically: step t uses row ``t % T``.

    Args:
      mask_table: ``[T, N]`` bool (or 0/1), True where client i is available at step t.
    """

    mask_table: np.ndarray

    def __post_init__(self):
        table = np.asarray(self.mask_table)
        if table.ndim != 2 or table.shape[0] == 0:
            raise ValueError(f"mask_table must be [T, N] with T >= 1, got shape {table.shape}")
        if not np.isin(table, (0, 1)).all():
            raise ValueError("mask_table must hold booleans (or 0/1)")

    def init(self, key: jax.Array, num_clients: int) -> State:
        del key
        table = np.asarray(self.mask_table, bool)
        if table.shape[1] != num_clients:
            raise ValueError(f"mask_table is [T, N] = {table.shape} but there are {num_clients} "
                             "clients; its width must be N")
        return jnp.asarray(table)

    def step(self, state: State, t: jax.Array, key: jax.Array) -> tuple[State, jax.Array]:
        del key
        return state, state[t % state.shape[0]]
