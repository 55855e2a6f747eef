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

Under a mesh whose ``"cohort"`` axis splits a run over D devices (``simulate``'s default CPU
mesh) every device would compute all M blocks. From ``SPLIT_CLIENTS`` clients on, each device
computes M / D of them and the words are gathered onto every device: the same words, so the
same results. FedAvg under Bernoulli(0.5) availability (a draw for availability and one for
selection each round) over 2 CPU devices took 0.73x the time a round at N = 10^6 and 0.81x at
N = 5 x 10^5, final models identical (``benchmarks/results/before_after_issue36_split_bits.json``);
split at every N (not committed) it took the same at N = 2.5 x 10^5 and 1.04-1.10x at
N <= 10^5, where the gather costs more than the blocks it saves.

A probability p becomes the 31-bit threshold ``round(p * 2^31)`` and a client is drawn "yes"
iff ``(word >> 1) < threshold``: exact for p = 0 and p = 1, and within 2^-32 of p otherwise
(finer than the 2^-23 grid of a float32 uniform).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.random import threefry2x32_p, threefry_2x32

from fedjax_avail.mesh import CLIENTS, COHORT

_SCALE = 2.0**31
SPLIT_CLIENTS = 2**18  # from this N on, a "cohort" mesh's devices split the blocks


def client_bits(key: jax.Array, num_clients: int) -> jax.Array:
    """``[N]`` uint32 uniform words from a raw ``uint32[2]`` or typed Threefry key."""
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        if str(jax.random.key_impl(key)) != "threefry2x32":  # another generator: its own bits
            return jax.random.bits(key, (num_clients,), jnp.uint32)
        key = jax.random.key_data(key)
    devices = _cohort_devices()
    if devices > 1 and num_clients >= SPLIT_CLIENTS and key.shape == (2,):
        return _split_blocks(key, num_clients, devices)
    # threefry_2x32 pairs count[j] with count[M + j] (a 0 pads an odd N) and returns
    # concat(word 0s, word 1s)[:N].
    return threefry_2x32(key, jnp.arange(num_clients, dtype=jnp.uint32))


def _cohort_devices() -> int:
    """D, the size of the ``"cohort"`` axis of the mesh being traced under, where the words
    are wanted on every device: 1 without such a mesh, on a mesh that also splits the client
    arrays (``"clients"``), and where the axis is not left to the partitioner (``Explicit``
    axes; ``Manual`` inside ``shard_map``), which sharding constraints require."""
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty or COHORT not in mesh.auto_axes or CLIENTS in mesh.axis_names:
        return 1
    return mesh.shape[COHORT]


def _split_blocks(key: jax.Array, num_clients: int, devices: int) -> jax.Array:
    """:func:`client_bits`'s ``[N]`` words with the blocks split over the ``"cohort"`` axis:
    blocks ``(j, M + j)`` (``(M - 1, 0)`` for an odd N, as ``threefry_2x32`` pads) for ``j`` in
    each device's share of ``0 .. M'`` (M rounded up to a multiple of D; the extra blocks are
    dropped), then gathered onto every device."""
    half = -(-num_clients // 2)
    blocks = jnp.arange(-(-half // devices) * devices, dtype=jnp.uint32)
    second = jnp.where(blocks + half < num_clients, blocks + half, jnp.uint32(0))
    split = jax.sharding.PartitionSpec(COHORT)
    first, second = (jax.lax.with_sharding_constraint(c, split) for c in (blocks, second))
    # each half gathered before they are joined (XLA's SPMD partitioner built an invalid
    # program for the join of split halves trimmed to an odd N)
    words = [jax.lax.with_sharding_constraint(w, jax.sharding.PartitionSpec())[:half]
             for w in threefry2x32_p.bind(key[0], key[1], first, second)]
    return jnp.concatenate(words)[:num_clients]


def threshold(p: np.ndarray) -> jax.Array:
    """uint32 ``round(p * 2^31)`` for probabilities p in [0, 1] (host-side, at ``init``)."""
    return jnp.asarray(np.rint(np.asarray(p, np.float64) * _SCALE).astype(np.uint32))


def below(words: jax.Array, thresholds: jax.Array) -> jax.Array:
    """``[N]`` bool, True with probability ``thresholds / 2^31`` for uniform ``words``."""
    return (words >> 1) < thresholds
