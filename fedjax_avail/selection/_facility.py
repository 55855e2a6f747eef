"""Facility location over client features, maximised greedily (DivFL; SubTrunc and UnionFL).

Clients are points (their gradients); a selected set S covers client i at distance
``min_{j in S} ||g_i - g_j||``. DivFL maximises ``G(S) = Gbar(empty) - sum_i min_{j in S} d_ij``
(spec ``subtrunc_unionfl.md`` 1.3, eq. 9-10) under |S| <= k, candidates only among the
available clients and every client to be covered. Greedy adds, k times, the candidate e with the
largest gain; the constant ``Gbar(empty)`` cancels between candidates, so a step minimises the
coverage cost ``sum_i min(cover_i, d_ie)`` minus any extra gain (SubTrunc's truncated loss term,
UnionFL's penalty). Greedy keeps adding when gains are negative: always k clients when k are
available.

* plain greedy: every candidate at every step; the ``[N, N]`` distances are recomputed at each
  step in column blocks (``[N, BLOCK // N]`` at once), so memory is O(N + BLOCK) and compute
  O(k N^2 P); up to N^2 <= BLOCK they are computed once;
* stochastic greedy (Mirzasoleiman et al. 2015; DivFL's code): each step draws r candidates
  uniformly, without replacement, from the available clients not yet picked, and computes only
  the ``[N, r]`` distances it needs (no N x N matrix).

Distances come from the expansion ``|g_i|^2 + |g_j|^2 - 2 g_i.g_j`` (a matrix product) only
while it is accurate: when clients' gradients differ by delta of their norm, it loses
2 log10(1 / delta) of float32's 7 digits (6 at delta = 1e-3, where greedy picks another set than
exact arithmetic), so a block holding such a pair is computed as direct differences
``||g_i - g_j||`` instead (the difference of two close float32 numbers is exact);
:func:`distances`.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np

BLOCK = 2**22  # elements of one jitted block: [rows, r, CHUNK] differences, [N, columns] distances
CHUNK = 1024  # features summed at a time, so a block's operands stay in cache (15x at P = 6e4)
CANCEL = 1 / 16  # squared distance / (|g_i|^2 + |g_j|^2) below which the expansion is not used
ROWS, COLUMNS = 32768, 16  # the numpy helpers' distance block: [COLUMNS, ROWS] float64


def distances(features: jax.Array, columns: jax.Array) -> jax.Array:
    """``[N, r]`` Euclidean distances between every row of ``features`` ``[N, P]`` and the rows
    ``columns`` ``[r]``, accurate to float32's precision whatever their spread.

    The expansion ``|g_i|^2 + |g_j|^2 - 2 g_i.g_j`` (one matrix product) has a rounding error of
    about ``eps sqrt(P) (|g_i|^2 + |g_j|^2)``: harmless while every squared distance is at least
    ``CANCEL`` times that scale (relative error ~1e-4 at P = 10^4). When some pair (other than a
    client with itself) is closer (near-duplicate gradients, e.g. clients holding the same
    digit), the block is computed as direct differences instead (:func:`direct_distances`,
    exact up to float32 rounding of each term; 2-4x the matrix product's time on a CPU). DivFL's
    code gets the same accuracy from scikit-learn's ``pairwise_distances``, which computes
    float32 input in float64. Under ``vmap`` over runs both branches are computed.
    """
    picked = features[columns]
    norms = jnp.sum(features * features, axis=1)
    scale = norms[:, None] + norms[columns][None, :]
    # HIGHEST: full float32 products (the default is TF32 on recent NVIDIA GPUs, 1e-3 relative)
    sq = scale - 2.0 * jnp.matmul(features, picked.T, precision=jax.lax.Precision.HIGHEST)
    self_pair = jnp.arange(features.shape[0])[:, None] == columns[None, :]
    cancelled = jnp.any((sq < CANCEL * scale) & ~self_pair & (scale > 0))
    d = jax.lax.cond(cancelled, lambda: direct_distances(features, columns),
                     lambda: jnp.sqrt(jnp.maximum(sq, 0.0)))
    return jnp.where(self_pair, 0.0, d)


def direct_distances(features: jax.Array, columns: jax.Array) -> jax.Array:
    """:func:`distances` as direct differences ``sqrt(sum_p (g_ip - g_jp)^2)``: rows in blocks,
    features ``CHUNK`` at a time, at most ``BLOCK`` differences ``[rows, r, CHUNK]`` at once
    (2-4x the matrix product's time on a CPU)."""
    n, p = features.shape
    picked = features[columns]
    r = picked.shape[0]
    width = max(1, min(p, CHUNK))
    rows = max(1, min(n, BLOCK // (r * width)))
    chunks, rest = divmod(p, width)

    def squares(x, start, size):  # [b, P] -> [b, r]: sum over features start ... start + size
        diff = (jax.lax.dynamic_slice_in_dim(x, start, size, 1)[:, None, :]
                - jax.lax.dynamic_slice_in_dim(picked, start, size, 1)[None, :, :])
        return jnp.sum(diff * diff, axis=-1)

    def block(x):  # [b, P] -> [b, r]
        total = jnp.zeros((x.shape[0], r), features.dtype)
        if chunks == 1:
            total = squares(x, 0, width)
        elif chunks > 1:
            total = jax.lax.fori_loop(0, chunks, lambda j, t: t + squares(x, j * width, width),
                                      total)
        if rest:
            total = total + squares(x, chunks * width, rest)
        return jnp.sqrt(total)

    full, left = divmod(n, rows)
    if left == 0 and full == 1:
        d = block(features)
    else:
        d = jax.lax.map(lambda b: block(jax.lax.dynamic_slice_in_dim(features, b * rows, rows)),
                        jnp.arange(full)).reshape(full * rows, r)
        if left:
            d = jnp.concatenate([d, block(features[full * rows:])])
    return jnp.where(jnp.arange(n)[:, None] == columns[None, :], 0.0, d)


def _every_cost(features: jax.Array, cover: jax.Array) -> jax.Array:
    """``[N]`` coverage costs ``sum_i min(cover_i, d_ie)`` of every client e, in column blocks
    of ``[N, BLOCK // N]`` distances."""
    n = features.shape[0]
    width = max(1, min(n, BLOCK // n))
    count = -(-n // width)
    columns = jnp.minimum(jnp.arange(count * width), n - 1).reshape(count, width)
    return jax.lax.map(lambda c: jnp.sum(jnp.minimum(cover[:, None], distances(features, c)),
                                         axis=0), columns).reshape(-1)[:n]


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

    Memory is O(N + BLOCK) besides ``features``: plain greedy recomputes the distances at every
    step, ``BLOCK // N`` columns at a time (O(k N^2 P) compute), unless ``N^2 <= BLOCK``;
    stochastic greedy holds the ``[N, r]`` distances of a step.

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
    small = candidates is None and n * n <= BLOCK  # all N^2 distances at once
    full = distances(features, everyone) if small else None
    carry0 = (jnp.full((n,), jnp.inf, jnp.float32), jnp.zeros((n,), bool),
              jnp.zeros((k,), jnp.int32), jnp.zeros((k,), bool),
              jnp.zeros(()) if extra_init is None else extra_init)

    def step(i, carry):
        cover, taken, picked, valid, extra = carry
        open_ = available & ~taken
        if candidates is None:
            columns, ok, d = everyone, open_, full
            cost = (jnp.sum(jnp.minimum(cover[:, None], d), axis=0) if small
                    else _every_cost(features, cover))
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
        column = distances(features, chosen[None])[:, 0] if d is None else d[:, best]
        cover = jnp.where(good, jnp.minimum(cover, column), cover)
        taken = taken.at[chosen].set(taken[chosen] | good)
        if extra_step is not None:
            extra = jnp.where(good, extra_step(extra, chosen), extra)
        return cover, taken, picked.at[i].set(chosen), valid.at[i].set(good), extra

    _, taken, picked, valid, _ = jax.lax.fori_loop(0, k, step, carry0)
    # Padding slots hold distinct clients that were not picked (a cohort has distinct rows).
    spare = jnp.argsort(taken, stable=True)[:k]
    fill = jnp.cumsum(~valid) - 1
    return jnp.where(valid, picked, spare[jnp.clip(fill, 0, k - 1)]), valid


def _distance_blocks(points: np.ndarray, columns: np.ndarray
                     ) -> Iterator[tuple[int, int, np.ndarray]]:
    """Yields ``(j0, i0, block)``, ``block[a, b] = ||x_{columns[j0 + a]} - x_{i0 + b}||`` float64
    ``[<= COLUMNS, <= ROWS]``, for ``points`` ``[d, N]`` (the features transposed). Two
    ``[COLUMNS, min(ROWS, N)]`` buffers are reused: a block is valid until the next one."""
    dim, n = points.shape
    width = min(ROWS, n)
    buffers = np.empty((2, COLUMNS, width))
    for j0 in range(0, len(columns), COLUMNS):
        picked = points[:, columns[j0:j0 + COLUMNS], None]  # [d, b, 1]
        for i0 in range(0, n, width):
            rows = points[:, None, i0:i0 + width]  # [d, 1, w]
            out, tmp = buffers[:, :picked.shape[1], :rows.shape[2]]
            out.fill(0.0)
            for a, b in zip(picked, rows, strict=True):  # sum_k (x_jk - x_ik)^2, k in order
                np.subtract(a, b, out=tmp)
                np.multiply(tmp, tmp, out=tmp)
                out += tmp
            yield j0, i0, np.sqrt(out, out=out)


def _coverage_costs(points: np.ndarray, cover: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """``[m]`` float64 coverage costs ``sum_i min(cover_i, d_ij)``, j in ``columns`` ``[m]``."""
    cost = np.zeros(len(columns))
    for j0, i0, block in _distance_blocks(points, columns):
        np.minimum(block, cover[None, i0:i0 + block.shape[1]], out=block)
        cost[j0:j0 + len(block)] += block.sum(axis=1)
    return cost


def _distances_to(points: np.ndarray, j: int) -> np.ndarray:
    """``[N]`` float64 distances from client j to every client."""
    column = np.empty(points.shape[1])
    for _, i0, block in _distance_blocks(points, np.array([j])):
        column[i0:i0 + block.shape[1]] = block[0]
    return column


def coverage_value(features: np.ndarray, chosen, constant: float | None = None) -> float:
    """``G(S) = sum_i (C - min_{j in S} d_ij)`` with ``C = max d`` (normalised: G(empty) = 0).

    ``features`` ``[N, d]``, ``chosen`` indices; distances in blocks, as
    :func:`greedy_facility_location` (O(N^2 d) compute for C, O(N d) memory).
    """
    chosen = np.asarray(chosen, np.int64).reshape(-1)
    if len(chosen) == 0:
        return 0.0
    points = np.ascontiguousarray(np.asarray(features, np.float64).T)
    n = points.shape[1]
    c = constant
    if c is None:
        c = max(float(block.max()) for _, _, block in _distance_blocks(points, np.arange(n)))
    nearest = np.full(n, np.inf)
    for _, i0, block in _distance_blocks(points, chosen):
        part = nearest[i0:i0 + block.shape[1]]
        np.minimum(part, block.min(axis=0), out=part)
    return float(np.sum(c - nearest))


def greedy_facility_location(
    features, k: int, available=None, method: str = "plain"
) -> np.ndarray:
    """The k clients plain greedy picks for facility location, in the order picked.

    Euclidean distances between feature rows (direct differences, in float64); every client is
    to be covered by its nearest picked client; candidates only among the available; ties go to
    the lower index. For inspecting what DivFL selects.

    Memory is O(N d), never N x N: each step recomputes the distances, ``[COLUMNS, ROWS]`` at a
    time (O(k N^2 d) compute, about 5 ns a distance at d = 5 on one CPU core). Peak bytes,
    besides ``features`` when it is already float64 (a float64 copy, 8 N d more, otherwise)::

        plain: 8 N (d + 4) + 16 COLUMNS min(N, ROWS)
        lazy:  the same + about 130 N (its heap of Python tuples)

    (8 N d the transposed features; 8 N each the cover, a distance column, the open candidates
    and their costs; two float64 distance buffers). Measured (tracemalloc) at N = 10^5, d = 5,
    k = 5 on a 2-core CPU: plain 14.5 MiB (formula 14.9 MiB) in 266 s; lazy 26.4 MiB in 140 s
    (one pass over the N^2 distances for the first pick, one to refresh every bound for the
    second, few after).

    Args:
      features: ``[N, d]`` client features (e.g. gradients), finite.
      k: how many to pick (at most the number available; fewer are returned otherwise).
      available: ``[N]`` bool (default: all).
      method: ``"plain"`` (every gain at every step) or ``"lazy"`` (Minoux's lazy greedy: gains
        from earlier steps bound later ones, so most are not re-evaluated; same set; one pass
        over the N^2 distances, then O(N d) a re-evaluation).

    Returns:
      ``[m]`` int64 indices, ``m = min(k, #available)``.

    Raises:
      ValueError: a bad argument, or ``features`` holding NaN or Inf (the first such row named).

    Example:
      >>> fa.selection.greedy_facility_location(np.array([[0.0], [1.0], [10.0]]), 2)
      array([1, 2])
    """
    features = np.asarray(features, np.float64)
    if features.ndim != 2:
        raise ValueError(f"features must be [N, d], got shape {features.shape}")
    n = features.shape[0]
    bad = ~np.isfinite(features).all(axis=1)
    if bad.any():
        rows = np.flatnonzero(bad)
        raise ValueError(f"features must be finite: row {rows[0]} holds NaN or Inf "
                         f"({len(rows)} of {n} rows do), e.g. {features[rows[0]][:4].tolist()}")
    del bad
    available = np.ones(n, bool) if available is None else np.asarray(available, bool)
    if available.shape != (n,):
        raise ValueError(f"available must be [N] = [{n}] bools, got shape {available.shape}")
    if not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    if method not in ("plain", "lazy"):
        raise ValueError(f"method must be 'plain' or 'lazy', got {method!r}")
    points = np.ascontiguousarray(features.T)  # [d, N]: a candidate's distances are contiguous
    cover = np.full(n, np.inf)
    picks: list[int] = []
    m = min(k, int(available.sum()))
    if m == 0:
        return np.zeros(0, np.int64)
    pool = np.flatnonzero(available)
    big = 2.0 * float(_distances_to(points, int(pool[0])).max()) * (1 + 1e-12) or 1.0
    current = n * big  # Gbar(S), the coverage cost of the picks so far
    if method == "plain":
        open_ = available.copy()
        for _ in range(m):
            pool = np.flatnonzero(open_)
            costs = _coverage_costs(points, cover, pool)
            # An exact tie may round a hair apart: the lowest index within 1e-9 Gbar(S) of
            # the best, lazy greedy's rule below, so that both pick the same set.
            best = int(pool[np.flatnonzero(costs <= costs.min() + 1e-9 * current)[0]])
            picks.append(best)
            open_[best] = False
            np.minimum(cover, _distances_to(points, best), out=cover)
            current = float(cover.sum())
        return np.asarray(picks, np.int64)
    # Lazy: a max-heap of gains computed at some earlier step. By submodularity an old gain
    # bounds the current one, so the top entry, once recomputed and still on top, is the best.
    # Gains are against Gbar(empty) = N * big, big >= every distance (2 max_i d_i0, by the
    # triangle inequality), so the step-0 gains bound all later ones. Stale entries are
    # recomputed COLUMNS at a time from the top (a fresh gain is a valid bound too).

    def gains(indices: list[int]) -> list[float]:
        return (current - _coverage_costs(points, cover, np.asarray(indices, np.int64))).tolist()

    heap = [(-gain, j, 0)  # (-gain, index, step computed)
            for gain, j in zip(gains(pool.tolist()), pool.tolist(), strict=True)]
    heapq.heapify(heap)
    for step in range(m):
        while heap[0][2] != step:
            top = [heapq.heappop(heap) for _ in range(min(COLUMNS, len(heap)))]
            stale = [j for _, j, stamp in top if stamp != step]
            fresh = dict(zip(stale, gains(stale), strict=True))
            for neg, j, stamp in top:
                heapq.heappush(heap, (neg, j, stamp) if stamp == step else (-fresh[j], j, step))
        neg, j, _ = heapq.heappop(heap)
        # Rounding can put an exact tie's old bound a hair below the fresh gain: every entry
        # within 1e-9 Gbar(S) of the best is refreshed, and the lowest index among the best
        # wins, as in plain greedy's argmin.
        best = -neg
        tol = 1e-9 * current
        tied = [(best, j)]
        while heap and -heap[0][0] >= best - tol:
            neg, other, stamp = heapq.heappop(heap)
            tied.append((-neg if stamp == step else gains([other])[0], other))
        top = max(value for value, _ in tied)
        j = min(index for value, index in tied if value >= top - tol)
        for value, index in tied:
            if index != j:
                heapq.heappush(heap, (-value, index, step))
        picks.append(j)
        np.minimum(cover, _distances_to(points, j), out=cover)
        current = float(cover.sum())
    return np.asarray(picks, np.int64)
