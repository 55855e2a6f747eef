"""Figures laid out like the FedLaAvg paper's: training loss (Fig. 4) and test accuracy (Fig. 8)."""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path

from fedjax_avail._io import atomic_write_bytes
from fedjax_avail.history import History

_X_LABELS = {"round": "communication round (server update)", "virtual_time": "virtual time"}


def plot_histories(
    histories: Mapping[str, History], path: str | Path | None = None, title: str = "",
    x: str = "round",
):
    """Draws training loss (log scale) and, when recorded, test accuracy against ``x``.

    Args:
      histories: algorithm name -> its :class:`History`.
      path: where to write a PNG (atomically); None only returns the figure.
      title: the figure's title.
      x: the history column on the x axis: ``"round"`` or ``"virtual_time"`` (histories
        without it are left out).

    Returns:
      the matplotlib ``Figure``.
    """
    import matplotlib

    if path is not None:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    histories = {name: h for name, h in histories.items() if x in h.columns}
    with_test = any("test_accuracy" in h.columns for h in histories.values())
    fig, axes = plt.subplots(1, 2 if with_test else 1, figsize=(11 if with_test else 6, 4))
    axes = axes if with_test else [axes]
    for name, history in histories.items():
        start = 0 if x == "round" else 1  # round 0 has no virtual time
        axes[0].plot(history[x][start:], history["train_loss"][start:], label=name, lw=1.2)
        if with_test and "test_accuracy" in history.columns:
            axes[1].plot(history[x][start:], history["test_accuracy"][start:], label=name,
                         lw=1.2)
    label = _X_LABELS.get(x, x)
    axes[0].set(xlabel=label, ylabel="training loss", yscale="log")
    if with_test:
        axes[1].set(xlabel=label, ylabel="test accuracy")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle(title)
    fig.tight_layout()
    if path is not None:
        save_png(fig, path)
    return fig


def save_png(fig, path: str | Path, dpi: int = 120) -> None:
    """Writes a figure as PNG atomically and closes it."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    atomic_write_bytes(path, buffer.getvalue())
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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(panels), figsize=(3.6 * len(panels), 6.4), squeeze=False)
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
