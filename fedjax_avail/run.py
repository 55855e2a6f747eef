"""A run in progress, as the engine's loop and the callbacks see it."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from fedjax_avail.history import IN_BUDGET, History
from fedjax_avail.results import Interrupted, Result
from fedjax_avail.timeline import budget_end


@dataclasses.dataclass(eq=False)
class Run:
    """A run in progress, as callbacks see it. Read it; end it with :meth:`stop` only.

    Attributes:
      rounds: R, the rounds asked for.
      seeds: one seed per run (S runs in one program; one run: a list of one).
      several: whether the run has a runs axis (a list of seeds, algorithms or processes).
      desc: the run's label (progress display).
      carry: the scan carry ``(algorithm state, availability cursor, health)``, each leaf with
        a leading ``[S]`` axis when ``several``. Its buffers are donated to the next chunk
        (updated in place): to keep a value (e.g. the best model), copy it
        (``jax.device_get``).
      max_virtual_time: the virtual-time budget (None: rounds only).
      done: rounds completed so far (the compiled rounds; a run whose budget ended earlier
        changed nothing in the rounds after its end).
      started_at: rounds done when this call began (> 0: resumed from a checkpoint).
      histories: one :class:`History` per run.
      chunks: the per-round metrics of each chunk run so far (host arrays, each ``[length]``,
        ``[length, S]`` with several runs; a resumed run's restored rounds are the first).
      diverged: per run, the round it diverged in, else None.
      ended: per run, the rounds it ran before it ended on its own, else None: its
        virtual-time budget reached, or its asynchronous clock stalled (:func:`ended_at`);
        the rounds after it changed nothing.
      end_reasons: per run, why it ended (``Result.stopped``), else None.
      newly_ended: the runs that ended on their own in the last chunk.
      timing: seconds so far (``compile``, ``run``, ``eval``, ``prepare``, ``earlier``).
      memory: bytes (``estimated``, ``held``, ``working_set``) and the ``devices`` trained on.
      stop_reason: set by :meth:`stop`.
      failed: whether the stop carries an error (a divergence, a stall, Ctrl-C).
      error: the exception the run raises at the end of this boundary, or raised (in
        ``on_run_end``), else None.
      start_time: ``time.perf_counter()`` when ``simulate`` was called.
    """

    rounds: int
    seeds: list[Any]
    several: bool
    desc: str | None
    carry: Any
    max_virtual_time: float | None = None
    done: int = 0
    started_at: int = 0
    histories: list[History] = dataclasses.field(default_factory=list)
    chunks: list[dict[str, np.ndarray]] = dataclasses.field(default_factory=list)
    diverged: list[int | None] = dataclasses.field(default_factory=list)
    ended: list[int | None] = dataclasses.field(default_factory=list)
    end_reasons: list[str | None] = dataclasses.field(default_factory=list)
    newly_ended: list[int] = dataclasses.field(default_factory=list)
    timing: dict[str, float] = dataclasses.field(default_factory=dict)
    memory: dict[str, int] = dataclasses.field(default_factory=dict)
    stop_reason: str | None = None
    failed: bool = False
    error: BaseException | None = None
    start_time: float = dataclasses.field(default_factory=time.perf_counter)

    def __post_init__(self):
        count = len(self.seeds)
        self.histories = self.histories or [History() for _ in range(count)]
        self.diverged = self.diverged or [None] * count
        self.ended = self.ended or [None] * count
        self.end_reasons = self.end_reasons or [None] * count
        self.timing = {"compile": 0.0, "run": 0.0, "eval": 0.0, **self.timing}

    @property
    def complete(self) -> bool:
        """Every round ran, or every run ended on its own: nothing is left to run."""
        return self.done >= self.rounds or all(e is not None for e in self.ended)

    @property
    def finishing(self) -> bool:
        """This boundary is the run's last: it is complete, or a stop was asked."""
        return self.complete or self.stop_reason is not None

    def stop(self, reason: str, error: Callable[[], BaseException] | None = None) -> None:
        """Ends the run at this chunk boundary (after the boundary's callbacks and its due
        actions: the final evaluation and checkpoint): ``simulate`` returns the results so
        far, or raises ``error()`` when it is given (built once the reason is set, so the
        error's results carry it). A stop without an error when nothing is left to run (the
        last boundary, or ``on_run_end``) changes nothing: the run was not cut short. The first
        stop holds, except that a stop with an error overrides one without, and the run's own
        error (a divergence, a stall) overrides a Ctrl-C asked in the same chunk (a divergence
        is never hidden)."""
        if error is None and (self.complete or self.stop_reason is not None):
            return
        if self.failed and not isinstance(self.error, Interrupted):
            return
        self.stop_reason, self.failed = reason, error is not None
        self.error = error() if error is not None else None

    @property
    def params(self) -> Any:
        """The global model (a leading ``[S]`` axis when ``several``)."""
        return self.carry[0].params

    def label(self, i: int) -> str:
        """``"run i (seed s): "`` with several runs, else empty: a prefix for messages."""
        return f"run {i} (seed {self.seeds[i]}): " if self.several else ""

    def round_metrics(self, since: int = 0) -> list[dict[str, np.ndarray]]:
        """Each run's per-round metrics of rounds ``[since, done)``, joined: a list of S dicts
        (one run: of one), each value ``[rounds]``. Only the chunks from the one holding round
        ``since`` on are joined, so reading the rounds since the last evaluation stays cheap."""
        first, start = 0, 0  # the first chunk holding round `since`, and its first round
        while first < len(self.chunks) and start + _length(self.chunks[first]) <= since:
            start += _length(self.chunks[first])
            first += 1
        joined = {k: v[since - start:] for k, v in join_chunks(self.chunks[first:]).items()}
        if not self.several:
            return [joined]
        return [{k: v[:, i] for k, v in joined.items()} for i in range(len(self.seeds))]

    def record_ends(self, first: int) -> None:
        """Finds the runs that ended on their own in the rounds from ``first`` on (the last
        chunk): ``ended``, ``end_reasons`` and ``newly_ended``."""
        self.newly_ended = []
        for i, metrics in enumerate(self.round_metrics(first)):
            end = ended_at(metrics, self.max_virtual_time)
            if self.ended[i] is None and end is not None:
                self.ended[i], self.end_reasons[i] = first + end[0], end[1]
                self.newly_ended.append(i)

    def stopped(self, i: int) -> str | None:
        """Why run i ended before ``rounds`` (``Result.stopped``): an error (divergence,
        stall, Ctrl-C), its own end (its budget), a callback's stop; None when it ran them
        all (another run's divergence ending the call after it did included)."""
        cut_short = self.done < self.rounds and self.ended[i] is None
        if self.failed and (cut_short or self.diverged[i] is not None):
            return self.stop_reason
        end = self.ended[i]
        if end is not None and end < self.rounds:
            return self.end_reasons[i]
        if self.stop_reason is not None and self.done < self.rounds:
            return self.stop_reason
        return None

    def results(self) -> list[Result]:
        """One :class:`Result` per run, of what has been recorded so far; a run that ended on
        its own has the per-round metrics of the rounds it ran."""
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
            end = self.ended[i]
            metrics = {k: v if end is None else v[:end] for k, v in metrics.items()
                       if k != IN_BUDGET}
            out.append(Result(state.params, history, metrics, state, dict(timing), dict(memory),
                              self.stopped(i)))
        return out

    def result(self) -> Result | list[Result]:
        """:meth:`results`, as ``simulate`` returns them: a list with several runs."""
        results = self.results()
        return results if self.several else results[0]


def ended_at(metrics: dict[str, np.ndarray], budget: float | None
             ) -> tuple[int, str] | None:
    """Where a run ended on its own in its per-round metrics (``[R]`` each, from some round on):
    ``(rounds it ran, why)``. Its virtual-time budget (:func:`fedjax_avail.timeline.
    budget_end`), or a stall of its asynchronous clock (the updates before the first that could
    not gather its results: it and those after applied nothing); None while it goes on."""
    ends = []
    if budget is not None:
        end = budget_end(metrics[IN_BUDGET])
        if end is not None:
            ends.append((end, f"max_virtual_time={budget:g} reached"))
    if "stalled" in metrics and np.any(metrics["stalled"]):
        ends.append((int(np.argmax(metrics["stalled"])), "stalled"))
    return min(ends) if ends else None


def _length(chunk: dict[str, np.ndarray]) -> int:
    return len(next(iter(chunk.values())))


def join_chunks(chunks: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Per-round metrics of consecutive chunks (each ``[length(, S)]``) joined along the round
    axis: each ``[rounds(, S)]``."""
    return {k: np.concatenate([c[k] for c in chunks]) for k in (chunks[0] if chunks else {})}
