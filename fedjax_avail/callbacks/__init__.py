"""Hooks into a run: :class:`Callback`, its :class:`Cadence`, and the built-in callbacks.

``fa.simulate(..., callbacks=[...])`` calls each callback at run start, after each chunk of
rounds, after each evaluation and at run end; a callback with a cadence also acts when it is
due (:mod:`fedjax_avail.callbacks._callback`). The engine's own concerns are callbacks of this
package, in this order: Ctrl-C (:class:`StopOnCtrlC`), memory measurement (:class:`MeasureHeld`),
the progress display (:class:`ProgressDisplay`), the evaluation (:class:`Evaluation`), then
yours, then the divergence guard (:class:`DivergenceGuard`), the stall guard of asynchronous runs
(:class:`StallGuard`) and checkpointing (:class:`Checkpointing`).
"""

from fedjax_avail.callbacks._cadence import Cadence
from fedjax_avail.callbacks._callback import Callback
from fedjax_avail.callbacks._checkpointing import Checkpointing
from fedjax_avail.callbacks._divergence import DivergenceGuard
from fedjax_avail.callbacks._evaluation import Evaluation
from fedjax_avail.callbacks._interrupt import StopOnCtrlC
from fedjax_avail.callbacks._memory import MeasureHeld
from fedjax_avail.callbacks._outputs import CSVLogger, TensorBoard
from fedjax_avail.callbacks._progress import ProgressDisplay
from fedjax_avail.callbacks._stall import StallGuard

__all__ = [
    "CSVLogger",
    "Cadence",
    "Callback",
    "Checkpointing",
    "DivergenceGuard",
    "Evaluation",
    "MeasureHeld",
    "ProgressDisplay",
    "StallGuard",
    "StopOnCtrlC",
    "TensorBoard",
]
