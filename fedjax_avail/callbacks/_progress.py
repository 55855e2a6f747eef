"""The progress display of a run: rounds/s and ETA measured on the rounds themselves.

The rate and the ETA come from the engine's own round time (compilation and evaluation
excluded), so the first estimate is not thrown off by a long compile; until the first chunk
has run the display says "compiling". On a terminal it is a tqdm bar; when stderr is not a
terminal (a log file, CI), one plain line is written at most every ``interval`` seconds and at
the end, instead of a stream of carriage returns.
"""

from __future__ import annotations

import sys
import time

import numpy as np
from tqdm.auto import tqdm

from fedjax_avail.callbacks._callback import Callback
from fedjax_avail.run import Run


class Progress:
    """Progress over ``total`` rounds, starting at ``initial``.

    Args:
      total: rounds of the run.
      initial: rounds already done (a resumed run).
      desc: a label (the algorithm).
      enabled: show anything at all.
      interval: seconds between lines when stderr is not a terminal.
    """

    def __init__(self, total: int, initial: int, desc: str | None, enabled: bool,
                 interval: float = 30.0):
        self.total, self.done, self.desc = total, initial, desc or "run"
        self.enabled, self.interval = enabled, interval
        self.tty = enabled and sys.stderr.isatty()
        self._last_line = time.perf_counter()
        self._unprinted: str | None = None  # the latest line not printed yet (no terminal)
        self._bar = tqdm(total=total, initial=initial, desc=desc, unit="round", mininterval=1.0,
                         bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} "
                                    "[{elapsed}{postfix}]") if self.tty else None

    def update(self, rounds: int, run_seconds: float, ran: int, train_loss: float | None,
               budget_done: float | None = None):
        """``rounds`` more done; ``run_seconds`` the round time of the ``ran`` rounds so far;
        ``budget_done`` the share of a virtual-time budget reached (the ETA is then the sooner
        of the rounds' and the budget's)."""
        if not self.enabled:
            return
        self.done += rounds
        rate = ran / run_seconds if run_seconds > 0 else float("nan")
        eta = (self.total - self.done) / rate if rate == rate and rate > 0 else float("nan")
        if budget_done is not None and budget_done > 0:
            eta = min(eta, run_seconds * max(1.0 - budget_done, 0.0) / budget_done)
        fields = {"rounds/s": f"{rate:.1f}", "ETA": _duration(eta)}
        if budget_done is not None:
            fields["budget"] = f"{min(budget_done, 1.0):.0%}"
        if train_loss is not None:
            fields["train_loss"] = f"{train_loss:.4f}"
        if self._bar is not None:
            self._bar.update(rounds)
            self._bar.set_postfix(fields, refresh=True)
            return
        text = ", ".join(f"{k} {v}" for k, v in fields.items())
        self._unprinted = f"{self.desc}: {self.done}/{self.total} rounds, {text}"
        if time.perf_counter() - self._last_line >= self.interval or self.done >= self.total:
            self._print()

    def _print(self) -> None:
        print(self._unprinted, file=sys.stderr, flush=True)
        self._last_line, self._unprinted = time.perf_counter(), None

    def compiling(self) -> None:
        """Says that the run is compiling (its evaluators, an algorithm's pass before round 0,
        the first chunk of rounds): no rate is known yet."""
        if self._bar is not None:
            self._bar.set_postfix_str("compiling", refresh=True)
        elif self.enabled:
            print(f"{self.desc}: compiling ({self.done}/{self.total} rounds done)",
                  file=sys.stderr, flush=True)

    def close(self) -> None:
        """Ends the display; without a terminal, the last line if a run that ended early
        (its budget, a stop) has not printed it."""
        if self._bar is not None:
            self._bar.close()
        elif self._unprinted is not None:
            self._print()


class ProgressDisplay(Callback):
    """:class:`Progress` driven by the run: "compiling" at the start, then the rounds/s, ETA
    and the latest training loss after every chunk; with a virtual-time budget also the share
    of it reached (by the run furthest behind), which the ETA then follows."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._progress: Progress | None = None
        self._loss: float | None = None

    def on_run_start(self, run: Run) -> None:
        self._progress = Progress(run.rounds, run.done, run.desc, self.enabled)
        if not run.complete:
            self._progress.compiling()

    def on_evaluation(self, run: Run, rows: list[dict[str, float] | None]) -> None:
        losses = [row["train_loss"] for row in rows if row is not None]  # the runs' mean
        self._loss = float(np.mean(losses)) if losses else self._loss

    def on_chunk_end(self, run: Run, metrics: dict[str, np.ndarray]) -> None:
        length = len(next(iter(metrics.values())))
        budget_done = None
        if run.max_virtual_time is not None and len(metrics["virtual_time"]):
            budget_done = float(np.min(metrics["virtual_time"][-1])) / run.max_virtual_time
        self._progress.update(length, run.timing["run"], run.done - run.started_at, self._loss,
                              budget_done)

    def on_run_end(self, run: Run) -> None:
        if self._progress is not None:
            self._progress.close()


def _duration(seconds: float) -> str:
    if seconds != seconds:
        return "?"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
