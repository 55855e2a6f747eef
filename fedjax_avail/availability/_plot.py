"""A picture of an availability process: the ``[steps, N]`` mask as an image."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedjax_avail._checks import Count, Seed, checked
from fedjax_avail.availability._combine import Combined
from fedjax_avail.availability._gaps import longest_gap
from fedjax_avail.availability._process import AvailabilityProcess
from fedjax_avail.availability._sample import sample
from fedjax_avail.plotting import new_figure, save_png


def _name(process) -> str:
    if isinstance(process, Combined):
        return f"{process.mode}_of({', '.join(_name(p) for p in process.processes)})"
    return type(process).__name__


def _client_order(sort_by, masks: np.ndarray) -> np.ndarray:
    num_clients = masks.shape[1]
    if sort_by is None:
        return np.arange(num_clients)
    if isinstance(sort_by, str):
        if sort_by != "share":
            raise ValueError(f"sort_by must be None, 'share' or an [N] array of keys, got "
                             f"{sort_by!r}")
        return np.argsort(-masks.mean(axis=0), kind="stable")  # most available first
    keys = np.asarray(sort_by)
    if keys.shape != (num_clients,):
        raise ValueError(f"sort_by must have one key per client, shape ({num_clients},), got "
                         f"{keys.shape}")
    return np.argsort(keys, kind="stable")


@checked
def plot_availability(
    process: AvailabilityProcess,
    num_clients: Count,
    steps: Count,
    seed: Seed = 0,
    path: str | Path | None = None,
    sort_by: str | np.ndarray | None = None,
):
    """Draws the masks of rounds ``0..steps-1`` (:func:`sample`): clients on y, steps on x.

    A dark cell is an available (client, step). The title gives the process, the mean share of
    available clients and E from :func:`minimal_availability` over this horizon.

    Args:
      process: the availability process.
      num_clients: N (one image row per client: keep N to a few thousand for a legible plot).
      steps: the horizon, >= 1.
      seed: the run's seed, as in :func:`sample`.
      path: where to write a PNG (atomically; pyplot and its backend are left alone); None
        only returns the figure.
      sort_by: client order from the bottom row up: None (client index), ``"share"`` (most
        available first) or ``[N]`` keys sorted ascending, stably (labels, start hours, ...).

    Returns:
      the matplotlib ``Figure``.

    Raises:
      ValueError: a bad ``sort_by`` (before plotting), or what :func:`sample` raises.

    Example:
      >>> plot_availability(HourOfDay(start, hours=8), 200, 96, path="hours.png", sort_by=start)
    """
    masks = sample(process, num_clients, steps, seed)
    order = _client_order(sort_by, masks)
    fig, axes = new_figure(path, 1, 1, figsize=(8, 4.5))
    ax = axes[0, 0]
    ax.imshow(masks[:, order].T, aspect="auto", interpolation="nearest", cmap="Greys",
              vmin=0, vmax=1, origin="lower")
    ax.set(xlabel="step (round)", ylabel="client" + ("" if sort_by is None else " (sorted)"))
    ax.set_title(f"{_name(process)}: {masks.mean():.1%} available on average, "
                 f"E = {longest_gap(masks) + 1} over {steps} steps", fontsize=10)
    fig.tight_layout()
    if path is not None:
        save_png(fig, path)
    return fig
