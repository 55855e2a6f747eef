"""The hooks of a run and what they see: :class:`Callback` and :class:`Run`.

The engine's loop (:func:`fedjax_avail.simulate`) compiles a chunk of rounds, runs it and hands
the chunk to the callbacks, in the order they are listed, at four points:

1. ``on_run_start(run)``: once, before anything is compiled (a resumed run has its restored
   rounds, history and state already);
2. ``on_evaluation(run, rows)``: after each evaluation (round 0, every ``eval_every`` rounds,
   the last round; and the NaN row at the end of the chunk in which a single run diverged),
   ``rows`` holding the new history row of each run;
3. ``on_chunk_end(run, metrics)``: after each chunk and its evaluation, ``metrics`` the chunk's
   per-round metrics (each ``[length]``, ``[length, S]`` with S runs);
4. ``on_run_end(run)``: once, also when the run raises (``run.error`` holds the exception).

A callback reads the run and may end it early with :meth:`Run.stop`: the loop stops at that
chunk boundary (before the first chunk, when asked at run start or at round 0), after every
callback of the boundary has run (so a checkpoint is saved), and ``simulate`` returns the
results so far with ``Result.stopped`` set to the reason. This is the
shape of Keras' and pfl-research's callbacks, cut to the four hooks a round loop has.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from fedjax_avail.history import IN_BUDGET, History, within_budget
from fedjax_avail.results import Result


class Callback:
    """A no-op at every hook; subclass it and override the hooks you need.

    Read ``rows`` and ``run``, do not change them: every callback is handed the same objects.

    Example (log to any tracker, stop at a target accuracy)::

        class Log(fa.callbacks.Callback):
            def on_evaluation(self, run, rows):
                for seed, row in zip(run.seeds, rows):
                    tracker.log({f"seed{seed}/{k}": v for k, v in row.items()}, step=run.done)
                if rows[0].get("test_accuracy", 0.0) >= 0.9:
                    run.stop("reached 90% test accuracy")
    """

    def on_run_start(self, run: Run) -> None:
        """Before anything is compiled; ``run.done`` > 0 for a resumed run."""

    def on_evaluation(self, run: Run, rows: list[dict[str, float]]) -> None:
        """After an evaluation: ``rows[i]`` is run i's new history row (one run: one row)."""

    def on_chunk_end(self, run: Run, metrics: dict[str, np.ndarray]) -> None:
        """After a chunk of rounds (and its evaluation, if one was due)."""

    def on_run_end(self, run: Run) -> None:
        """At the end, also after an error (``run.error``); release what the callback holds."""


