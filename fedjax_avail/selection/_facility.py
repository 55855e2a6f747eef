"""Facility location over client features, maximised greedily (DivFL; SubTrunc and UnionFL).

Clients are points (their gradients); a selected set S covers client i at distance
``min_{j in S} ||g_i - g_j||``. DivFL maximises ``G(S) = Gbar(empty) - sum_i min_{j in S} d_ij``
(spec ``subtrunc_unionfl.md`` 1.3, eq. 9-10) under |S| <= k, candidates only among the
available clients and every client to be covered. Greedy adds, k times, the candidate e with the
largest gain; the constant ``Gbar(empty)`` cancels between candidates, so a step minimises the
coverage cost ``sum_i min(cover_i, d_ie)`` minus any extra gain (SubTrunc's truncated loss term,
UnionFL's penalty). Greedy keeps adding when gains are negative: always k clients when k are
available.

* plain greedy: every candidate at every step, with the ``[N, N]`` distance matrix (small N);
* stochastic greedy (Mirzasoleiman et al. 2015; DivFL's code): each step draws r candidates
  uniformly, without replacement, from the available clients not yet picked, and computes only
  the ``[N, r]`` distances it needs (no N x N matrix).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np


def distances(features: jax.Array, columns: jax.Array) -> jax.Array:
    """``[N, r]`` Euclidean distances between every row of ``features`` and rows ``columns``."""
    picked = features[columns]
    sq = (jnp.sum(features**2, axis=1)[:, None] + jnp.sum(picked**2, axis=1)[None, :]
          - 2.0 * features @ picked.T)
    d = jnp.sqrt(jnp.maximum(sq, 0.0))
    return jnp.where(jnp.arange(features.shape[0])[:, None] == columns[None, :], 0.0, d)


ExtraGain = Callable[[jax.Array, jax.Array], jax.Array]  # (candidates [r], carry) -> [r]


def greedy(
    key: jax.Array,
    features: jax.Array,
    available: jax.Array,
    k: int,
    candidates: int | None = None,
    extra_gain: ExtraGain | None = None,
    extra_init: jax.Array | None = None,
    extra_step: Callable[[jax.Array, jax.Array], jax.Array] | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Greedy (``candidates=None``) or stochastic greedy facility location; jittable.

    Args:
      key: PRNG key (stochastic greedy's candidate draws).
      features: ``[N, P]`` client features.
      available: ``[N]`` bool, who may be picked.
      k: picks (static).
      candidates: r, candidates per step (static), or None for every available client.
      extra_gain: ``(candidate indices [r], carry) -> [r]`` gain added to each candidate's
        facility-location gain; ``extra_init`` its initial carry and ``extra_step(carry,
        picked index) -> carry`` its update after each pick.

    Returns:
      ``(picked [k] int32 in the order picked, valid [k] bool)``; invalid slots are padding.
    """
    n = features.shape[0]
    everyone = jnp.arange(n)
    full = distances(features, everyone) if candidates is None else None
    carry0 = (jnp.full((n,), jnp.inf, jnp.float32), jnp.zeros((n,), bool),
              jnp.zeros((k,), jnp.int32), jnp.zeros((k,), bool),
              jnp.zeros(()) if extra_init is None else extra_init)

    def step(i, carry):
        cover, taken, picked, valid, extra = carry
        open_ = available & ~taken
        if candidates is None:
            columns, ok = everyone, open_
            d = full
        else:
            scores = jnp.where(open_, jax.random.uniform(jax.random.fold_in(key, i), (n,)), -1.0)
            _, columns = jax.lax.top_k(scores, min(candidates, n))
            ok = open_[columns]
            d = distances(features, columns)
        cost = jnp.sum(jnp.minimum(cover[:, None], d), axis=0)  # Gbar(S + e)
        value = -cost
        if extra_gain is not None:
            value = value + extra_gain(columns, extra)
        best = jnp.argmax(jnp.where(ok, value, -jnp.inf))
        chosen, good = columns[best], jnp.any(ok)
        cover = jnp.where(good, jnp.minimum(cover, d[:, best]), cover)
        taken = taken.at[chosen].set(taken[chosen] | good)
        if extra_step is not None:
            extra = jnp.where(good, extra_step(extra, chosen), extra)
        return cover, taken, picked.at[i].set(chosen), valid.at[i].set(good), extra

    _, taken, picked, valid, _ = jax.lax.fori_loop(0, k, step, carry0)
    # Padding slots hold distinct clients that were not picked (a cohort has distinct rows).
    spare = jnp.argsort(taken, stable=True)[:k]
    fill = jnp.cumsum(~valid) - 1
    return jnp.where(valid, picked, spare[jnp.clip(fill, 0, k - 1)]), valid


