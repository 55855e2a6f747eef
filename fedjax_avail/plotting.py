"""Figures laid out like the FedLaAvg paper's: training loss (Fig. 4) and test accuracy (Fig. 8)."""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fedjax_avail._io import atomic_write_bytes
from fedjax_avail.history import History

if TYPE_CHECKING:  # imported when drawing: matplotlib takes 0.6 s to import
    from matplotlib.figure import Figure

_X_LABELS = {"round": "communication round (server update)", "virtual_time": "virtual time"}


def plot_histories(
    histories: Mapping[str, History], path: str | Path | None = None, title: str = "",
    x: str = "round", spread: Mapping[str, Sequence[History]] | None = None,
):
    """Draws training loss (log scale) and, when recorded, test accuracy against ``x``.

    Args:
      histories: algorithm name -> its :class:`History` (the mean over seeds: one line each).
      path: where to write a PNG (atomically); None only returns the figure.
      title: the figure's title (:func:`run_title` builds one from a run's settings).
      x: the history column on the x axis: ``"round"`` or ``"virtual_time"`` (histories
        without it are left out).
      spread: algorithm name -> its per-seed histories; an algorithm with two or more gets a
        band (``fill_between``, alpha 0.2) from their minimum to their maximum at each
        evaluation, drawn at the mean's ``x``.

    Returns:
      the matplotlib ``Figure``.
    """
    histories = {name: h for name, h in histories.items() if x in h.columns}
    columns = ["train_loss"]
    if any("test_accuracy" in h.columns for h in histories.values()):
        columns.append("test_accuracy")
    fig, axes = new_figure(path, 1, len(columns), figsize=(11 if len(columns) == 2 else 6, 4))
    axes = list(axes[0])
    for name, history in histories.items():
        runs = [h for h in (spread or {}).get(name, ()) if x in h.columns]
        for ax, column in zip(axes, columns, strict=True):
            if column in history.columns:
                _curve(ax, name, history, runs, x, column)
    label = _X_LABELS.get(x, x)
    axes[0].set(xlabel=label, ylabel="training loss", yscale="log")
    if len(axes) > 1:
        axes[1].set(xlabel=label, ylabel="test accuracy")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle(title)
    fig.tight_layout()
    if path is not None:
        save_png(fig, path)
    return fig


def _curve(ax, name: str, mean: History, runs: Sequence[History], x: str, column: str) -> None:
    """One algorithm's mean line of ``column``, and with two or more ``runs`` (seeds) their
    min-max band in the line's colour."""
    start = 0 if x == "round" else 1  # round 0 has no virtual time
    (line,) = ax.plot(mean[x][start:], mean[column][start:], label=name, lw=1.2)
    if len(runs) < 2:
        return
    length = min(len(run[column]) for run in runs)
    values = np.stack([np.asarray(run[column][:length], float) for run in runs])
    ax.fill_between(np.asarray(mean[x][:length], float)[start:], values.min(0)[start:],
                    values.max(0)[start:], color=line.get_color(), alpha=0.2, lw=0)


def run_title(name: str, algorithms: Iterable[str], seeds: int) -> str:
    """A figure title from what was run, e.g. ``"fedlaavg-mnist: fedavg, fedlaavg; 2 seeds"``.

    Args:
      name: the experiment (or sweep) name.
      algorithms: the names of the algorithms drawn, in order.
      seeds: how many seeds each was run with.
    """
    return f"{name}: {', '.join(algorithms)}; {seeds} seed{'s' if seeds != 1 else ''}"


def new_figure(path: str | Path | None, rows: int, columns: int, figsize: tuple[float, float]
               ) -> tuple[Figure, np.ndarray]:
    """A figure and its axes.

    With no ``path`` (a notebook), pyplot's, which the notebook shows. With a ``path`` (a file
    to write), a standalone ``matplotlib.figure.Figure``: neither pyplot's list of figures nor
    the user's backend is touched (a notebook keeps drawing inline after a run wrote its PNGs).

    Args:
      path: where the figure will be written (:func:`save_png`), or None.
      rows, columns: the grid of axes.
      figsize: (width, height) in inches.

    Returns:
      ``(figure, [rows, columns] array of Axes)``.
    """
    if path is None:
        import matplotlib.pyplot as plt

        return plt.subplots(rows, columns, figsize=figsize, squeeze=False)
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    return fig, fig.subplots(rows, columns, squeeze=False)


def save_png(fig, path: str | Path, dpi: int = 120) -> None:
    """Writes a figure as PNG atomically; closes it if pyplot holds it."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    atomic_write_bytes(path, buffer.getvalue())
    if fig.canvas.manager is not None:  # one of pyplot's figures
        import matplotlib.pyplot as plt

        plt.close(fig)


def plot_grid(
    panels: Mapping[str, Mapping[str, History]], path: str | Path, title: str = ""
) -> None:
    """One column per panel (a setting of a sweep): training loss on top, test accuracy below.

    Args:
      panels: panel label -> (algorithm name -> :class:`History`).
      path: where to write the PNG (atomically).
      title: the figure's title.
    """
    fig, axes = new_figure(path, 2, len(panels), figsize=(3.6 * len(panels), 6.4))
    for column, (label, histories) in enumerate(panels.items()):
        top, bottom = axes[0, column], axes[1, column]
        for name, history in histories.items():
            top.plot(history["round"], history["train_loss"], label=name, lw=1.0)
            if "test_accuracy" in history.columns:
                bottom.plot(history["round"], history["test_accuracy"], label=name, lw=1.0)
        top.set(title=label, yscale="log", xlabel="round", ylabel="training loss")
        bottom.set(xlabel="round", ylabel="test accuracy")
        for ax in (top, bottom):
            ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    save_png(fig, path, dpi=110)