@dataclasses.dataclass(eq=False)
class Run:
    """A run in progress, as callbacks see it. Read it; end it with :meth:`stop` only.

    Attributes:
      rounds: R, the rounds asked for.
      seeds: one seed per run (S runs in one program; one run: a list of one).
      several: whether the run has a runs axis (a list of seeds, algorithms or processes).
      eval_every: rounds between evaluations.
      desc: the run's label (progress display).
      done: rounds completed so far.
      started_at: rounds done when this call began (> 0: resumed from a checkpoint).
      carry: the scan carry ``(algorithm state, availability cursor, health)``, each leaf with
        a leading ``[S]`` axis when ``several``. Its buffers are donated to the next chunk
        (updated in place): to keep a value (e.g. the best model), copy it
        (``jax.device_get``).
      histories: one :class:`History` per run.
      chunks: the per-round metrics of each chunk run so far (host arrays, each ``[length]``,
        ``[length, S]`` with several runs).
      reported_chunks: how many of ``chunks`` the history rows already summarise.
      diverged: per run, the round it diverged in, else None.
      timing: seconds so far (``compile``, ``run``, ``eval``, ``prepare``, ``earlier``).
      memory: bytes (``estimated``, ``held``, ``working_set``).
      stop_reason: set by :meth:`stop`.
      error: the exception the run raises at the end of this chunk, or raised (in
        ``on_run_end``), else None.
      start_time: ``time.perf_counter()`` when ``simulate`` was called (seconds; ``started_at``
        counts rounds).
    """

    rounds: int
    seeds: list[Any]
    several: bool
    eval_every: int
    desc: str | None
    carry: Any
    done: int = 0
    started_at: int = 0
    histories: list[History] = dataclasses.field(default_factory=list)
    chunks: list[dict[str, np.ndarray]] = dataclasses.field(default_factory=list)
    reported_chunks: int = 0
    diverged: list[int | None] = dataclasses.field(default_factory=list)
    timing: dict[str, float] = dataclasses.field(default_factory=dict)
    memory: dict[str, int] = dataclasses.field(default_factory=dict)
    stop_reason: str | None = None
    error: BaseException | None = None
    start_time: float = dataclasses.field(default_factory=time.perf_counter)

    def __post_init__(self):
        count = len(self.seeds)
        self.histories = self.histories or [History() for _ in range(count)]
        self.diverged = self.diverged or [None] * count
        self.timing = {"compile": 0.0, "run": 0.0, "eval": 0.0, **self.timing}

    def stop(self, reason: str, error: Callable[[], BaseException] | None = None) -> None:
        """Ends the run at this chunk boundary (after the boundary's callbacks): ``simulate``
        returns the results so far, or raises ``error()`` when it is given (built once the
        reason is set, so the error's results carry it). The first stop holds, except that a
        stop with an error overrides one without (a divergence is never hidden)."""
        if self.stop_reason is not None and (self.error is not None or error is None):
            return
        self.stop_reason = reason
        self.error = error() if error is not None else None

    @property
    def params(self) -> Any:
        """The global model (a leading ``[S]`` axis when ``several``)."""
        return self.carry[0].params

    def label(self, i: int) -> str:
        """``"run i (seed s): "`` with several runs, else empty: a prefix for messages."""
        return f"run {i} (seed {self.seeds[i]}): " if self.several else ""

    def round_metrics(self, chunks: Sequence[dict[str, np.ndarray]] | None = None
                      ) -> list[dict[str, np.ndarray]]:
        """Each run's per-round metrics of ``chunks`` (default: all), joined once: a list of
        S dicts (one run: of one), each value ``[rounds]``."""
        joined = join_chunks(self.chunks if chunks is None else chunks)
        if not self.several:
            return [joined]
        return [{k: v[:, i] for k, v in joined.items()} for i in range(len(self.seeds))]

    def results(self) -> list[Result]:
        """One :class:`Result` per run, of what has been recorded so far."""
        timing = dict(self.timing, total=time.perf_counter() - self.start_time)
        timing.setdefault("earlier", 0.0)
        timing["s_per_round"] = timing["run"] / max(self.done - self.started_at, 1)
        memory = dict(self.memory)
        if "held" in memory:
            memory["measured"] = memory["held"] + memory.get("working_set", 0)
        out = []
        for i, (history, metrics) in enumerate(zip(self.histories, self.round_metrics(),
                                                   strict=True)):
            state = (jax.tree.map(lambda a, i=i: a[i], self.carry[0]) if self.several
                     else self.carry[0])
            if IN_BUDGET in metrics:
                history, metrics = within_budget(history, metrics)
            out.append(Result(state.params, history, metrics, state, dict(timing),
                              dict(memory), self.stop_reason))
        return out

    def result(self) -> Result | list[Result]:
        """:meth:`results`, as ``simulate`` returns them: a list with several runs."""
        results = self.results()
        return results if self.several else results[0]


def join_chunks(chunks: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Per-round metrics of consecutive chunks (each ``[length(, S)]``) joined along the round
    axis: each ``[rounds(, S)]``."""
    return {k: np.concatenate([c[k] for c in chunks]) for k in (chunks[0] if chunks else {})}


def dispatch(callbacks: Sequence[Callback], hook: str, *args: Any) -> None:
    """Calls ``hook`` on every callback, in order."""
    for callback in callbacks:
        getattr(callback, hook)(*args)


def run_end(callbacks: Sequence[Callback], run: Run) -> None:
    """``on_run_end`` of every callback, even when one raises (each releases what it holds);
    the first error is raised after all have run, unless the run already has one
    (``run.error``, which then goes on)."""
    errors = []
    for callback in callbacks:
        try:
            callback.on_run_end(run)
        except Exception as error:  # each callback must still get its call
            errors.append(error)
    if errors and run.error is None:
        raise errors[0]
