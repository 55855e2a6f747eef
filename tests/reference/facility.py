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