def coverage_value(features: np.ndarray, chosen, constant: float | None = None) -> float:
    """``G(S) = sum_i (C - min_{j in S} d_ij)`` with ``C = max d`` (normalised: G(empty) = 0)."""
    features = np.asarray(features, np.float64)
    d = np.linalg.norm(features[:, None, :] - features[None, :, :], axis=-1)
    c = d.max() if constant is None else constant
    if len(chosen) == 0:
        return 0.0
    return float(np.sum(c - d[:, list(chosen)].min(axis=1)))


def greedy_facility_location(
    features, k: int, available=None, method: str = "plain"
) -> np.ndarray:
    """The k clients plain greedy picks for facility location, in the order picked.

    Euclidean distances between feature rows; every client is to be covered by its nearest
    picked client; candidates only among the available. For inspecting what DivFL selects.

    Args:
      features: ``[N, d]`` client features (e.g. gradients).
      k: how many to pick (at most the number available; fewer are returned otherwise).
      available: ``[N]`` bool (default: all).
      method: ``"plain"`` (every gain at every step) or ``"lazy"`` (Minoux's lazy greedy: gains
        from earlier steps bound later ones, so most are not re-evaluated; same set).

    Returns:
      ``[m]`` int64 indices, ``m = min(k, #available)``.
    """
    features = np.asarray(features, np.float64)
    if features.ndim != 2:
        raise ValueError(f"features must be [N, d], got shape {features.shape}")
    n = features.shape[0]
    available = np.ones(n, bool) if available is None else np.asarray(available, bool)
    if available.shape != (n,):
        raise ValueError(f"available must be [N] = [{n}] bools, got shape {available.shape}")
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    if method not in ("plain", "lazy"):
        raise ValueError(f"method must be 'plain' or 'lazy', got {method!r}")
    d = np.linalg.norm(features[:, None, :] - features[None, :, :], axis=-1)
    cover = np.full(n, np.inf)
    picks: list[int] = []
    pool = [int(i) for i in np.flatnonzero(available)]
    m = min(k, len(pool))
    if method == "plain":
        for _ in range(m):
            cost = np.minimum(cover[:, None], d[:, pool]).sum(axis=0)
            best = pool[int(np.argmin(cost))]
            picks.append(best)
            pool.remove(best)
            cover = np.minimum(cover, d[:, best])
        return np.asarray(picks, np.int64)
    # Lazy: a max-heap of gains computed at some earlier step. By submodularity an old gain
    # bounds the current one, so the top entry, once recomputed and still on top, is the best.
    # Gains are against Gbar(empty) = N * big, a constant larger than any coverage cost.
    big = d.max() * n + 1.0
    current = n * big  # Gbar(S), the coverage cost of the picks so far
    heap = [(-(current - d[:, j].sum()), j, 0) for j in pool]  # (-gain, index, step computed)
    heapq.heapify(heap)
    for step in range(m):
        while True:
            neg, j, stamp = heapq.heappop(heap)
            if stamp == step:
                break
            fresh = current - np.minimum(cover, d[:, j]).sum()
            heapq.heappush(heap, (-fresh, j, step))
        # Rounding can put an exact tie's old bound a hair below the fresh gain: every entry
        # within a relative 1e-9 of the best is refreshed, and the lowest index among the best
        # wins, as in plain greedy's argmin.
        best = -neg
        tol = 1e-9 * max(1.0, abs(best))
        tied = [(best, j)]
        while heap and -heap[0][0] >= best - tol:
            neg, other, stamp = heapq.heappop(heap)
            fresh = -neg if stamp == step else current - np.minimum(cover, d[:, other]).sum()
            tied.append((fresh, other))
        top = max(gain for gain, _ in tied)
        j = min(index for gain, index in tied if gain >= top - tol)
        for gain, index in tied:
            if index != j:
                heapq.heappush(heap, (-gain, index, step))
        picks.append(j)
        cover = np.minimum(cover, d[:, j])
        current = cover.sum()
    return np.asarray(picks, np.int64)
