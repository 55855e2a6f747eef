"""Uniform random selection among the available clients (the baselines' rule)."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def uniform(key: jax.Array, available: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """Picks k available clients uniformly at random without replacement.

    Every available client gets an independent Uniform(0, 1) score and unavailable ones score -1;
    the k highest scores win, so any k-subset of the available clients is equally likely.

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
    scores = jnp.where(available, jax.random.uniform(key, available.shape), -1.0)
    _, cohort = jax.lax.top_k(scores, k)
    return cohort, available[cohort]
