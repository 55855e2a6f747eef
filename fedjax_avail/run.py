"""A run in progress, as the engine's loop and the callbacks see it."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from fedjax_avail.history import IN_BUDGET, History
from fedjax_avail.results import Result


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
      ended: per run, the rounds it ran before its virtual-time budget ended it, else None.
      newly_ended: the runs whose budget ended them in the last chunk.
      timing: seconds so far (``compile``, ``run``, ``eval``, ``prepare``, ``earlier``).
      memory: bytes (``estimated``, ``held``, ``working_set``).
      stop_reason: set by :meth:`stop`.
      error: the exception the run raises at the end of this boundary, or raised (in
        ``on_run_end``), else None.
      start_time: ``time.perf_counter()`` when ``simulate`` was called (seconds; ``started_at``
        counts rounds).
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
    newly_ended: list[int] = dataclasses.field(default_factory=list)
    timing: dict[str, float] = dataclasses.field(default_factory=dict)
    memory: dict[str, int] = dataclasses.field(default_factory=dict)
    stop_reason: str | None = None
    error: BaseException | None = None
    start_time: float = dataclasses.field(default_factory=time.perf_counter)

    def __post_init__(self):
        count = len(self.seeds)
        self.histories = self.histories or [History() for _ in range(count)]
        self.diverged = self.diverged or [None] * count
        self.ended = self.ended or [None] * count
        self.timing = {"compile": 0.0, "run": 0.0, "eval": 0.0, **self.timing}

    @property
    def complete(self) -> bool:
        """Every round ran, or every run's budget ended it: nothing is left to run."""
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
        stop holds, except that a stop with an error overrides one without (a divergence is
        never hidden)."""
        if error is None and (self.complete or self.stop_reason is not None):
            return
        if self.error is not None:
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

    def stopped(self, i: int) -> str | None:
        """Why run i ended before ``rounds``: its own budget, a stop, or None."""
        end = self.ended[i]
        if end is not None and end < self.rounds:
            return f"max_virtual_time={self.max_virtual_time:g} reached"
        if self.stop_reason is not None and (self.error is not None or self.done < self.rounds):
            return self.stop_reason
        return None

    def results(self) -> list[Result]:
        """One :class:`Result` per run, of what has been recorded so far; a run that its
        budget ended has the per-round metrics of the rounds it ran."""
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
                ran = int(np.sum(metrics[IN_BUDGET]))  # the rounds that ran are a prefix
                metrics = {k: v[:ran] for k, v in metrics.items() if k != IN_BUDGET}
            out.append(Result(state.params, history, metrics, state, dict(timing), dict(memory),
                              self.stopped(i)))
        return out

    def result(self) -> Result | list[Result]:
        """:meth:`results`, as ``simulate`` returns them: a list with several runs."""
        results = self.results()
        return results if self.several else results[0]


def _length(chunk: dict[str, np.ndarray]) -> int:
    return len(next(iter(chunk.values())))


def join_chunks(chunks: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Per-round metrics of consecutive chunks (each ``[length(, S)]``) joined along the round
    axis: each ``[rounds(, S)]``."""
    return {k: np.concatenate([c[k] for c in chunks]) for k in (chunks[0] if chunks else {})}
