"""The divergence guard: a NaN or Inf stops the run, naming the round, keeping its history."""

from __future__ import annotations

import math

import numpy as np

from fedjax_avail.callbacks._callback import Callback
from fedjax_avail.results import DivergenceError
from fedjax_avail.run import Run


def _error(run: Run, message: str, round_index: int) -> DivergenceError:
    return DivergenceError(f"{message}. Error.result holds the history so far.", run.result(),
                           round_index, run.diverged)


class DivergenceGuard(Callback):
    """Ends the run with :class:`fedjax_avail.DivergenceError` when the model or the training
    loss is not finite.

    The engine records, per run, the first round whose global model was not finite (a flag
    carried in the scan: ``run.diverged``). One run stops at the end of that chunk, after its
    final (NaN) history row; with several runs a diverged run is no longer scored (its rows are
    NaN) and the others finish first (or until a callback stops the run), then the error names
    every seed that diverged and its round; a restored run that had finished with diverged seeds
    raises it again.
    """

    def on_run_start(self, run: Run) -> None:
        if run.complete:  # a finished run restored: report what it recorded
            self._report_diverged_runs(run)

    def on_chunk_end(self, run: Run, metrics: dict[str, np.ndarray]) -> None:
        first = run.diverged[0]
        if not run.several and first is not None:
            run.stop("diverged", lambda: _error(
                run, "the global model or a state vector (e.g. a client's loss) became NaN/Inf "
                f"in round {first} (the run diverged; try a smaller client_lr or server_lr, and "
                "check the data)", first))
        elif run.finishing:
            self._report_diverged_runs(run)

    def on_evaluation(self, run: Run, rows: list[dict[str, float] | None]) -> None:
        for i, row in enumerate(rows):
            if row is None or run.diverged[i] is not None or math.isfinite(row["train_loss"]):
                continue
            at, loss = int(row["round"]), row["train_loss"]
            run.diverged[i] = at
            if at == 0:
                run.stop("diverged", lambda i=i, loss=loss: _error(
                    run, f"{run.label(i)}the training loss of the initial model (round 0) is "
                    f"{loss}: the task's init or loss gives NaN/Inf before any training (check "
                    "the model and the data)", 0))
            elif not run.several:
                run.stop("diverged", lambda at=at, loss=loss: _error(
                    run, f"the training loss is {loss} after round {at} while the model is "
                    "finite (the loss overflows)", at))
        if run.finishing:
            self._report_diverged_runs(run)

    @staticmethod
    def _report_diverged_runs(run: Run) -> None:
        """With several runs, ends the run with an error naming every seed that diverged."""
        bad = [(i, r) for i, r in enumerate(run.diverged) if r is not None]
        if bad and run.several:
            run.stop("diverged", lambda: _error(
                run, "runs diverged (the global model or the training loss became NaN/Inf): "
                + ", ".join(f"run {i} (seed {run.seeds[i]}) in round {r}" for i, r in bad)
                + "; the other runs finished", min(r for _, r in bad)))
