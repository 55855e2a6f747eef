"""Hooks into a run: :class:`Callback`, the :class:`Run` it sees, and the built-in callbacks.

``fa.simulate(..., callbacks=[...])`` calls each callback at run start, after each evaluation,
after each chunk of rounds and at run end (:mod:`fedjax_avail.callbacks._callback`). The
engine's own concerns are callbacks of this package too, in this order: Ctrl-C
(:class:`StopOnCtrlC`), memory measurement (:class:`MeasureHeld`), the progress display
(:class:`ProgressDisplay`), then yours, then the divergence guard (:class:`DivergenceGuard`),
the stall guard of asynchronous runs (:class:`StallGuard`), the virtual-time budget
(:class:`TimeBudget`) and checkpointing (:class:`Checkpointing`).
"""

from fedjax_avail.callbacks._budget import TimeBudget
from fedjax_avail.callbacks._callback import Callback, Run
from fedjax_avail.callbacks._checkpointing import Checkpointing
from fedjax_avail.callbacks._divergence import DivergenceGuard
from fedjax_avail.callbacks._interrupt import StopOnCtrlC
from fedjax_avail.callbacks._memory import MeasureHeld
from fedjax_avail.callbacks._outputs import CSVLogger, TensorBoard
from fedjax_avail.callbacks._progress import ProgressDisplay
from fedjax_avail.callbacks._stall import StallGuard

__all__ = [
    "CSVLogger",
    "Callback",
    "Checkpointing",
    "DivergenceGuard",
    "MeasureHeld",
    "ProgressDisplay",
    "Run",
    "StallGuard",
    "StopOnCtrlC",
    "TensorBoard",
    "TimeBudget",
]
