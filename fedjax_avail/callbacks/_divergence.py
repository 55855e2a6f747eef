"""The divergence guard: a NaN or Inf stops the run, naming the round, keeping its history."""

from __future__ import annotations

import math

import numpy as np

from fedjax_avail.callbacks._callback import Callback, Run
from fedjax_avail.results import DivergenceError


def _error(run: Run, message: str, round_index: int) -> DivergenceError:
    return DivergenceError(f"{message}. Error.result holds the history so far.", run.result(),
                           round_index)


class DivergenceGuard(Callback):
    """Raises :class:`fedjax_avail.DivergenceError` when the model or the training loss is not
    finite.

    The engine records, per run, the first round whose global model was not finite (a flag
    carried in the scan: ``run.diverged``). One run stops at the end of that chunk; with
    several runs a diverged run is no longer scored (its rows are NaN) and the others finish
    first (or until a callback stops the run), then the error names every seed that diverged
    and its round; a restored run that had finished with diverged seeds raises it again.
    """

    def on_evaluation(self, run: Run, rows: list[dict[str, float]]) -> None:
        for i, row in enumerate(rows):
            loss = row["train_loss"]
            if run.diverged[i] is not None or math.isfinite(loss):
                continue
            if run.done == 0:
                raise _error(run, f"{run.label(i)}the training loss of the initial model "
                             f"(round 0) is {loss}: the task's init or loss gives NaN/Inf "
                             "before any training (check the model and the data)", 0)
            if not run.several:
                raise _error(run, f"the training loss is {loss} after round {run.done} while "
                             "the model is finite (the loss overflows)", run.done)
            run.diverged[i] = run.done

    def on_run_start(self, run: Run) -> None:
        if run.done == run.rounds:  # a finished run restored: report what it recorded
            self._report_diverged_runs(run)

    def on_chunk_end(self, run: Run, metrics: dict[str, np.ndarray]) -> None:
        first = run.diverged[0]
        if not run.several and first is not None:
            raise _error(run, "the global model or a state vector (e.g. a client's loss) "
                         f"became NaN/Inf in round {first} (the run diverged; try a smaller "
                         "client_lr or server_lr, and check the data)", first)
        if run.done == run.rounds or run.stop_reason is not None:
            self._report_diverged_runs(run)

    @staticmethod
    def _report_diverged_runs(run: Run) -> None:
        """With several runs, ends the run with an error naming every seed that diverged."""
        bad = [(i, r) for i, r in enumerate(run.diverged) if r is not None]
        if bad:
            run.stop("diverged", lambda: _error(
                run, "runs diverged (the global model or the training loss became NaN/Inf): "
                + ", ".join(f"run {i} (seed {run.seeds[i]}) in round {r}" for i, r in bad)
                + "; the other runs finished", min(r for _, r in bad)))
