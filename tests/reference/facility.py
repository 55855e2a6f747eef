"""Plain greedy facility location in float64, written from the definition (DivFL eq. 9-10).

Nothing here calls ``fedjax_avail``: every distance is ``sqrt(fsum((x_i - x_j)^2))`` over Python
floats and every coverage cost an ``fsum``, so a cancellation or blocking bug in the library
shows up as a mismatch instead of being shared by both sides.
"""

from __future__ import annotations

import math


def distance_table(features) -> list[list[float]]:
    """``d[i][j] = ||x_i - x_j||`` for ``features`` ``[N, d]`` (any nested sequence)."""
    rows = [[float(v) for v in row] for row in features]
    return [[math.sqrt(math.fsum((a - b) ** 2 for a, b in zip(x, y, strict=True))) for y in rows]
            for x in rows]


def greedy(features, k: int, available=None) -> tuple[list[int], float]:
    """The k picks of plain greedy (lowest index on ties) and the smallest relative margin
    between the best and the second-best candidate over the steps (inf with one candidate).

    A step picks the available, unpicked e minimising ``sum_i min(cover_i, d_ie)``.
    """
    d = distance_table(features)
    n = len(d)
    available = [True] * n if available is None else [bool(a) for a in available]
    cover = [math.inf] * n
    picks: list[int] = []
    margin = math.inf
    for _ in range(min(k, sum(available))):
        costs = {e: math.fsum(min(cover[i], d[i][e]) for i in range(n))
                 for e in range(n) if available[e] and e not in picks}
        ranked = sorted(costs, key=lambda e: (costs[e], e))
        best = ranked[0]
        if len(ranked) > 1:
            gap = costs[ranked[1]] - costs[best]
            margin = min(margin, gap / max(costs[best], 1e-300))
        picks.append(best)
        cover = [min(c, d[i][best]) for i, c in enumerate(cover)]
    return picks, margin


def objective_greedy(features, k: int, extra, divisor: float = 1.0,
                     available=None) -> tuple[list[int], float]:
    """Plain greedy on ``W(S) = G(S) / divisor + extra(S)``, written from the definitions:
    ``G(S) = sum_i (C - min_{j in S} d_ij)``, C the largest distance (eq. 9-10), and
    ``extra`` a set function of the list of picks (SubTrunc's ``lam * min(b, F(S))``, eq. 11-12;
    UnionFL's ``-mu |S cap U|``, eq. 14). Each step adds the available, unpicked e with the
    largest ``W(S + e) - W(S)`` (lowest index on ties).

    Returns the picks and the smallest margin over the steps between the best gain and the
    next lower one, relative to the largest ``|W(S + e)|`` of the step (inf if none is lower).
    Exact ties of identical clients are not margins: they go to the lowest index on both sides.
    An exact tie of distinct clients is a margin of 0: float32 sums in another order break it
    either way (two mutual nearest neighbours each covering the other, the rest covered
    already: ``W`` is the same sum in another order).
    """
    d = distance_table(features)
    n = len(d)
    c = max(map(max, d))
    available = [True] * n if available is None else [bool(a) for a in available]

    def value(picks: list[int]) -> float:
        g = math.fsum(c - min(d[i][j] for j in picks) for i in range(n)) if picks else 0.0
        return g / divisor + extra(picks)

    picks: list[int] = []
    margin = math.inf
    for _ in range(min(k, sum(available))):
        now = value(picks)
        values = {e: value(picks + [e]) for e in range(n) if available[e] and e not in picks}
        ranked = sorted(values, key=lambda e: (-(values[e] - now), e))
        lower = [values[e] for e in ranked if values[e] < values[ranked[0]]]
        if any(values[e] == values[ranked[0]] and d[e][ranked[0]] > 0 for e in ranked[1:]):
            margin = 0.0
        elif lower:
            gap = values[ranked[0]] - lower[0]
            margin = min(margin, gap / max(max(abs(v) for v in values.values()), 1e-300))
        picks.append(ranked[0])
    return picks, margin
