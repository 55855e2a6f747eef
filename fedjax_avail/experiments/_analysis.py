"""Measures of a loss curve: oscillation amplitude and its dominant period."""

from __future__ import annotations

import numpy as np

from fedjax_avail.history import History


def oscillation_amplitude(history: History, window: int, column: str = "train_loss") -> float:
    """``max - min`` of ``column`` over the evaluations in the last ``window`` rounds: rounds
    ``R - window`` to ``R``, the last, both included.

    NaN (not measured) when the run is shorter than two windows, so the last window would still
    hold the start-up phase, or when that window holds fewer than 3 evaluations.
    """
    rounds, values = history["round"], history[column]
    recent = values[rounds >= rounds[-1] - window]
    if rounds[-1] < 2 * window or len(recent) < 3:
        return float("nan")
    return float(np.max(recent) - np.min(recent))


def dominant_period(history: History, column: str = "train_loss", skip: int = 0) -> float:
    """The period (in rounds) of the strongest Fourier component of a detrended curve.

    The first ``skip`` rounds (the initial transient) are dropped, and a linear trend is
    removed before the FFT. The FFT needs evenly spaced evaluations: a row off the grid of the
    median spacing (a run's last round when ``eval_every`` does not divide the rounds) is
    left out, and evaluations spaced unevenly otherwise raise ValueError.
    """
    rounds, values = history["round"], history[column]
    keep = rounds >= skip
    rounds, values = rounds[keep], values[keep]
    spacing = float(np.median(np.diff(rounds)))
    grid = (rounds - rounds[0]) % spacing == 0
    rounds, values = rounds[grid], values[grid]
    if np.any(np.diff(rounds) != spacing):
        raise ValueError(f"dominant_period needs evenly spaced evaluations of {column!r}; got "
                         f"rounds {rounds[:8].tolist()}... (spacing {spacing:g} expected)")
    t = np.arange(len(values))
    detrended = values - np.polyval(np.polyfit(t, values, 1), t)
    power = np.abs(np.fft.rfft(detrended)) ** 2
    freqs = np.fft.rfftfreq(len(values), d=spacing)
    peak = 1 + int(np.argmax(power[1:]))
    return float(1.0 / freqs[peak])
