"""The hooks of a run: :class:`Callback`, and when the loop calls them.

The engine's loop (:func:`fedjax_avail.simulate`) compiles a chunk of rounds, runs it and hands
the boundary to the callbacks, in the order they are listed:

1. ``on_run_start(run)``: once, before any round is compiled (a resumed run has its restored
   rounds, history and state already);
2. ``on_chunk_end(run, metrics)``: after each chunk, ``metrics`` the chunk's per-round metrics
   (each ``[length]``, ``[length, S]`` with S runs);
3. ``on_due(run)``: then, for each callback with a :class:`~fedjax_avail.callbacks.Cadence`
   (the evaluation, checkpointing, your own) whose cadence is due at this boundary, in order;
   an action that records history rows (the evaluation) returns them, and every callback's
   ``on_evaluation(run, rows)`` sees them, ``rows[i]`` run i's new row (None for a run with no
   new row: one that its virtual-time budget ended earlier);
4. ``on_run_end(run)``: once, also when the run raises (``run.error`` holds the exception).

Before the first round, the actions due ``at_start`` run (the evaluation of the initial model).
A callback reads the run and may end it early with :meth:`fedjax_avail.Run.stop`: the boundary
completes (the actions due at the run's end, the final evaluation and checkpoint, included),
then the loop stops and ``simulate`` returns the results so far with ``Result.stopped`` set to
the reason. This is the shape of Keras' and pfl-research's callbacks and of CLU's periodic
actions, cut to the hooks a round loop has.
"""

from __future__ import annotations

import numpy as np

from fedjax_avail.callbacks._cadence import Cadence
from fedjax_avail.run import Run

Rows = list[dict[str, float] | None]


class Callback:
    """A no-op at every hook; subclass it and override the hooks you need.

    Read ``rows`` and ``run``, do not change them: every callback is handed the same objects.
    A periodic action sets ``cadence`` (a :class:`~fedjax_avail.callbacks.Cadence`) and
    overrides :meth:`on_due`.

    Example (log to any tracker, stop at a target accuracy)::

        class Log(fa.callbacks.Callback):
            def on_evaluation(self, run, rows):
                for seed, row in zip(run.seeds, rows):
                    if row is not None:
                        tracker.log({f"seed{seed}/{k}": v for k, v in row.items()},
                                    step=row["round"])
                if rows[0] and rows[0].get("test_accuracy", 0.0) >= 0.9:
                    run.stop("reached 90% test accuracy")
    """

    cadence: Cadence | None = None

    def on_run_start(self, run: Run) -> None:
        """Before any round is compiled (after the evaluation's evaluators, listed first);
        ``run.done`` > 0 for a resumed run."""

    def on_chunk_end(self, run: Run, metrics: dict[str, np.ndarray]) -> None:
        """After a chunk of rounds, before the boundary's due actions."""

    def on_due(self, run: Run) -> Rows | None:
        """When ``cadence`` is due; returns the history rows it recorded, if any."""

    def on_evaluation(self, run: Run, rows: Rows) -> None:
        """After an evaluation: ``rows[i]`` is run i's new history row (one run: one row)."""

    def on_run_end(self, run: Run) -> None:
        """At the end, also after an error (``run.error``); release what the callback holds."""
