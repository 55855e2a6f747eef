"""Figures laid out like the FedLaAvg paper's: training loss (Fig. 4) and test accuracy (Fig. 8)."""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fedjax_avail._io import atomic_write_bytes
from fedjax_avail.history import History, on_shared_rounds

if TYPE_CHECKING:  # imported when drawing: matplotlib takes 0.6 s to import
    from matplotlib.figure import Figure

_X_LABELS = {"round": "communication round (server update)", "virtual_time": "virtual time"}


def plot_histories(
    histories: Mapping[str, History], path: str | Path | None = None, title: str = "",
    x: str = "round", spread: Mapping[str, Sequence[History]] | None = None,
    table: Sequence[str] = (),
    styles: Mapping[str, Mapping[str, object]] | None = None,
):
    """Draws training loss (log scale) and, when recorded, test accuracy against ``x``; the
    legend (and ``table``) stand in a panel of their own to the right, so they cover no curve.

    Args:
      histories: curve label -> its :class:`History` (the mean over seeds: one line each).
      path: where to write a PNG (atomically); None only returns the figure.
      title: the figure's title (:func:`run_title` builds one from a run's settings), wrapped
        to the figure's width.
      x: the history column on the x axis: ``"round"`` or ``"virtual_time"`` (histories
        without it are left out); round 0 is drawn on either, at virtual time 0.
      spread: curve label -> its per-seed histories; a curve with two or more gets a band
        (``fill_between``, alpha 0.2) from their minimum to their maximum at each
        evaluation, drawn at the mean's ``x``.
      table: lines of text above the legend's entries (e.g. what each label's run set).
      styles: curve label -> matplotlib line properties (``color``, ``linestyle``), e.g. a
        colour per algorithm and a line style per run compared.

    Returns:
      the matplotlib ``Figure``; ``figure.axes`` are the loss axes, the accuracy axes (when
      recorded) and the legend panel.
    """
    histories = {name: h for name, h in histories.items() if x in h.columns}
    columns = ["train_loss"]
    if any("test_accuracy" in h.columns for h in histories.values()):
        columns.append("test_accuracy")
    side = 3.0 if table or max(map(len, histories), default=0) > 16 else 1.8
    width = 4.6 * len(columns) + side
    height = max(4.2, 1.2 + 0.19 * (len(histories) + len(table)))  # the legend fits
    fig, axes = new_figure(path, 1, len(columns) + 1, figsize=(width, height),
                           width_ratios=[4.6] * len(columns) + [side])
    axes = list(axes[0])
    panel = axes.pop()
    for name, history in histories.items():
        runs = [h for h in (spread or {}).get(name, ()) if x in h.columns]
        for ax, column in zip(axes, columns, strict=True):
            if column in history.columns:
                _curve(ax, name, history, runs, x, column, (styles or {}).get(name, {}))
    label = _X_LABELS.get(x, x)
    axes[0].set(xlabel=label, ylabel="training loss", yscale="log")
    if len(axes) > 1:
        axes[1].set(xlabel=label, ylabel="test accuracy")
    for ax in axes:
        ax.grid(alpha=0.3)
    _side_panel(panel, axes, table)
    fig.suptitle(wrap_title(title, width), fontsize=11)
    fig.tight_layout()
    if path is not None:
        save_png(fig, path)
    return fig


def _side_panel(side, axes, table: Sequence[str]) -> None:
    """The legend of every curve drawn on ``axes`` (each label once), ``table`` as its title."""
    side.axis("off")
    handles: dict[str, object] = {}
    for ax in axes:
        for handle, text in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(text, handle)
    legend = side.legend(handles.values(), handles.keys(), loc="upper left", fontsize=8,
                         frameon=False, borderaxespad=0, title="\n".join(table) or None,
                         title_fontsize=8, alignment="left")
    if table:
        legend.get_title().set_family("monospace")


def wrap_title(title: str, width_inches: float) -> str:
    """``title`` broken into lines that fit a figure ``width_inches`` wide at 11 points."""
    import textwrap

    return "\n".join(textwrap.wrap(title, max(30, int(width_inches * 12)))) if title else ""


def _curve(ax, name: str, mean: History, runs: Sequence[History], x: str, column: str,
           style: Mapping[str, object]) -> None:
    """One curve's mean line of ``column`` (in ``style``), and with two or more ``runs``
    (seeds) their min-max band in the line's colour. A mean of one row (seeds stopped by a
    time budget share only round 0 when they stop before their next evaluation) is drawn as a
    point, which a line of one row would not show."""
    xs = _x_values(mean, x)
    point = {"marker": "o", "ms": 4} if len(xs) == 1 else {}
    (line,) = ax.plot(xs, mean[column], label=name, lw=1.2, **{**point, **style})
    if len(runs) < 2:
        return
    shared = on_shared_rounds(runs)  # the rounds every seed recorded, as mean_history's
    length = min(len(xs), len(shared[0]))
    values = np.stack([np.asarray(run[column][:length], float) for run in shared])
    ax.fill_between(xs[:length], values.min(0), values.max(0), color=line.get_color(),
                    alpha=0.2, lw=0)


def _x_values(history: History, x: str) -> np.ndarray:
    """The x values of a history: a virtual time that was not recorded (round 0 of a run
    without a clock) is 0 at round 0."""
    values = np.asarray(history[x], float)
    if x == "virtual_time" and "round" in history.columns:
        values = np.where(np.isnan(values) & (np.asarray(history["round"]) == 0), 0.0, values)
    return values


def run_title(name: str, algorithms: Iterable[str], seeds: int) -> str:
    """A figure title from what was run, e.g. ``"fedlaavg-mnist: fedavg, fedlaavg; 2 seeds"``.

    Args:
      name: the experiment (or sweep) name.
      algorithms: the names of the algorithms drawn, in order.
      seeds: how many seeds each was run with.
    """
    return f"{name}: {', '.join(algorithms)}; {seeds} seed{'s' if seeds != 1 else ''}"


def new_figure(path: str | Path | None, rows: int, columns: int, figsize: tuple[float, float],
               width_ratios: Sequence[float] | None = None) -> tuple[Figure, np.ndarray]:
    """A figure and its axes.

    With no ``path`` (a notebook), pyplot's, which the notebook shows. With a ``path`` (a file
    to write), a standalone ``matplotlib.figure.Figure``: neither pyplot's list of figures nor
    the user's backend is touched (a notebook keeps drawing inline after a run wrote its PNGs).

    Args:
      path: where the figure will be written (:func:`save_png`), or None.
      rows, columns: the grid of axes.
      figsize: (width, height) in inches.
      width_ratios: the columns' relative widths (None: equal).

    Returns:
      ``(figure, [rows, columns] array of Axes)``.
    """
    if path is None:
        import matplotlib.pyplot as plt

        return plt.subplots(rows, columns, figsize=figsize, squeeze=False,
                            width_ratios=width_ratios)
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    return fig, fig.subplots(rows, columns, squeeze=False, width_ratios=width_ratios)


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
