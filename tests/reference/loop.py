"""Plain per-client Python loops of the algorithms, written from the papers' boxes.

No vmap, no scan, no buffers: one client at a time, numpy on the server. They reuse only the
library's random streams (availability masks, selection draws for uniform sampling, per-client
batch rows) so that the two can be compared number for number.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.flatten_util import ravel_pytree

import fedjax_avail as fa
from fedjax_avail import _keys


def _client_update(task, fd, params, client, key, steps, batch_size, lr, mu=0.0):
    """C SGD steps of one client (FedLaAvg Alg. 3 L10-14), returns the flat delta."""
    x0, unravel = ravel_pytree(params)
    rows = fa.data.sample_rows(
        key, np.array([client], np.int32), fd.offsets[[client]], fd.counts[[client]],
        steps, batch_size,
    )[0]
    grad = jax.grad(lambda x, batch: task.loss(unravel(x), batch))
    x = x0
    for t in range(steps):
        batch = {k: v[np.asarray(rows[t])] for k, v in fd.arrays.items()}
        x = x - lr * (grad(x, batch) + mu * (x - x0))
    return np.asarray(x - x0, np.float64)


def _round_keys(keys, r):
    round_key = _keys.algorithm_key(keys, r)
    select_key, train_key = jax.random.split(round_key)
    return select_key, train_key


def fedlaavg(task, fd, availability, rounds, seed, K, C, B, lr):
    """Algorithm 2 with the paper's server: latest updates u_i, u = (1/N) sum_i u_i."""
    keys = _keys.run_keys(seed)
    params = task.init(keys.params)
    x, unravel = ravel_pytree(params)
    x = np.asarray(x, np.float64)
    n = fd.num_clients
    masks = fa.availability.sample(availability, n, rounds, seed)
    latest = np.zeros((n, x.size))
    stamp = np.full(n, -1)
    for r in range(rounds):
        _, train_key = _round_keys(keys, r)
        available = np.flatnonzero(masks[r])
        chosen = sorted(available, key=lambda i: (stamp[i], i))[:K]  # L6
        for i in chosen:
            latest[i] = _client_update(task, fd, unravel(x), i, train_key, C, B, lr)  # L8
            stamp[i] = r  # L7
        x = x + latest.mean(axis=0)  # L9-10
    return unravel(x), stamp


def fedavg(task, fd, availability, rounds, seed, K, C, B, lr, mu=0.0, server_lr=1.0):
    """FedAvg/FedProx with the library's uniform draws; mean over this round's participants."""
    keys = _keys.run_keys(seed)
    params = task.init(keys.params)
    x, unravel = ravel_pytree(params)
    x = np.asarray(x, np.float64)
    masks = fa.availability.sample(availability, fd.num_clients, rounds, seed)
    for r in range(rounds):
        select_key, train_key = _round_keys(keys, r)
        cohort, valid = fa.selection.uniform(select_key, masks[r], K)
        chosen = np.asarray(cohort)[np.asarray(valid)]
        assert set(chosen) <= set(np.flatnonzero(masks[r]))
        if len(chosen):
            deltas = [_client_update(task, fd, unravel(x), i, train_key, C, B, lr, mu)
                      for i in chosen]
            x = x + server_lr * np.mean(deltas, axis=0)
    return unravel(x)
