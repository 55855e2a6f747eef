"""What a run gives back: :class:`Result`, and the two ways a run ends early with one."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from fedjax_avail.history import History


@dataclasses.dataclass
class Result:
    """What :func:`fedjax_avail.simulate` returns.

    Attributes:
      params: the final global model.
      history: per-evaluation metrics (round 0 is the initial model).
      round_metrics: per-round metrics, each ``[R]`` (``num_available``, ``num_selected``, ...).
      state: the algorithm's final state.
      timing: seconds: ``compile`` (all compilations), ``run`` (rounds, compile excluded),
        ``eval`` (evaluations), ``prepare`` (an algorithm's one-off pass before round 0, e.g.
        DivFL's gradients of all clients, compile included), ``total`` (wall time of
        ``simulate``); ``s_per_round`` = run / R
        (rounds run by this call: a resumed run times only what it ran); ``earlier``: the
        wall time of the earlier calls that made the checkpoint a resumed run continued from
        (0 for a run that was not resumed), so ``total + earlier`` is the run's whole time.
      memory: ``estimated`` device bytes (:func:`fedjax_avail.estimate_memory`); ``held``: bytes
        of the device arrays this run held after its first chunk (data, states); ``working_set``:
        XLA's temporary buffers of the compiled round chunk; ``measured`` = held + working set.
        Totals over a mesh's devices, as the estimate's: an array counts once per device
        holding a copy or part of it, the working set once per device running the program
        (measured over this process's devices: over several processes, its own share).
        ``devices``: how many devices the run trained on (a mesh's size, 1 without one;
        ``simulate``'s ``mesh="auto"`` chooses it); ``client_chunk``: the members each device
        trained at once (None: its whole share in one ``vmap``; ``client_chunk="auto"``
        chooses it).
      stopped: why the run ended before ``rounds`` (a callback's :meth:`Run.stop` reason), or
        None when it ran them all.
    """

    params: Any
    history: History
    round_metrics: dict[str, np.ndarray]
    state: Any
    timing: dict[str, float]
    memory: dict[str, int] = dataclasses.field(default_factory=dict)
    stopped: str | None = None


class DivergenceError(RuntimeError):
    """The run produced a NaN or Inf; ``.result`` holds everything recorded up to that point
    and ``.round`` is the round in which it happened (0: the initial model); ``.rounds``, per
    run, the round it diverged in, else None (one entry with one run)."""

    def __init__(self, message: str, result: Result | list[Result], round_index: int,
                 rounds: list[int | None] | None = None):
        super().__init__(message)
        self.result, self.round = result, round_index
        self.rounds = list(rounds) if rounds is not None else [round_index]


class StalledError(RuntimeError):
    """An asynchronous update could not gather its K results: the availability process will
    bring no client back (a trace played once has ended), or none came back for a long wait.
    ``.result`` holds everything recorded; ``.round`` is the first update that could not be made
    and ``.virtual_time`` the time the run stood still at; ``.rounds``, per run, the update it
    stalled at, else None (one entry with one run)."""

    def __init__(self, message: str, result: Result | list[Result], round_index: int,
                 virtual_time: float, rounds: list[int | None] | None = None):
        super().__init__(message)
        self.result, self.round, self.virtual_time = result, round_index, virtual_time
        self.rounds = list(rounds) if rounds is not None else [round_index]


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped the run at a chunk boundary; ``.result`` holds what was recorded.

    ``.checkpoint_dir`` is where the state was saved (None without checkpointing); calling
    ``simulate`` again with the same arguments resumes from it.
    """

    def __init__(self, message: str, result: Result | list[Result],
                 checkpoint_dir: Path | None):
        super().__init__(message)
        self.result, self.checkpoint_dir = result, checkpoint_dir
