"""Hooks into a run: :class:`Callback`, the :class:`Run` it sees, and the built-in callbacks.

``fa.simulate(..., callbacks=[...])`` calls each callback at run start, after each evaluation,
after each chunk of rounds and at run end (:mod:`fedjax_avail.callbacks._callback`). The
engine's own concerns are callbacks too: Ctrl-C (:class:`StopOnCtrlC`), the divergence guard
(:class:`DivergenceGuard`), the progress display (:class:`ProgressDisplay`), memory
measurement and checkpointing (:class:`fedjax_avail.checkpoint.Checkpointing`); yours run after
the progress display and before the divergence guard and the checkpoint.
"""

from fedjax_avail.callbacks._callback import Callback, Run, dispatch, join_chunks
from fedjax_avail.callbacks._divergence import DivergenceGuard
from fedjax_avail.callbacks._interrupt import StopOnCtrlC, StopOnInterrupt
from fedjax_avail.callbacks._outputs import CSVLogger, TensorBoard
from fedjax_avail.callbacks._progress import Progress, ProgressDisplay

__all__ = [
    "CSVLogger",
    "Callback",
    "DivergenceGuard",
    "Progress",
    "ProgressDisplay",
    "Run",
    "StopOnCtrlC",
    "StopOnInterrupt",
    "TensorBoard",
    "dispatch",
    "join_chunks",
]
