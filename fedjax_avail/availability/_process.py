"""The availability-process interface, and the memoryless processes (always on, Bernoulli).

A process is a frozen dataclass with two pure functions over all N clients at once:

* ``init(key, num_clients) -> state``: called once, outside ``jit``; validates against N.
* ``step(state, t, key) -> (state, mask)``: ``mask`` is ``[N]`` bool, True where client i is
  available at step t. Round r of :func:`fedjax_avail.simulate` uses step r.

Arrays a process needs (probabilities, group ids, trace tables) live in its state, so they are
device buffers passed to the compiled round, not constants baked into it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

State = Any


class AvailabilityProcess(Protocol):
    """What :func:`fedjax_avail.simulate` needs of an availability process."""

    def init(self, key: jax.Array, num_clients: int) -> State: ...

    def step(self, state: State, t: jax.Array, key: jax.Array) -> tuple[State, jax.Array]: ...


@dataclasses.dataclass(frozen=True)
class AlwaysOn:
    """Every client is available at every step (E = 1 in FedLaAvg's Assumption 4)."""

    def init(self, key: jax.Array, num_clients: int) -> State:
        del key
        return jnp.ones((num_clients,), bool)  # the mask itself, constant

    def step(self, state: State, t: jax.Array, key: jax.Array) -> tuple[State, jax.Array]:
        del t, key
        return state, state


@dataclasses.dataclass(frozen=True, eq=False)
class Bernoulli:
    """Client i is available at each step independently with probability ``p_i``.

    Args:
      p: a probability in [0, 1], or ``[N]`` per-client probabilities.

    Raises:
      ValueError: a probability outside [0, 1] (at construction), or ``[N]`` of the wrong width
        (at ``init``).
    """

    p: float | np.ndarray

    def __post_init__(self):
        p = np.asarray(self.p, np.float64)
        if p.ndim > 1 or not np.all((p >= 0) & (p <= 1)):
            raise ValueError(
                f"p must be a probability in [0, 1] (scalar or [N]), got values in "
                f"[{p.min()}, {p.max()}] with shape {p.shape}"
            )

    def init(self, key: jax.Array, num_clients: int) -> State:
        del key
        p = np.asarray(self.p, np.float32)
        if p.ndim == 1 and p.shape[0] != num_clients:
            raise ValueError(f"p has {p.shape[0]} entries but there are {num_clients} clients")
        return jnp.broadcast_to(jnp.asarray(p), (num_clients,))

    def step(self, state: State, t: jax.Array, key: jax.Array) -> tuple[State, jax.Array]:
        del t
        return state, jax.random.uniform(key, state.shape) < state
