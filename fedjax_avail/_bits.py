"""Per-client random bits for the random processes: one 32-bit word per client per step.

Random processes (Bernoulli, Markov) need one uniform draw for each of the N clients at every
step, and at large N that draw is their whole cost. ``jax.random.uniform`` under JAX's default
(partitionable) Threefry spends a full Threefry-2x32 block per 32-bit word; here both output
words of each block are used, which halves the work with the same generator (Threefry-2x32, 20
rounds: Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11). The layout is
JAX's own non-partitionable one (``jax.random.bits`` with ``jax_threefry_partitionable`` off),
``threefry_2x32(key, iota(N))`` with M = ceil(N / 2):

    block j = threefry_2x32(key, (j, M + j)),   client j <- word 0,   client M + j <- word 1

(for an odd N the last block's second counter is a padding 0 and its word 1 is dropped),

which needs no shuffle of the output (an interleaved layout measured ~25% slower on XLA:CPU).

A probability p becomes the 31-bit threshold ``round(p * 2^31)`` and a client is drawn "yes"
iff ``(word >> 1) < threshold``: exact for p = 0 and p = 1, and within 2^-32 of p otherwise
(finer than the 2^-23 grid of a float32 uniform).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.random import threefry_2x32

_SCALE = 2.0**31


def client_bits(key: jax.Array, num_clients: int) -> jax.Array:
    """``[N]`` uint32 uniform words from a raw ``uint32[2]`` or typed Threefry key."""
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        if str(jax.random.key_impl(key)) != "threefry2x32":  # another generator: its own bits
            return jax.random.bits(key, (num_clients,), jnp.uint32)
        key = jax.random.key_data(key)
    # threefry_2x32 pairs count[j] with count[M + j] (a 0 pads an odd N) and returns
    # concat(word 0s, word 1s)[:N].
    return threefry_2x32(key, jnp.arange(num_clients, dtype=jnp.uint32))


def threshold(p: np.ndarray) -> jax.Array:
    """uint32 ``round(p * 2^31)`` for probabilities p in [0, 1] (host-side, at ``init``)."""
    return jnp.asarray(np.rint(np.asarray(p, np.float64) * _SCALE).astype(np.uint32))


def below(words: jax.Array, thresholds: jax.Array) -> jax.Array:
    """``[N]`` bool, True with probability ``thresholds / 2^31`` for uniform ``words``."""
    return (words >> 1) < thresholds
