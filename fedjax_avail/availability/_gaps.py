"""How often a process lets each client in: FedLaAvg's minimal-availability parameter E."""

from __future__ import annotations

import numpy as np

from fedjax_avail._checks import Count, Seed, checked
from fedjax_avail.availability._process import AvailabilityProcess
from fedjax_avail.availability._sample import sample


@checked
def minimal_availability(
    process: AvailabilityProcess, num_clients: Count, steps: Count, seed: Seed = 0
) -> int:
    """The smallest E such that every client is available in every E consecutive sampled steps.

    FedLaAvg's Assumption 4 (P:L56; A5 for rounds, P:L304-310) with parameter E reads
    ``for all i, t: i is available at some step in {t, ..., t + E - 1}``. Over the sampled
    horizon (the masks :func:`sample` returns, i.e. what ``simulate(..., seed=seed)`` sees in
    rounds ``0..steps-1``), only windows lying inside the horizon count, so

        E = 1 + max_i (longest run of consecutive steps in which client i is unavailable),

    counting runs at the start and the end of the horizon too. ``AlwaysOn`` gives 1;
    ``diurnal(labels, D, E)`` gives E + 1 once ``steps >= 2E`` (each client is off for E
    consecutive rounds, spec/fedlaavg.md sec. 4.2); ``HourOfDay(s, hours, r)`` gives
    ``(24 - hours) * r + 1`` once the horizon covers a whole off-window.

    Sentinel: when some client is **never** available in the horizon no E <= ``steps`` works,
    and the function returns ``steps + 1`` (its off-run is the whole horizon). A result
    ``<= steps`` therefore means every client was seen at least once. For random processes
    (Bernoulli, Markov) E grows with the horizon: it bounds this sample, not the process.

    Args:
      process: the availability process.
      num_clients: N.
      steps: the horizon, >= 1.
      seed: the run's seed, as in :func:`sample`.

    Returns:
      E as a Python int in ``1..steps + 1``.

    Example:
      >>> minimal_availability(diurnal(labels, D=1, E=100), 1000, steps=400)
      101
    """
    return longest_gap(sample(process, num_clients, steps, seed)) + 1


def longest_gap(masks: np.ndarray) -> int:
    """``max_i`` of the longest run of False in column i of a ``[T, N]`` bool table.

    One pass over the T rows, vectorised over the N clients (memory ``O(N)`` beyond ``masks``).
    """
    masks = np.asarray(masks, bool)
    if masks.ndim != 2:
        raise ValueError(f"masks must be [T, N], got shape {masks.shape}")
    run = np.zeros(masks.shape[1], np.int64)  # current off-run per client
    longest = np.zeros(masks.shape[1], np.int64)
    for row in masks:
        run = np.where(row, 0, run + 1)
        np.maximum(longest, run, out=longest)
    return int(longest.max(initial=0))
