"""Plain per-client Python loops of the algorithms, written from the papers' boxes.

No vmap, no scan, no buffers: one client at a time, numpy on the server. Nothing here calls the
library's batching, availability or selection code: each random stream is re-derived from the
*documented* rules with raw ``jax.random`` primitives, so that a bug in the library's batching
or selection shows up as a mismatch instead of being shared by both sides:

* keys: ``split(PRNGKey(seed), 4) = (params, availability init, availability, algorithm)``;
  round r uses ``fold_in(stream, r)`` (``fedjax_avail/_keys.py``);
* Bernoulli(p): client i is available iff ``(w_i >> 1) < round(p * 2^31)`` with
  ``w = threefry_2x32(availability key of round r, [0, 1, ..., N-1])`` (``_bits.py``);
* uniform selection: score ``w_i >> 8`` (same word construction, selection key), -1 when
  unavailable; the K highest scores, lower index first on ties (``selection/_uniform.py``);
* batches: client i's C x B row indices are ``offset_i + randint(fold_in(train key, i), (C, B),
  0, count_i)`` (``data/_federated.py``).
"""

from __future__ import annotations

import jax
import numpy as np
from jax.extend.random import threefry_2x32
from jax.flatten_util import ravel_pytree


def run_keys(seed):
    """(params, availability_init, availability, algorithm) keys, as documented."""
    return jax.random.split(jax.random.PRNGKey(seed), 4)


def round_keys(seed, r):
    """The round's (availability key, selection key, batch key)."""
    _, _, avail, alg = run_keys(seed)
    select, train = jax.random.split(jax.random.fold_in(alg, r))
    return jax.random.fold_in(avail, r), select, train


def words(key, n):
    """The documented N uint32 words: ``threefry_2x32(key, [0..N-1])``."""
    return np.asarray(threefry_2x32(key, np.arange(n, dtype=np.uint32)), np.uint64)


def bernoulli_masks(p, n, rounds, seed):
    """``[R, N]`` masks of ``Bernoulli(p)`` (scalar p) in ``simulate(..., seed=seed)``."""
    threshold = int(np.rint(p * 2.0**31))
    return np.stack([(words(round_keys(seed, r)[0], n) >> 1) < threshold for r in range(rounds)])


def uniform_choice(key, available, k):
    """The available clients the documented uniform rule selects (at most k of them)."""
    scores = np.where(available, (words(key, len(available)) >> 8).astype(np.float64), -1.0)
    order = np.lexsort((np.arange(len(available)), -scores))[:k]  # highest first, low index
    return [int(i) for i in order if available[i]]


def batch_rows(key, client, offset, count, steps, batch_size):
    """``[C, B]`` rows of one client, by the documented rule."""
    k = jax.random.fold_in(key, client)
    return offset + np.asarray(jax.random.randint(k, (steps, batch_size), 0, count, np.int32))


def client_update(task, fd, params, client, key, steps, batch_size, lr, mu=0.0):
    """C SGD steps of one client (FedLaAvg Alg. 3 L10-14), returns the flat delta."""
    x0, unravel = ravel_pytree(params)
    rows = batch_rows(key, client, int(fd.offsets[client]), int(fd.counts[client]), steps,
                      batch_size)
    grad = jax.grad(lambda x, batch: task.loss(unravel(x), batch))
    x = x0
    for t in range(steps):
        batch = {k: np.asarray(v)[rows[t]] for k, v in fd.arrays.items()}
        x = x - lr * (grad(x, batch) + mu * (x - x0))
    return np.asarray(x - x0, np.float64)


def fedlaavg(task, fd, masks, seed, K, C, B, lr):
    """Algorithm 2 with the paper's server: latest updates u_i, u = (1/N) sum_i u_i.

    ``masks`` ``[R, N]``: round r's availability. Returns (params, stamps).
    """
    params = task.init(run_keys(seed)[0])
    x, unravel = ravel_pytree(params)
    x = np.asarray(x, np.float64)
    n = fd.num_clients
    latest = np.zeros((n, x.size))
    stamp = np.full(n, -1)
    for r, mask in enumerate(masks):
        _, _, train_key = round_keys(seed, r)
        available = np.flatnonzero(mask)
        chosen = sorted(available, key=lambda i: (stamp[i], i))[:K]  # L6
        for i in chosen:
            latest[i] = client_update(task, fd, unravel(x), i, train_key, C, B, lr)  # L8
            stamp[i] = r  # L7
        x = x + latest.mean(axis=0)  # L9-10
    return unravel(x), stamp


def fedavg(task, fd, masks, seed, K, C, B, lr, mu=0.0, server_lr=1.0):
    """FedAvg/FedProx: K of the available clients uniformly; mean over this round's deltas."""
    params = task.init(run_keys(seed)[0])
    x, unravel = ravel_pytree(params)
    x = np.asarray(x, np.float64)
    for r, mask in enumerate(masks):
        _, select_key, train_key = round_keys(seed, r)
        chosen = uniform_choice(select_key, mask, K)
        if chosen:
            deltas = [client_update(task, fd, unravel(x), i, train_key, C, B, lr, mu)
                      for i in chosen]
            x = x + server_lr * np.mean(deltas, axis=0)
    return unravel(x)
