"""Uniform random selection among the available clients (the baselines' rule)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from fedjax_avail import _bits
from fedjax_avail.selection._base import Selection


def uniform(key: jax.Array, available: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """Picks k available clients uniformly at random without replacement.

    Every available client gets an independent uniform 24-bit score (the top bits of one
    Threefry word per client, :mod:`fedjax_avail._bits`, exact in float32) and unavailable ones
    score -1; the k highest scores win, so any k-subset of the available clients is equally
    likely up to ties among the winners (probability about K^2 / 2^25, resolved by lower index).
    Scores are float32 because XLA:CPU's ``top_k`` is ~100x slower on int32 at N = 1e5.

    Args:
      key: PRNG key.
      available: ``[N]`` bool.
      k: cohort size K (static).

    Returns:
      ``(cohort, valid)``: ``[K]`` distinct int32 client indices and ``[K]`` bool, False for the
      padding slots when fewer than K clients are available (those slots hold unavailable
      clients and must not be used).
    """
    available = jnp.asarray(available)
    words = _bits.client_bits(key, available.shape[0])
    scores = jnp.where(available, (words >> 8).astype(jnp.float32), -1.0)
    _, cohort = jax.lax.top_k(scores, k)
    return cohort, available[cohort]


@dataclasses.dataclass(frozen=True)
class Uniform(Selection):
    """K clients uniformly at random among the available ones (:func:`uniform`); no state.

    Example:
      >>> fa.algorithms.FedAvg(clients_per_round=10, selection=fa.selection.Uniform())
    """

    def select(self, state, context, k: int):
        return (state, *uniform(context.key, context.available, k))
