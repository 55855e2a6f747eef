"""Least-recently-participated selection (FedLaAvg, Algorithm 1 line 6 / Algorithm 2 line 6)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from fedjax_avail import cohort as cohort_lib
from fedjax_avail.selection._base import Selection


def least_recent(
    last_round: jax.Array, available: jax.Array, k: int
) -> tuple[jax.Array, jax.Array]:
    """Picks the k available clients whose last participation is oldest.

    ``B^r <- the K clients in C^r with the lowest R_i^{r-1}`` (FedLaAvg Alg. 2 L6, P:L290). Ties
    go to the lower client index (the paper sorts the stamps, App. D P:L853, and leaves ties
    open). When fewer than K clients are available, all of them are selected.

    Args:
      last_round: ``[N]`` int32 round of each client's last participation (-1 if never).
      available: ``[N]`` bool.
      k: cohort size K (static).

    Returns:
      ``(cohort, valid)`` as :func:`fedjax_avail.selection.uniform`.
    """
    available = jnp.asarray(available)
    # float32 scores: XLA:CPU's top_k is ~100x slower on int32 than on float32 at N = 1e5.
    # Stamps are exact in float32 below 2^24 rounds.
    never = jnp.float32(2**24)
    scores = -jnp.where(available, last_round.astype(jnp.float32), never)
    # top_k returns the lower index first among equal values: that is the tie-break.
    _, cohort = jax.lax.top_k(scores, k)
    return cohort, available[cohort]


@dataclasses.dataclass(frozen=True)
class LeastRecent(Selection):
    """The K available clients that participated least recently (:func:`least_recent`).

    State: ``[N]`` int32 stamps, the last round each client reported in (-1: never); a client
    that was selected but dropped out keeps its old stamp. FedLaAvg's default.
    """

    def init(self, params, num_clients: int) -> jax.Array:
        del params
        return jnp.full((num_clients,), -1, jnp.int32)

    def select(self, state, context, k: int):
        return (state, *least_recent(state, context.available, k))

    def update(self, state, context, cohort, valid):
        return cohort_lib.scatter(state, cohort, jnp.full(cohort.shape, context.round,
                                                          jnp.int32), valid)
