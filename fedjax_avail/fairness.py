"""Fairness across clients: how evenly the global model serves every client's own test split.

From per-client accuracies ``acc_i`` (the global model on client i's test examples):

* ``client_dissimilarity``: ``100 * std_i(acc_i)`` (population std, in %), the SubTrunc paper's
  metric (its text names no formula; the values it reports fit a standard deviation of per-client
  accuracy, spec ``subtrunc_unionfl.md`` 4.4);
* ``acc_min``, ``acc_max``, ``acc_range`` (max - min);
* ``acc_worst10`` / ``acc_best10``: the mean over the worst / best 10% of clients: N / 10
  rounded, halves up (25 clients: 3), and at least one;
* ``jain``: Jain's index ``(sum acc)^2 / (N sum acc^2)``, 1 when every client is served alike.
"""

from __future__ import annotations

import math

import numpy as np


def fairness_metrics(per_client: np.ndarray) -> dict[str, float]:
    """The fairness metrics (module docstring) of ``[N]`` per-client accuracies."""
    acc = np.asarray(per_client, np.float64)
    if acc.ndim != 1 or acc.size == 0:
        raise ValueError(f"per_client must be a non-empty [N] vector, got shape {acc.shape}")
    ranked = np.sort(acc)
    tenth = max(1, (acc.size + 5) // 10)  # N / 10 rounded half up, in integers
    squares = float(np.sum(acc**2))
    return {
        "client_dissimilarity": float(100.0 * np.std(acc)),
        "acc_min": float(ranked[0]),
        "acc_max": float(ranked[-1]),
        "acc_range": float(ranked[-1] - ranked[0]),
        "acc_worst10": float(ranked[:tenth].mean()),
        "acc_best10": float(ranked[-tenth:].mean()),
        "jain": float(np.sum(acc) ** 2 / (acc.size * squares)) if squares > 0 else math.nan,
    }
